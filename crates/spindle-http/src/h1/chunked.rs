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
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(ChunkError::Trailer);
    }
    if value.iter().all(|&b| b == b'\t' || b >= 0x20 && b != 0x7f) {
        Ok(())
    } else {
        Err(ChunkError::Trailer)
    }
}

/// `tchar` of RFC 9110 §5.6.2: what a token (a header name) is made of.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
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
}
