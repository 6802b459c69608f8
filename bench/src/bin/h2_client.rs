//! The HTTP/2 client benchmark of `bench/h2.py`: `h2_client <spindle|hyper>
//! URL ROUNDS`. Each round sends 100 GETs at once to an h2c upstream over
//! one connection (100 fibers with spindle-http's client; 100 tasks with
//! hyper-util's legacy client, HTTP/2 only) and waits for every body. Prints
//! `DONE <requests> <seconds>`.

use std::time::Instant;

const AT_ONCE: usize = 100;

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("spindle|hyper");
    let url = a.next().expect("URL");
    let rounds: usize = a.next().and_then(|r| r.parse().ok()).unwrap_or(200);
    let started = Instant::now();
    let done = match which.as_str() {
        "spindle" => spindle(&url, rounds),
        "hyper" => hyper(&url, rounds),
        other => panic!("unknown client {other}"),
    };
    println!("DONE {done} {:.6}", started.elapsed().as_secs_f64());
}

fn spindle(url: &str, rounds: usize) -> usize {
    let url = url.to_string();
    spindle::run(move || {
        let client = spindle_http::Client::new().http2_prior_knowledge(true);
        let mut done = 0;
        for _ in 0..rounds {
            let fibers: Vec<_> = (0..AT_ONCE)
                .map(|_| {
                    let (client, url) = (client.clone(), url.clone());
                    spindle::spawn(move || {
                        let body = client.get(&url).unwrap().into_body().into_vec().unwrap();
                        assert_eq!(body, b"Hello, World!");
                    })
                })
                .collect();
            for f in fibers {
                f.join().unwrap();
                done += 1;
            }
        }
        done
    })
}

fn hyper(url: &str, rounds: usize) -> usize {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let url: hyper::Uri = url.parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http::<Empty<bytes::Bytes>>();
            let mut done = 0;
            for _ in 0..rounds {
                let tasks: Vec<_> = (0..AT_ONCE)
                    .map(|_| {
                        let (client, url) = (client.clone(), url.clone());
                        tokio::spawn(async move {
                            let resp = client.get(url).await.unwrap();
                            let body = resp.into_body().collect().await.unwrap().to_bytes();
                            assert_eq!(&body[..], b"Hello, World!");
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                    done += 1;
                }
            }
            done
        })
        .await
        .unwrap()
    })
}
