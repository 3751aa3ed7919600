//! Attacks on the directory store from callers that are not root, or that try to reach
//! outside the export: each test sets up a real directory as root, then calls the store as
//! another [`Cred`] and checks that the host kernel refused what POSIX refuses, and that
//! nothing outside the export changed.
//!
//! Normal operation: every test needs root (to own files and to switch identities) and skips
//! with a message otherwise. Each test runs on its own thread, whose identity the store
//! switches; [`server`] switches it back before the test touches files itself. Recovery: the
//! export directory (and any outside file) is removed on drop.

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{handle, ident, sys, DirStore};
use crate::nfs::identity::Cred;
use crate::nfs::store::{Special, Store};
use crate::nfs::types::{access, CreateHow, Fh, Ftype3, Nfsstat3, Sattr3, SetTime};
use crate::nfs::types::{StableHow, Time3};

const ALICE: Cred = Cred::new(1000, 1000);
const BOB: Cred = Cred::new(1001, 1001);
const ROOT: Cred = Cred::ROOT;

/// True (after a message) when the test cannot run: it needs root.
fn not_root() -> bool {
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: the directory store's identity tests need root");
    }
    !root
}

/// Makes the test thread the server again (after store calls switched it).
fn server() {
    ident::as_server().expect("back to root");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh directory under the temp dir (root-owned, 0755), removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rpcrdma-dir-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("temp dir");
        chmod(&p, 0o755);
        Tmp(p)
    }

    fn at(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        server();
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).expect("chown");
}

/// A root-owned file holding `data` with `mode`.
fn root_file(p: &Path, data: &[u8], mode: u32) {
    fs::write(p, data).expect("write");
    chmod(p, mode);
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// The export `t` as a store, with its root handle.
fn store(t: &Tmp) -> (DirStore, Fh) {
    let s = DirStore::open(&t.0).expect("open");
    let r = s.root();
    (s, r)
}

fn look(s: &DirStore, cx: &Cred, d: &Fh, name: &str) -> Fh {
    s.lookup(cx, d, name.as_bytes()).expect("lookup")
}

fn err<T: core::fmt::Debug>(r: Result<T, Nfsstat3>) -> Nfsstat3 {
    r.expect_err("the store refused")
}

/// (uid, gid, mode, links, mtime, content) of a path, not following a link.
type Snapshot = (u32, u32, u32, u64, i64, Vec<u8>);

/// The [`Snapshot`] of `p`.
fn snapshot(p: &Path) -> Snapshot {
    server();
    let m = fs::symlink_metadata(p).expect("stat");
    let data = fs::read(p).unwrap_or_default();
    (m.uid(), m.gid(), m.mode(), m.nlink(), m.mtime(), data)
}

#[test]
fn rejects_writes_and_creation_by_others() {
    if not_root() {
        return;
    }
    let t = Tmp::new("write");
    root_file(&t.at("f"), b"root data", 0o644);
    fs::create_dir(t.at("locked")).expect("mkdir");
    chmod(&t.at("locked"), 0o755);
    let (s, r) = store(&t);
    let f = look(&s, &ALICE, &r, "f");
    let us = StableHow::Unstable;
    assert_eq!(err(s.write(&ALICE, &f, 0, b"x", us)), Nfsstat3::ACCES);
    let trunc = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(err(s.setattr(&ALICE, &f, &trunc, None)), Nfsstat3::ACCES);
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&ALICE, &f, 0, &mut buf), Ok((9, true)));
    let d = look(&s, &ALICE, &r, "locked");
    let how = CreateHow::Guarded(mode(0o644));
    assert_eq!(err(s.create(&ALICE, &d, b"n", &how)), Nfsstat3::ACCES);
    assert_eq!(
        err(s.mkdir(&ALICE, &d, b"n", &mode(0o755))),
        Nfsstat3::ACCES
    );
    let sym = s.symlink(&ALICE, &d, b"n", b"x", &Sattr3::default());
    assert_eq!(err(sym), Nfsstat3::ACCES);
    let fifo = s.mknod(&ALICE, &d, b"n", Special::Fifo, &mode(0o644));
    assert_eq!(err(fifo), Nfsstat3::ACCES);
    assert_eq!(err(s.remove(&ALICE, &r, b"f")), Nfsstat3::ACCES);
    assert_eq!(err(s.rename(&ALICE, &r, b"f", &r, b"g")), Nfsstat3::ACCES);
    assert_eq!(err(s.link(&ALICE, &f, &r, b"g")), Nfsstat3::ACCES);
    assert_eq!(snapshot(&t.at("f")).5, b"root data");
    // Root may; the owner may write its own read-only file (Linux nfsd's owner override).
    assert_eq!(s.write(&ROOT, &f, 0, b"R", us), Ok(us));
    server();
    chown(&t.at("f"), ALICE.uid, ALICE.gid);
    chmod(&t.at("f"), 0o444);
    assert_eq!(s.write(&ALICE, &f, 1, b"A", us), Ok(us));
    assert_eq!(err(s.write(&BOB, &f, 1, b"B", us)), Nfsstat3::ACCES);
    assert_eq!(snapshot(&t.at("f")).5, b"RAot data");
}

