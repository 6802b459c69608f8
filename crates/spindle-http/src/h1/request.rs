//! Request heads (RFC 9112 §2–3, §5): bytes in, a request and its framing
//! out — no socket, so every rule is tested on byte slices and fuzzed.
//!
//! The head is parsed with `httparse` into an array on the caller's stack;
//! header values stay zero-copy slices of the head's bytes. The framing of
//! the body is decided by [`super::framing`], strictly: a request whose
//! length cannot be known for certain is refused with 400, so nothing can
//! be smuggled behind it.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};

use super::framing::{BodyFraming, FramingHeaders};

/// The limits a head is parsed under (from `ServerConfig`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest head, in bytes.
    pub(crate) max_head_bytes: usize,
    /// Most header fields.
    pub(crate) max_headers: usize,
    /// Largest body a `Content-Length` may announce.
    pub(crate) max_body_bytes: u64,
}

/// How the body of a parsed request is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestBody {
    /// No body: the next bytes are the next request.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked coding.
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct ParsedRequest {
    /// The request, with an empty body of type `()`.
    pub(crate) request: Request<()>,
    /// How its body is delimited.
    pub(crate) body: RequestBody,
    /// Whether the connection may serve another request after this one.
    pub(crate) keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub(crate) expect_continue: bool,
    /// Bytes of `buf` the head took: what follows is the body or the next
    /// request.
    pub(crate) head_len: usize,
}

/// Parses the request head at the start of `buf`. On success the request
/// owns a copy of the head's bytes (its header values are slices of it)
/// and [`ParsedRequest::head_len`] says how much of `buf` it took; what
/// follows — a body, a pipelined request — is the caller's. The copy is
/// what lets a connection hand its read buffer on while the request lives.
/// `Ok(None)` means the head is not complete yet. An `Err` is the status to
/// answer with before closing.
pub(crate) fn parse_request(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<ParsedRequest>, StatusCode> {
    let mut too_many = false;
    let parsed = parse_into(buf, limits, false, &mut too_many);
    if too_many && limits.max_headers > HEADERS_ON_STACK {
        return parse_into(buf, limits, true, &mut too_many);
    }
    parsed
}

/// Header slots on the fiber's stack. Few, because every page a fiber's
/// stack ever touches stays resident while its connection lives; a head
/// with more headers (up to the configured limit) is parsed again with
/// its slots on the heap.
const HEADERS_ON_STACK: usize = 32;

/// [`parse_request`] with its header slots on the stack, or on the heap
/// (`heap`); `too_many` is set if there were more header lines than slots.
fn parse_into(
    buf: &[u8],
    limits: &Limits,
    heap: bool,
    too_many: &mut bool,
) -> Result<Option<ParsedRequest>, StatusCode> {
    // Uninitialised slots: no allocation, no zeroing.
    let mut on_stack =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADERS_ON_STACK];
    let mut on_heap;
    let slots: &mut [std::mem::MaybeUninit<httparse::Header<'_>>] = if heap {
        on_heap = Vec::with_capacity(limits.max_headers);
        on_heap.resize_with(limits.max_headers, std::mem::MaybeUninit::uninit);
        &mut on_heap[..]
    } else {
        &mut on_stack[..limits.max_headers.min(HEADERS_ON_STACK)]
    };
    let mut req = httparse::Request::new(&mut []);
    let n = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(n)) if n > limits.max_head_bytes => {
            return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        }
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            *too_many = true;
            return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        Err(httparse::Error::Version) => return Err(StatusCode::HTTP_VERSION_NOT_SUPPORTED),
        Err(_) => return Err(StatusCode::BAD_REQUEST),
    };
    let version = match req.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(StatusCode::HTTP_VERSION_NOT_SUPPORTED),
    };
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    // Offsets into the head, so values can be zero-copy slices of it.
    let base = buf.as_ptr() as usize;
    let path = req.path.unwrap_or("/");
    let path_range = (path.as_ptr() as usize - base, path.len());
    // Each header as [name offset, name length, value offset, value
    // length] into the head: on the stack for the usual few dozen.
    let count = req.headers.len();
    let mut spans_on_stack = [[0u32; 4]; 48];
    let mut spans_on_heap;
    let spans: &mut [[u32; 4]] = if count <= spans_on_stack.len() {
        &mut spans_on_stack[..count]
    } else {
        spans_on_heap = vec![[0u32; 4]; count];
        &mut spans_on_heap[..]
    };
    let offset = |s: &[u8]| (s.as_ptr() as usize - base) as u32;
    for (span, h) in spans.iter_mut().zip(req.headers.iter()) {
        *span = [
            offset(h.name.as_bytes()),
            h.name.len() as u32,
            offset(h.value),
            h.value.len() as u32,
        ];
    }
    // A copy: the connection's read buffer is then free to be handed on
    // while the request lives (see `read_buf`).
    let head = Bytes::copy_from_slice(&buf[..n]);
    let path = &head[path_range.0..path_range.0 + path_range.1];
    let uri = if path == b"/" {
        // The commonest target needs no share of the head, nor parsing.
        static SLASH: std::sync::LazyLock<Uri> = std::sync::LazyLock::new(|| Uri::from_static("/"));
        SLASH.clone()
    } else {
        Uri::from_maybe_shared(head.slice(path_range.0..path_range.0 + path_range.1))
            .map_err(|_| StatusCode::BAD_REQUEST)?
    };
    // The parts are set in place on the request at the end: the `http`
    // builder moves its whole `Parts` by value at every step, which showed
    // as 7 % of a pipelined profile in memcpy.
    let mut framing_headers = FramingHeaders::default();
    let mut expect_continue = false;
    let mut map = http::HeaderMap::with_capacity(count);
    for &[name_at, name_len, at, len] in spans.iter() {
        let (name_at, name_len, at, len) = (
            name_at as usize,
            name_len as usize,
            at as usize,
            len as usize,
        );
        let name = HeaderName::from_bytes(&head[name_at..name_at + name_len])
            .map_err(|_| StatusCode::BAD_REQUEST)?;
        let value = HeaderValue::from_maybe_shared(head.slice(at..at + len))
            .map_err(|_| StatusCode::BAD_REQUEST)?;
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            framing_headers.add(name.as_str().as_bytes(), value.as_bytes());
        } else if name == header::EXPECT && value.as_bytes().eq_ignore_ascii_case(b"100-continue") {
            expect_continue = version == Version::HTTP_11;
        }
        map.append(name, value);
    }
    let http10 = version == Version::HTTP_10;
    let close = !framing_headers.keep_alive(http10);
    // The framing rules (and why each is an error) are in `h1::framing`:
    // a request whose length cannot be known for certain is refused, so no
    // request can be smuggled behind it.
    let framing = match framing_headers
        .request_body(http10)
        .map_err(|_| StatusCode::BAD_REQUEST)?
    {
        BodyFraming::Chunked => RequestBody::Chunked,
        BodyFraming::Empty | BodyFraming::ToClose => RequestBody::None,
        BodyFraming::Length(n) if n > limits.max_body_bytes => {
            return Err(StatusCode::PAYLOAD_TOO_LARGE)
        }
        BodyFraming::Length(n) => RequestBody::Length(n),
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = map;
    Ok(Some(ParsedRequest {
        request,
        body: framing,
        keep_alive: !close,
        expect_continue,
        head_len: n,
    }))
}

