//! [`Client`]: HTTP/1.1 requests from fibers (they park) or plain threads
//! (they block), with a keep-alive connection pool per origin.
//!
//! A response is read whole before it is returned, so its connection goes
//! back to the pool at once. A pooled connection the server has closed
//! meanwhile (an idle timeout) is detected when the request on it gets no
//! response bytes at all; the request is then sent once more on a fresh
//! connection.
//!
//! `https://` runs TLS (rustls) over the same socket, the handshake under
//! the connect timeout; the server's certificate is checked against the
//! Mozilla roots of `webpki-roots`, or against the roots given to
//! [`Client::tls_config`].

use crate::h1::chunked;
use crate::h1::encode;
use crate::h1::framing::BodyFraming;
use crate::h1::response;
use crate::read_buf::ReadBuf;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use spindle::net::TcpStream;

use crate::stream::{Stream, TlsStream};

use crate::body::{write_chunked, Body, ChunkedError};
use crate::error::{Error, ErrorKind};

/// Where a pooled connection goes: scheme is `https`, host, port.
type Origin = (bool, String, u16);

/// An HTTP/1.1 client with a connection pool.
///
/// A response's body is read from its connection as the caller reads it
/// (`Response<Body>` implements `Read` through its body), so a large
/// download streams; the connection goes back to the pool once the body is
/// read to its end, and is closed if the body is dropped before.
///
/// ```no_run
/// let client = spindle_http::Client::new();
/// let resp = client.get("http://127.0.0.1:8080/").unwrap();
/// assert!(resp.status().is_success());
/// ```
#[derive(Clone)]
pub struct Client {
    pool: Arc<Mutex<HashMap<Origin, Vec<Stream>>>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    /// Longest wait for any one read or write.
    io_timeout: Duration,
    /// Deadline of a whole exchange, if any.
    request_timeout: Option<Duration>,
    max_idle_per_origin: usize,
    max_response_bytes: u64,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    /// A client with a 10 s connect timeout, a 30 s timeout for each read
    /// and write, no deadline for a whole request, 8 idle connections kept
    /// per origin, responses up to 64 MiB.
    pub fn new() -> Client {
        Client {
            pool: Arc::new(Mutex::new(HashMap::new())),
            tls: None,
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            request_timeout: None,
            max_idle_per_origin: 8,
            max_response_bytes: 64 << 20,
        }
    }

    /// Deadline for name resolution plus connecting.
    pub fn connect_timeout(mut self, t: Duration) -> Client {
        self.connect_timeout = t;
        self
    }

    /// The TLS configuration for `https://` (by default
    /// [`tls::default_client_config`](crate::tls::default_client_config):
    /// the webpki roots). Use
    /// [`tls::client_config_with_ca_pem`](crate::tls::client_config_with_ca_pem)
    /// for a private CA.
    ///
    /// ```no_run
    /// let ca = std::fs::read("ca.pem").unwrap();
    /// let config = spindle_http::tls::client_config_with_ca_pem(&ca).unwrap();
    /// let client = spindle_http::Client::new().tls_config(config);
    /// ```
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Client {
        self.tls = Some(config);
        self
    }

    /// Deadline for a whole exchange: writing the request and reading the
    /// entire response (default: none, only [`io_timeout`](Self::io_timeout)
    /// per read). A server that drips its response a
    /// byte at a time cannot stretch it: every read waits only for what is
    /// left of the deadline.
    ///
    /// ```
    /// let client = spindle_http::Client::new().request_timeout(std::time::Duration::from_secs(5));
    /// # drop(client);
    /// ```
    pub fn request_timeout(mut self, t: Duration) -> Client {
        self.request_timeout = Some(t);
        self
    }

    /// Largest response body the client accepts (default 64 MiB): a
    /// response that announces more fails at once, one that sends more
    /// fails when its body is read past the limit
    /// ([`ErrorKind::BodyTooLarge`]).
    ///
    /// ```
    /// let client = spindle_http::Client::new().max_response_bytes(1 << 20);
    /// # drop(client);
    /// ```
    pub fn max_response_bytes(mut self, n: u64) -> Client {
        self.max_response_bytes = n;
        self
    }

    /// Longest wait for any one read or write of a request (default 30 s):
    /// a server that goes silent this long fails the request.
    ///
    /// ```
    /// let client = spindle_http::Client::new().io_timeout(std::time::Duration::from_secs(5));
    /// # drop(client);
    /// ```
    pub fn io_timeout(mut self, t: Duration) -> Client {
        self.io_timeout = t;
        self
    }

