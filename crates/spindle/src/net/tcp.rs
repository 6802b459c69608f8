//! TCP: [`TcpListener`] and [`TcpStream`].

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use super::{each_addr, retry, sys, Dir, Owned, Timed};

/// A TCP server socket. `accept` parks the calling fiber until a
/// connection arrives; a listener's wake-up is admitted ahead of queued
/// work (`docs/DESIGN.md`, "The netpoller": accept admission).
///
/// ```
/// spindle::run(|| {
///     let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let client = spindle::spawn(move || spindle::net::TcpStream::connect(addr).unwrap());
///     let (_conn, peer) = listener.accept().unwrap();
///     assert_eq!(peer, client.join().unwrap().local_addr().unwrap());
/// });
/// ```
pub struct TcpListener {
    sock: Owned<std::net::TcpListener>,
}

impl TcpListener {
    /// Binds to `addr` (each resolved address in turn, like std), with
    /// `SO_REUSEADDR` and the system's largest accept backlog
    /// (`net.core.somaxconn`; std uses 128, which drops SYNs from a burst of
    /// clients into seconds of retransmit backoff).
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpListener> {
        each_addr(&addr, |a| {
            let sock = Socket::new(Domain::for_address(*a), Type::STREAM.cloexec(), None)?;
            sock.set_reuse_address(true)?;
            sock.bind(&(*a).into())?;
            sock.listen(listen_backlog())?;
            Ok(std::net::TcpListener::from(sock))
        })
        .and_then(TcpListener::from_std)
    }

    /// Like [`bind`](Self::bind), with `SO_REUSEPORT`: several listeners may
    /// bind the same address, and the kernel spreads new connections over
    /// them by a hash of the peer's address (see
    /// [`Acceptor`](crate::net::Acceptor), which binds one per worker).
    ///
    /// ```
    /// spindle::run(|| {
    ///     let a = spindle::net::TcpListener::bind_reuse_port("127.0.0.1:0").unwrap();
    ///     let b = spindle::net::TcpListener::bind_reuse_port(a.local_addr().unwrap()).unwrap();
    ///     assert_eq!(a.local_addr().unwrap(), b.local_addr().unwrap());
    /// });
    /// ```
    pub fn bind_reuse_port<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpListener> {
        each_addr(&addr, |a| {
            let sock = Socket::new(Domain::for_address(*a), Type::STREAM.cloexec(), None)?;
            sock.set_reuse_address(true)?;
            sock.set_reuse_port(true)?;
            sock.bind(&(*a).into())?;
            sock.listen(listen_backlog())?;
            Ok(std::net::TcpListener::from(sock))
        })
        .and_then(TcpListener::from_std)
    }

    fn from_std(l: std::net::TcpListener) -> io::Result<TcpListener> {
        l.set_nonblocking(true)?;
        Ok(TcpListener {
            sock: Owned::new(l),
        })
    }

    /// Accepts a connection: parks the fiber (or blocks the thread) until
    /// one arrives. Running out of fds returns `EMFILE` here; the pending
    /// connection stays in the kernel's queue for the next call.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let fd = self.sock.fd();
        let (sock, addr) = retry(fd, Dir::Read, || None, true, || accept_nonblocking(fd))?;
        let std_stream: std::net::TcpStream = sock.into();
        Ok((TcpStream::wrap(std_stream), addr))
    }

    /// An endless iterator of accepted connections.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The address this listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().local_addr()
    }

    /// `IP_TTL` for accepted sockets.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.sock.get().set_ttl(ttl)
    }

    /// The pending socket error, if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.sock.get().take_error()
    }

    /// A second handle to the same socket (a new fd).
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        TcpListener::from_std(self.sock.get().try_clone()?)
    }

    /// Gives back the std listener (in blocking mode again).
    pub fn into_std(self) -> io::Result<std::net::TcpListener> {
        let l = self.sock.into_inner();
        l.set_nonblocking(false)?;
        Ok(l)
    }
}

/// `net.core.somaxconn`, read once (4096 if unreadable).
fn listen_backlog() -> i32 {
    static BACKLOG: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *BACKLOG.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096)
    })
}

