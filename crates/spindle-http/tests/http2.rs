//! HTTP/2 on the server, through real clients (curl, Python's httpx,
//! Node's http2, h2load, h2spec) and a hostile raw-frame peer
//! (`tests/h2peer.py`): each attack is bounded in time and memory, and the
//! server answers others afterwards.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spindle::Runtime;
use spindle_http::{Body, Request, Response, Server, ServerConfig, ServerHandle};

/// What `/watch` saw of its client: 1 gone, 2 still there after 5 s, 3
/// no watch in the request.
static WATCHED: AtomicU64 = AtomicU64::new(0);

/// Set when a `/forever` handler starts, and when its frame is dropped (it
/// was cancelled).
static FOREVER_STARTED: AtomicU64 = AtomicU64::new(0);
static FOREVER_ENDED: AtomicU64 = AtomicU64::new(0);

/// Bytes the endless `/big` response has produced, all servers together.
static BIG_PRODUCED: AtomicU64 = AtomicU64::new(0);

/// An endless response body, counting what it hands out.
struct Endless;

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b'x');
        BIG_PRODUCED.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
}

fn handler(req: Request<Body>) -> Response<Body> {
    match req.uri().path() {
        "/echo" => {
            let body = req.into_body().into_vec();
            match body {
                Ok(b) => Response::new(Body::from(b)),
                Err(e) => Response::new(Body::from(format!("read failed: {e}"))),
            }
        }
        "/read-then-hello" => {
            // The whole request (trailers too) first, then the answer.
            let _ = req.into_body().into_vec();
            Response::new(Body::from("Hello, World!"))
        }
        "/slow" => {
            spindle::time::sleep(Duration::from_millis(200));
            Response::new(Body::from("slow"))
        }
        "/slower" => {
            spindle::time::sleep(Duration::from_millis(1500));
            Response::new(Body::from("slower"))
        }
        "/big" => Response::new(Body::from_reader(Endless)),
        "/forever" => {
            struct Mark;
            impl Drop for Mark {
                fn drop(&mut self) {
                    FOREVER_ENDED.store(1, Ordering::SeqCst);
                }
            }
            let _mark = Mark;
            FOREVER_STARTED.store(1, Ordering::SeqCst);
            spindle::time::sleep(Duration::from_secs(60));
            Response::new(Body::from("never"))
        }
        "/version" => Response::new(Body::from(format!("{:?}", req.version()))),
        "/watch" => {
            let seen = match req.extensions().get::<spindle_http::ClientGone>().cloned() {
                Some(gone) => {
                    let waited = spindle::time::timeout(Duration::from_secs(5), || {
                        spindle::block_on(gone.wait())
                    });
                    if waited.is_ok() {
                        1
                    } else {
                        2
                    }
                }
                None => 3,
            };
            WATCHED.store(seen, Ordering::SeqCst);
            Response::new(Body::from("watched"))
        }
        _ => Response::new(Body::from("Hello, World!")),
    }
}

/// Held by the tests that load the machine (floods, h2load) and by h2spec,
/// so that h2spec's timing-sensitive cases never run beside a flood.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn config() -> ServerConfig {
    ServerConfig::default()
        .write_timeout(Duration::from_secs(1))
        .body_read_timeout(Duration::from_secs(1))
}

