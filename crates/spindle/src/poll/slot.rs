//! Per-fd readiness state: banked edge bits and the waiters of each
//! direction, in one process-wide table indexed by fd number.
//!
//! # Banked edges
//!
//! Every fd is registered once, edge-triggered for both directions. An edge
//! that arrives while nobody waits is *banked* in the slot's `ready` bits; the
//! next wait in that direction consumes the bit and skips the park. Every
//! wait follows an `EAGAIN` from the operation itself, so a fresh readiness
//! transition is always a fresh edge: a banked bit is never stale in a way
//! that loses data, at worst it costs one extra try.
//!
//! # The lock protocol
//!
//! A waiter checks the bit and, if it is clear, publishes itself, under the
//! slot's lock; the poller sets the bit or takes the waiters under the same
//! lock. So an edge either is seen by the waiter's check or finds the waiter
//! registered: never neither.
//!
//! # fd reuse
//!
//! Each slot carries a generation, bumped when the fd is closed through
//! Spindle; it is part of every epoll event's tag, so an event for a closed
//! fd cannot mark the fd that reused its number. Closing wakes every waiter
//! with `Closed` and resets the slot before the number can be reused.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use crate::fiber::wait::{WaitToken, Wake};

/// Readable edge banked.
pub(crate) const READ: u8 = 1;
/// Writable edge banked.
pub(crate) const WRITE: u8 = 2;
/// The peer shut its side, or the socket failed (`EPOLLRDHUP`, `EPOLLHUP`,
/// `EPOLLERR`): sticky until the fd closes, since no further edge will
/// come — every read wait from then on returns at once.
pub(crate) const READ_CLOSED: u8 = 4;

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;

/// Largest fd the table covers (exclusive).
pub(crate) const MAX_FD: usize = CHUNK * CHUNKS;

/// Who waits on a direction of an fd.
pub(crate) enum IoWaiter {
    /// A parked fiber; `urgent` asks for accept admission (run next).
    Fiber { token: WaitToken, urgent: bool },
    /// A future's waker (`io::readable`/`writable`).
    Waker(Waker),
}

impl IoWaiter {
    fn wake(self, why: Wake) {
        match self {
            IoWaiter::Fiber { token, urgent } => {
                token.wake_owned(why, urgent);
            }
            IoWaiter::Waker(w) => crate::loud::wake_caught(w, "its fd became ready"),
        }
    }
}

/// The waiters of one direction. Almost always none or one, kept inline:
/// a connection's slot holds no heap memory while it waits (10 000 parked
/// connections are 10 000 slots); a second waiter spills into `rest`.
/// Invariant: `first` is `None` only when `rest` is empty.
#[derive(Default)]
struct WaitList {
    first: Option<IoWaiter>,
    rest: Vec<IoWaiter>,
}

