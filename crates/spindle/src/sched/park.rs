//! The one parking primitive: how every wait in Spindle parks and is woken.
//!
//! # Two layers
//!
//! * The *park token* (`fiber::park_running`, std's semantics) makes a
//!   parked fiber runnable again. It is all `spindle::park`/`Fiber::unpark`
//!   and `JoinHandle::join` need.
//! * A *wait* ([`wait`]) is a park with an outcome. The fiber's header holds
//!   a wait word, `seq << 8 | outcome`: starting a wait bumps `seq` and sets
//!   the outcome to `WAITING`; every party that may end it — an fd edge, a
//!   timer, a close, later a cancellation — holds a [`WaitToken`] (the fiber
//!   and `seq`) and races to compare-exchange `WAITING` into its own
//!   outcome. Exactly one wins and unparks the fiber; the losers do nothing.
//!   A token from an earlier wait can never end a later one (its `seq` is
//!   stale), so stale wakes cost nothing and lose nothing.
//!
//! # No lost wake-up
//!
//! A waiter publishes its token (under the lock of whatever it waits on)
//! before it parks. A waker that wins the race before the fiber has switched
//! out only leaves the park token set; the worker's `EMPTY → PARKED` flip
//! after the switch then fails and the fiber is requeued. So a wait entry is
//! matchable at once but the fiber is resumed only after its context is
//! saved (seed 002).
//!
//! On a plain thread there is no wait word: threads block in the kernel
//! (`poll(2)`, `std::thread::park_timeout`) exactly as std would.

use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use crate::fiber::FiberRef;

/// Who to wake: a fiber or an OS thread.
pub(crate) enum Waiter {
    Fiber(FiberRef),
    Thread(Thread),
}

impl Waiter {
    /// A waiter for the calling context.
    pub(crate) fn current() -> Waiter {
        if super::worker::can_park() {
            if let Some(fiber) = super::worker::current_fiber() {
                return Waiter::Fiber(fiber);
            }
        }
        Waiter::Thread(thread::current())
    }

    /// Makes the waiter's token available, waking it if it is parked.
    pub(crate) fn wake(self) {
        match self {
            Waiter::Fiber(fiber) => {
                if fiber.header.notify() {
                    super::schedule(fiber);
                }
            }
            Waiter::Thread(t) => t.unpark(),
        }
    }
}

/// Parks the calling fiber, or the calling thread outside a fiber, until its
/// token is available. May return spuriously.
pub(crate) fn park_current() {
    if super::worker::can_park() {
        crate::fiber::park_running();
    } else {
        thread::park();
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// What was waited for happened (or a banked edge was consumed).
    Ready,
    /// The deadline passed first.
    TimedOut,
    /// The fd was closed while waited on.
    Closed,
}

const WAITING: u8 = 1;

fn outcome_code(why: Wake) -> u8 {
    match why {
        Wake::Ready => 2,
        Wake::TimedOut => 3,
        Wake::Closed => 4,
    }
}

fn outcome_of(code: u8) -> Wake {
    match code {
        3 => Wake::TimedOut,
        4 => Wake::Closed,
        _ => Wake::Ready,
    }
}

/// A waker's claim on one wait of one fiber.
#[derive(Clone)]
pub(crate) struct WaitToken {
    fiber: FiberRef,
    seq: u64,
}

impl WaitToken {
    /// Ends the wait with `why` if it is still pending, and wakes the fiber
    /// (at the head of its worker's order when `urgent`). True if this call
    /// ended the wait.
    pub(crate) fn wake(&self, why: Wake, urgent: bool) -> bool {
        let header = &self.fiber.header;
        if !header.complete_wait(self.seq, WAITING, outcome_code(why)) {
            return false;
        }
        if header.notify() {
            if urgent {
                super::schedule_urgent(self.fiber.clone());
            } else {
                super::schedule(self.fiber.clone());
            }
        }
        true
    }

    /// Whether both tokens name the same wait.
    pub(crate) fn same(&self, other: &WaitToken) -> bool {
        self.seq == other.seq && Arc::ptr_eq(&self.fiber, &other.fiber)
    }

    /// Whether the wait is still pending (nobody ended it yet).
    pub(crate) fn is_pending(&self) -> bool {
        self.fiber.header.wait_word() == (self.seq << 8 | WAITING as u64)
    }
}

/// Parks the calling fiber until a waker ends this wait or `deadline`
/// passes. Must be called on a fiber.
///
/// `register` publishes the token where wakers will find it, under their
/// lock; it returns false when what we wait for is already there (a banked
/// edge), and then the fiber does not park. When the wait ends any way but
/// `Ready`, `unregister` removes the token again (the waker that would have
/// removed it never ran).
pub(crate) fn wait(
    deadline: Option<Instant>,
    register: impl FnOnce(&WaitToken) -> bool,
    unregister: impl FnOnce(&WaitToken),
) -> Wake {
    let fiber = super::worker::current_fiber().expect("spindle: wait outside a fiber");
    let header = &fiber.header;
    let seq = header.begin_wait(WAITING);
    let token = WaitToken {
        fiber: fiber.clone(),
        seq,
    };
    if !register(&token) {
        header.complete_wait(seq, WAITING, outcome_code(Wake::Ready));
        return Wake::Ready;
    }
    let timed = match deadline {
        Some(d) if d <= Instant::now() => {
            token.wake(Wake::TimedOut, false);
            false
        }
        Some(d) => {
            super::worker::arm_timer(d, crate::poll::timer::TimerTarget::Fiber(token.clone()));
            true
        }
        None => false,
    };
    let pending = seq << 8 | WAITING as u64;
    let mut foreign_unparks = false;
    while header.wait_word() == pending {
        crate::fiber::park_running();
        foreign_unparks |= header.wait_word() == pending;
    }
    let why = outcome_of((header.wait_word() & 0xff) as u8);
    if timed && why != Wake::TimedOut {
        super::worker::note_dead_timer();
    }
    if why != Wake::Ready {
        unregister(&token);
    }
    if foreign_unparks {
        // A `Fiber::unpark` meant for a later `spindle::park` was consumed by
        // this wait's loop: put the token back.
        header.notify();
    }
    why
}

/// Parks the calling fiber until its token is available or `deadline`
/// passes (`spindle::park_timeout`).
pub(crate) fn park_until(deadline: Instant) {
    let fiber = super::worker::current_fiber().expect("on a fiber");
    if fiber.header.take_token_pub() {
        return;
    }
    // A wait nobody else holds a token for: only the timer can end it, and
    // an unpark (the park token) ends the loop early.
    let header = &fiber.header;
    let seq = header.begin_wait(WAITING);
    let token = WaitToken {
        fiber: fiber.clone(),
        seq,
    };
    super::worker::arm_timer(deadline, crate::poll::timer::TimerTarget::Fiber(token));
    crate::fiber::park_running();
    if !header.complete_wait(seq, WAITING, outcome_code(Wake::Ready)) {
        // The timer fired; its wake may still be in flight as a token: fine,
        // park semantics allow a spurious return later.
    } else {
        super::worker::note_dead_timer();
    }
}
