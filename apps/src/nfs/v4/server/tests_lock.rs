//! Unit tests of NFSv4.1 byte-range locks: LOCK / LOCKT / LOCKU between two clients, POSIX
//! conflicts with the NFS4ERR_DENIED description, range splitting, seqid bumps, release on
//! CLOSE and lease expiry, bad ranges and stateids, and the table bounds.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::sync::Arc;

use rpcrdma_engine::xdr::XdrReader;

use super::lock::DENIED;
use super::state::Limits;
use super::tests::{auth_sys, lock_new, lock_type, open_create, open_existing, server, A, H};
use super::xdr::st;
use crate::nfs::v4::op;

const W: bool = true;
const R: bool = false;

/// LOCK with an existing lock stateid.
fn lock_old(sid: &[u8; 16], write: bool, off: u64, len: u64) -> A {
    A::op(op::LOCK)
        .u32(lock_type(write))
        .u32(0)
        .u64(off)
        .u64(len)
        .u32(0)
        .fixed(sid)
        .u32(0)
}

fn lockt(clientid: u64, owner: &[u8], write: bool, off: u64, len: u64) -> A {
    A::op(op::LOCKT)
        .u32(lock_type(write))
        .u64(off)
        .u64(len)
        .u64(clientid)
        .opaque(owner)
}

fn locku(sid: &[u8; 16], off: u64, len: u64) -> A {
    A::op(op::LOCKU).u32(1).u32(0).fixed(sid).u64(off).u64(len)
}

fn sid(b: &[u8]) -> [u8; 16] {
    b[..16].try_into().unwrap()
}

fn seqid(s: &[u8; 16]) -> u32 {
    u32::from_be_bytes([s[0], s[1], s[2], s[3]])
}

/// Two clients of one server (limits `lim`), each with an open of `f`: (a, a's open stateid,
/// b, b's, the root handle).
fn two(lim: Limits) -> (H, [u8; 16], H, [u8; 16], Vec<u8>) {
    let (srv, now, store) = server("rw,no_root_squash", lim);
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let mut b = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    let sa = sid(&r.last);
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(b.clientid, b"f", 3),
    ]);
    assert_eq!(r.status, st::OK);
    let sb = sid(&r.last);
    (a, sa, b, sb, root)
}

fn on_f(root: &[u8], op: A) -> Vec<A> {
    vec![
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(b"f"),
        op,
    ]
}

#[test]
fn accepts_posix_conflicts_between_owners_with_the_denied_lock() {
    let (mut a, sa, mut b, sb, root) = two(Limits::default());
    let r = a.raw(&on_f(&root, lock_new(a.clientid, &sa, b"la", W, 0, 100)));
    assert_eq!(r.status, st::OK);
    assert_eq!(seqid(&sid(&r.last)), 1);
    let r = b.raw(&on_f(&root, lock_new(b.clientid, &sb, b"lb", R, 50, 10)));
    assert_eq!(r.status, DENIED);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(x.get_u64().unwrap(), 0, "offset");
    assert_eq!(x.get_u64().unwrap(), 100, "length");
    assert_eq!(x.get_u32().unwrap(), 2, "WRITE_LT");
    assert_eq!(x.get_u64().unwrap(), a.clientid);
    assert_eq!(x.get_opaque(1024).unwrap(), b"la");
    // Shared locks share; a write lock over a read lock conflicts.
    let r = b.raw(&on_f(&root, lock_new(b.clientid, &sb, b"lb", R, 100, 10)));
    assert_eq!(r.status, st::OK);
    let la = a.raw(&on_f(&root, lock_new(a.clientid, &sa, b"la", R, 100, 10)));
    assert_eq!(la.status, st::OK, "both read");
    let a2 = sid(&la.last);
    assert_eq!(seqid(&a2), 2, "the lock stateid's seqid moves on");
    assert_eq!(a.status(&on_f(&root, lock_old(&a2, W, 105, 1))), DENIED);
    // LOCKT tells the same without keeping anything; an owner never conflicts with itself.
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", W, 0, 1))),
        DENIED
    );
    assert_eq!(
        a.status(&on_f(&root, lockt(a.clientid, b"la", W, 0, 1))),
        st::OK
    );
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", W, 200, 1))),
        st::OK
    );
    assert_eq!(a.srv.state().locks.len(), 2);
}

