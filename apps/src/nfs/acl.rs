//! POSIX access control lists (POSIX 1003.1e draft 17, as Linux implements them): the
//! entries, their validity, what they grant, how they follow `chmod` and how a new object
//! inherits its directory's default ACL; the forms they travel in (the NFSACL protocol's
//! entries, [`crate::nfs::v3::nfsacl`], and Linux's `system.posix_acl_*` extended attributes,
//! which the directory store reads and writes).
//!
//! Normal operation: an object has an access ACL only when its permissions say more than its
//! mode (named users or groups, or a mask); the mode's group bits are then the mask, and every
//! change of one follows the other (`chmod` rewrites the owner, mask and other entries; setting
//! an ACL rewrites the mode), as the Linux VFS keeps them. A directory may also have a default
//! ACL, which its new entries inherit.
//!
//! Recovery: nothing is kept here; every function is pure. Bad input (unknown tags, bits past
//! `rwx`, entries out of order or missing) is refused by [`Acl::valid`] and the decoders, which
//! bound the number of entries by [`MAX_ENTRIES`] before anything is sized from it.

/// Most entries an ACL holds on the wire (Linux's `NFS_ACL_MAX_ENTRIES`).
pub const MAX_ENTRIES: usize = 1024;

/// Entry tags: the values POSIX ACLs have in Linux, in the NFSACL protocol and in the
/// extended attributes alike.
pub mod tag {
    /// The owner (`user::`).
    pub const USER_OBJ: u32 = 0x01;
    /// A named user (`user:ID:`).
    pub const USER: u32 = 0x02;
    /// The owning group (`group::`).
    pub const GROUP_OBJ: u32 = 0x04;
    /// A named group (`group:ID:`).
    pub const GROUP: u32 = 0x08;
    /// The mask: the most any group-class entry grants (`mask::`).
    pub const MASK: u32 = 0x10;
    /// Everyone else (`other::`).
    pub const OTHER: u32 = 0x20;
}

/// The identifier an entry without one carries in Linux's extended attributes.
const UNDEFINED_ID: u32 = u32::MAX;

/// One entry: a tag, the user or group id of a named entry (0 otherwise), `rwx` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ace {
    /// One of [`tag`].
    pub tag: u32,
    /// The named user or group; 0 for the other tags.
    pub id: u32,
    /// Read 4, write 2, execute 1.
    pub perm: u32,
}

impl Ace {
    /// An entry.
    pub const fn new(tag: u32, id: u32, perm: u32) -> Ace {
        Ace { tag, id, perm }
    }

    fn named(&self) -> bool {
        matches!(self.tag, tag::USER | tag::GROUP)
    }
}

/// An ACL: entries sorted by tag, then id (the order Linux keeps and checks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    entries: Vec<Ace>,
}

/// An object's ACLs: its access ACL (`None`: the mode says everything) and, on a directory,
/// the default ACL its new entries inherit (`None`: they get only their mode).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acls {
    /// What the object grants beyond its mode.
    pub access: Option<Acl>,
    /// What a directory's new entries inherit.
    pub default: Option<Acl>,
}

impl Acls {
    /// Whether neither ACL is set.
    pub fn is_empty(&self) -> bool {
        self.access.is_none() && self.default.is_none()
    }
}

/// Why an ACL from the wire or from an extended attribute was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclError {
    /// More than [`MAX_ENTRIES`] entries.
    TooMany,
    /// A tag that is none of [`tag`].
    BadTag(u32),
    /// Permission bits past `rwx` on an entry other than the mask.
    BadPerm(u32),
    /// An extended attribute that is not version 2 of Linux's format.
    BadXattr,
}

