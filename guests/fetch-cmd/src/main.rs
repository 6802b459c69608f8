//! A `wasi:cli/run` command: `fetch-cmd URL` prints the status and body of
//! `GET URL` (made through `wasi:http/outgoing-handler`), and the value of
//! `$GREETING` if set; exits 1 if the request failed.

fn main() {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: fetch-cmd URL");
        std::process::exit(2);
    };
    if let Ok(g) = std::env::var("GREETING") {
        println!("greeting: {g}");
    }
    match util::get(&url) {
        Ok((status, body)) => {
            println!("status: {status}");
            println!("body: {}", String::from_utf8_lossy(&body));
        }
        Err(e) => {
            eprintln!("fetch failed: {e}");
            std::process::exit(1);
        }
    }
}
