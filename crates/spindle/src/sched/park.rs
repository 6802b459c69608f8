//! The one parking primitive: wait on a fiber or on a plain thread.
//!
//! Every wait in Spindle — join, park, and later sockets, timers, locks and
//! channels — ends in [`park_current`] with a [`Waiter`] for the current
//! context published somewhere a waker will find it. On a fiber that parks
//! the fiber (its worker runs others); on a plain thread it parks the thread.
//! Both have std's token semantics, so a wake that lands before the park is
//! not lost, and both may return spuriously: callers loop on their condition.

use std::thread::{self, Thread};

use crate::fiber::FiberRef;

/// Who to wake: a fiber or an OS thread.
pub(crate) enum Waiter {
    Fiber(FiberRef),
    Thread(Thread),
}

impl Waiter {
    /// A waiter for the calling context.
    pub(crate) fn current() -> Waiter {
        match super::worker::current_fiber() {
            Some(fiber) => Waiter::Fiber(fiber),
            None => Waiter::Thread(thread::current()),
        }
    }

    /// Makes the waiter's token available, waking it if it is parked.
    pub(crate) fn wake(self) {
        match self {
            Waiter::Fiber(fiber) => {
                if fiber.header.notify() {
                    super::schedule(fiber);
                }
            }
            Waiter::Thread(t) => t.unpark(),
        }
    }
}

/// Parks the calling fiber, or the calling thread outside a fiber, until its
/// token is available. May return spuriously.
pub(crate) fn park_current() {
    if super::worker::on_fiber() {
        crate::fiber::park_running();
    } else {
        thread::park();
    }
}
