//! The duplicate request cache: replies of non-idempotent NFSv3 calls (CREATE, MKDIR, SYMLINK,
//! MKNOD, REMOVE, RMDIR, RENAME, LINK, SETATTR, WRITE), kept so that a call the client sends
//! again — after a reconnection, with the same XID — gets the first reply instead of running a
//! second time (a second REMOVE would answer NOENT, a second exclusive CREATE EXIST).
//!
//! Normal operation: keyed as Linux nfsd keys it (`nfsd_cache_key_cmp`): the XID, the
//! procedure and version, the length of the arguments and a checksum of their first
//! [`CSUM_LEN`] octets, and the client's address — its IP address only: RDMA-CM gives every
//! connection a new port, where xprtsock keeps a TCP client's source port across reconnects
//! for exactly this cache. [`Drc::begin`] marks a new call in progress (or says it is a
//! retransmission); [`Drc::finish`] stores its reply. Entries live in 16 shards, each a small
//! hash map plus a FIFO of finished entries; the oldest finished entry is evicted when a shard
//! exceeds its share of [`DrcConfig::max_entries`] or [`DrcConfig::max_bytes`] (counted as the
//! capacity of the buffers holding the replies), so memory is bounded whatever the clients
//! send. An evicted entry's buffer holds the next reply kept: a full cache allocates nothing
//! per call. A client address holding more than half of a full
//! shard has its own oldest entry evicted instead, so one client's calls cannot push another
//! client's replies out (Linux nfsd's single LRU lets them).
//!
//! Recovery: a retransmission that arrives while its first call is still running is told
//! [`Lookup::InProgress`] (the server answers NFS3ERR_JUKEBOX and the client retries later,
//! where Linux drops it); a call whose handler gave up ([`Drc::abandon`]) leaves nothing behind.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

/// Octets of the arguments the checksum covers (Linux: `RC_CSUMLEN`).
pub const CSUM_LEN: usize = 256;
const SHARDS: usize = 16;
/// Largest reply kept (non-idempotent replies are a few hundred octets).
pub const MAX_REPLY: usize = 1024;

/// Bounds of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrcConfig {
    /// Entries kept at most (in progress or finished).
    pub max_entries: usize,
    /// Octets of replies kept at most (the capacity of their buffers: a reply is kept in a
    /// power of two from 256 octets).
    pub max_bytes: usize,
}

impl Default for DrcConfig {
    fn default() -> Self {
        DrcConfig {
            max_entries: 8192,
            max_bytes: 4 << 20,
        }
    }
}

/// What identifies a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrcKey {
    /// The client's IP address.
    pub addr: IpAddr,
    /// Transaction id.
    pub xid: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure.
    pub proc_num: u32,
    /// Length of the arguments.
    pub len: u32,
    /// Checksum of the first [`CSUM_LEN`] octets of the arguments.
    pub csum: u32,
}

impl DrcKey {
    /// The key of a call from `addr` with these header fields and `args`.
    pub fn new(addr: IpAddr, xid: u32, vers: u32, proc_num: u32, args: &[u8]) -> DrcKey {
        let head = &args[..args.len().min(CSUM_LEN)];
        // FNV-1a: cheap, and enough to tell a reused XID from a retransmission.
        let csum = head.iter().fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        DrcKey {
            addr,
            xid,
            vers,
            proc_num,
            len: args.len().min(u32::MAX as usize) as u32,
            csum,
        }
    }

    fn shard(&self) -> usize {
        let a = match self.addr {
            IpAddr::V4(v) => u32::from(v),
            IpAddr::V6(v) => v
                .octets()
                .iter()
                .fold(0u32, |h, &b| h.rotate_left(5) ^ u32::from(b)),
        };
        ((self.xid ^ a ^ self.csum).wrapping_mul(0x9e37_79b9) >> 28) as usize % SHARDS
    }
}

/// What [`Drc::begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A new call: it is now in progress; call [`Drc::finish`] or [`Drc::abandon`].
    New,
    /// A retransmission of a call still running.
    InProgress,
    /// A retransmission of a finished call: its reply (the RPC results).
    Replay(Vec<u8>),
}

#[derive(Default)]
struct Shard {
    map: HashMap<DrcKey, Option<Vec<u8>>>,
    /// Finished entries, oldest first (eviction order).
    done: VecDeque<DrcKey>,
    bytes: usize,
    /// Finished entries and their octets, per client address (an address leaves the map
    /// with its last entry).
    per: HashMap<IpAddr, (usize, usize)>,
    /// Reply buffers of entries evicted or forgotten, for the next replies to be kept: once
    /// the shard is full, keeping a reply allocates nothing.
    free: Vec<Vec<u8>>,
}

