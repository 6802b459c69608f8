//! Readiness waits: `poll`, `ppoll`, `select`, `pselect`, `epoll_wait`,
//! `epoll_pwait` — how C libraries (libpq, hiredis) and nested event loops
//! (the private tokio runtime inside the `postgres` crate) wait.
//!
//! Each is answered by the real call with a zero timeout first; only when
//! nothing is ready and the caller would block does the fiber wait, and
//! after every wake the real call with a zero timeout computes the answer
//! again — so what the caller sees (`revents`, the fd sets, the events) is
//! always the kernel's own, and a spurious wake only costs one more try.
//!
//! What the fiber waits on:
//! * one fd in one direction: that fd, on the netpoller;
//! * an epoll instance (`epoll_wait`): the instance's own fd, which is
//!   readable while it has events — a nested event loop parks its fiber;
//! * anything else (several fds, both directions): a private epoll instance
//!   made for this call with the caller's fds in it, waited on the same way;
//! * no fds at all: a sleep.
//!
//! The calls with a signal mask (`ppoll`, `pselect`, `epoll_pwait` with a
//! non-null mask) pass through unchanged: a fiber cannot swap its worker's
//! mask while others run there.

use std::time::{Duration, Instant};

use libc::{c_int, pollfd};

use crate::real;
use crate::wait::{self, changed, set_errno, Dir};

/// What a timed wait ended with, besides readiness.
enum Ended {
    /// Woken: ask the kernel again.
    Again,
    /// The call's own timeout passed: answer with a last zero-timeout try.
    TimedOut,
    /// Failed with this errno.
    Failed(c_int),
}

fn ended(r: Result<(), c_int>) -> Ended {
    match r {
        Ok(()) => Ended::Again,
        Err(libc::EAGAIN) => Ended::TimedOut,
        Err(e) => Ended::Failed(e),
    }
}

/// A millisecond timeout (negative: none) as a deadline.
fn ms_deadline(ms: c_int) -> Option<Instant> {
    (ms >= 0).then(|| wait::deadline_in(Duration::from_millis(ms as u64)))?
}

/// A `timespec` timeout (null: none) as a deadline; `Err(EINVAL)` if bad.
fn ts_deadline(ts: *const libc::timespec) -> Result<Option<Instant>, c_int> {
    if ts.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-null timespec from the caller.
    let ts = unsafe { &*ts };
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(wait::deadline_in(Duration::new(
        ts.tv_sec as u64,
        ts.tv_nsec as u32,
    )))
}

/// Whether `deadline` is already here (a zero timeout: never wait).
fn due(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| d <= spindle::time::now())
}

/// Parks until one of `fds` may be ready or `deadline` passes.
fn wait_pollfds(call: &'static str, fds: &[pollfd], deadline: Option<Instant>) -> Ended {
    let live: Vec<&pollfd> = fds.iter().filter(|p| p.fd >= 0).collect();
    const READS: i16 = libc::POLLIN | libc::POLLRDNORM;
    const WRITES: i16 = libc::POLLOUT | libc::POLLWRNORM;
    match live.as_slice() {
        [] => {
            // Nothing to wait on: a sleep (forever without a deadline).
            let d = match deadline {
                Some(d) => d.saturating_duration_since(spindle::time::now()),
                None => Duration::from_secs(u32::MAX as u64),
            };
            match wait::sleep(call, d) {
                Ok(()) => Ended::TimedOut,
                Err(e) => Ended::Failed(e),
            }
        }
        [one] if one.events & !READS == 0 && one.events != 0 => {
            ended(wait::fd(call, one.fd, Dir::Read, deadline))
        }
        [one] if one.events & !WRITES == 0 && one.events != 0 => {
            ended(wait::fd(call, one.fd, Dir::Write, deadline))
        }
        _ => wait_on_private_epoll(call, &live, deadline),
    }
}

