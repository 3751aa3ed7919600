//! Unit tests of the NFSv4.1 server: sessions, the slot table as reply cache, minor versions,
//! operations outside a session, leases, table bounds and hostile COMPOUNDs. The harness
//! ([`H`]) drives [`Nfs41::compound`] with COMPOUNDs made by the client codec
//! ([`crate::nfs::v4::encode_compound_minor`]) or, for operations the client does not send,
//! by the raw encoder [`A`]; file operations are in `tests_ops.rs`.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthFlavor, AuthSysParams, OpaqueAuth};
use rpcrdma_engine::xdr::XdrReader;

use super::state::Limits;
use super::xdr::st;
use super::{CallCx, Config, Nfs41};
use crate::nfs::admit::ExportTable;
use crate::nfs::exports::Exports;
use crate::nfs::handle_mac::HandleKey;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::Store;
use crate::nfs::v4::{
    decode_compound, encode_compound_minor, op, ChannelAttrs, CompoundReply, Op, OpResult,
    ReadPlacement,
};

/// A raw argument encoder for operations the client codec does not have.
#[derive(Default, Clone)]
pub struct A(pub Vec<u8>);

impl A {
    pub fn op(n: u32) -> A {
        A(n.to_be_bytes().to_vec())
    }
    pub fn u32(mut self, v: u32) -> A {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> A {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn fixed(mut self, d: &[u8]) -> A {
        self.0.extend_from_slice(d);
        self.0.resize(self.0.len() + (4 - d.len() % 4) % 4, 0);
        self
    }
    pub fn opaque(self, d: &[u8]) -> A {
        self.u32(d.len() as u32).fixed(d)
    }
}

/// A raw reply: overall status, each result's operation and status, and the body of the
/// last result (the bodies before it must be of operations [`walk`] knows).
#[derive(Debug)]
pub struct Raw {
    pub status: u32,
    pub results: Vec<(u32, u32)>,
    pub last: Vec<u8>,
}

/// Reads a COMPOUND4res whose results before the last are SEQUENCE, PUTFH, PUTROOTFH,
/// LOOKUP, LOOKUPP, SAVEFH, RESTOREFH or GETFH.
pub fn walk(b: &[u8]) -> Raw {
    let mut r = XdrReader::new(b);
    let status = r.get_u32().unwrap();
    r.get_opaque(1024).unwrap();
    let n = r.get_u32().unwrap();
    let mut results = Vec::new();
    let mut last = Vec::new();
    for i in 0..n {
        let (o, s) = (r.get_u32().unwrap(), r.get_u32().unwrap());
        results.push((o, s));
        if i + 1 == n {
            last = r.rest().to_vec();
            break;
        }
        if s == 0 {
            match o {
                op::SEQUENCE => r.skip(36).unwrap(),
                op::GETFH => {
                    r.get_opaque(128).unwrap();
                }
                _ => {}
            }
        }
    }
    Raw {
        status,
        results,
        last,
    }
}

/// The AUTH_SYS body of `uid`/`gid`.
pub fn auth_sys(uid: u32, gid: u32) -> Vec<u8> {
    let p = AuthSysParams {
        stamp: 1,
        machinename: b"test",
        uid,
        gid,
        gids: &[],
    };
    let mut b = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut b).unwrap();
    b.truncate(n);
    b
}

/// A server, a virtual clock, and one client with a session.
pub struct H {
    pub srv: Arc<Nfs41>,
    pub now: Arc<AtomicU64>,
    pub auth: Vec<u8>,
    pub sid: [u8; 16],
    pub seq: u32,
    pub clientid: u64,
    pub store: Arc<dyn Store>,
    /// The client's address (10.0.0.1 unless a test moves it).
    pub peer: IpAddr,
    /// The minor version of its COMPOUNDs (1 unless made with [`H::on_minor`]).
    pub minor: u32,
}

/// A server exporting one memory store as `/` with `opts`, limits `lim`.
pub fn server(opts: &str, lim: Limits) -> (Arc<Nfs41>, Arc<AtomicU64>, Arc<dyn Store>) {
    server_cb(opts, lim, None)
}

/// [`server`] sending callbacks through `callbacks`.
pub fn server_cb(
    opts: &str,
    lim: Limits,
    callbacks: Option<Arc<dyn super::deleg::Callbacks>>,
) -> (Arc<Nfs41>, Arc<AtomicU64>, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions::default()));
    server_on(opts, lim, callbacks, store)
}

