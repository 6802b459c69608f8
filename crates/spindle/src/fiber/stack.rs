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

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Smallest usable stack we hand out.
pub(crate) const MIN_STACK_SIZE: usize = 16 << 10;
/// Default usable stack size: 256 KiB, deep enough for ordinary code and
/// still only address space until touched.
pub(crate) const DEFAULT_STACK_SIZE: usize = 256 << 10;
/// Bytes at the top of a pooled stack kept resident when it is trimmed.
const KEEP_HOT: usize = 16 << 10;
/// Dirty free slots a class keeps before it gives their pages back.
const MAX_DIRTY: usize = 1 << 20;
/// Target address-space size of one region.
const REGION_BYTES: usize = 64 << 20;
/// `madvise` advice that installs guard markers (Linux 6.13, uapi value).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Whether `MADV_GUARD_INSTALL` works here; cleared at the first `EINVAL`.
static GUARD_BY_MADVISE: AtomicBool = AtomicBool::new(true);

/// Whether guards installed with `MADV_GUARD_INSTALL` really guard: the
/// advice is accepted *and* a guarded page faults. An emulator (QEMU user
/// mode) accepts advice it does not know and does nothing, which would
/// leave stacks without guards; there the `mprotect` fallback is used.
/// Probed once; later calls read the answer.
fn guard_by_madvise() -> bool {
    static PROBED: OnceLock<()> = OnceLock::new();
    PROBED.get_or_init(|| {
        if !probe_guard_install() {
            GUARD_BY_MADVISE.store(false, Ordering::Relaxed);
        }
    });
    GUARD_BY_MADVISE.load(Ordering::Relaxed)
}

/// Installs a guard on a scratch page and checks that the kernel refuses
/// to read it (a `write` from it to a pipe fails with `EFAULT`).
fn probe_guard_install() -> bool {
    let page = page_size();
    // SAFETY: a fresh private anonymous page, ours alone, unmapped below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return false;
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `addr` is the page just mapped; `fds` has room for two fds.
    let guarded = unsafe {
        libc::madvise(addr, page, MADV_GUARD_INSTALL) == 0
            && libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) == 0
            && {
                let n = libc::write(fds[1], addr, 1);
                let faulted =
                    n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT);
                libc::close(fds[0]);
                libc::close(fds[1]);
                faulted
            }
    };
    // SAFETY: unmaps only the scratch page.
    unsafe { libc::munmap(addr, page) };
    guarded
}

pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize })
}

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

/// All stacks of one usable size, and the regions they are carved from.
pub(crate) struct SizeClass {
    /// Usable bytes of each stack.
    pub(crate) stack_size: usize,
    /// Guard bytes below each stack.
    guard: usize,
    /// Slots this class can still hand out without mapping a new region,
    /// minus outstanding reservations. Negative while a spawn maps a region.
    headroom: AtomicIsize,
    carve: Mutex<Carve>,
    /// Signalled when slots a give-back held come back onto a list.
    returned: Condvar,
}

/// The never-used part of a region: `[cursor, end)`, of which
/// `[cursor, prepared)` has its guards installed and top pages resident.
struct Span {
    cursor: usize,
    prepared: usize,
    end: usize,
}

