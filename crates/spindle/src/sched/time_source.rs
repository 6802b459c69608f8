//! Where a runtime reads the time: the monotonic clock, or a paused clock
//! for tests (`RuntimeBuilder::start_paused`).
//!
//! Every deadline the runtime keeps — timers, sleeps, `timeout`, socket
//! and lock deadlines — is an `Instant` computed from this source, and
//! every worker fires its timers against it. Diagnostics (the stall
//! watchdog, the idle spin, stack trimming, the poll cadence) stay on the
//! real clock: they measure the machine, not the program.
//!
//! # The paused clock
//!
//! It starts at the real instant the runtime was built and moves only
//! forward, in two ways:
//!
//! * `spindle::time::advance(d)` moves it by `d`, wakes every worker so
//!   that what fell due fires, and yields the caller;
//! * **auto-advance**: when every worker of the runtime is idle (nothing
//!   runnable, nothing to steal) and no fiber of it waits on the blocking
//!   pool, the last worker to go idle first polls the netpoller without
//!   waiting, then, if still nothing is runnable, jumps the clock to the
//!   earliest timer of any worker and wakes its owner. Each worker
//!   publishes its earliest deadline before it counts itself a sleeper, so
//!   the last one sees them all.
//!
//! So a program whose fibers only wait for each other and for time runs
//! its timers in order at once. As with tokio's paused time, I/O that takes
//! real time to arrive can lose the race against a timeout: the clock does
//! not wait for a peer that is still on its way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No published deadline.
pub(crate) const NO_DEADLINE: u64 = u64::MAX;

/// A runtime's time (see the module docs).
pub(crate) struct TimeSource {
    paused: Option<Paused>,
}

struct Paused {
    /// The real instant the clock started at.
    origin: Instant,
    /// Nanoseconds the clock has been moved past `origin`.
    elapsed_ns: AtomicU64,
}

impl TimeSource {
    /// The monotonic clock.
    pub(crate) fn real() -> TimeSource {
        TimeSource { paused: None }
    }

    /// A paused clock, starting now.
    pub(crate) fn paused() -> TimeSource {
        TimeSource {
            paused: Some(Paused {
                origin: Instant::now(),
                elapsed_ns: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    /// The current time.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        match &self.paused {
            None => Instant::now(),
            Some(p) => p.origin + Duration::from_nanos(p.elapsed_ns.load(Ordering::Acquire)),
        }
    }

    /// Moves a paused clock forward to `to`, never back; false if the clock
    /// is not paused or already there.
    pub(crate) fn advance_to(&self, to: Instant) -> bool {
        let Some(p) = &self.paused else {
            return false;
        };
        let target = to.saturating_duration_since(p.origin).as_nanos();
        let target = u64::try_from(target).unwrap_or(NO_DEADLINE - 1);
        p.elapsed_ns.fetch_max(target, Ordering::AcqRel) < target
    }

    /// `deadline` as a published number (nanoseconds past the origin of a
    /// paused clock), [`NO_DEADLINE`] for none.
    pub(crate) fn encode(&self, deadline: Option<Instant>) -> u64 {
        match (&self.paused, deadline) {
            // Past what the clock can reach (584 years): never due.
            (Some(p), Some(d)) => {
                let ns = d.saturating_duration_since(p.origin).as_nanos();
                u64::try_from(ns).unwrap_or(NO_DEADLINE)
            }
            _ => NO_DEADLINE,
        }
    }

    /// The instant [`encode`](Self::encode) published (paused clocks only).
    pub(crate) fn decode(&self, published: u64) -> Option<Instant> {
        match &self.paused {
            Some(p) if published != NO_DEADLINE => Some(p.origin + Duration::from_nanos(published)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_clock_stands_still_and_only_moves_forward() {
        let t = TimeSource::paused();
        let start = t.now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.now(), start, "real time passed, the clock did not");
        assert!(t.advance_to(start + Duration::from_secs(3)));
        assert_eq!(t.now(), start + Duration::from_secs(3));
        assert!(!t.advance_to(start + Duration::from_secs(1)), "never back");
        assert_eq!(t.now(), start + Duration::from_secs(3));
    }

    #[test]
    fn published_deadlines_round_trip() {
        let t = TimeSource::paused();
        let d = t.now() + Duration::from_millis(1500);
        assert_eq!(t.decode(t.encode(Some(d))), Some(d));
        assert_eq!(t.encode(None), NO_DEADLINE);
        assert_eq!(t.decode(NO_DEADLINE), None);
    }

    #[test]
    fn the_real_clock_is_the_monotonic_clock() {
        let t = TimeSource::real();
        let a = t.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(t.now() >= a + Duration::from_millis(2));
        assert!(!t.advance_to(a + Duration::from_secs(10)));
    }
}
