//! The directory store's file handles and its cache of open descriptors.
//!
//! Handle layout (at most [`MAX_STORE_HANDLE`] octets): `"RD"`, version 1, a zero octet, the export tag (4
//! octets: a hash of the export root's kernel handle, so a handle from another export on the
//! same file system is STALE here), the kernel handle type (i32, big endian), then the kernel
//! handle octets (`name_to_handle_at`; at most [`MAX_KERNEL`]). The kernel handle names the
//! inode and its generation, so handles survive server restarts and go STALE when the file
//! is removed.
//!
//! Normal operation: [`FdCache`] keeps up to its capacity of descriptors (default
//! [`CACHE_CAP`]; `--dir-cache`: a tree walk of thousands of objects should find each one
//! still open when the client comes back to it), keyed by handle, oldest inserted evicted
//! first, hits, misses and evictions counted; each entry says whether its descriptor is open
//! for I/O (a regular file opened read-write or read-only) or only names the object
//! (`O_PATH`); descriptors are shared (`Arc`) so an eviction never closes one in use. Beside
//! each descriptor whose handle the server made itself from a name (LOOKUP, creation) the
//! cache keeps the object's inode number ([`FdCache::ino_handle`]): while the descriptor is
//! held the inode lives, and no other file of the file system has its number (POSIX: `st_dev`
//! and `st_ino` identify a file), so a name whose `lstat` shows that number names that handle's
//! object, and neither LOOKUP nor READDIRPLUS need ask the kernel for its handle again (their
//! `statx` also names the mount, so a mount point is never taken for the object under it). Recovery: entries of
//! removed objects are dropped when they are seen with no links ([`FdCache::forget`]), so their
//! space is freed; an entry's inode number goes with it.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::sys::KernelHandle;
use crate::nfs::handle_mac::MAX_STORE_HANDLE;
use crate::nfs::types::{Fh, NfsResult, Nfsstat3, FHSIZE};

/// Handle magic.
const MAGIC: [u8; 2] = *b"RD";
/// Handle layout version.
const VERSION: u8 = 1;
/// Octets before the kernel handle.
const HDR: usize = 12;
/// Longest kernel handle a [`Fh`] carries: the server appends its seal to every store handle
/// ([`MAX_STORE_HANDLE`]).
pub(super) const MAX_KERNEL: usize = MAX_STORE_HANDLE - HDR;
/// Descriptors kept open by default.
pub const CACHE_CAP: usize = 8192;

/// The export tag of an export whose root has kernel handle `root` (FNV-1a).
pub(super) fn export_tag(root: &KernelHandle) -> [u8; 4] {
    let mut h: u32 = 0x811c_9dc5;
    for &b in root.htype().to_be_bytes().iter().chain(root.bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h.to_be_bytes()
}

/// The NFS handle for kernel handle `kh` in the export tagged `tag`; `None` when too long.
pub(super) fn encode(tag: [u8; 4], kh: &KernelHandle) -> Option<Fh> {
    let bytes = kh.bytes();
    if bytes.len() > MAX_KERNEL {
        return None;
    }
    let mut b = [0u8; FHSIZE];
    b[..2].copy_from_slice(&MAGIC);
    b[2] = VERSION;
    b[4..8].copy_from_slice(&tag);
    b[8..12].copy_from_slice(&kh.htype().to_be_bytes());
    b[HDR..HDR + bytes.len()].copy_from_slice(bytes);
    Fh::new(&b[..HDR + bytes.len()])
}

/// The kernel handle in `fh`: BADHANDLE when it is not a directory-store handle, STALE when
/// it belongs to another export.
pub(super) fn decode(tag: [u8; 4], fh: &Fh) -> NfsResult<KernelHandle> {
    let b = fh.as_bytes();
    if b.len() <= HDR || b[..2] != MAGIC || b[2] != VERSION || b[3] != 0 {
        return Err(Nfsstat3::BADHANDLE);
    }
    if b[4..8] != tag {
        return Err(Nfsstat3::STALE);
    }
    let htype = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    KernelHandle::new(htype, &b[HDR..]).ok_or(Nfsstat3::BADHANDLE)
}

/// What the descriptor cache did (counters `dir.fd_cache.*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the descriptor open.
    pub hits: u64,
    /// Lookups that had to open the handle.
    pub misses: u64,
    /// Descriptors closed to stay within the capacity.
    pub evictions: u64,
    /// Descriptors held now.
    pub held: u64,
    /// The capacity.
    pub capacity: u64,
}

