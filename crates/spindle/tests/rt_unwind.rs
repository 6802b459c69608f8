//! Waits inside destructors while a fiber unwinds (cancellation or runtime
//! stop): the destructor's wait completes, it is not turned into a second
//! panic (which would abort the process). In a file of its own: a
//! regression here aborts this test binary only.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{rt, within};

/// Runs `wait` in a destructor of a fiber that is cancelled while it
/// sleeps; returns whether the destructor's wait finished.
fn cancel_with_waiting_destructor(
    wait: impl FnOnce() + Send + 'static,
    after_cancel: impl FnOnce() + Send + 'static,
) -> bool {
    let rt = rt(1);
    let done = rt.run(move || {
        let done = Arc::new(AtomicBool::new(false));
        struct OnDrop<F: FnOnce()>(Option<F>);
        impl<F: FnOnce()> Drop for OnDrop<F> {
            fn drop(&mut self) {
                (self.0.take().unwrap())();
            }
        }
        let d = done.clone();
        let victim = spindle::spawn(move || {
            let _g = OnDrop(Some(move || {
                wait();
                d.store(true, Ordering::SeqCst);
            }));
            spindle::time::sleep(Duration::from_secs(60));
        });
        spindle::time::sleep(Duration::from_millis(10));
        victim.cancel();
        spindle::time::sleep(Duration::from_millis(10));
        after_cancel();
        assert!(victim.join().unwrap_err().is_cancelled());
        done.load(Ordering::SeqCst)
    });
    rt.shutdown();
    done
}

#[test]
fn a_destructor_waits_for_a_lock_held_across_the_cancel() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        let n = rt.run(|| {
            let lock = Arc::new(spindle::sync::Mutex::new(0u32));
            let guard_holder = {
                let lock = lock.clone();
                spindle::spawn(move || {
                    let mut g = lock.lock();
                    spindle::time::sleep(Duration::from_millis(50));
                    *g += 1;
                })
            };
            spindle::yield_now(); // the holder takes the lock
            let l = lock.clone();
            let victim = spindle::spawn(move || {
                struct Bump(Arc<spindle::sync::Mutex<u32>>);
                impl Drop for Bump {
                    fn drop(&mut self) {
                        *self.0.lock() += 10; // contended: parks while unwinding
                    }
                }
                let _b = Bump(l);
                spindle::time::sleep(Duration::from_secs(60));
            });
            spindle::time::sleep(Duration::from_millis(5));
            victim.cancel();
            assert!(victim.join().unwrap_err().is_cancelled());
            guard_holder.join().unwrap();
            let v = *lock.lock();
            v
        });
        assert_eq!(n, 11);
        rt.shutdown();
    });
}

#[test]
fn a_destructor_may_join_a_fiber_while_its_fiber_is_cancelled() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        let joined = rt.run(|| {
            let joined = Arc::new(AtomicUsize::new(0));
            let j = joined.clone();
            let victim = spindle::spawn(move || {
                struct JoinOnDrop(Option<spindle::JoinHandle<usize>>, Arc<AtomicUsize>);
                impl Drop for JoinOnDrop {
                    fn drop(&mut self) {
                        let v = self.0.take().unwrap().join().unwrap();
                        self.1.store(v, Ordering::SeqCst);
                    }
                }
                let worker = spindle::spawn(|| {
                    spindle::time::sleep(Duration::from_millis(40));
                    42
                });
                let _j = JoinOnDrop(Some(worker), j);
                spindle::time::sleep(Duration::from_secs(60));
            });
            spindle::time::sleep(Duration::from_millis(5));
            victim.cancel();
            assert!(victim.join().unwrap_err().is_cancelled());
            joined.load(Ordering::SeqCst)
        });
        assert_eq!(joined, 42);
        rt.shutdown();
    });
}

#[test]
fn a_destructor_may_sleep_while_its_fiber_is_cancelled() {
    within(Duration::from_secs(10), || {
        let start = Instant::now();
        let done = cancel_with_waiting_destructor(
            || spindle::time::sleep(Duration::from_millis(30)),
            || {},
        );
        assert!(done);
        assert!(start.elapsed() >= Duration::from_millis(30));
    });
}

#[test]
fn a_destructor_may_send_on_a_full_channel_while_its_fiber_is_cancelled() {
    within(Duration::from_secs(10), || {
        let (tx, rx) = spindle::chan::bounded::<u32>(1);
        tx.send(1).unwrap(); // full
        let rx2 = rx.clone();
        let done = cancel_with_waiting_destructor(
            move || tx.send(2).unwrap(),
            move || assert_eq!(rx2.recv().unwrap(), 1),
        );
        assert!(done);
        assert_eq!(rx.recv().unwrap(), 2);
    });
}

#[test]
fn a_second_cancel_during_the_destructors_wait_does_not_abort() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            let victim = spindle::spawn(|| {
                struct SlowDrop;
                impl Drop for SlowDrop {
                    fn drop(&mut self) {
                        spindle::time::sleep(Duration::from_millis(50));
                    }
                }
                let _s = SlowDrop;
                spindle::time::sleep(Duration::from_secs(60));
            });
            spindle::time::sleep(Duration::from_millis(5));
            victim.cancel();
            spindle::time::sleep(Duration::from_millis(5));
            victim.cancel(); // lands on the destructor's sleep
            let r = spindle::time::timeout(Duration::from_millis(5), || ());
            assert!(r.is_ok());
            assert!(victim.join().unwrap_err().is_cancelled());
        });
        rt.shutdown();
    });
}

#[test]
fn shutdown_with_a_destructor_waiting_forever_returns() {
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        let (_tx, rx) = spindle::chan::bounded::<u32>(1);
        rt.spawn(move || {
            struct Stuck(spindle::chan::Receiver<u32>);
            impl Drop for Stuck {
                fn drop(&mut self) {
                    let _ = self.0.recv(); // nobody ever sends
                }
            }
            let _s = Stuck(rx);
            spindle::time::sleep(Duration::from_secs(60));
        });
        std::thread::sleep(Duration::from_millis(50));
        // Phase one cancels the sleep; the destructor waits; phase two must
        // neither abort nor hang.
        let alive = rt.shutdown_timeout(Duration::from_millis(100));
        assert_eq!(alive, 1);
    });
}

#[test]
fn waits_in_destructors_during_the_forced_stop_do_not_abort() {
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let started = Arc::new(AtomicBool::new(false));
        let st = started.clone();
        rt.spawn(move || {
            struct SleepOnDrop;
            impl Drop for SleepOnDrop {
                fn drop(&mut self) {
                    spindle::time::sleep(Duration::from_millis(20));
                    let m = spindle::sync::Mutex::new(1);
                    drop(m.lock());
                }
            }
            let _d = SleepOnDrop;
            // Reaches the forced stop: waits for a busy child.
            spindle::scope(|s| {
                s.spawn(|| {
                    st.store(true, Ordering::SeqCst);
                    let until = Instant::now() + Duration::from_millis(300);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                });
                std::thread::sleep(Duration::from_millis(30));
            });
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        rt.shutdown_timeout(Duration::from_millis(50));
    });
}
