//! Connection engine: DDP with Read chunks (arguments) and Write chunks (results).
//!
//! XDR roundup rules (implementation-experience §3.7, §3.8): Read chunks carry no pad, inline
//! content after a chunk resumes on a 4-octet boundary, responders never write pad octets past a
//! Write chunk's data, unused Write chunks come back with their segment count and zero lengths.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallError, CallSpec, Config, DdpItem, Event, LocalBuf, ReplyKind, ReplySpec,
};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1;
use rpcrdma_engine::verbs::Access;

const CANARY: u8 = 0xee;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn roundup4(n: usize) -> usize {
    (n + 3) & !3
}

/// Sends a call whose stream is `head ‖ item ‖ tail` with `item` as a Read chunk, and returns
/// what the responder reassembled.
fn write_like_call(p: &mut Pair, xid: u32, item_len: usize, tail: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let data = pattern(item_len, 0x40);
    // An NFS WRITE-ish argument: file handle, offset, count, stable, then opaque<> data whose
    // length word stays inline.
    let mut args = words(&[8, 0x1111_1111, 0x2222_2222, 0, 4096, item_len as u32, 2]);
    args.extend_from_slice(&(item_len as u32).to_be_bytes());
    let head = rpc_call(xid, 7, &args);
    let mut inline = head.clone();
    inline.extend_from_slice(tail);
    let msg = p.req.host.buf_with(&inline, LW);
    let item = p.req.host.buf_with(&data, EXPOSE);
    let reply_buf = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[DdpItem {
            at: head.len() as u32,
            buf: item,
        }],
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().expect("CallReady");
    let got = p.resp.host.read(inc.stream).to_vec();
    let rmsg = p.resp.host.buf_with(&rpc_reply(xid, &[0, 0, 0, 0]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    p.next_reply();
    let mut want = head;
    want.extend_from_slice(&data);
    want.resize(roundup4(want.len()), 0);
    want.extend_from_slice(tail);
    (got, want)
}

#[test]
fn accepts_read_chunk_in_middle_of_stream() {
    // NFSv4 COMPOUND with WRITE in the middle: the inline part after the chunk (a GETATTR op)
    // resumes at the 4-octet boundary after the chunk's (untransferred) pad.
    let mut p = Pair::default_pair();
    p.record = true;
    let tail = words(&[9, 2, 0x0010_0000, 0x0000_0002]);
    let (got, want) = write_like_call(&mut p, 0x4001, 8191, &tail);
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    // The call's Read list: one segment at the argument's position, its exact (odd) length.
    let call = p
        .sent
        .iter()
        .find(|(d, _)| *d == Dir::Req)
        .unwrap()
        .1
        .clone();
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    assert_eq!(h.proc(), v1::Proc::Msg);
    let reads: Vec<_> = h.chunks().unwrap().reads.iter().collect();
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].position, 40 + 32);
    assert_eq!(reads[0].target.length, 8191, "no pad in a Read chunk");
    // The inline part after the header is exactly head ‖ tail (no pad octets between).
    assert_eq!(h.payload.len(), 40 + 32 + tail.len());
    // The responder pulled exactly 8191 octets.
    let pulled: u32 = p
        .rdma_log
        .iter()
        .filter(|(d, w, ..)| *d == Dir::Resp && !*w)
        .map(|(_, _, l, ..)| l)
        .sum();
    assert_eq!(pulled, 8191);
}

