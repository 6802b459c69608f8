//! `spindle::dump()`: what every live fiber is doing, like a Go goroutine
//! dump — for finding out why a server is stuck.
//!
//! Only a worker may read the per-fiber state of the fibers it owns, so a
//! dump is a request: the caller bumps the scheduler's `dump_gen`, wakes
//! every worker, and each answers at the top of its loop with one line per
//! live fiber (id, name, and what it waits on: fd and direction, timer,
//! lock, channel, join, …). The caller's own worker answers inline. A worker
//! that does not answer within 200 ms is stuck in one dispatch; the dump
//! says which fiber it is running. (`sigquit.rs` prints dumps on SIGQUIT.)

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use std::time::{Duration, Instant};

use crate::fiber::FiberRef;
use crate::sched::park::{WaitKind, Wake};
use crate::sched::Scheduler;

/// One worker's part of a dump (called on that worker's thread).
pub(crate) fn worker_report(
    index: usize,
    running: Option<u64>,
    live: &[FiberRef],
    queued_new: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "worker {index}: {} started fibers, {queued_new} not started yet",
        live.len()
    );
    for f in live {
        let h = &f.header;
        let name = h.name().map(|n| format!(" \"{n}\"")).unwrap_or_default();
        let state = if Some(h.id) == running {
            "running (asked for this dump)".to_string()
        } else if let Some(call) = h.foreign_call.get() {
            format!("in {call}: {}", h.waiting_on.get())
        } else {
            h.waiting_on.get().to_string()
        };
        let cancelled = if h.cancelled.is_raised() {
            ", cancelled"
        } else {
            ""
        };
        let _ = writeln!(out, "  fiber {}{name}: {state}{cancelled}", h.id);
    }
    out
}

/// Collects every worker's report for `sched`.
pub(crate) fn dump(sched: &Scheduler) -> String {
    let gen = sched.dump_gen.fetch_add(1, Ordering::AcqRel) + 1;
    sched.wake_all();
    let mut reports: Vec<Option<String>> = vec![None; sched.workers.len()];
    if let Some(index) =
        crate::sched::worker::with_current(|w| w.filter(|w| w.belongs_to(sched)).map(|w| w.index))
    {
        reports[index] = Some(crate::sched::worker::report_here());
    }
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        for (i, w) in sched.workers.iter().enumerate() {
            if reports[i].is_none() {
                let r = w.dump_report.lock().unwrap_or_else(|e| e.into_inner());
                if r.0 == gen {
                    reports[i] = Some(r.1.clone());
                }
            }
        }
        if reports.iter().all(Option::is_some) || Instant::now() >= deadline {
            break;
        }
        // Wait for the next answer (each worker wakes the dump's waiters
        // when it has stored its report), or the deadline. A report stored
        // before we queued is seen by the check under the same lock.
        let missing: Vec<usize> = (0..reports.len())
            .filter(|&i| reports[i].is_none())
            .collect();
        let why = crate::sched::park::block(
            WaitKind::Dump,
            Some(deadline),
            |notify| {
                let mut waiters = sched.dump_waiters.lock().unwrap_or_else(|e| e.into_inner());
                let answered = missing
                    .iter()
                    .any(|&i| sched.workers[i].dump_answered.load(Ordering::Acquire) >= gen);
                if answered {
                    return false;
                }
                waiters.push(notify, ());
                true
            },
            |notify| {
                sched
                    .dump_waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(notify);
            },
        );
        if matches!(why, Wake::Cancelled | Wake::Elapsed) {
            crate::sched::park::exit_for(why);
        }
    }
    let mut out = format!(
        "spindle dump: {} workers, {} live fibers\n",
        sched.workers.len(),
        sched.live_fibers()
    );
    for (i, r) in reports.into_iter().enumerate() {
        match r {
            Some(r) => out.push_str(&r),
            None => {
                let w = &sched.workers[i];
                let id = w.running_fiber.load(Ordering::Relaxed);
                let name = super::watchdog::running_name(w, id)
                    .map(|n| format!(" \"{n}\""))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "worker {i}: did not answer in 200 ms: it has been running fiber {id}{name} \
                     without a switch; {}",
                    super::watchdog::blocked_in(w.tid.load(Ordering::Relaxed))
                );
            }
        }
    }
    out
}
