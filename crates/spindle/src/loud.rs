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

/// A panic payload's message, when it has one.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<non-string payload>")
}

/// Runs `f`, catching a panic from it and reporting it as a panic in
/// `what`: for user code the runtime runs on a worker's or the poller's
/// own stack (a `Drop`, a waker), where a panic would end that thread.
/// `what` is formatted only if there is a panic to report (this runs on
/// every fiber's finish).
pub(crate) fn caught(what: std::fmt::Arguments<'_>, f: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        warn(format_args!(
            "a panic in {what} was caught: {}",
            panic_message(&*payload)
        ));
        // Its own Drop might panic too: never run it.
        std::mem::forget(payload);
    }
}

/// Wakes `waker` from the runtime's own loops (timers, readiness),
/// catching a panic from its `wake` ([`caught`]).
pub(crate) fn wake_caught(waker: std::task::Waker, what: &str) {
    caught(format_args!("a waker's wake ({what})"), move || {
        waker.wake()
    });
}
