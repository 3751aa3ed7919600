//! The NLM lock table: POSIX byte-range locks, blocked requests and DOS share reservations
//! per file, owned by client hosts, with the per-host bounds a server exposed to hostile
//! clients needs. No I/O: the service ([`mod@super::service`]) decides what is asked and sends
//! the NLMPROC4_GRANTED calls this table reports.
//!
//! Normal operation: a lock's owner is a host (the client's address and the `caller_name` it
//! gives: a peer cannot name another address's host) and a process there (`svid`), as Linux
//! lockd keys them. An owner's ranges never overlap: a new lock replaces what the owner held
//! in its range, splitting ranges at its edges and merging neighbours of one type, as POSIX
//! `fcntl` does; an unlock removes the range. Two owners conflict when their ranges overlap
//! and either lock is exclusive. A blocking request in conflict waits in its file's queue
//! (NLM4_BLOCKED); whenever a file's locks shrink, the queue is walked in arrival order and
//! every request no longer in conflict is given its lock and reported as a [`Grant`] to
//! send. Share reservations (SHARE / UNSHARE) are owned by host and owner handle: one
//! conflicts with another owner's when either's access meets the other's deny mode.
//!
//! Recovery: a blocking request that would wait, through the owners it waits for, on itself
//! is NLM4_DEADLCK (the chain followed at most [`DEADLOCK_STEPS`] steps, as Linux's
//! `posix_locks_deadlock`); a request that would take a host past [`Limits`] (ranges,
//! waiting requests, shares, names per address, hosts) is NLM4_DENIED_NOLOCKS, unlock
//! included when it would split a range (Linux lockd answers a failed unlock so). A host's
//! locks, waits and shares go together ([`LockTable::free_host`]: FREE_ALL, a reboot); a
//! host that holds nothing is forgotten.

use std::collections::HashMap;
use std::net::IpAddr;

use super::proto::{Holder, Stat};

/// The largest file offset (`OFFSET_MAX`): a range reaches it when it runs to the end.
pub const OFFSET_MAX: u64 = i64::MAX as u64;

/// Steps of the waits-for chain followed before a blocking request is let wait.
pub const DEADLOCK_STEPS: usize = 10;

/// Per-host and overall bounds of a [`LockTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Hosts holding anything at once.
    pub hosts: usize,
    /// Host names one address may use at once.
    pub hosts_per_addr: usize,
    /// Lock ranges one host may hold.
    pub locks_per_host: usize,
    /// Blocked requests one host may have waiting.
    pub waiters_per_host: usize,
    /// Share reservations one host may hold.
    pub shares_per_host: usize,
}

impl Default for Limits {
    /// 512 hosts, 16 names per address; per host 1 024 ranges, 16 waiting requests, 64
    /// shares.
    fn default() -> Self {
        Limits {
            hosts: 512,
            hosts_per_addr: 16,
            locks_per_host: 1024,
            waiters_per_host: 16,
            shares_per_host: 64,
        }
    }
}

/// A client host: the address its calls come from and the name it gives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostKey {
    /// The peer address.
    pub addr: IpAddr,
    /// `caller_name` (or FREE_ALL's name).
    pub name: Vec<u8>,
}

/// A byte range and its lock type as a request states it (end inclusive, at most
/// [`OFFSET_MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// The owner's process on the client.
    pub svid: i32,
    /// First octet.
    pub start: u64,
    /// Last octet (inclusive).
    pub end: u64,
    /// A write lock.
    pub exclusive: bool,
}

impl Want {
    /// The range of `l_offset` / `l_len` (length 0: to the end), or NLM4_FBIG for one past
    /// [`OFFSET_MAX`] (Linux lockd's check).
    pub fn of(svid: i32, offset: u64, len: u64, exclusive: bool) -> Result<Want, Stat> {
        if offset > OFFSET_MAX || (len > 0 && len - 1 > OFFSET_MAX - offset) {
            return Err(Stat::FBIG);
        }
        let end = if len == 0 {
            OFFSET_MAX
        } else {
            offset + len - 1
        };
        Ok(Want {
            svid,
            start: offset,
            end,
            exclusive,
        })
    }
}

