//! Indexes of the NFSv4.1 state tables, so that what an operation looks up costs what its
//! file, address or client holds, not what the whole server holds (the tables are behind the
//! one state lock every SEQUENCE takes).
//!
//! Normal operation: every open state, lock state and delegation is listed under its file
//! (export and store handle) when it is made and taken off when it goes, so OPEN's share
//! reservation check (RFC 8881 §9.7), LOCK and LOCKT's conflict search (§9.4, §18.10), CLOSE's
//! removal of the open's lock states, and the delegation decisions of OPEN, REMOVE, RENAME,
//! SETATTR and GETATTR (§10.2, §10.4) look at that file's states only. Client records are
//! listed under the address and the owner of their EXCHANGE_ID (the per-address bounds and
//! EXCHANGE_ID's lookup); recalled delegations by the time of their recall, and the clients'
//! lease renewals bounded from below, so the lease pass run before every COMPOUND (§8.3)
//! looks at nothing until something may be due. The tables change only through the [`State`](super::state::State)
//! methods of [`super::state_index`] and [`super::state`], which keep the index with them; an entry is made
//! only when a state is made (which allocates already), so a COMPOUND that makes nothing
//! allocates nothing more.
//!
//! Recovery: nothing to recover: the index is a view of the tables, checked against one
//! rebuilt from them by the tests (`State::check_index`).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use crate::nfs::types::Fh;

/// A file: the export (its handle id) and the store's handle.
pub type FileKey = ([u8; 4], Fh);

/// The states held on one file (`other` of their stateids).
#[derive(Debug, Default)]
pub(super) struct OnFile {
    pub(super) opens: Vec<[u8; 12]>,
    pub(super) locks: Vec<[u8; 12]>,
    pub(super) delegs: Vec<[u8; 12]>,
}

impl OnFile {
    fn is_empty(&self) -> bool {
        self.opens.is_empty() && self.locks.is_empty() && self.delegs.is_empty()
    }
}

/// Which table a state is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Open,
    Lock,
    Deleg,
}

/// The indexes of [`State`](super::state::State)'s tables.
#[derive(Debug, Default)]
pub struct Index {
    /// Open states, lock states and delegations by file.
    pub(super) files: HashMap<FileKey, OnFile>,
    /// Client ids by the address of their EXCHANGE_ID.
    pub(super) peers: HashMap<IpAddr, Vec<u64>>,
    /// Client ids by `co_ownerid` (one record per owner).
    pub(super) owners: HashMap<Vec<u8>, u64>,
    /// Recalled delegations by the time of their recall.
    pub(super) recalls: BTreeSet<(u64, [u8; 12])>,
    /// At most the oldest lease renewal of any client (`None`: no client).
    pub(super) renew_floor: Option<u64>,
    /// States and client records looked at (tests count the work an operation does).
    #[cfg(test)]
    visits: std::cell::Cell<u64>,
}

impl Index {
    pub(super) fn list(&mut self, key: &FileKey, kind: Kind) -> Option<&mut Vec<[u8; 12]>> {
        let f = self.files.get_mut(key)?;
        Some(match kind {
            Kind::Open => &mut f.opens,
            Kind::Lock => &mut f.locks,
            Kind::Deleg => &mut f.delegs,
        })
    }

    /// The states listed under file `key` as `kind` (none when the file holds none).
    pub(super) fn listed(&self, key: &FileKey, kind: Kind) -> &[[u8; 12]] {
        self.files.get(key).map_or(&[], |f| match kind {
            Kind::Open => &f.opens,
            Kind::Lock => &f.locks,
            Kind::Deleg => &f.delegs,
        })
    }

    pub(super) fn file(&mut self, key: FileKey, kind: Kind, other: [u8; 12]) {
        let f = self.files.entry(key).or_default();
        match kind {
            Kind::Open => f.opens.push(other),
            Kind::Lock => f.locks.push(other),
            Kind::Deleg => f.delegs.push(other),
        }
    }

    /// Takes `other` off its file's list (the file goes when it holds nothing more).
    pub(super) fn unfile(&mut self, key: &FileKey, kind: Kind, other: &[u8; 12]) {
        let Some(v) = self.list(key, kind) else {
            return;
        };
        if let Some(i) = v.iter().position(|x| x == other) {
            v.swap_remove(i);
        }
        self.drop_if_empty(key);
    }

    pub(super) fn drop_if_empty(&mut self, key: &FileKey) {
        if self.files.get(key).is_some_and(OnFile::is_empty) {
            self.files.remove(key);
        }
    }

    pub(super) fn visit(&self) {
        self.visited(1);
    }

    /// Counts `_n` records looked at (tests).
    pub fn visited(&self, _n: u64) {
        #[cfg(test)]
        self.visits.set(self.visits.get() + _n);
    }

    /// The clients made from `peer`.
    pub fn peer_clients(&self, peer: &IpAddr) -> &[u64] {
        let v = self.peers.get(peer).map_or(&[][..], Vec::as_slice);
        self.visited(v.len() as u64);
        v
    }

    /// The client whose owner is `owner`.
    pub fn owner(&self, owner: &[u8]) -> Option<u64> {
        self.owners.get(owner).copied()
    }

    /// Whether a client's lease may have run out at `now_ms` (`lease` in milliseconds).
    pub fn lease_due(&self, now_ms: u64, lease: u64) -> bool {
        self.renew_floor
            .is_some_and(|f| now_ms.saturating_sub(f) > lease)
    }

    /// The renewal times are at least `renewed_ms` (a client renewed or made then).
    pub fn renewed(&mut self, renewed_ms: u64) {
        self.renew_floor = Some(self.renew_floor.map_or(renewed_ms, |f| f.min(renewed_ms)));
    }

    /// The oldest renewal is `floor` (after a pass over every client).
    pub fn set_renew_floor(&mut self, floor: Option<u64>) {
        self.renew_floor = floor;
    }

    /// Takes the recalled delegation not returned for longer than `lease` at `now_ms`, if any.
    pub fn take_late_recall(&mut self, now_ms: u64, lease: u64) -> Option<[u8; 12]> {
        let (t, _) = *self.recalls.first()?;
        if now_ms.saturating_sub(t) > lease {
            self.recalls.pop_first().map(|(_, o)| o)
        } else {
            None
        }
    }

    /// States and client records looked at through the indexes and by the lease pass since
    /// the server started.
    #[cfg(test)]
    pub fn visits(&self) -> u64 {
        self.visits.get()
    }

    /// Files with states (and addresses with clients) indexed.
    #[cfg(test)]
    pub fn sizes(&self) -> (usize, usize) {
        (self.files.len(), self.peers.len())
    }
}
