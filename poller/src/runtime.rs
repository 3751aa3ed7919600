//! Endpoints and nodes: how RPC connections live on the reactors.
//!
//! Normal operation: an [`Endpoint`] binds a verbs device (one protection domain, one payload
//! [`BufPool`], optional worker threads) to a [`ReactorSet`]: it adds one node poller to every
//! reactor. A node owns ONE completion queue shared by all its QPs, a fixed table of connection
//! slots, a [`Router`] from QP number to slot, a per-core cache of the payload pool and its
//! links to the workers. One node poll: take control commands (new client connections, accept
//! requests handed over by the listening node, listeners), poll listeners, poll the CQ in bursts
//! of [`CQ_BURST`] and feed each completion to its connection, take worker results, then give
//! every connection one round (CM events, engine events → callbacks / handlers, new calls,
//! one doorbell per queue for everything it produced) and push queued worker jobs. Timers
//! (connection deadlines, reconnect back-off) are the reactor's timer wheel; tokens carry the
//! slot and its generation, so a timer of a connection that is gone finds nothing.
//!
//! Recovery: CQ and post errors are counted and end the affected connection (clients
//! reconnect). A completion whose QP is unknown (a flush after teardown) is counted as a stray
//! and ignored. A connect request that finds the node's slots full waits (at most `DEFER_NS`)
//! for the slot of an idle connection evicted for it, or is rejected with a reason (see
//! [`crate::server`]). Stopping ([`Poller::shutdown`]): listeners close, waiting connect
//! requests are rejected (`ShuttingDown`), client connections stop
//! taking new calls and drain, server connections serve until their clients disconnect; the
//! node reports drained when no connection and no queued worker job is left, and the reactor's
//! drain timeout bounds the wait. Whatever is dropped then completes its callbacks with an
//! error (see [`crate::client`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;

use rpcrdma_engine::proto::reject::RejectReason;
use rpcrdma_engine::verbs::{
    Completion, CompletionQueue, ConnRequest, Device, DeviceCaps, Listener, Provider,
};
use rpcrdma_mempool::{HugePagePolicy, Registrar};

use crate::admission::PeerSlot;
use crate::api_stats::{node_stats, NodeSnapshot, NodeStats};
use crate::client_conn::ClientConn;
use crate::config::{BackoffMode, EndpointConfig};
use crate::driver::Router;
use crate::memory::{BufPool, MemError};
use crate::mpsc::{self, MpscConsumer, MpscProducer};
pub use crate::node::QpHook;
use crate::node::{rq_depth_for, sq_depth_for, NodeConn, NodeEnv};
use crate::reactor::{Placement, Poller, PollerCtx, ReactorError, ReactorSet};
use crate::server_conn::{ServerConn, ServerShared};
use crate::worker::{NodeLinks, Served, Workers};

/// Completions taken from the CQ per poll call.
pub const CQ_BURST: usize = 32;
/// CQ polls per node poll at most (the rest waits for the next poll, so other pollers run).
const CQ_ROUNDS: usize = 4;
/// Control commands handled per node poll at most.
const CONTROL_BATCH: usize = 16;
/// How long a connect request waits for the slot of a connection evicted for it (ns). The
/// slot is normally free within a poll or two; the request is rejected (`ServerFull`) after.
const DEFER_NS: u64 = 2_000_000_000;

/// Why an endpoint could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointError {
    /// Verbs setup failed (PD, CQ).
    Verbs(String),
    /// Memory setup failed.
    Memory(MemError),
    /// A setting is out of range.
    BadConfig(&'static str),
    /// Adding pollers to the reactors failed.
    Reactor(ReactorError),
}

impl core::fmt::Display for EndpointError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EndpointError::Verbs(m) => write!(f, "verbs: {m}"),
            EndpointError::Memory(e) => write!(f, "memory: {e}"),
            EndpointError::BadConfig(w) => write!(f, "bad endpoint configuration: {w}"),
            EndpointError::Reactor(e) => write!(f, "reactor: {e}"),
        }
    }
}

impl std::error::Error for EndpointError {}

