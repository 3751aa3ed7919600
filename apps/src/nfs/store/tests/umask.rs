//! The creator's umask (NFSv4.2 `mode_umask`, RFC 8275), run against both stores: a new
//! object's mode loses the umask's bits unless its directory has a default ACL, which then
//! decides alone, as a local creation on Linux (`posix_acl_create`); a symbolic link keeps
//! 0777; the umask never outlives the creation (the `dir:` store's thread is back at 0).
//!
//! Normal operation: each store works in its own directory of the export. Recovery: the
//! directory store's temp directory is removed when its test ends.

use super::*;
use crate::nfs::acl::{tag, Ace, Acl};

/// Mode `m` with umask `u`.
fn masked(m: u32, u: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        umask: Some(u),
        ..Sattr3::default()
    }
}

fn mode_of(s: &dyn Store, f: &Fh) -> u32 {
    s.getattr(f).expect("getattr").mode & 0o7777
}

/// The whole umask part, in directory `d` of `s` (as root).
pub(super) fn umask(s: &dyn Store, d: &Fh) {
    let f = s
        .create(&R, d, b"f", &CreateHow::Guarded(masked(0o666, 0o027)))
        .expect("create");
    assert_eq!(mode_of(s, &f), 0o640, "GUARDED");
    let u = s
        .create(&R, d, b"u", &CreateHow::Unchecked(masked(0o777, 0o002)))
        .expect("create");
    assert_eq!(mode_of(s, &u), 0o775, "UNCHECKED");
    // EXCLUSIVE4_1: made with the mode less the umask; a retransmission finds the same file.
    let how = CreateHow::Exclusive41(*b"verifier", masked(0o644, 0o077));
    let x = s.create(&R, d, b"x", &how).expect("create");
    assert_eq!(mode_of(s, &x), 0o600, "EXCLUSIVE4_1");
    assert_eq!(s.create(&R, d, b"x", &how), Ok(x), "retransmitted");
    let sub = s
        .mkdir(&R, d, b"sub", &masked(0o777, 0o022))
        .expect("mkdir");
    assert_eq!(mode_of(s, &sub), 0o755, "MKDIR");
    // Only the nine access bits of a umask count: the sticky bit survives it.
    let g = s
        .mkdir(&R, d, b"g", &masked(0o1777, 0o7077))
        .expect("mkdir");
    assert_eq!(mode_of(s, &g), 0o1700, "umask bits past 0777 ignored");
    let n = s
        .mknod(&R, d, b"fifo", Special::Fifo, &masked(0o666, 0o026))
        .expect("mknod");
    assert_eq!(mode_of(s, &n), 0o640, "MKNOD");
    let l = s
        .symlink(&R, d, b"l", b"f", &masked(0o777, 0o777))
        .expect("symlink");
    assert_eq!(
        s.getattr(&l).expect("getattr").mode & 0o777,
        0o777,
        "SYMLINK"
    );
    // No umask: the mode as asked, also after the creations above.
    let plain = s
        .create(&R, d, b"plain", &CreateHow::Guarded(mode(0o666)))
        .expect("create");
    assert_eq!(mode_of(s, &plain), 0o666, "no umask left behind");
    // A default ACL decides instead of the umask.
    let p = s.mkdir(&R, d, b"inherit", &mode(0o755)).expect("mkdir");
    let def = [
        (tag::USER_OBJ, 0, 7),
        (tag::GROUP_OBJ, 0, 5),
        (tag::OTHER, 0, 4),
    ];
    let def = Acl::from_entries(def.iter().map(|&(t, i, p)| Ace::new(t, i, p)).collect())
        .expect("entries")
        .expect("some");
    s.setacl(&R, &p, None, Some(&def)).expect("default ACL");
    let f = s
        .create(&R, &p, b"f", &CreateHow::Guarded(masked(0o666, 0o077)))
        .expect("create");
    assert_eq!(mode_of(s, &f), 0o644, "the default ACL, not the umask");
    let sub = s
        .mkdir(&R, &p, b"sub", &masked(0o777, 0o077))
        .expect("mkdir");
    assert_eq!(mode_of(s, &sub), 0o754, "a directory too");
}

#[test]
fn accepts_the_creators_umask_in_the_memory_store() {
    let s = memory();
    umask(&s, &mkdir(&s, &s.root(), "umask"));
}

#[test]
fn accepts_the_creators_umask_in_the_dir_store_as_the_kernel_applies_it() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    umask(&s, &mkdir(&s, &s.root(), "umask"));
}
