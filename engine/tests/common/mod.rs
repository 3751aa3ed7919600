//! Two-endpoint harness for `rpcrdma_engine::conn` without a verbs provider.
//!
//! Two in-memory "hosts" (byte arenas with fake registrations and memory windows) and a pump
//! that executes the [`WorkRequest`]s of both connections against them in virtual time. The
//! harness enforces what a real RC QP would: lkey / rkey validity, access rights and bounds,
//! memory window key sequencing, receive buffer sizes. It also ASSERTS, on every post:
//! - no Send arrives without a posted receive (that would be an RNR; clients use rnr_retry 0),
//! - the requester never has more calls outstanding than the responder granted (0 → 1,
//!   values above the requester's maximum clamped; one until the first non-error reply, the
//!   `rdma_credit` of RDMA_ERROR / RDMA2_ERROR never taken as a grant, in either direction),
//! - queue depths are respected;
//!
//! and whenever the requester reports a call finished it tries every STag that call advertised
//! and asserts none of them allows remote access any more (memory-window mode).
//!
//! A side may be "raw" (no `Connection`): tests then inject hand-written messages and read what
//! arrives, to probe one engine with hostile or foreign peers.
#![allow(dead_code)]

pub mod alloc_count;
mod exec;
mod host;
pub mod iwarp;
pub mod procs;
pub mod soft;

pub use host::Host;

use rpcrdma_engine::conn::{
    BackchannelPools, CallId, CallSpec, CmInput, Config, Connection, Event, IncomingCall, LocalBuf,
    Pools, Reply, ReplyKind, ReplySpec, Role, StagMode, WorkRequest,
};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::{v1, v2};
use rpcrdma_engine::verbs::{Access, Completion, Sge, WrId};
use std::collections::VecDeque;

// ---------------------------------------------------------------------------------------------
// Sides.

/// Sizes of one endpoint's pools.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    pub headers: usize,
    pub recvs: usize,
    pub data: usize,
    pub data_size: u32,
    pub mws: usize,
    /// Backchannel send buffers (0: created with `Connection::new`).
    pub bc_headers: usize,
    /// Backchannel receive buffers.
    pub bc_recvs: usize,
}

impl Sizing {
    pub fn for_config(role: Role, cfg: &Config) -> Sizing {
        let c = cfg.credits as usize;
        match role {
            Role::Requester => Sizing {
                headers: c,
                recvs: c,
                data: 0,
                data_size: 0,
                mws: c * 8,
                bc_headers: 0,
                bc_recvs: 0,
            },
            Role::Responder => Sizing {
                headers: 2 * c,
                recvs: 3 * c,
                data: c,
                data_size: 256 * 1024,
                mws: 0,
                bc_headers: 0,
                bc_recvs: 0,
            },
        }
    }

    /// As [`Sizing::for_config`], plus backchannel memory sized as `BackchannelPools` says.
    pub fn with_backchannel(role: Role, cfg: &Config) -> Sizing {
        let b = cfg.backchannel_credits as usize;
        let mut s = Self::for_config(role, cfg);
        match role {
            Role::Requester => {
                s.bc_headers = 2 * b;
                s.bc_recvs = 2 * b;
            }
            Role::Responder => {
                s.bc_headers = b;
                s.bc_recvs = b;
            }
        }
        s
    }
}

pub const RAW_RECV: u8 = 0x7f;
pub const RAW_SEND: u8 = 0x7e;

/// One endpoint.
pub struct Side {
    pub host: Host,
    pub conn: Option<Connection>,
    pub cfg: Config,
    pub rq: VecDeque<(u64, Sge)>,
    pub cq: VecDeque<Completion>,
    pub events: Vec<Event>,
    pub sq_outstanding: u32,
    /// Raw side: messages received (copied) with their completion.
    pub inbox: Vec<(Vec<u8>, Completion)>,
    raw_recvs: Vec<LocalBuf>,
    raw_send: LocalBuf,
}

impl Side {
    pub fn conn(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("raw side has no connection")
    }
}

