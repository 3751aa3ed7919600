//! Unit tests of CLONE (RFC 7862 §15.13) in COMPOUNDs of minor version 2 on the memory store:
//! the saved file's range made the current file's, count 0 meaning to the end of the source;
//! ranges past the source's end, overlapping ranges of one file and offsets off the store's
//! blocks NFS4ERR_INVAL; the
//! stateids, file types and exports COPY needs; malformed arguments NFS4ERR_BADXDR; minor
//! version 1 OP_ILLEGAL.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_clone`.
//! Recovery: a failure names the case and the status seen.

use std::net::{IpAddr, Ipv4Addr};

use super::state::Limits;
use super::tests::{auth_sys, open_existing, server, Raw, A, H};
use super::xdr::st;
use crate::nfs::identity::Cred;
use crate::nfs::v4::op;

/// The memory store's block (1 MiB by default): a clone's offsets fall on its boundaries.
const B: u64 = 1 << 20;

/// A minor version 2 client on a fresh server exporting with `opts`.
fn v42(opts: &str) -> H {
    let (srv, now, store) = server(opts, Limits::default());
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    H::on_minor(srv, now, store, b"client-42", auth_sys(0, 0), peer, 2)
}

/// CLONE from `from` (saved) to `to` (current), both in the root: the raw reply.
fn clone(h: &mut H, names: (&[u8], &[u8]), sids: (&[u8; 16], &[u8; 16]), at: [u64; 3]) -> Raw {
    let root = h.root();
    h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(names.0),
        A::op(op::SAVEFH),
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(names.1),
        A::op(op::CLONE)
            .fixed(sids.0)
            .fixed(sids.1)
            .u64(at[0])
            .u64(at[1])
            .u64(at[2]),
    ])
}

/// The octets of `name` in the root.
fn contents(h: &H, name: &[u8]) -> Vec<u8> {
    let cx = Cred::ROOT;
    let fh = h.store.lookup(&cx, &h.store.root(), name).expect("lookup");
    let mut got = vec![0u8; 3 << 20];
    let (n, _) = h.store.read(&cx, &fh, 0, &mut got).expect("read");
    got.truncate(n);
    got
}

/// A source `src` holding 3000 octets and an empty `dst`, opened for writing: their stateids.
fn pair(h: &mut H) -> ([u8; 16], [u8; 16], Vec<u8>) {
    let root = h.root();
    let src = h.create_in_root(b"src");
    let dst = h.create_in_root(b"dst");
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"src"),
        A::op(op::WRITE).fixed(&src).u64(0).u32(2).opaque(&data),
    ]);
    assert_eq!(r.status, st::OK);
    (src, dst, data)
}

#[test]
fn accepts_a_clone_within_the_server_in_minor_version_2() {
    let mut h = v42("rw,no_root_squash");
    let (src, dst, data) = pair(&mut h);
    let names: (&[u8], &[u8]) = (b"src", b"dst");
    // Count 0: to the end of the source. The result is the status alone.
    let r = clone(&mut h, names, (&src, &dst), [0, 0, 0]);
    assert_eq!(r.status, st::OK, "CLONE");
    assert!(r.last.is_empty(), "no result body");
    assert_eq!(contents(&h, b"dst"), data);
    // Count 0 at the source's end: nothing to do.
    let r = clone(&mut h, names, (&src, &dst), [3000, 0, 0]);
    assert_eq!(r.status, st::OK, "count 0 at the end");
    assert_eq!(contents(&h, b"dst"), data);
    // Past the destination's end (at the next of the memory store's blocks): it grows, zeros
    // before the range.
    let r = clone(&mut h, names, (&src, &dst), [0, B, 3000]);
    assert_eq!(r.status, st::OK);
    let got = contents(&h, b"dst");
    assert_eq!(got.len(), B as usize + 3000);
    assert!(got[3000..B as usize].iter().all(|&x| x == 0));
    assert_eq!(&got[B as usize..], &data[..]);
    // Within one file, ranges apart.
    let r = clone(&mut h, (b"src", b"src"), (&src, &src), [0, 2 * B, 0]);
    assert_eq!(r.status, st::OK, "within one file");
    assert_eq!(&contents(&h, b"src")[2 * B as usize..], &data[..]);
}

