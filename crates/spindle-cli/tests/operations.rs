//! `spindle serve` as a platform team runs it: an app manifest with routes
//! and per-component limits, HTTPS checked by curl and Python's `ssl`
//! against a test CA, the admin listener (health, readiness flipping at
//! drain, metrics parsed by the Prometheus project's Python parser), and
//! configuration from the environment.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;

use common::{curl, guest, metric, python, spindle, temp_dir, test_pki, Served};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_manifest_routes_by_longest_match_with_each_component_s_limits_and_env() {
    let dir = temp_dir("manifest");
    let manifest = write(
        &dir,
        "spindle.toml",
        &format!(
            r#"
[[component]]
name = "hello"
path = "{hello}"
routes = ["/", "/hello"]

[[component]]
name = "env"
path = "{env}"
routes = ["/env/..."]
env = {{ MODE = "production", REGION = "eu" }}

[[component]]
name = "sleepy"
path = "{sleep}"
routes = ["/sleep", "/env/sleep"]
timeout = 0.3
"#,
            hello = guest("hello"),
            env = guest("env"),
            sleep = guest("sleep"),
        ),
    );
    let mut cmd = spindle();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .arg("--app")
        .arg(&manifest)
        .args(["--env", "FROM_FLAG=1"]);
    let s = Served::start(cmd);
    let u = |p: &str| format!("{}{}", s.url.trim_end_matches('/'), p);
    assert_eq!(curl(&u("/"), &[]), (200, "Hello, World!".into()));
    assert_eq!(curl(&u("/hello"), &[]), (200, "Hello, World!".into()));
    let (status, env) = curl(&u("/env/anything"), &[]);
    assert_eq!(status, 200);
    for line in ["MODE=production", "REGION=eu", "FROM_FLAG=1"] {
        assert!(
            env.lines().any(|l| l == line),
            "{line} missing from {env:?}"
        );
    }
    // The longer exact route beats the prefix route it lies under.
    assert_eq!(curl(&u("/env/sleep?ms=1"), &[]), (200, "slept 1 ms".into()));
    // The component's own deadline (0.3 s), not the command line's (30 s).
    let started = Instant::now();
    assert_eq!(curl(&u("/sleep?ms=5000"), &[]).0, 504);
    assert!(started.elapsed() < Duration::from_secs(4));
    // No route: a 404 from the host, and the exact "/hello" is exact.
    assert_eq!(curl(&u("/nope"), &[]).0, 404);
    assert_eq!(curl(&u("/hello/x"), &[]).0, 404);
}

