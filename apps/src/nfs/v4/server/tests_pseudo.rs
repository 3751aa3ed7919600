//! Unit tests of the NFSv4 pseudo file system: the mount walk by export path as the Linux
//! client does it, exports a client may not see, LOOKUPP across the export boundary,
//! read-only pseudo directories, and forged pseudo handles.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_engine::xdr::XdrReader;

use super::attrs::fa;
use super::pseudo::PSEUDO_FSID;
use super::state::Limits;
use super::tests::{auth_sys, A, H};
use super::xdr::st;
use super::{Config, Nfs41};
use crate::nfs::admit::ExportTable;
use crate::nfs::exports::Exports;
use crate::nfs::handle_mac::HandleKey;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::Store;
use crate::nfs::v4::op;

/// `/srv/export` for 10.0.0.1, `/srv/hidden` for 10.9.9.9 only, `/other/deep` for all.
const EXPORTS: &str = "/srv/export 10.0.0.1(rw,no_root_squash)\n\
                       /srv/hidden 10.9.9.9(rw)\n\
                       /other/deep *(ro)\n";

/// A server with [`EXPORTS`], each on its own memory store, its table, and a client at
/// 10.0.0.1 with a session.
pub fn setup(text: &str) -> (H, Arc<ExportTable>) {
    let ex = Exports::parse(text).unwrap();
    let list = ex
        .list()
        .iter()
        .map(|e| {
            let s: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions::default()));
            (e.clone(), s)
        })
        .collect();
    let table = Arc::new(ExportTable::new(HandleKey::from_bytes([7; 16]), list).unwrap());
    let now = Arc::new(AtomicU64::new(1_000));
    let n2 = Arc::clone(&now);
    let cfg = Config {
        limits: Limits::default(),
        max_io: 64 << 10,
        clock: Arc::new(move || n2.load(Ordering::SeqCst)),
        pool: None,
        callbacks: None,
    };
    let srv = Nfs41::new(Arc::clone(&table), cfg);
    let store = Arc::clone(&table.shares()[0].store);
    let h = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    (h, table)
}

fn lookup(name: &[u8]) -> A {
    A::op(op::LOOKUP).opaque(name)
}

fn getattr(bits: &[u32]) -> A {
    let mut w = [0u32; 3];
    for b in bits {
        w[(*b / 32) as usize] |= 1 << (b % 32);
    }
    A::op(op::GETATTR).u32(3).u32(w[0]).u32(w[1]).u32(w[2])
}

fn readdir() -> A {
    A::op(op::READDIR)
        .u64(0)
        .fixed(&[0; 8])
        .u32(4096)
        .u32(8192)
        .u32(0)
}

/// The handle GETFH returns after `ops`.
fn fh_after(h: &mut H, ops: &[A]) -> Vec<u8> {
    let mut all = ops.to_vec();
    all.push(A::op(op::GETFH));
    let r = h.raw(&all);
    assert_eq!(r.status, st::OK, "{:?}", r.results);
    XdrReader::new(&r.last).get_opaque(128).unwrap().to_vec()
}

/// The type, fsid major, fileid and mode of the current handle after `ops`.
fn attrs_after(h: &mut H, ops: &[A]) -> (u32, u64, u64, u32) {
    let mut all = ops.to_vec();
    all.push(getattr(&[fa::TYPE, fa::FSID, fa::FILEID, fa::MODE]));
    let r = h.raw(&all);
    assert_eq!(r.status, st::OK, "{:?}", r.results);
    let mut x = XdrReader::new(&r.last);
    let n = x.get_u32().unwrap();
    for _ in 0..n {
        x.get_u32().unwrap();
    }
    x.get_u32().unwrap();
    let ty = x.get_u32().unwrap();
    let fsid = x.get_u64().unwrap();
    x.get_u64().unwrap();
    let fileid = x.get_u64().unwrap();
    (ty, fsid, fileid, x.get_u32().unwrap())
}

