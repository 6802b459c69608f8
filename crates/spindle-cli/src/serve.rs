//! `spindle serve`: the components and their routes, the main listener
//! (HTTP or HTTPS), the admin listener, and the shutdown sequence.
//!
//! ```text
//! SIGTERM ─→ /readyz answers 503 ─(--shutdown-delay)─→ drain: no new
//!            connections, idle ones closed, requests in flight get
//!            --drain-timeout ─→ exit 0
//! ```
//!
//! A second SIGTERM or Ctrl-C exits at once (status 1). SIGQUIT prints the
//! runtime's fiber dump to stderr and serving goes on.
//!
//! The admin listener keeps answering through the whole sequence, so a
//! load balancer sees readiness fail before any connection closes.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use spindle_http::http;
use spindle_http::http::{Method, Uri};
use spindle_http::{Body, Request, Response, StatusCode};
use spindle_wasm::{Host, HostConfig};

use crate::args::{memory_bytes, seconds, seconds_or_zero, ServeArgs};
use crate::manifest::{Manifest, Route, Router};
use crate::metrics::{Metrics, RouteMetrics};
use crate::stores::Stores;

/// What serving needs: the components, how paths reach them, the metrics.
struct App {
    /// (component name, host)
    hosts: Vec<(String, Host)>,
    router: Router,
    /// Per route, in the router's order, and one for unmatched paths.
    route_metrics: Vec<RouteMetrics>,
    unmatched: RouteMetrics,
    metrics: Arc<Metrics>,
}