#[test]
fn a_bad_manifest_is_a_clear_startup_error() {
    let dir = temp_dir("bad");
    let run = |manifest: &Path| {
        let out = spindle()
            .args(["serve", "--listen", "127.0.0.1:0", "--app"])
            .arg(manifest)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let conflict = write(
        &dir,
        "conflict.toml",
        &format!(
            "[[component]]\nname = \"a\"\npath = \"{0}\"\nroutes = [\"/x\"]\n\n[[component]]\nname = \"b\"\npath = \"{0}\"\nroutes = [\"/x\"]\n",
            guest("hello")
        ),
    );
    let (code, err) = run(&conflict);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("conflict.toml") && err.contains("line 9") && err.contains("/x"),
        "{err}"
    );
    let typo = write(
        &dir,
        "typo.toml",
        "[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"/\"]\ntimout = 3\n",
    );
    let (code, err) = run(&typo);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 5") && err.contains("timout"), "{err}");
    let missing_wasm = write(
        &dir,
        "missing.toml",
        "[[component]]\nname = \"a\"\npath = \"nowhere.wasm\"\nroutes = [\"/\"]\n",
    );
    let (code, err) = run(&missing_wasm);
    assert_eq!(code, Some(2));
    assert!(err.contains("nowhere.wasm"), "{err}");
    let (code, err) = run(&dir.join("absent.toml"));
    assert_eq!(code, Some(2));
    assert!(err.contains("absent.toml"), "{err}");
    // An APP and a manifest at once is a usage error.
    let out = spindle()
        .args(["serve", &guest("hello"), "--app"])
        .arg(&conflict)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn https_with_curl_and_python_ssl_against_a_test_ca() {
    let dir = temp_dir("tls");
    let (ca, cert, key, other) = test_pki(&dir);
    let mut cmd = spindle();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--tls-cert",
    ])
    .arg(&cert)
    .arg("--tls-key")
    .arg(&key);
    let s = Served::start(cmd);
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let (status, body) = curl(&s.url, &["--cacert", ca.to_str().unwrap()]);
    assert_eq!((status, body.as_str()), (200, "Hello, World!"));
    // Without the CA curl refuses the certificate: no answer.
    assert_eq!(curl(&s.url, &[]).0, 0);
    let port = s.url.rsplit(':').next().unwrap().trim_end_matches('/');
    let out = python(&format!(
        r#"
import http.client, ssl
ctx = ssl.create_default_context(cafile="{ca}")
ctx.set_alpn_protocols(["http/1.1"])
c = http.client.HTTPSConnection("localhost", {port}, context=ctx, timeout=10)
c.request("GET", "/")
r = c.getresponse()
print(r.status, r.read().decode(), c.sock.selected_alpn_protocol())
"#,
        ca = ca.display()
    ));
    assert_eq!(out.trim(), "200 Hello, World! http/1.1");

    // A key that does not belong to the certificate: a clear error at once.
    let out = spindle()
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tls-cert/--tls-key"), "{err}");
    // A certificate without its key is a usage error.
    let out = spindle()
        .args(["serve", "--tls-cert"])
        .arg(&cert)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_admin_listener_answers_health_readiness_flips_at_drain_and_metrics_add_up() {
    let mut cmd = spindle();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--admin",
        "127.0.0.1:0",
        "--shutdown-delay",
        "1",
    ]);
    let s = Served::start(cmd);
    let admin = s.admin.clone().expect("the admin address is printed");
    assert_eq!(curl(&format!("{admin}healthz"), &[]), (200, "ok\n".into()));
    assert_eq!(
        curl(&format!("{admin}readyz"), &[]),
        (200, "ready\n".into())
    );
    assert_eq!(curl(&format!("{admin}nothing"), &[]).0, 404);
    for _ in 0..7 {
        assert_eq!(curl(&s.url, &[]).0, 200);
    }
    let hello = [
        ("component", "built-in hello"),
        ("route", "/..."),
        ("class", "2xx"),
    ];
    assert_eq!(metric(&admin, "spindle_requests_total", &hello), 7.0);
    assert_eq!(
        metric(
            &admin,
            "spindle_guest_outcomes_total",
            &[("component", "built-in hello"), ("outcome", "answered")]
        ),
        7.0
    );
    assert_eq!(
        metric(
            &admin,
            "spindle_request_duration_seconds_count",
            &[("component", "built-in hello")]
        ),
        7.0
    );
    assert_eq!(
        metric(&admin, "spindle_http_response_body_bytes_total", &[]),
        7.0 * "Hello, World!".len() as f64
    );
    assert!(metric(&admin, "spindle_runtime_blocking_threads", &[]) >= 0.0);
    assert_eq!(
        metric(&admin, "spindle_guest_instances", &[]),
        0.0,
        "none left after the requests"
    );
    assert_eq!(metric(&admin, "spindle_runtime_workers", &[]), 2.0);
    assert!(metric(&admin, "spindle_runtime_live_fibers", &[]) >= 1.0);

    // SIGTERM: not ready at once, still serving through the delay, then
    // drained and gone.
    s.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(curl(&format!("{admin}readyz"), &[]).0, 503);
    assert_eq!(
        curl(&s.url, &[]).0,
        200,
        "serving on during the shutdown delay"
    );
    assert_eq!(curl(&format!("{admin}healthz"), &[]).0, 200);
    let (status, err) = s.wait();
    assert!(status.success(), "{status:?} {err}");
    assert!(
        err.contains("not ready") && err.contains("draining"),
        "{err}"
    );
}

#[test]
fn flags_come_from_the_environment_and_a_flag_wins() {
    // SPINDLE_LISTEN alone.
    let mut cmd = spindle();
    cmd.args(["serve", "--workers", "1"])
        .env("SPINDLE_LISTEN", "127.0.0.1:0");
    let s = Served::start(cmd);
    assert_eq!(curl(&s.url, &[]).0, 200);
    drop(s);
    // A bad value in the environment, overridden by the flag.
    let mut cmd = spindle();
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("SPINDLE_LISTEN", "not an address")
        .env("SPINDLE_WORKERS", "1");
    let s = Served::start(cmd);
    assert_eq!(curl(&s.url, &[]).0, 200);
    drop(s);
    // A bad value with no flag over it: status 2, naming the flag.
    let out = spindle()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SPINDLE_MEMORY_LIMIT", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--memory-limit"));
    // --help names the variables.
    let out = spindle().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for v in [
        "SPINDLE_LISTEN",
        "SPINDLE_WORKERS",
        "SPINDLE_ADMIN",
        "SPINDLE_TLS_CERT",
    ] {
        assert!(help.contains(v), "--help does not name {v}");
    }
}

