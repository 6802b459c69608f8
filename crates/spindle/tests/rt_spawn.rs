//! Spawning, joining, panics, builders and runtimes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use spindle::{Builder, Runtime};

fn rt(workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .build()
        .expect("runtime")
}

#[test]
fn hundred_thousand_fibers_over_two_workers_all_accounted_for() {
    let rt = rt(2);
    let (sum, count, stats) = rt.run(|| {
        let handles: Vec<_> = (0..100_000u64)
            .map(|i| spindle::spawn(move || i * 2))
            .collect();
        let mut sum = 0u64;
        let mut count = 0;
        for h in handles {
            sum += h.join().expect("no fiber fails");
            count += 1;
        }
        (sum, count, spindle::stats().unwrap())
    });
    assert_eq!(count, 100_000);
    assert_eq!(sum, 2 * (99_999 * 100_000 / 2));
    assert_eq!(stats.workers.len(), 2);
    assert_eq!(rt.shutdown(), 0, "nothing was left to stop");
}

#[test]
fn fibers_spread_over_workers_by_stealing() {
    let rt = rt(2);
    let seen = rt.run(|| {
        let handles: Vec<_> = (0..2_000)
            .map(|_| {
                spindle::spawn(|| {
                    // Keep the spawner's worker busy long enough that the
                    // other worker has to steal.
                    let t = std::time::Instant::now();
                    while t.elapsed() < Duration::from_micros(50) {}
                    spindle::worker_id().unwrap()
                })
            })
            .collect();
        let mut seen = [0usize; 2];
        for h in handles {
            seen[h.join().unwrap()] += 1;
        }
        seen
    });
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "both workers ran fibers: {seen:?}"
    );
    assert!(rt.stats().steals() > 0);
}

#[test]
fn a_panicking_fiber_reaches_join_and_the_runtime_goes_on() {
    let rt = rt(2);
    rt.run(|| {
        let h = spindle::spawn(|| -> u32 { panic!("boom in a fiber") });
        let err = h.join().expect_err("the panic is reported");
        assert!(err.is_panic());
        assert!(!err.is_cancelled());
        let payload = err.into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in a fiber"));
        // The runtime is fine afterwards.
        assert_eq!(spindle::spawn(|| 7).join().unwrap(), 7);
    });
    // A panic in block_on's own closure comes back to the caller.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.run(|| panic!("boom in block_on"))
    }));
    assert!(caught.is_err());
    assert_eq!(rt.run(|| 1 + 1), 2);
}

#[test]
fn join_from_a_plain_thread() {
    let rt = rt(2);
    let h = rt.spawn(|| {
        spindle::yield_now();
        "from a fiber"
    });
    let joined = std::thread::spawn(move || h.join().unwrap())
        .join()
        .unwrap();
    assert_eq!(joined, "from a fiber");
}

#[test]
fn join_waits_for_a_fiber_that_parks_first() {
    let rt = rt(2);
    let (tx, rx) = mpsc::channel::<spindle::Fiber>();
    let h = rt.spawn(move || {
        tx.send(spindle::current().unwrap()).unwrap();
        spindle::park();
        99
    });
    let fiber = rx.recv().unwrap();
    assert!(!h.is_finished());
    std::thread::sleep(Duration::from_millis(20));
    fiber.unpark();
    assert_eq!(h.join().unwrap(), 99);
}

#[test]
fn builder_names_fibers_and_sets_their_stack() {
    let rt = rt(1);
    let (name, deep) = rt.run(|| {
        let h = Builder::new()
            .name("conn-handler")
            .stack_size(1 << 20)
            .spawn(|| {
                // 512 KiB of stack: more than the default 256 KiB.
                let mut big = [0u8; 512 << 10];
                big[0] = 1;
                let deep = std::hint::black_box(&mut big)[0];
                (spindle::current().unwrap().name().map(str::to_owned), deep)
            })
            .expect("stack available");
        assert_eq!(h.fiber().name(), Some("conn-handler"));
        h.join().unwrap()
    });
    assert_eq!(name.as_deref(), Some("conn-handler"));
    assert_eq!(deep, 1);
}

