//! Unit tests of VERIFY (RFC 8881 §18.31) and NVERIFY (§18.15): the `fattr4` given is compared,
//! octet for octet, with the current object's attributes encoded for the same bitmap, as Linux
//! nfsd's `_nfsd4_verify` compares them; an attribute not supported is NFS4ERR_ATTRNOTSUPP, a
//! write-only one (or `rdattr_error`) NFS4ERR_INVAL, arguments that do not decode
//! NFS4ERR_BADXDR.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_verify`.
//! Recovery: a failure names the operations and the status seen.

use super::attrs::fa;
use super::tests::{open_create, Raw, A, H};
use super::tests_pseudo::setup as pseudo_setup;
use super::xdr::st;
use crate::nfs::v4::{op, Op, FATTR4_SIZE};

fn putfh(fh: &[u8]) -> A {
    A::op(op::PUTFH).opaque(fh)
}

fn lookup(name: &[u8]) -> A {
    A::op(op::LOOKUP).opaque(name)
}

fn mask(bits: &[u32]) -> [u32; 3] {
    let mut w = [0u32; 3];
    for b in bits {
        w[(*b / 32) as usize] |= 1 << (b % 32);
    }
    w
}

fn getattr(bits: &[u32]) -> A {
    let w = mask(bits);
    A::op(op::GETATTR).u32(3).u32(w[0]).u32(w[1]).u32(w[2])
}

/// VERIFY or NVERIFY (`opnum`) of a whole encoded `fattr4`.
fn check(opnum: u32, fattr: &[u8]) -> A {
    A::op(opnum).fixed(fattr)
}

/// A `fattr4` of bitmap `bits` and `vals`.
fn fattr(bits: &[u32], vals: &[u8]) -> Vec<u8> {
    let w = mask(bits);
    A::default()
        .u32(3)
        .u32(w[0])
        .u32(w[1])
        .u32(w[2])
        .opaque(vals)
        .0
}

/// A client, the root's handle, and a file `f` holding `hello`.
fn setup() -> (H, Vec<u8>) {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let r = h.raw(&[putfh(&root), open_create(h.clientid, b"f")]);
    assert_eq!(r.status, st::OK);
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let write = A::op(op::WRITE).fixed(&sid).u64(0).u32(2).opaque(b"hello");
    assert_eq!(h.status(&[putfh(&root), lookup(b"f"), write]), st::OK);
    (h, root)
}

/// The `fattr4` GETATTR answers for `bits` after `path`.
fn attrs_of(h: &mut H, path: &[A], bits: &[u32]) -> Vec<u8> {
    let mut ops = path.to_vec();
    ops.push(getattr(bits));
    let r: Raw = h.raw(&ops);
    assert_eq!(r.status, st::OK, "{:?}", r.results);
    r.last
}

/// Attribute sets the tests verify: what GETATTR answers for each is what VERIFY compares.
const SETS: [&[u32]; 5] = [
    &[fa::TYPE, fa::SIZE],
    &[fa::CHANGE, fa::SIZE, fa::FILEID, fa::MODE, fa::NUMLINKS],
    &[
        fa::OWNER,
        fa::OWNER_GROUP,
        fa::TIME_MODIFY,
        fa::TIME_METADATA,
    ],
    &[fa::SUPPORTED_ATTRS, fa::FSID, fa::FILEHANDLE, fa::MAXREAD],
    &[
        fa::SPACE_USED,
        fa::FILES_TOTAL,
        fa::SPACE_TOTAL,
        fa::MOUNTED_ON_FILEID,
    ],
];

