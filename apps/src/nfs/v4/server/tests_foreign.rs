//! NFSv3 calls and NLM requests against NFSv4.1 delegations of the same files, through
//! [`crate::nfs::cross_locks::CrossLocks`] ([`super::deleg_foreign`]): a conflicting access
//! recalls the delegation and waits (NFS3ERR_JUKEBOX; NLM: no reply) until it is returned, and
//! no delegation is granted where such an access or an NLM lock would conflict with it.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_foreign`.
//! Recovery: a failure names the call and the status seen.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::xdr::{XdrReader, XdrWriter};

use super::deleg::Callbacks;
use super::deleg_foreign::{FOREIGN_MS, RECALL_MS};
use super::state::Limits;
use super::tests::{auth_sys, server_over, A, H};
use super::tests_deleg::{deleg_sid, deleg_type, made, open, Rec};
use super::xdr::st;
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::nlm::proto::{self as nlm, Lock, LockArgs, Stat, UnlockArgs};
use crate::nfs::nlm::{NlmConfig, NlmServer};
use crate::nfs::rpc_tcp::RpcClient;
use crate::nfs::types::{CreateHow, Fh, Nfsstat3, Sattr3, StableHow};
use crate::nfs::v3::harness::{status_of, Harness};
use crate::nfs::v3::proto::{encode_args, Args3};
use crate::nfs::v4::op;

/// One export served over NFSv3 (the harness) and NFSv4.1 (client `a`), recalls recorded.
struct World {
    v3: Harness,
    a: H,
    rec: Arc<Rec>,
    root: Vec<u8>,
    cross: Arc<CrossLocks>,
}

fn world() -> World {
    let v3 = Harness::new();
    let table = v3.exports();
    let store = Arc::clone(&table.shares()[0].store);
    let rec = Arc::new(Rec::default());
    let cbs = Arc::clone(&rec) as Arc<dyn Callbacks>;
    let (srv, now) = server_over(table, Limits::default(), Some(cbs));
    let cross = CrossLocks::new();
    srv.set_cross(Arc::clone(&cross));
    v3.set_cross(Arc::clone(&cross));
    let mut a = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    let root = a.root();
    World {
        v3,
        a,
        rec,
        root,
        cross,
    }
}

impl World {
    /// The wire handle of `name` in the root.
    fn fh(&mut self, name: &[u8]) -> Vec<u8> {
        let r = self.a.raw(&[
            A::op(op::PUTFH).opaque(&self.root),
            A::op(op::LOOKUP).opaque(name),
            A::op(op::GETFH),
        ]);
        assert_eq!(r.status, st::OK, "GETFH of {name:?}");
        XdrReader::new(&r.last)
            .get_opaque(128)
            .expect("GETFH")
            .to_vec()
    }

    /// Later by `ms` (virtual time).
    fn wait(&self, ms: u64) {
        self.a.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// `a` opens `name` for `access` (1 read, 2 write) and must be given delegation type
    /// `want` (0 none, 1 read, 2 write): the open and delegation stateids.
    fn open_with(&mut self, name: &[u8], access: u32, want: u32) -> ([u8; 16], [u8; 16]) {
        let (s, ok) = open(&mut self.a, &self.root.clone(), name, access);
        assert_eq!(s, st::OK, "OPEN of {name:?}");
        assert_eq!(
            deleg_type(&ok),
            want,
            "delegation type of the OPEN of {name:?}"
        );
        let d = if want == 0 { [0; 16] } else { deleg_sid(&ok) };
        (ok[..16].try_into().unwrap(), d)
    }

    /// `a` opens `name` for `access`, must be given delegation type `want`, and gives back
    /// what it got.
    fn probe(&mut self, name: &[u8], access: u32, want: u32) {
        let (sid, d) = self.open_with(name, access, want);
        if want != 0 {
            self.give_back(name, &d);
        }
        self.close(name, &sid);
    }

    /// `a` closes its open `sid` of `name`.
    fn close(&mut self, name: &[u8], sid: &[u8; 16]) {
        let s = self.on(name, A::op(op::CLOSE).u32(0).fixed(sid));
        assert_eq!(s, st::OK, "CLOSE of {name:?}");
    }

    /// `a` returns delegation `d` of `name`.
    fn give_back(&mut self, name: &[u8], d: &[u8; 16]) {
        let s = self.on(name, A::op(op::DELEGRETURN).fixed(d));
        assert_eq!(s, st::OK, "DELEGRETURN of {name:?}");
    }

    fn on(&mut self, name: &[u8], x: A) -> u32 {
        let root = self.root.clone();
        self.a.status(&[
            A::op(op::PUTFH).opaque(&root),
            A::op(op::LOOKUP).opaque(name),
            x,
        ])
    }

    /// The delegations recalled so far.
    fn recalls(&self) -> usize {
        self.rec.compounds().len()
    }

    /// An NFSv3 call as root: its status.
    fn v3(&self, args: &Args3<'_>) -> Nfsstat3 {
        self.v3_as(0, args)
    }

    /// An NFSv3 call with the harness's credential `who` (0 root, 1 uid 1000): its status.
    fn v3_as(&self, who: u8, args: &Args3<'_>) -> Nfsstat3 {
        let mut buf = vec![0u8; 4096];
        let mut w = XdrWriter::new(&mut buf);
        encode_args(&mut w, args).expect("the arguments encode");
        let n = w.finish();
        let p = args.proc_num();
        let (_, r) = self.v3.call(p as u8 | who << 5, &buf[..n]);
        status_of(p, &r.expect("the call is served")).expect("the results decode")
    }
}

fn wire(b: &[u8]) -> Fh {
    Fh::new(b).expect("a wire handle")
}

fn read(fh: Fh) -> Args3<'static> {
    Args3::Read {
        fh,
        offset: 0,
        count: 10,
    }
}

