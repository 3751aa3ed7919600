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
//! control ring full is retried (yielding) a bounded number of times, then handed back. A QP
//! that is torn down loses its route at once but is destroyed only after the node's CQ has been
//! drained once more ([`RetiredQps`]): its flushed completions are then counted as strays, and
//! a device that hands its number to the next QP (siw does) cannot give them to a newcomer.

use crate::doorbell::Waker;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use rpcrdma_engine::conn;
use rpcrdma_engine::verbs::{Completion, Provider, QpInit, QpOptions, QueuePair};
use rpcrdma_mempool::{HugePagePolicy, PoolCache};

use crate::admission::{PeerSlot, PeerTable, Shares};
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
/// A client connection's earliest call deadline (`ClientOptions::call_timeout_ms`).
pub(crate) const TIMER_CALLS: u8 = 5;

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
    /// How other threads wake this node's reactor (set once it has polled).
    pub thread: Arc<OnceLock<Waker>>,
    pub qp_hook: Arc<OnceLock<QpHook<P>>>,
    pub latency: crate::metrics::latency::NodeLatency,
    /// The shared receive queue of this node's server connections, once one needs it.
    pub srq: Option<crate::srq::NodeSrq<P>>,
    /// QPs torn down and not yet destroyed (see [`RetiredQps`]).
    pub retired: RetiredQps<P>,
}

/// QPs whose connections are gone, kept (in the error state, without a route) until the node
/// has drained its CQ after they were retired.
///
/// Completions are routed by QP number alone, and the completions a QP's flush produced stay
/// in the CQ after the QP is destroyed. A device that reuses the number at once (siw gives
/// each new QP the lowest free number; a reconnecting client's QP gets the number of the one
/// the server just closed) would otherwise hand those flushes to the newcomer's connection,
/// which fails at its first completion: the client then reconnects once more. While the old
/// QP exists its number cannot be reused, and once the CQ has been polled empty every
/// completion of its flush has been reaped (as strays: the route went with the connection).
pub(crate) struct RetiredQps<P: Provider> {
    /// (drain count when retired, the QP).
    qps: Vec<(u64, P::Qp)>,
    /// Times the node polled its CQ until it was empty.
    drains: u64,
}

impl<P: Provider> Default for RetiredQps<P> {
    fn default() -> Self {
        RetiredQps {
            qps: Vec::new(),
            drains: 0,
        }
    }
}

impl<P: Provider> RetiredQps<P> {
    /// Keeps `qp` (disconnected, its route removed) until the CQ has been drained.
    pub(crate) fn retire(&mut self, qp: P::Qp) {
        self.qps.push((self.drains, qp));
    }

    /// The node polled its CQ until it was empty: the QPs retired before that poll have no
    /// completion left in it and are destroyed.
    pub(crate) fn cq_drained(&mut self) {
        self.drains += 1;
        let now = self.drains;
        self.qps.retain(|(at, _)| *at >= now);
    }
}

