//! Waiting on any file descriptor: for integrating other libraries'
//! non-blocking sockets with Spindle (the one wait function for any fd),
//! and for calls that enter Spindle from foreign frames ([`foreign_call`],
//! [`release`]: what `spindle-hook` is built on).
//!
//! [`wait_readable`] / [`wait_writable`] park the calling fiber until the fd
//! is ready (or block a plain thread in `poll(2)`); [`readable`] /
//! [`writable`] are the same readiness as futures, for code that must not
//! switch fibers. The fd must be non-blocking and the wait must follow an
//! operation that returned `EAGAIN` (readiness is edge-triggered):
//!
//! ```
//! use std::io::{Read, Write};
//! use std::os::fd::AsRawFd;
//! spindle::run(|| {
//!     let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
//!     b.set_nonblocking(true).unwrap();
//!     let writer = spindle::spawn(move || a.write_all(b"ping").unwrap());
//!     let mut buf = [0u8; 4];
//!     let mut b = b;
//!     loop {
//!         match b.read(&mut buf) {
//!             Ok(n) => { assert_eq!(&buf[..n], b"ping"); break; }
//!             Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
//!                 spindle::io::wait_readable(b.as_raw_fd(), None).unwrap();
//!             }
//!             Err(e) => panic!("{e}"),
//!         }
//!     }
//!     writer.join().unwrap();
//! });
//! ```

use std::future::Future;
use std::io;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::poll::slot::{self, IoWaiter, READ, WRITE};
use crate::sched::park::{self, Wake};
use crate::sched::worker;

/// Parks the calling fiber until `fd` is readable, or `timeout` passes
/// (`TimedOut`). On a plain thread it blocks in `poll(2)`.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<()> {
    wait_fd_as(
        fd,
        READ,
        timeout.map(|t| crate::time::now() + t),
        false,
        Owner::Foreign,
    )
}

/// Parks the calling fiber until `fd` is writable, or `timeout` passes.
pub fn wait_writable(fd: RawFd, timeout: Option<Duration>) -> io::Result<()> {
    wait_fd_as(
        fd,
        WRITE,
        timeout.map(|t| crate::time::now() + t),
        false,
        Owner::Foreign,
    )
}

/// [`wait_readable`] for an fd whose every close Spindle hears of first
/// (through [`close`] or [`release`]): it is registered with the netpoller
/// once, not re-added on every wait — one `epoll_ctl` fewer per wait. An fd
/// closed by other means under this wait's feet could leave its number's
/// registration stale, and a later wait on a reused number would never
/// wake: use [`wait_readable`] unless every close is reported.
///
/// ```
/// use std::io::Read;
/// use std::os::fd::AsRawFd;
/// spindle::run(|| {
///     let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
///     a.set_nonblocking(true).unwrap();
///     let err = spindle::io::wait_readable_reported(a.as_raw_fd(), Some(std::time::Duration::from_millis(1)));
///     assert_eq!(err.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
///     spindle::io::close(a.into()); // reported
///     drop(b);
/// });
/// ```
pub fn wait_readable_reported(fd: RawFd, timeout: Option<Duration>) -> io::Result<()> {
    wait_fd_as(
        fd,
        READ,
        timeout.map(|t| crate::time::now() + t),
        false,
        Owner::Spindle,
    )
}

/// [`wait_writable`] for an fd whose every close Spindle hears of first
/// (see [`wait_readable_reported`]).
pub fn wait_writable_reported(fd: RawFd, timeout: Option<Duration>) -> io::Result<()> {
    wait_fd_as(
        fd,
        WRITE,
        timeout.map(|t| crate::time::now() + t),
        false,
        Owner::Spindle,
    )
}

/// Closes `fd` through the netpoller: every fiber waiting on it wakes with
/// an error, and its readiness state is reset before the number can be
/// reused. Fds that were waited on with this module may also be closed by
/// other code; a later wait on a reused number registers it afresh.
pub fn close(fd: OwnedFd) {
    crate::poll::close_fd(fd.into_raw_fd());
}

