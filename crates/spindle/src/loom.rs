//! The model-checking seam: the synchronisation types the runtime's
//! cross-thread protocols are written with.
//!
//! Normally these are std's. Built with `--cfg spindle_loom` (see
//! `tests/loom_models.rs` and `docs/HACKING.md`, "Model checks") they are
//! [loom]'s, which runs a protocol under every interleaving and memory
//! ordering it allows. Only the protocol modules (`fiber/token.rs`,
//! `sched/handshake.rs`, `sched/sleep_word.rs`) use this facade; they depend on nothing else in the
//! crate, so the model tests compile them on their own.
//!
//! [loom]: https://docs.rs/loom

#![allow(unused_imports)]

#[cfg(not(spindle_loom))]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{
            fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }
    pub(crate) use std::sync::Arc;
}

#[cfg(spindle_loom)]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use ::loom::sync::atomic::{
            fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }
    pub(crate) use ::loom::sync::Arc;
}

/// Only the model tests use a cell through the facade.
#[cfg(spindle_loom)]
pub(crate) mod cell {
    pub(crate) use ::loom::cell::UnsafeCell;
}
