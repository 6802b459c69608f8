//! tokio futures from fibers (the `tokio` feature): they find a runtime,
//! their waits park only their fiber, cancellation drops them.
//!
//! `cargo test -p spindle --release --features tokio --test compat_tokio`
#![cfg(feature = "tokio")]

mod common;
#[path = "common/postgres.rs"]
mod postgres_server;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::within;
use postgres_server::Postgres;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn a_hundred_tokio_sleeps_on_one_worker_overlap() {
    within(Duration::from_secs(60), || {
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let started = Instant::now();
        rt.run(|| {
            let handles: Vec<_> = (0..100)
                .map(|_| {
                    spindle::spawn(|| {
                        // Created on the fiber: it finds the runtime's
                        // context there.
                        spindle::block_on(tokio::time::sleep(Duration::from_millis(300)))
                    })
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap());
        });
        // A bound for what this catches (one worker blocked per sleep
        // would take 30 s), not a measurement.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    });
}

#[test]
fn tokio_sockets_talk_to_a_real_server_from_fibers() {
    within(Duration::from_secs(60), || {
        // A plain echo server on std threads.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let rt = spindle::Runtime::builder().workers(2).build().unwrap();
        let echoed = rt.run(move || {
            let handles: Vec<_> = (0..20u8)
                .map(|i| {
                    spindle::spawn(move || {
                        spindle::block_on(async move {
                            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                            s.write_all(&[i; 8]).await.unwrap();
                            let mut back = [0u8; 8];
                            s.read_exact(&mut back).await.unwrap();
                            back
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (i, back) in echoed.iter().enumerate() {
            assert_eq!(back, &[i as u8; 8]);
        }
    });
}

#[test]
fn hyper_s_client_from_fibers_talks_to_a_spindle_http_server() {
    use http_body_util::{BodyExt, Full};
    within(Duration::from_secs(60), || {
        let rt = spindle::Runtime::builder().workers(2).build().unwrap();
        let addr = rt.run(|| {
            let server = spindle_http::Server::bind("127.0.0.1:0").unwrap();
            let addr = server.local_addr().unwrap();
            spindle::spawn(move || {
                server.serve(|req| {
                    let path = req.uri().path().to_string();
                    let mut body = Vec::new();
                    req.into_body().read_to_end(&mut body).unwrap();
                    let text = format!("{path} {}", body.len());
                    spindle_http::Response::new(spindle_http::Body::from(text))
                })
            });
            addr
        });
        let answers = rt.run(move || {
            let clients: Vec<_> = (0..20usize)
                .map(|i| {
                    spindle::spawn(move || {
                        spindle::block_on(async move {
                            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                            let io = hyper_util::rt::TokioIo::new(tcp);
                            let (mut send, conn) =
                                hyper::client::conn::http1::handshake(io).await.unwrap();
                            tokio::spawn(conn);
                            let mut got = Vec::new();
                            // Two requests on the connection: a GET, a POST.
                            for (method, body) in [("GET", 0), ("POST", i * 100)] {
                                let req = hyper::Request::builder()
                                    .method(method)
                                    .uri(format!("/r{i}"))
                                    .header("host", "localhost")
                                    .body(Full::new(bytes_of(body)))
                                    .unwrap();
                                // hyper's connection task takes the previous
                                // exchange to its end on its own time: a
                                // request sent before it is ready again is
                                // refused ("connection was not ready").
                                send.ready().await.unwrap();
                                let resp = send.send_request(req).await.unwrap();
                                assert_eq!(resp.status(), 200);
                                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                                got.push(String::from_utf8(bytes.to_vec()).unwrap());
                            }
                            got
                        })
                    })
                })
                .collect();
            clients
                .into_iter()
                .map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (i, got) in answers.iter().enumerate() {
            assert_eq!(got, &[format!("/r{i} 0"), format!("/r{i} {}", i * 100)]);
        }
    });
}

fn bytes_of(n: usize) -> hyper::body::Bytes {
    hyper::body::Bytes::from(vec![b'x'; n])
}

#[test]
fn cancelling_a_fiber_in_a_tokio_wait_ends_it_and_drops_the_future() {
    within(Duration::from_secs(60), || {
        struct Dropped(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = dropped.clone();
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        rt.run(move || {
            let waiter = spindle::spawn(move || {
                let guard = Dropped(d);
                spindle::block_on(async move {
                    let _guard = guard;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                })
            });
            spindle::time::sleep(Duration::from_millis(20));
            waiter.cancel();
            assert!(waiter.join().unwrap_err().is_cancelled());
        });
        assert!(
            dropped.load(std::sync::atomic::Ordering::SeqCst),
            "the future was dropped"
        );
    });
}

#[test]
fn a_runtime_given_with_tokio_handle_is_the_one_used() {
    within(Duration::from_secs(60), || {
        let own = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("my-tokio")
            .enable_all()
            .build()
            .unwrap();
        let rt = spindle::Runtime::builder()
            .workers(1)
            .tokio_handle(own.handle().clone())
            .build()
            .unwrap();
        let ran_on = rt.run(|| {
            // A task spawned from a fiber runs on the given runtime.
            let task = tokio::spawn(async { std::thread::current().name().map(str::to_owned) });
            spindle::block_on(task).unwrap()
        });
        assert_eq!(ran_on.as_deref(), Some("my-tokio"));
        // Off the workers, block_on enters the shared runtime for the call:
        // a future made inside it (an `async` block) finds its context.
        spindle::block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        assert!(spindle::compat::tokio::handle().block_on(async { true }));
    });
}

/// Connects a tokio-postgres client; its connection task runs on the
/// tokio runtime the fiber's worker is in.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

#[test]
fn a_hundred_postgres_sleeps_on_one_worker_overlap_and_a_cancelled_query_wedges_nothing() {
    within(Duration::from_secs(120), || {
        let pg = Postgres::start();
        let url = pg.url();
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let started = Instant::now();
        rt.run(move || {
            let handles: Vec<_> = (0..100)
                .map(|_| {
                    let url = url.clone();
                    spindle::spawn(move || {
                        spindle::block_on(async move {
                            let client = connect(&url).await;
                            client.query_one("SELECT pg_sleep(0.5)", &[]).await.unwrap();
                        })
                    })
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap());
            // A bound for what this catches (one worker blocked per query
            // would take 50 s), not a measurement.
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{:?}",
                started.elapsed()
            );

            // A query cancelled with its fiber: the client is not wedged —
            // after a cancel request to the server it answers at once.
            let client = std::sync::Arc::new(spindle::block_on(connect(&url)));
            let c = client.clone();
            let long = spindle::spawn(move || {
                spindle::block_on(async move { c.query_one("SELECT pg_sleep(60)", &[]).await })
            });
            spindle::time::sleep(Duration::from_millis(200));
            long.cancel();
            assert!(long.join().unwrap_err().is_cancelled());
            let token = client.cancel_token();
            spindle::block_on(async move { token.cancel_query(tokio_postgres::NoTls).await })
                .unwrap();
            let asked = Instant::now();
            let row =
                spindle::block_on(async move { client.query_one("SELECT 1::INT4", &[]).await })
                    .unwrap();
            assert_eq!(row.get::<_, i32>(0), 1);
            assert!(
                asked.elapsed() < Duration::from_secs(10),
                "the client stayed wedged"
            );
        });
        drop(pg);
    });
}
