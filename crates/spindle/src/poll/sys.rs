//! Thin, safe wrappers over the syscalls the netpoller uses: `epoll` and
//! `eventfd`. Nothing here knows about fibers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// An epoll instance.
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the returned fd is owned by us.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Registers `fd` for `events` (edge-triggered flags included by the
    /// caller), tagging its events with `data`.
    pub(crate) fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: `ev` is a valid epoll_event for the call's duration.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(drop)
    }

    pub(crate) fn delete(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above; errors (already closed, never added) are fine.
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms` (-1: forever) and fills `events`.
    pub(crate) fn wait(&self, events: &mut Vec<libc::epoll_event>, timeout_ms: i32) -> usize {
        events.clear();
        let cap = events.capacity().max(1) as libc::c_int;
        // A plain `epoll_pwait` with no signal mask (`epoll_wait` itself,
        // and the one of the two aarch64 has), not libc's function, which
        // brackets it as a thread-cancellation point with two atomic
        // updates of no use here (see `net::sys` for the same on sockets).
        // SAFETY: the kernel writes at most `cap` events into the vector's
        // spare capacity; we then set the length to what it reported. A
        // null mask leaves the thread's signal mask alone.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait,
                self.fd.as_raw_fd() as libc::c_long,
                events.as_mut_ptr(),
                cap as libc::c_long,
                timeout_ms as libc::c_long,
                std::ptr::null::<libc::sigset_t>(),
                0 as libc::c_long,
            )
        };
        if n > 0 {
            // SAFETY: the first `n` entries were initialised by the kernel.
            unsafe { events.set_len(n as usize) };
            n as usize
        } else {
            0 // EINTR or timeout: the caller's loop looks again
        }
    }
}

/// An eventfd used to wake a worker blocked in `epoll_wait`.
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the returned fd is owned by us.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        Ok(EventFd {
            // SAFETY: fresh descriptor.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn drain(&self) {
        let mut buf: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when already empty.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) };
    }
}