    /// `GET url`.
    pub fn get(&self, url: &str) -> Result<Response<Body>, Error> {
        self.request(
            Request::get(url)
                .body(Body::empty())
                .map_err(invalid_request)?,
        )
    }

    /// `POST url` with `body`.
    pub fn post(&self, url: &str, body: impl Into<Body>) -> Result<Response<Body>, Error> {
        self.request(
            Request::post(url)
                .body(body.into())
                .map_err(invalid_request)?,
        )
    }

    /// Sends `req` (its URI must be absolute: `http://host[:port]/path`).
    ///
    /// The error says what failed by its [`ErrorKind`](crate::ErrorKind)
    /// (resolution, connect, TLS, a timeout, a close, a malformed
    /// response, a body over the limit).
    pub fn request(&self, req: Request<Body>) -> Result<Response<Body>, Error> {
        let origin = origin_of(req.uri()).map_err(invalid_request)?;
        let (parts, body) = req.into_parts();
        let body = match body.as_bytes() {
            Some(b) => Bytes::copy_from_slice(b),
            // A streamed body goes out as it is produced, while the
            // response is read: a server may answer (or start to) before
            // the body is complete, and the body's producer may wait for
            // that answer.
            None => return self.request_streaming(parts, body, &origin),
        };
        let head = encode_head(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &origin,
            encode::RequestFraming::Length(body.len() as u64),
        )
        .map_err(invalid_request)?;
        // Only the method is needed from here on; the headers and target
        // are in `head`, and the rest is not kept while the answer is
        // awaited (a request parked on a slow server holds just that).
        let method = only_method(parts);
        if let Some(conn) = self.take_idle(&origin) {
            match self.exchange(conn, &origin, &head, &body, &method) {
                Ok(resp) => return Ok(resp),
                // The request never got through whole: nothing was done
                // with it, any method may go again on a fresh connection.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                // It was sent and the server closed without a word: it may
                // have acted on it, so only an idempotent request is sent
                // again (as Go and hyper do).
                Err(e) if is_no_response(&e) && method.is_idempotent() => {}
                Err(e) if is_no_response(&e) => return Err(not_retried(&method)),
                Err(e) => return Err(Error::from_exchange(e)),
            }
        }
        let conn = self.connect(&origin)?;
        self.exchange(conn, &origin, &head, &body, &method)
            .map_err(fresh_connection_error)
    }

    /// A request whose body is a stream: on a fresh connection (the body
    /// cannot be sent twice, so no stale pooled connection may take it),
    /// chunked, pumped by a fiber of its own while this one reads the
    /// response. The connection is not pooled afterwards.
    fn request_streaming(
        &self,
        parts: http::request::Parts,
        mut body: Body,
        origin: &Origin,
    ) -> Result<Response<Body>, Error> {
        let head = encode_head(
            &parts.method,
            &parts.uri,
            &parts.headers,
            origin,
            encode::RequestFraming::Chunked,
        )
        .map_err(invalid_request)?;
        let stream = Arc::new(self.connect(origin)?);
        let deadline = self.deadline();
        self.send(&stream, &head, &[])
            .map_err(fresh_connection_error)?;
        let pump = stream.clone();
        spindle::Builder::new()
            .name("http-client-body")
            .spawn(move || pump_chunked(&mut body, &pump))
            .map_err(|e| Error::new(ErrorKind::Io, e))?;
        self.read_response(Conn::Shared(stream), origin, &parts.method, deadline)
            .map_err(fresh_connection_error)
    }

