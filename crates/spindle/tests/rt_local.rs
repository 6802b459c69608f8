//! `fiber_local!`: a value per fiber, for the fiber's whole life, dropped
//! by the fiber on its own worker — across every kind of wait, under
//! cancellation and at shutdown.

mod common;

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{rt, within};

spindle::fiber_local! {
    static ID: Cell<u64> = Cell::new(0);
    static TRAIL: RefCell<Vec<u32>> = RefCell::new(Vec::new());
}

/// Records where (which thread) it was dropped.
struct Witness(Arc<Mutex<Vec<std::thread::ThreadId>>>);

impl Drop for Witness {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(std::thread::current().id());
    }
}

spindle::fiber_local! {
    static WITNESS: RefCell<Option<Witness>> = RefCell::new(None);
}

#[test]
fn each_fiber_keeps_its_own_value_across_every_kind_of_wait() {
    within(Duration::from_secs(30), || {
        let rt = rt(2);
        rt.run(|| {
            let lock = Arc::new(spindle::sync::Mutex::new(()));
            let (tx, rx) = spindle::chan::bounded::<u64>(0);
            let rx = Arc::new(spindle::sync::Mutex::new(rx));
            let handles: Vec<_> = (1..=50u64)
                .map(|n| {
                    let (lock, tx, rx) = (lock.clone(), tx.clone(), rx.clone());
                    spindle::spawn(move || {
                        ID.with(|id| id.set(n));
                        let check = |what: &str| assert_eq!(ID.with(Cell::get), n, "after {what}");
                        spindle::time::sleep(Duration::from_millis(n % 5));
                        check("sleep");
                        drop(lock.lock());
                        check("a lock");
                        spindle::yield_now();
                        check("a yield");
                        if n % 2 == 0 {
                            tx.send(n).unwrap();
                        } else {
                            rx.lock().recv().unwrap();
                        }
                        check("a channel");
                        let r = spindle::blocking::run(|| 1 + 1);
                        assert_eq!(r, 2);
                        check("the blocking pool");
                        let (mut a, mut b) = spindle::net::UnixStream::pair().unwrap();
                        let reader = spindle::spawn(move || {
                            let mut buf = [0u8; 1];
                            b.read_exact(&mut buf).unwrap();
                            ID.with(Cell::get) // the reader's own: 0
                        });
                        spindle::time::sleep(Duration::from_millis(1));
                        a.write_all(b"x").unwrap();
                        assert_eq!(reader.join().unwrap(), 0);
                        check("a join");
                        let me = spindle::current().unwrap();
                        let waker = spindle::spawn(move || me.unpark());
                        spindle::park();
                        waker.join().unwrap();
                        check("a park");
                        ID.with(Cell::get)
                    })
                })
                .collect();
            let mut got: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            got.sort();
            assert_eq!(got, (1..=50).collect::<Vec<_>>());
            assert_eq!(ID.with(Cell::get), 0, "the root fiber's own value");
        });
    });
}

