//! The memory store's user extended attributes (RFC 8276 GETXATTR, SETXATTR, LISTXATTRS and
//! REMOVEXATTR; Linux's `user.` namespace): kept on the inode by name (without `user.`), with
//! Linux's rules (`xattr_permission`, and Linux nfsd's read or write permission on the object
//! first).
//!
//! Normal operation: only regular files and directories carry them; GETXATTR and LISTXATTRS
//! need read permission, SETXATTR and REMOVEXATTR write permission and, in a sticky
//! directory, ownership (or root). Names are listed in their sorted order, which stays while
//! the set does not change. Every attribute is charged against the capacity ([`charge::xattr`]),
//! and one object's attributes may take at most [`XATTR_OBJ_MAX`] octets as Linux counts them
//! before the value being set, which [`XATTR_SIZE_MAX`] alone bounds (so a value of that size is
//! storable, and a listing of the names never passes [`XATTR_OBJ_MAX`], Linux's
//! `XATTR_LIST_MAX`); a change stamps the ctime. Recovery: none needed; every refusal is checked before anything
//! changes, and the charge goes with the inode when it is freed ([`Tree::inode_charge`]).

use super::charge;
use super::tree::{Tree, Xattrs};
use crate::nfs::identity::{self, Cred, Want, S_ISVTX};
use crate::nfs::store::{check_xattr_name, XattrSet, XATTR_OBJ_MAX, XATTR_SIZE_MAX};
use crate::nfs::types::{Ftype3, NfsResult, Nfsstat3};

impl Xattrs {
    /// What the attributes are charged against the capacity: [`charge::XATTRS`] and
    /// [`charge::xattr`] of each.
    pub(super) fn charged(&self) -> u64 {
        let each = self
            .map
            .iter()
            .map(|(n, v)| charge::xattr(n.len(), v.len()));
        charge::XATTRS + each.sum::<u64>()
    }
}

/// What one attribute counts against [`XATTR_OBJ_MAX`]: `user.`, its name and a NUL (as
/// Linux's `listxattr` lists it) and its value.
fn obj_size(name_len: usize, value_len: usize) -> usize {
    5 + name_len + 1 + value_len
}

/// Whether an object of type `t` carries user extended attributes (Linux's
/// `xattr_permission`: regular files and directories only).
fn carries(t: Ftype3) -> bool {
    matches!(t, Ftype3::Reg | Ftype3::Dir)
}

impl Tree {
    /// ACCES unless `cx` holds `want` on `id` (as Linux nfsd's `fh_verify` with
    /// NFSD_MAY_READ or NFSD_MAY_WRITE: the mode and ACL, no owner override); whether `id`
    /// carries user extended attributes.
    fn xattr_access(&self, cx: &Cred, id: u64, want: Want) -> NfsResult<bool> {
        let (a, acl) = self.subject(id)?;
        identity::may(cx, &a, acl, want)?;
        if want == Want::WRITE {
            if !carries(a.ftype) {
                return Err(Nfsstat3::PERM);
            }
            let sticky = a.ftype == Ftype3::Dir && a.mode & S_ISVTX != 0;
            if sticky && !cx.is_root() && cx.uid != a.uid {
                return Err(Nfsstat3::PERM);
            }
        }
        Ok(carries(a.ftype))
    }

    /// GETXATTR of `name` on `id` for `cx` into `out`: its length (NOXATTR, TOOSMALL).
    pub(super) fn getxattr(
        &self,
        cx: &Cred,
        id: u64,
        name: &[u8],
        out: &mut [u8],
    ) -> NfsResult<usize> {
        check_xattr_name(name)?;
        if !self.xattr_access(cx, id, Want::READ)? {
            return Err(Nfsstat3::NOXATTR);
        }
        let x = self.node(id)?.xattrs.as_deref();
        let v = x.and_then(|x| x.map.get(name)).ok_or(Nfsstat3::NOXATTR)?;
        let to = out.get_mut(..v.len()).ok_or(Nfsstat3::TOOSMALL)?;
        to.copy_from_slice(v);
        Ok(v.len())
    }

