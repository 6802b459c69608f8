//! The loop: pick the oldest runnable head, resume it, file it.
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Worker, BATCH, SHED_EVERY};
use crate::fiber::{self, FiberRef, Outcome};
use crate::sched::queue::{Entry, NO_STAMP};

impl Worker {
    pub(super) fn run_loop(&self) {
        loop {
            if self.sched.is_shutdown() {
                return;
            }
            if self.sched.is_cancelling() && !self.shared().cancelled_all.load(Ordering::Relaxed) {
                self.cancel_all();
            }
            let gen = self.sched.dump_gen.load(Ordering::Relaxed);
            if gen != self.dump_answered.get() {
                self.answer_dump(gen);
            }
            self.timers_per_dispatch();
            if let Some(entry) = self.next() {
                self.dispatch(entry.fiber);
                let n = self.dispatches.get() + 1;
                self.dispatches.set(n);
                if n.is_multiple_of(16) {
                    self.tick();
                    if n.is_multiple_of(SHED_EVERY) {
                        self.shared().dispatches.store(n, Ordering::Relaxed);
                        self.shed();
                    }
                }
                continue;
            }
            // Nothing queued: timers due by now, then others' work. (The
            // coarse bound again, not the precise clock: going to sleep
            // reads that, and a sleep's timeout ends at the next deadline.)
            if self.timers_per_dispatch() > 0 || self.steal() {
                continue;
            }
            self.sleep();
        }
    }

    /// The oldest runnable entry among the local queue, the inbox and the
    /// global queue.
    fn next(&self) -> Option<Entry> {
        self.with_local(|local| {
            let local_head = local.head_stamp();
            let inbox = &self.shared().inbox;
            let inbox_head = inbox.head_stamp();
            let global_head = self.sched.global.head_stamp();
            if global_head != NO_STAMP {
                // The global queue is stamped on a clock of its own: what
                // this worker queues from now on goes behind its head.
                self.sched.catch_up(self.index, global_head + 1);
            }
            if local_head <= inbox_head && local_head <= global_head {
                return local.pop();
            }
            self.state.with(|s| {
                let batch = &mut s.batch;
                if inbox_head <= global_head {
                    inbox.take_not_newer(local_head.min(global_head), BATCH, batch);
                } else {
                    let fair_share = self.sched.global.len() / self.sched.workers.len() + 1;
                    self.sched.global.take_not_newer(
                        local_head.min(inbox_head),
                        fair_share.min(BATCH),
                        batch,
                    );
                    self.sched.global_catch_up(self.index);
                }
                local.prepend(batch);
            });
            local.pop()
        })
    }

    /// `yield_now` without a switch, when a switch would change nothing: no
    /// other fiber is runnable here (local queue, inbox and global queue are
    /// empty) and the loop has no duty due (no timers armed, not the 16th
    /// dispatch that polls the netpoller, no shutdown, cancellation, dump
    /// request or stall mark). Counts as a dispatch, so the loop's cadence
    /// and the watchdog see the same progress as after a switch. False:
    /// the caller switches to the loop as usual.
    ///
    /// Called by the running fiber of this worker.
    pub(super) fn yield_in_place(&self) -> bool {
        let n = self.dispatches.get() + 1;
        let shared = self.shared();
        if n.is_multiple_of(16)
            || self.sched.is_shutdown()
            || self.sched.is_cancelling()
            || self.sched.dump_gen.load(Ordering::Relaxed) != self.dump_answered.get()
            || shared.local.stalled.load(Ordering::Relaxed)
            || shared.inbox.head_stamp() != NO_STAMP
            || self.sched.global.head_stamp() != NO_STAMP
            || !self.state.with(|s| s.timers.is_empty())
            || self.with_local(|local| local.len() != 0)
        {
            return false;
        }
        self.dispatches.set(n);
        shared.dispatch_seq.store(n, Ordering::Relaxed);
        true
    }