/// What a NLMPROC4_GRANTED call to the waiting client carries: its request as it sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantArgs {
    /// The request's cookie.
    pub cookie: Vec<u8>,
    /// `caller_name`.
    pub caller: Vec<u8>,
    /// The file handle, as the client sent it.
    pub fh: Vec<u8>,
    /// The owner handle.
    pub oh: Vec<u8>,
    /// `svid`.
    pub svid: i32,
    /// `l_offset`.
    pub offset: u64,
    /// `l_len`.
    pub len: u64,
    /// A write lock.
    pub exclusive: bool,
}

/// A blocked request that now holds its lock: the client at `addr` is to be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The host.
    pub host: HostKey,
    /// The file's key in the table.
    pub file: Vec<u8>,
    /// The request.
    pub args: GrantArgs,
}

/// One held lock as [`LockTable::held`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// Its host.
    pub host: HostKey,
    /// Its process there.
    pub svid: i32,
    /// First octet.
    pub start: u64,
    /// Last octet (inclusive; [`OFFSET_MAX`]: to the end).
    pub end: u64,
    /// A write lock.
    pub exclusive: bool,
}

type HostId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    host: HostId,
    svid: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    owner: Owner,
    start: u64,
    end: u64,
    exclusive: bool,
}

impl Held {
    fn blocks(&self, owner: Owner, w: &Want) -> bool {
        self.owner != owner
            && self.start <= w.end
            && w.start <= self.end
            && (self.exclusive || w.exclusive)
    }
}

#[derive(Debug, Clone)]
struct Waiter {
    owner: Owner,
    want: Want,
    args: GrantArgs,
}

#[derive(Debug, Clone)]
struct ShareRes {
    host: HostId,
    oh: Vec<u8>,
    mode: u32,
    access: u32,
}

#[derive(Debug, Default)]
struct File {
    held: Vec<Held>,
    waiters: Vec<Waiter>,
    shares: Vec<ShareRes>,
}

impl File {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.waiters.is_empty() && self.shares.is_empty()
    }
}

#[derive(Debug)]
struct Host {
    key: HostKey,
    locks: usize,
    waiters: usize,
    shares: usize,
}

/// Asks another lock manager (NFSv4.1's) for a lock in the way of a request on a file:
/// the file's key and the request; the lock as a TEST holder.
pub type ForeignCheck = Box<dyn Fn(&[u8], &Want) -> Option<Holder> + Send + Sync>;

#[derive(Default)]
struct Foreign(Option<ForeignCheck>);

impl std::fmt::Debug for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Foreign(set)"
        } else {
            "Foreign(none)"
        })
    }
}

/// What holds a request up: a lock of this table's, or one of another lock manager's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Blocker {
    Owner(Owner),
    Foreign(Holder),
}

/// The lock table of one server.
#[derive(Debug, Default)]
pub struct LockTable {
    limits: Limits,
    files: HashMap<Vec<u8>, File>,
    ids: HashMap<HostKey, HostId>,
    hosts: Vec<Option<Host>>,
    free: Vec<HostId>,
    foreign: Foreign,
}

impl LockTable {
    /// An empty table with bounds `limits`.
    pub fn new(limits: Limits) -> LockTable {
        LockTable {
            limits,
            ..LockTable::default()
        }
    }

    /// Every request is also checked against another lock manager's locks (the caller of
    /// each request then holds that manager's ordering lock, [`crate::nfs::cross_locks`]).
    pub fn set_foreign(&mut self, check: ForeignCheck) {
        self.foreign = Foreign(Some(check));
    }

    /// What holds up `owner`'s request `w` on `file`: this table's first lock in the way, or
    /// else the other lock manager's.
    fn blocker(&self, file: &[u8], owner: Owner, w: &Want) -> Option<Blocker> {
        let mine = self
            .files
            .get(file)
            .and_then(|f| f.held.iter().find(|h| h.blocks(owner, w)).map(|h| h.owner));
        match mine {
            Some(o) => Some(Blocker::Owner(o)),
            None => self.foreign.0.as_ref()?(file, w).map(Blocker::Foreign),
        }
    }

