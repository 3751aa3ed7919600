//! NFSv4.1 write delegations (RFC 8881 §10.2, §10.4, §10.4.3), off unless
//! [`Nfs41::set_write_delegations`] turns them on (`--v4-write-delegations`).
//!
//! Normal operation: an OPEN for write (or read and write), denying nothing, of a file no
//! other client has open and no one holds a delegation of, by a client with a usable back
//! channel, is granted OPEN_DELEGATE_WRITE (no space limit: NFS_LIMIT_SIZE of all ones, as
//! Linux nfsd sends). The holder reads and writes through the delegation stateid. Another
//! client's OPEN of the file (for read too), its REMOVE or RENAME of it, its SETATTR, an NFSv3
//! READ ([`super::deleg_foreign`]), and another client's GETATTR asking for the change attribute or the size (which the holder may
//! have changed in its cache: RFC 8881 §10.4.3 lets the server recall rather than send
//! CB_GETATTR) send CB_RECALL as for a read delegation ([`super::deleg`]) and are answered
//! NFS4ERR_DELAY until the DELEGRETURN.
//!
//! Recovery: as for read delegations: not returned within the lease after the recall, the
//! delegation is revoked; bounded per client and in all. A write delegation is not recalled
//! for I/O with the anonymous stateid, nor for a local process's change.

use std::sync::atomic::Ordering;

use rpcrdma_engine::xdr::XdrReader;

use super::xdr::Status;
use super::{Compound, Nfs41};

/// Attribute bits a GETATTR conflicts with a write delegation on: change (3) and size (4).
const CHANGE_OR_SIZE: u32 = (1 << 3) | (1 << 4);

impl Nfs41 {
    /// Grants write delegations from the next OPEN on (`on`), or none.
    pub fn set_write_delegations(&self, on: bool) {
        // Relaxed: a setting read by later OPENs, ordering nothing else.
        self.write_delegs.store(on, Ordering::Relaxed);
    }

    /// Whether write delegations are granted.
    pub fn write_delegations(&self) -> bool {
        self.write_delegs.load(Ordering::Relaxed) && self.delegations()
    }

    /// Grants delegations from the next OPEN on (`on`: read ones, and write ones when
    /// [`Nfs41::set_write_delegations`] turned them on), or none at all (what Linux's
    /// `fs.leases-enable = 0` does to its nfsd): for an export that processes on the server
    /// host or other servers change, whose changes recall no delegation (`--v4-no-delegations`).
    pub fn set_delegations(&self, on: bool) {
        // Relaxed: a setting read by later OPENs, ordering nothing else.
        self.no_delegs.store(!on, Ordering::Relaxed);
    }

    /// Whether delegations are granted.
    pub fn delegations(&self) -> bool {
        !self.no_delegs.load(Ordering::Relaxed)
    }
}

/// GETATTR of the change attribute or size of a file another client holds a write delegation
/// of: recalled, NFS4ERR_DELAY until it is returned. The arguments are looked at on a copy of
/// `r` (GETATTR reads them; one that does not decode is its to refuse).
pub fn getattr_conflict(c: &Compound<'_>, r: &XdrReader<'_>) -> Result<(), Status> {
    let Some(cur) = c.cur.as_ref() else {
        return Ok(());
    };
    let mut peek = *r;
    let first = match peek.get_count(8) {
        Ok(n) if n > 0 => peek.get_u32().unwrap_or(0),
        _ => 0,
    };
    if first & CHANGE_OR_SIZE == 0 {
        return Ok(());
    }
    let client = c.client.unwrap_or(0);
    let held = {
        let s = c.srv.state();
        let held = s
            .delegs_on(cur.share.id, &cur.fh)
            .any(|(_, d)| d.write && d.client != client);
        held
    };
    if !held {
        return Ok(());
    }
    super::deleg::recall_matching(c, cur.share.id, &cur.fh, client, true)
}