fn start(rt: &Runtime, config: ServerConfig) -> (SocketAddr, ServerHandle) {
    rt.run(move || {
        let server = Server::bind("127.0.0.1:0").unwrap().config(config);
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        spindle::spawn(move || server.serve(handler));
        (addr, handle)
    })
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The server still answers a new HTTP/2 client and an HTTP/1.1 one.
fn still_serves(addr: SocketAddr) {
    let url = format!("http://{addr}/version");
    let (ok, out, err) = curl(&["--http2-prior-knowledge", &url]);
    assert!(ok && out == "HTTP/2.0", "h2 after the attack: {out} {err}");
    let (ok, out, err) = curl(&[&url]);
    assert!(ok && out == "HTTP/1.1", "h1 after the attack: {out} {err}");
}

/// Resident memory of this process (the server runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Runs `tests/h2peer.py MODE` against `addr` and parses its `k=v` line.
fn peer(mode: &str, addr: SocketAddr) -> HashMap<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2peer.py");
    let out = Command::new("timeout")
        .args(["90", "python3", script, mode, "127.0.0.1"])
        .arg(addr.port().to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "h2peer {mode} failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(r: &HashMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or(f64::NAN)
}

#[test]
fn curl_speaks_h2c_by_prior_knowledge_and_http1_on_the_same_port() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let url = format!("http://{addr}/version");
    // One URL per curl: Debian 12's curl 7.88 fails a second request on a
    // reused h2c connection with any server (Node's too). Multiplexing is
    // what the httpx, Node and h2load tests show.
    let (ok, out, err) = curl(&["-v", "--http2-prior-knowledge", &url]);
    assert!(ok, "{err}");
    assert_eq!(out, "HTTP/2.0");
    assert!(err.contains("< HTTP/2 200"), "{err}");
    assert!(err.contains("content-length: 8"), "{err}");
    let (ok, out, _) = curl(&[&url]);
    assert!(ok);
    assert_eq!(out, "HTTP/1.1");
    // A 1 MB upload echoed back, and a HEAD.
    let body = "y".repeat(1 << 20);
    let path = std::env::temp_dir().join(format!("spindle-h2-upload-{}", std::process::id()));
    std::fs::write(&path, &body).unwrap();
    let data = format!("@{}", path.display());
    let echo = format!("http://{addr}/echo");
    let (ok, out, err) = curl(&["--http2-prior-knowledge", "--data-binary", &data, &echo]);
    std::fs::remove_file(&path).unwrap();
    assert!(ok, "{err}");
    assert_eq!(out.len(), body.len());
    let (ok, out, err) = curl(&["-I", "--http2-prior-knowledge", &format!("http://{addr}/")]);
    assert!(ok, "{err}");
    assert!(out.contains("content-length: 13"), "{out}");
}

#[test]
fn h2c_can_be_turned_off() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, _) = start(&rt, config().h2c(false));
    let url = format!("http://{addr}/version");
    let (ok, _, _) = curl(&["--http2-prior-knowledge", &url]);
    assert!(!ok, "the preface must not be understood with h2c off");
    let (ok, out, _) = curl(&[&url]);
    assert!(ok && out == "HTTP/1.1");
}

#[test]
fn python_httpx_multiplexes_on_one_connection() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let script = format!(
        r#"
import asyncio, httpx
async def main():
    async with httpx.AsyncClient(http2=True, http1=False) as c:
        rs = await asyncio.gather(*[c.get("http://{addr}/slow") for _ in range(50)])
        assert all(r.status_code == 200 and r.http_version == "HTTP/2" for r in rs), rs
        r = await c.post("http://{addr}/echo", content=b"z" * 300000)
        assert r.content == b"z" * 300000
    print("ok")
asyncio.run(main())
"#
    );
    let started = Instant::now();
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 50 handlers that sleep 200 ms each, all at once on one connection.
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn node_http2_runs_100_concurrent_streams_on_one_connection() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let script = format!(
        r#"
const http2 = require('http2');
const c = http2.connect('http://{addr}');
let done = 0, ok = 0;
for (let i = 0; i < 100; i++) {{
  const req = c.request({{ ':path': '/slow' }});
  let status = 0, body = '';
  req.on('response', h => {{ status = h[':status']; }});
  req.on('data', d => body += d);
  req.on('end', () => {{
    if (status === 200 && body === 'slow') ok++;
    if (++done === 100) {{ console.log('ok=' + ok); c.close(); }}
  }});
  req.end();
}}
"#
    );
    let out = Command::new("timeout")
        .args(["60", "node", "-e", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "ok=100");
}

#[test]
fn h2load_completes_every_request() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let out = Command::new("timeout")
        .args(["60", "h2load", "-n", "20000", "-c", "10", "-m", "16"])
        .arg(format!("http://{addr}/"))
        .output()
        .expect("h2load runs (Debian's nghttp2-client)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "20000 total, 20000 started, 20000 done, 20000 succeeded, 0 failed, 0 errored"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("status codes: 20000 2xx"), "{stdout}");
}