/// [`server_cb`] exporting `store`.
pub fn server_on(
    opts: &str,
    lim: Limits,
    callbacks: Option<Arc<dyn super::deleg::Callbacks>>,
    store: Arc<dyn Store>,
) -> (Arc<Nfs41>, Arc<AtomicU64>, Arc<dyn Store>) {
    let ex = Exports::parse(&format!("/ *({opts})")).unwrap();
    let table = ExportTable::new(
        HandleKey::from_bytes([7; 16]),
        vec![(ex.list()[0].clone(), Arc::clone(&store))],
    )
    .unwrap();
    let (srv, now) = server_over(Arc::new(table), lim, callbacks);
    (srv, now, store)
}

/// A server of `table` (shared with another service) on virtual time.
pub fn server_over(
    table: Arc<ExportTable>,
    lim: Limits,
    callbacks: Option<Arc<dyn super::deleg::Callbacks>>,
) -> (Arc<Nfs41>, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(1_000));
    let n2 = Arc::clone(&now);
    let cfg = Config {
        limits: lim,
        max_io: 64 << 10,
        clock: Arc::new(move || n2.load(Ordering::SeqCst)),
        pool: None,
        callbacks,
    };
    (Nfs41::new(table, cfg), now)
}

pub fn fore() -> ChannelAttrs {
    ChannelAttrs {
        header_pad: 0,
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 1 << 20,
        max_ops: 1000,
        max_requests: 1000,
        rdma_ird: None,
    }
}

impl H {
    /// A client with a session on a fresh server exporting with `opts` (root not squashed).
    pub fn new(opts: &str) -> H {
        let (srv, now, store) = server(opts, Limits::default());
        H::on(srv, now, store, b"client-a", auth_sys(0, 0))
    }

