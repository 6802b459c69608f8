//! [`Body`]: request bodies streamed from the connection, response bodies
//! whole or streamed.

use crate::h1::decode::{Decoder, Source};
use crate::h1::framing::BodyFraming;
use crate::h2::recv::RecvBody;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use spindle::sync::Mutex;

use bytes::{Buf, Bytes};
use http::HeaderMap;

use crate::read_buf::ReadBuf;
use crate::stream::Stream;

/// An HTTP message body.
///
/// A request's body reads from the connection as the handler asks for it
/// (`Read`), de-chunking if needed and enforcing the size limit. A
/// response's body is whole (`From<String>`, `From<Vec<u8>>`, …: sent with
/// `Content-Length`), a reader (`Body::from_reader`: sent chunked), or an
/// [`http_body::Body`] (`Body::from_http_body`: sent with `Content-Length`
/// when its size is known exactly, else chunked).
///
/// ```
/// use std::io::Read;
/// let mut b = spindle_http::Body::from("hello");
/// let mut s = String::new();
/// b.read_to_string(&mut s).unwrap();
/// assert_eq!(s, "hello");
/// ```
pub struct Body {
    kind: Kind,
    /// Trailer fields to send after the body, made when it has been sent.
    trailers: Option<TrailersFn>,
}

/// What makes a body's trailer fields once the body has been sent.
pub(crate) type TrailersFn = Box<dyn FnOnce() -> Option<HeaderMap> + Send>;

/// A body read from a connection that may end with trailer fields (a
/// client's HTTP/1.1 response body).
pub(crate) trait Trailing: Read + Send {
    /// The trailers, once the body has been read to its end.
    fn take_trailers(&mut self) -> Option<HeaderMap>;
}

enum Kind {
    Full(Bytes),
    Reader(Box<dyn Read + Send>),
    Incoming(Arc<Mutex<Incoming>>),
    /// An HTTP/2 stream's body.
    H2(Box<RecvBody>),
    /// A connection's body with trailers of its own.
    Trailing(Box<dyn Trailing>),
    /// Another body, each read reported to an observer.
    Observed(Box<Body>, Box<dyn FnMut(usize) + Send>),
    /// An `http_body::Body`, polled for its frames.
    Polled(Box<Polled>),
}

impl Body {
    /// An empty body.
    pub fn empty() -> Body {
        Body::of(Kind::Full(Bytes::new()))
    }

    /// A body streamed from `reader`, sent with chunked encoding.
    pub fn from_reader(reader: impl Read + Send + 'static) -> Body {
        Body::of(Kind::Reader(Box::new(reader)))
    }