#[test]
fn accepts_read_chunk_at_end_of_stream() {
    // NFSv3 WRITE: the data is the last item of the call.
    let mut p = Pair::default_pair();
    for len in [1usize, 2, 3, 4, 5, 4096, 65_537] {
        let (got, want) = write_like_call(&mut p, 0x5000 + len as u32, len, &[]);
        assert_eq!(got, want, "item length {len}");
    }
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_two_read_chunks_with_positions_counting_pad() {
    // Two DDP arguments with inline content between and after: the second position counts the
    // first chunk's padded length.
    let mut p = Pair::default_pair();
    p.record = true;
    let xid = 0x77;
    let head = rpc_call(xid, 7, &words(&[5]));
    let mid = words(&[0xabcd_0001, 3]);
    let tail = words(&[0xabcd_0002]);
    let d1 = pattern(5, 1);
    let d2 = pattern(3, 2);
    let mut inline = head.clone();
    inline.extend_from_slice(&mid);
    inline.extend_from_slice(&tail);
    let msg = p.req.host.buf_with(&inline, LW);
    let b1 = p.req.host.buf_with(&d1, EXPOSE);
    let b2 = p.req.host.buf_with(&d2, EXPOSE);
    let reply_buf = p.req.host.alloc(128, LW);
    let at1 = head.len() as u32;
    let at2 = (head.len() + mid.len()) as u32;
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[DdpItem { at: at1, buf: b1 }, DdpItem { at: at2, buf: b2 }],
        receptacles: &[],
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    let mut want = head.clone();
    want.extend_from_slice(&d1);
    want.extend_from_slice(&[0, 0, 0]);
    want.extend_from_slice(&mid);
    want.extend_from_slice(&d2);
    want.push(0);
    want.extend_from_slice(&tail);
    assert_eq!(p.resp.host.read(inc.stream), &want[..]);
    let call = p.last_sent(Dir::Req).to_vec();
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    let pos: Vec<u32> = h
        .chunks()
        .unwrap()
        .reads
        .iter()
        .map(|r| r.position)
        .collect();
    assert_eq!(pos, vec![at1, at2 + 8]);
}

/// A READ-like exchange: receptacles offered, the responder returns `results[i]` octets for the
/// first results. Returns the reply, the receptacles and the decoded Write list lengths.
fn read_like(
    p: &mut Pair,
    xid: u32,
    caps: &[u32],
    results: &[usize],
) -> (Event, Vec<LocalBuf>, Vec<Vec<u32>>) {
    let msg = p
        .req
        .host
        .buf_with(&rpc_call(xid, 6, &words(&[8, 1, 2])), LW);
    let mut recs = Vec::new();
    for &c in caps {
        let r = p.req.host.alloc(c, EXPOSE);
        p.req.host.fill(r, CANARY);
        recs.push(r);
    }
    // Guard area right after the last receptacle.
    let guard = p.req.host.alloc(64, LW);
    p.req.host.fill(guard, CANARY);
    let reply_buf = p.req.host.alloc(512, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &recs,
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    assert_eq!(inc.write_chunks as usize, caps.len());
    assert_eq!(&inc.write_capacity[..caps.len()], caps);
    // Reply: for each result, count + eof + length word inline, data cut out after it.
    let mut reply = rpc_reply(xid, &[0, 0, 0, 0]);
    let mut items = Vec::new();
    for (i, &len) in results.iter().enumerate() {
        reply.extend_from_slice(&words(&[len as u32, 1, len as u32]));
        let data = p.resp.host.buf_with(&pattern(len, 0x80 + i as u8), LW);
        items.push(DdpItem {
            at: reply.len() as u32,
            buf: data,
        });
    }
    let rmsg = p.resp.host.buf_with(&reply, LW);
    p.record = true;
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &items,
        },
    );
    let ev = p.next_done().unwrap();
    if kind != ReplyKind::Inline {
        return (ev, recs, Vec::new());
    }
    let sent = p.last_sent(Dir::Resp).to_vec();
    let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
    let wl: Vec<Vec<u32>> = h
        .chunks()
        .unwrap()
        .writes
        .iter()
        .map(|c| c.segments().map(|s| s.length).collect())
        .collect();
    if let Event::ReplyReady(r) = ev {
        assert_eq!(
            p.req.host.read(reply_buf.sub(0, r.len).unwrap()),
            &reply[..],
            "inline reply without the DDP data"
        );
    }
    assert!(
        p.req.host.read(guard).iter().all(|&b| b == CANARY),
        "memory after the receptacles was written"
    );
    (ev, recs, wl)
}

