//! Timers: a min-heap of deadlines per worker.
//!
//! Each worker owns a [`TimerHeap`] and is the only thread that touches it:
//! a fiber arms its timeout on the worker it runs on (it never moves), and
//! the worker fires due entries in its loop — on a cadence while busy, and
//! before it sleeps, bounding the sleep by the next deadline. Insertion and
//! expiry are O(log n); due entries fire in deadline order (ties in arming
//! order); resolution is the millisecond of `epoll_wait`'s timeout, finer
//! when the worker is busy.
//!
//! A fiber has at most one live entry here, re-armed lazily
//! (`fiber::wait::FiberTimer`): a timed wait whose deadline is at or after
//! the entry's pushes nothing, and a wait that ends some other way (its fd
//! became ready) leaves the entry in place for the next one. When the entry
//! comes due it ends the fiber's timed wait if that wait's deadline has
//! passed, goes back in at the wait's deadline if it is later, and leaves
//! the heap if no timed wait is pending. So a socket that re-arms a read
//! timeout of a minute on every read pushes one entry a minute, not one per
//! read. Entries that can do nothing any more — a fiber's entry superseded
//! by an earlier one, a finished fiber's — are counted as dead, and the heap
//! is compacted when they outnumber the live ones.
//!
//! A worker about to sleep first *settles* the top of its heap (drops the
//! entries that would do nothing, moves a lazily kept one to its wait's
//! deadline), so it sleeps until a deadline that ends something. Dead
//! entries go however far ahead they are (a pop each: a request's deadline
//! future, dropped when the request is done, leaves one per request), but
//! kept entries are moved only when due within [`SETTLE_AHEAD`] on the real
//! clock. Moving one is a pop and a push, and a connection that re-waited
//! since the worker last slept has a kept entry to move: moving them all,
//! on a server that goes idle between batches of requests, was a pop and a
//! push per request (about 5 % of a served request's instructions). Left
//! alone, a kept entry due later costs at most one early wake when its time
//! comes, and only if the worker is asleep then; and it is moved once per
//! its wait's timeout, not once per wait. A paused clock settles
//! everything: its auto-advance must not jump to an entry that ends
//! nothing.
//!
//! A future's timer is a shared [`TimerSlot`] holding its waker: the future
//! swaps in a new waker without arming again, and empties the slot when it
//! is dropped, which frees the waker at once (a request's deadline must not
//! keep its fiber's waker alive for the full timeout). Emptied slots are
//! dead entries too; the heap drops them when compaction runs, which it
//! does once the wakers armed since the last pass are half the heap — O(1)
//! amortised per arm.
//!
//! Futures polled off any worker (`time::sleep_future` on a plain thread)
//! use the heap of the process's background poller thread instead.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::task::Waker;
use std::time::Instant;

use crate::fiber::wait::{
    is_timer_entry, peek_timer_entry, put_timer_entry, take_timer_entry, time_out,
};
use crate::fiber::{FiberRef, Placement, Stamp};

/// How far ahead of now a worker about to sleep moves kept entries to
/// their waits' deadlines (see the module docs): `epoll_wait`'s resolution,
/// the shortest sleep there is.
pub(crate) const SETTLE_AHEAD: std::time::Duration = std::time::Duration::from_millis(1);

/// What a timer wakes.
pub(crate) enum TimerTarget {
    /// A fiber's timed wait: the fiber's one entry (see the module docs).
    Fiber(FiberRef),
    /// A future's waker, while the future still wants it.
    Waker(std::sync::Arc<TimerSlot>),
}

/// The waker a future's timer wakes, shared by the heap entry and the
/// future: empty once the future is done with it.
#[derive(Default)]
pub(crate) struct TimerSlot {
    waker: std::sync::Mutex<Option<Waker>>,
}

impl TimerSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        // Only `Option` moves happen under the lock: never poisoned in a
        // way that matters.
        self.waker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot holding `waker`.
    pub(crate) fn new(waker: Waker) -> TimerSlot {
        TimerSlot {
            waker: std::sync::Mutex::new(Some(waker)),
        }
    }

    /// Makes the timer wake `waker` (unless it wakes the same task
    /// already). The timer stays armed.
    pub(crate) fn set(&self, waker: &Waker) {
        let mut slot = self.lock();
        match slot.as_mut() {
            Some(w) => w.clone_from(waker),
            None => *slot = Some(waker.clone()),
        }
    }

    /// The future is gone: the entry wakes nothing, and the waker is freed.
    pub(crate) fn clear(&self) {
        let waker = self.lock().take();
        drop(waker);
    }

    fn take(&self) -> Option<Waker> {
        self.lock().take()
    }

    fn is_live(&self) -> bool {
        self.lock().is_some()
    }
}

