//! Connection engine: no heap allocation per RPC in steady state, on either side.
//!
//! A counting global allocator counts the allocations of this test's thread while it runs
//! calls through both connections (the harness itself is pre-sized and allocation-free in
//! steady state). Each round trip exercises a DDP Read chunk, a Write chunk with a partial
//! result, memory-window binds and invalidations, and every other call a long reply through the
//! Reply chunk.

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
    rmsg_short: LocalBuf,
    rmsg_long: LocalBuf,
    result: LocalBuf,
    at: u32,
}

fn round_trip(p: &mut Pair, b: &Bufs, xid: u32) {
    p.req.host.write(b.msg.addr, &xid.to_be_bytes());
    p.resp.host.write(b.rmsg_short.addr, &xid.to_be_bytes());
    p.resp.host.write(b.rmsg_long.addr, &xid.to_be_bytes());
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
    let inc = p.next_call().expect("CallReady");
    let rmsg = [if xid % 2 == 0 {
        b.rmsg_short
    } else {
        b.rmsg_long
    }];
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
}

#[test]
fn accepts_no_allocation_per_rpc_in_steady_state() {
    let mut p = Pair::new(Config::DEFAULT, Config::DEFAULT);
    let call = rpc_call(0, 7, &[0, 0, 0, 13]);
    let at = call.len() as u32;
    let mut long = rpc_reply(0, &[0, 0, 0, 13]);
    long.extend_from_slice(&pattern(9000, 1));
    let b = Bufs {
        msg: p.req.host.buf_with(&call, EXPOSE),
        arg: p.req.host.buf_with(&pattern(13, 2), EXPOSE),
        rec: p.req.host.alloc(4096, EXPOSE),
        reply: p.req.host.alloc(16_384, EXPOSE),
        rmsg_short: p.resp.host.buf_with(&rpc_reply(0, &[0, 0, 0, 13]), LW),
        rmsg_long: p.resp.host.buf_with(&long, LW),
        result: p.resp.host.buf_with(&pattern(13, 3), LW),
        at,
    };
    // Warm up (lazy one-time allocations of the test framework, if any).
    for xid in 1..=50 {
        round_trip(&mut p, &b, xid);
    }
    let binds_before = p.stats.binds;
    let (allocs, ()) = count(|| {
        for xid in 51..=550 {
            round_trip(&mut p, &b, xid);
        }
    });
    assert!(
        p.stats.binds - binds_before >= 500 * 3,
        "windows were bound"
    );
    assert_eq!(p.stats.errors, 0);
    assert_eq!(allocs, 0, "heap allocations during 500 round trips");
    // The counter works: an allocation inside `count` is seen.
    let (n, v) = count(|| vec![1u8; 16]);
    assert!(n >= 1 && v.len() == 16);
}