#[test]
fn h2spec_passes_every_case_over_h2c() {
    let Some(h2spec) = std::env::var_os("H2SPEC") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build h2spec and set H2SPEC (see .ci/run)"
        );
        eprintln!("H2SPEC is not set: h2spec not run (.ci/run builds it)");
        return;
    };
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    // At a handler that reads the whole request (trailers too) before it
    // answers. One that answers at once races several cases by their
    // design: they open a stream with more to come, then send what earns
    // an error — window updates that overflow, a second HEADERS without
    // END_STREAM, a pseudo-header in trailers — and want that error as the
    // next frame. If the answer went out first, the stream is already
    // closed with RST_STREAM(NO_ERROR), as RFC 9113 §8.1 allows, and what
    // follows lands on a closed stream, which §5.1 says to ignore: h2spec
    // sees the answer instead.
    let out = Command::new("timeout")
        .arg("120")
        .arg(&h2spec)
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(["-P", "/read-then-hello"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = "146 tests, 146 passed, 0 skipped, 0 failed";
    assert!(stdout.contains(all), "{stdout}");
    still_serves(addr);
}

#[test]
fn rapid_reset_is_bounded_and_others_are_served() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let before = rss();
    let r = peer("rapid-reset", addr);
    // Either every stream was dealt with quickly, or the server sent the
    // attacker away; both within the bound.
    assert!(num(&r, "secs") < 30.0, "{r:?}");
    assert!(rss() < before + (128 << 20), "{} -> {}", before, rss());
    still_serves(addr);
}

#[test]
fn continuation_flood_is_cut_off() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let before = rss();
    let r = peer("continuation", addr);
    // The header block is refused long before 64 MiB of it arrive.
    assert!(num(&r, "sent") < (4 << 20) as f64, "{r:?}");
    assert!(num(&r, "secs") < 20.0, "{r:?}");
    assert!(rss() < before + (64 << 20));
    still_serves(addr);
}

#[test]
fn settings_flood_holds_bounded_memory() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let before = rss();
    let r = peer("settings", addr);
    assert!(num(&r, "secs") < 30.0, "{r:?}");
    assert!(rss() < before + (64 << 20), "{} -> {}", before, rss());
    still_serves(addr);
}

#[test]
fn a_peer_that_never_opens_its_window_gets_a_reset_not_our_memory() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let before = BIG_PRODUCED.load(Ordering::Relaxed);
    let r = peer("zero-window", addr);
    assert_eq!(r["status"], "200", "{r:?}");
    assert_eq!(r["data"], "0", "{r:?}");
    // The write timeout (1 s) ended the stream: CANCEL or INTERNAL_ERROR.
    assert_ne!(r["reset"], "None", "{r:?}");
    assert!(num(&r, "secs") < 10.0, "{r:?}");
    // The endless body was read no further than one chunk ahead.
    let produced = BIG_PRODUCED.load(Ordering::Relaxed) - before;
    assert!(produced <= 64 << 10, "{produced} bytes produced");
    still_serves(addr);
}

#[test]
fn a_body_that_never_comes_times_out_with_408() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let r = peer("no-body", addr);
    assert_eq!(r["status"], "408", "{r:?}");
    assert!(num(&r, "secs") < 10.0, "{r:?}");
    still_serves(addr);
}

#[test]
fn streams_past_the_limit_are_refused_and_the_rest_answered() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let r = peer("streams", addr);
    let (ok, refused, other) = (num(&r, "ok"), num(&r, "refused"), num(&r, "other"));
    assert_eq!(ok + refused + other, 1000.0, "{r:?}");
    assert!(ok >= 100.0, "{r:?}");
    assert_eq!(other, 0.0, "{r:?}");
    assert!(num(&r, "secs") < 20.0, "{r:?}");
    still_serves(addr);
}