/// Takes `fd` out of the netpoller without closing it: every fiber waiting
/// on it wakes with an error, and its readiness state is reset. For code
/// that closes fds by other means (an interposed `close`, a C library's
/// own): call it just before the fd is closed, so that no registration
/// outlives its fd and a reused number starts clean. Cheap when nothing
/// ever waited on `fd`.
///
/// ```
/// use std::os::fd::AsRawFd;
/// spindle::run(|| {
///     let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
///     a.set_nonblocking(true).unwrap();
///     let fd = a.as_raw_fd();
///     let r = spindle::time::timeout(std::time::Duration::from_millis(1), || {
///         spindle::io::wait_readable(fd, None)
///     });
///     assert!(r.is_err());
///     spindle::io::release(fd);
///     drop(a); // closed by std: the netpoller no longer knows this number
/// });
/// ```
pub fn release(fd: RawFd) {
    crate::poll::release_fd_if_known(fd);
}

/// Runs `f` as the body of a call entered through frames that cannot
/// unwind — a C library calling back into Rust, or an `extern "C"`
/// function such as an interposed libc entry point — and names the call
/// `name` in dumps (`"in hooked recv: waiting for fd 7 to be readable"`).
///
/// While the calling fiber is suspended inside `f`, a runtime stop does not
/// force-unwind it (the unwind would cross those frames and abort the
/// process): its stack is leaked instead, and stderr says so. `f` itself
/// must not unwind into those frames either: waits that end by unwinding
/// (`time::sleep` under a `timeout` or a cancellation) belong inside a
/// `catch_unwind`, and I/O waits report cancellation as an error
/// ([`crate::is_cancelled`]). Off a fiber `f` just runs.
///
/// ```
/// extern "C" fn callback_from_c(fd: i32) -> i32 {
///     spindle::io::foreign_call("callback_from_c", || {
///         match spindle::io::wait_readable(fd, Some(std::time::Duration::from_millis(5))) {
///             Ok(()) => 0,
///             Err(_) => -1,
///         }
///     })
/// }
/// spindle::run(|| {
///     let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
///     use std::os::fd::AsRawFd;
///     assert_eq!(callback_from_c(a.as_raw_fd()), -1); // nothing to read: timed out
/// });
/// ```
pub fn foreign_call<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    struct Leave(Option<&'static str>);
    impl Drop for Leave {
        fn drop(&mut self) {
            crate::fiber::leave_foreign_call(self.0);
        }
    }
    let _leave = Leave(crate::fiber::enter_foreign_call(name));
    f()
}

pub(crate) fn timed_out(fd: RawFd) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("spindle: wait on fd {fd} timed out"),
    )
}

fn closed(fd: RawFd) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("spindle: fd {fd} was closed while a fiber waited on it"),
    )
}

/// Whether Spindle owns an fd (closes it through the netpoller) or not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Spindle,
    Foreign,
}

/// The one wait for Spindle's own sockets: park the fiber on the netpoller
/// (or `poll(2)` a thread) until `fd` is ready in `dir`. `urgent` asks for
/// accept admission.
pub(crate) fn wait_fd(
    fd: RawFd,
    dir: u8,
    deadline: Option<Instant>,
    urgent: bool,
) -> io::Result<()> {
    wait_fd_as(fd, dir, deadline, urgent, Owner::Spindle)
}

/// The poll form of [`wait_fd`] for Spindle's own sockets: `Ready` at once
/// when an edge is banked, else `cx`'s waker is registered (once, however
/// often it polls) and woken by the next edge or the fd's close.
pub(crate) fn poll_fd(fd: RawFd, dir: u8, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    let Some(slot) = slot::slot(fd) else {
        return Poll::Ready(Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("spindle: fd {fd} is past the netpoller's table"),
        )));
    };
    let registered = worker::with_current(|w| match w {
        Some(w) => w.sched.poller.register(fd, slot),
        None => crate::poll::background().poller.register(fd, slot),
    });
    if let Err(e) = registered {
        return Poll::Ready(Err(e));
    }
    let mut w = slot.lock();
    if w.take_bit(dir) {
        return Poll::Ready(Ok(()));
    }
    w.set_waker(dir, cx.waker());
    Poll::Pending
}

