//! When an instance's event loop comes to rest, and who waits for it.
//!
//! A WASI 0.3 guest usually returns its response first and writes the body
//! from a task of its own a turn or two later in its instance's loop. The
//! request fiber that got the response wants the whole body if the guest
//! is about to finish it — a small body goes out with its head in one
//! write, with a `Content-Length` — and the head at once if the guest will
//! not finish it soon (a stream, a body that waits on a clock or on the
//! request's own body). Which of the two it is, only the loop can tell.
//!
//! The loop *rests* when a poll of it ends with every task of the guest
//! waiting on something outside (a clock, a socket, the next request), or
//! with the guest computing (the second fuel yield in a row, see
//! `instance.rs`). Whatever the guest writes without waiting on the
//! outside is written by then. So the request fiber looks at the body,
//! and while there is nothing new it waits for the loop's next rest:
//!
//! - after the rest, a look that takes nothing means the guest is waiting
//!   or computing: the head goes out and the body streams after it;
//! - a look that takes something (a body written in pieces, each waiting
//!   for the reader to take the last through a channel of one) waits for
//!   one more rest — if one is coming: a loop that is at rest and that
//!   nothing has woken since (the take did not unblock its writer, which
//!   waits on something else, such as the request's own body) rests no
//!   more until an outside event, so the head goes out now.
//!
//! The rests are counted. The fiber waits for a rest *after the one its
//! answer was sent in*: the loop stamps the count on the request when its
//! call hands the response over ([`Taken::answered`]), and the rest that
//! ends that poll is the first that counts. Without the stamp, a loop that
//! rested between sending the answer and the fiber's first look (another
//! worker, or the fiber queued behind others) could leave the fiber
//! waiting for a rest that comes only with the next outside event.
//!
//! The host sees a guest's answer only when that turn of the guest ends
//! (its tasks wait, or yield): a guest that answers and computes in the
//! same turn has its answer seen after the computation, and the rest taken
//! as that turn ends sends what it wrote at once.
//!
//! An instance that ends — dropped past its deadlines, trapped, done —
//! wakes every fiber still waiting ([`Rests::end`]), and a wait past its
//! end returns at once: the body then reports its writer gone.
//!
//! This replaced a spin: the fiber yielded its worker up to eight times,
//! looking at the body after each yield. Under load most requests spent
//! all eight (the loop needs a turn of its own for the body), each a
//! switch and a look through wasmtime's body machinery.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

/// The rests of one instance's loop: a count, and the request fibers
/// waiting for the next.
///
/// ```text
/// loop:    poll ─ answer sent (stamp n) ─ … ─ rest (n+1) ─ poll ─ rest (n+2)
/// fiber:              woken ─ look: nothing ─ wait past n ─┘ look: whole body
/// ```
#[derive(Default)]
pub(super) struct Rests {
    state: Mutex<State>,
    /// The loop rested and has not been woken or polled since.
    at_rest: AtomicBool,
}

#[derive(Default)]
struct State {
    count: u64,
    ended: bool,
    waiting: Vec<Waker>,
}

impl Rests {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times the loop has rested so far.
    pub(super) fn count(&self) -> u64 {
        self.state().count
    }

    /// The loop came to rest: wakes every fiber waiting for it.
    pub(super) fn rested(&self) {
        let mut state = self.state();
        state.count += 1;
        self.at_rest.store(true, Ordering::SeqCst);
        // Waking under the lock: the wakers are `block_on`'s, which only
        // queue their fiber; the woken fiber takes this lock when it runs.
        for waker in state.waiting.drain(..) {
            waker.wake();
        }
    }

    /// The loop was woken, or is being polled: a rest may come.
    pub(super) fn stirred(&self) {
        if self.at_rest.load(Ordering::Relaxed) {
            self.at_rest.store(false, Ordering::SeqCst);
        }
    }

    /// The instance is gone: wakes every waiting fiber, and every later
    /// wait returns at once.
    pub(super) fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        for waker in state.waiting.drain(..) {
            waker.wake();
        }
    }

    /// `Ready(Some(count))` once the loop has rested more than `seen`
    /// times, or has ended; `Ready(None)` if it is at rest after rest
    /// `seen` with nothing woken since (no rest is coming); else `cx` is
    /// woken at the next rest.
    pub(super) fn poll_past(&self, seen: u64, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        let mut state = self.state();
        if state.count > seen || state.ended {
            return Poll::Ready(Some(state.count));
        }
        if self.at_rest.load(Ordering::SeqCst) {
            return Poll::Ready(None);
        }
        state.waiting.push(cx.waker().clone());
        Poll::Pending
    }
}

/// Ends an instance's [`Rests`] however its fiber leaves (returns,
/// unwinds, is cancelled).
pub(super) struct EndRests<'a>(pub(super) &'a Rests);

impl Drop for EndRests<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// What a request learns from the instance that takes its job: written by
/// the instance, read by the request fiber once the answer is in.
pub(super) struct Taken {
    /// The instance was made for this job.
    pub(super) fresh_instance: AtomicBool,
    /// The rests of the instance's loop, set when it accepts the job.
    rests: OnceLock<Arc<Rests>>,
    /// The rest count when the answer was sent ([`NOT_YET`] before).
    answered_at: AtomicU64,
}

const NOT_YET: u64 = u64::MAX;

impl Default for Taken {
    fn default() -> Taken {
        Taken {
            fresh_instance: AtomicBool::new(false),
            rests: OnceLock::new(),
            answered_at: AtomicU64::new(NOT_YET),
        }
    }
}

