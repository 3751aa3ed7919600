//! Reactors: one pinned thread per core running SPDK-style pollers to completion.
//!
//! Normal operation: [`ReactorSet::start`] reads the cores the process may use (once, before
//! pinning anything), spawns one thread per chosen core and pins it. Each reactor owns a list of
//! [`Poller`]s, a control ring (MPSC, [`crate::mpsc`]), a [`TimerWheel`] and its counters
//! ([`crate::stats`]). One loop iteration: read the clock once, call every poller's
//! [`Poller::poll`], fire due timers (each goes to the poller that armed it,
//! [`Poller::on_timer`]), handle up to [`CONTROL_BATCH`] control messages, and count the iteration
//! as busy or idle. Idle iterations back off only if configured ([`BackoffConfig`]; off means pure
//! busy-polling). Before a sleep the reactor arms its [`Doorbell`] (offered to pollers through
//! [`PollerCtx::doorbell`], e.g. for a CQ's completion channel or a worker's result ring) and runs
//! one more whole iteration as the re-check; only if that finds nothing does it park, until a
//! producer rings, a control message arrives, or the next timer (sleeps stay bounded by the
//! back-off's longest sleep, for sources without a doorbell). In interrupt mode
//! ([`BackoffConfig::interrupt`]) the doorbell is an eventfd, every poller also arms its own
//! wake-up sources before the re-check ([`Poller::arm_wakeups`]: a CQ's completion channel,
//! connection events), and the reactor sleeps in `poll(2)` on all those descriptors
//! ([`crate::wait::WaitSet`]) until one is readable or the next timer is due. Other
//! threads talk to a reactor through a [`ReactorHandle`]: add a poller, or run a closure on the
//! reactor thread with access to its [`ReactorCtx`] (boxed closures are fine there: the control
//! path is not the data path). Pollers are placed round-robin or on a chosen reactor
//! ([`Placement`]). The data path (poll, timers, counters) does not allocate.
//!
//! Recovery: a core that cannot be pinned is an error ([`ReactorError::PinFailed`]) unless the
//! configuration allows unpinned reactors; the reactors started so far are stopped again.
//! [`ReactorSet::stop`] is graceful: every poller gets [`Poller::shutdown`] once and keeps being
//! polled until [`Poller::is_drained`] (or the drain timeout passes), then is dropped. Every
//! control message whose send returned `Ok` is handled exactly once, even when it races with the
//! stop (the reactor closes its gate and drains its ring until no sender is in flight); sends
//! after that return [`ReactorError::Stopped`]. A reactor thread that panics closes its gate too,
//! and `stop` reports [`ReactorError::Panicked`].
//!
//! This file holds the public types (the [`Poller`] trait, contexts, configuration, errors,
//! [`ReactorHandle`]); [`ReactorSet`] and the core plan are in `reactor/set.rs`, the reactor
//! thread's state and run loop in `reactor/run_loop.rs`.

use crate::backoff::BackoffConfig;
use crate::doorbell::{Doorbell, Waker};
use crate::mpsc::MpscProducer;
use crate::stats::{StatsReader, StatsSnapshot};
use crate::timer::{TimerError, TimerHandle, TimerWheel};
use crate::wait::WaitSet;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

pub use core_affinity::CoreId;

mod run_loop;
mod set;

use run_loop::Core;
pub use set::ReactorSet;

/// Control messages handled per loop iteration at most.
pub const CONTROL_BATCH: usize = 64;

/// Timers fired per loop iteration at most (the rest fire in the next iterations).
pub const TIMER_BATCH: usize = 32;

/// Longest interrupt-mode sleep when every poller armed all its sources
/// ([`Poller::arm_wakeups`]): a safety net (one wake-up a second costs nothing measurable),
/// not a polling period.
pub const ARMED_SLEEP_NS: u64 = 1_000_000_000;

/// The CPU the calling thread is running on right now (`sched_getcpu`), if the OS says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// A unit of polled work (SPDK poller style): a connection, a completion queue, a ring consumer.
///
/// Pollers run on their reactor's thread only; they must never block.
pub trait Poller: Send {
    /// Does whatever work is ready without blocking and returns how many useful work items it
    /// did (0 = nothing to do). `now` is the reactor clock in ns (also `cx.now()`); `cx` arms
    /// timers and can remove the poller.
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize;

