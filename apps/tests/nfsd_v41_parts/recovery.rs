//! `rpcrdma-nfsd --nfs4` on the software provider, recovering: a daemon restarted on the same
//! directory, handle key and NFSv4.1 state directory lets its client reclaim its open and lock
//! in the grace period while another client's OPEN waits it out (RFC 8881 §8.4.2); and a
//! connection the server drops after running a COMPOUND (fault injection; the memory backend
//! served on the reactor, the directory backend on worker threads) is survived: the
//! client reconnects and its retransmission gets the slot's cached reply (the OPEN ran once),
//! SEQUENCE reports the lost back channel, BIND_CONN_TO_SESSION heals it, and a CB_RECALL
//! then reaches the client on its new connection.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --test nfsd_v41 recovery` (a module of
//! that test binary, so it needs no binary of its own). Recovery: a failure names the
//! operation and the reply seen; every wait has a deadline.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::nfsd_common::{options, scratch_dir, v41, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v4::cb::{self, CbRecall, CbServer};
use rpcrdma_apps::nfs::v4::{
    op, ChannelAttrs, CompoundReply, Delegation, Op, OpResult, StateId, CDFC4_FORE_OR_BOTH,
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, NFS4ERR_DELAY, NFS4ERR_DENIED, NFS4ERR_GRACE,
    NFS4ERR_NO_GRACE, NFS4_OK, SEQ4_STATUS_CB_PATH_DOWN,
};
use rpcrdma_poller::{BackchannelService, Program, Reject, ReplyBuilder, Request};

const CB_PROGRAM: u32 = 0x4000_0000;

fn call(c: &NfsClient, ops: &[Op<'_>]) -> CompoundReply {
    v41::compound(c, "recovery", ops)
}

fn attrs(slots: u32) -> ChannelAttrs {
    v41::channel_attrs(slots)
}

/// A client's session on connection `c`: its id, client id and slot 0's last sequence id.
struct Session<'c> {
    c: &'c NfsClient,
    sid: [u8; 16],
    clientid: u64,
    seq: u32,
}

impl<'c> Session<'c> {
    fn new(c: &'c NfsClient, owner: &[u8], flags: u32) -> Session<'c> {
        let ex = Op::ExchangeId {
            verifier: [5; 8],
            owner,
            flags: 0,
        };
        let r = call(c, &[ex]);
        let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone())
        else {
            panic!("EXCHANGE_ID: {r:?}");
        };
        let cs = Op::CreateSession {
            clientid: x.clientid,
            sequence: x.sequence,
            flags,
            fore: attrs(8),
            back: attrs(1),
            cb_program: CB_PROGRAM,
        };
        let r = call(c, &[cs]);
        let Some(OpResult::CreateSession(s)) = r.find(op::CREATE_SESSION).map(|o| o.result.clone())
        else {
            panic!("CREATE_SESSION: {r:?}");
        };
        Session {
            c,
            sid: s.session,
            clientid: x.clientid,
            seq: 0,
        }
    }