#[test]
fn rejects_attribute_changes_by_others() {
    if not_root() {
        return;
    }
    let t = Tmp::new("attrs");
    root_file(&t.at("f"), b"x", 0o644);
    let before = snapshot(&t.at("f"));
    let (s, r) = store(&t);
    let f = look(&s, &ALICE, &r, "f");
    let t1 = SetTime::ClientTime(Time3 {
        seconds: 1_000_000,
        nseconds: 0,
    });
    let sets = [
        mode(0o666),
        Sattr3 {
            uid: Some(ALICE.uid),
            ..Sattr3::default()
        },
        Sattr3 {
            gid: Some(ALICE.gid),
            ..Sattr3::default()
        },
        Sattr3 {
            mtime: t1,
            ..Sattr3::default()
        },
    ];
    for set in &sets {
        assert_eq!(
            err(s.setattr(&ALICE, &f, set, None)),
            Nfsstat3::PERM,
            "{set:?}"
        );
    }
    // Both times to the server's clock needs write permission; one of them, ownership.
    let now = Sattr3 {
        atime: SetTime::ServerTime,
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    assert_eq!(err(s.setattr(&ALICE, &f, &now, None)), Nfsstat3::ACCES);
    let mtime_now = Sattr3 {
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    assert_eq!(err(s.setattr(&ALICE, &f, &mtime_now, None)), Nfsstat3::PERM);
    assert_eq!(snapshot(&t.at("f")), before);
    // The owner may change mode and times but not give the file away.
    server();
    chown(&t.at("f"), ALICE.uid, ALICE.gid);
    assert_eq!(s.setattr(&ALICE, &f, &sets[0], None), Ok(()));
    assert_eq!(s.setattr(&ALICE, &f, &sets[3], None), Ok(()));
    let give = Sattr3 {
        uid: Some(BOB.uid),
        ..Sattr3::default()
    };
    assert_eq!(err(s.setattr(&ALICE, &f, &give, None)), Nfsstat3::PERM);
    let a = s.getattr(&f).expect("getattr");
    assert_eq!(
        (a.mode, a.uid, a.mtime.seconds),
        (0o666, ALICE.uid, 1_000_000)
    );
}

#[test]
fn rejects_removing_others_files_from_sticky_directory() {
    if not_root() {
        return;
    }
    let t = Tmp::new("sticky");
    fs::create_dir(t.at("tmp")).expect("mkdir");
    chmod(&t.at("tmp"), 0o1777);
    let (s, r) = store(&t);
    let d = look(&s, &BOB, &r, "tmp");
    let how = CreateHow::Guarded(mode(0o644));
    s.create(&BOB, &d, b"bobs", &how).expect("create");
    // The kernel's EPERM (`may_delete`) is passed on as PERM, as Linux nfsd does.
    assert_eq!(err(s.remove(&ALICE, &d, b"bobs")), Nfsstat3::PERM);
    let moved = s.rename(&ALICE, &d, b"bobs", &d, b"mine");
    assert_eq!(err(moved), Nfsstat3::PERM);
    s.create(&ALICE, &d, b"alices", &how).expect("create");
    let replaced = s.rename(&ALICE, &d, b"alices", &d, b"bobs");
    assert_eq!(err(replaced), Nfsstat3::PERM);
    assert_eq!(s.remove(&BOB, &d, b"bobs"), Ok(()));
    assert_eq!(s.remove(&ALICE, &d, b"alices"), Ok(()));
}

#[test]
fn accepts_supplementary_group_access() {
    if not_root() {
        return;
    }
    let t = Tmp::new("groups");
    fs::create_dir(t.at("team")).expect("mkdir");
    chown(&t.at("team"), 0, 2000);
    chmod(&t.at("team"), 0o770);
    root_file(&t.at("team/doc"), b"team", 0o660);
    chown(&t.at("team/doc"), 0, 2000);
    let (s, r) = store(&t);
    let member = Cred::with_groups(ALICE.uid, ALICE.gid, &[3000, 2000]);
    let d = look(&s, &member, &r, "team");
    let doc = look(&s, &member, &d, "doc");
    let us = StableHow::Unstable;
    assert_eq!(s.write(&member, &doc, 0, b"T", us), Ok(us));
    let how = CreateHow::Guarded(mode(0o640));
    s.create(&member, &d, b"new", &how).expect("create");
    let want = access::READ | access::MODIFY | access::EXECUTE;
    let got = s.access(&member, &doc, want).expect("access").1;
    assert_eq!(got, access::READ | access::MODIFY);
    // The same user without the group.
    assert_eq!(err(s.lookup(&ALICE, &d, b"doc")), Nfsstat3::ACCES);
    assert_eq!(err(s.write(&ALICE, &doc, 0, b"A", us)), Nfsstat3::ACCES);
    assert_eq!(err(s.create(&ALICE, &d, b"x", &how)), Nfsstat3::ACCES);
    assert_eq!(s.access(&ALICE, &doc, want).expect("access").1, 0);
    assert_eq!(snapshot(&t.at("team/doc")).5, b"Team");
}

#[test]
fn accepts_new_objects_owned_by_the_caller() {
    if not_root() {
        return;
    }
    let t = Tmp::new("owner");
    fs::create_dir(t.at("open")).expect("mkdir");
    chmod(&t.at("open"), 0o777);
    fs::create_dir(t.at("sgid")).expect("mkdir");
    chown(&t.at("sgid"), 0, 3000);
    chmod(&t.at("sgid"), 0o2777);
    let (s, r) = store(&t);
    for (dir, gid) in [("open", ALICE.gid), ("sgid", 3000)] {
        let d = look(&s, &ALICE, &r, dir);
        // uid / gid asked by a caller who is not root are dropped (Linux nfsd).
        let attr = Sattr3 {
            mode: Some(0o640),
            uid: Some(BOB.uid),
            gid: Some(BOB.gid),
            ..Sattr3::default()
        };
        let made = [
            s.create(&ALICE, &d, b"f", &CreateHow::Guarded(attr)),
            s.mkdir(&ALICE, &d, b"d", &attr),
            s.symlink(&ALICE, &d, b"l", b"f", &attr),
            s.mknod(&ALICE, &d, b"p", Special::Fifo, &attr),
        ];
        for fh in made {
            let a = s.getattr(&fh.expect("created")).expect("getattr");
            assert_eq!((a.uid, a.gid), (ALICE.uid, gid), "{dir} {:?}", a.ftype);
            if a.ftype != Ftype3::Lnk {
                let sgid = if dir == "sgid" && a.ftype == Ftype3::Dir {
                    0o2000
                } else {
                    0
                };
                assert_eq!(a.mode, 0o640 | sgid, "{dir} {:?}", a.ftype);
            }
        }
    }
    // Root may create for someone else.
    let d = look(&s, &ROOT, &r, "open");
    let attr = Sattr3 {
        uid: Some(BOB.uid),
        gid: Some(BOB.gid),
        ..mode(0o600)
    };
    let f = s.create(&ROOT, &d, b"forbob", &CreateHow::Guarded(attr));
    let a = s.getattr(&f.expect("create")).expect("getattr");
    assert_eq!((a.uid, a.gid, a.mode), (BOB.uid, BOB.gid, 0o600));
}

#[test]
fn rejects_reaching_outside_through_symbolic_links() {
    if not_root() {
        return;
    }
    let t = Tmp::new("links");
    let out = Tmp::new("outside");
    root_file(&out.at("target"), b"outside", 0o666);
    let target = out.at("target");
    std::os::unix::fs::symlink(&target, t.at("out")).expect("symlink");
    std::os::unix::fs::symlink("/etc/passwd", t.at("pw")).expect("symlink");
    let before = (snapshot(&target), snapshot(Path::new("/etc/passwd")));
    let (s, r) = store(&t);
    for cx in [ROOT, ALICE] {
        for name in ["out", "pw"] {
            let l = look(&s, &cx, &r, name);
            let mut buf = [0u8; 64];
            assert_eq!(err(s.read(&cx, &l, 0, &mut buf)), Nfsstat3::INVAL);
            let us = StableHow::Unstable;
            assert_eq!(err(s.write(&cx, &l, 0, b"pwned", us)), Nfsstat3::INVAL);
            assert_eq!(err(s.commit(&cx, &l)), Nfsstat3::INVAL);
            let trunc = Sattr3 {
                size: Some(0),
                ..Sattr3::default()
            };
            assert_eq!(err(s.setattr(&cx, &l, &trunc, None)), Nfsstat3::INVAL);
            let _ = s.setattr(&cx, &l, &mode(0o777), None);
            let own = Sattr3 {
                uid: Some(BOB.uid),
                mtime: SetTime::ClientTime(Time3::default()),
                ..Sattr3::default()
            };
            let _ = s.setattr(&cx, &l, &own, None);
            for how in [
                CreateHow::Unchecked(trunc),
                CreateHow::Guarded(trunc),
                CreateHow::Exclusive([1; 8]),
            ] {
                assert_eq!(
                    err(s.create(&cx, &r, name.as_bytes(), &how)),
                    Nfsstat3::EXIST
                );
            }
            // LINK of the link makes another link, never a name for the target.
            if s.link(&cx, &l, &r, b"hard").is_ok() {
                let h = look(&s, &cx, &r, "hard");
                assert_eq!(s.getattr(&h).map(|a| a.ftype), Ok(Ftype3::Lnk));
            }
            let _ = s.rename(&cx, &r, b"hard", &r, b"moved");
            let _ = s.remove(&cx, &r, b"moved");
        }
    }
    assert_eq!(
        (snapshot(&target), snapshot(Path::new("/etc/passwd"))),
        before
    );
}

/// A store handle with `t`'s export tag around kernel handle `kh`.
fn forged(s: &DirStore, htype: i32, kh: &[u8]) -> Fh {
    let k = sys::KernelHandle::new(htype, kh).expect("kernel handle");
    handle::encode(s.tag, &k).expect("fits")
}

#[test]
fn rejects_handles_of_directories_outside_the_export() {
    if not_root() {
        return;
    }
    let t = Tmp::new("guess");
    fs::create_dir(t.at("in")).expect("mkdir");
    let (s, r) = store(&t);
    assert_eq!(s.lookup(&ROOT, &r, b".."), Ok(r));
    let inner = look(&s, &ROOT, &r, "in");
    assert_eq!(s.lookup(&ROOT, &inner, b".."), Ok(r));
    // The real handle of the export's parent, and of the file system's root (ext4: inode 2,
    // generation 0, FILEID_INO32_GEN).
    let dirfd = fs::File::open(t.0.parent().expect("parent")).expect("open parent");
    let (kh, _) = sys::KernelHandle::of(
        std::os::fd::AsRawFd::as_raw_fd(&dirfd),
        c"",
        libc::AT_EMPTY_PATH,
    )
    .expect("handle of the parent");
    let mut guesses = vec![forged(&s, kh.htype(), kh.bytes())];
    let mut fs_root = [0u8; 8];
    fs_root[..4].copy_from_slice(&2u32.to_ne_bytes());
    guesses.push(forged(&s, 1, &fs_root));
    for fh in guesses {
        assert_eq!(err(s.getattr(&fh)), Nfsstat3::STALE);
        assert_eq!(err(s.lookup(&ROOT, &fh, b"etc")), Nfsstat3::STALE);
        let listed = s.readdir(&ROOT, &fh, 0, [0; 8], true, &mut |_| true);
        assert_eq!(err(listed), Nfsstat3::STALE);
        let how = CreateHow::Guarded(mode(0o644));
        assert_eq!(err(s.create(&ROOT, &fh, b"planted", &how)), Nfsstat3::STALE);
    }
    server();
    assert!(!t.0.parent().expect("parent").join("planted").exists());
}

#[test]
fn accepts_mknod_of_each_type() {
    if not_root() {
        return;
    }
    let t = Tmp::new("mknod");
    chmod(&t.0, 0o777);
    let (s, r) = store(&t);
    let nodes = [
        (Special::Fifo, Ftype3::Fifo),
        (Special::Sock, Ftype3::Sock),
        (Special::Chr(1, 3), Ftype3::Chr),
        (Special::Blk(7, 200), Ftype3::Blk),
    ];
    for (i, (node, ftype)) in nodes.into_iter().enumerate() {
        let name = format!("n{i}");
        let dev = matches!(node, Special::Chr(..) | Special::Blk(..));
        let by_alice = s.mknod(&ALICE, &r, name.as_bytes(), node, &mode(0o666));
        if dev {
            // CAP_MKNOD: root only.
            assert_eq!(err(by_alice), Nfsstat3::PERM, "{node:?}");
        } else {
            let a = s.getattr(&by_alice.expect("mknod")).expect("getattr");
            assert_eq!((a.ftype, a.uid, a.mode), (ftype, ALICE.uid, 0o666));
        }
        let name = format!("root{i}");
        let fh = s.mknod(&ROOT, &r, name.as_bytes(), node, &mode(0o600));
        let fh = fh.expect("mknod as root");
        let a = s.getattr(&fh).expect("getattr");
        assert_eq!((a.ftype, a.mode), (ftype, 0o600));
        if let Special::Chr(ma, mi) | Special::Blk(ma, mi) = node {
            assert_eq!(a.rdev, (ma, mi));
        }
        let mut buf = [0u8; 8];
        assert_eq!(err(s.read(&ROOT, &fh, 0, &mut buf)), Nfsstat3::INVAL);
        let us = StableHow::Unstable;
        assert_eq!(err(s.write(&ROOT, &fh, 0, b"x", us)), Nfsstat3::INVAL);
        assert_eq!(s.lookup(&ROOT, &r, name.as_bytes()), Ok(fh));
        assert_eq!(
            err(s.mknod(&ROOT, &r, name.as_bytes(), node, &mode(0o600))),
            Nfsstat3::EXIST
        );
    }
}

/// Sets a POSIX access ACL (`system.posix_acl_access`, version 2) granting user `uid`
/// read and write on `p`: user::rw- user:uid:rw- group::r-- mask::rw- other::r--.
fn acl_user_rw(p: &Path, uid: u32) -> bool {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 6, uid),
        (0x04, 4, u32::MAX),
        (0x10, 6, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    let c = CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: NUL-terminated strings, `v` readable for its length.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            v.as_ptr().cast(),
            v.len(),
            0,
        )
    };
    r == 0
}