    /// A body read from `body`'s frames: its data, then its trailers. A
    /// server sends it with `Content-Length` when the body's size hint is
    /// exact (and then without trailers, which only the chunked coding
    /// carries), else chunked; the response head goes out with the first
    /// data that is ready, or alone as soon as the body has none ready. A
    /// body that ends short of its exact size, fails or panics cuts the
    /// response off, and one that runs past its size is cut at it: the
    /// connection closes, so the client sees a truncated message rather
    /// than a wrong one. Over HTTP/2 the exact size becomes the
    /// `content-length` field unless the response has one.
    ///
    /// ```
    /// use std::io::Read;
    /// use spindle_http::http_body::{Body as _, Frame, SizeHint};
    /// use std::pin::Pin;
    /// use std::task::{Context, Poll};
    ///
    /// /// "hello", then trailers, one frame per poll.
    /// struct Hello(u8);
    /// impl spindle_http::http_body::Body for Hello {
    ///     type Data = bytes::Bytes;
    ///     type Error = std::io::Error;
    ///     fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>)
    ///         -> Poll<Option<Result<Frame<bytes::Bytes>, std::io::Error>>> {
    ///         self.0 += 1;
    ///         Poll::Ready(match self.0 {
    ///             1 => Some(Ok(Frame::data(bytes::Bytes::from_static(b"hello")))),
    ///             2 => Some(Ok(Frame::trailers(http::HeaderMap::new()))),
    ///             _ => None,
    ///         })
    ///     }
    ///     fn size_hint(&self) -> SizeHint { SizeHint::with_exact(5) }
    /// }
    ///
    /// let mut body = spindle_http::Body::from_http_body(Hello(0));
    /// let mut s = String::new();
    /// body.read_to_string(&mut s).unwrap();
    /// assert_eq!(s, "hello");
    /// assert!(body.trailers().unwrap().is_some());
    /// ```
    pub fn from_http_body<B>(body: B) -> Body
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Body::of(Kind::Polled(Box::new(Polled {
            body: Box::pin(body),
            rest: Bytes::new(),
            trailers: TrailerSlot::default(),
            done: false,
            observe: None,
        })))
    }

    fn of(kind: Kind) -> Body {
        Body {
            kind,
            trailers: None,
        }
    }

    /// The same body, followed by the trailer fields `trailers` makes once
    /// the body has been sent (`None`: no trailers after all). They go out
    /// as HTTP/2 trailers, or in HTTP/1.1's chunked coding (a body with
    /// trailers is sent chunked); a `HEAD` response or one without content
    /// drops them. gRPC puts its status there.
    ///
    /// ```
    /// use spindle_http::{Body, http::HeaderMap};
    /// let mut body = Body::from("data").with_trailers(|| {
    ///     let mut t = HeaderMap::new();
    ///     t.insert("grpc-status", "0".parse().unwrap());
    ///     Some(t)
    /// });
    /// assert_eq!(body.trailers().unwrap().unwrap()["grpc-status"], "0");
    /// ```
    pub fn with_trailers(
        mut self,
        trailers: impl FnOnce() -> Option<HeaderMap> + Send + 'static,
    ) -> Body {
        self.trailers = Some(Box::new(trailers));
        self
    }

    /// The trailer fields that followed the body, once it has been read to
    /// its end: an HTTP/2 stream's trailers, an HTTP/1.1 chunked body's
    /// (without the fields that may not be trailers, such as framing).
    /// `Ok(None)` before the end, or when there were none. For a body made
    /// here with [`with_trailers`](Self::with_trailers), what that makes.
    pub fn trailers(&mut self) -> io::Result<Option<HeaderMap>> {
        if let Some(make) = self.trailers.take() {
            return Ok(make());
        }
        match &mut self.kind {
            Kind::Full(_) | Kind::Reader(_) => Ok(None),
            Kind::Polled(p) if p.done => Ok(p.take_trailers()),
            Kind::Polled(_) => Ok(None),
            Kind::Observed(inner, _) => inner.trailers(),
            Kind::Incoming(i) => Ok(i.lock().take_trailers()),
            Kind::H2(r) if r.is_end() => r.trailers(),
            Kind::H2(_) => Ok(None),
            Kind::Trailing(t) => Ok(t.take_trailers()),
        }
    }

    /// Whether trailers are to be sent after this body.
    pub(crate) fn has_trailers(&self) -> bool {
        match &self.kind {
            Kind::Observed(inner, _) => self.trailers.is_some() || inner.has_trailers(),
            // Known only at its end.
            Kind::Polled(_) => true,
            _ => self.trailers.is_some(),
        }
    }

    /// The trailers to send after this body, taken out of it.
    pub(crate) fn take_trailers_fn(&mut self) -> Option<TrailersFn> {
        match &mut self.kind {
            Kind::Observed(inner, _) if self.trailers.is_none() => inner.take_trailers_fn(),
            // Asked for once the body was sent: what its last frame held.
            Kind::Polled(p) if self.trailers.is_none() => {
                let slot = p.trailers.clone();
                Some(Box::new(move || take_kept(&slot)))
            }
            _ => self.trailers.take(),
        }
    }

    /// The same body, `observe` told how many bytes each read of it gave
    /// (a meter of bytes in or out); its trailers, either way, are kept. A
    /// body in memory stays one: observe it by its length instead.
    ///
    /// ```
    /// use std::io::Read;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let meter = seen.clone();
    /// let mut body = spindle_http::Body::from_reader(&b"hello"[..])
    ///     .observe(move |n| { meter.fetch_add(n, Ordering::Relaxed); });
    /// body.read_to_end(&mut Vec::new()).unwrap();
    /// assert_eq!(seen.load(Ordering::Relaxed), 5);
    /// ```
    pub fn observe(mut self, observe: impl FnMut(usize) + Send + 'static) -> Body {
        match &mut self.kind {
            Kind::Full(_) => return self,
            // Still polled, so still framed by its size (counted as its
            // frames come).
            Kind::Polled(p) => {
                p.observe = Some(match p.observe.take() {
                    None => Box::new(observe),
                    Some(mut before) => {
                        let mut observe = observe;
                        Box::new(move |n| {
                            before(n);
                            observe(n);
                        })
                    }
                });
                return self;
            }
            _ => {}
        }
        Body::of(Kind::Observed(Box::new(self), Box::new(observe)))
    }

    pub(crate) fn trailing(t: Box<dyn Trailing>) -> Body {
        Body::of(Kind::Trailing(t))
    }

    pub(crate) fn h2(recv: RecvBody) -> Body {
        Body::of(Kind::H2(Box::new(recv)))
    }

    pub(crate) fn incoming(i: Arc<Mutex<Incoming>>) -> Body {
        Body::of(Kind::Incoming(i))
    }

    /// The body's size when it is known before it is sent: in memory, or
    /// polled with an exact size hint.
    pub(crate) fn exact_len(&self) -> Option<u64> {
        match &self.kind {
            Kind::Full(b) => Some(b.len() as u64),
            Kind::Polled(p) => p.exact_len(),
            _ => None,
        }
    }

    /// The whole body, if it is already in memory.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Full(b) => Some(b),
            _ => None,
        }
    }

    /// Whether the body is known to hold no more bytes without reading:
    /// an empty in-memory body, or a request body whose framing says none
    /// (a `GET` without `Content-Length`) or that has been read to its end.
    ///
    /// ```
    /// assert!(spindle_http::Body::empty().is_end());
    /// assert!(!spindle_http::Body::from("x").is_end());
    /// ```
    pub fn is_end(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_empty(),
            Kind::Reader(_) => false,
            Kind::Incoming(i) => i.lock().is_done(),
            Kind::H2(r) => r.is_end(),
            Kind::Trailing(_) => false,
            Kind::Polled(p) => p.rest.is_empty() && (p.done || p.body.is_end_stream()),
            Kind::Observed(inner, _) => inner.is_end(),
        }
    }

    /// Reads the rest of the body into a vector.
    pub fn into_vec(mut self) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        self.read_to_end(&mut v)?;
        Ok(v)
    }

    pub(crate) fn into_kind(self) -> Result<Bytes, Box<dyn Read + Send>> {
        match self.into_outgoing() {
            Outgoing::Full(b) => Ok(b),
            Outgoing::Reader(r) => Err(r),
            Outgoing::Polled(p) => Err(p),
        }
    }

    /// How the body is sent: in hand, read, or polled. Its trailers are
    /// taken out before (`take_trailers_fn`).
    pub(crate) fn into_outgoing(self) -> Outgoing {
        match self.kind {
            Kind::Full(b) => Outgoing::Full(b),
            Kind::Reader(r) => Outgoing::Reader(r),
            Kind::Polled(p) => Outgoing::Polled(p),
            kind @ (Kind::Incoming(_) | Kind::H2(_) | Kind::Trailing(_) | Kind::Observed(..)) => {
                Outgoing::Reader(Box::new(Body::of(kind)))
            }
        }
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.kind {
            Kind::Full(b) => {
                let n = b.len().min(buf.len());
                buf[..n].copy_from_slice(&b[..n]);
                b.advance(n);
                Ok(n)
            }
            Kind::Reader(r) => r.read(buf),
            Kind::Incoming(i) => i.lock().read(buf),
            Kind::H2(r) => r.read(buf),
            Kind::Trailing(t) => t.read(buf),
            Kind::Polled(p) => p.read(buf),
            Kind::Observed(inner, observe) => {
                let n = inner.read(buf)?;
                observe(n);
                Ok(n)
            }
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Body::empty()
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Full(b) => write!(f, "Body({} bytes)", b.len()),
            Kind::Reader(_) | Kind::Polled(_) => f.write_str("Body(stream)"),
            Kind::Incoming(_) | Kind::H2(_) | Kind::Trailing(_) => f.write_str("Body(incoming)"),
            Kind::Observed(inner, _) => write!(f, "Observed({inner:?})"),
        }
    }
}

