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
//! earliest call, and completes each call exactly once through its [`Callback`](crate::Callback) (on the
//! reactor or a worker, per the server's mode), with the reply or an error.
//!
//! Recovery: a call that reaches a connection whose upper layer had not called
//! [`BackChannel::enable`] fails with [`ClientError::NotServed`](crate::ClientError::NotServed) and is not sent. A call that
//! gets no answer in time fails with [`ClientError::TimedOut`](crate::ClientError::TimedOut). Its buffers stay with the
//! connection until the engine is done with the call, and a late reply is dropped. When a
//! connection bound to a session is lost, it keeps its pending backward calls, with their
//! deadlines, also when it is lost before its reactor turned the engine's backchannel on (a
//! bind had just moved the session's calls to it): the calls wait for the loss to be handled
//! instead of being started on the closed engine. The lost connection stays on its
//! reactor as the session's holder and also takes new calls for the session. When the client
//! binds a new connection to the session, the calls move to it through its ring and are sent
//! again with the SAME XIDs. Closing a session ([`Server::close_session`](crate::Server::close_session)) fails its calls
//! with [`ClientError::SessionClosed`](crate::ClientError::SessionClosed). A lost holder also arms a grace timer on its reactor's
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
//!
//! Files: this one holds the client side (`ClientBack`); the server side's reactor part
//! (`ServerBack`) is in `server_back.rs`, the shared state, sessions and their grace period
//! in `session.rs`.

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::Arc;

use rpcrdma_engine::conn::{
    self, BackchannelPools, CallId, ConnState, Connection, HostMemory, IncomingCall, Pools,
    ReplyError, ReplyKind, ReplySpec, Role,
};
use rpcrdma_engine::proto::private_data::representable_size;
use rpcrdma_engine::rpc::{self, AcceptStat, ReplyHeader};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::{HugePagePolicy, PoolBuf, Region, Registrar};

use crate::api_stats::ConnStatsWriter;
use crate::config::{CallbackMode, EndpointConfig};
use crate::driver::ConnDriver;
use crate::memory::{local_buf, MemError, Slab, SlabLayout};
use crate::program::{
    header_error_reply, serve_inline, CallTransport, DdpItems, Decision, Dispatch, Program,
    Programs, Reject, Request, MAX_DDP, SUCCESS_HEADER_LEN,
};
pub use crate::session::{BackCallOptions, BackChannel, BindError};

/// The peer named to a backward handler when the QP is already gone.
const UNSPECIFIED_PEER: std::net::SocketAddr = std::net::SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
);
use crate::node::{job_token, NodeEnv};
use crate::worker::{Job, NodeLinks, RawSlice, ServeJob, Served};

/// Backward credits a client grants by default (what Linux grants).
pub const DEFAULT_BACK_CREDITS: u32 = 16;

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
        let credits = conn::credits::clamp(s.credits, ep.max_credits);
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
        let slab = Slab::new(reg, &layout, hugepages, crate::memory::LOCAL_ACCESS)?;
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
