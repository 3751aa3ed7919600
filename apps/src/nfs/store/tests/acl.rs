//! The POSIX ACL part of the store conformance suite, run against both stores: the directory
//! store's ACLs are the Linux kernel's own (extended attributes on the temp directory's file
//! system, checked by the kernel), so the memory store must answer every step as the kernel
//! does: SETACL's errors and its effect on the mode, what an ACL grants and refuses, `chmod`
//! rewriting the mask, default ACLs inherited by new files and directories, removal.
//!
//! Normal operation: each store works in its own directory of the export. Recovery: the
//! directory store's temp directory is removed when its test ends.

use super::*;
use crate::nfs::acl::{tag, Ace, Acl, Acls};

/// The owner of the objects (group 100).
const OWNER: Cred = Cred::new(1000, 100);
/// The user the ACLs name.
const NAMED: Cred = Cred::new(2000, 400);
/// A member of the owning group.
const MEMBER: Cred = Cred::new(3000, 100);
/// Neither named, owner nor member.
const STRANGER: Cred = Cred::new(4000, 400);

/// An ACL of `(tag, id, perm)` entries.
fn acl(e: &[(u32, u32, u32)]) -> Acl {
    let v = e.iter().map(|&(t, i, p)| Ace::new(t, i, p)).collect();
    Acl::from_entries(v).expect("entries").expect("some")
}

/// `user::rw-, user:2000:rw-, group::r--, mask::rw-, other::---`.
fn named_rw() -> Acl {
    acl(&[
        (tag::USER_OBJ, 0, 6),
        (tag::USER, 2000, 6),
        (tag::GROUP_OBJ, 0, 4),
        (tag::MASK, 0, 6),
        (tag::OTHER, 0, 0),
    ])
}

/// The `rwx` of what `cx` may do with file `f`: ACCESS's READ and MODIFY, and whether READ
/// and WRITE of its data succeed.
fn rights(s: &dyn Store, cx: &Cred, f: &Fh) -> (u32, bool, bool) {
    let (_, got) = s
        .access(cx, f, access::READ | access::MODIFY)
        .expect("access");
    let mut buf = [0u8; 4];
    let read = s.read(cx, f, 0, &mut buf).is_ok();
    let write = s.write(cx, f, 0, b"w", StableHow::Unstable).is_ok();
    (got, read, write)
}

/// The whole ACL part, in directory `d` of `s`.
pub(super) fn acls(s: &dyn Store, d: &Fh) {
    let how = CreateHow::Guarded(mode(0o640));
    let f = s.create(&R, d, b"f", &how).expect("create");
    perm::own(s, &f, 1000, 100, 0o640);
    setting(s, d, &f);
    granting(s, &f);
    inheriting(s, d);
}

/// SETACL: who may, what it refuses, what it does to the mode.
fn setting(s: &dyn Store, d: &Fh, f: &Fh) {
    let a = named_rw();
    assert_eq!(s.setacl(&NAMED, f, Some(&a), None), Err(Nfsstat3::PERM));
    assert_eq!(s.setacl(&STRANGER, f, None, None), Err(Nfsstat3::PERM));
    // Named entries without a mask: INVAL (by the owner).
    let bad = acl(&[
        (tag::USER_OBJ, 0, 6),
        (tag::USER, 2000, 6),
        (tag::GROUP_OBJ, 0, 4),
        (tag::OTHER, 0, 0),
    ]);
    assert_eq!(s.setacl(&OWNER, f, Some(&bad), None), Err(Nfsstat3::INVAL));
    // A default ACL on a file: ACCES.
    let m = Acl::from_mode(0o640);
    assert_eq!(s.setacl(&OWNER, f, None, Some(&m)), Err(Nfsstat3::ACCES));
    // Set by the owner: kept, and the mode's group bits are the mask.
    changes(s, f, false, || {
        s.setacl(&OWNER, f, Some(&a), None).expect("setacl");
    });
    let (at, got) = s.getacl(&STRANGER, f).expect("getacl");
    assert_eq!(at.mode & 0o777, 0o660);
    assert_eq!(got.access.as_ref(), Some(&a));
    assert_eq!(got.default, None);
    // A minimal ACL sets the mode and is not kept.
    let g = s.mkdir(&R, d, b"g", &mode(0o755)).expect("mkdir");
    perm::own(s, &g, 1000, 100, 0o755);
    s.setacl(&OWNER, &g, Some(&Acl::from_mode(0o750)), None)
        .expect("minimal");
    let (at, got) = s.getacl(&R, &g).expect("getacl");
    assert_eq!((at.mode & 0o777, got), (0o750, Acls::default()));
    // A symbolic link takes none.
    let l = s
        .symlink(&R, d, b"l", b"f", &Sattr3::default())
        .expect("symlink");
    assert_eq!(s.setacl(&R, &l, None, None), Err(Nfsstat3::NOTSUPP));
    assert_eq!(s.getacl(&R, &l).expect("getacl").1, Acls::default());
}

