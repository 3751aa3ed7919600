//! One conformance suite for the [`Store`] contract ([`conformance`]), run against both
//! stores: [`MemoryStore`] and [`DirStore`] on a fresh directory under the system temp dir;
//! then what only one store has (capacity limits, restarts, foreign handles).
//!
//! Normal operation: each part of the suite works in its own subdirectory of the export, so
//! the parts do not see each other. Recovery: the directory store's temp directory is removed
//! when its test ends, also when it fails.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use super::dir::DirStore;
use super::memory::{MemoryOptions, MemoryStore};
use crate::nfs::identity::Cred;
use crate::nfs::store::{Special, Store};
use crate::nfs::types::{
    access, CreateHow, Fattr3, Fh, Ftype3, Nfsstat3, Sattr3, SetTime, StableHow, Time3,
};

/// The identity the contract tests act as.
const R: Cred = Cred::ROOT;

// ---------------------------------------------------------------- helpers

fn attr(s: &dyn Store, fh: &Fh) -> Fattr3 {
    s.getattr(fh).expect("getattr")
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

fn mkdir(s: &dyn Store, dir: &Fh, name: &str) -> Fh {
    s.mkdir(&R, dir, name.as_bytes(), &mode(0o755))
        .expect("mkdir")
}

fn file(s: &dyn Store, dir: &Fh, name: &str) -> Fh {
    let how = CreateHow::Guarded(mode(0o644));
    s.create(&R, dir, name.as_bytes(), &how).expect("create")
}

fn write(s: &dyn Store, fh: &Fh, off: u64, data: &[u8]) {
    let st = s
        .write(&R, fh, off, data, StableHow::FileSync)
        .expect("write");
    assert_eq!(st, StableHow::FileSync);
}

fn read(s: &dyn Store, fh: &Fh, off: u64, len: usize) -> (Vec<u8>, bool) {
    let mut out = vec![0xaau8; len];
    let (n, eof) = s.read(&R, fh, off, &mut out).expect("read");
    out.truncate(n);
    (out, eof)
}

/// Every name in `dir` (without `.` and `..`), listed in one go.
fn names(s: &dyn Store, dir: &Fh) -> Vec<String> {
    let mut v = Vec::new();
    let l = s
        .readdir(&R, dir, 0, [0; 8], false, &mut |e| {
            v.push(String::from_utf8_lossy(e.name).into_owned());
            true
        })
        .expect("readdir");
    assert!(l.eof);
    v.retain(|n| n != "." && n != "..");
    v.sort();
    v
}

/// Runs `f` and checks that it changed `fh`'s ctime (strictly) and, with `data`, its mtime.
fn changes(s: &dyn Store, fh: &Fh, data: bool, f: impl FnOnce()) {
    let before = attr(s, fh);
    f();
    let after = attr(s, fh);
    assert!(after.ctime > before.ctime, "{before:?} -> {after:?}");
    if data {
        assert!(after.mtime > before.mtime, "{before:?} -> {after:?}");
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rpcrdma-nfs3-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn memory() -> MemoryStore {
    MemoryStore::new(MemoryOptions {
        block_size: 4096,
        ..MemoryOptions::default()
    })
}

// ---------------------------------------------------------------- the suite

/// The whole contract, against `s` (a fresh store).
fn conformance(s: &dyn Store) {
    let root = s.root();
    basics(s, &mkdir(s, &root, "basics"));
    data(s, &mkdir(s, &root, "data"));
    setattr(s, &mkdir(s, &root, "setattr"));
    dirs(s, &mkdir(s, &root, "dirs"));
    links(s, &mkdir(s, &root, "links"));
    rename(s, &mkdir(s, &root, "rename"));
    readdir(s, &mkdir(s, &root, "readdir"));
    paging(s, &mkdir(s, &root, "paging"));
    exclusive(s, &mkdir(s, &root, "exclusive"));
    wcc::wcc(s, &mkdir(s, &root, "wcc"));
    wcc::atomic(s, &mkdir(s, &root, "atomic"));
    wcc::atomic_with_writes(s, &mkdir(s, &root, "atomic-writes"));
    let st = s.fsstat(&root).expect("fsstat");
    assert!(st.tbytes >= st.fbytes && st.fbytes >= st.abytes && st.tfiles >= st.ffiles);
    assert_eq!(s.write_verifier(), s.write_verifier());
    assert!(s.max_file_size() > 1 << 32);
}

fn basics(s: &dyn Store, d: &Fh) {
    let root = s.root();
    let ra = attr(s, &root);
    assert_eq!(ra.ftype, Ftype3::Dir);
    assert_eq!(s.lookup(&R, &root, b".").expect("."), root);
    assert_eq!(
        s.lookup(&R, &root, b"..").expect(".."),
        root,
        "never above the export"
    );
    assert_eq!(s.lookup(&R, d, b"..").expect(".."), root);
    assert_eq!(
        attr(s, &s.lookup(&R, d, b".").expect(".")).fileid,
        attr(s, d).fileid
    );

    let f = s
        .create(&R, d, b"f", &CreateHow::Guarded(mode(0o640)))
        .expect("create");
    let a = attr(s, &f);
    assert_eq!(
        (a.ftype, a.mode, a.size, a.nlink),
        (Ftype3::Reg, 0o640, 0, 1)
    );
    assert_ne!(a.fileid, ra.fileid);
    assert_eq!(s.lookup(&R, d, b"f"), Ok(f));
    let guarded = s.create(&R, d, b"f", &CreateHow::Guarded(mode(0o640)));
    assert_eq!(guarded, Err(Nfsstat3::EXIST));
    write(s, &f, 0, b"abc");
    let trunc = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(s.create(&R, d, b"f", &CreateHow::Unchecked(trunc)), Ok(f));
    assert_eq!(attr(s, &f).size, 0, "UNCHECKED applies the attributes");
    let sub = mkdir(s, d, "sub");
    let unchecked = s.create(&R, d, b"sub", &CreateHow::Unchecked(Sattr3::default()));
    assert_eq!(unchecked, Err(Nfsstat3::EXIST));
    assert_eq!(
        s.create(&R, d, b".", &CreateHow::Guarded(mode(0o644))),
        Err(Nfsstat3::EXIST)
    );

    assert_eq!(s.lookup(&R, d, b"nope"), Err(Nfsstat3::NOENT));
    assert_eq!(s.lookup(&R, &f, b"x"), Err(Nfsstat3::NOTDIR));
    assert_eq!(s.lookup(&R, d, &[b'n'; 256]), Err(Nfsstat3::NAMETOOLONG));
    assert_eq!(
        s.create(&R, &f, b"x", &CreateHow::Guarded(mode(0o644))),
        Err(Nfsstat3::NOTDIR)
    );
    assert_eq!(s.mkdir(&R, &f, b"x", &mode(0o755)), Err(Nfsstat3::NOTDIR));
    assert_eq!(
        s.readdir(&R, &f, 0, [0; 8], false, &mut |_| true),
        Err(Nfsstat3::NOTDIR)
    );
    assert_eq!(s.getattr(&sub).map(|a| a.ftype), Ok(Ftype3::Dir));

    for garbage in [&b""[..], b"garbage", &[0u8; 64], b"RM\x01", b"RD\x01"] {
        let g = Fh::new(garbage).expect("fits");
        assert_eq!(s.getattr(&g), Err(Nfsstat3::BADHANDLE), "{garbage:?}");
        assert_eq!(s.lookup(&R, &g, b"f"), Err(Nfsstat3::BADHANDLE));
    }
}

fn data(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "f");
    changes(s, &f, true, || write(s, &f, 0, b"hello"));
    assert_eq!(read(s, &f, 0, 5), (b"hello".to_vec(), true));
    assert_eq!(read(s, &f, 0, 2), (b"he".to_vec(), false));
    assert_eq!(read(s, &f, 3, 10), (b"lo".to_vec(), true));
    assert_eq!(read(s, &f, 5, 10), (Vec::new(), true));
    assert_eq!(read(s, &f, 1 << 40, 10), (Vec::new(), true), "past EOF");
    assert_eq!(read(s, &f, u64::MAX, 10), (Vec::new(), true));

    // Sparse: a hole between the data and a write far beyond.
    let far = (1 << 20) + 5;
    write(s, &f, far, b"end");
    assert_eq!(attr(s, &f).size, far + 3);
    let (hole, eof) = read(s, &f, 5, 9000);
    assert!(!eof && hole.len() == 9000 && hole.iter().all(|&b| b == 0));
    assert_eq!(read(s, &f, far - 2, 10), (b"\0\0end".to_vec(), true));
    assert!(attr(s, &f).used < far, "holes are not stored");

    let st = s
        .write(&R, &f, 2, b"LL", StableHow::Unstable)
        .expect("write");
    assert!(st >= StableHow::Unstable);
    assert_eq!(
        s.write(&R, &f, 0, b"H", StableHow::DataSync),
        Ok(StableHow::DataSync)
    );
    s.commit(&R, &f).expect("commit");
    assert_eq!(read(s, &f, 0, 5).0, b"HeLLo");
    assert_eq!(
        s.write(&R, &f, 0, b"", StableHow::FileSync),
        Ok(StableHow::FileSync)
    );

    // ctime strictly increases over two quick changes.
    let c0 = attr(s, &f).ctime;
    s.setattr(&R, &f, &mode(0o600), None).expect("chmod");
    let c1 = attr(s, &f).ctime;
    s.setattr(&R, &f, &mode(0o644), None).expect("chmod");
    let c2 = attr(s, &f).ctime;
    assert!(c0 < c1 && c1 < c2, "{c0:?} {c1:?} {c2:?}");

    let max = s.max_file_size();
    assert_eq!(
        s.write(&R, &f, max, b"x", StableHow::FileSync),
        Err(Nfsstat3::FBIG)
    );
    assert_eq!(
        s.write(&R, &f, u64::MAX - 1, b"xyz", StableHow::FileSync),
        Err(Nfsstat3::FBIG)
    );
    let big = Sattr3 {
        size: Some(u64::MAX),
        ..Sattr3::default()
    };
    assert_eq!(s.setattr(&R, &f, &big, None), Err(Nfsstat3::FBIG));
    let mut out = [0u8; 4];
    assert_eq!(
        s.write(&R, d, 0, b"x", StableHow::FileSync),
        Err(Nfsstat3::ISDIR)
    );
    assert_eq!(s.read(&R, d, 0, &mut out), Err(Nfsstat3::ISDIR));
    let l = s
        .symlink(&R, d, b"l", b"f", &Sattr3::default())
        .expect("symlink");
    assert_eq!(s.read(&R, &l, 0, &mut out), Err(Nfsstat3::INVAL));
    assert_eq!(
        s.write(&R, &l, 0, b"x", StableHow::FileSync),
        Err(Nfsstat3::INVAL)
    );
    assert_eq!(s.commit(&R, d), Err(Nfsstat3::ISDIR));
}

fn setattr(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "f");
    write(s, &f, 0, b"0123456789");
    let set = |sa: Sattr3| s.setattr(&R, &f, &sa, None).expect("setattr");
    changes(s, &f, true, || {
        set(Sattr3 {
            size: Some(4),
            ..Sattr3::default()
        })
    });
    assert_eq!(read(s, &f, 0, 100), (b"0123".to_vec(), true));
    set(Sattr3 {
        size: Some(8),
        ..Sattr3::default()
    });
    assert_eq!(read(s, &f, 0, 100), (b"0123\0\0\0\0".to_vec(), true));

    let t = |seconds| Time3 {
        seconds,
        nseconds: 5,
    };
    set(Sattr3 {
        mode: Some(0o4711),
        uid: Some(1234),
        gid: Some(4321),
        size: None,
        atime: SetTime::ClientTime(t(1_000_000)),
        mtime: SetTime::ClientTime(t(2_000_000)),
        umask: None,
    });
    let a = attr(s, &f);
    assert_eq!((a.uid, a.gid), (1234, 4321));
    assert_eq!(a.mode & 0o777, 0o711);
    assert_eq!((a.atime, a.mtime), (t(1_000_000), t(2_000_000)));
    // Times NFSv3's 32-bit seconds cannot carry but NFSv4's `nfstime4` can: 2^31 and 2^32 s
    // (pjdfstest's `utimensat::y2038`), and before 1970.
    for (at, mt) in [(1 << 31, 1 << 32), (-1, -86_400)] {
        set(Sattr3 {
            atime: SetTime::ClientTime(t(at)),
            mtime: SetTime::ClientTime(t(mt)),
            ..Sattr3::default()
        });
        let b = attr(s, &f);
        assert_eq!((b.atime, b.mtime), (t(at), t(mt)), "times {at} and {mt}");
    }
    set(Sattr3 {
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    });
    assert!(attr(s, &f).mtime.seconds > 1_700_000_000);

    let ctime = attr(s, &f).ctime;
    let stale = Time3 {
        seconds: ctime.seconds.wrapping_sub(1),
        ..ctime
    };
    assert_eq!(
        s.setattr(&R, &f, &mode(0o600), Some(stale)),
        Err(Nfsstat3::NOT_SYNC)
    );
    assert_eq!(attr(s, &f).mode, a.mode, "a failed guard changes nothing");
    s.setattr(&R, &f, &mode(0o600), Some(ctime))
        .expect("guard matches");
    assert_eq!(attr(s, &f).mode, 0o600);

    let size = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(s.setattr(&R, d, &size, None), Err(Nfsstat3::ISDIR));
    let l = s
        .symlink(&R, d, b"l", b"f", &Sattr3::default())
        .expect("symlink");
    assert_eq!(s.setattr(&R, &l, &size, None), Err(Nfsstat3::INVAL));
    let own = Sattr3 {
        uid: Some(77),
        mtime: SetTime::ClientTime(t(3_000_000)),
        ..Sattr3::default()
    };
    s.setattr(&R, &l, &own, None).expect("setattr symlink");
    let la = attr(s, &l);
    assert_eq!(
        (la.ftype, la.uid, la.mtime),
        (Ftype3::Lnk, 77, t(3_000_000))
    );
    assert_ne!(attr(s, &f).mtime, t(3_000_000), "the target is untouched");
}

fn dirs(s: &dyn Store, d: &Fh) {
    let n0 = attr(s, d).nlink;
    let mut sub = None;
    changes(s, d, true, || sub = Some(mkdir(s, d, "sub")));
    let sub = sub.expect("sub");
    assert_eq!(attr(s, d).nlink, n0 + 1);
    assert_eq!(attr(s, &sub).nlink, 2);
    assert_eq!(s.mkdir(&R, d, b"sub", &mode(0o755)), Err(Nfsstat3::EXIST));
    let inner = file(s, &sub, "inner");
    assert_eq!(s.rmdir(&R, d, b"sub"), Err(Nfsstat3::NOTEMPTY));
    assert_eq!(s.remove(&R, d, b"sub"), Err(Nfsstat3::ISDIR));
    let f = file(s, d, "f");
    assert_eq!(s.rmdir(&R, d, b"f"), Err(Nfsstat3::NOTDIR));
    assert_eq!(s.remove(&R, d, b"nope"), Err(Nfsstat3::NOENT));
    assert_eq!(s.rmdir(&R, d, b"nope"), Err(Nfsstat3::NOENT));
    assert_eq!(s.remove(&R, &f, b"x"), Err(Nfsstat3::NOTDIR));
    assert_eq!(s.rmdir(&R, d, b"."), Err(Nfsstat3::INVAL));

    changes(s, &sub, true, || {
        s.remove(&R, &sub, b"inner").expect("remove")
    });
    assert_eq!(s.getattr(&inner), Err(Nfsstat3::STALE));
    assert_eq!(s.read(&R, &inner, 0, &mut [0; 4]), Err(Nfsstat3::STALE));
    assert_eq!(s.lookup(&R, &sub, b"inner"), Err(Nfsstat3::NOENT));
    changes(s, d, true, || s.rmdir(&R, d, b"sub").expect("rmdir"));
    assert_eq!(attr(s, d).nlink, n0);
    assert_eq!(s.getattr(&sub), Err(Nfsstat3::STALE));
    assert_eq!(s.lookup(&R, &sub, b"x"), Err(Nfsstat3::STALE));
    assert_eq!(names(s, d), ["f"]);
}

fn links(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "f");
    write(s, &f, 0, b"data");
    changes(s, &f, false, || s.link(&R, &f, d, b"g").expect("link"));
    assert_eq!(attr(s, &f).nlink, 2);
    assert_eq!(s.lookup(&R, d, b"g"), Ok(f));
    assert_eq!(s.link(&R, &f, d, b"g"), Err(Nfsstat3::EXIST));
    assert_eq!(s.link(&R, d, d, b"dirlink"), Err(Nfsstat3::ISDIR));
    assert_eq!(s.link(&R, &f, &f, b"x"), Err(Nfsstat3::NOTDIR));
    s.remove(&R, d, b"f").expect("remove");
    assert_eq!(attr(s, &f).nlink, 1);
    assert_eq!(read(s, &f, 0, 10).0, b"data", "still reachable as g");

    let l = s
        .symlink(&R, d, b"l", b"g", &Sattr3::default())
        .expect("symlink");
    assert_eq!(
        s.symlink(&R, d, b"l", b"x", &Sattr3::default()),
        Err(Nfsstat3::EXIST)
    );
    assert_eq!(
        s.lookup(&R, d, b"l"),
        Ok(l),
        "LOOKUP returns the link itself"
    );
    let la = attr(s, &l);
    assert_eq!((la.ftype, la.size), (Ftype3::Lnk, 1));
    let mut out = [0u8; 64];
    assert_eq!(s.readlink(&R, &l, &mut out), Ok(1));
    assert_eq!(&out[..1], b"g");
    assert_eq!(s.readlink(&R, &f, &mut out), Err(Nfsstat3::INVAL));
    // A directory: ISDIR, as Linux nfsd's READLINK answers (`nfsd_mode_check`).
    assert_eq!(s.readlink(&R, d, &mut out), Err(Nfsstat3::ISDIR));
    let dangling = s.symlink(&R, d, b"dangling", b"../../nowhere", &Sattr3::default());
    let dangling = dangling.expect("dangling symlink");
    assert_eq!(s.readlink(&R, &dangling, &mut out), Ok(13));
    s.link(&R, &l, d, b"l2").expect("hard link to a symlink");
    assert_eq!(attr(s, &l).nlink, 2);
}

