//! Thin safe wrappers over the libc calls the directory store makes: errno mapping, names as
//! C strings, `fstat`/`fstatat` into [`Fattr3`], `/proc/self/fd` paths, kernel file handles
//! (`name_to_handle_at` / `open_by_handle_at`), attribute changes, extended attributes.
//!
//! Normal operation: every wrapper returns the call's result or the errno as an
//! [`Nfsstat3`] (through [`Nfsstat3::from_errno`]) or an [`io::Error`]. Recovery: EINTR is
//! retried where a call can see it; nothing here keeps state.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::nfs::types::{
    check_name_len, name_is_wellformed, Fattr3, FsStat, Ftype3, NfsResult, Nfsstat3, Sattr3,
    SetTime, Time3, NAME_MAX,
};

/// Largest kernel handle (`MAX_HANDLE_SZ`).
pub(super) const MAX_HANDLE_SZ: usize = 128;

/// The last OS error number.
pub(super) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The last OS error as an NFS status.
pub(super) fn nfs_err() -> Nfsstat3 {
    Nfsstat3::from_errno(errno())
}

/// `r` unless it is negative (then the errno as an NFS status).
pub(super) fn check(r: libc::c_int) -> NfsResult<libc::c_int> {
    if r < 0 {
        Err(nfs_err())
    } else {
        Ok(r)
    }
}

/// A name as the kernel takes it, NUL-terminated, on the stack (no allocation per call).
pub(super) struct CName {
    buf: [u8; NAME_MAX + 1],
    len: usize,
}

impl std::ops::Deref for CName {
    type Target = CStr;

    fn deref(&self) -> &CStr {
        // `cname` wrote `len` octets without NUL, then a NUL.
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or_default()
    }
}

/// A name from the wire as a C string: INVAL when malformed, NAMETOOLONG when too long.
pub(super) fn cname(name: &[u8]) -> NfsResult<CName> {
    if !name_is_wellformed(name) {
        return Err(Nfsstat3::INVAL);
    }
    check_name_len(name)?;
    let mut c = CName {
        buf: [0; NAME_MAX + 1],
        len: name.len(),
    };
    c.buf[..name.len()].copy_from_slice(name);
    Ok(c)
}

/// `/proc/self/fd/N`, NUL-terminated on the stack (no allocation per call): a path that
/// reaches the object `fd` refers to (also an `O_PATH` one).
pub(super) struct ProcPath {
    buf: [u8; 32],
}

impl core::ops::Deref for ProcPath {
    type Target = CStr;

    fn deref(&self) -> &CStr {
        // The buffer always holds a NUL ([`proc_path`] writes one); an empty name otherwise.
        CStr::from_bytes_until_nul(&self.buf).unwrap_or_default()
    }
}

/// [`ProcPath`] of `fd`.
pub(super) fn proc_path(fd: RawFd) -> ProcPath {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut p = ProcPath { buf: [0; 32] };
    p.buf[..PREFIX.len()].copy_from_slice(PREFIX);
    // The decimal digits of a non-negative descriptor (at most 10), then the NUL already there.
    let mut digits = [0u8; 10];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..len].iter().rev().enumerate() {
        p.buf[PREFIX.len() + i] = *d;
    }
    p
}

