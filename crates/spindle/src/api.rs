//! The free functions at the crate root: starting a runtime ([`run`]),
//! spawning ([`spawn`], [`spawn_local`]), the calling fiber ([`current`],
//! [`yield_now`], [`park`], [`park_timeout`]), where it runs
//! ([`worker_id`], [`worker_count`]), and its runtime's [`dump`] and
//! [`stats`]. Each is a thin face over the scheduler (`sched`); `lib.rs`
//! re-exports them.

use crate::fiber::{Fiber, JoinHandle};
use crate::runtime::{self, Runtime};
use crate::stats::Stats;
use crate::{sched, time};

/// Runs `f` as the first fiber of a new runtime with default settings, and
/// returns its value once it returns and the runtime has shut down.
///
/// Fibers still running when `f` returns are stopped (see
/// [`Runtime::shutdown`]). A panic in `f` is re-raised here.
///
/// ```
/// assert_eq!(spindle::run(|| 6 * 7), 42);
/// ```
///
/// # Panics
///
/// If the runtime cannot start (no threads to be had), or `f` panicked.
pub fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let rt = Runtime::new().unwrap_or_else(|e| panic!("spindle::run: cannot start: {e}"));
    let value = rt.run(f);
    rt.shutdown();
    value
}

/// Spawns a fiber on the current fiber's runtime.
///
/// ```
/// spindle::run(|| {
///     let h = spindle::spawn(|| "done");
///     assert_eq!(h.join().unwrap(), "done");
/// });
/// ```
///
/// # Panics
///
/// Outside a spindle fiber (use [`Runtime::spawn`] there), or when the
/// fiber's stack cannot be had: the message says why and how many fibers
/// are live. [`Builder::spawn`](crate::Builder::spawn) returns that error instead.
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    sched::spawn::spawn_or_panic(sched::spawn::spawn_here(
        "spindle::spawn",
        Default::default(),
        f,
    ))
}

/// Spawns a fiber for a `!Send` closure, pinned to the current worker.
///
/// ```
/// use std::rc::Rc;
/// spindle::run(|| {
///     let worker = spindle::worker_id();
///     let h = spindle::spawn_local(move || {
///         let shared = Rc::new(5); // !Send is fine: this fiber never moves
///         spindle::yield_now();
///         (*shared, spindle::worker_id() == worker)
///     });
///     assert_eq!(h.join().unwrap(), (5, true));
/// });
/// ```
///
/// # Panics
///
/// Outside a spindle fiber, or when the stack cannot be had.
pub fn spawn_local<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    sched::spawn::spawn_or_panic(sched::spawn::spawn_pinned(Default::default(), f))
}

/// Lets every fiber that became runnable meanwhile run first, then
/// continues. Outside a fiber: `std::thread::yield_now`.
///
/// ```
/// spindle::run(|| spindle::yield_now());
/// ```
#[inline]
pub fn yield_now() {
    sched::park::yield_now();
}

/// Waits until the current fiber's token is made available by
/// [`Fiber::unpark`], consuming it (std's `thread::park` semantics; may
/// return spuriously). Outside a fiber it parks the thread.
///
/// ```
/// spindle::run(|| {
///     let me = spindle::current().unwrap();
///     let waker = spindle::spawn(move || me.unpark());
///     spindle::park();
///     waker.join().unwrap();
/// });
/// ```
pub fn park() {
    sched::park::exit_if_cancelled();
    sched::park::park_current_as(sched::park::WaitKind::Park);
    sched::park::exit_if_cancelled();
}

/// Like [`park`], but returns after `timeout` at the latest (std's
/// `thread::park_timeout`). On a fiber the timeout is a timer on the
/// fiber's worker.
///
/// ```
/// use std::time::{Duration, Instant};
/// spindle::run(|| {
///     let start = Instant::now();
///     spindle::park_timeout(Duration::from_millis(20));
///     assert!(start.elapsed() >= Duration::from_millis(20));
/// });
/// ```
pub fn park_timeout(timeout: std::time::Duration) {
    if sched::worker::can_park() {
        let deadline = time::now() + timeout;
        sched::park::exit_if_cancelled();
        sched::park::park_until(deadline);
        sched::park::exit_if_cancelled();
    } else {
        std::thread::park_timeout(timeout);
    }
}

/// The fiber calling this, or `None` on a plain thread.
///
/// ```
/// assert!(spindle::current().is_none());
/// spindle::run(|| assert!(spindle::current().is_some()));
/// ```
pub fn current() -> Option<Fiber> {
    sched::worker::current_fiber().map(|core| Fiber { core })
}

/// Index of the worker thread running the caller within its runtime, or
/// `None` outside a runtime.
///
/// ```
/// assert_eq!(spindle::worker_id(), None);
/// ```
pub fn worker_id() -> Option<usize> {
    sched::worker::worker_index()
}

/// How many workers the caller's runtime has, or `None` outside a
/// runtime.
///
/// ```
/// let rt = spindle::Runtime::builder().workers(3).build().unwrap();
/// assert_eq!(rt.run(spindle::worker_count), Some(3));
/// assert_eq!(spindle::worker_count(), None);
/// ```
pub fn worker_count() -> Option<usize> {
    sched::worker::worker_count()
}

/// The current runtime's fiber dump (see [`Runtime::dump`]), or `None`
/// outside a runtime.
pub fn dump() -> Option<String> {
    sched::worker::with_current(|w| w.map(|w| sched::diag::dump::dump(w.sched)))
}

/// Counters of the current fiber's runtime, or `None` outside one.
pub fn stats() -> Option<Stats> {
    sched::worker::with_current(|w| w.map(|w| runtime::stats_of(w.sched)))
}
