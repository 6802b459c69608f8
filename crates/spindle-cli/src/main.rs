//! `spindle`: serve `wasi:http` components (WASI 0.2 `wasi:http/proxy` and
//! WASI 0.3 `wasi:http/service`) and run `wasi:cli/run`
//! commands on Spindle fibers. `spindle serve --help` and
//! `spindle run --help` explain every flag; each flag can also come from
//! the environment variable named in its help (a flag on the command line
//! wins).

#![forbid(unsafe_code)]

mod access_log;
mod log_writer;
mod manifest;
mod metrics;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use spindle_wasm::HostConfig;

/// Exit status of `spindle run` when the guest traps (as a process killed
/// by `SIGABRT`); 2 is a usage or startup error; anything else is the
/// guest's own exit status.
const EXIT_TRAP: u8 = 134;

#[derive(Parser)]
#[command(
    name = "spindle",
    version,
    about = "spindle — colourless concurrency for WebAssembly guests",
    long_about = "spindle — colourless concurrency for WebAssembly guests.\n\n\
        serve: answers HTTP with wasi:http components: WASI 0.2 (wasi:http/proxy, an instance \
        per request) or WASI 0.3 (wasi:http/service, one instance serving up to \
        --max-instance-concurrency requests at once), one fiber per request. \
        Without APP or --app it serves the built-in hello component. It prints the address \
        it listens on; Ctrl-C (or SIGTERM) drains: readiness fails, no new connections, \
        requests in flight get --drain-timeout to finish.\n\n\
        run: runs a wasi:cli/run command component with the same host (stdio, environment, \
        outgoing HTTP through the allow-list) and exits with its status (134 if it traps, 2 \
        for a usage or startup error). Options come before APP; everything after APP goes to \
        the guest."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text for people or as JSON objects for machines. The
    /// filter comes from SPINDLE_LOG (or RUST_LOG) [default: info,access=off];
    /// `SPINDLE_LOG=info` adds an access line per request, `guest=warn`
    /// quiets guests' output
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "human",
        env = "SPINDLE_LOG_FORMAT"
    )]
    log_format: LogFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

/// The log: `tracing` events to stderr, filtered by `SPINDLE_LOG` or
/// `RUST_LOG` (default `info,access=off`: no access lines unless asked
/// for); colours only on a terminal. Access lines have a layer of their
/// own (`access_log`); every line is written in batches (`log_writer`);
/// the guard writes what is left when `main` returns.
fn init_logging(format: LogFormat) -> log_writer::FlushGuard {
    use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    const DEFAULT: &str = "info,access=off";
    let directives = std::env::var("SPINDLE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| DEFAULT.to_string());
    let filter = || EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new(DEFAULT));
    let (writer, guard) = log_writer::batched_stderr();
    let json = matches!(format, LogFormat::Json);
    let general = tracing_subscriber::fmt::layer().with_writer(writer.clone());
    let general = if json {
        general.json().flatten_event(true).boxed()
    } else {
        use std::io::IsTerminal as _;
        general.with_ansi(std::io::stderr().is_terminal()).boxed()
    };
    let not_access = filter_fn(|m| m.target() != "access");
    tracing_subscriber::registry()
        .with(general.with_filter(filter().and(not_access)))
        .with(access_log::AccessLog::new(json, writer).with_filter(filter()))
        .init();
    // `init` forwards the `log` crate's records (wasmtime's) with every
    // level let through; a filtered-out `log::trace!` should cost one
    // comparison, not a trip through the subscriber.
    log::set_max_level(match filter().max_level_hint() {
        Some(tracing::level_filters::LevelFilter::OFF) => log::LevelFilter::Off,
        Some(tracing::level_filters::LevelFilter::ERROR) => log::LevelFilter::Error,
        Some(tracing::level_filters::LevelFilter::WARN) => log::LevelFilter::Warn,
        Some(tracing::level_filters::LevelFilter::INFO) => log::LevelFilter::Info,
        Some(tracing::level_filters::LevelFilter::DEBUG) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    guard
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP with a component (or the components of an app manifest).
    Serve(Box<ServeArgs>),
    /// Run a wasi:cli/run command component.
    Run(RunArgs),
}

/// Limits of one guest request (defaults for every component of a
/// manifest, which may override them).
#[derive(Args, Clone)]
struct LimitArgs {
    /// Guest requests running at once; past it requests queue (up to N
    /// more, 5 s) and then get 503
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        env = "SPINDLE_MAX_CONCURRENT"
    )]
    max_concurrent: usize,
    /// The guest yields its worker every N fuel units
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = number, env = "SPINDLE_FUEL_YIELD")]
    fuel_yield: u64,
    /// Fuel budget of one request; past it, 500
    #[arg(long, value_name = "N", default_value = "1000000000", value_parser = number, env = "SPINDLE_FUEL_LIMIT")]
    fuel_limit: u64,
    /// Linear memory per instance (suffix K, M or G: KiB, MiB, GiB);
    /// growing past it is a 500
    #[arg(long, value_name = "BYTES", default_value = "128M", value_parser = bytes, env = "SPINDLE_MEMORY_LIMIT")]
    memory_limit: usize,
    /// Wall-clock deadline of one request in seconds; past it, 500
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds, env = "SPINDLE_TIMEOUT")]
    timeout: Duration,
    /// Requests one instance serves in all before it is dropped (1: a
    /// fresh instance per request). A WASI 0.2 component reuses its
    /// instance one request after another [default: 128 for WASI 0.3,
    /// 1 for WASI 0.2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), env = "SPINDLE_MAX_INSTANCE_REUSE")]
    max_instance_reuse: Option<u64>,
    /// Requests one WASI 0.3 instance serves at once (1: never
    /// interleaved, for guests that break when they are)
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..), env = "SPINDLE_MAX_INSTANCE_CONCURRENCY")]
    max_instance_concurrency: u64,
    /// Seconds an instance with nothing to do is kept for reuse
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = seconds_or_zero, env = "SPINDLE_IDLE_INSTANCE_TIMEOUT")]
    idle_instance_timeout: Duration,
}

