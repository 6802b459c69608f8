//! Scoped fibers: [`scope`], like `std::thread::scope`.
//!
//! Children spawned in a scope may borrow from the parent's stack, because
//! the scope does not return — normally, by a panic, by cancellation, by an
//! enclosing `timeout`, or by a runtime stop unwinding the parent — before
//! every child has ended *and dropped everything that borrows*:
//!
//! * A child is counted as ended by the drop of its [`ChildRun`], which owns
//!   the child's closure and its share of the value slot. It drops both
//!   before it counts down, so a value nobody joined for is dropped before
//!   the scope can return, and a child cancelled (or discarded by a stop)
//!   before it ever ran is counted too.
//! * The parent's wait for its children is not cut short by cancellation or
//!   a `timeout` deadline: either one cancels the children, the parent still
//!   waits for all of them, then leaves with `Cancelled` or `Elapsed`.
//! * A runtime stop that unwinds a parent parked in that wait is caught
//!   there: the parent blocks its thread until the children are done (a
//!   stop unwinds the most recently started fibers of a worker first, and
//!   children start after their parent, so children on the parent's own
//!   worker are already gone), then the unwind goes on.
//! * A child's panic that nobody took with `join` is re-raised by `scope`
//!   after every child has ended.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::wait_queue::WaitQueue;
use crate::fiber::{Fiber, JoinError, JoinHandle};
use crate::sched::park::{self, WaitKind, Wake};

type PanicSlot = Arc<Mutex<Option<Box<dyn Any + Send + 'static>>>>;

struct ScopeState {
    inner: Mutex<ScopeInner>,
    /// Signalled when `running` reaches zero, for a parent that waits with
    /// its thread blocked (a plain thread, or a stop's unwind).
    all_done: Condvar,
}

struct ScopeInner {
    /// Children whose `ChildRun` has not been dropped yet.
    running: usize,
    /// The parent's published wait, while it waits on a fiber (at most
    /// one entry).
    parent: WaitQueue,
    /// One per child: a panic nobody has taken with `join` yet.
    panics: Vec<PanicSlot>,
    children: Vec<Fiber>,
}

impl ScopeState {
    fn lock(&self) -> MutexGuard<'_, ScopeInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn running(&self) -> usize {
        self.lock().running
    }

    fn child_done(&self) {
        let mut inner = self.lock();
        inner.running -= 1;
        if inner.running == 0 {
            inner.parent.wake_first();
            self.all_done.notify_all();
        }
    }

    fn cancel_children(&self) {
        let children: Vec<Fiber> = self.lock().children.clone();
        for c in &children {
            park::cancel(&c.core);
        }
    }

    /// Blocks the thread until every child has ended.
    fn block_until_done(&self) {
        let mut inner = self.lock();
        while inner.running > 0 {
            inner = self.all_done.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits until every child has ended, whatever happens to the parent.
    /// Returns why the parent must leave afterwards, if it must (it was
    /// cancelled, or an enclosing `timeout` passed).
    fn wait_all(&self) -> Option<Wake> {
        let mut leave = None;
        if park::current_is_cancelled() && !std::thread::panicking() {
            self.cancel_children();
            leave = Some(Wake::Cancelled);
            self.wait_shielded();
        }
        while self.running() > 0 {
            if !crate::sched::worker::can_park() {
                // A plain thread, a nested `block_on` poll, or a stop's
                // unwind: the fiber cannot switch; block the thread.
                self.block_until_done();
                break;
            }
            // Cancellation and a deadline end this wait only once: then the
            // children are cancelled and the wait goes on.
            let waited = panic::catch_unwind(AssertUnwindSafe(|| {
                park::block(
                    WaitKind::Join,
                    None,
                    |notify| {
                        let mut inner = self.lock();
                        if inner.running == 0 {
                            return false;
                        }
                        inner.parent.push(notify, ());
                        true
                    },
                    |notify| {
                        self.lock().parent.remove(notify);
                    },
                )
            }));
            match waited {
                Ok(Wake::Ready) => {}
                Ok(why @ (Wake::Cancelled | Wake::Elapsed)) => {
                    self.cancel_children();
                    leave.get_or_insert(why);
                    // Later waits would end at once for the same reason:
                    // wait for the children with shielded waits.
                    self.wait_shielded();
                    break;
                }
                Ok(_) => {}
                Err(unwind) => {
                    // A runtime stop unwinds the parent from its park. The
                    // children may still run on other workers and borrow
                    // from this stack: wait for them, then unwind on.
                    self.block_until_done();
                    panic::resume_unwind(unwind);
                }
            }
        }
        leave
    }

    /// The parent was cancelled (or its deadline passed) and its children
    /// were told: wait for them with waits that neither cancellation nor a
    /// deadline ends; a stop's unwind is caught as in `wait_all`.
    fn wait_shielded(&self) {
        while self.running() > 0 {
            if !crate::sched::worker::can_park() {
                self.block_until_done();
                return;
            }
            let stopped = panic::catch_unwind(AssertUnwindSafe(|| {
                park::wait_shielded(WaitKind::Join, |notify| {
                    let mut inner = self.lock();
                    if inner.running == 0 {
                        return false;
                    }
                    inner.parent.push(notify, ());
                    true
                });
            }));
            if let Err(unwind) = stopped {
                self.block_until_done();
                panic::resume_unwind(unwind);
            }
        }
    }

    /// The first panic no `join` took.
    fn unjoined_panic(&self) -> Option<Box<dyn Any + Send + 'static>> {
        let panics: Vec<PanicSlot> = self.lock().panics.clone();
        panics
            .iter()
            .find_map(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take())
    }
}

