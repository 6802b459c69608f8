//! [`Server`]: an accept loop and one fiber per connection.
//!
//! # A connection's life
//!
//! ```text
//! idle (keep_alive_timeout) → head (header_read_timeout) → handler → response → idle …
//! ```
//!
//! The head is read into one buffer and parsed with `httparse` into a
//! stack array of headers; header values are slices of the frozen head
//! (`Bytes`), so no header costs an allocation. Bytes past the head stay in
//! the buffer: a pipelined next request is answered after this one, in
//! order. The body is read only as the handler reads it; whatever it leaves
//! unread is drained before the next request (or the connection is closed
//! if that is too much).
//!
//! # Bad input
//!
//! A malformed request line or header is a 400, a head past the limit a
//! 431 (a 414 when the request line alone is that long), a body past it a
//! 413, an HTTP version other than 1.0/1.1 a 505, and
//! a request with both `Content-Length` and `Transfer-Encoding`, several
//! differing `Content-Length`s, or a transfer coding other than `chunked`
//! a 400 (no request smuggling). The connection is closed after an error
//! response; every other connection goes on. A handler that panics gets
//! its client a 500 and its connection closed.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::{Request, Response};
use spindle::net::{AcceptLoop, AcceptMode, Acceptor, TcpListener};

use crate::body::Body;
use crate::config::ServerConfig;
use crate::conn::{Conn, Established};
use crate::serving::{Drain, Handler};

/// An HTTP/1.1 server whose handlers are ordinary functions run on the
/// connection's fiber: they may read the body, sleep, call other servers.
///
/// ```no_run
/// use spindle_http::{Body, Response, Server};
/// spindle::run(|| {
///     let server = Server::bind("127.0.0.1:8080").unwrap();
///     server.serve(|_req| Response::new(Body::from("Hello, World!"))).unwrap();
/// });
/// ```
pub struct Server {
    acceptor: Acceptor,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: Arc<ServerState>,
}

/// What a [`ServerHandle`] sees of a running server.
struct ServerState {
    drain: Drain,
    /// The accept loops' fibers, for `drain` to stop them.
    accept_fibers: Mutex<Vec<spindle::Fiber>>,
    /// Open connections: their fiber and whether they sit idle between
    /// requests. A plain lock, held only for a lookup or an update and
    /// never across a wait: a connection's exit takes it while its fiber
    /// is cancelled, and a fiber-aware lock is a cancellation point — a
    /// contended one would unwind the exit before it unregistered.
    conns: Mutex<HashMap<u64, (spindle::Fiber, Arc<AtomicBool>)>>,
    /// A token sent each time a connection unregisters (kept if one is
    /// already there), for `drain` to look at `conns` again. Sending never
    /// waits, so it is not a cancellation point either.
    closed_tx: spindle::chan::Sender<()>,
    closed_rx: spindle::chan::Receiver<()>,
    /// One drain at a time: they share the token.
    draining: spindle::sync::Mutex<()>,
}

impl Default for ServerState {
    fn default() -> ServerState {
        let (closed_tx, closed_rx) = spindle::chan::bounded(1);
        ServerState {
            drain: Drain::default(),
            accept_fibers: Mutex::default(),
            conns: Mutex::default(),
            closed_tx,
            closed_rx,
            draining: spindle::sync::Mutex::new(()),
        }
    }
}

impl ServerState {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, (spindle::Fiber, Arc<AtomicBool>)>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no connection is open (true) or `until` passes.
    fn wait_closed(&self, until: std::time::Instant) -> bool {
        loop {
            // A close after this look sends its token after it too, so
            // the wait below ends for it; an older token only costs a
            // second look.
            if self.conns().is_empty() {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= until {
                return false;
            }
            let _ = self.closed_rx.recv_timeout(until - now);
        }
    }

    /// A connection's exit: unregisters it, however the connection ended.
    fn unregister(&self, id: u64) {
        self.conns().remove(&id);
        let _ = self.closed_tx.try_send(()); // full: a token is there already
    }
}

/// Controls a running [`Server`] from another fiber or thread.
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<ServerState>,
}

