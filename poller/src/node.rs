//! What a node gives the connections in its slots, and what it drives them through: the
//! node environment ([`NodeEnv`]: device, CQ, pools, router, counters, clock), timer and worker
//! job tokens (kind, slot, slot generation), queue depths for a credit count, the
//! [`NodeConn`] interface the node's loop calls (each call with a [`Round`]: environment, worker
//! links, timers, slot), the slot table ([`Slots`]), the commands a
//! node takes from other threads ([`NodeCmd`]) and the [`Acceptor`] a listener's connect
//! requests are accepted for. Nothing here (and nothing in `crate::runtime`) names a role:
//! client and server connections are `Box<dyn NodeConn>`, a server is an `Arc<dyn Acceptor>`.
//!
//! Normal operation: the node (`crate::runtime`) feeds each completion to the connection its QP
//! routes to (one indirect call) and gives every connection one round per poll. Recovery:
//! tokens carry the slot's generation, so a timer or worker result of a connection that is gone
//! finds nothing (the node compares [`NodeEnv::slot_gen`]); a command that finds another node's
//! control ring full is retried (yielding) a bounded number of times, then handed back.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use rpcrdma_engine::conn;
use rpcrdma_engine::proto::reject::RejectReason;
use rpcrdma_engine::verbs::{Completion, Provider, QpInit, QpOptions};
use rpcrdma_mempool::{HugePagePolicy, PoolCache};

use crate::admission::PeerSlot;
use crate::api_stats::{NodeStats, NodeStatsWriter};
use crate::driver::Router;
use crate::memory::BufPool;
use crate::mpsc::MpscProducer;
use crate::reactor::PollerCtx;
use crate::worker::{NodeLinks, Served};

pub(crate) const TIMER_CONN: u8 = 1;
pub(crate) const TIMER_RECONNECT: u8 = 2;
/// A server connection's earliest backward-call deadline.
pub(crate) const TIMER_BACK: u8 = 3;
/// The end of a lost server connection's session grace period.
pub(crate) const TIMER_GRACE: u8 = 4;

/// A timer token: kind, slot, slot generation.
#[inline]
pub(crate) fn timer_token(kind: u8, slot: u32, gen: u32) -> u64 {
    (u64::from(kind) << 56) | ((u64::from(slot) & 0xff_ffff) << 32) | u64::from(gen)
}

/// A worker job token: slot and generation.
#[inline]
pub(crate) fn job_token(slot: u32, gen: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(gen)
}

/// A function called with every QP a node creates (connect) or accepts, on the reactor
/// thread, before it is used: for tracing and fault injection in tests.
pub type QpHook<P> = Box<dyn Fn(&<P as Provider>::Qp) + Send + Sync>;

/// Send queue depth for `credits` (binds, Send and invalidations of every call; replies'
/// Writes).
pub(crate) fn sq_depth_for(credits: u32) -> u32 {
    (credits * 8).clamp(64, 4096)
}

/// Receive queue depth for `credits` (server: credits + call slots).
pub(crate) fn rq_depth_for(credits: u32) -> u32 {
    (credits * 3).clamp(16, 4096)
}

/// What a node's connections use while being served.
/// Server connections a node tears down per poll (see `NodeEnv::teardowns_left`); the others
/// wait, lost, for the next poll.
pub(crate) const TEARDOWNS_PER_POLL: u32 = 8;

pub(crate) struct NodeEnv<P: Provider> {
    pub index: usize,
    pub dev: Arc<P::Device>,
    pub pd: Arc<P::Pd>,
    pub cq: P::Cq,
    pub bufs: BufPool,
    /// The reply pool (the node's cache is in front of it).
    pub replies: BufPool,
    pub cache: PoolCache,
    pub router: Router,
    pub stats: NodeStatsWriter,
    pub now: u64,
    /// Server connections this poll may still tear down (reset to [`TEARDOWNS_PER_POLL`]
    /// every poll): a storm of disconnects is spread over polls, between which the
    /// established connections are served.
    pub teardowns_left: u32,
    pub hugepages: HugePagePolicy,
    /// Generation of each slot (bumped when the slot is released).
    pub gens: Vec<u32>,
    /// This node's reactor thread (set once it has polled).
    pub thread: Arc<OnceLock<Thread>>,
    pub qp_hook: Arc<OnceLock<QpHook<P>>>,
    pub latency: crate::metrics::latency::NodeLatency,
    /// The shared receive queue of this node's server connections, once one needs it.
    pub srq: Option<crate::srq::NodeSrq<P>>,
}

impl<P: Provider> NodeEnv<P> {
    /// The generation of slot `slot` (timer and job tokens carry it).
    #[inline]
    pub(crate) fn slot_gen(&self, slot: u32) -> u32 {
        self.gens.get(slot as usize).copied().unwrap_or(0)
    }

    pub(crate) fn sq_depth(&self, credits: u32) -> u32 {
        sq_depth_for(credits)
    }

