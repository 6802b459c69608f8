//! Grows memory by `?mib=N` MiB (default 1), touching every page.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Alloc);

struct Alloc;

impl wasip2::exports::http::incoming_handler::Guest for Alloc {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let mib = util::query_u64(&request, "mib", 1) as usize;
        let mut blocks = Vec::new();
        for _ in 0..mib {
            let block = vec![1u8; 1 << 20];
            blocks.push(std::hint::black_box(block));
        }
        let total: usize = blocks.iter().map(|b| b[4096] as usize).sum();
        util::respond(out, 200, format!("allocated {total} MiB").as_bytes());
    }
}