/// Waits on a private epoll instance holding `fds` (level-triggered, the
/// events each asked for).
fn wait_on_private_epoll(call: &'static str, fds: &[&pollfd], deadline: Option<Instant>) -> Ended {
    // SAFETY: creates a new fd, owned here.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Ended::Failed(wait::errno());
    }
    for p in fds {
        let mut ev = libc::epoll_event {
            events: p.events as u16 as u32,
            u64: 0,
        };
        // SAFETY: a valid event; a failure (an fd epoll refuses, such as a
        // regular file, always ready and so already answered) is skipped.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, p.fd, &mut ev) };
    }
    let r = ended(wait::fd(call, ep, Dir::Read, deadline));
    spindle::io::release(ep);
    // SAFETY: our own fd, closed once.
    unsafe { real::close(ep) };
    r
}

/// The shared body of the poll family, for a fiber.
///
/// # Safety
///
/// `fds` points at `n` valid pollfds.
unsafe fn poll_on_fiber(
    call: &'static str,
    fds: *mut pollfd,
    n: libc::nfds_t,
    deadline: Option<Instant>,
) -> c_int {
    loop {
        // SAFETY: the caller's array; no wait.
        let r = unsafe { real::poll(fds, n, 0) };
        if r != 0 || due(deadline) {
            return r;
        }
        let slice: &[pollfd] = if n == 0 {
            &[]
        } else {
            // SAFETY: the caller's array of `n` pollfds.
            unsafe { std::slice::from_raw_parts(fds, n as usize) }
        };
        match wait_pollfds(call, slice, deadline) {
            Ended::Again => {}
            // SAFETY: as above.
            Ended::TimedOut => return unsafe { real::poll(fds, n, 0) },
            Ended::Failed(e) => return wait::fail(e),
        }
    }
}

/// Hooked `poll`.
///
/// # Safety
///
/// libc's contract: `fds` points at `n` valid pollfds.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    if !changed() || timeout == 0 {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::poll(fds, n, timeout) };
    }
    // SAFETY: the caller's arguments.
    unsafe { poll_on_fiber("hooked poll", fds, n, ms_deadline(timeout)) }
}

/// Hooked `__poll_chk` (`poll` under `_FORTIFY_SOURCE`).
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    fdslen: usize,
) -> c_int {
    let fits = (n as usize).saturating_mul(std::mem::size_of::<pollfd>()) <= fdslen;
    if !fits || !changed() {
        // SAFETY: libc's own check (it aborts on an overflow).
        return unsafe { real::__poll_chk(fds, n, timeout, fdslen) };
    }
    // SAFETY: checked above.
    unsafe { poll(fds, n, timeout) }
}

/// Hooked `ppoll`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !changed() || !mask.is_null() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::ppoll(fds, n, timeout, mask) };
    }
    match ts_deadline(timeout) {
        Err(e) => wait::fail(e),
        // SAFETY: the caller's arguments.
        Ok(d) => unsafe { poll_on_fiber("hooked ppoll", fds, n, d) },
    }
}

