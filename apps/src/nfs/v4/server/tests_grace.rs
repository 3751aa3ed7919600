//! Unit tests of NFSv4.1 restart recovery and reconnection on virtual time: client records on
//! stable storage, the grace period after a restart (reclaims accepted from recorded clients,
//! other state refused until it ends, by RECLAIM_COMPLETE or after one lease time), a rejected
//! record file, NFS4ERR_CLID_INUSE, and a client that lost its connection: the back channel
//! reported down, healed by BIND_CONN_TO_SESSION, the retry answered from the slot.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_grace`.
//! Recovery: a failure names the operation and the status seen.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use rpcrdma_engine::rpc::{AuthFlavor, OpaqueAuth};
use rpcrdma_poller::metrics::{Collector, Exposition};

use super::clientdb;
use super::deleg::{Callbacks, Done, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION};
use super::grace::{GRACE, NO_GRACE, RECLAIM_BAD};
use super::lock::DENIED;
use super::state::Limits;
use super::tests::{auth_sys, open_create, server, server_cb, walk, A, H};
use super::xdr::st;
use super::{CallCx, Nfs41};
use crate::nfs::store::Store;
use crate::nfs::v4::cb::{self, CbOp};
use crate::nfs::v4::{
    decode_compound, encode_compound_minor, op, CompoundReply, Delegation, Op, OpResult,
    ReadPlacement, StateId,
};
use rpcrdma_poller::CredBody;

fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rpcrdma-grace-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// The server `srv` restarted: a new run over the same exports, stores and clock, its client
/// records in `dir`.
fn restart(srv: &Nfs41, dir: &Path) -> (Arc<Nfs41>, Result<usize, String>) {
    let n = Nfs41::new(srv.exports(), srv.config().clone());
    let r = n.start_recovery(dir);
    (n, r)
}

fn client(
    srv: &Arc<Nfs41>,
    now: &Arc<AtomicU64>,
    store: &Arc<dyn Store>,
    owner: &[u8],
    uid: u32,
) -> H {
    H::on(
        Arc::clone(srv),
        Arc::clone(now),
        Arc::clone(store),
        owner,
        auth_sys(uid, uid),
    )
}

fn open_stateid(r: &CompoundReply) -> StateId {
    match r.find(op::OPEN).map(|o| o.result.clone()) {
        Some(OpResult::Open(o)) => o.stateid,
        other => panic!("OPEN: {other:?} in {r:?}"),
    }
}

fn fh_of(h: &mut H, root: &[u8], name: &str) -> Vec<u8> {
    let r = h.call(&[Op::PutFh(root), Op::Lookup(name), Op::GetFh]);
    match r.find(op::GETFH).map(|o| o.result.clone()) {
        Some(OpResult::Fh(f)) => f,
        other => panic!("GETFH: {other:?}"),
    }
}

fn lock<'a>(h: &H, owner: &'a [u8], open: StateId, reclaim: bool, at: (u64, u64)) -> Op<'a> {
    Op::Lock {
        write: true,
        reclaim,
        offset: at.0,
        length: at.1,
        open_stateid: open,
        clientid: h.clientid,
        owner,
    }
}

fn reclaim<'a>(h: &H, owner: &'a [u8]) -> Op<'a> {
    Op::OpenReclaim {
        clientid: h.clientid,
        owner,
        access: 3,
    }
}

fn open_f(h: &H) -> Op<'static> {
    Op::Open {
        clientid: h.clientid,
        owner: b"b",
        access: 3,
        name: "f",
    }
}

/// A server, its clock and store, the root handle and a file's handle.
type Before = (Arc<Nfs41>, Arc<AtomicU64>, Arc<dyn Store>, Vec<u8>, Vec<u8>);

