//! Queue pairs of the iWARP provider: one TCP connection each, with its send queue (Send, Send
//! with Invalidate, RDMA Write and RDMA Read turned into RDMAP messages; BIND_MW and LOCAL_INV
//! executed on the STag table in queue order), receive queue (or shared receive queue),
//! connection events and the completions it generates, in order, into its CQs.
//!
//! Normal operation: `queue_send` / `queue_recv` add to a batch, `flush_*` posts it (one
//! doorbell) and drives the connection. [`QpCore::progress`] (run by every poll of the QP's
//! CQs, by `poll_event` and by posting) writes and reads what the socket takes without
//! blocking: it transmits the send queue in order (a Send or Write completes once its last
//! segment is handed to TCP, as on siw; a Read when its last Read Response segment is placed;
//! a fenced WR waits for earlier Reads; a bind or local invalidation takes effect once every
//! WR before it is on the wire), answers the peer's Read Requests from registered
//! memory, and places what arrives (`qp/place.rs`). Completions of the send queue are
//! generated in posting order; an unsignaled WR holds its slot until a later completion.
//!
//! Recovery: an error found in what the peer sent (bad STag, bounds, rights, no receive, a
//! message too long for the receive) sends a Terminate (RFC 5040) and puts the QP into ERROR;
//! a Terminate from the peer, the peer closing TCP, a local protection error, a refused bind
//! (`MW_BIND_ERR`) or local invalidation (`LOC_QP_OP_ERR`), a CQ overrun or `disconnect` do the
//! same without a Terminate. In ERROR every outstanding and every later WR
//! completes with `WR_FLUSH_ERR`, and `Disconnected` is reported once.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

mod place;

use super::cq::{self, progress_all, CqInner, Drive};
use super::device::{lock, now_ns, DevInner, IwarpProvider};
use super::rdmap::{Message, ReadRequest};
use super::sgl::{RqEntry, Sgl};
use super::socket::{Closed, Endpoint, SendError, State};
use super::srq::SrqInner;
use super::stag::{BindReq, MrTable};
use super::term::TermCode;
use crate::verbs::{
    errno, validate, Access, CmEvent, CmEventKind, Completion, CqNotify, MemoryRegion, PrivateData,
    QpInit, QpOptions, QpState, QueuePair, RecvWr, SendFlags, SendOp, SendWr, VerbsCall,
    VerbsError, WcFlags, WcOpcode, WcStatus,
};

/// What a send WR does: on the wire, or (BIND_MW, LOCAL_INV) to the local STag table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Send,
    SendInv { rkey: u32 },
    Write { raddr: u64, rkey: u32 },
    Read { raddr: u64, rkey: u32 },
    LocalInv { rkey: u32 },
    Bind(BindReq),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqState {
    /// Not (fully) handed to TCP.
    Queued,
    /// Read Request sent; waiting for the Read Response.
    Reading,
    /// Finished with this status.
    Done(WcStatus),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SqEntry {
    pub(crate) wr_id: u64,
    pub(crate) op: Op,
    pub(crate) sgl: Sgl,
    signaled: bool,
    fence: bool,
    /// Octets handed to TCP (Send, Write) or placed (Read).
    pub(crate) done_len: u64,
    pub(crate) state: SqState,
}

/// A Read Request this side serves: the source checked at arrival, sent in segments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadResponse {
    pub(crate) req: ReadRequest,
    pub(crate) sent: u32,
}

/// One QP's state, behind the mutex its CQs and its handle share.
pub struct QpCore {
    pub(crate) dev: Arc<DevInner>,
    pub(crate) pd: u32,
    pub(crate) qpn: u32,
    pub(crate) state: QpState,
    pub(crate) opts: QpOptions,
    /// The shared receive queue Sends take their receives from, instead of `rq`.
    pub(crate) srq: Option<Arc<SrqInner>>,
    /// The connection; taken out only while [`QpCore::receive`] lends segments to placement.
    ep: Option<Endpoint>,
    /// The connection is to be closed at the next progress (a CQ overran during placement).
    shut: bool,
    scq: Arc<CqInner>,
    rcq: Arc<CqInner>,
    batch: Vec<SqEntry>,
    pub(crate) sq: VecDeque<SqEntry>,
    /// Send-queue slots taken (posted, not freed by a completion).
    sq_used: usize,
    /// Unsignaled WRs finished since the last completion (their slots free with the next).
    unsignaled_done: usize,
    pub(crate) reads_out: u32,
    send_msn: u32,
    read_msn: u32,
    rbatch: Vec<RqEntry>,
    pub(crate) rq: VecDeque<RqEntry>,
    /// The receive a multi-segment Send is being placed into, and the octets placed.
    pub(crate) rx_cur: Option<(RqEntry, u64)>,
    pub(crate) recv_msn: u32,
    pub(crate) read_resps: VecDeque<ReadResponse>,
    /// An error found while placing: the Terminate to send.
    pub(crate) fault: Option<TermCode>,
    events: VecDeque<CmEvent>,
    event_notify: Option<CqNotify>,
    doorbells: u64,
    pub(crate) scratch: Vec<u8>,
}

