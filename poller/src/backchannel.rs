//! Backward-direction RPC (RFC 8167) in the public API: clients that serve RPC programs on
//! their backchannel, and server handlers and sessions that send backward calls.
//!
//! Normal operation, client: [`Client::connect_serving`](crate::Client::connect_serving) takes a [`BackchannelService`] (RPC
//! programs, dispatched as on the server: NULL, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
//! GARBAGE_ARGS / SYSTEM_ERR) and the backward credits the client grants. Every connection the
//! client makes (the first one and each reconnection) is created with backchannel memory and
//! enabled before it connects, so the receives for backward calls are posted before the server
//! can learn that the client serves them. Each backward call the engine delivers takes a reply
//! buffer from the node's reply pool, runs its handler inline on the reactor or on a worker
//! (the client's callback mode) and is answered inline. The reply buffer is kept until the
//! engine hands out the call's slot again, which it does only after the reply's Send completed.
//!
//! Normal operation, server: each connection of a server with `backchannel_credits` > 0 is
//! created with backchannel memory, and its handlers get a [`BackChannel`] (`Send + Clone`,
//! [`Request::backchannel`]). The upper layer enables it once the client has said that it
//! serves backward calls ([`BackChannel::enable`]; in NFSv4.1, CREATE_SESSION with a
//! backchannel). It may also bind the connection to a session id ([`BackChannel::bind`], as
//! BIND_CONN_TO_SESSION does). A backward call ([`BackChannel::call`], or
//! [`Server::back_call`](crate::Server::back_call) for a session) takes an XID from the server's backward XID space. It
//! goes from any thread through the connection's MPSC submission ring to the connection's
//! reactor. The reactor starts calls while the client's backward credits allow; the others
//! wait in order, and nothing is dropped. It keeps one timer-wheel deadline armed, for the
//! earliest call, and completes each call exactly once through its [`Callback`] (on the
//! reactor or a worker, per the server's mode), with the reply or an error.
//!
//! Recovery: a call that reaches a connection whose upper layer had not called
//! [`BackChannel::enable`] fails with [`ClientError::NotServed`] and is not sent. A call that
//! gets no answer in time fails with [`ClientError::TimedOut`]. Its buffers stay with the
//! connection until the engine is done with the call, and a late reply is dropped. When a
//! connection bound to a session is lost, it keeps its pending backward calls, with their
//! deadlines, also when it is lost before its reactor turned the engine's backchannel on (a
//! bind had just moved the session's calls to it): the calls wait for the loss to be handled
//! instead of being started on the closed engine. The lost connection stays on its
//! reactor as the session's holder and also takes new calls for the session. When the client
//! binds a new connection to the session, the calls move to it through its ring and are sent
//! again with the SAME XIDs. Closing a session ([`Server::close_session`](crate::Server::close_session)) fails its calls
//! with [`ClientError::SessionClosed`]. A lost holder also arms a grace timer on its reactor's
//! timer wheel (`ServerOptions::session_grace_ms`, like an NFSv4 lease): if no connection
//! binds the session before it fires, the holder closes the session itself, exactly as
//! `close_session` does (a check under the session's lock that it still holds it, so a bind
//! racing with the expiry either wins or finds the session gone and starts a fresh one), and
//! leaves its reactor slot. A bind before the expiry makes another connection the holder, and
//! the lost one cancels its timer. The calls of a lost connection that has no session fail
//! with `Transport(ConnectionLost)`. If a submission races with the removal of its
//! connection, a SeqCst handshake guarantees that one of the two sides sees the other: that
//! side reroutes the call to the session or fails it, so no call is lost. On the client, a
//! reconnection waits until no worker still reads a backward call of the lost connection.

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_engine::conn::{
    self, BackchannelError, BackchannelPools, CallError, CallId, CallSpec, ConnState, Connection,
    HostMemory, IncomingCall, LocalBuf, Pools, ReplyError, ReplyKind, ReplySpec, Role, StartError,
};
use rpcrdma_engine::proto::private_data::representable_size;
use rpcrdma_engine::rpc::{self, AcceptStat, CallHeader, OpaqueAuth, ReplyBody, ReplyHeader};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::{HugePagePolicy, PoolBuf, Region, Registrar};

use crate::api_stats::{ConnStats, ConnStatsWriter};
use crate::buf::{local_buf, MemError, Slab, SlabLayout};
use crate::call::{CallArgs, Callback, ClientError, Reply};
use crate::config::{CallbackMode, EndpointConfig};
use crate::driver::ConnDriver;
use crate::mpsc::{self, MpscConsumer};
use crate::program::{
    header_error_reply, serve_inline, CallTransport, DdpItems, Decision, Dispatch, Program,
    Programs, Reject, Request, MAX_DDP, SUCCESS_HEADER_LEN,
};
use crate::session::{
    lock, BackServer, BackSubmit, ConnBackShared, Deadline, Grace, SessionState, SubmitError,
};
pub use crate::session::{BackCallOptions, BackChannel, BindError};

/// The peer named to a backward handler when the QP is already gone.
const UNSPECIFIED_PEER: std::net::SocketAddr = std::net::SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
);
use crate::node::{job_token, timer_token, NodeEnv, TIMER_BACK, TIMER_GRACE};
use crate::reactor::PollerCtx;
use crate::timer::TimerHandle;
use crate::worker::{CompleteJob, Job, NodeLinks, RawSlice, ServeJob, Served};

/// Backward credits a client grants by default (what Linux grants).
pub const DEFAULT_BACK_CREDITS: u32 = 16;

/// Size of the RPC call header buffer of each backward call record.
const RPC_HEADER_SIZE: u32 = 128;

const NO_REC: u32 = u32::MAX;

