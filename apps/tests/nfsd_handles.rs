//! Attacks on the directory backend over NFS, through `rpcrdma-nfsd`'s RPC-over-RDMA server
//! on the software provider: a root handle from MOUNT with its kernel-handle part replaced
//! (an inode guess: inode 2, generation 0, the root of an ext4 file system) is STALE, as is
//! any handle altered by one octet; a squashed caller (`all_squash`, anonymous uid 1000)
//! cannot write root's files, create in root's directories or make devices, and what it
//! creates is its own; a caller whose uid or gid is (uid_t) −1, which the host cannot hold,
//! does nothing; FSINFO says the file system's own largest file; calls of root (the daemon's
//! own identity, served on the reactor) and of another user in turn each act as their caller.
//!
//! Normal operation: each test starts a daemon on a fresh directory prepared as root. The
//! tests need root (to own files and for the backend to act as its callers) and skip with a
//! message otherwise. Recovery: the rig removes the directory when stopped.

mod nfsd_common;

use std::net::Ipv4Addr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use nfsd_common::{exports, on_dir, options, scratch_dir, status, Rig};
use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::handle_mac::TRAILER;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Ftype3, Nfsstat3, Sattr3, StableHow};
use rpcrdma_poller::AuthSysCred;

/// Octets before the kernel handle in a directory-store handle.
const STORE_HDR: usize = 12;

/// True (after a message) when the test cannot run: it needs root.
fn not_root() -> bool {
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: the directory backend's identity tests need root");
    }
    !root
}

/// `fh` with its kernel-handle part (between the store header and the server's seal)
/// replaced by `f` of its old octets.
fn with_kernel_part(fh: &Fh, f: impl FnOnce(&mut [u8])) -> Fh {
    let mut b = fh.as_bytes().to_vec();
    let end = b.len() - TRAILER;
    f(&mut b[STORE_HDR..end]);
    Fh::new(&b).expect("handle")
}

#[test]
fn rejects_guessed_and_altered_handles_with_stale() {
    if not_root() {
        return;
    }
    on_dir("handles", |r| {
        let guess = with_kernel_part(&r.root, |k| {
            k.fill(0);
            if k.len() >= 8 {
                k[..4].copy_from_slice(&2u32.to_ne_bytes());
            }
        });
        let mut forged = vec![guess];
        for i in 0..r.root.as_bytes().len() {
            let mut b = r.root.as_bytes().to_vec();
            b[i] ^= 0x40;
            forged.push(Fh::new(&b).expect("handle"));
        }
        for fh in &forged {
            assert_eq!(status(r.nfs.getattr(fh)), Nfsstat3::STALE, "{fh:?}");
            assert_eq!(status(r.nfs.lookup(fh, b"etc")), Nfsstat3::STALE);
            let how = CreateHow::Guarded(Sattr3::default());
            assert_eq!(status(r.nfs.create(fh, b"planted", how)), Nfsstat3::STALE);
        }
        assert!(r.nfs.getattr(&r.root).is_ok());
    });
}

