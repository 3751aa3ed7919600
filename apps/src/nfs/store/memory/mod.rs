//! The in-memory store ([`MemoryStore`]): a whole file tree in process memory, what
//! `rpcrdma-nfsd memory` serves. Nothing survives a restart; the write verifier and the handle
//! generation change then, so clients see their old handles STALE and resend uncommitted data.
//!
//! Normal operation: one [`RwLock`] over the tree (`tree::Tree`); lookups, reads, readdir
//! and getattr take it shared, everything that changes the tree takes it exclusive (the
//! `*_wcc` methods take the attributes before and after under the same hold, so no other
//! change falls between them), and nothing but tree work (no I/O, no callbacks other than
//! READDIR's `emit` and LISTXATTRS's `each`, which only encode) runs under it. File data lives in lazily allocated fixed-size blocks
//! (`blocks`); a store built [`MemoryStore::with_pool`] keeps large blocks in the endpoint's
//! registered buffers and answers READs from them without a copy
//! ([`Store::read_registered`]), copying a block on write while a reply holds it. Recovery: a poisoned lock (a panic elsewhere while holding it) is recovered
//! with `into_inner`: every tree method checks before it changes, so the tree stays
//! consistent.
//!
//! File handles are 16 octets: `"RM"`, version 1, a zero pad octet, the file id (u64, big
//! endian) and the generation (u32, big endian; random per store instance, so handles from
//! an earlier run are STALE rather than naming another file). Another length, magic or
//! version is BADHANDLE; an unknown file id or another generation is STALE. File ids are never
//! reused within one store.
//!
//! READDIR cookies are per-directory insertion sequence numbers (1 and 2 are `.` and `..`,
//! entries from 3 up); an entry keeps its cookie until it is removed, so paging through a
//! directory that changes meanwhile lists every entry that stayed exactly once. The cookie
//! verifier is derived from the directory's file id and generation.

mod acl;
mod blocks;
mod charge;
mod names;
#[cfg(test)]
mod perm_tests;
#[cfg(test)]
pub(crate) mod test_pool;
#[cfg(test)]
mod tests;
mod tree;
mod xattr;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use rpcrdma_poller::BufPool;

use crate::nfs::acl::{Acl, Acls};
use crate::nfs::identity::{self, Cred, Want};
use crate::nfs::store::{
    access_from_rwx, DirListing, NewObj, SharedRead, Special, Store, Wcc, XattrSet,
};
use crate::nfs::types::{
    CreateHow, DirEntry, Fattr3, Fh, FsStat, NfsResult, Nfsstat3, Sattr3, StableHow, Time3, WccData,
};
use blocks::Alloc;
use tree::{Body, Tree, FIRST_SEQ, ROOT};

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryOptions {
    /// Octets of memory the store may hold for files, names and data (see
    /// [`MemoryStore`]'s accounting); what would pass it is NOSPC.
    pub capacity: u64,
    /// Most files (inodes, the root included); creates past it are NOSPC.
    pub max_files: u64,
    /// Size of one data block (allocated on first write into it). A store built
    /// [`MemoryStore::with_pool`] uses the pool's buffer size instead.
    pub block_size: usize,
}

impl Default for MemoryOptions {
    /// 1 GiB, one million files, 1 MiB blocks.
    fn default() -> MemoryOptions {
        MemoryOptions {
            capacity: 1 << 30,
            max_files: 1 << 20,
            block_size: 1 << 20,
        }
    }
}

/// Handle magic.
const MAGIC: [u8; 2] = *b"RM";
/// Handle layout version.
const VERSION: u8 = 1;
/// Handle length.
const FH_LEN: usize = 16;

/// Eight random octets (getrandom; the clock and pid when that fails).
pub(crate) fn random8() -> [u8; 8] {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid writable buffer of 8 octets.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let v = (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 40);
        b = v.to_be_bytes();
    }
    b
}

/// The NFSv3 store that keeps everything in memory.
#[derive(Debug)]
pub struct MemoryStore {
    tree: RwLock<Tree>,
    verf: [u8; 8],
    generation: u32,
}

