//! The `Date` header, formatted once a second and shared.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderValue;

static CACHE: Mutex<Option<(u64, HeaderValue)>> = Mutex::new(None);

/// The current `Date` value (RFC 9110 IMF-fixdate), reformatted at most
/// once per second.
pub(crate) fn now() -> HeaderValue {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, v)) = cache.as_ref() {
        if *at == secs {
            return v.clone();
        }
    }
    let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
    let v = HeaderValue::from_str(&text).expect("an HTTP date is a valid header value");
    *cache = Some((secs, v.clone()));
    v
}
