//! The [`State`] methods that change the state tables and keep their [`Index`](super::index::Index) with them:
//! every open state, lock state, delegation and client record is added and removed here, and
//! the lookups by file read the index ([`super::index`] says what it holds).
//!
//! Normal operation: OPEN, LOCK, DELEGRETURN, EXCHANGE_ID and the removals (CLOSE, LOCKU and
//! FREE_STATEID, revocation, DESTROY_CLIENTID, lease expiry) call these methods, never the
//! tables' maps directly. Recovery: nothing to recover; the tests check the index against one
//! rebuilt from the tables after every COMPOUND (`State::check_index`).

#[cfg(test)]
use std::collections::BTreeSet;
use std::collections::{HashMap, HashSet};
#[cfg(test)]
use std::net::IpAddr;

use crate::nfs::types::Fh;

use super::index::{FileKey, Kind};
use super::state::{Client, Deleg, LockState, OpenState, State};

impl State {
    /// The open states of file `fh` of `export`.
    pub fn opens_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a OpenState)> + 'a {
        self.on_file(&self.opens, (export, *fh), Kind::Open)
    }

    /// The lock states of file `fh` of `export`.
    pub fn locks_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a LockState)> + 'a {
        self.on_file(&self.locks, (export, *fh), Kind::Lock)
    }

    /// The delegations of file `fh` of `export`.
    pub fn delegs_on<'a>(
        &'a self,
        export: [u8; 4],
        fh: &Fh,
    ) -> impl Iterator<Item = ([u8; 12], &'a Deleg)> + 'a {
        self.on_file(&self.delegs, (export, *fh), Kind::Deleg)
    }

    /// The entries of `table` (one of the state tables) listed under file `key` as `kind`.
    fn on_file<'a, T>(
        &'a self,
        table: &'a HashMap<[u8; 12], T>,
        key: FileKey,
        kind: Kind,
    ) -> impl Iterator<Item = ([u8; 12], &'a T)> + 'a {
        self.index.listed(&key, kind).iter().filter_map(move |k| {
            self.index.visit();
            table.get(k).map(|v| (*k, v))
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
        self.deleg_slots.count(d.export, &d.fh, true);
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
        self.deleg_slots.count(d.export, &d.fh, false);
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
    /// the index; each file they were on is gone over once, and those its locks were on are
    /// listed in [`State::released`].
    pub(super) fn remove_client_states(&mut self, id: u64, c: &Client) {
        self.unlist_client(id, c);
        let mut files: HashSet<FileKey> = HashSet::new();
        for o in &c.opens {
            if let Some(x) = self.opens.remove(o) {
                files.insert((x.export, x.fh));
            }
        }
        let mut locked: HashSet<FileKey> = HashSet::new();
        for l in &c.locks {
            if let Some(x) = self.locks.remove(l) {
                files.insert((x.export, x.fh));
                locked.insert((x.export, x.fh));
            }
        }
        self.released.extend(locked);
        for d in &c.delegs {
            if let Some(x) = self.delegs.remove(d) {
                self.deleg_slots.count(x.export, &x.fh, false);
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
        self.deleg_slots
            .check(self.delegs.values().map(|d| (d.export, d.fh)));
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
