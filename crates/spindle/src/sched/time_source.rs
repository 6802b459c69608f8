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
//!
//! # Nothing due yet, cheaply
//!
//! A busy worker asks at every dispatch whether a timer is due; reading the
//! monotonic clock for that costs 25–40 ns in a VM, about one request's
//! worth of parsing on a busy HTTP server. The kernel's coarse monotonic
//! clock is the same clock as of the last tick, read for a few
//! nanoseconds; it is behind the precise clock by a tick or two. So the
//! coarse reading plus a margin of three ticks and a millisecond
//! ([`ClockBound`]) is a time the clock has surely not reached: while the
//! earliest deadline lies past it, nothing is due and the precise clock
//! is not read. The bound only ever skips a reading — every deadline is
//! still computed from, and fired against, the precise clock — so if the
//! coarse clock ever lagged further (a timekeeping CPU starved by its
//! host), a timer would fire late, at the busy worker's next precise look
//! (every 16 dispatches), never early.
//!
//! One kind of deadline is computed from the bound: a socket timeout long
//! enough that the margin is at most 1 % of it (a keep-alive wait of
//! seconds, set before every request a server reads). It then ends up to
//! the margin late and never early — the kernel's own socket timeouts
//! count in ticks too — and a busy server skips a precise reading per
//! request ([`TimeSource::deadline_after`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No published deadline.
pub(crate) const NO_DEADLINE: u64 = u64::MAX;