/// What guests may reach and see.
#[derive(Args, Clone)]
struct GuestArgs {
    /// Hosts guests may reach over wasi:http, comma-separated host[:port];
    /// '*' allows any host. May repeat. [default: none]
    #[arg(long, value_name = "LIST", env = "SPINDLE_ALLOW_OUTBOUND")]
    allow_outbound: Vec<String>,
    /// Environment variable for the guest (K=V). May repeat.
    #[arg(long, value_name = "K=V", value_parser = key_value)]
    env: Vec<(String, String)>,
}

#[derive(Args)]
struct ServeArgs {
    /// The component to serve [default: the built-in hello]
    #[arg(value_name = "APP.wasm", conflicts_with = "app")]
    wasm: Option<PathBuf>,
    /// An app manifest (TOML): several components, each on its routes
    /// with its own limits (see the README)
    #[arg(long, value_name = "FILE", env = "SPINDLE_APP")]
    app: Option<PathBuf>,
    /// Address to listen on
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        env = "SPINDLE_LISTEN"
    )]
    listen: String,
    /// Worker threads [default: number of CPUs]
    #[arg(long, value_name = "N", env = "SPINDLE_WORKERS")]
    workers: Option<usize>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "SPINDLE_TLS_CERT"
    )]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "SPINDLE_TLS_KEY"
    )]
    tls_key: Option<PathBuf>,
    /// Admin listener (never routed to a guest): /healthz, /readyz and
    /// /metrics (Prometheus) [default: off]
    #[arg(long, value_name = "ADDR", env = "SPINDLE_ADMIN")]
    admin: Option<String>,
    /// Bind with SO_REUSEPORT, so several spindle processes share the port
    #[arg(long, env = "SPINDLE_REUSE_PORT")]
    reuse_port: bool,
    /// On SIGTERM, keep serving this long with /readyz failing before the
    /// drain starts (time for a load balancer to stop sending)
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = seconds_or_zero, env = "SPINDLE_SHUTDOWN_DELAY")]
    shutdown_delay: Duration,
    /// How long requests in flight may run once the drain starts
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds_or_zero, env = "SPINDLE_DRAIN_TIMEOUT")]
    drain_timeout: Duration,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    guest: GuestArgs,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    guest: GuestArgs,
    /// The command component
    #[arg(value_name = "APP.wasm")]
    wasm: PathBuf,
    /// Arguments for the guest
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<String>,
}

fn main() -> ExitCode {
    #[cfg(feature = "hook")]
    if let Err(e) = spindle_hook::install() {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "spindle: {e}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse(); // a bad flag: a clear message and status 2
    let _log = init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve::serve(*args),
        Command::Run(args) => run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // The command's own error, not a log line (and never a panic
            // on a closed stderr).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr().lock(), "spindle: {e}");
            ExitCode::from(2)
        }
    }
}

impl LimitArgs {
    /// These limits on top of `config`.
    fn apply(&self, config: HostConfig) -> HostConfig {
        let config = config
            .max_concurrent(self.max_concurrent)
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
    fn apply(&self, mut config: HostConfig) -> Result<HostConfig, String> {
        for list in &self.allow_outbound {
            config = config.allow_outbound(list)?;
        }
        for (k, v) in &self.env {
            config = config.env(k, v);
        }
        Ok(config)
    }
}

fn number(v: &str) -> Result<u64, String> {
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{v:?} is not a number"))
}

/// `64M`, `1G`, `65536` → bytes.
fn bytes(v: &str) -> Result<usize, String> {
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

/// Seconds, at least 1 ms.
fn seconds(v: &str) -> Result<Duration, String> {
    seconds_or_zero(v).map(|d| d.max(Duration::from_millis(1)))
}

fn seconds_or_zero(v: &str) -> Result<Duration, String> {
    let secs: f64 = v
        .parse()
        .map_err(|_| format!("{v:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{v:?} is not a number of seconds"))
}

fn key_value(v: &str) -> Result<(String, String), String> {
    let (k, val) = v
        .split_once('=')
        .ok_or_else(|| format!("wants K=V, got {v:?}"))?;
    Ok((k.to_string(), val.to_string()))
}

fn run(args: RunArgs) -> Result<ExitCode, String> {
    let app = args.wasm.display().to_string();
    let wasm = std::fs::read(&args.wasm).map_err(|e| format!("{app}: {e}"))?;
    let mut guest_args = vec![app.clone()];
    guest_args.extend(args.args);
    let config = args.guest.apply(HostConfig::default())?;
    match spindle::run(move || spindle_wasm::run_command(&wasm, &guest_args, config)) {
        Ok(status) => Ok(ExitCode::from(status.clamp(0, 255) as u8)),
        Err(e) if e.downcast_ref::<spindle_wasm::Trap>().is_some() => {
            tracing::error!("{app}: guest trapped: {e:#}");
            Ok(ExitCode::from(EXIT_TRAP))
        }
        Err(e) => Err(format!("{app}: {e:#}")),
    }
}
