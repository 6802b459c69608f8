//! One server connection: [`Conn`] owns the stream, its read and write
//! buffers and the phase it is in, and is the one place that sets the
//! socket's timeouts for a phase.
//!
//! ```text
//! establish (TLS handshake: header_read_timeout)
//!   └─ loop: Head  (keep_alive_timeout for the first byte, then one
//!                   header_read_timeout deadline for the whole head)
//!            Handler (the request body: body_read_timeout per read and a
//!                   body_deadline for all of it — set by the body reader)
//!            Write (write_timeout per write; pipelined answers batched)
//!            Body  (what the handler left of the body is drained)
//!   └─ an error answer: status, then a lingering close
//! ```
//!
//! Closing after a response is a value (`keep_alive` false), not an error.
//! The parsing and encoding rules are `h1`'s; this module only moves bytes.

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use spindle::net::TcpStream;

use crate::body::{write_chunked, write_polled, Body, ChunkedError, Incoming, Outgoing};
use crate::config::ServerConfig;
use crate::h1::encode::{self, ResponseFraming};
use crate::h1::framing::BodyFraming;
use crate::h1::header_maps;
use crate::h1::request::{self, parse_request, KnownHost, Limits, RequestBody};
use crate::read_buf::ReadBuf;
use crate::serving::{Drain, Handler};
use crate::stream::{Handshaken, Stream};
use crate::write_buf;

/// What a connection does when its HTTP/1.1 loop ends.
enum After {
    /// Closes (the stream is dropped).
    Close,
    /// Goes on as HTTP/2: the client opened with the preface.
    Http2,
}

/// Where a connection is in its request loop (for what a timeout means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests, waiting for the next one's first byte
    /// (`keep_alive_timeout`).
    Idle,
    /// Reading a request head (`header_read_timeout` for all of it).
    Head,
    /// The handler runs (and may read the body).
    Handler,
    /// The response is being written.
    Write,
    /// Draining what the handler left of the request body.
    Body,
}

/// A server connection (see the module docs).
pub(crate) struct Conn {
    stream: Arc<Stream>,
    /// Bytes read and not yet parsed (a head, a pipelined request); it
    /// holds no memory while a handler runs with nothing buffered.
    buf: ReadBuf,
    /// Responses not yet written: pipelined requests are answered with one
    /// write for the batch, flushed before any read that may wait; between
    /// requests its memory is the thread's (`write_buf`).
    out: Vec<u8>,
    phase: Phase,
    /// The `Host` value its last request had, checked already.
    known_host: KnownHost,
    /// No request yet, and HTTP/2 by prior knowledge is allowed: the first
    /// bytes may be the HTTP/2 preface.
    may_be_h2c: bool,
    /// The last response's header map, emptied, kept for the next request
    /// when that request was already read (pipelined); otherwise the map
    /// goes to the thread's spares, so an idle connection holds none.
    next_map: Option<HeaderMap>,
}

/// A connection ready for its first request, in the protocol it speaks.
pub(crate) enum Established {
    Http1(Conn),
    Http2(crate::h2::io::Io),
}

impl Conn {
    fn new(stream: Stream) -> Conn {
        Conn {
            stream: Arc::new(stream),
            buf: ReadBuf::new(),
            out: Vec::new(),
            phase: Phase::Head,
            known_host: KnownHost::default(),
            may_be_h2c: false,
            next_map: None,
        }
    }

    /// Sets the socket up and, for HTTPS, runs the handshake (on this, the
    /// connection's fiber). `None`: the handshake failed; the peer has had an
    /// alert if it spoke TLS at all.
    pub(crate) fn establish(
        conn: TcpStream,
        tls: Option<Arc<rustls::ServerConfig>>,
        config: &ServerConfig,
    ) -> Option<Established> {
        let _ = conn.set_nodelay(true);
        let _ = conn.set_write_timeout(Some(config.write_timeout));
        let Some(tls) = tls else {
            let mut c = Conn::new(Stream::Plain(conn));
            c.may_be_h2c = config.h2c;
            return Some(Established::Http1(c));
        };
        Conn::handshake(conn, tls, config)
    }