    /// Runs one fiber until it switches back, then files it.
    fn dispatch(&self, fiber: FiberRef) {
        let header = &fiber.header;
        if !header.is_started() {
            header.owner.store(self.index, Ordering::Release);
            let prepared = self.state.with(|s| {
                // SAFETY: this worker now owns the unstarted fiber and runs
                // no fiber meanwhile (we are in the loop, between resumes).
                let prepared = unsafe { fiber::prepare(&fiber, &mut s.pool) };
                if prepared {
                    s.live.insert(fiber.clone());
                }
                prepared
            });
            if !prepared {
                // No stack: drop the closure (user code) outside the borrow.
                fiber.body.discard();
                self.retire(&fiber, None);
                return;
            }
        }
        self.current.set(&fiber);
        let shared = self.shared();
        let seq = self.dispatches.get();
        shared.dispatch_seq.store(seq, Ordering::Relaxed);
        shared.running_fiber.store(header.id, Ordering::Relaxed);
        shared
            .running_header
            .store(std::ptr::from_ref(header).cast_mut(), Ordering::Release);
        // While the fiber runs, the local queue's lock is free: the fiber's
        // own wakes and spawns take it, and so may a thief if the fiber
        // blocks this thread in a call (the stall detector marks us).
        self.loop_holds.set(false);
        shared.local.leave();
        // SAFETY: this worker is the fiber's owner (just claimed, or it was
        // queued here because it is), the fiber is not queued elsewhere
        // (one token holder schedules it), and we are not on a fiber.
        let outcome = unsafe { fiber::resume(&fiber) };
        shared.local.enter();
        self.loop_holds.set(true);
        self.current.set(std::ptr::null());
        shared.running_fiber.store(0, Ordering::Relaxed);
        shared
            .running_header
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        if shared.local.stalled.load(Ordering::Relaxed) {
            shared.local.stalled.store(false, Ordering::Relaxed);
        }
        // The dispatch's last sequence number: `yield_in_place` moves it on
        // while the fiber runs, and a stall after such a yield was reported
        // under the newer number.
        let seq = shared.dispatch_seq.load(Ordering::Relaxed);
        if shared.stalled_seq.load(Ordering::Relaxed) == seq {
            self.report_stall(&fiber);
        }
        match outcome {
            Outcome::Yielded => self.requeue(fiber, true),
            Outcome::Parked => {
                if !header.finish_park() {
                    // Woken between its switch and now: run it again.
                    self.requeue(fiber, false);
                }
            }
            Outcome::Finished(stack) => {
                let entry = self.state.with(|s| s.live.remove(&fiber));
                drop(entry);
                self.retire(&fiber, stack);
            }
        }
    }

    /// Queues a fiber that switched back runnable: it yielded, or it was
    /// woken between its park and the loop's `finish_park`.
    fn requeue(&self, fiber: FiberRef, yielded: bool) {
        let stamp = self.stamp();
        let len = self.with_local(|local| {
            local.push(Entry {
                stamp,
                fiber,
                yielded,
            });
            local.published_len()
        });
        self.shared().local_len.store(len, Ordering::Relaxed);
    }

    /// Files a finished fiber: its stack to the pool, the counters, then
    /// its joiner (last, so a woken joiner sees the counters).
    fn retire(&self, fiber: &FiberRef, stack: Option<crate::fiber::stack::FiberStack>) {
        if crate::fiber::wait::drop_timer_entry(fiber) {
            self.state.with(|s| {
                s.timers.note_dead();
                self.publish_timer_entries(s.timers.len());
            });
        }
        if let Some(stack) = stack {
            let pooled = self.state.with(|s| {
                s.pool.put(stack);
                s.pool.len()
            });
            self.shared().stacks_pooled.store(pooled, Ordering::Relaxed);
        }
        if fiber.header.state() & crate::fiber::state::CANCELLED != 0 && self.sched.is_cancelling()
        {
            self.sched.stopped.fetch_add(1, Ordering::Relaxed);
        }
        self.count_finished();
        if self.sched.is_cancelling() {
            self.sched.note_finished_while_cancelling();
        }
        fiber::complete(fiber, false);
    }

