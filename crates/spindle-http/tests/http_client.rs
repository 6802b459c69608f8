//! The client against spindle-http's server and against a hand-written
//! server that counts connections and closes idle ones.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use spindle::Runtime;
use spindle_http::{Body, Client, Request, Response, Server};

fn echo(req: Request<Body>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path == "/chunked" {
        return Response::new(Body::from_reader(std::io::Cursor::new(vec![b'z'; 50_000])));
    }
    let body = req.into_body().into_vec().unwrap();
    Response::new(Body::from(format!("{path}:{}", body.len())))
}

#[test]
fn get_post_and_chunked_responses_from_fibers_and_threads() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = rt.run(|| {
        let s = Server::bind("127.0.0.1:0").unwrap();
        let a = s.local_addr().unwrap();
        spindle::spawn(move || s.serve(echo));
        a
    });
    let client = Client::new();
    let c = client.clone();
    let from_fiber = rt.run(move || {
        let r = c.get(&format!("http://{addr}/a")).unwrap();
        assert_eq!(r.status(), 200);
        let posted = c.post(&format!("http://{addr}/p"), "hello").unwrap();
        let chunked = c.get(&format!("http://{addr}/chunked")).unwrap();
        (
            r.into_body().into_vec().unwrap(),
            posted.into_body().into_vec().unwrap(),
            chunked.into_body().into_vec().unwrap().len(),
        )
    });
    assert_eq!(from_fiber, (b"/a:0".to_vec(), b"/p:5".to_vec(), 50_000));
    // The same client from a plain thread.
    let r = client.get(&format!("http://{addr}/t")).unwrap();
    assert_eq!(r.into_body().into_vec().unwrap(), b"/t:0");
    assert!(
        client.get("https://example.invalid/").is_err(),
        "https is refused, not attempted"
    );
}

/// A minimal keep-alive HTTP server on spindle sockets that counts the
/// connections it accepts and, if `close_after_each`, closes every
/// connection after its response (as an idle timeout would).
fn counting_server(
    rt: &Runtime,
    close_after_each: bool,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let a2 = accepted.clone();
    let addr = rt.run(move || {
        let l = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        spindle::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                a2.fetch_add(1, Ordering::SeqCst);
                spindle::spawn(move || {
                    let mut buf = Vec::new();
                    let mut tmp = [0u8; 4096];
                    loop {
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut tmp) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&tmp[..n]),
                            }
                        }
                        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        buf.drain(..end);
                        if conn
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                        if close_after_each {
                            return;
                        }
                    }
                });
            }
        });
        addr
    });
    (addr, accepted)
}

#[test]
fn the_pool_reuses_one_connection() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, accepted) = counting_server(&rt, false);
    let client = Client::new();
    rt.run(move || {
        for _ in 0..20 {
            let r = client.get(&format!("http://{addr}/")).unwrap();
            assert_eq!(r.into_body().into_vec().unwrap(), b"ok");
        }
    });
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn a_server_that_closes_idle_connections_is_retried_on_a_fresh_one() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (addr, accepted) = counting_server(&rt, true);
    let client = Client::new();
    rt.run(move || {
        for _ in 0..5 {
            let r = client.get(&format!("http://{addr}/")).unwrap();
            assert_eq!(r.into_body().into_vec().unwrap(), b"ok");
            spindle::time::sleep(std::time::Duration::from_millis(5));
        }
    });
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        5,
        "a fresh connection each time, no error"
    );
}

#[test]
fn connection_refused_is_an_error_not_a_hang() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new();
    let err = client
        .get(&format!("http://127.0.0.1:{port}/"))
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
}
