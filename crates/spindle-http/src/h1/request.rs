//! Request heads (RFC 9112 §2–3, §5): bytes in, a request and its framing
//! out — no socket, so every rule is tested on byte slices and fuzzed.
//!
//! The head is parsed with `httparse` into an array on the caller's stack;
//! header values stay zero-copy slices of the head's bytes. The framing of
//! the body is decided by [`super::framing`], strictly: a request whose
//! length cannot be known for certain is refused with 400, so nothing can
//! be smuggled behind it. So is one whose host is not certain (RFC 9112
//! §3.2): an HTTP/1.1 request without `Host`, any request with two, or one
//! whose value is not `host[:port]`.

use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};

use super::framing::{BodyFraming, FramingHeaders};
use super::simple_head::{self, FieldSpan};

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

/// What [`parse_request`] learnt of a head besides the request itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestHead {
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

/// Field slots for the common shape of head (`simple_head`), on the
/// fiber's stack. Few, because every line of a fiber's stack a request
/// touches is a cache line to fetch again when its connection next runs;
/// a head with more fields (up to the configured limit) is `httparse`'s.
const SPANS_ON_STACK: usize = 24;

/// `httparse`'s header slots, in [`parse_other_shape`]'s own frame: a head
/// with more (up to the configured limit) is parsed again with its slots
/// on the heap.
const HEADERS_ON_STACK: usize = 24;

/// Parses the request head at the start of `buf` into `request`: its
/// method, target, version, and its headers appended to the map it has
/// (pass a fresh `Request::new`). The request is filled in place because
/// it is large, and every move of it was a copy. It then owns a copy of the
/// head's bytes (its header values are slices of it), and
/// [`RequestHead::head_len`] says how much of `buf` it took; what
/// follows — a body, a pipelined request — is the caller's. The copy is
/// what lets a connection hand its read buffer on while the request lives.
/// `Ok(None)` means the head is not complete yet, and `request` is
/// untouched. An `Err` is the status to answer with before closing;
/// `request` is then half filled, to be dropped.
pub(crate) fn parse_request<B>(
    buf: &[u8],
    limits: &Limits,
    request: &mut Request<B>,
    known_host: &mut KnownHost,
) -> Result<Option<RequestHead>, StatusCode> {
    // The common shape in one pass (`simple_head`); any other head is
    // `httparse`'s, in a frame of its own, so that its slots do not make
    // this frame — on every request's path — larger.
    let mut spans = [FieldSpan::default(); SPANS_ON_STACK];
    let room = limits.max_headers.min(SPANS_ON_STACK);
    match simple_head::scan(buf, &mut spans[..room]) {
        Some(head) => {
            let line = (head.method, head.target, head.minor_version, head.len);
            let fields = Fields::Scanned(&spans[..head.fields], buf);
            fill_request(buf, limits, line, fields, request, known_host).map(Some)
        }
        None => parse_other_shape(buf, limits, request, known_host),
    }
}

/// A head [`simple_head`] left to `httparse`: parsed into slots on this
/// frame's stack, or on the heap when it has more fields than those and
/// the limit allows them. Kept out of line, and cold: it is the rare path,
/// and inline its code would sit between the common path's instructions
/// and its slots on the common path's stack.
#[cold]
#[inline(never)]
fn parse_other_shape<B>(
    buf: &[u8],
    limits: &Limits,
    request: &mut Request<B>,
    known_host: &mut KnownHost,
) -> Result<Option<RequestHead>, StatusCode> {
    let room = limits.max_headers.min(HEADERS_ON_STACK);
    let mut on_stack =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADERS_ON_STACK];
    let mut on_heap = Vec::new();
    let mut req = httparse::Request::new(&mut []);
    let mut parsed = req.parse_with_uninit_headers(buf, &mut on_stack[..room]);
    if matches!(parsed, Err(httparse::Error::TooManyHeaders))
        && limits.max_headers > HEADERS_ON_STACK
    {
        on_heap.resize_with(limits.max_headers, std::mem::MaybeUninit::uninit);
        req = httparse::Request::new(&mut []);
        parsed = req.parse_with_uninit_headers(buf, &mut on_heap[..]);
    }
    let n = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        Err(httparse::Error::Version) => return Err(StatusCode::HTTP_VERSION_NOT_SUPPORTED),
        Err(_) => return Err(StatusCode::BAD_REQUEST),
    };
    let method = req.method.unwrap_or("").as_bytes();
    let target = req.path.unwrap_or("/").as_bytes();
    let version = req.version.unwrap_or(u8::MAX);
    let line = (method, target, version, n);
    fill_request(
        buf,
        limits,
        line,
        Fields::Parsed(req.headers),
        request,
        known_host,
    )
    .map(Some)
}

