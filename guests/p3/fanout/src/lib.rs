//! Fetches the URL in `x-fetch-url` three times at once (`?i=0`, `?i=1`,
//! `?i=2` appended), inside one request, and answers when all three are
//! back: the three outgoing requests are in flight together.

use wasip3::http::types::{ErrorCode, Request, Response};

wasip3::http::service::export!(Fanout);

struct Fanout;

impl wasip3::exports::http::handler::Guest for Fanout {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let Some(url) = util_p3::header(&request, "x-fetch-url") else {
            return util_p3::respond(400, b"x-fetch-url header missing".to_vec());
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let urls: Vec<String> = (0..3).map(|i| format!("{url}{sep}i={i}")).collect();
        let (a, b, c) = futures::future::join3(
            util_p3::get(&urls[0]),
            util_p3::get(&urls[1]),
            util_p3::get(&urls[2]),
        )
        .await;
        let mut text = String::new();
        for r in [a, b, c] {
            match r {
                Ok((status, body)) => {
                    text.push_str(&format!("{status} {}\n", String::from_utf8_lossy(&body)))
                }
                Err(e) => return util_p3::respond(502, format!("fetch failed: {e}")),
            }
        }
        util_p3::respond(200, text)
    }
}
