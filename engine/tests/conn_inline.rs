//! Connection engine: connection set-up and small inline calls (RDMA_MSG both ways).

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallId, CallOptions, CallSpec, CmInput, Config, ConnState, Connection, Event, LocalBuf, Pools,
    ReplyKind, ReplySpec, Role, SentAnswer, StartError,
};
use rpcrdma_engine::proto::v1;

#[test]
fn accepts_small_inline_call_and_reply() {
    let mut p = Pair::default_pair();
    assert!(matches!(p.req.events[0], Event::Connected(_)));
    let xid = 0x0102_0304;
    let call = rpc_call(xid, 1, &[0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    let msg = p.req.host.buf_with(&call, LW);
    let reply_buf = p.req.host.alloc(512, LW);
    let id = p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    });
    // The responder sees the call's XDR stream exactly as encoded.
    let inc = p.next_call().expect("CallReady");
    assert_eq!(inc.xid, xid);
    assert_eq!(p.resp.host.read(inc.stream), &call[..]);
    assert_eq!(inc.write_chunks, 0);
    assert_eq!(inc.reply_capacity, None, "a 512-octet reply fits inline");
    // No window was bound: nothing to expose for an inline call.
    assert_eq!(p.stats.binds, 0);

    let reply = rpc_reply(xid, &[0, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd]);
    let rmsg = p.resp.host.buf_with(&reply, LW);
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    assert_eq!(kind, ReplyKind::Inline);
    let r = p.next_reply();
    assert_eq!(r.call, id);
    assert_eq!(r.xid, xid);
    assert!(!r.long);
    assert_eq!(
        p.req.host.read(reply_buf.sub(0, r.len).unwrap()),
        &reply[..]
    );
    assert_eq!(p.stats.sends, 2);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_inline_call_gathered_from_parts() {
    // Header, argument and trailer in three separate buffers: the call is sent with one Send
    // gathering them (no copy), and arrives as one stream.
    let mut p = Pair::default_pair();
    let xid = 77;
    let head = rpc_call(xid, 7, &[]);
    let mid = pattern(36, 3);
    let tail = pattern(8, 9);
    let b1 = p.req.host.buf_with(&head, LW);
    let b2 = p.req.host.buf_with(&mid, LW);
    let b3 = p.req.host.buf_with(&tail, LW);
    let reply_buf = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[b1, b2, b3],
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    let mut want = head.clone();
    want.extend_from_slice(&mid);
    want.extend_from_slice(&tail);
    assert_eq!(p.resp.host.read(inc.stream), &want[..]);
}

#[test]
fn accepts_inline_reply_copied_when_parts_exceed_sges() {
    // More pieces than the QP's SGE limit: the engine copies them after the header instead.
    let mut cfg = Config::DEFAULT;
    cfg.max_send_sge = 2;
    let mut p = Pair::new(cfg, cfg);
    let xid = 5;
    let parts: Vec<Vec<u8>> = (0..4).map(|i| pattern(12, i)).collect();
    let mut call = rpc_call(xid, 1, &[]);
    let mut bufs = vec![p.req.host.buf_with(&call, LW)];
    for part in &parts {
        bufs.push(p.req.host.buf_with(part, LW));
        call.extend_from_slice(part);
    }
    let reply_buf = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &bufs,
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    assert_eq!(p.resp.host.read(inc.stream), &call[..]);
    let mut reply = rpc_reply(xid, &[]);
    let mut rbufs = vec![p.resp.host.buf_with(&reply, LW)];
    for part in &parts {
        rbufs.push(p.resp.host.buf_with(part, LW));
        reply.extend_from_slice(part);
    }
    assert_eq!(
        p.reply(
            inc.call,
            &ReplySpec {
                message: &rbufs,
                results: &[],
            }
        ),
        ReplyKind::Inline
    );
    let r = p.next_reply();
    assert_eq!(
        p.req.host.read(reply_buf.sub(0, r.len).unwrap()),
        &reply[..]
    );
}

#[test]
fn accepts_private_data_negotiation() {
    // Requester asks 4096/4096 with R; responder 2048 send / 8192 receive, with R.
    let mut resp_cfg = Config::DEFAULT;
    resp_cfg.inline_send = 2048;
    resp_cfg.inline_recv = 8192;
    let p = Pair::new(Config::DEFAULT, resp_cfg);
    let (Event::Connected(req_neg), Event::Connected(resp_neg)) =
        (p.req.events[0], p.resp.events[0])
    else {
        panic!("no Connected event");
    };
    assert_eq!(req_neg.send_inline, 4096);
    assert_eq!(req_neg.recv_inline, 2048);
    assert_eq!(resp_neg.send_inline, 2048);
    assert_eq!(resp_neg.recv_inline, 4096);
    assert!(req_neg.remote_invalidate && resp_neg.remote_invalidate);
    // The requester's own message: f6ab0e18, version 1, R, 4096 → 3, 4096 → 3.
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!(
        c.private_data(),
        [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03]
    );
}

#[test]
fn accepts_missing_private_data_as_v1_defaults() {
    let mut side = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        Config::DEFAULT,
        Sizing::for_config(Role::Requester, &Config::DEFAULT),
    );
    let c = side.conn();
    c.handle_cm(0, CmInput::Established { private_data: &[] });
    let n = c.negotiated();
    assert_eq!(n.send_inline, 1024);
    assert_eq!(n.recv_inline, 1024);
    assert!(!n.remote_invalidate);
    assert!(!n.peer_recognised);
}

