//! [`OnceCell`].

use super::Mutex;

/// A value set once; concurrent `get_or_init` callers wait (parking their
/// fibers) while the first one runs its initialiser — which may itself
/// wait, unlike under a std lock.
///
/// ```
/// static CONFIG: spindle::sync::OnceCell<String> = spindle::sync::OnceCell::new();
/// spindle::run(|| {
///     let v = CONFIG.get_or_init(|| {
///         spindle::time::sleep(std::time::Duration::from_millis(1));
///         "loaded".to_string()
///     });
///     assert_eq!(v, "loaded");
/// });
/// ```
pub struct OnceCell<T> {
    value: std::sync::OnceLock<T>,
    init: Mutex<()>,
}

impl<T> OnceCell<T> {
    /// An empty cell.
    pub const fn new() -> OnceCell<T> {
        OnceCell {
            value: std::sync::OnceLock::new(),
            init: Mutex::new(()),
        }
    }

    /// The value, if set.
    pub fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// The value, running `f` to set it if nobody has; others wait for it.
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        if let Some(v) = self.value.get() {
            return v;
        }
        let _one_initialiser = self.init.lock();
        if let Some(v) = self.value.get() {
            return v;
        }
        let _ = self.value.set(f());
        self.value.get().expect("just set")
    }

    /// Sets the value if empty; gives it back otherwise.
    pub fn set(&self, value: T) -> Result<(), T> {
        let _one_initialiser = self.init.lock();
        self.value.set(value)
    }
}

impl<T> Default for OnceCell<T> {
    fn default() -> Self {
        OnceCell::new()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for OnceCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OnceCell").field(&self.value.get()).finish()
    }
}
