//! The NLM lock table and the NLM service over TCP, with a client lockd of our own that
//! receives NLMPROC4_GRANTED.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::XdrReader;

use super::locks::{Grant, GrantArgs, HostKey, Limits, LockTable, Want, OFFSET_MAX};
use super::proto::{self, CancArgs, Lock, LockArgs, Notify, ShareArgs, Stat, TestArgs, UnlockArgs};
use super::{NlmConfig, NlmServer};
use crate::nfs::admit::ExportTable;
use crate::nfs::exports::Exports;
use crate::nfs::handle_mac::HandleKey;
use crate::nfs::identity::Cred;
use crate::nfs::rpc_tcp::{
    lock, CallCtx, ClientAuth, Handled, RpcClient, RpcService, ServerConfig, TcpRpcServer, XdrBuf,
};
use crate::nfs::rpcbind::universal_addr;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::Store;
use crate::nfs::types::{CreateHow, Fh, Sattr3};

fn host(a: u8, name: &str) -> HostKey {
    HostKey {
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)),
        name: name.as_bytes().to_vec(),
    }
}

fn want(svid: i32, offset: u64, len: u64, exclusive: bool) -> Want {
    Want::of(svid, offset, len, exclusive).expect("range")
}

fn args(svid: i32) -> impl FnOnce() -> GrantArgs {
    move || GrantArgs {
        cookie: vec![svid as u8],
        caller: b"c".to_vec(),
        fh: b"fh".to_vec(),
        oh: b"oh".to_vec(),
        svid,
        offset: 0,
        len: 0,
        exclusive: true,
    }
}

const F: &[u8] = b"file-1";
const G: &[u8] = b"file-2";

fn lock_on(t: &mut LockTable, h: &HostKey, f: &[u8], w: Want, block: bool) -> (Stat, Vec<Grant>) {
    let mut g = Vec::new();
    let st = t.lock(h, f, w, block, args(w.svid), &mut g);
    (st, g)
}

#[test]
fn accepts_an_owners_ranges_split_and_merged_as_posix_does() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    assert_eq!(
        lock_on(&mut t, &a, F, want(1, 0, 100, true), false).0,
        Stat::GRANTED
    );
    let mut g = Vec::new();
    assert_eq!(
        t.unlock(&a, F, &want(1, 40, 20, false), &mut g),
        Stat::GRANTED
    );
    assert_eq!(t.locks(), 2, "[0, 39] and [60, 99]");
    assert_eq!(t.test(&b, F, &want(9, 45, 5, true)), None);
    let h = t.test(&b, F, &want(9, 30, 20, false)).expect("held");
    assert_eq!((h.offset, h.len, h.exclusive, h.svid), (0, 40, true, 1));
    // Filling the hole merges the three into one.
    assert_eq!(
        lock_on(&mut t, &a, F, want(1, 40, 20, true), false).0,
        Stat::GRANTED
    );
    assert_eq!(t.locks(), 1);
    let h = t.test(&b, F, &want(9, 99, 1, false)).expect("held");
    assert_eq!((h.offset, h.len), (0, 100));
    // A shared lock in the middle splits the exclusive one in three.
    assert_eq!(
        lock_on(&mut t, &a, F, want(1, 10, 10, false), false).0,
        Stat::GRANTED
    );
    assert_eq!(t.locks(), 3);
    assert_eq!(
        t.test(&b, F, &want(9, 12, 2, false)),
        None,
        "shared with shared"
    );
    assert!(t.test(&b, F, &want(9, 12, 2, true)).is_some());
}

#[test]
fn rejects_a_lock_another_owner_holds_in_the_way() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    assert_eq!(
        lock_on(&mut t, &a, F, want(1, 0, 0, false), false).0,
        Stat::GRANTED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(1, 5, 1, false), false).0,
        Stat::GRANTED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(1, 5, 1, true), false).0,
        Stat::DENIED
    );
    // Another process of the same host is another owner.
    assert_eq!(
        lock_on(&mut t, &a, F, want(2, 5, 1, true), false).0,
        Stat::DENIED
    );
    // The same name from another address is another host.
    let a_elsewhere = host(3, "a");
    assert_eq!(
        lock_on(&mut t, &a_elsewhere, F, want(1, 5, 1, true), false).0,
        Stat::DENIED
    );
    let mut g = Vec::new();
    assert_eq!(
        t.unlock(&a_elsewhere, F, &want(1, 0, 0, false), &mut g),
        Stat::GRANTED
    );
    assert!(
        t.test(&host(4, "d"), F, &want(1, 0, 1, true)).is_some(),
        "a's lock stays"
    );
    // Another file is free.
    assert_eq!(
        lock_on(&mut t, &b, G, want(1, 5, 1, true), false).0,
        Stat::GRANTED
    );
}

