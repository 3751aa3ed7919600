//! What creates objects in the directory store: CREATE, MKDIR, SYMLINK and MKNOD, each made
//! by the caller's identity (the thread acts as the caller, see [`super::ident`]).
//!
//! Normal operation: the kernel makes the object owned by the caller, in the directory's
//! group when that has the set-group-ID bit (and drops that bit from a new file's mode when
//! the caller is not in the group), with the mode the client asked for (the thread's umask is
//! 0, or for the creating call the client's own, NFSv4.2 `mode_umask`: [`ident::creating`]; a
//! default ACL on the directory applies as on a local creation). A uid or gid in the
//! client's attributes is applied when it changes the new object and the caller may make
//! that change ([`identity::create_chown`]: root any, the owner a group it is in), dropped
//! otherwise rather than failing the create, as Linux nfsd does; times are applied as the new
//! owner. Names are created with `O_NOFOLLOW` / `*at()` calls, so an existing symbolic
//! link is never followed: CREATE UNCHECKED of a name that is a symbolic link answers EXIST.
//! MKNOD makes FIFOs, sockets and devices (devices need CAP_MKNOD, which only an unsquashed
//! root keeps); the server never opens them but with `O_PATH`.
//!
//! Each answers the new object's handle with its attributes: those one `fstat` of the new
//! descriptor took after the client's attributes were applied (a new owner or size also needs
//! the attributes the object was made with: then `fstat` before too, and after only when
//! something changed).
//!
//! Recovery: an existing name answers EXIST (EXCLUSIVE: the same file again when it carries
//! the verifier); a failed attribute change after the creation is that change's error, the
//! object stays, as in Linux nfsd.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::sys::{self, check, cname, ifmt, openat};
use super::{ident, DirStore, Obj};
use crate::nfs::identity::{self, Cred};
use crate::nfs::store::{NewObj, Special, Store};
use crate::nfs::types::{
    is_dot_entry, CreateHow, Fattr3, Fh, NfsResult, Nfsstat3, Sattr3, SetTime,
};
use crate::nfs::types::{Time3, PATH_MAX};

/// The two 31-bit halves of an exclusive-create verifier (stored as mtime, atime seconds).
fn verf_times(v: &[u8; 8]) -> (u32, u32) {
    let m = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff;
    let a = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff;
    (m, a)
}

/// What is left to apply to an object just created with `mode` from the client's `attr`: the
/// mode only when the process's umask may have cut it (the thread has no umask of its own:
/// then the mode less the client's umask, default ACL or not); owner, group, times and size
/// as asked (owner and group are then filtered by [`identity::create_chown`]).
fn after_creation(attr: &Sattr3, mode: Option<u32>) -> Sattr3 {
    let umask = attr.umask.unwrap_or(0) & 0o777;
    Sattr3 {
        mode: mode.filter(|_| !ident::umask_is_zero()).map(|m| m & !umask),
        umask: None,
        ..*attr
    }
}

/// A new object's handle and its attributes (`None` when they could not be taken).
pub(super) type Made = (Fh, Option<Fattr3>);

impl DirStore {
    /// Applies `set` as `cx` to the object of type `kind` just created as `fd` and adopts it
    /// (caching the descriptor when `cache`: one fit for I/O, or not a regular file). One
    /// `fstat` for its attributes: taken after the changes, or before them too when a new
    /// owner or size needs the attributes the object was made with.
    fn finish_new(
        &self,
        cx: &Cred,
        fd: OwnedFd,
        kind: u32,
        set: &Sattr3,
        cache: bool,
    ) -> NfsResult<Made> {
        // Only CREATE caches a regular file, and it opened it read-write.
        let io = kind == libc::S_IFREG && cache;
        let fd = Arc::new(fd);
        let mut st = None;
        let mut set = *set;
        if set.uid.is_some() || set.gid.is_some() || set.size.is_some() {
            let now = sys::fstat(fd.as_raw_fd())?;
            let (uid, gid) = identity::create_chown(cx, &sys::fattr(&now), set.uid, set.gid);
            set = Sattr3 { uid, gid, ..set };
            let o = Obj {
                fd: Arc::clone(&fd),
                st: now,
                io,
            };
            self.apply(cx, &o, &set)?;
            st = Some(now).filter(|_| set == Sattr3::default());
        } else if set != Sattr3::default() {
            sys::set_attrs(fd.as_raw_fd(), io, kind, &set)?;
        }
        let st = match st {
            Some(st) => Some(st),
            None => sys::fstat(fd.as_raw_fd()).ok(),
        };
        let fh = self.fh_of_fd(fd.as_raw_fd())?;
        if cache {
            let mut c = self.cache();
            c.insert(fh, fd, io);
            if let Some(st) = &st {
                c.name_ino(&fh, st.st_ino);
            }
        }
        Ok((fh, st.map(|st| sys::fattr(&st))))
    }

