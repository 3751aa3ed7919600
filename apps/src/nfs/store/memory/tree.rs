//! The memory store's tree: inodes by file id, directories with cookie-ordered entries and a
//! name index, and every namespace operation as plain `&mut self` methods (the caller holds
//! the store's lock).
//!
//! Normal operation: each method checks everything it can refuse before it changes anything,
//! so an error leaves the tree as it was. Times come from one store-wide monotonic clock
//! ([`Tree::stamp`]): every change gets a time strictly after the previous change's, so two
//! changes within one clock tick still give different ctimes (the per-change counter is folded
//! into the nanoseconds). Every method takes the caller's [`Cred`] and checks it first with the
//! rules of [`identity`] (search on a directory looked up in, write and search on one whose
//! entries change, the sticky bit, ownership for mode, times, owner and group).
//!
//! Capacity: `used` charges everything the tree holds (see [`charge`]): an inode, each
//! directory entry with its name, a symbolic link's target, each data block by the memory
//! behind it, an object's ACLs and extended attributes; an operation that would pass the capacity is NOSPC and changes nothing.
//! Recovery: none needed; file ids are never reused, so a handle to a removed inode stays
//! STALE.

use std::collections::{BTreeMap, HashMap};

use super::blocks::{Alloc, Blocks};
use super::charge;
use super::MemoryOptions;
use crate::nfs::acl::Acls;
use crate::nfs::identity::{self, Cred, Want};
use crate::nfs::store::Special;
use crate::nfs::types::{
    check_name_len, is_dot_entry, name_is_wellformed, CreateHow, Fattr3, Ftype3, NfsResult,
    Nfsstat3, Sattr3, SetTime, Time3, PATH_MAX,
};

/// File id of the root directory.
pub(super) const ROOT: u64 = 1;
/// First READDIR cookie of a real entry (1 and 2 are `.` and `..`).
pub(super) const FIRST_SEQ: u64 = 3;
/// `fsid` of every memory store object.
const FSID: u64 = 0x524d;
/// Size a directory reports.
const DIR_SIZE: u64 = 4096;

/// One inode.
#[derive(Debug)]
pub(super) struct Inode {
    pub(super) generation: u32,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) nlink: u32,
    pub(super) atime: Time3,
    pub(super) mtime: Time3,
    pub(super) ctime: Time3,
    /// The EXCLUSIVE create verifier until the first SETATTR.
    pub(super) excl: Option<[u8; 8]>,
    /// POSIX ACLs, when the object has any (`super::acl`).
    pub(super) acl: Option<Box<Acls>>,
    /// User extended attributes, when the object has any (`super::xattr`).
    pub(super) xattrs: Option<Box<Xattrs>>,
    pub(super) body: Body,
}

/// The user extended attributes of one object (`super::xattr` keeps them).
#[derive(Debug, Default)]
pub(super) struct Xattrs {
    /// Values by name (without `user.`), in name order: the order LISTXATTRS gives.
    pub(super) map: BTreeMap<Box<[u8]>, Box<[u8]>>,
    /// Octets counted against `XATTR_OBJ_MAX` (`super::xattr`: `user.`, the name, a NUL and
    /// the value of each).
    pub(super) size: usize,
}

/// What an inode holds.
#[derive(Debug)]
pub(super) enum Body {
    /// Regular file: size and data.
    File { size: u64, data: Blocks },
    /// Directory.
    Dir(Dir),
    /// Symbolic link target.
    Symlink(Vec<u8>),
    /// FIFO, socket or device node (never opened).
    Special(Special),
}

