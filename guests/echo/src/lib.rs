//! Streams the request body back, chunk by chunk, as it arrives, and its
//! trailers after it.

use wasip2::http::types::{
    Fields, IncomingBody, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use wasip2::io::streams::StreamError;

wasip2::http::proxy::export!(Echo);

struct Echo;

impl wasip2::exports::http::incoming_handler::Guest for Echo {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let resp = OutgoingResponse::new(Fields::new());
        let outgoing = resp.body().expect("a fresh response has a body");
        ResponseOutparam::set(out, Ok(resp));
        let incoming = request.consume().expect("the request body");
        {
            let input = incoming.stream().expect("the request body's stream");
            let output = outgoing.write().expect("the response body's stream");
            loop {
                match input.blocking_read(64 * 1024) {
                    Ok(chunk) => {
                        for piece in chunk.chunks(4096) {
                            output
                                .blocking_write_and_flush(piece)
                                .expect("write the echo");
                        }
                    }
                    Err(StreamError::Closed) => break,
                    Err(e) => panic!("reading the request body: {e:?}"),
                }
            }
        }
        // The request's trailers, copied (received fields are immutable).
        let future = IncomingBody::finish(incoming);
        let trailers = loop {
            if let Some(got) = future.get() {
                break got.ok().and_then(Result::ok).flatten();
            }
            future.subscribe().block();
        };
        let trailers = trailers.map(|t| Fields::from_list(&t.entries()).expect("valid fields"));
        OutgoingBody::finish(outgoing, trailers).expect("finish the body");
    }
}
