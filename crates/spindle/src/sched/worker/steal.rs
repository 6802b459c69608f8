//! Spreading work: shedding a local backlog to the inbox, and stealing
//! unstarted fibers from other workers (started ones never move).

use std::sync::atomic::Ordering;

use super::Worker;
use crate::sched::queue::{Entry, LocalQueue};

impl Worker {
    /// Hands half of the local backlog of unstarted fibers to sleepers.
    pub(super) fn shed(&self) {
        let batch = self.with_local(|local| {
            if local.stealable() < 2 || self.sched.sleepers.load(Ordering::Relaxed) == 0 {
                return None;
            }
            Some(local.take_stealable_newest_half())
        });
        if let Some(batch) = batch {
            self.shared().inbox.merge(batch);
            self.sched.wake_one_sleeper();
        }
    }

    /// Takes a batch of another worker's unstarted fibers.
    pub(super) fn steal(&self) -> bool {
        let n = self.sched.workers.len();
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
                    self.adopt(&taken);
                    self.with_local(|local| merge_into(local, &mut taken));
                    return true;
                }
            }
            if victim.inbox.stealable() == 0 {
                continue;
            }
            let stolen = self.state.with(|s| {
                let batch = &mut s.batch;
                if victim.inbox.steal_half(batch) == 0 {
                    return false;
                }
                self.shared()
                    .steals
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                // Stolen entries may be older or newer than ours: merge by
                // stamp so the local queue stays in order.
                self.adopt(batch);
                self.with_local(|local| merge_into(local, batch));
                true
            });
            if stolen {
                return true;
            }
        }
        false
    }

    /// Moves this worker's clock past a batch stolen from another worker's
    /// queues (stamped on that worker's clock): what it pushes from now on
    /// goes behind them, as it would have on their own worker.
    fn adopt(&self, batch: &[Entry]) {
        if let Some(newest) = batch.last() {
            self.sched.catch_up(self.index, newest.stamp + 1);
        }
    }

    /// Whether another worker has unstarted fibers this one could take.
    pub(super) fn stealable_elsewhere(&self) -> bool {
        self.sched.workers.iter().enumerate().any(|(i, w)| {
            i != self.index
                && (w.inbox.stealable() > 0
                    || (w.local.stalled.load(Ordering::Acquire)
                        && w.local.stealable.load(Ordering::Relaxed) > 0))
        })
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
