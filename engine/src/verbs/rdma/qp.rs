//! RC queue pairs on rdma_cm ids: posting in batches, connection progress by event polling.
//!
//! Normal operation: [`QueuePair::queue_send`] / [`QueuePair::queue_recv`] fill the next slot
//! of arrays preallocated at QP creation (`ibv_send_wr` / `ibv_recv_wr`, their SGEs, and an
//! inline-data copy area for `IBV_SEND_INLINE`); [`QueuePair::flush_send`] /
//! [`QueuePair::flush_recv`] chain the slots through `next` and ring one doorbell with one
//! `ibv_post_send` / `ibv_post_recv`.
//!
//! Connection progress: the QP's id lives on the process-wide event hub (see `cm`); the
//! hub's dispatcher takes the active side's steps (`ADDR_RESOLVED` → `rdma_resolve_route`,
//! `ROUTE_RESOLVED` → `rdma_connect`) and answers a peer's disconnect as soon as any poll in the
//! process reads the event, and queues the events meant for the caller in the QP's small event
//! queue, which [`QueuePair::poll_event`] hands out. `ESTABLISHED` makes the QP connected, with
//! its read depths negotiated from the peer's answer.
//!
//! Recovery: every terminal connection event (rejected, unreachable, address/route/connect
//! error, disconnected, device removal) moves the QP to the error state (`ibv_modify_qp`), so
//! everything posted flushes with `WR_FLUSH_ERR`, exactly as after [`QueuePair::disconnect`];
//! on `DISCONNECTED` the provider also answers with `rdma_disconnect` (the IB CM DREP). A
//! batch the device rejects part-way is reported as the `ibv_post_*` error; the WRs before the
//! failing one were posted (and are accounted), the rest are dropped.

use core::ffi::c_int;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use rdma_sys as sys;

use super::cm::{lock, CmTarget, Hub, IdGuard, RawEvent, RdmaConnRequest};
use super::cq::{modify_to_error, CqInner, Phase, QpAcct};
use super::mem::{fill_sges, index_of, link, zeroed, PdInner, RecvBatch, SrqInner};
use super::{id_addrs, os_err, ret_err, DeviceInner, Rdma, RESOLVE_TIMEOUT_MS};
use crate::verbs::validate;
use crate::verbs::{
    errno, CmEvent, CmEventKind, ConnRequest, CqNotify, DeviceCaps, PrivateData, QpInit, QpOptions,
    QpState, QueuePair, RecvWr, SendFlags, SendOp, SendWr, VerbsCall, VerbsError,
};

/// Events kept for the caller until its `poll_event` (a connection has at most a handful).
const STASH: usize = 8;

/// The connection side of a QP: where the connection is and the events waiting for the
/// caller. Shared between the QP and the event hub's table.
pub(crate) struct Progress {
    id: *mut sys::rdma_cm_id,
    qp: *mut sys::ibv_qp,
    acct: Arc<QpAcct>,
    phase: Phase,
    active: bool,
    /// Set (under the lock) by the QP's Drop before the id is destroyed.
    dead: bool,
    connect_data: PrivateData,
    /// Options in force (read depths negotiated).
    opts: QpOptions,
    has_srq: bool,
    stash: [Option<CmEvent>; STASH],
    /// Runs after the dispatcher handled an event of this id (`QueuePair::set_event_notify`).
    pub(crate) notify: Option<CqNotify>,
    dev: Arc<DeviceInner>,
}

// SAFETY: the raw pointers are only used under the Mutex and never after `dead` is set;
// ibverbs/rdma_cm calls may come from any thread.
unsafe impl Send for Progress {}

impl Progress {
    fn set_phase(&mut self, p: Phase) {
        self.phase = p;
        self.acct.set_phase(p as u8);
    }

