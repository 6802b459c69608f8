//! Sockets that park the fiber, not the thread: TCP, UDP and Unix.
//!
//! Every socket here is non-blocking underneath. An operation is tried
//! first; on `EAGAIN` a fiber parks on the netpoller until the fd is ready
//! (try-then-wait, see `docs/DESIGN.md`), a plain thread blocks in `poll(2)`. So the
//! same handle works from fibers and threads alike and behaves like std's
//! blocking socket on both; `set_read_timeout`/`set_write_timeout` become
//! deadlines for each call (an expired one fails with `TimedOut`).
//!
//! Outbound connects are non-blocking and park for writability; a host
//! name is resolved on the blocking pool while the fiber waits, never by a
//! blocking `getaddrinfo` on a worker. Closing a socket goes through the
//! netpoller, which wakes anyone still waiting on its fd.
//!
//! ```
//! use std::io::{Read, Write};
//! spindle::run(|| {
//!     let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     let server = spindle::spawn(move || {
//!         let (mut conn, _) = listener.accept().unwrap();
//!         let mut buf = [0u8; 5];
//!         conn.read_exact(&mut buf).unwrap();
//!         conn.write_all(&buf).unwrap();
//!     });
//!     let mut client = spindle::net::TcpStream::connect(addr).unwrap();
//!     client.write_all(b"hello").unwrap();
//!     let mut back = [0u8; 5];
//!     client.read_exact(&mut back).unwrap();
//!     assert_eq!(&back, b"hello");
//!     server.join().unwrap();
//! });
//! ```

mod accept;
mod sys;
mod tcp;
mod udp;
mod unix;

pub use accept::{AcceptLoop, AcceptMode, Acceptor};
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixIncoming, UnixListener, UnixStream};

use std::io;
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::poll::slot::{READ, WRITE};

/// `AsRawFd`, `AsFd`, `IntoRawFd` and `FromRawFd` for a socket type that
/// wraps its std twin in `sock: Owned<..>` and has `From<std twin>`.
macro_rules! fd_traits {
    ($ty:ty, $std:ty) => {
        impl std::os::fd::AsRawFd for $ty {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.sock.fd()
            }
        }

        impl std::os::fd::AsFd for $ty {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(self.sock.get())
            }
        }

        impl std::os::fd::IntoRawFd for $ty {
            /// Gives the fd up (still in non-blocking mode), after taking it
            /// out of the netpoller.
            fn into_raw_fd(self) -> std::os::fd::RawFd {
                std::os::fd::IntoRawFd::into_raw_fd(self.sock.into_inner())
            }
        }

        impl std::os::fd::FromRawFd for $ty {
            /// # Safety
            ///
            /// `fd` must be an open socket of this kind owned by the caller.
            unsafe fn from_raw_fd(fd: std::os::fd::RawFd) -> $ty {
                // SAFETY: forwarded from the caller.
                <$ty>::from(unsafe { <$std as std::os::fd::FromRawFd>::from_raw_fd(fd) })
            }
        }
    };
}
pub(crate) use fd_traits;

