//! The blocking pool: threads for calls that block inside code that knows
//! nothing of fibers: DNS, other libraries, regular files (`docs/DESIGN.md`,
//! "Work the loop cannot see").
//!
//! [`run`] runs a closure on a pool thread while the calling
//! fiber parks; the pool thread wakes the fiber when it is done. On a plain
//! thread the closure simply runs there. The pool is process-wide and
//! bounded (512 threads, or `SPINDLE_BLOCKING_THREADS`); threads are started
//! on demand and leave after 10 s idle. Past the bound, jobs wait in the
//! queue — the caller waits longer, nothing is dropped.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::sched::park::{self, WaitToken, Wake};
use crate::sched::worker;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
    max_threads: usize,
}

struct PoolState {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState {
            queue: VecDeque::new(),
            threads: 0,
            idle: 0,
        }),
        work: Condvar::new(),
        max_threads: std::env::var("SPINDLE_BLOCKING_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(512),
    })
}

impl Pool {
    fn submit(&'static self, job: Job) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.queue.push_back(job);
        // An idle thread counts as idle until it wakes, so "is any thread
        // idle" would let a burst of jobs pile onto one thread. Start one
        // whenever queued jobs outnumber the idle threads that will take
        // them.
        let need_thread = st.queue.len() > st.idle;
        if st.idle > 0 {
            self.work.notify_one();
        }
        if need_thread && st.threads < self.max_threads {
            st.threads += 1;
            drop(st);
            let spawned = std::thread::Builder::new()
                .name("spindle-blocking".into())
                .spawn(move || self.run_thread());
            if spawned.is_err() {
                // Could not grow: existing threads will get to the job.
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.threads -= 1;
                assert!(
                    st.threads > 0,
                    "spindle: cannot start any blocking-pool thread"
                );
            }
        }
    }

    fn run_thread(&'static self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = st.queue.pop_front() {
                drop(st);
                job();
                st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.idle += 1;
            let (guard, timeout) = self
                .work
                .wait_timeout(st, Duration::from_secs(10))
                .unwrap_or_else(|e| e.into_inner());
            st = guard;
            st.idle -= 1;
            if timeout.timed_out() && st.queue.is_empty() {
                st.threads -= 1;
                return;
            }
        }
    }
}

/// Where a job leaves its result and who to tell.
struct Completion<T> {
    state: Mutex<(Option<std::thread::Result<T>>, Option<WaitToken>)>,
}

/// The blocking pool's threads now, and how many of them are idle (the
/// pool is shared by every runtime of the process; idle threads exit after
/// 10 s).
///
/// ```
/// spindle::run(|| spindle::blocking::run(|| ()));
/// let (threads, idle) = spindle::blocking::threads();
/// assert!(threads >= 1 && idle <= threads);
/// ```
pub fn threads() -> (usize, usize) {
    let st = pool().state.lock().unwrap_or_else(|e| e.into_inner());
    (st.threads, st.idle)
}

/// Runs `f` on the blocking pool while the calling fiber waits, and returns
/// its value (a panic in `f` is re-raised here). On a plain thread, runs
/// `f` right there.
///
/// ```
/// spindle::run(|| {
///     let n = spindle::blocking::run(|| {
///         std::thread::sleep(std::time::Duration::from_millis(5)); // blocks a pool thread
///         21 * 2
///     });
///     assert_eq!(n, 42);
/// });
/// ```
pub fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if !worker::can_park() {
        return f();
    }
    let done = Arc::new(Completion {
        state: Mutex::new((None, None)),
    });
    let d = done.clone();
    let hold = PausedClockHold::new();
    pool().submit(Box::new(move || {
        let result = panic::catch_unwind(AssertUnwindSafe(f));
        drop(hold);
        let token = {
            let mut st = d.state.lock().unwrap_or_else(|e| e.into_inner());
            st.0 = Some(result);
            st.1.take()
        };
        if let Some(token) = token {
            token.wake(Wake::Ready, false);
        }
    }));
    loop {
        let why = park::wait(
            park::WaitKind::Blocking,
            None,
            |token| {
                let mut st = done.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.0.is_some() {
                    return false;
                }
                st.1 = Some(token.clone());
                true
            },
            |_| {},
        );
        match why {
            // The job goes on on its pool thread; its result is dropped.
            Wake::Cancelled => park::exit_cancelled(),
            Wake::Elapsed => crate::sched::park::elapsed_exit(),
            _ => {}
        }
        let mut st = done.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(result) = st.0.take() {
            match result {
                Ok(v) => return v,
                Err(p) => panic::resume_unwind(p),
            }
        }
    }
}

/// Holds a paused clock still while a job of one of its runtime's fibers
/// runs: the job takes real time, which the clock must not jump over
/// (`sched::time_source`). Nothing on a real clock.
struct PausedClockHold(Option<Arc<crate::sched::Scheduler>>);

impl PausedClockHold {
    fn new() -> PausedClockHold {
        PausedClockHold(worker::with_current(|here| {
            let sched = here?.sched;
            if !sched.time.is_paused() {
                return None;
            }
            sched.blocking_waits.fetch_add(1, Ordering::SeqCst);
            Some(sched.clone())
        }))
    }
}

impl Drop for PausedClockHold {
    fn drop(&mut self) {
        if let Some(sched) = self.0.take() {
            if sched.blocking_waits.fetch_sub(1, Ordering::SeqCst) == 1 {
                // Every worker may sleep with nothing but the clock left to
                // move it: one of them looks again.
                sched.wake_one_sleeper();
            }
        }
    }
}

/// Runs a borrowing closure on the pool and waits for it, however long it
/// takes — even while the fiber is being unwound — so the borrow stays
/// valid (used for name resolution).
pub(crate) fn run_scoped<'a, F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'a,
    T: Send + 'static,
{
    if !worker::can_park() {
        return f();
    }
    let boxed: Box<dyn FnOnce() -> T + Send + 'a> = Box::new(f);
    // SAFETY: we do not return, and do not let an unwind pass, before the
    // job has run: the guard below blocks the thread until it has. So every
    // borrow in `f` outlives its use.
    let boxed: Box<dyn FnOnce() -> T + Send + 'static> = unsafe { std::mem::transmute(boxed) };
    struct WaitForJob(Arc<Mutex<bool>>, Arc<Condvar>);
    impl Drop for WaitForJob {
        fn drop(&mut self) {
            let mut done = self.0.lock().unwrap_or_else(|e| e.into_inner());
            while !*done {
                done = self.1.wait(done).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
    let finished = Arc::new(Mutex::new(false));
    let cv = Arc::new(Condvar::new());
    let guard = WaitForJob(finished.clone(), cv.clone());
    let value = run(move || {
        let r = panic::catch_unwind(AssertUnwindSafe(boxed));
        *finished.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        r
    });
    drop(guard);
    match value {
        Ok(v) => v,
        Err(p) => panic::resume_unwind(p),
    }
}

/// The old name of [`run`], which it calls.
#[deprecated(since = "0.1.0", note = "renamed to `blocking::run`")]
pub fn spawn_blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    run(f)
}
