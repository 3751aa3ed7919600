//! READDIR / READDIRPLUS of the directory store: `getdents64` on a fresh descriptor of the
//! directory (opened as the caller, who needs read permission on it: `.` of the held
//! descriptor, or its /proc link when the caller may not search the directory), positioned with
//! `lseek(cookie)`; each entry's cookie is the kernel's `d_off`, so cookies are the file
//! system's own (hash positions on ext4, stable offsets on tmpfs) and survive entries being
//! added and removed.
//!
//! Normal operation: entries are passed to `emit` in the kernel's order until it says the
//! reply is full. For READDIRPLUS each entry also gets its handle (`.`: the directory's own;
//! others from the descriptor cache when it holds the entry's inode, else `name_to_handle_at`)
//! and `lstat` attributes (one `statx`, which also names the entry's mount); an entry that
//! vanished meanwhile, or that is a mount point, is listed without them. Recovery: a malformed
//! kernel record ends the listing with IO.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys::{self, check, openat};
use super::{DirStore, Obj};
use crate::nfs::types::{DirEntry, Fattr3, Fh, NfsResult, Nfsstat3};

/// Octets of `getdents64` records read per call.
const BUF: usize = 32 * 1024;

thread_local! {
    /// The `getdents64` buffer of this thread's listings, kept from one to the next (no
    /// allocation per listing).
    static DENTS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Offset of `d_name` in `struct linux_dirent64`.
const NAME_AT: usize = 19;

/// One `linux_dirent64` record: (inode, d_off, name).
fn parse(rec: &[u8]) -> Option<(u64, u64, &[u8])> {
    let ino = u64::from_ne_bytes(rec.get(0..8)?.try_into().ok()?);
    let off = u64::from_ne_bytes(rec.get(8..16)?.try_into().ok()?);
    let name = rec.get(NAME_AT..)?;
    let end = name.iter().position(|&b| b == 0)?;
    Some((ino, off, &name[..end]))
}

impl DirStore {
    /// Handle and attributes of `name` in `dirfd` (READDIRPLUS), when still there and on
    /// this file system.
    fn plus_of(&self, dir: &Fh, d: &Obj, name: &[u8]) -> Option<(Fh, Fattr3)> {
        let (dirfd, dir_st) = (d.raw(), &d.st);
        match name {
            b"." => return Some((*dir, sys::fattr(dir_st))),
            b".." if self.is_root(dir_st) => {
                let st = sys::fstat(self.root_fd.as_raw_fd()).ok()?;
                return Some((self.root_fh, sys::fattr(&st)));
            }
            _ => {}
        }
        let c = sys::cname(name).ok()?;
        let (st, mnt) = sys::lstat_mnt(dirfd, &c).ok()?;
        if st.st_dev != self.root_dev || mnt.is_some_and(|m| m != self.root_mnt) {
            return None;
        }
        // An object whose descriptor the cache holds with this inode number is the one the
        // name names (see the `handle` module); others are asked of the kernel.
        let held = mnt.and_then(|_| self.cache().ino_handle(st.st_ino));
        let fh = match held {
            Some(fh) => fh,
            None => self.fh_at(dirfd, &c).ok()?,
        };
        Some((fh, sys::fattr(&st)))
    }

    /// A descriptor of directory `dirfd` to read its entries with, opened as the thread's
    /// identity: `.` of it (which needs search permission too, as callers mostly have), else
    /// through its /proc link (read permission only, as Linux nfsd asks).
    fn open_listing(dirfd: RawFd) -> NfsResult<OwnedFd> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        match openat(dirfd, c".", flags, 0) {
            Err(Nfsstat3::ACCES) => openat(libc::AT_FDCWD, &sys::proc_path(dirfd), flags, 0),
            r => r,
        }
    }

    /// Lists directory `d` (handle `dir`) after `cookie`; `Ok(true)` when the end was reached.
    pub(super) fn list(
        &self,
        dir: &Fh,
        d: &Obj,
        cookie: u64,
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<bool> {
        let fd = Self::open_listing(d.raw())?;
        let pos = i64::try_from(cookie).map_err(|_| Nfsstat3::BAD_COOKIE)?;
        // SAFETY: plain syscall on a descriptor we own.
        if unsafe { libc::lseek(fd.as_raw_fd(), pos, libc::SEEK_SET) } < 0 {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        DENTS.with(|cell| {
            let (mut held, mut own) = (cell.try_borrow_mut(), Vec::new());
            let buf: &mut [u8] = match held.as_mut() {
                Ok(b) => {
                    b.resize(BUF, 0);
                    b
                }
                Err(_) => {
                    own.resize(BUF, 0); // a listing within a listing on this thread
                    &mut own
                }
            };
            self.dents(&fd, buf, (dir, d), plus, emit)
        })
    }

    /// The records of `fd` read into `buf`, each passed to `emit` ([`DirStore::list`]).
    fn dents(
        &self,
        fd: &OwnedFd,
        buf: &mut [u8],
        (dir, d): (&Fh, &Obj),
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<bool> {
        let dir_st = &d.st;
        loop {
            // SAFETY: `buf` is writable for `buf.len()` octets.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd.as_raw_fd(),
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            };
            let n = check(n.clamp(-1, BUF as i64) as i32)? as usize;
            if n == 0 {
                return Ok(true);
            }
            let mut at = 0usize;
            while at < n {
                let reclen = buf
                    .get(at + 16..at + 18)
                    .map_or(0, |b| usize::from(u16::from_ne_bytes([b[0], b[1]])));
                let rec = buf.get(at..at + reclen).filter(|_| reclen > NAME_AT);
                let (ino, off, name) = rec.and_then(parse).ok_or(Nfsstat3::IO)?;
                let fileid = if name == b".." && self.is_root(dir_st) {
                    dir_st.st_ino
                } else {
                    ino
                };
                let entry = DirEntry {
                    fileid,
                    name,
                    cookie: off,
                    plus: if plus {
                        self.plus_of(dir, d, name)
                    } else {
                        None
                    },
                };
                if !emit(&entry) {
                    return Ok(false);
                }
                at += reclen;
            }
        }
    }
}
