//! The calls that make, copy, re-mode and close fds: they keep the
//! netpoller's registrations and the hook's fd table true, on every thread,
//! and otherwise behave exactly as libc's.
//!
//! * `close`, `dup2`, `dup3`: the number being closed is taken out of the
//!   netpoller first (`spindle::io::release`: its waiters wake with
//!   `EBADF`, its banked readiness is dropped), so no registration outlives
//!   its fd and a reused number starts clean.
//! * `socket`, `socketpair`, `dup`, `fcntl(F_DUPFD…)`, `fcntl(F_SETFL)`,
//!   `ioctl(FIONBIO)`: recorded in the fd table (see `fdtable`).
//!
//! `fcntl` and `ioctl` are variadic in C; their third argument, when there
//! is one, is an `int` or a pointer, which the Linux C calling conventions
//! (x86-64 and AArch64) pass exactly as a fixed word argument.

use libc::{c_int, c_ulong};

use crate::fdtable;
use crate::real;
use crate::wait::INSTALLED;

/// Takes `fd` out of the netpoller before its number is closed or reused.
fn release(fd: c_int) {
    // The netpoller's slot takes a lock: not from inside a signal handler.
    if INSTALLED.load(std::sync::atomic::Ordering::Relaxed) && !crate::signals::in_handler() {
        spindle::io::release(fd);
    }
    fdtable::forget(fd);
}

/// A new fd under a number whose last file may have been closed behind the
/// hook (libc's internals): the netpoller drops what it kept of that one.
pub(crate) fn made(fd: c_int) {
    if INSTALLED.load(std::sync::atomic::Ordering::Relaxed) && !crate::signals::in_handler() {
        spindle::io::release(fd);
    }
}

/// Hooked `close`.
///
/// # Safety
///
/// libc's contract: the caller gives up `fd`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    release(fd);
    // SAFETY: passed on.
    unsafe { real::close(fd) }
}

/// Hooked `dup`.
///
/// # Safety
///
/// None beyond libc's.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: passed on.
    let new = unsafe { real::dup(fd) };
    if new >= 0 {
        fdtable::duplicated(fd, new);
    }
    new
}

/// Hooked `dup2`.
///
/// # Safety
///
/// libc's contract: the caller gives up whatever `new` was.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        release(new);
    }
    // SAFETY: passed on.
    let r = unsafe { real::dup2(old, new) };
    if r >= 0 && old != new {
        fdtable::duplicated(old, new);
    }
    r
}

/// Hooked `dup3`.
///
/// # Safety
///
/// libc's contract: the caller gives up whatever `new` was.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        release(new);
    }
    // SAFETY: passed on.
    let r = unsafe { real::dup3(old, new, flags) };
    if r >= 0 {
        fdtable::duplicated(old, new);
    }
    r
}

/// Hooked `fcntl`.
///
/// # Safety
///
/// libc's contract: `arg` is what `cmd` expects.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    match cmd {
        libc::F_SETFL if r >= 0 => fdtable::mode_set(fd, arg as c_int & libc::O_NONBLOCK != 0),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC if r >= 0 => fdtable::duplicated(fd, r),
        _ => {}
    }
    r
}

/// Hooked `ioctl`.
///
/// # Safety
///
/// libc's contract: `arg` is what `req` expects.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::ioctl(fd, req, arg) };
    if req == libc::FIONBIO && r >= 0 && arg != 0 {
        // SAFETY: FIONBIO's argument is a pointer to an int, which the
        // kernel just read.
        let on = unsafe { *(arg as *const c_int) } != 0;
        fdtable::mode_set(fd, on);
    }
    r
}

/// Hooked `socket`.
///
/// # Safety
///
/// None beyond libc's.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: passed on.
    let fd = unsafe { real::socket(domain, ty, protocol) };
    if fd >= 0 {
        made(fd);
        fdtable::created_socket(fd, ty & libc::SOCK_NONBLOCK != 0);
    }
    fd
}

/// Hooked `socketpair`.
///
/// # Safety
///
/// libc's contract: `sv` has room for two fds.
#[no_mangle]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::socketpair(domain, ty, protocol, sv) };
    if r == 0 {
        // SAFETY: the kernel filled both.
        let (a, b) = unsafe { (*sv, *sv.add(1)) };
        made(a);
        made(b);
        fdtable::created_socket(a, ty & libc::SOCK_NONBLOCK != 0);
        fdtable::created_socket(b, ty & libc::SOCK_NONBLOCK != 0);
    }
    r
}
