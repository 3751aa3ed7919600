//! The store the NFS server serves, whichever the protocol version: the one small trait both
//! backends implement ([`memory::MemoryStore`], [`dir::DirStore`]), and their conformance
//! suite (`tests.rs`).
//!
//! Normal operation: the procedure handlers ([`crate::nfs::v3::server`]) decode a call, call one or two
//! store methods with plain values ([`Fh`], names as octets, [`Sattr3`]) and encode what comes
//! back. The store owns file handles (their content, their lifetime), attributes, directory
//! cookies and the write verifier; it knows nothing of XDR, RPC or RDMA. Weak cache consistency
//! data (RFC 1813 `wcc_data`) comes back from the `*_wcc` methods with the change: the
//! attributes of the object changed as they were before it and are after it, as Linux nfsd
//! takes them (`fh_fill_pre_attrs`, the operation, `fh_fill_post_attrs`); their defaults ask
//! [`Store::getattr`] around the plain method, a store that has the attributes at hand while
//! changing answers them from there.
//!
//! Recovery: every method answers an [`Nfsstat3`] instead of failing: a handle that does not
//! decode is BADHANDLE, one that names nothing (any more) is STALE, OS errors map through
//! [`Nfsstat3::from_errno`](crate::nfs::types::Nfsstat3::from_errno). No method panics on any input.
//!
//! [`Nfsstat3`]: crate::nfs::types::Nfsstat3

pub mod dir;
pub mod memory;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rpcrdma_mempool::PoolBuf;

use super::acl::{Acl, Acls};
use super::identity::{self, Cred};
use super::types::{
    access, CreateHow, DirEntry, Fattr3, Fh, FsStat, Ftype3, NfsResult, Nfsstat3, Sattr3,
    StableHow, Time3, WccData,
};

/// A change's result with the weak cache consistency data of the object it changed.
pub type Wcc<T> = (NfsResult<T>, WccData);

/// How SETXATTR treats an attribute that exists or does not (RFC 8276 `setxattr_option4`;
/// Linux's `setxattr` flags 0, `XATTR_CREATE`, `XATTR_REPLACE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// SETXATTR4_EITHER: create or replace.
    Either,
    /// SETXATTR4_CREATE: EXIST when the attribute exists.
    Create,
    /// SETXATTR4_REPLACE: NOXATTR when it does not.
    Replace,
}

/// Longest user extended attribute name without its `user.` prefix: Linux's `XATTR_NAME_MAX`
/// (255) less the prefix's 5 octets, as Linux nfsd limits it.
pub const XATTR_NAME_MAX: usize = 250;

/// OK when `name` is a user extended attribute name as RFC 8276 carries it (without `user.`):
/// INVAL when empty or holding a NUL (Linux would take the name as ending there),
/// NAMETOOLONG past [`XATTR_NAME_MAX`].
pub fn check_xattr_name(name: &[u8]) -> NfsResult<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(Nfsstat3::INVAL);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(Nfsstat3::NAMETOOLONG);
    }
    Ok(())
}

/// Largest extended attribute value: Linux's `XATTR_SIZE_MAX`.
pub const XATTR_SIZE_MAX: usize = 65536;

/// The memory store's limit per object: a SETXATTR is refused (NOSPC) when the object's other
/// user extended attributes, each counted as `user.`, its name and a NUL (as Linux's
/// `listxattr` lists it) plus its value, and the new attribute's name so counted would take
/// more than this. The new value is bounded by [`XATTR_SIZE_MAX`] alone, so a value of that
/// size can always be stored once, and a listing of the names never exceeds Linux's
/// `XATTR_LIST_MAX` (the same 64 KiB).
pub const XATTR_OBJ_MAX: usize = 65536;

