//! Waits with an outcome: the wait word's protocol, the tokens wakers hold,
//! the outcomes, and cancellation (`docs/DESIGN.md`, "One way to wait").
//!
//! A fiber's header holds a wait word, `seq << 8 | outcome`
//! (`token::WaitWord`). Starting a wait ([`WaitToken::begin`]) bumps `seq`
//! and sets the outcome to a pending code. Every party that may end the
//! wait — an fd edge, a timer, a close, a lock hand-off, a channel, a
//! cancellation — holds a [`WaitToken`] (the fiber and `seq`) and races to
//! compare-exchange the pending code into its own outcome. Exactly one wins
//! and schedules the fiber through its park token; the losers do nothing.
//! A token of an earlier wait can never end a later one (its `seq` is
//! stale), so stale wakes cost nothing and lose nothing, and a value handed
//! over with a winning wake (a lock, a message) cannot be lost to a racing
//! timeout or cancel.
//!
//! A plain thread has no wait word: a [`ThreadWait`] follows the same
//! compare-exchange protocol on a word of its own, and the kernel parks the
//! thread. [`Notify`] is either kind, as wait queues hold them.
//!
//! # Cancellation
//!
//! [`cancel`] sets the fiber's `cancelled` flag, then ends its current wait
//! with `Cancelled` (or unparks a plain `park`). Every wait checks the flag
//! after publishing its token (the flag and the wait word are both SeqCst,
//! so one of the two sides sees the other) and fails at once. Waits that
//! can return an error (I/O) return one [`is_cancelled`] recognises; the
//! others unwind the fiber with a [`Cancelled`] payload ([`exit_cancelled`]),
//! which the fiber's top frame turns into `JoinError::is_cancelled`.
//!
//! The waiting itself — publishing, arming a timer, parking — needs a
//! worker and lives in `sched::park`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use super::schedule::Placement;
use super::{FiberHeader, FiberRef};

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
    Barrier,
    WaitGroup,
    Dump,
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
            WaitKind::Barrier => f.write_str("waiting for a barrier"),
            WaitKind::WaitGroup => f.write_str("waiting for a wait group"),
            WaitKind::Dump => f.write_str("waiting for a dump"),
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

/// A waker's claim on one wait of one fiber.
#[derive(Clone)]
pub(crate) struct WaitToken {
    fiber: FiberRef,
    /// The fiber's wait word while this wait is pending: its sequence
    /// number above the pending code (`WAITING` or `SHIELDED`). One word,
    /// not two fields: a token is copied into every queue it waits in,
    /// and a joiner's is kept in the fiber's header.
    pending_word: u64,
}

impl WaitToken {
    /// Starts a new wait of `fiber` (its owner only, on the fiber) and
    /// returns the token wakers will hold. A *shielded* wait is not ended
    /// by [`cancel`].
    pub(crate) fn begin(fiber: FiberRef, shielded: bool) -> WaitToken {
        let pending = if shielded { SHIELDED } else { WAITING };
        WaitToken {
            pending_word: fiber.header.wait.begin(pending) << 8 | pending as u64,
            fiber,
        }
    }

    /// Ends the wait with `why` if it is still pending, and wakes the fiber
    /// (at the head of its worker's order when `urgent`). True if this call
    /// ended the wait.
    pub(crate) fn wake(&self, why: Wake, urgent: bool) -> bool {
        self.wake_at(why, Placement::of_wake(urgent))
    }

    /// [`wake`](Self::wake) by a waker that owns this token and is done
    /// with it: the token's reference to the fiber is the one the run
    /// queue takes (see `Schedule::schedule_owned`).
    pub(crate) fn wake_owned(self, why: Wake, urgent: bool) -> bool {
        let Some(runnable) = self.end(why) else {
            return false;
        };
        if runnable {
            let sched: *const dyn super::Schedule = &*self.fiber.header.sched;
            // SAFETY: `sched` is the scheduler the fiber's header holds,
            // alive while the fiber is; the fiber is handed to it by value,
            // and `schedule_owned` keeps the scheduler alive until it
            // returns whatever becomes of the fiber (its contract). What it
            // gives back is dropped after the call.
            let kept = unsafe { (*sched).schedule_owned(self.fiber, Placement::of_wake(urgent)) };
            drop(kept);
        }
        true
    }

