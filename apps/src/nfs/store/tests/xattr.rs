//! The user extended attribute part of the store conformance suite (RFC 8276; Linux's `user.`
//! namespace), run against both stores: the directory store's attributes are the Linux
//! kernel's own (on the temp directory's file system, checked by the kernel and by Linux
//! nfsd's rules), so the memory store must answer every step as they do: values set, read,
//! listed and removed, SETXATTR's create and replace, TOOSMALL, which objects carry
//! attributes, read and write permission, the sticky bit, the ctime and the weak cache
//! consistency data of a change.
//!
//! Normal operation: each store works in its own directory of the export; a directory store
//! whose file system keeps no user attributes must answer NOTSUPP to all of it. Recovery: the
//! directory store's temp directory is removed when its test ends.

use super::*;
use crate::nfs::acl::{tag, Ace, Acl};
use crate::nfs::store::{XattrSet, XATTR_SIZE_MAX};
use crate::nfs::types::{NfsResult, WccData};

/// The owner of the objects (group 100).
const OWNER: Cred = Cred::new(1000, 100);
/// Neither owner nor member of the owning group.
const OTHER: Cred = Cred::new(4000, 400);

/// SETXATTR's result.
fn set(s: &dyn Store, cx: &Cred, fh: &Fh, name: &str, v: &[u8], how: XattrSet) -> NfsResult<()> {
    s.setxattr_wcc(cx, fh, name.as_bytes(), v, how).0
}

