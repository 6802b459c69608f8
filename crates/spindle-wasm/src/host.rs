//! [`Host`]: one engine, one compiled and pre-linked component, the caps.
//!
//! # Engine
//!
//! Instances come from wasmtime's pooling allocator, sized for exactly
//! `max_concurrent` instances: a request's instance is carved from
//! pre-reserved slots (copy-on-write memory images), not mapped afresh.
//! Fuel is on: the guest yields every `fuel_yield_interval` units, and a
//! request's budget is `fuel_limit`. Compiled code is cached on disk by
//! wasmtime's cache, keyed by the component's hash and the engine's
//! configuration.
//!
//! A WASI 0.2 component and a WASI 0.3 one get different engines (see
//! `world`): only the latter turns on the component model's concurrency
//! support, which would otherwise slow every WASI 0.2 call down.
//!
//! # Admission
//!
//! At most `max_concurrent` guest requests run at once (the pool could not
//! hold more instances anyway). Past that, up to `max_queued` requests wait
//! up to `queue_timeout` for a slot — parked fibers, nothing spins — and
//! the rest are answered 503 at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::config::HostConfig;
use crate::outbound::OutboundHooks;
use crate::world::World;

/// What a guest's store holds.
pub(crate) struct GuestState {
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: crate::report::GuestLimits,
    /// Counts this store among the host's live instances while it lives.
    pub(crate) _live: Option<LiveInstance>,
    pub(crate) hooks: OutboundHooks,
    /// What this store's log lines name (renamed when it is reused).
    pub(crate) tag: crate::log::Tag,
}

impl GuestState {
    /// The state of a new store: `wasi` as the caller built it, the
    /// memory limit and outbound grants of `config`, `tag` naming the
    /// request or command in log lines.
    pub(crate) fn new(
        config: &HostConfig,
        wasi: WasiCtx,
        client: spindle_http::Client,
        tag: crate::log::Tag,
    ) -> GuestState {
        GuestState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limits: crate::report::GuestLimits::new(config.memory_limit),
            _live: None,
            hooks: OutboundHooks {
                allow: config.allow.clone(),
                client,
                tag: tag.clone(),
                background: None,
            },
            tag,
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

/// A WebAssembly HTTP host: a compiled `wasi:http/proxy` (WASI 0.2) or
/// `wasi:http/service` (WASI 0.3) component, ready to serve requests — a
/// 0.2 instance one at a time, a 0.3 instance several at once.
///
/// ```no_run
/// use spindle_wasm::{Host, HostConfig};
/// let wasm = std::fs::read("hello.wasm").unwrap();
/// let host = Host::new(&wasm, HostConfig::default()).unwrap();
/// spindle::run(move || {
///     let server = spindle_http::Server::bind("127.0.0.1:8080").unwrap();
///     server.serve(move |req| host.handle(req)).unwrap();
/// });
/// ```
#[derive(Clone)]
pub struct Host {
    pub(crate) inner: Arc<HostInner>,
}

pub(crate) struct HostInner {
    pub(crate) config: HostConfig,
    pub(crate) pre: Pre,
    pub(crate) client: spindle_http::Client,
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
    /// Where WASI 0.3 requests wait for an instance.
    pub(crate) pool: crate::service::Pool,
    /// WASI 0.2 instances kept between requests (sequential reuse).
    pub(crate) idle: crate::proxy::IdleInstances,
}

/// The pre-linked component, by world.
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

/// How many instances of a component may be alive at once: the pooling
/// allocator's size. A WASI 0.2 instance serves one request at a time, so
/// `max_concurrent` of them; a WASI 0.3 instance serves up to
/// `instance_concurrency`, so twice the instances that many requests need
/// at that packing (room for instances that compute alone, or drain after
/// a deadline), plus 16. Reserving a slot costs address space (about 8 GiB
/// each at the default memory settings), which is why this is not simply
/// `max_concurrent` for both.
pub(crate) fn instance_slots(config: &HostConfig, world: World) -> usize {
    match world {
        World::Proxy => config.max_concurrent,
        World::Service => {
            let packed = config.max_concurrent.div_ceil(config.instance_concurrency);
            config.max_concurrent.min(packed * 2 + 16)
        }
    }
}

/// Builds the engine every guest of a host runs on.
pub(crate) fn engine(config: &HostConfig, world: World) -> wasmtime::Result<Engine> {
    // wasmtime chains its own SIGSEGV handler to the one installed first:
    // ours, which names a fiber whose stack overflowed.
    spindle::install_overflow_handler();
    let mut c = wasmtime::Config::new();
    c.consume_fuel(true);
    match world {
        // Without it a store skips the concurrent event loop's state, and
        // a WASI 0.2 call costs what it did before WASI 0.3 was built in.
        World::Proxy => c.concurrency_support(false),
        World::Service => c.wasm_component_model_async(true),
    };
    let n = u32::try_from(instance_slots(config, world)).unwrap_or(u32::MAX);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(8))
        .total_memories(n.saturating_mul(2))
        .total_tables(n.saturating_mul(8))
        .total_stacks(n)
        // Freed slots go back to the kernel (madvise), wasmtime's default.
        // Keeping 256 KiB of each resident (zeroed in place instead) saved
        // ~10 % of CPU per hello request but cost 200 ms of CPU and left
        // 310 MiB resident after a burst of 1000 concurrent requests (0:
        // 52 MiB): see bench/RESULTS.md, the WebAssembly host section.
        .max_memory_size(config.memory_limit);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    if let Some(dir) = &config.cache_dir {
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(dir);
        c.cache(Some(wasmtime::Cache::new(cache)?));
    }
    Engine::new(&c)
}

/// The WASI 0.2 imports a Rust-std guest needs, plus `wasi:http`; for a
/// WASI 0.3 component, WASI 0.3 and its `wasi:http` too (a guest built
/// with the `wasip3` crate still imports WASI 0.2's `wasi:cli` through Rust's
/// std), with its clock waits on spindle's timers (see `clocks`).
pub(crate) fn linker(engine: &Engine, world: World) -> wasmtime::Result<Linker<GuestState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    if world == World::Service {
        wasmtime_wasi::p3::add_to_linker(&mut linker)?;
        wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
        crate::clocks::add_to_linker(&mut linker)?;
    }
    Ok(linker)
}