#[test]
fn accepts_access_as_the_kernel_decides_with_acls() {
    if not_root() {
        return;
    }
    let t = Tmp::new("acl");
    root_file(&t.at("f"), b"acl", 0o644);
    root_file(&t.at("x"), b"#!", 0o755);
    let (s, r) = store(&t);
    let f = look(&s, &ALICE, &r, "f");
    let all = access::READ | access::MODIFY | access::EXTEND | access::EXECUTE;
    assert_eq!(s.access(&ALICE, &f, all).map(|a| a.1), Ok(access::READ));
    assert_eq!(
        s.access(&ROOT, &f, all).map(|a| a.1),
        Ok(access::READ | access::MODIFY | access::EXTEND)
    );
    let x = look(&s, &ALICE, &r, "x");
    assert_eq!(
        s.access(&ALICE, &x, all).map(|a| a.1),
        Ok(access::READ | access::EXECUTE)
    );
    let dir_all = access::READ | access::LOOKUP | access::MODIFY | access::DELETE;
    assert_eq!(
        s.access(&ALICE, &r, dir_all).map(|a| a.1),
        Ok(access::READ | access::LOOKUP)
    );
    server();
    if !acl_user_rw(&t.at("f"), ALICE.uid) {
        eprintln!("skipped the ACL half: the file system refuses POSIX ACLs");
        return;
    }
    let want = access::READ | access::MODIFY;
    assert_eq!(
        s.access(&ALICE, &f, all).map(|a| a.1),
        Ok(want | access::EXTEND)
    );
    assert_eq!(s.access(&BOB, &f, all).map(|a| a.1), Ok(access::READ));
    let us = StableHow::Unstable;
    assert_eq!(s.write(&ALICE, &f, 0, b"ACL", us), Ok(us));
    assert_eq!(err(s.write(&BOB, &f, 0, b"bob", us)), Nfsstat3::ACCES);
}