impl Acl {
    /// The ACL of `entries` as they arrive (any order, ids of unnamed entries ignored): sorted,
    /// and a four-entry ACL whose mask equals its group entry reduced to three (the NFSACL
    /// protocol always sends a mask; Linux's `posix_acl_from_nfsacl`). Mask bits past `rwx`
    /// are dropped (Solaris sets some); any other entry's are refused. `None` for no entries.
    pub fn from_entries(mut entries: Vec<Ace>) -> Result<Option<Acl>, AclError> {
        if entries.len() > MAX_ENTRIES {
            return Err(AclError::TooMany);
        }
        for e in &mut entries {
            match e.tag {
                tag::MASK => e.perm &= 7,
                tag::USER_OBJ | tag::USER | tag::GROUP_OBJ | tag::GROUP | tag::OTHER => {
                    if e.perm & !7 != 0 {
                        return Err(AclError::BadPerm(e.perm));
                    }
                }
                t => return Err(AclError::BadTag(t)),
            }
            if !e.named() {
                e.id = 0;
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        entries.sort_unstable_by_key(|e| (e.tag, e.id));
        let mut acl = Acl { entries };
        if acl.entries.len() == 4 {
            let group = acl.perm_of(tag::GROUP_OBJ);
            if group.is_some() && group == acl.perm_of(tag::MASK) {
                acl.entries.retain(|e| e.tag != tag::MASK);
            }
        }
        Ok(Some(acl))
    }

    /// The three-entry ACL a mode stands for (Linux's `posix_acl_from_mode`).
    pub fn from_mode(mode: u32) -> Acl {
        Acl {
            entries: vec![
                Ace::new(tag::USER_OBJ, 0, (mode >> 6) & 7),
                Ace::new(tag::GROUP_OBJ, 0, (mode >> 3) & 7),
                Ace::new(tag::OTHER, 0, mode & 7),
            ],
        }
    }

    /// The entries, sorted.
    pub fn entries(&self) -> &[Ace] {
        &self.entries
    }

    fn perm_of(&self, t: u32) -> Option<u32> {
        self.entries.iter().find(|e| e.tag == t).map(|e| e.perm)
    }

    /// Whether Linux's `posix_acl_valid` accepts it: one owner, one owning group and one other
    /// entry, named entries only with a mask, at most one mask, entries in tag order, no bits
    /// past `rwx`, no named id of -1 (which no user or group has).
    pub fn valid(&self) -> bool {
        // The next tag allowed, as Linux's state machine: USER_OBJ, then USER*, GROUP_OBJ,
        // then GROUP*, MASK?, OTHER.
        let mut state = tag::USER_OBJ;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return false;
            }
            match e.tag {
                tag::USER_OBJ if state == tag::USER_OBJ => state = tag::USER,
                tag::USER if state == tag::USER && e.id != UNDEFINED_ID => needs_mask = true,
                tag::GROUP_OBJ if state == tag::USER => state = tag::GROUP,
                tag::GROUP if state == tag::GROUP && e.id != UNDEFINED_ID => needs_mask = true,
                tag::MASK if state == tag::GROUP => state = tag::OTHER,
                tag::OTHER if state == tag::OTHER || (state == tag::GROUP && !needs_mask) => {
                    state = 0
                }
                _ => return false,
            }
        }
        state == 0
    }

