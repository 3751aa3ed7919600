//! The directory store's user extended attributes (RFC 8276 GETXATTR, SETXATTR, LISTXATTRS
//! and REMOVEXATTR): the file system's own `user.` attributes, read and written through the
//! object's descriptor when it is open for I/O, else through its `/proc/self/fd` link (as
//! `sys::getxattr` says), with the thread acting as the caller so that the kernel checks them
//! (`xattr_permission`: the sticky bit, read or write permission).
//!
//! Normal operation: as Linux nfsd (`nfsd_getxattr`, `nfsd_setxattr`, `nfsd_listxattr`,
//! `nfsd_removexattr`), the caller's read (GETXATTR, LISTXATTRS) or write (SETXATTR,
//! REMOVEXATTR) permission on the object is checked first (`faccessat2`: the kernel checks
//! user attributes only on some types); an object that is neither a regular file nor a
//! directory carries none, which is answered here without asking the kernel (its /proc link
//! would follow a symbolic link). Names are built on the stack and LISTXATTRS reads into one
//! buffer per thread: no allocation per call. SETXATTR and REMOVEXATTR hold the object's
//! mutex and answer its weak cache consistency data ([`DirStore::changing`]); the kernel moves
//! its ctime. Recovery: a file system without user attributes is found when the store opens
//! ([`supported`]); the methods then answer NOTSUPP. Errors map as Linux nfsd's
//! `nfsd_xattr_errno` maps them.

use std::cell::RefCell;
use std::ffi::CStr;
use std::os::fd::RawFd;

use super::{ident, sys, DirStore, Obj};
use crate::nfs::identity::Cred;
use crate::nfs::store::{check_xattr_name, Wcc, XattrSet, XATTR_NAME_MAX};
use crate::nfs::types::{Fh, NfsResult, Nfsstat3};

/// The namespace of the attributes served.
const PREFIX: &[u8] = b"user.";

/// Room for the attributes of one object as LISTXATTRS reads them (Linux's `XATTR_LIST_MAX`).
const LIST_MAX: usize = 65536;

thread_local! {
    /// The buffer LISTXATTRS reads into, one per thread.
    static LIST: RefCell<Vec<u8>> = RefCell::new(vec![0; LIST_MAX]);
}

/// `user.` and a name, NUL-terminated, on the stack.
struct XName {
    buf: [u8; PREFIX.len() + XATTR_NAME_MAX + 1],
    len: usize,
}

impl XName {
    /// The full name of attribute `name` (without `user.`), refused as
    /// [`check_xattr_name`] refuses it.
    fn new(name: &[u8]) -> NfsResult<XName> {
        check_xattr_name(name)?;
        let mut x = XName {
            buf: [0; PREFIX.len() + XATTR_NAME_MAX + 1],
            len: PREFIX.len() + name.len(),
        };
        x.buf[..PREFIX.len()].copy_from_slice(PREFIX);
        x.buf[PREFIX.len()..x.len].copy_from_slice(name);
        Ok(x)
    }

    /// The full name as the kernel takes it.
    fn c(&self) -> &CStr {
        // `new` wrote `len` octets without NUL, then the NUL already there.
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or_default()
    }
}

/// The status of a failed extended attribute call's errno (Linux nfsd's `nfsd_xattr_errno`;
/// EEXIST and EOPNOTSUPP map as every call's).
fn xattr_err(e: i32) -> Nfsstat3 {
    match e {
        libc::ENODATA => Nfsstat3::NOXATTR,
        libc::E2BIG => Nfsstat3::XATTR2BIG,
        libc::ERANGE => Nfsstat3::TOOSMALL,
        e => Nfsstat3::from_errno(e),
    }
}

/// Whether the file system of directory `fd` (open for I/O) keeps user extended attributes:
/// asking for one that is not there answers ENODATA there, EOPNOTSUPP where it keeps none.
pub(super) fn supported(fd: RawFd) -> bool {
    let name = c"user.rpcrdma.probe";
    !matches!(
        sys::getxattr(fd, true, name, &mut []),
        Err(libc::EOPNOTSUPP)
    )
}

