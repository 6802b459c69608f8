//! A worker thread: its loop, its private state, and how fibers find it.
//!
//! ```text
//! loop {
//!     shutdown?            -> stop every fiber this worker owns, exit  (shutdown.rs)
//!     oldest runnable head -> resume it; requeue (yield), park, or retire it  (run.rs)
//!     nothing runnable     -> steal a batch of a victim's unstarted fibers  (steal.rs)
//!     nothing to steal     -> trim pooled stacks, sleep until woken  (idle.rs)
//! }
//! ```
//!
//! `context.rs` is how code running on the worker — the loop, or one of its
//! fibers — reaches it: the thread-local, the one accessor other modules
//! use ([`with_current`]), and the services a fiber asks of its worker (arm
//! a timer, queue a wake, reserve a stack). `diag.rs` is its part of dumps
//! and stall reports.
//!
//! # The worker's private state
//!
//! [`Worker`] lives on the worker thread's own stack and is reached through
//! the `WORKER` thread-local, so only that thread ever sees it. What the
//! loop and the fibers of the worker both change — the live table, the
//! stack pool, the timers, the epoll buffer, the steal batch — is one
//! [`LoopState`] in one [`LoopCell`], under one rule:
//!
//! > A borrow of the loop state is never held across a fiber resume, nor
//! > across a call that can run user code (a `Drop`, a waker) or reach
//! > another borrow.
//!
//! The loop and the fibers of a worker take turns on one thread (the loop is
//! suspended inside `resume` while a fiber runs), so with that rule two
//! borrows never overlap. Debug builds check it: a second borrow while one
//! is live panics. The local run queue is not in the cell: a thief may take
//! from it while the worker is stalled, so it has a lock of its own
//! (`queue::SharedLocal`), which the loop holds except while it resumes a
//! fiber.

mod context;
mod diag;
mod idle;
mod run;
mod shutdown;
mod spin;
mod steal;

use std::cell::{Cell, UnsafeCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use super::queue::{Entry, LocalQueue};
use super::{Scheduler, WorkerShared};
use crate::fiber::overflow::AltStack;
use crate::fiber::stack::StackPool;
use crate::fiber::FiberRef;
use crate::poll::timer::TimerHeap;

pub(crate) use context::{
    arm_timer, can_park, count_wait_here, current_fiber, current_fiber_uncounted, deadline_after,
    drive_in_place, in_block_on_poll, lend_reading, note_dead_timer, now, on_fiber, push_if_owner,
    push_new_here, reached, report_here, reserve_here, with_current, worker_count, worker_index,
    yield_in_place, BlockOnPoll,
};

/// Most entries moved from a shared queue to the local one per lock.
const BATCH: usize = 32;

/// A worker with a local backlog of unstarted fibers looks for sleeping
/// workers to hand half of it to every this many dispatches.
pub(crate) const SHED_EVERY: u64 = 64;

/// Longest spin of an idle worker before it sleeps (see `Worker::sleep`).
const SPIN_US: u64 = 30;
/// A sleep shorter than this counts as "cut short by a wake".
const SHORT_SLEEP_US: u64 = 200;

/// Unstarted fibers a worker keeps in its local queue before new spawns
/// go to its inbox, where idle workers steal from.
const LOCAL_SPAWN_BACKLOG: usize = 32;

/// Fiber ids a worker takes from the global counter at a time.
const ID_BLOCK: u64 = 1024;

/// Bytes of malloc heap a worker thread makes accessible up front.
const ARENA_WARMUP: usize = 32 << 20;

/// Bytes of freed malloc heap a worker thread keeps mapped (see
/// [`warm_malloc_arena`]).
const ARENA_RETAIN: usize = 8 << 20;

/// Grows this thread's malloc arena once, by [`ARENA_WARMUP`], and gives
/// the memory back, except that the lowest [`ARENA_RETAIN`] bytes stay the
/// arena's for as long as the returned guard lives.
///
/// A worker allocates a fiber core per spawn. glibc grows a thread's (non-
/// main) arena by exactly what an allocation needs, one `mprotect` per
/// 4 KiB page, and never again below the highest size it reached; a burst
/// of 100 000 spawns made 8 000 `mprotect` calls, a third of the burst's
/// time. Growing it once in 120 KiB steps (below the size malloc serves by
/// `mmap`) costs a few hundred calls at start and no memory: freeing it
/// all lets malloc trim the pages (`MADV_DONTNEED`) while the arena keeps
/// its accessible size.
///
/// But trimming is also what a burst pays for: 1 000 fibers spawned and
/// joined free ~370 KiB at the top of the heap, glibc hands those pages
/// back, and the next 1 000 fault them in again (zeroed) — half of the
/// time of a spawn-then-join batch. So a small live block (the guard) is
/// placed above the first [`ARENA_RETAIN`] bytes: what is freed below it
/// is not the top of the heap and stays mapped for the next burst, as a
/// garbage-collected runtime keeps its heap. Above it, memory goes back as
/// before. What stays resident is at most that much per worker, and only
/// what a burst has touched.
fn warm_malloc_arena() -> Option<Vec<u8>> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return None;
    }
    const STEP: usize = 120 << 10;
    // Uninitialised capacity: malloc writes its chunk headers only, so the
    // warm-up touches one page per block, not the whole block. Fallible: a
    // process under a tight `RLIMIT_AS` warms what it can and goes on (an
    // aborting allocation here would take the process down at worker
    // start).
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    if blocks.try_reserve_exact(ARENA_WARMUP / STEP).is_err() {
        return None;
    }
    let mut guard = None;
    for i in 0..ARENA_WARMUP / STEP {
        if i == ARENA_RETAIN / STEP {
            // Carved from the top of the heap, right above the blocks so
            // far (a fresh arena has nothing free below).
            let mut g = Vec::new();
            if g.try_reserve_exact(64).is_err() {
                break;
            }
            guard = Some(g);
        }
        let mut block = Vec::new();
        if block.try_reserve_exact(STEP).is_err() {
            break;
        }
        blocks.push(block);
    }
    drop(std::hint::black_box(blocks));
    guard
}

