//! Fibers: the unit of concurrency — a stack, a saved context, and the
//! handle users hold.
//!
//! # What a fiber is
//!
//! One heap allocation, [`FiberCore`]: a [`FiberHeader`] that the scheduler
//! and every waker use (id, name, owner worker, park token, lifecycle state,
//! the saved context) followed by the type-erased body — the closure before
//! the fiber runs and its result after. `Arc<FiberCore<dyn Task>>`
//! ([`FiberRef`]) is what run queues, wait lists and handles hold.
//!
//! # Lifecycle (`FiberHeader::state`)
//!
//! ```text
//!   spawned ──first run──▶ started ──returns/panics──▶ COMPLETE
//!      └──────runtime stopped before it ran──────────▶ COMPLETE (no result)
//! ```
//!
//! `JOIN_WAITER` is set by a joiner after it stored its waiter in
//! `join_waiter`; the completer that flips `COMPLETE` and sees the bit wakes
//! it. The cell is written only while the bit is clear and read only after
//! `COMPLETE`, so it needs no lock.
//!
//! # The park token (`FiberHeader::park`)
//!
//! std's semantics: `unpark` makes a token available, `park` consumes it or
//! waits for it. Three values, `EMPTY`, `NOTIFIED`, `PARKED`:
//!
//! * `park` consumes `NOTIFIED` if present and returns. Otherwise it switches
//!   to its worker with [`Switch::Park`]; only *after* the switch — the
//!   fiber's registers saved — does the worker flip `EMPTY → PARKED`. If an
//!   `unpark` slipped in (`NOTIFIED`), the flip fails and the worker requeues
//!   the fiber at once. This is the no-lost-wakeup rule: a parked fiber can be
//!   made runnable only once its context is saved.
//! * `unpark` swaps in `NOTIFIED`; if it took `PARKED`, it is the one waker
//!   that schedules the fiber (onto its own worker, see `sched`).
//!
//! # Where a result is dropped
//!
//! A fiber's closure and its result may be `!Send` (`spawn_local`), and a
//! [`Fiber`] handle — `Send`, `Clone` — may keep the allocation alive on any
//! thread. So neither may wait for the last `Arc` to be dropped: the closure
//! is consumed or dropped by the worker that runs (or discards) the fiber,
//! and the result is taken by `join` or dropped by whichever of the
//! completer (the owner worker) and the `JoinHandle`'s drop comes second —
//! each sets its bit (`COMPLETE`, `DETACHED`) and the one that sees the
//! other's bit already set drops it. A `JoinHandle<T>` is `Send` only when
//! `T` is, so for a `!Send` result both parties are on the owner's thread.
//! Every such drop runs under `catch_unwind`: a `Drop` that panics is
//! reported and never unwinds a worker.
//!
//! # Where a fiber runs
//!
//! A fiber is started by whichever worker dequeues it first (idle workers
//! steal spawned-but-unstarted fibers) and never moves after that: its
//! thread-locals and `!Send` locals stay on one thread. Migration of started
//! fibers is left out; see the crate docs.

mod context;
mod handle;
pub(crate) mod locals;
pub(crate) mod overflow;
mod run;
pub(crate) mod schedule;
pub(crate) mod stack;
mod token;
pub(crate) mod wait;

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) use context::{time_switch_pairs, Context, Switch};
pub use handle::{Fiber, JoinError, JoinHandle};
pub(crate) use run::*;
use stack::{Reservation, SizeClass};

pub(crate) use schedule::{Placement, Schedule, Stamp};
use wait::{Notify, WaitKind};

/// `Arc` to a type-erased fiber: what queues, waiters and handles hold.
pub(crate) type FiberRef = Arc<FiberCore<dyn Task>>;

/// A fiber's header followed by its body (`repr(C)`: the header first,
/// right after the `Arc`'s counts; see [`FiberHeader`]).
#[repr(C)]
pub(crate) struct FiberCore<B: ?Sized> {
    pub(crate) header: FiberHeader,
    pub(crate) body: B,
}

/// Lifecycle bits of [`FiberHeader::state`].
pub(crate) mod state {
    /// Finished: returned, panicked, or stopped; `join` may read the result.
    pub(crate) const COMPLETE: u8 = 2;
    /// A joiner stored its waiter in `join_waiter`.
    pub(crate) const JOIN_WAITER: u8 = 4;
    /// Stopped by runtime shutdown (unwound or never started).
    pub(crate) const STOPPED: u8 = 8;
    /// Ended by cancellation (left at a wait, or never started).
    pub(crate) const CANCELLED: u8 = 16;
    /// The `JoinHandle` is gone: whoever sees both this and `COMPLETE`
    /// second drops the result (see "Where a result is dropped").
    pub(crate) const DETACHED: u8 = 32;
}

