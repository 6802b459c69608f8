//! `GET /?to=URL`: POSTs a body to URL the way a streaming client does —
//! the request goes out, the guest waits for the response's head, and only
//! then writes the body — and answers with what came back. Against an
//! upstream that echoes as it reads, a host that collects the body before
//! sending the request would wait forever.

use std::io::{Read as _, Write as _};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingRequest, ResponseOutparam, Scheme,
};

wasip2::http::proxy::export!(Relay);

struct Relay;

fn relay(url: &str) -> Result<Vec<u8>, String> {
    let rest = url.strip_prefix("http://").ok_or("an http:// URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let req = OutgoingRequest::new(Fields::new());
    req.set_method(&Method::Post).map_err(|_| "method")?;
    req.set_scheme(Some(&Scheme::Http)).map_err(|_| "scheme")?;
    req.set_authority(Some(authority)).map_err(|_| "authority")?;
    req.set_path_with_query(Some(path)).map_err(|_| "path")?;
    let body = req.body().map_err(|_| "request body")?;
    // The request goes out with its body still open.
    let future = outgoing_handler::handle(req, None).map_err(|e| format!("{e:?}"))?;
    let resp = loop {
        if let Some(r) = future.get() {
            break r
                .map_err(|_| "response taken twice".to_string())?
                .map_err(|e| format!("{e:?}"))?;
        }
        future.subscribe().block();
    };
    // Only now, with the response's head in hand, the body.
    {
        let mut out = body.write().map_err(|_| "request body stream")?;
        for piece in [&b"ping "[..], b"after ", b"the head"] {
            out.write_all(piece).map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
        }
    }
    OutgoingBody::finish(body, None).map_err(|e| format!("{e:?}"))?;
    let incoming = resp.consume().map_err(|_| "response body")?;
    let mut bytes = Vec::new();
    {
        let mut stream = incoming.stream().map_err(|_| "response body stream")?;
        stream.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    }
    Ok(bytes)
}

impl wasip2::exports::http::incoming_handler::Guest for Relay {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let Some(to) = util::query(&request, "to") else {
            return util::respond(out, 400, b"?to=URL missing");
        };
        match relay(&to) {
            Ok(body) => util::respond(out, 200, &[&b"relayed: "[..], &body].concat()),
            Err(e) => util::respond(out, 502, e.as_bytes()),
        }
    }
}
