//! [`Mailbox`]: the one-fiber slot where a thread that wakes a fiber hands it
//! straight to the fiber's owner worker while that worker spins for work
//! (`docs/DESIGN.md`, "Sleeping and spinning").
//!
//! # Why
//!
//! A wake from another thread otherwise goes through the owner's inbox: the
//! scheduler's stamp clock (a locked add on a line both sides write), the
//! inbox's lock, its buffer, its published head, then the owner's own lock
//! and pop on the other side — each a cache line that crosses between the
//! two CPUs, in sequence, on every hop of a ping-pong across workers. A
//! spinning owner has nothing else to run, so the order its queues keep has
//! nothing to say about the fiber: it can take it from one word's line.
//!
//! # Protocol
//!
//! A state word says who may touch the slot:
//!
//! * `CLOSED` — the owner is not spinning: wakers use the inbox.
//! * `OPEN` — the owner spins and looks at the word between its looks at
//!   its queues ([`open`](Mailbox::open)).
//! * `CLAIMED` — one waker's exchange moved `OPEN → CLAIMED`; it alone
//!   writes the slot, then moves `CLAIMED → FULL` ([`offer`](Mailbox::offer)).
//! * `FULL` — the slot holds a fiber; only the owner touches it: it reads it
//!   and stores `CLOSED` ([`take`](Mailbox::take)).
//! * `ABANDONED` — the owner stopped spinning while a waker was between
//!   its two exchanges ([`close`](Mailbox::close)); that waker's second
//!   exchange fails, it takes its fiber back out, stores `CLOSED`, and
//!   goes the inbox way. The owner never waits for a waker.
//!
//! The owner leaves every spin through `take` or `close`, and `close`
//! returns a fiber left `FULL`, so no fiber stays in a slot whose owner has
//! gone to sleep; a waker whose offer fails keeps its fiber. Each closing
//! store releases the slot's last access to the next party's acquiring
//! exchange. The model tests (`tests/loom_models.rs`) run offers against an
//! owner's spin under every interleaving loom allows.

use std::mem::MaybeUninit;

use crate::loom::cell::UnsafeCell;
use crate::loom::sync::atomic::{AtomicU8, Ordering};

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const CLAIMED: u8 = 2;
const FULL: u8 = 3;
const ABANDONED: u8 = 4;

/// A spinning owner's one-value slot, filled by at most one waker per spin.
pub(crate) struct Mailbox<T> {
    state: AtomicU8,
    slot: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the slot is reached only by the waker whose exchange entered
// `CLAIMED` (until it leaves that state) or by the owner once the state is
// `FULL` (see the module docs), so sharing the mailbox shares no access to
// it; what crosses threads is the value, moved whole, which `T: Send`
// allows.
unsafe impl<T: Send> Send for Mailbox<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Mailbox<T> {}

impl<T> Mailbox<T> {
    /// A closed mailbox.
    pub(crate) fn new() -> Mailbox<T> {
        Mailbox {
            state: AtomicU8::new(CLOSED),
            slot: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The owner starts to spin: wakers may hand it a value. False when the
    /// last waker it abandoned is still taking its value back (this spin
    /// then goes without the mailbox). Called only by the owner, with the
    /// mailbox closed by its last `take` or `close`.
    pub(crate) fn open(&self) -> bool {
        // Acquire: a waker that took its value back after an abandon
        // released the slot with its `CLOSED` store.
        self.state
            .compare_exchange(CLOSED, OPEN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// A waker hands `value` to the spinning owner; gives it back when the
    /// owner is not spinning, another waker was first, or the owner stopped
    /// spinning meanwhile.
    pub(crate) fn offer(&self, value: T) -> Result<(), T> {
        // A plain load first: a waker of a busy or sleeping owner reads a
        // line nobody writes, where an exchange would take it exclusive.
        if self.state.load(Ordering::Relaxed) != OPEN
            || self
                .state
                .compare_exchange(OPEN, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return Err(value);
        }
        // SAFETY: our exchange entered `CLAIMED`: nobody else touches the
        // slot until we leave that state, and it is empty (the owner read
        // the last value out before it closed, and opened again after).
        self.slot.with_mut(|slot| unsafe { (*slot).write(value) });
        match self
            .state
            .compare_exchange(CLAIMED, FULL, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(_abandoned) => {
                // SAFETY: the owner abandoned the spin and never touches a
                // slot it did not see `FULL`: the value we wrote is still
                // ours, read out once here.
                let value = self.slot.with(|slot| unsafe { (*slot).assume_init_read() });
                self.state.store(CLOSED, Ordering::Release);
                Err(value)
            }
        }
    }

    /// The owner, spinning, takes the value a waker left, closing the
    /// mailbox; `None` (the mailbox stays open) if there is none yet.
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        if self.state.load(Ordering::Acquire) != FULL {
            return None;
        }
        Some(self.read_full())
    }

    /// The owner stops spinning: closes the mailbox, and returns the value
    /// a waker left in it meanwhile. A waker still writing is abandoned:
    /// it keeps its value.
    pub(crate) fn close(&self) -> Option<T> {
        let seen =
            match self
                .state
                .compare_exchange(OPEN, CLOSED, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return None,
                Err(seen) => seen,
            };
        match seen {
            FULL => Some(self.read_full()),
            CLAIMED => match self.state.compare_exchange(
                CLAIMED,
                ABANDONED,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => None,
                // Only the waker's second exchange leaves `CLAIMED`.
                Err(seen) => {
                    debug_assert_eq!(seen, FULL);
                    Some(self.read_full())
                }
            },
            // Not open: nothing to close.
            _ => None,
        }
    }

    /// Reads the value out of a `FULL` slot and closes the mailbox.
    fn read_full(&self) -> T {
        // SAFETY: the state is `FULL`, which only the owner (us) leaves, and
        // the waker's release exchange into it made its write visible (our
        // callers saw `FULL` with an acquire); the store below marks the slot empty, so the value
        // is read once.
        let value = self.slot.with(|slot| unsafe { (*slot).assume_init_read() });
        self.state.store(CLOSED, Ordering::Release);
        value
    }
}

impl<T> Drop for Mailbox<T> {
    fn drop(&mut self) {
        // `&mut self`: no waker is in, so the state is not `CLAIMED`; a
        // `FULL` slot (an owner that never came back for it) holds a value.
        if self.state.load(Ordering::Acquire) == FULL {
            // SAFETY: `FULL` means initialised, and the mailbox goes away,
            // so the value is dropped exactly once.
            self.slot
                .with_mut(|slot| unsafe { (*slot).assume_init_drop() });
        }
    }
}

#[cfg(all(test, not(spindle_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_closed_mailbox_gives_the_value_back() {
        let m = Mailbox::new();
        assert_eq!(m.offer(String::from("a")), Err(String::from("a")));
        assert_eq!(m.take(), None);
        assert_eq!(m.close(), None);
    }

    #[test]
    fn one_offer_per_opening_reaches_the_owner() {
        let m = Mailbox::new();
        assert!(m.open());
        assert_eq!(m.take(), None);
        assert_eq!(m.offer(String::from("a")), Ok(()));
        assert_eq!(m.offer(String::from("b")), Err(String::from("b")));
        assert_eq!(m.take().as_deref(), Some("a"));
        // Taking closed it.
        assert_eq!(m.offer(String::from("c")), Err(String::from("c")));
        assert!(m.open());
        assert_eq!(m.offer(String::from("d")), Ok(()));
        // Closing with a value in it returns the value.
        assert_eq!(m.close().as_deref(), Some("d"));
        assert_eq!(m.close(), None);
    }

    #[test]
    fn a_value_left_in_it_is_dropped_with_it() {
        let value = std::sync::Arc::new(());
        let m = Mailbox::new();
        assert!(m.open());
        m.offer(value.clone()).unwrap();
        drop(m);
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
    }
}

#[cfg(all(test, spindle_loom))]
mod models {
    use super::*;
    use crate::loom::sync::Arc;
    use ::loom::thread;

