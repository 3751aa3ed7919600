//! Unit tests of the NFSv4.2 extended attribute operations (RFC 8276) on the memory store:
//! GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR in COMPOUNDs of minor version 2, their
//! results in RFC 8276's XDR written out by hand, their refusals (names, values, options,
//! cookies, `lxa_maxcount`, read-only exports, minor version 1), the `xattr_support`
//! attribute and ACCESS's XAREAD / XAWRITE / XALIST bits; and minor version 2's
//! `change_attr_type` per store.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the step and the status seen.

use std::net::{IpAddr, Ipv4Addr};

use super::state::Limits;
use super::tests::{auth_sys, server, Raw, A, H};
use super::xdr::st;
use crate::nfs::v4::op;

/// NFS4ERR_NOXATTR.
const NOXATTR: u32 = 10095;
/// NFS4ERR_XATTR2BIG.
const XATTR2BIG: u32 = 10096;

/// A minor version 2 client acting as `uid` on a fresh server exporting with `opts`.
fn v42_as(opts: &str, uid: u32) -> H {
    let (srv, now, store) = server(opts, Limits::default());
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    H::on_minor(srv, now, store, b"client-x", auth_sys(uid, uid), peer, 2)
}

/// `a` on `f` in the root.
fn on_f(h: &mut H, a: A) -> Raw {
    let root = h.root();
    h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        a,
    ])
}

fn set(how: u32, name: &[u8], value: &[u8]) -> A {
    A::op(op::SETXATTR).u32(how).opaque(name).opaque(value)
}

fn get(name: &[u8]) -> A {
    A::op(op::GETXATTR).opaque(name)
}

fn list(cookie: u64, maxcount: u32) -> A {
    A::op(op::LISTXATTRS).u64(cookie).u32(maxcount)
}

fn remove(name: &[u8]) -> A {
    A::op(op::REMOVEXATTR).opaque(name)
}

/// `change_info4` of a result body: (atomic, before, after).
fn cinfo(b: &[u8]) -> (u32, u64, u64) {
    let w = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    let h = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
    (w(0), h(4), h(12))
}

#[test]
fn accepts_set_get_list_and_remove_in_rfc_8276_xdr() {
    let mut h = v42_as("rw,no_root_squash", 0);
    h.create_in_root(b"f");
    let r = on_f(&mut h, set(0, b"a", b"hello"));
    assert_eq!(r.status, st::OK, "SETXATTR");
    assert_eq!(r.results.last(), Some(&(op::SETXATTR, st::OK)));
    let (atomic, before, after) = cinfo(&r.last);
    assert_eq!(r.last.len(), 20);
    assert!(atomic == 1 && after != before, "{:?}", cinfo(&r.last));
    // GETXATTR4resok: the value as an opaque, its pad written.
    let r = on_f(&mut h, get(b"a"));
    assert_eq!(r.status, st::OK);
    assert_eq!(r.last, [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0, 0, 0]);
    // SETXATTR4_CREATE of one that exists: EXIST; SETXATTR4_REPLACE of one that does not:
    // NOXATTR; the value kept.
    assert_eq!(on_f(&mut h, set(1, b"a", b"x")).status, st::EXIST);
    assert_eq!(on_f(&mut h, set(2, b"b", b"x")).status, NOXATTR);
    assert_eq!(on_f(&mut h, set(2, b"a", b"")).status, st::OK);
    assert_eq!(on_f(&mut h, get(b"a")).last, [0, 0, 0, 0]);
    assert_eq!(on_f(&mut h, set(1, b"bb", b"12345678")).status, st::OK);
    // LISTXATTRS4resok: cookie, names, eof.
    let r = on_f(&mut h, list(0, 4096));
    assert_eq!(r.status, st::OK);
    let whole: Vec<u8> = [
        &2u64.to_be_bytes()[..],
        &[0, 0, 0, 2],
        &[0, 0, 0, 1, b'a', 0, 0, 0],
        &[0, 0, 0, 2, b'b', b'b', 0, 0],
        &[0, 0, 0, 1],
    ]
    .concat();
    assert_eq!(r.last, whole);
    // From cookie 1: the second name; at the end of the list: BAD_COOKIE.
    let r = on_f(&mut h, list(1, 4096));
    let rest: Vec<u8> = [
        &2u64.to_be_bytes()[..],
        &[0, 0, 0, 1, 0, 0, 0, 2, b'b', b'b', 0, 0, 0, 0, 0, 1],
    ]
    .concat();
    assert_eq!((r.status, r.last), (st::OK, rest));
    assert_eq!(on_f(&mut h, list(2, 4096)).status, st::BAD_COOKIE);
    assert_eq!(on_f(&mut h, list(9, 4096)).status, st::BAD_COOKIE);
    // `lxa_maxcount` counts the whole result (16 octets besides the names): room for the
    // first name only, `eof` false and the cookie of the next; no room for one: TOOSMALL.
    let r = on_f(&mut h, list(0, 16 + 8));
    let first: Vec<u8> = [
        &1u64.to_be_bytes()[..],
        &[0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 0, 0, 0, 0],
    ]
    .concat();
    assert_eq!((r.status, r.last), (st::OK, first));
    assert_eq!(on_f(&mut h, list(0, 16 + 7)).status, st::TOOSMALL);
    assert_eq!(on_f(&mut h, list(0, 8)).status, st::TOOSMALL);
    // REMOVEXATTR: the change info; then the name is gone.
    let r = on_f(&mut h, remove(b"a"));
    assert_eq!(r.status, st::OK);
    assert_eq!(cinfo(&r.last).0, 1);
    assert_eq!(on_f(&mut h, get(b"a")).status, NOXATTR);
    assert_eq!(on_f(&mut h, remove(b"a")).status, NOXATTR);
    // An object without any: an empty list at cookie 0.
    let root = h.root();
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), list(0, 4096)]);
    let empty: Vec<u8> = [&0u64.to_be_bytes()[..], &[0, 0, 0, 0, 0, 0, 0, 1]].concat();
    assert_eq!((r.status, r.last), (st::OK, empty));
}