    /// Like [`wake`](Self::wake), placing the fiber in its owner's service
    /// order as `placement` says (a timer queues it at its due stamp).
    pub(crate) fn wake_at(&self, why: Wake, placement: Placement) -> bool {
        let Some(runnable) = self.end(why) else {
            return false;
        };
        if runnable {
            self.fiber
                .header
                .sched
                .schedule(self.fiber.clone(), placement);
        }
        true
    }

    /// Ends the wait with `why` if it is still pending: `None` if another
    /// party ended it first, else whether this call took the fiber's park
    /// token and so must schedule it.
    fn end(&self, why: Wake) -> Option<bool> {
        let header = &self.fiber.header;
        self.complete(outcome_code(why)).then(|| header.notify())
    }

    /// Records that this wait (the running fiber's own, on its worker)
    /// times out at `deadline`, and says whether the fiber's heap entry
    /// must be armed for it (see [`FiberTimer`]).
    pub(crate) fn time_out_at(&self, deadline: Instant) -> ArmEntry {
        let header = &self.fiber.header;
        let mut t = header.timer.get();
        t.wait = Some(TimedWait {
            deadline,
            pending_word: self.pending_word,
        });
        let arm = match t.entry {
            None => ArmEntry::New,
            Some(at) if at > deadline => ArmEntry::Earlier,
            Some(_) => ArmEntry::Kept,
        };
        if arm != ArmEntry::Kept {
            t.entry = Some(deadline);
        }
        header.timer.set(t);
        arm
    }

    /// The fiber this wait belongs to.
    pub(crate) fn fiber(&self) -> &FiberRef {
        &self.fiber
    }

    /// Ends the wait as `Ready` without waking anybody (the waiter itself,
    /// when what it waits for was already there). True if it was pending.
    pub(crate) fn end_unwoken(&self) -> bool {
        self.complete(outcome_code(Wake::Ready))
    }

    /// Whether both tokens name the same wait.
    pub(crate) fn same(&self, other: &WaitToken) -> bool {
        self.seq() == other.seq() && Arc::ptr_eq(&self.fiber, &other.fiber)
    }

    /// Whether the wait is still pending (nobody ended it yet).
    pub(crate) fn is_pending(&self) -> bool {
        self.fiber.header.wait.load() == self.pending_word
    }

    /// How the wait ended (meaningful once it is not pending).
    pub(crate) fn outcome(&self) -> Wake {
        outcome_of((self.fiber.header.wait.load() & 0xff) as u8)
    }

    /// Moves the wait word from this wait's pending code to `outcome`, if
    /// it is still pending: exactly one caller wins.
    fn complete(&self, outcome: u8) -> bool {
        self.fiber
            .header
            .wait
            .complete(self.seq(), self.pending_word as u8, outcome)
    }

    fn seq(&self) -> u64 {
        self.pending_word >> 8
    }
}

/// A fiber's entry in its worker's timer heap, and the timed wait it is
/// for (owner only: the fiber's worker is the only thread that runs it and
/// the only one that touches its heap).
///
/// The entry is re-armed lazily, as Go's runtime re-arms a modified timer:
/// a timed wait whose deadline is at or after the entry's only records its
/// deadline here, and the entry, when it comes due, either ends the wait
/// (its deadline has passed) or goes back into the heap at the wait's
/// deadline. A connection that re-arms a read deadline of `now + 60 s` on
/// every read so pushes one heap entry per minute, not one per read. Only
/// a deadline earlier than the entry's arms a new entry; the later one is
/// then *stale* and does nothing when it comes due.
#[derive(Clone, Copy, Default)]
pub(crate) struct FiberTimer {
    /// The deadline of the fiber's current heap entry.
    entry: Option<Instant>,
    /// The last timed wait: its deadline and the wait it ends.
    wait: Option<TimedWait>,
}

