//! Answers and bodies, for both worlds: the host's own plain answers and
//! how a guest's failure is told; the request body as a guest reads it
//! (pumped from the connection by a fiber of its own); and the response
//! body as the connection reads it — taken whole when the guest has
//! written it all ([`take_ready`]), else streamed ([`StreamingBody`]).
//!
//! A response body is written by a [`Writer`]: for WASI 0.2 the guest call
//! itself, which the request's fiber drives as it reads (`proxy`); for
//! WASI 0.3 an instance's event loop on another fiber, which the reader
//! only waits for, up to the request's deadline (`service`). The two
//! differ only there; the reading is this module's, once.

use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use spindle_http::{Body, Response, StatusCode};

use crate::report::Outcome;

/// How much of a guest's body is taken whole before streaming instead.
const WHOLE_BODY_LIMIT: usize = 256 * 1024;

/// Request bodies are pumped in pieces of this size.
const PUMP_CHUNK: usize = 16 * 1024;

/// The status logged for a request whose client left before its answer
/// (nginx's "client closed request"; not sent, nobody is there).
pub(crate) const CLIENT_CLOSED: StatusCode = match StatusCode::from_u16(499) {
    Ok(s) => s,
    Err(_) => unreachable!(),
};

/// The host's own answer: `status` with `text` as a plain-text body.
pub(crate) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(format!("{text}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// The answer to a request whose guest failed, by how it failed: 504 past
/// the deadline, 500 otherwise, with a body that says which (the log line
/// says more).
pub(crate) fn failure(outcome: Outcome) -> Response<Body> {
    match outcome {
        Outcome::Deadline => plain(StatusCode::GATEWAY_TIMEOUT, "guest deadline exceeded"),
        Outcome::FuelExhausted => plain(StatusCode::INTERNAL_SERVER_ERROR, "guest ran out of fuel"),
        Outcome::MemoryLimit => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "guest exceeded its memory limit",
        ),
        Outcome::Trap => plain(StatusCode::INTERNAL_SERVER_ERROR, "guest trapped"),
        // Nobody reads it; the status is for the access log (nginx's 499).
        Outcome::ClientClosed => plain(CLIENT_CLOSED, "client closed the connection"),
        // The process's shared instance pool is full (see `EngineShare`).
        Outcome::Busy => plain(StatusCode::SERVICE_UNAVAILABLE, "server busy"),
        _ => plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed"),
    }
}

/// How a failed guest call ended, for the observer: `memory_hit` when the
/// store's limiter refused the guest memory during the call.
pub(crate) fn classify(e: &wasmtime::Error, memory_hit: bool) -> Outcome {
    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        return Outcome::Busy;
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => Outcome::FuelExhausted,
        _ if memory_hit => Outcome::MemoryLimit,
        Some(_) => Outcome::Trap,
        None => Outcome::Failed,
    }
}

/// One log line for a failed guest call: the trap, or the root cause.
pub(crate) fn describe(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => format!("guest trapped: {trap}"),
        None => format!("guest failed: {}", e.root_cause()),
    }
}

/// The request body as the guest sees it: nothing, or a channel that a
/// pump fiber fills from the connection.
pub(crate) fn request_body(body: Body) -> wasmtime_wasi_http::p2::body::HyperIncomingBody {
    if body.is_end() {
        // Nothing to pump (a GET): no fiber for it.
        return Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, String>>(4);
    let spawned = spindle::Builder::new()
        .name("wasm-body-pump")
        .spawn(move || pump(body, tx));
    if spawned.is_err() {
        let (tx, rx2) = tokio::sync::mpsc::channel(1);
        let _ = tx.try_send(Err("no fiber to read the request body".to_string()));
        return PumpedBody { rx: rx2 }.boxed_unsync();
    }
    PumpedBody { rx }.boxed_unsync()
}

/// On its own fiber: reads the request body from the connection, blocking
/// style, into the channel the guest reads (parking while it is full).
fn pump(mut body: Body, tx: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, String>>) {
    loop {
        let mut buf = BytesMut::zeroed(PUMP_CHUNK);
        let item = match body.read(&mut buf) {
            Ok(0) => {
                // The client's trailers follow the data, for the guest.
                if let Ok(Some(trailers)) = body.trailers() {
                    let _ = spindle::block_on(tx.send(Ok(Frame::trailers(trailers))));
                }
                return;
            }
            Ok(n) => {
                buf.truncate(n);
                Ok(Frame::data(buf.freeze()))
            }
            Err(e) => Err(e.to_string()),
        };
        let failed = item.is_err();
        if spindle::block_on(tx.send(item)).is_err() || failed {
            return; // the guest is gone, or the body is broken
        }
    }
}

struct PumpedBody {
    rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, String>>,
}

impl http_body::Body for PumpedBody {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|item| {
            item.map(|r| {
                r.map_err(|e| {
                    wasmtime_wasi_http::Error::InternalError(Some(format!("request body: {e}")))
                })
            })
        })
    }
}

