//! Running a fiber, called by its owner worker only: preparing its
//! stack, resuming it, stopping it (a runtime stop's forced unwind),
//! suspending and parking from inside it, and which fiber runs on this
//! thread (`docs/DESIGN.md`, "Fibers and stacks").

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    complete, context, stack, state, Context, FiberCore, FiberHeader, FiberRef, Switch, Task,
};

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
    let stack = match pool.take(reservation) {
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
    debug_assert_eq!(stack.guard_len(), header.stack_class.guard_len());
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
            .name()
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
