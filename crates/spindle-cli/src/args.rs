//! The command line's arguments for `spindle serve` and `spindle run`:
//! their flags, environment variables and defaults (clap derives the
//! parsing and `--help` from the doc comments), the value parsers, and
//! how guest limits and grants turn into a [`HostConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use spindle_wasm::HostConfig;

/// Limits of one guest request (defaults for every component of a
/// manifest, which may override them).
#[derive(Args, Clone)]
pub(crate) struct LimitArgs {
    /// Guest requests running at once; past it requests wait in the queue
    /// (--max-queue, --queue-timeout), and past that get 503
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        env = "SPINDLE_MAX_CONCURRENT"
    )]
    pub(crate) max_concurrent: usize,
    /// Requests that wait for a guest slot when all are busy; more get 503
    /// at once (0: no queue)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        env = "SPINDLE_MAX_QUEUE"
    )]
    pub(crate) max_queue: usize,
    /// Seconds a queued request waits for a slot before its 503
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = seconds_or_zero, env = "SPINDLE_QUEUE_TIMEOUT")]
    pub(crate) queue_timeout: Duration,
    /// The guest yields its worker every N fuel units
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = number, env = "SPINDLE_FUEL_YIELD")]
    pub(crate) fuel_yield: u64,
    /// Fuel budget of one request; past it, 500
    #[arg(long, value_name = "N", default_value = "1000000000", value_parser = number, env = "SPINDLE_FUEL_LIMIT")]
    pub(crate) fuel_limit: u64,
    /// Linear memory per instance, 64K to 4G (suffix K, M or G: KiB, MiB,
    /// GiB); growing past it is a 500
    #[arg(long, value_name = "BYTES", default_value = "128M", value_parser = memory_bytes, env = "SPINDLE_MEMORY_LIMIT")]
    pub(crate) memory_limit: usize,
    /// Wall-clock deadline of one request in seconds; past it, 500
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds, env = "SPINDLE_TIMEOUT")]
    pub(crate) timeout: Duration,
    /// Requests one instance serves in all before it is dropped (1: a
    /// fresh instance per request). A WASI 0.2 component reuses its
    /// instance one request after another [default: 128 for WASI 0.3,
    /// 1 for WASI 0.2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), env = "SPINDLE_MAX_INSTANCE_REUSE")]
    pub(crate) max_instance_reuse: Option<u64>,
    /// Requests one WASI 0.3 instance serves at once (1: never
    /// interleaved, for guests that break when they are)
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..), env = "SPINDLE_MAX_INSTANCE_CONCURRENCY")]
    pub(crate) max_instance_concurrency: u64,
    /// Seconds an instance with nothing to do is kept for reuse
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = seconds_or_zero, env = "SPINDLE_IDLE_INSTANCE_TIMEOUT")]
    pub(crate) idle_instance_timeout: Duration,
}