    /// A timer this poller armed (through its [`PollerCtx`]) has expired.
    fn on_timer(&mut self, _token: u64, _cx: &mut PollerCtx<'_>) {}

    /// The reactor is stopping (or the poller is being removed): stop taking new work. Called once.
    /// The poller keeps being polled until [`Poller::is_drained`].
    fn shutdown(&mut self, _now: u64) {}

    /// Whether the poller has finished its in-flight work after [`Poller::shutdown`].
    fn is_drained(&self) -> bool {
        true
    }

    /// Interrupt mode: the reactor is about to sleep in `poll(2)`. Arm every source of work
    /// that can wake the reactor through a descriptor (e.g. [`CompletionQueue::arm_notify`])
    /// and add the descriptors to `fds`. Called after the reactor armed its doorbell and before
    /// the re-check iteration, so work arriving after this call either shows in the re-check or
    /// makes a descriptor readable (or rings the doorbell). Returns whether every source of
    /// work this poller has can wake the reactor so; `false` (the default) when some source is
    /// only seen by polling, and the reactor then bounds its sleep by the back-off's longest
    /// sleep. When every poller says `true` the sleep lasts until a descriptor or the next
    /// timer, at most [`ARMED_SLEEP_NS`]. Never called while the reactor is busy.
    ///
    /// [`CompletionQueue::arm_notify`]: rpcrdma_engine::verbs::CompletionQueue::arm_notify
    fn arm_wakeups(&mut self, _fds: &mut WaitSet) -> bool {
        false
    }
}

/// Names a poller on its reactor (slot and generation; stale ids match nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PollerId {
    slot: u32,
    gen: u32,
}

/// What a reactor's timers carry: the poller that armed it and its token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TimerKey {
    poller: PollerId,
    token: u64,
}

/// What a poller can do while it is being called.
pub struct PollerCtx<'a> {
    now: u64,
    reactor: usize,
    id: PollerId,
    stopping: bool,
    finished: bool,
    timers: &'a mut TimerWheel<TimerKey>,
    bell: Option<&'a Arc<Doorbell>>,
}

impl PollerCtx<'_> {
    /// The reactor's doorbell, when it may sleep (back-off on; `None` for a busy-polling
    /// reactor, which needs no waking). Whoever hands this reactor work from another thread
    /// rings it after publishing ([`Doorbell::ring`]): a fence and a load while the reactor
    /// polls, an unpark (or an eventfd write, interrupt mode) only when it is about to sleep.
    pub fn doorbell(&self) -> Option<&Arc<Doorbell>> {
        self.bell
    }

    /// A [`Waker`] of this reactor for other threads: its doorbell, or an unpark when it has
    /// none. Call on the reactor thread.
    pub fn waker(&self) -> Waker {
        Waker::current(self.bell)
    }

    /// The reactor clock (ns) at the start of this loop iteration.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The index of the reactor running this poller.
    pub fn reactor_index(&self) -> usize {
        self.reactor
    }

    /// This poller's id.
    pub fn id(&self) -> PollerId {
        self.id
    }

    /// Whether the reactor is stopping.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Arms a timer that calls this poller's [`Poller::on_timer`] with `token` at `deadline`
    /// (reactor clock, ns). O(1), no allocation.
    pub fn arm_timer(&mut self, deadline: u64, token: u64) -> Result<TimerHandle, TimerError> {
        self.timers.arm(
            deadline,
            TimerKey {
                poller: self.id,
                token,
            },
        )
    }

    /// Cancels one of this poller's timers; `false` if the handle is stale or not ours.
    pub fn cancel_timer(&mut self, h: TimerHandle) -> bool {
        self.owns(h) && self.timers.cancel(h).is_some()
    }

    /// Moves one of this poller's timers to `deadline`; `false` if stale or not ours.
    pub fn rearm_timer(&mut self, h: TimerHandle, deadline: u64) -> bool {
        self.owns(h) && self.timers.rearm(h, deadline)
    }

    /// Removes this poller after the current call returns (it is dropped without
    /// [`Poller::shutdown`]; its pending timers are ignored when they fire).
    pub fn finish(&mut self) {
        self.finished = true;
    }

    fn owns(&self, h: TimerHandle) -> bool {
        self.timers.token(h).is_some_and(|k| k.poller == self.id)
    }
}