/// Commands to a node.
pub(crate) enum NodeCmd<P: Provider> {
    /// Place and connect a client connection.
    AddClient(Box<ClientConn<P>>),
    /// Accept a connect request for a server.
    Accept {
        req: P::ConnRequest,
        server: Arc<ServerShared>,
    },
    /// Poll a listener.
    Listen {
        listener: P::Listener,
        server: Arc<ServerShared>,
    },
}

/// What other threads hold of a node.
pub(crate) struct NodePeer<P: Provider> {
    ctl: MpscProducer<NodeCmd<P>>,
    thread: Arc<OnceLock<Thread>>,
    stats: NodeStats,
}

struct EndpointInner<P: Provider> {
    dev: Arc<P::Device>,
    pd: Arc<P::Pd>,
    bufs: BufPool,
    replies: BufPool,
    cfg: EndpointConfig,
    peers: Arc<Vec<NodePeer<P>>>,
    next: AtomicUsize,
    hugepages: HugePagePolicy,
    workers: Mutex<Option<Workers>>,
    qp_hook: Arc<OnceLock<QpHook<P>>>,
}

/// A verbs device bound to a reactor set: one node (CQ + connections) per reactor. Cheap to
/// clone. Stop the reactor set before dropping the last clone (the workers stop with it).
pub struct Endpoint<P: Provider> {
    inner: Arc<EndpointInner<P>>,
}

impl<P: Provider> Clone for Endpoint<P> {
    fn clone(&self) -> Self {
        Endpoint {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<P: Provider> core::fmt::Debug for Endpoint<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &P::NAME)
            .field("nodes", &self.inner.peers.len())
            .finish()
    }
}

impl<P: Provider> Endpoint<P> {
    /// Binds `dev` to every reactor of `set` (one node poller each) with `cfg`.
    pub fn new(
        set: &ReactorSet,
        dev: P::Device,
        cfg: EndpointConfig,
    ) -> Result<Endpoint<P>, EndpointError> {
        Self::with_backoff(set, dev, cfg, BackoffMode::SharedCores)
    }

