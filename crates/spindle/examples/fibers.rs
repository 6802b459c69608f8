//! Demo of the fiber core: spawn many fibers over the workers, ping-pong
//! park/unpark between two of them, and print the runtime's counters.
//!
//! ```text
//! cargo run --release -p spindle --example fibers
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let rt = spindle::Runtime::new().expect("runtime starts");
    let workers = rt.stats().workers.len();
    println!("spindle runtime with {workers} workers");

    let summary = rt.run(move || {
        // 1. Spawn 100 000 fibers; each yields once, then returns its index.
        let start = Instant::now();
        let handles: Vec<_> = (0..100_000u64)
            .map(|i| {
                spindle::spawn(move || {
                    spindle::yield_now();
                    i
                })
            })
            .collect();
        let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, 99_999 * 100_000 / 2);
        println!(
            "100000 fibers spawned, yielded, joined in {:?}",
            start.elapsed()
        );

        // 2. Ping-pong: two fibers wake each other 100 000 times.
        let start = Instant::now();
        let rounds = 100_000u64;
        let counter = Arc::new(AtomicU64::new(0));
        let main_fiber = spindle::current().unwrap();
        let c = counter.clone();
        let pong = spindle::spawn(move || {
            for _ in 0..rounds {
                while c.load(Ordering::Acquire).is_multiple_of(2) {
                    spindle::park();
                }
                c.fetch_add(1, Ordering::AcqRel);
                main_fiber.unpark();
            }
        });
        for _ in 0..rounds {
            counter.fetch_add(1, Ordering::AcqRel);
            pong.fiber().unpark();
            while counter.load(Ordering::Acquire) % 2 == 1 {
                spindle::park();
            }
        }
        pong.join().unwrap();
        println!(
            "{rounds} park/unpark round trips in {:?} ({:.0} ns each)",
            start.elapsed(),
            start.elapsed().as_nanos() as f64 / rounds as f64
        );
        spindle::stats().unwrap()
    });
    println!(
        "stats: live {} | steals {} | dispatches per worker {:?} | pooled stacks {:?}",
        summary.live_fibers,
        summary.steals(),
        summary
            .workers
            .iter()
            .map(|w| w.dispatches)
            .collect::<Vec<_>>(),
        summary
            .workers
            .iter()
            .map(|w| w.stacks_pooled)
            .collect::<Vec<_>>()
    );
    let stopped = rt.shutdown();
    println!("shutdown stopped {stopped} fibers");
}
