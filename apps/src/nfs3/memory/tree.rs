//! The memory store's tree: inodes by file id, directories with cookie-ordered entries and a
//! name index, and every namespace operation as plain `&mut self` methods (the caller holds
//! the store's lock).
//!
//! Normal operation: each method checks everything it can refuse before it changes anything,
//! so an error leaves the tree as it was. Times come from one store-wide monotonic clock
//! ([`Tree::stamp`]): every change gets a time strictly after the previous change's, so two
//! changes within one clock tick still give different ctimes (the per-change counter is folded
//! into the nanoseconds). Recovery: none needed; file ids are never reused, so a handle to a
//! removed inode stays STALE.

use std::collections::{BTreeMap, HashMap};

use super::super::types::{
    check_name_len, is_dot_entry, name_is_wellformed, CreateHow, Fattr3, Ftype3, NfsResult,
    Nfsstat3, Sattr3, SetTime, Time3, PATH_MAX,
};
use super::blocks::{Alloc, Blocks};
use super::MemoryOptions;

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
    pub(super) body: Body,
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

    fn insert(&mut self, name: &[u8], id: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_seq.insert(seq, (name.to_vec(), id));
        self.by_name.insert(name.to_vec(), (seq, id));
    }

    fn remove(&mut self, name: &[u8]) {
        if let Some((seq, _)) = self.by_name.remove(name) {
            self.by_seq.remove(&seq);
        }
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Checks a name an operation will look up or remove.
fn check_name(name: &[u8]) -> NfsResult<()> {
    if !name_is_wellformed(name) {
        return Err(Nfsstat3::INVAL);
    }
    check_name_len(name)
}

/// Checks a name an operation will create (`.` and `..` exist already).
fn check_new_name(name: &[u8]) -> NfsResult<()> {
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
    /// Octets of file data held.
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
            used: 0,
            last: Time3::default(),
            generation,
            opts,
            alloc,
            max_file_size,
        };
        let root = t.new_inode(Body::Dir(Dir::new(ROOT)), &Sattr3::default(), 0o755);
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

    fn node(&self, id: u64) -> NfsResult<&Inode> {
        self.inodes.get(&id).ok_or(Nfsstat3::STALE)
    }

    fn node_mut(&mut self, id: u64) -> NfsResult<&mut Inode> {
        self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)
    }

    /// Directory `id`; NOTDIR when it is something else.
    pub(super) fn dir(&self, id: u64) -> NfsResult<&Dir> {
        match &self.node(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    fn dir_mut(&mut self, id: u64) -> NfsResult<&mut Dir> {
        match &mut self.node_mut(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    fn is_dir(&self, id: u64) -> bool {
        matches!(self.inodes.get(&id).map(|i| &i.body), Some(Body::Dir(_)))
    }

    /// Attributes of inode `id`.
    pub(super) fn attr(&self, id: u64) -> NfsResult<Fattr3> {
        let i = self.node(id)?;
        let (ftype, size, used) = match &i.body {
            Body::File { size, data } => (Ftype3::Reg, *size, data.used()),
            Body::Dir(_) => (Ftype3::Dir, DIR_SIZE, DIR_SIZE),
            Body::Symlink(t) => (Ftype3::Lnk, t.len() as u64, t.len() as u64),
        };
        Ok(Fattr3 {
            ftype,
            mode: i.mode,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            size,
            used,
            rdev: (0, 0),
            fsid: FSID,
            fileid: id,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
        })
    }

    /// The file id `name` names in directory `dir` (`.` and `..` included).
    pub(super) fn lookup(&self, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let d = self.dir(dir)?;
        check_name(name)?;
        match name {
            b"." => Ok(dir),
            b".." => Ok(d.parent),
            _ => d.get(name).ok_or(Nfsstat3::NOENT),
        }
    }

    fn new_inode(&mut self, body: Body, attr: &Sattr3, default_mode: u32) -> Inode {
        let now = self.stamp();
        let nlink = if matches!(body, Body::Dir(_)) { 2 } else { 1 };
        let time = |s: SetTime| match s {
            SetTime::ClientTime(t) => t,
            _ => now,
        };
        Inode {
            generation: self.generation,
            mode: attr.mode.unwrap_or(default_mode) & 0o7777,
            uid: attr.uid.unwrap_or(0),
            gid: attr.gid.unwrap_or(0),
            nlink,
            atime: time(attr.atime),
            mtime: time(attr.mtime),
            ctime: now,
            excl: None,
            body,
        }
    }

    /// Adds a new inode as `name` in `dir` (checked by the caller); NOSPC past `max_files`.
    fn add(&mut self, dir: u64, name: &[u8], inode: Inode) -> NfsResult<u64> {
        if self.inodes.len() as u64 >= self.opts.max_files {
            return Err(Nfsstat3::NOSPC);
        }
        let id = self.next_fileid;
        self.next_fileid += 1;
        let is_dir = matches!(inode.body, Body::Dir(_));
        self.inodes.insert(id, inode);
        self.dir_mut(dir)?.insert(name, id);
        self.touch_dir(dir, is_dir as i32)?;
        Ok(id)
    }

    /// Directory `dir` changed (entry added or removed): mtime and ctime, `links` to nlink.
    fn touch_dir(&mut self, dir: u64, links: i32) -> NfsResult<()> {
        let now = self.stamp();
        let d = self.node_mut(dir)?;
        d.nlink = d.nlink.saturating_add_signed(links);
        d.mtime = now;
        d.ctime = now;
        Ok(())
    }

    /// Checks that `name` may be created in `dir` (a directory, name absent).
    fn check_absent(&self, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_new_name(name)?;
        if self.dir(dir)?.get(name).is_some() {
            return Err(Nfsstat3::EXIST);
        }
        Ok(())
    }

    /// Sets attributes of `id` (SETATTR; the caller checked the guard).
    pub(super) fn setattr(&mut self, id: u64, set: &Sattr3) -> NfsResult<()> {
        let max = self.max_file_size;
        if let Some(size) = set.size {
            match self.node(id)?.body {
                Body::File { .. } if size > max => return Err(Nfsstat3::FBIG),
                Body::File { .. } => {}
                Body::Dir(_) => return Err(Nfsstat3::ISDIR),
                Body::Symlink(_) => return Err(Nfsstat3::INVAL),
            }
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
        if let Some(m) = set.mode {
            i.mode = m & 0o7777;
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
            i.excl = None;
        }
        self.used -= freed;
        Ok(())
    }

    /// Writes `data` at `offset` of file `id`.
    pub(super) fn write(&mut self, id: u64, offset: u64, data: &[u8]) -> NfsResult<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.max_file_size)
            .ok_or(Nfsstat3::FBIG)?;
        let (bs, used, capacity) = (self.alloc.bs, self.used, self.opts.capacity);
        let grow = match &self.node(id)?.body {
            Body::File { data: blocks, .. } => blocks.growth(bs, offset, data.len()),
            Body::Dir(_) => return Err(Nfsstat3::ISDIR),
            Body::Symlink(_) => return Err(Nfsstat3::INVAL),
        };
        if data.is_empty() {
            return Ok(());
        }
        if used.saturating_add(grow) > capacity {
            return Err(Nfsstat3::NOSPC);
        }
        let now = self.stamp();
        let alloc = &self.alloc;
        let i = self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)?;
        if let Body::File { size, data: blocks } = &mut i.body {
            blocks.write(alloc, offset, data);
            *size = (*size).max(end);
        }
        i.mtime = now;
        i.ctime = now;
        self.used += grow;
        Ok(())
    }

    /// CREATE.
    pub(super) fn create(&mut self, dir: u64, name: &[u8], how: &CreateHow) -> NfsResult<u64> {
        check_new_name(name)?;
        if let Some(id) = self.dir(dir)?.get(name) {
            let i = self.node(id)?;
            let is_file = matches!(i.body, Body::File { .. });
            return match how {
                CreateHow::Unchecked(attr) if is_file => self.setattr(id, attr).map(|()| id),
                CreateHow::Exclusive(v) if is_file && i.excl == Some(*v) => Ok(id),
                _ => Err(Nfsstat3::EXIST),
            };
        }
        let attr = match how {
            CreateHow::Unchecked(a) | CreateHow::Guarded(a) => *a,
            CreateHow::Exclusive(_) => Sattr3::default(),
        };
        if attr.size.is_some_and(|s| s > self.max_file_size) {
            return Err(Nfsstat3::FBIG);
        }
        let body = Body::File {
            size: attr.size.unwrap_or(0),
            data: Blocks::default(),
        };
        let mut inode = self.new_inode(body, &attr, 0o644);
        if let CreateHow::Exclusive(v) = how {
            // As Linux nfsd: the verifier also shows in mtime and atime until SETATTR.
            inode.excl = Some(*v);
            inode.mtime.seconds = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff;
            inode.atime.seconds = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff;
        }
        self.add(dir, name, inode)
    }

    /// MKDIR.
    pub(super) fn mkdir(&mut self, dir: u64, name: &[u8], attr: &Sattr3) -> NfsResult<u64> {
        self.check_absent(dir, name)?;
        let inode = self.new_inode(Body::Dir(Dir::new(dir)), attr, 0o755);
        self.add(dir, name, inode)
    }

    /// SYMLINK.
    pub(super) fn symlink(
        &mut self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<u64> {
        self.check_absent(dir, name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Nfsstat3::INVAL);
        }
        if target.len() > PATH_MAX {
            return Err(Nfsstat3::NAMETOOLONG);
        }
        let attr = Sattr3 {
            mode: None,
            ..*attr
        };
        let inode = self.new_inode(Body::Symlink(target.to_vec()), &attr, 0o777);
        self.add(dir, name, inode)
    }

    /// One link to `id` is gone: nlink, ctime, and the inode itself at zero links.
    fn drop_link(&mut self, id: u64) -> NfsResult<()> {
        let now = self.stamp();
        let i = self.node_mut(id)?;
        i.nlink = i.nlink.saturating_sub(1);
        i.ctime = now;
        if i.nlink == 0 || matches!(i.body, Body::Dir(_)) {
            if let Some(Inode {
                body: Body::File { data, .. },
                ..
            }) = self.inodes.remove(&id)
            {
                self.used -= data.used();
            }
        }
        Ok(())
    }

    /// REMOVE.
    pub(super) fn remove(&mut self, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_name(name)?;
        let d = self.dir(dir)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::ACCES);
        }
        let id = d.get(name).ok_or(Nfsstat3::NOENT)?;
        if self.is_dir(id) {
            return Err(Nfsstat3::ISDIR);
        }
        self.dir_mut(dir)?.remove(name);
        self.drop_link(id)?;
        self.touch_dir(dir, 0)
    }

    /// RMDIR.
    pub(super) fn rmdir(&mut self, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_name(name)?;
        let d = self.dir(dir)?;
        match name {
            b"." => return Err(Nfsstat3::INVAL),
            b".." => return Err(Nfsstat3::NOTEMPTY),
            _ => {}
        }
        let id = d.get(name).ok_or(Nfsstat3::NOENT)?;
        if !self.dir(id)?.is_empty() {
            return Err(Nfsstat3::NOTEMPTY);
        }
        self.dir_mut(dir)?.remove(name);
        self.drop_link(id)?;
        self.touch_dir(dir, -1)
    }

    /// LINK.
    pub(super) fn link(&mut self, id: u64, dir: u64, name: &[u8]) -> NfsResult<()> {
        if self.is_dir(id) {
            return Err(Nfsstat3::ISDIR);
        }
        self.check_absent(dir, name)?;
        if self.node(id)?.nlink == u32::MAX {
            return Err(Nfsstat3::MLINK);
        }
        let now = self.stamp();
        let i = self.node_mut(id)?;
        i.nlink += 1;
        i.ctime = now;
        self.dir_mut(dir)?.insert(name, id);
        self.touch_dir(dir, 0)
    }

    /// True when directory `id` is `anc` or lies below it.
    fn is_under(&self, mut id: u64, anc: u64) -> bool {
        loop {
            if id == anc {
                return true;
            }
            match self.dir(id) {
                Ok(d) if id != ROOT => id = d.parent,
                _ => return false,
            }
        }
    }

    /// RENAME.
    pub(super) fn rename(
        &mut self,
        fdir: u64,
        fname: &[u8],
        tdir: u64,
        tname: &[u8],
    ) -> NfsResult<()> {
        check_name(fname)?;
        check_name(tname)?;
        let src = self.dir(fdir)?.get(fname);
        let target = self.dir(tdir)?.get(tname);
        if is_dot_entry(fname) || is_dot_entry(tname) {
            return Err(Nfsstat3::INVAL);
        }
        let src = src.ok_or(Nfsstat3::NOENT)?;
        if (fdir == tdir && fname == tname) || target == Some(src) {
            return Ok(());
        }
        let src_dir = self.is_dir(src);
        if let Some(t) = target {
            match (src_dir, self.is_dir(t)) {
                (true, false) => return Err(Nfsstat3::NOTDIR),
                (false, true) => return Err(Nfsstat3::ISDIR),
                (true, true) if !self.dir(t)?.is_empty() => return Err(Nfsstat3::NOTEMPTY),
                _ => {}
            }
        }
        if src_dir && self.is_under(tdir, src) {
            return Err(Nfsstat3::INVAL);
        }
        if let Some(t) = target {
            self.dir_mut(tdir)?.remove(tname);
            self.drop_link(t)?;
            if src_dir {
                self.touch_dir(tdir, -1)?;
            }
        }
        self.dir_mut(fdir)?.remove(fname);
        self.dir_mut(tdir)?.insert(tname, src);
        let now = self.stamp();
        let s = self.node_mut(src)?;
        s.ctime = now;
        if let Body::Dir(d) = &mut s.body {
            d.parent = tdir;
        }
        let moved_dir = (src_dir && fdir != tdir) as i32;
        self.touch_dir(fdir, -moved_dir)?;
        self.touch_dir(tdir, moved_dir)
    }
}