/// What guests may reach and see, and where their compiled code is kept.
#[derive(Args, Clone)]
pub(crate) struct GuestArgs {
    /// Where compiled components are cached, or `off` to compile at every
    /// start. A directory that cannot be created is warned about and the
    /// cache left off [default: $XDG_CACHE_HOME/spindle, else
    /// $HOME/.cache/spindle]
    #[arg(long, value_name = "DIR|off", value_parser = cache_dir, env = "SPINDLE_CACHE_DIR")]
    pub(crate) cache_dir: Option<CacheDir>,
    /// Hosts guests may reach over wasi:http, comma-separated host[:port];
    /// '*' allows any host. May repeat. [default: none]
    #[arg(long, value_name = "LIST", env = "SPINDLE_ALLOW_OUTBOUND")]
    pub(crate) allow_outbound: Vec<String>,
    /// Plain http:// upstreams known to speak HTTP/2, spoken to in it at
    /// once (h2c with prior knowledge: gRPC services), comma-separated
    /// host[:port]. May repeat. (Over TLS, ALPN chooses HTTP/2 by itself.)
    #[arg(long, value_name = "LIST", env = "SPINDLE_OUTBOUND_H2C")]
    pub(crate) outbound_h2c: Vec<String>,
    /// Environment variable for the guest (K=V). May repeat.
    #[arg(long, value_name = "K=V", value_parser = key_value)]
    pub(crate) env: Vec<(String, String)>,
    /// A wasi:keyvalue store: NAME=URL, URL being file:PATH (embedded,
    /// durable), redis://HOST:PORT/DB (shared by replicas) or memory:.
    /// A guest opens `default` with the empty name. With one component
    /// every store given is granted to it; a manifest grants per
    /// component, and a store given here replaces the manifest's of that
    /// name. May repeat; comma-separated in the variable [default:
    /// default=file:DATA_DIR/default.redb, for a component that imports
    /// wasi:keyvalue]
    #[arg(long, value_name = "NAME=URL", value_parser = key_value, value_delimiter = ',', env = "SPINDLE_KEYVALUE")]
    pub(crate) keyvalue: Vec<(String, String)>,
    /// Where the embedded default store is kept [default:
    /// $XDG_DATA_HOME/spindle, else $HOME/.local/share/spindle]
    #[arg(long, value_name = "DIR", env = "SPINDLE_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// A wasi:config variable for the guest (K=V); a manifest component's
    /// own `config` table wins over it. May repeat.
    #[arg(long = "config", value_name = "K=V", value_parser = key_value)]
    pub(crate) config_vars: Vec<(String, String)>,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The component to serve [default: the built-in hello]. Given with
    /// --app on the command line it is an error; over SPINDLE_APP from the
    /// environment it wins
    #[arg(value_name = "APP.wasm")]
    pub(crate) wasm: Option<PathBuf>,
    /// An app manifest (TOML): several components, each on its routes
    /// with its own limits (see the README)
    #[arg(long, value_name = "FILE", env = "SPINDLE_APP")]
    pub(crate) app: Option<PathBuf>,
    /// Address to listen on
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        env = "SPINDLE_LISTEN"
    )]
    pub(crate) listen: String,
    /// Worker threads, at most 4 per CPU [default: number of CPUs]
    #[arg(long, value_name = "N", env = "SPINDLE_WORKERS")]
    pub(crate) workers: Option<usize>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "SPINDLE_TLS_CERT"
    )]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "SPINDLE_TLS_KEY"
    )]
    pub(crate) tls_key: Option<PathBuf>,
    /// Admin listener (never routed to a guest): /healthz, /readyz and
    /// /metrics (Prometheus) [default: off]
    #[arg(long, value_name = "ADDR", env = "SPINDLE_ADMIN")]
    pub(crate) admin: Option<String>,
    /// Bind with SO_REUSEPORT, so several spindle processes share the port
    #[arg(long, env = "SPINDLE_REUSE_PORT")]
    pub(crate) reuse_port: bool,
    /// HTTP/2 over TLS, chosen by ALPN: on or off
    #[arg(long, value_name = "ON|OFF", default_value = "on", action = clap::ArgAction::Set, hide_possible_values = true, value_parser = clap::builder::BoolishValueParser::new(), env = "SPINDLE_HTTP2")]
    pub(crate) http2: bool,
    /// HTTP/2 on plain connections that open with its preface (h2c with
    /// prior knowledge, beside HTTP/1.1 on the same port): on or off
    #[arg(long, value_name = "ON|OFF", default_value = "on", action = clap::ArgAction::Set, hide_possible_values = true, value_parser = clap::builder::BoolishValueParser::new(), env = "SPINDLE_H2C")]
    pub(crate) h2c: bool,
    /// On SIGTERM, keep serving this long with /readyz failing before the
    /// drain starts (time for a load balancer to stop sending)
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = seconds_or_zero, env = "SPINDLE_SHUTDOWN_DELAY")]
    pub(crate) shutdown_delay: Duration,
    /// How long requests in flight may run once the drain starts
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds_or_zero, env = "SPINDLE_DRAIN_TIMEOUT")]
    pub(crate) drain_timeout: Duration,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) guest: GuestArgs,
}

