//! One HTTP request through a guest, on the request's own fiber.
//!
//! # The exchange
//!
//! ```text
//! admission → store + instance (pool) → call_handle ┐
//!                                                    ├ polled together by
//!            response-outparam ← guest sets it       │ spindle::block_on on
//!            response body     ← guest writes it     ┘ this fiber
//! ```
//!
//! The guest runs inside wasmtime's async `call_handle` future. That future,
//! the response-outparam receiver, the response body and the request's
//! deadline are polled together, in one `poll_fn`, by `spindle::block_on`
//! on the connection's fiber. When the guest waits in an async host import
//! (a clock, a stream, an outgoing request) wasmtime suspends the guest's
//! own stack, the future is Pending and the fiber parks; whoever completes
//! the wait wakes it, from any thread. A guest that runs long yields every
//! `fuel_yield_interval` units of fuel; spindle's `block_on` sees the
//! self-wake and lets the worker's other fibers run first.
//!
//! The host's two rules (no fiber switch with wasm frames below; a nested
//! `block_on` polls in place) hold by construction: nothing here parks
//! while wasm frames are below (every wait is a `Pending` returned up to
//! `block_on`, which parks only after the poll returned), and the request
//! body, which is read in blocking style from the connection, is pumped by
//! a separate fiber into a channel the guest polls.
//!
//! # The response body
//!
//! Whatever body the guest has already written when its response arrives
//! is taken at once: a guest that answers in one go (most do) gets a
//! `Content-Length` response. Otherwise the body streams (chunked) through
//! [`GuestBody`], whose reads keep driving the guest, so an echo can stream
//! the request body back as it arrives.
//!
//! # Ending a request early
//!
//! Past the deadline the call future is dropped; wasmtime unwinds and frees
//! the guest's stack and instance. Fuel exhaustion, a trap, a memory limit
//! hit and a guest that never sets a response are all a 500 for that
//! request alone, with a log line naming it.

use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, Empty};
use spindle_http::{Body, Request, Response, StatusCode};
use wasmtime::Store;
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use crate::host::{Admission, GuestState, HostInner};
use crate::log::GuestLog;
use crate::report::{Outcome, RequestReport};

/// How much of a guest's body is taken whole before streaming instead.
const WHOLE_BODY_LIMIT: usize = 256 * 1024;

/// Request bodies are pumped in pieces of this size.
const PUMP_CHUNK: usize = 16 * 1024;

/// The guest call: its result, and its store and instance if they may
/// serve another request.
type CallFuture =
    Pin<Box<dyn Future<Output = (wasmtime::Result<()>, Option<IdleInstance>)> + Send>>;

/// A WASI 0.2 store and instance between two requests (sequential reuse).
pub(crate) struct IdleInstance {
    store: Store<GuestState>,
    proxy: wasmtime_wasi_http::p2::bindings::Proxy,
    /// Requests it has served.
    served: usize,
    /// Since when it waits.
    since: Instant,
}

/// The WASI 0.2 instances waiting for a request (`instance_reuse` > 1),
/// most recently used last. A reaper fiber, alive only while the list is
/// not empty, drops those idle past `instance_idle_timeout`.
#[derive(Default)]
pub(crate) struct IdleInstances {
    list: std::sync::Mutex<Vec<IdleInstance>>,
}

impl IdleInstances {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<IdleInstance>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used idle instance still within its idle time.
    fn take(&self, config: &crate::HostConfig) -> Option<IdleInstance> {
        if config.instance_reuse.unwrap_or(1) <= 1 {
            return None;
        }
        let mut list = self.lock();
        let idle = list.pop()?;
        if idle.since.elapsed() < config.instance_idle_timeout {
            return Some(idle);
        }
        // Those below are older still: drop them all (outside the lock).
        let stale = std::mem::take(&mut *list);
        drop(list);
        drop((idle, stale));
        None
    }

    /// Keeps `idle` for the next request; starts the reaper if it was the
    /// first.
    fn put(host: &Arc<HostInner>, idle: IdleInstance) {
        let mut list = host.idle.lock();
        let first = list.is_empty();
        list.push(idle);
        drop(list);
        if first {
            let weak = Arc::downgrade(host);
            let _ = spindle::Builder::new()
                .name("wasm-idle-reaper")
                .spawn(move || reap(weak));
        }
    }
}