impl ServerHandle {
    /// Graceful stop: stops accepting, closes idle keep-alive connections
    /// at once, lets requests in flight finish (their connections close
    /// after the response) until `deadline`, then cancels what is left.
    /// Returns how many connections had to be cancelled.
    pub fn drain(&self, deadline: std::time::Instant) -> usize {
        let state = &*self.state;
        let _one_at_a_time = state.draining.lock();
        state.drain.set();
        for f in state
            .accept_fibers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            f.cancel();
        }
        let idle: Vec<spindle::Fiber> = state
            .conns()
            .values()
            .filter(|(_, idle)| idle.load(Ordering::SeqCst))
            .map(|(fiber, _)| fiber.clone())
            .collect();
        for fiber in idle {
            fiber.cancel();
        }
        // Each connection's exit sends a token: wait for them to close,
        // until the deadline.
        if state.wait_closed(deadline) {
            return 0;
        }
        let left: Vec<spindle::Fiber> = state.conns().values().map(|(f, _)| f.clone()).collect();
        for fiber in &left {
            fiber.cancel();
        }
        // Cancelled waits fail at once; give the fibers a moment to run
        // their failure paths and leave.
        state.wait_closed(std::time::Instant::now() + Duration::from_secs(1));
        left.len()
    }

    /// Open connections right now.
    pub fn connections(&self) -> usize {
        self.state.conns().len()
    }
}

impl Server {
    /// Binds a listener on `addr` (one accept loop: [`AcceptMode::Shared`]).
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<Server> {
        Server::bind_with(addr, AcceptMode::Shared)
    }

    /// Binds `addr` to accept as `mode` says: on one loop
    /// ([`Shared`](AcceptMode::Shared)), on a `SO_REUSEPORT` listener per
    /// worker with each connection served where it was accepted
    /// ([`PerWorker`](AcceptMode::PerWorker)), or on one loop dealing
    /// connections to the workers in turn
    /// ([`RoundRobin`](AcceptMode::RoundRobin)). `PerWorker` must be called
    /// on a fiber (it binds one listener per worker of its runtime).
    ///
    /// ```no_run
    /// use spindle::net::AcceptMode;
    /// use spindle_http::{Body, Response, Server};
    /// spindle::run(|| {
    ///     let server = Server::bind_with("127.0.0.1:8080", AcceptMode::PerWorker).unwrap();
    ///     server.serve(|_req| Response::new(Body::from("Hello, World!"))).unwrap();
    /// });
    /// ```
    pub fn bind_with<A: ToSocketAddrs + Sync>(addr: A, mode: AcceptMode) -> io::Result<Server> {
        Ok(Server::from_acceptor(Acceptor::bind(addr, mode)?))
    }

    /// Serves on an existing listener, with one accept loop.
    pub fn from_listener(listener: TcpListener) -> Server {
        let acceptor = Acceptor::from_listener(listener, AcceptMode::Shared)
            .expect("a single listener suits the shared mode");
        Server::from_acceptor(acceptor)
    }

    /// Serves on the listeners of `acceptor`, placing connections as its
    /// mode says.
    pub fn from_acceptor(acceptor: Acceptor) -> Server {
        Server {
            acceptor,
            config: ServerConfig::default(),
            tls: None,
            state: Arc::new(ServerState::default()),
        }
    }

