//! [`Condvar`].

use std::time::{Duration, Instant};

use super::lock::MutexGuard;
use crate::sched::park::{self, WaitKind, Wake};
use crate::sched::wait_queue::WaitQueue;

/// A condition variable for [`Mutex`](super::Mutex): `wait` releases the
/// lock and parks until notified, then takes the lock back. Spurious
/// wake-ups are possible: wait in a loop on the condition.
///
/// ```
/// use std::sync::Arc;
/// spindle::run(|| {
///     let pair = Arc::new((spindle::sync::Mutex::new(false), spindle::sync::Condvar::new()));
///     let p = pair.clone();
///     spindle::spawn(move || {
///         *p.0.lock() = true;
///         p.1.notify_one();
///     });
///     let mut ready = pair.0.lock();
///     while !*ready {
///         ready = pair.1.wait(ready);
///     }
/// });
/// ```
#[derive(Default)]
pub struct Condvar {
    waiters: std::sync::Mutex<WaitQueue>,
}

/// Whether a [`Condvar::wait_timeout`] returned because time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True if the wait ended by its timeout.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Condvar {
        Condvar {
            waiters: std::sync::Mutex::new(WaitQueue::new()),
        }
    }

    fn q(&self) -> std::sync::MutexGuard<'_, WaitQueue> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Releases `guard`'s lock, parks until notified, locks again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_until_inner(guard, None).0
    }

    /// Like [`wait`](Self::wait), giving up after `timeout`.
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until_inner(guard, Some(crate::time::now() + timeout))
    }

    /// Waits while `condition` holds.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    fn wait_until_inner<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let mutex = guard.mutex();
        let mut guard = Some(guard);
        let why = park::block(
            WaitKind::Condvar,
            deadline,
            |notify| {
                // Queue first, then release: a notify between the two
                // cannot be missed.
                self.q().push(notify, ());
                drop(guard.take());
                true
            },
            |notify| {
                self.q().remove(notify);
            },
        );
        // Take the lock back whatever happened, so the caller's guard is
        // valid (and released properly) even on an unwind. A wait that
        // ended before it registered (the fiber was already cancelled)
        // never released it: then the guard is still ours, and locking
        // again would wait for ourselves.
        let relocked = match guard.take() {
            Some(still_held) => still_held,
            None => mutex.lock(),
        };
        match why {
            Wake::Ready => (relocked, WaitTimeoutResult(false)),
            Wake::TimedOut => (relocked, WaitTimeoutResult(true)),
            other => {
                drop(relocked);
                crate::sched::park::exit_for(other)
            }
        }
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.q().wake_first();
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        let all = self.q().take_all();
        all.wake_all(Wake::Ready);
    }
}

impl std::fmt::Debug for Condvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
