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
//! back-off's longest sleep, for sources without a doorbell). Other
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

use crate::backoff::{Backoff, BackoffConfig, IdleAction};
use crate::doorbell::Doorbell;
use crate::mpsc::{self, MpscConsumer, MpscProducer};
use crate::stats::{stats, StatsReader, StatsSnapshot, StatsWriter};
use crate::timer::{TimerError, TimerHandle, TimerWheel};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

pub use core_affinity::CoreId;

/// Control messages handled per loop iteration at most.
pub const CONTROL_BATCH: usize = 64;

/// Timers fired per loop iteration at most (the rest fire in the next iterations).
pub const TIMER_BATCH: usize = 32;

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
    /// polls, an unpark only when it is about to sleep.
    pub fn doorbell(&self) -> Option<&Arc<Doorbell>> {
        self.bell
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
    /// Idle back-off (default off: pure busy-poll).
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
    stats: StatsReader,
    core: Option<CoreId>,
    pinned: bool,
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
            self.remote.thread.unpark();
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

/// A set of running reactors, one thread per core. Dropping it stops them (as [`ReactorSet::stop`]).
pub struct ReactorSet {
    handles: Vec<ReactorHandle>,
    threads: Vec<Option<JoinHandle<()>>>,
    next: AtomicUsize,
    clock: Clock,
}

impl ReactorSet {
    /// Starts the reactors described by `cfg` and returns once every one is running (and pinned,
    /// if required).
    pub fn start(cfg: &ReactorConfig) -> Result<ReactorSet, ReactorError> {
        let plan = plan_cores(cfg)?;
        crate::ring::check_capacity(cfg.control_capacity)
            .map_err(|_| ReactorError::BadConfig("control_capacity"))?;
        let clock = Clock::new();
        let mut set = ReactorSet {
            handles: Vec::with_capacity(plan.len()),
            threads: Vec::with_capacity(plan.len()),
            next: AtomicUsize::new(0),
            clock,
        };
        for (index, core) in plan.into_iter().enumerate() {
            if let Err(e) = set.spawn_one(cfg, index, core) {
                // Stop the ones already running; the first error is the one to report.
                let _ = set.stop();
                return Err(e);
            }
        }
        Ok(set)
    }

    fn spawn_one(
        &mut self,
        cfg: &ReactorConfig,
        index: usize,
        core: Option<CoreId>,
    ) -> Result<(), ReactorError> {
        let (tx, rx) = mpsc::channel::<Control>(cfg.control_capacity)
            .map_err(|_| ReactorError::BadConfig("control_capacity"))?;
        let timers = TimerWheel::new(cfg.timer_capacity, cfg.timer_slots, cfg.timer_tick_ns)
            .map_err(|_| ReactorError::BadConfig("timer_capacity / timer_slots / timer_tick_ns"))?;
        let (writer, reader) = stats();
        let gate = Arc::new(Gate {
            closed: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<bool, ReactorError>>();
        let pin_required = cfg.pin == PinPolicy::Required;
        let mut reactor = Reactor {
            core: Core {
                index,
                pollers: Vec::new(),
                free_slots: Vec::new(),
                live: 0,
                timers,
                stats: writer,
                stopping: false,
                now: 0,
                bell: cfg.backoff.enabled.then(|| Arc::new(Doorbell::new())),
            },
            rx,
            gate: Arc::clone(&gate),
            backoff: Backoff::new(cfg.backoff),
            clock: self.clock,
            drain_timeout_ns: u64::try_from(cfg.drain_timeout.as_nanos()).unwrap_or(u64::MAX),
        };
        let thread = std::thread::Builder::new()
            .name(format!("{}-{index}", cfg.name))
            .spawn(move || {
                let _closed = CloseOnExit(Arc::clone(&reactor.gate));
                let pinned = core.is_some_and(core_affinity::set_for_current);
                if let (Some(c), false, true) = (core, pinned, pin_required) {
                    let _ = ready_tx.send(Err(ReactorError::PinFailed {
                        reactor: index,
                        core: c.id,
                    }));
                    return;
                }
                if let Some(b) = &reactor.core.bell {
                    b.register();
                }
                let _ = ready_tx.send(Ok(pinned));
                drop(ready_tx);
                reactor.run();
            })
            .map_err(|_| ReactorError::Spawn)?;
        let pinned = match ready_rx.recv() {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ReactorError::Panicked(index));
            }
        };
        self.handles.push(ReactorHandle {
            index,
            remote: Arc::new(Remote {
                tx,
                gate,
                thread: thread.thread().clone(),
                stats: reader,
                core,
                pinned,
            }),
        });
        self.threads.push(Some(thread));
        Ok(())
    }

    /// Number of reactors.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether the set has no reactor (never true for a started set).
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The reactors' shared clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The handle of reactor `index`.
    pub fn handle(&self, index: usize) -> Option<&ReactorHandle> {
        self.handles.get(index)
    }

    /// All handles, by index.
    pub fn handles(&self) -> &[ReactorHandle] {
        &self.handles
    }

    /// The counters of reactor `index`.
    pub fn stats(&self, index: usize) -> Option<StatsSnapshot> {
        self.handles.get(index).map(|h| h.stats())
    }

    fn place(&self, placement: Placement) -> Result<&ReactorHandle, ReactorError> {
        let i = match placement {
            Placement::Reactor(i) => i,
            // Relaxed: a turn counter only (pairs with nothing).
            Placement::RoundRobin => {
                self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len().max(1)
            }
        };
        self.handles.get(i).ok_or(ReactorError::NoSuchReactor(i))
    }

    /// Adds a poller where `placement` says; returns the reactor index.
    pub fn add_poller(
        &self,
        placement: Placement,
        p: Box<dyn Poller>,
    ) -> Result<usize, ReactorError> {
        let h = self.place(placement)?;
        h.add_poller(p)?;
        Ok(h.index)
    }

    /// Runs `f` on the reactor `placement` says; returns the reactor index.
    pub fn run_on<F>(&self, placement: Placement, f: F) -> Result<usize, ReactorError>
    where
        F: FnOnce(&mut ReactorCtx<'_>) + Send + 'static,
    {
        let h = self.place(placement)?;
        h.run(f)?;
        Ok(h.index)
    }

    /// Stops every reactor gracefully (pollers shut down and drain) and joins the threads.
    /// Idempotent; reports the first reactor that panicked.
    pub fn stop(&mut self) -> Result<(), ReactorError> {
        for h in &self.handles {
            // Err(Stopped) means that reactor is already gone (panicked or stopped).
            let _ = h.send(Control::Stop);
        }
        let mut result = Ok(());
        for (i, t) in self.threads.iter_mut().enumerate() {
            if let Some(t) = t.take() {
                if t.join().is_err() && result.is_ok() {
                    result = Err(ReactorError::Panicked(i));
                }
            }
        }
        result
    }
}

impl Drop for ReactorSet {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl fmt::Debug for ReactorSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReactorSet")
            .field("reactors", &self.handles)
            .finish()
    }
}

/// Chooses a core (or none) for each reactor. Reads the usable cores once, before any pinning.
fn plan_cores(cfg: &ReactorConfig) -> Result<Vec<Option<CoreId>>, ReactorError> {
    // get_core_ids reads the calling thread's CPU mask: call it once, here, before pinning.
    let usable = core_affinity::get_core_ids();
    let required = cfg.pin == PinPolicy::Required;
    let plan = match (&cfg.cores, cfg.pin) {
        (Cores::Count(0), _) => return Err(ReactorError::NoReactors),
        (Cores::Ids(v), _) if v.is_empty() => return Err(ReactorError::NoReactors),
        (Cores::All, PinPolicy::Off) => vec![None; usable.map_or(1, |u| u.len().max(1))],
        (Cores::Count(n), PinPolicy::Off) => vec![None; *n],
        (Cores::Ids(v), PinPolicy::Off) => vec![None; v.len()],
        (Cores::All, _) => match usable {
            Some(u) if !u.is_empty() => u.into_iter().map(Some).collect(),
            _ if required => return Err(ReactorError::NoCoreInfo),
            _ => vec![None],
        },
        (Cores::Count(n), _) => {
            let u = match usable {
                Some(u) => u,
                None if required => return Err(ReactorError::NoCoreInfo),
                None => Vec::new(),
            };
            if *n > u.len() && required {
                return Err(ReactorError::NotEnoughCores {
                    wanted: *n,
                    available: u.len(),
                });
            }
            (0..*n).map(|i| u.get(i).copied()).collect()
        }
        (Cores::Ids(v), _) => {
            let u = match usable {
                Some(u) => u,
                None if required => return Err(ReactorError::NoCoreInfo),
                None => Vec::new(),
            };
            let mut plan = Vec::with_capacity(v.len());
            for (i, c) in v.iter().enumerate() {
                if v[..i].iter().any(|d| d.id == c.id) {
                    return Err(ReactorError::DuplicateCore(c.id));
                }
                if u.iter().any(|d| d.id == c.id) {
                    plan.push(Some(*c));
                } else if required {
                    return Err(ReactorError::CoreNotAllowed(c.id));
                } else {
                    plan.push(None);
                }
            }
            plan
        }
    };
    Ok(plan)
}

/// Closes the gate when the reactor thread ends, however it ends.
struct CloseOnExit(Arc<Gate>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        // SeqCst: pairs with the senders' SeqCst load of `closed` in `ReactorHandle::send`.
        self.0.closed.store(true, Ordering::SeqCst);
    }
}

