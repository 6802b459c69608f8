//! Faults that must be loud but not fatal: a fiber blocking its worker, and
//! running out of fds while accepting. Each runs in a child process (this
//! test binary re-executed) so that its stderr and its fd limit are its own.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "SPINDLE_FAULT_CHILD";

fn role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

fn child(test: &str, role: &str) -> Command {
    let mut c = common::this_test_binary();
    c.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role);
    c
}

/// One worker, stalls reported after 50 ms: the children's runtime.
fn watched_runtime() -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(1)
        .stall_warning(Some(Duration::from_millis(50)))
        .build()
        .unwrap()
}

#[test]
fn child_blocking_fiber() {
    if role().as_deref() != Some("block") {
        return;
    }
    let rt = watched_runtime();
    rt.run(|| {
        spindle::Builder::new()
            .name("sleepy-handler")
            .spawn(|| std::thread::sleep(Duration::from_millis(300)))
            .unwrap()
            .join()
            .unwrap();
        // A second stall of the same fiber id cannot happen; another fiber
        // stalling is reported again.
    });
}

#[test]
fn a_fiber_that_blocks_its_worker_is_reported_once_by_id_and_name() {
    if role().is_some() {
        return;
    }
    let out = child("child_blocking_fiber", "block").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning, not a crash: {stderr}");
    let early: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("without a switch;"))
        .collect();
    assert_eq!(early.len(), 1, "reported once while it blocks: {stderr}");
    assert!(early[0].contains("worker 0 has run fiber "), "{stderr}");
    assert!(
        early[0].contains("\"sleepy-handler\""),
        "named while it blocks: {stderr}"
    );
    if common::runs_natively() {
        assert!(
            early[0].contains("blocked in a sleep"),
            "with what it is blocked in: {stderr}"
        );
    } else {
        eprintln!(
            "under an emulator /proc shows the host's calls: not checking what it is blocked in"
        );
    }
    let named: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("\"sleepy-handler\" blocked worker 0"))
        .collect();
    assert_eq!(
        named.len(),
        1,
        "and once by name when it comes back: {stderr}"
    );
}

#[test]
fn child_yield_spinner() {
    if role().as_deref() != Some("yield-spin") {
        return;
    }
    let rt = watched_runtime();
    rt.run(|| {
        spindle::Builder::new()
            .name("yield-spinner")
            .spawn(|| {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_millis(400) {
                    spindle::yield_now();
                }
            })
            .unwrap()
            .join()
            .unwrap();
        eprintln!("spinner done");
    });
}

/// A fiber that keeps yielding holds its worker without switching when
/// nothing else is runnable, but it is not blocking anyone: no stall report.
#[test]
fn a_lone_fiber_spinning_on_yield_now_is_not_reported_as_a_stall() {
    if role().is_some() {
        return;
    }
    let out = child("child_yield_spinner", "yield-spin").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("spinner done"), "{stderr}");
    assert!(
        !stderr.contains("without a switch") && !stderr.contains("blocked worker"),
        "a yielding fiber was reported as a stall: {stderr}"
    );
}

#[test]
fn child_yields_then_blocks() {
    if role().as_deref() != Some("yield-then-block") {
        return;
    }
    let rt = watched_runtime();
    rt.run(|| {
        spindle::Builder::new()
            .name("yields-then-sleeps")
            .spawn(|| {
                // In-place yields move the dispatch's number on; the stall
                // that follows must still be reported both times.
                for _ in 0..5 {
                    spindle::yield_now();
                }
                std::thread::sleep(Duration::from_millis(300));
            })
            .unwrap()
            .join()
            .unwrap();
    });
}

#[test]
fn a_fiber_that_blocks_after_yielding_in_place_is_reported_when_it_comes_back() {
    if role().is_some() {
        return;
    }
    let out = child("child_yields_then_blocks", "yield-then-block")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("without a switch;").count(),
        1,
        "reported while it blocks: {stderr}"
    );
    assert_eq!(
        stderr
            .matches("\"yields-then-sleeps\" blocked worker 0")
            .count(),
        1,
        "and when it comes back: {stderr}"
    );
}

#[test]
fn child_std_lock_across_a_park() {
    if role().as_deref() != Some("std-lock") {
        return;
    }
    let rt = watched_runtime();
    rt.run(|| {
        let lock = std::sync::Arc::new(std::sync::Mutex::new(0));
        let l = lock.clone();
        let holder = spindle::Builder::new()
            .name("guard-holder")
            .spawn(move || {
                let mut guard = l.lock().unwrap();
                // Parks with a std guard held: the mistake under test.
                spindle::time::sleep(Duration::from_millis(100));
                *guard += 1;
            })
            .unwrap();
        spindle::yield_now();
        let waiter = spindle::Builder::new()
            .name("lock-waiter")
            .spawn(move || *lock.lock().unwrap() += 1)
            .unwrap();
        // Never returns: the waiter blocks the only worker's thread, so the
        // holder's timer can never run it again.
        waiter.join().unwrap();
        holder.join().unwrap();
    });
}

