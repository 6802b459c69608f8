//! The `spindle` binary end to end: `serve` with the built-in app, Ctrl-C
//! drain, `run` of a command guest making an outgoing request, `--help`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{guest, SPINDLE};

/// A one-worker spindle-http upstream answering `upstream saw PATH`.
fn upstream() -> (spindle::Runtime, std::net::SocketAddr) {
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    let addr = rt.run(|| {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || {
            server.serve(|req| {
                spindle_http::Response::new(spindle_http::Body::from(format!(
                    "upstream saw {}",
                    req.uri().path()
                )))
            })
        });
        addr
    });
    (rt, addr)
}

/// Starts `spindle serve` with `args`; returns the child and its URL.
fn serve(args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(SPINDLE)
        .arg("serve")
        .args(args)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("spindle-cli-test-cache"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, url)
}

/// Everything the child wrote to stderr (read to its end: the child must
/// have exited or been killed).
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// Stops the child in order (SIGINT: it drains and writes its log out)
/// and returns its stderr.
fn stop(child: &mut std::process::Child) -> String {
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
    stderr_of(child)
}

/// `"CODE BODY"` of a GET with curl, bounded by `--max-time 15`.
fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "15", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match stdout.rsplit_once('\n') {
        Some((body, code)) => format!("{code} {body}"),
        None => format!("curl failed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

#[test]
fn serve_without_an_app_answers_hello_and_drains_on_ctrl_c() {
    // "spindle: serving built-in hello on http://127.0.0.1:PORT/"
    let (mut child, url) = serve(&["--listen", "127.0.0.1:0", "--workers", "1"]);
    assert_eq!(curl(&url), "200 Hello, World!");

    // Ctrl-C: drain and exit 0.
    Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    let mut waited = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(waited < 150, "spindle serve did not exit after SIGINT");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    };
    assert!(status.success(), "{status:?}");
    let err = stderr_of(&mut child);
    assert!(err.contains("draining"), "{err}");
}

/// SIGTERM while guests are mid-request (WASI 0.2 and 0.3): the drain
/// stops accepting, but the requests in flight are answered before the
/// process exits — it used to exit as soon as the accept loop ended, and
/// each client got an empty reply.
#[test]
fn sigterm_lets_guest_requests_in_flight_finish_before_exit() {
    for app in ["sleep", "sleep-p3"] {
        let (mut child, url) = serve(&[&guest(app), "--listen", "127.0.0.1:0", "--workers", "1"]);
        let in_flight: Vec<_> = (0..3)
            .map(|_| {
                let url = format!("{url}?ms=1500");
                std::thread::spawn(move || curl(&url))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        let err = stderr_of(&mut child);
        for answer in in_flight {
            assert_eq!(answer.join().unwrap(), "200 slept 1500 ms", "{app}: {err}");
        }
        assert!(status.success(), "{app}: {status:?} {err}");
        assert!(!err.contains("leaked"), "{app}: {err}");
    }
}

#[test]
fn a_guests_sleep_and_the_request_deadline_fire_on_an_idle_worker() {
    // One worker and nothing else happening: only the timers can wake it.
    let (mut child, url) = serve(&[
        &guest("sleep"),
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--timeout",
        "1",
    ]);
    let started = std::time::Instant::now();
    let short = curl(&format!("{url}?ms=200"));
    let short_took = started.elapsed();
    let started = std::time::Instant::now();
    let long = curl(&format!("{url}?ms=5000"));
    let long_took = started.elapsed();
    // An orderly stop, so the log is written out before we read it.
    let err = stop(&mut child);
    assert_eq!(short, "200 slept 200 ms", "{err}");
    // A guest that sleeps past `--timeout` is cut off by the deadline (not
    // answered 200 when something else wakes the worker), and the client
    // hears about it, not its own `--max-time`.
    assert!(long.starts_with("5"), "{long} {err}");
    assert!(err.contains("deadline exceeded"), "{err}");
    // Bounds for hangs, not measurements: the bug they catch took minutes.
    assert!(short_took < Duration::from_secs(10), "{short_took:?}");
    assert!(long_took < Duration::from_secs(10), "{long_took:?}");
}

#[test]
fn run_executes_a_command_guest_with_an_outgoing_request() {
    let (_rt, addr) = upstream();
    // A WASI 0.2 command (`wasi:cli/run@0.2`) and a WASI 0.3 one.
    for cmd in ["fetch-cmd", "fetch-cmd-p3"] {
        run_fetch_command(cmd, addr);
    }
}

fn run_fetch_command(cmd: &str, addr: std::net::SocketAddr) {
    let out = Command::new(SPINDLE)
        .args([
            "run",
            "--env",
            "GREETING=hi there",
            "--allow-outbound",
            &format!("127.0.0.1:{}", addr.port()),
            &guest(cmd),
            &format!("http://127.0.0.1:{}/from-cmd", addr.port()),
        ])
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("spindle-cli-test-cache"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cmd}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("greeting: hi there"), "{stdout}");
    assert!(stdout.contains("status: 200"), "{stdout}");
    assert!(stdout.contains("body: upstream saw /from-cmd"), "{stdout}");

    // Without the grant the request is denied and the guest exits 1.
    let out = Command::new(SPINDLE)
        .args([
            "run",
            &guest(cmd),
            &format!("http://127.0.0.1:{}/", addr.port()),
        ])
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("spindle-cli-test-cache"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{cmd}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HttpRequestDenied"), "{stderr}");
}

#[test]
fn help_names_every_flag_and_bad_flags_are_clear_errors() {
    let out = Command::new(SPINDLE)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--workers",
        "--max-concurrent",
        "--fuel-yield",
        "--fuel-limit",
        "--memory-limit",
        "--timeout",
        "--allow-outbound",
        "--outbound-h2c",
        "--http2",
        "--h2c",
        "--env",
    ] {
        assert!(help.contains(flag), "--help does not explain {flag}");
    }
    let out = Command::new(SPINDLE)
        .args(["serve", "--memory-limit", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--memory-limit"));
    let out = Command::new(SPINDLE)
        .args(["serve", "/nonexistent/app.wasm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/app.wasm"));
}

#[test]
fn a_command_that_traps_exits_134_not_the_usage_status() {
    let out = Command::new(SPINDLE)
        .args(["run", &guest("trap-cmd")])
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("spindle-cli-test-cache"),
        )
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(134), "{stdout}{stderr}");
    assert!(stdout.contains("about to trap"), "{stdout}");
    assert!(stderr.contains("trapped"), "{stderr}");
    // --help says so.
    let help = Command::new(SPINDLE).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("134"));
}

#[test]
fn serve_runs_a_wasi_0_3_component_with_its_instance_flags() {
    // Concurrency 1: the three waiting requests cannot share an instance,
    // so the gate guest (which reports the most requests it had in flight
    // at once) answers "most 1" to each.
    let (mut child, url) = serve(&[
        &guest("gate-p3"),
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--max-instance-concurrency",
        "1",
        "--timeout",
        "1",
    ]);
    let slow = format!("{url}slow?ms=300");
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let slow = slow.clone();
            std::thread::spawn(move || curl(&slow))
        })
        .collect();
    let answers: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // A sleep past --timeout is cut off at the deadline on the idle worker.
    let started = std::time::Instant::now();
    let late = curl(&format!("{url}slow?ms=5000"));
    let late_took = started.elapsed();
    // And a trap is a 500 for that request alone.
    let trapped = curl(&format!("{url}trap"));
    let after = curl(&format!("{url}slow?ms=1"));
    let err = stop(&mut child);
    for a in &answers {
        assert!(a.starts_with("200 most 1 instance"), "{a} {err}");
    }
    assert!(late.starts_with("504"), "{late} {err}");
    assert!(late_took < Duration::from_secs(10), "{late_took:?}");
    assert!(trapped.starts_with("500"), "{trapped} {err}");
    assert!(after.starts_with("200 most 1"), "{after} {err}");
    assert!(err.contains("deadline exceeded"), "{err}");
    assert!(err.contains("trap"), "{err}");
}
