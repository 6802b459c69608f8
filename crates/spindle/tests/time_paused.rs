//! Paused time (`RuntimeBuilder::start_paused`, `time::advance`): every
//! deadline of the runtime follows a virtual clock that moves only when
//! told, or jumps to the next timer when every worker is idle. Each test
//! covers hours or minutes of virtual time and must take well under a
//! second of real time; `within` bounds it.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::within;
use spindle::time::{advance, now, sleep, timeout};

fn paused(workers: usize) -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(workers)
        .stall_warning(None)
        .start_paused(true)
        .build()
        .unwrap()
}

const SEC: Duration = Duration::from_secs(1);

#[test]
fn thousands_of_long_sleeps_wake_at_their_exact_virtual_deadlines_in_order() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        let real = Instant::now();
        rt.run(|| {
            let start = now();
            let log = Arc::new(Mutex::new(Vec::new()));
            // Deadlines from 1 s to 5 000 s, armed out of order.
            let fibers: Vec<_> = (0..5_000u64)
                .map(|i| (i * 7_919) % 5_000 + 1)
                .map(|secs| {
                    let log = log.clone();
                    spindle::spawn(move || {
                        sleep(Duration::from_secs(secs));
                        let woke = now() - start;
                        log.lock().unwrap().push(secs);
                        assert_eq!(woke, Duration::from_secs(secs), "woke early or late");
                    })
                })
                .collect();
            for f in fibers {
                f.join().unwrap();
            }
            let log = log.lock().unwrap();
            assert!(
                log.windows(2).all(|w| w[0] <= w[1]),
                "woken out of deadline order"
            );
            assert_eq!(now() - start, Duration::from_secs(5_000));
        });
        assert!(
            real.elapsed() < Duration::from_secs(10),
            "{:?} of real time",
            real.elapsed()
        );
    });
}

#[test]
fn timers_on_two_workers_fire_in_one_global_order() {
    within(Duration::from_secs(20), || {
        let rt = paused(2);
        rt.run(|| {
            let start = now();
            let order = Arc::new(AtomicU64::new(0));
            let fibers: Vec<_> = (1..=400u64)
                .rev()
                .map(|ms| {
                    let order = order.clone();
                    spindle::spawn(move || {
                        sleep(Duration::from_millis(ms * 10));
                        // The clock never passes a timer that has not fired:
                        // each fiber sees exactly its own deadline.
                        assert_eq!(now() - start, Duration::from_millis(ms * 10));
                        order.fetch_max(ms, Ordering::SeqCst);
                    })
                })
                .collect();
            for f in fibers {
                f.join().unwrap();
            }
            assert_eq!(order.load(Ordering::SeqCst), 400);
        });
    });
}

#[test]
fn a_lone_timer_on_an_idle_worker_fires_when_the_clock_reaches_it() {
    within(Duration::from_secs(20), || {
        let rt = paused(2);
        rt.run(|| {
            let start = now();
            // A fiber pinned to whichever worker picks it up; the spawner
            // then waits on a channel, so both workers go idle.
            let (tx, rx) = spindle::chan::bounded(1);
            spindle::spawn(move || {
                sleep(Duration::from_secs(3_600));
                tx.send(now()).unwrap();
            });
            let at = rx.recv().unwrap();
            assert_eq!(at - start, Duration::from_secs(3_600));
        });
    });
}

#[test]
fn advance_moves_the_clock_and_runs_what_fell_due() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let start = now();
            let woke = Arc::new(AtomicBool::new(false));
            let w = woke.clone();
            let sleeper = spindle::spawn(move || {
                sleep(30 * SEC);
                w.store(true, Ordering::SeqCst);
            });
            spindle::yield_now();
            advance(29 * SEC);
            assert!(!woke.load(Ordering::SeqCst), "woke a second early");
            assert_eq!(now() - start, 29 * SEC);
            advance(SEC);
            assert!(
                woke.load(Ordering::SeqCst),
                "advance returned before the sleeper ran"
            );
            sleeper.join().unwrap();
            // Zero is a no-op, not an error.
            advance(Duration::ZERO);
            assert_eq!(now() - start, 30 * SEC);
        });
    });
}

#[test]
fn advance_on_one_worker_wakes_a_sleeper_on_the_other() {
    within(Duration::from_secs(20), || {
        let rt = paused(2);
        rt.run(|| {
            let start = now();
            let sleeper = spindle::Builder::new()
                .spawn_on_worker(0, move || {
                    // An absolute deadline: the same whether this fiber
                    // arms it before or after the first advance.
                    spindle::time::sleep_until(start + 600 * SEC);
                    now() - start
                })
                .unwrap();
            let advancer = spindle::Builder::new()
                .spawn_on_worker(1, || {
                    // A busy fiber holds the clock still (no auto-advance
                    // while a worker has work): only `advance` moves it.
                    for _ in 0..3 {
                        advance(200 * SEC);
                    }
                })
                .unwrap();
            advancer.join().unwrap();
            assert_eq!(sleeper.join().unwrap(), 600 * SEC);
        });
    });
}

