//! The reactor thread: its poller slots and timers ([`Core`]) and the run loop ([`Reactor`]).
//!
//! Normal operation: one iteration reads the clock once, polls every poller, fires due timers
//! (at most [`super::TIMER_BATCH`]), handles up to [`super::CONTROL_BATCH`] control messages and
//! counts the iteration busy or idle; idle iterations back off if configured, arming the doorbell
//! and re-checking once before a park. In interrupt mode the pollers arm their own wake-up
//! descriptors along with the doorbell ([`Core::arm_wakeups`]) and the sleep is a `poll(2)` on
//! all of them. The data path (poll, timers, counters) does not allocate.
//!
//! Recovery: on stop every poller gets `shutdown` once and is polled until drained or the drain
//! timeout passes; the gate is closed (also when the thread panics, [`CloseOnExit`]) and the
//! control ring drained until no sender is in flight, so every accepted message is handled once.

use super::{
    Clock, Control, Gate, Poller, PollerCtx, PollerId, ReactorCtx, TimerKey, CONTROL_BATCH,
    TIMER_BATCH,
};
use crate::backoff::{Backoff, IdleAction};
use crate::doorbell::Doorbell;
use crate::mpsc::MpscConsumer;
use crate::sched::RtThread;
use crate::stats::StatsWriter;
use crate::timer::TimerWheel;
use crate::wait::WaitSet;
use core::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Closes the gate when the reactor thread ends, however it ends.
pub(super) struct CloseOnExit(pub(super) Arc<Gate>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        // SeqCst: pairs with the senders' SeqCst load of `closed` in `ReactorHandle::send`.
        self.0.closed.store(true, Ordering::SeqCst);
    }
}

/// One poller slot.
pub(super) struct Slot {
    pub(super) gen: u32,
    pub(super) poller: Option<Box<dyn Poller>>,
    /// `shutdown` was called; remove once drained.
    pub(super) draining: bool,
}

/// The reactor state the pollers and control closures act on.
pub(super) struct Core {
    pub(super) index: usize,
    pub(super) pollers: Vec<Slot>,
    /// Free slot indices; its capacity always covers `pollers.len()`, so removing never
    /// allocates.
    pub(super) free_slots: Vec<u32>,
    pub(super) live: usize,
    pub(super) timers: TimerWheel<TimerKey>,
    pub(super) stats: StatsWriter,
    pub(super) stopping: bool,
    pub(super) now: u64,
    /// The reactor's doorbell (back-off on only).
    pub(super) bell: Option<Arc<Doorbell>>,
}

