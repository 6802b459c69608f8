//! What the WASI 0.3 example guests share: reading the query and headers,
//! answering with a status and a whole body, and making an outgoing GET.

use wasip3::http::client;
use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response, Scheme};
use wasip3::{wit_future, wit_stream};

/// The value of `key` in the request's query string, if any.
pub fn query(req: &Request, key: &str) -> Option<String> {
    let pq = req.get_path_with_query()?;
    let q = pq.split_once('?')?.1;
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

/// A numeric query parameter, or `default`.
pub fn query_u64(req: &Request, key: &str, default: u64) -> u64 {
    query(req, key).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The first value of header `name`, as text.
pub fn header(req: &Request, name: &str) -> Option<String> {
    req.get_headers()
        .get(name)
        .into_iter()
        .next()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// A response with `status` and a whole `body`, written by a task of the
/// guest's own after the response is returned.
pub fn respond(status: u16, body: impl Into<Vec<u8>>) -> Result<Response, ErrorCode> {
    let body = body.into();
    let headers = Fields::new();
    let _ = headers.append("content-type", b"text/plain");
    let _ = headers.append("content-length", body.len().to_string().as_bytes());
    let (mut tx, rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    let (response, _sent) = Response::new(headers, Some(rx), trailers_rx);
    drop(trailers_tx);
    let _ = response.set_status_code(status);
    wasip3::spawn_local(async move {
        let _ = tx.write_all(body).await;
    });
    Ok(response)
}

/// GETs `url` (`http://host[:port]/path`) and returns its status and body.
pub async fn get(url: &str) -> Result<(u16, Vec<u8>), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http:// URL: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (_trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    let (request, _sent) = Request::new(Fields::new(), None, trailers_rx, None);
    let _ = request.set_method(&Method::Get);
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let response = client::send(request).await.map_err(|e| format!("{e:?}"))?;
    let status = response.get_status_code();
    let (_res_tx, res_rx) = wit_future::new(|| Ok(()));
    let (body, _trailers) = Response::consume_body(response, res_rx);
    let bytes = body.collect().await;
    Ok((status, bytes))
}
