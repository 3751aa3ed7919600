//! The soft NIC of one QP: its receive queue (token, delivery, flush), its send engine (the
//! send queue executed at the doorbell: SEND, Send With Invalidate, RDMA Write/Read, LOCAL_INV,
//! BIND_MW through the key tables), RNR retries, and the packet trace.
//!
//! Normal operation: `run` executes the send queue in order on the thread that holds the
//! queue's lock; each WR is checked (keys, PD, rights, bounds) and copied through pinned
//! registrations; completions are generated as each WR finishes. Recovery: a failed WR completes
//! with its error status and moves both QPs to ERROR (`go_error`); everything outstanding is
//! then flushed with `WR_FLUSH_ERR` by whichever thread holds (or next takes) the queue's lock.

use std::sync::atomic::Ordering;

use crossbeam_utils::Backoff;

use super::super::mr::MAX_SGE;
use super::super::trace::{TraceEvent, TraceOp};
use super::entries::{copy_segs, RecvEntry, Seg, SegList, SqEntry, SqOp};
use super::{Outcome, QpShared, SendEngine, DESTROYED, MAX_MSG, MTU};
use crate::verbs::{
    Access, Completion, QpState, SendFlags, WcFlags, WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};

/// What completing the head send WR needs of it, taken before the engine is borrowed mutably.
#[derive(Clone, Copy)]
pub(super) struct Retired {
    wr_id: u64,
    opcode: WcOpcode,
    flags: SendFlags,
}

impl QpShared {
    pub(super) fn rq_acquire(&self) {
        let backoff = Backoff::new();
        // SeqCst: Dekker half paired with go_error's state exchange (see rq_release).
        while self.rq_token.swap(true, Ordering::SeqCst) {
            backoff.snooze();
        }
    }

    pub(super) fn rq_release(&self) {
        // SeqCst: pairs with go_error's SeqCst state change so one side sees the other.
        self.rq_token.store(false, Ordering::SeqCst);
        if self.raw_state() >= QpState::Error as u8 && self.rq_nonempty() {
            self.rq_try_flush();
        }
    }