/// Drops idle instances past their idle time; ends when none is left.
fn reap(host: std::sync::Weak<HostInner>) {
    loop {
        let Some(host) = host.upgrade() else { return };
        let timeout = host.config.instance_idle_timeout;
        let next = {
            let mut list = host.idle.lock();
            let stale = list
                .iter()
                .take_while(|i| i.since.elapsed() >= timeout)
                .count();
            let dropped: Vec<_> = list.drain(..stale).collect();
            let next = list.first().map(|i| i.since + timeout);
            drop(list);
            drop(dropped);
            next
        };
        drop(host);
        match next {
            Some(at) => spindle::time::sleep(at.saturating_duration_since(Instant::now())),
            None => return,
        }
    }
}
type ResponseReceiver =
    tokio::sync::oneshot::Receiver<Result<http::Response<HyperOutgoingBody>, ErrorCode>>;

/// A new store for one guest call: WASI with the guest's output going to
/// the log, `wasi:http` with the outbound hooks, fuel and memory limits.
pub(crate) fn new_store(host: &HostInner, tag: Arc<str>, args: &[String]) -> Store<GuestState> {
    let config = &host.config;
    let tag = crate::log::Tag::new(tag);
    let mut wasi = WasiCtx::builder();
    wasi.stdout(GuestLog::new(tag.clone(), "stdout"))
        .stderr(GuestLog::new(tag.clone(), "stderr"))
        .envs(&config.env)
        .args(args)
        .monotonic_clock(crate::clocks::SpindleClock);
    let mut state = GuestState::new(config, wasi.build(), host.client.clone(), tag);
    state._live = Some(crate::host::LiveInstance::new(
        &host.instances,
        &host.instances_made,
    ));
    let mut store = Store::new(host.pre.engine(), state);
    store.limiter(|s| &mut s.limits);
    // Fuel is on in every engine we build, so these cannot fail.
    let _ = store.set_fuel(config.fuel_limit);
    let _ = store.fuel_async_yield_interval(Some(config.fuel_yield_interval));
    store
}

