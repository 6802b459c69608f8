//! The request head nearly every client sends, read in one pass over its
//! bytes: a token method, a target of visible ASCII, `HTTP/1.1` or
//! `HTTP/1.0`, CRLF line ends, fields of a token name and a value of
//! visible ASCII, spaces and tabs. Anything else — a bare LF, leading
//! empty lines, a byte outside those sets, an incomplete head, more fields
//! than the caller has room for — is not this module's to decide: [`scan`]
//! says `None` and the caller asks `httparse`.
//!
//! `httparse` stays the reference. On every head [`scan`] accepts, it
//! reads exactly what `httparse` reads — the same method, target,
//! version, fields (values trimmed of trailing spaces and tabs) and
//! length. The tests below check that on generated and mangled heads, and
//! the `request_head` fuzz target at every head of whatever a fuzzer
//! finds. So which heads are valid is still decided in one place; this
//! module only finds the common answer with fewer instructions: a short
//! head's bytes walked once, eight at a time where the runs are long
//! (targets and values), where `httparse`'s vectorised scans cost more to
//! set up than such a head takes to read.

/// Where one field's name and value lie in the head: byte offsets, so a
/// caller's array of them is cheap to set up (8 bytes a field, zeroed).
/// A head whose fields do not all lie in the first 64 KiB is left to
/// `httparse`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FieldSpan {
    name: (u16, u16),
    value: (u16, u16),
}

impl FieldSpan {
    /// The field's name, in the head it was scanned from.
    pub(crate) fn name<'b>(&self, head: &'b [u8]) -> &'b [u8] {
        &head[self.name.0 as usize..self.name.1 as usize]
    }

    /// The field's value, trimmed, in the head it was scanned from.
    pub(crate) fn value<'b>(&self, head: &'b [u8]) -> &'b [u8] {
        &head[self.value.0 as usize..self.value.1 as usize]
    }
}

/// A head [`scan`] read: its request line, and how many of the caller's
/// spans its fields filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SimpleHead<'b> {
    /// The method's bytes (a token).
    pub(crate) method: &'b [u8],
    /// The request target's bytes (visible ASCII).
    pub(crate) target: &'b [u8],
    /// The minor version: 1 for `HTTP/1.1`, 0 for `HTTP/1.0` (as
    /// `httparse` says it).
    pub(crate) minor_version: u8,
    /// Bytes the head took, its empty last line included.
    pub(crate) len: usize,
    /// How many spans, from the first, hold its fields.
    pub(crate) fields: usize,
}

/// A byte's classes, as bits: what it may be part of.
const TOKEN: u8 = 1; // a method or a field name (RFC 9110 §5.6.2 tchar)
const TARGET: u8 = 2; // a request target: visible ASCII
const VALUE: u8 = 4; // a field value: visible ASCII, space, tab

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if super::is_tchar(b) {
            t[c] |= TOKEN;
        }
        if b.is_ascii_graphic() {
            t[c] |= TARGET | VALUE;
        }
        if b == b' ' || b == b'\t' {
            t[c] |= VALUE;
        }
        c += 1;
    }
    t
};

/// The first index at or after `i` whose byte is not of `class`.
fn skip(b: &[u8], mut i: usize, class: u8) -> usize {
    while i < b.len() && CLASS[b[i] as usize] & class != 0 {
        i += 1;
    }
    i
}

/// [`skip`] for [`TOKEN`], four bytes a step while all four are of it.
fn skip_token(b: &[u8], mut i: usize) -> usize {
    while let Some(&[b0, b1, b2, b3]) = b.get(i..i + 4) {
        let all = CLASS[b0 as usize] & CLASS[b1 as usize] & CLASS[b2 as usize] & CLASS[b3 as usize];
        if all & TOKEN == 0 {
            break;
        }
        i += 4;
    }
    skip(b, i, TOKEN)
}

