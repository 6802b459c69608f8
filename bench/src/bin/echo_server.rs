//! Echo servers for `bench/net.py`: `echo_server <spindle|tokio> ADDR`.
//! Both use one worker thread and a 4 KiB buffer per connection, written
//! the idiomatic way for each runtime. Prints `LISTENING <addr>`.

use std::io::{Read, Write};

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().expect("spindle|tokio");
    let addr = a.next().unwrap_or_else(|| "127.0.0.1:0".into());
    match which.as_str() {
        "spindle" => {
            let rt = spindle::Runtime::builder()
                .workers(1)
                .stall_warning(None)
                .build()
                .unwrap();
            rt.run(move || {
                let l = spindle::net::TcpListener::bind(addr.as_str()).unwrap();
                println!("LISTENING {}", l.local_addr().unwrap());
                for conn in l.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    spindle::spawn(move || {
                        let _ = conn.set_nodelay(true);
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
                    });
                }
            });
        }
        "tokio" => {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind(addr.as_str()).await.unwrap();
                println!("LISTENING {}", l.local_addr().unwrap());
                loop {
                    let Ok((mut conn, _)) = l.accept().await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        let _ = conn.set_nodelay(true);
                        let mut buf = vec![0u8; 4096];
                        loop {
                            match conn.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if conn.write_all(&buf[..n]).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
            });
        }
        other => panic!("unknown server {other}"),
    }
    let _ = std::io::stdout().flush();
}
