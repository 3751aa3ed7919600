//! Endpoints and nodes: how RPC connections live on the reactors.
//!
//! Normal operation: an [`Endpoint`] binds a verbs device (one protection domain, one payload
//! [`BufPool`], optional worker threads) to a [`ReactorSet`]: it adds one node poller to every
//! reactor. A node owns ONE completion queue shared by all its QPs, a fixed table of connection
//! slots (`node::Slots`, each a `Box<dyn NodeConn>`: the node names no role), a [`Router`] from
//! QP number to slot, a per-core cache of the payload pool, its intake of connect requests
//! (`crate::accept`) and its links to the workers. One node poll: take control commands
//! (connections to place, connect requests handed over by the listening node, listeners), poll
//! listeners, poll the CQ in bursts of [`CQ_BURST`] and feed each completion to its connection,
//! take worker results, then give every connection one round (CM events, engine events →
//! callbacks / handlers, new calls, one doorbell per queue for everything it produced), accept
//! connect requests that waited for a slot, and push queued worker jobs. On a reactor that
//! sleeps when idle, completions (in-process notices), worker results, submissions and
//! connection events ring the reactor's doorbell; in interrupt mode the node also arms its CQ's
//! completion channel and drains the rdma_cm channel before the reactor sleeps on their
//! descriptors ([`Poller::arm_wakeups`]). Timers (connection
//! deadlines, reconnect back-off) are the reactor's timer wheel; tokens carry the slot and its
//! generation, so a timer of a connection that is gone finds nothing.
//!
//! Recovery: CQ and post errors are counted and end the affected connection (clients
//! reconnect). A completion whose QP is unknown (a flush after teardown) is counted as a stray
//! and ignored. Connect requests that find the node full wait for an evicted connection's slot
//! or are refused with a reason (`crate::accept`, policy in [`crate::server`]). Stopping
//! ([`Poller::shutdown`]): the intake closes its listeners and refuses waiting connect requests
//! (`ShuttingDown`), client connections stop taking new calls and drain, server connections
//! serve until their clients disconnect; the node reports drained when no connection and no
//! queued worker job is left, and the reactor's drain timeout bounds the wait. Whatever is
//! dropped then completes its callbacks with an error (see [`crate::client`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rpcrdma_engine::verbs::{Completion, CompletionQueue, Device, DeviceCaps, Listener, Provider};
use rpcrdma_mempool::{HugePagePolicy, Registrar};

use crate::accept::{Intake, Seat};
use crate::api_stats::{node_stats, NodeSnapshot, NodeStats};
use crate::config::{BackoffMode, EndpointConfig};
use crate::doorbell::Waker;
use crate::driver::Router;
use crate::memory::{BufPool, MemError};
use crate::mpsc::{self, MpscConsumer};
pub(crate) use crate::node::NodeCmd;
pub use crate::node::QpHook;
use crate::node::{rq_depth_for, send_to, sq_depth_for, NodeEnv, NodePeer, Round, Slots};
use crate::reactor::{Placement, Poller, PollerCtx, ReactorError, ReactorSet};
use crate::wait::WaitSet;
use crate::worker::{NodeLinks, Workers};

/// Completions taken from the CQ per poll call.
pub const CQ_BURST: usize = 32;
/// CQ polls per node poll at most (the rest waits for the next poll, so other pollers run).
const CQ_ROUNDS: usize = 4;
/// Control commands handled per node poll at most.
const CONTROL_BATCH: usize = 16;

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
                (worker_backoff.config(), cfg.worker_realtime),
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
                    teardowns_left: crate::node::TEARDOWNS_PER_POLL,
                    hugepages,
                    gens: vec![0; cfg.max_conns_per_reactor],
                    thread: Arc::clone(&peers[i].thread),
                    qp_hook: Arc::clone(&inner.qp_hook),
                    latency: Default::default(),
                    srq: None,
                    retired: Default::default(),
                },
                peers: Arc::clone(&peers),
                slots: Slots::new(cfg.max_conns_per_reactor),
                ctl: rx,
                intake: Intake::new(),
                links: links[i].take(),
                wcs: vec![Completion::default(); CQ_BURST].into_boxed_slice(),
                stopping: false,
                thread_set: false,
                cq_notifies: false,
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

    pub(crate) fn node_thread(&self, i: usize) -> Arc<OnceLock<Waker>> {
        Arc::clone(&self.inner.peers[i % self.nodes().max(1)].thread)
    }

    pub(crate) fn send(&self, node: usize, cmd: NodeCmd<P>) -> Result<(), NodeCmd<P>> {
        send_to(&self.inner.peers, node, cmd)
    }
}

