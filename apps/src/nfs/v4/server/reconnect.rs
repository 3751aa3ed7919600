//! NFSv4.1 clients reconnecting (RFC 8881 §2.10.6.2, §2.10.13, §18.34): a lost back channel
//! reported, and the server-side fault that makes a client reconnect.
//!
//! Normal operation: a session's fore channel follows its client to any connection (state
//! protection SP4_NONE: a SEQUENCE on a new connection binds it implicitly), and its slot
//! table is the session's, not the connection's, so a request retransmitted on the new
//! connection with its slot's sequence id gets the reply cached for it
//! ([`super::session::sequence`]) and nothing runs twice. The back channel is bound to one
//! connection; before every SEQUENCE, [`Nfs41::check_back_channels`] asks whether the
//! connections the client's back channels are bound to still stand, and marks those that do
//! not down, so the SEQUENCE reply carries SEQ4_STATUS_CB_PATH_DOWN_SESSION (and
//! SEQ4_STATUS_CB_PATH_DOWN when no session of the client has one left): the client answers
//! with BIND_CONN_TO_SESSION for the back channel on its new connection, which brings it up
//! again and probes it with CB_NULL. Recalls that could not reach the client while its back
//! channel was down are sent again on the one just bound (or created): the holder learns of
//! them at once instead of losing its delegation to revocation after the lease.
//!
//! Recovery: with [`Nfs41::set_drop_every`] the server closes the connection instead of
//! answering every Nth COMPOUND whose reply it cached in a slot (after running it): the
//! fault a reconnecting client must survive, as `--drop-every` injects it for NFSv3. A
//! retransmission answered from the slot is not counted, so it always gets through.

use std::sync::atomic::{AtomicU64, Ordering};

use super::deleg::{recall_call, Recall};
use super::Nfs41;

/// The COMPOUNDs a server drops the connection after (fault injection).
#[derive(Debug, Default)]
pub struct Drops {
    /// Drop after every Nth cached reply (0: never).
    every: AtomicU64,
    /// Cached replies counted.
    seen: AtomicU64,
    /// Connections dropped.
    dropped: AtomicU64,
}

impl Drops {
    /// Whether to drop the connection after a COMPOUND whose reply was cached.
    pub fn after_cached(&self) -> bool {
        // Relaxed: a fault-injection count, not ordering anything.
        let every = self.every.load(Ordering::Relaxed);
        if every == 0 {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n % every != 0 {
            return false;
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Connections dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Nfs41 {
    /// Closes the connection instead of answering every `n`th COMPOUND whose reply a slot
    /// keeps (0: never); the count starts again.
    pub fn set_drop_every(&self, n: u64) {
        self.drops.seen.store(0, Ordering::Relaxed);
        self.drops.every.store(n, Ordering::Relaxed);
    }

    /// Whether connection `conn` can still carry backward calls: asked of the configured
    /// [`Callbacks`](super::deleg::Callbacks), or of the connection's backchannel handle.
    fn back_alive(&self, conn: u64) -> bool {
        match &self.config().callbacks {
            Some(cbs) => cbs.alive(conn),
            None => self.backs.alive(conn),
        }
    }

    /// Sends CB_RECALL again, on the back channel just bound to session `sid` (or created
    /// with it), for the delegations of its client that were recalled and not returned.
    pub fn resend_recalls(&self, sid: [u8; 16]) {
        let sends: Vec<Recall> = {
            let mut s = self.state();
            let Some(cl) = s.sessions.get(&sid).and_then(|v| s.clients.get(&v.client)) else {
                return;
            };
            let pending: Vec<[u8; 12]> = cl
                .delegs
                .iter()
                .filter(|o| s.delegs.get(*o).is_some_and(|d| d.recalled_ms.is_some()))
                .copied()
                .collect();
            pending
                .iter()
                .filter_map(|o| recall_call(&mut s, o))
                .collect()
        };
        self.send_recalls(sends);
    }

    /// Marks down the back channels of the client of session `sid` whose connection is gone
    /// (run before SEQUENCE reports `sr_status_flags`). The client's sessions are looked at
    /// one at a time, so that nothing is collected (no allocation per SEQUENCE) and no
    /// connection is asked under the state lock.
    pub fn check_back_channels(&self, sid: &[u8; 16]) {
        let mut i = 0;
        loop {
            let (bound, more) = {
                let s = self.state();
                let Some(cl) = s.sessions.get(sid).and_then(|v| s.clients.get(&v.client)) else {
                    return;
                };
                let Some(x) = cl.sessions.get(i) else {
                    return;
                };
                let conn = s.sessions.get(x).and_then(|v| v.cb_conn());
                (conn.map(|c| (*x, c)), i + 1 < cl.sessions.len())
            };
            if let Some((x, conn)) = bound.filter(|(_, c)| !self.back_alive(*c)) {
                let mut s = self.state();
                if let Some(v) = s.sessions.get_mut(&x) {
                    if v.back_conn == Some(conn) {
                        v.cb_down = true;
                    }
                }
            }
            if !more {
                return;
            }
            i += 1;
        }
    }
}
