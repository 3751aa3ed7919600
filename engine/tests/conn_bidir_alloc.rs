//! Connection engine: no heap allocation per RPC in steady state with the backward direction
//! (RFC 8167) in use. Each round trip is a forward call with a DDP Read chunk and a Write
//! chunk (memory-window binds, Send With Invalidate or local invalidation) and, at the same
//! time and with the same XID, a backward call from the server answered by the client.

mod common;

use common::alloc_count::{count, CountingAlloc};
use common::*;
use rpcrdma_engine::conn::{CallSpec, Config, DdpItem, Event, LocalBuf, ReplySpec};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

struct Bufs {
    msg: LocalBuf,
    arg: LocalBuf,
    rec: LocalBuf,
    reply: LocalBuf,
    rmsg: LocalBuf,
    result: LocalBuf,
    at: u32,
    bmsg: LocalBuf,
    breply: LocalBuf,
    bres: LocalBuf,
}

fn round_trip(p: &mut Pair, b: &Bufs, xid: u32) {
    p.req.host.write(b.msg.addr, &xid.to_be_bytes());
    p.resp.host.write(b.rmsg.addr, &xid.to_be_bytes());
    p.resp.host.write(b.bmsg.addr, &xid.to_be_bytes());
    p.req.host.write(b.bres.addr, &xid.to_be_bytes());
    let ddp = [DdpItem {
        at: b.at,
        buf: b.arg,
    }];
    let recs = [b.rec];
    let msg = [b.msg];
    p.call(&CallSpec {
        message: &msg,
        ddp: &ddp,
        receptacles: &recs,
        reply: b.reply,
    });
    let bmsg = [b.bmsg];
    p.back_call(&CallSpec {
        message: &bmsg,
        ddp: &[],
        receptacles: &[],
        reply: b.breply,
    });
    let inc = p.next_call().expect("CallReady");
    let binc = p.next_back_call().expect("backward CallReady");
    assert_eq!(inc.xid, binc.xid);
    let bres = [b.bres];
    p.back_reply(
        binc.call,
        &ReplySpec {
            message: &bres,
            results: &[],
        },
    );
    let rmsg = [b.rmsg];
    let results = [DdpItem {
        at: 28,
        buf: b.result,
    }];
    p.reply(
        inc.call,
        &ReplySpec {
            message: &rmsg,
            results: &results,
        },
    );
    match p.next_done() {
        Some(Event::ReplyReady(r)) => assert_eq!(r.written(), &[b.result.len]),
        other => panic!("{other:?}"),
    }
    match p.next_back_done() {
        Some(Event::ReplyReady(r)) => assert_eq!(r.xid, xid),
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepts_no_allocation_per_rpc_with_backward_calls() {
    let mut p = Pair::new_bidir(Config::DEFAULT, Config::DEFAULT);
    p.enable_backchannel();
    let call = rpc_call(0, 7, &[0, 0, 0, 13]);
    let at = call.len() as u32;
    let b = Bufs {
        msg: p.req.host.buf_with(&call, EXPOSE),
        arg: p.req.host.buf_with(&pattern(13, 2), EXPOSE),
        rec: p.req.host.alloc(4096, EXPOSE),
        reply: p.req.host.alloc(512, EXPOSE),
        rmsg: p.resp.host.buf_with(&rpc_reply(0, &[0, 0, 0, 13]), LW),
        result: p.resp.host.buf_with(&pattern(13, 3), LW),
        at,
        bmsg: p.resp.host.buf_with(&rpc_call(0, 1, &[0, 0, 0, 1]), LW),
        breply: p.resp.host.alloc(256, LW),
        bres: p.req.host.buf_with(&rpc_reply(0, &[0, 0, 0, 2]), LW),
    };
    for xid in 1..=50 {
        round_trip(&mut p, &b, xid);
    }
    let (allocs, ()) = count(|| {
        for xid in 51..=550 {
            round_trip(&mut p, &b, xid);
        }
    });
    assert_eq!(p.wire.back_replies, 550);
    assert_eq!(p.stats.errors, 0);
    assert_eq!(
        allocs, 0,
        "heap allocations during 500 bidirectional round trips"
    );
    let (n, v) = count(|| vec![1u8; 16]);
    assert!(n >= 1 && v.len() == 16);
}
