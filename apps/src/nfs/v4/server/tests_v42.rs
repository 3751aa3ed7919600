//! Unit tests of minor version 2 (RFC 7862): COMPOUNDs of minor version 2 with ALLOCATE,
//! DEALLOCATE, SEEK and COPY on the memory store, the stateids and exports they need, the minor
//! version 2 operations answered NFS4ERR_NOTSUPP and the numbers past them OP_ILLEGAL, minor
//! version 1 unchanged, and a minor version 2 client's CB_COMPOUND of its own minor version.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::deleg::Callbacks;
use super::state::Limits;
use super::tests::{auth_sys, open_create, open_existing, server, server_cb, Raw, A, H};
use super::tests_deleg::{deleg_sid, deleg_type, Rec};
use super::xdr::st;
use crate::nfs::v4::op;

/// The memory store's block (1 MiB by default): its unit of holes.
const B: u64 = 1 << 20;

/// A minor version 2 client on a fresh server exporting with `opts`.
fn v42(opts: &str) -> H {
    let (srv, now, store) = server(opts, Limits::default());
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    H::on_minor(srv, now, store, b"client-42", auth_sys(0, 0), peer, 2)
}

/// `op` on `f` in the root (its arguments after the operation number in `a`).
fn on_f(h: &mut H, root: &[u8], a: A) -> super::tests::Raw {
    h.raw(&[
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(b"f"),
        a,
    ])
}

fn allocate(sid: &[u8; 16], offset: u64, len: u64, punch: bool) -> A {
    let n = if punch { op::DEALLOCATE } else { op::ALLOCATE };
    A::op(n).fixed(sid).u64(offset).u64(len)
}

fn seek(sid: &[u8; 16], offset: u64, hole: bool) -> A {
    A::op(op::SEEK).fixed(sid).u64(offset).u32(u32::from(hole))
}

/// `seek_res4`: (sr_eof, sr_offset).
fn seek_res(last: &[u8]) -> (bool, u64) {
    let eof = u32::from_be_bytes(last[..4].try_into().unwrap()) != 0;
    (eof, u64::from_be_bytes(last[4..12].try_into().unwrap()))
}

#[test]
fn accepts_allocate_deallocate_and_seek_in_minor_version_2() {
    let mut h = v42("rw,no_root_squash");
    let root = h.root();
    let sid = h.create_in_root(b"f");
    // ALLOCATE 4 blocks: the size grows; allocated space is a hole until written.
    let r = on_f(&mut h, &root, allocate(&sid, 0, 4 * B, false));
    assert_eq!(r.status, st::OK, "ALLOCATE");
    assert_eq!(r.results.last(), Some(&(op::ALLOCATE, st::OK)));
    let r = on_f(&mut h, &root, seek(&sid, 0, true));
    assert_eq!((r.status, seek_res(&r.last)), (st::OK, (false, 0)));
    // No data before the end: NFS4_OK with sr_eof (RFC 7862 §15.11.3), sr_offset the size.
    let r = on_f(&mut h, &root, seek(&sid, 0, false));
    assert_eq!(
        (r.status, seek_res(&r.last)),
        (st::OK, (true, 4 * B)),
        "no data yet"
    );
    // WRITE 4 KiB into the third block: data there, a hole after it.
    let w = A::op(op::WRITE)
        .fixed(&sid)
        .u64(2 * B + 100)
        .u32(2)
        .opaque(&[7u8; 4096]);
    assert_eq!(on_f(&mut h, &root, w).status, st::OK);
    let r = on_f(&mut h, &root, seek(&sid, 0, false));
    assert_eq!((r.status, seek_res(&r.last)), (st::OK, (false, 2 * B)));
    let r = on_f(&mut h, &root, seek(&sid, 2 * B, true));
    assert_eq!((r.status, seek_res(&r.last)), (st::OK, (false, 3 * B)));
    // At the end: NXIO.
    assert_eq!(
        on_f(&mut h, &root, seek(&sid, 4 * B, true)).status,
        st::NXIO
    );
    // DEALLOCATE the written block: a hole again, the size kept.
    let r = on_f(&mut h, &root, allocate(&sid, 2 * B, B, true));
    assert_eq!(r.status, st::OK, "DEALLOCATE");
    let r = on_f(&mut h, &root, seek(&sid, 0, false));
    assert_eq!((r.status, seek_res(&r.last)), (st::OK, (true, 4 * B)));
    let cx = crate::nfs::identity::Cred::ROOT;
    let fh = h.store.lookup(&cx, &h.store.root(), b"f").unwrap();
    assert_eq!(h.store.getattr(&fh).unwrap().size, 4 * B);
    // An empty range: INVAL; a bad data_content4: BADXDR.
    assert_eq!(
        on_f(&mut h, &root, allocate(&sid, 0, 0, false)).status,
        st::INVAL
    );
    let bad = A::op(op::SEEK).fixed(&sid).u64(0).u32(2);
    assert_eq!(on_f(&mut h, &root, bad).status, st::BADXDR);
}