/// Reply buffers a shard keeps for reuse at most.
const FREE_MAX: usize = 32;

/// The capacity a reply of `len` octets is kept in: a power of two from 256, so that a
/// buffer freed by one reply fits the next of a like size.
fn class(len: usize) -> usize {
    len.next_power_of_two().max(256)
}

/// A buffer holding `results`, one of `free` (buffers of entries gone) when one is at hand.
fn keep(free: &mut Vec<Vec<u8>>, results: &[u8]) -> Vec<u8> {
    let mut v = free.pop().unwrap_or_default();
    v.clear();
    v.reserve_exact(class(results.len()));
    v.extend_from_slice(results);
    v
}

impl Shard {
    /// Takes back the buffer of an entry gone.
    fn recycle(&mut self, v: Vec<u8>) {
        if self.free.len() < FREE_MAX {
            self.free.push(v);
        }
    }

    /// Counts a finished entry of `addr` with a reply of `len` octets in (`add`) or out.
    fn count(&mut self, addr: IpAddr, len: usize, add: bool) {
        if add {
            self.bytes += len;
            let e = self.per.entry(addr).or_default();
            *e = (e.0 + 1, e.1 + len);
            return;
        }
        self.bytes -= len;
        if let Some(e) = self.per.get_mut(&addr) {
            *e = (e.0.saturating_sub(1), e.1.saturating_sub(len));
            if e.0 == 0 {
                self.per.remove(&addr);
            }
        }
    }
}

/// The cache.
pub struct Drc {
    shards: [Mutex<Shard>; SHARDS],
    cfg: DrcConfig,
}

impl Drc {
    /// An empty cache with these bounds.
    pub fn new(cfg: DrcConfig) -> Drc {
        Drc {
            shards: Default::default(),
            cfg: DrcConfig {
                max_entries: cfg.max_entries.max(SHARDS),
                max_bytes: cfg.max_bytes.max(SHARDS * MAX_REPLY),
            },
        }
    }

