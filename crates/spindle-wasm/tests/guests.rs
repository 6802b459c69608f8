//! Every example guest served by spindle-wasm, checked with real HTTP
//! clients (curl, raw sockets, spindle-http's client): streaming, outgoing
//! requests, clocks, fuel, deadlines, memory limits, traps and admission.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{config, get, guest, serve, upstream};
use spindle::Runtime;
use spindle_wasm::{Host, HostConfig};

#[test]
fn hello_with_curl() {
    let (_rt, addr) = serve("hello", 1, config());
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10", &format!("http://{addr}/")])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("content-length: 13"), "{text}");
    assert!(text.ends_with("Hello, World!"), "{text}");
    // Keep-alive: several requests on one curl connection.
    let url = format!("http://{addr}/");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", &url, &url, &url])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello, World!".repeat(3)
    );
}

#[test]
fn echo_streams_a_large_chunked_upload_back() {
    let (_rt, addr) = serve("echo", 2, config());
    let dir = std::env::temp_dir().join(format!("spindle-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &format!("@{}", input.display()),
            &format!("http://{addr}/echo"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "the echo differs from the upload");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_thousand_concurrent_sleeps_on_one_worker_take_about_the_sleep_time() {
    let (_rt, addr) = serve("sleep", 1, config());
    // Warm up the pool and the code.
    assert_eq!(get(addr, "/?ms=1", "").0, 200);
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
    // One after another they would take 500 s; concurrently, the sleep
    // time plus overhead.
    assert!(took < Duration::from_secs(5), "1000 sleeps took {took:?}");
}

#[test]
fn hello_answers_on_one_worker_while_two_burns_run() {
    let config = config()
        .fuel_limit(u64::MAX)
        .timeout(Duration::from_secs(60));
    // Both apps on one runtime with one worker.
    let burn = Host::new(&guest("burn"), config).unwrap();
    let hello = Host::new(&guest("hello"), self::config()).unwrap();
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, hello_addr) = rt.run(move || {
        let a = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let b = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addrs = (a.local_addr().unwrap(), b.local_addr().unwrap());
        spindle::spawn(move || a.serve(move |req| burn.handle(req)));
        spindle::spawn(move || b.serve(move |req| hello.handle(req)));
        addrs
    });
    let burns: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get(addr, "/?n=1000000000", "")))
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // both are burning now
    let started = Instant::now();
    let (status, body) = get(hello_addr, "/", "");
    let took = started.elapsed();
    assert_eq!((status, body.as_str()), (200, "Hello, World!"));
    assert!(
        burns.iter().all(|b| !b.is_finished()),
        "the burns should still be running"
    );
    assert!(
        took < Duration::from_secs(2),
        "a small request waited {took:?} behind the burns"
    );
    for b in burns {
        assert_eq!(b.join().unwrap().0, 200);
    }
}

#[test]
fn runaway_guests_get_500_or_504_and_the_server_goes_on() {
    // Fuel budget.
    let (_rt, addr) = serve("burn", 1, config().fuel_limit(50_000_000));
    let (status, body) = get(addr, "/?n=10000000000", "");
    assert_eq!(status, 500);
    assert_eq!(body, "guest ran out of fuel\n");
    assert_eq!(get(addr, "/?n=1000", "").0, 200);
    // Wall-clock deadline.
    let (_rt2, addr2) = serve(
        "burn",
        1,
        config()
            .fuel_limit(u64::MAX)
            .timeout(Duration::from_millis(300)),
    );
    let started = Instant::now();
    // Past the deadline: 504, the gateway's timeout.
    let (status, body) = get(addr2, "/?n=100000000000", "");
    assert_eq!((status, body.as_str()), (504, "guest deadline exceeded\n"));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(get(addr2, "/?n=1000", "").0, 200);
}

#[test]
fn memory_bomb_trap_and_no_response_are_500_for_that_request_only() {
    let (_rt, addr) = serve("alloc", 1, config().memory_limit(32 << 20));
    assert_eq!(get(addr, "/?mib=4", ""), (200, "allocated 4 MiB".into()));
    assert_eq!(get(addr, "/?mib=100", "").0, 500);
    assert_eq!(get(addr, "/?mib=2", "").0, 200);
    let (_rt2, addr2) = serve("trap", 1, config());
    assert_eq!(get(addr2, "/", "").0, 500);
    assert_eq!(get(addr2, "/", "").0, 500, "a trap is per request");
    // A guest that returns without setting a response.
    let (_rt3, addr3) = serve("noreply", 1, config());
    assert_eq!(get(addr3, "/", "").0, 500);
    assert_eq!(get(addr3, "/", "").0, 500);
}