#[test]
fn accepts_a_blocked_request_granted_when_the_holder_unlocks() {
    let mut t = LockTable::new(Limits::default());
    let (a, b, c) = (host(1, "a"), host(2, "b"), host(3, "c"));
    assert_eq!(
        lock_on(&mut t, &a, F, want(1, 0, 10, true), false).0,
        Stat::GRANTED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(7, 5, 10, true), true).0,
        Stat::BLOCKED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(7, 5, 10, true), true).0,
        Stat::BLOCKED
    );
    assert_eq!(t.waiting(), 1, "a repeated request waits once");
    assert_eq!(
        lock_on(&mut t, &c, F, want(3, 100, 1, true), true).0,
        Stat::GRANTED
    );
    let mut g = Vec::new();
    assert_eq!(
        t.unlock(&a, F, &want(1, 0, 0, false), &mut g),
        Stat::GRANTED
    );
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].host.clone(), g[0].args.svid), (b.clone(), 7));
    assert_eq!(g[0].file, F);
    assert_eq!(t.waiting(), 0);
    let h = t
        .test(&a, F, &want(1, 0, 50, false))
        .expect("b holds it now");
    assert_eq!((h.svid, h.offset, h.len), (7, 5, 10));
    // b asks again (its poll) and is answered GRANTED, with no second grant.
    let (st, g) = lock_on(&mut t, &b, F, want(7, 5, 10, true), true);
    assert_eq!((st, g.len()), (Stat::GRANTED, 0));
}

#[test]
fn accepts_a_cancelled_request_forgotten() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    lock_on(&mut t, &a, F, want(1, 0, 10, true), false);
    assert_eq!(
        lock_on(&mut t, &b, F, want(7, 0, 10, false), true).0,
        Stat::BLOCKED
    );
    assert_eq!(t.cancel(&b, F, &want(7, 0, 10, false)), Stat::GRANTED);
    assert_eq!(t.hosts(), 1, "b holds nothing and is forgotten");
    let mut g = Vec::new();
    t.unlock(&a, F, &want(1, 0, 10, false), &mut g);
    assert!(g.is_empty());
    assert_eq!((t.hosts(), t.files(), t.locks()), (0, 0, 0));
}

#[test]
fn rejects_a_blocking_request_that_would_deadlock() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    lock_on(&mut t, &a, F, want(1, 0, 1, true), false);
    lock_on(&mut t, &b, G, want(2, 0, 1, true), false);
    assert_eq!(
        lock_on(&mut t, &a, G, want(1, 0, 1, true), true).0,
        Stat::BLOCKED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(2, 0, 1, true), true).0,
        Stat::DEADLCK
    );
    // Without a block the answer is DENIED, as ever.
    assert_eq!(
        lock_on(&mut t, &b, F, want(2, 0, 1, true), false).0,
        Stat::DENIED
    );
}

