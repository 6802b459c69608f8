//! Channels: MPMC stress across fibers and threads, rendezvous, select,
//! timeouts, disconnection.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle::chan::{self, RecvTimeoutError, TryRecvError};
use spindle::Runtime;

#[test]
fn mpmc_stress_with_fiber_and_thread_ends_loses_and_duplicates_nothing() {
    const PER_PRODUCER: u64 = 20_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (tx, rx) = chan::bounded::<u64>(64);
    let seen = Arc::new(Mutex::new(Vec::new()));
    // 4 fiber producers and 2 thread producers; 4 fiber consumers and 2
    // thread consumers.
    let mut producers = Vec::new();
    for p in 0..4u64 {
        let tx = tx.clone();
        producers.push(rt.spawn(move || {
            for i in 0..PER_PRODUCER {
                tx.send(p * PER_PRODUCER + i).unwrap();
            }
        }));
    }
    let threads: Vec<_> = (4..6u64)
        .map(|p| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    tx.send(p * PER_PRODUCER + i).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consume = |rx: chan::Receiver<u64>, seen: Arc<Mutex<Vec<u64>>>| {
        move || {
            let mut mine = Vec::new();
            for v in rx.iter() {
                mine.push(v);
            }
            seen.lock().unwrap().extend(mine);
        }
    };
    let fiber_consumers: Vec<_> = (0..4)
        .map(|_| rt.spawn(consume(rx.clone(), seen.clone())))
        .collect();
    let thread_consumers: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(consume(rx.clone(), seen.clone())))
        .collect();
    drop(rx);
    for p in producers {
        p.join().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    for c in fiber_consumers {
        c.join().unwrap();
    }
    for c in thread_consumers {
        c.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, 6 * PER_PRODUCER, "no loss");
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no duplicate");
}

/// Hand-overs racing timeouts on both sides: senders and receivers (fibers
/// on two workers, and a thread of each) give up after a few microseconds,
/// so a value is often put in a waiter's slot just as its wait times out.
/// Every send that succeeded is received exactly once; every send that
/// timed out got its own value back.
#[test]
fn hand_overs_racing_timeouts_lose_and_duplicate_nothing() {
    const PER_SENDER: u64 = 10_000;
    for cap in [0, 1] {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let (tx, rx) = chan::bounded::<u64>(cap);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let send = |p: u64, tx: chan::Sender<u64>, sent: Arc<Mutex<Vec<u64>>>| {
            move || {
                let mut mine = Vec::new();
                for i in 0..PER_SENDER {
                    let v = p * PER_SENDER + i;
                    match tx.send_timeout(v, Duration::from_micros(1 + i % 30)) {
                        Ok(()) => mine.push(v),
                        Err(chan::SendTimeoutError::Timeout(back)) => assert_eq!(back, v),
                        Err(e) => panic!("{e:?}"),
                    }
                }
                sent.lock().unwrap().extend(mine);
            }
        };
        let receive = |rx: chan::Receiver<u64>, got: Arc<Mutex<Vec<u64>>>| {
            // Busy up to 32 µs after each message: senders pile up and time out.
            move || impatient_receiver(rx, got, 20, 32)
        };
        let senders: Vec<_> = (0..3)
            .map(|p| rt.spawn(send(p, tx.clone(), sent.clone())))
            .collect();
        let sender_thread = std::thread::spawn(send(3, tx.clone(), sent.clone()));
        drop(tx);
        let receivers: Vec<_> = (0..2)
            .map(|_| rt.spawn(receive(rx.clone(), got.clone())))
            .collect();
        let receiver_thread = std::thread::spawn(receive(rx.clone(), got.clone()));
        drop(rx);
        for s in senders {
            s.join().unwrap();
        }
        sender_thread.join().unwrap();
        for r in receivers {
            r.join().unwrap();
        }
        receiver_thread.join().unwrap();
        let sent = sent.lock().unwrap().clone();
        let got = got.lock().unwrap().clone();
        assert!(!sent.is_empty(), "bounded({cap}): some sends got through");
        assert_same_values(got, sent, &format!("bounded({cap})"));
    }
}

/// Select send arms that give up after a few microseconds, against plain
/// receivers that also time out: a select parks its value in a slot of
/// each channel it watches, and a receiver may take it just as the select
/// times out. A value the select reports sent is received exactly once;
/// one it reports unsent comes back to it (and is sent again).
#[test]
fn select_sends_racing_timeouts_lose_and_duplicate_nothing() {
    const PER_SENDER: u32 = 10_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (tx_a, rx_a) = chan::bounded::<u32>(0);
    let (tx_b, rx_b) = chan::bounded::<u32>(1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let senders: Vec<_> = (0..3u32)
        .map(|p| {
            let (tx_a, tx_b) = (tx_a.clone(), tx_b.clone());
            rt.spawn(move || {
                let mut retries = 0u32;
                for i in 0..PER_SENDER {
                    let v = p * PER_SENDER + i;
                    loop {
                        let wait = Duration::from_micros(1 + u64::from(i % 20));
                        let sent = spindle::select! {
                            send(tx_a, v) -> r => r.is_ok(),
                            send(tx_b, v) -> r => r.is_ok(),
                            default(wait) => false,
                        };
                        if sent {
                            break;
                        }
                        retries += 1;
                    }
                }
                retries
            })
        })
        .collect();
    drop((tx_a, tx_b));
    let receive = |rx: chan::Receiver<u32>, got: Arc<Mutex<Vec<u32>>>| {
        // Busy up to 16 µs after each message: selects pile up and time out.
        move || impatient_receiver(rx, got, 15, 16)
    };
    let receivers = vec![
        rt.spawn(receive(rx_a.clone(), got.clone())),
        rt.spawn(receive(rx_b.clone(), got.clone())),
    ];
    let threads = vec![
        std::thread::spawn(receive(rx_a, got.clone())),
        std::thread::spawn(receive(rx_b, got.clone())),
    ];
    let retries: u32 = senders.into_iter().map(|s| s.join().unwrap()).sum();
    for r in receivers {
        r.join().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    let got = got.lock().unwrap().clone();
    let want: Vec<u32> = (0..3 * PER_SENDER).collect();
    assert_same_values(got, want, &format!("select sends ({retries} timed out)"));
}

#[test]
fn a_rendezvous_channel_hands_over_across_workers() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.run(|| {
        let (tx, rx) = chan::bounded::<usize>(0);
        let (back_tx, back_rx) = chan::bounded::<usize>(0);
        let echo = spindle::spawn(move || {
            for v in rx.iter() {
                back_tx.send(v + 1).unwrap();
            }
        });
        for i in 0..10_000 {
            tx.send(i).unwrap();
            assert_eq!(back_rx.recv().unwrap(), i + 1);
        }
        // With nobody receiving, a rendezvous send cannot complete now.
        let (lonely_tx, _lonely_rx) = chan::bounded::<usize>(0);
        assert!(lonely_tx.try_send(1).is_err());
        drop(tx);
        echo.join().unwrap();
    });
}

#[test]
fn select_chooses_fairly_among_ready_arms() {
    spindle::run(|| {
        let (tx1, rx1) = chan::unbounded::<u8>();
        let (tx2, rx2) = chan::unbounded::<u8>();
        for _ in 0..10_000 {
            tx1.send(1).unwrap();
            tx2.send(2).unwrap();
        }
        let mut counts = [0usize; 3];
        for _ in 0..10_000 {
            let v = spindle::select! {
                recv(rx1) -> v => v.unwrap(),
                recv(rx2) -> v => v.unwrap(),
            };
            counts[v as usize] += 1;
        }
        assert!(counts[1] > 4_000 && counts[2] > 4_000, "unfair: {counts:?}");
    });
}

/// A select parks one slot in several channels' queues; a channel that
/// handed a value over keeps receivers' slots for reuse. A slot a select
/// still holds must never go to a plain receiver: every value arrives
/// exactly once.
#[test]
fn select_and_plain_receivers_on_one_channel_lose_and_duplicate_nothing() {
    const N: u32 = 20_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (tx_a, rx_a) = chan::bounded::<u32>(0);
    let (tx_b, rx_b) = chan::bounded::<u32>(0);
    let (done_tx, done_rx) = chan::unbounded::<Vec<u32>>();
    for _ in 0..2 {
        let (rx_a, rx_b, done_tx) = (rx_a.clone(), rx_b.clone(), done_tx.clone());
        rt.spawn(move || {
            let mut got = Vec::new();
            loop {
                let v = spindle::select! {
                    recv(rx_a) -> v => v,
                    recv(rx_b) -> v => v,
                };
                match v {
                    Ok(v) => got.push(v),
                    Err(_) => break,
                }
            }
            done_tx.send(got).unwrap();
        });
    }
    for _ in 0..2 {
        let (rx_a, done_tx) = (rx_a.clone(), done_tx.clone());
        rt.spawn(move || {
            let mut got = Vec::new();
            while let Ok(v) = rx_a.recv() {
                got.push(v);
            }
            done_tx.send(got).unwrap();
        });
    }
    drop((rx_a, rx_b, done_tx));
    // Both senders stay alive until both are done: a select ends at the
    // first disconnected arm.
    let senders = [(tx_a, 0..N), (tx_b, N..2 * N)].map(|(tx, values)| {
        rt.spawn(move || {
            values.for_each(|i| tx.send(i).unwrap());
            tx
        })
    });
    let txs = senders.map(|s| s.join().unwrap());
    drop(txs);
    let mut all: Vec<u32> = (0..4)
        .flat_map(|_| done_rx.recv_timeout(Duration::from_secs(30)).unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..2 * N).collect::<Vec<_>>());
}

/// A select woken by a hand-over on one arm, whose other arm's channel
/// then closes before the select's fiber runs again, completes the arm
/// that handed over: looking at the closed arm first dropped a received
/// value, or reported a sent one unsent. One worker, so the order
/// is fixed: the select parks, the value is handed over, the other channel
/// closes, then the select runs. Its arms are looked at from a random
/// start, so many rounds.
#[test]
fn a_value_handed_to_a_select_survives_another_arm_closing() {
    spindle::Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .run(|| {
            for round in 0..200 {
                let (tx_a, rx_a) = chan::bounded::<u32>(0);
                let (tx_b, rx_b) = chan::bounded::<u32>(0);
                let select = spindle::spawn(move || {
                    spindle::select! {
                        recv(rx_a) -> v => ("a", v.ok()),
                        recv(rx_b) -> v => ("b", v.ok()),
                    }
                });
                spindle::yield_now(); // the select runs and parks
                tx_b.send(round).unwrap(); // handed over: the select is woken
                drop(tx_a); // and before it runs, the other arm closes
                assert_eq!(select.join().unwrap(), ("b", Some(round)), "round {round}");
                // The same with a send: taken by a receiver, then the other
                // arm closes. The select must say it sent.
                let (tx_a, rx_a) = chan::bounded::<u32>(0);
                let (tx_b, rx_b) = chan::bounded::<u32>(0);
                let select = spindle::spawn(move || {
                    spindle::select! {
                        recv(rx_a) -> v => ("a", v.is_ok()),
                        send(tx_b, round) -> r => ("b", r.is_ok()),
                    }
                });
                spindle::yield_now();
                assert_eq!(rx_b.recv(), Ok(round));
                drop(tx_a);
                assert_eq!(select.join().unwrap(), ("b", true), "round {round}");
            }
        });
}

#[test]
fn select_waits_sends_times_out_and_defaults() {
    spindle::run(|| {
        let (tx, rx) = chan::bounded::<u32>(0);
        let (_keep, never) = chan::unbounded::<u32>();
        // Nothing ready: default runs at once.
        let r = spindle::select! {
            recv(never) -> _v => 0,
            default => 1,
        };
        assert_eq!(r, 1);
        // Times out.
        let start = Instant::now();
        let r = spindle::select! {
            recv(never) -> _v => 0,
            default(Duration::from_millis(30)) => 2,
        };
        assert_eq!(r, 2);
        assert!(start.elapsed() >= Duration::from_millis(30));
        // A send arm completes when a receiver comes.
        let rx2 = rx.clone();
        let receiver = spindle::spawn(move || {
            spindle::time::sleep(Duration::from_millis(10));
            rx2.recv().unwrap()
        });
        let r = spindle::select! {
            send(tx, 99) -> res => { res.unwrap(); 3 },
            recv(never) -> _v => 0,
        };
        assert_eq!(r, 3);
        assert_eq!(receiver.join().unwrap(), 99);
    });
}

#[test]
fn timeouts_and_disconnection_follow_crossbeam() {
    spindle::run(|| {
        let (tx, rx) = chan::bounded::<u8>(1);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        tx.send(1).unwrap();
        assert!(
            tx.send_timeout(2, Duration::from_millis(10)).is_err(),
            "full"
        );
        drop(tx);
        assert_eq!(rx.recv(), Ok(1), "queued messages outlive the senders");
        assert_eq!(rx.recv(), Err(chan::RecvError));
        let (tx, rx) = chan::unbounded::<u8>();
        drop(rx);
        assert!(tx.send(5).is_err());
        // A parked receiver is woken by the last sender leaving.
        let (tx, rx) = chan::unbounded::<u8>();
        let r = spindle::spawn(move || rx.recv());
        spindle::time::sleep(Duration::from_millis(10));
        drop(tx);
        assert_eq!(r.join().unwrap(), Err(chan::RecvError));
    });
}

#[test]
fn a_thread_and_a_fiber_talk_over_one_channel() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = chan::bounded::<u32>(0);
    let fiber = rt.spawn(move || rx.iter().sum::<u32>());
    let n = Arc::new(AtomicUsize::new(0));
    for i in 0..1000 {
        tx.send(i).unwrap(); // blocks this thread until the fiber takes it
        n.fetch_add(1, Ordering::Relaxed);
    }
    drop(tx);
    assert_eq!(fiber.join().unwrap(), (0..1000).sum());
}