    /// A handle to drain the server once it serves.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: self.state.clone(),
        }
    }

    /// Replaces the limits and timeouts.
    pub fn config(mut self, config: ServerConfig) -> Server {
        self.config = config;
        self
    }

    /// Serves HTTPS: every connection does a TLS handshake, on its own
    /// fiber and under the header-read timeout, before its first request.
    /// A failed handshake (a plain-HTTP probe, an untrusted peer) closes
    /// that connection only. See [`tls`](crate::tls) for building `config`
    /// from PEM files.
    ///
    /// ```no_run
    /// let tls = spindle_http::tls::server_config_from_pem_files("cert.pem", "key.pem").unwrap();
    /// let server = spindle_http::Server::bind("127.0.0.1:8443").unwrap().tls(tls);
    /// ```
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Server {
        self.tls = Some(config);
        self
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.acceptor.local_addr()
    }

    /// Accepts connections until drained, one fiber each, calling
    /// `handler` for every request. Must run on a Spindle fiber.
    pub fn serve<H>(self, handler: H) -> io::Result<()>
    where
        H: Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static,
    {
        let http2 = self.config.http2;
        let shared = Arc::new(Shared {
            handler: Arc::new(handler),
            config: self.config,
            open: AtomicUsize::new(0),
            state: self.state,
            tls: self.tls.map(|tls| crate::tls::server_alpn(tls, http2)),
        });
        self.acceptor
            .run(move |accepting| shared.accept_loop(accepting))
    }
}

/// What every accept loop of one server shares.
struct Shared {
    handler: Arc<Handler>,
    config: ServerConfig,
    /// Connections open, for `max_connections`.
    open: AtomicUsize,
    state: Arc<ServerState>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Shared {
    /// One accept loop: admits, registers and spawns each connection.
    fn accept_loop(self: &Arc<Self>, accepting: &AcceptLoop) -> io::Result<()> {
        let state = &self.state;
        if let Some(me) = spindle::current() {
            state
                .accept_fibers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(me);
        }
        loop {
            if state.drain.is_set() {
                return Ok(());
            }
            let (conn, _) = match accepting.accept() {
                Ok(c) => c,
                Err(_) if state.drain.is_set() => return Ok(()),
                Err(e) if spindle::is_cancelled(&e) => return Err(e),
                Err(e) => {
                    // EMFILE and friends: back off a moment and go on.
                    if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) {
                        spindle::time::sleep(Duration::from_millis(5));
                    }
                    continue;
                }
            };
            if self.open.load(Ordering::Relaxed) >= self.config.max_connections {
                // Admission control: answer and close rather than queue.
                let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = (&conn).write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            self.open.fetch_add(1, Ordering::Relaxed);
            let shared = self.clone();
            let idle = Arc::new(AtomicBool::new(true));
            let idle2 = idle.clone();
            // The connection is registered (for `drain`) before it runs.
            let (registered_tx, registered_rx) = spindle::chan::oneshot::<()>();
            let builder = spindle::Builder::new().name("http-conn");
            let spawned = accepting.spawn_with(builder, move || {
                let _ = registered_rx.recv();
                // Unregisters however the connection ends — a cancel
                // unwinds the fiber.
                struct Unregister(Arc<Shared>, u64);
                impl Drop for Unregister {
                    fn drop(&mut self) {
                        self.0.open.fetch_sub(1, Ordering::Relaxed);
                        self.0.state.unregister(self.1);
                    }
                }
                let id = spindle::current().map(|f| f.id()).unwrap_or(0);
                let shared = Unregister(shared, id);
                let s = &shared.0;
                match Conn::establish(conn, s.tls.clone(), &s.config) {
                    Some(Established::Http1(conn)) => {
                        conn.serve(&s.config, &s.handler, &idle2, &s.state.drain)
                    }
                    Some(Established::Http2(io)) => {
                        idle2.store(false, Ordering::SeqCst);
                        crate::h2::server::serve(io, &s.config, &s.handler, &s.state.drain)
                    }
                    None => {} // a failed handshake: this connection only
                }
            });
            match spawned {
                Ok(h) => {
                    let f = h.fiber().clone();
                    state.conns().insert(f.id(), (f, idle));
                    let _ = registered_tx.send(());
                }
                Err(_) => {
                    // No stack for a fiber: this connection is refused, the
                    // server goes on.
                    self.open.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}