/// A server recording in `dir` with client `client-a` recorded, holding an open of `f` and a
/// write lock on its first 100 octets. Returns the server, its clock and store, the root
/// handle and `f`'s handle.
fn before_restart(dir: &Path, lim: Limits) -> Before {
    let (srv, now, store) = server("rw,no_root_squash", lim);
    assert_eq!(srv.start_recovery(dir), Ok(0));
    assert!(!srv.in_grace(), "nothing to reclaim: no grace period");
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    assert_eq!(a.call(&[Op::ReclaimComplete]).status, st::OK);
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    let open: StateId = r.last[..16].try_into().unwrap();
    let f = fh_of(&mut a, &root, "f");
    let r = a.call(&[Op::PutFh(&f), lock(&a, b"lock-a", open, false, (0, 100))]);
    assert_eq!(r.status, st::OK, "LOCK: {r:?}");
    assert_eq!(clientdb::load(dir).map(|v| v.len()), Ok(1));
    (srv, now, store, root, f)
}

#[test]
fn accepts_reclaims_after_a_restart_and_refuses_other_state_until_grace_ends() {
    let dir = scratch("reclaim");
    let (old, now, store, root, f) = before_restart(&dir, Limits::default());
    let (srv, loaded) = restart(&old, &dir);
    assert_eq!(loaded, Ok(1), "one client may reclaim");
    assert!(srv.in_grace());
    let mut b = client(&srv, &now, &store, b"client-b", 0);
    let r = b.call(&[Op::PutFh(&root), open_f(&b)]);
    assert_eq!(r.status, GRACE, "a new OPEN waits out the grace period");
    let r = b.call(&[Op::PutFh(&f), reclaim(&b, b"b")]);
    assert_eq!(
        r.status, RECLAIM_BAD,
        "client-b held nothing before the restart"
    );
    let lockt = A::op(op::LOCKT)
        .u32(2)
        .u64(0)
        .u64(10)
        .u64(b.clientid)
        .opaque(b"b");
    assert_eq!(b.status(&[A::op(op::PUTFH).opaque(&f), lockt]), GRACE);
    let remove = A::op(op::REMOVE).opaque(b"f");
    assert_eq!(b.status(&[A::op(op::PUTFH).opaque(&root), remove]), GRACE);
    // client-a comes back on a new session and reclaims its open and its lock.
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    let r = a.call(&[Op::PutFh(&f), reclaim(&a, b"owner")]);
    assert_eq!(r.status, st::OK, "OPEN CLAIM_PREVIOUS: {r:?}");
    let Some(OpResult::Open(o)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("{r:?}");
    };
    assert_eq!(o.delegation, Delegation::None);
    let r = a.call(&[
        Op::PutFh(&f),
        lock(&a, b"lock-a", o.stateid, true, (0, 100)),
    ]);
    assert_eq!(r.status, st::OK, "LOCK reclaim: {r:?}");
    let r = a.call(&[
        Op::PutFh(&f),
        lock(&a, b"lock-a2", o.stateid, false, (200, 1)),
    ]);
    assert_eq!(r.status, GRACE, "a new lock waits out the grace period too");
    // Its RECLAIM_COMPLETE ends the grace period: it was the only recorded client.
    assert_eq!(a.call(&[Op::ReclaimComplete]).status, st::OK);
    assert!(!srv.in_grace());
    let r = a.call(&[
        Op::PutFh(&f),
        lock(&a, b"lock-a", o.stateid, true, (0, 100)),
    ]);
    assert_eq!(r.status, NO_GRACE, "no reclaim after RECLAIM_COMPLETE");
    // client-b is admitted now, and the reclaimed lock holds against it.
    let r = b.call(&[Op::PutFh(&root), open_f(&b)]);
    assert_eq!(r.status, st::OK, "{r:?}");
    let ob = open_stateid(&r);
    let r = b.call(&[Op::PutFh(&f), lock(&b, b"lock-b", ob, false, (50, 10))]);
    assert_eq!(r.status, DENIED, "{r:?}");
    let c: Vec<_> = srv.recovery_counters();
    assert!(c.contains(&("nfs4_reclaims", 2)), "{c:?}");
    assert!(c.contains(&("nfs4_reclaims_refused", 2)), "{c:?}");
    assert!(c.contains(&("nfs4_grace_refused", 4)), "{c:?}");
    assert!(c.contains(&("nfs4_grace", 0)), "{c:?}");
    let mut e = Exposition::new();
    srv.collect(&mut e);
    let text = e.finish();
    for line in [
        "rpcrdma_nfsd_nfs4_events_total{event=\"reclaims\"} 2",
        "rpcrdma_nfsd_nfs4_recovery{value=\"grace\"} 0",
        "rpcrdma_nfsd_nfs4_recovery{value=\"client_records\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accepts_a_second_restart_within_the_grace_period_keeping_the_unreclaimed_records() {
    let dir = scratch("twice");
    let (old, now, store, _, f) = before_restart(&dir, Limits::default());
    let (mid, loaded) = restart(&old, &dir);
    assert_eq!(loaded, Ok(1));
    // client-c is new in the second run and records itself; client-a has not come back.
    let mut c = client(&mid, &now, &store, b"client-c", 0);
    assert_eq!(c.call(&[Op::ReclaimComplete]).status, st::OK);
    assert!(mid.in_grace(), "client-a has not finished");
    let (srv, loaded) = restart(&mid, &dir);
    assert_eq!(loaded, Ok(2), "client-a may still reclaim, client-c too");
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    assert_eq!(a.call(&[Op::PutFh(&f), reclaim(&a, b"o")]).status, st::OK);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accepts_the_grace_period_ending_after_one_lease_time() {
    let dir = scratch("lease");
    let lim = Limits {
        lease_secs: 10,
        ..Limits::default()
    };
    let (old, now, store, root, f) = before_restart(&dir, lim);
    let (srv, loaded) = restart(&old, &dir);
    assert_eq!(loaded, Ok(1));
    let mut b = client(&srv, &now, &store, b"client-b", 0);
    b.advance(6_000);
    assert_eq!(b.call(&[Op::PutFh(&root), open_f(&b)]).status, GRACE);
    b.advance(5_000);
    let r = b.call(&[Op::PutFh(&root), open_f(&b)]);
    assert_eq!(r.status, st::OK, "one lease time later: {r:?}");
    assert!(!srv.in_grace());
    // client-a did not come back in time: its record is gone, its reclaim refused.
    assert_eq!(clientdb::load(&dir), Ok(Vec::new()));
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    assert_eq!(a.call(&[Op::PutFh(&f), reclaim(&a, b"o")]).status, NO_GRACE);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_reclaims_from_another_principal_with_the_same_owner() {
    let dir = scratch("principal");
    let (old, now, store, _, f) = before_restart(&dir, Limits::default());
    let (srv, _) = restart(&old, &dir);
    let mut x = client(&srv, &now, &store, b"client-a", 1000);
    assert_eq!(
        x.call(&[Op::PutFh(&f), reclaim(&x, b"o")]).status,
        RECLAIM_BAD
    );
    assert!(srv.in_grace());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_a_corrupt_client_record_file_without_a_grace_period() {
    let dir = scratch("corrupt");
    let (old, now, store, root, f) = before_restart(&dir, Limits::default());
    let file = dir.join(clientdb::FILE);
    let mut b = std::fs::read(&file).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&file, &b).unwrap();
    let (srv, loaded) = restart(&old, &dir);
    assert!(loaded.unwrap_err().contains("checksum"));
    assert!(!srv.in_grace(), "no client may reclaim: no grace period");
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    assert_eq!(a.call(&[Op::PutFh(&f), reclaim(&a, b"o")]).status, NO_GRACE);
    let r = a.call(&[Op::PutFh(&root), open_f(&a)]);
    assert_eq!(r.status, st::OK);
    // The next record replaces the rejected file.
    assert_eq!(a.call(&[Op::ReclaimComplete]).status, st::OK);
    assert_eq!(clientdb::load(&dir).map(|v| v.len()), Ok(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_records_of_clients_that_were_destroyed_or_expired() {
    let dir = scratch("forget");
    let (srv, now, store) = server("rw", Limits::default());
    assert_eq!(srv.start_recovery(&dir), Ok(0));
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    let mut c = client(&srv, &now, &store, b"client-c", 0);
    assert_eq!(a.call(&[Op::ReclaimComplete]).status, st::OK);
    assert_eq!(c.call(&[Op::ReclaimComplete]).status, st::OK);
    assert_eq!(clientdb::load(&dir).map(|v| v.len()), Ok(2));
    assert_eq!(a.plain(&[Op::DestroySession(a.sid)]).status, st::OK);
    assert_eq!(a.plain(&[Op::DestroyClientId(a.clientid)]).status, st::OK);
    let left = clientdb::load(&dir).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].owner, b"client-c");
    c.advance(91_000);
    let _d = client(&srv, &now, &store, b"client-d", 0);
    assert_eq!(clientdb::load(&dir), Ok(Vec::new()), "client-c expired");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_a_client_id_taken_by_another_principal() {
    let (srv, now, store) = server("rw", Limits::default());
    let a = client(&srv, &now, &store, b"client-a", 0);
    let other = auth_sys(1000, 1000);
    let cx = CallCx {
        cred: OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &other,
        },
        ..a.cx()
    };
    let ex = [Op::ExchangeId {
        verifier: [1; 8],
        owner: b"client-a",
        flags: 0,
    }];
    let e = encode_compound_minor("t", 1, &ex);
    let b = srv.compound(&cx, &e.bytes).unwrap();
    let r = decode_compound(&b, &ex, ReadPlacement::Inline).unwrap();
    assert_eq!(r.status, st::CLID_INUSE);
    assert!(
        srv.state().clients.contains_key(&a.clientid),
        "a keeps its record"
    );
}

/// Connections that can be lost: a backward call or liveness question on one answers false.
/// Every backward call is kept (connection, procedure, arguments).
#[derive(Default)]
pub struct Conns {
    pub dead: Mutex<HashSet<u64>>,
    pub calls: Mutex<Vec<(u64, u32, Vec<u8>)>>,
}

impl Callbacks for Conns {
    fn call(&self, conn: u64, _: u32, proc_: u32, _: &CredBody, args: Vec<u8>, done: Done) {
        self.calls.lock().unwrap().push((conn, proc_, args));
        done(self.alive(conn));
    }

    fn alive(&self, conn: u64) -> bool {
        !self.dead.lock().unwrap().contains(&conn)
    }
}

/// The stateids CB_RECALL named so far on connection `conn` (any connection: `None`).
pub fn recalls_on(conns: &Conns, conn: Option<u64>) -> Vec<[u8; 16]> {
    let calls = conns.calls.lock().unwrap();
    calls
        .iter()
        .filter(|c| c.1 == cb::PROC_COMPOUND && conn.unwrap_or(c.0) == c.0)
        .flat_map(|c| cb::decode_cb_compound(&c.2).unwrap().ops)
        .filter_map(|o| match o {
            CbOp::Recall(r) => Some(r.stateid),
            _ => None,
        })
        .collect()
}

/// SEQUENCE (and `ops`) of `h` sent on connection `conn`: the reply and its status flags.
fn on_conn(h: &mut H, conn: u64, ops: &[Op<'_>]) -> (CompoundReply, u32) {
    let mut all = vec![h.sequence(true)];
    all.extend_from_slice(ops);
    let e = encode_compound_minor("t", 1, &all);
    let b = send_on(h, conn, &e.bytes);
    let r = decode_compound(&b, &all, ReadPlacement::Inline).unwrap();
    let flags = match r.find(op::SEQUENCE).map(|o| o.result.clone()) {
        Some(OpResult::Sequence(s)) => s.status_flags,
        other => panic!("SEQUENCE: {other:?}"),
    };
    (r, flags)
}

#[test]
fn accepts_a_reconnected_client_healing_its_back_channel_and_replaying_its_slot() {
    let conns = Arc::new(Conns::default());
    let cbs: Arc<dyn Callbacks> = Arc::clone(&conns) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let mut h = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    assert_eq!(on_conn(&mut h, 7, &[]).1, 0, "the back channel is up");
    // A CREATE whose reply is lost with connection 7; the retry comes on connection 8.
    let root = h.root();
    let ops = [
        A::op(op::PUTFH).opaque(&root),
        A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0),
    ];
    let b = h.raw_bytes(&ops, true);
    let first = h.send(&b);
    assert_eq!(walk(&first).status, st::OK);
    conns.dead.lock().unwrap().insert(7);
    let again = send_on(&h, 8, &b);
    assert_eq!(again, first, "the slot's reply, and CREATE ran once");
    assert_eq!(h.srv.state().counters.replays, 1);
    // The next SEQUENCE tells the client its back channel is gone.
    let (_, flags) = on_conn(&mut h, 8, &[]);
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(flags & down, down, "flags {flags:#x}");
    // BIND_CONN_TO_SESSION for both directions on the new connection heals it.
    let bind = [Op::BindConnToSession {
        session: h.sid,
        dir: 3,
    }];
    let e = encode_compound_minor("t", 1, &bind);
    let r = decode_compound(&send_on(&h, 8, &e.bytes), &bind, ReadPlacement::Inline).unwrap();
    assert_eq!(
        r.ops[0].result,
        OpResult::BindConn {
            session: h.sid,
            dir: 3,
            rdma_mode: false
        }
    );
    assert_eq!(on_conn(&mut h, 8, &[]).1, 0, "the back channel is up again");
    assert_eq!(h.srv.state().sessions[&h.sid].back_conn, Some(8));
    // A second CREATE of the same name runs: the directory exists once.
    let r = walk(&on_conn_raw(&mut h, 8, &ops));
    assert_eq!(r.status, st::EXIST);
}

/// SEQUENCE and raw `ops` of `h` on connection `conn`: the reply's octets.
fn on_conn_raw(h: &mut H, conn: u64, ops: &[A]) -> Vec<u8> {
    let b = h.raw_bytes(ops, true);
    send_on(h, conn, &b)
}

/// COMPOUND octets `b` of `h` sent on connection `conn`: the reply's octets.
fn send_on(h: &H, conn: u64, b: &[u8]) -> Vec<u8> {
    let cx = CallCx { conn, ..h.cx() };
    h.srv.compound(&cx, b).unwrap()
}

#[test]
fn accepts_a_recall_sent_again_on_the_back_channel_bound_after_a_reconnection() {
    let conns = Arc::new(Conns::default());
    let cbs: Arc<dyn Callbacks> = Arc::clone(&conns) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let mut a = client(&srv, &now, &store, b"client-a", 0);
    let mut b = client(&srv, &now, &store, b"client-b", 0);
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    let made: StateId = r.last[..16].try_into().unwrap();
    let r = a.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::Close(made)]);
    assert_eq!(r.status, st::OK);
    let read = Op::Open {
        clientid: a.clientid,
        owner: b"r",
        access: 1,
        name: "f",
    };
    let r = a.call(&[Op::PutFh(&root), read]);
    let Some(OpResult::Open(o)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("{r:?}");
    };
    let Delegation::Read { stateid: deleg, .. } = o.delegation else {
        panic!("a read delegation: {o:?}");
    };
    // client-a's connection is lost: the recall for client-b's write OPEN does not reach it.
    conns.dead.lock().unwrap().insert(7);
    let write = Op::Open {
        clientid: b.clientid,
        owner: b"w",
        access: 2,
        name: "f",
    };
    assert_eq!(b.call(&[Op::PutFh(&root), write]).status, st::DELAY);
    assert_eq!(recalls_on(&conns, Some(7)), vec![deleg]);
    // client-a binds its new connection: the recall comes again there.
    let bind = [Op::BindConnToSession {
        session: a.sid,
        dir: 3,
    }];
    let e = encode_compound_minor("t", 1, &bind);
    let r = decode_compound(&send_on(&a, 8, &e.bytes), &bind, ReadPlacement::Inline).unwrap();
    assert_eq!(r.status, st::OK);
    assert_eq!(recalls_on(&conns, Some(8)), vec![deleg]);
    let (r, _) = on_conn(
        &mut a,
        8,
        &[Op::PutFh(&root), Op::Lookup("f"), Op::DelegReturn(deleg)],
    );
    assert_eq!(r.status, st::OK);
    assert_eq!(b.call(&[Op::PutFh(&root), write]).status, st::OK);
    assert_eq!(a.srv.state().counters.revoked, 0);
}