#[test]
fn drain_sends_goaway_and_finishes_streams_in_flight() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle) = start(&rt, config());
    // A slow request in flight on an HTTP/2 connection...
    let url = format!("http://{addr}/slower");
    let client = std::thread::spawn(move || curl(&["--http2-prior-knowledge", &url]));
    // ...and an idle HTTP/2 client: both connected before the drain.
    let idle = std::thread::spawn(move || peer("idle", addr));
    let waiting = Instant::now();
    while handle.connections() < 2 && waiting.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(handle.connections(), 2);
    let started = Instant::now();
    let cancelled = rt.run(move || handle.drain(Instant::now() + Duration::from_secs(5)));
    assert_eq!(cancelled, 0, "every connection left on its own");
    assert!(started.elapsed() < Duration::from_secs(4));
    let (ok, out, err) = client.join().unwrap();
    assert!(ok, "{err}");
    assert_eq!(out, "slower");
    // The idle client was told to go away (GOAWAY, NO_ERROR), then closed.
    let r = idle.join().unwrap();
    assert_eq!(r["goaway"], "0", "{r:?}");
    assert_eq!(r["closed"], "1", "{r:?}");
}

#[test]
fn a_panicking_handler_answers_500_on_its_stream_only() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = rt.run(|| {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || {
            server.serve(|req| {
                if req.uri().path() == "/panic" {
                    panic!("a handler's bug");
                }
                Response::new(Body::from("fine"))
            })
        });
        addr
    });
    let a = format!("http://{addr}/panic");
    let b = format!("http://{addr}/");
    let (ok, out, err) = curl(&["--http2-prior-knowledge", "-w", "%{http_code}", &a]);
    assert!(ok, "{err}");
    assert_eq!(out, "500");
    let (ok, out, err) = curl(&["--http2-prior-knowledge", "-w", " %{http_code}", &b]);
    assert!(ok, "{err}");
    assert_eq!(out, "fine 200");
}

// ---- the client ----

/// A misbehaving Python h2c upstream (`tests/h2upstream.py MODE`).
struct Upstream {
    child: std::process::Child,
    port: u16,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Upstream {
    fn start(mode: &str) -> Upstream {
        use std::io::BufRead;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2upstream.py");
        let mut child = Command::new("python3")
            .args([script, mode])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
        let port = first.strip_prefix("port=").unwrap().parse().unwrap();
        Upstream { child, port, lines }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// What it reported so far.
    fn events(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(100));
        self.lines.try_iter().collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn h2c_client() -> spindle_http::Client {
    spindle_http::Client::new()
        .http2_prior_knowledge(true)
        .io_timeout(Duration::from_secs(10))
}

#[test]
fn the_client_multiplexes_100_fibers_on_one_h2c_connection() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle) = start(&rt, config());
    let (ok, conns) = rt.run(move || {
        let client = h2c_client();
        let url = format!("http://{addr}/slow");
        let fibers: Vec<_> = (0..100)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                spindle::spawn(move || {
                    let resp = client.get(&url).unwrap();
                    assert_eq!(resp.version(), http::Version::HTTP_2);
                    resp.into_body().into_vec().unwrap() == b"slow"
                })
            })
            .collect();
        let ok = fibers
            .into_iter()
            .map(|f| f.join().unwrap())
            .filter(|&b| b)
            .count();
        (ok, handle.connections())
    });
    assert_eq!(ok, 100);
    assert_eq!(conns, 1, "one connection carried all 100 requests");
}

#[test]
fn a_client_request_past_goaway_goes_again_on_a_new_connection() {
    let up = Upstream::start("goaway-after-first");
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (a, b) = (up.url("/a"), up.url("/b"));
    let bodies = rt.run(move || {
        let client = h2c_client();
        let other = client.clone();
        let first = spindle::spawn(move || other.get(&a).unwrap().into_body().into_vec().unwrap());
        let second = client.get(&b).unwrap().into_body().into_vec().unwrap();
        (first.join().unwrap(), second)
    });
    assert_eq!(bodies, (b"GET /a".to_vec(), b"GET /b".to_vec()));
    let events = up.events();
    assert_eq!(
        events.iter().filter(|e| *e == "conn").count(),
        2,
        "{events:?}"
    );
}

