//! Timers: sleeping fibers, deadline order, many armed timers, off-runtime.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::within;
use spindle::Runtime;

#[test]
fn hundred_thousand_sleeping_fibers_wake_in_deadline_order() {
    if !common::runs_natively() {
        // QEMU user mode ignores MADV_GUARD_INSTALL, so stacks are guarded
        // with mprotect there, which it emulates slowly, one call per stack.
        eprintln!("skipped under an emulator: 100 000 stacks guarded with mprotect");
        return;
    }
    const N: u64 = 100_000;
    let rt = Runtime::builder().workers(1).build().unwrap();
    // The order is only meaningful if every fiber armed its timer before
    // the first deadline: on a slow machine (a debug build beside other
    // jobs) the margin grows and the run is repeated, rather than the
    // test judging fibers that slept after their deadline had passed.
    for margin_ms in [500u64, 2_000, 8_000] {
        let (order, last_armed, first_deadline) = rt.run(move || {
            let woke = Arc::new(Mutex::new(Vec::with_capacity(N as usize)));
            let start = Arc::new(std::sync::OnceLock::<Instant>::new());
            let parked = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let last_armed = Arc::new(Mutex::new(None::<Instant>));
            let handles: Vec<_> = (0..N)
                .map(|i| {
                    let (woke, start, parked, last_armed) = (
                        woke.clone(),
                        start.clone(),
                        parked.clone(),
                        last_armed.clone(),
                    );
                    // Deadlines shuffled across 0..500 ms (a fixed permutation).
                    let offset_us = i.wrapping_mul(2_654_435_761) % 500_000;
                    spindle::spawn(move || {
                        parked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        while start.get().is_none() {
                            spindle::park();
                        }
                        let deadline = *start.get().unwrap() + Duration::from_micros(offset_us);
                        let now = Instant::now();
                        let mut last = last_armed.lock().unwrap();
                        *last = Some(last.map_or(now, |l| l.max(now)));
                        drop(last);
                        spindle::time::sleep_until(deadline);
                        woke.lock().unwrap().push(deadline);
                    })
                })
                .collect();
            // Every fiber exists and waits before the first deadline is set.
            while parked.load(std::sync::atomic::Ordering::SeqCst) < N {
                spindle::yield_now();
            }
            let first = Instant::now() + Duration::from_millis(margin_ms);
            start.set(first).unwrap();
            for h in &handles {
                h.fiber().unpark();
            }
            for h in handles {
                h.join().unwrap();
            }
            let order = Arc::try_unwrap(woke).unwrap().into_inner().unwrap();
            let last = last_armed.lock().unwrap().expect("every fiber armed");
            (order, last, first)
        });
        assert_eq!(order.len(), N as usize);
        if last_armed >= first_deadline {
            eprintln!("arming took past the first deadline with a {margin_ms} ms margin; again");
            continue;
        }
        let out_of_order = order.windows(2).filter(|w| w[0] > w[1]).count();
        assert_eq!(out_of_order, 0, "fibers woke out of deadline order");
        return;
    }
    panic!("100 000 timers could not be armed within 8 s");
}

/// Polls every future in a list once per wake, until all are ready.
struct All<F>(Vec<Option<F>>);

impl<F: Future<Output = ()> + Unpin> Future for All<F> {
    type Output = usize;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let mut pending = 0;
        for slot in self.0.iter_mut() {
            if let Some(f) = slot {
                if Pin::new(f).poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending += 1;
                }
            }
        }
        if pending == 0 {
            Poll::Ready(self.0.len())
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn a_million_armed_timers_all_fire() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let fired = rt.run(|| {
        let now = Instant::now();
        let sleeps = (0..1_000_000u64)
            .map(|i| {
                Some(spindle::time::sleep_until_future(
                    now + Duration::from_millis(50 + i % 200),
                ))
            })
            .collect();
        spindle::block_on(All(sleeps))
    });
    assert_eq!(fired, 1_000_000);
}

#[test]
fn sleep_parks_the_fiber_not_the_worker() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let start = Instant::now();
        let sleepers: Vec<_> = (0..1000)
            .map(|_| spindle::spawn(|| spindle::time::sleep(Duration::from_millis(100))))
            .collect();
        for s in sleepers {
            s.join().unwrap();
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(100));
        assert!(
            took < Duration::from_secs(2),
            "1000 sleeps ran one after another: {took:?}"
        );
    });
}

/// A lone timer on an idle worker: each of its sleeps ends at or after its
/// deadline, across the idle worker's once-a-second trim of pooled stacks
/// (a sleep's timeout is measured from the clock read before that trim,
/// and re-read when the trim worked). Short sleeps for 1.2 s, with stacks
/// pooled so the trim has work, and an `Instant` per sleep for the check.
#[test]
fn a_lone_timer_on_an_idle_worker_never_fires_early_across_its_trims() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        // Finished fibers leave their stacks in the worker's pool.
        let done: Vec<_> = (0..64)
            .map(|i| spindle::spawn(move || std::hint::black_box([i as u8; 4096])[7]))
            .collect();
        for d in done {
            d.join().unwrap();
        }
        let began = Instant::now();
        let mut sleeps = 0;
        while began.elapsed() < Duration::from_millis(1200) {
            let each = Duration::from_millis(3 + sleeps % 5);
            let start = Instant::now();
            spindle::time::sleep(each);
            let took = start.elapsed();
            assert!(
                took >= each,
                "sleep {sleeps} of {each:?} ended after {took:?}"
            );
            sleeps += 1;
        }
        assert!(sleeps > 40, "only {sleeps} sleeps in 1.2 s");
    });
}

