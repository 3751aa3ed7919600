//! The server API: [`Server::builder`] registers [`Program`]s, [`ServerBuilder::start`] listens
//! on an endpoint; and the reactor-side connection (`ServerConn`) that serves calls.
//!
//! Normal operation: the listener is polled by one reactor (`listen_reactor`); each connect
//! request is handed to the next reactor in turn through its control ring and accepted there
//! (the QP joins that reactor's CQ), so accepting never stalls the other reactors. For every
//! call the engine delivers, the connection takes a registered reply buffer from the endpoint
//! pool, decodes the RPC header and dispatches it ([`Programs::dispatch`]): NULL and RFC 5531
//! errors are answered at once; a handler runs inline or on a worker with a zero-copy view of
//! the arguments and writes its results straight into the reply buffer, which the reply Send
//! gathers. DDP results go into the client's Write chunks. Reply buffers and DDP items are
//! kept until the reply's Send completes, then return to their pool. With
//! `backchannel_credits` > 0 each connection also sends backward calls (RFC 8167, see
//! [`crate::backchannel`]); handlers reach them through
//! [`Request::backchannel`](crate::Request::backchannel).
//!
//! Admission (issue 13 §2 item 5; Linux nfsd's policy): a connect request first takes one of
//! its peer address's `max_conns_per_peer` shares and one of the server's `max_connections`
//! (`PeerSlot`, given back when the connection closes), then a free slot of the reactor it was
//! handed to (and, on a shared receive queue, a reservation); when there is no room, a server
//! connection there holding no session is evicted and the request waits for its room (Linux's
//! `svc_check_conn_limits`), the victim chosen by the connections its address holds, then
//! idleness (`crate::accept`, `node::pick_victim`). A
//! connection idle `idle_timeout_ms` is closed (Linux's `svc_age_temp_xprts`); idle means no
//! call in the server's hands, no reply Send outstanding, no backward call on the wire and no
//! completion for that long. A refused request is rejected with a
//! [`RejectReason`](crate::RejectReason) in the reject's private data
//! (`rpcrdma_engine::proto::reject`, this crate's format).
//!
//! Recovery: a call that finds no free reply buffer waits in order in the connection (the
//! client gets no new credit meanwhile); a reply the send queue cannot take yet waits and is
//! retried first. When the connection is lost, calls in progress are dropped with it (the
//! client retransmits them on its next connection); the connection's memory is released only
//! when no worker still holds a view of it. Stopping: the listener closes, connections keep
//! serving until their clients disconnect (or the reactors' drain timeout ends them).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_engine::verbs::{Device, Provider};

use crate::admission::PeerTable;
use crate::api_stats::{ConnSnapshot, ConnStats};
use crate::call::{CallArgs, Callback, ClientError, OnReply, Proc, Refused, Reply};
use crate::config::{CallbackMode, ServerOptions};
use crate::conn_table::ConnTable;
use crate::metrics::latency::{LatencyReader, ServerLatency};
use crate::metrics::{Metrics, MetricsServer, ServerSample, ServerSource};
use crate::node::{Acceptor, NodeCmd};
use crate::program::{Program, Programs};
use crate::runtime::Endpoint;
use crate::session::{lock, BackCallOptions, BackChannel, BackRoute, BackServer};

use crate::server_conn::ServerShared;

/// Why a server could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerError {
    /// Listening failed (address in use, not this device's address, ...).
    Listen(String),
    /// Worker mode was asked for on an endpoint without workers.
    NoWorkers,
    /// The reactor is gone.
    Stopped,
    /// The metrics port (`ServerOptions::metrics_addr`) could not be bound.
    Metrics(String),
}

impl core::fmt::Display for ServerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ServerError::Listen(m) => write!(f, "listen failed: {m}"),
            ServerError::NoWorkers => write!(f, "worker mode needs an endpoint with workers"),
            ServerError::Stopped => write!(f, "reactor stopped"),
            ServerError::Metrics(m) => write!(f, "metrics port: {m}"),
        }
    }
}

impl std::error::Error for ServerError {}

/// Builds a [`Server`].
#[derive(Debug, Default)]
pub struct ServerBuilder {
    programs: Programs,
    opts: ServerOptions,
}

impl ServerBuilder {
    /// Serves `p`.
    pub fn program(mut self, p: Program) -> Self {
        self.programs.add(p);
        self
    }

    /// Sets every option.
    pub fn options(mut self, o: ServerOptions) -> Self {
        self.opts = o;
        self
    }

    /// Where handlers run.
    pub fn mode(mut self, m: CallbackMode) -> Self {
        self.opts.mode = m;
        self
    }

    /// Credits granted to each client.
    pub fn credits(mut self, c: u32) -> Self {
        self.opts.credits = c;
        self
    }