/// Sets or clears the immutable flag of `p` (`FS_IOC_SETFLAGS`); false when the file system
/// refuses.
fn set_immutable(p: &Path, on: bool) -> bool {
    const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
    const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    let Ok(f) = fs::File::open(p) else {
        return false;
    };
    let mut flags: libc::c_long = 0;
    // SAFETY: `flags` is writable; the ioctls read and write one long.
    unsafe {
        if libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut flags) < 0 {
            return false;
        }
        flags = if on {
            flags | FS_IMMUTABLE_FL
        } else {
            flags & !FS_IMMUTABLE_FL
        };
        libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &flags) == 0
    }
}

#[test]
fn rejects_writes_to_an_immutable_file_even_by_its_owner() {
    if not_root() {
        return;
    }
    let t = Tmp::new("immutable");
    chmod(&t.0, 0o777);
    let (s, r) = store(&t);
    let how = CreateHow::Guarded(mode(0o644));
    let f = s.create(&ALICE, &r, b"f", &how).expect("create");
    let us = StableHow::Unstable;
    assert_eq!(s.write(&ALICE, &f, 0, b"before", us), Ok(us));
    server();
    if !set_immutable(&t.at("f"), true) {
        eprintln!("skipped: the file system has no immutable flag");
        return;
    }
    let refused = [
        s.write(&ALICE, &f, 0, b"owner", us),
        s.write(&ROOT, &f, 0, b"root", us),
        s.write_wcc(&ALICE, &f, 0, b"owner", us).0,
    ];
    server();
    assert!(set_immutable(&t.at("f"), false));
    assert_eq!(refused, [Err(Nfsstat3::PERM); 3]);
    assert_eq!(fs::read(t.at("f")).expect("read"), b"before");
    assert_eq!(s.write(&ALICE, &f, 0, b"after", us), Ok(us));
}

