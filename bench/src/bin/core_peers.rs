//! The same fiber-core benchmarks for peers:
//! `core_peers <corosensei|may|tokio-ct|tokio-ct-bare|tokio-mt1|tokio-mt2> <bench> N`
//! (`tokio-ct-bare`: current_thread without its I/O and time drivers;
//! `tokio-mt2`: multi_thread with two workers, for `yield2`).

use std::time::Instant;

use spindle_bench::{report, rss_kib};

fn main() {
    let mut a = std::env::args().skip(1);
    let peer = a.next().expect("peer");
    let bench = a.next().expect("bench");
    let n: u64 = a.next().expect("n").parse().unwrap();
    match (peer.as_str(), bench.as_str()) {
        ("corosensei", b) => corosensei_bench(b, n),
        ("may", b) => may_bench(b, n),
        ("tokio-ct", b) => tokio_bench(b, n, false, true),
        ("tokio-ct-bare", b) => tokio_bench(b, n, false, false),
        ("tokio-mt1", b) => tokio_bench(b, n, true, true),
        ("tokio-mt2", b) => tokio_bench2(b, n),
        (p, b) => panic!("unknown {p} {b}"),
    }
}

fn corosensei_bench(bench: &str, n: u64) {
    use corosensei::stack::DefaultStack;
    use corosensei::{Coroutine, Yielder};
    match bench {
        "switch" => {
            let mut c = Coroutine::new(|y: &Yielder<(), ()>, ()| loop {
                y.suspend(());
            });
            for _ in 0..n / 10 {
                c.resume(());
            }
            let start = Instant::now();
            for _ in 0..n {
                c.resume(());
            }
            report(start.elapsed().as_nanos() as f64 / n as f64, "ns");
        }
        "spawn" => {
            // Create, run to completion, and drop a coroutine on a reused stack.
            let mut stack = Some(DefaultStack::new(256 << 10).unwrap());
            let start = Instant::now();
            for _ in 0..n {
                let s = stack.take().unwrap();
                let mut c = Coroutine::with_stack(s, |_: &Yielder<(), ()>, ()| ());
                c.resume(());
                stack = Some(c.into_stack());
            }
            report(start.elapsed().as_nanos() as f64 / n as f64, "ns");
        }
        "spawn-fresh" => {
            let start = Instant::now();
            for _ in 0..n {
                let stack = DefaultStack::new(256 << 10).unwrap();
                let mut c = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| ());
                c.resume(());
            }
            report(start.elapsed().as_nanos() as f64 / n as f64, "ns");
        }
        "rss" => {
            let before = rss_kib();
            let mut all = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let stack = DefaultStack::new(256 << 10).unwrap();
                let mut c = Coroutine::with_stack(stack, |y: &Yielder<(), ()>, ()| {
                    y.suspend(());
                });
                c.resume(());
                all.push(c);
            }
            report((rss_kib() - before) as f64 / n as f64, "KiB");
            std::process::exit(0);
        }
        b => panic!("corosensei has no {b}"),
    }
}

fn may_bench(bench: &str, n: u64) {
    may::config().set_workers(1).set_stack_size(0x8000);
    match bench {
        "yield" => {
            let per = n / 2;
            let h = may::go!(move || {
                let start = Instant::now();
                let a = may::go!(move || (0..per).for_each(|_| may::coroutine::yield_now()));
                let b = may::go!(move || (0..per).for_each(|_| may::coroutine::yield_now()));
                a.join().unwrap();
                b.join().unwrap();
                start.elapsed().as_nanos() as f64 / (2 * per) as f64
            });
            report(h.join().unwrap(), "ns");
        }
        "spawn" => {
            let h = may::go!(move || {
                for _ in 0..1000 {
                    may::go!(|| ()).join().unwrap();
                }
                let start = Instant::now();
                for _ in 0..n {
                    may::go!(|| ()).join().unwrap();
                }
                start.elapsed().as_nanos() as f64 / n as f64
            });
            report(h.join().unwrap(), "ns");
        }
        "spawn-value" => {
            let h = may::go!(move || {
                let mut sum = 0u64;
                for i in 0..1000 {
                    sum += may::go!(move || i).join().unwrap();
                }
                let start = Instant::now();
                for i in 0..n {
                    sum += may::go!(move || i).join().unwrap();
                }
                let ns = start.elapsed().as_nanos() as f64 / n as f64;
                assert_eq!(sum, 999 * 1000 / 2 + n * (n - 1) / 2);
                ns
            });
            report(h.join().unwrap(), "ns");
        }
        "yield-lone" => {
            let h = may::go!(move || {
                for _ in 0..1000 {
                    may::coroutine::yield_now();
                }
                let start = Instant::now();
                for _ in 0..n {
                    may::coroutine::yield_now();
                }
                start.elapsed().as_nanos() as f64 / n as f64
            });
            report(h.join().unwrap(), "ns");
        }
        "rss" => {
            let before = rss_kib();
            let parked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut hs = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let p = parked.clone();
                hs.push(may::go!(move || {
                    p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    may::coroutine::park();
                }));
            }
            while parked.load(std::sync::atomic::Ordering::Relaxed) < n {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            report((rss_kib() - before) as f64 / n as f64, "KiB");
            std::process::exit(0);
        }
        b => panic!("may has no {b}"),
    }
}

