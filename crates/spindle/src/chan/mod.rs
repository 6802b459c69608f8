//! Channels: multi-producer multi-consumer queues whose waits park the
//! fiber, with crossbeam-channel's API. One type serves fibers and threads.
//!
//! ```
//! spindle::run(|| {
//!     let (tx, rx) = spindle::chan::bounded(4);
//!     let producers: Vec<_> = (0..4)
//!         .map(|p| {
//!             let tx = tx.clone();
//!             spindle::spawn(move || for i in 0..100 { tx.send(p * 100 + i).unwrap() })
//!         })
//!         .collect();
//!     drop(tx); // the channel disconnects when the producers are done
//!     let total: u32 = rx.iter().sum();
//!     assert_eq!(total, (0..400).sum());
//!     for p in producers { p.join().unwrap(); }
//! });
//! ```
//!
//! # Design
//!
//! One `std::sync::Mutex` per channel guards the buffer and two FIFO
//! queues of parked waiters. Values move by *hand-over*: a sender that finds
//! a parked receiver puts its value in that receiver's slot (a one-value
//! cell, `hand_off.rs`) and then tries to end the receiver's wait (the
//! compare-exchange of `sched::park`); if the wait already ended otherwise
//! (timed out, cancelled), it takes the value back and tries the next. A
//! receiver that finds a parked sender ends the sender's wait first and only
//! then takes its value. So a value is delivered exactly once, never lost to
//! a racing timeout or cancel, and a received message is always returned —
//! the fiber leaves at its *next* wait if it was cancelled meanwhile.
//! `bounded(0)` is a rendezvous: no buffer, only hand-overs.
//!
//! [`select!`](crate::select) registers one wait in every channel it
//! watches; the first channel to win that wait completes its arm, the
//! others' hand-overs fail and keep their values.

mod error;
mod hand_off;
mod select;

pub use error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};

#[doc(hidden)]
pub use select::{
    __select, RecvArm as __RecvArm, Registration, SelectArm, SelectWait, SendArm as __SendArm,
};

use std::collections::VecDeque;

use std::fmt;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::sched::park::{self, WaitKind, Wake};
use crate::sched::wait_queue::WaitQueue;
use hand_off::HandOff;

/// Where a hand-over leaves a value: a parked receiver's, or a parked
/// sender's holding the value it could not send yet.
pub(crate) type Slot<T> = Arc<HandOff<T>>;

/// Receivers' slots a channel keeps for reuse.
const MAX_SPARE_SLOTS: usize = 4;

fn empty_slot<T>() -> Slot<T> {
    Arc::new(HandOff::empty())
}

fn take<T>(s: &Slot<T>) -> Option<T> {
    s.take()
}

/// Fills a slot the protocol guarantees empty: a fresh one, or one whose
/// waiter has been taken off its queue by the caller, under the channel's
/// lock.
fn put<T>(s: &Slot<T>, v: T) {
    if s.put(v).is_err() {
        unreachable!("a slot is filled only while empty");
    }
}

pub(crate) struct State<T> {
    pub(crate) buf: VecDeque<T>,
    /// `None`: unbounded.
    pub(crate) cap: Option<usize>,
    /// Parked receivers, each with the slot a sender hands its value to.
    pub(crate) receivers_waiting: WaitQueue<Slot<T>>,
    /// Parked senders, each with the slot holding the value it sends.
    pub(crate) senders_waiting: WaitQueue<Slot<T>>,
    /// Receivers' slots whose hand-over is done, for the next receiver
    /// that parks: taken only once nobody else holds them, so a channel
    /// used in a loop allocates no slot per wait.
    spare_slots: Vec<Slot<T>>,
    pub(crate) senders: usize,
    pub(crate) receivers: usize,
}

pub(crate) struct Chan<T> {
    pub(crate) state: Mutex<State<T>>,
    len: AtomicUsize,
    /// `bounded(0)`: messages wait with their senders, never in the buffer.
    rendezvous: bool,
}

impl<T> Chan<T> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn publish_len(&self, st: &State<T>) {
        self.len.store(st.buf.len(), Ordering::Relaxed);
    }
}

impl<T> State<T> {
    pub(crate) fn has_room(&self) -> bool {
        match self.cap {
            None => true,
            Some(c) => self.buf.len() < c,
        }
    }

    /// Hands `value` to the first parked receiver whose wait is pending.
    pub(crate) fn give_to_receiver(&mut self, value: T) -> Result<(), T> {
        let taken_by = self.receivers_waiting.hand_over(value, put, |slot| {
            take(slot).expect("our value is still there")
        })?;
        if self.spare_slots.len() < MAX_SPARE_SLOTS {
            self.spare_slots.push(taken_by);
        }
        Ok(())
    }

