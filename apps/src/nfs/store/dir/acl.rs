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
use super::sys;
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
    /// Object `o` of `fh` with a directory's descriptor open for I/O
    /// ([`DirStore::open_for_io`]): its extended attributes (ACLs, `user.` attributes) are then
    /// asked of the descriptor, not through its /proc link.
    pub(super) fn dir_io(&self, fh: &Fh, o: Obj) -> NfsResult<Obj> {
        match o {
            o if o.kind() == libc::S_IFDIR && !o.io => self.open_for_io(fh, o),
            o => Ok(o),
        }
    }

    /// GETACL of `fh`: its attributes and ACLs (none on a symbolic link).
    pub(super) fn acls_of(&self, fh: &Fh) -> NfsResult<(Fattr3, Acls)> {
        let o = self.dir_io(fh, self.stat_obj(fh)?)?;
        let a = sys::fattr(&o.st);
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
        let o = self.dir_io(fh, self.stat_obj(fh)?)?;
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
/// (`sys::getxattr`).
fn read(o: &Obj, name: &CStr) -> NfsResult<Option<Acl>> {
    // On the stack: an object without an ACL (the common case) costs no allocation.
    let mut buf = [0u8; XATTR_MAX];
    let n = match sys::getxattr(o.raw(), o.io, name, &mut buf) {
        Ok(n) => n,
        Err(libc::ENODATA | libc::EOPNOTSUPP) => return Ok(None),
        // More entries than the protocol carries (Linux nfsd fails such a GETACL too).
        Err(libc::ERANGE) => return Err(Nfsstat3::SERVERFAULT),
        Err(e) => return Err(Nfsstat3::from_errno(e)),
    };
    let got = buf.get(..n).ok_or(Nfsstat3::SERVERFAULT)?;
    Acl::from_xattr(got).map_err(|_| Nfsstat3::SERVERFAULT)
}

/// Sets (`Some`) or removes (`None`) the ACL in extended attribute `name` of object `o`, as
/// the thread's identity: through its descriptor when that is open for I/O, else through its
/// /proc link (as [`read`]).
fn write(o: &Obj, name: &CStr, acl: Option<&Acl>) -> NfsResult<()> {
    let r = match acl.map(Acl::to_xattr) {
        Some(v) => sys::setxattr(o.raw(), o.io, name, &v, 0),
        None => sys::removexattr(o.raw(), o.io, name),
    };
    match r {
        Err(libc::ENODATA) if acl.is_none() => Ok(()),
        Err(e) => Err(Nfsstat3::from_errno(e)),
        Ok(()) => Ok(()),
    }
}