#[test]
fn rejects_calls_before_connection_and_after_disconnect() {
    let mut side = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        Config::DEFAULT,
        Sizing::for_config(Role::Requester, &Config::DEFAULT),
    );
    let msg = side.host.buf_with(&rpc_call(1, 0, &[]), LW);
    let spec = CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply: LocalBuf::EMPTY,
    };
    let Side { host, conn, .. } = &mut side;
    let conn = conn.as_mut().unwrap();
    assert_eq!(
        conn.start_call(0, &spec, host),
        Err(StartError::NotConnected)
    );
    conn.handle_cm(0, CmInput::Established { private_data: &[] });
    assert!(conn.start_call(0, &spec, host).is_ok());
    conn.handle_cm(1, CmInput::Disconnected);
    assert_eq!(conn.state(), ConnState::Closed);
    // The outstanding call fails with ConnectionLost, and the loss is reported once.
    let evs: Vec<Event> = std::iter::from_fn(|| conn.poll_event()).collect();
    assert!(evs.iter().any(|e| matches!(
        e,
        Event::CallFailed {
            error: rpcrdma_engine::conn::CallError::ConnectionLost,
            ..
        }
    )));
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, Event::ConnectionLost))
            .count(),
        1
    );
    assert_eq!(
        conn.start_call(2, &spec, host),
        Err(StartError::NotConnected)
    );
}

#[test]
fn rejects_bad_configurations() {
    let mut host = Host::new("h", 0x1000, 1 << 20, 1);
    let h = host.alloc(4096, LW);
    let r = host.alloc(4096, LW);
    let small = host.alloc(512, LW);
    let zero = host.alloc(8, LW);
    let base = Pools {
        headers: &[h],
        recvs: &[r],
        data: &[],
        mws: &[1],
        zero,
    };
    let mut cfg = Config::DEFAULT;
    cfg.credits = 1;
    assert!(Connection::new(Role::Requester, cfg, &base).is_ok());
    let mut c0 = cfg;
    c0.credits = 0;
    assert!(Connection::new(Role::Requester, c0, &base).is_err());
    let small_recv = Pools {
        recvs: &[small],
        ..base
    };
    assert!(Connection::new(Role::Requester, cfg, &small_recv).is_err());
    let no_mws = Pools { mws: &[], ..base };
    assert!(Connection::new(Role::Requester, cfg, &no_mws).is_err());
    // A responder needs credits + call slots receive buffers.
    assert!(Connection::new(Role::Responder, cfg, &base).is_err());
    let no_zero = Pools {
        zero: LocalBuf::EMPTY,
        ..base
    };
    assert!(Connection::new(Role::Requester, cfg, &no_zero).is_err());
    // A responder must grant at least one credit (RFC 8166: 0 would stop the requester).
    let r2 = host.alloc(4096, LW);
    let h2 = host.alloc(4096, LW);
    let r3 = host.alloc(4096, LW);
    let d = host.alloc(4096, LW);
    let resp = Pools {
        headers: &[h, h2],
        recvs: &[r, r2, r3],
        data: &[d],
        mws: &[],
        zero,
    };
    assert!(Connection::new(Role::Responder, cfg, &resp).is_ok());
    assert!(Connection::new(Role::Responder, c0, &resp).is_err());
}

