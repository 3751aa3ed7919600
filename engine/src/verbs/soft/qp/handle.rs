//! The owner's handle of a soft QP ([`SoftQp`]): the verbs calls (`queue_send` / `flush_send`,
//! `queue_recv` / `flush_recv`, events, disconnect) with their state, depth and argument checks.
//!
//! Normal operation: `queue_*` validate and stage work requests owner-locally (no lock, no
//! allocation); `flush_*` are the doorbells that hand the batch to the QP's NIC.
//! Recovery: a refused request returns its `VerbsError` and leaves the QP unchanged; posts on a
//! QP in ERROR are accepted and complete with `WR_FLUSH_ERR`; dropping the handle destroys the
//! QP and disconnects its peer.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::super::mr::BindReq;
use super::super::SoftProvider;
use super::entries::{SqEntry, SqOp, EMPTY_ENTRY};
use super::{QpShared, SoftFaults};
use crate::verbs::{
    errno, validate, CmEvent, QpOptions, QpState, QueuePair, RecvWr, SendFlags, SendOp, SendWr,
    VerbsCall, VerbsError,
};

/// A soft RC queue pair (owner handle).
pub struct SoftQp {
    pub(crate) shared: Arc<QpShared>,
    /// Staged send entries (`[..staged_sends]` in use): preallocated and reused, each built in
    /// place, so staging costs the fields a WR uses rather than a whole entry.
    staged_send: Box<[SqEntry]>,
    staged_sends: usize,
    staged_inline: Box<[u8]>,
    /// Receive entries staged in place in the receive queue's free slots after its published
    /// tail (this handle is the queue's only producer), published by `flush_recv`.
    staged_recvs: usize,
    /// The receive ring's `head` as this handle (its producer) last read it.
    rq_head_seen: usize,
    sq_posted: u32,
    doorbells: u64,
    peer: Option<Arc<QpShared>>,
}

impl core::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "SoftQp({}, {:?})",
            self.shared.qp_num,
            self.shared.state()
        )
    }
}

impl SoftQp {
    pub(crate) fn new(shared: Arc<QpShared>) -> SoftQp {
        let o = shared.opts;
        SoftQp {
            staged_send: vec![EMPTY_ENTRY; o.max_send_wr as usize].into_boxed_slice(),
            staged_sends: 0,
            staged_inline: vec![0u8; (o.max_send_wr * o.max_inline_data) as usize]
                .into_boxed_slice(),
            staged_recvs: 0,
            rq_head_seen: 0,
            sq_posted: 0,
            doorbells: 0,
            peer: None,
            shared,
        }
    }

    /// Fault injection and diagnostics handle for this QP (usable from any thread).
    pub fn faults(&self) -> SoftFaults {
        SoftFaults {
            qp: self.shared.clone(),
        }
    }

    /// Send WRs posted and not yet retired by a completion (diagnostics).
    pub fn send_queue_used(&self) -> u32 {
        // Acquire: pairs with the Release in `retire`.
        self.sq_posted
            .wrapping_sub(self.shared.sq_retired.load(Ordering::Acquire))
            + self.staged_sends as u32
    }

    fn send_err(e: i32) -> Result<(), VerbsError> {
        Err(VerbsError::new(VerbsCall::PostSend, e))
    }

    fn recv_err(e: i32) -> Result<(), VerbsError> {
        Err(VerbsError::new(VerbsCall::PostRecv, e))
    }

    fn peer_handle(&mut self) -> Option<&Arc<QpShared>> {
        if self.peer.is_none() {
            self.peer = self.shared.peer.get().and_then(Weak::upgrade);
        }
        self.peer.as_ref()
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        let bound = self.shared.dev.keys.windows_bound_to(self.shared.qp_num);
        if bound > 0 {
            // Relaxed: a statistic (see `SoftFabric::windows_bound_at_qp_destroy`).
            self.shared
                .dev
                .fabric
                .windows_bound_at_destroy
                .fetch_add(bound, Ordering::Relaxed);
        }
        self.shared.destroy();
        self.shared.dev.free_qpn(self.shared.qp_num);
    }
}

