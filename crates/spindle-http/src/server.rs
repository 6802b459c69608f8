//! [`Server`]: an accept loop and one fiber per connection.
//!
//! # A connection's life
//!
//! ```text
//! idle (keep_alive_timeout) → head (header_read_timeout) → handler → response → idle …
//! ```
//!
//! The head is read into one buffer and parsed with `httparse` into a
//! stack array of headers; header values are slices of the frozen head
//! (`Bytes`), so no header costs an allocation. Bytes past the head stay in
//! the buffer: a pipelined next request is answered after this one, in
//! order. The body is read only as the handler reads it; whatever it leaves
//! unread is drained before the next request (or the connection is closed
//! if that is too much).
//!
//! # Bad input
//!
//! A malformed request line or header is a 400, a head past the limit a
//! 431, a body past it a 413, an HTTP version other than 1.0/1.1 a 505, and
//! a request with both `Content-Length` and `Transfer-Encoding`, several
//! differing `Content-Length`s, or a transfer coding other than `chunked`
//! a 400 (no request smuggling). The connection is closed after an error
//! response; every other connection goes on. A handler that panics gets
//! its client a 500 and its connection closed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use http::{Method, Request, Response, StatusCode, Version};
use spindle::net::{TcpListener, TcpStream};

use crate::stream::{Stream, TlsStream};

use crate::body::{Body, Framing, Incoming};
use crate::config::ServerConfig;
use crate::h1::encode::{self, ResponseFraming};
use crate::h1::request::{parse_request, Limits, RequestBody};

/// An HTTP/1.1 server whose handlers are ordinary functions run on the
/// connection's fiber: they may read the body, sleep, call other servers.
///
/// ```no_run
/// use spindle_http::{Body, Response, Server};
/// spindle::run(|| {
///     let server = Server::bind("127.0.0.1:8080").unwrap();
///     server.serve(|_req| Response::new(Body::from("Hello, World!"))).unwrap();
/// });
/// ```
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: Arc<ServerState>,
}

/// What a [`ServerHandle`] sees of a running server.
#[derive(Default)]
struct ServerState {
    draining: std::sync::atomic::AtomicBool,
    accept_fiber: Mutex<Option<spindle::Fiber>>,
    /// Open connections: their fiber and whether they sit idle between
    /// requests.
    /// A fiber-aware lock: `drain` waits on `closed` under it.
    conns: spindle::sync::Mutex<
        std::collections::HashMap<u64, (spindle::Fiber, Arc<std::sync::atomic::AtomicBool>)>,
    >,
    /// Signalled each time a connection closes.
    closed: spindle::sync::Condvar,
}

/// Controls a running [`Server`] from another fiber or thread.
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<ServerState>,
}

impl ServerHandle {
    /// Graceful stop: stops accepting, closes idle keep-alive connections
    /// at once, lets requests in flight finish (their connections close
    /// after the response) until `deadline`, then cancels what is left.
    /// Returns how many connections had to be cancelled.
    pub fn drain(&self, deadline: std::time::Instant) -> usize {
        self.state.draining.store(true, Ordering::SeqCst);
        if let Some(f) = self
            .state
            .accept_fiber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            f.cancel();
        }
        for (fiber, idle) in self.state.conns.lock().values() {
            if idle.load(Ordering::SeqCst) {
                fiber.cancel();
            }
        }
        // Wait for the connections to close (each one's exit signals
        // `closed`), until the deadline.
        let mut conns = self.state.conns.lock();
        while !conns.is_empty() {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            conns = self.state.closed.wait_timeout(conns, deadline - now).0;
        }
        if conns.is_empty() {
            return 0;
        }
        for (fiber, _) in conns.values() {
            fiber.cancel();
        }
        let cancelled = conns.len();
        // Cancelled waits fail at once; give the fibers a moment to run
        // their failure paths and leave.
        let grace = std::time::Instant::now() + Duration::from_secs(1);
        while !conns.is_empty() {
            let now = std::time::Instant::now();
            if now >= grace {
                break;
            }
            conns = self.state.closed.wait_timeout(conns, grace - now).0;
        }
        cancelled
    }

    /// Open connections right now.
    pub fn connections(&self) -> usize {
        self.state.conns.lock().len()
    }
}