#[test]
fn fetch_goes_out_through_the_allow_list() {
    let (_upstream_rt, upstream) = upstream(|req| {
        if req.uri().path() == "/big" {
            // Several of the host's chunks, streamed from a reader.
            let big = vec![b'z'; 300_000];
            return spindle_http::Response::new(spindle_http::Body::from_reader(
                std::io::Cursor::new(big),
            ));
        }
        spindle_http::Response::new(spindle_http::Body::from(format!(
            "upstream saw {}",
            req.uri().path()
        )))
    });
    // A port nobody listens on.
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let allow = format!("127.0.0.1:{},127.0.0.1:{}", upstream.port(), refused.port());
    let (_rt, addr) = serve("fetch", 2, config().allow_outbound(&allow).unwrap());

    let (status, body) = get(
        addr,
        "/",
        &format!("x-fetch-url: http://127.0.0.1:{}/hi\r\n", upstream.port()),
    );
    assert_eq!(
        (status, body.as_str()),
        (200, "upstream 200: upstream saw /hi")
    );

    // A body of several chunks (a chunked upstream response) streams
    // through the host to the guest whole.
    let (status, body) = get(
        addr,
        "/",
        &format!("x-fetch-url: http://127.0.0.1:{}/big\r\n", upstream.port()),
    );
    assert_eq!(status, 200);
    let got = body
        .strip_prefix("upstream 200: ")
        .expect("the guest's answer");
    assert_eq!(got.len(), 300_000);
    assert!(got.bytes().all(|b| b == b'z'));

    let started = Instant::now();
    let (status, body) = get(
        addr,
        "/",
        &format!("x-fetch-url: http://127.0.0.1:{}/\r\n", refused.port()),
    );
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("ConnectionRefused"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused must not hang"
    );

    // Not on the list: denied, not attempted.
    let (status, body) = get(addr, "/", "x-fetch-url: http://127.0.0.2:9/\r\n");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
}

#[test]
fn past_the_cap_requests_queue_then_get_503() {
    let config = config()
        .max_concurrent(2)
        .queue(1, Duration::from_millis(200));
    let (_rt, addr) = serve("sleep", 1, config);
    let slow: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get(addr, "/?ms=1500", "")))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Third waits 200 ms in the queue, then 503.
    let queued = std::thread::spawn(move || get(addr, "/?ms=1", ""));
    std::thread::sleep(Duration::from_millis(50));
    // Fourth finds the queue full: 503 at once.
    assert_eq!(get(addr, "/?ms=1", "").0, 503);
    assert_eq!(queued.join().unwrap().0, 503);
    for s in slow {
        assert_eq!(s.join().unwrap().0, 200);
    }
    assert_eq!(get(addr, "/?ms=1", "").0, 200, "slots come back");
}

#[test]
fn committed_wasm_matches_the_guest_sources() {
    let guests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guests");
    let out = Command::new("sh")
        .arg(guests.join("sources-hash.sh"))
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = String::from_utf8_lossy(&out.stdout).into_owned();
    let committed = std::fs::read_to_string(guests.join("wasm/SOURCES.sha256")).unwrap();
    assert_eq!(
        now, committed,
        "a guest's source changed but its .wasm was not rebuilt: run guests/build.sh"
    );
}

#[test]
fn allow_list_parsing() {
    let mut a = spindle_wasm::AllowList::default();
    assert!(a.add("example.com:443, [::1]:8080, *:9000").is_ok());
    assert!(a.allows("example.com", 443));
    assert!(!a.allows("example.com", 80));
    assert!(a.allows("::1", 8080));
    assert!(a.allows("anything", 9000));
    assert!(a.add("host:notaport").is_err());
}

/// Records every report.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<spindle_wasm::RequestReport>>);

impl spindle_wasm::Observer for Reports {
    fn request(&self, report: &spindle_wasm::RequestReport) {
        self.0.lock().unwrap().push(report.clone());
    }
}

