//! The directory store ([`DirStore`]): serves a real directory of the server's file system,
//! what `rpcrdma-nfsd dir:PATH` runs. Handlers run in worker threads, so every method simply
//! makes blocking system calls; on a reactor run [`Store::getattr_now`], which answers only
//! from a descriptor already open (one `fstat`), and with `--dir-calls reactor` the calls
//! [`Store::run_on_reactor`] admits: those of a caller whose identity is the reactor's own,
//! which need no identity switch (`ident`).
//!
//! Normal operation: objects are named by kernel file handles (`name_to_handle_at`, opened again
//! with `open_by_handle_at` relative to the export root; needs CAP_DAC_READ_SEARCH, i.e. root),
//! wrapped as described in the `handle` module; a bounded cache keeps recently used descriptors
//! open (`O_PATH`; a regular file is opened again read-write when first read, written or truncated,
//! a directory read-only at its first GETACL or SETACL; FIFOs, sockets and devices are never
//! opened otherwise). LOOKUP looks at the name as the caller
//! (`statx`: attributes and mount) and answers the handle the cache holds for that inode number,
//! else opens the name and takes the handle of what it opened (two system calls with the
//! directory's `fstat`, five on a miss); GETATTR is one `fstat`, ACCESS that and at most two
//! `faccessat2` in the common cases (execute of a regular file without execute bits is refused
//! by the mode where the file system decides so for everyone: `sys::exec_by_mode`). A change
//! (the `*_wcc` methods; REMOVE, RENAME and LINK in the `change` module, creations in `create`)
//! answers its weak cache
//! consistency data from the `fstat` that checked the object before it and one `fstat` after,
//! as Linux nfsd takes them (`fh_fill_pre_attrs`, `fh_fill_post_attrs`), holding the changed
//! object's mutex in between (`serial`: no other change through this server falls between
//! them), and a new object's
//! attributes from the `fstat` of its new descriptor (`apps/tests/nfsd_dircost.rs` holds the
//! counts to budgets). Every call runs under the caller's identity (`ident`): handles
//! missing from the cache are opened as root, then the thread switches to the caller, so the host
//! kernel checks each lookup, creation, removal, rename, listing and attribute change by its own
//! rules (LINK: write and search on the directory, checked by the kernel for the caller, as Linux
//! nfsd asks). READ, WRITE and truncation use the cached descriptor after the kernel's permission
//! check for the caller (`faccessat2`), with Linux nfsd's exceptions: the owner of a regular file
//! may always read it (asked nothing) and write it (asked nothing once the descriptor shows the
//! file not immutable), and READ is granted to whoever may execute the file. Names are resolved
//! only with `*at()` calls relative to the directory's descriptor and symbolic links are never
//! followed; `..` of the export root is the root, a directory decoded from a handle must lie
//! under the export root, and a mount point inside the export is not crossed (LOOKUP answers
//! ACCES, READDIRPLUS lists it without handle), so a client cannot walk out of the export. Data
//! moves with `pread`/`pwrite`; DATA_SYNC and FILE_SYNC writes and COMMIT call
//! `fdatasync`/`fsync`, but on a file system kept in memory (tmpfs, ramfs), whose `fsync` does
//! nothing and cannot fail. Attributes are those of the `fstat` system call, which asks the
//! descriptor alone; READDIR cookies are the file system's own `d_off` (see the `readdir`
//! module) with a zero cookie verifier, as Linux nfsd answers.
//!
//! Recovery: handles outlive the server (they are the kernel's); the write verifier is random
//! per [`DirStore::open`], so clients resend uncommitted data after a restart. A handle of a
//! removed object is STALE (the kernel says ESTALE, or the cached descriptor shows no links),
//! one from another export STALE, garbage BADHANDLE; one on another mount STALE, a directory
//! outside the export STALE. As with Linux nfsd's `no_subtree_check`, a well-formed handle of
//! a non-directory elsewhere on the same file system is not refused here: the server's handle
//! seal ([`crate::nfs::handle_mac`]) keeps clients from making one, and file systems draw
//! generation numbers at random.

mod acl;
mod change;
mod create;
mod handle;
mod host;
pub use handle::{CacheStats, CACHE_CAP};
mod ident;
mod readdir;
mod serial;
mod space;
mod sys;
#[cfg(test)]
mod tests;
mod xattr;

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::nfs::acl::{Acl, Acls};
use crate::nfs::identity::Cred;
use crate::nfs::store::{DirListing, NewObj, Special, Store, Wcc, XattrSet};
use crate::nfs::types::{
    access, CreateHow, DirEntry, Fattr3, Fh, FsStat, NfsResult, Nfsstat3, Sattr3, StableHow, Time3,
    WccData,
};
use create::Made;
use handle::{FdCache, MAX_KERNEL};
use sys::{check, cname, ifmt, nfs_err, openat, proc_path, KernelHandle};

/// Most parent directories walked up when checking that a directory lies in the export.
const MAX_DEPTH: usize = 4096;

