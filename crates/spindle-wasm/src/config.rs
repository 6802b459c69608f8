//! [`HostConfig`]: the limits and grants of a guest host.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::outbound::AllowList;

/// Limits and grants for the guests of a [`Host`](crate::Host).
///
/// ```
/// use std::time::Duration;
/// let config = spindle_wasm::HostConfig::default()
///     .max_concurrent(100)
///     .timeout(Duration::from_secs(5))
///     .allow_outbound("127.0.0.1:8080").unwrap();
/// assert_eq!(config.max_concurrent_requests(), 100);
/// ```
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub(crate) max_concurrent: usize,
    pub(crate) max_queued: usize,
    pub(crate) queue_timeout: Duration,
    pub(crate) fuel_yield_interval: u64,
    pub(crate) fuel_limit: u64,
    pub(crate) memory_limit: usize,
    pub(crate) timeout: Duration,
    /// Shared by every store (a store clones the `Arc`, not the list).
    pub(crate) allow: Arc<AllowList>,
    pub(crate) outbound_h2c: Arc<AllowList>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) observer: ObserverSlot,
    /// `None`: the world's default (see `instance_reuse`).
    pub(crate) instance_reuse: Option<usize>,
    pub(crate) instance_concurrency: usize,
    pub(crate) instance_idle_timeout: Duration,
    /// The key-value stores granted, by the name a guest opens.
    pub(crate) keyvalue: crate::keyvalue::wasi::Grants,
    /// The `wasi:config` variables.
    pub(crate) config_vars: ConfigVars,
    /// Engines shared with other hosts, if any.
    pub(crate) engine_share: Option<crate::share::EngineShare>,
}

/// The `wasi:config` variables, shared by every store (a newtype so the
/// config stays `Debug` and cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct ConfigVars {
    pairs: std::collections::BTreeMap<String, String>,
    pub(crate) shared: Arc<wasmtime_wasi_config::WasiConfigVariables>,
}

impl std::fmt::Debug for ConfigVars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(&self.pairs).finish()
    }
}

/// The optional observer (a newtype so the config stays `Debug`).
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(pub(crate) Option<Arc<dyn crate::Observer>>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(observer)"
        } else {
            "None"
        })
    }
}

impl Default for HostConfig {
    /// 1 000 concurrent guest requests (1 000 more may queue for 5 s), a
    /// fuel yield every 1 000 000 units, a budget of 1 000 000 000 fuel and
    /// 30 s per request, 128 MiB of memory per instance, no outbound host,
    /// compiled code cached under `$XDG_CACHE_HOME/spindle` (or
    /// `~/.cache/spindle`); a WASI 0.3 instance serves up to 128 requests,
    /// 16 at once, and is dropped after 1 s idle (`wasmtime serve`'s
    /// defaults), a WASI 0.2 instance serves one.
    fn default() -> Self {
        HostConfig {
            max_concurrent: 1000,
            max_queued: 1000,
            queue_timeout: Duration::from_secs(5),
            fuel_yield_interval: 1_000_000,
            fuel_limit: 1_000_000_000,
            memory_limit: 128 << 20,
            timeout: Duration::from_secs(30),
            allow: Arc::new(AllowList::default()),
            outbound_h2c: Arc::new(AllowList::default()),
            env: Vec::new(),
            cache_dir: default_cache_dir(),
            observer: ObserverSlot::default(),
            instance_reuse: None,
            instance_concurrency: DEFAULT_INSTANCE_CONCURRENCY,
            instance_idle_timeout: Duration::from_secs(1),
            keyvalue: Arc::default(),
            config_vars: ConfigVars::default(),
            engine_share: None,
        }
    }
}

/// How many requests a WASI 0.3 instance serves in all, and at once, unless
/// told otherwise: `wasmtime serve`'s defaults.
pub(crate) const DEFAULT_INSTANCE_REUSE: usize = 128;
const DEFAULT_INSTANCE_CONCURRENCY: usize = 16;

/// `$XDG_CACHE_HOME/spindle`, else `$HOME/.cache/spindle`; a variable
/// that is empty or not an absolute path is ignored (as the XDG base
/// directory rules say), and with neither there is no cache.
fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|h| h.join(".cache")))?;
    Some(base.join("spindle"))
}

impl HostConfig {
    /// Reports every request to `observer` ([`Observer`](crate::Observer)).
    pub fn observer(mut self, observer: Arc<dyn crate::Observer>) -> Self {
        self.observer = ObserverSlot(Some(observer));
        self
    }

