//! The hook's readiness waits and sleeps, as C code makes them: `poll` on
//! several fds (a private epoll instance), `poll` on one, `select`, their
//! timeouts; `usleep`, `clock_nanosleep` with an absolute deadline; a
//! blocking `writev` larger than the socket's buffer; `MSG_WAITALL`.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::other_fiber_ran_during;

fn hook() {
    spindle_hook::install().expect("the hook resolves in a test binary");
}

#[test]
fn poll_on_two_fds_parks_until_the_second_is_written() {
    hook();
    let (a1, _b1) = UnixStream::pair().unwrap();
    let (a2, b2) = UnixStream::pair().unwrap();
    let (ran, (rc, revents)) = other_fiber_ran_during(
        move || {
            let mut fds = [
                libc::pollfd {
                    fd: a1.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: a2.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) };
            (rc, [fds[0].revents, fds[1].revents])
        },
        move || {
            let mut b2 = b2;
            b2.write_all(b"!").unwrap();
        },
    );
    assert!(ran);
    assert_eq!(rc, 1);
    assert_eq!(revents[0], 0);
    // The kernel's own revents (the writer may have hung up by then).
    assert_ne!(revents[1] & libc::POLLIN, 0, "{revents:?}");
}

#[test]
fn poll_on_one_fd_times_out_with_zero_while_the_worker_runs() {
    hook();
    let (a, _b) = UnixStream::pair().unwrap();
    let (ran, (rc, took)) = other_fiber_ran_during(
        move || {
            let mut p = libc::pollfd {
                fd: a.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let start = Instant::now();
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut p, 1, 100) };
            (rc, start.elapsed())
        },
        || {},
    );
    assert!(ran);
    assert_eq!(rc, 0);
    assert!(took >= Duration::from_millis(100), "{took:?}");
}

#[test]
fn poll_with_no_fds_is_a_sleep() {
    hook();
    let (ran, rc) = other_fiber_ran_during(
        // SAFETY: no fds to read.
        || unsafe { libc::poll(std::ptr::null_mut(), 0, 50) },
        || {},
    );
    assert!(ran);
    assert_eq!(rc, 0);
}

#[test]
fn select_reports_the_written_fd_and_leaves_the_rest_of_its_timeout() {
    hook();
    let (a1, _b1) = UnixStream::pair().unwrap();
    let (a2, b2) = UnixStream::pair().unwrap();
    let (f1, f2) = (a1.as_raw_fd(), a2.as_raw_fd());
    let (ran, (rc, set1, set2, left)) = other_fiber_ran_during(
        move || {
            let _keep = (&a1, &a2);
            // SAFETY: fd sets built with libc's own macros.
            unsafe {
                let mut r: libc::fd_set = std::mem::zeroed();
                libc::FD_ZERO(&mut r);
                libc::FD_SET(f1, &mut r);
                libc::FD_SET(f2, &mut r);
                let mut tv = libc::timeval {
                    tv_sec: 10,
                    tv_usec: 0,
                };
                let rc = libc::select(
                    f1.max(f2) + 1,
                    &mut r,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut tv,
                );
                (
                    rc,
                    libc::FD_ISSET(f1, &r),
                    libc::FD_ISSET(f2, &r),
                    tv.tv_sec,
                )
            }
        },
        move || {
            let mut b2 = b2;
            b2.write_all(b"!").unwrap();
        },
    );
    assert!(ran);
    assert_eq!((rc, set1, set2), (1, false, true));
    assert!(left >= 8, "select left {left} s of its 10 s");
}

#[test]
fn usleep_and_an_absolute_clock_nanosleep_park_only_their_fiber() {
    hook();
    let (ran, ()) = other_fiber_ran_during(
        || {
            // SAFETY: plain integers.
            assert_eq!(unsafe { libc::usleep(50_000) }, 0);
        },
        || {},
    );
    assert!(ran);
    let (ran, took) = other_fiber_ran_during(
        || {
            let start = Instant::now();
            // SAFETY: valid timespecs.
            unsafe {
                let mut now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
                let mut at = now;
                at.tv_nsec += 80_000_000;
                if at.tv_nsec >= 1_000_000_000 {
                    at.tv_nsec -= 1_000_000_000;
                    at.tv_sec += 1;
                }
                let rc = libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &at,
                    std::ptr::null_mut(),
                );
                assert_eq!(rc, 0);
            }
            start.elapsed()
        },
        || {},
    );
    assert!(ran);
    assert!(took >= Duration::from_millis(75), "{took:?}");
}