#[test]
fn json_logs_are_json_with_an_access_line_per_request() {
    let mut cmd = spindle();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--log-format",
        "json",
    ])
    .env("SPINDLE_LOG", "info");
    let s = Served::start(cmd);
    assert_eq!(curl(&format!("{}?x=1", s.url), &[]).0, 200);
    assert_eq!(curl(&format!("{}missing/../", s.url), &[]).0, 200);
    s.signal("INT");
    let (status, err) = s.wait();
    assert!(status.success());
    let out = python(&format!(
        r#"
import json, sys
lines = {lines:?}
events = [json.loads(l) for l in lines if l.strip()]
access = [e for e in events if e.get("target") == "access"]
assert len(access) == 2, access
a = access[0]
assert a["status"] == 200 and a["path"] == "/" and a["method"] == "GET", a
assert a["component"] == "built-in hello" and a["bytes"] == 13 and a["duration_ms"] > 0, a
assert any("draining" in e.get("message", "") for e in events), events
print("ok")
"#,
        lines = err.lines().collect::<Vec<_>>()
    ));
    assert_eq!(out.trim(), "ok", "{err}");
}

#[test]
fn two_processes_share_a_port_with_reuse_port() {
    let start = |listen: &str| {
        let mut cmd = spindle();
        cmd.args([
            "serve",
            "--workers",
            "1",
            "--reuse-port",
            "--listen",
            listen,
        ])
        .args(["--admin", "127.0.0.1:0"]);
        Served::start(cmd)
    };
    let a = start("127.0.0.1:0");
    let port = a
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let b = start(&format!("127.0.0.1:{port}"));
    assert_eq!(a.url, b.url, "the second process took the same port");
    // Without the flag the port is taken.
    let out = spindle()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // 40 fresh connections: the kernel spreads them over both processes.
    for _ in 0..40 {
        assert_eq!(curl(&a.url, &[]).0, 200);
    }
    let count = |s: &Served| {
        metric(
            s.admin.as_ref().unwrap(),
            "spindle_requests_total",
            &[("class", "2xx")],
        )
    };
    let (na, nb) = (count(&a), count(&b));
    assert_eq!(na + nb, 40.0);
    assert!(na > 0.0 && nb > 0.0, "one process got nothing: {na} {nb}");
    // One leaves; the other serves every connection.
    a.signal("TERM");
    assert!(a.wait().0.success());
    for _ in 0..10 {
        assert_eq!(curl(&b.url, &[]).0, 200);
    }
}

#[test]
fn a_guest_line_written_in_pieces_is_one_log_line_of_its_request() {
    // `print` writes "start a print " then "1".."4" then "\n", each through
    // a fresh stderr handle, and leaves a stdout line unfinished. With a
    // fresh instance per request and with one reused across requests, each
    // request's pieces make one line under its own name.
    for reuse in ["1", "4"] {
        let mut cmd = spindle();
        cmd.args(["serve", &guest("print"), "--listen", "127.0.0.1:0"])
            .args(["--workers", "1", "--max-instance-reuse", reuse]);
        let s = Served::start(cmd);
        for _ in 0..2 {
            assert_eq!(curl(&s.url, &[]), (200, "printed".to_string()));
        }
        let err = s.stop();
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("guest:")).collect();
        let prints: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("start a print 1234"))
            .collect();
        assert_eq!(prints.len(), 2, "reuse {reuse}: {err}");
        assert!(
            prints[0].contains("req 1 ") && prints[1].contains("req 2 "),
            "{err}"
        );
        let unfinished: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("no newline at the end"))
            .collect();
        assert_eq!(unfinished.len(), 2, "reuse {reuse}: {err}");
        assert!(
            unfinished[0].contains("req 1 ") && unfinished[1].contains("req 2 "),
            "{err}"
        );
        // No piece on a line of its own.
        assert!(!lines.iter().any(|l| l.contains("guest: 1 ")), "{err}");
    }
}
