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
use std::sync::Arc;

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
            $( $(#[$fm:meta])* $field:ident ),+ $(,)?
        }
    ) => {
        #[derive(Default)]
        struct $block {
            $( $field: AtomicU64, )+
        }

        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $snap {
            $( $(#[$fm])* pub $field: u64, )+
        }

        impl $block {
            fn snapshot(&self) -> $snap {
                $snap { $( $field: get(&self.$field), )+ }
            }
        }

        impl $snap {
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
        /// Connect requests rejected for any other reason: the server stopping
        /// (`ShuttingDown`) or failing to set the connection up (`NoResources`).
        rejects_other,
        /// Idle server connections this node closed to make room for a new connect
        /// (`ServerOptions::evict_idle`).
        evictions,
        /// Server connections this node closed after `ServerOptions::idle_timeout_ms` idle.
        idle_closes,
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
        /// Calls that came with Read chunks (server; Position-Zero long calls included).
        read_chunk_calls,
        /// Calls that offered Write chunks (server).
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
    }
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
        if self.polls == 0 {
            0.0
        } else {
            self.busy_polls as f64 / self.polls as f64
        }
    }
}

pub(crate) fn node_stats() -> (NodeStatsWriter, NodeStats) {
    let c = Arc::new(CachePadded::new(NodeCounters::default()));
    (NodeStatsWriter(Arc::clone(&c)), NodeStats(c))
}

impl NodeStatsWriter {
    pub(crate) fn poll(&self, busy: bool) {
        bump(&self.0.polls, 1);
        if busy {
            bump(&self.0.busy_polls, 1);
        }
    }
    pub(crate) fn completions(&self, n: u64) {
        bump(&self.0.cq_bursts, 1);
        bump(&self.0.completions, n);
    }
    pub(crate) fn stray(&self) {
        bump(&self.0.stray_completions, 1);
    }
    pub(crate) fn posted(&self, doorbells: u64, wrs: u64) {
        bump(&self.0.doorbells, doorbells);
        bump(&self.0.work_requests, wrs);
    }
    pub(crate) fn set_connections(&self, n: u64) {
        set(&self.0.connections, n);
    }
    pub(crate) fn established(&self) {
        bump(&self.0.established, 1);
    }
    pub(crate) fn set_worker(&self, ring_used: u64, overflow: u64) {
        set(&self.0.worker_ring_used, ring_used);
        set(&self.0.worker_overflow, overflow);
    }
    pub(crate) fn worker_ring_full(&self) {
        bump(&self.0.worker_ring_full, 1);
    }
    pub(crate) fn verbs_error(&self) {
        bump(&self.0.verbs_errors, 1);
    }
    /// A connect request was rejected with `reason`.
    pub(crate) fn rejected(&self, reason: rpcrdma_engine::proto::reject::RejectReason) {
        use rpcrdma_engine::proto::reject::RejectReason as R;
        match reason {
            R::ServerFull => bump(&self.0.rejects_full, 1),
            R::PeerLimit => bump(&self.0.rejects_peer_limit, 1),
            _ => bump(&self.0.rejects_other, 1),
        }
    }
    pub(crate) fn evicted(&self) {
        bump(&self.0.evictions, 1);
    }
    pub(crate) fn idle_closed(&self) {
        bump(&self.0.idle_closes, 1);
    }
    /// The shared receive queue's gauges: (depth, posted, held, low-water events, octets).
    pub(crate) fn set_srq(&self, depth: u64, posted: u64, held: u64, low: u64, bytes: u64) {
        set(&self.0.srq_depth, depth);
        set(&self.0.srq_posted, posted);
        set(&self.0.srq_held, held);
        if held > get(&self.0.srq_held_max) {
            set(&self.0.srq_held_max, held);
        }
        set(&self.0.srq_low_water, low);
        set(&self.0.srq_bytes, bytes);
    }
}

/// Connection counters: the writer half stays with the connection on its reactor.
pub(crate) struct ConnStatsWriter(Arc<CachePadded<ConnCounters>>);

/// A reader of a connection's counters (any thread).
#[derive(Clone)]
pub struct ConnStats(Arc<CachePadded<ConnCounters>>);

impl ConnStats {
    /// The counters now.
    pub fn snapshot(&self) -> ConnSnapshot {
        self.0.snapshot()
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
    let c = Arc::new(CachePadded::new(ConnCounters::default()));
    (ConnStatsWriter(Arc::clone(&c)), ConnStats(c))
}

impl ConnStatsWriter {
    /// A reader of this block.
    pub(crate) fn reader(&self) -> ConnStats {
        ConnStats(Arc::clone(&self.0))
    }
    pub(crate) fn call(&self, bytes_out: u64) {
        bump(&self.0.calls, 1);
        bump(&self.0.bytes_out, bytes_out);
    }
    pub(crate) fn call_in(&self, bytes_in: u64) {
        bump(&self.0.calls, 1);
        bump(&self.0.bytes_in, bytes_in);
    }
    pub(crate) fn reply_in(&self, bytes_in: u64) {
        bump(&self.0.replies, 1);
        bump(&self.0.bytes_in, bytes_in);
    }
    pub(crate) fn reply_out(&self, bytes_out: u64) {
        bump(&self.0.replies, 1);
        bump(&self.0.bytes_out, bytes_out);
    }
    pub(crate) fn error(&self) {
        bump(&self.0.errors, 1);
    }
    pub(crate) fn credits(&self, in_use: u64, granted: u64) {
        set(&self.0.credits_in_use, in_use);
        set(&self.0.credits_granted, granted);
    }
    pub(crate) fn queued(&self, n: u64) {
        set(&self.0.queued, n);
    }
    pub(crate) fn retransmit(&self) {
        bump(&self.0.retransmits, 1);
    }
    pub(crate) fn reconnect(&self) {
        bump(&self.0.reconnects, 1);
    }
    pub(crate) fn lost(&self) {
        bump(&self.0.connection_losses, 1);
    }
    pub(crate) fn connect_failed(&self) {
        bump(&self.0.connect_failures, 1);
    }
    pub(crate) fn version(&self, v: u64) {
        set(&self.0.rdma_version, v);
    }
    pub(crate) fn back_call(&self, bytes_out: u64) {
        bump(&self.0.back_calls, 1);
        bump(&self.0.bytes_out, bytes_out);
    }
    pub(crate) fn back_call_in(&self, bytes_in: u64) {
        bump(&self.0.back_calls, 1);
        bump(&self.0.bytes_in, bytes_in);
    }
    pub(crate) fn back_reply(&self, bytes: u64, incoming: bool) {
        bump(&self.0.back_replies, 1);
        if incoming {
            bump(&self.0.bytes_in, bytes);
        } else {
            bump(&self.0.bytes_out, bytes);
        }
    }
    pub(crate) fn back_error(&self) {
        bump(&self.0.back_errors, 1);
    }
    pub(crate) fn back_retransmit(&self) {
        bump(&self.0.back_retransmits, 1);
    }
    pub(crate) fn back_gauges(&self, in_flight: u64, queued: u64) {
        set(&self.0.back_in_flight, in_flight);
        set(&self.0.back_queued, queued);
    }
    pub(crate) fn session_expired(&self) {
        bump(&self.0.sessions_expired, 1);
    }
    pub(crate) fn remote_invalidation(&self) {
        bump(&self.0.remote_invalidations, 1);
    }
    pub(crate) fn reply_chunk_reply(&self) {
        bump(&self.0.reply_chunk_replies, 1);
    }
    /// A call arrived with these chunks (server).
    pub(crate) fn call_chunks(&self, t: &crate::call::CallTransport, write_chunks: u8) {
        if t.read_segments > 0 {
            bump(&self.0.read_chunk_calls, 1);
        }
        if write_chunks > 0 {
            bump(&self.0.write_chunk_calls, 1);
        }
        if t.reply_chunk.is_some() {
            bump(&self.0.reply_chunk_calls, 1);
        }
        if t.position_zero {
            bump(&self.0.long_calls, 1);
        }
    }
    pub(crate) fn send_invalidates(&self, n: u64) {
        bump(&self.0.send_invalidates, n);
    }
    pub(crate) fn kicked(&self) {
        bump(&self.0.kicked, 1);
    }
    pub(crate) fn evicted(&self) {
        bump(&self.0.evictions, 1);
    }
    pub(crate) fn idle_closed(&self) {
        bump(&self.0.idle_closes, 1);
    }
}
