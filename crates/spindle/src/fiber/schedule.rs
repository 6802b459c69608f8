//! The scheduling hook: the one way the fiber layer reaches a scheduler
//! (`docs/DESIGN.md`, "Layers inside spindle").
//!
//! A fiber's header holds the [`Schedule`] of the runtime that spawned it.
//! Whoever takes a parked fiber's token (an unpark, a winning wake) hands
//! the fiber to that hook, which queues it on its owner worker. The fiber
//! layer never names the scheduler's types: `sched` implements the trait,
//! and tests of this layer can implement it with a plain queue.

use super::FiberRef;

/// A place in a scheduler's service order: every queue push is stamped from
/// a clock (its worker's, or the global queue's), and a worker runs the
/// oldest head first.
pub(crate) type Stamp = u64;

/// Where a woken fiber goes in its owner's service order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Behind everything queued so far (a fresh stamp).
    Next,
    /// Ahead of everything (accept admission: a listener's fiber).
    Urgent,
    /// At this stamp (a timer that fired: the time it became due).
    At(Stamp),
}

impl Placement {
    /// Where a wake puts the fiber: at the head when `urgent`, else behind
    /// what is queued.
    pub(crate) fn of_wake(urgent: bool) -> Placement {
        if urgent {
            Placement::Urgent
        } else {
            Placement::Next
        }
    }
}

/// What the fiber layer needs from a scheduler.
pub(crate) trait Schedule: Send + Sync + 'static {
    /// Makes `fiber` runnable on its owner worker. Called by the one party
    /// that took the fiber's park token from `PARKED`, so once per park.
    fn schedule(&self, fiber: FiberRef, placement: Placement);

    /// [`schedule`](Self::schedule) for a waker giving up the reference it
    /// holds, which the run queue then takes as is: no count taken and
    /// dropped around the hand-over, two locked updates of a line the
    /// fiber's worker writes too.
    ///
    /// `self` may be borrowed from `fiber`'s own header (the caller has no
    /// other hold on the scheduler), so an implementation must keep `self`
    /// alive until it returns: where it cannot be sure something else
    /// does, it keeps a reference to the fiber and returns it, for the
    /// caller to drop once `self` is no longer borrowed. This default
    /// always does.
    #[must_use = "the reference returned is dropped after the call, not in it"]
    fn schedule_owned(&self, fiber: FiberRef, placement: Placement) -> Option<FiberRef> {
        self.schedule(fiber.clone(), placement);
        Some(fiber)
    }

    /// Wakes the OS thread of `fiber`'s owner worker: the fiber waits with
    /// that thread blocked in place (see `park_running_in_place`).
    fn unpark_owner_thread(&self, fiber: &FiberRef);

    /// Counts a wait published by one of this scheduler's fibers (`true`)
    /// or its end (`false`), for `Stats::wait_registrations`.
    fn count_wait(&self, published: bool);
}