/// Fills `request` in from a parsed head (see [`parse_request`]), and
/// decides its framing. Inline in both callers: on the common path it is
/// most of the work, and a call would only add to it.
#[inline(always)]
fn fill_request<B>(
    buf: &[u8],
    limits: &Limits,
    line: RequestLine<'_>,
    fields: Fields<'_, '_>,
    request: &mut Request<B>,
    known_host: &mut KnownHost,
) -> Result<RequestHead, StatusCode> {
    let (method, path, minor_version, n) = line;
    if n > limits.max_head_bytes {
        return Err(too_large(&buf[..n], limits.max_head_bytes));
    }
    let version = match minor_version {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        _ => return Err(StatusCode::HTTP_VERSION_NOT_SUPPORTED),
    };
    let method = match method {
        // Most requests are GETs: no general lookup for them.
        b"GET" => Method::GET,
        other => Method::from_bytes(other).map_err(|_| StatusCode::BAD_REQUEST)?,
    };
    // A copy of the head, which the target and header values share: the
    // connection's read buffer is then free to be handed on while the
    // request lives (see `read_buf`, and `head_arena` for where it lives).
    // Made at the first value that needs it: a request whose only field is
    // a remembered `Host` and whose target is `/` needs none.
    let mut head: Option<bytes::Bytes> = None;
    let base = buf.as_ptr() as usize;
    let mut share = |s: &[u8]| {
        let head = head.get_or_insert_with(|| super::head_arena::copy(&buf[..n]));
        let at = s.as_ptr() as usize - base;
        head.slice(at..at + s.len())
    };
    // The commonest target, `/`, is what a fresh request has already: no
    // share of the head, no parsing.
    let uri = if path == b"/" {
        None
    } else {
        Some(Uri::from_maybe_shared(share(path)).map_err(|_| StatusCode::BAD_REQUEST)?)
    };
    let mut framing_headers = FramingHeaders::default();
    let mut expect_continue = false;
    let (mut hosts, mut host_ok) = (0u32, true);
    let map = request.headers_mut();
    map.reserve(fields.len());
    for (name, value) in fields.iter() {
        // `Host`, which every HTTP/1.1 request has, without the general
        // name lookup.
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            // The connection's last host, if these are its bytes: neither
            // checked nor copied again.
            let value = match known_host.get(value) {
                Some(value) => value,
                None => {
                    let value = HeaderValue::from_maybe_shared(share(value))
                        .map_err(|_| StatusCode::BAD_REQUEST)?;
                    host_ok &= known_host.check(&value);
                    value
                }
            };
            map.append(header::HOST, value);
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| StatusCode::BAD_REQUEST)?;
        let value =
            HeaderValue::from_maybe_shared(share(value)).map_err(|_| StatusCode::BAD_REQUEST)?;
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
    // RFC 9112 §3.2: an HTTP/1.1 request without `Host`, any request with
    // more than one, or with one that is no `host[:port]`, is a 400 —
    // which host it is for would be a guess, and a proxy in front may
    // have guessed otherwise.
    if !host_ok || hosts > 1 || (hosts == 0 && !http10) {
        return Err(StatusCode::BAD_REQUEST);
    }
    *request.method_mut() = method;
    match uri {
        Some(uri) => *request.uri_mut() = uri,
        // A fresh request's target is `/` already.
        None => debug_assert_eq!(request.uri(), "/", "parse_request wants a fresh request"),
    }
    *request.version_mut() = version;
    Ok(RequestHead {
        body: framing,
        keep_alive: !close,
        expect_continue,
        head_len: n,
    })
}

/// A request line as [`parse_request`] takes it apart: method, target,
/// minor version, and the head's length.
type RequestLine<'b> = (&'b [u8], &'b [u8], u8, usize);

/// A head's fields, as [`simple_head`] or `httparse` read them.
enum Fields<'a, 'b> {
    /// Spans of the head's bytes.
    Scanned(&'a [FieldSpan], &'b [u8]),
    /// `httparse`'s slices.
    Parsed(&'a [httparse::Header<'b>]),
}

impl<'b> Fields<'_, 'b> {
    fn len(&self) -> usize {
        match self {
            Fields::Scanned(spans, _) => spans.len(),
            Fields::Parsed(headers) => headers.len(),
        }
    }

    /// Each field's name and value, in order.
    fn iter(&self) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + '_ {
        (0..self.len()).map(move |i| match self {
            Fields::Scanned(spans, head) => (spans[i].name(head), spans[i].value(head)),
            Fields::Parsed(headers) => (headers[i].name.as_bytes(), headers[i].value),
        })
    }
}