/// Whether object `o` may carry user extended attributes (Linux's `xattr_permission`:
/// regular files and directories only).
fn carries(o: &Obj) -> bool {
    matches!(o.kind(), libc::S_IFREG | libc::S_IFDIR)
}

impl DirStore {
    /// NOTSUPP unless the export keeps user extended attributes.
    fn xattrs_kept(&self) -> NfsResult<()> {
        match self.xattrs {
            true => Ok(()),
            false => Err(Nfsstat3::NOTSUPP),
        }
    }

    /// [`crate::nfs::store::Store::getxattr`]: read permission, then the kernel's answer.
    pub(super) fn get_xattr(
        &self,
        cx: &Cred,
        fh: &Fh,
        name: &[u8],
        out: &mut [u8],
    ) -> NfsResult<usize> {
        self.xattrs_kept()?;
        let x = XName::new(name)?;
        let o = self.dir_io(fh, self.stat_obj(fh)?)?;
        ident::act_as(cx)?;
        sys::may(o.raw(), libc::R_OK)?;
        if !carries(&o) {
            return Err(Nfsstat3::NOXATTR);
        }
        match sys::getxattr(o.raw(), o.io, x.c(), out) {
            // An empty `out` asks the length.
            Ok(n) if n > out.len() => Err(Nfsstat3::TOOSMALL),
            Ok(n) => Ok(n),
            Err(e) => Err(xattr_err(e)),
        }
    }

    /// [`crate::nfs::store::Store::listxattrs`]: read permission, then the kernel's listing
    /// with every name outside `user.` left out (XATTR2BIG past [`LIST_MAX`], as Linux nfsd).
    pub(super) fn list_xattrs(
        &self,
        cx: &Cred,
        fh: &Fh,
        each: &mut dyn FnMut(&[u8]),
    ) -> NfsResult<()> {
        self.xattrs_kept()?;
        let o = self.dir_io(fh, self.stat_obj(fh)?)?;
        ident::act_as(cx)?;
        sys::may(o.raw(), libc::R_OK)?;
        if !carries(&o) {
            return Ok(());
        }
        let mut list = |buf: &mut [u8]| -> NfsResult<()> {
            let n = sys::listxattr(o.raw(), o.io, buf).map_err(|e| match e {
                libc::ERANGE => Nfsstat3::XATTR2BIG,
                e => xattr_err(e),
            })?;
            let names = buf.get(..n).unwrap_or_default().split(|&c| c == 0);
            names
                .filter_map(|full| full.strip_prefix(PREFIX))
                .filter(|name| !name.is_empty())
                .for_each(&mut *each);
            Ok(())
        };
        LIST.with(|b| match b.try_borrow_mut() {
            Ok(mut buf) => list(&mut buf),
            // Called again from `each`: a buffer of its own.
            Err(_) => list(&mut vec![0; LIST_MAX]),
        })
    }

    /// [`crate::nfs::store::Store::setxattr_wcc`] (`set`: the value and how) or
    /// [`crate::nfs::store::Store::removexattr_wcc`] (`None`): write permission, PERM for an
    /// object that carries no attributes, then the kernel's change as the caller.
    pub(super) fn change_xattr(
        &self,
        cx: &Cred,
        fh: &Fh,
        name: &[u8],
        set: Option<(&[u8], XattrSet)>,
    ) -> Wcc<()> {
        self.changing(fh, |o| {
            self.xattrs_kept()?;
            let o = self.dir_io(fh, o)?;
            let x = XName::new(name)?;
            ident::act_as(cx)?;
            sys::may(o.raw(), libc::W_OK)?;
            if !carries(&o) {
                return Err(Nfsstat3::PERM);
            }
            let r = match set {
                Some((value, how)) => {
                    let flags = match how {
                        XattrSet::Either => 0,
                        XattrSet::Create => libc::XATTR_CREATE,
                        XattrSet::Replace => libc::XATTR_REPLACE,
                    };
                    sys::setxattr(o.raw(), o.io, x.c(), value, flags)
                }
                None => sys::removexattr(o.raw(), o.io, x.c()),
            };
            r.map_err(xattr_err)
        })
    }
}
