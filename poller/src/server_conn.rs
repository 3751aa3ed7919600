//! The reactor side of a server: the state its connections share (`ServerShared`: programs,
//! options, admission table, backward-call sessions) and each accepted connection
//! (`ServerConn`), which decodes and dispatches calls, runs handlers inline or on workers,
//! holds reply buffers until their Send completes and sends backward calls.
//!
//! Normal operation and recovery: as described in [`crate::server`] — a call that finds no
//! free reply buffer waits in order; a reply the send queue cannot take yet waits and is
//! retried first; a lost connection drops its calls in progress (the client retransmits) and
//! releases its memory only when no worker still holds a view of it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_engine::conn::{self, ConnState, Connection, Event, IncomingCall, Role, WorkRequest};
use rpcrdma_engine::proto::private_data;
use rpcrdma_engine::verbs::{
    errno, CmEventKind, ConnRequest, Device, PrivateData, Provider, QueuePair, RecvWr, VerbsCall,
    VerbsError, RNR_RETRY_INFINITE,
};

use crate::admission::{PeerSlot, PeerTable};
use crate::api_stats::{conn_stats, ConnStatsWriter};
use crate::config::ServerOptions;
use crate::conn_table::ConnTable;
use crate::dispatch::{Direction, Dispatcher, Io, Site};
use crate::driver::ConnDriver;
use crate::memory::{HostRegions, Slab, SlabLayout};
use crate::node::{
    Acceptor, Conn, Evictable, NodeConn, NodeEnv, Round, Seated, TIMER_BACK, TIMER_CONN,
    TIMER_GRACE,
};
use crate::program::Programs;
use crate::server_back::ServerBack;
use crate::session::BackServer;
use crate::srq::{self, ConnSrq};
use crate::worker::Served;

/// What a server's connections share: its programs, options, admission table and
/// backward-call sessions.
pub(crate) struct ServerShared {
    pub(crate) programs: Programs,
    pub(crate) opts: ServerOptions,
    pub(crate) next: AtomicUsize,
    pub(crate) stopping: AtomicBool,
    /// Live connections' counters, the last closed ones' and the closed total.
    pub(crate) conns: Mutex<ConnTable>,
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// Sessions and backward-call settings (RFC 8167).
    pub(crate) back: Arc<BackServer>,
    /// Connection shares per peer address (`max_conns_per_peer`).
    pub(crate) peers: Arc<PeerTable>,
    pub(crate) latency: Option<Arc<crate::metrics::latency::ServerLatency>>,
    pub(crate) metrics: std::sync::OnceLock<crate::metrics::MetricsServer>,
}

impl ServerShared {
    /// Counts a rejected connect request.
    pub(crate) fn count_reject(&self) {
        // Relaxed: a count for monitoring.
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Evicting idle connections for newcomers is allowed, after this grace (ns).
    pub(crate) fn evict_grace_ns(&self) -> Option<u64> {
        self.opts
            .evict_idle
            .then(|| self.opts.evict_idle_ms.saturating_mul(1_000_000))
    }

    /// The connection-counter table, locked (accept, teardown and readers only).
    pub(crate) fn conn_table(&self) -> std::sync::MutexGuard<'_, ConnTable> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the server stopped listening.
    pub(crate) fn is_stopping(&self) -> bool {
        // Acquire: pairs with the Release store in `Server::stop_listening`.
        self.stopping.load(Ordering::Acquire)
    }
}

impl<P: Provider> Acceptor<P> for ServerShared {
    fn is_stopping(&self) -> bool {
        ServerShared::is_stopping(self)
    }

    fn next_node(&self, n: usize) -> usize {
        // Relaxed: a turn counter only.
        self.next.fetch_add(1, Ordering::Relaxed) % n.max(1)
    }

    fn peers(&self) -> &Arc<PeerTable> {
        &self.peers
    }

