//! The permission part of the store conformance suite, run against both stores: every
//! procedure as the owner, a group member (primary and supplementary), another user, root and
//! a squashed root, on objects of each mode; sticky directories, ownership changes and
//! set-group-ID inheritance (the rules of [`crate::nfs::identity`]).
//!
//! Normal operation: each part works in its own directory of the export. Recovery: the
//! directory store's temp directory is removed when its test ends.

use super::*;

/// The owner of the objects in the permission matrix (group 100).
const OWNER: Cred = Cred::new(1000, 100);
/// A member of group 100 by its primary group.
const GROUP: Cred = Cred::new(2000, 100);
/// Neither owner nor in group 100.
const OTHER: Cred = Cred::new(4000, 400);
/// Root after `root_squash`: the anonymous identity, no privilege.
const SQUASHED: Cred = Cred::new(65534, 65534);

/// A member of group 100 by a supplementary group only.
fn supplementary() -> Cred {
    Cred::with_groups(3000, 300, &[100])
}

/// Every identity of the matrix, by name.
fn everyone() -> [(&'static str, Cred); 6] {
    [
        ("owner", OWNER),
        ("group", GROUP),
        ("supplementary", supplementary()),
        ("other", OTHER),
        ("root", R),
        ("squashed root", SQUASHED),
    ]
}

/// Gives `fh` (as root) owner `uid`, group `gid`, then mode `m`.
pub(super) fn own(s: &dyn Store, fh: &Fh, uid: u32, gid: u32, m: u32) {
    let ids = Sattr3 {
        uid: Some(uid),
        gid: Some(gid),
        ..Sattr3::default()
    };
    s.setattr(&R, fh, &ids, None).expect("chown");
    s.setattr(&R, fh, &mode(m), None).expect("chmod");
}

/// `r` succeeded when `allowed`, else failed with `refused`.
fn expect<T: std::fmt::Debug>(
    r: Result<T, Nfsstat3>,
    allowed: bool,
    refused: Nfsstat3,
    what: &str,
) {
    if allowed {
        assert!(r.is_ok(), "{what}: {r:?}");
    } else {
        assert_eq!(r.err(), Some(refused), "{what}");
    }
}

/// Each identity of the matrix against every procedure, as POSIX and Linux nfsd answer.
fn permissions(s: &dyn Store) {
    let root = s.root();
    file_access(s, &mkdir(s, &root, "perm-io"));
    dir_access(s, &mkdir(s, &root, "perm-dirs"));
    sticky(s, &mkdir(s, &root, "perm-sticky"));
    ownership(s, &mkdir(s, &root, "perm-own"));
    setgid(s, &mkdir(s, &root, "perm-setgid"));
}

/// READ, WRITE, COMMIT, SETATTR size of a file 0640 owner:100, and ACCESS saying the same.
fn file_access(s: &dyn Store, d: &Fh) {
    s.setattr(&R, d, &mode(0o777), None).expect("chmod");
    let f = file(s, d, "f");
    write(s, &f, 0, b"data");
    own(s, &f, 1000, 100, 0o640);
    let reader = ["owner", "group", "supplementary", "root"];
    for (n, c) in everyone() {
        let (r, w) = (reader.contains(&n), n == "owner" || n == "root");
        let mut buf = [0u8; 4];
        expect(s.read(&c, &f, 0, &mut buf), r, Nfsstat3::ACCES, n);
        let wr = s.write(&c, &f, 0, b"d", StableHow::Unstable);
        expect(wr, w, Nfsstat3::ACCES, n);
        expect(s.commit(&c, &f), w, Nfsstat3::ACCES, n);
        let size = Sattr3 {
            size: Some(4),
            ..Sattr3::default()
        };
        expect(s.setattr(&c, &f, &size, None), w, Nfsstat3::ACCES, n);
        let want = access::READ | access::MODIFY;
        let (_, got) = s.access(&c, &f, want).expect("access");
        assert_eq!(
            got & access::READ != 0,
            r,
            "{n}: ACCESS says what READ does"
        );
        if n != "owner" {
            assert_eq!(
                got & access::MODIFY != 0,
                w,
                "{n}: ACCESS says what WRITE does"
            );
        }
    }
    // The owner may read and write its own file whatever the mode (NFSD_MAY_OWNER_OVERRIDE);
    // an execute-only file may be read by those who may execute it.
    s.setattr(&R, &f, &mode(0o010), None).expect("chmod");
    let mut buf = [0u8; 4];
    assert!(s.read(&OWNER, &f, 0, &mut buf).is_ok());
    assert!(s.write(&OWNER, &f, 0, b"d", StableHow::Unstable).is_ok());
    assert!(
        s.read(&GROUP, &f, 0, &mut buf).is_ok(),
        "mode 010 runs, so reads"
    );
    assert_eq!(s.read(&OTHER, &f, 0, &mut buf), Err(Nfsstat3::ACCES));
    // Root squashed to nobody does not read root's private file.
    let p = file(s, d, "private");
    s.setattr(&R, &p, &mode(0o600), None).expect("chmod");
    assert_eq!(s.read(&SQUASHED, &p, 0, &mut buf), Err(Nfsstat3::ACCES));
    assert_eq!(
        s.setattr(&SQUASHED, &p, &mode(0o666), None),
        Err(Nfsstat3::PERM)
    );
    assert_eq!(
        s.remove(&SQUASHED, &root_dir(s, d), b"private"),
        Err(Nfsstat3::ACCES)
    );
}

/// `d` itself (a directory made by root, mode 0755): the squashed root may not change it.
fn root_dir(s: &dyn Store, d: &Fh) -> Fh {
    s.setattr(&R, d, &mode(0o755), None).expect("chmod");
    *d
}

/// LOOKUP and READDIR need search and read; entry changes need write and search.
fn dir_access(s: &dyn Store, d: &Fh) {
    s.setattr(&R, d, &mode(0o777), None).expect("chmod");
    let target = file(s, d, "target");
    let r = mkdir(s, d, "r");
    file(s, &r, "e");
    own(s, &r, 1000, 100, 0o750);
    let w = mkdir(s, d, "w");
    own(s, &w, 1000, 100, 0o770);
    let members = ["owner", "group", "supplementary", "root"];
    for (n, c) in everyone() {
        let ok = members.contains(&n);
        expect(s.lookup(&c, &r, b"e"), ok, Nfsstat3::ACCES, n);
        let list = s.readdir(&c, &r, 0, [0; 8], false, &mut |_| true);
        expect(list, ok, Nfsstat3::ACCES, n);
        changes_entries(s, &c, &w, &target, ok, n);
    }
    // Write without search, search without read.
    let nox = mkdir(s, d, "nox");
    own(s, &nox, 1000, 100, 0o600);
    let how = CreateHow::Guarded(mode(0o644));
    assert_eq!(s.create(&OWNER, &nox, b"c", &how), Err(Nfsstat3::ACCES));
    assert_eq!(s.lookup(&OWNER, &nox, b"c"), Err(Nfsstat3::ACCES));
    let wx = mkdir(s, d, "wx");
    own(s, &wx, 1000, 100, 0o300);
    assert!(s.create(&OWNER, &wx, b"c", &how).is_ok());
    assert!(s.lookup(&OWNER, &wx, b"c").is_ok());
    let list = s.readdir(&OWNER, &wx, 0, [0; 8], false, &mut |_| true);
    assert_eq!(list.err(), Some(Nfsstat3::ACCES));
    // Read without search: the names are listed (Linux nfsd opens the directory for reading).
    let rx = mkdir(s, d, "rx");
    file(s, &rx, "listed");
    own(s, &rx, 1000, 100, 0o400);
    let mut names = Vec::new();
    let list = s.readdir(&OWNER, &rx, 0, [0; 8], false, &mut |e| {
        names.push(e.name.to_vec());
        true
    });
    assert!(list.is_ok(), "{list:?}");
    assert!(names.contains(&b"listed".to_vec()), "read without search");
    assert_eq!(s.lookup(&OWNER, &rx, b"listed"), Err(Nfsstat3::ACCES));
    // A directory moving to another parent needs write on itself: its ".." changes.
    let dd = s.mkdir(&OWNER, &w, b"dd", &mode(0o555)).expect("mkdir");
    let other = mkdir(s, d, "other");
    s.setattr(&R, &other, &mode(0o777), None).expect("chmod");
    assert_eq!(
        s.rename(&OWNER, &w, b"dd", &other, b"dd"),
        Err(Nfsstat3::ACCES)
    );
    assert!(
        s.rename(&OWNER, &w, b"dd", &w, b"de").is_ok(),
        "same parent"
    );
    s.setattr(&OWNER, &dd, &mode(0o755), None).expect("chmod");
    assert!(s.rename(&OWNER, &w, b"de", &other, b"dd").is_ok());
}

/// CREATE, MKDIR, SYMLINK, LINK, RENAME, REMOVE, RMDIR in `w` (0770 owner:100) by `c`.
fn changes_entries(s: &dyn Store, c: &Cred, w: &Fh, target: &Fh, ok: bool, n: &str) {
    let name = |what: &str| format!("{what}-{}", c.uid).into_bytes();
    let how = CreateHow::Guarded(mode(0o644));
    expect(s.create(c, w, &name("c"), &how), ok, Nfsstat3::ACCES, n);
    expect(
        s.mkdir(c, w, &name("m"), &mode(0o755)),
        ok,
        Nfsstat3::ACCES,
        n,
    );
    let sl = s.symlink(c, w, &name("s"), b"t", &Sattr3::default());
    expect(sl, ok, Nfsstat3::ACCES, n);
    expect(s.link(c, target, w, &name("l")), ok, Nfsstat3::ACCES, n);
    // What the caller could not make, root makes, so removal is refused on permission.
    if !ok {
        s.create(&R, w, &name("c"), &how).expect("create");
        s.mkdir(&R, w, &name("m"), &mode(0o755)).expect("mkdir");
    }
    let rn = s.rename(c, w, &name("c"), w, &name("r"));
    expect(rn, ok, Nfsstat3::ACCES, n);
    let gone = if ok { name("r") } else { name("c") };
    expect(s.remove(c, w, &gone), ok, Nfsstat3::ACCES, n);
    expect(s.rmdir(c, w, &name("m")), ok, Nfsstat3::ACCES, n);
}

/// Sticky directories: only the entry's owner, the directory's owner or root remove or
/// rename an entry, or replace it by a rename.
fn sticky(s: &dyn Store, d: &Fh) {
    own(s, d, 2000, 0, 0o1777);
    let how = CreateHow::Guarded(mode(0o666));
    s.create(&OTHER, d, b"theirs", &how).expect("create");
    s.create(&OWNER, d, b"mine", &how).expect("create");
    assert_eq!(s.remove(&OWNER, d, b"theirs"), Err(Nfsstat3::PERM));
    assert_eq!(s.rename(&OWNER, d, b"theirs", d, b"x"), Err(Nfsstat3::PERM));
    assert_eq!(
        s.rename(&OWNER, d, b"mine", d, b"theirs"),
        Err(Nfsstat3::PERM),
        "replacing another's entry"
    );
    s.mkdir(&OTHER, d, b"theirdir", &mode(0o777))
        .expect("mkdir");
    assert_eq!(s.rmdir(&OWNER, d, b"theirdir"), Err(Nfsstat3::PERM));
    assert!(s.rename(&OWNER, d, b"mine", d, b"mine2").is_ok());
    assert!(
        s.remove(&GROUP, d, b"mine2").is_ok(),
        "the directory's owner"
    );
    assert!(s.rmdir(&R, d, b"theirdir").is_ok());
    assert!(s.remove(&OTHER, d, b"theirs").is_ok(), "the entry's owner");
}

/// Mode, times, owner and group: who may change them, and the bits a change drops.
fn ownership(s: &dyn Store, d: &Fh) {
    s.setattr(&R, d, &mode(0o777), None).expect("chmod");
    let f = file(s, d, "f");
    own(s, &f, 1000, 100, 0o664);
    let set = |uid: Option<u32>, gid: Option<u32>| Sattr3 {
        uid,
        gid,
        ..Sattr3::default()
    };
    assert_eq!(
        s.setattr(&GROUP, &f, &mode(0o666), None),
        Err(Nfsstat3::PERM)
    );
    assert!(s.setattr(&OWNER, &f, &mode(0o664), None).is_ok());
    assert_eq!(
        s.setattr(&OWNER, &f, &set(Some(2000), None), None),
        Err(Nfsstat3::PERM)
    );
    assert_eq!(
        s.setattr(&OTHER, &f, &set(None, Some(400)), None),
        Err(Nfsstat3::PERM)
    );
    assert_eq!(
        s.setattr(&OWNER, &f, &set(None, Some(300)), None),
        Err(Nfsstat3::PERM)
    );
    assert!(s
        .setattr(&OWNER, &f, &set(Some(1000), Some(100)), None)
        .is_ok());
    let g = file(s, d, "g");
    own(s, &g, 3000, 300, 0o644);
    assert!(s
        .setattr(&supplementary(), &g, &set(None, Some(100)), None)
        .is_ok());
    assert_eq!(attr(s, &g).gid, 100);
    // Times: explicit only by the owner (or root), "now" also with write permission.
    let explicit = Sattr3 {
        mtime: SetTime::ClientTime(Time3 {
            seconds: 5,
            nseconds: 0,
        }),
        ..Sattr3::default()
    };
    let now = Sattr3 {
        atime: SetTime::ServerTime,
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    assert_eq!(s.setattr(&GROUP, &f, &explicit, None), Err(Nfsstat3::PERM));
    assert!(s.setattr(&GROUP, &f, &now, None).is_ok());
    assert_eq!(s.setattr(&OTHER, &f, &now, None), Err(Nfsstat3::ACCES));
    assert!(s.setattr(&OWNER, &f, &explicit, None).is_ok());
    // chmod g+s by one not in the file's group: the bit is dropped; root keeps it.
    let h = file(s, d, "h");
    own(s, &h, 1000, 300, 0o644);
    s.setattr(&OWNER, &h, &mode(0o2755), None).expect("chmod");
    assert_eq!(attr(s, &h).mode & 0o7777, 0o755);
    s.setattr(&R, &h, &mode(0o2755), None).expect("chmod");
    assert_eq!(attr(s, &h).mode & 0o7777, 0o2755);
    s.setattr(&OWNER, &f, &mode(0o2755), None).expect("chmod");
    assert_eq!(attr(s, &f).mode & 0o7777, 0o2755, "in the group: kept");
    // A change of owner drops set-user-ID and set-group-ID, also by root.
    s.setattr(&R, &h, &mode(0o6755), None).expect("chmod");
    s.setattr(&R, &h, &set(Some(2000), None), None)
        .expect("chown");
    assert_eq!(attr(s, &h).mode & 0o7777, 0o755);
    // A write by anyone but root drops them too.
    own(s, &h, 1000, 100, 0o6775);
    write_as(s, &R, &h);
    assert_eq!(attr(s, &h).mode & 0o7777, 0o6775, "root's write keeps them");
    write_as(s, &GROUP, &h);
    assert_eq!(attr(s, &h).mode & 0o7777, 0o775);
}

fn write_as(s: &dyn Store, c: &Cred, fh: &Fh) {
    s.write(c, fh, 0, b"w", StableHow::FileSync).expect("write");
}

/// New objects: the caller's uid; the directory's group when it has set-group-ID (and new
/// directories inherit the bit), else the caller's gid.
fn setgid(s: &dyn Store, d: &Fh) {
    s.setattr(&R, d, &mode(0o777), None).expect("chmod");
    let how = CreateHow::Guarded(mode(0o644));
    let f = s.create(&OWNER, d, b"plain", &how).expect("create");
    let a = attr(s, &f);
    assert_eq!((a.uid, a.gid), (1000, 100));
    let sg = mkdir(s, d, "sg");
    own(s, &sg, 0, 500, 0o2777);
    let f = s.create(&OWNER, &sg, b"f", &how).expect("create");
    let a = attr(s, &f);
    assert_eq!((a.uid, a.gid, a.mode & 0o7777), (1000, 500, 0o644));
    let sub = s.mkdir(&OWNER, &sg, b"sub", &mode(0o755)).expect("mkdir");
    let a = attr(s, &sub);
    assert_eq!((a.uid, a.gid, a.mode & 0o7777), (1000, 500, 0o2755));
    // Asking for set-group-ID on a file of a group one is not in: dropped.
    let g = s
        .create(&OWNER, &sg, b"g", &CreateHow::Guarded(mode(0o2755)))
        .expect("create");
    assert_eq!(attr(s, &g).mode & 0o7777, 0o755);
}

#[test]
fn rejects_what_posix_refuses_in_the_memory_store() {
    permissions(&memory());
}

#[test]
fn rejects_what_posix_refuses_in_the_dir_store() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    permissions(&s);
}
