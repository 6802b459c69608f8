//! One exchange on a connection: the request head (and a body in hand,
//! or one streamed by a fiber of its own) written, the response head read
//! and parsed (`h1::response`), and the response body read as the caller
//! reads it, by the decoder the server reads request bodies with
//! (`h1::decode`). Every read waits as the exchange's [`Deadline`] allows.
//! A connection whose response was read to its end, with nothing after
//! it, goes back to the pool.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Response, Uri};

use super::pool::{GiveBack, Origin};
use crate::body::{write_chunked, Body, ChunkedError};
use crate::error::Error;
use crate::h1::decode::{Decoder, Source};
use crate::h1::encode;
use crate::h1::framing::BodyFraming;
use crate::h1::response;
use crate::read_buf::ReadBuf;
use crate::stream::Stream;

/// What an exchange takes from its client's settings.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    /// Longest wait for any one read or write.
    pub(super) io_timeout: Duration,
    /// Deadline of a whole exchange, if any.
    pub(super) request_timeout: Option<Duration>,
    /// Largest response body taken.
    pub(super) max_response_bytes: u64,
}

impl Limits {
    /// The deadline of an exchange starting now.
    pub(super) fn deadline(&self) -> Deadline {
        Deadline {
            at: self.request_timeout.map(|t| Instant::now() + t),
            per_read: self.io_timeout,
        }
    }
}

/// Writes the request and reads the response head; the body is read
/// from the connection as the caller reads it (a [`ResponseReader`]),
/// and the connection goes back to the pool once it is read to its end.
/// `ConnectionAborted`: the request could not be written whole; a
/// [`NoResponse`] error: it was, and no response byte came back (a
/// stale pooled connection).
pub(super) fn exchange(
    limits: &Limits,
    stream: Stream,
    give_back: GiveBack,
    head: &[u8],
    body: &[u8],
    method: &Method,
) -> io::Result<Response<Body>> {
    let deadline = limits.deadline();
    send(limits, &stream, head, body)?;
    read_response(limits, Conn::Owned(stream), give_back, method, deadline)
}

/// Writes a request head and body; `ConnectionAborted` if the
/// connection was closed under them.
pub(super) fn send(limits: &Limits, conn: &Stream, head: &[u8], body: &[u8]) -> io::Result<()> {
    conn.set_write_timeout(Some(
        limits
            .request_timeout
            .map_or(limits.io_timeout, |t| t.min(limits.io_timeout)),
    ))?;
    // One vectored write: the head does not leave in a packet of its own.
    let sent = conn.write_all_two(head, body);
    sent.map_err(|e| match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
            io::Error::new(io::ErrorKind::ConnectionAborted, e)
        }
        _ => e,
    })
}

