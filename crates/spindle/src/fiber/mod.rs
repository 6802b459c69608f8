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
pub(crate) mod locals;
pub(crate) mod overflow;
pub(crate) mod schedule;
pub(crate) mod stack;
mod token;
pub(crate) mod wait;

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) use context::{time_switch_pairs, Context, Switch};
use stack::{Reservation, SizeClass};

pub(crate) use schedule::{Placement, Schedule, Stamp};
use wait::{Notify, WaitKind};

/// `Arc` to a type-erased fiber: what queues, waiters and handles hold.
pub(crate) type FiberRef = Arc<FiberCore<dyn Task>>;

/// A fiber's header followed by its body.
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

/// The part of a fiber the scheduler and wakers see.
pub(crate) struct FiberHeader {
    pub(crate) id: u64,
    pub(crate) name: Option<Box<str>>,
    /// The scheduler of the runtime that spawned it: the only way this
    /// layer makes a fiber runnable (see `schedule`).
    pub(crate) sched: Arc<dyn Schedule>,
    /// Worker that runs (or will run) this fiber; [`NO_OWNER`] before the
    /// first run unless pinned by `spawn_local`.
    pub(crate) owner: AtomicUsize,
    park: token::ParkToken,
    state: token::StateWord,
    /// Set by the owner worker at the first run (kept apart from `state`
    /// so that setting it needs no read-modify-write).
    started: AtomicBool,
    join_waiter: UnsafeCell<Option<Notify>>,
    /// Stack class chosen at spawn and the claim on it, taken at first run.
    pub(crate) stack_class: &'static SizeClass,
    reservation: UnsafeCell<Option<Reservation>>,
    /// The saved context; `Some` from the first run until completion.
    context: UnsafeCell<Option<Context>>,
    /// Guard page and usable size of the stack, for the overflow report.
    guard_start: AtomicUsize,
    guard_len: AtomicUsize,
    /// Index in the owner worker's table of live fibers.
    pub(crate) slot: Cell<usize>,
    /// This fiber's `corosensei::Yielder`, set at its first run.
    yielder: Cell<*const ()>,
    /// The current wait: `seq << 8 | outcome` (see `wait`).
    wait: token::WaitWord,
    /// `JoinHandle::cancel` was called (or the runtime is stopping).
    pub(crate) cancelled: token::CancelFlag,
    /// The innermost `time::timeout` deadline of this fiber (owner only).
    pub(crate) deadline: Cell<Option<std::time::Instant>>,
    /// The `timeout` deadline that last cut a wait short (owner only).
    pub(crate) elapsed: Cell<Option<std::time::Instant>>,
    /// What the fiber waits on, for `spindle::dump` (owner only).
    pub(crate) waiting_on: Cell<WaitKind>,
    /// Order in which its worker started it (owner only): a runtime stop
    /// unwinds the most recently started first, so a scope's children go
    /// before the parent that waits for them.
    pub(crate) start_seq: Cell<u64>,
    /// The fiber switched out while its thread was unwinding (a wait in a
    /// destructor). Such a fiber is never force-unwound: a second unwind
    /// started inside a destructor would abort the process.
    pub(crate) suspended_unwinding: Cell<bool>,
    /// The fiber runs inside a call entered from frames that cannot unwind
    /// (`io::foreign_call`: C code, an `extern "C"` function), named for
    /// dumps. Such a fiber, suspended there, is never force-unwound either
    /// (owner only).
    pub(crate) foreign_call: Cell<Option<&'static str>>,
    /// Its `fiber_local!` values (the fiber itself, while it runs).
    pub(crate) locals: std::cell::RefCell<locals::LocalMap>,
    /// Blocks its thread in place (`park` inside a `block_on` poll):
    /// `unpark` must unpark the thread too.
    blocking_thread: AtomicBool,
}

