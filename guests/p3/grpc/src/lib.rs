//! A gRPC-shaped relay (WASI 0.3): sends the request's body and trailers
//! on to the URL in the `x-fetch-url` header as a `POST` with `te:
//! trailers`, and answers with the upstream's status, body and trailers
//! (where gRPC puts its `grpc-status`), or with a 502 naming the error.

use wasip3::http::client;
use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response, Scheme};
use wasip3::{wit_future, wit_stream};

wasip3::http::service::export!(Grpc);

struct Grpc;

impl wasip3::exports::http::handler::Guest for Grpc {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let Some(url) = util_p3::header(&request, "x-fetch-url") else {
            return util_p3::respond(400, b"x-fetch-url header missing".to_vec());
        };
        let Some(authority_path) = url.strip_prefix("http://") else {
            return util_p3::respond(502, format!("relay failed: not an http:// URL: {url}"));
        };
        let (authority, path) = match authority_path.find('/') {
            Some(i) => (&authority_path[..i], &authority_path[i..]),
            None => (authority_path, "/"),
        };
        // The request's body and trailers, whole.
        let (_res_tx, res_rx) = wit_future::new(|| Ok(()));
        let (input, input_trailers) = Request::consume_body(request, res_rx);
        let data = input.collect().await;
        let sent_trailers = input_trailers.await.ok().flatten();
        // On upstream, written by a task of our own.
        let headers = Fields::new();
        let _ = headers.append("te", b"trailers");
        let _ = headers.append("content-type", b"application/grpc");
        let (mut body_tx, body_rx) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let (upstream_req, _sent) = Request::new(headers, Some(body_rx), trailers_rx, None);
        let _ = upstream_req.set_method(&Method::Post);
        let _ = upstream_req.set_scheme(Some(&Scheme::Http));
        let _ = upstream_req.set_authority(Some(authority));
        let _ = upstream_req.set_path_with_query(Some(path));
        wasip3::spawn_local(async move {
            let _ = body_tx.write_all(data).await;
            drop(body_tx);
            let _ = trailers_tx.write(Ok(sent_trailers)).await;
        });
        let upstream = match client::send(upstream_req).await {
            Ok(r) => r,
            Err(e) => return util_p3::respond(502, format!("relay failed: {e:?}")),
        };
        let status = upstream.get_status_code();
        let (_tx, rx) = wit_future::new(|| Ok(()));
        let (body, trailers) = Response::consume_body(upstream, rx);
        let bytes = body.collect().await;
        let trailers = trailers.await;
        // Back to our client: the body, then the upstream's trailers.
        let (mut out_tx, out_rx) = wit_stream::new();
        let (out_trailers_tx, out_trailers_rx) = wit_future::new(|| Ok(None));
        let (response, _sent) = Response::new(Fields::new(), Some(out_rx), out_trailers_rx);
        let _ = response.set_status_code(status);
        wasip3::spawn_local(async move {
            let _ = out_tx.write_all(bytes).await;
            drop(out_tx);
            let _ = out_trailers_tx.write(trailers).await;
        });
        Ok(response)
    }
}