/// Worker index meaning "not started, not pinned: any worker may run it".
pub(crate) const NO_OWNER: usize = usize::MAX;

/// A fiber's owner worker, kept in 32 bits ([`NO_OWNER`] as `u32::MAX`) so
/// that it shares a word with the live-table index: every byte of the
/// header is paid by each fiber not yet joined.
pub(crate) struct Owner(AtomicU32);

impl Owner {
    fn new(owner: usize) -> Owner {
        Owner(AtomicU32::new(Self::encode(owner)))
    }

    fn encode(owner: usize) -> u32 {
        if owner == NO_OWNER {
            return u32::MAX;
        }
        u32::try_from(owner)
            .ok()
            .filter(|&o| o != u32::MAX)
            .expect("a worker index fits 32 bits")
    }

    /// Whether no worker owns the fiber yet ([`NO_OWNER`]).
    pub(crate) fn is_none(&self, order: Ordering) -> bool {
        self.0.load(order) == u32::MAX
    }

    pub(crate) fn load(&self, order: Ordering) -> usize {
        match self.0.load(order) {
            u32::MAX => NO_OWNER,
            owner => owner as usize,
        }
    }

    pub(crate) fn store(&self, owner: usize, order: Ordering) {
        self.0.store(Self::encode(owner), order);
    }
}

/// The part of a fiber the scheduler and wakers see.
///
/// `repr(C)`, its first fields those a waker on another thread reads or
/// writes — the scheduler, the wait word, the park token, the owner — so
/// that they sit on the allocation's first cache line or two, right after
/// the `Arc`'s counts, with the wait word and the park token always on one
/// line: a wake across workers moves each line it writes from the fiber's
/// worker and back, and scattered over the header these were four lines.
#[repr(C)]
pub(crate) struct FiberHeader {
    /// The scheduler of the runtime that spawned it: the only way this
    /// layer makes a fiber runnable (see `schedule`).
    pub(crate) sched: Arc<dyn Schedule>,
    /// The current wait: `seq << 8 | outcome` (see `wait`).
    wait: token::WaitWord,
    park: token::ParkToken,
    /// `JoinHandle::cancel` was called (or the runtime is stopping).
    pub(crate) cancelled: token::CancelFlag,
    /// Blocks its thread in place (`park` inside a `block_on` poll):
    /// `unpark` must unpark the thread too.
    blocking_thread: AtomicBool,
    state: token::StateWord,
    /// Set by the owner worker at the first run (kept apart from `state`
    /// so that setting it needs no read-modify-write).
    started: AtomicBool,
    /// The fiber switched out while its thread was unwinding (a wait in a
    /// destructor). Such a fiber is never force-unwound: a second unwind
    /// started inside a destructor would abort the process. (Beside the
    /// other flags, where it costs no padding.)
    pub(crate) suspended_unwinding: Cell<bool>,
    /// Worker that runs (or will run) this fiber; [`NO_OWNER`] before the
    /// first run unless pinned by `spawn_local`.
    pub(crate) owner: Owner,
    /// Index in the owner worker's table of live fibers (`u32::MAX`:
    /// none). 32 bits, beside `owner`: where a `usize` cost 8 bytes more.
    pub(crate) slot: Cell<u32>,
    pub(crate) id: u64,
    /// The saved context; `Some` from the first run until completion.
    context: UnsafeCell<Option<Context>>,
    /// This fiber's `corosensei::Yielder`, set at its first run.
    yielder: Cell<*const ()>,
    /// What the fiber waits on, for `spindle::dump` (owner only).
    pub(crate) waiting_on: Cell<WaitKind>,
    /// The innermost `time::timeout` deadline of this fiber (owner only).
    pub(crate) deadline: Cell<Option<std::time::Instant>>,
    /// The `timeout` deadline that last cut a wait short (owner only).
    pub(crate) elapsed: Cell<Option<std::time::Instant>>,
    /// Its entry in its worker's timer heap (owner only).
    pub(crate) timer: Cell<wait::FiberTimer>,
    /// Order in which its worker started it (owner only): a runtime stop
    /// unwinds the most recently started first, so a scope's children go
    /// before the parent that waits for them.
    pub(crate) start_seq: Cell<u64>,
    // What a switch does not touch, after what it does.
    /// Guard page of the stack, for the overflow report (its length and
    /// the usable size are the class's).
    guard_start: AtomicUsize,
    /// Boxed twice: a thin pointer, as most fibers have no name (see
    /// "What a header costs" in `docs/DESIGN.md`).
    name: Option<Box<Box<str>>>,
    join_waiter: UnsafeCell<Option<Notify>>,
    /// Stack class chosen at spawn and the claim on it, taken at first run.
    pub(crate) stack_class: &'static SizeClass,
    reservation: UnsafeCell<Option<Reservation>>,
    /// The fiber runs inside a call entered from frames that cannot unwind
    /// (`io::foreign_call`: C code, an `extern "C"` function), named for
    /// dumps. Such a fiber, suspended there, is never force-unwound either
    /// (owner only).
    pub(crate) foreign_call: Cell<Option<&'static str>>,
    /// Its `fiber_local!` values (the fiber itself, while it runs).
    pub(crate) locals: std::cell::RefCell<locals::LocalMap>,
}

