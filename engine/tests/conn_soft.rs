//! Connection engine end to end over real soft-provider QPs (rdma_cm private data, memory
//! windows, RDMA Read/Write, Send With Invalidate), with rnr_retry 0: any RNR would complete
//! with an error and fail the test.

mod common;

use common::soft::SoftPair;
use common::{pattern, rpc_call, rpc_reply};
use rpcrdma_engine::conn::{
    CallSpec, Config, DdpItem, Event, IncomingCall, LocalBuf, ReplyKind, ReplySpec,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.credits = 16;
    c.sq_depth = 256;
    c.rq_depth = 128;
    c
}

fn take_call(p: &mut SoftPair) -> IncomingCall {
    let i = p
        .resp
        .events
        .iter()
        .position(|e| matches!(e, Event::CallReady(_)))
        .expect("CallReady");
    match p.resp.events.remove(i) {
        Event::CallReady(c) => c,
        _ => unreachable!(),
    }
}

fn take_done(p: &mut SoftPair) -> Event {
    let i = p
        .req
        .events
        .iter()
        .position(|e| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. }))
        .expect("call finished");
    p.req.events.remove(i)
}

fn no_errors(p: &SoftPair) {
    assert!(p.req.errors.is_empty(), "requester: {:?}", p.req.errors);
    assert!(p.resp.errors.is_empty(), "responder: {:?}", p.resp.errors);
}

/// An inline call and reply.
fn inline_round(p: &mut SoftPair, now: u64, reply: LocalBuf) {
    let call = rpc_call(0x51, 0, &[0, 0, 0, 1]);
    let msg = p.req.host.buf_with(&call);
    p.req
        .conn
        .start_call(
            now,
            &CallSpec {
                message: &[msg],
                ddp: &[],
                receptacles: &[],
                reply,
            },
            &mut p.req.host,
        )
        .unwrap();
    p.run();
    let inc = take_call(p);
    assert_eq!(p.resp.host.read(inc.stream), call);
    let r = rpc_reply(0x51, &[0, 0, 0, 2]);
    let rb = p.resp.host.buf_with(&r);
    let k = p
        .resp
        .conn
        .send_reply(
            now,
            inc.call,
            &ReplySpec {
                message: &[rb],
                results: &[],
            },
            &mut p.resp.host,
        )
        .unwrap();
    assert_eq!(k, ReplyKind::Inline);
    p.run();
    let Event::ReplyReady(rep) = take_done(p) else {
        panic!()
    };
    assert_eq!(p.req.host.read(reply.sub(0, rep.len).unwrap()), r);
    no_errors(p);
}

/// A READ-like call with a Write chunk (partially used, odd length) and a WRITE-like argument
/// in a Read chunk.
fn ddp_round(p: &mut SoftPair, now: u64, reply: LocalBuf) {
    let arg = pattern(1001, 4);
    let mut call = rpc_call(0x52, 6, &words(&[1001]));
    let at = call.len() as u32;
    call.extend_from_slice(&words(&[0xfeed]));
    let msg = p.req.host.buf_with(&call);
    let item = p.req.host.buf_with(&arg);
    let rec = p.req.host.alloc(8192);
    p.req.host.write(rec.addr, &[0xee; 8192]);
    p.req
        .conn
        .start_call(
            now,
            &CallSpec {
                message: &[msg],
                ddp: &[DdpItem { at, buf: item }],
                receptacles: &[rec],
                reply,
            },
            &mut p.req.host,
        )
        .unwrap();
    p.run();
    let inc = take_call(p);
    let mut want = call[..at as usize].to_vec();
    want.extend_from_slice(&arg);
    want.extend_from_slice(&[0, 0, 0]);
    want.extend_from_slice(&call[at as usize..]);
    assert_eq!(p.resp.host.read(inc.stream), want);
    let result = pattern(4095, 9);
    let r = rpc_reply(0x52, &words(&[4095]));
    let rb = p.resp.host.buf_with(&r);
    let db = p.resp.host.buf_with(&result);
    p.resp
        .conn
        .send_reply(
            now,
            inc.call,
            &ReplySpec {
                message: &[rb],
                results: &[DdpItem {
                    at: r.len() as u32,
                    buf: db,
                }],
            },
            &mut p.resp.host,
        )
        .unwrap();
    p.run();
    let Event::ReplyReady(rep) = take_done(p) else {
        panic!()
    };
    assert_eq!(rep.written(), &[4095]);
    let got = p.req.host.read(rec);
    assert_eq!(&got[..4095], &result[..]);
    assert!(got[4095..].iter().all(|&b| b == 0xee), "pad written");
    no_errors(p);
}

