//! The HTTP/1.1 server against real peers: curl, Python's http.client, and
//! raw sockets for malformed and smuggling requests.

mod common;

use common::{python, raw};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use spindle::Runtime;
use spindle_http::{Body, Request, Response, Server, ServerConfig};

/// Echoes method, path and body length; `/panic` panics; `/stream` streams.
fn handler(req: Request<Body>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().to_string();
    if path == "/panic" {
        panic!("handler boom");
    }
    if path == "/stream" {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i as u8).to_le_bytes())
            .collect();
        return Response::new(Body::from_reader(std::io::Cursor::new(data)));
    }
    if path == "/bytes" {
        // `?n=N`: N bytes, `i % 251` each, streamed (chunked).
        let n: usize = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("n="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        return Response::new(Body::from_reader(std::io::Cursor::new(data)));
    }
    if path == "/nocontent" {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = spindle_http::StatusCode::NO_CONTENT;
        return r;
    }
    if path == "/worker" {
        return Response::new(Body::from(spindle::worker_id().unwrap().to_string()));
    }
    if path == "/sleep" {
        spindle::time::sleep(Duration::from_millis(50));
    }
    if path == "/slow" {
        spindle::time::sleep(Duration::from_millis(300));
    }
    if path == "/forever" {
        spindle::time::sleep(Duration::from_secs(60));
    }
    let mut body = Vec::new();
    let read = req.into_body().read_to_end(&mut body);
    let text = match read {
        Ok(_) => format!("{method} {path} {}", body.len()),
        Err(e) => format!("{method} {path} error {e}"),
    };
    Response::new(Body::from(text))
}

fn start(rt: &Runtime, config: ServerConfig) -> SocketAddr {
    start_with(rt, config, handler)
}

/// A server with `config` serving `handler` on `rt`; its address.
fn start_with<H>(rt: &Runtime, config: ServerConfig, handler: H) -> SocketAddr
where
    H: Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static,
{
    serve_on(rt, config, handler).0
}

/// A server with `config` serving `handler` on `rt`; its address and
/// handle.
fn serve_on(
    rt: &Runtime,
    config: ServerConfig,
    handler: impl Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static,
) -> (SocketAddr, spindle_http::ServerHandle) {
    rt.run(move || {
        let server = Server::bind("127.0.0.1:0").unwrap().config(config);
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        spindle::spawn(move || server.serve(handler));
        (addr, handle)
    })
}

fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"))
}

#[test]
fn curl_get_head_post_and_chunked_download() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let url = format!("http://{addr}");
    let out = Command::new("curl")
        .args(["-s", "-i", &format!("{url}/hello")])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.to_ascii_lowercase().contains("\ndate: "), "{text}");
    assert!(text.ends_with("GET /hello 0"), "{text}");
    let head = Command::new("curl")
        .args(["-s", "-I", &url])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout);
    assert!(
        head.contains("content-length: 8"),
        "HEAD keeps the length of \"HEAD / 0\": {head}"
    );
    // A body big enough that curl sends `Expect: 100-continue`.
    let big = std::env::temp_dir().join(format!("spindle-http-big-{}", std::process::id()));
    std::fs::write(&big, "x".repeat(200_000)).unwrap();
    let big = format!("@{}", big.display());
    let post = Command::new("curl")
        .args(["-s", "--data-binary", &big, &format!("{url}/up")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&post.stdout), "POST /up 200000");
    let chunked = Command::new("curl")
        .args([
            "-s",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &big,
            &format!("{url}/c"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&chunked.stdout), "POST /c 200000");
    let _ = std::fs::remove_file(big.trim_start_matches('@'));
    let stream = Command::new("curl")
        .args(["-s", "-o", "-", &format!("{url}/stream")])
        .output()
        .unwrap();
    let want: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    assert_eq!(stream.stdout, want, "chunked download, de-chunked by curl");
}

#[test]
fn python_keep_alive_chunked_upload_and_http10() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let out = python(&format!(
        r#"
import http.client
c = http.client.HTTPConnection("{ip}", {port}, timeout=5)
for i in range(3):
    c.request("GET", "/k%d" % i)
    r = c.getresponse()
    print(r.status, r.read().decode())
c.request("POST", "/p", body=b"a" * 5000)
print(c.getresponse().read().decode())
c.request("POST", "/ch", body=iter([b"abc", b"defg"]), encode_chunked=True)
print(c.getresponse().read().decode())
c.close()
"#,
        ip = addr.ip(),
        port = addr.port()
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "200 GET /k0 0",
            "200 GET /k1 0",
            "200 GET /k2 0",
            "POST /p 5000",
            "POST /ch 7"
        ]
    );
    // HTTP/1.0: answered, then closed.
    let r = raw(addr, b"GET /old HTTP/1.0\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("connection: close"), "{r}");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let r = raw(
        addr,
        b"GET /sleep HTTP/1.1\r\nHost: a\r\n\r\nPOST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyzGET /three HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let a = r.find("GET /sleep 0").expect("first");
    let b = r.find("POST /two 3").expect("second");
    let c = r.find("GET /three 0").expect("third");
    assert!(a < b && b < c, "{r}");
}

