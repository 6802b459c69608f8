//! Running other ecosystems' code from fibers.

/// tokio libraries from fibers (the `tokio` feature).
///
/// With the feature on, every worker runs inside the context of a tokio
/// runtime — a shared one with one thread for its IO and timer drivers,
/// started on first use, or the one given with
/// [`RuntimeBuilder::tokio_handle`](crate::RuntimeBuilder::tokio_handle) —
/// and [`block_on`](crate::block_on) on a plain thread enters it for the
/// call. So a tokio-based library's futures just work from fiber code, and
/// their waits park only the fiber:
///
/// ```
/// # #[cfg(feature = "tokio")]
/// spindle::run(|| {
///     spindle::block_on(tokio::time::sleep(std::time::Duration::from_millis(5)));
/// });
/// ```
///
/// On a plain thread the context is entered only inside `block_on`, so
/// there a tokio future must be *made* inside the call — an `async` block
/// around it — since tokio looks its runtime up when a future is created:
///
/// ```
/// # #[cfg(feature = "tokio")]
/// spindle::block_on(async { tokio::time::sleep(std::time::Duration::from_millis(1)).await });
/// ```
///
/// What this does not change: a *synchronous* client that blocks its
/// thread (the `postgres` crate, `reqwest::blocking`) still blocks the
/// worker — run it with [`blocking::run`](crate::blocking::run). And code
/// that starts a tokio runtime of its own inside a fiber
/// (`Runtime::new().block_on(..)`) is refused by tokio, because the thread
/// is already in a runtime's context; use `spindle::block_on` instead.
#[cfg(feature = "tokio")]
pub mod tokio {
    /// The handle of the runtime the workers of runtimes built without
    /// [`RuntimeBuilder::tokio_handle`](crate::RuntimeBuilder::tokio_handle)
    /// run in (started on first use).
    ///
    /// ```
    /// let handle = spindle::compat::tokio::handle();
    /// let answer = handle.block_on(async { 42 });
    /// assert_eq!(answer, 42);
    /// ```
    pub fn handle() -> ::tokio::runtime::Handle {
        crate::sched::tokio_context::shared()
    }
}
