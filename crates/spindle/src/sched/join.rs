//! `JoinHandle::join`: waiting for a fiber's result.
//!
//! The handle and the join-waiter protocol belong to the fiber layer
//! (`fiber::JoinHandle::register_joiner`); the wait is made here, where
//! waits are.

use super::park::{self, WaitKind, Wake};
use crate::fiber::{JoinError, JoinHandle};

impl<T> JoinHandle<T> {
    /// Waits for the fiber to finish and returns its value.
    ///
    /// On a fiber this parks the fiber; on a plain thread it blocks the
    /// thread. A join is a cancellation point of the *joining* fiber.
    ///
    /// ```
    /// spindle::run(|| {
    ///     let h = spindle::spawn(|| "done");
    ///     assert_eq!(h.join().unwrap(), "done");
    /// });
    /// ```
    pub fn join(self) -> Result<T, JoinError> {
        park::exit_if_cancelled();
        // Fork/join fast path: a fiber that has not started yet was stamped
        // before this join, so one yield lets it run first (FIFO order). It
        // usually finishes meanwhile, and the waiter registration and the
        // park below are skipped. If it is not done, we wait as usual.
        if !self.is_started() && !self.is_finished() {
            park::yield_now();
        }
        if !self.is_finished() {
            // One registration per handle (join consumes it).
            let why = park::block(
                WaitKind::Join,
                None,
                |notify| self.register_joiner(notify),
                |_| {},
            );
            match why {
                Wake::Ready => {}
                other => park::exit_for(other),
            }
        }
        self.take_result()
    }
}