    /// Creates `name` in the export's root with OPEN (share both, no deny) and returns the
    /// open stateid.
    pub fn create_in_root(&mut self, name: &[u8]) -> [u8; 16] {
        let root = self.root();
        let r = self.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_create(self.clientid, name),
        ]);
        assert_eq!(r.status, st::OK, "OPEN (create) of {name:?}");
        r.last[..16].try_into().expect("an open stateid")
    }

    /// A client `owner` with credential `auth` with a session on `srv`.
    pub fn on(
        srv: Arc<Nfs41>,
        now: Arc<AtomicU64>,
        store: Arc<dyn Store>,
        owner: &[u8],
        auth: Vec<u8>,
    ) -> H {
        let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        H::on_at(srv, now, store, owner, auth, peer)
    }

    /// [`H::on`] from address `peer`.
    pub fn on_at(
        srv: Arc<Nfs41>,
        now: Arc<AtomicU64>,
        store: Arc<dyn Store>,
        owner: &[u8],
        auth: Vec<u8>,
        peer: IpAddr,
    ) -> H {
        H::on_minor(srv, now, store, owner, auth, peer, 1)
    }

    /// [`H::on_at`] with every COMPOUND of minor version `minor`, EXCHANGE_ID included.
    pub fn on_minor(
        srv: Arc<Nfs41>,
        now: Arc<AtomicU64>,
        store: Arc<dyn Store>,
        owner: &[u8],
        auth: Vec<u8>,
        peer: IpAddr,
        minor: u32,
    ) -> H {
        let mut h = H {
            srv,
            now,
            auth,
            sid: [0; 16],
            seq: 0,
            clientid: 0,
            store,
            peer,
            minor,
        };
        let r = h.plain(&[Op::ExchangeId {
            verifier: [1; 8],
            owner,
            flags: 0,
        }]);
        let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone())
        else {
            panic!("EXCHANGE_ID: {r:?}");
        };
        let r = h.plain(&[Op::CreateSession {
            clientid: x.clientid,
            sequence: x.sequence,
            flags: 2,
            fore: fore(),
            back: fore(),
            cb_program: 0x4000_0000,
        }]);
        let Some(OpResult::CreateSession(cs)) =
            r.find(op::CREATE_SESSION).map(|o| o.result.clone())
        else {
            panic!("CREATE_SESSION: {r:?}");
        };
        h.sid = cs.session;
        h.clientid = x.clientid;
        h
    }

    pub fn cx(&self) -> CallCx<'_> {
        CallCx {
            peer: self.peer,
            cred: OpaqueAuth {
                flavor: AuthFlavor::Sys,
                body: &self.auth,
            },
            conn: 7,
        }
    }

    /// SEQUENCE and `ops` from this client under AUTH_NONE.
    pub fn as_none(&mut self, ops: &[A]) -> Raw {
        let b = self.raw_bytes(ops, true);
        let cx = CallCx {
            cred: OpaqueAuth::NONE,
            ..self.cx()
        };
        walk(&self.send_as(&cx, &b))
    }

    /// Sends COMPOUND4args octets; the state index must then hold what the tables hold.
    pub fn send(&self, b: &[u8]) -> Vec<u8> {
        self.send_as(&self.cx(), b)
    }

    /// [`H::send`] with the call context `cx`.
    pub fn send_as(&self, cx: &CallCx<'_>, b: &[u8]) -> Vec<u8> {
        let out = self.srv.compound(cx, b).expect("header decodes");
        self.srv.state().check_index();
        out
    }

    /// A COMPOUND without SEQUENCE, decoded by the client codec.
    pub fn plain(&self, ops: &[Op<'_>]) -> CompoundReply {
        let e = encode_compound_minor("t", self.minor, ops);
        decode_compound(&self.send(&e.bytes), ops, ReadPlacement::Inline).unwrap()
    }

    /// The next SEQUENCE of slot 0.
    pub fn sequence(&mut self, cache_this: bool) -> Op<'static> {
        self.seq += 1;
        Op::Sequence {
            session: self.sid,
            sequence: self.seq,
            slot: 0,
            highest_slot: 0,
            cache_this,
        }
    }

    /// SEQUENCE and `ops`, decoded by the client codec.
    pub fn call(&mut self, ops: &[Op<'_>]) -> CompoundReply {
        let mut all = vec![self.sequence(true)];
        all.extend_from_slice(ops);
        let e = encode_compound_minor("t", self.minor, &all);
        decode_compound(&self.send(&e.bytes), &all, ReadPlacement::Inline).unwrap()
    }

    /// The octets of a COMPOUND of SEQUENCE (next sequence id) and raw `ops`.
    pub fn raw_bytes(&mut self, ops: &[A], cache_this: bool) -> Vec<u8> {
        self.seq += 1;
        let mut a = A::default()
            .opaque(b"t")
            .u32(self.minor)
            .u32(ops.len() as u32 + 1);
        a = a
            .u32(op::SEQUENCE)
            .fixed(&self.sid)
            .u32(self.seq)
            .u32(0)
            .u32(0)
            .u32(u32::from(cache_this));
        for o in ops {
            a.0.extend_from_slice(&o.0);
        }
        a.0
    }

    /// SEQUENCE and raw `ops`.
    pub fn raw(&mut self, ops: &[A]) -> Raw {
        let b = self.raw_bytes(ops, true);
        walk(&self.send(&b))
    }

    /// The status of the last result of SEQUENCE + raw `ops`.
    pub fn status(&mut self, ops: &[A]) -> u32 {
        self.raw(ops).status
    }

    /// The root's wire handle.
    pub fn root(&mut self) -> Vec<u8> {
        let r = self.call(&[Op::PutRootFh, Op::GetFh]);
        match r.find(op::GETFH).map(|o| o.result.clone()) {
            Some(OpResult::Fh(f)) => f,
            other => panic!("GETFH: {other:?}"),
        }
    }

    /// Lets `ms` milliseconds pass.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

/// A COMPOUND header of minor version `minor` with `nops` raw `ops`.
fn header(minor: u32, nops: u32, ops: &[A]) -> Vec<u8> {
    let mut a = A::default().opaque(b"tag!").u32(minor).u32(nops);
    for o in ops {
        a.0.extend_from_slice(&o.0);
    }
    a.0
}

#[test]
fn accepts_a_session_with_clamped_channels_and_the_back_channel_recorded() {
    let h = H::new("rw,no_root_squash");
    let s = h.srv.state();
    let sess = &s.sessions[&h.sid];
    assert_eq!(sess.fore.max_requests, Limits::default().slots);
    assert_eq!(sess.fore.max_ops, 32);
    assert_eq!(
        sess.fore.max_response_cached,
        Limits::default().cached_reply
    );
    assert!(sess.fore.max_request <= (64 << 10) + (8 << 10));
    assert_eq!(sess.back.max_requests, 16);
    assert_eq!(sess.back_conn, Some(7));
    assert_eq!(sess.slots.len(), 64);
    assert!(s.clients[&h.clientid].confirmed);
}

#[test]
fn accepts_a_retransmission_with_the_cached_reply_exactly_once() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    // CREATE of a directory: run twice it would answer NFS4ERR_EXIST.
    let ops = [
        A::op(op::PUTFH).opaque(&root),
        A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0),
    ];
    let b = h.raw_bytes(&ops, true);
    let first = h.send(&b);
    assert_eq!(walk(&first).status, st::OK);
    let again = h.send(&b);
    assert_eq!(
        again, first,
        "the replay is the cached reply, octet for octet"
    );
    assert_eq!(h.srv.state().counters.replays, 1);
    // The next sequence id runs again: now the directory exists.
    let r = h.raw(&ops);
    assert_eq!(r.status, st::EXIST);
}