/// A response's header map, emptied, becomes the next pipelined request's:
/// nothing of the response may show in that request, and a response
/// whose map grew large is not the one handed on.
#[test]
fn a_pipelined_request_sees_only_its_own_headers() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start_with(&rt, ServerConfig::default(), |req: Request<Body>| {
        let mut seen: Vec<String> = req.headers().keys().map(|k| k.to_string()).collect();
        seen.sort();
        let mut r = Response::new(Body::from(format!("[{}]", seen.join(","))));
        let many = if req.uri().path() == "/many" { 100 } else { 1 };
        for i in 0..many {
            r.headers_mut().insert(
                http::HeaderName::from_bytes(format!("x-leak-{i}").as_bytes()).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        r
    });
    let mut pipelined = Vec::new();
    for path in ["/a", "/many", "/b", "/c"] {
        pipelined.extend_from_slice(
            format!("GET {path} HTTP/1.1\r\nHost: a\r\nX-Mine: 1\r\n\r\n").as_bytes(),
        );
    }
    pipelined.extend_from_slice(b"GET /d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let r = raw(addr, &pipelined);
    assert_eq!(r.matches("[host,x-mine]").count(), 4, "{r}");
    assert_eq!(r.matches("[connection,host]").count(), 1, "{r}");
    assert!(!r.contains("[x-leak") && !r.contains(",x-leak"), "{r}");
}

/// The sender reads a streamed body straight into the buffer each chunk
/// goes out from, which starts small and grows: every size around its
/// steps must arrive whole and correctly framed to a strict client.
#[test]
fn streamed_bodies_of_every_size_around_the_buffer_steps_arrive_byte_exact() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let out = python(&format!(
        r#"
import http.client
c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=10)
for n in [1, 2047, 2048, 2049, 4096, 4097, 16383, 16384, 16385, 100000]:
    c.request("GET", "/bytes?n=%d" % n)
    r = c.getresponse()
    body = r.read()
    assert r.getheader("transfer-encoding") == "chunked", r.getheaders()
    assert body == bytes(i % 251 for i in range(n)), (n, len(body))
print("ok")
"#,
        port = addr.port()
    ));
    assert_eq!(out.trim(), "ok");
}

/// The read buffer grows for a head bigger than it, keeps a pipelined
/// request's bytes across a handler call, and reassembles heads that
/// arrive a few bytes at a time.
#[test]
fn a_head_bigger_than_the_read_buffer_and_dripped_pipelined_heads_parse() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let big = format!(
        "GET /big HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20_000)
    );
    for piece in big.as_bytes().chunks(1500) {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    // Two more requests in one write (pipelined), then a third dripped.
    s.write_all(b"GET /p1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /p2 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhel")
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(b"lo").unwrap();
    for b in b"GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let r = String::from_utf8_lossy(&out);
    let at = |what: &str| r.find(what).unwrap_or_else(|| panic!("no {what:?} in {r}"));
    assert!(at("GET /big 0") < at("GET /p1 0"));
    assert!(at("GET /p1 0") < at("POST /p2 5"));
    assert!(at("POST /p2 5") < at("GET /last 0"));
    assert_eq!(r.matches("HTTP/1.1 200").count(), 4, "{r}");
}

