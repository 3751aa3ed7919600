//! The soak's fault injector: a registry of every QP the endpoints create (through
//! [`Endpoint::set_qp_hook`](rpcrdma_poller::Endpoint::set_qp_hook)) and a thread that injects
//! faults on a schedule drawn from the seed, through the soft provider's fault API.
//!
//! Faults (each counted in [`FaultCounts`]):
//! - `drop`: [`SoftFaults::drop_connection`] on a random live QP (client or server side): a
//!   link failure, both QPs flush and report `Disconnected`;
//! - `fail-send`: [`SoftFaults::fail_nth_send`] (the next 1–16th send WR completes with a
//!   random error status: the QP goes to ERROR as with any failed WR);
//! - `hold`: [`DelayMode::Hold`] on a random QP for 1–80 ms, then
//!   [`SoftFaults::release_completions`];
//! - `delay`: [`DelayMode::Polls`] (each completion held for 1–64 more CQ polls) for
//!   1–80 ms, then released;
//! - `unreachable`: [`SoftFabric::set_unreachable`] on one server for 100–1200 ms, and every
//!   connection to it dropped, so its clients' reconnect attempts fail until it is back;
//! - `stall`: the worker-mode server's handlers sleep 300 µs per call for 20–250 ms, so its
//!   worker ring (2 slots) fills and calls back up in the node's overflow queue.
//!
//! Normal operation: one fault every 5–60 ms (drawn from the seed); the sequence of fault
//! kinds, targets (by index among live QPs) and durations depends only on the seed, their
//! interleaving with the traffic on the thread timing.
//!
//! Recovery: [`Injector::run`] returns when told to stop, after releasing every held
//! completion, making every server reachable and ending the stall, so the run can drain.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::soft::{DelayMode, SoftFabric, SoftFaults, SoftProvider};
use rpcrdma_engine::verbs::{QpState, WcStatus};
use rpcrdma_poller::QpHook;

use super::wire::{Rng, ServerCtx};

/// Which side a QP belongs to: a client endpoint, or server `i`'s endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A client connection's QP.
    Client,
    /// A connection accepted by server `i`.
    Server(usize),
}

