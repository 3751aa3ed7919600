//! Unit tests of NFSv4.1 read delegations and the callback path on virtual time: grant,
//! DELEGRETURN, CB_RECALL on another client's write OPEN with NFS4ERR_DELAY until the return,
//! revocation after the lease, the CB_PATH_DOWN flags healed by BIND_CONN_TO_SESSION, bounds.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_poller::CredBody;

use super::deleg::{
    Callbacks, Done, DELEG_REVOKED, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
    SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};
use super::state::Limits;
use super::tests::{auth_sys, open_create, open_existing, server_cb, A, H};
use super::xdr::st;
use crate::nfs::v4::cb::{self, CbOp};
use crate::nfs::v4::{op, Op};

/// A backward call seen: connection, program, procedure, arguments.
type Call = (u64, u32, u32, Vec<u8>);

/// Records every backward call and answers it (or not, when `down` is set).
#[derive(Default)]
pub(super) struct Rec {
    down: AtomicBool,
    pub(super) calls: Mutex<Vec<Call>>,
    /// Each call's credential: flavor and body.
    creds: Mutex<Vec<(u32, Vec<u8>)>>,
}

impl Callbacks for Rec {
    fn call(
        &self,
        conn: u64,
        program: u32,
        proc_: u32,
        cred: &CredBody,
        args: Vec<u8>,
        done: Done,
    ) {
        let a = cred.auth();
        self.creds
            .lock()
            .unwrap()
            .push((a.flavor.to_u32(), a.body.to_vec()));
        self.calls
            .lock()
            .unwrap()
            .push((conn, program, proc_, args));
        done(!self.down.load(Ordering::SeqCst));
    }
}

impl Rec {
    pub(super) fn compounds(&self) -> Vec<cb::CbCompound> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.2 == cb::PROC_COMPOUND)
            .map(|c| cb::decode_cb_compound(&c.3).unwrap())
            .collect()
    }
}

/// Two clients of one server with callbacks `rec`; `a` made file `f` and closed it. Returns
/// (a, b, root handle).
fn two(rec: &Arc<Rec>, lim: Limits) -> (H, H, Vec<u8>) {
    let cbs: Arc<dyn Callbacks> = Arc::clone(rec) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", lim, Some(cbs));
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let b = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let root = a.root();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    assert_eq!(deleg_type(&r.last), 0, "a write open gets no delegation");
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        A::op(op::CLOSE).u32(0).fixed(&sid),
    ]);
    assert_eq!(r.status, st::OK);
    (a, b, root)
}

/// `open_delegation4`'s type in an OPEN4resok.
pub(super) fn deleg_type(ok: &[u8]) -> u32 {
    u32::from_be_bytes(ok[44..48].try_into().unwrap())
}

pub(super) fn deleg_sid(ok: &[u8]) -> [u8; 16] {
    ok[48..64].try_into().unwrap()
}

/// `h` opens `name` for `access`: the status and the OPEN4resok octets.
pub(super) fn open(h: &mut H, root: &[u8], name: &[u8], access: u32) -> (u32, Vec<u8>) {
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(root),
        open_existing(h.clientid, name, access),
    ]);
    (r.status, r.last)
}

fn on_f(h: &mut H, root: &[u8], a: A) -> u32 {
    h.status(&[
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(b"f"),
        a,
    ])
}

/// The sr_status_flags of a SEQUENCE alone.
fn flags(h: &mut H) -> u32 {
    let r = h.raw(&[]);
    assert_eq!(r.status, st::OK);
    u32::from_be_bytes(r.last[32..36].try_into().unwrap())
}

fn counter(h: &H, name: &str) -> u64 {
    let c = h.srv.counters();
    c.iter().find(|(n, _)| *n == name).unwrap().1
}

/// b holds a read delegation of `f`: its stateid.
fn b_delegated(b: &mut H, root: &[u8]) -> [u8; 16] {
    let (s, ok) = open(b, root, b"f", 1);
    assert_eq!(s, st::OK);
    assert_eq!(deleg_type(&ok), 1, "OPEN_DELEGATE_READ");
    deleg_sid(&ok)
}

