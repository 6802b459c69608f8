//! An instance fiber: one WASI 0.3 store, instantiated for its first
//! request, serving what the pool gives it inside its `run_concurrent`
//! event loop until the policy (`pool.rs`) says it is done. The loop
//! accepts jobs, runs each as a concurrent call of the guest's `handle`,
//! and reports to the [`Status`] between polls; a timer outside the loop
//! enforces deadlines and the idle timeout even while the guest holds the
//! store; a [`YieldWatch`] tells a guest that computes from one that
//! waits.

use std::cell::Cell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use futures::future::{Either, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use wasmtime::component::Accessor;
use wasmtime::AsContextMut;
use wasmtime_wasi_http::handler::{Prepared, Proxy};
use wasmtime_wasi_http::WasiHttpView;

use super::pool::{RuntimeClock, Status, Timer};
use super::rests::{EndRests, Rests};
use super::{Job, ServiceHost};
use crate::answer::{describe, request_body};
use crate::config::DEFAULT_INSTANCE_REUSE;
use crate::guest::{new_store, GuestState};
use crate::outbound::Background;

impl ServiceHost {
    /// Tells the pool whether instance `id` takes more jobs now, and
    /// starts an instance for a job it hands back.
    fn set_available(self: &Arc<Self>, id: u64, available: &Cell<bool>, now: bool) {
        if let Some(job) = self.pool.set_available(id, available, now) {
            start(self, job);
        }
    }
}

/// Starts an instance fiber for `job`; the pool has counted it available.
/// Out of line: a spawn is deep, and it runs on the stack of whichever
/// request fiber found no instance free.
#[inline(never)]
pub(super) fn start(service: &Arc<ServiceHost>, mut job: Job) {
    loop {
        let id = service.pool.instance_id();
        let service2 = service.clone();
        let spawned = spindle::Builder::new()
            .name("wasm-instance")
            .spawn(move || run(service2, id, job));
        let Err(e) = spawned else { return };
        // The job went into the closure, which was dropped: its reply
        // channel closed, and the request is answered 500. The slot is
        // free again, for the next waiting job if there is one.
        tracing::warn!("no fiber for a new guest instance: {e}");
        match service.pool.ended(id, &Cell::new(true)) {
            Some(next) => job = next,
            None => return,
        }
    }
}

/// On its own fiber: instantiates the component, serves `first` and then
/// whatever the pool gives it, until the policy says stop.
fn run(service: Arc<ServiceHost>, id: u64, first: Job) {
    let host = &service.host;
    let pre = &service.pre;
    let config = &host.config;
    let tag: Arc<str> = format!("instance {id}").into();
    let status = Status::new(first.deadline);
    // Leaves the pool's count right however this instance ends.
    let _guard = AvailableGuard {
        service: &service,
        id,
        available: &status.available,
    };
    // Whoever waits for this loop to rest is woken when the instance ends,
    // however it ends.
    let rests = Arc::new(Rests::default());
    let _end_rests = EndRests(&rests);
    let mut store = new_store(host, tag.clone(), &[]);
    // The host futures this instance's guest depends on run in its loop.
    let background = Arc::new(Background::default());
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
    let bindings = match instantiated {
        Some(Ok(bindings)) => bindings,
        Some(Err(e)) => {
            tracing::warn!(instance = %tag, "instantiation failed: {e:#}");
            let _ = first.reply.send(Err(e));
            return;
        }
        None => return, // the request fiber answers its own deadline
    };
    first.taken.fresh_instance.store(true, Ordering::Relaxed);
    // The export asked whether the guest takes another concurrent call.
    let func = *bindings.wasi_http_handler().func_handle().func();
    let proxy = Proxy::P3(bindings);
    let reuse = config.instance_reuse.unwrap_or(DEFAULT_INSTANCE_REUSE);
    let concurrency = config.instance_concurrency;
    let _ = store.set_fuel(0);

    let status = &status;
    let service = &service;
    let proxy = &proxy;
    let tag = &tag;
    let rests = &rests;
    let serve = async move |accessor: &Accessor<GuestState>| -> wasmtime::Result<()> {
        let mut in_flight = FuturesUnordered::new();
        let mut background_running = FuturesUnordered::new();
        // The deadlines of the requests in flight (few: a Vec will do).
        let mut deadlines: Vec<Instant> = Vec::new();
        let mut accepted = 0usize;

        let accept = |job: Job,
                      in_flight: &mut FuturesUnordered<_>,
                      deadlines: &mut Vec<Instant>| {
            // Assume the new task computes until the loop shows otherwise.
            status.may_interleave.set(false);
            let Job {
                request,
                reply,
                deadline,
                taken,
            } = job;
            taken.accepted_by(rests);
            let request = (*request).map(request_body);
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
                //
                // The call ends as it sends the answer: the request
                // fiber's wait for the body counts rests from here.
                Ok(prepared) => Either::Left(prepared.run(accessor, std::future::pending()).map(
                    move |sent| {
                        taken.answered(rests.count());
                        sent.map(|_| (true, deadline))
                    },
                )),
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
                        status.close();
                    }
                }
                let ready = accessor.poll_ready_for_concurrent_call(func, cx).is_ready();
                let open = status.open(
                    RuntimeClock,
                    accepted,
                    reuse,
                    in_flight.len(),
                    concurrency,
                    ready,
                );
                service.set_available(id, &status.available, open);
                if status.takes_now(open, in_flight.len()) {
                    if let Poll::Ready(job) = service.pool.poll_job(id, cx) {
                        accepted += 1;
                        accept(job, &mut in_flight, &mut deadlines);
                        continue;
                    }
                }
                if !in_flight.is_empty() {
                    return Poll::Pending;
                }
                if accessor.poll_no_interesting_tasks(cx).is_pending() {
                    status.after_responses(RuntimeClock, config.timeout);
                    return Poll::Pending;
                }
                if status.quiet(RuntimeClock, ready, config.instance_idle_timeout) {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Pending;
            }
        })
        .await
    };

    let result = {
        let mut event_loop = pin!(store.run_concurrent(serve));
        let watch = Arc::new(YieldWatch {
            woken: AtomicBool::new(false),
            outer: Mutex::new(None),
            rests: rests.clone(),
        });
        let mut kill = spindle::time::sleep_until_future(status.kill_at.get());
        let mut yields = 0u32;
        spindle::block_on(std::future::poll_fn(|cx| loop {
            rests.stirred();
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
                match status.timer(spindle::time::now()) {
                    Timer::Drop(result) => {
                        return Poll::Ready(result.map_err(|why| wasmtime::format_err!("{why}")));
                    }
                    // Past a request's deadline: no more work here, even
                    // if the guest computes and the loop is not polled.
                    Timer::StopTaking => service.set_available(id, &status.available, false),
                    Timer::Rearm => {}
                }
                kill = spindle::time::sleep_until_future(status.next_check());
            }
            if watch.woke() {
                // One self-wake may be the loop's own deferred work (a call
                // just started); two in a row is the guest yielding at its
                // fuel interval: computing, so no more work here.
                yields += 1;
                if yields >= 2 {
                    if !status.computing.replace(true) {
                        service.set_available(id, &status.available, false);
                    }
                    rests.rested(); // the guest computes: its bodies come later
                }
                return Poll::Pending; // block_on polls again soon
            }
            yields = 0;
            // Every task waits: it may take another request.
            let was_computing = status.computing.replace(false);
            if !status.may_interleave.replace(true) || was_computing {
                continue;
            }
            rests.rested();
            return Poll::Pending;
        }))
    };
    if let Err(e) = result {
        tracing::warn!(instance = %tag, "instance dropped: {}", describe(&e));
    }
}

/// Takes an instance out of the pool's counts when it ends.
struct AvailableGuard<'a> {
    service: &'a Arc<ServiceHost>,
    id: u64,
    available: &'a Cell<bool>,
}

impl Drop for AvailableGuard<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.service.pool.ended(self.id, self.available) {
            start(self.service, job);
        }
    }
}

/// Tells a poll that ended with a self-wake (the guest yielding at its fuel
/// interval, or the loop's deferred work) from one where every task waits;
/// and tells the loop's [`Rests`] that it was woken.
struct YieldWatch {
    woken: AtomicBool,
    outer: Mutex<Option<Waker>>,
    rests: Arc<Rests>,
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
        self.rests.stirred();
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