#[test]
fn accepts_verify_of_the_attributes_getattr_answers() {
    let (mut h, root) = setup();
    let file = [putfh(&root), lookup(b"f")];
    for bits in SETS {
        let f = attrs_of(&mut h, &file, bits);
        let r = h.raw(&[file[0].clone(), file[1].clone(), check(op::VERIFY, &f)]);
        assert_eq!(r.status, st::OK, "VERIFY of {bits:?}");
        let r = h.raw(&[file[0].clone(), file[1].clone(), check(op::NVERIFY, &f)]);
        assert_eq!(r.status, st::SAME, "NVERIFY of {bits:?}");
    }
    // The directory too, and the COMPOUND goes on after a VERIFY that holds.
    let f = attrs_of(&mut h, &[putfh(&root)], SETS[1]);
    let r = h.raw(&[putfh(&root), check(op::VERIFY, &f), A::op(op::GETFH)]);
    assert_eq!((r.status, r.results.len()), (st::OK, 4));
    // An empty bitmap compares nothing: the same.
    let r = h.raw(&[putfh(&root), check(op::NVERIFY, &fattr(&[], &[]))]);
    assert_eq!(r.status, st::SAME);
    // Through the client codec.
    let size = 5u64.to_be_bytes();
    let ops = [
        Op::PutFh(&root),
        Op::Lookup("f"),
        Op::Verify {
            mask: &[1 << FATTR4_SIZE],
            vals: &size,
        },
    ];
    assert_eq!(h.call(&ops).status, st::OK);
}

#[test]
fn rejects_verify_of_other_values_as_not_same() {
    let (mut h, root) = setup();
    let file = [putfh(&root), lookup(b"f")];
    let verify = |opnum: u32, f: &[u8]| [file[0].clone(), file[1].clone(), check(opnum, f)];
    let size = |n: u64| fattr(&[fa::SIZE], &n.to_be_bytes());
    assert_eq!(h.status(&verify(op::VERIFY, &size(5))), st::OK);
    assert_eq!(h.status(&verify(op::VERIFY, &size(6))), st::NOT_SAME);
    assert_eq!(h.status(&verify(op::NVERIFY, &size(6))), st::OK);
    // Values shorter or longer than the bitmap's: not the same (as Linux nfsd compares).
    let short = fattr(&[fa::SIZE], &[0, 0, 0, 0]);
    assert_eq!(h.status(&verify(op::VERIFY, &short)), st::NOT_SAME);
    let long = fattr(&[fa::SIZE], &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]);
    assert_eq!(h.status(&verify(op::VERIFY, &long)), st::NOT_SAME);
    // A cache check: the change attribute read before a WRITE no longer holds after it.
    let before = attrs_of(&mut h, &file, &[fa::CHANGE]);
    h.advance(1);
    let sid = h.create_in_root(b"f");
    let write = A::op(op::WRITE).fixed(&sid).u64(5).u32(2).opaque(b" world");
    assert_eq!(h.status(&[file[0].clone(), file[1].clone(), write]), st::OK);
    let r = h.raw(&[
        file[0].clone(),
        file[1].clone(),
        check(op::VERIFY, &before),
        A::op(op::GETFH),
    ]);
    assert_eq!(r.status, st::NOT_SAME);
    assert_eq!(r.results.len(), 4, "the COMPOUND stops at the VERIFY");
    assert_eq!(h.status(&verify(op::NVERIFY, &before)), st::OK);
    assert_eq!(h.status(&verify(op::VERIFY, &size(11))), st::OK);
}

#[test]
fn rejects_verify_of_unsupported_write_only_and_malformed_attributes() {
    let (mut h, root) = setup();
    let on_root = |a: A| [putfh(&root), a];
    for opnum in [op::VERIFY, op::NVERIFY] {
        // `acl` (12) and a bit of the third word are not supported.
        let f = fattr(&[12], &[0, 0, 0, 0]);
        assert_eq!(h.status(&on_root(check(opnum, &f))), st::ATTRNOTSUPP);
        let f = fattr(&[70], &[]);
        assert_eq!(h.status(&on_root(check(opnum, &f))), st::ATTRNOTSUPP);
        // A fourth bitmap word with a bit set: no attribute there is supported.
        let four = A::default()
            .u32(4)
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(1)
            .opaque(&[])
            .0;
        assert_eq!(h.status(&on_root(check(opnum, &four))), st::ATTRNOTSUPP);
        // Write-only attributes and rdattr_error: NFS4ERR_INVAL.
        for bit in [fa::TIME_ACCESS_SET, fa::TIME_MODIFY_SET, fa::RDATTR_ERROR] {
            let f = fattr(&[bit], &[0, 0, 0, 0]);
            assert_eq!(h.status(&on_root(check(opnum, &f))), st::INVAL, "bit {bit}");
        }
        // Values that are not whole XDR words (Linux nfsd: NFS4ERR_INVAL).
        let f = fattr(&[fa::TYPE], &[0, 0, 2]);
        assert_eq!(h.status(&on_root(check(opnum, &f))), st::INVAL);
        // Arguments that do not decode.
        let cut = A::op(opnum).u32(1).u32(1 << fa::SIZE).u32(8).u32(0);
        assert_eq!(h.status(&on_root(cut)), st::BADXDR);
        assert_eq!(h.status(&on_root(A::op(opnum).u32(9))), st::BADXDR);
        assert_eq!(h.status(&on_root(A::op(opnum))), st::BADXDR);
        // No current file handle.
        let f = fattr(&[fa::TYPE], &[0, 0, 0, 2]);
        assert_eq!(h.status(&[check(opnum, &f)]), st::NOFILEHANDLE);
    }
}