    fn has_room(&self, env: &NodeEnv<P>) -> bool {
        if self.opts.shared_receive_queue.is_none() {
            return true;
        }
        let backward = if self.opts.backchannel_credits > 0 {
            self.back.credits
        } else {
            0
        };
        srq::has_room(&env.srq, backward)
    }

    fn count_reject(&self) {
        ServerShared::count_reject(self);
    }

    fn accept(
        self: Arc<Self>,
        env: &mut NodeEnv<P>,
        seated: Seated<P>,
    ) -> Result<Conn<P>, Option<P::ConnRequest>> {
        ServerConn::accept(env, seated, self).map(|c| Box::new(c) as Conn<P>)
    }
}

/// Why an idle connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleClose {
    /// Evicted for a newcomer (`ServerOptions::evict_idle`).
    Evicted,
    /// Idle for `ServerOptions::idle_timeout_ms`.
    TimedOut,
}

/// One accepted connection on its reactor.
pub(crate) struct ServerConn<P: Provider> {
    shared: Arc<ServerShared>,
    pub(crate) drv: ConnDriver<P>,
    _slab: Slab,
    /// The calls' handler side: programs, workers, held replies (`dispatch.rs`).
    dispatch: Dispatcher,
    lost: bool,
    stats: ConnStatsWriter,
    /// The backward direction (RFC 8167), when the server has one.
    back: Option<ServerBack>,
    /// The requester's address and this connection's id (handed to handlers).
    peer: std::net::SocketAddr,
    conn_id: u64,
    /// When the connection last did anything (a completion, a call, a handler's result), ns.
    last_active: u64,
    /// Closed (or to be closed at the end of this round) to make room for a new connect.
    evicted: bool,
    /// This connection's share of its peer's limit (given back at teardown).
    peer_slot: Option<PeerSlot>,
    /// Its share of the node's shared receive queue, when the server uses one.
    srq: Option<ConnSrq>,
    /// The credits granted to the client: `credits`, or what the SRQ ledger could back.
    granted: u32,
    /// Cut off for exceeding its grant on the shared receive queue (counted at teardown).
    cut_off: bool,
    /// Replies whose Send completed in error or was flushed (logged when it closes).
    sends_failed: u32,
}

/// The engine configuration of a server connection with options `o` on this node's device.
fn engine_config<P: Provider>(env: &NodeEnv<P>, o: &ServerOptions) -> conn::Config {
    let c = o.credits;
    let mut cfg = conn::Config::DEFAULT;
    cfg.credits = c;
    cfg.inline_send = private_data::clamp_size(o.inline_send);
    cfg.inline_recv = private_data::clamp_size(o.inline_recv);
    // Send With Invalidate only where the device can post it (RFC 8797 §4.1: R says the
    // responder's stack supports remote invalidation); the device logged its absence.
    cfg.remote_invalidate = o.remote_invalidate && env.dev.caps().send_with_invalidate;
    cfg.sq_depth = env.sq_depth(c);
    cfg.rq_depth = env.rq_depth(c);
    cfg.max_send_sge = 4;
    cfg.max_rdma_reads = 16;
    // Version Two needs 4096-octet receives and Sends; a smaller size serves Version One only.
    let v2_ok = private_data::representable_size(cfg.inline_recv) >= conn::V2_INLINE
        && cfg.inline_send >= conn::V2_INLINE;
    cfg.max_version = if v2_ok { o.version.number() } else { 1 };
    cfg
}

/// The engine of a server connection with options `o` over `slab` (and `back`'s memory):
/// per-connection receives, or the node's shared receive queue with the share it reserved.
fn engine_conn<P: Provider>(
    env: &mut NodeEnv<P>,
    o: &ServerOptions,
    cfg: conn::Config,
    slab: &Slab,
    back: Option<&ServerBack>,
) -> Option<(Connection, Option<srq::Admitted>)> {
    let pools = slab.pools(&[]);
    match (back, o.shared_receive_queue) {
        (b, Some(depth)) => {
            srq::connection(env.srq_parts(), depth, cfg, &pools, b.map(|b| b.pools()))
                .map(|(c, s)| (c, Some(s)))
        }
        (Some(b), None) => Connection::with_backchannel(Role::Responder, cfg, &pools, &b.pools())
            .ok()
            .map(|c| (c, None)),
        (None, None) => Connection::new(Role::Responder, cfg, &pools)
            .ok()
            .map(|c| (c, None)),
    }
}

