//! The client's measuring loops: perftest's latency loops (send_lat ping-pong, write_lat with
//! memory polling, read_lat) and the bandwidth loop (a `tx_depth` window per QP, one signaled
//! WR per `cq_mod`), with post / completion stamps and the data checks after each size.
//!
//! Normal operation: every stamp array is allocated once for the run; the loops post, poll and
//! stamp without allocating. Recovery: the first verbs error, error completion, timeout or
//! data mismatch ends the run with its [`PerfError`].

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::{Completion, Provider, QueuePair, SendFlags, SendOp, SendWr, WcOpcode};

use super::super::report::Progress;
use super::super::stats::{lat_duration, BwStats, BwUnit, LatStats};
use super::super::{Config, Outcome, PerfError, SizeResult, Test};

use super::clock::Clock;
use super::conn::{show_work, Side};
use super::{
    counter, margin_for, new_histogram, pattern, Observer, CLIENT_SEED, LAT_RECVS,
    LAT_SIGNAL_EVERY, SERVER_SEED,
};

#[inline]
fn now_ns(clk: &Instant) -> u64 {
    clk.elapsed().as_nanos() as u64
}

pub(super) fn client_run<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    obs: &mut dyn Observer,
) -> Result<Vec<SizeResult>, PerfError> {
    let run_start = Instant::now();
    let mut hist = new_histogram();
    let mut progress = Progress::new(cfg.progress);
    let msgs = (cfg.iters * u64::from(cfg.qps)) as usize;
    // Every stamp array is allocated once for the whole run.
    let mut stamps: Vec<u64> = match (cfg.duration, cfg.test.is_latency()) {
        (None, true) => vec![0; cfg.iters as usize],
        (None, false) if cfg.peak => vec![0; msgs],
        _ => Vec::new(),
    };
    let mut completed: Vec<u64> = if cfg.duration.is_none() && !cfg.test.is_latency() && cfg.peak {
        vec![0; msgs]
    } else {
        Vec::new()
    };
    let mut bw = BwState::new(cfg);
    if cfg.test == Test::SendLat {
        side.post_recv(0, LAT_RECVS)?;
    }
    let mut results = Vec::with_capacity(cfg.sizes.len());
    let show_work = show_work();
    obs.running(cfg);
    for &size in &cfg.sizes {
        let work_before = side.work;
        hist.reset();
        progress.start();
        let start = run_start.elapsed();
        let mut lat = LatRun {
            cfg,
            size,
            hist: &mut hist,
            progress: &mut progress,
            stamps: &mut stamps,
        };
        let (iters, outcome) = match cfg.test {
            Test::SendLat => send_lat_client(&mut lat, side)?,
            Test::WriteLat => write_lat_client(&mut lat, side)?,
            Test::ReadLat => read_lat_client(&mut lat, side)?,
            _ => bw_client(
                cfg,
                side,
                size,
                &mut bw,
                &mut stamps,
                &mut completed,
                &mut hist,
                &mut progress,
            )?,
        };
        progress.clear();
        let r = SizeResult {
            size,
            iters,
            outcome,
            start,
            elapsed: run_start.elapsed() - start,
        };
        obs.result(&r, &hist);
        if show_work {
            eprintln!("{}", side.work.per_iteration(&work_before, iters));
        }
        results.push(r);
    }
    Ok(results)
}

struct LatRun<'a> {
    pub(super) cfg: &'a Config,
    pub(super) size: u64,
    pub(super) hist: &'a mut Histogram<u64>,
    pub(super) progress: &'a mut Progress,
    pub(super) stamps: &'a mut Vec<u64>,
}

