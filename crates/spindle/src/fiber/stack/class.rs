//! A [`SizeClass`]: every stack of one usable size, the regions they are
//! carved from, the reservations spawns hold on them, and the free lists
//! finished stacks return to (the module docs of `stack` explain the
//! accounting).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use super::os::{
    advise_slots_batch, discard, explain_alloc_failure, install_guard, map_noreserve, page_size,
    MADV_GUARD_INSTALL, MADV_POPULATE_WRITE,
};

/// Dirty free slots a class keeps before it gives their pages back.
const MAX_DIRTY: usize = 1 << 20;
/// Target address-space size of one region.
const REGION_BYTES: usize = 64 << 20;

/// Never-used slots prepared at a time (see `SizeClass::prepare_batch`).
pub(super) const PREPARE_BATCH: usize = 64;

/// All stacks of one usable size, and the regions they are carved from.
pub(crate) struct SizeClass {
    /// Usable bytes of each stack.
    pub(crate) stack_size: usize,
    /// Guard bytes below each stack.
    pub(super) guard: usize,
    /// Slots this class can still hand out without mapping a new region,
    /// minus outstanding reservations. Negative while a spawn maps a region.
    pub(super) headroom: AtomicIsize,
    pub(super) carve: Mutex<Carve>,
    /// Signalled when slots a give-back held come back onto a list.
    returned: Condvar,
}

/// The never-used part of a region: `[cursor, end)`, of which
/// `[cursor, prepared)` has its guards installed and top pages resident.
pub(super) struct Span {
    pub(super) cursor: usize,
    pub(super) prepared: usize,
    pub(super) end: usize,
}

pub(super) struct Carve {
    /// Returned slots (base addresses) whose pages were given back, with
    /// [`FRESH`] set on those that never had their guard installed.
    pub(super) free: Vec<usize>,
    /// Returned slots whose pages may still be resident (guard installed).
    pub(super) dirty: Vec<usize>,
    /// Dirty slots taken off `dirty` whose pages are being given back: on
    /// no list, still counted in `headroom`.
    pub(super) returning: usize,
    /// The never-used slots of each region, oldest region first; slots are
    /// carved from the front span.
    pub(super) untouched: VecDeque<Span>,
    pub(super) regions: usize,
}

/// Returns the size class for `stack_size` (already rounded), creating it.
pub(crate) fn size_class(stack_size: usize) -> &'static SizeClass {
    static CLASSES: OnceLock<Mutex<HashMap<usize, &'static SizeClass>>> = OnceLock::new();
    let mut classes = CLASSES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    classes.entry(stack_size).or_insert_with(|| {
        Box::leak(Box::new(SizeClass {
            stack_size,
            guard: page_size(),
            headroom: AtomicIsize::new(0),
            carve: Mutex::new(Carve {
                free: Vec::new(),
                dirty: Vec::new(),
                returning: 0,
                untouched: VecDeque::new(),
                regions: 0,
            }),
            returned: Condvar::new(),
        }))
    })
}

impl SizeClass {
    /// Length of the guard page below each of its stacks.
    pub(crate) fn guard_len(&self) -> usize {
        self.guard
    }

    pub(super) fn slot_size(&self) -> usize {
        self.stack_size + self.guard
    }

    /// Claims one stack of this class for a fiber that will run later.
    ///
    /// The error names the limit that was hit (`vm.max_map_count`,
    /// `RLIMIT_AS`, memory) rather than a bare `ENOMEM`.
    pub(crate) fn reserve(&'static self) -> io::Result<Reservation> {
        self.claim(1)?;
        Ok(Reservation { class: self })
    }