    /// A new connection to `origin`, TLS handshake done for `https`.
    fn connect(&self, origin: &Origin) -> Result<Stream, Error> {
        let (https, host, port) = origin;
        let started = std::time::Instant::now();
        let addrs = spindle::net::lookup_host((host.as_str(), *port))
            .map_err(|e| Error::new(ErrorKind::Dns, e))?;
        let left = |started: std::time::Instant| {
            self.connect_timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1))
        };
        let tcp = TcpStream::connect_timeout(&addrs[..], left(started)).map_err(|e| {
            let kind = if e.kind() == io::ErrorKind::TimedOut {
                ErrorKind::ConnectTimeout
            } else {
                ErrorKind::Connect
            };
            Error::new(kind, e)
        })?;
        let _ = tcp.set_nodelay(true);
        if !https {
            return Ok(Stream::Plain(tcp));
        }
        self.handshake(tcp, host, left(started))
    }

    /// The TLS half of [`connect`](Self::connect), out of line: its frames
    /// are large, and every stack page a fiber touches stays resident while
    /// it waits, so a plain connection must not pay for them.
    #[inline(never)]
    fn handshake(&self, tcp: TcpStream, host: &str, left: Duration) -> Result<Stream, Error> {
        let io = |e| Error::new(ErrorKind::Io, e);
        tcp.set_read_timeout(Some(left)).map_err(io)?;
        tcp.set_write_timeout(Some(left)).map_err(io)?;
        let name =
            rustls::pki_types::ServerName::try_from(host.to_string()).map_err(invalid_request)?;
        let config = self
            .tls
            .clone()
            .unwrap_or_else(crate::tls::default_client_config);
        let session = rustls::ClientConnection::new(config, name).map_err(|e| {
            Error::new(
                ErrorKind::Tls,
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })?;
        let tls = TlsStream::handshake(tcp, session).map_err(Error::from_handshake)?;
        Ok(Stream::Tls(Box::new(tls)))
    }

    /// An idle pooled connection that is still clean: one that received
    /// bytes while idle (unsolicited, or the peer's close) is dropped, as
    /// Go and hyper do, instead of handing those bytes back as the next
    /// response. (A TLS connection is not checked: records such as session
    /// tickets may arrive unasked.)
    fn take_idle(&self, origin: &Origin) -> Option<Stream> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let idle = pool.get_mut(origin)?;
        while let Some(conn) = idle.pop() {
            let clean = match &conn {
                Stream::Plain(tcp) => matches!(
                    tcp.try_peek(&mut [0u8; 1]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock
                ),
                Stream::Tls(_) => true,
            };
            if clean {
                return Some(conn);
            }
        }
        None
    }

    /// Where a connection whose response was read to its end goes back.
    fn give_back(&self, origin: &Origin) -> GiveBack {
        GiveBack {
            pool: self.pool.clone(),
            origin: origin.clone(),
            max_idle: self.max_idle_per_origin,
        }
    }

    /// Writes the request and reads the response head; the body is read
    /// from the connection as the caller reads it (a [`ResponseReader`]),
    /// and the connection goes back to the pool once it is read to its end.
    /// `ConnectionAborted`: the request could not be written whole; a
    /// [`NoResponse`] error: it was, and no response byte came back (a
    /// stale pooled connection).
    fn exchange(
        &self,
        stream: Stream,
        origin: &Origin,
        head: &[u8],
        body: &[u8],
        method: &Method,
    ) -> io::Result<Response<Body>> {
        let deadline = self.deadline();
        self.send(&stream, head, body)?;
        self.read_response(Conn::Owned(stream), origin, method, deadline)
    }

    /// The deadline of an exchange starting now.
    fn deadline(&self) -> Deadline {
        Deadline {
            at: self.request_timeout.map(|t| Instant::now() + t),
            per_read: self.io_timeout,
        }
    }

    /// Writes a request head and body; `ConnectionAborted` if the
    /// connection was closed under them.
    fn send(&self, conn: &Stream, head: &[u8], body: &[u8]) -> io::Result<()> {
        conn.set_write_timeout(Some(
            self.request_timeout
                .map_or(self.io_timeout, |t| t.min(self.io_timeout)),
        ))?;
        let mut c = conn;
        let sent = c.write_all(head).and_then(|_| c.write_all(body));
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
    fn read_response(
        &self,
        stream: Conn,
        origin: &Origin,
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
            match self.parse_head(&mut buf, method) {
                Ok(Some(head)) => {
                    let body = BodyStart {
                        stream,
                        buf,
                        drained,
                        deadline,
                    };
                    return self.respond(head, body, origin);
                }
                Ok(None) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The final response head at the front of `buf`, consumed from it
    /// (1xx heads before it are skipped); `None` until all of it is there.
    #[inline(never)]
    fn parse_head(
        &self,
        buf: &mut ReadBuf,
        method: &Method,
    ) -> io::Result<Option<response::ResponseHead>> {
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
        &self,
        head: response::ResponseHead,
        body: BodyStart,
        origin: &Origin,
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
        let reading = match head.framing {
            BodyFraming::Empty => {
                // Nothing to read: the connection is free now, unless bytes
                // came that nobody asked for.
                if let (true, true, Conn::Owned(stream)) = (keep_alive, buf.is_empty(), stream) {
                    self.give_back(origin).put(stream);
                }
                return builder
                    .body(Body::empty())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
            }
            BodyFraming::Length(n) if n > self.max_response_bytes => return Err(too_large()),
            BodyFraming::Length(n) => Reading::Length(n),
            BodyFraming::Chunked => Reading::Chunked(chunked::Decoder::new()),
            BodyFraming::ToClose => Reading::ToClose,
        };
        let reader = ResponseReader {
            conn: Some(stream),
            buf,
            drained,
            reading,
            max: self.max_response_bytes,
            taken: 0,
            deadline,
            give_back: keep_alive.then(|| self.give_back(origin)),
        };
        builder
            .body(Body::from_reader(reader))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// The method of a request head, the rest of it dropped now (a partial
/// move would keep it to the end of the scope).
fn only_method(parts: http::request::Parts) -> Method {
    parts.method
}

fn origin_of(uri: &Uri) -> io::Result<Origin> {
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the URI must be absolute: http:// or https://",
            ))
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the URI has no host"))?;
    Ok((
        https,
        host.trim_matches(|c| c == '[' || c == ']').to_string(),
        uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
    ))
}

fn encode_head(
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

/// The error of an exchange on a fresh connection, closed under it.
fn fresh_connection_error(e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::ConnectionAborted || is_no_response(&e) {
        Error::new(
            ErrorKind::Closed,
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection without a response",
            ),
        )
    } else {
        Error::from_exchange(e)
    }
}

/// On its own fiber: sends `body` on `conn` in chunks as it is read, then
/// the last chunk. If the body fails, the request is cut off (our sending
/// side shut down without the last chunk), so the server cannot take a
/// part for the whole; if the connection fails, the reader of the
/// response hears about it.
fn pump_chunked(body: &mut Body, conn: &Stream) {
    if let Err(ChunkedError::Read(_)) = write_chunked(body, conn) {
        let _ = conn.tcp().shutdown(std::net::Shutdown::Write);
    }
}

/// A response body's connection: its own (it may go back to the pool), or
/// shared with the fiber still sending a streamed request body.
enum Conn {
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

fn is_no_response(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NoResponse>())
}

/// How long a read may wait: `per_read`, and never past `at` (the
/// exchange's total deadline, so that a dripping peer cannot stretch it
/// read by read).
#[derive(Clone, Copy)]
struct Deadline {
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

/// An [`ErrorKind::InvalidRequest`] error from whatever refused the request.
fn invalid_request(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::new(
        ErrorKind::InvalidRequest,
        io::Error::new(io::ErrorKind::InvalidInput, e),
    )
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        "response body larger than the client's limit",
    )
}

/// Returns a connection to the pool (when its response was read to its
/// end and nothing followed it).
struct GiveBack {
    pool: Arc<Mutex<HashMap<Origin, Vec<Stream>>>>,
    origin: Origin,
    max_idle: usize,
}

impl GiveBack {
    fn put(self, conn: Stream) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let idle = pool.entry(self.origin).or_default();
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }
}

/// A response's connection and what was read of its body with its head.
struct BodyStart {
    stream: Conn,
    buf: ReadBuf,
    drained: bool,
    deadline: Deadline,
}

/// A reused connection closed without a response to a request that is not
/// idempotent: it may have been processed, so it is not sent again.
#[cold]
#[inline(never)]
fn not_retried(method: &Method) -> Error {
    Error::new(
        ErrorKind::Closed,
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "server closed a reused connection without a response; \
                 a {method} is not retried (it may have been processed)"
            ),
        ),
    )
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

/// How the rest of a response body is delimited.
enum Reading {
    /// This many bytes left.
    Length(u64),
    /// The chunked coding, decoded by the decoder the server uses too.
    Chunked(chunked::Decoder),
    /// Until the server closes.
    ToClose,
    /// Read to its end.
    Done,
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
    reading: Reading,
    max: u64,
    taken: u64,
    deadline: Deadline,
    give_back: Option<GiveBack>,
}

impl ResponseReader {
    /// Reads more bytes into `buf`; 0 at the server's close.
    fn fill(&mut self) -> io::Result<usize> {
        let conn = self
            .conn
            .as_ref()
            .expect("a body being read has its connection");
        // Straight into the buffer: a stack array would stay resident on
        // the reading fiber's stack.
        fill(conn, &mut self.buf, &mut self.drained, self.deadline)
    }

    fn fill_or_truncated(&mut self, what: &str) -> io::Result<()> {
        if self.fill()? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("truncated {what}"),
            ));
        }
        Ok(())
    }

    fn count(&mut self, n: usize) -> io::Result<()> {
        self.taken += n as u64;
        if self.taken > self.max {
            return Err(too_large());
        }
        Ok(())
    }

    /// The body is read to its end: hand the connection back if it may
    /// carry another exchange.
    fn finish(&mut self) {
        self.reading = Reading::Done;
        let conn = self.conn.take();
        let clean = self.buf.is_empty();
        self.buf.release();
        if let (Some(Conn::Owned(conn)), Some(give_back), true) =
            (conn, self.give_back.take(), clean)
        {
            give_back.put(conn);
        }
    }

    fn read_body(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            let avail = self.buf.len();
            match &mut self.reading {
                Reading::Done => return Ok(0),
                Reading::Length(0) => {
                    self.finish();
                    return Ok(0);
                }
                Reading::Length(left) => {
                    if avail == 0 {
                        self.fill_or_truncated("response body")?;
                        continue;
                    }
                    let n = (*left).min(avail as u64).min(out.len() as u64) as usize;
                    *left -= n as u64;
                    out[..n].copy_from_slice(&self.buf.bytes()[..n]);
                    self.buf.consume(n);
                    self.count(n)?;
                    return Ok(n);
                }
                Reading::Chunked(decoder) => {
                    let (used, found) = decoder
                        .decode(self.buf.bytes(), out.len())
                        .map_err(|e| e.into_io("response"))?;
                    // A chunk announced larger than what may still come is
                    // refused before it is read.
                    if decoder.chunk_left() > self.max.saturating_sub(self.taken) {
                        return Err(too_large());
                    }
                    match found {
                        chunked::Decoded::Data { start, len } => {
                            out[..len].copy_from_slice(&self.buf.bytes()[start..start + len]);
                            self.buf.consume(used);
                            self.count(len)?;
                            return Ok(len);
                        }
                        chunked::Decoded::Done => {
                            self.buf.consume(used);
                            self.finish();
                            return Ok(0);
                        }
                        chunked::Decoded::NeedMore => {
                            self.buf.consume(used);
                            self.fill_or_truncated("chunked body")?;
                        }
                    }
                }
                Reading::ToClose => {
                    if avail == 0 {
                        if self.fill()? == 0 {
                            self.reading = Reading::Done;
                            self.conn = None;
                            return Ok(0);
                        }
                        continue;
                    }
                    let n = avail.min(out.len());
                    out[..n].copy_from_slice(&self.buf.bytes()[..n]);
                    self.buf.consume(n);
                    self.count(n)?;
                    return Ok(n);
                }
            }
        }
    }
}