/// GETXATTR's value, read into a buffer of the largest size.
fn get(s: &dyn Store, cx: &Cred, fh: &Fh, name: &str) -> NfsResult<Vec<u8>> {
    let mut out = vec![0u8; XATTR_SIZE_MAX];
    let n = s.getxattr(cx, fh, name.as_bytes(), &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// LISTXATTRS's names, in the order listed.
fn list(s: &dyn Store, cx: &Cred, fh: &Fh) -> NfsResult<Vec<String>> {
    let mut v = Vec::new();
    s.listxattrs(cx, fh, &mut |n| {
        v.push(String::from_utf8_lossy(n).into_owned())
    })?;
    Ok(v)
}

/// `names` sorted.
fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// A new regular file `name` in `d`, owned by [`OWNER`] with mode `m`.
fn owned_file(s: &dyn Store, d: &Fh, name: &str, m: u32) -> Fh {
    let f = file(s, d, name);
    perm::own(s, &f, OWNER.uid, OWNER.gid, m);
    f
}

/// The whole part, in directory `d` of `s`; `holds_64k`: whether a value of
/// [`XATTR_SIZE_MAX`] octets must be taken (ext4 without `ea_inode` keeps a value in one block
/// and answers NOSPC, as Linux nfsd passes it on).
pub(super) fn xattrs(s: &dyn Store, d: &Fh, holds_64k: bool) {
    assert!(s.xattr_support());
    round_trip(s, d);
    creating_and_replacing(s, d);
    sizes(s, d, holds_64k);
    types(s, d);
    permission(s, d);
    sticky(s, d);
    times(s, d);
}

/// What a store without user extended attributes answers: NOTSUPP to each method.
pub(super) fn unsupported(s: &dyn Store, d: &Fh) {
    assert!(!s.xattr_support());
    let f = file(s, d, "f");
    assert_eq!(get(s, &R, &f, "a"), Err(Nfsstat3::NOTSUPP));
    assert_eq!(
        set(s, &R, &f, "a", b"v", XattrSet::Either),
        Err(Nfsstat3::NOTSUPP)
    );
    assert_eq!(list(s, &R, &f), Err(Nfsstat3::NOTSUPP));
    assert_eq!(s.removexattr_wcc(&R, &f, b"a").0, Err(Nfsstat3::NOTSUPP));
}

/// Set, read, list and remove on a file and a directory; other namespaces never listed.
fn round_trip(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "rt");
    assert_eq!(list(s, &R, &f), Ok(vec![]));
    assert_eq!(get(s, &R, &f, "a"), Err(Nfsstat3::NOXATTR));
    set(s, &R, &f, "a", b"one", XattrSet::Either).expect("set a");
    set(s, &R, &f, "b.c", b"", XattrSet::Either).expect("set empty");
    set(s, &R, &f, "z", &[0, 1, 2, 255], XattrSet::Either).expect("binary");
    assert_eq!(get(s, &R, &f, "a").as_deref(), Ok(&b"one"[..]));
    assert_eq!(get(s, &R, &f, "b.c"), Ok(vec![]));
    assert_eq!(get(s, &R, &f, "z"), Ok(vec![0, 1, 2, 255]));
    // Either replaces.
    set(s, &R, &f, "a", b"two", XattrSet::Either).expect("replace a");
    assert_eq!(get(s, &R, &f, "a").as_deref(), Ok(&b"two"[..]));
    // Names without `user.`, in an order that stays; an ACL (`system.`) is not listed.
    let acl = Acl::from_entries(vec![
        Ace::new(tag::USER_OBJ, 0, 6),
        Ace::new(tag::USER, 2000, 6),
        Ace::new(tag::GROUP_OBJ, 0, 4),
        Ace::new(tag::MASK, 0, 6),
        Ace::new(tag::OTHER, 0, 0),
    ]);
    let acl = acl.expect("entries").expect("some");
    match s.setacl(&R, &f, Some(&acl), None) {
        Ok(()) | Err(Nfsstat3::NOTSUPP) => {}
        r => panic!("setacl: {r:?}"),
    }
    let names = list(s, &R, &f).expect("list");
    assert_eq!(sorted(names.clone()), ["a", "b.c", "z"]);
    assert_eq!(list(s, &R, &f), Ok(names));
    // Removed: gone, and NOXATTR the second time.
    s.removexattr_wcc(&R, &f, b"b.c").0.expect("remove");
    assert_eq!(get(s, &R, &f, "b.c"), Err(Nfsstat3::NOXATTR));
    assert_eq!(s.removexattr_wcc(&R, &f, b"b.c").0, Err(Nfsstat3::NOXATTR));
    assert_eq!(
        s.removexattr_wcc(&R, &f, b"never").0,
        Err(Nfsstat3::NOXATTR)
    );
    assert_eq!(sorted(list(s, &R, &f).expect("list")), ["a", "z"]);
    // A directory carries them too.
    let sub = mkdir(s, d, "rt-dir");
    set(s, &R, &sub, "d", b"dir", XattrSet::Create).expect("set on dir");
    assert_eq!(get(s, &R, &sub, "d").as_deref(), Ok(&b"dir"[..]));
    assert_eq!(list(s, &R, &sub), Ok(vec!["d".to_string()]));
    s.removexattr_wcc(&R, &sub, b"d").0.expect("remove on dir");
    assert_eq!(list(s, &R, &sub), Ok(vec![]));
    // A malformed name (the protocol layer refuses it first): refused as `check_xattr_name`
    // refuses it, never a panic.
    let long = "n".repeat(251);
    let bad = [
        ("", Nfsstat3::INVAL),
        ("a\0b", Nfsstat3::INVAL),
        (long.as_str(), Nfsstat3::NAMETOOLONG),
    ];
    for (bad, want) in bad {
        assert_eq!(get(s, &R, &f, bad), Err(want));
        assert_eq!(set(s, &R, &f, bad, b"v", XattrSet::Either), Err(want));
        let r = s.removexattr_wcc(&R, &f, bad.as_bytes()).0;
        assert_eq!(r, Err(want));
    }
    let longest = "n".repeat(250);
    set(s, &R, &f, &longest, b"v", XattrSet::Create).expect("250 octets");
    assert_eq!(get(s, &R, &f, &longest), Ok(b"v".to_vec()));
}

/// SETXATTR's create and replace.
fn creating_and_replacing(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "how");
    assert_eq!(
        set(s, &R, &f, "a", b"1", XattrSet::Replace),
        Err(Nfsstat3::NOXATTR)
    );
    assert_eq!(get(s, &R, &f, "a"), Err(Nfsstat3::NOXATTR));
    set(s, &R, &f, "a", b"1", XattrSet::Create).expect("create");
    assert_eq!(
        set(s, &R, &f, "a", b"2", XattrSet::Create),
        Err(Nfsstat3::EXIST)
    );
    assert_eq!(get(s, &R, &f, "a"), Ok(b"1".to_vec()));
    set(s, &R, &f, "a", b"3", XattrSet::Replace).expect("replace");
    assert_eq!(get(s, &R, &f, "a"), Ok(b"3".to_vec()));
}