// SAFETY: the `UnsafeCell`/`Cell` fields are each touched under a protocol
// documented at their use: `context`, `reservation` and `slot` only by the
// owner worker thread while it runs or retires the fiber; `join_waiter` by
// the joiner before it sets JOIN_WAITER and by the completer after COMPLETE;
// `locals` (and the `!Send` values in it) only by the fiber itself while it
// runs, on the one thread it ever runs on.
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
            name,
            sched,
            owner: AtomicUsize::new(owner),
            park: token::ParkToken::new(),
            state: token::StateWord::new(),
            started: AtomicBool::new(false),
            join_waiter: UnsafeCell::new(None),
            stack_class: reservation.class(),
            reservation: UnsafeCell::new(Some(reservation)),
            context: UnsafeCell::new(None),
            guard_start: AtomicUsize::new(0),
            guard_len: AtomicUsize::new(0),
            slot: Cell::new(usize::MAX),
            yielder: Cell::new(std::ptr::null()),
            wait: token::WaitWord::new(),
            cancelled: token::CancelFlag::new(),
            deadline: Cell::new(None),
            elapsed: Cell::new(None),
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

    pub(crate) fn is_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Guard start, guard length and usable stack size (zeros before the
    /// first run). Read by the overflow handler.
    pub(crate) fn guard(&self) -> (usize, usize, usize) {
        (
            self.guard_start.load(Ordering::Relaxed),
            self.guard_len.load(Ordering::Relaxed),
            self.stack_class.stack_size,
        )
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
    /// `*mut Option<std::thread::Result<T>>` for the body's `T`.
    fn result_slot(&self) -> *mut ();
}

/// Closure and result of a fiber returning `T`.
pub(crate) struct TaskBody<F, T> {
    f: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<std::thread::Result<T>>>,
}

impl<F, T> TaskBody<F, T> {
    pub(crate) fn new(f: F) -> TaskBody<F, T> {
        TaskBody {
            f: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
        }
    }
}

// SAFETY: `f` is taken exactly once by the worker that runs the fiber (or
// discards it), `result` is written by that worker before COMPLETE is
// published (Release) and read by the joiner after observing it (Acquire).
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
        let f = unsafe { (*self.f.get()).take() }.expect("fiber body run twice");
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
            unsafe { *self.result.get() = Some(Err(payload)) };
        } else if let Ok(value) = result {
            // SAFETY: as above.
            unsafe { *self.result.get() = Some(Ok(value)) };
        }
    }

    fn discard(&self) {
        // SAFETY: called by the single owner of an unstarted fiber.
        let f = unsafe { (*self.f.get()).take() };
        drop_quietly(f, "an unstarted fiber's closure");
    }

    fn drop_result(&self) {
        // SAFETY: called once COMPLETE and DETACHED are both set, by the
        // party that set the second: the completer has written the slot and
        // no joiner exists any more.
        let result = unsafe { (*self.result.get()).take() };
        drop_quietly(result, "a fiber's result");
    }

    fn result_slot(&self) -> *mut () {
        self.result.get().cast()
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

// ---------------------------------------------------------------------------
// Running a fiber (called by the owner worker only).

thread_local! {
    /// Header of the fiber running on this thread, for the overflow handler.
    static RUNNING: Cell<*const FiberHeader> = const { Cell::new(std::ptr::null()) };
}

pub(crate) fn running_header() -> *const FiberHeader {
    RUNNING.with(|r| r.get())
}

/// Marks the running fiber as inside the foreign call `name` (see
/// [`FiberHeader::foreign_call`]); returns what it was inside before, for
/// [`leave_foreign_call`]. Nothing off a fiber.
pub(crate) fn enter_foreign_call(name: &'static str) -> Option<&'static str> {
    let header = running_header();
    // SAFETY: the running fiber's header lives while it runs, and only the
    // fiber itself (its owner thread) touches `foreign_call`.
    unsafe { header.as_ref() }.and_then(|h| h.foreign_call.replace(Some(name)))
}

/// Restores what [`enter_foreign_call`] returned.
pub(crate) fn leave_foreign_call(previous: Option<&'static str>) {
    let header = running_header();
    // SAFETY: as in `enter_foreign_call`.
    if let Some(h) = unsafe { header.as_ref() } {
        h.foreign_call.set(previous);
    }
}

/// What became of a fiber when it switched back to its worker.
pub(crate) enum Outcome {
    Yielded,
    Parked,
    /// The body returned or panicked; the stack is handed back (none if
    /// the fiber could not get one).
    Finished(Option<stack::FiberStack>),
}

/// Gives a fiber its stack and context at its first run, on the worker
/// that now owns it. Returns false if no stack could be had (the failure
/// is reported on stderr): the caller must then drop the closure
/// (`Task::discard`, user code: not while it borrows its worker's state)
/// and retire the fiber without resuming it.
///
/// # Safety
///
/// Must be called once, by the fiber's new owner worker, outside any fiber.
pub(crate) unsafe fn prepare(fiber: &FiberRef, pool: &mut stack::StackPool) -> bool {
    let header = &fiber.header;
    // SAFETY: first run by the owner: `reservation` is ours to take.
    let reservation = unsafe { (*header.reservation.get()).take() }
        .expect("an unstarted fiber holds its stack reservation");
    let stack = match header.stack_class.take(reservation, pool) {
        Ok(stack) => stack,
        Err(e) => {
            // The reservation promised a slot; only a guard install can fail
            // here. Loud, and the fiber ends without a result.
            crate::loud::loud!(
                "fiber {} could not get its stack at first run: {e}",
                header.id
            );
            return false;
        }
    };
    header
        .guard_start
        .store(stack.guard_start(), Ordering::Relaxed);
    header.guard_len.store(stack.guard_len(), Ordering::Relaxed);
    debug_assert_eq!(stack.usable_size(), header.stack_class.stack_size);
    let body: *const FiberCore<dyn Task> = Arc::as_ptr(fiber);
    // SAFETY: owner worker, no other reference to `context` exists.
    unsafe { *header.context.get() = Some(Context::new(stack, body)) };
    header.mark_started();
    true
}

/// Resumes a prepared fiber on the calling worker until it switches back.
///
/// # Safety
///
/// Must be called by the fiber's owner worker, never concurrently with
/// itself for the same fiber, and not from inside a fiber.
#[inline]
pub(crate) unsafe fn resume(fiber: &FiberRef) -> Outcome {
    let header = &fiber.header;
    // SAFETY: the caller is the owner worker; nobody else touches `context`.
    let context = unsafe { &mut *header.context.get() };
    let prev = RUNNING.with(|r| r.replace(header));
    let result = context.as_mut().expect("a prepared fiber").resume();
    RUNNING.with(|r| r.set(prev));
    match result {
        Some(Switch::Yield) => Outcome::Yielded,
        Some(Switch::Park) => Outcome::Parked,
        None => Outcome::Finished(Some(context.take().expect("context present").into_stack())),
    }
}

/// Unwinds a started fiber's stack on its owner worker (runtime shutdown):
/// its destructors run, its stack is handed back.
///
/// A fiber that switched out *while unwinding* (it waits in a destructor)
/// is not unwound again: a forced unwind raised inside a destructor that is
/// already running for a panic aborts the process. Nor is one that switched
/// out inside a foreign call (C frames, or an `extern "C"` function, lie
/// between its suspension and its body: an unwind through them aborts the
/// process, or worse). Either's stack is leaked instead (never resumed,
/// never freed: sound, and said on stderr).
///
/// While the unwind runs, the fiber's waits cannot switch (see
/// [`running_is_stopped`]): they block the worker thread as on a plain
/// thread.
///
/// # Safety
///
/// Same contract as [`resume`]; the fiber must not be queued or running.
pub(crate) unsafe fn stop(fiber: &FiberRef) -> Option<stack::FiberStack> {
    let header = &fiber.header;
    header.state.set(state::STOPPED);
    // SAFETY: owner worker, fiber neither queued nor running (caller).
    let context = unsafe { &mut *header.context.get() };
    let mut c = context.take()?;
    let name = || {
        header
            .name
            .as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default()
    };
    if header.suspended_unwinding.get() {
        crate::loud::loud!(
            "fiber {}{} was still waiting inside a destructor while it \
             unwound ({}) when the runtime stopped; its stack is leaked, not unwound",
            header.id,
            name(),
            header.waiting_on.get()
        );
        std::mem::forget(c);
        return None;
    }
    if let Some(call) = header.foreign_call.get() {
        crate::loud::loud!(
            "fiber {}{} was still inside {call} ({}) when the runtime stopped: \
             the frames that called it cannot unwind, so its stack is leaked, not unwound",
            header.id,
            name(),
            header.waiting_on.get()
        );
        std::mem::forget(c);
        return None;
    }
    let prev = RUNNING.with(|r| r.replace(header));
    // The body catches every panic at its top frame (`Task::run`), so
    // nothing should escape; if something does, it must not end the worker.
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| c.unwind()));
    RUNNING.with(|r| r.set(prev));
    match unwound {
        Ok(()) => Some(c.into_stack()),
        Err(payload) => {
            crate::loud::loud!(
                "fiber {} ended its forced unwind with a panic: {}",
                header.id,
                crate::loud::panic_message(&payload)
            );
            std::mem::forget(payload);
            std::mem::forget(c);
            None
        }
    }
}

