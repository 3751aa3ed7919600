//! Unit tests of SECINFO (RFC 8881 §18.29) and SECINFO_NO_NAME (§18.45): the flavors the export
//! allows the caller, in the export's order; both consume the current file handle
//! (§2.6.3.1.1.8); neither returns NFS4ERR_WRONGSEC, nor does the put-filehandle operation
//! before them (§2.6.3.1.1.5); names are checked as LOOKUP checks them.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_secinfo`.
//! Recovery: a failure names the operations and the status seen.

use super::tests::{open_create, Raw, A, H};
use super::tests_pseudo::setup as pseudo_setup;
use super::xdr::st;
use crate::nfs::v4::{op, Op, OpResult, SECINFO_STYLE4_CURRENT_FH, SECINFO_STYLE4_PARENT};

fn putfh(fh: &[u8]) -> A {
    A::op(op::PUTFH).opaque(fh)
}

fn lookup(name: &[u8]) -> A {
    A::op(op::LOOKUP).opaque(name)
}

fn secinfo(name: &[u8]) -> A {
    A::op(op::SECINFO).opaque(name)
}

fn no_name(style: u32) -> A {
    A::op(op::SECINFO_NO_NAME).u32(style)
}

/// The flavors of a SECINFO4resok (`secinfo4<>` of AUTH_SYS / AUTH_NONE entries).
fn flavors(r: &Raw) -> Vec<u32> {
    assert_eq!(r.status, st::OK, "{:?}", r.results);
    let w: Vec<u32> = r
        .last
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(w[0] as usize, w.len() - 1, "the count and the entries");
    w[1..].to_vec()
}

/// A client of an export taking `opts`, with file `f` and directory `d` in its root.
fn setup(opts: &str) -> (H, Vec<u8>) {
    let mut h = H::new(opts);
    let root = h.root();
    assert_eq!(
        h.status(&[putfh(&root), open_create(h.clientid, b"f")]),
        st::OK
    );
    let mkdir = A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0);
    assert_eq!(h.status(&[putfh(&root), mkdir]), st::OK);
    (h, root)
}

#[test]
fn accepts_secinfo_by_name_with_the_export_flavors_in_order() {
    let (mut h, root) = setup("rw,no_root_squash,sec=none:sys");
    for name in [&b"f"[..], b"d"] {
        let r = h.raw(&[putfh(&root), secinfo(name)]);
        assert_eq!(flavors(&r), [0, 1], "AUTH_NONE then AUTH_SYS, as listed");
    }
    let (mut h, root) = setup("rw,no_root_squash,sec=sys:none");
    assert_eq!(flavors(&h.raw(&[putfh(&root), secinfo(b"f")])), [1, 0]);
    // Through the client codec.
    let r = h.call(&[Op::PutFh(&root), Op::SecInfo("d")]);
    assert_eq!(
        r.find(op::SECINFO).map(|o| o.result.clone()),
        Some(OpResult::SecInfo(vec![1, 0]))
    );
}

#[test]
fn accepts_secinfo_consuming_the_current_handle() {
    let (mut h, root) = setup("rw,no_root_squash");
    for next in [A::op(op::GETFH), lookup(b"d"), A::op(op::SAVEFH)] {
        let r = h.raw(&[putfh(&root), secinfo(b"d"), next]);
        assert_eq!(r.status, st::NOFILEHANDLE, "{:?}", r.results);
        assert_eq!(r.results.len(), 4);
    }
    // The saved handle is not touched.
    let ops = [
        putfh(&root),
        A::op(op::SAVEFH),
        secinfo(b"d"),
        A::op(op::RESTOREFH),
        A::op(op::GETFH),
    ];
    assert_eq!(h.status(&ops), st::OK);
}

#[test]
fn rejects_secinfo_of_a_missing_or_bad_name_and_outside_a_directory() {
    let (mut h, root) = setup("rw,no_root_squash");
    assert_eq!(h.status(&[putfh(&root), secinfo(b"nope")]), st::NOENT);
    assert_eq!(h.status(&[putfh(&root), secinfo(b"")]), st::INVAL);
    assert_eq!(
        h.status(&[putfh(&root), secinfo(&[b'x'; 256])]),
        st::NAMETOOLONG
    );
    for bad in [&b"."[..], b"..", b"a/b"] {
        assert_eq!(h.status(&[putfh(&root), secinfo(bad)]), st::BADNAME);
    }
    let r = h.raw(&[putfh(&root), lookup(b"f"), secinfo(b"x")]);
    assert_eq!(r.status, st::NOTDIR);
    assert_eq!(h.status(&[secinfo(b"f")]), st::NOFILEHANDLE);
    // A name whose arguments do not decode.
    let short = A::op(op::SECINFO).u32(8).u32(0);
    assert_eq!(h.status(&[putfh(&root), short]), st::BADXDR);
    // A failed SECINFO ends the COMPOUND with the handle as it was (nothing runs after it).
    let r = h.raw(&[putfh(&root), secinfo(b"nope"), A::op(op::GETFH)]);
    assert_eq!(r.results.len(), 3);
}

