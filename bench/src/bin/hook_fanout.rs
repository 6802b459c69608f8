//! Fan-out through code Spindle did not write, for `bench/hook.py`:
//! `hook_fanout <ureq|std> URL N` runs N fibers on a 2-worker runtime
//! (the default), each making one request through `ureq` or a plain
//! `std::net::TcpStream` (HTTP/1.0 by hand), with `spindle_hook` installed.
//! Prints `WALL <seconds> FAILED <n>`.

use std::io::{Read, Write};
use std::time::Instant;

fn main() {
    spindle_hook::install().expect("hook");
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("ureq|std");
    let url = a.next().expect("URL");
    let n: usize = a.next().expect("N").parse().unwrap();
    raise_fd_limit();
    let hostport = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let (wall, failed) = spindle::run(move || {
        // One agent for every fiber, as ureq's docs advise (its defaults).
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let start = Instant::now();
        let fibers: Vec<_> = (0..n)
            .map(|_| {
                let (which, url, hostport) = (which.clone(), url.clone(), hostport.clone());
                let agent = agent.clone();
                spindle::spawn(move || match which.as_str() {
                    "ureq" => agent
                        .get(&url)
                        .call()
                        .and_then(|mut r| r.body_mut().read_to_string())
                        .is_ok(),
                    "std" => {
                        let Ok(mut s) = std::net::TcpStream::connect(hostport.as_str()) else {
                            return false;
                        };
                        let req = format!("GET / HTTP/1.0\r\nHost: {hostport}\r\n\r\n");
                        let mut answer = Vec::new();
                        s.write_all(req.as_bytes()).is_ok()
                            && s.read_to_end(&mut answer).is_ok()
                            && answer.starts_with(b"HTTP/1.0 200")
                    }
                    other => panic!("unknown client {other}"),
                })
            })
            .collect();
        let failed = fibers
            .into_iter()
            .map(|f| f.join().unwrap())
            .filter(|ok| !ok)
            .count();
        (start.elapsed(), failed)
    });
    println!("WALL {} FAILED {failed}", wall.as_secs_f64());
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer, then the same struct back in.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}
