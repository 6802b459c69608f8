//! Answers with the guest's environment, one `K=V` line each, sorted: for
//! tests of the environment a host gives a component.

use wasip2::http::types::{IncomingRequest, ResponseOutparam};

wasip2::http::proxy::export!(Env);

struct Env;

impl wasip2::exports::http::incoming_handler::Guest for Env {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let mut vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect();
        vars.sort();
        util::respond(out, 200, vars.concat().as_bytes());
    }
}