    pub(super) fn rq_nonempty(&self) -> bool {
        self.rq.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// Flushes the receive queue if the QP is in ERROR (or drops it if destroyed), unless the
    /// token is busy: its holder re-checks on release.
    pub(super) fn rq_try_flush(&self) {
        loop {
            let st = self.raw_state();
            if st < QpState::Error as u8 || !self.rq_nonempty() {
                return;
            }
            // SeqCst: see rq_acquire.
            if self.rq_token.swap(true, Ordering::SeqCst) {
                return;
            }
            if let Some(rq) = &self.rq {
                // SAFETY: we hold rq_token, which makes us the ring's only consumer.
                while let Some(wr_id) = unsafe { rq.take(|r| r.wr_id) } {
                    if st == QpState::Error as u8 {
                        self.push_completion(self.flush_wc(wr_id, WcOpcode::RECV), true);
                    }
                }
            }
            // SeqCst: see rq_release.
            self.rq_token.store(false, Ordering::SeqCst);
        }
    }

    pub(super) fn flush_wc(&self, wr_id: u64, opcode: WcOpcode) -> Completion {
        Completion {
            wr_id,
            status: WcStatus::WR_FLUSH_ERR,
            opcode,
            qp_num: self.qp_num,
            ..Completion::default()
        }
    }

    /// Delivers a SEND into this QP (the responder), with the receive token held.
    /// Returns the byte count, RNR, or the status the *requester* gets.
    pub(super) fn deliver(
        &self,
        src_qpn: u32,
        src: &SegList<'_>,
        inv: Option<u32>,
    ) -> Result<u32, Option<WcStatus>> {
        if !self.can_receive() {
            return Err(Some(WcStatus::RETRY_EXC_ERR));
        }
        let taken = match (&self.srq, &self.rq) {
            (Some(srq), _) => srq
                .ring
                .pop()
                .map(|r| self.deliver_into(&r, srq.pd, src_qpn, src, inv)),
            // SAFETY: the caller holds rq_token, which makes us the ring's only consumer. The
            // entry is read in place and its slot released once the delivery is done.
            (None, Some(rq)) => unsafe {
                rq.take(|r| self.deliver_into(r, self.pd, src_qpn, src, inv))
            },
            (None, None) => None,
        };
        let Some((wc, res)) = taken else {
            return Err(None); // RNR
        };
        // After the slot is released, so a consumer of this completion can repost at once.
        self.push_completion(wc, true);
        res
    }

    /// [`deliver`](Self::deliver) into the receive `r` (taken from the queue whatever the
    /// outcome), whose buffers are registered in PD `recv_pd`: the receive's completion (the
    /// caller pushes it) and the result for the requester.
    fn deliver_into(
        &self,
        r: &RecvEntry,
        recv_pd: u32,
        src_qpn: u32,
        src: &SegList<'_>,
        inv: Option<u32>,
    ) -> (Completion, Result<u32, Option<WcStatus>>) {
        let total = src.total;
        let mut wc = Completion {
            wr_id: r.wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV,
            byte_len: 0,
            qp_num: self.qp_num,
            src_qp: src_qpn,
            ..Completion::default()
        };
        let sges = &r.sges[..(r.num_sge as usize).min(MAX_SGE)];
        let capacity: u64 = sges.iter().map(|s| s.len as u64).sum();
        if total > capacity {
            wc.status = WcStatus::LOC_LEN_ERR;
            return (wc, Err(Some(WcStatus::REM_INV_REQ_ERR)));
        }
        // The destination is unpinned at the end of this scope, before an invalidation (a scope,
        // not `drop(dst)`: moving the list, hundreds of octets, into `drop` would copy it).
        {
            let mut dst = SegList::new();
            let mut need = total;
            for s in sges {
                if need == 0 {
                    break;
                }
                if s.len == 0 {
                    continue;
                }
                let take = need.min(s.len as u64);
                match self.dev.keys.pin_local(s.lkey, s.addr, take, true, recv_pd) {
                    Some(pin) => dst.push(
                        Seg {
                            ptr: s.addr as *mut u8,
                            len: take as usize,
                        },
                        Some(pin),
                    ),
                    None => {
                        wc.status = WcStatus::LOC_PROT_ERR;
                        return (wc, Err(Some(WcStatus::REM_OP_ERR)));
                    }
                }
                need -= take;
            }
            // SAFETY: source segments are pinned by the requester (or are its inline buffer),
            // destination segments are pinned above; `total` fits both (checked).
            unsafe { copy_segs(src.segs(), dst.segs(), total as usize) };
        }
        if let Some(rkey) = inv {
            if !self.dev.keys.invalidate(rkey, self.pd, Some(self.qp_num)) {
                wc.status = WcStatus::REM_INV_REQ_ERR;
                return (wc, Err(Some(WcStatus::REM_INV_REQ_ERR)));
            }
            wc.flags = WcFlags::WITH_INV;
            wc.invalidated_rkey = rkey;
        }
        wc.byte_len = total as u32;
        (wc, Ok(total as u32))
    }

    // --- send queue -------------------------------------------------------------------------

    /// Runs `f` on the engine with the send-queue lock held (spinning for it), then drives
    /// whatever was requested meanwhile.
    pub(super) fn with_engine<R>(&self, f: impl FnOnce(&mut SendEngine) -> R) -> R {
        let backoff = Backoff::new();
        // SeqCst: lock handshake with sq_drive's dirty re-check.
        while self.sq_lock.swap(true, Ordering::SeqCst) {
            backoff.snooze();
        }
        // SAFETY: we hold sq_lock, the only way to reach the engine.
        let r = f(unsafe { &mut *self.engine.get() });
        self.sq_unlock();
        r
    }

    pub(super) fn sq_unlock(&self) {
        loop {
            // SeqCst: pairs with sq_kick's dirty store + lock swap. Loaded before the swap so an
            // unlock with nothing requested (the common case) does no read-modify-write; a kick
            // landing after the load is seen by the re-check below.
            while self.sq_dirty.load(Ordering::SeqCst)
                && self.sq_dirty.swap(false, Ordering::SeqCst)
            {
                // SAFETY: we hold sq_lock.
                self.run(unsafe { &mut *self.engine.get() });
            }
            self.sq_lock.store(false, Ordering::SeqCst);
            if !self.sq_dirty.load(Ordering::SeqCst) {
                return;
            }
            // SeqCst: re-take the lock; pairs with sq_kick's dirty store + swap.
            if self.sq_lock.swap(true, Ordering::SeqCst) {
                return; // someone else holds it now and will see the dirty flag
            }
        }
    }

    /// Asks for the send queue to be driven (by us now, or by its current holder).
    pub(super) fn sq_kick(&self) {
        // SeqCst: the holder re-checks `sq_dirty` after unlocking.
        self.sq_dirty.store(true, Ordering::SeqCst);
        if self.sq_lock.swap(true, Ordering::SeqCst) {
            return;
        }
        self.sq_unlock();
    }

    pub(super) fn retire(&self, e: &mut SendEngine) {
        let n = e.unsignaled + 1;
        e.unsignaled = 0;
        // Only the send-queue lock's holder (we have the engine) writes `sq_retired`, and the
        // lock's swap/store order one holder's store before the next one's load: a load and a
        // store, not a read-modify-write. Relaxed: our own last store. Release: pairs with the
        // owner's Acquire load in `send_queue_used`.
        let v = self.sq_retired.load(Ordering::Relaxed);
        self.sq_retired.store(v.wrapping_add(n), Ordering::Release);
    }

    /// Executes queued send WRs in order until empty, RNR-blocked, or everything is flushed.
    pub(super) fn run(&self, e: &mut SendEngine) {
        loop {
            if e.len == 0 {
                e.rnr_left = None;
                self.clear_work(&self.rnr_waiting);
                return;
            }
            let st = self.raw_state();
            if st == QpState::Error as u8 || st == DESTROYED {
                while e.len > 0 {
                    let w = &e.ring[e.head];
                    let (wr_id, opcode) = (w.wr_id, w.op.opcode());
                    e.pop_head();
                    if st == QpState::Error as u8 {
                        self.push_completion(self.flush_wc(wr_id, opcode), false);
                    }
                    self.retire(e);
                }
                continue;
            }
            // Borrowed in place (an entry is hundreds of octets); `done` keeps what `finish`
            // needs once the engine is borrowed mutably again.
            let w = &e.ring[e.head];
            let done = Retired {
                wr_id: w.wr_id,
                opcode: w.op.opcode(),
                flags: w.flags,
            };
            let inline = Seg {
                // SAFETY: the slot's inline area lies inside `e.inline` (head < ring length,
                // area = max_inline octets); it is not modified while the entry executes.
                ptr: unsafe { e.inline.as_mut_ptr().add(e.head * e.max_inline) },
                len: w.inline_len as usize,
            };
            let attempt_first = e.rnr_left.is_none();
            if attempt_first {
                e.executed += 1;
            }
            // Relaxed: fault-injection settings written by the test thread before posting.
            let fail_at = self.fail_at.load(Ordering::Relaxed);
            let outcome = if attempt_first && fail_at != 0 && fail_at == e.executed {
                self.fail_at.store(0, Ordering::Relaxed);
                Outcome::Fail(WcStatus(self.fail_status.load(Ordering::Relaxed)))
            } else {
                let peer = e.peer.as_deref();
                self.execute(peer, &mut e.psn, w, inline)
            };
            match outcome {
                Outcome::Rnr => {
                    let left = e.rnr_left.unwrap_or(e.rnr_retry);
                    if left == 0 {
                        self.finish(e, done, WcStatus::RNR_RETRY_EXC_ERR, 0);
                    } else {
                        e.rnr_left = Some(if left >= RNR_RETRY_INFINITE {
                            RNR_RETRY_INFINITE
                        } else {
                            left - 1
                        });
                        self.set_work(&self.rnr_waiting);
                        return;
                    }
                }
                Outcome::Done(n) => self.finish(e, done, WcStatus::SUCCESS, n),
                Outcome::Fail(s) => self.finish(e, done, s, 0),
            }
        }
    }

    /// Pops the head WR with `status`, completing it if signaled or failed.
    pub(super) fn finish(&self, e: &mut SendEngine, w: Retired, status: WcStatus, byte_len: u32) {
        e.pop_head();
        e.rnr_left = None;
        self.clear_work(&self.rnr_waiting);
        if status.is_success() && !w.flags.contains(SendFlags::SIGNALED) {
            e.unsignaled += 1;
            return;
        }
        let c = Completion {
            wr_id: w.wr_id,
            status,
            opcode: w.opcode,
            byte_len,
            qp_num: self.qp_num,
            ..Completion::default()
        };
        self.push_completion(c, false);
        self.retire(e);
        if !status.is_success() {
            self.connection_down();
        }
    }

    /// Validates and pins a local SGL (`write`: the device writes into it) into `l` (empty),
    /// built in place: a `SegList` is hundreds of octets, so it is never returned by value.
    pub(super) fn local_segs<'a>(
        &'a self,
        w: &SqEntry,
        write: bool,
        l: &mut SegList<'a>,
    ) -> Result<(), WcStatus> {
        for s in w.used_sges() {
            if s.len == 0 {
                continue;
            }
            let pin = self
                .dev
                .keys
                .pin_local(s.lkey, s.addr, s.len as u64, write, self.pd)
                .ok_or(WcStatus::LOC_PROT_ERR)?;
            l.push(
                Seg {
                    ptr: s.addr as *mut u8,
                    len: s.len as usize,
                },
                Some(pin),
            );
        }
        if l.total > MAX_MSG {
            return Err(WcStatus::LOC_LEN_ERR);
        }
        Ok(())
    }

