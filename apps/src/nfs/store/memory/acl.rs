//! The memory store's POSIX ACLs (NFSACL GETACL and SETACL): kept on the inode, checked by
//! every permission check of the tree ([`Tree::subject`]), rewritten by `chmod` and
//! inherited from a directory's default ACL by the objects created in it, as a Linux file
//! system with ACLs does (`crate::nfs::acl` has the rules).
//!
//! Normal operation: an object holds an access ACL only while it says more than the mode;
//! setting one equivalent to a mode sets that mode instead. Every ACL is charged against the
//! capacity. Recovery: none needed; a refused SETACL changes nothing, except that the access
//! ACL stays set when the default ACL that follows it is refused, as Linux sets them one after
//! the other.

use super::charge;
use super::tree::{Body, Inode, Tree};
use crate::nfs::acl::{Acl, Acls};
use crate::nfs::identity::{self, Cred};
use crate::nfs::types::{Fattr3, Ftype3, NfsResult, Nfsstat3};

impl Tree {
    /// What a permission check of `id` reads, from one lookup of the inode: its attributes
    /// and its access ACL, when it has one.
    pub(super) fn subject(&self, id: u64) -> NfsResult<(Fattr3, Option<&Acl>)> {
        let i = self.node(id)?;
        let acl = i.acl.as_ref().and_then(|x| x.access.as_ref());
        Ok((self.attr_of(id, i), acl))
    }

    /// The ACLs of `id` (none set: empty).
    pub(super) fn acls(&self, id: u64) -> NfsResult<Acls> {
        Ok(self.node(id)?.acl.as_deref().cloned().unwrap_or_default())
    }

    /// The mode and ACLs an object of type `ftype` created with `mode` in directory `dir`
    /// gets: without a default ACL on `dir` (and for a symbolic link, which has no ACL) the
    /// mode less the creator's `umask` (RFC 8275 `mode_umask`; none: the mode as asked) and no
    /// ACL, else what [`Acl::inherit`] gives, the umask ignored, a directory also keeping the
    /// default (as a Linux creation: `posix_acl_create`).
    pub(super) fn inherited(
        dir: &Inode,
        ftype: Ftype3,
        mode: u32,
        umask: Option<u32>,
    ) -> (u32, Option<Box<Acls>>) {
        let default = dir.acl.as_ref().and_then(|a| a.default.as_ref());
        let Some(default) = default.filter(|_| ftype != Ftype3::Lnk) else {
            let umask = umask.filter(|_| ftype != Ftype3::Lnk).unwrap_or(0);
            return (mode & !(umask & 0o777), None);
        };
        let (mode, access) = default.inherit(mode);
        let acls = Acls {
            access,
            default: (ftype == Ftype3::Dir).then(|| default.clone()),
        };
        (mode, (!acls.is_empty()).then(|| Box::new(acls)))
    }

    /// SETACL of `id` by `cx`: the access ACL set (`Some`) or removed (`None`), then the
    /// default ACL, as Linux nfsd sets them (`set_posix_acl`): NOTSUPP on a symbolic link; a
    /// default ACL on anything but a directory ACCES (removing none is allowed); PERM unless
    /// `cx` owns the object or is root; INVAL for an ACL Linux would not take
    /// ([`Acl::valid`]); NOSPC past the capacity. An access ACL equivalent to a mode sets the
    /// mode and is not kept; setting one drops set-group-ID when `cx` is neither root nor in
    /// the file's group.
    pub(super) fn setacl(
        &mut self,
        cx: &Cred,
        id: u64,
        access: Option<&Acl>,
        default: Option<&Acl>,
    ) -> NfsResult<()> {
        if matches!(self.node(id)?.body, Body::Symlink(_)) {
            return Err(Nfsstat3::NOTSUPP);
        }
        self.set_one(cx, id, access, false)?;
        if !self.is_dir(id) {
            return match default {
                Some(_) => Err(Nfsstat3::ACCES),
                None => Ok(()),
            };
        }
        self.set_one(cx, id, default, true)
    }