/// Open descriptors by handle, bounded, oldest evicted first.
#[derive(Debug)]
pub(super) struct FdCache {
    map: HashMap<Fh, (Arc<OwnedFd>, u64, bool)>,
    /// Inode numbers of held descriptors whose handle the server made ([`FdCache::name_ino`]).
    by_ino: HashMap<u64, Fh>,
    /// The inode number recorded for each handle of `by_ino`.
    ino_of: HashMap<Fh, u64>,
    order: VecDeque<(Fh, u64)>,
    next: u64,
    cap: usize,
    stats: CacheStats,
}

impl Default for FdCache {
    fn default() -> Self {
        FdCache::with_capacity(CACHE_CAP)
    }
}

impl FdCache {
    /// A cache of at most `cap` descriptors (at least 1).
    pub(super) fn with_capacity(cap: usize) -> FdCache {
        FdCache {
            map: HashMap::new(),
            by_ino: HashMap::new(),
            ino_of: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            cap: cap.max(1),
            stats: CacheStats::default(),
        }
    }

    /// The descriptor cached for `fh` and whether it is open for I/O (counted as a hit or a
    /// miss).
    pub(super) fn get(&mut self, fh: &Fh) -> Option<(Arc<OwnedFd>, bool)> {
        let r = self.map.get(fh).map(|(fd, _, io)| (fd.clone(), *io));
        match r {
            Some(_) => self.stats.hits += 1,
            None => self.stats.misses += 1,
        }
        r
    }

    /// The descriptor cached for `fh` and whether it is open for I/O, counted as a hit when
    /// found (a miss is counted by the [`FdCache::get`] that follows).
    pub(super) fn peek(&mut self, fh: &Fh) -> Option<(Arc<OwnedFd>, bool)> {
        let r = self.map.get(fh).map(|(fd, _, io)| (fd.clone(), *io));
        if r.is_some() {
            self.stats.hits += 1;
        }
        r
    }

    /// The counters.
    pub(super) fn stats(&self) -> CacheStats {
        CacheStats {
            held: self.map.len() as u64,
            capacity: self.cap as u64,
            ..self.stats
        }
    }