#[test]
fn rejects_misordered_sequence_ids_bad_slots_and_sessions() {
    let h = H::new("rw");
    let seq = |sid: [u8; 16], sequence: u32, slot: u32| Op::Sequence {
        session: sid,
        sequence,
        slot,
        highest_slot: 0,
        cache_this: false,
    };
    let r = h.plain(&[seq(h.sid, 5, 0)]);
    assert_eq!(r.status, st::SEQ_MISORDERED);
    let r = h.plain(&[seq(h.sid, 1, 64)]);
    assert_eq!(r.status, st::BADSLOT);
    let r = h.plain(&[seq([9; 16], 1, 0)]);
    assert_eq!(r.status, st::BADSESSION);
    // The failed SEQUENCEs did not move the slot: 1 is still next.
    let r = h.plain(&[seq(h.sid, 1, 0)]);
    assert_eq!(r.status, st::OK);
    // Slot 0 sequence 1 again, not cached (cache_this false): RETRY_UNCACHED_REP.
    let r = h.plain(&[seq(h.sid, 1, 0)]);
    assert_eq!(r.status, st::RETRY_UNCACHED_REP);
}

#[test]
fn rejects_minor_versions_other_than_1_and_2_with_no_results() {
    let h = H::new("rw");
    for minor in [0u32, 3, u32::MAX] {
        let b = header(minor, 1, &[A::op(op::PUTROOTFH)]);
        let out = h.send(&b);
        let r = walk(&out);
        assert_eq!(r.status, st::MINOR_VERS_MISMATCH, "minor {minor}");
        assert!(r.results.is_empty());
        assert_eq!(
            &out[4..12],
            &[0, 0, 0, 4, b't', b'a', b'g', b'!'],
            "the tag is echoed"
        );
    }
}

#[test]
fn rejects_operations_outside_their_place() {
    let mut h = H::new("rw");
    let r = walk(&h.send(&header(1, 1, &[A::op(op::PUTROOTFH)])));
    assert_eq!(r.status, st::OP_NOT_IN_SESSION);
    let r = h.raw(&[A::op(op::SEQUENCE)
        .fixed(&h.sid.clone())
        .u32(9)
        .u32(0)
        .u32(0)
        .u32(0)]);
    assert_eq!(r.status, st::SEQUENCE_POS);
    let ex = A::op(op::EXCHANGE_ID)
        .fixed(&[1; 8])
        .opaque(b"x")
        .u32(0)
        .u32(0)
        .u32(0);
    let r = walk(&h.send(&header(1, 2, &[ex, A::op(op::PUTROOTFH)])));
    assert_eq!(r.status, st::NOT_ONLY_OP);
}