fn rename(s: &dyn Store, d: &Fh) {
    let a = mkdir(s, d, "a");
    let b = mkdir(s, d, "b");
    let f = file(s, &a, "f");
    // Plain move across directories: both change.
    let (ba, bb) = (attr(s, &a), attr(s, &b));
    s.rename(&R, &a, b"f", &b, b"g").expect("rename");
    assert!(attr(s, &a).mtime > ba.mtime && attr(s, &b).ctime > bb.ctime);
    assert_eq!(s.lookup(&R, &b, b"g"), Ok(f));
    assert_eq!(s.lookup(&R, &a, b"f"), Err(Nfsstat3::NOENT));
    assert_eq!(s.rename(&R, &a, b"f", &b, b"x"), Err(Nfsstat3::NOENT));
    // Replacing a file: the old target goes away.
    let h = file(s, &b, "h");
    s.rename(&R, &b, b"g", &b, b"h").expect("replace");
    assert_eq!(s.lookup(&R, &b, b"h"), Ok(f));
    assert_eq!(s.getattr(&h), Err(Nfsstat3::STALE));
    assert_eq!(names(s, &b), ["h"]);
    // Onto itself and onto another link of the same file: no-ops.
    s.rename(&R, &b, b"h", &b, b"h").expect("onto itself");
    s.link(&R, &f, &b, b"h2").expect("link");
    s.rename(&R, &b, b"h", &b, b"h2")
        .expect("onto a link of itself");
    assert_eq!(names(s, &b), ["h", "h2"]);
    assert_eq!(attr(s, &f).nlink, 2);
    // Type mismatches and non-empty targets.
    let e = mkdir(s, &a, "empty");
    let full = mkdir(s, &a, "full");
    file(s, &full, "x");
    assert_eq!(s.rename(&R, &b, b"h", &a, b"empty"), Err(Nfsstat3::ISDIR));
    assert_eq!(s.rename(&R, &a, b"empty", &b, b"h"), Err(Nfsstat3::NOTDIR));
    let notempty = s.rename(&R, &a, b"empty", &a, b"full");
    assert!(
        matches!(notempty, Err(Nfsstat3::NOTEMPTY) | Err(Nfsstat3::EXIST)),
        "{notempty:?}"
    );
    assert_eq!(
        s.rename(&R, &a, b"full", &full, b"sub"),
        Err(Nfsstat3::INVAL),
        "under itself"
    );
    let na = attr(s, &a).nlink;
    // A directory replaces an empty one, across directories.
    let e2 = mkdir(s, &b, "e2");
    s.rename(&R, &b, b"e2", &a, b"empty")
        .expect("dir onto empty dir");
    assert_eq!(s.getattr(&e), Err(Nfsstat3::STALE));
    assert_eq!(s.lookup(&R, &a, b"empty"), Ok(e2));
    assert_eq!(attr(s, &a).nlink, na);
    // Moving a directory moves its "..".
    let nb = attr(s, &b).nlink;
    s.rename(&R, &a, b"full", &b, b"full").expect("move dir");
    assert_eq!(s.lookup(&R, &full, b".."), Ok(b));
    assert_eq!(attr(s, &a).nlink, na - 1);
    assert_eq!(attr(s, &b).nlink, nb + 1);
    assert_eq!(s.rename(&R, &a, b".", &b, b"x"), Err(Nfsstat3::PERM));
    assert_eq!(s.rename(&R, &f, b"x", &b, b"y"), Err(Nfsstat3::NOTDIR));
}