impl MemoryStore {
    /// An empty store (a root directory, mode 0755, owned by root); file data in `Vec`
    /// blocks, READs always copied ([`Store::read_registered`] is always `None`).
    pub fn new(opts: MemoryOptions) -> MemoryStore {
        MemoryStore::build(opts, Alloc::plain(opts.block_size))
    }

    /// As [`MemoryStore::new`], with blocks of `pool.buf_size()` octets; a block that grows
    /// to 64 KiB (or less when the buffers are smaller) moves into one of the pool's
    /// registered buffers, from which READs with a Write chunk are answered without a copy.
    /// The store leaves a quarter of the pool's buffers free for READ results that are
    /// copied; past that (and when the pool is empty) blocks stay `Vec`s: a dry pool never
    /// fails a write. A block is charged the same whichever kind holds it.
    pub fn with_pool(opts: MemoryOptions, pool: BufPool) -> MemoryStore {
        MemoryStore::build(opts, Alloc::pooled(pool))
    }

    fn build(opts: MemoryOptions, alloc: Alloc) -> MemoryStore {
        let r = random8();
        let generation = u32::from_be_bytes([r[0], r[1], r[2], r[3]]) | 1;
        let max = (1u64 << 63) - 1;
        MemoryStore {
            tree: RwLock::new(Tree::new(opts, alloc, generation, max)),
            verf: random8(),
            generation,
        }
    }

