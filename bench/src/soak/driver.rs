//! The soak's traffic driver: one thread that keeps every client slot busy with checked
//! forward calls of every kind, keeps each slot's connection bound to its session (a bind
//! after every reconnection), sends backward calls to the bound sessions, and replaces a
//! client that gave up reconnecting.
//!
//! Normal operation: round robin over the slots; a slot gets a forward call while fewer than
//! `window` of its calls are in flight, and a backward call while fewer than `back_window`
//! are; kinds and sizes are drawn from the seed. Every call is entered in the ledger before it
//! is started; its callback finishes it there with the checked outcome.
//!
//! Recovery: a call the API refuses (`Busy`, or the client failed) is taken back from the
//! ledger; an empty pool skips the slot for this round; a client in `Failed` is closed and
//! replaced by a new one with a new session (its calls still in flight complete through their
//! callbacks). The driver also watches progress: calls in flight with no completion for
//! [`STALL_LIMIT`] is recorded as a violation (a hang).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_poller::{ClientError, ClientState, Refused, Reply};

use super::ledger::Ledger;
use super::resources::rss_kib;
use super::wire::{build_args, verify_reply, Kind, Rng, CB_PROG, HEADER, PROG, P_CHECK, P_SESSION};
use super::world::{Slot, World};
use rpcrdma_poller::Proc;

/// Longest time without any completion while calls are in flight before it counts as a hang.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// How long a client that gave up reconnecting stays failed before it is replaced (its
/// server is often still unreachable).
pub const REPLACE_AFTER: Duration = Duration::from_millis(300);

/// State the callbacks share with the driver.
#[derive(Debug)]
pub struct Shared {
    /// The ledger.
    pub ledger: Ledger,
    /// Forward calls in flight per slot.
    pub fwd: Vec<AtomicU32>,
    /// Backward calls in flight per slot.
    pub back: Vec<AtomicU32>,
    /// The session each slot's connection is bound to now (0: none; a bind is needed).
    pub bound: Vec<AtomicU64>,
    /// A bind call of the slot is in flight.
    pub binding: Vec<AtomicBool>,
}

impl Shared {
    /// State for `n` slots.
    pub fn new(n: usize) -> Arc<Shared> {
        Arc::new(Shared {
            ledger: Ledger::new(),
            fwd: (0..n).map(|_| AtomicU32::new(0)).collect(),
            back: (0..n).map(|_| AtomicU32::new(0)).collect(),
            bound: (0..n).map(|_| AtomicU64::new(0)).collect(),
            binding: (0..n).map(|_| AtomicBool::new(false)).collect(),
        })
    }
}

/// What the driver counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct DriverCounts {
    /// Rounds in which an empty pool skipped a call.
    pub pool_empty: u64,
    /// Calls refused `Busy`.
    pub busy: u64,
    /// Clients replaced after they gave up reconnecting.
    pub replacements: u64,
    /// Longest time without a completion while calls were in flight (ms).
    pub longest_stall_ms: u64,
    /// RSS sampled after the warm-up (KiB).
    pub rss_warm_kib: Option<u64>,
}

/// The driver.
pub struct Driver<'a> {
    /// The world.
    pub world: &'a World,
    /// The slots.
    pub slots: Vec<Slot>,
    /// Shared with callbacks.
    pub shared: Arc<Shared>,
    /// Sizes and kinds.
    pub rng: Rng,
    /// Forward calls in flight per slot at most.
    pub window: u32,
    /// Backward calls in flight per slot at most.
    pub back_window: u32,
    /// Counters.
    pub counts: DriverCounts,
}

/// Checks a reply of a checked call.
fn check(r: &Reply, kind: Kind, id: u64, arg_ck: u32, reply_len: usize) -> Result<(), String> {
    let rec = if kind == Kind::WriteDdp {
        Some(r.receptacle(0).ok_or("no receptacle came back")?)
    } else {
        None
    };
    verify_reply(r.results(), rec, id, arg_ck, reply_len)
}

