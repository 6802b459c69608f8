//! The hook with std and ureq: sockets, sleeps, name resolution; libc's
//! semantics as the caller sees them; timeouts, cancellation, shutdown,
//! fd reuse, many parked fibers, plain threads beside hooked fibers.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{other_fiber_ran_during, rt, within, GatedServer};

fn hook() {
    spindle_hook::install().expect("the hook resolves in a test binary");
}

#[test]
fn install_succeeds_and_is_idempotent() {
    hook();
    assert!(spindle_hook::is_installed());
    hook();
}

#[test]
fn a_std_sleep_parks_only_its_fiber() {
    hook();
    let (ran, ()) =
        other_fiber_ran_during(|| std::thread::sleep(Duration::from_millis(200)), || {});
    assert!(ran, "the other fiber ran while std's sleep waited");
}

#[test]
fn a_hundred_std_sleeps_on_one_worker_all_sleep_at_once() {
    hook();
    let most = within(Duration::from_secs(30), || {
        rt(1).run(|| {
            let asleep = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let sleepers: Vec<_> = (0..100)
                .map(|_| {
                    let (asleep, most) = (asleep.clone(), most.clone());
                    spindle::spawn(move || {
                        let now = asleep.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(100));
                        asleep.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            sleepers.into_iter().for_each(|s| s.join().unwrap());
            most.load(Ordering::SeqCst)
        })
    });
    assert_eq!(most, 100, "every std sleep was in progress at once");
}

#[test]
fn std_net_client_and_server_share_one_worker() {
    hook();
    let echoed = within(Duration::from_secs(30), || {
        rt(1).run(|| {
            // A blocking std listener and blocking std streams, all fibers
            // of one worker: each wait must park its fiber.
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = spindle::spawn(move || {
                let mut handlers = Vec::new();
                for _ in 0..20 {
                    let (mut s, _) = listener.accept().unwrap();
                    handlers.push(spindle::spawn(move || {
                        let mut buf = [0u8; 64];
                        let n = s.read(&mut buf).unwrap();
                        s.write_all(&buf[..n]).unwrap();
                    }));
                }
                handlers.into_iter().for_each(|h| h.join().unwrap());
            });
            let clients: Vec<_> = (0..20)
                .map(|i| {
                    spindle::spawn(move || {
                        let mut s = TcpStream::connect(addr).unwrap();
                        let msg = format!("hello {i}");
                        s.write_all(msg.as_bytes()).unwrap();
                        let mut back = String::new();
                        s.read_to_string(&mut back).unwrap();
                        back == msg
                    })
                })
                .collect();
            let ok = clients
                .into_iter()
                .map(|c| c.join().unwrap())
                .filter(|ok| *ok)
                .count();
            server.join().unwrap();
            ok
        })
    });
    assert_eq!(echoed, 20);
}

#[test]
fn a_blocking_read_parks_while_another_fiber_writes_the_answer() {
    hook();
    let (a, b) = UnixStream::pair().unwrap();
    // The reader's own timeout ends the test without the hook.
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (ran, got) = other_fiber_ran_during(
        move || {
            let mut a = a;
            let mut buf = [0u8; 5];
            a.read_exact(&mut buf).map(|()| buf)
        },
        move || {
            let mut b = b;
            b.write_all(b"ready").unwrap();
        },
    );
    assert!(ran);
    assert_eq!(&got.unwrap(), b"ready");
}

#[test]
fn ureq_from_two_hundred_fibers_on_two_workers_all_in_flight_at_once() {
    hook();
    // The server answers only once all 200 requests are in flight at once.
    let server = GatedServer::start(200, Duration::from_secs(10));
    let url = format!("http://{}/", server.addr);
    let oks = within(Duration::from_secs(60), move || {
        rt(2).run(move || {
            let fibers: Vec<_> = (0..200)
                .map(|_| {
                    let url = url.clone();
                    spindle::spawn(move || {
                        let agent: ureq::Agent = ureq::Agent::config_builder()
                            .http_status_as_error(false)
                            .build()
                            .into();
                        let mut r = agent.get(&url).call().unwrap();
                        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
                    })
                })
                .collect();
            fibers
                .into_iter()
                .map(|f| f.join().unwrap())
                .filter(|(status, body)| *status == 200 && body == "all at once\n")
                .count()
        })
    });
    assert_eq!(oks, 200);
}

#[test]
fn localhost_resolves_on_a_fiber_through_the_blocking_pool() {
    hook();
    use std::net::ToSocketAddrs;
    let (addrs, dump) = within(Duration::from_secs(30), || {
        rt(1).run(|| {
            let addrs: Vec<_> = ("localhost", 80).to_socket_addrs().unwrap().collect();
            (addrs, spindle::blocking::threads().0)
        })
    });
    assert!(addrs.iter().any(|a| a.ip().is_loopback()), "{addrs:?}");
    assert!(dump >= 1, "the resolution ran on a pool thread");
}

#[test]
fn the_owners_blocking_mode_is_untouched_and_a_plain_thread_sharing_the_fd_still_blocks() {
    hook();
    let got = within(Duration::from_secs(30), || {
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        // SAFETY: F_GETFL on our own fd.
        let flags_before = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_eq!(flags_before & libc::O_NONBLOCK, 0);
        // A plain thread blocks in the kernel on the same open file.
        let thread_side = a.try_clone().unwrap();
        let thread = std::thread::spawn(move || {
            let mut s = thread_side;
            let mut buf = [0u8; 1];
            s.read_exact(&mut buf).unwrap();
            buf[0]
        });
        let fiber_byte = rt(1).run(move || {
            let reader = spindle::spawn(move || {
                let mut a = a;
                let mut buf = [0u8; 1];
                a.read_exact(&mut buf).unwrap();
                buf[0]
            });
            // Both wait now: the fiber parked, the fd's flags the owner's.
            spindle::time::sleep(Duration::from_millis(50));
            // SAFETY: F_GETFL on our own fd.
            let flags_during = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            assert_eq!(
                flags_during, flags_before,
                "F_GETFL shows what the owner set"
            );
            b.write_all(b"x").unwrap();
            spindle::time::sleep(Duration::from_millis(50));
            b.write_all(b"y").unwrap();
            reader.join().unwrap()
        });
        let mut got = [fiber_byte, thread.join().unwrap()];
        got.sort();
        got
    });
    // Whoever woke first took one byte; the other got the next.
    assert_eq!(&got, b"xy");
}

#[test]
fn a_non_blocking_fd_gets_eagain_as_its_owner_expects() {
    hook();
    let kind = rt(1).run(|| {
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut a = a;
        let mut buf = [0u8; 1];
        a.read(&mut buf).unwrap_err().kind()
    });
    assert_eq!(kind, ErrorKind::WouldBlock);
}

#[test]
fn so_rcvtimeo_ends_a_hooked_read_with_eagain_and_the_worker_runs_meanwhile() {
    hook();
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (ran, r) = other_fiber_ran_during(
        move || {
            let mut a = a;
            let mut buf = [0u8; 1];
            let start = Instant::now();
            (a.read(&mut buf).unwrap_err(), start.elapsed())
        },
        || {},
    );
    assert!(ran);
    let (err, took) = r;
    assert_eq!(err.raw_os_error(), Some(libc::EAGAIN), "{err}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
}

#[test]
fn a_hooked_read_cut_by_a_timeout_fails_with_etimedout() {
    hook();
    let err = rt(1).run(|| {
        let (mut a, _b) = UnixStream::pair().unwrap();
        let r = spindle::time::timeout(Duration::from_millis(50), || {
            let mut buf = [0u8; 1];
            a.read(&mut buf)
        });
        // The closure returned (the C call cannot unwind); the timeout is
        // still reported, and the call's own error says why.
        r.unwrap_err();
        let mut buf = [0u8; 1];
        let again = spindle::time::timeout(Duration::from_millis(50), || a.read(&mut buf));
        match again {
            Ok(r) => r.unwrap_err(),
            Err(_) => std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
        }
    });
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT));
}

#[test]
fn a_cancelled_hooked_read_fails_with_ecanceled() {
    hook();
    let (tx, rx) = mpsc::channel();
    rt(1).run(move || {
        let (a, _b) = UnixStream::pair().unwrap();
        let reader = spindle::spawn(move || {
            let mut a = a;
            let mut buf = [0u8; 1];
            let r = a.read(&mut buf);
            tx.send(r.map_err(|e| e.raw_os_error())).unwrap();
        });
        spindle::time::sleep(Duration::from_millis(20));
        reader.cancel();
        let _ = reader.join();
    });
    assert_eq!(rx.recv().unwrap(), Err(Some(libc::ECANCELED)));
}

#[test]
fn shutdown_ends_a_hooked_read_with_ecanceled() {
    hook();
    let (tx, rx) = mpsc::channel();
    let rt = rt(1);
    let (a, _b) = UnixStream::pair().unwrap();
    rt.spawn(move || {
        let mut a = a;
        let mut buf = [0u8; 1];
        let r = a.read(&mut buf);
        tx.send(r.map_err(|e| e.raw_os_error())).unwrap();
    });
    std::thread::sleep(Duration::from_millis(50));
    within(Duration::from_secs(20), move || {
        rt.shutdown_timeout(Duration::from_secs(5))
    });
    assert_eq!(rx.recv().unwrap(), Err(Some(libc::ECANCELED)));
}

#[test]
fn a_fiber_parked_in_a_hooked_call_at_a_stop_is_leaked_not_unwound_through_c() {
    hook();
    // The fiber ignores every error and calls again: it is still inside a
    // hooked call when the grace ends.
    let rt = rt(1);
    let (a, _b) = UnixStream::pair().unwrap();
    rt.spawn(move || {
        let mut a = a;
        let mut buf = [0u8; 1];
        loop {
            let _ = a.read(&mut buf);
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    // Returns (the process does not abort); the fiber is counted as left.
    within(Duration::from_secs(20), move || {
        rt.shutdown_timeout(Duration::from_millis(200))
    });
}

#[test]
fn the_dump_names_the_hooked_call_and_its_fd() {
    hook();
    let dump = rt(1).run(|| {
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let reader = spindle::spawn(move || {
            let mut a = a;
            let mut buf = [0u8; 1];
            let _ = a.read(&mut buf);
        });
        spindle::time::sleep(Duration::from_millis(20));
        let dump = spindle::dump().unwrap();
        reader.cancel();
        let _ = reader.join();
        (dump, fd)
    });
    let (text, fd) = dump;
    assert!(
        text.contains(&format!(
            "in hooked recv: waiting for fd {fd} to be readable"
        )),
        "{text}"
    );
}

#[test]
fn ten_thousand_fibers_parked_in_hooked_reads_at_once() {
    hook();
    let limit = common::raise_fd_limit();
    let n = if limit >= 25_000 {
        10_000
    } else {
        (limit as usize - 1000) / 2
    };
    let done = within(Duration::from_secs(120), move || {
        rt(2).run(move || {
            let pairs: Vec<_> = (0..n).map(|_| UnixStream::pair().unwrap()).collect();
            let parked = Arc::new(AtomicUsize::new(0));
            let mut writers = Vec::with_capacity(n);
            let readers: Vec<_> = pairs
                .into_iter()
                .map(|(a, b)| {
                    writers.push(b);
                    let parked = parked.clone();
                    spindle::spawn(move || {
                        let mut a = a;
                        let mut buf = [0u8; 1];
                        parked.fetch_add(1, Ordering::SeqCst);
                        a.read_exact(&mut buf).unwrap();
                        buf[0]
                    })
                })
                .collect();
            while parked.load(Ordering::SeqCst) < n {
                spindle::time::sleep(Duration::from_millis(5));
            }
            spindle::time::sleep(Duration::from_millis(50));
            let registered = spindle::stats().unwrap().wait_registrations;
            for w in &mut writers {
                w.write_all(b"!").unwrap();
            }
            let got = readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .filter(|b| *b == b'!')
                .count();
            (registered, got)
        })
    });
    assert!(done.0 >= n, "{} waits registered, {n} fibers", done.0);
    assert_eq!(done.1, n);
}

#[test]
fn closing_an_fd_wakes_its_hooked_reader_and_a_reused_number_starts_clean() {
    if !common::alone("closing_an_fd_wakes_its_hooked_reader_and_a_reused_number_starts_clean") {
        return;
    }
    hook();
    within(Duration::from_secs(30), || {
        rt(1).run(|| {
            let (a, b) = UnixStream::pair().unwrap();
            let fd = a.as_raw_fd();
            let _a = std::mem::ManuallyDrop::new(a); // its fd is closed below, by number
            let reader = spindle::spawn(move || {
                let mut buf = [0u8; 1];
                // SAFETY: `fd` stays open until the close below, which the
                // test makes while this read is parked.
                let mut s = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
                s.read(&mut buf).map_err(|e| e.raw_os_error())
            });
            spindle::time::sleep(Duration::from_millis(20));
            // Another fiber closes the number under it (libc's close).
            // SAFETY: closes the number the parked reader uses; its owner
            // (`_a`) is never dropped, so nothing closes it twice.
            unsafe { libc::close(fd) };
            assert_eq!(reader.join().unwrap(), Err(Some(libc::EBADF)));
            drop(b);
            // The new socket under the same number parks afresh: nothing
            // of the old registration wakes or fails it.
            let (c, mut d) = UnixStream::pair().unwrap();
            assert_eq!(c.as_raw_fd(), fd, "the lowest free number is reused");
            let reader = spindle::spawn(move || {
                let mut c = c;
                let mut buf = [0u8; 3];
                c.read_exact(&mut buf).unwrap();
                buf
            });
            spindle::time::sleep(Duration::from_millis(20));
            d.write_all(b"new").unwrap();
            assert_eq!(&reader.join().unwrap(), b"new");
        })
    });
}

#[test]
fn plain_threads_keep_libcs_behaviour_under_a_load_of_hooked_fibers() {
    hook();
    within(Duration::from_secs(60), || {
        let rt = rt(2);
        // Fibers ping-pong over hooked blocking sockets meanwhile.
        let load = rt.spawn(|| {
            let pairs: Vec<_> = (0..50)
                .map(|_| {
                    spindle::spawn(|| {
                        let (mut a, mut b) = UnixStream::pair().unwrap();
                        let echo = spindle::spawn(move || {
                            let mut buf = [0u8; 4];
                            for _ in 0..200 {
                                b.read_exact(&mut buf).unwrap();
                                b.write_all(&buf).unwrap();
                            }
                        });
                        let mut buf = [0u8; 4];
                        for _ in 0..200 {
                            a.write_all(b"ping").unwrap();
                            a.read_exact(&mut buf).unwrap();
                        }
                        echo.join().unwrap();
                    })
                })
                .collect();
            pairs.into_iter().for_each(|p| p.join().unwrap());
        });
        // Plain threads: a blocking read times out in the kernel with
        // EAGAIN, a sleep sleeps the thread.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let (mut a, _b) = UnixStream::pair().unwrap();
                    a.set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let start = Instant::now();
                    let e = a.read(&mut [0u8; 1]).unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
                    assert!(start.elapsed() >= Duration::from_millis(100));
                    let start = Instant::now();
                    std::thread::sleep(Duration::from_millis(50));
                    assert!(start.elapsed() >= Duration::from_millis(50));
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        load.join().unwrap();
    });
}

#[test]
fn a_std_sleep_follows_paused_time() {
    hook();
    let (real, virt) = within(Duration::from_secs(30), || {
        let rt = spindle::Runtime::builder()
            .workers(1)
            .start_paused(true)
            .build()
            .unwrap();
        rt.run(|| {
            let (real, virt) = (Instant::now(), spindle::time::now());
            std::thread::sleep(Duration::from_secs(3600));
            (real.elapsed(), spindle::time::now() - virt)
        })
    });
    assert!(virt >= Duration::from_secs(3600), "{virt:?}");
    assert!(real < Duration::from_secs(10), "{real:?}");
}

#[test]
fn a_child_after_fork_gets_libcs_calls() {
    hook();
    let status = rt(1).run(|| {
        // SAFETY: the child only calls async-signal-safe functions, then
        // `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // No runtime here: the sleep must be libc's, not a fiber park.
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            // SAFETY: a valid timespec; no remainder wanted.
            let rc = unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
            // SAFETY: ends the child without running the parent's state.
            unsafe { libc::_exit(if rc == 0 { 7 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        status
    });
    assert!(libc::WIFEXITED(status));
    assert_eq!(libc::WEXITSTATUS(status), 7);
}

/// The socket the SIGUSR1 handler below reads (blocking, 50 ms timeout).
static HANDLER_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
/// What its `recv` returned, and its errno.
static HANDLER_RESULT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

extern "C" fn blocking_handler(_sig: libc::c_int) {
    let fd = HANDLER_FD.load(Ordering::SeqCst);
    let mut b = 0u8;
    // SAFETY: a valid one-byte buffer; async-signal-safe.
    let n = unsafe { libc::recv(fd, (&mut b as *mut u8).cast(), 1, 0) };
    // SAFETY: errno of this thread.
    let e = unsafe { *libc::__errno_location() };
    HANDLER_RESULT.store(((n as i64) << 32) | e as i64, Ordering::SeqCst);
}

#[test]
fn a_call_inside_a_signal_handler_on_a_fiber_is_libcs() {
    hook();
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    HANDLER_FD.store(a.as_raw_fd(), Ordering::SeqCst);
    // SAFETY: installs a handler that only makes async-signal-safe calls.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = blocking_handler as *const () as usize;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
            0
        );
    }
    let (ran, ()) = other_fiber_ran_during(
        || {
            // Delivered to this thread, on this fiber's stack, before
            // `raise` returns.
            // SAFETY: our own handler is installed.
            unsafe { libc::raise(libc::SIGUSR1) };
        },
        || {},
    );
    drop(a);
    let r = HANDLER_RESULT.load(Ordering::SeqCst);
    assert_eq!((r >> 32) as i32, -1, "the handler's recv timed out");
    assert_eq!((r & 0xffff_ffff) as i32, libc::EAGAIN);
    assert!(
        !ran,
        "the handler's recv blocked the thread, as libc's: no fiber switch inside a handler"
    );
}

extern "C" fn quiet_handler(_sig: libc::c_int) {}

#[test]
fn sigaction_reports_the_programs_own_handler_not_the_hooks() {
    hook();
    // SAFETY: installs a handler that does nothing, then reads it back.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = quiet_handler as *const () as usize;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut()),
            0
        );
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old),
            0
        );
        assert_eq!(old.sa_sigaction, quiet_handler as *const () as usize);
        // `signal` answers with the same.
        let prev = libc::signal(libc::SIGUSR2, libc::SIG_IGN);
        assert_eq!(prev, quiet_handler as *const () as usize);
        assert_eq!(libc::signal(libc::SIGUSR2, libc::SIG_DFL), libc::SIG_IGN);
        // It still runs when the signal comes.
        libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut());
        libc::raise(libc::SIGUSR2);
    }
}
