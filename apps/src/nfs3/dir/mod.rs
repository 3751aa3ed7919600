//! The directory store ([`DirStore`]): serves a real directory of the server's file system,
//! what `rpcrdma-nfsd dir:PATH` runs. Handlers run in worker threads, so every method simply
//! makes blocking system calls.
//!
//! Normal operation: objects are named by kernel file handles (`name_to_handle_at`, opened
//! again with `open_by_handle_at` relative to the export root; needs CAP_DAC_READ_SEARCH,
//! i.e. root), wrapped as described in [`handle`]; a bounded cache keeps recently used
//! descriptors open (regular files read-write, everything else `O_PATH`). Names are resolved
//! only with `*at()` calls relative to the directory's descriptor and symbolic links are
//! never followed; `..` of the export root is the root, so a client cannot walk out of the
//! export by name. Data moves with `pread`/`pwrite`; DATA_SYNC and FILE_SYNC writes and
//! COMMIT call `fdatasync`/`fsync`. Attributes are `fstat`'s; READDIR cookies are the file
//! system's own `d_off` (see [`readdir`]) with a zero cookie verifier, as Linux nfsd answers.
//!
//! Recovery: handles outlive the server (they are the kernel's); the write verifier is random
//! per [`DirStore::open`], so clients resend uncommitted data after a restart. A handle of a
//! removed object is STALE (the kernel says ESTALE, or the cached descriptor shows no links),
//! one from another export STALE, garbage BADHANDLE; one on another mount STALE. As with
//! Linux nfsd's `no_subtree_check`, a well-formed handle of an object elsewhere on the same
//! file system is not refused.

mod handle;
mod readdir;
mod sys;

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::{DirListing, Special, Store};
use super::identity::Cred;
use super::types::{
    is_dot_entry, CreateHow, DirEntry, Fattr3, Fh, FsStat, NfsResult, Nfsstat3, Sattr3, SetTime,
    StableHow, Time3, PATH_MAX,
};
use handle::{FdCache, MAX_KERNEL};
use sys::{check, cname, ifmt, nfs_err, openat, proc_path, KernelHandle};

/// An open object: its descriptor and what `fstat` said just now.
struct Obj {
    fd: Arc<OwnedFd>,
    st: libc::stat,
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
    verf: [u8; 8],
}

/// An `io::Error` saying what `open` refuses.
fn refuse(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("cannot export {}: {why}", path.display()),
    )
}

/// A `timespec` for `utimensat`.
fn timespec(t: SetTime) -> libc::timespec {
    match t {
        SetTime::DontChange => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        SetTime::ServerTime => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        SetTime::ClientTime(t) => libc::timespec {
            tv_sec: libc::time_t::from(t.seconds),
            tv_nsec: libc::c_long::from(t.nseconds.min(999_999_999)),
        },
    }
}

/// The two 31-bit halves of an exclusive-create verifier (stored as mtime, atime seconds).
fn verf_times(v: &[u8; 8]) -> (u32, u32) {
    let m = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff;
    let a = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff;
    (m, a)
}