    /// Makes `new` as `name` in directory `d` (the thread acts as `cx`).
    pub(super) fn make(&self, cx: &Cred, d: &Obj, name: &[u8], new: NewObj<'_>) -> NfsResult<Made> {
        match new {
            NewObj::File(how) => self.create_file(cx, d, name, how),
            NewObj::Dir(attr) => self.make_dir(cx, d, name, attr),
            NewObj::Symlink(target, attr) => self.make_symlink(cx, d, name, target, attr),
            NewObj::Node(node, attr) => self.make_node(cx, d, name, node, attr),
        }
    }

    /// [`DirStore::make`] in directory `dir` as `cx`: the new object's handle.
    pub(super) fn make_as(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        new: NewObj<'_>,
    ) -> NfsResult<Fh> {
        let _held = self.serial.one(dir);
        let d = self.dir_obj(cx, dir)?;
        self.make(cx, &d, name, new).map(|(fh, _)| fh)
    }

    /// An EXCLUSIVE create found `name`: the same file when it carries verifier `v`.
    fn exclusive_again(&self, dirfd: RawFd, name: &CStr, v: &[u8; 8]) -> NfsResult<Made> {
        let st = sys::lstatat(dirfd, name)?;
        let (m, a) = verf_times(v);
        let same = ifmt(&st) == libc::S_IFREG
            && st.st_mtime == i64::from(m)
            && st.st_atime == i64::from(a)
            && st.st_size == 0;
        if !same {
            return Err(Nfsstat3::EXIST);
        }
        let fh = self.fh_at(dirfd, name)?;
        Ok((fh, self.getattr(&fh).ok()))
    }

    /// The attributes and `O_EXCL` flag a CREATE asks for: an exclusive one's verifier as its
    /// times, over the attributes EXCLUSIVE4_1 makes the file with.
    fn create_how(how: &CreateHow) -> (i32, Sattr3) {
        let (v, made) = match how {
            CreateHow::Unchecked(a) => return (0, *a),
            CreateHow::Guarded(a) => return (libc::O_EXCL, *a),
            CreateHow::Exclusive(v) => (v, Sattr3::default()),
            CreateHow::Exclusive41(v, a) => (v, *a),
        };
        let (m, a) = verf_times(v);
        let t = |s| {
            SetTime::ClientTime(Time3 {
                seconds: i64::from(s),
                nseconds: 0,
            })
        };
        let set = Sattr3 {
            atime: t(a),
            mtime: t(m),
            ..made
        };
        (libc::O_EXCL, set)
    }

