//! A `wasi:keyvalue` guest (WASI 0.2), by the path's last segment: `/count` increments the counter
//! `count` and answers its new value; `/getinc` reads it first;
//! `/big?n=BYTES` writes a value of
//! that size and reads it back; `/set?key=K&value=V` and `/get?key=K`;
//! `/open` only opens the store. Every path takes `?store=NAME` (default:
//! the empty name, the store granted as `default`). A store's error is
//! answered 403 (access-denied), 404 (no-such-store) or 503 (other), with
//! the error in the body.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wit_bindgen::generate!({
    path: "../../crates/spindle-wasm/wit/keyvalue",
    world: "wasi:keyvalue/imports",
});

use wasi::keyvalue::{atomics, store};

wasip2::http::proxy::export!(Kv);

struct Kv;

impl wasip2::exports::http::incoming_handler::Guest for Kv {
    fn handle(req: IncomingRequest, out: ResponseOutparam) {
        let pq = req.path_with_query().unwrap_or_default();
        // The last segment: the guest may be routed under a prefix.
        let path = pq.split_once('?').map_or(pq.as_str(), |(p, _)| p);
        let path = &path[path.rfind('/').unwrap_or(0)..];
        let name = util::query(&req, "store").unwrap_or_default();
        let answer = store::open(&name).and_then(|bucket| match path {
            "/count" => atomics::increment(&bucket, "count", 1).map(|n| (200, n.to_string().into_bytes())),
            // A read and a write: what a page-view counter does.
            "/getinc" => {
                let before = bucket.get("count")?.map_or(0, |v| v.len());
                atomics::increment(&bucket, "count", 1).map(|n| (200, format!("{n} {before}").into_bytes()))
            }
            "/big" => {
                let n = util::query_u64(&req, "n", 1 << 20) as usize;
                let value: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                bucket.set("big", &value)?;
                Ok(match bucket.get("big")? {
                    Some(back) if back == value => (200, format!("{n} bytes back").into_bytes()),
                    Some(back) => (500, format!("{} bytes back, not the {n} written", back.len()).into_bytes()),
                    None => (500, b"the value is gone".to_vec()),
                })
            }
            "/set" => {
                let key = util::query(&req, "key").unwrap_or_default();
                let value = util::query(&req, "value").unwrap_or_default();
                bucket.set(&key, value.as_bytes()).map(|()| (200, b"set".to_vec()))
            }
            "/get" => {
                let key = util::query(&req, "key").unwrap_or_default();
                Ok(match bucket.get(&key)? {
                    Some(v) => (200, v),
                    None => (404, b"no such key".to_vec()),
                })
            }
            "/open" => Ok((200, b"opened".to_vec())),
            _ => Ok((404, b"no such path".to_vec())),
        });
        match answer {
            Ok((status, body)) => util::respond(out, status, &body),
            Err(store::Error::AccessDenied) => util::respond(out, 403, b"access-denied"),
            Err(store::Error::NoSuchStore) => util::respond(out, 404, b"no-such-store"),
            Err(store::Error::Other(e)) => util::respond(out, 503, format!("store error: {e}").as_bytes()),
        }
    }
}