#[test]
fn advance_refuses_a_clock_that_is_not_paused_and_a_thread_off_the_runtime() {
    within(Duration::from_secs(20), || {
        let rt = common::rt(1);
        let r = rt.run(|| std::panic::catch_unwind(|| advance(SEC)));
        let payload = r.unwrap_err();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap();
        assert!(msg.contains("not paused"), "{msg}");
        let r = std::panic::catch_unwind(|| advance(SEC));
        assert!(r.is_err(), "advance off the runtime must panic");
        // And the real clock keeps real time.
        let t = rt.run(now);
        assert!(t <= Instant::now());
    });
}

#[test]
fn timeout_elapses_at_its_virtual_deadline_and_nested_ones_take_the_earlier() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let start = now();
            let r = timeout(10 * SEC, || sleep(3_600 * SEC));
            assert!(r.is_err());
            assert_eq!(now() - start, 10 * SEC);
            let start = now();
            let r = timeout(60 * SEC, || timeout(5 * SEC, || sleep(30 * SEC)));
            assert!(
                matches!(r, Ok(Err(_))),
                "the inner timeout is the one that elapsed"
            );
            assert_eq!(now() - start, 5 * SEC);
            // A sleep with no representable deadline arms no timer: only
            // the timeout around it ends it, at its own deadline.
            let start = now();
            let r = timeout(2 * SEC, || sleep(Duration::MAX));
            assert!(r.is_err());
            assert_eq!(now() - start, 2 * SEC);
        });
    });
}

#[test]
fn park_timeout_channels_condvars_and_semaphores_wait_on_the_virtual_clock() {
    within(Duration::from_secs(20), || {
        let rt = paused(2);
        rt.run(|| {
            let start = now();
            spindle::park_timeout(90 * SEC);
            assert_eq!(now() - start, 90 * SEC);

            let (tx, rx) = spindle::chan::bounded::<u32>(1);
            let start = now();
            assert!(rx.recv_timeout(600 * SEC).is_err());
            assert_eq!(now() - start, 600 * SEC);
            // A message sent after 30 virtual seconds beats a 60 s timeout.
            let start = now();
            let sender = spindle::spawn(move || {
                sleep(30 * SEC);
                tx.send(7).unwrap();
            });
            assert_eq!(rx.recv_timeout(60 * SEC), Ok(7));
            assert_eq!(now() - start, 30 * SEC);
            sender.join().unwrap();

            let pair = Arc::new((
                spindle::sync::Mutex::new(false),
                spindle::sync::Condvar::new(),
            ));
            let start = now();
            let guard = pair.0.lock();
            let (_guard, result) = pair.1.wait_timeout(guard, 45 * SEC);
            assert!(result.timed_out());
            assert_eq!(now() - start, 45 * SEC);

            let sem = spindle::sync::Semaphore::new(0);
            let start = now();
            assert!(sem.acquire_timeout(120 * SEC).is_none());
            assert_eq!(now() - start, 120 * SEC);
        });
    });
}

#[test]
fn a_socket_deadline_is_virtual_and_real_io_still_works() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = spindle::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 5];
                s.read_exact(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
                // Then say nothing more: the client's read deadline ends it.
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest);
            });
            let mut c = spindle::net::TcpStream::connect(addr).unwrap();
            c.write_all(b"hello").unwrap();
            let mut echo = [0u8; 5];
            c.read_exact(&mut echo).unwrap();
            assert_eq!(&echo, b"hello", "real I/O on a paused clock");
            c.set_read_timeout(Some(300 * SEC)).unwrap();
            let start = now();
            let real = Instant::now();
            let e = c.read(&mut echo).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ),
                "{e}"
            );
            assert_eq!(now() - start, 300 * SEC);
            assert!(real.elapsed() < Duration::from_secs(5));
            drop(c);
            server.join().unwrap();
        });
    });
}

#[test]
fn the_clock_holds_while_a_blocking_job_runs() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let job_done = Arc::new(AtomicBool::new(false));
            let d = job_done.clone();
            let sleeper = {
                let d = job_done.clone();
                spindle::spawn(move || {
                    sleep(SEC);
                    // The job takes 200 ms of real time; a clock that jumped
                    // while it ran would wake us first.
                    assert!(
                        d.load(Ordering::SeqCst),
                        "the clock jumped over a blocking job"
                    );
                })
            };
            spindle::yield_now();
            spindle::blocking::run(move || {
                std::thread::sleep(Duration::from_millis(200));
                d.store(true, Ordering::SeqCst);
            });
            sleeper.join().unwrap();
            assert!(job_done.load(Ordering::SeqCst));
        });
    });
}

