//! Writing messages: request and response heads and the chunked coding's
//! framing, for both roles, as pure functions appending to a buffer.
//!
//! Framing headers are never copied from the caller's header map: the
//! encoder writes `Content-Length`, `Transfer-Encoding` and (for responses)
//! `Connection` itself, from the framing it is given, so a handler cannot
//! send a message whose framing disagrees with its body. A response whose
//! status has no body (1xx, 204, 304 — RFC 9110 §6.4.1, §8.6) and a 2xx to
//! CONNECT (§9.3.6) carry no framing headers at all.

use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Version};

/// How a response's body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseFraming {
    /// No framing headers: a bodiless status, or a 2xx to CONNECT.
    None,
    /// `Content-Length: n` (the body itself may be omitted: HEAD).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body ends with the connection (HTTP/1.0 streaming).
    Close,
}

/// Writes a response head: status line, the caller's fields (without
/// framing ones), `Date` unless given, `Connection` as `keep_alive` and
/// the version need, the framing, and the blank line.
pub(crate) fn response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    version: Version,
    headers: &HeaderMap,
    date: &[u8; 29],
    keep_alive: bool,
    framing: ResponseFraming,
) {
    // Room for the usual head at once; the pieces below are then copies
    // of known length without a reallocation between them.
    out.reserve(128);
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // Whether the caller gave a `Date` is seen on the way (comparing a
    // standard name is an integer compare; `contains_key` would hash).
    let mut has_date = false;
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            continue; // framing is the encoder's to write
        }
        has_date |= name == header::DATE;
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    match framing {
        ResponseFraming::None | ResponseFraming::Close => {}
        ResponseFraming::Length(n) => content_length(out, n),
        ResponseFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

/// How a request's body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestFraming {
    /// `Content-Length: n` (left out for an empty GET or HEAD).
    Length(u64),
    /// `Transfer-Encoding: chunked`: a body streamed as it is produced.
    Chunked,
}

