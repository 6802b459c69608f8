//! Sleeping and timeouts: on a fiber they park the fiber on its worker's
//! timer heap; on a plain thread they block the thread, as std does.
//!
//! ```
//! use std::time::{Duration, Instant};
//! spindle::run(|| {
//!     let start = Instant::now();
//!     let sleepers: Vec<_> = (0..1000)
//!         .map(|_| spindle::spawn(|| spindle::time::sleep(Duration::from_millis(20))))
//!         .collect();
//!     for s in sleepers {
//!         s.join().unwrap();
//!     }
//!     // A thousand fibers slept at once, not one after another.
//!     assert!(start.elapsed() < Duration::from_secs(2));
//! });
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::poll::timer::{TimerSlot, TimerTarget};
use crate::sched::{park, worker};

/// Sleeps for `duration`: parks the fiber (or blocks the thread).
pub fn sleep(duration: Duration) {
    let now = now();
    match now.checked_add(duration) {
        Some(deadline) => park::sleep_until(Some(now), deadline),
        None => park::sleep_forever(),
    }
}

/// Sleeps until `deadline`: parks the fiber (or blocks the thread).
pub fn sleep_until(deadline: Instant) {
    park::sleep_until(None, deadline)
}

pub use crate::fiber::wait::Elapsed;

/// The current time on the calling fiber's runtime: `Instant::now()`,
/// unless the runtime runs on a paused clock
/// ([`RuntimeBuilder::start_paused`](crate::RuntimeBuilder::start_paused)),
/// whose time moves only by [`advance`] and by jumps to the next timer.
/// Every deadline of the runtime — `sleep`, `timeout`, socket, lock and
/// channel timeouts — is measured against it. Off the runtime's workers
/// (a plain thread, a blocking-pool job) it is the real clock.
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let start = spindle::time::now();
///     spindle::time::sleep(Duration::from_millis(5));
///     assert!(spindle::time::now() - start >= Duration::from_millis(5));
/// });
/// ```
pub fn now() -> Instant {
    worker::now()
}

/// Whether [`now`] has reached `deadline` (`now() >= deadline`), for a
/// loop that asks on every turn. Cheaper than reading [`now`] while the
/// deadline is more than a few milliseconds away: the kernel's coarse
/// clock (read for a few nanoseconds, a tick or two behind) then shows it
/// is still ahead, and the precise clock is read only once it may not be.
/// The answer is `now() >= deadline`'s; it could only be late, never
/// early, if the coarse clock ever lagged more than the few ticks it is
/// allowed (a host starving the CPU that keeps time), as the runtime's
/// own timers would then be.
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let deadline = spindle::time::now() + Duration::from_millis(20);
///     assert!(!spindle::time::reached(deadline));
///     spindle::time::sleep(Duration::from_millis(20));
///     assert!(spindle::time::reached(deadline));
/// });
/// ```
pub fn reached(deadline: Instant) -> bool {
    worker::reached(deadline)
}

/// Moves the paused clock of the calling fiber's runtime forward by
/// `duration`: timers that fall due fire, and the caller yields once so
/// the fibers they wake get to run (as tokio's `time::advance`).
///
/// # Panics
///
/// Off a runtime's fiber, or if the runtime's clock is not paused.
///
/// ```
/// use std::time::Duration;
/// let rt = spindle::Runtime::builder().workers(1).start_paused(true).build().unwrap();
/// rt.run(|| {
///     let start = spindle::time::now();
///     let sleeper = spindle::spawn(|| spindle::time::sleep(Duration::from_secs(30)));
///     spindle::yield_now(); // the sleeper arms its timer
///     spindle::time::advance(Duration::from_secs(29));
///     assert!(!sleeper.is_finished());
///     spindle::time::advance(Duration::from_secs(1));
///     sleeper.join().unwrap();
///     assert_eq!(spindle::time::now() - start, Duration::from_secs(30));
/// });
/// ```
pub fn advance(duration: Duration) {
    let sched = worker::with_current(|here| {
        let here = here.expect("spindle::time::advance: not on a runtime's fiber");
        assert!(
            here.sched.time.is_paused(),
            "spindle::time::advance: the runtime's clock is not paused (RuntimeBuilder::start_paused)"
        );
        here.sched.clone()
    });
    let to = sched
        .time
        .now()
        .checked_add(duration)
        .expect("advance overflows Instant");
    sched.time.advance_to(to);
    sched.wake_due_workers();
    crate::sched::park::yield_now();
}