impl LatRun<'_> {
    /// perftest's latency loop around `step(i)` (post iteration `i` and wait for its answer).
    pub(super) fn run(
        &mut self,
        rtt_factor: u32,
        mut step: impl FnMut(u64) -> Result<(), PerfError>,
    ) -> Result<(u64, Outcome), PerfError> {
        let factor = u64::from(rtt_factor);
        match self.cfg.duration {
            None => {
                let n = self.cfg.iters as usize;
                let stamps = &mut self.stamps[..n];
                // One stamp per iteration, as perftest's `tposted[scnt] = get_cycles()`.
                let clk = Clock::start();
                for (i, stamp) in stamps.iter_mut().enumerate() {
                    *stamp = clk.now();
                    step(i as u64)?;
                    if i & 0xfff == 0xfff {
                        self.progress.tick(self.size, i as u64, n as u64);
                    }
                }
                clk.rate().convert(stamps);
                for i in 0..n - 1 {
                    stamps[i] = stamps[i + 1].saturating_sub(stamps[i]);
                    self.hist.saturating_record((stamps[i] / factor).max(1));
                }
                let s = LatStats::from_round_trips(&mut stamps[..n - 1], rtt_factor)
                    .ok_or_else(|| PerfError::Config("too few iterations".into()))?;
                Ok((n as u64, Outcome::Lat(s)))
            }
            Some(d) => {
                let clk = Instant::now();
                let m = margin_for(d).as_nanos() as u64;
                let end = d.as_nanos() as u64;
                let (mut count, mut span) = (0u64, 0u64);
                let mut prev = now_ns(&clk);
                let mut i = 0u64;
                loop {
                    step(i)?;
                    i += 1;
                    let now = now_ns(&clk);
                    let rtt = now - prev;
                    prev = now;
                    if now >= m && now < end - m {
                        count += 1;
                        span += rtt;
                        self.hist.saturating_record((rtt / factor).max(1));
                    }
                    if now >= end {
                        break;
                    }
                    if i & 0xfff == 0 {
                        self.progress.tick(self.size, i, 0);
                    }
                }
                let (avg, tps) = lat_duration(count, span, rtt_factor);
                Ok((count, Outcome::LatDuration { avg, tps }))
            }
        }
    }
}

pub(super) fn signaled(i: u64, every: u64) -> SendFlags {
    if i % every == every - 1 {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    }
}

/// A latency loop's WR `i` of `last + 1`: signaled every `LAT_SIGNAL_EVERY` and on the last
/// one of a size, whose completion retires the unsignaled WRs before it. Without the last one,
/// a size of fewer iterations than the interval (perftest's minimum `-n` is 5) would leave its
/// WRs in the send queue, and `-a` would fill the queue after a few sizes.
pub(super) fn lat_signaled(i: u64, last: u64) -> SendFlags {
    if i == last {
        SendFlags::SIGNALED
    } else {
        signaled(i, LAT_SIGNAL_EVERY)
    }
}

/// The index of a size's last iteration (none in a duration run).
fn lat_last(cfg: &Config) -> u64 {
    match cfg.duration {
        Some(_) => u64::MAX,
        None => cfg.iters.saturating_sub(1),
    }
}

pub(super) fn inline_flag(size: u64, inline: u32) -> SendFlags {
    if size <= u64::from(inline) {
        SendFlags::INLINE
    } else {
        SendFlags::NONE
    }
}

fn send_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.send_off(0), size)];
    let inline = inline_flag(
        size,
        lat.cfg.inline.min(side.qps[0].options().max_inline_data),
    );
    let last = lat_last(lat.cfg);
    let r = lat.run(2, |i| {
        let wr = SendWr::<P> {
            wr_id: i,
            op: SendOp::Send,
            sgl: &sge,
            flags: lat_signaled(i, last) | inline,
        };
        side.post(0, &wr)?;
        loop {
            let n = side.poll()?;
            let mut got = None;
            for wc in &side.wcs[..n] {
                if wc.opcode.is_recv() {
                    got = Some(wc.byte_len);
                }
            }
            if let Some(len) = got {
                if u64::from(len) != size {
                    return Err(PerfError::Verify(format!(
                        "echo of {len} octets, expected {size}"
                    )));
                }
                if i == 0 {
                    side.mem
                        .check(side.mem.recv_off(0), size, SERVER_SEED, "send_lat echo")?;
                }
                side.post_recv(0, 1)?;
                return Ok(());
            }
            side.idle(None)?;
        }
    })?;
    Ok(r)
}

