//! The worker's part of diagnostics: its lines of a dump, and the report
//! of a dispatch the watchdog found stalled.

use std::sync::atomic::Ordering;

use super::Worker;
use crate::fiber::FiberRef;

impl Worker {
    /// This worker's part of a dump: one line per fiber it owns.
    pub(super) fn report(&self) -> String {
        let live: Vec<FiberRef> = self.state.with(|s| s.live.iter().cloned().collect());
        let mut queued_new = 0;
        self.with_local(|local| {
            local.for_each(|f| queued_new += (!f.header.is_started()) as usize)
        });
        self.shared()
            .inbox
            .for_each(|f| queued_new += (!f.header.is_started()) as usize);
        let running = self.current_id();
        crate::sched::diag::dump::worker_report(self.index, running, &live, queued_new)
    }

    fn current_id(&self) -> Option<u64> {
        // SAFETY: `current` points at the loop's `FiberRef` while that fiber
        // runs (set around `resume` and `stop`), else it is null.
        unsafe { self.current.get().as_ref() }.map(|f| f.header.id)
    }

    #[cold]
    pub(super) fn answer_dump(&self, gen: u64) {
        self.dump_answered.set(gen);
        let text = self.report();
        *self
            .shared()
            .dump_report
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = (gen, text);
        self.shared().dump_answered.store(gen, Ordering::Release);
        // Under the waiters' lock, so a caller that checked `dump_answered`
        // before this store has queued itself by now.
        let waiting = self
            .sched
            .dump_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_all();
        waiting.wake_all(crate::sched::park::Wake::Ready);
    }

    /// The watchdog flagged the dispatch that just ended: name the fiber.
    #[cold]
    pub(super) fn report_stall(&self, fiber: &FiberRef) {
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
            .name()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default();
        crate::loud::loud!(
            "fiber {}{name} blocked worker {} for {held} ms without a switch",
            fiber.header.id,
            self.index
        );
    }
}