    pub(crate) fn rq_depth(&self, credits: u32) -> u32 {
        rq_depth_for(credits)
    }

    /// The thread of this node's reactor (set once it has polled).
    pub(crate) fn node_thread(&self) -> Arc<OnceLock<Thread>> {
        Arc::clone(&self.thread)
    }

    /// How a connection with engine configuration `cfg` creates its QP on this node: the
    /// node's PD, its one CQ for both queues, the engine's queue depths and scatter/gather
    /// limits, RNR retry `rnr_retry` (at most 7) and, for a server connection on the node's
    /// shared receive queue, `srq`.
    pub(crate) fn qp_init<'a>(
        &'a self,
        cfg: &conn::Config,
        rnr_retry: u8,
        srq: Option<&'a P::Srq>,
    ) -> QpInit<'a, P> {
        QpInit {
            pd: &*self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq,
            opts: QpOptions {
                max_send_wr: cfg.sq_depth,
                max_recv_wr: cfg.rq_depth,
                max_send_sge: cfg.max_send_sge,
                max_recv_sge: 1,
                rnr_retry_count: rnr_retry.min(7),
                ..QpOptions::default()
            },
        }
    }

    /// Runs the QP hook, if any.
    pub(crate) fn qp_created(&self, qp: &P::Qp) {
        if let Some(h) = self.qp_hook.get() {
            h(qp);
        }
    }
}

/// What a connection is served with for one round of work or one timer: the node's
/// environment, the node's links to its workers (`None` in inline mode, and where completions
/// must run on the reactor), the reactor's timers and the connection's slot. Built on the stack
/// by the node's loop for each call into a connection (four words; nothing allocated).
pub(crate) struct Round<'r, 'p, P: Provider> {
    pub env: &'r mut NodeEnv<P>,
    pub links: Option<&'r mut NodeLinks>,
    pub cx: &'r mut PollerCtx<'p>,
    pub slot: u32,
}

impl<P: Provider> Round<'_, '_, P> {
    /// A timer token of kind `kind` for the connection's slot (and its current generation).
    #[inline]
    pub(crate) fn timer_token(&self, kind: u8) -> u64 {
        timer_token(kind, self.slot, self.env.slot_gen(self.slot))
    }
}

/// What a node drives each connection in its slots through: the client and server connections
/// implement it, and the node's loop names no role. The node holds its connections as
/// [`Conn`] (boxed when created, so placing one allocates nothing; one indirect call per
/// completion).
pub(crate) trait NodeConn<P: Provider> {
    /// Placed in slot `slot` of a node (a client connection connects).
    fn start(&mut self, _r: &mut Round<'_, '_, P>) {}
    /// Feeds one completion of the connection's QP.
    fn feed(&mut self, now: u64, wc: &Completion);
    /// A worker finished a job (handler or callback) of this connection.
    fn on_served(&mut self, env: &mut NodeEnv<P>, s: Served);
    /// One round of work (CM events, engine events, new calls, doorbells); the work done.
    fn service(&mut self, r: &mut Round<'_, '_, P>) -> usize;
    /// True when the node may release the connection's slot.
    fn is_done(&self) -> bool;
    /// A timer of this connection fired (`kind`: one of the `TIMER_*` kinds).
    fn on_timer(&mut self, kind: u8, r: &mut Round<'_, '_, P>);
    /// The reactor is stopping.
    fn shutdown(&mut self);
    /// How long the connection has been idle when it may be evicted for a connect request
    /// (`None`: never; only server connections are).
    fn evictable(&self, _now: u64) -> Option<u64> {
        None
    }
    /// Takes back the shared receives the connection's engine released, after a receive of
    /// the node's SRQ was fed to it (only server connections on a shared receive queue have
    /// any).
    fn collect_shared_recvs(&mut self, _env: &mut NodeEnv<P>) {}
    /// Marks the connection for eviction.
    fn evict(&mut self) {}
    /// Whether the connection was evicted (its slot is promised to a connect request).
    fn was_evicted(&self) -> bool {
        false
    }
}

/// A connection in a node's slot.
pub(crate) type Conn<P> = Box<dyn NodeConn<P> + Send>;

/// A node's connection slots: the connections it drives, the free slots, how many are live
/// and how many evicted connections have a slot promised to a connect request.
pub(crate) struct Slots<P: Provider> {
    conns: Vec<Option<Conn<P>>>,
    free: Vec<u32>,
    live: usize,
    evicting: usize,
}

impl<P: Provider> Slots<P> {
    /// `n` free slots (taken lowest first).
    pub(crate) fn new(n: usize) -> Slots<P> {
        Slots {
            conns: (0..n).map(|_| None).collect(),
            free: (0..n as u32).rev().collect(),
            live: 0,
            evicting: 0,
        }
    }

    /// The number of slots.
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Live connections.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Evicted connections whose slots are not free yet (each promised to a request).
    pub(crate) fn evicting(&self) -> usize {
        self.evicting
    }

