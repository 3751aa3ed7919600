//! The directory store's holes, reserved space and copies (NFSv4.2 ALLOCATE, DEALLOCATE, SEEK
//! and COPY, RFC 7862): the file system's own, through `fallocate` (mode 0;
//! `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`), `lseek` (`SEEK_DATA`, `SEEK_HOLE`) and
//! `copy_file_range` on the files' descriptors open for I/O, as Linux nfsd calls
//! `vfs_fallocate`, `vfs_llseek` and `vfs_copy_file_range` (a file system that cannot copy
//! itself is copied through reads and writes).
//!
//! Normal operation: the caller needs write permission for ALLOCATE and DEALLOCATE (the owner
//! of a file that is not immutable always has it, as for WRITE) and read permission for SEEK;
//! a change holds the file's mutex, as WRITE does. Recovery: the kernel's refusals pass on
//! (NOTSUPP where the file system has no `fallocate` or no hole punching, NOSPC, NXIO).

use super::sys::{self, check};
use super::{DirStore, Obj};
use crate::nfs::identity::Cred;
use crate::nfs::store::{copy_through, Store, COPY_MAX};
use crate::nfs::types::{Fh, NfsResult, Nfsstat3};

impl DirStore {
    /// ALLOCATE (`punch` false) or DEALLOCATE of `len` octets at `offset` of `fh` for `cx`.
    pub(super) fn fallocate_as(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> NfsResult<()> {
        let _held = self.serial.one(fh);
        let o = match self.file_obj(cx, fh) {
            Err(Nfsstat3::ISDIR) => return Err(Nfsstat3::INVAL),
            r => r?,
        };
        self.may_write(cx, &o)?;
        let (Ok(start), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(Nfsstat3::INVAL);
        };
        if n == 0 {
            return Err(Nfsstat3::INVAL);
        }
        if !offset
            .checked_add(len)
            .is_some_and(|e| e <= self.max_file_size())
        {
            return Err(Nfsstat3::FBIG);
        }
        let mode = match punch {
            true => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            false => 0,
        };
        // SAFETY: a plain system call on an open descriptor.
        match check(unsafe { libc::fallocate(o.raw(), mode, start, n) }) {
            // A descriptor open read-only (its read-write open was refused).
            Err(_) if sys::errno() == libc::EBADF => Err(Nfsstat3::ACCES),
            r => r.map(drop),
        }
    }

    /// SEEK from `offset` of `fh` for `cx` to data, or with `hole` to a hole.
    pub(super) fn seek_as(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        hole: bool,
    ) -> NfsResult<(u64, bool)> {
        let o = self.file_obj(cx, fh)?;
        self.may_io(cx, &o, libc::R_OK)?;
        let Ok(start) = i64::try_from(offset) else {
            return Err(Nfsstat3::NXIO);
        };
        let whence = if hole {
            libc::SEEK_HOLE
        } else {
            libc::SEEK_DATA
        };
        // SAFETY: a plain system call on an open descriptor (READ and WRITE use positioned
        // calls, so moving its offset is harmless).
        let at = unsafe { libc::lseek(o.raw(), start, whence) };
        if at < 0 {
            return Err(match sys::errno() {
                libc::EBADF => Nfsstat3::ACCES,
                e => Nfsstat3::from_errno(e),
            });
        }
        let size = sys::fstat(o.raw())?.st_size.max(0) as u64;
        Ok((at as u64, at as u64 >= size))
    }

    /// The files of a COPY or CLONE open for I/O: `src` if `cx` may read it, `dst` if it may
    /// write it (as READ and WRITE ask).
    fn source_and_destination(&self, cx: &Cred, src: &Fh, dst: &Fh) -> NfsResult<(Obj, Obj)> {
        let from = self.file_obj(cx, src)?;
        self.may_io(cx, &from, libc::R_OK)?;
        let to = self.file_obj(cx, dst)?;
        self.may_write(cx, &to)?;
        Ok((from, to))
    }

    /// COPY of up to `count` octets from `src` at `src_offset` to `dst` at `dst_offset` for
    /// `cx`, the kernel copying (`copy_file_range`: no octet through the server's memory on
    /// most file systems, shared blocks on those that clone).
    pub(super) fn copy_as(
        &self,
        cx: &Cred,
        (src, src_offset): (&Fh, u64),
        (dst, dst_offset): (&Fh, u64),
        count: u64,
    ) -> NfsResult<u64> {
        let _held = self.serial.one(dst);
        let (from, to) = self.source_and_destination(cx, src, dst)?;
        let (Ok(mut so), Ok(mut d_o)) = (i64::try_from(src_offset), i64::try_from(dst_offset))
        else {
            return Err(Nfsstat3::INVAL);
        };
        let len = count.min(COPY_MAX) as usize;
        // SAFETY: both descriptors are open; the offsets are this call's own variables.
        let n = unsafe { libc::copy_file_range(from.raw(), &mut so, to.raw(), &mut d_o, len, 0) };
        if n >= 0 {
            return Ok(n as u64);
        }
        match sys::errno() {
            libc::EXDEV | libc::EOPNOTSUPP | libc::ENOSYS => {
                drop(_held);
                copy_through(self, cx, (src, src_offset), (dst, dst_offset), count)
            }
            libc::EBADF => Err(Nfsstat3::ACCES),
            e => Err(Nfsstat3::from_errno(e)),
        }
    }

    /// CLONE of `count` octets (more than 0) from `src` at `src_offset` to `dst` at
    /// `dst_offset` for `cx`: the file system shares its blocks (`FICLONERANGE`, as Linux
    /// nfsd's `vfs_clone_file_range`); NOTSUPP where it cannot (ext4, tmpfs), XDEV across file
    /// systems, INVAL where it needs offsets and count on its block boundaries.
    pub(super) fn clone_as(
        &self,
        cx: &Cred,
        (src, src_offset): (&Fh, u64),
        (dst, dst_offset): (&Fh, u64),
        count: u64,
    ) -> NfsResult<()> {
        let _held = self.serial.one(dst);
        let (from, to) = self.source_and_destination(cx, src, dst)?;
        let range = libc::file_clone_range {
            src_fd: i64::from(from.raw()),
            src_offset,
            src_length: count,
            dest_offset: dst_offset,
        };
        // SAFETY: both descriptors are open; the kernel reads `range`, which outlives the call.
        match check(unsafe { libc::ioctl(to.raw(), libc::FICLONERANGE, &range) }) {
            Ok(_) => Ok(()),
            Err(_) => Err(match sys::errno() {
                libc::EBADF => Nfsstat3::ACCES,
                libc::EOPNOTSUPP | libc::ENOTTY | libc::ENOSYS => Nfsstat3::NOTSUPP,
                e => Nfsstat3::from_errno(e),
            }),
        }
    }
}