impl<P: Provider> ServerConn<P> {
    /// Accepts `req` on this node (QP on the node's CQ). `Err(Some(req))` when setting the
    /// connection up failed before the accept (the caller rejects it with a reason);
    /// `Err(None)` when the accept itself failed (the request was rejected without one).
    pub(crate) fn accept(
        env: &mut NodeEnv<P>,
        seated: Seated<P>,
        shared: Arc<ServerShared>,
    ) -> Result<ServerConn<P>, Option<P::ConnRequest>> {
        let Seated {
            req,
            slot,
            peer: peer_slot,
        } = seated;
        let o = shared.opts;
        let c = o.credits;
        let mut cfg = engine_config(env, &o);
        let nslots = 2 * c as usize;
        let ndata = if o.data_buffers == 0 {
            (c as usize / 4).max(2)
        } else {
            o.data_buffers as usize
        };
        let recv_size = private_data::representable_size(cfg.inline_recv);
        let srq_on = o.shared_receive_queue.is_some();
        let layout = SlabLayout {
            headers: nslots,
            header_size: cfg.inline_send,
            recvs: if srq_on { 0 } else { c as usize + nslots },
            recv_size,
            data: ndata,
            data_size: o.max_call.clamp(4096, 1 << 30),
            rpc_headers: 0,
            rpc_header_size: 0,
        };
        // The responder exposes nothing (Read-Write model): local access only.
        let Ok(slab) = Slab::new(
            &*env.pd,
            &layout,
            env.hugepages,
            crate::memory::LOCAL_ACCESS,
        ) else {
            return Err(Some(req));
        };
        let (w, r) = conn_stats();
        w.set_peer(req.peer_addr());
        let back = if o.backchannel_credits > 0 {
            let bc_recv = if srq_on { 0 } else { recv_size };
            match ServerBack::new(env, &shared.back, &mut cfg, bc_recv, slot, r.clone()) {
                Ok(b) => Some(b),
                Err(_) => return Err(Some(req)),
            }
        } else {
            None
        };
        let Some((mut conn, srq)) = engine_conn(env, &o, cfg, &slab, back.as_ref()) else {
            return Err(Some(req));
        };
        let peer_pd = PrivateData::new(req.private_data()).unwrap_or(PrivateData::EMPTY);
        let srq_q = env.srq.as_ref().filter(|_| srq_on).map(|s| s.srq());
        // On a shared receive queue a violator can take every posted receive before the node
        // polls (it is cut off at the first completion beyond its grant, and the receives it
        // took come back at once): a client's Send that meets the SRQ empty then waits for the
        // repost (RNR retry 7, forever) rather than failing, so it costs nobody a connection.
        let rnr = if srq_on {
            RNR_RETRY_INFINITE
        } else {
            o.rnr_retry
        };
        let mut init = env.qp_init(&cfg, rnr, srq_q);
        // RDMA Read depth, as initiator (the Read chunks it pulls) and as responder.
        init.opts.initiator_depth = 16;
        init.opts.responder_resources = 16;
        // The requester's private data is known from the request: establish the engine first,
        // so its receives exist, and post them on the new QP before the accept goes out — the
        // client may send as soon as it sees Established, and RNR retry stays 0.
        conn.handle_cm(
            env.now,
            conn::CmInput::Established {
                private_data: peer_pd.as_slice(),
            },
        );
        let ours = conn.private_data();
        let mut preposted = 0u32;
        let qp = req
            .accept_prepared(init, &ours, &mut |qp: &mut P::Qp| {
                post_initial_recvs::<P>(&mut conn, qp, &mut preposted)
            })
            .map_err(|_| srq::abandon(&mut env.srq, srq.as_ref()))?;
        env.stats
            .posted(u64::from(preposted > 0), u64::from(preposted));
        env.qp_created(&qp);
        let peer = qp.peer_addr();
        let qpn = qp.qp_num();
        if !env.router.insert(qpn, slot) {
            // Its preposted receives flush into the node's CQ: kept until they are reaped.
            let mut qp = qp;
            let _ = qp.disconnect();
            env.retired.retire(qp);
            return Err(srq::abandon(&mut env.srq, srq.as_ref()));
        }
        let mut regions = vec![
            Arc::clone(&slab.region),
            Arc::clone(env.bufs.region()),
            Arc::clone(env.replies.region()),
        ];
        regions.extend(back.as_ref().map(|b| b.region()));
        regions.extend(srq.as_ref().map(|s| Arc::clone(&s.region)));
        let mem = HostRegions::new(&regions);
        let mut drv = ConnDriver::new(mem);
        drv.qp_num = qpn;
        drv.qp = Some(qp);
        drv.conn = Some(conn);
        // Anything else the engine queued meanwhile (nothing, normally).
        let p = drv.post(env.now);
        env.stats.posted(u64::from(p.doorbells), u64::from(p.wrs));
        shared.conn_table().open(r.clone());
        // Relaxed: a count for monitoring.
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        env.stats.established();
        crate::log_limited!(
            peer: peer;
            INFO,
            %peer,
            conn = r.id(),
            node = env.index,
            "connection accepted"
        );
        let lat = env
            .latency
            .attach(shared.latency.as_ref(), env.index, nslots);
        Ok(ServerConn {
            shared,
            drv,
            _slab: slab,
            dispatch: Dispatcher::new(Direction::Forward, nslots).with_latency(lat),
            lost: false,
            stats: w,
            back,
            peer,
            conn_id: r.id(),
            last_active: env.now,
            evicted: false,
            peer_slot: Some(peer_slot),
            granted: srq.as_ref().map_or(c, |s| s.share.credits()),
            srq: srq.map(|s| s.share),
            cut_off: false,
            sends_failed: 0,
        })
    }

