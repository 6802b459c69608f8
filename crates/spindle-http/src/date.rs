//! The `Date` header, formatted at most once a second per worker thread.

use std::cell::Cell;
use std::time::{Duration, UNIX_EPOCH};

/// An IMF-fixdate is always this long: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

thread_local! {
    static CACHE: Cell<(u64, [u8; LEN])> = const { Cell::new((u64::MAX, [0; LEN])) };
}

/// The current `Date` value (RFC 9110 IMF-fixdate), reformatted at most
/// once per second on each thread: no lock, no allocation, no reference
/// count on the response path.
pub(crate) fn now() -> [u8; LEN] {
    // The coarse clock: read on every response, and a few ms of lag is
    // nothing at a one-second resolution.
    let secs = spindle::time::coarse_unix_secs();
    CACHE.with(|c| {
        let (at, text) = c.get();
        if at == secs {
            return text;
        }
        let formatted = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
        let mut text = [b' '; LEN];
        let n = formatted.len().min(LEN);
        text[..n].copy_from_slice(&formatted.as_bytes()[..n]);
        c.set((secs, text));
        text
    })
}