/// Every QP the endpoints created, with its side.
#[derive(Debug, Default)]
pub struct QpRegistry {
    qps: Mutex<Vec<(Side, SoftFaults)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl QpRegistry {
    /// An empty registry.
    pub fn new() -> Arc<QpRegistry> {
        Arc::new(QpRegistry::default())
    }

    /// The hook to install on an endpoint of `side`.
    pub fn hook(self: &Arc<Self>, side: Side) -> QpHook<SoftProvider> {
        let me = Arc::clone(self);
        Box::new(move |qp| lock(&me.qps).push((side, qp.faults())))
    }

    /// Forgets QPs that are gone or in ERROR (nothing left to inject into) and returns the
    /// live ones.
    fn live(&self) -> Vec<(Side, SoftFaults)> {
        let mut q = lock(&self.qps);
        q.retain(|(_, f)| !matches!(f.state(), QpState::Error | QpState::Reset));
        q.clone()
    }

    /// QPs registered and not pruned yet.
    pub fn len(&self) -> usize {
        lock(&self.qps).len()
    }

    /// True when no QP is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Faults injected, by kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct FaultCounts {
    /// Connections dropped (link failures).
    pub drop: u64,
    /// Send work requests made to fail.
    pub fail_send: u64,
    /// QPs whose completions were held until released.
    pub hold: u64,
    /// QPs whose completions were delayed by a number of CQ polls.
    pub delay: u64,
    /// Periods a server was unreachable.
    pub unreachable: u64,
    /// Periods the worker-mode server's handlers stalled.
    pub stall: u64,
    /// Ticks that found no live QP to inject into.
    pub idle: u64,
}

/// Something to undo later.
enum Undo {
    Release(SoftFaults),
    Reachable(SocketAddr),
    StallOff(usize),
}

/// The fault thread's state.
pub struct Injector {
    /// The QPs.
    pub registry: Arc<QpRegistry>,
    /// The fabric (for unreachable servers).
    pub fabric: SoftFabric,
    /// Every server's address.
    pub servers: Vec<SocketAddr>,
    /// Every server's handler context (index as in `servers`).
    pub ctxs: Vec<Arc<ServerCtx>>,
    /// Which servers run handlers on workers (only those are stalled).
    pub worker_servers: Vec<usize>,
    /// The schedule's generator.
    pub rng: Rng,
}

const STATUSES: [WcStatus; 4] = [
    WcStatus::RETRY_EXC_ERR,
    WcStatus::LOC_PROT_ERR,
    WcStatus::REM_ACCESS_ERR,
    WcStatus::GENERAL_ERR,
];

impl Injector {
    /// Injects faults until `stop` is set, then undoes what is still in effect.
    pub fn run(mut self, stop: &AtomicBool) -> FaultCounts {
        let mut n = FaultCounts::default();
        let mut undo: Vec<(Instant, Undo)> = Vec::new();
        let mut next = Instant::now() + Duration::from_millis(20);
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            let mut i = 0;
            while i < undo.len() {
                if undo[i].0 <= now {
                    let (_, u) = undo.swap_remove(i);
                    self.undo(u);
                } else {
                    i += 1;
                }
            }
            if now >= next {
                self.inject(&mut n, &mut undo, now);
                next = now + Duration::from_millis(5 + self.rng.below(56));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for (_, u) in undo {
            self.undo(u);
        }
        n
    }

    fn undo(&self, u: Undo) {
        match u {
            Undo::Release(f) => f.release_completions(),
            Undo::Reachable(a) => self.fabric.set_unreachable(a, false),
            Undo::StallOff(s) => self.ctxs[s].stall.store(false, Ordering::Relaxed),
        }
    }

    fn inject(&mut self, n: &mut FaultCounts, undo: &mut Vec<(Instant, Undo)>, now: Instant) {
        let roll = self.rng.below(100);
        let pick = self.rng.next_u64();
        let ms = |r: &mut Rng, lo: u64, hi: u64| Duration::from_millis(lo + r.below(hi - lo + 1));
        if roll >= 90 {
            let s = pick as usize % self.servers.len();
            let busy = undo
                .iter()
                .any(|(_, u)| matches!(u, Undo::Reachable(a) if *a == self.servers[s]));
            if !busy {
                self.fabric.set_unreachable(self.servers[s], true);
                for (side, f) in self.registry.live() {
                    if side == Side::Server(s) {
                        f.drop_connection();
                    }
                }
                let d = ms(&mut self.rng, 100, 1200);
                undo.push((now + d, Undo::Reachable(self.servers[s])));
                n.unreachable += 1;
            }
            return;
        }
        if roll >= 82 {
            if let Some(&s) = self
                .worker_servers
                .get(pick as usize % self.worker_servers.len().max(1))
            {
                if !self.ctxs[s].stall.swap(true, Ordering::Relaxed) {
                    let d = ms(&mut self.rng, 20, 250);
                    undo.push((now + d, Undo::StallOff(s)));
                    n.stall += 1;
                }
            }
            return;
        }
        let live = self.registry.live();
        if live.is_empty() {
            n.idle += 1;
            return;
        }
        let (_, f) = &live[pick as usize % live.len()];
        match roll {
            0..=34 => {
                f.drop_connection();
                n.drop += 1;
            }
            35..=54 => {
                let st = STATUSES[self.rng.below(STATUSES.len() as u64) as usize];
                f.fail_nth_send(1 + self.rng.below(16), st);
                n.fail_send += 1;
            }
            _ => {
                let held = undo
                    .iter()
                    .filter(|(_, u)| matches!(u, Undo::Release(_)))
                    .count();
                if held >= 4 {
                    n.idle += 1;
                    return;
                }
                if roll < 68 {
                    f.delay_completions(DelayMode::Hold);
                    n.hold += 1;
                } else {
                    f.delay_completions(DelayMode::Polls(1 + self.rng.below(64) as u32));
                    n.delay += 1;
                }
                let d = ms(&mut self.rng, 1, 80);
                undo.push((now + d, Undo::Release(f.clone())));
            }
        }
    }
}
