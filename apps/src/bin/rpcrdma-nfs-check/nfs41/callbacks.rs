//! The backchannel side of the NFSv4.1 part: [`Callbacks`], the CB_COMPOUND handler our client
//! serves (CB_SEQUENCE checked against the session's backchannel slot, CB_RECALL answered for a
//! delegation we hold), its log of served calls, and the [`Returner`] that sends DELEGRETURN
//! from the handler's worker when asked to.
//!
//! Normal operation: each CB_COMPOUND is decoded by `nfs::v4::cb`, logged, answered, and its reply
//! held for `CB_HOLD` while counting outstanding calls (a server that keeps to the one backward
//! credit sends nothing else meanwhile). Recovery: a malformed call is answered with the error
//! `nfs::v4::cb` chooses and logged; waits for recalls have deadlines; a poisoned lock is taken over.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::v4::cb::{self as nfs4cb, CbRecall, CbServed, CbServer};
use rpcrdma_apps::nfs::v4::{self as nfs4, Op, SessionId, StateId, NFS4_OK};
use rpcrdma_poller::{BackchannelService, ConnStats, Proc, Program, Reject, ReplyBuilder, Request};

use super::super::ok;
use super::{lock, Slot, CB_CREDITS, CB_HOLD, CB_PROGRAM};

/// One CB_COMPOUND as the handler served it.
pub(super) struct CbCall {
    /// RPC program version and credential flavor of the call.
    pub(super) vers: u32,
    pub(super) cred_flavor: u32,
    pub(super) served: CbServed,
    /// Backward calls received and not answered yet (this one included), the larger of the
    /// values at arrival and after the hold.
    pub(super) outstanding: u64,
}

#[derive(Default)]
pub(super) struct CbLog {
    /// The session's backchannel (set once CREATE_SESSION succeeded).
    pub(super) server: Option<CbServer>,
    /// Delegations held: (stateid, file handle).
    pub(super) delegations: Vec<(StateId, Vec<u8>)>,
    pub(super) calls: Vec<CbCall>,
    /// Calls answered with an RPC error (no session yet, arguments that did not decode).
    pub(super) rejected: u32,
}

/// The callback program's state, shared with its handler (which runs on the client's worker).
pub(crate) struct Callbacks {
    pub(super) log: Mutex<CbLog>,
    pub(super) cv: Condvar,
    /// The connection's counters (set once connected), read by the handler.
    pub(super) stats: OnceLock<ConnStats>,
    /// Connection losses caused on purpose.
    pub(super) losses_caused: Mutex<u64>,
    /// Set: the CB_RECALL handler returns the delegation itself (a blocking forward call
    /// from the worker) before it answers.
    pub(super) returner: Mutex<Option<Returner>>,
}

/// What the CB_RECALL handler needs to send DELEGRETURN itself, and what it got.
pub(super) struct Returner {
    pub(super) client: rpcrdma_poller::Client,
    pub(super) session: SessionId,
    pub(super) slot: Slot,
    pub(super) highest: u32,
    pub(super) results: Vec<Result<String, String>>,
}

impl Returner {
    /// SEQUENCE + PUTFH + DELEGRETURN with `call_blocking`, from the handler's worker.
    pub(super) fn delegreturn(&mut self, r: &CbRecall) -> Result<String, String> {
        let ops = [
            Op::Sequence {
                session: self.session,
                sequence: self.slot.seq,
                slot: self.slot.id,
                highest_slot: self.highest,
                cache_this: false,
            },
            Op::PutFh(&r.fh),
            Op::DelegReturn(r.stateid),
        ];
        let enc = nfs4::encode_compound_minor("rpcrdma-nfs-check", 1, &ops);
        let c = &self.client;
        let mut args = c.args().ok_or("argument buffer pool exhausted")?;
        args.put(&enc.bytes).map_err(|e| format!("{e:?}"))?;
        args.expect_reply(1024);
        let t0 = Instant::now();
        let rep = c
            .call_blocking(
                Proc::new(nfs4::PROGRAM, nfs4::VERSION, nfs4::PROC_COMPOUND),
                args,
            )
            .map_err(|e| format!("DELEGRETURN from the handler: {e:?}"))?;
        let res = nfs4::decode_compound(rep.results(), &ops, nfs4::ReadPlacement::Inline)
            .map_err(|e| format!("DELEGRETURN reply: {e}"))?;
        if res.ops.first().is_some_and(|o| o.status == NFS4_OK) {
            self.slot.seq = self.slot.seq.wrapping_add(1);
        }
        ok(&res)?;
        Ok(format!(
            "the handler's DELEGRETURN (slot {}) answered NFS4_OK in {} ms",
            self.slot.id,
            t0.elapsed().as_millis()
        ))
    }
}

