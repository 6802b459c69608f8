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
