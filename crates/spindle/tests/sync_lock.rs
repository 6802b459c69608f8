//! Locks and friends: contention, fairness, condvars, pools.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle::sync::{Barrier, Condvar, Mutex, OnceCell, Pool, RwLock, Semaphore, WaitGroup};
use spindle::Runtime;

#[test]
fn a_mutex_held_across_a_sleep_with_a_thousand_contenders_on_one_worker() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let m = Arc::new(Mutex::new(0u64));
        let handles: Vec<_> = (0..1000)
            .map(|_| {
                let m = m.clone();
                spindle::spawn(move || {
                    let mut g = m.lock();
                    if (*g).is_multiple_of(100) {
                        // Held across a wait: other fibers park on the lock,
                        // the worker keeps running (no deadlock).
                        spindle::time::sleep(Duration::from_millis(1));
                    }
                    *g += 1;
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), 1000);
    });
}

#[test]
fn contended_mutex_across_fibers_and_threads_counts_exactly() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let m = Arc::new(Mutex::new(0u64));
    let fibers: Vec<_> = (0..8)
        .map(|_| {
            let m = m.clone();
            rt.spawn(move || {
                for _ in 0..10_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for f in fibers {
        f.join().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*m.lock(), 100_000);
}

#[test]
fn no_waiter_starves_under_steady_contention() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let m = Arc::new(Mutex::new(()));
        let acquired = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hogs: Vec<_> = (0..4)
            .map(|_| {
                let (m, stop) = (m.clone(), stop.clone());
                spindle::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _g = m.lock();
                        spindle::yield_now();
                    }
                })
            })
            .collect();
        let (m2, a2) = (m.clone(), acquired.clone());
        let late = spindle::spawn(move || {
            for _ in 0..100 {
                let _g = m2.lock();
                a2.fetch_add(1, Ordering::Relaxed);
            }
        });
        let start = Instant::now();
        while !late.is_finished() && start.elapsed() < Duration::from_secs(10) {
            spindle::time::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        late.join().unwrap();
        assert_eq!(acquired.load(Ordering::Relaxed), 100);
        for h in hogs {
            h.join().unwrap();
        }
    });
}

#[test]
fn condvar_notify_one_and_notify_all() {
    spindle::run(|| {
        let state = Arc::new((Mutex::new(0u32), Condvar::new()));
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let s = state.clone();
                spindle::spawn(move || {
                    let mut g = s.0.lock();
                    while *g == 0 {
                        g = s.1.wait(g);
                    }
                    *g
                })
            })
            .collect();
        spindle::time::sleep(Duration::from_millis(10));
        *state.0.lock() = 1;
        state.1.notify_one();
        spindle::time::sleep(Duration::from_millis(10));
        let finished = waiters.iter().filter(|w| w.is_finished()).count();
        assert!(finished >= 1);
        *state.0.lock() = 2;
        state.1.notify_all();
        for w in waiters {
            assert!(w.join().unwrap() >= 1);
        }
        let g = state.0.lock();
        let (_g, r) = state.1.wait_timeout(g, Duration::from_millis(10));
        assert!(r.timed_out());
    });
}

#[test]
fn pool_deadline_versus_return_race_loses_nothing() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        let pool = Arc::new(Pool::new(vec![0u8]));
        let timeouts = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (pool, timeouts) = (pool.clone(), timeouts.clone());
                spindle::spawn(move || {
                    for _ in 0..25_000 {
                        match pool.checkout_timeout(Duration::from_micros(50)) {
                            Some(mut g) => *g = g.wrapping_add(1),
                            None => {
                                timeouts.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // 100 000 checkouts raced their deadlines; the one resource is back.
        assert_eq!(pool.idle(), 1);
        assert!(pool.checkout_timeout(Duration::from_millis(1)).is_some());
    });
}

#[test]
fn semaphore_barrier_waitgroup_rwlock_oncecell() {
    spindle::run(|| {
        let sem = Arc::new(Semaphore::new(2));
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let wg = Arc::new(WaitGroup::new());
        for _ in 0..20 {
            wg.add(1);
            let (sem, inside, max, wg) = (sem.clone(), inside.clone(), max.clone(), wg.clone());
            spindle::spawn(move || {
                let _p = sem.acquire();
                let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(n, Ordering::SeqCst);
                spindle::time::sleep(Duration::from_millis(1));
                inside.fetch_sub(1, Ordering::SeqCst);
                wg.done();
            });
        }
        wg.wait();
        assert_eq!(max.load(Ordering::SeqCst), 2);

        let barrier = Arc::new(Barrier::new(5));
        let leaders: usize = (0..5)
            .map(|_| {
                let b = barrier.clone();
                spindle::spawn(move || b.wait().is_leader() as usize)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(leaders, 1);

        let lock = Arc::new(RwLock::new(0));
        {
            let r1 = lock.read();
            let r2 = lock.read();
            assert!(lock.try_write().is_none());
            drop((r1, r2));
        }
        *lock.write() += 1;
        assert_eq!(*lock.read(), 1);

        let cell = Arc::new(OnceCell::new());
        let inits = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let (cell, inits) = (cell.clone(), inits.clone());
                spindle::spawn(move || {
                    *cell.get_or_init(|| {
                        inits.fetch_add(1, Ordering::SeqCst);
                        spindle::time::sleep(Duration::from_millis(5));
                        42
                    })
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), 42);
        }
        assert_eq!(inits.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_condvar_wait_of_an_already_cancelled_fiber_keeps_its_guard_and_releases_it() {
    // The wait ends before it registers (the fiber is cancelled): the lock
    // was never released, so the wait must hand back the guard it holds
    // rather than lock again (it would wait for itself), and the unwind
    // that follows releases it.
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let pair =
            std::sync::Arc::new((spindle::sync::Mutex::new(0), spindle::sync::Condvar::new()));
        let p = pair.clone();
        let waiter = spindle::spawn(move || {
            let (m, cv) = &*p;
            let guard = m.lock();
            spindle::current().unwrap().cancel();
            let _guard = cv.wait(guard);
            unreachable!("a cancelled wait does not return");
        });
        assert!(waiter.join().unwrap_err().is_cancelled());
        // The lock is free again.
        assert!(pair.0.try_lock().is_some());
    });
}
