//! A TCP echo server on fibers: one fiber per connection, blocking-style
//! code, no `async`.
//!
//! ```text
//! cargo run --release -p spindle --example echo            # 127.0.0.1:7878
//! cargo run --release -p spindle --example echo -- 127.0.0.1:9000
//! ```
//!
//! Try it with `nc 127.0.0.1 7878`, or run with `--check` to have it echo
//! through one client of its own and exit.

use std::io::{Read, Write};

use spindle::net::{TcpListener, TcpStream};

fn serve(mut conn: TcpStream) -> std::io::Result<()> {
    // On the fiber's stack, whose touched pages stay resident while the
    // connection lives: 16 KiB here held ~19 KiB per idle connection, 4 KiB
    // holds ~8 (`bench/net.py`).
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(()); // the peer closed its half
        }
        conn.write_all(&buf[..n])?;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let addr = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:7878".to_string());
    spindle::run(move || {
        let listener = TcpListener::bind(addr.as_str()).expect("bind");
        let local = listener.local_addr().unwrap();
        println!("spindle echo server listening on {local}");
        if check {
            spindle::spawn(move || {
                let mut c = TcpStream::connect(local).unwrap();
                c.write_all(b"hello, spindle\n").unwrap();
                let mut back = [0u8; 15];
                c.read_exact(&mut back).unwrap();
                println!("echoed: {}", String::from_utf8_lossy(&back).trim_end());
                std::process::exit(0);
            });
        }
        for conn in listener.incoming() {
            match conn {
                Ok(conn) => {
                    spindle::Builder::new()
                        .name("echo-conn")
                        .spawn(move || {
                            if let Err(e) = serve(conn) {
                                eprintln!("connection ended: {e}");
                            }
                        })
                        .unwrap_or_else(|e| panic!("cannot spawn a connection fiber: {e}"));
                }
                Err(e) => {
                    // EMFILE and friends: say so, back off a little, go on.
                    eprintln!("accept failed: {e}");
                    spindle::time::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    });
}
