//! End to end on the software provider: MOUNT, then NFSv3 calls through the RPC-over-RDMA
//! server, both backends, DDP in both directions.

mod nfsd_common;

use nfsd_common::Rig;
use rpcrdma_apps::nfs::types::{CreateHow, Ftype3, Sattr3, StableHow};

fn smoke(r: &Rig) {
    let root = r.root;
    let a = r.nfs.getattr(&root).expect("getattr root");
    assert_eq!(a.ftype, Ftype3::Dir);
    let info = r.nfs.fsinfo(&root).expect("fsinfo");
    assert!(info.rtmax >= 64 * 1024, "{info:?}");
    let f = r
        .nfs
        .create(&root, b"hello", CreateHow::Unchecked(Sattr3::default()))
        .expect("create");
    let data: Vec<u8> = (0..200_001u32).map(|i| (i * 7 % 251) as u8).collect();
    let (n, _, _) = r
        .nfs
        .write(&f, 0, &data, StableHow::FileSync, true)
        .expect("write ddp");
    assert_eq!(n as usize, data.len());
    let (back, eof) = r.nfs.read(&f, 0, 250_000, true).expect("read ddp");
    assert!(eof);
    assert_eq!(back, data);
    let (small, _) = r.nfs.read(&f, 3, 101, false).expect("read inline");
    assert_eq!(small, &data[3..104]);
    assert_eq!(r.nfs.lookup(&root, b"hello").expect("lookup"), f);
    let d = r.nfs.mkdir(&root, b"d", Sattr3::default()).expect("mkdir");
    for i in 0..300 {
        r.nfs
            .create(
                &d,
                format!("f{i:04}").as_bytes(),
                CreateHow::Guarded(Sattr3::default()),
            )
            .expect("create in d");
    }
    for plus in [false, true] {
        let all = r.nfs.readdir_all(&d, 4096, plus).expect("readdir");
        let names: Vec<_> = all
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| String::from_utf8_lossy(&e.name).to_string())
            .collect();
        assert_eq!(names.len(), 300, "plus={plus}");
    }
}

#[test]
fn memory_backend_serves_a_client() {
    let r = Rig::memory();
    smoke(&r);
    let c = r.daemon.counters();
    let get = |n: &str| c.iter().find(|(k, _)| k == n).map(|(_, v)| *v).unwrap();
    assert!(get("chunks.read") >= 1);
    assert!(get("chunks.write") >= 1);
    assert_eq!(get("srq.depth"), 0, "no shared receive queue without --srq");
    r.stop();
}

#[test]
fn dir_backend_serves_a_client() {
    let r = Rig::dir("smoke");
    smoke(&r);
    r.stop();
}

/// `--srq`: the NFS server's connections take their receives from one shared receive queue
/// (`DaemonOptions::srq`); the same calls work (DDP both ways, a long READDIR reply) and the
/// node's SRQ gauge shows the queue was created (on the first connect through it).
#[test]
fn memory_backend_serves_a_client_through_a_shared_receive_queue() {
    let o = nfsd_common::options(rpcrdma_apps::nfs::daemon::Backend::Memory);
    let r = Rig::with(
        rpcrdma_apps::nfs::daemon::DaemonOptions { srq: Some(64), ..o },
        None,
    );
    smoke(&r);
    assert_eq!(r.counter("srq.depth"), 64);
    assert!(r.counter("chunks.read") >= 1);
    r.stop();
}

/// The directory backend (worker threads hold the receives while they run) through the SRQ.
#[test]
fn dir_backend_serves_a_client_through_a_shared_receive_queue() {
    let d = nfsd_common::scratch_dir("smoke-srq");
    let o = nfsd_common::options(rpcrdma_apps::nfs::daemon::Backend::Dir(d.clone()));
    let r = Rig::with(
        rpcrdma_apps::nfs::daemon::DaemonOptions { srq: Some(48), ..o },
        Some(d),
    );
    smoke(&r);
    assert_eq!(r.counter("srq.depth"), 48);
    r.stop();
}