pub(crate) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(format!("{text}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// Runs the guest for `req` and returns its response (see the module
/// comment).
pub(crate) fn handle(host: &Arc<HostInner>, req: Request<Body>) -> Response<Body> {
    let id = host
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag: Arc<str> = format!("req {id} {} {}", req.method(), req.uri().path()).into();
    let queue_start = Instant::now();
    let admission = Admission::take(host);
    let queue_wait = queue_start.elapsed();
    let report_early = |outcome| {
        if let Some(observer) = &host.config.observer.0 {
            observer.request(&RequestReport {
                outcome,
                queue_wait,
                instantiate: Duration::ZERO,
                handle: Duration::ZERO,
            });
        }
    };
    let Some(admission) = admission else {
        report_early(Outcome::Busy);
        tracing::warn!(
            request = %tag,
            "503, all {} guest slots busy",
            host.config.max_concurrent
        );
        return plain(StatusCode::SERVICE_UNAVAILABLE, "server busy");
    };
    let deadline = Instant::now() + host.config.timeout;
    // A reused instance (sequential reuse, opted into) keeps its store:
    // renamed for this request, its fuel budget and memory flag reset.
    let (mut store, reused) = match host.idle.take(&host.config) {
        Some(idle) => {
            let mut store = idle.store;
            store.data().tag.set(tag.clone());
            store.data().limits.reset();
            let _ = store.set_fuel(host.config.fuel_limit);
            (store, Some((idle.proxy, idle.served)))
        }
        None => (new_store(host, tag.clone(), &[]), None),
    };
    let memory_hit = store.data().limits.hit_flag();

    let (mut parts, body) = req.into_parts();
    if parts.uri.authority().is_none() && !parts.headers.contains_key(http::header::HOST) {
        // HTTP/1.0 without Host: wasi:http wants an authority.
        parts.headers.insert(
            http::header::HOST,
            http::HeaderValue::from_static("localhost"),
        );
    }
    let request = http::Request::from_parts(parts, request_body(body));
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let handles = (|| {
        let mut http = store.data_mut().http();
        let req = http.new_incoming_request(Scheme::Http, request)?;
        let out = http.new_response_outparam(sender)?;
        wasmtime::Result::<_>::Ok((req, out))
    })();
    let (guest_req, out) = match handles {
        Ok(h) => h,
        Err(e) => {
            report_early(Outcome::BadRequest);
            tracing::warn!(request = %tag, "400, {e:#}");
            return plain(StatusCode::BAD_REQUEST, "bad request");
        }
    };
    let crate::host::Pre::Proxy(pre) = &host.pre else {
        unreachable!("a WASI 0.3 request goes to the service module")
    };
    let pre = pre.clone();
    let started = Instant::now();
    let instantiated = Arc::new(std::sync::OnceLock::new());
    let mark = instantiated.clone();
    let reuse = host.config.instance_reuse.unwrap_or(1);
    let call: CallFuture = Box::pin(async move {
        let (proxy, served) = match reused {
            Some(r) => r,
            None => match pre.instantiate_async(&mut store).await {
                Ok(proxy) => (proxy, 0),
                Err(e) => return (Err(e), None),
            },
        };
        let _ = mark.set(Instant::now());
        let result = proxy
            .wasi_http_incoming_handler()
            .call_handle(&mut store, guest_req, out)
            .await;
        // Only a call that returned cleanly leaves a store fit for the
        // next request (a trap poisons the instance).
        let again = result.is_ok() && served + 1 < reuse;
        let idle = again.then(|| IdleInstance {
            store,
            proxy,
            served: served + 1,
            since: Instant::now(),
        });
        (result, idle)
    });
    let mut exchange = Exchange {
        call: Some(call),
        failure: None,
        outcome: Outcome::Answered,
        memory_hit,
        deadline: spindle::time::sleep_until_future(deadline),
        tag,
        timing: Timing {
            queue_wait,
            started,
            instantiated,
            head: None,
        },
        observer: host.config.observer.0.clone(),
        host: host.clone(),
        _admission: admission,
    };

    let mut receiver = receiver;
    let response = spindle::block_on(std::future::poll_fn(|cx| {
        exchange.poll_response(&mut receiver, cx)
    }));
    exchange.timing.head = Some(Instant::now());
    let response = match response {
        Ok(r) => r,
        Err(why) => {
            exchange.fail(why);
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed");
        }
    };
    let (parts, mut body) = response.into_parts();
    let (taken, complete) = take_ready(&mut exchange, &mut body);
    let body = match complete {
        Ok(true) => {
            // The whole body is here; let the guest finish what it does
            // after its response in the background of this request.
            exchange.finish();
            Body::from(taken.freeze())
        }
        Ok(false) => Body::from_reader(GuestBody {
            exchange,
            body,
            pending: taken.freeze(),
            done: false,
        }),
        Err(why) => {
            exchange.fail(why);
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed");
        }
    };
    Response::from_parts(parts, body)
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
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, String>>(4);
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
fn pump(mut body: Body, tx: tokio::sync::mpsc::Sender<Result<Bytes, String>>) {
    loop {
        let mut buf = BytesMut::zeroed(PUMP_CHUNK);
        let item = match body.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                buf.truncate(n);
                Ok(buf.freeze())
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
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
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
                r.map(Frame::data).map_err(|e| {
                    wasmtime_wasi_http::Error::InternalError(Some(format!("request body: {e}")))
                })
            })
        })
    }
}

/// The guest call in flight, its deadline and its admission slot.
struct Exchange {
    call: Option<CallFuture>,
    failure: Option<String>,
    /// How the request ended (`Answered` until a failure says otherwise).
    outcome: Outcome,
    /// Set by the store's limiter when the guest grew past its memory.
    memory_hit: Arc<AtomicBool>,
    deadline: spindle::time::Sleep,
    tag: Arc<str>,
    timing: Timing,
    observer: Option<Arc<dyn crate::Observer>>,
    /// Where a store fit for reuse goes back.
    host: Arc<HostInner>,
    _admission: Admission,
}

/// Where a request's time went (for the observer).
struct Timing {
    queue_wait: Duration,
    /// When the call began (instantiation first).
    started: Instant,
    /// Set by the call once the instance is ready.
    instantiated: Arc<std::sync::OnceLock<Instant>>,
    /// When the response head (or the failure) came.
    head: Option<Instant>,
}

impl Timing {
    fn report(&self, outcome: Outcome) -> RequestReport {
        let ready = self.instantiated.get().copied();
        let end = self.head.unwrap_or_else(Instant::now);
        RequestReport {
            outcome,
            queue_wait: self.queue_wait,
            instantiate: ready.map_or(end - self.started, |r| r - self.started),
            handle: ready.map_or(Duration::ZERO, |r| end.saturating_duration_since(r)),
        }
    }
}

