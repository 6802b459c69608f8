//! Which body a message has (RFC 9112 §6), from its framing headers.
//!
//! Written once for both roles:
//!
//! * `Content-Length` is digits only, one value per field line: a list
//!   (`5, 5`, even of equal values), a sign, a suffix or an overflow is an
//!   error, as hyper's server reads it. Two field lines with the same value
//!   are one length; with different values, an error.
//! * `Transfer-Encoding` must end in `chunked`. In a request anything else
//!   is an error (the length cannot be known); in a response the body runs
//!   to the connection's close. `chunked` twice is an error. It may not come
//!   together with `Content-Length` in a request, nor in an HTTP/1.0
//!   request at all (such framing is faulty: a 1.0 intermediary would not
//!   understand it).
//! * `Connection` is a list of tokens: `close` anywhere in it closes.

/// A malformed framing header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FramingError {
    /// A `Content-Length` that is not a length, or two that differ.
    ContentLength,
    /// A `Transfer-Encoding` a request cannot be read with.
    TransferEncoding,
    /// Both framing headers in a request.
    Both,
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked coding.
    Chunked,
    /// Until the connection closes (responses only).
    ToClose,
}

/// Accumulates a message's framing headers, in order.
#[derive(Debug, Default, Clone)]
pub(crate) struct FramingHeaders {
    content_length: Option<u64>,
    bad_length: bool,
    transfer_encoding: bool,
    chunked_last: bool,
    chunked_twice: bool,
    close: bool,
    keep_alive: bool,
}