    /// Listens on `addr` through `ep` and starts serving.
    pub fn start<P: Provider>(
        self,
        ep: &Endpoint<P>,
        addr: SocketAddr,
    ) -> Result<Server, ServerError> {
        if self.opts.mode == CallbackMode::Worker && ep.config().workers == 0 {
            return Err(ServerError::NoWorkers);
        }
        let mut opts = self.opts;
        opts.credits = rpcrdma_engine::conn::credits::clamp(opts.credits, ep.config().max_credits);
        let listener = ep
            .device()
            .listen(addr, opts.backlog.max(1))
            .map_err(|e| ServerError::Listen(e.to_string()))?;
        let local = rpcrdma_engine::verbs::Listener::local_addr(&listener);
        let shared = Arc::new(ServerShared {
            programs: self.programs,
            opts,
            next: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(ConnTable::default()),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            back: Arc::new(BackServer::new(ep.buffers().clone(), &opts, ep.config())),
            peers: Arc::new(PeerTable::new(
                opts.max_conns_per_peer,
                opts.max_connections,
            )),
            latency: (opts.latency_histograms || opts.metrics_addr.is_some())
                .then(|| Arc::new(ServerLatency::new(ep.nodes()))),
            metrics: std::sync::OnceLock::new(),
        });
        let server = Server {
            shared: Arc::clone(&shared),
            addr: local,
        };
        // The metrics port first: when it cannot be bound, nothing listens yet.
        if let Some(at) = opts.metrics_addr {
            let port = metrics_port(ep, &server, at)?;
            let _ = shared.metrics.set(port);
        }
        let node = opts
            .listen_reactor
            .unwrap_or(0)
            .min(ep.nodes().saturating_sub(1));
        ep.send(
            node,
            NodeCmd::Listen {
                listener,
                to: shared as Arc<dyn Acceptor<P>>,
            },
        )
        .map_err(|_| ServerError::Stopped)?;
        tracing::info!(
            %local,
            credits = opts.credits,
            max_connections = opts.max_connections,
            max_conns_per_peer = opts.max_conns_per_peer,
            shared_receive_queue = ?opts.shared_receive_queue,
            "server listening"
        );
        Ok(server)
    }
}

/// Serves the metrics of `server` and its endpoint on `at`. The registry holds the server
/// weakly, so the port (kept in the server's shared state) does not keep the server alive: it
/// stops when the server's state is dropped (the reactors stopped and no handle is left).
fn metrics_port<P: Provider>(
    ep: &Endpoint<P>,
    server: &Server,
    at: SocketAddr,
) -> Result<MetricsServer, ServerError> {
    let m = Metrics::new();
    let name = server.addr.to_string();
    m.add_endpoint(&name, ep);
    m.add_server_source(&name, Box::new(server.downgrade()));
    m.serve(at)
        .map_err(|e| ServerError::Metrics(format!("{at}: {e}")))
}

impl Metrics {
    /// Exposes `server`: its totals, its live connections and their histograms.
    pub fn add_server(&self, name: &str, server: &Server) {
        self.add_server_source(name, Box::new(server.clone()));
    }
}

impl ServerSource for Server {
    fn sample(&self) -> Option<ServerSample> {
        Some(ServerSample {
            conns: self.live_connections(),
            totals: self.totals(),
            accepted: self.accepted(),
            rejected: self.rejected(),
            latency: self.latency(),
        })
    }
}

impl ServerSource for WeakServer {
    fn sample(&self) -> Option<ServerSample> {
        self.upgrade()?.sample()
    }
}

/// A running server (handle). Dropping it does not stop it; see [`Server::stop_listening`].
#[derive(Clone)]
pub struct Server {
    shared: Arc<ServerShared>,
    addr: SocketAddr,
}

/// A server the metrics registry of its own port refers to without keeping it alive.
#[derive(Clone)]
pub(crate) struct WeakServer {
    shared: std::sync::Weak<ServerShared>,
    addr: SocketAddr,
}

