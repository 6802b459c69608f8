//! Fiber stacks: carved from large `MAP_NORESERVE` regions, a guard page below
//! each, pooled per worker.
//!
//! # Layout
//!
//! A [`SizeClass`] owns every stack of one usable size. It maps *regions* of
//! many *slots*; a slot is `[guard page][usable stack]`, the stack growing down
//! towards its guard. Regions are `MAP_NORESERVE`, so only the pages a fiber
//! touches cost memory.
//!
//! # Guards without mappings
//!
//! A separate `mmap` + `mprotect` guard per stack costs two of the kernel's
//! `vm.max_map_count` (65 530 by default) mappings and caps a process near
//! 32 000 fibers. Here a guard is installed with `madvise(MADV_GUARD_INSTALL)`
//! (Linux ≥ 6.13), which marks the page in the page tables and adds no
//! mapping: 200 000 stacks stay a handful of lines in `/proc/self/maps`. On
//! older kernels the first `EINVAL` switches the process to `mprotect`.
//! Guards survive `MADV_DONTNEED`, so a slot keeps its guard for life.
//!
//! # Reservations: spawn fails loudly, first run takes the stack
//!
//! A spawned fiber that has not run yet costs no stack, but a spawn that
//! could never get one must fail at the spawn, not later. So a spawn takes
//! a *reservation* ([`SizeClass::reserve`]): a count of slots the class can
//! still hand out (`headroom`). When it runs out, the class maps a new
//! region; if that fails, the spawn gets an error that names the limit hit.
//! A reservation costs address space only: a burst of 100 000 spawns maps
//! regions but touches none of their pages.
//!
//! When the fiber first runs, its worker takes a pooled stack (and returns
//! the reservation) or carves a never-used slot. Never-used slots are
//! *prepared* in batches as the carving reaches them: one `process_madvise`
//! installs the guards of the next 64 slots and another faults in their top
//! pages, the page every fiber touches first. Preparing a whole region when
//! it was mapped made every reservation cost a resident page.
//!
//! # Pooling and trimming
//!
//! A finished fiber's stack goes back to its worker's [`StackPool`] (bounded,
//! `RuntimeBuilder::max_pooled_stacks`); past the bound it is returned to its
//! class *dirty*: its pages stay resident and its slot goes on the class's
//! free list marked so. Giving pages back one stack at a time was the cost
//! of a burst: an `madvise(MADV_DONTNEED)` per stack, each a TLB shootdown
//! across every CPU the process runs on. Instead a dirty slot is handed out
//! first (its pages are warm, its guard is in place), and dirty slots are
//! given back in batches — sorted by address, adjacent slots merged into one
//! `madvise` (guards survive it) — when more than [`MAX_DIRTY`] pile up and
//! when a worker goes idle. While a batch is given back its slots are on
//! no list but still counted in `headroom`, so a first run that finds
//! every list empty waits for the batch (`take`). A pooled stack keeps the
//! pages its last fiber touched; a worker about to sleep gives back the
//! deep pages of its pooled stacks (everything but the top [`KEEP_HOT`]
//! bytes), at most once a second, so a burst of deep recursion does not
//! pin memory forever.
//!
//! # Files
//!
//! - `os.rs`: the system calls — mapping regions, guard pages (and the
//!   probe that picks how they are installed), batched advice, giving
//!   pages back, and the error that names the limit a failure hit.
//! - `class.rs`: a [`SizeClass`] — carving slots, reservations, the dirty
//!   and clean free lists, and one [`FiberStack`].
//! - `pool.rs`: a worker's [`StackPool`] of finished fibers' stacks and its
//!   credit cache of reservations.

mod class;
mod os;
mod pool;
#[cfg(test)]
mod tests;

use std::io;

pub(crate) use class::{size_class, FiberStack, Reservation, SizeClass};
pub(crate) use os::{human_size, page_size};
pub(crate) use pool::StackPool;

/// Smallest usable stack we hand out.
pub(crate) const MIN_STACK_SIZE: usize = 16 << 10;
/// Default usable stack size: 256 KiB, deep enough for ordinary code and
/// still only address space until touched.
pub(crate) const DEFAULT_STACK_SIZE: usize = 256 << 10;

/// Largest usable stack we hand out (Go's limit too).
pub(crate) const MAX_STACK_SIZE: usize = 1 << 30;

/// Rounds a requested stack size to what a [`SizeClass`] hands out; a size
/// past [`MAX_STACK_SIZE`] is an `InvalidInput` error.
pub(crate) fn round_stack_size(requested: usize) -> io::Result<usize> {
    if requested > MAX_STACK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "spindle: a fiber stack of {requested} bytes was asked for; the largest is {}",
                human_size(MAX_STACK_SIZE)
            ),
        ));
    }
    let page = page_size();
    Ok(requested.max(MIN_STACK_SIZE).div_ceil(page) * page)
}