    /// As [`Endpoint::new`], with the workers' idle back-off given.
    pub fn with_backoff(
        set: &ReactorSet,
        dev: P::Device,
        cfg: EndpointConfig,
        worker_backoff: BackoffMode,
    ) -> Result<Endpoint<P>, EndpointError> {
        let n = set.len();
        check_endpoint_config(n, &cfg)?;
        let hugepages = if cfg.hugepages {
            HugePagePolicy::Prefer
        } else {
            HugePagePolicy::Never
        };
        let pd = Arc::new(
            dev.alloc_pd()
                .map_err(|e| EndpointError::Verbs(e.to_string()))?,
        );
        let (bufs, replies) = register_pools(&*pd, dev.caps(), &cfg, hugepages)?;
        let dev = Arc::new(dev);
        let per_conn = sq_depth_for(cfg.max_credits) + rq_depth_for(cfg.max_credits);
        // Every QP's queues, twice: completions of a torn-down QP may still sit in the CQ
        // while a new connection already uses its slot.
        let cq_depth = (2 * cfg.max_conns_per_reactor as u64 * u64::from(per_conn))
            .min(u64::from(dev.caps().max_cqe)) as u32;
        let mut consumers = Vec::with_capacity(n);
        let mut peers = Vec::with_capacity(n);
        let mut writers = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = mpsc::channel::<NodeCmd<P>>(256)
                .map_err(|_| EndpointError::BadConfig("control ring"))?;
            let (w, r) = node_stats();
            consumers.push(rx);
            writers.push(w);
            peers.push(NodePeer {
                ctl: tx,
                thread: Arc::new(OnceLock::new()),
                stats: r,
            });
        }
        let threads: Vec<_> = peers.iter().map(|p| Arc::clone(&p.thread)).collect();
        let slots_per_node = cfg.max_conns_per_reactor * 2 * cfg.max_credits as usize;
        let (workers, mut links) = if cfg.workers > 0 {
            let ring = cfg.worker_ring.clamp(2, 1 << 20).next_power_of_two();
            let (w, l) = Workers::start(
                cfg.workers,
                n,
                ring,
                slots_per_node.max(ring),
                worker_backoff.config(),
                &threads,
                "rpc",
            )
            .map_err(|_| EndpointError::BadConfig("workers"))?;
            (Some(w), l.into_iter().map(Some).collect::<Vec<_>>())
        } else {
            (None, (0..n).map(|_| None).collect())
        };
        let peers = Arc::new(peers);
        let inner = Arc::new(EndpointInner {
            dev,
            pd,
            bufs,
            replies,
            cfg: cfg.clone(),
            peers: Arc::clone(&peers),
            next: AtomicUsize::new(0),
            hugepages,
            workers: Mutex::new(workers),
            qp_hook: Arc::new(OnceLock::new()),
        });
        for (i, (rx, w)) in consumers.into_iter().zip(writers).enumerate() {
            let cq = inner
                .dev
                .create_cq(cq_depth.max(64))
                .map_err(|e| EndpointError::Verbs(e.to_string()))?;
            let cache = inner
                .replies
                .pool()
                .cache()
                .map_err(|e| EndpointError::Memory(MemError::Pool(e.to_string())))?;
            let node = Node {
                env: NodeEnv {
                    index: i,
                    dev: Arc::clone(&inner.dev),
                    pd: Arc::clone(&inner.pd),
                    cq,
                    bufs: inner.bufs.clone(),
                    replies: inner.replies.clone(),
                    cache,
                    router: Router::new(cfg.max_conns_per_reactor),
                    stats: w,
                    now: 0,
                    hugepages,
                    gens: vec![0; cfg.max_conns_per_reactor],
                    thread: Arc::clone(&peers[i].thread),
                    qp_hook: Arc::clone(&inner.qp_hook),
                    srq: None,
                },
                peers: Arc::clone(&peers),
                slots: (0..cfg.max_conns_per_reactor).map(|_| None).collect(),
                free: (0..cfg.max_conns_per_reactor as u32).rev().collect(),
                ctl: rx,
                listeners: Vec::new(),
                links: links[i].take(),
                wcs: vec![Completion::default(); CQ_BURST].into_boxed_slice(),
                stopping: false,
                thread_set: false,
                live: 0,
                deferred: VecDeque::new(),
                evicting: 0,
            };
            set.add_poller(Placement::Reactor(i), Box::new(node))
                .map_err(EndpointError::Reactor)?;
        }
        Ok(Endpoint { inner })
    }

    /// The payload buffer pool (arguments, replies, DDP items).
    pub fn buffers(&self) -> &BufPool {
        &self.inner.bufs
    }

    /// The pool replies are received into (client) or built in (server); separate from
    /// [`Endpoint::buffers`] so calls waiting with their arguments can never starve replies.
    pub fn reply_buffers(&self) -> &BufPool {
        &self.inner.replies
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.inner.cfg
    }

    /// The device.
    pub fn device(&self) -> &P::Device {
        &self.inner.dev
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<P::Pd> {
        &self.inner.pd
    }

    /// Nodes (= reactors).
    pub fn nodes(&self) -> usize {
        self.inner.peers.len()
    }

    /// Counters of node `i`.
    pub fn node_stats(&self, i: usize) -> Option<NodeSnapshot> {
        self.inner.peers.get(i).map(|p| p.stats.snapshot())
    }

    /// A reader of node `i`'s counters.
    pub fn node_stats_reader(&self, i: usize) -> Option<NodeStats> {
        self.inner.peers.get(i).map(|p| p.stats.clone())
    }

    /// Installs the QP hook (once; later calls return `false`). It sees QPs created after
    /// this call.
    pub fn set_qp_hook(&self, hook: QpHook<P>) -> bool {
        self.inner.qp_hook.set(hook).is_ok()
    }

    /// Stops the worker threads (after the reactors have stopped). Idempotent.
    pub fn stop_workers(&self) {
        if let Some(mut w) = self
            .inner
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            w.stop();
        }
    }

    pub(crate) fn hugepages(&self) -> HugePagePolicy {
        self.inner.hugepages
    }

    pub(crate) fn sq_depth(&self, credits: u32) -> u32 {
        sq_depth_for(credits)
    }

    pub(crate) fn rq_depth(&self, credits: u32) -> u32 {
        rq_depth_for(credits)
    }

    pub(crate) fn pick(&self, reactor: Option<usize>) -> usize {
        let n = self.nodes().max(1);
        match reactor {
            Some(i) => i % n,
            // Relaxed: a turn counter only.
            None => self.inner.next.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    pub(crate) fn node_thread(&self, i: usize) -> Arc<OnceLock<Thread>> {
        Arc::clone(&self.inner.peers[i % self.nodes().max(1)].thread)
    }

    pub(crate) fn send(&self, node: usize, cmd: NodeCmd<P>) -> Result<(), NodeCmd<P>> {
        send_to(&self.inner.peers, node, cmd)
    }
}

fn send_to<P: Provider>(
    peers: &[NodePeer<P>],
    node: usize,
    cmd: NodeCmd<P>,
) -> Result<(), NodeCmd<P>> {
    let Some(p) = peers.get(node) else {
        return Err(cmd);
    };
    let mut cmd = cmd;
    // The control ring is drained every poll; wait (yielding) briefly if it is full.
    for _ in 0..10_000 {
        match p.ctl.enqueue(cmd) {
            Ok(()) => {
                if let Some(t) = p.thread.get() {
                    t.unpark();
                }
                return Ok(());
            }
            Err(c) => {
                cmd = c;
                std::thread::yield_now();
            }
        }
    }
    Err(cmd)
}

/// A node's connection: the one place that names the roles.
enum Conn<P: Provider> {
    Client(Box<ClientConn<P>>),
    Server(Box<ServerConn<P>>),
}

impl<P: Provider> NodeConn<P> for Conn<P> {
    #[inline]
    fn feed(&mut self, now: u64, wc: &Completion) {
        match self {
            Conn::Client(c) => c.feed(now, wc),
            Conn::Server(s) => s.feed(now, wc),
        }
    }

    fn on_served(&mut self, env: &mut NodeEnv<P>, s: Served) {
        match self {
            Conn::Client(c) => c.on_served(env, s),
            Conn::Server(c) => c.on_served(env, s),
        }
    }

    #[inline]
    fn service(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
    ) -> usize {
        match self {
            Conn::Client(c) => c.service(env, links, cx, slot),
            Conn::Server(s) => s.service(env, links, cx, slot),
        }
    }

    #[inline]
    fn is_done(&self) -> bool {
        match self {
            Conn::Client(c) => c.is_done(),
            Conn::Server(s) => s.is_done(),
        }
    }

    fn on_timer(
        &mut self,
        kind: u8,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
    ) {
        match self {
            Conn::Client(c) => c.on_timer(kind, env, links, cx, slot),
            Conn::Server(s) => s.on_timer(kind, env, links, cx, slot),
        }
    }

    fn shutdown(&mut self) {
        match self {
            Conn::Client(c) => c.shutdown(),
            Conn::Server(s) => s.shutdown(),
        }
    }

    fn evictable(&self, now: u64) -> Option<u64> {
        match self {
            Conn::Client(c) => c.evictable(now),
            Conn::Server(s) => s.evictable(now),
        }
    }

    fn evict(&mut self) {
        match self {
            Conn::Client(c) => c.evict(),
            Conn::Server(s) => s.evict(),
        }
    }

    fn was_evicted(&self) -> bool {
        match self {
            Conn::Client(c) => c.was_evicted(),
            Conn::Server(s) => s.was_evicted(),
        }
    }
}

/// A connect request waiting for the slot of a connection evicted for it.
struct Deferred<P: Provider> {
    req: P::ConnRequest,
    server: Arc<ServerShared>,
    peer: PeerSlot,
    /// Rejected (`ServerFull`) when still waiting at this time (ns).
    until: u64,
}

/// One reactor's share of an endpoint (a [`Poller`]). See the module documentation.
struct Node<P: Provider> {
    env: NodeEnv<P>,
    slots: Vec<Option<Conn<P>>>,
    free: Vec<u32>,
    ctl: MpscConsumer<NodeCmd<P>>,
    listeners: Vec<(P::Listener, Arc<ServerShared>)>,
    links: Option<NodeLinks>,
    wcs: Box<[Completion]>,
    stopping: bool,
    thread_set: bool,
    /// Every node's control ring (connect requests are handed over to the next node).
    peers: Arc<Vec<NodePeer<P>>>,
    live: usize,
    /// Connect requests waiting for the slots of evicted connections, oldest first.
    deferred: VecDeque<Deferred<P>>,
    /// Evicted connections whose slots are not free yet (each promised to a request).
    evicting: usize,
}

impl<P: Provider> Node<P> {
    fn take_slot(&mut self) -> Option<u32> {
        self.free.pop()
    }

    fn release_slot(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            let evicted = s.as_ref().is_some_and(|c| c.was_evicted());
            if s.take().is_some() {
                self.live -= 1;
                if evicted {
                    self.evicting = self.evicting.saturating_sub(1);
                }
                if let Some(g) = self.env.gens.get_mut(slot as usize) {
                    *g = g.wrapping_add(1);
                }
                self.free.push(slot);
            }
        }
        self.env.stats.set_connections(self.live as u64);
    }

    fn command(&mut self, cmd: NodeCmd<P>, cx: &mut PollerCtx<'_>) {
        match cmd {
            NodeCmd::AddClient(mut c) => {
                let Some(slot) = self.take_slot() else {
                    // No room: the connection is dropped, failing its calls (see ClientConn).
                    self.env.stats.verbs_error();
                    return;
                };
                if self.stopping {
                    c.shutdown();
                }
                c.start(&mut self.env, cx, slot);
                self.slots[slot as usize] = Some(Conn::Client(c));
                self.live += 1;
                self.env.stats.set_connections(self.live as u64);
            }
            NodeCmd::Accept { req, server } => self.accept(req, server),
            NodeCmd::Listen { listener, server } => {
                if self.stopping {
                    return;
                }
                self.listeners.push((listener, server));
            }
        }
    }

    /// Admission of a connect request: the peer's limit, then a free slot, else the slot of
    /// the connection idle the longest (evicted for it, the request waits for its slot), else
    /// a reject with the reason (`crate::server` documents the policy).
    fn accept(&mut self, req: P::ConnRequest, server: Arc<ServerShared>) {
        if self.stopping || server.is_stopping() {
            self.refuse(req, &server, RejectReason::ShuttingDown);
            return;
        }
        let Some(peer) = server.peers.admit(req.peer_addr().ip()) else {
            self.refuse(req, &server, RejectReason::PeerLimit);
            return;
        };
        // Requests already waiting go first.
        self.run_deferred();
        if self.deferred.is_empty() {
            if let Some(slot) = self.take_slot() {
                self.accept_in(slot, req, server, peer);
                return;
            }
        }
        // Full: take a slot an evicted connection is giving back, or evict one more.
        if self.deferred.len() < self.evicting || self.evict_idlest() {
            let until = self.env.now.saturating_add(DEFER_NS);
            self.deferred.push_back(Deferred {
                req,
                server,
                peer,
                until,
            });
        } else {
            drop(peer);
            self.refuse(req, &server, RejectReason::ServerFull);
        }
    }

    /// Accepts `req` in the free slot `slot`.
    fn accept_in(
        &mut self,
        slot: u32,
        req: P::ConnRequest,
        server: Arc<ServerShared>,
        peer: PeerSlot,
    ) {
        match ServerConn::accept(&mut self.env, req, Arc::clone(&server), slot, peer) {
            Ok(c) => {
                self.slots[slot as usize] = Some(Conn::Server(Box::new(c)));
                self.live += 1;
                self.env.stats.set_connections(self.live as u64);
            }
            Err(req) => {
                self.env.stats.verbs_error();
                self.free.push(slot);
                if let Some(req) = req {
                    self.refuse(req, &server, RejectReason::NoResources);
                }
            }
        }
    }

    /// Rejects `req`, telling the requester why (`rpcrdma_engine::proto::reject`), and counts it.
    fn refuse(&mut self, req: P::ConnRequest, server: &ServerShared, reason: RejectReason) {
        server.count_reject();
        self.env.stats.rejected(reason);
        if req.reject(&reason.encode()).is_err() {
            self.env.stats.verbs_error();
        }
    }

    /// Marks the server connection idle the longest (at least its server's eviction grace)
    /// for eviction; `false` when there is none.
    fn evict_idlest(&mut self) -> bool {
        let now = self.env.now;
        let mut best: Option<(usize, u64)> = None;
        for (i, c) in self.slots.iter().enumerate() {
            if let Some(s) = c {
                if let Some(idle) = s.evictable(now) {
                    if best.map_or(true, |(_, b)| idle > b) {
                        best = Some((i, idle));
                    }
                }
            }
        }
        match best.and_then(|(i, _)| self.slots.get_mut(i)) {
            Some(Some(s)) => {
                s.evict();
                self.evicting += 1;
                true
            }
            _ => false,
        }
    }

    /// Accepts waiting connect requests into free slots, oldest first; rejects those that
    /// waited too long.
    fn run_deferred(&mut self) -> usize {
        let mut work = 0;
        while let Some(d) = self.deferred.front() {
            if d.until <= self.env.now {
                if let Some(d) = self.deferred.pop_front() {
                    drop(d.peer);
                    self.refuse(d.req, &d.server, RejectReason::ServerFull);
                }
                work += 1;
                continue;
            }
            let Some(slot) = self.take_slot() else { break };
            if let Some(d) = self.deferred.pop_front() {
                self.accept_in(slot, d.req, d.server, d.peer);
                work += 1;
            }
        }
        work
    }

    fn poll_listeners(&mut self) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.listeners.len() {
            if self.stopping || self.listeners[i].1.is_stopping() {
                self.listeners.swap_remove(i);
                work += 1;
                continue;
            }
            loop {
                let req = match self.listeners[i].0.poll() {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(_) => {
                        self.env.stats.verbs_error();
                        break;
                    }
                };
                work += 1;
                let server = Arc::clone(&self.listeners[i].1);
                let n = self.peers.len().max(1);
                // Relaxed: a turn counter only.
                let target = server.next.fetch_add(1, Ordering::Relaxed) % n;
                if target == self.env.index {
                    self.accept(req, server);
                } else {
                    let peers = Arc::clone(&self.peers);
                    if let Err(NodeCmd::Accept { req, server }) =
                        send_to(&peers, target, NodeCmd::Accept { req, server })
                    {
                        self.accept(req, server);
                    }
                }
            }
            i += 1;
        }
        work
    }

    fn poll_cq(&mut self) -> usize {
        let mut total = 0;
        for _ in 0..CQ_ROUNDS {
            let n = match self.env.cq.poll(&mut self.wcs) {
                Ok(n) => n,
                Err(_) => {
                    self.env.stats.verbs_error();
                    break;
                }
            };
            if n == 0 {
                break;
            }
            self.env.stats.completions(n as u64);
            total += n;
            let now = self.env.now;
            for wc in &self.wcs[..n] {
                let srq_recv = crate::srq::consumed(&mut self.env.srq, wc);
                let Some(slot) = self.env.router.get(wc.qp_num) else {
                    self.env.stats.stray();
                    crate::srq::stray(&mut self.env.srq, wc, srq_recv);
                    continue;
                };
                match self.slots.get_mut(slot as usize) {
                    Some(Some(c)) => {
                        c.feed(now, wc);
                        if let (true, Conn::Server(s)) = (srq_recv, c) {
                            crate::srq::ConnSrq::collect(&mut self.env, s.drv.conn.as_mut());
                        }
                    }
                    _ => {
                        self.env.stats.stray();
                        crate::srq::stray(&mut self.env.srq, wc, srq_recv);
                    }
                }
            }
            if n < self.wcs.len() {
                break;
            }
        }
        total
    }

    fn worker_results(&mut self) -> usize {
        let Some(links) = self.links.as_mut() else {
            return 0;
        };
        let slots = &mut self.slots;
        let env = &mut self.env;
        links.results(|s| {
            let slot = (s.token >> 32) as u32;
            let gen = s.token as u32;
            if env.slot_gen(slot) != gen {
                return; // the connection is gone; buffers return to the pool here
            }
            if let Some(Some(c)) = slots.get_mut(slot as usize) {
                c.on_served(env, s);
            }
        })
    }
}

