//! Writes one stderr line in pieces, each through a fresh `get-stderr()`
//! handle (`start a print `, then `1` to `4`, then the newline), and one
//! stdout line left unfinished, then answers `printed`: for the host's
//! rule that the pieces of a line are one line in its log.

use wasip2::cli::{stderr, stdout};
use wasip2::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

wasip2::http::proxy::export!(Print);

struct Print;

impl wasip2::exports::http::incoming_handler::Guest for Print {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let pieces = ["start a print ", "1", "2", "3", "4", "\n"];
        for piece in pieces {
            // A fresh handle each time, dropped after its write.
            let _ = stderr::get_stderr().blocking_write_and_flush(piece.as_bytes());
        }
        let _ = stdout::get_stdout().blocking_write_and_flush(b"no newline at the end");
        let resp = OutgoingResponse::new(Fields::new());
        let body = resp.body().expect("a fresh response has a body");
        ResponseOutparam::set(out, Ok(resp));
        {
            let stream = body.write().expect("the body's stream");
            let _ = stream.blocking_write_and_flush(b"printed");
        }
        let _ = OutgoingBody::finish(body, None);
    }
}