impl<P: Provider> NodeEnv<P> {
    /// The pieces of the node its shared receive queue works with.
    pub(crate) fn srq_parts(&mut self) -> crate::srq::SrqParts<'_, P> {
        crate::srq::SrqParts {
            srq: &mut self.srq,
            dev: &self.dev,
            pd: &self.pd,
            hugepages: self.hugepages,
            stats: &self.stats,
        }
    }

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

    /// The waker of this node's reactor (set once it has polled).
    pub(crate) fn node_thread(&self) -> Arc<OnceLock<Waker>> {
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

    /// Runs the QP hook, if any, and has the QP's connection events wake this node's
    /// reactor when it sleeps (a provider that cannot notify leaves them to the sleep bound).
    pub(crate) fn qp_created(&self, qp: &P::Qp) {
        if let Some(w) = self.thread.get() {
            let w = w.clone();
            qp.set_event_notify(Arc::new(move || w.wake()));
        }
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
    /// Whether the connection could be evicted for a connect request now, and how idle it is
    /// (`None`: never, or not now; only server connections are).
    fn evictable(&self, _now: u64) -> Option<Evictable> {
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

/// What eviction knows of a connection that could be evicted now (nothing in progress on it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Evictable {
    /// How long it has been idle (ns).
    pub idle: u64,
    /// Idle at least its server's eviction grace (`ServerOptions::evict_idle_ms`).
    pub past_grace: bool,
    /// Idle at least an eighth of the grace: not in the middle of a run of calls (a client
    /// that keeps calls in flight is never settled, one that pings now and then is, between
    /// pings).
    pub settled: bool,
    /// Its peer's address.
    pub peer: IpAddr,
}

/// The victim [`Slots::evict_for`] picks among `candidates` (slot, [`Evictable`]) for a
/// connect request (`count`: connections an address holds, server-wide). Eligible: a
/// connection of an address that still holds at least as many as the requester after the
/// eviction (`count ≥ mine`: nobody is evicted for an address that then holds more; an
/// address may replace its own idle connection), idle past the grace — or, when its address
/// holds more than the requester will even after the eviction (`count > mine`), any
/// connection settled (idle an eighth of the grace: a connection with calls streaming is
/// never taken). While some address holds more than the fair share, only
/// connections of such addresses are eligible: an address keeping its connections busy cannot
/// make a newcomer from a second address evict another's idle one. Of the eligible: the
/// address holding the most, then the idlest.
pub(crate) fn pick_victim(
    candidates: impl Iterator<Item = (usize, Evictable)>,
    shares: Shares,
    count: &dyn Fn(IpAddr) -> u32,
) -> Option<usize> {
    let mut best: Option<(usize, (u32, u64))> = None;
    for (i, e) in candidates {
        let n = count(e.peer);
        let mine = shares.mine;
        let eligible = e.past_grace || (n > mine && e.settled);
        if n < mine || !eligible || shares.over.is_some_and(|f| n <= f) {
            continue;
        }
        let key = (n, e.idle);
        if best.map_or(true, |(_, b)| key > b) {
            best = Some((i, key));
        }
    }
    best.map(|(i, _)| i)
}

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

    /// Marks the connection [`pick_victim`] chooses for eviction and says what it was (its
    /// peer, how long idle); `None` when there is none.
    pub(crate) fn evict_for(
        &mut self,
        now: u64,
        shares: Shares,
        count: &dyn Fn(IpAddr) -> u32,
    ) -> Option<Evictable> {
        let candidates = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().and_then(|c| c.evictable(now)).map(|e| (i, e)));
        match pick_victim(candidates, shares, count).and_then(|i| self.conns.get_mut(i)) {
            Some(Some(c)) => {
                let victim = c.evictable(now);
                c.evict();
                self.evicting += 1;
                victim
            }
            _ => None,
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
    /// The server's connection shares (in all and per peer address).
    fn peers(&self) -> &Arc<PeerTable>;
    /// Whether a connection accepted now would get the node resources it needs beyond a slot
    /// (a reservation of the node's shared receive queue); `false` makes the request wait for
    /// an eviction or be refused (`NoResources`).
    fn has_room(&self, _env: &NodeEnv<P>) -> bool {
        true
    }
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
    pub thread: Arc<OnceLock<Waker>>,
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
                    t.wake();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(i: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, i])
    }

    fn e(peer: u8, idle: u64, past_grace: bool) -> Evictable {
        Evictable {
            idle,
            past_grace,
            settled: idle >= 10,
            peer: ip(peer),
        }
    }

    /// Address 1 keeps three busy-looking connections (never idle past the grace), address 2
    /// has one connection idle for long.
    fn aimed() -> Vec<(usize, Evictable)> {
        vec![
            (0, e(1, 100, false)),
            (1, e(1, 50, false)),
            (2, e(1, 10, false)),
            (3, e(2, 5_000, true)),
        ]
    }

    fn fair(mine: u32) -> Shares {
        Shares { mine, over: None }
    }

    fn counts(c: &[(u8, u32)]) -> impl Fn(IpAddr) -> u32 + '_ {
        move |p| c.iter().find(|(i, _)| ip(*i) == p).map_or(0, |(_, n)| *n)
    }

    #[test]
    fn rejects_eviction_aimed_at_another_addresses_idle_connection() {
        // Address 1 asks for a fourth connection: nobody holds as many, nothing is evicted.
        let c = [(1, 4), (2, 1)];
        let over = Shares {
            mine: 4,
            over: Some(3),
        };
        assert_eq!(pick_victim(aimed().into_iter(), over, &counts(&c)), None);
        // From a second address (holding one with the request): address 1, holding the most
        // and more than the requester will, loses its idlest connection, not address 2's.
        let c = [(1, 3), (2, 1), (3, 1)];
        let second = Shares {
            mine: 1,
            over: Some(2),
        };
        assert_eq!(
            pick_victim(aimed().into_iter(), second, &counts(&c)),
            Some(0)
        );
        // Address 1 streams calls (never settled): none of its connections is taken, and
        // the second address is refused rather than address 2's idle one evicted.
        let streaming = vec![
            (0, e(1, 1, false)),
            (1, e(1, 0, false)),
            (3, e(2, 5_000, true)),
        ];
        assert_eq!(
            pick_victim(streaming.into_iter(), second, &counts(&c)),
            None
        );
        // Address 1 keeps every connection busy (none is a candidate): address 2's idle one is
        // still not eligible while address 1 holds more than the fair share.
        let idle_only = vec![(3, e(2, 5_000, true))];
        assert_eq!(
            pick_victim(idle_only.into_iter(), second, &counts(&c)),
            None
        );
    }

    #[test]
    fn accepts_evicting_the_idlest_past_the_grace_among_equals() {
        // Single-connection addresses (a botnet looks the same): the idlest past the grace.
        let cands = vec![
            (0, e(1, 100, false)),
            (1, e(2, 3_000, true)),
            (2, e(3, 9_000, true)),
        ];
        let c = [(1, 1), (2, 1), (3, 1), (4, 1)];
        assert_eq!(
            pick_victim(cands.into_iter(), fair(1), &counts(&c)),
            Some(2)
        );
        // Nothing past the grace and nobody over the requester's count: none.
        let busy = vec![(0, e(1, 100, false)), (1, e(2, 200, false))];
        assert_eq!(pick_victim(busy.into_iter(), fair(1), &counts(&c)), None);
        // An address may replace its own idle connection, never one of an address that would
        // then hold fewer than it.
        let own = vec![(0, e(4, 9_000, true))];
        assert_eq!(
            pick_victim(own.into_iter(), fair(2), &counts(&[(4, 2)])),
            Some(0)
        );
        let other = vec![(0, e(4, 9_000, true))];
        assert_eq!(
            pick_victim(other.into_iter(), fair(3), &counts(&[(4, 2)])),
            None
        );
    }
}
