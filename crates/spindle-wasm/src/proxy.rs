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
//! a `StreamingBody` (see `answer`), whose reads keep driving the guest,
//! so an echo can stream the request body back as it arrives.
//!
//! # Ending a request early
//!
//! Past the deadline the call future is dropped; wasmtime unwinds and frees
//! the guest's stack and instance. Fuel exhaustion, a trap, a memory limit
//! hit and a guest that never sets a response are all a 500 for that
//! request alone, with a log line naming it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use spindle_http::{Body, ClientGone, Request, Response, StatusCode};
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use crate::answer::{
    classify, describe, failure, plain, request_body, take_ready, whole, StreamingBody, Trailers,
    Writer,
};
use crate::guest::{new_store, Admission, GuestState, HostInner};
use crate::report::{Outcome, RequestReport};

/// A WASI 0.2 host: its shared part, the pre-linked component, and the
/// instances kept between requests.
pub(crate) struct ProxyHost {
    host: Arc<HostInner>,
    pre: ProxyPre<GuestState>,
    idle: IdleInstances,
}

impl ProxyHost {
    pub(crate) fn new(host: Arc<HostInner>, pre: ProxyPre<GuestState>) -> ProxyHost {
        ProxyHost {
            host,
            pre,
            idle: IdleInstances::default(),
        }
    }
}

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
    fn take(&self, config: &crate::config::HostConfig) -> Option<IdleInstance> {
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
    fn put(proxy: &Arc<ProxyHost>, idle: IdleInstance) {
        let mut list = proxy.idle.lock();
        let first = list.is_empty();
        list.push(idle);
        drop(list);
        if first {
            let weak = Arc::downgrade(proxy);
            let _ = spindle::Builder::new()
                .name("wasm-idle-reaper")
                .spawn(move || reap(weak));
        }
    }
}

/// Drops idle instances past their idle time; ends when none is left.
fn reap(proxy: Weak<ProxyHost>) {
    loop {
        let Some(host) = proxy.upgrade() else { return };
        let timeout = host.host.config.instance_idle_timeout;
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

/// Runs the guest for `req` and returns its response (see the module
/// comment).
pub(crate) fn handle(proxy: &Arc<ProxyHost>, req: Request<Body>) -> Response<Body> {
    let host = &proxy.host;
    let id = host
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag: Arc<str> = format!("req {id} {} {}", req.method(), req.uri().path()).into();
    let (admission, queue_wait) = Admission::take(host);
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
    let (mut store, reused) = match proxy.idle.take(&host.config) {
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

    let gone = req.extensions().get::<ClientGone>().map(ClientGone::wait);
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
    let pre = proxy.pre.clone();
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
        proxy: proxy.clone(),
        gone,
        _admission: admission,
    };

    let mut receiver = receiver;
    let response = spindle::block_on(std::future::poll_fn(|cx| {
        exchange.poll_response(&mut receiver, cx)
    }));
    exchange.timing.head = Some(Instant::now());
    // The watch was for the wait above; a body being written is watched
    // by its writes.
    exchange.gone = None;
    let response = match response {
        Ok(r) => r,
        Err(why) => {
            exchange.fail(why);
            return failure(exchange.outcome);
        }
    };
    let (parts, mut body) = response.into_parts();
    let trailers = Trailers::default();
    let (taken, complete) = take_ready(&mut body, &mut exchange, &trailers, |_, _| false);
    let body = match complete {
        Ok(true) => {
            // The whole body is here; let the guest finish what it does
            // after its response in the background of this request.
            exchange.finish();
            whole(taken, &trailers)
        }
        Ok(false) => StreamingBody::body(body, exchange, taken, trailers, &parts.headers),
        Err(why) => {
            exchange.fail(why);
            return failure(exchange.outcome);
        }
    };
    Response::from_parts(parts, body)
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
    observer: Option<Arc<dyn crate::report::Observer>>,
    /// Where a store fit for reuse goes back.
    proxy: Arc<ProxyHost>,
    /// Ready when the client leaves before the response head.
    gone: Option<spindle_http::Gone>,
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
                    IdleInstances::put(&self.proxy, idle);
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
            _ => match self.gone.as_mut().map(|g| Pin::new(g).poll(cx)) {
                Some(Poll::Ready(())) => {
                    // Nobody waits for the answer: the guest's call is
                    // dropped (wasmtime unwinds it) and the slot freed.
                    self.call = None;
                    self.outcome = Outcome::ClientClosed;
                    Poll::Ready(Err(
                        "the client closed the connection; the guest was stopped".to_string(),
                    ))
                }
                _ => Poll::Pending,
            },
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

/// The guest call writes the body as it runs: reading drives it.
impl Writer for Exchange {
    const DRIVES_GUEST: bool = true;

    fn drive(&mut self, cx: &mut Context<'_>) {
        self.poll_call(cx);
    }

    fn poll_stalled(&mut self, _cx: &mut Context<'_>) -> Poll<String> {
        match &self.failure {
            Some(why) if self.call.is_none() => Poll::Ready(why.clone()),
            _ => Poll::Pending,
        }
    }

    fn failed(&mut self, why: &str) {
        self.fail(why.to_string());
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