// SAFETY: the `UnsafeCell`/`Cell` fields are each touched under a protocol
// documented at their use: `context`, `reservation` and `slot` only by the
// owner worker thread while it runs or retires the fiber; `join_waiter` by
// the joiner before it sets JOIN_WAITER and by the completer after COMPLETE;
// `locals` (and the `!Send` values in it) only by the fiber itself while it
// runs, on the one thread it ever runs on; the owner-only `Cell`s
// (`deadline`, `timer`, ...) by the owner worker thread alone — the fiber
// while it runs, the worker's loop and timer heap between its runs.
unsafe impl Sync for FiberHeader {}
// SAFETY: as above; the context is only resumed on its owner worker, which
// `sched` guarantees by never giving a started fiber to another worker.
unsafe impl Send for FiberHeader {}

impl FiberHeader {
    pub(crate) fn new(
        id: u64,
        name: Option<Box<str>>,
        sched: Arc<dyn Schedule>,
        owner: usize,
        reservation: Reservation,
    ) -> FiberHeader {
        FiberHeader {
            id,
            name: name.map(Box::new),
            sched,
            owner: Owner::new(owner),
            park: token::ParkToken::new(),
            state: token::StateWord::new(),
            started: AtomicBool::new(false),
            join_waiter: UnsafeCell::new(None),
            stack_class: reservation.class(),
            reservation: UnsafeCell::new(Some(reservation)),
            context: UnsafeCell::new(None),
            guard_start: AtomicUsize::new(0),
            slot: Cell::new(u32::MAX),
            yielder: Cell::new(std::ptr::null()),
            wait: token::WaitWord::new(),
            cancelled: token::CancelFlag::new(),
            deadline: Cell::new(None),
            elapsed: Cell::new(None),
            timer: Cell::new(wait::FiberTimer::default()),
            waiting_on: Cell::new(WaitKind::Running),
            start_seq: Cell::new(0),
            suspended_unwinding: Cell::new(false),
            foreign_call: Cell::new(None),
            blocking_thread: AtomicBool::new(false),
            locals: std::cell::RefCell::new(locals::LocalMap::default()),
        }
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load()
    }

    /// The name given at spawn, if any.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref().map(|name| &**name)
    }

    pub(crate) fn is_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Guard start and guard length (zeros before the first run) and usable
    /// stack size. Read by the overflow handler.
    pub(crate) fn guard(&self) -> (usize, usize, usize) {
        let start = self.guard_start.load(Ordering::Relaxed);
        let len = if start == 0 {
            0
        } else {
            self.stack_class.guard_len()
        };
        (start, len, self.stack_class.stack_size)
    }

    /// Takes the park token if present.
    pub(crate) fn take_token(&self) -> bool {
        self.park.take()
    }

    /// Called by the worker after the fiber switched out with
    /// [`Switch::Park`]. Returns false if a token arrived meanwhile and the
    /// fiber must be requeued instead.
    pub(crate) fn finish_park(&self) -> bool {
        self.park.finish_park()
    }

    /// Makes the token available; true if the caller must schedule the fiber.
    pub(crate) fn notify(&self) -> bool {
        self.park.notify()
    }

    fn mark_started(&self) {
        self.started.store(true, Ordering::Release);
    }
}

