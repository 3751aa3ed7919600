//! `rpcrdma-nfsd --nfs4` on the software provider: a read delegation recalled over the
//! holder's own RPC-over-RDMA connection (RFC 8881 §10.4, RFC 8167). Two clients of our codec:
//! the holder serves the callback program with [`CbServer`]; the other client's write OPEN gets
//! NFS4ERR_DELAY, the holder receives CB_COMPOUND {CB_SEQUENCE, CB_RECALL} on its connection and
//! returns the delegation, and the retry succeeds; the counters show one recall and one
//! DELEGRETURN.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --test nfsd_v41_deleg`. Recovery: a failure
//! names the operation and the reply seen; every wait has a deadline.

mod nfsd_common;

use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfsd_common::{options, v41, Rig};
use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v4::cb::{self, CbRecall, CbServer};
use rpcrdma_apps::nfs::v4::{
    op, ChannelAttrs, CompoundReply, Delegation, Op, OpResult, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    NFS4ERR_DELAY, NFS4_OK,
};
use rpcrdma_engine::rpc::{AuthFlavor, AuthStat};
use rpcrdma_poller::{BackchannelService, Program, Reject, ReplyBuilder, Request};

const CB_PROGRAM: u32 = 0x4000_0000;

fn call(c: &NfsClient, ops: &[Op<'_>]) -> CompoundReply {
    v41::compound(c, "deleg", ops)
}

fn attrs(slots: u32) -> ChannelAttrs {
    v41::channel_attrs(slots)
}

/// A client's session: its id, client id and slot 0's last sequence id.
struct Session {
    sid: [u8; 16],
    clientid: u64,
    seq: u32,
}

impl Session {
    fn new(c: &NfsClient, owner: &[u8], flags: u32) -> Session {
        let r = call(
            c,
            &[Op::ExchangeId {
                verifier: [5; 8],
                owner,
                flags: 0,
            }],
        );
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
            sid: s.session,
            clientid: x.clientid,
            seq: 0,
        }
    }

    /// SEQUENCE and `ops`.
    fn call(&mut self, c: &NfsClient, ops: &[Op<'_>]) -> CompoundReply {
        self.seq += 1;
        let mut all = vec![Op::Sequence {
            session: self.sid,
            sequence: self.seq,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        }];
        all.extend_from_slice(ops);
        call(c, &all)
    }
}

/// The holder's callback service: CB_COMPOUNDs served by `cbs` (set once the session
/// exists), every CB_RECALL sent to `recalls` and answered NFS4_OK. As the Linux client's
/// callback service does (fs/nfs/callback.c, `nfs_callback_authenticate`), a CB_COMPOUND
/// with an AUTH_NONE credential is refused with AUTH_ERROR / AUTH_BADCRED: only CB_NULL may
/// come with AUTH_NONE (RFC 8881 §18.36.3: callbacks use the `csa_sec_parms` the client
/// offered, AUTH_SYS here).
fn service(
    cbs: &Arc<Mutex<Option<CbServer>>>,
    recalls: mpsc::Sender<CbRecall>,
) -> BackchannelService {
    let cbs = Arc::clone(cbs);
    let recalls = Mutex::new(recalls);
    let prog = Program::new(CB_PROGRAM, cb::VERSION..=cb::VERSION).procedure(
        cb::PROC_COMPOUND,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            if req.cred.flavor != AuthFlavor::Sys {
                return Err(Reject::Auth(AuthStat::BadCred));
            }
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
fn accepts_a_recall_over_the_holders_connection_and_the_retry_after_delegreturn() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    rig.nfs
        .create(&rig.root, b"f", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    let root = rig.root.as_bytes().to_vec();
    let cbs = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let (_ep, holder) = rig.serving_client(Ipv4Addr::new(10, 0, 0, 3), service(&cbs, tx));
    let mut h = Session::new(&holder, b"holder", CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    *cbs.lock().unwrap() = Some(CbServer::new(h.sid, 1));
    // The CB_NULL probe answered: the back channel is up.
    let mut up = false;
    for _ in 0..200 {
        let r = h.call(&holder, &[]);
        let Some(OpResult::Sequence(s)) = r.find(op::SEQUENCE).map(|o| o.result.clone()) else {
            panic!("SEQUENCE: {r:?}");
        };
        if s.status_flags == 0 {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(up, "the back channel came up");
    let open_r = Op::Open {
        clientid: h.clientid,
        owner: b"h",
        access: 1,
        name: "f",
    };
    let r = h.call(&holder, &[Op::PutFh(&root), open_r]);
    let Some(OpResult::Open(or)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("OPEN: {r:?}");
    };
    let Delegation::Read { stateid: deleg, .. } = or.delegation else {
        panic!("a read delegation: {or:?}");
    };
    let mut w = Session::new(&rig.nfs, b"writer", 0);
    let open_w = Op::Open {
        clientid: w.clientid,
        owner: b"w",
        access: 2,
        name: "f",
    };
    let r = w.call(&rig.nfs, &[Op::PutFh(&root), open_w]);
    assert_eq!(r.status, NFS4ERR_DELAY, "{r:?}");
    let recall = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("CB_RECALL on the holder's connection");
    assert_eq!(recall.stateid, deleg);
    let r = h.call(
        &holder,
        &[Op::PutFh(&root), Op::Lookup("f"), Op::DelegReturn(deleg)],
    );
    assert_eq!(r.status, NFS4_OK, "DELEGRETURN: {r:?}");
    let r = w.call(&rig.nfs, &[Op::PutFh(&root), open_w]);
    assert_eq!(r.status, NFS4_OK, "the retry: {r:?}");
    assert_eq!(rig.counter("nfs4_recalls"), 1);
    assert_eq!(rig.counter("nfs4_delegreturns"), 1);
    assert_eq!(rig.counter("nfs4_revoked"), 0);
    drop(holder);
    rig.stop();
}
