//! Channel and mutex benchmarks: `sync_bench <impl> <bench> N`, printing
//! `RESULT <ns> ns` per operation.
//!
//! * `pingpong1` / `pingpong2`: a round trip between two parties over two
//!   capacity-1 channels, on one worker / across two workers (threads for
//!   crossbeam). `tokio pingpong2` is `multi_thread(2)`, where a woken task
//!   runs next on the worker that woke it; `tokio pingpong2-threads` puts
//!   each end on a current_thread runtime of its own thread, so that every
//!   hop crosses threads as in Spindle's `pingpong2`.
//! * `crossings2` (tokio): `pingpong2`, printing the fraction of round trips
//!   whose two ends ran on different threads (`CROSSED k of N`) instead of a
//!   time.
//!   With `PIN_CPUS=a,b` (spindle and crossbeam), the first end's thread
//!   is pinned to CPU `a` and the second's to `b`: the hop then always
//!   crosses the same two CPUs, for A/B runs of one implementation (this
//!   VM moves unpinned threads between its vCPUs, and a round's time with
//!   them by 2-3x). The ends pin themselves after [`WARM`] untimed round
//!   trips: a spindle worker decides whether it may spin from the CPUs it
//!   may use when it first goes idle, and must see both then.
//! * `mutex`: uncontended lock+unlock.
//! * `contended`: 4 parties each doing N/4 lock+increment+unlock on one
//!   mutex, on two workers (threads for parking_lot).

use std::sync::Arc;
use std::time::Instant;

fn spindle_rt(workers: usize) -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(workers)
        .stall_warning(None)
        .build()
        .unwrap()
}

/// Untimed round trips before a pinned `pingpong2` (see the module docs).
const WARM: u64 = 1000;

