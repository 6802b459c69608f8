//! Fiber-core benchmarks for Spindle: `core_spindle <switch|yield|yield2|spawn|rss> N`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use spindle_bench::{args, report, rss_kib};

fn main() {
    let (bench, n) = args();
    match bench.as_str() {
        "switch" => {
            spindle::__bench::switch_pairs(n / 10); // warm up
            let t = spindle::__bench::switch_pairs(n);
            report(t.as_nanos() as f64 / n as f64, "ns");
        }
        "yield" => {
            let rt = spindle::Runtime::builder().workers(1).build().unwrap();
            let ns = rt.run(move || {
                let per = n / 2;
                let start = Instant::now();
                let a = spindle::spawn(move || (0..per).for_each(|_| spindle::yield_now()));
                let b = spindle::spawn(move || (0..per).for_each(|_| spindle::yield_now()));
                a.join().unwrap();
                b.join().unwrap();
                start.elapsed().as_nanos() as f64 / (2 * per) as f64
            });
            report(ns, "ns");
        }
        "yield2" => {
            // `yield` on each of two workers at once: two fibers pinned to
            // each, so every yield switches and queues on both workers
            // together. Per yield of one worker (wall time / yields each).
            let rt = spindle::Runtime::builder().workers(2).build().unwrap();
            let ns = rt.run(move || {
                let per = n / 2;
                let start = Instant::now();
                let fibers: Vec<_> = (0..4)
                    .map(|i| {
                        spindle::Builder::new()
                            .spawn_on_worker(i % 2, move || {
                                (0..per).for_each(|_| spindle::yield_now())
                            })
                            .unwrap()
                    })
                    .collect();
                fibers.into_iter().for_each(|f| f.join().unwrap());
                start.elapsed().as_nanos() as f64 / (2 * per) as f64
            });
            report(ns, "ns");
        }
        "spawn" => {
            let rt = spindle::Runtime::builder().workers(1).build().unwrap();
            let ns = rt.run(move || {
                for _ in 0..1000 {
                    spindle::spawn(|| ()).join().unwrap();
                }
                let start = Instant::now();
                for _ in 0..n {
                    spindle::spawn(|| ()).join().unwrap();
                }
                start.elapsed().as_nanos() as f64 / n as f64
            });
            report(ns, "ns");
        }
        // The rows below are written as a user writes them: `spindle::run`
        // with its defaults (pinned to one CPU it starts one worker), a
        // closure that returns a value, a fiber yielding on its own.
        "spawn-value" => {
            let ns = spindle::run(move || {
                let mut sum = 0u64;
                for i in 0..1000 {
                    sum += spindle::spawn(move || i).join().unwrap();
                }
                let start = Instant::now();
                for i in 0..n {
                    sum += spindle::spawn(move || i).join().unwrap();
                }
                let ns = start.elapsed().as_nanos() as f64 / n as f64;
                assert_eq!(sum, 999 * 1000 / 2 + n * (n - 1) / 2);
                ns
            });
            report(ns, "ns");
        }
        "spawn-batch" => {
            // Spawn 1 000, then join them; n fibers in all.
            let ns = spindle::run(move || {
                let batch = |base: u64| {
                    let handles: Vec<_> = (base..base + 1000)
                        .map(|i| spindle::spawn(move || i))
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
                };
                batch(0);
                let start = Instant::now();
                let mut sum = 0;
                for b in 0..n / 1000 {
                    sum += batch(b * 1000);
                }
                let m = n / 1000 * 1000;
                assert_eq!(sum, m * (m - 1) / 2);
                start.elapsed().as_nanos() as f64 / m as f64
            });
            report(ns, "ns");
        }
        "yield-lone" => {
            let ns = spindle::run(move || {
                for _ in 0..1000 {
                    spindle::yield_now();
                }
                let start = Instant::now();
                for _ in 0..n {
                    spindle::yield_now();
                }
                start.elapsed().as_nanos() as f64 / n as f64
            });
            report(ns, "ns");
        }
        "rss" => {
            let rt = spindle::Runtime::builder().workers(1).build().unwrap();
            let before = rt.run(rss_kib);
            let parked = Arc::new(AtomicU64::new(0));
            let p = parked.clone();
            let after = rt.run(move || {
                let handles: Vec<_> = (0..n)
                    .map(|_| {
                        let p = p.clone();
                        spindle::spawn(move || {
                            p.fetch_add(1, Ordering::Relaxed);
                            spindle::park();
                        })
                    })
                    .collect();
                while p.load(Ordering::Relaxed) < n {
                    spindle::yield_now();
                }
                let after = rss_kib();
                std::mem::forget(handles);
                after
            });
            report((after - before) as f64 / n as f64, "KiB");
            std::process::exit(0); // do not wait for 10^6 unwinds
        }
        "fibers" => {
            // The README's `fibers` example: N fibers spawned, each yields
            // once, then all joined; 2 workers.
            let rt = spindle::Runtime::builder().workers(2).build().unwrap();
            let ms = rt.run(move || {
                let start = Instant::now();
                let handles: Vec<_> = (0..n)
                    .map(|i| {
                        spindle::spawn(move || {
                            spindle::yield_now();
                            i
                        })
                    })
                    .collect();
                let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
                assert_eq!(sum, n * (n - 1) / 2);
                start.elapsed().as_secs_f64() * 1e3
            });
            report(ms, "ms");
        }
        "spawn-park" | "shutdown-parked" => {
            // N fibers spawned that each park forever: the time until all
            // are parked, or the time for the runtime to stop them all.
            let rt = spindle::Runtime::builder().workers(1).build().unwrap();
            let parked = Arc::new(AtomicU64::new(0));
            let p = parked.clone();
            let start = Instant::now();
            rt.run(move || {
                for _ in 0..n {
                    let p = p.clone();
                    drop(spindle::spawn(move || {
                        p.fetch_add(1, Ordering::Relaxed);
                        loop {
                            spindle::park();
                        }
                    }));
                }
                while p.load(Ordering::Relaxed) < n {
                    spindle::yield_now();
                }
            });
            let parked_ms = start.elapsed().as_secs_f64() * 1e3;
            if bench == "spawn-park" {
                report(parked_ms, "ms");
                std::process::exit(0); // the shutdown is the other row
            }
            let start = Instant::now();
            rt.shutdown();
            let stop_ms = start.elapsed().as_secs_f64() * 1e3;
            report(stop_ms, "ms");
        }
        "page-touch" => {
            // The floor under spawn-park: no runtime, only the kernel's cost
            // of the one fresh page each parked fiber's stack needs (one
            // page touched per 256 KiB stack + 4 KiB guard slot).
            let slot = (256 + 4) << 10;
            // SAFETY: a fresh anonymous mapping, touched only below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    n as usize * slot,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            let start = Instant::now();
            for i in 0..n as usize {
                // SAFETY: inside the mapping.
                unsafe {
                    (base as *mut u8)
                        .add(i * slot + slot - 64)
                        .write_volatile(1)
                };
            }
            report(start.elapsed().as_secs_f64() * 1e3, "ms");
        }
        other => panic!("unknown bench {other}"),
    }
}
