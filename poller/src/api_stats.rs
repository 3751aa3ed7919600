//! Run-time statistics of the RPC layer: one block per node (a reactor's share of an
//! [`Endpoint`](crate::runtime::Endpoint)) and one per connection.
//!
//! Normal operation: each block has exactly one writer (the reactor thread that owns the node or
//! connection) and any number of readers ([`NodeStats::snapshot`], [`ConnStats::snapshot`]),
//! like [`crate::stats`]: an update is a relaxed load plus a relaxed store, gauges are relaxed
//! stores. Counters are individually exact; a snapshot is not atomic across counters.
//!
//! Recovery: nothing to recover; counters wrap at 2^64.

use core::sync::atomic::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// Adds `n` to a counter only the owning thread stores.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    // Relaxed load and store: single writer (the load sees our own last store); readers'
    // Relaxed loads in `snapshot` may see any recent value, which is all a statistic promises.
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[inline]
fn set(c: &AtomicU64, v: u64) {
    // Relaxed: a gauge, read by `snapshot` only (pairs with nothing).
    c.store(v, Ordering::Relaxed);
}

#[inline]
fn get(c: &AtomicU64) -> u64 {
    // Relaxed: statistics only; sees some recent value of the writer's Relaxed stores.
    c.load(Ordering::Relaxed)
}

