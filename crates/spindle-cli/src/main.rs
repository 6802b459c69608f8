//! `spindle`: serve `wasi:http/proxy` components and run `wasi:cli/run`
//! commands on Spindle fibers. `spindle --help` explains every flag.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use spindle_wasm::{Host, HostConfig};

const HELP: &str = "\
spindle — colourless concurrency for WebAssembly guests

USAGE:
    spindle serve [APP.wasm] [OPTIONS]
    spindle run [OPTIONS] APP.wasm [ARGS...]

serve: answers HTTP with a wasi:http/proxy component, one fiber per
request. Without APP it serves the built-in hello component. It prints the
address it listens on; Ctrl-C (or SIGTERM) drains: no new connections,
requests in flight get 10 s to finish.

run: runs a wasi:cli/run command component with the same host (stdio,
environment, outgoing HTTP through the allow-list) and exits with its
status. Options come before APP; everything after APP goes to the guest.

OPTIONS (serve):
    --listen ADDR          address to listen on [default: 127.0.0.1:8080]
    --workers N            worker threads [default: number of CPUs]
    --max-concurrent N     guest requests running at once; past it requests
                           queue (up to N more, 5 s) and then get 503
                           [default: 1000]
    --fuel-yield N         the guest yields its worker every N fuel units
                           [default: 1000000]
    --fuel-limit N         fuel budget of one request; past it, 500
                           [default: 1000000000]
    --memory-limit BYTES   linear memory per instance (suffix K, M or G:
                           KiB, MiB, GiB); growing past it is a 500
                           [default: 128M]
    --timeout SECS         wall-clock deadline of one request; past it, 500
                           [default: 30]

OPTIONS (serve and run):
    --allow-outbound LIST  hosts guests may reach over wasi:http,
                           comma-separated host[:port]; '*' allows any host.
                           May repeat. [default: none]
    --env K=V              environment variable for the guest. May repeat.
    -h, --help             this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("run") => run(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            print!("{HELP}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => Err(format!("unknown command {other:?} (try --help)")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("spindle: {e}");
            ExitCode::from(2)
        }
    }
}

/// Flags shared by both commands, and the ones only `serve` takes.
struct Options {
    config: HostConfig,
    listen: String,
    workers: Option<usize>,
}

/// Parses one flag at `args[*i]` into `opts`; `Ok(false)` if it is not a
/// flag.
fn flag(args: &[String], i: &mut usize, opts: &mut Options, serve: bool) -> Result<bool, String> {
    let name = args[*i].as_str();
    if !name.starts_with('-') {
        return Ok(false);
    }
    if name == "-h" || name == "--help" {
        print!("{HELP}");
        std::process::exit(0);
    }
    let (name, inline) = match name.split_once('=') {
        Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
        _ => (name, None),
    };
    let value = match inline {
        Some(v) => v,
        None => {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))?
        }
    };
    let number = |v: &str| -> Result<u64, String> {
        v.replace('_', "")
            .parse()
            .map_err(|_| format!("{name}: {v:?} is not a number"))
    };
    let c = std::mem::take(&mut opts.config);
    opts.config = match name {
        "--allow-outbound" => c.allow_outbound(&value)?,
        "--env" => {
            let (k, v) = value
                .split_once('=')
                .ok_or_else(|| format!("--env wants K=V, got {value:?}"))?;
            c.env(k, v)
        }
        "--listen" if serve => {
            opts.listen = value;
            c
        }
        "--workers" if serve => {
            opts.workers = Some(number(&value)?.max(1) as usize);
            c
        }
        "--max-concurrent" if serve => c.max_concurrent(number(&value)? as usize),
        "--fuel-yield" if serve => c.fuel_yield_interval(number(&value)?),
        "--fuel-limit" if serve => c.fuel_limit(number(&value)?),
        "--memory-limit" if serve => c.memory_limit(bytes(&value)?),
        "--timeout" if serve => {
            let secs: f64 = value
                .parse()
                .map_err(|_| format!("--timeout: {value:?} is not a number of seconds"))?;
            c.timeout(Duration::from_secs_f64(secs.max(0.001)))
        }
        _ => return Err(format!("unknown option {name} (try --help)")),
    };
    Ok(true)
}

/// `64M`, `1G`, `65536` → bytes.
fn bytes(v: &str) -> Result<usize, String> {
    let (digits, shift) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 10),
        Some('m' | 'M') => (&v[..v.len() - 1], 20),
        Some('g' | 'G') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("--memory-limit: {v:?} is not a size"))?;
    n.checked_shl(shift)
        .ok_or_else(|| format!("--memory-limit: {v:?} is too large"))
}

fn defaults() -> Options {
    Options {
        config: HostConfig::default(),
        listen: "127.0.0.1:8080".into(),
        workers: None,
    }
}

fn serve(args: &[String]) -> Result<ExitCode, String> {
    let mut opts = defaults();
    let mut app = None;
    let mut i = 0;
    while i < args.len() {
        if !flag(args, &mut i, &mut opts, true)? {
            if app.is_some() {
                return Err(format!("unexpected argument {:?}", args[i]));
            }
            app = Some(args[i].clone());
        }
        i += 1;
    }
    let (name, wasm) = match &app {
        Some(path) => (
            path.clone(),
            std::fs::read(path).map_err(|e| format!("{path}: {e}"))?,
        ),
        None => (
            "built-in hello".to_string(),
            spindle_wasm::HELLO_WASM.to_vec(),
        ),
    };
    let host = Host::new(&wasm, opts.config).map_err(|e| format!("{name}: {e:#}"))?;
    let mut builder = spindle::Runtime::builder();
    if let Some(n) = opts.workers {
        builder = builder.workers(n);
    }
    let rt = builder.build().map_err(|e| format!("runtime: {e}"))?;
    let listen = opts.listen.clone();
    let server = rt
        .run(move || spindle_http::Server::bind(listen.as_str()))
        .map_err(|e| format!("--listen {}: {e}", opts.listen))?;
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    let handle = server.handle();
    let serving = rt.spawn(move || server.serve(move |req| host.handle(req)));
    println!("spindle: serving {name} on http://{addr}/");
    let _ = std::io::stdout().flush();

    // Ctrl-C / SIGTERM: drain, then leave.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("signals: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("spindle: draining (10 s for requests in flight)");
            let cancelled = handle.drain(Instant::now() + Duration::from_secs(10));
            if cancelled > 0 {
                eprintln!("spindle: cancelled {cancelled} connections at the deadline");
            }
        }
    });
    match serving.join() {
        Ok(Ok(())) => Ok(ExitCode::SUCCESS),
        Ok(Err(e)) => Err(format!("serving: {e}")),
        Err(e) => Err(format!("serving: {e}")),
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut opts = defaults();
    let mut i = 0;
    while i < args.len() && flag(args, &mut i, &mut opts, false)? {
        i += 1;
    }
    let Some(app) = args.get(i) else {
        return Err("run: APP.wasm missing (try --help)".into());
    };
    let wasm = std::fs::read(app).map_err(|e| format!("{app}: {e}"))?;
    let guest_args: Vec<String> = args[i..].to_vec();
    let config = opts.config;
    let status = spindle::run(move || spindle_wasm::run_command(&wasm, &guest_args, config))
        .map_err(|e| format!("{app}: {e:#}"))?;
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}