    /// Busy-worker duties, every 16 dispatches: fire due timers, and poll
    /// the netpoller without blocking at most once per `poll::CADENCE`.
    fn tick(&self) {
        let no_timers = self.state.with(|s| s.timers.is_empty());
        let poller = &self.sched.poller;
        if no_timers && !poller.has_registrations() {
            return;
        }
        // One reading of the clock serves the timers and the cadence.
        let real = Instant::now();
        self.fire_timers(self.sched.time.now_given_real(real));
        if poller.has_registrations()
            && real.duration_since(self.last_poll.get()) >= crate::poll::CADENCE
        {
            self.last_poll.set(real);
            if poller.try_lease() {
                self.poll_events(Some(std::time::Duration::ZERO));
                poller.release_lease();
            }
        }
    }

    /// Polls the netpoller, whose lease the caller holds, and delivers what
    /// is ready. The event buffer is taken out of the loop state meanwhile:
    /// delivery wakes wakers, which are user code.
    pub(super) fn poll_events(&self, timeout: Option<std::time::Duration>) {
        let mut events = self.state.with(|s| std::mem::take(&mut s.events));
        self.sched.poller.poll(&mut events, timeout);
        self.state.with(|s| s.events = events);
    }

    /// Fires this worker's due timers; returns how many fiber waits ended
    /// or wakers were woken.
    ///
    /// A fiber whose timer fired enters the service order by its deadline,
    /// not by the moment the loop noticed: it gets the stamp the clock had
    /// at the last dispatch before the deadline (`timer_sample`), so it runs
    /// ahead of every fiber queued after its deadline — a 10 ms sleep among
    /// yielders waits for the fiber running at its deadline, not for a pass.
    pub(super) fn fire_timers(&self, now: Instant) -> usize {
        // The common case, at every dispatch: something armed, nothing due.
        match self.state.with(|s| s.timers.next_deadline()) {
            None => return 0,
            Some(earliest) if earliest > now => {
                self.timer_sample.set((now, self.current_stamp()));
                return 0;
            }
            Some(_) => {}
        }
        let (sampled_at, sampled_stamp) = self.timer_sample.get();
        let head = self.with_local(|local| local.head_stamp());
        let mut wakers = Vec::new();
        // Ending a fiber's wait only queues the fiber (the local queue is
        // not in the loop state); wakers are user code, woken after.
        let ended = self.state.with(|s| {
            let ended = s.timers.fire_due(
                now,
                |deadline| {
                    if deadline >= sampled_at {
                        sampled_stamp
                    } else {
                        // Overdue by more than one dispatch: next in line.
                        sampled_stamp.min(head)
                    }
                },
                &mut wakers,
            );
            self.publish_timer_entries(s.timers.len());
            ended
        });
        self.timer_sample.set((now, self.current_stamp()));
        let fired = ended + wakers.len();
        for w in wakers {
            crate::loud::wake_caught(w, "a timer fired");
        }
        fired
    }

    /// Per dispatch: fire the timers that are due (cheap when none are
    /// armed: one emptiness check; cheap too while the earliest is surely
    /// not due, by the coarse clock's bound, `time_source`). Returns what
    /// [`fire_timers`](Self::fire_timers) does.
    ///
    /// Where the precise clock would be read, a reading the fiber just
    /// parked lent (`reading_at_park`: a sleep's start, a few hundred
    /// nanoseconds old) stands in for it: never later than the clock, so no
    /// timer fires early, and late only by those nanoseconds. A 1 ms sleep
    /// is within the coarse bound's margin, so without it every dispatch of
    /// a sleeper read the clock twice, its own and this.
    #[inline]
    fn timers_per_dispatch(&self) -> usize {
        let lent = self.reading_at_park.take();
        let Some(earliest) = self.state.with(|s| s.timers.next_deadline()) else {
            return 0;
        };
        if let Some(ahead) = self.sched.time.not_yet_reached() {
            if ahead < earliest {
                // Nothing due. The sample's time is the bound: a timer it
                // is taken before is one whose deadline is past the bound
                // (`fire_timers`), which holds for every entry armed now.
                self.timer_sample.set((ahead, self.current_stamp()));
                return 0;
            }
        }
        self.fire_timers(lent.unwrap_or_else(|| self.sched.time.now()))
    }
}