    /// The first lock of any owner on `file` in the way of a request of another lock manager
    /// for octets `start..=end` ([`OFFSET_MAX`] or more: to the end).
    pub fn conflict_any(
        &self,
        file: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Holder> {
        let f = self.files.get(file)?;
        let w = Want {
            svid: 0,
            start,
            end: end.min(OFFSET_MAX),
            exclusive,
        };
        let nobody = Owner {
            host: HostId::MAX,
            svid: 0,
        };
        f.held
            .iter()
            .find(|h| h.blocks(nobody, &w))
            .map(|h| self.holder(h))
    }

    /// Hosts holding or waiting for anything.
    pub fn hosts(&self) -> usize {
        self.ids.len()
    }

    /// Files with locks, waiting requests or shares.
    pub fn files(&self) -> usize {
        self.files.len()
    }

    /// Lock ranges held in all.
    pub fn locks(&self) -> usize {
        self.files.values().map(|f| f.held.len()).sum()
    }

    /// Requests waiting in all.
    pub fn waiting(&self) -> usize {
        self.files.values().map(|f| f.waiters.len()).sum()
    }

    /// The locks held on `file`, in the table's order.
    pub fn held(&self, file: &[u8]) -> Vec<HeldLock> {
        let Some(f) = self.files.get(file) else {
            return Vec::new();
        };
        f.held
            .iter()
            .map(|h| HeldLock {
                host: self.host(h.owner.host).key.clone(),
                svid: h.owner.svid,
                start: h.start,
                end: h.end,
                exclusive: h.exclusive,
            })
            .collect()
    }

    /// The requests waiting on `file`, in arrival order: their host and what they want.
    pub fn waiters(&self, file: &[u8]) -> Vec<(HostKey, Want)> {
        let Some(f) = self.files.get(file) else {
            return Vec::new();
        };
        f.waiters
            .iter()
            .map(|w| (self.host(w.owner.host).key.clone(), w.want))
            .collect()
    }

    fn host(&self, id: HostId) -> &Host {
        match self.hosts.get(id as usize) {
            Some(Some(h)) => h,
            _ => unreachable!("a table entry names a host that is gone"),
        }
    }

    fn host_mut(&mut self, id: HostId) -> &mut Host {
        match self.hosts.get_mut(id as usize) {
            Some(Some(h)) => h,
            _ => unreachable!("a table entry names a host that is gone"),
        }
    }

    /// The id of `key`, made when `make` (NLM4_DENIED_NOLOCKS past the host bounds).
    fn host_id(&mut self, key: &HostKey, make: bool) -> Result<Option<HostId>, Stat> {
        if let Some(&id) = self.ids.get(key) {
            return Ok(Some(id));
        }
        if !make {
            return Ok(None);
        }
        let same_addr = self.ids.keys().filter(|k| k.addr == key.addr).count();
        if self.ids.len() >= self.limits.hosts || same_addr >= self.limits.hosts_per_addr {
            return Err(Stat::DENIED_NOLOCKS);
        }
        let h = Host {
            key: key.clone(),
            locks: 0,
            waiters: 0,
            shares: 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.hosts[id as usize] = Some(h);
                id
            }
            None => {
                self.hosts.push(Some(h));
                (self.hosts.len() - 1) as HostId
            }
        };
        self.ids.insert(key.clone(), id);
        Ok(Some(id))
    }

    /// Forgets host `id` when it holds nothing.
    fn retire(&mut self, id: HostId) {
        let h = self.host(id);
        if h.locks == 0 && h.waiters == 0 && h.shares == 0 {
            let key = h.key.clone();
            self.ids.remove(&key);
            self.hosts[id as usize] = None;
            self.free.push(id);
        }
    }

    fn holder(&self, h: &Held) -> Holder {
        Holder {
            exclusive: h.exclusive,
            svid: h.owner.svid,
            oh: Vec::new(),
            offset: h.start,
            len: if h.end == OFFSET_MAX {
                0
            } else {
                h.end - h.start + 1
            },
        }
    }

    /// NLMPROC4_TEST: the first lock of another owner in the way of `w` on `file`, if any.
    pub fn test(&self, host: &HostKey, file: &[u8], w: &Want) -> Option<Holder> {
        let owner = self.ids.get(host).map(|&host| Owner { host, svid: w.svid });
        let any = Owner {
            host: HostId::MAX,
            svid: w.svid,
        };
        let owner = owner.unwrap_or(any);
        match self.blocker(file, owner, w)? {
            Blocker::Foreign(h) => Some(h),
            Blocker::Owner(_) => {
                let f = self.files.get(file)?;
                f.held
                    .iter()
                    .find(|h| h.blocks(owner, w))
                    .map(|h| self.holder(h))
            }
        }
    }