/// Reads the response head from `stream`; its body is read as the
/// caller reads it (a [`ResponseReader`]). The loop that waits is kept
/// apart from what is done with the head (`respond`, out of line):
/// every stack page a fiber touches stays resident while it waits, and
/// a request parked on a slow upstream waits here.
pub(super) fn read_response(
    limits: &Limits,
    stream: Conn,
    give_back: GiveBack,
    method: &Method,
    deadline: Deadline,
) -> io::Result<Response<Body>> {
    let conn: &Stream = &stream;
    // Read in place (no stack array, see above).
    let mut buf = ReadBuf::new();
    let mut drained = true;
    loop {
        match fill(conn, &mut buf, &mut drained, deadline) {
            Ok(0) if buf.is_empty() => return Err(no_response()),
            Err(e) if buf.is_empty() && e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(no_response())
            }
            Ok(0) => return Err(truncated_head()),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        // The head's syntax and framing rules are in `h1::response`,
        // which shares `h1::framing` with the server.
        match parse_head(&mut buf, method) {
            Ok(Some(head)) => {
                let body = BodyStart {
                    stream,
                    buf,
                    drained,
                    deadline,
                };
                return respond(limits, head, body, give_back);
            }
            Ok(None) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The final response head at the front of `buf`, consumed from it
/// (1xx heads before it are skipped); `None` until all of it is there.
#[inline(never)]
fn parse_head(buf: &mut ReadBuf, method: &Method) -> io::Result<Option<response::ResponseHead>> {
    loop {
        let head = match response::parse_response(buf.bytes(), *method == Method::HEAD) {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(None),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        };
        buf.consume(head.len);
        // 100 Continue and friends: skip, read the real response.
        if !head.status.is_informational() {
            return Ok(Some(head));
        }
    }
}

/// The response for a parsed `head`; what followed it in the buffer is
/// the start of its body.
#[inline(never)]
fn respond(
    limits: &Limits,
    head: response::ResponseHead,
    body: BodyStart,
    give_back: GiveBack,
) -> io::Result<Response<Body>> {
    let BodyStart {
        stream,
        buf,
        drained,
        deadline,
    } = body;
    let keep_alive = head.keep_alive;
    let mut builder = Response::builder()
        .status(head.status)
        .version(head.version);
    if let Some(headers) = builder.headers_mut() {
        *headers = head.headers;
    }
    let decoder = match head.framing {
        BodyFraming::Empty => {
            // Nothing to read: the connection is free now, unless bytes
            // came that nobody asked for.
            if let (true, true, Conn::Owned(stream)) = (keep_alive, buf.is_empty(), stream) {
                give_back.put(stream);
            }
            return builder
                .body(Body::empty())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
        }
        BodyFraming::Length(n) if n > limits.max_response_bytes => return Err(too_large()),
        framing => Decoder::new(framing, limits.max_response_bytes, "response"),
    };
    let reader = ResponseReader {
        conn: Some(stream),
        buf,
        drained,
        decoder,
        deadline,
        give_back: keep_alive.then_some(give_back),
    };
    builder
        .body(Body::trailing(Box::new(reader)))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(super) fn encode_head(
    method: &Method,
    uri: &Uri,
    headers: &http::HeaderMap,
    origin: &Origin,
    framing: encode::RequestFraming,
) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let (https, host, port) = origin;
    let mut authority = if host.contains(':') {
        format!("[{host}]") // IPv6
    } else {
        host.clone()
    };
    if *port != if *https { 443 } else { 80 } {
        authority.push_str(&format!(":{port}"));
    }
    encode::request_head(
        &mut out,
        method,
        target,
        authority.as_bytes(),
        headers,
        framing,
    );
    Ok(out)
}

/// On its own fiber: sends `body` on `conn` in chunks as it is read, then
/// the last chunk. If the body fails, the request is cut off (our sending
/// side shut down without the last chunk), so the server cannot take a
/// part for the whole; if the connection fails, the reader of the
/// response hears about it.
pub(super) fn pump_chunked(body: &mut Body, conn: &Stream) {
    let trailers = body.take_trailers_fn();
    if let Err(ChunkedError::Read(_)) = write_chunked(body, trailers, conn) {
        let _ = conn.tcp().shutdown(std::net::Shutdown::Write);
    }
}

/// A response body's connection: its own (it may go back to the pool), or
/// shared with the fiber still sending a streamed request body.
pub(super) enum Conn {
    Owned(Stream),
    Shared(Arc<Stream>),
}

impl std::ops::Deref for Conn {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        match self {
            Conn::Owned(s) => s,
            Conn::Shared(s) => s,
        }
    }
}

/// The server closed (or reset) the connection before any byte of a
/// response: the request may or may not have been processed.
#[derive(Debug)]
struct NoResponse;

impl std::fmt::Display for NoResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no response")
    }
}

impl std::error::Error for NoResponse {}

pub(super) fn is_no_response(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NoResponse>())
}

/// How long a read may wait: `per_read`, and never past `at` (the
/// exchange's total deadline, so that a dripping peer cannot stretch it
/// read by read).
#[derive(Clone, Copy)]
pub(super) struct Deadline {
    at: Option<Instant>,
    per_read: Duration,
}

/// Reads more of a response into `buf`, waiting as `deadline` allows.
///
/// With nothing buffered, and the socket drained by the last read (it
/// gave less than it was offered; `true` before the first), it waits for
/// the socket without a buffer, so a request whose answer, or the rest of
/// whose body, is slow holds none (see `read_buf`). After a full read more
/// is likely there, and the read goes first. Over TLS the session may hold
/// decrypted bytes the socket does not show, so there the read itself
/// waits.
fn fill(
    conn: &Stream,
    buf: &mut ReadBuf,
    drained: &mut bool,
    deadline: Deadline,
) -> io::Result<usize> {
    if let (Stream::Plain(tcp), true, true) = (conn, buf.is_empty(), *drained) {
        buf.release();
        arm_read(conn, deadline)?;
        tcp.wait_readable()?;
    }
    let mut offered = 0;
    let n = buf.fill_with(|free| {
        offered = free.len();
        read_before(conn, free, deadline)
    })?;
    *drained = n < offered;
    Ok(n)
}

