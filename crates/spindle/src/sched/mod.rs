//! The scheduler: which fiber runs next, on which worker.
//!
//! # Model
//!
//! A runtime has N *workers*, OS threads that each loop over a run queue and
//! resume fibers. Every runnable fiber sits in exactly one of:
//!
//! * its worker's [`LocalQueue`] — private, lock-free: fibers that worker
//!   requeued itself (a yield, a wake made on that worker);
//! * its worker's *inbox* ([`SharedQueue`]) — spawns made on that worker
//!   and wakes from other threads;
//! * the *global* queue — spawns from outside the runtime.
//!
//! # Service order (`docs/DESIGN.md`, "Service order")
//!
//! Every push is stamped from a clock: the worker's own for its local queue
//! and its inbox (`WorkerShared::clock`, also taken by another thread
//! pushing into that inbox), the global queue's for the global queue; the
//! clocks are kept in step where entries cross between them
//! ([`Scheduler::catch_up`], [`Scheduler::global_catch_up`]). A worker
//! looks at the heads of its local queue, its inbox and the global queue
//! and runs the oldest, so no fiber runs while an older runnable one waits
//! on that worker: not a spawn ahead of a woken fiber, not a yielder ahead
//! of anything that became runnable since it yielded (`yield_now`
//! re-stamps).
//! Entries taken from a shared queue are moved, in a batch that is still
//! older than the other heads, to the front of the local queue, which keeps
//! lock traffic to one acquisition per batch.
//!
//! # Where a fiber runs
//!
//! A fiber is started by the first worker that dequeues it and stays there
//! (thread-locals and `!Send` locals held across a wait stay sound). A wake
//! from another thread hands the fiber to its owner's [`mailbox`] if the
//! owner spins for work, else pushes it to the owner's inbox and wakes the
//! owner if it sleeps; a wake on the owner itself is a plain local push. An
//! idle worker *steals* half of a victim's not-yet-started fibers (started
//! ones never move). `spawn_local` pins a fiber to the spawning worker.
//!
//! # Sleeping
//!
//! A worker with nothing to run and nothing to steal sleeps (`worker.rs`,
//! zero CPU) after announcing it in its sleep state; pushers that a sleeper
//! must not miss (the global queue, wakes of its own fibers) check that
//! state after their push, with a SeqCst fence on both sides, so a push
//! cannot slip between the sleeper's last look and its sleep.
//!
//! # Spinning before sleeping
//!
//! A worker whose previous sleep was cut short by a wake within 200 µs is
//! in a closed loop with another thread (a channel ping-pong across
//! workers); before its next sleep it watches its queue heads and its
//! mailbox for up to 30 µs. A sleep/wake pair costs tens of µs of wake-up
//! latency on a VM; measured, it took a cross-worker channel round trip
//! from 205 µs to ~3 µs, and looking at the queue heads after every pause
//! instead of every 64 to under 0.5 µs. Idle workers sleep long, stop
//! spinning, and burn nothing.
//!
//! # Spreading spawned fibers
//!
//! A spawn made on a worker goes to that worker's *local* queue — no lock —
//! unless some worker sleeps, in which case it goes to the inbox, where a
//! thief can see it, and one sleeper is woken. A worker that keeps finding
//! sleepers while it has a local backlog of unstarted fibers *sheds* half of
//! it to its inbox every [`worker::SHED_EVERY`] dispatches and wakes a
//! sleeper. So a fork/join loop with nobody idle touches no shared state
//! but the stamp clock, and idle workers still get work. A missed wake costs
//! parallelism, never progress: the spawning worker runs its own backlog.
//!
//! # Rejected
//!
//! * A lock-free Chase-Lev deque per worker (tokio's shape): stealing must
//!   skip started fibers, which a ring buffer cannot do without moving them;
//!   the inbox mutex is uncontended in the common case and one batch per
//!   lock keeps it off the hot path.
//! * Migrating started fibers (Go's full M:N): unsound for thread-locals and
//!   `!Send` locals held across a wait; left out rather than offered as an
//!   `unsafe` opt-in whose contract users would have to audit.

pub(crate) mod diag;
pub(crate) mod handshake;
mod join;
pub(crate) mod mailbox;
pub(crate) mod park;
pub(crate) mod queue;
pub(crate) mod scope;
pub(crate) mod sleep_word;
pub(crate) mod spawn;
pub(crate) mod time_source;
#[cfg(feature = "tokio")]
pub(crate) mod tokio_context;
pub(crate) mod wait_queue;

pub(crate) mod worker;

use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::Thread;

