//! park / unpark: token semantics and no lost wake-ups.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spindle::Runtime;

#[test]
fn an_unpark_before_the_park_is_not_lost() {
    spindle::run(|| {
        let me = spindle::current().unwrap();
        me.unpark();
        spindle::park(); // returns at once: the token was there
        me.unpark();
        me.unpark(); // tokens do not accumulate...
        spindle::park();
        // ...so a third park would wait: check with a helper that wakes us.
        let waker = spindle::spawn(move || me.unpark());
        spindle::park();
        waker.join().unwrap();
    });
}

#[test]
fn park_unpark_ping_pong_across_workers_loses_no_wakeup() {
    const ROUNDS: u64 = 100_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        let turn = Arc::new(AtomicU64::new(0));
        // Pin one side to each worker.
        let t = turn.clone();
        let ping_side = spindle::current().unwrap();
        let pong = spindle::spawn(move || {
            for i in 0..ROUNDS {
                while t.load(Ordering::Acquire) != 2 * i + 1 {
                    spindle::park();
                }
                t.store(2 * i + 2, Ordering::Release);
                ping_side.unpark();
            }
            spindle::worker_id()
        });
        for i in 0..ROUNDS {
            turn.store(2 * i + 1, Ordering::Release);
            pong.fiber().unpark();
            while turn.load(Ordering::Acquire) != 2 * i + 2 {
                spindle::park();
            }
        }
        pong.join().unwrap();
        assert_eq!(turn.load(Ordering::Relaxed), 2 * ROUNDS);
    });
}

#[test]
fn a_plain_thread_unparks_a_fiber_and_a_fiber_unparks_a_thread() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let stage = Arc::new(AtomicU64::new(0));
    let s = stage.clone();
    let main_thread = std::thread::current();
    let h = rt.spawn(move || {
        s.store(1, Ordering::SeqCst);
        while s.load(Ordering::SeqCst) != 2 {
            spindle::park();
        }
        s.store(3, Ordering::SeqCst);
        main_thread.unpark();
    });
    while stage.load(Ordering::SeqCst) != 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stage.store(2, Ordering::SeqCst);
    h.fiber().unpark();
    while stage.load(Ordering::SeqCst) != 3 {
        std::thread::park_timeout(Duration::from_millis(100));
    }
    h.join().unwrap();
}

#[test]
fn many_fibers_woken_by_many_threads_all_finish() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..1000)
        .map(|_| {
            let done = done.clone();
            rt.spawn(move || {
                for _ in 0..10 {
                    let me = spindle::current().unwrap();
                    std::thread::spawn(move || me.unpark());
                    spindle::park();
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 1000);
}

/// Two runtimes of one worker each, so every wake crosses threads, and each
/// worker spins between hops: the wakes go through the spinning worker's
/// mailbox (`docs/DESIGN.md`, "Sleeping and spinning"). A plain thread
/// unparks the pong side all along, so offers race each other and the
/// worker's leaving its spin. Every round trip completes in order.
#[test]
fn wakes_handed_to_a_spinning_worker_arrive_once_and_in_order() {
    const ROUNDS: u64 = 50_000;
    let (a, b) = (
        Runtime::builder().workers(1).build().unwrap(),
        Runtime::builder().workers(1).build().unwrap(),
    );
    let (tx1, rx1) = spindle::chan::bounded::<u64>(1);
    let (tx2, rx2) = spindle::chan::bounded::<u64>(1);
    let pong = b.spawn(move || {
        let mut n = 0u64;
        for v in rx1.iter() {
            assert_eq!(v, n, "a value lost, doubled or reordered");
            n += 1;
            tx2.send(v).unwrap();
        }
        n
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let (stop, fiber) = (stop.clone(), pong.fiber().clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fiber.unpark();
                n += 1;
                if n.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        })
    };
    a.run(move || {
        for i in 0..ROUNDS {
            tx1.send(i).unwrap();
            assert_eq!(rx2.recv().unwrap(), i);
        }
    });
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    assert_eq!(pong.join().unwrap(), ROUNDS);
}

/// A runtime shut down while another runtime's fibers keep waking its
/// fibers from their own worker: the wakes that land after the end are
/// dropped with the fibers they wake, every fiber's locals are dropped
/// once, and nothing hangs.
#[test]
fn a_runtime_shut_down_under_wakes_from_another_drops_every_fiber_once() {
    const FIBERS: usize = 64;
    struct Counted(Arc<AtomicU64>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicU64::new(0));
    let (a, b) = (
        Runtime::builder().workers(1).build().unwrap(),
        Runtime::builder().workers(1).build().unwrap(),
    );
    let mut senders = Vec::new();
    for _ in 0..FIBERS {
        let (tx, rx) = spindle::chan::bounded::<u64>(1);
        let guard = Counted(dropped.clone());
        b.spawn(move || {
            let _guard = guard;
            while rx.recv().is_ok() {}
        });
        senders.push(tx);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waker = {
        let stop = stop.clone();
        a.spawn(move || {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for tx in &senders {
                    // The receiver may be gone (its runtime stopped).
                    if tx.send(sent).is_ok() {
                        sent += 1;
                    }
                }
                spindle::yield_now();
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    b.shutdown_timeout(Duration::from_secs(5));
    assert_eq!(dropped.load(Ordering::SeqCst), FIBERS as u64);
    stop.store(true, Ordering::Relaxed);
    assert!(
        waker.join().unwrap() > 0,
        "the waker never reached a receiver"
    );
    drop(a);
}