/// An RC queue pair of the iWARP provider.
pub struct IwarpQp {
    core: Arc<Mutex<QpCore>>,
    qpn: u32,
    local: SocketAddr,
    peer: SocketAddr,
}

impl core::fmt::Debug for IwarpQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IwarpQp({}, {} -> {})", self.qpn, self.local, self.peer)
    }
}

impl QpCore {
    /// A QP over `ep` (an initiator connecting, or a responder awaiting its decision).
    pub(crate) fn create(
        dev: &Arc<DevInner>,
        init: &QpInit<'_, IwarpProvider>,
        opts: QpOptions,
        ep: Endpoint,
        peer: SocketAddr,
    ) -> IwarpQp {
        let local = ep
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(dev.ip, 0));
        let qpn = dev.alloc_qpn();
        let core = QpCore {
            dev: dev.clone(),
            pd: init.pd.id,
            qpn,
            state: QpState::Init,
            opts,
            srq: init.srq.map(|s| s.inner.clone()),
            ep: Some(ep),
            shut: false,
            scq: init.send_cq.inner.clone(),
            rcq: init.recv_cq.inner.clone(),
            batch: Vec::new(),
            sq: VecDeque::new(),
            sq_used: 0,
            unsignaled_done: 0,
            reads_out: 0,
            send_msn: 1,
            read_msn: 1,
            rbatch: Vec::new(),
            rq: VecDeque::new(),
            rx_cur: None,
            recv_msn: 1,
            read_resps: VecDeque::new(),
            fault: None,
            events: VecDeque::new(),
            event_notify: None,
            doorbells: 0,
            scratch: vec![0; super::socket::DEFAULT_MULPDU],
        };
        let core = Arc::new(Mutex::new(core));
        let weak: Weak<Mutex<QpCore>> = Arc::downgrade(&core);
        init.send_cq.inner.attach(weak.clone());
        if !Arc::ptr_eq(&init.send_cq.inner, &init.recv_cq.inner) {
            init.recv_cq.inner.attach(weak);
        }
        let qp = IwarpQp {
            core,
            qpn,
            local,
            peer,
        };
        qp.register();
        qp
    }

    /// The connection (present except inside [`QpCore::receive`]'s placement).
    pub(crate) fn ep(&mut self) -> &mut Endpoint {
        // Invariant: only `receive` takes the endpoint out, and puts it back before returning;
        // placement never reaches for it.
        self.ep.as_mut().expect("endpoint lent to placement")
    }

    fn push_event(&mut self, kind: CmEventKind, status: i32, pdata: &[u8]) {
        let n = pdata.len().min(crate::verbs::PRIVATE_DATA_ACCEPT_MAX);
        self.events.push_back(CmEvent {
            kind,
            status,
            private_data: PrivateData::new(&pdata[..n]).unwrap_or_default(),
        });
        if let Some(n) = &self.event_notify {
            n();
        }
    }

    /// Queues a completion on the send (or receive) CQ; an overrun puts the QP into ERROR.
    pub(crate) fn complete(&mut self, recv: bool, c: Completion) {
        let cq = if recv { &self.rcq } else { &self.scq };
        if !cq.push(c) && self.state != QpState::Error {
            self.shut = true;
            self.enter_error();
        }
    }

    pub(crate) fn recv_completion(&self, wr_id: u64, status: WcStatus, len: u64) -> Completion {
        Completion {
            wr_id,
            status,
            opcode: WcOpcode::RECV,
            byte_len: u32::try_from(len).unwrap_or(u32::MAX),
            qp_num: self.qpn,
            src_qp: 0,
            flags: WcFlags::NONE,
            invalidated_rkey: 0,
            vendor_err: 0,
        }
    }

    /// Into ERROR: every outstanding WR flushes, `Disconnected` is reported (once, and only if
    /// the connection had been up).
    pub(crate) fn enter_error(&mut self) {
        if self.state == QpState::Error {
            return;
        }
        let was_up = self.state == QpState::Rts;
        self.state = QpState::Error;
        for e in self.sq.iter_mut() {
            if !matches!(e.state, SqState::Done(_)) {
                e.state = SqState::Done(WcStatus::WR_FLUSH_ERR);
            }
        }
        self.reads_out = 0;
        self.read_resps.clear();
        self.retire();
        if let Some((r, _)) = self.rx_cur.take() {
            let c = self.recv_completion(r.wr_id, WcStatus::WR_FLUSH_ERR, 0);
            self.complete(true, c);
        }
        while let Some(r) = self.rq.pop_front() {
            let c = self.recv_completion(r.wr_id, WcStatus::WR_FLUSH_ERR, 0);
            self.complete(true, c);
        }
        if was_up {
            self.push_event(CmEventKind::Disconnected, 0, &[]);
        }
    }

    /// Sends a Terminate with `code` and goes to ERROR.
    pub(crate) fn terminate(&mut self, code: TermCode) {
        self.ep().send_terminate(code);
        self.ep().poll(now_ns());
        self.enter_error();
    }

    /// Generates the send queue's completions, in posting order.
    fn retire(&mut self) {
        while let Some(&e) = self.sq.front() {
            let SqState::Done(status) = e.state else {
                return;
            };
            self.sq.pop_front();
            if e.signaled || !status.is_success() {
                let (opcode, len) = match e.op {
                    Op::Send | Op::SendInv { .. } => (WcOpcode::SEND, e.sgl.total()),
                    Op::Write { .. } => (WcOpcode::RDMA_WRITE, e.sgl.total()),
                    Op::Read { .. } => (WcOpcode::RDMA_READ, e.done_len),
                    Op::LocalInv { .. } => (WcOpcode::LOCAL_INV, 0),
                    Op::Bind(_) => (WcOpcode::BIND_MW, 0),
                };
                self.sq_used = self.sq_used.saturating_sub(self.unsignaled_done + 1);
                self.unsignaled_done = 0;
                let c = Completion {
                    wr_id: e.wr_id,
                    status,
                    opcode,
                    byte_len: u32::try_from(len).unwrap_or(u32::MAX),
                    qp_num: self.qpn,
                    ..Completion::default()
                };
                self.complete(false, c);
            } else {
                self.unsignaled_done += 1;
            }
        }
    }

    /// Responder: accepts with `private_data` after the QP was prepared.
    pub(crate) fn accept(&mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        let (ird, ord) = (self.opts.responder_resources, self.opts.initiator_depth);
        self.ep().set_ird_ord(u16::from(ird), u16::from(ord));
        self.ep()
            .accept(private_data)
            .map_err(|_| VerbsError::new(VerbsCall::Accept, errno::ECONNRESET))?;
        self.ep().poll(now_ns());
        self.state = QpState::Rts;
        self.push_event(CmEventKind::Established, 0, &[]);
        Ok(())
    }

    /// Active side: the outcome of the connect.
    fn on_connect_outcome(&mut self, st: State) {
        match st {
            State::Established => {
                let peer = self
                    .ep()
                    .handshake()
                    .negotiated()
                    .and_then(|n| n.peer_ird_ord);
                if let Some(w) = peer {
                    let cap = |v: u16| u8::try_from(v).unwrap_or(u8::MAX);
                    self.opts.initiator_depth = self.opts.initiator_depth.min(cap(w.ird));
                    self.opts.responder_resources = self.opts.responder_resources.min(cap(w.ord));
                }
                self.state = QpState::Rts;
                let pd = PrivateData::new(self.ep().peer_private_data()).unwrap_or_default();
                self.push_event(CmEventKind::Established, 0, pd.as_slice());
            }
            State::Closing(why) | State::Closed(why) => {
                let pdata = PrivateData::new(self.ep().peer_private_data()).unwrap_or_default();
                let (kind, status) = match why {
                    Closed::Rejected => (CmEventKind::Rejected, -errno::ECONNRESET),
                    Closed::Io(std::io::ErrorKind::ConnectionRefused) => {
                        (CmEventKind::Rejected, -errno::ECONNREFUSED)
                    }
                    Closed::Handshake(super::handshake::HandshakeError::Timeout) => {
                        (CmEventKind::Unreachable, -errno::ETIMEDOUT)
                    }
                    _ => (CmEventKind::ConnectError, -errno::ECONNRESET),
                };
                self.enter_error();
                self.push_event(kind, status, pdata.as_slice());
            }
            _ => {}
        }
    }

    /// Does the socket I/O that can be done now and acts on it.
    pub(crate) fn progress(&mut self) {
        if self.shut {
            self.shut = false;
            self.ep().shutdown();
        }
        if matches!(self.ep().state(), State::Closed(_)) && self.state == QpState::Error {
            return;
        }
        let st = self.ep().poll(now_ns());
        if self.state == QpState::Init {
            if self.ep().handshake().role() == super::handshake::Role::Initiator {
                self.on_connect_outcome(st);
            }
            return;
        }
        if self.state != QpState::Rts {
            return;
        }
        self.receive();
        if self.state == QpState::Rts {
            self.transmit();
            self.ep().poll(now_ns());
        }
        if self.state == QpState::Rts
            && matches!(self.ep().state(), State::Closing(_) | State::Closed(_))
        {
            self.enter_error();
        }
    }

    /// Hands every complete segment received to placement; a fault sends a Terminate.
    fn receive(&mut self) {
        // The endpoint lends each segment; placement needs the rest of the QP, so the endpoint
        // is taken out for the call.
        let Some(mut ep) = self.ep.take() else {
            return;
        };
        let r = ep.recv(|m| place::on_message(self, m));
        self.ep = Some(ep);
        if let Some(code) = self.fault.take() {
            return self.terminate(code);
        }
        if r.is_err() {
            self.enter_error();
        }
    }

    /// Transmits what the send queue and the Read Responses allow now.
    fn transmit(&mut self) {
        while let Some(rr) = self.read_resps.front().copied() {
            match place::send_read_response(self, rr) {
                Ok(true) => {
                    self.read_resps.pop_front();
                }
                Ok(false) => return,
                Err(code) => return self.terminate(code),
            }
        }
        let mut i = 0;
        while i < self.sq.len() && self.state == QpState::Rts {
            let e = self.sq[i];
            if e.state != SqState::Queued {
                i += 1;
                continue;
            }
            if e.fence && self.reads_out > 0 {
                break;
            }
            let more = match e.op {
                Op::Read { raddr, rkey } => self.send_read_request(i, raddr, rkey),
                Op::Send | Op::SendInv { .. } | Op::Write { .. } => self.send_data(i),
                Op::LocalInv { rkey } => self.local_op(i, |t, pd, _| {
                    let done = t.invalidate(rkey, pd, None).is_ok();
                    (done, WcStatus::LOC_QP_OP_ERR)
                }),
                Op::Bind(req) => self.local_op(i, |t, pd, qpn| {
                    (t.bind(&req, pd, qpn), WcStatus::MW_BIND_ERR)
                }),
            };
            if !more {
                break;
            }
            i += 1;
        }
        self.retire();
    }

    fn send_read_request(&mut self, i: usize, raddr: u64, rkey: u32) -> bool {
        if self.reads_out >= u32::from(self.opts.initiator_depth.max(1)) {
            return false;
        }
        let e = self.sq[i];
        let sink = e.sgl.as_slice().first().copied().unwrap_or_default();
        let check = lock(&self.dev.mrs).check(
            sink.lkey,
            self.pd,
            sink.addr,
            u64::from(sink.len),
            Access::LOCAL_WRITE,
        );
        if check.is_err() && e.sgl.n > 0 {
            self.local_error(i);
            return false;
        }
        let msg = Message::ReadRequest(ReadRequest {
            msn: self.read_msn,
            sink_stag: sink.lkey,
            sink_to: sink.addr,
            size: sink.len,
            src_stag: rkey,
            src_to: raddr,
        });
        match self.ep().queue_message(&msg) {
            Ok(()) => {
                self.read_msn = self.read_msn.wrapping_add(1);
                // A zero-length Read also waits for its (empty) Read Response.
                self.reads_out += 1;
                self.sq[i].state = SqState::Reading;
                true
            }
            Err(_) => false,
        }
    }

    /// Sends the next segments of a Send or Write; `true` once all are handed to TCP.
    fn send_data(&mut self, i: usize) -> bool {
        let room = self.ep().mulpdu() - super::ddp::UNTAGGED_HDR_LEN;
        loop {
            let e = self.sq[i];
            let total = e.sgl.total();
            let n = (total - e.done_len).min(room as u64) as usize;
            if self.scratch.len() < n {
                self.scratch.resize(n, 0);
            }
            let mut buf = std::mem::take(&mut self.scratch);
            let gathered = place::gather(self, &e.sgl, e.done_len, &mut buf[..n]);
            if gathered.is_err() {
                self.scratch = buf;
                self.local_error(i);
                return false;
            }
            let last = e.done_len + n as u64 == total;
            let msg = match e.op {
                Op::Write { raddr, rkey } => Message::Tagged {
                    read_response: false,
                    last,
                    stag: rkey,
                    to: raddr.wrapping_add(e.done_len),
                    payload: &buf[..n],
                },
                _ => Message::Send {
                    solicited: false,
                    invalidate: match e.op {
                        Op::SendInv { rkey } => Some(rkey),
                        _ => None,
                    },
                    last,
                    msn: self.send_msn,
                    mo: e.done_len as u32,
                    payload: &buf[..n],
                },
            };
            let r = self.ep().queue_message(&msg);
            self.scratch = buf;
            match r {
                Ok(()) => self.sq[i].done_len += n as u64,
                Err(SendError::Full) => {
                    self.ep().poll(now_ns());
                    return false;
                }
                Err(_) => {
                    self.local_error(i);
                    return false;
                }
            }
            if last {
                if matches!(e.op, Op::Send | Op::SendInv { .. }) {
                    self.send_msn = self.send_msn.wrapping_add(1);
                }
                self.sq[i].state = SqState::Done(WcStatus::SUCCESS);
                return true;
            }
        }
    }

    /// A local protection error on send-queue entry `i`: it completes `LOC_PROT_ERR`, the QP
    /// goes to ERROR and the connection is closed.
    fn local_error(&mut self, i: usize) {
        self.fail_local(i, WcStatus::LOC_PROT_ERR);
    }

    /// Send-queue entry `i` failed locally with `status`: the QP goes to ERROR and the
    /// connection is closed (later WRs flush, the peer sees the stream end).
    fn fail_local(&mut self, i: usize, status: WcStatus) {
        self.sq[i].state = SqState::Done(status);
        self.ep().shutdown();
        self.enter_error();
    }

    /// Executes the BIND_MW or LOCAL_INV at send-queue entry `i` on the device's STag table, in
    /// send-queue order (everything posted before it is on the wire): `op` says whether it was
    /// done and the status of a refusal, which puts the QP into ERROR. `true` when done.
    fn local_op(
        &mut self,
        i: usize,
        op: impl FnOnce(&mut MrTable, u32, u32) -> (bool, WcStatus),
    ) -> bool {
        let (done, refused) = op(&mut lock(&self.dev.mrs), self.pd, self.qpn);
        if !done {
            self.fail_local(i, refused);
            return false;
        }
        self.sq[i].state = SqState::Done(WcStatus::SUCCESS);
        true
    }
}