    /// At most `n` guest requests run at once; the pooling allocator is
    /// sized for exactly that many instances.
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n.max(1);
        self
    }

    /// The cap set by [`max_concurrent`](Self::max_concurrent).
    pub fn max_concurrent_requests(&self) -> usize {
        self.max_concurrent
    }

    /// Past the cap, up to `n` requests wait at most `wait` for a slot,
    /// then get 503; beyond `n`, 503 at once.
    pub fn queue(mut self, n: usize, wait: Duration) -> Self {
        self.max_queued = n;
        self.queue_timeout = wait;
        self
    }

    /// Past the cap, up to `n` requests wait for a slot (0: none wait, 503
    /// at once); the wait is bounded by [`queue`](Self::queue)'s `wait`.
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default().max_queued(2);
    /// # drop(config);
    /// ```
    pub fn max_queued(mut self, n: usize) -> Self {
        self.max_queued = n;
        self
    }

    /// How long a queued request waits for a slot before its 503.
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default()
    ///     .queue_timeout(std::time::Duration::from_millis(500));
    /// # drop(config);
    /// ```
    pub fn queue_timeout(mut self, wait: Duration) -> Self {
        self.queue_timeout = wait;
        self
    }

    /// The guest yields its worker every `units` of fuel.
    pub fn fuel_yield_interval(mut self, units: u64) -> Self {
        self.fuel_yield_interval = units.max(1);
        self
    }

    /// The fuel one request may burn before it is stopped with a 500.
    pub fn fuel_limit(mut self, units: u64) -> Self {
        self.fuel_limit = units;
        self
    }

    /// The most linear memory one instance may grow to.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes.max(64 << 10);
        self
    }

    /// The wall-clock deadline of one request, guest and response body.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Lets guests reach `host[:port]` (`*` for any host; a host alone
    /// means any port). Several may be given, comma-separated.
    pub fn allow_outbound(mut self, spec: &str) -> Result<Self, String> {
        Arc::make_mut(&mut self.allow).add(spec)?;
        Ok(self)
    }

    /// Speaks HTTP/2 at once (h2c with prior knowledge) to these plain
    /// `http://` origins, `host[:port]` comma-separated as for
    /// [`allow_outbound`](Self::allow_outbound): for gRPC services and
    /// other upstreams known to speak it. (Over TLS, ALPN chooses HTTP/2
    /// with no setting.) Reaching them must still be allowed.
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default()
    ///     .allow_outbound("127.0.0.1:50051").unwrap()
    ///     .outbound_h2c("127.0.0.1:50051").unwrap();
    /// # drop(config);
    /// ```
    pub fn outbound_h2c(mut self, spec: &str) -> Result<Self, String> {
        Arc::make_mut(&mut self.outbound_h2c).add(spec)?;
        Ok(self)
    }

    /// An environment variable every guest sees.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Where compiled code is cached (`None`: compile every time). A
    /// directory that cannot be created (an unwritable home, a read-only
    /// root filesystem) is warned about when a host is built, which then
    /// compiles without a cache.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// One instance serves at most `n` requests in all, then is dropped
    /// once they are done (1: a fresh instance per request). For a WASI 0.3
    /// component the default is 128; a WASI 0.2 component runs one request
    /// at a time, so more than 1 reuses its instance *sequentially* (its
    /// default is 1: globals never carry from one request to the next).
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default().instance_reuse(1);
    /// assert_eq!(config.instance_reuse_limit(), Some(1));
    /// ```
    pub fn instance_reuse(mut self, n: usize) -> Self {
        self.instance_reuse = Some(n.max(1));
        self
    }

    /// The limit set by [`instance_reuse`](Self::instance_reuse), if one
    /// was set (`None`: the world's default).
    pub fn instance_reuse_limit(&self) -> Option<usize> {
        self.instance_reuse
    }

    /// A WASI 0.3 instance serves at most `n` requests at once (1: one at
    /// a time, for guests that break when interleaved). It takes on
    /// another only while its current ones wait, never while one computes.
    pub fn instance_concurrency(mut self, n: usize) -> Self {
        self.instance_concurrency = n.max(1);
        self
    }

    /// An instance with no request for `t` is dropped.
    pub fn instance_idle_timeout(mut self, t: Duration) -> Self {
        self.instance_idle_timeout = t;
        self
    }

    /// Grants guests the key-value store `store` under `name`: a guest
    /// opens it through `wasi:keyvalue/store.open(name)`, and the store
    /// named `default` also with the empty name. A name not granted is
    /// `error::access-denied`. Granting a name again replaces the store.
    ///
    /// ```
    /// let sessions = spindle_wasm::KeyValue::open("memory:").unwrap();
    /// let config = spindle_wasm::HostConfig::default().keyvalue("sessions", sessions);
    /// assert_eq!(config.keyvalue_names().collect::<Vec<_>>(), ["sessions"]);
    /// ```
    pub fn keyvalue(mut self, name: &str, store: crate::KeyValue) -> Self {
        Arc::make_mut(&mut self.keyvalue).insert(name.to_string(), store);
        self
    }

    /// The names of the key-value stores granted.
    pub fn keyvalue_names(&self) -> impl Iterator<Item = &str> {
        self.keyvalue.keys().map(String::as_str)
    }

    /// A `wasi:config` variable guests read with `store.get(key)` (given
    /// again, the last value wins).
    ///
    /// ```
    /// let config = spindle_wasm::HostConfig::default().config_var("greeting", "hello");
    /// # drop(config);
    /// ```
    pub fn config_var(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let vars = &mut self.config_vars;
        vars.pairs.insert(key.into(), value.into());
        vars.shared = Arc::new(
            vars.pairs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
        );
        self
    }

    /// Runs this host's guests on the engines of `share`, with the other
    /// hosts given it (see [`EngineShare`](crate::EngineShare)).
    pub fn engine_share(mut self, share: crate::share::EngineShare) -> Self {
        self.engine_share = Some(share);
        self
    }
}
