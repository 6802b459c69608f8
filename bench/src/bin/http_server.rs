//! Plaintext `Hello, World!` servers for `bench/http.py`:
//! `http_server <spindle|hyper> ADDR`, one worker thread each. Prints
//! `LISTENING <addr>`.

use std::io::Write;

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("spindle|hyper");
    let addr = a.next().unwrap_or_else(|| "127.0.0.1:0".into());
    match which.as_str() {
        "spindle" => {
            let rt = spindle::Runtime::builder()
                .workers(1)
                .stall_warning(None)
                .build()
                .unwrap();
            rt.block_on(move || {
                let server = spindle_http::Server::bind(addr.as_str()).unwrap();
                println!("LISTENING {}", server.local_addr().unwrap());
                let _ = std::io::stdout().flush();
                server
                    .serve(|_req| spindle_http::Response::new(spindle_http::Body::from("Hello, World!")))
                    .unwrap();
            });
        }
        "hyper" => {
            use http_body_util::Full;
            use hyper::server::conn::http1;
            use hyper::service::service_fn;
            use hyper_util::rt::TokioIo;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind(addr.as_str()).await.unwrap();
                println!("LISTENING {}", l.local_addr().unwrap());
                let _ = std::io::stdout().flush();
                loop {
                    let Ok((s, _)) = l.accept().await else { continue };
                    let _ = s.set_nodelay(true);
                    tokio::spawn(async move {
                        let svc = service_fn(|_req| async {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                bytes::Bytes::from_static(b"Hello, World!"),
                            )))
                        });
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
                    });
                }
            });
        }
        other => panic!("unknown server {other}"),
    }
}
