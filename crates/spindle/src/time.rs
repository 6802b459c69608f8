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
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::poll::timer::TimerTarget;
use crate::sched::{park, worker};

/// Sleeps for `duration`: parks the fiber (or blocks the thread).
pub fn sleep(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            // Effectively forever.
            sleep(Duration::from_secs(86_400 * 365));
        },
    }
}

/// Sleeps until `deadline`: parks the fiber (or blocks the thread).
pub fn sleep_until(deadline: Instant) {
    if !worker::can_park() {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        return;
    }
    while Instant::now() < deadline {
        // Nothing but the timer can end this wait.
        park::wait(Some(deadline), |_| true, |_| ());
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
        deadline: Instant::now() + duration,
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

/// The future returned by [`sleep_future`].
#[derive(Debug)]
pub struct Sleep {
    deadline: Instant,
    armed: Option<Waker>,
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
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        if self.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        let waker = cx.waker().clone();
        let deadline = self.deadline;
        if worker::on_fiber() {
            worker::arm_timer(deadline, TimerTarget::Waker(waker.clone()));
        } else {
            crate::poll::background().arm(deadline, waker.clone());
        }
        self.armed = Some(waker);
        Poll::Pending
    }
}
