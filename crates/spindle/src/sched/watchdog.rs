//! The watchdog: notices a fiber that holds its worker without switching
//! back — typically a blocking std call made on a fiber, which stops every
//! other fiber of that worker (loud, never silent) — and keeps the rest of
//! the runtime going around it.
//!
//! Each worker publishes, per dispatch, the running fiber's id and a
//! dispatch sequence number (two plain stores). A watchdog thread per
//! runtime samples them; the same fiber and sequence seen across samples
//! is a dispatch that has not ended. Two things follow:
//!
//! * **Stall (after 10 ms):** the worker is marked `stalled`. Its started
//!   fibers cannot move (they stay on their thread, by design), but its
//!   *unstarted* ones can: idle workers now take them from its local queue,
//!   its new spawns go to its inbox, and a sleeping worker is woken to do
//!   so. The worker clears the mark when the fiber switches back. The
//!   remedy for the started fibers is to move the call to
//!   `blocking::run`.
//! * **Warning (after the `stall_warning` threshold):** reported at once on
//!   stderr, by id (the watchdog cannot safely touch the fiber); when the
//!   fiber finally switches back its worker reports it again with its name
//!   and how long it held the worker. Each fiber is reported once.
//!
//! The watchdog samples every 5 ms while any worker runs a fiber and every
//! 50 ms while all are idle.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Scheduler;

/// A dispatch longer than this marks its worker stalled.
const STALL_AFTER: Duration = Duration::from_millis(10);
const BUSY_PERIOD: Duration = Duration::from_millis(5);
const IDLE_PERIOD: Duration = Duration::from_millis(50);

/// Starts the watchdog for `sched`; `threshold` is the stall warning's
/// (`None`: no warnings, stalls are still handled).
pub(crate) fn start(sched: &Arc<Scheduler>, threshold: Option<Duration>) {
    let weak = Arc::downgrade(sched);
    let _ = std::thread::Builder::new()
        .name(format!("{}-watchdog", sched.config.thread_name))
        .spawn(move || run(weak, threshold));
}

fn run(sched: Weak<Scheduler>, threshold: Option<Duration>) {
    // Per worker: (fiber id, dispatch seq, first seen).
    let mut seen: Vec<(u64, u64, Instant)> = Vec::new();
    let mut reported: HashSet<u64> = HashSet::new();
    let mut period = IDLE_PERIOD;
    loop {
        std::thread::sleep(period);
        let Some(sched) = sched.upgrade() else { return };
        if sched.is_shutdown() {
            return;
        }
        seen.resize(sched.workers.len(), (0, 0, Instant::now()));
        let mut any_running = false;
        for (i, w) in sched.workers.iter().enumerate() {
            let fiber = w.running_fiber.load(Ordering::Relaxed);
            let seq = w.dispatch_seq.load(Ordering::Relaxed);
            let now = Instant::now();
            any_running |= fiber != 0;
            let (last_fiber, last_seq, since) = seen[i];
            if fiber == 0 || fiber != last_fiber || seq != last_seq {
                seen[i] = (fiber, seq, now);
                continue;
            }
            let held = now - since;
            if held >= STALL_AFTER && !w.local.stalled.load(Ordering::Relaxed) {
                w.local.stalled.store(true, Ordering::Release);
                // Someone idle should come for its unstarted work.
                if w.local.stealable.load(Ordering::Relaxed) > 0 || w.inbox.stealable() > 0 {
                    sched.wake_one_sleeper();
                }
            }
            let Some(threshold) = threshold else { continue };
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
        period = if any_running {
            BUSY_PERIOD
        } else {
            IDLE_PERIOD
        };
        if let Some(t) = threshold {
            period = period.min((t / 2).max(Duration::from_millis(5)));
        }
    }
}
