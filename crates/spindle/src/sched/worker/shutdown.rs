//! The worker's part of a runtime stop: phase one cancels every fiber it
//! owns, phase two unwinds what is left and discards what never started.

use std::sync::atomic::Ordering;

use super::Worker;
use crate::fiber::{self, FiberRef};
use crate::sched::queue::Entry;

impl Worker {
    /// Shutdown, phase one: cancel every fiber this worker owns (started
    /// ones wake from their waits and run their failure paths; queued
    /// unstarted ones will never run).
    #[cold]
    pub(super) fn cancel_all(&self) {
        self.shared().cancelled_all.store(true, Ordering::Release);
        // Every flag first, one process-wide barrier, then the wait words
        // (the canceller's side of `token::CancelFlag`, batched).
        let mark = |f: &FiberRef| f.header.cancelled.raise_unfenced();
        self.with_local(|local| local.for_each(mark));
        self.shared().inbox.for_each(mark);
        self.sched.global.for_each(mark);
        let live: Vec<FiberRef> = self.state.with(|s| s.live.iter().cloned().collect());
        for f in &live {
            f.header.cancelled.raise_unfenced();
        }
        crate::membarrier::heavy();
        for f in &live {
            crate::fiber::wait::end_wait_of_cancelled(f);
        }
    }

    /// Runtime shutdown: discard queued unstarted fibers, unwind every
    /// started one this worker owns. Repeats while stopping fibers makes
    /// more work (a destructor that spawns or wakes).
    pub(super) fn stop_all(&self) {
        loop {
            let mut stopped_any = false;
            let mut queued: Vec<Entry> = Vec::new();
            self.with_local(|local| {
                while let Some(e) = local.pop() {
                    queued.push(e);
                }
            });
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
            let live = self.state.with(|s| s.live.drain());
            for f in live {
                stopped_any = true;
                self.current.set(&f);
                // SAFETY: this worker owns `f`; it is not running, and any
                // queue entry for it was dropped above.
                let stack = unsafe { fiber::stop(&f) };
                self.current.set(std::ptr::null());
                if let Some(stack) = stack {
                    self.state.with(|s| s.pool.put(stack));
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