/// Whatever writes a guest's response body, as its reader sees it.
pub(crate) trait Writer {
    /// Whether [`drive`](Writer::drive) runs guest code. Such a poll is
    /// made inside `spindle::block_on`, so that a host import waiting
    /// under it polls in place instead of switching fibers with wasm
    /// frames on the stack; otherwise a plain context does.
    const DRIVES_GUEST: bool;

    /// Runs the writer a step before the body is polled.
    fn drive(&mut self, cx: &mut Context<'_>);

    /// The body has nothing now: `Ready(why)` if nothing more will come
    /// (the call failed, the deadline passed), else `Pending` with `cx`
    /// woken when that may change.
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<String>;

    /// Reading the body failed with `why` (logged, or the call ended).
    fn failed(&mut self, why: &str);
}

/// The body's next piece: `Ok(None)` at its end; trailers, kept in
/// `trailers`, carry no data: an empty piece.
fn poll_piece<B, W>(
    body: &mut B,
    writer: &mut W,
    trailers: &Trailers,
    cx: &mut Context<'_>,
) -> Poll<Result<Option<Bytes>, String>>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
    W: Writer,
{
    writer.drive(cx);
    match Pin::new(body).poll_frame(cx) {
        Poll::Ready(Some(Ok(frame))) => Poll::Ready(Ok(Some(match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                keep_trailers(trailers, frame);
                Bytes::new()
            }
        }))),
        Poll::Ready(Some(Err(e))) => Poll::Ready(Err(format!("response body: {e:?}"))),
        Poll::Ready(None) => Poll::Ready(Ok(None)),
        Poll::Pending => writer.poll_stalled(cx).map(Err),
    }
}

/// The frames the guest has written already, without waiting for more:
/// `Ok(true)` if that was the whole body.
///
/// When a look finds nothing more, `look_again(took, have)` (`took`:
/// whether that look took anything; `have`: the bytes taken so far) may
/// wait for the writer and says whether to look again:
/// a WASI 0.3 guest usually returns its response first and writes the
/// body from a task of its own a turn later in its instance's loop, and a
/// small body that makes it in time still goes out with a
/// `Content-Length`, in one write with the head (`service/rests.rs`).
///
/// The frames are kept as they came while there is one: the usual small
/// body is a single frame, handed on without a copy (and without an
/// allocation growing under this, a frame deeper on the request fiber's
/// stack); a second frame starts a copy.
#[inline(never)]
pub(crate) fn take_ready<B, W>(
    body: &mut B,
    writer: &mut W,
    trailers: &Trailers,
    mut look_again: impl FnMut(bool, usize) -> bool,
) -> (Bytes, Result<bool, String>)
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
    W: Writer,
{
    let mut first = Bytes::new();
    let mut more: Option<BytesMut> = None;
    loop {
        let mut took = false;
        // Frames until the body has nothing now: Some(whole?) to stop.
        let mut sweep = |cx: &mut Context<'_>| -> Option<Result<bool, String>> {
            loop {
                writer.drive(cx);
                match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        let data = match frame.into_data() {
                            Ok(data) => data,
                            Err(frame) => {
                                keep_trailers(trailers, frame);
                                took = true;
                                continue; // trailers carry no data
                            }
                        };
                        took = true;
                        let len = if first.is_empty() && more.is_none() {
                            first = data;
                            first.len()
                        } else {
                            let copy = more.get_or_insert_with(|| BytesMut::from(&first[..]));
                            copy.extend_from_slice(&data);
                            copy.len()
                        };
                        if len > WHOLE_BODY_LIMIT {
                            return Some(Ok(false));
                        }
                    }
                    Poll::Ready(Some(Err(e))) => return Some(Err(format!("response body: {e:?}"))),
                    Poll::Ready(None) => return Some(Ok(true)),
                    Poll::Pending => return None,
                }
            }
        };
        let stop = if W::DRIVES_GUEST {
            spindle::block_on(std::future::poll_fn(|cx| Poll::Ready(sweep(cx))))
        } else {
            sweep(&mut Context::from_waker(Waker::noop()))
        };
        let result = match stop {
            Some(result) => result,
            None if look_again(took, more.as_ref().map_or(first.len(), |m| m.len())) => continue,
            None => Ok(false),
        };
        return (more.map_or(first, BytesMut::freeze), result);
    }
}

