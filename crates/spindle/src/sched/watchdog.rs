//! The watchdog: reports a fiber that holds its worker too long without
//! switching back — typically a blocking std call made on a fiber, which
//! stops every other fiber of that worker (DESIGN principle 5: loud).
//!
//! Each worker publishes, per dispatch, the running fiber's id and a
//! dispatch sequence number (two plain stores). A watchdog thread per
//! runtime samples them every half threshold; the same fiber and sequence
//! seen for longer than the threshold is a stall. The watchdog reports it at
//! once (by id — it cannot safely touch the fiber), and marks the worker;
//! when the fiber finally switches back, its worker reports it again with
//! its name and how long it held the worker. Each fiber is reported once.
//! It is a warning: nothing is stopped.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Scheduler;

/// Starts the watchdog for `sched` if `threshold` is set.
pub(crate) fn start(sched: &Arc<Scheduler>, threshold: Option<Duration>) {
    let Some(threshold) = threshold else { return };
    let weak = Arc::downgrade(sched);
    let _ = std::thread::Builder::new()
        .name(format!("{}-watchdog", sched.config.thread_name))
        .spawn(move || run(weak, threshold));
}

fn run(sched: Weak<Scheduler>, threshold: Duration) {
    let period = (threshold / 2).max(Duration::from_millis(5));
    // Per worker: (fiber id, dispatch seq, first seen).
    let mut seen: Vec<(u64, u64, Instant)> = Vec::new();
    let mut reported: HashSet<u64> = HashSet::new();
    loop {
        std::thread::sleep(period);
        let Some(sched) = sched.upgrade() else { return };
        if sched.is_shutdown() {
            return;
        }
        seen.resize(sched.workers.len(), (0, 0, Instant::now()));
        for (i, w) in sched.workers.iter().enumerate() {
            let fiber = w.running_fiber.load(Ordering::Relaxed);
            let seq = w.dispatch_seq.load(Ordering::Relaxed);
            let now = Instant::now();
            let (last_fiber, last_seq, since) = seen[i];
            if fiber == 0 || fiber != last_fiber || seq != last_seq {
                seen[i] = (fiber, seq, now);
                continue;
            }
            let held = now - since;
            if held >= threshold && !reported.contains(&fiber) {
                if reported.len() > 10_000 {
                    reported.clear();
                }
                reported.insert(fiber);
                *w.stall_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(since);
                w.stalled_seq.store(seq, Ordering::Release);
                eprintln!(
                    "spindle: worker {i} has run fiber {fiber} for {} ms without a switch: \
                     a blocking call on a fiber stops every fiber of its worker \
                     (move it to spindle::blocking::spawn_blocking)",
                    held.as_millis()
                );
            }
        }
    }
}