impl Taken {
    /// The instance accepts the job: its fiber will wait on `rests`.
    pub(super) fn accepted_by(&self, rests: &Arc<Rests>) {
        let _ = self.rests.set(rests.clone());
    }

    /// The instance's call has sent the answer, during the loop's poll
    /// that ends with rest number `count + 1`.
    pub(super) fn answered(&self, count: u64) {
        self.answered_at.store(count, Ordering::Release);
    }

    /// After a look at the body that found nothing new (`first` for the
    /// first look, `took` whether the last look took anything): waits for
    /// the loop to rest and says whether to look again. `seen` is this
    /// request's place in the count, kept between calls.
    pub(super) fn wait_for_rest(&self, seen: &mut Option<u64>, took: bool) -> bool {
        let Some(rests) = self.rests.get() else {
            return false; // not taken by an instance: nothing will come
        };
        let since = match *seen {
            // The first wait: past the poll the answer was sent in. The
            // stamp follows the send in that same poll; if this fiber
            // looks in between (on another worker), that poll has not
            // rested yet, and the count now is the same place.
            None => match self.answered_at.load(Ordering::Acquire) {
                NOT_YET => rests.count(),
                at => at,
            },
            // A rest came and the look after it took nothing: the guest
            // waits or computes.
            Some(_) if !took => return false,
            Some(at) => at,
        };
        match spindle::block_on(std::future::poll_fn(|cx| rests.poll_past(since, cx))) {
            Some(count) => {
                *seen = Some(count);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wait_ends_at_the_first_rest_past_its_mark() {
        let rests = Rests::default();
        let (woken, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(rests.poll_past(0, &mut cx), Poll::Pending);
        rests.rested();
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(rests.poll_past(0, &mut cx), Poll::Ready(Some(1)));
        // Past 1, with the loop woken since: the rest already counted
        // does not end it, the next does.
        rests.stirred();
        assert_eq!(rests.poll_past(1, &mut cx), Poll::Pending);
        rests.rested();
        assert_eq!(woken.0.load(Ordering::SeqCst), 2);
        // A rest with nobody waiting wakes nobody, and is counted.
        rests.stirred();
        rests.rested();
        assert_eq!(woken.0.load(Ordering::SeqCst), 2);
        assert_eq!(rests.poll_past(1, &mut cx), Poll::Ready(Some(3)));
    }

    #[test]
    fn a_loop_at_rest_that_nothing_woke_has_no_rest_coming() {
        let rests = Rests::default();
        let (woken, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        rests.rested();
        assert_eq!(rests.poll_past(1, &mut cx), Poll::Ready(None));
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        // Woken (a take freed its writer, a timer fired): one is coming.
        rests.stirred();
        assert_eq!(rests.poll_past(1, &mut cx), Poll::Pending);
        rests.rested();
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(rests.poll_past(1, &mut cx), Poll::Ready(Some(2)));
    }

    #[test]
    fn the_end_wakes_every_waiter_and_every_later_wait_returns() {
        let rests = Rests::default();
        let (woken, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert!(rests.poll_past(0, &mut cx).is_pending());
        }
        drop(EndRests(&rests));
        assert_eq!(woken.0.load(Ordering::SeqCst), 3);
        assert_eq!(rests.poll_past(0, &mut cx), Poll::Ready(Some(0)));
        assert_eq!(rests.poll_past(7, &mut cx), Poll::Ready(Some(0)));
    }

    #[test]
    fn a_request_waits_past_the_rest_its_answer_was_sent_before() {
        let rests = Arc::new(Rests::default());
        rests.rested(); // an earlier poll of the loop
        rests.stirred(); // the next poll
        let taken = Taken::default();
        taken.accepted_by(&rests);
        taken.answered(rests.count()); // sent during the poll ending in rest 2
        rests.rested(); // rest 2: before the fiber looks
        let mut seen = None;
        // Not run on a fiber: `block_on` blocks the thread, and rest 2 has
        // come, so it returns at once.
        assert!(taken.wait_for_rest(&mut seen, false));
        assert_eq!(seen, Some(2));
        // A look after it took something, and woke the loop (its writer
        // waited for room): wait for one more rest.
        rests.stirred();
        let waiter = std::thread::spawn({
            let taken = Arc::new(taken);
            move || {
                let mut seen = seen;
                let again = taken.wait_for_rest(&mut seen, true);
                (again, seen)
            }
        });
        while rests.state().waiting.is_empty() {
            std::thread::yield_now();
        }
        rests.rested();
        assert_eq!(waiter.join().unwrap(), (true, Some(3)));
    }

    #[test]
    fn a_look_that_took_nothing_or_a_loop_left_at_rest_stops_the_wait() {
        let rests = Arc::new(Rests::default());
        let taken = Taken::default();
        taken.accepted_by(&rests);
        taken.answered(0);
        rests.rested();
        let mut seen = None;
        assert!(taken.wait_for_rest(&mut seen, false));
        // It took nothing after the rest: the guest waits or computes.
        assert!(!taken.wait_for_rest(&mut seen.clone(), false));
        // It took something, but the loop stays at rest: nothing comes.
        assert!(!taken.wait_for_rest(&mut seen, true));
        // Not taken by an instance: nothing to wait for.
        assert!(!Taken::default().wait_for_rest(&mut None, false));
    }
}