/// The last valid `Host` value a connection's requests had: the requests
/// of one connection nearly always name the same host, and handing out
/// the same value again is cheaper than checking and copying its bytes.
/// Short values only: the copy it keeps (not a slice of a head, which
/// would pin the head's block) lives as long as its connection.
///
/// The copy is one of the process's [`interned`] hosts when there is room
/// for it there: a clone of such a value is a plain copy, where a clone of
/// an owned one is a locked reference count update (and its drop, when
/// the handler is done with the request, another).
#[derive(Debug, Default)]
pub(crate) struct KnownHost {
    value: Option<HeaderValue>,
}

impl KnownHost {
    const MAX: usize = 47;

    /// The remembered value, if `bytes` are its bytes.
    fn get(&self, bytes: &[u8]) -> Option<HeaderValue> {
        self.value
            .as_ref()
            .filter(|v| v.as_bytes() == bytes)
            .cloned()
    }

    /// Whether `value` is a valid `Host` value ([`valid_host`]),
    /// remembering it if it is.
    fn check(&mut self, value: &HeaderValue) -> bool {
        let bytes = value.as_bytes();
        let valid = valid_host(bytes);
        if valid && !bytes.is_empty() && bytes.len() <= Self::MAX {
            self.value = interned(bytes).or_else(|| HeaderValue::from_bytes(bytes).ok());
        }
        valid
    }
}

/// Hosts interned so far, each leaked once and shared by every connection
/// of the process. Bounded: [`INTERNED`] values of at most
/// [`KnownHost::MAX`] bytes, about 3 KiB, however many hosts clients name;
/// once the table is full, further hosts are copied per connection.
static INTERNED_HOSTS: [std::sync::OnceLock<&'static str>; INTERNED] =
    [const { std::sync::OnceLock::new() }; INTERNED];

/// How many hosts [`INTERNED_HOSTS`] holds.
const INTERNED: usize = 64;

/// `bytes` (a valid host, so visible ASCII) as a value backed by static
/// memory: an interned host, interning it if there is room.
fn interned(bytes: &[u8]) -> Option<HeaderValue> {
    let text = std::str::from_utf8(bytes).ok()?;
    if !bytes.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return None; // not what `from_static` takes (cannot happen for a valid host)
    }
    for slot in &INTERNED_HOSTS {
        // An empty slot takes this host; a taken one may hold it already
        // (or another thread's host, raced in first: look on).
        let host = *slot.get_or_init(|| Box::leak(text.to_owned().into_boxed_str()));
        if host == text {
            return Some(HeaderValue::from_static(host));
        }
    }
    None
}

