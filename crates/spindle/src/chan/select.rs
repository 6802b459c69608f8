//! `select!`: wait on several channel operations, complete exactly one.
//!
//! Each arm is a [`SelectArm`] (a receive or a send on one channel). A
//! select first tries every arm without waiting, starting at a random arm
//! so that ready arms are chosen fairly. If none is ready it registers *one*
//! wait in every arm's channel; the first channel to end that wait (a
//! hand-over into the arm's slot, or a disconnection) completes its arm,
//! and the other channels' attempts to end the same wait fail, keeping
//! their values. An arm that could complete while registering first claims
//! the wait itself, so two arms never both complete.

use std::cell::Cell;
use std::time::Duration;

use super::{empty_slot, put, take, Receiver, RecvError, SendError, Sender, Slot};
use crate::sched::park::{self, Notify, WaitKind, Wake};

/// What registering an arm found.
#[doc(hidden)]
pub enum Registration {
    /// Parked in the channel's queue.
    Registered,
    /// Completed while registering (the wait was claimed).
    Completed,
    /// Could not complete and could not register consistently: try again.
    Retry,
}

/// Opaque handle to the select's wait, passed to arms.
#[doc(hidden)]
pub struct SelectWait(pub(crate) Notify);

/// One arm of a select (an implementation detail of `select!`).
#[doc(hidden)]
pub trait SelectArm {
    /// Completes the operation now if it can, without waiting.
    fn try_complete(&mut self) -> bool;
    /// Registers the select's wait with this arm's channel.
    fn register(&mut self, wait: &SelectWait) -> Registration;
    /// Removes the registration (keeping an unsent value).
    fn unregister(&mut self, wait: &SelectWait);
    /// After the wait ended: whether a value was handed over through this
    /// arm (the arm completed).
    fn handed_over(&mut self) -> bool;
    /// After the wait ended with no value handed over through any arm:
    /// whether this arm's channel is closed (the arm completed with an
    /// error).
    fn closed(&mut self) -> bool;
    /// Whether this arm is the one that completed.
    fn is_completed(&self) -> bool;
}

/// A receive arm.
#[doc(hidden)]
pub struct RecvArm<'a, T> {
    rx: &'a Receiver<T>,
    slot: Slot<T>,
    result: Option<Result<T, RecvError>>,
}

impl<'a, T> RecvArm<'a, T> {
    pub fn new(rx: &'a Receiver<T>) -> Self {
        RecvArm {
            rx,
            slot: empty_slot(),
            result: None,
        }
    }

    /// The arm's outcome (after it completed).
    pub fn take(&mut self) -> Result<T, RecvError> {
        self.result.take().expect("select arm completed")
    }
}

impl<T> SelectArm for RecvArm<'_, T> {
    fn try_complete(&mut self) -> bool {
        match self.rx.try_recv() {
            Ok(v) => self.result = Some(Ok(v)),
            Err(super::TryRecvError::Disconnected) => self.result = Some(Err(RecvError)),
            Err(super::TryRecvError::Empty) => return false,
        }
        true
    }

    fn register(&mut self, wait: &SelectWait) -> Registration {
        let mut st = self.rx.chan.lock();
        let available = !st.buf.is_empty() || !st.senders_waiting.is_empty() || st.senders == 0;
        if available {
            if !wait.0.wake(Wake::Ready) {
                return Registration::Retry; // another arm's channel won
            }
            match st.try_take() {
                Some(v) => self.result = Some(Ok(v)),
                None if st.senders == 0 => self.result = Some(Err(RecvError)),
                None => return Registration::Retry,
            }
            self.rx.chan.publish_len(&st);
            return Registration::Completed;
        }
        st.receivers_waiting.push(wait.0.clone(), self.slot.clone());
        Registration::Registered
    }

    fn unregister(&mut self, wait: &SelectWait) {
        let mut st = self.rx.chan.lock();
        st.receivers_waiting.remove(&wait.0);
    }

    fn handed_over(&mut self) -> bool {
        if let Some(v) = take(&self.slot) {
            self.result = Some(Ok(v));
            return true;
        }
        false
    }

    fn closed(&mut self) -> bool {
        let st = self.rx.chan.lock();
        if st.senders == 0 && st.buf.is_empty() {
            self.result = Some(Err(RecvError));
            return true;
        }
        false
    }

    fn is_completed(&self) -> bool {
        self.result.is_some()
    }
}

