//! The closed loop of calls: `rpc_lat` keeps one call in flight, `rpc_bw` a window, each
//! started from the previous one's completion callback on the client's reactor; each call is
//! stamped at submission and at its reply callback. Also the per-size driver (`run_size`,
//! `run_sizes`) that builds a world, runs the loop and computes perftest's statistics.
//!
//! Normal operation: the loop state is shared between the driver and the callbacks under one
//! mutex (taken once per completion); the driver waits on a condition variable. Recovery: a
//! failed or refused call, a data mismatch, an exhausted pool or no progress within the
//! timeout stops the loop with its [`PerfError`]; the world is stopped in every case.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{CallArgs, Client, ClientError, Reply};

use super::super::report::Progress;
use super::super::stats::{lat_duration, BwStats, LatStats};
use super::super::verbs_loops::{margin_for, new_histogram, pattern};
use super::super::{Outcome, PerfError, SizeResult};

use super::world::{be32, World};
use super::{Plan, RpcConfig, RpcObserver, RpcSizeInfo, PROC_XFER, PROG, SEED, VERS, WAKE};

struct LoopState {
    pub(super) issued: u64,
    pub(super) completed: u64,
    /// Calls to issue (counted mode).
    pub(super) target: u64,
    /// Stop issuing at this time (duration mode, ns on the loop clock).
    pub(super) deadline: Option<u64>,
    /// Measured window of duration mode (ns).
    pub(super) window: (u64, u64),
    pub(super) in_window: u64,
    pub(super) rtts: Vec<u64>,
    pub(super) posted: Vec<u64>,
    pub(super) done_at: Vec<u64>,
    pub(super) hist: Histogram<u64>,
    pub(super) checked: bool,
    pub(super) error: Option<PerfError>,
    pub(super) finished: bool,
}

struct Loop {
    pub(super) client: Client,
    pub(super) clock: Instant,
    pub(super) plan: Plan,
    pub(super) pat: Arc<[u8]>,
    pub(super) latency: bool,
    pub(super) every: bool,
    pub(super) st: Mutex<LoopState>,
    pub(super) cv: Condvar,
}

