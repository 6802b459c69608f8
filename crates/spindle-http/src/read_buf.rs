//! A server connection's read buffer: the bytes read from the socket and
//! not yet consumed (a head being read, the start of a body, a pipelined
//! request).
//!
//! Two costs shaped it, both about memory a parked connection holds:
//!
//! - **No zeroing per read, no scratch copy.** Safe code can only read into
//!   initialised bytes. The buffer is a `Vec<u8>` whose every byte is
//!   initialised (zeroed once, when the buffer is made or grows) and two
//!   cursors, `[start, end)`; a read lands in `[end, len)` directly. A
//!   separate zeroed scratch array per connection, copied from, cost a
//!   second 8 KiB per connection; zeroing the free space before each read
//!   cost a `memset` per request.
//! - **No buffer while the handler runs, nor while the connection waits
//!   for its next request.** A request whose head is parsed owns a copy of
//!   its head, so a connection whose buffer is then empty gives the buffer
//!   back ([`ReadBuf::release`]) before calling the handler; with nothing
//!   buffered it also gives it back before it waits for bytes, and takes
//!   one only once the socket is readable. Released buffers wait in a
//!   small per-thread cache for the next connection that reads, so under
//!   load a handful of buffers serve every connection, and 10 000 requests
//!   parked in their handlers, or 10 000 idle keep-alive connections, hold
//!   none.
//!
//! The cache is per worker thread and touched only between reads (never
//! across a wait), so a fiber moving to another worker cannot observe it
//! half-updated.

use std::cell::RefCell;
use std::io;

/// Size of a fresh buffer: the most one read asks for until the buffer
/// has had to grow.
const INITIAL: usize = 8 * 1024;
/// Free space below which a read first makes room (compacts, or grows).
const MIN_READ: usize = 1024;
/// Released buffers each thread keeps.
const CACHED: usize = 256;

thread_local! {
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    /// Buffers made on this thread (for tests: made minus cached is what
    /// connections hold).
    static MADE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many buffers made on this thread are not in its cache: held by
/// connections (or dropped, which no test here does).
#[cfg(test)]
pub(crate) fn held_on_this_thread() -> usize {
    MADE.get() - SPARE.with(|s| s.borrow().len())
}

/// Bytes read and not yet consumed (see the module docs).
#[derive(Default)]
pub(crate) struct ReadBuf {
    /// Every byte initialised; `[start, end)` is the content.
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// An empty buffer holding no memory.
    pub(crate) const fn new() -> ReadBuf {
        ReadBuf {
            data: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// A buffer holding `bytes` (for tests and the fuzzing entry points).
    #[cfg(test)]
    pub(crate) fn from_slice(bytes: &[u8]) -> ReadBuf {
        ReadBuf {
            data: bytes.to_vec(),
            start: 0,
            end: bytes.len(),
        }
    }

    /// The unconsumed bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drops the first `n` unconsumed bytes.
    ///
    /// # Panics
    /// If fewer than `n` are there.
    pub(crate) fn consume(&mut self, n: usize) {
        assert!(n <= self.len(), "consumed more than was read");
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Calls `read` once with the free space after the unconsumed bytes
    /// (making room first) and keeps what it says it wrote.
    pub(crate) fn fill_with(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        self.make_room();
        let free = &mut self.data[self.end..];
        let n = read(free)?;
        assert!(
            n <= free.len(),
            "a read claimed more bytes than it was given"
        );
        self.end += n;
        Ok(n)
    }

    /// At least [`MIN_READ`] bytes free after `end`: takes a buffer if it
    /// has none, moves the content to the front, or doubles the buffer.
    fn make_room(&mut self) {
        if self.data.is_empty() {
            self.data = take_spare();
        }
        if self.data.len() - self.end >= MIN_READ {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < MIN_READ {
            let grown = (self.data.len() * 2).max(INITIAL);
            self.data.resize(grown, 0);
        }
    }

    /// Gives the memory back (to this thread's cache) if nothing is
    /// buffered; a later read takes a buffer again.
    pub(crate) fn release(&mut self) {
        if !self.is_empty() || self.data.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.data);
        if data.len() != INITIAL {
            return; // grown for a large head or body: not kept
        }
        // `try_with`: a connection dropped while its thread exits.
        let _ = SPARE.try_with(|spare| {
            if let Ok(mut spare) = spare.try_borrow_mut() {
                if spare.len() < CACHED {
                    spare.push(data);
                }
            }
        });
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        self.start = 0;
        self.end = 0;
        self.release();
    }
}

/// A buffer of [`INITIAL`] initialised bytes: a cached one, or a new one.
fn take_spare() -> Vec<u8> {
    SPARE
        .try_with(|spare| spare.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            #[cfg(test)]
            MADE.set(MADE.get() + 1);
            vec![0; INITIAL]
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader handing out `input` in pieces of at most `step` bytes.
    fn feed<'a>(
        input: &'a [u8],
        at: &'a mut usize,
        step: usize,
    ) -> impl FnOnce(&mut [u8]) -> io::Result<usize> + 'a {
        move |free| {
            let n = step.min(free.len()).min(input.len() - *at);
            free[..n].copy_from_slice(&input[*at..*at + n]);
            *at += n;
            Ok(n)
        }
    }

    #[test]
    fn reads_append_and_consume_removes_from_the_front() {
        let mut buf = ReadBuf::new();
        let mut at = 0;
        buf.fill_with(feed(b"GET / HTTP/1.1\r\n", &mut at, 4))
            .unwrap();
        assert_eq!(buf.bytes(), b"GET ");
        buf.fill_with(feed(b"GET / HTTP/1.1\r\n", &mut at, 100))
            .unwrap();
        assert_eq!(buf.bytes(), b"GET / HTTP/1.1\r\n");
        buf.consume(4);
        assert_eq!(buf.bytes(), b"/ HTTP/1.1\r\n");
        buf.consume(buf.len());
        assert!(buf.is_empty());
    }

    #[test]
    fn a_full_buffer_compacts_then_grows_keeping_its_content() {
        let input: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let mut buf = ReadBuf::new();
        let mut at = 0;
        // Consume a little after each read: the content must survive
        // every compaction and growth.
        let mut consumed = 0;
        while at < input.len() {
            buf.fill_with(feed(&input, &mut at, 3000)).unwrap();
            buf.consume(10);
            consumed += 10;
            assert_eq!(buf.bytes(), &input[consumed..at]);
        }
    }

    #[test]
    fn an_empty_buffer_is_released_to_the_cache_and_taken_again() {
        let mut a = ReadBuf::new();
        let mut at = 0;
        a.fill_with(feed(b"abc", &mut at, 3)).unwrap();
        // Not empty: kept.
        a.release();
        assert_eq!(a.bytes(), b"abc");
        a.consume(3);
        let cached = SPARE.with(|s| s.borrow().len());
        a.release();
        assert_eq!(SPARE.with(|s| s.borrow().len()), cached + 1);
        // The next read takes it back, and sees none of the old bytes.
        let mut b = ReadBuf::new();
        let mut at = 0;
        b.fill_with(feed(b"xy", &mut at, 2)).unwrap();
        assert_eq!(b.bytes(), b"xy");
        assert_eq!(SPARE.with(|s| s.borrow().len()), cached);
    }

    #[test]
    fn a_read_that_claims_more_than_it_was_given_panics_instead_of_lying() {
        let mut buf = ReadBuf::from_slice(b"");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            buf.fill_with(|free| Ok(free.len() + 1))
        }));
        assert!(r.is_err());
    }
}
