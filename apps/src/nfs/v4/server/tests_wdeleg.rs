//! Unit tests of NFSv4.1 write delegations on virtual time: granted to a write OPEN when no
//! other client has the file open (and only when turned on), written through, recalled by
//! another client's OPEN for read, by its GETATTR of the size and by its READ with the
//! anonymous stateid, returned.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_wdeleg`.
//! Recovery: a failure names the operation and the status seen.

use std::sync::Arc;

use super::deleg::Callbacks;
use super::deleg::OPEN_DELEGATE_WRITE;
use super::state::Limits;
use super::tests::{auth_sys, open_create, server_cb, A, H};
use super::tests_grace::{recalls_on, Conns};
use super::xdr::st;
use crate::nfs::v4::{op, Op, OpResult};

/// The delegation type and stateid of an OPEN4resok.
fn deleg_of(ok: &[u8]) -> (u32, [u8; 16]) {
    // After the stateid (16), change_info4 (20), rflags (4) and the attrset bitmap.
    let words = u32::from_be_bytes(ok[40..44].try_into().unwrap()) as usize;
    let at = 44 + 4 * words;
    let t = u32::from_be_bytes(ok[at..at + 4].try_into().unwrap());
    let sid = ok
        .get(at + 4..at + 20)
        .map_or([0; 16], |s| s.try_into().unwrap());
    (t, sid)
}

/// Two clients of a server granting write delegations when `on`; client-a made `f` with an
/// OPEN for read and write. Returns the callbacks, a, b, the root handle and a's OPEN4resok.
fn setup(on: bool) -> (Arc<Conns>, H, H, Vec<u8>, Vec<u8>) {
    let conns = Arc::new(Conns::default());
    let cbs: Arc<dyn Callbacks> = Arc::clone(&conns) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    srv.set_write_delegations(on);
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let b = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    (conns, a, b, root, r.last)
}

#[test]
fn accepts_a_write_delegation_recalled_by_another_clients_read_open() {
    let (conns, mut a, mut b, root, ok) = setup(true);
    let (t, deleg) = deleg_of(&ok);
    assert_eq!(t, OPEN_DELEGATE_WRITE, "no one else has f open");
    let write = A::op(op::WRITE)
        .fixed(&deleg)
        .u64(0)
        .u32(2)
        .opaque(b"cached");
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        write,
    ]);
    assert_eq!(r.status, st::OK, "WRITE through the write delegation");
    let open_b = Op::Open {
        clientid: b.clientid,
        owner: b"b",
        access: 1,
        name: "f",
    };
    assert_eq!(b.call(&[Op::PutFh(&root), open_b]).status, st::DELAY);
    assert_eq!(recalls_on(&conns, None), vec![deleg]);
    assert_eq!(b.call(&[Op::PutFh(&root), open_b]).status, st::DELAY);
    assert_eq!(recalls_on(&conns, None).len(), 1, "recalled once");
    let r = a.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::DelegReturn(deleg)]);
    assert_eq!(r.status, st::OK);
    let r = b.call(&[Op::PutFh(&root), open_b]);
    assert_eq!(r.status, st::OK, "{r:?}");
}

#[test]
fn accepts_a_recall_on_another_clients_getattr_of_the_size() {
    let (conns, mut a, mut b, root, ok) = setup(true);
    let (_, deleg) = deleg_of(&ok);
    let r = a.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::GetFh]);
    let Some(OpResult::Fh(f)) = r.find(op::GETFH).map(|o| o.result.clone()) else {
        panic!("{r:?}");
    };
    let type_only = A::op(op::GETATTR).u32(1).u32(1 << 1);
    assert_eq!(
        b.status(&[A::op(op::PUTFH).opaque(&f), type_only]),
        st::OK,
        "the type does not conflict"
    );
    let r = a.call(&[Op::PutFh(&f), Op::GetAttrTypeSize]);
    assert_eq!(r.status, st::OK, "the holder's own GETATTR");
    assert!(recalls_on(&conns, None).is_empty());
    let r = b.call(&[Op::PutFh(&f), Op::GetAttrTypeSize]);
    assert_eq!(r.status, st::DELAY, "the size may be in the holder's cache");
    assert_eq!(recalls_on(&conns, None), vec![deleg]);
}

#[test]
fn rejects_write_delegations_when_off_or_the_file_is_open_elsewhere() {
    let (_, _, _, _, ok) = setup(false);
    assert_eq!(deleg_of(&ok).0, 0, "off: no delegation for a write OPEN");
    let (_, mut a, mut b, root, ok) = setup(true);
    let (_, deleg) = deleg_of(&ok);
    let r = a.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::DelegReturn(deleg)]);
    assert_eq!(r.status, st::OK);
    let open_b = Op::Open {
        clientid: b.clientid,
        owner: b"b",
        access: 1,
        name: "f",
    };
    assert_eq!(b.call(&[Op::PutFh(&root), open_b]).status, st::OK);
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    assert_eq!(deleg_of(&r.last).0, 0, "client-b has f open");
}

#[test]
fn accepts_a_recall_on_another_clients_read_with_a_special_stateid() {
    // The holder may have written data it has not sent: another client's READ with the
    // anonymous stateid (no OPEN recalled the delegation first) waits for the return.
    let (conns, mut a, mut b, root, ok) = setup(true);
    let (_, deleg) = deleg_of(&ok);
    let r = a.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::GetFh]);
    let Some(OpResult::Fh(f)) = r.find(op::GETFH).map(|o| o.result.clone()) else {
        panic!("{r:?}");
    };
    let read = || A::op(op::READ).fixed(&[0; 16]).u64(0).u32(10);
    assert_eq!(
        a.status(&[A::op(op::PUTFH).opaque(&f), read()]),
        st::OK,
        "the holder"
    );
    assert!(recalls_on(&conns, None).is_empty());
    assert_eq!(b.status(&[A::op(op::PUTFH).opaque(&f), read()]), st::DELAY);
    assert_eq!(recalls_on(&conns, None), vec![deleg]);
    let r = a.call(&[Op::PutFh(&f), Op::DelegReturn(deleg)]);
    assert_eq!(r.status, st::OK);
    assert_eq!(b.status(&[A::op(op::PUTFH).opaque(&f), read()]), st::OK);
}
