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
//! looks at nothing until something may be due. The tables change only through the [`State`]
//! methods here and in [`super::state`], which keep the index with them; an entry is made
//! only when a state is made (which allocates already), so a COMPOUND that makes nothing
//! allocates nothing more.
//!
//! Recovery: nothing to recover: the index is a view of the tables, checked against one
//! rebuilt from them by the tests (`State::check_index`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use crate::nfs::types::Fh;

use super::state::{Client, Deleg, LockState, OpenState, State};

/// A file: the export (its handle id) and the store's handle.
pub type FileKey = ([u8; 4], Fh);

/// The states held on one file (`other` of their stateids).
#[derive(Debug, Default)]
struct OnFile {
    opens: Vec<[u8; 12]>,
    locks: Vec<[u8; 12]>,
    delegs: Vec<[u8; 12]>,
}

impl OnFile {
    fn is_empty(&self) -> bool {
        self.opens.is_empty() && self.locks.is_empty() && self.delegs.is_empty()
    }
}

/// Which table a state is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Lock,
    Deleg,
}

/// The indexes of [`State`]'s tables.
#[derive(Debug, Default)]
pub struct Index {
    /// Open states, lock states and delegations by file.
    files: HashMap<FileKey, OnFile>,
    /// Client ids by the address of their EXCHANGE_ID.
    peers: HashMap<IpAddr, Vec<u64>>,
    /// Client ids by `co_ownerid` (one record per owner).
    owners: HashMap<Vec<u8>, u64>,
    /// Recalled delegations by the time of their recall.
    recalls: BTreeSet<(u64, [u8; 12])>,
    /// At most the oldest lease renewal of any client (`None`: no client).
    renew_floor: Option<u64>,
    /// States and client records looked at (tests count the work an operation does).
    #[cfg(test)]
    visits: std::cell::Cell<u64>,
}

impl Index {
    fn list(&mut self, key: &FileKey, kind: Kind) -> Option<&mut Vec<[u8; 12]>> {
        let f = self.files.get_mut(key)?;
        Some(match kind {
            Kind::Open => &mut f.opens,
            Kind::Lock => &mut f.locks,
            Kind::Deleg => &mut f.delegs,
        })
    }

    fn file(&mut self, key: FileKey, kind: Kind, other: [u8; 12]) {
        let f = self.files.entry(key).or_default();
        match kind {
            Kind::Open => f.opens.push(other),
            Kind::Lock => f.locks.push(other),
            Kind::Deleg => f.delegs.push(other),
        }
    }

    /// Takes `other` off its file's list (the file goes when it holds nothing more).
    fn unfile(&mut self, key: &FileKey, kind: Kind, other: &[u8; 12]) {
        let Some(v) = self.list(key, kind) else {
            return;
        };
        if let Some(i) = v.iter().position(|x| x == other) {
            v.swap_remove(i);
        }
        self.drop_if_empty(key);
    }

    fn drop_if_empty(&mut self, key: &FileKey) {
        if self.files.get(key).is_some_and(OnFile::is_empty) {
            self.files.remove(key);
        }
    }

    fn visit(&self) {
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

impl State {
    /// The open states of file `fh` of `export`.
    pub fn opens_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a OpenState)> + 'a {
        let list = self.index.files.get(&(export, *fh)).map(|f| &f.opens);
        list.into_iter().flatten().filter_map(move |k| {
            self.index.visit();
            self.opens.get(k).map(|o| (*k, o))
        })
    }

