//! A CPU loop of `?n=N` iterations (default 10 000 000), then answers with
//! a checksum so the loop cannot be optimised away (WASI 0.3).

use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Burn);

struct Burn;

impl wasip3::exports::http::handler::Guest for Burn {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let n = util_p3::query_u64(&request, "n", 10_000_000);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = x.wrapping_add(std::hint::black_box(i));
        }
        util_p3::respond(200, format!("burned {n}: {x:x}"))
    }
}
