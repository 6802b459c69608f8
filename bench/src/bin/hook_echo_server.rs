//! Echo servers for `bench/hook.py`, both with `spindle_hook` installed:
//! `hook_echo_server <spindle|std> ADDR` — one worker, a fiber per
//! connection, a 4 KiB buffer; `spindle` uses `spindle::net`, `std` plain
//! blocking `std::net` (parked by the hook). Prints `LISTENING <addr>`.

use std::io::{Read, Write};

fn serve(mut conn: impl Read + Write) {
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if conn.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

fn main() {
    spindle_hook::install().expect("hook");
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("spindle|std");
    let addr = a.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let rt = spindle::Runtime::builder()
        .workers(1)
        .stall_warning(None)
        .build()
        .unwrap();
    rt.run(move || match which.as_str() {
        "spindle" => {
            let l = spindle::net::TcpListener::bind(addr.as_str()).unwrap();
            println!("LISTENING {}", l.local_addr().unwrap());
            let _ = std::io::stdout().flush();
            for conn in l.incoming().flatten() {
                let _ = conn.set_nodelay(true);
                spindle::spawn(move || serve(conn));
            }
        }
        "std" => {
            let l = std::net::TcpListener::bind(addr.as_str()).unwrap();
            println!("LISTENING {}", l.local_addr().unwrap());
            let _ = std::io::stdout().flush();
            for conn in l.incoming().flatten() {
                let _ = conn.set_nodelay(true);
                spindle::spawn(move || serve(conn));
            }
        }
        other => panic!("unknown server {other}"),
    });
}