#[test]
fn accepts_secinfo_after_a_put_filehandle_of_another_flavor() {
    // RFC 8881 §2.6.3.1.1.5: neither the PUTFH nor the SECINFO returns NFS4ERR_WRONGSEC.
    let (mut h, root) = setup("rw,no_root_squash,sec=sys");
    let r = h.as_none(&[putfh(&root), secinfo(b"d")]);
    assert_eq!(flavors(&r), [1]);
    let r = h.as_none(&[A::op(op::PUTROOTFH), secinfo(b"f")]);
    assert_eq!(flavors(&r), [1]);
    // Still a lookup: a missing name is NFS4ERR_NOENT, not the flavors.
    let r = h.as_none(&[putfh(&root), secinfo(b"nope")]);
    assert_eq!(r.status, st::NOENT);
}

#[test]
fn accepts_secinfo_no_name_of_each_style() {
    let (mut h, root) = setup("rw,no_root_squash,sec=none:sys");
    let r = h.raw(&[putfh(&root), lookup(b"d"), no_name(SECINFO_STYLE4_PARENT)]);
    assert_eq!(flavors(&r), [0, 1]);
    let r = h.raw(&[
        putfh(&root),
        lookup(b"d"),
        no_name(SECINFO_STYLE4_CURRENT_FH),
    ]);
    assert_eq!(flavors(&r), [0, 1]);
    // PARENT of the root of the export mounted as `/`: there is none.
    let r = h.raw(&[putfh(&root), no_name(SECINFO_STYLE4_PARENT)]);
    assert_eq!(r.status, st::NOENT);
    // PARENT of a file: LOOKUPP's NFS4ERR_NOTDIR.
    let r = h.raw(&[putfh(&root), lookup(b"f"), no_name(SECINFO_STYLE4_PARENT)]);
    assert_eq!(r.status, st::NOTDIR);
    // Consumed after either style.
    for style in [SECINFO_STYLE4_CURRENT_FH, SECINFO_STYLE4_PARENT] {
        let ops = [putfh(&root), lookup(b"d"), no_name(style), A::op(op::GETFH)];
        assert_eq!(h.status(&ops), st::NOFILEHANDLE);
    }
    // A style outside the enum is NFS4ERR_INVAL; no style at all NFS4ERR_BADXDR.
    assert_eq!(h.status(&[putfh(&root), no_name(2)]), st::INVAL);
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::SECINFO_NO_NAME)]),
        st::BADXDR
    );
    assert_eq!(h.status(&[no_name(0)]), st::NOFILEHANDLE);
    // Through the client codec.
    let r = h.call(&[Op::PutFh(&root), Op::SecInfoNoName(0)]);
    assert_eq!(
        r.find(op::SECINFO_NO_NAME).map(|o| o.result.clone()),
        Some(OpResult::SecInfo(vec![0, 1]))
    );
}

/// `/srv/export` takes AUTH_NONE only, `/srv/sys` AUTH_SYS only, `/other/deep` both, in that
/// order; `/srv/hidden` names another client.
const EXPORTS: &str = "/srv/export 10.0.0.1(rw,no_root_squash,sec=none)\n\
                       /srv/sys 10.0.0.1(rw,sec=sys)\n\
                       /srv/hidden 10.9.9.9(rw,sec=none)\n\
                       /other/deep *(ro,sec=sys:none)\n";