impl WeakServer {
    /// The server, while its state is alive.
    pub(crate) fn upgrade(&self) -> Option<Server> {
        Some(Server {
            shared: self.shared.upgrade()?,
            addr: self.addr,
        })
    }
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// A builder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics port's address when `ServerOptions::metrics_addr` was set (the port chosen
    /// when it asked for port 0). The port serves as long as the server does: until its
    /// reactors have stopped and no handle is left; see [`crate::metrics`].
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.shared.metrics.get().map(|m| m.local_addr())
    }

    /// The registry served on the metrics port when `ServerOptions::metrics_addr` was set: an
    /// application adds its own families to it ([`Metrics::add_collector`]).
    pub fn metrics(&self) -> Option<Metrics> {
        self.shared.metrics.get().map(|m| m.metrics().clone())
    }

    /// A reference that does not keep the server alive.
    pub(crate) fn downgrade(&self) -> WeakServer {
        WeakServer {
            shared: Arc::downgrade(&self.shared),
            addr: self.addr,
        }
    }

    /// Readers of the server's latency histograms (call received → reply Send completed, per
    /// procedure) with their node index, one per node that has served a connection of this
    /// server, when `ServerOptions::latency_histograms` or `metrics_addr` is set (empty
    /// otherwise). See [`crate::metrics`].
    pub fn latency(&self) -> Vec<(usize, LatencyReader)> {
        self.shared
            .latency
            .as_ref()
            .map_or_else(Vec::new, |l| l.readers())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        // Relaxed: a count for monitoring.
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connect requests rejected so far, whatever the reason (per reason:
    /// [`NodeSnapshot`](crate::NodeSnapshot)'s `rejects_*`, summed over the endpoint's nodes).
    pub fn rejected(&self) -> u64 {
        // Relaxed: a count for monitoring.
        self.shared.rejected.load(Ordering::Relaxed)
    }

    /// Counters of every live connection and of the last [`CLOSED_KEPT`](crate::CLOSED_KEPT)
    /// closed ones (their final values), in accept order. Older closed connections count in
    /// [`totals`](Self::totals) only, so the memory this takes does not grow with churn.
    pub fn connection_stats(&self) -> Vec<ConnSnapshot> {
        self.shared.conn_table().snapshots()
    }

    /// Readers of the live connections' counters, in accept order: each has the connection's
    /// id and peer address ([`ConnStats::id`], [`ConnStats::peer`]). Closed connections count in
    /// [`totals`](Self::totals) and [`connection_stats`](Self::connection_stats).
    pub fn live_connections(&self) -> Vec<ConnStats> {
        self.shared.conn_table().live()
    }

    /// The counters of every connection accepted so far, summed; gauges (`credits_granted`,
    /// `credits_in_use`, `queued`, `back_*` gauges) are the live connections' sum, and
    /// `rdma_version` is zero.
    pub fn totals(&self) -> ConnSnapshot {
        self.shared.conn_table().totals()
    }

    /// The server's sessions and backward-call settings.
    pub(crate) fn back_server(&self) -> &Arc<BackServer> {
        &self.shared.back
    }

    /// Stops accepting connections (existing ones keep being served).
    pub fn stop_listening(&self) {
        tracing::info!(local = %self.addr, "server stops listening");
        // Release: pairs with the Acquire load in `ServerShared::is_stopping`.
        self.shared.stopping.store(true, Ordering::Release);
    }
}

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#[allow(clippy::result_large_err)]
impl Server {
    /// Sends a backward call to the client of `session`, on the connection bound to it last
    /// (see [`BackChannel::bind`]). If that connection was lost, the call waits, with its
    /// deadline, until the client binds a new connection to the session, or fails with
    /// [`ClientError::SessionClosed`] when the session's grace period
    /// (`ServerOptions::session_grace_ms`) ends first. Completion as in
    /// [`BackChannel::call`]. `Err`: the session is unknown or closed
    /// ([`ClientError::SessionClosed`]), or the ring is full ([`ClientError::Busy`]).
    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    pub fn back_call<F: OnReply>(
        &self,
        session: u64,
        proc: Proc,
        args: CallArgs,
        cb: F,
    ) -> Result<(), Refused> {
        self.back_call_with(session, proc, args, BackCallOptions::default(), cb)
    }

    /// [`Server::back_call`] with options (XID, timeout).
    #[allow(clippy::result_large_err)]
    pub fn back_call_with<F: OnReply>(
        &self,
        session: u64,
        proc: Proc,
        args: CallArgs,
        opts: BackCallOptions,
        cb: F,
    ) -> Result<(), Refused> {
        let route = BackRoute::Session(session);
        let cb = Callback::new(cb);
        self.back_server()
            .start(route, proc, args, &opts, cb, false)
    }

    /// Sends a backward call to `session` and waits for its outcome (see
    /// [`BackChannel::call_blocking`]).
    pub fn back_call_blocking(
        &self,
        session: u64,
        proc: Proc,
        args: CallArgs,
    ) -> Result<Reply, ClientError> {
        let route = BackRoute::Session(session);
        let opts = BackCallOptions::default();
        self.back_server().call_blocking(route, proc, args, opts)
    }

    /// Closes `session`: the backward calls its connections hold fail with
    /// [`ClientError::SessionClosed`], and later ones are refused. `false` if it was unknown
    /// (never bound, closed, or expired after its grace period). A session whose connection
    /// was lost closes by itself when `ServerOptions::session_grace_ms` passes without a bind.
    pub fn close_session(&self, session: u64) -> bool {
        self.back_server().close(session)
    }

    /// The backchannel of the connection bound to `session` now.
    pub fn session_backchannel(&self, session: u64) -> Option<BackChannel> {
        let st = self.back_server().session(session)?;
        let cur = lock(&st.cur).clone()?;
        Some(BackChannel { inner: cur })
    }

    /// Fresh, empty arguments for a backward call, in a registered buffer of the server's
    /// endpoint pool (`None` when the pool is exhausted).
    pub fn back_args(&self) -> Option<CallArgs> {
        self.back_server().bufs.get().map(CallArgs::new)
    }
}