/// Bursts of timers — a thousand fibers sleeping the same millisecond —
/// with and without compute fibers yielding beside them (which change how
/// a timer's wake is queued): no sleep ends before its deadline, by the
/// clock the sleeper reads itself, and the yielders do not hold the
/// sleepers back a pass each.
#[test]
fn bursts_of_sleepers_among_yielders_never_wake_early() {
    within(Duration::from_secs(60), || {
        let rt = Runtime::builder().workers(1).build().unwrap();
        for yielders in [0, 3] {
            rt.run(move || {
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let spinning: Vec<_> = (0..yielders)
                    .map(|_| {
                        let stop = stop.clone();
                        spindle::spawn(move || {
                            let mut turns = 0u64;
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                spindle::yield_now();
                                turns += 1;
                            }
                            turns
                        })
                    })
                    .collect();
                let sleepers: Vec<_> = (0..1_000u64)
                    .map(|i| {
                        spindle::spawn(move || {
                            for round in 0..20u64 {
                                let each = Duration::from_millis(1 + (i + round) % 3);
                                let start = Instant::now();
                                if round % 2 == 0 {
                                    spindle::time::sleep(each);
                                } else {
                                    spindle::time::sleep_until(start + each);
                                }
                                let took = start.elapsed();
                                assert!(took >= each, "a {each:?} sleep ended after {took:?}");
                            }
                        })
                    })
                    .collect();
                for s in sleepers {
                    s.join().unwrap();
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                for y in spinning {
                    assert!(y.join().unwrap() > 0);
                }
            });
        }
    });
}

#[test]
fn park_timeout_returns_on_time_or_on_unpark() {
    spindle::run(|| {
        let start = Instant::now();
        spindle::park_timeout(Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let me = spindle::current().unwrap();
        let waker = spindle::spawn(move || {
            spindle::time::sleep(Duration::from_millis(10));
            me.unpark();
        });
        let start = Instant::now();
        spindle::park_timeout(Duration::from_secs(10));
        assert!(start.elapsed() < Duration::from_secs(5));
        waker.join().unwrap();
    });
}

#[test]
fn sleeps_off_the_runtime_block_the_thread() {
    let start = Instant::now();
    spindle::time::sleep(Duration::from_millis(20));
    assert!(start.elapsed() >= Duration::from_millis(20));
    // A sleep future polled on a plain thread uses the background timers.
    let start = Instant::now();
    spindle::block_on(spindle::time::sleep_future(Duration::from_millis(20)));
    assert!(start.elapsed() >= Duration::from_millis(20));
}

/// A wait whose deadline has passed by the time it would park arms its
/// timer like any other, and the loop's next look fires it: the wait ends
/// with a timeout, on an idle worker and on one kept busy by yielders, and
/// inside an enclosing `timeout` that has already run out.
#[test]
fn a_wait_whose_deadline_has_passed_ends_with_a_timeout() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let (tx, rx) = spindle::chan::bounded::<u32>(1);
        for _ in 0..1000 {
            assert_eq!(
                rx.recv_timeout(Duration::ZERO),
                Err(spindle::chan::RecvTimeoutError::Timeout)
            );
        }
        // Busy worker: fibers yielding all the while.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let yielders: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                spindle::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        spindle::yield_now();
                    }
                })
            })
            .collect();
        for _ in 0..1000 {
            assert_eq!(
                rx.recv_timeout(Duration::ZERO),
                Err(spindle::chan::RecvTimeoutError::Timeout)
            );
        }
        // An enclosing scope that has run out: the inner wait ends with it.
        let r = spindle::time::timeout(Duration::from_millis(1), || {
            spindle::time::sleep(Duration::from_millis(2));
            rx.recv()
        });
        assert!(r.is_err(), "the scope had run out: {r:?}");
        // The channel still works afterwards.
        tx.send(7).unwrap();
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(7));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for y in yielders {
            y.join().unwrap();
        }
    });
}

fn timer_entries() -> usize {
    spindle::stats().expect("on a fiber").workers[0].timer_entries
}

/// A socket that re-arms its read deadline on every read, as a server's
/// connection does, keeps one timer entry, not one per read.
#[test]
fn a_read_deadline_rearmed_on_every_read_keeps_one_timer_entry() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        use std::io::{Read, Write};
        let (a, mut b) = spindle::net::UnixStream::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let reader = spindle::spawn(move || {
            let mut most = 0;
            for _ in 0..5_000 {
                // Parks each time: the writer yields before each byte.
                assert_eq!((&a).read(&mut [0u8; 1]).unwrap(), 1);
                most = most.max(timer_entries());
            }
            most
        });
        for _ in 0..5_000 {
            spindle::yield_now();
            b.write_all(b"x").unwrap();
        }
        let most = reader.join().unwrap();
        assert!(most <= 2, "{most} timer entries for one reading fiber");
    });
}