#[test]
fn a_blocking_writev_larger_than_the_buffer_sends_every_byte() {
    hook();
    let (a, b) = UnixStream::pair().unwrap();
    let total = 4 << 20; // far more than a socket buffer holds
    let (ran, sent) = other_fiber_ran_during(
        move || {
            let chunk = vec![0x5au8; total / 2];
            let iov = [
                libc::iovec {
                    iov_base: chunk.as_ptr() as *mut _,
                    iov_len: chunk.len(),
                },
                libc::iovec {
                    iov_base: chunk.as_ptr() as *mut _,
                    iov_len: chunk.len(),
                },
            ];
            // SAFETY: two valid buffers.
            let sent = unsafe { libc::writev(a.as_raw_fd(), iov.as_ptr(), 2) };
            drop(a);
            sent
        },
        move || {
            let mut b = b;
            let mut all = Vec::new();
            b.read_to_end(&mut all).unwrap();
            assert_eq!(all.len(), total);
            assert!(all.iter().all(|&x| x == 0x5a));
        },
    );
    assert!(ran);
    assert_eq!(
        sent, total as isize,
        "one blocking writev queued every byte"
    );
}

#[test]
fn msg_waitall_fills_the_buffer_across_writes() {
    hook();
    let (a, b) = UnixStream::pair().unwrap();
    let (ran, (n, buf)) = other_fiber_ran_during(
        move || {
            let mut buf = [0u8; 6];
            // SAFETY: a valid buffer.
            let n =
                unsafe { libc::recv(a.as_raw_fd(), buf.as_mut_ptr().cast(), 6, libc::MSG_WAITALL) };
            (n, buf)
        },
        move || {
            let mut b = b;
            b.write_all(b"abc").unwrap();
            spindle::time::sleep(Duration::from_millis(20));
            b.write_all(b"def").unwrap();
        },
    );
    assert!(ran);
    assert_eq!(n, 6);
    assert_eq!(&buf, b"abcdef");
}

#[test]
fn a_unix_connect_into_a_full_backlog_waits_for_room() {
    hook();
    let dir = std::env::temp_dir().join(format!("spindle-hook-backlog-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    // SAFETY: a fresh socket, bound and listening with a backlog of 0.
    let listener = unsafe {
        use std::os::fd::FromRawFd;
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr
            .sun_path
            .iter_mut()
            .zip(dir.as_os_str().as_encoded_bytes())
        {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len),
            0
        );
        assert_eq!(libc::listen(fd, 0), 0);
        std::os::unix::net::UnixListener::from_raw_fd(fd)
    };
    let path = dir.clone();
    let (ran, connected) = other_fiber_ran_during(
        move || {
            // Fill the backlog, then one more: that one must wait.
            let held: Vec<_> = (0..4)
                .filter_map(|_| {
                    let s = std::os::unix::net::UnixStream::connect(&path);
                    s.ok()
                })
                .collect();
            (
                held.len(),
                std::os::unix::net::UnixStream::connect(&path).is_ok(),
            )
        },
        move || {
            spindle::time::sleep(Duration::from_millis(50));
            // Make room: accept every pending connection for a while.
            listener.set_nonblocking(true).unwrap();
            let start = Instant::now();
            let mut kept = Vec::new();
            while start.elapsed() < Duration::from_millis(500) {
                if let Ok((c, _)) = listener.accept() {
                    kept.push(c);
                }
                spindle::time::sleep(Duration::from_millis(5));
            }
        },
    );
    let _ = std::fs::remove_file(&dir);
    assert!(ran);
    assert_eq!(connected, (4, true));
}