#[test]
fn accepts_a_read_delegation_used_tested_and_returned() {
    let rec = Arc::new(Rec::default());
    let (_a, mut b, root) = two(&rec, Limits::default());
    let nulls = rec
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.2 == cb::PROC_NULL)
        .count();
    assert_eq!(nulls, 2, "CB_NULL probes each session's back channel");
    assert_eq!(flags(&mut b), 0);
    let d = b_delegated(&mut b, &root);
    assert_eq!(counter(&b, "nfs4_delegations"), 1);
    let r = b.raw(&[A::op(op::TEST_STATEID).u32(1).fixed(&d)]);
    assert_eq!(r.last, A::default().u32(1).u32(st::OK).0);
    let read = A::op(op::READ).fixed(&d).u64(0).u32(10);
    assert_eq!(
        on_f(&mut b, &root, read),
        st::OK,
        "READ with the delegation"
    );
    let write = A::op(op::WRITE).fixed(&d).u64(0).u32(0).opaque(b"x");
    assert_eq!(on_f(&mut b, &root, write), st::OPENMODE);
    assert_eq!(
        b.status(&[A::op(op::FREE_STATEID).fixed(&d)]),
        10037,
        "LOCKS_HELD"
    );
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)),
        st::OK
    );
    assert_eq!(counter(&b, "nfs4_delegreturns"), 1);
    assert_eq!(counter(&b, "nfs4_delegations"), 0);
    let again = A::op(op::DELEGRETURN).fixed(&d);
    assert_eq!(on_f(&mut b, &root, again), st::BAD_STATEID);
    assert!(rec.compounds().is_empty(), "no recall without a conflict");
}

/// `h` creates `name` and closes it.
pub(super) fn made(h: &mut H, root: &[u8], name: &[u8]) {
    let r = h.raw(&[A::op(op::PUTFH).opaque(root), open_create(h.clientid, name)]);
    assert_eq!(r.status, st::OK);
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let close = A::op(op::CLOSE).u32(0).fixed(&sid);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(root),
        A::op(op::LOOKUP).opaque(name),
        close,
    ]);
    assert_eq!(r.status, st::OK);
}

#[test]
fn rejects_a_delegation_where_rfc_8881_or_the_bounds_forbid_it() {
    let rec = Arc::new(Rec::default());
    let lim = Limits {
        delegs_per_client: 1,
        ..Limits::default()
    };
    let (mut a, mut b, root) = two(&rec, lim);
    let (_, ok) = open(&mut a, &root, b"f", 3);
    assert_eq!(deleg_type(&ok), 0, "read-write");
    let (_, ok) = open(&mut b, &root, b"f", 1);
    assert_eq!(deleg_type(&ok), 0, "another client has it open for write");
    made(&mut a, &root, b"j");
    made(&mut a, &root, b"k");
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::OPEN)
            .u32(0)
            .u32(1)
            .u32(2)
            .u64(b.clientid)
            .opaque(b"other-owner")
            .u32(0)
            .u32(0)
            .opaque(b"j"),
    ]);
    assert_eq!(r.status, st::OK);
    assert_eq!(deleg_type(&r.last), 0, "an open denying writes");
    assert_eq!(deleg_type(&open(&mut b, &root, b"j", 1).1), 1, "granted");
    let before = counter(&b, "nfs4_refused_full");
    assert_eq!(
        deleg_type(&open(&mut b, &root, b"k", 1).1),
        0,
        "b is at its bound"
    );
    assert_eq!(counter(&b, "nfs4_refused_full"), before + 1);
}

#[test]
fn accepts_a_recall_with_delay_until_the_delegreturn() {
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    let d = b_delegated(&mut b, &root);
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::DELAY);
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::DELAY, "still held");
    assert_eq!(counter(&a, "nfs4_recalls"), 1, "one recall");
    let cbs = rec.compounds();
    assert_eq!(cbs.len(), 1);
    let calls = rec.calls.lock().unwrap().clone();
    let last = calls.last().unwrap();
    assert_eq!(
        (last.0, last.1),
        (7, 0x4000_0000),
        "b's connection and program"
    );
    let (CbOp::Sequence(s), CbOp::Recall(r)) = (&cbs[0].ops[0], &cbs[0].ops[1]) else {
        panic!("{:?}", cbs[0]);
    };
    assert_eq!((s.session, s.sequence, s.slot), (b.sid, 1, 0));
    assert_eq!(r.stateid, d);
    let fh = {
        let r = b.raw(&[
            A::op(op::PUTFH).opaque(&root),
            A::op(op::LOOKUP).opaque(b"f"),
            A::op(op::GETFH),
        ]);
        r.last[4..4 + r.last[3] as usize].to_vec()
    };
    assert_eq!(r.fh, fh);
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)),
        st::OK
    );
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::OK, "the retry succeeds");
    assert_eq!(counter(&a, "nfs4_delegreturns"), 1);
    assert_eq!(counter(&a, "nfs4_revoked"), 0);
}