    /// Sets one ACL of `id` (the default one when `is_default`), as [`Tree::setacl`] says.
    fn set_one(
        &mut self,
        cx: &Cred,
        id: u64,
        acl: Option<&Acl>,
        is_default: bool,
    ) -> NfsResult<()> {
        identity::may_own(cx, &self.attr(id)?)?;
        if acl.is_some_and(|a| !a.valid()) {
            return Err(Nfsstat3::INVAL);
        }
        let i = self.node(id)?;
        let mut next = i.acl.as_deref().cloned().unwrap_or_default();
        let mut mode = i.mode;
        let slot = if is_default {
            &mut next.default
        } else {
            &mut next.access
        };
        *slot = acl.cloned();
        if let (Some(a), false) = (acl, is_default) {
            let (m, more) = a.equiv_mode(mode);
            mode = m;
            if !more {
                next.access = None;
            }
            if !cx.is_root() && !cx.in_group(i.gid) {
                mode &= !0o2000;
            }
        }
        let before = charge::acls(i.acl.as_deref());
        let after = charge::acls(Some(&next).filter(|n| !n.is_empty()));
        self.fits(after.saturating_sub(before))?;
        let now = self.stamp();
        let i = self.node_mut(id)?;
        i.acl = (!next.is_empty()).then(|| Box::new(next));
        i.mode = mode;
        i.ctime = now;
        self.used = self.used - before + after;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemoryOptions, MemoryStore};
    use super::charge;
    use crate::nfs::acl::{tag, Ace, Acl};
    use crate::nfs::identity::Cred;
    use crate::nfs::store::Store;
    use crate::nfs::types::{CreateHow, Nfsstat3, Sattr3};

    /// An ACL naming `n` users.
    fn named(n: u32) -> Acl {
        let mut v = vec![Ace::new(tag::USER_OBJ, 0, 6), Ace::new(tag::OTHER, 0, 0)];
        v.extend((0..n).map(|i| Ace::new(tag::USER, 100 + i, 4)));
        v.extend([Ace::new(tag::GROUP_OBJ, 0, 4), Ace::new(tag::MASK, 0, 4)]);
        Acl::from_entries(v).expect("acl").expect("some")
    }

    #[test]
    fn accepts_acls_charged_against_the_capacity_and_released_with_the_file() {
        let cap = 64 << 10;
        let s = MemoryStore::new(MemoryOptions {
            capacity: cap,
            ..MemoryOptions::default()
        });
        let (r, root) = (Cred::ROOT, s.root());
        let free = |s: &MemoryStore| s.fsstat(&root).expect("fsstat").fbytes;
        let empty = free(&s);
        let how = CreateHow::Unchecked(Sattr3::default());
        let f = s.create(&r, &root, b"f", &how).expect("create");
        let with_file = free(&s);
        let a = named(100);
        s.setacl(&r, &f, Some(&a), None).expect("setacl");
        let acls = crate::nfs::acl::Acls {
            access: Some(a),
            default: None,
        };
        assert_eq!(with_file - free(&s), charge::acls(Some(&acls)));
        // An ACL past what is left: NOSPC, nothing changed.
        let big = named(1000);
        let before = s.getacl(&r, &f).expect("getacl");
        let small = MemoryStore::new(MemoryOptions {
            capacity: 2 * charge::INODE + charge::entry(1) + 1024,
            ..MemoryOptions::default()
        });
        let g = small.create(&r, &small.root(), b"g", &how).expect("create");
        assert_eq!(small.setacl(&r, &g, Some(&big), None), Err(Nfsstat3::NOSPC));
        assert_eq!(small.getacl(&r, &g).expect("getacl").1, Default::default());
        assert_eq!(s.getacl(&r, &f).expect("getacl"), before);
        // Removing the file releases the ACL's charge with it.
        s.remove(&r, &root, b"f").expect("remove");
        assert_eq!(free(&s), empty);
    }
}