/// A send arm.
#[doc(hidden)]
pub struct SendArm<'a, T> {
    tx: &'a Sender<T>,
    value: Option<T>,
    slot: Slot<T>,
    parked: bool,
    result: Option<Result<(), SendError<T>>>,
}

impl<'a, T> SendArm<'a, T> {
    pub fn new(tx: &'a Sender<T>, value: T) -> Self {
        SendArm {
            tx,
            value: Some(value),
            slot: empty_slot(),
            parked: false,
            result: None,
        }
    }

    /// The arm's outcome (after it completed).
    pub fn take(&mut self) -> Result<(), SendError<T>> {
        self.result.take().expect("select arm completed")
    }
}

impl<T> SelectArm for SendArm<'_, T> {
    fn try_complete(&mut self) -> bool {
        let v = self.value.take().expect("value kept until completion");
        match self.tx.try_send(v) {
            Ok(()) => self.result = Some(Ok(())),
            Err(super::TrySendError::Disconnected(v)) => self.result = Some(Err(SendError(v))),
            Err(super::TrySendError::Full(v)) => {
                self.value = Some(v);
                return false;
            }
        }
        true
    }

    fn register(&mut self, wait: &SelectWait) -> Registration {
        let mut st = self.tx.chan.lock();
        let v = self.value.take().expect("value kept until completion");
        let can_now = st.receivers == 0
            || !st.receivers_waiting.is_empty()
            || (st.cap != Some(0) && st.has_room());
        if can_now {
            if !wait.0.wake(Wake::Ready) {
                self.value = Some(v);
                return Registration::Retry;
            }
            if st.receivers == 0 {
                self.result = Some(Err(SendError(v)));
                return Registration::Completed;
            }
            return match st.try_give(v) {
                Ok(()) => {
                    self.tx.chan.publish_len(&st);
                    self.result = Some(Ok(()));
                    Registration::Completed
                }
                Err(v) => {
                    self.value = Some(v);
                    Registration::Retry
                }
            };
        }
        put(&self.slot, v);
        self.parked = true;
        st.senders_waiting.push(wait.0.clone(), self.slot.clone());
        Registration::Registered
    }

    fn unregister(&mut self, wait: &SelectWait) {
        let mut st = self.tx.chan.lock();
        st.senders_waiting.remove(&wait.0);
        drop(st);
        if let Some(v) = take(&self.slot) {
            self.value = Some(v);
            self.parked = false;
        }
    }

    fn handed_over(&mut self) -> bool {
        if self.parked && self.value.is_none() {
            // Parked with a value, and a receiver took it.
            self.parked = false;
            self.result = Some(Ok(()));
            return true;
        }
        false
    }

    fn closed(&mut self) -> bool {
        if self.tx.chan.lock().receivers == 0 {
            if let Some(v) = self.value.take() {
                self.result = Some(Err(SendError(v)));
                return true;
            }
        }
        false
    }

    fn is_completed(&self) -> bool {
        self.result.is_some()
    }
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
}

fn random_start(n: usize) -> usize {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        (x % n as u64) as usize
    })
}

