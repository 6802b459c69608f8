//! Helpers shared by the runtime's hostile-use tests.

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
