//! `spindle::dump()`: what every live fiber is doing, like a Go goroutine
//! dump — for finding out why a server is stuck.
//!
//! Only a worker may read the per-fiber state of the fibers it owns, so a
//! dump is a request: the caller bumps the scheduler's `dump_gen`, wakes
//! every worker, and each answers at the top of its loop with one line per
//! live fiber (id, name, and what it waits on: fd and direction, timer,
//! lock, channel, join, …). The caller's own worker answers inline. A worker
//! that does not answer within 200 ms is stuck in one dispatch; the dump
//! says which fiber it is running. With `RuntimeBuilder::dump_on_sigquit`,
//! `kill -QUIT <pid>` prints the dump of every such runtime to stderr.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::Scheduler;
use crate::fiber::FiberRef;

/// One worker's part of a dump (called on that worker's thread).
pub(crate) fn worker_report(
    index: usize,
    running: Option<u64>,
    live: &[&FiberRef],
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
        let name = h
            .name
            .as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default();
        let state = if Some(h.id) == running {
            "running (asked for this dump)".to_string()
        } else {
            h.waiting_on.get().to_string()
        };
        let cancelled = if h.cancelled.load(Ordering::Relaxed) {
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
    if let Some(index) = super::worker::current_index(sched) {
        reports[index] = Some(super::worker::report_here());
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
        super::park::sleep_until(Instant::now() + Duration::from_millis(1));
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

/// Runtimes that asked for a dump on SIGQUIT.
static SIGQUIT_RUNTIMES: Mutex<Vec<Weak<Scheduler>>> = Mutex::new(Vec::new());
static SIGQUIT_PIPE: OnceLock<i32> = OnceLock::new();

extern "C" fn on_sigquit(_: libc::c_int) {
    if let Some(&fd) = SIGQUIT_PIPE.get() {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe just drops it.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Prints `sched`'s dump to stderr on SIGQUIT (installs the handler once).
pub(crate) fn dump_on_sigquit(sched: &Arc<Scheduler>) {
    SIGQUIT_RUNTIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(sched));
    SIGQUIT_PIPE.get_or_init(|| {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the two-element array.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        let read_fd = fds[0];
        let _ = std::thread::Builder::new()
            .name("spindle-sigquit".into())
            .spawn(move || loop {
                let mut pfd = libc::pollfd {
                    fd: read_fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; then drain what is there.
                unsafe {
                    libc::poll(&mut pfd, 1, -1);
                    let mut buf = [0u8; 64];
                    while libc::read(read_fd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
                }
                let runtimes: Vec<Arc<Scheduler>> = SIGQUIT_RUNTIMES
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter_map(Weak::upgrade)
                    .collect();
                for s in runtimes {
                    eprint!("{}", dump(&s));
                }
            });
        // SAFETY: installs a handler that only writes to a pipe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigquit as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGQUIT, &action, std::ptr::null_mut());
        }
        fds[1]
    });
}
