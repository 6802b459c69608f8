//! Nothing to run: spin briefly if in a ping-pong, then sleep — in
//! `epoll_wait` holding the poller's lease, or on the thread parker — until
//! woken or the next timer is due (`docs/DESIGN.md`, "Sleeping and
//! spinning").
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use super::{Worker, SHORT_SLEEP_US, SPIN_US};
use crate::sched::sleep_word::{full_fence, POLLING, SLEEPING};

impl Worker {
    /// Nothing to run: block in `epoll_wait` (holding the poller's lease)
    /// or on the thread parker, until woken or the next timer is due.
    pub(super) fn sleep(&self) {
        // Spin before parking (`docs/DESIGN.md`, "Sleeping and spinning"),
        // only when the last sleep was cut
        // short by a wake — a closed loop with another thread, where a
        // sleep/wake costs tens of µs of wake-up latency. An idle worker's
        // sleeps are long, so it does not spin and burns nothing. The spin
        // watches the queues other threads feed. A lone worker spins only
        // if that is where its last short sleep's wake came from (a fiber
        // of another runtime, a blocking-pool job): when its work comes
        // from the netpoller or timers, which no spin here sees, it goes
        // straight to sleep.
        if self.last_sleep_short.get() && self.spin_for_work() {
            return;
        }
        // The precise clock is read twice per sleep: here, and on waking
        // from the netpoller (`sleep_inner`). A read is 25–50 ns in a VM, and
        // a lightly loaded server sleeps every few requests; the sleep's
        // other needs of the time (the stack pool's trim, settling timers,
        // the poll's timeout) take this reading.
        let slept_at = Instant::now();
        let woke_at = self.sleep_inner(slept_at);
        let spin_sees_it = self.sched.workers.len() > 1 || self.pushed_work();
        // How long the sleep was matters only if a spin could have seen
        // what ended it.
        let short = spin_sees_it
            && woke_at
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(slept_at)
                < std::time::Duration::from_micros(SHORT_SLEEP_US);
        self.last_sleep_short.set(short);
    }

    /// Whether the shared queues the spin watches hold work.
    fn pushed_work(&self) -> bool {
        self.shared().inbox.head_stamp() != crate::sched::queue::NO_STAMP
            || self.sched.global.head_stamp() != crate::sched::queue::NO_STAMP
    }

    /// Watches the shared queues and the mailbox for up to `SPIN_US`; true
    /// if work came. Not at all when the CPU would be taken from someone
    /// who needs it (`spin.rs`).
    fn spin_for_work(&self) -> bool {
        let Some(_permit) = super::spin::SpinPermit::try_take() else {
            return false;
        };
        // Open while spinning: a waker on another thread hands its fiber
        // over in one line instead of through the inbox (`sched::mailbox`).
        // Every way out below takes or closes it.
        let mailbox = &self.shared().mailbox.0;
        let open = mailbox.open();
        // The spin's clock starts at its first reading, 64 looks in: not
        // read before the first looks, where a hand-over is likeliest.
        let mut start = None;
        let mut looks = 0u32;
        let came = loop {
            // One pause between looks: a `pause` costs 25-40 ns on current
            // x86 cores (~26 ns on this project's AMD EPYC test VM), and
            // what a hand-over waits for its look is a hop's latency. With
            // 64 the spinner looked every ~1.5 µs and a round trip across
            // workers cost 2.4 µs; with 4, ~0.56 µs; with 1, ~0.46
            // (`bench/RESULTS.md`). The look is loads of lines nobody
            // writes until they hand work over, so looking often costs
            // the pushers nothing.
            std::hint::spin_loop();
            if open {
                if let Some(fiber) = mailbox.take() {
                    self.queue_handed_over(fiber);
                    return true;
                }
            }
            // Queue heads only (atomics, no lock); shutdown and dump
            // requests are seen by the full check before the real sleep.
            if self.pushed_work() {
                break true;
            }
            // The clock every 64th look (every ~2 µs of a 30 µs spin): a
            // read costs as much as a look.
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(64)
                && start.get_or_insert_with(Instant::now).elapsed()
                    >= std::time::Duration::from_micros(SPIN_US)
            {
                break false;
            }
        };
        if open {
            if let Some(fiber) = mailbox.close() {
                self.queue_handed_over(fiber);
                return true;
            }
        }
        came
    }

    /// Queues a fiber a waker handed over through the mailbox, as a wake
    /// made here would be: a fresh stamp, at the back of the local queue.
    fn queue_handed_over(&self, fiber: crate::fiber::FiberRef) {
        let stamp = self.stamp();
        self.with_local(|local| local.push(crate::sched::queue::Entry::new(stamp, fiber)));
    }