impl Driver<'_> {
    /// Drives traffic until `end`, sampling the RSS at `warm`.
    pub fn run(&mut self, end: Instant, warm: Instant) {
        let mut last_done = 0;
        let mut last_progress = Instant::now();
        while Instant::now() < end {
            let mut issued = 0;
            for k in 0..self.slots.len() {
                self.maintain(k);
                if self.slots[k].failed_at.is_some() {
                    // Gave up reconnecting: refuses every call until it is replaced.
                    continue;
                }
                issued += u32::from(self.forward(k));
                issued += u32::from(self.backward(k));
            }
            let now = Instant::now();
            if self.counts.rss_warm_kib.is_none() && now >= warm {
                self.counts.rss_warm_kib = rss_kib();
            }
            self.watch(&mut last_done, &mut last_progress, now);
            if issued == 0 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Records the longest stretch without progress; a hang beyond [`STALL_LIMIT`] once.
    pub fn watch(&mut self, last_done: &mut u64, last_progress: &mut Instant, now: Instant) {
        let done = self.shared.ledger.completed();
        if done != *last_done || self.shared.ledger.in_flight() == 0 {
            *last_done = done;
            *last_progress = now;
            return;
        }
        let stalled = now.duration_since(*last_progress);
        let ms = stalled.as_millis() as u64;
        if ms > self.counts.longest_stall_ms {
            if stalled >= STALL_LIMIT
                && self.counts.longest_stall_ms < STALL_LIMIT.as_millis() as u64
            {
                self.shared.ledger.violation(format!(
                    "no completion for {ms} ms with {} calls in flight: {:?}",
                    self.shared.ledger.in_flight(),
                    self.shared.ledger.in_flight_sample(8)
                ));
            }
            self.counts.longest_stall_ms = ms;
        }
    }

    /// Replaces a failed client; asks for a bind after every reconnection.
    pub fn maintain(&mut self, k: usize) {
        let sh = &self.shared;
        if self.slots[k].client.state() == ClientState::Failed {
            let now = Instant::now();
            let since = *self.slots[k].failed_at.get_or_insert(now);
            if now.duration_since(since) < REPLACE_AFTER {
                return;
            }
            let old = &self.slots[k];
            old.client.close();
            self.world.servers[old.server].close_session(old.session);
            match self.world.connect(k, old.generation + 1) {
                Ok(s) => self.slots[k] = s,
                Err(e) => sh.ledger.violation(e),
            }
            sh.bound[k].store(0, Ordering::Release);
            self.counts.replacements += 1;
        }
        let s = &mut self.slots[k];
        let r = s.client.stats().snapshot().reconnects;
        if r != s.seen_reconnects {
            s.seen_reconnects = r;
            sh.bound[k].store(0, Ordering::Release);
        }
        if s.failed_at.is_none()
            && sh.bound[k].load(Ordering::Acquire) == 0
            && !sh.binding[k].load(Ordering::Acquire)
        {
            self.bind(k);
        }
    }

    fn bind(&mut self, k: usize) {
        let s = &self.slots[k];
        let Some(mut a) = s.client.args() else {
            self.counts.pool_empty += 1;
            return;
        };
        let session = s.session;
        let (hi, lo) = ((session >> 32) as u32, session as u32);
        if a.put_u32(hi).is_err() || a.put_u32(lo).is_err() {
            return;
        }
        let sh = Arc::clone(&self.shared);
        let id = sh.ledger.begin(Kind::Bind, k as u32);
        sh.binding[k].store(true, Ordering::Release);
        let cb = move |r: Result<Reply, ClientError>| {
            let out = r.map(|rep| {
                if rep.results() == [0, 0, 0, 0] {
                    Ok(())
                } else {
                    Err(format!("bind results {:?}", rep.results()))
                }
            });
            if matches!(out, Ok(Ok(()))) {
                sh.bound[k].store(session, Ordering::Release);
            }
            sh.ledger.finish(id, out);
            sh.binding[k].store(false, Ordering::Release);
        };
        if let Err(r) = s.client.call(Proc::new(PROG, 1, P_SESSION), a, cb) {
            self.refused(id, &r);
            self.shared.binding[k].store(false, Ordering::Release);
        }
    }

    fn refused(&mut self, id: u64, r: &Refused) {
        self.shared.ledger.refused(id);
        if r.error == ClientError::Busy {
            self.counts.busy += 1;
        }
    }

    fn pick_kind(&mut self) -> Kind {
        match self.rng.below(100) {
            0..=29 => Kind::Inline,
            30..=43 => Kind::ReadDdp,
            44..=57 => Kind::WriteDdp,
            58..=71 => Kind::LongCall,
            _ => Kind::LongReply,
        }
    }

    /// Starts one forward checked call on slot `k` if its window allows.
    fn forward(&mut self, k: usize) -> bool {
        if self.shared.fwd[k].load(Ordering::Acquire) >= self.window {
            return false;
        }
        let kind = self.pick_kind();
        let (arg_len, reply_len) = kind.sizes(&mut self.rng);
        let c = &self.slots[k].client;
        let (Some(mut args), ddp, rec) = (
            c.args(),
            (kind == Kind::ReadDdp).then(|| c.buffer()),
            (kind == Kind::WriteDdp).then(|| c.buffer()),
        ) else {
            self.counts.pool_empty += 1;
            return false;
        };
        if matches!(ddp, Some(None)) || matches!(rec, Some(None)) {
            self.counts.pool_empty += 1;
            return false;
        }
        let sh = Arc::clone(&self.shared);
        let id = sh.ledger.begin(kind, k as u32);
        let Some(arg_ck) = build_args(&mut args, kind, id, arg_len, reply_len, ddp.flatten())
        else {
            sh.ledger.refused(id);
            sh.ledger.violation(format!(
                "{} arguments of {arg_len} did not fit",
                kind.name()
            ));
            return false;
        };
        // A reply-size hint: what the reply needs, or (half of the long replies) too little,
        // so the server answers ERR_CHUNK / RDMA2_ERR_CANT_REPLY and the call is sent again
        // with the same XID offering the whole reply buffer.
        match kind {
            Kind::LongReply if self.rng.below(2) == 0 => {
                args.expect_reply(64);
            }
            Kind::LongReply => {}
            _ => {
                args.expect_reply(HEADER + 4 + reply_len + 64);
            }
        }
        if let Some(Some(b)) = rec {
            if args.receptacle(b).is_err() {
                sh.ledger.refused(id);
                return false;
            }
        }
        sh.fwd[k].fetch_add(1, Ordering::AcqRel);
        let cb = move |r: Result<Reply, ClientError>| {
            let out = r.map(|rep| check(&rep, kind, id, arg_ck, reply_len));
            sh.ledger.finish(id, out);
            sh.fwd[k].fetch_sub(1, Ordering::AcqRel);
        };
        match self.slots[k]
            .client
            .call(Proc::new(PROG, 1, P_CHECK), args, cb)
        {
            Ok(()) => true,
            Err(r) => {
                self.shared.fwd[k].fetch_sub(1, Ordering::AcqRel);
                self.refused(id, &r);
                false
            }
        }
    }

    /// Starts one backward checked call to slot `k`'s session if it is bound and its window
    /// allows.
    fn backward(&mut self, k: usize) -> bool {
        let session = self.shared.bound[k].load(Ordering::Acquire);
        if session == 0 || self.shared.back[k].load(Ordering::Acquire) >= self.back_window {
            return false;
        }
        let server = &self.world.servers[self.slots[k].server];
        let Some(mut args) = server.back_args() else {
            self.counts.pool_empty += 1;
            return false;
        };
        let (arg_len, reply_len) = Kind::Backward.sizes(&mut self.rng);
        let sh = Arc::clone(&self.shared);
        let id = sh.ledger.begin(Kind::Backward, k as u32);
        let Some(arg_ck) = build_args(&mut args, Kind::Backward, id, arg_len, reply_len, None)
        else {
            sh.ledger.refused(id);
            return false;
        };
        sh.back[k].fetch_add(1, Ordering::AcqRel);
        let cb = move |r: Result<Reply, ClientError>| {
            let out = r.map(|rep| verify_reply(rep.results(), None, id, arg_ck, reply_len));
            sh.ledger.finish(id, out);
            sh.back[k].fetch_sub(1, Ordering::AcqRel);
        };
        match server.back_call(session, Proc::new(CB_PROG, 1, P_CHECK), args, cb) {
            Ok(()) => true,
            Err(r) => {
                self.shared.back[k].fetch_sub(1, Ordering::AcqRel);
                self.refused(id, &r);
                false
            }
        }
    }
}