    fn shard(&self, k: &DrcKey) -> std::sync::MutexGuard<'_, Shard> {
        // A panic elsewhere while holding the lock leaves a consistent map: keep using it.
        self.shards[k.shard()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Looks `k` up; a new key is entered as in progress. Returns the entries evicted to make
    /// room (for the counters) with the outcome.
    pub fn begin(&self, k: DrcKey) -> (Lookup, u64) {
        let mut s = self.shard(&k);
        match s.map.get(&k) {
            Some(Some(r)) => return (Lookup::Replay(r.clone()), 0),
            Some(None) => return (Lookup::InProgress, 0),
            None => {}
        }
        s.map.insert(k, None);
        let evicted = self.trim(&mut s, k.addr);
        (Lookup::New, evicted)
    }

    /// Stores the reply of `k` (results longer than [`MAX_REPLY`] are not kept: the entry is
    /// dropped, as a cache may).
    pub fn finish(&self, k: DrcKey, results: &[u8]) -> u64 {
        let mut s = self.shard(&k);
        if results.len() > MAX_REPLY {
            s.map.remove(&k);
            return 0;
        }
        let sh = &mut *s;
        let Some(slot @ None) = sh.map.get_mut(&k) else {
            return 0; // evicted meanwhile, or finished twice: nothing to do
        };
        let kept = keep(&mut sh.free, results);
        let held = kept.capacity();
        *slot = Some(kept);
        s.count(k.addr, held, true);
        s.done.push_back(k);
        self.trim(&mut s, k.addr)
    }

    /// Forgets `k` (its handler produced no reply worth keeping).
    pub fn abandon(&self, k: DrcKey) {
        let mut s = self.shard(&k);
        if let Some(Some(r)) = s.map.remove(&k) {
            s.count(k.addr, r.capacity(), false);
            s.done.retain(|d| *d != k);
            s.recycle(r);
        }
    }

    /// Evicts finished entries while the shard is over its share: the oldest, or, when
    /// `addr` (the address of the call just entered) holds more than half of the shard's
    /// entries or octets, the oldest of `addr`'s, so that one client's calls do not push
    /// every other client's replies out.
    fn trim(&self, s: &mut Shard, addr: IpAddr) -> u64 {
        let max_entries = self.cfg.max_entries / SHARDS;
        let max_bytes = self.cfg.max_bytes / SHARDS;
        let mut n = 0;
        while s.map.len() > max_entries || s.bytes > max_bytes {
            let (mine, my_bytes) = s.per.get(&addr).copied().unwrap_or_default();
            let at = if mine * 2 > max_entries || my_bytes * 2 > max_bytes {
                s.done.iter().position(|d| d.addr == addr).unwrap_or(0)
            } else {
                0
            };
            let Some(old) = s.done.remove(at) else {
                break; // only calls in progress: they finish (or are abandoned) soon
            };
            if let Some(Some(r)) = s.map.remove(&old) {
                s.count(old.addr, r.capacity(), false);
                s.recycle(r);
            }
            n += 1;
        }
        n
    }

    /// Entries held (in progress and finished) and octets of replies held.
    pub fn usage(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(e, b), m| {
            let s = m.lock().unwrap_or_else(|e| e.into_inner());
            (e + s.map.len(), b + s.bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn key(xid: u32, args: &[u8]) -> DrcKey {
        DrcKey::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), xid, 3, 12, args)
    }

    #[test]
    fn accepts_a_retransmission_and_replays_the_first_reply() {
        let d = Drc::new(DrcConfig::default());
        let k = key(7, b"remove args");
        assert_eq!(d.begin(k).0, Lookup::New);
        assert_eq!(d.begin(k).0, Lookup::InProgress);
        d.finish(k, b"reply");
        assert_eq!(d.begin(k).0, Lookup::Replay(b"reply".to_vec()));
    }

    #[test]
    fn rejects_a_reused_xid_with_other_arguments_as_a_new_call() {
        let d = Drc::new(DrcConfig::default());
        let k = key(7, b"remove a");
        assert_eq!(d.begin(k).0, Lookup::New);
        d.finish(k, b"reply");
        assert_eq!(d.begin(key(7, b"remove b")).0, Lookup::New);
        let other = DrcKey {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            ..k
        };
        assert_eq!(d.begin(other).0, Lookup::New, "another client");
    }

    #[test]
    fn stays_within_its_bounds_and_evicts_oldest_first() {
        let d = Drc::new(DrcConfig {
            max_entries: 64,
            max_bytes: 1 << 20,
        });
        let mut evicted = 0;
        for x in 0..10_000u32 {
            let k = key(x, &x.to_be_bytes());
            let (found, e) = d.begin(k);
            assert_eq!(found, Lookup::New);
            evicted += e + d.finish(k, &[0u8; 100]);
        }
        let (entries, _) = d.usage();
        assert!(entries <= 64, "{entries}");
        assert_eq!(evicted, 10_000 - entries as u64);
        // The newest are still there.
        let k = key(9_999, &9_999u32.to_be_bytes());
        assert!(matches!(d.begin(k).0, Lookup::Replay(_)));
    }

    #[test]
    fn rejects_one_address_evicting_the_replies_of_another() {
        let d = Drc::new(DrcConfig::default());
        let victim = key(7, b"remove important");
        assert_eq!(d.begin(victim).0, Lookup::New);
        d.finish(victim, b"victim's reply");
        let flooder = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 66));
        for x in 0..100_000u32 {
            let k = DrcKey::new(flooder, x, 3, 2, &x.to_be_bytes());
            d.begin(k);
            d.finish(k, &[0u8; 200]);
        }
        assert!(d.usage().0 <= DrcConfig::default().max_entries);
        assert_eq!(
            d.begin(victim).0,
            Lookup::Replay(b"victim's reply".to_vec()),
            "another address's calls evicted the reply"
        );
    }

    #[test]
    fn bounds_bytes_and_drops_oversized_replies() {
        let d = Drc::new(DrcConfig {
            max_entries: 1 << 20,
            max_bytes: SHARDS * MAX_REPLY,
        });
        for x in 0..1000u32 {
            let k = key(x, &x.to_be_bytes());
            d.begin(k);
            d.finish(k, &[1u8; 1000]);
        }
        assert!(d.usage().1 <= SHARDS * MAX_REPLY);
        let k = key(5000, b"big");
        d.begin(k);
        d.finish(k, &[0u8; MAX_REPLY + 1]);
        assert_eq!(d.begin(k).0, Lookup::New, "not kept");
    }

    #[test]
    fn abandon_forgets_the_call() {
        let d = Drc::new(DrcConfig::default());
        let k = key(1, b"x");
        d.begin(k);
        d.abandon(k);
        assert_eq!(d.begin(k).0, Lookup::New);
    }
}