impl Host {
    /// Compiles (or loads from the cache) the component in `wasm` and links
    /// it against its WASI version and `wasi:http` (see [`World`]).
    pub fn new(wasm: &[u8], config: HostConfig) -> wasmtime::Result<Host> {
        let world = World::of(wasm);
        let engine = engine(&config, world)?;
        let component = Component::new(&engine, wasm)?;
        let linked = linker(&engine, world)?.instantiate_pre(&component)?;
        let pre = match world {
            World::Proxy => Pre::Proxy(ProxyPre::new(linked)?),
            World::Service => Pre::Service(ServicePre::new(linked)?),
        };
        let slots = spindle::sync::Semaphore::new(config.max_concurrent);
        Ok(Host {
            inner: Arc::new(HostInner {
                client: spindle_http::Client::new(),
                running: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                slots,
                next_id: AtomicU64::new(1),
                instances: Arc::default(),
                instances_made: Arc::default(),
                pool: crate::service::Pool::new(instance_slots(&config, world)),
                idle: Default::default(),
                pre,
                config,
            }),
        })
    }

    /// The configuration this host was built with.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Guest requests running now.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Relaxed)
    }

    /// Requests waiting for a guest slot now.
    pub fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::Relaxed)
    }

    /// Guest instances alive now.
    pub fn instances(&self) -> usize {
        self.inner.instances.load(Ordering::Relaxed)
    }

    /// Guest instances made since the host was built.
    pub fn instances_made(&self) -> u64 {
        self.inner.instances_made.load(Ordering::Relaxed)
    }

    /// The world the component serves.
    pub fn world(&self) -> World {
        match self.inner.pre {
            Pre::Proxy(_) => World::Proxy,
            Pre::Service(_) => World::Service,
        }
    }

    /// Answers one HTTP request: a WASI 0.2 guest runs on the calling
    /// fiber (see the `proxy` module), a WASI 0.3 request is handed to an
    /// instance's fiber while the calling fiber parks on the answer (see
    /// the `service` module). Meant as a spindle-http handler.
    #[inline] // a frame less (and a copy of the request less) under the wait
    pub fn handle(
        &self,
        req: spindle_http::Request<spindle_http::Body>,
    ) -> spindle_http::Response<spindle_http::Body> {
        match self.inner.pre {
            Pre::Proxy(_) => crate::proxy::handle(&self.inner, req),
            Pre::Service(_) => crate::service::handle(&self.inner, req),
        }
    }
}

/// A slot among `max_concurrent`; given back when dropped.
pub(crate) struct Admission {
    host: Arc<HostInner>,
}

impl Admission {
    /// Takes a slot, waiting in the bounded queue if all are busy. `None`:
    /// the queue is full or the wait timed out (answer 503).
    pub(crate) fn take(host: &Arc<HostInner>) -> Option<Admission> {
        let permit = match host.slots.try_acquire() {
            Some(p) => p,
            None => Admission::queue(host)?,
        };
        // The slot is handed back by `Drop`, which outlives this borrow.
        permit.forget();
        host.running.fetch_add(1, Ordering::SeqCst);
        Some(Admission { host: host.clone() })
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