impl Reports {
    /// The outcomes seen so far, waiting briefly for the last report (it
    /// is made as the guest's part ends, just after the response).
    fn outcomes(&self, n: usize) -> Vec<spindle_wasm::Outcome> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let got: Vec<_> = self.0.lock().unwrap().iter().map(|r| r.outcome).collect();
            if got.len() >= n || Instant::now() > until {
                return got;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn the_observer_hears_how_each_request_ended_and_where_its_time_went() {
    use spindle_wasm::Outcome;
    let reports = std::sync::Arc::new(Reports::default());
    // Small pools: seven hosts live at once here, beside other tests'.
    let observed = |c: HostConfig| c.max_concurrent(8).observer(reports.clone());

    let (_a, hello) = serve("hello", 1, observed(config()));
    assert_eq!(get(hello, "/", "").0, 200);
    let (_b, burn) = serve("burn", 1, observed(config().fuel_limit(50_000_000)));
    assert_eq!(get(burn, "/?n=10000000000", "").0, 500);
    let (_c, slow) = serve(
        "burn",
        1,
        observed(
            config()
                .fuel_limit(u64::MAX)
                .timeout(Duration::from_millis(200)),
        ),
    );
    assert_eq!(get(slow, "/?n=100000000000", "").0, 504);
    let (_d, alloc) = serve("alloc", 1, observed(config().memory_limit(32 << 20)));
    assert_eq!(get(alloc, "/?mib=100", "").0, 500);
    let (_e, trap) = serve("trap", 1, observed(config()));
    assert_eq!(get(trap, "/", "").0, 500);
    let (_f, noreply) = serve("noreply", 1, observed(config()));
    assert_eq!(get(noreply, "/", "").0, 500);
    assert_eq!(
        reports.outcomes(6),
        [
            Outcome::Answered,
            Outcome::FuelExhausted,
            Outcome::Deadline,
            Outcome::MemoryLimit,
            Outcome::Trap,
            Outcome::Failed
        ]
    );
    let first = reports.0.lock().unwrap()[0].clone();
    assert!(
        first.instantiate > Duration::ZERO && first.handle > Duration::ZERO,
        "{first:?}"
    );
    let deadline = reports.0.lock().unwrap()[2].clone();
    assert!(
        deadline.handle >= Duration::from_millis(150),
        "{deadline:?}"
    );

    // Past the cap: the 503 is reported as Busy, with its queue wait.
    let busy = std::sync::Arc::new(Reports::default());
    let (_g, sleep) = serve(
        "sleep",
        1,
        config()
            .max_concurrent(1)
            .queue(1, Duration::from_millis(100))
            .observer(busy.clone()),
    );
    let slow = std::thread::spawn(move || get(sleep, "/?ms=800", ""));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(sleep, "/?ms=1", "").0, 503);
    assert_eq!(slow.join().unwrap().0, 200);
    let got = busy.0.lock().unwrap().clone();
    let b = got
        .iter()
        .find(|r| r.outcome == Outcome::Busy)
        .expect("a Busy report");
    assert!(b.queue_wait >= Duration::from_millis(90), "{b:?}");
}

#[test]
fn a_guest_that_writes_its_outgoing_body_after_the_response_head_is_served() {
    // An upstream that answers at once and echoes the body as it arrives.
    let (_upstream_rt, upstream) = upstream(|req| {
        spindle_http::Response::new(spindle_http::Body::from_reader(req.into_body()))
    });
    let config = config()
        .max_concurrent(8)
        .timeout(Duration::from_secs(20))
        .allow_outbound(&format!("127.0.0.1:{}", upstream.port()))
        .unwrap();
    let (_rt, addr) = serve("relay", 1, config);
    let started = Instant::now();
    let (status, body) = get(
        addr,
        &format!("/?to=http://127.0.0.1:{}/echo", upstream.port()),
        "",
    );
    assert_eq!(
        (status, body.as_str()),
        (200, "relayed: ping after the head"),
        "(the deadlock this catches ends at the 20 s deadline)"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_wasi_0_2_instance_reused_sequentially_serves_in_turn_and_is_dropped_when_idle() {
    let config = config()
        .instance_reuse(3)
        .instance_idle_timeout(Duration::from_millis(300));
    let host = Host::new(&guest("hello"), config).unwrap();
    let served = host.clone();
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = rt.run(move || {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(move |req| served.handle(req)));
        addr
    });
    // Seven in turn: instances of 3, 3 and 1 requests.
    for _ in 0..7 {
        assert_eq!(get(addr, "/", ""), (200, "Hello, World!".to_string()));
    }
    assert_eq!(host.instances_made(), 3);
    // The last one waits for its idle time, then is dropped.
    assert_eq!(host.instances(), 1);
    let start = Instant::now();
    while host.instances() > 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "never dropped");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A trap is never reused: the next request gets a fresh instance.
    let trap = Host::new(&guest("trap"), self::config().instance_reuse(10)).unwrap();
    let served = trap.clone();
    let rt2 = Runtime::builder().workers(1).build().unwrap();
    let addr2 = rt2.run(move || {
        let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(move |req| served.handle(req)));
        addr
    });
    assert_eq!(get(addr2, "/", "").0, 500);
    assert_eq!(get(addr2, "/", "").0, 500);
    assert_eq!(trap.instances_made(), 2);
}
