//! [`EngineShare`]: one engine and instance pool per world for many hosts
//! of one process. Sized by `engine::EngineShare::for_components`, built
//! lazily by the first host of each world (see `engine`).

use std::sync::{Arc, Mutex};

use wasmtime::Engine;

use crate::world::World;

/// Engines shared by every host of a process that is given the share
/// ([`HostConfig::engine_share`](crate::HostConfig::engine_share)): one per
/// world, each with one pooling allocator sized for all of the hosts
/// together (capped at 3 000 instance slots). Without a share each host
/// reserves a pool of its own, sized for its own `max_concurrent` — about
/// 8 TB of address space at the defaults — so a few dozen components
/// would not fit in one process. With it, each host still admits at most
/// its own `max_concurrent` requests; when the shared pool itself is full
/// a request is answered 503 like any other overload.
///
/// ```
/// use spindle_wasm::{EngineShare, HostConfig};
/// let config = HostConfig::default();
/// let share = EngineShare::for_components([(spindle_wasm::HELLO_WASM, &config)]);
/// assert_eq!(share.instance_slots(spindle_wasm::World::Proxy), 1000);
/// let config = config.engine_share(share);
/// # drop(config);
/// ```
#[derive(Clone)]
pub struct EngineShare {
    inner: Arc<ShareInner>,
}

struct ShareInner {
    /// Slots per world, [Proxy, Service].
    slots: [usize; 2],
    max_memory: usize,
    engines: Mutex<[Option<Engine>; 2]>,
}

impl std::fmt::Debug for EngineShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineShare({:?} slots)", self.inner.slots)
    }
}

impl EngineShare {
    pub(crate) fn new(slots: [usize; 2], max_memory: usize) -> EngineShare {
        EngineShare {
            inner: Arc::new(ShareInner {
                slots,
                max_memory,
                engines: Mutex::default(),
            }),
        }
    }

    /// The instance slots the share's pool for `world` has.
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default();
    /// let share = spindle_wasm::EngineShare::for_components([(spindle_wasm::HELLO_WASM, &config)]);
    /// assert_eq!(share.instance_slots(spindle_wasm::World::Service), 1);
    /// ```
    pub fn instance_slots(&self, world: World) -> usize {
        self.inner.slots[world as usize]
    }

    /// The world's engine, built by `build(slots, max_memory)` for the
    /// first host that needs it.
    pub(crate) fn engine(
        &self,
        world: World,
        build: impl FnOnce(usize, usize) -> wasmtime::Result<Engine>,
    ) -> wasmtime::Result<Engine> {
        let mut engines = self.inner.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &engines[world as usize] {
            return Ok(e.clone());
        }
        let e = build(self.instance_slots(world), self.inner.max_memory)?;
        engines[world as usize] = Some(e.clone());
        Ok(e)
    }
}
