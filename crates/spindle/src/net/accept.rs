//! Accepting on every worker: [`Acceptor`] binds a server address for one
//! of three [`AcceptMode`]s and runs its accept loops; each loop places the
//! fibers of the connections it accepts as the mode says.
//!
//! * `Shared` — one listener, one accept loop; a connection's fiber is
//!   placed by the scheduler like any spawn (new fibers spread to idle
//!   workers by stealing). The default, and the simplest.
//! * `PerWorker` — one `SO_REUSEPORT` listener per worker, each with its
//!   accept loop pinned to its worker, and every connection served on the
//!   worker that accepted it: no cross-worker hand-off at all. The kernel
//!   picks the listener by a hash of the peer's address and port, which
//!   evens out over many connections but can be lopsided over a handful.
//! * `RoundRobin` — one listener whose accept loop deals the connections
//!   out to the workers in turn, each pinned to its worker: an even spread
//!   even for a few long-lived connections (a load balancer's pool).
//!
//! The protocol keeps its own accept loop (what to do on `EMFILE`, whether
//! to admit a connection): [`Acceptor::run`] hands each loop an
//! [`AcceptLoop`], whose [`spawn`](AcceptLoop::spawn) places a
//! connection's fiber.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{TcpListener, TcpStream};
use crate::fiber::JoinHandle;

/// How a server's connections are spread over the runtime's workers: by
/// the scheduler from one listener, by the kernel over one `SO_REUSEPORT`
/// listener per worker, or dealt out in turn from one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcceptMode {
    /// One accept loop; connection fibers are placed by the scheduler.
    #[default]
    Shared,
    /// One `SO_REUSEPORT` listener and accept loop per worker; a
    /// connection stays on the worker that accepted it.
    PerWorker,
    /// One accept loop dealing connections to the workers in turn; a
    /// connection stays on the worker it was dealt to.
    RoundRobin,
}