    /// NLMPROC4_LOCK / NM_LOCK of `w` on `file`: NLM4_GRANTED, NLM4_DENIED (not `block`),
    /// NLM4_BLOCKED (queued; `args` is what the grant will carry), NLM4_DEADLCK or
    /// NLM4_DENIED_NOLOCKS. Grants made possible by the change (a lock turned shared) are
    /// appended to `grants`.
    pub fn lock(
        &mut self,
        host: &HostKey,
        file: &[u8],
        w: Want,
        block: bool,
        args: impl FnOnce() -> GrantArgs,
        grants: &mut Vec<Grant>,
    ) -> Stat {
        let id = match self.host_id(host, true) {
            Ok(Some(id)) => id,
            Ok(None) | Err(_) => return Stat::DENIED_NOLOCKS,
        };
        let owner = Owner {
            host: id,
            svid: w.svid,
        };
        let st = match self.blocker(file, owner, &w) {
            None => {
                let st = self.apply(file, owner, &w, Some(w.exclusive));
                if st == Stat::GRANTED {
                    // A request this one repeats no longer waits: no GRANTED call follows
                    // for a lock the client was just given.
                    self.forget_waiter(file, owner, &w);
                    self.wake(file, grants);
                }
                st
            }
            Some(_) if !block => Stat::DENIED,
            Some(b) => self.wait(file, owner, w, b, args),
        };
        self.retire(id);
        self.drop_if_empty(file);
        st
    }

    /// Queues a blocking request of `owner` that `blocker` holds up.
    fn wait(
        &mut self,
        file: &[u8],
        owner: Owner,
        w: Want,
        blocker: Blocker,
        args: impl FnOnce() -> GrantArgs,
    ) -> Stat {
        let f = self.files.entry(file.to_vec()).or_default();
        if f.waiters.iter().any(|x| x.owner == owner && x.want == w) {
            return Stat::BLOCKED; // the client asks again while it waits
        }
        // A wait on another lock manager's lock closes no cycle this table can see.
        if matches!(blocker, Blocker::Owner(b) if self.deadlocks(owner, b)) {
            return Stat::DEADLCK;
        }
        if self.host(owner.host).waiters >= self.limits.waiters_per_host {
            return Stat::DENIED_NOLOCKS;
        }
        self.host_mut(owner.host).waiters += 1;
        let waiter = Waiter {
            owner,
            want: w,
            args: args(),
        };
        self.files
            .entry(file.to_vec())
            .or_default()
            .waiters
            .push(waiter);
        Stat::BLOCKED
    }

    fn forget_waiter(&mut self, file: &[u8], owner: Owner, w: &Want) {
        if let Some(f) = self.files.get_mut(file) {
            let before = f.waiters.len();
            f.waiters.retain(|x| !(x.owner == owner && x.want == *w));
            let gone = before - f.waiters.len();
            self.host_mut(owner.host).waiters -= gone;
        }
    }

    /// True when `blocker` waits, through the owners those waits are held up by, for `owner`.
    fn deadlocks(&self, owner: Owner, blocker: Owner) -> bool {
        let mut cur = blocker;
        for _ in 0..DEADLOCK_STEPS {
            if cur == owner {
                return true;
            }
            let next = self.files.values().find_map(|f| {
                let w = f.waiters.iter().find(|x| x.owner == cur)?;
                f.held
                    .iter()
                    .find(|h| h.blocks(cur, &w.want))
                    .map(|h| h.owner)
            });
            match next {
                Some(n) => cur = n,
                None => return false,
            }
        }
        false
    }

    /// NLMPROC4_UNLOCK of `w`'s range for `host`'s process `w.svid`: NLM4_GRANTED (also when
    /// nothing was held) or NLM4_DENIED_NOLOCKS (a split past the host's bound).
    pub fn unlock(
        &mut self,
        host: &HostKey,
        file: &[u8],
        w: &Want,
        grants: &mut Vec<Grant>,
    ) -> Stat {
        let Some(&id) = self.ids.get(host) else {
            return Stat::GRANTED;
        };
        let owner = Owner {
            host: id,
            svid: w.svid,
        };
        let st = self.apply(file, owner, w, None);
        if st == Stat::GRANTED {
            self.wake(file, grants);
        }
        self.retire(id);
        self.drop_if_empty(file);
        st
    }

