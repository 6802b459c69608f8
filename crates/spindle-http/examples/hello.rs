//! `Hello, World!` over HTTP/1.1 on 127.0.0.1:8080 (or the address given).
//!
//! ```text
//! cargo run --release -p spindle-http --example hello
//! curl http://127.0.0.1:8080/
//! ```

use spindle_http::{Body, Response, Server};

fn main() {
    let addr = std::env::args()
        .nth(1)
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
