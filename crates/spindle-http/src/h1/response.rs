//! Response heads (RFC 9112 §4, §6.3): bytes in, a response head and its
//! framing out — no socket, so every rule is tested on byte slices and
//! fuzzed. The client reads the body as [`ResponseHead::framing`] says.

use http::header::HeaderValue;
use http::{HeaderMap, StatusCode, Version};

use super::framing::{BodyFraming, FramingHeaders};

/// Longest response head the client accepts.
pub(crate) const MAX_HEAD_BYTES: usize = 64 << 10;

/// Most header fields in a response head.
const MAX_HEADERS: usize = 100;

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Bytes the head took at the start of the input.
    pub(crate) len: usize,
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    /// How the body is delimited (`Empty` for 1xx, 204, 304 and a response
    /// to HEAD).
    pub(crate) framing: BodyFraming,
    /// Whether the connection may carry another exchange.
    pub(crate) keep_alive: bool,
}

/// Why a response head is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Not HTTP/1.x syntax, or a bad status or header.
    Malformed(String),
    /// Longer than [`MAX_HEAD_BYTES`].
    TooLarge,
    /// The framing headers contradict each other (see `framing`).
    Framing(String),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Malformed(why) => write!(f, "bad response: {why}"),
            HeadError::TooLarge => f.write_str("response head too large"),
            HeadError::Framing(why) => write!(f, "malformed response framing: {why}"),
        }
    }
}

/// Parses the response head at the start of `input`; `Ok(None)` if it is
/// not complete yet. `to_head` says the request was `HEAD` (its response
/// has no body whatever its headers say).
pub(crate) fn parse_response(
    input: &[u8],
    to_head: bool,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut too_many = false;
    let on_stack = &mut [httparse::EMPTY_HEADER; HEADERS_ON_STACK];
    let parsed = parse_with(input, to_head, on_stack, &mut too_many);
    if too_many {
        let on_heap = &mut vec![httparse::EMPTY_HEADER; MAX_HEADERS];
        return parse_with(input, to_head, on_heap, &mut too_many);
    }
    parsed
}

/// Header slots on the fiber's stack: few, because every stack page a
/// fiber touches stays resident while it waits (for the body, say); a
/// response with more headers is parsed again with [`MAX_HEADERS`] slots
/// on the heap.
const HEADERS_ON_STACK: usize = 32;

/// [`parse_response`] into `headers`; `too_many` is set if they ran out.
fn parse_with<'b>(
    input: &'b [u8],
    to_head: bool,
    headers: &mut [httparse::Header<'b>],
    too_many: &mut bool,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut resp = httparse::Response::new(headers);
    let len = match resp.parse(input) {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if input.len() > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            *too_many = e == httparse::Error::TooManyHeaders;
            return Err(HeadError::Malformed(e.to_string()));
        }
    };
    let status = StatusCode::from_u16(resp.code.unwrap_or(0))
        .map_err(|e| HeadError::Malformed(e.to_string()))?;
    let version = if resp.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let mut map = HeaderMap::with_capacity(resp.headers.len());
    let mut framing = FramingHeaders::default();
    for h in resp.headers.iter() {
        let name = http::header::HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|e| HeadError::Malformed(e.to_string()))?;
        let value =
            HeaderValue::from_bytes(h.value).map_err(|e| HeadError::Malformed(e.to_string()))?;
        framing.add(h.name.as_bytes(), h.value);
        map.append(name, value);
    }
    let keep_alive = framing.keep_alive(version == Version::HTTP_10);
    let no_body = to_head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = framing
        .response_body(no_body)
        .map_err(|e| HeadError::Framing(format!("{e:?}")))?;
    Ok(Some(ResponseHead {
        len,
        status,
        version,
        headers: map,
        framing,
        keep_alive,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_headers_than_the_stack_slots_parse_on_the_heap_up_to_the_limit() {
        let head = |n: usize| {
            let mut h = String::from("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n");
            for i in 1..n {
                h.push_str(&format!("x-h{i}: {i}\r\n"));
            }
            h + "\r\n"
        };
        for n in [1, HEADERS_ON_STACK, HEADERS_ON_STACK + 1, MAX_HEADERS] {
            let parsed = parse_response(head(n).as_bytes(), false).unwrap().unwrap();
            assert_eq!(parsed.headers.len(), n, "{n} headers");
        }
        assert!(matches!(
            parse_response(head(MAX_HEADERS + 1).as_bytes(), false),
            Err(HeadError::Malformed(_))
        ));
    }

    fn parse(input: &[u8]) -> Result<Option<ResponseHead>, HeadError> {
        parse_response(input, false)
    }

    #[test]
    fn a_complete_head_gives_its_length_and_framing() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let head = parse(input).unwrap().unwrap();
        assert_eq!(head.len, input.len() - 5);
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.framing, BodyFraming::Length(5));
        assert!(head.keep_alive);
        assert!(matches!(parse(b"HTTP/1.1 200 OK\r\nContent-Le"), Ok(None)));
    }

    #[test]
    fn bodiless_statuses_and_head_responses_have_no_body() {
        for input in [
            &b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
        ] {
            assert_eq!(parse(input).unwrap().unwrap().framing, BodyFraming::Empty);
        }
        let head = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true);
        assert_eq!(head.unwrap().unwrap().framing, BodyFraming::Empty);
    }

    #[test]
    fn lying_lengths_are_refused() {
        for input in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert!(
                matches!(parse(input), Err(HeadError::Framing(_))),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn a_coding_other_than_chunked_last_reads_to_close() {
        let head = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(head.unwrap().unwrap().framing, BodyFraming::Chunked);
        let head = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(head.unwrap().unwrap().framing, BodyFraming::ToClose);
    }

    #[test]
    fn connection_close_among_other_options_is_honoured() {
        let head = parse(b"HTTP/1.1 200 OK\r\nConnection: x, close\r\nContent-Length: 0\r\n\r\n");
        assert!(!head.unwrap().unwrap().keep_alive);
    }

    #[test]
    fn an_endless_head_is_refused() {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 1));
        assert_eq!(parse(&input).unwrap_err(), HeadError::TooLarge);
    }
}
