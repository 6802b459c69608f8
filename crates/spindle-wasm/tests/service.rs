//! WASI 0.3 (`wasi:http/service`) guests served by spindle-wasm, checked
//! with real HTTP clients: one instance serving many requests at once,
//! streaming bodies both ways, clock waits on an idle worker, outgoing
//! requests in parallel, CPU-bound guests beside small ones, deadlines,
//! traps and the guest's own backpressure.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{config, dechunk, get, guest, upstream};
use spindle::Runtime;
use spindle_wasm::{Host, HostConfig, World};

/// Serves `name` like `common::serve`, and keeps a handle on the host for
/// its statistics.
fn serve_p3(name: &str, workers: usize, config: HostConfig) -> (Runtime, SocketAddr, Host) {
    let host = Host::new(&guest(name), config).expect("the guest compiles and links");
    assert_eq!(host.world(), World::Service, "{name} is a WASI 0.3 service");
    let rt = Runtime::builder().workers(workers).build().unwrap();
    let served = host.clone();
    let addr = rt.run(move || {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(move |req| served.handle(req)));
        addr
    });
    (rt, addr, host)
}

/// `n` GETs of `path` at once, from threads: (status, body) in order.
fn concurrently(addr: SocketAddr, path: &'static str, n: usize) -> Vec<(u16, String)> {
    let threads: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || get(addr, path, "")))
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Waits (bounded) until `cond` holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_committed_guest_is_told_apart_by_its_exports() {
    for name in ["hello", "echo", "sleep", "fetch", "burn", "relay"] {
        assert_eq!(World::of(&guest(name)), World::Proxy, "{name}");
    }
    for name in ["hello", "echo", "sleep", "fetch", "burn", "fanout", "gate"] {
        let name = format!("{name}-p3");
        assert_eq!(World::of(&guest(&name)), World::Service, "{name}");
    }
}

#[test]
fn p3_hello_with_curl_on_one_reused_instance() {
    let (_rt, addr, host) = serve_p3("hello-p3", 1, config());
    let url = format!("http://{addr}/");
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10", &url])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("content-length: 13"), "{text}");
    assert!(text.ends_with("Hello, World!"), "{text}");
    // Keep-alive, one after another: the same instance serves them all.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", &url, &url, &url, &url])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello, World!".repeat(4)
    );
    assert_eq!(host.instances_made(), 1);
    // Dropped after its idle second.
    eventually("the idle instance is dropped", || host.instances() == 0);
}

