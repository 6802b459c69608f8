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
    assert_eq!(err.kind(), spindle_http::ErrorKind::Connect);
    assert!(err.is_connect() && !err.is_timeout());
    assert_eq!(
        std::io::Error::from(err).kind(),
        std::io::ErrorKind::ConnectionRefused
    );
}

/// A hand-written peer: `per_conn` runs on a thread of its own for every
/// connection accepted; returns the address and a count of connections.
fn raw_server(
    per_conn: impl Fn(std::net::TcpStream) + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    let per_conn = Arc::new(per_conn);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let f = per_conn.clone();
            std::thread::spawn(move || f(s));
        }
    });
    (addr, conns)
}

/// `GET url` and its whole body; a failure of either, as the typed error
/// (a body's read error holds it).
fn fetch(client: &Client, url: &str) -> Result<Vec<u8>, spindle_http::Error> {
    let resp = client.get(url)?;
    resp.into_body().into_vec().map_err(|io| {
        *io.into_inner()
            .and_then(|inner| inner.downcast::<spindle_http::Error>().ok())
            .expect("a body error holds the typed error")
    })
}

/// A raw server that answers every request head it receives with `reply`.
fn lying_server(reply: &'static [u8]) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    raw_server(move |mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(reply).is_err() {
                return;
            }
        }
    })
}

#[test]
fn a_server_that_lies_about_lengths_gets_an_error_not_a_panic() {
    use spindle_http::ErrorKind::{BodyTooLarge as FileTooLarge, Parse as InvalidData};
    let cases: [(&str, &'static [u8], spindle_http::ErrorKind); 6] = [
        (
            "a chunk size of 2^64-1 after a first chunk (past the size cap)",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n",
            FileTooLarge,
        ),
        (
            "a signed length",
            b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
            InvalidData,
        ),
        (
            "a length with a suffix",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello",
            InvalidData,
        ),
        (
            "two different lengths",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 2\r\n\r\nhello",
            InvalidData,
        ),
        (
            "a list of lengths, even equal ones",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
            InvalidData,
        ),
        (
            "a chunk size line with a bare LF",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x\ny\r\nhello\r\n0\r\n\r\n",
            InvalidData,
        ),
    ];
    for (what, reply, kind) in cases {
        let (addr, _) = lying_server(reply);
        // A lie in the head fails the request; one in the body fails the
        // body's read (the body streams), with the same typed error inside.
        let e = fetch(&Client::new(), &format!("http://{addr}/")).expect_err(what);
        assert_eq!(e.kind(), kind, "{what}: {e}");
        // It converts to the matching I/O error for `?` in io::Result code.
        let io_kind = std::io::Error::from(e).kind();
        let want = if kind == FileTooLarge {
            std::io::ErrorKind::FileTooLarge
        } else {
            std::io::ErrorKind::InvalidData
        };
        assert_eq!(io_kind, want, "{what}");
    }
}

#[test]
fn an_endless_chunk_size_line_is_refused_without_buffering_it() {
    let sent = Arc::new(AtomicUsize::new(0));
    let s2 = sent.clone();
    let (addr, _) = raw_server(move |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1");
        let junk = [b'0'; 4096];
        // Up to 18 MiB of size line; stops when the client hangs up.
        for _ in 0..(18 << 8) {
            if s.write_all(&junk).is_err() {
                return;
            }
            s2.fetch_add(junk.len(), Ordering::SeqCst);
        }
    });
    let e =
        fetch(&Client::new(), &format!("http://{addr}/")).expect_err("an endless line is an error");
    assert_eq!(e.kind(), spindle_http::ErrorKind::Parse, "{e}");
    assert!(
        sent.load(Ordering::SeqCst) < 4 << 20,
        "refused after a bounded read, not after the whole line"
    );
}