/// A response body the guest is still writing: each read waits for its
/// writer's next piece (driving it, for WASI 0.2).
pub(crate) struct StreamingBody<B, W> {
    body: B,
    writer: W,
    pending: Bytes,
    done: bool,
    trailers: Trailers,
    /// The guest's `Content-Length`, when it gave a valid one.
    length: Option<u64>,
}

impl<B, W> StreamingBody<B, W>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: std::fmt::Debug,
    W: Writer + Unpin + Send + 'static,
{
    /// The rest of `body`, after `taken` (what [`take_ready`] took, with
    /// the trailers it saw), as the response's body: read on as the
    /// connection sends it, then its trailers.
    ///
    /// A writer on another fiber (WASI 0.3's instance loop) is polled by
    /// the connection: sent with the guest's `Content-Length` (`headers`)
    /// when it declared one, and the head goes out together with the
    /// first piece when that is ready. A writer that runs the guest under
    /// the reader (WASI 0.2) is read inside `spindle::block_on` only, so
    /// it stays a reader, sent chunked.
    pub(crate) fn body(
        body: B,
        writer: W,
        taken: Bytes,
        trailers: Trailers,
        headers: &http::HeaderMap,
    ) -> Body {
        let mut streaming = StreamingBody {
            body,
            writer,
            pending: taken,
            done: false,
            trailers,
            length: None,
        };
        if W::DRIVES_GUEST {
            let sent = streaming.trailers.clone();
            return Body::from_reader(streaming)
                .with_trailers(move || sent.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
        streaming.length = declared_length(headers);
        Body::from_http_body(streaming)
    }

    /// The next piece, waiting for it: `Ok(None)` at the end.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            if !self.pending.is_empty() {
                return Poll::Ready(Ok(Some(std::mem::take(&mut self.pending))));
            }
            if self.done {
                return Poll::Ready(Ok(None));
            }
            let (body, writer, trailers) = (&mut self.body, &mut self.writer, &self.trailers);
            match poll_piece(body, writer, trailers, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Some(data))) => self.pending = data,
                Poll::Ready(Ok(None)) => self.done = true,
                Poll::Ready(Err(why)) => {
                    self.writer.failed(&why);
                    return Poll::Ready(Err(io::Error::other(why)));
                }
            }
        }
    }
}

/// A single valid `Content-Length` among `headers` (RFC 9110 §8.6).
pub(crate) fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(http::header::CONTENT_LENGTH).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = first.to_str().ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Polled by the connection (WASI 0.3): its data, then its trailers.
impl<B, W> http_body::Body for StreamingBody<B, W>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: std::fmt::Debug,
    W: Writer + Unpin + Send + 'static,
{
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        match this.poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(data))) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Poll::Ready(Ok(None)) => {
                let fields = this
                    .trailers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                Poll::Ready(fields.map(|f| Ok(Frame::trailers(f))))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.length {
            Some(n) => http_body::SizeHint::with_exact(n),
            None => http_body::SizeHint::default(),
        }
    }
}

