//! [`Pool`]: lend resources, wait with a deadline when all are lent.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::semaphore::Semaphore;

/// A fixed set of resources (connections, buffers) lent one at a time.
/// `checkout` parks with a deadline while all are lent; a returned
/// resource is handed to the first waiter still waiting. A return that
/// races a waiter's deadline is not lost: the waiter times out once, the
/// resource goes to the next waiter or back to the pool.
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let pool = spindle::sync::Pool::new(vec!["conn-a", "conn-b"]);
///     let a = pool.checkout();
///     let b = pool.checkout_timeout(Duration::from_millis(10)).unwrap();
///     assert!(pool.checkout_timeout(Duration::from_millis(10)).is_none());
///     drop(a);
///     assert!(pool.checkout_timeout(Duration::from_millis(10)).is_some());
///     drop(b);
/// });
/// ```
pub struct Pool<T> {
    items: std::sync::Mutex<Vec<T>>,
    available: Semaphore,
}

/// A lent resource; returned to its pool on drop.
pub struct PoolGuard<'a, T> {
    pool: &'a Pool<T>,
    item: Option<T>,
    _permit: super::SemaphorePermit<'a>,
}

impl<T> Pool<T> {
    /// A pool lending `items`.
    pub fn new(items: Vec<T>) -> Pool<T> {
        let n = items.len();
        Pool {
            items: std::sync::Mutex::new(items),
            available: Semaphore::new(n),
        }
    }

    fn take<'a>(&'a self, permit: super::SemaphorePermit<'a>) -> PoolGuard<'a, T> {
        let item = self
            .items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .expect("a permit guarantees an item");
        PoolGuard {
            pool: self,
            item: Some(item),
            _permit: permit,
        }
    }

    /// Borrows a resource, parking until one is returned.
    pub fn checkout(&self) -> PoolGuard<'_, T> {
        let permit = self.available.acquire();
        self.take(permit)
    }

    /// Borrows a resource, giving up after `timeout`.
    pub fn checkout_timeout(&self, timeout: Duration) -> Option<PoolGuard<'_, T>> {
        let permit = self.available.acquire_timeout(timeout)?;
        Some(self.take(permit))
    }

    /// Resources not lent right now.
    pub fn idle(&self) -> usize {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl<T> Deref for PoolGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item.as_ref().expect("present until drop")
    }
}

impl<T> DerefMut for PoolGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item.as_mut().expect("present until drop")
    }
}

impl<T> Drop for PoolGuard<'_, T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            // Back first, then the permit (dropped after this body) lets the
            // next waiter take it.
            self.pool
                .items
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(item);
        }
    }
}

impl<T> std::fmt::Debug for Pool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("idle", &self.idle()).finish()
    }
}