/// `fd` as an [`OwnedFd`] when non-negative, else the errno as an NFS status.
pub(super) fn owned(fd: RawFd) -> NfsResult<OwnedFd> {
    if fd < 0 {
        return Err(nfs_err());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dirfd, name, flags | O_CLOEXEC, mode)`.
pub(super) fn openat(dirfd: RawFd, name: &CStr, flags: i32, mode: u32) -> NfsResult<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string.
    owned(unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// `fstat(fd)`, the system call itself: the C library's `fstat` asks `newfstatat(fd, "",
/// AT_EMPTY_PATH)`, which takes the path walk's way (the empty name copied in and looked up);
/// `fstat` reads the descriptor's inode directly, an `O_PATH` descriptor's too.
pub(super) fn fstat(fd: RawFd) -> NfsResult<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value; the kernel fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `stat`.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    check(r.clamp(-1, 0) as i32)?;
    Ok(st)
}

/// FSSTAT of the file system holding `fd` (`fstatvfs`).
pub(super) fn fsstat(fd: RawFd) -> NfsResult<FsStat> {
    // SAFETY: an all-zero statvfs is valid; the kernel fills it.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable.
    check(unsafe { libc::fstatvfs(fd, &mut s) })?;
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

/// Whether the file open for I/O as `fd` is immutable (`FS_IOC_GETFLAGS`, a question to the
/// descriptor alone); `None` when the file system does not say (or `fd` is `O_PATH`).
pub(super) fn immutable(fd: RawFd) -> Option<bool> {
    const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    let mut flags: libc::c_long = 0;
    // SAFETY: the ioctl writes one long into `flags`.
    let r = unsafe { libc::ioctl(fd, FS_IOC_GETFLAGS, &mut flags as *mut libc::c_long) };
    (r == 0).then_some(flags & FS_IMMUTABLE_FL != 0)
}

/// `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)`.
pub(super) fn lstatat(dirfd: RawFd, name: &CStr) -> NfsResult<libc::stat> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid string and `stat`.
    check(unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// The file type bits of `st`.
pub(super) fn ifmt(st: &libc::stat) -> u32 {
    st.st_mode & libc::S_IFMT
}

/// A time stamp from a `stat`'s seconds and nanoseconds.
pub(super) fn time3(sec: i64, nsec: i64) -> Time3 {
    Time3 {
        seconds: sec,
        nseconds: nsec.clamp(0, 999_999_999) as u32,
    }
}

/// The ctime of `st`.
pub(super) fn ctime(st: &libc::stat) -> Time3 {
    time3(st.st_ctime, st.st_ctime_nsec)
}

/// NFSv3 attributes from a `stat`.
pub(super) fn fattr(st: &libc::stat) -> Fattr3 {
    let ftype = match ifmt(st) {
        libc::S_IFDIR => Ftype3::Dir,
        libc::S_IFLNK => Ftype3::Lnk,
        libc::S_IFBLK => Ftype3::Blk,
        libc::S_IFCHR => Ftype3::Chr,
        libc::S_IFSOCK => Ftype3::Sock,
        libc::S_IFIFO => Ftype3::Fifo,
        _ => Ftype3::Reg,
    };
    Fattr3 {
        ftype,
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink.min(u64::from(u32::MAX)) as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size.max(0) as u64,
        used: (st.st_blocks.max(0) as u64).saturating_mul(512),
        rdev: (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
        fsid: st.st_dev,
        fileid: st.st_ino,
        atime: time3(st.st_atime, st.st_atime_nsec),
        mtime: time3(st.st_mtime, st.st_mtime_nsec),
        ctime: ctime(st),
    }
}

/// A kernel file handle (`struct file_handle` with room for the largest one).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct KernelHandle {
    handle_bytes: u32,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

impl KernelHandle {
    /// A handle of `htype` holding `bytes`; `None` when longer than [`MAX_HANDLE_SZ`].
    pub(super) fn new(htype: i32, bytes: &[u8]) -> Option<KernelHandle> {
        let mut h = KernelHandle {
            handle_bytes: bytes.len() as u32,
            handle_type: htype,
            f_handle: [0; MAX_HANDLE_SZ],
        };
        h.f_handle.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(h)
    }

    /// The handle type.
    pub(super) fn htype(&self) -> i32 {
        self.handle_type
    }

    /// The handle octets.
    pub(super) fn bytes(&self) -> &[u8] {
        let n = (self.handle_bytes as usize).min(MAX_HANDLE_SZ);
        &self.f_handle[..n]
    }

    /// `name_to_handle_at(dirfd, name, flags)` (symbolic links are not followed): the
    /// handle and the mount id.
    pub(super) fn of(dirfd: RawFd, name: &CStr, flags: i32) -> io::Result<(KernelHandle, i32)> {
        let mut h = KernelHandle {
            handle_bytes: MAX_HANDLE_SZ as u32,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE_SZ],
        };
        let mut mnt = 0;
        // SAFETY: `h` is a `struct file_handle` followed by MAX_HANDLE_SZ octets, as
        // `handle_bytes` says; `name` is NUL-terminated; `mnt` is writable.
        let r = unsafe {
            libc::name_to_handle_at(
                dirfd,
                name.as_ptr(),
                (&mut h as *mut KernelHandle).cast(),
                &mut mnt,
                flags,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((h, mnt))
    }

    /// `open_by_handle_at(mount_fd, self, flags | O_CLOEXEC)`.
    pub(super) fn open(&self, mount_fd: &OwnedFd, flags: i32) -> io::Result<OwnedFd> {
        let mut h = *self;
        // SAFETY: `h` is a valid `struct file_handle` (handle_bytes ≤ MAX_HANDLE_SZ).
        let fd = unsafe {
            libc::open_by_handle_at(
                mount_fd.as_raw_fd(),
                (&mut h as *mut KernelHandle).cast(),
                flags | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Changes the mode of the object `fd` refers to (a symbolic link's mode is never asked):
/// `fchmod` of a descriptor open for I/O (`io`), else through its /proc link (an `O_PATH`
/// descriptor: `fchmod` refuses it, and `fchmodat2` with `AT_EMPTY_PATH` is Linux 6.6's).
/// The kernel checks the change for the thread's identity either way.
pub(super) fn chmod(fd: RawFd, io: bool, mode: u32) -> NfsResult<()> {
    if io {
        // SAFETY: plain system call on an open descriptor.
        return check(unsafe { libc::fchmod(fd, mode) }).map(drop);
    }
    let path = proc_path(fd);
    // SAFETY: `path` is NUL-terminated; the /proc link reaches the object itself.
    check(unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode, 0) }).map(drop)
}

/// A successful extended attribute call's count, else the errno.
fn xattr_count(n: isize) -> Result<usize, i32> {
    usize::try_from(n).map_err(|_| errno())
}

/// `getxattr` of `name` on the object `fd` refers to into `out`: `fgetxattr` of a descriptor
/// open for I/O (`io`), else through its /proc link (`fgetxattr` refuses an `O_PATH`
/// descriptor). The link is followed: never ask it of a symbolic link. The value's length
/// (with an empty `out`, the length it has), or the errno; the kernel checks the thread's
/// identity.
pub(super) fn getxattr(fd: RawFd, io: bool, name: &CStr, out: &mut [u8]) -> Result<usize, i32> {
    let (to, len) = (out.as_mut_ptr().cast(), out.len());
    if io {
        // SAFETY: NUL-terminated name; `out` is writable for its length.
        return xattr_count(unsafe { libc::fgetxattr(fd, name.as_ptr(), to, len) });
    }
    let path = proc_path(fd);
    // SAFETY: NUL-terminated path and name; `out` is writable for its length.
    xattr_count(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), to, len) })
}

/// `setxattr` of `name` to `value` with `flags` (`XATTR_CREATE`, `XATTR_REPLACE`) on the
/// object `fd` refers to, as [`getxattr`] reaches it; the errno when it fails.
pub(super) fn setxattr(
    fd: RawFd,
    io: bool,
    name: &CStr,
    value: &[u8],
    flags: i32,
) -> Result<(), i32> {
    let (v, len) = (value.as_ptr().cast(), value.len());
    let r = if io {
        // SAFETY: NUL-terminated name; `value` is readable for its length.
        unsafe { libc::fsetxattr(fd, name.as_ptr(), v, len, flags) }
    } else {
        let path = proc_path(fd);
        // SAFETY: NUL-terminated path and name; `value` is readable for its length.
        unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), v, len, flags) }
    };
    xattr_count(r as isize).map(drop)
}

/// `removexattr` of `name` on the object `fd` refers to, as [`getxattr`] reaches it; the
/// errno when it fails.
pub(super) fn removexattr(fd: RawFd, io: bool, name: &CStr) -> Result<(), i32> {
    let r = if io {
        // SAFETY: NUL-terminated name; plain system call on an open descriptor.
        unsafe { libc::fremovexattr(fd, name.as_ptr()) }
    } else {
        let path = proc_path(fd);
        // SAFETY: NUL-terminated path and name.
        unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }
    };
    xattr_count(r as isize).map(drop)
}

/// `listxattr` of the object `fd` refers to into `out` (every attribute's full name and a
/// NUL), as [`getxattr`] reaches it: the listing's length, or the errno (ERANGE when it is
/// longer than `out`).
pub(super) fn listxattr(fd: RawFd, io: bool, out: &mut [u8]) -> Result<usize, i32> {
    let (to, len) = (out.as_mut_ptr().cast(), out.len());
    if io {
        // SAFETY: `out` is writable for its length; plain system call on an open descriptor.
        return xattr_count(unsafe { libc::flistxattr(fd, to, len) });
    }
    let path = proc_path(fd);
    // SAFETY: NUL-terminated path; `out` is writable for its length.
    xattr_count(unsafe { libc::listxattr(path.as_ptr(), to, len) })
}

/// Whether `utimensat` took `AT_EMPTY_PATH` here (Linux 5.8 and later); cleared on its first
/// EINVAL, after which the /proc link serves.
static UTIMES_EMPTY_PATH: AtomicBool = AtomicBool::new(true);

/// Sets the times of the object `fd` refers to, a symbolic link included: `futimens` of a
/// descriptor open for I/O (`io`), else `utimensat` of the descriptor itself
/// (`AT_EMPTY_PATH`), or through its /proc link where the kernel lacks that. The kernel checks
/// the change for the thread's identity either way.
pub(super) fn utimes(fd: RawFd, io: bool, ts: &[libc::timespec; 2]) -> NfsResult<()> {
    if io {
        // SAFETY: `ts` holds two timespecs; plain system call on an open descriptor.
        return check(unsafe { libc::futimens(fd, ts.as_ptr()) }).map(drop);
    }
    if UTIMES_EMPTY_PATH.load(Ordering::Relaxed) {
        let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
        // SAFETY: empty NUL-terminated path with AT_EMPTY_PATH; `ts` holds two timespecs.
        let r = check(unsafe { libc::utimensat(fd, c"".as_ptr(), ts.as_ptr(), flags) });
        if r != Err(Nfsstat3::INVAL) {
            return r.map(drop);
        }
        UTIMES_EMPTY_PATH.store(false, Ordering::Relaxed);
    }
    let path = proc_path(fd);
    // SAFETY: `ts` holds two timespecs; `path` is NUL-terminated. The /proc link reaches the
    // object itself, a symbolic link included.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), ts.as_ptr(), 0) }).map(drop)
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

/// What SETATTR changes after the size: mode (not a symbolic link's) and owner, then times,
/// of the object of type `kind` open as `fd` (`io`: open for I/O, else `O_PATH`). The kernel
/// checks each change for the thread's identity.
pub(super) fn set_attrs(fd: RawFd, io: bool, kind: u32, set: &Sattr3) -> NfsResult<()> {
    if let (Some(mode), false) = (set.mode, kind == libc::S_IFLNK) {
        chmod(fd, io, mode & 0o7777)?;
    }
    if set.uid.is_some() || set.gid.is_some() {
        let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
        let (u, g) = (set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX));
        // SAFETY: plain system calls; an empty NUL-terminated path with AT_EMPTY_PATH.
        check(unsafe {
            match io {
                true => libc::fchown(fd, u, g),
                false => libc::fchownat(fd, c"".as_ptr(), u, g, flags),
            }
        })?;
    }
    if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
        utimes(fd, io, &[timespec(set.atime), timespec(set.mtime)])?;
    }
    Ok(())
}