/// What CREATE, MKDIR, SYMLINK and MKNOD make (RFC 1813 sections 3.3.8 to 3.3.11), for
/// [`Store::create_wcc`].
#[derive(Debug, Clone, Copy)]
pub enum NewObj<'a> {
    /// A regular file ([`Store::create`]).
    File(&'a CreateHow),
    /// A directory ([`Store::mkdir`]).
    Dir(&'a Sattr3),
    /// A symbolic link to the target ([`Store::symlink`]).
    Symlink(&'a [u8], &'a Sattr3),
    /// A special file ([`Store::mknod`]).
    Node(Special, &'a Sattr3),
}

/// `op` with the weak cache consistency data of `fh` around it, by [`Store::getattr`]: what
/// the `*_wcc` methods answer by default.
pub fn wcc_around<S: Store + ?Sized, T>(
    s: &S,
    fh: &Fh,
    op: impl FnOnce() -> NfsResult<T>,
) -> Wcc<T> {
    let before = s.getattr(fh).ok().map(|a| a.wcc());
    let r = op();
    let after = s.getattr(fh).ok();
    (r, WccData { before, after })
}

/// What one READDIR / READDIRPLUS listing returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirListing {
    /// The cookie verifier to hand to the client (`cookieverf3`).
    pub verf: [u8; 8],
    /// True when the listing reached the end of the directory.
    pub eof: bool,
}

/// A READ's data as a range of a registered buffer the store keeps ([`Store::read_registered`]).
#[derive(Debug, Clone)]
pub struct SharedRead {
    /// The store's buffer; the reply holds this reference until its Send completes, and the
    /// store does not change the octets meanwhile (it copies the block on write instead).
    pub buf: Arc<PoolBuf>,
    /// Where the data starts in `buf`.
    pub off: usize,
    /// Octets of data (the READ's count clamped to the file size; more than 0).
    pub len: usize,
    /// Whether the range reaches the end of the file (as [`Store::read`] says).
    pub eof: bool,
}

/// What MKNOD creates (RFC 1813 `mknoddata3`; regular files, directories and links have
/// their own procedures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// A named pipe (NF3FIFO).
    Fifo,
    /// A socket (NF3SOCK).
    Sock,
    /// A character device (NF3CHR) with major and minor numbers.
    Chr(u32, u32),
    /// A block device (NF3BLK) with major and minor numbers.
    Blk(u32, u32),
}

impl Special {
    /// The file type it has once created.
    pub fn ftype(&self) -> Ftype3 {
        match self {
            Special::Fifo => Ftype3::Fifo,
            Special::Sock => Ftype3::Sock,
            Special::Chr(..) => Ftype3::Chr,
            Special::Blk(..) => Ftype3::Blk,
        }
    }
}

/// ACCESS3 bits for `rwx` permission bits on an object of type `t`: read is READ; write is
/// MODIFY and EXTEND (and DELETE on a directory); execute is LOOKUP on a directory, EXECUTE
/// otherwise.
pub fn access_from_rwx(rwx: u32, t: Ftype3) -> u32 {
    let dir = t == Ftype3::Dir;
    let mut g = 0;
    if rwx & 4 != 0 {
        g |= access::READ;
    }
    if rwx & 2 != 0 {
        g |= access::MODIFY | access::EXTEND;
        if dir {
            g |= access::DELETE;
        }
    }
    if rwx & 1 != 0 {
        g |= if dir { access::LOOKUP } else { access::EXECUTE };
    }
    g
}

/// Largest COPY one call makes ([`Store::copy`] callers cap `count` at it or below).
pub const COPY_MAX: u64 = 1 << 20;

thread_local! {
    /// The buffer [`copy_through`] copies through, one per thread (a reactor or a worker),
    /// grown once to the largest copy: a COPY allocates nothing after the first.
    static COPY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`Store::copy`] through [`Store::read`] and [`Store::write`]: at most [`COPY_MAX`] octets,
/// through the thread's buffer.
pub fn copy_through<S: Store + ?Sized>(
    s: &S,
    cx: &Cred,
    (src, src_offset): (&Fh, u64),
    (dst, dst_offset): (&Fh, u64),
    count: u64,
) -> NfsResult<u64> {
    let len = count.min(COPY_MAX) as usize;
    COPY_BUF.with(|b| {
        let mut buf = b.borrow_mut();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let (n, _) = s.read(cx, src, src_offset, &mut buf[..len])?;
        if n > 0 {
            s.write(cx, dst, dst_offset, &buf[..n], StableHow::Unstable)?;
        }
        Ok(n as u64)
    })
}

