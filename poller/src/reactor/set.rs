//! [`ReactorSet`]: starting, addressing and stopping the reactor threads, and the core plan
//! (which core each reactor is pinned to) read once before pinning.
//!
//! Normal operation: [`ReactorSet::start`] plans the cores, spawns and pins one thread per
//! planned core and waits until each runs; pollers and closures are placed round-robin or on a
//! chosen reactor. Recovery: a failed pin (when required) or spawn stops the reactors started so
//! far and returns the error; [`ReactorSet::stop`] (also on drop) stops every reactor gracefully
//! and reports a panicked one.

use super::run_loop::{CloseOnExit, Core, Reactor};
use super::{
    Clock, Control, CoreId, Cores, Gate, PinPolicy, Placement, Poller, ReactorConfig, ReactorCtx,
    ReactorError, ReactorHandle, Remote,
};
use crate::backoff::Backoff;
use crate::doorbell::Doorbell;
use crate::mpsc;
use crate::sched::RtThread;
use crate::stats::{stats, StatsSnapshot};
use crate::timer::TimerWheel;
use crate::wait::WaitSet;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

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
        let (ready_tx, ready_rx) =
            std::sync::mpsc::channel::<Result<(bool, Option<i32>, Option<u8>), ReactorError>>();
        let bell = match (cfg.backoff.enabled, cfg.backoff.interrupt) {
            (false, _) => None,
            (true, false) => Some(Arc::new(Doorbell::new())),
            (true, true) => Some(Arc::new(
                Doorbell::with_eventfd().map_err(|_| ReactorError::EventFd)?,
            )),
        };
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
                bell: bell.clone(),
            },
            rx,
            gate: Arc::clone(&gate),
            backoff: Backoff::new(cfg.backoff),
            clock: self.clock,
            waits: WaitSet::new(),
            all_armed: false,
            rt: RtThread::OFF,
            drain_timeout_ns: u64::try_from(cfg.drain_timeout.as_nanos()).unwrap_or(u64::MAX),
        };
        let wanted_nice = cfg.nice;
        let wanted_rt = cfg.realtime.filter(|_| cfg.backoff.enabled);
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
                let nice = set_thread_nice(wanted_nice);
                let (rt, realtime) = RtThread::start(wanted_rt, reactor.clock.now());
                reactor.rt = rt;
                let _ = ready_tx.send(Ok((pinned, nice, realtime)));
                drop(ready_tx);
                reactor.run();
            })
            .map_err(|_| ReactorError::Spawn)?;
        let (pinned, nice, realtime) = match ready_rx.recv() {
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
                bell,
                stats: reader,
                core,
                pinned,
                nice,
                realtime,
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

/// Sets the calling thread's nice value to `wanted` (clamped to -20..=19) when given, and
/// returns the value it runs at afterwards (`None`: unreadable). On Linux `setpriority(2)` with
/// `PRIO_PROCESS` and a thread id changes that one thread.
fn set_thread_nice(wanted: Option<i32>) -> Option<i32> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let who = libc::id_t::try_from(tid).ok()?;
    if let Some(n) = wanted {
        // SAFETY: plain system call on this thread's id; a refusal (EPERM / EACCES) leaves the
        // priority as it was, which the read below reports.
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, who, n.clamp(-20, 19)) };
    }
    // getpriority can return -1 as a value: clear errno first and check it after.
    // SAFETY: errno location of this thread; getpriority has no memory arguments.
    unsafe {
        *libc::__errno_location() = 0;
        let v = libc::getpriority(libc::PRIO_PROCESS, who);
        (*libc::__errno_location() == 0).then_some(v)
    }
}