#[cfg(test)]
mod header_slot_tests {
    use super::*;

    fn head_with(headers: usize) -> Vec<u8> {
        let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for i in 1..headers {
            head.push_str(&format!("x-h{i}: {i}\r\n"));
        }
        head.push_str("\r\n");
        head.into_bytes()
    }

    fn limits(max_headers: usize) -> Limits {
        Limits {
            max_head_bytes: 64 << 10,
            max_headers,
            max_body_bytes: 1 << 20,
        }
    }

    #[test]
    fn short_and_long_heads_keep_their_bytes_and_values() {
        for n in [1, 3, 20, 200] {
            let head = head_with(n);
            let parsed = parse_request(&head, &limits(300)).unwrap().unwrap();
            assert_eq!(parsed.head_len, head.len());
            assert_eq!(parsed.request.headers()["host"], "x");
            if n > 2 {
                let last = format!("x-h{}", n - 1);
                assert_eq!(parsed.request.headers()[last.as_str()], (n - 1).to_string());
            }
        }
    }

    #[test]
    fn more_headers_than_the_stack_slots_parse_on_the_heap_up_to_the_limit() {
        for n in [1, HEADERS_ON_STACK, HEADERS_ON_STACK + 1, 100] {
            let parsed = parse_request(&head_with(n), &limits(100))
                .unwrap_or_else(|s| panic!("{n} headers: {s}"))
                .expect("complete");
            assert_eq!(parsed.request.headers().len(), n);
            if n > 1 {
                assert_eq!(parsed.request.headers()["x-h1"], "1", "{n} headers");
            }
        }
        assert_eq!(
            parse_request(&head_with(101), &limits(100)).err(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(
            parse_request(&head_with(17), &limits(16)).err(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        // A partial head with many headers is still just incomplete.
        let mut partial = head_with(60);
        partial.truncate(partial.len() - 2);
        assert!(matches!(parse_request(&partial, &limits(100)), Ok(None)));
    }
}
