//! Run queues: FIFOs of runnable fibers, each entry stamped from a clock.
//!
//! * [`LocalQueue`] — a worker's private FIFO: fibers it requeues itself
//!   (yields, wakes made on this worker). No lock, no atomics but a
//!   published length for `stats()`.
//! * [`SharedQueue`] — a FIFO behind a mutex, with its head's stamp
//!   mirrored in an atomic so a worker can compare heads without locking.
//!   Each worker has one (its *inbox*: spawns made on it, wakes from other
//!   threads), and the scheduler has one *global* queue (spawns from outside
//!   the runtime).
//!
//! Every push takes a fresh [`Stamp`] from a clock of the scheduler's (the
//! worker's own for its local queue and inbox, one for the global queue,
//! kept in step: `sched`'s docs), so the three heads a worker looks at are
//! comparable: it always runs the oldest.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::handshake::Handshake;
use crate::fiber::FiberRef;

/// Position in the one service order of a scheduler: smaller runs first.
pub(crate) use crate::fiber::Stamp;

/// Stamp of an empty queue's head.
pub(crate) const NO_STAMP: Stamp = u64::MAX;

/// Most entries one steal takes. A thief runs what it took before it steals
/// again, and each fiber it starts holds a stack until it ends: taking half
/// of a backlog of 100 000 spawns at once would start 50 000 fibers (and
/// touch 50 000 stacks) before the first of them could finish.
pub(crate) const STEAL_MAX: usize = 128;

/// Most entries one shed looks at from the back of a local queue, so the
/// periodic shed costs the same however many yielders are queued.
const SHED_SCAN: usize = 4 * STEAL_MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Front,
    Back,
}

/// Stamp of an urgent entry: older than anything (accept admission).
pub(crate) const URGENT_STAMP: Stamp = 0;

/// A runnable fiber and the stamp it was queued with.
pub(crate) struct Entry {
    pub(crate) stamp: Stamp,
    pub(crate) fiber: FiberRef,
    /// Queued by its own `yield_now` (see [`LocalQueue::insert_timer_wake`]).
    pub(crate) yielded: bool,
}

impl Entry {
    pub(crate) fn new(stamp: Stamp, fiber: FiberRef) -> Entry {
        Entry {
            stamp,
            fiber,
            yielded: false,
        }
    }

    /// Not started and not pinned: another worker may take it.
    fn stealable(&self) -> bool {
        !self.fiber.header.is_started() && self.fiber.header.owner.is_none(Ordering::Relaxed)
    }
}

/// A worker's private FIFO.
pub(crate) struct LocalQueue {
    entries: VecDeque<Entry>,
    published_len: AtomicUsize,
    /// Entries that another worker could run (unstarted, unpinned).
    stealable: usize,
    /// Entries queued by their own `yield_now`: while there are none, a
    /// timer's wake finds its place by stamp alone
    /// ([`insert_timer_wake`](Self::insert_timer_wake)).
    yielders: usize,
    /// Where the first yielder is, when known: kept up by the common
    /// changes (a push, a pop, a wake placed before it), forgotten by the
    /// rare ones (a merge, a steal), then found again by one walk.
    first_yielder: Option<usize>,
}

impl LocalQueue {
    pub(crate) fn new() -> LocalQueue {
        LocalQueue {
            entries: VecDeque::with_capacity(256),
            published_len: AtomicUsize::new(0),
            stealable: 0,
            yielders: 0,
            first_yielder: None,
        }
    }

    pub(crate) fn head_stamp(&self) -> Stamp {
        self.entries.front().map_or(NO_STAMP, |e| e.stamp)
    }

    #[inline]
    pub(crate) fn push(&mut self, entry: Entry) {
        self.stealable += entry.stealable() as usize;
        if entry.yielded && self.yielders == 0 {
            self.first_yielder = Some(self.entries.len());
        }
        self.yielders += entry.yielded as usize;
        self.entries.push_back(entry);
        self.publish();
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front()?;
        self.stealable -= e.stealable() as usize;
        self.yielders -= e.yielded as usize;
        self.first_yielder = match self.first_yielder {
            // That was the first yielder: the next is found when needed.
            Some(0) | None => None,
            Some(i) => Some(i - 1),
        };
        self.publish();
        Some(e)
    }

