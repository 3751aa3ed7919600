//! What `rpcrdma-nfsd` logs per client (docs/observability.md, "Logs"): a granted and a refused
//! MNT with the client's address and the export, the client's NFS/RDMA connection, and no flood
//! when a client repeats a refused MNT in a loop. The daemon is the one the binary runs
//! (`nfs::daemon`), on the software provider; events are collected by a process-wide
//! subscriber ([`Capture`]) at `info`, the daemon's default level.

mod nfsd_common;

use std::sync::OnceLock;
use std::time::Duration;

use nfsd_common::{exports, options, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::mount::{self, MNT3ERR_ACCES, MNT3ERR_NOENT};
use rpcrdma_poller::log::{Capture, Captured, BURST};
use tracing::Level;

fn capture() -> &'static Capture {
    static C: OnceLock<Capture> = OnceLock::new();
    C.get_or_init(|| {
        let c = Capture::new(Level::INFO);
        tracing::subscriber::set_global_default(c.clone()).expect("no other subscriber");
        c
    })
}

fn find(message: &str, f: impl Fn(&Captured) -> bool) -> Captured {
    let c = capture();
    c.wait_for(message, Duration::from_secs(10), f)
        .unwrap_or_else(|| panic!("no {message:?} event among {:#?}", c.events()))
}

fn from_localhost(e: &Captured) -> bool {
    e.field("client")
        .is_some_and(|c| c.starts_with("127.0.0.1:"))
}

#[test]
fn rejects_mnt_of_an_export_the_client_is_not_named_in_with_a_logged_refusal() {
    capture();
    let o = DaemonOptions {
        exports: exports("/export:127.0.0.1(rw,no_root_squash,sec=sys:none);/private:10.1.1.1(rw)"),
        ..options(Backend::Memory)
    };
    // The rig mounts /export from 127.0.0.1 and connects over NFS/RDMA from 10.0.0.1.
    let r = Rig::with(o, None);
    let granted = find("mount granted", |e| {
        from_localhost(e) && e.field("export") == Some("/export")
    });
    assert_eq!(granted.level, Level::INFO);
    let conn = find("connection accepted", |e| {
        e.field("peer").is_some_and(|p| p.starts_with("10.0.0.1:"))
    });
    assert_eq!(conn.level, Level::INFO);
    let m = r.daemon.mount_addr().unwrap();
    assert_eq!(mount::mnt(m, "/private").unwrap(), Err(MNT3ERR_ACCES));
    let refused = find("mount refused (MNT3ERR_ACCES)", |e| {
        from_localhost(e) && e.field("export") == Some("/private")
    });
    assert_eq!(refused.level, Level::WARN);
    assert!(refused.field("reason").is_some(), "{refused:?}");
    assert_eq!(mount::mnt(m, "/nope").unwrap(), Err(MNT3ERR_NOENT));
    find("mount refused (MNT3ERR_NOENT)", |e| {
        from_localhost(e) && e.field("export") == Some("/nope")
    });
    // A client repeating the refused MNT costs the log at most BURST lines a second.
    let before = count_refused();
    let start = std::time::Instant::now();
    for _ in 0..4 * BURST {
        assert_eq!(mount::mnt(m, "/private").unwrap(), Err(MNT3ERR_ACCES));
    }
    let seconds = start.elapsed().as_secs() + 1;
    let logged = count_refused() - before;
    assert!(
        logged as u64 <= (seconds + 1) * u64::from(BURST),
        "{logged} refusals logged in {seconds} s"
    );
    r.stop();
}

fn count_refused() -> usize {
    capture()
        .events()
        .iter()
        .filter(|e| e.message == "mount refused (MNT3ERR_ACCES)")
        .count()
}
