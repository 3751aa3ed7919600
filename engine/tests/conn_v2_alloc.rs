//! Connection engine: no heap allocation per RPC in steady state in Version Two. Each round
//! trip is a Version Two call with a DDP Read chunk and a Write chunk (memory-window binds,
//! `rdma_inv_handle`, Send With Invalidate of exactly that handle, local invalidation of the
//! rest), every other one answered with a long reply through the Reply chunk, every fourth one
//! first answered with RDMA2_ERR_CANT_REPLY and retried with its fallback reply buffer; and a
//! Version Two backward call from the server with the same XID.

mod common;

use common::alloc_count::{count, CountingAlloc};
use common::*;
use rpcrdma_engine::conn::{
    CallOptions, CallSpec, Config, DdpItem, Event, LocalBuf, ReplyKind, ReplySpec,
};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

struct Bufs {
    msg: LocalBuf,
    arg: LocalBuf,
    rec: LocalBuf,
    reply: LocalBuf,
    small_reply: LocalBuf,
    rmsg_short: LocalBuf,
    rmsg_long: LocalBuf,
    result: LocalBuf,
    at: u32,
    bmsg: LocalBuf,
    breply: LocalBuf,
    bres: LocalBuf,
}

fn serve(p: &mut Pair, b: &Bufs, long: bool) -> ReplyKind {
    let inc = p.next_call().expect("CallReady");
    let rmsg = [if long { b.rmsg_long } else { b.rmsg_short }];
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
    )
}

fn round_trip(p: &mut Pair, b: &Bufs, xid: u32) {
    for buf in [b.msg, b.bres] {
        p.req.host.write(buf.addr, &xid.to_be_bytes());
    }
    for buf in [b.rmsg_short, b.rmsg_long, b.bmsg] {
        p.resp.host.write(buf.addr, &xid.to_be_bytes());
    }
    let ddp = [DdpItem {
        at: b.at,
        buf: b.arg,
    }];
    let recs = [b.rec];
    let msg = [b.msg];
    let retry = xid % 4 == 0;
    let now = p.now;
    {
        let side = &mut p.req;
        side.conn
            .as_mut()
            .unwrap()
            .start_call_with(
                now,
                &CallSpec {
                    message: &msg,
                    ddp: &ddp,
                    receptacles: &recs,
                    reply: if retry { b.small_reply } else { b.reply },
                },
                &CallOptions {
                    fallback_reply: Some(b.reply),
                    fallback_receptacles: &[],
                },
                &mut side.host,
            )
            .expect("start_call_with");
    }
    p.pump();
    let bmsg = [b.bmsg];
    p.back_call(&CallSpec {
        message: &bmsg,
        ddp: &[],
        receptacles: &[],
        reply: b.breply,
    });
    let binc = p.next_back_call().expect("backward CallReady");
    let bres = [b.bres];
    p.back_reply(
        binc.call,
        &ReplySpec {
            message: &bres,
            results: &[],
        },
    );
    let long = retry || xid % 2 == 1;
    if retry {
        assert_eq!(serve(p, b, true), ReplyKind::CantReply);
    }
    assert_eq!(
        serve(p, b, long),
        if long {
            ReplyKind::Long
        } else {
            ReplyKind::Inline
        }
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
fn accepts_no_allocation_per_rpc_in_version_two() {
    let mut cfg = Config::DEFAULT;
    cfg.max_version = 2;
    let mut p = Pair::new_bidir(cfg, cfg);
    p.enable_backchannel();
    let call = rpc_call(0, 7, &[0, 0, 0, 13]);
    let at = call.len() as u32;
    let mut long = rpc_reply(0, &[0, 0, 0, 13]);
    long.extend_from_slice(&pattern(9000, 1));
    let b = Bufs {
        msg: p.req.host.buf_with(&call, EXPOSE),
        arg: p.req.host.buf_with(&pattern(13, 2), EXPOSE),
        rec: p.req.host.alloc(4096, EXPOSE),
        reply: p.req.host.alloc(16_384, EXPOSE),
        small_reply: p.req.host.alloc(256, EXPOSE),
        rmsg_short: p.resp.host.buf_with(&rpc_reply(0, &[0, 0, 0, 13]), LW),
        rmsg_long: p.resp.host.buf_with(&long, LW),
        result: p.resp.host.buf_with(&pattern(13, 3), LW),
        at,
        bmsg: p.resp.host.buf_with(&rpc_call(0, 1, &[0, 0, 0, 1]), LW),
        breply: p.resp.host.alloc(256, LW),
        bres: p.req.host.buf_with(&rpc_reply(0, &[0, 0, 0, 2]), LW),
    };
    for xid in 1..=50 {
        round_trip(&mut p, &b, xid);
    }
    assert_eq!(p.req.conn.as_ref().unwrap().version(), 2);
    let swi = p.stats.sends_with_inv;
    let (allocs, ()) = count(|| {
        for xid in 51..=550 {
            round_trip(&mut p, &b, xid);
        }
    });
    assert!(
        p.stats.sends_with_inv - swi >= 500,
        "rdma_inv_handle honoured"
    );
    assert_eq!(p.stats.errors, 0);
    assert_eq!(
        allocs, 0,
        "heap allocations during 500 Version Two round trips"
    );
    let (n, v) = count(|| vec![1u8; 16]);
    assert!(n >= 1 && v.len() == 16);
}