/// The reactor's state as seen by a control closure (on the reactor thread).
pub struct ReactorCtx<'a> {
    core: &'a mut Core,
}

impl ReactorCtx<'_> {
    /// This reactor's index in its set.
    pub fn index(&self) -> usize {
        self.core.index
    }

    /// The reactor clock (ns) at the start of this loop iteration.
    pub fn now(&self) -> u64 {
        self.core.now
    }

    /// Whether the reactor is stopping.
    pub fn is_stopping(&self) -> bool {
        self.core.stopping
    }

    /// Number of pollers on this reactor.
    pub fn poller_count(&self) -> usize {
        self.core.live
    }

    /// Adds a poller (polled from the next iteration on). While stopping, it is told to shut
    /// down at once.
    pub fn add_poller(&mut self, p: Box<dyn Poller>) -> PollerId {
        self.core.add(p)
    }

    /// Removes a poller: it gets [`Poller::shutdown`] and is dropped at once (no draining).
    /// `false` if the id is stale.
    pub fn remove_poller(&mut self, id: PollerId) -> bool {
        let now = self.core.now;
        match self.core.take(id) {
            Some(mut p) => {
                p.shutdown(now);
                true
            }
            None => false,
        }
    }
}

/// A message to a reactor.
enum Control {
    Run(Box<dyn FnOnce(&mut ReactorCtx<'_>) + Send>),
    AddPoller(Box<dyn Poller>),
    Stop,
}

/// Which reactors to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cores {
    /// One reactor per core the process may run on.
    All,
    /// This many reactors, on the first cores the process may run on.
    Count(usize),
    /// One reactor on each of these cores.
    Ids(Vec<CoreId>),
}

/// How to pin reactor threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinPolicy {
    /// Every reactor must be pinned to its core; anything else fails `start`.
    Required,
    /// Pin where possible, run unpinned otherwise (`allow_unpinned`).
    AllowUnpinned,
    /// Do not pin.
    Off,
}

/// Where to put a new poller or closure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// The next reactor in turn.
    #[default]
    RoundRobin,
    /// This reactor (index in the set).
    Reactor(usize),
}

/// Reactor set configuration.
#[derive(Clone, Debug)]
pub struct ReactorConfig {
    /// Which reactors to start.
    pub cores: Cores,
    /// How to pin them.
    pub pin: PinPolicy,
    /// Idle back-off (default off: pure busy-poll; [`BackoffConfig::interrupt`]: interrupt
    /// mode).
    pub backoff: BackoffConfig,
    /// Slots of each reactor's control ring (a power of two).
    pub control_capacity: usize,
    /// Timers each reactor can hold.
    pub timer_capacity: usize,
    /// Buckets of each reactor's timer wheel (a power of two).
    pub timer_slots: usize,
    /// Timer wheel tick (ns).
    pub timer_tick_ns: u64,
    /// How long a stopping reactor waits for its pollers to drain.
    pub drain_timeout: Duration,
    /// Thread name prefix (threads are `"{name}-{index}"`).
    pub name: String,
    /// Scheduling priority (nice value, -20..=19) each reactor thread sets for itself with
    /// `setpriority(2)` as it starts, its workers and the rest of the process unchanged. A
    /// polling thread on a core shared with busy processes is otherwise one more CPU-bound
    /// task to the scheduler, preempted mid-call and waiting a time slice for the core back
    /// (docs/performance-nfs.md, "A busy thread on the reactor's core"). Raising it needs
    /// `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows it); a reactor that cannot keeps its
    /// priority and says so ([`ReactorHandle::nice`]). `None` (default): inherit.
    pub nice: Option<i32>,
    /// Real-time wake-ups ([`crate::sched`]): with back-off on, each reactor waits for work
    /// in `SCHED_FIFO` and returns to the fair class (at [`ReactorConfig::nice`]) after a busy
    /// stretch. Needs `CAP_SYS_NICE` (or an `RLIMIT_RTPRIO` that allows the priority); a
    /// reactor that cannot stays in the fair class and says so
    /// ([`ReactorHandle::realtime`]). Ignored without back-off (a busy-polling thread never
    /// waits). `None` (default): off.
    pub realtime: Option<crate::sched::RealtimeWake>,
}

