//! The directory store's POSIX ACLs (NFSACL GETACL and SETACL): the file system's own, read
//! and written as Linux's `system.posix_acl_access` and `system.posix_acl_default` extended
//! attributes ([`Acl::to_xattr`]), of the object's descriptor (a directory's is opened
//! read-only at its first GETACL or SETACL and cached so) or, for an `O_PATH` one, through its
//! `/proc/self/fd` link. The kernel keeps
//! them: it checks them in every permission check the store asks of it (`faccessat2`, opens as
//! the caller), rewrites them on `chmod`, gives new objects their directory's default ACL, and
//! on a SETACL checks ownership and validity and sets the mode.
//!
//! Normal operation: GETACL reads without switching identity (reading an ACL needs no
//! permission); SETACL runs as the caller, so the kernel refuses a caller who does not own the
//! object (PERM) and an ACL it does not take (INVAL); removing an ACL the object does not have
//! succeeds. Recovery: a file system without ACL support shows no ACL (the mode's) and refuses
//! SETACL with NOTSUPP, as Linux nfsd does there.

use std::ffi::CStr;

use super::ident;
use super::sys::{errno, nfs_err, proc_path};
use super::{DirStore, Obj};
use crate::nfs::acl::{Acl, Acls, MAX_ENTRIES};
use crate::nfs::identity::Cred;

use crate::nfs::types::{Fattr3, Fh, NfsResult, Nfsstat3};

/// The extended attribute of the access ACL.
const ACCESS: &CStr = c"system.posix_acl_access";
/// The extended attribute of a directory's default ACL.
const DEFAULT: &CStr = c"system.posix_acl_default";

/// Room for the largest ACL the NFSACL protocol carries in Linux's form.
const XATTR_MAX: usize = 4 + 8 * MAX_ENTRIES;

impl DirStore {
    /// GETACL of `fh`: its attributes and ACLs (none on a symbolic link).
    pub(super) fn acls_of(&self, fh: &Fh) -> NfsResult<(Fattr3, Acls)> {
        let o = match self.stat_obj(fh)? {
            o if o.kind() == libc::S_IFDIR && !o.io => self.open_for_io(fh, o)?,
            o => o,
        };
        let a = super::sys::fattr(&o.st);
        let acls = match o.kind() {
            libc::S_IFLNK => Acls::default(),
            libc::S_IFDIR => Acls {
                access: read(&o, ACCESS)?,
                default: read(&o, DEFAULT)?,
            },
            _ => Acls {
                access: read(&o, ACCESS)?,
                default: None,
            },
        };
        Ok((a, acls))
    }

    /// SETACL of `fh` by `cx`: the access ACL, then (a directory's) default ACL, set or
    /// removed by the kernel with the thread acting as `cx`.
    pub(super) fn set_acls(
        &self,
        cx: &Cred,
        fh: &Fh,
        access: Option<&Acl>,
        default: Option<&Acl>,
    ) -> NfsResult<()> {
        let _held = self.serial.one(fh);
        let o = match self.stat_obj(fh)? {
            o if o.kind() == libc::S_IFDIR && !o.io => self.open_for_io(fh, o)?,
            o => o,
        };
        if o.kind() == libc::S_IFLNK {
            return Err(Nfsstat3::NOTSUPP);
        }
        ident::act_as(cx)?;
        write(&o, ACCESS, access)?;
        if o.kind() != libc::S_IFDIR {
            // As Linux's `set_posix_acl`: no default ACL on anything but a directory.
            return match default {
                Some(_) => Err(Nfsstat3::ACCES),
                None => Ok(()),
            };
        }
        write(&o, DEFAULT, default)
    }
}

/// The ACL in extended attribute `name` of object `o` (`None`: none, or a file system without
/// ACLs): asked of its descriptor when that is open for I/O, else through its /proc link
/// (`fgetxattr` refuses an `O_PATH` descriptor).
fn read(o: &Obj, name: &CStr) -> NfsResult<Option<Acl>> {
    // On the stack: an object without an ACL (the common case) costs no allocation.
    let mut buf = [0u8; XATTR_MAX];
    let (to, len) = (buf.as_mut_ptr().cast(), buf.len());
    let n = if o.io {
        // SAFETY: NUL-terminated name; `buf` is writable for its length.
        unsafe { libc::fgetxattr(o.raw(), name.as_ptr(), to, len) }
    } else {
        let path = proc_path(o.raw());
        // SAFETY: NUL-terminated path and name; `buf` is writable for its length.
        unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), to, len) }
    };
    if n < 0 {
        return match errno() {
            libc::ENODATA | libc::EOPNOTSUPP => Ok(None),
            // More entries than the protocol carries (Linux nfsd fails such a GETACL too).
            libc::ERANGE => Err(Nfsstat3::SERVERFAULT),
            _ => Err(nfs_err()),
        };
    }
    let got = buf.get(..n as usize).ok_or(Nfsstat3::SERVERFAULT)?;
    Acl::from_xattr(got).map_err(|_| Nfsstat3::SERVERFAULT)
}

/// Sets (`Some`) or removes (`None`) the ACL in extended attribute `name` of object `o`, as
/// the thread's identity: through its descriptor when that is open for I/O, else through its
/// /proc link (as [`read`]).
fn write(o: &Obj, name: &CStr, acl: Option<&Acl>) -> NfsResult<()> {
    let (fd, path) = (o.raw(), proc_path(o.raw()));
    let v = acl.map(Acl::to_xattr);
    // SAFETY (each arm): NUL-terminated path and name; `v` is readable for its length; plain
    // system calls on an open descriptor.
    let r = match (&v, o.io) {
        (Some(v), true) => unsafe {
            libc::fsetxattr(fd, name.as_ptr(), v.as_ptr().cast(), v.len(), 0)
        },
        (Some(v), false) => unsafe {
            libc::setxattr(path.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0)
        },
        (None, true) => unsafe { libc::fremovexattr(fd, name.as_ptr()) },
        (None, false) => unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) },
    };
    if r < 0 && !(acl.is_none() && errno() == libc::ENODATA) {
        return Err(nfs_err());
    }
    Ok(())
}