fn lock(m: &Mutex<LoopState>) -> MutexGuard<'_, LoopState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Loop {
    #[inline]
    pub(super) fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Arguments of the next call (outside the timed interval).
    pub(super) fn args(&self) -> Result<CallArgs, PerfError> {
        let exhausted = || PerfError::Memory("the client's buffer pool is exhausted".into());
        let mut a = self.client.args().ok_or_else(exhausted)?;
        let p = &self.plan;
        if p.null {
            return Ok(a);
        }
        let full = |_| PerfError::Config("arguments do not fit the buffer".into());
        a.put_u32(p.reply_len as u32).map_err(full)?;
        a.put_u32(p.call_len as u32).map_err(full)?;
        let n = p.call_len as usize;
        if p.call_ddp {
            let mut b = self.client.buffer().ok_or_else(exhausted)?;
            // The buffer holds the pattern except where it last served as arguments.
            let d = p.dirty().min(n).min(b.len());
            b[..d].copy_from_slice(&self.pat[..d]);
            a.ddp(b, n).map_err(|(e, _)| full(e))?;
        } else if n > 0 {
            a.put(&self.pat[..n]).map_err(full)?;
            a.put(&[0u8; 3][..(4 - n % 4) % 4]).map_err(full)?;
        }
        if p.reply_ddp {
            let b = self.client.buffer().ok_or_else(exhausted)?;
            a.receptacle(b).map_err(|(e, _)| full(e))?;
        }
        Ok(a)
    }

    /// Checks the first reply of the size against the pattern.
    pub(super) fn check(&self, r: &Reply) -> Result<(), PerfError> {
        let res = r.results();
        if self.plan.null {
            return if res.is_empty() {
                Ok(())
            } else {
                Err(PerfError::Verify(format!(
                    "NULL reply carries {} octets",
                    res.len()
                )))
            };
        }
        let want = self.plan.reply_len as usize;
        let len = be32(res, 0)
            .ok_or_else(|| PerfError::Verify("reply without a result length".into()))?
            as usize;
        if len != want {
            return Err(PerfError::Verify(format!(
                "reply length {len}, expected {want}"
            )));
        }
        let data = match r.receptacle(0) {
            Some(d) => d.get(..len),
            None => res.get(4..4 + len),
        };
        if data != self.pat.get(..len) {
            return Err(PerfError::Verify(format!(
                "the {len} reply octets differ from the server's pattern"
            )));
        }
        Ok(())
    }

    fn finish(&self, st: &mut LoopState) {
        st.finished = true;
        self.cv.notify_all();
    }

    /// Starts one call (state locked by the caller).
    fn issue(self: &Arc<Self>, st: &mut LoopState) -> Result<(), PerfError> {
        let args = self.args()?;
        let i = st.issued as usize;
        st.issued += 1;
        let proc_num = if self.plan.null { 0 } else { PROC_XFER };
        let me = Arc::clone(self);
        let t0 = self.now();
        if let Some(p) = st.posted.get_mut(i) {
            *p = t0;
        }
        self.client
            .call(PROG, VERS, proc_num, args, move |r| me.completed(t0, r))
            .map_err(|r| PerfError::Protocol(format!("call refused: {:?}", r.error)))
    }

    pub(super) fn completed(self: &Arc<Self>, t0: u64, r: Result<Reply, ClientError>) {
        let t1 = self.now();
        let mut st = lock(&self.st);
        if st.finished {
            return;
        }
        let reply = match r {
            Ok(reply) => reply,
            Err(e) => {
                st.error = Some(call_error(e));
                self.finish(&mut st);
                return;
            }
        };
        if !st.checked || self.every {
            st.checked = true;
            if let Err(e) = self.check(&reply) {
                st.error = Some(e);
                self.finish(&mut st);
                return;
            }
        }
        drop(reply);
        let k = st.completed as usize;
        st.completed += 1;
        let rtt = t1.saturating_sub(t0);
        st.hist.saturating_record(rtt.max(1));
        if st.deadline.is_some() {
            if t1 >= st.window.0 && t1 <= st.window.1 {
                st.in_window += 1;
            }
        } else if self.latency {
            if let Some(s) = st.rtts.get_mut(k) {
                *s = rtt;
            }
        } else if let Some(s) = st.done_at.get_mut(k) {
            *s = t1;
        }
        let more = match st.deadline {
            Some(d) => t1 < d,
            None => st.issued < st.target,
        };
        if more {
            if let Err(e) = self.issue(&mut st) {
                st.error = Some(e);
                self.finish(&mut st);
            }
        } else if st.completed == st.issued {
            self.finish(&mut st);
        }
    }
}

fn call_error(e: ClientError) -> PerfError {
    match e {
        ClientError::Rpc(rpcrdma_engine::rpc::AcceptStat::GarbageArgs) => PerfError::Verify(
            "the server found the call's data different from the pattern (GARBAGE_ARGS)".into(),
        ),
        ClientError::TimedOut => PerfError::Timeout("an RPC reply"),
        other => PerfError::Protocol(format!("RPC failed: {other:?}")),
    }
}

