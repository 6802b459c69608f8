//! Helpers shared by the runtime's tests.

#![allow(dead_code)]

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it takes longer than `limit`
/// (the thread is left behind; the test binary exits anyway).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("did not finish within {limit:?} (hang)"),
    }
}

pub fn rt(workers: usize) -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(workers)
        .stall_warning(None)
        .build()
        .unwrap()
}

/// A command that runs this test binary again (for tests that need a child
/// process). Under an emulator, `SPINDLE_TEST_RUNNER` names the runner to
/// put in front (`.ci/run` sets it for the aarch64 run under QEMU).
pub fn this_test_binary() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let runner = std::env::var("SPINDLE_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = std::process::Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    }
}

/// Whether this process runs natively: under an emulator (QEMU user mode)
/// `/proc` shows the host's system calls and the host's address space, so
/// tests that read them say so and skip that part.
pub fn runs_natively() -> bool {
    // Reading its own entry, this thread must see itself in `read`.
    std::fs::read_to_string("/proc/thread-self/syscall")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<libc::c_long>().ok())
        == Some(libc::SYS_read)
}
