//! Fiber-aware locks: [`Mutex`] and [`RwLock`].
//!
//! Both hold their value in an `UnsafeCell` and hand out guards; the
//! `unsafe` here is the guards' access to the cell, sound by the lock
//! protocols below. Waiters queue in a [`WaitQueue`] under a
//! `std::sync::Mutex` (lock order: that lock, then a scheduler inbox lock;
//! see `sched/wait_queue.rs`).
//!
//! # Mutex protocol
//!
//! `state` is `UNLOCKED`, `LOCKED` or `CONTENDED` (locked, waiters queued).
//! Locking is one compare-exchange when free. A contended `lock` queues a
//! [`Notify`] (its fiber's wait, or its thread's) under the queue lock and
//! parks. `unlock` on `CONTENDED` *hands the lock over*: it pops waiters in
//! FIFO order until one's wake succeeds and leaves the state locked for it —
//! so no waiter starves under steady contention, and a waiter whose wait
//! ended otherwise (a cancel) is skipped without losing the lock. A waiter
//! woken `Ready` owns the lock; the guard it returns is never lost to a
//! racing cancel, whose compare-exchange on the wait word fails.
//!
//! A contended lock parks the fiber, not its worker; a guard may be held
//! across any wait (unlike a std guard, which would stall the worker).
//!
//! # RwLock protocol
//!
//! One `std::sync::Mutex` guards the reader count, the writer flag and one
//! FIFO of waiters (readers and writers in arrival order). A request is
//! granted at once only when nothing is queued ahead of it, so writers do
//! not starve behind a stream of readers; a release grants the head of the
//! queue — one writer, or every reader up to the next writer.

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use super::lock_word::LockWord;
use crate::sched::park::{self, Notify, WaitKind, Wake};
use crate::sched::wait_queue::WaitQueue;

/// A mutual-exclusion lock whose `lock` parks the fiber, not the worker.
///
/// No poisoning (as in parking_lot): `lock` returns the guard itself.
/// Works from fibers and plain threads alike, in any mix.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// spindle::run(|| {
///     let m = Arc::new(spindle::sync::Mutex::new(0));
///     let handles: Vec<_> = (0..10)
///         .map(|_| {
///             let m = m.clone();
///             spindle::spawn(move || {
///                 let mut g = m.lock();
///                 spindle::time::sleep(Duration::from_millis(1)); // held across a wait
///                 *g += 1;
///             })
///         })
///         .collect();
///     for h in handles { h.join().unwrap(); }
///     assert_eq!(*m.lock(), 10);
/// });
/// ```
pub struct Mutex<T: ?Sized> {
    state: LockWord,
    waiters: std::sync::Mutex<WaitQueue>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and the state protocol
// grants at most one guard at a time; moving T between threads is what
// T: Send allows.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above: `&Mutex` gives exclusive access to T one holder at a
// time, which needs T: Send (like std's Mutex).
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            state: LockWord::new(),
            waiters: std::sync::Mutex::new(WaitQueue::new()),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, parking the fiber (or blocking the thread) while another
    /// holder has it.
    ///
    /// A cancellation point: a cancelled fiber leaves here by unwinding —
    /// also from a destructor that runs after the fiber saw its cancel as
    /// an error (only a destructor run *by* an unwind waits shielded). Work
    /// that must finish on a cancelled fiber, such as removing itself from
    /// a registry, belongs under a lock never held across a wait (`std`'s).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        if self.state.try_lock() {
            return MutexGuard { lock: self };
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&self) -> MutexGuard<'_, T> {
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Lock,
            None,
            |notify| {
                let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
                // Take the lock if it was released meanwhile, or mark it
                // contended so that its unlock takes the queue.
                if self.state.take_or_contend() {
                    return false;
                }
                q.push(notify, ());
                true
            },
            |notify| self.remove_waiter(notify),
        );
        match why {
            // Granted at registration, or handed over by `unlock`.
            Wake::Ready => MutexGuard { lock: self },
            Wake::Cancelled => park::exit_cancelled(),
            Wake::Elapsed => crate::sched::park::elapsed_exit(),
            Wake::TimedOut | Wake::Closed => unreachable!("a lock wait has no deadline"),
        }
    }

    /// Locks if nobody holds the lock.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.state.try_lock().then_some(MutexGuard { lock: self })
    }

    /// Whether someone holds the lock (a racy hint).
    pub fn is_locked(&self) -> bool {
        self.state.is_locked()
    }

    /// The value, through exclusive access to the mutex (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    fn remove_waiter(&self, notify: &Notify) {
        let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        q.remove(notify);
    }

    fn unlock(&self) {
        if self.state.unlock_uncontended() {
            return;
        }
        let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if q.wake_first().is_some() {
            // Handed over: the state stays locked for the woken waiter.
            self.state.handed_over(!q.is_empty());
            return;
        }
        self.state.release();
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("Mutex").field("value", &&*g).finish(),
            None => f.write_str("Mutex { <locked> }"),
        }
    }
}

