//! The server's loops: echo (send_lat, write_lat), keep receives posted and measure (send_bw),
//! or stay passive (read_lat, write_bw, read_bw) until the client disconnects.
//!
//! Normal operation: the loops poll the CQ and the QP's events; `stop` aborts a wait.
//! Recovery: the client's disconnect (event or flushed receives) is the normal end
//! ([`PerfError::Disconnected`]); any other error ends the server with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::{Provider, QueuePair, SendFlags, SendOp, SendWr};

use super::super::stats::BwStats;
use super::super::{Config, Outcome, PerfError, SizeResult, Test};

use super::client::{inline_flag, lat_signaled, signaled};
use super::conn::{show_work, Side, Work};
use super::{
    counter, new_histogram, pattern, Observer, CLIENT_SEED, LAT_SIGNAL_EVERY, SERVER_SEED,
};

pub(super) fn server_run<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(), PerfError> {
    debug_assert!(side.server);
    let r = match cfg.test {
        Test::SendLat => send_lat_server(cfg, side, stop),
        Test::WriteLat => write_lat_server(cfg, side, stop),
        Test::SendBw => send_bw_server(cfg, side, stop, obs),
        Test::ReadLat | Test::WriteBw | Test::ReadBw => passive_server(side, stop),
    };
    if show_work() {
        let iters = cfg.iters * u64::from(cfg.qps) * cfg.sizes.len() as u64;
        eprintln!(
            "{} (server)",
            side.work.per_iteration(&Work::default(), iters)
        );
    }
    r
}

/// One-sided tests: nothing to do but wait for the client to leave.
fn passive_server<P: Provider>(side: &mut Side<P>, stop: &AtomicBool) -> Result<(), PerfError> {
    loop {
        // Relaxed: a plain request flag.
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        side.check_events()?;
        side.poll()?;
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn send_lat_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
) -> Result<(), PerfError> {
    // LAT_RECVS receives were posted before the accept (`server_recvs`).
    let inline = cfg.inline.min(side.qps[0].options().max_inline_data);
    let mut seen_len = u32::MAX;
    let mut sent = 0u64;
    loop {
        let n = side.poll()?;
        if n == 0 {
            side.idle(Some(stop))?;
            continue;
        }
        for k in 0..n {
            let wc = side.wcs[k];
            if !wc.opcode.is_recv() {
                continue;
            }
            // The provider bounds byte_len by the receive buffer; clamp anyway.
            let len = u64::from(wc.byte_len).min(side.mem.area);
            if wc.byte_len != seen_len {
                // First message of a size: check it before answering (the next one lands in
                // the same buffer only after our answer).
                side.mem
                    .check(side.mem.recv_off(0), len, CLIENT_SEED, "send_lat message")?;
                seen_len = wc.byte_len;
            }
            side.post_recv(0, 1)?;
            let sgl = [side.mem.sge(side.mem.send_off(0), len)];
            side.post(
                0,
                &SendWr::<P> {
                    wr_id: sent,
                    op: SendOp::Send,
                    sgl: &sgl,
                    flags: signaled(sent, LAT_SIGNAL_EVERY) | inline_flag(len, inline),
                },
            )?;
            sent += 1;
        }
    }
}

fn write_lat_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
) -> Result<(), PerfError> {
    let inline = cfg.inline.min(side.qps[0].options().max_inline_data);
    let op = SendOp::RdmaWrite {
        remote_addr: side.peer.recv_addr(0),
        rkey: side.peer.rkey,
    };
    for &size in &cfg.sizes {
        let sgl = [side.mem.sge(side.mem.send_off(0), size)];
        let mark = side.mem.send_off(0) + size - 1;
        let polled = side.mem.recv_off(0) + size - 1;
        let n = if cfg.duration.is_some() {
            u64::MAX
        } else {
            cfg.iters
        };
        for i in 0..n {
            let c = counter(i);
            while side.mem.load(polled) != c {
                side.idle(Some(stop))?;
                if side.spins % 1024 == 0 {
                    side.poll()?;
                }
            }
            if i == 0 && size > 1 {
                side.mem.check(
                    side.mem.recv_off(0),
                    size - 1,
                    CLIENT_SEED,
                    "write_lat data",
                )?;
            }
            side.mem.store(mark, c);
            let flags = lat_signaled(i, n - 1) | inline_flag(size, inline);
            side.post(
                0,
                &SendWr::<P> {
                    wr_id: i,
                    op,
                    sgl: &sgl,
                    flags,
                },
            )?;
            if flags.contains(SendFlags::SIGNALED) {
                side.reap(Some(stop))?;
            }
        }
        side.mem.store(mark, pattern(SERVER_SEED, size - 1));
    }
    // Wait for the client to leave.
    passive_server(side, stop)
}

