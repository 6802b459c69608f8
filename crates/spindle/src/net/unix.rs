//! Unix domain sockets: [`UnixListener`] and [`UnixStream`].

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::{retry, sys, Dir, Owned, Timed};

/// A Unix-socket server; `accept` parks the calling fiber.
///
/// ```
/// use std::io::{Read, Write};
/// spindle::run(|| {
///     let path = std::env::temp_dir().join(format!("spindle-unix-doc-{}", std::process::id()));
///     let _ = std::fs::remove_file(&path);
///     let listener = spindle::net::UnixListener::bind(&path).unwrap();
///     let p = path.clone();
///     let client = spindle::spawn(move || {
///         let mut s = spindle::net::UnixStream::connect(&p).unwrap();
///         s.write_all(b"hi").unwrap();
///     });
///     let (mut conn, _) = listener.accept().unwrap();
///     let mut buf = [0u8; 2];
///     conn.read_exact(&mut buf).unwrap();
///     assert_eq!(&buf, b"hi");
///     client.join().unwrap();
///     std::fs::remove_file(&path).unwrap();
/// });
/// ```
pub struct UnixListener {
    sock: Owned<std::os::unix::net::UnixListener>,
}

impl UnixListener {
    /// Binds to a filesystem path.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let l = std::os::unix::net::UnixListener::bind(path)?;
        l.set_nonblocking(true)?;
        Ok(UnixListener {
            sock: Owned::new(l),
        })
    }

    /// Accepts a connection, parking the fiber until one arrives.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, addr) = retry(
            self.sock.fd(),
            Dir::Read,
            || None,
            true,
            || self.sock.get().accept(),
        )?;
        Ok((UnixStream::wrap(s)?, addr))
    }

    /// An endless iterator of accepted connections.
    pub fn incoming(&self) -> UnixIncoming<'_> {
        UnixIncoming { listener: self }
    }

    /// The address this listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().local_addr()
    }
}

impl std::fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixListener")
            .field("fd", &self.sock.fd())
            .finish()
    }
}

impl From<std::os::unix::net::UnixListener> for UnixListener {
    fn from(l: std::os::unix::net::UnixListener) -> UnixListener {
        let _ = l.set_nonblocking(true);
        UnixListener {
            sock: Owned::new(l),
        }
    }
}

/// Iterator over [`UnixListener::accept`].
#[derive(Debug)]
pub struct UnixIncoming<'a> {
    listener: &'a UnixListener,
}

impl Iterator for UnixIncoming<'_> {
    type Item = io::Result<UnixStream>;

    fn next(&mut self) -> Option<io::Result<UnixStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A Unix-socket connection; `Read`/`Write` (also on `&UnixStream`) park
/// the calling fiber while the socket is not ready.
pub struct UnixStream {
    sock: Timed<std::os::unix::net::UnixStream>,
}

impl UnixStream {
    fn wrap(s: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        s.set_nonblocking(true)?;
        Ok(UnixStream {
            sock: Timed::new(s),
        })
    }

    /// Connects to the socket at `path`.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        UnixStream::wrap(std::os::unix::net::UnixStream::connect(path)?)
    }

    /// A connected pair.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut a, mut b) = spindle::net::UnixStream::pair().unwrap();
    /// a.write_all(b"x").unwrap();
    /// let mut buf = [0u8; 1];
    /// b.read_exact(&mut buf).unwrap();
    /// ```
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::wrap(a)?, UnixStream::wrap(b)?))
    }

    /// Shuts down the read, write, or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.sock.get().shutdown(how)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get().peer_addr()
    }

    /// A deadline for each read, kept as
    /// [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)
    /// describes.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.read_timeout.set(t)
    }

    /// A deadline for each write, kept as
    /// [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)
    /// describes.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.write_timeout.set(t)
    }

    /// A second handle to the same connection (a new fd).
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        UnixStream::wrap(self.sock.get().try_clone()?)
    }
}

impl Read for &UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let s = *self;
        let len = buf.len();
        s.sock
            .reading_stream(len, |sock| sys::recv(sock.as_raw_fd(), buf, 0))
    }
}

impl Write for &UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let s = *self;
        s.sock.writing(|sock| sys::send(sock.as_raw_fd(), buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixStream")
            .field("fd", &self.sock.fd())
            .finish()
    }
}

impl From<std::os::unix::net::UnixStream> for UnixStream {
    fn from(s: std::os::unix::net::UnixStream) -> UnixStream {
        let _ = s.set_nonblocking(true);
        UnixStream {
            sock: Timed::new(s),
        }
    }
}

super::fd_traits!(UnixStream, std::os::unix::net::UnixStream);

super::fd_traits!(UnixListener, std::os::unix::net::UnixListener);