/// Withdraws `waker` from `fd`'s waiters in `dir`: a poll that answered
/// `Pending` and whose caller stopped watching, so the next edge is not
/// banked for nobody (a banked bit costs the next reader a syscall).
pub(crate) fn forget_waker(fd: RawFd, dir: u8, waker: &Waker) {
    if let Some(slot) = slot::slot(fd) {
        slot.lock().remove_waker(dir, waker);
    }
}

fn wait_fd_as(
    fd: RawFd,
    dir: u8,
    deadline: Option<Instant>,
    urgent: bool,
    owner: Owner,
) -> io::Result<()> {
    if !worker::can_park() {
        return poll_thread(fd, dir, deadline);
    }
    let Some(slot) = slot::slot(fd) else {
        return poll_thread(fd, dir, deadline);
    };
    let registered = worker::with_current(|w| {
        let poller = &w.expect("on a fiber, so on a worker").sched.poller;
        match owner {
            Owner::Spindle => poller.register(fd, slot),
            Owner::Foreign => poller.register_foreign(fd, slot),
        }
    });
    match registered {
        Ok(()) => {}
        // epoll cannot wait on regular files: they are always ready.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(()),
        Err(e) => return Err(e),
    }
    let why = park::wait(
        park::WaitKind::Fd {
            fd,
            write: dir == WRITE,
        },
        deadline,
        |token| {
            let mut w = slot.lock();
            if w.take_bit(dir) {
                return false;
            }
            w.push(
                dir,
                IoWaiter::Fiber {
                    token: token.clone(),
                    urgent,
                },
            );
            true
        },
        |token| slot.lock().remove_token(dir, token),
    );
    match why {
        Wake::Ready => Ok(()),
        Wake::TimedOut | Wake::Elapsed => Err(timed_out(fd)),
        Wake::Closed => Err(closed(fd)),
        Wake::Cancelled => {
            // Yield first: a loop that ignores the error (an accept loop that
            // logs and goes on) must still give its worker back, so that a
            // shutdown can unwind it.
            crate::sched::park::yield_now();
            Err(park::cancelled_io_error())
        }
    }
}

/// A plain thread's wait: `poll(2)` on one fd.
fn poll_thread(fd: RawFd, dir: u8, deadline: Option<Instant>) -> io::Result<()> {
    let events = if dir == READ {
        libc::POLLIN
    } else {
        libc::POLLOUT
    };
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out(fd));
                }
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc > 0 {
            if pfd.revents & libc::POLLNVAL != 0 {
                return Err(io::Error::from_raw_os_error(libc::EBADF));
            }
            return Ok(());
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        // rc == 0: timed out (or a spurious return): the loop checks.
    }
}

/// A future that is ready when `fd` is readable (see [`readable`]).
#[derive(Debug)]
pub struct Readiness {
    fd: RawFd,
    dir: u8,
    waker: Option<Waker>,
}

/// Readiness of `fd` for reading, as a future: for code that must not
/// switch fibers (a wasmtime host call, say). Woken by the same netpoller as
/// [`wait_readable`]. Like it, await it only after an `EAGAIN`.
pub fn readable(fd: RawFd) -> Readiness {
    Readiness {
        fd,
        dir: READ,
        waker: None,
    }
}

/// Readiness of `fd` for writing, as a future (see [`readable`]).
pub fn writable(fd: RawFd) -> Readiness {
    Readiness {
        fd,
        dir: WRITE,
        waker: None,
    }
}

impl Future for Readiness {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(slot) = slot::slot(self.fd) else {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("spindle: fd {} is past the netpoller's table", self.fd),
            )));
        };
        let registered = worker::with_current(|w| match w {
            Some(w) => w.sched.poller.register_foreign(self.fd, slot),
            None => crate::poll::background()
                .poller
                .register_foreign(self.fd, slot),
        });
        match registered {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Poll::Ready(Ok(())),
            Err(e) => return Poll::Ready(Err(e)),
        }
        let mut w = slot.lock();
        if w.take_bit(self.dir) {
            drop(w);
            self.waker = None;
            return Poll::Ready(Ok(()));
        }
        w.set_waker(self.dir, cx.waker());
        drop(w);
        self.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        if let (Some(waker), Some(slot)) = (self.waker.take(), slot::slot(self.fd)) {
            slot.lock().remove_waker(self.dir, &waker);
        }
    }
}
