//! Traps (an `unreachable`) before setting any response.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Trap);

struct Trap;

impl wasip2::exports::http::incoming_handler::Guest for Trap {
    fn handle(_request: IncomingRequest, _out: ResponseOutparam) {
        println!("about to trap");
        std::process::abort();
    }
}
