//! The chunked transfer coding (RFC 9112 §7.1): size lines and trailers.
//!
//! ```text
//! chunk-size = 1*HEXDIG
//! chunk-ext  = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! ```
//!
//! A size is hex digits only: no sign, no leading whitespace, no `0x`, at
//! most 16 digits (a `u64`). After it, only whitespace (as hyper allows)
//! and an extension may come. Extensions are not interpreted, but a bare CR or LF
//! inside one is rejected, as are control characters: those are how
//! smuggling payloads make two parsers disagree about where a line ends.

/// Longest chunk-size line accepted (size and extensions, without CRLF).
pub(crate) const MAX_SIZE_LINE: usize = 4096;

/// Most bytes of trailer fields accepted after the last chunk.
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkError {
    /// The size is missing, has a non-hex character, or is too large.
    Size,
    /// Something other than whitespace and an extension follows the size,
    /// or an extension holds a CR, LF or control character.
    Extension,
    /// A size line longer than [`MAX_SIZE_LINE`].
    LineTooLong,
    /// A trailer line that is not `name: value`.
    Trailer,
    /// More than [`MAX_TRAILERS`] bytes of trailers.
    TrailersTooLong,
    /// The chunk's data is not followed by CRLF.
    MissingCrlf,
}

impl ChunkError {
    /// What to say about it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            ChunkError::Size => "bad chunk size",
            ChunkError::Extension => "bad chunk extension",
            ChunkError::LineTooLong => "chunk size line too long",
            ChunkError::Trailer => "bad trailer field",
            ChunkError::TrailersTooLong => "trailers too long",
            ChunkError::MissingCrlf => "missing CRLF after chunk data",
        }
    }

    /// The I/O error a body read fails with; `what` names the body
    /// ("body" for a request's, "response" for a response's).
    pub(crate) fn into_io(self, what: &str) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("malformed chunked {what}: {}", self.describe()),
        )
    }
}

/// Parses a chunk-size line (without its CRLF) into the chunk's size.
pub(crate) fn parse_size_line(line: &[u8]) -> Result<u64, ChunkError> {
    if line.len() > MAX_SIZE_LINE {
        return Err(ChunkError::LineTooLong);
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(ChunkError::Size);
    }
    let mut size: u64 = 0;
    for &b in &line[..digits] {
        let d = (b as char).to_digit(16).expect("hex digit") as u64;
        size = size.checked_mul(16).ok_or(ChunkError::Size)? | d;
    }
    let rest = &line[digits..];
    let after_ws = rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map_or(&rest[rest.len()..], |i| &rest[i..]);
    match after_ws.first() {
        // Trailing whitespace without an extension: hyper accepts it.
        None => Ok(size),
        Some(b';') => {
            if after_ws
                .iter()
                .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
            {
                Ok(size)
            } else {
                Err(ChunkError::Extension)
            }
        }
        Some(_) if rest.is_empty() => Err(ChunkError::Size),
        Some(_) => Err(ChunkError::Extension),
    }
}

/// Checks one trailer line (without its CRLF): `field-name ":" field-value`
/// with a token for the name and no control characters but tab in the value.
pub(crate) fn check_trailer(line: &[u8]) -> Result<(), ChunkError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ChunkError::Trailer)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| super::is_tchar(b)) {
        return Err(ChunkError::Trailer);
    }
    if value.iter().all(|&b| b == b'\t' || b >= 0x20 && b != 0x7f) {
        Ok(())
    } else {
        Err(ChunkError::Trailer)
    }
}

/// An incremental decoder of a chunked body, over byte slices: the one
/// used by the server (a request body) and the client (a response body).
///
/// The caller keeps the bytes read so far and calls [`decode`](Self::decode)
/// with them; the decoder says how many it consumed and what it found —
/// body data (a range of the input, never copied), a need for more bytes,
/// or the end of the body (after the trailers). It never buffers: a line it
/// cannot finish yet is left unconsumed, and refused once it is longer than
/// the limits allow, so a peer cannot make either role buffer without bound.
///
/// ```text
/// 5\r\nhello\r\n0\r\n\r\n  ->  Data(2..7)  then  Done
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoder {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines, this many bytes so far.
    Trailers(usize),
    /// The body ended.
    Done,
}

