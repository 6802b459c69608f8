//! A server's HTTP/2 connection: the connection's fiber drives `h2` and
//! hands each stream to a fiber of its own, which runs the handler.
//!
//! ```text
//! handshake (header_read_timeout)
//!   └─ loop: accept streams while fewer handlers run than streams may be
//!            open; otherwise only drive the connection (frames, windows)
//!            idle with no stream: keep_alive_timeout, then GOAWAY
//!            drain: GOAWAY, finish the streams in flight, close
//!   └─ end: handlers still running are cancelled and waited for
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};

use crate::body::Body;
use crate::config::ServerConfig;
use crate::gone::{ClientGone, StreamReset};
use crate::h2::io::Io;
use crate::h2::recv::{io_error, Failed, RecvBody};
use crate::h2::send::{send_body, strip_connection_headers};
use crate::serving::{Drain, Handler};

/// How long a connection that ends waits for its cancelled handlers.
const HANDLERS_GRACE: Duration = Duration::from_secs(1);

/// The handlers of one connection's streams, as the connection sees them.
#[derive(Default)]
struct Streams {
    /// Handlers running (not streams open: a stream the peer reset still
    /// counts until its handler returns).
    running: AtomicUsize,
    /// The connection's waker, for a handler that returns.
    conn: Mutex<Option<Waker>>,
    /// The running handlers' fibers, to cancel when the connection ends.
    fibers: Mutex<HashMap<u64, spindle::Fiber>>,
    /// The connection has ended: a handler not started yet does not start.
    ended: std::sync::atomic::AtomicBool,
}

impl Streams {
    fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Keeps `cx`'s waker for the next handler that returns.
    fn watch(&self, cx: &Context<'_>) {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        match &*conn {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => *conn = Some(cx.waker().clone()),
        }
    }

    /// A handler returned (or unwound).
    fn done(&self, fiber: Option<u64>) {
        if let Some(id) = fiber {
            self.fibers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        let waker = self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The connection has ended: no handler starts any more, and the
    /// running ones are cancelled.
    fn cancel_all(&self) {
        self.ended.store(true, Ordering::Release);
        let fibers: Vec<_> = self
            .fibers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for f in fibers {
            f.cancel();
        }
    }

    /// The connection has ended: cancels the handlers still running and
    /// waits a moment for them to leave.
    fn finish(&self) {
        self.cancel_all();
        let _ = crate::h2::recv::wait(Some(HANDLERS_GRACE), |cx| {
            self.watch(cx);
            if self.running() == 0 {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        });
    }
}

/// Serves HTTP/2 on `io` until the peer closes, the connection fails, it
/// idles out, or the server drains. Runs on the connection's fiber.
pub(crate) fn serve(io: Io, config: &ServerConfig, handler: &Arc<Handler>, drain: &Drain) {
    let streams = Arc::new(Streams::default());
    let config = Arc::new(config.clone());
    let ending = Ending(streams.clone());
    spindle::block_on(drive(io, &config, handler, drain, &streams));
    drop(ending);
}

/// Ends a connection's handlers however the connection ends: cancelled and
/// waited for when it closes, only cancelled when its fiber unwinds (a
/// drain past its deadline cancels it), since a wait cannot run then.
struct Ending(Arc<Streams>);

impl Drop for Ending {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.cancel_all();
        } else {
            self.0.finish();
        }
    }
}

fn builder(config: &ServerConfig) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(config.h2_max_concurrent_streams)
        .initial_window_size(config.h2_stream_window)
        .initial_connection_window_size(config.h2_connection_window)
        .max_frame_size(16 * 1024)
        .max_header_list_size(config.max_head_bytes.min(u32::MAX as usize) as u32)
        .max_send_buffer_size(config.h2_max_send_buffer)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(Some(1024));
    b
}