    /// The TLS half of [`establish`](Self::establish), out of line: its
    /// frames are large, and every stack page a connection's fiber touches
    /// stays resident for the connection's life, so a plain connection must
    /// not pay for them. ALPN chooses the protocol.
    #[inline(never)]
    fn handshake(
        conn: TcpStream,
        tls: Arc<rustls::ServerConfig>,
        config: &ServerConfig,
    ) -> Option<Established> {
        let _ = conn.set_read_timeout(Some(config.header_read_timeout));
        let session = rustls::ServerConnection::new(tls).ok()?;
        let done = Handshaken::new(conn, session).ok()?;
        if done.is_h2() && config.http2 {
            let (tcp, session, early) = done.into_parts();
            return Some(Established::Http2(crate::h2::io::Io::tls(
                tcp, session, early,
            )));
        }
        Some(Established::Http1(Conn::new(Stream::Tls(Box::new(
            done.into_stream(),
        )))))
    }

    /// Lets the handler of `req` see its client leave (see `gone`). Out of
    /// line, as everything around the handler.
    #[inline(never)]
    fn watch_client(&self, req: &mut Request<Body>) {
        req.extensions_mut()
            .insert(crate::gone::ClientGone::new(&self.stream));
    }

    /// Serves requests on this connection until it closes, is drained,
    /// or fails.
    ///
    /// A panic of the handler unwinds to here, not through a
    /// `catch_unwind` per request: the request moved into such a closure
    /// and the response moved out through its result were each copied
    /// again, freshly written, on every request (see `bench/RESULTS.md`).
    /// A handler's panic is answered with 500 and the connection closes;
    /// one past the handler (a streamed body's reader) cuts the response
    /// off, and what was pending before it still goes out.
    pub(crate) fn serve(
        mut self,
        config: &ServerConfig,
        handler: &Arc<Handler>,
        idle: &std::sync::atomic::AtomicBool,
        drain: &Drain,
    ) {
        let served = panic::catch_unwind(AssertUnwindSafe(|| {
            self.serve_http1(config, handler, idle, drain)
        }));
        match served {
            Ok(After::Close) => {}
            Ok(After::Http2) => self.into_h2(config, handler, idle, drain),
            Err(p) if p.is::<spindle::Cancelled>() => panic::resume_unwind(p),
            Err(_) => self.answer_panic(),
        }
    }

    /// After a panic in the request loop: a 500 if the handler panicked
    /// (nothing of its response is out yet), else only what was pending.
    #[inline(never)]
    fn answer_panic(&mut self) {
        if self.phase == Phase::Handler {
            self.out
                .extend_from_slice(&error_response(StatusCode::INTERNAL_SERVER_ERROR));
        }
        let _ = self.flush();
    }

