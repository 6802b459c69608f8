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