    fn conn_param(&self, private_data: &[u8]) -> sys::rdma_conn_param {
        // SAFETY: plain old data.
        let mut p: sys::rdma_conn_param = unsafe { core::mem::zeroed() };
        if !private_data.is_empty() {
            p.private_data = private_data.as_ptr().cast();
            p.private_data_len = u8::try_from(private_data.len()).unwrap_or(u8::MAX);
        }
        p.responder_resources = self.opts.responder_resources;
        p.initiator_depth = self.opts.initiator_depth;
        p.flow_control = 1;
        p.retry_count = self.opts.retry_count;
        p.rnr_retry_count = self.opts.rnr_retry_count;
        p.srq = u8::from(self.has_srq);
        p
    }

    /// Moves the QP to the error state (everything posted flushes) and stops the accounting.
    fn enter_error(&mut self) {
        self.acct.set_errored();
        self.set_phase(Phase::Closed);
        // SAFETY: the QP is live (not dead: checked by every caller).
        unsafe { modify_to_error(self.qp) };
    }

    fn terminal(&mut self, kind: CmEventKind, status: i32, pd: PrivateData) {
        self.enter_error();
        self.stash_push(CmEvent {
            kind,
            status,
            private_data: pd,
        });
    }

    fn stash_push(&mut self, ev: CmEvent) {
        match self.stash.iter_mut().find(|s| s.is_none()) {
            Some(slot) => *slot = Some(ev),
            None => tracing::warn!(
                "qp {:#x}: event queue full, {:?} dropped",
                self.acct.qp_num,
                ev.kind
            ),
        }
    }

    fn stash_pop(&mut self) -> Option<CmEvent> {
        let ev = self.stash[0].take()?;
        self.stash.rotate_left(1);
        Some(ev)
    }

    /// Handles one event of the QP's id (called by the hub's dispatcher).
    fn on_event(&mut self, ev: &RawEvent) {
        use sys::rdma_cm_event_type as t;
        if self.dead {
            return;
        }
        let pd = ev.private_data;
        match ev.kind {
            t::RDMA_CM_EVENT_ADDR_RESOLVED if self.phase == Phase::ResolvingAddr => {
                // SAFETY: the id is live (not dead) with a resolved address.
                if unsafe { sys::rdma_resolve_route(self.id, RESOLVE_TIMEOUT_MS) } != 0 {
                    let e = super::last_errno();
                    self.terminal(CmEventKind::RouteError, -e, pd);
                } else {
                    self.set_phase(Phase::ResolvingRoute);
                }
            }
            t::RDMA_CM_EVENT_ROUTE_RESOLVED if self.phase == Phase::ResolvingRoute => {
                let data = self.connect_data;
                let mut param = self.conn_param(data.as_slice());
                let id = self.id;
                let dev = Arc::clone(&self.dev);
                let rc = dev.in_netns(VerbsCall::Connect, || {
                    // SAFETY: the id is live with a route and a QP; param points to `data`,
                    // valid for the call.
                    if unsafe { sys::rdma_connect(id, &mut param) } != 0 {
                        return Err(os_err(VerbsCall::Connect));
                    }
                    Ok(())
                });
                match rc {
                    Ok(()) => self.set_phase(Phase::Connecting),
                    Err(e) => self.terminal(CmEventKind::ConnectError, -e.errno, pd),
                }
            }
            t::RDMA_CM_EVENT_ESTABLISHED if self.phase == Phase::Closed => {
                // Given up on (disconnect() while connecting): tear the connection down.
                // SAFETY: the id is live.
                unsafe {
                    sys::rdma_disconnect(self.id);
                }
            }
            t::RDMA_CM_EVENT_ESTABLISHED => {
                if self.active && self.phase == Phase::Connecting {
                    // The peer's answer bounds our read depths. rdma_cm reports them from
                    // our side's view: `initiator_depth` is what we may issue (the peer's
                    // responder resources), `responder_resources` what the peer will issue.
                    self.opts.initiator_depth = self.opts.initiator_depth.min(ev.initiator_depth);
                    self.opts.responder_resources =
                        self.opts.responder_resources.min(ev.responder_resources);
                }
                self.set_phase(Phase::Connected);
                self.stash_push(CmEvent {
                    kind: CmEventKind::Established,
                    status: ev.status,
                    private_data: pd,
                });
            }
            t::RDMA_CM_EVENT_ADDR_ERROR => self.terminal(CmEventKind::AddrError, ev.status, pd),
            t::RDMA_CM_EVENT_ROUTE_ERROR => self.terminal(CmEventKind::RouteError, ev.status, pd),
            t::RDMA_CM_EVENT_REJECTED => self.terminal(CmEventKind::Rejected, ev.status, pd),
            t::RDMA_CM_EVENT_UNREACHABLE => self.terminal(CmEventKind::Unreachable, ev.status, pd),
            t::RDMA_CM_EVENT_CONNECT_ERROR => {
                self.terminal(CmEventKind::ConnectError, ev.status, pd)
            }
            t::RDMA_CM_EVENT_DISCONNECTED => {
                // Answer the peer's disconnect at once (IB CM DREP); an error means it was
                // answered already (we disconnected first).
                // SAFETY: the id is live.
                unsafe {
                    sys::rdma_disconnect(self.id);
                }
                self.terminal(CmEventKind::Disconnected, ev.status, pd)
            }
            t::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                self.terminal(CmEventKind::DeviceRemoval, ev.status, pd)
            }
            // TIMEWAIT_EXIT, ADDR_CHANGE, stale resolution events: nothing for the caller.
            _ => {}
        }
    }
}