/// Asserts that `got` holds the values of `want`, each as often: on a
/// mismatch, says how many are missing and how many extra (with a few of
/// each) instead of printing both lists.
fn assert_same_values<T: Ord + Copy + std::fmt::Debug>(
    mut got: Vec<T>,
    mut want: Vec<T>,
    what: &str,
) {
    got.sort_unstable();
    want.sort_unstable();
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    let (mut g, mut w) = (got.iter().peekable(), want.iter().peekable());
    loop {
        match (g.peek(), w.peek()) {
            (Some(a), Some(b)) if a == b => {
                g.next();
                w.next();
            }
            (Some(a), Some(b)) if a < b => extra.push(*g.next().unwrap()),
            (Some(_), Some(_)) | (None, Some(_)) => missing.push(*w.next().unwrap()),
            (Some(_), None) => extra.push(*g.next().unwrap()),
            (None, None) => break,
        }
    }
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} values lost (e.g. {:?}), {} received twice or unsent (e.g. {:?})",
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)],
    );
}

/// Receives until the channel disconnects, each wait giving up after
/// 1..=`patience_us` µs, and after each message stays busy for up to
/// `busy_us` µs (so the other side's waits pile up and time out); adds what
/// it received to `got`.
fn impatient_receiver<T>(
    rx: chan::Receiver<T>,
    got: Arc<Mutex<Vec<T>>>,
    patience_us: u64,
    busy_us: u64,
) {
    let mut mine = Vec::new();
    let mut i = 0u64;
    loop {
        i += 1;
        match rx.recv_timeout(Duration::from_micros(1 + i % patience_us)) {
            Ok(v) => {
                mine.push(v);
                let until = Instant::now() + Duration::from_micros(i % busy_us);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    got.lock().unwrap().extend(mine);
}

/// Waits of fibers that nobody else holds: detached fibers (their handles
/// dropped) whose wait each end differently — the channel closed under
/// them, a timeout, a value handed over, or the runtime's shutdown while
/// they still wait, which unwinds them — each fiber kept alive by its
/// worker alone through its wait, every ending counted once.
#[test]
fn detached_fibers_waiting_alone_end_each_way_once() {
    struct CountOnDrop(Arc<AtomicUsize>);
    impl Drop for CountOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let rt = Runtime::builder().workers(2).build().unwrap();
    let closed = Arc::new(AtomicUsize::new(0));
    let timed_out = Arc::new(AtomicUsize::new(0));
    let handed = Arc::new(AtomicUsize::new(0));
    let unwound = Arc::new(AtomicUsize::new(0));
    let (c, t, h, u) = (
        closed.clone(),
        timed_out.clone(),
        handed.clone(),
        unwound.clone(),
    );
    let kept = rt.run(move || {
        let mut kept_senders = Vec::new();
        for i in 0..300 {
            let (tx, rx) = chan::bounded::<u64>(0);
            match i % 4 {
                0 => {
                    let c = c.clone();
                    drop(spindle::spawn(move || {
                        assert!(rx.recv().is_err(), "closed");
                        c.fetch_add(1, Ordering::SeqCst);
                    }));
                    drop(spindle::spawn(move || {
                        spindle::time::sleep(Duration::from_millis(2));
                        drop(tx);
                    }));
                }
                1 => {
                    let t = t.clone();
                    drop(spindle::spawn(move || {
                        let r = rx.recv_timeout(Duration::from_millis(3));
                        assert_eq!(r, Err(RecvTimeoutError::Timeout));
                        t.fetch_add(1, Ordering::SeqCst);
                    }));
                    kept_senders.push(tx);
                }
                2 => {
                    let h = h.clone();
                    drop(spindle::spawn(move || {
                        assert_eq!(rx.recv(), Ok(i));
                        h.fetch_add(1, Ordering::SeqCst);
                    }));
                    drop(spindle::spawn(move || tx.send(i).unwrap()));
                }
                _ => {
                    let guard = CountOnDrop(u.clone());
                    drop(spindle::spawn(move || {
                        let _guard = guard;
                        let _ = rx.recv(); // never ends: the runtime stops first
                    }));
                    kept_senders.push(tx);
                }
            }
        }
        spindle::time::sleep(Duration::from_millis(50));
        kept_senders
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while (closed.load(Ordering::SeqCst) < 75
        || timed_out.load(Ordering::SeqCst) < 75
        || handed.load(Ordering::SeqCst) < 75)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(closed.load(Ordering::SeqCst), 75);
    assert_eq!(timed_out.load(Ordering::SeqCst), 75);
    assert_eq!(handed.load(Ordering::SeqCst), 75);
    assert_eq!(unwound.load(Ordering::SeqCst), 0, "still waiting");
    rt.shutdown();
    assert_eq!(unwound.load(Ordering::SeqCst), 75, "unwound by the stop");
    drop(kept);
}