    /// NLMPROC4_CANCEL: forgets the waiting request of `host`'s process for exactly `w`.
    /// NLM4_GRANTED whether or not one waited (Linux lockd's answer).
    pub fn cancel(&mut self, host: &HostKey, file: &[u8], w: &Want) -> Stat {
        let Some(&id) = self.ids.get(host) else {
            return Stat::GRANTED;
        };
        let owner = Owner {
            host: id,
            svid: w.svid,
        };
        self.forget_waiter(file, owner, w);
        self.retire(id);
        self.drop_if_empty(file);
        Stat::GRANTED
    }

    /// Everything `host` holds, waits for or shares goes (FREE_ALL; a client that rebooted;
    /// a grant the client refused is [`LockTable::unlock`]); grants that follows are appended.
    pub fn free_host(&mut self, host: &HostKey, grants: &mut Vec<Grant>) {
        let Some(&id) = self.ids.get(host) else {
            return;
        };
        let keys: Vec<Vec<u8>> = self.files.keys().cloned().collect();
        for k in keys {
            let Some(f) = self.files.get_mut(&k) else {
                continue;
            };
            let held = f.held.len();
            f.held.retain(|h| h.owner.host != id);
            let held = held - f.held.len();
            let waiting = f.waiters.len();
            f.waiters.retain(|x| x.owner.host != id);
            let waiting = waiting - f.waiters.len();
            let shares = f.shares.len();
            f.shares.retain(|s| s.host != id);
            let shares = shares - f.shares.len();
            let h = self.host_mut(id);
            h.locks -= held;
            h.waiters -= waiting;
            h.shares -= shares;
            if held > 0 {
                self.wake(&k, grants);
            }
            self.drop_if_empty(&k);
        }
        self.retire(id);
    }

    /// A status-monitor notification from `addr` that the host `name` rebooted: every host at
    /// `addr` of that name (of any name when `name` is `addr` written out) is freed as by
    /// [`LockTable::free_host`]. Returns how many hosts were.
    pub fn free_peer(&mut self, addr: IpAddr, name: &[u8], grants: &mut Vec<Grant>) -> usize {
        let any = name == addr.to_string().as_bytes();
        let keys: Vec<HostKey> = self
            .ids
            .keys()
            .filter(|k| k.addr == addr && (any || k.name == name))
            .cloned()
            .collect();
        for k in &keys {
            self.free_host(k, grants);
        }
        keys.len()
    }

    /// NLMPROC4_SHARE: a reservation of `access` denying `mode` to others, owned by `host`
    /// and `oh`. NLM4_GRANTED, NLM4_DENIED (a conflict) or NLM4_DENIED_NOLOCKS.
    pub fn share(
        &mut self,
        host: &HostKey,
        file: &[u8],
        oh: &[u8],
        mode: u32,
        access: u32,
    ) -> Stat {
        let id = match self.host_id(host, true) {
            Ok(Some(id)) => id,
            Ok(None) | Err(_) => return Stat::DENIED_NOLOCKS,
        };
        let f = self.files.entry(file.to_vec()).or_default();
        let mine = |s: &ShareRes| s.host == id && s.oh == oh;
        let conflict = f
            .shares
            .iter()
            .any(|s| !mine(s) && (s.access & mode != 0 || s.mode & access != 0));
        let st = if conflict {
            Stat::DENIED
        } else if let Some(s) = f.shares.iter_mut().find(|s| mine(s)) {
            s.mode = mode;
            s.access = access;
            Stat::GRANTED
        } else if self.host(id).shares >= self.limits.shares_per_host {
            Stat::DENIED_NOLOCKS
        } else {
            self.files
                .entry(file.to_vec())
                .or_default()
                .shares
                .push(ShareRes {
                    host: id,
                    oh: oh.to_vec(),
                    mode,
                    access,
                });
            self.host_mut(id).shares += 1;
            Stat::GRANTED
        };
        self.retire(id);
        self.drop_if_empty(file);
        st
    }

