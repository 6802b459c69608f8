//! The runtime: worker threads around one scheduler, and how to start,
//! enter and stop them.
//!
//! A [`Runtime`] owns its worker threads. Several runtimes may live in one
//! process (tests run in parallel); nothing here is process-global except
//! the stack size classes and the overflow handler.
//!
//! # Shutdown
//!
//! [`Runtime::shutdown`] (also run on drop) works in two phases. Phase one
//! cancels every fiber (see `JoinHandle::cancel`) and waits up to the grace
//! for them to end. Phase two sets the scheduler's shutdown flag and wakes
//! every worker. Each worker then stops what it owns: fibers that never
//! started are dropped unrun (their `join` reports cancelled), and every
//! started fiber — typically one that swallows cancellation, or a scope
//! parent waiting for a busy child — has its stack *unwound*, most recently
//! started first, so its destructors run, then its stack is freed. Waits in
//! those destructors block the worker thread instead of switching; a fiber
//! already suspended in a destructor's wait is leaked rather than unwound
//! twice (see the crate docs). A fiber that is running and never yields
//! cannot be stopped (nothing preempts it); shutdown waits for it and says
//! so on stderr every few seconds, naming the fiber.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::fiber::stack::{self, round_stack_size, size_class};
use crate::fiber::{self, JoinHandle};
use crate::sched::spawn::{spawn_on, spawn_or_panic};
use crate::sched::{worker, Config, Scheduler};
use crate::stats::{Stats, WorkerStats};

/// A set of worker threads that run fibers.
///
/// ```
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let answer = rt.run(|| {
///     let h = spindle::spawn(|| 40 + 2);
///     h.join().unwrap()
/// });
/// assert_eq!(answer, 42);
/// rt.shutdown();
/// ```
pub struct Runtime {
    sched: Arc<Scheduler>,
    threads: Vec<thread::JoinHandle<()>>,
    down: bool,
}

/// Configures and builds a [`Runtime`].
///
/// ```
/// let rt = spindle::Runtime::builder()
///     .workers(1)
///     .stack_size(64 << 10)
///     .build()
///     .unwrap();
/// assert_eq!(rt.run(|| spindle::worker_id()), Some(0));
/// ```
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    workers: Option<usize>,
    stack_size: usize,
    max_pooled_stacks: usize,
    thread_name: String,
    stall_warning: Option<Duration>,
    dump_on_sigquit: bool,
    start_paused: bool,
    warm_malloc: bool,
    #[cfg(feature = "tokio")]
    tokio_handle: Option<tokio::runtime::Handle>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            workers: None,
            stack_size: stack::DEFAULT_STACK_SIZE,
            max_pooled_stacks: 256,
            thread_name: "spindle-worker".to_string(),
            stall_warning: Some(Duration::from_millis(100)),
            dump_on_sigquit: false,
            start_paused: false,
            warm_malloc: true,
            #[cfg(feature = "tokio")]
            tokio_handle: None,
        }
    }
}

impl RuntimeBuilder {
    /// Number of worker threads. `0` (the default) means the CPUs this
    /// process may use — its affinity mask and cgroup quota, as
    /// `std::thread::available_parallelism` reports — unless the
    /// `SPINDLE_WORKERS` environment variable names a number.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Usable stack size of each fiber (rounded up to whole pages, at least
    /// 16 KiB, at most 1 GiB: [`build`](Self::build) rejects a larger size
    /// with `InvalidInput`); default 256 KiB. Stacks are `MAP_NORESERVE`:
    /// only the pages a fiber touches cost memory.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// How many finished fibers' stacks each worker keeps for reuse
    /// (default 256). Past it, stacks are given back.
    pub fn max_pooled_stacks(mut self, n: usize) -> Self {
        self.max_pooled_stacks = n;
        self
    }

    /// Prefix of the worker threads' names (`spindle-worker` by default;
    /// the index is appended).
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Report on stderr a fiber that holds its worker longer than this
    /// without switching (a blocking call on a fiber). Default 100 ms;
    /// `None` turns the watchdog off.
    pub fn stall_warning(mut self, threshold: Option<Duration>) -> Self {
        self.stall_warning = threshold;
        self
    }