    /// A free slot, if any (give it back with [`Slots::give_back`] if it stays unused).
    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// A slot [`Slots::take`] gave that stays unused.
    pub(crate) fn give_back(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Puts `c` in the taken slot `slot`.
    pub(crate) fn place(&mut self, slot: u32, c: Conn<P>, env: &NodeEnv<P>) {
        if let Some(s) = self.conns.get_mut(slot as usize) {
            *s = Some(c);
            self.live += 1;
            env.stats.set_connections(self.live as u64);
        }
    }

    /// The connection in `slot`, if any.
    #[inline]
    pub(crate) fn get_mut(&mut self, slot: u32) -> Option<&mut (dyn NodeConn<P> + Send)> {
        match self.conns.get_mut(slot as usize) {
            Some(Some(c)) => Some(&mut **c),
            _ => None,
        }
    }

    /// Every connection.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Conn<P>> {
        self.conns.iter_mut().flatten()
    }

    /// Drops the connection in `slot` and frees the slot; timers and worker results still on
    /// their way for it find a new generation.
    pub(crate) fn release(&mut self, slot: u32, env: &mut NodeEnv<P>) {
        if let Some(s) = self.conns.get_mut(slot as usize) {
            let evicted = s.as_ref().is_some_and(|c| c.was_evicted());
            if s.take().is_some() {
                self.live -= 1;
                if evicted {
                    self.evicting = self.evicting.saturating_sub(1);
                }
                if let Some(g) = env.gens.get_mut(slot as usize) {
                    *g = g.wrapping_add(1);
                }
                self.free.push(slot);
            }
        }
        env.stats.set_connections(self.live as u64);
    }

    /// Marks the connection idle the longest (at least its eviction grace) for eviction;
    /// `false` when there is none.
    pub(crate) fn evict_idlest(&mut self, now: u64) -> bool {
        let mut best: Option<(usize, u64)> = None;
        for (i, c) in self.conns.iter().enumerate() {
            if let Some(idle) = c.as_ref().and_then(|c| c.evictable(now)) {
                if best.map_or(true, |(_, b)| idle > b) {
                    best = Some((i, idle));
                }
            }
        }
        match best.and_then(|(i, _)| self.conns.get_mut(i)) {
            Some(Some(c)) => {
                c.evict();
                self.evicting += 1;
                true
            }
            _ => false,
        }
    }

    /// Drops every connection (their QPs reference the node's CQ: before it).
    pub(crate) fn clear(&mut self) {
        for s in self.conns.iter_mut() {
            drop(s.take());
        }
    }
}

/// What a listener's connect requests are accepted for (a server): the admission questions
/// the node's intake (`crate::accept`) asks, and the accept itself.
pub(crate) trait Acceptor<P: Provider>: Send + Sync {
    /// Stopped listening: requests are refused (`ShuttingDown`).
    fn is_stopping(&self) -> bool;
    /// Which of `n` nodes takes the next connect request (a turn counter).
    fn next_node(&self, n: usize) -> usize;
    /// A share of the server's connection limits (in all and for `peer`), or the reason the
    /// request is refused.
    fn admit(&self, peer: IpAddr) -> Result<PeerSlot, RejectReason>;
    /// Counts a refused connect request.
    fn count_reject(&self);
    /// Accepts the admitted request into its slot of this node. `Err(Some(req))` when
    /// setting the connection up failed before the accept (the caller refuses it with a
    /// reason); `Err(None)` when the accept itself failed.
    fn accept(
        self: Arc<Self>,
        env: &mut NodeEnv<P>,
        seated: Seated<P>,
    ) -> Result<Conn<P>, Option<P::ConnRequest>>;
}

/// A connect request that passed admission and holds a slot of its node: what
/// [`Acceptor::accept`] turns into a connection.
pub(crate) struct Seated<P: Provider> {
    /// The request (accepted or refused through it).
    pub req: P::ConnRequest,
    /// The node slot taken for it.
    pub slot: u32,
    /// Its share of the server's connection limits (given back when the connection goes).
    pub peer: PeerSlot,
}

/// Commands to a node.
pub(crate) enum NodeCmd<P: Provider> {
    /// Place a connection and start it.
    Add(Conn<P>),
    /// Accept a connect request (handed over by the node whose listener took it).
    Accept {
        req: P::ConnRequest,
        to: Arc<dyn Acceptor<P>>,
    },
    /// Poll a listener.
    Listen {
        listener: P::Listener,
        to: Arc<dyn Acceptor<P>>,
    },
}

/// What other threads hold of a node.
pub(crate) struct NodePeer<P: Provider> {
    pub ctl: MpscProducer<NodeCmd<P>>,
    pub thread: Arc<OnceLock<Thread>>,
    pub stats: NodeStats,
}

/// Sends `cmd` to node `node` of `peers` and wakes it; hands `cmd` back when there is no such
/// node or its control ring stays full.
pub(crate) fn send_to<P: Provider>(
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
