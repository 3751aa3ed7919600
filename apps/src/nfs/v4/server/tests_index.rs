//! Unit tests of the state index: OPEN, LOCK, LOCKT, GETATTR and CLOSE on one file look at
//! that file's states only, however many other files have states; the lease pass looks at
//! the clients only when one may be due; and after every kind of removal (LOCKU and
//! FREE_STATEID, OPEN_DOWNGRADE, CLOSE, DESTROY_CLIENTID, lease expiry, revocation) the index
//! holds exactly what the tables hold ([`H::send`] checks it after every COMPOUND).
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation, the status seen, or the records looked at.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rpcrdma_poller::CredBody;

use super::deleg::{Callbacks, Done};
use super::lock::DENIED;
use super::state::Limits;
use super::tests::{auth_sys, lock_new, open_create, open_existing, server_cb, A, H};
use super::xdr::st;
use crate::nfs::v4::{op, Op};

/// Answers every backward call (so that delegations are granted).
struct Answer;

impl Callbacks for Answer {
    fn call(&self, _: u64, _: u32, _: u32, _: &CredBody, _: Vec<u8>, done: Done) {
        done(true);
    }
}

fn sid(b: &[u8]) -> [u8; 16] {
    b[..16].try_into().unwrap()
}

fn on(root: &[u8], name: &[u8], a: A) -> Vec<A> {
    vec![
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(name),
        a,
    ]
}

fn addr(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// Clients a, b (10.0.0.1) and c (10.0.0.2) of one server answering callbacks; c holds
/// `unrelated` files each with an open and a lock state, and as many with a delegation.
fn busy(unrelated: usize) -> (H, H, H, Vec<u8>) {
    let cbs: Arc<dyn Callbacks> = Arc::new(Answer);
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let (s2, n2, st2) = (Arc::clone(&srv), Arc::clone(&now), Arc::clone(&store));
    let a = H::on(s2, n2, st2, b"client-a", auth_sys(0, 0));
    let (s2, n2, st2) = (Arc::clone(&srv), Arc::clone(&now), Arc::clone(&store));
    let b = H::on(s2, n2, st2, b"client-b", auth_sys(0, 0));
    let mut c = H::on_at(srv, now, store, b"client-c", auth_sys(0, 0), addr(2));
    let root = c.root();
    for i in 0..unrelated {
        let (u, r) = (format!("u{i}"), format!("r{i}"));
        let o = c.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_create(c.clientid, u.as_bytes()),
        ]);
        assert_eq!(o.status, st::OK, "OPEN {u}");
        let l = lock_new(c.clientid, &sid(&o.last), b"lc", true, 0, 10);
        assert_eq!(c.status(&on(&root, u.as_bytes(), l)), st::OK, "LOCK {u}");
        let o = c.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_create(c.clientid, r.as_bytes()),
        ]);
        let close = A::op(op::CLOSE).u32(0).fixed(&sid(&o.last));
        assert_eq!(c.status(&on(&root, r.as_bytes(), close)), st::OK);
        let read = open_existing(c.clientid, r.as_bytes(), 1);
        let o = c.raw(&[A::op(op::PUTFH).opaque(&root), read]);
        assert_eq!(o.status, st::OK, "read OPEN {r}");
    }
    {
        let s = c.srv.state();
        assert_eq!(s.opens.len(), 2 * unrelated);
        assert_eq!(s.locks.len(), unrelated);
        assert_eq!(s.delegs.len(), unrelated, "every read open delegated");
    }
    (a, b, c, root)
}

/// The records looked at by OPENs of `g` by a and b, a's LOCK, b's conflicting LOCK and
/// LOCKT, a GETATTR of g's size, a REMOVE of an unrelated name and a's CLOSE, with
/// `unrelated` other files holding states.
fn work_on_g(unrelated: usize) -> u64 {
    let (mut a, mut b, _c, root) = busy(unrelated);
    let before = a.srv.state().index.visits();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"g"),
    ]);
    assert_eq!(r.status, st::OK, "a's OPEN of g");
    let sa = sid(&r.last);
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(b.clientid, b"g", 3),
    ]);
    assert_eq!(r.status, st::OK, "b's OPEN of g");
    let sb = sid(&r.last);
    let l = lock_new(a.clientid, &sa, b"la", true, 0, 10);
    assert_eq!(a.status(&on(&root, b"g", l)), st::OK, "a's LOCK");
    let l = lock_new(b.clientid, &sb, b"lb", true, 5, 10);
    assert_eq!(b.status(&on(&root, b"g", l)), DENIED, "b's LOCK");
    let t = A::op(op::LOCKT)
        .u32(2)
        .u64(0)
        .u64(1)
        .u64(b.clientid)
        .opaque(b"lb");
    assert_eq!(b.status(&on(&root, b"g", t)), DENIED, "b's LOCKT");
    let size = A::op(op::GETATTR).u32(1).u32(1 << 4);
    assert_eq!(b.status(&on(&root, b"g", size)), st::OK, "GETATTR");
    let rm = A::op(op::REMOVE).opaque(b"nothing");
    let r = b.raw(&[A::op(op::PUTFH).opaque(&root), rm]);
    assert_eq!(r.status, st::NOENT, "REMOVE");
    let close = A::op(op::CLOSE).u32(0).fixed(&sa);
    assert_eq!(a.status(&on(&root, b"g", close)), st::OK, "a's CLOSE");
    let after = a.srv.state().index.visits();
    after - before
}