    /// Queues a fiber whose timer fired, `stamp` being the clock at its
    /// deadline: behind every entry woken before the deadline, but ahead of
    /// fibers that are only here because they yielded — it takes the first
    /// yielder's place (and stamp, so the queue stays in stamp order). A
    /// fiber that computes and yields gives way to a due timer instead of
    /// holding it back by a whole pass over the yielders.
    ///
    /// Timers fire in bursts (a thousand sleepers of the same millisecond
    /// get the same stamp), so the place is found without walking the
    /// queue when no yielder is queued: the queue is in stamp order, and
    /// a burst's wakes land at the back, one after the other. With
    /// yielders queued, the place is the first newer entry or the first
    /// yielder, whichever comes first; the first yielder's place is kept
    /// (`first_yielder`), so a burst does not walk to it once per wake. A
    /// walk from the front made a burst of n wakes cost n²/2 looks.
    pub(crate) fn insert_timer_wake(&mut self, stamp: Stamp, fiber: FiberRef) {
        // In stamp order: after every entry not newer — the back, for a
        // burst's wakes.
        let by_stamp = match self.entries.back() {
            Some(last) if last.stamp > stamp => self.entries.partition_point(|e| e.stamp <= stamp),
            _ => self.entries.len(),
        };
        let at = if self.yielders == 0 {
            by_stamp
        } else {
            let first = match self.first_yielder {
                Some(f) => f,
                None => {
                    let len = self.entries.len();
                    let f = self.entries.iter().position(|e| e.yielded).unwrap_or(len);
                    debug_assert!(f < len, "a yielder is counted but not queued");
                    f
                }
            };
            // The wake goes in at or before the first yielder, which moves
            // one place back.
            self.first_yielder = Some(first + 1);
            by_stamp.min(first)
        };
        let stamp = self.entries.get(at).map_or(stamp, |e| e.stamp.min(stamp));
        let entry = Entry::new(stamp, fiber);
        self.stealable += entry.stealable() as usize;
        // A burst's wakes go to the back: a push there, not an insert's
        // general move of the elements behind the place (none).
        if at == self.entries.len() {
            self.entries.push_back(entry);
        } else {
            self.entries.insert(at, entry);
        }
        self.publish();
    }

    /// Queues a woken fiber ahead of everything (accept admission).
    pub(crate) fn push_urgent(&mut self, fiber: FiberRef) {
        if let Some(f) = &mut self.first_yielder {
            *f += 1;
        }
        self.entries.push_front(Entry::new(URGENT_STAMP, fiber));
        self.publish();
    }

