//! TCP through the netpoller: many connections, concurrent halves, closes,
//! resets, timeouts, and the same socket from a plain thread.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle::net::{TcpListener, TcpStream};
use spindle::Runtime;

fn raise_nofile(want: u64) {
    let rl = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: plain syscall. Raising the hard limit needs root (CI is root);
    // if it fails, the soft limit is raised as far as the hard one allows.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut cur);
            cur.rlim_cur = cur.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &cur);
        }
    }
}

fn echo_server(listener: TcpListener) {
    for conn in listener.incoming() {
        let mut conn = match conn {
            Ok(c) => c,
            Err(_) => continue,
        };
        spindle::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

const CONNS: usize = 10_000;
const CHILD_ENV: &str = "SPINDLE_ECHO_CLIENTS_FOR";

/// The client side of the 10 000-connection test, in a child process (this
/// test binary re-executed): one process may hold only 20 000 fds here, and
/// both ends of 10 000 connections need that many.
#[test]
fn child_ten_thousand_echo_clients() {
    let Ok(addr) = std::env::var(CHILD_ENV) else {
        return;
    };
    raise_nofile(65_536);
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let rt = Runtime::builder().workers(1).build().unwrap();
    let ok = rt.run(move || {
        let connected = Arc::new(AtomicUsize::new(0));
        let clients: Vec<_> = (0..CONNS)
            .map(|i| {
                let connected = connected.clone();
                spindle::spawn(move || -> Result<(), String> {
                    let mut s =
                        TcpStream::connect(addr).map_err(|e| format!("connect {i}: {e}"))?;
                    connected.fetch_add(1, Ordering::SeqCst);
                    // Hold every connection open at once before talking.
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while connected.load(Ordering::SeqCst) < CONNS {
                        if Instant::now() > deadline {
                            return Err("not all clients connected in 60 s".into());
                        }
                        spindle::time::sleep(Duration::from_millis(5));
                    }
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let msg = format!("hello from client {i}\n");
                    s.write_all(msg.as_bytes()).map_err(|e| e.to_string())?;
                    let mut back = vec![0u8; msg.len()];
                    s.read_exact(&mut back)
                        .map_err(|e| format!("read {i}: {e}"))?;
                    if back != msg.as_bytes() {
                        return Err(format!("client {i} got {back:?}"));
                    }
                    Ok(())
                })
            })
            .collect();
        let mut ok = 0;
        for h in clients {
            match h.join().unwrap() {
                Ok(()) => ok += 1,
                Err(e) => eprintln!("{e}"),
            }
        }
        ok
    });
    println!("ECHOED {ok}");
    assert_eq!(ok, CONNS);
}

#[test]
fn echo_with_ten_thousand_concurrent_connections() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    raise_nofile(65_536);
    let rt = Runtime::builder().workers(1).build().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let s2 = served.clone();
    let addr = rt.run(move || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        spindle::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let served = s2.clone();
                spindle::spawn(move || {
                    let mut buf = [0u8; 256];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        addr
    });
    let out = common::this_test_binary()
        .args([
            "child_ten_thousand_echo_clients",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, addr.to_string())
        .output()
        .expect("client process runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "clients failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("ECHOED {CONNS}")), "{stdout}");
    assert!(served.load(Ordering::SeqCst) >= CONNS);
}

#[test]
fn data_then_shutdown_in_one_edge_reads_to_the_end_promptly() {
    // A short read marks the stream drained, so the next read waits for an
    // edge first. If the peer's data and FIN arrived together (one edge,
    // already consumed), no edge follows: the sticky read-closed state must
    // let the next read see EOF at once instead of waiting for the timeout.
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            std::thread::sleep(Duration::from_millis(50)); // server parks in read
            s.write_all(b"last words").unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        });
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 1024];
        let n = (&conn).read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"last words");
        assert_eq!((&conn).read(&mut buf).unwrap(), 0, "EOF after the data");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "EOF took {:?}: the read waited for an edge that never came",
            started.elapsed()
        );
        peer.join().unwrap();
    });
}

#[test]
fn wait_readable_then_read_after_a_short_read_does_not_hang() {
    // wait_readable takes the edge that a read after a short read would
    // otherwise wait for: that read must go straight to recv.
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"a").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            s.write_all(b"b").unwrap();
            std::thread::sleep(Duration::from_millis(500));
        });
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!((&conn).read(&mut buf).unwrap(), 1); // short: drained
        conn.wait_readable().unwrap(); // parks until "b", taking its edge
        assert_eq!((&conn).read(&mut buf).unwrap(), 1, "the read found b");
        assert_eq!(buf[0], b'b');
        peer.join().unwrap();
    });
}