#[test]
fn accepts_receives_posted_before_establishment() {
    // The receives the role keeps posted are queued at creation (QP in INIT), before any call.
    let mut side = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        Config::DEFAULT,
        Sizing::for_config(Role::Responder, &Config::DEFAULT),
    );
    let c = side.conn();
    let mut n = 0;
    while let Some(wr) = c.poll_wr() {
        assert!(matches!(wr, rpcrdma_engine::conn::WorkRequest::Recv { .. }));
        n += 1;
    }
    assert_eq!(n, Config::DEFAULT.credits);
    assert_eq!(c.receives_posted(), Config::DEFAULT.credits);
}

#[test]
fn accepts_reply_header_golden_bytes() {
    // The inline reply header as the requester receives it, checked word by word against
    // RFC 8166 §4 / the XDR of Appendix A: xid, vers 1, credits 64, RDMA_MSG, three empty lists.
    let mut p = Pair::default_pair();
    p.record_procs = true;
    let xid = 0xcafe_f00d;
    let msg = p.req.host.buf_with(&rpc_call(xid, 0, &[]), LW);
    let reply_buf = p.req.host.alloc(128, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    let rmsg = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    let (d, w0, w1, w2, w3) = p.sent_procs[1];
    assert_eq!(d, Dir::Resp);
    assert_eq!(
        [w0, w1, w2, w3],
        [0xcafe_f00d, 0x0000_0001, 0x0000_0040, 0x0000_0000]
    );
    // The call: xid, vers 1, credits requested = 64, RDMA_MSG.
    let (d, w0, w1, w2, w3) = p.sent_procs[0];
    assert_eq!(d, Dir::Req);
    assert_eq!([w0, w1, w2, w3], [0xcafe_f00d, 1, 64, 0]);
    let _ = v1::FIXED_LEN;
}

#[test]
fn accepts_call_with_the_xid_its_caller_assigned() {
    // The caller assigned the XID and encoded it: the engine takes it as given (the transport
    // header and the reply match carry it), and refuses a second call with it while it is live.
    let mut p = Pair::default_pair();
    for (round, xid) in [0x0a0b_0c0d_u32, 0x0a0b_0c0e].into_iter().enumerate() {
        let call = rpc_call(xid, 1, &[]);
        let msg = p.req.host.buf_with(&call, LW);
        let reply_buf = p.req.host.alloc(512, LW);
        let spec = CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[],
            reply: reply_buf,
        };
        let now = p.now;
        let side = &mut p.req;
        let conn = side.conn.as_mut().expect("requester");
        let id = conn
            .start_call_xid(now, xid, &spec, &CallOptions::NONE, &mut side.host)
            .expect("start_call_xid");
        if round == 1 {
            // Credits granted by the first reply: only the XID stops this one.
            let again = conn.start_call_xid(now, xid, &spec, &CallOptions::NONE, &mut side.host);
            assert_eq!(again, Err(StartError::DuplicateXid));
        }
        p.pump();
        let inc = p.next_call().expect("CallReady");
        assert_eq!(inc.xid, xid);
        let reply = rpc_reply(xid, &[0, 0, 0, 0]);
        let rmsg = p.resp.host.buf_with(&reply, LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        assert_eq!(p.reply(inc.call, &spec), ReplyKind::Inline);
        let r = p.next_reply();
        assert_eq!((r.call, r.xid), (id, xid));
    }
}

#[test]
fn accepts_reply_buffer_sized_to_what_an_inline_reply_can_carry() {
    // One sizing rule: a reply buffer cut to `first_reply_len` for a small hint gets no Reply
    // chunk (an inline reply fits it), one octet more does.
    let mut p = Pair::default_pair();
    let conn = p.req.conn.as_ref().expect("requester");
    let whole = 64 * 1024;
    assert_eq!(
        conn.first_reply_len(0, whole, 0),
        whole,
        "no hint: the whole buffer"
    );
    let room =
        conn.negotiated().recv_inline as usize - rpcrdma_engine::proto::inline_msg_header_len(1, 0);
    assert_eq!(conn.first_reply_len(8, whole, 0), room);
    assert_eq!(conn.first_reply_len(room + 100, whole, 0), room + 100);
    assert_eq!(
        conn.first_reply_len(room + 100, 64, 0),
        64,
        "never past the buffer"
    );
    let reply_buf = p.req.host.alloc(whole as u32, EXPOSE);
    for (xid, len, chunk) in [(1, room, None), (2, room + 1, Some(room as u32 + 1))] {
        let call = rpc_call(xid, 1, &[]);
        let msg = p.req.host.buf_with(&call, LW);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[],
            reply: reply_buf.sub(0, len as u32).unwrap(),
        });
        let inc = p.next_call().expect("CallReady");
        assert_eq!(inc.reply_capacity, chunk, "reply buffer of {len}");
        let reply = rpc_reply(xid, &[0, 0, 0, 0]);
        let rmsg = p.resp.host.buf_with(&reply, LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        p.reply(inc.call, &spec);
        p.next_reply();
    }
}