fn write_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.send_off(0), size)];
    let mark = side.mem.send_off(0) + size - 1;
    let polled = side.mem.recv_off(0) + size - 1;
    let inline = inline_flag(
        size,
        lat.cfg.inline.min(side.qps[0].options().max_inline_data),
    );
    let op = SendOp::RdmaWrite {
        remote_addr: side.peer.recv_addr(0),
        rkey: side.peer.rkey,
    };
    let last = lat_last(lat.cfg);
    let r = lat.run(2, |i| {
        let c = counter(i);
        side.mem.store(mark, c);
        let flags = lat_signaled(i, last) | inline;
        side.post(
            0,
            &SendWr::<P> {
                wr_id: i,
                op,
                sgl: &sge,
                flags,
            },
        )?;
        while side.mem.load(polled) != c {
            side.idle(None)?;
            if side.spins % 1024 == 0 {
                side.poll()?;
            }
        }
        if flags.contains(SendFlags::SIGNALED) {
            // Reap the completion (it retires the unsignaled writes before it).
            side.reap(None)?;
        }
        Ok(())
    })?;
    // The echo carried the server's pattern; restore our marker octet for the next size.
    if size > 1 {
        side.mem.check(
            side.mem.recv_off(0),
            size - 1,
            SERVER_SEED,
            "write_lat echo",
        )?;
    }
    side.mem.store(mark, pattern(CLIENT_SEED, size - 1));
    side.reap(None)?;
    Ok(r)
}

fn read_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.recv_off(0), size)];
    let op = SendOp::RdmaRead {
        remote_addr: side.peer.send_addr(0),
        rkey: side.peer.rkey,
    };
    let r = lat.run(1, |i| {
        side.post(
            0,
            &SendWr::<P> {
                wr_id: i,
                op,
                sgl: &sge,
                flags: SendFlags::SIGNALED,
            },
        )?;
        side.reap(None)
    })?;
    side.mem
        .check(side.mem.recv_off(0), size, SERVER_SEED, "read_lat data")?;
    Ok(r)
}

/// Per-run BW counters, allocated once.
struct BwState {
    pub(super) scnt: Vec<u64>,
    pub(super) ccnt: Vec<u64>,
    /// Post time of each QP's outstanding signaled WRs (a ring per QP).
    pub(super) sig_post: Vec<u64>,
    pub(super) sig_ring: usize,
    pub(super) sig_head: Vec<u64>,
    pub(super) sig_tail: Vec<u64>,
}

impl BwState {
    pub(super) fn new(cfg: &Config) -> BwState {
        let q = cfg.qps as usize;
        let ring = (cfg.tx_depth / cfg.cq_mod.max(1)) as usize + 2;
        BwState {
            scnt: vec![0; q],
            ccnt: vec![0; q],
            sig_post: vec![0; q * ring],
            sig_ring: ring,
            sig_head: vec![0; q],
            sig_tail: vec![0; q],
        }
    }

    fn reset(&mut self) {
        self.scnt.iter_mut().for_each(|x| *x = 0);
        self.ccnt.iter_mut().for_each(|x| *x = 0);
        self.sig_head.iter_mut().for_each(|x| *x = 0);
        self.sig_tail.iter_mut().for_each(|x| *x = 0);
    }
}

/// One size of a bandwidth run: its parameters and running totals (perftest's `run_iter_bw`
/// counters).
struct BwSize {
    size: u64,
    iters: u64,
    qps: u32,
    tx: u64,
    cq_mod: u64,
    inline: SendFlags,
    duration: Option<Duration>,
    peak: bool,
    /// WRs to complete (`u64::MAX` in duration mode).
    tot: u64,
    clk: Instant,
    /// Measurement window in duration mode: `[m, end - m)` ns after `clk`.
    m: u64,
    end: u64,
    totscnt: u64,
    totccnt: u64,
    sampled: u64,
    sample_start: u64,
    sample_end: u64,
}

impl BwSize {
    /// The counters of `size`; clears the completion stamps of a peak run first, then starts
    /// the clock.
    fn new<P: Provider>(cfg: &Config, side: &Side<P>, size: u64, tcompleted: &mut [u64]) -> BwSize {
        let inline = if cfg.test.is_read() {
            SendFlags::NONE
        } else {
            inline_flag(size, cfg.inline.min(side.qps[0].options().max_inline_data))
        };
        let duration = cfg.duration;
        let peak = duration.is_none() && cfg.peak;
        let tot = if duration.is_some() {
            u64::MAX
        } else {
            cfg.iters * u64::from(cfg.qps)
        };
        if peak {
            tcompleted[..tot as usize].iter_mut().for_each(|x| *x = 0);
        }
        let clk = Instant::now();
        let (m, end) = match duration {
            Some(d) => (margin_for(d).as_nanos() as u64, d.as_nanos() as u64),
            None => (0, u64::MAX),
        };
        BwSize {
            size,
            iters: cfg.iters,
            qps: cfg.qps,
            tx: u64::from(cfg.tx_depth),
            cq_mod: u64::from(cfg.cq_mod),
            inline,
            duration,
            peak,
            tot,
            clk,
            m,
            end,
            totscnt: 0,
            totccnt: 0,
            sampled: 0,
            sample_start: 0,
            sample_end: 0,
        }
    }