/// TOOSMALL for a value longer than the buffer; the largest value.
fn sizes(s: &dyn Store, d: &Fh, holds_64k: bool) {
    let f = file(s, d, "sizes");
    set(s, &R, &f, "v", b"0123456789", XattrSet::Either).expect("set");
    let mut out = [0u8; 10];
    assert_eq!(s.getxattr(&R, &f, b"v", &mut out), Ok(10));
    assert_eq!(&out, b"0123456789");
    let mut short = [0u8; 9];
    let r = s.getxattr(&R, &f, b"v", &mut short);
    assert_eq!(r, Err(Nfsstat3::TOOSMALL));
    assert_eq!(s.getxattr(&R, &f, b"v", &mut []), Err(Nfsstat3::TOOSMALL));
    set(s, &R, &f, "empty", b"", XattrSet::Either).expect("set empty");
    assert_eq!(s.getxattr(&R, &f, b"empty", &mut []), Ok(0));
    assert_eq!(s.getxattr(&R, &f, b"none", &mut []), Err(Nfsstat3::NOXATTR));
    let big: Vec<u8> = (0..XATTR_SIZE_MAX).map(|i| (i * 7) as u8).collect();
    let g = file(s, d, "sizes-big");
    set(s, &R, &g, "small", b"beside it", XattrSet::Either).expect("set small");
    match set(s, &R, &g, "big", &big, XattrSet::Either) {
        Ok(()) => assert!(get(s, &R, &g, "big") == Ok(big), "the value read back"),
        Err(Nfsstat3::NOSPC) if !holds_64k => {}
        r => panic!("a value of {XATTR_SIZE_MAX} octets: {r:?}"),
    }
}

/// Only regular files and directories carry attributes: NOXATTR, none listed, PERM.
fn types(s: &dyn Store, d: &Fh) {
    let target = file(s, d, "target");
    set(s, &R, &target, "t", b"on the target", XattrSet::Either).expect("set");
    let l = s
        .symlink(&R, d, b"link", b"target", &Sattr3::default())
        .expect("symlink");
    let p = s
        .mknod(&R, d, b"fifo", Special::Fifo, &mode(0o666))
        .expect("mknod");
    for (what, fh) in [("symlink", &l), ("fifo", &p)] {
        assert_eq!(get(s, &R, fh, "t"), Err(Nfsstat3::NOXATTR), "{what}");
        assert_eq!(list(s, &R, fh), Ok(vec![]), "{what}");
        let r = set(s, &R, fh, "t", b"v", XattrSet::Either);
        assert_eq!(r, Err(Nfsstat3::PERM), "{what}");
        let r = s.removexattr_wcc(&R, fh, b"t").0;
        assert_eq!(r, Err(Nfsstat3::PERM), "{what}");
    }
    // The symbolic link's target was not reached through it.
    assert_eq!(list(s, &R, &target), Ok(vec!["t".to_string()]));
}

/// Read permission for GETXATTR and LISTXATTRS, write permission for SETXATTR and
/// REMOVEXATTR, without the owner's override of READ and WRITE (as Linux nfsd asks them).
fn permission(s: &dyn Store, d: &Fh) {
    let f = owned_file(s, d, "perm", 0o644);
    set(s, &OWNER, &f, "a", b"owner's", XattrSet::Either).expect("owner sets");
    assert_eq!(get(s, &OTHER, &f, "a"), Ok(b"owner's".to_vec()));
    assert_eq!(list(s, &OTHER, &f), Ok(vec!["a".to_string()]));
    let r = set(s, &OTHER, &f, "b", b"other's", XattrSet::Either);
    assert_eq!(r, Err(Nfsstat3::ACCES));
    assert_eq!(s.removexattr_wcc(&OTHER, &f, b"a").0, Err(Nfsstat3::ACCES));
    // Absent and unreadable: ACCES before NOXATTR.
    let g = owned_file(s, d, "perm-private", 0o600);
    assert_eq!(get(s, &OTHER, &g, "a"), Err(Nfsstat3::ACCES));
    assert_eq!(list(s, &OTHER, &g), Err(Nfsstat3::ACCES));
    // Mode 0444: not even the owner writes; root does.
    s.setattr(&R, &f, &mode(0o444), None).expect("chmod");
    let r = set(s, &OWNER, &f, "b", b"owner's", XattrSet::Either);
    assert_eq!(r, Err(Nfsstat3::ACCES));
    set(s, &R, &f, "b", b"root's", XattrSet::Either).expect("root sets");
    assert_eq!(get(s, &OWNER, &f, "b"), Ok(b"root's".to_vec()));
    // Whoever may write may set: mode 0666.
    s.setattr(&R, &f, &mode(0o666), None).expect("chmod");
    set(s, &OTHER, &f, "c", b"other's", XattrSet::Either).expect("other sets");
    s.removexattr_wcc(&OTHER, &f, b"a")
        .0
        .expect("other removes");
}