/// [`skip`] for the classes of long runs, [`TARGET`] and [`VALUE`], eight
/// bytes at a time: a word is passed over whole when none of its bytes is
/// below `low` or above `~`; a tab (of [`VALUE`], below `low`) stops the
/// word look for one byte.
#[inline(always)]
fn skip_run(b: &[u8], mut i: usize, class: u8, low: u8) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    loop {
        while let Some(word) = b.get(i..i + 8) {
            let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            // The high bit of a byte below `low` (a borrow can only mark
            // bytes after a marked one: the lowest mark is exact), and of
            // one above 0x7e (`+ 1` carries into bit 7 only from 0x7f).
            let below = x.wrapping_sub(ONES * low as u64) & !x & HIGH;
            let above = (x.wrapping_add(ONES) | x) & HIGH;
            let stop = below | above;
            if stop != 0 {
                i += stop.trailing_zeros() as usize / 8;
                break;
            }
            i += 8;
        }
        // Fewer than eight bytes left, or a byte that stopped the word.
        let end = skip(b, i, class);
        if end == i || end + 8 > b.len() {
            return end;
        }
        i = end;
    }
}

/// Reads the head at the start of `buf` if it has the simple shape, its
/// fields' spans into `spans`. `None` when it has not, is incomplete, or
/// has more fields than `spans` holds: ask `httparse`.
///
/// (`tests::the_common_heads_are_read_here` shows what it returns.)
pub(crate) fn scan<'b>(buf: &'b [u8], spans: &mut [FieldSpan]) -> Option<SimpleHead<'b>> {
    // Offsets fit a `u16`: a longer head is `httparse`'s.
    let b = &buf[..buf.len().min(u16::MAX as usize)];
    // Most requests are GETs: their method is one compare.
    let end = if b.starts_with(b"GET ") {
        3
    } else {
        skip_token(b, 0)
    };
    if end == 0 || b.get(end) != Some(&b' ') {
        return None;
    }
    let method = &b[..end];
    let start = end + 1;
    let end = skip_run(b, start, TARGET, b'!');
    if end == start || b.get(end) != Some(&b' ') {
        return None;
    }
    let target = &b[start..end];
    let minor_version = match b.get(end + 1..end + 11)? {
        b"HTTP/1.1\r\n" => 1,
        b"HTTP/1.0\r\n" => 0,
        _ => return None,
    };
    let mut i = end + 11;
    let mut fields = 0;
    loop {
        if b.get(i..i + 2)? == b"\r\n" {
            return Some(SimpleHead {
                method,
                target,
                minor_version,
                len: i + 2,
                fields,
            });
        }
        let name_end = skip_token(b, i);
        if name_end == i || b.get(name_end) != Some(&b':') {
            return None;
        }
        let mut value_start = name_end + 1;
        while matches!(b.get(value_start), Some(b' ' | b'\t')) {
            value_start += 1;
        }
        let line_end = skip_run(b, value_start, VALUE, b' ');
        if b.get(line_end..line_end + 2)? != b"\r\n" {
            return None;
        }
        let mut value_end = line_end;
        while value_end > value_start && matches!(b[value_end - 1], b' ' | b'\t') {
            value_end -= 1;
        }
        // Every offset is below `b.len()`, at most `u16::MAX`.
        *spans.get_mut(fields)? = FieldSpan {
            name: (i as u16, name_end as u16),
            value: (value_start as u16, value_end as u16),
        };
        fields += 1;
        i = line_end + 2;
    }
}