/// Whether the fiber running on this thread is being unwound by a runtime
/// stop: its waits must not switch (they block the thread instead).
#[inline]
pub(crate) fn running_is_stopped() -> bool {
    let header = running_header();
    // SAFETY: the running fiber's header lives while it runs.
    !header.is_null() && unsafe { &*header }.state() & state::STOPPED != 0
}

/// Drops a fiber that never ran (runtime shutdown): its closure, its stack
/// reservation; its joiner sees it cancelled.
pub(crate) fn discard_unstarted(fiber: &FiberRef) {
    let header = &fiber.header;
    header.state.set(state::STOPPED);
    fiber.body.discard();
    // SAFETY: the caller took the fiber's only queue entry, so it is the
    // fiber's single owner and nobody else touches the reservation.
    drop(unsafe { (*header.reservation.get()).take() });
    complete(fiber, true);
}

/// Called on the fiber's own stack as its entry point.
pub(crate) fn enter(fiber: &FiberCore<dyn Task>) {
    fiber.body.run(&fiber.header);
}

/// Suspends the running fiber with `switch`. Must run on a fiber.
pub(crate) fn suspend(switch: Switch) {
    let header = running_header();
    // SAFETY: the running fiber's header lives while it runs.
    unsafe { &*header }
        .suspended_unwinding
        .set(std::thread::panicking());
    context::suspend_running(switch);
}