impl Callbacks {
    pub(crate) fn new() -> Arc<Callbacks> {
        Arc::new(Callbacks {
            log: Mutex::new(CbLog::default()),
            cv: Condvar::new(),
            stats: OnceLock::new(),
            losses_caused: Mutex::new(0),
            returner: Mutex::new(None),
        })
    }

    /// Connection losses the part caused on purpose (the reconnection round).
    pub(crate) fn losses_caused(&self) -> u64 {
        *lock(&self.losses_caused)
    }

    /// CB_RECALLs served so far.
    pub(super) fn recalls(&self) -> usize {
        lock(&self.log)
            .calls
            .iter()
            .map(|c| c.served.recalls.len())
            .sum()
    }

    /// What the client serves on its backchannel: CB_COMPOUND of [`CB_PROGRAM`] version 1
    /// (CB_NULL is answered by the dispatch), [`CB_CREDITS`] backward credits.
    pub(crate) fn service(self: &Arc<Self>) -> BackchannelService {
        let me = Arc::clone(self);
        let prog = Program::new(CB_PROGRAM, nfs4cb::VERSION..=nfs4cb::VERSION).procedure(
            nfs4cb::PROC_COMPOUND,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| me.on_compound(req, out),
        );
        BackchannelService::new().program(prog).credits(CB_CREDITS)
    }

    /// Backward calls received and not answered yet.
    pub(super) fn outstanding(&self) -> u64 {
        self.stats.get().map_or(0, |s| {
            let x = s.snapshot();
            x.back_calls.saturating_sub(x.back_replies)
        })
    }

    pub(super) fn on_compound(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Result<(), Reject> {
        let at_arrival = self.outstanding();
        let (reply, served) = {
            let mut g = lock(&self.log);
            let log = &mut *g;
            let delegations = &log.delegations;
            let Some(srv) = log.server.as_mut() else {
                log.rejected += 1;
                return Err(Reject::SystemErr);
            };
            let mut recall = |r: &CbRecall| {
                if delegations
                    .iter()
                    .any(|(s, fh)| *s == r.stateid && *fh == r.fh)
                {
                    NFS4_OK
                } else {
                    10_025 // NFS4ERR_BAD_STATEID
                }
            };
            match srv.serve(req.args, &mut recall) {
                Ok(x) => x,
                Err(_) => {
                    log.rejected += 1;
                    return Err(Reject::GarbageArgs);
                }
            }
        };
        let mut returner = lock(&self.returner);
        if let Some(ret) = returner.as_mut() {
            // Return each recalled delegation before answering (a blocking forward call on
            // this worker).
            for (r, st) in &served.recalls {
                if *st == NFS4_OK {
                    let res = ret.delegreturn(r);
                    ret.results.push(res);
                }
            }
        } else if !served.recalls.is_empty() {
            // Hold a recall's reply: a server that keeps to the backward credit it was
            // granted sends no other backward call until this one is answered.
            std::thread::sleep(CB_HOLD);
        }
        drop(returner);
        let after = self.outstanding();
        out.put(&reply).map_err(|_| Reject::SystemErr)?;
        lock(&self.log).calls.push(CbCall {
            vers: req.vers,
            cred_flavor: req.cred.flavor.to_u32(),
            served,
            outstanding: at_arrival.max(after),
        });
        self.cv.notify_all();
        Ok(())
    }

    /// Waits until `n` CB_RECALLs were served (or `limit` passed); the number served.
    pub(super) fn wait_recalls(&self, n: usize, limit: Duration) -> usize {
        let end = Instant::now() + limit;
        let mut g = lock(&self.log);
        loop {
            let got: usize = g.calls.iter().map(|c| c.served.recalls.len()).sum();
            let now = Instant::now();
            if got >= n || now >= end {
                return got;
            }
            g = self
                .cv
                .wait_timeout(g, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
