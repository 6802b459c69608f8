//! The policy of WASI 0.3 instances, apart from wasmtime: which instance
//! takes a job and when a new one starts ([`Pool`]), and when one instance
//! takes more, stops taking, and is dropped ([`Status`]). Its callers do
//! what it decides: `request.rs` and `instance.rs` start an instance when
//! a [`Pool`] method hands back a job to start it with.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::Job;

/// Where requests wait for an instance, and which instances wait for one.
pub(super) struct Pool {
    state: Mutex<PoolState>,
    next_instance: AtomicU64,
    /// At most this many instances at once (the allocator's slots).
    limit: usize,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    /// Instances that would take a job now.
    available: usize,
    /// Instances alive (or starting).
    live: usize,
    /// The wakers of available instances parked until a job comes.
    parked: Vec<(u64, Waker)>,
}

impl PoolState {
    /// The first waiting job whose request fiber still waits (one that
    /// passed its deadline in the queue was answered and dropped its end).
    fn next_job(&mut self) -> Option<Job> {
        while let Some(job) = self.jobs.pop_front() {
            if !job.reply.is_canceled() {
                return Some(job);
            }
        }
        None
    }
}

impl Pool {
    pub(super) fn new(limit: usize) -> Pool {
        Pool {
            state: Mutex::default(),
            next_instance: AtomicU64::new(0),
            limit: limit.max(1),
        }
    }