/// Runs a select over `arms`: returns true when an arm completed (see
/// `is_completed`), false when `nonblocking` found none ready or the
/// timeout passed. The engine of `select!`.
#[doc(hidden)]
pub fn __select(
    arms: &mut [&mut dyn SelectArm],
    nonblocking: bool,
    timeout: Option<Duration>,
) -> bool {
    let n = arms.len();
    let deadline = timeout.map(|t| crate::time::now() + t);
    loop {
        let start = if n > 0 { random_start(n) } else { 0 };
        for k in 0..n {
            if arms[(start + k) % n].try_complete() {
                return true;
            }
        }
        if nonblocking && deadline.is_none() {
            return false;
        }
        if deadline.is_some_and(|d| crate::time::now() >= d) {
            return false;
        }
        park::exit_if_cancelled();
        let mut wait_handle: Option<SelectWait> = None;
        let mut outcome_retry = false;
        let mut completed_now = false;
        let why = park::block(
            WaitKind::Channel,
            deadline,
            |notify| {
                let wait = SelectWait(notify);
                for k in 0..n {
                    match arms[(start + k) % n].register(&wait) {
                        Registration::Registered => {}
                        Registration::Completed => {
                            completed_now = true;
                            break;
                        }
                        Registration::Retry => {
                            outcome_retry = true;
                            break;
                        }
                    }
                }
                let parked = !completed_now && !outcome_retry;
                wait_handle = Some(wait);
                parked
            },
            |_| {},
        );
        if let Some(wait) = &wait_handle {
            for arm in arms.iter_mut() {
                arm.unregister(wait);
            }
        }
        if completed_now {
            return true;
        }
        match why {
            Wake::Cancelled | Wake::Elapsed => crate::sched::park::exit_for(why),
            Wake::TimedOut => {
                // A hand-over may have raced the deadline and lost: values
                // stay with their senders. Nothing completed.
                return false;
            }
            _ => {}
        }
        // A hand-over first: the one that ended the wait may be followed by
        // another arm's channel closing before this fiber runs, and that
        // arm, looked at first, would drop the value handed over.
        for k in 0..n {
            if arms[(start + k) % n].handed_over() {
                return true;
            }
        }
        for k in 0..n {
            if arms[(start + k) % n].closed() {
                return true;
            }
        }
        // Retry, or a wake that completed nothing: go round again.
    }
}