/// A rig whose every caller acts as uid 1000 / gid 1000, on a directory holding a root
/// file `f` (0644) and a directory `open` (0777).
fn squashed_rig() -> Rig {
    let d = scratch_dir("squash");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(d.join("f"), b"root data").expect("write");
    std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::create_dir(d.join("open")).expect("mkdir");
    std::fs::set_permissions(d.join("open"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    let mut o = options(Backend::Dir(d.clone()));
    o.exports = exports("/export:*(rw,all_squash,anonuid=1000,anongid=1000,sec=sys:none)");
    Rig::with(o, Some(d))
}

#[test]
fn rejects_what_a_squashed_caller_may_not_do() {
    if not_root() {
        return;
    }
    let r = squashed_rig();
    let dir = r.dir.clone().expect("dir");
    let f = r.nfs.lookup(&r.root, b"f").expect("lookup");
    let w = r.nfs.write(&f, 0, b"pwned", StableHow::FileSync, false);
    assert_eq!(status(w), Nfsstat3::ACCES);
    let how = CreateHow::Guarded(Sattr3::default());
    assert_eq!(status(r.nfs.create(&r.root, b"n", how)), Nfsstat3::ACCES);
    assert_eq!(
        status(r.nfs.mknod(&r.root, b"p", Ftype3::Fifo)),
        Nfsstat3::ACCES
    );
    let open = r.nfs.lookup(&r.root, b"open").expect("lookup");
    assert_eq!(
        status(r.nfs.mknod(&open, b"null", Ftype3::Chr)),
        Nfsstat3::PERM
    );
    let p = r.nfs.mknod(&open, b"p", Ftype3::Fifo).expect("mknod fifo");
    let a = r.nfs.getattr(&p).expect("getattr");
    assert_eq!((a.ftype, a.uid, a.gid), (Ftype3::Fifo, 1000, 1000));
    let n = r.nfs.create(&open, b"n", how).expect("create");
    assert_eq!(r.nfs.getattr(&n).expect("getattr").uid, 1000);
    assert_eq!(std::fs::read(dir.join("f")).expect("read"), b"root data");
    assert_eq!(
        std::fs::metadata(dir.join("open/n")).expect("stat").uid(),
        1000
    );
    r.stop();
}

#[test]
fn accepts_the_file_systems_largest_file_in_fsinfo() {
    if not_root() {
        return;
    }
    on_dir("fsinfo", |r| {
        let dir = r.dir.clone().expect("dir");
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: all-zero statfs is valid; NUL-terminated path, writable statfs.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
        let max = r.nfs.fsinfo(&r.root).expect("fsinfo").maxfilesize;
        if st.f_type as i64 == 0xef53 {
            assert_eq!(max, ((1u64 << 32) - 1) * st.f_bsize as u64);
        } else {
            eprintln!("the scratch directory is not on ext4: maxfilesize {max}");
            assert!(max > 1 << 32);
        }
    });
}

#[test]
fn rejects_callers_whose_ids_the_host_cannot_hold() {
    if not_root() {
        return;
    }
    // (uid_t)-1 and (gid_t)-1 act as the export's anonymous ids (65534 here), as Linux
    // nfsd's nfsd_setuser maps ids that are not valid: setfsuid(-1) would change nothing and
    // leave the worker acting as the previous caller (root, for the rig's calls in between).
    let dir = scratch_dir("invalid-id");
    let o = rpcrdma_apps::nfs::daemon::DaemonOptions {
        exports: exports(
            "/export:127.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) \
             10.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) \
             10.0.0.9(rw,no_root_squash)",
        ),
        ..options(Backend::Dir(dir.clone()))
    };
    let r = Rig::with(o, Some(dir.clone()));
    std::fs::write(dir.join("f"), b"root data").expect("write");
    std::fs::set_permissions(dir.join("f"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // The rig acts as root: the workers decode handles and stay root.
    let f = r.nfs.lookup(&r.root, b"f").expect("lookup");
    for (uid, gid) in [(u32::MAX, u32::MAX), (u32::MAX, 0)] {
        let (_ep, c) = r.client_as(
            Ipv4Addr::new(10, 0, 0, 9),
            Some(AuthSysCred::new(uid, gid, &[u32::MAX])),
        );
        for _ in 0..4 {
            let w = c.write(&f, 0, b"pwned", StableHow::FileSync, false);
            assert_eq!(status(w), Nfsstat3::ACCES, "{uid} {gid}");
            assert_eq!(status(c.read(&f, 0, 9, false)), Nfsstat3::ACCES);
            r.nfs.getattr(&f).expect("root's call in between");
        }
        // What it creates belongs to the anonymous ids.
        let open = r
            .nfs
            .mkdir(
                &r.root,
                format!("open{gid}").as_bytes(),
                Sattr3 {
                    mode: Some(0o777),
                    ..Sattr3::default()
                },
            )
            .expect("mkdir");
        let n = c
            .create(&open, b"n", CreateHow::Guarded(Sattr3::default()))
            .expect("create");
        let a = c.getattr(&n).expect("getattr");
        assert_eq!(a.uid, 65534);
    }
    assert_eq!(std::fs::read(dir.join("f")).expect("read"), b"root data");
    r.stop();
}

#[test]
fn rejects_a_callers_identity_in_the_next_call_of_another_user_on_the_reactor() {
    if not_root() {
        return;
    }
    // The rig's calls act as root (AUTH_NONE, anonymous ids 0): the daemon's own identity,
    // served on the reactor (`--dir-calls reactor`, the default) with no identity switch.
    // Another user's calls (10.0.0.9, AUTH_SYS uid 1000) must act as that user, before and
    // after root's, and root's must not act as it.
    let dir = scratch_dir("reactor-id");
    let o = rpcrdma_apps::nfs::daemon::DaemonOptions {
        exports: exports(
            "/export:127.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) \
             10.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) \
             10.0.0.9(rw,no_root_squash)",
        ),
        ..options(Backend::Dir(dir.clone()))
    };
    assert!(o.dir_calls_on_reactor, "the default");
    let r = Rig::with(o, Some(dir.clone()));
    let mode = |m| Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    };
    let open = r.nfs.mkdir(&r.root, b"open", mode(0o777)).expect("mkdir");
    let closed = r.nfs.mkdir(&r.root, b"closed", mode(0o755)).expect("mkdir");
    let (_ep, alice) = r.client_as(
        Ipv4Addr::new(10, 0, 0, 9),
        Some(AuthSysCred::new(1000, 1000, &[1000])),
    );
    let new = || CreateHow::Guarded(Sattr3::default());
    for i in 0..6 {
        let on = r.counter("reactor.calls");
        let a = alice.create(&open, format!("a{i}").as_bytes(), new());
        let a = alice.getattr(&a.expect("alice's create")).expect("getattr");
        assert_eq!((a.uid, a.gid), (1000, 1000));
        let refused = alice.create(&closed, format!("a{i}").as_bytes(), new());
        assert_eq!(status(refused), Nfsstat3::ACCES);
        assert_eq!(
            r.counter("reactor.calls"),
            on,
            "alice's calls ran on the reactor"
        );
        for d in [&open, &closed] {
            let f = r.nfs.create(d, format!("r{i}").as_bytes(), new());
            let f = r.nfs.getattr(&f.expect("root's create")).expect("getattr");
            assert_eq!((f.uid, f.gid), (0, 0));
        }
        assert!(
            r.counter("reactor.calls") >= on + 2,
            "root's calls ran on a worker"
        );
    }
    let owner = |p: &str| std::fs::symlink_metadata(dir.join(p)).expect("stat").uid();
    assert_eq!(
        (owner("open/a5"), owner("open/r5"), owner("closed/r5")),
        (1000, 0, 0)
    );
    r.stop();
}
