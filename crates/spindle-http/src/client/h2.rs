//! The client's HTTP/2 connections: at most one per origin, shared by every
//! request to it, each request a stream its caller's fiber parks on.
//!
//! # One connection per origin
//!
//! An origin the client may speak HTTP/2 to (`https://` while ALPN offers
//! `h2`, `http://` with prior knowledge) has a slot. The first request
//! dials under the slot's dial lock (a fiber-aware mutex); requests that
//! come meanwhile wait on the lock instead of dialing too, so a fan-out of
//! a hundred requests opens one connection. If ALPN settles on HTTP/1.1,
//! the slot remembers it and the origin's later requests go to the
//! HTTP/1.1 pool without waiting.
//!
//! A connection is driven by a fiber of its own (a thread when the client
//! is used off any runtime) until it ends: its peer's GOAWAY, an error, or
//! the client dropped (every `SendRequest` gone). The slot then forgets it
//! and the next request dials again.
//!
//! # Retries
//!
//! Only what the protocol says was not processed: a stream refused
//! (`REFUSED_STREAM`, RFC 9113 §8.7) or never opened (the connection was
//! gone before the request got onto it) is sent again on a new connection,
//! whatever its method; a stream cut by a GOAWAY or a lost connection is
//! sent again only when its method is idempotent and its body in memory.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, Response};

use super::exchange::Limits;
use super::pool::Origin;
use crate::body::Body;
use crate::error::{Error, ErrorKind};
use crate::h2::io::Io;
use crate::h2::recv::{io_error, wait, RecvBody};
use crate::h2::send::{send_body, strip_connection_headers};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// An open HTTP/2 connection, as its requests see it.
#[derive(Clone)]
pub(super) struct Connection {
    send: h2::client::SendRequest<Bytes>,
    id: u64,
    /// Set by the driver when the connection has ended.
    ended: Arc<AtomicBool>,
}

/// What the origin's slot says to do with a request.
pub(super) enum Route {
    /// Send it on this HTTP/2 connection.
    Http2(Connection),
    /// HTTP/1.1: on this fresh connection (the dial just made, whose ALPN
    /// said `http/1.1`), or the pool's.
    Http1(Option<crate::stream::Stream>),
}

/// What a new connection turned out to be.
pub(super) enum Dialed {
    Http1(crate::stream::Stream),
    Http2(Io),
}

/// One origin's HTTP/2 state.
#[derive(Default)]
struct Slot {
    /// Held while dialing, so concurrent requests share one dial.
    dial: spindle::sync::Mutex<()>,
    conn: Mutex<Option<Connection>>,
    /// ALPN chose HTTP/1.1 here: the origin's requests skip this slot.
    http1: AtomicBool,
}

impl Slot {
    fn live(&self) -> Option<Connection> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.as_ref()
            .filter(|c| !c.ended.load(Ordering::Acquire))
            .cloned()
    }
}

/// The HTTP/2 connections of one client (and its clones), by origin.
#[derive(Clone, Default)]
pub(super) struct Connections {
    slots: Arc<Mutex<HashMap<Origin, Arc<Slot>>>>,
}

impl Connections {
    fn slot(&self, origin: &Origin) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(origin.clone()).or_default().clone()
    }

    /// Where a request to `origin` goes; `dial` makes a new connection
    /// when there is none (once, for every request waiting).
    pub(super) fn route(
        &self,
        origin: &Origin,
        dial: impl FnOnce() -> Result<Dialed, Error>,
    ) -> Result<Route, Error> {
        let slot = self.slot(origin);
        if slot.http1.load(Ordering::Acquire) {
            return Ok(Route::Http1(None));
        }
        if let Some(c) = slot.live() {
            return Ok(Route::Http2(c));
        }
        let _dialing = slot.dial.lock();
        if let Some(c) = slot.live() {
            return Ok(Route::Http2(c)); // dialed while this one waited
        }
        if slot.http1.load(Ordering::Acquire) {
            return Ok(Route::Http1(None));
        }
        match dial()? {
            Dialed::Http1(stream) => {
                slot.http1.store(true, Ordering::Release);
                Ok(Route::Http1(Some(stream)))
            }
            Dialed::Http2(io) => {
                let conn = start(io, Arc::downgrade(&slot))?;
                *slot.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
                Ok(Route::Http2(conn))
            }
        }
    }

    /// Forgets `conn` (a request found it unusable), so the next request
    /// dials anew.
    pub(super) fn forget(&self, origin: &Origin, conn: &Connection) {
        let slot = self.slot(origin);
        let mut current = slot.conn.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| c.id == conn.id) {
            *current = None;
        }
    }
}

/// The HTTP/2 handshake on `io`, and the driver of the connection started.
fn start(io: Io, slot: std::sync::Weak<Slot>) -> Result<Connection, Error> {
    let handshake = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_header_list_size(64 << 10)
        .max_send_buffer_size(400 << 10)
        .enable_push(false)
        .handshake::<_, Bytes>(io);
    let (send, driver) =
        spindle::block_on(handshake).map_err(|e| Error::new(ErrorKind::Connect, io_error(e)))?;
    let ended = Arc::new(AtomicBool::new(false));
    let conn = Connection {
        send,
        id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
        ended: ended.clone(),
    };
    let id = conn.id;
    let drive = move || {
        let _ = spindle::block_on(driver);
        ended.store(true, Ordering::Release);
        if let Some(slot) = slot.upgrade() {
            let mut current = slot.conn.lock().unwrap_or_else(|e| e.into_inner());
            if current.as_ref().is_some_and(|c| c.id == id) {
                *current = None;
            }
        }
    };
    let started = if spindle::current().is_some() {
        spindle::Builder::new()
            .name("h2-client-conn")
            .spawn(drive)
            .map(drop)
    } else {
        std::thread::Builder::new()
            .name("spindle-h2-client".into())
            .spawn(drive)
            .map(drop)
    };
    started.map_err(|e| Error::new(ErrorKind::Io, e))?;
    Ok(conn)
}

