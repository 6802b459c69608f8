//! Entry points for the fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`). Not part of the API: hidden, and free to
//! change.
//!
//! Each function drives the codec as the server or the client would, on
//! bytes only, checks the codec's own invariants (a panic is what the
//! fuzzer reports) and says what it made of the input.

use bytes::BytesMut;

use crate::h1::chunked::{self, Decoded, Decoder};
use crate::h1::framing::BodyFraming;
use crate::h1::request::{self, RequestBody};
use crate::h1::response;
use crate::h1::simple_head;

/// What the codec made of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Messages read completely (heads and bodies), in order.
    pub messages: usize,
    /// Why reading stopped: `None` when the input ended (possibly inside a
    /// message), else the error that refused the next message.
    pub refused: Option<String>,
}

impl Outcome {
    fn ended(messages: usize) -> Outcome {
        Outcome {
            messages,
            refused: None,
        }
    }

    fn refused(messages: usize, why: String) -> Outcome {
        Outcome {
            messages,
            refused: Some(why),
        }
    }
}

/// Reads `input` as a server reads a connection: requests one after the
/// other (pipelined), each head then its body. At each head it also checks
/// that the one-pass scan of simple heads reads what `httparse` reads.
pub fn request(input: &[u8]) -> Outcome {
    let limits = request::Limits {
        max_head_bytes: 64 << 10,
        max_headers: 100,
        max_body_bytes: 16 << 20,
    };
    let mut buf = BytesMut::from(input);
    let mut messages = 0;
    // One per stream, as one per connection.
    let mut known_host = request::KnownHost::default();
    loop {
        if buf.is_empty() {
            return Outcome::ended(messages);
        }
        for room in [1, 24] {
            simple_head::check_against_httparse(&buf, room);
        }
        let before = buf.len();
        let mut req = http::Request::new(());
        let parsed = match request::parse_request(&buf, &limits, &mut req, &mut known_host) {
            Ok(Some(p)) => {
                let _ = buf.split_to(p.head_len);
                p
            }
            Ok(None) => return Outcome::ended(messages),
            Err(status) => return Outcome::refused(messages, status.to_string()),
        };
        assert!(buf.len() < before, "a parsed head consumed nothing");
        match parsed.body {
            RequestBody::None => {}
            RequestBody::Length(n) => {
                assert!(n <= limits.max_body_bytes);
                if (buf.len() as u64) < n {
                    return Outcome::ended(messages);
                }
                let _ = buf.split_to(n as usize);
            }
            RequestBody::Chunked => match chunked::decode_all(&buf) {
                Ok(Some((_, used))) => {
                    let _ = buf.split_to(used);
                }
                Ok(None) => return Outcome::ended(messages),
                Err(e) => return Outcome::refused(messages, e.describe().to_string()),
            },
        }
        messages += 1;
        if !parsed.keep_alive {
            // The server closes after this response: the rest is unread.
            return Outcome::ended(messages);
        }
    }
}

/// Reads `input` as the client reads a response, both as the answer to a
/// `GET` and to a `HEAD`; returns the `GET` reading.
pub fn response(input: &[u8]) -> Outcome {
    let _ = response::parse_response(input, true);
    let mut pos = 0;
    let mut messages = 0;
    loop {
        let head = match response::parse_response(&input[pos..], false) {
            Ok(Some(head)) => head,
            Ok(None) => return Outcome::ended(messages),
            Err(e) => return Outcome::refused(messages, e.to_string()),
        };
        assert!(head.len > 0 && pos + head.len <= input.len());
        pos += head.len;
        if head.status.is_informational() {
            continue; // the client skips 1xx and reads the next head
        }
        match head.framing {
            BodyFraming::Empty => {}
            BodyFraming::Length(n) => {
                if ((input.len() - pos) as u64) < n {
                    return Outcome::ended(messages);
                }
                pos += n as usize;
            }
            BodyFraming::Chunked => match chunked::decode_all(&input[pos..]) {
                Ok(Some((_, used))) => pos += used,
                Ok(None) => return Outcome::ended(messages),
                Err(e) => return Outcome::refused(messages, e.describe().to_string()),
            },
            BodyFraming::ToClose => return Outcome::ended(messages + 1),
        }
        messages += 1;
        if !head.keep_alive || pos == input.len() {
            return Outcome::ended(messages);
        }
    }
}

/// Decodes `input[1..]` as a chunked body, whole and split where
/// `input[0]` says: both must agree.
pub fn chunked(input: &[u8]) -> Outcome {
    let Some((&split, body)) = input.split_first() else {
        return Outcome::ended(0);
    };
    let whole = chunked::decode_all(body);
    let split = (split as usize).min(body.len());
    let mut decoder = Decoder::new();
    let mut buf = body[..split].to_vec();
    let mut fed = split;
    let mut out = Vec::new();
    let stepwise = loop {
        match decoder.decode(&buf, 7) {
            Err(e) => break Err(e),
            Ok((used, found)) => {
                assert!(used <= buf.len());
                if let Decoded::Data { start, len } = found {
                    assert!(len > 0 && start + len <= used);
                    out.extend_from_slice(&buf[start..start + len]);
                }
                buf.drain(..used);
                match found {
                    Decoded::Done => break Ok(Some(out)),
                    Decoded::NeedMore if fed == body.len() => break Ok(None),
                    Decoded::NeedMore => {
                        buf.extend_from_slice(&body[fed..]);
                        fed = body.len();
                    }
                    Decoded::Data { .. } | Decoded::Trailer { .. } => {}
                }
            }
        }
    };
    match (&whole, &stepwise) {
        (Ok(Some((a, _))), Ok(Some(b))) => assert_eq!(a, b, "split decoding differs"),
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        // A split may refuse a line the whole input shows to be too long
        // only at the same point; anything else is a disagreement.
        (w, s) => panic!("whole {w:?} against split {s:?}"),
    }
    match whole {
        Ok(Some(_)) => Outcome::ended(1),
        Ok(None) => Outcome::ended(0),
        Err(e) => Outcome::refused(0, e.describe().to_string()),
    }
}
