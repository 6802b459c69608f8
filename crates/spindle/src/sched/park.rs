//! The one parking primitive: how every wait in Spindle parks, is woken,
//! times out and is cancelled.
//!
//! # Two layers
//!
//! * The *park token* (`fiber::park_running`, std's semantics) makes a
//!   parked fiber runnable again. It is all `spindle::park`/`Fiber::unpark`
//!   and `JoinHandle::join` need.
//! * A *wait* ([`wait`], [`block`]) is a park with an outcome: the fiber
//!   layer's wait word (`fiber::wait`, whose types this module re-exports),
//!   raced by wakers holding a [`WaitToken`]. This module does the waiting:
//!   it publishes the token, arms the deadline on the worker's timers,
//!   parks, and unregisters a wait that ended any way but `Ready`.
//!
//! # No lost wake-up
//!
//! A waiter publishes its token (under the lock of whatever it waits on)
//! before it parks. A waker that wins the race before the fiber has switched
//! out only leaves the park token set; the worker's `EMPTY → PARKED` flip
//! after the switch then fails and the fiber is requeued. So a wait entry is
//! matchable at once but the fiber is resumed only after its context is
//! saved.
//!
//! # Deadlines
//!
//! `time::timeout` sets a fiber deadline; every wait takes the earlier of
//! its own deadline and the fiber's, and reports `Elapsed` when the fiber's
//! was the one that passed.
//!
//! On a plain thread there is no wait word: [`block`] uses a small
//! heap-allocated [`ThreadWait`] with the same compare-exchange protocol,
//! and the thread parks in the kernel.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::fiber::wait::effective_deadline;
pub(crate) use crate::fiber::wait::{
    cancel, cancelled_io_error, current_is_cancelled, elapsed_exit, exit_cancelled, exit_for,
    Cancelled, Notify, ThreadWait, WaitKind, WaitToken, Wake,
};

/// Lets other runnable fibers run (`spindle::yield_now`); a thread, or a
/// fiber that may not switch, yields its thread. When no other fiber could
/// run and the worker has nothing due, the fiber goes on without a switch.
pub(crate) fn yield_now() {
    if super::worker::can_park() {
        if super::worker::yield_in_place() {
            return;
        }
        crate::fiber::suspend(crate::fiber::Switch::Yield);
    } else {
        std::thread::yield_now();
    }
}

/// Parks the calling fiber, or the calling thread outside a fiber, until its
/// token is available (recording what the fiber waits on). May return
/// spuriously.
///
/// On a fiber that may not switch (inside a `block_on` poll, or unwound by
/// a runtime stop) the thread waits for the fiber's token in place, driving
/// its worker's timers and netpoller meanwhile; `Fiber::unpark` wakes it.
pub(crate) fn park_current_as(kind: WaitKind) {
    if let Some(f) = super::worker::current_fiber() {
        f.header.waiting_on.set(kind);
        if super::worker::can_park() {
            crate::fiber::park_running();
        } else if crate::fiber::running_is_stopped() {
            // A stop's unwind: nothing will unpark us for long; don't wait.
        } else {
            crate::fiber::park_running_in_place(None, super::worker::drive_in_place);
        }
        f.header.waiting_on.set(WaitKind::Running);
        return;
    }
    thread::park();
}

/// Live wait registrations of plain threads (fibers count theirs in their
/// scheduler's `registrations`): `Stats::wait_registrations`, back to zero
/// when nothing waits.
static THREAD_REGISTRATIONS: AtomicUsize = AtomicUsize::new(0);

/// A cancellation point for waits with no error to return. Inert while the
/// fiber unwinds (its destructors' waits complete instead: a second panic
/// there would abort the process).
pub(crate) fn exit_if_cancelled() {
    if super::worker::can_park() && current_is_cancelled() && !thread::panicking() {
        exit_cancelled();
    }
}

