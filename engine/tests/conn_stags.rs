//! Connection engine: STag lifetimes and exposure. The harness, after every call the requester
//! reports finished, tries each STag the call advertised and asserts none allows remote access.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallError, CallSpec, Config, DdpItem, Event, LocalBuf, ReplySpec, Role, StagMode,
};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1;
use rpcrdma_engine::verbs::Access;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A call with one DDP argument, `nrec` receptacles and a large reply buffer (Reply chunk).
/// Returns the decoded call handles by kind: (read, write, reply).
fn full_call(p: &mut Pair, xid: u32, nrec: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    p.record = true;
    let call = rpc_call(xid, 1, &words(&[8]));
    let msg = p.req.host.buf_with(&call, EXPOSE);
    let item = p.req.host.buf_with(&pattern(8, 1), EXPOSE);
    let recs: Vec<LocalBuf> = (0..nrec).map(|_| p.req.host.alloc(128, EXPOSE)).collect();
    let reply = p.req.host.alloc(65_536, EXPOSE);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[DdpItem {
            at: call.len() as u32,
            buf: item,
        }],
        receptacles: &recs,
        reply,
    });
    let sent = p.last_sent(Dir::Req).to_vec();
    let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
    let c = h.chunks().unwrap();
    (
        c.reads.iter().map(|r| r.target.handle).collect(),
        c.writes
            .iter()
            .flat_map(|w| w.segments().map(|s| s.handle))
            .collect(),
        c.reply
            .map(|r| r.segments().map(|s| s.handle).collect())
            .unwrap_or_default(),
    )
}

#[test]
fn accepts_windows_with_only_the_needed_right_while_the_call_runs() {
    let mut p = Pair::default_pair();
    let (reads, writes, reply) = full_call(&mut p, 0x10, 2);
    assert_eq!((reads.len(), writes.len(), reply.len()), (1, 2, 1));
    let h = &p.req.host;
    let mw = |k: u32| {
        h.mws
            .iter()
            .find(|m| m.rkey == k)
            .and_then(|m| m.bound)
            .expect("bound")
    };
    for &k in &reads {
        let (a, l, acc) = mw(k);
        assert_eq!(acc, Access::REMOTE_READ);
        assert!(h.remote_ok(k, a, l, Access::REMOTE_READ));
        assert!(!h.remote_ok(k, a, l, Access::REMOTE_WRITE));
        assert!(
            !h.remote_ok(k, a, l + 1, Access::REMOTE_READ),
            "window wider than the item"
        );
    }
    for &k in writes.iter().chain(reply.iter()) {
        let (a, l, acc) = mw(k);
        assert_eq!(acc, Access::REMOTE_WRITE);
        assert!(!h.remote_ok(k, a, l, Access::REMOTE_READ));
    }
    // All distinct.
    let mut all: Vec<u32> = reads.iter().chain(&writes).chain(&reply).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4);
    // Finish the call: afterwards none is live (the harness also checked on completion).
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0x10, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    p.next_reply();
    for k in all {
        assert!(!p.req.host.rkey_live(k));
    }
    assert_eq!(p.req.host.bound_windows(), 0);
    assert_eq!(p.stats.local_invs, 4);
}

#[test]
fn accepts_send_with_invalidate_for_a_single_handle() {
    // One Write chunk, nothing else: exactly one distinct handle. The responder invalidates it
    // remotely and the requester skips its LocalInv.
    let mut p = Pair::default_pair();
    let msg = p.req.host.buf_with(&rpc_call(0x20, 6, &[]), LW);
    let rec = p.req.host.alloc(64, EXPOSE);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0x20, &[]), LW);
    let d = p.resp.host.buf_with(&[7; 10], LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[DdpItem { at: 24, buf: d }],
        },
    );
    let rep = p.next_reply();
    assert_eq!(rep.written(), &[10]);
    assert_eq!(p.stats.sends_with_inv, 1);
    assert_eq!(p.stats.local_invs, 0);
    assert_eq!(p.req.host.bound_windows(), 0);

    // Two handles (Write chunk + Reply chunk): plain Send, two LocalInvs.
    let msg = p.req.host.buf_with(&rpc_call(0x21, 6, &[]), LW);
    let big = p.req.host.alloc(65_536, EXPOSE);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply: big,
    });
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0x21, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    p.next_reply();
    assert_eq!(p.stats.sends_with_inv, 1);
    assert_eq!(p.stats.local_invs, 2);
}

#[test]
fn accepts_no_send_with_invalidate_without_both_r_bits() {
    for (req_r, resp_r) in [(false, true), (true, false)] {
        let mut rc = Config::DEFAULT;
        rc.remote_invalidate = req_r;
        let mut sc = Config::DEFAULT;
        sc.remote_invalidate = resp_r;
        let mut p = Pair::new(rc, sc);
        let msg = p.req.host.buf_with(&rpc_call(0x30, 6, &[]), LW);
        let rec = p.req.host.alloc(64, EXPOSE);
        let reply = p.req.host.alloc(256, LW);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[rec],
            reply,
        });
        let inc = p.next_call().unwrap();
        let r = p.resp.host.buf_with(&rpc_reply(0x30, &[]), LW);
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
        );
        p.next_reply();
        assert_eq!(p.stats.sends_with_inv, 0);
        assert_eq!(p.stats.local_invs, 1);
    }
}