    /// The lock states of file `fh` of `export`.
    pub fn locks_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a LockState)> + 'a {
        let list = self.index.files.get(&(export, *fh)).map(|f| &f.locks);
        list.into_iter().flatten().filter_map(move |k| {
            self.index.visit();
            self.locks.get(k).map(|l| (*k, l))
        })
    }

    /// The delegations of file `fh` of `export`.
    pub fn delegs_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a Deleg)> + 'a {
        let list = self.index.files.get(&(export, *fh)).map(|f| &f.delegs);
        list.into_iter().flatten().filter_map(move |k| {
            self.index.visit();
            self.delegs.get(k).map(|d| (*k, d))
        })
    }

    /// Adds client record `id`.
    pub fn insert_client(&mut self, id: u64, c: Client) {
        self.index.peers.entry(c.peer).or_default().push(id);
        self.index.owners.insert(c.owner.clone(), id);
        self.index.renewed(c.renewed_ms);
        self.clients.insert(id, c);
    }

    /// Takes client `id` (just removed from the table) off the address and owner indexes.
    pub(super) fn unlist_client(&mut self, id: u64, c: &Client) {
        if let Some(v) = self.index.peers.get_mut(&c.peer) {
            v.retain(|x| *x != id);
            if v.is_empty() {
                self.index.peers.remove(&c.peer);
            }
        }
        if self.index.owners.get(&c.owner) == Some(&id) {
            self.index.owners.remove(&c.owner);
        }
    }

    /// Adds open state `other` (of its client).
    pub fn insert_open(&mut self, other: [u8; 12], o: OpenState) {
        self.index.file((o.export, o.fh), Kind::Open, other);
        if let Some(cl) = self.clients.get_mut(&o.client) {
            cl.opens.push(other);
        }
        self.opens.insert(other, o);
    }

    /// Adds lock state `other` (of its client).
    pub fn insert_lock(&mut self, other: [u8; 12], l: LockState) {
        self.index.file((l.export, l.fh), Kind::Lock, other);
        if let Some(cl) = self.clients.get_mut(&l.client) {
            cl.locks.push(other);
        }
        self.locks.insert(other, l);
    }

    /// Adds delegation `other` (of its client).
    pub fn insert_deleg(&mut self, other: [u8; 12], d: Deleg) {
        self.index.file((d.export, d.fh), Kind::Deleg, other);
        if let Some(cl) = self.clients.get_mut(&d.client) {
            cl.delegs.push(other);
        }
        self.delegs.insert(other, d);
    }

    /// Removes lock state `other` (freed, or made by a LOCK that then failed).
    pub fn remove_lock(&mut self, other: &[u8; 12]) {
        if let Some(l) = self.locks.remove(other) {
            self.index.unfile(&(l.export, l.fh), Kind::Lock, other);
            if let Some(cl) = self.clients.get_mut(&l.client) {
                cl.locks.retain(|x| x != other);
            }
        }
    }

    /// Takes delegation `d` (`other`, just removed from the table) off the indexes.
    pub(super) fn unfile_deleg(&mut self, other: &[u8; 12], d: &Deleg) {
        self.index.unfile(&(d.export, d.fh), Kind::Deleg, other);
        if let Some(t) = d.recalled_ms {
            self.index.recalls.remove(&(t, *other));
        }
    }

    /// Takes open state `other` (just removed from the table) off its file, with the lock
    /// states that came from it, which go from the table too: how many went.
    pub(super) fn unfile_open(&mut self, other: &[u8; 12], key: &FileKey) -> usize {
        let (mut gone, mut seen) = (0, 0);
        let (index, locks) = (&mut self.index, &mut self.locks);
        if let Some(f) = index.files.get_mut(key) {
            if let Some(i) = f.opens.iter().position(|x| x == other) {
                f.opens.swap_remove(i);
            }
            f.locks.retain(|k| {
                seen += 1;
                let mine = locks.get(k).is_some_and(|l| l.open == *other);
                if mine {
                    locks.remove(k);
                    gone += 1;
                }
                !mine
            });
        }
        self.index.visited(seen);
        self.index.drop_if_empty(key);
        gone
    }

    /// Removes client `c`'s states (`id`, just removed from the table) from the tables and
    /// the index; each file they were on is gone over once.
    pub(super) fn remove_client_states(&mut self, id: u64, c: &Client) {
        self.unlist_client(id, c);
        let mut files: HashSet<FileKey> = HashSet::new();
        for o in &c.opens {
            if let Some(x) = self.opens.remove(o) {
                files.insert((x.export, x.fh));
            }
        }
        for l in &c.locks {
            if let Some(x) = self.locks.remove(l) {
                files.insert((x.export, x.fh));
            }
        }
        for d in &c.delegs {
            if let Some(x) = self.delegs.remove(d) {
                files.insert((x.export, x.fh));
                if let Some(t) = x.recalled_ms {
                    self.index.recalls.remove(&(t, *d));
                }
            }
        }
        for key in &files {
            let (index, s) = (&mut self.index, (&self.opens, &self.locks, &self.delegs));
            let Some(f) = index.files.get_mut(key) else {
                continue;
            };
            f.opens.retain(|k| s.0.contains_key(k));
            f.locks.retain(|k| s.1.contains_key(k));
            f.delegs.retain(|k| s.2.contains_key(k));
            index.drop_if_empty(key);
        }
    }

    /// Marks delegation `other` recalled at `now_ms`; false when it was already.
    pub fn mark_recalled(&mut self, other: &[u8; 12], now_ms: u64) -> bool {
        let Some(d) = self.delegs.get_mut(other) else {
            return false;
        };
        if d.recalled_ms.is_some() {
            return false;
        }
        d.recalled_ms = Some(now_ms);
        self.index.recalls.insert((now_ms, *other));
        true
    }
}

