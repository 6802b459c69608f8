//! Load generator for `bench/net.py` (tokio, one thread):
//! * `echo_client rtt ADDR N` — one connection, N round trips of 64 bytes;
//!   prints `RESULT <median µs> us` and `P99 <µs>`.
//! * `echo_client tput ADDR CONNS SECS` — CONNS connections each doing
//!   64-byte round trips for SECS; prints `RESULT <msgs/s> msgs/s`.
//! * `echo_client idle ADDR CONNS` — opens CONNS connections, one round
//!   trip each, prints `READY`, holds them until stdin closes.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn round_trip(s: &mut TcpStream, msg: &[u8; 64], buf: &mut [u8; 64]) -> std::io::Result<()> {
    s.write_all(msg).await?;
    s.read_exact(buf).await?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let addr = args[1].clone();
        match args[0].as_str() {
            "rtt" => {
                let n: usize = args[2].parse().unwrap();
                let mut s = TcpStream::connect(&addr).await.unwrap();
                s.set_nodelay(true).unwrap();
                let msg = [7u8; 64];
                let mut buf = [0u8; 64];
                for _ in 0..1000 {
                    round_trip(&mut s, &msg, &mut buf).await.unwrap();
                }
                let mut lat = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    round_trip(&mut s, &msg, &mut buf).await.unwrap();
                    lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
                }
                lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
                println!("RESULT {:.3} us", lat[n / 2]);
                println!("P99 {:.3}", lat[n * 99 / 100]);
            }
            "tput" => {
                let conns: usize = args[2].parse().unwrap();
                let secs: f64 = args[3].parse().unwrap();
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let mut tasks = Vec::new();
                for _ in 0..conns {
                    let addr = addr.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut s = TcpStream::connect(&addr).await.unwrap();
                        s.set_nodelay(true).unwrap();
                        let msg = [7u8; 64];
                        let mut buf = [0u8; 64];
                        let mut n = 0u64;
                        while Instant::now() < deadline {
                            round_trip(&mut s, &msg, &mut buf).await.unwrap();
                            n += 1;
                        }
                        n
                    }));
                }
                let start = Instant::now();
                let mut total = 0;
                for t in tasks {
                    total += t.await.unwrap();
                }
                println!(
                    "RESULT {:.1} msgs/s",
                    total as f64 / start.elapsed().as_secs_f64()
                );
                println!("TOTAL {total}");
            }
            "idle" => {
                let conns: usize = args[2].parse().unwrap();
                let msg = [7u8; 64];
                let mut buf = [0u8; 64];
                let mut held = Vec::with_capacity(conns);
                for _ in 0..conns {
                    let mut s = TcpStream::connect(&addr).await.unwrap();
                    round_trip(&mut s, &msg, &mut buf).await.unwrap();
                    held.push(s);
                }
                println!("READY");
                use std::io::Read;
                let _ = tokio::task::spawn_blocking(|| {
                    let mut sink = Vec::new();
                    let _ = std::io::stdin().read_to_end(&mut sink);
                })
                .await;
                drop(held);
            }
            m => panic!("unknown mode {m}"),
        }
    });
}