struct Entry {
    deadline: Instant,
    order: u64,
    target: TimerTarget,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline && self.order == other.order
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap, we want the earliest first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .deadline
            .cmp(&self.deadline)
            .then(other.order.cmp(&self.order))
    }
}

/// A min-heap of deadlines.
#[derive(Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Entry>,
    order: u64,
    dead: usize,
    /// Future timers armed since the last compaction (their slots may
    /// have been emptied since, unseen).
    slots_armed: usize,
}

impl TimerHeap {
    pub(crate) fn arm(&mut self, deadline: Instant, target: TimerTarget) {
        if matches!(target, TimerTarget::Waker(_)) {
            self.slots_armed += 1;
            if self.slots_armed > 1024 && self.slots_armed * 2 >= self.heap.len() {
                self.compact();
            }
        }
        self.push(deadline, target);
    }

    fn push(&mut self, deadline: Instant, target: TimerTarget) {
        self.order += 1;
        self.heap.push(Entry {
            deadline,
            order: self.order,
            target,
        });
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.deadline)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Fires every entry due at `now`, earliest first. Returns how many
    /// fiber waits it ended; the wakers of due entries are moved to
    /// `wakers`, for the caller to wake once it no longer holds the heap (a
    /// waker is user code, which may arm another timer). Either may make a
    /// fiber of this worker runnable.
    ///
    /// `stamp_for(deadline)` gives a fired fiber its place in its worker's
    /// service order.
    pub(crate) fn fire_due(
        &mut self,
        now: Instant,
        stamp_for: impl Fn(Instant) -> Stamp,
        wakers: &mut Vec<std::task::Waker>,
    ) -> usize {
        let mut fired = 0;
        while let Some(top) = self.heap.peek() {
            if top.deadline > now {
                break;
            }
            let entry = self.heap.pop().expect("peeked");
            match entry.target {
                TimerTarget::Fiber(fiber) => match take_timer_entry(&fiber, entry.deadline) {
                    Some(due) if due <= now => {
                        if time_out(&fiber, Placement::At(stamp_for(due))) {
                            fired += 1;
                        }
                    }
                    Some(later) => {
                        put_timer_entry(&fiber, later);
                        self.push(later, TimerTarget::Fiber(fiber));
                    }
                    None => self.dead = self.dead.saturating_sub(1),
                },
                TimerTarget::Waker(slot) => wakers.extend(slot.take()),
            }
        }
        fired
    }

    /// Settles the top of the heap for a worker about to sleep: drops the
    /// entries that would end nothing and moves a fiber's lazily kept entry
    /// to its wait's deadline, so that [`next_deadline`](Self::next_deadline)
    /// is a deadline at which something happens. A kept entry due after
    /// `move_until` (`None`: no limit) is not moved but left as it is: if
    /// it comes due while the worker sleeps, the worker wakes once for it.
    /// (Dropping an entry is a pop, moving one a pop and a push.)
    pub(crate) fn settle(&mut self, move_until: Option<Instant>) {
        while let Some(top) = self.heap.peek() {
            let later = match &top.target {
                TimerTarget::Fiber(fiber) => match peek_timer_entry(fiber, top.deadline) {
                    Some(due) if due <= top.deadline => return,
                    Some(_) if move_until.is_some_and(|until| top.deadline > until) => return,
                    later => later,
                },
                TimerTarget::Waker(slot) if slot.is_live() => return,
                TimerTarget::Waker(_) => None,
            };
            let entry = self.heap.pop().expect("peeked");
            match (later, entry.target) {
                (Some(later), TimerTarget::Fiber(fiber)) => {
                    put_timer_entry(&fiber, later);
                    self.push(later, TimerTarget::Fiber(fiber));
                }
                (None, TimerTarget::Fiber(fiber)) => {
                    if take_timer_entry(&fiber, entry.deadline).is_none() {
                        self.dead = self.dead.saturating_sub(1);
                    }
                }
                (_, TimerTarget::Waker(_)) => {}
            }
        }
    }

