//! The table an NFSv3 or NLM access and an NFSv4.1 delegation grant meet in
//! ([`super::deleg_foreign`]): files by a keyed hash of their name (export and handle), and for
//! each slot how many delegations of its files are held and until when none (or no write
//! delegation) may be granted there.
//!
//! Normal operation: the state table counts each delegation in and out of its file's slot
//! ([`Slots::count`]); an access stamps its slot, then reads the slot's count
//! ([`Slots::access`]); a grant, its delegation already counted, reads the stamps
//! ([`Slots::admits`]). Store, sequentially consistent fence, load on each side: the two
//! fences are ordered one way or the other, and the side whose fence comes second loads after
//! the other's store is visible, so an access and a grant running at once cannot both miss each
//! other (the store-buffering handshake, as the poller's doorbell; `tests/loom_deleg_slots.rs`
//! model-checks it under `--cfg loom`, scripts/loom.sh).
//!
//! Recovery: nothing is kept across a restart. Two files that share a slot (a hash
//! collision) cost each other a look at the state table, or their delegations for a while.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::nfs::types::Fh;

/// Slots of the server's table (a power of two).
pub const SLOTS: usize = 8192;

/// The slots (see the module documentation).
pub struct Slots {
    /// Keys the hash: a client cannot aim its accesses at another file's slot.
    key: RandomState,
    /// Delegations held per slot.
    held: Box<[AtomicU32]>,
    /// Delegations held in all the slots.
    total: AtomicU64,
    /// No delegation before this time (ms).
    any: Box<[AtomicU64]>,
    /// No write delegation before this time (ms).
    write: Box<[AtomicU64]>,
}

impl Default for Slots {
    /// [`SLOTS`] slots.
    fn default() -> Self {
        Slots::new(SLOTS)
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("slots", &self.held.len())
            .finish()
    }
}

impl Slots {
    /// A table of `n` slots (rounded up to a power of two, at least one).
    pub fn new(n: usize) -> Slots {
        let n = n.max(1).next_power_of_two();
        Slots {
            key: RandomState::new(),
            held: (0..n).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU64::new(0),
            any: (0..n).map(|_| AtomicU64::new(0)).collect(),
            write: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The slot of file (`export`, `fh`).
    pub fn slot(&self, export: [u8; 4], fh: &[u8]) -> usize {
        let mut h = self.key.build_hasher();
        h.write(&export);
        h.write(fh);
        h.finish() as usize & (self.held.len() - 1)
    }

    /// A delegation of (`export`, `fh`) entered the state table (`up`) or left it.
    pub fn count(&self, export: [u8; 4], fh: &Fh, up: bool) {
        self.count_at(self.slot(export, fh.as_bytes()), up);
    }

    /// A delegation of a file of slot `i` entered the state table (`up`) or left it.
    pub fn count_at(&self, i: usize, up: bool) {
        let c = &self.held[i];
        // Relaxed: the raise is the grant's store of the handshake, ordered before its loads
        // by the fence of `admits`; the counts publish nothing else. Never below zero: every
        // fall follows its raise under the state mutex. `total` is a hint that lets a caller
        // skip resolving a name (`any_held`).
        if up {
            c.fetch_add(1, Ordering::Relaxed);
            self.total.fetch_add(1, Ordering::Relaxed);
        } else {
            c.fetch_sub(1, Ordering::Relaxed);
            self.total.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Keeps delegations (`all`) or write delegations off the files of slot `i` until
    /// `until` (ms).
    pub fn block(&self, i: usize, all: bool, until: u64) {
        let t = if all { &self.any[i] } else { &self.write[i] };
        // Relaxed: an access's store of the handshake is ordered before its load by the
        // fence of `access`; a recall's needs no order (the grants after it take the state
        // mutex the recall held).
        t.fetch_max(until, Ordering::Relaxed);
    }

    /// The access half of the handshake: [`Slots::block`], then whether a delegation of a
    /// file of slot `i` is held.
    pub fn access(&self, i: usize, all: bool, until: u64) -> bool {
        self.block(i, all, until);
        // SeqCst: pairs with the fence of `admits` (store, fence, load on both sides).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        self.held[i].load(Ordering::Relaxed) > 0
    }

    /// The grant half of the handshake, its delegation already counted: whether slot `i`
    /// lets a delegation (a write delegation: `write`) be granted at `now` (ms).
    pub fn admits(&self, i: usize, write: bool, now: u64) -> bool {
        // SeqCst: pairs with the fence of `access`.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        let any = self.any[i].load(Ordering::Relaxed);
        let w = self.write[i].load(Ordering::Relaxed);
        now >= any && (!write || now >= w)
    }

    /// Whether any delegation is held (a hint: no ordering with the counts).
    pub fn any_held(&self) -> bool {
        // Relaxed: see `count_at`.
        self.total.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
impl Slots {
    /// Panics unless the counts are those of `delegs` (the files of the delegations held).
    pub fn check(&self, delegs: impl Iterator<Item = ([u8; 4], Fh)>) {
        let mut want = vec![0u32; self.held.len()];
        for (export, fh) in delegs {
            want[self.slot(export, fh.as_bytes())] += 1;
        }
        let got: Vec<u32> = self.held.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(got, want, "delegations per slot");
        let total: u64 = want.iter().map(|&n| u64::from(n)).sum();
        assert_eq!(self.total.load(Ordering::SeqCst), total, "delegations held");
    }
}