#[test]
fn accepts_secinfo_in_a_pseudo_directory_of_an_export_of_another_flavor() {
    let (mut h, _) = pseudo_setup(EXPORTS);
    let srv = [A::op(op::PUTROOTFH), lookup(b"srv")];
    // LOOKUP into an export the AUTH_SYS caller may not use: NFS4ERR_WRONGSEC, then SECINFO
    // of the same name answers what it takes (the Linux client's recovery, RFC 8881 §2.6.3.1.2).
    let r = h.raw(&[srv[0].clone(), srv[1].clone(), lookup(b"export")]);
    assert_eq!(r.status, st::WRONGSEC);
    let r = h.raw(&[srv[0].clone(), srv[1].clone(), secinfo(b"export")]);
    assert_eq!(flavors(&r), [0]);
    let r = h.raw(&[srv[0].clone(), srv[1].clone(), secinfo(b"sys")]);
    assert_eq!(flavors(&r), [1]);
    // A pseudo directory: the flavors of the exports this client may see, each once.
    let r = h.raw(&[A::op(op::PUTROOTFH), secinfo(b"srv")]);
    assert_eq!(flavors(&r), [0, 1]);
    // An export this client may not see is not there.
    let r = h.raw(&[srv[0].clone(), srv[1].clone(), secinfo(b"hidden")]);
    assert_eq!(r.status, st::NOENT);
    let r = h.raw(&[A::op(op::PUTROOTFH), secinfo(b"nope")]);
    assert_eq!(r.status, st::NOENT);
    let r = h.raw(&[A::op(op::PUTROOTFH), secinfo(b"..")]);
    assert_eq!(r.status, st::BADNAME);
    // Consumed in the pseudo tree too.
    let r = h.raw(&[A::op(op::PUTROOTFH), secinfo(b"srv"), A::op(op::GETFH)]);
    assert_eq!(r.status, st::NOFILEHANDLE);
}

#[test]
fn accepts_secinfo_no_name_parent_across_the_export_boundary() {
    let (mut h, _) = pseudo_setup(EXPORTS);
    let other = [A::op(op::PUTROOTFH), lookup(b"other"), lookup(b"deep")];
    // PARENT of an export's root: the pseudo directory above it.
    let mut ops = other.to_vec();
    ops.push(no_name(SECINFO_STYLE4_PARENT));
    assert_eq!(flavors(&h.raw(&ops)), [0, 1]);
    let mut ops = other.to_vec();
    ops.push(no_name(SECINFO_STYLE4_CURRENT_FH));
    assert_eq!(flavors(&h.raw(&ops)), [1, 0], "the export's own order");
    // PARENT of the pseudo root: NFS4ERR_NOENT.
    let r = h.raw(&[A::op(op::PUTROOTFH), no_name(SECINFO_STYLE4_PARENT)]);
    assert_eq!(r.status, st::NOENT);
    let r = h.raw(&[
        A::op(op::PUTROOTFH),
        lookup(b"srv"),
        no_name(SECINFO_STYLE4_PARENT),
    ]);
    assert_eq!(flavors(&r), [0, 1]);
}

/// RFC 8881 §2.6.3.1.1.3: a put-filehandle operation followed by LOOKUP or LOOKUPP does not
/// return NFS4ERR_WRONGSEC itself; the LOOKUP or LOOKUPP does (whether or not the name
/// exists), as Linux nfsd leaves it to them (`need_wrongsec_check`, `OP_HANDLES_WRONGSEC`).
/// Followed by anything else, the put-filehandle operation returns it (§2.6.3.1.1.7).
#[test]
fn rejects_a_lookup_after_a_put_filehandle_of_another_flavor_on_the_lookup() {
    let (mut h, root) = setup("rw,no_root_squash,sec=sys");
    let d = h.raw(&[putfh(&root), lookup(b"d"), A::op(op::GETFH)]);
    assert_eq!(d.status, st::OK);
    let dfh = d.last[4..].to_vec();
    for name in [&b"d"[..], b"nope"] {
        let r = h.as_none(&[putfh(&root), lookup(name), A::op(op::GETFH)]);
        let want = [
            (op::SEQUENCE, st::OK),
            (op::PUTFH, st::OK),
            (op::LOOKUP, st::WRONGSEC),
        ];
        assert_eq!(r.results, want, "LOOKUP {name:?}");
    }
    let r = h.as_none(&[putfh(&dfh), A::op(op::LOOKUPP), A::op(op::GETFH)]);
    let want = [
        (op::SEQUENCE, st::OK),
        (op::PUTFH, st::OK),
        (op::LOOKUPP, st::WRONGSEC),
    ];
    assert_eq!(r.results, want);
    // Anything else after the PUTFH: the PUTFH's NFS4ERR_WRONGSEC.
    let r = h.as_none(&[putfh(&dfh), A::op(op::GETFH)]);
    assert_eq!(
        r.results,
        [(op::SEQUENCE, st::OK), (op::PUTFH, st::WRONGSEC)]
    );
    // The flavor the export takes: the same COMPOUNDs succeed.
    let r = h.raw(&[putfh(&dfh), A::op(op::LOOKUPP), A::op(op::GETFH)]);
    assert_eq!(r.status, st::OK);
}