impl FramingHeaders {
    /// Looks at one header; other names are ignored.
    pub(crate) fn add(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"content-length") {
            match parse_content_length(value) {
                Some(n) if self.content_length.is_none_or(|old| old == n) => {
                    self.content_length = Some(n)
                }
                _ => self.bad_length = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
            for coding in tokens(value) {
                if self.chunked_last {
                    // Anything after `chunked` (even another `chunked`).
                    self.chunked_twice |= coding.eq_ignore_ascii_case(b"chunked");
                    self.chunked_last = false;
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    self.chunked_last = !self.chunked_twice;
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in tokens(value) {
                if t.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if t.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                }
            }
        }
    }

    /// Whether the connection may carry another message after this one:
    /// HTTP/1.1 unless `close`; HTTP/1.0 only with `keep-alive` and no
    /// `close`.
    pub(crate) fn keep_alive(&self, http10: bool) -> bool {
        !self.close && (!http10 || self.keep_alive)
    }

    /// A request's body (RFC 9112 §6.3, the server's rules).
    pub(crate) fn request_body(&self, http10: bool) -> Result<BodyFraming, FramingError> {
        if self.bad_length {
            return Err(FramingError::ContentLength);
        }
        if self.transfer_encoding {
            if self.content_length.is_some() {
                return Err(FramingError::Both);
            }
            if http10 || !self.chunked_last || self.chunked_twice {
                return Err(FramingError::TransferEncoding);
            }
            return Ok(BodyFraming::Chunked);
        }
        Ok(match self.content_length {
            None | Some(0) => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
        })
    }

    /// A response's body (RFC 9112 §6.3, the client's rules). `no_body`: the
    /// request was HEAD, or the status is 1xx, 204 or 304.
    pub(crate) fn response_body(&self, no_body: bool) -> Result<BodyFraming, FramingError> {
        if no_body {
            return Ok(BodyFraming::Empty);
        }
        if self.transfer_encoding {
            // Transfer-Encoding overrides Content-Length (which a sender
            // must not add, and which must not be trusted then).
            if self.chunked_twice {
                return Err(FramingError::TransferEncoding);
            }
            return Ok(if self.chunked_last {
                BodyFraming::Chunked
            } else {
                BodyFraming::ToClose
            });
        }
        if self.bad_length {
            return Err(FramingError::ContentLength);
        }
        Ok(match self.content_length {
            Some(0) => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::ToClose,
        })
    }
}

/// A `Content-Length` value: `1*DIGIT` (the field's surrounding spaces
/// aside).
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    let digits = trim_ows(value);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The non-empty elements of a comma-separated header list.
pub(crate) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|t| !t.is_empty())
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(list: &[(&str, &str)]) -> FramingHeaders {
        let mut h = FramingHeaders::default();
        for (n, v) in list {
            h.add(n.as_bytes(), v.as_bytes());
        }
        h
    }

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(parse_content_length(b"5"), Some(5));
        assert_eq!(parse_content_length(b"005"), Some(5));
        assert_eq!(parse_content_length(b" 5 "), Some(5));
        for bad in [
            &b"5, 5"[..],
            b"5,5",
            b"+5",
            b"-5",
            b"5x",
            b"0x5",
            b"",
            b"5 5",
            b"5,6",
            b"5,",
            b"18446744073709551616",
        ] {
            assert_eq!(parse_content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn two_different_lengths_are_an_error_in_both_roles() {
        let h = headers(&[("Content-Length", "5"), ("content-length", "6")]);
        assert_eq!(h.request_body(false), Err(FramingError::ContentLength));
        assert_eq!(h.response_body(false), Err(FramingError::ContentLength));
        let same = headers(&[("Content-Length", "5"), ("content-length", "5")]);
        assert_eq!(same.request_body(false), Ok(BodyFraming::Length(5)));
    }

    #[test]
    fn a_request_must_end_its_codings_with_chunked() {
        let ok = headers(&[("Transfer-Encoding", "gzip, chunked")]);
        assert_eq!(ok.request_body(false), Ok(BodyFraming::Chunked));
        for te in [
            "gzip",
            "chunked, gzip",
            "chunked, chunked",
            "identity",
            "chunked;q=1",
        ] {
            let h = headers(&[("Transfer-Encoding", te)]);
            assert_eq!(
                h.request_body(false),
                Err(FramingError::TransferEncoding),
                "{te}"
            );
        }
        // Split over two fields: the same list.
        let split = headers(&[
            ("Transfer-Encoding", "chunked"),
            ("Transfer-Encoding", "gzip"),
        ]);
        assert_eq!(
            split.request_body(false),
            Err(FramingError::TransferEncoding)
        );
    }

    #[test]
    fn te_with_cl_and_te_on_http10_requests_are_rejected() {
        let both = headers(&[("Content-Length", "3"), ("Transfer-Encoding", "chunked")]);
        assert_eq!(both.request_body(false), Err(FramingError::Both));
        let old = headers(&[
            ("Transfer-Encoding", "chunked"),
            ("Connection", "keep-alive"),
        ]);
        assert_eq!(old.request_body(true), Err(FramingError::TransferEncoding));
    }

    #[test]
    fn a_response_whose_codings_do_not_end_in_chunked_runs_to_close() {
        let h = headers(&[("Transfer-Encoding", "gzip")]);
        assert_eq!(h.response_body(false), Ok(BodyFraming::ToClose));
        let chunked = headers(&[("Transfer-Encoding", "gzip, chunked")]);
        assert_eq!(chunked.response_body(false), Ok(BodyFraming::Chunked));
        let with_cl = headers(&[("Transfer-Encoding", "chunked"), ("Content-Length", "10")]);
        assert_eq!(
            with_cl.response_body(false),
            Ok(BodyFraming::Chunked),
            "TE wins"
        );
        assert_eq!(headers(&[]).response_body(false), Ok(BodyFraming::ToClose));
        assert_eq!(
            headers(&[("Content-Length", "7")]).response_body(true),
            Ok(BodyFraming::Empty)
        );
    }

    #[test]
    fn connection_close_is_a_token_in_a_list() {
        assert!(!headers(&[("Connection", "foo, close")]).keep_alive(false));
        assert!(!headers(&[("Connection", "Close")]).keep_alive(false));
        assert!(
            !headers(&[("Connection", "keep-alive"), ("Connection", "close")]).keep_alive(false)
        );
        assert!(headers(&[("Connection", "closed, upgrade")]).keep_alive(false));
        assert!(headers(&[]).keep_alive(false));
        assert!(!headers(&[]).keep_alive(true), "HTTP/1.0 closes by default");
        assert!(headers(&[("Connection", "Keep-Alive")]).keep_alive(true));
    }
}