impl App {
    /// One component from the command line, or the manifest's.
    fn load(args: &ServeArgs) -> Result<App, String> {
        let metrics = Arc::new(Metrics::new());
        let base = args.guest.apply(args.limits.apply(HostConfig::default()))?;
        let (specs, router) = match &args.app {
            Some(path) => {
                let m = Manifest::load(path)?;
                let router = m.router();
                let mut stores = Stores::new(
                    m.keyvalue,
                    &args.guest.keyvalue,
                    args.guest.data_dir.clone(),
                );
                let mut specs = Vec::new();
                for c in m.components {
                    let config = component_config(base.clone(), &c)?;
                    let grants: Vec<String> =
                        c.keyvalue.iter().map(|g| g.get_ref().clone()).collect();
                    let config = stores
                        .grant(config, &grants)
                        .map_err(|e| format!("component {:?}: {e}", c.name))?;
                    specs.push((c.name, Some(c.path.into_inner()), config));
                }
                (specs, router)
            }
            None => {
                let router = Router::new(vec![(Route::Prefix(String::new()), 0)]);
                // The name in metrics and logs: the file's stem, as a
                // manifest's component would be named (not a path).
                let name = match &args.wasm {
                    Some(p) => p
                        .file_stem()
                        .map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().into()),
                    None => "built-in hello".to_string(),
                };
                (vec![(name, args.wasm.clone(), base)], router)
            }
        };
        let mut loaded = Vec::new();
        for (name, path, config) in specs {
            let wasm = match &path {
                Some(p) => read(p)?,
                None => spindle_wasm::HELLO_WASM.to_vec(),
            };
            // One component from the command line is granted every store
            // given there, and `default` (opened only if it uses them).
            let config = match (&args.app, spindle_wasm::imports_keyvalue(&wasm)) {
                (None, true) => {
                    let g = &args.guest;
                    let mut stores =
                        Stores::new(Default::default(), &g.keyvalue, g.data_dir.clone());
                    let names = stores.names();
                    stores.grant(config, &names)?
                }
                _ => config,
            };
            loaded.push((name, wasm, config));
        }
        // A manifest's components share one engine and instance pool per
        // world, so that dozens of them fit in one process.
        if args.app.is_some() {
            let share = spindle_wasm::EngineShare::for_components(
                loaded
                    .iter()
                    .map(|(_, wasm, config)| (wasm.as_slice(), config)),
            );
            for (_, _, config) in &mut loaded {
                *config = config.clone().engine_share(share.clone());
            }
        }
        let mut hosts = Vec::new();
        for (name, wasm, config) in loaded {
            let config = config.observer(metrics.observer(&name));
            let host = Host::new(&wasm, config).map_err(|e| format!("{name}: {e:#}"))?;
            hosts.push((name, host));
        }
        let route_metrics = router
            .routes()
            .iter()
            .map(|(route, c)| metrics.route(&hosts[*c].0, &route.to_string()))
            .collect();
        Ok(App {
            hosts,
            router,
            route_metrics,
            unmatched: metrics.route("", ""),
            metrics,
        })
    }

    /// Routes one request to its component (404 if none), counting it and
    /// writing its access-log line (target `access`, when enabled).
    ///
    /// A guest's request parks under this frame for as long as the guest
    /// takes, and every stack page down to the wait stays resident: what is
    /// done before and after the guest's call is out of line, so this
    /// frame holds little more than the request and the response.
    fn handle(&self, mut req: Request<Body>) -> Response<Body> {
        let started = Instant::now();
        let picked = self.router.pick(req.uri().path());
        let component = picked.map(|r| self.router.routes()[r].1);
        let access = access_fields(&req);
        self.metrics.protocol(req.version());
        self.count_in(&mut req);
        let (response, metrics) = match (picked, component) {
            (Some(r), Some(c)) => (self.hosts[c].1.handle(req), &self.route_metrics[r]),
            _ => (not_found(), &self.unmatched),
        };
        self.answered(response, metrics, started, component, access)
    }

    /// Counts the request's body bytes as they pass: a whole body at once,
    /// a stream as it is read. In place: a request passed by value and
    /// back would be two copies in the frame the guest's call parks under.
    #[inline(never)]
    fn count_in(&self, req: &mut Request<Body>) {
        match req.body().as_bytes() {
            Some(b) => {
                self.metrics.bytes_in.inc_by(b.len() as u64);
            }
            None => {
                let counter = self.metrics.bytes_in.clone();
                let body = std::mem::take(req.body_mut());
                *req.body_mut() = body.observe(move |n| {
                    counter.inc_by(n as u64);
                });
            }
        }
    }

    /// Records the answer (status, time, bytes out) and writes the access
    /// line.
    #[inline(never)]
    fn answered(
        &self,
        response: Response<Body>,
        metrics: &RouteMetrics,
        started: Instant,
        component: Option<usize>,
        access: Option<Box<(Method, Uri)>>,
    ) -> Response<Body> {
        let took = started.elapsed();
        let status = response.status().as_u16();
        metrics.record(status, took);
        let bytes = response.body().as_bytes().map(<[u8]>::len);
        let response = match bytes {
            Some(n) => {
                self.metrics.bytes_out.inc_by(n as u64);
                response
            }
            None => {
                let counter = self.metrics.bytes_out.clone();
                response.map(|body| {
                    body.observe(move |n| {
                        counter.inc_by(n as u64);
                    })
                })
            }
        };
        if let Some(access) = access {
            let (method, uri) = *access;
            tracing::info!(
                target: "access",
                component = component.map_or("", |c| self.hosts[c].0.as_str()),
                %method,
                path = uri.path(),
                status,
                bytes,
                duration_ms = took.as_secs_f64() * 1e3,
            );
        }
        response
    }
}

/// The request's method and target for its access line, when the access
/// log is on (boxed: the line is written after the guest answers, and the
/// request's frame stays small meanwhile).
#[inline(never)]
fn access_fields(req: &Request<Body>) -> Option<Box<(Method, Uri)>> {
    tracing::enabled!(target: "access", tracing::Level::INFO)
        .then(|| Box::new((req.method().clone(), req.uri().clone())))
}