struct Carve {
    /// Returned slots (base addresses) whose pages were given back, with
    /// [`FRESH`] set on those that never had their guard installed.
    free: Vec<usize>,
    /// Returned slots whose pages may still be resident (guard installed).
    dirty: Vec<usize>,
    /// Dirty slots taken off `dirty` whose pages are being given back: on
    /// no list, still counted in `headroom`.
    returning: usize,
    /// The never-used slots of each region, oldest region first; slots are
    /// carved from the front span.
    untouched: VecDeque<Span>,
    regions: usize,
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
    fn slot_size(&self) -> usize {
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
    fn claim(&'static self, n: usize) -> io::Result<()> {
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
        // SAFETY: an anonymous private mapping at an address the kernel picks
        // aliases nothing; the result is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(explain_alloc_failure(
                io::Error::last_os_error(),
                self.stack_size,
            ));
        }
        carve.untouched.push_back(Span {
            cursor: base as usize,
            prepared: base as usize,
            end: base as usize + len,
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

    /// Takes a stack for a reservation, from `pool` when it has one.
    pub(crate) fn take(
        &'static self,
        reservation: Reservation,
        pool: &mut StackPool,
    ) -> io::Result<FiberStack> {
        if let Some(stack) = pool.pop(self) {
            // The pooled stack was never counted in headroom: give back the
            // claim this fiber held on the class.
            pool.return_credit(reservation);
            return Ok(stack);
        }
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
    fn take_dirty(carve: &mut Carve) -> Vec<usize> {
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
            // fiber uses (they are off every list until pushed back below);
            // MADV_DONTNEED on private anonymous memory only zero-fills it,
            // and guard markers survive it.
            unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_DONTNEED) };
            i = j;
        }
        self.put_back_clean(slots);
    }

    /// Ends a give-back: the slots go on the clean free list, and any
    /// reservation waiting for a slot is woken.
    fn put_back_clean(&self, slots: Vec<usize>) {
        let mut carve = self.carve.lock().unwrap_or_else(|e| e.into_inner());
        carve.returning -= slots.len();
        carve.free.extend(slots);
        drop(carve);
        self.returned.notify_all();
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
    pub(crate) fn regions(&self) -> usize {
        self.carve.lock().unwrap_or_else(|e| e.into_inner()).regions
    }
}

/// Low bit of a free-list entry: the slot never had its guard installed.
const FRESH: usize = 1;