fn accept_nonblocking(fd: RawFd) -> io::Result<(Socket, SocketAddr)> {
    // SAFETY: zeroed storage is a valid (empty) sockaddr_storage; accept4
    // writes at most `len` bytes into it and the new fd is ours.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let new = libc::accept4(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        );
        if new < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = Socket::from_raw_fd(new);
        let addr = socket_addr_of(&storage, len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "accepted a non-IP peer"))?;
        Ok((sock, addr))
    }
}

/// Reads an IPv4/IPv6 address out of a `sockaddr_storage`.
fn socket_addr_of(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is aligned for every sockaddr type.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("fd", &self.sock.fd())
            .field("addr", &self.local_addr().ok())
            .finish()
    }
}

impl From<std::net::TcpListener> for TcpListener {
    /// Takes over a std listener (switching it to non-blocking mode).
    fn from(l: std::net::TcpListener) -> TcpListener {
        let _ = l.set_nonblocking(true);
        TcpListener {
            sock: Owned::new(l),
        }
    }
}

/// Iterator over [`TcpListener::accept`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;

    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A TCP connection. `Read`/`Write` park the calling fiber while the socket
/// is not ready; they are also implemented on `&TcpStream`, so one fiber
/// can read while another writes.
pub struct TcpStream {
    sock: Timed<std::net::TcpStream>,
}

impl TcpStream {
    fn wrap(s: std::net::TcpStream) -> TcpStream {
        TcpStream {
            sock: Timed::new(s),
        }
    }

    /// Connects to `addr`, trying each resolved address in turn. On a fiber
    /// the connect is non-blocking and parks for writability; a host name
    /// is resolved on the blocking pool.
    pub fn connect<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpStream> {
        each_addr(&addr, |a| connect_addr(a, None))
    }

