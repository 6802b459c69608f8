//! Model checks of the runtime's cross-thread protocols, under loom.
//!
//! ```text
//! RUSTFLAGS="--cfg spindle_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p spindle --release --test loom_models
//! ```
//!
//! The protocol modules are compiled here on their own, from the same
//! source files the runtime uses, with `crate::loom` pointing at loom's
//! types (see `src/loom.rs`). The models themselves sit beside the code, in
//! each module's `models` test module. Without `--cfg spindle_loom` this
//! file is empty.
#![cfg(spindle_loom)]
#![allow(dead_code)]

#[path = "../src/loom.rs"]
mod loom;

#[path = "../src/membarrier.rs"]
mod membarrier;

#[path = "../src/fiber/token.rs"]
mod token;

#[path = "../src/sched/handshake.rs"]
mod handshake;

#[path = "../src/sched/sleep_word.rs"]
mod sleep_word;

#[path = "../src/sched/mailbox.rs"]
mod mailbox;

#[path = "../src/sync/lock_word.rs"]
mod lock_word;

#[path = "../src/chan/hand_off.rs"]
mod hand_off;