/// A runtime's time (see the module docs).
pub(crate) struct TimeSource {
    paused: Option<Paused>,
    /// The cheap bound on a real clock, where the coarse clock is usable.
    bound: Option<ClockBound>,
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
        TimeSource {
            paused: None,
            bound: ClockBound::new(),
        }
    }

    /// A paused clock, starting now.
    pub(crate) fn paused() -> TimeSource {
        TimeSource {
            paused: Some(Paused {
                origin: Instant::now(),
                elapsed_ns: AtomicU64::new(0),
            }),
            bound: None,
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

    /// The current time, for a caller that has just read the real clock
    /// (`real`) for its own ends: `real` itself unless the clock is paused,
    /// so that the two need one reading between them.
    #[inline]
    pub(crate) fn now_given_real(&self, real: Instant) -> Instant {
        match &self.paused {
            None => real,
            Some(_) => self.now(),
        }
    }

    /// An instant this clock has surely not reached yet, if one can be had
    /// without reading the clock itself (see the module docs): a real
    /// clock whose coarse twin works. `None` means: read [`now`](Self::now).
    #[inline]
    pub(crate) fn not_yet_reached(&self) -> Option<Instant> {
        self.bound.as_ref().and_then(ClockBound::ahead_of_now)
    }

    /// Whether the clock has reached `deadline` (`now() >= deadline`),
    /// without reading it while the coarse bound shows the deadline still
    /// ahead (see the module docs).
    #[inline]
    pub(crate) fn reached(&self, deadline: Instant) -> bool {
        match self.not_yet_reached() {
            // The clock is before `ahead`, so before `deadline` too.
            Some(ahead) if ahead <= deadline => false,
            _ => self.now() >= deadline,
        }
    }

    /// A deadline `after` from now for a timeout that tolerates ending a
    /// little late: measured from the coarse bound when the bound's margin
    /// is at most 1 % of `after` (so a timeout of a second or two and up
    /// on a usual tick), else from the precise clock. Never early; late by
    /// at most the margin. `None` past what an `Instant` can hold.
    #[inline]
    pub(crate) fn deadline_after(&self, after: Duration) -> Option<Instant> {
        match &self.bound {
            Some(b) if after >= b.coarse_enough => b
                .ahead_of_now_by(after)
                .or_else(|| self.now().checked_add(after)),
            _ => self.now().checked_add(after),
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

/// An upper bound on the monotonic clock from its coarse twin (see the
/// module docs).
pub(crate) struct ClockBound {
    /// An instant, and the monotonic clock's reading (in nanoseconds) taken
    /// just before it: `base` is that reading or a little later.
    base: Instant,
    base_ns: u64,
    /// How far past a coarse reading the clock may be: three of the coarse
    /// clock's ticks and a millisecond. (On a 4 ms-tick VM the coarse clock
    /// was measured 3 to 7.4 ms behind, never less: its reading lags the
    /// tick that made it.)
    margin_ns: u64,
    /// The shortest timeout measured from the bound: a hundred margins,
    /// so such a timeout ends at most 1 % late.
    coarse_enough: Duration,
}

impl ClockBound {
    /// Coarser than this, the bound would rarely be ahead of a deadline
    /// worth the skip.
    const MAX_RESOLUTION_NS: u64 = 20_000_000;

    /// The bound for this machine; `None` if the coarse clock is missing
    /// or too coarse.
    pub(crate) fn new() -> Option<ClockBound> {
        let resolution = clock_resolution_ns(libc::CLOCK_MONOTONIC_COARSE)?;
        if resolution == 0 || resolution > Self::MAX_RESOLUTION_NS {
            return None;
        }
        let base_ns = clock_ns(libc::CLOCK_MONOTONIC)?;
        let base = Instant::now();
        let margin_ns = 3 * resolution + 1_000_000;
        Some(ClockBound {
            base,
            base_ns,
            margin_ns,
            coarse_enough: Duration::from_nanos(margin_ns * 100),
        })
    }

    /// An instant the monotonic clock has surely not reached: the coarse
    /// reading plus the margin. `base` is at or after `base_ns` on the
    /// clock, so the instant is at or after that sum.
    #[inline]
    pub(crate) fn ahead_of_now(&self) -> Option<Instant> {
        self.ahead_of_now_by(Duration::ZERO)
    }

    /// [`ahead_of_now`](Self::ahead_of_now) plus `after`, with one addition
    /// to an `Instant` (`None` if it overflows).
    #[inline]
    pub(crate) fn ahead_of_now_by(&self, after: Duration) -> Option<Instant> {
        let coarse = clock_ns(libc::CLOCK_MONOTONIC_COARSE)?;
        let ahead = (coarse + self.margin_ns).checked_sub(self.base_ns)?;
        self.base
            .checked_add(Duration::from_nanos(ahead).checked_add(after)?)
    }
}

/// The coarse monotonic clock in nanoseconds: the clock as of the last
/// tick, read for a few nanoseconds (see the module docs). For cadences of
/// many ticks that must not cost a precise reading.
#[inline]
pub(crate) fn coarse_ns() -> Option<u64> {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// `clock`'s reading in nanoseconds.
#[inline]
fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    clock_query(libc::clock_gettime, clock)
}

/// `clock`'s resolution in nanoseconds.
fn clock_resolution_ns(clock: libc::clockid_t) -> Option<u64> {
    clock_query(libc::clock_getres, clock)
}

/// `query` (`clock_gettime` or `clock_getres`) of `clock`, in nanoseconds.
#[inline]
fn clock_query(
    query: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int,
    clock: libc::clockid_t,
) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both queries write one timespec through the pointer, which
    // is valid for the call.
    let rc = unsafe { query(clock, &mut ts) };
    (rc == 0).then_some(ts).and_then(timespec_ns)
}

#[inline]
fn timespec_ns(ts: libc::timespec) -> Option<u64> {
    Some(u64::try_from(ts.tv_sec).ok()? * 1_000_000_000 + u64::try_from(ts.tv_nsec).ok()?)
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
    fn a_deadline_is_never_early_and_a_long_one_late_by_at_most_the_margin() {
        let t = TimeSource::real();
        let margin = t.bound.as_ref().map_or(0, |b| b.margin_ns);
        for after in [
            Duration::from_millis(1),
            Duration::from_nanos(margin * 100),
            Duration::from_secs(60),
        ] {
            let before = Instant::now();
            let d = t.deadline_after(after).unwrap();
            let then = Instant::now();
            assert!(d >= before + after, "{after:?}: early");
            let late = if u128::from(margin) * 100 <= after.as_nanos() {
                Duration::from_nanos(margin)
            } else {
                Duration::ZERO
            };
            assert!(d <= then + after + late, "{after:?}: later than the margin");
        }
        assert_eq!(t.deadline_after(Duration::MAX), None);
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
    fn the_bound_is_never_behind_the_clock_and_moves_with_it() {
        let Some(bound) = ClockBound::new() else {
            eprintln!("no usable coarse clock here: nothing to check");
            return;
        };
        let first = bound.ahead_of_now().unwrap();
        let mut last = first;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(50) {
            // The clock first: the bound is ahead of the clock as it was
            // when the bound was read, which a preempted test may see late.
            let now = Instant::now();
            let ahead = bound.ahead_of_now().unwrap();
            assert!(ahead > now, "bound {ahead:?} not ahead of {now:?}");
            assert!(ahead >= last, "the bound went back");
            last = ahead;
        }
        assert!(last > first, "the bound did not move in 50 ms");
        assert!(TimeSource::paused().not_yet_reached().is_none());
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