impl ReactorConfig {
    /// Defaults for `cores`: pinning required, back-off off, 1024 control slots, 4096 timers on
    /// 1024 buckets of 100 us, 1 s drain timeout.
    pub fn new(cores: Cores) -> Self {
        ReactorConfig {
            cores,
            pin: PinPolicy::Required,
            backoff: BackoffConfig::busy_poll(),
            control_capacity: 1024,
            timer_capacity: 4096,
            timer_slots: 1024,
            timer_tick_ns: 100_000,
            drain_timeout: Duration::from_secs(1),
            name: "reactor".into(),
            nice: None,
            realtime: None,
        }
    }
}

impl Default for ReactorConfig {
    fn default() -> Self {
        ReactorConfig::new(Cores::All)
    }
}

/// Reactor errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReactorError {
    /// No reactor requested.
    NoReactors,
    /// The cores the process may use could not be read while pinning is required.
    NoCoreInfo,
    /// More reactors than usable cores while pinning is required.
    NotEnoughCores {
        /// Reactors asked for.
        wanted: usize,
        /// Cores the process may use.
        available: usize,
    },
    /// The core (id) is not in the process's CPU mask while pinning is required.
    CoreNotAllowed(usize),
    /// The core (id) is listed twice.
    DuplicateCore(usize),
    /// Pinning reactor `reactor` to core `core` failed while pinning is required.
    PinFailed {
        /// Reactor index.
        reactor: usize,
        /// Core id.
        core: usize,
    },
    /// A capacity or timer setting is invalid (which one).
    BadConfig(&'static str),
    /// The OS refused to create a thread.
    Spawn,
    /// The OS refused to create the eventfd of a reactor in interrupt mode.
    EventFd,
    /// There is no reactor with this index.
    NoSuchReactor(usize),
    /// The reactor has stopped (or is stopping and has closed its control ring).
    Stopped,
    /// The reactor thread with this index panicked.
    Panicked(usize),
}

impl fmt::Display for ReactorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReactorError::NoReactors => write!(f, "no reactor requested"),
            ReactorError::NoCoreInfo => write!(f, "cannot read the usable cores to pin reactors"),
            ReactorError::NotEnoughCores { wanted, available } => write!(
                f,
                "{wanted} pinned reactors requested but only {available} cores are usable"
            ),
            ReactorError::CoreNotAllowed(c) => {
                write!(f, "core {c} is not in this process's CPU mask")
            }
            ReactorError::DuplicateCore(c) => write!(f, "core {c} is listed twice"),
            ReactorError::PinFailed { reactor, core } => {
                write!(f, "could not pin reactor {reactor} to core {core}")
            }
            ReactorError::BadConfig(what) => write!(f, "bad reactor configuration: {what}"),
            ReactorError::Spawn => write!(f, "could not spawn a reactor thread"),
            ReactorError::EventFd => write!(f, "could not create a reactor's eventfd"),
            ReactorError::NoSuchReactor(i) => write!(f, "no reactor {i}"),
            ReactorError::Stopped => write!(f, "reactor stopped"),
            ReactorError::Panicked(i) => write!(f, "reactor {i} panicked"),
        }
    }
}

impl std::error::Error for ReactorError {}

/// The reactors' clock: nanoseconds since the set started (monotonic, shared by all reactors, so
/// deadlines computed on any thread mean the same on every reactor).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    fn new() -> Self {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Closing handshake between senders and the reactor.
struct Gate {
    /// Set by the reactor when it stops taking messages.
    closed: AtomicBool,
    /// Senders between their `closed` check and the end of their enqueue.
    inflight: AtomicUsize,
}