    /// LISTXATTRS of `id` for `cx`: `each` name in order (none on anything but a regular
    /// file or a directory).
    pub(super) fn listxattrs(
        &self,
        cx: &Cred,
        id: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> NfsResult<()> {
        self.xattr_access(cx, id, Want::READ)?;
        if let Some(x) = self.node(id)?.xattrs.as_deref() {
            x.map.keys().for_each(|n| each(n));
        }
        Ok(())
    }

    /// SETXATTR of `name` to `value` on `id` for `cx`, as `how` says: XATTR2BIG past
    /// [`XATTR_SIZE_MAX`], PERM / ACCES ([`Tree::xattr_access`]), EXIST / NOXATTR, NOSPC
    /// when the object's other attributes and this name pass [`XATTR_OBJ_MAX`] or past the
    /// capacity; the ctime moves.
    pub(super) fn setxattr(
        &mut self,
        cx: &Cred,
        id: u64,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> NfsResult<()> {
        check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Nfsstat3::XATTR2BIG);
        }
        self.xattr_access(cx, id, Want::WRITE)?;
        let x = self.node(id)?.xattrs.as_deref();
        let old = x.and_then(|x| x.map.get(name)).map(|v| v.len());
        match (how, old) {
            (XattrSet::Create, Some(_)) => return Err(Nfsstat3::EXIST),
            (XattrSet::Replace, None) => return Err(Nfsstat3::NOXATTR),
            _ => {}
        }
        let others = x.map_or(0, |x| x.size) - old.map_or(0, |o| obj_size(name.len(), o));
        // The new value is bounded by XATTR_SIZE_MAX alone: one of that size is storable.
        if others + obj_size(name.len(), 0) > XATTR_OBJ_MAX {
            return Err(Nfsstat3::NOSPC);
        }
        let size = others + obj_size(name.len(), value.len());
        let before = old.map_or(0, |o| charge::xattr(name.len(), o));
        let first = if x.is_none() { charge::XATTRS } else { 0 };
        let after = charge::xattr(name.len(), value.len()) + first;
        self.fits(after.saturating_sub(before))?;
        let now = self.stamp();
        let i = self.node_mut(id)?;
        let x = i.xattrs.get_or_insert_with(Box::default);
        x.map.insert(name.into(), value.into());
        x.size = size;
        i.ctime = now;
        self.used = self.used - before + after;
        Ok(())
    }

    /// REMOVEXATTR of `name` on `id` for `cx`: PERM / ACCES ([`Tree::xattr_access`]),
    /// NOXATTR when absent; the ctime moves and the charge is released.
    pub(super) fn removexattr(&mut self, cx: &Cred, id: u64, name: &[u8]) -> NfsResult<()> {
        check_xattr_name(name)?;
        self.xattr_access(cx, id, Want::WRITE)?;
        let x = self.node(id)?.xattrs.as_deref();
        if !x.is_some_and(|x| x.map.contains_key(name)) {
            return Err(Nfsstat3::NOXATTR);
        }
        let now = self.stamp();
        let i = self.node_mut(id)?;
        let x = i.xattrs.as_deref_mut().ok_or(Nfsstat3::NOXATTR)?;
        let v = x.map.remove(name).ok_or(Nfsstat3::NOXATTR)?;
        x.size -= obj_size(name.len(), v.len());
        let mut freed = charge::xattr(name.len(), v.len());
        if x.map.is_empty() {
            i.xattrs = None;
            freed += charge::XATTRS;
        }
        i.ctime = now;
        self.used -= freed;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemoryOptions, MemoryStore};
    use super::{charge, obj_size};
    use crate::nfs::identity::Cred;
    use crate::nfs::store::{Store, XattrSet, XATTR_OBJ_MAX};
    use crate::nfs::types::{CreateHow, Nfsstat3, Sattr3};

    const R: Cred = Cred::ROOT;

    #[test]
    fn rejects_attributes_past_one_objects_limit() {
        let s = MemoryStore::new(MemoryOptions::default());
        let how = CreateHow::Unchecked(Sattr3::default());
        let f = s.create(&R, &s.root(), b"f", &how).expect("create");
        let value = [7u8; 1000];
        let mut used = 0;
        let mut n = 0;
        loop {
            let name = format!("a{n:04}");
            let r = s.setxattr_wcc(&R, &f, name.as_bytes(), &value, XattrSet::Create);
            if used + obj_size(name.len(), 0) > XATTR_OBJ_MAX {
                assert_eq!(r.0, Err(Nfsstat3::NOSPC), "past the limit at {n}");
                assert_eq!(r.1.before.map(|b| b.ctime), r.1.after.map(|a| a.ctime));
                break;
            }
            r.0.expect("setxattr");
            used += obj_size(name.len(), value.len());
            n += 1;
        }
        assert_eq!(n, 65, "attributes of 1011 octets as counted");
        let mut names = 0;
        s.listxattrs(&R, &f, &mut |_| names += 1).expect("list");
        assert_eq!(names, n);
        // Replacing one counts the others only; so does a new one once some are removed.
        s.setxattr_wcc(&R, &f, b"a0000", &[1; 4000], XattrSet::Replace)
            .0
            .expect("replace");
        for i in 1..8 {
            let name = format!("a{i:04}");
            s.removexattr_wcc(&R, &f, name.as_bytes())
                .0
                .expect("remove");
        }
        s.setxattr_wcc(&R, &f, b"b", &[2; 30_000], XattrSet::Create)
            .0
            .expect("a large value once the others leave room for its name");
        let r = s.setxattr_wcc(&R, &f, b"c", b"", XattrSet::Create).0;
        assert_eq!(r, Err(Nfsstat3::NOSPC));
        // One attribute may be of the largest size; another beside it is then refused.
        let g = s.create(&R, &s.root(), b"g", &how).expect("create");
        let max = vec![9u8; crate::nfs::store::XATTR_SIZE_MAX];
        s.setxattr_wcc(&R, &g, b"max", &max, XattrSet::Create)
            .0
            .expect("the largest value");
        let r = s.setxattr_wcc(&R, &g, b"b", b"", XattrSet::Create).0;
        assert_eq!(r, Err(Nfsstat3::NOSPC));
        s.setxattr_wcc(&R, &g, b"max", &max[1..], XattrSet::Replace)
            .0
            .expect("replaced");
        // A directory has its own limit.
        let d = s
            .mkdir(&R, &s.root(), b"d", &Sattr3::default())
            .expect("mkdir");
        s.setxattr_wcc(&R, &d, b"a", &value, XattrSet::Either)
            .0
            .expect("directory");
    }