    /// The HTTP/1.1 request loop of [`serve`](Self::serve).
    ///
    /// The handler runs under this frame, and a handler that waits (most
    /// do, sooner or later) keeps every stack page down to its wait
    /// resident while the connection lives. So what is done before and
    /// after the handler — reading the head, writing the response, the
    /// error answer — is out of line: their locals are in frames of their
    /// own, beside the handler's rather than above it.
    fn serve_http1(
        &mut self,
        config: &ServerConfig,
        handler: &Arc<Handler>,
        idle: &std::sync::atomic::AtomicBool,
        drain: &Drain,
    ) -> After {
        // `idle` is stored only when it changes: a pipelined batch is
        // served without touching it. Becoming idle is a full barrier: the
        // store and the look at `drain` below pair with `drain`'s own store
        // and look at the flags, so one of the two sees the other. Becoming
        // busy needs no barrier (a drain that saw the connection idle a
        // moment earlier cancels it either way). The server creates the
        // flag set.
        let mut is_idle = true;
        loop {
            if self.buf.is_empty() != is_idle {
                is_idle = !is_idle;
                idle.store(
                    is_idle,
                    if is_idle {
                        Ordering::SeqCst
                    } else {
                        Ordering::Release
                    },
                );
            }
            if drain.is_set() && self.buf.is_empty() {
                let _ = self.flush();
                return After::Close; // draining: no new request on an idle connection
            }
            // Filled in place: a request is large, and each move of it
            // was a copy. Into a spare map, the last response's (see
            // `h1::header_maps`).
            let mut req = Request::new(Body::empty());
            let map = self.next_map.take().unwrap_or_else(header_maps::take);
            let placeholder = std::mem::replace(req.headers_mut(), map);
            // `Request::new`'s map is `HeaderMap::new()`, which by its
            // documentation does not allocate: nothing to free, and its
            // drop glue was a measurable part of a pipelined request.
            debug_assert_eq!(placeholder.capacity(), 0);
            std::mem::forget(placeholder);
            let head = self.read_head(config, &mut req);
            if is_idle {
                is_idle = false;
                idle.store(false, Ordering::Release);
            }
            let (keep_alive, incoming) = match head {
                Head::Request(k, i) => (k, i),
                Head::Closed => {
                    let _ = self.flush();
                    return After::Close;
                }
                Head::Error(status) => {
                    self.answer_error(status);
                    return After::Close;
                }
                Head::Http2 => return After::Http2,
            };
            let is_head = req.method() == Method::HEAD;
            let is_connect = req.method() == Method::CONNECT;
            let version = req.version();
            self.phase = Phase::Handler;
            // Nothing pipelined behind a bodiless request: the buffer is
            // not needed until the next read (see `read_buf`).
            if incoming.is_none() {
                self.buf.release();
                if config.watch_client_gone {
                    self.watch_client(&mut req);
                }
            }
            let response = handler(req);
            // A body the handler read past its limit, or malformed: that is
            // the answer, whatever the handler returned. Known by now unless
            // the body is still being read — by a fiber of the handler's
            // that holds the lock while it waits for the client (a stream
            // the response echoes): then the response goes out, and what
            // that read finds closes the connection after it (below).
            let failed = incoming
                .as_ref()
                .and_then(|i| i.try_lock().and_then(|i| i.error));
            if let Some(kind) = failed {
                let status = match kind {
                    io::ErrorKind::FileTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                        StatusCode::REQUEST_TIMEOUT
                    }
                    _ => StatusCode::BAD_REQUEST,
                };
                self.answer_error(status);
                return After::Close;
            }
            // The response goes out first: a streamed response may itself be
            // reading the request body (an echo), so the body lock is not held.
            // Such a response may need the body the client holds back for
            // `Expect: 100-continue`: the interim 100 goes out before it. (A
            // reader holding the lock is in `fill`, which sent the 100 first,
            // or has body bytes in hand, which the client sent unasked.)
            if let Some(incoming) = &incoming {
                if response.body().as_bytes().is_none() {
                    if let Some(mut incoming) = incoming.try_lock() {
                        // Into the pending responses: it cannot fail here.
                        let _ = incoming.send_continue(Some(&mut self.out));
                    }
                }
            }
            // A 2xx to CONNECT would turn the connection into a tunnel (RFC 9110
            // §9.3.6), which a handler here cannot take over: the answer goes
            // out without framing and the connection closes, so nothing after
            // it is read as HTTP.
            let tunnel = is_connect && response.status().is_success();
            let keep = keep_alive && !tunnel && !drain.is_set();
            self.phase = Phase::Write;
            if self
                .write_response(response, version, is_head || tunnel, keep, tunnel)
                .is_err()
            {
                return After::Close;
            }
            if !keep {
                let _ = self.flush();
                return After::Close;
            }
            // Then finish the request body: drain what is left, or close.
            let Some(incoming) = incoming else {
                continue; // no body: the buffer holds the next request already
            };
            // The client may wait for this response before sending the rest.
            if self.flush().is_err() {
                return After::Close;
            }
            self.phase = Phase::Body;
            let mut inc = incoming.lock();
            if inc.error.is_some() || !finish_body(&mut inc) {
                return After::Close;
            }
            self.buf = std::mem::take(&mut inc.buf);
        }
    }

    /// The client opened with the HTTP/2 preface: the connection is
    /// HTTP/2's from here, with what was read so far. Never busy-idle: a
    /// drain reaches it as a GOAWAY, not a cancel.
    #[inline(never)] // off the frame the handler runs under (see `serve`)
    fn into_h2(
        self,
        config: &ServerConfig,
        handler: &Arc<Handler>,
        idle: &std::sync::atomic::AtomicBool,
        drain: &Drain,
    ) {
        idle.store(false, Ordering::SeqCst);
        let prefix = bytes::Bytes::copy_from_slice(self.buf.bytes());
        let Ok(Stream::Plain(tcp)) = Arc::try_unwrap(self.stream) else {
            return; // only a plain connection with no request yet gets here
        };
        let _ = tcp.set_read_timeout(None);
        crate::h2::server::serve(
            crate::h2::io::Io::plain(tcp, prefix),
            config,
            handler,
            drain,
        );
    }

    /// Writes what is pending.
    fn flush(&mut self) -> io::Result<()> {
        flush_to(&self.stream, &mut self.out)
    }

    /// Answers with an error status and closes without a reset.
    #[inline(never)] // off the frame the handler runs under (see `serve`)
    fn answer_error(&mut self, status: StatusCode) {
        self.out.extend_from_slice(&error_response(status));
        if self.flush().is_ok() {
            lingering_close(&self.stream);
        }
    }

    /// Reads until a whole request head is in (or the connection closes,
    /// or the head is refused). Its timeouts: `keep_alive_timeout` for the
    /// first byte, then `header_read_timeout` for the whole head.
    #[inline(never)] // off the frame the handler runs under (see `serve`)
    fn read_head(&mut self, config: &ServerConfig, request: &mut Request<Body>) -> Head {
        let (conn, buf, out) = (&self.stream, &mut self.buf, &mut self.out);
        let known_host = &mut self.known_host;
        let may_be_h2c = &mut self.may_be_h2c;
        // Idle until the head's first byte, then Head.
        let phase = &mut self.phase;
        *phase = if buf.is_empty() {
            Phase::Idle
        } else {
            Phase::Head
        };
        let mut deadline = None;
        loop {
            if *may_be_h2c && !buf.is_empty() {
                match crate::h2::starts_with_preface(buf.bytes()) {
                    Some(true) => return Head::Http2,
                    // Not the preface. Once the first line is in: a line
                    // shaped as a request's but with no HTTP version is a
                    // broken HTTP/2 preface as far as anyone can tell, and
                    // an HTTP/1.1 answer would be noise to such a client,
                    // so it is closed without one; else HTTP/1.1 it is.
                    Some(false) => match buf.bytes().iter().position(|&b| b == b'\n') {
                        Some(end) if request::is_foreign_request_line(&buf.bytes()[..end]) => {
                            return Head::Closed
                        }
                        Some(_) => *may_be_h2c = false,
                        None => {}
                    },
                    None => {} // a prefix of it: read on
                }
            }
            if !buf.is_empty() && !*may_be_h2c {
                match parse(conn, buf, config, request, known_host) {
                    Ok(Some(h)) => return h,
                    Ok(None) => {}
                    Err(status) => return Head::Error(status),
                }
                if buf.len() > config.max_head_bytes {
                    return Head::Error(request::too_large(buf.bytes(), config.max_head_bytes));
                }
            }
            let timeout = if *phase == Phase::Head {
                let d = *deadline
                    .get_or_insert_with(|| std::time::Instant::now() + config.header_read_timeout);
                match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return Head::Closed, // slowloris: close without a word
                }
            } else {
                config.keep_alive_timeout
            };
            // About to read, maybe to wait: what is answered goes out first,
            // and the emptied buffer's memory to the thread's cache (see
            // `write_buf`).
            if flush_to(conn, out).is_err() {
                return Head::Closed;
            }
            write_buf::release(out);
            let _ = conn.set_read_timeout(Some(timeout));
            // Nothing buffered: wait without a buffer, so an idle
            // keep-alive connection holds none (see `read_buf`). Over TLS
            // the session may hold decrypted bytes the socket does not
            // show, so there the read itself waits.
            if buf.is_empty() {
                if let Stream::Plain(tcp) = &**conn {
                    buf.release();
                    if tcp.wait_readable().is_err() {
                        return Head::Closed;
                    }
                }
            }
            match buf.fill_with(|free| (&**conn).read(free)) {
                Ok(0) | Err(_) => return Head::Closed,
                Ok(_) => *phase = Phase::Head,
            }
        }
    }

    /// Writes `response` into the pending responses (streamed bodies go
    /// straight out). Its timeout: `write_timeout` per write, set at
    /// `establish`.
    #[inline(never)] // off the frame the handler runs under (see `serve`)
    fn write_response(
        &mut self,
        response: Response<Body>,
        version: Version,
        is_head: bool,
        keep_alive: bool,
        tunnel: bool,
    ) -> io::Result<()> {
        let (parts, body) = response.into_parts();
        let written = self.write_parts(&parts, body, version, is_head, keep_alive, tunnel);
        // Its map, emptied, is the next request's: this connection's when
        // that request is here already, else the thread's spare.
        if self.buf.is_empty() || self.next_map.is_some() {
            header_maps::give(parts.headers);
        } else {
            self.next_map = header_maps::recycle(parts.headers);
        }
        written
    }

    fn write_parts(
        &mut self,
        parts: &http::response::Parts,
        mut body: Body,
        version: Version,
        is_head: bool,
        keep_alive: bool,
        tunnel: bool,
    ) -> io::Result<()> {
        let (conn, out) = (&*self.stream, &mut self.out);
        write_buf::take_for(out);
        let trailers = body.take_trailers_fn();
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
                flush_to(conn, out)?;
            }
            return Ok(());
        }
        match body.into_outgoing() {
            // Trailers need the chunked coding, even after a body in hand.
            Outgoing::Full(full) if trailers.is_some() && version != Version::HTTP_10 => {
                head(out, ResponseFraming::Chunked);
                if !is_head {
                    write_full_chunked(out, &full, trailers);
                }
                if out.len() >= 32 * 1024 {
                    flush_to(conn, out)?;
                }
                Ok(())
            }
            Outgoing::Full(full) => {
                head(out, ResponseFraming::Length(full.len() as u64));
                if is_head {
                    // Nothing more.
                } else if full.len() >= DIRECT_BODY {
                    // Written from where it is, behind what is pending, in
                    // one vectored write: the copy into the pending
                    // buffer cost more, and grew the buffer to its size.
                    let written = conn.write_all_two(out, &full);
                    out.clear();
                    written?;
                } else {
                    out.extend_from_slice(&full);
                }
                // Batched with the next pipelined responses unless it is big.
                if out.len() >= 32 * 1024 {
                    flush_to(conn, out)?;
                }
                Ok(())
            }
            Outgoing::Polled(mut polled) => {
                let framing = if version == Version::HTTP_10 {
                    ResponseFraming::Close
                } else {
                    polled
                        .exact_len()
                        .map_or(ResponseFraming::Chunked, ResponseFraming::Length)
                };
                head(out, framing);
                if is_head {
                    return match framing {
                        ResponseFraming::Close => {
                            flush_to(conn, out)?;
                            Err(ends_with_close())
                        }
                        _ => Ok(()),
                    };
                }
                write_polled(
                    &mut polled,
                    framing,
                    trailers,
                    out,
                    &mut |out: &mut Vec<u8>| flush_to(conn, out),
                )?;
                if framing == ResponseFraming::Close {
                    flush_to(conn, out)?;
                    return Err(ends_with_close());
                }
                Ok(())
            }
            Outgoing::Reader(mut reader) => {
                let mut c = conn;
                if version == Version::HTTP_10 {
                    // No chunked encoding in 1.0: stream and close.
                    head(out, ResponseFraming::Close);
                    flush_to(conn, out)?;
                    if !is_head {
                        io::copy(&mut reader, &mut c)?;
                    }
                    return Err(ends_with_close());
                }
                head(out, ResponseFraming::Chunked);
                flush_to(conn, out)?;
                if is_head {
                    return Ok(());
                }
                write_chunked(&mut reader, trailers, &mut c).map_err(ChunkedError::into_io)
            }
        }
    }
}