/// The answer for a path no route matches.
#[inline(never)]
fn not_found() -> Response<Body> {
    let mut r = Response::new(Body::from("no route\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The command line's settings, with what a manifest component sets on top.
fn component_config(
    mut config: HostConfig,
    c: &crate::manifest::ComponentSpec,
) -> Result<HostConfig, String> {
    let what = |e: String| format!("component {:?}: {e}", c.name);
    if let Some(n) = c.max_concurrent {
        config = config.max_concurrent(n);
    }
    if let Some(n) = c.max_queue {
        config = config.max_queued(n);
    }
    if let Some(t) = c.queue_timeout {
        config = config.queue_timeout(seconds_or_zero(&t.to_string()).map_err(what)?);
    }
    if let Some(n) = c.fuel_limit {
        config = config.fuel_limit(n);
    }
    if let Some(n) = c.fuel_yield {
        config = config.fuel_yield_interval(n);
    }
    if let Some(m) = &c.memory_limit {
        config = config.memory_limit(memory_bytes(m).map_err(what)?);
    }
    if let Some(t) = c.timeout {
        config = config.timeout(seconds(&t.to_string()).map_err(what)?);
    }
    if let Some(n) = c.max_instance_reuse {
        config = config.instance_reuse(n);
    }
    if let Some(n) = c.max_instance_concurrency {
        config = config.instance_concurrency(n);
    }
    if let Some(t) = c.idle_instance_timeout {
        config = config.instance_idle_timeout(seconds_or_zero(&t.to_string()).map_err(what)?);
    }
    for host in &c.allow_outbound {
        config = config.allow_outbound(host).map_err(what)?;
    }
    for host in &c.outbound_h2c {
        config = config.outbound_h2c(host).map_err(what)?;
    }
    for (k, v) in &c.env {
        config = config.env(k, v);
    }
    for (k, v) in &c.config {
        config = config.config_var(k, v);
    }
    Ok(config)
}

/// The admin listener's answers.
fn admin(
    req: &Request<Body>,
    ready: &AtomicBool,
    app: &App,
    server: &spindle_http::ServerHandle,
) -> Response<Body> {
    let text = |status: StatusCode, body: String, kind: &'static str| {
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = status;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(kind),
        );
        r
    };
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" if ready.load(Ordering::SeqCst) => {
            text(StatusCode::OK, "ready\n".into(), "text/plain")
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining\n".into(),
            "text/plain",
        ),
        "/metrics" => text(
            StatusCode::OK,
            app.metrics.render(&app.hosts, server.connections()),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

/// Workers past this many per CPU only add threads that wait for a turn
/// (and memory for their stacks and queues): most likely a typo.
const MAX_WORKERS_PER_CPU: usize = 4;

/// `--workers n`, refused past [`MAX_WORKERS_PER_CPU`] per CPU this process
/// may use (its affinity and cgroup quota, as `available_parallelism`).
fn checked_workers(n: usize) -> Result<usize, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max = cpus * MAX_WORKERS_PER_CPU;
    if n > max {
        return Err(format!(
            "--workers {n}: at most {max} ({MAX_WORKERS_PER_CPU} per CPU; this process may use {cpus})"
        ));
    }
    Ok(n.max(1))
}

pub fn serve(args: ServeArgs) -> Result<ExitCode, String> {
    let app = Arc::new(App::load(&args)?);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            spindle_http::tls::server_config_from_pem_files(cert, key)
                .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?,
        ),
        _ => None,
    };
    // SIGQUIT prints the fiber dump (every fiber, what it waits for)
    // instead of a core dump.
    // The process allocates with jemalloc (`main.rs`), not glibc's malloc:
    // a warm-up of glibc's arenas would only hold memory.
    let mut builder = spindle::Runtime::builder()
        .dump_on_sigquit(true)
        .warm_malloc(false);
    if let Some(n) = args.workers {
        builder = builder.workers(checked_workers(n)?);
    }
    let rt = builder.build().map_err(|e| format!("runtime: {e}"))?;
    let (listen, reuse_port) = (args.listen.clone(), args.reuse_port);
    let server = rt
        .run(move || {
            let listener = if reuse_port {
                spindle::net::TcpListener::bind_reuse_port(listen.as_str())
            } else {
                spindle::net::TcpListener::bind(listen.as_str())
            }?;
            Ok::<_, std::io::Error>(spindle_http::Server::from_listener(listener))
        })
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let server = match tls {
        Some(config) => server.tls(config),
        None => server,
    };
    // A guest whose client left is stopped (its slot freed), not left to
    // work for nobody.
    let server = server.config(
        spindle_http::ServerConfig::default()
            .watch_client_gone(true)
            .http2(args.http2)
            .h2c(args.h2c),
    );
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    let handle = server.handle();
    let ready = Arc::new(AtomicBool::new(true));

    let admin_server = match &args.admin {
        Some(admin_addr) => {
            let a = admin_addr.clone();
            let s = rt
                .run(move || spindle_http::Server::bind(a.as_str()))
                .map_err(|e| format!("--admin {admin_addr}: {e}"))?;
            Some(s)
        }
        None => None,
    };
    let admin_addr = match &admin_server {
        Some(s) => Some(s.local_addr().map_err(|e| e.to_string())?),
        None => None,
    };
    if let Some(s) = admin_server {
        let (ready, app, main) = (ready.clone(), app.clone(), handle.clone());
        rt.spawn(move || s.serve(move |req| admin(&req, &ready, &app, &main)));
    }
    let serving_app = app.clone();
    let serving = rt.spawn(move || server.serve(move |req| serving_app.handle(req)));
    let names: Vec<&str> = app.hosts.iter().map(|(n, _)| n.as_str()).collect();
    // Written, not `println!`: a closed stdout (a supervisor that read the
    // address and went away) must not take the server down.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "spindle: serving {} on {scheme}://{addr}/",
        names.join(", ")
    );
    if let Some(a) = admin_addr {
        let _ = writeln!(
            out,
            "spindle: admin on http://{a}/ (/healthz, /readyz, /metrics)"
        );
    }
    let _ = out.flush();
    drop(out);

    // SIGINT / SIGTERM: readiness fails, then (after the delay) the drain.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("signals: {e}"))?;
    let (delay, drain) = (args.shutdown_delay, args.drain_timeout);
    // The drain ends the accept loop first, so `serving` returns while
    // requests are still in flight: the runtime (and the process) must
    // outlive them until the drain is done.
    let (drained_tx, drained_rx) = std::sync::mpsc::channel::<()>();
    let draining = Arc::new(AtomicBool::new(false));
    let draining_flag = draining.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            // A second signal during the delay or the drain: the operator
            // wants out now (as most servers do), requests in flight or not.
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    use std::io::Write as _;
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "spindle: a second signal: exiting without finishing the drain"
                    );
                    std::process::exit(1);
                }
            });
            ready.store(false, Ordering::SeqCst);
            draining_flag.store(true, Ordering::SeqCst);
            if !delay.is_zero() {
                tracing::info!("not ready; draining in {:.1} s", delay.as_secs_f64());
                std::thread::sleep(delay);
            }
            tracing::info!(
                "draining ({:.1} s for requests in flight)",
                drain.as_secs_f64()
            );
            let cancelled = handle.drain(Instant::now() + drain);
            if cancelled > 0 {
                tracing::warn!("cancelled {cancelled} connections at the deadline");
            }
            let _ = drained_tx.send(());
        }
    });
    let served = serving.join();
    if draining.load(Ordering::SeqCst) {
        let _ = drained_rx.recv();
    }
    match served {
        Ok(Ok(())) => Ok(ExitCode::SUCCESS),
        Ok(Err(e)) => Err(format!("serving: {e}")),
        Err(e) => Err(format!("serving: {e}")),
    }
}