    /// With the `tokio` feature: the tokio runtime whose context every
    /// worker runs in (by default a shared one started on first use; see
    /// [`compat::tokio`](crate::compat::tokio)).
    ///
    /// ```
    /// # #[cfg(feature = "tokio")] {
    /// let tokio_rt = tokio::runtime::Builder::new_multi_thread()
    ///     .worker_threads(1)
    ///     .enable_all()
    ///     .build()
    ///     .unwrap();
    /// let rt = spindle::Runtime::builder()
    ///     .workers(1)
    ///     .tokio_handle(tokio_rt.handle().clone())
    ///     .build()
    ///     .unwrap();
    /// rt.run(|| spindle::block_on(tokio::time::sleep(std::time::Duration::from_millis(1))));
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub fn tokio_handle(mut self, handle: tokio::runtime::Handle) -> Self {
        self.tokio_handle = Some(handle);
        self
    }

    /// Run on a paused clock, for tests: time moves only by
    /// [`time::advance`](crate::time::advance), or jumps to the next timer
    /// when every worker is idle and no fiber waits on the blocking pool.
    /// Timers, [`sleep`](crate::time::sleep), [`timeout`](crate::time::timeout),
    /// [`park_timeout`](crate::park_timeout), socket, lock and channel
    /// deadlines all follow it; read it with [`time::now`](crate::time::now)
    /// (`std::time::Instant::now` stays the real clock). Real I/O still
    /// works, but a peer that takes real time to answer can lose against a
    /// timeout, as with tokio's `start_paused`. (With the `tokio` feature,
    /// tokio's own timers keep tokio's clock.)
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = spindle::Runtime::builder()
    ///     .workers(1)
    ///     .start_paused(true)
    ///     .build()
    ///     .unwrap();
    /// rt.run(|| {
    ///     let start = spindle::time::now();
    ///     let real = std::time::Instant::now();
    ///     // An hour of sleeping fibers, at once.
    ///     let sleepers: Vec<_> = (1..=60)
    ///         .map(|m| spindle::spawn(move || spindle::time::sleep(Duration::from_secs(60 * m))))
    ///         .collect();
    ///     for s in sleepers {
    ///         s.join().unwrap();
    ///     }
    ///     assert_eq!(spindle::time::now() - start, Duration::from_secs(3600));
    ///     assert!(real.elapsed() < Duration::from_secs(5));
    /// });
    /// ```
    pub fn start_paused(mut self, paused: bool) -> Self {
        self.start_paused = paused;
        self
    }

    /// Print [`Runtime::dump`] to stderr when the process gets `SIGQUIT`
    /// (`kill -QUIT <pid>`, or Ctrl-\ in a terminal), as Go does. Off by
    /// default: it replaces the signal's default action (core dump).
    pub fn dump_on_sigquit(mut self, on: bool) -> Self {
        self.dump_on_sigquit = on;
        self
    }

    /// Whether each worker thread prepares the C library's malloc for
    /// its fibers when it starts (default: on). With glibc, a thread's
    /// arena grows page by page and is trimmed on every free at its top;
    /// a worker grows it once and keeps the first few MiB, so bursts of
    /// spawns neither `mprotect` nor fault in fresh pages (elsewhere it
    /// does nothing). Turn it off in a program whose `#[global_allocator]`
    /// is not the system's (mimalloc, jemalloc): for such an allocator the
    /// warm-up is only memory taken and kept.
    ///
    /// ```
    /// // A program with its own allocator:
    /// //     #[global_allocator]
    /// //     static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
    /// let rt = spindle::Runtime::builder()
    ///     .workers(1)
    ///     .warm_malloc(false)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(rt.run(|| 6 * 7), 42);
    /// ```
    pub fn warm_malloc(mut self, on: bool) -> Self {
        self.warm_malloc = on;
        self
    }