/// Parks the calling fiber until a waker ends this wait, `deadline` passes,
/// or the fiber is cancelled. Must be called on a fiber that may park.
///
/// `register` publishes the token where wakers will find it, under their
/// lock; it returns false when what we wait for is already there (a banked
/// edge, a free lock), and then the fiber does not park. When the wait ends
/// any way but `Ready`, `unregister` removes the token again (the waker that
/// would have removed it never ran).
///
/// A wait made while the fiber unwinds is *shielded*: neither cancellation
/// nor an enclosing `timeout` ends it (its own `deadline` still does), so a
/// destructor that waits completes instead of panicking a second time.
pub(crate) fn wait(
    kind: WaitKind,
    deadline: Option<Instant>,
    register: impl FnOnce(&WaitToken) -> bool,
    unregister: impl FnOnce(&WaitToken),
) -> Wake {
    wait_with(
        kind,
        deadline,
        thread::panicking(),
        register,
        unregister,
        None,
    )
}

/// A shielded wait on a fiber with no deadline of its own: only a waker
/// ends it (a scope parent waiting for children it has cancelled).
pub(crate) fn wait_shielded(kind: WaitKind, register: impl FnOnce(Notify) -> bool) {
    wait_with(
        kind,
        None,
        true,
        |t| register(Notify::Fiber(t.clone())),
        |_| {},
        None,
    );
}

/// The wait behind [`wait`] and [`wait_shielded`]. `reading`: a reading of
/// the runtime's clock the caller took just before (a sleep's start), lent
/// to the worker as the fiber parks, so that the loop's look at the timers
/// right after needs no clock read of its own
/// (`Worker::timers_per_dispatch`); `None` for every other wait.
fn wait_with(
    kind: WaitKind,
    deadline: Option<Instant>,
    shielded: bool,
    register: impl FnOnce(&WaitToken) -> bool,
    unregister: impl FnOnce(&WaitToken),
    reading: Option<Instant>,
) -> Wake {
    // SAFETY: the reference is used on this fiber, inside this call, which
    // returns (or is unwound) before the fiber can finish, and it is never
    // dropped: it goes into the wait's own token, which is `ManuallyDrop`.
    let fiber =
        unsafe { super::worker::current_fiber_uncounted() }.expect("spindle: wait outside a fiber");
    if !shielded && fiber.header.cancelled.is_raised() {
        return Wake::Cancelled;
    }
    let (deadline, from_timeout) = if shielded {
        (deadline, false)
    } else {
        effective_deadline(&fiber.header, deadline)
    };
    // The wait's own token borrows the running fiber (no count of its own,
    // never dropped); the copies `register` gives wakers count as usual.
    let token = ManuallyDrop::new(WaitToken::begin(ManuallyDrop::into_inner(fiber), shielded));
    let header = &token.fiber().header;
    if !register(&token) {
        token.end_unwoken();
        return Wake::Ready;
    }
    header.sched.count_wait(true);
    header.waiting_on.set(kind);
    // The waiter's half of the cancel handshake (`token::CancelFlag`): the
    // wait is published; fence, then read the flag.
    if !shielded && header.cancelled.seen_after_publish() {
        token.wake(Wake::Cancelled, false);
    }
    // Armed without asking the clock whether the deadline has passed
    // already (a clock read per timed wait, nearly always "no"): a timer
    // that is due fires at the loop's next look, before the next dispatch,
    // and ends the wait with `TimedOut` just the same.
    if let Some(d) = deadline {
        arm_timed_wait(&token, d);
    }
    let mut foreign_unparks = false;
    while token.is_pending() {
        if reading.is_some() {
            super::worker::lend_reading(reading);
        }
        crate::fiber::park_running();
        if reading.is_some() {
            // A park that found its token returns without a switch, so
            // the loop did not take the reading, and the fiber runs on:
            // take it back before it goes stale.
            super::worker::lend_reading(None);
        }
        foreign_unparks |= token.is_pending();
    }
    header.waiting_on.set(WaitKind::Running);
    let mut why = token.outcome();
    if why != Wake::Ready {
        unregister(&token);
    }
    header.sched.count_wait(false);
    if why == Wake::TimedOut && from_timeout {
        why = Wake::Elapsed;
        header.elapsed.set(deadline);
    }
    if foreign_unparks {
        // A `Fiber::unpark` meant for a later `spindle::park` was consumed by
        // this wait's loop: put the token back.
        header.notify();
    }
    why
}

