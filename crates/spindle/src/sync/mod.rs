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
//! through the wait protocol of `sched::park` and one waiter queue type
//! (`sched::wait_queue::WaitQueue`): a waiter that timed out or was cancelled is
//! skipped, nothing released is lost, and a waiter runs once. Every wait is
//! a cancellation point (see `JoinHandle::cancel`).
//!
//! The lock order, for all of them: a primitive's own lock, then (through
//! a wake) a scheduler inbox lock; a waker never takes a primitive's lock.

mod barrier;
mod condvar;
mod lock;
pub(crate) mod lock_word;
mod once;
mod pool;
mod semaphore;

pub use barrier::{Barrier, BarrierWaitResult, WaitGroup};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use lock::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use once::OnceCell;
pub use pool::{Pool, PoolGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
