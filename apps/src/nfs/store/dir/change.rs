//! What removes, renames and links names in the directory store: REMOVE, RMDIR, RENAME and
//! LINK, each by the caller's identity (the thread acts as the caller, see [`super::ident`])
//! but the link itself, and the weak cache consistency data of the directories they change.
//!
//! Normal operation: the directories' attributes before are those their descriptors showed
//! when they were checked ([`DirStore::stat_obj`]), after those `fstat` shows once the change
//! is made, as Linux nfsd takes them (`fh_fill_pre_attrs`, `fh_fill_post_attrs`); a RENAME
//! within one directory takes them once for both. A name about to be removed or replaced has
//! its handle taken first, so its cached descriptor is dropped after (freeing its space).
//!
//! Recovery: `.` and `..` are refused as Linux nfsd refuses them (REMOVE: ACCES; RMDIR: INVAL,
//! NOTEMPTY; RENAME: INVAL; LINK: EXIST); system call errors map through
//! [`Nfsstat3::from_errno`]; a directory gone meanwhile has no attributes after.

use std::ffi::CStr;
use std::os::fd::RawFd;

use super::sys::{self, check, cname};
use super::{ident, DirStore, Obj};
use crate::nfs::identity::Cred;
use crate::nfs::types::{is_dot_entry, Fattr3, Fh, NfsResult, Nfsstat3, WccData};

/// A directory's handle and a name in it.
type Named<'a> = (&'a Fh, &'a [u8]);

impl DirStore {
    /// The handle of what `name` in `dirfd` is now, if anything: taken before removing it so
    /// its cached descriptor can be dropped after (freeing its space).
    fn handle_before_removal(&self, dirfd: RawFd, name: &CStr) -> Option<Fh> {
        self.fh_at(dirfd, name).ok()
    }

    /// Drops the cached descriptor of `gone` (a name just removed or replaced).
    fn forget_removed(&self, gone: Option<Fh>) {
        if let Some(fh) = gone {
            self.cache().forget(&fh);
        }
    }

    /// The attributes before of `o`, when it is live.
    fn before_of(o: &NfsResult<Obj>) -> Option<crate::nfs::types::WccAttr> {
        o.as_ref().ok().map(|o| sys::fattr(&o.st).wcc())
    }

    /// The attributes after of `fh` (open as `o`), when it was live.
    fn after_of(&self, fh: &Fh, o: &NfsResult<Obj>) -> Option<Fattr3> {
        o.as_ref().ok().and_then(|o| self.after(fh, &o.fd))
    }

    /// REMOVE (RMDIR when `rmdir`) of `name` in directory `d` (the thread acts as the caller).
    pub(super) fn unlink_in(&self, d: &Obj, name: &[u8], rmdir: bool) -> NfsResult<()> {
        let c = cname(name)?;
        match (rmdir, name) {
            (false, _) if is_dot_entry(name) => return Err(Nfsstat3::ACCES),
            (true, b".") => return Err(Nfsstat3::INVAL),
            (true, b"..") => return Err(Nfsstat3::NOTEMPTY),
            _ => {}
        }
        let flags = if rmdir { libc::AT_REMOVEDIR } else { 0 };
        let gone = self.handle_before_removal(d.raw(), &c);
        // SAFETY: `c` is NUL-terminated.
        check(unsafe { libc::unlinkat(d.raw(), c.as_ptr(), flags) })?;
        self.forget_removed(gone);
        Ok(())
    }

    /// RENAME of `from_name` in directory `f` to `to_name` in directory `t` (the thread acts
    /// as the caller).
    pub(super) fn rename_in(
        &self,
        f: &Obj,
        from_name: &[u8],
        t: &Obj,
        to_name: &[u8],
    ) -> NfsResult<()> {
        let (cf, ct) = (cname(from_name)?, cname(to_name)?);
        if is_dot_entry(from_name) || is_dot_entry(to_name) {
            return Err(Nfsstat3::PERM);
        }
        let gone = self.handle_before_removal(t.raw(), &ct);
        // SAFETY: both names are NUL-terminated.
        check(unsafe { libc::renameat(f.raw(), cf.as_ptr(), t.raw(), ct.as_ptr()) })?;
        self.forget_removed(gone);
        Ok(())
    }

    /// [`crate::nfs::store::Store::rename_wcc`]: each directory checked once, its attributes
    /// before from that check.
    pub(super) fn rename_wcc_as(
        &self,
        cx: &Cred,
        (fd, fname): Named<'_>,
        (td, tname): Named<'_>,
    ) -> (NfsResult<()>, WccData, WccData) {
        let _held = self.serial.two(fd, td);
        let same = fd == td;
        let f = self.stat_obj(fd);
        let t = if same { f.clone() } else { self.stat_obj(td) };
        let (fb, tb) = (Self::before_of(&f), Self::before_of(&t));
        let r = self.as_dir(cx, &f).and_then(|fo| {
            let to = self.as_dir(cx, &t)?;
            self.rename_in(fo, fname, to, tname)
        });
        let fa = self.after_of(fd, &f);
        let ta = if same { fa } else { self.after_of(td, &t) };
        let wcc = |before, after| WccData { before, after };
        (r, wcc(fb, fa), wcc(tb, ta))
    }

    /// LINK of object `o` as `name` in directory `d` (as [`DirStore::stat_obj`] answered it).
    pub(super) fn link_objs(
        &self,
        cx: &Cred,
        o: &Obj,
        d: &NfsResult<Obj>,
        name: &[u8],
    ) -> NfsResult<()> {
        ident::act_as(cx)?;
        if o.kind() == libc::S_IFDIR {
            return Err(Nfsstat3::ISDIR);
        }
        let d = self.as_dir(cx, d)?;
        let c = cname(name)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::EXIST);
        }
        // As Linux nfsd's `vfs_link`: the caller needs write and search permission on the
        // directory, nothing on the object (`fs.protected_hardlinks` guards the link system
        // call, not nfsd). The link itself is made by the server: only it may link a
        // descriptor (AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
        sys::may(d.raw(), libc::W_OK | libc::X_OK)?;
        ident::as_server()?;
        // SAFETY: NUL-terminated names; AT_EMPTY_PATH links the object `o` refers to, a
        // symbolic link included.
        check(unsafe {
            libc::linkat(
                o.raw(),
                c"".as_ptr(),
                d.raw(),
                c.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        })
        .map(drop)
    }

    /// [`crate::nfs::store::Store::link_wcc`]: the object's attributes after and the
    /// directory's before (from its check) and after.
    pub(super) fn link_wcc_as(
        &self,
        cx: &Cred,
        fh: &Fh,
        dir: &Fh,
        name: &[u8],
    ) -> (NfsResult<()>, Option<Fattr3>, WccData) {
        let _held = self.serial.one(dir);
        let o = self.stat_obj(fh);
        let d = self.stat_obj(dir);
        let before = Self::before_of(&d);
        let r = o
            .as_ref()
            .map_err(|e| *e)
            .and_then(|o| self.link_objs(cx, o, &d, name));
        let wcc = WccData {
            before,
            after: self.after_of(dir, &d),
        };
        (r, self.after_of(fh, &o), wcc)
    }
}
