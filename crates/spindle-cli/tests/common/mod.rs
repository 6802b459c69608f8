//! What the `spindle` binary's tests share: the binary, the example
//! guests, a clean command, a running server, Python and `/metrics`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub const SPINDLE: &str = env!("CARGO_BIN_EXE_spindle");

/// The path of an example guest's committed `.wasm`.
pub fn guest(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/wasm")
        .join(format!("{name}.wasm"))
        .to_string_lossy()
        .into_owned()
}

/// `spindle` with a test cache directory and no `SPINDLE_*` variable
/// from the test runner's environment.
pub fn spindle() -> Command {
    let mut c = Command::new(SPINDLE);
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("spindle-cli-test-cache"),
    );
    for (k, _) in std::env::vars() {
        if k.starts_with("SPINDLE_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs a Python script; its stdout (a failure fails the test).
pub fn python(script: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A running `spindle serve`: the child and the URLs it printed.
pub struct Served {
    pub child: Child,
    pub url: String,
    pub admin: Option<String>,
    /// Kept open: the server prints more lines than are read here, and
    /// writes to a closed pipe would fail.
    _out: BufReader<ChildStdout>,
}

impl Served {
    pub fn start(mut cmd: Command) -> Served {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no address in {first:?}: {}", stderr(&mut child)))
            .to_string();
        let admin = if cmd.get_args().any(|a| a == "--admin") {
            let mut second = String::new();
            out.read_line(&mut second).unwrap();
            second
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
                .map(str::to_string)
        } else {
            None
        };
        Served {
            child,
            url,
            admin,
            _out: out,
        }
    }

    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    /// Stops it in order (SIGINT: a drain) and returns its stderr.
    pub fn stop(self) -> String {
        self.signal("INT");
        self.wait().1
    }

    /// Waits (bounded) for the exit; its status and stderr.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s, stderr(&mut self.child));
            }
            assert!(Instant::now() < until, "spindle serve did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn stderr(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// The value of one sample of `/metrics`, parsed by `prometheus_client`.
pub fn metric(admin: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let filter = labels
        .iter()
        .map(|(k, v)| format!(" and s.labels.get('{k}') == '{v}'"))
        .collect::<String>();
    let out = python(&format!(
        r#"
import urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("{admin}metrics", timeout=10).read().decode()
total = 0.0
for family in text_string_to_metric_families(text):
    for s in family.samples:
        if s.name == "{name}"{filter}:
            total += s.value
print(total)
"#
    ));
    out.trim().parse().unwrap()
}

/// `(status, body)` of a GET with curl (`extra` before the URL).
pub fn curl(url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "15", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = stdout
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("curl: {}", String::from_utf8_lossy(&out.stderr)));
    (code.parse().unwrap_or(0), body.to_string())
}

/// A fresh directory under the system's temporary one.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spindle-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test CA, and a certificate for localhost / 127.0.0.1 signed by it;
/// plus a key that belongs to neither.
pub fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let sh = |script: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout ca.key -out ca.pem -days 2 -subj /CN=spindle-test-ca 2>/dev/null",
    );
    sh(
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null",
    );
    sh(
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf && \
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out server.pem -days 2 -extfile ext.cnf 2>/dev/null",
    );
    sh("openssl genpkey -algorithm ec -pkeyopt ec_paramgen_curve:prime256v1 -out other.key 2>/dev/null");
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("other.key"),
    )
}

/// A `redis-server` of its own on a free port, no persistence, killed on
/// drop; it can be stopped and started again on the same port.
pub struct Redis {
    pub port: u16,
    server: Option<Child>,
}

impl Redis {
    pub fn start() -> Redis {
        let mut r = Redis {
            port: std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
            server: None,
        };
        r.restart();
        r
    }

    pub fn restart(&mut self) {
        self.stop();
        let server = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's package; .ci/run installs it)");
        self.server = Some(server);
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < until, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }

    /// The counter `count`, as `redis-cli` reads it.
    pub fn count(&self) -> String {
        self.cli(&["GET", "count"])
    }

    /// What `redis-cli ARGS` prints, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