/// `faccessat2(fd, "", mode, AT_EACCESS | AT_EMPTY_PATH)`: whether the calling thread's
/// fs identity holds `mode` (`R_OK`, `W_OK`, `X_OK`) on the object `fd` refers to, by the
/// kernel's own permission check (mode bits, ACLs, read-only mounts, immutable files).
pub(super) fn may(fd: RawFd, mode: i32) -> NfsResult<()> {
    let flags = libc::AT_EACCESS | libc::AT_EMPTY_PATH;
    // SAFETY: empty NUL-terminated path; the call only reads its arguments.
    let r = unsafe { libc::syscall(libc::SYS_faccessat2, fd, c"".as_ptr(), mode, flags) };
    check(r.clamp(-1, 0) as i32).map(drop)
}

/// ext2 / ext3 / ext4 (`EXT4_SUPER_MAGIC`, shared by all three).
const EXT4_SUPER_MAGIC: i64 = 0xef53;
/// FAT (`MSDOS_SUPER_MAGIC`).
const MSDOS_SUPER_MAGIC: i64 = 0x4d44;

/// tmpfs (`TMPFS_MAGIC`).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// ramfs (`RAMFS_MAGIC`).
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Whether the file system holding `fd` keeps everything in memory (tmpfs, ramfs): its
/// `fsync` and `fdatasync` wait for no device.
pub(super) fn in_memory(fd: RawFd) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is valid; the kernel fills it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable.
    if unsafe { libc::fstatfs(fd, &mut s) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(matches!(s.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC))
}