#[derive(Clone, Copy)]
struct TimedWait {
    deadline: Instant,
    /// The wait's pending word (as in [`WaitToken`]).
    pending_word: u64,
}

/// What a timed wait needs of its worker's heap ([`WaitToken::time_out_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArmEntry {
    /// The fiber's entry comes due at or before the deadline: nothing.
    Kept,
    /// Push an entry at the deadline (the fiber had none).
    New,
    /// Push an entry at the deadline; the fiber's later one is stale.
    Earlier,
}

impl FiberTimer {
    /// The deadline of the pending timed wait of `header`, if any.
    fn pending_deadline(&self, header: &FiberHeader) -> Option<Instant> {
        self.wait
            .filter(|w| header.wait.load() == w.pending_word)
            .map(|w| w.deadline)
    }
}

/// The deadline `fiber`'s heap entry at `at` now stands for, taking the
/// entry off the fiber: `None` if the entry is stale (the fiber armed
/// another since, or finished) or no timed wait is pending — the caller
/// drops it. Otherwise the caller ends the wait ([`time_out`]) when that
/// deadline has passed, or puts the entry back at it ([`put_timer_entry`]).
pub(crate) fn take_timer_entry(fiber: &FiberRef, at: Instant) -> Option<Instant> {
    let header = &fiber.header;
    let mut t = header.timer.get();
    if t.entry != Some(at) {
        return None;
    }
    t.entry = None;
    header.timer.set(t);
    t.pending_deadline(header)
}

/// The deadline `fiber`'s heap entry at `at` stands for, without taking
/// it: `None` if taking it would drop it.
pub(crate) fn peek_timer_entry(fiber: &FiberRef, at: Instant) -> Option<Instant> {
    let t = fiber.header.timer.get();
    if t.entry != Some(at) {
        return None;
    }
    t.pending_deadline(&fiber.header)
}

/// Gives `fiber` its heap entry back, at `deadline` (what
/// [`take_timer_entry`] returned; the caller pushes the entry).
pub(crate) fn put_timer_entry(fiber: &FiberRef, deadline: Instant) {
    let mut t = fiber.header.timer.get();
    t.entry = Some(deadline);
    fiber.header.timer.set(t);
}

/// Whether `fiber`'s current heap entry is the one at `at`.
pub(crate) fn is_timer_entry(fiber: &FiberRef, at: Instant) -> bool {
    fiber.header.timer.get().entry == Some(at)
}

/// Takes the heap entry off a finished fiber: true if it had one (now
/// stale).
pub(crate) fn drop_timer_entry(fiber: &FiberRef) -> bool {
    let t = fiber.header.timer.take();
    t.entry.is_some()
}

/// Ends `fiber`'s pending timed wait with `TimedOut` (its deadline has
/// passed), queuing the fiber as `placement` says. True if this call ended
/// it.
pub(crate) fn time_out(fiber: &FiberRef, placement: Placement) -> bool {
    let Some(w) = fiber.header.timer.get().wait else {
        return false;
    };
    WaitToken {
        fiber: fiber.clone(),
        pending_word: w.pending_word,
    }
    .wake_at(Wake::TimedOut, placement)
}

/// A plain thread's wait: the same outcome protocol, the kernel parks.
pub(crate) struct ThreadWait {
    outcome: AtomicU8,
    thread: Thread,
}

impl ThreadWait {
    /// A pending wait of the calling thread.
    pub(crate) fn new() -> ThreadWait {
        ThreadWait {
            outcome: AtomicU8::new(WAITING),
            thread: thread::current(),
        }
    }

    /// How the wait ended, or `None` while it is pending.
    pub(crate) fn outcome(&self) -> Option<Wake> {
        match self.outcome.load(Ordering::Acquire) {
            WAITING => None,
            code => Some(outcome_of(code)),
        }
    }
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