    /// Caches `fd` for `fh` (`io`: open for I/O; replacing an older one), evicting the oldest
    /// beyond the cap.
    pub(super) fn insert(&mut self, fh: Fh, fd: Arc<OwnedFd>, io: bool) {
        self.next += 1;
        self.map.insert(fh, (fd, self.next, io));
        self.order.push_back((fh, self.next));
        while self.map.len() > self.cap {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|&(_, s, _)| s == seq) {
                self.forget(&old);
                self.stats.evictions += 1;
            }
        }
        if self.order.len() > 2 * self.cap {
            let map = &self.map;
            self.order
                .retain(|(fh, seq)| map.get(fh).is_some_and(|&(_, s, _)| s == *seq));
        }
    }

    /// Drops the descriptor of `fh` (its object is gone or changed), and its inode number.
    pub(super) fn forget(&mut self, fh: &Fh) {
        self.map.remove(fh);
        if let Some(ino) = self.ino_of.remove(fh) {
            if self.by_ino.get(&ino) == Some(fh) {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// Records that the object `fh` names, whose descriptor is held, has inode number `ino`
    /// (`fh` made by the server from the object's name or descriptor; nothing when `fh` is not
    /// held).
    pub(super) fn name_ino(&mut self, fh: &Fh, ino: u64) {
        if self.map.contains_key(fh) {
            if let Some(old) = self.ino_of.insert(*fh, ino) {
                if old != ino && self.by_ino.get(&old) == Some(fh) {
                    self.by_ino.remove(&old);
                }
            }
            self.by_ino.insert(ino, *fh);
        }
    }

    /// The handle of the held object with inode number `ino`, if one was recorded.
    pub(super) fn ino_handle(&self, ino: u64) -> Option<Fh> {
        self.by_ino.get(&ino).copied()
    }

    /// [`FdCache::ino_handle`] for a LOOKUP: a handle found counts as a hit (a miss is counted
    /// by the [`FdCache::get`] that follows).
    pub(super) fn ino_hit(&mut self, ino: u64) -> Option<Fh> {
        let fh = self.ino_handle(ino);
        if fh.is_some() {
            self.stats.hits += 1;
        }
        fh
    }

    /// Descriptors held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<OwnedFd> {
        Arc::new(std::fs::File::open("/").map(OwnedFd::from).expect("open /"))
    }

    #[test]
    fn accepts_a_walk_within_the_capacity_without_reopening() {
        let mut c = FdCache::with_capacity(1000);
        let shared = fd();
        let fhs: Vec<Fh> = (0..1000u32)
            .map(|i| Fh::new(&i.to_be_bytes()).expect("fh"))
            .collect();
        for fh in &fhs {
            assert!(c.get(fh).is_none());
            c.insert(*fh, shared.clone(), false);
        }
        // A second walk over the same objects: every one still open.
        for fh in &fhs {
            assert!(c.get(fh).is_some());
        }
        let s = c.stats();
        assert_eq!(
            (s.hits, s.misses, s.evictions, s.held),
            (1000, 1000, 0, 1000)
        );
        // One more than fits: the oldest goes, counted.
        c.insert(Fh::new(b"one more").expect("fh"), shared, false);
        assert!(c.get(&fhs[0]).is_none());
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn cache_stays_bounded_and_evicts_oldest() {
        const CACHE_CAP: usize = 256;
        let mut c = FdCache::with_capacity(CACHE_CAP);
        let fhs: Vec<Fh> = (0..CACHE_CAP as u32 + 10)
            .map(|i| Fh::new(&i.to_be_bytes()).expect("fh"))
            .collect();
        let shared = fd();
        for fh in &fhs {
            c.insert(*fh, shared.clone(), false);
            c.insert(*fh, shared.clone(), true);
            c.forget(&fhs[0]);
        }
        assert!(c.len() <= CACHE_CAP);
        assert!(c.order.len() <= 2 * CACHE_CAP + 1);
        assert!(c.get(&fhs[5]).is_none());
        assert!(c.get(&fhs[CACHE_CAP + 9]).is_some());
    }

    #[test]
    fn accepts_an_inode_number_only_while_its_descriptor_is_held() {
        let mut c = FdCache::with_capacity(2);
        let fh = |i: u32| Fh::new(&i.to_be_bytes()).expect("fh");
        c.name_ino(&fh(1), 11);
        assert_eq!(c.ino_handle(11), None, "not held: not recorded");
        c.insert(fh(1), fd(), false);
        c.name_ino(&fh(1), 11);
        assert_eq!(c.ino_handle(11), Some(fh(1)));
        c.forget(&fh(1));
        assert_eq!(c.ino_handle(11), None, "forgotten with its descriptor");
        c.insert(fh(1), fd(), false);
        c.name_ino(&fh(1), 11);
        c.insert(fh(2), fd(), false);
        c.insert(fh(3), fd(), false);
        assert_eq!(c.ino_handle(11), None, "evicted with its descriptor");
        c.name_ino(&fh(2), 12);
        c.insert(fh(2), fd(), true);
        assert_eq!(
            c.ino_handle(12),
            Some(fh(2)),
            "a descriptor replaced keeps it"
        );
    }

    #[test]
    fn rejects_short_foreign_and_wrong_magic_handles() {
        let kh = KernelHandle::new(1, &[1, 2, 3, 4, 5, 6, 7, 8]).expect("kh");
        let tag = export_tag(&kh);
        let fh = encode(tag, &kh).expect("fits");
        assert_eq!(
            decode(tag, &fh).map(|k| k.bytes().to_vec()),
            Ok(kh.bytes().to_vec())
        );
        let other = [tag[0] ^ 1, tag[1], tag[2], tag[3]];
        assert_eq!(decode(other, &fh).err(), Some(Nfsstat3::STALE));
        let mut bad = fh.as_bytes().to_vec();
        bad[0] = b'X';
        assert_eq!(
            decode(tag, &Fh::new(&bad).expect("fh")).err(),
            Some(Nfsstat3::BADHANDLE)
        );
        let short = Fh::new(&fh.as_bytes()[..HDR]).expect("fh");
        assert_eq!(decode(tag, &short).err(), Some(Nfsstat3::BADHANDLE));
        let long = KernelHandle::new(1, &[0; MAX_KERNEL + 1]).expect("kh");
        assert!(encode(tag, &long).is_none());
    }
}
