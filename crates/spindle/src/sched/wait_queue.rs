//! [`WaitQueue`]: the FIFO of parked waiters every primitive in `sync` and
//! `chan`, and a scope's parent, keep.
//!
//! A waiter is a [`Notify`] (a fiber's wait or a thread's) and what the
//! primitive needs to know about it (a reader-or-writer flag, a channel's
//! value slot). Releasing something — a lock, a permit, a message — goes to
//! the *first waiter whose wait is still pending*: waking is a race on the
//! waiter's wait word, and a waiter that timed out or was cancelled loses it,
//! so it is skipped and what was released goes to the next. A waiter whose
//! wait ended another way removes itself ([`WaitQueue::remove`]), under the
//! same lock.
//!
//! # Lock order
//!
//! A queue lives under its primitive's lock (a `std::sync::Mutex`). Waking
//! a fiber may take an inbox lock of the scheduler, so the order is: the
//! primitive's lock, then an inbox lock. A waker never takes a primitive's
//! lock, so the order cannot be reversed. Waking a *thread* takes no lock.

use std::collections::VecDeque;

use crate::sched::park::{Notify, Wake};

/// One parked waiter and its data.
pub(crate) struct Waiter<T> {
    pub(crate) notify: Notify,
    pub(crate) data: T,
}

/// A FIFO of parked waiters (see the module docs).
///
/// The first waiter is kept inline, beside the primitive's lock word, and
/// only the ones behind it in a buffer of their own: a primitive with one
/// waiter (a channel's receiver, a lock's next owner) is the common case,
/// and its waker then reads one cache line for the lock and the waiter
/// together instead of a second one the waiter wrote from another CPU.
pub(crate) struct WaitQueue<T = ()> {
    /// The first waiter; `None` only when `rest` is empty too.
    head: Option<Waiter<T>>,
    /// The waiters behind `head`, in order.
    rest: VecDeque<Waiter<T>>,
}

impl<T> Default for WaitQueue<T> {
    fn default() -> Self {
        WaitQueue::new()
    }
}

impl<T> WaitQueue<T> {
    /// An empty queue.
    pub(crate) const fn new() -> WaitQueue<T> {
        WaitQueue {
            head: None,
            rest: VecDeque::new(),
        }
    }

    /// Queues a waiter at the back.
    pub(crate) fn push(&mut self, notify: Notify, data: T) {
        let waiter = Waiter { notify, data };
        if self.head.is_none() {
            self.head = Some(waiter);
        } else {
            self.rest.push_back(waiter);
        }
    }

    /// Whether nobody waits (waiters whose wait ended but that have not
    /// removed themselves yet count as waiting).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// The data of the first waiter.
    pub(crate) fn front(&self) -> Option<&T> {
        self.head.as_ref().map(|w| &w.data)
    }

    /// Takes the first waiter without waking it.
    pub(crate) fn pop_front(&mut self) -> Option<Waiter<T>> {
        let first = self.head.take()?;
        self.head = self.rest.pop_front();
        Some(first)
    }

    /// Wakes the first waiter whose wait is still pending with `Ready` and
    /// returns its data; waiters whose wait already ended are dropped on
    /// the way. `None` if no pending waiter was left.
    pub(crate) fn wake_first(&mut self) -> Option<T> {
        while let Some(w) = self.pop_front() {
            if w.notify.wake_owned(Wake::Ready) {
                return Some(w.data);
            }
        }
        None
    }

    /// Hands `value` to the first pending waiter: `give` stores it in the
    /// waiter's data *before* the wake (so the waiter finds it when it
    /// runs), and if that waiter's wait had already ended, `take_back`
    /// recovers it for the next. Returns the data of the waiter that took
    /// it, or gives the value back if nobody did.
    pub(crate) fn hand_over<V>(
        &mut self,
        value: V,
        mut give: impl FnMut(&T, V),
        mut take_back: impl FnMut(&T) -> V,
    ) -> Result<T, V> {
        let mut value = value;
        while let Some(w) = self.pop_front() {
            give(&w.data, value);
            if w.notify.wake_owned(Wake::Ready) {
                return Ok(w.data);
            }
            value = take_back(&w.data);
        }
        Err(value)
    }

    /// Removes the waiter of `notify` (its wait ended another way);
    /// returns its data if it was still queued.
    pub(crate) fn remove(&mut self, notify: &Notify) -> Option<T> {
        if self.head.as_ref()?.notify.same(notify) {
            return self.pop_front().map(|w| w.data);
        }
        let at = self.rest.iter().position(|w| w.notify.same(notify))?;
        self.rest.remove(at).map(|w| w.data)
    }