#[test]
fn accepts_remote_invalidation_of_any_single_handle_from_a_foreign_responder() {
    // A Linux server sets no R itself yet invalidates when the client set R: the requester
    // must honour WITH_INV whatever it negotiated.
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        Config::DEFAULT,
        Sizing::for_config(Role::Requester, &Config::DEFAULT),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
    let msg = p.req.host.buf_with(&rpc_call(0x40, 6, &[]), LW);
    let rec = p.req.host.alloc(64, EXPOSE);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    let call = p.raw_take(Dir::Resp).pop().unwrap();
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    let handle = h.chunks().unwrap().single_handle().unwrap();
    let mut m = words(&[0x40, 1, 8, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x40, &[]));
    p.raw_send(Dir::Resp, &m, Some(handle));
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    assert_eq!(p.stats.local_invs, 0);
    assert_eq!(p.req.host.bound_windows(), 0);
}

#[test]
fn accepts_persistent_stags_without_binds() {
    let mut rc = Config::DEFAULT;
    rc.stag = StagMode::Persistent;
    let mut p = Pair::new(rc, Config::DEFAULT);
    // R is not advertised with persistent keys (remote invalidation would kill them).
    assert_eq!(p.req.conn.as_ref().unwrap().private_data()[5], 0);
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let rr = Access::LOCAL_WRITE | Access::REMOTE_READ;
    let call = rpc_call(0x50, 1, &words(&[3]));
    let msg = p.req.host.buf_with(&call, LW);
    let item = p.req.host.buf_with(&[1, 2, 3], rr);
    let rec = p.req.host.alloc(64, rw);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[DdpItem {
            at: call.len() as u32,
            buf: item,
        }],
        receptacles: &[rec],
        reply,
    });
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0x50, &[]), LW);
    let d = p.resp.host.buf_with(&[9; 5], LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[DdpItem { at: 24, buf: d }],
        },
    );
    let rep = p.next_reply();
    assert_eq!(rep.written(), &[5]);
    assert_eq!(p.stats.binds, 0);
    assert_eq!(p.stats.local_invs, 0);
    assert_eq!(p.stats.sends_with_inv, 0);
    // A buffer without remote rights cannot be exposed.
    let plain = p.req.host.alloc(64, LW);
    let msg = p.req.host.buf_with(&rpc_call(0x51, 1, &[]), LW);
    assert_eq!(
        p.try_call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[plain],
            reply,
        }),
        Err(rpcrdma_engine::conn::StartError::NoRemoteKey)
    );
}

#[test]
fn accepts_responder_never_exposing_its_memory() {
    // Whatever the responder sends carries only handles the requester advertised.
    let mut p = Pair::default_pair();
    let (reads, writes, reply) = full_call(&mut p, 0x60, 2);
    let inc = p.next_call().unwrap();
    let mut r = rpc_reply(0x60, &[]);
    r.extend_from_slice(&pattern(9000, 1));
    let rb = p.resp.host.buf_with(&r, LW);
    let d = p.resp.host.buf_with(&[1; 100], LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rb],
            results: &[DdpItem { at: 24, buf: d }],
        },
    );
    p.next_reply();
    let sent = p.last_sent(Dir::Resp).to_vec();
    let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
    let advertised: Vec<u32> = reads.iter().chain(&writes).chain(&reply).copied().collect();
    for s in h.chunks().unwrap().segments() {
        assert!(advertised.contains(&s.handle));
    }
    assert_eq!(p.resp.host.mws.len(), 0);
    assert!(p
        .rdma_log
        .iter()
        .all(|&(d, _, _, addr, _)| d == Dir::Resp && (0x1000_0000..0x9000_0000).contains(&addr)));
}

#[test]
fn accepts_timeout_with_stags_invalidated_and_credit_held() {
    let mut rc = Config::DEFAULT;
    rc.call_timeout_ns = 1_000_000;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        rc,
        Sizing::for_config(Role::Requester, &rc),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
    let msg = p.req.host.buf_with(&rpc_call(0x70, 6, &[]), LW);
    let rec = p.req.host.alloc(64, EXPOSE);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    assert!(p.req.conn.as_ref().unwrap().poll_timeout().is_some());
    p.advance(500_000);
    assert!(p.next_done().is_none());
    p.advance(600_000);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            error: CallError::TimedOut,
            ..
        })
    ));
    assert_eq!(p.req.host.bound_windows(), 0);
    // The credit stays in use until the late reply (unknown XID now) arrives.
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!(c.outstanding(), 1);
    let msg2 = p.req.host.buf_with(&rpc_call(0x71, 6, &[]), LW);
    assert_eq!(
        p.try_call(&CallSpec {
            message: &[msg2],
            ddp: &[],
            receptacles: &[],
            reply,
        }),
        Err(rpcrdma_engine::conn::StartError::NoCredit)
    );
    let mut m = words(&[0x70, 1, 8, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x70, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.req.conn.as_ref().unwrap().outstanding(), 0);
    assert!(p
        .try_call(&CallSpec {
            message: &[msg2],
            ddp: &[],
            receptacles: &[],
            reply,
        })
        .is_ok());
}

