//! When a call is changed, and the one way a changed call waits.
//!
//! A call is changed only when the hook is installed, in this process (not
//! a child after `fork`), and made by a fiber that may suspend
//! (`spindle::can_suspend`: not a plain thread, not the runtime's own loops
//! or blocking pool, not inside a `block_on` poll, not a fiber being
//! unwound by a runtime stop), outside any signal handler (`signals`).
//! That check is an atomic load and thread-local reads: no lock, no
//! allocation.
//!
//! A changed call waits through Spindle's public API — `io::wait_readable`,
//! `io::wait_writable`, `time::sleep` — inside `io::foreign_call`, so the
//! wait is named in dumps ("in hooked recv: waiting for fd 7 to be
//! readable") and a runtime stop leaks the fiber instead of unwinding it
//! through the C caller. How a wait ends becomes an `errno`:
//!
//! | the wait ended by | the call fails with |
//! |---|---|
//! | the socket's own `SO_RCVTIMEO`/`SO_SNDTIMEO`, or the call's timeout | `EAGAIN` (as the kernel's), or the call's own timeout result |
//! | an enclosing `spindle::time::timeout` | `ETIMEDOUT` |
//! | cancellation or runtime shutdown | `ECANCELED` |
//! | the fd closed through the hook by another fiber or thread | `EBADF` |

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libc::c_int;

/// `install` succeeded, and this is not a child after `fork`.
pub(crate) static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether this call is to be changed: see the module docs.
#[inline]
pub(crate) fn changed() -> bool {
    INSTALLED.load(Ordering::Relaxed) && spindle::can_suspend() && !crate::signals::in_handler()
}

/// A direction to wait in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// Parks the calling fiber until `fd` is ready in `dir`, or `deadline`
/// (on the runtime's clock) passes. `Err` holds the `errno` to fail with.
pub(crate) fn fd(
    call: &'static str,
    fd: c_int,
    dir: Dir,
    deadline: Option<Instant>,
) -> Result<(), c_int> {
    let timeout = match deadline {
        None => None,
        Some(d) => {
            let left = d.saturating_duration_since(spindle::time::now());
            if left.is_zero() {
                return Err(libc::EAGAIN);
            }
            Some(left)
        }
    };
    let r = spindle::io::foreign_call(call, || {
        // A socket the hook made is closed through the hook (which tells
        // the netpoller first), and any stale state of its number was
        // dropped when it was made: it may stay registered between waits.
        let reported = crate::fdtable::made_here(fd);
        catch_unwind(AssertUnwindSafe(|| match (dir, reported) {
            (Dir::Read, true) => spindle::io::wait_readable_reported(fd, timeout),
            (Dir::Read, false) => spindle::io::wait_readable(fd, timeout),
            (Dir::Write, true) => spindle::io::wait_writable_reported(fd, timeout),
            (Dir::Write, false) => spindle::io::wait_writable(fd, timeout),
        }))
    });
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(errno_of(&e, deadline)),
        Err(payload) => Err(crate::report::caught_panic(call, payload)),
    }
}

/// The `errno` a failed Spindle wait becomes (see the module docs).
fn errno_of(e: &io::Error, deadline: Option<Instant>) -> c_int {
    if spindle::is_cancelled(e) {
        return libc::ECANCELED;
    }
    match e.kind() {
        io::ErrorKind::TimedOut => {
            if deadline.is_some_and(|d| spindle::time::now() >= d) {
                libc::EAGAIN
            } else {
                libc::ETIMEDOUT
            }
        }
        io::ErrorKind::ConnectionAborted => libc::EBADF,
        _ => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// Sleeps the calling fiber for `d` on the runtime's clock. A sleep cut
/// short by an enclosing `timeout` (`Err(ETIMEDOUT)`) or by cancellation
/// (`Err(ECANCELED)`) returns early instead of unwinding: the fiber unwinds
/// at its next Spindle wait.
pub(crate) fn sleep(call: &'static str, d: Duration) -> Result<(), c_int> {
    let r = spindle::io::foreign_call(call, || {
        catch_unwind(AssertUnwindSafe(|| spindle::time::sleep(d)))
    });
    match r {
        Ok(()) => Ok(()),
        Err(p) if p.is::<spindle::time::Elapsed>() => Err(libc::ETIMEDOUT),
        Err(p) if p.is::<spindle::Cancelled>() => Err(libc::ECANCELED),
        Err(p) => Err(crate::report::caught_panic(call, p)),
    }
}

/// A deadline `d` from now on the runtime's clock (none if it overflows).
pub(crate) fn deadline_in(d: Duration) -> Option<Instant> {
    spindle::time::now().checked_add(d)
}

/// The calling thread's `errno`.
#[inline]
pub(crate) fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno location, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
#[inline]
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e }
}

/// Fails a call returning `-1` with `e`.
pub(crate) fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}