/// Marks `fiber` finished and wakes its joiner, if any; drops the result
/// if the `JoinHandle` is already gone. Called once, on the owner worker
/// (or by the one party that discards an unstarted fiber).
pub(crate) fn complete(fiber: &FiberCore<dyn Task>, stopped: bool) {
    let header = &fiber.header;
    let bits = state::COMPLETE | if stopped { state::STOPPED } else { 0 };
    let prev = header.state.set(bits);
    if prev & state::JOIN_WAITER != 0 {
        // SAFETY: JOIN_WAITER was set, so the joiner finished writing the
        // cell and will not touch it again; COMPLETE is now set, so no
        // other completer exists.
        if let Some(waiter) = unsafe { (*header.join_waiter.get()).take() } {
            waiter.wake(wait::Wake::Ready);
        }
    }
    if prev & state::DETACHED != 0 {
        // Nobody will join: the result is ours to drop, here on the owner.
        fiber.body.drop_result();
    }
}

/// Drops `value`, catching a panic from its `Drop` (reported on stderr):
/// used for every drop the runtime makes on a worker's own stack.
pub(crate) fn drop_quietly<T>(value: T, what: &str) {
    crate::loud::caught(format_args!("the Drop of {what}"), move || drop(value));
}

/// The type-erased body of a fiber.
pub(crate) trait Task: Send + Sync + 'static {
    /// Runs the closure, catching a panic into the result. Called once, on
    /// the fiber's own stack. A forced unwind (runtime shutdown) is re-raised
    /// so the context switch can finish it.
    fn run(&self, header: &FiberHeader);
    /// Drops the closure without running it (a panicking `Drop` is caught).
    fn discard(&self);
    /// Drops the result, if it is still there (a panicking `Drop` is
    /// caught). Called once the fiber is complete and its handle gone.
    fn drop_result(&self);
    /// Moves the result, if there is one, into `out` (overwritten, not
    /// dropped: the caller passes a `None`).
    ///
    /// # Safety
    ///
    /// `out` points to an `Option<std::thread::Result<T>>` for the body's
    /// `T` holding nothing to drop, and the caller is the fiber's one
    /// joiner, after it saw COMPLETE (Acquire).
    unsafe fn take_result(&self, out: *mut ());
}

/// Closure, then result, of a fiber returning `T`: one cell, as the
/// closure is gone before the result exists (a fiber's core is kept as
/// long as its handle, so its size is paid by every fiber not yet joined).
pub(crate) struct TaskBody<F, T> {
    stage: UnsafeCell<Stage<F, T>>,
}

enum Stage<F, T> {
    /// Spawned, not yet run (or discarded).
    Closure(F),
    /// Returned or panicked; the result not yet taken.
    Done(std::thread::Result<T>),
    /// Running, or nothing left: the closure was discarded, or the fiber
    /// was cancelled or stopped, or its result was taken or dropped.
    Empty,
}

impl<F, T> TaskBody<F, T> {
    pub(crate) fn new(f: F) -> TaskBody<F, T> {
        TaskBody {
            stage: UnsafeCell::new(Stage::Closure(f)),
        }
    }
}

// SAFETY: the closure is taken exactly once by the worker that runs the
// fiber (or discards it), the result is written by that worker before
// COMPLETE is published (Release) and read by the joiner after observing it
// (Acquire); the cell is touched by no one else in between.
// For `spawn_local` bodies that are not `Send`, the fiber is pinned to the
// worker that spawned it, so `f` never leaves that thread; the result type
// is `Send`-checked by `JoinHandle`'s own `Send` impl.
unsafe impl<F, T> Sync for TaskBody<F, T> {}
// SAFETY: see above.
unsafe impl<F, T> Send for TaskBody<F, T> {}