#[cfg(test)]
impl State {
    /// Panics unless the index holds exactly what the tables hold (and every client's lists
    /// name exactly its states).
    pub fn check_index(&self) {
        let mut want: HashMap<FileKey, [Vec<[u8; 12]>; 3]> = HashMap::new();
        for (k, o) in &self.opens {
            want.entry((o.export, o.fh)).or_default()[0].push(*k);
        }
        for (k, l) in &self.locks {
            assert!(self.opens.contains_key(&l.open), "lock state of no open");
            want.entry((l.export, l.fh)).or_default()[1].push(*k);
        }
        for (k, d) in &self.delegs {
            want.entry((d.export, d.fh)).or_default()[2].push(*k);
        }
        let sorted = |v: &[[u8; 12]]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v
        };
        assert_eq!(want.len(), self.index.files.len(), "files indexed");
        for (key, [o, l, d]) in &want {
            let f = self
                .index
                .files
                .get(key)
                .expect("a file with states is indexed");
            assert_eq!(sorted(o), sorted(&f.opens), "opens of a file");
            assert_eq!(sorted(l), sorted(&f.locks), "locks of a file");
            assert_eq!(sorted(d), sorted(&f.delegs), "delegations of a file");
        }
        let recalls: BTreeSet<(u64, [u8; 12])> = self
            .delegs
            .iter()
            .filter_map(|(k, d)| Some((d.recalled_ms?, *k)))
            .collect();
        assert_eq!(recalls, self.index.recalls, "recalled delegations");
        let reserved: usize = self.sessions.values().map(|v| v.reserved()).sum();
        assert_eq!(self.replies_reserved, reserved, "reply cache reserved");
        let mut peers: HashMap<IpAddr, Vec<u64>> = HashMap::new();
        for (id, c) in &self.clients {
            peers.entry(c.peer).or_default().push(*id);
            assert_eq!(self.index.owners.get(&c.owner), Some(id), "owner indexed");
            assert!(self.index.renew_floor.is_some_and(|f| f <= c.renewed_ms));
            let mine = |t: Vec<[u8; 12]>| sorted(&t);
            let o = self.opens.iter().filter(|(_, x)| x.client == *id);
            assert_eq!(sorted(&c.opens), mine(o.map(|(k, _)| *k).collect()));
            let l = self.locks.iter().filter(|(_, x)| x.client == *id);
            assert_eq!(sorted(&c.locks), mine(l.map(|(k, _)| *k).collect()));
            let d = self.delegs.iter().filter(|(_, x)| x.client == *id);
            assert_eq!(sorted(&c.delegs), mine(d.map(|(k, _)| *k).collect()));
        }
        assert_eq!(
            self.index.owners.len(),
            self.clients.len(),
            "owners indexed"
        );
        assert_eq!(peers.len(), self.index.peers.len(), "addresses indexed");
        for (p, mut v) in peers {
            v.sort_unstable();
            let mut got = self.index.peers.get(&p).cloned().unwrap_or_default();
            got.sort_unstable();
            assert_eq!(v, got, "clients of an address");
        }
    }
}
