//! The netpoller: epoll, edge-triggered, polled by the workers themselves.
//!
//! # Model (`docs/DESIGN.md`, "The netpoller")
//!
//! Each runtime has one [`Poller`]: an epoll instance and an eventfd. There
//! is no reactor thread. A worker with nothing to run takes the poller's
//! *lease* and blocks in `epoll_wait` itself, with its next timer deadline
//! as the timeout; a fiber made ready by the events it reaps and owned by
//! that worker is pushed straight onto its local queue and resumes there —
//! no queue hop, no cross-thread wake. Fibers owned by other workers go to
//! their inboxes and those workers are woken. Only one worker holds the lease;
//! other idle workers sleep on their futex. Busy workers poll too, without
//! blocking, on a cadence (at most every [`CADENCE`] of wall time, 1 ms,
//! checked every 16 dispatches), so ready I/O enters the service order even
//! while every worker is busy, and arrives in batches when they are. A worker that leaves `epoll_wait` with work to do
//! while others sleep wakes one of them to take over the lease.
//!
//! # Registration and readiness
//!
//! An fd is registered once per lifetime, `EPOLLIN | EPOLLOUT | EPOLLRDHUP |
//! EPOLLET`, the first time anything waits on it; its events are tagged with
//! the fd and the generation of its [`slot::FdSlot`]. Edges that arrive
//! while nobody waits are banked in the slot (see `slot`). Every wait is
//! try-then-wait: the operation first, the wait only after `EAGAIN`.
//! Closing an fd through [`close_fd`] deregisters it, wakes every waiter
//! with an error, and resets the slot before the number can be reused.
//!
//! # Accept admission
//!
//! A wait on a listening socket is *urgent*: when its edge arrives the fiber
//! is queued at the head of its worker's order instead of the tail, so the
//! connections waiting in the kernel's queue enter the service order within
//! one poll, not after a whole pass of the run queue.
//!
//! # Off the runtime
//!
//! Futures from [`crate::io::readable`] or [`crate::time::sleep_future`]
//! polled on a thread that is not a worker register with the process's
//! *background* poller: one lazily started thread running the same loop.
//!
//! # Rejected
//!
//! * A reactor thread per runtime (tokio's shape): every I/O wake would
//!   cross threads. Kept only as the background fallback above.
//! * `EPOLLONESHOT` re-arming per wait: one `epoll_ctl`
//!   per wait; banked edge-triggered bits need none.

pub(crate) mod slot;
mod sys;
pub(crate) mod timer;

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use slot::{FdSlot, READ, WRITE};
use sys::{Epoll, EventFd};
use timer::{TimerHeap, TimerTarget};

/// Busy workers poll at most this often. A worker with nothing to run
/// polls at once (blocking), so this bounds only how long ready I/O waits
/// while every worker is busy; between polls the readiness of many sockets
/// gathers, and a poll reaps it as one batch whose responses go out
/// together — as Go's scheduler, which polls when it runs out of work (its
/// backstop is 10 ms). At 50 µs a saturated `spindle serve` polled every
/// ~3 requests and each response woke the load generator on its own;
/// `bench/RESULTS.md` has the A/B.
pub(crate) const CADENCE: Duration = Duration::from_millis(1);

/// Tag of the poller's own eventfd in epoll events.
const WAKE_TAG: u64 = u64::MAX;

static NEXT_POLLER_ID: AtomicU64 = AtomicU64::new(1);

