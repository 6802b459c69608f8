//! WASI 0.3 `wasi:http/service`: one instance serving many requests at
//! once, on spindle's fibers.
//!
//! # The shape
//!
//! ```text
//!  request fiber                     Pool                 instance fiber
//!  ─────────────                     ────                 ──────────────
//!  admission ─ Job ─▶ submit ─▶ queue (or a new instance) ─▶ takes the job
//!  parks on reply ◀──────── response head ─────────────── handle() task
//!  reads the body ◀───────── body stream ──────────────── guest writes it
//! ```
//!
//! An *instance fiber* owns one store and drives its `run_concurrent` event
//! loop with `spindle::block_on`. Inside the loop each accepted request is
//! a concurrent call of the guest's `handle`; the loop parks the fiber
//! whenever every task waits (on a clock, a stream, an outgoing request),
//! and whoever completes the wait wakes it. A request fiber hands its
//! request over as a [`Job`] and parks on the reply; the response body is
//! a channel the instance's loop fills, so the request fiber streams it to
//! its connection while the instance goes on with the others.
//!
//! # When an instance takes a request
//!
//! An instance is *available* while all of these hold: it has served fewer
//! than `instance_reuse` requests, it has fewer than `instance_concurrency`
//! in flight, the guest is ready for another concurrent call
//! (`poll_ready_for_concurrent_call`: the guest's own backpressure), no
//! request of it has passed its deadline and — unless it has none in
//! flight — its last poll ended with every task waiting rather than with
//! the guest computing (a fuel yield wakes its own waker; see
//! [`YieldWatch`]). A computing instance takes no more work, so a burst of
//! CPU-bound requests spreads over instances, each yielding its worker at
//! every fuel interval. [`Pool::submit`] gives a job to a waiting available
//! instance, or starts a new instance with it when none is available — up
//! to the pool's instance limit (the allocator's slots, see
//! `host::instance_slots`); past it the job waits until an instance has
//! room or one ends. A new instance counts as available from its start, so
//! a burst of requests arriving before it first runs waits for it instead
//! of each starting an instance of its own.
//!
//! # Deadlines, traps, fuel
//!
//! wasmtime cannot cancel one guest task, and a deadline future inside the
//! event loop is not polled while a task holds the store. So the request
//! fiber waits for its reply with its own deadline and answers 500 when it
//! passes, and nothing inside the loop keeps a timer per request. The
//! instance, polled from outside its loop by one timer of its own, knows
//! the earliest and the latest deadline of its requests in flight. Past the
//! earliest, it takes no more requests; past the latest, it drops itself
//! (every request in it has been answered by then), so an expired request
//! keeps its instance until the guest answers it late or the instance's
//! other requests are done or past their own deadlines. A trap ends the
//! instance: its requests get 500 and the next ones go to a new instance.
//! Fuel is per store in wasmtime, so the budget is per instance: every
//! request it accepts adds `fuel_limit` to its tank, and running dry is a
//! trap like any other.

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Read};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures::channel::oneshot;
use futures::future::{Either, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use http_body::Body as _;
use spindle_http::{Body, Request, Response, StatusCode};
use wasmtime::component::Accessor;
use wasmtime::AsContextMut;
use wasmtime_wasi_http::handler::{Prepared, Proxy};
use wasmtime_wasi_http::{WasiBody, WasiHttpView};

use crate::host::{Admission, GuestState, HostInner, Pre};
use crate::report::{Outcome, RequestReport};

/// A guest's answer, or why there is none.
type Reply = Result<http::Response<WasiBody>, wasmtime::Error>;

/// One request on its way to an instance.
pub(crate) struct Job {
    /// With its URI absolute; its body becomes the guest's on the
    /// instance fiber (off the request fiber's stack, see `submit`).
    /// Boxed: a burst of requests waiting for instances grows the pool's
    /// queue, which keeps its size, so a queued job is kept small.
    request: Box<Request<Body>>,
    reply: oneshot::Sender<Reply>,
    deadline: Instant,
    /// Set by the instance that takes the job: it was made for this job.
    fresh_instance: Arc<AtomicBool>,
}

// A queued job stays a few words: the queue keeps the capacity a burst
// grew it to (see `Job::request`).
const _: () = assert!(std::mem::size_of::<Job>() <= 64);

/// Where requests wait for an instance, and which instances wait for one.
pub(crate) struct Pool {
    state: Mutex<PoolState>,
    next_instance: AtomicU64,
    /// At most this many instances at once (the allocator's slots).
    limit: usize,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    /// Instances that would take a job now.
    available: usize,
    /// Instances alive (or starting).
    live: usize,
    /// The wakers of available instances parked until a job comes.
    parked: Vec<(u64, Waker)>,
}

impl PoolState {
    /// The first waiting job whose request fiber still waits (one that
    /// passed its deadline in the queue was answered and dropped its end).
    fn next_job(&mut self) -> Option<Job> {
        while let Some(job) = self.jobs.pop_front() {
            if !job.reply.is_canceled() {
                return Some(job);
            }
        }
        None
    }
}

impl Pool {
    pub(crate) fn new(limit: usize) -> Pool {
        Pool {
            state: Mutex::default(),
            next_instance: AtomicU64::new(0),
            limit: limit.max(1),
        }
    }

    /// Starts an instance for the first waiting job if none is available
    /// to take it and a slot is free. Called with the lock held; gives it
    /// back.
    fn start_for_waiting(host: &Arc<HostInner>, mut state: std::sync::MutexGuard<'_, PoolState>) {
        if state.available > 0 || state.live >= host.pool.limit {
            // Someone will take it, or an instance ending will start one.
            if let Some((_, waker)) = (state.available > 0 && !state.jobs.is_empty())
                .then(|| state.parked.pop())
                .flatten()
            {
                drop(state);
                waker.wake();
            }
            return;
        }
        let Some(job) = state.next_job() else {
            return;
        };
        // Counted available from birth: the jobs that come before it has
        // run wait for it instead of each starting an instance.
        state.available += 1;
        state.live += 1;
        drop(state);
        start_instance(host, job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // Nothing panics while holding the lock; a poisoned lock still
        // holds consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `job` to an available instance, or to a new one if none is
    /// (past the instance limit it waits for one to have room).
    #[inline] // the job is moved once, into the queue
    fn submit(host: &Arc<HostInner>, job: Job) {
        let mut state = host.pool.lock();
        state.jobs.push_back(job);
        Pool::start_for_waiting(host, state);
    }

    /// Records whether instance `id` may take more jobs. When one stops
    /// being available while jobs wait, another must take them: a parked
    /// available instance is woken, or, if none is left, a new instance
    /// is started for the first job (`submit` saw this one available and
    /// left the job to it).
    fn set_available(host: &Arc<HostInner>, id: u64, available: &Cell<bool>, now: bool) {
        if available.replace(now) == now {
            return;
        }
        let mut state = host.pool.lock();
        if now {
            state.available += 1;
            return;
        }
        state.available -= 1;
        state.parked.retain(|(i, _)| *i != id);
        Pool::start_for_waiting(host, state);
    }

    /// Instance `id` is gone (no longer available): its slot is free.
    fn ended(host: &Arc<HostInner>, id: u64, available: &Cell<bool>) {
        let mut state = host.pool.lock();
        if available.replace(false) {
            state.available -= 1;
            state.parked.retain(|(i, _)| *i != id);
        }
        state.live -= 1;
        Pool::start_for_waiting(host, state);
    }

    /// A waiting job for available instance `id`, or its waker parked
    /// until one comes.
    fn poll_job(&self, id: u64, cx: &mut Context<'_>) -> Poll<Job> {
        let mut state = self.lock();
        if let Some(job) = state.next_job() {
            state.parked.retain(|(i, _)| *i != id);
            return Poll::Ready(job);
        }
        match state.parked.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => state.parked.push((id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

/// Starts an instance fiber for `job`; the pool has counted it available.
/// Out of line: a spawn is deep, and it runs on the stack of whichever
/// request fiber found no instance free.
#[inline(never)]
fn start_instance(host: &Arc<HostInner>, job: Job) {
    let id = host.pool.next_instance.fetch_add(1, Ordering::Relaxed) + 1;
    let host2 = host.clone();
    let spawned = spindle::Builder::new()
        .name("wasm-instance")
        .spawn(move || run_instance(host2, id, job));
    if let Err(e) = spawned {
        // The job went into the closure, which was dropped: its reply
        // channel closed, and the request is answered 500.
        tracing::warn!("no fiber for a new guest instance: {e}");
        Pool::ended(host, id, &Cell::new(true));
    }
}

/// What an instance is doing, as its loop last saw.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Requests in flight: it must be gone by the latest of their deadlines.
    Requests,
    /// Every request answered, but the guest still works (a body being
    /// written, a task it spawned): bounded by one more request timeout.
    AfterResponses,
    /// Nothing to do: dropped at the end of the idle timeout.
    Idle,
}

/// What the instance's loop tells the fiber driving it, between polls.
struct Status {
    phase: Cell<Phase>,
    /// When to drop the instance if the phase does not change.
    kill_at: Cell<Instant>,
    /// The earliest deadline of the requests in flight: once it passes,
    /// the instance takes no more (see [`Status::expire_due`]).
    stop_at: Cell<Option<Instant>>,
    /// A request of it passed its deadline inside the loop.
    expired: Cell<bool>,
    /// Cleared when a request is accepted; set once the loop has parked
    /// with every task waiting.
    may_interleave: Cell<bool>,
    /// The last poll of the loop ended in a yield: the guest computes.
    computing: Cell<bool>,
    /// Counted among the pool's available instances.
    available: Cell<bool>,
}

impl Status {
    fn enter(&self, phase: Phase, kill_at: Instant) {
        self.phase.set(phase);
        self.kill_at.set(kill_at);
    }

    /// Records the deadlines of the requests in flight.
    fn in_flight(&self, deadlines: &[Instant]) {
        if let Some(latest) = deadlines.iter().copied().max() {
            self.enter(Phase::Requests, latest);
        }
        self.stop_at.set(deadlines.iter().copied().min());
    }

    /// Whether a request in flight is past its deadline (checked, not
    /// waited for: the request fiber answers its own deadline, and the
    /// instance's driver wakes at the earliest one).
    fn expire_due(&self, now: Instant) -> bool {
        if !self.expired.get() && self.stop_at.get().is_some_and(|at| now >= at) {
            self.expired.set(true);
        }
        self.expired.get()
    }

    /// When the driver must look next: the kill time, or the earliest
    /// deadline in flight while no request has expired yet.
    fn next_check(&self) -> Instant {
        match self.stop_at.get() {
            Some(at) if !self.expired.get() => at.min(self.kill_at.get()),
            _ => self.kill_at.get(),
        }
    }
}

/// On its own fiber: instantiates the component, serves `first` and then
/// whatever the pool gives it, until the policy says stop.
fn run_instance(host: Arc<HostInner>, id: u64, first: Job) {
    let Pre::Service(pre) = &host.pre else {
        unreachable!("WASI 0.2 requests go to the proxy module")
    };
    let config = &host.config;
    let tag: Arc<str> = format!("instance {id}").into();
    let status = Status {
        phase: Cell::new(Phase::Requests),
        kill_at: Cell::new(first.deadline),
        stop_at: Cell::new(Some(first.deadline)),
        expired: Cell::new(false),
        may_interleave: Cell::new(false),
        computing: Cell::new(false),
        available: Cell::new(true),
    };
    // Leaves the pool's count right however this instance ends.
    let _guard = AvailableGuard {
        host: &host,
        id,
        available: &status.available,
    };
    let mut store = crate::proxy::new_store(&host, tag.clone(), &[]);
    // The host futures this instance's guest depends on run in its loop.
    let background = Arc::new(crate::outbound::Background::default());
    store.data_mut().hooks.background = Some(background.clone());
    let instantiated = spindle::block_on(async {
        let mut instantiate = pin!(pre.instantiate_async(&mut store));
        let mut deadline = spindle::time::sleep_until_future(first.deadline);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = instantiate.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            Pin::new(&mut deadline).poll(cx).map(|()| None)
        })
        .await
    });
    let service = match instantiated {
        Some(Ok(service)) => service,
        Some(Err(e)) => {
            tracing::warn!(instance = %tag, "instantiation failed: {e:#}");
            let _ = first.reply.send(Err(e));
            return;
        }
        None => return, // the request fiber answers its own deadline
    };
    first.fresh_instance.store(true, Ordering::Relaxed);
    // The export asked whether the guest takes another concurrent call.
    let func = *service.wasi_http_handler().func_handle().func();
    let proxy = Proxy::P3(service);
    let reuse = config
        .instance_reuse
        .unwrap_or(crate::config::DEFAULT_INSTANCE_REUSE);
    let concurrency = config.instance_concurrency;
    let _ = store.set_fuel(0);

    let status = &status;
    let host = &host;
    let proxy = &proxy;
    let tag = &tag;
    let serve = async move |accessor: &Accessor<GuestState>| -> wasmtime::Result<()> {
        let mut in_flight = FuturesUnordered::new();
        let mut background_running = FuturesUnordered::new();
        // The deadlines of the requests in flight (few: a Vec will do).
        let mut deadlines: Vec<Instant> = Vec::new();
        let mut accepted = 0usize;
        let mut may_accept = true;

        let accept =
            |job: Job, in_flight: &mut FuturesUnordered<_>, deadlines: &mut Vec<Instant>| {
                // Assume the new task computes until the loop shows otherwise.
                status.may_interleave.set(false);
                let Job {
                    request,
                    reply,
                    deadline,
                    ..
                } = job;
                let request = (*request).map(crate::proxy::request_body);
                deadlines.push(deadline);
                status.in_flight(deadlines);
                // The guest's answer goes straight to the request fiber.
                let prepared = accessor.with(|mut access| {
                    let mut store = access.as_context_mut();
                    let fuel = store.get_fuel().unwrap_or(0);
                    let _ = store.set_fuel(fuel.saturating_add(config.fuel_limit));
                    Prepared::new(store, proxy, request, GuestState::http, reply)
                });
                // Built as a plain future, not an `async` block: a block would
                // keep its own copy of `prepared` beside the call's, in a
                // state held by every parked request.
                in_flight.push(match prepared {
                    // No expiry inside the loop: the request fiber answers
                    // its own deadline, and the instance's driver watches the
                    // earliest one (`Status::expire_due`). A request past it
                    // stays here until the guest answers or the instance is
                    // dropped. A trap does not come back here: it ends the
                    // whole event loop, and with it every request of this
                    // instance.
                    Ok(prepared) => Either::Left(
                        prepared
                            .run(accessor, std::future::pending())
                            .map(move |sent| sent.map(|_| (true, deadline))),
                    ),
                    // The call could not start, and the reply went with it:
                    // the request fiber sees its channel closed.
                    Err(e) => {
                        tracing::warn!(instance = %tag, "a request could not start: {e:#}");
                        Either::Right(std::future::ready(Ok((false, deadline))))
                    }
                });
            };

        accepted += 1;
        accept(first, &mut in_flight, &mut deadlines);

        std::future::poll_fn(|cx| -> Poll<wasmtime::Result<()>> {
            background.poll(&mut background_running, cx);
            loop {
                // Finished requests first: a failed start or a trap must stop
                // this instance taking more before it looks.
                while let Poll::Ready(Some(done)) = in_flight.poll_next_unpin(cx) {
                    let (healthy, deadline) = done?;
                    if let Some(i) = deadlines.iter().position(|d| *d == deadline) {
                        deadlines.swap_remove(i);
                    }
                    status.in_flight(&deadlines);
                    if !healthy {
                        may_accept = false;
                    }
                }
                if status.expire_due(spindle::time::now()) {
                    may_accept = false;
                }
                let ready = accessor.poll_ready_for_concurrent_call(func, cx).is_ready();
                if accepted >= reuse {
                    may_accept = false;
                }
                let open =
                    may_accept && ready && in_flight.len() < concurrency && !status.computing.get();
                Pool::set_available(host, id, &status.available, open);
                // Open, it takes another only once its tasks all wait.
                if open && (in_flight.is_empty() || status.may_interleave.get()) {
                    if let Poll::Ready(job) = host.pool.poll_job(id, cx) {
                        accepted += 1;
                        accept(job, &mut in_flight, &mut deadlines);
                        continue;
                    }
                }
                if !in_flight.is_empty() {
                    return Poll::Pending;
                }
                if accessor.poll_no_interesting_tasks(cx).is_pending() {
                    if status.phase.get() != Phase::AfterResponses {
                        status.enter(Phase::AfterResponses, spindle::time::now() + config.timeout);
                    }
                    return Poll::Pending;
                }
                if !(may_accept && ready) {
                    return Poll::Ready(Ok(()));
                }
                if status.phase.get() != Phase::Idle {
                    let end = spindle::time::now() + config.instance_idle_timeout;
                    status.enter(Phase::Idle, end);
                }
                return Poll::Pending;
            }
        })
        .await
    };

    let result = {
        let mut event_loop = pin!(store.run_concurrent(serve));
        let watch = Arc::new(YieldWatch::default());
        let mut kill = spindle::time::sleep_until_future(status.kill_at.get());
        let mut yields = 0u32;
        spindle::block_on(std::future::poll_fn(|cx| loop {
            let waker = watch.waker(cx.waker());
            let mut inner = Context::from_waker(&waker);
            let polled = wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
                event_loop.as_mut().poll(&mut inner)
            });
            if let Poll::Ready(r) = polled {
                return Poll::Ready(r.and_then(|r| r));
            }
            // Polled from outside the loop: a task that holds the store
            // cannot stop this.
            // One timer per instance, for the earliest deadline in flight
            // and then the kill time: armed again only when that moves
            // earlier, or when it fires before a time that moved later
            // (every accepted request moves them).
            let next = status.next_check();
            if next < kill.deadline() {
                kill = spindle::time::sleep_until_future(next);
            }
            while Pin::new(&mut kill).poll(cx).is_ready() {
                let now = spindle::time::now();
                if now >= status.kill_at.get() {
                    return Poll::Ready(if status.phase.get() == Phase::Idle {
                        Ok(())
                    } else {
                        Err(wasmtime::format_err!("requests past their deadline"))
                    });
                }
                if status.expire_due(now) {
                    // Past a request's deadline: no more work here, even
                    // if the guest computes and the loop is not polled.
                    Pool::set_available(host, id, &status.available, false);
                }
                kill = spindle::time::sleep_until_future(status.next_check());
            }
            if watch.woke() {
                // One self-wake may be the loop's own deferred work (a call
                // just started); two in a row is the guest yielding at its
                // fuel interval: computing, so no more work here.
                yields += 1;
                if yields >= 2 && !status.computing.replace(true) {
                    Pool::set_available(host, id, &status.available, false);
                }
                return Poll::Pending; // block_on polls again soon
            }
            yields = 0;
            // Every task waits: it may take another request.
            let was_computing = status.computing.replace(false);
            if !status.may_interleave.replace(true) || was_computing {
                continue;
            }
            return Poll::Pending;
        }))
    };
    if let Err(e) = result {
        tracing::warn!(instance = %tag, "instance dropped: {}", crate::proxy::describe(&e));
    }
}

/// Takes an instance out of the pool's counts when it ends.
struct AvailableGuard<'a> {
    host: &'a Arc<HostInner>,
    id: u64,
    available: &'a Cell<bool>,
}

impl Drop for AvailableGuard<'_> {
    fn drop(&mut self) {
        Pool::ended(self.host, self.id, self.available);
    }
}

