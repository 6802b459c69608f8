//! The state word of [`Mutex`](super::Mutex) and its hand-over protocol,
//! apart from the rest of the lock so that the model tests
//! (`tests/loom_models.rs`) can check it under every interleaving loom
//! allows.
//!
//! # The protocol
//!
//! The word is `UNLOCKED`, `LOCKED` or `CONTENDED` (locked, waiters
//! queued). Locking a free lock is one compare-exchange
//! ([`LockWord::try_lock`]). A contended locker takes the waiter queue's
//! lock and, under it, either takes the lock (released meanwhile) or marks
//! it `CONTENDED` and queues itself ([`LockWord::take_or_contend`]). An
//! unlock of an uncontended lock is one compare-exchange
//! ([`LockWord::unlock_uncontended`]); otherwise, under the queue's lock, it
//! *hands the lock over* to the first waiter still waiting — the word stays
//! locked for it, `CONTENDED` while others wait ([`LockWord::handed_over`])
//! — or, with no such waiter, releases it ([`LockWord::release`]). Only the
//! holder unlocks, and every change from `CONTENDED` happens under the
//! queue's lock, so a queued waiter is never left behind a free lock.

use crate::loom::sync::atomic::{AtomicU8, Ordering};

const UNLOCKED: u8 = 0;
const LOCKED: u8 = 1;
const CONTENDED: u8 = 2;

/// A [`Mutex`](super::Mutex)'s state (see the module docs).
#[derive(Debug)]
pub(crate) struct LockWord(AtomicU8);

impl LockWord {
    /// An unlocked word.
    #[cfg(not(all(spindle_loom, test)))]
    pub(crate) const fn new() -> LockWord {
        LockWord(AtomicU8::new(UNLOCKED))
    }

    /// An unlocked word (loom's atomics are not `const`).
    #[cfg(all(spindle_loom, test))]
    pub(crate) fn new() -> LockWord {
        LockWord(AtomicU8::new(UNLOCKED))
    }

    /// Takes a free lock; false if it is held.
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Under the waiter queue's lock: takes the lock if it was released
    /// meanwhile (true), or marks it contended so that its unlock takes the
    /// queue (false: the caller queues itself before releasing the queue).
    pub(crate) fn take_or_contend(&self) -> bool {
        // A compare-exchange, not a store: the holder's uncontended unlock
        // may run concurrently.
        let mut s = self.0.load(Ordering::Relaxed);
        loop {
            let next = if s == UNLOCKED { LOCKED } else { CONTENDED };
            match self
                .0
                .compare_exchange(s, next, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return s == UNLOCKED,
                Err(actual) => s = actual,
            }
        }
    }

    /// The holder unlocks a lock nobody waits for; false if it is contended
    /// (then the holder takes the queue's lock and hands it over).
    #[inline]
    pub(crate) fn unlock_uncontended(&self) -> bool {
        self.0
            .compare_exchange(LOCKED, UNLOCKED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Under the queue's lock: the lock was handed to a woken waiter and
    /// stays locked for it; `CONTENDED` only while others still wait.
    pub(crate) fn handed_over(&self, others_wait: bool) {
        if !others_wait {
            self.0.store(LOCKED, Ordering::Release);
        }
    }

    /// Under the queue's lock, with no waiter left to hand it to: frees it.
    pub(crate) fn release(&self) {
        self.0.store(UNLOCKED, Ordering::Release);
    }

    /// Whether someone holds the lock (a racy hint).
    pub(crate) fn is_locked(&self) -> bool {
        self.0.load(Ordering::Relaxed) != UNLOCKED
    }
}

#[cfg(all(test, spindle_loom))]
mod models {
    use std::collections::VecDeque;

    use super::*;
    use crate::loom::sync::atomic::AtomicBool;
    use crate::loom::sync::Arc;
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::Mutex;
    use ::loom::thread;

    /// A lock with its waiter queue, as `sync::Mutex` uses the word; a
    /// waiter "parks" by spinning on its grant flag.
    struct Lock {
        word: LockWord,
        queue: Mutex<VecDeque<Arc<AtomicBool>>>,
        value: UnsafeCell<u32>,
    }

    impl Lock {
        fn lock(&self) {
            if self.word.try_lock() {
                return;
            }
            let granted = Arc::new(AtomicBool::new(false));
            {
                let mut q = self.queue.lock().unwrap();
                if self.word.take_or_contend() {
                    return;
                }
                q.push_back(granted.clone());
            }
            while !granted.load(Ordering::Acquire) {
                thread::yield_now();
            }
        }

        fn unlock(&self) {
            if self.word.unlock_uncontended() {
                return;
            }
            let mut q = self.queue.lock().unwrap();
            match q.pop_front() {
                Some(next) => {
                    // As `Mutex::unlock`: wake first, then settle the word,
                    // both under the queue's lock.
                    next.store(true, Ordering::Release);
                    self.word.handed_over(!q.is_empty());
                }
                None => self.word.release(),
            }
        }
    }

    /// Two lockers and a holder: every locker gets the lock, never two at
    /// once (loom checks the cell), and the lock ends free. Bounded to
    /// five preemptions: the waiters' spin loops make the full space
    /// too large to explore in CI.
    #[test]
    fn the_lock_is_handed_over_to_each_waiter_once_and_ends_free() {
        let mut model = ::loom::model::Builder::new();
        model.preemption_bound = Some(5);
        model.check(|| {
            let lock = Arc::new(Lock {
                word: LockWord::new(),
                queue: Mutex::new(VecDeque::new()),
                value: UnsafeCell::new(0),
            });
            assert!(lock.word.try_lock());
            let lockers: Vec<_> = (0..2)
                .map(|_| {
                    let l = lock.clone();
                    thread::spawn(move || {
                        l.lock();
                        l.value.with_mut(|v| unsafe { *v += 1 });
                        l.unlock();
                    })
                })
                .collect();
            lock.value.with_mut(|v| unsafe { *v += 1 });
            lock.unlock();
            for t in lockers {
                t.join().unwrap();
            }
            assert_eq!(lock.value.with(|v| unsafe { *v }), 3);
            assert!(!lock.word.is_locked(), "the lock ends free");
            assert!(lock.queue.lock().unwrap().is_empty());
        });
    }
}