/// A sticky directory: only its owner and root set or remove its attributes.
fn sticky(s: &dyn Store, d: &Fh) {
    let t = mkdir(s, d, "sticky");
    perm::own(s, &t, OWNER.uid, OWNER.gid, 0o1777);
    set(s, &OWNER, &t, "a", b"owner's", XattrSet::Either).expect("owner sets");
    let r = set(s, &OTHER, &t, "b", b"other's", XattrSet::Either);
    assert_eq!(r, Err(Nfsstat3::PERM));
    assert_eq!(s.removexattr_wcc(&OTHER, &t, b"a").0, Err(Nfsstat3::PERM));
    assert_eq!(get(s, &OTHER, &t, "a"), Ok(b"owner's".to_vec()));
    set(s, &R, &t, "b", b"root's", XattrSet::Either).expect("root sets");
    // Without the sticky bit, write permission is enough.
    let u = mkdir(s, d, "not-sticky");
    perm::own(s, &u, OWNER.uid, OWNER.gid, 0o777);
    set(s, &OTHER, &u, "b", b"other's", XattrSet::Either).expect("other sets");
    s.removexattr_wcc(&OTHER, &u, b"b")
        .0
        .expect("other removes");
}

/// Checks the weak cache consistency data `w` of a change of `fh` against GETATTR `before`
/// and now: the ctime moved (when `changed`), the mtime did not.
fn check_wcc(s: &dyn Store, fh: &Fh, before: &Fattr3, w: &WccData, changed: bool) {
    let after = attr(s, fh);
    assert_eq!(w.before, Some(before.wcc()), "before");
    assert_eq!(w.after, Some(after), "after");
    assert_eq!(after.mtime, before.mtime, "mtime");
    match changed {
        true => assert!(after.ctime > before.ctime, "{before:?} -> {after:?}"),
        false => assert_eq!(after.ctime, before.ctime),
    }
}

/// SETXATTR and REMOVEXATTR move the ctime (not the mtime) and answer the object's
/// attributes before and after; a refused one changes nothing.
fn times(s: &dyn Store, d: &Fh) {
    for fh in [file(s, d, "times"), mkdir(s, d, "times-dir")] {
        let before = attr(s, &fh);
        let (r, w) = s.setxattr_wcc(&R, &fh, b"a", b"1", XattrSet::Either);
        r.expect("set");
        check_wcc(s, &fh, &before, &w, true);
        let before = attr(s, &fh);
        let (r, w) = s.setxattr_wcc(&R, &fh, b"a", b"2", XattrSet::Create);
        assert_eq!(r, Err(Nfsstat3::EXIST));
        check_wcc(s, &fh, &before, &w, false);
        let (r, w) = s.removexattr_wcc(&R, &fh, b"a");
        r.expect("remove");
        check_wcc(s, &fh, &before, &w, true);
        assert_ne!(w.before.map(|b| b.ctime), w.after.map(|a| a.ctime));
        let before = attr(s, &fh);
        let (r, w) = s.removexattr_wcc(&R, &fh, b"a");
        assert_eq!(r, Err(Nfsstat3::NOXATTR));
        check_wcc(s, &fh, &before, &w, false);
    }
}

#[test]
fn accepts_user_xattrs_in_the_memory_store() {
    let s = memory();
    xattrs(&s, &mkdir(&s, &s.root(), "xattr"), true);
}

#[test]
fn accepts_user_xattrs_in_the_dir_store_as_the_kernel_keeps_them() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    let d = mkdir(&s, &s.root(), "xattr");
    match s.xattr_support() {
        true => xattrs(&s, &d, false),
        false => unsupported(&s, &d),
    }
}

/// tmpfs (`TMPFS_MAGIC`).
const TMPFS_MAGIC: i64 = 0x0102_1994;

#[test]
fn accepts_user_xattrs_of_the_largest_size_in_the_dir_store_on_tmpfs() {
    // /dev/shm where it is tmpfs, whose user attributes (Linux 6.6 and later) take values of
    // every size; skipped elsewhere.
    let shm = std::path::Path::new("/dev/shm");
    // SAFETY: an all-zero statfs is valid; the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path; `st` is writable.
    let r = unsafe { libc::statfs(c"/dev/shm".as_ptr(), &mut st) };
    if r != 0 || st.f_type as i64 != TMPFS_MAGIC {
        return;
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = TempDir(shm.join(format!("rpcrdma-xattr-{}-{n}", std::process::id())));
    std::fs::create_dir_all(&t.0).expect("dir on tmpfs");
    let s = DirStore::open(&t.0).expect("open");
    let d = mkdir(&s, &s.root(), "xattr");
    match s.xattr_support() {
        true => xattrs(&s, &d, true),
        false => unsupported(&s, &d),
    }
}