/// A read deadline re-armed by later reads keeps its first timer entry,
/// and a worker about to sleep leaves an entry far ahead where it is: the
/// worker wakes when the stale entry is due, moves it, and the read still
/// times out at its own deadline — never at the stale one, and not never.
#[test]
fn a_kept_timer_entry_due_while_the_worker_sleeps_times_out_the_read_at_its_own_deadline() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        use std::io::{Read, Write};
        let timeout = Duration::from_millis(300);
        let (a, mut b) = spindle::net::UnixStream::pair().unwrap();
        a.set_read_timeout(Some(timeout)).unwrap();
        let writer = spindle::spawn(move || {
            for _ in 0..3 {
                spindle::time::sleep(Duration::from_millis(50));
                b.write_all(b"x").unwrap();
            }
            // Kept open: the last read must end by its deadline, not EOF.
            spindle::time::sleep(Duration::from_secs(5));
            drop(b);
        });
        // The first read arms the entry, 300 ms ahead; the reads that
        // follow (50 ms apart) re-arm the deadline later and keep it, so it
        // comes due in the middle of the last read's wait, worker asleep.
        for _ in 0..3 {
            assert_eq!((&a).read(&mut [0u8; 1]).unwrap(), 1);
        }
        let started = Instant::now();
        let err = (&a).read(&mut [0u8; 1]).unwrap_err();
        let waited = started.elapsed();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            waited >= timeout,
            "timed out after {waited:?}, before its {timeout:?}"
        );
        assert!(
            waited < Duration::from_secs(4),
            "timed out only after {waited:?}"
        );
        writer.cancel();
        let _ = writer.join();
    });
}

/// Deadlines that shrink from one wait to the next arm a new entry each
/// time, and finished fibers leave theirs behind: such entries are
/// dropped in bulk, so the heap stays within a bound.
#[test]
fn shrinking_deadlines_and_finished_fibers_leave_a_bounded_timer_heap() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for batch in 0..10u64 {
            let fibers: Vec<_> = (0..100u64)
                .map(|_| {
                    let (tx, rx) = spindle::chan::bounded::<u64>(1);
                    let most = most.clone();
                    let sender = spindle::spawn(move || {
                        for round in 0..50u64 {
                            spindle::yield_now();
                            tx.send(round).unwrap();
                            most.fetch_max(timer_entries(), std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                    let receiver = spindle::spawn(move || {
                        for round in 0..50u64 {
                            let patience = Duration::from_secs(10_000 - batch * 100 - round);
                            assert_eq!(rx.recv_timeout(patience), Ok(round));
                        }
                    });
                    (sender, receiver)
                })
                .collect();
            for (s, r) in fibers {
                s.join().unwrap();
                r.join().unwrap();
            }
        }
        // 50 000 entries armed, 100 receivers live at a time.
        let most = most.load(std::sync::atomic::Ordering::Relaxed);
        assert!(most <= 2_500, "{most} timer entries");
    });
}

#[test]
fn reached_agrees_with_the_precise_clock_near_and_far_from_a_deadline() {
    // Deadlines from a millisecond back to a second ahead: near ones are
    // inside the coarse clock's margin and must be answered from the
    // precise clock; every answer is checked against readings taken
    // just before (it may not say "reached" early) and just after (nor
    // "not yet" late).
    within(Duration::from_secs(30), || {
        spindle::run(|| {
            let offsets_us: [i64; 9] = [-1_000, -1, 0, 1, 500, 2_000, 10_000, 50_000, 1_000_000];
            for round in 0..200 {
                for &us in &offsets_us {
                    let base = spindle::time::now();
                    let deadline = if us < 0 {
                        base - Duration::from_micros(us.unsigned_abs())
                    } else {
                        base + Duration::from_micros(us as u64)
                    };
                    let before = spindle::time::now();
                    let said = spindle::time::reached(deadline);
                    let after = spindle::time::now();
                    if said {
                        assert!(after >= deadline, "round {round}, {us} µs: reached early");
                    } else {
                        assert!(
                            before < deadline,
                            "round {round}, {us} µs: missed a passed deadline"
                        );
                    }
                }
                if round % 50 == 0 {
                    spindle::time::sleep(Duration::from_millis(3));
                }
            }
        });
    });
}

#[test]
fn reached_off_the_runtime_reads_the_real_clock() {
    // A plain thread has no worker and no coarse bound: the answer is
    // `Instant::now() >= deadline`.
    // Far enough ahead that no descheduling of this thread reaches it.
    assert!(!spindle::time::reached(
        Instant::now() + Duration::from_secs(60)
    ));
    let deadline = Instant::now() + Duration::from_millis(30);
    std::thread::sleep(Duration::from_millis(30));
    assert!(spindle::time::reached(deadline));
    assert!(spindle::time::reached(Instant::now()));
}
