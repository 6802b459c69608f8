//! `spindle serve` over HTTP/2: h2c and h2 over TLS for the built-in app
//! and for WASI 0.2 and 0.3 components (curl, h2spec), requests counted by
//! protocol, h2c switched off, and a gRPC-shaped exchange — a client's
//! request with trailers through a guest to an h2c upstream and the
//! upstream's `grpc-status` trailers back — in both worlds.

use std::io::BufRead;
use std::process::{Command, Stdio};

mod common;

use common::{curl, guest, metric, spindle, temp_dir, test_pki, Served};

fn serve(args: &[&str]) -> Served {
    let mut cmd = spindle();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "2"])
        .args(args);
    Served::start(cmd)
}

#[test]
fn every_world_answers_h2c_and_http1_on_one_port_and_metrics_count_each() {
    for app in [
        None,
        Some(guest("hello")),
        Some(guest("hello-p3")),
        Some(guest("echo-p3")),
    ] {
        let mut args = vec!["--admin", "127.0.0.1:0"];
        if let Some(app) = &app {
            args.insert(0, app.as_str());
        }
        let s = serve(&args);
        let (status, body) = curl(&s.url, &["--http2-prior-knowledge", "-d", "Hello, World!"]);
        assert_eq!((status, body.as_str()), (200, "Hello, World!"), "{app:?}");
        let (status, _) = curl(&s.url, &["--http2-prior-knowledge"]);
        assert_eq!(status, 200);
        let (status, _) = curl(&s.url, &[]);
        assert_eq!(status, 200);
        let admin = s.admin.clone().unwrap();
        let by = |p| {
            metric(
                &admin,
                "spindle_http_protocol_requests_total",
                &[("protocol", p)],
            )
        };
        assert_eq!((by("HTTP/2"), by("HTTP/1.1")), (2.0, 1.0), "{app:?}");
        s.stop();
    }
}

#[test]
fn h2c_off_leaves_http1_alone() {
    let s = serve(&["--h2c", "off"]);
    assert_eq!(curl(&s.url, &["--http2-prior-knowledge"]).0, 0);
    assert_eq!(curl(&s.url, &[]).0, 200);
}

#[test]
fn a_bad_switch_value_is_a_usage_error() {
    let out = spindle()
        .args(["serve", "--h2c", "maybe"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--h2c"));
}

#[test]
fn h2_over_tls_by_alpn_and_h2spec_passes_every_case() {
    let dir = temp_dir("h2tls");
    let (ca, cert, key, _) = test_pki(&dir);
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = serve(&["--tls-cert", cert, "--tls-key", key]);
    let out = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "15", "--cacert"])
        .arg(&ca)
        .arg(&s.url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ALPN: server accepted h2"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello, World!");
    // Turned off, ALPN settles on HTTP/1.1.
    let plain = serve(&["--tls-cert", cert, "--tls-key", key, "--http2", "off"]);
    let out = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "15", "--cacert"])
        .arg(&ca)
        .arg(&plain.url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ALPN: server accepted http/1.1"), "{err}");
    let Some(h2spec) = std::env::var_os("H2SPEC") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build h2spec and set H2SPEC (see .ci/run)"
        );
        eprintln!("H2SPEC is not set: h2spec not run (.ci/run builds it)");
        return;
    };
    let port = s.url.rsplit(':').next().unwrap().trim_end_matches('/');
    let run = || {
        let out = Command::new("timeout")
            .arg("120")
            .arg(&h2spec)
            .args(["-t", "-k", "-h", "127.0.0.1", "-p", port])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut stdout = run();
    // The cases that race by their design (see spindle-http's
    // `h2spec_passes_every_case_over_h2c`): an error earned on a stream the
    // guest (which does not read the body) may have answered and reset
    // with NO_ERROR before it arrives; h2spec then sees the answer's
    // 13-byte DATA frame, or that reset. When every failure is one of
    // those, the suite runs again, twice at most.
    for _ in 0..2 {
        if !only_lost_races(&stdout) {
            break;
        }
        eprintln!("h2spec: a race by design lost; again");
        stdout = run();
    }
    assert!(
        stdout.contains("146 tests, 146 passed, 0 skipped, 0 failed"),
        "{stdout}"
    );
}