    /// Starts the worker threads.
    pub fn build(self) -> io::Result<Runtime> {
        fiber::overflow::install_overflow_handler();
        let workers = match self.workers {
            Some(n) if n > 0 => n,
            _ => workers_from_env()?,
        };
        let sched = Arc::new(Scheduler::new(Config {
            workers,
            stack_class: size_class(round_stack_size(self.stack_size)?),
            max_pooled_stacks: self.max_pooled_stacks,
            thread_name: self.thread_name,
            stall_warning: self.stall_warning,
            start_paused: self.start_paused,
            warm_malloc: self.warm_malloc,
            #[cfg(feature = "tokio")]
            tokio_handle: self.tokio_handle,
        })?);
        crate::sched::diag::watchdog::start(&sched, sched.config.stall_warning);
        if self.dump_on_sigquit {
            crate::sched::diag::sigquit::dump_on_sigquit(&sched);
        }
        let mut threads = Vec::with_capacity(workers);
        for index in 0..workers {
            let s = sched.clone();
            let spawned = thread::Builder::new()
                .name(format!("{}-{index}", sched.config.thread_name))
                .spawn(move || worker::run(s, index));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    // Workers that never started still count as running.
                    let mut running = sched
                        .running_workers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    *running -= workers - index;
                    drop(running);
                    let rt = Runtime {
                        sched,
                        threads,
                        down: false,
                    };
                    drop(rt);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot start spindle worker thread {index}: {e}"),
                    ));
                }
            }
        }
        Ok(Runtime {
            sched,
            threads,
            down: false,
        })
    }
}