    /// Like [`connect`](Self::connect), with one deadline over the
    /// resolution and every connect attempt (a resolution already running
    /// when the deadline passes is waited for, then the call fails).
    pub fn connect_timeout<A: ToSocketAddrs + Sync>(
        addr: A,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        let deadline = crate::time::now() + timeout;
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "connection timed out");
        each_addr(&addr, |a| {
            if crate::time::now() >= deadline {
                return Err(timed_out());
            }
            connect_addr(a, Some(deadline)).map_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    timed_out()
                } else {
                    e
                }
            })
        })
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().local_addr()
    }

    /// Shuts down the read, write, or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.sock.get().shutdown(how)
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.sock.get().set_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.sock.get().nodelay()
    }

    /// `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.sock.get().set_ttl(ttl)
    }

    /// A deadline for each read (`None`: wait forever). An expired read
    /// fails with `TimedOut`, never before the timeout has passed; one of
    /// a few seconds or more may pass up to 1 % late (it is measured from
    /// the cheap coarse clock, as the kernel's own socket timeouts count in
    /// scheduler ticks).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.read_timeout.set(t)
    }

    /// A deadline for each write, kept as the read one is
    /// ([`set_read_timeout`](Self::set_read_timeout)).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.write_timeout.set(t)
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.sock.read_timeout.get())
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.sock.write_timeout.get())
    }

    /// The pending socket error, if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.sock.get().take_error()
    }

    /// Waits, under the read timeout, until a read would not wait (data,
    /// EOF or an error is there), without reading. A fiber that is about
    /// to wait long can park here before it allocates its read buffers.
    ///
    /// ```no_run
    /// spindle::run(|| {
    ///     let s = spindle::net::TcpStream::connect("127.0.0.1:8080").unwrap();
    ///     s.wait_readable().unwrap();
    /// });
    /// ```
    pub fn wait_readable(&self) -> io::Result<()> {
        let mut probe = [0u8; 1];
        self.sock
            .wait_readable_stream(|sock| sys::recv(sock.as_raw_fd(), &mut probe, libc::MSG_PEEK))
    }

    /// Reads without consuming (`MSG_PEEK`).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock
            .reading(|sock| sys::recv(sock.as_raw_fd(), buf, libc::MSG_PEEK))
    }

    /// Peeks without waiting: `WouldBlock` if nothing has arrived, `Ok(0)`
    /// if the peer closed its side. For connection pools that must know
    /// whether an idle connection is still clean before they reuse it.
    ///
    /// ```
    /// use std::io::{ErrorKind, Write};
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let (mut s, _) = l.accept().unwrap();
    ///     let mut probe = [0u8; 1];
    ///     assert_eq!(c.try_peek(&mut probe).unwrap_err().kind(), ErrorKind::WouldBlock);
    ///     s.write_all(b"x").unwrap();
    ///     c.wait_readable().unwrap();
    ///     assert_eq!(c.try_peek(&mut probe).unwrap(), 1);
    /// });
    /// ```
    pub fn try_peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv(self.sock.fd(), buf, libc::MSG_PEEK)
    }

    /// Peeks as a poll: `Ready` with what [`peek`](Self::peek) would answer
    /// once bytes, the peer's close or an error are there, else `cx`'s
    /// waker is woken by the netpoller when they come. For a watch on a
    /// connection that another fiber reads (has the client gone while its
    /// request is handled?): while the receive queue is known empty — the
    /// last read was short, or an earlier poll found nothing — a poll costs
    /// no syscall at all.
    ///
    /// ```
    /// use std::io::Write;
    /// use std::task::Poll;
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let (mut s, _) = l.accept().unwrap();
    ///     let mut probe = [0u8; 1];
    ///     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    ///     assert!(c.poll_peek(&mut cx, &mut probe).is_pending());
    ///     s.write_all(b"x").unwrap();
    ///     let n = spindle::block_on(std::future::poll_fn(|cx| c.poll_peek(cx, &mut probe)));
    ///     assert_eq!(n.unwrap(), 1);
    /// });
    /// ```
    pub fn poll_peek(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.sock
            .poll_peek_stream(cx, |sock| sys::recv(sock.as_raw_fd(), buf, libc::MSG_PEEK))
    }

    /// Withdraws `waker`, left registered by a [`poll_peek`](Self::poll_peek)
    /// or [`poll_read_ready`](Self::poll_read_ready) that answered
    /// `Pending`, when its caller stops watching before the wake: the next
    /// edge then goes to the socket's reader alone, instead of being kept
    /// for a watch that is gone (which costs that reader one `recv` more).
    ///
    /// ```
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let waker = std::task::Waker::noop();
    ///     let mut cx = std::task::Context::from_waker(waker);
    ///     assert!(c.poll_peek(&mut cx, &mut [0u8; 1]).is_pending());
    ///     c.forget_read_waker(waker); // the watch is over
    /// });
    /// ```
    pub fn forget_read_waker(&self, waker: &std::task::Waker) {
        self.sock.forget_read_waker(waker);
    }

    /// Reads without waiting: `WouldBlock` when nothing has arrived. With
    /// [`poll_read_ready`](Self::poll_read_ready), for code that drives the
    /// socket from a `Future` (an `AsyncRead` adapter) rather than a fiber.
    ///
    /// ```
    /// use std::io::{ErrorKind, Write};
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let (mut s, _) = l.accept().unwrap();
    ///     let mut buf = [0u8; 8];
    ///     assert_eq!(c.try_read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    ///     s.write_all(b"hi").unwrap();
    ///     spindle::block_on(std::future::poll_fn(|cx| c.poll_read_ready(cx))).unwrap();
    ///     assert_eq!(c.try_read(&mut buf).unwrap(), 2);
    /// });
    /// ```
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock
            .try_reading(|sock| sys::recv(sock.as_raw_fd(), buf, 0))
    }

    /// Writes without waiting: `WouldBlock` when the send buffer is full.
    ///
    /// ```
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     assert_eq!(c.try_write(b"hello").unwrap(), 5);
    /// });
    /// ```
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        sys::send(self.sock.fd(), buf)
    }

    /// [`try_write`](Self::try_write) from several buffers at once.
    ///
    /// ```
    /// use std::io::IoSlice;
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let n = c.try_write_vectored(&[IoSlice::new(b"he"), IoSlice::new(b"llo")]).unwrap();
    ///     assert_eq!(n, 5);
    /// });
    /// ```
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored(self.sock.fd(), bufs)
    }

    /// Polls for read readiness, after a [`try_read`](Self::try_read) that
    /// answered `WouldBlock`: `Ready` when bytes (or the peer's close) may
    /// be there, else `cx`'s waker is woken by the netpoller when they
    /// are. A poll after a non-`WouldBlock` read may be answered `Ready`
    /// for data already taken: read again, at worst one `WouldBlock` more.
    /// See [`try_read`](Self::try_read) for an example.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.sock.poll_ready(Dir::Read, cx)
    }

    /// Polls for write readiness, after a [`try_write`](Self::try_write)
    /// that answered `WouldBlock` (see [`poll_read_ready`](Self::poll_read_ready)).
    ///
    /// ```
    /// use std::io::Read;
    /// spindle::run(|| {
    ///     let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let c = spindle::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    ///     let (mut s, _) = l.accept().unwrap();
    ///     // Write until the socket takes no more...
    ///     let chunk = [0u8; 64 << 10];
    ///     let mut sent = 0;
    ///     while let Ok(n) = c.try_write(&chunk) {
    ///         sent += n;
    ///     }
    ///     // ...then the peer reads it all, and the socket is writable again.
    ///     let peer = spindle::spawn(move || {
    ///         let mut buf = vec![0u8; 64 << 10];
    ///         let mut taken = 0;
    ///         while taken < sent {
    ///             taken += s.read(&mut buf).unwrap();
    ///         }
    ///     });
    ///     spindle::block_on(std::future::poll_fn(|cx| c.poll_write_ready(cx))).unwrap();
    ///     peer.join().unwrap();
    /// });
    /// ```
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.sock.poll_ready(Dir::Write, cx)
    }

    /// A second handle to the same connection (a new fd), with the same
    /// timeouts.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        let s = TcpStream::wrap(self.sock.get().try_clone()?);
        self.sock.copy_timeouts_to(&s.sock)?;
        Ok(s)
    }

    /// Gives back the std stream (in blocking mode again).
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        let s = self.sock.into_inner();
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