    /// The source segments of a Send or RDMA Write into `l` (empty): the inline area or the
    /// pinned local SGL.
    pub(super) fn gather<'a>(
        &'a self,
        w: &SqEntry,
        inline: Seg,
        l: &mut SegList<'a>,
    ) -> Result<(), WcStatus> {
        if w.flags.contains(SendFlags::INLINE) {
            if inline.len > 0 {
                l.push(inline, None);
            }
            return Ok(());
        }
        self.local_segs(w, false, l)
    }

    /// The peer a Send, RDMA Write or RDMA Read reaches, if it can still receive (otherwise
    /// the WR ends as [`QpShared::peer_gone`] says), once `segs` has built the WR's local
    /// segments (otherwise it fails with their status).
    fn reach<'p>(
        &self,
        peer: Option<&'p QpShared>,
        segs: impl FnOnce() -> Result<(), WcStatus>,
    ) -> Result<&'p QpShared, Outcome> {
        let Some(peer) = peer.filter(|p| p.can_receive()) else {
            return Err(self.peer_gone());
        };
        segs().map_err(Outcome::Fail)?;
        Ok(peer)
    }

    pub(super) fn execute(
        &self,
        peer: Option<&QpShared>,
        psn: &mut u32,
        w: &SqEntry,
        inline: Seg,
    ) -> Outcome {
        match w.op {
            SqOp::LocalInv(rkey) => {
                if self.dev.keys.invalidate(rkey, self.pd, None) {
                    Outcome::Done(0)
                } else {
                    Outcome::Fail(WcStatus::LOC_QP_OP_ERR)
                }
            }
            SqOp::Bind(req) => match self.dev.keys.bind(&req) {
                Ok(()) => Outcome::Done(0),
                Err(_) => Outcome::Fail(WcStatus::MW_BIND_ERR),
            },
            SqOp::Send | SqOp::SendInv(_) => {
                let mut src = SegList::new();
                let peer = match self.reach(peer, || self.gather(w, inline, &mut src)) {
                    Ok(p) => p,
                    Err(out) => return out,
                };
                let inv = match w.op {
                    SqOp::SendInv(k) => Some(k),
                    _ => None,
                };
                peer.rq_acquire();
                let r = peer.deliver(self.qp_num, &src, inv);
                peer.rq_release();
                let out = match r {
                    Ok(n) => Outcome::Done(n),
                    Err(None) => return Outcome::Rnr,
                    Err(Some(WcStatus::RETRY_EXC_ERR)) => return self.peer_gone(),
                    Err(Some(s)) => Outcome::Fail(s),
                };
                let op = if inv.is_some() {
                    TraceOp::SendWithInv
                } else {
                    TraceOp::Send
                };
                self.trace(peer, psn, op, &src, src.total, 0, 0, inv.unwrap_or(0), &out);
                out
            }
            SqOp::Write { raddr, rkey } => {
                let mut src = SegList::new();
                let peer = match self.reach(peer, || self.gather(w, inline, &mut src)) {
                    Ok(p) => p,
                    Err(out) => return out,
                };
                let total = src.total;
                let out = if total == 0 {
                    Outcome::Done(0)
                } else {
                    let need = Access::REMOTE_WRITE;
                    peer.remote_copy(rkey, raddr, total, need, |dst| {
                        // SAFETY: source pinned by `src` (or inline buffer); destination
                        // inside the pinned remote region (bounds checked by pin_remote).
                        unsafe { copy_segs(src.segs(), dst, total as usize) };
                    })
                };
                self.trace(
                    peer,
                    psn,
                    TraceOp::RdmaWrite,
                    &src,
                    total,
                    raddr,
                    rkey,
                    0,
                    &out,
                );
                out
            }
            SqOp::Read { raddr, rkey } => {
                let mut dst = SegList::new();
                let peer = match self.reach(peer, || self.local_segs(w, true, &mut dst)) {
                    Ok(p) => p,
                    Err(out) => return out,
                };
                let total = dst.total;
                let empty = SegList::new();
                self.trace(
                    peer,
                    psn,
                    TraceOp::RdmaReadRequest,
                    &empty,
                    total,
                    raddr,
                    rkey,
                    0,
                    &Outcome::Done(0),
                );
                if total == 0 {
                    return Outcome::Done(0);
                }
                let out = peer.remote_copy(rkey, raddr, total, Access::REMOTE_READ, |src| {
                    // SAFETY: source inside the pinned remote region (bounds checked);
                    // destination pinned by `dst` with LOCAL_WRITE.
                    unsafe { copy_segs(src, dst.segs(), total as usize) };
                });
                if let Outcome::Done(_) = out {
                    peer.trace_read_response(self, raddr, rkey, &dst);
                }
                out
            }
        }
    }

    /// The responder's side of an RDMA Write or Read of `total` (> 0) octets at `raddr` under
    /// `rkey`: pins the range in this QP's PD with the rights `need` (a window only through
    /// this QP) and runs `copy` on it while pinned. `Done(total)`, or `REM_ACCESS_ERR` when the
    /// key, rights or bounds do not allow it.
    fn remote_copy(
        &self,
        rkey: u32,
        raddr: u64,
        total: u64,
        need: Access,
        copy: impl FnOnce(&[Seg]),
    ) -> Outcome {
        let pd = self.pd;
        let Some(pin) = self
            .dev
            .keys
            .pin_remote(rkey, raddr, total, need, pd, self.qp_num)
        else {
            return Outcome::Fail(WcStatus::REM_ACCESS_ERR);
        };
        copy(&[Seg {
            ptr: raddr as *mut u8,
            len: total as usize,
        }]);
        drop(pin);
        Outcome::Done(total as u32)
    }

    // --- trace ------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(super) fn trace(
        &self,
        peer: &QpShared,
        psn: &mut u32,
        op: TraceOp,
        data: &SegList<'_>,
        len: u64,
        remote_addr: u64,
        rkey: u32,
        inv_rkey: u32,
        out: &Outcome,
    ) {
        let pkts = len.div_ceil(MTU).max(1) as u32;
        let my_psn = *psn;
        *psn = psn.wrapping_add(pkts) & 0xff_ffff;
        let Some(hook) = self.dev.fabric.trace.get() else {
            return;
        };
        let mut slices: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
        for (i, s) in data.segs().iter().enumerate() {
            // SAFETY: the segment is pinned registered memory (or the inline buffer) for the
            // duration of this call; see copy_segs for the concurrency contract.
            slices[i] = unsafe { core::slice::from_raw_parts(s.ptr, s.len) };
        }
        let status = match out {
            Outcome::Done(_) => WcStatus::SUCCESS,
            Outcome::Fail(s) => *s,
            Outcome::Rnr => WcStatus::RNR_RETRY_EXC_ERR,
        };
        hook(&TraceEvent {
            op,
            src: self.local_addr,
            dst: self.peer_addr,
            src_qpn: self.qp_num,
            dst_qpn: peer.qp_num,
            psn: my_psn,
            remote_addr,
            rkey,
            len: len as u32,
            inv_rkey: if op == TraceOp::SendWithInv {
                inv_rkey
            } else {
                0
            },
            payload: &slices[..data.n],
            status,
        });
    }

    pub(super) fn trace_read_response(
        &self,
        requester: &QpShared,
        raddr: u64,
        rkey: u32,
        data: &SegList<'_>,
    ) {
        let Some(hook) = self.dev.fabric.trace.get() else {
            return;
        };
        let mut slices: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
        for (i, s) in data.segs().iter().enumerate() {
            // SAFETY: as in `trace`.
            slices[i] = unsafe { core::slice::from_raw_parts(s.ptr, s.len) };
        }
        hook(&TraceEvent {
            op: TraceOp::RdmaReadResponse,
            src: self.local_addr,
            dst: self.peer_addr,
            src_qpn: self.qp_num,
            dst_qpn: requester.qp_num,
            psn: 0,
            remote_addr: raddr,
            rkey,
            len: data.total as u32,
            inv_rkey: 0,
            payload: &slices[..data.n],
            status: WcStatus::SUCCESS,
        });
    }
}
