//! A server's table of connection counters: the live connections' blocks, a bounded history of
//! closed connections' last snapshots, and a running total of everything closed.
//!
//! Normal operation: the reactor that accepts a connection [`ConnTable::open`]s its counter
//! block (taking a sequence number, so listings keep accept order); when the connection is
//! dropped its block is [`ConnTable::close`]d: its final snapshot is added to the closed total
//! (gauges zeroed: a closed connection holds no credit and queues nothing) and kept in a
//! history of the last [`CLOSED_KEPT`] closed connections. Memory is bounded by the live
//! connections plus the history, whatever the churn: an appliance whose clients reconnect all
//! day keeps the same footprint (before, every accepted connection's block stayed forever).
//!
//! Recovery: nothing to recover. The table is behind a mutex taken on accept, on teardown and by
//! readers — never per RPC.

use crate::api_stats::{ConnSnapshot, ConnStats};
use std::collections::VecDeque;

/// How many closed connections' last snapshots a server keeps for
/// [`Server::connection_stats`](crate::Server::connection_stats).
pub const CLOSED_KEPT: usize = 128;

/// Live counter blocks, recent closed snapshots and the closed total (see the module doc).
#[derive(Default)]
pub(crate) struct ConnTable {
    next_seq: u64,
    live: Vec<(u64, ConnStats)>,
    closed: VecDeque<(u64, ConnSnapshot)>,
    closed_total: ConnSnapshot,
}

/// A connection's final snapshot as it counts in totals: gauges are zero once it is gone.
fn without_gauges(mut s: ConnSnapshot) -> ConnSnapshot {
    s.credits_in_use = 0;
    s.credits_granted = 0;
    s.queued = 0;
    s.back_in_flight = 0;
    s.back_queued = 0;
    s.rdma_version = 0;
    s.recv_posted = 0;
    s
}

impl ConnTable {
    /// Registers a new connection's counter block.
    pub(crate) fn open(&mut self, stats: ConnStats) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.live.push((seq, stats));
    }

    /// Retires a connection's block (no-op if it is not live): its last snapshot goes into the
    /// closed total and the bounded history.
    pub(crate) fn close(&mut self, stats: &ConnStats) {
        let Some(i) = self.live.iter().position(|(_, s)| s.same_block(stats)) else {
            return;
        };
        // `remove`, not `swap_remove`: `live` stays in accept order for `snapshots`.
        let (seq, s) = self.live.remove(i);
        let last = s.snapshot();
        self.closed_total.accumulate(&without_gauges(last));
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back((seq, last));
    }

    /// Snapshots of the kept closed connections and of every live one, in accept order.
    pub(crate) fn snapshots(&self) -> Vec<ConnSnapshot> {
        let mut out = Vec::with_capacity(self.closed.len() + self.live.len());
        let mut closed = self.closed.iter().peekable();
        for (seq, s) in &self.live {
            while let Some((_, c)) = closed.next_if(|(cs, _)| cs < seq) {
                out.push(*c);
            }
            out.push(s.snapshot());
        }
        out.extend(closed.map(|(_, c)| *c));
        out
    }

    /// The live connections' counter blocks, in accept order.
    pub(crate) fn live(&self) -> Vec<ConnStats> {
        self.live.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Every connection ever accepted, summed: the closed total plus the live blocks (live
    /// gauges included; `rdma_version` zero, as it is not meaningful summed).
    pub(crate) fn totals(&self) -> ConnSnapshot {
        let mut t = self.closed_total;
        for (_, s) in &self.live {
            t.accumulate(&s.snapshot());
        }
        t.rdma_version = 0;
        t
    }

    /// Live blocks and kept closed snapshots (for tests of the bound).
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        (self.live.len(), self.closed.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_stats::conn_stats;

    #[test]
    fn accepts_churn_with_bounded_memory_and_exact_totals() {
        let mut t = ConnTable::default();
        let keep = conn_stats();
        keep.0.call_in(5);
        t.open(keep.1.clone());
        for i in 0..10_000u64 {
            let (w, r) = conn_stats();
            w.call_in(i);
            w.credits(3, 32);
            t.open(r.clone());
            t.close(&r);
        }
        assert_eq!(t.held(), (1, CLOSED_KEPT));
        let tot = t.totals();
        assert_eq!(tot.calls, 10_001);
        assert_eq!(tot.bytes_in, (0..10_000u64).sum::<u64>() + 5);
        // Gauges of closed connections do not count.
        assert_eq!(tot.credits_granted, 0);
        assert_eq!(tot.credits_in_use, 0);
    }

    #[test]
    fn accepts_listing_in_accept_order_with_closed_ones_kept() {
        let mut t = ConnTable::default();
        let blocks: Vec<_> = (0..4u64)
            .map(|i| {
                let (w, r) = conn_stats();
                w.call_in(i + 1);
                t.open(r.clone());
                (w, r)
            })
            .collect();
        t.close(&blocks[1].1);
        t.close(&blocks[3].1);
        // Closing twice changes nothing.
        t.close(&blocks[3].1);
        let order: Vec<u64> = t.snapshots().iter().map(|s| s.bytes_in).collect();
        assert_eq!(order, [1, 2, 3, 4]);
        assert_eq!(t.totals().calls, 4);
        assert_eq!(t.held(), (2, 2));
    }
}