#[test]
fn rejects_clones_past_the_source_overlapping_or_without_what_copy_needs() {
    let mut h = v42("rw,no_root_squash");
    let (src, dst, _) = pair(&mut h);
    let names: (&[u8], &[u8]) = (b"src", b"dst");
    let status =
        |h: &mut H, sids: (&[u8; 16], &[u8; 16]), at: [u64; 3]| clone(h, names, sids, at).status;
    assert_eq!(
        status(&mut h, (&src, &dst), [3001, 0, 0]),
        st::INVAL,
        "from past the end"
    );
    assert_eq!(
        status(&mut h, (&src, &dst), [3000, 0, 1]),
        st::INVAL,
        "from the end"
    );
    assert_eq!(
        status(&mut h, (&src, &dst), [0, 0, 3001]),
        st::INVAL,
        "to past the end"
    );
    assert_eq!(
        status(&mut h, (&src, &dst), [u64::MAX, 0, 2]),
        st::INVAL,
        "a range that wraps"
    );
    let r = clone(&mut h, (b"src", b"src"), (&src, &src), [0, 0, 100]);
    assert_eq!(r.status, st::INVAL, "overlapping within one file");
    // Off the store's block boundaries: an offset, a count short of the source's end.
    assert_eq!(
        status(&mut h, (&src, &dst), [100, 0, 0]),
        st::INVAL,
        "source offset"
    );
    assert_eq!(
        status(&mut h, (&src, &dst), [0, 100, 0]),
        st::INVAL,
        "destination offset"
    );
    assert_eq!(
        status(&mut h, (&src, &dst), [0, 0, 100]),
        st::INVAL,
        "count"
    );
    assert_eq!(contents(&h, b"dst"), b"", "nothing changed");
    // A read open's stateid for the destination (its write open closed first): OPENMODE.
    let root = h.root();
    let close = A::op(op::CLOSE).u32(0).fixed(&dst);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"dst"),
        close,
    ]);
    assert_eq!(r.status, st::OK, "CLOSE");
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(h.clientid, b"dst", 1),
    ]);
    assert_eq!(r.status, st::OK);
    let read_sid: [u8; 16] = r.last[..16].try_into().unwrap();
    assert_eq!(status(&mut h, (&src, &read_sid), [0, 0, 0]), st::OPENMODE);
    // With the anonymous stateids: no saved file handle; a directory as the source;
    // arguments cut short.
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"dst"),
        A::op(op::CLONE)
            .fixed(&[0; 16])
            .fixed(&[0; 16])
            .u64(0)
            .u64(0)
            .u64(0),
    ]);
    assert_eq!(r.status, st::NOFILEHANDLE);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::SAVEFH),
        A::op(op::LOOKUP).opaque(b"dst"),
        A::op(op::CLONE)
            .fixed(&[0; 16])
            .fixed(&[0; 16])
            .u64(0)
            .u64(0)
            .u64(0),
    ]);
    assert_eq!(r.status, st::ISDIR, "a directory as the source");
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"src"),
        A::op(op::SAVEFH),
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"dst"),
        A::op(op::CLONE)
            .fixed(&[0; 16])
            .fixed(&[0; 16])
            .u64(0)
            .u64(0),
    ]);
    assert_eq!(r.status, st::BADXDR, "cl_count missing");
    // A read-only export: ROFS; minor version 1: no such operation.
    let mut ro = v42("ro,no_root_squash");
    let how = crate::nfs::types::CreateHow::Unchecked(Default::default());
    let cx = Cred::ROOT;
    for name in [b"src", b"dst"] {
        ro.store.create(&cx, &ro.store.root(), name, &how).unwrap();
    }
    let r = clone(&mut ro, names, (&[0; 16], &[0; 16]), [0, 0, 0]);
    assert_eq!(r.status, st::ROFS);
    let mut one = H::new("rw,no_root_squash");
    let root = one.root();
    let r = one.raw(&[A::op(op::PUTFH).opaque(&root), A::op(op::CLONE)]);
    assert_eq!(r.status, st::OP_ILLEGAL, "CLONE in minor version 1");
}