impl Core {
    /// Adds a poller (control path: may allocate).
    pub(super) fn add(&mut self, mut p: Box<dyn Poller>) -> PollerId {
        let draining = self.stopping;
        if draining {
            p.shutdown(self.now);
        }
        let slot = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                self.pollers.push(Slot {
                    gen: 0,
                    poller: None,
                    draining: false,
                });
                let n = self.pollers.len();
                self.free_slots
                    .reserve(n.saturating_sub(self.free_slots.len()));
                (n - 1) as u32
            }
        };
        let s = &mut self.pollers[slot as usize];
        s.poller = Some(p);
        s.draining = draining;
        self.live += 1;
        self.stats.set_pollers(self.live as u64);
        PollerId { slot, gen: s.gen }
    }

    /// Takes a poller out of its slot (no allocation); `None` if the id is stale.
    pub(super) fn take(&mut self, id: PollerId) -> Option<Box<dyn Poller>> {
        let s = self.pollers.get_mut(id.slot as usize)?;
        if s.gen != id.gen {
            return None;
        }
        let p = s.poller.take()?;
        s.gen = s.gen.wrapping_add(1);
        s.draining = false;
        self.free_slots.push(id.slot);
        self.live -= 1;
        self.stats.set_pollers(self.live as u64);
        Some(p)
    }

    /// Polls every poller once; returns the work they report.
    fn poll_all(&mut self, now: u64) -> usize {
        let mut work = 0usize;
        for i in 0..self.pollers.len() {
            let s = &mut self.pollers[i];
            let gen = s.gen;
            let Some(p) = s.poller.as_mut() else { continue };
            let mut cx = PollerCtx {
                now,
                reactor: self.index,
                id: PollerId {
                    slot: i as u32,
                    gen,
                },
                stopping: self.stopping,
                finished: false,
                timers: &mut self.timers,
                bell: self.bell.as_ref(),
            };
            work = work.saturating_add(p.poll(now, &mut cx));
            if cx.finished {
                let id = cx.id;
                drop(self.take(id));
            }
        }
        work
    }

    /// Fires up to [`TIMER_BATCH`] due timers; returns how many fired.
    fn run_timers(&mut self, now: u64) -> usize {
        if self.timers.is_empty() {
            return 0;
        }
        let mut due = [TimerKey::default(); TIMER_BATCH];
        let mut n = 0;
        self.timers.expire_max(now, TIMER_BATCH, |k| {
            due[n] = k;
            n += 1;
        });
        for k in &due[..n] {
            let Some(s) = self.pollers.get_mut(k.poller.slot as usize) else {
                continue;
            };
            if s.gen != k.poller.gen {
                continue; // the poller that armed it is gone
            }
            let Some(p) = s.poller.as_mut() else { continue };
            let mut cx = PollerCtx {
                now,
                reactor: self.index,
                id: k.poller,
                stopping: self.stopping,
                finished: false,
                timers: &mut self.timers,
                bell: self.bell.as_ref(),
            };
            p.on_timer(k.token, &mut cx);
            if cx.finished {
                drop(self.take(k.poller));
            }
        }
        n
    }

    /// Interrupt mode, before the re-check: collects the doorbell's eventfd and every
    /// descriptor the pollers arm into `waits`; whether every poller armed all its sources.
    fn arm_wakeups(&mut self, waits: &mut WaitSet) -> bool {
        waits.clear();
        if let Some(fd) = self.bell.as_ref().and_then(|b| b.fd()) {
            waits.add(fd);
        }
        let mut all = true;
        for s in &mut self.pollers {
            if let Some(p) = s.poller.as_mut() {
                all &= p.arm_wakeups(waits);
            }
        }
        all
    }

    /// Starts stopping: every poller gets `shutdown` once.
    fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let now = self.now;
        for s in &mut self.pollers {
            if let Some(p) = s.poller.as_mut() {
                p.shutdown(now);
                s.draining = true;
            }
        }
    }

    /// Removes the pollers that finished draining.
    fn reap_drained(&mut self) {
        for i in 0..self.pollers.len() {
            let s = &self.pollers[i];
            let done = s.draining && s.poller.as_ref().is_some_and(|p| p.is_drained());
            if done {
                let id = PollerId {
                    slot: i as u32,
                    gen: s.gen,
                };
                drop(self.take(id));
            }
        }
    }

    /// Handles one control message.
    fn handle(&mut self, msg: Control) {
        match msg {
            Control::Run(f) => f(&mut ReactorCtx { core: self }),
            Control::AddPoller(p) => {
                self.add(p);
            }
            Control::Stop => self.begin_stop(),
        }
    }
}

/// One reactor thread's state.
pub(super) struct Reactor {
    pub(super) core: Core,
    pub(super) rx: MpscConsumer<Control>,
    pub(super) gate: Arc<Gate>,
    pub(super) backoff: Backoff,
    /// Interrupt mode: the descriptors of the next sleep.
    pub(super) waits: WaitSet,
    /// Interrupt mode: every poller armed all its sources for the next sleep.
    pub(super) all_armed: bool,
    /// Real-time wake-ups (set on the thread as it starts).
    pub(super) rt: RtThread,
    pub(super) clock: Clock,
    pub(super) drain_timeout_ns: u64,
}

impl Reactor {
    /// The run loop; returns when stopped and drained.
    pub(super) fn run(&mut self) {
        let mut stop_deadline = u64::MAX;
        // The doorbell is armed: this iteration is the re-check before a sleep.
        let mut armed = false;
        loop {
            let now = self.clock.now();
            self.core.now = now;
            let work = self.core.poll_all(now);
            let fired = self.core.run_timers(now);
            let mut ctrl = 0;
            while ctrl < CONTROL_BATCH {
                let Some(msg) = self.rx.dequeue() else { break };
                self.core.handle(msg);
                ctrl += 1;
            }
            let busy = work > 0 || fired > 0 || ctrl > 0;
            let st = &self.core.stats;
            st.iteration(busy);
            st.work_items(work as u64);
            st.timer_expiries(fired as u64);
            st.control_messages(ctrl as u64);
            if self.core.stopping {
                if stop_deadline == u64::MAX {
                    // From now, not from the start of this iteration.
                    stop_deadline = self.clock.now().saturating_add(self.drain_timeout_ns);
                }
                self.core.reap_drained();
                if self.core.live == 0 || now >= stop_deadline {
                    break;
                }
            }
            if busy {
                if self.rt.busy(now) {
                    self.core.stats.rt_demotion();
                }
                self.backoff.reset();
                if armed {
                    armed = false;
                    if let Some(b) = &self.core.bell {
                        b.disarm();
                    }
                }
            } else if self.backoff.is_enabled() {
                self.idle(now, &mut armed);
            }
        }
        self.close();
    }

