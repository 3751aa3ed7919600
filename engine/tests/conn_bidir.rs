//! Connection engine: bidirectional RPC-over-RDMA (RFC 8167). The server sends backward calls
//! on the client's connection; the client serves them. The harness classifies every Send on the
//! wire by direction and asserts, on every post: forward and backward credits separately
//! honoured, `rdma_credit` never 0 in a backward message, and (once the client enabled its
//! backchannel) the client has receives posted for every forward call outstanding plus every
//! backward credit not in use.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    BackchannelError, CallError, CallSpec, Config, Event, LocalBuf, ReplyKind, ReplySpec, Role,
    StartError,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const RDMA_MSG: u32 = 0;
const RDMA_NOMSG: u32 = 1;
const RDMA_ERROR: u32 = 4;

/// A backward call (CB_NULL-like: program 0x40000000, version 1, procedure `proc_`).
fn cb_call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut v = words(&[xid, 0, 2, 0x4000_0000, 1, proc_, 0, 0, 0, 0]);
    v.extend_from_slice(args);
    v
}

fn spec(message: &[LocalBuf], reply: LocalBuf) -> CallSpec<'_> {
    CallSpec {
        message,
        ddp: &[],
        receptacles: &[],
        reply,
    }
}

fn bidir() -> Pair {
    let mut p = Pair::new_bidir(Config::DEFAULT, Config::DEFAULT);
    p.enable_backchannel();
    p
}

