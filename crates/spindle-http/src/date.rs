//! The `Date` header, formatted at most once a second per worker thread.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderValue;

thread_local! {
    static CACHE: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
}

/// The current `Date` value (RFC 9110 IMF-fixdate), reformatted at most
/// once per second on each thread (no lock on the response path).
pub(crate) fn now() -> HeaderValue {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if let Some((at, v)) = cache.as_ref() {
            if *at == secs {
                return v.clone();
            }
        }
        let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
        let v = HeaderValue::from_str(&text).expect("an HTTP date is a valid header value");
        *cache = Some((secs, v.clone()));
        v
    })
}