#[test]
fn accepts_locku_splitting_ranges_and_lock_stateids_for_io() {
    let (mut a, sa, mut b, sb, root) = two(Limits::default());
    let s1 = sid(&a
        .raw(&on_f(&root, lock_new(a.clientid, &sa, b"la", W, 0, 100)))
        .last);
    let r = a.raw(&on_f(&root, locku(&s1, 40, 20)));
    assert_eq!(r.status, st::OK);
    let s2 = sid(&r.last);
    assert_eq!(seqid(&s2), 2);
    assert_eq!(
        b.status(&on_f(&root, lock_new(b.clientid, &sb, b"lb", W, 45, 10))),
        st::OK,
        "the hole is free"
    );
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", W, 30, 5))),
        DENIED
    );
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", W, 70, 5))),
        DENIED
    );
    assert_eq!(
        a.status(&on_f(&root, lock_old(&s1, W, 0, 1))),
        10024,
        "OLD_STATEID"
    );
    // The lock stateid stands for its open in WRITE.
    let w = A::op(op::WRITE).fixed(&s2).u64(0).u32(2).opaque(b"x");
    assert_eq!(a.status(&on_f(&root, w)), st::OK);
    // To the end of the file, then all of it unlocked and the stateid freed.
    let r = a.raw(&on_f(&root, lock_old(&s2, W, 1000, u64::MAX)));
    assert_eq!(r.status, st::OK);
    let s3 = sid(&r.last);
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", R, 1 << 40, 1))),
        DENIED
    );
    let free = A::op(op::FREE_STATEID).fixed(&s3);
    assert_eq!(a.status(&[free]), 10037, "LOCKS_HELD");
    let r = a.raw(&on_f(&root, locku(&s3, 0, u64::MAX)));
    assert_eq!(r.status, st::OK);
    let s4 = sid(&r.last);
    assert_eq!(a.status(&[A::op(op::FREE_STATEID).fixed(&s4)]), st::OK);
    assert_eq!(a.status(&on_f(&root, locku(&s4, 0, 1))), st::BAD_STATEID);
}

#[test]
fn rejects_bad_ranges_types_modes_and_stateids() {
    let (mut a, sa, _b, _, root) = two(Limits::default());
    let c = a.clientid;
    assert_eq!(
        a.status(&on_f(&root, lock_new(c, &sa, b"l", W, 0, 0))),
        st::INVAL
    );
    let past = lock_new(c, &sa, b"l", W, u64::MAX - 1, 5);
    assert_eq!(a.status(&on_f(&root, past)), st::INVAL);
    let mut bad_type = lock_new(c, &sa, b"l", W, 0, 1);
    bad_type.0[4..8].copy_from_slice(&9u32.to_be_bytes());
    assert_eq!(a.status(&on_f(&root, bad_type)), st::INVAL);
    let mut reclaim = lock_new(c, &sa, b"l", W, 0, 1);
    reclaim.0[8..12].copy_from_slice(&1u32.to_be_bytes());
    assert_eq!(a.status(&on_f(&root, reclaim)), 10033, "NO_GRACE");
    let forged = [7u8; 16];
    assert_eq!(
        a.status(&on_f(&root, lock_old(&forged, W, 0, 1))),
        st::BAD_STATEID
    );
    assert_eq!(
        a.status(&on_f(&root, lock_new(c, &forged, b"l", W, 0, 1))),
        st::BAD_STATEID
    );
    let dir = [
        A::op(op::PUTFH).opaque(&root),
        lock_new(c, &sa, b"l", W, 0, 1),
    ];
    assert_eq!(a.status(&dir), st::ISDIR);
    // A write lock under a read-only open.
    let (srv, now, store) = (Arc::clone(&a.srv), Arc::clone(&a.now), Arc::clone(&a.store));
    let mut ro = H::on(srv, now, store, b"client-ro", auth_sys(0, 0));
    let r = ro.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_existing(ro.clientid, b"f", 1),
    ]);
    let so = sid(&r.last);
    let w = lock_new(ro.clientid, &so, b"l", W, 0, 1);
    assert_eq!(ro.status(&on_f(&root, w)), st::OPENMODE);
    assert_eq!(
        ro.srv.state().locks.len(),
        0,
        "a refused LOCK keeps no state"
    );
    let rd = lock_new(ro.clientid, &so, b"l", R, 0, 1);
    assert_eq!(ro.status(&on_f(&root, rd)), st::OK);
}

