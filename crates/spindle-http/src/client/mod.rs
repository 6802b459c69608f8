//! [`Client`]: HTTP/1.1 and HTTP/2 requests from fibers (they park) or
//! plain threads (they block), with a keep-alive connection pool per
//! origin for HTTP/1.1 and one shared connection per origin for HTTP/2.
//!
//! A response is read whole before it is returned, so its connection goes
//! back to the pool at once. A pooled connection the server has closed
//! meanwhile (an idle timeout) is detected when the request on it gets no
//! response bytes at all; the request is then sent once more on a fresh
//! connection.
//!
//! `https://` runs TLS (rustls) over the same socket, the handshake under
//! the connect timeout; the server's certificate is checked against the
//! Mozilla roots of `webpki-roots`, or against the roots given to
//! [`Client::tls_config`].

//!
//! # Files
//!
//! - this file: the API, and the retry policy (which failures send a
//!   request again on a fresh connection).
//! - `pool.rs`: idle HTTP/1.1 connections by origin.
//! - `h2.rs`: the HTTP/2 connection of each origin, its requests, and
//!   which of their failures may be sent again.
//! - `connect.rs`: a new connection, TCP then TLS, in the protocol ALPN
//!   (or prior knowledge) chose.
//! - `exchange.rs`: one request and its response on a connection, the
//!   response body read as the caller reads it.

mod connect;
mod exchange;
mod h2;
mod pool;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};

use self::exchange::{encode_head, is_no_response, pump_chunked, Conn, Limits};
use self::h2::{Connections, Failure, Route};
use self::pool::{origin_of, Origin, Pool};
use crate::body::Body;
use crate::error::{Error, ErrorKind};
use crate::h1::encode;
use crate::stream::Stream;

/// An HTTP/1.1 and HTTP/2 client with a connection pool.
///
/// Over `https://` it offers HTTP/2 by ALPN and speaks what the server
/// chooses; every request to an HTTP/2 origin shares one connection (a
/// stream each, its caller's fiber parked on it). `http://` is HTTP/1.1
/// unless [`http2_prior_knowledge`](Self::http2_prior_knowledge) says the
/// server speaks h2c.
///
/// A response's body is read from its connection as the caller reads it
/// (`Response<Body>` implements `Read` through its body), so a large
/// download streams; the connection goes back to the pool once the body is
/// read to its end, and is closed if the body is dropped before.
///
/// ```no_run
/// let client = spindle_http::Client::new();
/// let resp = client.get("http://127.0.0.1:8080/").unwrap();
/// assert!(resp.status().is_success());
/// ```
#[derive(Clone)]
pub struct Client {
    pool: Pool,
    h2: Connections,
    /// The TLS configuration as a new connection offers it (`None`: the
    /// default roots, offering `h2` and `http/1.1`).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The same offering `http/1.1` only, for the HTTP/1.1 pool.
    tls_http1: Arc<rustls::ClientConfig>,
    http2: bool,
    prior_knowledge: bool,
    connect_timeout: Duration,
    limits: Limits,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    /// A client with a 10 s connect timeout, a 30 s timeout for each read
    /// and write, no deadline for a whole request, 8 idle connections kept
    /// per origin, responses up to 64 MiB.
    pub fn new() -> Client {
        Client {
            pool: Pool::new(8),
            h2: Connections::default(),
            tls: None,
            tls_http1: crate::tls::client_alpn(crate::tls::default_client_config(), false),
            http2: true,
            prior_knowledge: false,
            connect_timeout: Duration::from_secs(10),
            limits: Limits {
                io_timeout: Duration::from_secs(30),
                request_timeout: None,
                max_response_bytes: 64 << 20,
            },
        }
    }

    /// Deadline for name resolution plus connecting.
    pub fn connect_timeout(mut self, t: Duration) -> Client {
        self.connect_timeout = t;
        self
    }

    /// The TLS configuration for `https://` (by default
    /// [`tls::default_client_config`](crate::tls::default_client_config):
    /// the webpki roots). Use
    /// [`tls::client_config_with_ca_pem`](crate::tls::client_config_with_ca_pem)
    /// for a private CA.
    ///
    /// ```no_run
    /// let ca = std::fs::read("ca.pem").unwrap();
    /// let config = spindle_http::tls::client_config_with_ca_pem(&ca).unwrap();
    /// let client = spindle_http::Client::new().tls_config(config);
    /// ```
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Client {
        self.tls_http1 = crate::tls::client_alpn(config.clone(), false);
        self.tls = Some(crate::tls::client_alpn(config, self.http2));
        self
    }