/// A bound server address and its accept mode.
///
/// ```
/// use std::io::{Read, Write};
/// use spindle::net::{AcceptMode, Acceptor, TcpStream};
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.run(|| {
///     let acceptor = Acceptor::bind("127.0.0.1:0", AcceptMode::RoundRobin).unwrap();
///     let addr = acceptor.local_addr().unwrap();
///     let server = spindle::spawn(move || {
///         acceptor.run(|accepting| {
///             // This loop's own policy: serve two connections, then stop.
///             for _ in 0..2 {
///                 let (mut conn, _) = accepting.accept()?;
///                 accepting.spawn(move || {
///                     let worker = spindle::worker_id().unwrap() as u8;
///                     conn.write_all(&[worker]).unwrap();
///                 })?;
///             }
///             Ok(())
///         })
///     });
///     let mut seen = Vec::new();
///     for _ in 0..2 {
///         let mut c = TcpStream::connect(addr).unwrap();
///         let mut w = [0u8];
///         c.read_exact(&mut w).unwrap();
///         seen.push(w[0]);
///     }
///     seen.sort();
///     assert_eq!(seen, [0, 1], "dealt to each worker in turn");
///     server.join().unwrap().unwrap();
/// });
/// ```
pub struct Acceptor {
    listeners: Vec<TcpListener>,
    mode: AcceptMode,
}

impl Acceptor {
    /// Binds `addr` for `mode`: one listener, or for `PerWorker` one
    /// `SO_REUSEPORT` listener per worker of the calling fiber's runtime
    /// (all on the port the first one got, if `addr` asked for port 0).
    ///
    /// # Panics
    ///
    /// `PerWorker` outside a runtime's fiber (it needs the worker count).
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A, mode: AcceptMode) -> io::Result<Acceptor> {
        let listeners = match mode {
            AcceptMode::Shared | AcceptMode::RoundRobin => vec![TcpListener::bind(addr)?],
            AcceptMode::PerWorker => {
                let workers = crate::sched::worker::worker_count().expect(
                    "spindle::net::Acceptor::bind(PerWorker) called outside a spindle fiber",
                );
                let first = TcpListener::bind_reuse_port(addr)?;
                let at = first.local_addr()?;
                let mut listeners = vec![first];
                for _ in 1..workers {
                    listeners.push(TcpListener::bind_reuse_port(at)?);
                }
                listeners
            }
        };
        Ok(Acceptor { listeners, mode })
    }

    /// Uses an existing listener (`Shared` or `RoundRobin`; for
    /// `PerWorker`, bind with [`bind`](Self::bind)).
    pub fn from_listener(listener: TcpListener, mode: AcceptMode) -> io::Result<Acceptor> {
        if mode == AcceptMode::PerWorker {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "PerWorker binds a listener per worker: use Acceptor::bind",
            ));
        }
        Ok(Acceptor {
            listeners: vec![listener],
            mode,
        })
    }

    /// The address the listeners are bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listeners[0].local_addr()
    }

    /// The accept mode.
    pub fn mode(&self) -> AcceptMode {
        self.mode
    }

    /// Runs `each_loop` once per listener, each on a fiber of its own
    /// (pinned to its worker for `PerWorker`), and waits for all of them.
    /// Returns the first error a loop returned, or `Ok` when all returned
    /// `Ok`. A loop that panics re-raises its panic here, after the other
    /// loops are cancelled; cancelling the calling fiber cancels the loops.
    ///
    /// # Panics
    ///
    /// Outside a spindle fiber.
    pub fn run<F>(self, each_loop: F) -> io::Result<()>
    where
        F: Fn(&AcceptLoop) -> io::Result<()> + Send + Sync + 'static,
    {
        let each_loop = Arc::new(each_loop);
        let workers = crate::sched::worker::worker_count()
            .expect("spindle::net::Acceptor::run called outside a spindle fiber");
        let dealer = Arc::new(AtomicUsize::new(0));
        let mode = self.mode;
        // A loop that fails or panics cancels its siblings, so `run`
        // returns instead of waiting on loops that may accept forever.
        let siblings: Arc<Mutex<Vec<crate::Fiber>>> = Arc::default();
        let mut loops = Vec::with_capacity(self.listeners.len());
        for (index, listener) in self.listeners.into_iter().enumerate() {
            let accept_loop = AcceptLoop {
                listener,
                mode,
                workers,
                dealer: dealer.clone(),
            };
            let (body, siblings) = (each_loop.clone(), siblings.clone());
            let run = move || {
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| body(&accept_loop)));
                let failed = match &outcome {
                    Ok(r) => r.is_err(),
                    Err(p) => !p.is::<crate::Cancelled>(),
                };
                if failed {
                    let me = crate::sched::worker::current_fiber().map(|f| f.header.id);
                    for f in siblings.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        if Some(f.id()) != me {
                            f.cancel();
                        }
                    }
                }
                outcome.unwrap_or_else(|p| panic::resume_unwind(p))
            };
            let builder = crate::Builder::new().name("accept");
            let spawned = match mode {
                AcceptMode::PerWorker => builder.spawn_on_worker(index % workers, run),
                _ => builder.spawn(run),
            };
            match spawned {
                Ok(h) => loops.push(h),
                Err(e) => {
                    loops.iter().for_each(JoinHandle::cancel);
                    return Err(e);
                }
            }
        }
        *siblings.lock().unwrap_or_else(|e| e.into_inner()) =
            loops.iter().map(|h| h.fiber().clone()).collect();
        // Cancelling us (a server's drain) cancels the loops: the guard
        // runs as the cancel unwinds this fiber.
        struct CancelOnDrop(Arc<Mutex<Vec<crate::Fiber>>>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                let loops = self.0.lock().unwrap_or_else(|e| e.into_inner());
                loops.iter().for_each(crate::Fiber::cancel);
            }
        }
        let guard = CancelOnDrop(siblings);
        // A loop's own failure first; the cancellations it caused after.
        let (mut failure, mut cancelled) = (None, None);
        for h in loops {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) if crate::is_cancelled(&e) => cancelled = cancelled.or(Some(e)),
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Err(e) if e.is_panic() => {
                    drop(guard);
                    panic::resume_unwind(e.into_panic())
                }
                Err(_) => {
                    cancelled = cancelled.or(Some(crate::fiber::wait::cancelled_io_error()));
                }
            }
        }
        drop(guard);
        match failure.or(cancelled) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// One accept loop of an [`Acceptor`]: its listener, and where the fibers
/// of its connections go.
pub struct AcceptLoop {
    listener: TcpListener,
    mode: AcceptMode,
    workers: usize,
    dealer: Arc<AtomicUsize>,
}

impl AcceptLoop {
    /// Accepts the next connection on this loop's listener.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.listener.accept()
    }

    /// This loop's listener.
    pub fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// Spawns a connection's fiber where the mode puts it: anywhere
    /// (`Shared`), on this loop's worker (`PerWorker`), on the next worker
    /// in turn (`RoundRobin`).
    pub fn spawn<F, T>(&self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_with(crate::Builder::new(), f)
    }

    /// Like [`spawn`](Self::spawn), with a builder's name and stack size.
    pub fn spawn_with<F, T>(&self, builder: crate::Builder, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.mode {
            AcceptMode::Shared => builder.spawn(f),
            AcceptMode::PerWorker => {
                let here =
                    crate::sched::worker::worker_index().expect("an accept loop runs on a fiber");
                builder.spawn_on_worker(here, f)
            }
            AcceptMode::RoundRobin => {
                let next = self.dealer.fetch_add(1, Ordering::Relaxed) % self.workers;
                builder.spawn_on_worker(next, f)
            }
        }
    }
}
