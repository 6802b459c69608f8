//! Ten thousand `ureq` requests from fibers, all waiting at once.
//!
//! ```text
//! cargo run --release -p spindle-hook --example ureq_fanout [N]
//! SPINDLE_HOOK=0 cargo run --release -p spindle-hook --example ureq_fanout 200   # the same without the hook
//! ```
//!
//! A slow server (a `spindle::net` loop answering each request after
//! 200 ms) runs on a runtime of its own; N fibers each make one
//! request through `ureq`'s plain blocking API. With the hook installed the
//! waits overlap: the whole run takes a little more than one 200 ms wait,
//! not N/2 of them.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() {
    if std::env::var("SPINDLE_HOOK").as_deref() != Ok("0") {
        spindle_hook::install().expect("spindle-hook is linked into the executable");
    }
    let n: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |n| n.parse().expect("N"));
    raise_fd_limit();
    // The slow server: a runtime of its own, so that it answers even when
    // the clients' workers are blocked (without the hook).
    let server = spindle::Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    server.spawn(move || {
        let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tx.send(listener.local_addr().unwrap()).unwrap();
        for mut conn in listener.incoming().flatten() {
            spindle::spawn(move || {
                let mut head = [0u8; 1024];
                let _ = conn.read(&mut head);
                spindle::time::sleep(Duration::from_millis(200));
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
                );
            });
        }
    });
    let url = format!("http://{}/", rx.recv().unwrap());
    spindle::run(move || {
        let start = Instant::now();
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let requests: Vec<_> = (0..n)
            .map(|_| {
                let (agent, url) = (agent.clone(), url.clone());
                spindle::spawn(move || agent.get(&url).call().map(|r| r.status()))
            })
            .collect();
        let ok = requests
            .into_iter()
            .map(|r| r.join().unwrap())
            .filter(Result::is_ok)
            .count();
        let took = start.elapsed();
        println!(
            "{ok} of {n} answered in {took:.2?}: {:.1} times one 200 ms wait",
            took.as_secs_f64() / 0.2
        );
    });
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer, then the same struct back in.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}
