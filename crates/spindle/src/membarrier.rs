//! The asymmetric fence: a Dekker-style handshake where one side runs
//! constantly and the other almost never (`docs/DESIGN.md`, "A stalled
//! worker").
//!
//! Each side writes its own word, fences, then reads the other's; with a
//! full fence on both sides at least one sees the other. When the kernel
//! offers `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, the frequent side
//! ([`light`]) needs only a compiler fence and the rare side ([`heavy`])
//! makes the kernel run a full barrier on every thread of the process.
//! Where the kernel lacks it (or under QEMU), both sides use
//! `fence(SeqCst)`, which is also what the model tests check
//! (`tests/loom_models.rs`).
//!
//! Used by the stalled-worker handshake (`sched/handshake.rs`: the worker
//! is frequent, a thief rare) and the cancel flag (`fiber/token.rs`: every
//! wait is frequent, a cancel rare).

#[cfg(not(all(spindle_loom, test)))]
mod barrier {
    use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const MEMBARRIER: u8 = 1;
    const FENCES: u8 = 2;
    static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

    // From <linux/membarrier.h>.
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Registers the process for expedited membarriers (once; called when
    /// a runtime starts, before any party can run).
    pub(crate) fn init() {
        if MODE.load(Ordering::Acquire) != UNKNOWN {
            return;
        }
        // SAFETY: membarrier takes plain integers and touches no memory of
        // ours; it fails cleanly where unsupported.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_REGISTER_PRIVATE_EXPEDITED,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
        let mode = if rc == 0 { MEMBARRIER } else { FENCES };
        let _ = MODE.compare_exchange(UNKNOWN, mode, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The frequent side: free when the rare side is a membarrier.
    #[inline]
    pub(crate) fn light() {
        if MODE.load(Ordering::Relaxed) == MEMBARRIER {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The rare side: a full barrier on every thread of the process.
    pub(crate) fn heavy() {
        if MODE.load(Ordering::Relaxed) == MEMBARRIER {
            // SAFETY: as in `init`.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    CMD_PRIVATE_EXPEDITED,
                    0 as libc::c_long,
                    0 as libc::c_long,
                )
            };
            if rc == 0 {
                return;
            }
            // Should not happen once registered; be safe from now on.
            MODE.store(FENCES, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }
}

/// Under the model checker both halves are full fences (the fallback).
#[cfg(all(spindle_loom, test))]
mod barrier {
    use crate::loom::sync::atomic::{fence, Ordering};

    pub(crate) fn light() {
        fence(Ordering::SeqCst);
    }

    pub(crate) fn heavy() {
        fence(Ordering::SeqCst);
    }
}

#[cfg(not(all(spindle_loom, test)))]
pub(crate) use barrier::init;

/// Nothing to register under the model checker.
#[cfg(all(spindle_loom, test))]
pub(crate) fn init() {}

pub(crate) use barrier::{heavy, light};