    /// A number for a new instance (its log lines and its place in the
    /// pool's lists).
    pub(super) fn instance_id(&self) -> u64 {
        self.next_instance.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Nothing panics while holding the lock; a poisoned lock still
        // holds consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job` for an available instance; `Some` when none is and a
    /// slot is free: start a new instance with the job handed back (it is
    /// counted available and live already). Past the instance limit the
    /// job waits until an instance has room or one ends.
    #[inline] // the job is moved once, into the queue
    #[must_use = "a job handed back needs an instance started for it"]
    pub(super) fn submit(&self, job: Job) -> Option<Job> {
        let mut state = self.lock();
        state.jobs.push_back(job);
        self.start_for_waiting(state)
    }

    /// The first waiting job, to start an instance with, if none is
    /// available to take it and a slot is free; else wakes a parked
    /// available instance if jobs wait. Takes the lock and gives it back.
    fn start_for_waiting(&self, mut state: MutexGuard<'_, PoolState>) -> Option<Job> {
        if state.available > 0 || state.live >= self.limit {
            // Someone will take it, or an instance ending will start one.
            if let Some((_, waker)) = (state.available > 0 && !state.jobs.is_empty())
                .then(|| state.parked.pop())
                .flatten()
            {
                drop(state);
                waker.wake();
            }
            return None;
        }
        let job = state.next_job()?;
        // Counted available from birth: the jobs that come before it has
        // run wait for it instead of each starting an instance.
        state.available += 1;
        state.live += 1;
        Some(job)
    }

    /// Records whether instance `id` may take more jobs. When one stops
    /// being available while jobs wait, another must take them: a parked
    /// available instance is woken, or, if none is left, `Some` job to
    /// start a new instance with (`submit` saw this one available and left
    /// the job to it).
    #[must_use = "a job handed back needs an instance started for it"]
    pub(super) fn set_available(&self, id: u64, available: &Cell<bool>, now: bool) -> Option<Job> {
        if available.replace(now) == now {
            return None;
        }
        let mut state = self.lock();
        if now {
            state.available += 1;
            return None;
        }
        state.available -= 1;
        state.parked.retain(|(i, _)| *i != id);
        self.start_for_waiting(state)
    }

    /// Instance `id` is gone (no longer available): its slot is free, and
    /// `Some` job waiting for it is handed back to start a new instance.
    #[must_use = "a job handed back needs an instance started for it"]
    pub(super) fn ended(&self, id: u64, available: &Cell<bool>) -> Option<Job> {
        let mut state = self.lock();
        if available.replace(false) {
            state.available -= 1;
            state.parked.retain(|(i, _)| *i != id);
        }
        state.live -= 1;
        self.start_for_waiting(state)
    }

    /// A waiting job for available instance `id`, or its waker parked
    /// until one comes.
    pub(super) fn poll_job(&self, id: u64, cx: &mut Context<'_>) -> Poll<Job> {
        let mut state = self.lock();
        if let Some(job) = state.next_job() {
            state.parked.retain(|(i, _)| *i != id);
            return Poll::Ready(job);
        }
        match state.parked.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => state.parked.push((id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

/// What an instance is doing, as its loop last saw.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
    /// Requests in flight: it must be gone by the latest of their deadlines.
    Requests,
    /// Every request answered, but the guest still works (a body being
    /// written, a task it spawned): bounded by one more request timeout.
    AfterResponses,
    /// Nothing to do: dropped at the end of the idle timeout.
    Idle,
}

/// What the instance's loop tells the fiber driving it, between polls, and
/// the decisions taken from it.
pub(super) struct Status {
    pub(super) phase: Cell<Phase>,
    /// When to drop the instance if the phase does not change.
    pub(super) kill_at: Cell<Instant>,
    /// The earliest deadline of the requests in flight: once it passes,
    /// the instance takes no more (see [`Status::expire_due`]).
    stop_at: Cell<Option<Instant>>,
    /// A request of it passed its deadline inside the loop.
    expired: Cell<bool>,
    /// It takes no more requests, ever: a call failed to start, it served
    /// its `instance_reuse`, or a request expired.
    closed: Cell<bool>,
    /// Cleared when a request is accepted; set once the loop has parked
    /// with every task waiting.
    pub(super) may_interleave: Cell<bool>,
    /// The last poll of the loop ended in a yield: the guest computes.
    pub(super) computing: Cell<bool>,
    /// Counted among the pool's available instances.
    pub(super) available: Cell<bool>,
}

/// The clock a [`Status`] is asked about on every turn of its instance's
/// loop: the runtime's ([`RuntimeClock`]), or a fixed instant (tests). A
/// turn mostly needs only whether a deadline far ahead has come, which the
/// runtime answers without reading the precise clock.
pub(super) trait Clock: Copy {
    /// The time now.
    fn now(self) -> Instant;
    /// Whether the time has reached `at`.
    fn reached(self, at: Instant) -> bool {
        self.now() >= at
    }
}

/// The calling worker's runtime clock (`spindle::time`).
#[derive(Clone, Copy)]
pub(super) struct RuntimeClock;

impl Clock for RuntimeClock {
    fn now(self) -> Instant {
        spindle::time::now()
    }

    fn reached(self, at: Instant) -> bool {
        spindle::time::reached(at)
    }
}

impl Clock for Instant {
    fn now(self) -> Instant {
        self
    }
}

/// What the instance's timer says when it fires.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Nothing changes; arm the timer again for [`Status::next_check`].
    Rearm,
    /// A request passed its deadline: the instance takes no more.
    StopTaking,
    /// Drop the instance: idle past its idle timeout (`Ok`), or with
    /// requests or guest work past their time (`Err`).
    Drop(Result<(), &'static str>),
}

impl Status {
    /// The status of an instance started for a request due by `deadline`:
    /// available (the pool counted it so), that request in flight.
    pub(super) fn new(deadline: Instant) -> Status {
        Status {
            phase: Cell::new(Phase::Requests),
            kill_at: Cell::new(deadline),
            stop_at: Cell::new(Some(deadline)),
            expired: Cell::new(false),
            closed: Cell::new(false),
            may_interleave: Cell::new(false),
            computing: Cell::new(false),
            available: Cell::new(true),
        }
    }

    pub(super) fn enter(&self, phase: Phase, kill_at: Instant) {
        self.phase.set(phase);
        self.kill_at.set(kill_at);
    }

    /// Records the deadlines of the requests in flight.
    pub(super) fn in_flight(&self, deadlines: &[Instant]) {
        if let Some(latest) = deadlines.iter().copied().max() {
            self.enter(Phase::Requests, latest);
        }
        self.stop_at.set(deadlines.iter().copied().min());
    }

    /// A call could not start (the guest refused or its instance is
    /// poisoned): no more requests here.
    pub(super) fn close(&self) {
        self.closed.set(true);
    }

    /// Whether a request in flight is past its deadline (checked, not
    /// waited for: the request fiber answers its own deadline, and the
    /// instance's driver wakes at the earliest one).
    pub(super) fn expire_due(&self, clock: impl Clock) -> bool {
        if !self.expired.get() && self.stop_at.get().is_some_and(|at| clock.reached(at)) {
            self.expired.set(true);
            self.closed.set(true);
        }
        self.expired.get()
    }

    /// Whether the instance takes another request now: it is not closed
    /// (a failed start, a request expired, `accepted` reached `reuse`),
    /// the guest is ready for another concurrent call, fewer than
    /// `concurrency` are in flight, and the guest is not computing.
    pub(super) fn open(
        &self,
        clock: impl Clock,
        accepted: usize,
        reuse: usize,
        in_flight: usize,
        concurrency: usize,
        guest_ready: bool,
    ) -> bool {
        self.expire_due(clock);
        if accepted >= reuse {
            self.closed.set(true);
        }
        !self.closed.get() && guest_ready && in_flight < concurrency && !self.computing.get()
    }

    /// Whether an open instance takes a job now: at once when it has
    /// nothing in flight, else only once its tasks all wait (a computing
    /// guest keeps its worker, and new work goes elsewhere).
    pub(super) fn takes_now(&self, open: bool, in_flight: usize) -> bool {
        open && (in_flight == 0 || self.may_interleave.get())
    }

    /// Nothing in flight and the guest has no task left: `true` if the
    /// instance is done (closed, or the guest will take no more calls);
    /// else it idles, to be dropped `idle_timeout` from `now` unless a job
    /// comes.
    pub(super) fn quiet(
        &self,
        clock: impl Clock,
        guest_ready: bool,
        idle_timeout: Duration,
    ) -> bool {
        if self.closed.get() || !guest_ready {
            return true;
        }
        if self.phase.get() != Phase::Idle {
            self.enter(Phase::Idle, clock.now() + idle_timeout);
        }
        false
    }

    /// Every request answered, the guest still working: bounded by one
    /// more request timeout from now.
    pub(super) fn after_responses(&self, clock: impl Clock, timeout: Duration) {
        if self.phase.get() != Phase::AfterResponses {
            self.enter(Phase::AfterResponses, clock.now() + timeout);
        }
    }

    /// When the driver must look next: the kill time, or the earliest
    /// deadline in flight while no request has expired yet.
    pub(super) fn next_check(&self) -> Instant {
        match self.stop_at.get() {
            Some(at) if !self.expired.get() => at.min(self.kill_at.get()),
            _ => self.kill_at.get(),
        }
    }

    /// What to do when the instance's timer fires at `now`.
    pub(super) fn timer(&self, now: Instant) -> Timer {
        if now >= self.kill_at.get() {
            return Timer::Drop(if self.phase.get() == Phase::Idle {
                Ok(())
            } else {
                Err("requests past their deadline")
            });
        }
        if self.expire_due(now) {
            return Timer::StopTaking;
        }
        Timer::Rearm
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use futures::channel::oneshot;
    use spindle_http::{Body, Request};

    use super::*;

    fn job(deadline: Instant) -> (Job, oneshot::Receiver<super::super::Reply>) {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request: Box::new(Request::new(Body::empty())),
            reply,
            deadline,
            taken: Arc::default(),
        };
        (job, answer)
    }

    /// A pool of `limit` with one instance started for a first job: the
    /// instance's id, its availability, and the first job's reply end.
    fn with_one_instance(
        limit: usize,
    ) -> (
        Pool,
        u64,
        Cell<bool>,
        oneshot::Receiver<super::super::Reply>,
    ) {
        let pool = Pool::new(limit);
        let (first, answer) = job(Instant::now());
        assert!(pool.submit(first).is_some(), "no instance: start one");
        let id = pool.instance_id();
        (pool, id, Cell::new(true), answer)
    }

    #[derive(Default)]
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_first_job_starts_an_instance_and_the_next_waits_for_it() {
        let pool = Pool::new(4);
        let now = Instant::now();
        let (a, _ra) = job(now);
        let (b, _rb) = job(now);
        assert!(pool.submit(a).is_some(), "no instance: start one");
        // The new instance counts as available from birth: a second job
        // waits for it rather than starting another.
        assert!(pool.submit(b).is_none());
        let available = Cell::new(true);
        let id = pool.instance_id();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(pool.poll_job(id, &mut cx).is_ready(), "the queued job");
        assert!(pool.poll_job(id, &mut cx).is_pending());
        assert!(pool.ended(id, &available).is_none());
    }

    #[test]
    fn past_the_instance_limit_jobs_wait_until_one_ends() {
        let (pool, id, available, _first) = with_one_instance(1);
        let now = Instant::now();
        // The instance gets busy (computing, or full): not available.
        assert!(pool.set_available(id, &available, false).is_none());
        let (b, _rb) = job(now);
        assert!(pool.submit(b).is_none(), "at the limit: the job waits");
        let next = pool.ended(id, &available);
        assert!(next.is_some(), "the slot freed starts an instance for it");
    }

    #[test]
    fn an_instance_that_stops_taking_hands_waiting_jobs_on() {
        let (pool, id, available, _first) = with_one_instance(4);
        let (b, _rb) = job(Instant::now());
        assert!(pool.submit(b).is_none(), "left to the available instance");
        // It turns out busy: someone else must take the job.
        let handed = pool.set_available(id, &available, false);
        assert!(
            handed.is_some(),
            "a new instance starts for the waiting job"
        );
    }

    #[test]
    fn a_parked_available_instance_is_woken_by_a_job() {
        let (pool, id, _available, _first) = with_one_instance(4);
        let mut cx = Context::from_waker(Waker::noop());
        // It has taken its first job (handed to it at start) and waits.
        assert!(pool.poll_job(id, &mut cx).is_pending());
        let woken = Arc::new(CountingWaker::default());
        let waker = Waker::from(woken.clone());
        assert!(pool
            .poll_job(id, &mut Context::from_waker(&waker))
            .is_pending());
        let (b, _rb) = job(Instant::now());
        assert!(pool.submit(b).is_none());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1, "the parked instance");
        assert!(pool.poll_job(id, &mut cx).is_ready());
    }

    #[test]
    fn jobs_whose_request_gave_up_are_skipped() {
        let (pool, id, available, _first) = with_one_instance(1);
        assert!(pool.set_available(id, &available, false).is_none());
        let (b, rb) = job(Instant::now());
        assert!(pool.submit(b).is_none());
        drop(rb); // its request fiber answered its own deadline
        assert!(
            pool.ended(id, &available).is_none(),
            "no instance for a request nobody waits for"
        );
    }

    #[test]
    fn reuse_closes_an_instance_after_its_last_request() {
        let now = Instant::now();
        let status = Status::new(now + Duration::from_secs(10));
        assert!(status.open(now, 1, 3, 0, 8, true));
        assert!(status.open(now, 2, 3, 0, 8, true));
        assert!(!status.open(now, 3, 3, 0, 8, true), "served its reuse");
        // Closed for good, and done once quiet.
        assert!(!status.open(now, 0, 3, 0, 8, true));
        assert!(status.quiet(now, true, Duration::from_secs(30)));
    }

    #[test]
    fn concurrency_bounds_the_requests_in_flight() {
        let now = Instant::now();
        let status = Status::new(now + Duration::from_secs(10));
        assert!(status.open(now, 1, 100, 3, 4, true));
        assert!(!status.open(now, 1, 100, 4, 4, true), "full");
        assert!(status.open(now, 1, 100, 3, 4, true), "room again");
        assert!(
            !status.open(now, 1, 100, 0, 4, false),
            "the guest says wait"
        );
        status.computing.set(true);
        assert!(!status.open(now, 1, 100, 0, 4, true), "computing");
    }

    #[test]
    fn an_instance_takes_more_only_once_its_tasks_wait() {
        let now = Instant::now();
        let status = Status::new(now + Duration::from_secs(10));
        assert!(status.takes_now(true, 0));
        assert!(!status.takes_now(true, 1), "its task may be computing");
        status.may_interleave.set(true);
        assert!(status.takes_now(true, 1));
        assert!(!status.takes_now(false, 0));
    }

    #[test]
    fn an_idle_instance_is_reaped_at_its_idle_timeout() {
        let now = Instant::now();
        let status = Status::new(now + Duration::from_secs(10));
        status.in_flight(&[]);
        let idle = Duration::from_secs(30);
        assert!(!status.quiet(now, true, idle), "it idles");
        assert_eq!(status.phase.get(), Phase::Idle);
        assert_eq!(status.next_check(), now + idle);
        assert_eq!(status.timer(now + Duration::from_secs(29)), Timer::Rearm);
        assert_eq!(status.timer(now + idle), Timer::Drop(Ok(())));
        // A job before then moves it back to serving.
        status.in_flight(&[now + Duration::from_secs(40)]);
        assert_eq!(status.timer(now + idle), Timer::Rearm);
    }

    #[test]
    fn a_poisoned_instance_takes_nothing_more_and_ends_when_quiet() {
        let now = Instant::now();
        let status = Status::new(now + Duration::from_secs(10));
        status.close(); // a call failed to start
        assert!(!status.open(now, 1, 100, 0, 8, true));
        assert!(status.quiet(now, true, Duration::from_secs(30)));
    }

    #[test]
    fn a_request_past_its_deadline_stops_the_instance_taking_and_then_drops_it() {
        let now = Instant::now();
        let early = now + Duration::from_secs(1);
        let late = now + Duration::from_secs(5);
        let status = Status::new(early);
        status.in_flight(&[early, late]);
        assert_eq!(status.next_check(), early);
        assert_eq!(status.timer(early), Timer::StopTaking);
        assert!(!status.open(early, 1, 100, 2, 8, true));
        assert_eq!(status.next_check(), late, "then the latest deadline");
        assert_eq!(
            status.timer(late),
            Timer::Drop(Err("requests past their deadline"))
        );
    }
}
