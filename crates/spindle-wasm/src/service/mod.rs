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
//! `instance.rs`). A computing instance takes no more work, so a burst of
//! CPU-bound requests spreads over instances, each yielding its worker at
//! every fuel interval. `Pool::submit` gives a job to a waiting available
//! instance, or starts a new instance with it when none is available — up
//! to the pool's instance limit (the allocator's slots, see
//! `engine::instance_slots`); past it the job waits until an instance has
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

//!
//! # Files
//!
//! - `pool.rs`: the policy, with no wasmtime in it — the [`Pool`] that
//!   decides which instance takes a job and when one starts, and an
//!   instance's [`Status`]: when it takes more, when it is done, when it
//!   is dropped. Unit-tested on its own.
//! - `instance.rs`: an instance fiber — instantiation, the event loop that
//!   accepts jobs and runs the guest's calls, the timer that enforces the
//!   policy from outside the loop.
//! - `request.rs`: the request fiber's side — admission, the job, the wait
//!   for the answer, the response and its body.
//! - `rests.rs`: when the instance's loop comes to rest, which tells a
//!   request fiber holding a response head whether its body is coming now
//!   (it waits and sends both at once) or later (the head goes out).
//!
//! [`Pool`]: pool::Pool
//! [`Status`]: pool::Status

mod instance;
mod pool;
mod request;
mod rests;

use std::sync::Arc;
use std::time::Instant;

use futures::channel::oneshot;
use spindle_http::{Body, Request};
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::WasiBody;

use crate::guest::{GuestState, HostInner};

pub(crate) use request::handle;

/// A WASI 0.3 host: its shared part, the pre-linked component, and the
/// pool its instances take requests from.
pub(crate) struct ServiceHost {
    host: Arc<HostInner>,
    pre: ServicePre<GuestState>,
    pool: pool::Pool,
}

impl ServiceHost {
    /// A host whose pool keeps at most `instances` instances alive (the
    /// allocator's slots).
    pub(crate) fn new(
        host: Arc<HostInner>,
        pre: ServicePre<GuestState>,
        instances: usize,
    ) -> ServiceHost {
        ServiceHost {
            host,
            pre,
            pool: pool::Pool::new(instances),
        }
    }
}

/// A guest's answer, or why there is none.
type Reply = Result<http::Response<WasiBody>, wasmtime::Error>;

/// One request on its way to an instance.
struct Job {
    /// With its URI absolute; its body becomes the guest's on the
    /// instance fiber (off the request fiber's stack, see `submit`).
    /// Boxed: a burst of requests waiting for instances grows the pool's
    /// queue, which keeps its size, so a queued job is kept small.
    request: Box<Request<Body>>,
    reply: oneshot::Sender<Reply>,
    deadline: Instant,
    /// What the instance that takes the job tells the request fiber.
    taken: Arc<rests::Taken>,
}

// A queued job stays a few words: the queue keeps the capacity a burst
// grew it to (see `Job::request`).
const _: () = assert!(std::mem::size_of::<Job>() <= 64);