    /// Whether `https://` connections offer HTTP/2 (ALPN `h2`; default
    /// on). Off, every connection speaks HTTP/1.1.
    ///
    /// ```
    /// let client = spindle_http::Client::new().http2(false);
    /// # drop(client);
    /// ```
    pub fn http2(mut self, on: bool) -> Client {
        self.http2 = on;
        let config = self
            .tls
            .take()
            .unwrap_or_else(crate::tls::default_client_config);
        self.tls = Some(crate::tls::client_alpn(config, on));
        self
    }

    /// Speak HTTP/2 to `http://` origins without asking first (h2c with
    /// prior knowledge, as gRPC clients do): for servers known to speak
    /// it. Default off.
    ///
    /// ```
    /// let client = spindle_http::Client::new().http2_prior_knowledge(true);
    /// # drop(client);
    /// ```
    pub fn http2_prior_knowledge(mut self, on: bool) -> Client {
        self.prior_knowledge = on;
        self
    }

    /// Deadline for a whole exchange: writing the request and reading the
    /// entire response (default: none, only [`io_timeout`](Self::io_timeout)
    /// per read). A server that drips its response a
    /// byte at a time cannot stretch it: every read waits only for what is
    /// left of the deadline.
    ///
    /// ```
    /// let client = spindle_http::Client::new().request_timeout(std::time::Duration::from_secs(5));
    /// # drop(client);
    /// ```
    pub fn request_timeout(mut self, t: Duration) -> Client {
        self.limits.request_timeout = Some(t);
        self
    }

    /// Largest response body the client accepts (default 64 MiB): a
    /// response that announces more fails at once, one that sends more
    /// fails when its body is read past the limit
    /// ([`ErrorKind::BodyTooLarge`]).
    ///
    /// ```
    /// let client = spindle_http::Client::new().max_response_bytes(1 << 20);
    /// # drop(client);
    /// ```
    pub fn max_response_bytes(mut self, n: u64) -> Client {
        self.limits.max_response_bytes = n;
        self
    }

    /// Longest wait for any one read or write of a request (default 30 s):
    /// a server that goes silent this long fails the request.
    ///
    /// ```
    /// let client = spindle_http::Client::new().io_timeout(std::time::Duration::from_secs(5));
    /// # drop(client);
    /// ```
    pub fn io_timeout(mut self, t: Duration) -> Client {
        self.limits.io_timeout = t;
        self
    }

    /// `GET url`.
    pub fn get(&self, url: &str) -> Result<Response<Body>, Error> {
        self.request(
            Request::get(url)
                .body(Body::empty())
                .map_err(invalid_request)?,
        )
    }

    /// `POST url` with `body`.
    pub fn post(&self, url: &str, body: impl Into<Body>) -> Result<Response<Body>, Error> {
        self.request(
            Request::post(url)
                .body(body.into())
                .map_err(invalid_request)?,
        )
    }

    /// Sends `req` (its URI must be absolute: `http://host[:port]/path`).
    ///
    /// The error says what failed by its [`ErrorKind`](crate::ErrorKind)
    /// (resolution, connect, TLS, a timeout, a close, a malformed
    /// response, a body over the limit).
    pub fn request(&self, req: Request<Body>) -> Result<Response<Body>, Error> {
        let origin = origin_of(req.uri()).map_err(invalid_request)?;
        let (https, _, _) = origin;
        if (https && self.http2) || (!https && self.prior_knowledge) {
            match self.h2.route(&origin, || self.dial(&origin))? {
                Route::Http2(conn) => return self.request_h2(conn, req, &origin),
                Route::Http1(fresh) => return self.request_http1(req, &origin, fresh),
            }
        }
        self.request_http1(req, &origin, None)
    }

