//! A `wasi:cli/run@0.3` command: `fetch-cmd-p3 URL` prints the status and
//! body of `GET URL` (made through `wasi:http/client@0.3`), and the value
//! of `$GREETING` if set; fails (exit status 1) if the request failed.

struct Main;

impl wasip3::exports::cli::run::Guest for Main {
    async fn run() -> Result<(), ()> {
        let Some(url) = std::env::args().nth(1) else {
            eprintln!("usage: fetch-cmd-p3 URL");
            return Err(());
        };
        if let Ok(g) = std::env::var("GREETING") {
            println!("greeting: {g}");
        }
        match util_p3::get(&url).await {
            Ok((status, body)) => {
                println!("status: {status}");
                println!("body: {}", String::from_utf8_lossy(&body));
                Ok(())
            }
            Err(e) => {
                eprintln!("fetch failed: {e}");
                Err(())
            }
        }
    }
}

wasip3::cli::command::export!(Main);