/// Pins the calling thread to the `end`-th CPU of `PIN_CPUS` (see the
/// module docs), if it is set.
fn pin_end(end: usize) {
    let Ok(cpus) = std::env::var("PIN_CPUS") else {
        return;
    };
    let cpu: usize = cpus
        .split(',')
        .nth(end)
        .expect("PIN_CPUS=a,b")
        .parse()
        .unwrap();
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // within it, and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

fn tokio_rt(workers: usize) -> tokio::runtime::Runtime {
    if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()
            .unwrap()
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().unwrap();
    let bench = a.next().unwrap();
    let n: u64 = a.next().unwrap().parse().unwrap();
    let ns = match (which.as_str(), bench.as_str()) {
        ("spindle", "pingpong1") => spindle_rt(1).run(move || {
            let (tx1, rx1) = spindle::chan::bounded::<u64>(1);
            let (tx2, rx2) = spindle::chan::bounded::<u64>(1);
            let pong = spindle::spawn(move || {
                for v in rx1.iter() {
                    tx2.send(v).unwrap();
                }
            });
            let start = Instant::now();
            for i in 0..n {
                tx1.send(i).unwrap();
                rx2.recv().unwrap();
            }
            let t = start.elapsed();
            drop(tx1);
            pong.join().unwrap();
            t.as_nanos() as f64 / n as f64
        }),
        ("spindle", "pingpong2") => {
            // Two runtimes of one worker each: the two ends are certainly on
            // different worker threads.
            let (a, b) = (spindle_rt(1), spindle_rt(1));
            let (tx1, rx1) = spindle::chan::bounded::<u64>(1);
            let (tx2, rx2) = spindle::chan::bounded::<u64>(1);
            let pong = b.spawn(move || {
                for v in rx1.iter() {
                    if v == WARM {
                        pin_end(1); // the worker thread this fiber runs on
                    }
                    tx2.send(v).unwrap();
                }
            });
            let ns = a.run(move || {
                for i in 0..WARM {
                    tx1.send(i).unwrap();
                    rx2.recv().unwrap();
                }
                pin_end(0);
                let start = Instant::now();
                for i in WARM..WARM + n {
                    tx1.send(i).unwrap();
                    rx2.recv().unwrap();
                }
                start.elapsed().as_nanos() as f64 / n as f64
            });
            pong.join().unwrap();
            ns
        }
        ("tokio", "pingpong1" | "pingpong2") => {
            let rt = tokio_rt(if bench == "pingpong1" { 1 } else { 2 });
            rt.block_on(async move {
                let (tx1, mut rx1) = tokio::sync::mpsc::channel::<u64>(1);
                let (tx2, mut rx2) = tokio::sync::mpsc::channel::<u64>(1);
                let pong = tokio::spawn(async move {
                    while let Some(v) = rx1.recv().await {
                        tx2.send(v).await.unwrap();
                    }
                });
                let ping = tokio::spawn(async move {
                    let start = Instant::now();
                    for i in 0..n {
                        tx1.send(i).await.unwrap();
                        rx2.recv().await.unwrap();
                    }
                    start.elapsed()
                });
                let t = ping.await.unwrap();
                pong.await.unwrap();
                t.as_nanos() as f64 / n as f64
            })
        }
        ("tokio", "pingpong2-threads") => {
            // Each end on a runtime of its own, on a thread of its own: a
            // task cannot move to the thread that woke it, so every hop is
            // a wake across threads, as between two Spindle workers. (In
            // `multi_thread(2)` the woken task runs next on the waking
            // worker, and both ends mostly share one thread.)
            let (tx1, mut rx1) = tokio::sync::mpsc::channel::<u64>(1);
            let (tx2, mut rx2) = tokio::sync::mpsc::channel::<u64>(1);
            let pong = std::thread::spawn(move || {
                let rt = tokio_rt(1);
                rt.block_on(async move {
                    tokio::spawn(async move {
                        while let Some(v) = rx1.recv().await {
                            tx2.send(v).await.unwrap();
                        }
                    })
                    .await
                    .unwrap()
                })
            });
            let rt = tokio_rt(1);
            let t = rt.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    for i in 0..n {
                        tx1.send(i).await.unwrap();
                        rx2.recv().await.unwrap();
                    }
                    start.elapsed()
                })
                .await
                .unwrap()
            });
            pong.join().unwrap();
            t.as_nanos() as f64 / n as f64
        }
        ("tokio", "crossings2") => {
            // `pingpong2` on `multi_thread(2)`, counting the round trips
            // whose two ends ran on different threads (no time: the
            // bookkeeping costs).
            thread_local!(static HERE: u8 = const { 0 });
            let thread = || HERE.with(|h| h as *const u8 as usize);
            let last_pong = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let seen = last_pong.clone();
            tokio_rt(2).block_on(async move {
                let (tx1, mut rx1) = tokio::sync::mpsc::channel::<u64>(1);
                let (tx2, mut rx2) = tokio::sync::mpsc::channel::<u64>(1);
                let pong = tokio::spawn(async move {
                    while let Some(v) = rx1.recv().await {
                        last_pong.store(thread(), std::sync::atomic::Ordering::Relaxed);
                        tx2.send(v).await.unwrap();
                    }
                });
                let ping = tokio::spawn(async move {
                    let mut crossed = 0u64;
                    for i in 0..n {
                        tx1.send(i).await.unwrap();
                        rx2.recv().await.unwrap();
                        if seen.load(std::sync::atomic::Ordering::Relaxed) != thread() {
                            crossed += 1;
                        }
                    }
                    crossed
                });
                let crossed = ping.await.unwrap();
                pong.await.unwrap();
                println!("CROSSED {crossed} of {n}");
            });
            return;
        }
        ("crossbeam", "pingpong2") => {
            let (tx1, rx1) = crossbeam_channel::bounded::<u64>(1);
            let (tx2, rx2) = crossbeam_channel::bounded::<u64>(1);
            let pong = std::thread::spawn(move || {
                for v in rx1.iter() {
                    if v == WARM {
                        pin_end(1);
                    }
                    tx2.send(v).unwrap();
                }
            });
            for i in 0..WARM {
                tx1.send(i).unwrap();
                rx2.recv().unwrap();
            }
            pin_end(0);
            let start = Instant::now();
            for i in WARM..WARM + n {
                tx1.send(i).unwrap();
                rx2.recv().unwrap();
            }
            let t = start.elapsed();
            drop(tx1);
            pong.join().unwrap();
            t.as_nanos() as f64 / n as f64
        }
        ("spindle", "mutex") => spindle_rt(1).run(move || {
            let m = spindle::sync::Mutex::new(0u64);
            let start = Instant::now();
            for _ in 0..n {
                *m.lock() += 1;
            }
            assert_eq!(*m.lock(), n);
            start.elapsed().as_nanos() as f64 / n as f64
        }),
        ("parking_lot", "mutex") => {
            let m = parking_lot::Mutex::new(0u64);
            let start = Instant::now();
            for _ in 0..n {
                *m.lock() += 1;
            }
            assert_eq!(*m.lock(), n);
            start.elapsed().as_nanos() as f64 / n as f64
        }
        ("tokio", "mutex") => tokio_rt(1).block_on(async move {
            let m = tokio::sync::Mutex::new(0u64);
            let start = Instant::now();
            for _ in 0..n {
                *m.lock().await += 1;
            }
            assert_eq!(*m.lock().await, n);
            start.elapsed().as_nanos() as f64 / n as f64
        }),
        ("spindle", "contended") => spindle_rt(2).run(move || {
            let m = Arc::new(spindle::sync::Mutex::new(0u64));
            let start = Instant::now();
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    spindle::spawn(move || {
                        for _ in 0..n / 4 {
                            *m.lock() += 1;
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            start.elapsed().as_nanos() as f64 / (n / 4 * 4) as f64
        }),
        ("parking_lot", "contended") => {
            let m = Arc::new(parking_lot::Mutex::new(0u64));
            let start = Instant::now();
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..n / 4 {
                            *m.lock() += 1;
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            start.elapsed().as_nanos() as f64 / (n / 4 * 4) as f64
        }
        ("tokio", "contended") => tokio_rt(2).block_on(async move {
            let m = Arc::new(tokio::sync::Mutex::new(0u64));
            let start = Instant::now();
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    tokio::spawn(async move {
                        for _ in 0..n / 4 {
                            *m.lock().await += 1;
                        }
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
            start.elapsed().as_nanos() as f64 / (n / 4 * 4) as f64
        }),
        (w, b) => panic!("no {b} for {w}"),
    };
    println!("RESULT {ns:.3} ns");
}
