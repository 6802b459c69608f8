//! The two per-fiber words every wake goes through: the *park token* and
//! the *wait word* (`docs/DESIGN.md`, "One way to wait").
//!
//! Both are plain atomics with a small protocol, kept here apart from the
//! rest of the fiber so that the model tests (`tests/loom_models.rs`) can
//! check them under every interleaving loom allows.
//!
//! # Park token
//!
//! Three values, `EMPTY`, `NOTIFIED`, `PARKED`. `park` takes `NOTIFIED` if
//! it is there and returns. Otherwise the fiber switches out, and only then
//! — its registers saved — does its worker flip `EMPTY → PARKED`
//! ([`ParkToken::finish_park`]); if an `unpark` slipped in meanwhile the
//! flip fails and the worker requeues the fiber itself. `unpark` swaps in
//! `NOTIFIED` ([`ParkToken::notify`]); if it took `PARKED` it is the one
//! party that must schedule the fiber. So a parked fiber is scheduled
//! exactly once per park, never before its context is saved.
//!
//! # Wait word
//!
//! `seq << 8 | outcome`. Starting a wait bumps `seq` and sets a pending
//! outcome ([`WaitWord::begin`]); each party that may end it holds the
//! `seq` and races a compare-exchange from the pending code to its own
//! outcome ([`WaitWord::complete`]). Exactly one wins. A party holding an
//! older `seq` can never end a later wait.

use crate::loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use crate::membarrier;

const EMPTY: u8 = 0;
const NOTIFIED: u8 = 1;
const PARKED: u8 = 2;

/// A fiber's park token (std's park semantics, made switch-safe).
#[derive(Debug)]
pub(crate) struct ParkToken(AtomicU8);

impl ParkToken {
    pub(crate) fn new() -> ParkToken {
        ParkToken(AtomicU8::new(EMPTY))
    }