    #[test]
    fn accepts_xattrs_charged_against_the_capacity_and_released_with_the_file() {
        let s = MemoryStore::new(MemoryOptions {
            capacity: 1 << 20,
            ..MemoryOptions::default()
        });
        let root = s.root();
        let free = |s: &MemoryStore| s.fsstat(&root).expect("fsstat").fbytes;
        let empty = free(&s);
        let how = CreateHow::Unchecked(Sattr3::default());
        let f = s.create(&R, &root, b"f", &how).expect("create");
        let with_file = free(&s);
        s.setxattr_wcc(&R, &f, b"one", &[1; 100], XattrSet::Either)
            .0
            .expect("set");
        s.setxattr_wcc(&R, &f, b"two", &[2; 3000], XattrSet::Either)
            .0
            .expect("set");
        let both = charge::XATTRS + charge::xattr(3, 100) + charge::xattr(3, 3000);
        assert_eq!(with_file - free(&s), both);
        // Replaced: charged its new size.
        s.setxattr_wcc(&R, &f, b"two", &[2; 10], XattrSet::Replace)
            .0
            .expect("replace");
        let now = charge::XATTRS + charge::xattr(3, 100) + charge::xattr(3, 10);
        assert_eq!(with_file - free(&s), now);
        // Removing all of them releases everything; removing the file releases the rest.
        s.removexattr_wcc(&R, &f, b"one").0.expect("remove");
        s.removexattr_wcc(&R, &f, b"two").0.expect("remove");
        assert_eq!(free(&s), with_file);
        s.setxattr_wcc(&R, &f, b"three", &[3; 5000], XattrSet::Either)
            .0
            .expect("set");
        assert!(free(&s) < with_file);
        s.remove(&R, &root, b"f").expect("remove");
        assert_eq!(free(&s), empty);
        // A value past what is left: NOSPC, nothing changed.
        let small = MemoryStore::new(MemoryOptions {
            capacity: 2 * charge::INODE + charge::entry(1) + 4096,
            ..MemoryOptions::default()
        });
        let g = small.create(&R, &small.root(), b"g", &how).expect("create");
        let r = small.setxattr_wcc(&R, &g, b"big", &[0; 8192], XattrSet::Either);
        assert_eq!(r.0, Err(Nfsstat3::NOSPC));
        assert_eq!(r.1.before.map(|b| b.ctime), r.1.after.map(|a| a.ctime));
        let mut names = 0;
        small.listxattrs(&R, &g, &mut |_| names += 1).expect("list");
        assert_eq!(names, 0);
    }

    #[test]
    fn rejects_malformed_names_without_panicking() {
        let s = MemoryStore::new(MemoryOptions::default());
        let how = CreateHow::Unchecked(Sattr3::default());
        let f = s.create(&R, &s.root(), b"f", &how).expect("create");
        let long = [b'n'; 251];
        for (bad, want) in [
            (&b""[..], Nfsstat3::INVAL),
            (b"a\0b", Nfsstat3::INVAL),
            (&long, Nfsstat3::NAMETOOLONG),
        ] {
            let mut out = [0u8; 8];
            assert_eq!(s.getxattr(&R, &f, bad, &mut out), Err(want));
            let r = s.setxattr_wcc(&R, &f, bad, b"v", XattrSet::Either).0;
            assert_eq!(r, Err(want));
            assert_eq!(s.removexattr_wcc(&R, &f, bad).0, Err(want));
        }
        let big = vec![0u8; crate::nfs::store::XATTR_SIZE_MAX + 1];
        let r = s.setxattr_wcc(&R, &f, b"big", &big, XattrSet::Either).0;
        assert_eq!(r, Err(Nfsstat3::XATTR2BIG));
    }
}
