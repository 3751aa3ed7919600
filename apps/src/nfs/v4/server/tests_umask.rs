//! Unit tests of NFSv4.2's `mode_umask` attribute (RFC 8275) on the memory store: listed in
//! `supported_attrs` and `suppattr_exclcreat` of minor version 2 only; CREATE and OPEN
//! (UNCHECKED4, GUARDED4, EXCLUSIVE4_1) applying the umask, their `attrset` naming it; its
//! refusals: SETATTR, with `mode`, GETATTR (write-only), minor version 1. What a directory's
//! default ACL does instead is the store suite's (`store::tests::umask`, both stores).
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the step and the status seen.

use std::net::{IpAddr, Ipv4Addr};

use super::attrs::fa;
use super::state::Limits;
use super::tests::{auth_sys, open_how, server, A, H};
use super::xdr::st;
use crate::nfs::v4::op;

/// A client of minor version `minor`, as root, on a fresh read-write export.
fn client(minor: u32) -> H {
    let (srv, now, store) = server("rw,no_root_squash", Limits::default());
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    H::on_minor(srv, now, store, b"client-u", auth_sys(0, 0), peer, minor)
}

/// The `mode_umask` bit in a bitmap's third word.
const MU: u32 = 1 << (fa::MODE_UMASK - 64);
/// The `mode` bit in a bitmap's second word.
const MODE: u32 = 1 << (fa::MODE - 32);

/// A `fattr4` of three bitmap words and `vals`, appended to `a`.
fn fattr(a: A, words: [u32; 3], vals: &[u32]) -> A {
    let v: Vec<u8> = vals.iter().flat_map(|x| x.to_be_bytes()).collect();
    a.u32(3)
        .u32(words[0])
        .u32(words[1])
        .u32(words[2])
        .opaque(&v)
}

/// `mode_umask4 { mu_mode, mu_umask }` as a `fattr4`.
fn mode_umask(a: A, mode: u32, umask: u32) -> A {
    fattr(a, [0, 0, MU], &[mode, umask])
}

/// The three words of the bitmap at the start of `b`.
fn bitmap_at(b: &[u8]) -> [u32; 3] {
    let w = |i: usize| u32::from_be_bytes(b[4 * i..4 * i + 4].try_into().expect("word"));
    let n = w(0) as usize;
    [0, 1, 2].map(|i| if i < n { w(1 + i) } else { 0 })
}

/// The mode of `name` in the root.
fn mode_of(h: &mut H, name: &[u8]) -> u32 {
    let root = h.root();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(name),
        A::op(op::GETATTR).u32(2).u32(0).u32(MODE),
    ]);
    assert_eq!(r.status, st::OK, "GETATTR of {name:?}");
    // bitmap4 (3 words: count, two), attr_vals length, mode
    u32::from_be_bytes(r.last[16..20].try_into().expect("mode"))
}

/// The root's `supported_attrs` and `suppattr_exclcreat`, third words.
fn word2_lists(h: &mut H) -> (u32, u32) {
    let root = h.root();
    let mut out = [0u32; 2];
    for (i, bit) in [fa::SUPPORTED_ATTRS, fa::SUPPATTR_EXCLCREAT]
        .into_iter()
        .enumerate()
    {
        let want = [1u32 << (bit % 32)];
        let r = h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            A::op(op::GETATTR)
                .u32(3)
                .u32(if bit < 32 { want[0] } else { 0 })
                .u32(0)
                .u32(if bit >= 64 { want[0] } else { 0 }),
        ]);
        assert_eq!(r.status, st::OK);
        let n = u32::from_be_bytes(r.last[0..4].try_into().expect("n")) as usize;
        // Past the reply's bitmap and the attr_vals length: the value, itself a bitmap4.
        out[i] = bitmap_at(&r.last[4 * (n + 2)..])[2];
    }
    (out[0], out[1])
}

#[test]
fn accepts_mode_umask_listed_in_minor_version_2_only() {
    let (sup, excl) = word2_lists(&mut client(2));
    assert!(sup & MU != 0 && excl & MU != 0, "4.2: {sup:#x} {excl:#x}");
    let (sup, excl) = word2_lists(&mut client(1));
    assert!(sup & MU == 0 && excl & MU == 0, "4.1: {sup:#x} {excl:#x}");
}

