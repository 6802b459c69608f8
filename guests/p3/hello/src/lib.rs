//! `Hello, World!` as a WASI 0.3 `wasi:http/service` component.

use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Hello);

struct Hello;

impl wasip3::exports::http::handler::Guest for Hello {
    async fn handle(_request: Request) -> Result<Response, ErrorCode> {
        util_p3::respond(200, b"Hello, World!".to_vec())
    }
}
