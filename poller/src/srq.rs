//! A reactor's shared receive queue for its server connections
//! ([`ServerOptions::shared_receive_queue`](crate::ServerOptions::shared_receive_queue)): the
//! SRQ, its buffers (one registered slab of `depth` receive buffers, whatever the number of
//! connections), the engine's [`SrqPool`] (posted / held / waiting) and [`SrqLedger`] (credit
//! grants the depth backs), and the few calls the node and its server connections make.
//!
//! Normal operation: the first connection accepted with the option creates the node's SRQ and
//! posts every buffer. [`connection`] reserves a connection's grant (credits plus one receive per
//! backward call) and hands it the buffers; its QP is created on the SRQ. Every completion the
//! node polls goes through [`consumed`] first (an SRQ receive leaves the pool's posted set);
//! after feeding one to its connection the node takes back what the connection released
//! ([`ConnSrq::collect`]), and a connection, before posting its sends, does that again and
//! posts every waiting buffer to the SRQ with one doorbell ([`ConnSrq::repost`]) — so a
//! receive freed by a reply is posted before the reply can draw the client's next call. The
//! engine's module `conn::srq` explains why grants stay honest.
//!
//! Recovery: a connection whose peer exceeds its grant (the engine's holding slots run out:
//! [`Connection::exceeded_shared_grant`]) is cut off in the completion that showed it — its QP
//! goes to the error state before the next completion is fed — and counted
//! (`NodeSnapshot::srq_violations`); the receives it took beyond its grant go back at once.
//! Its burst may have emptied the SRQ before the node polled: the server's connections on an
//! SRQ ask RNR retry 7 of their clients, so an honest Send that meets the empty SRQ waits for
//! the repost instead of failing (no honest connection is lost). An SRQ receive whose QP is
//! gone (a stray) goes straight back to the pool
//! ([`stray`]). A lost connection parks its engine ([`ConnSrq::park`]) so the receives its
//! calls still hold stay out of the SRQ while a worker may read them; once no worker does,
//! [`ConnSrq::leave`] releases them and returns the reservation. A verbs error posting to the
//! SRQ is counted and the buffers wait in the pool for the next post. The SRQ is never torn
//! down before the node, and the node destroys it only after every connection (every QP
//! attached to it: verbs refuse with EBUSY otherwise).

use std::sync::Arc;

use rpcrdma_engine::conn::srq::{SharedRecvs, SrqGrant, SrqLedger, SrqPool};
use rpcrdma_engine::conn::{self, wr_kind, Connection};
use rpcrdma_engine::post::{collect_released, post_srq_recvs};
use rpcrdma_engine::proto::private_data;
use rpcrdma_engine::verbs::{Completion, Device, Provider, WrId};
use rpcrdma_mempool::{HugePagePolicy, Region};

use crate::api_stats::NodeStatsWriter;
use crate::memory::{Slab, SlabLayout, LOCAL_ACCESS};

/// Receives kept out of every grant: room for a peer that sends beyond its grant, until its
/// connection is closed.
const SLACK: u32 = 2;

/// What creating a node's SRQ takes from the node (the node hands these pieces in; the SRQ
/// knows nothing else of it).
pub(crate) struct SrqParts<'a, P: Provider> {
    /// The node's SRQ, once one was created.
    pub srq: &'a mut Option<NodeSrq<P>>,
    /// The node's device.
    pub dev: &'a P::Device,
    /// The node's protection domain.
    pub pd: &'a P::Pd,
    /// Whether the buffers may (must) come from hugepages.
    pub hugepages: HugePagePolicy,
    /// The node's counters.
    pub stats: &'a NodeStatsWriter,
}

/// A node's SRQ and its buffers. See the module documentation.
pub(crate) struct NodeSrq<P: Provider> {
    srq: P::Srq,
    pool: SrqPool,
    ledger: SrqLedger,
    /// The receive buffers' registered memory (kept alive while the SRQ exists).
    slab: Slab,
    /// Buffers handed back that were not held (a double return; never expected).
    refused: u64,
    /// Verbs errors posting to the SRQ.
    errors: u64,
}

