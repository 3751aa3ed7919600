//! Server restarts through `rpcrdma-nfsd` on the software provider: the directory backend's
//! handles are the kernel's, so they survive a restart of the daemon on the same directory
//! (and the write verifier changes, telling clients to resend uncommitted data); the memory
//! backend loses everything, and its old handles are STALE, never another file.
//!
//! Normal operation: one rig is stopped, a second started on the same export, and the first
//! rig's handles are used on the second. Recovery: the point of the test.

mod nfsd_common;

use nfsd_common::{options, scratch_dir, status, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::types::{CreateHow, Nfsstat3, Sattr3, StableHow};

#[test]
fn accepts_dir_handles_after_a_restart_with_a_new_write_verifier() {
    let p = scratch_dir("restart");
    // The handle key is kept beside the export (outside it), as the daemon keeps it in a file.
    let key = p.with_extension("key");
    let with_key = |dir: std::path::PathBuf| DaemonOptions {
        handle_key: Some(key.clone()),
        ..options(Backend::Dir(dir))
    };
    let a = Rig::with(with_key(p.clone()), Some(p.clone()));
    let d = a.nfs.mkdir(&a.root, b"kept", Sattr3::default()).unwrap();
    let f = a
        .nfs
        .create(&d, b"file", CreateHow::Guarded(Sattr3::default()))
        .unwrap();
    let (_, _, v1) = a
        .nfs
        .write(&f, 0, b"survives", StableHow::Unstable, true)
        .unwrap();
    assert_eq!(a.nfs.commit(&f, 0, 0).unwrap(), v1);
    let gone = a
        .nfs
        .create(&d, b"gone", CreateHow::Guarded(Sattr3::default()))
        .unwrap();
    let (root, attr) = (a.root, a.nfs.getattr(&f).unwrap());
    let kept = a.stop_keep().expect("the directory");
    // The file removed while no server runs: its handle is STALE afterwards.
    std::fs::remove_file(kept.join("kept/gone")).unwrap();
    let b = Rig::with(with_key(kept.clone()), Some(kept));
    assert_eq!(b.root, root, "MOUNT hands out the same root handle");
    assert_eq!(b.nfs.getattr(&f).unwrap().fileid, attr.fileid);
    assert_eq!(b.nfs.read(&f, 0, 100, true).unwrap().0, b"survives");
    assert_eq!(b.nfs.lookup(&d, b"file").unwrap(), f);
    assert_eq!(b.nfs.lookup(&f, b"..").ok(), None, "a file has no entries");
    assert_eq!(b.nfs.lookup(&d, b"..").unwrap(), root);
    assert_eq!(status(b.nfs.getattr(&gone)), Nfsstat3::STALE);
    let (_, _, v2) = b
        .nfs
        .write(&f, 8, b"!", StableHow::FileSync, false)
        .unwrap();
    assert_ne!(v1, v2, "a new write verifier after the restart");
    assert_eq!(b.nfs.commit(&f, 0, 0).unwrap(), v2);
    b.stop();
    // Without the key file the same directory's handles are STALE: they carry the old MAC.
    let dir = scratch_dir("restart-nokey");
    let c = Rig::with(options(Backend::Dir(dir.clone())), Some(dir));
    assert_eq!(status(c.nfs.getattr(&root)), Nfsstat3::STALE);
    c.stop();
    let _ = std::fs::remove_file(&key);
}

#[test]
fn rejects_memory_handles_from_before_a_restart_as_stale() {
    let a = Rig::memory();
    let f = a
        .nfs
        .create(&a.root, b"f", CreateHow::Guarded(Sattr3::default()))
        .unwrap();
    let (_, _, v1) = a
        .nfs
        .write(&f, 0, b"x", StableHow::Unstable, false)
        .unwrap();
    let old_root = a.root;
    a.stop();
    let b = Rig::memory();
    // The same file ids exist again in the new store (the root, the first file created);
    // the generation in the handle tells them apart.
    let g = b
        .nfs
        .create(&b.root, b"f", CreateHow::Guarded(Sattr3::default()))
        .unwrap();
    assert_ne!(g, f);
    assert_eq!(status(b.nfs.getattr(&f)), Nfsstat3::STALE);
    assert_eq!(status(b.nfs.read(&f, 0, 1, true)), Nfsstat3::STALE);
    assert_eq!(status(b.nfs.getattr(&old_root)), Nfsstat3::STALE);
    let (_, _, v2) = b
        .nfs
        .write(&g, 0, b"y", StableHow::Unstable, false)
        .unwrap();
    assert_ne!(v1, v2);
    b.stop();
}
