//! Where a parsed head's bytes are kept while its message lives.
//!
//! A request's header values and target are zero-copy slices of one
//! [`Bytes`] holding a copy of its head: the copy is what lets a connection
//! hand its read buffer on while the handler runs. Copying each head into an
//! allocation of its own cost two allocations per request (the bytes, and
//! the reference count `Bytes` adds on the first slice) and their frees —
//! 8 % of the server's instructions per pipelined request.
//!
//! So heads are copied into a per-thread block instead, one after another,
//! each split off as its own `Bytes` sharing the block's reference count.
//! When every head of a block has been dropped the block is reused in
//! place; while any of them lives the block stays, and the next heads go to
//! a new one. A head larger than [`SHARED_HEAD_MAX`] gets an allocation of
//! its own, so one long-lived big head cannot pin a block of small ones'
//! worth of memory beyond [`BLOCK`].
//!
//! The cost of sharing: a request that outlives the ones around it (a long
//! poll among short requests) keeps its whole block, at most [`BLOCK`]
//! bytes, where an allocation of its own would have kept only its head.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

/// Bytes per block.
pub(crate) const BLOCK: usize = 4096;

/// Largest head copied into the shared block.
pub(crate) const SHARED_HEAD_MAX: usize = 1024;

thread_local! {
    static CURRENT: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Returns a copy of `head` as its own [`Bytes`].
pub(crate) fn copy(head: &[u8]) -> Bytes {
    if head.len() > SHARED_HEAD_MAX {
        return Bytes::copy_from_slice(head);
    }
    CURRENT.with(|block| {
        let mut block = block.borrow_mut();
        // Room left, or the whole block back when every head cut from it
        // is gone; else a fresh block (the old one is freed by the last of
        // its heads).
        if block.capacity() < head.len() && !block.try_reclaim(head.len()) {
            *block = BytesMut::with_capacity(BLOCK);
        }
        block.extend_from_slice(head);
        block.split().freeze()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts this thread on an empty block.
    fn fresh_block() {
        CURRENT.with(|b| *b.borrow_mut() = BytesMut::new());
    }

    /// Copies and drops small heads until one lands at `at` (the block
    /// was reused from its start) or two blocks' worth have gone by.
    fn lands_at(at: *const u8) -> bool {
        (0..2 * BLOCK / 60).any(|_| copy(&[b'x'; 60]).as_ptr() == at)
    }

    #[test]
    fn copies_keep_their_bytes_while_blocks_are_reused_and_replaced() {
        let mut kept = Vec::new();
        for i in 0..500usize {
            let head = format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").repeat(1 + i % 40);
            let copy = copy(head.as_bytes());
            assert_eq!(copy, head.as_bytes());
            if i % 50 == 0 {
                kept.push((head, copy));
            }
        }
        for (head, copy) in &kept {
            assert_eq!(copy, head.as_bytes(), "a kept head changed under reuse");
        }
    }

    #[test]
    fn heads_dropped_on_another_thread_while_blocks_are_reused_keep_their_bytes() {
        // A request moves to another worker with its fiber, or to a guest's
        // instance: its head is dropped there while this thread copies on.
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, Bytes)>(64);
        let checker = std::thread::spawn(move || {
            let mut seen = 0;
            for (want, got) in rx {
                assert_eq!(got, want[..], "a head changed after it moved");
                seen += 1;
            }
            seen
        });
        for i in 0..20_000usize {
            let head = format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").repeat(1 + i % 9);
            let copied = copy(head.as_bytes());
            tx.send((head.into_bytes(), copied)).unwrap();
        }
        drop(tx);
        assert_eq!(checker.join().unwrap(), 20_000);
    }

    #[test]
    fn a_block_whose_heads_are_all_gone_is_reused_in_place() {
        fresh_block();
        let first = copy(b"GET / HTTP/1.1\r\n\r\n");
        let at = first.as_ptr();
        drop(first);
        assert!(lands_at(at));
    }

    #[test]
    fn a_live_head_keeps_its_block_and_the_next_heads_go_to_a_new_one() {
        fresh_block();
        let first = copy(b"GET /kept HTTP/1.1\r\n\r\n");
        let at = first.as_ptr();
        assert!(!lands_at(at));
        assert_eq!(first, &b"GET /kept HTTP/1.1\r\n\r\n"[..]);
    }

    #[test]
    fn a_big_head_has_its_own_allocation_and_keeps_no_block() {
        fresh_block();
        let small = copy(b"GET / HTTP/1.1\r\n\r\n");
        let at = small.as_ptr();
        let big = copy(&vec![b'h'; SHARED_HEAD_MAX + 1]);
        drop(small);
        // Only the big head lives: were it in the block, the block could
        // not be reused.
        assert!(lands_at(at));
        assert_eq!(big.len(), SHARED_HEAD_MAX + 1);
    }
}