/// Two-worker rows on tokio's multi_thread(2), drivers on.
fn tokio_bench2(bench: &str, n: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match bench {
        "yield2" => {
            // Four tasks yielding, spawned from a task: as many as
            // Spindle's row pins two to each worker; tokio spreads them
            // as it does.
            let ns = rt.block_on(async move {
                tokio::spawn(async move {
                    let per = n / 2;
                    let start = Instant::now();
                    let tasks: Vec<_> = (0..4)
                        .map(|_| {
                            tokio::spawn(async move {
                                for _ in 0..per {
                                    tokio::task::yield_now().await;
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                    start.elapsed().as_nanos() as f64 / (2 * per) as f64
                })
                .await
                .unwrap()
            });
            report(ns, "ns");
        }
        b => panic!("tokio-mt2 has no {b}"),
    }
}

fn tokio_bench(bench: &str, n: u64, multi: bool, drivers: bool) {
    let mut builder = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(1);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    if drivers {
        builder.enable_all();
    }
    let rt = builder.build().unwrap();
    match bench {
        "yield" => {
            let ns = rt.block_on(async move {
                let per = n / 2;
                let start = Instant::now();
                let a = tokio::spawn(async move {
                    for _ in 0..per {
                        tokio::task::yield_now().await;
                    }
                });
                let b = tokio::spawn(async move {
                    for _ in 0..per {
                        tokio::task::yield_now().await;
                    }
                });
                a.await.unwrap();
                b.await.unwrap();
                start.elapsed().as_nanos() as f64 / (2 * per) as f64
            });
            report(ns, "ns");
        }
        "spawn" => {
            let ns = rt.block_on(async move {
                tokio::spawn(async move {
                    for _ in 0..1000 {
                        tokio::spawn(async {}).await.unwrap();
                    }
                    let start = Instant::now();
                    for _ in 0..n {
                        tokio::spawn(async {}).await.unwrap();
                    }
                    start.elapsed().as_nanos() as f64 / n as f64
                })
                .await
                .unwrap()
            });
            report(ns, "ns");
        }
        // Everything inside a spawned task, as tokio's users are told to
        // run their code (`block_on`'s own future is polled differently).
        "spawn-value" => {
            let ns = rt.block_on(async move {
                tokio::spawn(async move {
                    let mut sum = 0u64;
                    for i in 0..1000 {
                        sum += tokio::spawn(async move { i }).await.unwrap();
                    }
                    let start = Instant::now();
                    for i in 0..n {
                        sum += tokio::spawn(async move { i }).await.unwrap();
                    }
                    let ns = start.elapsed().as_nanos() as f64 / n as f64;
                    assert_eq!(sum, 999 * 1000 / 2 + n * (n - 1) / 2);
                    ns
                })
                .await
                .unwrap()
            });
            report(ns, "ns");
        }
        "spawn-batch" => {
            let ns = rt.block_on(async move {
                tokio::spawn(async move {
                    async fn batch(base: u64) -> u64 {
                        let handles: Vec<_> = (base..base + 1000)
                            .map(|i| tokio::spawn(async move { i }))
                            .collect();
                        let mut sum = 0;
                        for h in handles {
                            sum += h.await.unwrap();
                        }
                        sum
                    }
                    batch(0).await;
                    let start = Instant::now();
                    let mut sum = 0;
                    for b in 0..n / 1000 {
                        sum += batch(b * 1000).await;
                    }
                    let m = n / 1000 * 1000;
                    assert_eq!(sum, m * (m - 1) / 2);
                    start.elapsed().as_nanos() as f64 / m as f64
                })
                .await
                .unwrap()
            });
            report(ns, "ns");
        }
        "yield-lone" => {
            let ns = rt.block_on(async move {
                tokio::spawn(async move {
                    for _ in 0..1000 {
                        tokio::task::yield_now().await;
                    }
                    let start = Instant::now();
                    for _ in 0..n {
                        tokio::task::yield_now().await;
                    }
                    start.elapsed().as_nanos() as f64 / n as f64
                })
                .await
                .unwrap()
            });
            report(ns, "ns");
        }
        "rss" => {
            let before = rss_kib();
            let mut senders = Vec::with_capacity(n as usize);
            rt.block_on(async {
                for _ in 0..n {
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    senders.push(tx);
                    tokio::spawn(async move {
                        let _ = rx.await;
                    });
                }
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            });
            report((rss_kib() - before) as f64 / n as f64, "KiB");
            std::process::exit(0);
        }
        "spawn-park" | "shutdown-parked" => {
            let start = Instant::now();
            let mut senders = Vec::with_capacity(n as usize);
            rt.block_on(async {
                let parked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
                for _ in 0..n {
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    senders.push(tx);
                    let p = parked.clone();
                    tokio::spawn(async move {
                        p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let _ = rx.await;
                    });
                }
                while parked.load(std::sync::atomic::Ordering::Relaxed) < n {
                    tokio::task::yield_now().await;
                }
            });
            let parked_ms = start.elapsed().as_secs_f64() * 1e3;
            let start = Instant::now();
            drop(rt);
            let stop_ms = start.elapsed().as_secs_f64() * 1e3;
            drop(senders);
            report(
                if bench == "spawn-park" {
                    parked_ms
                } else {
                    stop_ms
                },
                "ms",
            );
        }
        b => panic!("tokio has no {b}"),
    }
}
