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
//! * Run queues are FIFO by stamps: no worker runs a fiber while an older
//!   runnable one waits on it (see `sched`).
//! * Stacks are 256 KiB of `MAP_NORESERVE` address space by default with a
//!   guard page installed by `MADV_GUARD_INSTALL` (no extra kernel
//!   mapping), taken when a fiber first runs and pooled per worker. An
//!   overflow names the fiber and aborts.
//! * Every API also works from a plain thread, where it blocks the thread
//!   as std would.

mod api;
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

pub use api::{
    current, dump, park, park_timeout, run, spawn, spawn_local, stats, worker_count, worker_id,
    yield_now,
};
pub use builder::Builder;
pub use fiber::overflow::install_overflow_handler;
pub use fiber::wait::{is_cancelled, Cancelled};
pub use fiber::{Fiber, JoinError, JoinHandle};
pub use future::{block_on, can_suspend};
pub use local::FiberLocal;
pub use runtime::{Runtime, RuntimeBuilder};
pub use sched::scope::{scope, Scope, ScopedJoinHandle};
pub use stats::{Stats, WorkerStats};

/// Hooks for `bench/`; not part of the API.
#[doc(hidden)]
pub mod __bench {
    /// Time for `pairs` suspend+resume pairs on a Spindle stack.
    pub fn switch_pairs(pairs: u64) -> std::time::Duration {
        crate::fiber::time_switch_pairs(pairs)
    }
}
