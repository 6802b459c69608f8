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
//! 431, a body past it a 413, an HTTP version other than 1.0/1.1 a 505, and
//! a request with both `Content-Length` and `Transfer-Encoding`, several
//! differing `Content-Length`s, or a transfer coding other than `chunked`
//! a 400 (no request smuggling). The connection is closed after an error
//! response; every other connection goes on. A handler that panics gets
//! its client a 500 and its connection closed.

use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use spindle::net::TcpListener;

use crate::body::Body;
use crate::config::ServerConfig;
use crate::conn::Conn;

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
    listener: TcpListener,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: Arc<ServerState>,
}

/// What a [`ServerHandle`] sees of a running server.
#[derive(Default)]
struct ServerState {
    draining: std::sync::atomic::AtomicBool,
    accept_fiber: Mutex<Option<spindle::Fiber>>,
    /// Open connections: their fiber and whether they sit idle between
    /// requests.
    /// A fiber-aware lock: `drain` waits on `closed` under it.
    conns: spindle::sync::Mutex<
        std::collections::HashMap<u64, (spindle::Fiber, Arc<std::sync::atomic::AtomicBool>)>,
    >,
    /// Signalled each time a connection closes.
    closed: spindle::sync::Condvar,
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
        self.state.draining.store(true, Ordering::SeqCst);
        if let Some(f) = self
            .state
            .accept_fiber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            f.cancel();
        }
        for (fiber, idle) in self.state.conns.lock().values() {
            if idle.load(Ordering::SeqCst) {
                fiber.cancel();
            }
        }
        // Wait for the connections to close (each one's exit signals
        // `closed`), until the deadline.
        let mut conns = self.state.conns.lock();
        while !conns.is_empty() {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            conns = self.state.closed.wait_timeout(conns, deadline - now).0;
        }
        if conns.is_empty() {
            return 0;
        }
        for (fiber, _) in conns.values() {
            fiber.cancel();
        }
        let cancelled = conns.len();
        // Cancelled waits fail at once; give the fibers a moment to run
        // their failure paths and leave.
        let grace = std::time::Instant::now() + Duration::from_secs(1);
        while !conns.is_empty() {
            let now = std::time::Instant::now();
            if now >= grace {
                break;
            }
            conns = self.state.closed.wait_timeout(conns, grace - now).0;
        }
        cancelled
    }

    /// Open connections right now.
    pub fn connections(&self) -> usize {
        self.state.conns.lock().len()
    }
}

impl Server {
    /// Binds a listener on `addr`.
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<Server> {
        Ok(Server::from_listener(TcpListener::bind(addr)?))
    }

    /// Serves on an existing listener.
    pub fn from_listener(listener: TcpListener) -> Server {
        Server {
            listener,
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
        self.listener.local_addr()
    }

    /// Accepts connections forever, one fiber each, calling `handler` for
    /// every request. Must run on a Spindle fiber.
    pub fn serve<H>(self, handler: H) -> io::Result<()>
    where
        H: Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        let config = Arc::new(self.config);
        let open = Arc::new(AtomicUsize::new(0));
        let state = self.state.clone();
        *state.accept_fiber.lock().unwrap_or_else(|e| e.into_inner()) = spindle::current();
        loop {
            if state.draining.load(Ordering::SeqCst) {
                return Ok(());
            }
            let (conn, _) = match self.listener.accept() {
                Ok(c) => c,
                Err(_) if state.draining.load(Ordering::SeqCst) => return Ok(()),
                Err(e) if spindle::is_cancelled(&e) => return Err(e),
                Err(e) => {
                    // EMFILE and friends: back off a moment and go on.
                    if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) {
                        spindle::time::sleep(Duration::from_millis(5));
                    }
                    continue;
                }
            };
            if open.load(Ordering::Relaxed) >= config.max_connections {
                // Admission control: answer and close rather than queue.
                let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = (&conn).write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            open.fetch_add(1, Ordering::Relaxed);
            let (handler, config, open2, st, tls) = (
                handler.clone(),
                config.clone(),
                open.clone(),
                state.clone(),
                self.tls.clone(),
            );
            let idle = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let idle2 = idle.clone();
            // The connection is registered (for `drain`) before it runs.
            let (registered_tx, registered_rx) = spindle::chan::oneshot::<()>();
            let spawned = spindle::Builder::new().name("http-conn").spawn(move || {
                let _ = registered_rx.recv();
                // Unregisters however the connection ends — a cancel
                // unwinds the fiber.
                struct Unregister(Arc<ServerState>, Arc<AtomicUsize>, u64);
                impl Drop for Unregister {
                    fn drop(&mut self) {
                        let mut conns = self.0.conns.lock();
                        conns.remove(&self.2);
                        self.1.fetch_sub(1, Ordering::Relaxed);
                        drop(conns);
                        self.0.closed.notify_all();
                    }
                }
                let id = spindle::current().map(|f| f.id()).unwrap_or(0);
                let _unregister = Unregister(st.clone(), open2, id);
                let Some(conn) = Conn::establish(conn, tls, &config) else {
                    return; // a failed handshake: this connection only
                };
                conn.serve(&config, &*handler, &idle2, &st.draining);
            });
            match spawned {
                Ok(h) => {
                    let f = h.fiber().clone();
                    state.conns.lock().insert(f.id(), (f, idle));
                    let _ = registered_tx.send(());
                }
                Err(_) => {
                    // No stack for a fiber: this connection is refused, the
                    // server goes on.
                    open.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}
