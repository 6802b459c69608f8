//! The public handles of a fiber: [`Fiber`] (identity and unpark),
//! [`JoinHandle`] (its result, its cancellation) and [`JoinError`].

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use super::wait::{self, Notify};
use super::{state, FiberRef, Placement};

/// A handle to a fiber: its identity, and a way to wake it.
///
/// Obtained from [`current`](crate::current) or [`JoinHandle::fiber`].
///
/// ```
/// spindle::run(|| {
///     let me = spindle::current().expect("on a fiber");
///     me.unpark();          // the token is kept...
///     spindle::park();      // ...so this returns at once
///     assert!(me.id() > 0);
/// });
/// ```
#[derive(Clone)]
pub struct Fiber {
    pub(crate) core: FiberRef,
}

impl Fiber {
    /// A process-wide unique id, never reused.
    pub fn id(&self) -> u64 {
        self.core.header.id
    }

    /// The name given with [`Builder::name`](crate::Builder::name).
    pub fn name(&self) -> Option<&str> {
        self.core.header.name()
    }

    /// Cancels the fiber, as [`JoinHandle::cancel`] does, through a handle
    /// that does not own its result (a server cancelling its connections).
    pub fn cancel(&self) {
        wait::cancel(&self.core);
    }

    /// Makes the fiber's park token available, waking it if it is parked
    /// in [`park`](crate::park). An unpark before the park is not lost.
    /// Callable from any thread.
    pub fn unpark(&self) {
        let header = &self.core.header;
        if header.notify() {
            header.sched.schedule(self.core.clone(), Placement::Next);
        } else if header.blocking_thread.load(Ordering::SeqCst) {
            // It waits with its thread blocked in place: wake the thread.
            header.sched.unpark_owner_thread(&self.core);
        }
    }
}

impl fmt::Debug for Fiber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fiber")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish()
    }
}

/// Why [`JoinHandle::join`] has no value: the fiber panicked, or it was
/// cancelled — by [`JoinHandle::cancel`], or by runtime shutdown, before it
/// started or at one of its waits — before it could finish.
///
/// ```
/// spindle::run(|| {
///     let h = spindle::spawn(|| spindle::time::sleep(std::time::Duration::from_secs(60)));
///     h.cancel();
///     assert!(h.join().unwrap_err().is_cancelled());
/// });
/// ```
pub struct JoinError {
    repr: JoinErrorRepr,
}

enum JoinErrorRepr {
    Panic(Box<dyn Any + Send + 'static>),
    Cancelled,
}

impl JoinError {
    pub(crate) fn from_panic(payload: Box<dyn Any + Send + 'static>) -> JoinError {
        JoinError {
            repr: JoinErrorRepr::Panic(payload),
        }
    }

    /// The fiber panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Panic(_))
    }

