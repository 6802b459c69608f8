//! Reading a message body, for both roles: the one [`Decoder`] a server
//! reads request bodies with and a client reads response bodies with.
//!
//! A decoder knows how the body is delimited ([`BodyFraming`]) and how far
//! it has been read; it reads from a [`Source`], the connection's buffer
//! and a way to get more, which each role supplies with its own waits and
//! errors (a server's per-read timeout and body deadline, a client's
//! exchange deadline). It copies body bytes out, never more than the
//! framing allows, so what follows the body stays in the buffer for the
//! next message; it counts them against a limit, and refuses a chunk
//! announced larger than what may still come before reading it.

use std::io;

use super::chunked;
use super::framing::BodyFraming;

/// Where a decoder reads from: bytes received and not consumed yet, and
/// the connection behind them.
pub(crate) trait Source {
    /// The bytes received and not consumed yet.
    fn buffered(&self) -> &[u8];
    /// Drops the first `n` buffered bytes.
    fn consume(&mut self, n: usize);
    /// Receives more bytes into the buffer, waiting as the role allows;
    /// `Ok(0)` when the peer closed.
    fn fill(&mut self) -> io::Result<usize>;
    /// The error for a body cut short by the peer's close.
    fn truncated(&self) -> io::Error;
    /// The error for a body past the limit.
    fn too_large(&self) -> io::Error;
}

/// How the rest of a body is delimited, and how far it has been read.
#[derive(Debug)]
enum Kind {
    /// This many bytes left.
    Length(u64),
    /// The chunked coding (RFC 9112 §7.1).
    Chunked(chunked::Decoder),
    /// Until the peer closes (a response only).
    ToClose,
    /// Read to its end.
    Done,
}

/// A body being read: see the module docs.
#[derive(Debug)]
pub(crate) struct Decoder {
    kind: Kind,
    /// Body bytes that may still be taken.
    left: u64,
    /// The role's name for the body in error messages ("body", "response").
    what: &'static str,
    /// The body ended at the peer's close rather than by its framing.
    ended_by_close: bool,
    /// Trailer fields of a chunked body, as they came.
    trailers: Option<http::HeaderMap>,
}

impl Decoder {
    /// A decoder for a body framed as `framing`, of at most `limit` bytes;
    /// `what` names it in a malformed-chunk error.
    pub(crate) fn new(framing: BodyFraming, limit: u64, what: &'static str) -> Decoder {
        let kind = match framing {
            BodyFraming::Empty | BodyFraming::Length(0) => Kind::Done,
            BodyFraming::Length(n) => Kind::Length(n),
            BodyFraming::Chunked => Kind::Chunked(chunked::Decoder::new()),
            BodyFraming::ToClose => Kind::ToClose,
        };
        Decoder {
            kind,
            left: limit,
            what,
            ended_by_close: false,
            trailers: None,
        }
    }

    /// A decoder with nothing to read (a placeholder while a body's
    /// decoder is lent out).
    pub(crate) fn done() -> Decoder {
        Decoder::new(BodyFraming::Empty, 0, "body")
    }

    /// A body read to its end (or one that never had bytes).
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.kind, Kind::Done)
    }

    /// The trailer fields the body ended with (a chunked body's; fields
    /// HTTP/1.1 may not carry there, such as framing, are dropped), once it
    /// has been read to its end.
    pub(crate) fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        self.trailers.take()
    }

    /// Whether the body ended at the peer's close: the connection carries
    /// nothing more.
    pub(crate) fn ended_by_close(&self) -> bool {
        self.ended_by_close
    }

    /// Reads the next body bytes into `out` (not empty): how many, and 0
    /// at the body's end. An error leaves the body unusable; the caller
    /// drops its connection.
    pub(crate) fn read(&mut self, src: &mut impl Source, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match &mut self.kind {
                Kind::Done => return Ok(0),
                Kind::Length(left) => {
                    if src.buffered().is_empty() && src.fill()? == 0 {
                        return Err(src.truncated());
                    }
                    let buffered = src.buffered();
                    let n = (*left).min(buffered.len() as u64).min(out.len() as u64) as usize;
                    out[..n].copy_from_slice(&buffered[..n]);
                    src.consume(n);
                    *left -= n as u64;
                    if *left == 0 {
                        self.kind = Kind::Done;
                    }
                    return self.count(src, n);
                }
                Kind::Chunked(decoder) => {
                    let (used, found) = decoder
                        .decode(src.buffered(), out.len())
                        .map_err(|e| e.into_io(self.what))?;
                    // A chunk announced larger than what may still come is
                    // refused before it is read.
                    if decoder.chunk_left() > self.left {
                        return Err(src.too_large());
                    }
                    match found {
                        chunked::Decoded::Data { start, len } => {
                            out[..len].copy_from_slice(&src.buffered()[start..start + len]);
                            src.consume(used);
                            return self.count(src, len);
                        }
                        chunked::Decoded::Trailer { start, len } => {
                            let line = &src.buffered()[start..start + len];
                            keep_trailer(self.trailers.get_or_insert_default(), line);
                            src.consume(used);
                        }
                        chunked::Decoded::Done => {
                            src.consume(used);
                            self.kind = Kind::Done;
                            return Ok(0);
                        }
                        chunked::Decoded::NeedMore => {
                            src.consume(used);
                            if src.fill()? == 0 {
                                return Err(src.truncated());
                            }
                        }
                    }
                }
                Kind::ToClose => {
                    if src.buffered().is_empty() && src.fill()? == 0 {
                        self.kind = Kind::Done;
                        self.ended_by_close = true;
                        return Ok(0);
                    }
                    let buffered = src.buffered();
                    let n = buffered.len().min(out.len());
                    out[..n].copy_from_slice(&buffered[..n]);
                    src.consume(n);
                    return self.count(src, n);
                }
            }
        }
    }

    /// Counts `n` body bytes taken against the limit.
    fn count(&mut self, src: &impl Source, n: usize) -> io::Result<usize> {
        match self.left.checked_sub(n as u64) {
            Some(left) => {
                self.left = left;
                Ok(n)
            }
            None => Err(src.too_large()),
        }
    }
}