#[test]
fn rejects_requests_past_a_hosts_bounds() {
    let limits = Limits {
        hosts: 3,
        hosts_per_addr: 2,
        locks_per_host: 2,
        waiters_per_host: 1,
        shares_per_host: 1,
    };
    let mut t = LockTable::new(limits);
    let a = host(1, "a");
    lock_on(&mut t, &a, F, want(1, 0, 100, true), false);
    let mut g = Vec::new();
    assert_eq!(
        t.unlock(&a, F, &want(1, 10, 10, false), &mut g),
        Stat::GRANTED
    );
    assert_eq!(
        t.unlock(&a, F, &want(1, 50, 10, false), &mut g),
        Stat::DENIED_NOLOCKS
    );
    assert_eq!(t.locks(), 2, "the refused unlock changed nothing");
    assert_eq!(
        lock_on(&mut t, &a, G, want(1, 0, 1, true), false).0,
        Stat::DENIED_NOLOCKS
    );
    // Names per address, hosts in all.
    assert_eq!(
        lock_on(&mut t, &host(1, "a2"), G, want(1, 0, 1, true), false).0,
        Stat::GRANTED
    );
    assert_eq!(
        lock_on(&mut t, &host(1, "a3"), G, want(1, 5, 1, true), false).0,
        Stat::DENIED_NOLOCKS
    );
    assert_eq!(
        lock_on(&mut t, &host(2, "b"), G, want(1, 5, 1, true), false).0,
        Stat::GRANTED
    );
    assert_eq!(
        lock_on(&mut t, &host(3, "c"), G, want(1, 6, 1, true), false).0,
        Stat::DENIED_NOLOCKS
    );
    // Waiting requests.
    let b = host(2, "b");
    assert_eq!(
        lock_on(&mut t, &b, F, want(2, 0, 1, true), true).0,
        Stat::BLOCKED
    );
    assert_eq!(
        lock_on(&mut t, &b, F, want(3, 0, 1, true), true).0,
        Stat::DENIED_NOLOCKS
    );
    // Shares.
    assert_eq!(t.share(&b, F, b"o1", 0, 1), Stat::GRANTED);
    assert_eq!(t.share(&b, F, b"o2", 0, 1), Stat::DENIED_NOLOCKS);
}

#[test]
fn rejects_ranges_past_the_largest_offset_with_fbig() {
    assert_eq!(Want::of(1, OFFSET_MAX + 1, 0, false), Err(Stat::FBIG));
    assert_eq!(Want::of(1, OFFSET_MAX, 2, false), Err(Stat::FBIG));
    assert_eq!(Want::of(1, 1, u64::MAX, false), Err(Stat::FBIG));
    let w = Want::of(1, OFFSET_MAX, 1, false).expect("the last octet");
    assert_eq!((w.start, w.end), (OFFSET_MAX, OFFSET_MAX));
    let w = Want::of(1, 7, 0, false).expect("to the end");
    assert_eq!(w.end, OFFSET_MAX);
}

#[test]
fn accepts_free_all_releasing_a_host_and_granting_its_waiters() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    lock_on(&mut t, &a, F, want(1, 0, 0, true), false);
    lock_on(&mut t, &a, G, want(1, 0, 0, true), false);
    assert_eq!(t.share(&a, F, b"oh", 3, 3), Stat::GRANTED);
    assert_eq!(
        lock_on(&mut t, &b, G, want(5, 0, 1, false), true).0,
        Stat::BLOCKED
    );
    let mut g = Vec::new();
    t.free_host(&host(9, "a"), &mut g);
    assert!(
        g.is_empty() && t.locks() == 2,
        "another address cannot free a's"
    );
    t.free_host(&a, &mut g);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].file, G);
    assert_eq!((t.hosts(), t.locks(), t.waiting()), (1, 1, 0));
    assert_eq!(
        t.share(&b, F, b"x", 3, 3),
        Stat::GRANTED,
        "a's share went too"
    );
}

#[test]
fn rejects_shares_whose_access_meets_another_owners_deny_mode() {
    let mut t = LockTable::new(Limits::default());
    let (a, b) = (host(1, "a"), host(2, "b"));
    // a reads and denies writers.
    assert_eq!(t.share(&a, F, b"a", 2, 1), Stat::GRANTED);
    assert_eq!(t.share(&b, F, b"b", 0, 2), Stat::DENIED, "b would write");
    assert_eq!(
        t.share(&b, F, b"b", 1, 1),
        Stat::DENIED,
        "b denies readers, a reads"
    );
    assert_eq!(t.share(&b, F, b"b", 0, 1), Stat::GRANTED);
    // The same owner changes its own reservation.
    assert_eq!(t.share(&a, F, b"a", 0, 3), Stat::GRANTED);
    assert_eq!(t.unshare(&a, F, b"a"), Stat::GRANTED);
    assert_eq!(t.share(&host(3, "c"), F, b"c", 0, 3), Stat::GRANTED);
}

// ----------------------------------------------------------------------------------------
// The service over TCP.