pub fn make_side(
    name: &'static str,
    base: u64,
    key_base: u32,
    role: Role,
    cfg: Config,
    sizing: Sizing,
) -> Side {
    let mut host = Host::new(name, base, 64 << 20, key_base);
    let conn = build_conn(&mut host, role, cfg, sizing);
    Side {
        host,
        conn: Some(conn),
        cfg,
        rq: VecDeque::with_capacity(4096),
        cq: VecDeque::with_capacity(8192),
        events: Vec::with_capacity(4096),
        sq_outstanding: 0,
        inbox: Vec::new(),
        raw_recvs: Vec::new(),
        raw_send: LocalBuf::EMPTY,
    }
}

/// A connection over fresh pools carved out of `host`.
pub fn build_conn(host: &mut Host, role: Role, cfg: Config, sizing: Sizing) -> Connection {
    let lw = Access::LOCAL_WRITE;
    let headers: Vec<LocalBuf> = (0..sizing.headers)
        .map(|_| host.alloc(cfg.inline_send.max(1024), lw))
        .collect();
    let recv_size = rpcrdma_engine::proto::private_data::representable_size(cfg.inline_recv);
    let recvs: Vec<LocalBuf> = (0..sizing.recvs)
        .map(|_| host.alloc(recv_size, lw))
        .collect();
    let data: Vec<LocalBuf> = (0..sizing.data)
        .map(|_| host.alloc(sizing.data_size, lw))
        .collect();
    let mws = host.alloc_mws(sizing.mws);
    let zero = host.alloc(64, lw | Access::MW_BIND | Access::REMOTE_READ);
    let pools = Pools {
        headers: &headers,
        recvs: &recvs,
        data: &data,
        mws: &mws,
        zero,
    };
    let bc_headers: Vec<LocalBuf> = (0..sizing.bc_headers)
        .map(|_| host.alloc(cfg.inline_send.max(1024), lw))
        .collect();
    let bc_recvs: Vec<LocalBuf> = (0..sizing.bc_recvs)
        .map(|_| host.alloc(recv_size, lw))
        .collect();
    if sizing.bc_headers + sizing.bc_recvs > 0 {
        Connection::with_backchannel(
            role,
            cfg,
            &pools,
            &BackchannelPools {
                headers: &bc_headers,
                recvs: &bc_recvs,
            },
        )
        .expect("config accepted")
    } else {
        Connection::new(role, cfg, &pools).expect("config accepted")
    }
}

pub fn make_raw_side(name: &'static str, base: u64, key_base: u32) -> Side {
    let mut host = Host::new(name, base, 64 << 20, key_base);
    let raw_send = host.alloc(64 * 1024, Access::LOCAL_WRITE);
    Side {
        host,
        conn: None,
        cfg: Config::DEFAULT,
        rq: VecDeque::with_capacity(4096),
        cq: VecDeque::with_capacity(8192),
        events: Vec::new(),
        sq_outstanding: 0,
        inbox: Vec::new(),
        raw_recvs: Vec::new(),
        raw_send,
    }
}

// ---------------------------------------------------------------------------------------------
// The pair.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The requester side ("a").
    Req,
    /// The responder side ("b").
    Resp,
}

/// Messages by direction and kind, as classified on the wire by the harness.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WireCounts {
    pub fwd_calls: u32,
    pub fwd_replies: u32,
    pub back_calls: u32,
    pub back_replies: u32,
    pub unknown: u32,
}

/// What a Send carries, judged by the harness from the message alone (independently of the
/// engine): v1 RDMA_MSG by the RPC msg_type at the payload, RDMA_NOMSG and RDMA_ERROR by the
/// sender, v2 by `rdma_direction` / `rdma_optdir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FwdCall,
    FwdReply,
    BackCall,
    BackReply,
    Unknown,
}

/// `rdma_proc` of RDMA_ERROR and RDMA2_ERROR.
pub const PROC_ERROR: u32 = 4;