    /// CREATE of `name` in directory `d` (the thread acts as `cx`). GUARDED and EXCLUSIVE
    /// leave finding an existing name to `O_EXCL` (which fails for any existing name, a
    /// symbolic link included); UNCHECKED looks first, so that only a regular file is opened.
    pub(super) fn create_file(
        &self,
        cx: &Cred,
        d: &Obj,
        name: &[u8],
        how: &CreateHow,
    ) -> NfsResult<Made> {
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        let (excl, attr) = Self::create_how(how);
        let found = match excl {
            0 => sys::lstatat(d.raw(), &c),
            _ => Err(Nfsstat3::NOENT),
        };
        match found {
            Ok(st) if ifmt(&st) != libc::S_IFREG => return Err(Nfsstat3::EXIST),
            Ok(_) => {
                // UNCHECKED of an existing file: only its size changes (Linux nfsd).
                let fd = openat(d.raw(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
                let set = Sattr3 {
                    size: attr.size,
                    ..Sattr3::default()
                };
                return self.finish_new(cx, fd, libc::S_IFREG, &set, false);
            }
            Err(Nfsstat3::NOENT) => {}
            Err(e) => return Err(e),
        }
        let mode = attr.mode.unwrap_or(0) & 0o7777;
        let flags = libc::O_CREAT | excl | libc::O_RDWR | libc::O_NOFOLLOW;
        let fd = match ident::creating(attr.umask, || openat(d.raw(), &c, flags, mode)) {
            Ok(fd) => fd,
            Err(Nfsstat3::EXIST) => match how {
                CreateHow::Exclusive(v) | CreateHow::Exclusive41(v, _) => {
                    return self.exclusive_again(d.raw(), &c, v)
                }
                _ => return Err(Nfsstat3::EXIST),
            },
            Err(Nfsstat3::ISDIR) => return Err(Nfsstat3::EXIST),
            Err(e) => return Err(e),
        };
        let set = after_creation(&attr, Some(mode));
        self.finish_new(cx, fd, libc::S_IFREG, &set, true)
    }

    /// MKDIR of `name` in directory `d` (the thread acts as `cx`).
    pub(super) fn make_dir(
        &self,
        cx: &Cred,
        d: &Obj,
        name: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Made> {
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        let mode = attr.mode.unwrap_or(0) & 0o7777;
        ident::creating(attr.umask, || {
            // SAFETY: `c` is NUL-terminated.
            check(unsafe { libc::mkdirat(d.raw(), c.as_ptr(), mode) })
        })?;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let fd = openat(d.raw(), &c, flags, 0)?;
        let attr = Sattr3 {
            size: None,
            ..*attr
        };
        let set = after_creation(&attr, Some(mode));
        self.finish_new(cx, fd, libc::S_IFDIR, &set, true)
    }

    /// SYMLINK `name` → `target` in directory `d` (the thread acts as `cx`).
    pub(super) fn make_symlink(
        &self,
        cx: &Cred,
        d: &Obj,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Made> {
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        if target.len() > PATH_MAX {
            return Err(Nfsstat3::NAMETOOLONG);
        }
        let t = CString::new(target)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or(Nfsstat3::INVAL)?;
        // SAFETY: both strings are NUL-terminated.
        check(unsafe { libc::symlinkat(t.as_ptr(), d.raw(), c.as_ptr()) })?;
        let fd = openat(d.raw(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let attr = Sattr3 {
            size: None,
            mode: None,
            ..*attr
        };
        let set = after_creation(&attr, None);
        self.finish_new(cx, fd, libc::S_IFLNK, &set, true)
    }

    /// MKNOD of `node` as `name` in directory `d` (the thread acts as `cx`).
    pub(super) fn make_node(
        &self,
        cx: &Cred,
        d: &Obj,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Made> {
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        let (kind, dev) = match node {
            Special::Fifo => (libc::S_IFIFO, 0),
            Special::Sock => (libc::S_IFSOCK, 0),
            Special::Chr(ma, mi) => (libc::S_IFCHR, libc::makedev(ma, mi)),
            Special::Blk(ma, mi) => (libc::S_IFBLK, libc::makedev(ma, mi)),
        };
        let mode = attr.mode.unwrap_or(0) & 0o7777;
        ident::creating(attr.umask, || {
            // SAFETY: `c` is NUL-terminated.
            check(unsafe { libc::mknodat(d.raw(), c.as_ptr(), kind | mode, dev) })
        })?;
        let fd = openat(d.raw(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let attr = Sattr3 {
            size: None,
            ..*attr
        };
        let set = after_creation(&attr, Some(mode));
        self.finish_new(cx, fd, kind, &set, true)
    }
}