/// A memory store exported to 127.0.0.1 (root squashed) with `f` (mode 0666, uid 0),
/// `private` (mode 0600, uid 1000) and `ro` (mode 0644, uid 0); the wire handles of `f`,
/// `private`, the root and `ro`.
pub(super) fn exports() -> (Arc<ExportTable>, Fh, Fh, Fh, Fh) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions {
        capacity: 1 << 20,
        max_files: 100,
        ..MemoryOptions::default()
    }));
    let root = store.root();
    let how = |mode| {
        CreateHow::Unchecked(Sattr3 {
            mode: Some(mode),
            ..Sattr3::default()
        })
    };
    let f = store
        .create(&Cred::ROOT, &root, b"f", &how(0o666))
        .expect("f");
    let ro = store
        .create(&Cred::ROOT, &root, b"ro", &how(0o644))
        .expect("ro");
    let p = store
        .create(&Cred::ROOT, &root, b"private", &how(0o600))
        .expect("private");
    let own = Sattr3 {
        uid: Some(1000),
        gid: Some(1000),
        ..Sattr3::default()
    };
    store.setattr(&Cred::ROOT, &p, &own, None).expect("chown");
    let ex = Exports::parse("/ 127.0.0.1(rw)").expect("exports");
    let table = ExportTable::new(
        HandleKey::from_bytes([5; 16]),
        vec![(ex.list()[0].clone(), store)],
    )
    .expect("table");
    let share = Arc::clone(&table.shares()[0]);
    let seal = |fh: &Fh| share.seal(fh).expect("sealed");
    let (f, p, r, ro) = (seal(&f), seal(&p), seal(&root), seal(&ro));
    (Arc::new(table), f, p, r, ro)
}

/// A client lockd: rpcbind answering where it listens, and NLMPROC4_GRANTED recorded and
/// answered with `answer`.
/// A GRANTED call as the client lockd saw it: cookie, svid, offset, length.
type Seen = (Vec<u8>, i32, u64, u64);

struct ClientLockd {
    granted: Mutex<Vec<Seen>>,
    answer: Mutex<Stat>,
}

impl RpcService for ClientLockd {
    fn program(&self) -> u32 {
        proto::NLM_PROG
    }
    fn versions(&self) -> (u32, u32) {
        (4, 4)
    }
    fn call(&self, _: &CallCtx, p: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
        if p != proto::GRANTED {
            return AcceptStat::ProcUnavail.into();
        }
        let Ok(a) = proto::decode_test(args) else {
            return AcceptStat::GarbageArgs.into();
        };
        lock(&self.granted).push((a.cookie.to_vec(), a.lock.svid, a.lock.offset, a.lock.len));
        proto::put_res(out, a.cookie, *lock(&self.answer));
        AcceptStat::Success.into()
    }
}

/// An rpcbind answering GETADDR with the address of each program it knows.
pub(super) struct Rpcbind(pub(super) Vec<(u32, String)>);

impl RpcService for Rpcbind {
    fn program(&self) -> u32 {
        100_000
    }
    fn versions(&self) -> (u32, u32) {
        (3, 4)
    }
    fn call(&self, _: &CallCtx, p: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
        let mut r = XdrReader::new(args);
        match (p, r.get_u32(), r.get_u32()) {
            (3, Ok(prog), Ok(_)) => match self.0.iter().find(|(p, _)| *p == prog) {
                Some((_, a)) => out.put_str(a),
                None => out.put_str(""),
            },
            _ => return AcceptStat::ProcUnavail.into(),
        }
        AcceptStat::Success.into()
    }
}

struct World {
    nlm: NlmServer,
    lockd: Arc<ClientLockd>,
    _servers: (TcpRpcServer, TcpRpcServer),
    f: Fh,
    private: Fh,
    root: Fh,
    ro: Fh,
}

fn world(grace: Option<Duration>) -> World {
    let (table, f, private, root, ro) = exports();
    let lockd = Arc::new(ClientLockd {
        granted: Mutex::new(Vec::new()),
        answer: Mutex::new(Stat::GRANTED),
    });
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let l = TcpRpcServer::start(local, lockd.clone(), ServerConfig::default()).expect("lockd");
    let rb = Arc::new(Rpcbind(vec![(
        proto::NLM_PROG,
        universal_addr(&l.local_addr()),
    )]));
    let r = TcpRpcServer::start(local, rb, ServerConfig::default()).expect("rpcbind");
    let cfg = NlmConfig {
        grace,
        rpcbind_port: r.local_addr().port(),
        ..NlmConfig::default()
    };
    let nlm =
        NlmServer::start(local, Arc::new(move || Arc::clone(&table)), cfg, None).expect("nlm");
    World {
        nlm,
        lockd,
        _servers: (l, r),
        f,
        private,
        root,
        ro,
    }
}