macro_rules! counters {
    (
        $(#[$m:meta])* $block:ident, $snap:ident {
            $( $(#[doc = $doc:expr])* $field:ident ),+ $(,)?
        }
    ) => {
        #[derive(Default)]
        struct $block {
            $( $field: AtomicU64, )+
        }

        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $snap {
            $( $(#[doc = $doc])* pub $field: u64, )+
        }

        impl $block {
            fn snapshot(&self) -> $snap {
                $snap { $( $field: get(&self.$field), )+ }
            }
        }

        impl $snap {
            /// Every field's name and documentation, in declaration order (the order of
            /// [`values`](Self::values)).
            pub const FIELDS: &'static [(&'static str, &'static str)] =
                &[ $( (stringify!($field), concat!($($doc),*)) ),+ ];

            /// Every field's value, in [`FIELDS`](Self::FIELDS) order.
            pub fn values(&self) -> Vec<u64> {
                vec![ $( self.$field ),+ ]
            }

            /// Adds every field of `other` (counters and gauges alike) to this one: totals
            /// over several blocks.
            pub fn accumulate(&mut self, other: &$snap) {
                $( self.$field = self.$field.wrapping_add(other.$field); )+
            }
        }
    };
}

counters! {
    /// Counters of one node (one reactor's CQ and connections of an endpoint).
    NodeCounters, NodeSnapshot {
        /// Calls to the node's poll function.
        polls,
        /// Polls that found useful work (completions, calls, events, worker results).
        busy_polls,
        /// Completion-queue polls that returned at least one completion.
        cq_bursts,
        /// Completions taken from the CQ.
        completions,
        /// Completions whose QP number matched no live connection (late flushes).
        stray_completions,
        /// Doorbells rung (send and receive flushes).
        doorbells,
        /// Work requests posted.
        work_requests,
        /// Connections currently in the node (a gauge).
        connections,
        /// Connections accepted (server) or established (client) so far.
        established,
        /// Jobs waiting in the rings to the workers (a gauge, sampled each poll).
        worker_ring_used,
        /// Jobs waiting in the node because the worker rings were full (a gauge).
        worker_overflow,
        /// Times a job could not enter a full worker ring (back-pressure events).
        worker_ring_full,
        /// Verbs calls that failed (post, flush, poll, connect, accept).
        verbs_errors,
        /// Connect requests this node rejected because its connection slots were full and no
        /// connection was idle long enough to evict (reject reason `ServerFull`, server).
        rejects_full,
        /// Connect requests rejected because the peer address held
        /// `ServerOptions::max_conns_per_peer` connections (reason `PeerLimit`, server).
        rejects_peer_limit,
        /// Connect requests rejected because the server held `ServerOptions::max_connections`
        /// connections (reason `ConnectionLimit`, server).
        rejects_conn_limit,
        /// Connect requests rejected for any other reason: the server stopping
        /// (`ShuttingDown`) or failing to set the connection up (`NoResources`).
        rejects_other,
        /// Idle server connections this node closed to make room for a new connect
        /// (`ServerOptions::evict_idle`).
        evictions,
        /// Server connections this node closed after `ServerOptions::idle_timeout_ms` idle.
        idle_closes,
        /// Completions with status `RNR_RETRY_EXC_ERR`: a Send found no receive posted at the
        /// peer after its RNR retries (a credit-accounting fault somewhere).
        rnr_errors,
        /// Completions with status `WR_FLUSH_ERR`: work requests flushed by a QP in the error
        /// state (every connection loss flushes what it had posted).
        flush_errors,
        /// Completions with any other error status (remote access, retries exhausted, ...).
        wc_errors,
        /// Receives of the node's shared receive queue (`ServerOptions::shared_receive_queue`;
        /// 0 without one). A gauge.
        srq_depth,
        /// Shared receives posted (a gauge, sampled when the node posts to the SRQ).
        srq_posted,
        /// Shared receives held by connections (a gauge, sampled as `srq_posted`).
        srq_held,
        /// Most shared receives ever held at once (sampled as `srq_posted`).
        srq_held_max,
        /// Times the posted shared receives fell below the low-water mark (an eighth of the
        /// depth).
        srq_low_water,
        /// Octets registered for the shared receive buffers (a gauge).
        srq_bytes,
        /// Connections cut off (QP moved to the error state at once) because their peer held
        /// more shared receives than its grant backs: more calls than its credits (RFC 8166
        /// §3.3.1).
        srq_violations,
    }
}

counters! {
    /// Counters of one connection.
    ConnCounters, ConnSnapshot {
        /// Calls started on the wire (client, retransmissions included) or received (server).
        calls,
        /// Calls completed: replies received (client) or replies delivered (server: the
        /// reply's Send completed successfully; a reply whose Send failed or was flushed is
        /// not counted, nor are its octets in `bytes_out`).
        replies,
        /// Calls completed with an error (client) or answered with an RPC error (server).
        errors,
        /// Octets of RPC message sent (call or reply, DDP items included).
        bytes_out,
        /// Octets of RPC message received (reply or call stream, DDP results included).
        bytes_in,
        /// Credits in use: calls outstanding on the wire (client) or calls being served
        /// (server). A gauge.
        credits_in_use,
        /// Credits granted by the peer (client) or to the peer (server). A gauge.
        credits_granted,
        /// Calls waiting for a credit or a slot (client) / for a reply buffer (server). A gauge.
        queued,
        /// Calls sent again on a new connection (client).
        retransmits,
        /// Reconnection attempts started after a loss or a failed attempt, successful or not
        /// (client; at most `ClientOptions::max_reconnects` in a row). Successful ones are
        /// `reconnects` minus the failed ones counted in `connect_failures`, less one when the
        /// first connection failed.
        reconnects,
        /// Established connections that were lost (client: a connection that reached
        /// `Connected`; server: an accepted connection). A connection attempt that fails
        /// before establishment is not a loss: see `connect_failures`.
        connection_losses,
        /// Connection attempts (the first one or a reconnection) that failed before the
        /// connection was established: rejected, unreachable, or a local setup error
        /// (client).
        connect_failures,
        /// RPC-over-RDMA version in use (client; 0 before the first connection). A gauge.
        rdma_version,
        /// Backward calls (RFC 8167) sent (server; retransmissions included) or received
        /// (client).
        back_calls,
        /// Backward calls completed by a reply (server: a reply arrived; client: a reply was
        /// sent).
        back_replies,
        /// Backward calls that failed (server: timed out, not served, session closed, RPC or
        /// transport error) or were answered with an RPC or transport error (client).
        back_errors,
        /// Backward calls sent again, with the same XID, on a later connection of their session
        /// (server).
        back_retransmits,
        /// Backward calls on the wire (server) or being served (client). A gauge.
        back_in_flight,
        /// Backward calls waiting for a backward credit or a reply buffer (server). A gauge.
        back_queued,
        /// Sessions closed because their client bound no new connection within
        /// `ServerOptions::session_grace_ms` after this connection was lost (server).
        sessions_expired,
        /// Receives that arrived as Send With Invalidate: the peer invalidated one of the
        /// answered call's STags remotely (client).
        remote_invalidations,
        /// Replies that came through the Reply chunk as RDMA_NOMSG (client).
        reply_chunk_replies,
        /// Calls that came with Read chunks (server; Position-Zero long calls included) or
        /// that carried DDP items as Read chunks (client).
        read_chunk_calls,
        /// Calls that offered Write chunks (server: received; client: sent).
        write_chunk_calls,
        /// Calls that offered a Reply chunk (server).
        reply_chunk_calls,
        /// Calls that came as RDMA_NOMSG through a Position-Zero Read chunk (server).
        long_calls,
        /// Replies sent with Send With Invalidate (server).
        send_invalidates,
        /// Connections the server closed because a handler asked to answer by disconnecting
        /// ([`Reject::Disconnect`](crate::Reject::Disconnect)).
        kicked,
        /// Connections the server closed to make room for a new connect while they were idle
        /// (`ServerOptions::evict_idle`; 0 or 1 per connection).
        evictions,
        /// Connections the server closed after `ServerOptions::idle_timeout_ms` idle (0 or 1
        /// per connection).
        idle_closes,
        /// Receives posted on the connection's receive queue now. A gauge.
        recv_posted,
        /// Times `recv_posted` fell below the credits granted (the low-water mark: a peer using
        /// its whole grant could meet an empty receive queue until the refill).
        recv_low_water,
        /// Memory windows bound (one per chunk a call exposes).
        mw_binds,
        /// Memory windows invalidated locally (Local Invalidate work requests; windows the
        /// peer invalidated are `remote_invalidations`).
        mw_invalidates,
        /// RDMA_ERROR / RDMA2_ERROR ERR_VERS received (client; a Version Two probe's fallback
        /// handled inside the engine is not counted).
        err_vers_in,
        /// RDMA_ERROR ERR_CHUNK received (client).
        err_chunk_in,
        /// RDMA2_ERROR with another code received (BAD_XDR, CANT_REPLY not retried,
        /// INVAL_PROC, INVAL_OPTION) or an unknown RDMA_ERROR code (client).
        err_other_in,
        /// Replies answered with ERR_CHUNK because they did not fit the chunks offered
        /// (server; errors the engine sends for undecodable headers are not counted).
        err_chunk_out,
        /// Replies answered with RDMA2_ERR_CANT_REPLY (server, Version Two).
        err_cant_reply_out,
    }
}

/// The writers that only count or set, as a table of one line a writer:
/// `count m => f` adds one to counter `f`; `count m(n) => f, t` adds one to `f` and `n` to
/// `t` (an event and its octets); `gauge m(v) => f` sets gauge `f`. The fields are those of
/// the writer's `c()`.
macro_rules! writers {
    ($($kind:ident $name:ident $(($arg:ident))? => $($field:ident),+;)*) => {
        $(writers!(@ $kind $name $(($arg))? => $($field),+);)*
    };
    (@ count $name:ident => $field:ident) => {
        pub(crate) fn $name(&self) {
            bump(&self.c().$field, 1);
        }
    };
    (@ count $name:ident($n:ident) => $field:ident, $total:ident) => {
        pub(crate) fn $name(&self, $n: u64) {
            bump(&self.c().$field, 1);
            bump(&self.c().$total, $n);
        }
    };
    (@ gauge $name:ident($v:ident) => $field:ident) => {
        pub(crate) fn $name(&self, $v: u64) {
            set(&self.c().$field, $v);
        }
    };
}

/// Node counters: the writer half stays on the reactor thread.
pub(crate) struct NodeStatsWriter(Arc<CachePadded<NodeCounters>>);

/// A reader of a node's counters (any thread).
#[derive(Clone)]
pub struct NodeStats(Arc<CachePadded<NodeCounters>>);

impl NodeStats {
    /// The counters now.
    pub fn snapshot(&self) -> NodeSnapshot {
        self.0.snapshot()
    }
}

impl core::fmt::Debug for NodeStats {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl NodeSnapshot {
    /// Fraction of polls that did useful work (0 when there were none).
    pub fn busy_fraction(&self) -> f64 {
        crate::stats::fraction(self.busy_polls, self.polls)
    }
}

pub(crate) fn node_stats() -> (NodeStatsWriter, NodeStats) {
    let c = Arc::new(CachePadded::new(NodeCounters::default()));
    (NodeStatsWriter(Arc::clone(&c)), NodeStats(c))
}

impl NodeStatsWriter {
    writers! {
        count stray => stray_completions;
        count established => established;
        count worker_ring_full => worker_ring_full;
        count verbs_error => verbs_errors;
        count evicted => evictions;
        count idle_closed => idle_closes;
        count srq_violation => srq_violations;
        count completions(n) => cq_bursts, completions;
        gauge set_connections(n) => connections;
    }

    /// The counters (the writers' table names their fields).
    #[inline]
    fn c(&self) -> &NodeCounters {
        &self.0
    }

    pub(crate) fn poll(&self, busy: bool) {
        bump(&self.0.polls, 1);
        if busy {
            bump(&self.0.busy_polls, 1);
        }
    }
    pub(crate) fn posted(&self, doorbells: u64, wrs: u64) {
        bump(&self.0.doorbells, doorbells);
        bump(&self.0.work_requests, wrs);
    }
    pub(crate) fn set_worker(&self, ring_used: u64, overflow: u64) {
        set(&self.0.worker_ring_used, ring_used);
        set(&self.0.worker_overflow, overflow);
    }
    /// A connect request was rejected with `reason`.
    pub(crate) fn rejected(&self, reason: rpcrdma_engine::proto::reject::RejectReason) {
        use rpcrdma_engine::proto::reject::RejectReason as R;
        match reason {
            R::ServerFull => bump(&self.0.rejects_full, 1),
            R::PeerLimit => bump(&self.0.rejects_peer_limit, 1),
            R::ConnectionLimit => bump(&self.0.rejects_conn_limit, 1),
            _ => bump(&self.0.rejects_other, 1),
        }
    }
    /// Counts an error status of a completion (nothing for a success: one compare).
    #[inline]
    pub(crate) fn wc_status(&self, st: rpcrdma_engine::verbs::WcStatus) {
        use rpcrdma_engine::verbs::WcStatus as W;
        if st.is_success() {
            return;
        }
        match st {
            W::RNR_RETRY_EXC_ERR => bump(&self.0.rnr_errors, 1),
            W::WR_FLUSH_ERR => bump(&self.0.flush_errors, 1),
            _ => bump(&self.0.wc_errors, 1),
        }
    }
    /// The shared receive queue's gauges, read from its pool; `bytes`: its receive memory.
    pub(crate) fn set_srq(&self, pool: &rpcrdma_engine::conn::srq::SrqPool, bytes: u64) {
        set(&self.0.srq_depth, pool.bufs().len() as u64);
        set(&self.0.srq_posted, u64::from(pool.posted()));
        set(&self.0.srq_held, u64::from(pool.held()));
        set(&self.0.srq_held_max, u64::from(pool.held_max()));
        set(&self.0.srq_low_water, pool.low_water_events());
        set(&self.0.srq_bytes, bytes);
    }
}

/// A connection's counter block and what names it: an id unique in the process (assigned at
/// creation, in order) and the peer's address (set once, when known).
struct ConnBlock {
    c: CachePadded<ConnCounters>,
    id: u64,
    peer: OnceLock<SocketAddr>,
}

/// Connection ids: the next one to hand out.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Connection counters: the writer half stays with the connection on its reactor.
pub(crate) struct ConnStatsWriter(Arc<ConnBlock>);

/// A reader of a connection's counters (any thread).
#[derive(Clone)]
pub struct ConnStats(Arc<ConnBlock>);

impl ConnStats {
    /// The counters now.
    pub fn snapshot(&self) -> ConnSnapshot {
        self.0.c.snapshot()
    }

    /// The connection's id: unique in the process, increasing in creation order (a client's
    /// id stays the same across its reconnections; a server connection's is the
    /// `CallTransport::conn_id` its handlers see).
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The peer's address (the server's for a client, the client's for a server connection),
    /// when known.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.0.peer.get().copied()
    }

    /// Whether both readers read the same connection's block.
    pub(crate) fn same_block(&self, other: &ConnStats) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl core::fmt::Debug for ConnStats {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.snapshot().fmt(f)
    }
}

pub(crate) fn conn_stats() -> (ConnStatsWriter, ConnStats) {
    // Relaxed: only uniqueness matters (the RMW gives it), no data is published by it.
    let id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
    let c = Arc::new(ConnBlock {
        c: CachePadded::new(ConnCounters::default()),
        id,
        peer: OnceLock::new(),
    });
    (ConnStatsWriter(Arc::clone(&c)), ConnStats(c))
}

impl ConnStatsWriter {
    writers! {
        count call(bytes_out) => calls, bytes_out;
        count call_in(bytes_in) => calls, bytes_in;
        count reply_in(bytes_in) => replies, bytes_in;
        count reply_out(bytes_out) => replies, bytes_out;
        count back_call(bytes_out) => back_calls, bytes_out;
        count back_call_in(bytes_in) => back_calls, bytes_in;
        count error => errors;
        count retransmit => retransmits;
        count reconnect => reconnects;
        count lost => connection_losses;
        count connect_failed => connect_failures;
        count back_error => back_errors;
        count back_retransmit => back_retransmits;
        count session_expired => sessions_expired;
        count remote_invalidation => remote_invalidations;
        count reply_chunk_reply => reply_chunk_replies;
        count kicked => kicked;
        count evicted => evictions;
        count idle_closed => idle_closes;
        gauge queued(n) => queued;
        gauge version(v) => rdma_version;
    }

    /// The counters (the writers' table names their fields).
    #[inline]
    fn c(&self) -> &ConnCounters {
        &self.0.c
    }

    /// A reader of this block.
    pub(crate) fn reader(&self) -> ConnStats {
        ConnStats(Arc::clone(&self.0))
    }
    /// Records the peer's address (the first one set stays).
    pub(crate) fn set_peer(&self, addr: SocketAddr) {
        let _ = self.0.peer.set(addr);
    }
    pub(crate) fn credits(&self, in_use: u64, granted: u64) {
        set(&self.0.c.credits_in_use, in_use);
        set(&self.0.c.credits_granted, granted);
    }
    pub(crate) fn back_reply(&self, bytes: u64, incoming: bool) {
        bump(&self.0.c.back_replies, 1);
        if incoming {
            bump(&self.0.c.bytes_in, bytes);
        } else {
            bump(&self.0.c.bytes_out, bytes);
        }
    }
    pub(crate) fn back_gauges(&self, in_flight: u64, queued: u64) {
        set(&self.0.c.back_in_flight, in_flight);
        set(&self.0.c.back_queued, queued);
    }
    /// A call arrived with these chunks (server).
    pub(crate) fn call_chunks(&self, t: &crate::call::CallTransport, write_chunks: u8) {
        if t.read_segments > 0 {
            bump(&self.0.c.read_chunk_calls, 1);
        }
        if write_chunks > 0 {
            bump(&self.0.c.write_chunk_calls, 1);
        }
        if t.reply_chunk.is_some() {
            bump(&self.0.c.reply_chunk_calls, 1);
        }
        if t.position_zero {
            bump(&self.0.c.long_calls, 1);
        }
    }
    /// What one post of the connection's queued work requests carried: Send With Invalidate,
    /// memory-window binds and local invalidates.
    #[inline]
    pub(crate) fn posted(&self, p: &rpcrdma_engine::post::Posted) {
        if p.invalidates > 0 {
            bump(&self.0.c.send_invalidates, u64::from(p.invalidates));
        }
        if p.binds > 0 {
            bump(&self.0.c.mw_binds, u64::from(p.binds));
        }
        if p.local_invalidates > 0 {
            bump(&self.0.c.mw_invalidates, u64::from(p.local_invalidates));
        }
    }
    /// The receive queue now: receives posted against the credits granted; counts a fall
    /// below the grant (edge, not level: the previous gauge value tells).
    #[inline]
    pub(crate) fn recv_queue(&self, conn: Option<&rpcrdma_engine::conn::Connection>) {
        if let Some(c) = conn {
            self.recv_levels(c.receives_posted(), c.credits());
        }
    }
    /// `posted` receives against `granted` credits (see [`ConnStatsWriter::recv_queue`]).
    #[inline]
    fn recv_levels(&self, posted: u32, granted: u32) {
        let (posted, granted) = (u64::from(posted), u64::from(granted));
        if posted < granted && get(&self.0.c.recv_posted) >= granted {
            bump(&self.0.c.recv_low_water, 1);
        }
        set(&self.0.c.recv_posted, posted);
    }
    /// Chunks a client call offered (Read chunks for DDP items, Write chunks for receptacles).
    #[inline]
    pub(crate) fn call_chunks_out(&self, read_items: usize, receptacles: usize) {
        if read_items > 0 {
            bump(&self.0.c.read_chunk_calls, 1);
        }
        if receptacles > 0 {
            bump(&self.0.c.write_chunk_calls, 1);
        }
    }
    /// A call failed with `e` (client): RDMA_ERROR codes are counted.
    pub(crate) fn call_failed(&self, e: &rpcrdma_engine::conn::CallError) {
        use rpcrdma_engine::conn::CallError as E;
        use rpcrdma_engine::proto::v2::RdmaError as R2;
        match e {
            E::ErrVers { .. } | E::Rdma2(R2::Vers { .. }) => bump(&self.0.c.err_vers_in, 1),
            E::ErrChunk => bump(&self.0.c.err_chunk_in, 1),
            E::RdmaError(_) | E::Rdma2(_) => bump(&self.0.c.err_other_in, 1),
            _ => {}
        }
    }
    /// How a reply went out (server): the error answers are counted.
    #[inline]
    pub(crate) fn reply_kind(&self, k: rpcrdma_engine::conn::ReplyKind) {
        use rpcrdma_engine::conn::ReplyKind as K;
        match k {
            K::ErrChunk => bump(&self.0.c.err_chunk_out, 1),
            K::CantReply => bump(&self.0.c.err_cant_reply_out, 1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_engine::conn::{CallError, ReplyKind};
    use rpcrdma_engine::post::Posted;
    use rpcrdma_engine::proto::v2::RdmaError;
    use rpcrdma_engine::verbs::WcStatus;

    #[test]
    fn accepts_error_codes_chunk_kinds_and_windows() {
        let (w, r) = conn_stats();
        w.call_failed(&CallError::ErrVers { low: 1, high: 1 });
        w.call_failed(&CallError::Rdma2(RdmaError::Vers { low: 1, high: 2 }));
        w.call_failed(&CallError::ErrChunk);
        w.call_failed(&CallError::Rdma2(RdmaError::BadXdr));
        w.call_failed(&CallError::RdmaError(9));
        w.call_failed(&CallError::TimedOut);
        w.reply_kind(ReplyKind::ErrChunk);
        w.reply_kind(ReplyKind::CantReply);
        w.reply_kind(ReplyKind::Inline);
        w.call_chunks_out(2, 0);
        w.call_chunks_out(0, 1);
        w.posted(&Posted {
            wrs: 9,
            doorbells: 1,
            invalidates: 1,
            binds: 3,
            local_invalidates: 2,
        });
        let s = r.snapshot();
        assert_eq!((s.err_vers_in, s.err_chunk_in, s.err_other_in), (2, 1, 2));
        assert_eq!((s.err_chunk_out, s.err_cant_reply_out), (1, 1));
        assert_eq!((s.read_chunk_calls, s.write_chunk_calls), (1, 1));
        assert_eq!(
            (s.send_invalidates, s.mw_binds, s.mw_invalidates),
            (1, 3, 2)
        );
    }

    #[test]
    fn accepts_low_water_counted_once_per_fall() {
        let (w, r) = conn_stats();
        // Starting empty (before the first post) is no fall; a refill, then a fall.
        for (posted, granted) in [(0, 32), (40, 32), (31, 32), (20, 32), (32, 32), (10, 32)] {
            w.recv_levels(posted, granted);
        }
        let s = r.snapshot();
        assert_eq!((s.recv_posted, s.recv_low_water), (10, 2));
    }

    #[test]
    fn accepts_completion_errors_by_status() {
        let (w, r) = node_stats();
        for st in [
            WcStatus::SUCCESS,
            WcStatus::RNR_RETRY_EXC_ERR,
            WcStatus::WR_FLUSH_ERR,
            WcStatus::WR_FLUSH_ERR,
            WcStatus::REM_ACCESS_ERR,
        ] {
            w.wc_status(st);
        }
        let s = r.snapshot();
        assert_eq!((s.rnr_errors, s.flush_errors, s.wc_errors), (1, 2, 1));
    }

    #[test]
    fn accepts_fields_listed_with_their_docs() {
        let s = ConnSnapshot {
            recv_low_water: 4,
            ..ConnSnapshot::default()
        };
        let i = ConnSnapshot::FIELDS
            .iter()
            .position(|(n, _)| *n == "recv_low_water")
            .unwrap();
        assert_eq!(s.values()[i], 4);
        assert_eq!(s.values().len(), ConnSnapshot::FIELDS.len());
        assert!(ConnSnapshot::FIELDS[i].1.contains("low-water"));
        assert!(NodeSnapshot::FIELDS.iter().all(|(_, d)| !d.is_empty()));
        let (a, b) = (conn_stats().1, conn_stats().1);
        assert!(b.id() > a.id());
    }
}
