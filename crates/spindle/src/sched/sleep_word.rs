//! A worker's sleep word, and the handshake that keeps a push from slipping
//! between a worker's last look at its queues and its sleep
//! (`docs/DESIGN.md`, "Sleeping and spinning").
//!
//! # The protocol
//!
//! The sleeper *announces* its sleep state ([`SleepWord::announce`]),
//! counts itself in the scheduler's `sleepers`, runs a full fence
//! ([`full_fence`]), and only then looks at its queues one last time. A
//! pusher pushes, runs a full fence, and only then reads `sleepers` and the
//! sleep word ([`SleepWord::wake`]). With a full fence between each side's
//! write and its read, at least one side sees the other: either the sleeper
//! sees the push and does not sleep, or the pusher sees the announcement and
//! wakes it. A sleeper that leaves on its own ([`SleepWord::leave`]) and a
//! pusher's wake race on one compare-exchange, so the `sleepers` count is
//! decremented exactly once per sleep.
//!
//! The model test (`tests/loom_models.rs`) checks this under every
//! interleaving loom allows.

use crate::loom::sync::atomic::{fence, AtomicU8, Ordering};

/// Awake (or about to look at its queues again).
pub(crate) const AWAKE: u8 = 0;
/// Asleep on its thread parker (futex).
pub(crate) const SLEEPING: u8 = 1;
/// Asleep in `epoll_wait`, holding the poller's lease: woken by the eventfd.
pub(crate) const POLLING: u8 = 2;

/// One worker's sleep state.
#[derive(Debug)]
pub(crate) struct SleepWord(AtomicU8);

impl SleepWord {
    pub(crate) fn new() -> SleepWord {
        SleepWord(AtomicU8::new(AWAKE))
    }

    /// The worker is about to sleep in `state`. It must run [`full_fence`]
    /// (after counting itself a sleeper) before its last look at the queues.
    #[inline]
    pub(crate) fn announce(&self, state: u8) {
        self.0.store(state, Ordering::SeqCst);
    }

    /// The worker leaves the sleep it announced; true if it left it itself
    /// (no waker took it, so the worker uncounts itself).
    #[inline]
    pub(crate) fn leave(&self, state: u8) -> bool {
        self.0
            .compare_exchange(state, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Whether the worker is (still) in `state`.
    #[inline]
    pub(crate) fn is(&self, state: u8) -> bool {
        self.0.load(Ordering::SeqCst) == state
    }

    /// A pusher, after its push and a [`full_fence`]: takes the worker out
    /// of its sleep. Returns the state it took ([`AWAKE`]: the worker was
    /// awake, or another waker or the worker itself was first), which says
    /// how to wake the thread.
    #[inline]
    pub(crate) fn wake(&self) -> u8 {
        if self.0.load(Ordering::SeqCst) == AWAKE {
            return AWAKE;
        }
        self.0.swap(AWAKE, Ordering::SeqCst)
    }
}

/// The full fence each side runs between its write and its read.
#[inline]
pub(crate) fn full_fence() {
    fence(Ordering::SeqCst);
}

#[cfg(all(test, spindle_loom))]
mod models {
    use super::*;
    use crate::loom::sync::atomic::{AtomicBool, AtomicUsize};
    use crate::loom::sync::Arc;
    use ::loom::thread;

    /// A worker going to sleep against a push from another thread (the
    /// global queue's shape: push, fence, read `sleepers`, wake): the push
    /// is never missed — the worker sees it, or the pusher wakes the worker
    /// — and `sleepers` ends at zero.
    #[test]
    fn a_push_is_seen_by_the_sleeper_or_wakes_it() {
        ::loom::model(|| {
            let word = Arc::new(SleepWord::new());
            let sleepers = Arc::new(AtomicUsize::new(0));
            let queued = Arc::new(AtomicBool::new(false));
            let (w, s, q) = (word.clone(), sleepers.clone(), queued.clone());
            let pusher = thread::spawn(move || {
                q.store(true, Ordering::Release);
                full_fence();
                if s.load(Ordering::SeqCst) == 0 {
                    return false;
                }
                if w.wake() != AWAKE {
                    s.fetch_sub(1, Ordering::SeqCst);
                    return true;
                }
                false
            });
            // The worker's side.
            word.announce(SLEEPING);
            sleepers.fetch_add(1, Ordering::SeqCst);
            full_fence();
            let saw_work = queued.load(Ordering::Acquire);
            let mut left_itself = false;
            if saw_work && word.leave(SLEEPING) {
                sleepers.fetch_sub(1, Ordering::SeqCst);
                left_itself = true;
            }
            let woken = pusher.join().unwrap();
            assert!(
                saw_work || woken,
                "the push was missed: the worker sleeps on it"
            );
            if !saw_work {
                // It slept; the pusher's wake is what ended the sleep.
                assert!(!word.is(SLEEPING));
            }
            if saw_work && !left_itself {
                assert!(woken, "someone took the sleep state");
            }
            assert_eq!(sleepers.load(Ordering::SeqCst), 0);
        });
    }
}