/// How a request on an HTTP/2 connection failed.
pub(super) enum Failure {
    /// Not processed by the server (refused, or never sent): safe to send
    /// again, whatever the method.
    Unprocessed(Error),
    /// Cut by a GOAWAY or a lost connection: maybe processed.
    Lost(Error),
    /// Anything else: the answer.
    Other(Error),
}

impl Failure {
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Unprocessed(e) | Failure::Lost(e) | Failure::Other(e) => e,
        }
    }
}

/// Sends `parts` with `body` on `conn` and waits for the response head;
/// the body is read as the caller reads it.
pub(super) fn request(
    conn: &Connection,
    limits: &Limits,
    parts: &http::request::Parts,
    body: Body,
) -> Result<Response<Body>, Failure> {
    let deadline = limits.request_timeout.map(|t| Instant::now() + t);
    let left = || match deadline {
        Some(d) => d
            .saturating_duration_since(Instant::now())
            .min(limits.io_timeout),
        None => limits.io_timeout,
    };
    let mut send = conn.send.clone();
    // Wait until the connection may open one more stream.
    let ready = wait(Some(left()), |cx| send.poll_ready(cx).map_err(io_error));
    if let Err(e) = ready {
        return Err(if e.kind() == io::ErrorKind::TimedOut {
            Failure::Other(Error::new(ErrorKind::Timeout, e))
        } else {
            Failure::Unprocessed(Error::from_exchange(e))
        });
    }
    let head = head_of(parts).map_err(Failure::Other)?;
    let end = body.is_end() && !body.has_trailers();
    // A body in memory can be sent again; a streamed one cannot.
    let replayable = body.as_bytes().is_some();
    let (response, mut stream) = match send.send_request(head, end) {
        Ok(r) => r,
        Err(e) => return Err(Failure::Unprocessed(Error::from_exchange(io_error(e)))),
    };
    if !end {
        if body.as_bytes().is_some() {
            send_body(&mut stream, body, limits.io_timeout)
                .map_err(|e| classify(e, &parts.method, true))?;
        } else {
            // A streamed body goes out from a fiber of its own while this
            // one waits for the answer (which may come first).
            let timeout = limits.io_timeout;
            let pump = move || {
                let mut stream = stream;
                if send_body(&mut stream, body, timeout).is_err() {
                    stream.send_reset(h2::Reason::CANCEL);
                }
            };
            spindle::Builder::new()
                .name("h2-client-body")
                .spawn(pump)
                .map_err(|e| Failure::Other(Error::new(ErrorKind::Io, e)))?;
        }
    }
    let mut response = response;
    let head = wait(Some(left()), |cx| {
        Pin::new(&mut response).poll(cx).map_err(io_error)
    })
    .map_err(|e| classify(e, &parts.method, replayable))?;
    let (head, recv) = head.into_parts();
    if let Some(len) = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| crate::h1::framing::parse_content_length(v.as_bytes()))
    {
        if len > limits.max_response_bytes {
            return Err(Failure::Other(Error::new(
                ErrorKind::BodyTooLarge,
                io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    "response body larger than the limit",
                ),
            )));
        }
    }
    let body = if recv.is_end_stream() {
        Body::empty()
    } else {
        let until = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        Body::h2(RecvBody::new(
            recv,
            limits.max_response_bytes,
            limits.io_timeout,
            until,
            None,
        ))
    };
    Ok(Response::from_parts(head, body))
}

/// Sorts an error of a stream by what it says of the request's fate.
fn classify(e: io::Error, method: &Method, replayable: bool) -> Failure {
    let reason = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<h2::Error>())
        .map(|h| (h.reason(), h.is_go_away(), h.is_remote()));
    let error = Error::from_exchange(e);
    match reason {
        Some((Some(h2::Reason::REFUSED_STREAM), false, _)) => Failure::Unprocessed(error),
        Some((_, true, _)) if method.is_idempotent() && replayable => Failure::Lost(error),
        None if method.is_idempotent()
            && replayable
            && matches!(error.kind(), ErrorKind::Closed) =>
        {
            Failure::Lost(error)
        }
        _ => Failure::Other(error),
    }
}

/// The request head as `h2` takes it: the absolute URI gives `:scheme` and
/// `:authority`; `Host` and the connection-specific headers go.
fn head_of(parts: &http::request::Parts) -> Result<Request<()>, Error> {
    let mut head = Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .version(http::Version::HTTP_2)
        .body(())
        .map_err(super::invalid_request)?;
    *head.headers_mut() = parts.headers.clone();
    let headers = head.headers_mut();
    strip_connection_headers(headers);
    headers.remove(header::HOST);
    Ok(head)
}
