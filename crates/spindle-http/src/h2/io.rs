//! [`Io`]: a connection's bytes as tokio's `AsyncRead`/`AsyncWrite`, the
//! traits the `h2` crate drives — plain TCP or TLS, woken by Spindle's
//! netpoller.
//!
//! Each poll tries the socket without waiting (`TcpStream::try_read`,
//! `try_write`) and, on `WouldBlock`, registers the task's waker for the
//! socket's next edge (`poll_read_ready`, `poll_write_ready`). TLS is the
//! same loop around a rustls session owned by the adapter alone: the
//! connection's one task drives it, so unlike the HTTP/1.1 stream it needs
//! no split and no locks.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use spindle::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Plain TCP or TLS, for one HTTP/2 connection.
pub(crate) struct Io {
    tcp: TcpStream,
    /// Bytes read before the connection was known to be HTTP/2 (the
    /// client preface an HTTP/1.1 read took): read first.
    prefix: Bytes,
    tls: Option<Box<Tls>>,
}

/// A TLS session after its handshake.
struct Tls {
    session: rustls::Connection,
    /// Ciphertext read from the socket during the handshake and not yet
    /// taken by the session: fed before the socket is read again.
    early: Bytes,
    /// `close_notify` queued already.
    closing: bool,
}

impl Io {
    /// Plain TCP, with `prefix` already read off it.
    pub(crate) fn plain(tcp: TcpStream, prefix: Bytes) -> Io {
        Io {
            tcp,
            prefix,
            tls: None,
        }
    }

    /// TLS over `tcp` once the handshake is done; `early` is ciphertext
    /// read past the handshake.
    pub(crate) fn tls(tcp: TcpStream, session: rustls::Connection, early: Bytes) -> Io {
        Io {
            tcp,
            prefix: Bytes::new(),
            tls: Some(Box::new(Tls {
                session,
                early,
                closing: false,
            })),
        }
    }
}

/// The socket as `Read`/`Write` that never wait, for rustls; what was read
/// during the handshake comes first.
struct NoWait<'a> {
    tcp: &'a TcpStream,
    early: &'a mut Bytes,
}

impl Read for NoWait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.early.is_empty() {
            let n = self.early.len().min(buf.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.advance(n);
            return Ok(n);
        }
        self.tcp.try_read(buf)
    }
}

impl Write for NoWait<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.tcp.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn poll_plain_read(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    loop {
        match tcp.try_read(buf.initialize_unfilled()) {
            Ok(n) => {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(tcp.poll_read_ready(cx))?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

fn poll_plain_write(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    write: impl Fn(&TcpStream) -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        match write(tcp) {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(tcp.poll_write_ready(cx))?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

impl Tls {
    /// Sends the records the session has sealed; `Pending` while the
    /// socket takes no more.
    fn poll_flush(&mut self, tcp: &TcpStream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.session.wants_write() {
            let mut sock = NoWait {
                tcp,
                early: &mut Bytes::new(),
            };
            match self.session.write_tls(&mut sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(tcp.poll_write_ready(cx))?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_read(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match self.session.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n); // 0: the peer's close_notify
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify: the end all the same, as
                // HTTP/2's own framing says where every message ends.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Something to answer (a key update): best effort, here.
            if self.session.wants_write() {
                if let Poll::Ready(Err(e)) = self.poll_flush(tcp, cx) {
                    return Poll::Ready(Err(e));
                }
            }
            let mut sock = NoWait {
                tcp,
                early: &mut self.early,
            };
            match self.session.read_tls(&mut sock) {
                Ok(_) => {} // 0: end of stream, which the reader reports next
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(tcp.poll_read_ready(cx))?;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Err(e) = self.session.process_new_packets() {
                // The alert that says why, best effort.
                let _ = self.poll_flush(tcp, cx);
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
        }
    }

    fn poll_write(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            // The session takes what its buffer limit allows.
            let n = self.session.writer().write(buf)?;
            let flushed = self.poll_flush(tcp, cx)?;
            if n > 0 || buf.is_empty() {
                return Poll::Ready(Ok(n));
            }
            // Full and the socket takes nothing: wait for it.
            ready!(flushed);
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.prefix.is_empty() {
            let n = me.prefix.len().min(buf.remaining());
            buf.put_slice(&me.prefix[..n]);
            me.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        match &mut me.tls {
            None => poll_plain_read(&me.tcp, cx, buf),
            Some(tls) => tls.poll_read(&me.tcp, cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match &mut me.tls {
            None => poll_plain_write(&me.tcp, cx, |tcp| tcp.try_write(buf)),
            Some(tls) => tls.poll_write(&me.tcp, cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match &mut me.tls {
            None => poll_plain_write(&me.tcp, cx, |tcp| tcp.try_write_vectored(bufs)),
            Some(tls) => {
                // The session seals record by record: the first non-empty
                // buffer is as good as all of them.
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &**b);
                tls.poll_write(&me.tcp, cx, first)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_none()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match &mut me.tls {
            None => Poll::Ready(Ok(())),
            Some(tls) => tls.poll_flush(&me.tcp, cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(tls) = &mut me.tls {
            if !tls.closing {
                tls.closing = true;
                tls.session.send_close_notify();
            }
            ready!(tls.poll_flush(&me.tcp, cx))?;
        }
        // The peer may be gone already: nothing to report then.
        let _ = me.tcp.shutdown(std::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }
}