/// A worker's private state.
pub(crate) struct Worker {
    sched: Arc<Scheduler>,
    index: usize,
    /// Whether the loop holds this worker's local-queue lock (it does
    /// except while it resumes a fiber; see `SharedLocal`).
    loop_holds: Cell<bool>,
    /// What the loop and this worker's fibers both change (module docs).
    state: LoopCell,
    /// The fiber being resumed (points at the loop's own `FiberRef`).
    current: Cell<*const FiberRef>,
    /// Next fiber id to hand out and the end of this worker's id block.
    ids: Cell<(u64, u64)>,
    dispatches: Cell<u64>,
    /// The last dump request this worker answered.
    dump_answered: Cell<u64>,
    /// Whether the last sleep ended soon after it began (a ping-pong with
    /// another thread): then the next idle spell spins before sleeping.
    last_sleep_short: Cell<bool>,
    last_poll: Cell<Instant>,
    /// When the timers were last looked at, and the stamp clock then.
    timer_sample: Cell<(Instant, super::queue::Stamp)>,
    /// A reading of the runtime's clock the running fiber took just before
    /// it parked (a sleep's start), lent for the loop's next look at the
    /// timers; taken by that look whether used or not, so it never
    /// outlives the dispatch it came from.
    reading_at_park: Cell<Option<Instant>>,
}

/// The worker state the loop and its fibers share (see the module docs).
struct LoopState {
    live: LiveTable,
    pool: StackPool,
    /// Scratch for moving entries between queues.
    batch: Vec<Entry>,
    /// Deadlines of this worker's fibers (see `poll::timer`).
    timers: TimerHeap,
    /// Buffer for `epoll_wait` (taken out while a poll delivers events,
    /// since delivery wakes wakers).
    events: Vec<libc::epoll_event>,
}

/// The one cell around [`LoopState`], with a borrow flag in debug builds.
struct LoopCell {
    state: UnsafeCell<LoopState>,
    #[cfg(debug_assertions)]
    borrowed: Cell<bool>,
}

impl LoopCell {
    fn new(state: LoopState) -> LoopCell {
        LoopCell {
            state: UnsafeCell::new(state),
            #[cfg(debug_assertions)]
            borrowed: Cell::new(false),
        }
    }

    /// Runs `f` with the state borrowed. `f` must keep the rule of the
    /// module docs: no resume, no user code, no nested borrow.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut LoopState) -> R) -> R {
        #[cfg(debug_assertions)]
        let _flag = {
            assert!(
                !self.borrowed.replace(true),
                "spindle: the worker's loop state was borrowed twice"
            );
            BorrowFlag(&self.borrowed)
        };
        // SAFETY: `Worker` (and so this cell) is reached only from its own
        // thread, through the `WORKER` thread-local; the loop and the
        // worker's fibers run one at a time on that thread; and by the rule
        // above no other borrow is live while `f` runs (debug builds check).
        f(unsafe { &mut *self.state.get() })
    }
}

