//! Waits `?ms=N` milliseconds (default 100) on the WASI 0.3 monotonic
//! clock, then answers. While it waits, its instance serves other requests.

use wasip3::clocks::monotonic_clock;
use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Sleep);

struct Sleep;

impl wasip3::exports::http::handler::Guest for Sleep {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let ms = util_p3::query_u64(&request, "ms", 100);
        monotonic_clock::wait_for(ms * 1_000_000).await;
        util_p3::respond(200, format!("slept {ms} ms"))
    }
}