// ---------------------------------------------------------------------------------------------
// Client side.

/// The RPC programs a client serves on its backchannel (RFC 8167), and the backward credits
/// it grants (how many backward calls the server may have outstanding). Pass it to
/// [`Client::connect_serving`](crate::Client::connect_serving).
#[derive(Debug, Clone)]
pub struct BackchannelService {
    programs: Programs,
    credits: u32,
}

impl Default for BackchannelService {
    fn default() -> Self {
        BackchannelService {
            programs: Programs::new(),
            credits: DEFAULT_BACK_CREDITS,
        }
    }
}

impl BackchannelService {
    /// No programs yet; [`DEFAULT_BACK_CREDITS`] credits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `p` on the backchannel.
    pub fn program(mut self, p: Program) -> Self {
        self.programs.add(p);
        self
    }

    /// Backward credits granted (at least 1; at most the endpoint's `max_credits`).
    pub fn credits(mut self, c: u32) -> Self {
        self.credits = c.max(1);
        self
    }

    /// The backward credits asked for.
    pub fn granted_credits(&self) -> u32 {
        self.credits
    }
}

/// A reply that waits for send-queue room.
struct PendingBack {
    call: CallId,
    reply: PoolBuf,
    len: usize,
    ddp: DdpItems,
    ok: bool,
}

/// A client connection's backward responder (on its reactor).
pub(crate) struct ClientBack {
    programs: Programs,
    slab: Slab,
    /// The reply buffer (and DDP items) last sent from each engine backward slot. They are
    /// released when the slot answers its next call (the engine reuses a slot only after its
    /// reply's Send completed) or when the connection is lost.
    held: Vec<Option<(PoolBuf, DdpItems)>>,
    /// Calls waiting for a reply buffer, in order.
    waiting: VecDeque<IncomingCall>,
    /// Replies the send queue could not take yet, in order.
    pending: VecDeque<PendingBack>,
    /// Handlers running on a worker; each holds a view of a receive buffer.
    in_worker: u32,
    mode: CallbackMode,
}

impl ClientBack {
    /// Backchannel memory and settings for `s`; updates `cfg` (backward credits, receive
    /// queue depth).
    pub(crate) fn new<R: Registrar>(
        reg: &R,
        hugepages: HugePagePolicy,
        cfg: &mut conn::Config,
        ep: &EndpointConfig,
        mode: CallbackMode,
        s: BackchannelService,
    ) -> Result<Box<ClientBack>, MemError> {
        let credits = s.credits.clamp(1, ep.max_credits.max(1));
        cfg.backchannel_credits = credits;
        // The forward receives plus every backchannel receive (2 × credits).
        cfg.rq_depth = cfg.rq_depth.max(cfg.credits + 2 * credits);
        // Two send buffers (engine call slots) per credit, like the receives: the server may
        // send its next call as soon as it has a reply whose Send has not completed here yet,
        // and a call finding no free slot would be dropped.
        let layout = SlabLayout {
            headers: 2 * credits as usize,
            header_size: cfg.inline_send,
            recvs: 2 * credits as usize,
            recv_size: representable_size(cfg.inline_recv),
            data: 0,
            data_size: 0,
            rpc_headers: 0,
            rpc_header_size: 0,
        };
        let slab = Slab::new(reg, &layout, hugepages, crate::buf::LOCAL_ACCESS)?;
        Ok(Box::new(ClientBack {
            programs: s.programs,
            slab,
            held: (0..2 * credits).map(|_| None).collect(),
            waiting: VecDeque::with_capacity(2 * credits as usize),
            pending: VecDeque::with_capacity(2 * credits as usize),
            in_worker: 0,
            mode,
        }))
    }

    /// The backchannel memory's region (for the connection's memory view).
    pub(crate) fn region(&self) -> Arc<Region> {
        Arc::clone(&self.slab.region)
    }