#[test]
fn the_value_is_dropped_when_its_fiber_ends_on_that_fibers_worker() {
    within(Duration::from_secs(30), || {
        let drops = Arc::new(Mutex::new(Vec::new()));
        let rt = rt(2);
        let d = drops.clone();
        let worker_threads = rt.run(move || {
            let handles: Vec<_> = (0..20)
                .map(|_| {
                    let d = d.clone();
                    spindle::spawn(move || {
                        WITNESS.with(|w| *w.borrow_mut() = Some(Witness(d)));
                        spindle::time::sleep(Duration::from_millis(2));
                        std::thread::current().id()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let mut dropped_on = drops.lock().unwrap().clone();
        assert_eq!(dropped_on.len(), 20, "one drop per fiber, none missed");
        let mut ran_on = worker_threads;
        dropped_on.sort_by_key(|t| format!("{t:?}"));
        ran_on.sort_by_key(|t| format!("{t:?}"));
        assert_eq!(
            dropped_on, ran_on,
            "each value dropped on its fiber's worker"
        );
    });
}

#[test]
fn a_cancelled_or_stopped_fiber_drops_its_values() {
    within(Duration::from_secs(30), || {
        let drops = Arc::new(Mutex::new(Vec::new()));
        let rt = rt(1);
        let d = drops.clone();
        rt.run(move || {
            let d2 = d.clone();
            let sleeper = spindle::spawn(move || {
                WITNESS.with(|w| *w.borrow_mut() = Some(Witness(d2)));
                spindle::time::sleep(Duration::from_secs(3600));
            });
            spindle::time::sleep(Duration::from_millis(10));
            sleeper.cancel();
            assert!(sleeper.join().unwrap_err().is_cancelled());
            assert_eq!(d.lock().unwrap().len(), 1, "dropped by the cancelled fiber");
            // One more that is parked when the runtime stops.
            let d3 = d.clone();
            spindle::spawn(move || {
                WITNESS.with(|w| *w.borrow_mut() = Some(Witness(d3)));
                loop {
                    spindle::park();
                }
            });
            spindle::time::sleep(Duration::from_millis(10));
        });
        rt.shutdown();
        assert_eq!(
            drops.lock().unwrap().len(),
            2,
            "dropped when the runtime stopped it"
        );
    });
}

#[test]
fn set_replaces_the_value_and_is_refused_inside_its_own_with() {
    within(Duration::from_secs(30), || {
        rt(1).run(|| {
            TRAIL.set(RefCell::new(vec![1, 2]));
            assert_eq!(TRAIL.with(|t| t.borrow().clone()), vec![1, 2]);
            let refused = std::panic::catch_unwind(|| {
                TRAIL.with(|_| TRAIL.set(RefCell::new(Vec::new())));
            });
            assert!(refused.is_err(), "set inside its own with must panic");
            // The borrow ended with the unwind; the value is intact.
            assert_eq!(TRAIL.with(|t| t.borrow().len()), 2);
            // Another local may be used and set inside a with.
            TRAIL.with(|_| ID.set(Cell::new(9)));
            assert_eq!(ID.with(Cell::get), 9);
        });
    });
}

spindle::fiber_local! {
    static DERIVED: u64 = ID.with(Cell::get) * 10;
}

#[test]
fn an_initialiser_may_use_other_fiber_locals_and_runs_once_per_fiber() {
    static INITS: AtomicUsize = AtomicUsize::new(0);
    spindle::fiber_local! {
        static COUNTED: u32 = {
            INITS.fetch_add(1, Ordering::SeqCst);
            5
        };
    }
    within(Duration::from_secs(30), || {
        rt(1).run(|| {
            ID.with(|id| id.set(4));
            assert_eq!(DERIVED.with(|d| *d), 40);
            for _ in 0..3 {
                assert_eq!(COUNTED.with(|c| *c), 5);
            }
            spindle::spawn(|| COUNTED.with(|c| *c)).join().unwrap();
        });
        assert_eq!(
            INITS.load(Ordering::SeqCst),
            2,
            "once per fiber that used it"
        );
    });
}

#[test]
fn on_a_plain_thread_the_value_belongs_to_the_thread() {
    ID.with(|id| id.set(3));
    let other = std::thread::spawn(|| ID.with(Cell::get)).join().unwrap();
    assert_eq!(other, 0);
    assert_eq!(ID.with(Cell::get), 3);
}

/// Panics when dropped.
struct Grenade;

impl Drop for Grenade {
    fn drop(&mut self) {
        panic!("a fiber-local's Drop panicked");
    }
}

spindle::fiber_local! {
    static GRENADE: RefCell<Option<Grenade>> = RefCell::new(None);
    static RECREATED: Cell<u32> = Cell::new(0);
}

/// Uses another fiber-local while it is dropped (re-creating it).
struct UsesLocals;

impl Drop for UsesLocals {
    fn drop(&mut self) {
        RECREATED.with(|r| r.set(r.get() + 1));
    }
}

spindle::fiber_local! {
    static USES: RefCell<Option<UsesLocals>> = RefCell::new(None);
}

#[test]
fn a_panicking_or_local_using_drop_at_the_fibers_end_harms_nobody() {
    within(Duration::from_secs(30), || {
        rt(1).run(|| {
            let h = spindle::spawn(|| {
                GRENADE.with(|g| *g.borrow_mut() = Some(Grenade));
                USES.with(|u| *u.borrow_mut() = Some(UsesLocals));
                42
            });
            // The fiber's result survives its locals' teardown.
            assert_eq!(h.join().unwrap(), 42);
            // The worker is alive and well.
            assert_eq!(spindle::spawn(|| 1).join().unwrap(), 1);
        });
    });
}
