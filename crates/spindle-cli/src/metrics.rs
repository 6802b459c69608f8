//! `spindle serve`'s metrics, in the Prometheus text format (served on the
//! admin listener's `/metrics`).
//!
//! Counters and histograms are updated on the request path through
//! handles made at startup (one per component and route), so a request
//! costs a few atomic adds and one histogram observation; gauges (requests
//! running and queued, instances, the runtime's own numbers) are read when
//! scraped.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Seconds from 100 µs to about 100 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.5, 16))
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    queue: Family<Labels, Histogram, fn() -> Histogram>,
    instantiate: Family<Labels, Histogram, fn() -> Histogram>,
    handle: Family<Labels, Histogram, fn() -> Histogram>,
    outcomes: Family<Labels, Counter>,
    rejected: Family<Labels, Counter>,
    running: Family<Labels, Gauge>,
    queued: Family<Labels, Gauge>,
    instances: Family<Labels, Gauge>,
    memory: Family<Labels, Gauge>,
    workers: Gauge,
    live_fibers: Gauge,
    queued_fibers: Gauge,
    wait_registrations: Gauge,
    blocking_threads: Gauge,
    connections: Gauge,
    /// Requests by the protocol they came in (HTTP/1.0, HTTP/1.1, HTTP/2).
    protocols: Family<Labels, Counter>,
    by_protocol: [Counter; 3],
    /// Body bytes read from clients and written to them.
    pub bytes_in: Counter,
    pub bytes_out: Counter,
}

/// The status classes a request is counted under.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The handles of one (component, route): what the request path touches.
pub struct RouteMetrics {
    by_class: [Counter; 5],
    duration: Histogram,
}

impl RouteMetrics {
    /// Counts one answered request.
    pub fn record(&self, status: u16, took: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.by_class[class].inc();
        self.duration.observe(took.as_secs_f64());
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let hist: fn() -> Histogram = latency_histogram;
        let m = Metrics {
            registry: Registry::with_prefix("spindle"),
            requests: Family::default(),
            duration: Family::new_with_constructor(hist),
            queue: Family::new_with_constructor(hist),
            instantiate: Family::new_with_constructor(hist),
            handle: Family::new_with_constructor(hist),
            outcomes: Family::default(),
            rejected: Family::default(),
            running: Family::default(),
            queued: Family::default(),
            instances: Family::default(),
            memory: Family::default(),
            workers: Gauge::default(),
            live_fibers: Gauge::default(),
            queued_fibers: Gauge::default(),
            wait_registrations: Gauge::default(),
            blocking_threads: Gauge::default(),
            connections: Gauge::default(),
            protocols: Family::default(),
            by_protocol: Default::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
        };
        let mut m = m;
        let r = &mut m.registry;
        r.register(
            "requests",
            "HTTP requests answered, by component, route and status class",
            m.requests.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time from a request's head to its handler's response",
            m.duration.clone(),
        );
        r.register(
            "request_queue_seconds",
            "Time a request waited for a guest slot",
            m.queue.clone(),
        );
        r.register(
            "request_instantiate_seconds",
            "Time to create a request's guest instance",
            m.instantiate.clone(),
        );
        r.register(
            "request_handle_seconds",
            "Time from a ready instance to the guest's response head",
            m.handle.clone(),
        );
        r.register(
            "guest_outcomes",
            "How guest requests ended (answered, busy, trap, fuel_exhausted, deadline, memory_limit, ...)",
            m.outcomes.clone(),
        );
        r.register(
            "admission_rejected",
            "Requests answered 503 because every guest slot and the queue were full",
            m.rejected.clone(),
        );
        r.register(
            "guest_requests_running",
            "Guest requests running now",
            m.running.clone(),
        );
        r.register(
            "guest_requests_queued",
            "Requests waiting for a guest slot now",
            m.queued.clone(),
        );
        r.register(
            "guest_instances",
            "Guest instances alive now",
            m.instances.clone(),
        );
        r.register(
            "guest_memory_bytes",
            "Linear memory the component's live instances hold now",
            m.memory.clone(),
        );
        r.register(
            "runtime_workers",
            "Worker threads of the runtime",
            m.workers.clone(),
        );
        r.register(
            "runtime_live_fibers",
            "Fibers spawned and not finished",
            m.live_fibers.clone(),
        );
        r.register(
            "runtime_queued_fibers",
            "Runnable fibers waiting for a worker",
            m.queued_fibers.clone(),
        );
        r.register(
            "runtime_wait_registrations",
            "Waits of fibers published and not yet ended",
            m.wait_registrations.clone(),
        );
        r.register(
            "http_connections",
            "Open HTTP connections",
            m.connections.clone(),
        );
        r.register(
            "runtime_blocking_threads",
            "Threads of the blocking pool (file I/O, name resolution)",
            m.blocking_threads.clone(),
        );
        r.register(
            "http_protocol_requests",
            "HTTP requests by the protocol they came in: HTTP/1.0, HTTP/1.1, HTTP/2",
            m.protocols.clone(),
        );
        m.by_protocol = ["HTTP/1.0", "HTTP/1.1", "HTTP/2"].map(|p| {
            m.protocols
                .get_or_create(&labels(&[("protocol", p)]))
                .clone()
        });
        let r = &mut m.registry;
        r.register(
            "http_request_body_bytes",
            "Request body bytes handed to handlers",
            m.bytes_in.clone(),
        );
        r.register(
            "http_response_body_bytes",
            "Response body bytes handed to clients' connections",
            m.bytes_out.clone(),
        );
        m
    }