    /// One idle iteration with back-off on. Before the first sleep of an idle stretch it only
    /// arms the doorbell (and, in interrupt mode, the pollers' wake-up sources), so the next
    /// iteration is the re-check (see [`Doorbell::arm`]); a sleep then lasts until the bell
    /// rings, an unpark, a wake-up descriptor, the next timer, or the back-off's sleep.
    fn idle(&mut self, now: u64, armed: &mut bool) {
        let interrupt = self.backoff.config().interrupt;
        if self.rt.is_fifo() {
            // Real-time: no spinning (see `crate::sched`).
            self.backoff.skip_to_sleep();
        }
        if let (Some(b), false, true) = (&self.core.bell, *armed, self.backoff.sleeps_next()) {
            b.arm();
            if interrupt {
                self.all_armed = self.core.arm_wakeups(&mut self.waits);
            }
            *armed = true;
            return;
        }
        match self.backoff.next_action() {
            IdleAction::Spin => core::hint::spin_loop(),
            IdleAction::Yield => {
                std::thread::yield_now();
                self.core.stats.idle_yield();
            }
            IdleAction::Sleep(d) => {
                let d = if interrupt && *armed && self.all_armed {
                    super::ARMED_SLEEP_NS
                } else {
                    d
                };
                let cap = self.core.timers.next_deadline();
                let d = cap.map_or(d, |t| d.min(t.saturating_sub(now)));
                if d == 0 {
                    std::thread::yield_now();
                    self.core.stats.idle_yield();
                } else {
                    let t = Duration::from_nanos(d);
                    // Counted as it begins (readers see a reactor that is asleep as such).
                    self.core.stats.idle_sleep();
                    self.rt.sleeping();
                    match &self.core.bell {
                        Some(b) if interrupt && *armed => {
                            if self.waits.wait(d) > 0 {
                                self.core.stats.idle_wakeup();
                            }
                            b.consume();
                        }
                        Some(b) => b.park(Some(t)),
                        None => std::thread::park_timeout(t),
                    }
                    if self.rt.is_on() {
                        self.rt.woke(self.clock.now());
                    }
                }
            }
        }
        if core::mem::take(armed) {
            if let Some(b) = &self.core.bell {
                b.disarm();
            }
        }
    }

    /// Closes the gate and handles every message a sender managed to enqueue, then drops the
    /// remaining pollers.
    fn close(&mut self) {
        // SeqCst: pairs with the senders' SeqCst `inflight` increment and `closed` load in
        // `ReactorHandle::send` (Dekker handshake).
        self.gate.closed.store(true, Ordering::SeqCst);
        loop {
            self.drain_all();
            // SeqCst: see above; it also acquires the senders' Release decrement, so their
            // enqueues are visible to the drain below.
            if self.gate.inflight.load(Ordering::SeqCst) == 0 {
                self.drain_all();
                break;
            }
            std::thread::yield_now();
        }
        // Pollers that did not drain in time are dropped here.
        for i in 0..self.core.pollers.len() {
            let gen = self.core.pollers[i].gen;
            drop(self.core.take(PollerId {
                slot: i as u32,
                gen,
            }));
        }
    }

    /// Handles every queued message; returns how many.
    fn drain_all(&mut self) -> usize {
        let mut n = 0;
        while let Some(msg) = self.rx.dequeue() {
            match msg {
                // A poller arriving now is shut down and dropped at once.
                Control::AddPoller(mut p) => p.shutdown(self.core.now),
                other => self.core.handle(other),
            }
            n += 1;
        }
        self.core.stats.control_messages(n as u64);
        n
    }
}
