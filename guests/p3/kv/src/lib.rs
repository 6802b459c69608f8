//! A `wasi:keyvalue` guest (WASI 0.3), by the path's last segment: `/count` increments the counter
//! `count` and answers its new value; `/open` only opens the store. Both
//! take `?store=NAME` (default: the empty name, the store granted as
//! `default`). A store's error is answered 403 (access-denied), 404
//! (no-such-store) or 503 (other), with the error in the body.

use wasip3::http::types::{ErrorCode, Request, Response};

wit_bindgen::generate!({
    path: "../../../crates/spindle-wasm/wit/keyvalue",
    world: "wasi:keyvalue/imports",
});

use wasi::keyvalue::{atomics, store};

wasip3::http::service::export!(Kv);

struct Kv;

impl wasip3::exports::http::handler::Guest for Kv {
    async fn handle(req: Request) -> Result<Response, ErrorCode> {
        let pq = req.get_path_with_query().unwrap_or_default();
        // The last segment: the guest may be routed under a prefix.
        let path = pq.split_once('?').map_or(pq.as_str(), |(p, _)| p);
        let path = &path[path.rfind('/').unwrap_or(0)..];
        let name = util_p3::query(&req, "store").unwrap_or_default();
        let answer = store::open(&name).and_then(|bucket| match path {
            "/count" => atomics::increment(&bucket, "count", 1).map(|n| (200, n.to_string())),
            "/open" => Ok((200, "opened".to_string())),
            _ => Ok((404, "no such path".to_string())),
        });
        match answer {
            Ok((status, body)) => util_p3::respond(status, body),
            Err(store::Error::AccessDenied) => util_p3::respond(403, "access-denied"),
            Err(store::Error::NoSuchStore) => util_p3::respond(404, "no-such-store"),
            Err(store::Error::Other(e)) => util_p3::respond(503, format!("store error: {e}")),
        }
    }
}