#[test]
fn spawn_local_runs_a_non_send_closure_on_the_same_worker() {
    let rt = rt(2);
    rt.run(|| {
        let here = spindle::worker_id();
        let rc = std::rc::Rc::new(std::cell::Cell::new(1));
        let rc2 = rc.clone();
        let h = spindle::spawn_local(move || {
            spindle::yield_now();
            rc2.set(rc2.get() + 1);
            spindle::worker_id()
        });
        assert_eq!(h.join().unwrap(), here);
        assert_eq!(rc.get(), 2);
    });
}

#[test]
fn spawn_outside_a_runtime_panics_with_the_fix() {
    let err = std::panic::catch_unwind(|| spindle::spawn(|| ())).expect_err("panics");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("outside a spindle runtime"), "{msg}");
    assert!(msg.contains("Runtime::spawn"), "{msg}");
}

struct SetOnDrop(Arc<AtomicUsize>);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_stops_fibers_that_wait_forever_and_runs_their_destructors() {
    let rt = rt(2);
    let dropped = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..100 {
        let guard = SetOnDrop(dropped.clone());
        let started = started.clone();
        handles.push(rt.spawn(move || {
            let _guard = guard;
            started.fetch_add(1, Ordering::SeqCst);
            loop {
                spindle::park(); // an accept loop that never returns
            }
        }));
    }
    while started.load(Ordering::SeqCst) < 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let stopped = rt.shutdown();
    assert_eq!(stopped, 100);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        100,
        "every stack was unwound"
    );
    for h in handles {
        let err = h.join().expect_err("stopped, not finished");
        assert!(err.is_cancelled());
    }
}

#[test]
fn a_fiber_that_never_started_is_reported_cancelled_after_shutdown() {
    let rt = rt(1);
    let gate = Arc::new(AtomicUsize::new(0));
    let g = gate.clone();
    // Occupy the only worker (no yield) until shutdown has been requested,
    // so the next spawn cannot start before it.
    let busy = rt.spawn(move || {
        g.store(1, Ordering::SeqCst);
        while g.load(Ordering::SeqCst) == 1 {}
    });
    while gate.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let never = rt.spawn(|| 5);
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        gate.store(2, Ordering::SeqCst);
    });
    assert_eq!(rt.shutdown(), 1, "only the unstarted fiber was stopped");
    opener.join().unwrap();
    assert!(busy.join().is_ok());
    assert!(never.join().expect_err("never ran").is_cancelled());
}

#[test]
fn several_runtimes_live_at_once() {
    let a = rt(1);
    let b = rt(1);
    let hb = b.spawn(spindle::worker_id);
    let from_a = a.run(move || {
        // A fiber of runtime a joins a fiber of runtime b.
        hb.join().unwrap()
    });
    assert_eq!(from_a, Some(0));
    drop(a);
    assert_eq!(b.run(|| 3), 3);
}

#[test]
fn run_returns_the_closures_value() {
    assert_eq!(
        spindle::run(|| spindle::spawn(|| 21).join().unwrap() * 2),
        42
    );
}

/// Without the malloc warm-up (a program with its own allocator) bursts
/// of spawns and joins, the path the warm-up prepares for, run the same:
/// every value comes back, twice over on the same heap, on both workers.
#[test]
fn a_runtime_without_the_malloc_warm_up_runs_bursts_the_same() {
    for warm in [false, true] {
        let rt = Runtime::builder()
            .workers(2)
            .warm_malloc(warm)
            .build()
            .expect("runtime");
        let sums = rt.run(|| {
            (0..2)
                .map(|_| {
                    let handles: Vec<_> = (0..1_000u64)
                        .map(|i| spindle::spawn(move || vec![i; 64].iter().sum::<u64>()))
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(sums, vec![64 * 999 * 1_000 / 2; 2], "warm_malloc({warm})");
        assert_eq!(rt.shutdown(), 0);
    }
}

#[test]
fn stats_count_live_fibers() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        spindle::park();
    });
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(rt.stats().live_fibers, 1);
    h.fiber().unpark();
    h.join().unwrap();
    assert_eq!(rt.stats().live_fibers, 0);
    assert!(rt.stats().workers[0].stacks_pooled >= 1);
}

#[test]
#[allow(deprecated)]
fn the_old_names_still_work_for_one_release() {
    let rt = rt(1);
    assert_eq!(
        rt.block_on(|| spindle::blocking::spawn_blocking(|| 6 * 7)),
        42
    );
    assert_eq!(rt.shutdown(), 0);
}
