//! `spindle-http`'s `examples/hello.rs`, with `spindle_hook` linked in and
//! installed unless `SPINDLE_HOOK=0`: for `bench/hook.py`'s on/off rows.
//! `hook_hello spindle ADDR` (the first word for `ab_http.py`'s calling
//! convention); prints the listening line.

use spindle_http::{Body, Response, Server};

fn main() {
    if std::env::var("SPINDLE_HOOK").as_deref() != Ok("0") {
        spindle_hook::install().expect("hook");
    }
    let addr = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    spindle::run(move || {
        let server = Server::bind(addr.as_str()).expect("bind");
        println!("listening on http://{}", server.local_addr().unwrap());
        server
            .serve(|_req| {
                let mut r = Response::new(Body::from("Hello, World!"));
                r.headers_mut().insert(
                    spindle_http::http::header::CONTENT_TYPE,
                    spindle_http::http::HeaderValue::from_static("text/plain"),
                );
                r
            })
            .expect("serve");
    });
}