impl<P: Provider> NodeSrq<P> {
    /// A new SRQ of `depth` receives of `recv_size` octets on the node's device, every buffer
    /// posted.
    fn create(env: &SrqParts<'_, P>, depth: u32, recv_size: u32) -> Option<NodeSrq<P>> {
        let depth = depth.clamp(1, env.dev.caps().max_srq_wr.max(1));
        let layout = SlabLayout {
            headers: 0,
            header_size: 0,
            recvs: depth as usize,
            recv_size,
            data: 0,
            data_size: 0,
            rpc_headers: 0,
            rpc_header_size: 0,
        };
        let made = Slab::new(env.pd, &layout, env.hugepages, LOCAL_ACCESS)
            .ok()
            .and_then(|slab| Some((env.dev.create_srq(env.pd, depth, 1).ok()?, slab)));
        let Some((srq, slab)) = made else {
            tracing::warn!(
                depth,
                recv_size,
                "shared receive queue: creation failed (registration or the device's SRQ); \
                 connections needing it are refused"
            );
            return None;
        };
        tracing::info!(depth, recv_size, "shared receive queue created");
        let bufs = SharedRecvs::new(slab.recvs.clone());
        let mut s = NodeSrq {
            srq,
            pool: SrqPool::new(bufs, depth / 8),
            ledger: SrqLedger::new(depth, SLACK.min(depth / 2)),
            slab,
            refused: 0,
            errors: 0,
        };
        s.post(env.stats);
        Some(s)
    }

    /// The SRQ itself (for the QP's creation attributes).
    pub(crate) fn srq(&self) -> &P::Srq {
        &self.srq
    }

    /// Posts every waiting buffer (one doorbell, counted with its work requests in the node's
    /// counters), then samples the gauges (`stats`).
    fn post(&mut self, stats: &NodeStatsWriter) {
        if self.pool.pending() == 0 {
            return;
        }
        let (n, posted) = post_srq_recvs(&mut self.pool, &mut self.srq);
        stats.posted(u64::from(n > 0), u64::from(n));
        if posted.is_err() {
            self.errors += 1;
            stats.verbs_error();
            crate::log_limited!(
                WARN,
                waiting = self.pool.pending(),
                "shared receive queue: post failed; the buffers wait for the next post"
            );
        }
        stats.set_srq(&self.pool, self.slab.region.len() as u64);
    }

    /// Takes back what `conn` released.
    #[inline]
    fn take_from(&mut self, conn: &mut Connection) {
        self.refused += u64::from(collect_released(conn, &mut self.pool).1);
    }
}

/// A server connection's share of its node's SRQ.
pub(crate) struct ConnSrq {
    grant: SrqGrant,
    /// The engine of a lost connection, kept until no worker reads its calls' arguments.
    parked: Option<Connection>,
    left: bool,
}

/// What [`connection`] gives an accepted connection.
pub(crate) struct Admitted {
    /// Its reservation.
    pub share: ConnSrq,
    /// The SRQ buffers' registered memory (for the connection's host-memory view).
    pub region: Arc<Region>,
}

/// A responder whose receives come from the node's SRQ (created on first use with `depth`
/// receives of `cfg`'s receive size), granted at most `cfg.credits` — fewer when the SRQ
/// cannot back more — plus one receive per backchannel send buffer of `bc`. `None`: the SRQ
/// cannot back even one credit, could not be created, or the engine refused (the connect is
/// rejected; nothing stays reserved).
pub(crate) fn connection<P: Provider>(
    env: SrqParts<'_, P>,
    depth: u32,
    mut cfg: conn::Config,
    pools: &conn::Pools<'_>,
    bc: Option<conn::BackchannelPools<'_>>,
) -> Option<(Connection, Admitted)> {
    let recv_size = private_data::representable_size(cfg.inline_recv);
    if env.srq.is_none() {
        *env.srq = Some(NodeSrq::create(&env, depth, recv_size)?);
    }
    let s = env.srq.as_mut()?;
    if s.pool.bufs().get(0).map_or(0, |b| b.len) < recv_size {
        return None; // created by a server with smaller receives
    }
    let bc = bc.unwrap_or(conn::BackchannelPools::NONE);
    let asked = cfg.credits;
    let Some(grant) = s.ledger.admit(asked, bc.headers.len() as u32) else {
        tracing::debug!(
            asked,
            free = s.ledger.free(),
            "shared receive queue: no room for another grant"
        );
        return None;
    };
    if grant.credits < asked {
        tracing::debug!(
            asked,
            granted = grant.credits,
            "shared receive queue: the connection is granted fewer credits"
        );
    }
    cfg.credits = grant.credits;
    let bufs = s.pool.bufs().clone();
    match Connection::with_shared_receives(conn::Role::Responder, cfg, pools, &bc, bufs) {
        Ok(c) => {
            let share = ConnSrq {
                grant,
                parked: None,
                left: false,
            };
            let region = Arc::clone(&s.slab.region);
            Some((c, Admitted { share, region }))
        }
        Err(_) => {
            s.ledger.release(grant);
            None
        }
    }
}