    /// NLMPROC4_UNSHARE: drops the reservation of `host` and `oh` (NLM4_GRANTED, held or not).
    pub fn unshare(&mut self, host: &HostKey, file: &[u8], oh: &[u8]) -> Stat {
        let Some(&id) = self.ids.get(host) else {
            return Stat::GRANTED;
        };
        if let Some(f) = self.files.get_mut(file) {
            let before = f.shares.len();
            f.shares.retain(|s| !(s.host == id && s.oh == oh));
            let gone = before - f.shares.len();
            self.host_mut(id).shares -= gone;
        }
        self.retire(id);
        self.drop_if_empty(file);
        Stat::GRANTED
    }

    fn drop_if_empty(&mut self, file: &[u8]) {
        if self.files.get(file).is_some_and(File::is_empty) {
            self.files.remove(file);
        }
    }

    /// Sets `owner`'s coverage of `w`'s range on `file` to a lock of type `kind` (`None`:
    /// none), splitting and merging its ranges as POSIX does. NLM4_DENIED_NOLOCKS when the
    /// owner's host would pass its range bound.
    fn apply(&mut self, file: &[u8], owner: Owner, w: &Want, kind: Option<bool>) -> Stat {
        let (s, e) = (w.start, w.end);
        let f = self.files.entry(file.to_vec()).or_default();
        let mut mine: Vec<Held> = Vec::new();
        f.held.retain(|h| {
            let take = h.owner == owner;
            if take {
                mine.push(*h);
            }
            !take
        });
        let before = mine.len();
        let mut next: Vec<Held> = Vec::with_capacity(before + 2);
        for h in mine.iter() {
            if h.end < s || h.start > e {
                next.push(*h);
                continue;
            }
            if h.start < s {
                next.push(Held { end: s - 1, ..*h });
            }
            if h.end > e {
                next.push(Held { start: e + 1, ..*h });
            }
        }
        if let Some(exclusive) = kind {
            next.push(Held {
                owner,
                start: s,
                end: e,
                exclusive,
            });
        }
        let next = merged(next);
        let host = self.host(owner.host).locks;
        let after = (host - before).saturating_add(next.len());
        if next.len() > before && after > self.limits.locks_per_host {
            self.files
                .entry(file.to_vec())
                .or_default()
                .held
                .extend(mine);
            return Stat::DENIED_NOLOCKS;
        }
        self.host_mut(owner.host).locks = after;
        self.files
            .entry(file.to_vec())
            .or_default()
            .held
            .extend(next);
        Stat::GRANTED
    }

    /// Tries the waiting requests of `file` again (another lock manager's locks on it went):
    /// those that nothing holds up get their locks, reported in `grants`.
    pub fn wake_file(&mut self, file: &[u8], grants: &mut Vec<Grant>) {
        self.wake(file, grants);
        self.drop_if_empty(file);
    }

    /// Gives every waiting request on `file` that nothing holds up any longer its lock, in
    /// arrival order, and reports each; no request is left waiting that nothing holds up.
    fn wake(&mut self, file: &[u8], grants: &mut Vec<Grant>) {
        let mut i = 0;
        loop {
            let Some(f) = self.files.get(file) else {
                return;
            };
            let Some(x) = f.waiters.get(i) else { return };
            let (owner, want) = (x.owner, x.want);
            if self.blocker(file, owner, &want).is_some() {
                i += 1;
                continue;
            }
            if self.apply(file, owner, &want, Some(want.exclusive)) != Stat::GRANTED {
                i += 1;
                continue;
            }
            let Some(f) = self.files.get_mut(file) else {
                return;
            };
            let x = f.waiters.remove(i);
            self.host_mut(owner.host).waiters -= 1;
            grants.push(Grant {
                host: self.host(owner.host).key.clone(),
                file: file.to_vec(),
                args: x.args,
            });
            // A grant can free what an earlier request waits for (its owner's exclusive
            // range turned shared): the queue is tried again from its head.
            i = 0;
        }
    }
}

/// One owner's ranges sorted and merged where neighbours of one type touch or overlap.
fn merged(mut v: Vec<Held>) -> Vec<Held> {
    v.sort_by_key(|h| h.start);
    let mut out: Vec<Held> = Vec::with_capacity(v.len());
    for h in v {
        match out.last_mut() {
            Some(l) if l.exclusive == h.exclusive && h.start <= l.end.saturating_add(1) => {
                l.end = l.end.max(h.end);
            }
            _ => out.push(h),
        }
    }
    out
}
