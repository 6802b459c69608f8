//! The one parking primitive: how every wait in Spindle parks, is woken,
//! times out and is cancelled.
//!
//! # Two layers
//!
//! * The *park token* (`fiber::park_running`, std's semantics) makes a
//!   parked fiber runnable again. It is all `spindle::park`/`Fiber::unpark`
//!   and `JoinHandle::join` need.
//! * A *wait* ([`wait`], [`block`]) is a park with an outcome. The fiber's
//!   header holds a wait word, `seq << 8 | outcome`: starting a wait bumps
//!   `seq` and sets the outcome to `WAITING`; every party that may end it —
//!   an fd edge, a timer, a close, a lock hand-off, a channel, a
//!   cancellation — holds a [`WaitToken`] (the fiber and `seq`) and races to
//!   compare-exchange `WAITING` into its own outcome. Exactly one wins and
//!   unparks the fiber; the losers do nothing. A token from an earlier wait
//!   can never end a later one (its `seq` is stale), so stale wakes cost
//!   nothing and lose nothing — and a value handed over with a winning wake
//!   (a lock, a message) cannot be lost to a racing timeout or cancel.
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
//! # Cancellation
//!
//! [`cancel`] sets the fiber's `cancelled` flag, then ends its current wait
//! with `Cancelled` (and unparks a plain `park`). Every wait checks the flag
//! after publishing its token (the flag and the wait word are both SeqCst,
//! so one of the two sides sees the other) and fails at once. Waits that can
//! return an error (I/O) return one [`is_cancelled`] recognises; the others
//! unwind the fiber with a [`Cancelled`] payload ([`exit_cancelled`]), which
//! the fiber's top frame turns into `JoinError::is_cancelled`.
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

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use crate::fiber::FiberRef;

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

/// What a fiber waits on (shown by `spindle::dump`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitKind {
    Running,
    Park,
    Fd { fd: i32, write: bool },
    Sleep,
    Lock,
    Condvar,
    Semaphore,
    Channel,
    Join,
    BlockOn,
    Blocking,
    Other(&'static str),
}

impl std::fmt::Display for WaitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitKind::Running => f.write_str("runnable"),
            WaitKind::Park => f.write_str("parked (spindle::park)"),
            WaitKind::Fd { fd, write: false } => write!(f, "waiting for fd {fd} to be readable"),
            WaitKind::Fd { fd, write: true } => write!(f, "waiting for fd {fd} to be writable"),
            WaitKind::Sleep => f.write_str("sleeping"),
            WaitKind::Lock => f.write_str("waiting for a lock"),
            WaitKind::Condvar => f.write_str("waiting on a condvar"),
            WaitKind::Semaphore => f.write_str("waiting for a semaphore permit"),
            WaitKind::Channel => f.write_str("waiting on a channel"),
            WaitKind::Join => f.write_str("joining a fiber"),
            WaitKind::BlockOn => f.write_str("waiting for a future (block_on)"),
            WaitKind::Blocking => f.write_str("waiting for the blocking pool"),
            WaitKind::Other(what) => write!(f, "waiting for {what}"),
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// What was waited for happened (or a banked edge was consumed).
    Ready,
    /// The wait's own deadline passed first.
    TimedOut,
    /// The fd was closed, or the channel disconnected, while waited on.
    Closed,
    /// The fiber was cancelled.
    Cancelled,
    /// The deadline of an enclosing `time::timeout` passed.
    Elapsed,
}

/// Outcome code of a pending wait.
const WAITING: u8 = 1;
/// Outcome code of a pending wait that cancellation and the fiber's
/// `timeout` deadline do not end: one made while the fiber unwinds (a wait
/// in a destructor), where raising `Cancelled` or `Elapsed` would be a
/// panic during a panic — an abort.
const SHIELDED: u8 = 7;

fn outcome_code(why: Wake) -> u8 {
    match why {
        Wake::Ready => 2,
        Wake::TimedOut => 3,
        Wake::Closed => 4,
        Wake::Cancelled => 5,
        Wake::Elapsed => 6,
    }
}

fn outcome_of(code: u8) -> Wake {
    match code {
        3 => Wake::TimedOut,
        4 => Wake::Closed,
        5 => Wake::Cancelled,
        6 => Wake::Elapsed,
        _ => Wake::Ready,
    }
}

/// Live wait registrations of plain threads (fibers count theirs in their
/// scheduler's `registrations`): `Stats::wait_registrations`, back to zero
/// when nothing waits.
static THREAD_REGISTRATIONS: AtomicUsize = AtomicUsize::new(0);

/// A waker's claim on one wait of one fiber.
#[derive(Clone)]
pub(crate) struct WaitToken {
    fiber: FiberRef,
    seq: u64,
    /// The pending code of that wait (`WAITING` or `SHIELDED`).
    pending: u8,
}