/// One reactor's share of an endpoint (a [`Poller`]). See the module documentation.
struct Node<P: Provider> {
    env: NodeEnv<P>,
    slots: Slots<P>,
    ctl: MpscConsumer<NodeCmd<P>>,
    /// Connect requests: listeners, requests handed over, requests waiting for a slot.
    intake: Intake<P>,
    links: Option<NodeLinks>,
    wcs: Box<[Completion]>,
    stopping: bool,
    thread_set: bool,
    /// The CQ rings the reactor's doorbell itself (`CompletionQueue::set_notify`).
    cq_notifies: bool,
    /// Every node's control ring (connect requests are handed over to the next node).
    peers: Arc<Vec<NodePeer<P>>>,
}

impl<P: Provider> Node<P> {
    fn command(&mut self, cmd: NodeCmd<P>, cx: &mut PollerCtx<'_>) {
        match cmd {
            NodeCmd::Add(mut c) => {
                let Some(slot) = self.slots.take() else {
                    // No room: the connection is dropped, failing its calls.
                    self.env.stats.verbs_error();
                    return;
                };
                if self.stopping {
                    c.shutdown();
                }
                // No links: a connection's start completes nothing on a worker.
                c.start(&mut Round {
                    env: &mut self.env,
                    links: None,
                    cx,
                    slot,
                });
                self.slots.place(slot, c, &self.env);
            }
            NodeCmd::Accept { req, to } => {
                let mut seat = Seat {
                    env: &mut self.env,
                    slots: &mut self.slots,
                    peers: &self.peers,
                    stopping: self.stopping,
                };
                self.intake.accept(&mut seat, req, to);
            }
            NodeCmd::Listen { mut listener, to } => {
                // Connect requests wake this reactor when it sleeps.
                let w = cx.waker();
                listener.set_notify(Arc::new(move || w.wake()));
                self.intake.listen(listener, to, self.stopping)
            }
        }
    }

    /// The intake's view of this node.
    fn seat(&mut self) -> (&mut Intake<P>, Seat<'_, P>) {
        (
            &mut self.intake,
            Seat {
                env: &mut self.env,
                slots: &mut self.slots,
                peers: &self.peers,
                stopping: self.stopping,
            },
        )
    }

    /// Polls the CQ (at most `CQ_ROUNDS` batches) and feeds each completion to its connection;
    /// when the CQ was left empty, the QPs retired before this poll are destroyed.
    fn poll_cq(&mut self) -> usize {
        let mut total = 0;
        let mut drained = false;
        for _ in 0..CQ_ROUNDS {
            let n = match self.env.cq.poll(&mut self.wcs) {
                Ok(n) => n,
                Err(_) => {
                    self.env.stats.verbs_error();
                    break;
                }
            };
            if n == 0 {
                drained = true;
                break;
            }
            self.env.stats.completions(n as u64);
            total += n;
            let now = self.env.now;
            for wc in &self.wcs[..n] {
                self.env.stats.wc_status(wc.status);
                let srq_recv = crate::srq::consumed(&mut self.env.srq, wc);
                let Some(slot) = self.env.router.get(wc.qp_num) else {
                    self.env.stats.stray();
                    crate::srq::stray(&mut self.env.srq, wc, srq_recv);
                    continue;
                };
                match self.slots.get_mut(slot) {
                    Some(c) => {
                        c.feed(now, wc);
                        if srq_recv {
                            c.collect_shared_recvs(&mut self.env);
                        }
                    }
                    None => {
                        self.env.stats.stray();
                        crate::srq::stray(&mut self.env.srq, wc, srq_recv);
                    }
                }
            }
            if n < self.wcs.len() {
                drained = true;
                break;
            }
        }
        if drained {
            self.env.retired.cq_drained();
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
            if let Some(c) = slots.get_mut(slot) {
                c.on_served(env, s);
            }
        })
    }
}

