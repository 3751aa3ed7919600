//! `rpcrdma-nfsd --nfs4` on the software provider: a read delegation recalled over the
//! holder's own RPC-over-RDMA connection (RFC 8881 §10.4, RFC 8167). Two clients of our codec:
//! the holder serves the callback program with [`CbServer`]; the other client's write OPEN gets
//! NFS4ERR_DELAY, the holder receives CB_COMPOUND {CB_SEQUENCE, CB_RECALL} on its connection and
//! returns the delegation, and the retry succeeds; the counters show one recall and one
//! DELEGRETURN. An NFSv3 WRITE of the file recalls the delegation too and is answered
//! NFS3ERR_JUKEBOX until it is back (RFC 8881 §10.4.6, as Linux nfsd's leases make it).
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
use rpcrdma_apps::nfs::types::{CreateHow, Nfsstat3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::{NfsClient, NfsError};
use rpcrdma_apps::nfs::v4::cb::{self, CbRecall, CbServer};
use rpcrdma_apps::nfs::v4::{
    op, ChannelAttrs, CompoundReply, Delegation, Op, OpResult, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    NFS4ERR_DELAY, NFS4_OK,
};
use rpcrdma_engine::rpc::{AuthFlavor, AuthStat};
use rpcrdma_engine::verbs::soft::SoftProvider;
use rpcrdma_poller::{BackchannelService, Endpoint, Program, Reject, ReplyBuilder, Request};

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

/// A daemon serving NFSv3 and NFSv4.1, file `f` made over NFSv3, and a holder (its own
/// connection, serving the callback program) with a read delegation of `f`: the rig, the
/// holder's connection and session, its delegation stateid, the recalls it receives, the
/// root handle.
struct Held {
    rig: Rig,
    _ep: Endpoint<SoftProvider>,
    holder: NfsClient,
    h: Session,
    deleg: [u8; 16],
    recalls: mpsc::Receiver<CbRecall>,
    root: Vec<u8>,
}

fn held() -> Held {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    rig.nfs
        .create(&rig.root, b"f", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    let root = rig.root.as_bytes().to_vec();
    let cbs = Arc::new(Mutex::new(None));
    let (tx, recalls) = mpsc::channel();
    let (ep, holder) = rig.serving_client(Ipv4Addr::new(10, 0, 0, 3), service(&cbs, tx));
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
    Held {
        rig,
        _ep: ep,
        holder,
        h,
        deleg,
        recalls,
        root,
    }
}

impl Held {
    /// The holder receives the recall of its delegation and returns it.
    fn recalled_and_returned(&mut self) {
        let recall = self
            .recalls
            .recv_timeout(Duration::from_secs(10))
            .expect("CB_RECALL on the holder's connection");
        assert_eq!(recall.stateid, self.deleg);
        let ret = [
            Op::PutFh(&self.root),
            Op::Lookup("f"),
            Op::DelegReturn(self.deleg),
        ];
        let r = self.h.call(&self.holder, &ret);
        assert_eq!(r.status, NFS4_OK, "DELEGRETURN: {r:?}");
    }
}

#[test]
fn accepts_a_recall_over_the_holders_connection_and_the_retry_after_delegreturn() {
    let mut x = held();
    let root = x.root.clone();
    let mut w = Session::new(&x.rig.nfs, b"writer", 0);
    let open_w = Op::Open {
        clientid: w.clientid,
        owner: b"w",
        access: 2,
        name: "f",
    };
    let r = w.call(&x.rig.nfs, &[Op::PutFh(&root), open_w]);
    assert_eq!(r.status, NFS4ERR_DELAY, "{r:?}");
    x.recalled_and_returned();
    let r = w.call(&x.rig.nfs, &[Op::PutFh(&root), open_w]);
    assert_eq!(r.status, NFS4_OK, "the retry: {r:?}");
    assert_eq!(x.rig.counter("nfs4_recalls"), 1);
    assert_eq!(x.rig.counter("nfs4_delegreturns"), 1);
    assert_eq!(x.rig.counter("nfs4_revoked"), 0);
    let Held { rig, holder, .. } = x;
    drop(holder);
    rig.stop();
}

#[test]
fn rejects_an_nfsv3_write_with_jukebox_until_the_delegation_it_recalled_is_returned() {
    let mut x = held();
    let f = x.rig.nfs.lookup(&x.rig.root, b"f").expect("v3 LOOKUP");
    let write = |c: &NfsClient| c.write(&f, 0, b"v3", StableHow::FileSync, false);
    // Reading conflicts with no read delegation.
    x.rig.nfs.read(&f, 0, 10, false).expect("v3 READ");
    match write(&x.rig.nfs) {
        Err(NfsError::Status(Nfsstat3::JUKEBOX)) => {}
        other => panic!("v3 WRITE while delegated: {other:?}"),
    }
    x.recalled_and_returned();
    write(&x.rig.nfs).expect("v3 WRITE after DELEGRETURN");
    assert_eq!(x.rig.counter("deleg.waits"), 1);
    assert_eq!(x.rig.counter("nfs4_recalls"), 1);
    assert_eq!(x.rig.counter("nfs4_delegreturns"), 1);
    let Held { rig, holder, .. } = x;
    drop(holder);
    rig.stop();
}
