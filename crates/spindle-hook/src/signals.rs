//! Signal handlers: a call made inside one is libc's, unchanged.
//!
//! A handler runs on whatever stack its thread was on — a fiber's, in the
//! middle of anything, its worker's state perhaps half updated. Parking
//! the fiber from there would switch stacks inside a signal frame. So the
//! hook wraps every handler installed through `sigaction` or `signal`: a
//! trampoline counts the handlers running on this thread (a thread-local
//! with no destructor, safe to touch in a handler) around the user's own,
//! and a call made while the count is not zero is never changed.
//!
//! A handler that leaves by `siglongjmp` never returns through the
//! trampoline: its thread then counts as inside a handler for good, and
//! its calls stay libc's (blocking the worker, as without the hook) —
//! safe, never a switch inside a signal frame.
//!
//! What the program sees stays its own: `sigaction` reports the handler it
//! installed, not the trampoline, and one the kernel reset (`SA_RESETHAND`)
//! as the kernel reports it.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, sigaction as SigAction, siginfo_t};

use crate::real;

thread_local! {
    /// How many handlers are running on this thread.
    static IN_HANDLER: Cell<u32> = const { Cell::new(0) };
}

/// Whether a signal handler is running on this thread.
#[inline]
pub(crate) fn in_handler() -> bool {
    IN_HANDLER.with(Cell::get) != 0
}

/// The user's handler of each signal (0: none wrapped).
const SIGNALS: usize = 65;
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];

/// Counts itself in `IN_HANDLER` around the call of `f`.
fn counted(f: impl FnOnce()) {
    IN_HANDLER.with(|c| c.set(c.get() + 1));
    f();
    IN_HANDLER.with(|c| c.set(c.get() - 1));
}

/// The program's handler of `sig`, if one is wrapped.
fn user_handler(sig: c_int) -> Option<usize> {
    let h = HANDLERS.get(sig as usize)?.load(Ordering::Acquire);
    (h != 0).then_some(h)
}

extern "C" fn trampoline_info(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    if let Some(h) = user_handler(sig) {
        // SAFETY: `h` is the SA_SIGINFO handler the program installed for
        // `sig`, called as the kernel would have called it.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute::<usize, _>(h) };
        counted(|| f(sig, info, ctx));
    }
}

extern "C" fn trampoline_plain(sig: c_int) {
    if let Some(h) = user_handler(sig) {
        // SAFETY: `h` is the one-argument handler the program installed
        // for `sig`, called as the kernel would have called it.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute::<usize, _>(h) };
        counted(|| f(sig));
    }
}

/// Whether `handler` is one of ours.
fn is_trampoline(handler: usize) -> bool {
    handler == trampoline_info as *const () as usize
        || handler == trampoline_plain as *const () as usize
}

/// Hooked `sigaction`.
///
/// # Safety
///
/// libc's contract: `act` and `old` null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const SigAction,
    old: *mut SigAction,
) -> c_int {
    let slot = match usize::try_from(sig).ok().and_then(|s| HANDLERS.get(s)) {
        Some(slot) if !act.is_null() || !old.is_null() => slot,
        // SAFETY: the caller's arguments, passed on.
        _ => return unsafe { real::sigaction(sig, act, old) },
    };
    let previous_user = slot.load(Ordering::Acquire);
    let r = if act.is_null() {
        // SAFETY: a query, passed on.
        unsafe { real::sigaction(sig, act, old) }
    } else {
        // SAFETY: a non-null action from the caller.
        let mut wrapped = unsafe { *act };
        let handler = wrapped.sa_sigaction;
        let wrap = handler != libc::SIG_DFL && handler != libc::SIG_IGN && !is_trampoline(handler);
        if wrap {
            slot.store(handler, Ordering::Release);
            wrapped.sa_sigaction = if wrapped.sa_flags & libc::SA_SIGINFO != 0 {
                trampoline_info as *const () as usize
            } else {
                trampoline_plain as *const () as usize
            };
        }
        // SAFETY: the caller's action, its handler wrapped.
        let r = unsafe { real::sigaction(sig, &wrapped, old) };
        if r != 0 && wrap {
            slot.store(previous_user, Ordering::Release);
        }
        r
    };
    if r == 0 && !old.is_null() {
        // SAFETY: the kernel filled `old`.
        let o = unsafe { &mut *old };
        if is_trampoline(o.sa_sigaction) {
            o.sa_sigaction = previous_user;
        }
    }
    r
}

/// Hooked `signal` (glibc's: BSD semantics, `SA_RESTART`), through the
/// hooked `sigaction` so that its handler is wrapped too.
///
/// # Safety
///
/// None beyond libc's.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid; its mask is emptied below.
    let mut act: SigAction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: a valid sigset.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: as above.
    let mut old: SigAction = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}