    /// A fiber's entry armed here can end nothing any more (the fiber
    /// armed an earlier one, or finished).
    pub(crate) fn note_dead(&mut self) {
        self.dead += 1;
        if self.dead > 1024 && self.dead * 2 > self.heap.len() {
            self.compact();
        }
    }

    /// Drops the entries that can no longer wake anything.
    fn compact(&mut self) {
        let entries = std::mem::take(&mut self.heap).into_vec();
        self.heap = entries
            .into_iter()
            .filter(|e| match &e.target {
                TimerTarget::Fiber(fiber) => is_timer_entry(fiber, e.deadline),
                TimerTarget::Waker(slot) => slot.is_live(),
            })
            .collect();
        self.dead = 0;
        self.slots_armed = 0;
    }

    /// Entries in the heap, live or dead.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::task::Wake as TaskWake;
    use std::time::Duration;

    /// A waker that records its label when woken.
    struct Recorder(u32, Arc<Mutex<Vec<u32>>>);

    impl TaskWake for Recorder {
        fn wake(self: Arc<Self>) {
            self.1.lock().unwrap().push(self.0);
        }
    }

    /// Fires what is due and wakes the wakers: how many entries fired.
    fn fire(heap: &mut TimerHeap, now: Instant) -> usize {
        let mut wakers = Vec::new();
        let ended = heap.fire_due(now, |_| 0, &mut wakers);
        let fired = ended + wakers.len();
        wakers.into_iter().for_each(Waker::wake);
        fired
    }

    fn waker(label: u32, log: &Arc<Mutex<Vec<u32>>>) -> TimerTarget {
        TimerTarget::Waker(Arc::new(TimerSlot::new(Waker::from(Arc::new(Recorder(
            label,
            log.clone(),
        ))))))
    }

    #[test]
    fn due_timers_fire_in_deadline_order_ties_in_arming_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut heap = TimerHeap::default();
        for (label, ms) in [(1, 30), (2, 10), (3, 20), (4, 10), (5, 50)] {
            heap.arm(at(ms), waker(label, &log));
        }
        assert_eq!(heap.next_deadline(), Some(at(10)));
        assert_eq!(fire(&mut heap, at(30)), 4);
        assert_eq!(*log.lock().unwrap(), vec![2, 4, 3, 1]);
        assert_eq!(heap.next_deadline(), Some(at(50)));
        assert_eq!(fire(&mut heap, at(49)), 0, "nothing else is due yet");
        assert_eq!(fire(&mut heap, at(50)), 1);
        assert!(heap.is_empty());
    }

    #[test]
    fn compaction_keeps_every_waker() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let mut heap = TimerHeap::default();
        for i in 0..100 {
            heap.arm(t0 + Duration::from_millis(i), waker(i as u32, &log));
        }
        for _ in 0..2_000 {
            heap.note_dead();
        }
        assert_eq!(fire(&mut heap, t0 + Duration::from_secs(1)), 100);
        assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn cleared_slots_leave_the_heap_and_free_their_wakers() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut heap = TimerHeap::default();
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(30);
        // A request's deadline, armed and dropped, 100 000 times over.
        let mut kept = Vec::new();
        for i in 0..100_000u32 {
            let waker = Waker::from(Arc::new(Recorder(i, log.clone())));
            let slot = Arc::new(TimerSlot::new(waker));
            heap.arm(far, TimerTarget::Waker(slot.clone()));
            if i % 1000 == 0 {
                kept.push(slot); // a few stay armed
            } else {
                slot.clear();
            }
        }
        assert!(heap.len() < 3000, "{} entries left", heap.len());
        // The cleared ones wake nothing; the kept ones still fire.
        assert_eq!(fire(&mut heap, far), 100);
        let fired = log.lock().unwrap().clone();
        assert_eq!(fired, (0..100_000).step_by(1000).collect::<Vec<_>>());
        assert_eq!(heap.len(), 0);
    }

    #[test]
    fn a_slot_given_a_new_waker_wakes_that_one_without_arming_again() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut heap = TimerHeap::default();
        let t0 = Instant::now();
        let slot = Arc::new(TimerSlot::new(Waker::from(Arc::new(Recorder(
            1,
            log.clone(),
        )))));
        heap.arm(t0, TimerTarget::Waker(slot.clone()));
        slot.set(&Waker::from(Arc::new(Recorder(2, log.clone()))));
        assert_eq!(heap.len(), 1);
        assert_eq!(fire(&mut heap, t0), 1);
        assert_eq!(*log.lock().unwrap(), vec![2]);
    }
}
