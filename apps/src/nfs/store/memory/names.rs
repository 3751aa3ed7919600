//! The memory store's namespace changes that remove or move entries: REMOVE, RMDIR, LINK and
//! RENAME on the [`Tree`], each under the caller's identity.
//!
//! Normal operation: each method checks every error it can answer (names, types, permission
//! with the sticky bit as [`identity::may_unlink`], capacity for a new entry) before it
//! changes anything, and moves the charge of entries and inodes with them. Recovery: none
//! needed; an error leaves the tree as it was.

use super::charge;
use super::tree::{check_name, Body, Tree, ROOT};
use crate::nfs::identity::{self, Cred, Want};
use crate::nfs::types::{is_dot_entry, NfsResult, Nfsstat3};

impl Tree {
    /// One link to `id` is gone: nlink, ctime, and the inode itself (and its charge) at zero
    /// links.
    fn drop_link(&mut self, id: u64) -> NfsResult<()> {
        let now = self.stamp();
        let i = self.node_mut(id)?;
        i.nlink = i.nlink.saturating_sub(1);
        i.ctime = now;
        if i.nlink == 0 || matches!(i.body, Body::Dir(_)) {
            self.used -= self.inode_charge(id);
            self.inodes.remove(&id);
        }
        Ok(())
    }

    /// Takes entry `name` (naming `id`) out of `dir`, with its charge.
    fn unlink_entry(&mut self, dir: u64, name: &[u8]) -> NfsResult<()> {
        self.dir_mut(dir)?.remove(name);
        self.used -= charge::entry(name.len());
        Ok(())
    }

    /// The entry `name` of `dir` that `cx` may remove: NOENT, then ACCES (write and search on
    /// `dir`, the sticky bit).
    fn victim(&self, cx: &Cred, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let id = self.dir(dir)?.get(name).ok_or(Nfsstat3::NOENT)?;
        let (d, acl) = self.subject(dir)?;
        identity::may_unlink(cx, &d, acl, &self.attr(id)?)?;
        Ok(id)
    }

    /// REMOVE.
    pub(super) fn remove(&mut self, cx: &Cred, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_name(name)?;
        self.dir(dir)?;
        if is_dot_entry(name) {
            return Err(Nfsstat3::ACCES);
        }
        let id = self.victim(cx, dir, name)?;
        if self.is_dir(id) {
            return Err(Nfsstat3::ISDIR);
        }
        self.unlink_entry(dir, name)?;
        self.drop_link(id)?;
        self.touch_dir(dir, 0)
    }

    /// RMDIR.
    pub(super) fn rmdir(&mut self, cx: &Cred, dir: u64, name: &[u8]) -> NfsResult<()> {
        check_name(name)?;
        self.dir(dir)?;
        match name {
            b"." => return Err(Nfsstat3::INVAL),
            b".." => return Err(Nfsstat3::NOTEMPTY),
            _ => {}
        }
        let id = self.victim(cx, dir, name)?;
        if !self.dir(id)?.is_empty() {
            return Err(Nfsstat3::NOTEMPTY);
        }
        self.unlink_entry(dir, name)?;
        self.drop_link(id)?;
        self.touch_dir(dir, -1)
    }

    /// LINK: write and search on `dir`; ISDIR for a directory; the new entry is charged.
    pub(super) fn link(&mut self, cx: &Cred, id: u64, dir: u64, name: &[u8]) -> NfsResult<()> {
        self.may_dir(cx, dir, Want::WRITE_EXEC)?;
        if self.is_dir(id) {
            return Err(Nfsstat3::ISDIR);
        }
        self.check_absent(dir, name)?;
        if self.node(id)?.nlink == u32::MAX {
            return Err(Nfsstat3::MLINK);
        }
        let cost = charge::entry(name.len());
        self.fits(cost)?;
        let now = self.stamp();
        let i = self.node_mut(id)?;
        i.nlink += 1;
        i.ctime = now;
        self.dir_mut(dir)?.insert(name, id);
        self.used += cost;
        self.touch_dir(dir, 0)
    }

    /// True when directory `id` is `anc` or lies below it.
    fn is_under(&self, mut id: u64, anc: u64) -> bool {
        loop {
            if id == anc {
                return true;
            }
            match self.dir(id) {
                Ok(d) if id != ROOT => id = d.parent,
                _ => return false,
            }
        }
    }

    /// What RENAME needs of `cx` (Linux `vfs_rename`): removing the source from `fdir` and
    /// the target (when there is one) from `tdir` as [`identity::may_unlink`], else write and
    /// search on `tdir`; a directory moving to another parent needs write on itself (its
    /// `..` changes).
    fn may_rename(
        &self,
        cx: &Cred,
        (fdir, src): (u64, u64),
        (tdir, target): (u64, Option<u64>),
    ) -> NfsResult<()> {
        let (from, from_acl) = self.subject(fdir)?;
        identity::may_unlink(cx, &from, from_acl, &self.attr(src)?)?;
        let (to, to_acl) = self.subject(tdir)?;
        match target {
            Some(t) => identity::may_unlink(cx, &to, to_acl, &self.attr(t)?)?,
            None => identity::may(cx, &to, to_acl, Want::WRITE_EXEC)?,
        }
        if self.is_dir(src) && fdir != tdir {
            let (s, acl) = self.subject(src)?;
            identity::may(cx, &s, acl, Want::WRITE)?;
        }
        Ok(())
    }

    /// RENAME.
    pub(super) fn rename(
        &mut self,
        cx: &Cred,
        (fdir, fname): (u64, &[u8]),
        (tdir, tname): (u64, &[u8]),
    ) -> NfsResult<()> {
        check_name(fname)?;
        check_name(tname)?;
        let src = self.dir(fdir)?.get(fname);
        let target = self.dir(tdir)?.get(tname);
        if is_dot_entry(fname) || is_dot_entry(tname) {
            return Err(Nfsstat3::PERM);
        }
        let src = src.ok_or(Nfsstat3::NOENT)?;
        if (fdir == tdir && fname == tname) || target == Some(src) {
            return Ok(());
        }
        self.may_rename(cx, (fdir, src), (tdir, target))?;
        let src_dir = self.is_dir(src);
        if let Some(t) = target {
            match (src_dir, self.is_dir(t)) {
                (true, false) => return Err(Nfsstat3::NOTDIR),
                (false, true) => return Err(Nfsstat3::ISDIR),
                (true, true) if !self.dir(t)?.is_empty() => return Err(Nfsstat3::NOTEMPTY),
                _ => {}
            }
        }
        if src_dir && self.is_under(tdir, src) {
            return Err(Nfsstat3::INVAL);
        }
        let grow = charge::entry(tname.len());
        let freed = charge::entry(fname.len()) + target.map_or(0, |_| grow);
        if grow > freed {
            self.fits(grow - freed)?;
        }
        if let Some(t) = target {
            self.unlink_entry(tdir, tname)?;
            self.drop_link(t)?;
            if src_dir {
                self.touch_dir(tdir, -1)?;
            }
        }
        self.unlink_entry(fdir, fname)?;
        self.dir_mut(tdir)?.insert(tname, src);
        self.used += grow;
        let now = self.stamp();
        let s = self.node_mut(src)?;
        s.ctime = now;
        if let Body::Dir(d) = &mut s.body {
            d.parent = tdir;
        }
        let moved_dir = (src_dir && fdir != tdir) as i32;
        self.touch_dir(fdir, -moved_dir)?;
        self.touch_dir(tdir, moved_dir)
    }
}
