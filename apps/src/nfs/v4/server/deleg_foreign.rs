//! NFSv4.1 delegations against NFSv3 and NLM access to the same files (RFC 8881 §10.4.6 asks
//! the server to recall a delegation when any conflicting access is made, whatever the
//! protocol), and when delegations are not granted, as Linux nfsd decides them through the
//! leases behind its delegations.
//!
//! Normal operation: before an NFSv3 procedure or an NLM request touches a file, it reports
//! the access ([`Gate::foreign_access`], through [`crate::nfs::cross_locks::CrossLocks`]):
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
//! one stamp and one load of the number of delegations held in the file's slot ([`Slots`]);
//! only when one is held there does it take the state mutex and look at the file's. An access
//! and a grant that run at once cannot both miss each other: the access stamps the slot, then
//! reads its count; the grant raises the count, then reads the stamp (all sequentially
//! consistent, [`Gate::grant_allowed`]), so at least one of them sees the other. Two files
//! that share a slot (a hash collision) only cost the other file a look at the state table,
//! or its delegations for a while.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::nfs::cross_locks::DelegView;
use crate::nfs::types::Fh;

use super::{Clock, Nfs41};

/// How long a change from outside NFSv4.1 keeps delegations off the file (ms).
pub const FOREIGN_MS: u64 = 2_000;
/// How long a recall keeps delegations off the file (ms; Linux nfsd blocks 30 to 60 s).
pub const RECALL_MS: u64 = 30_000;
/// Slots of the table (a power of two).
const SLOTS: usize = 1024;

/// Files by a keyed hash of their name (export and handle): how many delegations of the
/// files in each slot are held, and until when none (or no write delegation) may be granted
/// there.
pub struct Slots {
    /// Keys the hash: a client cannot aim its accesses at another file's slot.
    key: RandomState,
    /// Delegations held (kept by the state table as it adds and removes them).
    held: Box<[AtomicU32]>,
    /// Delegations held in all the slots.
    total: AtomicU64,
    /// No delegation before this time (ms).
    any: Box<[AtomicU64]>,
    /// No write delegation before this time (ms).
    write: Box<[AtomicU64]>,
}

impl Default for Slots {
    fn default() -> Self {
        Slots {
            key: RandomState::new(),
            held: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU64::new(0),
            any: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            write: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots").field("slots", &SLOTS).finish()
    }
}

impl Slots {
    fn slot(&self, export: [u8; 4], fh: &[u8]) -> usize {
        let mut h = self.key.build_hasher();
        h.write(&export);
        h.write(fh);
        h.finish() as usize & (SLOTS - 1)
    }

    /// A delegation of (`export`, `fh`) entered the state table (`up`) or left it.
    pub fn count(&self, export: [u8; 4], fh: &Fh, up: bool) {
        let c = &self.held[self.slot(export, fh.as_bytes())];
        // SeqCst: the raise pairs with `foreign_access`'s load of the count after its stamp
        // (each side stores, then loads what the other stores; see the module's recovery
        // paragraph). Never below zero: every fall follows its raise under the state mutex.
        if up {
            c.fetch_add(1, Ordering::SeqCst);
            // Relaxed: a hint that lets a caller skip resolving a name (`any_held`).
            self.total.fetch_add(1, Ordering::Relaxed);
        } else {
            c.fetch_sub(1, Ordering::SeqCst);
            self.total.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
impl Slots {
    /// Panics unless the counts are those of `delegs` (the files of the delegations held).
    pub fn check(&self, delegs: impl Iterator<Item = ([u8; 4], Fh)>) {
        let mut want = vec![0u32; SLOTS];
        for (export, fh) in delegs {
            want[self.slot(export, fh.as_bytes())] += 1;
        }
        let got: Vec<u32> = self.held.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(got, want, "delegations per slot");
        let total: u64 = want.iter().map(|&n| u64::from(n)).sum();
        assert_eq!(self.total.load(Ordering::SeqCst), total, "delegations held");
    }
}

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

    /// Keeps delegations (`all`) or write delegations off the files of slot `i` for `ms`.
    fn block(&self, i: usize, all: bool, ms: u64) {
        let t = if all {
            &self.slots.any
        } else {
            &self.slots.write
        };
        // SeqCst: pairs with the loads of `grant_allowed` after a grant raised the count.
        t[i].fetch_max((self.clock)().saturating_add(ms), Ordering::SeqCst);
    }

    /// A recall of a delegation of the file: no new one for [`RECALL_MS`].
    pub fn recalled(&self, export: [u8; 4], fh: &Fh) {
        self.block(self.slots.slot(export, fh.as_bytes()), true, RECALL_MS);
    }

    /// Whether a delegation (a write delegation: `write`) of file (`export`, `fh`) may be
    /// granted now. Called with the delegation already in the state table (its slot's count
    /// raised), so that an access running at once sees it or is seen here.
    pub fn grant_allowed(&self, export: [u8; 4], fh: &Fh, write: bool) -> bool {
        let i = self.slots.slot(export, fh.as_bytes());
        let now = (self.clock)();
        // SeqCst: pairs with `block`'s fetch_max.
        let any = self.slots.any[i].load(Ordering::SeqCst);
        let w = self.slots.write[i].load(Ordering::SeqCst);
        now >= any && (!write || now >= w)
    }

    /// [`DelegView::foreign_access`] for this server.
    pub fn foreign_access(&self, export: [u8; 4], fh: &[u8], write: bool) -> bool {
        let i = self.slots.slot(export, fh);
        self.block(i, write, FOREIGN_MS);
        // SeqCst: pairs with the raise of the count by a grant before it reads the stamp
        // just written.
        if self.slots.held[i].load(Ordering::SeqCst) == 0 {
            return false;
        }
        let (Some(srv), Some(fh)) = (self.srv.upgrade(), Fh::new(fh)) else {
            return false;
        };
        // A change conflicts with every delegation, a read with write delegations.
        srv.recall_held(export, &fh, None, !write)
    }
}

impl DelegView for Gate {
    fn foreign_access(&self, export: [u8; 4], fh: &[u8], write: bool) -> bool {
        Gate::foreign_access(self, export, fh, write)
    }

    fn any_held(&self) -> bool {
        // Relaxed: see `Slots::count`.
        self.slots.total.load(Ordering::Relaxed) > 0
    }
}
