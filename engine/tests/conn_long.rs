//! Connection engine: long messages — RDMA_NOMSG calls with a Position Zero Read chunk and
//! RDMA_NOMSG replies through the Reply chunk — and the ERR_CHUNK cases around them.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallError, CallSpec, Config, DdpItem, Event, LocalBuf, ReplyKind, ReplySpec, Role,
};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1;
use rpcrdma_engine::verbs::Access;

const CANARY: u8 = 0xee;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Sends a call made of `parts` (the first starts with the RPC header) and returns the stream
/// the responder reassembled plus the decoded call header's (proc, read segments).
fn send_parts(
    p: &mut Pair,
    parts: &[Vec<u8>],
    ddp: &[(u32, Vec<u8>)],
) -> (Vec<u8>, v1::Proc, Vec<(u32, u32)>) {
    p.record = true;
    let bufs: Vec<LocalBuf> = parts
        .iter()
        .map(|b| p.req.host.buf_with(b, EXPOSE))
        .collect();
    let items: Vec<DdpItem> = ddp
        .iter()
        .map(|(at, d)| DdpItem {
            at: *at,
            buf: p.req.host.buf_with(d, EXPOSE),
        })
        .collect();
    let reply_buf = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &bufs,
        ddp: &items,
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().expect("CallReady");
    let got = p.resp.host.read(inc.stream).to_vec();
    let call = p.last_sent(Dir::Req).to_vec();
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    let reads = h
        .chunks()
        .unwrap()
        .reads
        .iter()
        .map(|r| (r.position, r.target.length))
        .collect();
    let xid = inc.xid;
    let rmsg = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    (got, h.proc(), reads)
}

#[test]
fn accepts_long_call_with_multi_segment_position_zero() {
    let mut p = Pair::default_pair();
    let head = rpc_call(0x1_0001, 20, &[]);
    let a = pattern(3000, 1);
    let b = pattern(2001, 2);
    let c = pattern(999, 3);
    let parts = vec![head.clone(), a.clone(), b.clone(), c.clone()];
    let (got, proc_, reads) = send_parts(&mut p, &parts, &[]);
    assert_eq!(proc_, v1::Proc::Nomsg);
    // One Position Zero Read chunk, one segment per discontiguous part.
    assert_eq!(reads, vec![(0, 40), (0, 3000), (0, 2001), (0, 999)]);
    let want: Vec<u8> = parts.concat();
    assert_eq!(got, want);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_inline_threshold_boundary() {
    // RDMA_MSG header with empty lists = 28 octets; 4096 - 28 = 4068 octets of RPC message
    // still go inline, 4072 go long.
    let mut p = Pair::default_pair();
    let head = rpc_call(0x2_0001, 1, &[]);
    let fill = |n: usize| pattern(n - head.len(), 4);
    let (got, proc_, _) = send_parts(&mut p, &[head.clone(), fill(4068)], &[]);
    assert_eq!(proc_, v1::Proc::Msg);
    assert_eq!(got.len(), 4068);
    let head = rpc_call(0x2_0002, 1, &[]);
    let (got, proc_, _) = send_parts(&mut p, &[head.clone(), fill(4072)], &[]);
    assert_eq!(proc_, v1::Proc::Nomsg);
    assert_eq!(got.len(), 4072);
}

#[test]
fn accepts_long_call_with_ddp_read_chunk() {
    // RDMA_NOMSG carrying the (large) inline part in Position Zero and a DDP argument as a Read
    // chunk at its XDR position (implementation-experience §3.5).
    let mut p = Pair::default_pair();
    let head = rpc_call(0x3_0001, 7, &words(&[6]));
    let big_tail = pattern(6000, 9);
    let data = pattern(6, 0x33);
    let at = head.len() as u32;
    let (got, proc_, reads) = send_parts(
        &mut p,
        &[head.clone(), big_tail.clone()],
        &[(at, data.clone())],
    );
    assert_eq!(proc_, v1::Proc::Nomsg);
    assert_eq!(reads, vec![(0, head.len() as u32), (0, 6000), (at, 6)]);
    let mut want = head;
    want.extend_from_slice(&data);
    want.extend_from_slice(&[0, 0]);
    want.extend_from_slice(&big_tail);
    assert_eq!(got, want);
}

#[test]
fn accepts_long_call_with_odd_parts_and_inline_items_without_ddp() {
    // DDP off: the item and its pad travel in the Position Zero chunk; the pad comes from the
    // connection's zero source, exposed read-only like every other Read segment.
    let mut cfg = Config::DEFAULT;
    cfg.ddp = false;
    let mut p = Pair::new(cfg, Config::DEFAULT);
    let head = rpc_call(0x4_0001, 7, &words(&[5]));
    let tail = pattern(5000, 1);
    let data = pattern(5, 0x44);
    let at = head.len() as u32;
    let (got, proc_, reads) =
        send_parts(&mut p, &[head.clone(), tail.clone()], &[(at, data.clone())]);
    assert_eq!(proc_, v1::Proc::Nomsg);
    assert!(reads.iter().all(|&(pos, _)| pos == 0));
    let mut want = head;
    want.extend_from_slice(&data);
    want.extend_from_slice(&[0, 0, 0]);
    want.extend_from_slice(&tail);
    assert_eq!(got, want);
}

/// A call offering a `reply_cap` reply buffer; the responder answers with `reply` (and
/// `results`). Returns the event, the reply buffer and the responder's answer kind.
fn long_reply(
    p: &mut Pair,
    xid: u32,
    reply_cap: u32,
    reply: &[u8],
    receptacles: &[u32],
    results: &[(u32, Vec<u8>)],
) -> (Event, LocalBuf, ReplyKind, Option<u32>) {
    let msg = p.req.host.buf_with(&rpc_call(xid, 16, &[]), LW);
    let reply_buf = p.req.host.alloc(reply_cap, EXPOSE);
    p.req.host.fill(reply_buf, CANARY);
    let recs: Vec<LocalBuf> = receptacles
        .iter()
        .map(|&c| p.req.host.alloc(c, EXPOSE))
        .collect();
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &recs,
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    let rmsg = p.resp.host.buf_with(reply, LW);
    let items: Vec<DdpItem> = results
        .iter()
        .map(|(at, d)| DdpItem {
            at: *at,
            buf: p.resp.host.buf_with(d, LW),
        })
        .collect();
    p.record = true;
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &items,
        },
    );
    (p.next_done().unwrap(), reply_buf, kind, inc.reply_capacity)
}