/// Tells a poll that ended with a self-wake (the guest yielding at its fuel
/// interval, or the loop's deferred work) from one where every task waits.
#[derive(Default)]
struct YieldWatch {
    woken: AtomicBool,
    outer: Mutex<Option<Waker>>,
}

impl YieldWatch {
    fn waker(self: &Arc<Self>, outer: &Waker) -> Waker {
        self.woken.store(false, Ordering::Relaxed);
        {
            let mut slot = self.outer.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_mut() {
                Some(w) => w.clone_from(outer),
                None => *slot = Some(outer.clone()),
            }
        }
        Waker::from(self.clone())
    }

    fn woke(&self) -> bool {
        self.woken.load(Ordering::Relaxed)
    }
}

impl Wake for YieldWatch {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Relaxed);
        if let Some(w) = self
            .outer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            w.wake_by_ref();
        }
    }
}

/// Serves one request on an instance fiber (see the module docs). In three
/// steps, each out of line: the request fiber parks in the middle one, and
/// every stack page a fiber touches stays resident while it waits, so the
/// frames it parks under are kept small (10 000 parked requests are
/// 10 000 such stacks).
#[inline] // one frame less under the wait, and one copy of the request
pub(crate) fn handle(host: &Arc<HostInner>, mut req: Request<Body>) -> Response<Body> {
    // WASI 0.3 takes the scheme and authority from the URI alone.
    if !make_absolute(&mut req) {
        return *refuse(host, &req, Duration::ZERO, Outcome::BadRequest);
    }
    let (pending, answer) = match submit(host, req) {
        Ok(submitted) => submitted,
        Err(refused) => return *refused,
    };
    let answer = wait(answer, pending.deadline);
    finish(host, pending, answer)
}

