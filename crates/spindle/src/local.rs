//! [`fiber_local!`](crate::fiber_local) and [`FiberLocal`]: values that
//! belong to one fiber, as `thread_local!` values belong to one thread.
//!
//! A fiber's value is made by the initialiser the first time that fiber
//! uses it, lives exactly as long as the fiber — across every wait — and is
//! dropped by the fiber itself when its closure returns, unwinds or is
//! cancelled, on its own worker. No other fiber ever sees it. Off a fiber
//! (a plain thread) the values belong to the thread, as `thread_local!`
//! ones do. The storage is in `fiber/locals.rs`.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::fiber::locals::LocalMap;

/// A fiber-local value's key: declare one with
/// [`fiber_local!`](crate::fiber_local).
///
/// ```
/// use std::cell::Cell;
/// spindle::fiber_local! {
///     static REQUEST_ID: Cell<u64> = Cell::new(0);
/// }
/// spindle::run(|| {
///     let a = spindle::spawn(|| {
///         REQUEST_ID.with(|id| id.set(7));
///         spindle::time::sleep(std::time::Duration::from_millis(5));
///         REQUEST_ID.with(Cell::get)
///     });
///     let b = spindle::spawn(|| REQUEST_ID.with(Cell::get));
///     assert_eq!(a.join().unwrap(), 7);
///     assert_eq!(b.join().unwrap(), 0, "another fiber's value is its own");
/// });
/// ```
pub struct FiberLocal<T: 'static> {
    init: fn() -> T,
    // `fn() -> T`: the key is `Sync` whatever `T` is; values never leave
    // the fiber (and so the thread) that made them.
    _value: PhantomData<fn() -> T>,
}

thread_local! {
    /// The values of code that runs on no fiber.
    static THREAD_VALUES: RefCell<LocalMap> = RefCell::new(LocalMap::default());
}

/// Runs `f` with the map of the calling fiber, or of the thread.
fn with_map<R>(f: impl FnOnce(&RefCell<LocalMap>) -> R) -> R {
    let header = crate::fiber::running_header();
    if header.is_null() {
        return THREAD_VALUES.with(f);
    }
    // SAFETY: the running fiber's header lives while it runs, and its
    // `locals` are touched only by the fiber itself, on this thread.
    f(&unsafe { &*header }.locals)
}

/// Ends a `with` borrow, also when the closure panics.
struct Release(usize);

impl Drop for Release {
    fn drop(&mut self) {
        with_map(|map| map.borrow_mut().release(self.0));
    }
}

impl<T: 'static> FiberLocal<T> {
    #[doc(hidden)]
    pub const fn new(init: fn() -> T) -> FiberLocal<T> {
        FiberLocal {
            init,
            _value: PhantomData,
        }
    }

    fn key(&'static self) -> usize {
        self as *const Self as usize
    }

    /// Runs `f` with the calling fiber's value, made by the initialiser on
    /// the fiber's first use.
    ///
    /// ```
    /// use std::cell::RefCell;
    /// spindle::fiber_local! {
    ///     static LOG: RefCell<Vec<&'static str>> = RefCell::new(Vec::new());
    /// }
    /// spindle::run(|| {
    ///     LOG.with(|log| log.borrow_mut().push("start"));
    ///     assert_eq!(LOG.with(|log| log.borrow().len()), 1);
    /// });
    /// ```
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let key = self.key();
        let value: *const dyn Any = loop {
            if let Some(v) = with_map(|map| map.borrow_mut().acquire(key)) {
                break v;
            }
            // The initialiser is user code: no borrow of the map while it
            // runs (it may use other fiber-locals).
            let fresh: Box<dyn Any> = Box::new((self.init)());
            let lost = with_map(|map| map.borrow_mut().insert(key, fresh));
            drop(lost);
        };
        let _release = Release(key);
        // SAFETY: the value is boxed, so its address is stable; the box is
        // neither replaced (`set` refuses while it is borrowed) nor dropped
        // (only at the fiber's end, when no `with` runs) until `_release`;
        // it was stored for this key by this type's `with` or `set`, so it
        // is a `T`.
        let value = unsafe { &*value }
            .downcast_ref::<T>()
            .expect("a fiber-local holds its own type");
        f(value)
    }

    /// Replaces the calling fiber's value (without running the
    /// initialiser); the old value, if any, is dropped.
    ///
    /// # Panics
    ///
    /// Inside a [`with`](Self::with) of the same fiber-local.
    ///
    /// ```
    /// spindle::fiber_local! {
    ///     static USER: String = String::from("anonymous");
    /// }
    /// spindle::run(|| {
    ///     USER.set("ada".to_string());
    ///     assert_eq!(USER.with(|u| u.clone()), "ada");
    /// });
    /// ```
    pub fn set(&'static self, value: T) {
        let key = self.key();
        let old = with_map(|map| map.borrow_mut().replace(key, Box::new(value)));
        // User code: dropped with no borrow of the map.
        drop(old);
    }
}

impl<T: 'static> std::fmt::Debug for FiberLocal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FiberLocal").finish_non_exhaustive()
    }
}

/// Declares fiber-local statics, shaped like `std::thread_local!`: each
/// fiber gets its own value, made on its first use, dropped when the fiber
/// ends. See [`FiberLocal`].
///
/// ```
/// use std::cell::Cell;
/// spindle::fiber_local! {
///     /// How deep this fiber's calls are nested.
///     pub static DEPTH: Cell<u32> = Cell::new(0);
///     static NAME: String = String::new();
/// }
/// spindle::run(|| DEPTH.with(|d| d.set(d.get() + 1)));
/// ```
#[macro_export]
macro_rules! fiber_local {
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::FiberLocal<$t> = $crate::FiberLocal::new({
            fn init() -> $t {
                $init
            }
            init
        });
        $crate::fiber_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::fiber_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
    () => {};
}