#[test]
fn accepts_reply_with_one_write_chunk_partially_used() {
    // NFSv3 READ of 28 octets into a 4096-octet receptacle (as captured from Linux).
    let mut p = Pair::default_pair();
    let (ev, recs, wl) = read_like(&mut p, 0x600, &[4096], &[28]);
    let Event::ReplyReady(r) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(r.written(), &[28]);
    assert_eq!(wl, vec![vec![28]]);
    let got = p.req.host.read(recs[0]);
    assert_eq!(&got[..28], &pattern(28, 0x80)[..]);
    assert!(got[28..].iter().all(|&b| b == CANARY));
}

#[test]
fn accepts_odd_result_lengths_without_pad_writes() {
    for len in [1usize, 2, 3, 5, 27, 4095] {
        let mut p = Pair::default_pair();
        let (ev, recs, wl) = read_like(&mut p, 0x700 + len as u32, &[4096], &[len]);
        let Event::ReplyReady(r) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(r.written(), &[len as u32]);
        assert_eq!(wl, vec![vec![len as u32]]);
        let got = p.req.host.read(recs[0]);
        assert_eq!(&got[..len], &pattern(len, 0x80)[..]);
        assert!(
            got[len..].iter().all(|&b| b == CANARY),
            "a pad octet was written after a {len}-octet result"
        );
        assert_eq!(p.stats.write_octets, len as u64);
    }
}

#[test]
fn accepts_several_write_chunks_partially_used_and_unused() {
    let mut p = Pair::default_pair();
    let (ev, recs, wl) = read_like(&mut p, 0x800, &[1000, 500, 64], &[100, 3]);
    let Event::ReplyReady(r) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(r.written(), &[100, 3, 0]);
    // The unused third chunk is returned with its segment count unchanged and a zero length.
    assert_eq!(wl, vec![vec![100], vec![3], vec![0]]);
    let a = p.req.host.read(recs[0]);
    assert_eq!(&a[..100], &pattern(100, 0x80)[..]);
    assert!(a[100..].iter().all(|&b| b == CANARY));
    let b = p.req.host.read(recs[1]);
    assert_eq!(&b[..3], &pattern(3, 0x81)[..]);
    assert!(b[3..].iter().all(|&b| b == CANARY));
    assert!(p.req.host.read(recs[2]).iter().all(|&b| b == CANARY));
}

#[test]
fn rejects_result_larger_than_write_chunk_with_err_chunk() {
    let mut p = Pair::default_pair();
    let (ev, recs, _) = read_like(&mut p, 0x900, &[16], &[20]);
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
    assert!(p.req.host.read(recs[0]).iter().all(|&b| b == CANARY));
}

#[test]
fn accepts_results_beyond_write_list_inline() {
    // Two results but one Write chunk: the second result goes inline at its offset, padded.
    let mut p = Pair::default_pair();
    let xid = 0xa00;
    let msg = p.req.host.buf_with(&rpc_call(xid, 6, &[]), LW);
    let rec = p.req.host.alloc(64, EXPOSE);
    let reply_buf = p.req.host.alloc(512, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply: reply_buf,
    });
    let inc = p.next_call().unwrap();
    let mut reply = rpc_reply(xid, &words(&[10]));
    let at1 = reply.len() as u32;
    reply.extend_from_slice(&words(&[5]));
    let at2 = reply.len() as u32;
    reply.extend_from_slice(&words(&[0xfeed]));
    let d1 = p.resp.host.buf_with(&pattern(10, 1), LW);
    let d2 = p.resp.host.buf_with(&pattern(5, 2), LW);
    let rmsg = p.resp.host.buf_with(&reply, LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[DdpItem { at: at1, buf: d1 }, DdpItem { at: at2, buf: d2 }],
        },
    );
    let r = p.next_reply();
    assert_eq!(r.written(), &[10]);
    let mut want = reply[..at2 as usize].to_vec();
    want.extend_from_slice(&pattern(5, 2));
    want.extend_from_slice(&[0, 0, 0]);
    want.extend_from_slice(&reply[at2 as usize..]);
    assert_eq!(p.req.host.read(reply_buf.sub(0, r.len).unwrap()), &want[..]);
}

