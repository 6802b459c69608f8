//! A CPU loop of `?n=N` iterations (default 10 000 000), then answers with
//! a checksum so the loop cannot be optimised away.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Burn);

struct Burn;

impl wasip2::exports::http::incoming_handler::Guest for Burn {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let n = util::query_u64(&request, "n", 10_000_000);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = x.wrapping_add(std::hint::black_box(i));
        }
        util::respond(out, 200, format!("burned {n}: {x:x}").as_bytes());
    }
}
