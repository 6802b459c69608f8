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
//!   stderr: the fiber's id and name, and what its thread is blocked in,
//!   read from `/proc` (a futex wait — a `std::sync` lock, condvar or
//!   channel —, a read on a socket, a sleep, or running on the CPU). The
//!   name is read through the worker's `running_header` while the watchdog
//!   is inside the worker's local queue (the loop cannot end the dispatch
//!   meanwhile). When the fiber finally switches back its worker reports
//!   how long it held the worker. Each fiber is reported once.
//!
//! The watchdog samples every 5 ms while any worker runs a fiber and every
//! 50 ms while all are idle.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sched::{Scheduler, WorkerShared};

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
                crate::loud::loud!(
                    "worker {i} has run fiber {fiber}{} for {} ms without a switch; {}",
                    running_name(w, fiber)
                        .map(|n| format!(" \"{n}\""))
                        .unwrap_or_default(),
                    held.as_millis(),
                    blocked_in(w.tid.load(Ordering::Relaxed))
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

/// The name of fiber `id` if worker `w` is still running it.
pub(crate) fn running_name(w: &WorkerShared, id: u64) -> Option<String> {
    // Inside the worker's local queue the loop cannot finish the dispatch
    // (it re-enters before it drops its reference to the fiber). If the
    // fiber itself is inside (a spawn or a wake), try again next sample.
    if !w.local.try_steal_enter() {
        return None;
    }
    let header = w.running_header.load(Ordering::Acquire);
    // SAFETY: non-null, it is the header of the fiber being resumed, which
    // the loop keeps alive until after it enters again (see above); the
    // name is immutable after spawn.
    let name = unsafe { header.as_ref() }
        .filter(|h| h.id == id)
        .and_then(|h| h.name().map(str::to_owned));
    w.local.steal_leave();
    name
}

/// What the thread `tid` of this process is doing, in words, with the
/// remedy that applies.
pub(crate) fn blocked_in(tid: i32) -> String {
    let what = syscall_numbers_are_ours()
        .then(|| std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok())
        .flatten()
        .map(|s| describe_syscall(s.trim()));
    match what {
        Some(Blocked::Running) => {
            "it is running on the CPU without a switch (a long computation or a spin: \
             call spindle::yield_now in the loop, or move it to spindle::blocking::run)"
                .to_string()
        }
        Some(Blocked::Futex) => {
            "its thread is blocked in a futex wait: a std::sync Mutex, RwLock, \
             Condvar or channel, or a thread park. If another fiber of this worker holds that lock \
             across a park, this worker is deadlocked: use spindle::sync::Mutex, which parks only \
             the fiber"
                .to_string()
        }
        Some(Blocked::Call(call)) => format!(
            "its thread is blocked in {call}: a blocking call on a fiber stops every fiber of \
             its worker (use spindle's own I/O and sleep, or move the call to \
             spindle::blocking::run)"
        ),
        None => "a blocking call on a fiber stops every fiber of its worker \
                 (move it to spindle::blocking::run)"
            .to_string(),
    }
}

/// Whether `/proc/<pid>/task/<tid>/syscall` numbers system calls the way
/// this build does. Under an emulator (QEMU user mode) it shows the host's
/// calls: this thread, reading its own entry, must see itself in `read`.
fn syscall_numbers_are_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::read_to_string("/proc/thread-self/syscall")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<libc::c_long>().ok())
            == Some(libc::SYS_read)
    })
}

#[derive(Debug, PartialEq)]
enum Blocked {
    Running,
    Futex,
    Call(String),
}

/// Reads a line of `/proc/<pid>/task/<tid>/syscall`: `running`, or the
/// system call's number and arguments in hex.
fn describe_syscall(line: &str) -> Blocked {
    if line == "running" {
        return Blocked::Running;
    }
    let mut fields = line.split_whitespace();
    let Some(nr) = fields.next().and_then(|n| n.parse::<libc::c_long>().ok()) else {
        return Blocked::Call("an unknown state".to_string());
    };
    let fd = fields
        .next()
        .and_then(|a| i64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or(-1);
    let on_fd = |verb: &str| {
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default();
        format!("{verb} on fd {fd}{target}")
    };
    match nr {
        libc::SYS_futex => Blocked::Futex,
        libc::SYS_read
        | libc::SYS_readv
        | libc::SYS_pread64
        | libc::SYS_recvfrom
        | libc::SYS_recvmsg => Blocked::Call(on_fd("a read")),
        libc::SYS_write
        | libc::SYS_writev
        | libc::SYS_pwrite64
        | libc::SYS_sendto
        | libc::SYS_sendmsg => Blocked::Call(on_fd("a write")),
        libc::SYS_accept | libc::SYS_accept4 => Blocked::Call(on_fd("an accept")),
        libc::SYS_connect => Blocked::Call(on_fd("a connect")),
        libc::SYS_flock => Blocked::Call(on_fd("a file lock")),
        libc::SYS_nanosleep | libc::SYS_clock_nanosleep => {
            Blocked::Call("a sleep (std::thread::sleep: use spindle::time::sleep)".to_string())
        }
        libc::SYS_ppoll | libc::SYS_pselect6 | libc::SYS_epoll_pwait => {
            Blocked::Call("a poll".to_string())
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll | libc::SYS_select | libc::SYS_epoll_wait => {
            Blocked::Call("a poll".to_string())
        }
        libc::SYS_wait4 | libc::SYS_waitid => {
            Blocked::Call("a wait for a child process".to_string())
        }
        -1 => Blocked::Call("a page fault or the kernel".to_string()),
        n => Blocked::Call(format!("system call {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_lines_are_named() {
        assert_eq!(describe_syscall("running"), Blocked::Running);
        let futex = format!(
            "{} 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f",
            libc::SYS_futex
        );
        assert_eq!(describe_syscall(&futex), Blocked::Futex);
        let sleep = format!(
            "{} 0x0 0x0 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7f",
            libc::SYS_clock_nanosleep
        );
        assert!(matches!(describe_syscall(&sleep), Blocked::Call(s) if s.contains("sleep")));
        let read = format!(
            "{} 0x0 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f",
            libc::SYS_read
        );
        assert!(
            matches!(describe_syscall(&read), Blocked::Call(s) if s.starts_with("a read on fd 0"))
        );
    }

    /// Polls `tid`'s state for up to 5 s until `want` describes it.
    fn becomes(tid: i32, want: &str) -> bool {
        if !syscall_numbers_are_ours() {
            eprintln!("skipped: /proc shows another architecture's system calls (an emulator)");
            return true;
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if blocked_in(tid).contains(want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_thread_blocked_on_a_std_mutex_is_named_a_futex_wait() {
        let lock = Arc::new(std::sync::Mutex::new(()));
        let held = lock.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let l = lock.clone();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            drop(l.lock().unwrap());
        });
        let tid = rx.recv().unwrap();
        assert!(becomes(tid, "futex wait"), "{}", blocked_in(tid));
        drop(held);
        t.join().unwrap();
    }

    #[test]
    fn a_spinning_thread_is_named_running() {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            while !s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        assert!(becomes(tid, "running on the CPU"), "{}", blocked_in(tid));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}
