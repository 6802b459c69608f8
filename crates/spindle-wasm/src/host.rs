//! [`Host`]: the face of the crate's HTTP side — a compiled, pre-linked
//! component with its engine (see `engine`), the part every request
//! shares (see `guest`), and the world's own machinery: WASI 0.2 requests
//! run on their own fiber (`proxy`), WASI 0.3 requests go to instance
//! fibers through a pool (`service`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;

use crate::config::HostConfig;
use crate::engine::{engine, instance_slots, linker};
use crate::guest::{HostInner, Pre};
use crate::proxy::ProxyHost;
use crate::service::ServiceHost;
use crate::world::{misfit, Want, World};

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
    inner: Arc<HostInner>,
    served: Served,
}

/// The world-specific part of a host.
#[derive(Clone)]
enum Served {
    Proxy(Arc<ProxyHost>),
    Service(Arc<ServiceHost>),
}

impl Host {
    /// Compiles (or loads from the cache) the component in `wasm` and links
    /// it against its WASI version and `wasi:http` (see [`World`]).
    pub fn new(wasm: &[u8], config: HostConfig) -> wasmtime::Result<Host> {
        if let Some(why) = misfit(wasm, Want::Http) {
            return Err(wasmtime::Error::msg(why));
        }
        let world = World::of(wasm);
        let engine = engine(&config, world)?;
        // Compiling never waits but takes long with a cold cache: on the
        // blocking pool when called on a fiber (in place on a thread).
        let component = {
            let (engine, wasm) = (engine.clone(), wasm.to_vec());
            spindle::blocking::run(move || Component::new(&engine, &wasm))?
        };
        let linked = linker(&engine, world)?.instantiate_pre(&component)?;
        let pre = match world {
            World::Proxy => Pre::Proxy(ProxyPre::new(linked)?),
            World::Service => Pre::Service(ServicePre::new(linked)?),
        };
        let instances = instance_slots(&config, world);
        let slots = spindle::sync::Semaphore::new(config.max_concurrent);
        let inner = Arc::new(HostInner {
            clients: crate::outbound::Clients::new(),
            running: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            slots,
            next_id: AtomicU64::new(1),
            instances: Arc::default(),
            instances_made: Arc::default(),
            memory: Arc::default(),
            pre: pre.clone(),
            config,
        });
        let served = match pre {
            Pre::Proxy(pre) => Served::Proxy(Arc::new(ProxyHost::new(inner.clone(), pre))),
            Pre::Service(pre) => {
                Served::Service(Arc::new(ServiceHost::new(inner.clone(), pre, instances)))
            }
        };
        Ok(Host { inner, served })
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

    /// Bytes of linear memory its live instances hold now (what their
    /// memories have grown to; the pool may keep more resident).
    ///
    /// ```no_run
    /// # let host = spindle_wasm::Host::new(spindle_wasm::HELLO_WASM, Default::default()).unwrap();
    /// println!("{} bytes", host.memory_bytes());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.inner.memory.load(Ordering::Relaxed)
    }

    /// Guest instances made since the host was built.
    pub fn instances_made(&self) -> u64 {
        self.inner.instances_made.load(Ordering::Relaxed)
    }

    /// The world the component serves.
    pub fn world(&self) -> World {
        match self.served {
            Served::Proxy(_) => World::Proxy,
            Served::Service(_) => World::Service,
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
        match &self.served {
            Served::Proxy(proxy) => crate::proxy::handle(proxy, req),
            Served::Service(service) => crate::service::handle(service, req),
        }
    }
}
