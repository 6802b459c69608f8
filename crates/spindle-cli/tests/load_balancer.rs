//! Three `spindle serve` backends behind a real HAProxy (Debian's package)
//! that health-checks their `/readyz`: under steady load one backend gets
//! SIGTERM and a replacement starts. The client must see no failed request
//! — readiness fails first, the backend keeps serving through its shutdown
//! delay, then drains — and the backends' `/metrics` must add up to what
//! the client sent.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{python, spindle};

/// A port nothing listens on now (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Backend {
    child: Child,
    admin: u16,
}

impl Backend {
    fn start(port: u16, admin: u16, shutdown_delay: &str) -> Backend {
        Backend::start_with(port, admin, shutdown_delay, &[])
    }

    /// With `extra` arguments (a component, its stores) after the others.
    fn start_with(port: u16, admin: u16, shutdown_delay: &str, extra: &[&str]) -> Backend {
        let mut child = spindle()
            .args(["serve", "--workers", "1", "--drain-timeout", "5"])
            .args(extra)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args(["--shutdown-delay", shutdown_delay])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // Serving once it has printed its address.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("serving"), "backend did not start: {line:?}");
        Backend { child, admin }
    }

    /// This backend's count of answered requests, by its `/metrics`.
    fn answered(&self) -> u64 {
        self.metric_sum("spindle_requests_total")
    }