/// The names a READDIR of the current handle after `ops` lists.
fn names_after(h: &mut H, ops: &[A]) -> Vec<String> {
    let mut all = ops.to_vec();
    all.push(readdir());
    let r = h.raw(&all);
    assert_eq!(r.status, st::OK, "{:?}", r.results);
    let mut x = XdrReader::new(&r.last);
    x.skip(8).unwrap();
    let mut names = Vec::new();
    while x.get_u32().unwrap() == 1 {
        x.get_u64().unwrap();
        names.push(String::from_utf8(x.get_opaque(255).unwrap().to_vec()).unwrap());
        let n = x.get_u32().unwrap();
        for _ in 0..n {
            x.get_u32().unwrap();
        }
        x.get_opaque(4096).unwrap();
    }
    assert_eq!(x.get_u32().unwrap(), 1, "eof");
    names
}

#[test]
fn accepts_the_mount_walk_by_export_path() {
    let (mut h, table) = setup(EXPORTS);
    let root = [A::op(op::PUTROOTFH)];
    let (ty, fsid, root_id, mode) = attrs_after(&mut h, &root);
    assert_eq!((ty, fsid, mode), (2, PSEUDO_FSID, 0o555), "pseudo root");
    let srv = [A::op(op::PUTROOTFH), lookup(b"srv")];
    let (ty, fsid, srv_id, _) = attrs_after(&mut h, &srv);
    assert_eq!((ty, fsid), (2, PSEUDO_FSID));
    assert_ne!(srv_id, root_id, "distinct fileids");
    let walk = [A::op(op::PUTROOTFH), lookup(b"srv"), lookup(b"export")];
    let fh = fh_after(&mut h, &walk);
    let share = table.find("/srv/export").unwrap();
    assert_eq!(fh, share.root().unwrap().as_bytes(), "the export's root");
    let (ty, fsid, _, _) = attrs_after(&mut h, &walk);
    assert_eq!(ty, 2);
    assert_ne!(fsid, PSEUDO_FSID, "the fsid changes at the export");
    // The handle works on its own: a file made there is found again.
    let mk = A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0);
    let r = h.raw(&[A::op(op::PUTFH).opaque(&fh), mk]);
    assert_eq!(r.status, st::OK);
    let pfh = fh_after(&mut h, &srv);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&pfh),
        lookup(b"export"),
        lookup(b"d"),
    ]);
    assert_eq!(r.status, st::OK, "a pseudo handle walks on");
}

#[test]
fn rejects_exports_the_client_may_not_see() {
    let (mut h, _) = setup(EXPORTS);
    let r = h.raw(&[A::op(op::PUTROOTFH), lookup(b"srv"), lookup(b"hidden")]);
    assert_eq!(r.status, st::NOENT);
    let r = h.raw(&[A::op(op::PUTROOTFH), lookup(b"nothing")]);
    assert_eq!(r.status, st::NOENT);
    assert_eq!(
        names_after(&mut h, &[A::op(op::PUTROOTFH)]),
        ["other", "srv"]
    );
    let srv = [A::op(op::PUTROOTFH), lookup(b"srv")];
    assert_eq!(names_after(&mut h, &srv), ["export"]);
    // A client that sees only /other/deep has no "srv" at all.
    h.peer = IpAddr::V4(Ipv4Addr::new(10, 5, 5, 5));
    let r = h.raw(&srv);
    assert_eq!(r.status, st::NOENT);
    assert_eq!(names_after(&mut h, &[A::op(op::PUTROOTFH)]), ["other"]);
    // The hidden export's own client sees it.
    h.peer = IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9));
    assert_eq!(names_after(&mut h, &srv), ["hidden"]);
}

#[test]
fn accepts_lookupp_back_across_the_export_boundary() {
    let (mut h, _) = setup(EXPORTS);
    let srv = fh_after(&mut h, &[A::op(op::PUTROOTFH), lookup(b"srv")]);
    let root = fh_after(&mut h, &[A::op(op::PUTROOTFH)]);
    let walk = [A::op(op::PUTROOTFH), lookup(b"srv"), lookup(b"export")];
    let mut up = walk.to_vec();
    up.push(A::op(op::LOOKUPP));
    assert_eq!(fh_after(&mut h, &up), srv);
    up.push(A::op(op::LOOKUPP));
    assert_eq!(fh_after(&mut h, &up), root);
    up.push(A::op(op::LOOKUPP));
    assert_eq!(h.raw(&up).status, st::NOENT, "nothing above the root");
}

