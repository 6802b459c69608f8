//! spindle-http: an HTTP/1.1 and HTTP/2 server and client on Spindle
//! fibers, with TLS (rustls).
//!
//! A handler is an ordinary function `Fn(Request<Body>) -> Response<Body>`
//! run on the connection's own fiber: it may read the request body, sleep,
//! lock, call other servers — in blocking style, without `async`. Request
//! and response types are the `http` crate's.
//!
//! ```no_run
//! use std::io::Read;
//! use spindle_http::{Body, Request, Response, Server};
//!
//! fn handle(req: Request<Body>) -> Response<Body> {
//!     let mut body = String::new();
//!     req.into_body().read_to_string(&mut body).unwrap();
//!     Response::new(Body::from(format!("you sent {} bytes", body.len())))
//! }
//!
//! spindle::run(|| Server::bind("127.0.0.1:8080").unwrap().serve(handle).unwrap());
//! ```
//!
//! | module | what |
//! |---|---|
//! | `h1` | the HTTP/1.1 codec, pure functions over bytes shared by both roles: request and response heads, framing, the chunked coding, the one body decoder |
//! | `h2` | HTTP/2 on the `h2` crate, driven from fibers: the socket as `AsyncRead`/`AsyncWrite`, a server connection with a fiber per stream, a stream's body and trailers in and out |
//! | `serving` | what a server's connections share: the handler, the drain signal |
//! | `server` | the accept loop, admission, the registry of connections, drain |
//! | `conn` | a connection's request loop: phases and their timeouts, responses, lingering close after an error |
//! | `read_buf` | a connection's read buffer: reads in place, handed back to a per-thread cache while a handler runs |
//! | `body` | [`Body`]: streamed request bodies (length or chunked), whole or streamed responses |
//! | `client` | [`Client`]: `http://` and `https://` requests over HTTP/1.1 (a keep-alive pool per origin) or HTTP/2 (one shared connection per origin, by ALPN or prior knowledge); response bodies stream from the connection |
//! | `error` | [`Error`] and [`ErrorKind`]: what a client request failed on |
//! | `gone` | [`ClientGone`]: a handler's watch on its client leaving |
//! | `config` | [`ServerConfig`]: limits and timeouts |
//! | `date` | the cached `Date` header |
//! | `stream` | plain TCP or TLS: one reader and one writer at once over a split rustls session |
//! | [`tls`] | rustls configurations from PEM files, webpki roots or a private CA |

#![forbid(unsafe_code)]

mod body;
mod client;
mod config;
mod conn;
mod date;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod gone;
mod h1;
mod h2;
mod read_buf;
mod server;
mod serving;
mod stream;
pub mod tls;
mod write_buf;

pub use body::{Body, BoxError};
pub use client::Client;
pub use config::ServerConfig;
pub use error::{Error, ErrorKind};
pub use gone::{ClientGone, Gone};
pub use http::{self, Request, Response, StatusCode};
pub use http_body;
pub use server::{Server, ServerHandle};
