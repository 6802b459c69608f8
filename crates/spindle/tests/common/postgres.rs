//! A PostgreSQL server of its own for a test (shared by the tests of
//! `spindle` and `spindle-hook`, which include this file by path).

use std::time::{Duration, Instant};

/// A PostgreSQL server of its own for a test: a fresh cluster in a
/// temporary directory, on a free port of 127.0.0.1, stopped and removed on
/// drop. The binaries are Debian's `postgresql` package (`.ci/run`
/// installs it); as root the server runs as the `postgres` user.
pub struct Postgres {
    dir: std::path::PathBuf,
    port: u16,
    server: std::process::Child,
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| versions.flatten().map(|v| v.path().join("bin")).max())
            .filter(|bin| bin.join("initdb").exists())
            .expect("PostgreSQL is not installed (apt-get install postgresql; .ci/run does)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("spindle-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        let command = |program: &std::path::Path| {
            let mut c = if root {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            } else {
                std::process::Command::new(program)
            };
            c.stdout(std::process::Stdio::null());
            c.stderr(std::process::Stdio::null());
            c
        };
        if root {
            let ok = std::process::Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown of the data directory");
        }
        let ok = command(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(dir.join("data"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "initdb failed");
        let server = command(&bin.join("postgres"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
            ])
            .args(["-c", "fsync=off"])
            .spawn()
            .unwrap();
        let pg = Postgres { dir, port, server };
        // The postmaster listens before it accepts sessions: until recovery
        // is done a connection is refused with "the database system is
        // starting up" (SQLSTATE 57P03). `pg_isready` exits 0 only once
        // sessions are accepted, so wait for that, not for the port.
        let started = Instant::now();
        loop {
            let ready = std::process::Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "postgres did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        pg
    }

    pub fn url(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT to the postmaster (named in its pid file; as root our
        // child is `runuser`, which does not pass signals on): PostgreSQL's
        // fast shutdown.
        let postmaster = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok())
            .unwrap_or(self.server.id() as i32);
        // SAFETY: kill takes plain integers; the pid is our server's.
        unsafe { libc::kill(postmaster, libc::SIGINT) };
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
