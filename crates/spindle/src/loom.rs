//! The model-checking seam: the synchronisation types the runtime's
//! cross-thread protocols are written with.
//!
//! Normally these are std's. In the model tests — `tests/loom_models.rs`,
//! built with `--cfg spindle_loom` (see `docs/HACKING.md`, "Model checks")
//! — they are [loom]'s, which runs a protocol under every interleaving and
//! memory ordering it allows. The library itself always gets std's (loom's
//! atomics are not `const`), so the loom types apply only where both
//! `spindle_loom` and `test` are set: in the model test crate. Only the
//! protocol modules (`fiber/token.rs`, `sched/handshake.rs`,
//! `sched/sleep_word.rs`, `sched/mailbox.rs`, `sync/lock_word.rs`,
//! `chan/hand_off.rs`, `membarrier.rs`) use this facade; they depend on
//! nothing else in the crate, so the model tests compile them on their own.
//!
//! [loom]: https://docs.rs/loom

#![allow(unused_imports)]

#[cfg(not(all(spindle_loom, test)))]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{
            fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }
    pub(crate) use std::sync::Arc;
}

#[cfg(all(spindle_loom, test))]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use ::loom::sync::atomic::{
            fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }
    pub(crate) use ::loom::sync::Arc;
}

/// std's `UnsafeCell` behind loom's access API (`with`, `with_mut`), so a
/// protocol module's cell is the same code in the library and the models.
#[cfg(not(all(spindle_loom, test)))]
pub(crate) mod cell {
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> UnsafeCell<T> {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(all(spindle_loom, test))]
pub(crate) mod cell {
    pub(crate) use ::loom::cell::UnsafeCell;
}