pub(super) fn the_lock<'a>(fh: &'a Fh, svid: i32, offset: u64, len: u64) -> Lock<'a> {
    Lock {
        caller: b"client-1",
        fh: fh.as_bytes(),
        oh: b"owner",
        svid,
        offset,
        len,
    }
}

fn client(w: &World, auth: ClientAuth) -> RpcClient {
    client_of(&w.nlm, auth)
}

/// A client of `nlm` with credential `auth`.
pub(super) fn client_of(nlm: &NlmServer, auth: ClientAuth) -> RpcClient {
    let t = Duration::from_secs(5);
    let mut c = RpcClient::connect(nlm.local_addr(), t, t).expect("connect");
    c.set_auth(auth);
    c
}

pub(super) fn call_lock(
    c: &mut RpcClient,
    l: Lock<'_>,
    block: bool,
    exclusive: bool,
    reclaim: bool,
) -> Stat {
    let a = LockArgs {
        cookie: b"ck",
        block,
        exclusive,
        lock: l,
        reclaim,
        state: 1,
    };
    let res = c
        .call(proto::NLM_PROG, 4, proto::LOCK, &proto::encode_lock(&a))
        .expect("LOCK");
    let (cookie, st) = proto::decode_res(&res).expect("nlm4_res");
    assert_eq!(cookie, b"ck", "the cookie is echoed");
    st
}

fn call_unlock(c: &mut RpcClient, l: Lock<'_>) -> Stat {
    let a = UnlockArgs {
        cookie: b"u",
        lock: l,
    };
    let res = c
        .call(proto::NLM_PROG, 4, proto::UNLOCK, &proto::encode_unlock(&a))
        .expect("UNLOCK");
    proto::decode_res(&res).expect("nlm4_res").1
}

pub(super) fn call_test(
    c: &mut RpcClient,
    l: Lock<'_>,
    exclusive: bool,
) -> (Stat, Option<proto::Holder>) {
    let a = TestArgs {
        cookie: b"t",
        exclusive,
        lock: l,
    };
    let res = c
        .call(proto::NLM_PROG, 4, proto::TEST, &proto::encode_test(&a))
        .expect("TEST");
    let (_, st, h) = proto::decode_testres(&res).expect("nlm4_testres");
    (st, h)
}

pub(super) fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn accepts_lock_test_unlock_and_a_granted_call_to_the_waiting_client() {
    let w = world(None);
    let mut c = client(&w, ClientAuth::SysRoot);
    assert_eq!(
        call_lock(&mut c, the_lock(&w.f, 1, 0, 10), false, true, false),
        Stat::GRANTED
    );
    let (st, h) = call_test(&mut c, the_lock(&w.f, 2, 5, 1), false);
    let h = h.expect("holder");
    assert_eq!(
        (st, h.svid, h.offset, h.len, h.exclusive),
        (Stat::DENIED, 1, 0, 10, true)
    );
    assert_eq!(
        call_lock(&mut c, the_lock(&w.f, 2, 5, 1), false, false, false),
        Stat::DENIED
    );
    assert_eq!(
        call_lock(&mut c, the_lock(&w.f, 2, 5, 1), true, false, false),
        Stat::BLOCKED
    );
    assert_eq!(call_unlock(&mut c, the_lock(&w.f, 1, 0, 0)), Stat::GRANTED);
    wait_for("GRANTED", || !lock(&w.lockd.granted).is_empty());
    assert_eq!(lock(&w.lockd.granted)[0], (b"ck".to_vec(), 2, 5, 1));
    wait_for("the grant counted", || {
        super::NlmStats::get(&w.nlm.stats().grants_sent) == 1
    });
    assert_eq!(
        call_test(&mut c, the_lock(&w.f, 3, 0, 0), true).0,
        Stat::DENIED,
        "2 holds it"
    );
    assert_eq!(w.nlm.sizes().locks, 1);
}

