//! Loud failures: how the runtime says that something went wrong that it
//! could not hand back to a caller (a stalled worker, a panicking `Drop`
//! it caught, a stack it could not get).
//!
//! Through `tracing` (target `spindle`, level WARN) when the application
//! has installed a global subscriber; otherwise straight to stderr as
//! `spindle: ...`, so a program that set up no logging still hears it.
//! Writing never fails the caller: a closed stderr is ignored. (The stack
//! overflow report is the exception: it runs in a signal handler and
//! writes with `write(2)` itself.)

use std::io::Write as _;

/// Reports `message` (see the module docs); use [`loud!`].
pub(crate) fn warn(message: std::fmt::Arguments<'_>) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!(target: "spindle", "{message}");
    } else {
        let _ = writeln!(std::io::stderr().lock(), "spindle: {message}");
    }
}

/// `loud!("fiber {id} ...", ...)`: a [`warn`] with `format_args!`.
macro_rules! loud {
    ($($arg:tt)*) => {
        $crate::loud::warn(format_args!($($arg)*))
    };
}
pub(crate) use loud;

/// Wakes `waker`, catching a panic from its `wake` (reported as `what`): for
/// wakes the runtime makes from its own loops (timers, readiness), where a
/// panic would end a worker or the background poller.
pub(crate) fn wake_caught(waker: std::task::Waker, what: &str) {
    let woke = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || waker.wake()));
    if let Err(payload) = woke {
        warn(format_args!(
            "a panic in a waker's wake ({what}) was caught: {}",
            crate::fiber::panic_message(&*payload)
        ));
        // Its own Drop might panic too: never run it.
        std::mem::forget(payload);
    }
}