/// Seconds since the Unix epoch from the kernel's coarse wall clock
/// (`CLOCK_REALTIME_COARSE`: updated every scheduler tick, a few ms; read
/// without a system call and about 5× cheaper than `SystemTime::now`).
/// For what is stamped at one-second resolution on every message — an HTTP
/// `Date` header, a log line — where the precise clock's cost shows.
///
/// ```
/// let secs = spindle::time::coarse_unix_secs();
/// let precise = std::time::SystemTime::now()
///     .duration_since(std::time::UNIX_EPOCH)
///     .unwrap()
///     .as_secs();
/// assert!(precise.abs_diff(secs) <= 1);
/// ```
pub fn coarse_unix_secs() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is; the coarse
    // real-time clock exists on every Linux since 2.6.32.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
    }
    ts.tv_sec as u64
}

/// Runs `f` with a deadline `duration` from now that applies to every wait
/// inside it (nested timeouts take the earlier deadline). A wait past the
/// deadline fails: I/O with `TimedOut`, other waits (sleep, locks, channels,
/// joins) by leaving `f` — and `timeout` returns `Err(Elapsed)`. If `f`
/// returns normally after one of its waits was cut short, that is reported
/// as elapsed too (its value is dropped, as a timed-out future's would be).
///
/// On a plain thread the deadline cannot cut waits short; `timeout` then
/// only runs `f`.
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let r = spindle::time::timeout(Duration::from_millis(20), || {
///         spindle::time::sleep(Duration::from_secs(60));
///     });
///     assert!(r.is_err());
///     let r = spindle::time::timeout(Duration::from_secs(60), || 7);
///     assert_eq!(r, Ok(7));
/// });
/// ```
pub fn timeout<T>(duration: Duration, f: impl FnOnce() -> T) -> Result<T, Elapsed> {
    let Some(fiber) = worker::current_fiber().filter(|_| worker::can_park()) else {
        return Ok(f());
    };
    let header = &fiber.header;
    let deadline = now() + duration;
    let outer = header.deadline.get();
    let effective = match outer {
        Some(o) if o < deadline => o,
        _ => deadline,
    };
    header.deadline.set(Some(effective));
    let outer_elapsed = header.elapsed.replace(None);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let hit = header.elapsed.get();
    header.deadline.set(outer);
    header
        .elapsed
        .set(outer_elapsed.or(hit.filter(|&d| Some(d) == outer)));
    match result {
        Ok(v) if hit == Some(deadline) => {
            drop(v);
            Err(Elapsed::at(deadline))
        }
        Ok(v) => Ok(v),
        Err(payload) => match payload.downcast::<Elapsed>() {
            Ok(e) if e.deadline() == deadline => Err(*e),
            Ok(e) => std::panic::resume_unwind(e),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}

/// A future that completes at a deadline, for code that must not switch
/// fibers (a future polled by another library, such as a wasmtime host
/// import). Woken by the same timers as [`sleep`]; polled off the runtime,
/// by the background poller's timers.
///
/// ```
/// use std::time::{Duration, Instant};
/// let start = Instant::now();
/// spindle::block_on(spindle::time::sleep_future(Duration::from_millis(10)));
/// assert!(start.elapsed() >= Duration::from_millis(10));
/// ```
pub fn sleep_future(duration: Duration) -> Sleep {
    Sleep {
        deadline: now() + duration,
        armed: None,
    }
}

/// Like [`sleep_future`], until a deadline.
pub fn sleep_until_future(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        armed: None,
    }
}

/// The future returned by [`sleep_future`]. Dropped before its deadline,
/// it frees its waker at once: a request that finished in a millisecond
/// does not keep its fiber's waker in the timer heap for the rest of a
/// 30 s deadline.
pub struct Sleep {
    deadline: Instant,
    /// The armed timer's waker slot, once polled.
    armed: Option<Arc<TimerSlot>>,
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(slot) = self.armed.take() {
            slot.clear();
        }
    }
}

impl Sleep {
    /// When this sleep completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if reached(self.deadline) {
            return Poll::Ready(());
        }
        if let Some(slot) = &self.armed {
            // Armed already: a new waker goes into the same slot.
            slot.set(cx.waker());
            return Poll::Pending;
        }
        let slot = Arc::new(TimerSlot::new(cx.waker().clone()));
        let deadline = self.deadline;
        // The worker's own heap only while spindle's `block_on` polls us:
        // then the worker's loop (or the in-place poll) fires it. Any other
        // executor — off the runtime, or one that blocks a fiber's thread
        // without spindle knowing — gets the background poller's timers.
        if worker::in_block_on_poll() {
            worker::arm_timer(deadline, TimerTarget::Waker(slot.clone()));
        } else {
            crate::poll::background().arm(deadline, slot.clone());
        }
        self.armed = Some(slot);
        Poll::Pending
    }
}