#[test]
fn accepts_backward_call_and_reply_inline_with_empty_chunk_lists() {
    let mut p = bidir();
    p.record = true;
    let call = cb_call(0x77, 1, &words(&[42]));
    let m = p.resp.host.buf_with(&call, LW);
    let rbuf = p.resp.host.alloc(256, LW);
    let id = p.back_call(&spec(&[m], rbuf));
    // On the wire: RDMA_MSG, the server's requested backward credits, three empty lists.
    let mut want = words(&[
        0x77,     // rdma_xid: the backward XID
        1,        // rdma_vers
        16,       // rdma_credit: backward credits requested
        RDMA_MSG, // rdma_proc
        0,        // Read list: empty
        0,        // Write list: empty
        0,        // Reply chunk: absent
    ]);
    want.extend_from_slice(&call);
    assert_eq!(p.last_sent(Dir::Resp), &want[..]);
    // The server posted one receive for the reply before sending.
    assert_eq!(p.resp.conn.as_ref().unwrap().receives_posted(), 65);
    let inc = p
        .next_back_call()
        .expect("backward CallReady on the client");
    assert_eq!(inc.xid, 0x77);
    assert_eq!(p.req.host.read(inc.stream), &call[..]);
    assert_eq!((inc.write_chunks, inc.reply_capacity), (0, None));
    let reply = rpc_reply(0x77, &words(&[7]));
    let rb = p.req.host.buf_with(&reply, LW);
    assert_eq!(
        p.back_reply(
            inc.call,
            &ReplySpec {
                message: &[rb],
                results: &[],
            }
        ),
        ReplyKind::Inline
    );
    let mut want = words(&[
        0x77,     // rdma_xid copied
        1,        // rdma_vers copied
        16,       // rdma_credit: backward credits granted
        RDMA_MSG, // rdma_proc
        0,        // Read list: empty
        0,        // Write list: empty
        0,        // Reply chunk: absent
    ]);
    want.extend_from_slice(&reply);
    assert_eq!(p.last_sent(Dir::Req), &want[..]);
    match p.next_back_done() {
        Some(Event::ReplyReady(r)) => {
            assert_eq!((r.call, r.xid, r.long), (id, 0x77, false));
            assert_eq!(p.resp.host.read(rbuf.sub(0, r.len).unwrap()), &reply[..]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.resp.conn.as_ref().unwrap().receives_posted(), 64);
    assert_eq!(p.resp.conn.as_ref().unwrap().backward_credits(), 16);
    assert_eq!(p.wire.back_calls, 1);
    assert_eq!(p.wire.back_replies, 1);
    assert_eq!(p.stats.errors, 0);
}

/// Runs `n` forward and `n` backward calls with the same XIDs, all in flight at once, answered
/// in the order `order` gives (false: forward first).
fn colliding(p: &mut Pair, base: u32, n: u32, backward_first: bool) {
    let mut fwd = Vec::new();
    let mut back = Vec::new();
    for i in 0..n {
        let xid = base + i;
        let fm = p.req.host.buf_with(&rpc_call(xid, 1, &words(&[1, i])), LW);
        let fr = p.req.host.alloc(256, LW);
        let bm = p.resp.host.buf_with(&cb_call(xid, 1, &words(&[2, i])), LW);
        let br = p.resp.host.alloc(256, LW);
        fwd.push((p.call(&spec(&[fm], fr)), fr));
        back.push((p.back_call(&spec(&[bm], br)), br));
    }
    let mut fcalls = Vec::new();
    while let Some(c) = p.next_call() {
        fcalls.push(c);
    }
    let mut bcalls = Vec::new();
    while let Some(c) = p.next_back_call() {
        bcalls.push(c);
    }
    assert_eq!((fcalls.len(), bcalls.len()), (n as usize, n as usize));
    // Both directions carry the same XIDs, each with its own content.
    for (i, (f, b)) in fcalls.iter().zip(&bcalls).enumerate() {
        assert_eq!(f.xid, b.xid);
        assert_eq!(
            p.resp.host.read(f.stream),
            &rpc_call(base + i as u32, 1, &words(&[1, i as u32]))[..]
        );
        assert_eq!(
            p.req.host.read(b.stream),
            &cb_call(base + i as u32, 1, &words(&[2, i as u32]))[..]
        );
    }
    let answer_fwd = |p: &mut Pair, fcalls: &[rpcrdma_engine::conn::IncomingCall]| {
        for f in fcalls.iter().rev() {
            let r = p.resp.host.buf_with(&rpc_reply(f.xid, &words(&[0xf])), LW);
            p.reply(
                f.call,
                &ReplySpec {
                    message: &[r],
                    results: &[],
                },
            );
        }
    };
    let answer_back = |p: &mut Pair, bcalls: &[rpcrdma_engine::conn::IncomingCall]| {
        for b in bcalls {
            let r = p.req.host.buf_with(&rpc_reply(b.xid, &words(&[0xb])), LW);
            p.back_reply(
                b.call,
                &ReplySpec {
                    message: &[r],
                    results: &[],
                },
            );
        }
    };
    if backward_first {
        answer_back(p, &bcalls);
        answer_fwd(p, &fcalls);
    } else {
        answer_fwd(p, &fcalls);
        answer_back(p, &bcalls);
    }
    // Each reply reached the call of its own direction.
    for (id, buf) in &fwd {
        let r = p.next_reply();
        let (_, b) = fwd.iter().find(|(c, _)| *c == r.call).unwrap();
        assert_eq!(
            p.req.host.read(b.sub(0, r.len).unwrap()),
            &rpc_reply(r.xid, &words(&[0xf]))[..]
        );
        let _ = (id, buf);
    }
    for _ in &back {
        let Some(Event::ReplyReady(r)) = p.next_back_done() else {
            panic!("backward reply missing")
        };
        let (_, b) = back.iter().find(|(c, _)| *c == r.call).unwrap();
        assert_eq!(
            p.resp.host.read(b.sub(0, r.len).unwrap()),
            &rpc_reply(r.xid, &words(&[0xb]))[..]
        );
    }
    assert!(p.next_done().is_none() && p.next_back_done().is_none());
}

#[test]
fn accepts_concurrent_forward_and_backward_calls_with_colliding_xids() {
    let mut p = bidir();
    // Open the credit windows first (one call each way).
    colliding(&mut p, 0x10, 1, false);
    colliding(&mut p, 0x20, 8, false);
    colliding(&mut p, 0x20, 8, true);
    colliding(&mut p, 0x30, 16, true);
    assert_eq!(p.wire.fwd_calls, p.wire.fwd_replies);
    assert_eq!(p.wire.back_calls, p.wire.back_replies);
    assert_eq!(p.wire.back_calls, 1 + 8 + 8 + 16);
    assert_eq!(p.wire.unknown, 0);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_backward_credits_accounted_separately() {
    // The server asks for 4 backward credits, the client grants 2; forward credits are 64.
    let mut cc = Config::DEFAULT;
    cc.backchannel_credits = 2;
    let mut sc = Config::DEFAULT;
    sc.backchannel_credits = 4;
    let mut p = Pair::new_bidir(cc, sc);
    p.enable_backchannel();
    p.record = true;
    let msg = |p: &mut Pair, xid| p.resp.host.buf_with(&cb_call(xid, 0, &[]), LW);
    let rb = p.resp.host.alloc(256, LW);
    // One backward call until the first backward reply.
    let m1 = msg(&mut p, 1);
    p.back_call(&spec(&[m1], rb));
    assert_eq!(be32(p.last_sent(Dir::Resp), 2), 4, "credits requested");
    let m2 = msg(&mut p, 2);
    assert_eq!(p.try_back_call(&spec(&[m2], rb)), Err(StartError::NoCredit));
    // A backward call does not touch the client's forward credits.
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 1);
    let inc = p.next_back_call().unwrap();
    let r = p.req.host.buf_with(&rpc_reply(1, &[]), LW);
    p.back_reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert_eq!(be32(p.last_sent(Dir::Req), 2), 2, "credits granted");
    assert!(matches!(p.next_back_done(), Some(Event::ReplyReady(_))));
    let s = p.resp.conn.as_ref().unwrap();
    assert_eq!((s.backward_credits(), s.credits()), (2, 64));
    // Now two at once, not three.
    let ids: Vec<_> = (10..12)
        .map(|x| {
            let m = msg(&mut p, x);
            let b = p.resp.host.alloc(256, LW);
            p.back_call(&spec(&[m], b))
        })
        .collect();
    let m3 = msg(&mut p, 12);
    assert_eq!(p.try_back_call(&spec(&[m3], rb)), Err(StartError::NoCredit));
    assert_eq!(p.resp.conn.as_ref().unwrap().backward_outstanding(), 2);
    assert_eq!(p.req.conn.as_ref().unwrap().backward_outstanding(), 2);
    // Forward traffic meanwhile: the forward grant (64) comes from forward replies only.
    let fm = p.req.host.buf_with(&rpc_call(1, 0, &[]), LW);
    let fr = p.req.host.alloc(256, LW);
    p.call(&spec(&[fm], fr));
    let f = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(1, &[]), LW);
    p.reply(
        f.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert_eq!(be32(p.last_sent(Dir::Resp), 2), 64);
    p.next_reply();
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.credits(), c.backward_credits()), (64, 2));
    for _ in &ids {
        let inc = p.next_back_call().unwrap();
        let r = p.req.host.buf_with(&rpc_reply(inc.xid, &[]), LW);
        p.back_reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
        );
    }
    assert_eq!(p.wire.back_replies, 3);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_client_receives_for_backward_credits_plus_forward_calls() {
    let mut p = Pair::new_bidir(Config::DEFAULT, Config::DEFAULT);
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!(c.receives_posted(), 64, "forward receives only");
    assert!(!c.backchannel_enabled());
    p.enable_backchannel();
    // Backward credits (16) twice over: one per credit, one per reply Send in flight.
    assert_eq!(p.req.conn.as_ref().unwrap().receives_posted(), 64 + 32);
    // Sixteen backward calls and forward calls at once: the harness checks the posted
    // receives at every message reaching the client.
    colliding(&mut p, 1, 1, false);
    colliding(&mut p, 100, 16, false);
    assert_eq!(p.req.conn.as_ref().unwrap().receives_posted(), 64 + 32);
    assert_eq!(p.resp.conn.as_ref().unwrap().receives_posted(), 64);

    // Tight: 4 forward receives for 4 forward credits, 4 backward credits. Every forward and
    // backward credit in use at once leaves no spare receive.
    let mut c = Config::DEFAULT;
    c.credits = 4;
    c.backchannel_credits = 4;
    let mut p = Pair::new_bidir(c, c);
    p.enable_backchannel();
    assert_eq!(p.req.conn.as_ref().unwrap().receives_posted(), 4 + 8);
    for round in 0..4 {
        colliding(
            &mut p,
            0x100 * (round + 1),
            if round == 0 { 1 } else { 4 },
            round % 2 == 1,
        );
    }
    assert_eq!(p.stats.max_outstanding, 4);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn rejects_backward_call_while_backchannel_disabled() {
    // With backchannel memory but not enabled (the client's upper layer has not said so).
    let mut p = Pair::new_bidir(Config::DEFAULT, Config::DEFAULT);
    let m = p.resp.host.buf_with(&cb_call(5, 0, &[]), LW);
    let rb = p.resp.host.alloc(64, LW);
    let sends = p.stats.sends;
    assert_eq!(
        p.try_back_call(&spec(&[m], rb)),
        Err(StartError::BackchannelDisabled)
    );
    assert_eq!(p.stats.sends, sends, "nothing sent");
    assert_eq!(p.resp.conn.as_ref().unwrap().receives_posted(), 64);
    // Without backchannel memory at all.
    let mut p = Pair::default_pair();
    let m = p.resp.host.buf_with(&cb_call(5, 0, &[]), LW);
    assert_eq!(
        p.try_back_call(&spec(&[m], rb)),
        Err(StartError::BackchannelDisabled)
    );
    assert_eq!(
        p.resp.conn().enable_backchannel(),
        Err(BackchannelError::NoResources)
    );
    assert_eq!(
        p.req.conn().enable_backchannel(),
        Err(BackchannelError::NoResources)
    );
    assert_eq!(p.stats.sends, 0);
}

#[test]
fn rejects_backward_calls_to_a_client_that_did_not_enable_them() {
    // The server's upper layer enabled its side, the client's did not: the client drops the
    // backward call (never reports it, never answers), reposts the receive and keeps working.
    let mut p = Pair::new_bidir(Config::DEFAULT, Config::DEFAULT);
    p.resp.conn().enable_backchannel().unwrap();
    let m = p.resp.host.buf_with(&cb_call(5, 0, &[]), LW);
    let rb = p.resp.host.alloc(64, LW);
    p.back_call(&spec(&[m], rb));
    assert!(p.next_back_call().is_none());
    assert_eq!(p.wire.back_replies, 0);
    assert_eq!(p.req.conn.as_ref().unwrap().receives_posted(), 64);
    colliding_forward_only(&mut p);
}

fn colliding_forward_only(p: &mut Pair) {
    let fm = p.req.host.buf_with(&rpc_call(5, 0, &[]), LW);
    let fr = p.req.host.alloc(256, LW);
    p.call(&spec(&[fm], fr));
    let f = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(5, &[]), LW);
    p.reply(
        f.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert_eq!(p.next_reply().xid, 5);
}

/// A bidirectional client facing a raw (hand-driven) server.
fn raw_server() -> Pair {
    let cfg = Config::DEFAULT;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::with_backchannel(Role::Requester, &cfg),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.req.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Resp, 16, 4096);
    p.pump();
    p
}

