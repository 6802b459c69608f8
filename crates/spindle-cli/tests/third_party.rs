//! Components nobody on this project wrote — wasmtime v48's own test
//! programs (`guests/third-party/wasmtime-48`, rebuilt by
//! `guests/third-party/build.sh`) — under `spindle run` and `spindle
//! serve`, passing as they do under `wasmtime run` and `wasmtime serve`.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::{spindle, Served};

fn program(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/third-party/wasmtime-48")
        .join(format!("{name}.wasm"))
        .display()
        .to_string()
}

/// The upstream wasmtime's tests run these commands against: it answers
/// with the request's method and URI in `x-wasmtime-test-method` and
/// `x-wasmtime-test-uri`, its `content-length` if it had one, and its
/// body.
fn echo_upstream() -> (spindle::Runtime, SocketAddr) {
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    let addr = rt.run(|| {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || {
            server.serve(|req: spindle_http::Request<spindle_http::Body>| {
                let mut resp = spindle_http::Response::builder()
                    .header("x-wasmtime-test-method", req.method().as_str())
                    .header("x-wasmtime-test-uri", req.uri().to_string());
                if let Some(len) = req.headers().get("content-length") {
                    resp = resp.header("content-length", len);
                }
                let body = req.into_body().into_vec().unwrap_or_default();
                resp.body(spindle_http::Body::from(body)).unwrap()
            })
        });
        addr
    });
    (rt, addr)
}

/// An upstream that speaks only HTTP/2, as wasmtime's `Server::http2`:
/// to an HTTP/1.1 request it answers a GOAWAY frame, and closes.
fn h2_only_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            // GOAWAY: length 8, type 7, no flags, stream 0; last stream 0,
            // PROTOCOL_ERROR.
            let _ = conn.write_all(&[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        }
    });
    addr
}

/// Whether a connection to 203.0.113.12:80 (TEST-NET-3, which
/// `p3_http_outbound_request_timeout` expects to time out) fails here: some
/// sandboxes answer every address through a transparent proxy.
fn test_net_is_unreachable() -> bool {
    let addr: SocketAddr = "203.0.113.12:80".parse().unwrap();
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_err()
}

#[test]
fn every_wasi_0_3_outbound_request_command_passes_under_spindle_run() {
    let (_upstream, echo) = echo_upstream();
    let h2_only = h2_only_upstream();
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guests/third-party/wasmtime-48");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("p3_http_outbound_request_")
                .and_then(|n| n.strip_suffix(".wasm"))
                .map(|n| format!("p3_http_outbound_request_{n}"))
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 15, "{names:?}");
    // Its forbidden header is one wasmtime's test harness adds to the
    // standard ones (`custom-forbidden-header`): no host forbids it.
    names.retain(|n| n != "p3_http_outbound_request_invalid_header");
    if !test_net_is_unreachable() {
        eprintln!("203.0.113.12 answers here: p3_http_outbound_request_timeout skipped");
        names.retain(|n| n != "p3_http_outbound_request_timeout");
    }
    let mut failed = Vec::new();
    for name in &names {
        let addr = match name.as_str() {
            "p3_http_outbound_request_invalid_version" => h2_only,
            _ => echo,
        };
        let out = spindle()
            .args(["run", "--allow-outbound", "*", "--env"])
            .arg(format!("HTTP_SERVER={addr}"))
            .arg(program(name))
            .output()
            .unwrap();
        if !out.status.success() {
            failed.push(format!(
                "{name}: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A raw HTTP/1.1 exchange: writes `request`, reads to the end.
fn exchange(url: &str, request: &str) -> String {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn wasmtimes_wasi_0_3_echo_sends_the_request_trailers_back() {
    let mut cmd = spindle();
    cmd.args(["serve", &program("p3_http_echo"), "--listen", "127.0.0.1:0"]);
    let s = Served::start(cmd);
    let out = exchange(
        &s.url,
        "POST / HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n",
    );
    let lower = out.to_ascii_lowercase();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(lower.contains("transfer-encoding: chunked"), "{out}");
    assert!(out.contains("hello"), "{out}");
    // The trailer comes after the last chunk.
    let tail = &lower[lower.find("\r\n0\r\n").expect("a last chunk")..];
    assert!(tail.contains("x-checksum: abc"), "{out}");
    s.stop();
}

#[test]
fn wasmtimes_print_program_logs_one_line_per_piece_written_line() {
    let mut cmd = spindle();
    cmd.args([
        "serve",
        &program("p2_cli_serve_with_print"),
        "--listen",
        "127.0.0.1:0",
    ]);
    let s = Served::start(cmd);
    for _ in 0..2 {
        assert_eq!(common::curl(&s.url, &[]).0, 200);
    }
    let err = s.stop();
    let guest: Vec<&str> = err.lines().filter(|l| l.contains("guest:")).collect();
    let count = |text: &str| guest.iter().filter(|l| l.contains(text)).count();
    assert_eq!(count("start a print 1234"), 2, "{err}");
    assert_eq!(count("this is half a print to stderr"), 2, "{err}");
    assert_eq!(count("this is half a print to stdout"), 2, "{err}");
    assert_eq!(count("after empty"), 4, "{err}");
    assert!(
        !guest
            .iter()
            .any(|l| l.ends_with("guest: 1") || l.contains("guest: 1 ")),
        "{err}"
    );
}

#[test]
fn wasmtimes_middleware_compositions_decode_encode_and_pass_trailers_through() {
    // The middleware inflates a `deflate` request body for the echo
    // behind it and deflates the echo's answer for a client that accepts
    // it; trailers pass through both, as under `wasmtime serve`.
    for composed in [
        "composed_middleware_echo",
        "composed_middleware_with_chain_echo",
    ] {
        let mut cmd = spindle();
        cmd.args(["serve", &program(composed), "--listen", "127.0.0.1:0"]);
        let s = Served::start(cmd);
        let port = s
            .url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .unwrap()
            .to_string();
        let out = common::python(&format!(
            r#"
import socket, zlib
body = b"And the mome raths outgrabe"
c = zlib.compressobj(wbits=-15)
raw = c.compress(body) + c.flush()
s = socket.create_connection(("127.0.0.1", {port}), timeout=20)
s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nfoo: bar\r\ncontent-encoding: deflate\r\n"
          b"accept-encoding: nonexistent-encoding, deflate\r\nTE: trailers\r\n"
          b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
          + b"%x\r\n" % len(raw) + raw + b"\r\n0\r\nx-trailer: yes\r\n\r\n")
resp = b""
while True:
    d = s.recv(65536)
    if not d: break
    resp += d
head, rest = resp.split(b"\r\n\r\n", 1)
lower = head.lower()
assert head.startswith(b"HTTP/1.1 200"), head
assert b"content-encoding: deflate" in lower, head
assert b"transfer-encoding: chunked" in lower, head
data = b""
while True:
    line, rest = rest.split(b"\r\n", 1)
    n = int(line.split(b";")[0], 16)
    if n == 0: break
    data += rest[:n]; rest = rest[n + 2:]
assert zlib.decompress(data, wbits=-15) == body, data
assert b"x-trailer: yes" in rest.lower(), rest
print("ok")
"#
        ));
        assert_eq!(out.trim(), "ok", "{composed}: {out}");
        s.stop();
    }
}