    /// Counts a request by its protocol.
    pub fn protocol(&self, version: spindle_http::http::Version) {
        let i = match version {
            spindle_http::http::Version::HTTP_10 | spindle_http::http::Version::HTTP_09 => 0,
            spindle_http::http::Version::HTTP_2 => 2,
            _ => 1,
        };
        self.by_protocol[i].inc();
    }

    /// The handles for one component and route (`""` for none: a 404).
    pub fn route(&self, component: &str, route: &str) -> RouteMetrics {
        let by_class = CLASSES.map(|class| {
            self.requests
                .get_or_create(&labels(&[
                    ("component", component),
                    ("route", route),
                    ("class", class),
                ]))
                .clone()
        });
        RouteMetrics {
            by_class,
            duration: self
                .duration
                .get_or_create(&labels(&[("component", component)]))
                .clone(),
        }
    }

    /// The observer a component's host reports to.
    pub fn observer(self: &Arc<Self>, component: &str) -> Arc<dyn spindle_wasm::Observer> {
        let l = labels(&[("component", component)]);
        let outcomes = spindle_wasm::Outcome::ALL.map(|o| {
            let l = labels(&[("component", component), ("outcome", o.as_str())]);
            (o, self.outcomes.get_or_create(&l).clone())
        });
        Arc::new(ComponentObserver {
            queue: self.queue.get_or_create(&l).clone(),
            instantiate: self.instantiate.get_or_create(&l).clone(),
            handle: self.handle.get_or_create(&l).clone(),
            rejected: self.rejected.get_or_create(&l).clone(),
            outcomes,
            metrics: self.clone(),
            component: component.to_string(),
        })
    }

    /// Reads the gauges and renders everything.
    pub fn render(&self, hosts: &[(String, spindle_wasm::Host)], connections: usize) -> String {
        for (name, host) in hosts {
            let l = labels(&[("component", name)]);
            self.running.get_or_create(&l).set(host.running() as i64);
            self.queued.get_or_create(&l).set(host.queued() as i64);
            self.instances
                .get_or_create(&l)
                .set(host.instances() as i64);
            self.memory
                .get_or_create(&l)
                .set(host.memory_bytes() as i64);
        }
        if let Some(stats) = spindle::stats() {
            self.workers.set(stats.workers.len() as i64);
            self.live_fibers.set(stats.live_fibers as i64);
            self.queued_fibers.set(stats.queued() as i64);
            self.wait_registrations.set(stats.wait_registrations as i64);
        }
        self.blocking_threads
            .set(spindle::blocking::threads().0 as i64);
        self.connections.set(connections as i64);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// One component's host observer: its histograms and outcome counters
/// (made at startup: a report costs no label allocation or lookup).
struct ComponentObserver {
    metrics: Arc<Metrics>,
    component: String,
    queue: Histogram,
    instantiate: Histogram,
    handle: Histogram,
    rejected: Counter,
    outcomes: [(spindle_wasm::Outcome, Counter); spindle_wasm::Outcome::ALL.len()],
}

impl spindle_wasm::Observer for ComponentObserver {
    fn request(&self, r: &spindle_wasm::RequestReport) {
        self.queue.observe(r.queue_wait.as_secs_f64());
        if r.outcome != spindle_wasm::Outcome::Busy {
            self.instantiate.observe(r.instantiate.as_secs_f64());
            self.handle.observe(r.handle.as_secs_f64());
        } else {
            self.rejected.inc();
        }
        match self.outcomes.iter().find(|(o, _)| *o == r.outcome) {
            Some((_, counter)) => {
                counter.inc();
            }
            // An outcome added to spindle-wasm after this list.
            None => {
                self.metrics
                    .outcomes
                    .get_or_create(&labels(&[
                        ("component", &self.component),
                        ("outcome", r.outcome.as_str()),
                    ]))
                    .inc();
            }
        }
    }
}
