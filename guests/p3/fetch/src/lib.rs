//! Fetches the URL in the `x-fetch-url` header through
//! `wasi:http/client@0.3` and answers with what came back, or with a 502
//! naming the error.

use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Fetch);

struct Fetch;

impl wasip3::exports::http::handler::Guest for Fetch {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let Some(url) = util_p3::header(&request, "x-fetch-url") else {
            return util_p3::respond(400, b"x-fetch-url header missing".to_vec());
        };
        match util_p3::get(&url).await {
            Ok((status, body)) => util_p3::respond(
                200,
                format!("upstream {status}: {}", String::from_utf8_lossy(&body)),
            ),
            Err(e) => util_p3::respond(502, format!("fetch failed: {e}")),
        }
    }
}