fn readdir(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "f");
    let sub = mkdir(s, d, "sub");
    let mut seen = HashMap::new();
    let listing = s
        .readdir(&R, d, 0, [0; 8], true, &mut |e| {
            let name = String::from_utf8_lossy(e.name).into_owned();
            assert!(e.cookie != 0);
            let (fh, a) = e.plus.expect("plus");
            assert_eq!(a.fileid, e.fileid, "{name}");
            seen.insert(name, (fh, e.cookie));
            true
        })
        .expect("readdir");
    assert!(listing.eof);
    let mut keys: Vec<_> = seen.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, [".", "..", "f", "sub"]);
    assert_eq!(seen["f"].0, f);
    assert_eq!(seen["sub"].0, sub);
    assert_eq!(attr(s, &seen["."].0).fileid, attr(s, d).fileid);
    assert_eq!(attr(s, &seen[".."].0).fileid, attr(s, &s.root()).fileid);

    // Stop after the first entry, resume from its cookie.
    let mut first = None;
    let l = s
        .readdir(&R, d, 0, [0; 8], false, &mut |e| {
            first.get_or_insert(e.cookie);
            first.is_none()
        })
        .expect("readdir");
    assert!(!l.eof);
    let first = first.expect("an entry");
    let mut rest = 0;
    let again = s.readdir(&R, d, first, l.verf, false, &mut |_| {
        rest += 1;
        true
    });
    assert!(again.expect("resume").eof);
    assert_eq!(rest, 3);
    let wrong = [l.verf[0] ^ 0xff, 1, 2, 3, 4, 5, 6, 7];
    let bad = s.readdir(&R, d, first, wrong, false, &mut |_| true);
    assert_eq!(bad, Err(Nfsstat3::BAD_COOKIE));
    let any = s.readdir(&R, d, 0, wrong, false, &mut |_| true);
    assert!(any.is_ok(), "cookie 0 takes any verifier");
}

