//! What every connection of one server shares, whatever protocol it
//! speaks: the handler's type and the drain signal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Waker};

use http::{Request, Response};

use crate::body::Body;

/// A server's request handler, shared by its connections (and, for
/// HTTP/2, by the fibers of one connection's streams).
pub(crate) type Handler = dyn Fn(Request<Body>) -> Response<Body> + Send + Sync;

/// The server is draining: a flag that HTTP/1.1 connections look at
/// between requests, and that wakes the HTTP/2 connections waiting in a
/// poll so they send their GOAWAY at once.
#[derive(Default)]
pub(crate) struct Drain {
    set: AtomicBool,
    next_id: AtomicU64,
    /// Wakers of the connections watching, by watch id.
    watchers: Mutex<HashMap<u64, Waker>>,
}

impl Drain {
    /// Whether the server is draining.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// Starts the drain: every watching connection is woken.
    pub(crate) fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        let watchers = std::mem::take(&mut *self.lock());
        for waker in watchers.into_values() {
            waker.wake();
        }
    }

    /// A watch for one connection, unregistered when dropped.
    pub(crate) fn watch(&self) -> DrainWatch<'_> {
        DrainWatch {
            drain: self,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waker>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One connection's registration with [`Drain`].
pub(crate) struct DrainWatch<'a> {
    drain: &'a Drain,
    id: u64,
}

impl DrainWatch<'_> {
    /// Whether the drain has started; if not, `cx` is woken when it does.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> bool {
        if self.drain.is_set() {
            return true;
        }
        {
            let mut watchers = self.drain.lock();
            match watchers.get_mut(&self.id) {
                Some(w) if w.will_wake(cx.waker()) => {}
                Some(w) => *w = cx.waker().clone(),
                None => {
                    watchers.insert(self.id, cx.waker().clone());
                }
            }
        }
        // `set` stores the flag before it takes the wakers: one of us sees
        // the other.
        self.drain.is_set()
    }
}

impl Drop for DrainWatch<'_> {
    fn drop(&mut self) {
        self.drain.lock().remove(&self.id);
    }
}
