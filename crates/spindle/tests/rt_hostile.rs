//! The runtime's promises under hostile but plausible programs: handles
//! carried to other threads, scope values that outlive their borrows, panics
//! at the worst moment, timers on an idle worker, a worker blocked in a
//! call. Each test is bounded: a hang is reported as a failure by
//! [`within`], never as a stuck test run.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

mod common;
use common::{rt, within};

// ---------------------------------------------------------------------------
// A `spawn_local` result never leaves its worker.

/// Records the thread it is dropped on; `!Send` like the values
/// `spawn_local` exists for.
struct DropsOn {
    dropped_on: Arc<Mutex<Option<ThreadId>>>,
    _not_send: Rc<()>,
}

impl Drop for DropsOn {
    fn drop(&mut self) {
        *self.dropped_on.lock().unwrap() = Some(std::thread::current().id());
    }
}

#[test]
fn a_local_fibers_result_is_dropped_on_its_worker_when_only_a_fiber_handle_outlives_it() {
    within(Duration::from_secs(10), || {
        let rt = rt(2);
        let (worker_thread, dropped_on) = rt.run(|| {
            let dropped_on = Arc::new(Mutex::new(None));
            let d2 = dropped_on.clone();
            let h = spindle::spawn_local(move || DropsOn {
                dropped_on: d2,
                _not_send: Rc::new(()),
            });
            while !h.is_finished() {
                spindle::yield_now();
            }
            // Keep a `Fiber` (Send + Clone) and let the JoinHandle go here.
            let fiber = h.fiber().clone();
            drop(h);
            // The last reference to the fiber now dies on another thread.
            std::thread::spawn(move || drop(fiber)).join().unwrap();
            (std::thread::current().id(), dropped_on)
        });
        let on = dropped_on.lock().unwrap().expect("the result was dropped");
        assert_eq!(
            on, worker_thread,
            "a !Send result was dropped off its worker"
        );
        rt.shutdown();
    });
}

#[test]
fn a_detached_local_fibers_result_is_dropped_on_its_worker_when_it_finishes() {
    within(Duration::from_secs(10), || {
        let rt = rt(2);
        let (worker_thread, dropped_on) = rt.run(|| {
            let dropped_on = Arc::new(Mutex::new(None));
            let d2 = dropped_on.clone();
            let h = spindle::spawn_local(move || {
                spindle::time::sleep(Duration::from_millis(20));
                DropsOn {
                    dropped_on: d2,
                    _not_send: Rc::new(()),
                }
            });
            let fiber = h.fiber().clone();
            drop(h); // detached before it finished
            let carrier = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(fiber)
            });
            spindle::time::sleep(Duration::from_millis(150));
            carrier.join().unwrap();
            (std::thread::current().id(), dropped_on)
        });
        let on = dropped_on.lock().unwrap().expect("the result was dropped");
        assert_eq!(on, worker_thread);
        rt.shutdown();
    });
}

// ---------------------------------------------------------------------------
// Scopes.

/// Borrows from the scope's parent; on drop, records whether the scope had
/// already returned (it must not have).
struct Borrowing<'a> {
    _parent_data: &'a [u8],
    scope_returned: Arc<AtomicBool>,
    dropped_late: Arc<AtomicBool>,
}

impl Drop for Borrowing<'_> {
    fn drop(&mut self) {
        // Block the worker briefly so a parent on another worker gets the
        // chance to leave the scope if it was (wrongly) told to.
        std::thread::sleep(Duration::from_millis(50));
        if self.scope_returned.load(Ordering::SeqCst) {
            self.dropped_late.store(true, Ordering::SeqCst);
        }
    }
}