/// An open object: its descriptor, what `fstat` said just now, and whether the descriptor is
/// open for I/O (a regular file read-write or read-only, a directory read-only; else
/// `O_PATH`).
#[derive(Clone)]
struct Obj {
    fd: Arc<OwnedFd>,
    st: libc::stat,
    io: bool,
}

impl Obj {
    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn kind(&self) -> u32 {
        ifmt(&self.st)
    }
}

/// The NFSv3 store that serves a directory of the local file system.
#[derive(Debug)]
pub struct DirStore {
    root_fd: OwnedFd,
    root_dev: u64,
    root_ino: u64,
    root_mnt: i32,
    root_fh: Fh,
    tag: [u8; 4],
    cache: Mutex<FdCache>,
    /// The mutexes a change of an object holds (`serial`).
    serial: serial::Serial,
    verf: [u8; 8],
    max_size: u64,
    /// The export's file system keeps everything in memory (tmpfs): syncing waits for nothing.
    in_memory: bool,
    /// The export's file system refuses to execute a regular file without execute bits to
    /// everyone (`sys::exec_by_mode`).
    exec_by_mode: bool,
    /// The export's file system keeps user extended attributes (`xattr::supported`).
    xattrs: bool,
}

/// An `io::Error` saying what `open` refuses.
fn refuse(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("cannot export {}: {why}", path.display()),
    )
}

impl DirStore {
    /// Exports directory `path`. Fails when it is not a directory, when its file system has
    /// no file handles (or handles longer than fit in an NFSv3 handle with our header and the
    /// server's seal), or when the process may not open handles (CAP_DAC_READ_SEARCH) or
    /// act as its callers (CAP_SETUID, CAP_SETGID).
    pub fn open(path: &Path) -> io::Result<DirStore> {
        DirStore::open_with(path, handle::CACHE_CAP)
    }

