//! Spindle: colourless concurrency for Rust.
//!
//! Stackful *fibers* multiplexed onto a few worker threads. A fiber is a
//! cheap thread: ordinary blocking-style Rust runs in it unchanged — no
//! `async`, no `.await`, no second copy of every library — and when it
//! waits, only the fiber waits; its worker runs other fibers meanwhile.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! let total = spindle::run(|| {
//!     let hits = Arc::new(AtomicUsize::new(0));
//!     let handles: Vec<_> = (0..1000)
//!         .map(|i| {
//!             let hits = hits.clone();
//!             spindle::spawn(move || {
//!                 spindle::yield_now(); // let the others run
//!                 hits.fetch_add(1, Ordering::Relaxed);
//!                 i
//!             })
//!         })
//!         .collect();
//!     let sum: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
//!     assert_eq!(hits.load(Ordering::Relaxed), 1000);
//!     sum
//! });
//! assert_eq!(total, 999 * 1000 / 2);
//! ```
//!
//! # Map
//!
//! | module | what lives there |
//! |---|---|
//! | `fiber` (private) | a fiber's allocation, its park token and wait word, the context switch, stacks and guard pages, the overflow report |
//! | `sched` (private) | run queues and stamps, workers, stealing, sleeping and spinning, the one parking primitive (waits, cancellation, deadlines), locks, scopes, the stall watchdog, dumps |
//! | `poll` (private) | the netpoller: epoll, fd slots with banked edges, timer heaps, the background poller |
//! | [`runtime`] | [`Runtime`], [`RuntimeBuilder`], two-phase shutdown |
//! | [`net`] | TCP, UDP and Unix sockets that park the fiber |
//! | [`io`] | waiting on any fd: `wait_readable`/`wait_writable`, readiness futures, `close` |
//! | [`time`] | `sleep`, `sleep_until`, `timeout`, sleep futures |
//! | [`sync`] | `Mutex`, `RwLock`, `Condvar`, `Semaphore`, `Barrier`, `WaitGroup`, `OnceCell`, `Pool` |
//! | [`chan`] | channels (`bounded`, `unbounded`, `oneshot`) and [`select!`] |
//! | [`blocking`], [`fs`] | the blocking pool, and files through it |
//! | `future` | [`block_on`], [`can_suspend`] |
//!
//! Every wait in these modules is a cancellation point
//! ([`JoinHandle::cancel`]) and honours an enclosing [`time::timeout`] —
//! including `join`, `block_on` and a scope's wait for its children.
//!
//! # Promises, exactly as they hold
//!
//! * **A started fiber never changes thread.** Its thread-locals and `!Send`
//!   locals stay valid across every wait. A `spawn_local` fiber's closure
//!   and result are created, dropped and handed over on its worker only:
//!   its `JoinHandle` is `!Send` when the result is, and a [`Fiber`] handle
//!   (always `Send`) never owns the result.
//! * **Scopes.** [`scope`] returns — normally, by a panic, by cancellation,
//!   by an enclosing timeout, or by a runtime stop unwinding the parent —
//!   only after every child has ended and dropped everything that borrows
//!   from the parent (its closure, its unjoined value).
//! * **Cancellation.** A cancelled fiber's current and later waits fail at
//!   once — except while it unwinds: a wait inside a destructor then
//!   completes normally (it is not cut short by cancellation or an
//!   enclosing `timeout`, only by its own deadline), so destructors that
//!   lock, join, sleep or send run to their end instead of aborting the
//!   process. While such a fiber is suspended mid-unwind,
//!   `std::thread::panicking()` reads true on the other fibers of its
//!   worker too (std keeps that count per thread).
//! * **Shutdown** cancels every fiber, waits up to the grace, then stops the
//!   rest: queued fibers are dropped unrun, started ones are unwound on
//!   their worker, most recently started first. During that unwind a fiber
//!   cannot switch: its waits block the worker thread as on a plain thread,
//!   and a `sleep` returns at once. A fiber still waiting inside a
//!   destructor at that point is not unwound a second time (that would
//!   abort the process): its stack is leaked and stderr says so. A fiber
//!   that never waits or yields cannot be stopped; shutdown waits for it
//!   and names it every few seconds.
//! * **Failures are loud, never fatal to a worker.** A fiber's panic reaches
//!   its `join`. A panic that turns a stop's unwind into another one, or a
//!   `Drop` of a closure or result that panics, is caught and reported on
//!   stderr; the worker goes on.
//! * **A worker blocked in a call** (a `std::thread::sleep`, a blocking
//!   `std::net` read, a long computation) keeps the fibers it has *started*
//!   — they cannot move. Everything else it holds is taken by the other
//!   workers once it has been stalled for 10 ms: its queued unstarted
//!   fibers, and its new spawns go where others take them. Run blocking
//!   calls with [`blocking::run`] so that nothing stalls.
//! * **Timers fire on time on an idle worker**, whether they end a fiber's
//!   wait or wake a future polled by [`block_on`]; a future polled by a
//!   foreign executor uses the background poller's timers. A timer that
//!   comes due while fibers compute and yield runs ahead of them, not a
//!   whole pass later.
//!
//! Handles that must not cross threads do not:
//!
//! ```compile_fail
//! // A local fiber's handle carries its `!Send` result: it stays put.
//! fn send<T: Send>(_: T) {}
//! spindle::run(|| {
//!     let h = spindle::spawn_local(|| std::rc::Rc::new(1));
//!     send(h);
//! });
//! ```
//!
//! ```compile_fail
//! // `spawn` takes only `Send` closures.
//! let rc = std::rc::Rc::new(1);
//! spindle::run(move || drop(spindle::spawn(move || drop(rc))));
//! ```
//!
//! ```compile_fail
//! // A channel of `!Send` values is not `Send`.
//! fn send<T: Send>(_: T) {}
//! let (tx, _rx) = spindle::chan::unbounded::<std::rc::Rc<u8>>();
//! send(tx);
//! ```
//!
//! ```compile_fail
//! // A scoped handle cannot outlive its scope.
//! spindle::run(|| {
//!     let data = vec![1];
//!     let h = spindle::scope(|s| s.spawn(|| data.len()));
//!     drop(h);
//! });
//! ```
//!
//! ```compile_fail
//! // A scoped child's value may not borrow past the scope.
//! fn send<T: Send>(_: T) {}
//! spindle::run(|| {
//!     spindle::scope(|s| {
//!         let h = s.spawn(|| std::rc::Rc::new(1));
//!         send(h);
//!     });
//! });
//! ```
//!
//! # Decisions
//!
//! * A fiber stays on the worker that first ran it, so thread-locals and
//!   `!Send` values held across a wait stay correct. Idle workers steal
//!   only fibers that have not started. Migration of started fibers is not
//!   offered.
//! * Run queues are FIFO by one clock: no worker runs a fiber while an older
//!   runnable one waits (see `sched`).
//! * Stacks are 256 KiB of `MAP_NORESERVE` address space by default with a
//!   guard page installed by `MADV_GUARD_INSTALL` (no extra kernel
//!   mapping), taken when a fiber first runs and pooled per worker. An
//!   overflow names the fiber and aborts.
//! * Every API also works from a plain thread, where it blocks the thread
//!   as std would.

pub mod blocking;
mod builder;
pub mod chan;
pub mod compat;
mod fiber;
pub mod fs;
mod future;
pub mod io;
mod local;
mod loom;
mod loud;
mod membarrier;
pub mod net;
mod poll;
pub mod runtime;
mod sched;
mod stats;
pub mod sync;
pub mod time;

pub use builder::Builder;
pub use fiber::overflow::install_overflow_handler;
pub use fiber::wait::{is_cancelled, Cancelled};
pub use fiber::{Fiber, JoinError, JoinHandle};
pub use future::{block_on, can_suspend};
pub use local::FiberLocal;
pub use runtime::{Runtime, RuntimeBuilder};
pub use sched::scope::{scope, Scope, ScopedJoinHandle};
pub use stats::{Stats, WorkerStats};

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
/// are live. [`Builder::spawn`] returns that error instead.
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

/// Hooks for `bench/`; not part of the API.
#[doc(hidden)]
pub mod __bench {
    /// Time for `pairs` suspend+resume pairs on a Spindle stack.
    pub fn switch_pairs(pairs: u64) -> std::time::Duration {
        crate::fiber::time_switch_pairs(pairs)
    }
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