/// One raw request over a fresh connection: the whole answer.
fn raw(addr: SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_p3_request_without_a_usable_authority_is_a_400_and_costs_no_instance() {
    let (_rt, addr, host) = serve_p3("hello-p3", 1, config());
    // WASI 0.3 takes the authority from the URI alone: a `Host` that is no
    // authority cannot be handed on.
    for bad in ["bad host", "exa mple:80", "[::1", "host:port"] {
        let answer = raw(
            addr,
            &format!("GET / HTTP/1.1\r\nHost: {bad}\r\nConnection: close\r\n\r\n"),
        );
        assert!(answer.starts_with("HTTP/1.1 400"), "Host: {bad}: {answer}");
    }
    assert_eq!(
        host.instances_made(),
        0,
        "a refused request starts no instance"
    );
    // HTTP/1.0 without a `Host`: `localhost`, and the guest answers.
    let answer = raw(addr, "GET / HTTP/1.0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("Hello, World!"), "{answer}");
    // And the server serves on, a request with a long target among them.
    let long = format!("/{}", "p".repeat(3000));
    let answer = raw(
        addr,
        &format!("GET {long} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(get(addr, "/", "").0, 200);
}

#[test]
fn p3_echo_streams_a_3_mb_chunked_upload_back_byte_exact() {
    let (_rt, addr, _host) = serve_p3("echo-p3", 2, config());
    let dir = std::env::temp_dir().join(format!("spindle-echo-p3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "60",
            "-H",
            "transfer-encoding: chunked",
            "--data-binary",
            &format!("@{}", input.display()),
            &format!("http://{addr}/"),
        ])
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "the echo differs from the upload");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Full duplex over HTTP/1.1: the echo's head and the first piece reach
/// the client while it holds back the rest of its upload, then the rest
/// follows. (The connection used to wait for the request body's reader —
/// the pump fiber, parked on the client — before it sent the head.)
#[test]
fn a_p3_echo_answers_while_the_client_still_uploads() {
    use std::io::{Read, Write};
    let (_rt, addr, _host) = serve_p3("echo-p3", 1, config());
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("\r\n\r\n5\r\nhello\r\n") {
        let n = s
            .read(&mut buf)
            .expect("the head and the first piece come while the upload waits");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&seen).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    s.write_all(b"6\r\n world\r\n0\r\n\r\n").unwrap();
    while !seen.ends_with(b"0\r\n\r\n") {
        let n = s.read(&mut buf).expect("the echo ends");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).ends_with("6\r\n world\r\n0\r\n\r\n"));
}

/// A body the guest writes from a task of its own after answering: the
/// echo's, with no `Content-Length`, whole once the guest ends it or
/// streamed when it does not in time — either way complete, and the next
/// request on the connection answered after it; hello's, with one, goes
/// out whole with its head (one response each, never chunked) without
/// waiting for the guest to close its stream.
#[test]
fn p3_bodies_written_after_the_answer_go_out_complete_and_the_connection_goes_on() {
    let (_rt, addr, _host) = serve_p3("echo-p3", 1, config());
    let answers = raw(
        addr,
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world\
         POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye",
    );
    assert_eq!(answers.matches("HTTP/1.1 200").count(), 2, "{answers}");
    let bodies: String = answers
        .split("HTTP/1.1 200")
        .skip(1)
        .map(|r| {
            let body = &r[r.find("\r\n\r\n").expect("a head") + 4..];
            if r.contains("transfer-encoding: chunked") {
                dechunk(body)
            } else {
                body.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("|");
    assert_eq!(bodies, "hello world|bye", "{answers:?}");

    let (_rt, addr, _host) = serve_p3("hello-p3", 1, config());
    let answers = raw(
        addr,
        "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(answers.matches("HTTP/1.1 200").count(), 2, "{answers}");
    assert_eq!(
        answers.matches("content-length: 13\r\n").count(),
        2,
        "{answers}"
    );
    assert!(!answers.contains("transfer-encoding"), "{answers}");
    assert!(answers.ends_with("\r\n\r\nHello, World!"), "{answers:?}");
}

/// Many echoes at once on one worker, each over a keep-alive connection
/// (Python's http.client): the instance's loop is busy with the others
/// when a request fiber looks at its body, so it waits for the loop to
/// rest — and every body comes back whole, in order, on every connection,
/// each within seconds (a wait for a rest that never comes lasts until
/// the instance ends).
#[test]
fn concurrent_p3_echoes_on_one_worker_each_come_back_whole() {
    let (_rt, addr, _host) = serve_p3("echo-p3", 1, config());
    let script = format!(
        r#"
import http.client, threading
errors = []
def client(n):
    try:
        c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=5)
        for i in range(25):
            body = ("client %d request %d " % (n, i)).encode() * (1 + i % 5)
            c.request("POST", "/", body=body)
            r = c.getresponse()
            got = r.read()
            if r.status != 200 or got != body:
                errors.append((n, i, r.status, got[:40]))
                return
        c.close()
    except Exception as e:
        errors.append((n, repr(e)))
threads = [threading.Thread(target=client, args=(n,)) for n in range(40)]
for t in threads: t.start()
for t in threads: t.join()
print("ok" if not errors else errors[:3])
"#,
        port = addr.port()
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `tests/h2client.py MODE` against `addr` and returns its
/// `key=value` line.
fn h2client(mode: &str, addr: SocketAddr) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2client.py");
    let out = Command::new("python3")
        .args([script, mode, &addr.port().to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "h2client {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// WASI 0.3 over HTTP/2 (prior knowledge): the echo's first piece comes
/// back while the client holds the rest of its upload, and the stream
/// ends after the rest; forty echoes at once on one connection each come
/// back byte-exact; hello's two answers on one connection keep the
/// guest's `Content-Length`.
#[test]
fn p3_over_http2_streams_both_ways_and_multiplexes_one_connection() {
    let (_rt, addr, _host) = serve_p3("echo-p3", 1, config());
    assert_eq!(
        h2client("duplex", addr),
        "status=200 early=b'first piece\\n' body=b'first piece\\nsecond piece\\n' ended=1"
    );
    assert_eq!(h2client("streams", addr), "good=40 of=40 bad=[]");
    let (_rt, addr, _host) = serve_p3("hello-p3", 1, config());
    assert_eq!(
        h2client("hello", addr),
        "status1=200 length1=13 body1=b'Hello, World!' status3=200 length3=13 body3=b'Hello, World!'"
    );
}

#[test]
fn a_thousand_concurrent_p3_sleeps_on_one_worker_share_a_few_instances() {
    let (_rt, addr, host) = serve_p3("sleep-p3", 1, config());
    let clients = Runtime::builder().workers(1).build().unwrap();
    let started = Instant::now();
    let results = clients.run(move || {
        let handles: Vec<_> = (0..1000)
            .map(|_| {
                spindle::spawn(move || {
                    let c = spindle_http::Client::new().request_timeout(Duration::from_secs(30));
                    let r = c.get(&format!("http://{addr}/?ms=500")).unwrap();
                    (r.status().as_u16(), r.into_body().into_vec().unwrap())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let took = started.elapsed();
    assert!(results
        .iter()
        .all(|(s, b)| *s == 200 && b == b"slept 500 ms"));
    assert!(took < Duration::from_secs(5), "1000 sleeps took {took:?}");
    // 16 at once per instance: at most ⌈1000 / 16⌉ instances.
    let made = host.instances_made();
    assert!(made <= 63, "{made} instances for 1000 requests");
}

#[test]
fn a_p3_sleep_past_the_deadline_on_an_idle_worker_is_answered_at_the_deadline() {
    let (_rt, addr, host) = serve_p3("sleep-p3", 1, config().timeout(Duration::from_secs(1)));
    let started = Instant::now();
    let (status, body) = get(addr, "/?ms=3000", "");
    let took = started.elapsed();
    assert_eq!((status, body.as_str()), (504, "guest deadline exceeded\n"));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    // The expired request's instance takes no more work: a new one
    // serves the next request, and both are gone soon after.
    assert_eq!(get(addr, "/?ms=10", "").0, 200);
    assert_eq!(host.instances_made(), 2);
    eventually("both instances are dropped", || host.instances() == 0);
    assert_eq!(get(addr, "/?ms=10", "").0, 200);
}

#[test]
fn an_instance_past_one_deadline_takes_no_more_but_answers_its_other_requests() {
    let (_rt, addr, host) = serve_p3("sleep-p3", 1, config().timeout(Duration::from_secs(3)));
    let started = Instant::now();
    // A: sleeps past its deadline (t+3 s).
    let a = std::thread::spawn(move || get(addr, "/?ms=10000", ""));
    // B: joins A's instance at t+1.5 s and answers at t+3.5 s, after A
    // expired there.
    std::thread::sleep(Duration::from_millis(1500));
    let b = std::thread::spawn(move || get(addr, "/?ms=2000", ""));
    let (a_status, _) = a.join().unwrap();
    let a_took = started.elapsed();
    assert_eq!(a_status, 504);
    assert!(
        a_took >= Duration::from_millis(2900) && a_took < Duration::from_millis(4500),
        "A answered after {a_took:?}"
    );
    assert_eq!(host.instances_made(), 1, "B shared A's instance");
    // C, after A's deadline: not given to the instance A expired on.
    assert_eq!(get(addr, "/?ms=10", ""), (200, "slept 10 ms".into()));
    assert_eq!(host.instances_made(), 2);
    // B still gets its answer from the expired instance.
    assert_eq!(b.join().unwrap(), (200, "slept 2000 ms".into()));
    // Then that instance goes (A's guest task is still asleep in it), and
    // the other one at its idle timeout.
    eventually("both instances are dropped", || host.instances() == 0);
    assert_eq!(get(addr, "/?ms=10", "").0, 200);
}

static UPSTREAM_NOW: AtomicUsize = AtomicUsize::new(0);
static UPSTREAM_MOST: AtomicUsize = AtomicUsize::new(0);

#[test]
fn the_fanout_guests_three_outgoing_requests_are_in_flight_together() {
    let (_up_rt, up) = upstream(|req| {
        let now = UPSTREAM_NOW.fetch_add(1, Ordering::SeqCst) + 1;
        UPSTREAM_MOST.fetch_max(now, Ordering::SeqCst);
        spindle::time::sleep(Duration::from_millis(300));
        UPSTREAM_NOW.fetch_sub(1, Ordering::SeqCst);
        let query = req.uri().query().unwrap_or("").to_string();
        spindle_http::Response::new(spindle_http::Body::from(query))
    });
    let config = config().allow_outbound(&up.to_string()).unwrap();
    let (_rt, addr, _host) = serve_p3("fanout-p3", 1, config);
    let header = format!("x-fetch-url: http://{up}/part\r\n");
    let started = Instant::now();
    let (status, body) = get(addr, "/", &header);
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "200 i=0\n200 i=1\n200 i=2\n");
    assert_eq!(UPSTREAM_MOST.load(Ordering::SeqCst), 3, "not all at once");
    assert!(took < Duration::from_millis(800), "took {took:?}");
}

#[test]
fn p3_fetch_goes_out_through_the_allow_list() {
    let (_up_rt, up) = upstream(|_| spindle_http::Response::new("from upstream".into()));
    let config = config().allow_outbound(&up.to_string()).unwrap();
    let (_rt, addr, _host) = serve_p3("fetch-p3", 1, config);
    let header = format!("x-fetch-url: http://{up}/\r\n");
    assert_eq!(
        get(addr, "/", &header),
        (200, "upstream 200: from upstream".to_string())
    );
    // Not on the list: the guest sees HttpRequestDenied.
    let (status, body) = get(addr, "/", "x-fetch-url: http://127.0.0.1:9/\r\n");
    assert_eq!(status, 502);
    assert!(body.contains("HttpRequestDenied"), "{body}");
}

/// Sends `GET path` on a fresh connection to `addr` and reads until the
/// response head is in: the connection, the head (lowercased) and the
/// bytes read past it.
fn read_head(addr: SocketAddr, path: &str) -> (std::net::TcpStream, String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let k = s.read(&mut buf).expect("the head");
        assert!(k > 0, "closed before the head: {got:?}");
        got.extend_from_slice(&buf[..k]);
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    (s, head, got[end..].to_vec())
}

/// Reads the rest of a chunked body after `got` and returns it decoded.
fn read_chunked(mut s: std::net::TcpStream, mut got: Vec<u8>) -> String {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"0\r\n\r\n") {
        let k = s.read(&mut buf).expect("the body");
        assert!(k > 0, "closed mid-body: {got:?}");
        got.extend_from_slice(&buf[..k]);
    }
    dechunk(&String::from_utf8_lossy(&got))
}

fn computing_guest() -> (Runtime, SocketAddr) {
    let config = config()
        .fuel_limit(u64::MAX / 4)
        .timeout(Duration::from_secs(60));
    let (rt, addr, _host) = serve_p3("burn-p3", 1, config);
    (rt, addr)
}

#[test]
fn a_p3_guest_that_answers_then_computes_has_its_head_out_while_it_computes() {
    // The guest returns its response and, after one yield (which ends its
    // turn: the host has the answer), computes in the task that writes the
    // body. The loop rests with the guest computing, and the request fiber
    // takes that as "nothing more soon": the head goes out now, chunked,
    // and the checksum when the computation is done. Without the computing
    // rests the fiber would wait for the idle rest after the computation,
    // and the head would come with the body.
    let (_rt, addr) = computing_guest();
    let n = 400_000_000u64;
    let (mut s, head, past) = read_head(addr, &format!("/?after=1&yield=1&n={n}"));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(past.is_empty(), "the body came with the head: {past:?}");
    // Still computing: nothing more for a while (it takes most of a second).
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut one = [0u8; 1];
    let err =
        std::io::Read::read(&mut s, &mut one).expect_err("the body came right after the head");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = read_chunked(s, past);
    assert!(body.starts_with(&format!("burned {n}: ")), "{body}");
}

#[test]
fn a_p3_answer_that_comes_out_of_a_computing_loop_streams_without_another_rest() {
    // Without the yield, the answer reaches the host only when the guest's
    // turn ends, after the computation (`wasmtime serve` 48.0.8 sends the
    // head no earlier), and the loop, still counting the guest as
    // computing, rests as that turn ends. The request fiber, woken past its
    // mark by that rest, takes the piece written and streams the rest at
    // once (chunked, no length) instead of waiting for the stream's close.
    // Without the computing rests it waits for the idle rest after the
    // close and sends the body whole, with a Content-Length.
    let (_rt, addr) = computing_guest();
    let n = 100_000_000u64;
    let (s, head, past) = read_head(addr, &format!("/?after=1&n={n}"));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("transfer-encoding: chunked"),
        "sent whole: {head}"
    );
    assert!(!head.contains("content-length"), "sent whole: {head}");
    let body = read_chunked(s, past);
    assert!(body.starts_with(&format!("burned {n}: ")), "{body}");
}

#[test]
fn a_p3_burn_does_not_stop_a_small_request_on_another_instance_of_the_worker() {
    let config = config()
        .fuel_limit(u64::MAX / 4)
        .timeout(Duration::from_secs(60));
    let (_rt, addr, host) = serve_p3("burn-p3", 1, config);
    let burn = std::thread::spawn(move || get(addr, "/?n=2000000000", ""));
    std::thread::sleep(Duration::from_millis(300)); // burning now
    let started = Instant::now();
    let (status, body) = get(addr, "/?n=1", "");
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(!burn.is_finished(), "the burn should still be running");
    assert!(
        took < Duration::from_secs(2),
        "waited {took:?} behind a burn"
    );
    // The burning instance was computing: the small one got its own.
    assert_eq!(host.instances_made(), 2);
    assert_eq!(burn.join().unwrap().0, 200);
}

/// The instance serial and most-in-flight a gate-p3 answer reports.
fn gate_answer(body: &str) -> (usize, String) {
    let mut words = body.split_whitespace();
    assert_eq!(words.next(), Some("most"), "{body}");
    let most = words.next().unwrap().parse().unwrap();
    assert_eq!(words.next(), Some("instance"), "{body}");
    (most, words.next().unwrap().to_string())
}

#[test]
fn waiting_requests_interleave_on_one_instance_unless_the_guest_pushes_back() {
    let (_rt, addr, _host) = serve_p3("gate-p3", 1, config());
    // Without backpressure the four wait together in one instance.
    let answers = concurrently(addr, "/slow?ms=400", 4);
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let most = answers.iter().map(|(_, b)| gate_answer(b).0).max().unwrap();
    assert!(most > 1, "never interleaved: {answers:?}");

    // With it on while each waits, the host never starts a second call on
    // a gated instance: every request finds an instance to itself.
    let (_rt2, addr2, host2) = serve_p3("gate-p3", 1, config());
    let answers = concurrently(addr2, "/slow?gate=1&ms=400", 4);
    let parsed: Vec<_> = answers
        .iter()
        .map(|(s, b)| {
            assert_eq!(*s, 200, "{b}");
            gate_answer(b)
        })
        .collect();
    assert!(parsed.iter().all(|(most, _)| *most == 1), "{answers:?}");
    let serials: HashSet<_> = parsed.iter().map(|(_, s)| s.clone()).collect();
    assert_eq!(serials.len(), 4, "{answers:?}");
    assert_eq!(host2.instances_made(), 4);
}

#[test]
fn instance_concurrency_1_serves_one_request_at_a_time_per_instance() {
    let config = config().instance_concurrency(1);
    let (_rt, addr, host) = serve_p3("gate-p3", 1, config);
    let answers = concurrently(addr, "/slow?ms=300", 3);
    assert!(
        answers
            .iter()
            .all(|(s, b)| *s == 200 && gate_answer(b).0 == 1),
        "{answers:?}"
    );
    assert_eq!(host.instances_made(), 3);
    // And a reuse limit of 1: a fresh instance for each request.
    let config = self::config().instance_reuse(1);
    let (_rt2, addr2, host2) = serve_p3("hello-p3", 1, config);
    for _ in 0..3 {
        assert_eq!(get(addr2, "/", "").0, 200);
    }
    assert_eq!(host2.instances_made(), 3);
}

#[test]
fn a_trap_fails_the_requests_of_its_instance_and_the_next_go_to_a_new_one() {
    let (_rt, addr, host) = serve_p3("gate-p3", 1, config());
    let (_, first) = get(addr, "/slow?ms=1", "");
    let (_, before) = gate_answer(&first);
    // Two requests waiting in the instance, then a trap in the same one.
    let waiting: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get(addr, "/slow?ms=1500", "")))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(addr, "/trap", "").0, 500);
    for w in waiting {
        assert_eq!(w.join().unwrap().0, 500, "an in-flight request survived");
    }
    let (status, next) = get(addr, "/slow?ms=1", "");
    assert_eq!(status, 200);
    let (_, after) = gate_answer(&next);
    assert_ne!(before, after, "served by the trapped instance");
    assert_eq!(host.instances_made(), 2);
}

#[test]
fn computing_requests_past_the_instance_limit_wait_for_room_instead_of_failing() {
    // 100 requests at 16 per instance: 2 × 7 + 16 = 30 instance slots.
    let config = config()
        .max_concurrent(100)
        .fuel_limit(u64::MAX / 4)
        .timeout(Duration::from_secs(60));
    let (_rt, addr, host) = serve_p3("burn-p3", 1, config);
    let most = std::sync::Arc::new(AtomicUsize::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (most, done, host) = (most.clone(), done.clone(), host.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(host.instances(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // Each computes alone in its instance (a computing instance takes no
    // more), so 40 of them need more instances than there are slots.
    let answers = concurrently(addr, "/?n=20000000", 40);
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let most = most.load(Ordering::Relaxed);
    eprintln!("most instances alive at once: {most}");
    assert!(most <= 30, "{most} instances alive at once");
    assert!(most > 1, "the burns never spread over instances");
}