/// Preallocated send work requests, their SGEs and inline copies (one batch).
struct SendBatch {
    wrs: Box<[sys::ibv_send_wr]>,
    sges: Box<[sys::ibv_sge]>,
    inline: Box<[u8]>,
    signaled: Box<[bool]>,
    /// Per slot: the window a BIND_MW binds and its new key (null otherwise).
    binds: Box<[(*mut sys::ibv_mw, u32)]>,
    stride: usize,
    inline_stride: usize,
    len: usize,
}

impl SendBatch {
    fn new(depth: u32, max_sge: u32, max_inline: u32) -> SendBatch {
        let n = depth as usize;
        let stride = (max_sge as usize).max(1);
        let inline_stride = max_inline as usize;
        SendBatch {
            wrs: zeroed(n),
            sges: zeroed(n * stride),
            inline: vec![0u8; n * inline_stride].into_boxed_slice(),
            signaled: vec![false; n].into_boxed_slice(),
            binds: vec![(core::ptr::null_mut(), 0); n].into_boxed_slice(),
            stride,
            inline_stride,
            len: 0,
        }
    }

    fn link(&mut self) -> *mut sys::ibv_send_wr {
        link(&mut self.wrs, self.len)
    }
}

/// An RC queue pair with its rdma_cm id (see [`QueuePair`]).
pub struct RdmaQp {
    id: *mut sys::rdma_cm_id,
    qp: *mut sys::ibv_qp,
    qp_num: u32,
    /// Depths and limits as created (the negotiated read depths live in `progress`).
    opts: QpOptions,
    progress: Arc<Mutex<Progress>>,
    hub: &'static Hub,
    local: SocketAddr,
    peer: SocketAddr,
    acct: Arc<QpAcct>,
    send: SendBatch,
    recv: RecvBatch,
    sq_posted: u64,
    rq_posted: u64,
    doorbells: u64,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    srq: Option<Arc<SrqInner>>,
    _pd: Arc<PdInner>,
    dev: Arc<DeviceInner>,
}

// SAFETY: the QP is used through &mut self only; ibverbs/rdma_cm objects may be used from any
// thread; the raw pointers in the batches point into the QP's own boxes.
unsafe impl Send for RdmaQp {}

impl Drop for RdmaQp {
    fn drop(&mut self) {
        // No driver touches the id once `dead` is set under the lock.
        lock(&self.progress).dead = true;
        self.hub.unregister(self.id);
        self.send_cq.detach(&self.acct);
        self.recv_cq.detach(&self.acct);
        // SAFETY: the QP and id are live, owned and unregistered; every event was acknowledged.
        // The QP is destroyed before the id, and the CQs/SRQ/PD after both (Arc fields).
        unsafe {
            sys::rdma_destroy_qp(self.id);
            sys::rdma_destroy_id(self.id);
        }
    }
}

