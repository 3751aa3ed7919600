//! The iWARP provider's data path under the connection engine allocates nothing per RPC once
//! warm, on either side: both connections run in this process over loopback TCP, and a counting
//! global allocator counts this thread's allocations while calls run through them (the
//! provider drives its sockets from the polls of this same thread). Each round trip carries a
//! DDP argument in a Read chunk (the responder's RDMA Read), a partial result in a Write chunk
//! (its RDMA Write), and every other call a long reply through the Reply chunk: Sends, RDMA
//! Writes, Read Requests and Read Responses, segmented and reassembled, CRC32c on.

mod common;

use std::time::{Duration, Instant};

use common::alloc_count::{count, CountingAlloc};
use common::iwarp::{connected_pair, Side};
use common::{pattern, rpc_call, rpc_reply};
use rpcrdma_engine::conn::{CallSpec, DdpItem, Event, HostMemory, LocalBuf, ReplySpec};

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

/// Drives both sides until `side(req, resp)` has an event `pick` accepts, and takes it.
fn wait_for(
    req: &mut Side,
    resp: &mut Side,
    now: &mut u64,
    on_resp: bool,
    pick: fn(&Event) -> bool,
) -> Event {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        *now += 1000;
        req.drive(*now);
        resp.drive(*now);
        assert!(
            req.errors.is_empty() && resp.errors.is_empty(),
            "error completions"
        );
        let s = if on_resp { &mut *resp } else { &mut *req };
        if let Some(e) = s.take(pick, |e| e) {
            return e;
        }
        assert!(Instant::now() < end, "timed out");
    }
}

fn round_trip(req: &mut Side, resp: &mut Side, now: &mut u64, b: &Bufs, xid: u32) {
    let put = |s: &mut Side, at: u64| {
        s.host
            .bytes_mut(at, 4)
            .expect("inside")
            .copy_from_slice(&xid.to_be_bytes());
    };
    put(req, b.msg.addr);
    put(resp, b.rmsg_short.addr);
    put(resp, b.rmsg_long.addr);
    let spec = CallSpec {
        message: &[b.msg],
        ddp: &[DdpItem {
            at: b.at,
            buf: b.arg,
        }],
        receptacles: &[b.rec],
        reply: b.reply,
    };
    req.conn
        .start_call(*now, &spec, &mut req.host)
        .expect("start_call");
    let Event::CallReady(inc) =
        wait_for(req, resp, now, true, |e| matches!(e, Event::CallReady(_)))
    else {
        unreachable!()
    };
    let rmsg = if xid % 2 == 0 {
        b.rmsg_short
    } else {
        b.rmsg_long
    };
    let spec = ReplySpec {
        message: &[rmsg],
        results: &[DdpItem {
            at: 28,
            buf: b.result,
        }],
    };
    resp.conn
        .send_reply(*now, inc.call, &spec, &mut resp.host)
        .expect("send_reply");
    match wait_for(req, resp, now, false, |e| {
        matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. })
    }) {
        Event::ReplyReady(r) => assert_eq!(r.written(), &[b.result.len]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepts_no_allocation_per_rpc_over_iwarp_once_warm() {
    let (_env, mut req, mut resp) = connected_pair();
    let call = rpc_call(0, 7, &[0, 0, 0, 13]);
    let mut long = rpc_reply(0, &[0, 0, 0, 13]);
    long.extend_from_slice(&pattern(9000, 1));
    let b = Bufs {
        msg: req.host.buf_with(&call),
        arg: req.host.buf_with(&pattern(6000, 2)),
        rec: req.host.alloc(8192),
        reply: req.host.alloc(16_384),
        rmsg_short: resp.host.buf_with(&rpc_reply(0, &[0, 0, 0, 13])),
        rmsg_long: resp.host.buf_with(&long),
        result: resp.host.buf_with(&pattern(5000, 3)),
        at: call.len() as u32,
    };
    let mut now = 0;
    // Warm up: queues and scratch lists reach their steady sizes.
    for xid in 1..=100 {
        round_trip(&mut req, &mut resp, &mut now, &b, xid);
    }
    let (allocs, ()) = count(|| {
        for xid in 101..=400 {
            round_trip(&mut req, &mut resp, &mut now, &b, xid);
        }
    });
    assert_eq!(allocs, 0, "heap allocations during 300 round trips");
    // The counter works: an allocation inside `count` is seen.
    let (n, v) = count(|| vec![1u8; 16]);
    assert!(n >= 1 && v.len() == 16);
}