#[test]
fn accepts_ddp_off_sending_items_inline() {
    let mut cfg = Config::DEFAULT;
    cfg.ddp = false;
    let mut p = Pair::new(cfg, Config::DEFAULT);
    let (got, want) = write_like_call(&mut p, 0xb00, 13, &words(&[1, 2]));
    assert_eq!(got, want);
    assert_eq!(p.stats.reads, 0, "no Read chunk without DDP");
    assert_eq!(p.stats.binds, 0);
}

#[test]
fn accepts_multi_segment_write_chunks_from_a_foreign_requester() {
    // A hand-built call (a foreign requester exposing persistent rkeys) with a three-segment
    // Write chunk and an unused two-segment one.
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        rpcrdma_engine::conn::Role::Responder,
        Config::DEFAULT,
        Sizing::for_config(rpcrdma_engine::conn::Role::Responder, &Config::DEFAULT),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Req, 4, 4096);
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let segs: Vec<LocalBuf> = (0..5).map(|_| p.req.host.alloc(4096, rw)).collect();
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
    let xid = 0x0101;
    let mut hdr = words(&[
        xid, // rdma_xid
        1,   // rdma_vers
        16,  // rdma_credit
        0,   // RDMA_MSG
        0,   // Read list: empty
        1,   // Write list: one more chunk
        3,   //   segment count
    ]);
    for s in &segs[..3] {
        hdr.extend_from_slice(&words(&[
            rkey(&p, *s),          // handle
            4096,                  // length
            (s.addr >> 32) as u32, // offset (high)
            s.addr as u32,         // offset (low)
        ]));
    }
    hdr.extend_from_slice(&words(&[
        1, // Write list: one more chunk
        2, //   segment count
    ]));
    for s in &segs[3..] {
        hdr.extend_from_slice(&words(&[
            rkey(&p, *s),
            4096,
            (s.addr >> 32) as u32,
            s.addr as u32,
        ]));
    }
    hdr.extend_from_slice(&words(&[
        0, // Write list: end
        0, // Reply chunk: absent
    ]));
    hdr.extend_from_slice(&rpc_call(xid, 6, &[]));
    p.raw_send(Dir::Req, &hdr, None);
    let inc = p.next_call().unwrap();
    assert_eq!(inc.write_chunks, 2);
    assert_eq!(&inc.write_capacity[..2], &[3 * 4096, 2 * 4096]);
    let data = pattern(10_000, 5);
    let dbuf = p.resp.host.buf_with(&data, LW);
    let reply = rpc_reply(xid, &words(&[10_000]));
    let rmsg = p.resp.host.buf_with(&reply, LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rmsg],
            results: &[DdpItem {
                at: reply.len() as u32,
                buf: dbuf,
            }],
        },
    );
    let got = p.raw_take(Dir::Req);
    assert_eq!(got.len(), 1);
    let h = v1::decode(&got[0], &ChunkLimits::DEFAULT).unwrap();
    let wl: Vec<Vec<u32>> = h
        .chunks()
        .unwrap()
        .writes
        .iter()
        .map(|c| c.segments().map(|s| s.length).collect())
        .collect();
    assert_eq!(wl, vec![vec![4096, 4096, 1808], vec![0, 0]]);
    // Handles and offsets are echoed as offered.
    let first = h.chunks().unwrap().writes.get(0).unwrap().get(2).unwrap();
    assert_eq!(first.offset, segs[2].addr);
    assert_eq!(first.handle, rkey(&p, segs[2]));
    assert_eq!(h.payload, &reply[..]);
    let mut placed = Vec::new();
    for s in &segs[..3] {
        placed.extend_from_slice(p.req.host.read(*s));
    }
    assert_eq!(&placed[..10_000], &data[..]);
    assert!(placed[10_000..].iter().all(|&b| b == CANARY));
    for s in &segs[3..] {
        assert!(p.req.host.read(*s).iter().all(|&b| b == CANARY));
    }
    // No Send With Invalidate: the foreign requester sent no private data (no R).
    assert_eq!(p.stats.sends_with_inv, 0);
}