/// Checks `opts` against the device and clamps the retry counts and read depths.
fn validate(caps: &DeviceCaps, o: QpOptions, srq: bool) -> Result<QpOptions, VerbsError> {
    // Depths, SGE counts, inline size; the SRQ and read-depth rules (shared with the soft
    // provider, which refuses the retry counts this provider clamps).
    validate::qp_opts(&o, srq, caps, VerbsCall::CreateQp)?;
    let mut o = validate::qp_opts_in_force(o, srq, caps);
    o.rnr_retry_count = o.rnr_retry_count.min(7);
    o.retry_count = o.retry_count.min(7);
    Ok(o)
}

impl RdmaQp {
    /// `rdma_create_qp` on `guard`'s id and the preallocated batches; the id is registered with
    /// the hub. On error the id (with its QP, if created) is destroyed by the guard.
    #[allow(clippy::too_many_arguments)]
    fn new(
        dev: &Arc<DeviceInner>,
        hub: &'static Hub,
        guard: IdGuard,
        init: &QpInit<'_, Rdma>,
        opts: QpOptions,
        active: bool,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Result<RdmaQp, VerbsError> {
        let id = guard.0;
        let pd = init.pd.inner();
        // SAFETY: id and the PD are live.
        if unsafe { (*pd.raw()).context != (*id).verbs } {
            return Err(VerbsError::new(VerbsCall::CreateQp, errno::EINVAL));
        }
        // SAFETY: plain old data.
        let mut attr: sys::ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        attr.send_cq = init.send_cq.inner().raw();
        attr.recv_cq = init.recv_cq.inner().raw();
        attr.srq = init.srq.map_or(core::ptr::null_mut(), |s| s.inner().raw());
        attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        attr.cap.max_send_wr = opts.max_send_wr;
        attr.cap.max_recv_wr = opts.max_recv_wr;
        attr.cap.max_send_sge = opts.max_send_sge.max(1);
        attr.cap.max_recv_sge = opts.max_recv_sge.max(1);
        attr.cap.max_inline_data = opts.max_inline_data;
        // SAFETY: id is bound to the PD's device; attr is initialized.
        if unsafe { sys::rdma_create_qp(id, pd.raw(), &mut attr) } != 0 {
            return Err(os_err(VerbsCall::CreateQp));
        }
        // SAFETY: rdma_create_qp succeeded, so id->qp is the new QP.
        let qp = unsafe { (*id).qp };
        // SAFETY: qp is live.
        let qp_num = unsafe { (*qp).qp_num };
        let srq = init.srq.map(|s| Arc::clone(s.inner()));
        let phase = if active {
            Phase::ResolvingAddr
        } else {
            Phase::Connected
        };
        let acct = Arc::new(QpAcct::new(
            qp,
            qp_num,
            opts.max_send_wr,
            srq.as_ref().map(|s| Arc::clone(s.acct())),
            phase as u8,
        ));
        let send_cq = Arc::clone(init.send_cq.inner());
        let recv_cq = Arc::clone(init.recv_cq.inner());
        send_cq.attach(&acct);
        recv_cq.attach(&acct);
        core::mem::forget(guard);
        let progress = Arc::new(Mutex::new(Progress {
            id,
            qp,
            acct: Arc::clone(&acct),
            phase,
            active,
            dead: false,
            connect_data: PrivateData::EMPTY,
            opts,
            has_srq: srq.is_some(),
            stash: [None; STASH],
            notify: None,
            dev: Arc::clone(dev),
        }));
        let target: Weak<Mutex<dyn CmTarget>> =
            Arc::downgrade(&progress) as Weak<Mutex<dyn CmTarget>>;
        hub.register_qp(id, target);
        Ok(RdmaQp {
            id,
            qp,
            qp_num,
            opts,
            progress,
            hub,
            local,
            peer,
            acct,
            send: SendBatch::new(opts.max_send_wr, opts.max_send_sge, opts.max_inline_data),
            recv: RecvBatch::new(opts.max_recv_wr, opts.max_recv_sge),
            sq_posted: 0,
            rq_posted: 0,
            doorbells: 0,
            send_cq,
            recv_cq,
            srq,
            _pd: Arc::clone(pd),
            dev: Arc::clone(dev),
        })
    }

    /// The active side: id bound to the device's address, QP created (INIT), address
    /// resolution started; the rest happens in event polls.
    pub(crate) fn connect(
        dev: &Arc<DeviceInner>,
        addr: SocketAddr,
        init: QpInit<'_, Rdma>,
        private_data: &[u8],
    ) -> Result<RdmaQp, VerbsError> {
        validate::private_data(private_data, dev.caps(), VerbsCall::Connect)?;
        let connect_data = PrivateData::new(private_data)
            .ok_or(VerbsError::new(VerbsCall::Connect, errno::EINVAL))?;
        let opts = validate(dev.caps(), init.opts, init.srq.is_some())?;
        let (hub, guard) = dev.bound_id(SocketAddr::new(dev.local, 0), VerbsCall::Connect)?;
        let id = guard.0;
        // SAFETY: id is live.
        let local = unsafe { id_addrs(id).0 }.unwrap_or(SocketAddr::new(dev.local, 0));
        let qp = RdmaQp::new(dev, hub, guard, &init, opts, true, local, addr)?;
        lock(&qp.progress).connect_data = connect_data;
        let mut dst = super::to_sockaddr(addr);
        // SAFETY: id is live and bound; dst is a valid sockaddr; a null source keeps the bound
        // address.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                id,
                core::ptr::null_mut(),
                (&mut dst as *mut libc::sockaddr_storage).cast(),
                RESOLVE_TIMEOUT_MS,
            )
        };
        if rc != 0 {
            return Err(os_err(VerbsCall::Connect));
        }
        Ok(qp)
    }

    /// The passive side: QP on the request's id, then `rdma_accept`.
    // The arguments are rdma_create_qp's and rdma_accept's, plus the prepare step between them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        dev: &Arc<DeviceInner>,
        hub: &'static Hub,
        guard: IdGuard,
        init: QpInit<'_, Rdma>,
        private_data: &[u8],
        (peer_initiator, peer_responder): (u8, u8),
        (local, peer): (SocketAddr, SocketAddr),
        prepare: &mut dyn FnMut(&mut RdmaQp) -> Result<(), VerbsError>,
    ) -> Result<RdmaQp, VerbsError> {
        let mut opts = validate(dev.caps(), init.opts, init.srq.is_some())?;
        opts.initiator_depth = opts.initiator_depth.min(peer_responder);
        opts.responder_resources = opts.responder_resources.min(peer_initiator);
        let mut qp = RdmaQp::new(dev, hub, guard, &init, opts, false, local, peer)?;
        // The QP is in INIT: receives posted now are there before the requester can send.
        prepare(&mut qp)?;
        let mut param = lock(&qp.progress).conn_param(private_data);
        // SAFETY: id is live with its QP; param points to private_data (valid for the call).
        if unsafe { sys::rdma_accept(qp.id, &mut param) } != 0 {
            return Err(os_err(VerbsCall::Accept));
        }
        Ok(qp)
    }
}

