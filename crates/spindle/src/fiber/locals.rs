//! The storage behind `spindle::fiber_local!`: each fiber's own map from a
//! fiber-local static to its value.
//!
//! A fiber's map is touched only by that fiber while it runs (a started
//! fiber never leaves its worker's thread), so a value — even a `!Send`
//! one — never crosses threads. Values are boxed: a reference handed to a
//! `with` closure stays valid while other entries come and go. An entry
//! with a live `with` borrow cannot be replaced (`set` panics). When the
//! fiber's closure has returned (or unwound) the fiber drops its values
//! itself, on its own stack and worker ([`LocalMap::teardown`]).

use std::any::Any;

/// One fiber-local value.
struct Slot {
    /// The address of the `FiberLocal` static.
    key: usize,
    value: Box<dyn Any>,
    /// `with` calls in progress on this value.
    borrows: usize,
}

/// A fiber's (or a plain thread's) fiber-local values. Boxed, and only
/// once a value is stored: the map sits in every fiber's header, and most
/// fibers never store one (a header's every byte is paid by each of
/// 100 000 fibers spawned at once).
#[derive(Default)]
pub(crate) struct LocalMap {
    // Boxed for the thin pointer: 8 bytes in the header, not a `Vec`'s 24.
    #[allow(clippy::box_collection)]
    slots: Option<Box<Vec<Slot>>>,
}

impl LocalMap {
    fn find(&self, key: usize) -> Option<usize> {
        self.slots.as_ref()?.iter().position(|s| s.key == key)
    }

    /// The slots, to store into (boxed at the first store).
    fn slots_mut(&mut self) -> &mut Vec<Slot> {
        self.slots.get_or_insert_with(Box::default)
    }

    /// Borrows the value of `key`, if there is one: the returned pointer is
    /// valid until [`release`](Self::release) (the box is not replaced or
    /// dropped while borrowed).
    pub(crate) fn acquire(&mut self, key: usize) -> Option<*const dyn Any> {
        let i = self.find(key)?;
        let slot = &mut self.slots_mut()[i];
        slot.borrows += 1;
        Some(&*slot.value as *const dyn Any)
    }

    /// Ends one borrow of `key`.
    pub(crate) fn release(&mut self, key: usize) {
        if let Some(i) = self.find(key) {
            self.slots_mut()[i].borrows -= 1;
        }
    }

    /// Stores `value` for `key` unless one is there already (an `init`
    /// that itself initialised the same local); the loser is returned, for
    /// the caller to drop outside the map.
    pub(crate) fn insert(&mut self, key: usize, value: Box<dyn Any>) -> Option<Box<dyn Any>> {
        if self.find(key).is_some() {
            return Some(value);
        }
        self.slots_mut().push(Slot {
            key,
            value,
            borrows: 0,
        });
        None
    }

    /// Replaces the value of `key`; returns the old one, for the caller to
    /// drop outside the map.
    ///
    /// # Panics
    ///
    /// If the value is borrowed by a `with` in progress.
    pub(crate) fn replace(&mut self, key: usize, value: Box<dyn Any>) -> Option<Box<dyn Any>> {
        match self.find(key) {
            Some(i) => {
                assert!(
                    self.slots_mut()[i].borrows == 0,
                    "spindle: FiberLocal::set called inside a `with` of the same fiber-local"
                );
                Some(std::mem::replace(&mut self.slots_mut()[i].value, value))
            }
            None => {
                self.slots_mut().push(Slot {
                    key,
                    value,
                    borrows: 0,
                });
                None
            }
        }
    }

    /// Takes every value, to drop at the end of the fiber.
    pub(crate) fn take_all(&mut self) -> Vec<Box<dyn Any>> {
        self.slots.take().map_or_else(Vec::new, |slots| {
            slots.into_iter().map(|s| s.value).collect()
        })
    }

    /// Whether no value is stored.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.as_ref().is_none_or(|slots| slots.is_empty())
    }
}

/// Drops every value in `map` with no borrow of it held while each `Drop`
/// runs (a `Drop` may use fiber-locals, even re-create one: then that is
/// dropped in the next round; after a few rounds what is left is leaked
/// with a report, as std leaks thread-locals re-created in destructors).
#[inline]
pub(crate) fn teardown(map: &std::cell::RefCell<LocalMap>) {
    // Most fibers use no fiber-local: one check, nothing else.
    if map.borrow().is_empty() {
        return;
    }
    teardown_values(map);
}

#[cold]
fn teardown_values(map: &std::cell::RefCell<LocalMap>) {
    for _ in 0..8 {
        let values = map.borrow_mut().take_all();
        if values.is_empty() {
            return;
        }
        for v in values {
            super::drop_quietly(v, "a fiber-local value");
        }
    }
    if !map.borrow().is_empty() {
        crate::loud::loud!(
            "fiber-locals kept re-creating each other in their destructors; the rest are leaked"
        );
        std::mem::forget(map.borrow_mut().take_all());
    }
}