macro_rules! from_full {
    ($($t:ty),*) => {$(
        impl From<$t> for Body {
            fn from(v: $t) -> Body {
                Body::of(Kind::Full(Bytes::from(v)))
            }
        }
    )*};
}
from_full!(Vec<u8>, String, &'static str, &'static [u8], Bytes);

/// The error type of a body given to [`Body::from_http_body`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body as it is sent: in hand, read, or polled.
pub(crate) enum Outgoing {
    Full(Bytes),
    Reader(Box<dyn Read + Send>),
    Polled(Box<Polled>),
}

/// Where a polled body's trailers are kept once its last frame is seen,
/// for the sender that asks after the data.
type TrailerSlot = Arc<std::sync::Mutex<Option<HeaderMap>>>;

/// The trailers kept in `slot`, taken out (once).
fn take_kept(slot: &TrailerSlot) -> Option<HeaderMap> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// An `http_body::Body` behind one error type, so it can be boxed.
trait Frames: Send {
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>>;
    fn size_hint(&self) -> http_body::SizeHint;
    fn is_end_stream(&self) -> bool;
}

impl<B> Frames for B
where
    B: http_body::Body<Data = Bytes> + Send,
    B::Error: Into<BoxError>,
{
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        http_body::Body::poll_frame(self, cx).map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(self)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(self)
    }
}