/// XFS (`XFS_SUPER_MAGIC`).
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
/// Btrfs (`BTRFS_SUPER_MAGIC`).
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;

/// Whether the file system holding `fd` decides who may execute a regular file by the kernel's
/// `generic_permission` alone (tmpfs, ramfs, ext2/3/4 and XFS have no permission method of
/// their own; Btrfs's only refuses writes more): there nobody, root included, may execute a
/// regular file whose mode has no execute bit (a POSIX ACL grants no more than the mode's group
/// bits, its mask), so that refusal needs no question to the kernel.
pub(super) fn exec_by_mode(fd: RawFd) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is valid; the kernel fills it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable.
    if unsafe { libc::fstatfs(fd, &mut s) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(matches!(
        s.f_type as i64,
        TMPFS_MAGIC | RAMFS_MAGIC | EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC
    ))
}

/// Largest file the file system holding `fd` stores: ext4 (extent-mapped files) holds 2^32 − 1
/// blocks (`ext4_max_size`: 16 TiB − 4 KiB with 4 KiB blocks), FAT 4 GiB − 1; others (tmpfs,
/// XFS, Btrfs, ...) the kernel's `MAX_LFS_FILESIZE`, 2^63 − 1.
pub(super) fn max_file_size(fd: RawFd) -> io::Result<u64> {
    // SAFETY: an all-zero statfs is valid; the kernel fills it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable.
    if unsafe { libc::fstatfs(fd, &mut s) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let bsize = (s.f_bsize as u64).clamp(512, 1 << 16);
    Ok(match s.f_type as i64 {
        EXT4_SUPER_MAGIC => ((1u64 << 32) - 1) * bsize,
        MSDOS_SUPER_MAGIC => (1u64 << 32) - 1,
        _ => i64::MAX as u64,
    })
}

/// A `statx` result as a `stat` (the fields [`fattr`] and the store read).
fn stat_of(x: &libc::statx) -> libc::stat {
    // SAFETY: an all-zero `stat` is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(x.stx_dev_major, x.stx_dev_minor);
    st.st_ino = x.stx_ino;
    st.st_nlink = u64::from(x.stx_nlink);
    st.st_mode = u32::from(x.stx_mode);
    st.st_uid = x.stx_uid;
    st.st_gid = x.stx_gid;
    st.st_rdev = libc::makedev(x.stx_rdev_major, x.stx_rdev_minor);
    st.st_size = x.stx_size as i64;
    st.st_blksize = i64::from(x.stx_blksize);
    st.st_blocks = x.stx_blocks as i64;
    st.st_atime = x.stx_atime.tv_sec;
    st.st_atime_nsec = i64::from(x.stx_atime.tv_nsec);
    st.st_mtime = x.stx_mtime.tv_sec;
    st.st_mtime_nsec = i64::from(x.stx_mtime.tv_nsec);
    st.st_ctime = x.stx_ctime.tv_sec;
    st.st_ctime_nsec = i64::from(x.stx_ctime.tv_nsec);
    st
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW)`: what [`lstatat`] says of the name, and the id
/// of the mount it lies on (the id `name_to_handle_at` gives; `None` when the kernel does not
/// say, before Linux 5.8). One system call: the name looked up as the thread's identity, which
/// needs search permission on the directory.
pub(super) fn lstat_mnt(dirfd: RawFd, name: &CStr) -> NfsResult<(libc::stat, Option<i32>)> {
    // SAFETY: an all-zero `statx` is a valid value; the kernel fills it.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    let mask = libc::STATX_BASIC_STATS | libc::STATX_MNT_ID;
    // SAFETY: valid NUL-terminated name and writable `statx`.
    check(unsafe {
        libc::statx(
            dirfd,
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            mask,
            &mut x,
        )
    })?;
    let mnt = (x.stx_mask & libc::STATX_MNT_ID != 0).then_some(x.stx_mnt_id as i32);
    Ok((stat_of(&x), mnt))
}

#[cfg(test)]
mod tests {
    #[test]
    fn accepts_proc_paths_of_every_descriptor() {
        for (fd, want) in [
            (0, "/proc/self/fd/0"),
            (7, "/proc/self/fd/7"),
            (1_234_567_890, "/proc/self/fd/1234567890"),
            (i32::MAX, "/proc/self/fd/2147483647"),
        ] {
            assert_eq!(super::proc_path(fd).to_str(), Ok(want));
        }
    }
}