#[test]
fn accepts_revocation_of_a_delegation_not_returned_within_the_lease() {
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    let d = b_delegated(&mut b, &root);
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::DELAY);
    for _ in 0..2 {
        a.advance(45_000);
        assert_eq!(flags(&mut b) & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
        flags(&mut a);
    }
    a.advance(1);
    assert_eq!(
        flags(&mut b),
        SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
        "revoked 90 s after the recall"
    );
    assert_eq!(counter(&a, "nfs4_revoked"), 1);
    let r = b.raw(&[A::op(op::TEST_STATEID).u32(1).fixed(&d)]);
    assert_eq!(r.last, A::default().u32(1).u32(DELEG_REVOKED).0);
    let ret = A::op(op::DELEGRETURN).fixed(&d);
    assert_eq!(on_f(&mut b, &root, ret), DELEG_REVOKED);
    let read = A::op(op::READ).fixed(&d).u64(0).u32(10);
    assert_eq!(on_f(&mut b, &root, read), DELEG_REVOKED);
    assert_eq!(b.status(&[A::op(op::FREE_STATEID).fixed(&d)]), st::OK);
    assert_eq!(flags(&mut b), 0, "freed");
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::OK);
}

#[test]
fn accepts_cb_path_down_until_bind_conn_to_session_heals_it() {
    let rec = Arc::new(Rec::default());
    rec.down.store(true, Ordering::SeqCst);
    let (_a, mut b, root) = two(&rec, Limits::default());
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(flags(&mut b), down, "the CB_NULL probe got no answer");
    let (_, ok) = open(&mut b, &root, b"f", 1);
    assert_eq!(deleg_type(&ok), 0, "no delegation without a back channel");
    rec.down.store(false, Ordering::SeqCst);
    let r = b.plain(&[Op::BindConnToSession {
        session: b.sid,
        dir: 3,
    }]);
    assert_eq!(r.status, st::OK);
    assert_eq!(flags(&mut b), 0, "healed");
    let (_, ok) = open(&mut b, &root, b"f", 1);
    assert_eq!(deleg_type(&ok), 1);
}

#[test]
fn rejects_a_server_without_callbacks_reporting_the_path_down() {
    let (srv, now, store) = server_cb("rw", Limits::default(), None);
    let mut h = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(flags(&mut h), down);
}

#[test]
fn accepts_a_recall_on_remove_rename_and_setattr_by_another_client() {
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    let d = b_delegated(&mut b, &root);
    let anon = [0u8; 16];
    // SETATTR of the mode (bitmap word 1 bit 1: FATTR4_MODE): the holder caches attributes
    // too (Linux nfsd's `notify_change` breaks the delegation for every attribute).
    let chmod = A::op(op::SETATTR)
        .fixed(&anon)
        .u32(2)
        .u32(0)
        .u32(1 << 1)
        .u32(4)
        .u32(0o600);
    assert_eq!(on_f(&mut a, &root, chmod), st::DELAY);
    assert_eq!(counter(&a, "nfs4_recalls"), 1, "recalled by the SETATTR");
    let remove = A::op(op::REMOVE).opaque(b"f");
    assert_eq!(
        a.status(&[A::op(op::PUTFH).opaque(&root), remove]),
        st::DELAY
    );
    let rename = [
        A::op(op::PUTFH).opaque(&root),
        A::op(op::SAVEFH),
        A::op(op::RENAME).opaque(b"f").opaque(b"g"),
    ];
    assert_eq!(a.status(&rename), st::DELAY);
    // SETATTR size 0 (bitmap word 0 bit 4: FATTR4_SIZE).
    let trunc = A::op(op::SETATTR)
        .fixed(&anon)
        .u32(1)
        .u32(1 << 4)
        .u32(8)
        .u64(0);
    assert_eq!(on_f(&mut a, &root, trunc), st::DELAY);
    assert_eq!(
        counter(&a, "nfs4_recalls"),
        1,
        "one recall for the one delegation"
    );
    let own = A::op(op::SETATTR)
        .fixed(&anon)
        .u32(1)
        .u32(1 << 4)
        .u32(8)
        .u64(0);
    assert_eq!(on_f(&mut b, &root, own), st::OK, "the holder itself");
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)),
        st::OK
    );
    let remove = A::op(op::REMOVE).opaque(b"f");
    assert_eq!(a.status(&[A::op(op::PUTFH).opaque(&root), remove]), st::OK);
}