/// What a scoped child's fiber runs: owns the closure and the child's share
/// of its value slot, and counts the child as ended when it is dropped —
/// after both are gone, so nothing borrowing `'scope` outlives the count.
struct ChildRun<F, T> {
    f: Option<F>,
    value: Option<Arc<Mutex<Option<T>>>>,
    panic: PanicSlot,
    state: Arc<ScopeState>,
}

/// The payload a scoped child's fiber ends with when its closure panicked
/// (the real payload waits in the child's slot for `join` or the scope).
struct ScopedPanic;

impl<F: FnOnce() -> T, T> ChildRun<F, T> {
    fn run(mut self) {
        let f = self.f.take().expect("a scoped child runs once");
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => {
                if let Some(slot) = &self.value {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                }
            }
            Err(p) if p.is::<park::Cancelled>() || crate::fiber::running_is_stopped() => {
                drop(self);
                panic::resume_unwind(p);
            }
            Err(p) => {
                *self.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                drop(self);
                panic::resume_unwind(Box::new(ScopedPanic));
            }
        }
    }
}

impl<F, T> Drop for ChildRun<F, T> {
    fn drop(&mut self) {
        // Everything that may borrow from the parent goes first: the closure
        // if it never ran, and our reference to the value (the last one, if
        // the handle was dropped: then the value is dropped here).
        let f = self.f.take();
        let value = self.value.take();
        crate::fiber::drop_quietly((f, value), "a scoped fiber's closure or value");
        self.state.child_done();
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
        let value: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let panic_slot: PanicSlot = Arc::new(Mutex::new(None));
        {
            let mut inner = self.state.lock();
            inner.running += 1;
            inner.panics.push(panic_slot.clone());
        }
        let child = ChildRun {
            f: Some(f),
            value: Some(value.clone()),
            panic: panic_slot.clone(),
            state: self.state.clone(),
        };
        let boxed: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || child.run());
        // SAFETY: `scope` does not return (normally, by unwinding, or by a
        // runtime stop) before `running` is back to zero, i.e. before the
        // `ChildRun` in this closure has been dropped — whether the closure
        // ran, was cancelled before it started, or was discarded unrun — and
        // that drop comes after every `'scope` borrow in it is gone. Its
        // value `T: 'scope` is otherwise only reached through
        // `ScopedJoinHandle<'scope>`.
        let boxed: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(boxed) };
        let spawned = match crate::sched::worker::with_current(|w| {
            w.map(|w| super::spawn::spawn_on(w.sched, Default::default(), boxed))
        }) {
            Some(Ok(h)) => h,
            // The closure (and its `ChildRun`) was dropped by the failed
            // spawn, which counted the child as ended.
            Some(Err(e)) => panic!("spindle: cannot create a scoped fiber: {e}"),
            None => panic!("spindle::Scope::spawn called outside a spindle runtime"),
        };
        self.state.lock().children.push(spawned.fiber().clone());
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
            inner: Mutex::new(ScopeInner {
                running: 0,
                parent: WaitQueue::new(),
                panics: Vec::new(),
                children: Vec::new(),
            }),
            all_done: Condvar::new(),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    if result.is_err() {
        scope.state.cancel_children();
    }
    let leave = scope.state.wait_all();
    match result {
        Err(p) => panic::resume_unwind(p),
        Ok(v) => {
            if let Some(why) = leave {
                // The wait for the children is a cancellation point: having
                // cancelled them and waited, the parent leaves too.
                drop(v);
                crate::sched::park::exit_for(why);
            }
            if let Some(p) = scope.state.unjoined_panic() {
                panic::resume_unwind(p);
            }
            v
        }
    }
}