#[test]
fn accepts_the_file_systems_own_largest_file() {
    if not_root() {
        return;
    }
    let t = Tmp::new("maxsize");
    let (s, _) = store(&t);
    // SAFETY: all-zero statfs is valid; the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let c = CString::new(t.0.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: NUL-terminated path, writable statfs.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    if st.f_type as i64 != 0xef53 {
        eprintln!("skipped: the temp dir is not on ext4");
        return;
    }
    let max = ((1u64 << 32) - 1) * st.f_bsize as u64;
    assert_eq!(s.max_file_size(), max);
    let f = s
        .create(&ROOT, &s.root(), b"big", &CreateHow::Guarded(mode(0o644)))
        .expect("create");
    let us = StableHow::Unstable;
    assert_eq!(err(s.write(&ROOT, &f, max, b"x", us)), Nfsstat3::FBIG);
    assert_eq!(s.write(&ROOT, &f, max - 1, b"x", us), Ok(us));
}

#[test]
fn accepts_one_identity_switch_per_change_of_caller() {
    if not_root() {
        return;
    }
    let t = Tmp::new("switch");
    chmod(&t.0, 0o777);
    let (s, r) = store(&t);
    let how = CreateHow::Guarded(mode(0o644));
    s.getattr(&r).expect("warm the cache");
    let start = ident::switches();
    for i in 0..50 {
        let fh = s.create(&ALICE, &r, format!("a{i}").as_bytes(), &how);
        s.getattr(&fh.expect("create")).expect("getattr");
    }
    assert_eq!(ident::switches() - start, 1, "one caller: one switch");
    let start = ident::switches();
    for i in 0..50 {
        let cx = if i % 2 == 0 { BOB } else { ALICE };
        s.create(&cx, &r, format!("b{i}").as_bytes(), &how)
            .expect("create");
    }
    assert_eq!(ident::switches() - start, 50, "alternating callers");
}

