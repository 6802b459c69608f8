//! `spindle`: serve `wasi:http` components (WASI 0.2 `wasi:http/proxy` and
//! WASI 0.3 `wasi:http/service`) and run `wasi:cli/run`
//! commands on Spindle fibers. `spindle serve --help` and
//! `spindle run --help` explain every flag; each flag can also come from
//! the environment variable named in its help (a flag on the command line
//! wins).

#![forbid(unsafe_code)]

mod access_log;
mod args;
mod log_writer;
mod manifest;
mod metrics;
mod serve;
mod stores;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use spindle_wasm::HostConfig;

use crate::args::{RunArgs, ServeArgs};

/// The allocator of the whole process: jemalloc. A WASI 0.3 request makes
/// hundreds of small allocations in wasmtime's concurrent machinery, and
/// one of them (a body channel's block) is large enough to send glibc's
/// `malloc` through a consolidation of its fast bins each time; with
/// jemalloc the same request costs ~9 % less CPU (`docs/DESIGN.md`,
/// "The allocator"), for ~3 MiB more at rest.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
        the guest, flags included."
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

fn main() -> ExitCode {
    #[cfg(feature = "hook")]
    if let Err(e) = spindle_hook::install() {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "spindle: {e}");
        return ExitCode::from(2);
    }
    // A bad flag: a clear message and status 2.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _log = init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve(mut args) => {
            // APP.wasm on the command line wins over SPINDLE_APP from the
            // environment (the container image sets it); with --app given
            // on the command line too, the two conflict.
            let serve = matches.subcommand_matches("serve");
            let app_from = serve.and_then(|m| m.value_source("app"));
            if args.wasm.is_some() && args.app.is_some() {
                if app_from == Some(ValueSource::EnvVariable) {
                    args.app = None;
                } else {
                    return usage_error("APP.wasm and --app cannot be used together");
                }
            }
            serve::serve(*args)
        }
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

/// A usage error found after parsing, said as clap says its own (status 2).
fn usage_error(msg: &str) -> ExitCode {
    Cli::command()
        .error(clap::error::ErrorKind::ArgumentConflict, msg)
        .exit()
}

fn run(args: RunArgs) -> Result<ExitCode, String> {
    // `command` is APP.wasm and then the guest's own arguments.
    let app = args.command[0].clone();
    let wasm = std::fs::read(&app).map_err(|e| format!("{app}: {e}"))?;
    let guest_args = args.command;
    let mut config = args.guest.apply(HostConfig::default())?;
    if spindle_wasm::imports_keyvalue(&wasm) {
        let g = &args.guest;
        let mut stores = stores::Stores::new(Default::default(), &g.keyvalue, g.data_dir.clone());
        let names = stores.names();
        config = stores.grant(config, &names)?;
    }
    match spindle::run(move || spindle_wasm::run_command(&wasm, &guest_args, config)) {
        Ok(status) => Ok(ExitCode::from(status.clamp(0, 255) as u8)),
        Err(e) if e.downcast_ref::<spindle_wasm::Trap>().is_some() => {
            tracing::error!("{app}: guest trapped: {e:#}");
            Ok(ExitCode::from(EXIT_TRAP))
        }
        Err(e) => Err(format!("{app}: {e:#}")),
    }
}
