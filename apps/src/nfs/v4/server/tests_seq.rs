//! Unit tests of the fore channel as negotiated (RFC 8881 §18.36: `ca_maxrequestsize`,
//! `ca_maxoperations`, `ca_maxrequests` honoured, the back channel's attributes answered as
//! clamped, a back channel too small for a recall refused), false retries on a slot
//! (§2.10.6.1.3.1), the reply a slot keeps bounded, the open-state bound, and the state tables
//! counted in `nfsd-stat` and on the metrics port.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_seq`.
//! Recovery: a failure names the status or sample seen.

use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthFlavor, OpaqueAuth};
use rpcrdma_poller::metrics::{Collector, Exposition};
use rpcrdma_poller::CredBody;

use super::deleg::{Callbacks, Done};
use super::state::Limits;
use super::tests::{auth_sys, fore, open_create, server, server_cb, walk, A, H};
use super::xdr::st;
use super::CallCx;
use crate::nfs::v4::{op, ChannelAttrs, Op, OpResult};

/// The octets of the next COMPOUND on slot 0 of `h` (SEQUENCE, PUTFH root, CREATE of
/// directory `name`), and its sequence id put back, so the next call reuses it.
fn create_dir(h: &mut H, root: &[u8], name: &[u8]) -> Vec<u8> {
    let ops = [
        A::op(op::PUTFH).opaque(root),
        A::op(op::CREATE).u32(2).opaque(name).u32(0).u32(0),
    ];
    h.raw_bytes(&ops, true)
}

#[test]
fn rejects_a_false_retry_on_a_slot() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let first = create_dir(&mut h, &root, b"d");
    let sent = h.send(&first);
    assert_eq!(walk(&sent).status, st::OK);
    // The same slot and sequence id with other operations: not the request the reply was
    // kept for. Nothing runs, the cached reply is not sent.
    h.seq -= 1;
    let other = create_dir(&mut h, &root, b"e");
    let r = walk(&h.send(&other));
    assert_eq!(r.status, st::SEQ_FALSE_RETRY);
    assert_eq!(r.results, vec![(op::SEQUENCE, st::SEQ_FALSE_RETRY)]);
    // The genuine retransmission gets the reply kept for it.
    assert_eq!(h.send(&first), sent);
    assert_eq!(h.srv.state().counters.replays, 1);
    let lookup = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"e"),
    ]);
    assert_eq!(lookup.status, st::NOENT, "the false retry did not run");
    // The same octets from another principal: a false retry too (a cached reply goes to the
    // principal it was made for only).
    let mut ops = vec![A::op(op::PUTFH).opaque(&root)];
    ops.push(A::op(op::CREATE).u32(2).opaque(b"f").u32(0).u32(0));
    let b = h.raw_bytes(&ops, true);
    assert_eq!(walk(&h.send(&b)).status, st::OK);
    let other_cred = auth_sys(1000, 1000);
    let cx = CallCx {
        cred: OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &other_cred,
        },
        ..h.cx()
    };
    let r = walk(&h.srv.compound(&cx, &b).unwrap());
    assert_eq!(r.status, st::SEQ_FALSE_RETRY);
    assert_eq!(
        walk(&h.send(&b)).status,
        st::OK,
        "the owner's retry still replays"
    );
    assert_eq!(h.srv.state().counters.replays, 2);
}

/// A second session of `h`'s client with `fore` asked for: its id and the channels granted.
fn session_with(h: &H, fore_asked: ChannelAttrs, back: ChannelAttrs) -> ([u8; 16], OpResult) {
    let r = h.plain(&[Op::CreateSession {
        clientid: h.clientid,
        sequence: 2,
        flags: 0,
        fore: fore_asked,
        back,
        cb_program: 1,
    }]);
    assert_eq!(r.status, st::OK);
    let res = r.find(op::CREATE_SESSION).unwrap().result.clone();
    let OpResult::CreateSession(cs) = &res else {
        panic!("{res:?}")
    };
    (cs.session, res)
}