#[test]
fn accepts_verify_in_a_pseudo_directory() {
    let (mut h, _) = pseudo_setup("/srv/export 10.0.0.1(rw)\n");
    let srv = [A::op(op::PUTROOTFH), lookup(b"srv")];
    for bits in [SETS[0], SETS[1], &[fa::FILEHANDLE, fa::FSID]] {
        let f = attrs_of(&mut h, &srv, bits);
        let r = h.raw(&[srv[0].clone(), srv[1].clone(), check(op::VERIFY, &f)]);
        assert_eq!(r.status, st::OK, "VERIFY of {bits:?}");
        let r = h.raw(&[srv[0].clone(), srv[1].clone(), check(op::NVERIFY, &f)]);
        assert_eq!(r.status, st::SAME);
    }
    let f = fattr(&[fa::TYPE], &[0, 0, 0, 1]);
    let r = h.raw(&[A::op(op::PUTROOTFH), check(op::VERIFY, &f)]);
    assert_eq!(r.status, st::NOT_SAME, "a directory, not a file");
    let f = fattr(&[fa::TIME_MODIFY_SET], &[0, 0, 0, 0]);
    let r = h.raw(&[A::op(op::PUTROOTFH), check(op::NVERIFY, &f)]);
    assert_eq!(r.status, st::INVAL);
}

/// VERIFY in minor version 2 compares its own attributes (`change_attr_type`,
/// `xattr_support`), as GETATTR answers them; minor version 1 does not know them
/// (NFS4ERR_ATTRNOTSUPP); `mode_umask` is write-only (NFS4ERR_INVAL).
#[test]
fn accepts_verify_of_minor_version_2_attributes_in_minor_version_2_only() {
    use super::state::Limits;
    use super::tests::{auth_sys, server};
    use std::net::{IpAddr, Ipv4Addr};
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    for minor in [2, 1] {
        let (srv, now, store) = server("rw,no_root_squash", Limits::default());
        let mut h = H::on_minor(srv, now, store, b"client-v", auth_sys(0, 0), peer, minor);
        let root = h.root();
        let bits = [fa::CHANGE_ATTR_TYPE, fa::XATTR_SUPPORT];
        let f = attrs_of(&mut h, &[putfh(&root)], &bits);
        // GETATTR's own fattr4, whatever bitmap it kept: VERIFY of exactly that.
        let r = h.raw(&[putfh(&root), check(op::VERIFY, &f)]);
        let asked = fattr(&bits, &[0, 0, 0, 4, 0, 0, 0, 0]);
        let r2 = h.raw(&[putfh(&root), check(op::VERIFY, &asked)]);
        let mu = fattr(&[fa::MODE_UMASK], &[0; 8]);
        let r3 = h.raw(&[putfh(&root), check(op::VERIFY, &mu)]);
        if minor == 2 {
            assert_eq!(r.status, st::OK, "4.2: VERIFY of GETATTR's answer");
            assert_eq!(r2.status, st::NOT_SAME, "4.2: other values");
            assert_eq!(r3.status, st::INVAL, "4.2: mode_umask is write-only");
        } else {
            assert_eq!(r2.status, st::ATTRNOTSUPP, "4.1");
            assert_eq!(r3.status, st::ATTRNOTSUPP, "4.1: mode_umask");
        }
    }
}