/// Adds a trailer line (checked to be `name: value`) to `trailers`, unless
/// its field may not be sent as a trailer (RFC 9110 §6.5.1: framing,
/// routing, authentication and the like) or is not a valid header.
fn keep_trailer(trailers: &mut http::HeaderMap, line: &[u8]) {
    use http::header;
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return;
    };
    let Ok(name) = header::HeaderName::from_bytes(&line[..colon]) else {
        return;
    };
    let value = line[colon + 1..].trim_ascii();
    let forbidden = [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::HOST,
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::AUTHORIZATION,
        header::SET_COOKIE,
        header::CONTENT_TYPE,
        header::CONTENT_ENCODING,
    ];
    if forbidden.contains(&name) {
        return;
    }
    if let Ok(value) = header::HeaderValue::from_bytes(value) {
        trailers.append(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes arriving in the given pieces, then the peer's close.
    struct Pieces {
        buf: Vec<u8>,
        rest: std::collections::VecDeque<&'static [u8]>,
    }

    impl Pieces {
        fn new(pieces: &[&'static [u8]]) -> Pieces {
            Pieces {
                buf: Vec::new(),
                rest: pieces.iter().copied().collect(),
            }
        }
    }

    impl Source for Pieces {
        fn buffered(&self) -> &[u8] {
            &self.buf
        }
        fn consume(&mut self, n: usize) {
            self.buf.drain(..n);
        }
        fn fill(&mut self) -> io::Result<usize> {
            let piece = self.rest.pop_front().unwrap_or_default();
            self.buf.extend_from_slice(piece);
            Ok(piece.len())
        }
        fn truncated(&self) -> io::Error {
            io::Error::new(io::ErrorKind::UnexpectedEof, "truncated")
        }
        fn too_large(&self) -> io::Error {
            io::Error::new(io::ErrorKind::FileTooLarge, "too large")
        }
    }

    fn read_all(d: &mut Decoder, src: &mut Pieces, step: usize) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        let mut out = vec![0; step];
        loop {
            match d.read(src, &mut out)? {
                0 => return Ok(body),
                n => body.extend_from_slice(&out[..n]),
            }
        }
    }

    #[test]
    fn a_length_body_stops_at_its_length_and_leaves_the_next_message() {
        let mut src = Pieces::new(&[b"hel", b"lo GET / HTTP/1.1"]);
        let mut d = Decoder::new(BodyFraming::Length(5), 100, "body");
        assert_eq!(read_all(&mut d, &mut src, 2).unwrap(), b"hello");
        assert!(d.is_done() && !d.ended_by_close());
        assert_eq!(src.buffered(), b" GET / HTTP/1.1");
    }

    #[test]
    fn a_length_body_cut_short_is_truncated() {
        let mut src = Pieces::new(&[b"hel"]);
        let mut d = Decoder::new(BodyFraming::Length(5), 100, "body");
        let e = read_all(&mut d, &mut src, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_chunked_body_in_pieces_decodes_and_leaves_the_next_message() {
        let mut src = Pieces::new(&[b"3\r\nab", b"c\r\n2\r", b"\nde\r\n0\r\n\r\nNEXT"]);
        let mut d = Decoder::new(BodyFraming::Chunked, 100, "body");
        assert_eq!(read_all(&mut d, &mut src, 1).unwrap(), b"abcde");
        assert!(d.is_done());
        assert_eq!(src.buffered(), b"NEXT");
    }

    #[test]
    fn a_chunk_announced_past_the_limit_is_refused_before_it_is_read() {
        let mut src = Pieces::new(&[b"ffff\r\n", b"x"]);
        let mut d = Decoder::new(BodyFraming::Chunked, 100, "body");
        let e = read_all(&mut d, &mut src, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(src.rest.len(), 1, "the chunk's data was not waited for");
    }

    #[test]
    fn a_length_body_past_the_limit_is_refused() {
        let mut src = Pieces::new(&[b"0123456789"]);
        let mut d = Decoder::new(BodyFraming::Length(10), 4, "body");
        let e = read_all(&mut d, &mut src, 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
    }

    #[test]
    fn a_malformed_chunk_size_is_invalid_data_naming_the_body() {
        let mut src = Pieces::new(&[b"zz\r\n"]);
        let mut d = Decoder::new(BodyFraming::Chunked, 100, "response");
        let e = read_all(&mut d, &mut src, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("chunked response"), "{e}");
    }

    #[test]
    fn a_body_to_close_ends_at_the_close() {
        let mut src = Pieces::new(&[b"all ", b"of it"]);
        let mut d = Decoder::new(BodyFraming::ToClose, 100, "response");
        assert_eq!(read_all(&mut d, &mut src, 3).unwrap(), b"all of it");
        assert!(d.is_done() && d.ended_by_close());
    }

    #[test]
    fn an_empty_body_reads_nothing() {
        let mut src = Pieces::new(&[b"GET"]);
        let mut d = Decoder::new(BodyFraming::Empty, 0, "body");
        assert!(d.is_done());
        assert_eq!(read_all(&mut d, &mut src, 3).unwrap(), b"");
        assert_eq!(src.rest.len(), 1, "nothing was read");
    }
}
