//! A gRPC-shaped relay: sends the request's body and trailers on to the
//! URL in the `x-fetch-url` header as a `POST` with `te: trailers`, and
//! answers with the upstream's status, body and trailers (where gRPC puts
//! its `grpc-status`), or with a 502 naming the error.

use std::io::{Read as _, Write as _};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, FutureTrailers, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingRequest,
    OutgoingResponse, ResponseOutparam, Scheme,
};

wasip2::http::proxy::export!(Grpc);

struct Grpc;

impl wasip2::exports::http::incoming_handler::Guest for Grpc {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let Some(url) = util::header(&request, "x-fetch-url") else {
            return util::respond(out, 400, b"x-fetch-url header missing");
        };
        let relayed = read_all(request.consume().ok())
            .and_then(|(data, trailers)| relay(&url, &data, trailers));
        match relayed {
            Ok((status, body, trailers)) => respond(out, status, &body, trailers),
            Err(e) => util::respond(out, 502, format!("relay failed: {e}").as_bytes()),
        }
    }
}

/// A body's bytes and its trailers.
fn read_all(body: Option<IncomingBody>) -> Result<(Vec<u8>, Option<Fields>), String> {
    let body = body.ok_or("body taken twice")?;
    let mut data = Vec::new();
    {
        let mut stream = body.stream().map_err(|_| "body stream")?;
        stream.read_to_end(&mut data).map_err(|e| e.to_string())?;
    }
    Ok((data, trailers(IncomingBody::finish(body))?))
}

/// Waits for a body's trailers; copies them (the received ones are
/// immutable, and trailers to send must be owned fields).
fn trailers(future: FutureTrailers) -> Result<Option<Fields>, String> {
    let got = loop {
        if let Some(got) = future.get() {
            break got;
        }
        future.subscribe().block();
    };
    let fields = got
        .map_err(|_| "trailers taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    Ok(fields.map(|f| Fields::from_list(&f.entries()).expect("received fields are valid")))
}

fn relay(
    url: &str,
    data: &[u8],
    sent_trailers: Option<Fields>,
) -> Result<(u16, Vec<u8>, Option<Fields>), String> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return Err(format!("not an http(s) URL: {url}"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    let _ = headers.append("te", b"trailers");
    let _ = headers.append("content-type", b"application/grpc");
    let req = OutgoingRequest::new(headers);
    req.set_method(&Method::Post).map_err(|_| "method")?;
    req.set_scheme(Some(&scheme)).map_err(|_| "scheme")?;
    req.set_authority(Some(authority)).map_err(|_| "authority")?;
    req.set_path_with_query(Some(path)).map_err(|_| "path")?;
    let body = req.body().map_err(|_| "request body")?;
    let future = outgoing_handler::handle(req, None).map_err(|e| format!("{e:?}"))?;
    {
        let mut stream = body.write().map_err(|_| "request stream")?;
        for chunk in data.chunks(4096) {
            stream.write_all(chunk).map_err(|e| e.to_string())?;
        }
        stream.flush().map_err(|e| e.to_string())?;
    }
    OutgoingBody::finish(body, sent_trailers).map_err(|e| format!("{e:?}"))?;
    let resp = loop {
        if let Some(r) = future.get() {
            break r
                .map_err(|_| "response taken twice".to_string())?
                .map_err(|e| format!("{e:?}"))?;
        }
        future.subscribe().block();
    };
    let status = resp.status();
    let (bytes, trailers) = read_all(resp.consume().ok())?;
    Ok((status, bytes, trailers))
}

fn respond(out: ResponseOutparam, status: u16, body: &[u8], trailers: Option<Fields>) {
    let resp = OutgoingResponse::new(Fields::new());
    let _ = resp.set_status_code(status);
    let outgoing = resp.body().expect("a fresh response has a body");
    ResponseOutparam::set(out, Ok(resp));
    {
        let mut stream = outgoing.write().expect("the body's stream");
        for chunk in body.chunks(4096) {
            stream.write_all(chunk).expect("write the body");
        }
        stream.flush().expect("flush the body");
    }
    OutgoingBody::finish(outgoing, trailers).expect("finish the body");
}