pub fn classify(from: Dir, msg: &[u8]) -> Kind {
    let w = |i: usize| -> Option<u32> {
        msg.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (is_call, is_reply) = match from {
        Dir::Req => (Kind::FwdCall, Kind::BackReply),
        Dir::Resp => (Kind::BackCall, Kind::FwdReply),
    };
    match (w(1), w(3)) {
        (Some(1), Some(0 | 2)) => {
            let Ok(h) = v1::decode(msg, &ChunkLimits::DEFAULT) else {
                return Kind::Unknown;
            };
            match h
                .payload
                .get(4..8)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            {
                Some(0) => is_call,
                Some(1) => is_reply,
                _ => Kind::Unknown,
            }
        }
        (Some(1), Some(1)) => match from {
            Dir::Req => Kind::FwdCall,
            Dir::Resp => Kind::FwdReply,
        },
        (Some(_), Some(4)) => is_reply,
        (Some(2), Some(0 | 1 | 5)) => match w(4) {
            Some(0) => is_call,
            Some(1) => is_reply,
            _ => Kind::Unknown,
        },
        _ => Kind::Unknown,
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub sends: u64,
    pub sends_with_inv: u64,
    pub reads: u64,
    pub writes: u64,
    pub binds: u64,
    pub local_invs: u64,
    pub recvs_posted: u64,
    pub errors: u64,
    pub max_outstanding: u32,
    /// Octets written by RDMA Write into the requester (payload only).
    pub write_octets: u64,
}

const EXPOSED_SLOTS: usize = 256;

#[derive(Clone, Copy)]
struct Exposed {
    used: bool,
    xid: u32,
    handles: [u32; 32],
    n: usize,
}

pub struct Pair {
    pub req: Side,
    pub resp: Side,
    pub now: u64,
    /// Credit bookkeeping of the requester as seen on the wire.
    pub grant: u32,
    pub outstanding: u32,
    pub credit_max: u32,
    pub check_credits: bool,
    /// Backward credits granted by the client's last backward reply (1 before the first).
    pub bc_grant: u32,
    /// Backward calls sent by the server and not yet answered on the wire.
    pub bc_outstanding: u32,
    /// The client's backward credits once its backchannel is enabled (0 before): at every
    /// message arriving at the client, at least `outstanding + bc_reserve - bc_outstanding`
    /// receives must be posted (RFC 8167 §4.2.1).
    pub bc_reserve: u32,
    /// Forward calls and replies, backward calls and replies seen on the wire.
    pub wire: WireCounts,
    /// Check STags after every finished call (memory-window mode).
    pub check_stags: bool,
    pub stats: Stats,
    scratch: Vec<u8>,
    exposed: Vec<Exposed>,
    /// Every Send's transport header words 0..4 (xid, vers, credits, proc) by direction, for
    /// inspection (bounded; cleared by tests as they like).
    pub sent_procs: Vec<(Dir, u32, u32, u32, u32)>,
    pub record_procs: bool,
    /// With `record`: a copy of every message sent (allocates; not for the allocation test).
    pub sent: Vec<(Dir, Vec<u8>)>,
    pub record: bool,
    /// Every RDMA Read / Write executed: (direction, local length, remote address, rkey).
    pub rdma_log: Vec<(Dir, bool, u32, u64, u32)>,
    /// With `record`: every invalidation executed on a host, (host side, rkey, remotely by
    /// Send With Invalidate).
    pub inv_log: Vec<(Dir, u32, bool)>,
}

impl Pair {
    /// Two connections with `req_cfg` / `resp_cfg`, connected (private data exchanged).
    pub fn new(req_cfg: Config, resp_cfg: Config) -> Pair {
        let req = make_side(
            "requester",
            0x1000_0000,
            0x10,
            Role::Requester,
            req_cfg,
            Sizing::for_config(Role::Requester, &req_cfg),
        );
        let resp = make_side(
            "responder",
            0x9000_0000,
            0x20,
            Role::Responder,
            resp_cfg,
            Sizing::for_config(Role::Responder, &resp_cfg),
        );
        let mut p = Pair::from_sides(req, resp);
        p.credit_max = req_cfg.credits;
        p.check_stags = req_cfg.stag == StagMode::MemoryWindows;
        p.connect();
        p
    }

    /// Default configuration on both sides.
    pub fn default_pair() -> Pair {
        Pair::new(Config::DEFAULT, Config::DEFAULT)
    }

    pub fn from_sides(req: Side, resp: Side) -> Pair {
        Pair {
            credit_max: req.cfg.credits,
            req,
            resp,
            now: 1_000,
            grant: 1,
            outstanding: 0,
            check_credits: true,
            bc_grant: 1,
            bc_outstanding: 0,
            bc_reserve: 0,
            wire: WireCounts::default(),
            check_stags: false,
            stats: Stats::default(),
            scratch: Vec::with_capacity(1 << 20),
            exposed: vec![
                Exposed {
                    used: false,
                    xid: 0,
                    handles: [0; 32],
                    n: 0,
                };
                EXPOSED_SLOTS
            ],
            sent_procs: Vec::with_capacity(1 << 16),
            record_procs: false,
            sent: Vec::new(),
            record: false,
            rdma_log: Vec::new(),
            inv_log: Vec::new(),
        }
    }

    /// Exchanges private data (both sides established), then pumps the initial receives. Each
    /// side gets what the other's [`Connection::private_data_opt`] gives (nothing when it sends
    /// none; a raw side sends none).
    pub fn connect(&mut self) {
        let req_pd = self
            .req
            .conn
            .as_ref()
            .and_then(|c| c.private_data_opt())
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let resp_pd = self
            .resp
            .conn
            .as_ref()
            .and_then(|c| c.private_data_opt())
            .map(|b| b.to_vec())
            .unwrap_or_default();
        self.connect_with(&resp_pd, &req_pd);
    }

    /// Establishes both sides with the given private data as received: `to_req` is what the
    /// requester gets in the accept, `to_resp` what the responder gets in the connect request.
    pub fn connect_with(&mut self, to_req: &[u8], to_resp: &[u8]) {
        let now = self.now;
        if let Some(c) = self.req.conn.as_mut() {
            c.handle_cm(
                now,
                CmInput::Established {
                    private_data: to_req,
                },
            );
        }
        if let Some(c) = self.resp.conn.as_mut() {
            c.handle_cm(
                now,
                CmInput::Established {
                    private_data: to_resp,
                },
            );
        }
        self.pump();
    }

    fn side(&mut self, d: Dir) -> &mut Side {
        match d {
            Dir::Req => &mut self.req,
            Dir::Resp => &mut self.resp,
        }
    }

    /// Runs both endpoints until nothing moves.
    pub fn pump(&mut self) {
        loop {
            let mut progress = false;
            progress |= self.drain_wrs(Dir::Req);
            progress |= self.drain_wrs(Dir::Resp);
            progress |= self.deliver_one(Dir::Req);
            progress |= self.deliver_one(Dir::Resp);
            self.collect_events(Dir::Req);
            self.collect_events(Dir::Resp);
            self.now += 100;
            if let Some(t) = self.req.conn.as_ref().and_then(|c| c.poll_timeout()) {
                if t <= self.now {
                    let now = self.now;
                    let side = &mut self.req;
                    if let Some(conn) = side.conn.as_mut() {
                        conn.handle_timeout(now, &mut side.host);
                    }
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
    }

    /// Advances virtual time by `ns` (timers fire in the next pump).
    pub fn advance(&mut self, ns: u64) {
        self.now += ns;
        self.pump();
    }

    fn drain_wrs(&mut self, d: Dir) -> bool {
        let mut any = false;
        loop {
            let Some(conn) = self.side(d).conn.as_mut() else {
                return any;
            };
            let Some(wr) = conn.poll_wr() else {
                return any;
            };
            any = true;
            self.exec(d, wr);
        }
    }

    fn deliver_one(&mut self, d: Dir) -> bool {
        let now = self.now;
        let side = self.side(d);
        let Some(c) = side.cq.pop_front() else {
            return false;
        };
        match side.conn.as_mut() {
            Some(conn) => conn.handle_completion(now, &c, &mut side.host),
            None => {
                let kind = WrId(c.wr_id).kind();
                if kind == RAW_RECV && c.status.is_success() {
                    let i = WrId(c.wr_id).index() as usize;
                    let b = side.raw_recvs[i];
                    let data = side.host.read_at(b.addr, c.byte_len as usize).to_vec();
                    side.inbox.push((data, c));
                }
            }
        }
        true
    }

    fn collect_events(&mut self, d: Dir) {
        loop {
            let Some(conn) = self.side(d).conn.as_mut() else {
                return;
            };
            let Some(ev) = conn.poll_event() else {
                return;
            };
            if d == Dir::Req {
                let xid = match ev {
                    Event::ReplyReady(r) => Some(r.xid),
                    Event::CallFailed { xid, error, .. } => {
                        if error == rpcrdma_engine::conn::CallError::ConnectionLost {
                            None
                        } else {
                            Some(xid)
                        }
                    }
                    _ => None,
                };
                if let Some(xid) = xid {
                    self.check_finished_call(xid);
                }
            }
            self.side(d).events.push(ev);
        }
    }

    /// Tries every STag the call advertised: none may allow remote access any more.
    fn check_finished_call(&mut self, xid: u32) {
        for e in self.exposed.iter_mut() {
            if e.used && e.xid == xid {
                if self.check_stags {
                    for &h in &e.handles[..e.n] {
                        assert!(
                            !self.req.host.rkey_live(h),
                            "STag {h:#x} of finished call {xid:#x} still allows remote access"
                        );
                    }
                }
                e.used = false;
            }
        }
    }

    fn record_exposed(&mut self, xid: u32, handles: &[u32]) {
        let Some(e) = self.exposed.iter_mut().find(|e| !e.used) else {
            panic!("harness: too many calls in flight to track");
        };
        e.used = true;
        e.xid = xid;
        e.n = handles.len().min(32);
        e.handles[..e.n].copy_from_slice(&handles[..e.n]);
    }

    fn complete(&mut self, d: Dir, wc: Completion) {
        if !wc.status.is_success() {
            self.stats.errors += 1;
            eprintln!("harness: {d:?} error completion {wc:?}");
        }
        let s = self.side(d);
        if !wc.opcode.is_recv() {
            s.sq_outstanding = s.sq_outstanding.saturating_sub(1);
        }
        s.cq.push_back(wc);
    }

    // -----------------------------------------------------------------------------------------
    // Raw sides.

    /// Raw side `d` posts `n` receive buffers of `size` octets.
    pub fn raw_post_recvs(&mut self, d: Dir, n: usize, size: u32) {
        let s = self.side(d);
        for _ in 0..n {
            let b = s.host.alloc(size, Access::LOCAL_WRITE);
            let i = s.raw_recvs.len();
            s.raw_recvs.push(b);
            s.rq.push_back((WrId::new(RAW_RECV, i as u64).raw(), b.sge()));
        }
    }

    /// Raw side `d` sends `msg` (optionally with invalidate).
    pub fn raw_send(&mut self, d: Dir, msg: &[u8], invalidate: Option<u32>) {
        let s = self.side(d);
        let b = s.raw_send;
        assert!(msg.len() <= b.len as usize);
        s.host.write(b.addr, msg);
        let mut sges = [Sge::default(); rpcrdma_engine::conn::MAX_SGE];
        sges[0] = Sge {
            addr: b.addr,
            len: msg.len() as u32,
            lkey: b.lkey,
        };
        self.exec(
            d,
            WorkRequest::Send {
                wr_id: WrId::new(RAW_SEND, 0),
                sges,
                nsge: 1,
                invalidate,
            },
        );
        // The raw side's own send completion is not interesting.
        self.side(d).cq.retain(|c| WrId(c.wr_id).kind() != RAW_SEND);
        self.pump();
    }

    /// Raw side `d`: the messages received so far (drained).
    pub fn raw_take(&mut self, d: Dir) -> Vec<Vec<u8>> {
        self.raw_take_completions(d)
            .into_iter()
            .map(|(m, _)| m)
            .collect()
    }

    /// Raw side `d`: the messages received so far with their receive completions (drained), to
    /// see e.g. whether a message came with Send With Invalidate.
    pub fn raw_take_completions(&mut self, d: Dir) -> Vec<(Vec<u8>, Completion)> {
        self.pump();
        let s = self.side(d);
        while let Some(c) = s.cq.pop_front() {
            let kind = WrId(c.wr_id).kind();
            if kind == RAW_RECV && c.status.is_success() {
                let i = WrId(c.wr_id).index() as usize;
                let b = s.raw_recvs[i];
                s.inbox
                    .push((s.host.read_at(b.addr, c.byte_len as usize).to_vec(), c));
            }
        }
        s.inbox.drain(..).collect()
    }

    // -----------------------------------------------------------------------------------------
    // Application helpers.

    pub fn call(&mut self, spec: &CallSpec<'_>) -> CallId {
        self.try_call(spec).expect("start_call")
    }

    pub fn try_call(
        &mut self,
        spec: &CallSpec<'_>,
    ) -> Result<CallId, rpcrdma_engine::conn::StartError> {
        let now = self.now;
        let side = &mut self.req;
        let conn = side.conn.as_mut().expect("requester");
        let r = conn.start_call(now, spec, &mut side.host);
        self.pump();
        r
    }

    pub fn reply(&mut self, call: CallId, spec: &ReplySpec<'_>) -> ReplyKind {
        let now = self.now;
        let side = &mut self.resp;
        let conn = side.conn.as_mut().expect("responder");
        let k = conn
            .send_reply(now, call, spec, &mut side.host)
            .expect("send_reply");
        self.pump();
        k
    }

    /// The next CallReady of the responder.
    pub fn next_call(&mut self) -> Option<IncomingCall> {
        let i = self
            .resp
            .events
            .iter()
            .position(|e| matches!(e, Event::CallReady(_)))?;
        match self.resp.events.remove(i) {
            Event::CallReady(c) => Some(c),
            _ => None,
        }
    }

    /// The next requester event that finishes a call.
    pub fn next_done(&mut self) -> Option<Event> {
        let i = self
            .req
            .events
            .iter()
            .position(|e| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. }))?;
        Some(self.req.events.remove(i))
    }

    /// The last message sent in direction `d` (needs `record`).
    pub fn last_sent(&self, d: Dir) -> &[u8] {
        &self
            .sent
            .iter()
            .rev()
            .find(|(x, _)| *x == d)
            .expect("nothing recorded")
            .1
    }

    // -----------------------------------------------------------------------------------------
    // Backward direction (RFC 8167).

    /// The connection is lost: both sides see the disconnect, the harness forgets what was in
    /// flight (a real QP flushes it).
    pub fn disconnect(&mut self) {
        let now = self.now;
        for side in [&mut self.req, &mut self.resp] {
            if let Some(c) = side.conn.as_mut() {
                c.handle_cm(now, CmInput::Disconnected);
            }
            side.rq.clear();
            side.cq.clear();
            side.sq_outstanding = 0;
        }
        self.collect_events(Dir::Req);
        self.collect_events(Dir::Resp);
        for side in [&mut self.req, &mut self.resp] {
            while side.conn.as_mut().and_then(|c| c.poll_wr()).is_some() {}
        }
        for e in self.exposed.iter_mut() {
            e.used = false;
        }
        self.grant = 1;
        self.outstanding = 0;
        self.bc_grant = 1;
        self.bc_outstanding = 0;
        self.bc_reserve = 0;
    }

    /// The client reconnects: both sides get new connections (same configurations and
    /// sizings, fresh pools from the same hosts, so buffers the applications hold stay valid)
    /// and exchange private data again.
    pub fn reconnect(&mut self, req_sizing: Sizing, resp_sizing: Sizing) {
        for (side, role, sizing) in [
            (&mut self.req, Role::Requester, req_sizing),
            (&mut self.resp, Role::Responder, resp_sizing),
        ] {
            let cfg = side.cfg;
            side.conn = Some(build_conn(&mut side.host, role, cfg, sizing));
        }
        self.connect();
    }

    /// Two connections with backchannel memory, connected; the backchannel is not enabled.
    pub fn new_bidir(req_cfg: Config, resp_cfg: Config) -> Pair {
        let req = make_side(
            "requester",
            0x1000_0000,
            0x10,
            Role::Requester,
            req_cfg,
            Sizing::with_backchannel(Role::Requester, &req_cfg),
        );
        let resp = make_side(
            "responder",
            0x9000_0000,
            0x20,
            Role::Responder,
            resp_cfg,
            Sizing::with_backchannel(Role::Responder, &resp_cfg),
        );
        let mut p = Pair::from_sides(req, resp);
        p.credit_max = req_cfg.credits;
        p.check_stags = req_cfg.stag == StagMode::MemoryWindows;
        p.connect();
        p
    }

    /// Enables the client's backchannel (it posts its backchannel receives), then the
    /// server's (its upper layer learnt the client is ready).
    pub fn enable_backchannel(&mut self) {
        self.req
            .conn()
            .enable_backchannel()
            .expect("client backchannel");
        self.bc_reserve = self.req.cfg.backchannel_credits;
        self.pump();
        self.resp
            .conn()
            .enable_backchannel()
            .expect("server backchannel");
    }

    /// The server starts a backward call.
    pub fn try_back_call(
        &mut self,
        spec: &CallSpec<'_>,
    ) -> Result<CallId, rpcrdma_engine::conn::StartError> {
        let now = self.now;
        let side = &mut self.resp;
        let conn = side.conn.as_mut().expect("responder");
        let r = conn.start_call(now, spec, &mut side.host);
        self.pump();
        r
    }

    pub fn back_call(&mut self, spec: &CallSpec<'_>) -> CallId {
        self.try_back_call(spec).expect("backward start_call")
    }

    /// The client answers a backward call.
    pub fn back_reply(&mut self, call: CallId, spec: &ReplySpec<'_>) -> ReplyKind {
        let now = self.now;
        let side = &mut self.req;
        let conn = side.conn.as_mut().expect("requester");
        let k = conn
            .send_reply(now, call, spec, &mut side.host)
            .expect("backward send_reply");
        self.pump();
        k
    }

    /// The next backward call the client received.
    pub fn next_back_call(&mut self) -> Option<IncomingCall> {
        let i = self
            .req
            .events
            .iter()
            .position(|e| matches!(e, Event::CallReady(_)))?;
        match self.req.events.remove(i) {
            Event::CallReady(c) => Some(c),
            _ => None,
        }
    }

    /// The next finished backward call of the server.
    pub fn next_back_done(&mut self) -> Option<Event> {
        let i = self
            .resp
            .events
            .iter()
            .position(|e| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. }))?;
        Some(self.resp.events.remove(i))
    }

    pub fn next_reply(&mut self) -> Reply {
        match self.next_done() {
            Some(Event::ReplyReady(r)) => r,
            other => panic!("expected ReplyReady, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Message helpers.

/// An RPC call header (RFC 5531) for `xid`, program 100003 (NFS) version 3, `proc`, AUTH_NONE,
/// followed by `args`.
pub fn rpc_call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [xid, 0, 2, 100_003, 3, proc_, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(args);
    v
}

/// An accepted-success RPC reply header for `xid`, followed by `results`.
pub fn rpc_reply(xid: u32, results: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [xid, 1, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(results);
    v
}

/// The handles of a forward call's chunk lists (v1 or v2 header), at most 32.
pub fn call_handles(msg: &[u8]) -> Option<([u32; 32], usize)> {
    let mut hs = [0u32; 32];
    let mut n = 0;
    let mut take = |h: u32| {
        if n < 32 {
            hs[n] = h;
            n += 1;
        }
    };
    match msg.get(4..8) {
        Some([0, 0, 0, 1]) => {
            let h = v1::decode(msg, &ChunkLimits::DEFAULT).ok()?;
            h.chunks()?.segments().for_each(|s| take(s.handle));
        }
        Some([0, 0, 0, 2]) => {
            let h = v2::decode(msg, &v2::Limits::DEFAULT).ok()?;
            h.chunks()?.lists.segments().for_each(|s| take(s.handle));
        }
        _ => return None,
    }
    Some((hs, n))
}

pub fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]])
}

/// Deterministic payload bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

pub const LW: Access = Access::LOCAL_WRITE;
/// Access for buffers a requester exposes through windows.
pub const EXPOSE: Access = Access(Access::LOCAL_WRITE.0 | Access::MW_BIND.0);