use crate::fiber::stack::SizeClass;
use crate::fiber::{FiberRef, Placement, Schedule, NO_OWNER};
use crate::poll::Poller;
use queue::{SharedQueue, Stamp};

/// Settings a scheduler is built with (from `RuntimeBuilder`).
pub(crate) struct Config {
    pub(crate) workers: usize,
    pub(crate) stack_class: &'static SizeClass,
    pub(crate) max_pooled_stacks: usize,
    pub(crate) thread_name: String,
    /// Report a fiber that holds its worker longer than this.
    pub(crate) stall_warning: Option<std::time::Duration>,
    /// Run on a paused clock (`time_source`).
    pub(crate) start_paused: bool,
    /// Each worker prepares glibc's malloc arena of its thread at start
    /// (`worker::warm_malloc_arena`).
    pub(crate) warm_malloc: bool,
    /// The tokio runtime whose context the workers run in (the shared one
    /// when `None`).
    #[cfg(feature = "tokio")]
    pub(crate) tokio_handle: Option<tokio::runtime::Handle>,
}

/// Pads a value to its own cache line so hot counters do not share one.
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

/// The shared state of one runtime's scheduler.
pub(crate) struct Scheduler {
    pub(crate) config: Config,
    /// The runtime's netpoller (see `poll`).
    pub(crate) poller: Arc<Poller>,
    pub(crate) workers: Box<[WorkerShared]>,
    pub(crate) global: SharedQueue,
    /// The time every deadline of this runtime is measured on.
    pub(crate) time: time_source::TimeSource,
    /// Fibers of this runtime waiting for a blocking-pool job: a paused
    /// clock does not auto-advance while one runs (it takes real time).
    pub(crate) blocking_waits: AtomicUsize,
    /// The global queue's stamp clock (see "Service order" above).
    clock: CachePadded<AtomicU64>,
    /// Fibers spawned, and finished, by threads that are not this runtime's
    /// workers (workers count their own in `WorkerShared`).
    spawned_elsewhere: AtomicU64,
    finished_elsewhere: AtomicU64,
    pub(crate) sleepers: AtomicUsize,
    /// Shutdown has begun: every fiber is cancelled (phase one).
    pub(crate) cancelling: AtomicBool,
    /// Workers stop and unwind what is left (phase two).
    pub(crate) shutdown: AtomicBool,
    /// Workers still running their loop; shutdown waits for zero.
    pub(crate) running_workers: Mutex<usize>,
    pub(crate) workers_done: Condvar,
    /// Signalled (with `running_workers`' lock) when, during shutdown's
    /// phase one, the last live fiber finishes: `Runtime::stop` waits on it
    /// for the grace period instead of polling.
    pub(crate) fibers_done: Condvar,
    /// Fibers stopped by shutdown (unwound or never started).
    pub(crate) stopped: AtomicUsize,
    /// Waits of this runtime's fibers published and not yet ended, of
    /// those counted off its workers (the workers count theirs in
    /// `WorkerShared::waits_begun`/`waits_ended`; `wait_registrations`
    /// sums all).
    pub(crate) registrations: AtomicUsize,
    /// Bumped to ask every worker for its part of a dump (see `dump`).
    pub(crate) dump_gen: AtomicU64,
    /// Callers of `dump` waiting for the workers' answers.
    pub(crate) dump_waiters: Mutex<wait_queue::WaitQueue>,
}

