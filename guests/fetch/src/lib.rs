//! Fetches the URL in the `x-fetch-url` header through
//! `wasi:http/outgoing-handler` and answers with what came back, or with a
//! 502 naming the error.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Fetch);

struct Fetch;

impl wasip2::exports::http::incoming_handler::Guest for Fetch {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let Some(url) = util::header(&request, "x-fetch-url") else {
            return util::respond(out, 400, b"x-fetch-url header missing");
        };
        match util::get(&url) {
            Ok((status, body)) => {
                let text = format!("upstream {status}: {}", String::from_utf8_lossy(&body));
                util::respond(out, 200, text.as_bytes())
            }
            Err(e) => util::respond(out, 502, format!("fetch failed: {e}").as_bytes()),
        }
    }
}