async fn drive(
    io: Io,
    config: &Arc<ServerConfig>,
    handler: &Arc<Handler>,
    drain: &Drain,
    streams: &Arc<Streams>,
) {
    // The handshake (the peer's preface and SETTINGS) under the head's
    // timeout, as an HTTP/1.1 request head.
    let handshake = builder(config).handshake::<_, Bytes>(io);
    let Some(Ok(mut conn)) = within(config.header_read_timeout, handshake).await else {
        return;
    };
    let watch = drain.watch();
    let mut draining = false;
    let mut idle: Option<Pin<Box<spindle::time::Sleep>>> = None;
    let max_running = config.h2_max_concurrent_streams as usize;
    let ended = std::future::poll_fn(|cx| loop {
        if !draining && watch.poll(cx) {
            draining = true;
            conn.graceful_shutdown();
        }
        streams.watch(cx);
        let polled = if streams.running() < max_running {
            conn.poll_accept(cx)
        } else {
            // As many handlers run as streams may be open: leave new
            // streams to `h2` (which refuses past its limit and sends
            // GOAWAY to a peer that resets too many unaccepted ones).
            conn.poll_closed(cx).map(|r| r.err().map(Err))
        };
        match polled {
            Poll::Ready(Some(Ok((req, respond)))) => {
                idle = None;
                spawn_stream(req, respond, config, handler, streams);
                continue;
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
            Poll::Ready(None) => return Poll::Ready(Ok(())),
            Poll::Pending => {}
        }
        // Idle: no stream open and no handler running.
        if streams.running() == 0 && !conn.has_streams() && !draining {
            let sleep = idle.get_or_insert_with(|| {
                Box::pin(spindle::time::sleep_future(config.keep_alive_timeout))
            });
            if sleep.as_mut().poll(cx).is_ready() {
                idle = None;
                draining = true;
                conn.graceful_shutdown();
                continue;
            }
        } else {
            idle = None;
        }
        return Poll::Pending;
    });
    let _ = ended.await;
}

/// `fut`, or `None` once `timeout` passes.
async fn within<F: Future>(timeout: Duration, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut sleep = pin!(spindle::time::sleep_future(timeout));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        sleep.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Runs the handler of one stream on a fiber of its own.
fn spawn_stream(
    req: Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    config: &Arc<ServerConfig>,
    handler: &Arc<Handler>,
    streams: &Arc<Streams>,
) {
    streams.running.fetch_add(1, Ordering::AcqRel);
    let (config, handler, mine) = (config.clone(), handler.clone(), streams.clone());
    let spawned = spindle::Builder::new().name("h2-stream").spawn(move || {
        let _running = Running::enter(mine);
        if _running.0.ended.load(Ordering::Acquire) {
            return; // the connection is gone already
        }
        run_stream(req, respond, &config, &*handler);
    });
    if spawned.is_err() {
        // No stack for a fiber: this stream is refused (`h2` resets a
        // stream whose response handle is dropped unanswered), the rest
        // go on.
        streams.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream's fiber, registered with its connection while it runs: it
/// registers itself, so it can neither leave before it is known nor stay
/// known after it left.
struct Running(Arc<Streams>);

impl Running {
    fn enter(streams: Arc<Streams>) -> Running {
        if let Some(me) = spindle::current() {
            streams
                .fibers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(me.id(), me);
        }
        Running(streams)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.done(spindle::current().map(|f| f.id()));
    }
}

/// One stream: the request to the handler, its response to the peer.
fn run_stream(
    req: Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    config: &ServerConfig,
    handler: &Handler,
) {
    let (parts, recv) = req.into_parts();
    if parts.headers.len() > config.max_headers {
        // As over HTTP/1.1 (`h2` bounds the bytes, this the count).
        let mut respond = respond;
        let too_many = status_only(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let _ = send_response(&mut respond, too_many, false, config.write_timeout);
        return;
    }
    let is_head = parts.method == Method::HEAD;
    let failed = Failed::default();
    let body = if recv.is_end_stream() {
        Body::empty()
    } else {
        Body::h2(RecvBody::new(
            recv,
            config.max_body_bytes,
            config.body_read_timeout,
            Instant::now() + config.body_deadline,
            Some(failed.clone()),
        ))
    };
    let mut req = Request::from_parts(parts, body);
    // The handler may watch for the stream's reset: it shares the response
    // handle while it runs.
    let (shared, mut own) = if config.watch_client_gone {
        let shared: Arc<StreamReset> = Arc::new(std::sync::Mutex::new(Some(respond)));
        req.extensions_mut().insert(ClientGone::h2(&shared));
        (Some(shared), None)
    } else {
        (None, Some(respond))
    };
    let response = match panic::catch_unwind(AssertUnwindSafe(|| handler(req))) {
        Ok(r) => r,
        Err(p) if p.is::<spindle::Cancelled>() => panic::resume_unwind(p),
        Err(_) => status_only(StatusCode::INTERNAL_SERVER_ERROR),
    };
    let taken = match &shared {
        Some(shared) => shared.lock().unwrap_or_else(|e| e.into_inner()).take(),
        None => own.take(),
    };
    let Some(mut respond) = taken else {
        return;
    };
    // A body the handler read past its limit, or too slowly: that is the
    // answer, whatever the handler returned.
    let failed = failed.lock().unwrap_or_else(|e| e.into_inner()).take();
    let response = match failed {
        Some(io::ErrorKind::FileTooLarge) => status_only(StatusCode::PAYLOAD_TOO_LARGE),
        Some(io::ErrorKind::TimedOut) => status_only(StatusCode::REQUEST_TIMEOUT),
        // The peer reset the stream or the connection went: nobody to tell.
        Some(io::ErrorKind::ConnectionReset) => return,
        Some(_) => status_only(StatusCode::BAD_REQUEST),
        None => response,
    };
    if send_response(&mut respond, response, is_head, config.write_timeout).is_err() {
        respond.send_reset(h2::Reason::INTERNAL_ERROR);
    }
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

/// Sends `response` on the stream: its head, then its body as the peer's
/// window allows.
fn send_response(
    respond: &mut h2::server::SendResponse<Bytes>,
    response: Response<Body>,
    is_head: bool,
    timeout: Duration,
) -> io::Result<()> {
    let (mut parts, body) = response.into_parts();
    strip_connection_headers(&mut parts.headers);
    if !parts.headers.contains_key(header::DATE) {
        if let Ok(date) = HeaderValue::from_bytes(&crate::date::now()) {
            parts.headers.insert(header::DATE, date);
        }
    }
    let status = parts.status;
    // RFC 9110 §6.4.1: these have no content, whatever the handler gave.
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let full = body.as_bytes().map(<[u8]>::len);
    if let Some(len) = full.map(|n| n as u64).or_else(|| body.exact_len()) {
        if !bodiless && !parts.headers.contains_key(header::CONTENT_LENGTH) {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
    let end_now = bodiless || is_head || (full == Some(0) && !body.has_trailers());
    let head = Response::from_parts(parts, ());
    let mut send = respond.send_response(head, end_now).map_err(io_error)?;
    if end_now {
        return Ok(());
    }
    send_body(&mut send, body, timeout)
}