#[test]
fn rejects_allocate_without_a_write_open_or_on_a_read_only_export() {
    let mut h = v42("rw,no_root_squash");
    let root = h.root();
    let sid = h.create_in_root(b"f");
    let close = A::op(op::CLOSE).u32(0).fixed(&sid);
    assert_eq!(on_f(&mut h, &root, close).status, st::OK);
    // A read open's stateid allows SEEK, not ALLOCATE.
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(h.clientid, b"f", 1),
    ]);
    assert_eq!(r.status, st::OK);
    let read_sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let r = on_f(&mut h, &root, allocate(&read_sid, 0, B, false));
    assert_eq!(r.status, st::OPENMODE);
    let r = on_f(&mut h, &root, seek(&read_sid, 0, true));
    assert_eq!(
        r.status,
        st::NXIO,
        "an empty file: SEEK allowed, nothing there"
    );
    let mut ro = v42("ro,no_root_squash");
    let cx = crate::nfs::identity::Cred::ROOT;
    let how = crate::nfs::types::CreateHow::Unchecked(Default::default());
    ro.store.create(&cx, &ro.store.root(), b"f", &how).unwrap();
    let root = ro.root();
    let r = on_f(&mut ro, &root, allocate(&[0; 16], 0, B, false));
    assert_eq!(r.status, st::ROFS);
}

/// COPY from `src` (saved) to `dst` (current) in the root: the raw reply.
fn copy(h: &mut H, root: &[u8], sids: (&[u8; 16], &[u8; 16]), at: (u64, u64, u64)) -> Raw {
    let (src_off, dst_off, count) = at;
    h.raw(&[
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(b"src"),
        A::op(op::SAVEFH),
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(b"dst"),
        A::op(op::COPY)
            .fixed(sids.0)
            .fixed(sids.1)
            .u64(src_off)
            .u64(dst_off)
            .u64(count)
            .u32(0)
            .u32(1)
            .u32(0),
    ])
}