/// A timed-out call keeps its credit until its own late reply arrives (the responder still holds
/// the receive it used). A stray reply naming an XID no call ever had, or an error naming one,
/// must not release that credit early: a new call could then overrun the responder's receives
/// (RFC 8166 §3.3.1, from memory: a requester must not exceed the granted credits).
#[test]
fn rejects_stray_reply_releasing_a_timed_out_calls_credit() {
    let mut rc = Config::DEFAULT;
    rc.call_timeout_ns = 1_000_000;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        rc,
        Sizing::for_config(Role::Requester, &rc),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
    let msg = p.req.host.buf_with(&rpc_call(0x80, 6, &[]), LW);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply,
    });
    p.advance(1_100_000);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            error: CallError::TimedOut,
            ..
        })
    ));
    assert_eq!(p.req.conn.as_ref().unwrap().outstanding(), 1);
    // A stray reply (XID never used; it grants one credit, so the grant stays 1), then an
    // RDMA_ERROR naming another unknown XID.
    let mut m = words(&[0x99, 1, 1, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x99, &[]));
    p.raw_send(Dir::Resp, &m, None);
    p.raw_send(Dir::Resp, &words(&[0x98, 1, 8, 4, 2]), None);
    assert_eq!(
        p.req.conn.as_ref().unwrap().outstanding(),
        1,
        "the timed-out call's credit is still held"
    );
    let msg2 = p.req.host.buf_with(&rpc_call(0x81, 6, &[]), LW);
    let spec2 = CallSpec {
        message: &[msg2],
        ddp: &[],
        receptacles: &[],
        reply,
    };
    assert_eq!(
        p.try_call(&spec2),
        Err(rpcrdma_engine::conn::StartError::NoCredit)
    );
    // Its own late reply releases it.
    let mut m = words(&[0x80, 1, 8, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x80, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.req.conn.as_ref().unwrap().outstanding(), 0);
    assert!(p.try_call(&spec2).is_ok());
}

/// Runs `n` calls one after another, each offering one Write chunk (one window bound per
/// call), and returns the handles offered in order.
fn bound_keys(cfg: Config, n: u32) -> Vec<u32> {
    let mut p = Pair::new(cfg, Config::DEFAULT);
    let mut keys = Vec::new();
    for i in 0..n {
        p.record = true;
        p.sent.clear();
        let xid = 0x5000 + i;
        let msg = p.req.host.buf_with(&rpc_call(xid, 6, &[]), LW);
        let rec = p.req.host.alloc(64, EXPOSE);
        let reply = p.req.host.alloc(256, LW);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[rec],
            reply,
        });
        let sent = p.last_sent(Dir::Req).to_vec();
        let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
        let c = h.chunks().unwrap();
        keys.extend(c.writes.iter().flat_map(|w| w.segments().map(|s| s.handle)));
        let inc = p.next_call().unwrap();
        let r = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
        );
        p.next_reply();
    }
    keys
}

/// Issue 13 §3 ("keys are not predictable from earlier ones"): a window's next key must not be
/// derivable from its last one. With `ibv_inc_rkey` every rebind's key is the last key + 1 in
/// the consumer key byte, so a peer that saw one STag knows the window's next. The consumer key
/// byte comes from a per-connection generator seeded by [`Config::key_seed`]: never the
/// window's previous byte, and `key + 1` no more often than chance.
#[test]
fn rejects_window_keys_predictable_from_the_previous_key() {
    let mut cfg = Config::DEFAULT;
    cfg.key_seed = 0x0123_4567_89ab_cdef;
    let keys = bound_keys(cfg, 400);
    let mut last: std::collections::HashMap<u32, u32> = Default::default();
    let (mut rebinds, mut incremented) = (0u32, 0u32);
    for &k in &keys {
        if let Some(prev) = last.insert(k >> 8, k) {
            rebinds += 1;
            assert_ne!(prev, k, "a rebind reused the window's previous key");
            if k == rpcrdma_engine::verbs::inc_rkey(prev) {
                incremented += 1;
            }
        }
    }
    assert!(rebinds >= 300, "windows were rebound ({rebinds})");
    assert!(
        incremented * 8 < rebinds,
        "{incremented} of {rebinds} rebinds used the previous key + 1"
    );
}

/// The key generator's seed is an input (sans-IO): the same seed gives the same keys, another
/// seed other keys.
#[test]
fn accepts_window_keys_from_the_configured_seed() {
    let mut a = Config::DEFAULT;
    a.key_seed = 1;
    let mut b = Config::DEFAULT;
    b.key_seed = 2;
    let ka = bound_keys(a, 40);
    assert_eq!(ka, bound_keys(a, 40), "same seed, same keys");
    assert_ne!(ka, bound_keys(b, 40), "another seed, other keys");
}