/// The octets a CLONE of `count` octets (0: to the end of the source) at `src_offset` of a
/// source of `src_size` octets to `dst_offset` moves, as RFC 7862 §15.13.3 and Linux's
/// `remap_file_range_prep` / `generic_remap_checks` decide for a clone: INVAL when the range
/// starts past the source's end, ends past it, wraps, or (`same`: one file) overlaps the
/// destination's; FBIG past `max_size`; 0 (nothing to do) for a count of 0 at the end.
pub fn clone_span(
    src_size: u64,
    (src_offset, dst_offset): (u64, u64),
    count: u64,
    same: bool,
    max_size: u64,
) -> NfsResult<u64> {
    let n = match count {
        0 if src_offset == src_size => return Ok(0),
        0 => src_size.checked_sub(src_offset).ok_or(Nfsstat3::INVAL)?,
        n => n,
    };
    let (Some(src_end), Some(dst_end)) = (src_offset.checked_add(n), dst_offset.checked_add(n))
    else {
        return Err(Nfsstat3::INVAL);
    };
    if src_offset >= src_size || src_end > src_size {
        return Err(Nfsstat3::INVAL);
    }
    if same && dst_offset < src_end && src_offset < dst_end {
        return Err(Nfsstat3::INVAL);
    }
    if dst_end > max_size || dst_end > i64::MAX as u64 {
        return Err(Nfsstat3::FBIG);
    }
    Ok(n)
}