/// Clears the debug borrow flag, also when `f` panics.
#[cfg(debug_assertions)]
struct BorrowFlag<'a>(&'a Cell<bool>);

#[cfg(debug_assertions)]
impl Drop for BorrowFlag<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Fibers this worker has started and not yet retired.
struct LiveTable {
    slots: Vec<Option<FiberRef>>,
    free: Vec<usize>,
    /// Fibers started so far (the next `start_seq`).
    started: u64,
}

impl LiveTable {
    fn insert(&mut self, fiber: FiberRef) {
        self.started += 1;
        fiber.header.start_seq.set(self.started);
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        // A table of 2^32 live fibers would be terabytes of stacks.
        fiber
            .header
            .slot
            .set(u32::try_from(idx).expect("fewer than 2^32 live fibers"));
        self.slots[idx] = Some(fiber);
    }

    fn remove(&mut self, fiber: &FiberRef) -> Option<FiberRef> {
        let idx = fiber.header.slot.replace(u32::MAX) as usize;
        let taken = self.slots.get_mut(idx)?.take();
        self.free.push(idx);
        taken
    }

    /// The live fibers, in table order.
    fn iter(&self) -> impl Iterator<Item = &FiberRef> {
        self.slots.iter().flatten()
    }

    /// Takes every live fiber, most recently started first: a fiber is
    /// started after the fiber that spawned it, so a scope's children on
    /// this worker are unwound before the parent that waits for them.
    fn drain(&mut self) -> Vec<FiberRef> {
        self.free.clear();
        let mut all: Vec<FiberRef> = self.slots.drain(..).flatten().collect();
        all.sort_by_key(|f| std::cmp::Reverse(f.header.start_seq.get()));
        all
    }
}

/// Body of a worker thread.
pub(crate) fn run(sched: Arc<Scheduler>, index: usize) {
    let _alt_stack = AltStack::ensure();
    let _heap_guard = if sched.config.warm_malloc {
        warm_malloc_arena()
    } else {
        None
    };
    let _ = sched.workers[index].thread.set(thread::current());
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    sched.workers[index].tid.store(tid, Ordering::Relaxed);
    let worker = Worker {
        index,
        loop_holds: Cell::new(false),
        state: LoopCell::new(LoopState {
            live: LiveTable {
                slots: Vec::new(),
                free: Vec::new(),
                started: 0,
            },
            pool: StackPool::new(sched.config.max_pooled_stacks, sched.config.stack_class),
            batch: Vec::with_capacity(BATCH),
            timers: TimerHeap::default(),
            events: Vec::with_capacity(256),
        }),
        current: Cell::new(std::ptr::null()),
        ids: Cell::new((0, 0)),
        dispatches: Cell::new(0),
        dump_answered: Cell::new(0),
        last_sleep_short: Cell::new(false),
        last_poll: Cell::new(Instant::now()),
        timer_sample: Cell::new((sched.time.now(), 0)),
        reading_at_park: Cell::new(None),
        sched,
    };
    // With the `tokio` feature, the worker's whole life is inside a tokio
    // context (`sched::tokio_context`).
    #[cfg(feature = "tokio")]
    let tokio_handle = super::tokio_context::for_workers(worker.sched.config.tokio_handle.as_ref());
    #[cfg(feature = "tokio")]
    let _tokio_context = tokio_handle.enter();
    context::enter(&worker);
    worker.shared().local.enter();
    worker.loop_holds.set(true);
    let ran = panic::catch_unwind(AssertUnwindSafe(|| {
        worker.run_loop();
        worker.stop_all();
    }));
    if let Err(payload) = ran {
        died(index, &*payload);
    }
    context::leave();
    let sched = worker.sched.clone();
    drop(worker);
    let mut running = sched
        .running_workers
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *running -= 1;
    sched.workers_done.notify_all();
}