#[test]
fn accepts_lookupp_from_an_export_under_another() {
    let (mut h, table) = setup("/srv *(rw,no_root_squash)\n/srv/a/b *(rw,no_root_squash)\n");
    let srv = table.find("/srv").unwrap();
    let cred = crate::nfs::identity::Cred::ROOT;
    srv.store
        .mkdir(&cred, &srv.store.root(), b"a", &Default::default())
        .unwrap();
    let a = fh_after(
        &mut h,
        &[A::op(op::PUTROOTFH), lookup(b"srv"), lookup(b"a")],
    );
    let b = table.find("/srv/a/b").unwrap().root().unwrap();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(b.as_bytes()),
        A::op(op::LOOKUPP),
        A::op(op::GETFH),
    ]);
    assert_eq!(r.status, st::OK);
    assert_eq!(XdrReader::new(&r.last).get_opaque(128).unwrap(), a);
}

#[test]
fn rejects_changes_in_pseudo_directories_as_rofs() {
    let (mut h, _) = setup(EXPORTS);
    let root = || A::op(op::PUTROOTFH);
    let mk = A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0);
    assert_eq!(h.status(&[root(), mk]), st::ROFS);
    assert_eq!(
        h.status(&[root(), A::op(op::REMOVE).opaque(b"srv")]),
        st::ROFS
    );
    let set = A::op(op::SETATTR).fixed(&[0; 16]).u32(0).u32(0);
    assert_eq!(h.status(&[root(), set]), st::ROFS);
    let rd = A::op(op::READ).fixed(&[0; 16]).u64(0).u32(10);
    assert_eq!(h.status(&[root(), rd]), st::ISDIR);
    assert_eq!(h.status(&[root(), A::op(op::READLINK)]), st::INVAL);
    // RENAME from the pseudo root into an export crosses file systems.
    let ren = A::op(op::RENAME).opaque(b"x").opaque(b"y");
    let ops = [
        root(),
        A::op(op::SAVEFH),
        lookup(b"srv"),
        lookup(b"export"),
        ren,
    ];
    assert_eq!(h.status(&ops), 18, "NFS4ERR_XDEV");
    let r = h.raw(&[root(), A::op(op::ACCESS).u32(0x3f)]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(x.get_u32().unwrap(), 0x3f);
    assert_eq!(
        x.get_u32().unwrap(),
        0x01 | 0x02 | 0x20,
        "read, lookup, execute"
    );
    let r = h.raw(&[root(), A::op(op::SECINFO_NO_NAME).u32(0)]);
    assert_eq!(r.status, st::OK);
    assert_eq!(&r.last, &[0, 0, 0, 1, 0, 0, 0, 1], "AUTH_SYS");
}

#[test]
fn rejects_forged_and_foreign_pseudo_handles() {
    let (mut h, _) = setup(EXPORTS);
    let srv = fh_after(&mut h, &[A::op(op::PUTROOTFH), lookup(b"srv")]);
    for i in 0..srv.len() {
        let mut f = srv.clone();
        f[i] ^= 0x40;
        let s = h.status(&[A::op(op::PUTFH).opaque(&f), A::op(op::GETFH)]);
        assert!(s == st::STALE || s == st::BADHANDLE, "octet {i}: {s}");
    }
    assert_eq!(
        h.status(&[A::op(op::PUTFH).opaque(&srv), A::op(op::GETFH)]),
        st::OK
    );
    // A client whose tree has no /srv may not use the handle of it.
    h.peer = IpAddr::V4(Ipv4Addr::new(10, 5, 5, 5));
    let s = h.status(&[A::op(op::PUTFH).opaque(&srv), A::op(op::GETFH)]);
    assert_eq!(s, st::STALE);
}

#[test]
fn accepts_the_export_of_slash_as_the_root() {
    let (mut h, table) = setup("/ *(rw,no_root_squash)\n/srv/export *(rw)\n");
    let fh = fh_after(&mut h, &[A::op(op::PUTROOTFH)]);
    assert_eq!(fh, table.find("/").unwrap().root().unwrap().as_bytes());
    let r = h.raw(&[A::op(op::PUTROOTFH), A::op(op::LOOKUPP)]);
    assert_eq!(r.status, st::NOENT);
}