#[test]
fn accepts_long_reply_via_reply_chunk() {
    let mut p = Pair::default_pair();
    let xid = 0x5_0001;
    let mut reply = rpc_reply(xid, &[]);
    reply.extend_from_slice(&pattern(10_001, 7));
    let (ev, rbuf, kind, cap) = long_reply(&mut p, xid, 65_536, &reply, &[], &[]);
    assert_eq!(
        cap,
        Some(65_536),
        "Reply chunk offered over the reply buffer"
    );
    assert_eq!(kind, ReplyKind::Long);
    let Event::ReplyReady(r) = ev else {
        panic!("{ev:?}")
    };
    assert!(r.long);
    assert_eq!(r.len as usize, reply.len());
    let got = p.req.host.read(rbuf);
    assert_eq!(&got[..reply.len()], &reply[..]);
    assert!(
        got[reply.len()..].iter().all(|&b| b == CANARY),
        "octets written past the reply"
    );
    // RDMA_NOMSG with the Reply chunk returned with the length used.
    let sent = p.last_sent(Dir::Resp).to_vec();
    let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
    assert_eq!(h.proc(), v1::Proc::Nomsg);
    let rc = h.chunks().unwrap().reply.unwrap();
    assert_eq!(rc.len(), 1);
    assert_eq!(rc.get(0).unwrap().length as usize, reply.len());
    assert!(h.payload.is_empty());
}

#[test]
fn accepts_long_reply_with_write_chunk_result() {
    // A long reply that also returns a DDP result through a Write chunk.
    let mut p = Pair::default_pair();
    let xid = 0x5_0002;
    let mut reply = rpc_reply(xid, &words(&[7]));
    let at = reply.len() as u32;
    reply.extend_from_slice(&pattern(9000, 8));
    let data = pattern(7, 0x55);
    let (ev, rbuf, kind, _) = long_reply(&mut p, xid, 32_768, &reply, &[64], &[(at, data)]);
    assert_eq!(kind, ReplyKind::Long);
    let Event::ReplyReady(r) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(r.written(), &[7]);
    assert_eq!(&p.req.host.read(rbuf)[..reply.len()], &reply[..]);
}

#[test]
fn accepts_small_max_reply_without_reply_chunk() {
    // A reply buffer that fits the receive threshold with the largest reply header: no Reply
    // chunk. 4096 - 28 octets is the largest such buffer (no Write chunks).
    let mut p = Pair::default_pair();
    let xid = 0x5_0003;
    let reply = rpc_reply(xid, &[]);
    let (_, _, _, cap) = long_reply(&mut p, xid, 4096 - 28, &reply, &[], &[]);
    assert_eq!(cap, None);
    let (_, _, _, cap) = long_reply(
        &mut p,
        xid + 1,
        4096 - 27,
        &rpc_reply(xid + 1, &[]),
        &[],
        &[],
    );
    assert_eq!(cap, Some(4096 - 27));
}