    /// An owner that spins for a bounded number of looks against a waker's
    /// offer: the value ends exactly once with the owner (taken or returned
    /// by `close`) or back with the waker, never in the slot, and the
    /// mailbox ends closed and openable.
    #[test]
    fn an_offer_racing_the_owners_spin_delivers_exactly_once() {
        ::loom::model(|| {
            let m = Arc::new(Mailbox::<Box<u32>>::new());
            assert!(m.open());
            let waker = m.clone();
            let t = thread::spawn(move || waker.offer(Box::new(7)).err().map(|v| *v));
            let mut got = m.take().map(|v| *v);
            if got.is_none() {
                got = m.close().map(|v| *v);
            }
            let back = t.join().unwrap();
            assert!(got.is_some() != back.is_some(), "{got:?} {back:?}");
            assert_eq!(got.or(back), Some(7));
            assert!(m.open(), "the waker left the mailbox closed");
            assert_eq!(m.close().map(|v| *v), None);
        });
    }

    /// Two wakers against one opening: at most one offer is accepted, and
    /// both values end with exactly one party.
    #[test]
    fn two_offers_lose_nothing() {
        ::loom::model(|| {
            let m = Arc::new(Mailbox::<Box<u32>>::new());
            assert!(m.open());
            let (a, b) = (m.clone(), m.clone());
            let ta = thread::spawn(move || a.offer(Box::new(1)).err().map(|v| *v));
            let tb = thread::spawn(move || b.offer(Box::new(2)).err().map(|v| *v));
            let got = m.close().map(|v| *v);
            let back_a = ta.join().unwrap();
            let back_b = tb.join().unwrap();
            let mut all: Vec<u32> = [got, back_a, back_b].into_iter().flatten().collect();
            all.sort_unstable();
            assert_eq!(all, vec![1, 2]);
        });
    }

    /// The owner closes (abandoning a waker mid-offer, perhaps) and spins
    /// again at once, against a second waker: the second spin opens only
    /// once the first waker is out, and neither value is lost or doubled.
    #[test]
    fn an_abandoned_waker_does_not_leak_into_the_next_spin() {
        ::loom::model(|| {
            let m = Arc::new(Mailbox::<Box<u32>>::new());
            assert!(m.open());
            let (a, b) = (m.clone(), m.clone());
            let ta = thread::spawn(move || a.offer(Box::new(1)).err().map(|v| *v));
            let first = m.close().map(|v| *v);
            let reopened = m.open();
            let tb = thread::spawn(move || b.offer(Box::new(2)).err().map(|v| *v));
            let second = if reopened {
                m.close().map(|v| *v)
            } else {
                None
            };
            let back_a = ta.join().unwrap();
            let back_b = tb.join().unwrap();
            let mut all: Vec<u32> = [first, second, back_a, back_b]
                .into_iter()
                .flatten()
                .collect();
            all.sort_unstable();
            assert_eq!(all, vec![1, 2]);
        });
    }
}
