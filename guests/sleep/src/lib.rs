//! Waits `?ms=N` milliseconds (default 100) on a WASI monotonic-clock
//! pollable, then answers.

use wasip2::clocks::monotonic_clock;
use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Sleep);

struct Sleep;

impl wasip2::exports::http::incoming_handler::Guest for Sleep {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let ms = util::query_u64(&request, "ms", 100);
        monotonic_clock::subscribe_duration(ms * 1_000_000).block();
        util::respond(out, 200, format!("slept {ms} ms").as_bytes());
    }
}