/// One read that waits as `deadline` allows.
fn read_before(conn: &Stream, buf: &mut [u8], deadline: Deadline) -> io::Result<usize> {
    arm_read(conn, deadline)?;
    let mut c = conn;
    c.read(buf)
}

/// Sets the timeout of the next read or wait on `conn`: what is left of
/// the deadline, at most the per-read timeout; `TimedOut` if nothing is.
fn arm_read(conn: &Stream, deadline: Deadline) -> io::Result<()> {
    let left = deadline.at.map_or(deadline.per_read, |at| {
        at.saturating_duration_since(Instant::now())
            .min(deadline.per_read)
    });
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the request's deadline passed (Client::request_timeout)",
        ));
    }
    conn.set_read_timeout(Some(left))
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        "response body larger than the client's limit",
    )
}

/// A response's connection and what was read of its body with its head.
struct BodyStart {
    stream: Conn,
    buf: ReadBuf,
    drained: bool,
    deadline: Deadline,
}

/// A connection that closed (or was reset) before a byte of the response:
/// a stale pooled connection (see [`NoResponse`]).
#[cold]
fn no_response() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, NoResponse)
}

#[cold]
fn truncated_head() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "truncated response head")
}

/// A response body, read from its connection as the caller reads it: a
/// large download streams through in buffers instead of being collected.
/// Once the body is read to its end the connection goes back to the pool,
/// unless the server asked to close or sent bytes past the body; a body
/// dropped early drops its connection. Every read waits as the exchange's
/// [`Deadline`] allows, and the body may not grow past the client's limit.
/// A failure is an `io::Error` holding the [`Error`] that says its kind.
struct ResponseReader {
    conn: Option<Conn>,
    /// Received bytes not consumed yet.
    buf: ReadBuf,
    /// The last read left the socket empty (see [`fill`]).
    drained: bool,
    decoder: Decoder,
    deadline: Deadline,
    give_back: Option<GiveBack>,
}

impl ResponseReader {
    /// The body is read to its end: hand the connection back if it may
    /// carry another exchange.
    fn finish(&mut self) {
        let conn = self.conn.take();
        let clean = self.buf.is_empty() && !self.decoder.ended_by_close();
        self.buf.release();
        if let (Some(Conn::Owned(conn)), Some(give_back), true) =
            (conn, self.give_back.take(), clean)
        {
            give_back.put(conn);
        }
    }
}

/// The response body's bytes come from the buffer, then the connection,
/// each read waiting as the exchange's deadline allows.
impl Source for ResponseReader {
    fn buffered(&self) -> &[u8] {
        self.buf.bytes()
    }

    fn consume(&mut self, n: usize) {
        self.buf.consume(n);
    }

    fn fill(&mut self) -> io::Result<usize> {
        let conn = self
            .conn
            .as_ref()
            .expect("a body being read has its connection");
        // Straight into the buffer: a stack array would stay resident on
        // the reading fiber's stack.
        fill(conn, &mut self.buf, &mut self.drained, self.deadline)
    }

    fn truncated(&self) -> io::Error {
        io::Error::new(io::ErrorKind::UnexpectedEof, "truncated response body")
    }

    fn too_large(&self) -> io::Error {
        too_large()
    }
}

impl crate::body::Trailing for ResponseReader {
    fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        self.decoder.take_trailers()
    }
}

impl Read for ResponseReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() || self.conn.is_none() {
            return Ok(0);
        }
        // The decoder reads from `self`: out for the call, back after it.
        let mut decoder = std::mem::replace(&mut self.decoder, Decoder::done());
        let r = decoder.read(self, out);
        self.decoder = decoder;
        match r {
            Ok(0) => {
                self.finish();
                Ok(0)
            }
            Ok(n) => Ok(n),
            Err(e) => {
                // A failed body never goes back to the pool.
                self.conn = None;
                Err(io::Error::from(Error::from_exchange(e)))
            }
        }
    }
}