#[test]
fn rejects_unknown_operations_as_illegal_and_unimplemented_ones_as_notsupp() {
    let mut h = H::new("rw");
    let r = h.raw(&[A::op(9999)]);
    assert_eq!(r.status, st::OP_ILLEGAL);
    assert_eq!(r.results.last(), Some(&(op::ILLEGAL, st::OP_ILLEGAL)));
    for n in [47u32, 20, 30, 35, 19] {
        let r = h.raw(&[A::op(n)]);
        assert_eq!(r.status, st::NOTSUPP, "operation {n}");
    }
}

#[test]
fn accepts_lease_expiry_revoking_sessions_and_opens() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let sid = h.create_in_root(b"f");
    assert_eq!(h.srv.state().opens.len(), 1);
    h.advance(89_000);
    assert_eq!(h.raw(&[]).status, st::OK, "SEQUENCE renews the lease");
    h.advance(89_000);
    assert_eq!(h.raw(&[]).status, st::OK);
    h.advance(91_000);
    assert_eq!(h.raw(&[]).status, st::BADSESSION, "the lease ran out");
    let s = h.srv.state();
    assert_eq!(
        (s.clients.len(), s.sessions.len(), s.opens.len()),
        (0, 0, 0)
    );
    assert_eq!(s.counters.clients_expired, 1);
    drop(s);
    // The same client comes back: its old stateid names nothing.
    let mut h2 = H::on(
        Arc::clone(&h.srv),
        Arc::clone(&h.now),
        Arc::clone(&h.store),
        b"client-a",
        auth_sys(0, 0),
    );
    let r = h2.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        A::op(op::READ).fixed(&sid).u64(0).u32(10),
    ]);
    assert_eq!(r.status, st::BAD_STATEID);
}

/// OPEN of the existing `name` with `access` (owner "owner"), no create, no deny.
pub fn open_existing(clientid: u64, name: &[u8], access: u32) -> A {
    A::op(op::OPEN)
        .u32(0)
        .u32(access)
        .u32(0)
        .u64(clientid)
        .opaque(b"owner")
        .u32(0)
        .u32(0)
        .opaque(name)
}

/// `nfs_lock_type4`: WRITE_LT (2) when `write`, READ_LT (1) otherwise.
pub fn lock_type(write: bool) -> u32 {
    if write {
        2
    } else {
        1
    }
}

/// LOCK (a write lock when `write`, a read lock otherwise) of `[off, off + len)` for a new
/// lock owner `owner` under open stateid `open` (open-to-lock-owner).
pub fn lock_new(
    clientid: u64,
    open: &[u8; 16],
    owner: &[u8],
    write: bool,
    off: u64,
    len: u64,
) -> A {
    A::op(op::LOCK)
        .u32(lock_type(write))
        .u32(0)
        .u64(off)
        .u64(len)
        .u32(1)
        .u32(0)
        .fixed(open)
        .u32(0)
        .u64(clientid)
        .opaque(owner)
}

/// OPEN of `name` in the current directory for reading and writing (CLAIM_NULL, owner
/// "owner"), creating it as `how` (a `createhow4`) says.
pub fn open_how(clientid: u64, how: A, name: &[u8]) -> A {
    let mut a = A::op(op::OPEN)
        .u32(0)
        .u32(3)
        .u32(0)
        .u64(clientid)
        .opaque(b"owner")
        .u32(1); // OPEN4_CREATE
    a.0.extend_from_slice(&how.0);
    a.u32(0).opaque(name)
}