/// A panic escaped the worker's own loop: a broken invariant of the
/// runtime (every panic of user code the loop runs — a fiber's body, a
/// `Drop`, a waker — is caught where it is run). The fibers this worker
/// owns can never run or unwind again, so every wait on them would hang
/// silently; like a Go runtime `throw`, the process stops instead, saying
/// why, on stderr itself (a test harness's capture would swallow the
/// panic message of a thread that simply ended).
#[cold]
fn died(index: usize, payload: &(dyn std::any::Any + Send)) -> ! {
    crate::loud::loud!(
        "worker {index} stopped on a panic in its own loop: {}; its fibers \
         can never run again, so the process aborts rather than hang",
        crate::loud::panic_message(payload)
    );
    std::process::abort()
}

impl Worker {
    #[inline]
    fn shared(&self) -> &WorkerShared {
        &self.sched.workers[self.index]
    }

    /// Next stamp of this worker's service order (its own clock: no line
    /// shared with the other workers is written).
    #[inline]
    fn stamp(&self) -> super::queue::Stamp {
        self.sched.stamp_on(self.index)
    }

    /// The stamp this worker's next push would get.
    #[inline]
    fn current_stamp(&self) -> super::queue::Stamp {
        self.sched.current_stamp_on(self.index)
    }

    /// Publishes the size of the timer heap for `Stats`.
    fn publish_timer_entries(&self, entries: usize) {
        self.shared()
            .timer_entries
            .store(entries, Ordering::Relaxed);
    }

    /// Runs `f` on the local queue from any context on this thread: the
    /// loop's own (lock held) or a fiber's (takes the lock, which only a
    /// thief stealing from a stalled worker may hold meanwhile).
    #[inline]
    fn with_local<R>(&self, f: impl FnOnce(&mut LocalQueue) -> R) -> R {
        let local = &self.shared().local;
        // The loop holds the lock between resumes; a fiber takes it. `f` is
        // called from one place so that it inlines into the loop.
        let take = !self.loop_holds.get();
        if take {
            local.enter();
        }
        // SAFETY: we are inside (see `SharedLocal`): by the loop's hold or
        // by `enter`; no other borrow of the queue is live across this call
        // (every borrow is scoped to a `with_local`).
        let r = f(unsafe { local.get() });
        if take {
            local.leave();
        }
        r
    }

    /// Bumps a counter only this thread writes, without a locked RMW.
    fn bump(counter: &std::sync::atomic::AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    fn count_spawned(&self) {
        Self::bump(&self.shared().spawned);
    }

    fn count_finished(&self) {
        Self::bump(&self.shared().finished);
    }

    fn count_wait(&self, published: bool) {
        let shared = self.shared();
        Self::bump(if published {
            &shared.waits_begun
        } else {
            &shared.waits_ended
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::fiber::stack::{round_stack_size, size_class};

    const CHILD: &str = "SPINDLE_TEST_WORKER_DIES";

    /// A panic out of the worker's own loop — here a broken stack
    /// accounting, found when a fiber first runs — stops the process with
    /// a message on stderr instead of leaving every wait on the worker's
    /// fibers to hang (which is what a thread that just ended did, its
    /// panic message swallowed by the test harness's capture).
    #[test]
    fn a_worker_whose_own_loop_panics_aborts_the_process_saying_why() {
        if std::env::var_os(CHILD).is_some() {
            // A class of its own (no other test maps 44 MiB stacks), with
            // one slot counted that no region holds.
            let stack = round_stack_size(44 << 20).unwrap();
            size_class(stack).count_a_phantom_slot();
            let rt = crate::Runtime::builder()
                .workers(1)
                .stack_size(stack)
                .build()
                .unwrap();
            // The spawn's reservation takes the phantom slot; the first run
            // finds no slot behind it. Never returns.
            let _ = rt.spawn(|| ()).join();
            unreachable!("the join returned");
        }
        let exe = std::env::current_exe().unwrap();
        let runner = std::env::var("SPINDLE_TEST_RUNNER").unwrap_or_default();
        let mut words = runner.split_whitespace();
        let mut child = match words.next() {
            Some(program) => {
                let mut c = std::process::Command::new(program);
                c.args(words).arg(exe);
                c
            }
            None => std::process::Command::new(exe),
        };
        let out = child
            .args([
                "--exact",
                "sched::worker::tests::a_worker_whose_own_loop_panics_aborts_the_process_saying_why",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
        assert!(
            stderr.contains("worker 0 stopped on a panic in its own loop")
                && stderr.contains("stack reservation accounting broken"),
            "{stderr}"
        );
    }
}