/// Parks the running fiber until its token is available (std semantics).
pub(crate) fn park_running() {
    let header = running_header();
    debug_assert!(!header.is_null());
    // SAFETY: the running fiber's header lives while it runs.
    let header = unsafe { &*header };
    if header.take_token() {
        return;
    }
    suspend(Switch::Park);
    // Woken: consume the token that woke us.
    header.park.consume_after_wake();
}

/// Waits for the running fiber's park token *without switching*: the
/// thread blocks (a `park` inside a `block_on` poll, or during a runtime
/// stop's unwind). `drive` runs between short sleeps, to keep the worker's
/// timers and netpoller going while its loop cannot. Returns early after
/// `deadline`.
pub(crate) fn park_running_in_place(deadline: Option<std::time::Instant>, drive: impl Fn()) {
    let header = running_header();
    // SAFETY: the running fiber's header lives while it runs.
    let header = unsafe { &*header };
    header.blocking_thread.store(true, Ordering::SeqCst);
    loop {
        // SeqCst flag store, then the token: `unpark` swaps the token, then
        // reads the flag (both SeqCst), so one of us sees the other.
        if header.take_token() {
            break;
        }
        let mut nap = std::time::Duration::from_millis(1);
        if let Some(d) = deadline {
            let now = std::time::Instant::now();
            if now >= d {
                break;
            }
            nap = nap.min(d - now);
        }
        drive();
        std::thread::park_timeout(nap);
    }
    header.blocking_thread.store(false, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------
// Public handles.

/// A handle to a fiber: its identity, and a way to wake it.
///
/// Obtained from [`current`](crate::current) or [`JoinHandle::fiber`].
///
/// ```
/// spindle::run(|| {
///     let me = spindle::current().expect("on a fiber");
///     me.unpark();          // the token is kept...
///     spindle::park();      // ...so this returns at once
///     assert!(me.id() > 0);
/// });
/// ```
#[derive(Clone)]
pub struct Fiber {
    pub(crate) core: FiberRef,
}

impl Fiber {
    /// A process-wide unique id, never reused.
    pub fn id(&self) -> u64 {
        self.core.header.id
    }

    /// The name given with [`Builder::name`](crate::Builder::name).
    pub fn name(&self) -> Option<&str> {
        self.core.header.name.as_deref()
    }

    /// Cancels the fiber, as [`JoinHandle::cancel`] does, through a handle
    /// that does not own its result (a server cancelling its connections).
    pub fn cancel(&self) {
        wait::cancel(&self.core);
    }

    /// Makes the fiber's park token available, waking it if it is parked
    /// in [`park`](crate::park). An unpark before the park is not lost.
    /// Callable from any thread.
    pub fn unpark(&self) {
        let header = &self.core.header;
        if header.notify() {
            header.sched.schedule(self.core.clone(), Placement::Next);
        } else if header.blocking_thread.load(Ordering::SeqCst) {
            // It waits with its thread blocked in place: wake the thread.
            header.sched.unpark_owner_thread(&self.core);
        }
    }
}

impl fmt::Debug for Fiber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fiber")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish()
    }
}

