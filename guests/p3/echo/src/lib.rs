//! Streams the request body back as it arrives (WASI 0.3 `stream<u8>`): a
//! task of the guest's own copies each piece read from the request's
//! stream into the response's, then the request's trailers.

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_future, wit_stream};

wasip3::http::service::export!(Echo);

struct Echo;

impl wasip3::exports::http::handler::Guest for Echo {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let (_res_tx, res_rx) = wit_future::new(|| Ok(()));
        let (mut input, input_trailers) = Request::consume_body(request, res_rx);
        let (mut output, body) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let (response, _sent) = Response::new(Fields::new(), Some(body), trailers_rx);
        wasip3::spawn_local(async move {
            loop {
                let (status, chunk) = input.read(Vec::with_capacity(64 * 1024)).await;
                if chunk.is_empty() {
                    if matches!(status, wasip3::wit_bindgen::StreamResult::Complete(_)) {
                        continue;
                    }
                    break;
                }
                let rest = output.write_all(chunk).await;
                if !rest.is_empty() {
                    break; // the client went away
                }
            }
            drop(output);
            let trailers = input_trailers.await;
            let _ = trailers_tx.write(trailers).await;
        });
        Ok(response)
    }
}