/// Access to a [`Mutex`]'s value; unlocks on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized> {
    lock: &'a Mutex<T>,
}

// SAFETY: sharing the guard shares `&T`, which needs T: Sync.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// The mutex this guard locks (for `Condvar`).
    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.lock
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the one holder the protocol allows.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

// ---------------------------------------------------------------------------

/// The state of an [`RwLock`], under its `std::sync::Mutex`.
struct RwState {
    /// Readers holding the lock.
    readers: usize,
    /// A writer holds the lock.
    writer: bool,
    /// Waiting requests in arrival order; the data says "a writer".
    queue: WaitQueue<bool>,
}

/// A reader-writer lock whose waits park the fiber, fair in arrival order.
///
/// ```
/// spindle::run(|| {
///     let l = std::sync::Arc::new(spindle::sync::RwLock::new(vec![1]));
///     let r1 = l.read();
///     let r2 = l.read(); // readers share
///     assert_eq!(r1.len() + r2.len(), 2);
///     drop((r1, r2));
///     l.write().push(2);
///     assert_eq!(*l.read(), vec![1, 2]);
/// });
/// ```
pub struct RwLock<T: ?Sized> {
    state: std::sync::Mutex<RwState>,
    value: UnsafeCell<T>,
}

// SAFETY: like std's RwLock: exclusive access needs T: Send, shared access
// from several threads needs T: Sync; the state protocol grants either one
// writer or any number of readers.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

impl<T> RwLock<T> {
    /// A new unlocked lock.
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            state: std::sync::Mutex::new(RwState {
                readers: 0,
                writer: false,
                queue: WaitQueue::new(),
            }),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    fn st(&self) -> std::sync::MutexGuard<'_, RwState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquire(&self, write: bool) {
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Lock,
            None,
            |notify| {
                let mut st = self.st();
                let free = if write {
                    !st.writer && st.readers == 0
                } else {
                    !st.writer
                };
                if free && st.queue.is_empty() {
                    if write {
                        st.writer = true;
                    } else {
                        st.readers += 1;
                    }
                    return false;
                }
                st.queue.push(notify, write);
                true
            },
            |notify| {
                self.st().queue.remove(notify);
            },
        );
        match why {
            Wake::Ready => {}
            Wake::Cancelled => park::exit_cancelled(),
            Wake::Elapsed => crate::sched::park::elapsed_exit(),
            Wake::TimedOut | Wake::Closed => unreachable!("a lock wait has no deadline"),
        }
    }

    /// Grants the queue's head: one writer, or readers up to a writer.
    /// Grants are recorded before the wake, so a waiter woken `Ready` holds
    /// the lock; a wake that fails (a cancelled waiter) takes it back.
    fn grant(st: &mut RwState) {
        while let Some(&write) = st.queue.front() {
            if write {
                if st.writer || st.readers > 0 {
                    return;
                }
                let next = st.queue.pop_front().expect("front");
                st.writer = true;
                if next.notify.wake_owned(Wake::Ready) {
                    return;
                }
                st.writer = false;
            } else {
                if st.writer {
                    return;
                }
                let next = st.queue.pop_front().expect("front");
                st.readers += 1;
                if !next.notify.wake_owned(Wake::Ready) {
                    st.readers -= 1;
                }
            }
        }
    }

    /// Shared access, parking while a writer holds or waits first.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.acquire(false);
        RwLockReadGuard { lock: self }
    }

    /// Exclusive access, parking while anyone holds the lock.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.acquire(true);
        RwLockWriteGuard { lock: self }
    }

    /// Shared access if it can be had at once.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let mut st = self.st();
        if st.writer || !st.queue.is_empty() {
            return None;
        }
        st.readers += 1;
        Some(RwLockReadGuard { lock: self })
    }

    /// Exclusive access if it can be had at once.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let mut st = self.st();
        if st.writer || st.readers > 0 || !st.queue.is_empty() {
            return None;
        }
        st.writer = true;
        Some(RwLockWriteGuard { lock: self })
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_read() {
            Some(g) => f.debug_struct("RwLock").field("value", &&*g).finish(),
            None => f.write_str("RwLock { <locked> }"),
        }
    }
}

/// Shared access to an [`RwLock`]'s value.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

// SAFETY: shares `&T` only.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: readers hold the lock; no writer can until they release.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        let mut st = self.lock.st();
        st.readers -= 1;
        RwLock::<T>::grant(&mut st);
    }
}

/// Exclusive access to an [`RwLock`]'s value.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

// SAFETY: shares `&T` only.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the one writer holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, unique through `&mut self`.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        let mut st = self.lock.st();
        st.writer = false;
        RwLock::<T>::grant(&mut st);
    }
}