#[test]
fn a_reader_and_a_writer_fiber_share_one_stream() {
    spindle::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        spindle::spawn(move || echo_server(listener));
        let stream = Arc::new(TcpStream::connect(addr).unwrap());
        const TOTAL: usize = 4 << 20; // more than the socket buffers hold
        let w = stream.clone();
        let writer = spindle::spawn(move || {
            let chunk = vec![7u8; 64 * 1024];
            let mut sent = 0;
            while sent < TOTAL {
                (&*w).write_all(&chunk).unwrap();
                sent += chunk.len();
            }
        });
        let mut got = 0;
        let mut buf = vec![0u8; 64 * 1024];
        while got < TOTAL {
            let n = (&*stream).read(&mut buf).unwrap();
            assert!(buf[..n].iter().all(|&b| b == 7));
            got += n;
        }
        writer.join().unwrap();
        assert_eq!(got, TOTAL);
    });
}

#[test]
fn closing_an_fd_wakes_the_fiber_parked_on_it() {
    spindle::run(|| {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&a);
        let owned: std::os::fd::OwnedFd = a.into();
        let waiter = spindle::spawn(move || spindle::io::wait_readable(fd, None));
        spindle::time::sleep(Duration::from_millis(20));
        let start = Instant::now();
        spindle::io::close(owned);
        let err = waiter.join().unwrap().expect_err("the close ends the wait");
        assert_eq!(err.kind(), ErrorKind::ConnectionAborted);
        assert!(start.elapsed() < Duration::from_secs(1));
    });
}

#[test]
fn a_peer_reset_fails_only_that_stream() {
    spindle::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let victim = TcpStream::connect(addr).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let healthy = TcpStream::connect(addr).unwrap();
        let (healthy_server, _) = listener.accept().unwrap();
        // Abort the connection: SO_LINGER 0 makes close send a RST.
        socket2::SockRef::from(&victim)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(victim);
        let mut buf = [0u8; 8];
        let err = (&server_side).read(&mut buf).expect_err("reset");
        assert_eq!(err.kind(), ErrorKind::ConnectionReset);
        // The other connection is untouched.
        (&healthy).write_all(b"ok").unwrap();
        let mut two = [0u8; 2];
        (&healthy_server).read_exact(&mut two).unwrap();
        assert_eq!(&two, b"ok");
    });
}

#[test]
fn a_half_closed_peer_reads_as_eof_and_can_still_be_written() {
    spindle::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().unwrap();
        (&client).write_all(b"last words").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        (&server).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
        (&server).write_all(b"reply").unwrap();
        let mut reply = [0u8; 5];
        (&client).read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"reply");
    });
}

#[test]
fn connecting_to_a_closed_port_is_refused_at_once() {
    spindle::run(|| {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let start = Instant::now();
        let err = TcpStream::connect(("127.0.0.1", port)).expect_err("nobody listens");
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
        assert!(start.elapsed() < Duration::from_secs(1));
    });
}

#[test]
fn connect_timeout_fires_when_the_backlog_is_full() {
    spindle::run(|| {
        // A listener with the smallest backlog that never accepts: once its
        // queue is full the kernel drops further SYNs and connects hang.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        sock.listen(0).unwrap();
        let addr = sock.local_addr().unwrap().as_socket().unwrap();
        let mut held = Vec::new();
        let mut timed_out = false;
        for _ in 0..64 {
            let start = Instant::now();
            match TcpStream::connect_timeout(addr, Duration::from_millis(200)) {
                Ok(s) => held.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
                    let took = start.elapsed();
                    assert!(took >= Duration::from_millis(190), "{took:?}");
                    assert!(took < Duration::from_secs(2), "{took:?}");
                    timed_out = true;
                    break;
                }
            }
        }
        assert!(
            timed_out,
            "the backlog never filled ({} connected)",
            held.len()
        );
    });
}

#[test]
fn read_and_write_timeouts_are_deadlines() {
    spindle::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (_server, _) = listener.accept().unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let start = Instant::now();
        let err = (&client).read(&mut [0u8; 8]).expect_err("no data comes");
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(45));
        // Nobody reads on the other side: the buffers fill, then the write
        // deadline passes.
        client
            .set_write_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let chunk = vec![0u8; 1 << 20];
        let err = loop {
            if let Err(e) = (&client).write(&chunk) {
                break e;
            }
        };
        assert_eq!(err.kind(), ErrorKind::TimedOut);
    });
}

