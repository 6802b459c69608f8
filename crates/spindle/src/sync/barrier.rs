//! [`Barrier`] and [`WaitGroup`].

use crate::sched::park::{self, WaitKind, Wake};
use crate::sched::wait_queue::WaitQueue;

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
    state: std::sync::Mutex<BarrierState>,
}

/// The state of a [`Barrier`], under its lock.
struct BarrierState {
    /// Parties waiting in the current round.
    arrived: usize,
    /// Completed rounds.
    generation: u64,
    /// The parties of this round that wait for the last one.
    waiters: WaitQueue,
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
            state: std::sync::Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                waiters: WaitQueue::new(),
            }),
        }
    }

    /// Parks until all parties have arrived.
    pub fn wait(&self) -> BarrierWaitResult {
        park::exit_if_cancelled();
        let mut leader = false;
        let why = park::block(
            WaitKind::Barrier,
            None,
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.arrived += 1;
                if st.arrived >= self.n {
                    st.arrived = 0;
                    st.generation += 1;
                    st.waiters.take_all().wake_all(Wake::Ready);
                    leader = true;
                    return false;
                }
                st.waiters.push(notify, ());
                true
            },
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.arrived -= 1;
                st.waiters.remove(notify);
            },
        );
        match why {
            Wake::Ready => BarrierWaitResult(leader),
            other => crate::sched::park::exit_for(other),
        }
    }
}

/// The state of a [`WaitGroup`], under its lock.
#[derive(Default)]
struct GroupState {
    /// Tasks added and not yet done.
    count: usize,
    /// Fibers and threads waiting for the count to reach zero.
    waiters: WaitQueue,
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
    state: std::sync::Mutex<GroupState>,
}

impl WaitGroup {
    /// A group with a count of zero.
    pub fn new() -> WaitGroup {
        WaitGroup::default()
    }

    /// Adds `n` to the count.
    pub fn add(&self, n: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).count += n;
    }

    /// Subtracts one; at zero, wakes every waiter.
    ///
    /// # Panics
    ///
    /// If the count is already zero.
    pub fn done(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        assert!(st.count > 0, "WaitGroup::done called more often than add");
        st.count -= 1;
        if st.count == 0 {
            st.waiters.take_all().wake_all(Wake::Ready);
        }
    }

    /// Parks until the count is zero.
    pub fn wait(&self) {
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::WaitGroup,
            None,
            |notify| {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.count == 0 {
                    return false;
                }
                st.waiters.push(notify, ());
                true
            },
            |notify| {
                self.state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .waiters
                    .remove(notify);
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
        let n = self.state.lock().unwrap_or_else(|e| e.into_inner()).count;
        f.debug_struct("WaitGroup").field("count", &n).finish()
    }
}