impl Drive for Mutex<QpCore> {
    fn drive(&self) {
        lock(self).progress();
    }

    fn try_drive(&self) {
        match self.try_lock() {
            Ok(mut c) => c.progress(),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().progress(),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }
}

impl IwarpQp {
    /// Adds the QP to the connections every poll drives ([`progress_all`]).
    pub(crate) fn register(&self) {
        let weak: Weak<Mutex<QpCore>> = Arc::downgrade(&self.core);
        cq::register(weak);
    }

    /// Responder: answers the peer's MPA Request (see [`QpCore::accept`]).
    pub(crate) fn accept(&mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        self.with(|c| c.accept(private_data))
    }

    fn with<T>(&self, f: impl FnOnce(&mut QpCore) -> T) -> T {
        f(&mut lock(&self.core))
    }
}

/// The operation of a send WR on QP `c`; a bind records its new key in the window now (the
/// window's key is that of the last bind queued).
fn send_op(c: &QpCore, op: &SendOp<'_, IwarpProvider>) -> Result<Op, VerbsError> {
    match *op {
        SendOp::Send => Ok(Op::Send),
        SendOp::SendWithInv { rkey } => Ok(Op::SendInv { rkey }),
        SendOp::LocalInv { rkey } => Ok(Op::LocalInv { rkey }),
        SendOp::BindMw(b) => {
            let ours = Arc::ptr_eq(&b.mw.dev, &c.dev) && Arc::ptr_eq(&b.mr.handle().dev, &c.dev);
            if !ours {
                return Err(VerbsError::new(VerbsCall::PostSend, errno::EINVAL));
            }
            let (old_key, new_key) = b.mw.set_key(b.rkey);
            Ok(Op::Bind(BindReq {
                index: b.mw.index,
                old_key,
                new_key,
                region: b.mr.keys().lkey,
                addr: b.addr,
                len: b.len,
                access: b.access,
            }))
        }
        SendOp::RdmaWrite { remote_addr, rkey } => Ok(Op::Write {
            raddr: remote_addr,
            rkey,
        }),
        SendOp::RdmaRead { remote_addr, rkey } => Ok(Op::Read {
            raddr: remote_addr,
            rkey,
        }),
    }
}

impl QueuePair<IwarpProvider> for IwarpQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        self.with(|c| c.state)
    }

    fn options(&self) -> QpOptions {
        self.with(|c| c.opts)
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn queue_send(&mut self, wr: &SendWr<'_, IwarpProvider>) -> Result<(), VerbsError> {
        self.with(|c| {
            if c.state != QpState::Rts && c.state != QpState::Error {
                return Err(VerbsError::new(VerbsCall::PostSend, errno::EINVAL));
            }
            validate::send_wr(wr, &c.opts, &c.dev.caps)?;
            if c.sq_used + c.batch.len() >= c.opts.max_send_wr as usize {
                return Err(VerbsError::new(VerbsCall::PostSend, errno::ENOMEM));
            }
            let op = send_op(c, &wr.op)?;
            c.batch.push(SqEntry {
                wr_id: wr.wr_id,
                op,
                sgl: Sgl::new(wr.sgl),
                signaled: wr.flags.contains(SendFlags::SIGNALED),
                fence: wr.flags.contains(SendFlags::FENCE),
                done_len: 0,
                state: SqState::Queued,
            });
            Ok(())
        })
    }

    fn flush_send(&mut self) -> Result<(), VerbsError> {
        self.with(|c| {
            if c.batch.is_empty() {
                return Ok(());
            }
            c.doorbells += 1;
            let flush = c.state == QpState::Error;
            for mut e in c.batch.drain(..) {
                if flush {
                    e.state = SqState::Done(WcStatus::WR_FLUSH_ERR);
                }
                c.sq_used += 1;
                c.sq.push_back(e);
            }
            if flush {
                c.retire();
            } else {
                c.progress();
            }
            Ok(())
        })
    }

    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.with(|c| {
            if c.srq.is_some() {
                return Err(VerbsError::new(VerbsCall::PostRecv, errno::EINVAL));
            }
            validate::recv_wr(wr, c.opts.max_recv_sge, VerbsCall::PostRecv)?;
            let used = c.rq.len() + c.rbatch.len() + usize::from(c.rx_cur.is_some());
            if used >= c.opts.max_recv_wr as usize {
                return Err(VerbsError::new(VerbsCall::PostRecv, errno::ENOMEM));
            }
            c.rbatch.push(RqEntry {
                wr_id: wr.wr_id,
                sgl: Sgl::new(wr.sgl),
            });
            Ok(())
        })
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        self.with(|c| {
            if c.rbatch.is_empty() {
                return Ok(());
            }
            c.doorbells += 1;
            // The batch is moved out and put back empty: its capacity is kept, nothing is
            // allocated per flush.
            let mut batch = std::mem::take(&mut c.rbatch);
            for r in batch.drain(..) {
                if c.state == QpState::Error {
                    let wc = c.recv_completion(r.wr_id, WcStatus::WR_FLUSH_ERR, 0);
                    c.complete(true, wc);
                } else {
                    c.rq.push_back(r);
                }
            }
            c.rbatch = batch;
            Ok(())
        })
    }

    fn doorbells(&self) -> u64 {
        self.with(|c| c.doorbells)
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError> {
        progress_all();
        self.with(|c| {
            c.progress();
            Ok(c.events.pop_front())
        })
    }

    fn set_event_notify(&self, notify: CqNotify) -> bool {
        self.with(|c| c.event_notify = Some(notify));
        true
    }

    fn disconnect(&mut self) -> Result<(), VerbsError> {
        self.with(|c| {
            c.ep().shutdown();
            if c.state == QpState::Init {
                c.enter_error();
                c.push_event(CmEventKind::Disconnected, 0, &[]);
            }
            c.enter_error();
            Ok(())
        })
    }
}

impl Drop for IwarpQp {
    fn drop(&mut self) {
        self.with(|c| c.ep().shutdown());
    }
}