#[test]
fn accepts_locks_released_on_close_and_lease_expiry() {
    let (mut a, sa, mut b, sb, root) = two(Limits::default());
    assert_eq!(
        a.status(&on_f(&root, lock_new(a.clientid, &sa, b"la", W, 0, 10))),
        st::OK
    );
    assert_eq!(
        b.status(&on_f(&root, lockt(b.clientid, b"lb", W, 0, 10))),
        DENIED
    );
    let close = A::op(op::CLOSE).u32(0).fixed(&sa);
    assert_eq!(a.status(&on_f(&root, close)), st::OK);
    assert_eq!(a.srv.state().locks.len(), 0, "CLOSE took the lock state");
    assert_eq!(
        b.status(&on_f(&root, lock_new(b.clientid, &sb, b"lb", W, 0, 10))),
        st::OK
    );
    // b falls silent; a keeps renewing until b's lease is over.
    for _ in 0..2 {
        a.advance(60_000);
        assert_eq!(a.status(&[]), st::OK);
    }
    assert_eq!(a.srv.state().locks.len(), 0, "expired with b's lease");
    assert_eq!(
        a.status(&on_f(&root, lockt(a.clientid, b"la", W, 0, 10))),
        st::OK
    );
}

#[test]
fn rejects_lock_states_and_ranges_past_their_bounds() {
    let lim = Limits {
        locks_per_client: 1,
        ranges_per_lock: 2,
        ..Limits::default()
    };
    let (mut a, sa, _b, _, root) = two(lim);
    let c = a.clientid;
    let s = sid(&a.raw(&on_f(&root, lock_new(c, &sa, b"one", W, 0, 1))).last);
    let r = a.raw(&on_f(&root, lock_new(c, &sa, b"two", W, 10, 1)));
    assert_eq!(r.status, st::DELAY, "one lock state per client");
    let s = sid(&a.raw(&on_f(&root, lock_old(&s, W, 20, 1))).last);
    assert_eq!(a.status(&on_f(&root, lock_old(&s, W, 40, 1))), st::DELAY);
    assert_eq!(
        a.status(&on_f(&root, lock_old(&s, W, 0, 30))),
        st::OK,
        "a lock over both ranges merges them"
    );
    let counters = a.srv.counters();
    assert!(counters.contains(&("nfs4_locks", 1)));
    assert!(counters.contains(&("nfs4_refused_full", 2)));
}

/// In minor version 1 the client id in an `open_owner4` or `lock_owner4` is ignored: the owner
/// belongs to the session's client (RFC 8881 §18.16.3 and §18.10.3, as Linux nfsd's
/// `nfsd4_open` / `nfsd4_lock` / `nfsd4_lockt` take the session's). An OPEN, a LOCK of a new
/// owner and a LOCKT whose owner names another client id (0 here) act for the session's
/// client: the owner never conflicts with itself, and another client's lock conflicts.
#[test]
fn accepts_owners_naming_another_client_id_as_the_sessions() {
    let (mut a, _, mut b, _, root) = two(Limits::default());
    let r = a.raw(&[A::op(op::PUTFH).opaque(&root), open_existing(0, b"f", 3)]);
    assert_eq!(r.status, st::OK, "OPEN with client id 0");
    // The same owner as a's first OPEN (its stateid moves on): the owner is a's.
    let sa = sid(&r.last);
    assert_eq!(seqid(&sa), 2, "a's open again");
    let r = a.raw(&on_f(&root, lock_new(0, &sa, b"la", W, 0, 100)));
    assert_eq!(r.status, st::OK, "LOCK of a new owner with client id 0");
    assert_eq!(a.status(&on_f(&root, lockt(0, b"la", W, 0, 1))), st::OK);
    assert_eq!(
        a.status(&on_f(&root, lockt(a.clientid, b"la", W, 0, 1))),
        st::OK
    );
    let r = b.raw(&on_f(&root, lockt(0, b"la", W, 0, 1)));
    assert_eq!(r.status, DENIED, "b's owner \"la\" is b's, not a's");
    let mut x = XdrReader::new(&r.last);
    x.get_u64().unwrap();
    x.get_u64().unwrap();
    x.get_u32().unwrap();
    assert_eq!(x.get_u64().unwrap(), a.clientid, "the holder is a's client");
}