    /// The fiber was cancelled before it finished: by
    /// [`JoinHandle::cancel`] or by runtime shutdown, before it started or
    /// at one of its waits.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Cancelled)
    }

    /// The panic payload, to re-raise with `std::panic::resume_unwind`.
    ///
    /// # Panics
    ///
    /// If the fiber did not panic; check [`is_panic`](Self::is_panic).
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        match self.repr {
            JoinErrorRepr::Panic(p) => p,
            JoinErrorRepr::Cancelled => panic!("JoinError::into_panic on a cancelled fiber"),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(p) => write!(
                f,
                "JoinError::Panic({:?})",
                crate::loud::panic_message(&**p)
            ),
            JoinErrorRepr::Cancelled => f.write_str("JoinError::Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(_) => f.write_str("fiber panicked"),
            JoinErrorRepr::Cancelled => f.write_str("fiber was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}

/// An owned permission to wait for a fiber and take its result.
///
/// Dropping it detaches the fiber (it keeps running). (`join` waits, so it
/// is written with the other waits, in `sched/join.rs`.)
///
/// ```
/// spindle::run(|| {
///     let h = spindle::spawn(|| 40 + 2);
///     assert_eq!(h.join().unwrap(), 42);
/// });
/// ```
pub struct JoinHandle<T> {
    pub(super) fiber: Fiber,
    pub(super) _result: PhantomData<T>,
}

// SAFETY: the handle only moves a `T` out of the fiber's result slot, so it
// may cross threads exactly when `T` may.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: `&JoinHandle` gives access to the `Fiber` (Sync) only.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    /// Whether the fiber has started running (a join of an unstarted fiber
    /// yields first: it was queued before the joiner's next turn).
    pub(crate) fn is_started(&self) -> bool {
        self.fiber.core.header.is_started()
    }

    /// Publishes `notify` as this handle's joiner, which the completer
    /// wakes. False if the fiber completed first (then nobody will wake
    /// `notify`, and the result is there). Called at most once per handle.
    ///
    /// The protocol: the joiner writes `join_waiter` while `JOIN_WAITER` is
    /// clear, then sets the bit; the completer sets `COMPLETE` and reads the
    /// cell only if it saw the bit. Whoever sets its bit second sees the
    /// other's, so the waiter is woken exactly when it was published before
    /// completion.
    pub(crate) fn register_joiner(&self, notify: Notify) -> bool {
        let header = &self.fiber.core.header;
        if header.state.load() & state::COMPLETE != 0 {
            return false;
        }
        // SAFETY: JOIN_WAITER is clear (this is the handle's only
        // registration, as `join` consumes the handle), so the completer
        // will not read the cell until we set the bit (AcqRel below).
        unsafe { *header.join_waiter.get() = Some(notify) };
        let prev = header.state.set(state::JOIN_WAITER);
        // COMPLETE set meanwhile: the completer did not see our bit and
        // will not wake us; the result is there.
        prev & state::COMPLETE == 0
    }

    /// Takes the result of a completed fiber.
    ///
    /// # Panics
    ///
    /// If the fiber is not complete (a bug of the caller).
    pub(crate) fn take_result(self) -> Result<T, JoinError> {
        let header = &self.fiber.core.header;
        assert!(
            header.state() & state::COMPLETE != 0,
            "spindle: the result of an unfinished fiber was taken"
        );
        // COMPLETE observed with Acquire: the result was written
        // before it and nobody else reads it (this consumes the handle, and
        // the result is dropped by others only after DETACHED, which this
        // handle's drop sets later); its type is the `T` this handle was
        // created with.
        let mut taken: Option<std::thread::Result<T>> = None;
        let out: *mut Option<std::thread::Result<T>> = &mut taken;
        // SAFETY: as above: `out` is the `Option<thread::Result<T>>` of the
        // `T` the body was spawned with, and this is the one joiner.
        unsafe { self.fiber.core.body.take_result(out.cast()) };
        // The result is taken: this handle's drop has nothing left to do
        // but release the fiber (skipping the DETACHED handshake).
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again.
        drop(unsafe { std::ptr::read(&this.fiber) });
        match taken {
            Some(Ok(v)) => Ok(v),
            Some(Err(p)) => Err(JoinError {
                repr: JoinErrorRepr::Panic(p),
            }),
            None => Err(JoinError {
                repr: JoinErrorRepr::Cancelled,
            }),
        }
    }

    /// Cancels the fiber: its current wait — socket, timer, lock, channel,
    /// join, park, `block_on`, blocking-pool call — and every later one fail
    /// at once. An I/O wait returns an `io::Error` that
    /// [`is_cancelled`](crate::is_cancelled) recognises (a kind std's helpers
    /// never retry); a wait with no error to return (`park`, `sleep`, a lock,
    /// a channel, `join`) unwinds the fiber, running its destructors. A value
    /// already handed over — a received message, an acquired guard — is
    /// never lost. A fiber cancelled before it started never runs. `join`
    /// then reports [`JoinError::is_cancelled`], unless the fiber finished
    /// anyway.
    ///
    /// ```
    /// use std::time::Duration;
    /// spindle::run(|| {
    ///     let sleeper = spindle::spawn(|| spindle::time::sleep(Duration::from_secs(3600)));
    ///     spindle::time::sleep(Duration::from_millis(10));
    ///     sleeper.cancel();
    ///     assert!(sleeper.join().unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn cancel(&self) {
        wait::cancel(&self.fiber.core);
    }

    /// Whether the fiber has finished (its `join` would not wait).
    pub fn is_finished(&self) -> bool {
        self.fiber.core.header.state() & state::COMPLETE != 0
    }

    /// The fiber this handle joins.
    pub fn fiber(&self) -> &Fiber {
        &self.fiber
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let core = &self.fiber.core;
        let prev = core.header.state.set(state::DETACHED);
        if prev & state::COMPLETE != 0 {
            // Finished and never joined (or joined: then the slot is empty).
            // A `!Send` result's handle cannot have left the owner's thread.
            core.body.drop_result();
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("fiber", &self.fiber)
            .field("finished", &self.is_finished())
            .finish()
    }
}