#[test]
fn malformed_and_smuggling_requests_get_the_right_status_while_others_are_served() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    // A keep-alive client keeps working throughout: its last request is
    // made after the corpus is done (it looks at `stop` after each), so it
    // makes at least one however late its thread starts.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let healthy = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut n = 0;
        loop {
            let last = s2.load(std::sync::atomic::Ordering::Relaxed);
            s.write_all(b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            let mut got = Vec::new();
            while !String::from_utf8_lossy(&got).ends_with("GET /ok 0") {
                let mut buf = [0u8; 512];
                let k = s.read(&mut buf).unwrap();
                assert!(k > 0, "the healthy connection was closed");
                got.extend_from_slice(&buf[..k]);
            }
            n += 1;
            if last {
                return n;
            }
        }
    });
    // Each with a `Host`, so each is refused for its own rule.
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 << 10)
    );
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(70 << 10));
    let many_headers: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{many_headers}\r\n");
    let corpus: Vec<(&str, Vec<u8>, u16)> = vec![
        ("garbage", b"GARBAGE\r\n\r\n".to_vec(), 400),
        ("bad method char", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), 400),
        ("bad header name", b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n".to_vec(), 400),
        ("http/2.0", b"GET / HTTP/2.0\r\n\r\n".to_vec(), 505),
        ("cl + te", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400),
        ("two different cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec(), 400),
        ("cl list of equal values", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc".to_vec(), 400),
        ("non-numeric cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n".to_vec(), 400),
        ("signed cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc".to_vec(), 400),
        ("te gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(), 400),
        ("te chunked twice", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400),
        ("bad chunk size", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n".to_vec(), 400),
        ("huge head", big_header.into_bytes(), 431),
        ("uri too long", long_uri.into_bytes(), 414),
        ("too many headers", many.into_bytes(), 431),
        ("body too large", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999\r\n\r\n".to_vec(), 413),
        // RFC 9112 §3.2: which host a request is for is never a guess.
        ("no host in 1.1", b"GET / HTTP/1.1\r\n\r\n".to_vec(), 400),
        ("two hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(), 400),
        ("host with userinfo", b"GET / HTTP/1.1\r\nHost: evil@a\r\n\r\n".to_vec(), 400),
        ("host with a bad port", b"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n".to_vec(), 400),
    ];
    for (what, request, want) in corpus {
        let r = raw(addr, &request);
        assert_eq!(status_of(&r), want, "{what}: {r:?}");
        assert!(
            r.contains("connection: close"),
            "{what}: closed after an error"
        );
    }
    // A panicking handler: 500 for that request, the server goes on.
    let r = raw(addr, b"GET /panic HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status_of(&r), 500);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(healthy.join().unwrap() > 0);
}

#[test]
fn a_slowloris_peer_is_closed_at_the_header_timeout() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(
        &rt,
        ServerConfig::default().header_read_timeout(Duration::from_millis(300)),
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let start = Instant::now();
    s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        if s.write_all(b"a").is_err() {
            break;
        }
    }
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn five_thousand_concurrent_keep_alive_connections() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let mut conns: Vec<TcpStream> = (0..5000)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    for round in 0..2 {
        for s in conns.iter_mut() {
            s.write_all(format!("GET /r{round} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
                .unwrap();
        }
        for s in conns.iter_mut() {
            read_until_it_ends_with(s, &format!("GET /r{round} 0"));
        }
    }
}

#[test]
fn drain_closes_idle_connections_finishes_in_flight_and_cancels_the_rest() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle) = rt.run(|| {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        spindle::spawn(move || server.serve(handler));
        (addr, handle)
    });
    // An idle keep-alive connection.
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    idle.write_all(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    assert!(idle.read(&mut buf).unwrap() > 0);
    // A request in flight (300 ms) and one that would take a minute.
    let slow = std::thread::spawn(move || raw(addr, b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"));
    let forever =
        std::thread::spawn(move || raw(addr, b"GET /forever HTTP/1.1\r\nHost: a\r\n\r\n"));
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let h = handle.clone();
    let cancelled = rt.run(move || h.drain(Instant::now() + Duration::from_millis(800)));
    assert_eq!(
        cancelled, 1,
        "only the minute-long request outlived the deadline"
    );
    assert!(start.elapsed() < Duration::from_secs(3));
    // The idle connection was closed at once.
    assert_eq!(idle.read(&mut buf).unwrap_or(0), 0);
    // The in-flight one got its answer, with `connection: close`.
    let r = slow.join().unwrap();
    assert!(
        r.contains("GET /slow 0") && r.contains("connection: close"),
        "{r}"
    );
    let _ = forever.join().unwrap();
    assert_eq!(handle.connections(), 0);
    // No longer accepting.
    std::thread::sleep(Duration::from_millis(50));
    let refused = TcpStream::connect(addr).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET / HTTP/1.1\r\n\r\n")?;
        let mut b = [0u8; 16];
        s.read(&mut b)
    });
    assert!(matches!(refused, Err(_) | Ok(0)), "{refused:?}");
}

/// Reads one keep-alive response: until what arrived ends with `want`.
fn read_until_it_ends_with(s: &mut TcpStream, want: &str) {
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).ends_with(want) {
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Many idle keep-alive connections at once: `drain` cancels them all,
/// and each one's exit unregisters it even though its fiber is cancelled
/// and the registry is busy (other exits, the drain itself). An exit that
/// had to wait for the registry's lock was unwound by the cancel, and its
/// connection stayed counted: `drain` waited for its deadline and reported
/// the closed connections as cancelled.
#[test]
fn draining_hundreds_of_idle_connections_leaves_none_counted() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle, served) = rt.run(|| {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        (addr, handle, spindle::spawn(move || server.serve(handler)))
    });
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|i| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(format!("GET /i{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
                .unwrap();
            s
        })
        .collect();
    for (i, s) in idle.iter_mut().enumerate() {
        read_until_it_ends_with(s, &format!("GET /i{i} 0"));
    }
    assert_eq!(handle.connections(), 300);
    let start = Instant::now();
    let h = handle.clone();
    let cancelled = rt.run(move || h.drain(Instant::now() + Duration::from_secs(5)));
    assert_eq!(
        cancelled, 0,
        "idle connections close at once, none is cut off"
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(handle.connections(), 0);
    for s in &mut idle {
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    }
    rt.run(move || served.join().unwrap()).unwrap();
}

/// Python keep-alive clients against each accept mode on two workers:
/// which worker answered each request of each connection.
fn workers_seen(mode: spindle::net::AcceptMode) -> Vec<Vec<u8>> {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handle, served) = rt.run(move || {
        let server = Server::bind_with("127.0.0.1:0", mode).unwrap();
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        (addr, handle, spindle::spawn(move || server.serve(handler)))
    });
    let out = python(&format!(
        r#"
import http.client
conns = [http.client.HTTPConnection("127.0.0.1", {port}, timeout=10) for _ in range(40)]
seen = [[] for _ in conns]
for _ in range(3):
    for i, c in enumerate(conns):
        c.request("GET", "/worker")
        r = c.getresponse()
        assert r.status == 200
        seen[i].append(r.read().decode())
for s in seen:
    print(" ".join(s))
"#,
        port = addr.port()
    ));
    // Drain stops every accept loop, and `serve` returns.
    let cancelled = rt.run(move || handle.drain(Instant::now() + Duration::from_secs(2)));
    assert_eq!(cancelled, 0);
    rt.run(move || served.join().unwrap()).unwrap();
    out.lines()
        .map(|l| l.split(' ').map(|w| w.parse().unwrap()).collect())
        .collect()
}

fn per_worker(seen: &[Vec<u8>]) -> [usize; 2] {
    let mut n = [0; 2];
    for s in seen {
        assert!(s.iter().all(|&w| w == s[0]), "a connection moved: {s:?}");
        n[s[0] as usize] += 1;
    }
    n
}

#[test]
fn round_robin_accept_deals_python_connections_evenly_and_each_stays() {
    let seen = workers_seen(spindle::net::AcceptMode::RoundRobin);
    assert_eq!(per_worker(&seen), [20, 20]);
}

#[test]
fn per_worker_accept_serves_each_connection_where_it_was_accepted() {
    let seen = workers_seen(spindle::net::AcceptMode::PerWorker);
    let n = per_worker(&seen);
    assert!(
        n[0] > 0 && n[1] > 0,
        "one worker's listener got nothing: {n:?}"
    );
}

#[test]
fn public_smuggling_payloads_get_one_answer_and_the_smuggled_request_none() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let chunked = |body: &str| {
        format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{body}{smuggled}")
    };
    let corpus: Vec<(&str, String)> = vec![
        ("chunk size with a plus sign", chunked("+5\r\nhello\r\n0\r\n\r\n")),
        ("chunk size after a space", chunked(" 5\r\nhello\r\n0\r\n\r\n")),
        ("chunk size in 0x form", chunked("0x5\r\nhello\r\n0\r\n\r\n")),
        ("bare LF in a chunk extension", chunked("5;a\nb\r\nhello\r\n0\r\n\r\n")),
        ("bare CR in a chunk extension", chunked("5;a\rb\r\nhello\r\n0\r\n\r\n")),
        ("17-digit chunk size", chunked("00000000000000005\r\nhello\r\n0\r\n\r\n")),
        ("trailer without a colon", chunked("0\r\nnot a field\r\n\r\n")),
        ("trailer with an empty name", chunked("0\r\n: x\r\n\r\n")),
        (
            "HTTP/1.0 with chunked and keep-alive",
            format!(
                "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "codings that do not end in chunked",
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "a length list that disagrees",
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\nab{smuggled}"),
        ),
    ];
    for (what, request) in corpus {
        let r = raw(addr, request.as_bytes());
        assert_eq!(
            r.matches("HTTP/1.1 ").count(),
            1,
            "{what}: one answer only: {r:?}"
        );
        assert_eq!(status_of(&r), 400, "{what}: {r:?}");
        assert!(
            !r.contains("/smuggled"),
            "{what}: the smuggled request was served: {r:?}"
        );
    }
    // Valid extensions and trailers still work.
    let r = raw(
        addr,
        b"POST /ok HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;name=v\r\nhello\r\n0\r\nx-sum: 1\r\n\r\n",
    );
    assert_eq!(status_of(&r), 200, "{r:?}");
    assert!(r.ends_with("POST /ok 5"), "{r:?}");
}

#[test]
fn connection_close_in_a_list_closes_and_a_204_has_no_framing() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    // `raw` reads to the end: it returns only because the server closes.
    let r = raw(
        addr,
        b"GET /ok HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n",
    );
    assert_eq!(status_of(&r), 200);
    assert!(r.contains("connection: close"), "{r:?}");
    let r = raw(
        addr,
        b"GET /nocontent HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&r), 204, "{r:?}");
    let head = r.to_ascii_lowercase();
    assert!(
        !head.contains("content-length") && !head.contains("transfer-encoding"),
        "a 204 carries no framing headers: {r:?}"
    );
    // Node's fetch waited for a body after a 204 with content-length; curl
    // must finish at once and see no body.
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("http://{addr}/nocontent"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "204");
}

#[test]
fn a_client_still_sending_its_body_reads_the_error_status_instead_of_a_reset() {
    // 413 for a body over the limit, and 400 for a malformed chunked body,
    // while the client keeps writing the rest of its upload: the server
    // shuts down its side and drains before it closes, so the client's
    // writes go through and it reads the status, then EOF — not a reset.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default().max_body_bytes(64 << 10));
    let cases: [(&[u8], u16); 2] = [
        (
            b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 200000\r\n\r\n",
            413,
        ),
        (
            b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
    ];
    for (head, want) in cases {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head).unwrap();
        let mut writer = s.try_clone().unwrap();
        let upload = std::thread::spawn(move || {
            // 200 KB more, in pieces, as an upload would.
            let piece = [b'a'; 10_000];
            (0..20).try_for_each(|_| writer.write_all(&piece))
        });
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(read.is_ok(), "the client got {read:?} after {text:?}");
        assert_eq!(status_of(&text), want, "{text}");
        assert!(upload.join().unwrap().is_ok(), "the upload was reset");
    }
    // The server goes on serving.
    assert_eq!(
        status_of(&raw(
            addr,
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )),
        200
    );
}

#[test]
fn a_client_dripping_its_body_is_cut_off_at_the_body_deadline() {
    // One byte every 100 ms: each read is well within the per-read
    // timeout, but the body deadline (1 s) ends the request with 408.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(
        &rt,
        ServerConfig::default()
            .body_read_timeout(Duration::from_secs(5))
            .body_deadline(Duration::from_secs(1)),
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n")
        .unwrap();
    let mut writer = s.try_clone().unwrap();
    let drip = std::thread::spawn(move || {
        for _ in 0..1000 {
            std::thread::sleep(Duration::from_millis(100));
            if writer.write_all(b"x").is_err() {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(status_of(&text), 408, "{text}");
    // A bound for the hang this catches (the drip would take 100 s).
    assert!(started.elapsed() < Duration::from_secs(15));
    drop(s);
    drip.join().unwrap();
}

#[test]
fn a_2xx_to_connect_has_no_framing_and_nothing_after_it_is_read_as_http() {
    // RFC 9110 §9.3.6: no Content-Length or Transfer-Encoding in a 2xx to
    // CONNECT; the connection would be a tunnel, which a handler cannot
    // take over here, so it closes: the pipelined request behind the
    // CONNECT is never answered.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    let text = raw(
        addr,
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\
          GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(status_of(&text), 200, "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(!lower.contains("content-length"), "{text}");
    assert!(!lower.contains("transfer-encoding"), "{text}");
    assert_eq!(
        text.matches("HTTP/1.1").count(),
        1,
        "one response only: {text}"
    );
    assert!(!text.contains("/smuggled"), "{text}");
}

#[test]
fn expect_100_continue_gets_exactly_one_interim_response() {
    // A client that waits for 100 before its body, to a handler that reads
    // the body (the reader sends the 100) and to one that streams its
    // answer first (the response path sends it): one 100 each time.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, ServerConfig::default());
    for path in ["/up", "/stream"] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\
             Connection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut first = [0u8; 25];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n", "{path}");
        s.write_all(b"hello").unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let rest = String::from_utf8_lossy(&rest).into_owned();
        assert!(
            !rest.contains("100 Continue"),
            "{path}: a second 100 in {rest}"
        );
        assert_eq!(status_of(&rest), 200, "{path}: {rest}");
    }
}

/// Full duplex: a handler whose own fiber reads the request body while the
/// response streams what it has read. The head and the first piece reach
/// the client while it holds back the rest of its upload (the connection
/// does not wait for the body's reader, parked on the client, before it
/// answers); with `Expect: 100-continue`, exactly one 100 first (the
/// reader's).
#[test]
fn a_response_streams_while_another_fiber_still_reads_the_upload() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start_with(&rt, ServerConfig::default(), |req| {
        let (tx, rx) = spindle::chan::bounded::<Vec<u8>>(4);
        let mut body = req.into_body();
        spindle::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok(n) = body.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        /// The pieces the reading fiber sends, as a reader.
        struct Pieces(spindle::chan::Receiver<Vec<u8>>, Vec<u8>);
        impl Read for Pieces {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.1.is_empty() {
                    match self.0.recv() {
                        Ok(piece) => self.1 = piece,
                        Err(_) => return Ok(0),
                    }
                }
                let n = self.1.len().min(out.len());
                out[..n].copy_from_slice(&self.1[..n]);
                self.1.drain(..n);
                Ok(n)
            }
        }
        // The first piece before answering: the reader is then back in a
        // read, waiting for the client, as a guest's body pump is.
        let first = rx.recv().unwrap_or_default();
        Response::new(Body::from_reader(Pieces(rx, first)))
    });
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head =
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n{expect}\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        // A client that expects 100 waits for it before its body.
        while !expect.is_empty() && !String::from_utf8_lossy(&seen).contains("100 Continue\r\n\r\n")
        {
            let n = s.read(&mut buf).expect("a 100 before the body");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"5\r\nhello\r\n").unwrap();
        while !String::from_utf8_lossy(&seen).contains("5\r\nhello\r\n") {
            let n = s
                .read(&mut buf)
                .expect("the head and the first piece come while the upload waits");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"6\r\n world\r\n0\r\n\r\n").unwrap();
        while !seen.ends_with(b"0\r\n\r\n") {
            let n = s.read(&mut buf).expect("the echo ends");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&seen).into_owned();
        assert_eq!(
            text.matches("100 Continue").count(),
            usize::from(!expect.is_empty()),
            "{text}"
        );
        assert!(text.contains("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.ends_with("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "{text:?}"
        );
    }
}

/// A handler that waits on [`spindle_http::ClientGone`] for up to 5 s and
/// says whether its client left, through `left`; it answers "stayed".
fn watching_server(rt: &Runtime, left: std::sync::mpsc::Sender<bool>) -> SocketAddr {
    let left = std::sync::Mutex::new(left);
    rt.run(move || {
        let server = Server::bind("127.0.0.1:0")
            .unwrap()
            .config(ServerConfig::default().watch_client_gone(true));
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || {
            server.serve(move |req: Request<Body>| {
                let gone = req
                    .extensions()
                    .get::<spindle_http::ClientGone>()
                    .expect("the watch is on")
                    .wait();
                let went = spindle::block_on(async {
                    let mut gone = std::pin::pin!(gone);
                    let mut patience = std::pin::pin!(spindle::time::sleep_future(
                        Duration::from_millis(if req.uri().path() == "/quick" {
                            500
                        } else {
                            5000
                        })
                    ));
                    std::future::poll_fn(|cx| {
                        use std::future::Future;
                        if gone.as_mut().poll(cx).is_ready() {
                            return std::task::Poll::Ready(true);
                        }
                        patience.as_mut().poll(cx).map(|()| false)
                    })
                    .await
                });
                let _ = left.lock().unwrap().send(went);
                Response::new(Body::from("stayed"))
            })
        });
        addr
    })
}

#[test]
fn a_handler_sees_its_client_leave_but_not_a_pipelined_request() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = watching_server(&rt, tx);

    // A client that sends its request and closes: seen at once, not after
    // the handler's 5 s of patience.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    drop(s);
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "not seen"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // A second request sent while the first's handler watches: its bytes
    // are the connection's to read, not a leave; both are answered.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /quick HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"GET /quick HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answers = String::new();
    s.read_to_string(&mut answers).unwrap();
    assert_eq!(answers.matches("stayed").count(), 2, "{answers}");
    assert!(!rx.recv_timeout(Duration::from_secs(5)).unwrap());
    assert!(!rx.recv_timeout(Duration::from_secs(5)).unwrap());
    rt.shutdown();
}

/// A watch that gave up (its handler's patience ran out, the watch was
/// dropped while waiting) leaves the keep-alive connection as it found
/// it: the next request is read and answered, and a later watch on the
/// same connection still sees the client leave.
#[test]
fn a_dropped_watch_leaves_the_connection_readable_and_watchable() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = watching_server(&rt, tx);

    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for round in 0..3 {
        s.write_all(b"GET /quick HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let mut head = [0u8; 512];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("stayed") {
            let n = s.read(&mut head).unwrap();
            assert!(n > 0, "round {round}: closed after {got:?}");
            got.extend_from_slice(&head[..n]);
        }
        assert!(!rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }
    // Same connection, a fourth request, then the client leaves: seen
    // well before the handler's 5 s.
    let started = Instant::now();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(s);
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "not seen"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    rt.shutdown();
}

/// A written response's header map, emptied, is reused for a later
/// request (a per-thread spare): no request may ever see a field of an
/// earlier response, on its own connection or another, whatever size the
/// response's map grew to.
#[test]
fn a_request_never_sees_the_fields_of_an_earlier_response() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start_with(&rt, ServerConfig::default(), |req: Request<Body>| {
        // The body lists the request's own fields, in order.
        let mut seen: Vec<String> = req
            .headers()
            .iter()
            .map(|(n, v)| format!("{n}={}", v.to_str().unwrap_or("?")))
            .collect();
        seen.sort();
        let fields: usize = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("fields="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let mut r = Response::new(Body::from(seen.join(";")));
        for i in 0..fields {
            r.headers_mut().append(
                spindle_http::http::HeaderName::from_bytes(format!("x-secret-{i}").as_bytes())
                    .unwrap(),
                spindle_http::http::HeaderValue::from_static("leaked"),
            );
        }
        r
    });
    // Pipelined on one connection, responses of 1, 3 and 100 fields in
    // between: each request's body lists exactly what it sent.
    let mut batch = Vec::new();
    for (i, fields) in [1, 3, 100, 0, 5, 1].iter().enumerate() {
        batch.extend_from_slice(
            format!("GET /?fields={fields} HTTP/1.1\r\nHost: h\r\nX-Mine: {i}\r\n\r\n").as_bytes(),
        );
    }
    batch.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    let r = raw(addr, &batch);
    assert_eq!(r.matches("HTTP/1.1 200").count(), 7, "{r}");
    for i in 0..6 {
        assert!(r.contains(&format!("\r\n\r\nhost=h;x-mine={i}")), "{r}");
    }
    assert!(r.contains("\r\n\r\nconnection=close;host=h"), "{r}");
    // The response fields went out, and none came back in a request.
    assert_eq!(r.matches("x-secret-99: leaked").count(), 1, "{r}");
    assert!(
        !r.contains("x-secret-0=") && !r.contains("x-secret-99="),
        "{r}"
    );
    // Across connections (Python's http.client, keep-alive), after
    // responses with many fields: the spares are shared by the thread.
    let out = python(&format!(
        r#"
import http.client
for c in range(3):
    conn = http.client.HTTPConnection("127.0.0.1", {port})
    for i in range(5):
        conn.request("GET", "/?fields=" + str(40 * (i % 2)), headers={{"X-Conn": str(c)}})
        body = conn.getresponse().read().decode()
        assert "secret" not in body, body
        assert "x-conn=" + str(c) in body, body
    conn.close()
print("ok")
"#,
        port = addr.port()
    ));
    assert_eq!(out.trim(), "ok");
}

/// Gives "hello", then panics.
struct PanickyReader(bool);

impl Read for PanickyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if std::mem::replace(&mut self.0, true) {
            panic!("a reader that panics");
        }
        buf[..5].copy_from_slice(b"hello");
        Ok(5)
    }
}

/// A panic in the handler is answered with 500 after the responses
/// pipelined before it; one in a streamed body's reader, once its head is
/// out, cuts that response off instead (no 500 written into the middle of
/// a body), and the responses before it still arrive. Either way the
/// connection closes and the server goes on serving.
#[test]
fn a_panic_in_the_handler_gets_500_and_one_in_a_streamed_body_cuts_it_off() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start_with(
        &rt,
        ServerConfig::default(),
        |req: Request<Body>| match req.uri().path() {
            "/handler-panics" => panic!("handler boom"),
            "/reader-panics" => Response::new(Body::from_reader(PanickyReader(false))),
            _ => Response::new(Body::from("fine")),
        },
    );
    let r = raw(
        addr,
        b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /handler-panics HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("\r\n\r\nfineHTTP/1.1 500 "), "{r}");
    assert_eq!(
        r.matches("HTTP/1.1 ").count(),
        2,
        "nothing after the 500: {r}"
    );
    let r = raw(
        addr,
        b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /reader-panics HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("transfer-encoding: chunked\r\n"), "{r}");
    assert!(
        r.ends_with("\r\n\r\n5\r\nhello\r\n"),
        "cut after the data: {r:?}"
    );
    assert!(!r.contains(" 500 "), "{r}");
    assert_eq!(r.matches("HTTP/1.1 ").count(), 2, "{r}");
    let after = raw(
        addr,
        b"GET /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(after.ends_with("\r\n\r\nfine"), "{after}");
}

/// Resident memory of this process (the server runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Held by the tests that answer with megabytes, so that the one that
/// measures this process's memory does not count another's.
static BIG_BODIES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn big_bodies() -> std::sync::MutexGuard<'static, ()> {
    BIG_BODIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads from `s` into `got` until the response starting at `got[at..]`
/// — a head with a `content-length` — is all in; returns its head and
/// where its body lies in `got`.
fn read_sized_response(
    s: &mut TcpStream,
    got: &mut Vec<u8>,
    at: usize,
) -> (String, std::ops::Range<usize>) {
    let mut buf = vec![0u8; 1 << 16];
    let mut more = |got: &mut Vec<u8>| {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    };
    let head_end = loop {
        if let Some(p) = got[at..].windows(4).position(|w| w == b"\r\n\r\n") {
            break at + p + 4;
        }
        more(got);
    };
    let head = String::from_utf8_lossy(&got[at..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .trim()
        .parse()
        .unwrap();
    while got.len() < head_end + len {
        more(got);
    }
    (head, head_end..head_end + len)
}

/// A keep-alive connection that once got a large response does not keep
/// its room while it waits for the next request: 64 idle connections that
/// each got 2 MiB would otherwise hold 128 MiB between them. (A body with
/// trailers goes out chunked, through the connection's output buffer; a
/// large one without is written from where it is, see the next test.)
#[test]
fn idle_connections_do_not_keep_the_room_of_a_large_response() {
    let _alone = big_bodies();
    const CONNS: usize = 64;
    const SIZE: usize = 2 << 20;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let big = bytes::Bytes::from(vec![b'x'; SIZE]);
    let (addr, _) = serve_on(&rt, ServerConfig::default(), move |_req| {
        let trailers = || {
            let mut t = spindle_http::http::HeaderMap::new();
            t.insert("x-done", "1".parse().unwrap());
            Some(t)
        };
        Response::new(Body::from(big.clone()).with_trailers(trailers))
    });
    let before = rss();
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        // Chunked: one chunk of it all, then the last chunk and the trailer.
        let want = b"\r\n0\r\nx-done: 1\r\n\r\n";
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while !got.ends_with(want) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed early");
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.len() > SIZE);
        assert!(String::from_utf8_lossy(&got[..200]).contains("transfer-encoding: chunked"));
        conns.push(s);
    }
    // Every connection is idle now, waiting for its next request.
    std::thread::sleep(Duration::from_millis(200));
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 48 << 20,
        "{CONNS} idle connections hold {} MiB",
        grown >> 20
    );
    // And each still serves.
    for s in &mut conns[..4] {
        s.write_all(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let mut buf = [0u8; 512];
        assert!(s.read(&mut buf).unwrap() > 0);
    }
}

/// A large full body goes out from the handler's bytes, behind what is
/// pending: pipelined small and large answers arrive whole and in order,
/// over a client that reads slowly enough for the writes to wait.
#[test]
fn pipelined_large_full_bodies_arrive_whole_and_in_order() {
    let _alone = big_bodies();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _) = serve_on(&rt, ServerConfig::default(), |req| {
        let n: usize = req.uri().path()[1..].parse().unwrap();
        let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        Response::new(Body::from(body))
    });
    let sizes = [10, 3 << 20, 5, 40_000, 32 * 1024, 32 * 1024 - 1, 7];
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut requests = String::new();
    for n in sizes {
        requests.push_str(&format!("GET /{n} HTTP/1.1\r\nHost: a\r\n\r\n"));
    }
    s.write_all(requests.as_bytes()).unwrap();
    // Let the server fill the socket before anything is read.
    std::thread::sleep(Duration::from_millis(200));
    let mut got = Vec::new();
    let mut at = 0;
    for n in sizes {
        let (head, body) = read_sized_response(&mut s, &mut got, at);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {n}\r\n")), "{head}");
        assert!(
            got[body.clone()]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8),
            "body of /{n} differs"
        );
        at = body.end;
    }
    assert_eq!(got.len(), at, "nothing after the last answer");
}

/// A client that asks for a large full body and never reads it: the
/// write waits at most `write_timeout`, then the connection is closed;
/// meanwhile and after, other clients are served.
#[test]
fn a_client_that_never_reads_a_large_body_is_dropped_after_the_write_timeout() {
    let _alone = big_bodies();
    let rt = Runtime::builder().workers(1).build().unwrap();
    let big = bytes::Bytes::from(vec![b'x'; 16 << 20]);
    let config = ServerConfig::default().write_timeout(Duration::from_millis(300));
    let (addr, handle) = serve_on(&rt, config, move |req| {
        if req.uri().path() == "/big" {
            Response::new(Body::from(big.clone()))
        } else {
            Response::new(Body::from("small"))
        }
    });
    let mut stuck = TcpStream::connect(addr).unwrap();
    stuck
        .write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // The worker is not held by the stuck write.
    let r = raw(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(r.ends_with("small"), "{r}");
    // The stuck connection goes within a few write timeouts.
    let start = Instant::now();
    while handle.connections() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{} connections still open",
            handle.connections()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What it got is a prefix of the answer, then the end.
    stuck
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let _ = stuck.read_to_end(&mut got);
    assert!(got.len() < (16 << 20) + 200, "{}", got.len());
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let r = raw(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(r.ends_with("small"), "{r}");
}