#[test]
fn accepts_a_copy_within_the_server_in_minor_version_2() {
    let mut h = v42("rw,no_root_squash");
    let root = h.root();
    let src = h.create_in_root(b"src");
    let dst = h.create_in_root(b"dst");
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let w = A::op(op::WRITE).fixed(&src).u64(0).u32(2).opaque(&data);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"src"),
        w,
    ]);
    assert_eq!(r.status, st::OK);
    // Count 0: to the end of the source.
    let r = copy(&mut h, &root, (&src, &dst), (1000, 10, 0));
    assert_eq!(r.status, st::OK, "COPY");
    let n = u64::from_be_bytes(r.last[4..12].try_into().unwrap());
    assert_eq!(n, 2000, "wr_count");
    assert_eq!(&r.last[..4], &[0, 0, 0, 0], "no callback id: done");
    assert_eq!(
        &r.last[24..32],
        &[0, 0, 0, 1, 0, 0, 0, 1],
        "consecutive, synchronous"
    );
    let cx = crate::nfs::identity::Cred::ROOT;
    let fh = h.store.lookup(&cx, &h.store.root(), b"dst").unwrap();
    let mut got = vec![0u8; 3000];
    let (got_n, _) = h.store.read(&cx, &fh, 0, &mut got).unwrap();
    assert_eq!(got_n, 2010);
    assert_eq!(&got[10..2010], &data[1000..]);
    // The source's read stateid as the destination's: OPENMODE only when it cannot write;
    // a source server named: NOTSUPP; no saved file handle: NOFILEHANDLE.
    let named = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"src"),
        A::op(op::SAVEFH),
        A::op(op::COPY)
            .fixed(&src)
            .fixed(&src)
            .u64(0)
            .u64(0)
            .u64(1)
            .u32(0)
            .u32(1)
            .u32(1)
            .u32(1)
            .opaque(b"other-server"),
    ]);
    assert_eq!(named.status, st::NOTSUPP);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"dst"),
        A::op(op::COPY)
            .fixed(&src)
            .fixed(&dst)
            .u64(0)
            .u64(0)
            .u64(1)
            .u32(0)
            .u32(1)
            .u32(0),
    ]);
    assert_eq!(r.status, st::NOFILEHANDLE);
    // A file onto itself: overlapping ranges INVAL, apart allowed.
    let same = |h: &mut H, src_off: u64, dst_off: u64| {
        h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            A::op(op::LOOKUP).opaque(b"src"),
            A::op(op::SAVEFH),
            A::op(op::COPY)
                .fixed(&src)
                .fixed(&src)
                .u64(src_off)
                .u64(dst_off)
                .u64(100)
                .u32(0)
                .u32(1)
                .u32(0),
        ])
        .status
    };
    assert_eq!(same(&mut h, 0, 50), st::INVAL);
    assert_eq!(same(&mut h, 0, 500), st::OK);
}

#[test]
fn rejects_other_minor_version_2_operations_with_notsupp_and_unknown_ones_as_illegal() {
    let mut h = v42("rw,no_root_squash");
    let root = h.root();
    // READ_PLUS (68), OFFLOAD_CANCEL (66), WRITE_SAME (70): NOTSUPP.
    for n in [66u32, 68, 70] {
        let r = h.raw(&[A::op(op::PUTFH).opaque(&root), A::op(n)]);
        assert_eq!(r.status, st::NOTSUPP, "operation {n}");
    }
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), A::op(76)]);
    assert_eq!(r.status, st::OP_ILLEGAL);
    assert_eq!(r.results.last(), Some(&(op::ILLEGAL, st::OP_ILLEGAL)));
    // In minor version 1 the same numbers are ILLEGAL.
    let mut one = H::new("rw,no_root_squash");
    let root = one.root();
    for n in [op::ALLOCATE, op::SEEK, op::COPY, op::CLONE] {
        let r = one.raw(&[A::op(op::PUTFH).opaque(&root), A::op(n)]);
        assert_eq!(r.status, st::OP_ILLEGAL, "operation {n} in minor version 1");
    }
}

#[test]
fn accepts_a_minor_version_2_clients_recall_in_its_own_minor_version() {
    let rec = Arc::new(Rec::default());
    let cbs: Arc<dyn Callbacks> = Arc::clone(&rec) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let mut b = H::on_minor(srv, now, store, b"client-b", auth_sys(0, 0), peer, 2);
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let close = A::op(op::CLOSE).u32(0).fixed(&sid);
    assert_eq!(on_f(&mut a, &root, close).status, st::OK);
    // b (minor version 2) gets a read delegation; a's write open recalls it.
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(b.clientid, b"f", 1),
    ]);
    assert_eq!((r.status, deleg_type(&r.last)), (st::OK, 1));
    let d = deleg_sid(&r.last);
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(a.clientid, b"f", 2),
    ]);
    assert_eq!(r.status, st::DELAY);
    let cbs = rec.compounds();
    assert_eq!(cbs.len(), 1);
    assert_eq!(cbs[0].minor, 2, "the CB_COMPOUND of b's minor version");
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)).status,
        st::OK
    );
}