#[test]
fn rejects_backward_call_with_chunks_with_err_chunk() {
    let mut p = raw_server();
    let err_chunk = |xid| {
        words(&[
            xid,        // rdma_xid copied
            1,          // rdma_vers copied
            16,         // rdma_credit: backward credits granted
            RDMA_ERROR, // rdma_proc
            2,          // ERR_CHUNK
        ])
    };
    // RDMA_MSG with a Write list (one chunk, one segment).
    let mut m = words(&[
        0x51, 1, 2, RDMA_MSG, // xid, vers, credits, proc
        0,        // Read list: empty
        1, 1, 0xabc, 64, 0, 0x1000, // Write chunk: one segment
        0,      // end of Write list
        0,      // no Reply chunk
    ]);
    m.extend_from_slice(&cb_call(0x51, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.raw_take(Dir::Resp), vec![err_chunk(0x51)]);
    // RDMA_MSG with only a Reply chunk.
    let mut m = words(&[
        0x52, 1, 2, RDMA_MSG, 0, 0, // xid, vers, credits, proc, no reads, no writes
        1, 1, 0xabd, 512, 0, 0x2000, // Reply chunk: one segment
    ]);
    m.extend_from_slice(&cb_call(0x52, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.raw_take(Dir::Resp), vec![err_chunk(0x52)]);
    // RDMA_NOMSG with a Position Zero Read chunk (a long backward call).
    let m = words(&[
        0x53, 1, 2, RDMA_NOMSG, // xid, vers, credits, proc
        1, 0, 0xabe, 64, 0, 0x3000, // Read segment at position 0
        0,      // end of Read list
        0,      // no Write list
        0,      // no Reply chunk
    ]);
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.raw_take(Dir::Resp), vec![err_chunk(0x53)]);
    assert!(p.next_back_call().is_none());
    assert_eq!(p.req.conn.as_ref().unwrap().backward_outstanding(), 0);
    // An inline backward call still works.
    let mut m = words(&[0x54, 1, 2, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&cb_call(0x54, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    let inc = p.next_back_call().expect("inline backward call delivered");
    assert_eq!(inc.xid, 0x54);
}

#[test]
fn rejects_messages_of_unknown_direction_without_using_their_credits() {
    let mut p = raw_server();
    let fm = p.req.host.buf_with(&rpc_call(0x60, 0, &[]), LW);
    let fr = p.req.host.alloc(256, LW);
    p.call(&spec(&[fm], fr));
    assert_eq!(p.raw_take(Dir::Resp).len(), 1);
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 1);
    // Same XID as the forward call, credits 5, msg_type 7: neither CALL nor REPLY.
    let mut m = words(&[0x60, 1, 5, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&words(&[0x60, 7, 0, 0, 0, 0]));
    p.raw_send(Dir::Resp, &m, None);
    // Same XID, an RPC message of only its XID (no msg_type).
    let mut m = words(&[0x60, 1, 5, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&words(&[0x60]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(p.next_done().is_none(), "call still pending");
    assert!(p.next_back_call().is_none());
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!(
        c.credits(),
        1,
        "credit value of an undirected message not used"
    );
    assert_eq!(c.receives_posted(), 64 + 32, "receives reposted");
    // The real reply (credits 3) completes the call.
    let mut m = words(&[0x60, 1, 3, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x60, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(p.next_reply().xid, 0x60);
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 3);
}

#[test]
fn rejects_server_side_messages_of_unknown_direction_silently() {
    // A raw client sends the engine server an RDMA_MSG whose msg_type is neither CALL nor
    // REPLY: dropped, not answered (no ERR_CHUNK), the server keeps its receives.
    let cfg = Config::DEFAULT;
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        Sizing::with_backchannel(Role::Responder, &cfg),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.resp.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Req, 8, 4096);
    let mut m = words(&[0x70, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&words(&[0x70, 9, 2, 3]));
    p.raw_send(Dir::Req, &m, None);
    // A backward "reply" nobody asked for (no backward call outstanding): dropped too.
    let mut m = words(&[0x71, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x71, &[]));
    p.raw_send(Dir::Req, &m, None);
    assert!(p.raw_take(Dir::Req).is_empty());
    assert!(p.next_call().is_none() && p.next_back_done().is_none());
    assert_eq!(p.resp.conn.as_ref().unwrap().receives_posted(), 64);
    // A forward call is still served.
    let mut m = words(&[0x72, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(0x72, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    assert_eq!(p.next_call().unwrap().xid, 0x72);
}

#[test]
fn rejects_oversized_backward_messages() {
    let mut p = bidir();
    // A backward call larger than the inline threshold (no chunks backward): refused.
    let big = p.resp.host.buf_with(&cb_call(1, 0, &pattern(5000, 1)), LW);
    let rb = p.resp.host.alloc(256, LW);
    assert_eq!(
        p.try_back_call(&spec(&[big], rb)),
        Err(StartError::TooLarge)
    );
    // Receptacles (Write chunks) cannot be offered backward.
    let m = p.resp.host.buf_with(&cb_call(2, 0, &[]), LW);
    let rec = [p.resp.host.alloc(64, LW)];
    assert_eq!(
        p.try_back_call(&CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &rec,
            reply: rb,
        }),
        Err(StartError::BadSpec)
    );
    // A backward reply too large for inline: ERR_CHUNK, the server's call fails with it.
    p.back_call(&spec(&[m], rb));
    let inc = p.next_back_call().unwrap();
    let r = p.req.host.buf_with(&rpc_reply(2, &pattern(5000, 2)), LW);
    assert_eq!(
        p.back_reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            }
        ),
        ReplyKind::ErrChunk
    );
    assert!(matches!(
        p.next_back_done(),
        Some(Event::CallFailed {
            xid: 2,
            error: CallError::ErrChunk,
            ..
        })
    ));
    // A backward reply larger than the server's reply buffer fails the call.
    let m = p.resp.host.buf_with(&cb_call(3, 0, &[]), LW);
    let small = p.resp.host.alloc(16, LW);
    p.back_call(&spec(&[m], small));
    let inc = p.next_back_call().unwrap();
    let r = p.req.host.buf_with(&rpc_reply(3, &[0; 64]), LW);
    p.back_reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert!(matches!(
        p.next_back_done(),
        Some(Event::CallFailed {
            xid: 3,
            error: CallError::BadReply(_),
            ..
        })
    ));
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_backward_calls_reissued_after_the_client_reconnects() {
    let cfg = Config::DEFAULT;
    let mut p = bidir();
    // Three backward calls in flight (after one completed to open the credit window) and one
    // forward call, then the connection drops.
    colliding(&mut p, 1, 1, false);
    let mut pending = Vec::new();
    for xid in [0x91, 0x92, 0x93] {
        let m = p.resp.host.buf_with(&cb_call(xid, 4, &words(&[xid])), LW);
        let rb = p.resp.host.alloc(256, LW);
        p.back_call(&spec(&[m], rb));
        pending.push((xid, m, rb));
    }
    let fm = p.req.host.buf_with(&rpc_call(0x91, 0, &[]), LW);
    let fr = p.req.host.alloc(256, LW);
    p.call(&spec(&[fm], fr));
    // The client got the calls but the connection is lost before any answer.
    assert!(p.next_back_call().is_some());
    p.disconnect();
    // Every pending backward call is reported, by XID, so the server can re-issue it.
    let mut failed: Vec<u32> = Vec::new();
    while let Some(e) = p.next_back_done() {
        match e {
            Event::CallFailed {
                xid,
                error: CallError::ConnectionLost,
                ..
            } => failed.push(xid),
            other => panic!("{other:?}"),
        }
    }
    failed.sort();
    assert_eq!(failed, [0x91, 0x92, 0x93]);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            xid: 0x91,
            error: CallError::ConnectionLost,
            ..
        })
    ));
    assert_eq!(
        p.try_back_call(&spec(&[pending[0].1], pending[0].2)),
        Err(StartError::NotConnected)
    );
    // The client reconnects (a new connection, new private data exchange) and re-enables its
    // backchannel; the server re-issues the same XIDs from the same buffers.
    p.req.events.clear();
    p.reconnect(
        Sizing::with_backchannel(Role::Requester, &cfg),
        Sizing::with_backchannel(Role::Responder, &cfg),
    );
    p.enable_backchannel();
    assert_eq!(p.req.conn.as_ref().unwrap().receives_posted(), 64 + 32);
    let (xid, m, rb) = pending[0];
    p.back_call(&spec(&[m], rb));
    let inc = p.next_back_call().unwrap();
    assert_eq!(inc.xid, xid);
    let r = p.req.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.back_reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert!(matches!(p.next_back_done(), Some(Event::ReplyReady(r)) if r.xid == xid));
    // With the grant restored, the other two go together.
    for &(_, m, rb) in &pending[1..] {
        p.back_call(&spec(&[m], rb));
    }
    for _ in 0..2 {
        let inc = p.next_back_call().unwrap();
        let r = p.req.host.buf_with(&rpc_reply(inc.xid, &[]), LW);
        p.back_reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
        );
    }
    let mut done: Vec<u32> = Vec::new();
    while let Some(Event::ReplyReady(r)) = p.next_back_done() {
        done.push(r.xid);
    }
    done.sort();
    assert_eq!(done, [0x92, 0x93]);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_bidirectional_traffic_end_to_end_over_soft_provider() {
    use common::soft::SoftPair;
    let mut cfg = Config::DEFAULT;
    cfg.credits = 16;
    cfg.backchannel_credits = 4;
    cfg.sq_depth = 256;
    cfg.rq_depth = 128;
    let mut p = SoftPair::new_bidir(cfg, cfg);
    p.req.conn.enable_backchannel().unwrap();
    p.run();
    p.resp.conn.enable_backchannel().unwrap();
    let take = |evs: &mut Vec<Event>, f: fn(&Event) -> bool| -> Vec<Event> {
        let (a, b): (Vec<Event>, Vec<Event>) = evs.drain(..).partition(f);
        *evs = b;
        a
    };
    let is_call = |e: &Event| matches!(e, Event::CallReady(_));
    let is_done = |e: &Event| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. });
    let mut fwd_done = 0;
    let mut back_done = 0;
    for round in 0..6u32 {
        // Colliding XIDs both ways; after the first round, four backward calls at once.
        let n = if round == 0 { 1 } else { 4 };
        for i in 0..n {
            let xid = 0x500 + round * 8 + i;
            let m = p.req.host.buf_with(&rpc_call(xid, 1, &words(&[i])));
            let r = p.req.host.alloc(256);
            let now = p.now;
            p.req
                .conn
                .start_call(now, &spec(&[m], r), &mut p.req.host)
                .unwrap();
            let m = p.resp.host.buf_with(&cb_call(xid, 1, &words(&[i])));
            let r = p.resp.host.alloc(256);
            p.resp
                .conn
                .start_call(now, &spec(&[m], r), &mut p.resp.host)
                .unwrap();
        }
        p.run();
        let fcalls = take(&mut p.resp.events, is_call);
        let bcalls = take(&mut p.req.events, is_call);
        assert_eq!((fcalls.len(), bcalls.len()), (n as usize, n as usize));
        for e in bcalls {
            let Event::CallReady(c) = e else {
                unreachable!()
            };
            assert_eq!(p.req.host.read(c.stream)[4..8], [0, 0, 0, 0], "a CALL");
            let r = p.req.host.buf_with(&rpc_reply(c.xid, &[]));
            let now = p.now;
            p.req
                .conn
                .send_reply(
                    now,
                    c.call,
                    &ReplySpec {
                        message: &[r],
                        results: &[],
                    },
                    &mut p.req.host,
                )
                .unwrap();
        }
        for e in fcalls {
            let Event::CallReady(c) = e else {
                unreachable!()
            };
            let r = p.resp.host.buf_with(&rpc_reply(c.xid, &[]));
            let now = p.now;
            p.resp
                .conn
                .send_reply(
                    now,
                    c.call,
                    &ReplySpec {
                        message: &[r],
                        results: &[],
                    },
                    &mut p.resp.host,
                )
                .unwrap();
        }
        p.run();
        for e in take(&mut p.req.events, is_done) {
            assert!(matches!(e, Event::ReplyReady(_)), "{e:?}");
            fwd_done += 1;
        }
        for e in take(&mut p.resp.events, is_done) {
            assert!(matches!(e, Event::ReplyReady(_)), "{e:?}");
            back_done += 1;
        }
    }
    assert_eq!((fwd_done, back_done), (21, 21));
    assert_eq!(p.resp.conn.backward_credits(), 4);
    assert!(p.req.errors.is_empty(), "requester: {:?}", p.req.errors);
    assert!(p.resp.errors.is_empty(), "responder: {:?}", p.resp.errors);
}

#[test]
fn rejects_client_backchannel_with_one_send_buffer_per_credit() {
    // The server may send its next backward call as soon as it has a reply whose Send has not
    // completed on the client yet: the client needs a send buffer per backward credit plus one
    // per reply still being sent, like its receives. One per credit is refused at set-up
    // rather than dropping a call later.
    use rpcrdma_engine::conn::{BackchannelPools, ConfigError, Connection, Pools};
    let mut cfg = Config::DEFAULT;
    cfg.credits = 4;
    cfg.backchannel_credits = 3;
    let buf = |i: u64, len: u32| LocalBuf {
        addr: 0x1000_0000 + i * 0x1_0000,
        len,
        lkey: 1,
    };
    let headers: Vec<LocalBuf> = (0..4).map(|i| buf(i, 4096)).collect();
    let recvs: Vec<LocalBuf> = (4..8).map(|i| buf(i, 4096)).collect();
    let bc_recvs: Vec<LocalBuf> = (8..14).map(|i| buf(i, 4096)).collect();
    let mws: Vec<u32> = (0..32).map(|i| 0x100 + i).collect();
    let pools = Pools {
        headers: &headers,
        recvs: &recvs,
        data: &[],
        mws: &mws,
        zero: buf(20, 64),
    };
    let make = |n: u64| {
        let bc_headers: Vec<LocalBuf> = (0..n).map(|i| buf(30 + i, 4096)).collect();
        Connection::with_backchannel(
            Role::Requester,
            cfg,
            &pools,
            &BackchannelPools {
                headers: &bc_headers,
                recvs: &bc_recvs,
            },
        )
        .map(|_| ())
    };
    assert_eq!(
        make(3),
        Err(ConfigError::TooFewBackchannelHeaders { needed: 6, have: 3 })
    );
    assert_eq!(make(6), Ok(()));
}

#[test]
fn rejects_backward_call_reusing_a_live_backward_xid() {
    // Backward XIDs come from their own space; within it, one live call per XID (the server
    // matches backward replies by XID).
    let mut cc = Config::DEFAULT;
    cc.backchannel_credits = 4;
    let mut sc = Config::DEFAULT;
    sc.backchannel_credits = 4;
    let mut p = Pair::new_bidir(cc, sc);
    p.enable_backchannel();
    let rb = p.resp.host.alloc(256, LW);
    let m1 = p.resp.host.buf_with(&cb_call(7, 0, &[]), LW);
    p.back_call(&spec(&[m1], rb));
    let inc = p.next_back_call().unwrap();
    let r = p.req.host.buf_with(&rpc_reply(7, &[]), LW);
    p.back_reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    assert!(p.next_back_done().is_some());
    // XID 8 outstanding (the client holds it), then XID 8 again: refused.
    let rb2 = p.resp.host.alloc(256, LW);
    let m2 = p.resp.host.buf_with(&cb_call(8, 0, &[]), LW);
    p.back_call(&spec(&[m2], rb2));
    let rb3 = p.resp.host.alloc(256, LW);
    let m3 = p.resp.host.buf_with(&cb_call(8, 0, &[]), LW);
    assert_eq!(
        p.try_back_call(&spec(&[m3], rb3)),
        Err(StartError::DuplicateXid)
    );
    // Another XID is fine.
    let m4 = p.resp.host.buf_with(&cb_call(9, 0, &[]), LW);
    let rb4 = p.resp.host.alloc(256, LW);
    assert!(p.try_back_call(&spec(&[m4], rb4)).is_ok());
}

/// An engine server with its backchannel enabled facing a raw (hand-driven) client with 16
/// receives posted.
fn raw_client() -> Pair {
    let cfg = Config::DEFAULT;
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        Sizing::with_backchannel(Role::Responder, &cfg),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.resp.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Req, 16, 4096);
    p
}

/// The server starts backward call `xid`; `Err` when it refuses.
fn raw_back_call(p: &mut Pair, xid: u32) -> Result<(), StartError> {
    let m = p.resp.host.buf_with(&cb_call(xid, 0, &[]), LW);
    let rb = p.resp.host.alloc(256, LW);
    p.try_back_call(&spec(&[m], rb))?;
    assert_eq!(
        p.raw_take(Dir::Req).len(),
        1,
        "backward call {xid:#x} on the wire"
    );
    Ok(())
}

/// RFC 8167 §4.1: "Credits work the same way in the backward direction as they do in the
/// forward direction", and a requester assumes one credit until "a non-error RPC-over-RDMA
/// message from the responder that reports the responder's actual credit limit" (v2 draft,
/// "Protocol Version Negotiation", the Version One rule). An RDMA_ERROR answering the server's
/// first backward call with `rdma_credit` 16 leaves the backward grant at one (the second call
/// waits for a non-error reply); once a backward reply reported 3, errors carrying 16 or 1
/// change nothing either.
#[test]
fn rejects_backward_credits_of_an_error() {
    let cases: [(&[u32], CallError); 2] = [
        (&[2], CallError::ErrChunk),                          // ERR_CHUNK
        (&[1, 1, 1], CallError::ErrVers { low: 1, high: 1 }), // ERR_VERS 1..1
    ];
    for (body, want) in cases {
        let mut p = raw_client();
        let credits = |p: &Pair| p.resp.conn.as_ref().unwrap().backward_credits();
        let error = |p: &mut Pair, xid: u32, wire: u32| {
            let mut e = words(&[xid, 1, wire, RDMA_ERROR]);
            e.extend_from_slice(&words(body));
            p.raw_send(Dir::Req, &e, None);
            match p.next_back_done() {
                Some(Event::CallFailed { error, .. }) => assert_eq!(error, want),
                other => panic!("{body:?}: {other:?}"),
            }
        };
        raw_back_call(&mut p, 0x80).unwrap();
        error(&mut p, 0x80, 16);
        assert_eq!(credits(&p), 1, "{body:?}: backward grant of an error taken");
        raw_back_call(&mut p, 0x81).unwrap();
        assert_eq!(raw_back_call(&mut p, 0x82), Err(StartError::NoCredit));
        // The first backward reply reports the limit: 3.
        let mut m = words(&[0x81, 1, 3, RDMA_MSG, 0, 0, 0]);
        m.extend_from_slice(&rpc_reply(0x81, &[]));
        p.raw_send(Dir::Req, &m, None);
        assert!(matches!(p.next_back_done(), Some(Event::ReplyReady(r)) if r.xid == 0x81));
        assert_eq!(credits(&p), 3);
        for (x, wire) in [(0x90, 16), (0x91, 1)] {
            raw_back_call(&mut p, x).unwrap();
            error(&mut p, x, wire);
            assert_eq!(credits(&p), 3, "{body:?} with rdma_credit {wire}");
        }
        for x in 0xa0..0xa3 {
            raw_back_call(&mut p, x).unwrap();
        }
        assert_eq!(raw_back_call(&mut p, 0xa3), Err(StartError::NoCredit));
    }
}