impl WaitList {
    fn push(&mut self, waiter: IoWaiter) {
        if self.first.is_none() {
            self.first = Some(waiter);
        } else {
            self.rest.push(waiter);
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn iter(&self) -> impl Iterator<Item = &IoWaiter> {
        self.first.iter().chain(&self.rest)
    }

    fn retain(&mut self, mut keep: impl FnMut(&IoWaiter) -> bool) {
        if self.first.as_ref().is_some_and(|w| !keep(w)) {
            self.first = None;
        }
        self.rest.retain(&mut keep);
        if self.first.is_none() && !self.rest.is_empty() {
            self.first = Some(self.rest.remove(0));
        }
    }

    /// Whether a future waits here (it looks at the banked bit on its next
    /// poll, so an edge for it is banked as well as delivered).
    fn has_waker(&self) -> bool {
        matches!(self.first, Some(IoWaiter::Waker(_)))
            || self.rest.iter().any(|x| matches!(x, IoWaiter::Waker(_)))
    }

    /// Wakes every waiter, in the order they came. Written out rather than
    /// as a chain of iterators: this runs for every readiness event, and the
    /// adapters cost more than the wake of the one waiter there usually is.
    #[inline]
    fn wake_all(self, why: Wake) {
        let WaitList { first, rest } = self;
        let Some(first) = first else {
            return; // `rest` is empty when `first` is (the invariant)
        };
        first.wake(why);
        if !rest.is_empty() {
            for waiter in rest {
                waiter.wake(why);
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Waiters {
    pub(crate) bits: u8,
    read: WaitList,
    write: WaitList,
}

impl Waiters {
    fn list(&mut self, dir: u8) -> &mut WaitList {
        if dir == READ {
            &mut self.read
        } else {
            &mut self.write
        }
    }

    /// An edge for `dir` if `dirs` has one: takes the waiters to wake, and
    /// banks the edge when none is a fiber that will see it by being woken
    /// (nobody waits, or a future does — it looks at the bit).
    fn take_for_edge(&mut self, dirs: u8, dir: u8) -> WaitList {
        if dirs & dir == 0 {
            return WaitList::default();
        }
        let list = self.list(dir);
        let bank = list.is_empty() || list.has_waker();
        let taken = std::mem::take(list);
        if bank {
            self.bits |= dir;
        }
        taken
    }

    /// Consumes a banked edge for `dir`, if there is one.
    pub(crate) fn take_bit(&mut self, dir: u8) -> bool {
        let had = self.bits & dir != 0;
        self.bits &= !dir;
        had || (dir == READ && self.bits & READ_CLOSED != 0)
    }

    pub(crate) fn push(&mut self, dir: u8, waiter: IoWaiter) {
        self.list(dir).push(waiter);
    }

    /// Removes the fiber wait identified by `token` (after a timeout).
    pub(crate) fn remove_token(&mut self, dir: u8, token: &WaitToken) {
        self.list(dir).retain(|w| match w {
            IoWaiter::Fiber { token: t, .. } => !t.same(token),
            IoWaiter::Waker(_) => true,
        });
    }

    /// Removes a future's registration.
    pub(crate) fn remove_waker(&mut self, dir: u8, waker: &Waker) {
        self.list(dir).retain(|w| match w {
            IoWaiter::Waker(old) => !old.will_wake(waker),
            IoWaiter::Fiber { .. } => true,
        });
    }

    /// Replaces a future's registration (same waker) or adds it.
    pub(crate) fn set_waker(&mut self, dir: u8, waker: &Waker) {
        let list = self.list(dir);
        let registered = list
            .iter()
            .any(|w| matches!(w, IoWaiter::Waker(old) if old.will_wake(waker)));
        if !registered {
            list.push(IoWaiter::Waker(waker.clone()));
        }
    }
}

/// The state of one fd number.
pub(crate) struct FdSlot {
    /// Bumped on close; tags epoll events.
    pub(crate) generation: AtomicU32,
    /// Id of the poller this fd is registered with (0: none).
    pub(crate) poller: AtomicU64,
    waiters: Mutex<Waiters>,
}

impl FdSlot {
    fn new() -> FdSlot {
        FdSlot {
            generation: AtomicU32::new(0),
            poller: AtomicU64::new(0),
            waiters: Mutex::new(Waiters::default()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an edge from the poller: wakes the waiters of each ready
    /// direction, or banks the edge when there are none.
    pub(crate) fn deliver(&self, generation: u32, dirs: u8) {
        // Usually one waiter per direction, so usually nothing allocated.
        let (read, write) = {
            let mut w = self.lock();
            if self.generation.load(Ordering::Acquire) != generation {
                return; // an event for an fd closed meanwhile
            }
            let read = w.take_for_edge(dirs, READ);
            let write = w.take_for_edge(dirs, WRITE);
            w.bits |= dirs & READ_CLOSED;
            (read, write)
        };
        read.wake_all(Wake::Ready);
        write.wake_all(Wake::Ready);
    }

    /// The fd is being closed: wake everyone with `Closed`, reset the slot.
    pub(crate) fn close(&self) {
        let (read, write) = {
            let mut w = self.lock();
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.poller.store(0, Ordering::Release);
            w.bits = 0;
            (std::mem::take(&mut w.read), std::mem::take(&mut w.write))
        };
        read.wake_all(Wake::Closed);
        write.wake_all(Wake::Closed);
    }
}

/// The process-wide table of slots, grown a chunk at a time, never shrunk.
static TABLE: [AtomicPtr<[FdSlot; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// The slot of `fd` (`None` past [`MAX_FD`]).
pub(crate) fn slot(fd: i32) -> Option<&'static FdSlot> {
    let fd = usize::try_from(fd).ok()?;
    if fd >= MAX_FD {
        return None;
    }
    let (hi, lo) = (fd / CHUNK, fd % CHUNK);
    let mut chunk = TABLE[hi].load(Ordering::Acquire);
    if chunk.is_null() {
        chunk = new_chunk(hi);
    }
    // SAFETY: chunks are published once and never freed, so the reference
    // is valid for the rest of the process.
    Some(unsafe { &(*chunk)[lo] })
}

/// The slot of `fd` if its chunk exists (an fd nothing ever waited on
/// needs no slot: this never allocates).
pub(crate) fn slot_if_allocated(fd: i32) -> Option<&'static FdSlot> {
    let fd = usize::try_from(fd).ok()?;
    if fd >= MAX_FD {
        return None;
    }
    let chunk = TABLE[fd / CHUNK].load(Ordering::Acquire);
    // SAFETY: chunks are published once and never freed.
    unsafe { chunk.as_ref() }.map(|c| &c[fd % CHUNK])
}

/// Allocates and publishes chunk `hi`. Cold and out of line, and built on
/// the heap: a `[FdSlot; CHUNK]` temporary would be an ~80 KiB stack frame
/// that every caller of `slot` probes page by page — on every fiber stack.
#[cold]
#[inline(never)]
fn new_chunk(hi: usize) -> *mut [FdSlot; CHUNK] {
    let slots: Vec<FdSlot> = (0..CHUNK).map(|_| FdSlot::new()).collect();
    let fresh: Box<[FdSlot; CHUNK]> = slots
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("exactly CHUNK slots"));
    let fresh = Box::into_raw(fresh);
    {
        match TABLE[hi].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(existing) => {
                // SAFETY: `fresh` was never published; we still own it.
                drop(unsafe { Box::from_raw(fresh) });
                existing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::task::{Wake as TaskWake, Waker};

    use super::*;

    /// A waker that counts its wakes.
    struct Count(Mutex<usize>);

    impl TaskWake for Count {
        fn wake(self: Arc<Self>) {
            *self.0.lock().unwrap() += 1;
        }
    }

    fn counting_waker() -> (Waker, Arc<Count>) {
        let count = Arc::new(Count(Mutex::new(0)));
        (Waker::from(count.clone()), count)
    }

    fn wakes(count: &Count) -> usize {
        *count.0.lock().unwrap()
    }

    #[test]
    fn an_edge_with_nobody_waiting_is_banked_and_consumed_once() {
        let slot = FdSlot::new();
        slot.deliver(0, READ);
        assert!(slot.lock().take_bit(READ), "the edge was banked");
        assert!(
            !slot.lock().take_bit(READ),
            "and consumed by the first taker"
        );
        assert!(
            !slot.lock().take_bit(WRITE),
            "only the direction that fired"
        );
    }

    #[test]
    fn a_waker_is_woken_and_the_edge_banked_for_its_next_poll() {
        let slot = FdSlot::new();
        let (waker, count) = counting_waker();
        slot.lock().set_waker(WRITE, &waker);
        slot.lock().set_waker(WRITE, &waker); // same waker: not twice
        slot.deliver(0, WRITE | READ);
        assert_eq!(wakes(&count), 1);
        let mut w = slot.lock();
        assert!(w.take_bit(WRITE), "a future looks at the bit when it polls");
        assert!(w.take_bit(READ), "nobody waited to read: banked");
    }

    #[test]
    fn an_event_for_a_closed_fd_is_ignored() {
        let slot = FdSlot::new();
        let stale = slot.generation.load(Ordering::Acquire);
        slot.close();
        slot.deliver(stale, READ);
        assert!(!slot.lock().take_bit(READ), "the reused fd got no edge");
    }

    #[test]
    fn close_wakes_every_waiter_and_clears_the_bank() {
        let slot = FdSlot::new();
        slot.deliver(0, WRITE);
        let (reader, r) = counting_waker();
        let (writer, w) = counting_waker();
        slot.lock().set_waker(READ, &reader);
        slot.lock().set_waker(WRITE, &writer);
        slot.close();
        assert_eq!((wakes(&r), wakes(&w)), (1, 1));
        assert!(!slot.lock().take_bit(WRITE), "the banked edge is gone");
        // The next owner of the number starts with an empty slot.
        slot.deliver(slot.generation.load(Ordering::Acquire), READ);
        assert_eq!(wakes(&r), 1, "a closed fd's waiter is not woken again");
    }

    #[test]
    fn a_peer_shutdown_is_sticky_for_readers() {
        let slot = FdSlot::new();
        slot.deliver(0, READ | READ_CLOSED);
        let mut w = slot.lock();
        assert!(w.take_bit(READ));
        assert!(
            w.take_bit(READ),
            "no further edge will come: reads return at once"
        );
        assert!(!w.take_bit(WRITE));
    }

    #[test]
    fn a_removed_waker_is_not_woken() {
        let slot = FdSlot::new();
        let (waker, count) = counting_waker();
        slot.lock().set_waker(READ, &waker);
        slot.lock().remove_waker(READ, &waker);
        slot.deliver(0, READ);
        assert_eq!(wakes(&count), 0);
        assert!(slot.lock().take_bit(READ), "banked instead");
    }

    #[test]
    fn many_waiters_spill_and_each_is_woken_once_even_after_the_first_leaves() {
        let slot = FdSlot::new();
        let wakers: Vec<_> = (0..4).map(|_| counting_waker()).collect();
        for (waker, _) in &wakers {
            slot.lock().set_waker(READ, waker);
        }
        // The inline one leaves: the first spilled waiter takes its place.
        slot.lock().remove_waker(READ, &wakers[0].0);
        assert!(slot.lock().read.first.is_some());
        slot.deliver(0, READ);
        let counts: Vec<usize> = wakers.iter().map(|(_, c)| wakes(c)).collect();
        assert_eq!(counts, [0, 1, 1, 1]);
        let w = slot.lock();
        assert!(
            w.read.is_empty() && w.read.rest.capacity() == 0,
            "nothing held"
        );
        drop(w);
        slot.deliver(0, READ);
        assert_eq!(wakes(&wakers[1].1), 1, "woken once: the list was emptied");
    }
}