#[test]
fn accepts_a_recall_on_a_write_with_a_special_stateid_by_another_client() {
    // No open stands behind the anonymous (all zeros) and bypass (all ones) stateids, so no
    // OPEN recalled the delegation first: the WRITE does, as Linux nfsd's open for it breaks
    // the lease. A READ does not conflict with a read delegation.
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    let d = b_delegated(&mut b, &root);
    for sid in [[0u8; 16], [0xff; 16]] {
        let read = A::op(op::READ).fixed(&sid).u64(0).u32(10);
        assert_eq!(on_f(&mut a, &root, read), st::OK, "READ with {sid:?}");
    }
    assert_eq!(counter(&a, "nfs4_recalls"), 0, "reads do not recall");
    for sid in [[0u8; 16], [0xff; 16]] {
        let write = A::op(op::WRITE).fixed(&sid).u64(0).u32(2).opaque(b"x");
        assert_eq!(on_f(&mut a, &root, write), st::DELAY, "WRITE with {sid:?}");
    }
    assert_eq!(counter(&a, "nfs4_recalls"), 1, "recalled once");
    let own = A::op(op::WRITE).fixed(&[0; 16]).u64(0).u32(2).opaque(b"y");
    assert_eq!(on_f(&mut b, &root, own), st::OK, "the holder itself");
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)),
        st::OK
    );
    let write = A::op(op::WRITE).fixed(&[0; 16]).u64(0).u32(2).opaque(b"x");
    assert_eq!(on_f(&mut a, &root, write), st::OK, "returned");
}

#[test]
fn rejects_every_delegation_when_turned_off() {
    // `--v4-no-delegations`: an OPEN that would get a read delegation gets none, write
    // delegations are off with them whatever their own setting says; on again, the next OPEN
    // gets one.
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    b.srv.set_delegations(false);
    b.srv.set_write_delegations(true);
    assert!(!b.srv.delegations() && !b.srv.write_delegations());
    let (s, ok) = open(&mut b, &root, b"f", 1);
    assert_eq!((s, deleg_type(&ok)), (st::OK, 0), "no read delegation");
    b.srv.set_delegations(true);
    assert!(b.srv.write_delegations());
    let (s, ok) = open(&mut a, &root, b"f", 1);
    assert_eq!((s, deleg_type(&ok)), (st::OK, 1), "turned on again");
}

/// OPEN of the current file (CLAIM_DELEG_CUR_FH) with `access`, claiming delegation `d`.
fn open_deleg_cur_fh(clientid: u64, access: u32, d: &[u8; 16]) -> A {
    A::op(op::OPEN)
        .u32(0)
        .u32(access)
        .u32(0)
        .u64(clientid)
        .opaque(b"owner")
        .u32(0)
        .u32(5)
        .fixed(d)
}

#[test]
fn accepts_opens_claiming_the_delegation_being_recalled_then_its_return() {
    // The Linux client, recalled, turns the opens it made under the delegation into real
    // ones (OPEN with CLAIM_DELEG_CUR_FH) before its DELEGRETURN.
    let rec = Arc::new(Rec::default());
    let (mut a, mut b, root) = two(&rec, Limits::default());
    let d = b_delegated(&mut b, &root);
    let (ida, idb) = (a.clientid, b.clientid);
    assert_eq!(open(&mut a, &root, b"f", 2).0, st::DELAY);
    assert_eq!(rec.compounds().len(), 1, "CB_RECALL sent");
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        open_deleg_cur_fh(idb, 1, &d),
    ]);
    assert_eq!(r.status, st::OK, "CLAIM_DELEG_CUR_FH");
    assert_eq!(deleg_type(&r.last), 0, "no new delegation while recalled");
    // CLAIM_DELEGATE_CUR: the directory and the name
    let by_name = A::op(op::OPEN)
        .u32(0)
        .u32(1)
        .u32(0)
        .u64(idb)
        .opaque(b"owner")
        .u32(0)
        .u32(2)
        .fixed(&d)
        .opaque(b"f");
    let r = b.raw(&[A::op(op::PUTFH).opaque(&root), by_name]);
    assert_eq!(r.status, st::OK, "CLAIM_DELEGATE_CUR");
    // a read delegation covers no write open; a stateid of nothing, another client's
    assert_eq!(
        on_f(&mut b, &root, open_deleg_cur_fh(idb, 2, &d)),
        st::OPENMODE
    );
    let mut nothing = d;
    nothing[15] ^= 1;
    assert_eq!(
        on_f(&mut b, &root, open_deleg_cur_fh(idb, 1, &nothing)),
        st::BAD_STATEID
    );
    assert_eq!(
        on_f(&mut a, &root, open_deleg_cur_fh(ida, 1, &d)),
        st::BAD_STATEID
    );
    assert_eq!(
        on_f(&mut b, &root, A::op(op::DELEGRETURN).fixed(&d)),
        st::OK
    );
    assert_eq!(
        open(&mut a, &root, b"f", 2).0,
        st::OK,
        "the write OPEN after the return"
    );
    // the claim of a returned delegation
    assert_eq!(
        on_f(&mut b, &root, open_deleg_cur_fh(idb, 1, &d)),
        st::BAD_STATEID
    );
}