#[test]
fn accepts_a_refused_grant_as_the_lock_released() {
    let w = world(None);
    *lock(&w.lockd.answer) = Stat::DENIED;
    let mut c = client(&w, ClientAuth::SysRoot);
    call_lock(&mut c, the_lock(&w.f, 1, 0, 0), false, true, false);
    assert_eq!(
        call_lock(&mut c, the_lock(&w.f, 2, 0, 0), true, true, false),
        Stat::BLOCKED
    );
    call_unlock(&mut c, the_lock(&w.f, 1, 0, 0));
    wait_for("the refusal", || {
        super::NlmStats::get(&w.nlm.stats().grants_refused) == 1
    });
    wait_for("the lock released", || w.nlm.sizes().locks == 0);
    assert_eq!(
        call_test(&mut c, the_lock(&w.f, 3, 0, 0), true).0,
        Stat::GRANTED
    );
}

#[test]
fn rejects_handles_callers_and_files_nfs_would_refuse() {
    let w = world(None);
    let mut root = client(&w, ClientAuth::SysRoot);
    let mut user = client(&w, ClientAuth::Sys(1000, 1000));
    let mut other = client(&w, ClientAuth::Sys(2000, 2000));
    // The owner may lock its own 0600 file; another user may not; root is squashed.
    assert_eq!(
        call_lock(&mut user, the_lock(&w.private, 1, 0, 0), false, true, false),
        Stat::GRANTED
    );
    assert_eq!(
        call_lock(
            &mut other,
            the_lock(&w.private, 1, 0, 0),
            false,
            false,
            false
        ),
        Stat::FAILED
    );
    assert_eq!(
        call_lock(
            &mut root,
            the_lock(&w.private, 1, 0, 0),
            false,
            false,
            false
        ),
        Stat::FAILED
    );
    // Anyone may take a shared lock of the 0644 file (read permission), only those who may
    // write it an exclusive one (Linux's nlm_fopen opens the file for writing then: write
    // permission, the owner's override); TEST alike.
    assert_eq!(
        call_lock(&mut other, the_lock(&w.ro, 1, 0, 0), false, false, false),
        Stat::GRANTED
    );
    // (The same owner: its own shared lock is in no one's way.)
    assert_eq!(
        call_lock(&mut other, the_lock(&w.ro, 1, 0, 0), false, true, false),
        Stat::FAILED
    );
    assert_eq!(
        call_test(&mut other, the_lock(&w.ro, 1, 0, 0), true).0,
        Stat::FAILED
    );
    assert_eq!(
        call_lock(&mut other, the_lock(&w.f, 3, 0, 0), false, true, false),
        Stat::GRANTED,
        "the 0666 file"
    );
    // A directory, a forged handle, a handle too long for NFSv3, a range too far.
    assert_eq!(
        call_lock(&mut root, the_lock(&w.root, 1, 0, 0), false, false, false),
        Stat::FAILED
    );
    let mut forged = w.f.as_bytes().to_vec();
    if let Some(b) = forged.last_mut() {
        *b ^= 1;
    }
    let forged = Fh::new(&forged).expect("fh");
    assert_eq!(
        call_lock(&mut root, the_lock(&forged, 1, 0, 0), false, false, false),
        Stat::STALE_FH
    );
    assert_eq!(
        call_test(&mut root, the_lock(&forged, 1, 0, 0), false).0,
        Stat::STALE_FH
    );
    let long = Lock {
        fh: &[7u8; 100],
        ..the_lock(&w.f, 1, 0, 0)
    };
    assert_eq!(
        call_lock(&mut root, long, false, false, false),
        Stat::STALE_FH
    );
    assert_eq!(
        call_lock(
            &mut other,
            the_lock(&w.f, 1, OFFSET_MAX, 2),
            false,
            false,
            false
        ),
        Stat::FBIG
    );
}