    /// Fills every QP's window (`tx_depth` beyond its completions, at most its iterations):
    /// queues the WRs, then one doorbell per QP for all of them (as perftest's `--post_list`). The
    /// batch's post stamp, taken once before the doorbells, is every WR's post time (peak) and
    /// each signaled WR's (histogram).
    #[inline]
    fn post_window<P: Provider>(
        &mut self,
        test: Test,
        side: &mut Side<P>,
        st: &mut BwState,
        tposted: &mut [u64],
    ) -> Result<(), PerfError> {
        let (iters, cq_mod, duration) = (self.iters, self.cq_mod, self.duration);
        let mut now = None;
        for q in 0..self.qps {
            let qi = q as usize;
            let room = (self.tx + st.ccnt[qi]).saturating_sub(st.scnt[qi]);
            let left = if duration.is_some() {
                room
            } else {
                room.min(iters - st.scnt[qi].min(iters))
            };
            if left == 0 {
                continue;
            }
            let now = *now.get_or_insert_with(|| now_ns(&self.clk));
            let size = self.size;
            let (op, sge) = match test {
                Test::SendBw => (SendOp::Send, side.mem.sge(side.mem.send_off(q), size)),
                Test::WriteBw => (
                    SendOp::RdmaWrite {
                        remote_addr: side.peer.recv_addr(q),
                        rkey: side.peer.rkey,
                    },
                    side.mem.sge(side.mem.send_off(q), size),
                ),
                _ => (
                    SendOp::RdmaRead {
                        remote_addr: side.peer.send_addr(q),
                        rkey: side.peer.rkey,
                    },
                    side.mem.sge(side.mem.recv_off(q), size),
                ),
            };
            let sgl = [sge];
            for _ in 0..left {
                let s = st.scnt[qi];
                let sig = s % cq_mod == cq_mod - 1 || (duration.is_none() && s == iters - 1);
                if self.peak {
                    tposted[self.totscnt as usize] = now;
                }
                let flags = if sig {
                    let k = (st.sig_head[qi] % st.sig_ring as u64) as usize;
                    st.sig_post[qi * st.sig_ring + k] = now;
                    st.sig_head[qi] += 1;
                    SendFlags::SIGNALED | self.inline
                } else {
                    self.inline
                };
                side.queue(
                    q,
                    &SendWr::<P> {
                        wr_id: u64::from(q),
                        op,
                        sgl: &sgl,
                        flags,
                    },
                )?;
                st.scnt[qi] += 1;
                self.totscnt += 1;
            }
            side.flush(q)?;
        }
        Ok(())
    }

    /// Counts the completions `wcs` polled at `now`: each signaled one completes `cq_mod` WRs
    /// of its QP; records the signaled WR's post-to-completion time, the peak stamps and the
    /// duration-mode sample.
    #[inline]
    fn complete(
        &mut self,
        wcs: &[Completion],
        now: u64,
        st: &mut BwState,
        hist: &mut Histogram<u64>,
        tcompleted: &mut [u64],
    ) {
        let (iters, cq_mod, duration) = (self.iters, self.cq_mod, self.duration);
        for wc in wcs {
            let q = wc.wr_id as usize;
            if q >= self.qps as usize || wc.opcode.is_recv() {
                continue;
            }
            let fill = if duration.is_some() {
                cq_mod
            } else {
                cq_mod.min(iters - st.ccnt[q].min(iters))
            };
            if fill == 0 {
                continue;
            }
            st.ccnt[q] += fill;
            self.totccnt += fill;
            if st.sig_tail[q] < st.sig_head[q] {
                let k = (st.sig_tail[q] % st.sig_ring as u64) as usize;
                hist.saturating_record(now.saturating_sub(st.sig_post[q * st.sig_ring + k]).max(1));
                st.sig_tail[q] += 1;
            }
            if self.peak {
                tcompleted[(self.totccnt.min(self.tot) - 1) as usize] = now;
            }
            if duration.is_some() && now >= self.m && now < self.end - self.m {
                if self.sampled == 0 {
                    self.sample_start = now;
                }
                self.sampled += fill;
                self.sample_end = now;
            }
        }
    }

