//! What the spindle-wasm tests share: the committed guests, a host
//! configuration with a private code cache, a served guest, a raw GET and a
//! local upstream.
#![allow(dead_code)] // each test file uses its own share

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spindle::Runtime;
use spindle_wasm::{Host, HostConfig};

/// A committed guest component, from `guests/wasm`.
pub fn guest(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compiled code goes to a per-process temporary cache, so tests do not
/// depend on (or fill) the user's.
pub fn config() -> HostConfig {
    let dir = std::env::temp_dir().join(format!("spindle-wasm-test-cache-{}", std::process::id()));
    HostConfig::default()
        .max_concurrent(2000)
        .cache_dir(Some(dir))
}

/// Serves `wasm` on a fresh runtime with `workers` workers.
pub fn serve(name: &str, workers: usize, config: HostConfig) -> (Runtime, SocketAddr) {
    let host = Host::new(&guest(name), config).expect("the guest compiles and links");
    serve_host(host, workers)
}

/// Serves `host` on a fresh runtime with `workers` workers.
pub fn serve_host(host: Host, workers: usize) -> (Runtime, SocketAddr) {
    let rt = Runtime::builder().workers(workers).build().unwrap();
    let addr = rt.run(move || {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(move |req| host.handle(req)));
        addr
    });
    (rt, addr)
}

/// `GET path` over a fresh connection: (status, body).
pub fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    // Generous: the burn requests share a loaded CI machine.
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Undo chunking, if any, for the checks below.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// A local upstream on spindle-http (one worker of its own).
pub fn upstream(
    handler: fn(
        spindle_http::Request<spindle_http::Body>,
    ) -> spindle_http::Response<spindle_http::Body>,
) -> (Runtime, SocketAddr) {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = rt.run(move || {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(handler));
        addr
    });
    (rt, addr)
}

/// A program from wasmtime v48's own test suite, from
/// `guests/third-party/wasmtime-48`.
pub fn third_party(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/third-party/wasmtime-48")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `redis-server` of its own on a free port of 127.0.0.1, no
/// persistence, killed on drop (Debian's package; `.ci/run` installs it).
/// It can be stopped and started again on the same port.
pub struct Redis {
    pub port: u16,
    server: Option<std::process::Child>,
}

impl Redis {
    pub fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis { port, server: None };
        r.restart();
        r
    }

    /// Starts the server (again), empty, and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let server = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is not installed (apt-get install redis-server; .ci/run does)");
        self.server = Some(server);
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server.
    pub fn stop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }

    /// The URL of database `db`.
    pub fn url(&self, db: u8) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh temporary directory for this test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-wasm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