#[test]
fn connection_close_in_a_list_is_not_reused_and_gzip_chunked_is_dechunked() {
    let (addr, conns) = lying_server(
        b"HTTP/1.1 200 OK\r\nConnection: x, close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    let client = Client::new();
    for _ in 0..2 {
        let resp = client.get(&format!("http://{addr}/")).unwrap();
        assert_eq!(
            resp.into_body().into_vec().unwrap(),
            b"abc",
            "the chunk framing is removed"
        );
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "a closing connection is not pooled"
    );
}

#[test]
fn a_pooled_connection_that_receives_bytes_while_idle_is_dropped() {
    let (addr, conns) = raw_server(|mut s| {
        let mut buf = [0u8; 4096];
        if s.read(&mut buf).unwrap_or(0) == 0 {
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        // Then, unasked, a second response on the idle connection.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!");
        while s.read(&mut buf).unwrap_or(0) > 0 {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let client = Client::new();
    let url = format!("http://{addr}/");
    let first = client.get(&url).unwrap().into_body().into_vec().unwrap();
    assert_eq!(first, b"ok");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let second = client.get(&url).unwrap().into_body().into_vec().unwrap();
    assert_eq!(
        second, b"ok",
        "the unsolicited bytes came back as a response"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "the dirty connection was dropped"
    );
}

#[test]
fn a_dripping_server_cannot_stretch_the_request_deadline() {
    let (addr, _) = raw_server(|mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        // One byte every 100 ms: each read is quick, the whole is not.
        for _ in 0..1000 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if s.write_all(b"x").is_err() {
                return;
            }
        }
    });
    let started = std::time::Instant::now();
    let client = Client::new().request_timeout(std::time::Duration::from_secs(1));
    let e = fetch(&client, &format!("http://{addr}/")).expect_err("the deadline passes");
    assert_eq!(e.kind(), spindle_http::ErrorKind::Timeout, "{e}");
    assert!(e.is_timeout());
    // A bound for the hang this catches (the drip would take 100 s), not
    // a measurement.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn only_an_idempotent_request_is_sent_again_after_a_silent_close() {
    // Each connection answers its first request, then reads the next one
    // and closes without a word (a server restarting, say).
    let posts = Arc::new(AtomicUsize::new(0));
    let p = posts.clone();
    let (addr, conns) = raw_server(move |mut s| {
        let mut buf = [0u8; 4096];
        for answered in [true, false] {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return;
            }
            if buf[..n].starts_with(b"POST") {
                p.fetch_add(1, Ordering::SeqCst);
            }
            if answered {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
        }
        // Dropped: closed without answering the second request.
    });
    let client = Client::new();
    let url = format!("http://{addr}/");
    assert_eq!(
        client.get(&url).unwrap().into_body().into_vec().unwrap(),
        b"ok"
    );
    let e = client
        .post(&url, "once")
        .expect_err("a POST is not sent twice");
    assert_eq!(e.kind(), spindle_http::ErrorKind::Closed, "{e}");
    assert!(e.is_closed());
    assert_eq!(
        posts.load(Ordering::SeqCst),
        1,
        "the server saw the POST once"
    );
    assert_eq!(
        client.get(&url).unwrap().into_body().into_vec().unwrap(),
        b"ok"
    );
    // The same silent close under a GET: retried on a fresh connection.
    assert_eq!(
        client.get(&url).unwrap().into_body().into_vec().unwrap(),
        b"ok"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 3);
}

#[test]
fn a_large_body_streams_before_the_server_has_sent_it_all() {
    // The server sends the head and 1 MiB, then waits for the client to
    // say it has read the first bytes before it sends the other 7 MiB: a
    // client that collected the body before returning would wait forever.
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel::<()>();
    let go_on_rx = std::sync::Mutex::new(go_on_rx);
    let (addr, _) = raw_server(move |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let mib = vec![b'x'; 1 << 20];
        let _ = s.write_all(
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 8 << 20).as_bytes(),
        );
        let _ = s.write_all(&mib);
        let _ = go_on_rx
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(20));
        for _ in 1..8 {
            if s.write_all(&mib).is_err() {
                return;
            }
        }
    });
    let rt = Runtime::builder().workers(1).build().unwrap();
    let total = rt.run(move || {
        let resp = Client::new().get(&format!("http://{addr}/")).unwrap();
        let mut body = resp.into_body();
        let mut first = [0u8; 4096];
        let n = body.read(&mut first).unwrap();
        assert!(n > 0 && first[..n].iter().all(|&b| b == b'x'));
        go_on_tx.send(()).unwrap();
        let mut rest = Vec::new();
        body.read_to_end(&mut rest).unwrap();
        n + rest.len()
    });
    assert_eq!(total, 8 << 20);
}

