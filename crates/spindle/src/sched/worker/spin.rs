//! Whether an idle worker may spin at all (`docs/DESIGN.md`, "Sleeping and
//! spinning").
//!
//! A spin buys latency with a CPU that nobody else wanted. When somebody
//! else does want it, the spin steals it — possibly from the very thread
//! that would push the work the spinner waits for. So a worker spins only
//! while:
//!
//! * it may run on at least two CPUs (on one, the pusher cannot run while
//!   it spins);
//! * fewer workers of this process (any runtime's) spin than it has CPUs:
//!   one more could only take a CPU from a thread with work;
//! * the machine is not oversubscribed: the kernel's count of runnable
//!   threads (`/proc/loadavg`, sampled at most every [`SAMPLE_EVERY`] by
//!   whichever worker needs it) was above the number of online CPUs in
//!   neither of the last two samples. One sample is not enough: the
//!   sampler counts itself, and a thread that runs for a moment (a
//!   watchdog's tick, a `cat`) would turn spinning off for a whole period.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How old the runnable-thread sample may get before a spinner takes a
/// new one.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Workers of this process spinning now.
static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// Whether the last two samples found more runnable threads than CPUs.
static CROWDED: AtomicBool = AtomicBool::new(false);
/// Whether the last sample did.
static LAST_OVER: AtomicBool = AtomicBool::new(false);
/// When the last sample was taken, in µs on [`now_us`]'s clock (0: never).
static SAMPLED_AT: AtomicU64 = AtomicU64::new(0);

/// A clock for the sampling cadence, in µs, never 0: the coarse monotonic
/// clock (a tick's precision is plenty for a 50 ms cadence, and it is read
/// on the way into every spin, where a precise reading would delay the
/// spinner's readiness for a hand-over); the precise one where the
/// coarse one is missing.
fn now_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let ns = crate::sched::time_source::coarse_ns()
        .unwrap_or_else(|| EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64);
    ns / 1000 + 1
}

/// CPUs this process may run on, and CPUs online.
fn cpus() -> (usize, usize) {
    static CPUS: OnceLock<(usize, usize)> = OnceLock::new();
    *CPUS.get_or_init(|| {
        let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        (allowed, usize::try_from(online).unwrap_or(allowed).max(1))
    })
}

/// A permit to spin, released on drop; `None` when spinning would take a
/// CPU somebody else needs.
pub(super) struct SpinPermit(());

impl SpinPermit {
    pub(super) fn try_take() -> Option<SpinPermit> {
        let (allowed, online) = cpus();
        if allowed < 2 || crowded(online) {
            return None;
        }
        let before = SPINNING.fetch_add(1, Ordering::Relaxed);
        if before >= allowed {
            SPINNING.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(SpinPermit(()))
    }
}

impl Drop for SpinPermit {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The last samples' verdict, refreshed first if it is stale (by one
/// caller; the others use the old verdict meanwhile).
fn crowded(online: usize) -> bool {
    let now = now_us();
    let last = SAMPLED_AT.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= SAMPLE_EVERY.as_micros() as u64
        && SAMPLED_AT
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let over = std::fs::read("/proc/loadavg")
            .ok()
            .and_then(|text| runnable_threads(&text))
            .is_some_and(|running| running > online);
        let before = LAST_OVER.swap(over, Ordering::Relaxed);
        CROWDED.store(over && before, Ordering::Relaxed);
    }
    CROWDED.load(Ordering::Relaxed)
}

/// The runnable-thread count of a `/proc/loadavg` line
/// (`0.50 0.40 0.30 3/412 12345`: the 4th field's numerator).
fn runnable_threads(loadavg: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(loadavg).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_the_fourth_fields_numerator() {
        assert_eq!(runnable_threads(b"0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(runnable_threads(b"12.00 9.10 8.00 17/1024 99"), Some(17));
    }

    #[test]
    fn a_malformed_line_has_no_count() {
        assert_eq!(runnable_threads(b""), None);
        assert_eq!(runnable_threads(b"0.52 0.58 0.59"), None);
        assert_eq!(runnable_threads(b"0.52 0.58 0.59 x/467 1"), None);
        assert_eq!(runnable_threads(b"0.52 0.58 0.59 3467 1"), None);
        assert_eq!(runnable_threads(&[0xff, 0xfe]), None);
    }

    #[test]
    fn no_more_workers_spin_than_the_process_has_cpus() {
        let (allowed, _) = cpus();
        let permits: Vec<_> = (0..allowed + 2)
            .filter_map(|_| SpinPermit::try_take())
            .collect();
        // Other tests' workers may hold permits too: never more than that.
        assert!(permits.len() <= allowed, "{} of {allowed}", permits.len());
        drop(permits);
    }
}
