//! A server's connection limits: shares per peer address (`ServerOptions::max_conns_per_peer`)
//! and in all (`ServerOptions::max_connections`, over every reactor of the server).
//!
//! Normal operation: a connect request takes one of the server's shares and one of its peer IP
//! address's ([`PeerTable::admit`]) before it gets a slot; the [`PeerSlot`] it receives moves
//! into the connection and is dropped when the connection closes, which gives both back. The
//! table is touched on accept and teardown only (a mutex, never on the data path).
//!
//! Connections are counted per address whatever the limits: eviction (`crate::accept`) asks
//! [`PeerTable::count`] to prefer the connections of the address holding the most. At the
//! server's total, a request may take a share beyond it ([`PeerTable::admit_beyond_total`])
//! only while a connection is being evicted for it, whose share comes back at its teardown:
//! the total is exceeded by at most the evictions in flight.
//!
//! Recovery: a request over a limit gets no share and is rejected by its caller with the
//! reason [`PeerTable::admit`] returns
//! ([`RejectReason::PeerLimit`](crate::RejectReason::PeerLimit) or
//! [`RejectReason::ConnectionLimit`](crate::RejectReason::ConnectionLimit)); a request or
//! connection dropped on any path (failed accept, reactor stopping, node dropped) drops its
//! shares with it, so shares cannot leak. A limit of 0 counts nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rpcrdma_engine::proto::reject::RejectReason;

/// Connection counts a victim choice weighs (server-wide, per address).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shares {
    /// Connections the requester's address will hold with the request.
    pub mine: u32,
    /// The fair share (connections over addresses, rounded up) when some address holds more
    /// than it; `None` when none does.
    pub over: Option<u32>,
}

/// Shares held: per peer address and in all.
#[derive(Debug, Default)]
struct Held {
    by_peer: HashMap<IpAddr, u32>,
    total: u32,
}

/// Connections (and connect requests being accepted) per peer address and in all.
#[derive(Debug)]
pub(crate) struct PeerTable {
    per_peer: u32,
    total: u32,
    held: Mutex<Held>,
}

/// One connection's shares of the limits; dropping it gives them back.
pub(crate) struct PeerSlot {
    table: Arc<PeerTable>,
    ip: IpAddr,
}

impl PeerTable {
    /// A table allowing `per_peer` connections per address and `total` in all (0: no limit).
    pub(crate) fn new(per_peer: u32, total: u32) -> PeerTable {
        PeerTable {
            per_peer,
            total,
            held: Mutex::new(Held::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a share for `ip`, or says which limit it is at (the server's total first).
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<PeerSlot, RejectReason> {
        self.take(ip, true)
    }

    /// Takes a share for `ip` even at the server's total (the caller evicts a connection for
    /// it), or refuses it at the per-address limit.
    pub(crate) fn admit_beyond_total(
        self: &Arc<Self>,
        ip: IpAddr,
    ) -> Result<PeerSlot, RejectReason> {
        self.take(ip, false)
    }

    fn take(self: &Arc<Self>, ip: IpAddr, total: bool) -> Result<PeerSlot, RejectReason> {
        let mut h = self.lock();
        if total && self.total > 0 && h.total >= self.total {
            return Err(RejectReason::ConnectionLimit);
        }
        let n = h.by_peer.entry(ip).or_insert(0);
        if self.per_peer > 0 && *n >= self.per_peer {
            return Err(RejectReason::PeerLimit);
        }
        *n += 1;
        h.total += 1;
        Ok(PeerSlot {
            table: Arc::clone(self),
            ip,
        })
    }

    /// Shares `ip` holds now (its connections and requests being accepted, server-wide).
    pub(crate) fn count(&self, ip: IpAddr) -> u32 {
        self.lock().by_peer.get(&ip).copied().unwrap_or(0)
    }

    /// What a victim choice for a request from `ip` (holding its share already) weighs: the
    /// shares `ip` holds, and the fair share (shares over addresses, rounded up) when some
    /// address holds more than it. One pass over the addresses (accept path only).
    pub(crate) fn shares(&self, ip: IpAddr) -> Shares {
        let h = self.lock();
        let mine = h.by_peer.get(&ip).copied().unwrap_or(0);
        let addrs = h.by_peer.len().max(1) as u32;
        let fair = h.total.div_ceil(addrs);
        let most = h.by_peer.values().copied().max().unwrap_or(0);
        Shares {
            mine,
            over: (most > fair).then_some(fair),
        }
    }

    /// Shares `ip` holds now, and shares held in all.
    #[cfg(test)]
    fn held(&self, ip: IpAddr) -> (u32, u32) {
        let h = self.lock();
        (h.by_peer.get(&ip).copied().unwrap_or(0), h.total)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut h = self.table.lock();
        h.total = h.total.saturating_sub(1);
        if let Some(n) = h.by_peer.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                h.by_peer.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_share_over_the_limit_until_one_is_given_back() {
        let t = Arc::new(PeerTable::new(2, 0));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = t.admit(a).expect("first");
        let _s2 = t.admit(a).expect("second");
        assert_eq!(
            t.admit(a).err(),
            Some(RejectReason::PeerLimit),
            "third share of one address"
        );
        let _other = t.admit(b).expect("another address");
        drop(s1);
        assert_eq!(t.held(a), (1, 2));
        let _s3 = t.admit(a).expect("a share was given back");
        assert_eq!(t.admit(a).err(), Some(RejectReason::PeerLimit));
    }

    #[test]
    fn rejects_connections_over_the_total_whatever_the_address() {
        let t = Arc::new(PeerTable::new(2, 3));
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        let s1 = t.admit(ip(1)).expect("first");
        let _s2 = t.admit(ip(2)).expect("second");
        let _s3 = t.admit(ip(2)).expect("third");
        assert_eq!(t.admit(ip(4)).err(), Some(RejectReason::ConnectionLimit));
        // The total is checked first: an address at its own limit hears about the server's.
        assert_eq!(t.admit(ip(2)).err(), Some(RejectReason::ConnectionLimit));
        drop(s1);
        assert_eq!(t.held(ip(1)), (0, 2));
        let _s4 = t.admit(ip(4)).expect("a share was given back");
        assert_eq!(t.admit(ip(5)).err(), Some(RejectReason::ConnectionLimit));
    }

    #[test]
    fn accepts_any_number_without_a_limit() {
        let t = Arc::new(PeerTable::new(0, 0));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let v: Vec<_> = (0..100).map(|_| t.admit(a).expect("share")).collect();
        assert_eq!(t.held(a), (100, 100), "counted per address without a limit");
        drop(v);
        assert_eq!(t.held(a), (0, 0));
    }

    #[test]
    fn accepts_a_share_beyond_the_total_only_within_the_per_peer_limit() {
        let t = Arc::new(PeerTable::new(2, 1));
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        let _s1 = t.admit(ip(1)).expect("first");
        assert_eq!(t.admit(ip(2)).err(), Some(RejectReason::ConnectionLimit));
        let _s2 = t.admit_beyond_total(ip(1)).expect("beyond the total");
        assert_eq!(
            t.admit_beyond_total(ip(1)).err(),
            Some(RejectReason::PeerLimit),
            "the per-address limit still holds"
        );
        assert_eq!((t.count(ip(1)), t.count(ip(2))), (2, 0));
    }
}
