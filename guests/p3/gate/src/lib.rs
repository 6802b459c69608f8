//! Concurrency inside one instance, made visible, and a trap on demand:
//!
//! - `/slow?ms=N` waits N ms (default 200) and answers with how many
//!   requests this instance had in flight at most so far, and its serial;
//! - `/slow?gate=1&ms=N` does the same under backpressure: while it waits
//!   the instance tells the host it takes no other request
//!   (`backpressure.inc`/`dec`);
//! - `/trap` panics, which traps the instance.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use wasip3::clocks::monotonic_clock;
use wasip3::random::random;
use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Gate);

struct Gate;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);
static SERIAL: AtomicU64 = AtomicU64::new(0);

impl wasip3::exports::http::handler::Guest for Gate {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let path = request.get_path_with_query().unwrap_or_default();
        if path.starts_with("/trap") {
            panic!("trap requested");
        }
        if SERIAL.load(Ordering::Relaxed) == 0 {
            SERIAL.store(random::get_random_u64() | 1, Ordering::Relaxed);
        }
        let gate = util_p3::query_u64(&request, "gate", 0) == 1;
        let ms = util_p3::query_u64(&request, "ms", 200);
        if gate {
            wasip3::wit_bindgen::backpressure_inc();
        }
        let now = IN_FLIGHT.fetch_add(1, Ordering::Relaxed) + 1;
        MOST.fetch_max(now, Ordering::Relaxed);
        monotonic_clock::wait_for(ms * 1_000_000).await;
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
        if gate {
            wasip3::wit_bindgen::backpressure_dec();
        }
        let most = MOST.load(Ordering::Relaxed);
        let serial = SERIAL.load(Ordering::Relaxed);
        util_p3::respond(200, format!("most {most} instance {serial:x}"))
    }
}
