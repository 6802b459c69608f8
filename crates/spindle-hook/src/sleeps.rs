//! Sleeps: `nanosleep` (std's `thread::sleep`), `clock_nanosleep`,
//! `usleep`, `sleep` — a fiber sleeps on its worker's timers, on the
//! runtime's clock (paused time included).
//!
//! A sleep that an enclosing `spindle::time::timeout` or a cancellation
//! cuts short returns early *as if it had slept* (0, nothing left): the only
//! failure `nanosleep` has for it is `EINTR`, and every caller, std's
//! `thread::sleep` first, answers `EINTR` by sleeping the rest again — a
//! busy loop. The fiber unwinds at its next Spindle wait instead.

use std::time::Duration;

use libc::{c_int, c_uint, timespec};

use crate::real;
use crate::wait::{self, changed};

/// A valid relative `timespec` as a duration.
fn duration_of(ts: &timespec) -> Option<Duration> {
    (ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec))
        .then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Sleeps the fiber; an early end is not reported (see the module docs).
fn sleep_fiber(call: &'static str, d: Duration) {
    let _ = wait::sleep(call, d);
}

/// Hooked `nanosleep`.
///
/// # Safety
///
/// libc's contract: `req` valid, `rem` null or valid.
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if !changed() || req.is_null() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: a non-null timespec from the caller.
    let Some(d) = duration_of(unsafe { &*req }) else {
        return wait::fail(libc::EINVAL);
    };
    sleep_fiber("hooked nanosleep", d);
    0
}

/// Hooked `clock_nanosleep` (returns the error number, as libc's does).
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let wall = matches!(
        clock,
        libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME
    );
    if !changed() || req.is_null() || !wall {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: a non-null timespec from the caller.
    let req = unsafe { &*req };
    if req.tv_sec < 0 || !(0..1_000_000_000).contains(&req.tv_nsec) {
        return libc::EINVAL;
    }
    let d = if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(clock, &mut now) };
        let at = Duration::new(req.tv_sec as u64, req.tv_nsec as u32);
        let now = Duration::new(now.tv_sec.max(0) as u64, now.tv_nsec as u32);
        at.saturating_sub(now)
    } else {
        Duration::new(req.tv_sec as u64, req.tv_nsec as u32)
    };
    sleep_fiber("hooked clock_nanosleep", d);
    0
}

/// Hooked `usleep`.
///
/// # Safety
///
/// None beyond libc's.
#[no_mangle]
pub unsafe extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    if !changed() {
        // SAFETY: passed on.
        return unsafe { real::usleep(us) };
    }
    sleep_fiber("hooked usleep", Duration::from_micros(us as u64));
    0
}

/// Hooked `sleep` (returns the seconds not slept: none).
///
/// # Safety
///
/// None beyond libc's.
#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !changed() {
        // SAFETY: passed on.
        return unsafe { real::sleep(secs) };
    }
    sleep_fiber("hooked sleep", Duration::from_secs(secs as u64));
    0
}