impl Exchange {
    /// Drives the guest; past the deadline, drops it.
    fn poll_call(&mut self, cx: &mut Context<'_>) {
        if let Some(call) = self.call.as_mut() {
            // wasmtime-wasi's p2 clocks are tokio timers: give them the
            // ambient runtime while the guest runs.
            let polled =
                wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| call.as_mut().poll(cx));
            if let Poll::Ready((result, idle)) = polled {
                self.call = None;
                if let Some(idle) = idle {
                    IdleInstances::put(&self.host, idle);
                }
                if let Err(e) = result {
                    if self.failure.is_none() {
                        self.outcome = classify(&e, self.memory_hit.load(Ordering::Relaxed));
                        self.failure = Some(describe(&e));
                    }
                }
            }
        }
        if self.call.is_some() && Pin::new(&mut self.deadline).poll(cx).is_ready() {
            self.call = None; // wasmtime disposes of the guest's stack
            if self.failure.is_none() {
                self.outcome = Outcome::Deadline;
                self.failure = Some("deadline exceeded (--timeout)".to_string());
            }
        }
    }

    fn poll_response(
        &mut self,
        receiver: &mut ResponseReceiver,
        cx: &mut Context<'_>,
    ) -> Poll<Result<http::Response<HyperOutgoingBody>, String>> {
        self.poll_call(cx);
        match Pin::new(receiver).poll(cx) {
            Poll::Ready(Ok(Ok(resp))) => Poll::Ready(Ok(resp)),
            Poll::Ready(Ok(Err(code))) => Poll::Ready(Err(format!("guest answered {code:?}"))),
            Poll::Ready(Err(_)) | Poll::Pending if self.call.is_none() => Poll::Ready(Err(self
                .failure
                .take()
                .unwrap_or_else(|| "guest returned without setting a response".to_string()))),
            _ => Poll::Pending,
        }
    }

    fn fail(&mut self, why: String) {
        self.call = None;
        if self.outcome == Outcome::Answered {
            self.outcome = Outcome::Failed;
        }
        self.failure = Some(why);
    }

    /// Lets the guest run to its end (bounded by the deadline).
    fn finish(&mut self) {
        if self.call.is_some() && !std::thread::panicking() {
            spindle::block_on(std::future::poll_fn(|cx| {
                self.poll_call(cx);
                if self.call.is_none() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }));
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.finish();
        if let Some(why) = &self.failure {
            tracing::warn!(request = %self.tag, outcome = self.outcome.as_str(), "{why}");
        }
        if let Some(observer) = &self.observer {
            observer.request(&self.timing.report(self.outcome));
        }
    }
}

/// How a failed guest call ended, for the observer.
fn classify(e: &wasmtime::Error, memory_hit: bool) -> Outcome {
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

/// Takes the body frames the guest has ready now, without waiting:
/// `Ok(true)` if that was the whole body.
fn take_ready(
    exchange: &mut Exchange,
    body: &mut HyperOutgoingBody,
) -> (BytesMut, Result<bool, String>) {
    let mut taken = BytesMut::new();
    let result = spindle::block_on(std::future::poll_fn(|cx| loop {
        exchange.poll_call(cx);
        match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    taken.extend_from_slice(&data);
                }
                if taken.len() > WHOLE_BODY_LIMIT {
                    return Poll::Ready(Ok(false));
                }
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(format!("response body: {e:?}"))),
            Poll::Ready(None) => return Poll::Ready(Ok(true)),
            Poll::Pending => return Poll::Ready(Ok(false)),
        }
    }));
    (taken, result)
}

/// A response body still being written by the guest: each read drives the
/// guest until it has produced more (or finished, or failed).
struct GuestBody {
    exchange: Exchange,
    body: HyperOutgoingBody,
    pending: Bytes,
    done: bool,
}

impl Read for GuestBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.len());
                buf[..n].copy_from_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Ok(n);
            }
            if self.done {
                return Ok(0);
            }
            let (exchange, body) = (&mut self.exchange, &mut self.body);
            let next = spindle::block_on(std::future::poll_fn(|cx| {
                exchange.poll_call(cx);
                match Pin::new(&mut *body).poll_frame(cx) {
                    // Trailers carry no data: an empty piece, read on.
                    Poll::Ready(Some(Ok(frame))) => {
                        Poll::Ready(Ok(Some(frame.into_data().unwrap_or_default())))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Err(format!("response body: {e:?}"))),
                    Poll::Ready(None) => Poll::Ready(Ok(None)),
                    Poll::Pending => match &exchange.failure {
                        Some(why) if exchange.call.is_none() => Poll::Ready(Err(why.clone())),
                        _ => Poll::Pending,
                    },
                }
            }));
            match next {
                Ok(Some(data)) => self.pending = data,
                Ok(None) => {
                    self.done = true;
                }
                Err(why) => {
                    self.exchange.fail(why.clone());
                    return Err(io::Error::other(why));
                }
            }
        }
    }
}