#[test]
fn rejects_bad_names_values_options_and_read_only_exports() {
    let mut h = v42_as("rw,no_root_squash", 0);
    h.create_in_root(b"f");
    assert_eq!(on_f(&mut h, set(0, b"", b"v")).status, st::INVAL);
    assert_eq!(on_f(&mut h, set(0, b"a\0b", b"v")).status, st::INVAL);
    assert_eq!(on_f(&mut h, get(b"")).status, st::INVAL);
    let long = [b'n'; 251];
    assert_eq!(on_f(&mut h, set(0, &long, b"v")).status, st::NAMETOOLONG);
    assert_eq!(on_f(&mut h, get(&long)).status, st::NAMETOOLONG);
    assert_eq!(on_f(&mut h, set(0, &long[..250], b"v")).status, st::OK);
    assert_eq!(on_f(&mut h, set(3, b"a", b"v")).status, st::INVAL);
    let big = vec![1u8; 65537];
    assert_eq!(on_f(&mut h, set(0, b"a", &big)).status, XATTR2BIG);
    assert_eq!(on_f(&mut h, set(0, b"a", &big[..65536])).status, st::OK);
    // A value cut short: BADXDR.
    let cut = A::op(op::SETXATTR).u32(0).opaque(b"a").u32(100);
    assert_eq!(on_f(&mut h, cut).status, st::BADXDR);
    // A read-only export: reads answer, changes ROFS.
    let mut ro = v42_as("ro,no_root_squash", 0);
    let root = ro.root();
    assert_eq!(
        ro.raw(&[A::op(op::PUTFH).opaque(&root), list(0, 4096)])
            .status,
        st::OK
    );
    let r = ro.raw(&[A::op(op::PUTFH).opaque(&root), set(0, b"a", b"v")]);
    assert_eq!(r.status, st::ROFS);
    let r = ro.raw(&[A::op(op::PUTFH).opaque(&root), remove(b"a")]);
    assert_eq!(r.status, st::ROFS);
    // Minor version 1 has no such operations.
    let mut one = H::new("rw,no_root_squash");
    let root = one.root();
    for n in [op::GETXATTR, op::SETXATTR, op::LISTXATTRS, op::REMOVEXATTR] {
        let r = one.raw(&[A::op(op::PUTFH).opaque(&root), A::op(n)]);
        assert_eq!(r.status, st::OP_ILLEGAL, "operation {n} in minor version 1");
    }
}