/// Smallest full body written straight from the handler's bytes rather
/// than copied behind its head (see `write_parts`).
const DIRECT_BODY: usize = 32 * 1024;

/// What a streamed HTTP/1.0 response returns once written: its end is the
/// connection's, so the connection loop closes.
fn ends_with_close() -> io::Error {
    io::Error::other("HTTP/1.0 stream ends with the connection")
}

/// A body in hand as one chunk, then the last chunk with `trailers`.
#[inline(never)]
fn write_full_chunked(out: &mut Vec<u8>, full: &[u8], trailers: Option<crate::body::TrailersFn>) {
    if !full.is_empty() {
        encode::chunk(out, full);
    }
    let trailers = trailers.and_then(|make| make());
    encode::last_chunk(out, trailers.as_ref());
}

/// An error answer: the status, no body, and the connection closes.
fn error_response(status: StatusCode) -> Vec<u8> {
    format!(
        "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes()
}

/// What reading a head came to. The request itself is filled in place.
enum Head {
    /// A request: whether the connection may be kept alive after it, and
    /// its body's reader (`None` when it has no body: the bytes past the
    /// head stay in the connection's buffer).
    Request(bool, Option<Arc<spindle::sync::Mutex<Incoming>>>),
    Closed,
    Error(StatusCode),
    /// The HTTP/2 preface on a plain connection's first bytes.
    Http2,
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
#[inline(never)] // its buffer stays off the connection fiber's hot frames
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
    drain_body(inc)
}

/// The rest of [`finish_body`], out of line: its buffer would otherwise be
/// part of `Conn::serve`'s frame, and every page of a frame is touched on
/// entry (stack probes) and stays resident for the connection's life.
#[inline(never)]
fn drain_body(inc: &mut Incoming) -> bool {
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
fn flush_to(conn: &Stream, out: &mut Vec<u8>) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let mut c = conn;
    let r = c.write_all(out);
    out.clear();
    r
}

/// Parses a complete head from `buf` (consuming it) into `request`, or
/// `None` if more bytes are needed.
fn parse(
    conn: &Arc<Stream>,
    buf: &mut ReadBuf,
    config: &ServerConfig,
    request: &mut Request<Body>,
    known_host: &mut KnownHost,
) -> Result<Option<Head>, StatusCode> {
    let limits = Limits {
        max_head_bytes: config.max_head_bytes,
        max_headers: config.max_headers,
        max_body_bytes: config.max_body_bytes,
    };
    // The head's syntax and framing rules are in `h1::request`.
    let Some(parsed) = parse_request(buf.bytes(), &limits, request, known_host)? else {
        return Ok(None);
    };
    buf.consume(parsed.head_len);
    let framing = match parsed.body {
        RequestBody::None => {
            // No body: nothing to share with the handler, and the rest of
            // the buffer (a pipelined request) stays where it is.
            return Ok(Some(Head::Request(parsed.keep_alive, None)));
        }
        RequestBody::Length(n) => BodyFraming::Length(n),
        RequestBody::Chunked => BodyFraming::Chunked,
    };
    let incoming = body_reader(conn, buf, framing, parsed.expect_continue, config);
    *request.body_mut() = Body::incoming(incoming.clone());
    Ok(Some(Head::Request(parsed.keep_alive, Some(incoming))))
}

/// The reader of a request's body, which takes the connection's buffer
/// (what follows the head). Out of line: the reader is built on the stack
/// before it moves to the heap, and that frame would otherwise be part of
/// the one the head is parsed under (see `serve`).
#[inline(never)]
fn body_reader(
    conn: &Arc<Stream>,
    buf: &mut ReadBuf,
    framing: BodyFraming,
    expect_continue: bool,
    config: &ServerConfig,
) -> Arc<spindle::sync::Mutex<Incoming>> {
    Arc::new(spindle::sync::Mutex::new(Incoming::new(
        conn.clone(),
        std::mem::take(buf),
        framing,
        config.max_body_bytes,
        expect_continue,
        config.body_read_timeout,
        std::time::Instant::now() + config.body_deadline,
    )))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use crate::{Body, Response, Server};

    /// Reads one `ok` answer off a keep-alive connection.
    fn answer(s: &mut std::net::TcpStream) {
        let mut got = Vec::new();
        let mut chunk = [0u8; 512];
        while !got.ends_with(b"\r\n\r\nok") {
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before the answer: {got:?}");
            got.extend_from_slice(&chunk[..n]);
        }
    }

    #[test]
    fn idle_keep_alive_connections_hold_no_read_buffer() {
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let addr = rt.run(|| {
            let server = Server::bind("127.0.0.1:0").unwrap();
            let addr = server.local_addr().unwrap();
            spindle::spawn(move || server.serve(|_| Response::new(Body::from("ok"))));
            addr
        });
        let mut idle = Vec::new();
        for _ in 0..20 {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            answer(&mut s);
            idle.push(s);
        }
        // Every connection is now waiting for its next request, on the one
        // worker whose buffer cache this looks at.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
        // And each still serves: the wait without a buffer loses nothing.
        for s in &mut idle {
            s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            answer(s);
        }
        // A request sent in pieces: the head waits for its rest holding
        // the buffer, then lets it go once answered.
        let s = &mut idle[0];
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        s.write_all(b"Host: a\r\n\r\n").unwrap();
        answer(s);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
    }
}