#[test]
fn a_scope_childs_borrowing_value_is_dropped_before_the_scope_returns() {
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let late = rt.run(|| {
            let dropped_late = Arc::new(AtomicBool::new(false));
            for _ in 0..5 {
                let scope_returned = Arc::new(AtomicBool::new(false));
                let data = vec![1u8, 2, 3];
                spindle::scope(|s| {
                    let (sr, dl) = (scope_returned.clone(), dropped_late.clone());
                    let data = &data;
                    let h = s.spawn(move || Borrowing {
                        _parent_data: data,
                        scope_returned: sr,
                        dropped_late: dl,
                    });
                    drop(h); // nobody takes the value: the child drops it
                });
                scope_returned.store(true, Ordering::SeqCst);
                // Give a late drop time to be seen.
                spindle::time::sleep(Duration::from_millis(60));
            }
            dropped_late.load(Ordering::SeqCst)
        });
        assert!(
            !late,
            "a child's value was dropped after its scope returned"
        );
        rt.shutdown();
    });
}

#[test]
fn a_scope_child_cancelled_before_it_runs_still_lets_the_scope_return() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        let ran = rt.run(|| {
            let ran = AtomicBool::new(false);
            spindle::scope(|s| {
                let h = s.spawn(|| ran.store(true, Ordering::SeqCst));
                // One worker: the child has not started yet.
                h.fiber().cancel();
                assert!(h.join().unwrap_err().is_cancelled());
            });
            ran.load(Ordering::SeqCst)
        });
        assert!(!ran, "a child cancelled before it started must not run");
        assert_eq!(rt.shutdown_timeout(Duration::from_secs(2)), 0);
    });
}

#[test]
fn shutdown_while_a_scope_child_is_cancelled_before_it_runs_returns() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.spawn(|| {
            spindle::scope(|s| {
                let h = s.spawn(|| spindle::time::sleep(Duration::from_secs(60)));
                h.fiber().cancel();
                spindle::time::sleep(Duration::from_secs(60));
            });
        });
        std::thread::sleep(Duration::from_millis(50));
        rt.shutdown_timeout(Duration::from_millis(200));
    });
}

#[test]
fn a_forced_stop_of_a_scope_parent_waits_for_children_on_other_workers() {
    // The child ignores cancellation (it never waits) and keeps writing into
    // the parent's stack for a while; the runtime stop's forced unwind of
    // the parent must not free that stack before the child is done.
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let events = Arc::new(Mutex::new(Vec::<&'static str>::new()));
        let started = Arc::new(AtomicBool::new(false));
        let (ev, st) = (events.clone(), started.clone());
        rt.spawn(move || {
            struct Frame(Arc<Mutex<Vec<&'static str>>>);
            impl Drop for Frame {
                fn drop(&mut self) {
                    self.0.lock().unwrap().push("parent frame freed");
                }
            }
            let _frame = Frame(ev.clone());
            let mut counters = [0u64; 64];
            spindle::scope(|s| {
                let counters = &mut counters;
                let ev = ev.clone();
                let st = st.clone();
                s.spawn(move || {
                    st.store(true, Ordering::SeqCst);
                    let until = Instant::now() + Duration::from_millis(600);
                    while Instant::now() < until {
                        for c in counters.iter_mut() {
                            *c += 1;
                        }
                        std::hint::spin_loop();
                    }
                    ev.lock().unwrap().push("child done");
                });
                // Keep the child's worker busy elsewhere: block ours so the
                // child is stolen by the other worker.
                std::thread::sleep(Duration::from_millis(50));
            });
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // A short grace: the child cannot be cancelled, so phase two
        // unwinds the parent while the child still runs.
        rt.shutdown_timeout(Duration::from_millis(50));
        let events = events.lock().unwrap().clone();
        assert_eq!(
            events,
            vec!["child done", "parent frame freed"],
            "{events:?}"
        );
    });
}

// ---------------------------------------------------------------------------
// Panics where a worker would die.

#[test]
fn a_fiber_that_turns_the_forced_unwind_into_a_new_panic_does_not_kill_its_worker() {
    // The parent waits in a scope for a child that never waits (so it cannot
    // be cancelled); the stop's forced unwind of the parent is caught by the
    // parent's own code, which logs and panics anew.
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let started = Arc::new(AtomicBool::new(false));
        let st = started.clone();
        let h = rt.spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                spindle::scope(|s| {
                    s.spawn(|| {
                        st.store(true, Ordering::SeqCst);
                        let until = Instant::now() + Duration::from_millis(400);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                    });
                    std::thread::sleep(Duration::from_millis(50));
                })
            }));
            drop(r);
            panic!("log and re-panic");
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        rt.shutdown_timeout(Duration::from_millis(50));
        assert!(h.join().is_err());
    });
}