#[test]
fn the_same_stream_works_from_a_plain_thread() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (client, server) = rt.run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    });
    // The server half stays on a fiber, the client half moves to a thread.
    let echo = rt.spawn(move || {
        let mut buf = [0u8; 5];
        (&server).read_exact(&mut buf).unwrap();
        (&server).write_all(&buf).unwrap();
    });
    let t = std::thread::spawn(move || {
        (&client).write_all(b"plain").unwrap();
        let mut back = [0u8; 5];
        (&client).read_exact(&mut back).unwrap(); // blocks the thread
        back
    });
    assert_eq!(&t.join().unwrap(), b"plain");
    echo.join().unwrap();
}

#[test]
fn localhost_is_resolved_off_the_worker() {
    spindle::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = spindle::spawn(move || listener.accept().map(|_| ()));
        let s = TcpStream::connect(("localhost", port)).unwrap();
        assert!(s.peer_addr().unwrap().ip().is_loopback());
        accept.join().unwrap().unwrap();
    });
}

#[test]
fn udp_and_unix_sockets_park_too() {
    spindle::run(|| {
        let a = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = b.local_addr().unwrap();
        let rx = spindle::spawn(move || {
            let mut buf = [0u8; 8];
            b.recv_from(&mut buf).map(|(n, _)| buf[..n].to_vec())
        });
        spindle::time::sleep(Duration::from_millis(10));
        a.send_to(b"udp", to).unwrap();
        assert_eq!(rx.join().unwrap().unwrap(), b"udp");

        let (x, y) = spindle::net::UnixStream::pair().unwrap();
        let reader = spindle::spawn(move || {
            let mut buf = [0u8; 4];
            (&y).read_exact(&mut buf).map(|_| buf)
        });
        spindle::time::sleep(Duration::from_millis(10));
        (&x).write_all(b"unix").unwrap();
        assert_eq!(&reader.join().unwrap().unwrap(), b"unix");
    });
}

#[test]
fn wait_readable_after_a_short_read_waits_for_the_next_byte_and_for_no_longer_than_the_timeout() {
    spindle::run(|| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"ab").unwrap();
        let mut buf = [0u8; 16];
        // A short read: the receive queue is empty, the next byte is an edge.
        assert_eq!((&c).read(&mut buf).unwrap(), 2);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let writer = spindle::spawn(move || {
            spindle::time::sleep(Duration::from_millis(50));
            s.write_all(b"c").unwrap();
            s
        });
        c.wait_readable().unwrap();
        assert_eq!((&c).read(&mut buf).unwrap(), 1);
        let mut s = writer.join().unwrap();
        // Short again, and nothing comes: the read timeout ends the wait.
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let err = c.wait_readable().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        // A byte already there: answered at once, and still readable.
        s.write_all(b"d").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.wait_readable().unwrap();
        c.wait_readable().unwrap();
        assert_eq!((&c).read(&mut buf).unwrap(), 1);
        assert_eq!(&buf[..1], b"d");
    });
}

/// Writing to a peer that has gone is an `EPIPE` error, never a `SIGPIPE`
/// that kills the process — even where the signal has its default action
/// (a Rust program ignores it; a C host, or a library that reset it, may
/// not), and for vectored writes too, which `writev` could not promise.
/// Checked in a child process, the only one whose `SIGPIPE` is set back to
/// the default.
#[test]
fn writes_to_a_gone_peer_fail_with_epipe_where_sigpipe_would_kill() {
    const NAME: &str = "writes_to_a_gone_peer_fail_with_epipe_where_sigpipe_would_kill";
    if std::env::var_os("SPINDLE_SIGPIPE_CHILD").is_none() {
        let out = common::this_test_binary()
            .args(["--exact", NAME, "--test-threads=1"])
            .env("SPINDLE_SIGPIPE_CHILD", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    // SAFETY: setting a signal's disposition to its default is a plain
    // syscall; this child process runs this one test on one thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    spindle::run(|| {
        use std::io::IoSlice;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        drop(server);
        // The first write may be taken before the peer's reset comes back;
        // the ones after it meet the closed connection.
        let mut errors = Vec::new();
        for i in 0..50 {
            let r = if i % 2 == 0 {
                (&client).write(b"x")
            } else {
                (&client).write_vectored(&[IoSlice::new(b"a"), IoSlice::new(b"b")])
            };
            if let Err(e) = r {
                errors.push(e.kind());
            }
            spindle::time::sleep(Duration::from_millis(1));
        }
        assert!(
            errors.contains(&ErrorKind::BrokenPipe),
            "no EPIPE among {errors:?}"
        );
        // A Unix stream's writes too.
        let (a, b) = spindle::net::UnixStream::pair().unwrap();
        drop(b);
        let err = (&a).write(b"x").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    });
}
