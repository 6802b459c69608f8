//! Response bodies given as an `http_body::Body` (`Body::from_http_body`),
//! against raw sockets and Python's http.client: framed by an exact size
//! hint with `Content-Length` (as hyper does), else chunked with trailers;
//! the head out before a wait for data; bodies that lie about their size,
//! fail or panic cut their own response off and nothing else.

mod common;

use common::{python, raw};

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use spindle::Runtime;
use spindle_http::http::HeaderMap;
use spindle_http::http_body::{Body as HttpBody, Frame, SizeHint};
use spindle_http::{Body, Request, Response, Server};

/// What a [`Fed`] body gives next.
enum Item {
    Data(&'static [u8]),
    Trailers(&'static str, &'static str),
    Fail,
    Panic,
}

/// A body fed from outside (the test, another thread): each poll takes
/// the next item, or waits for one until the feed is closed.
#[derive(Clone, Default)]
struct Feed(Arc<Mutex<FeedState>>);

#[derive(Default)]
struct FeedState {
    items: VecDeque<Item>,
    closed: bool,
    waker: Option<Waker>,
}

impl Feed {
    fn push(&self, item: Item) {
        let mut s = self.0.lock().unwrap();
        s.items.push_back(item);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    fn close(&self) {
        let mut s = self.0.lock().unwrap();
        s.closed = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

struct Fed {
    feed: Feed,
    size: Option<u64>,
}

impl HttpBody for Fed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let mut s = self.feed.0.lock().unwrap();
        match s.items.pop_front() {
            Some(Item::Data(d)) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(d))))),
            Some(Item::Trailers(name, value)) => {
                let mut t = HeaderMap::new();
                t.insert(name, value.parse().unwrap());
                Poll::Ready(Some(Ok(Frame::trailers(t))))
            }
            Some(Item::Fail) => Poll::Ready(Some(Err(std::io::Error::other("feed failed")))),
            Some(Item::Panic) => {
                drop(s);
                panic!("a body that panics");
            }
            None if s.closed => Poll::Ready(None),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.size
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// A fed body whose items are all there already.
fn ready(items: Vec<Item>, size: Option<u64>) -> Body {
    let feed = Feed::default();
    for item in items {
        feed.push(item);
    }
    feed.close();
    Body::from_http_body(Fed { feed, size })
}

/// Routes: `/exact` "hello" with its size; `/unsized` "hello" chunked,
/// then a trailer; `/short` declares 10 and gives 5; `/long` declares 5
/// and gives 10; `/fail` fails after its first piece; `/panic` panics
/// after it; `/waits` takes its body from the feed the test holds.
fn handler(waiting: Feed) -> impl Fn(Request<Body>) -> Response<Body> + Send + Sync + 'static {
    move |req| {
        let body = match req.uri().path() {
            "/exact" => ready(vec![Item::Data(b"hel"), Item::Data(b"lo")], Some(5)),
            "/unsized" => ready(
                vec![
                    Item::Data(b"hel"),
                    Item::Data(b"lo"),
                    Item::Trailers("x-check", "done"),
                ],
                None,
            ),
            "/short" => ready(vec![Item::Data(b"hello")], Some(10)),
            "/long" => ready(vec![Item::Data(b"hello"), Item::Data(b"world")], Some(5)),
            "/fail" => ready(vec![Item::Data(b"hello"), Item::Fail], None),
            "/panic" => ready(vec![Item::Data(b"hello"), Item::Panic], Some(10)),
            "/waits" => Body::from_http_body(Fed {
                feed: waiting.clone(),
                size: Some(11),
            }),
            _ => Body::from("other"),
        };
        Response::new(body)
    }
}

fn start(rt: &Runtime, waiting: Feed) -> SocketAddr {
    rt.run(move || {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        spindle::spawn(move || server.serve(handler(waiting)));
        addr
    })
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn an_exact_size_goes_out_as_content_length_and_an_unknown_one_chunked_with_trailers() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, Feed::default());
    // Pipelined on one connection: both answers, each framed by its body.
    let r = raw(
        addr,
        b"GET /exact HTTP/1.1\r\nHost: a\r\n\r\nGET /unsized HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let (first, second) = r.split_at(r.find("HTTP/1.1 200 OK\r\n").unwrap() + 1);
    let second_at = second.find("HTTP/1.1 200 OK\r\n").expect("two responses");
    let (first, second) = (
        format!("H{}", &first[1..]) + &second[..second_at],
        &second[second_at..],
    );
    assert!(first.contains("content-length: 5\r\n"), "{first}");
    assert!(!first.contains("transfer-encoding"), "{first}");
    assert!(first.ends_with("\r\n\r\nhello"), "{first}");
    assert!(
        second.contains("transfer-encoding: chunked\r\n"),
        "{second}"
    );
    assert!(!second.contains("content-length"), "{second}");
    assert!(
        second.ends_with("\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nx-check: done\r\n\r\n"),
        "{second:?}"
    );
    // A strict client reads both the same way, and HEAD gets the size
    // without the body, on a connection that stays usable.
    let out = python(&format!(
        r#"
import http.client
c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=10)
for path in ["/exact", "/unsized", "/exact"]:
    c.request("GET", path)
    r = c.getresponse()
    assert r.read() == b"hello", path
c.request("HEAD", "/exact")
r = c.getresponse()
assert r.getheader("content-length") == "5", r.getheaders()
assert r.read() == b""
c.request("GET", "/other")
assert c.getresponse().read() == b"other"
print("ok")
"#,
        port = addr.port()
    ));
    assert_eq!(out.trim(), "ok");
}