impl RdmaQp {
    /// Work posted to a QP already in the error state must flush. Hardware flushes it on its
    /// own; rxe only flushes its queues on the transition to ERROR, so the transition is
    /// repeated (ERROR → ERROR is always allowed). Only called when the QP is known errored.
    fn reflush(&mut self) {
        if self.state() != QpState::Error {
            return;
        }
        // SAFETY: the QP is live.
        unsafe { modify_to_error(self.qp) };
    }
}

impl QueuePair<Rdma> for RdmaQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn state(&self) -> QpState {
        // SAFETY: plain old data.
        let mut attr: sys::ibv_qp_attr = unsafe { core::mem::zeroed() };
        // SAFETY: plain old data.
        let mut init: sys::ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        // SAFETY: the QP is live; attr/init are writable.
        let rc = unsafe {
            sys::ibv_query_qp(
                self.qp,
                &mut attr,
                sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
                &mut init,
            )
        };
        let queried = if rc == 0 {
            QpState::from_u8(u8::try_from(attr.qp_state).unwrap_or(u8::MAX))
        } else {
            QpState::Unknown
        };
        match queried {
            // siw does not report the state (always RESET); a QP made by rdma_create_qp is
            // never in RESET, so the tracked state stands in.
            QpState::Reset | QpState::Unknown => match self.acct.phase() {
                Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => QpState::Init,
                Phase::Connected if !self.acct.errored() => QpState::Rts,
                Phase::Connected | Phase::Closed => QpState::Error,
            },
            s => s,
        }
    }

    fn options(&self) -> QpOptions {
        lock(&self.progress).opts
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn queue_send(&mut self, wr: &SendWr<'_, Rdma>) -> Result<(), VerbsError> {
        let einval = VerbsError::new(VerbsCall::PostSend, errno::EINVAL);
        let enomem = VerbsError::new(VerbsCall::PostSend, errno::ENOMEM);
        if !self.acct.phase().can_send() {
            return Err(einval);
        }
        let n = self.send.len;
        let depth = self.opts.max_send_wr as usize;
        if n >= depth || n >= self.send.wrs.len() {
            return Err(enomem);
        }
        if !self.acct.errored() {
            let outstanding = self.sq_posted.saturating_sub(self.acct.sq_completed());
            if outstanding + n as u64 + 1 > depth as u64 {
                return Err(enomem);
            }
        }
        // SGE count, Send With Invalidate support, RDMA Read sinks (siw, max_sge_rd 1, reads
        // only the first SGE's length of a longer sink list and reports that as byte_len; its
        // kernel refuses such a Read from kernel users), inline rules.
        validate::send_wr(wr, &self.opts, self.dev.caps())?;
        let inline = wr.flags.contains(SendFlags::INLINE);
        let opcode = match wr.op {
            SendOp::Send => sys::ibv_wr_opcode::IBV_WR_SEND,
            SendOp::SendWithInv { .. } => sys::ibv_wr_opcode::IBV_WR_SEND_WITH_INV,
            SendOp::RdmaWrite { .. } => sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            SendOp::RdmaRead { .. } => sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
            SendOp::LocalInv { .. } => sys::ibv_wr_opcode::IBV_WR_LOCAL_INV,
            SendOp::BindMw(_) => sys::ibv_wr_opcode::IBV_WR_BIND_MW,
        };
        if let SendOp::BindMw(b) = wr.op {
            // A type-2 bind keeps the window's index (upper 24 bits) and changes the key byte.
            if (b.rkey ^ crate::verbs::MemoryWindow::rkey(b.mw)) & 0xffff_ff00 != 0 {
                return Err(einval);
            }
        }

        let sge_base = n * self.send.stride;
        let num_sge;
        if inline {
            // At most max_inline_data octets (checked by `validate::send_wr`).
            let total: usize = wr.sgl.iter().map(|s| s.len as usize).sum();
            let area = &mut self.send.inline[n * self.send.inline_stride..][..total];
            let mut off = 0;
            for s in wr.sgl {
                let len = s.len as usize;
                // SAFETY: IBV_SEND_INLINE reads the gathered memory on the CPU at post time,
                // as ibv_post_send does; the caller vouches for [addr, addr + len) as it does
                // for every SGE it hands to the device. The destination has room (checked).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        s.addr as usize as *const u8,
                        area[off..].as_mut_ptr(),
                        len,
                    );
                }
                off += len;
            }
            if total == 0 {
                num_sge = 0;
            } else {
                let sge = &mut self.send.sges[sge_base];
                sge.addr = area.as_ptr() as u64;
                sge.length = total as u32;
                sge.lkey = 0;
                num_sge = 1;
            }
        } else {
            fill_sges(
                &mut self.send.sges[sge_base..sge_base + wr.sgl.len()],
                wr.sgl,
            );
            num_sge = wr.sgl.len();
        }
        let sg_list = if num_sge == 0 {
            core::ptr::null_mut()
        } else {
            &mut self.send.sges[sge_base] as *mut sys::ibv_sge
        };

        let w = &mut self.send.wrs[n];
        w.wr_id = wr.wr_id;
        w.next = core::ptr::null_mut();
        w.sg_list = sg_list;
        w.num_sge = num_sge as c_int;
        w.opcode = opcode;
        w.send_flags = wr.flags.0;
        w.imm_data_invalidated_rkey_union.invalidated_rkey = 0;
        match wr.op {
            SendOp::Send => {}
            SendOp::SendWithInv { rkey } => {
                w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                // libsiw reads the STag from `wr.rdma.rkey` (others ignore it for a Send):
                // without it siw sends STag 0 and gets a TERMINATE (docs/rdma-provider.md 2.4).
                w.wr.rdma = sys::rdma_t {
                    remote_addr: 0,
                    rkey,
                };
            }
            SendOp::LocalInv { rkey } => {
                w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            }
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
                w.wr.rdma = sys::rdma_t { remote_addr, rkey };
            }
            SendOp::BindMw(b) => {
                w.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
                    mw: b.mw.raw(),
                    rkey: b.rkey,
                    bind_info: sys::ibv_mw_bind_info {
                        mr: b.mr.raw(),
                        addr: b.addr,
                        length: b.len,
                        mw_access_flags: b.access.0,
                    },
                };
                b.mw.set_rkey(b.rkey);
            }
        }
        self.send.signaled[n] = wr.flags.contains(SendFlags::SIGNALED);
        self.send.binds[n] = match wr.op {
            SendOp::BindMw(b) => (b.mw.raw(), b.rkey),
            _ => (core::ptr::null_mut(), 0),
        };
        self.send.len = n + 1;
        Ok(())
    }

    fn flush_send(&mut self) -> Result<(), VerbsError> {
        let n = self.send.len;
        let head = self.send.link();
        if head.is_null() {
            return Ok(());
        }
        // Marks are pushed before the post so a completion polled on another thread right
        // after the post always finds its mark; marks of WRs that did not get posted are
        // rolled back below.
        let before = self.sq_posted;
        let accounting = !self.acct.errored();
        let mut pushed = 0u64;
        if accounting {
            for i in 0..n {
                if self.send.signaled[i] {
                    self.acct.push_mark(before + i as u64 + 1);
                    pushed += 1;
                }
            }
        }
        let mut bad: *mut sys::ibv_send_wr = core::ptr::null_mut();
        // SAFETY: the QP is live; the chain and its SGEs live in self.send until the call
        // returns (the device copies the WQEs; inline data is copied too).
        let rc = unsafe { sys::ibv_post_send(self.qp, head, &mut bad) };
        self.doorbells += 1;
        self.send.len = 0;
        let posted = if rc == 0 {
            n
        } else {
            index_of(self.send.wrs.as_ptr(), bad, n)
        };
        // Providers read the window's current key from `ibv_mw.rkey` when a bind is posted
        // (rxe checks it against the kernel's); it becomes the new key once posted, as
        // ibv_bind_mw does for type-1 windows.
        for &(mw, rkey) in &self.send.binds[..posted] {
            if !mw.is_null() {
                // SAFETY: the window is alive (the caller keeps it for its bind) and only this
                // QP posts binds of it.
                unsafe { core::ptr::addr_of_mut!((*mw).rkey).write(rkey) };
            }
        }
        if rc == 0 {
            self.sq_posted = before + n as u64;
            if !accounting {
                self.reflush();
            }
            return Ok(());
        }
        tracing::debug!(
            "qp {:#x}: ibv_post_send of {n} -> {rc}, {posted} posted",
            self.qp_num
        );
        self.sq_posted = before + posted as u64;
        if accounting {
            let unposted = self.send.signaled[posted..n].iter().filter(|s| **s).count() as u64;
            self.acct.rollback_marks(unposted.min(pushed));
        }
        Err(ret_err(VerbsCall::PostSend, rc))
    }

    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        if self.srq.is_some() {
            return Err(VerbsError::new(VerbsCall::PostRecv, errno::EINVAL));
        }
        if !self.acct.errored() {
            let outstanding = self.rq_posted.saturating_sub(self.acct.rq_completed());
            if outstanding + self.recv.len() as u64 + 1 > u64::from(self.opts.max_recv_wr) {
                return Err(VerbsError::new(VerbsCall::PostRecv, errno::ENOMEM));
            }
        } else if self.recv.len() >= self.recv.capacity() {
            return Err(VerbsError::new(VerbsCall::PostRecv, errno::ENOMEM));
        }
        self.recv.push(wr, VerbsCall::PostRecv)
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        let qp = self.qp;
        // SAFETY: the QP is live; the chain lives in self.recv until the call returns.
        let post = |head, bad: &mut _| unsafe { sys::ibv_post_recv(qp, head, bad) };
        let Some(res) = self
            .recv
            .post(VerbsCall::PostRecv, &mut self.rq_posted, post)
        else {
            return Ok(());
        };
        self.doorbells += 1;
        res?;
        if self.acct.errored() {
            self.reflush();
        }
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError> {
        self.hub.poll()?;
        Ok(lock(&self.progress).stash_pop())
    }

    fn set_event_notify(&self, notify: CqNotify) -> bool {
        lock(&self.progress).notify = Some(notify);
        true
    }

    fn disconnect(&mut self) -> Result<(), VerbsError> {
        let mut p = lock(&self.progress);
        match p.phase {
            Phase::Closed => Ok(()),
            Phase::Connected => {
                // SAFETY: the id is live and connected.
                let rc = unsafe { sys::rdma_disconnect(self.id) };
                tracing::debug!(
                    "qp {:#x}: rdma_disconnect -> {rc} ({})",
                    self.qp_num,
                    super::last_errno()
                );
                let res = if rc != 0 {
                    Err(os_err(VerbsCall::Disconnect))
                } else {
                    Ok(())
                };
                p.enter_error();
                res
            }
            _ => {
                p.enter_error();
                Err(VerbsError::new(VerbsCall::Disconnect, errno::ENOTCONN))
            }
        }
    }
}

