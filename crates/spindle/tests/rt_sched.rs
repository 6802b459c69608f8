//! Service order: FIFO stamps, yielding, fairness on one worker.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use spindle::Runtime;

#[test]
fn yielding_fibers_on_one_worker_run_round_robin() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let order = rt.run(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..3)
            .map(|id| {
                let log = log.clone();
                spindle::spawn(move || {
                    for round in 0..3 {
                        log.lock().unwrap().push((round, id));
                        spindle::yield_now();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    });
    let expected: Vec<_> = (0..3)
        .flat_map(|round| (0..3).map(move |id| (round, id)))
        .collect();
    assert_eq!(order, expected);
}

#[test]
fn a_fiber_spinning_on_yield_now_does_not_starve_new_fibers() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let spinner = spindle::spawn(move || {
            let mut spins = 0u64;
            while !s.load(Ordering::Relaxed) {
                spindle::yield_now();
                spins += 1;
            }
            spins
        });
        // Each of these must get to run while the spinner keeps yielding.
        for i in 0..100 {
            assert_eq!(spindle::spawn(move || i).join().unwrap(), i);
        }
        stop.store(true, Ordering::Relaxed);
        assert!(spinner.join().unwrap() > 0);
    });
}

/// A lone fiber's yield goes on without a switch when nothing else can run
/// (see `docs/DESIGN.md`); the netpoller must still be polled meanwhile, or
/// a fiber parked on a socket would never wake.
#[test]
fn a_lone_fiber_spinning_on_yield_now_still_lets_a_socket_wake_its_fiber() {
    common::within(std::time::Duration::from_secs(20), || {
        let rt = Runtime::builder().workers(1).build().unwrap();
        rt.run(|| {
            let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let accepted = Arc::new(AtomicBool::new(false));
            let a = accepted.clone();
            let acceptor = spindle::spawn(move || {
                let (_conn, _) = listener.accept().unwrap();
                a.store(true, Ordering::Release);
            });
            // Let the acceptor park on the socket, then connect from a
            // plain thread: only the netpoller can tell the worker.
            spindle::yield_now();
            let client = std::thread::spawn(move || std::net::TcpStream::connect(addr).unwrap());
            let mut spins = 0u64;
            while !accepted.load(Ordering::Acquire) {
                spindle::yield_now();
                spins += 1;
            }
            acceptor.join().unwrap();
            drop(client.join().unwrap());
            assert!(spins > 0);
        });
    });
}

#[test]
fn a_spawn_runs_before_a_yielder_that_yields_after_it() {
    // The spawned fiber is stamped before the yield re-stamps the spinner,
    // so it runs first: the spinner sees its effect after one yield.
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        for _ in 0..100 {
            let flag = Arc::new(AtomicBool::new(false));
            let f = flag.clone();
            let h = spindle::spawn(move || f.store(true, Ordering::Relaxed));
            spindle::yield_now();
            assert!(flag.load(Ordering::Relaxed), "the older spawn ran first");
            h.join().unwrap();
        }
    });
}

#[test]
fn a_woken_fiber_goes_back_to_its_own_worker() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        let handles: Vec<_> = (0..64)
            .map(|_| {
                spindle::spawn(|| {
                    let home = spindle::worker_id();
                    for _ in 0..50 {
                        let me = spindle::current().unwrap();
                        // Woken from the other side of the runtime, or a
                        // plain thread: must come back home.
                        std::thread::spawn(move || me.unpark());
                        spindle::park();
                        assert_eq!(spindle::worker_id(), home);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

/// The global queue (spawns from outside the runtime) is stamped on a
/// clock of its own, apart from each worker's. After many outside spawns
/// its clock is far ahead of a worker's that queued little of its own; a
/// fiber spawned from outside must still run after a yielder's next few
/// turns, not after as many yields as the clocks are apart.
#[test]
fn an_outside_spawn_runs_after_a_few_turns_of_a_yielder_whatever_the_clocks() {
    common::within(std::time::Duration::from_secs(60), || {
        let rt = Runtime::builder().workers(1).build().unwrap();
        // Moves the global queue's clock 100 000 ahead; the worker only runs
        // them (taken in batches, not pushed one by one).
        for _ in 0..100 {
            let fibers: Vec<_> = (0..1000).map(|_| rt.spawn(|| ())).collect();
            fibers.into_iter().for_each(|f| f.join().unwrap());
        }
        let started = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicBool::new(false));
        let outside_ran = Arc::new(AtomicBool::new(false));
        let (s, q, o) = (started.clone(), queued.clone(), outside_ran.clone());
        let yielder = rt.spawn(move || {
            s.store(true, Ordering::Release);
            // Turns taken once the outside fiber is queued.
            let mut turns = 0u64;
            while !o.load(Ordering::Acquire) {
                let counts = q.load(Ordering::Acquire);
                spindle::yield_now();
                turns += u64::from(counts);
            }
            turns
        });
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let o = outside_ran.clone();
        let outside = rt.spawn(move || o.store(true, Ordering::Release));
        queued.store(true, Ordering::Release);
        outside.join().unwrap();
        let turns = yielder.join().unwrap();
        assert!(turns < 100, "the outside fiber waited {turns} turns");
    })
}