    /// Claims `n` stacks at once (a worker's credit cache).
    pub(super) fn claim(&'static self, n: usize) -> io::Result<()> {
        let n = n as isize;
        if self.headroom.fetch_sub(n, Ordering::AcqRel) >= n {
            return Ok(());
        }
        let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
        // Other claims may have mapped regions while we waited for the lock.
        while self.headroom.load(Ordering::Acquire) < 0 {
            match self.map_region(&mut carve) {
                Ok(slots) => {
                    self.headroom.fetch_add(slots as isize, Ordering::AcqRel);
                }
                Err(e) => {
                    self.headroom.fetch_add(n, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn map_region(&self, carve: &mut Carve) -> io::Result<usize> {
        let slot = self.slot_size();
        let slots = (REGION_BYTES / slot).clamp(2, 4096);
        let len = slots * slot;
        let base = map_noreserve(len).map_err(|e| explain_alloc_failure(e, self.stack_size))?;
        carve.untouched.push_back(Span {
            cursor: base,
            prepared: base,
            end: base + len,
        });
        carve.regions += 1;
        // Nothing is touched yet: a region backs reservations, which cost
        // address space only. Slots are prepared in batches as they are
        // first carved (`prepare_batch`).
        Ok(slots)
    }

    /// Carves the next never-used slot, with [`FRESH`] set if its guard is
    /// not installed yet.
    fn carve_untouched(&self, carve: &mut Carve) -> Option<usize> {
        let slot = self.slot_size();
        let span = carve.untouched.front_mut()?;
        if span.cursor == span.prepared {
            self.prepare_batch(span);
        }
        let base = span.cursor;
        let flag = if base < span.prepared { 0 } else { FRESH };
        span.cursor += slot;
        span.prepared = span.prepared.max(span.cursor);
        if span.cursor == span.end {
            carve.untouched.pop_front();
        }
        Some(base | flag)
    }

    /// Prepares the next [`PREPARE_BATCH`] slots of `span`: their guards
    /// installed and their top pages faulted in, a few system calls for the
    /// batch instead of several per stack. The top page is the one every
    /// fiber touches first; a fault per fiber at its first run was the
    /// largest cost of a burst of spawns. Where the kernel cannot do it in
    /// batches, nothing is prepared and guards are installed one slot at a
    /// time.
    fn prepare_batch(&self, span: &mut Span) {
        let slot = self.slot_size();
        let n = ((span.end - span.cursor) / slot).min(PREPARE_BATCH);
        if !advise_slots_batch(span.cursor, n, slot, 0, self.guard, MADV_GUARD_INSTALL) {
            return;
        }
        let page = page_size();
        // Best effort: a page not populated is faulted in at first use.
        advise_slots_batch(span.cursor, n, slot, slot - page, page, MADV_POPULATE_WRITE);
        span.prepared = span.cursor + n * slot;
    }

    /// Takes a slot of this class for `reservation`: a dirty one first
    /// (warm pages, guard in place), then a clean one, then a never-used
    /// one; waits if the only slot it counts on is being given back.
    /// (`StackPool::take` looks in a worker's pool before it comes here.)
    pub(super) fn take_slot(&'static self, reservation: Reservation) -> io::Result<FiberStack> {
        std::mem::forget(reservation);
        let slot_base = {
            let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(base) = carve.dirty.pop() {
                    // Warm pages, guard in place.
                    break base;
                }
                if let Some(base) = carve.free.pop() {
                    break base;
                }
                if let Some(base) = self.carve_untouched(&mut carve) {
                    break base;
                }
                // The reservation counts a slot that is off every list
                // while its pages are given back: wait for it.
                assert!(
                    carve.returning > 0,
                    "spindle: stack reservation accounting broken (no slot for a reservation)"
                );
                carve = self.returned.wait(carve).unwrap_or_else(|e| e.into_inner());
            }
        };
        let base = slot_base & !FRESH;
        if slot_base & FRESH != 0 {
            if let Err(e) = install_guard(base, self.guard) {
                self.return_slot(base | FRESH);
                return Err(e);
            }
        }
        Ok(FiberStack {
            limit: base,
            top: base + self.slot_size(),
            class: self,
        })
    }

    fn return_slot(&self, slot_base: usize) {
        let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
        carve.free.push(slot_base);
        drop(carve);
        self.headroom.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes back a stack whose pages may be resident (see the module docs).
    fn return_dirty(&self, slot_base: usize) {
        let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
        carve.dirty.push(slot_base);
        let batch = if carve.dirty.len() > MAX_DIRTY {
            Self::take_dirty(&mut carve)
        } else {
            Vec::new()
        };
        drop(carve);
        self.headroom.fetch_add(1, Ordering::AcqRel);
        if !batch.is_empty() {
            self.give_back(batch);
        }
    }

    /// Gives back the pages of every dirty free slot (an idle worker).
    pub(crate) fn trim_dirty(&self) {
        let batch = {
            let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
            Self::take_dirty(&mut carve)
        };
        if !batch.is_empty() {
            self.give_back(batch);
        }
    }

    /// Takes every dirty slot off its list to give its pages back. The
    /// slots stay counted in `headroom` meanwhile: a reservation that finds
    /// every list empty waits for them (`take`).
    pub(super) fn take_dirty(carve: &mut Carve) -> Vec<usize> {
        let batch = std::mem::take(&mut carve.dirty);
        carve.returning += batch.len();
        batch
    }

    /// `MADV_DONTNEED` over `slots` (taken off the dirty list by
    /// `take_dirty`, so no one else touches them), one call per run of
    /// adjacent slots, then onto the clean free list.
    fn give_back(&self, mut slots: Vec<usize>) {
        slots.sort_unstable();
        let slot = self.slot_size();
        let mut i = 0;
        while i < slots.len() {
            let start = slots[i];
            let mut end = start + slot;
            let mut j = i + 1;
            while j < slots.len() && slots[j] == end {
                end += slot;
                j += 1;
            }
            // SAFETY: [start, end) covers whole free slots of ours that no
            // fiber uses: they are off every list until pushed back below.
            unsafe { discard(start, end - start) };
            i = j;
        }
        self.put_back_clean(slots);
    }

    /// Ends a give-back: the slots go on the clean free list, and any
    /// reservation waiting for a slot is woken.
    pub(super) fn put_back_clean(&self, slots: Vec<usize>) {
        let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
        carve.returning -= slots.len();
        carve.free.extend(slots);
        drop(carve);
        self.returned.notify_all();
    }

    /// Gives back `n` claims taken by `claim` and not used.
    pub(super) fn release_claims(&self, n: usize) {
        self.headroom.fetch_add(n as isize, Ordering::AcqRel);
    }

    /// Breaks this class's accounting on purpose: counts one slot that no
    /// list holds, so the next first run of a fiber on it finds none (the
    /// worker-death test).
    #[cfg(test)]
    pub(crate) fn count_a_phantom_slot(&self) {
        self.headroom.fetch_add(1, Ordering::AcqRel);
    }

    /// Regions mapped by this class so far.
    #[allow(dead_code)]
    pub(super) fn regions(&self) -> usize {
        self.carve.lock().unwrap_or_else(|e| e.into_inner()).regions
    }
}

/// Low bit of a free-list entry: the slot never had its guard installed.
const FRESH: usize = 1;

/// A spawn's claim on one stack of a [`SizeClass`]; dropping it gives the
/// claim back.
pub(crate) struct Reservation {
    pub(super) class: &'static SizeClass,
}

impl Reservation {
    pub(crate) fn class(&self) -> &'static SizeClass {
        self.class
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.class.headroom.fetch_add(1, Ordering::AcqRel);
    }
}

/// One fiber stack: `[limit, limit + guard)` is the guard page, the usable
/// stack ends at `top`.
pub(crate) struct FiberStack {
    pub(super) limit: usize,
    pub(super) top: usize,
    pub(super) class: &'static SizeClass,
}

impl FiberStack {
    /// Lowest address of the guard page.
    pub(crate) fn guard_start(&self) -> usize {
        self.limit
    }

    pub(crate) fn guard_len(&self) -> usize {
        self.class.guard
    }

    pub(crate) fn usable_size(&self) -> usize {
        self.class.stack_size
    }

    /// Gives back every page below the top `keep` bytes.
    pub(super) fn discard_below(&self, keep: usize) {
        let start = self.limit + self.class.guard;
        let end = self.top.saturating_sub(keep).max(start);
        if end > start {
            // SAFETY: [start, end) lies inside this stack's own slot, which
            // no fiber is running on (the stack is pooled or being released).
            unsafe { discard(start, end - start) };
        }
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        // Pages given back later, in a batch (module docs).
        self.class.return_dirty(self.limit);
    }
}

// SAFETY: corosensei requires `base` and `limit` to be 16-byte aligned (they
// are page aligned) and a guard page below the usable stack that faults on
// access: `take` installs it before the stack is first handed out, and it is
// never removed while the slot exists.
unsafe impl corosensei::stack::Stack for FiberStack {
    fn base(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.top).expect("stack top is not null")
    }

    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.limit).expect("stack limit is not null")
    }
}
