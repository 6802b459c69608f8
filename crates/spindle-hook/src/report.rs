//! Reporting from inside an interposed call, where nothing may unwind and
//! stderr must be written without the hook.

use std::any::Any;

use libc::c_int;

/// Writes `msg` to stderr with libc's own `write` (no allocation, no lock).
pub(crate) fn raw(msg: &[u8]) {
    // SAFETY: a valid buffer of `msg.len()` bytes.
    unsafe { crate::real::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// A panic caught inside a changed call (a bug: Spindle's waits report
/// their failures as errors). Said on stderr; the call fails with `EIO`.
pub(crate) fn caught_panic(call: &'static str, payload: Box<dyn Any + Send>) -> c_int {
    let why = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string payload");
    let line = format!("spindle-hook: a panic inside {call} ({why}); the call fails with EIO\n");
    raw(line.as_bytes());
    // A payload whose drop panics must not unwind out of the call either.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(payload)));
    libc::EIO
}