/// `select`'s sets as pollfds, for the wait only (the answer comes from
/// the real `select`).
///
/// # Safety
///
/// Each set is null or valid.
unsafe fn sets_to_pollfds(
    n: c_int,
    r: *const libc::fd_set,
    w: *const libc::fd_set,
    e: *const libc::fd_set,
) -> Vec<pollfd> {
    let mut out = Vec::new();
    let has = |set: *const libc::fd_set, fd: c_int| {
        // SAFETY: a non-null set from the caller.
        !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
    };
    for fd in 0..n.clamp(0, libc::FD_SETSIZE as c_int) {
        let mut events = 0;
        if has(r, fd) {
            events |= libc::POLLIN;
        }
        if has(w, fd) {
            events |= libc::POLLOUT;
        }
        if has(e, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            out.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    out
}

/// The shared body of `select`/`pselect` for a fiber: tries with a zero
/// timeout on copies of the sets, waits, and copies the kernel's answer
/// back.
///
/// # Safety
///
/// Each set is null or valid.
unsafe fn select_on_fiber(
    call: &'static str,
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    deadline: Option<Instant>,
) -> c_int {
    // SAFETY: each set is null or valid (the caller).
    let copy = |set: *mut libc::fd_set| (!set.is_null()).then(|| unsafe { *set });
    let (r0, w0, e0) = (copy(r), copy(w), copy(e));
    loop {
        let (mut r1, mut w1, mut e1) = (r0, w0, e0);
        let ptr = |s: &mut Option<libc::fd_set>| {
            s.as_mut()
                .map_or(std::ptr::null_mut(), |s| s as *mut libc::fd_set)
        };
        let mut zero = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        // SAFETY: our copies of the caller's sets, and a zero timeout.
        let got = unsafe { real::select(n, ptr(&mut r1), ptr(&mut w1), ptr(&mut e1), &mut zero) };
        if got != 0 || due(deadline) {
            if got >= 0 {
                // SAFETY: writing the kernel's answer back into the
                // caller's (non-null) sets.
                unsafe {
                    for (dst, src) in [(r, r1), (w, w1), (e, e1)] {
                        if let (false, Some(s)) = (dst.is_null(), src) {
                            *dst = s;
                        }
                    }
                }
            }
            return got;
        }
        // SAFETY: the caller's sets.
        let fds = unsafe { sets_to_pollfds(n, r, w, e) };
        match wait_pollfds(call, &fds, deadline) {
            Ended::Again | Ended::TimedOut => {}
            Ended::Failed(err) => return wait::fail(err),
        }
    }
}

/// Hooked `select`. Like Linux's, it leaves the time not slept in
/// `timeout`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: a non-null timeval from the caller.
    let tv = (!timeout.is_null()).then(|| unsafe { *timeout });
    let zero = tv.is_some_and(|t| t.tv_sec == 0 && t.tv_usec == 0);
    if !changed() || zero {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::select(n, r, w, e, timeout) };
    }
    let deadline = match tv {
        None => None,
        Some(t) if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) => {
            return wait::fail(libc::EINVAL)
        }
        Some(t) => wait::deadline_in(Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)),
    };
    // SAFETY: the caller's arguments.
    let got = unsafe { select_on_fiber("hooked select", n, r, w, e, deadline) };
    if let (Some(d), false) = (deadline, timeout.is_null()) {
        let left = d.saturating_duration_since(spindle::time::now());
        // SAFETY: the caller's timeval.
        unsafe {
            (*timeout).tv_sec = left.as_secs() as libc::time_t;
            (*timeout).tv_usec = left.subsec_micros() as libc::suseconds_t;
        }
    }
    got
}

/// Hooked `pselect`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !changed() || !mask.is_null() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::pselect(n, r, w, e, timeout, mask) };
    }
    match ts_deadline(timeout) {
        Err(err) => wait::fail(err),
        // SAFETY: the caller's arguments.
        Ok(d) => unsafe { select_on_fiber("hooked pselect", n, r, w, e, d) },
    }
}

/// Hooked `epoll_wait`: a nested event loop parks its fiber on the epoll
/// instance's own readiness.
///
/// # Safety
///
/// libc's contract: `events` has room for `max` events.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if !changed() || timeout == 0 {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::epoll_wait(epfd, events, max, timeout) };
    }
    let deadline = ms_deadline(timeout);
    loop {
        // SAFETY: the caller's arguments, without waiting.
        let got = unsafe { real::epoll_wait(epfd, events, max, 0) };
        if got != 0 || due(deadline) {
            return got;
        }
        match ended(wait::fd("hooked epoll_wait", epfd, Dir::Read, deadline)) {
            Ended::Again => {}
            // SAFETY: as above.
            Ended::TimedOut => return unsafe { real::epoll_wait(epfd, events, max, 0) },
            Ended::Failed(e) => {
                set_errno(e);
                return -1;
            }
        }
    }
}

/// Hooked `epoll_pwait`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if !mask.is_null() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::epoll_pwait(epfd, events, max, timeout, mask) };
    }
    // SAFETY: the caller's arguments.
    unsafe { epoll_wait(epfd, events, max, timeout) }
}