#[test]
fn accepts_open_lock_and_close_looking_at_their_files_states_only() {
    let alone = work_on_g(0);
    assert!(alone > 0, "the states of g were looked at");
    assert_eq!(
        work_on_g(120),
        alone,
        "records looked at with 360 states on 240 other files"
    );
}

#[test]
fn accepts_the_lease_pass_looking_at_clients_only_when_one_may_be_due() {
    let (mut a, mut b, _c, _) = busy(0);
    let before = a.srv.state().index.visits();
    // Both renew every 10 s for 80 s: no lease can run out, nothing is looked at.
    for _ in 0..8 {
        a.advance(10_000);
        assert_eq!(a.status(&[]), st::OK);
        assert_eq!(b.status(&[]), st::OK);
    }
    assert_eq!(a.srv.state().index.visits(), before, "16 SEQUENCEs");
    // c has been silent since it was made: past the lease it goes, in one pass.
    a.advance(11_000);
    assert_eq!(a.status(&[]), st::OK);
    let s = a.srv.state();
    assert_eq!(s.clients.len(), 2, "c expired");
    assert_eq!(
        s.index.visits() - before,
        3,
        "one pass over the three clients"
    );
    assert_eq!(s.index.sizes(), (0, 1), "only 10.0.0.1 has clients");
}

#[test]
fn accepts_the_index_following_every_removal() {
    let (mut a, mut b, mut c, root) = busy(2);
    let files = |h: &H| h.srv.state().index.sizes().0;
    assert_eq!(files(&a), 4);
    // OPEN, LOCK; LOCKU and FREE_STATEID of the lock; OPEN_DOWNGRADE; CLOSE.
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"g"),
    ]);
    let sa = sid(&r.last);
    let r = a.raw(&on(
        &root,
        b"g",
        lock_new(a.clientid, &sa, b"la", true, 0, 10),
    ));
    assert_eq!(r.status, st::OK);
    assert_eq!(files(&a), 5);
    let u = A::op(op::LOCKU)
        .u32(2)
        .u32(0)
        .fixed(&sid(&r.last))
        .u64(0)
        .u64(10);
    let r = a.raw(&on(&root, b"g", u));
    assert_eq!(r.status, st::OK);
    let free = A::op(op::FREE_STATEID).fixed(&sid(&r.last));
    assert_eq!(a.status(&[free]), st::OK);
    let down = A::op(op::OPEN_DOWNGRADE).fixed(&sa).u32(0).u32(1).u32(0);
    let r = a.raw(&on(&root, b"g", down));
    assert_eq!(r.status, st::OK);
    let close = A::op(op::CLOSE).u32(0).fixed(&sid(&r.last));
    assert_eq!(a.status(&on(&root, b"g", close)), st::OK);
    assert_eq!(files(&a), 4, "g holds nothing more");
    // b: an open with a lock state, then DESTROY_SESSION and DESTROY_CLIENTID.
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(b.clientid, b"h"),
    ]);
    let r = b.raw(&on(
        &root,
        b"h",
        lock_new(b.clientid, &sid(&r.last), b"lb", true, 0, 1),
    ));
    assert_eq!(r.status, st::OK);
    assert_eq!(files(&b), 5);
    assert_eq!(b.plain(&[Op::DestroySession(b.sid)]).status, st::OK);
    assert_eq!(b.plain(&[Op::DestroyClientId(b.clientid)]).status, st::OK);
    assert_eq!(files(&a), 4, "h went with b");
    // a opens r0 for write: c's delegation is recalled, not returned, revoked after the
    // lease, and freed.
    let w = open_existing(a.clientid, b"r0", 3);
    assert_eq!(a.status(&[A::op(op::PUTFH).opaque(&root), w]), st::DELAY);
    for ms in [50_000, 41_000] {
        a.advance(ms);
        assert_eq!(a.status(&[]), st::OK);
        assert_eq!(c.status(&[]), st::OK);
    }
    let revoked = {
        let s = a.srv.state();
        assert_eq!((s.delegs.len(), s.counters.revoked), (1, 1));
        s.clients[&c.clientid].revoked[0]
    };
    let mut d = [0u8; 16];
    d[3] = 1;
    d[4..].copy_from_slice(&revoked);
    assert_eq!(c.status(&[A::op(op::FREE_STATEID).fixed(&d)]), st::OK);
    assert_eq!(files(&a), 4, "c's open of r0 stays");
    // c falls silent and expires with its states.
    for _ in 0..2 {
        a.advance(50_000);
        assert_eq!(a.status(&[]), st::OK);
    }
    let s = a.srv.state();
    assert!(s.clients.len() == 1 && s.delegs.is_empty() && s.opens.is_empty());
    assert_eq!(
        s.index.sizes(),
        (0, 1),
        "nothing on any file, a's address only"
    );
    drop(s);
    a.srv.state().check_index();
}
