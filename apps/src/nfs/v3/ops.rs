//! The procedures that change or name objects, on one admitted call's export: what
//! [`super::server::Nfs3`] runs once a call is admitted ([`crate::nfs::admit`]).
//!
//! Normal operation: each operation calls the store's `*_wcc` method with the caller's
//! [`Cred`], which answers the weak cache consistency attributes of the objects it changes
//! before and after with the result (RFC 1813 `wcc_data`; WRITE and COMMIT after only, see
//! [`Call::wcc_after_only`]); a call refused here before the store (a name too long, `.` or
//! `..`, a size or offset past 2^63 - 1) takes them by [`Store::getattr`]. Every
//! handle an operation returns is sealed ([`Share::seal`]) so the client only ever holds
//! handles this server authenticated. Recovery: the store's NFS3ERR_* is the result; names are
//! checked for length and `.` / `..` here, once for both stores.

use super::proto::Res3;
use crate::nfs::admit::{seal_or_fault, Admitted, Share};
use crate::nfs::identity::Cred;
use crate::nfs::store::{NewObj, Store};
use crate::nfs::types::{
    check_name_len, is_dot_entry, Fattr3, Fh, NfsResult, Nfsstat3, Sattr3, StableHow, Time3,
    WccData,
};

/// One admitted call: its export's store, who it acts as.
pub(super) struct Call<'a> {
    /// The export's store.
    pub s: &'a dyn Store,
    /// The export.
    pub share: &'a Share,
    /// The identity the call acts as.
    pub cx: &'a Cred,
}

impl<'a> Call<'a> {
    pub fn new(adm: &'a Admitted) -> Call<'a> {
        Call {
            s: &*adm.share.store,
            share: &adm.share,
            cx: &adm.cred,
        }
    }

    pub fn attr(&self, fh: &Fh) -> Option<Fattr3> {
        self.s.getattr(fh).ok()
    }

    /// The `wcc_data` of `fh` for a call refused before it reached the store (nothing
    /// changed): its attributes before and after.
    pub fn wcc_unchanged(&self, fh: &Fh) -> WccData {
        WccData {
            before: self.attr(fh).map(|a| a.wcc()),
            after: self.attr(fh),
        }
    }

    /// The wire handle of store handle `fh`.
    pub fn seal(&self, fh: &Fh) -> NfsResult<Fh> {
        seal_or_fault(self.share, fh)
    }

    /// The `wcc_data` of a WRITE or COMMIT of `fh`: attributes after, none before. RFC 1813
    /// (`wcc_data`, weak cache consistency) asks for the attributes before to be taken
    /// atomically with the operation; the stores write without holding the file across
    /// calls (WRITEs of one file run at once on several workers), so a `pre_op_attr` could
    /// name a state another WRITE already left, and the Linux client, finding it unequal to
    /// what it cached, would take its own write for someone else's and drop the file's pages
    /// (fs/nfs/inode.c `nfs_update_inode`). Without one it compares against what it cached
    /// (`nfs_post_op_update_inode_force_wcc`), as with Linux nfsd, which sends none either.
    pub fn wcc_after_only(&self, fh: &Fh) -> WccData {
        WccData {
            before: None,
            after: self.attr(fh),
        }
    }

    /// WRITE: FBIG past 2^63 - 1 (Linux nfsd: OFFSET_MAX); the data is the call's stream.
    pub fn write(
        &self,
        fh: &Fh,
        offset: u64,
        count: u32,
        stable: StableHow,
        data: &[u8],
    ) -> Res3<'static> {
        let n = (count as usize).min(data.len());
        let end = offset.checked_add(n as u64);
        let (r, wcc) = if end.map_or(true, |e| e > i64::MAX as u64) {
            (Err(Nfsstat3::FBIG), self.wcc_after_only(fh))
        } else {
            let (r, after) = self.s.write_wcc(self.cx, fh, offset, &data[..n], stable);
            (
                r,
                WccData {
                    before: None,
                    after,
                },
            )
        };
        match r {
            Ok(c) => Res3::Write(Ok((wcc, n as u32, c, self.s.write_verifier()))),
            Err(e) => Res3::Write(Err((e, wcc))),
        }
    }

