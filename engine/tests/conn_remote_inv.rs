//! Connection engine: remote invalidation (RFC 8797 §4.1, FACTS: Linux invalidates only when a
//! call carries exactly one distinct handle). For every combination of the two R bits and
//! several call shapes: Send With Invalidate is used exactly when both R bits are set and the
//! call has one handle; the remotely invalidated STag no longer allows any access; every other
//! STag of the call was invalidated locally, once, and never the remotely invalidated one.

mod common;

use common::*;
use rpcrdma_engine::conn::{CallSpec, Config, DdpItem, Event, LocalBuf, ReplySpec, Role, StagMode};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1;
use rpcrdma_engine::verbs::Access;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    /// One Write chunk (one handle).
    OneWrite,
    /// One DDP argument as a Read chunk (one handle).
    OneRead,
    /// A reply too large for inline: the Reply chunk is the only handle.
    OneReply,
    /// A Write chunk and a Reply chunk (two handles).
    WriteAndReply,
    /// A Read chunk, two Write chunks and a Reply chunk (four handles).
    Four,
}

/// Handles of the call just sent (all segments of all lists).
fn sent_handles(p: &Pair) -> Vec<u32> {
    let h = v1::decode(p.last_sent(Dir::Req), &ChunkLimits::DEFAULT).unwrap();
    let mut v: Vec<u32> = h.chunks().unwrap().segments().map(|s| s.handle).collect();
    v.sort();
    v.dedup();
    v
}

/// Runs one call of `shape`; returns the call's handles.
fn run(p: &mut Pair, xid: u32, shape: Shape) -> Vec<u32> {
    p.record = true;
    p.inv_log.clear();
    let call = rpc_call(xid, 1, &words(&[8]));
    let msg = p.req.host.buf_with(&call, EXPOSE);
    let item = p.req.host.buf_with(&pattern(8, 1), EXPOSE);
    let rec1 = p.req.host.alloc(64, EXPOSE);
    let rec2 = p.req.host.alloc(64, EXPOSE);
    let small = p.req.host.alloc(256, EXPOSE);
    let large = p.req.host.alloc(16_384, EXPOSE);
    let ddp_item = [DdpItem {
        at: call.len() as u32,
        buf: item,
    }];
    let (ddp, recs, reply): (&[DdpItem], Vec<LocalBuf>, LocalBuf) = match shape {
        Shape::OneWrite => (&[], vec![rec1], small),
        Shape::OneRead => (&ddp_item, vec![], small),
        Shape::OneReply => (&[], vec![], large),
        Shape::WriteAndReply => (&[], vec![rec1], large),
        Shape::Four => (&ddp_item, vec![rec1, rec2], large),
    };
    p.call(&CallSpec {
        message: &[msg],
        ddp,
        receptacles: &recs,
        reply,
    });
    let handles = sent_handles(p);
    let inc = p.next_call().expect("CallReady");
    let r = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    let d = p.resp.host.buf_with(&[7; 10], LW);
    let results = [DdpItem { at: 24, buf: d }];
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: if recs.is_empty() { &[] } else { &results },
        },
    );
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    assert_eq!(p.stats.errors, 0);
    handles
}

/// Checks the invalidations of one finished call with `handles`; `remote` says whether Send
/// With Invalidate was expected.
fn check(p: &Pair, handles: &[u32], remote: bool, what: &str) {
    let remote_invs: Vec<u32> = p
        .inv_log
        .iter()
        .filter(|e| e.0 == Dir::Req && e.2)
        .map(|e| e.1)
        .collect();
    let local_invs: Vec<u32> = p
        .inv_log
        .iter()
        .filter(|e| e.0 == Dir::Req && !e.2)
        .map(|e| e.1)
        .collect();
    if remote {
        assert_eq!(
            remote_invs, handles,
            "{what}: the single handle invalidated remotely"
        );
        assert!(
            local_invs.is_empty(),
            "{what}: nothing left to invalidate locally"
        );
    } else {
        assert!(remote_invs.is_empty(), "{what}: no Send With Invalidate");
        let mut l = local_invs.clone();
        l.sort();
        assert_eq!(l, handles, "{what}: every handle invalidated locally, once");
    }
    // No STag of the call allows any access any more, whoever invalidated it.
    for &h in handles {
        assert!(!p.req.host.rkey_live(h), "{what}: {h:#x} still live");
        for m in &p.req.host.mws {
            assert!(
                m.rkey != h || m.bound.is_none(),
                "{what}: {h:#x} still bound"
            );
        }
    }
    assert_eq!(p.req.host.bound_windows(), 0, "{what}");
}