impl QueuePair<SoftProvider> for SoftQp {
    fn qp_num(&self) -> u32 {
        self.shared.qp_num
    }

    fn state(&self) -> QpState {
        self.shared.state()
    }

    fn options(&self) -> QpOptions {
        let mut o = self.shared.opts;
        // Relaxed: set once at connection establishment, before Established is reported.
        o.initiator_depth = self.shared.initiator_depth.load(Ordering::Relaxed);
        o.responder_resources = self.shared.responder_resources.load(Ordering::Relaxed);
        o
    }

    fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    fn peer_addr(&self) -> SocketAddr {
        self.shared.peer_addr
    }

    fn queue_send(&mut self, wr: &SendWr<'_, SoftProvider>) -> Result<(), VerbsError> {
        let sh = &*self.shared;
        match sh.state() {
            QpState::Rts | QpState::Error => {}
            _ => return Self::send_err(errno::EINVAL),
        }
        let o = &sh.opts;
        if self.send_queue_used() >= o.max_send_wr {
            return Self::send_err(errno::ENOMEM);
        }
        // SGE count, Send With Invalidate support, RDMA Read sinks, inline rules.
        validate::send_wr(wr, o, &sh.dev.caps)?;
        let mut new_mw_key = None;
        let op = match wr.op {
            SendOp::Send => SqOp::Send,
            SendOp::SendWithInv { rkey } => SqOp::SendInv(rkey),
            SendOp::RdmaWrite { remote_addr, rkey } => SqOp::Write {
                raddr: remote_addr,
                rkey,
            },
            SendOp::RdmaRead { remote_addr, rkey } => SqOp::Read {
                raddr: remote_addr,
                rkey,
            },
            SendOp::LocalInv { rkey } => SqOp::LocalInv(rkey),
            SendOp::BindMw(b) => {
                let (mw, mr) = (b.mw, b.mr);
                if !Arc::ptr_eq(&mw.dev, &sh.dev) || !Arc::ptr_eq(mr.device(), &sh.dev) {
                    return Self::send_err(errno::EINVAL);
                }
                // Relaxed: the window's key is owner data (see SoftMw).
                let old = mw.rkey.load(Ordering::Relaxed);
                let new = (old & !0xff) | (b.rkey & 0xff);
                new_mw_key = Some((mw, new));
                SqOp::Bind(BindReq {
                    mw_index: mw.index,
                    mw_key: old,
                    new_key: new,
                    mr_lkey: crate::verbs::MemoryRegion::keys(mr).lkey,
                    addr: b.addr,
                    len: b.len,
                    access: b.access,
                    pd: sh.pd,
                    qp_num: sh.qp_num,
                })
            }
        };
        // Room checked above (send_queue_used < max_send_wr = staged capacity); the index is
        // bounds-checked all the same.
        let idx = self.staged_sends;
        let mut inline_len = 0;
        if wr.flags.contains(SendFlags::INLINE) {
            // Opcode and total length checked by `validate::send_wr`.
            let total: u64 = wr.sgl.iter().map(|s| s.len as u64).sum();
            let slot = idx * o.max_inline_data as usize;
            let mut off = slot;
            for s in wr.sgl.iter().filter(|s| s.len > 0) {
                // The soft provider requires inline data to be registered memory so reading it
                // is sound (hardware reads any mapped address).
                let Some(pin) = sh
                    .dev
                    .keys
                    .pin_local(s.lkey, s.addr, s.len as u64, false, sh.pd)
                else {
                    return Self::send_err(errno::EINVAL);
                };
                let n = s.len as usize;
                // SAFETY: [addr, addr+n) lies in a pinned registration; the destination range
                // is inside `staged_inline` (total <= max_inline_data per slot).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        s.addr as *const u8,
                        self.staged_inline.as_mut_ptr().add(off),
                        n,
                    )
                };
                drop(pin);
                off += n;
            }
            inline_len = total as u32;
        }
        let entry = &mut self.staged_send[idx];
        entry.wr_id = wr.wr_id;
        entry.op = op;
        entry.flags = wr.flags;
        entry.num_sge = wr.sgl.len() as u8;
        entry.sges[..wr.sgl.len()].copy_from_slice(wr.sgl);
        entry.inline_len = inline_len;
        if let Some((mw, key)) = new_mw_key {
            // The WR is accepted: the window's current key becomes the bind's key
            // (`mw->rkey = ibv_inc_rkey(mw->rkey)` in ibverbs terms).
            // Relaxed: owner data (see SoftMw).
            mw.rkey.store(key, Ordering::Relaxed);
        }
        self.staged_sends = idx + 1;
        Ok(())
    }

    fn flush_send(&mut self) -> Result<(), VerbsError> {
        if self.staged_sends == 0 {
            return Ok(());
        }
        let staged = &self.staged_send[..self.staged_sends];
        let inl = &self.staged_inline;
        let max_inline = self.shared.opts.max_inline_data as usize;
        let sh = &*self.shared;
        sh.with_engine(|e| {
            for (i, w) in staged.iter().enumerate() {
                let slot = e.tail_slot();
                e.ring[slot].copy_used_from(w);
                if w.inline_len > 0 {
                    let n = w.inline_len as usize;
                    e.inline[slot * max_inline..slot * max_inline + n]
                        .copy_from_slice(&inl[i * max_inline..i * max_inline + n]);
                }
                e.len += 1;
            }
            // The doorbell: the soft NIC executes the queue now, on this thread.
            sh.run(e);
        });
        self.sq_posted = self.sq_posted.wrapping_add(self.staged_sends as u32);
        self.staged_sends = 0;
        self.doorbells += 1;
        Ok(())
    }

    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let sh = &*self.shared;
        if sh.state() == QpState::Reset || sh.srq.is_some() {
            return Self::recv_err(errno::EINVAL);
        }
        validate::recv_wr(wr, sh.opts.max_recv_sge, VerbsCall::PostRecv)?;
        let Some(rq) = &sh.rq else {
            return Self::recv_err(errno::EINVAL);
        };
        let max = sh.opts.max_recv_wr as usize;
        // SAFETY: this handle is the ring's only producer, and `rq_head_seen` is its own.
        let published =
            unsafe { rq.producer_used(&mut self.rq_head_seen, max - self.staged_recvs) };
        if published + self.staged_recvs >= max {
            return Self::recv_err(errno::ENOMEM);
        }
        // SAFETY: this handle is the ring's only producer (reached through `&mut self`), and
        // used + staged_recvs < max_recv_wr <= slots: the slot is free and unpublished.
        unsafe { rq.stage(self.staged_recvs, |e| e.set_from_wr(wr)) };
        self.staged_recvs += 1;
        Ok(())
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        if self.staged_recvs == 0 {
            return Ok(());
        }
        if let Some(rq) = &self.shared.rq {
            // SAFETY: the ring's only producer (`&mut self`), publishing what it staged.
            unsafe { rq.publish(self.staged_recvs) };
        }
        self.staged_recvs = 0;
        self.doorbells += 1;
        if self.shared.is_error() {
            self.shared.rq_try_flush();
        } else if let Some(peer) = self.peer_handle() {
            // Acquire: pairs with set_work's AcqRel swap.
            if peer.rnr_waiting.load(Ordering::Acquire) {
                peer.sq_kick();
            }
        }
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError> {
        // Polled every round: an empty queue answers without moving an event-sized value.
        if self.shared.events.is_empty() {
            return Ok(None);
        }
        Ok(self.shared.events.pop())
    }

    fn disconnect(&mut self) -> Result<(), VerbsError> {
        match self.shared.state() {
            QpState::Reset => Err(VerbsError::new(VerbsCall::Disconnect, errno::EINVAL)),
            _ => {
                self.shared.connection_down();
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
