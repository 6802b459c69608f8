//! [`Semaphore`].

use std::time::{Duration, Instant};

use crate::sched::park::{self, WaitKind, Wake};
use crate::sched::wait_queue::WaitQueue;

/// Counted permits. `acquire` parks while none is free; a released permit
/// is handed to the first waiter still waiting (FIFO, no barging).
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let s = spindle::sync::Semaphore::new(1);
///     let p = s.acquire();
///     assert!(s.acquire_timeout(Duration::from_millis(10)).is_none());
///     drop(p);
///     assert!(s.try_acquire().is_some());
/// });
/// ```
pub struct Semaphore {
    state: std::sync::Mutex<SemState>,
}

/// The state of a [`Semaphore`], under its lock.
struct SemState {
    /// Permits nobody holds.
    permits: usize,
    /// Acquirers waiting for a permit, in arrival order.
    waiters: WaitQueue,
}

/// A held permit; released on drop.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
}

impl Semaphore {
    /// A semaphore with `permits` free permits.
    pub const fn new(permits: usize) -> Semaphore {
        Semaphore {
            state: std::sync::Mutex::new(SemState {
                permits,
                waiters: WaitQueue::new(),
            }),
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, SemState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquire_until(&self, deadline: Option<Instant>) -> Option<SemaphorePermit<'_>> {
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Semaphore,
            deadline,
            |notify| {
                let mut st = self.st();
                if st.permits > 0 && st.waiters.is_empty() {
                    st.permits -= 1;
                    return false;
                }
                st.waiters.push(notify, ());
                true
            },
            |notify| {
                self.st().waiters.remove(notify);
            },
        );
        match why {
            Wake::Ready => Some(SemaphorePermit { sem: self }),
            Wake::TimedOut => None,
            other => crate::sched::park::exit_for(other),
        }
    }

    /// Takes a permit, parking until one is free.
    pub fn acquire(&self) -> SemaphorePermit<'_> {
        self.acquire_until(None).expect("no deadline")
    }

    /// Takes a permit, giving up after `timeout`.
    pub fn acquire_timeout(&self, timeout: Duration) -> Option<SemaphorePermit<'_>> {
        self.acquire_until(Some(crate::time::now() + timeout))
    }

    /// Takes a permit if one is free and nobody waits first.
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        let mut st = self.st();
        if st.permits > 0 && st.waiters.is_empty() {
            st.permits -= 1;
            Some(SemaphorePermit { sem: self })
        } else {
            None
        }
    }

    /// Adds `n` permits (waking waiters).
    pub fn add_permits(&self, n: usize) {
        for _ in 0..n {
            self.release();
        }
    }

    /// Free permits now.
    pub fn available_permits(&self) -> usize {
        self.st().permits
    }

    fn release(&self) {
        let mut st = self.st();
        // Handed to the first pending waiter, or kept.
        if st.waiters.wake_first().is_none() {
            st.permits += 1;
        }
    }
}

impl SemaphorePermit<'_> {
    /// Keeps the permit taken for good (it is not released on drop).
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.release();
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("available", &self.available_permits())
            .finish()
    }
}