    /// Takes the token if present (the fiber itself, before it parks).
    #[inline]
    pub(crate) fn take(&self) -> bool {
        // A plain load first: the token is usually absent, and a failed
        // compare-exchange still costs a locked instruction.
        self.0.load(Ordering::Acquire) == NOTIFIED
            && self
                .0
                .compare_exchange(NOTIFIED, EMPTY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The worker, after the fiber switched out to park: true if it is now
    /// parked; false if a token arrived meanwhile and the fiber must be
    /// requeued.
    #[inline]
    pub(crate) fn finish_park(&self) -> bool {
        self.0
            .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Makes the token available; true if the caller took a parked fiber
    /// and must schedule it.
    #[inline]
    pub(crate) fn notify(&self) -> bool {
        self.0.swap(NOTIFIED, Ordering::SeqCst) == PARKED
    }

    /// The fiber, resumed after a park: consumes the token that woke it.
    #[inline]
    pub(crate) fn consume_after_wake(&self) {
        self.0.store(EMPTY, Ordering::Release);
    }
}

/// A fiber's wait word: `seq << 8 | outcome`.
#[derive(Debug)]
pub(crate) struct WaitWord(AtomicU64);

impl WaitWord {
    pub(crate) fn new() -> WaitWord {
        WaitWord(AtomicU64::new(0))
    }

    /// Starts a new wait with the pending code `waiting` (the fiber's owner
    /// only); returns its sequence number.
    #[inline]
    pub(crate) fn begin(&self, waiting: u8) -> u64 {
        let seq = (self.0.load(Ordering::Relaxed) >> 8) + 1;
        self.0.store(seq << 8 | waiting as u64, Ordering::Release);
        seq
    }

    /// The current word.
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Ends wait `seq` with `outcome` if it is still pending as `waiting`;
    /// exactly one caller wins.
    #[inline]
    pub(crate) fn complete(&self, seq: u64, waiting: u8, outcome: u8) -> bool {
        self.0
            .compare_exchange(
                seq << 8 | waiting as u64,
                seq << 8 | outcome as u64,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// A fiber's cancel flag, and its handshake with the wait word.
///
/// # The protocol
///
/// The canceller raises the flag, runs a full fence, then reads the wait
/// word and, if a wait is pending, races to end it with `Cancelled`
/// ([`raise_unfenced`](Self::raise_unfenced), [`membarrier::heavy`], then
/// [`WaitWord::load`]). A canceller that finds a pending wait and ends it
/// by the compare-exchange needs no fence at all: only when it sees none
/// does it fence and look again. A waiter publishes its
/// wait ([`WaitWord::begin`] and its registration), runs a full fence, then
/// reads the flag ([`seen_after_publish`](Self::seen_after_publish)) and
/// ends its own wait if it is raised. With a fence between each side's
/// write and its read, at least one of them sees the other, so a cancel
/// that comes while a wait starts is never lost.
///
/// Every wait runs the waiter's side and a cancel is rare, so the fence is
/// the asymmetric one (`crate::membarrier`): a compiler fence for the
/// waiter, a process-wide barrier for the canceller. Cancelling many
/// fibers at once (shutdown) raises every flag with
/// [`raise_unfenced`](Self::raise_unfenced) and runs one
/// [`membarrier::heavy`] before reading their wait words.
#[derive(Debug)]
pub(crate) struct CancelFlag(AtomicBool);

impl CancelFlag {
    pub(crate) fn new() -> CancelFlag {
        CancelFlag(AtomicBool::new(false))
    }

    /// Raises the flag. The canceller runs [`membarrier::heavy`] before it
    /// relies on a read of the wait word that showed no pending wait (one
    /// barrier may serve many flags), or never reads it (a fiber not
    /// started).
    #[inline]
    pub(crate) fn raise_unfenced(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the flag is raised (a plain check, outside the handshake).
    #[inline]
    pub(crate) fn is_raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The waiter's read, after it published its wait: fence, then the flag.
    #[inline]
    pub(crate) fn seen_after_publish(&self) -> bool {
        membarrier::light();
        self.0.load(Ordering::SeqCst)
    }
}

/// A fiber's lifecycle bits (`fiber::state`): set once each, never
/// cleared, so every change is one `fetch_or`.
///
/// # The join-waiter protocol
///
/// A joiner that finds `COMPLETE` clear writes its waiter into the fiber's
/// `join_waiter` cell, then sets `JOIN_WAITER`. The completer sets
/// `COMPLETE` and, if the previous bits had `JOIN_WAITER`, takes the waiter
/// from the cell and wakes it. Whoever sets its bit second sees the other's:
/// the waiter is woken exactly when it was published before completion, and
/// the cell is never touched by both at once (the joiner writes it only
/// while `JOIN_WAITER` is clear, the completer reads it only after seeing
/// it set). `DETACHED` and `COMPLETE` decide who drops the result the same
/// way.
#[derive(Debug)]
pub(crate) struct StateWord(AtomicU8);

impl StateWord {
    pub(crate) fn new() -> StateWord {
        StateWord(AtomicU8::new(0))
    }

    /// The bits now.
    #[inline]
    pub(crate) fn load(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    /// Sets `bits`; returns the bits before.
    #[inline]
    pub(crate) fn set(&self, bits: u8) -> u8 {
        self.0.fetch_or(bits, Ordering::AcqRel)
    }
}

#[cfg(all(test, spindle_loom))]
mod models {
    use super::*;
    use crate::loom::sync::atomic::AtomicUsize;
    use crate::loom::sync::Arc;
    use ::loom::thread;

    /// A parking fiber (take, switch out, the worker's `finish_park`)
    /// against an `unpark` from another thread: the fiber runs again
    /// exactly once — by its worker's requeue, by the unparker's schedule,
    /// or by never switching out — and never while it is still switching.
    #[test]
    fn park_against_unpark_schedules_exactly_once() {
        ::loom::model(|| {
            let token = Arc::new(ParkToken::new());
            let scheduled = Arc::new(AtomicUsize::new(0));
            let (t, s) = (token.clone(), scheduled.clone());
            let unparker = thread::spawn(move || {
                if t.notify() {
                    s.fetch_add(1, Ordering::SeqCst);
                }
            });
            // The fiber's side, then its worker's.
            if token.take() {
                scheduled.fetch_add(1, Ordering::SeqCst); // never switched out
            } else if !token.finish_park() {
                scheduled.fetch_add(1, Ordering::SeqCst); // the worker requeues
            }
            unparker.join().unwrap();
            assert_eq!(scheduled.load(Ordering::SeqCst), 1);
        });
    }

    /// Two unparkers racing one park: still scheduled once, and the token
    /// left behind lets the next park return at once.
    #[test]
    fn two_unparks_schedule_once_and_leave_the_token() {
        ::loom::model(|| {
            let token = Arc::new(ParkToken::new());
            let scheduled = Arc::new(AtomicUsize::new(0));
            let unparkers: Vec<_> = (0..2)
                .map(|_| {
                    let (t, s) = (token.clone(), scheduled.clone());
                    thread::spawn(move || {
                        if t.notify() {
                            s.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            let switched = !token.take();
            if switched && !token.finish_park() {
                scheduled.fetch_add(1, Ordering::SeqCst);
            }
            for u in unparkers {
                u.join().unwrap();
            }
            if switched {
                let runs = scheduled.load(Ordering::SeqCst);
                assert_eq!(runs, 1);
                token.consume_after_wake();
            }
            // Whatever happened, a token is not lost for later: either it
            // was consumed by this park, or it is still there.
        });
    }

    const WAITING: u8 = 1;
    const READY: u8 = 2;
    const CANCELLED: u8 = 3;
    const ELAPSED: u8 = 4;

    /// A wake, a cancel and a timeout race one wait: exactly one wins, and
    /// the word holds the winner's outcome.
    #[test]
    fn one_of_wake_cancel_and_timeout_wins() {
        ::loom::model(|| {
            let word = Arc::new(WaitWord::new());
            let seq = word.begin(WAITING);
            let winners = Arc::new(AtomicUsize::new(0));
            let parties: Vec<_> = [READY, CANCELLED, ELAPSED]
                .into_iter()
                .map(|outcome| {
                    let (w, n) = (word.clone(), winners.clone());
                    thread::spawn(move || {
                        if w.complete(seq, WAITING, outcome) {
                            n.fetch_add(1, Ordering::SeqCst);
                            Some(outcome)
                        } else {
                            None
                        }
                    })
                })
                .collect();
            let won: Vec<u8> = parties
                .into_iter()
                .filter_map(|p| p.join().unwrap())
                .collect();
            assert_eq!(won.len(), 1);
            assert_eq!(winners.load(Ordering::SeqCst), 1);
            assert_eq!(word.load(), seq << 8 | won[0] as u64);
        });
    }

    const COMPLETE: u8 = 2;
    const JOIN_WAITER: u8 = 4;
    const DETACHED: u8 = 32;

    /// A joiner publishing its waiter races the fiber completing: the
    /// waiter is woken exactly when it was published before completion,
    /// and the cell is never accessed by both (loom checks the cell).
    #[test]
    fn a_join_waiter_is_woken_exactly_when_published_before_completion() {
        ::loom::model(|| {
            let state = Arc::new(StateWord::new());
            let cell = Arc::new(crate::loom::cell::UnsafeCell::new(None::<u32>));
            let (st, c) = (state.clone(), cell.clone());
            let completer = thread::spawn(move || {
                let prev = st.set(COMPLETE);
                if prev & JOIN_WAITER != 0 {
                    // SAFETY (model): JOIN_WAITER was set, the joiner is done
                    // with the cell.
                    c.with_mut(|p| unsafe { (*p).take() })
                } else {
                    None
                }
            });
            // The joiner (`JoinHandle::register_joiner`).
            let published = if state.load() & COMPLETE == 0 {
                // SAFETY (model): JOIN_WAITER is clear, the completer does
                // not read the cell.
                cell.with_mut(|p| unsafe { *p = Some(7) });
                state.set(JOIN_WAITER) & COMPLETE == 0
            } else {
                false
            };
            let woken = completer.join().unwrap();
            assert_eq!(woken.is_some(), published);
            assert!(state.load() & COMPLETE != 0);
        });
    }

    /// The handle's drop (`DETACHED`) races the completion (`COMPLETE`):
    /// exactly one of them drops the result.
    #[test]
    fn exactly_one_of_detach_and_complete_drops_the_result() {
        ::loom::model(|| {
            let state = Arc::new(StateWord::new());
            let drops = Arc::new(AtomicUsize::new(0));
            let (st, d) = (state.clone(), drops.clone());
            let completer = thread::spawn(move || {
                if st.set(COMPLETE) & DETACHED != 0 {
                    d.fetch_add(1, Ordering::SeqCst);
                }
            });
            if state.set(DETACHED) & COMPLETE != 0 {
                drops.fetch_add(1, Ordering::SeqCst);
            }
            completer.join().unwrap();
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        });
    }

    /// A value handed to a parked receiver (`WaitQueue::hand_over`: put in
    /// its slot, then end its wait) races the receiver's timeout: the value
    /// ends up exactly once — with the receiver if the wake won, back with
    /// the sender if the timeout did.
    #[test]
    fn a_handed_over_value_is_never_lost_to_a_racing_timeout() {
        ::loom::model(|| {
            let word = Arc::new(WaitWord::new());
            let seq = word.begin(WAITING);
            // The channel lock, with the receiver's slot under it.
            let slot = Arc::new(::loom::sync::Mutex::new(None::<u32>));
            let (w, s) = (word.clone(), slot.clone());
            let sender = thread::spawn(move || {
                let mut slot = s.lock().unwrap();
                *slot = Some(42);
                if w.complete(seq, WAITING, READY) {
                    None
                } else {
                    // Lost: take the value back for the next receiver.
                    slot.take()
                }
            });
            // The receiver's timer fires.
            let timed_out = word.complete(seq, WAITING, ELAPSED);
            let received = if timed_out {
                // Unregisters under the lock; a value there is not its own.
                None
            } else {
                slot.lock().unwrap().take()
            };
            let returned = sender.join().unwrap();
            let owners = received.is_some() as u8 + returned.is_some() as u8;
            assert_eq!(owners, 1, "the value was lost or duplicated");
            assert_eq!(received.is_some(), !timed_out);
        });
    }

    /// A cancel races a wait being published (`fiber::wait::cancel` against
    /// `sched::park::wait`): the waiter sees the flag, or the canceller sees
    /// the pending wait and ends it — the cancel is never lost. As in
    /// `cancel`, the canceller tries the wait word first and fences only
    /// when it found no pending wait to end.
    #[test]
    fn a_cancel_during_a_wait_start_is_never_lost() {
        ::loom::model(|| {
            let word = Arc::new(WaitWord::new());
            let flag = Arc::new(CancelFlag::new());
            let (w, f) = (word.clone(), flag.clone());
            let canceller = thread::spawn(move || {
                let end = |w: &WaitWord| {
                    let current = w.load();
                    current & 0xff == WAITING as u64 && w.complete(current >> 8, WAITING, CANCELLED)
                };
                f.raise_unfenced();
                if end(&w) {
                    return true;
                }
                membarrier::heavy();
                end(&w)
            });
            let seq = word.begin(WAITING);
            let saw_flag = flag.seen_after_publish();
            let ended_itself = saw_flag && word.complete(seq, WAITING, CANCELLED);
            let cancelled_it = canceller.join().unwrap();
            assert!(
                saw_flag || cancelled_it,
                "the cancel was lost: the wait goes on"
            );
            assert!(!(ended_itself && cancelled_it), "one winner");
            assert_eq!(word.load(), seq << 8 | CANCELLED as u64);
        });
    }

    /// A waker holding the previous wait's `seq` races the owner starting
    /// the next wait: it can never end the new one.
    #[test]
    fn a_stale_token_never_ends_a_later_wait() {
        ::loom::model(|| {
            let word = Arc::new(WaitWord::new());
            let first = word.begin(WAITING);
            // The first wait ends normally.
            assert!(word.complete(first, WAITING, READY));
            let w = word.clone();
            let stale = thread::spawn(move || w.complete(first, WAITING, CANCELLED));
            let second = word.begin(WAITING);
            let stale_won = stale.join().unwrap();
            assert!(!stale_won, "a stale token ended a wait");
            assert_eq!(word.load(), second << 8 | WAITING as u64);
            assert!(word.complete(second, WAITING, READY));
        });
    }
}