/// One poller slot.
struct Slot {
    gen: u32,
    poller: Option<Box<dyn Poller>>,
    /// `shutdown` was called; remove once drained.
    draining: bool,
}

/// The reactor state the pollers and control closures act on.
struct Core {
    index: usize,
    pollers: Vec<Slot>,
    /// Free slot indices; its capacity always covers `pollers.len()`, so removing never
    /// allocates.
    free_slots: Vec<u32>,
    live: usize,
    timers: TimerWheel<TimerKey>,
    stats: StatsWriter,
    stopping: bool,
    now: u64,
    /// The reactor's doorbell (back-off on only).
    bell: Option<Arc<Doorbell>>,
}

impl Core {
    /// Adds a poller (control path: may allocate).
    fn add(&mut self, mut p: Box<dyn Poller>) -> PollerId {
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
    fn take(&mut self, id: PollerId) -> Option<Box<dyn Poller>> {
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
struct Reactor {
    core: Core,
    rx: MpscConsumer<Control>,
    gate: Arc<Gate>,
    backoff: Backoff,
    clock: Clock,
    drain_timeout_ns: u64,
}

impl Reactor {
    /// The run loop; returns when stopped and drained.
    fn run(&mut self) {
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
    /// arms the doorbell, so the next iteration is the re-check (see [`Doorbell::arm`]); a sleep
    /// then lasts until the bell rings, an unpark, the next timer, or the back-off's sleep.
    fn idle(&mut self, now: u64, armed: &mut bool) {
        if let (Some(b), false, true) = (&self.core.bell, *armed, self.backoff.sleeps_next()) {
            b.arm();
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
                let cap = self.core.timers.next_deadline();
                let d = cap.map_or(d, |t| d.min(t.saturating_sub(now)));
                if d == 0 {
                    std::thread::yield_now();
                    self.core.stats.idle_yield();
                } else {
                    let t = Duration::from_nanos(d);
                    match &self.core.bell {
                        Some(b) => b.park(Some(t)),
                        None => std::thread::park_timeout(t),
                    }
                    self.core.stats.idle_sleep();
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