/// What other threads share with one reactor.
struct Remote {
    tx: MpscProducer<Control>,
    gate: Arc<Gate>,
    thread: Thread,
    /// The reactor's doorbell (back-off on only).
    bell: Option<Arc<Doorbell>>,
    stats: StatsReader,
    core: Option<CoreId>,
    pinned: bool,
    /// The nice value the thread runs at (`None`: unknown).
    nice: Option<i32>,
    /// Its real-time priority while waiting (`None`: off or refused).
    realtime: Option<u8>,
}

/// A cheap, cloneable handle to one reactor, usable from any thread.
#[derive(Clone)]
pub struct ReactorHandle {
    index: usize,
    remote: Arc<Remote>,
}

impl ReactorHandle {
    /// The reactor's index in its set.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The core the reactor was meant for (`None` when pinning was off or impossible).
    pub fn core(&self) -> Option<CoreId> {
        self.remote.core
    }

    /// Whether the reactor thread is pinned to [`ReactorHandle::core`].
    pub fn is_pinned(&self) -> bool {
        self.remote.pinned
    }

    /// The nice value the reactor thread runs at, read back after it applied
    /// [`ReactorConfig::nice`] (`None`: the priority could not be read).
    pub fn nice(&self) -> Option<i32> {
        self.remote.nice
    }

    /// The `SCHED_FIFO` priority the reactor waits for work at ([`ReactorConfig::realtime`];
    /// `None`: off, or refused by the kernel).
    pub fn realtime(&self) -> Option<u8> {
        self.remote.realtime
    }

    /// The reactor's counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.remote.stats.snapshot()
    }

    /// Whether the reactor has stopped taking messages.
    pub fn is_stopped(&self) -> bool {
        // Acquire: pairs with the reactor's SeqCst store of `closed`; only a status read.
        self.remote.gate.closed.load(Ordering::Acquire)
    }

    /// Adds a poller to this reactor.
    pub fn add_poller(&self, p: Box<dyn Poller>) -> Result<(), ReactorError> {
        self.send(Control::AddPoller(p))
    }

    /// Runs `f` on the reactor thread, once, between two loop iterations.
    pub fn run<F>(&self, f: F) -> Result<(), ReactorError>
    where
        F: FnOnce(&mut ReactorCtx<'_>) + Send + 'static,
    {
        self.send(Control::Run(Box::new(f)))
    }

    /// Enqueues a control message (waiting, with `yield_now`, while the ring is full) and wakes
    /// the reactor. `Ok` means the reactor will handle it exactly once.
    fn send(&self, msg: Control) -> Result<(), ReactorError> {
        let gate = &*self.remote.gate;
        // SeqCst (this increment and the `closed` load below): with the reactor's SeqCst store of
        // `closed` and SeqCst load of `inflight` in `Reactor::close`, a Dekker handshake: either
        // we see `closed` and do not enqueue, or the reactor sees us in flight and drains again
        // after our enqueue.
        gate.inflight.fetch_add(1, Ordering::SeqCst);
        let mut msg = msg;
        let result = loop {
            // SeqCst: see above.
            if gate.closed.load(Ordering::SeqCst) {
                // Either the reactor closed before we looked (nothing enqueued), or it panicked.
                break Err(ReactorError::Stopped);
            }
            match self.remote.tx.enqueue(msg) {
                Ok(()) => break Ok(()),
                Err(back) => {
                    msg = back;
                    std::thread::yield_now();
                }
            }
        };
        // Release: pairs with the reactor's SeqCst (acquiring) load of `inflight` in
        // `Reactor::close`, so our enqueue happens before the drain that follows it.
        gate.inflight.fetch_sub(1, Ordering::Release);
        if result.is_ok() {
            // After the enqueue (its Release store): see `Doorbell::ring`.
            match &self.remote.bell {
                Some(b) => b.ring(),
                None => self.remote.thread.unpark(),
            }
        }
        result
    }
}

impl fmt::Debug for ReactorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReactorHandle")
            .field("index", &self.index)
            .field("core", &self.remote.core.map(|c| c.id))
            .field("pinned", &self.remote.pinned)
            .finish()
    }
}
