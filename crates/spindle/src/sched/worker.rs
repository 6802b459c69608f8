//! A worker thread: its loop, its private state, and how fibers find it.
//!
//! ```text
//! loop {
//!     shutdown?            -> stop every fiber this worker owns, exit
//!     oldest runnable head -> resume it; requeue (yield), park, or retire it
//!     nothing runnable     -> steal half of a victim's unstarted fibers
//!     nothing to steal     -> trim pooled stacks, sleep until woken
//! }
//! ```
//!
//! The private state ([`Worker`]) lives on the worker thread's own stack and
//! is reached through the `WORKER` thread-local. Fibers running on the worker
//! touch it too (a wake on the owner worker pushes to the local queue; a
//! spawn reads the scheduler) — never while the loop holds a borrow of the
//! same field, because the loop is suspended inside `resume` while a fiber
//! runs and takes no borrow across that call.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use std::time::Instant;

use super::queue::{Entry, LocalQueue};
use super::{Scheduler, WorkerShared, AWAKE, POLLING, SLEEPING};
use crate::fiber::overflow::AltStack;
use crate::fiber::stack::StackPool;
use crate::fiber::{self, FiberRef, Outcome};
use crate::poll::timer::{TimerHeap, TimerTarget};

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

/// Grows this thread's malloc arena once, by [`ARENA_WARMUP`], and gives
/// the memory straight back.
///
/// A worker allocates a fiber core per spawn. glibc grows a thread's (non-
/// main) arena by exactly what an allocation needs, one `mprotect` per
/// 4 KiB page, and never again below the highest size it reached; a burst
/// of 100 000 spawns made 8 000 `mprotect` calls, a third of the burst's
/// time. Growing it once in 120 KiB steps (below the size malloc serves by
/// `mmap`) costs a few hundred calls at start and no memory: freeing it
/// all lets malloc trim the pages (`MADV_DONTNEED`) while the arena keeps
/// its accessible size.
fn warm_malloc_arena() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    const STEP: usize = 120 << 10;
    // Uninitialised: malloc writes its chunk headers only, so the warm-up
    // touches one page per block, not the whole block.
    let blocks: Vec<Box<[std::mem::MaybeUninit<u8>]>> = (0..ARENA_WARMUP / STEP)
        .map(|_| Box::new_uninit_slice(STEP))
        .collect();
    drop(std::hint::black_box(blocks));
}

/// A worker's private state.
pub(crate) struct Worker {
    sched: Arc<Scheduler>,
    index: usize,
    /// Whether the loop holds this worker's local-queue lock (it does
    /// except while it resumes a fiber; see `SharedLocal`).
    loop_holds: Cell<bool>,
    live: UnsafeCell<LiveTable>,
    pool: UnsafeCell<StackPool>,
    batch: UnsafeCell<Vec<Entry>>,
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
    /// Deadlines of this worker's fibers (see `poll::timer`).
    timers: UnsafeCell<TimerHeap>,
    /// Buffer for `epoll_wait`.
    events: UnsafeCell<Vec<libc::epoll_event>>,
    last_poll: Cell<Instant>,
    /// When the timers were last looked at, and the stamp clock then.
    timer_sample: Cell<(Instant, super::queue::Stamp)>,
}