/// Runs one size on `w`.
fn run_size(
    cfg: &RpcConfig,
    client: &Client,
    plan: &Plan,
    size: u64,
    pat: &Arc<[u8]>,
    run_start: Instant,
    progress: &mut Progress,
) -> Result<(SizeResult, Histogram<u64>), PerfError> {
    let latency = cfg.test.is_latency();
    let counted = cfg.duration.is_none();
    let n = if counted { cfg.iters as usize } else { 0 };
    let start = run_start.elapsed();
    let lp = Arc::new(Loop {
        client: client.clone(),
        clock: Instant::now(),
        plan: *plan,
        pat: Arc::clone(pat),
        latency,
        every: cfg.check_every_call,
        st: Mutex::new(LoopState {
            issued: 0,
            completed: 0,
            target: if counted { cfg.iters } else { u64::MAX },
            deadline: None,
            window: (0, 0),
            in_window: 0,
            rtts: if latency { vec![0; n] } else { Vec::new() },
            posted: if latency { Vec::new() } else { vec![0; n] },
            done_at: if latency { Vec::new() } else { vec![0; n] },
            hist: new_histogram(),
            checked: false,
            error: None,
            finished: false,
        }),
        cv: Condvar::new(),
    });
    progress.start();
    {
        let mut st = lock(&lp.st);
        if let Some(d) = cfg.duration {
            let m = margin_for(d).as_nanos() as u64;
            let d = d.as_nanos() as u64;
            let now = lp.now();
            st.deadline = Some(now + d);
            st.window = (now + m, now + d - m);
        }
        let first = cfg.effective_window().min(st.target);
        for _ in 0..first {
            if let Err(e) = lp.issue(&mut st) {
                st.error = Some(e);
                st.finished = true;
                break;
            }
        }
    }
    // Wait, ticking the progress indicator, until done or stalled.
    let mut st = lock(&lp.st);
    let (mut seen, mut since) = (0u64, Instant::now());
    while !st.finished {
        st = lp
            .cv
            .wait_timeout(st, WAKE)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        if st.completed != seen {
            seen = st.completed;
            since = Instant::now();
        } else if since.elapsed() > cfg.timeout {
            st.finished = true;
            st.error = Some(PerfError::Timeout("RPC replies (no progress)"));
        }
        let total = if counted { cfg.iters } else { 0 };
        progress.tick(size, st.completed, total);
    }
    progress.clear();
    if let Some(e) = st.error.take() {
        return Err(e);
    }
    let elapsed = run_start.elapsed() - start;
    // Octets per call the BW columns count (none for NULL calls).
    let size = if plan.null { 0 } else { size };
    let (iters, outcome) = match (cfg.duration, latency) {
        (Some(_), _) => {
            let span = st.window.1 - st.window.0;
            if latency {
                let (avg, tps) = lat_duration(st.in_window, span, 1);
                (st.in_window, Outcome::LatDuration { avg, tps })
            } else {
                let bw = BwStats::from_span(size, st.in_window, span, cfg.unit);
                (st.in_window, Outcome::Bw(bw))
            }
        }
        (None, true) => {
            let s = LatStats::from_round_trips(&mut st.rtts, 1)
                .ok_or(PerfError::Config("too few samples".into()))?;
            (st.completed, Outcome::Lat(s))
        }
        (None, false) => {
            let bw = if cfg.peak {
                BwStats::from_stamps(size, &st.posted, &st.done_at, cfg.unit)
            } else {
                let last = st.done_at.last().copied().unwrap_or(0);
                let first = st.posted.first().copied().unwrap_or(0);
                Some(BwStats::from_span(
                    size,
                    st.completed,
                    last.saturating_sub(first),
                    cfg.unit,
                ))
            }
            .ok_or(PerfError::Config("unusable stamps".into()))?;
            (st.completed, Outcome::Bw(bw))
        }
    };
    let hist = st.hist.clone();
    Ok((
        SizeResult {
            size,
            iters,
            outcome,
            start,
            elapsed,
        },
        hist,
    ))
}

/// The payload pattern for buffers of `n` octets.
pub(super) fn pattern_of(n: usize) -> Arc<[u8]> {
    (0..n as u64).map(|i| pattern(SEED, i)).collect()
}

/// Builds the world of one size: (size index, plan, pattern) → world.
type WorldFn<'a, P> = dyn FnMut(usize, &Plan, &Arc<[u8]>) -> Result<World<P>, PerfError> + 'a;

/// Runs every size of `cfg` on the worlds `world` builds.
pub(super) fn run_sizes<P: Provider>(
    cfg: &RpcConfig,
    obs: &mut dyn RpcObserver,
    world: &mut WorldFn<'_, P>,
) -> Result<Vec<SizeResult>, PerfError> {
    let plans = cfg.plans()?;
    let run_start = Instant::now();
    let mut progress = Progress::new(cfg.progress);
    let mut results = Vec::with_capacity(plans.len());
    for (k, (&size, plan)) in cfg.sizes.iter().zip(&plans).enumerate() {
        let pat = pattern_of(plan.buffer_size());
        let w = world(k, plan, &pat)?;
        if k == 0 {
            obs.connected(&w.info);
            obs.running(cfg);
        }
        let r = run_size(cfg, &w.client, plan, size, &pat, run_start, &mut progress);
        let snap = w.client.stats().snapshot();
        let completed = w.client.completed();
        w.stop();
        let (r, hist) = r?;
        let info = RpcSizeInfo {
            plan: *plan,
            completed,
            errors: snap.errors,
            credits_granted: snap.credits_granted,
        };
        obs.result(&r, &hist, &info);
        results.push(r);
    }
    Ok(results)
}