/// GETATTR of the root's word-2 attribute `bit` (64 + `bit`) and `supported_attrs`: (the
/// attribute's value, whether `supported_attrs` holds it).
fn word2(h: &mut H, bit: u32) -> (Option<u32>, bool) {
    let root = h.root();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::GETATTR).u32(3).u32(1).u32(0).u32(1 << bit),
    ]);
    assert_eq!(r.status, st::OK);
    let w: Vec<u32> = r
        .last
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect();
    // bitmap4, then attr_vals: supported_attrs (a bitmap4), the attribute.
    let n = w[0] as usize;
    let vals = &w[n + 2..];
    let sup = &vals[1..1 + vals[0] as usize];
    let has = sup.len() > 2 && sup[2] & (1 << bit) != 0;
    let value = (n > 2 && w[3] & (1 << bit) != 0).then(|| vals[1 + vals[0] as usize]);
    (value, has)
}

/// `xattr_support` (attribute 82).
fn xattr_support(h: &mut H) -> (Option<u32>, bool) {
    word2(h, 82 - 64)
}

#[test]
fn accepts_change_attr_type_by_store_in_minor_version_2_only() {
    // The memory store's stamps only grow: NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR (0).
    let mut h = v42_as("rw,no_root_squash", 0);
    assert_eq!(word2(&mut h, 79 - 64), (Some(0), true));
    let mut one = H::new("rw,no_root_squash");
    assert_eq!(word2(&mut one, 79 - 64), (None, false));
    // The dir: store's change is the host's ctime: NFS4_CHANGE_TYPE_IS_TIME_METADATA (3).
    let dir = std::env::temp_dir().join(format!("v42-cat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = std::sync::Arc::new(crate::nfs::store::dir::DirStore::open(&dir).unwrap());
    let (srv, now, store) =
        super::tests::server_on("rw,no_root_squash", Limits::default(), None, store);
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let mut d = H::on_minor(srv, now, store, b"client-d", auth_sys(0, 0), peer, 2);
    assert_eq!(word2(&mut d, 79 - 64), (Some(3), true));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accepts_xattr_support_and_access_bits_in_minor_version_2_only() {
    let mut h = v42_as("rw,no_root_squash", 0);
    assert_eq!(xattr_support(&mut h), (Some(1), true));
    let mut one = H::new("rw,no_root_squash");
    assert_eq!(xattr_support(&mut one), (None, false));
    // The root directory (mode 0755, root's) for another user: XAREAD and XALIST granted,
    // XAWRITE not; the owner: all three. Minor version 1: the bits are not supported.
    let mut user = v42_as("rw,no_root_squash", 1000);
    let root = user.root();
    let r = user.raw(&[A::op(op::PUTFH).opaque(&root), A::op(op::ACCESS).u32(0x1ff)]);
    assert_eq!(r.status, st::OK);
    let w = |b: &[u8], i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    assert_eq!((w(&r.last, 0), w(&r.last, 4)), (0x1ff, 0x40 | 0x100 | 0x03));
    let root = h.root();
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), A::op(op::ACCESS).u32(0x1c0)]);
    assert_eq!((w(&r.last, 0), w(&r.last, 4)), (0x1c0, 0x1c0));
    let root = one.root();
    let r = one.raw(&[A::op(op::PUTFH).opaque(&root), A::op(op::ACCESS).u32(0x1ff)]);
    assert_eq!((w(&r.last, 0), w(&r.last, 4)), (0x3f, 0x1f));
    // On a read-only export XAWRITE is refused as MODIFY is.
    let mut ro = v42_as("ro,no_root_squash", 0);
    let root = ro.root();
    let r = ro.raw(&[A::op(op::PUTFH).opaque(&root), A::op(op::ACCESS).u32(0x1c0)]);
    assert_eq!((w(&r.last, 0), w(&r.last, 4)), (0x1c0, 0x140));
}
