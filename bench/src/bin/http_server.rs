//! Plaintext `Hello, World!` servers for `bench/http.py`, `bench/h2.py`
//! and `bench/accept.py`:
//! `http_server <spindle|hyper|may|spindle-tls|hyper-tls|hyper-auto|hyper-auto-tls> ADDR`,
//! one worker thread each unless `BENCH_WORKERS` says more; for spindle,
//! `BENCH_ACCEPT` picks the accept mode (`shared`, `per-worker`,
//! `round-robin`). Prints `LISTENING <addr>`. The TLS variants read
//! `cert.pem` and `key.pem` from the directory in `$BENCH_TLS_DIR`; both
//! use rustls with the ring provider and the same configuration. The
//! `hyper-auto` variants are hyper-util's auto builder: HTTP/1.1 and h2c
//! by prior knowledge on one port (over TLS, HTTP/2 by ALPN), with the
//! accept loop in a spawned task, as hyper's examples do. Every server
//! answers as `crates/spindle-http/examples/hello.rs` does: `Hello, World!`
//! with `content-type: text/plain` — or, with `BENCH_BODY=N` (spindle and
//! hyper), a full body of N bytes, one shared buffer cloned per request,
//! as a server answering from a cache does.

use std::io::Write;
use std::sync::Arc;

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("spindle|hyper|may|spindle-tls|hyper-tls");
    let addr = a.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let tls = || {
        let dir = std::path::PathBuf::from(std::env::var("BENCH_TLS_DIR").expect("BENCH_TLS_DIR"));
        spindle_http::tls::server_config_from_pem_files(dir.join("cert.pem"), dir.join("key.pem"))
            .unwrap()
    };
    match which.as_str() {
        "spindle" => spindle(addr, None),
        "spindle-tls" => spindle(addr, Some(tls())),
        "hyper" => hyper(addr, None),
        "hyper-tls" => hyper(addr, Some(tokio_rustls::TlsAcceptor::from(tls()))),
        "may" => may(addr),
        "hyper-auto" => hyper_auto(addr, None),
        "hyper-auto-tls" => {
            let mut config = (*tls()).clone();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            hyper_auto(
                addr,
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            )
        }
        other => panic!("unknown server {other}"),
    }
}

fn listening(addr: impl std::fmt::Display) {
    println!("LISTENING {addr}");
    let _ = std::io::stdout().flush();
}

/// `BENCH_WORKERS`, default 1.
fn workers() -> usize {
    std::env::var("BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1)
}

fn spindle(addr: String, tls: Option<Arc<spindle_http::tls::rustls::ServerConfig>>) {
    let mode = match std::env::var("BENCH_ACCEPT").as_deref() {
        Ok("per-worker") => spindle::net::AcceptMode::PerWorker,
        Ok("round-robin") => spindle::net::AcceptMode::RoundRobin,
        _ => spindle::net::AcceptMode::Shared,
    };
    let rt = spindle::Runtime::builder()
        .workers(workers())
        .stall_warning(None)
        .build()
        .unwrap();
    rt.run(move || {
        let mut server = spindle_http::Server::bind_with(addr.as_str(), mode).unwrap();
        if let Some(tls) = tls {
            server = server.tls(tls);
        }
        listening(server.local_addr().unwrap());
        let body = big_body();
        server
            .serve(move |_req| {
                let mut r = spindle_http::Response::new(match &body {
                    Some(b) => spindle_http::Body::from(b.clone()),
                    None => spindle_http::Body::from("Hello, World!"),
                });
                r.headers_mut().insert(
                    spindle_http::http::header::CONTENT_TYPE,
                    spindle_http::http::HeaderValue::from_static("text/plain"),
                );
                r
            })
            .unwrap();
    });
}

/// `BENCH_BODY`'s body, if it is set.
fn big_body() -> Option<bytes::Bytes> {
    let n: usize = std::env::var("BENCH_BODY")
        .ok()?
        .parse()
        .expect("BENCH_BODY: a size");
    Some(bytes::Bytes::from(vec![b'x'; n]))
}

/// The hyper servers' answer: what `examples/hello.rs` answers (or
/// `BENCH_BODY`'s body).
fn hello() -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    static BODY: std::sync::OnceLock<Option<bytes::Bytes>> = std::sync::OnceLock::new();
    let body = BODY
        .get_or_init(big_body)
        .clone()
        .unwrap_or_else(|| bytes::Bytes::from_static(b"Hello, World!"));
    let mut r = hyper::Response::new(http_body_util::Full::new(body));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    r
}

fn hyper(addr: String, tls: Option<tokio_rustls::TlsAcceptor>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(addr.as_str()).await.unwrap();
        listening(l.local_addr().unwrap());
        // The accept loop in a spawned task, as hyper's examples run it:
        // `block_on`'s own future is not polled by the worker.
        let accept = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc =
                        service_fn(|_req| async { Ok::<_, std::convert::Infallible>(hello()) });
                    match tls {
                        None => {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await;
                        }
                        Some(acceptor) => {
                            let Ok(s) = acceptor.accept(s).await else {
                                return;
                            };
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await;
                        }
                    }
                });
            }
        });
        let _ = accept.await;
    });
}

fn hyper_auto(addr: String, tls: Option<tokio_rustls::TlsAcceptor>) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(addr.as_str()).await.unwrap();
        listening(l.local_addr().unwrap());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc =
                        service_fn(|_req| async { Ok::<_, std::convert::Infallible>(hello()) });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                        }
                        Some(acceptor) => {
                            let Ok(s) = acceptor.accept(s).await else {
                                return;
                            };
                            let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                });
            }
        });
        let _ = accept.await;
    });
}

fn may(addr: String) {
    use may_minihttp::{HttpServer, HttpService, Request, Response};
    #[derive(Clone)]
    struct Hello;
    impl HttpService for Hello {
        fn call(&mut self, _req: Request, rsp: &mut Response) -> std::io::Result<()> {
            rsp.header("Content-Type: text/plain");
            rsp.body("Hello, World!");
            Ok(())
        }
    }
    may::config().set_workers(workers());
    // may_minihttp cannot report its port: the caller picks one.
    let server = HttpServer(Hello).start(addr.as_str()).unwrap();
    listening(&addr);
    let _ = server.join();
}