    /// Takes every waiter, to wake with [`wake_all`](Self::wake_all) after
    /// the primitive's lock is released.
    pub(crate) fn take_all(&mut self) -> WaitQueue<T> {
        std::mem::take(self)
    }

    /// Ends every waiter's wait with `why`.
    pub(crate) fn wake_all(self, why: Wake) {
        for w in self.head.into_iter().chain(self.rest) {
            w.notify.wake_owned(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sched::park::ThreadWait;

    fn waiter() -> (Notify, Arc<ThreadWait>) {
        let w = Arc::new(ThreadWait::new());
        (Notify::Thread(w.clone()), w)
    }

    #[test]
    fn wake_first_skips_waits_that_already_ended() {
        let mut q = WaitQueue::new();
        let (a, wa) = waiter();
        let (b, wb) = waiter();
        let (c, wc) = waiter();
        q.push(a.clone(), 'a');
        q.push(b.clone(), 'b');
        q.push(c, 'c');
        // `a` timed out before anyone released: its wake is lost.
        assert!(a.wake(Wake::TimedOut));
        assert_eq!(q.wake_first(), Some('b'));
        assert_eq!(wa.outcome(), Some(Wake::TimedOut));
        assert_eq!(wb.outcome(), Some(Wake::Ready));
        assert_eq!(wc.outcome(), None, "only one waiter is woken");
        assert_eq!(q.front(), Some(&'c'));
        drop(b);
    }

    #[test]
    fn a_value_handed_to_a_gone_waiter_goes_to_the_next() {
        let mut q: WaitQueue<std::sync::Mutex<Option<u32>>> = WaitQueue::new();
        let (a, _wa) = waiter();
        let (b, wb) = waiter();
        q.push(a.clone(), Default::default());
        q.push(b, Default::default());
        assert!(a.wake(Wake::Cancelled));
        let put = |slot: &std::sync::Mutex<Option<u32>>, v| *slot.lock().unwrap() = Some(v);
        let take = |slot: &std::sync::Mutex<Option<u32>>| slot.lock().unwrap().take().unwrap();
        // The data of the waiter that took it comes back, holding the value.
        let taken_by = q.hand_over(7, put, take).expect("b takes it");
        assert_eq!(*taken_by.lock().unwrap(), Some(7));
        assert_eq!(wb.outcome(), Some(Wake::Ready));
        assert!(q.is_empty());
        // Nobody left: the value comes back.
        assert_eq!(q.hand_over(8, put, take).err(), Some(8));
    }

    #[test]
    fn remove_takes_only_the_named_waiter_and_wake_all_ends_the_rest() {
        let mut q = WaitQueue::new();
        let (a, wa) = waiter();
        let (b, wb) = waiter();
        q.push(a.clone(), 1);
        q.push(b, 2);
        assert_eq!(q.remove(&a), Some(1));
        assert_eq!(q.remove(&a), None);
        assert_eq!(q.front(), Some(&2));
        let all = q.take_all();
        assert!(q.is_empty());
        all.wake_all(Wake::Closed);
        assert_eq!(wa.outcome(), None);
        assert_eq!(wb.outcome(), Some(Wake::Closed));
    }

    #[test]
    fn order_holds_across_the_inline_first_waiter_and_the_rest() {
        let mut q = WaitQueue::new();
        let waiters: Vec<_> = (0..5).map(|_| waiter()).collect();
        for (i, (n, _)) in waiters.iter().enumerate() {
            q.push(n.clone(), i);
        }
        // The first one leaves: the second moves up into its place.
        assert_eq!(q.remove(&waiters[0].0), Some(0));
        assert_eq!(q.front(), Some(&1));
        // One from the middle leaves: the order of the others holds.
        assert_eq!(q.remove(&waiters[3].0), Some(3));
        assert_eq!(q.wake_first(), Some(1));
        q.push(waiters[0].0.clone(), 9);
        assert_eq!(q.pop_front().map(|w| w.data), Some(2));
        assert_eq!(q.pop_front().map(|w| w.data), Some(4));
        assert_eq!(q.front(), Some(&9));
        assert_eq!(q.pop_front().map(|w| w.data), Some(9));
        assert!(q.is_empty() && q.pop_front().is_none() && q.front().is_none());
        // Emptied, it takes a first waiter inline again.
        q.push(waiters[4].0.clone(), 7);
        assert_eq!(q.remove(&waiters[4].0), Some(7));
        assert!(q.is_empty());
    }
}
