//! With the `tokio` feature: the tokio runtime context every worker runs
//! in, so that tokio-based libraries work from fibers.
//!
//! A tokio future finds its runtime (its IO and timer drivers) through a
//! thread-local context, when it is created as well as when it is polled.
//! So each worker thread enters the context for its whole life, and so
//! does a plain thread's `block_on` for the duration of the call. The
//! future's wait parks only its fiber: `block_on` polls it and parks on its
//! waker, which tokio's driver thread calls. The runtime is the one given
//! with `RuntimeBuilder::tokio_handle`, or a shared one with a single
//! thread for its drivers, started on first use and never stopped.

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

static SHARED: OnceLock<Runtime> = OnceLock::new();

/// The shared tokio runtime's handle (started on first use).
pub(crate) fn shared() -> Handle {
    SHARED
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("spindle-tokio")
                .enable_all()
                .build()
                .expect("spindle: cannot start the shared tokio runtime")
        })
        .handle()
        .clone()
}

/// The handle a scheduler's workers enter.
pub(crate) fn for_workers(given: Option<&Handle>) -> Handle {
    given.cloned().unwrap_or_else(shared)
}

/// Runs `f` inside a tokio context: the current one if the thread is in
/// one already, else the shared runtime's.
pub(crate) fn within<R>(f: impl FnOnce() -> R) -> R {
    if Handle::try_current().is_ok() {
        return f();
    }
    let handle = shared();
    let _entered = handle.enter();
    f()
}
