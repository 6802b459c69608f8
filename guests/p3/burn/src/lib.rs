//! A CPU loop of `?n=N` iterations (default 10 000 000), then answers with
//! a checksum so the loop cannot be optimised away (WASI 0.3).
//!
//! With `?after=1` it answers first and computes after: the response goes
//! back at once with a streamed body (no `Content-Length`), and the task
//! that writes the body runs the loop before it writes the checksum — a
//! guest still computing for a request it has already answered. The host
//! sees that answer only when the guest's turn ends: after the loop, unless
//! `&yield=1` has the task yield once before it (then at once).

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_future, wit_stream};

wasip3::http::service::export!(Burn);

struct Burn;

fn burn(n: u64) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(std::hint::black_box(i));
    }
    format!("burned {n}: {x:x}")
}

impl wasip3::exports::http::handler::Guest for Burn {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let n = util_p3::query_u64(&request, "n", 10_000_000);
        let yield_first = util_p3::query_u64(&request, "yield", 0) != 0;
        if util_p3::query_u64(&request, "after", 0) == 0 {
            return util_p3::respond(200, burn(n));
        }
        let headers = Fields::new();
        let _ = headers.append("content-type", b"text/plain");
        let (mut tx, rx) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let (response, _sent) = Response::new(headers, Some(rx), trailers_rx);
        drop(trailers_tx);
        wasip3::spawn_local(async move {
            if yield_first {
                wasip3::wit_bindgen::yield_async().await;
            }
            let _ = tx.write_all(burn(n).into_bytes()).await;
        });
        Ok(response)
    }
}