/// Why [`JoinHandle::join`] has no value: the fiber panicked, or it was
/// cancelled — by [`JoinHandle::cancel`], or by runtime shutdown, before it
/// started or at one of its waits — before it could finish.
///
/// ```
/// spindle::run(|| {
///     let h = spindle::spawn(|| spindle::time::sleep(std::time::Duration::from_secs(60)));
///     h.cancel();
///     assert!(h.join().unwrap_err().is_cancelled());
/// });
/// ```
pub struct JoinError {
    repr: JoinErrorRepr,
}

enum JoinErrorRepr {
    Panic(Box<dyn Any + Send + 'static>),
    Cancelled,
}

impl JoinError {
    pub(crate) fn from_panic(payload: Box<dyn Any + Send + 'static>) -> JoinError {
        JoinError {
            repr: JoinErrorRepr::Panic(payload),
        }
    }

    /// The fiber panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Panic(_))
    }

    /// The fiber was cancelled before it finished: by
    /// [`JoinHandle::cancel`] or by runtime shutdown, before it started or
    /// at one of its waits.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Cancelled)
    }

    /// The panic payload, to re-raise with `std::panic::resume_unwind`.
    ///
    /// # Panics
    ///
    /// If the fiber did not panic; check [`is_panic`](Self::is_panic).
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        match self.repr {
            JoinErrorRepr::Panic(p) => p,
            JoinErrorRepr::Cancelled => panic!("JoinError::into_panic on a cancelled fiber"),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(p) => write!(
                f,
                "JoinError::Panic({:?})",
                crate::loud::panic_message(&**p)
            ),
            JoinErrorRepr::Cancelled => f.write_str("JoinError::Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(_) => f.write_str("fiber panicked"),
            JoinErrorRepr::Cancelled => f.write_str("fiber was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}

/// An owned permission to wait for a fiber and take its result.
///
/// Dropping it detaches the fiber (it keeps running). (`join` waits, so it
/// is written with the other waits, in `sched/join.rs`.)
///
/// ```
/// spindle::run(|| {
///     let h = spindle::spawn(|| 40 + 2);
///     assert_eq!(h.join().unwrap(), 42);
/// });
/// ```
pub struct JoinHandle<T> {
    fiber: Fiber,
    _result: PhantomData<T>,
}

// SAFETY: the handle only moves a `T` out of the fiber's result slot, so it
// may cross threads exactly when `T` may.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: `&JoinHandle` gives access to the `Fiber` (Sync) only.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    /// Whether the fiber has started running (a join of an unstarted fiber
    /// yields first: it was queued before the joiner's next turn).
    pub(crate) fn is_started(&self) -> bool {
        self.fiber.core.header.is_started()
    }

    /// Publishes `notify` as this handle's joiner, which the completer
    /// wakes. False if the fiber completed first (then nobody will wake
    /// `notify`, and the result is there). Called at most once per handle.
    ///
    /// The protocol: the joiner writes `join_waiter` while `JOIN_WAITER` is
    /// clear, then sets the bit; the completer sets `COMPLETE` and reads the
    /// cell only if it saw the bit. Whoever sets its bit second sees the
    /// other's, so the waiter is woken exactly when it was published before
    /// completion.
    pub(crate) fn register_joiner(&self, notify: Notify) -> bool {
        let header = &self.fiber.core.header;
        if header.state.load() & state::COMPLETE != 0 {
            return false;
        }
        // SAFETY: JOIN_WAITER is clear (this is the handle's only
        // registration, as `join` consumes the handle), so the completer
        // will not read the cell until we set the bit (AcqRel below).
        unsafe { *header.join_waiter.get() = Some(notify) };
        let prev = header.state.set(state::JOIN_WAITER);
        // COMPLETE set meanwhile: the completer did not see our bit and
        // will not wake us; the result is there.
        prev & state::COMPLETE == 0
    }

    /// Takes the result of a completed fiber.
    ///
    /// # Panics
    ///
    /// If the fiber is not complete (a bug of the caller).
    pub(crate) fn take_result(self) -> Result<T, JoinError> {
        let header = &self.fiber.core.header;
        assert!(
            header.state() & state::COMPLETE != 0,
            "spindle: the result of an unfinished fiber was taken"
        );
        // SAFETY: COMPLETE observed with Acquire: the result slot was written
        // before it and nobody else reads it (this consumes the handle, and
        // the result is dropped by others only after DETACHED, which this
        // handle's drop sets later); the slot's type is the `T` this handle
        // was created with.
        let slot = self.fiber.core.body.result_slot() as *mut Option<std::thread::Result<T>>;
        // SAFETY: as above.
        let taken = unsafe { (*slot).take() };
        // The result is taken: this handle's drop has nothing left to do
        // but release the fiber (skipping the DETACHED handshake).
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again.
        drop(unsafe { std::ptr::read(&this.fiber) });
        match taken {
            Some(Ok(v)) => Ok(v),
            Some(Err(p)) => Err(JoinError {
                repr: JoinErrorRepr::Panic(p),
            }),
            None => Err(JoinError {
                repr: JoinErrorRepr::Cancelled,
            }),
        }
    }

    /// Cancels the fiber: its current wait — socket, timer, lock, channel,
    /// join, park, `block_on`, blocking-pool call — and every later one fail
    /// at once. An I/O wait returns an `io::Error` that
    /// [`is_cancelled`](crate::is_cancelled) recognises (a kind std's helpers
    /// never retry); a wait with no error to return (`park`, `sleep`, a lock,
    /// a channel, `join`) unwinds the fiber, running its destructors. A value
    /// already handed over — a received message, an acquired guard — is
    /// never lost. A fiber cancelled before it started never runs. `join`
    /// then reports [`JoinError::is_cancelled`], unless the fiber finished
    /// anyway.
    ///
    /// ```
    /// use std::time::Duration;
    /// spindle::run(|| {
    ///     let sleeper = spindle::spawn(|| spindle::time::sleep(Duration::from_secs(3600)));
    ///     spindle::time::sleep(Duration::from_millis(10));
    ///     sleeper.cancel();
    ///     assert!(sleeper.join().unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn cancel(&self) {
        wait::cancel(&self.fiber.core);
    }

    /// Whether the fiber has finished (its `join` would not wait).
    pub fn is_finished(&self) -> bool {
        self.fiber.core.header.state() & state::COMPLETE != 0
    }

    /// The fiber this handle joins.
    pub fn fiber(&self) -> &Fiber {
        &self.fiber
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let core = &self.fiber.core;
        let prev = core.header.state.set(state::DETACHED);
        if prev & state::COMPLETE != 0 {
            // Finished and never joined (or joined: then the slot is empty).
            // A `!Send` result's handle cannot have left the owner's thread.
            core.body.drop_result();
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("fiber", &self.fiber)
            .field("finished", &self.is_finished())
            .finish()
    }
}