fn write(fh: Fh) -> Args3<'static> {
    Args3::Write {
        fh,
        offset: 0,
        count: 3,
        stable: StableHow::FileSync,
        data: b"new",
    }
}

#[test]
fn accepts_nfsv3_writes_once_the_recalled_delegation_is_returned() {
    let mut w = world();
    made(&mut w.a, &w.root.clone(), b"g");
    let g = wire(&w.fh(b"g"));
    let (open_sid, d) = w.open_with(b"g", 1, 1);
    // Reading and looking do not conflict with a read delegation.
    let read = read(g);
    assert_eq!(w.v3(&read), Nfsstat3::OK, "READ");
    assert_eq!(w.v3(&Args3::Getattr { fh: g }), Nfsstat3::OK, "GETATTR");
    let commit = Args3::Commit {
        fh: g,
        offset: 0,
        count: 0,
    };
    assert_eq!(w.v3(&commit), Nfsstat3::OK, "COMMIT");
    assert_eq!(w.recalls(), 0, "nothing recalled by reads");
    // A WRITE recalls it and waits until it is back.
    assert_eq!(w.v3(&write(g)), Nfsstat3::JUKEBOX, "WRITE while delegated");
    assert_eq!(w.recalls(), 1, "CB_RECALL sent");
    assert_eq!(w.v3(&write(g)), Nfsstat3::JUKEBOX, "WRITE while recalled");
    assert_eq!(w.recalls(), 1, "one recall for both");
    w.give_back(b"g", &d);
    assert_eq!(w.v3(&write(g)), Nfsstat3::OK, "WRITE after DELEGRETURN");
    w.close(b"g", &open_sid);
    // A recalled file gets no delegation for a while, then gets one again.
    w.probe(b"g", 1, 0);
    w.wait(RECALL_MS);
    w.probe(b"g", 1, 1);
}

#[test]
fn rejects_recalls_by_nfsv3_callers_without_the_permission_to_change_the_file() {
    let mut w = world();
    made(&mut w.a, &w.root.clone(), b"g");
    let g = wire(&w.fh(b"g"));
    let root = wire(&w.root.clone());
    let _held = w.open_with(b"g", 1, 1);
    // uid 1000 may not write root's file nor change root's directory (Linux nfsd checks the
    // permission before its open breaks a lease): refused, nothing recalled.
    assert_eq!(
        w.v3_as(1, &write(g)),
        Nfsstat3::ACCES,
        "WRITE without permission"
    );
    let rm = Args3::Remove {
        dir: root,
        name: b"g",
    };
    assert_eq!(
        w.v3_as(1, &rm),
        Nfsstat3::ACCES,
        "REMOVE without permission"
    );
    assert_eq!(w.recalls(), 0, "no recall for a caller refused anyway");
    // Other arguments than the refused WRITE's: the harness sends every call with XID 1.
    let root_write = Args3::Write {
        fh: g,
        offset: 1,
        count: 2,
        stable: StableHow::FileSync,
        data: b"ok",
    };
    assert_eq!(
        w.v3(&root_write),
        Nfsstat3::JUKEBOX,
        "root's WRITE recalls it"
    );
    assert_eq!(w.recalls(), 1);
}