#[test]
fn rejects_requests_in_the_grace_period_but_reclaims() {
    let w = world(Some(Duration::from_secs(600)));
    let mut c = client(&w, ClientAuth::SysRoot);
    let l = the_lock(&w.f, 1, 0, 0);
    assert_eq!(
        call_lock(&mut c, l, false, true, false),
        Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(call_test(&mut c, l, true).0, Stat::DENIED_GRACE_PERIOD);
    assert_eq!(
        call_lock(&mut c, l, false, true, true),
        Stat::GRANTED,
        "a reclaim"
    );
    assert_eq!(call_unlock(&mut c, l), Stat::DENIED_GRACE_PERIOD);
    let after = world(None);
    let mut c = client(&after, ClientAuth::SysRoot);
    let l = the_lock(&after.f, 1, 0, 0);
    assert_eq!(
        call_lock(&mut c, l, false, true, true),
        Stat::DENIED_GRACE_PERIOD,
        "no grace: no reclaim"
    );
}

#[test]
fn accepts_cancel_share_unshare_and_free_all_over_the_wire() {
    let w = world(None);
    let mut c = client(&w, ClientAuth::SysRoot);
    call_lock(&mut c, the_lock(&w.f, 1, 0, 0), false, true, false);
    assert_eq!(
        call_lock(&mut c, the_lock(&w.f, 2, 0, 0), true, true, false),
        Stat::BLOCKED
    );
    let cancel = CancArgs {
        cookie: b"c",
        block: true,
        exclusive: true,
        lock: the_lock(&w.f, 2, 0, 0),
    };
    let res = c
        .call(
            proto::NLM_PROG,
            4,
            proto::CANCEL,
            &proto::encode_cancel(&cancel),
        )
        .expect("CANCEL");
    assert_eq!(proto::decode_res(&res).expect("res").1, Stat::GRANTED);
    assert_eq!(w.nlm.sizes().waiting, 0);
    let share = |oh: &'static [u8], mode, access| ShareArgs {
        cookie: b"s",
        caller: b"client-1",
        fh: w.f.as_bytes(),
        oh,
        mode,
        access,
        reclaim: false,
    };
    let mut sh = |p, a: ShareArgs<'_>| {
        let res = c
            .call(proto::NLM_PROG, 4, p, &proto::encode_share(&a))
            .expect("SHARE");
        proto::decode_shareres(&res).expect("shareres").1
    };
    assert_eq!(sh(proto::SHARE, share(b"o1", 3, 1)), Stat::GRANTED);
    assert_eq!(sh(proto::SHARE, share(b"o2", 0, 1)), Stat::DENIED);
    assert_eq!(sh(proto::UNSHARE, share(b"o1", 0, 0)), Stat::GRANTED);
    assert_eq!(sh(proto::SHARE, share(b"o2", 0, 1)), Stat::GRANTED);
    let n = Notify {
        name: b"client-1",
        state: 3,
    };
    c.call(
        proto::NLM_PROG,
        4,
        proto::FREE_ALL,
        &proto::encode_notify(&n),
    )
    .expect("FREE_ALL");
    assert_eq!(w.nlm.sizes(), super::TableSizes::default());
}

#[test]
fn rejects_arguments_that_do_not_decode_and_unserved_procedures() {
    let w = world(None);
    let mut c = client(&w, ClientAuth::SysRoot);
    let mut good = proto::encode_lock(&LockArgs {
        cookie: b"",
        block: false,
        exclusive: false,
        lock: the_lock(&w.f, 1, 0, 0),
        reclaim: false,
        state: 0,
    });
    let garbage = |r: std::io::Result<Vec<u8>>| {
        format!("{:?}", r.expect_err("refused")).contains("GarbageArgs")
    };
    good.push(0);
    assert!(
        garbage(c.call(proto::NLM_PROG, 4, proto::LOCK, &good)),
        "trailing octets"
    );
    good.truncate(good.len() - 5);
    assert!(
        garbage(c.call(proto::NLM_PROG, 4, proto::LOCK, &good)),
        "truncated"
    );
    let unserved = |r: std::io::Result<Vec<u8>>| {
        format!("{:?}", r.expect_err("refused")).contains("ProcUnavail")
    };
    for p in [proto::GRANTED, 7, 12, 24] {
        assert!(
            unserved(c.call(proto::NLM_PROG, 4, p, &[])),
            "procedure {p}"
        );
    }
    let mismatch = format!("{:?}", c.call(proto::NLM_PROG, 3, 0, &[]).expect_err("v3"));
    assert!(mismatch.contains("ProgMismatch"), "{mismatch}");
}