/// Waits on several channel operations and runs the arm of the one that
/// completes first; ready arms are chosen fairly (in random order). The
/// grammar is crossbeam-channel's:
///
/// * `recv(rx) -> res => body` — `res: Result<T, RecvError>`
/// * `send(tx, value) -> res => body` — `res: Result<(), SendError<T>>`
/// * `default => body` — run if no arm is ready now (last)
/// * `default(timeout) => body` — run if none completes within `timeout`
///
/// ```
/// use std::time::Duration;
/// spindle::run(|| {
///     let (tx1, rx1) = spindle::chan::unbounded::<i32>();
///     let (_tx2, rx2) = spindle::chan::unbounded::<&str>();
///     spindle::spawn(move || tx1.send(7).unwrap());
///     let got = spindle::select! {
///         recv(rx1) -> v => v.unwrap(),
///         recv(rx2) -> s => s.unwrap().len() as i32,
///         default(Duration::from_secs(5)) => -1,
///     };
///     assert_eq!(got, 7);
/// });
/// ```
#[macro_export]
macro_rules! select {
    ($($t:tt)*) => {
        $crate::__select_internal!(@parse [] [] ($($t)*))
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __select_internal {
    // --- parsing: collect arms, then an optional default -------------------
    (@parse [$($arms:tt)*] [] (recv($rx:expr) -> $p:pat => $body:block, $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (recv ($rx) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (recv($rx:expr) -> $p:pat => $body:block $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (recv ($rx) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (recv($rx:expr) -> $p:pat => $body:expr, $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (recv ($rx) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (recv($rx:expr) -> $p:pat => $body:expr)) => {
        $crate::__select_internal!(@parse [$($arms)* (recv ($rx) ($p) ($body))] [] ())
    };
    (@parse [$($arms:tt)*] [] (send($tx:expr, $v:expr) -> $p:pat => $body:block, $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (send ($tx, $v) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (send($tx:expr, $v:expr) -> $p:pat => $body:block $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (send ($tx, $v) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (send($tx:expr, $v:expr) -> $p:pat => $body:expr, $($rest:tt)*)) => {
        $crate::__select_internal!(@parse [$($arms)* (send ($tx, $v) ($p) ($body))] [] ($($rest)*))
    };
    (@parse [$($arms:tt)*] [] (send($tx:expr, $v:expr) -> $p:pat => $body:expr)) => {
        $crate::__select_internal!(@parse [$($arms)* (send ($tx, $v) ($p) ($body))] [] ())
    };
    (@parse [$($arms:tt)*] [] (default($t:expr) => $body:expr $(,)?)) => {
        $crate::__select_internal!(@emit
            [__a0 __a1 __a2 __a3 __a4 __a5 __a6 __a7 __a8 __a9 __a10 __a11 __a12 __a13 __a14 __a15]
            [$($arms)*] [] [timeout ($t) ($body)])
    };
    (@parse [$($arms:tt)*] [] (default => $body:expr $(,)?)) => {
        $crate::__select_internal!(@emit
            [__a0 __a1 __a2 __a3 __a4 __a5 __a6 __a7 __a8 __a9 __a10 __a11 __a12 __a13 __a14 __a15]
            [$($arms)*] [] [now ($body)])
    };
    (@parse [$($arms:tt)*] [] ()) => {
        $crate::__select_internal!(@emit
            [__a0 __a1 __a2 __a3 __a4 __a5 __a6 __a7 __a8 __a9 __a10 __a11 __a12 __a13 __a14 __a15]
            [$($arms)*] [] [])
    };
    // --- emitting: one local per arm, then the select, then dispatch ------
    (@emit [$id:ident $($ids:ident)*] [(recv ($rx:expr) ($p:pat) ($body:expr)) $($rest:tt)*] [$($bound:tt)*] [$($def:tt)*]) => {{
        let mut $id = $crate::chan::__RecvArm::new(&$rx);
        $crate::__select_internal!(@emit [$($ids)*] [$($rest)*] [$($bound)* ($id ($p) ($body))] [$($def)*])
    }};
    (@emit [$id:ident $($ids:ident)*] [(send ($tx:expr, $v:expr) ($p:pat) ($body:expr)) $($rest:tt)*] [$($bound:tt)*] [$($def:tt)*]) => {{
        let mut $id = $crate::chan::__SendArm::new(&$tx, $v);
        $crate::__select_internal!(@emit [$($ids)*] [$($rest)*] [$($bound)* ($id ($p) ($body))] [$($def)*])
    }};
    (@emit [$($ids:ident)*] [] [$(($id:ident ($p:pat) ($body:expr)))*] [$($def:tt)*]) => {{
        let (__nonblocking, __timeout) = $crate::__select_internal!(@mode $($def)*);
        let __done = $crate::chan::__select(
            &mut [$(&mut $id as &mut dyn $crate::chan::SelectArm),*],
            __nonblocking,
            __timeout,
        );
        let _ = __done;
        $crate::__select_internal!(@dispatch [$(($id ($p) ($body)))*] [$($def)*])
    }};
    (@mode) => { (false, ::std::option::Option::None) };
    (@mode now ($body:expr)) => { (true, ::std::option::Option::None) };
    (@mode timeout ($t:expr) ($body:expr)) => {
        (false, ::std::option::Option::Some(::std::time::Duration::from(($t))))
    };
    (@dispatch [($id:ident ($p:pat) ($body:expr)) $($rest:tt)*] [$($def:tt)*]) => {
        if $crate::chan::SelectArm::is_completed(&$id) {
            let $p = $id.take();
            $body
        } else {
            $crate::__select_internal!(@dispatch [$($rest)*] [$($def)*])
        }
    };
    (@dispatch [] [now ($body:expr)]) => { $body };
    (@dispatch [] [timeout ($t:expr) ($body:expr)]) => { $body };
    (@dispatch [] []) => { ::std::unreachable!("a select without default completes an arm") };
}