#[test]
fn a_fiber_asleep_for_a_year_is_cancelled_promptly_and_shutdown_does_not_wait() {
    within(Duration::from_secs(20), || {
        let rt = paused(2);
        rt.run(|| {
            let f = spindle::spawn(|| sleep(365 * 86_400 * SEC));
            spindle::yield_now();
            f.cancel();
            let e = f.join().unwrap_err();
            assert!(e.is_cancelled());
            // Left asleep at shutdown: the runtime's drop unwinds them.
            for _ in 0..100 {
                spindle::spawn(|| sleep(86_400 * SEC));
            }
        });
        drop(rt);
    });
}

/// A fiber keeps one timer entry and re-arms it lazily: a wait that ends
/// early leaves the entry for the next. Whatever the order of deadlines,
/// each wait must still time out at its own, and a left-over entry must
/// not move the clock.
#[test]
fn each_timed_wait_ends_at_its_own_deadline_whatever_the_previous_one_left_armed() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let (tx, rx) = spindle::chan::bounded::<u32>(1);
            let t0 = now();
            // A 10 s wait answered at 1 s leaves an entry due at 10 s.
            let tx2 = tx.clone();
            let sender = spindle::spawn(move || {
                sleep(SEC);
                tx2.send(1).unwrap();
            });
            assert_eq!(rx.recv_timeout(10 * SEC), Ok(1));
            sender.join().unwrap();
            assert_eq!(now() - t0, SEC);
            // A later deadline: not cut short at 10 s, ended at 31 s.
            assert!(rx.recv_timeout(30 * SEC).is_err());
            assert_eq!(now() - t0, 31 * SEC);
            // A 100 s wait answered at once leaves an entry due at 132 s;
            // an earlier deadline after it ends at its own time.
            let tx2 = tx.clone();
            let sender = spindle::spawn(move || {
                sleep(SEC);
                tx2.send(2).unwrap();
            });
            assert_eq!(rx.recv_timeout(100 * SEC), Ok(2));
            sender.join().unwrap();
            assert_eq!(now() - t0, 32 * SEC);
            assert!(rx.recv_timeout(5 * SEC).is_err());
            assert_eq!(now() - t0, 37 * SEC);
            // The same for `park_timeout` and a socket's read deadline.
            spindle::park_timeout(3 * SEC);
            assert_eq!(now() - t0, 40 * SEC);
            let (a, _b) = spindle::net::UnixStream::pair().unwrap();
            a.set_read_timeout(Some(2 * SEC)).unwrap();
            assert!((&a).read(&mut [0u8; 1]).is_err());
            assert_eq!(now() - t0, 42 * SEC);
            // Only the stale entry at 132 s is armed now, and it ends
            // nothing: waiting on a plain thread's message must not jump
            // the clock to it.
            let from_thread = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                tx.send(3).unwrap();
            });
            assert_eq!(rx.recv(), Ok(3));
            from_thread.join().unwrap();
            assert_eq!(now() - t0, 42 * SEC, "a stale timer moved the clock");
        });
    });
}

/// Many fibers on one worker whose waits mostly end early (a server's
/// read deadlines): each that does time out does so at its own deadline.
#[test]
fn fibers_that_mostly_answer_in_time_each_time_out_at_their_own_deadline() {
    within(Duration::from_secs(20), || {
        let rt = paused(1);
        rt.run(|| {
            let t0 = now();
            let fibers: Vec<_> = (0..200u32)
                .map(|i| {
                    spindle::spawn(move || {
                        let (tx, rx) = spindle::chan::bounded::<u32>(1);
                        // Rounds answered in time, with deadlines that grow
                        // and shrink, then one that is not answered.
                        for round in 0..20u32 {
                            let tx = tx.clone();
                            let answer = spindle::spawn(move || {
                                sleep(SEC);
                                tx.send(round).unwrap();
                            });
                            let patience = SEC * (2 + (i + round * 7) % 50);
                            assert_eq!(rx.recv_timeout(patience), Ok(round));
                            answer.join().unwrap();
                        }
                        assert_eq!(now() - t0, 20 * SEC);
                        let patience = SEC * (1 + i % 13);
                        assert!(rx.recv_timeout(patience).is_err());
                        assert_eq!(now() - t0, 20 * SEC + patience, "fiber {i}");
                    })
                })
                .collect();
            for f in fibers {
                f.join().unwrap();
            }
        });
    });
}

#[test]
fn reached_is_exact_at_the_boundary_of_a_paused_clock() {
    within(Duration::from_secs(20), || {
        paused(1).run(|| {
            let deadline = now() + SEC;
            assert!(!spindle::time::reached(deadline));
            advance(SEC - Duration::from_nanos(1));
            assert!(!spindle::time::reached(deadline), "one nanosecond early");
            advance(Duration::from_nanos(1));
            assert!(spindle::time::reached(deadline), "at the deadline");
            assert!(spindle::time::reached(now() - SEC), "in the past");
        });
    });
}
