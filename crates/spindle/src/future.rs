//! The futures bridge: run a `Future` to completion from blocking-style code.
//!
//! [`block_on`] on a fiber polls the future and, while it is pending, parks
//! the fiber; the future's waker — callable from any thread — makes the
//! fiber runnable again on its own worker. Off any fiber it parks the
//! calling thread instead.
//!
//! # Seed 000's second rule
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
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use crate::fiber::FiberRef;
use crate::sched::{park::Waiter, worker};

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
    if worker::on_fiber() && !worker::in_block_on_poll() {
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
pub fn can_suspend() -> bool {
    worker::on_fiber() && !worker::in_block_on_poll()
}

struct FiberWaker {
    fiber: FiberRef,
    /// Set by every wake; cleared before each poll. Set after a pending
    /// poll means the future woke itself while being polled.
    woken: std::sync::atomic::AtomicBool,
}

impl Wake for FiberWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        Waiter::Fiber(self.fiber.clone()).wake();
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
    use std::sync::atomic::Ordering;
    let fiber = worker::current_fiber().expect("on a fiber");
    let state = Arc::new(FiberWaker {
        fiber,
        woken: std::sync::atomic::AtomicBool::new(false),
    });
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        state.woken.store(false, Ordering::Relaxed);
        let _polling = worker::BlockOnPoll::enter();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        drop(_polling);
        // Woken already, before we parked: the future woke itself while
        // polled — it is yielding (wasmtime's fuel yield, tokio's
        // `yield_now`).
        let yielding = state.woken.load(Ordering::Acquire);
        // Parking consumes the wake token (at once if it is already there).
        crate::sched::park::park_current_as(crate::sched::park::WaitKind::BlockOn);
        if yielding {
            // Let the other fibers run before polling again, or a yielding
            // future would keep the worker to itself.
            crate::yield_now();
        }
        // Cancelled: the future is dropped as the fiber unwinds.
        crate::sched::park::exit_if_cancelled();
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