/// What other threads may see and touch of a worker.
pub(crate) struct WorkerShared {
    pub(crate) inbox: SharedQueue,
    /// Where a waker on another thread hands a fiber straight to this
    /// worker while it spins for work (`mailbox`), on a line of its own.
    pub(crate) mailbox: CachePadded<mailbox::Mailbox<FiberRef>>,
    /// The clock this worker's local queue and inbox are stamped from
    /// (see "Service order" above), on a line of its own: the worker
    /// stamps every push of its own, other threads only their wakes into
    /// its inbox.
    clock: CachePadded<AtomicU64>,
    /// The worker's private FIFO, lockable by a thief while it is stalled.
    pub(crate) local: queue::SharedLocal,
    sleep: SleepWord,
    thread: OnceLock<Thread>,
    pub(crate) steals: AtomicU64,
    pub(crate) dispatches: AtomicU64,
    /// Fibers spawned on, and finished by, this worker. Written only by the
    /// worker's thread (load + store, no read-modify-write).
    pub(crate) spawned: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) local_len: AtomicUsize,
    pub(crate) stacks_pooled: AtomicUsize,
    /// Fiber waits published and ended on this worker (only it writes
    /// them: no locked RMW per wait); a wait may end on another worker, so
    /// only the sums over all workers mean anything (`wait_registrations`).
    pub(crate) waits_begun: AtomicU64,
    pub(crate) waits_ended: AtomicU64,
    /// Entries in the worker's timer heap, as of its last change there.
    pub(crate) timer_entries: AtomicUsize,
    /// Id of the fiber the worker is running (0: none), for diagnostics.
    pub(crate) running_fiber: AtomicU64,
    /// Header of the fiber being resumed (null: none). Another thread may
    /// read through it only while inside `local` (see `SharedLocal`): the
    /// loop cannot leave the dispatch, and drop its reference to the fiber,
    /// before it has entered again.
    pub(crate) running_header: AtomicPtr<crate::fiber::FiberHeader>,
    /// The worker thread's kernel thread id (0 until it starts), so the
    /// watchdog can say what a stalled worker's thread is blocked in.
    pub(crate) tid: AtomicI32,
    /// This worker's answer to the latest dump request: (generation, text).
    pub(crate) dump_report: Mutex<(u64, String)>,
    /// The generation of the last dump request this worker answered (read
    /// without the lock on the idle path).
    pub(crate) dump_answered: AtomicU64,
    /// This worker has cancelled its fibers for shutdown.
    pub(crate) cancelled_all: AtomicBool,
    /// Bumped per dispatch; the watchdog compares samples of it.
    pub(crate) dispatch_seq: AtomicU64,
    /// The dispatch the watchdog found stalled, and since when.
    pub(crate) stalled_seq: AtomicU64,
    pub(crate) stall_since: Mutex<Option<std::time::Instant>>,
    /// The worker's earliest timer, published before it sleeps on a paused
    /// clock (`TimeSource::encode`), for the auto-advance.
    pub(crate) next_deadline: AtomicU64,
}

use sleep_word::{SleepWord, AWAKE, POLLING, SLEEPING};

impl WorkerShared {
    fn new() -> WorkerShared {
        WorkerShared {
            inbox: SharedQueue::new(),
            mailbox: CachePadded(mailbox::Mailbox::new()),
            clock: CachePadded(AtomicU64::new(1)),
            local: queue::SharedLocal::new(),
            sleep: SleepWord::new(),
            thread: OnceLock::new(),
            steals: AtomicU64::new(0),
            dispatches: AtomicU64::new(0),
            spawned: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            local_len: AtomicUsize::new(0),
            stacks_pooled: AtomicUsize::new(0),
            waits_begun: AtomicU64::new(0),
            waits_ended: AtomicU64::new(0),
            timer_entries: AtomicUsize::new(0),
            running_fiber: AtomicU64::new(0),
            running_header: AtomicPtr::new(std::ptr::null_mut()),
            tid: AtomicI32::new(0),
            dump_report: Mutex::new((0, String::new())),
            dump_answered: AtomicU64::new(0),
            cancelled_all: AtomicBool::new(false),
            dispatch_seq: AtomicU64::new(0),
            stalled_seq: AtomicU64::new(u64::MAX),
            stall_since: Mutex::new(None),
            next_deadline: AtomicU64::new(time_source::NO_DEADLINE),
        }
    }
}

impl Scheduler {
    pub(crate) fn new(config: Config) -> std::io::Result<Scheduler> {
        crate::membarrier::init();
        let workers = (0..config.workers).map(|_| WorkerShared::new()).collect();
        let poller = Arc::new(Poller::new()?);
        crate::poll::publish(&poller);
        let time = if config.start_paused {
            time_source::TimeSource::paused()
        } else {
            time_source::TimeSource::real()
        };
        Ok(Scheduler {
            poller,
            running_workers: Mutex::new(config.workers),
            config,
            workers,
            global: SharedQueue::new(),
            time,
            blocking_waits: AtomicUsize::new(0),
            clock: CachePadded(AtomicU64::new(1)),
            spawned_elsewhere: AtomicU64::new(0),
            finished_elsewhere: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            cancelling: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            workers_done: Condvar::new(),
            fibers_done: Condvar::new(),
            stopped: AtomicUsize::new(0),
            registrations: AtomicUsize::new(0),
            dump_gen: AtomicU64::new(0),
            dump_waiters: Mutex::new(wait_queue::WaitQueue::new()),
        })
    }

    /// The stamp the next push to worker `index`'s queues would get
    /// (entries queued there from now on are at least this).
    #[inline]
    pub(crate) fn current_stamp_on(&self, index: usize) -> Stamp {
        self.workers[index].clock.0.load(Ordering::Relaxed)
    }