#[test]
fn rejects_crossing_into_a_file_system_mounted_inside() {
    if not_root() {
        return;
    }
    let t = Tmp::new("mnt");
    fs::create_dir(t.at("mnt")).expect("mkdir");
    let target = CString::new(t.at("mnt").as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: NUL-terminated strings.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=1m".as_ptr().cast(),
        )
    } == 0;
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    let _unmount = Unmount(target);
    fs::write(t.at("mnt/inner"), b"other fs").expect("write");
    let (s, r) = store(&t);
    assert_eq!(err(s.lookup(&ROOT, &r, b"mnt")), Nfsstat3::ACCES);
    let mut plus = Vec::new();
    s.readdir(&ROOT, &r, 0, [0; 8], true, &mut |e| {
        plus.push((e.name.to_vec(), e.plus.is_some()));
        true
    })
    .expect("readdir");
    assert!(plus.contains(&(b"mnt".to_vec(), false)), "{plus:?}");
}

#[test]
fn rejects_crossing_into_a_bind_mount_of_the_same_file_system() {
    if not_root() {
        return;
    }
    let t = Tmp::new("bind");
    let (s, r) = store(&t);
    // Made through the store: its descriptor is held, with its inode number.
    s.mkdir(&ROOT, &r, b"src", &Sattr3::default())
        .expect("mkdir");
    fs::create_dir(t.at("mnt")).expect("mkdir");
    let (src, target) = [t.at("src"), t.at("mnt")]
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).expect("path"))
        .into();
    // SAFETY: NUL-terminated strings.
    let bound = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } == 0;
    if !bound {
        eprintln!("skipped: cannot bind-mount here");
        return;
    }
    let _unmount = Unmount(target);
    assert_eq!(err(s.lookup(&ROOT, &r, b"mnt")), Nfsstat3::ACCES);
    let mut plus = Vec::new();
    s.readdir(&ROOT, &r, 0, [0; 8], true, &mut |e| {
        plus.push((e.name.to_vec(), e.plus.is_some()));
        true
    })
    .expect("readdir");
    assert!(plus.contains(&(b"mnt".to_vec(), false)), "{plus:?}");
    assert!(plus.contains(&(b"src".to_vec(), true)), "{plus:?}");
}

/// Detaches a mount on drop (before the directory holding it is removed).
struct Unmount(CString);

impl Drop for Unmount {
    fn drop(&mut self) {
        server();
        // SAFETY: NUL-terminated path.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Drops CAP_SETUID and CAP_SETGID from the calling thread (`capset`, version 3).
fn drop_setid_caps() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: a valid header and two data slots, as version 3 wants.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) } != 0 {
        return false;
    }
    // CAP_SETGID is capability 6, CAP_SETUID 7 (linux/capability.h).
    let setid = (1 << 6) | (1 << 7);
    d[0].effective &= !setid;
    d[0].permitted &= !setid;
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) == 0 }
}