    /// [`DirStore::open`] keeping at most `cache` descriptors open (`--dir-cache`).
    pub fn open_with(path: &Path, cache: usize) -> io::Result<DirStore> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| refuse(path, "path holds a NUL"))?;
        if !ident::can_switch() {
            return Err(refuse(
                path,
                "acting as callers needs CAP_SETUID and CAP_SETGID",
            ));
        }
        // SAFETY: `c` is NUL-terminated.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        let root_fd = sys::owned(fd).map_err(|_| io::Error::last_os_error())?;
        let st = sys::fstat(root_fd.as_raw_fd()).map_err(|_| io::Error::last_os_error())?;
        let (kh, mnt) =
            KernelHandle::of(root_fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH).map_err(|e| match e
                .raw_os_error()
            {
                Some(libc::EOPNOTSUPP) => refuse(path, "its file system has no file handles"),
                Some(libc::EOVERFLOW) => refuse(path, "its file handles are too long"),
                _ => e,
            })?;
        if kh.bytes().len() > MAX_KERNEL {
            let why = format!("its file handles are longer than {MAX_KERNEL} octets");
            return Err(refuse(path, &why));
        }
        if let Err(e) = kh.open(&root_fd, libc::O_PATH) {
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => refuse(path, "open_by_handle_at needs CAP_DAC_READ_SEARCH"),
                _ => e,
            });
        }
        let max_size = sys::max_file_size(root_fd.as_raw_fd())?;
        let in_memory = sys::in_memory(root_fd.as_raw_fd())?;
        let exec_by_mode = sys::exec_by_mode(root_fd.as_raw_fd())?;
        let xattrs = xattr::supported(root_fd.as_raw_fd());
        let tag = handle::export_tag(&kh);
        let root_fh = handle::encode(tag, &kh).ok_or_else(|| refuse(path, "handle too long"))?;
        Ok(DirStore {
            root_fd,
            root_dev: st.st_dev,
            root_ino: st.st_ino,
            root_mnt: mnt,
            root_fh,
            tag,
            cache: Mutex::new(FdCache::with_capacity(cache)),
            serial: serial::Serial::new(),
            verf: super::memory::random8(),
            max_size,
            in_memory,
            exec_by_mode,
            xattrs,
        })
    }

    fn cache(&self) -> MutexGuard<'_, FdCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_root(&self, st: &libc::stat) -> bool {
        st.st_dev == self.root_dev && st.st_ino == self.root_ino
    }

    fn fh_from(&self, r: io::Result<(KernelHandle, i32)>) -> NfsResult<Fh> {
        let (kh, mnt) = r.map_err(|e| Nfsstat3::from_errno(e.raw_os_error().unwrap_or(0)))?;
        if mnt != self.root_mnt {
            // A mount point inside the export: not served (no crossmnt).
            return Err(Nfsstat3::ACCES);
        }
        handle::encode(self.tag, &kh).ok_or(Nfsstat3::SERVERFAULT)
    }

    /// The handle of `name` in `dirfd` (not following a symbolic link).
    fn fh_at(&self, dirfd: RawFd, name: &CStr) -> NfsResult<Fh> {
        self.fh_from(KernelHandle::of(dirfd, name, 0))
    }

    /// The handle of the object open as `fd`.
    fn fh_of_fd(&self, fd: RawFd) -> NfsResult<Fh> {
        self.fh_from(KernelHandle::of(fd, c"", libc::AT_EMPTY_PATH))
    }

    /// Whether directory `fd` (with `st`) lies under the export root: its parents, walked up
    /// with `..`, reach the root before the top of the file system or another mount.
    fn inside(&self, fd: &OwnedFd, st: &libc::stat) -> bool {
        let (mut dev, mut ino) = (st.st_dev, st.st_ino);
        let mut cur = None::<OwnedFd>;
        for _ in 0..MAX_DEPTH {
            if dev == self.root_dev && ino == self.root_ino {
                return true;
            }
            let at = cur.as_ref().unwrap_or(fd).as_raw_fd();
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            let Ok(up) = openat(at, c"..", flags, 0) else {
                return false;
            };
            let Ok(ust) = sys::fstat(up.as_raw_fd()) else {
                return false;
            };
            if ust.st_dev != self.root_dev || (ust.st_ino == ino && ust.st_dev == dev) {
                return false;
            }
            (dev, ino) = (ust.st_dev, ust.st_ino);
            cur = Some(up);
        }
        false
    }

    /// Opens `fh` (a cache miss) as `O_PATH`: as the server, the only identity
    /// `open_by_handle_at` serves; a directory must lie under the export root. A regular
    /// file is opened for I/O when first read or written ([`DirStore::file_obj`]).
    fn open_by_handle(&self, fh: &Fh, kh: &KernelHandle) -> NfsResult<Obj> {
        ident::as_server()?;
        let map = |e: io::Error| match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EOVERFLOW) => Nfsstat3::BADHANDLE,
            Some(libc::ESTALE) | Some(libc::ENOENT) | None => Nfsstat3::STALE,
            Some(x) => Nfsstat3::from_errno(x),
        };
        let fd = kh.open(&self.root_fd, libc::O_PATH).map_err(map)?;
        let st = sys::fstat(fd.as_raw_fd())?;
        if ifmt(&st) == libc::S_IFDIR && !self.inside(&fd, &st) {
            return Err(Nfsstat3::STALE);
        }
        let fd = Arc::new(fd);
        self.cache().insert(*fh, fd.clone(), false);
        Ok(Obj { fd, st, io: false })
    }

    /// The live object `fh` names, whatever identity the thread holds after (for what needs
    /// no permission: attributes, file system counts). One `fstat` when its descriptor is
    /// cached.
    fn stat_obj(&self, fh: &Fh) -> NfsResult<Obj> {
        let kh = handle::decode(self.tag, fh)?;
        let cached = self.cache().get(fh);
        let o = match cached {
            Some((fd, io)) => {
                let st = sys::fstat(fd.as_raw_fd())?;
                Obj { fd, st, io }
            }
            None => self.open_by_handle(fh, &kh)?,
        };
        self.live(fh, &o.st)?;
        Ok(o)
    }

    /// STALE (the descriptor forgotten) when `st`, just taken of `fh`'s descriptor, shows the
    /// object removed (no links) or on another file system.
    fn live(&self, fh: &Fh, st: &libc::stat) -> NfsResult<()> {
        if st.st_nlink == 0 || st.st_dev != self.root_dev {
            self.cache().forget(fh);
            return Err(Nfsstat3::STALE);
        }
        Ok(())
    }

    /// The attributes of `fh`, open as `fd`, taken again after a change: `None` when the
    /// object is gone (forgotten, as [`DirStore::stat_obj`] would).
    fn after(&self, fh: &Fh, fd: &OwnedFd) -> Option<Fattr3> {
        let st = sys::fstat(fd.as_raw_fd()).ok()?;
        self.live(fh, &st).ok()?;
        Some(sys::fattr(&st))
    }

    /// `op` on the live object `fh` names with its weak cache consistency data: the
    /// attributes [`DirStore::stat_obj`] took before (which `op` checks against), `fstat`'s
    /// after, with `fh`'s mutex held from before to after (`serial`). Both none when `fh`
    /// names nothing live.
    fn changing<T>(&self, fh: &Fh, op: impl FnOnce(Obj) -> NfsResult<T>) -> Wcc<T> {
        let _held = self.serial.one(fh);
        let o = match self.stat_obj(fh) {
            Ok(o) => o,
            Err(e) => return (Err(e), WccData::default()),
        };
        let before = Some(sys::fattr(&o.st).wcc());
        let fd = Arc::clone(&o.fd);
        let r = op(o);
        (
            r,
            WccData {
                before,
                after: self.after(fh, &fd),
            },
        )
    }

    /// [`DirStore::changing`] for a directory: `op` runs with the thread acting as `cx`,
    /// NOTDIR when `fh` is not a directory.
    fn changing_dir<T>(&self, cx: &Cred, fh: &Fh, op: impl FnOnce(&Obj) -> NfsResult<T>) -> Wcc<T> {
        self.changing(fh, |d| self.as_dir(cx, &Ok(d)).and_then(op))
    }

    /// The live object `fh` names, with the thread acting as `cx` after.
    fn obj(&self, cx: &Cred, fh: &Fh) -> NfsResult<Obj> {
        let o = self.stat_obj(fh)?;
        ident::act_as(cx)?;
        Ok(o)
    }

    /// The live directory `fh` names (NOTDIR otherwise), with the thread acting as `cx`.
    fn dir_obj(&self, cx: &Cred, fh: &Fh) -> NfsResult<Obj> {
        let o = self.stat_obj(fh);
        self.as_dir(cx, &o)?;
        o
    }

    /// Object `o` (as [`DirStore::stat_obj`] answered) as a directory, with the thread acting
    /// as `cx`: NOTDIR when it is not one.
    fn as_dir<'o>(&self, cx: &Cred, o: &'o NfsResult<Obj>) -> NfsResult<&'o Obj> {
        let o = o.as_ref().map_err(|e| *e)?;
        ident::act_as(cx)?;
        if o.kind() != libc::S_IFDIR {
            return Err(Nfsstat3::NOTDIR);
        }
        Ok(o)
    }

    /// The live regular file `fh` names for READ, WRITE or COMMIT (ISDIR for a directory,
    /// INVAL for anything else), open for I/O, with the thread acting as `cx`.
    fn file_obj(&self, cx: &Cred, fh: &Fh) -> NfsResult<Obj> {
        self.file_io(cx, fh, self.stat_obj(fh)?)
    }

    /// Live object `o` of `fh` as [`DirStore::file_obj`] answers it.
    fn file_io(&self, cx: &Cred, fh: &Fh, o: Obj) -> NfsResult<Obj> {
        let o = match o.kind() {
            libc::S_IFREG if o.io => o,
            libc::S_IFREG => self.open_for_io(fh, o)?,
            libc::S_IFDIR => return Err(Nfsstat3::ISDIR),
            _ => return Err(Nfsstat3::INVAL),
        };
        ident::act_as(cx)?;
        Ok(o)
    }

    /// Regular file `o` (open `O_PATH`) opened again for I/O, as the server: read-write, else
    /// read-only; the new descriptor replaces the cached one. When neither open succeeds, `o`
    /// as it is (its reads and writes then fail with ACCES). A directory is opened again
    /// read-only ([`DirStore::open_dir_for_io`]).
    fn open_for_io(&self, fh: &Fh, o: Obj) -> NfsResult<Obj> {
        if o.kind() == libc::S_IFDIR {
            return self.open_dir_for_io(fh, o);
        }
        let kh = handle::decode(self.tag, fh)?;
        ident::as_server()?;
        let Ok(fd) = kh
            .open(&self.root_fd, libc::O_RDWR | libc::O_NOFOLLOW)
            .or_else(|_| kh.open(&self.root_fd, libc::O_RDONLY | libc::O_NOFOLLOW))
        else {
            return Ok(o);
        };
        let fd = Arc::new(fd);
        self.cache().insert(*fh, fd.clone(), true);
        Ok(Obj { fd, io: true, ..o })
    }

    /// Directory `o` (open `O_PATH`) opened again read-only, as the server, in place of the
    /// cached descriptor: its extended attributes (the ACLs of every GETACL, which the Linux
    /// client sends after each creation in the directory), mode, owner and times are then
    /// asked of and set through the descriptor itself, not through its /proc link (a path
    /// walk per call). When the open fails, `o` as it is.
    fn open_dir_for_io(&self, fh: &Fh, o: Obj) -> NfsResult<Obj> {
        ident::as_server()?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let Ok(fd) = openat(o.raw(), c".", flags, 0) else {
            return Ok(o);
        };
        let fd = Arc::new(fd);
        self.cache().insert(*fh, fd.clone(), true);
        Ok(Obj { fd, io: true, ..o })
    }

    /// LOOKUP of `name` (not `.` or `..` of the root) in directory `d` (the thread acts as the
    /// caller, whose search permission the kernel checks): the handle, and the attributes when
    /// the object is still there. The name is looked at first (`statx`, with its mount): an
    /// object the descriptor cache holds with that inode number is the one the name names (see
    /// the `handle` module), its handle and the name's attributes are the answer (two system
    /// calls with the directory's check). Otherwise the object is opened by name (`O_PATH`, as
    /// the caller: `open_by_handle_at` is the server's alone) and the answer is the handle of
    /// what was opened and its attributes (the name may have changed meanwhile); it lies under
    /// the export because its directory does. A name on another mount answers ACCES.
    fn lookup_in(&self, d: &Obj, name: &CStr) -> NfsResult<(Fh, Option<Fattr3>)> {
        let (st, mnt) = sys::lstat_mnt(d.raw(), name)?;
        if st.st_dev != self.root_dev || mnt.is_some_and(|m| m != self.root_mnt) {
            return Err(Nfsstat3::ACCES);
        }
        let held = mnt.and_then(|_| self.cache().ino_hit(st.st_ino));
        if let Some(fh) = held {
            return Ok((fh, Some(sys::fattr(&st))));
        }
        let fd = openat(d.raw(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let fh = self.fh_of_fd(fd.as_raw_fd())?;
        let cached = self.cache().get(&fh);
        let fd = match cached {
            Some((fd, _)) => fd,
            None => {
                let fd = Arc::new(fd);
                self.cache().insert(fh, fd.clone(), false);
                fd
            }
        };
        let st = sys::fstat(fd.as_raw_fd()).ok();
        if let Some(st) = &st {
            self.cache().name_ino(&fh, st.st_ino);
        }
        Ok((fh, st.filter(|s| s.st_nlink > 0).map(|s| sys::fattr(&s))))
    }

    /// LOOKUP as the caller `cx`: the directory's attributes (when it is there) and the result.
    fn lookup_as(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
    ) -> (Option<Fattr3>, NfsResult<(Fh, Option<Fattr3>)>) {
        let d = match self.stat_obj(dir) {
            Ok(d) => d,
            Err(e) => return (None, Err(e)),
        };
        let dattr = Some(sys::fattr(&d.st));
        let r = ident::act_as(cx).and_then(|()| {
            if d.kind() != libc::S_IFDIR {
                return Err(Nfsstat3::NOTDIR);
            }
            let c = cname(name)?;
            match name {
                b"." => sys::may(d.raw(), libc::X_OK).map(|()| (*dir, dattr)),
                b".." if self.is_root(&d.st) => {
                    sys::may(d.raw(), libc::X_OK).map(|()| (self.root_fh, dattr))
                }
                _ => self.lookup_in(&d, &c),
            }
        });
        (dattr, r)
    }

    /// Whether the thread's identity, `cx`, may read (`R_OK`) or write (`W_OK`) the data of
    /// regular file `o`: the kernel's check, except that the owner always may and that
    /// whoever may execute the file may read it (Linux nfsd's NFSD_MAY_OWNER_OVERRIDE and
    /// NFSD_MAY_READ_IF_EXEC: a client keeps using a file it created read-only or loads a
    /// program it may only execute).
    /// Whether `cx` may write file `o` (open for I/O). As Linux nfsd's `nfsd_permission`: the
    /// owner may once the file is known not to be immutable (asked of the descriptor) and its
    /// mount writable, which it stays while a descriptor open for writing is held (the kernel
    /// refuses to remount it read-only meanwhile); a descriptor open read-only (its read-write
    /// open was refused) fails the write, and the kernel's check then says why.
    fn may_write(&self, cx: &Cred, o: &Obj) -> NfsResult<()> {
        if o.st.st_uid == cx.uid && sys::immutable(o.raw()) == Some(false) {
            return Ok(());
        }
        self.may_io(cx, o, libc::W_OK)
    }

    fn may_io(&self, cx: &Cred, o: &Obj, mode: i32) -> NfsResult<()> {
        if mode == libc::R_OK && o.st.st_uid == cx.uid {
            // As Linux nfsd's `nfsd_permission`: the owner's read is granted before any
            // question to the kernel (only writes are checked first, for a read-only mount
            // and an immutable file).
            return Ok(());
        }
        match sys::may(o.raw(), mode) {
            Err(Nfsstat3::ACCES) if o.st.st_uid == cx.uid => Ok(()),
            Err(Nfsstat3::ACCES) if mode == libc::R_OK => sys::may(o.raw(), libc::X_OK),
            r => r,
        }
    }

    /// Applies `set` to `o` as `cx` (size, then mode and owner, then times): the kernel
    /// checks each change for the caller, on the object itself (a symbolic link is never
    /// followed; its mode is not changed).
    fn apply(&self, cx: &Cred, o: &Obj, set: &Sattr3) -> NfsResult<()> {
        let kind = o.kind();
        let size = match (set.size, kind) {
            (None, _) => None,
            (Some(s), libc::S_IFREG) => Some(
                i64::try_from(s)
                    .ok()
                    .filter(|&s| s as u64 <= self.max_file_size())
                    .ok_or(Nfsstat3::FBIG)?,
            ),
            (Some(_), libc::S_IFDIR) => return Err(Nfsstat3::ISDIR),
            (Some(_), _) => return Err(Nfsstat3::INVAL),
        };
        if let Some(len) = size {
            self.may_io(cx, o, libc::W_OK)?;
            // SAFETY: plain syscalls; the /proc link reaches the object itself.
            if unsafe { libc::ftruncate(o.raw(), len) } < 0 {
                check(unsafe { libc::truncate(proc_path(o.raw()).as_ptr(), len) })?;
            }
        }
        sys::set_attrs(o.raw(), o.io, kind, set)
    }

    /// SETATTR of live object `o` of `fh` (as [`Store::setattr`]).
    fn setattr_on(
        &self,
        cx: &Cred,
        fh: &Fh,
        o: Obj,
        set: &Sattr3,
        guard: Option<Time3>,
    ) -> NfsResult<()> {
        // A new size goes through a descriptor open for writing (`ftruncate`: the owner may
        // truncate a file whose mode refuses it writing, as with Linux nfsd).
        let o = match o {
            o if set.size.is_some() && o.kind() == libc::S_IFREG && !o.io => {
                self.open_for_io(fh, o)?
            }
            o => o,
        };
        ident::act_as(cx)?;
        if guard.is_some_and(|g| g != sys::ctime(&o.st)) {
            return Err(Nfsstat3::NOT_SYNC);
        }
        self.apply(cx, &o, set)
    }

    /// WRITE to live object `o` of `fh` (as [`Store::write`]) without making it stable: the
    /// file written, for [`DirStore::sync`].
    fn write_on(&self, cx: &Cred, fh: &Fh, o: Obj, offset: u64, data: &[u8]) -> NfsResult<Obj> {
        let o = self.file_io(cx, fh, o)?;
        let end = offset.checked_add(data.len() as u64);
        if !end.is_some_and(|e| e <= self.max_file_size()) {
            return Err(Nfsstat3::FBIG);
        }
        self.may_write(cx, &o)?;
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            let at = (offset + done as u64) as i64;
            // SAFETY: `rest` is readable for `rest.len()` octets.
            let n = unsafe { libc::pwrite(o.raw(), rest.as_ptr().cast(), rest.len(), at) };
            if n < 0 {
                match sys::errno() {
                    libc::EINTR => continue,
                    // A descriptor open read-only: the kernel's check says why (ACCES when
                    // it has nothing to say).
                    libc::EBADF => {
                        return self.may_io(cx, &o, libc::W_OK).and(Err(Nfsstat3::ACCES))
                    }
                    e => return Err(Nfsstat3::from_errno(e)),
                }
            }
            done += n as usize;
        }
        Ok(o)
    }

    /// Makes what was just written to `o` as stable as `stable` asks (nothing to wait for on
    /// tmpfs). Called with no mutex held, as Linux nfsd syncs a WRITE after the write itself
    /// released the inode lock: a device's flush holds up no other change.
    fn sync(&self, o: &Obj, stable: StableHow) -> NfsResult<StableHow> {
        // SAFETY: plain syscalls on an open descriptor.
        match stable {
            _ if self.in_memory => {}
            StableHow::Unstable => {}
            StableHow::DataSync => check(unsafe { libc::fdatasync(o.raw()) }).map(drop)?,
            StableHow::FileSync => check(unsafe { libc::fsync(o.raw()) }).map(drop)?,
        }
        Ok(stable)
    }

    /// The ACCESS3 bits of `want` the thread's identity holds on `o`, by the kernel's check;
    /// execute of a regular file without execute bits is refused without asking where the
    /// file system refuses it to everyone (`sys::exec_by_mode`).
    fn granted(&self, o: &Obj, want: u32) -> u32 {
        let dir = o.kind() == libc::S_IFDIR;
        let write = access::MODIFY | access::EXTEND | if dir { access::DELETE } else { 0 };
        let exec = if dir { access::LOOKUP } else { access::EXECUTE };
        let no_exec = self.exec_by_mode && o.kind() == libc::S_IFREG && o.st.st_mode & 0o111 == 0;
        let want = if no_exec { want & !exec } else { want };
        let asked = [
            (access::READ, libc::R_OK),
            (write, libc::W_OK),
            (exec, libc::X_OK),
        ];
        let all = asked
            .iter()
            .filter(|(bits, _)| want & bits != 0)
            .fold(0, |m, (_, mode)| m | mode);
        // One check for everything asked first: what the kernel's client asks for is usually
        // all granted (one system call). The kernel grants a set of rights only when it grants
        // each, so when that fails, everything but execute (which a plain file mostly lacks)
        // is checked next: granted, execute alone was refused (two calls). Else each right on
        // its own.
        if all == 0 || sys::may(o.raw(), all).is_ok() {
            return want & (access::READ | write | exec);
        }
        let rest = all & !libc::X_OK;
        if all & libc::X_OK != 0 && rest != 0 && sys::may(o.raw(), rest).is_ok() {
            return want & (access::READ | write);
        }
        let mut got = 0;
        for (bits, mode) in asked {
            if want & bits != 0 && sys::may(o.raw(), mode).is_ok() {
                got |= bits;
            }
        }
        got & want
    }
}