/// A polled body (`Body::from_http_body`): its frames' data in order,
/// its trailers kept aside.
pub(crate) struct Polled {
    body: Pin<Box<dyn Frames>>,
    /// The part of a data frame a read did not take.
    rest: Bytes,
    trailers: TrailerSlot,
    done: bool,
    /// Told the size of each piece of data as it comes (`Body::observe`).
    observe: Option<Box<dyn FnMut(usize) + Send>>,
}

impl Polled {
    fn take_trailers(&self) -> Option<HeaderMap> {
        take_kept(&self.trailers)
    }

    /// The body's size, when its hint is exact.
    pub(crate) fn exact_len(&self) -> Option<u64> {
        self.body.size_hint().exact()
    }

    /// The next data, without waiting when `cx`'s waker is a no-op:
    /// `Ok(None)` at the end (trailers kept in their slot; empty data
    /// frames skipped).
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if !self.rest.is_empty() {
            return Poll::Ready(Ok(Some(std::mem::take(&mut self.rest))));
        }
        loop {
            if self.done {
                return Poll::Ready(Ok(None));
            }
            // A body that panics fails like one that errs: its response is
            // cut off, what the connection owes before it still goes out.
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.body.as_mut().poll_frame(cx)
            }));
            let polled = match polled {
                Ok(polled) => polled,
                Err(p) if p.is::<spindle::Cancelled>() => std::panic::resume_unwind(p),
                Err(_) => {
                    self.done = true;
                    return Poll::Ready(Err(io::Error::other("the response body panicked")));
                }
            };
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.done = true,
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Err(io::Error::other(e)));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        if let Some(observe) = &mut self.observe {
                            observe(data.len());
                        }
                        return Poll::Ready(Ok(Some(data)));
                    }
                    Err(frame) => {
                        if let Ok(fields) = frame.into_trailers() {
                            *self.trailers.lock().unwrap_or_else(|e| e.into_inner()) = Some(fields);
                        }
                    }
                },
            }
        }
    }

    /// The next data, parking the fiber (or blocking the thread) while the
    /// body has none ready.
    pub(crate) fn next_data(&mut self) -> io::Result<Option<Bytes>> {
        let ready = self.poll_data(&mut Context::from_waker(std::task::Waker::noop()));
        match ready {
            Poll::Ready(r) => r,
            Poll::Pending => spindle::block_on(std::future::poll_fn(|cx| self.poll_data(cx))),
        }
    }
}

impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let Some(mut data) = self.next_data()? else {
            return Ok(0);
        };
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        data.advance(n);
        self.rest = data;
        Ok(n)
    }
}

/// The body of the request being handled: bytes already read past the
/// head, then the connection, read by the decoder both roles share
/// (`h1::decode`).
pub(crate) struct Incoming {
    pub(crate) conn: Arc<Stream>,
    pub(crate) buf: ReadBuf,
    decoder: Decoder,
    /// `Expect: 100-continue`: send the interim response before the first
    /// read of the body.
    pub(crate) continue_pending: bool,
    pub(crate) error: Option<io::ErrorKind>,
    /// Longest wait for one read (`ServerConfig::body_read_timeout`).
    per_read: std::time::Duration,
    /// When the whole body must be in (`ServerConfig::body_deadline`).
    deadline: std::time::Instant,
}