fn send_bw_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(), PerfError> {
    let qps = cfg.qps;
    // Each QP's receive queue was filled before the accept (`server_recvs`).
    let per_size = cfg.iters * u64::from(qps);
    let mut repost = vec![0u32; qps as usize];
    // Receives still to post per QP (perftest reposts only while `rcnt + rx_depth <= iters`);
    // unbounded in duration mode.
    let initial = u64::from(side.qps[0].options().max_recv_wr);
    let mut to_post = vec![
        match cfg.duration {
            Some(_) => u64::MAX,
            None => (cfg.iters * cfg.sizes.len() as u64).saturating_sub(initial),
        };
        qps as usize
    ];
    let hist = new_histogram();
    let run_start = Instant::now();
    let mut size_idx = 0usize;
    let (mut got, mut first) = (0u64, Instant::now());
    let mut seen_len = u32::MAX;
    loop {
        let n = side.poll()?;
        if n == 0 {
            side.idle(Some(stop))?;
            continue;
        }
        let now = Instant::now();
        for k in 0..n {
            let wc = side.wcs[k];
            if !wc.opcode.is_recv() {
                continue;
            }
            let q = (wc.wr_id as usize).min(qps as usize - 1);
            repost[q] += 1;
            // Every message of a size carries the same octets (the pattern depends on the
            // offset only): a duration run checks the first one of each size; a run of
            // iterations checks the last one, after the size's clock stopped.
            if cfg.duration.is_some() && wc.byte_len != seen_len {
                check_send_bw(side, q as u32, wc.byte_len)?;
                seen_len = wc.byte_len;
            }
            if got == 0 {
                first = now;
            }
            got += 1;
            if cfg.duration.is_none() && got == per_size {
                check_send_bw(side, q as u32, wc.byte_len)?;
                let size = cfg.sizes.get(size_idx).copied().unwrap_or(0);
                let span = now.duration_since(first);
                let r = SizeResult {
                    size,
                    iters: per_size,
                    outcome: Outcome::Bw(BwStats::from_span(
                        size,
                        per_size,
                        span.as_nanos() as u64,
                        cfg.unit,
                    )),
                    start: first.duration_since(run_start),
                    elapsed: span,
                };
                obs.result(&r, &hist);
                size_idx += 1;
                got = 0;
            }
        }
        for q in 0..qps {
            let qi = q as usize;
            let k = u64::from(repost[qi]).min(to_post[qi]) as u32;
            repost[qi] = 0;
            if k > 0 {
                side.post_recv(q, k)?;
                to_post[qi] -= u64::from(k);
            }
        }
    }
}

/// Checks the send_bw message of `len` octets in QP `q`'s receive area.
fn check_send_bw<P: Provider>(side: &Side<P>, q: u32, len: u32) -> Result<(), PerfError> {
    side.mem.check(
        side.mem.recv_off(q),
        u64::from(len).min(side.mem.area),
        CLIENT_SEED,
        "send_bw message",
    )
}
