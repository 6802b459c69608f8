//! The request fiber's side of a WASI 0.3 request: its URI made absolute,
//! admission, the [`Job`] handed to the pool (starting an instance when
//! the pool says so), the wait for the answer with the request's own
//! deadline, and the response — its body taken whole or streamed (see
//! `answer`). Every step is out of line and kept shallow: the fiber parks
//! under them, and every stack page it touched stays resident while it
//! waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::oneshot;
use spindle_http::{Body, ClientGone, Request, Response, StatusCode};
use wasmtime_wasi_http::WasiBody;

use super::instance::start;
use super::rests::Taken;
use super::{Job, Reply, ServiceHost};
use crate::answer::{
    self, classify, declared_length, describe, plain, take_ready, whole, StreamingBody, Trailers,
    Writer,
};
use crate::guest::{Admission, HostInner};
use crate::report::{Outcome, RequestReport};

/// Serves one request on an instance fiber (see the module docs). In three
/// steps, each out of line: the request fiber parks in the middle one, and
/// every stack page a fiber touches stays resident while it waits, so the
/// frames it parks under are kept small (10 000 parked requests are
/// 10 000 such stacks).
#[inline] // one frame less under the wait, and one copy of the request
pub(crate) fn handle(service: &Arc<ServiceHost>, mut req: Request<Body>) -> Response<Body> {
    let host = &service.host;
    // WASI 0.3 takes the scheme and authority from the URI alone.
    if !make_absolute(&mut req) {
        return *refuse(host, &req, Duration::ZERO, Outcome::BadRequest);
    }
    let gone = req.extensions_mut().remove::<ClientGone>();
    let (pending, answer) = match submit(service, req) {
        Ok(submitted) => submitted,
        Err(refused) => return *refused,
    };
    let answer = wait(answer, pending.deadline, gone);
    finish(host, pending, answer)
}

/// What the request fiber's wait ended with: the instance's answer (or
/// its end), or no answer.
type Waited = Result<Result<Reply, oneshot::Canceled>, Unanswered>;

/// Why a request stopped waiting for its answer.
enum Unanswered {
    /// Its deadline passed.
    Deadline,
    /// Its client closed the connection: the guest's task is abandoned (it
    /// runs on until it answers into a closed channel, or its instance
    /// ends), and the request's slot is freed now.
    ClientGone,
}

/// A request handed to the pool, as its fiber remembers it while it waits.
struct Pending {
    admission: Admission,
    tag: String,
    queue_wait: Duration,
    started: Instant,
    deadline: Instant,
    taken: Arc<Taken>,
    /// The request came over HTTP/1.x.
    http1: bool,
}

impl Pending {
    /// Reports the request's outcome with its time split into instantiation
    /// (if its instance was made for it) and handling.
    fn timing(&self, host: &HostInner, outcome: Outcome) {
        let head = self.started.elapsed();
        let instantiate = if self.taken.fresh_instance.load(Ordering::Relaxed) {
            head
        } else {
            Duration::ZERO
        };
        report(
            host,
            self.queue_wait,
            outcome,
            instantiate,
            head - instantiate,
        );
    }
}

fn report(
    host: &HostInner,
    queue_wait: Duration,
    outcome: Outcome,
    instantiate: Duration,
    handle: Duration,
) {
    if let Some(observer) = &host.config.observer.0 {
        observer.request(&RequestReport {
            outcome,
            queue_wait,
            instantiate,
            handle,
        });
    }
}

/// Admits the request (its URI made absolute) and hands it to the pool;
/// `Err` is the answer when it cannot be (busy).
#[inline(never)]
fn submit(
    service: &Arc<ServiceHost>,
    req: Request<Body>,
) -> Result<(Pending, oneshot::Receiver<Reply>), Box<Response<Body>>> {
    let host = &service.host;
    let (admission, queue_wait) = Admission::take(host);
    let id = host.next_id.fetch_add(1, Ordering::Relaxed);
    let tag = tag(id, &req);
    let http1 = req.version() < spindle_http::http::Version::HTTP_2;
    let Some(admission) = admission else {
        return Err(refuse(host, &req, queue_wait, Outcome::Busy));
    };
    let started = Instant::now();
    let deadline = spindle::time::now() + host.config.timeout;
    let (reply, answer) = oneshot::channel();
    let taken = Arc::new(Taken::default());
    let job = Job {
        request: Box::new(req),
        reply,
        deadline,
        taken: taken.clone(),
    };
    if let Some(job) = service.pool.submit(job) {
        start(service, job);
    }
    let pending = Pending {
        admission,
        tag,
        queue_wait,
        started,
        deadline,
        taken,
        http1,
    };
    Ok((pending, answer))
}