thread_local! {
    static WORKER: Cell<*const Worker> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with this thread's worker, if it is one.
#[inline]
fn with_worker<R>(f: impl FnOnce(Option<&Worker>) -> R) -> R {
    let ptr = WORKER.with(|w| w.get());
    // SAFETY: WORKER points at the `Worker` on this thread's stack from the
    // start of `run` until just before it returns, and is null otherwise.
    f(unsafe { ptr.as_ref() })
}

/// The index of the calling worker if it belongs to `sched`.
pub(crate) fn current_index(sched: &Scheduler) -> Option<usize> {
    with_worker(|w| {
        w.filter(|w| std::ptr::eq(Arc::as_ptr(&w.sched), sched))
            .map(|w| w.index)
    })
}

/// The calling worker's scheduler and index.
pub(crate) fn current_scheduler() -> Option<(Arc<Scheduler>, usize)> {
    with_worker(|w| w.map(|w| (w.sched.clone(), w.index)))
}

/// Runs `f` with the calling worker's scheduler, without cloning it.
pub(crate) fn with_current_scheduler<R>(f: impl FnOnce(&Arc<Scheduler>) -> R) -> Option<R> {
    with_worker(|w| w.map(|w| f(&w.sched)))
}

/// The calling worker's part of a dump (called on a fiber of it).
pub(crate) fn report_here() -> String {
    with_worker(|w| w.map(|w| w.report()).unwrap_or_default())
}

/// Index of the worker running the caller, in its runtime.
pub(crate) fn current_worker_index() -> Option<usize> {
    with_worker(|w| w.map(|w| w.index))
}

/// The fiber running on this thread.
pub(crate) fn current_fiber() -> Option<FiberRef> {
    with_worker(|w| {
        let w = w?;
        let ptr = w.current.get();
        // SAFETY: `current` points at the loop's `FiberRef` while that fiber
        // runs (it is set around `resume` and `stop`), else it is null.
        unsafe { ptr.as_ref() }.cloned()
    })
}

/// Whether the caller runs on a fiber.
#[inline]
pub(crate) fn on_fiber() -> bool {
    !fiber::running_header().is_null()
}

/// Whether the caller may park its fiber: on a fiber, not inside a
/// `block_on` poll (a nested `block_on` polls in place: there, waits block
/// the thread) and not being unwound by a runtime stop (a switch there
/// would re-raise the stop's unwind inside a destructor).
#[inline]
pub(crate) fn can_park() -> bool {
    on_fiber() && !in_block_on_poll() && !fiber::running_is_stopped()
}

/// Queues a woken fiber on the local queue, as `placement` says, if this
/// thread is its owner worker in `sched`; hands the fiber back otherwise.
pub(crate) fn push_if_owner(
    sched: &Scheduler,
    fiber: FiberRef,
    owner: usize,
    placement: crate::fiber::Placement,
) -> Result<(), FiberRef> {
    use crate::fiber::Placement;
    with_worker(|w| match w {
        Some(w) if w.index == owner && std::ptr::eq(Arc::as_ptr(&w.sched), sched) => {
            match placement {
                Placement::Next => {
                    let stamp = w.sched.stamp();
                    w.with_local(|local| local.push(Entry::new(stamp, fiber)));
                }
                Placement::At(stamp) => {
                    w.with_local(|local| local.insert_timer_wake(stamp, fiber));
                }
                Placement::Urgent => w.with_local(|local| local.push_urgent(fiber)),
            }
            Ok(())
        }
        _ => Err(fiber),
    })
}

/// Arms a timer on the calling worker. Must be called on a fiber (whose
/// worker is the only one that will ever run it).
pub(crate) fn arm_timer(deadline: Instant, target: TimerTarget) {
    with_worker(|w| {
        let w = w.expect("spindle: timers are armed on a worker");
        // SAFETY: only this thread touches `timers`; the loop holds no
        // borrow of it while a fiber runs.
        let timers = unsafe { &mut *w.timers.get() };
        if timers.is_empty() {
            // The loop samples the clock only while timers are armed.
            w.timer_sample
                .set((Instant::now(), w.sched.current_stamp()));
        }
        timers.arm(deadline, target);
    })
}

/// A wait whose timer is armed on this worker ended another way.
pub(crate) fn note_dead_timer() {
    with_worker(|w| {
        if let Some(w) = w {
            // SAFETY: as in `arm_timer`.
            unsafe { &mut *w.timers.get() }.note_dead();
        }
    })
}

thread_local! {
    /// Depth of `block_on` polls in progress on this thread's running fiber.
    /// A fiber never leaves its thread and cannot switch out while one is in
    /// progress, so a thread-local is exact.
    static BLOCK_ON_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Marks a `block_on` poll in progress (`docs/DESIGN.md`, "Nested polls
/// stay in place").
pub(crate) struct BlockOnPoll(());

impl BlockOnPoll {
    pub(crate) fn enter() -> BlockOnPoll {
        BLOCK_ON_DEPTH.with(|d| d.set(d.get() + 1));
        BlockOnPoll(())
    }
}

impl Drop for BlockOnPoll {
    fn drop(&mut self) {
        BLOCK_ON_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Whether the running fiber is inside a `block_on` poll.
pub(crate) fn in_block_on_poll() -> bool {
    BLOCK_ON_DEPTH.with(|d| d.get() > 0)
}

/// For a nested `block_on` that holds its worker: fire due timers and poll
/// the netpoller once without blocking.
pub(crate) fn drive_in_place() {
    with_worker(|w| {
        if let Some(w) = w {
            w.fire_timers(Instant::now());
            let poller = &w.sched.poller;
            if poller.has_registrations() && poller.try_lease() {
                // SAFETY: the loop is suspended inside `resume` and holds no
                // borrow of `events`.
                poller.poll(
                    unsafe { &mut *w.events.get() },
                    Some(std::time::Duration::ZERO),
                );
                poller.release_lease();
            }
        }
    })
}

/// The scheduler of the calling worker (borrowed), if on one.
pub(crate) fn with_scheduler<R>(f: impl FnOnce(Option<&Scheduler>) -> R) -> R {
    with_worker(|w| f(w.map(|w| &*w.sched)))
}

/// Queues a new fiber on the calling worker if it belongs to `sched`: on
/// the local queue, or on the inbox (waking a sleeper) when some worker
/// sleeps and the fiber may be stolen. Hands the fiber back otherwise.
pub(crate) fn push_new_here(sched: &Scheduler, fiber: FiberRef) -> Result<(), FiberRef> {
    with_worker(|w| match w {
        Some(w) if std::ptr::eq(Arc::as_ptr(&w.sched), sched) => {
            let pinned = fiber.header.owner.load(Ordering::Relaxed) != crate::fiber::NO_OWNER;
            // New work goes where other workers can take it (the inbox)
            // when this worker is stalled (its fiber blocks the thread in a
            // call), when a worker sleeps, or when this worker already has a
            // backlog of unstarted fibers: a fiber that spawns in a long
            // loop does not return to the loop that would shed its backlog,
            // and every fiber it starts late holds a stack longer.
            let shared = w.shared();
            let shared_only = !pinned
                && (shared.local.stalled.load(Ordering::Relaxed)
                    || sched.sleepers.load(Ordering::Relaxed) > 0);
            let backlog_cap = if pinned || sched.workers.len() == 1 {
                usize::MAX
            } else {
                LOCAL_SPAWN_BACKLOG
            };
            let for_inbox = if shared_only {
                Some(fiber)
            } else {
                w.with_local(|local| {
                    if local.stealable() >= backlog_cap {
                        return Some(fiber);
                    }
                    local.push(Entry::new(sched.stamp(), fiber));
                    None
                })
            };
            if let Some(fiber) = for_inbox {
                shared.inbox.push(fiber, || sched.stamp());
                sched.wake_one_sleeper();
            }
            w.count_spawned();
            Ok(())
        }
        _ => Err(fiber),
    })
}

/// Spawn-side services of the calling worker, if it belongs to `sched`:
/// a stack reservation from its credit cache and a fiber id from its block.
pub(crate) fn reserve_here(
    sched: &Scheduler,
    class: &'static crate::fiber::stack::SizeClass,
) -> Option<std::io::Result<(crate::fiber::stack::Reservation, u64)>> {
    with_worker(|w| {
        let w = w.filter(|w| std::ptr::eq(Arc::as_ptr(&w.sched), sched))?;
        // SAFETY: the loop borrows the pool only outside `resume` (module
        // docs), and this borrow ends before we return.
        let reservation = match unsafe { &mut *w.pool.get() }.reserve(class) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let (mut next, mut end) = w.ids.get();
        if next == end {
            next = crate::fiber::take_ids(ID_BLOCK);
            end = next + ID_BLOCK;
        }
        w.ids.set((next + 1, end));
        Some(Ok((reservation, next)))
    })
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
        fiber.header.slot.set(idx);
        self.slots[idx] = Some(fiber);
    }

    fn remove(&mut self, fiber: &FiberRef) -> Option<FiberRef> {
        let idx = fiber.header.slot.replace(usize::MAX);
        let taken = self.slots.get_mut(idx)?.take();
        self.free.push(idx);
        taken
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
    warm_malloc_arena();
    let _ = sched.workers[index].thread.set(thread::current());
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    sched.workers[index].tid.store(tid, Ordering::Relaxed);
    let worker = Worker {
        index,
        loop_holds: Cell::new(false),
        live: UnsafeCell::new(LiveTable {
            slots: Vec::new(),
            free: Vec::new(),
            started: 0,
        }),
        pool: UnsafeCell::new(StackPool::new(
            sched.config.max_pooled_stacks,
            sched.config.stack_class,
        )),
        batch: UnsafeCell::new(Vec::with_capacity(BATCH)),
        current: Cell::new(std::ptr::null()),
        ids: Cell::new((0, 0)),
        dispatches: Cell::new(0),
        dump_answered: Cell::new(0),
        last_sleep_short: Cell::new(false),
        timers: UnsafeCell::new(TimerHeap::default()),
        events: UnsafeCell::new(Vec::with_capacity(256)),
        last_poll: Cell::new(Instant::now()),
        timer_sample: Cell::new((Instant::now(), 0)),
        sched,
    };
    WORKER.with(|w| w.set(&worker));
    worker.shared().local.enter();
    worker.loop_holds.set(true);
    worker.run_loop();
    worker.stop_all();
    WORKER.with(|w| w.set(std::ptr::null()));
    let sched = worker.sched.clone();
    drop(worker);
    let mut running = sched
        .running_workers
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *running -= 1;
    sched.workers_done.notify_all();
}

impl Worker {
    fn shared(&self) -> &WorkerShared {
        &self.sched.workers[self.index]
    }

    /// The local queue, for the loop (which holds its lock).
    ///
    /// # Safety
    ///
    /// Only the loop calls this, between resumes, and the borrow ends
    /// before the next resume or `with_local`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn local(&self) -> &mut LocalQueue {
        debug_assert!(self.loop_holds.get());
        // SAFETY: the loop holds the local lock (caller), so neither a
        // thief nor a fiber of this worker touches the queue.
        unsafe { self.shared().local.get() }
    }

    /// Runs `f` on the local queue from any context on this thread: the
    /// loop's own (lock held) or a fiber's (takes the lock, which only a
    /// thief stealing from a stalled worker may hold meanwhile).
    fn with_local<R>(&self, f: impl FnOnce(&mut LocalQueue) -> R) -> R {
        if self.loop_holds.get() {
            // SAFETY: the loop holds the lock and no borrow of the queue
            // is live across this call (the loop's borrows are scoped).
            return f(unsafe { self.shared().local.get() });
        }
        let local = &self.shared().local;
        local.enter();
        // SAFETY: we are inside (see `SharedLocal`).
        let r = f(unsafe { local.get() });
        local.leave();
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

    /// Busy-worker duties, every 16 dispatches: fire due timers, and poll
    /// the netpoller without blocking at most once per `poll::CADENCE`.
    fn tick(&self) {
        // SAFETY: loop-only borrow.
        let no_timers = unsafe { &*self.timers.get() }.is_empty();
        let poller = &self.sched.poller;
        if no_timers && !poller.has_registrations() {
            return;
        }
        let now = Instant::now();
        self.fire_timers(now);
        if poller.has_registrations()
            && now.duration_since(self.last_poll.get()) >= crate::poll::CADENCE
        {
            self.last_poll.set(now);
            if poller.try_lease() {
                // SAFETY: loop-only borrow; delivering events may push to
                // our local queue, which is a different field.
                poller.poll(
                    unsafe { &mut *self.events.get() },
                    Some(std::time::Duration::ZERO),
                );
                poller.release_lease();
            }
        }
    }

    /// Fires this worker's due timers; returns how many fiber waits ended
    /// or wakers were woken.
    ///
    /// A fiber whose timer fired enters the service order by its deadline,
    /// not by the moment the loop noticed: it gets the stamp the clock had
    /// at the last dispatch before the deadline (`timer_sample`), so it runs
    /// ahead of every fiber queued after its deadline — a 10 ms sleep among
    /// yielders waits for the fiber running at its deadline, not for a pass.
    fn fire_timers(&self, now: Instant) -> usize {
        // SAFETY: loop-only borrow; firing pushes to `local`, not `timers`.
        let timers = unsafe { &mut *self.timers.get() };
        if timers.is_empty() {
            return 0;
        }
        let (sampled_at, sampled_stamp) = self.timer_sample.get();
        let head = self.with_local(|local| local.head_stamp());
        let fired = timers.fire_due(now, |deadline| {
            if deadline >= sampled_at {
                sampled_stamp
            } else {
                // Overdue by more than one dispatch: next in line.
                sampled_stamp.min(head)
            }
        });
        self.timer_sample.set((now, self.sched.current_stamp()));
        fired
    }

    /// Per dispatch: fire the timers that are due (cheap when none are
    /// armed: one emptiness check).
    #[inline]
    fn timers_per_dispatch(&self) {
        // SAFETY: loop-only borrow.
        if unsafe { &*self.timers.get() }.is_empty() {
            return;
        }
        self.fire_timers(Instant::now());
    }

    /// Hands half of the local backlog of unstarted fibers to sleepers.
    fn shed(&self) {
        // SAFETY: loop-only borrow.
        let local = unsafe { self.local() };
        if local.stealable() < 2 || self.sched.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let batch = local.take_stealable_newest_half();
        self.shared().inbox.merge(batch);
        self.sched.wake_one_sleeper();
    }

    fn run_loop(&self) {
        loop {
            if self.sched.is_shutdown() {
                return;
            }
            if self.sched.is_cancelling() && !self.shared().cancelled_all.load(Ordering::Relaxed) {
                self.cancel_all();
            }
            let gen = self.sched.dump_gen.load(Ordering::Relaxed);
            if gen != self.dump_answered.get() {
                self.answer_dump(gen);
            }
            self.timers_per_dispatch();
            if let Some(entry) = self.next() {
                self.dispatch(entry.fiber);
                let n = self.dispatches.get() + 1;
                self.dispatches.set(n);
                if n % 16 == 0 {
                    self.tick();
                    if n % SHED_EVERY == 0 {
                        self.shared().dispatches.store(n, Ordering::Relaxed);
                        self.shed();
                    }
                }
                continue;
            }
            if self.fire_timers(Instant::now()) > 0 || self.steal() {
                continue;
            }
            self.sleep();
        }
    }

    /// The oldest runnable entry among the local queue, the inbox and the
    /// global queue.
    fn next(&self) -> Option<Entry> {
        // SAFETY: the loop's borrows of `local`/`batch` end before any resume.
        let local = unsafe { self.local() };
        let local_head = local.head_stamp();
        let inbox = &self.shared().inbox;
        let inbox_head = inbox.head_stamp();
        let global_head = self.sched.global.head_stamp();
        if local_head <= inbox_head && local_head <= global_head {
            return local.pop();
        }
        // SAFETY: as above.
        let batch = unsafe { &mut *self.batch.get() };
        if inbox_head <= global_head {
            inbox.take_older(local_head.min(global_head), BATCH, batch);
        } else {
            let fair_share = self.sched.global.len() / self.sched.workers.len() + 1;
            self.sched
                .global
                .take_older(local_head.min(inbox_head), fair_share.min(BATCH), batch);
        }
        local.prepend(batch);
        local.pop()
    }

    /// Runs one fiber until it switches back, then files it.
    fn dispatch(&self, fiber: FiberRef) {
        let header = &fiber.header;
        if !header.is_started() {
            header.owner.store(self.index, Ordering::Release);
            // SAFETY: this worker now owns the unstarted fiber; the pool
            // borrow ends before any fiber runs.
            if !unsafe { fiber::prepare(&fiber, &mut *self.pool.get()) } {
                self.retire(&fiber, None);
                return;
            }
            // SAFETY: loop-only borrow, no resume inside.
            unsafe { &mut *self.live.get() }.insert(fiber.clone());
        }
        self.current.set(&fiber);
        let shared = self.shared();
        let seq = self.dispatches.get();
        shared.dispatch_seq.store(seq, Ordering::Relaxed);
        shared.running_fiber.store(header.id, Ordering::Relaxed);
        shared
            .running_header
            .store(std::ptr::from_ref(header).cast_mut(), Ordering::Release);
        // While the fiber runs, the local queue's lock is free: the fiber's
        // own wakes and spawns take it, and so may a thief if the fiber
        // blocks this thread in a call (the stall detector marks us).
        self.loop_holds.set(false);
        shared.local.leave();
        // SAFETY: this worker is the fiber's owner (just claimed, or it was
        // queued here because it is), the fiber is not queued elsewhere
        // (one token holder schedules it), and we are not on a fiber.
        let outcome = unsafe { fiber::resume(&fiber) };
        shared.local.enter();
        self.loop_holds.set(true);
        self.current.set(std::ptr::null());
        shared.running_fiber.store(0, Ordering::Relaxed);
        shared
            .running_header
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        if shared.local.stalled.load(Ordering::Relaxed) {
            shared.local.stalled.store(false, Ordering::Relaxed);
        }
        if shared.stalled_seq.load(Ordering::Relaxed) == seq {
            self.report_stall(&fiber);
        }
        match outcome {
            Outcome::Yielded => self.requeue(fiber, true),
            Outcome::Parked => {
                if !header.finish_park() {
                    // Woken between its switch and now: run it again.
                    self.requeue(fiber, false);
                }
            }
            Outcome::Finished(stack) => {
                // SAFETY: loop-only borrow.
                unsafe { &mut *self.live.get() }.remove(&fiber);
                self.retire(&fiber, stack);
            }
        }
    }

    /// This worker's part of a dump: one line per fiber it owns.
    fn report(&self) -> String {
        // SAFETY: the loop holds no borrow of `live` or `local` while this
        // runs (in the loop itself, or on a fiber of this worker).
        let live: Vec<&FiberRef> = unsafe { &*self.live.get() }
            .slots
            .iter()
            .flatten()
            .collect();
        let mut queued_new = 0;
        self.with_local(|local| {
            local.for_each(|f| queued_new += (!f.header.is_started()) as usize)
        });
        self.shared()
            .inbox
            .for_each(|f| queued_new += (!f.header.is_started()) as usize);
        let running = self.current_id();
        super::dump::worker_report(self.index, running, &live, queued_new)
    }

    fn current_id(&self) -> Option<u64> {
        // SAFETY: see `current_fiber`.
        unsafe { self.current.get().as_ref() }.map(|f| f.header.id)
    }

    #[cold]
    fn answer_dump(&self, gen: u64) {
        self.dump_answered.set(gen);
        let text = self.report();
        *self
            .shared()
            .dump_report
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = (gen, text);
        self.shared().dump_answered.store(gen, Ordering::Release);
    }

    /// Shutdown, phase one: cancel every fiber this worker owns (started
    /// ones wake from their waits and run their failure paths; queued
    /// unstarted ones will never run).
    #[cold]
    fn cancel_all(&self) {
        self.shared().cancelled_all.store(true, Ordering::Release);
        let mark = |f: &FiberRef| f.header.cancelled.store(true, Ordering::SeqCst);
        // SAFETY: loop-only borrows, ended before any fiber runs.
        unsafe { self.local() }.for_each(mark);
        self.shared().inbox.for_each(mark);
        self.sched.global.for_each(mark);
        // SAFETY: loop-only borrow, ended before any fiber runs.
        let live: Vec<FiberRef> = unsafe { &*self.live.get() }
            .slots
            .iter()
            .flatten()
            .cloned()
            .collect();
        for f in &live {
            crate::sched::park::cancel(f);
        }
    }

    /// Files a finished fiber: its stack to the pool, the counters, then
    /// its joiner (last, so a woken joiner sees the counters).
    fn retire(&self, fiber: &FiberRef, stack: Option<crate::fiber::stack::FiberStack>) {
        if let Some(stack) = stack {
            // SAFETY: loop-only borrow.
            let pool = unsafe { &mut *self.pool.get() };
            pool.put(stack);
            self.shared()
                .stacks_pooled
                .store(pool.len(), Ordering::Relaxed);
        }
        if fiber.header.state() & crate::fiber::state::CANCELLED != 0 && self.sched.is_cancelling()
        {
            self.sched.stopped.fetch_add(1, Ordering::Relaxed);
        }
        self.count_finished();
        fiber::complete(fiber, false);
    }

    /// The watchdog flagged the dispatch that just ended: name the fiber.
    #[cold]
    fn report_stall(&self, fiber: &FiberRef) {
        let shared = self.shared();
        shared.stalled_seq.store(u64::MAX, Ordering::Relaxed);
        let since = shared
            .stall_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let held = since.map(|s| s.elapsed().as_millis()).unwrap_or(0);
        let name = fiber
            .header
            .name
            .as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default();
        eprintln!(
            "spindle: fiber {}{name} blocked worker {} for {held} ms without a switch",
            fiber.header.id, self.index
        );
    }

    /// Queues a fiber that switched back runnable: it yielded, or it was
    /// woken between its park and the loop's `finish_park`.
    fn requeue(&self, fiber: FiberRef, yielded: bool) {
        let stamp = self.sched.stamp();
        // SAFETY: loop-only borrow.
        let local = unsafe { self.local() };
        local.push(Entry {
            stamp,
            fiber,
            yielded,
        });
        self.shared()
            .local_len
            .store(local.published_len(), Ordering::Relaxed);
    }

    /// Takes half of another worker's unstarted fibers.
    fn steal(&self) -> bool {
        let n = self.sched.workers.len();
        // SAFETY: loop-only borrow.
        let batch = unsafe { &mut *self.batch.get() };
        for k in 1..n {
            let victim = &self.sched.workers[(self.index + k) % n];
            if victim.local.stalled.load(Ordering::Acquire)
                && victim.local.stealable.load(Ordering::Relaxed) > 0
                && victim.local.try_steal_enter()
            {
                // Its running fiber blocks its thread: every unstarted fiber
                // queued there would wait for the call. Take the oldest
                // (a bounded batch: this worker comes back for the rest
                // once it has run them).
                // SAFETY: we are inside the victim's queue.
                let mut taken = unsafe { victim.local.get() }.take_stealable_oldest();
                victim.local.steal_leave();
                if !taken.is_empty() {
                    self.shared()
                        .steals
                        .fetch_add(taken.len() as u64, Ordering::Relaxed);
                    // SAFETY: loop-only borrow.
                    merge_into(unsafe { self.local() }, &mut taken);
                    return true;
                }
            }
            if victim.inbox.stealable() == 0 {
                continue;
            }
            if victim.inbox.steal_half(batch) > 0 {
                self.shared()
                    .steals
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                // Stolen entries may be older or newer than ours: merge by
                // stamp so the local queue stays in order.
                // SAFETY: loop-only borrow.
                let local = unsafe { self.local() };
                merge_into(local, batch);
                return true;
            }
        }
        false
    }

    /// Nothing to run: block in `epoll_wait` (holding the poller's lease)
    /// or on the thread parker, until woken or the next timer is due.
    fn sleep(&self) {
        // Spin before parking (`docs/DESIGN.md`, "Sleeping and spinning"),
        // only when the last sleep was cut
        // short by a wake — a closed loop with another thread, where a
        // sleep/wake costs tens of µs of wake-up latency. An idle worker's
        // sleeps are long, so it does not spin and burns nothing. The spin
        // watches the queues other workers feed; a lone worker's work comes
        // from the netpoller and timers, which no spin here would see, so it
        // goes straight to sleep.
        if self.last_sleep_short.get() && self.sched.workers.len() > 1 && self.spin_for_work() {
            return;
        }
        let slept_at = Instant::now();
        self.sleep_inner();
        self.last_sleep_short
            .set(slept_at.elapsed() < std::time::Duration::from_micros(SHORT_SLEEP_US));
    }

    /// Watches the shared queues for up to `SPIN_US`; true if work came.
    fn spin_for_work(&self) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            // Queue heads only (atomics, no lock); shutdown and dump
            // requests are seen by the full check before the real sleep.
            if self.shared().inbox.head_stamp() != super::queue::NO_STAMP
                || self.sched.global.head_stamp() != super::queue::NO_STAMP
            {
                return true;
            }
            if start.elapsed() >= std::time::Duration::from_micros(SPIN_US) {
                return false;
            }
        }
    }

    fn sleep_inner(&self) {
        // SAFETY: loop-only borrows.
        unsafe { &mut *self.pool.get() }.trim();
        // SAFETY: loop-only borrow.
        let next_deadline = unsafe { &*self.timers.get() }.next_deadline();
        let timeout = next_deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let poller = &self.sched.poller;
        let leased = poller.try_lease();
        let me = self.shared();
        let state = if leased { POLLING } else { SLEEPING };
        me.sleep.store(state, Ordering::SeqCst);
        self.sched.sleepers.fetch_add(1, Ordering::SeqCst);
        // SAFETY: loop-only borrow. A waker called on this thread (a timer
        // that woke a future) pushes to the local queue, which no other
        // thread's wake would announce.
        let local_work = unsafe { self.local() }.len() > 0;
        if local_work || self.sched.has_visible_work(self.index) || self.stealable_elsewhere() {
            self.wake_self(state);
            if leased {
                poller.release_lease();
            }
            return;
        }
        if leased {
            // SAFETY: loop-only borrow.
            let events = unsafe { &mut *self.events.get() };
            poller.poll(events, timeout);
            self.last_poll.set(Instant::now());
            self.wake_self(state);
            poller.release_lease();
            // Hand the lease on: if others sleep on their parker while we go
            // back to work, one of them should be the one in epoll_wait.
            // SAFETY: loop-only borrow.
            let have_work = unsafe { self.local() }.len() > 0;
            if have_work && self.sched.sleepers.load(Ordering::SeqCst) > 0 {
                self.sched.wake_one_sleeper();
            }
        } else {
            let until = next_deadline;
            while me.sleep.load(Ordering::SeqCst) == SLEEPING && !self.sched.is_shutdown() {
                match until {
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        thread::park_timeout(d - now);
                    }
                    None => thread::park(),
                }
            }
            self.wake_self(state);
        }
    }

    /// Leaves a sleep state this worker entered itself, unless a waker
    /// already did (and counted it).
    fn wake_self(&self, state: u8) {
        if self
            .shared()
            .sleep
            .compare_exchange(state, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.sched.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn stealable_elsewhere(&self) -> bool {
        self.sched.workers.iter().enumerate().any(|(i, w)| {
            i != self.index
                && (w.inbox.stealable() > 0
                    || (w.local.stalled.load(Ordering::Acquire)
                        && w.local.stealable.load(Ordering::Relaxed) > 0))
        })
    }

    /// Runtime shutdown: discard queued unstarted fibers, unwind every
    /// started one this worker owns. Repeats while stopping fibers makes
    /// more work (a destructor that spawns or wakes).
    fn stop_all(&self) {
        loop {
            let mut stopped_any = false;
            let mut queued: Vec<Entry> = Vec::new();
            {
                // SAFETY: no fiber runs now; loop-only borrow.
                let local = unsafe { self.local() };
                while let Some(e) = local.pop() {
                    queued.push(e);
                }
            }
            queued.extend(self.shared().inbox.drain_all());
            queued.extend(self.sched.global.drain_all());
            for entry in queued {
                if !entry.fiber.header.is_started() {
                    self.count_finished();
                    self.sched.stopped.fetch_add(1, Ordering::Relaxed);
                    fiber::discard_unstarted(&entry.fiber);
                    stopped_any = true;
                }
                // Started ones are in the live table, stopped below.
            }
            // SAFETY: no fiber runs now; the borrow ends before `stop`.
            let live = unsafe { &mut *self.live.get() }.drain();
            for f in live {
                stopped_any = true;
                self.current.set(&f);
                // SAFETY: this worker owns `f`; it is not running, and any
                // queue entry for it was dropped above.
                let stack = unsafe { fiber::stop(&f) };
                self.current.set(std::ptr::null());
                if let Some(stack) = stack {
                    // SAFETY: loop-only borrow.
                    unsafe { &mut *self.pool.get() }.put(stack);
                }
                self.count_finished();
                self.sched.stopped.fetch_add(1, Ordering::Relaxed);
                fiber::complete(&f, true);
            }
            if !stopped_any {
                return;
            }
        }
    }
}

/// Merges stamp-ordered `batch` into stamp-ordered `local`.
fn merge_into(local: &mut LocalQueue, batch: &mut Vec<Entry>) {
    if local.len() == 0 || batch.last().is_some_and(|e| e.stamp <= local.head_stamp()) {
        local.prepend(batch);
        return;
    }
    let mut existing = Vec::with_capacity(local.len());
    while let Some(e) = local.pop() {
        existing.push(e);
    }
    let mut merged = Vec::with_capacity(existing.len() + batch.len());
    let (mut a, mut b) = (existing.into_iter().peekable(), batch.drain(..).peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.stamp <= y.stamp,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        merged.push(if take_a { a.next() } else { b.next() }.expect("peeked"));
    }
    local.prepend(&mut merged);
}