#[test]
fn rejects_compounds_past_the_fore_channel_as_negotiated() {
    let mut h = H::new("rw,no_root_squash");
    let small = ChannelAttrs {
        max_request: 512,
        max_ops: 3,
        max_requests: 2,
        ..fore()
    };
    let back = ChannelAttrs {
        max_requests: 2,
        max_ops: 4,
        max_request: 4068,
        max_response: 4068,
        ..fore()
    };
    let (sid, res) = session_with(&h, small, back);
    let OpResult::CreateSession(cs) = res else {
        unreachable!()
    };
    assert_eq!(
        (cs.fore.max_request, cs.fore.max_ops, cs.fore.max_requests),
        (512, 3, 2),
        "the fore channel as asked (within the server's bounds)"
    );
    assert_eq!(
        (
            cs.back.max_request,
            cs.back.max_response,
            cs.back.max_ops,
            cs.back.max_requests
        ),
        (4068, 4068, 4, 2),
        "the back channel as asked (within the server's bounds)"
    );
    h.sid = sid;
    h.seq = 0;
    // Three operations in all: SEQUENCE and two.
    assert_eq!(h.status(&[A::op(op::PUTROOTFH), A::op(op::GETFH)]), st::OK);
    let r = h.raw(&[A::op(op::PUTROOTFH), A::op(op::GETFH), A::op(op::GETFH)]);
    assert_eq!(r.status, st::TOO_MANY_OPS);
    assert_eq!(r.results, vec![(op::SEQUENCE, st::TOO_MANY_OPS)]);
    h.seq -= 1; // the refused SEQUENCE did not move the slot
    let long = vec![b'x'; 600];
    let r = h.raw(&[A::op(op::PUTROOTFH), A::op(op::LOOKUP).opaque(&long)]);
    assert_eq!(r.status, st::REQ_TOO_BIG);
    h.seq -= 1;
    // Slots 0 and 1 only.
    let seq = |slot: u32| Op::Sequence {
        session: sid,
        sequence: 1,
        slot,
        highest_slot: slot,
        cache_this: false,
    };
    assert_eq!(h.plain(&[seq(1)]).status, st::OK);
    assert_eq!(h.plain(&[seq(2)]).status, st::BADSLOT);
}

#[test]
fn rejects_opens_past_their_bound() {
    let lim = Limits {
        opens_per_client: 2,
        ..Limits::default()
    };
    let (srv, now, store) = server("rw,no_root_squash", lim);
    let mut h = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    let root = h.root();
    for name in [&b"a"[..], b"b"] {
        let r = h.raw(&[
            A::op(op::PUTFH).opaque(&root),
            open_create(h.clientid, name),
        ]);
        assert_eq!(r.status, st::OK);
    }
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(h.clientid, b"c"),
    ]);
    assert_eq!(r.status, st::DELAY);
    assert_eq!(h.srv.state().opens.len(), 2);
    assert_eq!(h.srv.state().counters.refused_full, 1);
}

#[test]
fn rejects_opens_past_one_addresss_share_across_its_clients() {
    let lim = Limits {
        opens_per_client: 2,
        opens_per_peer: 3,
        ..Limits::default()
    };
    let (srv, now, store) = server("rw,no_root_squash", lim);
    let mut a = H::on(
        srv.clone(),
        now.clone(),
        store.clone(),
        b"a",
        auth_sys(0, 0),
    );
    let mut b = H::on(
        srv.clone(),
        now.clone(),
        store.clone(),
        b"b",
        auth_sys(0, 0),
    );
    let root = a.root();
    let open = |h: &mut H, name: &[u8]| {
        let id = h.clientid;
        h.raw(&[A::op(op::PUTFH).opaque(&root), open_create(id, name)])
            .status
    };
    assert_eq!(open(&mut a, b"a1"), st::OK);
    assert_eq!(open(&mut a, b"a2"), st::OK);
    assert_eq!(open(&mut b, b"b1"), st::OK);
    assert_eq!(open(&mut b, b"b2"), st::DELAY, "the address's fourth open");
    // Another address is not held to this one's share.
    let peer = "10.0.0.9".parse().unwrap();
    let mut c = H::on_at(srv.clone(), now, store, b"c", auth_sys(0, 0), peer);
    assert_eq!(open(&mut c, b"c1"), st::OK);
    assert_eq!(srv.state().opens.len(), 4);
}

/// Callbacks that are all answered.
struct Answered;

impl Callbacks for Answered {
    fn call(&self, _: u64, _: u32, _: u32, _: &CredBody, _: Vec<u8>, done: Done) {
        done(true);
    }
}