/// A spawn's claim on one stack of a [`SizeClass`]; dropping it gives the
/// claim back.
pub(crate) struct Reservation {
    class: &'static SizeClass,
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
    limit: usize,
    top: usize,
    class: &'static SizeClass,
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
    fn discard_below(&self, keep: usize) {
        let start = self.limit + self.class.guard;
        let end = self.top.saturating_sub(keep).max(start);
        if end > start {
            // SAFETY: [start, end) lies inside this stack's own slot, which no
            // fiber is running on (the stack is pooled or being released);
            // MADV_DONTNEED on private anonymous memory only zero-fills it.
            unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_DONTNEED) };
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

/// Whether `process_madvise` takes `MADV_GUARD_INSTALL` for this process
/// (Linux ≥ 6.13); cleared at its first failure.
static GUARD_BATCH: AtomicBool = AtomicBool::new(true);

/// Never-used slots prepared at a time (see `SizeClass::prepare_batch`).
const PREPARE_BATCH: usize = 64;

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault pages in, writable.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Applies `advice` to `[slot_start + offset, +len)` of each of `slots`
/// slots of `slot` bytes from `base`, with `process_madvise` on this
/// process (Linux ≥ 6.13 takes any advice for the caller itself), up to
/// 1024 ranges a call. False (nothing to rely on) if the kernel cannot.
fn advise_slots_batch(
    base: usize,
    slots: usize,
    slot: usize,
    offset: usize,
    len: usize,
    advice: libc::c_int,
) -> bool {
    if !GUARD_BATCH.load(Ordering::Relaxed) || !guard_by_madvise() {
        return false;
    }
    static PIDFD: OnceLock<libc::c_int> = OnceLock::new();
    let pidfd = *PIDFD.get_or_init(|| {
        // SAFETY: pidfd_open takes plain integers; -1 on failure.
        unsafe {
            libc::syscall(
                SYS_PIDFD_OPEN,
                libc::getpid() as libc::c_long,
                0 as libc::c_long,
            ) as libc::c_int
        }
    });
    if pidfd < 0 {
        GUARD_BATCH.store(false, Ordering::Relaxed);
        return false;
    }
    let iov: Vec<libc::iovec> = (0..slots)
        .map(|i| libc::iovec {
            iov_base: (base + i * slot + offset) as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    for chunk in iov.chunks(1024) {
        // SAFETY: every iovec names a range inside a slot of the region just
        // mapped, which no code uses yet; the kernel only reads the array.
        let rc = unsafe {
            libc::syscall(
                SYS_PROCESS_MADVISE,
                pidfd as libc::c_long,
                chunk.as_ptr(),
                chunk.len() as libc::c_long,
                advice as libc::c_long,
                0 as libc::c_long,
            )
        };
        if rc != (chunk.len() * len) as libc::c_long {
            // Unsupported (or partial): for guards, the per-slot path
            // installs the rest (installing a guard twice is harmless); a
            // page not populated is simply faulted in later.
            if advice == MADV_GUARD_INSTALL {
                GUARD_BATCH.store(false, Ordering::Relaxed);
            }
            return false;
        }
    }
    true
}

// Syscall numbers shared by x86-64 and aarch64 (the unified table).
const SYS_PIDFD_OPEN: libc::c_long = 434;
const SYS_PROCESS_MADVISE: libc::c_long = 440;

fn install_guard(addr: usize, len: usize) -> io::Result<()> {
    if guard_by_madvise() {
        // SAFETY: [addr, addr+len) is the first page of a slot we own and no
        // code uses yet.
        let rc = unsafe { libc::madvise(addr as *mut _, len, MADV_GUARD_INSTALL) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
        GUARD_BY_MADVISE.store(false, Ordering::Relaxed);
    }
    // SAFETY: as above; PROT_NONE on our own page only changes its access.
    let rc = unsafe { libc::mprotect(addr as *mut _, len, libc::PROT_NONE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(explain_alloc_failure(io::Error::last_os_error(), 0))
    }
}

/// Turns an `ENOMEM` from mmap/mprotect into a message that names the limit.
fn explain_alloc_failure(err: io::Error, stack_size: usize) -> io::Error {
    if err.raw_os_error() != Some(libc::ENOMEM) {
        return err;
    }
    let what = if stack_size > 0 {
        format!("cannot allocate a {} fiber stack", human_size(stack_size))
    } else {
        "cannot install a fiber stack guard page".to_string()
    };
    let max_maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .ok();
    let mut as_limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let have_as = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut as_limit) } == 0
        && as_limit.rlim_cur != libc::RLIM_INFINITY;
    let why = match (max_maps, maps) {
        (Some(max), Some(n)) if n + 8 >= max => {
            format!("vm.max_map_count ({max}) reached with {n} mappings")
        }
        _ if have_as => format!(
            "address-space limit RLIMIT_AS ({}) reached",
            human_size(as_limit.rlim_cur as usize)
        ),
        _ => "out of memory".to_string(),
    };
    io::Error::new(io::ErrorKind::OutOfMemory, format!("{what}: {why}"))
}

pub(crate) fn human_size(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// Claims a worker takes from its runtime's default class at a time.
const CREDIT_BATCH: usize = 64;

/// A worker's pool of finished fibers' stacks, for reuse by the next fiber,
/// and its cache of claims on the runtime's default class (so a spawn on a
/// worker takes a reservation without touching the shared counter).
pub(crate) struct StackPool {
    stacks: Vec<FiberStack>,
    /// `stacks[..clean]` have had their deep pages given back since they
    /// were pooled; the rest may hold resident pages below the hot top.
    /// (Kept here rather than as a flag in each stack: a `bool` in
    /// `FiberStack` became the niche of every fiber's `Option<Context>`,
    /// and building a fiber header then copied uninitialised bytes next to
    /// it, a store-forwarding stall on every spawn.)
    clean: usize,
    max: usize,
    last_trim: Instant,
    /// Published for `stats()`.
    pub(crate) pooled: AtomicUsize,
    credit_class: &'static SizeClass,
    credits: usize,
}

impl StackPool {
    pub(crate) fn new(max: usize, credit_class: &'static SizeClass) -> StackPool {
        StackPool {
            stacks: Vec::new(),
            clean: 0,
            max,
            last_trim: Instant::now(),
            pooled: AtomicUsize::new(0),
            credit_class,
            credits: 0,
        }
    }

    /// A reservation on `class`, from the credit cache when it is the
    /// default class.
    pub(crate) fn reserve(&mut self, class: &'static SizeClass) -> io::Result<Reservation> {
        if !std::ptr::eq(class, self.credit_class) {
            return class.reserve();
        }
        if self.credits == 0 {
            if class.claim(CREDIT_BATCH).is_err() {
                // Near a limit: claim one, for the precise error.
                return class.reserve();
            }
            self.credits = CREDIT_BATCH;
        }
        self.credits -= 1;
        Ok(Reservation { class })
    }

    /// Takes back a claim that turned out not to need a new slot.
    fn return_credit(&mut self, reservation: Reservation) {
        if std::ptr::eq(reservation.class, self.credit_class) {
            std::mem::forget(reservation);
            self.credits += 1;
            if self.credits > 2 * CREDIT_BATCH {
                self.credits -= CREDIT_BATCH;
                self.credit_class
                    .headroom
                    .fetch_add(CREDIT_BATCH as isize, Ordering::AcqRel);
            }
        }
        // else: dropping gives the claim back to its class.
    }

    fn pop(&mut self, class: &'static SizeClass) -> Option<FiberStack> {
        // Nearly always the default class: look at the newest (warmest) first.
        let idx = self
            .stacks
            .iter()
            .rposition(|s| std::ptr::eq(s.class, class))?;
        let stack = self.stacks.swap_remove(idx);
        // The newest stack moved into `idx` may be dirty.
        self.clean = self.clean.min(idx);
        self.pooled.store(self.stacks.len(), Ordering::Relaxed);
        Some(stack)
    }

    /// Keeps `stack` for reuse, or returns it to its class past the bound.
    pub(crate) fn put(&mut self, stack: FiberStack) {
        if self.stacks.len() < self.max {
            self.stacks.push(stack);
            self.pooled.store(self.stacks.len(), Ordering::Relaxed);
        }
        // else: dropping returns it to the class with its pages given back.
    }

    /// Gives back the deep pages of pooled stacks; called by an idle worker,
    /// does real work at most once a second.
    pub(crate) fn trim(&mut self) {
        if self.last_trim.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_trim = Instant::now();
        self.credit_class.trim_dirty();
        for stack in &self.stacks[self.clean..] {
            stack.discard_below(KEEP_HOT);
        }
        self.clean = self.stacks.len();
    }

    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }
}

impl Drop for StackPool {
    fn drop(&mut self) {
        self.credit_class
            .headroom
            .fetch_add(self.credits as isize, Ordering::AcqRel);
        self.credits = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A class of its own, so other tests' stacks do not share its state.
    fn class(kib: usize) -> &'static SizeClass {
        size_class(round_stack_size(kib << 10).unwrap())
    }

    fn resident_slots(class: &SizeClass) -> usize {
        let carve = class.carve.lock().unwrap();
        carve
            .untouched
            .iter()
            .map(|s| (s.prepared - s.cursor) / class.slot_size())
            .sum()
    }

    #[test]
    fn reservations_touch_no_stack_memory() {
        let class = class(88);
        let reservations: Vec<_> = (0..2_000).map(|_| class.reserve().unwrap()).collect();
        let carve = class.carve.lock().unwrap();
        assert!(
            carve.regions >= 2,
            "2 000 reservations need several regions"
        );
        assert!(
            carve.untouched.iter().all(|s| s.prepared == s.cursor),
            "a reservation prepared slots"
        );
        drop(carve);
        drop(reservations);
    }

    #[test]
    fn first_use_prepares_one_bounded_batch() {
        let class = class(92);
        let mut pool = StackPool::new(0, class);
        let reservations: Vec<_> = (0..1_000).map(|_| class.reserve().unwrap()).collect();
        let mut stacks = Vec::new();
        for r in reservations.into_iter().take(3) {
            stacks.push(class.take(r, &mut pool).unwrap());
        }
        let ahead = resident_slots(class);
        assert!(
            ahead < PREPARE_BATCH,
            "{ahead} slots prepared ahead of three stacks"
        );
        // The stacks are usable: their top page is writable.
        for s in &stacks {
            // SAFETY: the byte below `top` is the usable stack's last byte,
            // owned by this test until the stack is dropped.
            unsafe { ((s.top - 1) as *mut u8).write_volatile(1) };
        }
    }

    /// The lowest usable page of `stack`: far below the hot top.
    fn deep_page(stack: &FiberStack) -> usize {
        stack.limit + stack.class.guard
    }

    fn touch(page: usize) {
        // SAFETY: `page` is a usable page of a stack this test owns (taken
        // or pooled by it, never running a fiber).
        unsafe { (page as *mut u8).write_volatile(1) };
    }

    fn resident(page: usize) -> bool {
        let mut v = 0u8;
        // SAFETY: one page-aligned page of a mapping this test owns; `v`
        // receives one byte per page.
        let rc = unsafe { libc::mincore(page as *mut _, page_size(), &mut v) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        v & 1 == 1
    }

    #[test]
    fn trim_gives_back_the_deep_pages_of_every_stack_pooled_since_the_last() {
        let a = class(96);
        let b = class(100);
        let mut pool = StackPool::new(8, a);
        let take = |class: &'static SizeClass, pool: &mut StackPool| {
            let stack = class.take(class.reserve().unwrap(), pool).unwrap();
            touch(deep_page(&stack));
            stack
        };
        let (a1, b1, a2) = (take(a, &mut pool), take(b, &mut pool), take(a, &mut pool));
        let pages = [deep_page(&a1), deep_page(&b1), deep_page(&a2)];
        pool.put(a1);
        pool.put(b1);
        pool.put(a2);
        assert!(pages.iter().all(|&p| resident(p)));
        pool.last_trim = Instant::now() - Duration::from_secs(2);
        pool.trim();
        assert!(!pages.iter().any(|&p| resident(p)), "trim left deep pages");

        // Taking `b1` moves `a2` into its place; `b1` comes back used.
        let b1 = pool.pop(b).expect("the pooled stack of class b");
        touch(deep_page(&b1));
        pool.put(b1);
        pool.last_trim = Instant::now() - Duration::from_secs(2);
        pool.trim();
        assert!(!resident(pages[1]), "a stack pooled again was not trimmed");
    }

    /// A reservation counts every slot on the class's lists, including the
    /// dirty ones an idle worker is giving back. A fiber that first runs
    /// while those are off every list must wait for them, not find
    /// nothing: that `expect` killed a worker thread mid-loop (a hang at
    /// the next `join`, the panic message lost in the test's captured
    /// output).
    #[test]
    fn a_stack_taken_while_dirty_slots_are_given_back_waits_for_them() {
        // 40 MiB stacks: a region holds two slots, so both lists and the
        // untouched span run dry after two.
        let class = class(40 << 10);
        let mut pool = StackPool::new(0, class);
        let first = class.take(class.reserve().unwrap(), &mut pool).unwrap();
        let second = class.take(class.reserve().unwrap(), &mut pool).unwrap();
        let first_base = first.limit;
        drop(first); // dirty, counted in headroom
        let reservation = class.reserve().unwrap(); // no new region needed
        assert_eq!(class.regions(), 1);
        // An idle worker's trim, stopped between its two halves.
        let returning = SizeClass::take_dirty(&mut class.carve.lock().unwrap());
        assert_eq!(returning, vec![first_base]);
        let taker = std::thread::spawn(move || {
            let mut pool = StackPool::new(0, class);
            class.take(reservation, &mut pool).map(|s| s.limit)
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!taker.is_finished(), "took a stack with every list empty");
        class.put_back_clean(returning);
        let taken = taker.join().expect("the take panicked").unwrap();
        assert_eq!(taken, first_base, "the slot that was given back");
        assert_eq!(class.regions(), 1);
        drop(second);
    }

    #[test]
    fn stack_sizes_past_the_limit_are_an_error() {
        assert_eq!(
            round_stack_size(usize::MAX).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(round_stack_size(1).unwrap(), MIN_STACK_SIZE);
    }
}