    /// An empty slot for a receiver about to park: a spare one that
    /// nobody else holds any more (its receiver has taken its value and
    /// let go), or a new one.
    fn receiver_slot(&mut self) -> Slot<T> {
        if let Some(spare) = self.spare_slots.pop() {
            // Ours alone once its count is one: a slot never has a `Weak`,
            // so only a holder could add a count, and we are the last. A
            // plain load, where `Arc::get_mut` takes a locked exchange on
            // the weak count to rule out `Weak`s. The fence orders our use
            // after the other holder's release of its count.
            if Arc::strong_count(&spare) == 1 {
                fence(Ordering::Acquire);
                if spare.is_empty_alone() {
                    return spare;
                }
            }
        }
        empty_slot()
    }

    /// Takes the value of the first parked sender whose wait is pending.
    pub(crate) fn take_from_sender(&mut self) -> Option<T> {
        let slot = self.senders_waiting.wake_first()?;
        take(&slot)
    }

    /// A message without waiting: the buffer (refilled from a parked
    /// sender), or straight from a parked sender (rendezvous).
    pub(crate) fn try_take(&mut self) -> Option<T> {
        if let Some(v) = self.buf.pop_front() {
            if let Some(more) = self.take_from_sender() {
                self.buf.push_back(more);
            }
            return Some(v);
        }
        self.take_from_sender()
    }

    /// Sends without waiting; gives the value back if it cannot.
    pub(crate) fn try_give(&mut self, value: T) -> Result<(), T> {
        let value = match self.give_to_receiver(value) {
            Ok(()) => return Ok(()),
            Err(v) => v,
        };
        if self.cap != Some(0) && self.has_room() {
            self.buf.push_back(value);
            return Ok(());
        }
        Err(value)
    }
}

/// Creates a channel holding at most `cap` messages; `bounded(0)` is a
/// rendezvous (a send waits for a receive).
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    new_chan(Some(cap))
}

/// Creates a channel with no bound.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    new_chan(None)
}

fn new_chan<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            buf: VecDeque::new(),
            cap,
            receivers_waiting: WaitQueue::new(),
            senders_waiting: WaitQueue::new(),
            spare_slots: Vec::new(),
            senders: 1,
            receivers: 1,
        }),
        len: AtomicUsize::new(0),
        rendezvous: cap == Some(0),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// The sending half; `Clone` for more producers.
pub struct Sender<T> {
    pub(crate) chan: Arc<Chan<T>>,
}

/// The receiving half; `Clone` for more consumers.
pub struct Receiver<T> {
    pub(crate) chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends, parking while the channel is full (or, for `bounded(0)`,
    /// until a receiver takes the message). Fails only when every receiver
    /// is gone, giving the message back.
    pub fn send(&self, msg: T) -> Result<(), SendError<T>> {
        match self.send_until(msg, None) {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Disconnected(v)) => Err(SendError(v)),
            Err(SendTimeoutError::Timeout(_)) => unreachable!("no deadline"),
        }
    }

    /// Like [`send`](Self::send), giving up after `timeout`.
    pub fn send_timeout(&self, msg: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.send_until(msg, Some(crate::time::now() + timeout))
    }

    /// Sends only if it can be done without waiting.
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        let mut st = self.chan.lock();
        if st.receivers == 0 {
            return Err(TrySendError::Disconnected(msg));
        }
        let r = st.try_give(msg).map_err(TrySendError::Full);
        self.chan.publish_len(&st);
        r
    }

    fn send_until(&self, msg: T, deadline: Option<Instant>) -> Result<(), SendTimeoutError<T>> {
        // Fast path: a hand-over or a free place, under one lock.
        let msg = {
            let mut st = self.chan.lock();
            if st.receivers == 0 {
                return Err(SendTimeoutError::Disconnected(msg));
            }
            match st.try_give(msg) {
                Ok(()) => {
                    self.chan.publish_len(&st);
                    return Ok(());
                }
                Err(msg) => msg,
            }
        };
        let mut pending = Some(msg);
        let mut my_slot: Option<Slot<T>> = None;
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Channel,
            deadline,
            |notify| {
                let mut st = self.chan.lock();
                let msg = pending.take().expect("sent once");
                if st.receivers == 0 {
                    pending = Some(msg);
                    return false;
                }
                match st.try_give(msg) {
                    Ok(()) => {
                        self.chan.publish_len(&st);
                        false
                    }
                    Err(msg) => {
                        let s = Arc::new(HandOff::full(msg));
                        st.senders_waiting.push(notify, s.clone());
                        my_slot = Some(s);
                        true
                    }
                }
            },
            |notify| {
                let mut st = self.chan.lock();
                st.senders_waiting.remove(notify);
            },
        );
        let keep_value = || {
            my_slot
                .as_ref()
                .and_then(take)
                .expect("an unsent message stays with its sender")
        };
        match why {
            Wake::Ready => match pending.take() {
                // Registration found no receivers left.
                Some(v) => Err(SendTimeoutError::Disconnected(v)),
                None => Ok(()),
            },
            Wake::TimedOut => Err(SendTimeoutError::Timeout(keep_value())),
            Wake::Closed => Err(SendTimeoutError::Disconnected(keep_value())),
            other => crate::sched::park::exit_for(other),
        }
    }

    /// Messages in the buffer now.
    pub fn len(&self) -> usize {
        self.chan.len.load(Ordering::Relaxed)
    }

    /// Whether the buffer is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound (`None`: unbounded).
    pub fn capacity(&self) -> Option<usize> {
        self.chan.lock().cap
    }
}