impl<F, T> Task for TaskBody<F, T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    fn run(&self, header: &FiberHeader) {
        // SAFETY: called once by the owner worker (see the Sync impl).
        let Stage::Closure(f) =
            (unsafe { std::mem::replace(&mut *self.stage.get(), Stage::Empty) })
        else {
            panic!("fiber body run twice");
        };
        if header.cancelled.is_raised() {
            // Cancelled before it could start: never run, join says so.
            drop_quietly(f, "a cancelled fiber's closure");
            header.state.set(state::CANCELLED);
            return;
        }
        let result = panic::catch_unwind(AssertUnwindSafe(f));
        // Its fiber-locals end with it, here on its own stack and worker.
        locals::teardown(&header.locals);
        if let Err(payload) = result {
            if header.state() & state::STOPPED != 0 {
                // A runtime stop unwound this stack (or the fiber's own code
                // turned that unwind into another panic): every destructor
                // has run, so end here — returning is how a forced unwind
                // finishes — and join reports the fiber stopped.
                drop_quietly(payload, "a stopped fiber's panic payload");
                return;
            }
            if payload.is::<wait::Cancelled>() {
                // Left at a wait after `cancel`: no result, join says so.
                header.state.set(state::CANCELLED);
                return;
            }
            // SAFETY: as above; COMPLETE is published after this returns.
            // The cell holds `Empty` (the closure was taken): nothing to
            // drop, so a plain write.
            unsafe { self.stage.get().write(Stage::Done(Err(payload))) };
        } else if let Ok(value) = result {
            // SAFETY: as above.
            unsafe { self.stage.get().write(Stage::Done(Ok(value))) };
        }
    }

    fn discard(&self) {
        // SAFETY: called by the single owner of an unstarted fiber.
        let stage = unsafe { std::mem::replace(&mut *self.stage.get(), Stage::Empty) };
        drop_quietly(stage, "an unstarted fiber's closure");
    }

    fn drop_result(&self) {
        // SAFETY: called once COMPLETE and DETACHED are both set, by the
        // party that set the second: the completer has written the slot and
        // no joiner exists any more.
        let stage = unsafe { std::mem::replace(&mut *self.stage.get(), Stage::Empty) };
        drop_quietly(stage, "a fiber's result");
    }

    unsafe fn take_result(&self, out: *mut ()) {
        // SAFETY: the caller is the one joiner of a complete fiber (the
        // completer wrote the cell before COMPLETE, which the caller saw),
        // and `out` is an `Option<thread::Result<T>>` for this `T` (the
        // function's contract).
        unsafe {
            if let Stage::Done(result) = std::mem::replace(&mut *self.stage.get(), Stage::Empty) {
                out.cast::<Option<std::thread::Result<T>>>()
                    .write(Some(result));
            }
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Takes `n` fresh fiber ids; returns the first.
pub(crate) fn take_ids(n: u64) -> u64 {
    NEXT_ID.fetch_add(n, Ordering::Relaxed)
}

/// Allocates a fiber (not yet queued). `owner` pins it (`spawn_local`).
pub(crate) fn new_fiber<F, T>(
    id: u64,
    f: F,
    name: Option<String>,
    sched: Arc<dyn Schedule>,
    owner: usize,
    reservation: Reservation,
) -> (FiberRef, JoinHandle<T>)
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    let core: Arc<FiberCore<TaskBody<F, T>>> = Arc::new(FiberCore {
        header: FiberHeader::new(
            id,
            name.map(String::into_boxed_str),
            sched,
            owner,
            reservation,
        ),
        body: TaskBody::new(f),
    });
    let fiber: FiberRef = core;
    let handle = JoinHandle {
        fiber: Fiber {
            core: fiber.clone(),
        },
        _result: PhantomData,
    };
    (fiber, handle)
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::{FiberCore, FiberHeader};

    /// The words a waker on another thread touches are at the front of the
    /// header, which is at the front of the fiber, and the two it writes —
    /// the wait word and the park token — share a 16-byte block: an `Arc`'s
    /// allocation is 16-aligned, so they share a cache line wherever it is.
    #[test]
    fn a_wakers_words_are_at_the_front_and_the_written_two_share_a_line() {
        assert_eq!(offset_of!(FiberCore<u64>, header), 0);
        let wait = offset_of!(FiberHeader, wait);
        let park = offset_of!(FiberHeader, park);
        assert_eq!(wait / 16, park / 16);
        for front in [
            offset_of!(FiberHeader, sched),
            wait,
            park,
            offset_of!(FiberHeader, cancelled),
            offset_of!(FiberHeader, blocking_thread),
            offset_of!(FiberHeader, owner),
        ] {
            assert!(front < 48, "{front}");
        }
    }

    /// Every byte of a fiber's core is paid by each fiber of a burst whose
    /// handles are kept (100 000 in the `fibers` example: 96 bytes more
    /// made it a third slower). A field that makes this fail should be one
    /// every fiber needs: see "What a header costs" in `docs/DESIGN.md`.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_fiber_core_stays_small() {
        assert!(
            std::mem::size_of::<FiberHeader>() <= 288,
            "FiberHeader is {} bytes",
            std::mem::size_of::<FiberHeader>()
        );
        // The closure, then the result, in one cell.
        let body = std::mem::size_of::<super::TaskBody<fn() -> u64, u64>>();
        assert!(body <= 24, "a body returning a u64 is {body} bytes");
    }
}
