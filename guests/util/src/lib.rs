//! What the example guests share: reading the query, answering with a
//! status and a body, and making an outgoing GET.

use std::io::{Read as _, Write as _};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingRequest, OutgoingResponse,
    ResponseOutparam, Scheme,
};

/// The value of `key` in the request's query string, if any.
pub fn query(req: &IncomingRequest, key: &str) -> Option<String> {
    let pq = req.path_with_query()?;
    let q = pq.split_once('?')?.1;
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

/// A numeric query parameter, or `default`.
pub fn query_u64(req: &IncomingRequest, key: &str, default: u64) -> u64 {
    query(req, key).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The first value of header `name`, as text.
pub fn header(req: &IncomingRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .into_iter()
        .next()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Answers with `status` and a whole `body`.
pub fn respond(out: ResponseOutparam, status: u16, body: &[u8]) {
    let headers = Fields::new();
    let _ = headers.append("content-type", b"text/plain");
    let resp = OutgoingResponse::new(headers);
    let _ = resp.set_status_code(status);
    let outgoing = resp.body().expect("a fresh response has a body");
    ResponseOutparam::set(out, Ok(resp));
    {
        let mut stream = outgoing.write().expect("the body's stream");
        // write_all goes in chunks of at most 4096 bytes, as WASI asks.
        for chunk in body.chunks(4096) {
            stream.write_all(chunk).expect("write the body");
        }
        stream.flush().expect("flush the body");
    }
    OutgoingBody::finish(outgoing, None).expect("finish the body");
}

/// `GET url` through `wasi:http/outgoing-handler`: the status and body,
/// or the error as text.
pub fn get(url: &str) -> Result<(u16, Vec<u8>), String> {
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
    let req = OutgoingRequest::new(Fields::new());
    req.set_method(&Method::Get).map_err(|_| "method")?;
    req.set_scheme(Some(&scheme)).map_err(|_| "scheme")?;
    req.set_authority(Some(authority)).map_err(|_| "authority")?;
    req.set_path_with_query(Some(path)).map_err(|_| "path")?;
    let future = outgoing_handler::handle(req, None).map_err(|e| format!("{e:?}"))?;
    let resp = loop {
        if let Some(r) = future.get() {
            break r
                .map_err(|_| "response taken twice".to_string())?
                .map_err(|e| format!("{e:?}"))?;
        }
        future.subscribe().block();
    };
    let status = resp.status();
    let body = resp.consume().map_err(|_| "body taken twice")?;
    let mut bytes = Vec::new();
    {
        let mut stream = body.stream().map_err(|_| "body stream")?;
        stream.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    }
    Ok((status, bytes))
}
