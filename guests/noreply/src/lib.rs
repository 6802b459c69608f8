//! Returns without ever setting a response (the host must answer 500).

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(NoReply);

struct NoReply;

impl wasip2::exports::http::incoming_handler::Guest for NoReply {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        eprintln!("returning without a response");
        drop(out);
    }
}