/// Readiness direction of an operation.
#[derive(Clone, Copy)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// Repeats `op` until it stops answering `WouldBlock`, waiting for `fd`
/// in between (netpoller on a fiber, `poll(2)` on a thread). The deadline
/// is asked for at the first wait only: an op that succeeds at once (most
/// do) costs no clock read.
pub(crate) fn retry<T>(
    fd: RawFd,
    dir: Dir,
    deadline: impl FnOnce() -> Option<Instant>,
    urgent: bool,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut deadline = Some(deadline);
    let mut at = None;
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let d = match dir {
                    Dir::Read => READ,
                    Dir::Write => WRITE,
                };
                if let Some(first) = deadline.take() {
                    at = first();
                }
                crate::io::wait_fd(fd, d, at, urgent)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// A socket whose fd is closed through the netpoller on drop.
pub(crate) struct Owned<S: AsRawFd + IntoRawFd> {
    inner: ManuallyDrop<S>,
}

impl<S: AsRawFd + IntoRawFd> Owned<S> {
    pub(crate) fn new(inner: S) -> Owned<S> {
        Owned {
            inner: ManuallyDrop::new(inner),
        }
    }

    pub(crate) fn get(&self) -> &S {
        &self.inner
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }

    /// Gives the socket up without closing it: its netpoller state is
    /// dropped first, since the fd leaves our hands.
    pub(crate) fn into_inner(mut self) -> S {
        // SAFETY: `self` is forgotten right after, so `inner` is taken once.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        std::mem::forget(self);
        crate::poll::release_fd(inner.as_raw_fd());
        inner
    }
}

impl<S: AsRawFd + IntoRawFd> Drop for Owned<S> {
    fn drop(&mut self) {
        // SAFETY: drop runs once; `inner` is not used after.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        crate::poll::close_fd(inner.into_raw_fd());
    }
}

/// A socket with per-call read and write deadlines: what every stream and
/// datagram type shares. Same method names as [`Owned`] (`fd`, `get`,
/// `into_inner`), plus the try-then-wait operations.
pub(crate) struct Timed<S: AsRawFd + IntoRawFd> {
    sock: Owned<S>,
    pub(crate) read_timeout: Timeout,
    pub(crate) write_timeout: Timeout,
    /// The last stream read was short: the socket's receive queue was
    /// empty then, so the next read waits for an edge first instead of
    /// trying a `recv` that would answer `EAGAIN` (see `reading_stream`).
    drained: std::sync::atomic::AtomicBool,
}

impl<S: AsRawFd + IntoRawFd> Timed<S> {
    pub(crate) fn new(inner: S) -> Timed<S> {
        Timed {
            sock: Owned::new(inner),
            read_timeout: Timeout::default(),
            write_timeout: Timeout::default(),
            drained: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn get(&self) -> &S {
        self.sock.get()
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.sock.fd()
    }

    pub(crate) fn into_inner(self) -> S {
        self.sock.into_inner()
    }

    /// Runs a read-side operation until it stops answering `WouldBlock`,
    /// under the read deadline.
    pub(crate) fn reading<T>(&self, mut op: impl FnMut(&S) -> io::Result<T>) -> io::Result<T> {
        // This op may wait and so take the edge a drained stream read
        // would wait for: that read must try its `recv` first again.
        self.drained.store(false, Ordering::Relaxed);
        retry(
            self.fd(),
            Dir::Read,
            || self.read_timeout.deadline(),
            false,
            || op(self.get()),
        )
    }

    /// A stream read into `len` bytes. A read that returned fewer bytes
    /// than asked emptied the receive queue; any byte arriving after it
    /// raises a new edge (epoll is edge-triggered), and a peer's shutdown
    /// is a sticky `READ_CLOSED`. So the next read can wait for that edge
    /// before its first `recv`: one syscall per message instead of two
    /// (tokio clears readiness on a short read for the same reason).
    pub(crate) fn reading_stream(
        &self,
        len: usize,
        mut op: impl FnMut(&S) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut waited_until = None;
        // Looked at before it is taken: a swap is a locked instruction,
        // and the hint is usually clear here (a wait for readability took
        // it already).
        if len > 0
            && self.drained.load(Ordering::Relaxed)
            && self.drained.swap(false, Ordering::Relaxed)
            && crate::future::can_suspend()
        {
            let deadline = self.read_timeout.deadline();
            waited_until = Some(deadline);
            crate::io::wait_fd(self.fd(), READ, deadline, false)?;
        }
        let deadline = || waited_until.unwrap_or_else(|| self.read_timeout.deadline());
        let n = retry(self.fd(), Dir::Read, deadline, false, || op(self.get()))?;
        if n > 0 && n < len {
            self.drained.store(true, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// Waits until a stream read would not wait, without reading. After a
    /// short read the receive queue was empty, so the next byte raises an
    /// edge: wait for it, no syscall (as `reading_stream` would). Otherwise
    /// `probe` (a one-byte peek) answers at once if something is there, and
    /// its `WouldBlock` parks.
    pub(crate) fn wait_readable_stream(
        &self,
        probe: impl FnMut(&S) -> io::Result<usize>,
    ) -> io::Result<()> {
        if self.drained.load(Ordering::Relaxed)
            && self.drained.swap(false, Ordering::Relaxed)
            && crate::future::can_suspend()
        {
            return crate::io::wait_fd(self.fd(), READ, self.read_timeout.deadline(), false);
        }
        self.reading(probe).map(|_| ())
    }

    /// A peek as a poll, for a watch on a stream that another fiber reads
    /// (see `TcpStream::poll_peek`). When the receive queue is known empty
    /// — the last stream read was short, or this poll's own `peek`
    /// answered `WouldBlock` — it waits for the next edge without a
    /// syscall; taking an edge clears the hint, so a drained read that
    /// follows tries its `recv` instead of waiting for the edge taken here.
    pub(crate) fn poll_peek_stream(
        &self,
        cx: &mut std::task::Context<'_>,
        mut peek: impl FnMut(&S) -> io::Result<usize>,
    ) -> std::task::Poll<io::Result<usize>> {
        use std::task::Poll;
        loop {
            if !self.drained.load(Ordering::Relaxed) {
                match peek(self.get()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    done => return Poll::Ready(done),
                }
            }
            match self.poll_ready(Dir::Read, cx) {
                // Empty now, and the next byte raises an edge that is
                // banked for whoever reads next, or delivered to `cx`.
                Poll::Pending => {
                    self.drained.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => self.drained.store(false, Ordering::Relaxed),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One read-side attempt that never waits (`WouldBlock` instead), for
    /// a poll-based caller that waits through [`poll_ready`](Self::poll_ready).
    /// A stream read's "drained" hint is dropped: this caller keeps its
    /// own account of readiness.
    pub(crate) fn try_reading<T>(&self, op: impl FnOnce(&S) -> io::Result<T>) -> io::Result<T> {
        self.drained.store(false, Ordering::Relaxed);
        op(self.get())
    }

    /// Readiness of this socket in `dir`, as a poll: `Ready` when an edge
    /// is banked (or the read side closed), else the waker is kept until
    /// the next edge. Follows a `WouldBlock`, as every wait here does.
    pub(crate) fn poll_ready(
        &self,
        dir: Dir,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let d = match dir {
            Dir::Read => READ,
            Dir::Write => WRITE,
        };
        crate::io::poll_fd(self.fd(), d, cx)
    }

    /// Withdraws a waker left by a pending [`poll_ready`](Self::poll_ready)
    /// for reading (see `TcpStream::forget_read_waker`).
    pub(crate) fn forget_read_waker(&self, waker: &std::task::Waker) {
        crate::io::forget_waker(self.fd(), READ, waker);
    }

    /// Same for a write-side operation, under the write deadline.
    pub(crate) fn writing<T>(&self, mut op: impl FnMut(&S) -> io::Result<T>) -> io::Result<T> {
        retry(
            self.fd(),
            Dir::Write,
            || self.write_timeout.deadline(),
            false,
            || op(self.get()),
        )
    }

    /// Gives `other` this socket's timeouts (for `try_clone`).
    pub(crate) fn copy_timeouts_to(&self, other: &Timed<S>) -> io::Result<()> {
        other.read_timeout.set(self.read_timeout.get())?;
        other.write_timeout.set(self.write_timeout.get())
    }
}

/// A per-call timeout (std's `set_read_timeout` shape), kept in nanoseconds
/// with 0 for none.
#[derive(Default)]
pub(crate) struct Timeout(AtomicU64);

impl Timeout {
    pub(crate) fn set(&self, t: Option<Duration>) -> io::Result<()> {
        match t {
            Some(d) if d.is_zero() => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            )),
            Some(d) => {
                self.0
                    .store(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
                Ok(())
            }
            None => {
                self.0.store(0, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// The deadline for a call starting now. A socket timeout is a bound
    /// on a wait, as the kernel's `SO_RCVTIMEO` is (which counts in
    /// scheduler ticks): one of a few seconds and up is measured from the
    /// coarse clock's bound, so it ends at most 1 % late and never early,
    /// without a precise clock read per wait (see `sched::time_source`).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.get().and_then(crate::sched::worker::deadline_after)
    }
}

/// Resolves a host name (or parses an address) into socket addresses, as
/// `ToSocketAddrs` does; on a fiber a lookup that may block (`getaddrinfo`)
/// runs on the blocking pool while only the fiber waits. The error of a
/// failed lookup is the resolver's.
///
/// ```
/// spindle::run(|| {
///     let addrs = spindle::net::lookup_host(("127.0.0.1", 80)).unwrap();
///     assert_eq!(addrs[0].port(), 80);
/// });
/// ```
pub fn lookup_host<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<Vec<SocketAddr>> {
    resolve(&addr)
}

/// Resolves `addr`; on a fiber a lookup that may block runs on the blocking
/// pool while the fiber waits.
pub(crate) fn resolve<A: ToSocketAddrs + Sync>(addr: &A) -> io::Result<Vec<SocketAddr>> {
    crate::blocking::run_scoped(|| addr.to_socket_addrs().map(|it| it.collect::<Vec<_>>()))
}

/// Runs `f` on each resolved address until one succeeds, like std.
pub(crate) fn each_addr<A: ToSocketAddrs + Sync, T>(
    addr: &A,
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let addrs = resolve(addr)?;
    let mut last = None;
    for a in &addrs {
        match f(a) {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}
