//! How code on a worker thread — the loop or one of its fibers — reaches
//! the worker: the thread-local, [`with_current`], and the services a fiber
//! asks of its worker.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Worker, ID_BLOCK, LOCAL_SPAWN_BACKLOG};
use crate::fiber::{self, FiberRef};
use crate::poll::timer::TimerTarget;
use crate::sched::queue::Entry;
use crate::sched::Scheduler;

thread_local! {
    static WORKER: Cell<*const Worker> = const { Cell::new(std::ptr::null()) };
}

/// Publishes `worker` as this thread's (`run`, before the loop starts).
pub(super) fn enter(worker: &Worker) {
    WORKER.with(|w| w.set(worker));
}

/// Withdraws this thread's worker (`run`, after the loop ended).
pub(super) fn leave() {
    WORKER.with(|w| w.set(std::ptr::null()));
}

/// Runs `f` with this thread's worker, if it is one.
#[inline]
fn with_worker<R>(f: impl FnOnce(Option<&Worker>) -> R) -> R {
    let ptr = WORKER.with(|w| w.get());
    // SAFETY: WORKER points at the `Worker` on this thread's stack between
    // `enter` and `leave` (both in `run`, around the loop), and is null
    // otherwise.
    f(unsafe { ptr.as_ref() })
}

/// The calling thread's worker, as the rest of the crate sees it.
#[derive(Clone, Copy)]
pub(crate) struct Here<'a> {
    /// The runtime the worker belongs to.
    pub(crate) sched: &'a Arc<Scheduler>,
    /// The worker's index in it.
    pub(crate) index: usize,
}

impl Here<'_> {
    /// Whether this worker belongs to `sched`.
    pub(crate) fn belongs_to(&self, sched: &Scheduler) -> bool {
        std::ptr::eq(Arc::as_ptr(self.sched), sched)
    }
}

/// Runs `f` with the calling thread's worker (`None` off the workers): the
/// one way code outside the worker asks where it runs.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<Here<'_>>) -> R) -> R {
    with_worker(|w| {
        f(w.map(|w| Here {
            sched: &w.sched,
            index: w.index,
        }))
    })
}

/// The time on the calling worker's runtime (paused or real); the real
/// clock off the workers.
#[inline]
pub(crate) fn now() -> Instant {
    with_worker(|w| w.map_or_else(Instant::now, |w| w.sched.time.now()))
}

/// Lends the calling worker a reading of its runtime's clock that the
/// running fiber took just before it parks (`None`: takes it back), for
/// the loop's next look at the timers (`Worker::reading_at_park`).
#[inline]
pub(crate) fn lend_reading(reading: Option<Instant>) {
    with_worker(|w| {
        if let Some(w) = w {
            w.reading_at_park.set(reading);
        }
    })
}

/// Whether the calling worker's runtime's clock has reached `deadline`
/// (`TimeSource::reached`); the real clock off the workers.
#[inline]
pub(crate) fn reached(deadline: Instant) -> bool {
    with_worker(|w| match w {
        Some(w) => w.sched.time.reached(deadline),
        None => Instant::now() >= deadline,
    })
}

/// A deadline `after` from now on the calling worker's runtime, for a
/// timeout that may end a little late (`TimeSource::deadline_after`); from
/// the real clock off the workers.
#[inline]
pub(crate) fn deadline_after(after: Duration) -> Option<Instant> {
    with_worker(|w| match w {
        Some(w) => w.sched.time.deadline_after(after),
        None => Instant::now().checked_add(after),
    })
}

