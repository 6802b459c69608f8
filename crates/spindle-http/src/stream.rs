//! [`Stream`]: the byte stream under an HTTP connection — plain TCP or TLS
//! over TCP — readable and writable through a shared reference.
//!
//! # Why `&Stream` reads and writes
//!
//! A connection's reader (the request body, which the handler may hold
//! and read while its streamed response is written) and its writer (the
//! response) can be busy at the same time. A plain `TcpStream` allows that
//! already: `&TcpStream` is `Read` and `Write`. A TLS session is one state
//! machine, so [`TlsStream`] splits it by hand:
//!
//! - the socket is read and written *outside* the session lock, so a fiber
//!   parked waiting for ciphertext never blocks a writer, and the reverse;
//! - the rustls session is locked (a plain mutex, never held across a
//!   park) only to feed it ciphertext, take plaintext out, or put plaintext
//!   in and take records out;
//! - a reading lock and a writing lock (fiber-aware, held across parks)
//!   serialise readers among themselves and writers among themselves, so
//!   records reach the socket in the order the session sealed them.
//!
//! The handshake runs before the split, on the fiber that owns the
//! connection ([`Handshaken::new`]), under the caller's read timeout:
//! a peer that stalls mid-handshake, or speaks plain HTTP to a TLS port,
//! fails that one connection.

use std::io::{self, Read, Write};
use std::sync::Mutex as SessionLock;
use std::time::Duration;

use spindle::net::TcpStream;
use spindle::sync::Mutex;

/// Plain TCP or TLS over TCP.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Plain(_) => "Stream::Plain",
            Stream::Tls(_) => "Stream::Tls",
        })
    }
}

impl Stream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(t)
    }

    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_write_timeout(t)
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match *self {
            Stream::Plain(s) => (&*s).read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Stream {
    /// Writes all of `head` and then all of `body`: over plain TCP with
    /// vectored writes, so the two leave in as few segments as one
    /// buffer would (two `send`s put the head in a packet of its own,
    /// which cost more than copying a 64 KiB body behind it); over TLS
    /// one after the other, the session making records of both anyway.
    pub(crate) fn write_all_two(&self, head: &[u8], body: &[u8]) -> io::Result<()> {
        let Stream::Plain(tcp) = self else {
            let mut s = self;
            s.write_all(head)?;
            return s.write_all(body);
        };
        let (mut head, mut body) = (head, body);
        while !head.is_empty() {
            let n = match (&*tcp).write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(body)])
            {
                Ok(n) => n,
                // As `write_all` does: a signal is no error.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let from_head = n.min(head.len());
            head = &head[from_head..];
            body = &body[n - from_head..];
        }
        (&*tcp).write_all(body)
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match *self {
            Stream::Plain(s) => (&*s).write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How many ciphertext bytes one socket read takes: a full TLS record.
const RECORD_BYTES: usize = 16 * 1024 + 256;

/// A TLS session whose handshake is done, before it is put to use: as
/// the split HTTP/1.1 stream, or whole for HTTP/2 (chosen by ALPN).
pub(crate) struct Handshaken {
    pub(crate) tcp: TcpStream,
    pub(crate) session: rustls::Connection,
    /// Ciphertext read past the handshake.
    pending: Pending,
    out: Vec<u8>,
}

impl Handshaken {
    /// Completes the handshake of `session` over `tcp` (reads wait up to
    /// `tcp`'s read timeout each).
    pub(crate) fn new(
        tcp: TcpStream,
        session: impl Into<rustls::Connection>,
    ) -> io::Result<Handshaken> {
        let mut session = session.into();
        let mut pending = Pending::default();
        let mut out = Vec::new();
        loop {
            // Send whatever the session has to say (flights, alerts).
            while session.wants_write() {
                session.write_tls(&mut out)?;
            }
            if !out.is_empty() {
                (&tcp).write_all(&out)?;
                out.clear();
            }
            if !session.is_handshaking() {
                break;
            }
            let n = fill(&tcp, &mut pending)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection during the TLS handshake",
                ));
            }
            if let Err(e) = feed(&mut session, &mut pending) {
                // Tell the peer why (an alert), then fail this connection.
                while session.wants_write() {
                    if session.write_tls(&mut out).is_err() {
                        break;
                    }
                }
                let _ = (&tcp).write_all(&out);
                return Err(e);
            }
        }
        Ok(Handshaken {
            tcp,
            session,
            pending,
            out,
        })
    }

    /// Whether the peers agreed on HTTP/2 (ALPN `h2`).
    pub(crate) fn is_h2(&self) -> bool {
        self.session.alpn_protocol() == Some(b"h2")
    }

    /// The split stream HTTP/1.1 reads and writes.
    pub(crate) fn into_stream(self) -> TlsStream {
        TlsStream {
            tcp: self.tcp,
            session: SessionLock::new(self.session),
            reading: Mutex::new(self.pending),
            writing: Mutex::new(self.out),
        }
    }

    /// The socket, the session and the ciphertext read past the
    /// handshake, for a driver that owns them whole.
    pub(crate) fn into_parts(self) -> (TcpStream, rustls::Connection, bytes::Bytes) {
        let early = bytes::Bytes::copy_from_slice(&self.pending.bytes[self.pending.start..]);
        (self.tcp, self.session, early)
    }
}