impl ConnRequest<Rdma> for RdmaConnRequest {
    fn private_data(&self) -> &[u8] {
        self.private_data.as_slice()
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn initiator_depth(&self) -> u8 {
        self.initiator_depth
    }

    fn responder_resources(&self) -> u8 {
        self.responder_resources
    }

    fn accept_prepared(
        mut self,
        init: QpInit<'_, Rdma>,
        private_data: &[u8],
        prepare: &mut dyn FnMut(&mut RdmaQp) -> Result<(), VerbsError>,
    ) -> Result<RdmaQp, VerbsError> {
        validate::private_data(private_data, self.dev.caps(), VerbsCall::Accept)?;
        let Some(id) = self.id.take() else {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        };
        // From here the request's id belongs to the QP (or is destroyed by it on error).
        self.hub.unregister(id);
        RdmaQp::accept(
            &self.dev,
            self.hub,
            IdGuard(id),
            init,
            private_data,
            (self.initiator_depth, self.responder_resources),
            (self.local, self.peer),
            prepare,
        )
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        validate::private_data(private_data, self.dev.caps(), VerbsCall::Reject)?;
        let Some(id) = self.id.take() else {
            return Err(VerbsError::new(VerbsCall::Reject, errno::EINVAL));
        };
        self.hub.unregister(id);
        let ptr = if private_data.is_empty() {
            core::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: id is live and owned; private_data is valid for its length (<= 148).
        let rc = unsafe { sys::rdma_reject(id, ptr, private_data.len() as u8) };
        let res = if rc != 0 {
            Err(os_err(VerbsCall::Reject))
        } else {
            Ok(())
        };
        // SAFETY: id is live, owned and unregistered.
        unsafe {
            sys::rdma_destroy_id(id);
        }
        res
    }
}

impl CmTarget for Progress {
    fn handle(&mut self, ev: &RawEvent) {
        self.on_event(ev);
    }

    fn notice(&self) -> Option<CqNotify> {
        self.notify.clone()
    }
}