/// The calling worker's part of a dump (called on a fiber of it).
pub(crate) fn report_here() -> String {
    with_worker(|w| w.map(|w| w.report()).unwrap_or_default())
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

/// The fiber running on this thread, as a reference that owns no count of
/// its own (two locked updates of the fiber's count fewer than
/// [`current_fiber`]'s clone and its drop). Clones of it count as usual.
///
/// # Safety
///
/// The caller must not drop the returned reference (it is `ManuallyDrop`;
/// taking it out is the caller's promise not to drop that either), and must
/// not use it once the running fiber has finished. A fiber's own wait,
/// made on the fiber, meets the second: the fiber cannot finish inside it.
pub(crate) unsafe fn current_fiber_uncounted() -> Option<std::mem::ManuallyDrop<FiberRef>> {
    with_worker(|w| {
        let w = w?;
        // SAFETY: `current` points at the loop's `FiberRef` while that fiber
        // runs (it is set around `resume` and `stop`), else it is null.
        let fiber = unsafe { w.current.get().as_ref() }?;
        // SAFETY: `Arc::as_ptr` is the pointer `Arc::into_raw` gives, so
        // `from_raw` rebuilds the same `Arc` without touching its count.
        // The count it stands for is held elsewhere for as long as the
        // fiber has not finished: from its start the worker's live table
        // holds one (`run.rs`, taken out only when the fiber finishes), and
        // a runtime stop, which drains that table, holds one while it
        // unwinds the fiber (`shutdown.rs`); a fiber a stop cannot unwind
        // is never resumed again. Never dropped (the caller's promise), it
        // gives back no count it did not take.
        Some(std::mem::ManuallyDrop::new(unsafe {
            Arc::from_raw(Arc::as_ptr(fiber))
        }))
    })
}

/// Index of the calling thread's worker in its runtime (`spindle::worker_id`).
pub(crate) fn worker_index() -> Option<usize> {
    with_worker(|w| w.map(|w| w.index))
}

/// How many workers the calling thread's runtime has
/// (`spindle::worker_count`).
pub(crate) fn worker_count() -> Option<usize> {
    with_worker(|w| w.map(|w| w.sched.workers.len()))
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
                    let stamp = w.stamp();
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

/// Counts a fiber wait published (`true`) or ended on the calling worker,
/// if it belongs to `sched`; false when the caller must count it elsewhere.
#[inline]
pub(crate) fn count_wait_here(sched: &Scheduler, published: bool) -> bool {
    with_worker(|w| match w {
        Some(w) if std::ptr::eq(Arc::as_ptr(&w.sched), sched) => {
            w.count_wait(published);
            true
        }
        _ => false,
    })
}

/// Arms a timer on the calling worker. Must be called on a fiber (whose
/// worker is the only one that will ever run it).
pub(crate) fn arm_timer(deadline: Instant, target: TimerTarget) {
    with_worker(|w| {
        let w = w.expect("spindle: timers are armed on a worker");
        w.state.with(|s| {
            if s.timers.is_empty() {
                // The loop samples the clock only while timers are armed.
                w.timer_sample.set((w.sched.time.now(), w.current_stamp()));
            }
            s.timers.arm(deadline, target);
            w.publish_timer_entries(s.timers.len());
        })
    })
}

/// A wait whose timer is armed on this worker ended another way.
pub(crate) fn note_dead_timer() {
    with_worker(|w| {
        if let Some(w) = w {
            w.state.with(|s| {
                s.timers.note_dead();
                w.publish_timer_entries(s.timers.len());
            });
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
            w.fire_timers(w.sched.time.now());
            let poller = &w.sched.poller;
            if poller.has_registrations() && poller.try_lease() {
                w.poll_events(Some(std::time::Duration::ZERO));
                poller.release_lease();
            }
        }
    })
}

/// Yields the running fiber in place when nothing else could run instead
/// (see `Worker::yield_in_place`); false when the caller must switch.
#[inline]
pub(crate) fn yield_in_place() -> bool {
    with_worker(|w| w.is_some_and(|w| w.yield_in_place()))
}

/// Queues a new fiber on the calling worker if it belongs to `sched`: on
/// the local queue, or on the inbox (waking a sleeper) when some worker
/// sleeps and the fiber may be stolen. Hands the fiber back otherwise.
pub(crate) fn push_new_here(sched: &Scheduler, fiber: FiberRef) -> Result<(), FiberRef> {
    with_worker(|w| match w {
        Some(w) if std::ptr::eq(Arc::as_ptr(&w.sched), sched) => {
            let pinned = !fiber.header.owner.is_none(Ordering::Relaxed);
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
                    local.push(Entry::new(w.stamp(), fiber));
                    None
                })
            };
            if let Some(fiber) = for_inbox {
                shared.inbox.push(fiber, || w.stamp());
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
        let reservation = match w.state.with(|s| s.pool.reserve(class)) {
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