/// A directory: entries by insertion sequence (the READDIR cookie) and by name.
#[derive(Debug)]
pub(super) struct Dir {
    pub(super) parent: u64,
    pub(super) next_seq: u64,
    pub(super) by_seq: BTreeMap<u64, (Vec<u8>, u64)>,
    by_name: HashMap<Vec<u8>, (u64, u64)>,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            next_seq: FIRST_SEQ,
            by_seq: BTreeMap::new(),
            by_name: HashMap::new(),
        }
    }

    /// File id of `name`.
    pub(super) fn get(&self, name: &[u8]) -> Option<u64> {
        self.by_name.get(name).map(|&(_, id)| id)
    }

    pub(super) fn insert(&mut self, name: &[u8], id: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_seq.insert(seq, (name.to_vec(), id));
        self.by_name.insert(name.to_vec(), (seq, id));
    }

    pub(super) fn remove(&mut self, name: &[u8]) {
        if let Some((seq, _)) = self.by_name.remove(name) {
            self.by_seq.remove(&seq);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Checks a name an operation will look up or remove.
pub(super) fn check_name(name: &[u8]) -> NfsResult<()> {
    if !name_is_wellformed(name) {
        return Err(Nfsstat3::INVAL);
    }
    check_name_len(name)
}

/// Checks a name an operation will create (`.` and `..` exist already).
pub(super) fn check_new_name(name: &[u8]) -> NfsResult<()> {
    check_name(name)?;
    if is_dot_entry(name) {
        return Err(Nfsstat3::EXIST);
    }
    Ok(())
}

/// The time one nanosecond after `t`.
fn next_ns(t: Time3) -> Time3 {
    if t.nseconds >= 999_999_999 {
        Time3 {
            seconds: t.seconds.wrapping_add(1),
            nseconds: 0,
        }
    } else {
        Time3 {
            seconds: t.seconds,
            nseconds: t.nseconds + 1,
        }
    }
}

/// The memory store's tree.
#[derive(Debug)]
pub(super) struct Tree {
    pub(super) inodes: HashMap<u64, Inode>,
    next_fileid: u64,
    /// Octets charged against the capacity (see the file's doc).
    pub(super) used: u64,
    last: Time3,
    generation: u32,
    pub(super) opts: MemoryOptions,
    /// Block size and the registered pool (`opts.block_size` is `alloc.bs`).
    pub(super) alloc: Alloc,
    pub(super) max_file_size: u64,
}

impl Tree {
    /// A tree holding only the root directory (mode 0755, owned by root); file data in
    /// blocks from `alloc`.
    pub(super) fn new(
        opts: MemoryOptions,
        alloc: Alloc,
        generation: u32,
        max_file_size: u64,
    ) -> Tree {
        let opts = MemoryOptions {
            block_size: alloc.bs,
            ..opts
        };
        let mut t = Tree {
            inodes: HashMap::new(),
            next_fileid: ROOT,
            used: charge::INODE,
            last: Time3::default(),
            generation,
            opts,
            alloc,
            max_file_size,
        };
        let root = t.new_inode(Body::Dir(Dir::new(ROOT)), (0, 0, 0o755), &Sattr3::default());
        t.inodes.insert(ROOT, root);
        t.next_fileid = ROOT + 1;
        t
    }

    /// The next change time: now, or one nanosecond after the previous change.
    pub(super) fn stamp(&mut self) -> Time3 {
        let now = Time3::now();
        let t = if now > self.last {
            now
        } else {
            next_ns(self.last)
        };
        self.last = t;
        t
    }

    /// The inode `id` of generation `generation`; STALE when there is none (any more).
    pub(super) fn check(&self, id: u64, generation: u32) -> NfsResult<&Inode> {
        match self.inodes.get(&id) {
            Some(i) if i.generation == generation => Ok(i),
            _ => Err(Nfsstat3::STALE),
        }
    }

    pub(super) fn node(&self, id: u64) -> NfsResult<&Inode> {
        self.inodes.get(&id).ok_or(Nfsstat3::STALE)
    }

    pub(super) fn node_mut(&mut self, id: u64) -> NfsResult<&mut Inode> {
        self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)
    }

    /// Directory `id`; NOTDIR when it is something else.
    pub(super) fn dir(&self, id: u64) -> NfsResult<&Dir> {
        match &self.node(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    pub(super) fn dir_mut(&mut self, id: u64) -> NfsResult<&mut Dir> {
        match &mut self.node_mut(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    pub(super) fn is_dir(&self, id: u64) -> bool {
        matches!(self.inodes.get(&id).map(|i| &i.body), Some(Body::Dir(_)))
    }

    /// Directory `id` (NOTDIR otherwise) when `cx` holds `want` on it (ACCES otherwise).
    pub(super) fn may_dir(&self, cx: &Cred, id: u64, want: Want) -> NfsResult<&Dir> {
        let d = self.dir(id)?;
        let (a, acl) = self.subject(id)?;
        identity::may(cx, &a, acl, want)?;
        Ok(d)
    }

    /// Attributes of inode `id`.
    pub(super) fn attr(&self, id: u64) -> NfsResult<Fattr3> {
        Ok(self.attr_of(id, self.node(id)?))
    }

    /// Attributes of inode `i`, whose file id is `id`.
    pub(super) fn attr_of(&self, id: u64, i: &Inode) -> Fattr3 {
        let (ftype, size, used, rdev) = match &i.body {
            Body::File { size, data } => (Ftype3::Reg, *size, data.used(self.alloc.bs), (0, 0)),
            Body::Dir(_) => (Ftype3::Dir, DIR_SIZE, DIR_SIZE, (0, 0)),
            Body::Symlink(t) => (Ftype3::Lnk, t.len() as u64, t.len() as u64, (0, 0)),
            Body::Special(s) => match *s {
                Special::Chr(ma, mi) | Special::Blk(ma, mi) => (s.ftype(), 0, 0, (ma, mi)),
                _ => (s.ftype(), 0, 0, (0, 0)),
            },
        };
        Fattr3 {
            ftype,
            mode: i.mode,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            size,
            used,
            rdev,
            fsid: FSID,
            fileid: id,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
        }
    }

    /// The file id `name` names in directory `dir` (`.` and `..` included); needs search on
    /// `dir`.
    pub(super) fn lookup(&self, cx: &Cred, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let d = self.may_dir(cx, dir, Want::EXEC)?;
        check_name(name)?;
        match name {
            b"." => Ok(dir),
            b".." => Ok(d.parent),
            _ => d.get(name).ok_or(Nfsstat3::NOENT),
        }
    }

    /// A new inode with owner, group and mode `own` and the times `attr` names.
    fn new_inode(&mut self, body: Body, own: (u32, u32, u32), attr: &Sattr3) -> Inode {
        let now = self.stamp();
        let nlink = if matches!(body, Body::Dir(_)) { 2 } else { 1 };
        let time = |s: SetTime| match s {
            SetTime::ClientTime(t) => t,
            _ => now,
        };
        Inode {
            generation: self.generation,
            mode: own.2,
            uid: own.0,
            gid: own.1,
            nlink,
            atime: time(attr.atime),
            mtime: time(attr.mtime),
            ctime: now,
            excl: None,
            acl: None,
            xattrs: None,
            body,
        }
    }

    /// NOSPC unless `cost` more octets fit in the capacity.
    pub(super) fn fits(&self, cost: u64) -> NfsResult<()> {
        if self.used.saturating_add(cost) > self.opts.capacity {
            return Err(Nfsstat3::NOSPC);
        }
        Ok(())
    }

    /// Creates `body` as `name` in `dir` for `cx`: write and search on `dir`, the name
    /// absent, room for it (`max_files`, capacity); owner, group and mode as
    /// [`identity::new_owner`] says for `mode`, then the owner and group `attr` names as
    /// [`identity::create_chown`] allows.
    fn make(
        &mut self,
        cx: &Cred,
        dir: u64,
        name: &[u8],
        body: Body,
        mode: u32,
        attr: &Sattr3,
    ) -> NfsResult<u64> {
        self.may_dir(cx, dir, Want::WRITE_EXEC)?;
        self.check_absent(dir, name)?;
        if self.inodes.len() as u64 >= self.opts.max_files {
            return Err(Nfsstat3::NOSPC);
        }
        let extra = match &body {
            Body::Symlink(t) => charge::target(t.len()),
            _ => 0,
        };
        let d = self.node(dir)?;
        let parent = self.attr_of(dir, d);
        let ftype = match &body {
            Body::Dir(_) => Ftype3::Dir,
            Body::Symlink(_) => Ftype3::Lnk,
            Body::Special(s) => s.ftype(),
            Body::File { .. } => Ftype3::Reg,
        };
        let (uid, gid, mode) = identity::new_owner(cx, &parent, ftype, mode);
        let (mode, acls) = Tree::inherited(d, ftype, mode, attr.umask);
        let cost =
            charge::INODE + charge::entry(name.len()) + extra + charge::acls(acls.as_deref());
        self.fits(cost)?;
        let mut inode = self.new_inode(body, (uid, gid, mode), attr);
        inode.acl = acls;
        let id = self.next_fileid;
        self.next_fileid += 1;
        let is_dir = ftype == Ftype3::Dir;
        self.inodes.insert(id, inode);
        self.used += cost;
        self.dir_mut(dir)?.insert(name, id);
        self.touch_dir(dir, is_dir as i32)?;
        let now = self.attr(id)?;
        let (uid, gid) = identity::create_chown(cx, &now, attr.uid, attr.gid);
        if uid.is_some() || gid.is_some() {
            let set = Sattr3 {
                uid,
                gid,
                ..Sattr3::default()
            };
            let i = self.node_mut(id)?;
            i.mode = identity::mode_after_setattr(cx, &now, &set);
            i.uid = uid.unwrap_or(i.uid);
            i.gid = gid.unwrap_or(i.gid);
        }
        Ok(id)
    }

    /// Directory `dir` changed (entry added or removed): mtime and ctime, `links` to nlink.
    pub(super) fn touch_dir(&mut self, dir: u64, links: i32) -> NfsResult<()> {
        let now = self.stamp();
        let d = self.node_mut(dir)?;
        d.nlink = d.nlink.saturating_add_signed(links);
        d.mtime = now;
        d.ctime = now;
        Ok(())
    }

    /// Checks that `name` may be created in `dir` (a directory, name absent).
    pub(super) fn check_absent(&self, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_new_name(name)?;
        if self.dir(dir)?.get(name).is_some() {
            return Err(Nfsstat3::EXIST);
        }
        Ok(())
    }

    /// Sets attributes of `id` for `cx` (SETATTR): ISDIR / INVAL for a size on anything but
    /// a regular file, FBIG past the largest file, then [`identity::may_setattr`], then
    /// NOT_SYNC unless the ctime equals `guard`.
    pub(super) fn setattr(
        &mut self,
        cx: &Cred,
        id: u64,
        set: &Sattr3,
        guard: Option<Time3>,
    ) -> NfsResult<()> {
        let max = self.max_file_size;
        if let Some(size) = set.size {
            match self.node(id)?.body {
                Body::File { .. } if size > max => return Err(Nfsstat3::FBIG),
                Body::File { .. } => {}
                Body::Dir(_) => return Err(Nfsstat3::ISDIR),
                _ => return Err(Nfsstat3::INVAL),
            }
        }
        let (a, acl) = self.subject(id)?;
        identity::may_setattr(cx, &a, acl, set)?;
        if guard.is_some_and(|g| a.ctime != g) {
            return Err(Nfsstat3::NOT_SYNC);
        }
        let now = self.stamp();
        let alloc = &self.alloc;
        let i = self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)?;
        let mut freed = 0;
        if let (Some(new), Body::File { size, data }) = (set.size, &mut i.body) {
            if new < *size {
                freed = data.truncate(alloc, new);
            }
            *size = new;
            i.mtime = now;
        }
        i.mode = identity::mode_after_setattr(cx, &a, set);
        if set.mode.is_some() {
            // chmod rewrites the access ACL's owner, mask and other entries (`Acl::chmod`).
            if let Some(acl) = i.acl.as_mut().and_then(|x| x.access.as_mut()) {
                acl.chmod(i.mode);
            }
        }
        i.uid = set.uid.unwrap_or(i.uid);
        i.gid = set.gid.unwrap_or(i.gid);
        match set.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => i.atime = now,
            SetTime::ClientTime(t) => i.atime = t,
        }
        match set.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => i.mtime = now,
            SetTime::ClientTime(t) => i.mtime = t,
        }
        if *set != Sattr3::default() {
            i.ctime = now;
        }
        // The verifier of an exclusive create lives in the times, as with Linux nfsd: setting
        // a time or the size ends it (a retransmission then finds another file: EXIST); the
        // mode and owner an EXCLUSIVE4_1 create sets do not.
        if set.atime != SetTime::DontChange
            || set.mtime != SetTime::DontChange
            || set.size.is_some()
        {
            i.excl = None;
        }
        self.used -= freed;
        Ok(())
    }

    /// Writes `data` at `offset` of file `id` for `cx` (write permission as
    /// [`identity::may_io`]; a write by anyone but root drops set-user-ID and set-group-ID).
    pub(super) fn write(&mut self, cx: &Cred, id: u64, offset: u64, data: &[u8]) -> NfsResult<()> {
        let blocks = match &self.node(id)?.body {
            Body::File { data, .. } => data,
            Body::Dir(_) => return Err(Nfsstat3::ISDIR),
            _ => return Err(Nfsstat3::INVAL),
        };
        let (a, acl) = self.subject(id)?;
        identity::may_io(cx, &a, acl, Want::WRITE)?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.max_file_size)
            .ok_or(Nfsstat3::FBIG)?;
        if data.is_empty() {
            return Ok(());
        }
        let grow = blocks.growth(self.alloc.bs, offset, data.len());
        self.fits(grow)?;
        let now = self.stamp();
        let alloc = &self.alloc;
        let i = self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)?;
        if let Body::File { size, data: blocks } = &mut i.body {
            blocks.write(alloc, offset, data);
            *size = (*size).max(end);
        }
        i.mode = identity::mode_after_write(cx, i.mode);
        i.mtime = now;
        i.ctime = now;
        i.excl = None; // the mtime held the verifier
        self.used += grow;
        Ok(())
    }

    /// CREATE.
    pub(super) fn create(
        &mut self,
        cx: &Cred,
        dir: u64,
        name: &[u8],
        how: &CreateHow,
    ) -> NfsResult<u64> {
        self.may_dir(cx, dir, Want::WRITE_EXEC)?;
        check_new_name(name)?;
        if let Some(id) = self.dir(dir)?.get(name) {
            let i = self.node(id)?;
            let is_file = matches!(i.body, Body::File { .. });
            return match how {
                CreateHow::Unchecked(attr) if is_file => {
                    // Linux nfsd applies only the size to a file that exists.
                    let attr = Sattr3 {
                        size: attr.size,
                        ..Sattr3::default()
                    };
                    self.setattr(cx, id, &attr, None).map(|()| id)
                }
                CreateHow::Exclusive(v) | CreateHow::Exclusive41(v, _)
                    if is_file && i.excl == Some(*v) =>
                {
                    Ok(id)
                }
                _ => Err(Nfsstat3::EXIST),
            };
        }
        let attr = match how {
            CreateHow::Unchecked(a) | CreateHow::Guarded(a) => *a,
            CreateHow::Exclusive(_) => Sattr3::default(),
            CreateHow::Exclusive41(_, a) => *a,
        };
        if attr.size.is_some_and(|s| s > self.max_file_size) {
            return Err(Nfsstat3::FBIG);
        }
        let body = Body::File {
            size: attr.size.unwrap_or(0),
            data: Blocks::default(),
        };
        let id = self.make(cx, dir, name, body, attr.mode.unwrap_or(0), &attr)?;
        if let CreateHow::Exclusive(v) | CreateHow::Exclusive41(v, _) = how {
            // As Linux nfsd: the verifier also shows in mtime and atime until SETATTR.
            let i = self.node_mut(id)?;
            i.excl = Some(*v);
            i.mtime.seconds = i64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff);
            i.atime.seconds = i64::from(u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff);
        }
        Ok(id)
    }

    /// MKDIR.
    pub(super) fn mkdir(
        &mut self,
        cx: &Cred,
        dir: u64,
        name: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<u64> {
        let body = Body::Dir(Dir::new(dir));
        self.make(cx, dir, name, body, attr.mode.unwrap_or(0), attr)
    }

    /// SYMLINK (the mode is always 0777).
    pub(super) fn symlink(
        &mut self,
        cx: &Cred,
        dir: u64,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<u64> {
        self.may_dir(cx, dir, Want::WRITE_EXEC)?;
        self.check_absent(dir, name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Nfsstat3::INVAL);
        }
        if target.len() > PATH_MAX {
            return Err(Nfsstat3::NAMETOOLONG);
        }
        let body = Body::Symlink(target.to_vec());
        self.make(cx, dir, name, body, 0o777, attr)
    }

    /// MKNOD: device nodes only for root ([`identity::may_mknod_device`]).
    pub(super) fn mknod(
        &mut self,
        cx: &Cred,
        dir: u64,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<u64> {
        self.may_dir(cx, dir, Want::WRITE_EXEC)?;
        self.check_absent(dir, name)?;
        identity::may_mknod_device(cx, matches!(node, Special::Chr(..) | Special::Blk(..)))?;
        let mode = attr.mode.unwrap_or(0);
        self.make(cx, dir, name, Body::Special(node), mode, attr)
    }

    /// The charge of inode `id` beyond its entries (inode, target, data, ACLs, extended
    /// attributes).
    pub(super) fn inode_charge(&self, id: u64) -> u64 {
        let Some(i) = self.inodes.get(&id) else {
            return 0;
        };
        let xattrs = i.xattrs.as_deref().map_or(0, Xattrs::charged);
        let own = charge::INODE + charge::acls(i.acl.as_deref()) + xattrs;
        match &i.body {
            Body::File { data, .. } => own + data.used(self.alloc.bs),
            Body::Symlink(t) => own + charge::target(t.len()),
            _ => own,
        }
    }
}