    /// The permission bits of `mode` this ACL sets (owner, mask or owning group, other; the
    /// other bits of `mode` kept) and whether the ACL says more than them (named entries or a
    /// mask): Linux's `posix_acl_equiv_mode`.
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0;
        let mut more = false;
        for e in &self.entries {
            match e.tag {
                tag::USER_OBJ => bits |= e.perm << 6,
                tag::GROUP_OBJ => bits |= e.perm << 3,
                tag::OTHER => bits |= e.perm,
                tag::MASK => {
                    bits = (bits & !0o070) | (e.perm << 3);
                    more = true;
                }
                _ => more = true,
            }
        }
        ((mode & !0o777) | bits, more)
    }

    /// The ACL after `chmod(mode)`: owner, mask (the owning group without one) and other
    /// entries take the mode's bits (Linux's `posix_acl_chmod`).
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.perm_of(tag::MASK).is_some();
        for e in &mut self.entries {
            match e.tag {
                tag::USER_OBJ => e.perm = (mode >> 6) & 7,
                tag::OTHER => e.perm = mode & 7,
                tag::MASK => e.perm = (mode >> 3) & 7,
                tag::GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
                _ => {}
            }
        }
    }

    /// What an object created with `mode` in a directory whose default ACL this is gets: its
    /// mode (the requested bits less what the ACL withholds; no umask, as Linux nfsd asks
    /// none) and its access ACL (`None` when the mode says it all): Linux's
    /// `posix_acl_create`.
    pub fn inherit(&self, mode: u32) -> (u32, Option<Acl>) {
        let mut acl = self.clone();
        let mut m = mode & 0o777;
        let mut more = false;
        let mut has_mask = false;
        for e in &mut acl.entries {
            match e.tag {
                tag::USER_OBJ => {
                    e.perm &= (m >> 6) & 7;
                    m &= (e.perm << 6) | !0o700;
                }
                tag::OTHER => {
                    e.perm &= m & 7;
                    m &= e.perm | !0o007;
                }
                tag::MASK => {
                    has_mask = true;
                    more = true;
                }
                tag::USER | tag::GROUP => more = true,
                _ => {}
            }
        }
        let class = if has_mask { tag::MASK } else { tag::GROUP_OBJ };
        if let Some(e) = acl.entries.iter_mut().find(|e| e.tag == class) {
            e.perm &= (m >> 3) & 7;
            m &= (e.perm << 3) | !0o070;
        }
        let mode = (mode & !0o777) | m;
        (mode, more.then_some(acl))
    }

    /// Whether the group-class entries of this ACL grant user `uid`, a member of the groups
    /// `in_group` accepts, every bit of `want` on an object of group `gid` (Linux's
    /// `posix_acl_permission` past the owner, whom the mode decides): `Some(granted)` when an
    /// entry names the user or one of its groups, `None` when only the other entry applies.
    pub fn group_class(
        &self,
        uid: u32,
        in_group: &dyn Fn(u32) -> bool,
        gid: u32,
        want: u32,
    ) -> Option<bool> {
        let mask = self.perm_of(tag::MASK).unwrap_or(7);
        let mut found = false;
        for e in &self.entries {
            match e.tag {
                tag::USER if e.id == uid => return Some(e.perm & mask & want == want),
                tag::GROUP_OBJ | tag::GROUP => {
                    let g = if e.tag == tag::GROUP_OBJ { gid } else { e.id };
                    if in_group(g) {
                        found = true;
                        if e.perm & want == want {
                            return Some(e.perm & mask & want == want);
                        }
                    }
                }
                _ => {}
            }
        }
        found.then_some(false)
    }

    /// Linux's extended attribute form (`system.posix_acl_access` / `_default`): a
    /// little-endian version 2 header, then per entry a 16-bit tag, 16-bit permissions and a
    /// 32-bit id (-1 for unnamed entries).
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.entries.len());
        v.extend_from_slice(&2u32.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&(e.tag as u16).to_le_bytes());
            v.extend_from_slice(&(e.perm as u16).to_le_bytes());
            let id = if e.named() { e.id } else { UNDEFINED_ID };
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    /// The ACL an extended attribute in Linux's form holds (`None` for no entries).
    pub fn from_xattr(b: &[u8]) -> Result<Option<Acl>, AclError> {
        let (head, body) = b.split_at_checked(4).ok_or(AclError::BadXattr)?;
        if head != 2u32.to_le_bytes() || body.len() % 8 != 0 {
            return Err(AclError::BadXattr);
        }
        if body.len() / 8 > MAX_ENTRIES {
            return Err(AclError::TooMany);
        }
        let entries = body
            .chunks_exact(8)
            .map(|c| {
                Ace::new(
                    u32::from(u16::from_le_bytes([c[0], c[1]])),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                    u32::from(u16::from_le_bytes([c[2], c[3]])),
                )
            })
            .collect();
        Acl::from_entries(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACL from `(tag, id, perm)` triples, as they arrive.
    fn acl(e: &[(u32, u32, u32)]) -> Acl {
        let v = e.iter().map(|&(t, i, p)| Ace::new(t, i, p)).collect();
        Acl::from_entries(v).expect("entries").expect("some")
    }

    /// `user::rw-, user:2000:r--, group::r--, mask::r--, other::---` (what `setfacl -m
    /// u:2000:r` makes of a 0640 file).
    fn extended() -> Acl {
        acl(&[
            (tag::OTHER, 9, 0),
            (tag::USER, 2000, 4),
            (tag::MASK, 9, 4),
            (tag::GROUP_OBJ, 9, 4),
            (tag::USER_OBJ, 9, 6),
        ])
    }

    #[test]
    fn accepts_entries_in_any_order_and_sorts_them() {
        let a = extended();
        let tags: Vec<u32> = a.entries().iter().map(|e| e.tag).collect();
        assert_eq!(
            tags,
            [
                tag::USER_OBJ,
                tag::USER,
                tag::GROUP_OBJ,
                tag::MASK,
                tag::OTHER
            ]
        );
        // Unnamed entries' ids are ignored; named ones kept.
        assert_eq!(a.entries()[0].id, 0);
        assert_eq!(a.entries()[1].id, 2000);
        assert!(a.valid());
    }

    #[test]
    fn accepts_a_four_entry_acl_with_the_group_mask_as_the_minimal_one() {
        // The NFSACL protocol always sends a mask (nfsacl.c, "Minimal ACLs always have an
        // ACL_MASK entry").
        let a = acl(&[
            (tag::USER_OBJ, 0, 7),
            (tag::GROUP_OBJ, 0, 5),
            (tag::MASK, 0, 5),
            (tag::OTHER, 0, 5),
        ]);
        assert_eq!(a, Acl::from_mode(0o755));
        assert_eq!(a.equiv_mode(0o100000), (0o100755, false));
        // A mask other than the group's is kept: not equivalent to a mode.
        let b = acl(&[
            (tag::USER_OBJ, 0, 7),
            (tag::GROUP_OBJ, 0, 5),
            (tag::MASK, 0, 1),
            (tag::OTHER, 0, 5),
        ]);
        assert_eq!(b.entries().len(), 4);
        assert_eq!(b.equiv_mode(0), (0o715, true));
    }

    #[test]
    fn rejects_unknown_tags_bits_past_rwx_and_too_many_entries() {
        let one = |t, p| Acl::from_entries(vec![Ace::new(t, 0, p)]);
        assert_eq!(one(0x40, 0), Err(AclError::BadTag(0x40)));
        assert_eq!(one(0, 0), Err(AclError::BadTag(0)));
        assert_eq!(one(tag::USER_OBJ, 8), Err(AclError::BadPerm(8)));
        assert_eq!(one(tag::OTHER, 0x10), Err(AclError::BadPerm(0x10)));
        // The mask's extra bits are dropped (Solaris sets some).
        let m = one(tag::MASK, 0xff).expect("mask").expect("some");
        assert_eq!(m.entries()[0].perm, 7);
        let many = vec![Ace::new(tag::USER, 1, 0); MAX_ENTRIES + 1];
        assert_eq!(Acl::from_entries(many), Err(AclError::TooMany));
        assert_eq!(Acl::from_entries(Vec::new()), Ok(None));
    }

    #[test]
    fn rejects_what_posix_acl_valid_refuses() {
        let ok = |e: &[(u32, u32, u32)]| acl(e).valid();
        let (uo, u, go, g, m, o) = (
            tag::USER_OBJ,
            tag::USER,
            tag::GROUP_OBJ,
            tag::GROUP,
            tag::MASK,
            tag::OTHER,
        );
        assert!(ok(&[(uo, 0, 6), (go, 0, 4), (o, 0, 4)]));
        assert!(ok(&[(uo, 0, 6), (go, 0, 4), (m, 0, 4), (o, 0, 4)]));
        assert!(ok(&[
            (uo, 0, 6),
            (g, 7, 4),
            (go, 0, 4),
            (m, 0, 4),
            (o, 0, 0)
        ]));
        // Named entries need a mask.
        assert!(!ok(&[(uo, 0, 6), (u, 7, 4), (go, 0, 4), (o, 0, 0)]));
        // Missing owner, owning group or other entries.
        assert!(!ok(&[(go, 0, 4), (o, 0, 4)]));
        assert!(!ok(&[(uo, 0, 6), (o, 0, 4)]));
        assert!(!ok(&[(uo, 0, 6), (go, 0, 4)]));
        // Two owner entries.
        assert!(!ok(&[(uo, 0, 6), (uo, 0, 6), (go, 0, 4), (o, 0, 4)]));
        // A named id no user or group has.
        assert!(!ok(&[
            (uo, 0, 6),
            (u, u32::MAX, 4),
            (go, 0, 4),
            (m, 0, 4),
            (o, 0, 0)
        ]));
    }

    #[test]
    fn accepts_chmod_rewriting_the_mask_not_the_owning_group() {
        let mut a = extended();
        a.chmod(0o751);
        let perms: Vec<u32> = a.entries().iter().map(|e| e.perm).collect();
        // user::rwx, user:2000 unchanged, group:: unchanged, mask::r-x, other::--x
        assert_eq!(perms, [7, 4, 4, 5, 1]);
        let mut b = Acl::from_mode(0o644);
        b.chmod(0o700);
        assert_eq!(b, Acl::from_mode(0o700));
    }

    #[test]
    fn accepts_inheritance_as_posix_acl_create() {
        // default: user::rwx, user:2000:rwx, group::r-x, mask::rwx, other::---
        let d = acl(&[
            (tag::USER_OBJ, 0, 7),
            (tag::USER, 2000, 7),
            (tag::GROUP_OBJ, 0, 5),
            (tag::MASK, 0, 7),
            (tag::OTHER, 0, 0),
        ]);
        // A file asked for 0666: the mask and owner lose execute; other gets nothing.
        let (mode, access) = d.inherit(0o100666);
        assert_eq!(mode, 0o100660);
        let perms: Vec<u32> = access
            .expect("access")
            .entries()
            .iter()
            .map(|e| e.perm)
            .collect();
        assert_eq!(perms, [6, 7, 5, 6, 0]);
        // A default that is only a mode gives no access ACL.
        let (mode, access) = Acl::from_mode(0o750).inherit(0o777);
        assert_eq!((mode, access), (0o750, None));
    }

    #[test]
    fn accepts_and_rejects_as_generic_permission() {
        let a = extended();
        let in_100 = |g: u32| g == 100;
        let none = |_: u32| false;
        // The named user: read, not write (the entry says r--).
        assert_eq!(a.group_class(2000, &none, 100, 4), Some(true));
        assert_eq!(a.group_class(2000, &none, 100, 2), Some(false));
        // A group member: the owning group's entry; nobody else: only the other entry.
        assert_eq!(a.group_class(3000, &in_100, 100, 4), Some(true));
        assert_eq!(a.group_class(3000, &none, 100, 4), None);
        // The mask limits a named entry: with the mask at --x, user:2000 may not read.
        let mut masked = a.clone();
        masked.chmod(0o610);
        assert_eq!(masked.group_class(2000, &none, 100, 4), Some(false));
        // A group entry that matches but does not grant denies, even when other would.
        let g = acl(&[
            (tag::USER_OBJ, 0, 6),
            (tag::GROUP_OBJ, 0, 0),
            (tag::MASK, 0, 4),
            (tag::OTHER, 0, 4),
        ]);
        assert_eq!(g.group_class(3000, &in_100, 100, 4), Some(false));
    }

    #[test]
    fn accepts_the_xattr_form_linux_writes() {
        let a = extended();
        let x = a.to_xattr();
        let mut want = vec![2, 0, 0, 0];
        for (t, p, id) in [
            (1u16, 6u16, u32::MAX),
            (2, 4, 2000),
            (4, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            want.extend_from_slice(&t.to_le_bytes());
            want.extend_from_slice(&p.to_le_bytes());
            want.extend_from_slice(&id.to_le_bytes());
        }
        assert_eq!(x, want);
        assert_eq!(Acl::from_xattr(&x), Ok(Some(a)));
        assert_eq!(Acl::from_xattr(&[1, 0, 0, 0]), Err(AclError::BadXattr));
        assert_eq!(Acl::from_xattr(&x[..x.len() - 1]), Err(AclError::BadXattr));
        assert_eq!(Acl::from_xattr(&[2, 0]), Err(AclError::BadXattr));
    }
}