    /// The sum of one metric's samples, by its `/metrics`.
    fn metric_sum(&self, name: &str) -> u64 {
        let script = format!(
            r#"
import urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://127.0.0.1:{}/metrics", timeout=10).read().decode()
n = 0
for f in text_string_to_metric_families(text):
    for s in f.samples:
        if s.name == "{name}":
            n += s.value
print(int(n))
"#,
            self.admin
        );
        python(&script).trim().parse().unwrap()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until HAProxy's stats say `server` is `state` (UP/DOWN).
fn wait_for(stats: u16, server: &str, state: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "2",
                &format!("http://127.0.0.1:{stats}/stats;csv"),
            ])
            .output()
            .unwrap();
        let csv = String::from_utf8_lossy(&out.stdout);
        let up = csv.lines().any(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f.len() > 17 && f[1] == server && f[17].starts_with(state)
        });
        if up {
            return;
        }
        assert!(Instant::now() < until, "{server} never {state}:\n{csv}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// HAProxy in front of `servers` (its `server` lines), round robin,
/// health-checking each `/readyz`; its stats on `stats`. Returns it and
/// its directory.
fn start_haproxy(front: u16, stats: u16, servers: &str, tag: &str) -> (Child, std::path::PathBuf) {
    let config = format!(
        "global\n  maxconn 2000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n\
         \x20 retries 3\n  option redispatch\n  retry-on all-retryable-errors\n\
         frontend fe\n  bind 127.0.0.1:{front}\n  default_backend be\n\
         frontend st\n  bind 127.0.0.1:{stats}\n  stats enable\n  stats uri /stats\n\
         backend be\n  balance roundrobin\n  option httpchk GET /readyz\n  http-check expect status 200\n\
         \x20 default-server inter 100ms fall 1 rise 2\n{servers}"
    );
    let dir = std::env::temp_dir().join(format!("spindle-haproxy-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, config).unwrap();
    let haproxy = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("haproxy (Debian's package; .ci/run installs it)");
    (haproxy, dir)
}

#[test]
fn a_backend_drained_behind_haproxy_loses_no_request_and_the_metrics_add_up() {
    let ports: Vec<(u16, u16)> = (0..4).map(|_| (free_port(), free_port())).collect();
    let (front, stats) = (free_port(), free_port());
    let mut backends: Vec<Backend> = ports[..3]
        .iter()
        // A delay long enough for the leaving one's count to be read while
        // the other test of this file loads the machine.
        .map(|&(p, a)| Backend::start(p, a, "4"))
        .collect();
    let servers: String = ports
        .iter()
        .enumerate()
        .map(|(i, (p, a))| format!("  server b{i} 127.0.0.1:{p} check port {a}\n"))
        .collect();
    let (mut haproxy, dir) = start_haproxy(front, stats, &servers, "drain");
    for i in 0..3 {
        wait_for(stats, &format!("b{i}"), "UP");
    }

    // Steady load: 8 keep-alive clients for about 6 s, counting answers.
    let load = Command::new("python3")
        .arg("-c")
        .arg(format!(
            r#"
import http.client, threading, time
ok = [0] * 8
bad = []
stop = time.time() + 6
def client(i):
    c = None
    while time.time() < stop:
        try:
            if c is None:
                c = http.client.HTTPConnection("127.0.0.1", {front}, timeout=10)
            c.request("GET", "/")
            r = c.getresponse()
            body = r.read()
            if r.status == 200 and body == b"Hello, World!":
                ok[i] += 1
            else:
                bad.append((r.status, body[:80]))
        except Exception as e:
            bad.append(repr(e))
            c = None
threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(ok), len(bad), bad[:5])
"#
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    std::thread::sleep(Duration::from_millis(1500));
    // SIGTERM one backend mid-load; a replacement comes up on the spare slot
    // while it drains.
    let leaving = backends.remove(0);
    Command::new("kill")
        .args(["-TERM", &leaving.child.id().to_string()])
        .status()
        .unwrap();
    wait_for(stats, "b0", "DOWN");
    // Its count once HAProxy has stopped sending (still in its delay; read
    // before the replacement starts, whose start may take a while on a
    // loaded machine, so that the delay cannot run out first).
    std::thread::sleep(Duration::from_millis(500));
    let left_with = leaving.answered();
    let replacement = Backend::start(ports[3].0, ports[3].1, "2");
    let mut leaving = leaving;
    let until = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = leaving.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "the drained backend did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    backends.push(replacement);

    let out = load.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = haproxy.kill();
    let mut haproxy_err = String::new();
    if let Some(mut e) = haproxy.stderr.take() {
        let _ = e.read_to_string(&mut haproxy_err);
    }
    let _ = haproxy.wait();
    let mut words = report.split_whitespace();
    let ok: u64 = words.next().unwrap_or("0").parse().unwrap_or(0);
    let failed: u64 = words.next().unwrap_or("1").parse().unwrap_or(1);
    assert_eq!(failed, 0, "the client saw failures: {report} {haproxy_err}");
    assert!(ok > 100, "hardly any load went through: {report}");
    let counted: u64 = left_with + backends.iter().map(Backend::answered).sum::<u64>();
    assert_eq!(
        counted, ok,
        "backends counted {counted}, the client got {ok}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `threads` keep-alive clients GET `path` from `port` for `seconds` (or
/// `each` requests apiece); prints `ok other_statuses errors`, then the
/// statuses of the last 20 answers.
fn load_script(port: u16, path: &str, threads: usize, each: usize, seconds: f64) -> String {
    format!(
        r#"
import http.client, threading, time
ok = [0] * {threads}; other = []; errors = []; last = []
stop = time.time() + {seconds}
def client(i):
    c = None
    n = 0
    while n < {each} and time.time() < stop:
        try:
            if c is None:
                c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=20)
            c.request("GET", "{path}")
            r = c.getresponse()
            r.read()
            n += 1
            last.append(r.status)
            if r.status == 200:
                ok[i] += 1
            else:
                other.append(r.status)
        except Exception as e:
            errors.append(repr(e))
            c = None
threads = [threading.Thread(target=client, args=(i,)) for i in range({threads})]
for t in threads: t.start()
for t in threads: t.join()
print(sum(ok), len(other), len(errors), errors[:3])
print(" ".join(map(str, last[-20:])))
"#
    )
}

#[test]
fn two_replicas_on_one_redis_count_every_increment_and_outlive_its_death() {
    let mut redis = common::Redis::start();
    let store = format!("default=redis://127.0.0.1:{}/0", redis.port);
    let kv = common::guest("kv");
    let ports: Vec<(u16, u16)> = (0..2).map(|_| (free_port(), free_port())).collect();
    let backends: Vec<Backend> = ports
        .iter()
        .map(|&(p, a)| Backend::start_with(p, a, "0", &[&kv, "--keyvalue", &store]))
        .collect();
    let (front, stats) = (free_port(), free_port());
    let servers: String = ports
        .iter()
        .enumerate()
        .map(|(i, (p, a))| format!("  server b{i} 127.0.0.1:{p} check port {a}\n"))
        .collect();
    let (mut haproxy, dir) = start_haproxy(front, stats, &servers, "redis");
    for i in 0..2 {
        wait_for(stats, &format!("b{i}"), "UP");
    }

    // 20 000 increments over both replicas: Redis's INCRBY is atomic
    // across processes, so none is lost.
    let out = python(&load_script(front, "/count", 16, 1250, 600.0));
    let first: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(&first[..3], ["20000", "0", "0"], "{out}");
    assert_eq!(redis.count(), "20000");
    for b in &backends {
        let served = b.metric_sum("spindle_requests_total");
        assert!(served >= 5000, "one replica served only {served}: {out}");
    }

    // Redis dies mid-run and comes back: the guests answer 503 (their own
    // answer to the store's error) meanwhile, no connection fails, and
    // counting goes on once it is back.
    let load = Command::new("python3")
        .args(["-c", &load_script(front, "/count", 4, usize::MAX, 6.0)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    redis.stop();
    std::thread::sleep(Duration::from_millis(1500));
    redis.restart();
    let out = load.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = report.lines().collect();
    let counts: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(counts[2], "0", "connections failed: {report}");
    assert_ne!(counts[1], "0", "no request saw the store down: {report}");
    assert!(
        lines[1].split_whitespace().all(|s| s == "200"),
        "not healed: {report}"
    );
    // A fresh Redis counts from zero: what it holds is what succeeded
    // since it came back, and both servers are still up.
    assert!(redis.count().parse::<u64>().unwrap() > 0);
    let mut backends = backends;
    for b in &mut backends {
        assert!(b.child.try_wait().unwrap().is_none(), "a replica died");
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