#[test]
fn a_refused_stream_is_sent_again_even_a_post() {
    let up = Upstream::start("refuse-first");
    let rt = Runtime::builder().workers(1).build().unwrap();
    let url = up.url("/p");
    let body = rt.run(move || {
        let resp = h2c_client().post(&url, "payload").unwrap();
        resp.into_body().into_vec().unwrap()
    });
    assert_eq!(body, b"POST /p");
    let events = up.events();
    assert_eq!(
        events.iter().filter(|e| e.starts_with("req")).count(),
        1,
        "{events:?}"
    );
}

#[test]
fn a_lost_connection_retries_a_get_but_not_a_post() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let up = Upstream::start("die-mid-request");
    let url = up.url("/g");
    let body = rt.run(move || {
        h2c_client()
            .get(&url)
            .unwrap()
            .into_body()
            .into_vec()
            .unwrap()
    });
    assert_eq!(body, b"GET /g");
    let up = Upstream::start("die-mid-request");
    let url = up.url("/p");
    let err = rt.run(move || h2c_client().post(&url, "x").unwrap_err());
    assert!(err.is_closed(), "{err}");
    let events = up.events();
    assert!(!events.iter().any(|e| e.starts_with("req")), "{events:?}");
}

// ---- trailers ----

/// Answers with its body's length, and trailers: `grpc-status` and the
/// request's own trailer `x-sum` echoed as `x-sum-seen`.
fn trailers_handler(req: Request<Body>) -> Response<Body> {
    let mut body = req.into_body();
    let mut data = Vec::new();
    body.read_to_end(&mut data).unwrap();
    let seen = body
        .trailers()
        .unwrap()
        .and_then(|t| t.get("x-sum").cloned());
    let reply = Body::from(format!("{} bytes", data.len())).with_trailers(move || {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        if let Some(v) = seen {
            t.insert("x-sum-seen", v);
        }
        Some(t)
    });
    Response::new(reply)
}

fn start_trailers(rt: &Runtime) -> SocketAddr {
    rt.run(|| {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(trailers_handler));
        addr
    })
}

#[test]
fn trailers_go_both_ways_over_h2_and_http1() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start_trailers(&rt);
    for client in [h2c_client(), spindle_http::Client::new()] {
        let (version, text, trailers) = rt.run(move || {
            let mut sent = http::HeaderMap::new();
            sent.insert("x-sum", "abc".parse().unwrap());
            let body = Body::from_reader(std::io::Cursor::new(vec![7u8; 5000]))
                .with_trailers(move || Some(sent));
            let req = Request::post(format!("http://{addr}/")).body(body).unwrap();
            let resp = client.request(req).unwrap();
            let version = resp.version();
            let mut body = resp.into_body();
            let mut text = String::new();
            body.read_to_string(&mut text).unwrap();
            (version, text, body.trailers().unwrap().unwrap())
        });
        assert_eq!(text, "5000 bytes", "{version:?}");
        assert_eq!(trailers["grpc-status"], "0", "{version:?}");
        assert_eq!(trailers["x-sum-seen"], "abc", "{version:?}");
    }
}

#[test]
fn node_sees_the_h2_trailers_and_a_raw_http1_client_the_chunked_ones() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start_trailers(&rt);
    let script = format!(
        r#"
const c = require('http2').connect('http://{addr}');
const req = c.request({{ ':path': '/', ':method': 'POST' }}, {{ waitForTrailers: true }});
req.on('wantTrailers', () => req.sendTrailers({{ 'x-sum': 'xyz' }}));
req.on('trailers', t => {{ console.log(t['grpc-status'] + ' ' + t['x-sum-seen']); c.close(); }});
req.on('data', () => {{}});
req.end('hello');
"#
    );
    let out = Command::new("timeout")
        .args(["30", "node", "-e", &script])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0 xyz");
    // HTTP/1.1: a chunked request with a trailer, a chunked answer with them.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          3\r\nabc\r\n0\r\nx-sum: q1\r\nContent-Length: 9\r\n\r\n",
    )
    .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert!(got.contains("transfer-encoding: chunked"), "{got}");
    // The framing field among the request's trailers was dropped, not used.
    assert!(
        got.ends_with("7\r\n3 bytes\r\n0\r\ngrpc-status: 0\r\nx-sum-seen: q1\r\n\r\n"),
        "{got}"
    );
}

