//! `wasi:clocks/monotonic-clock@0.3.0` on spindle's timers.
//!
//! wasmtime-wasi's WASI 0.3 clock waits are tokio timers: serving them
//! would put a tokio runtime (its own threads, its own timer wheel) in the
//! path of every sleeping request. Instead the two waits, `wait-for` and
//! `wait-until`, are defined again here over [`spindle::time::sleep_future`]:
//! the instance's event loop polls them on its own fiber, the worker's
//! timer heap wakes it, and nothing else runs. The store's monotonic clock
//! is [`SpindleClock`], so `now` and `wait-until` agree with the timers
//! (and with paused time, in tests).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime_wasi::HostMonotonicClock;

/// The monotonic clock guests read: nanoseconds on spindle's clock since
/// the first reading in this process.
pub(crate) struct SpindleClock;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(spindle::time::now)
}

fn mark_now() -> u64 {
    let since = spindle::time::now().saturating_duration_since(epoch());
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

impl HostMonotonicClock for SpindleClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        mark_now()
    }
}

const INTERFACE: &str = "wasi:clocks/monotonic-clock@0.3.0";

/// Replaces wasmtime-wasi's two waits (added before, with the rest of
/// WASI 0.3) with spindle's.
pub(crate) fn add_to_linker<T: Send + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(INTERFACE)?;
    clock.func_wrap_concurrent("wait-for", |_, (nanos,): (u64,)| {
        Box::pin(async move {
            if nanos > 0 {
                spindle::time::sleep_future(Duration::from_nanos(nanos)).await;
            }
            Ok(())
        })
    })?;
    clock.func_wrap_concurrent("wait-until", |_, (mark,): (u64,)| {
        Box::pin(async move {
            let now = mark_now();
            if mark > now {
                spindle::time::sleep_future(Duration::from_nanos(mark - now)).await;
            }
            Ok(())
        })
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