    fn pools(&self) -> BackchannelPools<'_> {
        BackchannelPools {
            headers: &self.slab.headers,
            recvs: &self.slab.recvs,
        }
    }

    /// A requester engine with this backchannel, enabled.
    pub(crate) fn requester(
        &self,
        cfg: conn::Config,
        pools: &Pools<'_>,
    ) -> Result<Connection, conn::ConfigError> {
        let mut c = Connection::with_backchannel(Role::Requester, cfg, pools, &self.pools())?;
        // This client serves the backchannel: post its receives before the connect request
        // goes out (RFC 8167 §4.2.1), so they are there when the server learns about it.
        let _ = c.enable_backchannel();
        Ok(c)
    }

    /// True when no worker holds a view of a backward call.
    pub(crate) fn idle(&self) -> bool {
        self.in_worker == 0
    }

    /// A backward call arrived.
    pub(crate) fn on_call<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        slot: u32,
        inc: IncomingCall,
        stats: &ConnStatsWriter,
    ) {
        stats.back_call_in(u64::from(inc.stream.len));
        if !self.waiting.is_empty() || !self.serve(drv, env, links, slot, inc, stats) {
            self.waiting.push_back(inc);
        }
    }

    /// Serves one call; `false` when no reply buffer is free (the call must wait).
    fn serve<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        slot: u32,
        inc: IncomingCall,
        stats: &ConnStatsWriter,
    ) -> bool {
        let Some(mut reply) = env.cache.get_buf() else {
            return false;
        };
        let stream: &[u8] = drv
            .mem
            .bytes(inc.stream.addr, inc.stream.len as usize)
            .unwrap_or(&[]);
        let decided = match rpc::decode_call(stream) {
            Err(e) => Decision::Header(header_error_reply(&e, inc.xid)),
            Ok((h, off)) => match self.programs.dispatch(h.prog, h.vers, h.proc_num) {
                Dispatch::Null => Decision::Done(Ok(0), DdpItems::new()),
                Dispatch::Error(stat) => Decision::Header(ReplyHeader::accepted(inc.xid, stat)),
                Dispatch::Handler(handler) => {
                    let args = stream.get(off..).unwrap_or(&[]);
                    let transport = CallTransport::plain(
                        drv.qp.as_ref().map_or(
                            UNSPECIFIED_PEER,
                            rpcrdma_engine::verbs::QueuePair::peer_addr,
                        ),
                        0,
                    );
                    match (self.mode, links) {
                        (CallbackMode::Worker, Some(l)) => {
                            let job = Job::Serve(ServeJob {
                                token: job_token(slot, env.slot_gen(slot)),
                                call_slot: inc.call.slot,
                                call_gen: inc.call.generation,
                                handler: Arc::clone(handler),
                                xid: inc.xid,
                                prog: h.prog,
                                vers: h.vers,
                                proc_num: h.proc_num,
                                cred_flavor: h.cred.flavor.to_u32(),
                                cred: RawSlice::new(h.cred.body),
                                args: RawSlice::new(args),
                                write_caps: [0; MAX_DDP],
                                nwrite: 0,
                                transport,
                                reply,
                                base: SUCCESS_HEADER_LEN as u32,
                                limit: u32::MAX,
                                ddp: DdpItems::new(),
                                back: None,
                            });
                            self.in_worker += 1;
                            if !l.submit(slot as usize, job) {
                                env.stats.worker_ring_full();
                            }
                            return true;
                        }
                        _ => {
                            let req = Request {
                                xid: inc.xid,
                                prog: h.prog,
                                vers: h.vers,
                                proc_num: h.proc_num,
                                cred: h.cred,
                                args,
                                write_chunks: &[],
                                transport,
                                back: None,
                            };
                            let (r, ddp) = serve_inline(&**handler, &req, &mut reply, usize::MAX);
                            Decision::Done(r, ddp)
                        }
                    }
                }
            },
        };
        match decided {
            Decision::Header(h) => {
                let len = rpc::encode_reply(&mut reply, &h).unwrap_or(0);
                let _ = self.send(
                    drv,
                    env,
                    inc.call,
                    reply,
                    len,
                    DdpItems::new(),
                    false,
                    false,
                    stats,
                );
            }
            Decision::Done(r, ddp) => {
                self.finish(drv, env, inc.call, inc.xid, reply, ddp, r, stats)
            }
        }
        true
    }

    /// Turns a handler's outcome into the reply and sends it.
    #[allow(clippy::too_many_arguments)]
    fn finish<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        call: CallId,
        xid: u32,
        mut reply: PoolBuf,
        mut ddp: DdpItems,
        r: Result<usize, Reject>,
        stats: &ConnStatsWriter,
    ) {
        let (stat, results) = match r {
            Ok(n) => (AcceptStat::Success, n),
            Err(Reject::GarbageArgs) => (AcceptStat::GarbageArgs, 0),
            // A client cannot drop its own connection to answer a backward call.
            Err(Reject::SystemErr | Reject::Disconnect) => (AcceptStat::SystemErr, 0),
        };
        let ok = stat == AcceptStat::Success;
        if !ok {
            ddp.clear();
        }
        let h = ReplyHeader::accepted(xid, stat);
        let hl = rpc::encode_reply(&mut reply[..SUCCESS_HEADER_LEN], &h).unwrap_or(0);
        let _ = self.send(drv, env, call, reply, hl + results, ddp, ok, false, stats);
    }

    /// Sends a backward reply (inline; DDP results go inline too), or queues it when the send
    /// queue is full. `Err` hands the buffers back when `retry` and the queue is still full.
    #[allow(clippy::too_many_arguments)]
    fn send<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        call: CallId,
        reply: PoolBuf,
        len: usize,
        ddp: DdpItems,
        ok: bool,
        retry: bool,
        stats: &ConnStatsWriter,
    ) -> Result<(), (PoolBuf, DdpItems)> {
        let Some(conn) = drv.conn.as_mut() else {
            env.cache.put_buf(reply);
            return Ok(());
        };
        let (items, n, ddp_bytes) = ddp.engine_items(0);
        let bytes = len as u64 + ddp_bytes;
        let msg = [local_buf(&reply, len)];
        let spec = ReplySpec {
            message: &msg,
            results: &items[..n],
        };
        match conn.send_reply(env.now, call, &spec, &mut drv.mem) {
            Ok(kind) => {
                stats.back_reply(bytes, false);
                if !ok || matches!(kind, ReplyKind::ErrChunk | ReplyKind::CantReply) {
                    stats.back_error();
                }
                match self.held.get_mut(call.slot as usize) {
                    Some(h) => {
                        // The slot's previous reply was sent before the engine reused it.
                        if let Some((old, _)) = h.replace((reply, ddp)) {
                            env.cache.put_buf(old);
                        }
                    }
                    None => {
                        // Engine slots are < 2 × credits; never here. Keep the buffers
                        // rather than release them under a Send.
                        debug_assert!(false, "backward slot {} out of range", call.slot);
                        core::mem::forget((reply, ddp));
                    }
                }
                Ok(())
            }
            Err(ReplyError::Busy) => {
                if retry {
                    return Err((reply, ddp));
                }
                self.pending.push_back(PendingBack {
                    call,
                    reply,
                    len,
                    ddp,
                    ok,
                });
                Ok(())
            }
            Err(_) => {
                stats.back_error();
                env.cache.put_buf(reply);
                Ok(())
            }
        }
    }

    /// Retries replies that waited for send-queue room, then calls that waited for a reply
    /// buffer.
    pub(crate) fn service<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut work = 0;
        while let Some(p) = self.pending.pop_front() {
            let PendingBack {
                call,
                reply,
                len,
                ddp,
                ok,
            } = p;
            match self.send(drv, env, call, reply, len, ddp, ok, true, stats) {
                Ok(()) => work += 1,
                Err((reply, ddp)) => {
                    self.pending.push_front(PendingBack {
                        call,
                        reply,
                        len,
                        ddp,
                        ok,
                    });
                    break;
                }
            }
        }
        while let Some(inc) = self.waiting.front().copied() {
            if !self.serve(drv, env, links.as_deref_mut(), slot, inc, stats) {
                break;
            }
            self.waiting.pop_front();
            work += 1;
        }
        if let Some(c) = drv.conn.as_ref() {
            stats.back_gauges(
                u64::from(c.backward_outstanding()),
                self.waiting.len() as u64,
            );
        }
        work
    }

    /// A worker finished a backward call's handler.
    pub(crate) fn on_served<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        s: Served,
        stats: &ConnStatsWriter,
    ) {
        self.in_worker = self.in_worker.saturating_sub(1);
        // A reconnection waits for every worker (ClientConn), so a live engine here is the one
        // that delivered the call.
        let live = drv
            .conn
            .as_ref()
            .is_some_and(|c| c.state() != ConnState::Closed);
        if !live {
            // The call died with its connection; the server sends it again.
            env.cache.put_buf(s.reply);
            return;
        }
        let call = CallId {
            slot: s.call_slot,
            generation: s.call_gen,
        };
        self.finish(drv, env, call, s.xid, s.reply, s.ddp, s.result, stats);
    }

    /// The connection is gone (its QP destroyed): release every buffer of its calls.
    pub(crate) fn on_lost<P: Provider>(&mut self, env: &mut NodeEnv<P>) {
        self.waiting.clear();
        while let Some(p) = self.pending.pop_front() {
            env.cache.put_buf(p.reply);
        }
        for h in self.held.iter_mut() {
            if let Some((b, _)) = h.take() {
                env.cache.put_buf(b);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server side: the reactor's part.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BState {
    Free,
    /// Waiting to be sent (or, on a lost connection, parked for the session).
    Queued,
    /// On the wire.
    InFlight,
    /// Completed (timed out or failed) while the engine still has it: its buffers are kept
    /// until the engine reports the call.
    Zombie,
}

struct BRec {
    state: BState,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    hdr: LocalBuf,
    hdr_len: u32,
    args: Option<CallArgs>,
    reply: Option<PoolBuf>,
    cb: Option<Callback>,
    inline_cb: bool,
    deadline: u64,
    sends: u32,
    call: Option<CallId>,
    seq: u64,
}

/// What a lost connection does with its session's calls.
enum Holder {
    /// Nothing known yet (re-read the session).
    Unknown,
    /// This connection holds them.
    Me,
    /// Move them to this connection.
    Other(Arc<ConnBackShared>),
}

/// One server connection's backward requester (on its reactor). See the module documentation.
pub(crate) struct ServerBack {
    pub(crate) handle: BackChannel,
    rx: Option<MpscConsumer<BackSubmit>>,
    slab: Slab,
    recs: Vec<BRec>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    /// Engine backward slot → record.
    by_slot: Vec<u32>,
    scratch: Vec<u32>,
    seq: u64,
    in_use: u32,
    in_flight: u32,
    session: Option<Arc<SessionState>>,
    seen_bind: u64,
    seen_epoch: u64,
    holder: Holder,
    /// The engine's backchannel is enabled.
    enabled: bool,
    /// The upper layer enabled it; the engine follows in this round.
    enable_now: bool,
    lost: bool,
    stopping: bool,
    done: bool,
    timer: Option<TimerHandle>,
    timer_at: u64,
    /// The session grace period, while this lost connection holds its session.
    grace: Grace,
    mode: CallbackMode,
    worker: usize,
}

impl ServerBack {
    /// Backchannel memory and the handle of a connection being accepted in `slot`; updates
    /// `cfg` (backward credits, receive queue depth).
    pub(crate) fn new<P: Provider>(
        env: &NodeEnv<P>,
        server: &Arc<BackServer>,
        cfg: &mut conn::Config,
        recv_size: u32,
        slot: u32,
        stats: ConnStats,
    ) -> Result<ServerBack, MemError> {
        let credits = server.credits.max(1);
        cfg.backchannel_credits = credits;
        // The granted receives plus one per backward call outstanding.
        cfg.rq_depth = cfg.rq_depth.max(cfg.credits + credits);
        let nrec = server.queue;
        let layout = SlabLayout {
            headers: credits as usize,
            header_size: cfg.inline_send,
            recvs: credits as usize,
            recv_size,
            data: 0,
            data_size: 0,
            rpc_headers: nrec,
            rpc_header_size: RPC_HEADER_SIZE,
        };
        let slab = Slab::new(&*env.pd, &layout, env.hugepages, crate::buf::LOCAL_ACCESS)?;
        let (tx, rx) = mpsc::channel::<BackSubmit>(nrec.next_power_of_two())
            .map_err(|_| MemError::BadSize("backchannel ring"))?;
        let inner = Arc::new(ConnBackShared {
            tx,
            orphan: Mutex::new(None),
            dead: AtomicBool::new(false),
            enable_req: AtomicBool::new(false),
            session: Mutex::new(None),
            bind_gen: AtomicU64::new(0),
            node_thread: env.node_thread(),
            server: Arc::clone(server),
            stats,
        });
        let recs = (0..nrec)
            .map(|i| BRec {
                state: BState::Free,
                xid: 0,
                prog: 0,
                vers: 0,
                proc_num: 0,
                hdr: slab.rpc_headers[i],
                hdr_len: 0,
                args: None,
                reply: None,
                cb: None,
                inline_cb: false,
                deadline: u64::MAX,
                sends: 0,
                call: None,
                seq: 0,
            })
            .collect();
        Ok(ServerBack {
            handle: BackChannel { inner },
            rx: Some(rx),
            slab,
            recs,
            free: (0..nrec as u32).rev().collect(),
            ready: VecDeque::with_capacity(nrec),
            by_slot: vec![NO_REC; credits as usize],
            scratch: Vec::with_capacity(nrec),
            seq: 0,
            in_use: 0,
            in_flight: 0,
            session: None,
            seen_bind: 0,
            seen_epoch: 0,
            holder: Holder::Unknown,
            enabled: false,
            enable_now: false,
            lost: false,
            stopping: false,
            done: false,
            timer: None,
            timer_at: u64::MAX,
            grace: Grace::new(server.grace_ns),
            mode: server.mode,
            worker: slot as usize,
        })
    }

    /// The backchannel memory's region (for the connection's memory view).
    pub(crate) fn region(&self) -> Arc<Region> {
        Arc::clone(&self.slab.region)
    }

    /// The engine's backchannel memory.
    pub(crate) fn pools(&self) -> BackchannelPools<'_> {
        BackchannelPools {
            headers: &self.slab.headers,
            recvs: &self.slab.recvs,
        }
    }

    /// True once removed (lost, nothing held for a session any more).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The reactor is stopping.
    pub(crate) fn shutdown(&mut self) {
        self.stopping = true;
    }

    fn sync_binding(&mut self) {
        // Acquire: pairs with the Release increment in `BackServer::bind`.
        let g = self.handle.inner.bind_gen.load(Ordering::Acquire);
        if g != self.seen_bind {
            self.seen_bind = g;
            self.session = lock(&self.handle.inner.session).clone();
            self.seen_epoch = 0;
            self.holder = Holder::Unknown;
        }
    }

    /// Whether calls of a lost connection are kept for its session.
    fn keeps_calls(&self) -> bool {
        !self.stopping && self.session.as_ref().is_some_and(|s| !s.is_closed())
    }

    fn rec_of(&self, call: CallId) -> Option<u32> {
        let i = *self.by_slot.get(call.slot as usize)?;
        let r = self.recs.get(i as usize)?;
        (r.call == Some(call)).then_some(i)
    }

    fn complete<P: Provider>(
        &self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cb: Callback,
        inline_cb: bool,
        outcome: Result<Reply, ClientError>,
    ) {
        match (self.mode, inline_cb, links) {
            (CallbackMode::Worker, false, Some(l)) => {
                if !l.submit(self.worker, Job::Complete(CompleteJob { cb, outcome })) {
                    env.stats.worker_ring_full();
                }
            }
            _ => cb.call(outcome),
        }
    }

    fn free_rec<P: Provider>(&mut self, env: &mut NodeEnv<P>, i: u32) {
        let r = &mut self.recs[i as usize];
        if r.state == BState::Free {
            return;
        }
        r.state = BState::Free;
        r.args = None;
        if let Some(b) = r.reply.take() {
            env.cache.put_buf(b);
        }
        r.cb = None;
        r.call = None;
        r.hdr_len = 0;
        self.in_use -= 1;
        self.free.push(i);
    }

    /// Completes record `i` with `outcome`. A call on the wire becomes a zombie (the engine
    /// still uses its buffers); any other is freed.
    fn fail_rec<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        i: u32,
        outcome: Result<Reply, ClientError>,
    ) {
        let r = &mut self.recs[i as usize];
        let cb = r.cb.take();
        let inline_cb = r.inline_cb;
        match r.state {
            BState::InFlight => {
                r.state = BState::Zombie;
                self.in_flight -= 1;
            }
            BState::Zombie | BState::Free => {}
            BState::Queued => self.free_rec(env, i),
        }
        if let Some(cb) = cb {
            self.complete(env, links, cb, inline_cb, outcome);
        }
    }

    /// Fails every call held (queued, parked or on the wire) with `e`.
    fn fail_all<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        e: ClientError,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        for i in 0..self.recs.len() as u32 {
            if matches!(
                self.recs[i as usize].state,
                BState::Queued | BState::InFlight
            ) {
                stats.back_error();
                self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                n += 1;
            }
        }
        self.ready.clear();
        n
    }

    /// Takes calls from the ring into free records (queued to be sent, or parked when lost).
    fn intake<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        let mut earliest = u64::MAX;
        while let Some(&i) = self.free.last() {
            let Some(rx) = self.rx.as_mut() else { break };
            let Some(sub) = rx.dequeue() else { break };
            n += 1;
            // Acquire: pairs with the Release store in `BackChannel::enable`. Re-read after
            // the dequeue: a call submitted after `enable` must find it (the dequeue's Acquire
            // orders this load after the submitter's).
            if !self.lost && !self.enabled && self.handle.inner.enable_req.load(Ordering::Acquire) {
                self.enable_now = true;
            }
            if !self.lost && !self.enabled && !self.enable_now {
                // RFC 8167 §6: the client has not said it serves backward calls.
                stats.back_error();
                self.complete(
                    env,
                    links.as_deref_mut(),
                    sub.cb,
                    sub.inline_cb,
                    Err(ClientError::NotServed),
                );
                continue;
            }
            self.free.pop();
            self.seq += 1;
            let deadline = sub.deadline.at(env.now);
            let r = &mut self.recs[i as usize];
            r.state = BState::Queued;
            r.xid = sub.xid;
            r.prog = sub.prog;
            r.vers = sub.vers;
            r.proc_num = sub.proc_num;
            r.hdr_len = 0;
            r.args = Some(sub.args);
            r.reply = None;
            r.cb = Some(sub.cb);
            r.inline_cb = sub.inline_cb;
            r.deadline = deadline;
            r.sends = sub.sends;
            r.call = None;
            r.seq = self.seq;
            self.in_use += 1;
            if !self.lost {
                self.ready.push_back(i);
            }
            earliest = earliest.min(deadline);
        }
        if earliest != u64::MAX {
            self.arm(env, cx, slot, earliest);
        }
        n
    }

    fn arm<P: Provider>(&mut self, env: &NodeEnv<P>, cx: &mut PollerCtx<'_>, slot: u32, at: u64) {
        if at >= self.timer_at {
            return;
        }
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.timer_at = u64::MAX;
        if let Ok(h) = cx.arm_timer(at, timer_token(TIMER_BACK, slot, env.slot_gen(slot))) {
            self.timer = Some(h);
            self.timer_at = at;
        }
    }

    /// Starts queued calls while the engine takes them (backward credits, slots).
    fn start_ready<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        while let Some(&i) = self.ready.front() {
            let Some(conn) = drv.conn.as_mut() else { break };
            let r = &mut self.recs[i as usize];
            if r.reply.is_none() {
                match env.cache.get_buf() {
                    Some(b) => r.reply = Some(b),
                    None => break,
                }
            }
            if r.hdr_len == 0 {
                let h = CallHeader {
                    xid: r.xid,
                    prog: r.prog,
                    vers: r.vers,
                    proc_num: r.proc_num,
                    cred: OpaqueAuth::NONE,
                    verf: OpaqueAuth::NONE,
                };
                r.hdr_len = drv
                    .mem
                    .bytes_mut(r.hdr.addr, r.hdr.len as usize)
                    .and_then(|out| rpc::encode_call(out, &h).ok())
                    .unwrap_or(0) as u32;
            }
            let (Some(args), Some(reply), true) =
                (r.args.as_ref(), r.reply.as_ref(), r.hdr_len > 0)
            else {
                self.ready.pop_front();
                stats.back_error();
                let e = ClientError::BadCall(StartError::BadSpec);
                self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                continue;
            };
            let (abuf, alen) = args.written();
            let mut parts = [LocalBuf::EMPTY; 2];
            parts[0] = r.hdr.sub(0, r.hdr_len).unwrap_or(LocalBuf::EMPTY);
            let mut np = 1;
            if alen > 0 {
                parts[1] = local_buf(abuf, alen);
                np = 2;
            }
            let (items, ni, ddp_bytes) = args.ddp_items().engine_items(r.hdr_len);
            let bytes = u64::from(r.hdr_len) + alen as u64 + ddp_bytes;
            // Backward calls carry no chunks: receptacles make the engine refuse the call.
            let recp = [local_buf(reply, 0); 1];
            let nr = usize::from(args.receptacle_count() > 0);
            let spec = CallSpec {
                message: &parts[..np],
                ddp: &items[..ni],
                receptacles: &recp[..nr],
                reply: local_buf(reply, reply.len()),
            };
            match conn.start_call(env.now, &spec, &mut drv.mem) {
                Ok(id) => {
                    self.ready.pop_front();
                    let r = &mut self.recs[i as usize];
                    if r.sends > 0 {
                        stats.back_retransmit();
                    }
                    r.sends += 1;
                    r.state = BState::InFlight;
                    r.call = Some(id);
                    if let Some(s) = self.by_slot.get_mut(id.slot as usize) {
                        *s = i;
                    }
                    self.in_flight += 1;
                    stats.back_call(bytes);
                    n += 1;
                }
                Err(StartError::NoCredit | StartError::Busy | StartError::NotConnected) => break,
                Err(e) => {
                    self.ready.pop_front();
                    stats.back_error();
                    let e = match e {
                        StartError::BackchannelDisabled => ClientError::NotServed,
                        e => ClientError::BadCall(e),
                    };
                    self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                }
            }
        }
        n
    }

    /// One round on a live connection: bindings, enabling, new calls, starts.
    pub(crate) fn service<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut work = 0;
        self.sync_binding();
        if self.session.as_ref().is_some_and(|s| s.is_closed()) {
            self.session = None;
            work += self.fail_all(env, links.as_deref_mut(), ClientError::SessionClosed, stats);
        }
        // Acquire: pairs with the Release store in `BackChannel::enable`.
        if !self.enabled && self.handle.inner.enable_req.load(Ordering::Acquire) {
            self.enable_now = true;
        }
        work += self.intake(env, links.as_deref_mut(), cx, slot, stats);
        if self.enable_now && !self.enabled && !self.enable_engine(drv) {
            // The engine closed before its backchannel was turned on (the connection was
            // lost this round, e.g. right after a bind moved the session's calls here): the
            // calls wait, and the teardown that follows keeps them for the session (or fails
            // them with `Transport(ConnectionLost)`), as for any lost connection. Starting
            // them would fail them with `NotServed` although the client serves them.
            stats.back_gauges(u64::from(self.in_flight), self.ready.len() as u64);
            return work;
        }
        work += self.start_ready(drv, env, links, stats);
        stats.back_gauges(u64::from(self.in_flight), self.ready.len() as u64);
        work
    }

    /// Turns the engine's backchannel on (the upper layer enabled it). `false` when the engine
    /// is already closed. An engine without backchannel memory stays off, and `start_ready`
    /// then fails the calls with [`ClientError::NotServed`] (it cannot serve them).
    fn enable_engine<P: Provider>(&mut self, drv: &mut ConnDriver<P>) -> bool {
        let Some(c) = drv.conn.as_mut() else {
            return false;
        };
        match c.enable_backchannel() {
            Ok(()) => {
                self.enabled = true;
                true
            }
            Err(BackchannelError::Closed) => false,
            Err(BackchannelError::NoResources) => true,
        }
    }

    /// A backward reply arrived.
    pub(crate) fn on_reply<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        r: conn::Reply,
        stats: &ConnStatsWriter,
    ) {
        let Some(i) = self.rec_of(r.call) else { return };
        self.by_slot[r.call.slot as usize] = NO_REC;
        let rec = &mut self.recs[i as usize];
        rec.call = None;
        if rec.state == BState::Zombie {
            self.free_rec(env, i);
            return;
        }
        self.in_flight -= 1;
        rec.state = BState::Queued;
        let xid = rec.xid;
        let outcome = match rec.reply.take() {
            None => Err(ClientError::BadReply),
            Some(buf) => {
                let len = (r.len as usize).min(buf.len());
                let verdict = match rpc::decode_reply(&buf[..len]) {
                    Ok((h, off)) => match h.body {
                        ReplyBody::Accepted {
                            stat: AcceptStat::Success,
                            ..
                        } => Ok(off),
                        ReplyBody::Accepted { stat, .. } => Err(ClientError::Rpc(stat)),
                        ReplyBody::Denied(d) => Err(ClientError::Denied(d)),
                    },
                    Err(_) => Err(ClientError::BadReply),
                };
                match verdict {
                    Ok(off) => {
                        stats.back_reply(len as u64, true);
                        Ok(Reply::backward(buf, off, len - off, xid))
                    }
                    Err(e) => {
                        env.cache.put_buf(buf);
                        Err(e)
                    }
                }
            }
        };
        if outcome.is_err() {
            stats.back_error();
        }
        self.fail_rec(env, links, i, outcome);
    }

    /// A backward call failed in the engine.
    pub(crate) fn on_failed<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        call: CallId,
        error: CallError,
        stats: &ConnStatsWriter,
    ) {
        let Some(i) = self.rec_of(call) else { return };
        self.by_slot[call.slot as usize] = NO_REC;
        let rec = &mut self.recs[i as usize];
        rec.call = None;
        if rec.state == BState::Zombie {
            self.free_rec(env, i);
            return;
        }
        self.in_flight -= 1;
        rec.state = BState::Queued;
        self.sync_binding();
        if error == CallError::ConnectionLost && self.keeps_calls() {
            // Parked for the session (see `on_lost`).
            if let Some(b) = self.recs[i as usize].reply.take() {
                env.cache.put_buf(b);
            }
            return;
        }
        stats.back_error();
        let e = match error {
            CallError::TimedOut => ClientError::TimedOut,
            e => ClientError::Transport(e),
        };
        self.fail_rec(env, links, i, Err(e));
    }

    /// The connection was lost (engine and QP gone): keep the calls for the session, or fail
    /// them.
    pub(crate) fn on_lost<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.lost = true;
        self.enabled = false;
        self.enable_now = false;
        self.sync_binding();
        let keep = self.keeps_calls();
        for i in 0..self.recs.len() as u32 {
            match self.recs[i as usize].state {
                BState::Free => {}
                BState::Zombie => self.free_rec(env, i),
                BState::InFlight | BState::Queued => {
                    let r = &mut self.recs[i as usize];
                    if r.state == BState::InFlight {
                        r.state = BState::Queued;
                        r.call = None;
                        self.in_flight -= 1;
                    }
                    if keep {
                        if let Some(b) = self.recs[i as usize].reply.take() {
                            env.cache.put_buf(b);
                        }
                    } else {
                        stats.back_error();
                        let e = ClientError::Transport(CallError::ConnectionLost);
                        self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                    }
                }
            }
        }
        for s in self.by_slot.iter_mut() {
            *s = NO_REC;
        }
        self.ready.clear();
        self.holder = Holder::Unknown;
        let _ = (cx, slot);
        stats.back_gauges(0, u64::from(self.in_use));
    }

    /// One round of a lost connection: hold the session's calls, move them to the session's
    /// new connection, or leave.
    pub(crate) fn service_lost<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        if self.done {
            return 0;
        }
        self.sync_binding();
        let mut work = 0;
        if self.grace.ended(env.now) && self.expire(cx, stats) {
            work += 1;
        }
        if !self.keeps_calls() {
            let e = match &self.session {
                Some(s) if s.is_closed() => ClientError::SessionClosed,
                _ if self.stopping => ClientError::Closed,
                _ => ClientError::Transport(CallError::ConnectionLost),
            };
            work += self.fail_all(env, links.as_deref_mut(), e, stats);
            while let Some(sub) = self.rx.as_mut().and_then(|r| r.dequeue()) {
                stats.back_error();
                self.complete(env, links.as_deref_mut(), sub.cb, sub.inline_cb, Err(e));
                work += 1;
            }
            self.remove(cx);
            return work + 1;
        }
        // Who holds the session now?
        if let Some(st) = self.session.clone() {
            // Acquire: pairs with the Release increments in `BackServer::bind` / `close`.
            let epoch = st.epoch.load(Ordering::Acquire);
            if epoch != self.seen_epoch || matches!(self.holder, Holder::Unknown) {
                self.seen_epoch = epoch;
                let cur = lock(&st.cur).clone();
                self.holder = match cur {
                    Some(c) if !Arc::ptr_eq(&c, &self.handle.inner) => Holder::Other(c),
                    Some(_) => Holder::Me,
                    None => Holder::Unknown,
                };
            }
        }
        match self.holder {
            // Held for the client: its grace period runs (armed once, from the first round
            // after the loss).
            Holder::Me if self.grace.applies() => {
                let token = || timer_token(TIMER_GRACE, slot, env.slot_gen(slot));
                self.grace.run(cx, env.now, token);
            }
            // Bound elsewhere: the client came back in time.
            Holder::Other(_) => self.grace.cancel(cx),
            _ => {}
        }
        work += self.intake(env, links, cx, slot, stats);
        if let Holder::Other(target) = &self.holder {
            let target = Arc::clone(target);
            work += self.hand_over(env, &target);
            if self.in_use == 0 && self.remove(cx) {
                work += 1;
            }
        }
        stats.back_gauges(0, u64::from(self.in_use));
        work
    }

    /// Moves the parked calls, oldest first, to `target` (same XIDs and deadlines).
    fn hand_over<P: Provider>(&mut self, env: &mut NodeEnv<P>, target: &ConnBackShared) -> usize {
        self.scratch.clear();
        for (i, r) in self.recs.iter().enumerate() {
            if r.state == BState::Queued {
                self.scratch.push(i as u32);
            }
        }
        let recs = &self.recs;
        self.scratch.sort_unstable_by_key(|&i| recs[i as usize].seq);
        let mut n = 0;
        for k in 0..self.scratch.len() {
            let i = self.scratch[k];
            let r = &mut self.recs[i as usize];
            let (Some(args), Some(cb)) = (r.args.take(), r.cb.take()) else {
                self.free_rec(env, i);
                continue;
            };
            let sub = BackSubmit {
                prog: r.prog,
                vers: r.vers,
                proc_num: r.proc_num,
                args,
                cb,
                xid: r.xid,
                deadline: Deadline::At(r.deadline),
                sends: r.sends,
                inline_cb: r.inline_cb,
            };
            match target.submit(sub) {
                Ok(()) => {
                    self.free_rec(env, i);
                    n += 1;
                }
                Err(SubmitError::Full(sub) | SubmitError::Dead(sub)) => {
                    // Full: retried next round. Dead: the session moved on; re-read it.
                    let r = &mut self.recs[i as usize];
                    r.args = Some(sub.args);
                    r.cb = Some(sub.cb);
                    self.holder = Holder::Unknown;
                    break;
                }
            }
        }
        self.scratch.clear();
        n
    }

    /// Removes the connection when it holds nothing and is not its session's holder: marks
    /// it dead (under the session's lock) and hands whatever is left in its ring to the
    /// session, or fails it. Returns whether it was removed.
    fn remove(&mut self, cx: &mut PollerCtx<'_>) -> bool {
        let queued = self.rx.as_ref().map_or(0, |r| r.used_count());
        if self.in_use > 0 || self.done || (queued > 0 && self.keeps_calls()) {
            return false;
        }
        if !self.mark_dead(self.stopping) {
            return false;
        }
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.grace.cancel(cx);
        self.done = true;
        true
    }

    /// The grace period ended: closes the session if this connection still holds it (the
    /// next steps of `service_lost` then fail its calls and remove the connection).
    fn expire(&mut self, cx: &mut PollerCtx<'_>, stats: &ConnStatsWriter) -> bool {
        self.grace.cancel(cx);
        let Some(st) = self.session.clone() else {
            return false;
        };
        if !self.handle.inner.server.expire(&st, &self.handle.inner) {
            return false;
        }
        stats.session_expired();
        true
    }

    /// The grace timer fired.
    pub(crate) fn on_grace_timer<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.grace.timer_fired();
        self.service_lost(env, links, cx, slot, stats);
    }

    /// Marks the connection removed, unless it holds its session and `evict` is false (then
    /// `false`). With `evict`, the session loses its holder. Whatever is left in the ring goes
    /// to the session or fails.
    fn mark_dead(&mut self, evict: bool) -> bool {
        let inner = Arc::clone(&self.handle.inner);
        {
            // Under the session's lock: a connection the session names is never removed (see
            // `SessionState::cur`), and a removed one is never bound (`BackServer::bind`).
            let sess = lock(&inner.session);
            if let Some(st) = sess.as_ref() {
                let mut cur = lock(&st.cur);
                let mine = cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, &inner));
                if mine && !st.is_closed() {
                    if !evict {
                        return false;
                    }
                    *cur = None;
                }
            }
            // SeqCst: see `ConnBackShared::submit`.
            inner.dead.store(true, Ordering::SeqCst);
        }
        // SeqCst: see `ConnBackShared::submit`.
        fence(Ordering::SeqCst);
        *lock(&inner.orphan) = self.rx.take();
        inner.drain_orphans();
        true
    }

    /// The earliest deadline came: fail every call past its deadline.
    pub(crate) fn on_timer<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.timer = None;
        self.timer_at = u64::MAX;
        let now = env.now;
        let mut next = u64::MAX;
        for i in 0..self.recs.len() as u32 {
            let r = &self.recs[i as usize];
            if !matches!(r.state, BState::Queued | BState::InFlight) {
                continue;
            }
            if r.deadline <= now {
                stats.back_error();
                self.fail_rec(env, links.as_deref_mut(), i, Err(ClientError::TimedOut));
            } else {
                next = next.min(r.deadline);
            }
        }
        let recs = &self.recs;
        self.ready
            .retain(|&j| recs[j as usize].state == BState::Queued);
        if next != u64::MAX && !self.done {
            self.arm(env, cx, slot, next);
        }
    }
}

impl Drop for ServerBack {
    fn drop(&mut self) {
        if !self.done {
            // Runtime teardown: late and queued submissions complete now (records' callbacks
            // run with `Dropped` when the records go).
            self.mark_dead(true);
        }
    }
}
