//! [`Barrier`] and [`WaitGroup`].

use std::collections::VecDeque;

use crate::sched::park::{self, Notify, WaitKind, Wake};

/// `n` parties meet: each `wait` parks until all `n` have called it.
///
/// ```
/// use std::sync::Arc;
/// spindle::run(|| {
///     let b = Arc::new(spindle::sync::Barrier::new(3));
///     let hs: Vec<_> = (0..3).map(|_| { let b = b.clone(); spindle::spawn(move || b.wait().is_leader()) }).collect();
///     let leaders = hs.into_iter().filter(|_| true).map(|h| h.join().unwrap() as usize).sum::<usize>();
///     assert_eq!(leaders, 1);
/// });
/// ```
pub struct Barrier {
    n: usize,
    state: std::sync::Mutex<(usize, u64, VecDeque<Notify>)>,
}

/// Which party a [`Barrier::wait`] was.
#[derive(Debug, Clone, Copy)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one party per generation (the last to arrive).
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    /// A barrier for `n` parties.
    pub fn new(n: usize) -> Barrier {
        Barrier {
            n,
            state: std::sync::Mutex::new((0, 0, VecDeque::new())),
        }
    }

    /// Parks until all parties have arrived.
    pub fn wait(&self) -> BarrierWaitResult {
        park::exit_if_cancelled();
        let mut leader = false;
        let why = park::block(
            WaitKind::Other("a barrier"),
            None,
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.0 += 1;
                if st.0 >= self.n {
                    st.0 = 0;
                    st.1 += 1;
                    for n in st.2.drain(..) {
                        n.wake(Wake::Ready);
                    }
                    leader = true;
                    return false;
                }
                st.2.push_back(notify);
                true
            },
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.0 -= 1;
                super::remove(&mut st.2, notify);
            },
        );
        match why {
            Wake::Ready => BarrierWaitResult(leader),
            other => crate::sched::park::exit_for(other),
        }
    }
}

/// Waits for a count of tasks to finish (Go's `sync.WaitGroup`): `add`
/// before starting them, `done` as each finishes, `wait` parks until the
/// count is zero.
///
/// ```
/// use std::sync::Arc;
/// spindle::run(|| {
///     let wg = Arc::new(spindle::sync::WaitGroup::new());
///     for _ in 0..10 {
///         wg.add(1);
///         let wg = wg.clone();
///         spindle::spawn(move || wg.done());
///     }
///     wg.wait();
/// });
/// ```
#[derive(Default)]
pub struct WaitGroup {
    state: std::sync::Mutex<(usize, VecDeque<Notify>)>,
}

impl WaitGroup {
    /// A group with a count of zero.
    pub fn new() -> WaitGroup {
        WaitGroup::default()
    }

    /// Adds `n` to the count.
    pub fn add(&self, n: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 += n;
    }

    /// Subtracts one; at zero, wakes every waiter.
    ///
    /// # Panics
    ///
    /// If the count is already zero.
    pub fn done(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        assert!(st.0 > 0, "WaitGroup::done called more often than add");
        st.0 -= 1;
        if st.0 == 0 {
            for n in st.1.drain(..) {
                n.wake(Wake::Ready);
            }
        }
    }

    /// Parks until the count is zero.
    pub fn wait(&self) {
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Other("a wait group"),
            None,
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.0 == 0 {
                    return false;
                }
                st.1.push_back(notify);
                true
            },
            |notify| {
                super::remove(
                    &mut self.state.lock().unwrap_or_else(|e| e.into_inner()).1,
                    notify,
                )
            },
        );
        if why != Wake::Ready {
            crate::sched::park::exit_for(why);
        }
    }
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier").field("parties", &self.n).finish()
    }
}

impl std::fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.state.lock().unwrap_or_else(|e| e.into_inner()).0;
        f.debug_struct("WaitGroup").field("count", &n).finish()
    }
}