#[test]
fn accepts_sent_answer_reported_once_its_send_completes() {
    // A responder reports each answer whose Send finished (`poll_sent`), with the call it
    // answered: the caller learns that the reply's buffers are free without reading work
    // request ids.
    let mut p = Pair::default_pair();
    for xid in [7_u32, 8] {
        let call = rpc_call(xid, 1, &[]);
        let msg = p.req.host.buf_with(&call, LW);
        let reply_buf = p.req.host.alloc(512, LW);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[],
            reply: reply_buf,
        });
        let inc = p.next_call().expect("CallReady");
        let resp = p.resp.conn.as_mut().expect("responder");
        assert_eq!(resp.poll_sent(), None, "nothing sent yet");
        let reply = rpc_reply(xid, &[0, 0, 0, 0]);
        let rmsg = p.resp.host.buf_with(&reply, LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        p.reply(inc.call, &spec);
        p.next_reply();
        let resp = p.resp.conn.as_mut().expect("responder");
        let sent = SentAnswer {
            call: inc.call,
            ok: true,
        };
        assert_eq!(resp.poll_sent(), Some(sent));
        assert_eq!(resp.poll_sent(), None, "reported once");
    }
    // The requester answers nothing: it has no reports.
    assert_eq!(p.req.conn.as_mut().expect("requester").poll_sent(), None);
}

/// Starts a call of `xid` with no arguments: in `slot` when given (`start_call_in`), else in
/// a slot the engine picks (`start_call`); does not pump.
fn start_named(p: &mut Pair, slot: Option<u32>, xid: u32) -> Result<CallId, StartError> {
    let msg = p.req.host.buf_with(&rpc_call(xid, 1, &[]), LW);
    let reply_buf = p.req.host.alloc(512, LW);
    let spec = CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    };
    let now = p.now;
    let side = &mut p.req;
    let conn = side.conn.as_mut().expect("requester");
    match slot {
        Some(s) => conn.start_call_in(now, s, xid, &spec, &CallOptions::NONE, &mut side.host),
        None => conn.start_call(now, &spec, &mut side.host),
    }
}