impl<P: Provider> Poller for Node<P> {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        if !self.thread_set {
            self.thread_set = true;
            let _ = self.env.thread.set(cx.waker());
            // A reactor that may sleep: completions and worker results ring its doorbell.
            if let Some(b) = cx.doorbell() {
                let bell = Arc::clone(b);
                self.cq_notifies = self.env.cq.set_notify(Arc::new(move || bell.ring()));
                if let Some(l) = self.links.as_ref() {
                    l.set_node_bell(b);
                }
            }
        }
        self.env.now = now;
        self.env.teardowns_left = crate::node::TEARDOWNS_PER_POLL;
        let mut work = 0;
        for _ in 0..CONTROL_BATCH {
            let Some(cmd) = self.ctl.dequeue() else { break };
            self.command(cmd, cx);
            work += 1;
        }
        if self.intake.is_listening() {
            let (intake, mut seat) = self.seat();
            work += intake.poll_listeners(&mut seat);
        }
        work += self.poll_cq();
        work += self.worker_results();
        for i in 0..self.slots.len() {
            let slot = i as u32;
            let Some(c) = self.slots.get_mut(slot) else {
                continue;
            };
            work += c.service(&mut Round {
                env: &mut self.env,
                links: self.links.as_mut(),
                cx,
                slot,
            });
            if c.is_done() {
                self.slots.release(slot, &mut self.env);
            }
        }
        if self.intake.has_deferred() {
            let (intake, mut seat) = self.seat();
            work += intake.run_deferred(&mut seat);
        }
        if let Some(l) = self.links.as_mut() {
            work += l.flush();
            let (used, over) = l.occupancy();
            self.env.stats.set_worker(used as u64, over as u64);
        }
        self.env.latency.serve();
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
        if let Some(c) = self.slots.get_mut(slot) {
            let mut r = Round {
                env: &mut self.env,
                links: self.links.as_mut(),
                cx,
                slot,
            };
            c.on_timer(kind, &mut r);
        }
    }

    fn shutdown(&mut self, _now: u64) {
        self.stopping = true;
        self.intake.shutdown(&mut self.env);
        for c in self.slots.iter_mut() {
            c.shutdown();
        }
    }

    fn is_drained(&self) -> bool {
        self.slots.live() == 0 && self.links.as_ref().map_or(true, |l| !l.congested())
    }

    fn arm_wakeups(&mut self, fds: &mut WaitSet) -> bool {
        // The CQ's completion channel (a provider without one rings the doorbell instead:
        // `set_notify` above, set when the reactor has a doorbell).
        let cq = match self.env.cq.wait_fd() {
            Some(fd) => match self.env.cq.arm_notify() {
                Ok(armed) => {
                    fds.add(fd);
                    armed
                }
                // Not armed: the sleep's bound covers the CQ.
                Err(_) => {
                    self.env.stats.verbs_error();
                    false
                }
            },
            None => self.cq_notifies,
        };
        // Connection events: take what is pending (queued events ring their owners), then
        // sleep on the channel too. Without such a channel (the soft provider) they are only
        // seen by polling.
        let cm = match self.env.dev.cm_wait_fd() {
            Some(fd) => match self.env.dev.poll_cm_events() {
                Ok(()) => {
                    fds.add(fd);
                    true
                }
                Err(_) => {
                    self.env.stats.verbs_error();
                    false
                }
            },
            None => false,
        };
        // Connect requests waiting for a slot, and draining, are driven by polling.
        cq && cm && !self.intake.has_deferred() && !self.stopping
    }
}

impl<P: Provider> Drop for Node<P> {
    fn drop(&mut self) {
        // Connections first (their QPs reference the CQ and the SRQ), then the SRQ (verbs
        // refuse to destroy an SRQ while a QP is attached: EBUSY), then the rest.
        self.slots.clear();
        self.env.srq = None;
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
