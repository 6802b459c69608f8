//! `Hello, World!`: the component `spindle serve` runs by default.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Hello);

struct Hello;

impl wasip2::exports::http::incoming_handler::Guest for Hello {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        util::respond(out, 200, b"Hello, World!");
    }
}