#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) guest: GuestArgs,
    /// The command component, then the guest's arguments: everything
    /// after APP.wasm goes to the guest, flags included
    #[arg(
        value_name = "APP.wasm [ARGS]",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) command: Vec<String>,
}

impl LimitArgs {
    /// These limits on top of `config`.
    pub(crate) fn apply(&self, config: HostConfig) -> HostConfig {
        let config = config
            .max_concurrent(self.max_concurrent)
            .queue(self.max_queue, self.queue_timeout)
            .fuel_yield_interval(self.fuel_yield)
            .fuel_limit(self.fuel_limit)
            .memory_limit(self.memory_limit)
            .timeout(self.timeout)
            .instance_concurrency(self.max_instance_concurrency as usize)
            .instance_idle_timeout(self.idle_instance_timeout);
        match self.max_instance_reuse {
            Some(n) => config.instance_reuse(n as usize),
            None => config,
        }
    }
}

impl GuestArgs {
    /// These grants on top of `config`.
    pub(crate) fn apply(&self, mut config: HostConfig) -> Result<HostConfig, String> {
        match &self.cache_dir {
            None => {}
            Some(CacheDir::Off) => config = config.cache_dir(None),
            Some(CacheDir::At(dir)) => config = config.cache_dir(Some(dir.clone())),
        }
        for list in &self.allow_outbound {
            config = config.allow_outbound(list)?;
        }
        for list in &self.outbound_h2c {
            config = config.outbound_h2c(list)?;
        }
        for (k, v) in &self.env {
            config = config.env(k, v);
        }
        for (k, v) in &self.config_vars {
            config = config.config_var(k, v);
        }
        Ok(config)
    }
}

pub(crate) fn number(v: &str) -> Result<u64, String> {
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{v:?} is not a number"))
}

/// `64M`, `1G`, `65536` → bytes.
pub(crate) fn bytes(v: &str) -> Result<usize, String> {
    let (digits, shift) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 10),
        Some('m' | 'M') => (&v[..v.len() - 1], 20),
        Some('g' | 'G') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n: usize = digits.parse().map_err(|_| format!("{v:?} is not a size"))?;
    n.checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| format!("{v:?} is too large"))
}

/// The most linear memory a guest may be given: what a 32-bit WebAssembly
/// memory addresses (and what the engine reserves per memory).
pub(crate) const MAX_MEMORY: usize = 4 << 30;

/// A memory limit: a size from one WebAssembly page (64 KiB) to
/// [`MAX_MEMORY`].
pub(crate) fn memory_bytes(v: &str) -> Result<usize, String> {
    let n = bytes(v)?;
    if !(64 << 10..=MAX_MEMORY).contains(&n) {
        return Err(format!(
            "{v:?} is outside the memory a guest may have: 64K to 4G"
        ));
    }
    Ok(n)
}

/// Where compiled code is cached: a directory, or `off`.
pub(crate) fn cache_dir(v: &str) -> Result<CacheDir, String> {
    match v {
        "" => Err("an empty cache directory: give a path, or `off`".to_string()),
        "off" | "none" => Ok(CacheDir::Off),
        path => Ok(CacheDir::At(PathBuf::from(path))),
    }
}

/// The `--cache-dir` setting.
#[derive(Clone, Debug)]
pub(crate) enum CacheDir {
    Off,
    At(PathBuf),
}

/// Seconds, at least 1 ms.
pub(crate) fn seconds(v: &str) -> Result<Duration, String> {
    seconds_or_zero(v).map(|d| d.max(Duration::from_millis(1)))
}

pub(crate) fn seconds_or_zero(v: &str) -> Result<Duration, String> {
    let secs: f64 = v
        .parse()
        .map_err(|_| format!("{v:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{v:?} is not a number of seconds"))
}

pub(crate) fn key_value(v: &str) -> Result<(String, String), String> {
    let (k, val) = v
        .split_once('=')
        .ok_or_else(|| format!("wants K=V, got {v:?}"))?;
    Ok((k.to_string(), val.to_string()))
}