/// A request handed to the pool, as its fiber remembers it while it waits.
struct Pending {
    admission: Admission,
    tag: String,
    queue_wait: Duration,
    started: Instant,
    deadline: Instant,
    fresh_instance: Arc<AtomicBool>,
}

impl Pending {
    /// Reports the request's outcome with its time split into instantiation
    /// (if its instance was made for it) and handling.
    fn timing(&self, host: &HostInner, outcome: Outcome) {
        let head = self.started.elapsed();
        let instantiate = if self.fresh_instance.load(Ordering::Relaxed) {
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
    host: &Arc<HostInner>,
    req: Request<Body>,
) -> Result<(Pending, oneshot::Receiver<Reply>), Box<Response<Body>>> {
    let queue_start = Instant::now();
    let admission = Admission::take(host);
    let queue_wait = queue_start.elapsed();
    let id = host.next_id.fetch_add(1, Ordering::Relaxed);
    let tag = tag(id, &req);
    let Some(admission) = admission else {
        return Err(refuse(host, &req, queue_wait, Outcome::Busy));
    };
    let started = Instant::now();
    let deadline = spindle::time::now() + host.config.timeout;
    let (reply, answer) = oneshot::channel();
    let fresh_instance = Arc::new(AtomicBool::new(false));
    Pool::submit(
        host,
        Job {
            request: Box::new(req),
            reply,
            deadline,
            fresh_instance: fresh_instance.clone(),
        },
    );
    let pending = Pending {
        admission,
        tag,
        queue_wait,
        started,
        deadline,
        fresh_instance,
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
        crate::proxy::plain(StatusCode::SERVICE_UNAVAILABLE, "server busy")
    } else {
        tracing::warn!(request = %tag, "400, no usable authority");
        crate::proxy::plain(StatusCode::BAD_REQUEST, "bad request")
    };
    Box::new(answer)
}

/// Parks until the instance answers or the deadline passes (`None`).
#[inline(never)]
fn wait(
    answer: oneshot::Receiver<Reply>,
    deadline: Instant,
) -> Option<Result<Reply, oneshot::Canceled>> {
    spindle::block_on(async {
        let mut answer = answer;
        let mut expiry = spindle::time::sleep_until_future(deadline);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = Pin::new(&mut answer).poll(cx) {
                return Poll::Ready(Some(r));
            }
            Pin::new(&mut expiry).poll(cx).map(|()| None)
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
fn finish(
    host: &Arc<HostInner>,
    pending: Pending,
    answer: Option<Result<Reply, oneshot::Canceled>>,
) -> Response<Body> {
    let response = match answer {
        Some(Ok(Ok(response))) => response,
        failure => return failed(host, &pending, failure),
    };
    pending.timing(host, Outcome::Answered);
    let (parts, mut body) = response.into_parts();
    let body = match take_ready(&mut body) {
        (taken, Ok(true)) => Body::from(taken),
        (taken, Ok(false)) => streamed(body, taken, pending),
        (_, Err(why)) => {
            tracing::warn!(request = %pending.tag, "{why}");
            return crate::proxy::plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed");
        }
    };
    Response::from_parts(parts, body)
}

/// The 500 for an instance's failure to answer (a trap, its end, the
/// deadline), logged and reported.
#[cold]
#[inline(never)]
fn failed(
    host: &HostInner,
    pending: &Pending,
    failure: Option<Result<Reply, oneshot::Canceled>>,
) -> Response<Body> {
    let (outcome, why) = match failure {
        Some(Ok(Ok(_))) => unreachable!("an answer is not a failure"),
        Some(Ok(Err(e))) => {
            let outcome = match e.downcast_ref::<wasmtime::Trap>() {
                Some(wasmtime::Trap::OutOfFuel) => Outcome::FuelExhausted,
                Some(_) => Outcome::Trap,
                None => Outcome::Failed,
            };
            (outcome, crate::proxy::describe(&e))
        }
        Some(Err(oneshot::Canceled)) => (
            Outcome::Trap,
            "the guest's instance ended (trap or fault)".to_string(),
        ),
        None => (
            Outcome::Deadline,
            "deadline exceeded (--timeout)".to_string(),
        ),
    };
    pending.timing(host, outcome);
    tracing::warn!(request = %pending.tag, outcome = outcome.as_str(), "{why}");
    crate::proxy::plain(StatusCode::INTERNAL_SERVER_ERROR, "guest failed")
}

/// The body of an answer the guest is still writing, read on as the
/// connection sends it.
#[inline(never)]
fn streamed(body: WasiBody, taken: Bytes, pending: Pending) -> Body {
    Body::from_reader(StreamedBody {
        body,
        pending: taken,
        deadline: pending.deadline,
        done: false,
        tag: pending.tag.as_str().into(),
        _admission: pending.admission,
    })
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

/// How much of a body is taken whole before streaming instead.
const WHOLE_BODY_LIMIT: usize = 256 * 1024;

/// The frames the guest has written already: `Ok(true)` if that was all.
///
/// A guest usually returns its response first and writes the body from a
/// task of its own right after, a turn or two later in its instance's
/// loop. A few yields let those turns run (the instance fiber is most often
/// on this worker, and under load the yields run other requests' work), so
/// a small body still goes out with a `Content-Length`, in one write with
/// the head; a body still pending after them streams.
///
/// The frames are kept as they came while there is one: the usual small
/// body is a single frame, handed on without a copy (and without an
/// allocation growing under this, a frame deeper on the request fiber's
/// stack); a second frame starts a copy.
#[inline(never)]
fn take_ready(body: &mut WasiBody) -> (Bytes, Result<bool, String>) {
    const YIELDS: u32 = 8;
    let mut first = Bytes::new();
    let mut more: Option<BytesMut> = None;
    let mut cx = Context::from_waker(Waker::noop());
    let mut yields = 0;
    let taken = |first: Bytes, more: Option<BytesMut>| more.map_or(first, BytesMut::freeze);
    loop {
        match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers carry no data
                };
                let len = if first.is_empty() && more.is_none() {
                    first = data;
                    first.len()
                } else {
                    let copy = more.get_or_insert_with(|| BytesMut::from(&first[..]));
                    copy.extend_from_slice(&data);
                    copy.len()
                };
                if len > WHOLE_BODY_LIMIT {
                    return (taken(first, more), Ok(false));
                }
            }
            Poll::Ready(Some(Err(e))) => {
                return (taken(first, more), Err(format!("response body: {e:?}")))
            }
            Poll::Ready(None) => return (taken(first, more), Ok(true)),
            Poll::Pending if yields < YIELDS => {
                yields += 1;
                spindle::yield_now();
            }
            Poll::Pending => return (taken(first, more), Ok(false)),
        }
    }
}

/// A response body the instance's loop is still writing: each read parks
/// the request fiber until more comes, up to the request's deadline.
struct StreamedBody {
    body: WasiBody,
    pending: Bytes,
    deadline: Instant,
    done: bool,
    tag: Arc<str>,
    _admission: Admission,
}

impl Read for StreamedBody {
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
            let body = &mut self.body;
            let mut expiry = spindle::time::sleep_until_future(self.deadline);
            let next = spindle::block_on(std::future::poll_fn(|cx| {
                match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        Poll::Ready(Ok(Some(frame.into_data().unwrap_or_default())))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Err(format!("response body: {e:?}"))),
                    Poll::Ready(None) => Poll::Ready(Ok(None)),
                    Poll::Pending => Pin::new(&mut expiry)
                        .poll(cx)
                        .map(|()| Err("deadline exceeded (--timeout) in the body".to_string())),
                }
            }));
            match next {
                Ok(Some(data)) => self.pending = data,
                Ok(None) => self.done = true,
                Err(why) => {
                    tracing::warn!(request = %self.tag, "{why}");
                    return Err(io::Error::other(why));
                }
            }
        }
    }
}