/// How the log names a request: `req 12 GET /path`, put together by hand
/// (the id by `itoa`) in a string of the right size: `format!`'s machinery,
/// and a string growing under it, were the deepest frames on the request
/// fiber's stack.
#[inline(never)]
fn tag(id: u64, req: &Request<Body>) -> String {
    let (method, path) = (req.method().as_str(), req.uri().path());
    let mut digits = itoa::Buffer::new();
    let id = digits.format(id);
    let mut tag = String::with_capacity(4 + id.len() + 2 + method.len() + path.len());
    tag.push_str("req ");
    tag.push_str(id);
    tag.push(' ');
    tag.push_str(method);
    tag.push(' ');
    tag.push_str(path);
    tag
}

/// The answer to a request refused before it reached the pool: 503 when
/// every slot is busy, 400 without a usable authority.
#[cold]
#[inline(never)]
fn refuse(
    host: &HostInner,
    req: &Request<Body>,
    queue_wait: Duration,
    outcome: Outcome,
) -> Box<Response<Body>> {
    report(host, queue_wait, outcome, Duration::ZERO, Duration::ZERO);
    let tag = tag(host.next_id.fetch_add(1, Ordering::Relaxed), req);
    let answer = if outcome == Outcome::Busy {
        tracing::warn!(
            request = %tag,
            "503, all {} guest slots busy",
            host.config.max_concurrent
        );
        plain(StatusCode::SERVICE_UNAVAILABLE, "server busy")
    } else {
        tracing::warn!(request = %tag, "400, no usable authority");
        plain(StatusCode::BAD_REQUEST, "bad request")
    };
    Box::new(answer)
}

/// Parks until the instance answers, the deadline passes, or the client
/// leaves.
#[inline(never)]
fn wait(answer: oneshot::Receiver<Reply>, deadline: Instant, gone: Option<ClientGone>) -> Waited {
    spindle::block_on(async {
        let mut answer = answer;
        let mut expiry = spindle::time::sleep_until_future(deadline);
        let mut gone = gone.as_ref().map(ClientGone::wait);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = Pin::new(&mut answer).poll(cx) {
                return Poll::Ready(Ok(r));
            }
            if let Some(gone) = gone.as_mut() {
                if Pin::new(gone).poll(cx).is_ready() {
                    return Poll::Ready(Err(Unanswered::ClientGone));
                }
            }
            Pin::new(&mut expiry)
                .poll(cx)
                .map(|()| Err(Unanswered::Deadline))
        })
        .await
    })
}

/// Turns the instance's answer into the response (its body streamed on
/// if the guest is still writing it). Kept shallow: a connection's fiber
/// keeps every stack page it touched, and this runs just under the wait it
/// parked in, so its failures, the streamed body and the reading of the
/// body are out of line.
#[inline(never)]
fn finish(host: &HostInner, pending: Pending, answer: Waited) -> Response<Body> {
    let response = match answer {
        Ok(Ok(Ok(response))) => response,
        failure => return failed(host, &pending, failure),
    };
    pending.timing(host, Outcome::Answered);
    let (parts, mut body) = response.into_parts();
    let trailers = Trailers::default();
    // The body as far as the guest writes it before its loop rests (see
    // `rests.rs`), or until every byte it declared is in hand.
    let declared = declared_length(&parts.headers);
    let mut seen = None;
    let more = |took, have: usize| {
        declared != Some(have as u64) && pending.taken.wait_for_rest(&mut seen, took)
    };
    let body = match take_ready(&mut body, &mut NoWriter, &trailers, more) {
        (taken, Ok(true)) => whole(taken, &trailers),
        // Every declared byte in hand: over HTTP/1 that is the whole
        // message (no trailers can follow a `Content-Length` there), and
        // the body's end — the guest closing its stream, often a while
        // later — is not waited for, as the connection would not wait for
        // it either (what hyper does). Over HTTP/2 trailers may follow.
        (taken, Ok(false)) if pending.http1 && declared == Some(taken.len() as u64) => {
            whole(taken, &trailers)
        }
        (taken, Ok(false)) => streamed(body, taken, pending, trailers, &parts.headers),
        (_, Err(why)) => {
            tracing::warn!(request = %pending.tag, "{why}");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed");
        }
    };
    Response::from_parts(parts, body)
}