fn connect_addr(addr: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(*addr), Type::STREAM.cloexec(), None)?;
    sock.set_nonblocking(true)?;
    match sock.connect(&(*addr).into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            let fd = sock.as_raw_fd();
            let wait = crate::io::wait_fd(fd, crate::poll::slot::WRITE, deadline, false);
            if let Err(e) = wait {
                // Reset the slot before the fd (closed with `sock`) is reused.
                crate::poll::release_fd(fd);
                return Err(e);
            }
            if let Some(e) = sock.take_error()? {
                crate::poll::release_fd(fd);
                return Err(e);
            }
        }
        Err(e) => return Err(e),
    }
    Ok(TcpStream::wrap(sock.into()))
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let s = *self;
        let len = buf.len();
        s.sock
            .reading_stream(len, |sock| sys::recv(sock.as_raw_fd(), buf, 0))
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let s = *self;
        s.sock
            .reading(|sock| sys::recv_vectored(sock.as_raw_fd(), bufs))
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let s = *self;
        s.sock.writing(|sock| sys::send(sock.as_raw_fd(), buf))
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let s = *self;
        s.sock
            .writing(|sock| sys::send_vectored(sock.as_raw_fd(), bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("fd", &self.sock.fd())
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .finish()
    }
}

impl From<std::net::TcpStream> for TcpStream {
    /// Takes over a std stream (switching it to non-blocking mode).
    fn from(s: std::net::TcpStream) -> TcpStream {
        let _ = s.set_nonblocking(true);
        TcpStream::wrap(s)
    }
}

impl From<TcpStream> for OwnedFd {
    fn from(s: TcpStream) -> OwnedFd {
        s.sock.into_inner().into()
    }
}

super::fd_traits!(TcpListener, std::net::TcpListener);

super::fd_traits!(TcpStream, std::net::TcpStream);