/// One epoll instance and the lease to block in it.
pub(crate) struct Poller {
    id: u64,
    epoll: Epoll,
    wake: EventFd,
    lease: AtomicBool,
    registered: AtomicUsize,
}

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        let epoll = Epoll::new()?;
        let wake = EventFd::new()?;
        epoll.add(wake.raw(), (libc::EPOLLIN | libc::EPOLLET) as u32, WAKE_TAG)?;
        Ok(Poller {
            id: NEXT_POLLER_ID.fetch_add(1, Ordering::Relaxed),
            epoll,
            wake,
            lease: AtomicBool::new(false),
            registered: AtomicUsize::new(0),
        })
    }

    /// Registers `fd` once per lifetime (a no-op if any poller has it).
    pub(crate) fn register(&self, fd: RawFd, slot: &FdSlot) -> io::Result<()> {
        if slot.poller.load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let _guard = slot.lock();
        if slot.poller.load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let generation = slot.generation.load(Ordering::Acquire);
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        match self
            .epoll
            .add(fd, events, (generation as u64) << 32 | fd as u32 as u64)
        {
            Ok(()) => {}
            // Registered earlier under this number by a path that did not go
            // through `close_fd` (the fd was closed by other code): replace.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                self.epoll.delete(fd);
                self.epoll
                    .add(fd, events, (generation as u64) << 32 | fd as u32 as u64)?;
            }
            // A regular file: epoll cannot wait on it, and it is always ready.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Err(e),
            Err(e) => return Err(e),
        }
        slot.poller.store(self.id, Ordering::Release);
        self.registered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Registers an fd Spindle does not own (the `io` integration API):
    /// other code may have closed it, and the number been reused, without
    /// telling us — the kernel then dropped the old registration. So this
    /// re-adds on every call; `EEXIST` means it is still registered.
    pub(crate) fn register_foreign(&self, fd: RawFd, slot: &FdSlot) -> io::Result<()> {
        let mut waiters = slot.lock();
        let generation = slot.generation.load(Ordering::Acquire);
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        match self
            .epoll
            .add(fd, events, (generation as u64) << 32 | fd as u32 as u64)
        {
            Ok(()) => {
                // A fresh registration: edges banked for an earlier file
                // under this number are not this file's.
                waiters.bits = 0;
                if slot.poller.swap(self.id, Ordering::AcqRel) == 0 {
                    self.registered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn has_registrations(&self) -> bool {
        self.registered.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn try_lease(&self) -> bool {
        !self.lease.load(Ordering::Relaxed)
            && self
                .lease
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    pub(crate) fn release_lease(&self) {
        self.lease.store(false, Ordering::Release);
    }

    /// Wakes the lease holder out of `epoll_wait`.
    pub(crate) fn notify(&self) {
        self.wake.notify();
    }

    /// Waits for events (the caller holds the lease) and delivers them to
    /// the fd slots, which wake their waiters. Returns how many fd events
    /// were delivered.
    pub(crate) fn poll(
        &self,
        events: &mut Vec<libc::epoll_event>,
        timeout: Option<Duration>,
    ) -> usize {
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
        };
        let n = self.epoll.wait(events, ms);
        let mut delivered = 0;
        for ev in &events[..n] {
            let tag = ev.u64;
            if tag == WAKE_TAG {
                self.wake.drain();
                continue;
            }
            let fd = (tag & 0xffff_ffff) as u32 as i32;
            let generation = (tag >> 32) as u32;
            let flags = ev.events as i32;
            let mut dirs = 0;
            if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                dirs |= READ;
            }
            if flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                dirs |= slot::READ_CLOSED;
            }
            if flags & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                dirs |= WRITE;
            }
            if let Some(slot) = slot::slot(fd) {
                slot.deliver(generation, dirs);
                delivered += 1;
            }
        }
        delivered
    }

    fn deregister(&self, fd: RawFd) {
        self.epoll.delete(fd);
        self.registered.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Closes `fd` through the netpoller: deregisters it, wakes every waiter
/// with an error, resets its slot, then closes it.
pub(crate) fn close_fd(fd: RawFd) {
    release_fd(fd);
    // SAFETY: the caller owns `fd` and gives it up here.
    unsafe { libc::close(fd) };
}

/// Takes `fd` out of the netpoller without closing it (the fd is handed to
/// other code): deregisters it and resets its slot, waking any waiter.
pub(crate) fn release_fd(fd: RawFd) {
    if let Some(slot) = slot::slot(fd) {
        let owner = slot.poller.load(Ordering::Acquire);
        if owner != 0 {
            if let Some(poller) = poller_by_id(owner) {
                poller.deregister(fd);
            }
        }
        slot.close();
    }
}

/// [`release_fd`] for an fd that may never have been waited on: nothing
/// to do unless a poller registered it (every waiter registers first).
pub(crate) fn release_fd_if_known(fd: RawFd) {
    if let Some(slot) = slot::slot_if_allocated(fd) {
        if slot.poller.load(Ordering::Acquire) != 0 {
            release_fd(fd);
        }
    }
}

/// Pollers by id, so `close_fd` can deregister from the right one. Runtimes
/// add theirs when built and remove it when dropped.
static POLLERS: Mutex<Vec<(u64, std::sync::Weak<Poller>)>> = Mutex::new(Vec::new());

pub(crate) fn publish(poller: &std::sync::Arc<Poller>) {
    let mut all = POLLERS.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, w)| w.strong_count() > 0);
    all.push((poller.id, std::sync::Arc::downgrade(poller)));
}

fn poller_by_id(id: u64) -> Option<std::sync::Arc<Poller>> {
    if let Some(bg) = BACKGROUND.get() {
        if bg.poller.id == id {
            return Some(bg.poller.clone());
        }
    }
    let all = POLLERS.lock().unwrap_or_else(|e| e.into_inner());
    all.iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, w)| w.upgrade())
}

/// The process's fallback poller and timers, for futures polled off the
/// workers. Started on first use.
pub(crate) struct Background {
    pub(crate) poller: std::sync::Arc<Poller>,
    timers: Mutex<TimerHeap>,
}

static BACKGROUND: OnceLock<&'static Background> = OnceLock::new();

pub(crate) fn background() -> &'static Background {
    BACKGROUND.get_or_init(|| {
        let bg: &'static Background = Box::leak(Box::new(Background {
            poller: std::sync::Arc::new(
                Poller::new().expect("spindle: cannot create an epoll instance"),
            ),
            timers: Mutex::new(TimerHeap::default()),
        }));
        std::thread::Builder::new()
            .name("spindle-background-poller".into())
            .spawn(move || bg.run())
            .expect("spindle: cannot start the background poller thread");
        bg
    })
}

impl Background {
    /// Arms a timer that wakes the waker in `slot` at `deadline`.
    pub(crate) fn arm(&self, deadline: Instant, slot: std::sync::Arc<timer::TimerSlot>) {
        let mut t = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        let earlier = t.next_deadline().is_none_or(|d| deadline < d);
        t.arm(deadline, TimerTarget::Waker(slot));
        drop(t);
        if earlier {
            self.poller.notify();
        }
    }

    fn run(&self) {
        let mut events = Vec::with_capacity(256);
        let mut wakers = Vec::new();
        loop {
            let timeout = {
                let mut t = self.timers.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                t.fire_due(now, |_| 0, &mut wakers);
                t.next_deadline().map(|d| d.saturating_duration_since(now))
            };
            // Woken with the lock released: a waker may arm a timer.
            for w in wakers.drain(..) {
                crate::loud::wake_caught(w, "a timer fired");
            }
            self.poller.poll(&mut events, timeout);
        }
    }
}