impl WaitToken {
    /// Ends the wait with `why` if it is still pending, and wakes the fiber
    /// (at the head of its worker's order when `urgent`). True if this call
    /// ended the wait.
    pub(crate) fn wake(&self, why: Wake, urgent: bool) -> bool {
        let header = &self.fiber.header;
        if !header.complete_wait(self.seq, self.pending, outcome_code(why)) {
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

    /// Like [`wake`](Self::wake), queueing the fiber at `stamp` in its
    /// owner's service order (a timer fired on the owner worker).
    pub(crate) fn wake_stamped(&self, why: Wake, stamp: super::queue::Stamp) -> bool {
        let header = &self.fiber.header;
        if !header.complete_wait(self.seq, self.pending, outcome_code(why)) {
            return false;
        }
        if header.notify() {
            super::schedule_stamped(self.fiber.clone(), stamp);
        }
        true
    }

    /// Whether both tokens name the same wait.
    pub(crate) fn same(&self, other: &WaitToken) -> bool {
        self.seq == other.seq && Arc::ptr_eq(&self.fiber, &other.fiber)
    }

    /// Whether the wait is still pending (nobody ended it yet).
    pub(crate) fn is_pending(&self) -> bool {
        self.fiber.header.wait_word() == (self.seq << 8 | self.pending as u64)
    }
}

/// A plain thread's wait: the same outcome protocol, the kernel parks.
pub(crate) struct ThreadWait {
    outcome: AtomicU8,
    thread: Thread,
}

/// A waiter published in a queue: a fiber's wait or a thread's.
#[derive(Clone)]
pub(crate) enum Notify {
    Fiber(WaitToken),
    Thread(Arc<ThreadWait>),
}

impl Notify {
    /// Ends the wait with `why` if still pending; true if this call did.
    pub(crate) fn wake(&self, why: Wake) -> bool {
        match self {
            Notify::Fiber(t) => t.wake(why, false),
            Notify::Thread(w) => {
                let won = w
                    .outcome
                    .compare_exchange(
                        WAITING,
                        outcome_code(why),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok();
                if won {
                    w.thread.unpark();
                }
                won
            }
        }
    }

    /// Whether both name the same wait.
    pub(crate) fn same(&self, other: &Notify) -> bool {
        match (self, other) {
            (Notify::Fiber(a), Notify::Fiber(b)) => a.same(b),
            (Notify::Thread(a), Notify::Thread(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The payload a cancelled fiber unwinds with (see [`exit_cancelled`]).
/// Catching it (`catch_unwind`) does not un-cancel the fiber: its next wait
/// fails again.
#[derive(Debug, Clone, Copy)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("spindle: the fiber was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// Whether an I/O error is a cancellation of the calling fiber's wait.
///
/// ```
/// use std::io::Read;
/// spindle::run(|| {
///     let (a, _b) = spindle::net::UnixStream::pair().unwrap();
///     let reader = spindle::spawn(move || (&a).read(&mut [0u8; 8]));
///     spindle::time::sleep(std::time::Duration::from_millis(10));
///     reader.cancel();
///     match reader.join() {
///         Ok(Err(e)) => assert!(spindle::is_cancelled(&e)),
///         other => assert!(other.unwrap_err().is_cancelled()),
///     }
/// });
/// ```
pub fn is_cancelled(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Cancelled>())
}

pub(crate) fn cancelled_io_error() -> std::io::Error {
    std::io::Error::other(Cancelled)
}

/// Whether the calling fiber has been cancelled (false off a fiber).
pub(crate) fn current_is_cancelled() -> bool {
    let header = crate::fiber::running_header();
    // SAFETY: the running fiber's header lives while it runs.
    !header.is_null() && unsafe { &*header }.cancelled.load(Ordering::SeqCst)
}

/// Unwinds the calling fiber because it was cancelled.
pub(crate) fn exit_cancelled() -> ! {
    std::panic::resume_unwind(Box::new(Cancelled))
}

/// A cancellation point for waits with no error to return. Inert while the
/// fiber unwinds (its destructors' waits complete instead: a second panic
/// there would abort the process).
pub(crate) fn exit_if_cancelled() {
    if super::worker::can_park() && current_is_cancelled() && !thread::panicking() {
        exit_cancelled();
    }
}

/// Cancels `fiber` (see `JoinHandle::cancel`).
pub(crate) fn cancel(fiber: &FiberRef) {
    let header = &fiber.header;
    header.cancelled.store(true, Ordering::SeqCst);
    let word = header.wait_word();
    if word & 0xff == WAITING as u64 {
        let token = WaitToken {
            fiber: fiber.clone(),
            seq: word >> 8,
            pending: WAITING,
        };
        if token.wake(Wake::Cancelled, false) {
            return;
        }
    }
    // Parked without a wait (spindle::park, join): the token wakes it, and
    // its park loop sees the flag.
    if header.is_started() && header.notify() {
        super::schedule(fiber.clone());
    }
}

/// The earlier of `deadline` and the fiber's `timeout` deadline, and
/// whether the fiber's is the one that applies.
fn effective_deadline(
    header: &crate::fiber::FiberHeader,
    deadline: Option<Instant>,
) -> (Option<Instant>, bool) {
    match (deadline, header.deadline.get()) {
        (Some(d), Some(f)) if f < d => (Some(f), true),
        (None, Some(f)) => (Some(f), true),
        (d, _) => (d, false),
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
    wait_with(kind, deadline, thread::panicking(), register, unregister)
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
    );
}

fn wait_with(
    kind: WaitKind,
    deadline: Option<Instant>,
    shielded: bool,
    register: impl FnOnce(&WaitToken) -> bool,
    unregister: impl FnOnce(&WaitToken),
) -> Wake {
    let fiber = super::worker::current_fiber().expect("spindle: wait outside a fiber");
    let header = &fiber.header;
    if !shielded && header.cancelled.load(Ordering::SeqCst) {
        return Wake::Cancelled;
    }
    let (deadline, from_timeout) = if shielded {
        (deadline, false)
    } else {
        effective_deadline(header, deadline)
    };
    let pending_code = if shielded { SHIELDED } else { WAITING };
    let seq = header.begin_wait(pending_code);
    let token = WaitToken {
        fiber: fiber.clone(),
        seq,
        pending: pending_code,
    };
    if !register(&token) {
        header.complete_wait(seq, pending_code, outcome_code(Wake::Ready));
        return Wake::Ready;
    }
    header.sched.registrations.fetch_add(1, Ordering::Relaxed);
    header.waiting_on.set(kind);
    if !shielded && header.cancelled.load(Ordering::SeqCst) {
        token.wake(Wake::Cancelled, false);
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
    let pending = seq << 8 | pending_code as u64;
    let mut foreign_unparks = false;
    while header.wait_word() == pending {
        crate::fiber::park_running();
        foreign_unparks |= header.wait_word() == pending;
    }
    header.waiting_on.set(WaitKind::Running);
    let mut why = outcome_of((header.wait_word() & 0xff) as u8);
    if timed && why != Wake::TimedOut {
        super::worker::note_dead_timer();
    }
    if why != Wake::Ready {
        unregister(&token);
    }
    header.sched.registrations.fetch_sub(1, Ordering::Relaxed);
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
    let me = Arc::new(ThreadWait {
        outcome: AtomicU8::new(WAITING),
        thread: thread::current(),
    });
    let notify = Notify::Thread(me.clone());
    if !register(notify.clone()) {
        return Wake::Ready;
    }
    THREAD_REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
    while me.outcome.load(Ordering::Acquire) == WAITING {
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
    let why = outcome_of(me.outcome.load(Ordering::Acquire));
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
        pending: WAITING,
    };
    super::worker::arm_timer(deadline, crate::poll::timer::TimerTarget::Fiber(token));
    header.waiting_on.set(WaitKind::Park);
    crate::fiber::park_running();
    header.waiting_on.set(WaitKind::Running);
    if header.complete_wait(seq, WAITING, outcome_code(Wake::Ready)) {
        super::worker::note_dead_timer();
    }
}

/// A [`timeout`](crate::time::timeout) ran out: the deadline passed while `f` waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed {
    deadline: Instant,
}

impl Elapsed {
    pub(crate) fn at(deadline: Instant) -> Elapsed {
        Elapsed { deadline }
    }

    /// The deadline that passed.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Unwinds out of a wait cut short by the deadline of an enclosing
/// [`timeout`](crate::time::timeout), which catches it.
pub(crate) fn elapsed_exit() -> ! {
    let deadline = crate::sched::worker::current_fiber()
        .and_then(|f| f.header.elapsed.get())
        .unwrap_or_else(Instant::now);
    std::panic::resume_unwind(Box::new(Elapsed { deadline }))
}

/// Leaves the fiber for a wait that ended by cancellation or an enclosing
/// `timeout`.
pub(crate) fn exit_for(why: Wake) -> ! {
    match why {
        Wake::Cancelled => exit_cancelled(),
        Wake::Elapsed => elapsed_exit(),
        other => unreachable!("not an exit: {other:?}"),
    }
}

/// Parks the calling fiber until `deadline` (`time::sleep_until`); a
/// thread, or a fiber that may not switch, sleeps in place.
pub(crate) fn sleep_until(deadline: Instant) {
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
    while Instant::now() < deadline {
        // Nothing but the timer (or a cancel, or a timeout) ends this wait.
        match wait(WaitKind::Sleep, Some(deadline), |_| true, |_| ()) {
            Wake::Cancelled => exit_cancelled(),
            Wake::Elapsed => elapsed_exit(),
            _ => {}
        }
    }
}