/// What [`Decoder::decode`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// Body bytes: `input[start..start + len]` (already counted as
    /// consumed).
    Data { start: usize, len: usize },
    /// One trailer field line, `input[start..start + len]` without its
    /// CRLF, checked to be `name: value` (already counted as consumed).
    Trailer { start: usize, len: usize },
    /// Nothing more can be decoded from this input: read more bytes.
    NeedMore,
    /// The body (and its trailers) ended.
    Done,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder at the start of a chunked body.
    pub(crate) fn new() -> Decoder {
        Decoder { state: State::Size }
    }

    /// Bytes of the current chunk not yet decoded (0 between chunks): what
    /// the peer has announced and will still send.
    pub(crate) fn chunk_left(&self) -> u64 {
        match self.state {
            State::Data(left) => left,
            _ => 0,
        }
    }

    /// Decodes from `input`, returning at most `max_data` bytes of data at
    /// a time. Returns how many bytes of `input` were consumed (the caller
    /// drops them) and what was found.
    pub(crate) fn decode(
        &mut self,
        input: &[u8],
        max_data: usize,
    ) -> Result<(usize, Decoded), ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Size => {
                    let Some(end) = find_crlf(rest) else {
                        if rest.len() > MAX_SIZE_LINE + 1 {
                            return Err(ChunkError::LineTooLong);
                        }
                        return Ok((pos, Decoded::NeedMore));
                    };
                    let size = parse_size_line(&rest[..end])?;
                    pos += end + 2;
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if rest.is_empty() || max_data == 0 {
                        return Ok((pos, Decoded::NeedMore));
                    }
                    let n = (left.min(rest.len() as u64) as usize).min(max_data);
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok((pos + n, Decoded::Data { start: pos, len: n }));
                }
                State::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        pos += 2;
                        self.state = State::Size;
                    }
                    [] | [b'\r'] => return Ok((pos, Decoded::NeedMore)),
                    _ => return Err(ChunkError::MissingCrlf),
                },
                State::Trailers(seen) => {
                    let Some(end) = find_crlf(rest) else {
                        if seen + rest.len() > MAX_TRAILERS {
                            return Err(ChunkError::TrailersTooLong);
                        }
                        return Ok((pos, Decoded::NeedMore));
                    };
                    pos += end + 2;
                    if end == 0 {
                        self.state = State::Done;
                        return Ok((pos, Decoded::Done));
                    }
                    check_trailer(&rest[..end])?;
                    let seen = seen + end + 2;
                    if seen > MAX_TRAILERS {
                        return Err(ChunkError::TrailersTooLong);
                    }
                    self.state = State::Trailers(seen);
                    let start = pos - end - 2;
                    return Ok((pos, Decoded::Trailer { start, len: end }));
                }
                State::Done => return Ok((pos, Decoded::Done)),
            }
        }
    }
}

/// Where the first CRLF in `bytes` starts.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