/// What `httparse` reads in `buf` when [`scan`] reads it too: for the
/// differential checks (the tests below, `fuzzing::request`).
/// Panics, saying how, where the two differ.
pub(crate) fn check_against_httparse(buf: &[u8], room: usize) {
    let mut spans = vec![FieldSpan::default(); room];
    let Some(head) = scan(buf, &mut spans) else {
        return;
    };
    let mut slots = vec![httparse::EMPTY_HEADER; room];
    let mut reference = httparse::Request::new(&mut slots);
    let parsed = reference.parse(buf);
    assert_eq!(
        parsed,
        Ok(httparse::Status::Complete(head.len)),
        "{buf:?}: scanned {head:?}"
    );
    assert_eq!(reference.method.map(str::as_bytes), Some(head.method));
    assert_eq!(reference.path.map(str::as_bytes), Some(head.target));
    assert_eq!(reference.version, Some(head.minor_version));
    assert_eq!(reference.headers.len(), head.fields, "{buf:?}");
    for (h, span) in reference.headers.iter().zip(&spans) {
        assert_eq!(h.name.as_bytes(), span.name(buf), "{buf:?}");
        assert_eq!(h.value, span.value(buf), "{buf:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(head: &[u8]) -> Option<(SimpleHead<'_>, Vec<(String, String)>)> {
        let mut spans = [FieldSpan::default(); 8];
        let got = scan(head, &mut spans)?;
        let fields = spans[..got.fields]
            .iter()
            .map(|s| {
                let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                (text(s.name(head)), text(s.value(head)))
            })
            .collect();
        Some((got, fields))
    }

    #[test]
    fn the_common_heads_are_read_here() {
        let head = b"GET /a?b=c HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\nnext";
        let (got, fields) = scanned(head).unwrap();
        assert_eq!(got.method, b"GET");
        assert_eq!(got.target, b"/a?b=c");
        assert_eq!(got.minor_version, 1);
        assert_eq!(got.len, head.len() - 4);
        assert_eq!(
            fields,
            [
                ("Host".into(), "127.0.0.1:8080".into()),
                ("Accept".into(), "*/*".into())
            ]
        );
        let (got, fields) = scanned(b"POST * HTTP/1.0\r\nX:\t v \t\r\nY:\r\n\r\n").unwrap();
        assert_eq!((got.method, got.minor_version), (&b"POST"[..], 0));
        assert_eq!(fields, [("X".into(), "v".into()), ("Y".into(), "".into())]);
        assert_eq!(scanned(b"GET / HTTP/1.1\r\n\r\n").unwrap().0.fields, 0);
    }

    /// Each of these is `httparse`'s to decide: a valid head of a rarer
    /// shape, an invalid one, or one not complete yet.
    #[test]
    fn every_other_shape_is_left_to_httparse() {
        for head in [
            &b"\r\nGET / HTTP/1.1\r\n\r\n"[..],       // a leading empty line
            b"GET / HTTP/1.1\n\n",                    // bare line feeds
            b"GET / HTTP/1.1\r\nA: b\n\r\n",          // one bare line feed
            b"GET  / HTTP/1.1\r\n\r\n",               // two spaces
            b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n",        // a non-ASCII target
            b"GET / HTTP/1.1\r\nA: \xc3\xa9\r\n\r\n", // a non-ASCII value
            b"GET / HTTP/1.1\r\nA : b\r\n\r\n",       // a space before the colon
            b"GET / HTTP/1.1\r\n b\r\n\r\n",          // an obsolete fold
            b"GET / HTTP/1.1\r\nA: b\x00c\r\n\r\n",   // a NUL
            b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",     // a bare CR
            b"GET / HTTP/2.0\r\n\r\n",                // another version
            b"GET / http/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",        // not a token
            b"GET / HTTP/1.1\r\nHost: a\r\n", // incomplete
            b"GET / HTTP/1.1\r\nHost: a\r\n\r",
            b"GET / HTT",
            b"",
        ] {
            assert!(scanned(head).is_none(), "{head:?}");
            check_against_httparse(head, 8);
        }
        // More fields than the caller has room for.
        let mut spans = [FieldSpan::default(); 1];
        assert!(scan(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", &mut spans).is_none());
        // A head longer than offsets reach.
        let long = format!("GET / HTTP/1.1\r\nA: {}\r\n\r\n", "v".repeat(70_000));
        assert!(scanned(long.as_bytes()).is_none());
    }

    /// A small deterministic generator (xorshift), so the test needs no
    /// crate and fails the same way every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a>(&mut self, from: &[&'a [u8]]) -> &'a [u8] {
            from[self.below(from.len())]
        }
    }

    /// A head of the shape clients send, with the odd part anywhere:
    /// bytes at the edges of each class, tabs and spaces around values,
    /// rarer versions and line ends.
    fn generated(rng: &mut Rng) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(rng.pick(&[b"GET", b"POST", b"M-SEARCH", b"x!#$%&'*+.^_`|~9", b"A"]));
        h.push(b' ');
        h.extend_from_slice(rng.pick(&[
            b"/",
            b"*",
            b"/a/b?c=d&e#f",
            b"http://h:1/~",
            b"/!\"<>\\^{|}",
        ]));
        h.push(b' ');
        h.extend_from_slice(rng.pick(&[
            b"HTTP/1.1\r\n",
            b"HTTP/1.1\r\n",
            b"HTTP/1.1\r\n",
            b"HTTP/1.0\r\n",
            b"HTTP/1.1\n",
        ]));
        for _ in 0..rng.below(6) {
            h.extend_from_slice(rng.pick(&[b"Host", b"content-length", b"X-`|~!", b"a"]));
            h.push(b':');
            h.extend_from_slice(rng.pick(&[b"", b" ", b"\t", b" \t "]));
            h.extend_from_slice(rng.pick(&[
                b"",
                b"v",
                b"a b",
                b"x\ty",
                b"~!\"(),/:;<=>?@[\\]{}",
                b"127.0.0.1:8080",
            ]));
            h.extend_from_slice(rng.pick(&[b"", b" ", b"\t", b" \t"]));
            h.extend_from_slice(
                rng.pick(&[b"\r\n", b"\r\n", b"\r\n", b"\r\n", b"\r\n", b"\r\n", b"\n"]),
            );
        }
        h.extend_from_slice(rng.pick(&[b"\r\n", b"\r\n", b"\r\n", b"\r\n", b"\n"]));
        h
    }

    /// Bytes that sit at the edges of the classes, or end lines.
    const EDGES: &[u8] = &[
        0, b'\t', b'\n', b'\r', b' ', b'!', b'"', b'(', b',', b'/', b':', b';', b'@', b'[', b'\\',
        b'{', b'}', b'~', 0x7f, 0x80, 0xc3, 0xff,
    ];

    /// On generated heads, each also mangled (a byte replaced by an edge
    /// byte, a byte dropped, a byte added, the head cut short): whenever
    /// this module reads a head, `httparse` reads the same thing. Most of
    /// the unmangled heads must be read here, or the check proves little.
    #[test]
    fn whatever_is_read_here_httparse_reads_the_same() {
        let mut rng = Rng(0x5eed_1234_abcd_9876);
        let mut read_here = 0;
        const HEADS: usize = 20_000;
        for _ in 0..HEADS {
            let head = generated(&mut rng);
            let room = 1 + rng.below(8);
            read_here += scan(&head, &mut vec![FieldSpan::default(); room]).is_some() as usize;
            check_against_httparse(&head, room);
            for _ in 0..8 {
                let mut m = head.clone();
                let at = rng.below(m.len());
                match rng.below(4) {
                    0 => m[at] = EDGES[rng.below(EDGES.len())],
                    1 => {
                        m.remove(at);
                    }
                    2 => m.insert(at, EDGES[rng.below(EDGES.len())]),
                    _ => m.truncate(at),
                }
                m.extend_from_slice(b"GET / HTTP/1.1\r\n"); // what may follow a head
                check_against_httparse(&m, room);
            }
        }
        assert!(
            read_here > HEADS / 4,
            "only {read_here} of {HEADS} read here"
        );
    }
}