    /// Next stamp of worker `index`'s service order, for a push to its
    /// local queue or its inbox.
    #[inline]
    pub(crate) fn stamp_on(&self, index: usize) -> Stamp {
        self.workers[index].clock.0.fetch_add(1, Ordering::Relaxed)
    }

    /// Moves worker `index`'s clock to at least `stamp`: what it pushes
    /// from now on goes behind an entry stamped `stamp` on another clock
    /// that it has seen (the global queue's head, a stolen batch).
    #[inline]
    pub(crate) fn catch_up(&self, index: usize, stamp: Stamp) {
        let clock = &self.workers[index].clock.0;
        if clock.load(Ordering::Relaxed) < stamp {
            clock.fetch_max(stamp, Ordering::Relaxed);
        }
    }

    /// Moves the global queue's clock to at least worker `index`'s: a
    /// spawn from outside pushed from now on goes behind what that worker
    /// has queued (called when the worker takes from the global queue, so
    /// a stream of such spawns cannot keep looking older than its queue).
    pub(crate) fn global_catch_up(&self, index: usize) {
        let own = self.current_stamp_on(index);
        if self.clock.0.load(Ordering::Relaxed) < own {
            self.clock.0.fetch_max(own, Ordering::Relaxed);
        }
    }

    /// Next stamp of the global queue.
    #[inline]
    fn global_stamp(&self) -> Stamp {
        self.clock.0.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    pub(crate) fn is_cancelling(&self) -> bool {
        self.cancelling.load(Ordering::Acquire)
    }

    /// Waits published and not yet ended: plain threads' and off-worker
    /// ones (`registrations`) and the workers' own counts. The counters are
    /// read one after another, so a wait that begins on one worker while
    /// its end on another is read could show as ended first: clamped at 0.
    pub(crate) fn wait_registrations(&self) -> usize {
        let mut open = self.registrations.load(Ordering::Relaxed) as i64;
        for w in self.workers.iter() {
            open += w.waits_begun.load(Ordering::Acquire) as i64;
            open -= w.waits_ended.load(Ordering::Acquire) as i64;
        }
        open.max(0) as usize
    }

    /// Fibers spawned and not yet finished (running, runnable or parked).
    pub(crate) fn live_fibers(&self) -> usize {
        let mut spawned = self.spawned_elsewhere.load(Ordering::Acquire);
        let mut finished = self.finished_elsewhere.load(Ordering::Acquire);
        for w in self.workers.iter() {
            spawned += w.spawned.load(Ordering::Acquire);
            finished += w.finished.load(Ordering::Acquire);
        }
        spawned.saturating_sub(finished) as usize
    }

    /// Counts a spawn made off the workers.
    pub(crate) fn count_spawned_elsewhere(&self) {
        self.spawned_elsewhere.fetch_add(1, Ordering::AcqRel);
    }

    /// During shutdown's phase one: tells a waiting `Runtime::stop` when no
    /// fiber is left. Called after a fiber's finish was counted.
    pub(crate) fn note_finished_while_cancelling(&self) {
        if self.live_fibers() == 0 {
            // Taking the lock orders this wake after the waiter's check.
            let _running = self
                .running_workers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.fibers_done.notify_all();
        }
    }

    /// Counts a fiber retired off the workers (shutdown leftovers).
    pub(crate) fn count_finished_elsewhere(&self) {
        self.finished_elsewhere.fetch_add(1, Ordering::AcqRel);
    }

    /// Queues a newly spawned fiber: on the spawning worker's own queues
    /// when called on one of this scheduler's workers, else on the global
    /// queue (waking a sleeping worker for it).
    pub(crate) fn submit_new(&self, fiber: FiberRef) {
        if let Err(fiber) = worker::push_new_here(self, fiber) {
            self.global.push(fiber, || self.global_stamp());
            fence(Ordering::SeqCst);
            self.wake_one_sleeper();
        }
    }

    /// Queues a new fiber pinned to worker `owner`: locally if that is the
    /// calling worker, else in its inbox (and wakes it).
    pub(crate) fn submit_pinned(&self, fiber: FiberRef, owner: usize) {
        let here =
            worker::with_current(|h| h.is_some_and(|h| h.belongs_to(self) && h.index == owner));
        if here {
            if let Err(fiber) = worker::push_new_here(self, fiber) {
                self.push_remote(owner, fiber);
            }
        } else {
            self.count_spawned_elsewhere();
            self.push_remote(owner, fiber);
        }
    }

    /// Pushes a woken fiber to its owner from another thread: into its
    /// mailbox if it spins for work (it needs no wake then), else into its
    /// inbox, waking it.
    fn push_remote(&self, owner: usize, fiber: FiberRef) {
        let w = &self.workers[owner];
        let Err(fiber) = w.mailbox.0.offer(fiber) else {
            return;
        };
        w.inbox.push(fiber, || self.stamp_on(owner));
        fence(Ordering::SeqCst);
        self.wake_worker(owner);
    }

    /// Wakes worker `index` if it sleeps.
    pub(crate) fn wake_worker(&self, index: usize) {
        let w = &self.workers[index];
        match w.sleep.wake() {
            SLEEPING => {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                if let Some(t) = w.thread.get() {
                    t.unpark();
                }
            }
            POLLING => {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                self.poller.notify();
            }
            _ => {}
        }
    }

    pub(crate) fn wake_one_sleeper(&self) {
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        for (i, w) in self.workers.iter().enumerate() {
            if !w.sleep.is(AWAKE) {
                self.wake_worker(i);
                return;
            }
        }
    }

    /// After a paused clock moved: wakes the sleeping workers whose
    /// earliest timer is now due (awake ones fire theirs in their loop).
    pub(crate) fn wake_due_workers(&self) {
        let now = self.time.encode(Some(self.time.now()));
        for (i, w) in self.workers.iter().enumerate() {
            if w.next_deadline.load(Ordering::SeqCst) <= now {
                self.wake_worker(i);
            }
        }
    }

    pub(crate) fn wake_all(&self) {
        for i in 0..self.workers.len() {
            self.wake_worker(i);
            // A worker that is awake but about to sleep sees `shutdown`.
            if let Some(t) = self.workers[i].thread.get() {
                t.unpark();
            }
        }
        self.poller.notify();
    }

    /// Whether anything is queued where worker `index` would look.
    pub(crate) fn has_visible_work(&self, index: usize) -> bool {
        self.workers[index].inbox.head_stamp() != queue::NO_STAMP
            || self.global.head_stamp() != queue::NO_STAMP
            || self.dump_gen.load(Ordering::Acquire)
                != self.workers[index].dump_answered.load(Ordering::Acquire)
            || self.is_shutdown()
            || (self.is_cancelling() && !self.workers[index].cancelled_all.load(Ordering::Acquire))
    }
}

impl Scheduler {
    /// The part of a schedule done from a thread that is not the fiber's
    /// owner worker: through the owner's inbox, waking it.
    fn schedule_elsewhere(&self, fiber: FiberRef, owner: usize, placement: Placement) {
        if placement == Placement::Urgent {
            self.workers[owner].inbox.push_urgent(fiber);
            fence(Ordering::SeqCst);
            self.wake_worker(owner);
        } else {
            // A stamp given by a timer of the owner is kept only on the
            // owner; from another thread the fiber queues behind what is
            // there (timers of a worker fire on that worker).
            self.push_remote(owner, fiber);
        }
    }
}

impl Schedule for Scheduler {
    fn schedule(&self, fiber: FiberRef, placement: Placement) {
        let owner = fiber.header.owner.load(Ordering::Acquire);
        debug_assert_ne!(owner, NO_OWNER, "only started fibers park");
        if let Err(fiber) = worker::push_if_owner(self, fiber, owner, placement) {
            self.schedule_elsewhere(fiber, owner, placement);
        }
    }

    fn schedule_owned(&self, fiber: FiberRef, placement: Placement) -> Option<FiberRef> {
        let owner = fiber.header.owner.load(Ordering::Acquire);
        debug_assert_ne!(owner, NO_OWNER, "only started fibers park");
        // On the owner worker, that worker's own reference to this
        // scheduler keeps `self` alive (and `push_if_owner` does not use it
        // after the push); elsewhere a reference to the fiber does, given
        // back to the caller (see the trait's contract).
        match worker::push_if_owner(self, fiber, owner, placement) {
            Ok(()) => None,
            Err(fiber) => {
                let keep = fiber.clone();
                self.schedule_elsewhere(fiber, owner, placement);
                Some(keep)
            }
        }
    }

    fn unpark_owner_thread(&self, fiber: &FiberRef) {
        let owner = fiber.header.owner.load(Ordering::Acquire);
        if let Some(t) = self.workers.get(owner).and_then(|w| w.thread.get()) {
            t.unpark();
        }
    }

    fn count_wait(&self, published: bool) {
        if worker::count_wait_here(self, published) {
            return;
        }
        if published {
            self.registrations.fetch_add(1, Ordering::Relaxed);
        } else {
            self.registrations.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