impl Store for DirStore {
    fn kind(&self) -> &'static str {
        "dir"
    }

    fn root(&self) -> Fh {
        self.root_fh
    }

    fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3> {
        Ok(sys::fattr(&self.stat_obj(fh)?.st))
    }

    /// A caller acting as the thread's own identity (`ident::pin_if_own`): no switch, the
    /// thread's credentials untouched while `call` runs, whatever it returns or if it panics.
    /// A call that syncs only when the export is in memory (tmpfs: no device to wait for).
    fn run_on_reactor(&self, cx: &Cred, syncs: bool, call: &mut dyn FnMut()) -> bool {
        if syncs && !self.in_memory {
            return false;
        }
        let Some(_pinned) = ident::pin_if_own(cx) else {
            return false;
        };
        call();
        true
    }

    /// A handle whose descriptor is open: one `fstat`, which does not block on a local file
    /// system (the inode is in memory while the descriptor is open).
    fn getattr_now(&self, fh: &Fh) -> Option<NfsResult<Fattr3>> {
        if let Err(e) = handle::decode(self.tag, fh) {
            return Some(Err(e));
        }
        let (fd, _) = self.cache().peek(fh)?;
        let st = sys::fstat(fd.as_raw_fd());
        Some(st.and_then(|st| self.live(fh, &st).map(|()| sys::fattr(&st))))
    }

    fn setattr(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()> {
        let _held = self.serial.one(fh);
        self.setattr_on(cx, fh, self.stat_obj(fh)?, set, guard)
    }

    fn setattr_wcc(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> Wcc<()> {
        self.changing(fh, |o| self.setattr_on(cx, fh, o, set, guard))
    }

    fn lookup(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        self.lookup_as(cx, dir, name).1.map(|(fh, _)| fh)
    }

    fn lookup_attrs(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
    ) -> (Option<Fattr3>, NfsResult<(Fh, Option<Fattr3>)>) {
        self.lookup_as(cx, dir, name)
    }

    fn readlink(&self, cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize> {
        let o = self.obj(cx, fh)?;
        match o.kind() {
            libc::S_IFLNK => {}
            libc::S_IFDIR => return Err(Nfsstat3::ISDIR),
            _ => return Err(Nfsstat3::INVAL),
        }
        if o.st.st_size.max(0) as u64 > out.len() as u64 {
            return Err(Nfsstat3::NAMETOOLONG);
        }
        // SAFETY: `out` is writable for `out.len()` octets.
        let n =
            unsafe { libc::readlinkat(o.raw(), c"".as_ptr(), out.as_mut_ptr().cast(), out.len()) };
        if n < 0 {
            return Err(nfs_err());
        }
        Ok((n as usize).min(out.len()))
    }

    fn read(&self, cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)> {
        let o = self.file_obj(cx, fh)?;
        self.may_io(cx, &o, libc::R_OK)?;
        let size = o.st.st_size.max(0) as u64;
        let Ok(start) = i64::try_from(offset) else {
            return Ok((0, true));
        };
        let mut done = 0usize;
        while done < out.len() {
            let rest = &mut out[done..];
            let at = start.saturating_add(done as i64);
            // SAFETY: `rest` is writable for `rest.len()` octets.
            let n = unsafe { libc::pread(o.raw(), rest.as_mut_ptr().cast(), rest.len(), at) };
            if n < 0 {
                match sys::errno() {
                    libc::EINTR => continue,
                    libc::EBADF => return Err(Nfsstat3::ACCES),
                    e => return Err(Nfsstat3::from_errno(e)),
                }
            }
            done += n as usize;
            if (n as usize) < rest.len() {
                // A regular file reads short only at its end (one read, as Linux nfsd makes).
                break;
            }
        }
        let eof = done < out.len() || offset.saturating_add(done as u64) >= size;
        Ok((done, eof))
    }

    fn write(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow> {
        // The file's mutex, as every change of it holds: no SETATTR's attributes before and
        // after hold this write between them (`serial`).
        let o = {
            let _held = self.serial.one(fh);
            self.write_on(cx, fh, self.stat_obj(fh)?, offset, data)?
        };
        self.sync(&o, stable)
    }

    fn write_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> (NfsResult<StableHow>, Option<Fattr3>) {
        let (r, wcc) = self.changing(fh, |o| self.write_on(cx, fh, o, offset, data));
        (r.and_then(|o| self.sync(&o, stable)), wcc.after)
    }

    fn commit(&self, cx: &Cred, fh: &Fh) -> NfsResult<()> {
        let o = self.file_obj(cx, fh)?;
        self.may_io(cx, &o, libc::W_OK)?;
        if self.in_memory {
            return Ok(());
        }
        // SAFETY: plain syscall on an open descriptor.
        check(unsafe { libc::fsync(o.raw()) }).map(drop)
    }

    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh> {
        self.make_as(cx, dir, name, NewObj::File(how))
    }

    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh> {
        self.make_as(cx, dir, name, NewObj::Dir(attr))
    }

    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.make_as(cx, dir, name, NewObj::Symlink(target, attr))
    }

    fn mknod(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.make_as(cx, dir, name, NewObj::Node(node, attr))
    }

    fn create_wcc(&self, cx: &Cred, dir: &Fh, name: &[u8], new: NewObj<'_>) -> Wcc<Made> {
        self.changing_dir(cx, dir, |d| self.make(cx, d, name, new))
    }

    fn access(&self, cx: &Cred, fh: &Fh, want: u32) -> NfsResult<(Fattr3, u32)> {
        let o = self.obj(cx, fh)?;
        Ok((sys::fattr(&o.st), self.granted(&o, want)))
    }

    fn fallocate(&self, cx: &Cred, fh: &Fh, offset: u64, len: u64, punch: bool) -> NfsResult<()> {
        self.fallocate_as(cx, fh, offset, len, punch)
    }

    fn seek(&self, cx: &Cred, fh: &Fh, offset: u64, hole: bool) -> NfsResult<(u64, bool)> {
        self.seek_as(cx, fh, offset, hole)
    }

    fn copy(&self, cx: &Cred, src: (&Fh, u64), dst: (&Fh, u64), count: u64) -> NfsResult<u64> {
        self.copy_as(cx, src, dst, count)
    }

    fn clone_range(
        &self,
        cx: &Cred,
        src: (&Fh, u64),
        dst: (&Fh, u64),
        count: u64,
    ) -> NfsResult<()> {
        self.clone_as(cx, src, dst, count)
    }

    fn getacl(&self, _cx: &Cred, fh: &Fh) -> NfsResult<(Fattr3, Acls)> {
        self.acls_of(fh)
    }

    fn setacl(
        &self,
        cx: &Cred,
        fh: &Fh,
        access: Option<&Acl>,
        default: Option<&Acl>,
    ) -> NfsResult<()> {
        self.set_acls(cx, fh, access, default)
    }

    fn xattr_support(&self) -> bool {
        self.xattrs
    }

    fn getxattr(&self, cx: &Cred, fh: &Fh, name: &[u8], out: &mut [u8]) -> NfsResult<usize> {
        self.get_xattr(cx, fh, name, out)
    }

    fn setxattr_wcc(&self, cx: &Cred, fh: &Fh, name: &[u8], v: &[u8], how: XattrSet) -> Wcc<()> {
        self.change_xattr(cx, fh, name, Some((v, how)))
    }

    fn listxattrs(&self, cx: &Cred, fh: &Fh, each: &mut dyn FnMut(&[u8])) -> NfsResult<()> {
        self.list_xattrs(cx, fh, each)
    }

    fn removexattr_wcc(&self, cx: &Cred, fh: &Fh, name: &[u8]) -> Wcc<()> {
        self.change_xattr(cx, fh, name, None)
    }

    fn remove(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let _held = self.serial.one(dir);
        let d = self.dir_obj(cx, dir)?;
        self.unlink_in(&d, name, false)
    }

    fn rmdir(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let _held = self.serial.one(dir);
        let d = self.dir_obj(cx, dir)?;
        self.unlink_in(&d, name, true)
    }

    fn remove_wcc(&self, cx: &Cred, dir: &Fh, name: &[u8], rmdir: bool) -> Wcc<()> {
        self.changing_dir(cx, dir, |d| self.unlink_in(d, name, rmdir))
    }

    fn rename(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()> {
        let _held = self.serial.two(from_dir, to_dir);
        let f = self.dir_obj(cx, from_dir)?;
        let t = self.dir_obj(cx, to_dir)?;
        self.rename_in(&f, from_name, &t, to_name)
    }

    fn rename_wcc(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> (NfsResult<()>, WccData, WccData) {
        self.rename_wcc_as(cx, (from_dir, from_name), (to_dir, to_name))
    }

    fn link(&self, cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let _held = self.serial.one(dir);
        let o = self.stat_obj(fh)?;
        self.link_objs(cx, &o, &self.stat_obj(dir), name)
    }

    fn link_wcc(
        &self,
        cx: &Cred,
        fh: &Fh,
        dir: &Fh,
        name: &[u8],
    ) -> (NfsResult<()>, Option<Fattr3>, WccData) {
        self.link_wcc_as(cx, fh, dir, name)
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
        let d = self.dir_obj(cx, dir)?;
        if cookie != 0 && verf != [0; 8] {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        let eof = self.list(dir, &d, cookie, plus, emit)?;
        Ok(DirListing { verf: [0; 8], eof })
    }

    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        sys::fsstat(self.stat_obj(fh)?.raw())
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.verf
    }

    fn max_file_size(&self) -> u64 {
        self.max_size
    }

    fn host_object(&self, fh: &Fh) -> Option<NfsResult<super::HostObject>> {
        Some(self.host_obj(fh))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.cache().stats();
        vec![
            ("dir.fd_cache.hits", c.hits),
            ("dir.fd_cache.misses", c.misses),
            ("dir.fd_cache.evictions", c.evictions),
            ("dir.fd_cache.held", c.held),
            ("dir.fd_cache.capacity", c.capacity),
        ]
    }
}