#[test]
fn rejects_every_nfsv3_change_of_a_delegated_file_until_it_is_returned() {
    let mut w = world();
    let root = wire(&w.root.clone());
    let size0 = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let mode = Sattr3 {
        mode: Some(0o640),
        ..Sattr3::default()
    };
    type Case = fn(Fh, Fh) -> Args3<'static>;
    let cases: [(&[u8], Case); 7] = [
        (b"c-setattr", |fh, _| Args3::Setattr {
            fh,
            attr: Sattr3 {
                mode: Some(0o640),
                ..Sattr3::default()
            },
            guard: None,
        }),
        (b"c-link", |fh, dir| Args3::Link {
            fh,
            dir,
            name: b"c-link2",
        }),
        (b"c-truncate", |_, dir| Args3::Create {
            dir,
            name: b"c-truncate",
            how: CreateHow::Unchecked(Sattr3 {
                size: Some(0),
                ..Sattr3::default()
            }),
        }),
        (b"c-rename-to", |_, dir| Args3::Rename {
            from_dir: dir,
            from_name: b"c-other",
            to_dir: dir,
            to_name: b"c-rename-to",
        }),
        (b"c-rename-from", |_, dir| Args3::Rename {
            from_dir: dir,
            from_name: b"c-rename-from",
            to_dir: dir,
            to_name: b"c-renamed",
        }),
        (b"c-remove", |_, dir| Args3::Remove {
            dir,
            name: b"c-remove",
        }),
        (b"c-write", |fh, _| write(fh)),
    ];
    made(&mut w.a, &w.root.clone(), b"c-other");
    for (name, case) in cases {
        w.wait(RECALL_MS);
        made(&mut w.a, &w.root.clone(), name);
        let fh = wire(&w.fh(name));
        let (sid, d) = w.open_with(name, 1, 1);
        let before = w.recalls();
        let call = case(fh, root);
        assert_eq!(w.v3(&call), Nfsstat3::JUKEBOX, "{name:?} while delegated");
        assert_eq!(w.recalls(), before + 1, "{name:?} recalls the delegation");
        w.give_back(name, &d);
        // Not cached as the answer to this call: its next try runs.
        assert_eq!(w.v3(&call), Nfsstat3::OK, "{name:?} after DELEGRETURN");
        let _ = w.a.status(&[
            A::op(op::PUTFH).opaque(fh.as_bytes()),
            A::op(op::CLOSE).u32(0).fixed(&sid),
        ]);
    }
    // Creating something new, or a CREATE that sets no size, conflicts with nothing.
    w.wait(RECALL_MS);
    made(&mut w.a, &w.root.clone(), b"n");
    let (_, _) = w.open_with(b"n", 1, 1);
    let before = w.recalls();
    let keep = Args3::Create {
        dir: root,
        name: b"n",
        how: CreateHow::Unchecked(mode),
    };
    assert_eq!(w.v3(&keep), Nfsstat3::OK, "CREATE UNCHECKED without a size");
    let new = Args3::Create {
        dir: root,
        name: b"n2",
        how: CreateHow::Unchecked(size0),
    };
    assert_eq!(w.v3(&new), Nfsstat3::OK, "CREATE of a new name");
    assert_eq!(w.recalls(), before, "nothing recalled");
}

#[test]
fn rejects_nfsv3_reads_of_a_file_delegated_for_writing() {
    let mut w = world();
    made(&mut w.a, &w.root.clone(), b"g");
    w.a.srv.set_write_delegations(true);
    let g = wire(&w.fh(b"g"));
    let (sid, d) = w.open_with(b"g", 2, 2);
    let read = read(g);
    assert_eq!(w.v3(&read), Nfsstat3::JUKEBOX, "READ while delegated");
    assert_eq!(w.recalls(), 1, "the write delegation recalled");
    w.give_back(b"g", &d);
    assert_eq!(w.v3(&read), Nfsstat3::OK, "READ after DELEGRETURN");
    w.close(b"g", &sid);
    // A file just read over NFSv3 gets a read delegation but no write delegation; one just
    // written gets neither, for a while.
    w.wait(RECALL_MS);
    assert_eq!(w.v3(&read), Nfsstat3::OK);
    w.probe(b"g", 2, 0);
    w.probe(b"g", 1, 1);
    w.wait(FOREIGN_MS);
    w.probe(b"g", 2, 2);
    w.wait(RECALL_MS);
    assert_eq!(w.v3(&write(g)), Nfsstat3::OK);
    w.probe(b"g", 1, 0);
    w.wait(FOREIGN_MS);
    w.probe(b"g", 1, 1);
}

fn nlm_lock(fh: &[u8]) -> Lock<'_> {
    Lock {
        caller: b"v3-client",
        fh,
        oh: b"oh",
        svid: 7,
        offset: 0,
        len: 10,
    }
}

/// An NLM LOCK (exclusive or not) of `fh`: its status, or `None` when no reply came within
/// half a second.
fn lock3(addr: SocketAddr, fh: &[u8], exclusive: bool) -> Option<Stat> {
    let t = Duration::from_millis(500);
    let mut c = RpcClient::connect(addr, t, t).expect("connect");
    let a = LockArgs {
        cookie: b"k",
        block: false,
        exclusive,
        lock: nlm_lock(fh),
        reclaim: false,
        state: 1,
    };
    let r = c
        .call(nlm::NLM_PROG, 4, nlm::LOCK, &nlm::encode_lock(&a))
        .ok()?;
    Some(nlm::decode_res(&r).expect("nlm4_res").1)
}

