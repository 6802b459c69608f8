//! A server connection's pending output: the responses encoded and not yet
//! written, held only while there are some.
//!
//! Responses are encoded into a `Vec<u8>` and written when the connection
//! is about to read (a pipelined batch goes out in one write) or when the
//! buffer gets large. Once written, the buffer is empty; a connection that
//! then waits for its next request gives the buffer's memory back to a
//! small per-thread cache ([`release`]), and the next response encoded on
//! that thread, on whichever connection, takes it ([`take_for`]).
//!
//! A buffer that kept its capacity kept the largest response the
//! connection had ever answered in hand for as long as the connection
//! lived: a megabyte per idle keep-alive connection that once served a
//! megabyte through it (a body with trailers, which goes out chunked, is
//! copied in whole; so, before large full bodies were written from where
//! they are, was every full body). Now an idle connection holds
//! none, and a buffer grown past [`MAX_KEPT`] is freed rather than cached.
//! Busy connections cost the same CPU per request as before: the take and
//! the give are a few dozen instructions, and the connections a worker
//! serves one after the other write into the same few buffers instead of
//! one each (`bench/RESULTS.md`).
//!
//! The cache is per thread and touched only between waits, so a fiber
//! never finds it half-updated; the buffers themselves are plain owned
//! values.

use std::cell::RefCell;

/// Buffers each thread keeps.
const CACHED: usize = 64;
/// Largest capacity a buffer may have to be kept.
pub(crate) const MAX_KEPT: usize = 64 * 1024;

thread_local! {
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Makes sure `out` has memory to encode into: a cached buffer if it has
/// none. (An empty `Vec` would do too, growing as it is written; this
/// only spares that growth and the cold memory.)
#[inline]
pub(crate) fn take_for(out: &mut Vec<u8>) {
    if out.capacity() == 0 {
        if let Some(spare) = SPARE
            .try_with(|spare| spare.try_borrow_mut().ok()?.pop())
            .ok()
            .flatten()
        {
            *out = spare;
        }
    }
}

/// Gives the memory of `out` back to this thread's cache, if `out` is
/// empty (everything in it written) and not grown past [`MAX_KEPT`].
pub(crate) fn release(out: &mut Vec<u8>) {
    if !out.is_empty() || out.capacity() == 0 {
        return;
    }
    let buf = std::mem::take(out);
    if buf.capacity() > MAX_KEPT {
        return; // freed here
    }
    // `try_with`: a connection dropped while its thread exits.
    let _ = SPARE.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            if spare.len() < CACHED {
                spare.push(buf);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain() {
        while SPARE.with(|s| s.borrow_mut().pop()).is_some() {}
    }

    #[test]
    fn a_written_buffer_goes_to_the_next_response_on_the_thread() {
        drain();
        let mut first = Vec::with_capacity(512);
        first.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        // Not empty: nothing is given back.
        release(&mut first);
        assert_eq!(first.capacity(), 512);
        first.clear();
        release(&mut first);
        assert_eq!(first.capacity(), 0);
        let mut second = Vec::new();
        take_for(&mut second);
        assert_eq!(second.capacity(), 512);
        assert!(second.is_empty());
        // The cache is empty again: the next one starts without memory.
        let mut third = Vec::new();
        take_for(&mut third);
        assert_eq!(third.capacity(), 0);
    }

    #[test]
    fn a_buffer_that_has_memory_keeps_it_and_a_grown_one_is_freed() {
        drain();
        let mut out = Vec::with_capacity(100);
        out.push(1u8);
        take_for(&mut out);
        assert_eq!((out.len(), out.capacity()), (1, 100));
        let mut big = Vec::with_capacity(MAX_KEPT + 1);
        release(&mut big);
        assert_eq!(big.capacity(), 0);
        let mut next = Vec::new();
        take_for(&mut next);
        assert_eq!(next.capacity(), 0, "the grown buffer was not kept");
    }

    #[test]
    fn the_cache_is_bounded() {
        drain();
        for _ in 0..CACHED + 10 {
            let mut b = Vec::with_capacity(64);
            release(&mut b);
        }
        assert_eq!(SPARE.with(|s| s.borrow().len()), CACHED);
        drain();
    }
}