#[test]
fn rejects_exporting_without_the_power_to_act_as_callers() {
    if not_root() {
        return;
    }
    let t = Tmp::new("caps");
    let path = t.0.clone();
    let refused = std::thread::spawn(move || {
        assert!(drop_setid_caps(), "capset");
        DirStore::open(&path).map(drop).map_err(|e| e.to_string())
    })
    .join()
    .expect("thread");
    let why = refused.expect_err("refused");
    assert!(why.contains("CAP_SETUID"), "{why}");
    assert!(DirStore::open(&t.0).is_ok());
}

#[test]
fn rejects_callers_with_ids_the_host_cannot_hold() {
    if not_root() {
        return;
    }
    let t = Tmp::new("invalid-id");
    root_file(&t.at("f"), b"root data", 0o600);
    let (s, r) = store(&t);
    // The thread is root after this (the handle was decoded as the server).
    let f = look(&s, &ROOT, &r, "f");
    let us = StableHow::Unstable;
    // setfsuid(-1) and setfsgid(-1) change nothing: such a caller must not run as whoever
    // the thread was.
    for cx in [
        Cred::new(u32::MAX, u32::MAX),
        Cred::new(u32::MAX, 0),
        Cred::new(0, u32::MAX),
        Cred::with_groups(ALICE.uid, ALICE.gid, &[u32::MAX]),
    ] {
        assert_eq!(err(s.write(&cx, &f, 0, b"pwned", us)), Nfsstat3::ACCES);
        assert_eq!(err(s.lookup(&cx, &r, b"f")), Nfsstat3::ACCES);
        let mut buf = [0u8; 4];
        assert_eq!(err(s.read(&cx, &f, 0, &mut buf)), Nfsstat3::ACCES);
        s.getattr(&f).expect("getattr");
    }
    assert_eq!(snapshot(&t.at("f")).5, b"root data");
}

#[test]
fn accepts_lookup_attributes_for_a_caller_who_is_not_root() {
    if not_root() {
        return;
    }
    let t = Tmp::new("lookup-attrs");
    root_file(&t.at("f"), b"data", 0o644);
    let (s, r) = store(&t);
    // A new store has nothing open: the object is opened for ALICE's LOOKUP, whose identity
    // holds none of the server's powers.
    let (dir, res) = s.lookup_attrs(&ALICE, &r, b"f");
    server();
    let (fh, attr) = res.expect("lookup");
    assert!(dir.is_some_and(|d| d.ftype == Ftype3::Dir));
    let attr = attr.expect("the object's attributes");
    assert_eq!((attr.ftype, attr.size, attr.mode), (Ftype3::Reg, 4, 0o644));
    let misses = s.cache().stats().misses;
    s.getattr(&fh).expect("getattr");
    assert_eq!(s.cache().stats().misses, misses, "the lookup left it open");
    // Another caller finds it open.
    let (_, res) = s.lookup_attrs(&BOB, &r, b"f");
    server();
    assert_eq!(res.expect("lookup").1, Some(attr));
}

#[test]
fn accepts_the_owner_truncating_a_read_only_file_first_seen_by_lookup() {
    if not_root() {
        return;
    }
    let t = Tmp::new("owner-trunc");
    root_file(&t.at("f"), b"data", 0o444);
    chown(&t.at("f"), ALICE.uid, ALICE.gid);
    let (s, r) = store(&t);
    // LOOKUP leaves the file open O_PATH; truncating it needs a descriptor open for writing
    // (the owner may, as with Linux nfsd, though the mode says read-only).
    let f = look(&s, &ALICE, &r, "f");
    let set = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let r = s.setattr(&ALICE, &f, &set, None);
    server();
    r.expect("the owner truncates");
    assert_eq!(fs::metadata(t.at("f")).expect("stat").len(), 0);
}

/// Every READDIRPLUS entry's handle, by name (without `.` and `..`).
fn plus_handles(s: &DirStore, d: &Fh) -> Vec<(String, Fh)> {
    let mut v = Vec::new();
    s.readdir(&ROOT, d, 0, [0; 8], true, &mut |e| {
        if let (Some((fh, _)), false) = (e.plus, e.name == b"." || e.name == b"..") {
            v.push((String::from_utf8_lossy(e.name).into_owned(), fh));
        }
        true
    })
    .expect("readdirplus");
    v
}

