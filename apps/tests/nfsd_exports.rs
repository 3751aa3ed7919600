//! Export rules through the whole path (MOUNT over TCP, NFS over RPC-over-RDMA on the software
//! provider), written as a hostile client would try them: an address the export does not
//! name, writes to a read-only export, a credential flavor the export does not accept, root
//! on a root-squashed export, handles of one export used in another's directory, forged and
//! altered handles, and a reload that takes an address's access away without dropping a
//! connection.
//!
//! Normal operation: each test starts the daemon with an export list, mounts from 127.0.0.1
//! (the rig), and calls from other soft devices (10.0.0.x) with AUTH_NONE or AUTH_SYS.
//! Recovery: every refusal is the error RFC 1813 / RFC 5531 name, and the server keeps
//! serving the clients that are allowed.

mod nfsd_common;

use std::net::Ipv4Addr;

use nfsd_common::{exports, options, status, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::mount::{self, MNT3ERR_ACCES};
use rpcrdma_apps::nfs::types::{access, CreateHow, Fh, Nfsstat3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::NfsError;
use rpcrdma_engine::rpc::{AuthStat, RejectedReply};
use rpcrdma_poller::{AuthSysCred, ClientError};

/// A rig on `backend` with export list `specs` (`;`-separated `--export` specs). The rig
/// itself mounts `/export` from 127.0.0.1 and calls from 10.0.0.1 with AUTH_NONE.
fn rig(specs: &str, backend: Backend) -> Rig {
    let dir = match &backend {
        Backend::Dir(p) => Some(p.clone()),
        _ => None,
    };
    let o = DaemonOptions {
        exports: exports(specs),
        ..options(backend)
    };
    Rig::with(o, dir)
}

/// GUARDED with mode 0644, as the Linux client sends a mode with every CREATE (a file made
/// without one has mode 0, as with Linux nfsd).
fn guarded() -> CreateHow {
    CreateHow::Guarded(Sattr3 {
        mode: Some(0o644),
        ..Sattr3::default()
    })
}

fn auth_error<T: std::fmt::Debug>(r: Result<T, NfsError>) -> AuthStat {
    match r {
        Err(NfsError::Rpc(ClientError::Denied(RejectedReply::AuthError(s)))) => s,
        other => panic!("expected AUTH_ERROR, got {other:?}"),
    }
}

/// The rig (127.0.0.1 for MOUNT, 10.0.0.1 for NFS, AUTH_NONE) acts as root (`anonuid=0`);
/// the other addresses get the rule each test is about.
const RULES: &str = "/export:127.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) \
    10.0.0.1(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0) 10.0.0.5(ro,sec=sys:none) \
    10.0.0.6(rw,sec=sys) 10.0.0.7(rw,root_squash,sec=sys) 10.0.8.0/24(rw,all_squash,anonuid=4242,anongid=4343,sec=sys:none)";

#[test]
fn rejects_calls_from_addresses_the_export_does_not_name() {
    let r = rig(RULES, Backend::Memory);
    let f = r.nfs.create(&r.root, b"f", guarded()).unwrap();
    // 10.0.0.9 is named by no rule: every procedure that names a handle is ACCES.
    let (_ep, c) = r.second_client(Ipv4Addr::new(10, 0, 0, 9));
    assert_eq!(status(c.getattr(&r.root)), Nfsstat3::ACCES);
    assert_eq!(status(c.lookup(&r.root, b"f")), Nfsstat3::ACCES);
    assert_eq!(status(c.read(&f, 0, 10, true)), Nfsstat3::ACCES);
    assert_eq!(
        status(c.write(&f, 0, b"x", StableHow::FileSync, true)),
        Nfsstat3::ACCES
    );
    assert_eq!(status(c.create(&r.root, b"g", guarded())), Nfsstat3::ACCES);
    // NULL names no export and is answered (the transport's ping).
    c.null().expect("NULL");
    // The allowed client is not disturbed.
    assert!(r.nfs.getattr(&f).is_ok());
    r.stop();
}

#[test]
fn rejects_mnt_of_an_export_the_client_is_not_named_in() {
    let r = rig(
        "/export:127.0.0.1(rw,no_root_squash,sec=sys:none);/private:10.1.1.1(rw)",
        Backend::Memory,
    );
    let m = r.daemon.mount_addr().unwrap();
    assert_eq!(mount::mnt(m, "/private").unwrap(), Err(MNT3ERR_ACCES));
    assert!(mount::mnt(m, "/export").unwrap().is_ok());
    r.stop();
}

#[test]
fn rejects_writes_to_a_read_only_export_with_rofs() {
    let r = rig(RULES, Backend::Memory);
    let f = r.nfs.create(&r.root, b"f", guarded()).unwrap();
    r.nfs
        .write(&f, 0, b"data", StableHow::FileSync, true)
        .unwrap();
    let (_ep, c) = r.second_client(Ipv4Addr::new(10, 0, 0, 5));
    assert_eq!(c.read(&f, 0, 10, true).unwrap().0, b"data");
    assert_eq!(
        status(c.write(&f, 0, b"x", StableHow::FileSync, true)),
        Nfsstat3::ROFS
    );
    assert_eq!(status(c.create(&r.root, b"g", guarded())), Nfsstat3::ROFS);
    assert_eq!(
        status(c.mkdir(&r.root, b"d", Sattr3::default())),
        Nfsstat3::ROFS
    );
    assert_eq!(
        status(c.setattr(&f, &Sattr3::default(), None)),
        Nfsstat3::ROFS
    );
    assert_eq!(status(c.remove(&r.root, b"f")), Nfsstat3::ROFS);
    assert_eq!(
        status(c.rename(&r.root, b"f", &r.root, b"h")),
        Nfsstat3::ROFS
    );
    assert_eq!(status(c.link(&f, &r.root, b"l")), Nfsstat3::ROFS);
    assert_eq!(status(c.commit(&f, 0, 0)), Nfsstat3::ROFS);
    // ACCESS does not grant what the export refuses.
    let want = access::READ | access::MODIFY | access::EXTEND;
    assert_eq!(c.access(&f, want).unwrap(), access::READ);
    assert_eq!(r.nfs.read(&f, 0, 10, true).unwrap().0, b"data");
    r.stop();
}

#[test]
fn rejects_credential_flavors_the_export_does_not_accept() {
    let r = rig(RULES, Backend::Memory);
    // 10.0.0.6 is sec=sys: AUTH_NONE is too weak there.
    let (_e1, none) = r.second_client(Ipv4Addr::new(10, 0, 0, 6));
    assert_eq!(auth_error(none.getattr(&r.root)), AuthStat::TooWeak);
    let (_e2, sys) = r.client_as(
        Ipv4Addr::new(10, 0, 0, 6),
        Some(AuthSysCred::new(1000, 1000, &[])),
    );
    assert!(sys.getattr(&r.root).is_ok());
    assert_eq!(r.counter("errors.AUTH_ERROR"), 1);
    r.stop();
}

#[test]
fn accepts_squashing_as_the_export_says() {
    let r = rig(RULES, Backend::Memory);
    let dir = r
        .nfs
        .mkdir(
            &r.root,
            b"open",
            Sattr3 {
                mode: Some(0o777),
                ..Sattr3::default()
            },
        )
        .unwrap();
    // root_squash: root acts as 65534.
    let (_e1, root) = r.client_as(
        Ipv4Addr::new(10, 0, 0, 7),
        Some(AuthSysCred::new(0, 0, &[0])),
    );
    let f = root.create(&dir, b"by-root", guarded()).unwrap();
    let a = root.getattr(&f).unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    // all_squash with anonuid/anongid, a prefix rule.
    let (_e2, anyone) = r.client_as(
        Ipv4Addr::new(10, 0, 8, 33),
        Some(AuthSysCred::new(1000, 1000, &[])),
    );
    let g = anyone.create(&dir, b"by-1000", guarded()).unwrap();
    let a = anyone.getattr(&g).unwrap();
    assert_eq!((a.uid, a.gid), (4242, 4343));
    // AUTH_NONE acts as the export's anonymous identity (anonuid=0 for the rig here).
    let h = r.nfs.create(&dir, b"by-anonymous", guarded()).unwrap();
    let a = r.nfs.getattr(&h).unwrap();
    assert_eq!((a.uid, a.gid), (0, 0));
    // no_root_squash: AUTH_SYS root stays root.
    let (_e3, real_root) = r.client_as(
        Ipv4Addr::new(10, 0, 0, 1),
        Some(AuthSysCred::new(0, 0, &[])),
    );
    let k = real_root.create(&dir, b"by-real-root", guarded()).unwrap();
    assert_eq!(
        real_root.getattr(&k).map(|a| (a.uid, a.gid)).unwrap(),
        (0, 0)
    );
    // root_squash: a non-root uid is itself, and mode bits apply to it (0755 root dir).
    let (_e4, user) = r.client_as(
        Ipv4Addr::new(10, 0, 0, 7),
        Some(AuthSysCred::new(1000, 100, &[])),
    );
    assert_eq!(
        status(user.create(&r.root, b"no", guarded())),
        Nfsstat3::ACCES
    );
    let u = user.create(&dir, b"by-1000-direct", guarded()).unwrap();
    assert_eq!(
        user.getattr(&u).map(|a| (a.uid, a.gid)).unwrap(),
        (1000, 100)
    );
    r.stop();
}

#[test]
fn rejects_handles_of_two_exports_in_one_call_with_xdev() {
    let r = rig(
        "/export:*(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0);\
         /other:*(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0)",
        Backend::Memory,
    );
    let m = r.daemon.mount_addr().unwrap();
    let (other, _) = mount::mnt(m, "/other").unwrap().unwrap();
    let f = r.nfs.create(&r.root, b"f", guarded()).unwrap();
    assert_eq!(
        status(r.nfs.rename(&r.root, b"f", &other, b"f")),
        Nfsstat3::XDEV
    );
    assert_eq!(status(r.nfs.link(&f, &other, b"l")), Nfsstat3::XDEV);
    // Each export is its own store.
    assert_eq!(status(r.nfs.lookup(&other, b"f")), Nfsstat3::NOENT);
    r.stop();
}

/// `fh` with octet `i` changed.
fn flipped(fh: &Fh, i: usize) -> Fh {
    let mut b = fh.as_bytes().to_vec();
    b[i] ^= 0x01;
    Fh::new(&b).unwrap()
}

fn rejects_altered_handles(r: &Rig) {
    let f = r.nfs.create(&r.root, b"secret", guarded()).unwrap();
    for i in 0..f.as_bytes().len() {
        assert_eq!(
            status(r.nfs.getattr(&flipped(&f, i))),
            Nfsstat3::STALE,
            "octet {i}"
        );
    }
    // A store handle spliced in front of another handle's trailer (export id + MAC).
    let (fb, rb) = (f.as_bytes(), r.root.as_bytes());
    if fb.len() == rb.len() {
        let mut spliced = fb[..fb.len() - 12].to_vec();
        spliced.extend_from_slice(&rb[rb.len() - 12..]);
        let h = Fh::new(&spliced).unwrap();
        assert_eq!(status(r.nfs.getattr(&h)), Nfsstat3::STALE);
    }
    assert!(r.nfs.getattr(&f).is_ok());
}

#[test]
fn rejects_altered_and_spliced_handles_memory() {
    let r = Rig::memory();
    rejects_altered_handles(&r);
    r.stop();
}

#[test]
fn rejects_altered_and_spliced_handles_dir() {
    let r = Rig::dir("altered");
    rejects_altered_handles(&r);
    r.stop();
}

#[test]
fn accepts_a_reload_that_changes_access_without_dropping_connections() {
    let r = rig(RULES, Backend::Memory);
    let f = r.nfs.create(&r.root, b"f", guarded()).unwrap();
    let (_ep, c) = r.second_client(Ipv4Addr::new(10, 0, 0, 9));
    assert_eq!(status(c.getattr(&f)), Nfsstat3::ACCES);
    // Grant 10.0.0.9, take 10.0.0.1 (the rig's client) down to read-only.
    let next = exports(
        "/export:127.0.0.1(rw,no_root_squash,sec=sys:none) 10.0.0.9(rw,sec=sys:none) \
         10.0.0.1(ro,sec=sys:none,anonuid=0,anongid=0)",
    );
    r.daemon.reload(&next).expect("reload");
    assert!(c.getattr(&f).is_ok(), "same connection, new rules");
    assert_eq!(
        status(r.nfs.write(&f, 0, b"x", StableHow::FileSync, true)),
        Nfsstat3::ROFS
    );
    // The store (and the handles) survived the reload.
    assert!(r.nfs.getattr(&f).is_ok());
    // A list that does not keep the path: its handles go STALE; a bad one changes nothing.
    assert!(r.daemon.reload(&exports("/elsewhere:*(rw)")).is_ok());
    assert_eq!(status(r.nfs.getattr(&f)), Nfsstat3::STALE);
    r.stop();
}