fn workers_from_env() -> io::Result<usize> {
    if let Ok(v) = std::env::var("SPINDLE_WORKERS") {
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => return Ok(n),
            Ok(_) => {}
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("SPINDLE_WORKERS={v:?} is not a number of workers"),
                ))
            }
        }
    }
    Ok(thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Runtime {
    /// A runtime with default settings (see [`RuntimeBuilder`]).
    pub fn new() -> io::Result<Runtime> {
        RuntimeBuilder::default().build()
    }

    /// Starts configuring a runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Spawns a fiber on this runtime, from any thread.
    ///
    /// # Panics
    ///
    /// If the fiber's stack cannot be had (the message names the limit and
    /// how many fibers are live); use [`Builder::spawn_on`](crate::Builder::spawn_on)
    /// to get the error instead.
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_or_panic(spawn_on(&self.sched, Default::default(), f))
    }

    /// Runs `f` as a fiber on this runtime and waits for its value.
    ///
    /// Fibers `f` spawns keep running after it returns. A panic in `f` is
    /// re-raised here. On a plain thread this blocks the thread; on a fiber
    /// (of any runtime) it parks that fiber.
    ///
    /// ```
    /// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    /// assert_eq!(rt.run(|| 40 + 2), 42);
    /// ```
    pub fn run<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.spawn(f).join() {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => panic!("spindle: the runtime shut down before run's closure finished"),
        }
    }

    /// The old name of [`run`](Self::run), which it calls. (`block_on` will
    /// take a future, like [`crate::block_on`], in a later release.)
    #[deprecated(since = "0.1.0", note = "renamed to `Runtime::run`")]
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run(f)
    }

    pub(crate) fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }

    /// Every live fiber of this runtime — id, name, and what it waits on —
    /// one line each, by worker: a Go-style goroutine dump.
    ///
    /// ```
    /// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    /// let _h = spindle::Builder::new().name("idle-conn").spawn_on(&rt, || {
    ///     spindle::time::sleep(std::time::Duration::from_secs(60))
    /// });
    /// std::thread::sleep(std::time::Duration::from_millis(20));
    /// let dump = rt.dump();
    /// assert!(dump.contains("\"idle-conn\": sleeping"), "{dump}");
    /// ```
    pub fn dump(&self) -> String {
        crate::sched::diag::dump::dump(&self.sched)
    }

    /// Counters of this runtime (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        stats_of(&self.sched)
    }

    /// Stops the runtime. Every fiber is cancelled first (see
    /// `JoinHandle::cancel`): its current and later waits fail at once, so
    /// fibers run their failure paths instead of waiting out timeouts.
    /// After a short grace (250 ms) whatever is left — fibers that swallow
    /// cancellation, fibers that never started — is stopped: started ones
    /// have their stacks unwound (destructors run), then the worker threads
    /// exit. Returns how many fibers the stop ended rather than letting
    /// them finish: cancelled at a wait, dropped unrun, or unwound.
    /// [`shutdown_timeout`](Self::shutdown_timeout) returns the same count.
    ///
    /// Called from one of this runtime's own fibers, it cannot wait for its
    /// own worker: it signals the stop and returns 0.
    pub fn shutdown(mut self) -> usize {
        self.shutdown_inner()
    }

    /// Like [`shutdown`](Self::shutdown) with a grace of `timeout`: returns
    /// when every fiber has ended or `timeout` passed, then stops what is
    /// left. Returns the same count as `shutdown`: the fibers the stop
    /// ended rather than letting them finish.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    /// rt.spawn(|| spindle::time::sleep(Duration::from_secs(30)));
    /// let ended = rt.shutdown_timeout(Duration::from_secs(10));
    /// assert_eq!(ended, 1); // the sleeping fiber, cancelled at once
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) -> usize {
        self.stop(timeout);
        self.sched.stopped.load(Ordering::Relaxed)
    }

    fn shutdown_inner(&mut self) -> usize {
        self.stop(Duration::from_millis(250));
        self.sched.stopped.load(Ordering::Relaxed)
    }

    /// Phase one (cancel, wait up to `grace`), then phase two (stop the
    /// workers, unwinding what is left). Returns the fibers alive after the
    /// grace.
    fn stop(&mut self, grace: Duration) -> usize {
        if self.down {
            return 0;
        }
        self.down = true;
        let on_own_worker = worker::with_current(|w| w.is_some_and(|w| w.belongs_to(&self.sched)));
        self.sched.cancelling.store(true, Ordering::SeqCst);
        self.sched.wake_all();
        let mut alive = self.sched.live_fibers();
        if !on_own_worker && alive > 0 {
            // Wait for the last fiber to finish (the worker that retires it
            // signals `fibers_done`), at most `grace`. The count is checked
            // under the lock the signaller takes, so the signal is not lost.
            let deadline = Instant::now() + grace;
            let mut guard = self
                .sched
                .running_workers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            loop {
                alive = self.sched.live_fibers();
                let now = Instant::now();
                if alive == 0 || now >= deadline {
                    break;
                }
                guard = self
                    .sched
                    .fibers_done
                    .wait_timeout(guard, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        self.sched.shutdown.store(true, Ordering::SeqCst);
        self.sched.wake_all();
        if on_own_worker {
            // Cannot join our own thread; the workers stop on their own.
            self.threads.clear();
            return alive;
        }
        let started = Instant::now();
        let mut running = self
            .sched
            .running_workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut warned_at = Duration::ZERO;
        while *running > 0 {
            let (guard, _) = self
                .sched
                .workers_done
                .wait_timeout(running, Duration::from_millis(250))
                .unwrap_or_else(|e| e.into_inner());
            running = guard;
            let waited = started.elapsed();
            if *running > 0 && waited >= warned_at + Duration::from_secs(5) {
                warned_at = waited;
                self.warn_busy_workers(waited);
            }
            // Wakes can be missed by a worker that was between its last
            // check and its sleep when the flag flipped: repeat them.
            self.sched.wake_all();
        }
        drop(running);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Wakes that raced with the workers' exit may have queued fibers
        // after the workers drained their queues.
        for w in self.sched.workers.iter() {
            discard_leftovers(&self.sched, w.inbox.drain_all());
        }
        discard_leftovers(&self.sched, self.sched.global.drain_all());
        alive
    }

    fn warn_busy_workers(&self, waited: Duration) {
        for (i, w) in self.sched.workers.iter().enumerate() {
            let id = w.running_fiber.load(Ordering::Relaxed);
            if id != 0 {
                crate::loud::loud!(
                    "shutdown has waited {:.0?} for worker {i}, which is running \
                     fiber {id} and has not switched back (a fiber that never yields or \
                     waits cannot be stopped)",
                    waited
                );
            }
        }
    }
}

fn discard_leftovers(sched: &Scheduler, entries: Vec<crate::sched::queue::Entry>) {
    for e in entries {
        if !e.fiber.header.is_started() {
            sched.count_finished_elsewhere();
            sched.stopped.fetch_add(1, Ordering::Relaxed);
            fiber::discard_unstarted(&e.fiber);
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown_inner();
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.sched.workers.len())
            .field("live_fibers", &self.sched.live_fibers())
            .finish()
    }
}

pub(crate) fn stats_of(sched: &Scheduler) -> Stats {
    Stats {
        live_fibers: sched.live_fibers(),
        global_queued: sched.global.len(),
        wait_registrations: sched.wait_registrations(),
        workers: sched
            .workers
            .iter()
            .map(|w| WorkerStats {
                local_queued: w.local_len.load(Ordering::Relaxed),
                inbox_queued: w.inbox.len(),
                steals: w.steals.load(Ordering::Relaxed),
                dispatches: w.dispatches.load(Ordering::Relaxed),
                stacks_pooled: w.stacks_pooled.load(Ordering::Relaxed),
                timer_entries: w.timer_entries.load(Ordering::Relaxed),
            })
            .collect(),
    }
}
