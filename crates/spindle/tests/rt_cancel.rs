//! Cancellation, deadlines, scopes and shutdown.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle::Runtime;

#[test]
fn cancelling_ten_thousand_fibers_in_every_kind_of_wait() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        let lock = Arc::new(spindle::sync::Mutex::new(()));
        let held = lock.lock();
        let (_tx, rx) = spindle::chan::unbounded::<u8>();
        let sem = Arc::new(spindle::sync::Semaphore::new(0));
        let cv = Arc::new((spindle::sync::Mutex::new(()), spindle::sync::Condvar::new()));
        let (_a, b) = spindle::net::UnixStream::pair().unwrap();
        let b = Arc::new(b);
        let forever = spindle::spawn(spindle::park);
        let forever = Arc::new(forever);
        let dropped = Arc::new(AtomicUsize::new(0));
        struct Count(Arc<AtomicUsize>);
        impl Drop for Count {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let handles: Vec<_> = (0..10_000)
            .map(|i| {
                let (lock, rx, sem, cv, b, d) = (
                    lock.clone(),
                    rx.clone(),
                    sem.clone(),
                    cv.clone(),
                    b.clone(),
                    dropped.clone(),
                );
                // Captured, not built inside: dropped whether or not the
                // fiber got to start before its cancel.
                let counter = Count(d);
                spindle::spawn(move || {
                    let _c = counter;
                    match i % 8 {
                        0 => drop(lock.lock()),
                        1 => {
                            let _ = rx.recv();
                        }
                        2 => drop(sem.acquire()),
                        3 => {
                            let g = cv.0.lock();
                            drop(cv.1.wait(g));
                        }
                        4 => spindle::time::sleep(Duration::from_secs(3600)),
                        5 => spindle::park(),
                        6 => {
                            let r = (&*b).read(&mut [0u8; 4]);
                            assert!(spindle::is_cancelled(&r.unwrap_err()));
                        }
                        _ => {
                            // Long enough to outlast the cancel under an
                            // emulator too (at 200 ms, QEMU's slower spawns
                            // let some finish first: 7 918 cancelled).
                            spindle::blocking::run(|| {
                                std::thread::sleep(Duration::from_millis(3000))
                            });
                        }
                    }
                })
            })
            .collect();
        spindle::time::sleep(Duration::from_millis(100));
        assert!(spindle::stats().unwrap().wait_registrations > 0);
        let start = Instant::now();
        for h in &handles {
            h.cancel();
        }
        let mut cancelled = 0;
        for h in handles {
            match h.join() {
                Err(e) if e.is_cancelled() => cancelled += 1,
                Ok(()) => {} // the I/O arm returns normally with the error
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!(cancelled >= 8_000, "{cancelled}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(dropped.load(Ordering::SeqCst), 10_000, "destructors ran");
        drop(held);
        forever.cancel();
        spindle::time::sleep(Duration::from_millis(10));
        // Every registration was released (the blocking-pool jobs keep
        // running, but nobody waits for them).
        assert_eq!(spindle::stats().unwrap().wait_registrations, 0);
    });
}

#[test]
fn a_cancelled_fibers_received_message_is_not_lost() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        for _ in 0..1000 {
            let (tx, rx) = spindle::chan::bounded::<u32>(0);
            let got = Arc::new(AtomicUsize::new(0));
            let g = got.clone();
            let receiver = spindle::spawn(move || {
                if let Ok(v) = rx.recv() {
                    g.store(v as usize, Ordering::SeqCst);
                }
                spindle::time::sleep(Duration::from_secs(60)); // leaves here
            });
            spindle::yield_now();
            // Race a cancel against a send: either the send is refused (the
            // receiver left) or the message was received — never lost.
            let receiver = Arc::new(receiver);
            let r2 = receiver.clone();
            let canceller = spindle::spawn(move || r2.cancel());
            let sent = tx.send_timeout(7, Duration::from_millis(5)).is_ok();
            canceller.join().unwrap();
            let receiver = Arc::try_unwrap(receiver).unwrap();
            let _ = receiver.join();
            if sent {
                assert_eq!(
                    got.load(Ordering::SeqCst),
                    7,
                    "a sent message reached the receiver"
                );
            }
        }
    });
}