    /// How long the connection has been idle at `now` (ns), or `None` when it is busy or
    /// closed: a call being served or waiting, a reply whose Send has not completed, a
    /// backward call on the wire. Idle time counts from the last completion, call or result.
    fn idle_for(&self, now: u64) -> Option<u64> {
        if self.lost || self.evicted || self.dispatch.kicked() {
            return None;
        }
        let idle = now.saturating_sub(self.last_active);
        let busy = self.dispatch.busy()
            || self
                .drv
                .conn
                .as_ref()
                .is_some_and(|c| c.backward_outstanding() > 0);
        (!busy).then_some(idle)
    }

    /// Whether to close the connection at the end of this round, and why: evicted for a
    /// newcomer, or idle for `idle_timeout_ms` (counted when the close happens).
    fn idle_close(&self, now: u64) -> Option<IdleClose> {
        if self.evicted {
            return Some(IdleClose::Evicted);
        }
        let timeout = self.shared.opts.idle_timeout_ms;
        // The cheap test first: a connection with recent completions is not idle.
        if timeout == 0 || now.saturating_sub(self.last_active) < timeout.saturating_mul(1_000_000)
        {
            return None;
        }
        self.idle_for(now).map(|_| IdleClose::TimedOut)
    }

    /// Hands a new call to the dispatcher (served now or queued), or with `None` retries the
    /// replies and calls that waited; the work done.
    fn calls(&mut self, r: &mut Round<'_, '_, P>, new: Option<IncomingCall>) -> usize {
        let site = serve_site(&self.shared, self.back.as_ref(), self.peer, self.conn_id);
        let mut io = Io::of_round(&mut self.drv, r, &self.stats);
        match new {
            Some(inc) => {
                self.dispatch.on_call(&mut io, &site, inc);
                0
            }
            None => self.dispatch.retry(&mut io, &site),
        }
    }