/// Pages through 5000 entries, 40 at a time, removing and adding entries between pages:
/// every entry present throughout is listed exactly once.
fn paging(s: &dyn Store, d: &Fh) {
    const N: usize = 5000;
    for i in 0..N {
        s.create(
            &R,
            d,
            format!("f{i}").as_bytes(),
            &CreateHow::Unchecked(Sattr3::default()),
        )
        .expect("create");
    }
    let mut seen: HashMap<String, u32> = HashMap::new();
    let (mut cookie, mut verf, mut page, mut added) = (0u64, [0u8; 8], 0usize, 0usize);
    loop {
        let mut n = 0;
        let l = s
            .readdir(&R, d, cookie, verf, false, &mut |e| {
                if n == 40 {
                    return false;
                }
                n += 1;
                *seen
                    .entry(String::from_utf8_lossy(e.name).into_owned())
                    .or_default() += 1;
                cookie = e.cookie;
                true
            })
            .expect("readdir page");
        verf = l.verf;
        if l.eof {
            break;
        }
        // Churn: remove 8 of the volatile entries (i % 10 == 0), add 8 new ones.
        for k in 0..8 {
            let i = (page * 8 + k) * 10;
            if i < N {
                s.remove(&R, d, format!("f{i}").as_bytes()).expect("remove");
            }
            let how = CreateHow::Guarded(Sattr3::default());
            s.create(&R, d, format!("n{added}").as_bytes(), &how)
                .expect("add");
            added += 1;
        }
        page += 1;
        assert!(page < 1000, "listing does not end");
    }
    assert!(page > 100);
    for i in (0..N).filter(|i| i % 10 != 0) {
        assert_eq!(seen.get(&format!("f{i}")), Some(&1), "f{i}");
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
    assert!(twice.is_empty(), "listed twice: {twice:?}");
    assert_eq!(seen.get("."), Some(&1));
}

fn exclusive(s: &dyn Store, d: &Fh) {
    let v = *b"\x12\x34\x56\x78\x9a\xbc\xde\xf0";
    let f = s
        .create(&R, d, b"x", &CreateHow::Exclusive(v))
        .expect("create");
    assert_eq!(attr(s, &f).ftype, Ftype3::Reg);
    // An exclusive CREATE carries no mode: the file has mode 0 until the client's SETATTR, as
    // with Linux nfsd, and so does any object made without one (not readable meanwhile).
    assert_eq!(attr(s, &f).mode & 0o7777, 0, "exclusive create");
    let none = Sattr3::default();
    let g = s
        .create(&R, d, b"g", &CreateHow::Unchecked(none))
        .expect("create");
    let sub = s.mkdir(&R, d, b"m", &none).expect("mkdir");
    let fifo = s.mknod(&R, d, b"p", Special::Fifo, &none).expect("mknod");
    for (what, fh) in [("file", g), ("directory", sub), ("fifo", fifo)] {
        assert_eq!(attr(s, &fh).mode & 0o7777, 0, "{what} made without a mode");
    }
    assert_eq!(
        s.create(&R, d, b"x", &CreateHow::Exclusive(v)),
        Ok(f),
        "retransmission"
    );
    let other = CreateHow::Exclusive(*b"otherver");
    assert_eq!(s.create(&R, d, b"x", &other), Err(Nfsstat3::EXIST));
    // The verifier lives in the times: a mode set (what an NFSv4.1 EXCLUSIVE4_1 create sets)
    // keeps it, a write ends it.
    s.setattr(&R, &f, &mode(0o600), None).expect("chmod");
    assert_eq!(
        s.create(&R, d, b"x", &CreateHow::Exclusive(v)),
        Ok(f),
        "retransmission after a mode change"
    );
    let w = s
        .create(&R, d, b"w", &CreateHow::Exclusive(v))
        .expect("create");
    write(s, &w, 0, b"data");
    assert_eq!(
        s.create(&R, d, b"w", &CreateHow::Exclusive(v)),
        Err(Nfsstat3::EXIST),
        "retransmission after a write"
    );
    assert_eq!(
        s.create(&R, d, b"x", &CreateHow::Guarded(mode(0o644))),
        Err(Nfsstat3::EXIST)
    );
    let times = Sattr3 {
        mode: Some(0o640),
        atime: SetTime::ServerTime,
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    s.setattr(&R, &f, &times, None).expect("setattr");
    assert_eq!(
        s.create(&R, d, b"x", &CreateHow::Exclusive(v)),
        Err(Nfsstat3::EXIST)
    );
    mkdir(s, d, "dir");
    assert_eq!(
        s.create(&R, d, b"dir", &CreateHow::Exclusive(v)),
        Err(Nfsstat3::EXIST)
    );
}

// ---------------------------------------------------------------- the runs

#[test]
fn memory_store_meets_the_store_contract() {
    let s = memory();
    assert_eq!(s.kind(), "memory");
    conformance(&s);
}

#[test]
fn memory_store_with_a_pool_meets_the_store_contract() {
    let tp = super::memory::test_pool::TestPool::new(16);
    let s = MemoryStore::with_pool(MemoryOptions::default(), tp.pool.clone());
    conformance(&s);
}

#[test]
fn dir_store_meets_the_store_contract() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    assert_eq!(s.kind(), "dir");
    conformance(&s);
}

#[test]
fn memory_store_refuses_data_past_capacity_and_files_past_max_files() {
    let s = MemoryStore::new(MemoryOptions {
        capacity: 20_000,
        max_files: 4,
        block_size: 1024,
    });
    let root = s.root();
    let free = |s: &MemoryStore| s.fsstat(&root).expect("fsstat").fbytes;
    let empty = free(&s);
    assert!(empty < 20_000, "the root directory is charged");
    let f = file(&s, &root, "f");
    let before = free(&s);
    assert!(before < empty, "a file is charged its inode and name");
    write(&s, &f, 1 << 30, b"sparse costs only the block written");
    assert!(before - free(&s) < 2048);
    let mut n = 0u64;
    while s
        .write(&R, &f, n * 1024, &[1; 1024], StableHow::FileSync)
        .is_ok()
    {
        n += 1;
    }
    assert!(n > 8, "{n} blocks");
    assert_eq!(
        s.write(&R, &f, n * 1024, &[1; 1024], StableHow::FileSync),
        Err(Nfsstat3::NOSPC)
    );
    assert_eq!(
        read(&s, &f, n * 1024, 4),
        (vec![0; 4], false),
        "nothing written"
    );
    let fs = s.fsstat(&root).expect("fsstat");
    assert_eq!((fs.tbytes, fs.tfiles), (20_000, 4));
    assert!(
        fs.fbytes < 2048 && fs.ffiles < 2,
        "full: few inodes fit {fs:?}"
    );
    let shrink = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    s.setattr(&R, &f, &shrink, None).expect("truncate");
    assert_eq!(free(&s), before, "truncation gives every octet back");
    assert_eq!(s.fsstat(&root).expect("fsstat").ffiles, 2);
    file(&s, &root, "g");
    mkdir(&s, &root, "d");
    assert_eq!(s.mkdir(&R, &root, b"e", &mode(0o755)), Err(Nfsstat3::NOSPC));
    assert_eq!(
        s.create(&R, &root, b"h", &CreateHow::Guarded(mode(0o644))),
        Err(Nfsstat3::NOSPC)
    );
    s.remove(&R, &root, b"g").expect("remove");
    file(&s, &root, "h");
}

#[test]
fn memory_store_handles_are_stale_in_another_instance() {
    let (a, b) = (memory(), memory());
    let f = file(&a, &a.root(), "f");
    assert_eq!(b.getattr(&f), Err(Nfsstat3::STALE));
    assert_eq!(f.as_bytes().len(), 16);
    assert_ne!(a.write_verifier(), b.write_verifier());
    let mut wrong = f.as_bytes().to_vec();
    wrong[2] = 9;
    assert_eq!(
        a.getattr(&Fh::new(&wrong).expect("fh")),
        Err(Nfsstat3::BADHANDLE)
    );
    wrong.push(0);
    assert_eq!(
        a.getattr(&Fh::new(&wrong).expect("fh")),
        Err(Nfsstat3::BADHANDLE)
    );
}

#[test]
fn dir_store_handles_survive_a_restart() {
    let t = TempDir::new();
    let (root, f, sub, verf) = {
        let s = DirStore::open(&t.0).expect("open");
        let sub = mkdir(&s, &s.root(), "sub");
        let f = file(&s, &sub, "f");
        write(&s, &f, 0, b"kept");
        (s.root(), f, sub, s.write_verifier())
    };
    let s = DirStore::open(&t.0).expect("reopen");
    assert_eq!(s.root(), root);
    assert_ne!(
        s.write_verifier(),
        verf,
        "a restart changes the write verifier"
    );
    assert_eq!(read(&s, &f, 0, 10), (b"kept".to_vec(), true));
    assert_eq!(s.lookup(&R, &sub, b"f"), Ok(f));
    assert_eq!(s.lookup(&R, &sub, b".."), Ok(root));
}

#[test]
fn dir_store_refuses_handles_of_another_export_and_garbage() {
    let (t1, t2) = (TempDir::new(), TempDir::new());
    let (a, b) = (
        DirStore::open(&t1.0).expect("open"),
        DirStore::open(&t2.0).expect("open"),
    );
    let f = file(&a, &a.root(), "f");
    assert_eq!(b.getattr(&f), Err(Nfsstat3::STALE));
    assert_eq!(b.getattr(&a.root()), Err(Nfsstat3::STALE));
    // Our header and tag with garbage kernel handles: refused, never a panic.
    let broot = b.root();
    let hdr = &broot.as_bytes()[..12];
    for tail in [
        &[0u8; 1][..],
        &[0xff; 8],
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        &[7; 52],
    ] {
        let mut v = hdr.to_vec();
        v.extend_from_slice(tail);
        let g = Fh::new(&v).expect("fits");
        let r = b.getattr(&g);
        assert!(
            matches!(r, Err(Nfsstat3::STALE) | Err(Nfsstat3::BADHANDLE)),
            "{r:?}"
        );
        assert!(b.read(&R, &g, 0, &mut [0; 8]).is_err());
    }
    let mut wrong_type = b.root().as_bytes().to_vec();
    wrong_type[8..12].copy_from_slice(&0x7fff_0000i32.to_be_bytes());
    let r = b.getattr(&Fh::new(&wrong_type).expect("fh"));
    assert!(
        matches!(r, Err(Nfsstat3::STALE) | Err(Nfsstat3::BADHANDLE)),
        "{r:?}"
    );
}

#[test]
fn dir_store_refuses_what_it_cannot_export() {
    let t = TempDir::new();
    let f = t.0.join("plain");
    std::fs::write(&f, b"x").expect("file");
    assert!(DirStore::open(&f).is_err());
    assert!(DirStore::open(&t.0.join("missing")).is_err());
}

mod acl;
mod clone;
mod perm;
mod space;
mod umask;
mod wcc;
mod xattr;