fn unlock3(addr: SocketAddr, fh: &[u8]) {
    let t = Duration::from_secs(5);
    let mut c = RpcClient::connect(addr, t, t).expect("connect");
    let u = UnlockArgs {
        cookie: b"u",
        lock: nlm_lock(fh),
    };
    let r = c.call(nlm::NLM_PROG, 4, nlm::UNLOCK, &nlm::encode_unlock(&u));
    let st = nlm::decode_res(&r.expect("UNLOCK")).expect("nlm4_res").1;
    assert_eq!(st, Stat::GRANTED, "UNLOCK");
}

#[test]
fn rejects_nlm_locks_of_a_delegated_file_unanswered_until_it_is_returned() {
    let mut w = world();
    let table = w.v3.exports();
    let cfg = NlmConfig {
        // Nobody answers there: no GRANTED call is made in this test anyway.
        rpcbind_port: 9,
        ..NlmConfig::default()
    };
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let exports = Arc::new(move || Arc::clone(&table));
    let nlm_srv = NlmServer::start(local, exports, cfg, Some(Arc::clone(&w.cross))).expect("nlm");
    let addr = nlm_srv.local_addr();
    made(&mut w.a, &w.root.clone(), b"g");
    let g = w.fh(b"g");
    let (sid, d) = w.open_with(b"g", 1, 1);
    // A shared lock does not conflict with a read delegation.
    assert_eq!(lock3(addr, &g, false), Some(Stat::GRANTED), "shared LOCK");
    unlock3(addr, &g);
    assert_eq!(w.recalls(), 0);
    // An exclusive one recalls it and gets no answer (the client sends it again).
    assert_eq!(
        lock3(addr, &g, true),
        None,
        "exclusive LOCK while delegated"
    );
    assert_eq!(w.recalls(), 1, "CB_RECALL sent");
    w.give_back(b"g", &d);
    assert_eq!(
        lock3(addr, &g, true),
        Some(Stat::GRANTED),
        "after DELEGRETURN"
    );
    w.close(b"g", &sid);
    // While NLM holds an exclusive lock, no delegation; after the unlock, one.
    w.wait(RECALL_MS);
    w.probe(b"g", 1, 0);
    unlock3(addr, &g);
    w.wait(FOREIGN_MS);
    w.probe(b"g", 1, 1);
    let drops = crate::nfs::nlm::NlmStats::get(&nlm_srv.stats().deleg_drops);
    assert_eq!(drops, 1, "one request dropped");
}

/// `a` holds a read delegation of `g`, which an NFSv3 WRITE waits for, then goes silent for a
/// lease: the world and `g`'s handle.
fn silent_holder() -> (World, Fh) {
    let mut w = world();
    made(&mut w.a, &w.root.clone(), b"g");
    let g = wire(&w.fh(b"g"));
    let _held = w.open_with(b"g", 1, 1);
    assert_eq!(w.v3(&write(g)), Nfsstat3::JUKEBOX, "WRITE while delegated");
    let lease = u64::from(w.a.srv.config().limits.lease_secs) * 1000;
    w.wait(lease + 1);
    (w, g)
}

#[test]
fn accepts_nfsv3_writes_once_a_silent_holders_delegation_is_revoked() {
    // The holder never answers and sends nothing more: after a lease the sweep removes the
    // delegation (with no NFSv4.1 call to start it), and NFSv3 goes on.
    let (w, g) = silent_holder();
    assert_eq!(w.v3(&write(g)), Nfsstat3::JUKEBOX, "before the sweep");
    w.a.srv.sweep();
    assert_eq!(w.v3(&write(g)), Nfsstat3::OK, "after the revocation");
}

#[test]
fn accepts_the_laundromat_sweeping_without_any_nfsv41_call() {
    let (w, g) = silent_holder();
    let laundromat =
        w.a.srv
            .start_laundromat(Duration::from_millis(5))
            .expect("thread");
    // The holder is silent as long: it goes with its lease, and its delegation with it.
    let held = || {
        let c = w.a.srv.counters();
        c.iter()
            .find(|(n, _)| *n == "nfs4_delegations")
            .map(|c| c.1)
    };
    let start = std::time::Instant::now();
    while held() != Some(0) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(laundromat);
    assert_eq!(held(), Some(0), "gone with the laundromat's sweep");
    assert_eq!(w.v3(&write(g)), Nfsstat3::OK, "after the revocation");
}