    fn teardown(&mut self, r: &mut Round<'_, '_, P>) {
        self.lost = true;
        self.peer_slot = None;
        self.stats.lost();
        if let Some(qp) = self.drv.release_qp(&mut r.env.router, r.cx) {
            r.env.retired.retire(qp);
        }
        match self.srq.as_mut() {
            // Its engine (the shared receives its calls hold) stays until no worker reads them.
            Some(s) => s.park(&mut r.env.srq, r.env.now, self.drv.conn.take()),
            None => self.drv.conn = None,
        }
        self.dispatch.clear(r.env);
        if let Some(b) = self.back.as_mut() {
            b.on_lost(r.env, r.links.as_deref_mut(), &self.stats);
        }
        self.srq_leave(r.env);
    }

    /// Closes the connection, counting and logging why: a handler asked (`kick`), evicted or
    /// idle (`idle`), a credit violation, or lost. Out of line: the round of a connection that
    /// stays up never pays for it.
    #[cold]
    #[inline(never)]
    fn close(&mut self, r: &mut Round<'_, '_, P>, kick: bool, idle: Option<IdleClose>) {
        self.log_close(kick, idle, r.env.index);
        if kick {
            self.stats.kicked();
        }
        if self.cut_off {
            r.env.stats.srq_violation();
        }
        match idle {
            Some(IdleClose::Evicted) => {
                self.stats.evicted();
                r.env.stats.evicted();
            }
            Some(IdleClose::TimedOut) => {
                self.stats.idle_closed();
                r.env.stats.idle_closed();
            }
            None => {}
        }
        self.teardown(r);
    }

    /// Logs why the connection closes (rate-limited: a peer can open and close connections in
    /// a loop); a credit violation at `warn`.
    fn log_close(&self, kick: bool, idle: Option<IdleClose>, node: usize) {
        let reason = match (self.cut_off, kick, idle) {
            (true, _, _) => {
                crate::log_limited!(
                    peer: &self.peer;
                    WARN,
                    peer = %self.peer,
                    conn = self.conn_id,
                    node,
                    "credit violation: the peer held more shared receives than its grant \
                    (RFC 8166 §3.3.1); connection cut off"
                );
                "credit violation"
            }
            (_, true, _) => "closed by a handler",
            (_, _, Some(IdleClose::Evicted)) => "evicted",
            (_, _, Some(IdleClose::TimedOut)) => "idle timeout",
            _ if self.drv.broken => "work request post failed",
            _ => "disconnected or failed",
        };
        // What the connection did, and what it still held: a call served and not answered
        // (in a worker, waiting for a buffer or for send-queue room, a Send not done or
        // failed) names a reply the peer lost.
        let c = self.stats.reader().snapshot();
        crate::log_limited!(
            peer: &self.peer;
            INFO,
            peer = %self.peer,
            conn = self.conn_id,
            reason,
            node,
            calls = c.calls,
            replies = c.replies,
            errors = c.errors,
            in_worker = self.dispatch.in_worker(),
            waiting = self.dispatch.waiting(),
            replies_queued = self.dispatch.queued(),
            sends_pending = self.dispatch.held(),
            sends_failed = self.sends_failed,
            "connection closed"
        );
    }

    /// A peer that exceeded its grant on the shared receive queue is cut off at once, in the
    /// completion that showed it: its QP goes to the error state, so it takes no more shared
    /// receives from the other connections (teardown follows in the next round).
    #[cold]
    fn cut_off_violator(&mut self) {
        self.cut_off = true;
        if let Some(qp) = self.drv.qp.as_mut() {
            let _ = qp.disconnect();
        }
    }

    /// Lost and no worker reads its calls' arguments: its receives go back to the SRQ.
    fn srq_leave(&mut self, env: &mut NodeEnv<P>) {
        if let (Some(s), 0) = (self.srq.as_mut(), self.dispatch.in_worker()) {
            s.leave(&mut env.srq, &env.stats);
        }
    }
}