#[test]
fn a_std_lock_held_across_a_park_is_named_as_the_deadlock_it_is() {
    if role().is_some() {
        return;
    }
    use std::io::{BufRead, BufReader};
    let mut child = child("child_std_lock_across_a_park", "std-lock")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let report = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("without a switch;") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let report = report.unwrap_or_else(|| panic!("no stall report; stderr: {seen:?}"));
    assert!(report.contains("worker 0 has run fiber "), "{report}");
    assert!(
        report.contains("\"lock-waiter\""),
        "names the fiber: {report}"
    );
    if common::runs_natively() {
        assert!(
            report.contains("futex wait") && report.contains("spindle::sync::Mutex"),
            "says what it is blocked in and the remedy: {report}"
        );
    } else {
        eprintln!(
            "under an emulator /proc shows the host's calls: not checking what it is blocked in"
        );
    }
}

#[test]
fn child_emfile_server() {
    if role().as_deref() != Some("emfile") {
        return;
    }
    let rl = libc::rlimit {
        rlim_cur: 40,
        rlim_max: 40,
    };
    // SAFETY: plain syscall in the child process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) }, 0);
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
        println!("PORT {}", listener.local_addr().unwrap().port());
        let mut held = Vec::new();
        let mut total = 0;
        let mut emfile = 0;
        while total < 100 {
            match listener.accept() {
                Ok((conn, _)) => {
                    held.push(conn);
                    total += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                    emfile += 1;
                    // Free some fds; the pending connections wait in the
                    // kernel's queue for the next accept.
                    held.clear();
                }
                Err(e) => panic!("unexpected accept error {e}"),
            }
        }
        println!("EMFILE {emfile} ACCEPTED {total}");
    });
}

#[test]
fn running_out_of_fds_gives_emfile_and_the_listener_recovers() {
    if role().is_some() {
        return;
    }
    let mut c = child("child_emfile_server", "emfile")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let port = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child printed no port"
        );
        if let Some(p) = line.split("PORT ").nth(1) {
            break p.trim().parse::<u16>().unwrap();
        }
    };
    // 100 clients from this process (plenty of fds here), held open.
    let clients: Vec<_> = (0..100)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = c.wait().unwrap();
    drop(clients);
    assert!(status.success(), "server failed: {rest}");
    let line = rest
        .lines()
        .find(|l| l.contains("ACCEPTED"))
        .unwrap_or_else(|| panic!("{rest}"));
    assert!(line.contains("ACCEPTED 100"), "{line}");
    assert!(
        !line.contains("EMFILE 0 "),
        "the limit was never hit: {line}"
    );
}

#[test]
fn dump_names_every_fiber_and_what_it_waits_on() {
    if role().is_some() {
        return;
    }
    let rt = spindle::Runtime::builder().workers(2).build().unwrap();
    let (_a, b) = spindle::net::UnixStream::pair().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&b);
    let lock = std::sync::Arc::new(spindle::sync::Mutex::new(()));
    let held = lock.clone();
    let (_tx, rx) = spindle::chan::unbounded::<u8>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        spindle::Builder::new().name(name).spawn_on(&rt, f).unwrap()
    };
    let holder = spawn(
        "holder",
        Box::new(move || {
            let _g = held.lock();
            spindle::time::sleep(Duration::from_secs(60));
        }),
    );
    std::thread::sleep(Duration::from_millis(20));
    let _waiter = spawn("lock-waiter", Box::new(move || drop(lock.lock())));
    let _reader = spawn(
        "reader",
        Box::new(move || {
            let _ = (&b).read(&mut [0u8; 1]);
        }),
    );
    let _recv = spawn(
        "chan-waiter",
        Box::new(move || {
            let _ = rx.recv();
        }),
    );
    std::thread::sleep(Duration::from_millis(50));
    let dump = rt.run(|| spindle::dump().unwrap());
    for (name, what) in [
        ("holder", "sleeping"),
        ("lock-waiter", "waiting for a lock"),
        ("reader", &format!("waiting for fd {fd} to be readable")),
        ("chan-waiter", "waiting on a channel"),
    ] {
        assert!(
            dump.contains(&format!("\"{name}\": {what}")),
            "no {name} line in:\n{dump}"
        );
    }
    assert!(dump.contains("running (asked for this dump)"), "{dump}");
    drop(holder);
}