#[test]
fn accepts_readdirplus_handles_equal_to_lookup_handles() {
    if not_root() {
        return;
    }
    let t = Tmp::new("plus");
    let (s, root) = store(&t);
    let how = CreateHow::Guarded(Sattr3::default());
    for i in 0..12 {
        s.create(&ROOT, &root, format!("f{i}").as_bytes(), &how)
            .expect("create");
    }
    // Changes through the store: a hard link, a rename over a name, a name removed and made
    // again, a name removed and its inode number free for the host's next file.
    s.link(&ROOT, &look(&s, &ROOT, &root, "f0"), &root, b"hard")
        .expect("link");
    s.rename(&ROOT, &root, b"f1", &root, b"f2").expect("rename");
    s.remove(&ROOT, &root, b"f3").expect("remove");
    s.create(&ROOT, &root, b"f3", &how).expect("create again");
    s.remove(&ROOT, &root, b"f4").expect("remove");
    server();
    fs::write(t.at("host4"), b"new").expect("host file");
    // Files removed and made again by the host while the store holds their old descriptors.
    for i in 5..10 {
        let p = t.at(&format!("f{i}"));
        fs::remove_file(&p).expect("host remove");
        fs::write(&p, b"new").expect("host create");
    }
    let listed = plus_handles(&s, &root);
    assert_eq!(listed.len(), 12);
    for (name, fh) in listed {
        assert_eq!(fh, look(&s, &ROOT, &root, &name), "{name}");
    }
}

/// The identity of a thread that never switched: the process's fs ids and groups.
fn own_identity() -> Cred {
    let mut g = [0 as libc::gid_t; 64];
    // SAFETY: `g` has room for 64 ids; plain system calls that change nothing.
    let (n, uid, gid) = unsafe {
        let n = libc::getgroups(g.len() as libc::c_int, g.as_mut_ptr());
        (n, libc::geteuid(), libc::getegid())
    };
    Cred::with_groups(uid, gid, &g[..usize::try_from(n).expect("getgroups")])
}

#[test]
fn rejects_another_identity_on_a_thread_serving_on_the_reactor() {
    if not_root() {
        return;
    }
    let t = Tmp::new("pinned");
    fs::create_dir(t.at("open")).expect("mkdir");
    chmod(&t.at("open"), 0o777);
    let (s, r) = store(&t);
    let new = || CreateHow::Guarded(Sattr3::default());
    // A thread that never switched, as a reactor's.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let own = own_identity();
            // Another caller is not served on it: the call does not run.
            let mut ran = false;
            assert!(!s.run_on_reactor(&ALICE, false, &mut || ran = true));
            assert!(!ran);
            // Its own identity is, with no switch; inside, acting as anyone else is refused
            // without a switch either.
            let mut made = None;
            assert!(s.run_on_reactor(&own, false, &mut || {
                let d = s.lookup(&own, &r, b"open");
                made = Some(d.and_then(|d| s.create(&own, &d, b"mine", &new())));
                assert_eq!(err(s.lookup(&ALICE, &r, b"open")), Nfsstat3::SERVERFAULT);
            }));
            made.expect("ran").expect("create");
            assert_eq!(
                (ident::switches(), ident::fs_ids()),
                (0, (own.uid, own.gid))
            );
            assert!(!ident::pinned());
            // A panic inside the call unpins the thread; its identity was never touched.
            let call = std::panic::AssertUnwindSafe(|| {
                s.run_on_reactor(&own, false, &mut || panic!("a call panics"))
            });
            assert!(std::panic::catch_unwind(call).is_err());
            assert!(!ident::pinned());
            assert_eq!(
                (ident::switches(), ident::fs_ids()),
                (0, (own.uid, own.gid))
            );
            // The next caller, another user, on a thread that may switch: acts as that user.
            let open = look(&s, &ALICE, &r, "open");
            s.create(&ALICE, &open, b"alices", &new()).expect("create");
        });
    });
    assert_eq!(snapshot(&t.at("open/mine")).0, 0);
    assert_eq!(snapshot(&t.at("open/alices")).0, ALICE.uid);
}

#[test]
fn rejects_a_syncing_call_on_the_reactor_unless_the_export_is_in_memory() {
    if not_root() {
        return;
    }
    let on_disk = Tmp::new("sync-disk");
    let shm = Tmp(Path::new("/dev/shm").join(format!("rpcrdma-dir-sync-{}", std::process::id())));
    fs::create_dir_all(&shm.0).expect("mkdir /dev/shm");
    let in_memory = |p: &Path| sys::in_memory(fs::File::open(p).expect("open").as_raw_fd());
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let own = own_identity();
            for (t, tmpfs) in [(&on_disk, false), (&shm, true)] {
                if in_memory(&t.0).expect("fstatfs") != tmpfs {
                    eprintln!("skipped {}: not the file system expected", t.0.display());
                    continue;
                }
                let (s, _) = store(t);
                let mut ran = 0;
                assert!(s.run_on_reactor(&own, false, &mut || ran += 1));
                // COMMIT or a stable WRITE waits for the device unless there is none.
                assert_eq!(s.run_on_reactor(&own, true, &mut || ran += 1), tmpfs);
                assert_eq!(ran, 1 + tmpfs as i32, "{}", t.0.display());
            }
        });
    });
}
