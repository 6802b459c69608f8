//! HTTP/1.1 message syntax as pure functions over bytes, shared by the
//! server and the client so that each framing rule is written once.
//!
//! * [`request`]: request heads, and how their body is delimited.
//! * [`simple_head`]: the request head nearly every client sends, read in
//!   one pass; any other is `httparse`'s, which stays the reference.
//! * [`response`]: response heads, and how their body is delimited.
//! * [`framing`]: `Content-Length`, `Transfer-Encoding` and `Connection`
//!   values, and which body a message has (RFC 9112 §6).
//! * [`head_arena`]: where a parsed head's bytes live while its message
//!   does: per-thread blocks, so a head costs no allocation of its own.
//! * [`header_maps`]: spare header maps per thread, so a written
//!   response's map is the next parsed message's.
//! * [`encode`]: writing request and response heads and chunk framing,
//!   with the framing headers always the encoder's own.
//! * [`decode`]: reading a body by its framing, the one decoder of both
//!   roles.
//! * [`chunked`]: the chunked transfer coding — size lines, trailer
//!   fields, and the one incremental decoder both roles read bodies with
//!   (RFC 9112 §7.1).
//!
//! The rules are strict in both roles. Where the RFC allows a recipient to
//! be lenient, they do what hyper does. Every rule has a test here on byte
//! slices, including the request-smuggling forms public test suites use,
//! and the fuzz targets (`fuzz/`) drive these functions directly.

pub(crate) mod chunked;
pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod framing;
pub(crate) mod head_arena;
pub(crate) mod header_maps;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod simple_head;

/// `tchar` of RFC 9110 §5.6.2: what a token (a method, a field name) is
/// made of.
pub(crate) const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}