/// A long call (RDMA_NOMSG, multi-segment Position Zero) and a long reply (Reply chunk).
fn long_round(p: &mut SoftPair, now: u64) {
    let head = rpc_call(0x53, 20, &[]);
    let a = pattern(3000, 1);
    let b = pattern(2500, 2);
    let parts = [
        p.req.host.buf_with(&head),
        p.req.host.buf_with(&a),
        p.req.host.buf_with(&b),
    ];
    let big_reply = p.req.host.alloc(32 * 1024);
    p.req
        .conn
        .start_call(
            now,
            &CallSpec {
                message: &parts,
                ddp: &[],
                receptacles: &[],
                reply: big_reply,
            },
            &mut p.req.host,
        )
        .unwrap();
    p.run();
    let inc = take_call(p);
    assert_eq!(p.resp.host.read(inc.stream), [head, a, b].concat());
    assert_eq!(inc.reply_capacity, Some(32 * 1024));
    let mut r = rpc_reply(0x53, &[]);
    r.extend_from_slice(&pattern(12_345, 5));
    let rb = p.resp.host.buf_with(&r);
    let k = p
        .resp
        .conn
        .send_reply(
            now,
            inc.call,
            &ReplySpec {
                message: &[rb],
                results: &[],
            },
            &mut p.resp.host,
        )
        .unwrap();
    assert_eq!(k, ReplyKind::Long);
    p.run();
    let Event::ReplyReady(rep) = take_done(p) else {
        panic!()
    };
    assert!(rep.long);
    assert_eq!(p.req.host.read(big_reply.sub(0, rep.len).unwrap()), r);
    no_errors(p);
}

#[test]
fn accepts_calls_end_to_end_over_soft_provider() {
    let mut p = SoftPair::new(cfg(), cfg());
    assert!(
        matches!(p.req.events[0], Event::Connected(n) if n.remote_invalidate && n.peer_recognised)
    );
    let reply = p.req.host.alloc(256);
    let now = p.now;
    inline_round(&mut p, now, reply);
    ddp_round(&mut p, now, reply);
    long_round(&mut p, now);
}

#[test]
fn accepts_pipelined_calls_over_soft_provider_without_rnr() {
    // Fill the credit window repeatedly; the responder answers in batches.
    let mut p = SoftPair::new(cfg(), cfg());
    let reply_bufs: Vec<_> = (0..16).map(|_| p.req.host.alloc(512)).collect();
    let msgs: Vec<_> = (0..16).map(|_| p.req.host.alloc(256)).collect();
    let rmsgs: Vec<_> = (0..32).map(|_| p.resp.host.alloc(256)).collect();
    let mut xid = 1000u32;
    let mut done = 0;
    while done < 400 {
        let now = p.now;
        let mut issued = 0;
        loop {
            let i = (xid as usize) % 16;
            let call = rpc_call(xid, 1, &[]);
            p.req.host.write(msgs[i].addr, &call);
            let spec = CallSpec {
                message: &[msgs[i].sub(0, call.len() as u32).unwrap()],
                ddp: &[],
                receptacles: &[],
                reply: reply_bufs[i],
            };
            if p.req.conn.start_call(now, &spec, &mut p.req.host).is_err() {
                break;
            }
            xid += 1;
            issued += 1;
        }
        p.run();
        while let Some(i) = p
            .resp
            .events
            .iter()
            .position(|e| matches!(e, Event::CallReady(_)))
        {
            let Event::CallReady(inc) = p.resp.events.remove(i) else {
                unreachable!()
            };
            let r = rpc_reply(inc.xid, &[]);
            let rb = rmsgs[(inc.xid as usize) % 32];
            p.resp.host.write(rb.addr, &r);
            p.resp
                .conn
                .send_reply(
                    now,
                    inc.call,
                    &ReplySpec {
                        message: &[rb.sub(0, r.len() as u32).unwrap()],
                        results: &[],
                    },
                    &mut p.resp.host,
                )
                .unwrap();
        }
        p.run();
        while let Some(i) = p
            .req
            .events
            .iter()
            .position(|e| matches!(e, Event::ReplyReady(_)))
        {
            p.req.events.remove(i);
            done += 1;
        }
        assert!(issued > 0 || done >= 400, "stuck");
        no_errors(&p);
    }
    assert_eq!(p.resp.conn.receives_posted(), 16);
}