struct PanicsOnDrop(&'static str);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("{}", self.0);
        }
    }
}

#[test]
fn a_result_whose_drop_panics_does_not_kill_its_worker() {
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        rt.run(|| {
            let h = spindle::spawn(|| PanicsOnDrop("result drop"));
            drop(h); // detached: the result is dropped when it finishes
            spindle::time::sleep(Duration::from_millis(20));
        });
        // The worker is still there.
        assert_eq!(rt.run(|| 7), 7);
        rt.shutdown();
    });
}

#[test]
fn a_capture_whose_drop_panics_in_an_unstarted_fiber_does_not_kill_its_worker() {
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        rt.run(|| {
            let p = PanicsOnDrop("capture drop");
            let h = spindle::spawn(move || drop(p));
            h.cancel(); // never runs: its capture is dropped unrun
            assert!(h.join().unwrap_err().is_cancelled());
        });
        assert_eq!(rt.run(|| 7), 7);
        // Still queued when the stop's second phase comes: the worker is
        // blocked in a call past the grace.
        let blocking = Arc::new(AtomicBool::new(false));
        let b2 = blocking.clone();
        rt.spawn(move || {
            b2.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
        });
        while !blocking.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let p = PanicsOnDrop("unstarted capture drop at shutdown");
        let h = rt.spawn(move || drop(p));
        rt.shutdown_timeout(Duration::from_millis(50));
        assert!(h.join().unwrap_err().is_cancelled());
    });
}

// ---------------------------------------------------------------------------
// Wakers that panic when the runtime's own loops wake them.

/// A waker whose `wake` panics, counting the calls.
struct PanicsOnWake(AtomicUsize);

impl std::task::Wake for PanicsOnWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("a waker that panics");
    }
}

/// Polls `fut` once with a waker that panics when woken; returns the
/// future (still pending) and the waker's call count.
fn poll_with_panicking_waker<F: std::future::Future + Unpin>(mut fut: F) -> (F, Arc<PanicsOnWake>) {
    let count = Arc::new(PanicsOnWake(AtomicUsize::new(0)));
    let waker = std::task::Waker::from(count.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut fut).poll(&mut cx).is_pending());
    (fut, count)
}

/// The runtime's worker is still there and its timers still fire; then
/// it stops.
fn still_serves(rt: spindle::Runtime) {
    let answer = rt.run(|| {
        spindle::time::sleep(Duration::from_millis(5));
        7
    });
    assert_eq!(answer, 7);
    rt.shutdown();
}

#[test]
fn a_waker_that_panics_when_its_timer_fires_does_not_kill_its_worker() {
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        let woken = rt.run(|| {
            // Polled inside spindle's `block_on`, a sleep future's timer
            // goes on this worker's own heap.
            let (pending, count) = spindle::block_on(std::future::poll_fn(|_| {
                std::task::Poll::Ready(poll_with_panicking_waker(spindle::time::sleep_future(
                    Duration::from_millis(10),
                )))
            }));
            // The worker's loop fires the timer and wakes the waker while
            // this fiber sleeps past it.
            spindle::time::sleep(Duration::from_millis(50));
            drop(pending);
            count.0.load(Ordering::SeqCst)
        });
        assert_eq!(woken, 1);
        still_serves(rt);
    });
}