/// OPEN of `name` in the current directory, creating it (UNCHECKED, mode 0644), for reading
/// and writing.
pub fn open_create(clientid: u64, name: &[u8]) -> A {
    let how = A::default()
        .u32(0) // UNCHECKED4
        .u32(2) // bitmap4 of two words: mode (33)
        .u32(0)
        .u32(2)
        .opaque(&0o644u32.to_be_bytes());
    open_how(clientid, how, name)
}

#[test]
fn accepts_destroy_session_then_destroy_clientid() {
    let h = H::new("rw");
    let r = h.plain(&[Op::DestroyClientId(h.clientid)]);
    assert_eq!(r.status, st::CLIENTID_BUSY);
    let r = h.plain(&[Op::DestroySession(h.sid)]);
    assert_eq!(r.status, st::OK);
    let r = h.plain(&[Op::DestroyClientId(h.clientid)]);
    assert_eq!(r.status, st::OK);
    let r = h.plain(&[Op::DestroyClientId(h.clientid)]);
    assert_eq!(r.status, st::STALE_CLIENTID);
    assert!(h.srv.state().clients.is_empty());
}

#[test]
fn accepts_a_create_session_replay_and_rejects_a_misordered_one() {
    let h = H::new("rw");
    let cs = |sequence| Op::CreateSession {
        clientid: h.clientid,
        sequence,
        flags: 0,
        fore: fore(),
        back: fore(),
        cb_program: 1,
    };
    // The session was made with csa_sequence 1: 1 again is the replay, 3 is out of order.
    let r = h.plain(&[cs(1)]);
    let Some(OpResult::CreateSession(x)) = r.find(op::CREATE_SESSION).map(|o| o.result.clone())
    else {
        panic!("{r:?}")
    };
    assert_eq!(x.session, h.sid);
    assert_eq!(h.plain(&[cs(3)]).status, st::SEQ_MISORDERED);
    assert_eq!(h.srv.state().sessions.len(), 1);
    assert_eq!(h.plain(&[cs(2)]).status, st::OK);
    assert_eq!(h.srv.state().sessions.len(), 2);
}

#[test]
fn rejects_clients_and_sessions_past_their_bounds() {
    let lim = Limits {
        clients: 2,
        sessions_per_client: 1,
        ..Limits::default()
    };
    let (srv, now, store) = server("rw", lim);
    let a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"a",
        auth_sys(0, 0),
    );
    let _b = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"b",
        auth_sys(0, 0),
    );
    let r = a.plain(&[Op::ExchangeId {
        verifier: [1; 8],
        owner: b"c",
        flags: 0,
    }]);
    assert_eq!(r.status, st::DELAY);
    let cs = Op::CreateSession {
        clientid: a.clientid,
        sequence: 2,
        flags: 0,
        fore: fore(),
        back: fore(),
        cb_program: 1,
    };
    assert_eq!(a.plain(&[cs]).status, st::DELAY);
    assert_eq!(srv.state().counters.refused_full, 2);
    assert_eq!(srv.counters()[0], ("nfs4_clients", 2));
}

/// EXCHANGE_ID of client owner `owner` from `peer`: the COMPOUND's status.
fn exchange_from(srv: &Nfs41, peer: IpAddr, owner: &[u8]) -> u32 {
    let auth = auth_sys(0, 0);
    let cx = CallCx {
        peer,
        cred: OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &auth,
        },
        conn: 9,
    };
    let ops = [Op::ExchangeId {
        verifier: [1; 8],
        owner,
        flags: 0,
    }];
    let e = encode_compound_minor("t", 1, &ops);
    let reply = srv.compound(&cx, &e.bytes).expect("header decodes");
    walk(&reply).status
}

#[test]
fn rejects_client_records_past_one_peers_share_and_keeps_room_for_others() {
    let (srv, now, store) = server("rw,no_root_squash", Limits::default());
    let hostile = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 66));
    let mut refused = 0;
    for i in 0..Limits::default().clients {
        let owner = format!("hostile-{i}");
        if exchange_from(&srv, hostile, owner.as_bytes()) == st::DELAY {
            refused += 1;
        }
    }
    assert!(refused > 0, "one address took every client record");
    // Another address still gets a client id and a session.
    let h = H::on(srv, now, store, b"victim", auth_sys(0, 0));
    assert_ne!(h.clientid, 0);
}