    /// A request on the origin's HTTP/2 connection; sent once more on a
    /// new one when the protocol says the first try was not processed, or
    /// it was idempotent and lost with its connection (see `h2.rs`).
    fn request_h2(
        &self,
        conn: self::h2::Connection,
        req: Request<Body>,
        origin: &Origin,
    ) -> Result<Response<Body>, Error> {
        let (parts, body) = req.into_parts();
        let again = body
            .as_bytes()
            .map(|b| Body::from(Bytes::copy_from_slice(b)));
        let failure = match self::h2::request(&conn, &self.limits, &parts, body) {
            Ok(response) => return Ok(response),
            Err(Failure::Other(e)) => return Err(e),
            Err(f) => f,
        };
        let Some(body) = again else {
            return Err(failure.into_error());
        };
        self.h2.forget(origin, &conn);
        match self.h2.route(origin, || self.dial(origin))? {
            Route::Http2(conn) => {
                self::h2::request(&conn, &self.limits, &parts, body).map_err(Failure::into_error)
            }
            Route::Http1(fresh) => {
                self.request_http1(Request::from_parts(parts, body), origin, fresh)
            }
        }
    }

    /// A request over HTTP/1.1: on `fresh` if given (a connection just
    /// dialed), else on a pooled or new one.
    fn request_http1(
        &self,
        req: Request<Body>,
        origin: &Origin,
        fresh: Option<Stream>,
    ) -> Result<Response<Body>, Error> {
        let (parts, body) = req.into_parts();
        let body = match body.as_bytes() {
            Some(b) => Bytes::copy_from_slice(b),
            // A streamed body goes out as it is produced, while the
            // response is read: a server may answer (or start to) before
            // the body is complete, and the body's producer may wait for
            // that answer.
            None => return self.request_streaming(parts, body, origin, fresh),
        };
        let head = encode_head(
            &parts.method,
            &parts.uri,
            &parts.headers,
            origin,
            encode::RequestFraming::Length(body.len() as u64),
        )
        .map_err(invalid_request)?;
        // Only the method is needed from here on; the headers and target
        // are in `head`, and the rest is not kept while the answer is
        // awaited (a request parked on a slow server holds just that).
        let method = only_method(parts);
        if let Some(conn) = fresh {
            return self
                .exchange(conn, origin, &head, &body, &method)
                .map_err(fresh_connection_error);
        }
        if let Some(conn) = self.pool.take_idle(origin) {
            match self.exchange(conn, origin, &head, &body, &method) {
                Ok(resp) => return Ok(resp),
                // The request never got through whole: nothing was done
                // with it, any method may go again on a fresh connection.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                // It was sent and the server closed without a word: it may
                // have acted on it, so only an idempotent request is sent
                // again (as Go and hyper do).
                Err(e) if is_no_response(&e) && method.is_idempotent() => {}
                Err(e) if is_no_response(&e) => return Err(not_retried(&method)),
                Err(e) => return Err(Error::from_exchange(e)),
            }
        }
        let conn = self.connect(origin)?;
        self.exchange(conn, origin, &head, &body, &method)
            .map_err(fresh_connection_error)
    }

    /// A request whose body is a stream: on a fresh connection (the body
    /// cannot be sent twice, so no stale pooled connection may take it),
    /// chunked, pumped by a fiber of its own while this one reads the
    /// response. The connection is not pooled afterwards.
    fn request_streaming(
        &self,
        parts: http::request::Parts,
        mut body: Body,
        origin: &Origin,
        fresh: Option<Stream>,
    ) -> Result<Response<Body>, Error> {
        let head = encode_head(
            &parts.method,
            &parts.uri,
            &parts.headers,
            origin,
            encode::RequestFraming::Chunked,
        )
        .map_err(invalid_request)?;
        let stream = Arc::new(match fresh {
            Some(stream) => stream,
            None => self.connect(origin)?,
        });
        let deadline = self.limits.deadline();
        exchange::send(&self.limits, &stream, &head, &[]).map_err(fresh_connection_error)?;
        let pump = stream.clone();
        spindle::Builder::new()
            .name("http-client-body")
            .spawn(move || pump_chunked(&mut body, &pump))
            .map_err(|e| Error::new(ErrorKind::Io, e))?;
        exchange::read_response(
            &self.limits,
            Conn::Shared(stream),
            self.pool.give_back(origin),
            &parts.method,
            deadline,
        )
        .map_err(fresh_connection_error)
    }

