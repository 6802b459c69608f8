//! Accepting on every worker (`spindle::net::Acceptor`): where each mode
//! puts connections, that they stay there across waits, and that the
//! loops stop with their caller.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{rt, within};
use spindle::net::{AcceptMode, Acceptor, TcpStream};

/// Serves `conns` connections with `mode` on a 2-worker runtime: each
/// connection's fiber answers three requests with the worker it runs on,
/// sleeping and waiting on the socket between them. Returns, per
/// connection, the workers it was served on.
fn serve_and_record(mode: AcceptMode, conns: usize) -> Vec<Vec<u8>> {
    let rt = rt(2);
    rt.run(move || {
        let acceptor = Acceptor::bind("127.0.0.1:0", mode).unwrap();
        let addr = acceptor.local_addr().unwrap();
        let server = spindle::spawn(move || {
            acceptor.run(|accepting| loop {
                let (mut conn, _) = accepting.accept()?;
                accepting.spawn(move || {
                    let mut req = [0u8; 1];
                    while conn.read_exact(&mut req).is_ok() {
                        spindle::time::sleep(Duration::from_millis(1));
                        let w = spindle::worker_id().unwrap() as u8;
                        if conn.write_all(&[w]).is_err() {
                            break;
                        }
                    }
                })?;
            })
        });
        let clients: Vec<_> = (0..conns)
            .map(|_| {
                spindle::spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    let mut seen = Vec::new();
                    for _ in 0..3 {
                        c.write_all(b"?").unwrap();
                        let mut w = [0u8];
                        c.read_exact(&mut w).unwrap();
                        seen.push(w[0]);
                    }
                    seen
                })
            })
            .collect();
        let seen: Vec<Vec<u8>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        server.cancel();
        let r = server.join();
        assert!(
            r.is_err() || r.unwrap().is_err(),
            "the accept loops end with their caller"
        );
        seen
    })
}

fn per_worker(seen: &[Vec<u8>]) -> [usize; 2] {
    let mut n = [0; 2];
    for s in seen {
        assert!(
            s.iter().all(|&w| w == s[0]),
            "a connection moved workers: {s:?}"
        );
        n[s[0] as usize] += 1;
    }
    n
}

#[test]
fn round_robin_deals_connections_to_each_worker_in_turn_and_they_stay() {
    within(Duration::from_secs(30), || {
        let seen = serve_and_record(AcceptMode::RoundRobin, 40);
        assert_eq!(per_worker(&seen), [20, 20], "an even deal");
    });
}

#[test]
fn per_worker_listeners_each_keep_the_connections_they_accept() {
    within(Duration::from_secs(30), || {
        let seen = serve_and_record(AcceptMode::PerWorker, 64);
        let n = per_worker(&seen);
        // The kernel's hash over 64 client ports: both listeners get some
        // (all on one has probability 2^-63).
        assert!(n[0] > 0 && n[1] > 0, "one listener got nothing: {n:?}");
    });
}

#[test]
fn shared_accept_serves_everything_and_connections_stay_where_they_started() {
    within(Duration::from_secs(30), || {
        let seen = serve_and_record(AcceptMode::Shared, 40);
        assert_eq!(per_worker(&seen).iter().sum::<usize>(), 40);
    });
}

#[test]
fn per_worker_binds_one_reuse_port_listener_per_worker_on_one_port() {
    within(Duration::from_secs(30), || {
        let rt = rt(3);
        rt.run(|| {
            let a = Acceptor::bind("127.0.0.1:0", AcceptMode::PerWorker).unwrap();
            let addr = a.local_addr().unwrap();
            assert_ne!(addr.port(), 0);
            // Another server cannot take the port without SO_REUSEPORT.
            assert!(spindle::net::TcpListener::bind(addr).is_err());
            let loops = Arc::new(Mutex::new(Vec::new()));
            let l = loops.clone();
            let ran = spindle::spawn(move || {
                a.run(move |accepting| {
                    assert_eq!(accepting.listener().local_addr().unwrap(), addr);
                    l.lock().unwrap().push(spindle::worker_id().unwrap());
                    Ok(())
                })
            });
            ran.join().unwrap().unwrap();
            let mut workers = loops.lock().unwrap().clone();
            workers.sort();
            assert_eq!(workers, [0, 1, 2], "one accept loop pinned to each worker");
            // PerWorker needs its own listeners.
            let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let e = Acceptor::from_listener(l, AcceptMode::PerWorker)
                .err()
                .unwrap();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        });
    });
}

#[test]
fn a_loop_error_is_returned_and_a_loop_panic_reaches_the_caller() {
    within(Duration::from_secs(30), || {
        let rt = rt(2);
        rt.run(|| {
            let calls = Arc::new(AtomicUsize::new(0));
            let c = calls.clone();
            let a = Acceptor::bind("127.0.0.1:0", AcceptMode::PerWorker).unwrap();
            let r = a.run(move |_| {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(std::io::Error::other("first loop fails"))
                } else {
                    Ok(())
                }
            });
            // The failure, not the cancellation it caused in the other loop.
            assert_eq!(r.unwrap_err().to_string(), "first loop fails");
            assert!(calls.load(Ordering::SeqCst) >= 1);

            let a = Acceptor::bind("127.0.0.1:0", AcceptMode::PerWorker).unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.run(|accepting| {
                    if spindle::worker_id() == Some(1) {
                        panic!("loop on worker 1");
                    }
                    // The other loop waits for a connection that never
                    // comes: the panic must cancel it, not wait for it.
                    accepting.accept().map(drop)
                })
            }));
            let payload = r.unwrap_err();
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"loop on worker 1"));
        });
    });
}