/// An NFSv3 store.
///
/// Identity: every method that reads or changes an object takes the caller's [`Cred`]
/// (already squashed by the export) and refuses what POSIX refuses that identity: ACCES for
/// missing permission bits on the object or the directories involved (search on a directory
/// looked up in, write and search on one whose entries change, the sticky bit), PERM for
/// changes only the owner or root may make (mode, explicit times, owner, group). New objects
/// belong to the caller (the directory's group when it has the set-group-ID bit).
/// [`Store::getattr`] and [`Store::fsstat`] need no permission, as in Linux nfsd. Methods take `&self`: stores are shared by every reactor (memory store,
/// handlers run inline) or every worker (directory store, handlers run in worker mode) and
/// synchronise inside.
pub trait Store: Send + Sync + 'static {
    /// Short name for logs and counters (`memory`, `dir`).
    fn kind(&self) -> &'static str;

    /// The handle of the exported root directory.
    fn root(&self) -> Fh;

    /// Attributes of `fh`.
    fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3>;

    /// [`Store::getattr`] when the store can answer at once without blocking (a server
    /// reactor may call it); `None` (the default) when only `getattr` can.
    fn getattr_now(&self, _fh: &Fh) -> Option<NfsResult<Fattr3>> {
        None
    }

    /// Runs `call` (a call acting as `cx`) on the calling server reactor when the store can
    /// serve it there, and says whether it did; `false` (the default): `call` did not run and
    /// the call belongs on a worker. The directory store serves there a caller whose identity
    /// is the reactor thread's own (no identity switch: a reactor's credentials must stay the
    /// ones that opened the verbs device); a call that `syncs` (COMMIT, a WRITE to stable
    /// storage) only when nothing waits for a device (tmpfs).
    fn run_on_reactor(&self, _cx: &Cred, _syncs: bool, _call: &mut dyn FnMut()) -> bool {
        false
    }

    /// Sets attributes (size, then mode and owner, then times). With `guard`, NOT_SYNC unless
    /// the object's ctime equals it (RFC 1813 SETATTR `sattrguard3`). Setting the size of a
    /// directory is ISDIR, of anything else but a regular file INVAL.
    fn setattr(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()>;

    /// [`Store::setattr`] with the object's weak cache consistency data.
    fn setattr_wcc(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> Wcc<()> {
        wcc_around(self, fh, || self.setattr(cx, fh, set, guard))
    }

    /// The handle of `name` in directory `dir` (`.` is `dir`, `..` its parent; the root's
    /// parent is the root). NOTDIR when `dir` is not a directory, NOENT when absent.
    fn lookup(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh>;

    /// LOOKUP with the attributes its reply carries: the directory's (when it is there, also
    /// when the lookup fails) and the handle of `name` with the object's attributes. The
    /// default asks [`Store::getattr`] and [`Store::lookup`]; a store that has the attributes
    /// at hand while looking up answers them from there.
    #[allow(clippy::type_complexity)]
    fn lookup_attrs(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
    ) -> (Option<Fattr3>, NfsResult<(Fh, Option<Fattr3>)>) {
        let d = self.getattr(dir).ok();
        let r = self.lookup(cx, dir, name);
        (d, r.map(|fh| (fh, self.getattr(&fh).ok())))
    }

    /// The target of symbolic link `fh` into `out`; returns its length. ISDIR when `fh` is a
    /// directory, INVAL when it is another object but a symbolic link (Linux nfsd's
    /// `nfsd_mode_check` for READLINK).
    fn readlink(&self, cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize>;

    /// Reads at most `out.len()` octets at `offset` into `out`; returns the octets read and
    /// whether the read reached the end of the file. ISDIR for a directory, INVAL for other
    /// non-regular files. Offsets past the end read 0 octets with eof.
    fn read(&self, cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)>;

    /// Zero-copy READ: when the whole range `[offset, offset + count)`, clamped to the file
    /// size, lies inside one registered block the store keeps (and is not empty), that block
    /// and where the range is in it, with eof as [`Store::read`] computes it; the caller hands
    /// the buffer to the transport (a DDP item) instead of copying. `Some(Err(_))` for what
    /// `read` would refuse (BADHANDLE, STALE, ISDIR, INVAL). `None`: use `read` (the range is
    /// empty, in a hole, crosses blocks, or the store keeps no registered blocks, as the
    /// default says).
    fn read_registered(
        &self,
        _cx: &Cred,
        _fh: &Fh,
        _offset: u64,
        _count: usize,
    ) -> Option<NfsResult<SharedRead>> {
        None
    }

    /// Writes `data` at `offset`; returns how stable the data is now (at least `stable`).
    /// FBIG when `offset + len` overflows or passes the store's largest file, NOSPC when the
    /// store is full.
    fn write(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow>;

    /// [`Store::write`] with the file's attributes after it (a WRITE's `wcc_data` has no
    /// before-attributes, see `v3::ops`).
    fn write_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> (NfsResult<StableHow>, Option<Fattr3>) {
        let r = self.write(cx, fh, offset, data, stable);
        (r, self.getattr(fh).ok())
    }

    /// Makes every earlier UNSTABLE write of `fh` stable.
    fn commit(&self, cx: &Cred, fh: &Fh) -> NfsResult<()>;

    /// Creates a regular file (`how` as RFC 1813 CREATE says: UNCHECKED opens an existing one,
    /// GUARDED fails with EXIST, EXCLUSIVE stores the verifier and succeeds again for the same
    /// verifier). Returns its handle.
    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh>;

    /// Creates a directory.
    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh>;

    /// Creates a symbolic link to `target`.
    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh>;

    /// Creates a special file: a FIFO, a socket, or a character / block device with its
    /// device numbers (RFC 1813 MKNOD). The server never opens it.
    fn mknod(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Fh>;

    /// Makes `new` as `name` in `dir` ([`Store::create`], [`Store::mkdir`], [`Store::symlink`],
    /// [`Store::mknod`]): its handle and attributes, with the directory's weak cache
    /// consistency data.
    fn create_wcc(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        new: NewObj<'_>,
    ) -> Wcc<(Fh, Option<Fattr3>)> {
        let (r, wcc) = wcc_around(self, dir, || match new {
            NewObj::File(how) => self.create(cx, dir, name, how),
            NewObj::Dir(attr) => self.mkdir(cx, dir, name, attr),
            NewObj::Symlink(target, attr) => self.symlink(cx, dir, name, target, attr),
            NewObj::Node(node, attr) => self.mknod(cx, dir, name, node, attr),
        });
        (r.map(|fh| (fh, self.getattr(&fh).ok())), wcc)
    }

    /// The ACCESS3 bits of `want` that `cx` holds on `fh`: exactly what the other methods
    /// then allow. The default answers from the mode bits ([`identity::granted`]); a store
    /// whose files have more rules (ACLs) answers from them.
    fn access(&self, cx: &Cred, fh: &Fh, want: u32) -> NfsResult<(Fattr3, u32)> {
        let a = self.getattr(fh)?;
        Ok((
            a,
            access_from_rwx(identity::granted(cx, &a, None), a.ftype) & want,
        ))
    }

    /// NFSv4.2 ALLOCATE (`punch` false) and DEALLOCATE (`punch` true) of `len` octets at
    /// `offset` of regular file `fh` for `cx`, as Linux nfsd's `fallocate` (mode 0;
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`): ALLOCATE reserves the range (a later
    /// WRITE there does not fail for room) and grows the size to cover it; DEALLOCATE makes
    /// the range read as zeros, freeing what it can, the size kept. Write permission as
    /// WRITE's; INVAL for anything but a regular file, an empty range or an offset past
    /// 2^63 - 1; FBIG past the largest file; NOSPC. The default: NOTSUPP.
    fn fallocate(
        &self,
        _cx: &Cred,
        _fh: &Fh,
        _offset: u64,
        _len: u64,
        _punch: bool,
    ) -> NfsResult<()> {
        Err(Nfsstat3::NOTSUPP)
    }

    /// NFSv4.2 SEEK: the first offset at or after `offset` of regular file `fh` that holds
    /// data (with `hole`: that lies in a hole; the end of the file is one), and whether it is
    /// at or past the end; NXIO at or past the end, or when no data follows. Read permission
    /// as READ's. The default (a store that keeps no holes): every octet is data.
    fn seek(&self, cx: &Cred, fh: &Fh, offset: u64, hole: bool) -> NfsResult<(u64, bool)> {
        let (a, _) = self.access(cx, fh, 0)?;
        if a.ftype != Ftype3::Reg {
            return Err(if a.ftype == Ftype3::Dir {
                Nfsstat3::ISDIR
            } else {
                Nfsstat3::INVAL
            });
        }
        if offset >= a.size {
            return Err(Nfsstat3::NXIO);
        }
        let at = if hole { a.size } else { offset };
        Ok((at, at >= a.size))
    }

    /// NFSv4.2 COPY within the store: up to `count` octets of regular file `src.0` from
    /// offset `src.1` written to regular file `dst.0` at `dst.1` for `cx` (read permission on
    /// the source, write permission on the destination, as READ and WRITE ask), not made
    /// stable; the octets copied, fewer at the end of the source (0 at or past it). The default reads and writes
    /// through the store ([`copy_through`]).
    fn copy(&self, cx: &Cred, src: (&Fh, u64), dst: (&Fh, u64), count: u64) -> NfsResult<u64> {
        copy_through(self, cx, src, dst, count)
    }

    /// NFSv4.2 CLONE within the store (RFC 7862 §15.13): `count` octets (more than 0, a range
    /// [`clone_span`] accepted) of regular file `src.0` from offset `src.1` made the octets of
    /// regular file `dst.0` at `dst.1` for `cx` (read permission on the source, write
    /// permission on the destination), sharing the source's storage where the store can, not
    /// copying it; the destination grows to cover the range. The default: NOTSUPP (the Linux client then
    /// copies instead).
    fn clone_range(
        &self,
        _cx: &Cred,
        _src: (&Fh, u64),
        _dst: (&Fh, u64),
        _count: u64,
    ) -> NfsResult<()> {
        Err(Nfsstat3::NOTSUPP)
    }

    /// Whether every change of an object moves its ctime forward, to a value it never had
    /// (the NFSv4 `change` attribute, made from the ctime, then only grows: RFC 7862's
    /// `change_attr_type` NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR); otherwise the ctime is the host
    /// file system's, which a clock set back can move back (NFS4_CHANGE_TYPE_IS_TIME_METADATA).
    /// The default: no.
    fn change_monotonic(&self) -> bool {
        false
    }

    /// Whether the store keeps user extended attributes (RFC 8276's `xattr_support`; the
    /// `user.` namespace of Linux). The default: no.
    fn xattr_support(&self) -> bool {
        false
    }

    /// GETXATTR: the value of user extended attribute `name` (without `user.`; stores refuse
    /// what [`check_xattr_name`] refuses) of `fh`, read into `out`; its
    /// length. Read permission as READ's (Linux nfsd's `NFSD_MAY_READ`); NOXATTR when there
    /// is none (always on anything but a regular file or a directory, as Linux's
    /// `xattr_permission` answers), TOOSMALL when the value is longer than `out`. The default:
    /// NOTSUPP.
    fn getxattr(&self, _cx: &Cred, _fh: &Fh, _name: &[u8], _out: &mut [u8]) -> NfsResult<usize> {
        Err(Nfsstat3::NOTSUPP)
    }

    /// SETXATTR: sets user extended attribute `name` of `fh` to `value` (at most
    /// [`XATTR_SIZE_MAX`] octets: the caller checked), with `fh`'s weak cache consistency data
    /// (its ctime moves). Write permission as WRITE's; PERM on anything but a regular file or
    /// a directory, and in a sticky directory for anyone but its owner and root (Linux's
    /// `xattr_permission`); EXIST / NOXATTR as `how` says; NOSPC past the store's room. The
    /// default: NOTSUPP.
    fn setxattr_wcc(
        &self,
        _cx: &Cred,
        fh: &Fh,
        _name: &[u8],
        _value: &[u8],
        _how: XattrSet,
    ) -> Wcc<()> {
        wcc_around(self, fh, || Err(Nfsstat3::NOTSUPP))
    }

    /// LISTXATTRS: the name (without `user.`) of every user extended attribute of `fh`, each
    /// passed to `each`, in an order that stays the same while the set does not change. Read
    /// permission as READ's; none on anything but a regular file or a directory. The default:
    /// NOTSUPP.
    fn listxattrs(&self, _cx: &Cred, _fh: &Fh, _each: &mut dyn FnMut(&[u8])) -> NfsResult<()> {
        Err(Nfsstat3::NOTSUPP)
    }

    /// REMOVEXATTR: removes user extended attribute `name` of `fh`, with `fh`'s weak cache
    /// consistency data. Permission and refusals as [`Store::setxattr_wcc`]; NOXATTR when
    /// there is none. The default: NOTSUPP.
    fn removexattr_wcc(&self, _cx: &Cred, fh: &Fh, _name: &[u8]) -> Wcc<()> {
        wcc_around(self, fh, || Err(Nfsstat3::NOTSUPP))
    }

    /// The POSIX ACLs of `fh` with its attributes (NFSACL GETACL, which needs no permission,
    /// as Linux nfsd asks none). The default: none set (a store without ACLs; the client is
    /// then shown the ACL the mode stands for).
    fn getacl(&self, _cx: &Cred, fh: &Fh) -> NfsResult<(Fattr3, Acls)> {
        Ok((self.getattr(fh)?, Acls::default()))
    }

    /// Sets (`Some`) or removes (`None`) the access ACL, then the default ACL, of `fh` for
    /// `cx` (NFSACL SETACL), with the rules and errors of Linux's `set_posix_acl`: NOTSUPP on a
    /// symbolic link, ACCES for a default ACL on anything but a directory, PERM unless `cx`
    /// owns the object (or is root), INVAL for an ACL Linux refuses (`Acl::valid`). An access
    /// ACL equivalent to a mode sets the mode. The default: NOTSUPP (a store without ACLs, as
    /// Linux nfsd answers for a file system without them).
    fn setacl(
        &self,
        _cx: &Cred,
        _fh: &Fh,
        _access: Option<&Acl>,
        _default: Option<&Acl>,
    ) -> NfsResult<()> {
        Err(Nfsstat3::NOTSUPP)
    }

    /// Removes a non-directory entry (ISDIR for a directory... as Linux answers: NFS3ERR_ISDIR
    /// is not in RFC 1813's REMOVE list but is what clients handle).
    fn remove(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()>;

    /// Removes an empty directory (NOTEMPTY otherwise, NOTDIR for a non-directory).
    fn rmdir(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()>;

    /// [`Store::rmdir`] when `rmdir`, else [`Store::remove`], with the directory's weak cache
    /// consistency data.
    fn remove_wcc(&self, cx: &Cred, dir: &Fh, name: &[u8], rmdir: bool) -> Wcc<()> {
        wcc_around(self, dir, || match rmdir {
            true => self.rmdir(cx, dir, name),
            false => self.remove(cx, dir, name),
        })
    }

    /// Renames `from_name` in `from_dir` to `to_name` in `to_dir`, replacing a compatible
    /// target (POSIX rename rules: a directory replaces only an empty directory, EXIST or
    /// NOTEMPTY otherwise; ISDIR / NOTDIR for mismatched types; INVAL when moving a directory
    /// into itself). PERM when either name is `.` or `..`, as Linux nfsd's `nfsd_rename`.
    fn rename(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()>;

    /// [`Store::rename`] with both directories' weak cache consistency data (from, to).
    fn rename_wcc(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> (NfsResult<()>, WccData, WccData) {
        let before = |fh| self.getattr(fh).ok().map(|a: Fattr3| a.wcc());
        let (fb, tb) = (before(from_dir), before(to_dir));
        let r = self.rename(cx, from_dir, from_name, to_dir, to_name);
        let wcc = |before, fh| WccData {
            before,
            after: self.getattr(fh).ok(),
        };
        (r, wcc(fb, from_dir), wcc(tb, to_dir))
    }

    /// Makes `name` in `dir` a new hard link to `fh` (ISDIR when `fh` is a directory).
    fn link(&self, cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()>;

    /// [`Store::link`] with the object's attributes after it and the directory's weak cache
    /// consistency data.
    fn link_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        dir: &Fh,
        name: &[u8],
    ) -> (NfsResult<()>, Option<Fattr3>, WccData) {
        let (r, wcc) = wcc_around(self, dir, || self.link(cx, fh, dir, name));
        (r, self.getattr(fh).ok(), wcc)
    }

    /// Lists directory `dir` starting after `cookie` (0: from the start), calling `emit` for
    /// each entry in order until it returns `false` (the reply is full: that entry is not
    /// included). With `plus`, entries carry their handle and attributes. BAD_COOKIE when
    /// `cookie` is not 0 and `verf` is not the verifier this directory hands out; cookies stay
    /// valid while entries are added and removed, so a listing in pages is complete and has
    /// no duplicates.
    fn readdir(
        &self,
        cx: &Cred,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<DirListing>;

    /// Space and file-slot counts of the file system holding `fh`.
    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat>;

    /// The write verifier: the same value until the server restarts (or loses uncommitted
    /// data), then a different one.
    fn write_verifier(&self) -> [u8; 8];

    /// The store's own counters (`nfsd-stat` names and values; none by default).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Largest file size the store supports (FSINFO `maxfilesize`).
    fn max_file_size(&self) -> u64 {
        (1u64 << 63) - 1
    }

    /// For a store on the host's file system, `fh`'s object as processes on the host see it
    /// (so their changes can recall NFSv4.1 delegations: `v4::server::deleg_local`); `None`
    /// where no one else reaches the store's objects (the memory store).
    fn host_object(&self, _fh: &Fh) -> Option<NfsResult<HostObject>> {
        None
    }
}

/// An object of a store on the host's file system ([`Store::host_object`]).
pub struct HostObject {
    /// A descriptor of the object (it may be `O_PATH`).
    pub fd: Arc<std::os::fd::OwnedFd>,
    /// Its kernel file handle's type and octets (`name_to_handle_at`), which fanotify reports
    /// with each event about it.
    pub handle: (i32, Vec<u8>),
}