impl DirStore {
    /// Exports directory `path`. Fails when it is not a directory, when its file system has
    /// no file handles (or handles longer than fit in an NFSv3 handle with our header), or
    /// when the process may not open handles (CAP_DAC_READ_SEARCH).
    pub fn open(path: &Path) -> io::Result<DirStore> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| refuse(path, "path holds a NUL"))?;
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
        let tag = handle::export_tag(&kh);
        let root_fh = handle::encode(tag, &kh).ok_or_else(|| refuse(path, "handle too long"))?;
        Ok(DirStore {
            root_fd,
            root_dev: st.st_dev,
            root_ino: st.st_ino,
            root_mnt: mnt,
            root_fh,
            tag,
            cache: Mutex::new(FdCache::default()),
            verf: super::memory::random8(),
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

    /// A descriptor for `fh`, from the cache or opened now.
    fn open_fh(&self, fh: &Fh) -> NfsResult<Arc<OwnedFd>> {
        let kh = handle::decode(self.tag, fh)?;
        if let Some(fd) = self.cache().get(fh) {
            return Ok(fd);
        }
        let map = |e: io::Error| match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EOVERFLOW) => Nfsstat3::BADHANDLE,
            Some(libc::ESTALE) | Some(libc::ENOENT) | None => Nfsstat3::STALE,
            Some(x) => Nfsstat3::from_errno(x),
        };
        let mut fd = kh.open(&self.root_fd, libc::O_PATH).map_err(map)?;
        if ifmt(&sys::fstat(fd.as_raw_fd())?) == libc::S_IFREG {
            let flags = libc::O_RDWR | libc::O_NOFOLLOW;
            if let Ok(rw) = kh
                .open(&self.root_fd, flags)
                .or_else(|_| kh.open(&self.root_fd, libc::O_RDONLY))
            {
                fd = rw;
            }
        }
        let fd = Arc::new(fd);
        self.cache().insert(*fh, fd.clone());
        Ok(fd)
    }

    /// The live object `fh` names.
    fn obj(&self, fh: &Fh) -> NfsResult<Obj> {
        let fd = self.open_fh(fh)?;
        let st = sys::fstat(fd.as_raw_fd())?;
        if st.st_nlink == 0 || st.st_dev != self.root_dev {
            self.cache().forget(fh);
            return Err(Nfsstat3::STALE);
        }
        Ok(Obj { fd, st })
    }

    /// The live directory `fh` names (NOTDIR otherwise).
    fn dir_obj(&self, fh: &Fh) -> NfsResult<Obj> {
        let o = self.obj(fh)?;
        if o.kind() != libc::S_IFDIR {
            return Err(Nfsstat3::NOTDIR);
        }
        Ok(o)
    }

    /// The handle of what `name` in `dirfd` is now, if anything: taken before removing it so
    /// its cached descriptor can be dropped after (freeing its space).
    fn handle_before_removal(&self, dirfd: RawFd, name: &CStr) -> Option<Fh> {
        self.fh_at(dirfd, name).ok()
    }

    /// Applies `set` to `o` (size, then mode and owner, then times).
    fn apply(&self, o: &Obj, set: &Sattr3) -> NfsResult<()> {
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
        let path = proc_path(o.raw());
        if let Some(len) = size {
            // SAFETY: plain syscalls; `path` is NUL-terminated.
            if unsafe { libc::ftruncate(o.raw(), len) } < 0 {
                check(unsafe { libc::truncate(path.as_ptr(), len) })?;
            }
        }
        if let (Some(mode), false) = (set.mode, kind == libc::S_IFLNK) {
            // SAFETY: `path` is NUL-terminated.
            check(unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode & 0o7777, 0) })?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
            let (u, g) = (set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX));
            // SAFETY: empty NUL-terminated path with AT_EMPTY_PATH.
            check(unsafe { libc::fchownat(o.raw(), c"".as_ptr(), u, g, flags) })?;
        }
        if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
            let ts = [timespec(set.atime), timespec(set.mtime)];
            // SAFETY: `ts` holds two timespecs; `path` is NUL-terminated. The /proc link
            // reaches the object itself, a symbolic link included.
            check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), ts.as_ptr(), 0) })?;
        }
        Ok(())
    }

    /// Wraps a descriptor just created by us as an [`Obj`], applies `set` and adopts it.
    fn finish_new(&self, fd: OwnedFd, set: &Sattr3) -> NfsResult<Fh> {
        let st = sys::fstat(fd.as_raw_fd())?;
        let o = Obj {
            fd: Arc::new(fd),
            st,
        };
        self.apply(&o, set)?;
        let fh = self.fh_of_fd(o.raw())?;
        self.cache().insert(fh, o.fd);
        Ok(fh)
    }

    /// An EXCLUSIVE create found `name`: the same file when it carries verifier `v`.
    fn exclusive_again(&self, dirfd: RawFd, name: &CStr, v: &[u8; 8]) -> NfsResult<Fh> {
        let st = sys::lstatat(dirfd, name)?;
        let (m, a) = verf_times(v);
        let same = ifmt(&st) == libc::S_IFREG
            && st.st_mtime == i64::from(m)
            && st.st_atime == i64::from(a)
            && st.st_size == 0;
        if !same {
            return Err(Nfsstat3::EXIST);
        }
        self.fh_at(dirfd, name)
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
        Ok(sys::fattr(&self.obj(fh)?.st))
    }

    fn setattr(&self, _cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()> {
        let o = self.obj(fh)?;
        if guard.is_some_and(|g| g != sys::ctime(&o.st)) {
            return Err(Nfsstat3::NOT_SYNC);
        }
        self.apply(&o, set)
    }

    fn lookup(&self, _cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        match name {
            b"." => Ok(*dir),
            b".." if self.is_root(&d.st) => Ok(self.root_fh),
            _ => self.fh_at(d.raw(), &c),
        }
    }

    fn readlink(&self, _cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize> {
        let o = self.obj(fh)?;
        if o.kind() != libc::S_IFLNK {
            return Err(Nfsstat3::INVAL);
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

    fn read(&self, _cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)> {
        let o = self.obj(fh)?;
        match o.kind() {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(Nfsstat3::ISDIR),
            _ => return Err(Nfsstat3::INVAL),
        }
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
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        let eof = done < out.len() || offset.saturating_add(done as u64) >= size;
        Ok((done, eof))
    }

    fn write(
        &self,
        _cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow> {
        let o = self.obj(fh)?;
        match o.kind() {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(Nfsstat3::ISDIR),
            _ => return Err(Nfsstat3::INVAL),
        }
        let end = offset.checked_add(data.len() as u64);
        if !end.is_some_and(|e| e <= self.max_file_size()) {
            return Err(Nfsstat3::FBIG);
        }
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            let at = (offset + done as u64) as i64;
            // SAFETY: `rest` is readable for `rest.len()` octets.
            let n = unsafe { libc::pwrite(o.raw(), rest.as_ptr().cast(), rest.len(), at) };
            if n < 0 {
                match sys::errno() {
                    libc::EINTR => continue,
                    libc::EBADF => return Err(Nfsstat3::ACCES),
                    e => return Err(Nfsstat3::from_errno(e)),
                }
            }
            done += n as usize;
        }
        // SAFETY: plain syscalls on an open descriptor.
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => check(unsafe { libc::fdatasync(o.raw()) }).map(drop)?,
            StableHow::FileSync => check(unsafe { libc::fsync(o.raw()) }).map(drop)?,
        }
        Ok(stable)
    }

    fn commit(&self, _cx: &Cred, fh: &Fh) -> NfsResult<()> {
        let o = self.obj(fh)?;
        match o.kind() {
            // SAFETY: plain syscall on an open descriptor.
            libc::S_IFREG => check(unsafe { libc::fsync(o.raw()) }).map(drop),
            libc::S_IFDIR => Err(Nfsstat3::ISDIR),
            _ => Err(Nfsstat3::INVAL),
        }
    }

    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh> {
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        let (excl, attr) = match how {
            CreateHow::Unchecked(a) => (0, *a),
            CreateHow::Guarded(a) => (libc::O_EXCL, *a),
            CreateHow::Exclusive(v) => {
                let (m, a) = verf_times(v);
                let t = |s| {
                    SetTime::ClientTime(Time3 {
                        seconds: s,
                        nseconds: 0,
                    })
                };
                let set = Sattr3 {
                    atime: t(a),
                    mtime: t(m),
                    ..Sattr3::default()
                };
                (libc::O_EXCL, set)
            }
        };
        let existed = match sys::lstatat(d.raw(), &c) {
            Ok(st) if ifmt(&st) != libc::S_IFREG || excl != 0 => {
                if let CreateHow::Exclusive(v) = how {
                    return self.exclusive_again(d.raw(), &c, v);
                }
                return Err(Nfsstat3::EXIST);
            }
            Ok(_) => true,
            Err(Nfsstat3::NOENT) => false,
            Err(e) => return Err(e),
        };
        let mode = attr.mode.unwrap_or(0o644) & 0o7777;
        let flags = libc::O_CREAT | excl | libc::O_RDWR | libc::O_NOFOLLOW;
        let fd = match openat(d.raw(), &c, flags, mode) {
            Ok(fd) => fd,
            Err(Nfsstat3::EXIST) => match how {
                CreateHow::Exclusive(v) => return self.exclusive_again(d.raw(), &c, v),
                _ => return Err(Nfsstat3::EXIST),
            },
            Err(Nfsstat3::ISDIR) => return Err(Nfsstat3::EXIST),
            Err(e) => return Err(e),
        };
        let set = if existed {
            attr
        } else {
            Sattr3 {
                mode: Some(mode),
                uid: attr.uid.or(Some(cx.uid)),
                gid: attr.gid.or(Some(cx.gid)),
                ..attr
            }
        };
        self.finish_new(fd, &set)
    }

    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh> {
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        let mode = attr.mode.unwrap_or(0o755) & 0o7777;
        // SAFETY: `c` is NUL-terminated.
        check(unsafe { libc::mkdirat(d.raw(), c.as_ptr(), mode) })?;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let fd = openat(d.raw(), &c, flags, 0)?;
        let set = Sattr3 {
            mode: Some(mode),
            size: None,
            uid: attr.uid.or(Some(cx.uid)),
            gid: attr.gid.or(Some(cx.gid)),
            ..*attr
        };
        self.finish_new(fd, &set)
    }

    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        let d = self.dir_obj(dir)?;
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
        let set = Sattr3 {
            mode: None,
            size: None,
            uid: attr.uid.or(Some(cx.uid)),
            gid: attr.gid.or(Some(cx.gid)),
            ..*attr
        };
        self.finish_new(fd, &set)
    }

    fn mknod(
        &self,
        _cx: &Cred,
        _dir: &Fh,
        _name: &[u8],
        _node: Special,
        _attr: &Sattr3,
    ) -> NfsResult<Fh> {
        Err(Nfsstat3::NOTSUPP)
    }

    fn remove(&self, _cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::ACCES);
        }
        let gone = self.handle_before_removal(d.raw(), &c);
        // SAFETY: `c` is NUL-terminated.
        check(unsafe { libc::unlinkat(d.raw(), c.as_ptr(), 0) })?;
        if let Some(fh) = gone {
            self.cache().forget(&fh);
        }
        Ok(())
    }

    fn rmdir(&self, _cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        match name {
            b"." => return Err(Nfsstat3::INVAL),
            b".." => return Err(Nfsstat3::NOTEMPTY),
            _ => {}
        }
        let gone = self.handle_before_removal(d.raw(), &c);
        // SAFETY: `c` is NUL-terminated.
        check(unsafe { libc::unlinkat(d.raw(), c.as_ptr(), libc::AT_REMOVEDIR) })?;
        if let Some(fh) = gone {
            self.cache().forget(&fh);
        }
        Ok(())
    }

    fn rename(
        &self,
        _cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()> {
        let f = self.dir_obj(from_dir)?;
        let t = self.dir_obj(to_dir)?;
        let (cf, ct) = (cname(from_name)?, cname(to_name)?);
        if is_dot_entry(from_name) || is_dot_entry(to_name) {
            return Err(Nfsstat3::INVAL);
        }
        let gone = self.handle_before_removal(t.raw(), &ct);
        // SAFETY: both names are NUL-terminated.
        check(unsafe { libc::renameat(f.raw(), cf.as_ptr(), t.raw(), ct.as_ptr()) })?;
        if let Some(fh) = gone {
            self.cache().forget(&fh);
        }
        Ok(())
    }

    fn link(&self, _cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        let o = self.obj(fh)?;
        if o.kind() == libc::S_IFDIR {
            return Err(Nfsstat3::ISDIR);
        }
        let d = self.dir_obj(dir)?;
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        // SAFETY: NUL-terminated names; AT_EMPTY_PATH links the object `o` refers to.
        let r = unsafe {
            libc::linkat(
                o.raw(),
                c"".as_ptr(),
                d.raw(),
                c.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if r < 0 && sys::errno() == libc::ENOENT {
            let p = proc_path(o.raw());
            let follow = libc::AT_SYMLINK_FOLLOW;
            // SAFETY: NUL-terminated names.
            check(unsafe {
                libc::linkat(libc::AT_FDCWD, p.as_ptr(), d.raw(), c.as_ptr(), follow)
            })?;
            return Ok(());
        }
        check(r).map(drop)
    }

    fn readdir(
        &self,
        _cx: &Cred,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<DirListing> {
        let d = self.dir_obj(dir)?;
        if cookie != 0 && verf != [0; 8] {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        let eof = self.list(d.raw(), &d.st, cookie, plus, emit)?;
        Ok(DirListing { verf: [0; 8], eof })
    }

    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        let o = self.obj(fh)?;
        // SAFETY: an all-zero statvfs is valid; the kernel fills it.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `s` is writable.
        check(unsafe { libc::fstatvfs(o.raw(), &mut s) })?;
        let frsize = s.f_frsize;
        Ok(FsStat {
            tbytes: s.f_blocks.saturating_mul(frsize),
            fbytes: s.f_bfree.saturating_mul(frsize),
            abytes: s.f_bavail.saturating_mul(frsize),
            tfiles: s.f_files,
            ffiles: s.f_ffree,
            afiles: s.f_favail,
        })
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.verf
    }
}