impl Incoming {
    /// The body of a request framed as `framing` (`Empty`, `Length` or
    /// `Chunked`), of at most `limit` bytes.
    pub(crate) fn new(
        conn: Arc<Stream>,
        buf: ReadBuf,
        framing: BodyFraming,
        limit: u64,
        expect_continue: bool,
        per_read: std::time::Duration,
        deadline: std::time::Instant,
    ) -> Incoming {
        let waiting = buf.is_empty();
        Incoming {
            conn,
            buf,
            decoder: Decoder::new(framing, limit, "body"),
            // A client that sent body bytes already is not waiting for 100.
            continue_pending: expect_continue && framing != BodyFraming::Empty && waiting,
            error: None,
            per_read,
            deadline,
        }
    }

    /// Whether the body was read to its end.
    pub(crate) fn is_done(&self) -> bool {
        self.decoder.is_done()
    }

    /// The chunked body's trailers, once it was read to its end.
    pub(crate) fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.decoder.take_trailers()
    }

    /// Sends the `100 Continue` a client waiting with `Expect:
    /// 100-continue` needs before it sends its body, once: into `out` (the
    /// connection's pending responses) when given, else straight to the
    /// socket. The one place that writes it.
    pub(crate) fn send_continue(&mut self, out: Option<&mut Vec<u8>>) -> io::Result<()> {
        if !self.continue_pending {
            return Ok(());
        }
        self.continue_pending = false;
        const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
        match out {
            Some(out) => {
                out.extend_from_slice(CONTINUE);
                Ok(())
            }
            None => {
                use std::io::Write;
                (&*self.conn).write_all(CONTINUE)
            }
        }
    }
}

/// The request body's bytes come from the connection's buffer, then the
/// socket, each read bounded by the per-read timeout and the body's
/// deadline.
impl Source for Incoming {
    fn buffered(&self) -> &[u8] {
        self.buf.bytes()
    }

    fn consume(&mut self, n: usize) {
        self.buf.consume(n);
    }

    fn fill(&mut self) -> io::Result<usize> {
        // The first read of the body is what the client waits for a 100 for.
        self.send_continue(None)?;
        // Each read waits at most `per_read`, and never past the body's
        // deadline: a client dripping its body cannot stretch it.
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now())
            .min(self.per_read);
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request body's deadline passed",
            ));
        }
        self.conn.set_read_timeout(Some(left))?;
        // Straight into the connection's buffer (a stack array here would
        // stay resident on the reading fiber's stack for its whole life).
        let conn = &self.conn;
        self.buf.fill_with(|free| (&**conn).read(free))
    }

    fn truncated(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside a request body",
        )
    }

    fn too_large(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            "request body larger than the server's limit",
        )
    }
}

impl Read for Incoming {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        // The decoder reads from `self`: out for the call, back after it.
        let mut decoder = std::mem::replace(&mut self.decoder, Decoder::done());
        let r = decoder.read(self, out);
        self.decoder = decoder;
        if let Err(e) = &r {
            self.error.get_or_insert(e.kind());
        }
        r
    }
}

/// Which side of [`write_chunked`] failed.
pub(crate) enum ChunkedError {
    /// Reading the body.
    Read(io::Error),
    /// Writing to the connection.
    Write(io::Error),
}

impl ChunkedError {
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            ChunkedError::Read(e) | ChunkedError::Write(e) => e,
        }
    }
}

