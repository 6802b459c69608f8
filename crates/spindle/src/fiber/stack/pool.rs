//! A worker's [`StackPool`]: the stacks of its finished fibers, kept for
//! the next fiber to run, and a cache of reservations on the runtime's
//! default size class so a spawn does not touch the class's shared
//! counter.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::class::{FiberStack, Reservation, SizeClass};

/// Bytes at the top of a pooled stack kept resident when it is trimmed.
const KEEP_HOT: usize = 16 << 10;

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
    pub(super) last_trim: Instant,
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

    /// Takes a stack for `reservation`: a pooled one of its class if this
    /// worker has one, else a slot of the class.
    pub(crate) fn take(&mut self, reservation: Reservation) -> io::Result<FiberStack> {
        if let Some(stack) = self.pop(reservation.class()) {
            // The pooled stack was never counted in headroom: give back the
            // claim this fiber held on the class.
            self.return_credit(reservation);
            return Ok(stack);
        }
        reservation.class().take_slot(reservation)
    }

    /// Takes back a claim that turned out not to need a new slot.
    fn return_credit(&mut self, reservation: Reservation) {
        if std::ptr::eq(reservation.class, self.credit_class) {
            std::mem::forget(reservation);
            self.credits += 1;
            if self.credits > 2 * CREDIT_BATCH {
                self.credits -= CREDIT_BATCH;
                self.credit_class.release_claims(CREDIT_BATCH);
            }
        }
        // else: dropping gives the claim back to its class.
    }

    pub(super) fn pop(&mut self, class: &'static SizeClass) -> Option<FiberStack> {
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

    /// Gives back the deep pages of pooled stacks; called by an idle worker
    /// with the time it read, does real work at most once a second. True
    /// if it did.
    pub(crate) fn trim(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last_trim) < Duration::from_secs(1) {
            return false;
        }
        self.last_trim = now;
        self.credit_class.trim_dirty();
        for stack in &self.stacks[self.clean..] {
            stack.discard_below(KEEP_HOT);
        }
        self.clean = self.stacks.len();
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }
}

impl Drop for StackPool {
    fn drop(&mut self) {
        self.credit_class.release_claims(self.credits);
        self.credits = 0;
    }
}