    fn read_tree(&self) -> RwLockReadGuard<'_, Tree> {
        self.tree.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_tree(&self) -> RwLockWriteGuard<'_, Tree> {
        self.tree.write().unwrap_or_else(|e| e.into_inner())
    }

    fn fh(&self, id: u64) -> Fh {
        let mut b = [0u8; FH_LEN];
        b[..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[4..12].copy_from_slice(&id.to_be_bytes());
        b[12..16].copy_from_slice(&self.generation.to_be_bytes());
        Fh::new(&b).unwrap_or_else(|| unreachable!("16 octets fit"))
    }

    /// The file id and generation in `fh`; BADHANDLE when it is not one of ours.
    fn decode(fh: &Fh) -> NfsResult<(u64, u32)> {
        let b = fh.as_bytes();
        if b.len() != FH_LEN || b[..2] != MAGIC || b[2] != VERSION {
            return Err(Nfsstat3::BADHANDLE);
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[4..12]);
        let mut generation = [0u8; 4];
        generation.copy_from_slice(&b[12..16]);
        Ok((u64::from_be_bytes(id), u32::from_be_bytes(generation)))
    }

    /// The live file id `fh` names (BADHANDLE, STALE).
    fn id(&self, tree: &Tree, fh: &Fh) -> NfsResult<u64> {
        let (id, generation) = Self::decode(fh)?;
        tree.check(id, generation).map(|_| id)
    }

    /// The cookie verifier of directory `id`.
    fn dir_verf(&self, id: u64) -> [u8; 8] {
        (id ^ (u64::from(self.generation) << 32)).to_be_bytes()
    }

    /// Calls `emit` for each entry of directory `id` after `cookie`; `Ok(true)` at the end.
    fn list(
        &self,
        tree: &Tree,
        id: u64,
        cookie: u64,
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<bool> {
        let d = tree.dir(id)?;
        let mut one = |fileid: u64, name: &[u8], cookie: u64| -> NfsResult<bool> {
            let plus = if plus {
                Some((self.fh(fileid), tree.attr(fileid)?))
            } else {
                None
            };
            Ok(emit(&DirEntry {
                fileid,
                name,
                cookie,
                plus,
            }))
        };
        if cookie == 0 && !one(id, b".", 1)? {
            return Ok(false);
        }
        if cookie <= 1 && !one(d.parent, b"..", 2)? {
            return Ok(false);
        }
        for (&seq, (name, fileid)) in d.by_seq.range(cookie.max(FIRST_SEQ - 1) + 1..) {
            if !one(*fileid, name, seq)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs `f` on the tree (exclusive) with the live file id `fh` names.
    fn with_mut<T>(&self, fh: &Fh, f: impl FnOnce(&mut Tree, u64) -> NfsResult<T>) -> NfsResult<T> {
        let mut tree = self.write_tree();
        let id = self.id(&tree, fh)?;
        f(&mut tree, id)
    }

    /// [`MemoryStore::with_mut`] with the weak cache consistency data of `fh` taken under the
    /// same lock as the change: no other change can fall between them.
    fn with_wcc<T>(&self, fh: &Fh, f: impl FnOnce(&mut Tree, u64) -> NfsResult<T>) -> Wcc<T> {
        let mut tree = self.write_tree();
        let id = match self.id(&tree, fh) {
            Ok(id) => id,
            Err(e) => return (Err(e), WccData::default()),
        };
        let before = tree.attr(id).ok().map(|a| a.wcc());
        let r = f(&mut tree, id);
        let after = tree.attr(id).ok();
        (r, WccData { before, after })
    }
}

/// The data of file `id` that `cx` may read (ISDIR, INVAL for other types, ACCES as
/// [`identity::may_io`] says).
fn readable<'t>(tree: &'t Tree, cx: &Cred, id: u64) -> NfsResult<(u64, &'t blocks::Blocks)> {
    let r = match &tree.inodes.get(&id).ok_or(Nfsstat3::STALE)?.body {
        Body::File { size, data } => (*size, data),
        Body::Dir(_) => return Err(Nfsstat3::ISDIR),
        _ => return Err(Nfsstat3::INVAL),
    };
    let (a, acl) = tree.subject(id)?;
    identity::may_io(cx, &a, acl, Want::READ)?;
    Ok(r)
}

impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn root(&self) -> Fh {
        self.fh(ROOT)
    }

    fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3> {
        let tree = self.read_tree();
        tree.attr(self.id(&tree, fh)?)
    }

    fn setattr(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()> {
        self.with_mut(fh, |tree, id| tree.setattr(cx, id, set, guard))
    }

    fn setattr_wcc(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> Wcc<()> {
        self.with_wcc(fh, |tree, id| tree.setattr(cx, id, set, guard))
    }

    fn lookup(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        let tree = self.read_tree();
        let id = tree.lookup(cx, self.id(&tree, dir)?, name)?;
        Ok(self.fh(id))
    }

    fn readlink(&self, _cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize> {
        let tree = self.read_tree();
        let id = self.id(&tree, fh)?;
        match &tree.inodes.get(&id).ok_or(Nfsstat3::STALE)?.body {
            Body::Symlink(t) if t.len() <= out.len() => {
                out[..t.len()].copy_from_slice(t);
                Ok(t.len())
            }
            Body::Symlink(_) => Err(Nfsstat3::NAMETOOLONG),
            Body::Dir(_) => Err(Nfsstat3::ISDIR),
            _ => Err(Nfsstat3::INVAL),
        }
    }

    fn read(&self, cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)> {
        let tree = self.read_tree();
        let (size, data) = readable(&tree, cx, self.id(&tree, fh)?)?;
        let n = data.read(tree.opts.block_size, size, offset, out);
        Ok((n, offset.saturating_add(n as u64) >= size))
    }

    fn read_registered(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        count: usize,
    ) -> Option<NfsResult<SharedRead>> {
        let tree = self.read_tree();
        let (size, data) = match self.id(&tree, fh).and_then(|id| readable(&tree, cx, id)) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        if offset >= size {
            return None;
        }
        let end = offset.saturating_add(count as u64).min(size);
        let len = (end - offset) as usize;
        let (buf, off, len) = data.read_registered(tree.alloc.bs, offset, len)?;
        Some(Ok(SharedRead {
            buf,
            off,
            len,
            eof: end >= size,
        }))
    }

    fn write(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow> {
        self.with_mut(fh, |tree, id| tree.write(cx, id, offset, data))?;
        Ok(stable)
    }

    fn commit(&self, cx: &Cred, fh: &Fh) -> NfsResult<()> {
        let tree = self.read_tree();
        let id = self.id(&tree, fh)?;
        match &tree.inodes.get(&id).ok_or(Nfsstat3::STALE)?.body {
            Body::File { .. } => {
                let (a, acl) = tree.subject(id)?;
                identity::may_io(cx, &a, acl, Want::WRITE)
            }
            Body::Dir(_) => Err(Nfsstat3::ISDIR),
            _ => Err(Nfsstat3::INVAL),
        }
    }

    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh> {
        let id = self.with_mut(dir, |tree, d| tree.create(cx, d, name, how))?;
        Ok(self.fh(id))
    }

    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh> {
        let id = self.with_mut(dir, |tree, d| tree.mkdir(cx, d, name, attr))?;
        Ok(self.fh(id))
    }

    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        let id = self.with_mut(dir, |tree, d| tree.symlink(cx, d, name, target, attr))?;
        Ok(self.fh(id))
    }

    fn mknod(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        let id = self.with_mut(dir, |tree, d| tree.mknod(cx, d, name, node, attr))?;
        Ok(self.fh(id))
    }

    fn create_wcc(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        new: NewObj<'_>,
    ) -> Wcc<(Fh, Option<Fattr3>)> {
        self.with_wcc(dir, |tree, d| {
            let id = match new {
                NewObj::File(how) => tree.create(cx, d, name, how),
                NewObj::Dir(attr) => tree.mkdir(cx, d, name, attr),
                NewObj::Symlink(target, attr) => tree.symlink(cx, d, name, target, attr),
                NewObj::Node(node, attr) => tree.mknod(cx, d, name, node, attr),
            }?;
            Ok((self.fh(id), tree.attr(id).ok()))
        })
    }

    fn access(&self, cx: &Cred, fh: &Fh, want: u32) -> NfsResult<(Fattr3, u32)> {
        let tree = self.read_tree();
        let id = self.id(&tree, fh)?;
        let (a, acl) = tree.subject(id)?;
        let rwx = identity::granted(cx, &a, acl);
        Ok((a, access_from_rwx(rwx, a.ftype) & want))
    }

    fn fallocate(&self, cx: &Cred, fh: &Fh, offset: u64, len: u64, punch: bool) -> NfsResult<()> {
        self.with_mut(fh, |tree, id| tree.fallocate(cx, id, offset, len, punch))
    }

    fn seek(&self, cx: &Cred, fh: &Fh, offset: u64, hole: bool) -> NfsResult<(u64, bool)> {
        let tree = self.read_tree();
        let id = self.id(&tree, fh)?;
        tree.seek(cx, id, offset, hole)
    }

    fn clone_range(
        &self,
        cx: &Cred,
        src: (&Fh, u64),
        dst: (&Fh, u64),
        count: u64,
    ) -> NfsResult<()> {
        let mut tree = self.write_tree();
        let (s, d) = (self.id(&tree, src.0)?, self.id(&tree, dst.0)?);
        tree.clone_range(cx, (s, src.1), (d, dst.1), count)
    }

    fn change_monotonic(&self) -> bool {
        // Every change is stamped by `Tree::stamp`, which never repeats or goes back.
        true
    }

    fn getacl(&self, _cx: &Cred, fh: &Fh) -> NfsResult<(Fattr3, Acls)> {
        let tree = self.read_tree();
        let id = self.id(&tree, fh)?;
        Ok((tree.attr(id)?, tree.acls(id)?))
    }

    fn setacl(
        &self,
        cx: &Cred,
        fh: &Fh,
        access: Option<&Acl>,
        default: Option<&Acl>,
    ) -> NfsResult<()> {
        self.with_mut(fh, |tree, id| tree.setacl(cx, id, access, default))
    }

    fn xattr_support(&self) -> bool {
        true
    }

    fn getxattr(&self, cx: &Cred, fh: &Fh, name: &[u8], out: &mut [u8]) -> NfsResult<usize> {
        let tree = self.read_tree();
        tree.getxattr(cx, self.id(&tree, fh)?, name, out)
    }

    fn setxattr_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Wcc<()> {
        self.with_wcc(fh, |tree, id| tree.setxattr(cx, id, name, value, how))
    }

    fn listxattrs(&self, cx: &Cred, fh: &Fh, each: &mut dyn FnMut(&[u8])) -> NfsResult<()> {
        let tree = self.read_tree();
        tree.listxattrs(cx, self.id(&tree, fh)?, each)
    }

    fn removexattr_wcc(&self, cx: &Cred, fh: &Fh, name: &[u8]) -> Wcc<()> {
        self.with_wcc(fh, |tree, id| tree.removexattr(cx, id, name))
    }

    fn remove(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.with_mut(dir, |tree, d| tree.remove(cx, d, name))
    }

    fn remove_wcc(&self, cx: &Cred, dir: &Fh, name: &[u8], rmdir: bool) -> Wcc<()> {
        self.with_wcc(dir, |tree, d| match rmdir {
            true => tree.rmdir(cx, d, name),
            false => tree.remove(cx, d, name),
        })
    }

    fn rmdir(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.with_mut(dir, |tree, d| tree.rmdir(cx, d, name))
    }

    fn rename(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()> {
        self.with_mut(from_dir, |tree, fd| {
            let td = self.id(tree, to_dir)?;
            tree.rename(cx, (fd, from_name), (td, to_name))
        })
    }

    fn rename_wcc(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> (NfsResult<()>, WccData, WccData) {
        let mut tree = self.write_tree();
        let (fd, td) = (self.id(&tree, from_dir), self.id(&tree, to_dir));
        let before =
            |tree: &Tree, d: &NfsResult<u64>| d.as_ref().ok().and_then(|&d| tree.attr(d).ok());
        let (fb, tb) = (before(&tree, &fd), before(&tree, &td));
        let r = match (fd, td) {
            (Ok(f), Ok(t)) => tree.rename(cx, (f, from_name), (t, to_name)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let wcc = |b: Option<Fattr3>, d: &NfsResult<u64>| WccData {
            before: b.map(|a| a.wcc()),
            after: before(&tree, d),
        };
        (r, wcc(fb, &fd), wcc(tb, &td))
    }

    fn link(&self, cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.with_mut(fh, |tree, id| {
            let d = self.id(tree, dir)?;
            tree.link(cx, id, d, name)
        })
    }

    fn link_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        dir: &Fh,
        name: &[u8],
    ) -> (NfsResult<()>, Option<Fattr3>, WccData) {
        let mut obj = None;
        let (r, wcc) = self.with_wcc(dir, |tree, d| {
            let id = self.id(tree, fh)?;
            let r = tree.link(cx, id, d, name);
            obj = tree.attr(id).ok();
            r
        });
        (r, obj, wcc)
    }

    fn readdir(
        &self,
        cx: &Cred,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<DirListing> {
        let tree = self.read_tree();
        let id = self.id(&tree, dir)?;
        let next_seq = tree.may_dir(cx, id, Want::READ)?.next_seq;
        let dverf = self.dir_verf(id);
        if cookie != 0 && (verf != dverf || cookie >= next_seq) {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        let eof = self.list(&tree, id, cookie, plus, emit)?;
        Ok(DirListing { verf: dverf, eof })
    }

    /// Octets as charged (see the accounting above); files: `max_files`, and no more than
    /// the free octets hold inodes.
    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        let tree = self.read_tree();
        self.id(&tree, fh)?;
        let free = tree.opts.capacity.saturating_sub(tree.used);
        let ffree = tree
            .opts
            .max_files
            .saturating_sub(tree.inodes.len() as u64)
            .min(free / charge::INODE);
        Ok(FsStat {
            tbytes: tree.opts.capacity,
            fbytes: free,
            abytes: free,
            tfiles: tree.opts.max_files,
            ffiles: ffree,
            afiles: ffree,
        })
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.verf
    }
}