/// What the ACL `setting` left on `f` grants, then `chmod` and removal.
fn granting(s: &dyn Store, f: &Fh) {
    let rw = access::READ | access::MODIFY;
    assert_eq!(rights(s, &NAMED, f), (rw, true, true), "named rw-");
    assert_eq!(
        rights(s, &MEMBER, f),
        (access::READ, true, false),
        "group r--"
    );
    assert_eq!(rights(s, &STRANGER, f), (0, false, false), "other ---");
    // chmod 0600: the mask becomes ---, the named user loses everything; the ACL stays.
    s.setattr(&OWNER, f, &mode(0o600), None).expect("chmod");
    assert_eq!(rights(s, &NAMED, f), (0, false, false), "masked");
    let (_, got) = s.getacl(&R, f).expect("getacl");
    let mask = got.access.as_ref().and_then(|a| {
        a.entries()
            .iter()
            .find(|e| e.tag == tag::MASK)
            .map(|e| e.perm)
    });
    assert_eq!(mask, Some(0));
    // chmod 0640: the mask r--, the named user reads again.
    s.setattr(&OWNER, f, &mode(0o640), None).expect("chmod");
    assert_eq!(rights(s, &NAMED, f), (access::READ, true, false));
    // Removed: the mode alone, the named user is other again.
    s.setacl(&OWNER, f, None, None).expect("remove");
    assert_eq!(s.getacl(&R, f).expect("getacl").1, Acls::default());
    assert_eq!(attr(s, f).mode & 0o777, 0o640);
    assert_eq!(rights(s, &NAMED, f), (0, false, false));
    // Removing what is not there succeeds.
    s.setacl(&OWNER, f, None, None).expect("remove again");
}

/// A directory's default ACL, inherited by what is made in it.
fn inheriting(s: &dyn Store, d: &Fh) {
    let p = s.mkdir(&R, d, b"inherit", &mode(0o755)).expect("mkdir");
    perm::own(s, &p, 1000, 100, 0o775);
    let def = acl(&[
        (tag::USER_OBJ, 0, 7),
        (tag::USER, 2000, 7),
        (tag::GROUP_OBJ, 0, 5),
        (tag::MASK, 0, 7),
        (tag::OTHER, 0, 0),
    ]);
    s.setacl(&OWNER, &p, None, Some(&def)).expect("default");
    let (_, got) = s.getacl(&R, &p).expect("getacl");
    assert_eq!((got.access, got.default.as_ref()), (None, Some(&def)));
    // A file asked for 0666 gets 0660 and the default less execute where the mode has none.
    let how = CreateHow::Unchecked(mode(0o666));
    let f = s.create(&OWNER, &p, b"f", &how).expect("create");
    let (at, got) = s.getacl(&R, &f).expect("getacl");
    assert_eq!(at.mode & 0o777, 0o660);
    let want = acl(&[
        (tag::USER_OBJ, 0, 6),
        (tag::USER, 2000, 7),
        (tag::GROUP_OBJ, 0, 5),
        (tag::MASK, 0, 6),
        (tag::OTHER, 0, 0),
    ]);
    assert_eq!((got.access.as_ref(), got.default), (Some(&want), None));
    // The named user may write it (rwx masked to rw-); a stranger may not read it.
    assert!(s.write(&NAMED, &f, 0, b"x", StableHow::Unstable).is_ok());
    assert_eq!(rights(s, &STRANGER, &f), (0, false, false));
    // A directory keeps the default as its own default too.
    let sub = s.mkdir(&OWNER, &p, b"sub", &mode(0o777)).expect("mkdir");
    let (at, got) = s.getacl(&R, &sub).expect("getacl");
    assert_eq!(at.mode & 0o777, 0o770);
    assert_eq!(got.default.as_ref(), Some(&def));
    assert!(got.access.is_some());
    // A symbolic link inherits nothing.
    let l = s
        .symlink(&OWNER, &p, b"l", b"f", &Sattr3::default())
        .expect("symlink");
    assert_eq!(s.getacl(&R, &l).expect("getacl").1, Acls::default());
    // The named user may create in the directory (its default gives rwx, the mask rwx).
    s.setacl(&OWNER, &p, Some(&def), Some(&def))
        .expect("access too");
    let how = CreateHow::Unchecked(mode(0o644));
    assert!(s.create(&NAMED, &p, b"by-named", &how).is_ok());
    assert_eq!(
        s.create(&STRANGER, &p, b"by-stranger", &how).err(),
        Some(Nfsstat3::ACCES)
    );
}

#[test]
fn accepts_posix_acls_in_the_memory_store() {
    let s = memory();
    acls(&s, &mkdir(&s, &s.root(), "acl"));
}

#[test]
fn accepts_posix_acls_in_the_dir_store_as_the_kernel_keeps_them() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    acls(&s, &mkdir(&s, &s.root(), "acl"));
}
