//! Spare header maps, per thread: the map of a message just written is
//! cleared and becomes the map the next parsed message is filled into.
//!
//! An `http::HeaderMap` with anything in it owns two allocations (its index
//! table and its entries). A served request used to cost four allocations
//! and four frees for its two maps — the request's, filled by the parser,
//! and the response's, filled by the handler — about 8 % of a pipelined
//! request's instructions. The handler owns the request, so its map is
//! freed where the handler drops it; but the response comes back to the
//! connection, and once its head is written its map, cleared, has exactly
//! the shape the next request needs. hyper keeps the same map per
//! connection; here the spares are kept per thread instead, so an idle
//! connection holds none and a connection that waits between requests
//! still finds one. Only a connection whose next request is already read
//! (pipelined) keeps the map itself, for that request ([`recycle`]).
//!
//! Bounded both ways: at most [`KEPT`] spares per thread, and a map that
//! grew past [`MAX_CAPACITY`] fields is freed rather than kept, so one
//! response with a thousand headers does not pin their room.
//!
//! The maps are plain owned values: taking one on one thread and giving it
//! back on another is as sound as any move of a `HeaderMap`.

use std::cell::RefCell;

use http::HeaderMap;

/// Spares kept per thread.
pub(crate) const KEPT: usize = 16;

/// Largest capacity (in fields) a map may have to be kept.
pub(crate) const MAX_CAPACITY: usize = 32;

thread_local! {
    static SPARE: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty map: a spare when this thread has one, else a new one (which
/// allocates only when its first field is added).
pub(crate) fn take() -> HeaderMap {
    SPARE
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Keeps `map`, emptied, for a later [`take`] on this thread — unless it
/// never allocated, grew too large, or this thread has enough spares.
pub(crate) fn give(map: HeaderMap) {
    let Some(map) = recycle(map) else {
        return;
    };
    // During thread teardown the map is simply dropped.
    let _ = SPARE.try_with(move |spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < KEPT {
            spare.push(map);
        }
    });
}

/// `map` emptied, if it is worth keeping: it allocated, and not past
/// [`MAX_CAPACITY`]. For a caller that keeps it itself — a connection whose
/// next request is already read hands it straight to that request.
pub(crate) fn recycle(mut map: HeaderMap) -> Option<HeaderMap> {
    let capacity = map.capacity();
    if capacity == 0 || capacity > MAX_CAPACITY {
        return None;
    }
    map.clear();
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderValue, CONTENT_TYPE, HOST};

    fn drain() {
        while take().capacity() != 0 {}
    }

    #[test]
    fn a_given_map_comes_back_empty_with_its_room() {
        drain();
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        map.append(HOST, HeaderValue::from_static("a"));
        map.append(HOST, HeaderValue::from_static("b"));
        let room = map.capacity();
        give(map);
        let back = take();
        assert!(back.is_empty());
        assert_eq!(back.capacity(), room);
        assert!(back.get(HOST).is_none());
        // The next one is a fresh map: nothing else was kept.
        assert_eq!(take().capacity(), 0);
    }

    #[test]
    fn unallocated_and_oversized_maps_are_not_kept_and_the_count_is_bounded() {
        drain();
        give(HeaderMap::new());
        assert_eq!(take().capacity(), 0);
        let mut big = HeaderMap::new();
        for i in 0..100 {
            big.append(
                http::header::HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap(),
                HeaderValue::from_static("v"),
            );
        }
        assert!(big.capacity() > MAX_CAPACITY);
        give(big);
        assert_eq!(take().capacity(), 0);
        for _ in 0..KEPT + 5 {
            let mut m = HeaderMap::new();
            m.insert(CONTENT_TYPE, HeaderValue::from_static("x"));
            give(m);
        }
        let kept = std::iter::from_fn(|| Some(take()))
            .take_while(|m| m.capacity() != 0)
            .count();
        assert_eq!(kept, KEPT);
    }
}