#[test]
fn accepts_create_and_open_applying_the_umask() {
    let mut h = client(2);
    let root = h.root();
    // CREATE of a directory: 0777 less 022; attrset names mode_umask, not mode.
    let create = mode_umask(A::op(op::CREATE).u32(2).opaque(b"d"), 0o777, 0o022);
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), create]);
    assert_eq!(r.status, st::OK, "CREATE");
    assert_eq!(bitmap_at(&r.last[20..]), [0, 0, MU], "CREATE attrset");
    assert_eq!(mode_of(&mut h, b"d"), 0o755);
    // OPEN UNCHECKED4 and GUARDED4.
    for (how, name, mode, umask, want) in [
        (0, &b"u"[..], 0o666, 0o027, 0o640),
        (1, &b"g"[..], 0o644, 0o002, 0o644),
    ] {
        let how = mode_umask(A::default().u32(how), mode, umask);
        let r = h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_how(h.clientid, how, name),
        ]);
        assert_eq!(r.status, st::OK, "OPEN of {name:?}");
        // OPEN4resok: stateid, change_info4, rflags, then attrset.
        assert_eq!(bitmap_at(&r.last[40..]), [0, 0, MU], "OPEN attrset");
        assert_eq!(mode_of(&mut h, name), want, "{name:?}");
    }
    // EXCLUSIVE4_1 carries it in cva_attrs (suppattr_exclcreat lists it); a retransmission
    // finds the same file.
    let how = || mode_umask(A::default().u32(3).fixed(b"verifier"), 0o640, 0o077);
    for _ in 0..2 {
        let r = h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_how(h.clientid, how(), b"x"),
        ]);
        assert_eq!(r.status, st::OK, "OPEN EXCLUSIVE4_1");
        assert_eq!(bitmap_at(&r.last[40..]), [0, 0, MU], "EXCLUSIVE4_1 attrset");
        assert_eq!(mode_of(&mut h, b"x"), 0o600);
    }
}

#[test]
fn rejects_mode_umask_outside_a_creation_with_mode_or_in_minor_version_1() {
    let mut h = client(2);
    let root = h.root();
    let sid = h.create_in_root(b"f");
    let put = || A::op(op::PUTFH).opaque(&root);
    // SETATTR: only creations take it (RFC 8275).
    let setattr = mode_umask(A::op(op::SETATTR).fixed(&sid), 0o600, 0);
    let r = h.raw(&[put(), A::op(op::LOOKUP).opaque(b"f"), setattr]);
    assert_eq!(r.status, st::INVAL, "SETATTR");
    assert_eq!(mode_of(&mut h, b"f"), 0o644, "unchanged");
    // With mode as well.
    let both = fattr(
        A::op(op::CREATE).u32(2).opaque(b"d"),
        [0, MODE, MU],
        &[0o700, 0o700, 0],
    );
    assert_eq!(
        h.raw(&[put(), both]).status,
        st::INVAL,
        "mode and mode_umask"
    );
    // Write-only: GETATTR asking for it.
    let r = h.raw(&[put(), A::op(op::GETATTR).u32(3).u32(0).u32(0).u32(MU)]);
    assert_eq!(r.status, st::INVAL, "GETATTR");
    // A value cut short.
    let short = fattr(A::op(op::CREATE).u32(2).opaque(b"e"), [0, 0, MU], &[0o700]);
    assert_eq!(
        h.raw(&[put(), short]).status,
        st::BADXDR,
        "short mode_umask4"
    );
    // Minor version 1 does not know the attribute; GETATTR leaves it out.
    let mut h = client(1);
    let root = h.root();
    let create = mode_umask(A::op(op::CREATE).u32(2).opaque(b"d"), 0o777, 0o022);
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), create]);
    assert_eq!(r.status, st::ATTRNOTSUPP, "4.1 CREATE");
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::GETATTR).u32(3).u32(0).u32(0).u32(MU),
    ]);
    assert_eq!(
        (r.status, bitmap_at(&r.last)),
        (st::OK, [0, 0, 0]),
        "4.1 GETATTR"
    );
}