    /// Runs `f` on every queued fiber.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&FiberRef)) {
        for e in self.entries.iter() {
            f(&e.fiber);
        }
    }

    /// Fibers another worker could run.
    pub(crate) fn stealable(&self) -> usize {
        self.stealable
    }

    /// Removes the newest half of the stealable entries (those that would
    /// wait longest here), at most [`STEAL_MAX`], in stamp order, to hand
    /// to idle workers.
    pub(crate) fn take_stealable_newest_half(&mut self) -> Vec<Entry> {
        let want = (self.stealable / 2).min(STEAL_MAX);
        self.take_stealable(want, End::Back)
    }

    /// Removes the oldest stealable entries, at most [`STEAL_MAX`], in stamp
    /// order (a thief taking the unstarted work of a stalled worker; it
    /// comes back for more when it has run these).
    pub(crate) fn take_stealable_oldest(&mut self) -> Vec<Entry> {
        let want = self.stealable.min(STEAL_MAX);
        self.take_stealable(want, End::Front)
    }

    /// Takes up to `want` stealable entries from one end; entries passed
    /// over keep their places. From the front (a thief) it looks as far as
    /// it must; from the back (shedding, which runs every few dispatches)
    /// it looks at no more than [`SHED_SCAN`] entries.
    fn take_stealable(&mut self, want: usize, end: End) -> Vec<Entry> {
        let scan = match end {
            End::Front => usize::MAX,
            End::Back => SHED_SCAN,
        };
        let mut taken = Vec::with_capacity(want);
        let mut passed = Vec::new();
        while taken.len() < want && taken.len() + passed.len() < scan {
            let next = match end {
                End::Front => self.entries.pop_front(),
                End::Back => self.entries.pop_back(),
            };
            let Some(e) = next else { break };
            if e.stealable() {
                self.yielders -= e.yielded as usize;
                taken.push(e);
            } else {
                passed.push(e);
            }
        }
        while let Some(e) = passed.pop() {
            match end {
                End::Front => self.entries.push_front(e),
                End::Back => self.entries.push_back(e),
            }
        }
        if end == End::Back {
            taken.reverse();
        }
        self.stealable -= taken.len();
        self.first_yielder = None;
        self.publish();
        taken
    }

    /// Puts entries that are all older than the current head in front of
    /// it; `older` must be in stamp order.
    pub(crate) fn prepend(&mut self, older: &mut Vec<Entry>) {
        while let Some(e) = older.pop() {
            debug_assert!(e.stamp <= self.head_stamp());
            self.stealable += e.stealable() as usize;
            self.yielders += e.yielded as usize;
            self.entries.push_front(e);
        }
        self.first_yielder = None;
        self.publish();
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn published_len(&self) -> usize {
        self.published_len.load(Ordering::Relaxed)
    }

    fn publish(&self) {
        self.published_len
            .store(self.entries.len(), Ordering::Relaxed);
    }
}

/// A worker's [`LocalQueue`], which another worker may enter only while
/// the stall detector has marked this worker `stalled` (its running fiber
/// blocks the thread in a call), to take the unstarted fibers that would
/// otherwise wait for the call to return.
///
/// Who is inside is decided by a [`Handshake`] (see `sched/handshake.rs`):
/// the owner thread (the worker's loop, which is inside except while it
/// resumes a fiber, and that fiber's own wakes and spawns) or one thief.
pub(crate) struct SharedLocal {
    handshake: Handshake,
    queue: UnsafeCell<LocalQueue>,
    /// Set by the stall detector while the worker's current dispatch has
    /// lasted too long; cleared by the worker when the fiber switches back.
    pub(crate) stalled: AtomicBool,
    /// Unstarted, unpinned entries in the queue (published for thieves).
    pub(crate) stealable: AtomicUsize,
}

// SAFETY: `queue` is only touched by the owner between `enter` and `leave`
// or by a thief between a successful `try_steal_enter` and `steal_leave`;
// the handshake above makes those spans exclusive, and the Release/Acquire
// pairs on `busy` and `steal_req` order the accesses.
unsafe impl Sync for SharedLocal {}

impl SharedLocal {
    pub(crate) fn new() -> SharedLocal {
        SharedLocal {
            handshake: Handshake::new(),
            queue: UnsafeCell::new(LocalQueue::new()),
            stalled: AtomicBool::new(false),
            stealable: AtomicUsize::new(0),
        }
    }

    /// The owner thread enters the queue.
    #[inline]
    pub(crate) fn enter(&self) {
        self.handshake.owner_enter();
    }

    /// The owner thread leaves the queue.
    #[inline]
    pub(crate) fn leave(&self) {
        // SAFETY: still inside: publish what a thief needs to know.
        let stealable = unsafe { &*self.queue.get() }.stealable;
        if self.stealable.load(Ordering::Relaxed) != stealable {
            self.stealable.store(stealable, Ordering::Relaxed);
        }
        self.handshake.owner_leave();
    }

    /// Another thread tries to enter; true if it may touch the queue.
    pub(crate) fn try_steal_enter(&self) -> bool {
        self.handshake.thief_try_enter()
    }

    /// The thief leaves the queue.
    pub(crate) fn steal_leave(&self) {
        // SAFETY: still inside.
        let stealable = unsafe { &*self.queue.get() }.stealable;
        self.stealable.store(stealable, Ordering::Relaxed);
        self.handshake.thief_leave();
    }