    /// [`wake`](Self::wake) by a waker that has taken this waiter out of
    /// its queue and is done with it: a fiber's token gives its reference
    /// to the run queue ([`WaitToken::wake_owned`]) instead of a clone
    /// taken there and the token's own dropped here — two locked updates
    /// of the fiber's count fewer per hand-over on its own worker.
    pub(crate) fn wake_owned(self, why: Wake) -> bool {
        match self {
            Notify::Fiber(t) => t.wake_owned(why, false),
            thread => thread.wake(why),
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

/// The payload a cancelled fiber unwinds with (see `exit_cancelled`).
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

/// The error a cancelled I/O wait returns.
pub(crate) fn cancelled_io_error() -> std::io::Error {
    std::io::Error::other(Cancelled)
}

/// Whether the calling fiber has been cancelled (false off a fiber).
pub(crate) fn current_is_cancelled() -> bool {
    let header = super::running_header();
    // SAFETY: the running fiber's header lives while it runs.
    !header.is_null() && unsafe { &*header }.cancelled.is_raised()
}

/// Unwinds the calling fiber because it was cancelled.
pub(crate) fn exit_cancelled() -> ! {
    std::panic::resume_unwind(Box::new(Cancelled))
}

/// Cancels `fiber` (see `JoinHandle::cancel`).
pub(crate) fn cancel(fiber: &FiberRef) {
    // The canceller's half of the handshake (`token::CancelFlag`). A fiber
    // parked in a wait — the usual case — is ended by the compare-exchange
    // on its wait word, which needs no fence; only when no pending wait is
    // seen must the canceller fence before it relies on the waiter seeing
    // the flag, so a mass cancel (a drain, a shutdown) pays a process-wide
    // barrier only for fibers that are not waiting.
    let header = &fiber.header;
    header.cancelled.raise_unfenced();
    if end_pending_wait(fiber) {
        return;
    }
    crate::membarrier::heavy();
    end_wait_of_cancelled(fiber);
}

/// Ends `fiber`'s wait with `Cancelled` if one is pending; true if this
/// call ended it.
fn end_pending_wait(fiber: &FiberRef) -> bool {
    let word = fiber.header.wait.load();
    if word & 0xff != WAITING as u64 {
        return false;
    }
    let token = WaitToken {
        fiber: fiber.clone(),
        pending_word: word,
    };
    token.wake(Wake::Cancelled, false)
}

/// The second half of [`cancel`], for a fiber whose flag was raised with
/// `raise_unfenced` and a `membarrier::heavy` run since: ends its pending
/// wait, or wakes it from a plain park.
pub(crate) fn end_wait_of_cancelled(fiber: &FiberRef) {
    let header = &fiber.header;
    if end_pending_wait(fiber) {
        return;
    }
    // Parked without a wait (spindle::park, join): the token wakes it, and
    // its park loop sees the flag.
    if header.is_started() && header.notify() {
        header.sched.schedule(fiber.clone(), Placement::Next);
    }
}

/// The earlier of `deadline` and the fiber's `timeout` deadline, and
/// whether the fiber's is the one that applies.
pub(crate) fn effective_deadline(
    header: &FiberHeader,
    deadline: Option<Instant>,
) -> (Option<Instant>, bool) {
    match (deadline, header.deadline.get()) {
        (Some(d), Some(f)) if f < d => (Some(f), true),
        (None, Some(f)) => (Some(f), true),
        (d, _) => (d, false),
    }
}

/// A [`timeout`](crate::time::timeout) ran out: the deadline passed while `f` waited.
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let e = spindle::time::timeout(Duration::from_millis(5), || {
///         spindle::time::sleep(Duration::from_secs(60))
///     })
///     .unwrap_err();
///     assert!(e.deadline() <= std::time::Instant::now());
/// });
/// ```
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
    let header = super::running_header();
    // SAFETY: the running fiber's header lives while it runs.
    let deadline = unsafe { header.as_ref() }
        .and_then(|h| h.elapsed.get())
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