impl<P: Provider> Poller for Node<P> {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        if !self.thread_set {
            self.thread_set = true;
            let _ = self.env.thread.set(std::thread::current());
        }
        self.env.now = now;
        let mut work = 0;
        for _ in 0..CONTROL_BATCH {
            let Some(cmd) = self.ctl.dequeue() else { break };
            self.command(cmd, cx);
            work += 1;
        }
        if !self.listeners.is_empty() {
            work += self.poll_listeners();
        }
        work += self.poll_cq();
        work += self.worker_results();
        for i in 0..self.slots.len() {
            let slot = i as u32;
            let Some(c) = self.slots[i].as_mut() else {
                continue;
            };
            work += c.service(&mut self.env, self.links.as_mut(), cx, slot);
            let done = c.is_done();
            if done {
                self.release_slot(slot);
            }
        }
        if !self.deferred.is_empty() {
            work += self.run_deferred();
        }
        if let Some(l) = self.links.as_mut() {
            work += l.flush();
            let (used, over) = l.occupancy();
            self.env.stats.set_worker(used as u64, over as u64);
        }
        self.env.stats.poll(work > 0);
        work
    }

    fn on_timer(&mut self, token: u64, cx: &mut PollerCtx<'_>) {
        let kind = (token >> 56) as u8;
        let slot = ((token >> 32) & 0xff_ffff) as u32;
        let gen = token as u32;
        if self.env.slot_gen(slot) != gen {
            return;
        }
        self.env.now = cx.now();
        if let Some(Some(c)) = self.slots.get_mut(slot as usize) {
            c.on_timer(kind, &mut self.env, self.links.as_mut(), cx, slot);
        }
    }

    fn shutdown(&mut self, _now: u64) {
        self.stopping = true;
        self.listeners.clear();
        while let Some(d) = self.deferred.pop_front() {
            drop(d.peer);
            self.refuse(d.req, &d.server, RejectReason::ShuttingDown);
        }
        for c in self.slots.iter_mut().flatten() {
            c.shutdown();
        }
    }

    fn is_drained(&self) -> bool {
        self.live == 0 && self.links.as_ref().map_or(true, |l| !l.congested())
    }
}