#[test]
fn the_client_reads_an_upstreams_grpc_trailers() {
    let up = Upstream::start("trailers");
    let rt = Runtime::builder().workers(1).build().unwrap();
    let url = up.url("/svc.Method");
    let (body, trailers) = rt.run(move || {
        let mut body = h2c_client().post(&url, "").unwrap().into_body();
        let mut text = Vec::new();
        body.read_to_end(&mut text).unwrap();
        (text, body.trailers().unwrap().unwrap())
    });
    assert_eq!(body, b"POST /svc.Method");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["grpc-message"], "fine");
}

#[test]
fn a_handler_sees_its_stream_reset_and_the_connection_goes_on() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config().watch_client_gone(true));
    let started = Instant::now();
    let r = peer("reset", addr);
    assert_eq!(r["second"], "200", "{r:?}");
    // The handler's watch ended with the reset, long before its 5 s.
    while WATCHED.load(Ordering::SeqCst) == 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(WATCHED.load(Ordering::SeqCst), 1);
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[test]
fn an_idle_h2_connection_is_sent_away_and_a_stalled_preface_closed() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, _) = start(
        &rt,
        config()
            .keep_alive_timeout(Duration::from_secs(1))
            .header_read_timeout(Duration::from_secs(1)),
    );
    // A client that opens a connection and sends nothing more: after the
    // keep-alive timeout, GOAWAY (NO_ERROR) and the close.
    let r = peer("idle", addr);
    assert_eq!(
        (r["goaway"].as_str(), r["closed"].as_str()),
        ("0", "1"),
        "{r:?}"
    );
    assert!(num(&r, "secs") < 5.0, "{r:?}");
    // Half a preface, then silence: closed after the head's timeout.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn too_many_header_fields_get_431_on_their_stream() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, _) = start(&rt, config());
    let url = format!("http://{addr}/");
    let mut args = vec![
        "--http2-prior-knowledge",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ];
    let headers: Vec<String> = (0..120).map(|i| format!("x-h{i}: v")).collect();
    for h in &headers {
        args.extend(["-H", h.as_str()]);
    }
    args.push(&url);
    let (ok, out, err) = curl(&args);
    assert!(ok, "{err}");
    assert_eq!(out, "431");
    still_serves(addr);
}

#[test]
fn floods_of_empty_or_tiny_data_frames_and_pings_are_bounded() {
    let _alone = alone();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = start(&rt, config());
    let before = rss();
    for mode in ["empty-data", "tiny-data", "ping"] {
        let r = peer(mode, addr);
        assert!(num(&r, "secs") < 30.0, "{mode}: {r:?}");
        if mode != "ping" {
            // `h2`'s budgets: ENHANCE_YOUR_CALM, the connection closed.
            assert_eq!(r["goaway"], "11", "{mode}: {r:?}");
        }
        assert!(
            rss() < before + (64 << 20),
            "{mode}: {} -> {}",
            before,
            rss()
        );
        still_serves(addr);
    }
}

#[test]
fn a_drain_past_its_deadline_cancels_the_handlers_of_its_h2_streams() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle) = start(&rt, config());
    let url = format!("http://{addr}/forever");
    let client = std::thread::spawn(move || curl(&["--http2-prior-knowledge", &url]));
    let waiting = Instant::now();
    while FOREVER_STARTED.load(Ordering::SeqCst) == 0 && waiting.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cancelled = rt.run(move || handle.drain(Instant::now() + Duration::from_millis(500)));
    assert_eq!(cancelled, 1);
    let started = Instant::now();
    while FOREVER_ENDED.load(Ordering::SeqCst) == 0 && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        FOREVER_ENDED.load(Ordering::SeqCst),
        1,
        "the handler was left running"
    );
    let (ok, _, _) = client.join().unwrap();
    assert!(!ok, "the cut stream is an error to its client");
}
