//! UDP: [`UdpSocket`].

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::{each_addr, Timed};

/// A UDP socket whose sends and receives park the calling fiber.
///
/// ```
/// spindle::run(|| {
///     let a = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
///     let b = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
///     let b_addr = b.local_addr().unwrap();
///     let rx = spindle::spawn(move || {
///         let mut buf = [0u8; 16];
///         let (n, _) = b.recv_from(&mut buf).unwrap();
///         buf[..n].to_vec()
///     });
///     a.send_to(b"datagram", b_addr).unwrap();
///     assert_eq!(rx.join().unwrap(), b"datagram");
/// });
/// ```
pub struct UdpSocket {
    sock: Timed<std::net::UdpSocket>,
}

impl UdpSocket {
    fn wrap(s: std::net::UdpSocket) -> io::Result<UdpSocket> {
        s.set_nonblocking(true)?;
        Ok(UdpSocket {
            sock: Timed::new(s),
        })
    }

    /// Binds to `addr`.
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<UdpSocket> {
        each_addr(&addr, |a| std::net::UdpSocket::bind(a)).and_then(UdpSocket::wrap)
    }

    /// Sets the default peer for `send`/`recv`.
    pub fn connect<A: ToSocketAddrs + Sync>(&self, addr: A) -> io::Result<()> {
        each_addr(&addr, |a| self.sock.get().connect(a))
    }

    /// Sends to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.sock.writing(|sock| sock.send(buf))
    }

    /// Receives from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.reading(|sock| sock.recv(buf))
    }

    /// Sends a datagram to `addr` (resolved first).
    pub fn send_to<A: ToSocketAddrs + Sync>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let addrs = super::resolve(&addr)?;
        let target = *addrs.first().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to")
        })?;
        self.sock.writing(|sock| sock.send_to(buf, target))
    }

    /// Receives a datagram and its sender.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.sock.reading(|sock| sock.recv_from(buf))
    }

    /// Receives a datagram without consuming it.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.sock.reading(|sock| sock.peek_from(buf))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().local_addr()
    }

    /// The connected peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().peer_addr()
    }

    /// A deadline for each receive, kept as
    /// [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)
    /// describes.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.read_timeout.set(t)
    }

    /// A deadline for each send, kept as
    /// [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)
    /// describes.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.write_timeout.set(t)
    }

    /// `SO_BROADCAST`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.sock.get().set_broadcast(on)
    }

    /// A second handle to the same socket (a new fd).
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        UdpSocket::wrap(self.sock.get().try_clone()?)
    }
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("fd", &self.sock.fd())
            .field("local", &self.local_addr().ok())
            .finish()
    }
}

impl From<std::net::UdpSocket> for UdpSocket {
    fn from(s: std::net::UdpSocket) -> UdpSocket {
        let _ = s.set_nonblocking(true);
        UdpSocket {
            sock: Timed::new(s),
        }
    }
}

super::fd_traits!(UdpSocket, std::net::UdpSocket);
