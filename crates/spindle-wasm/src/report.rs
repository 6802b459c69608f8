//! What the host tells an [`Observer`] about each request: how it ended
//! and where its time went. `spindle serve` turns these into its metrics;
//! a host without an observer pays nothing but a branch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::ResourceLimiter;

/// How one guest request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The guest answered (whatever status it chose).
    Answered,
    /// Every slot and the queue were full, or the queue wait timed out:
    /// the host answered 503 without running the guest.
    Busy,
    /// The request could not be handed to the guest: 400.
    BadRequest,
    /// The guest trapped.
    Trap,
    /// The request used up its fuel budget.
    FuelExhausted,
    /// The request passed its deadline.
    Deadline,
    /// The guest tried to grow its memory past the limit.
    MemoryLimit,
    /// The guest failed otherwise (returned no response, a host error).
    Failed,
    /// The client closed the connection before the answer: the guest's
    /// call was dropped (WASI 0.2) or abandoned (WASI 0.3), its slot freed.
    ClientClosed,
}

impl Outcome {
    /// Every outcome, in declaration order: for counters made ahead of
    /// time (one per outcome).
    ///
    /// ```
    /// use spindle_wasm::Outcome;
    /// assert!(Outcome::ALL.contains(&Outcome::Trap));
    /// assert_eq!(Outcome::ALL.len(), 9);
    /// ```
    pub const ALL: [Outcome; 9] = [
        Outcome::Answered,
        Outcome::Busy,
        Outcome::BadRequest,
        Outcome::Trap,
        Outcome::FuelExhausted,
        Outcome::Deadline,
        Outcome::MemoryLimit,
        Outcome::Failed,
        Outcome::ClientClosed,
    ];

    /// A short label, for metrics and logs.
    ///
    /// ```
    /// assert_eq!(spindle_wasm::Outcome::FuelExhausted.as_str(), "fuel_exhausted");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Busy => "busy",
            Outcome::BadRequest => "bad_request",
            Outcome::Trap => "trap",
            Outcome::FuelExhausted => "fuel_exhausted",
            Outcome::Deadline => "deadline",
            Outcome::MemoryLimit => "memory_limit",
            Outcome::Failed => "failed",
            Outcome::ClientClosed => "client_closed",
        }
    }
}

/// What the host measured of one request (reported when the guest's part
/// of it is over: after its response body, or its failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestReport {
    /// How it ended.
    pub outcome: Outcome,
    /// Waiting for a guest slot.
    pub queue_wait: Duration,
    /// Creating the guest's instance (zero if it never got one).
    pub instantiate: Duration,
    /// From the instance being ready to the guest's response head (or its
    /// failure).
    pub handle: Duration,
}

/// Receives a [`RequestReport`] per request
/// ([`HostConfig::observer`](crate::HostConfig::observer)). Called on the
/// request's fiber: keep it short and never block.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// struct Count(AtomicUsize);
/// impl spindle_wasm::Observer for Count {
///     fn request(&self, _report: &spindle_wasm::RequestReport) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// let config = spindle_wasm::HostConfig::default()
///     .observer(std::sync::Arc::new(Count(AtomicUsize::new(0))));
/// ```
pub trait Observer: Send + Sync + 'static {
    /// One request's report.
    fn request(&self, report: &RequestReport);
}

/// The memory limit of a store, remembering whether the guest ran into it
/// (so that the failure that follows is reported as `MemoryLimit`).
/// It also keeps the host's count of linear memory in use: what its
/// store's memories have grown to, given back when the store is dropped.
pub(crate) struct GuestLimits {
    max_memory: usize,
    hit: Arc<AtomicBool>,
    /// Bytes this store's memories hold now.
    held: usize,
    /// The host's total, if it counts one.
    total: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl GuestLimits {
    pub(crate) fn new(max_memory: usize) -> GuestLimits {
        GuestLimits {
            max_memory,
            hit: Arc::default(),
            held: 0,
            total: None,
        }
    }

    /// Counts this store's memory in `total` from now on.
    pub(crate) fn count_in(&mut self, total: &Arc<std::sync::atomic::AtomicUsize>) {
        self.total = Some(total.clone());
    }

    /// Forgets a refused growth (a reused store starts a new request).
    pub(crate) fn reset(&self) {
        self.hit.store(false, Ordering::Relaxed);
    }

    /// Set once a growth past the limit was refused.
    pub(crate) fn hit_flag(&self) -> Arc<AtomicBool> {
        self.hit.clone()
    }
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = desired <= self.max_memory;
        if !ok {
            self.hit.store(true, Ordering::Relaxed);
        } else if let Some(total) = &self.total {
            // Asked at creation too (from 0), so this is the whole size.
            let grown = desired.saturating_sub(current);
            self.held += grown;
            total.fetch_add(grown, Ordering::Relaxed);
        }
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

impl Drop for GuestLimits {
    fn drop(&mut self) {
        if let Some(total) = &self.total {
            total.fetch_sub(self.held, Ordering::Relaxed);
        }
    }
}