/// Whether the node's SRQ can back a new connection (one credit plus `backward` receives);
/// true while the node has no SRQ yet.
pub(crate) fn has_room<P: Provider>(srq: &Option<NodeSrq<P>>, backward: u32) -> bool {
    srq.as_ref().map_or(true, |s| s.ledger.free() > backward)
}

/// The accept of a connection [`connection`] admitted failed: its reservation returns.
/// Returns `None` (what the accept path reports).
pub(crate) fn abandon<P: Provider, T>(
    srq: &mut Option<NodeSrq<P>>,
    a: Option<&Admitted>,
) -> Option<T> {
    if let (Some(s), Some(a)) = (srq.as_mut(), a) {
        s.ledger.release(a.share.grant);
    }
    None
}

/// A completion the node polled: an SRQ receive leaves the posted set. `true` when it was one.
#[inline]
pub(crate) fn consumed<P: Provider>(srq: &mut Option<NodeSrq<P>>, wc: &Completion) -> bool {
    match srq {
        Some(s) if WrId(wc.wr_id).kind() == wr_kind::SRQ_RECV => s.pool.consumed(WrId(wc.wr_id)),
        _ => false,
    }
}

/// An SRQ receive ([`consumed`] said so) that no connection takes: its buffer goes back.
pub(crate) fn stray<P: Provider>(srq: &mut Option<NodeSrq<P>>, wc: &Completion, was_srq: bool) {
    if let (Some(s), true) = (srq.as_mut(), was_srq) {
        let id = WrId(wc.wr_id).index() as u32;
        if let Some(buf) = s.pool.bufs().get(id) {
            let _ = s
                .pool
                .returned(rpcrdma_engine::conn::srq::SharedRecv { id, buf });
        }
    }
}

impl ConnSrq {
    /// The credits its reservation backs (what the connection grants its client).
    pub(crate) fn credits(&self) -> u32 {
        self.grant.credits
    }

    /// Takes back what `conn` released (after each completion fed to it).
    #[inline]
    pub(crate) fn collect<P: Provider>(
        srq: &mut Option<NodeSrq<P>>,
        conn: Option<&mut Connection>,
    ) {
        if let (Some(s), Some(c)) = (srq.as_mut(), conn) {
            s.take_from(c);
        }
    }

    /// Takes back what `conn` released and posts every waiting buffer: before the connection
    /// posts its sends.
    #[inline]
    pub(crate) fn repost<P: Provider>(
        srq: &mut Option<NodeSrq<P>>,
        stats: &NodeStatsWriter,
        conn: Option<&mut Connection>,
    ) {
        if let Some(s) = srq.as_mut() {
            if let Some(c) = conn {
                s.take_from(c);
            }
            s.post(stats);
        }
    }

    /// The connection is lost (at `now`): keeps its engine (its held receives) until
    /// [`ConnSrq::leave`].
    pub(crate) fn park<P: Provider>(
        &mut self,
        srq: &mut Option<NodeSrq<P>>,
        now: u64,
        conn: Option<Connection>,
    ) {
        if let Some(mut c) = conn {
            // Closed (a kick, eviction or idle close may come while it is up), so its held
            // receives stay held until `leave`.
            c.handle_cm(now, conn::CmInput::Disconnected);
            Self::collect(srq, Some(&mut c));
            self.parked = Some(c);
        }
    }

    /// No worker reads the lost connection's calls any more: its held receives go back to the
    /// SRQ and its reservation to the ledger (once).
    pub(crate) fn leave<P: Provider>(
        &mut self,
        srq: &mut Option<NodeSrq<P>>,
        stats: &NodeStatsWriter,
    ) {
        if self.left {
            return;
        }
        self.left = true;
        let Some(s) = srq.as_mut() else {
            return;
        };
        if let Some(mut c) = self.parked.take() {
            c.release_held_recvs();
            s.take_from(&mut c);
        }
        s.ledger.release(self.grant);
        s.post(stats);
    }
}