#[test]
fn a_waker_that_panics_when_its_fd_is_ready_does_not_kill_its_worker() {
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        let woken = rt.run(|| {
            let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
            rx.set_nonblocking(true).unwrap();
            let (pending, count) = poll_with_panicking_waker(spindle::io::readable(rx.as_raw_fd()));
            tx.write_all(b"x").unwrap();
            // The netpoller delivers the readiness (on this worker, or on
            // whoever holds its lease) while this fiber sleeps.
            let deadline = Instant::now() + Duration::from_secs(5);
            while count.0.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                spindle::time::sleep(Duration::from_millis(5));
            }
            drop(pending);
            count.0.load(Ordering::SeqCst)
        });
        assert_eq!(woken, 1);
        still_serves(rt);
    });
}

#[test]
fn a_waker_that_panics_off_the_runtime_does_not_stop_the_background_timers() {
    within(Duration::from_secs(20), || {
        // Off every runtime, sleep futures are fired by the process's
        // background poller thread.
        let (pending, count) =
            poll_with_panicking_waker(spindle::time::sleep_future(Duration::from_millis(10)));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        drop(pending);
        // That thread still fires the next one.
        let start = Instant::now();
        foreign_block_on(spindle::time::sleep_future(Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
    });
}

// ---------------------------------------------------------------------------
// Timers and futures on an idle worker.

#[test]
fn block_on_a_sleep_future_completes_on_an_idle_worker() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        let waited = rt.run(|| {
            let start = Instant::now();
            spindle::block_on(spindle::time::sleep_future(Duration::from_millis(50)));
            start.elapsed()
        });
        assert!(waited >= Duration::from_millis(50));
        rt.shutdown();
    });
}

/// A minimal executor unknown to spindle: polls on the calling thread and
/// parks it between polls.
fn foreign_block_on<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn a_sleep_future_polled_by_a_foreign_executor_on_a_fiber_completes() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            foreign_block_on(spindle::time::sleep_future(Duration::from_millis(30)));
        });
        rt.shutdown();
    });
}

#[test]
fn park_inside_a_block_on_poll_is_woken_by_unpark() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            let me = spindle::current().unwrap();
            let unparker = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                me.unpark();
            });
            spindle::block_on(std::future::poll_fn(|_| {
                // A future that waits the blocking way (a host function).
                spindle::park();
                std::task::Poll::Ready(())
            }));
            unparker.join().unwrap();
        });
        rt.shutdown();
    });
}

#[test]
fn an_impossible_stack_size_is_an_error_not_a_crash() {
    let err = spindle::Runtime::builder()
        .workers(1)
        .stack_size(usize::MAX)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("stack"), "{err}");
    let rt = rt(1);
    rt.run(|| {
        for size in [usize::MAX, usize::MAX / 2, 1 << 62] {
            let err = spindle::Builder::new()
                .stack_size(size)
                .spawn(|| ())
                .unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        }
        // An ordinary size still works.
        spindle::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| ())
            .unwrap()
            .join()
            .unwrap();
    });
    rt.shutdown();
}

// ---------------------------------------------------------------------------
// `time::timeout` cuts every wait short.

#[test]
fn timeout_cuts_a_join_short() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            let sleeper = spindle::spawn(|| spindle::time::sleep(Duration::from_secs(30)));
            let fiber = sleeper.fiber().clone();
            let r = spindle::time::timeout(Duration::from_millis(30), move || sleeper.join());
            assert!(r.is_err(), "the join was not cut short");
            fiber.cancel();
        });
        rt.shutdown();
    });
}

#[test]
fn timeout_cuts_a_block_on_short() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            let r = spindle::time::timeout(Duration::from_millis(30), || {
                spindle::block_on(std::future::pending::<()>())
            });
            assert!(r.is_err(), "block_on was not cut short");
        });
        rt.shutdown();
    });
}

#[test]
fn timeout_cuts_a_scope_wait_short_after_cancelling_the_children() {
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        rt.run(|| {
            let ended = AtomicUsize::new(0);
            let r = spindle::time::timeout(Duration::from_millis(30), || {
                spindle::scope(|s| {
                    for _ in 0..3 {
                        s.spawn(|| {
                            struct Count<'a>(&'a AtomicUsize);
                            impl Drop for Count<'_> {
                                fn drop(&mut self) {
                                    self.0.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            let _c = Count(&ended);
                            spindle::time::sleep(Duration::from_secs(30));
                        });
                    }
                })
            });
            assert!(r.is_err(), "the scope wait was not cut short");
            assert_eq!(ended.load(Ordering::SeqCst), 3, "every child ended first");
        });
        rt.shutdown();
    });
}