/// How calls on a server connection are served: the server's programs and mode, the peer and
/// connection id handlers see, the inline threshold, the connection's backchannel handle.
fn serve_site<'a>(
    shared: &'a ServerShared,
    back: Option<&'a ServerBack>,
    peer: std::net::SocketAddr,
    conn_id: u64,
) -> Site<'a> {
    Site {
        programs: &shared.programs,
        mode: shared.opts.mode,
        peer,
        conn_id,
        inline_send: private_data::clamp_size(shared.opts.inline_send),
        back: back.map(|b| &b.handle),
    }
}

/// Posts the receives a freshly established responder queued, on a QP that is not yet
/// accepted (one doorbell). A fresh responder queues nothing but receives; anything else is a
/// bug and aborts the accept rather than being lost.
fn post_initial_recvs<P: Provider>(
    conn: &mut Connection,
    qp: &mut P::Qp,
    posted: &mut u32,
) -> Result<(), VerbsError> {
    while let Some(wr) = conn.poll_wr() {
        let WorkRequest::Recv { wr_id, sge } = wr else {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        };
        let sgl = [sge];
        qp.queue_recv(&RecvWr {
            wr_id: wr_id.raw(),
            sgl: &sgl,
        })?;
        *posted += 1;
    }
    qp.flush_recv()
}

impl<P: Provider> Drop for ServerConn<P> {
    /// The connection is gone: its counters move to the server's closed total and history.
    fn drop(&mut self) {
        self.shared.conn_table().close(&self.stats.reader());
    }
}

impl<P: Provider> NodeConn<P> for ServerConn<P> {
    /// Feeds a completion; a reply whose Send the engine reports finished
    /// (`Connection::poll_sent`) releases its buffers and, when it succeeded, is counted (a
    /// Send in error or flushed delivered nothing).
    #[inline]
    fn feed(&mut self, now: u64, wc: &rpcrdma_engine::verbs::Completion) {
        self.last_active = now;
        self.drv.feed(now, wc);
        let Some(c) = self.drv.conn.as_mut() else {
            return;
        };
        if let Some(s) = c.poll_sent() {
            self.sends_failed += u32::from(!s.ok);
            self.dispatch
                .on_send_done(s.call.slot, s.ok, now, &self.stats);
        }
        if !self.cut_off && c.exceeded_shared_grant() {
            self.cut_off_violator();
        }
    }

    /// A worker finished a handler.
    fn on_served(&mut self, env: &mut NodeEnv<P>, s: Served) {
        self.last_active = env.now;
        let mut io = Io::new(&mut self.drv, env, None, &self.stats, 0);
        self.dispatch.on_served(&mut io, s, !self.lost);
        if self.lost {
            self.srq_leave(env);
        }
    }

