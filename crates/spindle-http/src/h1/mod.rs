//! HTTP/1.1 message syntax as pure functions over bytes, shared by the
//! server and the client so that each framing rule is written once.
//!
//! * [`framing`]: `Content-Length`, `Transfer-Encoding` and `Connection`
//!   values, and which body a message has (RFC 9112 §6).
//! * [`chunked`]: the chunked transfer coding's size lines and trailer
//!   fields (RFC 9112 §7.1).
//!
//! The rules are strict in both roles. Where the RFC allows a recipient to
//! be lenient, they do what hyper does. Every rule has a test here on byte
//! slices, including the request-smuggling forms public test suites use.

pub(crate) mod chunked;
pub(crate) mod framing;