#[test]
fn timeout_cuts_a_join_short_on_a_plain_threads_runtime_block_on() {
    // Runtime::block_on from a plain thread under no timeout still works.
    within(Duration::from_secs(10), || {
        let rt = rt(1);
        assert_eq!(rt.run(|| 5), 5);
        rt.shutdown();
    });
}

// ---------------------------------------------------------------------------
// A worker blocked in a call does not strand unstarted work.

#[test]
fn unstarted_fibers_queued_on_a_blocked_worker_are_run_by_the_others() {
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let (blocked_until, finished) = rt.run(|| {
            let finished: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
            let handles: Vec<_> = (0..50)
                .map(|_| {
                    let f = finished.clone();
                    spindle::spawn(move || {
                        spindle::yield_now();
                        f.lock().unwrap().push(Instant::now());
                    })
                })
                .collect();
            // Block this worker in a call, with the 50 queued behind us.
            std::thread::sleep(Duration::from_millis(1500));
            let blocked_until = Instant::now();
            for h in handles {
                h.join().unwrap();
            }
            let finished = finished.lock().unwrap().clone();
            (blocked_until, finished)
        });
        let stranded = finished.iter().filter(|&&t| t >= blocked_until).count();
        assert_eq!(
            stranded, 0,
            "{stranded} of 50 waited for the blocked worker"
        );
        rt.shutdown();
    });
}

#[test]
fn new_spawns_from_outside_avoid_a_blocked_worker() {
    within(Duration::from_secs(20), || {
        let rt = rt(2);
        let blocked = Arc::new(AtomicBool::new(false));
        let b2 = blocked.clone();
        let blocker = rt.spawn(move || {
            b2.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1500));
        });
        while !blocked.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let hs: Vec<_> = (0..20).map(|i| rt.spawn(move || i)).collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_millis(1000),
            "spawns waited for the blocked worker: {:?}",
            start.elapsed()
        );
        blocker.join().unwrap();
        rt.shutdown();
    });
}

// ---------------------------------------------------------------------------
// Timers enter the service order by deadline.

#[test]
fn a_sleep_among_yielding_fibers_fires_close_to_its_deadline() {
    within(Duration::from_secs(20), || {
        let rt = rt(1);
        let late = rt.run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let busy: Vec<_> = (0..100)
                .map(|_| {
                    let stop = stop.clone();
                    spindle::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            let t = Instant::now();
                            while t.elapsed() < Duration::from_micros(1000) {
                                std::hint::spin_loop();
                            }
                            spindle::yield_now();
                        }
                    })
                })
                .collect();
            spindle::yield_now();
            let mut worst = Duration::ZERO;
            for _ in 0..5 {
                let start = Instant::now();
                spindle::time::sleep(Duration::from_millis(10));
                worst = worst.max(start.elapsed() - Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
            for b in busy {
                b.join().unwrap();
            }
            worst
        });
        // A pass over the 100 yielders takes 100 ms; a timer that enters the
        // order by its deadline waits for at most the fiber running then.
        assert!(late < Duration::from_millis(40), "fired {late:?} late");
        rt.shutdown();
    });
}

// ---------------------------------------------------------------------------
// Send/Sync of handles.

#[test]
fn handles_that_may_cross_threads_say_so() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<spindle::Fiber>();
    send_sync::<spindle::JoinHandle<u32>>();
    send_sync::<spindle::Runtime>();
    fn send<T: Send>() {}
    send::<spindle::JoinError>();
    send_sync::<spindle::sync::Mutex<u32>>();
    send_sync::<spindle::chan::Sender<u32>>();
    // A local fiber's handle stays where its value is.
    let _: fn() = || {
        let _ = Cell::new(0);
    };
}