    pub fn setattr(&self, fh: &Fh, attr: &Sattr3, guard: Option<Time3>) -> Res3<'static> {
        let (r, wcc) = match attr.size {
            Some(sz) if sz > i64::MAX as u64 => (Err(Nfsstat3::FBIG), self.wcc_unchanged(fh)),
            _ => self.s.setattr_wcc(self.cx, fh, attr, guard),
        };
        Res3::Setattr(r.err().unwrap_or(Nfsstat3::OK), wcc)
    }

    pub fn lookup(&self, dir: &Fh, name: &[u8]) -> Res3<'static> {
        let (dir_attr, r) = match check_name_len(name) {
            Ok(()) => self.s.lookup_attrs(self.cx, dir, name),
            Err(e) => (self.attr(dir), Err(e)),
        };
        match r.and_then(|(fh, a)| Ok((self.seal(&fh)?, a))) {
            Ok((wire, a)) => Res3::Lookup(Ok((wire, a, dir_attr))),
            Err(e) => Res3::Lookup(Err((e, dir_attr))),
        }
    }

    /// CREATE, MKDIR, SYMLINK, MKNOD: the same result shape. `new` is what to make, or the
    /// status the arguments already fail with (checked after the name).
    pub fn create(&self, dir: &Fh, name: &[u8], new: NfsResult<NewObj<'_>>) -> Res3<'static> {
        let checked = check_name_len(name).and_then(|()| {
            if is_dot_entry(name) {
                Err(Nfsstat3::EXIST)
            } else {
                new
            }
        });
        let (r, wcc) = match checked {
            Ok(new) => self.s.create_wcc(self.cx, dir, name, new),
            Err(e) => (Err(e), self.wcc_unchanged(dir)),
        };
        match r.and_then(|(fh, a)| Ok((self.seal(&fh)?, a))) {
            Ok((wire, a)) => Res3::Create(Ok((Some(wire), a, wcc))),
            Err(e) => Res3::Create(Err((e, wcc))),
        }
    }

    pub fn remove(&self, dir: &Fh, name: &[u8], rmdir: bool) -> Res3<'static> {
        let checked = check_name_len(name).and_then(|()| {
            // Linux nfsd (nfsd_unlink): ACCES for "." and "..".
            match is_dot_entry(name) {
                true => Err(Nfsstat3::ACCES),
                false => Ok(()),
            }
        });
        let (r, wcc) = match checked {
            Ok(()) => self.s.remove_wcc(self.cx, dir, name, rmdir),
            Err(e) => (Err(e), self.wcc_unchanged(dir)),
        };
        Res3::Remove(r.err().unwrap_or(Nfsstat3::OK), wcc)
    }

    pub fn rename(&self, fd: &Fh, fname: &[u8], td: &Fh, tname: &[u8]) -> Res3<'static> {
        let checked = check_name_len(fname)
            .and_then(|()| check_name_len(tname))
            .and_then(|()| match is_dot_entry(fname) || is_dot_entry(tname) {
                // As Linux nfsd's `nfsd_rename` (the VM stage's part `cache` compares it).
                true => Err(Nfsstat3::PERM),
                false => Ok(()),
            });
        let (r, fw, tw) = match checked {
            Ok(()) => self.s.rename_wcc(self.cx, fd, fname, td, tname),
            Err(e) => (Err(e), self.wcc_unchanged(fd), self.wcc_unchanged(td)),
        };
        Res3::Rename(r.err().unwrap_or(Nfsstat3::OK), fw, tw)
    }

    pub fn link(&self, fh: &Fh, dir: &Fh, name: &[u8]) -> Res3<'static> {
        let checked = check_name_len(name).and_then(|()| match is_dot_entry(name) {
            true => Err(Nfsstat3::EXIST),
            false => Ok(()),
        });
        let (r, a, wcc) = match checked {
            Ok(()) => self.s.link_wcc(self.cx, fh, dir, name),
            Err(e) => (Err(e), self.attr(fh), self.wcc_unchanged(dir)),
        };
        Res3::Link(r.err().unwrap_or(Nfsstat3::OK), a, wcc)
    }
}