/// Writes a request head: request line, `Host` (from `host` unless the
/// fields have one), the caller's fields (without framing ones), the
/// framing — a `Content-Length` when there is a body or the method expects
/// one, or `Transfer-Encoding: chunked` — and the blank line.
pub(crate) fn request_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    host: &[u8],
    headers: &HeaderMap,
    framing: RequestFraming,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !headers.contains_key(header::HOST) {
        field(out, b"host", host);
    }
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match framing {
        RequestFraming::Length(n)
            if n > 0 || !(method == Method::GET || method == Method::HEAD) =>
        {
            content_length(out, n)
        }
        RequestFraming::Length(_) => {}
        RequestFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

/// One chunk of a chunked body (`data` must not be empty: that is the
/// last chunk, [`LAST_CHUNK`]). Also the reference the in-place framing
/// is tested against.
pub(crate) fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    debug_assert!(!data.is_empty());
    push_hex(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Room [`frame_chunk_in_place`] needs before a chunk's data: 16 hex
/// digits and CRLF.
pub(crate) const CHUNK_PREFIX: usize = 18;

/// Frames as one chunk the `n` bytes of data at `buf[CHUNK_PREFIX..]`:
/// writes the size line just before them and CRLF just after (`buf` needs
/// `CHUNK_PREFIX + n + 2` bytes; `n` must not be 0). Returns where the
/// chunk starts: `buf[start..CHUNK_PREFIX + n + 2]` is the whole chunk. A
/// streamed body is read straight into the buffer it is sent from, with no
/// copy.
pub(crate) fn frame_chunk_in_place(buf: &mut [u8], n: usize) -> usize {
    debug_assert!(n > 0);
    let end = CHUNK_PREFIX + n;
    buf[end..end + 2].copy_from_slice(b"\r\n");
    buf[CHUNK_PREFIX - 2..CHUNK_PREFIX].copy_from_slice(b"\r\n");
    let mut at = CHUNK_PREFIX - 2;
    let mut left = n as u64;
    loop {
        at -= 1;
        buf[at] = b"0123456789abcdef"[(left % 16) as usize];
        left /= 16;
        if left == 0 {
            return at;
        }
    }
}

/// The last chunk of a chunked body, with no trailers.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The last chunk of a chunked body with its trailer section (RFC 9112
/// §7.1.2): each field on its line, then the empty line.
pub(crate) fn last_chunk(out: &mut Vec<u8>, trailers: Option<&http::HeaderMap>) {
    let Some(trailers) = trailers.filter(|t| !t.is_empty()) else {
        out.extend_from_slice(LAST_CHUNK);
        return;
    };
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn content_length(out: &mut Vec<u8>, mut n: u64) {
    // The whole line built on the stack, right to left, and appended with
    // one copy: three appends (and a capacity check per digit) were
    // measurable on every response.
    const NAME: &[u8] = b"content-length: ";
    let mut line = [0u8; NAME.len() + 20 + 2];
    let mut at = line.len() - 2;
    line[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        line[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= NAME.len();
    line[at..at + NAME.len()].copy_from_slice(NAME);
    out.extend_from_slice(&line[at..]);
}

fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[(n % 16) as usize];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chunk_framed_in_place_is_the_chunk_framed_by_copy() {
        for n in [1usize, 9, 15, 16, 255, 256, 4096, 16 * 1024] {
            let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let mut buf = vec![0u8; super::CHUNK_PREFIX + n + 2];
            buf[super::CHUNK_PREFIX..super::CHUNK_PREFIX + n].copy_from_slice(&data);
            let start = super::frame_chunk_in_place(&mut buf, n);
            let mut copied = Vec::new();
            super::chunk(&mut copied, &data);
            assert_eq!(&buf[start..], &copied[..], "{n} bytes");
        }
    }

    use super::*;
    use http::HeaderValue;

    fn response(
        status: u16,
        headers: &[(&str, &str)],
        keep: bool,
        framing: ResponseFraming,
    ) -> String {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                http::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let mut out = Vec::new();
        response_head(
            &mut out,
            StatusCode::from_u16(status).unwrap(),
            Version::HTTP_11,
            &map,
            b"Tue, 01 Dec 2026 12:00:00 GMT",
            keep,
            framing,
        );
        String::from_utf8(out).unwrap()
    }

    /// Every end a head can have — our `Date`, each `Connection` line and
    /// each framing, up to the longest `Content-Length` — is written out
    /// in full and in order.
    #[test]
    fn every_end_of_a_response_head_is_written_out_in_order() {
        let date = b"Tue, 01 Dec 2026 12:00:00 GMT";
        for (framing, line) in [
            (
                ResponseFraming::Length(u64::MAX),
                format!("content-length: {}\r\n", u64::MAX),
            ),
            (
                ResponseFraming::Length(0),
                "content-length: 0\r\n".to_string(),
            ),
            (
                ResponseFraming::Chunked,
                "transfer-encoding: chunked\r\n".to_string(),
            ),
            (ResponseFraming::Close, String::new()),
            (ResponseFraming::None, String::new()),
        ] {
            for (version, keep, connection) in [
                (Version::HTTP_10, true, "connection: keep-alive\r\n"),
                (Version::HTTP_11, false, "connection: close\r\n"),
                (Version::HTTP_11, true, ""),
            ] {
                let mut out = Vec::new();
                let map = HeaderMap::new();
                response_head(&mut out, StatusCode::OK, version, &map, date, keep, framing);
                let want = format!(
                    "HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 12:00:00 GMT\r\n{connection}{line}\r\n"
                );
                assert_eq!(String::from_utf8(out).unwrap(), want);
            }
        }
    }

    #[test]
    fn a_response_head_gets_our_framing_never_the_handlers() {
        let head = response(
            200,
            &[
                ("content-length", "999"),
                ("transfer-encoding", "gzip"),
                ("connection", "x"),
                ("x-a", "1"),
            ],
            true,
            ResponseFraming::Length(5),
        );
        assert_eq!(
            head,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\ndate: Tue, 01 Dec 2026 12:00:00 GMT\r\ncontent-length: 5\r\n\r\n"
        );
    }

    #[test]
    fn bodiless_and_closing_responses() {
        let head = response(204, &[], true, ResponseFraming::None);
        assert!(
            !head.contains("content-length") && !head.contains("transfer-encoding"),
            "{head}"
        );
        let head = response(200, &[], false, ResponseFraming::Chunked);
        assert!(
            head.contains("connection: close\r\n")
                && head.contains("transfer-encoding: chunked\r\n")
        );
        let head = response(200, &[("date", "then")], true, ResponseFraming::Close);
        assert!(
            head.contains("date: then\r\n") && !head.contains("2026"),
            "{head}"
        );
    }

    #[test]
    fn a_request_head_has_host_and_a_length_when_it_needs_one() {
        let mut out = Vec::new();
        request_head(
            &mut out,
            &Method::GET,
            "/a?b",
            b"example.com:8080",
            &HeaderMap::new(),
            RequestFraming::Length(0),
        );
        assert_eq!(out, b"GET /a?b HTTP/1.1\r\nhost: example.com:8080\r\n\r\n");
        let mut out = Vec::new();
        let mut map = HeaderMap::new();
        map.insert(header::HOST, HeaderValue::from_static("given"));
        map.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1"));
        request_head(
            &mut out,
            &Method::POST,
            "/",
            b"ignored",
            &map,
            RequestFraming::Length(0),
        );
        assert_eq!(
            out,
            b"POST / HTTP/1.1\r\nhost: given\r\ncontent-length: 0\r\n\r\n"
        );
        // A streamed body: chunked, whatever length the caller claimed.
        let mut out = Vec::new();
        request_head(
            &mut out,
            &Method::PUT,
            "/u",
            b"h",
            &map,
            RequestFraming::Chunked,
        );
        assert_eq!(
            out,
            b"PUT /u HTTP/1.1\r\nhost: given\r\ntransfer-encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn chunks_and_numbers_are_framed_exactly() {
        let mut out = Vec::new();
        chunk(&mut out, &[b'x'; 26]);
        out.extend_from_slice(LAST_CHUNK);
        let mut want = b"1a\r\n".to_vec();
        want.extend_from_slice(&[b'x'; 26]);
        want.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(out, want);
        for n in [0u64, 9, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_hex(&mut out, n);
            assert_eq!(out, format!("{n:x}").into_bytes());
            let mut out = b"x".to_vec();
            content_length(&mut out, n);
            assert_eq!(out, format!("xcontent-length: {n}\r\n").into_bytes());
        }
    }
}