#[test]
fn a_body_read_to_its_end_frees_the_connection_and_a_dropped_one_closes_it() {
    let (addr, conns) = raw_server(|mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0
                || s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                    .is_err()
            {
                return;
            }
        }
    });
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(move || {
        let client = Client::new();
        let url = format!("http://{addr}/");
        // Read to its end twice: one connection serves both.
        for _ in 0..2 {
            assert_eq!(fetch(&client, &url).unwrap(), b"hello");
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        // Dropped unread: that connection is not reused.
        drop(client.get(&url).unwrap());
        assert_eq!(fetch(&client, &url).unwrap(), b"hello");
        assert_eq!(conns.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_response_over_the_size_cap_is_refused() {
    let (addr, _) = lying_server(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
    let client = Client::new().max_response_bytes(10);
    let e = fetch(&client, &format!("http://{addr}/")).expect_err("over the cap");
    assert!(e.is_body_too_large(), "{e}");
    let (addr, _) = lying_server(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n",
    );
    let e = fetch(&client, &format!("http://{addr}/")).expect_err("chunks over the cap");
    assert!(e.is_body_too_large(), "{e}");
}

/// A request body fed through a fiber-aware channel: each read waits for
/// the next piece; an `Err` piece is a failing body.
struct Fed(spindle::chan::Receiver<Result<Vec<u8>, ()>>, Vec<u8>);

impl Read for Fed {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.1.is_empty() {
            match self.0.recv() {
                Ok(Ok(piece)) => self.1 = piece,
                Ok(Err(())) => return Err(std::io::Error::other("the body's producer failed")),
                Err(_) => return Ok(0), // closed: the end
            }
        }
        let n = self.1.len().min(out.len());
        out[..n].copy_from_slice(&self.1[..n]);
        self.1.drain(..n);
        Ok(n)
    }
}

/// Echoes the request body back as it arrives (the head goes out first).
fn streaming_echo(req: Request<Body>) -> Response<Body> {
    Response::new(Body::from_reader(req.into_body()))
}

#[test]
fn a_streamed_body_goes_out_while_the_response_comes_back() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = rt.run(|| {
        let s = Server::bind("127.0.0.1:0").unwrap();
        let a = s.local_addr().unwrap();
        spindle::spawn(move || s.serve(streaming_echo));
        a
    });
    let echoed = rt.run(move || {
        spindle::time::timeout(std::time::Duration::from_secs(20), move || {
            let (tx, rx) = spindle::chan::bounded(1);
            let req = Request::post(format!("http://{addr}/echo"))
                .body(Body::from_reader(Fed(rx, Vec::new())))
                .unwrap();
            // The head of the response comes back before any body byte
            // was produced: the producer waits for it (as a guest that
            // sends its head, awaits the answer, then writes its body).
            let resp = Client::new().request(req).unwrap();
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            let mut got = Vec::new();
            for piece in [&b"hello "[..], b"streamed ", b"world"] {
                tx.send(Ok(piece.to_vec())).unwrap();
                let mut buf = vec![0u8; piece.len()];
                body.read_exact(&mut buf).unwrap();
                got.extend_from_slice(&buf);
            }
            drop(tx);
            let mut rest = Vec::new();
            body.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
            got
        })
    });
    assert_eq!(echoed.expect("no deadlock"), b"hello streamed world");
}

#[test]
fn a_streamed_body_that_fails_midway_is_cut_off_not_taken_whole() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let addr = rt.run(|| {
        let s = Server::bind("127.0.0.1:0").unwrap();
        let a = s.local_addr().unwrap();
        spindle::spawn(move || s.serve(echo));
        a
    });
    let result = rt.run(move || {
        spindle::time::timeout(std::time::Duration::from_secs(20), move || {
            let (tx, rx) = spindle::chan::bounded(4);
            tx.send(Ok(b"part of it".to_vec())).unwrap();
            tx.send(Err(())).unwrap();
            let req = Request::post(format!("http://{addr}/whole"))
                .body(Body::from_reader(Fed(rx, Vec::new())))
                .unwrap();
            // The server never sees a complete body: no "/whole:10".
            match Client::new().request(req) {
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.into_body().into_vec().map(String::from_utf8);
                    format!("{status} {text:?}")
                }
                Err(e) => format!("error {e}"),
            }
        })
    });
    let result = result.expect("no hang");
    assert!(
        !result.contains("/whole:10"),
        "a cut-off body was taken whole: {result}"
    );
}