#[test]
fn accepts_every_state_table_counted_and_exposed() {
    let cbs: Arc<dyn Callbacks> = Arc::new(Answered);
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let mut b = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let root = a.root();
    // a: an open for write and a lock under it.
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(a.clientid, b"f"),
    ]);
    assert_eq!(r.status, st::OK);
    let open: [u8; 16] = r.last[..16].try_into().unwrap();
    let lock = A::op(op::LOCK)
        .u32(2)
        .u32(0)
        .u64(0)
        .u64(10)
        .u32(1)
        .u32(0)
        .fixed(&open)
        .u32(0)
        .u64(a.clientid)
        .opaque(b"lock-owner");
    let r = a.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        lock,
    ]);
    assert_eq!(r.status, st::OK);
    // b: a read open of another file, with a read delegation.
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(b.clientid, b"g"),
    ]);
    assert_eq!(r.status, st::OK);
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let r = b.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"g"),
        A::op(op::CLOSE).u32(0).fixed(&sid),
    ]);
    assert_eq!(r.status, st::OK);
    let read = A::op(op::OPEN)
        .u32(0)
        .u32(1)
        .u32(0)
        .u64(b.clientid)
        .opaque(b"owner")
        .u32(0)
        .u32(0)
        .opaque(b"g");
    let r = b.raw(&[A::op(op::PUTFH).opaque(&root), read]);
    assert_eq!(r.status, st::OK);
    assert_eq!(u32::from_be_bytes(r.last[44..48].try_into().unwrap()), 1);
    let want = [
        ("clients", 2),
        ("sessions", 2),
        ("opens", 2),
        ("locks", 1),
        ("delegations", 1),
    ];
    let counters = a.srv.counters();
    let mut e = Exposition::new();
    a.srv.collect(&mut e);
    let text = e.finish();
    for (table, n) in want {
        let name = format!("nfs4_{table}");
        let seen = counters.iter().any(|(k, v)| *k == name && *v == n);
        assert!(seen, "{table} {n}: {counters:?}");
        let line = format!("rpcrdma_nfsd_nfs4_state{{table=\"{table}\"}} {n}");
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[test]
fn rejects_a_back_channel_too_small_for_a_recall() {
    let h = H::new("rw,no_root_squash");
    let ok = ChannelAttrs {
        max_request: 4068,
        max_response: 4068,
        max_ops: 2,
        max_requests: 1,
        ..fore()
    };
    // A CB_COMPOUND recall is CB_SEQUENCE and CB_RECALL (two operations); with its RPC
    // header, a credential of up to 120 octets and a 128-octet handle it takes 372 octets,
    // its reply 84 (RFC 8881 §18.36.3: `ca_maxrequestsize` counts the RPC header).
    let small = [
        ChannelAttrs { max_ops: 1, ..ok },
        ChannelAttrs {
            max_request: 371,
            ..ok
        },
        ChannelAttrs {
            max_response: 83,
            ..ok
        },
    ];
    for back in small {
        let r = h.plain(&[Op::CreateSession {
            clientid: h.clientid,
            sequence: 2,
            flags: 2,
            fore: fore(),
            back,
            cb_program: 1,
        }]);
        assert_eq!(r.status, st::TOOSMALL, "{back:?}");
    }
    assert_eq!(h.srv.state().sessions.len(), 1, "no session made");
    let recall = super::deleg::recall_args(1, [1; 16], u32::MAX, [2; 16], vec![3; 128]);
    assert_eq!(160 + recall.len(), 372, "the largest CB_RECALL call");
    let tight = ChannelAttrs {
        max_request: 372,
        max_response: 84,
        ..ok
    };
    let (_, res) = session_with(&h, fore(), tight);
    let OpResult::CreateSession(cs) = res else {
        unreachable!()
    };
    assert_eq!((cs.back.max_request, cs.back.max_response), (372, 84));
}

#[test]
fn rejects_a_retry_of_a_reply_larger_than_a_slot_keeps() {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let sid = h.create_in_root(b"f");
    let data = vec![0x5a; 12 << 10];
    let on_f = |a: A| {
        vec![
            A::op(op::PUTFH).opaque(&root),
            A::op(op::LOOKUP).opaque(b"f"),
            a,
        ]
    };
    let write = A::op(op::WRITE).fixed(&sid).u64(0).u32(2).opaque(&data);
    assert_eq!(h.status(&on_f(write)), st::OK);
    // 12 KiB of READ data: more than the 8 KiB a slot keeps (`ca_maxresponsesize_cached`
    // was asked as 1 MiB and clamped), so asked without `sa_cachethis` (with it, the READ is
    // NFS4ERR_REP_TOO_BIG_TO_CACHE: `tests_reply`).
    let read = A::op(op::READ).fixed(&sid).u64(0).u32(12 << 10);
    let b = h.raw_bytes(&on_f(read), false);
    let first = h.send(&b);
    assert_eq!(walk(&first).status, st::OK);
    assert!(first.len() > 8 << 10);
    let r = walk(&h.send(&b));
    assert_eq!(r.status, st::RETRY_UNCACHED_REP, "the reply was not kept");
    let s = h.srv.state();
    let kept: usize = s.sessions[&h.sid]
        .slots
        .iter()
        .map(|sl| sl.kept.capacity())
        .sum();
    assert!(kept <= 8 << 10, "{kept} octets kept");
}

#[test]
fn rejects_destroying_another_clients_session_and_unknown_ids() {
    let (srv, now, store) = server("rw", Limits::default());
    let mut a = H::on(
        Arc::clone(&srv),
        Arc::clone(&now),
        Arc::clone(&store),
        b"client-a",
        auth_sys(0, 0),
    );
    let b = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    // In a session of client a, DESTROY_SESSION of client b's session: NFS4ERR_BADSESSION.
    let destroy = |sid: &[u8; 16]| A::op(op::DESTROY_SESSION).fixed(sid);
    assert_eq!(a.status(&[destroy(&b.sid)]), st::BADSESSION);
    assert!(a.srv.state().sessions.contains_key(&b.sid));
    assert_eq!(a.status(&[destroy(&[9; 16])]), st::BADSESSION);
    assert_eq!(
        b.plain(&[Op::DestroySession([9; 16])]).status,
        st::BADSESSION
    );
    // CREATE_SESSION for a client id no one has: NFS4ERR_STALE_CLIENTID.
    let r = b.plain(&[Op::CreateSession {
        clientid: b.clientid ^ 1,
        sequence: 1,
        flags: 0,
        fore: fore(),
        back: fore(),
        cb_program: 1,
    }]);
    assert_eq!(r.status, st::STALE_CLIENTID);
    // Its own session, from within it: gone, and the slot's reply goes with it.
    let own = a.sid;
    assert_eq!(a.status(&[destroy(&own)]), st::OK);
    assert!(!a.srv.state().sessions.contains_key(&own));
    assert_eq!(a.raw(&[]).status, st::BADSESSION);
}

#[test]
fn rejects_sessions_past_the_servers_reply_cache_bound() {
    // Five slots of 8 KiB in all: the first session gets them, the next none until it goes.
    let lim = Limits {
        cached_replies: 5 * (8 << 10) + 100,
        ..Limits::default()
    };
    let (srv, now, store) = server("rw", lim);
    let a = H::on(srv.clone(), now, store, b"a", auth_sys(0, 0));
    assert_eq!(
        srv.state().sessions[&a.sid].slots.len(),
        5,
        "fewer than asked"
    );
    let r = a.plain(&[Op::ExchangeId {
        verifier: [2; 8],
        owner: b"b",
        flags: 0,
    }]);
    let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("EXCHANGE_ID: {r:?}")
    };
    let cs = |sequence, fore: ChannelAttrs| Op::CreateSession {
        clientid: x.clientid,
        sequence,
        flags: 0,
        fore,
        back: super::tests::fore(),
        cb_program: 1,
    };
    assert_eq!(a.plain(&[cs(x.sequence, fore())]).status, st::DELAY);
    assert_eq!(a.plain(&[Op::DestroySession(a.sid)]).status, st::OK);
    assert_eq!(a.plain(&[cs(x.sequence, fore())]).status, st::OK);
    // A session that keeps no reply reserves nothing.
    let uncached = ChannelAttrs {
        max_response_cached: 0,
        ..fore()
    };
    assert_eq!(a.plain(&[cs(x.sequence + 1, uncached)]).status, st::OK);
    let s = srv.state();
    let mut slots: Vec<usize> = s.sessions.values().map(|v| v.slots.len()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [5, 64]);
    assert_eq!(s.replies_reserved, 5 * (8 << 10));
    assert_eq!(s.counters.refused_full, 1);
}