/// Copies `reader` to `out` in the chunked coding, a chunk per read, each
/// read straight into the buffer the chunk is sent from, then the last
/// chunk. The buffer starts small and doubles while reads fill it, up to
/// 16 KiB: a short streamed body costs 2 KiB, not a 16 KiB buffer zeroed
/// per message. Used by both roles: a server's streamed response, a
/// client's streamed request body.
pub(crate) fn write_chunked(
    reader: &mut dyn Read,
    trailers: Option<TrailersFn>,
    mut out: impl std::io::Write,
) -> Result<(), ChunkedError> {
    use crate::h1::encode;
    const FIRST: usize = 2 * 1024;
    const MOST: usize = 16 * 1024;
    let framing = encode::CHUNK_PREFIX + 2;
    let mut buf = vec![0u8; FIRST + framing];
    loop {
        let room = buf.len() - framing;
        let data = encode::CHUNK_PREFIX..encode::CHUNK_PREFIX + room;
        let n = reader.read(&mut buf[data]).map_err(ChunkedError::Read)?;
        if n == 0 {
            let trailers = trailers.and_then(|make| make());
            let mut last = Vec::new();
            encode::last_chunk(&mut last, trailers.as_ref());
            return out.write_all(&last).map_err(ChunkedError::Write);
        }
        let start = encode::frame_chunk_in_place(&mut buf, n);
        out.write_all(&buf[start..encode::CHUNK_PREFIX + n + 2])
            .map_err(ChunkedError::Write)?;
        if n == room && room < MOST {
            buf.resize((room * 2).min(MOST) + framing, 0);
        }
    }
}

/// Past this many pending bytes a polled body's data is written out
/// before more is taken (the connection batches smaller responses).
const FLUSH_AT: usize = 32 * 1024;

/// Sends a polled body framed as `framing` after its head, already in
/// `out` (the connection's pending bytes): each piece of data the body
/// has ready is appended, and `out` goes to the connection with `flush`
/// only when the body has nothing ready or `out` is large, so a body
/// ready with its head leaves in one write with it, and a body still
/// being made gets its head out before the wait (what hyper does).
///
/// `Length(n)`: exactly `n` bytes, or an error — more is not sent, and
/// either way the caller closes the connection so the client sees a cut
/// message, not a wrong one; trailers are dropped. Once `n` bytes are
/// out the message is complete: the body's end is not waited for (what
/// hyper does — a body whose writer closes it a while after its last
/// byte, as a WASI 0.3 guest's does, holds up neither the client nor the
/// next request on the connection); only more data it has ready at once
/// shows it longer than declared. `Chunked`: a chunk per piece, then the
/// last chunk with the trailers. `Close`: the data as it is (the
/// connection's end ends it).
pub(crate) fn write_polled(
    polled: &mut Polled,
    framing: crate::h1::encode::ResponseFraming,
    trailers: Option<TrailersFn>,
    out: &mut Vec<u8>,
    flush: &mut dyn FnMut(&mut Vec<u8>) -> io::Result<()>,
) -> io::Result<()> {
    use crate::h1::encode::{self, ResponseFraming};
    let mut sent: u64 = 0;
    let result = loop {
        let ready = polled.poll_data(&mut Context::from_waker(std::task::Waker::noop()));
        let next = match ready {
            Poll::Ready(next) => next,
            // All the declared bytes are out: the message is complete.
            Poll::Pending if matches!(framing, ResponseFraming::Length(n) if sent == n) => {
                break Ok(());
            }
            Poll::Pending => match flush(out) {
                Ok(()) => spindle::block_on(std::future::poll_fn(|cx| polled.poll_data(cx))),
                Err(e) => return Err(e),
            },
        };
        let data = match next {
            Ok(Some(data)) => data,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        sent += data.len() as u64;
        match framing {
            ResponseFraming::Length(n) if sent > n => {
                break Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("response body longer than its declared {n} bytes"),
                ));
            }
            ResponseFraming::Chunked => encode::chunk(out, &data),
            _ => out.extend_from_slice(&data),
        }
        if out.len() >= FLUSH_AT {
            flush(out)?;
        }
    };
    match (result, framing) {
        (Ok(()), ResponseFraming::Length(n)) if sent < n => {
            let _ = flush(out);
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("response body ended after {sent} of its declared {n} bytes"),
            ))
        }
        (Ok(()), ResponseFraming::Chunked) => {
            let trailers = trailers.and_then(|make| make());
            encode::last_chunk(out, trailers.as_ref());
            if out.len() >= FLUSH_AT {
                flush(out)?;
            }
            Ok(())
        }
        (Ok(()), _) => Ok(()),
        (Err(e), _) => {
            // What is pending (earlier answers, this one's start) still goes.
            let _ = flush(out);
            Err(e)
        }
    }
}