    /// A new HTTP/1.1 connection to `origin` (see `connect.rs`).
    fn connect(&self, origin: &Origin) -> Result<Stream, Error> {
        connect::connect(origin, self.connect_timeout, Some(&self.tls_http1))
    }

    /// A new connection to `origin` in whichever protocol it will speak.
    fn dial(&self, origin: &Origin) -> Result<self::h2::Dialed, Error> {
        connect::dial(
            origin,
            self.connect_timeout,
            self.tls.as_ref(),
            self.prior_knowledge,
        )
    }

    /// One exchange on `stream` (see `exchange.rs`), its connection given
    /// back to the pool once the response is read to its end.
    fn exchange(
        &self,
        stream: Stream,
        origin: &Origin,
        head: &[u8],
        body: &[u8],
        method: &Method,
    ) -> io::Result<Response<Body>> {
        let give_back = self.pool.give_back(origin);
        exchange::exchange(&self.limits, stream, give_back, head, body, method)
    }
}

/// The method of a request head, the rest of it dropped now (a partial
/// move would keep it to the end of the scope).
fn only_method(parts: http::request::Parts) -> Method {
    parts.method
}

/// The error of an exchange on a fresh connection, closed under it.
fn fresh_connection_error(e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::ConnectionAborted || is_no_response(&e) {
        Error::new(
            ErrorKind::Closed,
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection without a response",
            ),
        )
    } else {
        Error::from_exchange(e)
    }
}

/// An [`ErrorKind::InvalidRequest`] error from whatever refused the request.
pub(crate) fn invalid_request(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::new(
        ErrorKind::InvalidRequest,
        io::Error::new(io::ErrorKind::InvalidInput, e),
    )
}

/// A reused connection closed without a response to a request that is not
/// idempotent: it may have been processed, so it is not sent again.
#[cold]
#[inline(never)]
fn not_retried(method: &Method) -> Error {
    Error::new(
        ErrorKind::Closed,
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "server closed a reused connection without a response; \
                 a {method} is not retried (it may have been processed)"
            ),
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use std::sync::mpsc;

    /// Reads one request head off `s`.
    fn read_head(s: &mut std::net::TcpStream) {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(
                s.read(&mut byte).unwrap(),
                1,
                "closed before the head's end"
            );
            got.push(byte[0]);
        }
    }

    #[test]
    fn requests_waiting_for_a_slow_answer_hold_no_read_buffer() {
        const N: usize = 20;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let (step_tx, step_rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        // An upstream that answers slowly: the head and half the body once
        // told, the rest when told again.
        let upstream = std::thread::spawn(move || {
            let mut conns = Vec::new();
            for _ in 0..N {
                let (mut s, _) = listener.accept().unwrap();
                read_head(&mut s);
                conns.push(s);
            }
            ready_tx.send(()).unwrap();
            step_rx.recv().unwrap();
            for s in &mut conns {
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok")
                    .unwrap();
            }
            step_rx.recv().unwrap();
            for s in &mut conns {
                s.write_all(b"ok").unwrap();
            }
        });
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let (got_tx, got_rx) = mpsc::channel::<()>();
        let fibers = rt.run(move || {
            let client = Arc::new(Client::new());
            (0..N)
                .map(|_| {
                    let (client, url, got) = (client.clone(), url.clone(), got_tx.clone());
                    spindle::spawn(move || {
                        let mut body = client.get(&url).unwrap().into_body();
                        let mut first = [0u8; 2];
                        body.read_exact(&mut first).unwrap();
                        assert_eq!(&first, b"ok");
                        got.send(()).unwrap();
                        body.into_vec().unwrap()
                    })
                })
                .collect::<Vec<_>>()
        });
        // Every request is out and waits for its head, on the one worker
        // whose buffer cache this looks at.
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
        // Then for the rest of its body.
        step_tx.send(()).unwrap();
        for _ in 0..N {
            got_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rt.run(crate::read_buf::held_on_this_thread), 0);
        // And each gets all of it.
        step_tx.send(()).unwrap();
        for rest in rt.run(move || {
            fibers
                .into_iter()
                .map(|f| f.join().unwrap())
                .collect::<Vec<_>>()
        }) {
            assert_eq!(rest, b"ok");
        }
        upstream.join().unwrap();
    }
}
