//! The directory store's holes and reserved space (NFSv4.2 ALLOCATE, DEALLOCATE and SEEK,
//! RFC 7862): the file system's own, through `fallocate` (mode 0; `FALLOC_FL_PUNCH_HOLE |
//! FALLOC_FL_KEEP_SIZE`) and `lseek` (`SEEK_DATA`, `SEEK_HOLE`) on the file's descriptor open
//! for I/O, as Linux nfsd calls `vfs_fallocate` and `vfs_llseek`.
//!
//! Normal operation: the caller needs write permission for ALLOCATE and DEALLOCATE (the owner
//! of a file that is not immutable always has it, as for WRITE) and read permission for SEEK;
//! a change holds the file's mutex, as WRITE does. Recovery: the kernel's refusals pass on
//! (NOTSUPP where the file system has no `fallocate` or no hole punching, NOSPC, NXIO).

use super::sys::{self, check};
use super::DirStore;
use crate::nfs::identity::Cred;
use crate::nfs::store::Store;
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
        let owner = o.st.st_uid == cx.uid && sys::immutable(o.raw()) == Some(false);
        if !owner {
            self.may_io(cx, &o, libc::W_OK)?;
        }
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
}