#[test]
fn accepts_remote_invalidation_exactly_when_both_r_bits_and_one_handle() {
    let shapes = [
        (Shape::OneWrite, 1),
        (Shape::OneRead, 1),
        (Shape::OneReply, 1),
        (Shape::WriteAndReply, 2),
        (Shape::Four, 4),
    ];
    for (client_r, server_r) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut cc = Config::DEFAULT;
        cc.remote_invalidate = client_r;
        let mut sc = Config::DEFAULT;
        sc.remote_invalidate = server_r;
        let mut p = Pair::new(cc, sc);
        assert_eq!(
            p.req.conn.as_ref().unwrap().private_data()[5],
            u8::from(client_r)
        );
        assert_eq!(
            p.resp.conn.as_ref().unwrap().private_data()[5],
            u8::from(server_r)
        );
        for (i, &(shape, n)) in shapes.iter().enumerate() {
            let what = format!("R client {client_r} server {server_r}, {shape:?}");
            let handles = run(&mut p, 0x100 + i as u32, shape);
            assert_eq!(handles.len(), n, "{what}");
            check(&p, &handles, client_r && server_r && n == 1, &what);
        }
    }
}

#[test]
fn accepts_no_remote_invalidation_with_persistent_stags() {
    // A client with persistent STags does not advertise R: the server must never invalidate
    // its registration keys, which stay valid after the call.
    let mut cc = Config::DEFAULT;
    cc.stag = StagMode::Persistent;
    let mut p = Pair::new(cc, Config::DEFAULT);
    p.check_stags = false;
    assert_eq!(p.req.conn.as_ref().unwrap().private_data()[5], 0);
    assert!(!p.resp.conn.as_ref().unwrap().negotiated().remote_invalidate);
    p.record = true;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let msg = p.req.host.buf_with(&rpc_call(0x200, 6, &[]), LW);
    let rec = p.req.host.alloc(64, rw);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    let handles = sent_handles(&p);
    assert_eq!(handles.len(), 1);
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0x200, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    p.next_reply();
    assert_eq!(p.stats.sends_with_inv, 0);
    assert!(p.inv_log.is_empty());
    assert!(p.req.host.rkey_live(handles[0]), "persistent key revoked");
}

#[test]
fn accepts_foreign_responder_invalidating_one_of_several_handles() {
    // A foreign responder invalidates one handle of a four-handle call (more than Linux does,
    // but within RFC 8797: it belongs to the call named by the XID). The requester skips that
    // one and invalidates the three others locally.
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
    for victim in 0..4usize {
        p.record = true;
        p.inv_log.clear();
        let xid = 0x300 + victim as u32;
        let call = rpc_call(xid, 1, &words(&[8]));
        let msg = p.req.host.buf_with(&call, EXPOSE);
        let item = p.req.host.buf_with(&pattern(8, 1), EXPOSE);
        let recs = [p.req.host.alloc(64, EXPOSE), p.req.host.alloc(64, EXPOSE)];
        let reply = p.req.host.alloc(16_384, EXPOSE);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[DdpItem {
                at: call.len() as u32,
                buf: item,
            }],
            receptacles: &recs,
            reply,
        });
        let sent = p.raw_take(Dir::Resp).pop().unwrap();
        let h = v1::decode(&sent, &ChunkLimits::DEFAULT).unwrap();
        let handles: Vec<u32> = h.chunks().unwrap().segments().map(|s| s.handle).collect();
        assert_eq!(handles.len(), 4);
        // Reply: RDMA_MSG, two empty Write chunks returned (count 1, length 0), no Reply chunk.
        let c = h.chunks().unwrap();
        let w: Vec<_> = c.writes.iter().map(|w| w.get(0).unwrap()).collect();
        let mut m = words(&[
            xid,
            1,
            8,
            0, // xid, vers, credits, RDMA_MSG
            0, // Read list: empty
            1,
            1,
            w[0].handle,
            0,
            0,
            0, // Write chunk 1: one segment, length 0
            1,
            1,
            w[1].handle,
            0,
            0,
            0, // Write chunk 2: one segment, length 0
            0, // end of Write list
            0, // no Reply chunk
        ]);
        // Offsets are 64-bit: the words above put them as (0, 0); patch the real ones.
        let put64 = |m: &mut Vec<u8>, at: usize, v: u64| {
            m[at..at + 8].copy_from_slice(&v.to_be_bytes());
        };
        put64(&mut m, 4 * 9, w[0].offset);
        put64(&mut m, 4 * 15, w[1].offset);
        m.extend_from_slice(&rpc_reply(xid, &[]));
        p.raw_send(Dir::Resp, &m, Some(handles[victim]));
        match p.next_done() {
            Some(Event::ReplyReady(r)) => assert_eq!(r.written(), &[0, 0]),
            other => panic!("{other:?}"),
        }
        let mut others: Vec<u32> = handles.clone();
        let inv = others.remove(victim);
        let mut local: Vec<u32> = p.inv_log.iter().filter(|e| !e.2).map(|e| e.1).collect();
        local.sort();
        others.sort();
        assert_eq!(
            local, others,
            "victim {victim}: the others invalidated locally"
        );
        assert!(!p.inv_log.iter().any(|e| !e.2 && e.1 == inv));
        for &k in &handles {
            assert!(!p.req.host.rkey_live(k));
        }
        assert_eq!(p.stats.errors, 0);
    }
}

