//! Helpers shared by the hook's tests.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

// The runtime's own test helpers (`within`, `rt`, `this_test_binary`).
#[path = "../../../spindle/tests/common/mod.rs"]
mod runtime_helpers;
pub use runtime_helpers::{rt, this_test_binary, within};

/// On a one-worker runtime, fiber A runs `wait` (a call that waits for
/// something) while fiber B, spawned after it on the same worker, runs
/// `meanwhile`. Returns whether B had started by the time A's call
/// returned: true only if A's wait parked A alone and left the worker to B.
/// (Started, not finished: when B's work is what ends A's wait, A may be
/// woken before B has returned.)
/// (Without the hook, A blocks the only worker: B cannot run until A's call
/// is over — `wait` must then end by itself, through its own timeout.)
pub fn other_fiber_ran_during<T: Send + 'static>(
    wait: impl FnOnce() -> T + Send + 'static,
    meanwhile: impl FnOnce() + Send + 'static,
) -> (bool, T) {
    within(Duration::from_secs(60), move || {
        rt(1).run(move || {
            let b_done = Arc::new(AtomicBool::new(false)); // B has started
            let seen = b_done.clone();
            let a = spindle::spawn(move || {
                let v = wait();
                (seen.load(Ordering::SeqCst), v)
            });
            let b = spindle::spawn(move || {
                b_done.store(true, Ordering::SeqCst);
                meanwhile();
            });
            let r = a.join().unwrap();
            b.join().unwrap();
            r
        })
    })
}

/// An HTTP/1.1 server on plain threads that answers each request only once
/// `gate` requests are in flight at once (or after `give_up`, with 503):
/// a client whose requests never overlap gets 503s.
pub struct GatedServer {
    pub addr: std::net::SocketAddr,
}

impl GatedServer {
    pub fn start(gate: usize, give_up: Duration) -> GatedServer {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::{Condvar, Mutex};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let arrived = Arc::new((Mutex::new(0usize), Condvar::new()));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let arrived = arrived.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut conn = conn;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let (count, cv) = &*arrived;
                    let mut n = count.lock().unwrap();
                    *n += 1;
                    cv.notify_all();
                    let (n, timeout) = cv.wait_timeout_while(n, give_up, |n| *n < gate).unwrap();
                    drop(n);
                    let (status, body) = if timeout.timed_out() {
                        ("503 Service Unavailable", "not all at once\n")
                    } else {
                        ("200 OK", "all at once\n")
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        GatedServer { addr }
    }
}

/// Raises this process's open-file limit to its hard limit (for tests
/// that hold many sockets).
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer, then the same struct back in.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_cur
}

/// Runs the test `name` again in a child process of this test binary, alone
/// (for a test that needs the process's lowest free fd number to be its
/// own), and fails if the child fails. Returns true in that child: the
/// caller then runs the test's body.
pub fn alone(name: &str) -> bool {
    if std::env::var_os("SPINDLE_HOOK_TEST_ALONE").is_some() {
        return true;
    }
    // Under an emulator the runner goes in front (`this_test_binary`).
    let out = this_test_binary()
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("SPINDLE_HOOK_TEST_ALONE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}, run alone, failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
