//! Unit tests of OPEN's claim types and argument checks (RFC 8881 §18.16): CLAIM_FH opens the
//! current file handle, the claims this server does not take are NFS4ERR_NOTSUPP, a claim
//! outside the union and share bits outside their range NFS4ERR_INVAL. (CLAIM_NULL is in
//! `tests_ops.rs`, CLAIM_PREVIOUS in `tests_grace.rs`, CLAIM_DELEGATE_CUR and
//! CLAIM_DELEG_CUR_FH in `tests_deleg.rs`.)
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_open`.
//! Recovery: a failure names the claim and the status seen.

use std::sync::Arc;

use super::attrs::fa;
use super::tests::{auth_sys, open_create, open_how, A, H};
use super::tests_view::View;
use super::xdr::st;
use crate::nfs::v4::op;

/// OPEN with `access` / `deny`, no create, for claim `claim` with its body `body`.
fn open_claim(clientid: u64, access: u32, deny: u32, claim: u32, body: A) -> A {
    let mut a = A::op(op::OPEN)
        .u32(0)
        .u32(access)
        .u32(deny)
        .u64(clientid)
        .opaque(b"owner-2")
        .u32(0) // OPEN4_NOCREATE
        .u32(claim);
    a.0.extend_from_slice(&body.0);
    a
}

#[test]
fn accepts_claim_fh_opening_the_current_file() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    h.create_in_root(b"f");
    let fh_f = [
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
    ];
    let mut ops = fh_f.to_vec();
    ops.push(open_claim(h.clientid, 1, 0, 4, A::default()));
    let r = h.raw(&ops);
    assert_eq!(r.status, st::OK, "CLAIM_FH");
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    assert_eq!(h.srv.state().opens.len(), 2, "an open state of its own");
    // Its stateid reads the file.
    let mut ops = fh_f.to_vec();
    ops.push(A::op(op::READ).fixed(&sid).u64(0).u32(10));
    assert_eq!(h.status(&ops), st::OK);
    // CLAIM_FH of a directory: NFS4ERR_ISDIR.
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_claim(h.clientid, 1, 0, 4, A::default()),
    ]);
    assert_eq!(r.status, st::ISDIR);
}

#[test]
fn rejects_claims_and_share_bits_it_does_not_take() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    h.create_in_root(b"f");
    let cases = [
        // CLAIM_DELEGATE_PREV (a component name) and CLAIM_DELEG_PREV_FH: not taken.
        (1, 0, 3, A::default().opaque(b"f"), st::NOTSUPP),
        (1, 0, 6, A::default(), st::NOTSUPP),
        // A claim outside `open_claim4`.
        (1, 0, 7, A::default(), st::INVAL),
        // Share access none, or deny past DENY_BOTH.
        (0, 0, 4, A::default(), st::INVAL),
        (1, 4, 4, A::default(), st::INVAL),
    ];
    for (access, deny, claim, body, want) in cases {
        let r = h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            A::op(op::LOOKUP).opaque(b"f"),
            open_claim(h.clientid, access, deny, claim, body),
        ]);
        assert_eq!(r.status, want, "claim {claim} access {access} deny {deny}");
    }
    assert_eq!(h.srv.state().opens.len(), 1, "nothing opened");
}

/// OPEN finds out whether it created the file by a LOOKUP before its create; a file another
/// user made in between is then taken for a new one. A file OPEN made is opened whatever its
/// mode says only for its owner (Linux nfsd's NFSD_MAY_OWNER_OVERRIDE for `op_created`), so
/// such a file is checked as any other: NFS4ERR_ACCESS, no open state.
#[test]
fn rejects_an_open_of_a_file_another_user_made_meanwhile_without_access() {
    use crate::nfs::identity::Cred;
    use crate::nfs::store::Store;
    use crate::nfs::types::{CreateHow, Sattr3};
    let h = View::made_meanwhile(b"f").serve_after(|s| {
        let root = s.root();
        let open = Sattr3 {
            mode: Some(0o777),
            ..Sattr3::default()
        };
        s.setattr(&Cred::ROOT, &root, &open, None)
            .expect("chmod 0777");
        let private = CreateHow::Guarded(Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        });
        let alice = Cred::with_groups(1000, 1000, &[]);
        s.create(&alice, &root, b"f", &private)
            .expect("alice's file");
    });
    let mut bob = H::on(
        Arc::clone(&h.srv),
        Arc::clone(&h.now),
        Arc::clone(&h.store),
        b"bob",
        auth_sys(2000, 2000),
    );
    let root = bob.root();
    let r = bob.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(bob.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::ACCESS, "bob may not open alice's 0600 file");
}

/// OPEN EXCLUSIVE4_1 of `name` with verifier `verf` and `cva_attrs` `mask` / `vals`.
fn open_excl41(clientid: u64, name: &[u8], verf: &[u8; 8], mask: [u32; 3], vals: A) -> A {
    let how = A::default()
        .u32(3) // EXCLUSIVE4_1
        .fixed(verf)
        .u32(3)
        .u32(mask[0])
        .u32(mask[1])
        .u32(mask[2])
        .opaque(&vals.0);
    open_how(clientid, how, name)
}

/// The `attrset` of an OPEN4resok (after the stateid, `change_info4` and `rflags`), as three
/// words.
fn attrset(b: &[u8]) -> [u32; 3] {
    let mut r = rpcrdma_engine::xdr::XdrReader::new(&b[40..]);
    let n = r.get_u32().expect("count");
    let mut w = [0; 3];
    for x in w.iter_mut().take(n as usize) {
        *x = r.get_u32().expect("word");
    }
    w
}

/// The attribute values GETATTR of `want` returns for the current file (bitmap skipped).
fn getattr_vals(h: &mut H, lead: &[A], want: [u32; 3]) -> Vec<u8> {
    let mut ops = lead.to_vec();
    ops.push(
        A::op(op::GETATTR)
            .u32(3)
            .u32(want[0])
            .u32(want[1])
            .u32(want[2]),
    );
    let r = h.raw(&ops);
    assert_eq!(r.status, st::OK, "GETATTR");
    let mut x = rpcrdma_engine::xdr::XdrReader::new(&r.last);
    let n = x.get_u32().expect("bitmap");
    x.skip(4 * n as usize).expect("words");
    x.get_opaque(4096).expect("attr_vals").to_vec()
}

/// `suppattr_exclcreat` (REQUIRED in NFSv4.1, RFC 8881 §5.6) names what EXCLUSIVE4_1 sets:
/// size, mode, owner, owner_group (the times hold the verifier); the Linux client sends only
/// those in `cva_attrs`, and SETATTRs the rest after the OPEN.
#[test]
fn accepts_exclusive4_1_setting_its_attributes_once_as_suppattr_exclcreat_says() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let putroot = [A::op(op::PUTFH).opaque(&root)];
    let supported = getattr_vals(&mut h, &putroot, [1 << fa::SUPPORTED_ATTRS, 0, 0]);
    assert_eq!(&supported[..4], &3u32.to_be_bytes(), "three words");
    let word2 = u32::from_be_bytes(supported[12..16].try_into().unwrap());
    assert_ne!(word2 & 1 << (fa::SUPPATTR_EXCLCREAT - 64), 0, "listed");
    let excl = getattr_vals(&mut h, &putroot, [0, 0, 1 << (fa::SUPPATTR_EXCLCREAT - 64)]);
    let mode_owner =
        (1 << (fa::MODE - 32)) | (1 << (fa::OWNER - 32)) | (1 << (fa::OWNER_GROUP - 32));
    let want: Vec<u8> = [2, 1 << fa::SIZE, mode_owner] // bitmap4 without its trailing zero
        .iter()
        .flat_map(|w: &u32| w.to_be_bytes())
        .collect();
    assert_eq!(excl, want, "size, mode, owner, owner_group");

    let mode = [0, 1 << (fa::MODE - 32), 0];
    let verf = *b"verf4_1!";
    let open = open_excl41(h.clientid, b"x", &verf, mode, A::default().u32(0o640));
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), open.clone()]);
    assert_eq!(r.status, st::OK, "EXCLUSIVE4_1");
    assert_eq!(attrset(&r.last), mode, "attrset: the mode");
    let file = [
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"x"),
    ];
    let mode_of = |h: &mut H| getattr_vals(h, &file, mode);
    assert_eq!(
        mode_of(&mut h),
        0o640u32.to_be_bytes(),
        "set with the create"
    );
    // The retransmission finds the file its first call made: the same attrset.
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), open]);
    assert_eq!(r.status, st::OK, "retransmission");
    assert_eq!(attrset(&r.last), mode);
    let other = open_excl41(h.clientid, b"x", b"other!!!", mode, A::default().u32(0o600));
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), other]);
    assert_eq!(r.status, st::EXIST, "another verifier");
    assert_eq!(mode_of(&mut h), 0o640u32.to_be_bytes(), "unchanged");
}

#[test]
fn rejects_times_in_exclusive4_1_attributes_as_not_supported_there() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let mtime = [0, 1 << (fa::TIME_MODIFY_SET - 32), 0];
    let open = open_excl41(h.clientid, b"t", b"verifier", mtime, A::default().u32(0));
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), open]);
    assert_eq!(r.status, st::ATTRNOTSUPP);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"t"),
    ]);
    assert_eq!(r.status, st::NOENT, "nothing made");
}
