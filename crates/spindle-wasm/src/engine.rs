//! The engine and linker of a host (and of a command): wasmtime's pooling
//! allocator sized for the world, fuel, the code cache, and the WASI
//! imports each world links.
//!
//! Instances come from wasmtime's pooling allocator, sized for exactly
//! the instances a host may keep alive (see [`instance_slots`]): a
//! request's instance is carved from pre-reserved slots (copy-on-write
//! memory images), not mapped afresh. Fuel is on: the guest yields every
//! `fuel_yield_interval` units, and a request's budget is `fuel_limit`.
//! Compiled code is cached on disk by wasmtime's cache, keyed by the
//! component's hash and the engine's configuration.
//!
//! A WASI 0.2 component and a WASI 0.3 one get different engines (see
//! `world`): only the latter turns on the component model's concurrency
//! support, which would otherwise slow every WASI 0.2 call down.

use wasmtime::component::Linker;
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::config::HostConfig;
use crate::guest::GuestState;
use crate::share::EngineShare;
use crate::world::World;

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

/// The most instance slots one world's shared pool reserves for a whole
/// process: at about 8 GiB of address space each, 3 000 of them take a
/// quarter of what x86-64 gives a process, with room for the other world.
pub(crate) const PROCESS_SLOTS: usize = 3000;

impl EngineShare {
    /// A share sized for the components `(wasm, config)` to be hosted:
    /// the instance slots they would reserve apart, per world, up to
    /// 3 000; and room for the largest memory limit among them.
    pub fn for_components<'a>(
        components: impl IntoIterator<Item = (&'a [u8], &'a HostConfig)>,
    ) -> EngineShare {
        let mut slots = [0usize; 2];
        let mut max_memory = 0;
        for (wasm, config) in components {
            let world = World::of(wasm);
            let i = world as usize;
            slots[i] = slots[i].saturating_add(instance_slots(config, world));
            max_memory = max_memory.max(config.memory_limit);
        }
        EngineShare::new(slots.map(|n| n.clamp(1, PROCESS_SLOTS)), max_memory)
    }
}

/// Builds the engine every guest of a host runs on: the share's, if the
/// host is given one, or one of its own.
pub(crate) fn engine(config: &HostConfig, world: World) -> wasmtime::Result<Engine> {
    match &config.engine_share {
        Some(share) => share.engine(world, |slots, max_memory| {
            build(config, world, slots, max_memory)
        }),
        None => build(
            config,
            world,
            instance_slots(config, world),
            config.memory_limit,
        ),
    }
}

/// An engine whose pool has `slots` instance slots, each memory up to
/// `max_memory` (a host's own limit is its store limiter's).
fn build(
    config: &HostConfig,
    world: World,
    slots: usize,
    max_memory: usize,
) -> wasmtime::Result<Engine> {
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
    let n = u32::try_from(slots).unwrap_or(u32::MAX);
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
        .max_memory_size(max_memory);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    if let Some(dir) = &config.cache_dir {
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(dir);
        // The cache only saves time: without it, components compile at
        // every start.
        match wasmtime::Cache::new(cache) {
            Ok(cache) => {
                c.cache(Some(cache));
            }
            Err(e) => tracing::warn!(
                "compiled-code cache off: {e:#} (set --cache-dir / SPINDLE_CACHE_DIR \
                 to a writable directory, or `off`)"
            ),
        }
    }
    Engine::new(&c)
}

/// The WASI 0.2 imports a Rust-std guest needs, plus `wasi:http`,
/// `wasi:keyvalue` and `wasi:config`; for a
/// WASI 0.3 component, WASI 0.3 and its `wasi:http` too (a guest built
/// with the `wasip3` crate still imports WASI 0.2's `wasi:cli` through Rust's
/// std), with its clock waits on spindle's timers (see `clocks`).
pub(crate) fn linker(engine: &Engine, world: World) -> wasmtime::Result<Linker<GuestState>> {
    let mut linker: Linker<GuestState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    crate::keyvalue::wasi::add_to_linker(&mut linker, |s| crate::keyvalue::wasi::KvView {
        grants: &s.kv,
        table: &mut s.table,
    })?;
    wasmtime_wasi_config::add_to_linker(&mut linker, |s| {
        wasmtime_wasi_config::WasiConfig::new(&s.config_vars)
    })?;
    if world == World::Service {
        wasmtime_wasi::p3::add_to_linker(&mut linker)?;
        wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
        crate::clocks::add_to_linker(&mut linker)?;
    }
    Ok(linker)
}