impl Server {
    /// Binds a listener on `addr`.
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<Server> {
        Ok(Server::from_listener(TcpListener::bind(addr)?))
    }

    /// Serves on an existing listener.
    pub fn from_listener(listener: TcpListener) -> Server {
        Server {
            listener,
            config: ServerConfig::default(),
            tls: None,
            state: Arc::new(ServerState::default()),
        }
    }

    /// A handle to drain the server once it serves.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: self.state.clone(),
        }
    }

    /// Replaces the limits and timeouts.
    pub fn config(mut self, config: ServerConfig) -> Server {
        self.config = config;
        self
    }

    /// Serves HTTPS: every connection does a TLS handshake, on its own
    /// fiber and under the header-read timeout, before its first request.
    /// A failed handshake (a plain-HTTP probe, an untrusted peer) closes
    /// that connection only. See [`tls`](crate::tls) for building `config`
    /// from PEM files.
    ///
    /// ```no_run
    /// let tls = spindle_http::tls::server_config_from_pem_files("cert.pem", "key.pem").unwrap();
    /// let server = spindle_http::Server::bind("127.0.0.1:8443").unwrap().tls(tls);
    /// ```
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Server {
        self.tls = Some(config);
        self
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections forever, one fiber each, calling `handler` for
    /// every request. Must run on a Spindle fiber.
    pub fn serve<H>(self, handler: H) -> io::Result<()>
    where
        H: Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        let config = Arc::new(self.config);
        let open = Arc::new(AtomicUsize::new(0));
        let state = self.state.clone();
        *state.accept_fiber.lock().unwrap_or_else(|e| e.into_inner()) = spindle::current();
        loop {
            if state.draining.load(Ordering::SeqCst) {
                return Ok(());
            }
            let (conn, _) = match self.listener.accept() {
                Ok(c) => c,
                Err(_) if state.draining.load(Ordering::SeqCst) => return Ok(()),
                Err(e) if spindle::is_cancelled(&e) => return Err(e),
                Err(e) => {
                    // EMFILE and friends: back off a moment and go on.
                    if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) {
                        spindle::time::sleep(Duration::from_millis(5));
                    }
                    continue;
                }
            };
            if open.load(Ordering::Relaxed) >= config.max_connections {
                // Admission control: answer and close rather than queue.
                let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = (&conn).write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            open.fetch_add(1, Ordering::Relaxed);
            let (handler, config, open2, st, tls) = (
                handler.clone(),
                config.clone(),
                open.clone(),
                state.clone(),
                self.tls.clone(),
            );
            let idle = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let idle2 = idle.clone();
            // The connection is registered (for `drain`) before it runs.
            let (registered_tx, registered_rx) = spindle::chan::oneshot::<()>();
            let spawned = spindle::Builder::new().name("http-conn").spawn(move || {
                let _ = registered_rx.recv();
                // Unregisters however the connection ends — a cancel
                // unwinds the fiber.
                struct Unregister(Arc<ServerState>, Arc<AtomicUsize>, u64);
                impl Drop for Unregister {
                    fn drop(&mut self) {
                        let mut conns = self.0.conns.lock();
                        conns.remove(&self.2);
                        self.1.fetch_sub(1, Ordering::Relaxed);
                        drop(conns);
                        self.0.closed.notify_all();
                    }
                }
                let id = spindle::current().map(|f| f.id()).unwrap_or(0);
                let _unregister = Unregister(st.clone(), open2, id);
                let Some(stream) = establish(conn, tls, &config) else {
                    return; // a failed handshake: this connection only
                };
                serve_connection(stream, &config, &*handler, &idle2, &st.draining);
            });
            match spawned {
                Ok(h) => {
                    let f = h.fiber().clone();
                    state.conns.lock().insert(f.id(), (f, idle));
                    let _ = registered_tx.send(());
                }
                Err(_) => {
                    // No stack for a fiber: this connection is refused, the
                    // server goes on.
                    open.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// What went wrong with a request, as the status to answer.
fn error_response(status: StatusCode) -> Vec<u8> {
    format!(
        "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes()
}

enum Head {
    /// The request, whether the connection may be kept alive, and its
    /// body's reader (`None` when it has no body: the bytes past the head
    /// stay in the connection's buffer).
    Request(
        Box<Request<Body>>,
        bool,
        Option<Arc<spindle::sync::Mutex<Incoming>>>,
    ),
    Closed,
    Error(StatusCode),
}

/// Sets the socket up and, for HTTPS, runs the handshake (on this, the
/// connection's fiber). `None`: the handshake failed; the peer has had an
/// alert if it spoke TLS at all.
fn establish(
    conn: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    config: &ServerConfig,
) -> Option<Stream> {
    let _ = conn.set_nodelay(true);
    let _ = conn.set_write_timeout(Some(config.write_timeout));
    let Some(tls) = tls else {
        return Some(Stream::Plain(conn));
    };
    let _ = conn.set_read_timeout(Some(config.header_read_timeout));
    let session = rustls::ServerConnection::new(tls).ok()?;
    let stream = TlsStream::handshake(conn, session).ok()?;
    Some(Stream::Tls(Box::new(stream)))
}

fn serve_connection(
    conn: Stream,
    config: &ServerConfig,
    handler: &(dyn Fn(Request<Body>) -> Response<Body> + Send + Sync),
    idle: &std::sync::atomic::AtomicBool,
    draining: &std::sync::atomic::AtomicBool,
) {
    let conn = Arc::new(conn);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    // Responses not yet written: pipelined requests are answered with one
    // write for the batch, flushed before any read that may wait.
    let mut out: Vec<u8> = Vec::new();
    // What each socket read lands in before it joins `buf`: zeroed once
    // per connection, not once per read as a stack array would be.
    let mut scratch = vec![0u8; 8 * 1024];
    loop {
        idle.store(buf.is_empty(), Ordering::SeqCst);
        if draining.load(Ordering::SeqCst) && buf.is_empty() {
            let _ = flush(&conn, &mut out);
            return; // draining: no new request on an idle connection
        }
        let head = read_head(&conn, &mut buf, config, &mut out, &mut scratch);
        idle.store(false, Ordering::SeqCst);
        let (req, keep_alive, incoming) = match head {
            Head::Request(r, k, i) => (r, k, i),
            Head::Closed => {
                let _ = flush(&conn, &mut out);
                return;
            }
            Head::Error(status) => {
                out.extend_from_slice(&error_response(status));
                if flush(&conn, &mut out).is_ok() {
                    lingering_close(&conn);
                }
                return;
            }
        };
        let is_head = req.method() == Method::HEAD;
        let is_connect = req.method() == Method::CONNECT;
        let version = req.version();
        let result = panic::catch_unwind(AssertUnwindSafe(|| handler(*req)));
        let response = match result {
            Ok(r) => r,
            Err(p) if p.is::<spindle::Cancelled>() => panic::resume_unwind(p),
            Err(_) => {
                out.extend_from_slice(&error_response(StatusCode::INTERNAL_SERVER_ERROR));
                let _ = flush(&conn, &mut out);
                return;
            }
        };
        // A body the handler read past its limit, or malformed: that is
        // the answer, whatever the handler returned.
        let failed = incoming.as_ref().and_then(|i| i.lock().error);
        if let Some(kind) = failed {
            let status = match kind {
                io::ErrorKind::FileTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => StatusCode::REQUEST_TIMEOUT,
                _ => StatusCode::BAD_REQUEST,
            };
            out.extend_from_slice(&error_response(status));
            if flush(&conn, &mut out).is_ok() {
                lingering_close(&conn);
            }
            return;
        }
        // The response goes out first: a streamed response may itself be
        // reading the request body (an echo), so the body lock is not held.
        // Such a response may need the body the client holds back for
        // `Expect: 100-continue`: the interim 100 goes out before it. (A
        // reader holding the lock is in `fill`, which sent the 100 first.)
        if let Some(incoming) = &incoming {
            if response.body().as_bytes().is_none() {
                // Into the pending responses: it cannot fail here.
                let _ = incoming.lock().send_continue(Some(&mut out));
            }
        }
        // A 2xx to CONNECT would turn the connection into a tunnel (RFC 9110
        // §9.3.6), which a handler here cannot take over: the answer goes
        // out without framing and the connection closes, so nothing after
        // it is read as HTTP.
        let tunnel = is_connect && response.status().is_success();
        let keep = keep_alive && !tunnel && !draining.load(Ordering::SeqCst);
        if write_response(
            &conn,
            &mut out,
            response,
            version,
            is_head || tunnel,
            keep,
            tunnel,
        )
        .is_err()
        {
            return;
        }
        if !keep {
            let _ = flush(&conn, &mut out);
            return;
        }
        // Then finish the request body: drain what is left, or close.
        let Some(incoming) = incoming else {
            continue; // no body: the buffer holds the next request already
        };
        // The client may wait for this response before sending the rest.
        if flush(&conn, &mut out).is_err() {
            return;
        }
        let mut inc = incoming.lock();
        if inc.error.is_some() || !finish_body(&mut inc) {
            return;
        }
        buf = std::mem::take(&mut inc.buf);
    }
}

/// Most bytes read and dropped after an error response before the close.
const LINGER_BYTES: usize = 256 << 10;
/// Longest wait for a client to stop sending after an error response.
const LINGER_TIME: Duration = Duration::from_secs(2);

/// Closes a connection after an error response without resetting it under
/// the client's feet: a client still sending its request body (a 413 for
/// an upload, a 400 mid-body) would otherwise get a reset — the kernel
/// sends RST when unread data is in the receive buffer at close — and
/// might never read the status. So: shut down our sending side (the
/// client reads the response, then EOF), then read and drop what the
/// client still sends, up to [`LINGER_BYTES`] or [`LINGER_TIME`], then
/// close. As Apache's `lingering_close` and nginx's `lingering_close`.
fn lingering_close(conn: &Stream) {
    let tcp = conn.tcp();
    if tcp.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let until = std::time::Instant::now() + LINGER_TIME;
    let mut sink = [0u8; 8192];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || tcp.set_read_timeout(Some(left)).is_err() {
            return;
        }
        // The raw TCP stream: a TLS session's records are dropped unread.
        match (&*tcp).read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// Reads and discards what the handler left of the request body, up to
/// 1 MiB; `false` if the connection cannot be reused.
fn finish_body(inc: &mut Incoming) -> bool {
    if inc.is_done() {
        return true;
    }
    if inc.continue_pending {
        // The client waits for 100 before sending: never sent, so no body
        // will come, and the connection cannot be reused.
        return false;
    }
    let mut sink = [0u8; 8192];
    let mut drained = 0u64;
    loop {
        match inc.read(&mut sink) {
            Ok(0) => return true,
            Ok(n) => {
                drained += n as u64;
                if drained > 1 << 20 {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
}

/// Reads and parses one request head. Waits `keep_alive_timeout` for its
/// first byte, then `header_read_timeout` for the rest.
/// Writes the buffered responses.
fn flush(conn: &Stream, out: &mut Vec<u8>) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let mut c = conn;
    let r = c.write_all(out);
    out.clear();
    r
}

fn read_head(
    conn: &Arc<Stream>,
    buf: &mut BytesMut,
    config: &ServerConfig,
    out: &mut Vec<u8>,
    scratch: &mut [u8],
) -> Head {
    let mut started = !buf.is_empty();
    let mut deadline = None;
    loop {
        if !buf.is_empty() {
            match parse(conn, buf, config) {
                Ok(Some(h)) => return h,
                Ok(None) => {}
                Err(status) => return Head::Error(status),
            }
            if buf.len() > config.max_head_bytes {
                return Head::Error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            }
        }
        let timeout = if started {
            let d = *deadline
                .get_or_insert_with(|| std::time::Instant::now() + config.header_read_timeout);
            match d.checked_duration_since(std::time::Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => return Head::Closed, // slowloris: close without a word
            }
        } else {
            config.keep_alive_timeout
        };
        // About to read, maybe to wait: what is answered goes out first.
        if flush(conn, out).is_err() {
            return Head::Closed;
        }
        let _ = conn.set_read_timeout(Some(timeout));
        match (&**conn).read(scratch) {
            Ok(0) | Err(_) => return Head::Closed,
            Ok(n) => {
                buf.extend_from_slice(&scratch[..n]);
                if !started {
                    started = true;
                }
            }
        }
    }
}

/// Parses a complete head from `buf` (consuming it), or `None` if more
/// bytes are needed.
fn parse(
    conn: &Arc<Stream>,
    buf: &mut BytesMut,
    config: &ServerConfig,
) -> Result<Option<Head>, StatusCode> {
    let limits = Limits {
        max_head_bytes: config.max_head_bytes,
        max_headers: config.max_headers,
        max_body_bytes: config.max_body_bytes,
    };
    // The head's syntax and framing rules are in `h1::request`.
    let Some(parsed) = parse_request(buf, &limits)? else {
        return Ok(None);
    };
    let (parts, ()) = parsed.request.into_parts();
    let request = |body: Body| Box::new(Request::from_parts(parts, body));
    let framing = match parsed.body {
        RequestBody::None => {
            // No body: nothing to share with the handler, and the rest of
            // the buffer (a pipelined request) stays where it is.
            return Ok(Some(Head::Request(
                request(Body::empty()),
                parsed.keep_alive,
                None,
            )));
        }
        RequestBody::Length(n) => Framing::Length(n),
        RequestBody::Chunked => Framing::Chunked,
    };
    let rest = std::mem::take(buf);
    let incoming = Arc::new(spindle::sync::Mutex::new(Incoming::new(
        conn.clone(),
        rest,
        framing,
        config.max_body_bytes,
        parsed.expect_continue,
        config.body_read_timeout,
        std::time::Instant::now() + config.body_deadline,
    )));
    let req = request(Body::incoming(incoming.clone()));
    Ok(Some(Head::Request(req, parsed.keep_alive, Some(incoming))))
}

fn write_response(
    conn: &Stream,
    out: &mut Vec<u8>,
    response: Response<Body>,
    version: Version,
    is_head: bool,
    keep_alive: bool,
    tunnel: bool,
) -> io::Result<()> {
    let (parts, body) = response.into_parts();
    let status = parts.status;
    // RFC 9110 §8.6 and §6.4.1: a 1xx or 204 response has no framing
    // headers at all, and a 304 none of ours (its body is always empty);
    // nor has a 2xx to CONNECT (§9.3.6).
    let bodiless_status = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || tunnel;
    let date = crate::date::now();
    let head = |out: &mut Vec<u8>, framing| {
        encode::response_head(
            out,
            status,
            version,
            &parts.headers,
            &date,
            keep_alive,
            framing,
        )
    };
    if bodiless_status {
        head(out, ResponseFraming::None);
        if out.len() >= 32 * 1024 {
            flush(conn, out)?;
        }
        return Ok(());
    }
    match body.into_kind() {
        Ok(full) => {
            head(out, ResponseFraming::Length(full.len() as u64));
            if !is_head {
                out.extend_from_slice(&full);
            }
            // Batched with the next pipelined responses unless it is big.
            if out.len() >= 32 * 1024 {
                flush(conn, out)?;
            }
            Ok(())
        }
        Err(mut reader) => {
            let mut c = conn;
            if version == Version::HTTP_10 {
                // No chunked encoding in 1.0: stream and close.
                head(out, ResponseFraming::Close);
                flush(conn, out)?;
                if !is_head {
                    io::copy(&mut reader, &mut c)?;
                }
                return Err(io::Error::other("HTTP/1.0 stream ends with the connection"));
            }
            head(out, ResponseFraming::Chunked);
            flush(conn, out)?;
            if is_head {
                return Ok(());
            }
            let mut data = vec![0u8; 16 * 1024];
            let mut frame = Vec::with_capacity(data.len() + 16);
            loop {
                let n = reader.read(&mut data)?;
                if n == 0 {
                    break;
                }
                frame.clear();
                encode::chunk(&mut frame, &data[..n]);
                c.write_all(&frame)?;
            }
            c.write_all(encode::LAST_CHUNK)
        }
    }
}