#[test]
fn cancel_before_start_is_reported() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let h = spindle::spawn(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        h.cancel(); // before it could run
        assert!(h.join().unwrap_err().is_cancelled());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn timeouts_nest_and_take_the_earlier_deadline() {
    spindle::run(|| {
        let start = Instant::now();
        let outer = spindle::time::timeout(Duration::from_millis(50), || {
            let inner = spindle::time::timeout(Duration::from_secs(60), || {
                spindle::time::sleep(Duration::from_secs(60));
            });
            unreachable!("the outer deadline ends the inner block: {inner:?}");
        });
        assert!(outer.is_err());
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(5),
            "{took:?}"
        );
        // An I/O wait past the deadline fails with TimedOut; timeout reports it.
        let (_a, b) = spindle::net::UnixStream::pair().unwrap();
        let r = spindle::time::timeout(Duration::from_millis(20), || (&b).read(&mut [0u8; 1]));
        assert!(r.is_err());
        assert_eq!(spindle::time::timeout(Duration::from_secs(1), || 5), Ok(5));
    });
}

#[test]
fn a_scope_borrows_a_local_vec_and_waits_for_every_child() {
    spindle::run(|| {
        let mut data: Vec<u64> = (1..=100).collect();
        let sum = AtomicUsize::new(0);
        spindle::scope(|s| {
            for chunk in data.chunks(10) {
                let sum = &sum;
                s.spawn(move || {
                    spindle::yield_now();
                    sum.fetch_add(chunk.iter().sum::<u64>() as usize, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(sum.load(Ordering::SeqCst), 5050);
        data.clear(); // the borrows ended with the scope
                      // A child's panic is re-raised after all children ended.
        let finished = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spindle::scope(|s| {
                s.spawn(|| panic!("child boom"));
                s.spawn(|| {
                    spindle::time::sleep(Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                });
            })
        }));
        assert!(r.is_err());
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "the other child ran to its end"
        );
        // A joined panic is the caller's, not the scope's.
        spindle::scope(|s| {
            let h = s.spawn(|| -> u8 { panic!("taken") });
            assert!(h.join().unwrap_err().is_panic());
        });
    });
}

#[test]
fn cancelling_the_parent_cancels_its_scope_children_first() {
    spindle::run(|| {
        let children_cancelled = Arc::new(AtomicUsize::new(0));
        let c = children_cancelled.clone();
        let parent = spindle::spawn(move || {
            spindle::scope(|s| {
                for _ in 0..10 {
                    let c = &c;
                    s.spawn(move || {
                        struct OnDrop<'a>(&'a AtomicUsize);
                        impl Drop for OnDrop<'_> {
                            fn drop(&mut self) {
                                self.0.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        let _d = OnDrop(c);
                        spindle::time::sleep(Duration::from_secs(3600));
                    });
                }
            });
        });
        spindle::time::sleep(Duration::from_millis(20));
        parent.cancel();
        assert!(parent.join().unwrap_err().is_cancelled());
        assert_eq!(children_cancelled.load(Ordering::SeqCst), 10);
    });
}

#[test]
fn shutdown_with_fibers_stuck_in_long_reads_returns_at_once() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut keep = Vec::new();
    for _ in 0..100 {
        let (a, b) = spindle::net::UnixStream::pair().unwrap();
        keep.push(a);
        let ends = ends.clone();
        rt.spawn(move || {
            b.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let r = (&b).read(&mut [0u8; 8]);
            ends.lock()
                .unwrap()
                .push(r.map_err(|e| spindle::is_cancelled(&e)));
        });
    }
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    let still_alive = rt.shutdown_timeout(Duration::from_secs(5));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(still_alive, 0);
    let ends = ends.lock().unwrap();
    assert_eq!(ends.len(), 100);
    assert!(
        ends.iter().all(|r| *r == Err(true)),
        "every read failed as cancelled"
    );
}