/// Trailer fields seen at the end of a body one side reads (a guest's
/// response, its outgoing request), kept for the side that sends them on.
pub(crate) type Trailers = std::sync::Arc<std::sync::Mutex<Option<http::HeaderMap>>>;

fn keep_trailers(trailers: &Trailers, frame: Frame<Bytes>) {
    if let Ok(fields) = frame.into_trailers() {
        *trailers.lock().unwrap_or_else(|e| e.into_inner()) = Some(fields);
    }
}

/// A whole body taken by [`take_ready`], with its trailers if it had some.
pub(crate) fn whole(taken: Bytes, trailers: &Trailers) -> Body {
    let body = Body::from(taken);
    match trailers.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(fields) => body.with_trailers(move || Some(fields)),
        None => body,
    }
}

/// Read by the connection (WASI 0.2), each read under `spindle::block_on`.
impl<B, W> Read for StreamingBody<B, W>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: std::fmt::Debug,
    W: Writer + Unpin + Send + 'static,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() {
            match spindle::block_on(std::future::poll_fn(|cx| self.poll_next(cx)))? {
                Some(data) => self.pending = data,
                None => return Ok(0),
            }
        }
        let n = self.pending.len().min(buf.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn a_declared_length_is_one_value_of_digits() {
        let of = |values: &[&str]| {
            let mut h = http::HeaderMap::new();
            for v in values {
                h.append(http::header::CONTENT_LENGTH, v.parse().unwrap());
            }
            declared_length(&h)
        };
        assert_eq!(of(&["13"]), Some(13));
        assert_eq!(of(&["0"]), Some(0));
        assert_eq!(of(&[]), None);
        assert_eq!(of(&["13", "13"]), None);
        assert_eq!(of(&["+13"]), None);
        assert_eq!(of(&["1 3"]), None);
        assert_eq!(of(&[""]), None);
        assert_eq!(of(&["99999999999999999999999"]), None);
    }

    /// A writer on another fiber, as WASI 0.3's instance loop is.
    struct Elsewhere;

    impl Writer for Elsewhere {
        const DRIVES_GUEST: bool = false;
        fn drive(&mut self, _cx: &mut Context<'_>) {}
        fn poll_stalled(&mut self, _cx: &mut Context<'_>) -> Poll<String> {
            Poll::Pending
        }
        fn failed(&mut self, _why: &str) {}
    }

    /// A body the guest still writes, with its `Content-Length`: sent with
    /// it, the head first while the rest is awaited, then the rest when it
    /// comes (from another thread, as the instance's fiber may run there).
    #[test]
    fn a_streamed_guest_body_keeps_its_content_length() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, String>>(4);
        let rx = std::sync::Mutex::new(Some(rx));
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let addr = rt.run(move || {
            let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
            let addr = server.local_addr().unwrap();
            spindle::spawn(move || {
                server.serve(move |_req| {
                    let rx = rx.lock().unwrap().take().expect("one request");
                    let mut headers = http::HeaderMap::new();
                    headers.insert(http::header::CONTENT_LENGTH, "11".parse().unwrap());
                    let body = StreamingBody::body(
                        PumpedBody { rx },
                        Elsewhere,
                        Bytes::from_static(b"hello "),
                        Trailers::default(),
                        &headers,
                    );
                    let mut r = Response::new(body);
                    *r.headers_mut() = headers;
                    r
                })
            });
            addr
        });
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        // The head and what was taken, before the rest is written.
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        while !seen.ends_with(b"hello ") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "closed early: {seen:?}");
            seen.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&seen).into_owned();
        assert!(head.contains("content-length: 11\r\n"), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        let writer = std::thread::spawn(move || {
            tx.blocking_send(Ok(Frame::data(Bytes::from_static(b"world"))))
                .unwrap();
        });
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"world");
        writer.join().unwrap();
    }
}