impl<T> Receiver<T> {
    /// Receives, parking while the channel is empty. Fails when it is empty
    /// and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(crate::time::now() + timeout))
    }

    /// Receives only if a message is there now.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut st = self.chan.lock();
        let got = st.try_take();
        self.chan.publish_len(&st);
        match got {
            Some(v) => Ok(v),
            None if st.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        // Fast path: a message in the buffer or from a parked sender. When
        // the buffer looks empty the wait below looks under the same lock
        // before it parks, so the lock is taken once instead of twice; only a
        // rendezvous channel, whose messages wait with their senders, always
        // looks here first.
        if self.chan.rendezvous || self.chan.len.load(Ordering::Relaxed) != 0 {
            let mut st = self.chan.lock();
            if let Some(v) = st.try_take() {
                self.chan.publish_len(&st);
                return Ok(v);
            }
            if st.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
        }
        let mut my_slot: Option<Slot<T>> = None;
        let mut got = None;
        let mut disconnected = false;
        park::exit_if_cancelled();
        let why = park::block(
            WaitKind::Channel,
            deadline,
            |notify| {
                let mut st = self.chan.lock();
                if let Some(v) = st.try_take() {
                    self.chan.publish_len(&st);
                    got = Some(v);
                    return false;
                }
                if st.senders == 0 {
                    disconnected = true;
                    return false;
                }
                let s = st.receiver_slot();
                st.receivers_waiting.push(notify, s.clone());
                my_slot = Some(s);
                true
            },
            |notify| {
                let mut st = self.chan.lock();
                st.receivers_waiting.remove(notify);
            },
        );
        match why {
            Wake::Ready if disconnected => Err(RecvTimeoutError::Disconnected),
            Wake::Ready => Ok(got
                .or_else(|| my_slot.as_ref().and_then(take))
                .expect("a ready receive has its message")),
            Wake::TimedOut => Err(RecvTimeoutError::Timeout),
            Wake::Closed => Err(RecvTimeoutError::Disconnected),
            other => crate::sched::park::exit_for(other),
        }
    }

    /// A blocking iterator: receives until the channel disconnects.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// An iterator over the messages there now.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// Messages in the buffer now.
    pub fn len(&self) -> usize {
        self.chan.len.load(Ordering::Relaxed)
    }

    /// Whether the buffer is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound (`None`: unbounded).
    pub fn capacity(&self) -> Option<usize> {
        self.chan.lock().cap
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.lock().senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.chan.lock().receivers += 1;
        Receiver {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Chan<T> {
    /// One end left: if it was the last of its side, wake every waiter of
    /// the other side with `Closed`.
    fn leave(&self, side: impl FnOnce(&mut State<T>) -> (usize, &mut WaitQueue<Slot<T>>)) {
        let waiting = {
            let mut st = self.lock();
            let (left, other) = side(&mut st);
            if left > 0 {
                return;
            }
            other.take_all()
        };
        waiting.wake_all(Wake::Closed);
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.chan.leave(|st| {
            st.senders -= 1;
            (st.senders, &mut st.receivers_waiting)
        });
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.chan.leave(|st| {
            st.receivers -= 1;
            (st.receivers, &mut st.senders_waiting)
        });
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").field("len", &self.len()).finish()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("len", &self.len())
            .finish()
    }
}

/// See [`Receiver::iter`].
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

/// See [`Receiver::try_iter`].
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// An owning blocking iterator (see [`Receiver::iter`]).
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// A channel for exactly one message.
///
/// ```
/// spindle::run(|| {
///     let (tx, rx) = spindle::chan::oneshot();
///     spindle::spawn(move || tx.send("done").unwrap());
///     assert_eq!(rx.recv(), Ok("done"));
/// });
/// ```
pub fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let (tx, rx) = bounded(1);
    (OneshotSender { tx }, OneshotReceiver { rx })
}

/// The sending half of [`oneshot`].
#[derive(Debug)]
pub struct OneshotSender<T> {
    tx: Sender<T>,
}

/// The receiving half of [`oneshot`].
#[derive(Debug)]
pub struct OneshotReceiver<T> {
    rx: Receiver<T>,
}

impl<T> OneshotSender<T> {
    /// Sends the message (never waits); fails if the receiver is gone.
    pub fn send(self, msg: T) -> Result<(), SendError<T>> {
        self.tx.try_send(msg).map_err(|e| match e {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => SendError(v),
        })
    }
}

impl<T> OneshotReceiver<T> {
    /// Waits for the message; fails if the sender is dropped without one.
    pub fn recv(self) -> Result<T, RecvError> {
        self.rx.recv()
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// The message, if it is there now.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }
}