/// The answer for an instance's failure to answer (a trap, its end, the
/// deadline, the client gone), logged and reported.
#[cold]
#[inline(never)]
fn failed(host: &HostInner, pending: &Pending, failure: Waited) -> Response<Body> {
    let (outcome, why) = match failure {
        Ok(Ok(Ok(_))) => unreachable!("an answer is not a failure"),
        Ok(Ok(Err(e))) => (classify(&e, false), describe(&e)),
        Ok(Err(oneshot::Canceled)) => (
            Outcome::Trap,
            "the guest's instance ended (trap or fault)".to_string(),
        ),
        Err(Unanswered::Deadline) => (
            Outcome::Deadline,
            "deadline exceeded (--timeout)".to_string(),
        ),
        Err(Unanswered::ClientGone) => (
            Outcome::ClientClosed,
            "the client closed the connection; the guest's task is abandoned".to_string(),
        ),
    };
    pending.timing(host, outcome);
    tracing::warn!(request = %pending.tag, outcome = outcome.as_str(), "{why}");
    answer::failure(outcome)
}

/// The body of an answer the guest is still writing, read on as the
/// connection sends it.
#[inline(never)]
fn streamed(
    body: WasiBody,
    taken: Bytes,
    pending: Pending,
    trailers: Trailers,
    headers: &http::HeaderMap,
) -> Body {
    let writer = InstanceLoop {
        deadline: pending.deadline,
        expiry: None,
        tag: pending.tag.as_str().into(),
        _admission: pending.admission,
    };
    StreamingBody::body(body, writer, taken, trailers, headers)
}

/// Taking what is ready drives nothing: the instance's loop writes the
/// body on its own fiber.
struct NoWriter;

impl Writer for NoWriter {
    const DRIVES_GUEST: bool = false;

    fn drive(&mut self, _cx: &mut Context<'_>) {}

    fn poll_stalled(&mut self, _cx: &mut Context<'_>) -> Poll<String> {
        Poll::Pending
    }

    fn failed(&mut self, _why: &str) {}
}

/// The instance's loop writes a streamed body on its own fiber: its reader
/// waits for it, up to the request's deadline, and keeps the request's
/// admission slot until the body is done.
struct InstanceLoop {
    deadline: Instant,
    expiry: Option<spindle::time::Sleep>,
    tag: Arc<str>,
    _admission: Admission,
}

impl Writer for InstanceLoop {
    const DRIVES_GUEST: bool = false;

    fn drive(&mut self, _cx: &mut Context<'_>) {}

    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<String> {
        let expiry = self
            .expiry
            .get_or_insert_with(|| spindle::time::sleep_until_future(self.deadline));
        Pin::new(expiry)
            .poll(cx)
            .map(|()| "deadline exceeded (--timeout) in the body".to_string())
    }

    fn failed(&mut self, why: &str) {
        tracing::warn!(request = %self.tag, "{why}");
    }
}

/// Puts the request's URI in absolute form (see [`absolute_uri`]);
/// `false` if it has no usable authority. Before the request is submitted
/// rather than inside: parsing the authority allocates, and malloc's
/// frames on top of `submit`'s were the deepest the request fiber's stack
/// went.
#[inline(never)]
fn make_absolute(req: &mut Request<Body>) -> bool {
    match absolute_uri(req.uri(), req.headers()) {
        Some(uri) => {
            *req.uri_mut() = uri;
            true
        }
        None => false,
    }
}

/// The request's URI in absolute form: `http`, and the authority of the
/// request line or else of `Host` (`localhost` for HTTP/1.0 without one).
fn absolute_uri(uri: &http::Uri, headers: &http::HeaderMap) -> Option<http::Uri> {
    let authority = match uri.authority() {
        Some(a) => a.clone(),
        None => match headers.get(http::header::HOST) {
            Some(h) => h.to_str().ok()?.parse().ok()?,
            None => http::uri::Authority::from_static("localhost"),
        },
    };
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTP));
    parts.authority = Some(authority);
    parts.path_and_query = Some(path);
    http::Uri::from_parts(parts).ok()
}