/// A wait for a [`Notify`] on a fiber or a plain thread: the shape every
/// `sync` and `chan` primitive uses.
pub(crate) fn block(
    kind: WaitKind,
    deadline: Option<Instant>,
    register: impl FnOnce(Notify) -> bool,
    unregister: impl FnOnce(&Notify),
) -> Wake {
    if super::worker::can_park() {
        return wait(
            kind,
            deadline,
            |t| register(Notify::Fiber(t.clone())),
            |t| unregister(&Notify::Fiber(t.clone())),
        );
    }
    let me = Arc::new(ThreadWait::new());
    let notify = Notify::Thread(me.clone());
    if !register(notify.clone()) {
        return Wake::Ready;
    }
    THREAD_REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
    while me.outcome().is_none() {
        match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    notify.wake(Wake::TimedOut);
                    break;
                }
                thread::park_timeout(d - now);
            }
            None => thread::park(),
        }
    }
    let why = me.outcome().unwrap_or(Wake::Ready);
    if why != Wake::Ready {
        unregister(&notify);
    }
    THREAD_REGISTRATIONS.fetch_sub(1, Ordering::Relaxed);
    why
}

/// Parks the calling fiber until its token is available or `deadline`
/// passes (`spindle::park_timeout`).
pub(crate) fn park_until(deadline: Instant) {
    let fiber = super::worker::current_fiber().expect("on a fiber");
    if fiber.header.take_token() {
        return;
    }
    // A wait nobody else holds a token for: only the timer can end it, and
    // an unpark (the park token) ends the loop early.
    let token = WaitToken::begin(fiber, false);
    let header = &token.fiber().header;
    arm_timed_wait(&token, deadline);
    header.waiting_on.set(WaitKind::Park);
    crate::fiber::park_running();
    header.waiting_on.set(WaitKind::Running);
    token.end_unwoken();
}

/// Makes the running fiber's wait `token` time out at `deadline`: on its
/// worker's heap, whose entry for the fiber is re-armed only when this
/// deadline comes before it (`poll::timer`).
fn arm_timed_wait(token: &WaitToken, deadline: Instant) {
    use crate::fiber::wait::ArmEntry;
    use crate::poll::timer::TimerTarget;
    match token.time_out_at(deadline) {
        ArmEntry::Kept => {}
        ArmEntry::New => {
            super::worker::arm_timer(deadline, TimerTarget::Fiber(token.fiber().clone()));
        }
        ArmEntry::Earlier => {
            super::worker::arm_timer(deadline, TimerTarget::Fiber(token.fiber().clone()));
            super::worker::note_dead_timer();
        }
    }
}

/// A sleep with no representable deadline (`time::sleep(Duration::MAX)`):
/// no timer is armed, so a paused clock has nothing to jump to; only a
/// cancel or an enclosing `timeout` ends it on a fiber.
pub(crate) fn sleep_forever() -> ! {
    loop {
        if crate::fiber::running_is_stopped() || !crate::sched::worker::can_park() {
            std::thread::park();
            continue;
        }
        match wait(WaitKind::Sleep, None, |_| true, |_| ()) {
            Wake::Cancelled => exit_cancelled(),
            Wake::Elapsed => elapsed_exit(),
            _ => {}
        }
    }
}

/// Parks the calling fiber until `deadline` (`time::sleep_until`); a
/// thread, or a fiber that may not switch, sleeps in place. `read_at` is
/// the runtime's clock (`time::now`) if the caller read it a moment ago
/// (`time::sleep`, which computed the deadline from it): a precise read
/// is 25–50 ns in a VM, and a sleep needs no more than that one.
pub(crate) fn sleep_until(read_at: Option<Instant>, deadline: Instant) {
    if crate::fiber::running_is_stopped() {
        // A runtime stop is unwinding this fiber: a destructor's sleep
        // would only hold up the stop.
        return;
    }
    if !crate::sched::worker::can_park() {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        return;
    }
    let mut now = read_at.unwrap_or_else(super::worker::now);
    while now < deadline {
        // Nothing but the timer (or a cancel, or a timeout) ends this wait.
        let wake = wait_with(
            WaitKind::Sleep,
            Some(deadline),
            thread::panicking(),
            |_| true,
            |_| (),
            Some(now),
        );
        match wake {
            Wake::Cancelled => exit_cancelled(),
            Wake::Elapsed => elapsed_exit(),
            // The timer ends the wait only once the clock has reached the
            // deadline (`poll::timer`): no need to ask the clock again.
            Wake::TimedOut => return,
            _ => {}
        }
        now = super::worker::now();
    }
}