    /// SEQUENCE and `ops`.
    fn call(&mut self, ops: &[Op<'_>]) -> CompoundReply {
        self.seq += 1;
        let mut all = vec![Op::Sequence {
            session: self.sid,
            sequence: self.seq,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        }];
        all.extend_from_slice(ops);
        call(self.c, &all)
    }

    /// SEQUENCE alone: its status flags.
    fn flags(&mut self) -> u32 {
        let r = self.call(&[]);
        match r.find(op::SEQUENCE).map(|o| o.result.clone()) {
            Some(OpResult::Sequence(s)) => s.status_flags,
            _ => panic!("SEQUENCE: {r:?}"),
        }
    }

    /// Waits (5 s at most) until SEQUENCE's status flags satisfy `ok`.
    fn wait_flags(&mut self, ok: impl Fn(u32) -> bool, what: &str) {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let f = self.flags();
            if ok(f) {
                return;
            }
            assert!(Instant::now() < end, "{what}: flags {f:#x}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn open(&mut self, dir: &[u8], owner: &[u8], access: u32) -> CompoundReply {
        let o = Op::Open {
            clientid: self.clientid,
            owner,
            access,
            name: "f",
        };
        self.call(&[Op::PutFh(dir), o])
    }

    fn lock(&mut self, f: &[u8], open: StateId, reclaim: bool, at: (u64, u64)) -> u32 {
        let l = Op::Lock {
            write: true,
            reclaim,
            offset: at.0,
            length: at.1,
            open_stateid: open,
            clientid: self.clientid,
            owner: b"lock-owner",
        };
        self.call(&[Op::PutFh(f), l]).status
    }
}

fn opened(r: &CompoundReply) -> (StateId, Delegation) {
    match r.find(op::OPEN).map(|o| o.result.clone()) {
        Some(OpResult::Open(o)) => (o.stateid, o.delegation),
        _ => panic!("OPEN: {r:?}"),
    }
}

#[test]
fn accepts_reclaims_after_a_daemon_restart_and_holds_others_off_until_they_finish() {
    let p = scratch_dir("v41-grace");
    let key = p.with_extension("key");
    let state: PathBuf = p.with_extension("v4state");
    let with = |dir: PathBuf| DaemonOptions {
        handle_key: Some(key.clone()),
        v4_state_dir: Some(state.clone()),
        nfs4: true,
        ..options(Backend::Dir(dir))
    };
    let a = Rig::with(with(p.clone()), Some(p.clone()));
    a.nfs
        .create(&a.root, b"f", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    let root = a.root.as_bytes().to_vec();
    let f = {
        let mut s = Session::new(&a.nfs, b"host-a", 0);
        assert_eq!(s.call(&[Op::ReclaimComplete]).status, NFS4_OK);
        let (open, _) = opened(&s.open(&root, b"o", 3));
        let r = s.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::GetFh]);
        let Some(OpResult::Fh(f)) = r.find(op::GETFH).map(|o| o.result.clone()) else {
            panic!("GETFH: {r:?}");
        };
        assert_eq!(s.lock(&f, open, false, (0, 100)), NFS4_OK);
        f
    };
    let kept = a.stop_keep().expect("the directory");
    // The restart: the same directory, handle key and state directory.
    let b = Rig::with(with(kept.clone()), Some(kept));
    assert_eq!(b.counter("nfs4_grace"), 1, "host-a may reclaim");
    let (_ep, other) = b.second_client(Ipv4Addr::new(10, 0, 0, 3));
    let mut o = Session::new(&other, b"host-b", 0);
    assert_eq!(o.open(&root, b"b", 3).status, NFS4ERR_GRACE);
    let mut s = Session::new(&b.nfs, b"host-a", 0);
    let re = Op::OpenReclaim {
        clientid: s.clientid,
        owner: b"o",
        access: 3,
    };
    let r = s.call(&[Op::PutFh(&f), re]);
    assert_eq!(r.status, NFS4_OK, "OPEN CLAIM_PREVIOUS: {r:?}");
    let (open, _) = opened(&r);
    assert_eq!(s.lock(&f, open, true, (0, 100)), NFS4_OK, "LOCK reclaim");
    assert_eq!(
        o.open(&root, b"b", 3).status,
        NFS4ERR_GRACE,
        "still in grace"
    );
    assert_eq!(s.call(&[Op::ReclaimComplete]).status, NFS4_OK);
    assert_eq!(b.counter("nfs4_grace"), 0, "every recorded client finished");
    assert_eq!(s.lock(&f, open, true, (0, 100)), NFS4ERR_NO_GRACE);
    let r = o.open(&root, b"b", 3);
    assert_eq!(r.status, NFS4_OK, "admitted after the grace period: {r:?}");
    let (theirs, _) = opened(&r);
    assert_eq!(o.lock(&f, theirs, false, (50, 10)), NFS4ERR_DENIED);
    assert_eq!(b.counter("nfs4_reclaims"), 2);
    drop(other);
    b.stop();
    let _ = std::fs::remove_file(&key);
    let _ = std::fs::remove_dir_all(&state);
}

/// The holder's callback service: CB_COMPOUNDs served by `cbs` (set once the session
/// exists), every CB_RECALL sent to `recalls` and answered NFS4_OK.
fn service(
    cbs: &Arc<Mutex<Option<CbServer>>>,
    recalls: mpsc::Sender<CbRecall>,
) -> BackchannelService {
    let cbs = Arc::clone(cbs);
    let recalls = Mutex::new(recalls);
    let prog = Program::new(CB_PROGRAM, cb::VERSION..=cb::VERSION).procedure(
        cb::PROC_COMPOUND,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            let mut g = cbs.lock().map_err(|_| Reject::SystemErr)?;
            let srv = g.as_mut().ok_or(Reject::SystemErr)?;
            let mut on_recall = |r: &CbRecall| {
                if let Ok(tx) = recalls.lock() {
                    let _ = tx.send(r.clone());
                }
                NFS4_OK
            };
            let (reply, _) = srv
                .serve(req.args, &mut on_recall)
                .map_err(|_| Reject::GarbageArgs)?;
            out.put(&reply).map_err(|_| Reject::SystemErr)
        },
    );
    BackchannelService::new().program(prog).credits(1)
}

