//! `wasi:keyvalue` and `wasi:config` through real components: wasmtime
//! v48's own test programs (`keyvalue_main`, `config_get`,
//! `p2_cli_serve_keyvalue`, `p2_cli_serve_config`) and the `kv` guests,
//! on every backend — memory, the embedded file, a real `redis-server`.

mod common;

use std::time::{Duration, Instant};

use common::{config, get, serve, serve_host, third_party, Redis};
use spindle_wasm::{HostConfig, KeyValue};

/// Runs a command component to its exit status.
fn run(wasm: Vec<u8>, config: HostConfig) -> i32 {
    spindle::run(move || spindle_wasm::run_command(&wasm, &["test".into()], config))
        .unwrap_or_else(|e| panic!("the command failed: {e:#}"))
}

/// wasmtime's `keyvalue_main` expects a store holding only
/// `atomics_key = 5`.
fn seeded(store: &KeyValue) -> KeyValue {
    store.set("atomics_key", b"5").unwrap();
    store.clone()
}

#[test]
fn wasmtimes_keyvalue_program_passes_on_memory_file_and_redis() {
    let dir = common::temp_dir("kv-main");
    let redis = Redis::start();
    let stores = [
        KeyValue::open("memory:").unwrap(),
        KeyValue::open(&format!("file:{}/main.redb", dir.display())).unwrap(),
        KeyValue::open(&redis.url(1)).unwrap(),
    ];
    for store in &stores {
        let c = config().keyvalue("default", seeded(store));
        assert_eq!(
            run(third_party("keyvalue_main"), c),
            0,
            "on {}",
            store.url()
        );
        // What it left: the counter it incremented and the one key of
        // its batch it did not delete.
        assert_eq!(
            store.get("atomics_key").unwrap().as_deref(),
            Some(&b"6"[..])
        );
        assert_eq!(store.get("b1").unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(store.get("hello").unwrap(), None);
    }
}

#[test]
fn wasmtimes_config_program_reads_what_it_is_given_and_nothing_else() {
    let c = config().config_var("hello", "world");
    assert_eq!(run(third_party("config_get"), c), 0);
    // Without the variable its `unwrap` traps: the guest sees no other
    // host's or process's values.
    assert!(fails(third_party("config_get"), config()));
    let extra = config()
        .config_var("hello", "world")
        .config_var("other", "x");
    assert!(
        fails(third_party("config_get"), extra),
        "get-all sees exactly the table"
    );
}

/// Whether a command traps or exits non-zero.
fn fails(wasm: Vec<u8>, config: HostConfig) -> bool {
    let status = spindle::run(move || spindle_wasm::run_command(&wasm, &["t".into()], config));
    status.map_or(true, |s| s != 0)
}

#[test]
fn wasmtimes_serve_programs_answer_from_the_store_and_the_config() {
    let store = KeyValue::open("memory:").unwrap();
    store.set("hello", b"world from the store").unwrap();
    let host = spindle_wasm::Host::new(
        &third_party("p2_cli_serve_keyvalue"),
        config().keyvalue("default", store),
    )
    .unwrap();
    let (_rt, addr) = serve_host(host, 2);
    assert_eq!(get(addr, "/", ""), (200, "world from the store".into()));
    let host = spindle_wasm::Host::new(
        &third_party("p2_cli_serve_config"),
        config().config_var("hello", "configured"),
    )
    .unwrap();
    let (_rt, addr) = serve_host(host, 2);
    assert_eq!(get(addr, "/", ""), (200, "configured".into()));
}

#[test]
fn a_counter_counts_per_request_on_both_worlds_and_a_store_not_granted_is_denied() {
    for guest in ["kv", "kv-p3"] {
        let c = config().keyvalue("default", KeyValue::open("memory:").unwrap());
        let (_rt, addr) = serve(guest, 2, c);
        for n in 1..=3 {
            assert_eq!(get(addr, "/count", ""), (200, n.to_string()), "{guest}");
        }
        // The component loads and serves; only the store it was not
        // granted is refused, with the interface's own error.
        assert_eq!(
            get(addr, "/open?store=secret", ""),
            (403, "access-denied".into())
        );
        assert_eq!(get(addr, "/count", ""), (200, "4".into()), "{guest}");
    }
}

#[test]
fn a_component_with_no_store_granted_still_loads() {
    let (_rt, addr) = serve("kv", 1, config());
    assert_eq!(get(addr, "/count", ""), (403, "access-denied".into()));
}

#[test]
fn one_megabyte_values_go_in_and_come_back_whole_on_every_backend() {
    let dir = common::temp_dir("kv-big");
    let redis = Redis::start();
    for url in [
        "memory:".to_string(),
        format!("file:{}/big.redb", dir.display()),
        redis.url(2),
    ] {
        let c = config().keyvalue("default", KeyValue::open(&url).unwrap());
        let (_rt, addr) = serve("kv", 2, c);
        let (status, body) = get(addr, "/big?n=1048576", "");
        assert_eq!(
            (status, body.as_str()),
            (200, "1048576 bytes back"),
            "on {url}"
        );
        // Past the limit: the guest is told, nothing is written.
        let (status, body) = get(addr, "/big?n=16777217", "");
        assert_eq!(status, 503, "on {url}: {body}");
        assert!(body.contains("over the limit"), "{body}");
    }
}

#[test]
fn the_embedded_store_keeps_its_data_across_a_restart() {
    let dir = common::temp_dir("kv-restart");
    let url = format!("file:{}/data.redb", dir.display());
    for expected in [1, 3] {
        let store = KeyValue::open(&url).unwrap();
        let (rt, addr) = serve("kv", 2, config().keyvalue("default", store));
        assert_eq!(get(addr, "/count", ""), (200, expected.to_string()));
        assert_eq!(
            get(addr, "/count?store=", ""),
            (200, (expected + 1).to_string())
        );
        // Everything holding the store goes: the file is closed.
        drop(rt);
    }
    let store = KeyValue::open(&url).unwrap();
    assert_eq!(store.get("count").unwrap().as_deref(), Some(&b"4"[..]));
}

/// 1 000 requests at once, each on its own connection and client thread.
fn thousand_at_once(addr: std::net::SocketAddr) -> Vec<(u16, String)> {
    let threads: Vec<_> = (0..1000)
        .map(|_| std::thread::spawn(move || get(addr, "/count", "")))
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_thousand_concurrent_increments_end_at_exactly_a_thousand() {
    let dir = common::temp_dir("kv-thousand");
    let redis = Redis::start();
    let cases = [
        ("kv", format!("file:{}/p2.redb", dir.display())),
        ("kv-p3", format!("file:{}/p3.redb", dir.display())),
        ("kv", redis.url(3)),
        ("kv-p3", redis.url(4)),
        ("kv", "memory:".to_string()),
    ];
    for (guest, url) in cases {
        let store = KeyValue::open(&url).unwrap();
        let (_rt, addr) = serve(guest, 2, config().keyvalue("default", store.clone()));
        let answers = thousand_at_once(addr);
        let mut seen: Vec<u64> = answers
            .iter()
            .map(|(s, b)| {
                assert_eq!(*s, 200, "{guest} on {url}: {b}");
                b.parse().unwrap()
            })
            .collect();
        seen.sort_unstable();
        // Each increment saw a value of its own: none was lost or doubled.
        assert_eq!(seen, (1..=1000).collect::<Vec<u64>>(), "{guest} on {url}");
        assert_eq!(store.get("count").unwrap().as_deref(), Some(&b"1000"[..]));
    }
}

#[test]
fn redis_going_down_is_an_error_for_the_guest_and_coming_back_heals() {
    let mut redis = Redis::start();
    let store = KeyValue::open(&redis.url(0)).unwrap();
    let (_rt, addr) = serve("kv", 2, config().keyvalue("default", store));
    assert_eq!(get(addr, "/count", ""), (200, "1".into()));
    redis.stop();
    for _ in 0..3 {
        let t = Instant::now();
        let (status, body) = get(addr, "/count", "");
        assert_eq!(status, 503, "{body}");
        assert!(body.starts_with("store error: redis"), "{body}");
        // Within the connect and response timeouts, not the request's 30 s.
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
    // Other paths of the server are not stuck behind the dead store.
    assert_eq!(get(addr, "/nope", ""), (404, "no such path".into()));
    redis.restart();
    let healed = Instant::now();
    loop {
        let (status, body) = get(addr, "/count", "");
        if status == 200 {
            // A fresh server: counting starts over.
            assert_eq!(body, "1");
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(20),
            "never healed: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A "Redis" that accepts connections and never answers.
fn silent_redis() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    format!("redis://{addr}/0")
}

#[test]
fn a_redis_that_never_answers_is_an_error_in_time_and_the_deadline_still_holds() {
    let store = KeyValue::open(&silent_redis()).unwrap();
    // Within the store's response timeout: the guest is told, and answers.
    let (_rt, addr) = serve("kv", 1, config().keyvalue("default", store.clone()));
    let t = Instant::now();
    let (status, body) = get(addr, "/count", "");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("redis"), "{body}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // A request deadline shorter than that timeout ends the wait first.
    let short = config()
        .timeout(Duration::from_millis(300))
        .keyvalue("default", store);
    let (_rt, addr) = serve("kv", 1, short);
    let t = Instant::now();
    let (status, _) = get(addr, "/count", "");
    assert_eq!(status, 504);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}