#[test]
fn accepts_reclaim_complete_once() {
    let mut h = H::new("rw");
    assert_eq!(h.call(&[Op::ReclaimComplete]).status, st::OK);
    assert_eq!(h.call(&[Op::ReclaimComplete]).status, st::COMPLETE_ALREADY);
}

#[test]
fn accepts_a_rebooted_client_replacing_its_old_record() {
    let h = H::new("rw");
    let r = h.plain(&[Op::ExchangeId {
        verifier: [2; 8],
        owner: b"client-a",
        flags: 0,
    }]);
    let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("{r:?}")
    };
    assert_ne!(x.clientid, h.clientid);
    let s = h.srv.state();
    assert_eq!(s.clients.len(), 1);
    assert!(
        s.sessions.is_empty(),
        "the old record's session went with it"
    );
}

#[test]
fn rejects_hostile_compounds_without_panicking() {
    let mut h = H::new("rw,no_root_squash");
    // Headers that do not decode: GARBAGE_ARGS.
    assert!(h.srv.compound(&h.cx(), &[0, 0, 0]).is_err());
    assert!(
        h.srv.compound(&h.cx(), &A::default().u32(1000).0).is_err(),
        "tag longer than the bound"
    );
    // numops far above what follows: the missing operation is ILLEGAL, nothing is allocated.
    let r = walk(&h.send(&header(1, u32::MAX, &[])));
    assert_eq!(r.status, st::OP_ILLEGAL);
    // A PUTFH claiming a 4 GiB handle: BADXDR.
    let r = h.raw(&[A::op(op::PUTFH).u32(u32::MAX)]);
    assert_eq!(r.status, st::BADXDR);
    // A READ of u32::MAX octets is clamped to max_io.
    let root = h.root();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(h.clientid, b"big"),
    ]);
    assert_eq!(r.status, st::OK);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"big"),
        A::op(op::READ).fixed(&[0; 16]).u64(0).u32(u32::MAX),
    ]);
    assert_eq!(r.status, st::OK);
    // Every prefix of a real COMPOUND: an answer or GARBAGE_ARGS, never a panic.
    let full = h.raw_bytes(
        &[
            A::op(op::PUTFH).opaque(&root),
            open_create(h.clientid, b"p"),
            A::op(op::GETATTR).u32(2).u32(!0).u32(!0),
        ],
        true,
    );
    for n in 0..full.len() {
        let _ = h.srv.compound(&h.cx(), &full[..n]);
    }
    // Random words after a good header.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..2000 {
        let mut b = h.raw_bytes(&[], false);
        b[12..16].copy_from_slice(&4u32.to_be_bytes());
        for _ in 0..16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.extend_from_slice(&((x % 70) as u32).to_be_bytes());
        }
        let _ = h.srv.compound(&h.cx(), &b);
    }
}

#[test]
fn rejects_guessing_other_clients_ids() {
    let (srv, now, store) = server("rw", Limits::default());
    let a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"a",
        auth_sys(0, 0),
    );
    let b = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"b",
        auth_sys(0, 0),
    );
    // Session ids, client ids and stateids made one after the other are not neighbours.
    let tail = |s: &[u8; 16]| u64::from_be_bytes(s[8..].try_into().unwrap());
    assert!(tail(&a.sid).abs_diff(tail(&b.sid)) > 1 << 20);
    assert!((a.clientid & 0xffff_ffff).abs_diff(b.clientid & 0xffff_ffff) > 1 << 8);
    let mut s = srv.state();
    let (o1, o2) = (srv.new_other(&mut s), srv.new_other(&mut s));
    let low = |o: &[u8; 12]| u64::from_be_bytes(o[4..].try_into().unwrap());
    assert!(low(&o1).abs_diff(low(&o2)) > 1 << 20);
}