impl<P: Provider> Drop for Node<P> {
    fn drop(&mut self) {
        // Connections first (their QPs reference the CQ), then the rest.
        for s in self.slots.iter_mut() {
            drop(s.take());
        }
    }
}

/// Refuses endpoint configurations that cannot work (`n` reactors).
fn check_endpoint_config(n: usize, cfg: &EndpointConfig) -> Result<(), EndpointError> {
    if n == 0 {
        return Err(EndpointError::BadConfig("no reactors"));
    }
    if cfg.max_conns_per_reactor == 0 || cfg.max_conns_per_reactor > 1 << 16 {
        return Err(EndpointError::BadConfig("max_conns_per_reactor"));
    }
    if cfg.max_credits == 0 || cfg.max_credits > 1024 {
        return Err(EndpointError::BadConfig("max_credits"));
    }
    if cfg.buffer_size < 64 {
        return Err(EndpointError::BadConfig("buffer_size"));
    }
    Ok(())
}

/// Registers the endpoint's payload and reply pools. No remote rights on the pools' own
/// registrations (a serving endpoint exposes nothing); a client exposes chunks through windows
/// bound over them, or — opted in, on a device without windows — through a second, remote
/// registration (`memory::Exposure`).
fn register_pools<R: Registrar>(
    pd: &R,
    caps: &DeviceCaps,
    cfg: &EndpointConfig,
    hugepages: HugePagePolicy,
) -> Result<(BufPool, BufPool), EndpointError> {
    let access = crate::memory::pool_access(caps);
    let expose = crate::memory::persistent_exposure(caps, cfg.persistent_stags);
    let remote = |a| expose.then_some(a);
    let bufs = BufPool::new(
        pd,
        cfg.buffers,
        cfg.buffer_size,
        hugepages,
        access,
        remote(crate::memory::PAYLOAD_REMOTE),
    )
    .map_err(EndpointError::Memory)?;
    let reply_size = if cfg.reply_buffer_size == 0 {
        cfg.buffer_size
    } else {
        cfg.reply_buffer_size.max(64)
    };
    let replies = BufPool::new(
        pd,
        cfg.reply_buffers,
        reply_size,
        hugepages,
        access,
        remote(crate::memory::REPLY_REMOTE),
    )
    .map_err(EndpointError::Memory)?;
    Ok((bufs, replies))
}
