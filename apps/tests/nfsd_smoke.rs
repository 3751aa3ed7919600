//! End to end on the software provider: MOUNT, then NFSv3 calls through the RPC-over-RDMA
//! server, both backends, DDP in both directions.

mod nfsd_common;

use nfsd_common::Rig;

fn smoke(r: &Rig) {
    nfsd_common::workload(&r.nfs, &r.root);
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