#[test]
fn accepts_a_dropped_connection_with_the_cached_reply_and_a_healed_back_channel() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    dropped_connection(Rig::with(o, None));
}

#[test]
fn accepts_a_dropped_connection_on_the_dir_backend_served_by_workers() {
    let d = scratch_dir("v41-drop");
    let mut o = options(Backend::Dir(d.clone()));
    o.nfs4 = true;
    dropped_connection(Rig::with(o, Some(d)));
}

/// The drop, the retry answered from the slot, the back channel healed, a recall delivered on
/// the new connection.
fn dropped_connection(rig: Rig) {
    rig.nfs
        .create(&rig.root, b"f", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    let root = rig.root.as_bytes().to_vec();
    let cbs = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let (_ep, holder) = rig.serving_client(Ipv4Addr::new(10, 0, 0, 3), service(&cbs, tx));
    let mut h = Session::new(&holder, b"holder", CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    *cbs.lock().unwrap() = Some(CbServer::new(h.sid, 1));
    h.wait_flags(|f| f == 0, "the back channel came up");
    // The server runs the OPEN, keeps its reply in the slot and drops the connection; the
    // client reconnects and sends the call again: the slot's reply, the OPEN run once.
    let nfs4 = Arc::clone(rig.daemon.nfs4().expect("NFSv4.1 served"));
    nfs4.set_drop_every(1);
    let r = h.open(&root, b"h", 1);
    nfs4.set_drop_every(0);
    assert_eq!(r.status, NFS4_OK, "{r:?}");
    let (open, deleg) = opened(&r);
    let Delegation::Read { stateid: deleg, .. } = deleg else {
        panic!("a read delegation: {r:?}");
    };
    assert_eq!(rig.counter("nfs4_dropped"), 1);
    assert_eq!(rig.counter("nfs4_slot_replays"), 1);
    assert_eq!(open[..4], 1u32.to_be_bytes(), "the first OPEN's stateid");
    let seqids: Vec<u32> = nfs4.state().opens.values().map(|x| x.seqid).collect();
    assert_eq!(
        seqids,
        vec![1],
        "one open, opened once (a second OPEN bumps the seqid)"
    );
    // The back channel was on the lost connection: SEQUENCE says so, BIND_CONN_TO_SESSION
    // for both directions on the new one heals it.
    h.wait_flags(
        |f| f & SEQ4_STATUS_CB_PATH_DOWN != 0,
        "the lost back channel reported",
    );
    let bind = Op::BindConnToSession {
        session: h.sid,
        dir: CDFC4_FORE_OR_BOTH,
    };
    let r = call(&holder, &[bind]);
    assert_eq!(r.status, NFS4_OK, "BIND_CONN_TO_SESSION: {r:?}");
    assert_eq!(rig.counter("nfs4_binds"), 1, "the bind counted");
    h.wait_flags(|f| f == 0, "the back channel healed");
    // A recall reaches the holder over its new connection.
    let mut w = Session::new(&rig.nfs, b"writer", 0);
    assert_eq!(w.open(&root, b"w", 2).status, NFS4ERR_DELAY);
    let recall = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("CB_RECALL on the new connection");
    assert_eq!(recall.stateid, deleg);
    let r = h.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::DelegReturn(deleg)]);
    assert_eq!(r.status, NFS4_OK, "DELEGRETURN: {r:?}");
    assert_eq!(w.open(&root, b"w", 2).status, NFS4_OK);
    drop(holder);
    rig.stop();
}
