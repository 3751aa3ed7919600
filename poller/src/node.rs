//! What a node gives the connections in its slots, and what it drives them through: the
//! node environment ([`NodeEnv`]: device, CQ, pools, router, counters, clock), timer and worker
//! job tokens (kind, slot, slot generation), queue depths for a credit count, and the
//! [`NodeConn`] interface the node's loop calls (the runtime names no role).
//!
//! Normal operation: the node (`crate::runtime`) feeds each completion to the connection its QP
//! routes to and gives every connection one round per poll. Recovery: tokens carry the slot's
//! generation, so a timer or worker result of a connection that is gone finds nothing (the
//! node compares [`NodeEnv::slot_gen`]).

use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use rpcrdma_engine::verbs::{Completion, Provider};
use rpcrdma_mempool::{HugePagePolicy, PoolCache};

use crate::api_stats::NodeStatsWriter;
use crate::driver::Router;
use crate::memory::BufPool;
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
    pub hugepages: HugePagePolicy,
    /// Generation of each slot (bumped when the slot is released).
    pub gens: Vec<u32>,
    /// This node's reactor thread (set once it has polled).
    pub thread: Arc<OnceLock<Thread>>,
    pub qp_hook: Arc<OnceLock<QpHook<P>>>,
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

    /// Runs the QP hook, if any.
    pub(crate) fn qp_created(&self, qp: &P::Qp) {
        if let Some(h) = self.qp_hook.get() {
            h(qp);
        }
    }
}

/// What a node drives each connection in its slots through: the client and server connections
/// implement it, and the node's loop names no role. The node holds its connections in
/// `runtime::Conn`, an enum whose implementation forwards to the role (a match, no virtual call,
/// on the completion path).
pub(crate) trait NodeConn<P: Provider> {
    /// Feeds one completion of the connection's QP.
    fn feed(&mut self, now: u64, wc: &Completion);
    /// A worker finished a job (handler or callback) of this connection.
    fn on_served(&mut self, env: &mut NodeEnv<P>, s: Served);
    /// One round of work (CM events, engine events, new calls, doorbells); the work done.
    fn service(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
    ) -> usize;
    /// True when the node may release the connection's slot.
    fn is_done(&self) -> bool;
    /// A timer of this connection fired (`kind`: one of the `TIMER_*` kinds).
    fn on_timer(
        &mut self,
        kind: u8,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
    );
    /// The reactor is stopping.
    fn shutdown(&mut self);
    /// How long the connection has been idle when it may be evicted for a connect request
    /// (`None`: never; only server connections are).
    fn evictable(&self, _now: u64) -> Option<u64> {
        None
    }
    /// Marks the connection for eviction.
    fn evict(&mut self) {}
    /// Whether the connection was evicted (its slot is promised to a connect request).
    fn was_evicted(&self) -> bool {
        false
    }
}
