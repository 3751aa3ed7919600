//! NFSv4.1 delegations against NFSv3 and NLM access to the same files (RFC 8881 §10.4.6 asks
//! the server to recall a delegation when any conflicting access is made, whatever the
//! protocol), and when delegations are not granted, as Linux nfsd decides them through the
//! leases behind its delegations.
//!
//! Normal operation: before an NFSv3 procedure or an NLM request touches a file, it reports
//! the access ([`DelegView::foreign_access`] of the [`Gate`], through [`crate::nfs::cross_locks::CrossLocks`]):
//! a change (WRITE, SETATTR, a truncating CREATE, REMOVE, RENAME, LINK, an exclusive NLM lock)
//! recalls every delegation of the file, a read (READ, a shared NLM lock) the write
//! delegations; the caller is told to try later while any is held (Linux nfsd's
//! `nfsd_open_break_lease` and `notify_change` answer NFS3ERR_JUKEBOX, its lockd drops the
//! request). Each access also marks the file in a small table of stamps keyed by a hash of
//! the file: no delegation is granted on a file changed from outside for [`FOREIGN_MS`], nor
//! a write delegation on one read from outside (Linux nfsd's file cache keeps such a file
//! open about that long, and an open file gets no lease that conflicts with it); no
//! delegation on a file whose delegation was recalled, for whatever reason, for [`RECALL_MS`]
//! (Linux nfsd's `block_delegations`). A file with an NLM lock gets no delegation that lock
//! would conflict with (lockd holds it open for as long).
//!
//! Recovery: nothing is kept across a restart. The fast path of an access takes no mutex:
//! one stamp and one load of the number of delegations held in the file's slot
//! ([`super::deleg_slots`], whose handshake keeps an access and a grant running at once from
//! both missing each other); only when one is held there does it take the state mutex and look
//! at the file's.

use std::sync::{Arc, Weak};

use crate::nfs::cross_locks::DelegView;
use crate::nfs::types::Fh;

use super::deleg_slots::Slots;
use super::{Clock, Nfs41};

/// How long a change from outside NFSv4.1 keeps delegations off the file (ms).
pub const FOREIGN_MS: u64 = 2_000;
/// How long a recall keeps delegations off the file (ms; Linux nfsd blocks 30 to 60 s).
pub const RECALL_MS: u64 = 30_000;

/// Where NFSv3 and NLM meet this server's delegations.
pub struct Gate {
    slots: Arc<Slots>,
    clock: Clock,
    srv: Weak<Nfs41>,
}

impl Gate {
    /// The gate of server `srv`, whose state counts its delegations in `slots`.
    pub fn new(srv: Weak<Nfs41>, slots: Arc<Slots>, clock: Clock) -> Gate {
        Gate { slots, clock, srv }
    }

    /// A recall of a delegation of the file: no new one for [`RECALL_MS`].
    pub fn recalled(&self, export: [u8; 4], fh: &Fh) {
        let i = self.slots.slot(export, fh.as_bytes());
        self.slots
            .block(i, true, (self.clock)().saturating_add(RECALL_MS));
    }

    /// Whether a delegation (a write delegation: `write`) of file (`export`, `fh`) may be
    /// granted now. Called with the delegation already in the state table (its slot's count
    /// raised), so that an access running at once sees it or is seen here.
    pub fn grant_allowed(&self, export: [u8; 4], fh: &Fh, write: bool) -> bool {
        let i = self.slots.slot(export, fh.as_bytes());
        self.slots.admits(i, write, (self.clock)())
    }
}

impl DelegView for Gate {
    fn foreign_access(
        &self,
        export: [u8; 4],
        fh: &[u8],
        write: bool,
        allowed: &dyn Fn() -> bool,
    ) -> bool {
        let i = self.slots.slot(export, fh);
        let until = (self.clock)().saturating_add(FOREIGN_MS);
        if !self.slots.access(i, write, until) || !allowed() {
            return false;
        }
        let (Some(srv), Some(fh)) = (self.srv.upgrade(), Fh::new(fh)) else {
            return false;
        };
        // A change conflicts with every delegation, a read with write delegations.
        srv.recall_held(export, &fh, None, !write)
    }

    fn any_held(&self) -> bool {
        self.slots.any_held()
    }
}
