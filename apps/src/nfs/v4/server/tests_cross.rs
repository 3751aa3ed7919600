//! NFSv4.1 locks and NLM (NFSv3) locks on one file conflict, both ways, through
//! [`crate::nfs::cross_locks::CrossLocks`]; an NLM request waiting behind an NFSv4.1 lock is
//! granted when LOCKU releases it.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_cross`.
//! Recovery: a failure names the operation and the status seen.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::xdr::XdrReader;

use super::lock::DENIED;
use super::state::Limits;
use super::tests::{lock_new, lock_type, open_create, server, A, H};
use super::xdr::st;
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::nlm::proto::{self, Lock, LockArgs, Stat, TestArgs, UnlockArgs};
use crate::nfs::nlm::{NlmConfig, NlmServer};
use crate::nfs::rpc_tcp::RpcClient;
use crate::nfs::v4::op;

fn nlm_lock<'a>(fh: &'a [u8], svid: i32, offset: u64, len: u64) -> Lock<'a> {
    Lock {
        caller: b"v3-client",
        fh,
        oh: b"oh",
        svid,
        offset,
        len,
    }
}

fn nlm_call(c: &mut RpcClient, p: u32, args: &[u8]) -> Vec<u8> {
    c.call(proto::NLM_PROG, 4, p, args).expect("NLM call")
}

fn lock3(c: &mut RpcClient, l: Lock<'_>, block: bool) -> Stat {
    let a = LockArgs {
        cookie: b"k",
        block,
        exclusive: true,
        lock: l,
        reclaim: false,
        state: 1,
    };
    proto::decode_res(&nlm_call(c, proto::LOCK, &proto::encode_lock(&a)))
        .expect("res")
        .1
}

/// One server with both lock managers: the NLM server, a client of it, NFSv4.1 client `a`
/// with file `f` open (create, read and write), its open stateid and wire handle.
struct Both {
    nlm: NlmServer,
    v3: RpcClient,
    a: H,
    open: [u8; 16],
    fh: Vec<u8>,
}

fn both() -> Both {
    let (srv, now, store) = server("rw,no_root_squash", Limits::default());
    let cross = CrossLocks::new();
    srv.set_cross(Arc::clone(&cross));
    let table = srv.exports();
    let cfg = NlmConfig {
        // Nobody answers there: a grant's GRANTED call fails and is tried later.
        rpcbind_port: 9,
        ..NlmConfig::default()
    };
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let exports = Arc::new(move || Arc::clone(&table));
    let nlm = NlmServer::start(local, exports, cfg, Some(cross)).expect("nlm");
    let t = Duration::from_secs(5);
    let v3 = RpcClient::connect(nlm.local_addr(), t, t).expect("connect");
    let mut a = H::on(srv, now, store, b"client-a", super::tests::auth_sys(0, 0));
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    let open: [u8; 16] = r.last[..16].try_into().expect("open stateid");
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        A::op(op::GETFH),
    ]);
    let fh = XdrReader::new(&r.last)
        .get_opaque(128)
        .expect("GETFH")
        .to_vec();
    Both {
        nlm,
        v3,
        a,
        open,
        fh,
    }
}

#[test]
fn rejects_locks_the_other_protocol_holds_and_grants_a_waiter_on_locku() {
    let Both {
        nlm,
        mut v3,
        mut a,
        open,
        fh,
    } = both();
    let on_f = |x: A| vec![A::op(op::PUTFH).opaque(&fh), x];

    // NFSv4.1 holds [0, 10) for writing: NLM's LOCK and TEST meet it.
    let r = a.raw(&on_f(lock_new(a.clientid, &open, b"la", true, 0, 10)));
    assert_eq!(r.status, st::OK);
    let lsid: [u8; 16] = r.last[..16].try_into().expect("lock stateid");
    assert_eq!(lock3(&mut v3, nlm_lock(&fh, 1, 5, 1), false), Stat::DENIED);
    let t = TestArgs {
        cookie: b"t",
        exclusive: false,
        lock: nlm_lock(&fh, 1, 9, 100),
    };
    let (_, stat, holder) =
        proto::decode_testres(&nlm_call(&mut v3, proto::TEST, &proto::encode_test(&t)))
            .expect("testres");
    let h = holder.expect("the NFSv4.1 lock");
    assert_eq!(
        (stat, h.offset, h.len, h.exclusive, h.svid),
        (Stat::DENIED, 0, 10, true, 0)
    );
    assert_eq!(
        lock3(&mut v3, nlm_lock(&fh, 1, 10, 5), false),
        Stat::GRANTED,
        "beside it"
    );

    // NLM holds [10, 15): NFSv4.1's LOCK and LOCKT meet it, with an empty owner.
    let r = a.raw(&on_f(lock_new(a.clientid, &open, b"lb", false, 12, 1)));
    assert_eq!(r.status, DENIED);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(
        (
            x.get_u64().unwrap(),
            x.get_u64().unwrap(),
            x.get_u32().unwrap()
        ),
        (10, 5, 2)
    );
    assert_eq!(
        (x.get_u64().unwrap(), x.get_opaque(1024).unwrap()),
        (0, &b""[..])
    );
    let lockt = A::op(op::LOCKT)
        .u32(lock_type(false))
        .u64(0)
        .u64(u64::MAX)
        .u64(a.clientid)
        .opaque(b"lc");
    assert_eq!(a.status(&on_f(lockt)), DENIED);

    // A blocking NLM request behind the NFSv4.1 lock gets it when LOCKU releases it.
    assert_eq!(lock3(&mut v3, nlm_lock(&fh, 2, 0, 5), true), Stat::BLOCKED);
    assert_eq!(nlm.sizes().waiting, 1);
    let locku = A::op(op::LOCKU).u32(2).u32(0).fixed(&lsid).u64(0).u64(10);
    assert_eq!(a.status(&on_f(locku)), st::OK);
    let s = nlm.sizes();
    assert_eq!((s.waiting, s.locks), (0, 2), "granted on the release");
    let u = UnlockArgs {
        cookie: b"u",
        lock: nlm_lock(&fh, 2, 0, 0),
    };
    nlm_call(&mut v3, proto::UNLOCK, &proto::encode_unlock(&u));
    assert_eq!(
        a.status(&on_f(lock_new(a.clientid, &open, b"ld", true, 0, 5))),
        st::OK
    );
}

#[test]
fn accepts_an_nlm_waiter_granted_when_the_nfsv41_holder_expires() {
    let Both {
        nlm,
        mut v3,
        mut a,
        open,
        fh,
    } = both();
    let lock = lock_new(a.clientid, &open, b"la", true, 0, 10);
    assert_eq!(a.status(&[A::op(op::PUTFH).opaque(&fh), lock]), st::OK);
    assert_eq!(lock3(&mut v3, nlm_lock(&fh, 2, 0, 5), true), Stat::BLOCKED);
    // The NFSv4.1 client goes silent: a lease later the sweep (no NFSv4.1 call needed)
    // removes it with its lock, and the NLM request waiting for it is granted.
    let lease = u64::from(a.srv.config().limits.lease_secs) * 1000;
    a.now
        .fetch_add(lease + 1, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(nlm.sizes().waiting, 1, "still waiting before the sweep");
    a.srv.sweep();
    let s = nlm.sizes();
    assert_eq!(
        (s.waiting, s.locks),
        (0, 1),
        "granted when the holder expired"
    );
}