    /// The queue.
    ///
    /// # Safety
    ///
    /// The caller is inside (`enter` or a successful `try_steal_enter`),
    /// and no other borrow of the queue is live.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub(crate) unsafe fn get(&self) -> &mut LocalQueue {
        // SAFETY: exclusive by the handshake (caller).
        unsafe { &mut *self.queue.get() }
    }
}

/// A FIFO shared between threads, with a lock-free view of its head stamp.
pub(crate) struct SharedQueue {
    entries: Mutex<VecDeque<Entry>>,
    head: AtomicU64,
    len: AtomicUsize,
    /// Entries another worker may steal (unstarted, unpinned).
    stealable: AtomicUsize,
}

impl SharedQueue {
    pub(crate) fn new() -> SharedQueue {
        SharedQueue {
            entries: Mutex::new(VecDeque::new()),
            head: AtomicU64::new(NO_STAMP),
            len: AtomicUsize::new(0),
            stealable: AtomicUsize::new(0),
        }
    }

    /// How many entries a thief could take (possibly stale).
    pub(crate) fn stealable(&self) -> usize {
        self.stealable.load(Ordering::Relaxed)
    }

    /// Stamp of the head (possibly stale by a concurrent push or pop).
    pub(crate) fn head_stamp(&self) -> Stamp {
        self.head.load(Ordering::Acquire)
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        // A panic never happens while the lock is held; recover anyway.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, q: &VecDeque<Entry>) {
        self.head
            .store(q.front().map_or(NO_STAMP, |e| e.stamp), Ordering::Release);
        self.len.store(q.len(), Ordering::Relaxed);
    }

    /// Appends an entry; `stamp_now` is called under the lock so the queue
    /// stays in stamp order.
    pub(crate) fn push(&self, fiber: FiberRef, stamp_now: impl FnOnce() -> Stamp) {
        let mut q = self.lock();
        let entry = Entry::new(stamp_now(), fiber);
        if entry.stealable() {
            self.stealable.fetch_add(1, Ordering::Relaxed);
        }
        // Published as `publish` would, without reading the buffer back:
        // the head changes only if the queue was empty, to this entry.
        let (was_empty, stamp) = (q.is_empty(), entry.stamp);
        q.push_back(entry);
        if was_empty {
            self.head.store(stamp, Ordering::Release);
        }
        self.len.store(q.len(), Ordering::Relaxed);
    }

    /// Queues a woken fiber ahead of everything (accept admission).
    pub(crate) fn push_urgent(&self, fiber: FiberRef) {
        let mut q = self.lock();
        q.push_front(Entry::new(URGENT_STAMP, fiber));
        self.publish(&q);
    }

    /// Moves up to `max` entries no newer than `bound` into `out`, in
    /// order. Inclusive: stamps from two clocks can be equal (a worker's
    /// and the global queue's), and a queue whose head ties with the
    /// other heads must still give that head up.
    pub(crate) fn take_not_newer(&self, bound: Stamp, max: usize, out: &mut Vec<Entry>) {
        let mut q = self.lock();
        while out.len() < max {
            match q.front() {
                Some(e) if e.stamp <= bound => {
                    let e = q.pop_front().expect("front exists");
                    if e.stealable() {
                        self.stealable.fetch_sub(1, Ordering::Relaxed);
                    }
                    out.push(e);
                }
                _ => break,
            }
        }
        self.publish(&q);
    }

    /// Moves up to half of the stealable (unstarted, unpinned) entries into
    /// `out`, at most [`STEAL_MAX`], oldest first; entries passed over keep
    /// their places (the cost is the prefix scanned, not the queue's
    /// length). Returns how many were taken.
    pub(crate) fn steal_half(&self, out: &mut Vec<Entry>) -> usize {
        let mut q = self.lock();
        let want = self.stealable().div_ceil(2).min(STEAL_MAX);
        let mut passed = Vec::new();
        let mut taken = 0;
        while taken < want {
            let Some(e) = q.pop_front() else { break };
            if e.stealable() {
                out.push(e);
                taken += 1;
            } else {
                passed.push(e);
            }
        }
        while let Some(e) = passed.pop() {
            q.push_front(e);
        }
        self.stealable.fetch_sub(taken, Ordering::Relaxed);
        self.publish(&q);
        taken
    }