    /// One round of work.
    fn service(&mut self, r: &mut Round<'_, '_, P>) -> usize {
        let mut work = 0;
        if self.lost {
            // Backward calls kept for the session until its client binds a new connection.
            return match self.back.as_mut() {
                Some(b) => b.service_lost(r, &self.stats),
                None => 0,
            };
        }
        // CM: only a disconnect matters after accept.
        while let Some(ev) = self.drv.next_cm(&r.env.stats) {
            work += 1;
            if matches!(
                ev.kind,
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval
            ) {
                self.drv.disconnected(r.env.now);
            }
        }
        // Replies the send queue refused earlier, then calls that waited for a reply buffer.
        work += self.calls(r, None);
        // New events.
        let mut lost = false;
        while let Some(ev) = self.drv.conn.as_mut().and_then(|c| c.poll_event()) {
            work += 1;
            match ev {
                Event::CallReady(inc) => {
                    self.calls(r, Some(inc));
                }
                Event::ConnectionLost => lost = true,
                Event::ReplyReady(reply) => {
                    if let Some(b) = self.back.as_mut() {
                        b.on_reply(r.env, r.links.as_deref_mut(), reply, &self.stats);
                    }
                }
                Event::CallFailed { call, error, .. } => {
                    if let Some(b) = self.back.as_mut() {
                        let links = r.links.as_deref_mut();
                        b.on_failed(r.env, links, call, error, &self.stats);
                    }
                }
                Event::Connected(_) => {}
            }
        }
        // Backward calls: enable, take new ones, start what the backward credits allow.
        if let Some(b) = self.back.as_mut() {
            work += b.service(&mut self.drv, r, &self.stats);
        }
        ConnSrq::repost(&mut r.env.srq, &r.env.stats, self.drv.conn.as_mut());
        work += self.drv.post_counted(r.env.now, &r.env.stats, &self.stats);
        let kick = self.dispatch.kicked();
        let idle = self.idle_close(r.env.now);
        if self.drv.broken
            || lost
            || kick
            || idle.is_some()
            || self.drv.conn.as_ref().map(|c| c.state()) == Some(ConnState::Closed)
        {
            // A disconnect storm is torn down a few connections per poll (the rest wait, and
            // are counted, when their turn comes).
            if r.env.teardowns_left == 0 {
                return work + 1;
            }
            r.env.teardowns_left -= 1;
            self.close(r, kick, idle);
            return work + 1;
        }
        let token = r.timer_token(TIMER_CONN);
        self.drv.sync_timer(r.cx, token);
        self.stats.credits(
            (self.dispatch.held() + self.dispatch.in_worker() as usize) as u64,
            u64::from(self.granted),
        );
        self.stats.queued(self.dispatch.waiting() as u64);
        self.stats.recv_queue(self.drv.conn.as_ref());
        self.dispatch.flush_latency(&mut r.env.latency);
        work
    }

    /// True when the node may drop it: lost and no worker holds a view of its memory.
    fn is_done(&self) -> bool {
        self.lost
            && self.dispatch.in_worker() == 0
            && self.back.as_ref().map_or(true, |b| b.is_done())
    }

    fn on_timer(&mut self, kind: u8, r: &mut Round<'_, '_, P>) {
        match (kind, self.back.as_mut()) {
            (TIMER_BACK, Some(b)) => b.on_timer(r, &self.stats),
            (TIMER_BACK, None) => {}
            (TIMER_GRACE, Some(b)) if self.lost => b.on_grace_timer(r, &self.stats),
            (TIMER_GRACE, _) => {}
            _ => self.drv.on_timer(r.env.now),
        }
    }

    /// The reactor is stopping: a lost connection stops holding backward calls for its
    /// session (they fail).
    fn shutdown(&mut self) {
        if let Some(b) = self.back.as_mut() {
            b.shutdown();
        }
    }

    /// How long the connection has been idle and whether past its server's eviction grace,
    /// if a newcomer may evict it now: eviction on, nothing in progress, and not holding a
    /// session (a lost connection keeps its slot while it holds its session's backward calls,
    /// so evicting it frees nothing). The victim is chosen among these by `node::pick_victim`.
    fn evictable(&self, now: u64) -> Option<Evictable> {
        let grace = self.shared.evict_grace_ns()?;
        if self
            .back
            .as_ref()
            .is_some_and(|b| b.handle.session().is_some())
        {
            return None;
        }
        self.idle_for(now).map(|idle| Evictable {
            idle,
            past_grace: idle >= grace,
            settled: idle >= grace / 8,
            peer: self.peer.ip(),
        })
    }

    /// Takes back the shared receives its engine released (SRQ mode).
    #[inline]
    fn collect_shared_recvs(&mut self, env: &mut NodeEnv<P>) {
        ConnSrq::collect(&mut env.srq, self.drv.conn.as_mut());
    }

    /// Marks the connection for eviction: it closes at the end of its next round.
    fn evict(&mut self) {
        self.evicted = true;
    }

    /// Whether the connection was evicted (its slot is promised to a connect request).
    fn was_evicted(&self) -> bool {
        self.evicted
    }
}
