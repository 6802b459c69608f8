//! Fiber-aware synchronisation: every wait parks the fiber, not the worker,
//! and every primitive also works from plain threads, in any mix.
//!
//! | type | what |
//! |---|---|
//! | [`Mutex`], [`RwLock`] | locks (no poisoning), fair in arrival order; a guard may be held across a wait |
//! | [`Condvar`] | waits for a condition under a [`Mutex`] |
//! | [`Semaphore`] | counted permits, with `acquire_timeout` |
//! | [`Barrier`] | n parties meet |
//! | [`WaitGroup`] | wait for a count of tasks to finish |
//! | [`OnceCell`] | a value initialised once; concurrent callers wait for the first |
//! | [`Pool`] | lend resources; checkout waits (with a deadline) when all are lent |
//!
//! All of them queue waiters in FIFO order and *hand over* what is released
//! (the lock, a permit) to the first waiter whose wait is still pending,
//! through the wait protocol of `sched::park`: a waiter that timed out or
//! was cancelled is skipped, nothing released is lost, and a waiter runs
//! once. Every wait is a cancellation point (see `JoinHandle::cancel`).

mod barrier;
mod condvar;
mod once;
mod pool;
mod semaphore;

pub use crate::sched::lock::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use barrier::{Barrier, BarrierWaitResult, WaitGroup};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use once::OnceCell;
pub use pool::{Pool, PoolGuard};
pub use semaphore::{Semaphore, SemaphorePermit};

use std::collections::VecDeque;

use crate::sched::park::{Notify, Wake};

/// Wakes the first waiter whose wait is still pending; true if one was.
pub(crate) fn wake_first(queue: &mut VecDeque<Notify>) -> bool {
    while let Some(n) = queue.pop_front() {
        if n.wake(Wake::Ready) {
            return true;
        }
    }
    false
}

/// Removes one waiter (after its wait ended another way).
pub(crate) fn remove(queue: &mut VecDeque<Notify>, notify: &Notify) {
    queue.retain(|n| !n.same(notify));
}