    /// The size's statistics: over the duration-mode sample, from the peak stamps, or over
    /// the span from the first post (`first_post`) to the end (`last`).
    fn stats(
        &self,
        unit: BwUnit,
        first_post: u64,
        last: u64,
        tposted: &[u64],
        tcompleted: &[u64],
    ) -> Result<BwStats, PerfError> {
        let size = self.size;
        Ok(if self.duration.is_some() {
            BwStats::from_span(
                size,
                self.sampled,
                self.sample_end.saturating_sub(self.sample_start),
                unit,
            )
        } else if self.peak {
            let t = self.tot as usize;
            BwStats::from_stamps(size, &tposted[..t], &tcompleted[..t], unit)
                .ok_or_else(|| PerfError::Config("missing completion stamps".into()))?
        } else {
            BwStats::from_span(size, self.tot, last - first_post, unit)
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn bw_client<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    size: u64,
    st: &mut BwState,
    tposted: &mut [u64],
    tcompleted: &mut [u64],
    hist: &mut Histogram<u64>,
    progress: &mut Progress,
) -> Result<(u64, Outcome), PerfError> {
    st.reset();
    let mut b = BwSize::new(cfg, side, size, tcompleted);
    let first_post = now_ns(&b.clk);
    let mut loops = 0u32;
    loop {
        b.post_window(cfg.test, side, st, tposted)?;
        if b.duration.is_none() && b.totccnt >= b.tot {
            break;
        }
        let n = side.poll()?;
        if n == 0 {
            side.idle(None)?;
            if b.duration.is_none() {
                continue;
            }
        }
        // Stamped only when something completed (perftest's `tcompleted`), and in duration
        // mode to end the run.
        let now = now_ns(&b.clk);
        b.complete(&side.wcs[..n], now, st, hist, tcompleted);
        if b.duration.is_some() && now >= b.end {
            break;
        }
        loops = loops.wrapping_add(1);
        if loops & 0xf == 0 {
            let tot = if b.duration.is_some() { 0 } else { b.tot };
            progress.tick(size, b.totccnt.min(b.tot), tot);
        }
    }
    let last = now_ns(&b.clk);
    let stats = b.stats(cfg.unit, first_post, last, tposted, tcompleted)?;
    bw_verify(cfg, side, size)?;
    let iters_reported = if b.duration.is_some() {
        b.sampled
    } else {
        b.tot
    };
    Ok((iters_reported, Outcome::Bw(stats)))
}

/// After a BW size: READ data must be the server's pattern; WRITE data is read back from the
/// server's receive area (one extra, untimed RDMA READ) and compared with ours.
fn bw_verify<P: Provider>(cfg: &Config, side: &mut Side<P>, size: u64) -> Result<(), PerfError> {
    match cfg.test {
        Test::ReadBw => {
            // Drain leftovers of a duration run (the last reads may be unsignaled).
            read_back(side, side.peer.send_addr(0), size)?;
            side.mem
                .check(side.mem.recv_off(0), size, SERVER_SEED, "read_bw data")
        }
        Test::WriteBw => {
            for q in 0..cfg.qps {
                read_back_q(side, q, side.peer.recv_addr(q), size)?;
                side.mem.check(
                    side.mem.recv_off(q),
                    size,
                    CLIENT_SEED,
                    "write_bw data at the server",
                )?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn read_back<P: Provider>(side: &mut Side<P>, remote: u64, size: u64) -> Result<(), PerfError> {
    read_back_q(side, 0, remote, size)
}

/// One signaled RDMA READ of `size` octets at `remote` into QP `q`'s receive area; waits for
/// it (RC ordering: it also retires every earlier WR of the QP).
fn read_back_q<P: Provider>(
    side: &mut Side<P>,
    q: u32,
    remote: u64,
    size: u64,
) -> Result<(), PerfError> {
    const READ_BACK: u64 = u64::MAX;
    let sgl = [side.mem.sge(side.mem.recv_off(q), size)];
    side.post(
        q,
        &SendWr::<P> {
            wr_id: READ_BACK,
            op: SendOp::RdmaRead {
                remote_addr: remote,
                rkey: side.peer.rkey,
            },
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    )?;
    loop {
        let n = side.poll()?;
        if side.wcs[..n]
            .iter()
            .any(|wc| wc.wr_id == READ_BACK && wc.opcode == WcOpcode::RDMA_READ)
        {
            return Ok(());
        }
        if n == 0 {
            side.idle(None)?;
        }
    }
}