#[test]
fn accepts_bind_conn_to_session_recording_the_back_channel() {
    let h = H::new("rw");
    h.srv.state().sessions.get_mut(&h.sid).unwrap().back_conn = None;
    let r = h.plain(&[Op::BindConnToSession {
        session: h.sid,
        dir: 3,
    }]);
    assert_eq!(
        r.ops[0].result,
        OpResult::BindConn {
            session: h.sid,
            dir: 3,
            rdma_mode: false
        }
    );
    assert_eq!(h.srv.state().sessions[&h.sid].back_conn, Some(7));
    let r = h.plain(&[Op::BindConnToSession {
        session: [4; 16],
        dir: 3,
    }]);
    assert_eq!(r.status, st::BADSESSION);
    let r = h.plain(&[Op::BindConnToSession {
        session: h.sid,
        dir: 5,
    }]);
    assert_eq!(r.status, st::INVAL);
    h.srv.state().sessions.get_mut(&h.sid).unwrap().back_conn = None;
    let r = h.plain(&[Op::BindConnToSession {
        session: h.sid,
        dir: 1,
    }]);
    assert_eq!(r.status, st::OK);
    assert_eq!(
        h.srv.state().sessions[&h.sid].back_conn,
        None,
        "fore channel only"
    );
}

#[test]
fn accepts_test_stateid_and_free_stateid() {
    let mut h = H::new("rw,no_root_squash");
    let good = h.create_in_root(b"f");
    let mut made_up = good;
    made_up[15] ^= 1;
    let r = h.raw(&[A::op(op::TEST_STATEID).u32(2).fixed(&good).fixed(&made_up)]);
    assert_eq!(r.status, st::OK);
    assert_eq!(
        r.last,
        A::default().u32(2).u32(st::OK).u32(st::BAD_STATEID).0
    );
    assert_eq!(
        h.status(&[A::op(op::FREE_STATEID).fixed(&good)]),
        10037,
        "LOCKS_HELD"
    );
    assert_eq!(
        h.status(&[A::op(op::FREE_STATEID).fixed(&made_up)]),
        st::BAD_STATEID
    );
    let huge = h.raw(&[A::op(op::TEST_STATEID).u32(u32::MAX)]);
    assert_eq!(huge.status, st::BADXDR);
}

/// CREATE_SESSION of an unconfirmed client id from a principal or an address other than its
/// EXCHANGE_ID's: NFS4ERR_CLID_INUSE (RFC 8881 §18.36.4; Linux nfsd's `same_creds` and
/// address checks), so no one confirms, and takes over, a client id another client made.
#[test]
fn rejects_create_session_of_another_principals_unconfirmed_client_id() {
    let (srv, _now, _store) = server("rw", Limits::default());
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let owner_auth = auth_sys(0, 0);
    let at = |peer: IpAddr, auth: &[u8], ops: &[Op<'_>]| -> Vec<u8> {
        let cx = CallCx {
            peer,
            cred: OpaqueAuth {
                flavor: AuthFlavor::Sys,
                body: auth,
            },
            conn: 9,
        };
        let e = encode_compound_minor("t", 1, ops);
        srv.compound(&cx, &e.bytes).expect("header decodes")
    };
    let ex = [Op::ExchangeId {
        verifier: [1; 8],
        owner: b"victim",
        flags: 0,
    }];
    let r = decode_compound(&at(peer, &owner_auth, &ex), &ex, ReadPlacement::Inline).unwrap();
    let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("EXCHANGE_ID: {r:?}");
    };
    let cs = [Op::CreateSession {
        clientid: x.clientid,
        sequence: x.sequence,
        flags: 0,
        fore: fore(),
        back: fore(),
        cb_program: 1,
    }];
    let other = auth_sys(1000, 1000);
    assert_eq!(walk(&at(peer, &other, &cs)).status, st::CLID_INUSE);
    let elsewhere = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 66));
    assert_eq!(
        walk(&at(elsewhere, &owner_auth, &cs)).status,
        st::CLID_INUSE
    );
    assert!(srv.state().sessions.is_empty());
    assert!(!srv.state().clients[&x.clientid].confirmed);
    // The client that made it still confirms it.
    assert_eq!(walk(&at(peer, &owner_auth, &cs)).status, st::OK);
    assert!(srv.state().clients[&x.clientid].confirmed);
}