    /// Sleeps until woken or the next timer is due; `now` is the precise
    /// clock read just before. Returns the clock read on waking from the
    /// netpoller, if it was read.
    fn sleep_inner(&self, mut now: Instant) -> Option<Instant> {
        let time = &self.sched.time;
        let paused = time.is_paused();
        let next_deadline = self.state.with(|s| {
            // A trim that did its work (once a second at most) took time:
            // the timeout below is measured from after it.
            if s.pool.trim(now) {
                now = Instant::now();
            }
            // Kept entries moved only if due soon, except on a paused clock
            // (`poll::timer`).
            let move_until = (!paused).then(|| now + crate::poll::timer::SETTLE_AHEAD);
            s.timers.settle(move_until);
            self.publish_timer_entries(s.timers.len());
            s.timers.next_deadline()
        });
        // On a paused clock no real wait ends at a timer: the clock moves by
        // `advance` or the auto-advance below. The deadline is published
        // before this worker counts itself a sleeper (`time_source`).
        let next_deadline = if paused {
            self.shared()
                .next_deadline
                .store(time.encode(next_deadline), Ordering::SeqCst);
            None
        } else {
            next_deadline
        };
        // From `now`, read a moment ago: at most that moment late, never
        // early (and the poll rounds it up to a millisecond).
        let timeout = next_deadline.map(|d| d.saturating_duration_since(now));
        let poller = &self.sched.poller;
        let leased = poller.try_lease();
        let me = self.shared();
        let state = if leased { POLLING } else { SLEEPING };
        me.sleep.announce(state);
        self.sched.sleepers.fetch_add(1, Ordering::SeqCst);
        // The sleeper's half of the handshake (`sleep_word`): pushes made
        // before this fence are seen by the checks below; pushes after it
        // see the announcement and wake us.
        full_fence();
        // A waker called on this thread (a timer that woke a future) pushes
        // to the local queue, which no other thread's wake would announce.
        let local_work = self.with_local(|local| local.len() > 0);
        if local_work
            || self.sched.has_visible_work(self.index)
            || self.stealable_elsewhere()
            || (paused && self.auto_advance(leased))
        {
            self.wake_self(state);
            if leased {
                poller.release_lease();
            }
            return None;
        }
        if leased {
            self.poll_events(timeout);
            let woke_at = Instant::now();
            self.last_poll.set(woke_at);
            self.wake_self(state);
            poller.release_lease();
            // Hand the lease on: if others sleep on their parker while we go
            // back to work, one of them should be the one in epoll_wait.
            let have_work = self.with_local(|local| local.len() > 0);
            if have_work && self.sched.sleepers.load(Ordering::SeqCst) > 0 {
                self.sched.wake_one_sleeper();
            }
            Some(woke_at)
        } else {
            let until = next_deadline;
            while me.sleep.is(SLEEPING) && !self.sched.is_shutdown() {
                match until {
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        thread::park_timeout(d - now);
                    }
                    None => thread::park(),
                }
            }
            self.wake_self(state);
            None
        }
    }

    /// A paused clock's auto-advance (`time_source`), tried by a worker
    /// that found nothing to run and counts itself a sleeper: if it is the
    /// last awake and no fiber waits on the blocking pool, poll ready I/O
    /// first (holding the lease), then jump the clock to the earliest
    /// published timer and wake the workers it is due on. True if this
    /// worker should go back to its loop instead of sleeping.
    fn auto_advance(&self, leased: bool) -> bool {
        let sched = &self.sched;
        if sched.sleepers.load(Ordering::SeqCst) < sched.workers.len()
            || sched.blocking_waits.load(Ordering::SeqCst) > 0
        {
            return false;
        }
        if leased {
            self.poll_events(Some(std::time::Duration::ZERO));
            if self.with_local(|local| local.len() > 0) || sched.has_visible_work(self.index) {
                return true;
            }
        }
        let earliest = sched
            .workers
            .iter()
            .map(|w| w.next_deadline.load(Ordering::SeqCst))
            .min()
            .unwrap_or(super::super::time_source::NO_DEADLINE);
        let Some(to) = sched.time.decode(earliest) else {
            return false; // no timer anywhere: sleep until I/O or a push
        };
        sched.time.advance_to(to);
        let mut mine = false;
        for (i, w) in sched.workers.iter().enumerate() {
            if w.next_deadline.load(Ordering::SeqCst) <= earliest {
                if i == self.index {
                    mine = true;
                } else {
                    sched.wake_worker(i);
                }
            }
        }
        mine
    }

    /// Leaves a sleep state this worker entered itself, unless a waker
    /// already did (and counted it).
    fn wake_self(&self, state: u8) {
        if self.shared().sleep.leave(state) {
            self.sched.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