#[test]
fn rejects_reply_too_big_without_reply_chunk() {
    let mut p = Pair::default_pair();
    let xid = 0x6_0001;
    let mut reply = rpc_reply(xid, &[]);
    reply.extend_from_slice(&pattern(8000, 1));
    let (ev, rbuf, kind, cap) = long_reply(&mut p, xid, 256, &reply, &[], &[]);
    assert_eq!(cap, None);
    assert_eq!(kind, ReplyKind::ErrChunk);
    assert!(
        matches!(
            ev,
            Event::CallFailed {
                error: CallError::ErrChunk,
                ..
            }
        ),
        "{ev:?}"
    );
    assert!(p.req.host.read(rbuf).iter().all(|&b| b == CANARY));
    // RDMA_ERROR / ERR_CHUNK on the wire: xid, vers 1, credits 64, RDMA_ERROR, ERR_CHUNK.
    assert_eq!(
        p.last_sent(Dir::Resp),
        &words(&[
            xid, // rdma_xid
            1,   // rdma_vers
            64,  // rdma_credit
            4,   // RDMA_ERROR
            2,   // ERR_CHUNK
        ])[..]
    );
}

#[test]
fn rejects_reply_larger_than_reply_chunk() {
    let mut p = Pair::default_pair();
    let xid = 0x6_0002;
    let mut reply = rpc_reply(xid, &[]);
    reply.extend_from_slice(&pattern(9000, 1));
    let (ev, _, kind, cap) = long_reply(&mut p, xid, 8192, &reply, &[], &[]);
    assert_eq!(cap, Some(8192));
    assert_eq!(kind, ReplyKind::ErrChunk);
    assert!(matches!(
        ev,
        Event::CallFailed {
            error: CallError::ErrChunk,
            ..
        }
    ));
}

#[test]
fn accepts_multi_segment_reply_chunk_from_a_foreign_requester() {
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        Config::DEFAULT,
        Sizing::for_config(Role::Responder, &Config::DEFAULT),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Req, 4, 4096);
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let segs: Vec<LocalBuf> = (0..3).map(|_| p.req.host.alloc(4096, rw)).collect();
    for s in &segs {
        p.req.host.fill(*s, CANARY);
    }
    let rkey = |p: &Pair, b: LocalBuf| {
        p.req
            .host
            .regions
            .iter()
            .find(|r| r.lkey == b.lkey)
            .unwrap()
            .rkey
    };
    let xid = 0x0202;
    let mut hdr = words(&[
        xid, // rdma_xid
        1,   // rdma_vers
        32,  // rdma_credit
        0,   // RDMA_MSG
        0,   // Read list: empty
        0,   // Write list: empty
        1,   // Reply chunk: present
        3,   //   segment count
    ]);
    for s in &segs {
        hdr.extend_from_slice(&words(&[
            rkey(&p, *s),          // handle
            4096,                  // length
            (s.addr >> 32) as u32, // offset (high)
            s.addr as u32,         // offset (low)
        ]));
    }
    hdr.extend_from_slice(&rpc_call(xid, 16, &[]));
    p.raw_send(Dir::Req, &hdr, None);
    let inc = p.next_call().unwrap();
    assert_eq!(inc.reply_capacity, Some(3 * 4096));
    let mut reply = rpc_reply(xid, &[]);
    reply.extend_from_slice(&pattern(10_000 - reply.len(), 3));
    let rmsg = p.resp.host.buf_with(&reply, LW);
    assert_eq!(
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[rmsg],
                results: &[],
            }
        ),
        ReplyKind::Long,
        "10000 octets exceed the 1024-octet default threshold"
    );
    let got = p.raw_take(Dir::Req);
    let h = v1::decode(&got[0], &ChunkLimits::DEFAULT).unwrap();
    assert_eq!(h.proc(), v1::Proc::Nomsg);
    let lens: Vec<u32> = h
        .chunks()
        .unwrap()
        .reply
        .unwrap()
        .segments()
        .map(|s| s.length)
        .collect();
    assert_eq!(lens, vec![4096, 4096, 1808]);
    let mut placed = Vec::new();
    for s in &segs {
        placed.extend_from_slice(p.req.host.read(*s));
    }
    assert_eq!(&placed[..10_000], &reply[..]);
    assert!(placed[10_000..].iter().all(|&b| b == CANARY));
}