impl Read for ResponseReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        self.read_body(out).map_err(|e| {
            // A failed body never goes back to the pool.
            self.reading = Reading::Done;
            self.conn = None;
            io::Error::from(Error::from_exchange(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Reads one request head off `s`.
    fn read_head(s: &mut std::net::TcpStream) {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(
                s.read(&mut byte).unwrap(),
                1,
                "closed before the head's end"
            );
            got.push(byte[0]);
        }
    }

    #[test]
    fn requests_waiting_for_a_slow_answer_hold_no_read_buffer() {
        const N: usize = 20;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let (step_tx, step_rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        // An upstream that answers slowly: the head and half the body once
        // told, the rest when told again.
        let upstream = std::thread::spawn(move || {
            let mut conns = Vec::new();
            for _ in 0..N {
                let (mut s, _) = listener.accept().unwrap();
                read_head(&mut s);
                conns.push(s);
            }
            ready_tx.send(()).unwrap();
            step_rx.recv().unwrap();
            for s in &mut conns {
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok")
                    .unwrap();
            }
            step_rx.recv().unwrap();
            for s in &mut conns {
                s.write_all(b"ok").unwrap();
            }
        });
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let (got_tx, got_rx) = mpsc::channel::<()>();
        let fibers = rt.run(move || {
            let client = Arc::new(Client::new());
            (0..N)
                .map(|_| {
                    let (client, url, got) = (client.clone(), url.clone(), got_tx.clone());
                    spindle::spawn(move || {
                        let mut body = client.get(&url).unwrap().into_body();
                        let mut first = [0u8; 2];
                        body.read_exact(&mut first).unwrap();
                        assert_eq!(&first, b"ok");
                        got.send(()).unwrap();
                        body.into_vec().unwrap()
                    })
                })
                .collect::<Vec<_>>()
        });
        // Every request is out and waits for its head, on the one worker
        // whose buffer cache this looks at.
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
        // Then for the rest of its body.
        step_tx.send(()).unwrap();
        for _ in 0..N {
            got_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
        // And each gets all of it.
        step_tx.send(()).unwrap();
        for rest in rt.run(move || {
            fibers
                .into_iter()
                .map(|f| f.join().unwrap())
                .collect::<Vec<_>>()
        }) {
            assert_eq!(rest, b"ok");
        }
        upstream.join().unwrap();
    }
}
