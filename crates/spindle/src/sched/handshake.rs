//! The asymmetric Dekker handshake that lets one other thread into a
//! worker's private state while the worker is stalled (`docs/DESIGN.md`,
//! "A stalled worker").
//!
//! # The protocol
//!
//! The owner marks itself `busy`, then checks `steal_req`. A thief sets
//! `steal_req`, then checks `busy`. With a full fence between each side's
//! store and its load, at least one of them sees the other, and only a side
//! that saw nothing enters. An owner that sees a thief steps back and waits
//! until the thief is done; a thief that sees the owner gives up.
//!
//! The owner is on the hot path (twice per dispatch) and the thief almost
//! never runs. So the owner's fence is only a compiler fence, and the thief
//! pays for both with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which
//! runs a full barrier on every thread of the process. Where the kernel
//! lacks it (or under QEMU), both sides use `fence(SeqCst)`, which is also
//! what the model test checks (`tests/loom_models.rs`).

use crate::loom::sync::atomic::{AtomicBool, Ordering};
use crate::membarrier as barrier;

/// Decides whether the owner or one thief is inside.
#[derive(Debug)]
pub(crate) struct Handshake {
    busy: AtomicBool,
    steal_req: AtomicBool,
}

impl Handshake {
    pub(crate) fn new() -> Handshake {
        Handshake {
            busy: AtomicBool::new(false),
            steal_req: AtomicBool::new(false),
        }
    }

    /// The owner enters, waiting for a thief that is inside to leave.
    #[inline]
    pub(crate) fn owner_enter(&self) {
        loop {
            self.busy.store(true, Ordering::Relaxed);
            barrier::light();
            if !self.steal_req.load(Ordering::Acquire) {
                return;
            }
            // A thief is in (or deciding): step back until it is done.
            self.busy.store(false, Ordering::Release);
            while self.steal_req.load(Ordering::Acquire) {
                spin_hint();
            }
        }
    }

    /// The owner leaves.
    #[inline]
    pub(crate) fn owner_leave(&self) {
        self.busy.store(false, Ordering::Release);
    }

    /// Another thread tries to enter; true if it is now inside.
    pub(crate) fn thief_try_enter(&self) -> bool {
        if self.steal_req.swap(true, Ordering::Acquire) {
            return false; // another thief
        }
        barrier::heavy();
        if self.busy.load(Ordering::Acquire) {
            self.steal_req.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// The thief leaves.
    pub(crate) fn thief_leave(&self) {
        self.steal_req.store(false, Ordering::Release);
    }
}

#[cfg(not(all(spindle_loom, test)))]
fn spin_hint() {
    std::hint::spin_loop();
}

#[cfg(all(spindle_loom, test))]
fn spin_hint() {
    ::loom::thread::yield_now();
}

#[cfg(all(test, spindle_loom))]
mod models {
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use ::loom::thread;

    struct Guarded {
        handshake: Handshake,
        value: UnsafeCell<u32>,
    }

    // SAFETY: the value is touched only inside the handshake, which is
    // what this model checks (loom reports any concurrent access).
    unsafe impl Sync for Guarded {}

    /// The owner entering and leaving twice against a thief trying once:
    /// never both inside (loom fails on a concurrent access to the cell),
    /// and the owner always gets in.
    #[test]
    fn owner_and_thief_are_never_inside_together() {
        ::loom::model(|| {
            let g = Arc::new(Guarded {
                handshake: Handshake::new(),
                value: UnsafeCell::new(0),
            });
            let t = g.clone();
            let thief = thread::spawn(move || {
                if t.handshake.thief_try_enter() {
                    // SAFETY: inside.
                    t.value.with_mut(|v| unsafe { *v += 10 });
                    t.handshake.thief_leave();
                    true
                } else {
                    false
                }
            });
            for _ in 0..2 {
                g.handshake.owner_enter();
                // SAFETY: inside.
                g.value.with_mut(|v| unsafe { *v += 1 });
                g.handshake.owner_leave();
            }
            let stole = thief.join().unwrap();
            g.handshake.owner_enter();
            // SAFETY: inside, and the thief is gone.
            let v = g.value.with(|v| unsafe { *v });
            assert_eq!(v, 2 + if stole { 10 } else { 0 });
        });
    }
}