/// Answers every call the responder has (an empty accepted reply) and returns the requester's
/// reports, (slot, generation, XID) sorted.
fn answer_all(p: &mut Pair) -> Vec<(u32, u32, u32)> {
    p.pump();
    while let Some(inc) = p.next_call() {
        let rmsg = p.resp.host.buf_with(&rpc_reply(inc.xid, &[0, 0, 0, 0]), LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        assert_eq!(p.reply(inc.call, &spec), ReplyKind::Inline);
    }
    let mut got = Vec::new();
    while let Some(ev) = p.next_done() {
        match ev {
            Event::ReplyReady(r) => got.push((r.call.slot, r.call.generation, r.xid)),
            other => panic!("expected ReplyReady, got {other:?}"),
        }
    }
    got.sort_unstable();
    got
}

#[test]
fn accepts_calls_in_the_slots_their_caller_names() {
    // With `call_slots` the caller names each call's slot (its own record's index): the id
    // and the report carry that slot, and a slot is taken again once its call is reported.
    // The send buffers (one per credit here) are held only by calls on the wire.
    let mut cfg = Config::DEFAULT;
    cfg.credits = 2;
    cfg.call_slots = 8;
    let mut p = Pair::new(cfg, Config::DEFAULT);
    // One credit before the first reply, then two.
    let a = start_named(&mut p, Some(7), 0x100).expect("slot 7");
    assert_eq!(a.slot, 7);
    assert_eq!(answer_all(&mut p), vec![(7, a.generation, 0x100)]);
    let b = start_named(&mut p, Some(7), 0x200).expect("slot 7 again");
    let c = start_named(&mut p, Some(3), 0x201).expect("slot 3");
    assert_ne!(b.generation, a.generation);
    assert_eq!(
        answer_all(&mut p),
        vec![(3, c.generation, 0x201), (7, b.generation, 0x200)]
    );
    for (slot, xid) in [(0, 0x300), (6, 0x301)] {
        assert_eq!(
            start_named(&mut p, Some(slot), xid).map(|id| id.slot),
            Ok(slot)
        );
    }
    assert_eq!(answer_all(&mut p).len(), 2);
}

#[test]
fn rejects_named_slots_in_use_out_of_range_or_not_configured() {
    let mut cfg = Config::DEFAULT;
    cfg.call_slots = 4;
    let mut named = Pair::new(cfg, Config::DEFAULT);
    assert_eq!(start_named(&mut named, Some(2), 1).map(|id| id.slot), Ok(2));
    assert_eq!(answer_all(&mut named).len(), 1);
    // Credits granted: slot 2 is taken again, then refused while its call is on the wire.
    assert_eq!(start_named(&mut named, Some(2), 3).map(|id| id.slot), Ok(2));
    assert_eq!(start_named(&mut named, Some(2), 4), Err(StartError::Busy));
    assert_eq!(
        start_named(&mut named, Some(4), 5),
        Err(StartError::BadSpec)
    );
    assert_eq!(start_named(&mut named, None, 6), Err(StartError::BadSpec));
    assert_eq!(answer_all(&mut named).len(), 1);
    // A connection that picks its slots refuses a named one.
    let mut picked = Pair::default_pair();
    assert_eq!(
        start_named(&mut picked, Some(0), 7),
        Err(StartError::BadSpec)
    );
    assert!(start_named(&mut picked, None, 8).is_ok());
}

#[test]
fn accepts_err_chunk_retries_of_calls_in_named_slots() {
    // Two calls in caller-named slots (not the send buffers' indices), each with a small reply
    // buffer and a large fallback: both are answered ERR_CHUNK, and each goes again, same XID
    // and slot, offering its own fallback buffer (the spec kept for the retry is its own).
    let mut cfg = Config::DEFAULT;
    cfg.call_slots = 8;
    let mut p = Pair::new(cfg, Config::DEFAULT);
    assert!(start_named(&mut p, Some(0), 0x50).is_ok());
    assert_eq!(answer_all(&mut p).len(), 1);
    let mut calls = Vec::new();
    for (slot, xid) in [(6u32, 0x51u32), (1, 0x52)] {
        let m = p.req.host.buf_with(&rpc_call(xid, 1, &[]), EXPOSE);
        let small = p.req.host.alloc(256, EXPOSE);
        let big = p.req.host.alloc(16_384, EXPOSE);
        let spec = CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &[],
            reply: small,
        };
        let opts = CallOptions {
            fallback_reply: Some(big),
            fallback_receptacles: &[],
        };
        let now = p.now;
        let side = &mut p.req;
        let conn = side.conn.as_mut().expect("requester");
        let id = conn
            .start_call_in(now, slot, xid, &spec, &opts, &mut side.host)
            .expect("start_call_in");
        calls.push((id, xid, big));
    }
    p.pump();
    let serve = |p: &mut Pair| {
        let inc = p.next_call().expect("CallReady");
        let mut reply = rpc_reply(inc.xid, &[]);
        reply.resize(6000, inc.xid as u8);
        let rb = p.resp.host.buf_with(&reply, LW);
        let spec = ReplySpec {
            message: &[rb],
            results: &[],
        };
        (inc.xid, inc.reply_capacity, p.reply(inc.call, &spec))
    };
    let first: Vec<_> = (0..2).map(|_| serve(&mut p)).collect();
    assert!(first
        .iter()
        .all(|&(_, cap, k)| cap.is_none() && k == ReplyKind::ErrChunk));
    let mut again: Vec<_> = (0..2).map(|_| serve(&mut p)).collect();
    again.sort_unstable_by_key(|a| a.0);
    assert_eq!(
        again,
        vec![
            (0x51, Some(16_384), ReplyKind::Long),
            (0x52, Some(16_384), ReplyKind::Long)
        ]
    );
    for _ in 0..2 {
        let r = p.next_reply();
        let &(id, xid, big) = calls.iter().find(|c| c.0 == r.call).expect("a named call");
        assert_eq!((r.xid, r.len, r.long), (xid, 6000, true));
        let mut want = rpc_reply(xid, &[]);
        want.resize(6000, xid as u8);
        assert_eq!(p.req.host.read(big.sub(0, 6000).unwrap()), &want[..]);
        assert!(id.slot == 6 || id.slot == 1);
    }
}
