//! [`Stats`]: counters a runtime publishes for diagnostics and tests.

/// A snapshot of a runtime's counters (each read without a lock, so the
/// numbers may be a moment apart).
///
/// ```
/// spindle::run(|| {
///     let stats = spindle::stats().expect("on a fiber");
///     assert!(stats.live_fibers >= 1); // this one
/// });
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Fibers spawned and not yet finished (running, runnable or parked).
    pub live_fibers: usize,
    /// Fibers queued on the global queue (spawned from outside the runtime).
    pub global_queued: usize,
    /// One entry per worker.
    pub workers: Vec<WorkerStats>,
    /// Waits of this runtime's fibers published and not yet ended: back to
    /// zero when nothing waits (a leak check for wait registrations).
    pub wait_registrations: usize,
}

/// Counters of one worker.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Fibers in the worker's private run queue.
    pub local_queued: usize,
    /// Fibers in the worker's inbox (its spawns and wakes from elsewhere).
    pub inbox_queued: usize,
    /// Fibers this worker stole from others.
    pub steals: u64,
    /// Fiber resumptions so far.
    pub dispatches: u64,
    /// Finished fibers' stacks kept for reuse.
    pub stacks_pooled: usize,
    /// Entries in the worker's timer heap, live or not yet dropped: about
    /// one per fiber with a deadline armed and one per armed timer future,
    /// and never much more than twice that (a leak check for timers).
    pub timer_entries: usize,
}

impl Stats {
    /// Total runnable fibers queued anywhere.
    pub fn queued(&self) -> usize {
        self.global_queued
            + self
                .workers
                .iter()
                .map(|w| w.local_queued + w.inbox_queued)
                .sum::<usize>()
    }

    /// Total steals across workers.
    pub fn steals(&self) -> u64 {
        self.workers.iter().map(|w| w.steals).sum()
    }
}
