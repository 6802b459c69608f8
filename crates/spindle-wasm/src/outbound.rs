//! Outgoing HTTP from guests: the allow-list, and the
//! `WasiHttpHooks::send_request` that hands each request to spindle-http's
//! client on spindle's netpoller.
//!
//! # Where each part runs
//!
//! `send_request` is called inside the guest's `outgoing-handler.handle`,
//! a host function with wasm frames below it — the host's first rule: no
//! fiber switch there. It only checks the allow-list and spawns a new
//! spindle fiber (spawning never switches) that sends the request with
//! [`spindle_http::Client`] (blocking style, so it parks that fiber on the
//! netpoller) and answers through a oneshot channel. The request body
//! streams: the client pumps it from the guest on a fiber of its own while
//! the response head is read, so a guest that waits for the answer before
//! finishing its body is served (only a framing-less GET or HEAD goes out
//! at once with no body, on a pooled connection if one is idle, while its
//! empty body is drained beside it).
//!
//! wasmtime-wasi-http polls the future `send_request` returns on its own
//! tokio runtime; tokio's whole share of an outgoing request is polling
//! that oneshot. A denied host is an immediate `HttpRequestDenied`.

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// The hosts guests may reach: `host[:port]` entries, `*` for any host.
///
/// ```
/// let mut allow = spindle_wasm::AllowList::default();
/// allow.add("example.com, 127.0.0.1:8080").unwrap();
/// assert!(allow.allows("example.com", 443));
/// assert!(allow.allows("127.0.0.1", 8080));
/// assert!(!allow.allows("127.0.0.1", 8081));
/// ```
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    entries: Vec<(String, Option<u16>)>,
}

impl AllowList {
    /// Adds comma-separated `host[:port]` entries (`*` alone: any host;
    /// IPv6 in brackets: `[::1]:8080`).
    pub fn add(&mut self, spec: &str) -> Result<(), String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let item = item
                .trim_start_matches("http://")
                .trim_start_matches("https://");
            let (host, port) = if let Some(rest) = item.strip_prefix('[') {
                let (h, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("bad outbound host {item:?}"))?;
                (h.to_string(), after.strip_prefix(':'))
            } else {
                match item.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (item.to_string(), None),
                }
            };
            let port = match port {
                None | Some("*") => None,
                Some(p) => Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("bad port in outbound host {item:?}"))?,
                ),
            };
            if host.is_empty() {
                return Err(format!("bad outbound host {item:?}"));
            }
            self.entries.push((host.to_ascii_lowercase(), port));
        }
        Ok(())
    }

    /// Whether `host:port` may be reached.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_matches(|c| c == '[' || c == ']');
        self.entries
            .iter()
            .any(|(h, p)| (h == "*" || h.eq_ignore_ascii_case(host)) && p.is_none_or(|p| p == port))
    }
}

/// The clients guests' outgoing requests share: HTTP/1.1 or HTTP/2 as
/// ALPN decides over TLS, and for the plain origins known to speak h2c
/// (`HostConfig::outbound_h2c`) one that speaks HTTP/2 to them at once.
#[derive(Clone)]
pub(crate) struct Clients {
    pub(crate) client: spindle_http::Client,
    pub(crate) h2c: spindle_http::Client,
}

impl Clients {
    pub(crate) fn new() -> Clients {
        Clients {
            client: spindle_http::Client::new(),
            h2c: spindle_http::Client::new().http2_prior_knowledge(true),
        }
    }
}

/// The hooks a guest store carries: its allow-lists and the shared clients.
pub(crate) struct OutboundHooks {
    pub(crate) allow: std::sync::Arc<AllowList>,
    /// Plain origins spoken to in HTTP/2 with prior knowledge.
    pub(crate) h2c: std::sync::Arc<AllowList>,
    pub(crate) clients: Clients,
    /// A name for the log lines (the request or command).
    pub(crate) tag: crate::log::Tag,
    /// Where a WASI 0.3 instance runs host futures beside its guest; `None`
    /// elsewhere (they then get a fiber each).
    pub(crate) background: Option<std::sync::Arc<Background>>,
}

type BackgroundFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Host futures a store's guest depends on but nobody awaits — the body of
/// an outgoing request that has none on the wire, drained so the guest's
/// writes to it complete — run by the loop that drives the store (a WASI
/// 0.3 instance's, see `service`) instead of on a fiber each: 10 000
/// requests parked on their upstreams would be 10 000 such fibers. The
/// hooks [`spawn`](Self::spawn) into it; the loop calls
/// [`poll`](Self::poll) at every poll of its own.
#[derive(Default)]
pub(crate) struct Background {
    inner: std::sync::Mutex<BackgroundInner>,
}

#[derive(Default)]
struct BackgroundInner {
    /// Spawned since the loop last looked.
    new: Vec<BackgroundFuture>,
    /// The loop's waker, as of its last poll.
    waker: Option<std::task::Waker>,
}

impl Background {
    /// Hands `future` to the loop (and wakes it to take it).
    pub(crate) fn spawn(&self, future: BackgroundFuture) {
        let waker = {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.new.push(future);
            inner.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// In the loop, at every poll: moves the newly spawned futures into
    /// `running` and polls what is ready there.
    pub(crate) fn poll(
        &self,
        running: &mut futures::stream::FuturesUnordered<BackgroundFuture>,
        cx: &mut std::task::Context<'_>,
    ) {
        use futures::StreamExt as _;
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            running.extend(inner.new.drain(..));
            match &mut inner.waker {
                Some(w) => w.clone_from(cx.waker()),
                None => inner.waker = Some(cx.waker().clone()),
            }
        }
        while let std::task::Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
    }
}

type SendFuture = Box<
    dyn std::future::Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

/// The most a WASI 0.3 guest's body write hands the host at once
/// (wasmtime's default, 1 MiB, is a 1 MiB allocation per body).
const P3_BODY_CHUNK: usize = 8 << 10;

impl WasiHttpHooks for OutboundHooks {
    fn p3_outgoing_body_chunk_size(&mut self) -> usize {
        P3_BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        let uri = request.uri();
        let https = uri.scheme_str() == Some("https");
        let host = uri.host().unwrap_or("").to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if !self.allow.allows(&host, port) {
            tracing::warn!(
                request = %self.tag,
                "outbound request to {host}:{port} denied (not in --allow-outbound)"
            );
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let mut client = if !https && self.h2c.allows(&host, port) {
            self.clients.h2c.clone()
        } else {
            self.clients.client.clone()
        };
        if let Some(t) = options.as_ref().and_then(|o| o.connect_timeout) {
            client = client.connect_timeout(t);
        }
        if let Some(t) = options.as_ref().and_then(|o| o.first_byte_timeout) {
            client = client.io_timeout(t);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A GET or HEAD without framing has no body: it goes out at once,
        // on a pooled connection if one is idle. The guest may still hold
        // its body open (a WASI 0.3 guest keeps its trailers future until
        // the response comes), so the body is drained and dropped beside
        // the exchange, where neither side waits for the other: in the
        // instance's loop if there is one, else on a fiber of its own
        // (`drain`).
        let (parts, body) = request.into_parts();
        let bodiless = (parts.method == http::Method::GET || parts.method == http::Method::HEAD)
            && !parts.headers.contains_key(http::header::CONTENT_LENGTH)
            && !parts.headers.contains_key(http::header::TRANSFER_ENCODING);
        let body = match (&self.background, bodiless) {
            (Some(background), true) => {
                background.spawn(Box::pin(async move {
                    let _ = body.collect().await;
                }));
                None
            }
            _ => Some(body),
        };
        // A fiber of its own: it parks on the netpoller; we are inside a
        // host call and must not. Its job is boxed: the fiber's first frame
        // holds what its closure captured.
        let job = Box::new(Outbound {
            client,
            parts: Some(parts),
            body,
            bodiless,
            tx,
        });
        let spawned = spindle::Builder::new()
            .name("wasm-outbound")
            .spawn(move || outbound_fiber(job));
        if spawned.is_err() {
            return Box::new(async {
                Err(HttpError::InternalError(Some(
                    "no fiber for the outgoing request".into(),
                )))
            });
        }
        Box::new(async move {
            let resp = rx
                .await
                .map_err(|_| HttpError::InternalError(Some("outgoing request lost".into())))??;
            let done: Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send> =
                Box::new(async { Ok(()) });
            Ok((resp, done))
        })
    }
}

type Answer = Result<http::Response<WasiBody>, HttpError>;

/// What the outbound fiber is given.
struct Outbound {
    client: spindle_http::Client,
    /// Taken when the request goes out.
    parts: Option<http::request::Parts>,
    /// `None` if a bodiless request's body is drained elsewhere already.
    body: Option<WasiBody>,
    /// No body goes on the wire (see `send_request`).
    bodiless: bool,
    tx: tokio::sync::oneshot::Sender<Answer>,
}

/// The outbound fiber: sends the request, hands the response's head to the
/// guest and then streams its body. Each step is out of line, and this
/// frame holds little: 10 000 requests parked on their upstreams are
/// 10 000 of these fibers, and every stack page one touches stays resident
/// while it waits.
#[inline(never)]
fn outbound_fiber(mut job: Box<Outbound>) {
    match send_on_fiber(&mut job) {
        Err(e) => {
            let _ = job.tx.send(Err(e));
        }
        Ok((parts, incoming)) => answer(job.tx, parts, incoming),
    }
}

/// The head goes to the guest at once; the body follows as this fiber reads
/// it from the connection, so a large download streams through instead of
/// being collected.
#[inline(never)]
fn answer(
    tx: tokio::sync::oneshot::Sender<Answer>,
    parts: http::response::Parts,
    incoming: spindle_http::Body,
) {
    let (chunks_tx, chunks_rx) = tokio::sync::mpsc::channel(4);
    let body = ChannelBody { chunks: chunks_rx }.boxed_unsync();
    if tx.send(Ok(http::Response::from_parts(parts, body))).is_ok() {
        stream_body(incoming, &chunks_tx);
    }
}

/// On the outbound fiber: the request body, the exchange, the response's
/// head (its body is read by [`stream_body`]).
#[inline(never)]
fn send_on_fiber(
    job: &mut Outbound,
) -> Result<(http::response::Parts, spindle_http::Body), HttpError> {
    let req = client_request(job)?;
    match job.client.request(req) {
        Ok(resp) => Ok(resp.into_parts()),
        Err(e) => Err(io_error_code(e)),
    }
}

/// The guest's request as the client sends it.
#[inline(never)]
fn client_request(job: &mut Outbound) -> Result<http::Request<spindle_http::Body>, HttpError> {
    let sent_twice = || HttpError::InternalError(Some("outgoing request sent twice".into()));
    let parts = job.parts.take().ok_or_else(sent_twice)?;
    let body = job.body.take();
    let body = if job.bodiless {
        if let Some(body) = body {
            drain(body)?;
        }
        spindle_http::Body::empty()
    } else {
        let body = body.ok_or_else(sent_twice)?;
        // Anything else streams: the guest may send the head, wait for the
        // response's head and only then write its body (an echo of the
        // answer back upstream); collecting the body first would wait for
        // that forever.
        let trailers = crate::answer::Trailers::default();
        let sent = trailers.clone();
        spindle_http::Body::from_reader(GuestRequestBody {
            body,
            pending: Bytes::new(),
            trailers,
        })
        .with_trailers(move || sent.lock().unwrap_or_else(|e| e.into_inner()).take())
    };
    let mut req = http::Request::from_parts(parts, body);
    // wasmtime-wasi-http set `host` from the authority; ours comes from the
    // URI too, so keep one.
    req.headers_mut().remove(http::header::HOST);
    Ok(req)
}

/// Drains and drops a body nobody sends, on a fiber of its own (where no
/// loop runs it, see `send_request`). Out of line: a spawn's frames are
/// deep, and they would stay resident on the outbound fiber's stack while
/// it waits.
#[inline(never)]
fn drain(body: WasiBody) -> Result<(), HttpError> {
    let drained = spindle::Builder::new()
        .name("wasm-outbound-drain")
        .spawn(move || {
            let _ = spindle::block_on(body.collect());
        });
    match drained {
        Ok(_) => Ok(()),
        Err(_) => Err(HttpError::InternalError(Some(
            "no fiber for the outgoing request body".into(),
        ))),
    }
}

/// On the outbound fiber: reads the response body from its connection and
/// hands it to the guest's side in chunks. A full channel parks this fiber
/// (the guest reads slower than the server sends); a dropped receiver (the
/// guest gave up the body) ends it, which closes the connection.
#[inline(never)]
fn stream_body(
    mut body: spindle_http::Body,
    chunks: &tokio::sync::mpsc::Sender<Result<http_body::Frame<Bytes>, HttpError>>,
) {
    use std::io::Read;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let chunk = match body.read(&mut buf) {
            Ok(0) => {
                // The upstream's trailers (gRPC's status) follow the data.
                if let Ok(Some(trailers)) = body.trailers() {
                    let _ =
                        spindle::block_on(chunks.send(Ok(http_body::Frame::trailers(trailers))));
                }
                return;
            }
            Ok(n) => Ok(http_body::Frame::data(Bytes::copy_from_slice(&buf[..n]))),
            Err(e) => Err(
                match e
                    .into_inner()
                    .map(|inner| inner.downcast::<spindle_http::Error>())
                {
                    Some(Ok(typed)) => io_error_code(*typed),
                    Some(Err(other)) => {
                        HttpError::InternalError(Some(format!("response body: {other}")))
                    }
                    None => HttpError::InternalError(Some("response body failed".into())),
                },
            ),
        };
        let failed = chunk.is_err();
        if spindle::block_on(chunks.send(chunk)).is_err() || failed {
            return;
        }
    }
}

/// A response body the outbound fiber feeds, chunk by chunk.
struct ChannelBody {
    chunks: tokio::sync::mpsc::Receiver<Result<http_body::Frame<Bytes>, HttpError>>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        self.chunks.poll_recv(cx)
    }
}

/// The `wasi:http` error code for what the client saw, by its kind.
#[cold]
#[inline(never)]
fn io_error_code(e: spindle_http::Error) -> HttpError {
    use spindle_http::ErrorKind;
    match e.kind() {
        ErrorKind::Dns => HttpError::DnsError {
            rcode: Some(e.to_string()),
            info_code: None,
        },
        ErrorKind::Connect => HttpError::ConnectionRefused,
        ErrorKind::ConnectTimeout => HttpError::ConnectionTimeout,
        ErrorKind::Timeout => HttpError::ConnectionReadTimeout,
        ErrorKind::TlsCertificate => HttpError::TlsCertificateError,
        ErrorKind::Tls => HttpError::TlsProtocolError,
        ErrorKind::Closed => HttpError::ConnectionTerminated,
        ErrorKind::Parse => HttpError::HttpProtocolError,
        ErrorKind::BodyTooLarge => HttpError::HttpResponseBodySize(None),
        ErrorKind::InvalidRequest => HttpError::HttpRequestUriInvalid,
        _ => HttpError::InternalError(Some(e.to_string())),
    }
}

/// The guest's outgoing request body, read in blocking style on the
/// client's body fiber: each read waits (parking that fiber) for the next
/// frame the guest writes.
struct GuestRequestBody {
    body: WasiBody,
    pending: Bytes,
    /// The guest's trailers, once its body ended with them: the client
    /// sends them after the body (see `client_request`).
    trailers: crate::answer::Trailers,
}

impl std::io::Read for GuestRequestBody {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use bytes::Buf as _;
        use http_body::Body as _;
        while self.pending.is_empty() {
            let body = &mut self.body;
            let frame = spindle::block_on(std::future::poll_fn(|cx| {
                std::pin::Pin::new(&mut *body).poll_frame(cx)
            }));
            match frame {
                None => return Ok(0),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            *self.trailers.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(trailers);
                        }
                    }
                },
                Some(Err(e)) => return Err(std::io::Error::other(format!("request body: {e:?}"))),
            }
        }
        let n = self.pending.len().min(out.len());
        out[..n].copy_from_slice(&self.pending[..n]);
        self.pending.advance(n);
        Ok(n)
    }
}