    /// Merges stamp-ordered `batch` into the queue, keeping stamp order.
    pub(crate) fn merge(&self, batch: Vec<Entry>) {
        let mut q = self.lock();
        for e in batch {
            if e.stealable() {
                self.stealable.fetch_add(1, Ordering::Relaxed);
            }
            let at = q.partition_point(|x| x.stamp <= e.stamp);
            q.insert(at, e);
        }
        self.publish(&q);
    }

    /// Runs `f` on every queued fiber (shutdown: mark them cancelled).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&FiberRef)) {
        for e in self.lock().iter() {
            f(&e.fiber);
        }
    }

    /// Empties the queue (shutdown).
    pub(crate) fn drain_all(&self) -> Vec<Entry> {
        let mut q = self.lock();
        let all: Vec<Entry> = q.drain(..).collect();
        self.stealable.store(0, Ordering::Relaxed);
        self.publish(&q);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fiber::stack::{round_stack_size, size_class};
    use crate::sched::{Config, Scheduler};
    use std::sync::Arc;

    fn scheduler() -> Arc<Scheduler> {
        Arc::new(
            Scheduler::new(Config {
                workers: 1,
                stack_class: size_class(round_stack_size(64 << 10).unwrap()),
                max_pooled_stacks: 0,
                thread_name: "queue-test".into(),
                stall_warning: None,
                start_paused: false,
                warm_malloc: false,
                #[cfg(feature = "tokio")]
                tokio_handle: None,
            })
            .unwrap(),
        )
    }

    /// An unstarted fiber; `pinned` ones have an owner and are not stealable.
    fn fiber(sched: &Arc<Scheduler>, pinned: bool) -> FiberRef {
        let owner = if pinned { 0 } else { crate::fiber::NO_OWNER };
        let reservation = sched.config.stack_class.reserve().unwrap();
        let (fiber, handle) =
            crate::fiber::new_fiber(0, || (), None, sched.clone(), owner, reservation);
        drop(handle);
        fiber
    }

    fn local_of(sched: &Arc<Scheduler>, pinned: impl Fn(u64) -> bool, n: u64) -> LocalQueue {
        let mut q = LocalQueue::new();
        for stamp in 1..=n {
            q.push(Entry::new(stamp, fiber(sched, pinned(stamp))));
        }
        q
    }

    fn stamps(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.stamp).collect()
    }

    fn queued_stamps(q: &mut LocalQueue) -> Vec<u64> {
        std::iter::from_fn(|| q.pop()).map(|e| e.stamp).collect()
    }

    /// Where a timer's wake goes, found the plain way: before the first
    /// yielder or the first newer entry, taking that entry's stamp if older.
    fn insert_by_walking(q: &mut Vec<(u64, usize, bool)>, stamp: u64, id: usize) {
        let at = q
            .iter()
            .position(|&(s, _, yielded)| yielded || s > stamp)
            .unwrap_or(q.len());
        let stamp = q.get(at).map_or(stamp, |e| e.0.min(stamp));
        q.insert(at, (stamp, id, false));
    }

    #[test]
    fn timer_wakes_land_where_a_walk_from_the_front_puts_them() {
        let s = scheduler();
        let fibers: Vec<FiberRef> = (0..16).map(|_| fiber(&s, true)).collect();
        let id = |f: &FiberRef| {
            fibers
                .iter()
                .position(|g| Arc::ptr_eq(f, g))
                .expect("one of ours")
        };
        let mut q = LocalQueue::new();
        let mut model: Vec<(u64, usize, bool)> = Vec::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut stamp = 1u64;
        for step in 0..20_000 {
            let r = next();
            let who = (r >> 8) as usize % fibers.len();
            match r % 16 {
                // Bursts of wakes with one stamp, as a timer tick makes.
                0..=5 => {
                    let at = stamp.saturating_sub((r >> 20) % 8).max(1);
                    for _ in 0..=(r >> 32) % 4 {
                        q.insert_timer_wake(at, fibers[who].clone());
                        insert_by_walking(&mut model, at, who);
                    }
                }
                6..=8 => {
                    let yielded = r % 16 == 8;
                    stamp += 1;
                    q.push(Entry {
                        stamp,
                        fiber: fibers[who].clone(),
                        yielded,
                    });
                    model.push((stamp, who, yielded));
                }
                9..=13 => {
                    let got = q.pop().map(|e| (e.stamp, id(&e.fiber), e.yielded));
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(got, want, "pop at step {step}");
                }
                14 => q.push_urgent(fibers[who].clone()),
                _ => {
                    // A merge: everything out and back in front, in order.
                    let mut all: Vec<Entry> = std::iter::from_fn(|| q.pop()).collect();
                    q.prepend(&mut all);
                }
            }
            if r % 16 == 14 {
                model.insert(0, (URGENT_STAMP, who, false));
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.yielders, model.iter().filter(|e| e.2).count());
            if let Some(f) = q.first_yielder {
                assert_eq!(Some(f), model.iter().position(|e| e.2), "step {step}");
            }
        }
        let rest: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.stamp, id(&e.fiber), e.yielded))
            .collect();
        assert_eq!(rest, model);
    }

    #[test]
    fn a_thief_takes_at_most_one_batch_oldest_first() {
        let s = scheduler();
        let mut q = local_of(&s, |_| false, 1_000);
        let taken = q.take_stealable_oldest();
        assert_eq!(stamps(&taken), (1..=STEAL_MAX as u64).collect::<Vec<_>>());
        assert_eq!(q.stealable(), 1_000 - STEAL_MAX);
        assert_eq!(
            queued_stamps(&mut q),
            (STEAL_MAX as u64 + 1..=1_000).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_thief_passes_over_pinned_entries_and_they_keep_their_places() {
        let s = scheduler();
        // 1 000 pinned entries ahead of 10 stealable ones: still found.
        let mut q = local_of(&s, |stamp| stamp <= 1_000, 1_010);
        let taken = q.take_stealable_oldest();
        assert_eq!(stamps(&taken), (1_001..=1_010).collect::<Vec<_>>());
        assert_eq!(q.stealable(), 0);
        assert_eq!(queued_stamps(&mut q), (1..=1_000).collect::<Vec<_>>());
    }

    #[test]
    fn shedding_hands_over_the_newest_half_in_order_at_most_one_batch() {
        let s = scheduler();
        let mut q = local_of(&s, |stamp| stamp % 2 == 0, 100);
        let taken = q.take_stealable_newest_half();
        // 50 stealable (odd stamps): the newest 25 of them.
        assert_eq!(stamps(&taken), (51..=99).step_by(2).collect::<Vec<_>>());
        let kept = queued_stamps(&mut q);
        assert_eq!(kept.len(), 75);
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "order kept");

        let mut big = local_of(&s, |_| false, 10_000);
        assert_eq!(big.take_stealable_newest_half().len(), STEAL_MAX);
    }

    #[test]
    fn an_inbox_steal_takes_half_at_most_one_batch() {
        let s = scheduler();
        let inbox = SharedQueue::new();
        let mut next = 0;
        let mut stamp = || {
            next += 1;
            next
        };
        for i in 0..10 {
            inbox.push(fiber(&s, i % 3 == 0), &mut stamp);
        }
        let mut out = Vec::new();
        // 6 stealable: half of them, the oldest.
        assert_eq!(inbox.steal_half(&mut out), 3);
        assert_eq!(stamps(&out), vec![2, 3, 5]);
        assert_eq!(inbox.len(), 7);
        assert_eq!(inbox.head_stamp(), 1);

        for _ in 0..1_000 {
            inbox.push(fiber(&s, false), &mut stamp);
        }
        out.clear();
        assert_eq!(inbox.steal_half(&mut out), STEAL_MAX);
    }
}
