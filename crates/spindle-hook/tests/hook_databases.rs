//! The hook with real database clients against real servers: the `redis`
//! crate's synchronous API against `redis-server`, libpq through `pq-sys`
//! (what `diesel` uses) and the `postgres` crate (synchronous, with a
//! private tokio runtime inside) against PostgreSQL. Each test fails
//! without the hook: a fiber's wait would block the only worker, and the
//! fiber that would end the wait could never run.

mod common;
#[path = "../../spindle/tests/common/postgres.rs"]
mod postgres_server;

use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

use common::{other_fiber_ran_during, rt, within};
use postgres_server::Postgres;

fn hook() {
    spindle_hook::install().expect("the hook resolves in a test binary");
}

/// A `redis-server` of its own on a free port of 127.0.0.1, no persistence,
/// killed on drop. Debian's package (`.ci/run` installs it).
struct Redis {
    port: u16,
    server: std::process::Child,
}

impl Redis {
    /// The port is found free and then given to the server, so another
    /// test's server may take it first (ours then fails to bind and exits
    /// while the other answers): a server counts as started only once the
    /// one answering on the port reports our child's process id, else it
    /// is tried again on another port.
    fn start() -> Redis {
        let started = Instant::now();
        loop {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "redis-server did not start"
            );
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut server = std::process::Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect(
                    "redis-server is not installed (apt-get install redis-server; .ci/run does)",
                );
            while server.try_wait().ok().flatten().is_none()
                && started.elapsed() < Duration::from_secs(30)
            {
                match Redis::pid_on(port) {
                    Some(pid) if pid == server.id() => return Redis { port, server },
                    Some(_) => break, // another test's server has the port
                    None => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            let _ = server.kill();
            let _ = server.wait();
        }
    }

    /// The process id the server answering on `port` reports, if one does.
    fn pid_on(port: u16) -> Option<u32> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"INFO server\r\n").ok()?;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).ok()?;
            if n == 0 {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some(rest) = text.split("process_id:").nth(1) {
                if let Some(line) = rest.split("\r\n").next().filter(|_| rest.contains("\r\n")) {
                    return line.trim().parse().ok();
                }
            }
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

#[test]
fn fifty_redis_blpops_on_one_worker_wait_together_for_one_pusher() {
    hook();
    let redis = Redis::start();
    let url = redis.url();
    let got = within(Duration::from_secs(60), move || {
        rt(1).run(move || {
            let client = redis::Client::open(url).unwrap();
            let waiters: Vec<_> = (0..50)
                .map(|i| {
                    let client = client.clone();
                    spindle::spawn(move || {
                        let mut con = client.get_connection().unwrap();
                        // Blocks (up to 10 s) until the pusher below runs:
                        // on this same worker.
                        let v: Option<(String, String)> = redis::cmd("BLPOP")
                            .arg(format!("list-{i}"))
                            .arg(10)
                            .query(&mut con)
                            .unwrap();
                        v.map(|(_, value)| value)
                    })
                })
                .collect();
            let pusher = spindle::spawn(move || {
                let mut con = client.get_connection().unwrap();
                // Push only once every waiter is blocked in the server.
                loop {
                    let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
                    let blocked = info
                        .lines()
                        .find_map(|l| l.strip_prefix("blocked_clients:"))
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if blocked == 50 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                for i in 0..50 {
                    let _: () = redis::cmd("RPUSH")
                        .arg(format!("list-{i}"))
                        .arg(format!("value-{i}"))
                        .query(&mut con)
                        .unwrap();
                }
            });
            pusher.join().unwrap();
            waiters
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.as_deref(), Some(format!("value-{i}").as_str()));
    }
}

/// A libpq connection (the C library, through `pq-sys`).
struct Pq(*mut pq_sys::PGconn);

// SAFETY: a PGconn may move between threads; it is used by one at a time.
unsafe impl Send for Pq {}

impl Pq {
    fn connect(url: &str) -> Pq {
        let c = CString::new(url).unwrap();
        // SAFETY: a NUL-terminated conninfo string.
        let conn = unsafe { pq_sys::PQconnectdb(c.as_ptr()) };
        // SAFETY: PQconnectdb never returns a dangling pointer.
        let ok = unsafe { pq_sys::PQstatus(conn) } == pq_sys::ConnStatusType::CONNECTION_OK;
        // SAFETY: libpq's message for a live connection, NUL-terminated.
        let why = unsafe { CStr::from_ptr(pq_sys::PQerrorMessage(conn)) };
        assert!(ok, "libpq connect: {}", why.to_string_lossy());
        Pq(conn)
    }

    /// Runs `sql` and returns the first column of the first row.
    fn query(&self, sql: &str) -> String {
        let c = CString::new(sql).unwrap();
        // SAFETY: our live connection and a NUL-terminated query.
        unsafe {
            let res = pq_sys::PQexec(self.0, c.as_ptr());
            let status = pq_sys::PQresultStatus(res);
            assert_eq!(
                status,
                pq_sys::ExecStatusType::PGRES_TUPLES_OK,
                "{}",
                CStr::from_ptr(pq_sys::PQerrorMessage(self.0)).to_string_lossy()
            );
            let v = CStr::from_ptr(pq_sys::PQgetvalue(res, 0, 0))
                .to_string_lossy()
                .into_owned();
            pq_sys::PQclear(res);
            v
        }
    }
}

impl Drop for Pq {
    fn drop(&mut self) {
        // SAFETY: our connection, finished once.
        unsafe { pq_sys::PQfinish(self.0) };
    }
}

#[test]
fn libpq_waits_for_an_advisory_lock_while_the_fiber_that_releases_it_runs() {
    hook();
    let pg = Postgres::start();
    let url = pg.url();
    let (holder, waiter) = (Pq::connect(&url), Pq::connect(&url));
    holder.query("select pg_advisory_lock(7)::text");
    // Without the hook this would wait for ever: give up after 10 s.
    waiter.query("set statement_timeout = 10000; select 'set'");
    let (ran, got) = other_fiber_ran_during(
        move || waiter.query("select pg_advisory_lock(7)::text || 'locked'"),
        move || {
            std::thread::sleep(Duration::from_millis(100));
            holder.query("select pg_advisory_unlock(7)::text");
        },
    );
    assert!(ran, "the releasing fiber ran while libpq waited");
    assert_eq!(got, "locked");
}

#[test]
fn twenty_libpq_sleeps_on_one_worker_are_all_in_the_server_at_once() {
    hook();
    let pg = Postgres::start();
    let url = pg.url();
    let most = within(Duration::from_secs(60), move || {
        rt(1).run(move || {
            let sleepers: Vec<_> = (0..20)
                .map(|_| {
                    let url = url.clone();
                    spindle::spawn(move || {
                        let c = Pq::connect(&url);
                        c.query("select pg_sleep(0.5)::text");
                    })
                })
                .collect();
            // A watcher counts the sleeps in progress on the server.
            let watcher = spindle::spawn({
                let url = url.clone();
                move || {
                    let c = Pq::connect(&url);
                    let mut most = 0;
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_secs(5) && most < 20 {
                        let n: usize = c
                            .query(
                                "select count(*)::text from pg_stat_activity \
                                 where query like 'select pg_sleep%' and state = 'active'",
                            )
                            .parse()
                            .unwrap();
                        most = most.max(n);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    most
                }
            });
            let most = watcher.join().unwrap();
            sleepers.into_iter().for_each(|s| s.join().unwrap());
            most
        })
    });
    assert_eq!(most, 20, "every libpq query was in flight at once");
}

#[test]
fn the_postgres_crate_waits_for_an_advisory_lock_while_the_fiber_that_releases_it_runs() {
    hook();
    let pg = Postgres::start();
    let url = pg.url();
    let holder = Pq::connect(&url);
    holder.query("select pg_advisory_lock(9)::text");
    let (ran, got) = other_fiber_ran_during(
        move || {
            // The postgres crate's synchronous client: a private tokio
            // runtime whose epoll_wait parks this fiber.
            let mut waiter = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            waiter
                .batch_execute("set statement_timeout = 10000")
                .unwrap();
            let row = waiter
                .query_one("select pg_advisory_lock(9)::text || 'locked'", &[])
                .unwrap();
            row.get::<_, String>(0)
        },
        move || {
            // Released through libpq: while the waiting fiber is inside its
            // tokio runtime, tokio refuses to enter another on this thread
            // (see the crate docs).
            std::thread::sleep(Duration::from_millis(300));
            holder.query("select pg_advisory_unlock(9)::text");
        },
    );
    assert!(
        ran,
        "the releasing fiber ran while the postgres crate waited"
    );
    assert_eq!(got, "locked");
}

#[test]
fn postgres_crate_sessions_on_different_workers_overlap() {
    hook();
    let pg = Postgres::start();
    let url = pg.url();
    let holder = Pq::connect(&url);
    holder.query("select pg_advisory_lock(11)::text");
    // Two fibers, one per worker, each waiting in the postgres crate; the
    // lock is released only once both are blocked in the server.
    let watcher = Pq::connect(&url);
    let got = within(Duration::from_secs(60), move || {
        rt(2).run(move || {
            let waiters: Vec<_> = (0..2)
                .map(|worker| {
                    let url = url.clone();
                    spindle::Builder::new()
                        .spawn_on_worker(worker, move || {
                            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                            c.batch_execute("set statement_timeout = 10000").unwrap();
                            c.query_one("select pg_advisory_lock_shared(11)::text || 'ok'", &[])
                                .unwrap()
                                .get::<_, String>(0)
                        })
                        .unwrap()
                })
                .collect();
            let start = Instant::now();
            loop {
                let n: usize = watcher
                    .query(
                        "select count(*)::text from pg_locks \
                         where locktype = 'advisory' and not granted",
                    )
                    .parse()
                    .unwrap();
                if n == 2 || start.elapsed() > Duration::from_secs(10) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            holder.query("select pg_advisory_unlock(11)::text");
            waiters
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    assert_eq!(got, ["ok", "ok"]);
}

#[test]
fn a_redis_server_that_dies_mid_blpop_fails_every_waiter_and_the_worker_goes_on() {
    hook();
    let mut redis = Redis::start();
    let url = redis.url();
    // Kill the server from a plain thread once every waiter is blocked.
    let port = redis.port;
    let killer = std::thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        let start = Instant::now();
        loop {
            let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
            if info.contains("blocked_clients:10") || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = redis.server.kill();
        let _ = redis.server.wait();
        redis
    });
    let (errors, still_serves) = within(Duration::from_secs(60), move || {
        rt(1).run(move || {
            let client = redis::Client::open(url).unwrap();
            let waiters: Vec<_> = (0..10)
                .map(|i| {
                    let client = client.clone();
                    spindle::spawn(move || {
                        let mut con = client.get_connection().unwrap();
                        let r: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
                            .arg(format!("gone-{i}"))
                            .arg(30)
                            .query(&mut con);
                        r.is_err()
                    })
                })
                .collect();
            let errors = waiters
                .into_iter()
                .map(|w| w.join().unwrap())
                .filter(|e| *e)
                .count();
            // The worker is fine: a Spindle sleep and a new fiber still run.
            spindle::time::sleep(Duration::from_millis(10));
            (errors, spindle::spawn(|| 7).join().unwrap() == 7)
        })
    });
    drop(killer.join().unwrap());
    assert_eq!(errors, 10, "every BLPOP failed when its server died");
    assert!(still_serves);
}

#[test]
fn a_postgres_server_shut_down_mid_query_fails_every_libpq_query() {
    hook();
    let pg = Postgres::start();
    let url = pg.url();
    let watcher = Pq::connect(&url);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Fast shutdown (the helper's drop) from a plain thread, once all five
    // sleeps are running.
    let stopper = std::thread::spawn(move || {
        let _ = rx.recv();
        drop(pg);
    });
    let failed = within(Duration::from_secs(60), move || {
        rt(1).run(move || {
            let queries: Vec<_> = (0..5)
                .map(|_| {
                    let url = url.clone();
                    spindle::spawn(move || {
                        let c = Pq::connect(&url);
                        let sql = CString::new("select pg_sleep(30)").unwrap();
                        // SAFETY: our live connection and a NUL-terminated query.
                        unsafe {
                            let res = pq_sys::PQexec(c.0, sql.as_ptr());
                            let ok = pq_sys::PQresultStatus(res)
                                == pq_sys::ExecStatusType::PGRES_TUPLES_OK;
                            pq_sys::PQclear(res);
                            !ok
                        }
                    })
                })
                .collect();
            loop {
                let n: usize = watcher
                    .query(
                        "select count(*)::text from pg_stat_activity \
                         where query = 'select pg_sleep(30)' and state = 'active'",
                    )
                    .parse()
                    .unwrap();
                if n == 5 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            tx.send(()).unwrap();
            let start = Instant::now();
            let failed = queries
                .into_iter()
                .map(|q| q.join().unwrap())
                .filter(|f| *f)
                .count();
            (failed, start.elapsed())
        })
    });
    stopper.join().unwrap();
    assert_eq!(failed.0, 5, "every query failed when the server went away");
    assert!(
        failed.1 < Duration::from_secs(25),
        "not after their 30 s: {:?}",
        failed.1
    );
}