/// RFC 8797 §4.1 lets a responder use Send With Invalidate to convey an RPC *reply*; an
/// RDMA_ERROR is no reply (RFC 8166 §4.5: it reports a transport error in place of one), and
/// Linux svcrdma never sends one with invalidate. With both R bits set and a call carrying a
/// single handle — a Write chunk the result overflows, or a Reply chunk the reply overflows —
/// the ERR_CHUNK answer is a plain Send: the requester invalidates that handle itself.
#[test]
fn rejects_send_with_invalidate_for_an_err_chunk_answer() {
    let mut p = Pair::new(Config::DEFAULT, Config::DEFAULT);
    assert!(p.resp.conn.as_ref().unwrap().negotiated().remote_invalidate);
    for (i, overflow_reply_chunk) in [false, true].into_iter().enumerate() {
        p.record = true;
        p.inv_log.clear();
        let xid = 0x400 + i as u32;
        let msg = p.req.host.buf_with(&rpc_call(xid, 1, &[]), EXPOSE);
        let rec = p.req.host.alloc(64, EXPOSE);
        // 8192 octets: above the 4096 receive threshold, so a Reply chunk (the only handle).
        let reply = p
            .req
            .host
            .alloc(if overflow_reply_chunk { 8192 } else { 256 }, EXPOSE);
        let recs = if overflow_reply_chunk {
            vec![]
        } else {
            vec![rec]
        };
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &recs,
            reply,
        });
        let handles = sent_handles(&p);
        assert_eq!(
            handles.len(),
            1,
            "a single handle: a Send With Invalidate candidate"
        );
        let inc = p.next_call().expect("CallReady");
        let mut body = rpc_reply(xid, &[]);
        if overflow_reply_chunk {
            body.resize(9000, 0x11); // larger than the 8192-octet Reply chunk
        }
        let r = p.resp.host.buf_with(&body, LW);
        let big = p.resp.host.buf_with(&[7; 100], LW); // larger than the 64-octet Write chunk
        let results = [DdpItem { at: 24, buf: big }];
        let kind = p.reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: if overflow_reply_chunk { &[] } else { &results },
            },
        );
        assert_eq!(kind, rpcrdma_engine::conn::ReplyKind::ErrChunk);
        assert!(matches!(
            p.next_done(),
            Some(Event::CallFailed {
                error: rpcrdma_engine::conn::CallError::ErrChunk,
                ..
            })
        ));
        // On the wire: RDMA_ERROR / ERR_CHUNK, sent without invalidation.
        assert_eq!(be32(p.last_sent(Dir::Resp), 3), 4, "RDMA_ERROR");
        assert_eq!(p.stats.sends_with_inv, 0, "ERR_CHUNK sent with invalidate");
        check(&p, &handles, false, "ERR_CHUNK");
        assert_eq!(p.stats.errors, 0);
    }
}