/// Whether h2spec failed, and only where the frame it got instead of an
/// error is the guest's answer (its 13-byte DATA frame) or the
/// RST_STREAM(NO_ERROR) that follows it. Counted in the summary after
/// `Failures:`, which lists each failed case once.
fn only_lost_races(stdout: &str) -> bool {
    let Some(summary) = stdout.split("Failures:").nth(1) else {
        return false;
    };
    let failed = summary.matches("Actual:").count();
    let raced = summary
        .matches("Actual: DATA Frame (length:13, flags:0x01")
        .count()
        + summary
            .matches("Actual: RST_STREAM Frame (length:4, flags:0x00")
            .count();
    failed > 0 && failed == raced
}

/// The misbehaving-upstream script of spindle-http's tests, in `trailers`
/// mode: an h2c server answering with gRPC-style trailers.
struct Upstream {
    child: std::process::Child,
    port: u16,
}

impl Upstream {
    fn start() -> Upstream {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../spindle-http/tests/h2upstream.py"
        );
        let mut child = Command::new("python3")
            .args([script, "trailers"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let port = first.trim().strip_prefix("port=").unwrap().parse().unwrap();
        // The rest of its lines are not read: it writes few.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Upstream { child, port }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_grpc_shaped_call_through_a_guest_carries_trailers_both_ways() {
    let up = Upstream::start();
    for world in ["grpc", "grpc-p3"] {
        let s = serve(&[
            &guest(world),
            "--allow-outbound",
            "127.0.0.1",
            "--outbound-h2c",
            &format!("127.0.0.1:{}", up.port),
        ]);
        let port = s
            .url
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches('/')
            .to_string();
        // Node's http2 client: a request with a trailer, the answer's
        // trailers printed.
        let script = format!(
            r#"
const c = require('http2').connect('http://127.0.0.1:{port}');
const req = c.request({{ ':path': '/svc.Method', ':method': 'POST', 'te': 'trailers',
  'x-fetch-url': 'http://127.0.0.1:{up}/svc.Method' }}, {{ waitForTrailers: true }});
req.on('wantTrailers', () => req.sendTrailers({{ 'x-sum': 'xyz' }}));
let out = '';
req.on('response', h => out += h[':status'] + ' ');
req.on('data', d => out += d);
req.on('trailers', t => out += ' ' + t['grpc-status'] + ' ' + t['grpc-message'] + ' ' + t['x-sum-seen']);
req.on('end', () => {{ console.log(out); c.close(); }});
req.end('payload');
"#,
            up = up.port
        );
        let out = Command::new("timeout")
            .args(["30", "node", "-e", &script])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "200 POST /svc.Method 0 fine xyz",
            "{world}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.stop();
    }
}

#[test]
fn echo_guests_send_the_request_trailers_back_over_http1_and_h2() {
    use std::io::{Read, Write};
    for world in ["echo", "echo-p3"] {
        let s = serve(&[&guest(world)]);
        let addr = s
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        // HTTP/1.1: a chunked request with a trailer, the echo chunked with it.
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        c.write_all(
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
              5\r\nhello\r\n0\r\nx-sum: q1\r\n\r\n",
        )
        .unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.contains("hello"), "{world}: {got}");
        assert!(got.ends_with("0\r\nx-sum: q1\r\n\r\n"), "{world}: {got}");
        // HTTP/2: Node sends a trailer and prints the echo's.
        let script = format!(
            r#"
const c = require('http2').connect('http://{addr}');
const req = c.request({{ ':path': '/', ':method': 'POST' }}, {{ waitForTrailers: true }});
req.on('wantTrailers', () => req.sendTrailers({{ 'x-sum': 'xyz' }}));
let out = '';
req.on('data', d => out += d);
req.on('trailers', t => out += ' ' + t['x-sum']);
req.on('end', () => {{ console.log(out); c.close(); }});
req.end('hello');
"#
        );
        let out = Command::new("timeout")
            .args(["30", "node", "-e", &script])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "hello xyz",
            "{world}"
        );
        s.stop();
    }
}
