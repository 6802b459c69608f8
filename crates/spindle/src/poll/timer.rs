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
//! A wait that ends some other way (its fd became ready) leaves its entry in
//! the heap: firing it later does nothing, because the fiber's wait word has
//! moved on (see `sched::park`). Such dead entries are counted, and the heap
//! is compacted when they outnumber the live ones, so a socket that re-arms a
//! read timeout on every read cannot grow the heap without bound.
//!
//! Futures polled off any worker (`time::sleep_future` on a plain thread)
//! use the heap of the process's background poller thread instead.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::task::Waker;
use std::time::Instant;

use crate::fiber::wait::{WaitToken, Wake};
use crate::fiber::{Placement, Stamp};

/// What a timer wakes.
pub(crate) enum TimerTarget {
    /// A fiber's wait (fails it with `TimedOut` if still current).
    Fiber(WaitToken),
    /// A future's waker.
    Waker(Waker),
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
}

impl TimerHeap {
    pub(crate) fn arm(&mut self, deadline: Instant, target: TimerTarget) {
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
                TimerTarget::Fiber(token) => {
                    if token.wake_at(Wake::TimedOut, Placement::At(stamp_for(entry.deadline))) {
                        fired += 1;
                    } else {
                        self.dead = self.dead.saturating_sub(1);
                    }
                }
                TimerTarget::Waker(w) => wakers.push(w),
            }
        }
        fired
    }

    /// A fiber wait whose timer is armed here ended another way.
    pub(crate) fn note_dead(&mut self) {
        self.dead += 1;
        if self.dead > 1024 && self.dead * 2 > self.heap.len() {
            let entries = std::mem::take(&mut self.heap).into_vec();
            self.heap = entries
                .into_iter()
                .filter(|e| match &e.target {
                    TimerTarget::Fiber(token) => token.is_pending(),
                    TimerTarget::Waker(_) => true,
                })
                .collect();
            self.dead = 0;
        }
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
        TimerTarget::Waker(Waker::from(Arc::new(Recorder(label, log.clone()))))
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
}
