//! Scoped fibers: [`scope`], like `std::thread::scope`.
//!
//! Children spawned in a scope may borrow from the parent's stack, because
//! the scope does not return — normally, by a panic, by cancellation, or by
//! a runtime stop unwinding the parent — before every child has ended.
//!
//! * The parent waits for its children with the plain park token, not a
//!   cancellable wait: a cancelled parent first cancels its children, then
//!   still waits for them, then leaves.
//! * A child's panic that nobody took with `join` is re-raised by `scope`
//!   after every child has ended.
//! * At a runtime stop, workers unwind newest fibers first, so a scope's
//!   children (spawned after their parent) go before the parent on the
//!   same worker; children on other workers are waited for by blocking the
//!   parent's thread while it unwinds.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fiber::{Fiber, JoinError, JoinHandle};
use crate::sched::park::{self, WaitKind, Waiter};

type PanicSlot = Arc<Mutex<Option<Box<dyn Any + Send + 'static>>>>;

struct ScopeState {
    running: Mutex<usize>,
    parent: Mutex<Option<Waiter>>,
    /// One per child: a panic nobody has taken with `join` yet.
    panics: Mutex<Vec<PanicSlot>>,
    children: Mutex<Vec<Fiber>>,
}

impl ScopeState {
    fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn child_done(&self) {
        let mut n = self.running.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            if let Some(w) = self.parent.lock().unwrap_or_else(|e| e.into_inner()).take() {
                w.wake();
            }
        }
    }

    fn cancel_children(&self) {
        for c in self
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            park::cancel(&c.core);
        }
    }

    /// Waits until every child has ended, whatever happens to the parent.
    fn wait_all(&self) {
        if park::current_is_cancelled() {
            self.cancel_children();
        }
        let stopping = crate::sched::worker::current_fiber()
            .is_some_and(|f| f.header.state() & crate::fiber::state::STOPPED != 0);
        while self.running() > 0 {
            if stopping || !crate::sched::worker::can_park() {
                // Being unwound by a runtime stop (or on a plain thread):
                // the fiber cannot park; block the thread briefly and look.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            *self.parent.lock().unwrap_or_else(|e| e.into_inner()) = Some(Waiter::current());
            if self.running() == 0 {
                break;
            }
            park::park_current_as(WaitKind::Join);
            if park::current_is_cancelled() {
                self.cancel_children();
            }
        }
    }

    /// The first panic no `join` took.
    fn unjoined_panic(&self) -> Option<Box<dyn Any + Send + 'static>> {
        self.panics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find_map(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take())
    }
}

/// A scope for spawning fibers that borrow from the caller (see [`scope`]).
pub struct Scope<'scope, 'env: 'scope> {
    state: Arc<ScopeState>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// A handle to a fiber spawned in a [`Scope`].
pub struct ScopedJoinHandle<'scope, T> {
    handle: JoinHandle<()>,
    value: Arc<Mutex<Option<T>>>,
    panic: PanicSlot,
    _scope: PhantomData<&'scope ()>,
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the fiber and returns its value; a panic taken here is not
    /// re-raised by the scope.
    pub fn join(self) -> Result<T, JoinError> {
        match self.handle.join() {
            Ok(()) => Ok(self
                .value
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("a finished scoped fiber left its value")),
            Err(e) if e.is_panic() => {
                let payload = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
                Err(payload.map(JoinError::from_panic).unwrap_or(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the fiber has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// The fiber.
    pub fn fiber(&self) -> &Fiber {
        self.handle.fiber()
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a fiber that may borrow anything that outlives the scope.
    ///
    /// # Panics
    ///
    /// Like [`spawn`](crate::spawn): outside a runtime, or without a stack.
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let state = self.state.clone();
        let value: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let panic_slot: PanicSlot = Arc::new(Mutex::new(None));
        let (v2, p2) = (value.clone(), panic_slot.clone());
        *state.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.state
            .panics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(panic_slot.clone());
        let body = move || {
            let r = panic::catch_unwind(AssertUnwindSafe(f));
            let outcome = match r {
                Ok(v) => {
                    *v2.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                    0
                }
                Err(p) if p.is::<park::Cancelled>() => 1,
                Err(p) => {
                    *p2.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                    2
                }
            };
            state.child_done();
            match outcome {
                0 => {}
                1 => park::exit_cancelled(),
                // The payload is in the slot; join and the scope take it.
                _ => panic::resume_unwind(Box::new("a scoped fiber panicked")),
            }
        };
        let boxed: Box<dyn FnOnce() + Send + 'scope> = Box::new(body);
        // SAFETY: `scope` does not return (normally, by unwinding, or by a
        // runtime stop) before `running` is back to zero, i.e. before this
        // closure has finished; so every borrow in it outlives its use. Its
        // value `T: 'scope` is only taken through `ScopedJoinHandle<'scope>`.
        let boxed: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(boxed) };
        let spawned = match crate::sched::worker::with_current_scheduler(|s| {
            crate::runtime::spawn_on(s, None, None, boxed)
        }) {
            Some(Ok(h)) => h,
            Some(Err(e)) => {
                self.state.child_done();
                panic!("spindle: cannot create a scoped fiber: {e}")
            }
            None => {
                self.state.child_done();
                panic!("spindle::Scope::spawn called outside a spindle runtime")
            }
        };
        self.state
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(spawned.fiber().clone());
        ScopedJoinHandle {
            handle: spawned,
            value,
            panic: panic_slot,
            _scope: PhantomData,
        }
    }
}

/// Runs `f` with a [`Scope`] whose fibers may borrow from the caller's
/// stack; returns once every fiber spawned in it has ended. A child's panic
/// not taken with `join` is re-raised here, after all have ended.
/// Cancelling the parent cancels the children first.
///
/// ```
/// spindle::run(|| {
///     let mut data = vec![1, 2, 3];
///     let total = std::sync::atomic::AtomicI32::new(0);
///     spindle::scope(|s| {
///         for x in &data {
///             let total = &total;
///             s.spawn(move || total.fetch_add(*x, std::sync::atomic::Ordering::Relaxed));
///         }
///     });
///     data.push(4); // the borrows have ended
///     assert_eq!(total.into_inner(), 6);
/// });
/// ```
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        state: Arc::new(ScopeState {
            running: Mutex::new(0),
            parent: Mutex::new(None),
            panics: Mutex::new(Vec::new()),
            children: Mutex::new(Vec::new()),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    struct WaitOnDrop<'a>(&'a ScopeState);
    impl Drop for WaitOnDrop<'_> {
        fn drop(&mut self) {
            self.0.wait_all();
        }
    }
    let guard = WaitOnDrop(&scope.state);
    let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    if result.is_err() {
        scope.state.cancel_children();
    }
    drop(guard);
    match result {
        Err(p) => panic::resume_unwind(p),
        // The wait for the children is a cancellation point: having
        // cancelled them and waited, the parent leaves too.
        Ok(_) if park::current_is_cancelled() && crate::sched::worker::can_park() => {
            park::exit_cancelled()
        }
        Ok(v) => {
            if let Some(p) = scope.state.unjoined_panic() {
                panic::resume_unwind(p);
            }
            v
        }
    }
}
