//! [`HandOff`]: the one-value cell where a channel's waker leaves a message
//! for a parked receiver, and where a parked sender keeps the message it
//! could not send yet (see the channel module's design notes).
//!
//! # Protocol
//!
//! A state word says who may touch the value: `EMPTY`, `FULL`, or `BUSY`
//! while one party moves a value in or out. [`put`](HandOff::put) moves
//! `EMPTY → BUSY`, writes, and stores `FULL`; [`take`](HandOff::take) moves
//! `FULL → BUSY`, reads, and stores `EMPTY`. Only the party whose
//! compare-exchange entered `BUSY` touches the value, and its closing store
//! releases what it wrote to the next party's acquiring exchange. A `put`
//! that finds the cell not empty gives its value back; a `take` that finds
//! it not full gets nothing: neither waits, neither touches the value.
//!
//! Under the channel's protocol the two never race — a waker fills the cell
//! under the channel's lock before it ends the waiter's wait, and the waiter
//! empties it only after — so the state word is there to make the cell
//! sound on its own, not to order anything. It costs one locked instruction
//! per operation, where the mutex it replaces took two (a lock and an
//! unlock). The model test (`tests/loom_models.rs`) runs puts and takes
//! against each other.

use std::mem::MaybeUninit;

use crate::loom::cell::UnsafeCell;
use crate::loom::sync::atomic::{AtomicU8, Ordering};

const EMPTY: u8 = 0;
const BUSY: u8 = 1;
const FULL: u8 = 2;

/// A cell holding at most one value, filled and emptied from any thread.
pub(crate) struct HandOff<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is reached only by the one party whose exchange moved
// the state into `BUSY` (see the module docs), so sharing the cell shares
// no access to it; what crosses threads is the value itself, moved whole,
// which `T: Send` allows.
unsafe impl<T: Send> Send for HandOff<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for HandOff<T> {}

impl<T> HandOff<T> {
    /// An empty cell.
    pub(crate) fn empty() -> HandOff<T> {
        HandOff {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// A cell holding `value`.
    pub(crate) fn full(value: T) -> HandOff<T> {
        HandOff {
            state: AtomicU8::new(FULL),
            value: UnsafeCell::new(MaybeUninit::new(value)),
        }
    }

    /// Leaves `value` in the cell; gives it back if the cell is not empty.
    pub(crate) fn put(&self, value: T) -> Result<(), T> {
        if self
            .state
            .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(value);
        }
        // SAFETY: our exchange entered `BUSY`, so nobody else touches the
        // value until our store below; the slot is empty (`EMPTY`), so
        // nothing is overwritten without its drop.
        self.value.with_mut(|slot| unsafe { (*slot).write(value) });
        self.state.store(FULL, Ordering::Release);
        Ok(())
    }

    /// Takes the value out, if the cell holds one.
    pub(crate) fn take(&self) -> Option<T> {
        if self
            .state
            .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: our exchange entered `BUSY` from `FULL`: the value is
        // initialised (the putter's release store made its write visible to
        // our acquire), and nobody else touches it until our store below,
        // which marks it empty so that it is never read twice.
        let value = self
            .value
            .with(|slot| unsafe { (*slot).assume_init_read() });
        self.state.store(EMPTY, Ordering::Release);
        Some(value)
    }

    /// Whether the cell is empty, asked by the one party that can still
    /// reach it (nobody else can change that; the acquire load sees the
    /// last change another party made before letting go).
    pub(crate) fn is_empty_alone(&self) -> bool {
        self.state.load(Ordering::Acquire) == EMPTY
    }
}

impl<T> Drop for HandOff<T> {
    fn drop(&mut self) {
        // `&mut self`: no other party is in, so the state is `EMPTY` or
        // `FULL`, and the last writer's release reached us through whatever
        // gave us the cell (an `Arc`'s last drop acquires).
        if self.state.load(Ordering::Acquire) == FULL {
            // SAFETY: `FULL` means initialised, and the cell goes away, so
            // the value is dropped exactly once.
            self.value
                .with_mut(|slot| unsafe { (*slot).assume_init_drop() });
        }
    }
}

#[cfg(all(test, not(spindle_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_value_goes_in_once_and_comes_out_once() {
        let cell = HandOff::empty();
        assert_eq!(cell.take(), None);
        assert_eq!(cell.put(String::from("a")), Ok(()));
        assert_eq!(cell.put(String::from("b")), Err(String::from("b")));
        assert_eq!(cell.take().as_deref(), Some("a"));
        assert_eq!(cell.take(), None);
        // Emptied, it takes a value again (a receiver's slot is reused).
        assert_eq!(cell.put(String::from("c")), Ok(()));
        assert_eq!(cell.take().as_deref(), Some("c"));
    }

    #[test]
    fn a_full_cell_drops_its_value() {
        let value = std::sync::Arc::new(());
        drop(HandOff::full(value.clone()));
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
        let cell = HandOff::empty();
        cell.put(value.clone()).unwrap();
        drop(cell);
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
    }
}

#[cfg(all(test, spindle_loom))]
mod models {
    use super::*;
    use crate::loom::sync::Arc;
    use ::loom::thread;

    /// A put racing a take, with a second take afterwards: the value ends
    /// with exactly one taker (loom fails on a concurrent access to it),
    /// and the emptied cell takes a value again.
    #[test]
    fn a_put_racing_a_take_delivers_exactly_once() {
        ::loom::model(|| {
            let cell = Arc::new(HandOff::<Box<u32>>::empty());
            let putter = cell.clone();
            let t = thread::spawn(move || putter.put(Box::new(7)).is_ok());
            let first = cell.take();
            assert!(t.join().unwrap(), "the cell was empty");
            let second = cell.take();
            let got: Vec<u32> = first.into_iter().chain(second).map(|b| *b).collect();
            assert_eq!(got, vec![7]);
            assert!(cell.put(Box::new(8)).is_ok(), "emptied");
        });
    }

    /// Two puts on an empty cell and a take racing them: one put wins, the
    /// other gets its value back, and no value is lost or doubled.
    #[test]
    fn two_puts_and_a_take_lose_nothing() {
        ::loom::model(|| {
            let cell = Arc::new(HandOff::<Box<u32>>::empty());
            let (a, b) = (cell.clone(), cell.clone());
            let ta = thread::spawn(move || a.put(Box::new(1)).err().map(|v| *v));
            let tb = thread::spawn(move || b.put(Box::new(2)).err().map(|v| *v));
            let taken = cell.take().map(|v| *v);
            let back_a = ta.join().unwrap();
            let back_b = tb.join().unwrap();
            let left = cell.take().map(|v| *v);
            let mut all: Vec<u32> = [taken, back_a, back_b, left]
                .into_iter()
                .flatten()
                .collect();
            all.sort_unstable();
            assert_eq!(all, vec![1, 2]);
        });
    }

    /// A full cell dropped on another thread after a racing take: its value
    /// is dropped once, by whoever holds it last.
    #[test]
    fn a_value_left_in_the_cell_is_dropped_with_it() {
        ::loom::model(|| {
            let value = Arc::new(());
            let cell = Arc::new(HandOff::full(value.clone()));
            let other = cell.clone();
            let t = thread::spawn(move || {
                drop(other.take());
                drop(other);
            });
            drop(cell);
            t.join().unwrap();
            assert_eq!(Arc::strong_count(&value), 1);
        });
    }
}
