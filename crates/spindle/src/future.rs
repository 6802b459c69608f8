//! The futures bridge: run a `Future` to completion from blocking-style code.
//!
//! [`block_on`] on a fiber polls the future and, while it is pending, parks
//! the fiber; the future's waker — callable from any thread — makes the
//! fiber runnable again on its own worker. Off any fiber it parks the
//! calling thread instead.
//!
//! # Nested polls stay in place (`docs/DESIGN.md`)
//!
//! A `block_on` reached *while this fiber is already polling a future in
//! `block_on`* (a future that itself calls blocking-style code, such as a
//! wasmtime host function) must not switch fibers: the outer future's state
//! — wasmtime's per-thread state, say — is live on this stack. It polls in
//! place: the thread waits for the inner waker, and meanwhile drives this
//! worker's timers and netpoller itself so the futures it waits on can
//! still complete. [`can_suspend`] tells code which case it is in.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use crate::sched::park::{self, WaitToken};
use crate::sched::worker;

/// Runs `future` to completion and returns its output.
///
/// ```
/// let v = spindle::block_on(async { 40 + 2 });
/// assert_eq!(v, 42);
/// spindle::run(|| {
///     // On a fiber, a pending future parks the fiber, not the worker.
///     let (tx, rx) = std::sync::mpsc::channel::<std::task::Waker>();
///     let mut woken = false;
///     let fut = std::future::poll_fn(|cx| {
///         if woken { return std::task::Poll::Ready(7) }
///         woken = true;
///         tx.send(cx.waker().clone()).unwrap();
///         std::task::Poll::Pending
///     });
///     let waker_thread = std::thread::spawn(move || rx.recv().unwrap().wake());
///     assert_eq!(spindle::block_on(fut), 7);
///     waker_thread.join().unwrap();
/// });
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    if worker::can_park() {
        block_on_fiber(future)
    } else if worker::on_fiber() {
        block_on_in_place(future)
    } else {
        block_on_thread(future)
    }
}

/// Whether a wait here may suspend the current fiber: true on a fiber that
/// is not inside a `block_on` poll. On a plain thread, or nested inside a
/// `block_on` poll, waits block the thread instead.
///
/// ```
/// assert!(!spindle::can_suspend());
/// spindle::run(|| {
///     assert!(spindle::can_suspend());
///     spindle::block_on(async { assert!(!spindle::can_suspend()) });
/// });
/// ```
pub fn can_suspend() -> bool {
    worker::can_park()
}

/// The waker of a `block_on` on a fiber: ends the fiber's current wait.
struct FiberWaker {
    /// Set by every wake; cleared before each poll. Set after a pending
    /// poll means the future woke itself while being polled.
    woken: AtomicBool,
    /// The wait the fiber parks in between polls, while it is published.
    wait: Mutex<Option<WaitToken>>,
}

impl Wake for FiberWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Flag first (SeqCst), then the slot: a fiber about to publish its
        // wait checks the flag after publishing, so one of us sees the other.
        self.woken.store(true, Ordering::SeqCst);
        let token = self.wait.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(token) = token {
            token.wake(park::Wake::Ready, false);
        }
    }
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on_fiber<F: Future>(future: F) -> F::Output {
    let state = Arc::new(FiberWaker {
        woken: AtomicBool::new(false),
        wait: Mutex::new(None),
    });
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        state.woken.store(false, Ordering::SeqCst);
        let _polling = worker::BlockOnPoll::enter();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        drop(_polling);
        // Woken already, before we parked: the future woke itself while
        // polled — it is yielding (wasmtime's fuel yield, tokio's
        // `yield_now`).
        let yielding = state.woken.load(Ordering::SeqCst);
        if yielding {
            // Let the other fibers run before polling again, or a yielding
            // future would keep the worker to itself.
            crate::sched::park::yield_now();
            park::exit_if_cancelled();
            continue;
        }
        // A real wait: cancellation and an enclosing `timeout` end it (the
        // future is then dropped as the fiber unwinds).
        let why = park::wait(
            park::WaitKind::BlockOn,
            None,
            |token| {
                *state.wait.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
                if state.woken.load(Ordering::SeqCst) {
                    // Woken between the poll and now: poll again at once.
                    state.wait.lock().unwrap_or_else(|e| e.into_inner()).take();
                    return false;
                }
                true
            },
            |_| {
                state.wait.lock().unwrap_or_else(|e| e.into_inner()).take();
            },
        );
        match why {
            park::Wake::Ready => {}
            other => crate::sched::park::exit_for(other),
        }
    }
}

fn block_on_in_place<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        let _polling = worker::BlockOnPoll::enter();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        drop(_polling);
        // Nobody else runs this worker's timers and netpoller while we
        // hold it: drive them, then wait briefly for the waker.
        worker::drive_in_place();
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

fn block_on_thread<F: Future>(future: F) -> F::Output {
    #[cfg(feature = "tokio")]
    return crate::sched::tokio_context::within(|| block_on_thread_inner(future));
    #[cfg(not(feature = "tokio"))]
    block_on_thread_inner(future)
}

fn block_on_thread_inner<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