/// Decodes a whole chunked body held in `input`: the body, and how many
/// bytes of `input` the chunked message took (what follows is the next
/// message). `Ok(None)` if `input` ends before the body does.
pub(crate) fn decode_all(input: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ChunkError> {
    let mut decoder = Decoder::new();
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let (used, found) = decoder.decode(&input[pos..], usize::MAX)?;
        match found {
            Decoded::Data { start, len } => {
                body.extend_from_slice(&input[pos + start..pos + start + len]);
                pos += used;
            }
            Decoded::Trailer { .. } => pos += used,
            Decoded::NeedMore => return Ok(None),
            Decoded::Done => return Ok(Some((body, pos + used))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sizes_parse() {
        assert_eq!(parse_size_line(b"0"), Ok(0));
        assert_eq!(parse_size_line(b"1a"), Ok(26));
        assert_eq!(parse_size_line(b"FF"), Ok(255));
        assert_eq!(parse_size_line(b"000010"), Ok(16));
        assert_eq!(parse_size_line(b"ffffffffffffffff"), Ok(u64::MAX));
    }

    #[test]
    fn extensions_are_allowed_and_not_interpreted() {
        assert_eq!(parse_size_line(b"5;name=value"), Ok(5));
        assert_eq!(parse_size_line(b"5 ;name"), Ok(5));
        assert_eq!(
            parse_size_line(b"5 "),
            Ok(5),
            "trailing whitespace, as hyper"
        );
        assert_eq!(parse_size_line(b"5\t; a=\"quoted; still\""), Ok(5));
    }

    #[test]
    fn smuggling_forms_of_the_size_are_rejected() {
        for line in [
            &b"+5"[..],
            b"-5",
            b" 5",
            b"\t5",
            b"0x5",
            b"5 5",
            b"5g",
            b"",
            b";ext",
            b"1ffffffffffffffff", // 17 digits
            b"00000000000000001", // 17 digits, small value: still too long
        ] {
            assert!(
                parse_size_line(line).is_err(),
                "{:?} accepted",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn bare_cr_lf_and_controls_in_an_extension_are_rejected() {
        for line in [
            &b"5;a\rb"[..],
            b"5;a\nb",
            b"5;\x00",
            b"5;a\x7f",
            b"5\r",
            b"5\n",
        ] {
            assert!(parse_size_line(line).is_err(), "{line:?} accepted");
        }
    }

    #[test]
    fn an_overlong_size_line_is_rejected_before_it_is_parsed() {
        let mut line = b"5;".to_vec();
        line.resize(MAX_SIZE_LINE + 1, b'a');
        assert_eq!(parse_size_line(&line), Err(ChunkError::LineTooLong));
    }

    #[test]
    fn trailers_must_be_name_colon_value() {
        assert_eq!(check_trailer(b"Expires: never"), Ok(()));
        assert_eq!(check_trailer(b"x-checksum:abc"), Ok(()));
        for line in [
            &b"no colon"[..],
            b": empty name",
            b"bad name: v",
            b"x:\x00",
            b"x\r: v",
        ] {
            assert_eq!(check_trailer(line), Err(ChunkError::Trailer), "{line:?}");
        }
    }

    /// Feeds `input` to a decoder `step` bytes at a time, as a socket would
    /// deliver it, keeping what the decoder leaves unconsumed.
    fn decode_in_steps(input: &[u8], step: usize, max_data: usize) -> Result<Vec<u8>, ChunkError> {
        let mut decoder = Decoder::new();
        let (mut buf, mut fed, mut body) = (Vec::new(), 0, Vec::new());
        loop {
            let (used, found) = decoder.decode(&buf, max_data)?;
            if let Decoded::Data { start, len } = found {
                body.extend_from_slice(&buf[start..start + len]);
            }
            buf.drain(..used);
            match found {
                Decoded::Done => return Ok(body),
                Decoded::NeedMore if fed == input.len() => panic!("decoder wants more at the end"),
                Decoded::NeedMore => {
                    let next = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..next]);
                    fed = next;
                }
                Decoded::Data { .. } | Decoded::Trailer { .. } => {}
            }
        }
    }

    #[test]
    fn a_body_decodes_the_same_however_it_is_split() {
        let input = b"5;ext=1\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-t: 1\r\n\r\n";
        let want = b"helloabcdefghijklmnopqrstuvwxyz".to_vec();
        for step in 1..input.len() {
            for max_data in [1, 3, usize::MAX] {
                assert_eq!(
                    decode_in_steps(input, step, max_data),
                    Ok(want.clone()),
                    "step {step}"
                );
            }
        }
    }

    #[test]
    fn decode_all_says_where_the_message_ends() {
        let input = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        let (body, used) = decode_all(input).unwrap().unwrap();
        assert_eq!(body, b"abc");
        assert_eq!(&input[used..], b"GET / HTTP/1.1\r\n");
        assert_eq!(decode_all(b"3\r\nab"), Ok(None), "incomplete");
    }

    #[test]
    fn data_not_followed_by_crlf_is_rejected_at_once() {
        assert_eq!(
            decode_all(b"3\r\nabcX\r\n0\r\n\r\n"),
            Err(ChunkError::MissingCrlf)
        );
        // A chunk longer than its size says (a smuggling form).
        assert_eq!(
            decode_all(b"3\r\nabcdef\r\n0\r\n\r\n"),
            Err(ChunkError::MissingCrlf)
        );
        assert_eq!(
            decode_all(b"3\r\nabc\r"),
            Ok(None),
            "a lone CR may be the start of CRLF"
        );
    }

    #[test]
    fn an_endless_size_line_or_trailer_is_refused_not_buffered() {
        let mut d = Decoder::new();
        let long = vec![b'1'; MAX_SIZE_LINE + 2];
        assert_eq!(d.decode(&long, usize::MAX), Err(ChunkError::LineTooLong));
        let mut d = Decoder::new();
        let mut trailers = b"0\r\n".to_vec();
        trailers.extend(std::iter::repeat_n(b'a', MAX_TRAILERS + 1));
        assert_eq!(
            d.decode(&trailers, usize::MAX),
            Err(ChunkError::TrailersTooLong)
        );
    }

    #[test]
    fn smuggling_bodies_are_rejected_by_the_decoder() {
        for bad in [
            &b"+5\r\nhello\r\n0\r\n\r\n"[..],
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"5;a\rb\r\nhello\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"0\r\nbad trailer\r\n\r\n",
            b"0\r\n: empty-name\r\n\r\n",
        ] {
            assert!(
                decode_all(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