/// Whether a `Host` value is `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC
/// 3986 §3.2.2–3.2.3), or empty (a target without an authority): no
/// userinfo, no spaces, digits only in the port.
fn valid_host(value: &[u8]) -> bool {
    // A byte's class: 1 = a reg-name byte (unreserved / sub-delims),
    // 2 = `%`, 0 = anything else. A table: this runs on every request.
    const CLASS: [u8; 256] = {
        let mut t = [0u8; 256];
        let mut c = 0;
        while c < 256 {
            let b = c as u8;
            if b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'.'
                        | b'_'
                        | b'~'
                        | b'!'
                        | b'$'
                        | b'&'
                        | b'\''
                        | b'('
                        | b')'
                        | b'*'
                        | b'+'
                        | b','
                        | b';'
                        | b'='
                )
            {
                t[c] = 1;
            }
            c += 1;
        }
        t[b'%' as usize] = 2;
        t
    };
    // One pass: the host up to `:` or the end, then the port's digits.
    let mut i = 0;
    if value.first() == Some(&b'[') {
        // IP-literal (IPv6, IPvFuture, a zone after `%25`).
        let Some(end) = value.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &value[1..end];
        if inner.is_empty() || !inner.iter().all(|&c| CLASS[c as usize] != 0 || c == b':') {
            return false;
        }
        i = end + 1;
    } else {
        while i < value.len() {
            match CLASS[value[i] as usize] {
                1 => i += 1,
                2 if value.len() > i + 2
                    && value[i + 1].is_ascii_hexdigit()
                    && value[i + 2].is_ascii_hexdigit() =>
                {
                    i += 3
                }
                _ => break,
            }
        }
    }
    match value.get(i) {
        None => true,
        Some(b':') => value[i + 1..].iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

/// The status for a request head past `max_head_bytes` (the first
/// `buf.len()` bytes of which are at hand): 414 URI Too Long when its
/// request line alone is that long (RFC 9112 §3: a server that receives a
/// request-target longer than it will parse answers 414), else 431.
pub(crate) fn too_large(buf: &[u8], max_head_bytes: usize) -> StatusCode {
    let line = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    if line >= max_head_bytes {
        StatusCode::URI_TOO_LONG
    } else {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    }
}

/// Whether a first line (without its line feed) has a request line's
/// three parts but a last one that is no HTTP version: `INVALID
/// CONNECTION PREFACE` is such, `GET / HTTP/1.1`, `PRI * HTTP/2.0` (a 505)
/// and `GARBAGE` (a 400) are not.
pub(crate) fn is_foreign_request_line(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let parts = line.split(|&b| b == b' ').filter(|p| !p.is_empty()).count();
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(line);
    parts == 3 && !version.starts_with(b"HTTP/")
}

/// [`parse_request`] into a fresh request, for tests.
#[cfg(test)]
pub(crate) fn parse_fresh(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, Request<()>)>, StatusCode> {
    let mut request = Request::new(());
    Ok(
        parse_request(buf, limits, &mut request, &mut KnownHost::default())?
            .map(|head| (head, request)),
    )
}

#[cfg(test)]
mod header_slot_tests {
    use super::*;

    #[test]
    fn a_foreign_request_line_has_three_parts_and_no_http_version() {
        assert!(!is_foreign_request_line(b"GET / HTTP/1.1\r"));
        assert!(!is_foreign_request_line(b"PRI * HTTP/2.0"));
        assert!(is_foreign_request_line(b"INVALID CONNECTION PREFACE\r"));
        assert!(!is_foreign_request_line(b"GARBAGE\r"));
        assert!(!is_foreign_request_line(b""));
    }

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
            let (parsed, request) = parse_fresh(&head, &limits(300)).unwrap().unwrap();
            assert_eq!(parsed.head_len, head.len());
            assert_eq!(request.headers()["host"], "x");
            if n > 2 {
                let last = format!("x-h{}", n - 1);
                assert_eq!(request.headers()[last.as_str()], (n - 1).to_string());
            }
        }
    }

    #[test]
    fn host_must_be_there_once_in_http11_and_be_a_host_and_port() {
        let limits = limits(100);
        let parse = |head: &str| parse_fresh(head.as_bytes(), &limits).map(|r| r.is_some());
        for good in [
            "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: xn--bcher-kva.example\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a%41b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n", // empty port: allowed
            "OPTIONS * HTTP/1.1\r\nHost:\r\n\r\n",          // no authority
            "GET / HTTP/1.0\r\n\r\n",                       // 1.0 may leave it out
            "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
        ] {
            assert_eq!(parse(good), Ok(true), "{good:?}");
        }
        for bad in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: bad host\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: host:port\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: user@example.com\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: []\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a%4\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n",
        ] {
            assert_eq!(parse(bad), Err(StatusCode::BAD_REQUEST), "{bad:?}");
        }
    }

    /// One connection's requests share a `KnownHost`: a host seen valid
    /// is not checked again, and any other value still is — a bad host
    /// after a good one, a prefix of the good one, a value too long to
    /// remember, or a second `Host` line.
    #[test]
    fn a_remembered_host_lets_only_the_same_bytes_skip_the_check() {
        let limits = limits(100);
        let mut known = KnownHost::default();
        let mut parse = |head: &str| {
            let mut request = Request::new(());
            let parsed = parse_request(head.as_bytes(), &limits, &mut request, &mut known);
            if let Ok(Some(_)) = parsed {
                // The value handed out is this request's, never the last one's.
                let sent = head
                    .split("\r\n")
                    .nth(1)
                    .unwrap()
                    .split_once(": ")
                    .unwrap()
                    .1;
                assert_eq!(request.headers()["host"], sent, "{head:?}");
            }
            parsed.map(|r| r.is_some())
        };
        let long = format!("{}.example", "a".repeat(60));
        let cases = [
            ("example.com:8080", Ok(true)),
            ("example.com:8080", Ok(true)),
            ("example.com:808", Ok(true)),
            ("example.com:8080x", Err(StatusCode::BAD_REQUEST)),
            ("user@example.com:8080", Err(StatusCode::BAD_REQUEST)),
            ("example.com:808", Ok(true)),
            (long.as_str(), Ok(true)),
            (long.as_str(), Ok(true)),
            ("bad host", Err(StatusCode::BAD_REQUEST)),
            ("", Ok(true)),
            ("example.com:808", Ok(true)),
        ];
        for (host, want) in cases {
            let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(parse(&head), want, "{host:?}");
        }
        let twice = "GET / HTTP/1.1\r\nHost: example.com:808\r\nhost: example.com:808\r\n\r\n";
        assert_eq!(parse(twice), Err(StatusCode::BAD_REQUEST));
        let upper = "GET / HTTP/1.1\r\nHOST: example.com:808\r\n\r\n";
        assert_eq!(parse(upper), Ok(true));
    }

    /// Connections naming the same host share one interned copy of it;
    /// a table filled by a client naming ever new hosts stops interning
    /// (a bounded leak), and its hosts are still remembered per connection.
    #[test]
    fn hosts_are_interned_once_each_and_the_table_stays_bounded() {
        let first = interned(b"interned.example:1").expect("room for one");
        let again = interned(b"interned.example:1").expect("found");
        assert_eq!(first, "interned.example:1");
        assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
        for i in 0..INTERNED {
            let _ = interned(format!("filler-{i}.example").as_bytes());
        }
        assert!(interned(b"one-too-many.example").is_none());
        assert!(INTERNED_HOSTS.iter().all(|s| s.get().is_some()));
        // Still remembered by a connection, as its own copy.
        let mut known = KnownHost::default();
        let value = HeaderValue::from_static("one-too-many.example");
        assert!(known.check(&value));
        assert_eq!(known.get(b"one-too-many.example"), Some(value));
        assert!(interned(b"a host").is_none(), "not a host: never interned");
    }

    /// A head arriving a byte at a time is incomplete until its last
    /// byte, whichever reader takes it (the one-pass read for the common
    /// shape, `httparse` for the other), and then both give the same
    /// request.
    #[test]
    fn a_head_is_incomplete_until_its_last_byte_on_either_path() {
        let common = b"GET /a?b HTTP/1.1\r\nHost: x:1\r\nAccept: */*\r\nX-Y:  v w \t\r\n\r\n";
        let other = b"GET /a?b HTTP/1.1\nHost: x:1\nAccept: */*\nX-Y:  v w \t\n\n";
        let mut spans = [FieldSpan::default(); 4];
        assert!(simple_head::scan(common, &mut spans).is_some());
        assert!(simple_head::scan(other, &mut spans).is_none());
        let mut parsed = Vec::new();
        for head in [&common[..], &other[..]] {
            for cut in 0..head.len() {
                assert!(
                    matches!(parse_fresh(&head[..cut], &limits(100)), Ok(None)),
                    "{:?}",
                    &head[..cut]
                );
            }
            let (got, request) = parse_fresh(head, &limits(100)).unwrap().unwrap();
            assert_eq!(got.head_len, head.len());
            parsed.push((
                request.method().clone(),
                request.uri().clone(),
                request.version(),
                request.headers().clone(),
            ));
        }
        assert_eq!(parsed[0], parsed[1]);
        assert_eq!(parsed[0].3["x-y"], "v w");
    }

    #[test]
    fn more_headers_than_the_stack_slots_parse_on_the_heap_up_to_the_limit() {
        // Each side of the common path's slots and of httparse's.
        let edges = [SPANS_ON_STACK, HEADERS_ON_STACK].map(|slots| [slots, slots + 1]);
        for n in [1, 100].into_iter().chain(edges.into_iter().flatten()) {
            let (_, request) = parse_fresh(&head_with(n), &limits(100))
                .unwrap_or_else(|s| panic!("{n} headers: {s}"))
                .expect("complete");
            assert_eq!(request.headers().len(), n);
            if n > 1 {
                assert_eq!(request.headers()["x-h1"], "1", "{n} headers");
            }
        }
        assert_eq!(
            parse_fresh(&head_with(101), &limits(100)).err(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(
            parse_fresh(&head_with(17), &limits(16)).err(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        // Too long a request line is 414, too long a head otherwise 431.
        let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(200));
        let small = Limits {
            max_head_bytes: 100,
            ..limits(100)
        };
        assert_eq!(
            parse_fresh(long_uri.as_bytes(), &small).err(),
            Some(StatusCode::URI_TOO_LONG)
        );
        assert_eq!(
            too_large(&long_uri.as_bytes()[..100], 100),
            StatusCode::URI_TOO_LONG
        );
        assert_eq!(
            parse_fresh(&head_with(20), &small).err(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        // A partial head with many headers is still just incomplete.
        let mut partial = head_with(60);
        partial.truncate(partial.len() - 2);
        assert!(matches!(parse_fresh(&partial, &limits(100)), Ok(None)));
    }
}