/// A TLS session over a TCP stream, split so that one reader and one
/// writer can proceed at once (see the module comment).
pub(crate) struct TlsStream {
    tcp: TcpStream,
    session: SessionLock<rustls::Connection>,
    /// Ciphertext read from the socket but not yet taken by the session.
    reading: Mutex<Pending>,
    /// Records sealed by the session, reused between writes.
    writing: Mutex<Vec<u8>>,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    start: usize,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsStream {
    fn lock_session(&self) -> std::sync::MutexGuard<'_, rustls::Connection> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut pending = self.reading.lock();
        loop {
            {
                let mut session = self.lock_session();
                // Ciphertext left over from an earlier socket read first.
                if pending.start < pending.bytes.len() {
                    feed(&mut session, &mut pending)?;
                }
                match session.reader().read(buf) {
                    Ok(n) => return Ok(n), // 0: the peer's close_notify
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if session.wants_write() {
                    // A key update or similar to answer: done below.
                    drop(session);
                    self.flush_records()?;
                }
            }
            if pending.start < pending.bytes.len() {
                continue; // the session made room: feed the rest
            }
            if fill(&self.tcp, &mut pending)? == 0 {
                // Closed without close_notify: end of stream all the same
                // for HTTP, whose framing says where a message ends.
                return Ok(0);
            }
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut records = self.writing.lock();
        let n = {
            let mut session = self.lock_session();
            let n = session.writer().write(buf)?;
            while session.wants_write() {
                session.write_tls(&mut *records)?;
            }
            n
        };
        let sent = (&self.tcp).write_all(&records);
        records.clear();
        sent.map(|_| n)
    }

    fn flush_records(&self) -> io::Result<()> {
        self.write(&[]).map(|_| ())
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        // A polite close_notify, best effort: the socket may be gone.
        let session = self.session.get_mut().unwrap_or_else(|e| e.into_inner());
        session.send_close_notify();
        let mut out = Vec::new();
        while session.wants_write() {
            if session.write_tls(&mut out).is_err() {
                break;
            }
        }
        let _ = self.tcp.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = (&self.tcp).write(&out);
    }
}

/// Reads one socket's worth of ciphertext into `pending`.
fn fill(tcp: &TcpStream, pending: &mut Pending) -> io::Result<usize> {
    if pending.start == pending.bytes.len() {
        pending.bytes.clear();
        pending.start = 0;
    }
    let len = pending.bytes.len();
    pending.bytes.resize(len + RECORD_BYTES, 0);
    let r = (&*tcp).read(&mut pending.bytes[len..]);
    let n = *r.as_ref().unwrap_or(&0);
    pending.bytes.truncate(len + n);
    r
}

/// Gives the session as much of `pending` as it takes, processing it.
fn feed(session: &mut rustls::Connection, pending: &mut Pending) -> io::Result<()> {
    while pending.start < pending.bytes.len() {
        let mut rest = &pending.bytes[pending.start..];
        let taken = match session.read_tls(&mut rest) {
            Ok(n) => n,
            // The plaintext buffer is full: the reader must drain it first.
            Err(e) if e.kind() == io::ErrorKind::Other => 0,
            Err(e) => return Err(e),
        };
        pending.start += taken;
        session.process_new_packets().map_err(tls_error)?;
        if taken == 0 {
            break;
        }
    }
    Ok(())
}
