//! Unit tests of OPEN's claim types and argument checks (RFC 8881 §18.16): CLAIM_FH opens the
//! current file handle, the claims this server does not take are NFS4ERR_NOTSUPP, a claim
//! outside the union and share bits outside their range NFS4ERR_INVAL. (CLAIM_NULL is in
//! `tests_ops.rs`, CLAIM_PREVIOUS in `tests_grace.rs`, CLAIM_DELEGATE_CUR and
//! CLAIM_DELEG_CUR_FH in `tests_deleg.rs`.)
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_open`.
//! Recovery: a failure names the claim and the status seen.

use std::sync::Arc;

use super::tests::{auth_sys, open_create, A, H};
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
