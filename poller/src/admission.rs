//! Per-peer connection shares of a server (`ServerOptions::max_conns_per_peer`).
//!
//! Normal operation: a connect request takes one of its peer IP address's shares
//! ([`PeerTable::admit`]) before it gets a slot; the [`PeerSlot`] it receives moves into the
//! connection and is dropped when the connection closes, which gives the share back. The table
//! is touched on accept and teardown only (a mutex, never on the data path).
//!
//! Recovery: a request over the limit gets no share and is rejected with
//! [`RejectReason::PeerLimit`](crate::RejectReason::PeerLimit) by its caller; a request or
//! connection dropped on any path (failed accept, reactor stopping, node dropped) drops its
//! share with it, so shares cannot leak. A limit of 0 counts nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections (and connect requests being accepted) per peer address.
#[derive(Debug)]
pub(crate) struct PeerTable {
    limit: u32,
    counts: Mutex<HashMap<IpAddr, u32>>,
}

/// One connection's share of its peer address's limit; dropping it gives the share back.
pub(crate) struct PeerSlot {
    table: Arc<PeerTable>,
    ip: IpAddr,
    counted: bool,
}

impl PeerTable {
    /// A table allowing `limit` connections per address (0: no limit).
    pub(crate) fn new(limit: u32) -> PeerTable {
        PeerTable {
            limit,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one of `ip`'s shares; `None` when it holds the limit already.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        if self.limit > 0 {
            let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            let n = m.entry(ip).or_insert(0);
            if *n >= self.limit {
                return None;
            }
            *n += 1;
        }
        Some(PeerSlot {
            table: Arc::clone(self),
            ip,
            counted: self.limit > 0,
        })
    }

    /// Shares `ip` holds now.
    #[cfg(test)]
    fn held(&self, ip: IpAddr) -> u32 {
        let m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut m = self.table.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_share_over_the_limit_until_one_is_given_back() {
        let t = Arc::new(PeerTable::new(2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = t.admit(a).expect("first");
        let _s2 = t.admit(a).expect("second");
        assert!(t.admit(a).is_none(), "third share of one address");
        let _other = t.admit(b).expect("another address");
        drop(s1);
        assert_eq!(t.held(a), 1);
        let _s3 = t.admit(a).expect("a share was given back");
        assert!(t.admit(a).is_none());
    }

    #[test]
    fn accepts_any_number_without_a_limit() {
        let t = Arc::new(PeerTable::new(0));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let v: Vec<_> = (0..100).map(|_| t.admit(a).expect("share")).collect();
        assert_eq!(t.held(a), 0, "nothing counted");
        drop(v);
    }
}
