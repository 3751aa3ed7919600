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
//!
//! [`Request::backchannel`]: crate::Request::backchannel

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use rpcrdma_engine::conn::{
    self, BackchannelPools, ConnState, Connection, IncomingCall, Pools, Role,
};
use rpcrdma_engine::proto::private_data::representable_size;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::{HugePagePolicy, Region, Registrar};

use crate::api_stats::ConnStatsWriter;
use crate::config::{CallbackMode, EndpointConfig};
use crate::dispatch::{Direction, Dispatcher, Io, Site};
use crate::driver::ConnDriver;
use crate::memory::{MemError, Slab, SlabLayout};
use crate::program::{Program, Programs};
pub use crate::session::{BackCallOptions, BackChannel, BindError};

/// The peer named to a backward handler when the QP is already gone.
const UNSPECIFIED_PEER: std::net::SocketAddr = std::net::SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
);
use crate::node::NodeEnv;
use crate::worker::Served;

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

/// A client connection's backward responder (on its reactor): the programs it serves, its
/// backchannel memory and the dispatcher that serves the calls (`dispatch.rs`).
pub(crate) struct ClientBack {
    programs: Programs,
    slab: Slab,
    /// Reply buffers are held per engine backward slot until the slot answers its next call
    /// (the engine reuses a slot only after its reply's Send completed) or the connection is
    /// lost.
    dispatch: Dispatcher,
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
            dispatch: Dispatcher::new(Direction::Backward, 2 * credits as usize),
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
        self.dispatch.in_worker() == 0
    }

    /// How backward calls are served: the peer handlers see is the QP's (or none once the QP
    /// is gone).
    fn site<'a, P: Provider>(
        programs: &'a Programs,
        mode: CallbackMode,
        drv: &ConnDriver<P>,
    ) -> Site<'a> {
        let peer = drv.qp.as_ref().map_or(
            UNSPECIFIED_PEER,
            rpcrdma_engine::verbs::QueuePair::peer_addr,
        );
        Site {
            programs,
            mode,
            peer,
            conn_id: 0,
            inline_send: 0,
            back: None,
        }
    }

    /// A backward call arrived on the connection `io` serves.
    pub(crate) fn on_call<P: Provider>(&mut self, io: &mut Io<'_, P>, inc: IncomingCall) {
        let site = Self::site(&self.programs, self.mode, io.drv);
        self.dispatch.on_call(io, &site, inc);
    }

    /// Retries replies that waited for send-queue room, then calls that waited for a reply
    /// buffer.
    pub(crate) fn service<P: Provider>(&mut self, io: &mut Io<'_, P>) -> usize {
        let site = Self::site(&self.programs, self.mode, io.drv);
        let work = self.dispatch.retry(io, &site);
        if let Some(c) = io.drv.conn.as_ref() {
            io.stats.back_gauges(
                u64::from(c.backward_outstanding()),
                self.dispatch.waiting() as u64,
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
        // A reconnection waits for every worker (ClientConn), so a live engine here is the one
        // that delivered the call; otherwise the call died with its connection and the server
        // sends it again.
        let live = drv
            .conn
            .as_ref()
            .is_some_and(|c| c.state() != ConnState::Closed);
        let mut io = Io::new(drv, env, None, stats, 0);
        self.dispatch.on_served(&mut io, s, live);
    }

    /// The connection is gone (its QP destroyed): release every buffer of its calls.
    pub(crate) fn on_lost<P: Provider>(&mut self, env: &mut NodeEnv<P>) {
        self.dispatch.clear(env);
    }
}