#[test]
fn the_head_goes_out_before_a_wait_for_the_first_data() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let feed = Feed::default();
    let addr = start(&rt, feed.clone());
    let mut s = connect(addr);
    s.write_all(b"GET /waits HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // The body has nothing yet: the head must arrive on its own.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed before the head");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.contains("content-length: 11\r\n"), "{head}");
    // Then the data, as it is fed (the body wakes the connection's fiber
    // from another thread).
    let feeder = {
        let feed = feed.clone();
        std::thread::spawn(move || {
            feed.push(Item::Data(b"hello "));
            std::thread::sleep(Duration::from_millis(20));
            feed.push(Item::Data(b"world"));
            feed.close();
        })
    };
    let mut body = [0u8; 11];
    s.read_exact(&mut body).unwrap();
    assert_eq!(&body, b"hello world");
    feeder.join().unwrap();
    // The connection is still good for the next request.
    s.write_all(b"GET /exact HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert!(rest.ends_with("hello"), "{rest}");
}

/// Every declared byte sent is the whole message: the body's end is not
/// waited for (what hyper does), so a body whose writer closes it late —
/// here never — holds up neither the client nor the next request on the
/// connection.
#[test]
fn a_body_with_all_its_declared_bytes_out_is_done_without_its_end() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let feed = Feed::default();
    let addr = start(&rt, feed.clone());
    // `/waits` declares 11: all of them, and the feed left open.
    feed.push(Item::Data(b"hello "));
    feed.push(Item::Data(b"world"));
    let r = raw(
        addr,
        b"GET /waits HTTP/1.1\r\nHost: a\r\n\r\nGET /exact HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.matches("HTTP/1.1 200").count(), 2, "{r:?}");
    assert!(
        r.contains("content-length: 11\r\n\r\nhello worldHTTP/1.1 200"),
        "{r:?}"
    );
    assert!(r.ends_with("\r\n\r\nhello"), "{r:?}");
    feed.close();
}

/// A body shorter or longer than its size, one that fails, one that
/// panics: each response is cut off (the client sees an incomplete
/// message, never a wrong one; a longer body is cut at its size) and the
/// server goes on serving.
#[test]
fn bodies_that_lie_fail_or_panic_cut_their_response_off_and_nothing_else() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, Feed::default());
    let short = raw(addr, b"GET /short HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(short.contains("content-length: 10\r\n"), "{short}");
    assert!(short.ends_with("\r\n\r\nhello"), "{short:?}");
    // Longer than declared: nothing past the declared size is sent, and
    // the connection closes (the pipelined request after it is not read).
    let long = raw(
        addr,
        b"GET /long HTTP/1.1\r\nHost: a\r\n\r\nGET /exact HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert!(long.contains("content-length: 5\r\n"), "{long}");
    assert!(long.ends_with("\r\n\r\nhello"), "{long:?}");
    assert_eq!(long.matches("HTTP/1.1").count(), 1, "{long:?}");
    // Failed mid-body: a chunked body without its last chunk.
    let failed = raw(addr, b"GET /fail HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(failed.ends_with("\r\n\r\n5\r\nhello\r\n"), "{failed:?}");
    let panicked = raw(addr, b"GET /panic HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(panicked.contains("content-length: 10\r\n"), "{panicked}");
    assert!(panicked.ends_with("\r\n\r\nhello"), "{panicked:?}");
    // A strict client calls each of them incomplete.
    let out = python(&format!(
        r#"
import http.client
for path in ["/short", "/fail", "/panic"]:
    c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=10)
    c.request("GET", path)
    try:
        body = c.getresponse().read()
        raise SystemExit("%s read whole: %r" % (path, body))
    except http.client.IncompleteRead:
        pass
    c.close()
print("ok")
"#,
        port = addr.port()
    ));
    assert_eq!(out.trim(), "ok");
    let after = raw(
        addr,
        b"GET /exact HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(after.ends_with("\r\n\r\nhello"), "{after}");
}

#[test]
fn an_http_1_0_client_gets_the_body_until_the_close() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, Feed::default());
    let r = raw(addr, b"GET /unsized HTTP/1.0\r\n\r\n");
    assert!(!r.contains("transfer-encoding"), "{r}");
    assert!(r.ends_with("\r\n\r\nhello"), "{r:?}");
}

#[test]
fn over_http2_the_exact_size_is_the_content_length() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let addr = start(&rt, Feed::default());
    let get = |path: &str| {
        let out = Command::new("curl")
            .args(["-s", "-i", "--http2-prior-knowledge", "--max-time", "10"])
            .arg(format!("http://{addr}{path}"))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let exact = get("/exact");
    assert!(exact.starts_with("HTTP/2 200"), "{exact}");
    assert!(exact.contains("content-length: 5\r\n"), "{exact}");
    assert!(exact.ends_with("\r\n\r\nhello"), "{exact:?}");
    let unsized_ = get("/unsized");
    assert!(!unsized_.contains("content-length"), "{unsized_}");
    assert!(unsized_.contains("\r\n\r\nhello"), "{unsized_:?}");
}
