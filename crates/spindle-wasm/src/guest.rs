//! What every guest path shares: the state a guest's store holds
//! ([`GuestState`]), the pre-instantiated component ([`Pre`]), the host's
//! shared part ([`HostInner`]: configuration, client, counters), admission
//! to one of its `max_concurrent` slots ([`Admission`]), and making a
//! store ([`new_store`]). WASI 0.2 requests (`proxy`), WASI 0.3 instances
//! (`service`) and commands (`command`) all build on this; it names none
//! of them.
//!
//! # Admission
//!
//! At most `max_concurrent` guest requests run at once (the pool could not
//! hold more instances anyway). Past that, up to `max_queued` requests wait
//! up to `queue_timeout` for a slot — parked fibers, nothing spins — and
//! the rest are answered 503 at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::clocks::SpindleClock;
use crate::config::HostConfig;
use crate::log::{GuestLog, Stream, Tag};
use crate::outbound::OutboundHooks;
use crate::report::GuestLimits;

/// What a guest's store holds.
pub(crate) struct GuestState {
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: GuestLimits,
    /// Counts this store among the host's live instances while it lives.
    pub(crate) _live: Option<LiveInstance>,
    pub(crate) hooks: OutboundHooks,
    /// What this store's log lines name (renamed when it is reused).
    pub(crate) tag: Tag,
    /// The key-value stores granted (see `keyvalue`).
    pub(crate) kv: crate::keyvalue::wasi::Grants,
    /// The `wasi:config` variables.
    pub(crate) config_vars: Arc<wasmtime_wasi_config::WasiConfigVariables>,
}

impl GuestState {
    /// The state of a new store: `wasi` as the caller built it, the
    /// memory limit and outbound grants of `config`, `tag` naming the
    /// request or command in log lines.
    pub(crate) fn new(
        config: &HostConfig,
        wasi: WasiCtx,
        clients: crate::outbound::Clients,
        tag: Tag,
    ) -> GuestState {
        GuestState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limits: GuestLimits::new(config.memory_limit),
            _live: None,
            hooks: OutboundHooks {
                allow: config.allow.clone(),
                h2c: config.outbound_h2c.clone(),
                clients,
                tag: tag.clone(),
                background: None,
            },
            tag,
            kv: config.keyvalue.clone(),
            config_vars: config.config_vars.shared.clone(),
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// What a host shares with every request and instance of it.
pub(crate) struct HostInner {
    pub(crate) config: HostConfig,
    pub(crate) pre: Pre,
    pub(crate) clients: crate::outbound::Clients,
    /// Requests running in a guest now.
    pub(crate) running: AtomicUsize,
    /// Requests waiting for a slot.
    pub(crate) queued: AtomicUsize,
    pub(crate) slots: spindle::sync::Semaphore,
    pub(crate) next_id: AtomicU64,
    /// Guest stores alive now (one instance each).
    pub(crate) instances: Arc<AtomicUsize>,
    /// Guest stores made so far.
    pub(crate) instances_made: Arc<AtomicU64>,
    /// Bytes of linear memory the live stores hold.
    pub(crate) memory: Arc<AtomicUsize>,
}

/// The pre-linked component, by world.
#[derive(Clone)]
pub(crate) enum Pre {
    Proxy(ProxyPre<GuestState>),
    Service(ServicePre<GuestState>),
}

impl Pre {
    pub(crate) fn engine(&self) -> &Engine {
        match self {
            Pre::Proxy(p) => p.engine(),
            Pre::Service(p) => p.engine(),
        }
    }
}

/// One live guest store, counted in `HostInner::instances`.
pub(crate) struct LiveInstance(Arc<AtomicUsize>);

impl LiveInstance {
    pub(crate) fn new(count: &Arc<AtomicUsize>, made: &AtomicU64) -> LiveInstance {
        made.fetch_add(1, Ordering::Relaxed);
        count.fetch_add(1, Ordering::Relaxed);
        LiveInstance(count.clone())
    }
}

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A new store for one guest call: WASI with the guest's output going to
/// the log, `wasi:http` with the outbound hooks, fuel and memory limits.
pub(crate) fn new_store(host: &HostInner, tag: Arc<str>, args: &[String]) -> Store<GuestState> {
    let config = &host.config;
    let tag = Tag::new(tag);
    let mut wasi = WasiCtx::builder();
    wasi.stdout(GuestLog::new(tag.clone(), Stream::Stdout))
        .stderr(GuestLog::new(tag.clone(), Stream::Stderr))
        .envs(&config.env)
        .args(args)
        .monotonic_clock(SpindleClock);
    let mut state = GuestState::new(config, wasi.build(), host.clients.clone(), tag);
    state._live = Some(LiveInstance::new(&host.instances, &host.instances_made));
    state.limits.count_in(&host.memory);
    let mut store = Store::new(host.pre.engine(), state);
    store.limiter(|s| &mut s.limits);
    // Fuel is on in every engine we build, so these cannot fail.
    let _ = store.set_fuel(config.fuel_limit);
    let _ = store.fuel_async_yield_interval(Some(config.fuel_yield_interval));
    store
}

/// A slot among `max_concurrent`; given back when dropped.
pub(crate) struct Admission {
    host: Arc<HostInner>,
}

impl Admission {
    /// Takes a slot, waiting in the bounded queue if all are busy. `None`:
    /// the queue is full or the wait timed out (answer 503). With it, how
    /// long the request queued: zero, without reading the clock, when a
    /// slot was free.
    pub(crate) fn take(host: &Arc<HostInner>) -> (Option<Admission>, Duration) {
        let (permit, queued) = match host.slots.try_acquire() {
            Some(p) => (p, Duration::ZERO),
            None => {
                let start = Instant::now();
                let permit = Admission::queue(host);
                let queued = start.elapsed();
                match permit {
                    Some(p) => (p, queued),
                    None => return (None, queued),
                }
            }
        };
        // The slot is handed back by `Drop`, which outlives this borrow.
        permit.forget();
        host.running.fetch_add(1, Ordering::SeqCst);
        (Some(Admission { host: host.clone() }), queued)
    }
}

impl Admission {
    /// Waits in the queue for a slot. Out of line: the wait's frames stay
    /// off the stack of every request that finds a slot free.
    #[cold]
    #[inline(never)]
    fn queue(host: &Arc<HostInner>) -> Option<spindle::sync::SemaphorePermit<'_>> {
        if host.queued.fetch_add(1, Ordering::SeqCst) >= host.config.max_queued {
            host.queued.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let p = host.slots.acquire_timeout(host.config.queue_timeout);
        host.queued.fetch_sub(1, Ordering::SeqCst);
        p
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.host.running.fetch_sub(1, Ordering::SeqCst);
        self.host.slots.add_permits(1);
    }
}
