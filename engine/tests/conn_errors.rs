//! Connection engine: error handling. Hand-written headers (hex words, one comment each, from
//! the XDR of RFC 8166 / implementation-experience Appendix A) are injected by a raw peer.
//!
//! Responder: every malformed-header class is answered as RFC 8166 §4.4 requires — ERR_VERS
//! (range 1..=1) for an unknown version, ERR_CHUNK for a recognised version that cannot be
//! parsed, silence for what cannot be answered — and the connection keeps working.
//! Requester: RDMA_ERROR replies complete the call with the error; replies that cannot be used
//! fail the call; replies with unknown XIDs are dropped.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    BadReply, CallError, CallSpec, Config, ConnState, DdpItem, Event, LocalBuf, Role,
};
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1::{self, HeaderErrorKind};
use rpcrdma_engine::verbs::Access;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const RDMA_MSG: u32 = 0;
const RDMA_NOMSG: u32 = 1;
const RDMA_MSGP: u32 = 2;
const RDMA_DONE: u32 = 3;
const RDMA_ERROR: u32 = 4;

/// A raw requester facing a real responder.
fn raw_requester() -> Pair {
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
    p.raw_post_recvs(Dir::Req, 64, 4096);
    p
}

/// A raw requester that advertised R (remote invalidation) in its RFC 8797 private data.
fn raw_requester_with_r() -> Pair {
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
    let pd = rpcrdma_engine::proto::private_data::PrivateData::v1(true, 4096, 4096).encode();
    p.connect_with(&[], &pd);
    p.raw_post_recvs(Dir::Req, 64, 4096);
    p
}

/// Sends `msg` and returns what came back (at most one message).
fn probe(p: &mut Pair, msg: &[u8]) -> Option<Vec<u8>> {
    p.raw_send(Dir::Req, msg, None);
    let mut got = p.raw_take(Dir::Req);
    assert!(got.len() <= 1, "more than one answer");
    got.pop()
}

fn err_chunk(xid: u32) -> Vec<u8> {
    words(&[
        xid,        // rdma_xid
        1,          // rdma_vers
        64,         // rdma_credit (the grant)
        RDMA_ERROR, // rdma_proc
        2,          // ERR_CHUNK
    ])
}

/// After a probe: the responder still has its receives posted and still answers a good call.
fn still_works(p: &mut Pair, xid: u32) {
    let c = p.resp.conn.as_ref().unwrap();
    assert_eq!(c.state(), ConnState::Connected);
    assert_eq!(c.receives_posted(), Config::DEFAULT.credits);
    let mut m = words(&[xid, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(xid, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().expect("good call delivered");
    assert_eq!(inc.xid, xid);
    let rmsg = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.reply(
        inc.call,
        &rpcrdma_engine::conn::ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    let got = p.raw_take(Dir::Req);
    assert_eq!(got.len(), 1);
    assert_eq!(be32(&got[0], 0), xid);
    assert_eq!(be32(&got[0], 3), RDMA_MSG);
}

#[test]
fn rejects_version_2_header_with_err_vers() {
    let mut p = raw_requester();
    // A Version Two call header (draft): xid, vers 2, credits, proc RDMA2_MSG, ...
    let mut m = words(&[
        0x0000_0a01, // rdma_xid
        2,           // rdma_vers = 2
        16,          // rdma_credit
        0,           // rdma_htype (RDMA2_MSG)
        0,           // Read list: empty
        0,           // Write list: empty
        0,           // Reply chunk: absent
    ]);
    m.extend_from_slice(&rpc_call(0xa01, 0, &[]));
    let ans = probe(&mut p, &m).expect("ERR_VERS");
    assert_eq!(
        ans,
        words(&[
            0x0000_0a01, // rdma_xid copied
            2,           // rdma_vers copied from the offending message
            64,          // rdma_credit
            RDMA_ERROR,  // rdma_proc
            1,           // ERR_VERS
            1,           // rdma_vers_low
            1,           // rdma_vers_high
        ])
    );
    assert!(p.next_call().is_none());
    still_works(&mut p, 0xa02);
}

#[test]
fn rejects_malformed_headers_as_rfc_8166_requires() {
    let rpc = |xid| rpc_call(xid, 0, &[]);
    // (name, message, expected answer: Some(ERR_CHUNK) or None for a silent drop)
    let mut cases: Vec<(&str, Vec<u8>, bool)> = Vec::new();
    let x = 0x100;
    // Too short for the fixed header: drop.
    cases.push(("short header", words(&[x, 1, 8]), false));
    // Unknown procedure.
    let mut m = words(&[x + 1, 1, 8, 5, 0, 0, 0]);
    m.extend_from_slice(&rpc(x + 1));
    cases.push(("unknown proc", m, true));
    // Read list announces an entry that is cut off.
    cases.push((
        "truncated read list",
        words(&[x + 2, 1, 8, RDMA_MSG, 1, 0x20, 0xabcd]),
        true,
    ));
    // A list discriminant that is neither 0 nor 1.
    let mut m = words(&[x + 3, 1, 8, RDMA_MSG, 2, 0, 0]);
    m.extend_from_slice(&rpc(x + 3));
    cases.push(("bad discriminant", m, true));
    // Read position not a multiple of four.
    let mut m = words(&[
        x + 4,
        1,
        8,
        RDMA_MSG,
        1,      // Read list: entry
        42,     //   position (misaligned)
        0x1234, //   handle
        16,     //   length
        0,      //   offset hi
        0x1000, //   offset lo
        0,      // Read list: end
        0,      // Write list: empty
        0,      // Reply chunk: absent
    ]);
    m.extend_from_slice(&rpc(x + 4));
    cases.push(("misaligned position", m, true));
    // Position Zero Read chunk in an RDMA_MSG.
    let mut m = words(&[x + 5, 1, 8, RDMA_MSG, 1, 0, 0x1234, 16, 0, 0x1000, 0, 0, 0]);
    m.extend_from_slice(&rpc(x + 5));
    cases.push(("position zero in RDMA_MSG", m, true));
    // RDMA_NOMSG with no chunk at all.
    cases.push((
        "RDMA_NOMSG without chunks",
        words(&[x + 6, 1, 8, RDMA_NOMSG, 0, 0, 0]),
        true,
    ));
    // RDMA_NOMSG call with only a Reply chunk (no Position Zero Read chunk).
    cases.push((
        "RDMA_NOMSG call without position zero",
        words(&[x + 7, 1, 8, RDMA_NOMSG, 0, 0, 1, 1, 0x55, 64, 0, 0x2000]),
        true,
    ));
    // RDMA_MSG without an RPC message: too small to convey one, dropped silently
    // (RFC 8167 §5.3).
    cases.push((
        "RDMA_MSG without payload",
        words(&[x + 8, 1, 8, RDMA_MSG, 0, 0, 0]),
        false,
    ));
    cases.push((
        "RDMA_MSG with only an RPC XID",
        words(&[x + 8, 1, 8, RDMA_MSG, 0, 0, 0, x + 8]),
        false,
    ));
    // Transport XID differs from the RPC XID.
    let mut m = words(&[x + 9, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc(0xdead));
    cases.push(("XID mismatch", m, true));
    // More read segments than the limit (16).
    let mut m = words(&[x + 10, 1, 8, RDMA_MSG]);
    for i in 0..17u32 {
        m.extend_from_slice(&words(&[1, 64, 0x99, 4, 0, 0x1000 + 16 * i]));
    }
    m.extend_from_slice(&words(&[0, 0, 0]));
    m.extend_from_slice(&rpc(x + 10));
    cases.push(("too many read segments", m, true));
    // Segment offset + length overflows 64 bits.
    let mut m = words(&[
        x + 11,
        1,
        8,
        RDMA_MSG,
        0, // Read list: empty
        1, // Write list: entry
        1, //   count
        0x77,
        16,
        0xffff_ffff,
        0xffff_fff8, // offset near 2^64
        0,
        0,
    ]);
    m.extend_from_slice(&rpc(x + 11));
    cases.push(("segment overflow", m, true));
    // A Read chunk positioned past the end of the inline stream (engine geometry check).
    let mut m = words(&[
        x + 12,
        1,
        8,
        RDMA_MSG,
        1,
        4096,
        0x1234,
        16,
        0,
        0x1000,
        0,
        0,
        0,
    ]);
    m.extend_from_slice(&rpc(x + 12));
    cases.push(("read chunk past the stream", m, true));
    // RDMA_ERROR from a requester: never answered.
    cases.push(("RDMA_ERROR", words(&[x + 13, 1, 8, RDMA_ERROR, 2]), false));
    // RDMA_DONE: ignored.
    cases.push(("RDMA_DONE", words(&[x + 14, 1, 8, RDMA_DONE]), false));

    for (i, (name, msg, answered)) in cases.into_iter().enumerate() {
        let mut p = raw_requester();
        let xid = be32(&msg, 0);
        let ans = probe(&mut p, &msg);
        if answered {
            assert_eq!(ans, Some(err_chunk(xid)), "{name}: expected ERR_CHUNK");
        } else {
            assert_eq!(ans, None, "{name}: expected no answer");
        }
        assert!(p.next_call().is_none(), "{name}: delivered");
        still_works(&mut p, 0x9000 + i as u32);
    }
}

/// RFC 8797 §4.1: Send With Invalidate conveys an RPC reply; an RDMA_ERROR answer to a header
/// the responder cannot use is none (Linux svcrdma sends its errors with plain Sends). With
/// remote invalidation negotiated (the raw requester advertises R) and a header naming a single
/// handle, every ERR_VERS and ERR_CHUNK answer — from the codec, from the responder's geometry
/// checks, and after the Position Zero chunk was read — arrives without invalidation.
#[test]
fn rejects_send_with_invalidate_for_header_error_answers() {
    let mut p = raw_requester_with_r();
    assert!(p.resp.conn.as_ref().unwrap().negotiated().remote_invalidate);
    let body = rpc_call(0xbad, 0, &[]);
    let b = p
        .req
        .host
        .buf_with(&body, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let rkey = p.req.host.regions.last().unwrap().rkey;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // ERR_VERS: version 3, one Write chunk.
    let mut m = words(&[0x700, 3, 8, RDMA_MSG, 0, 1, 1, 0x55, 64, 0, 0x2000, 0, 0]);
    m.extend_from_slice(&rpc_call(0x700, 0, &[]));
    cases.push(("ERR_VERS", m));
    // ERR_CHUNK from the call check: RDMA_NOMSG with only a Reply chunk (handle 0x55).
    cases.push((
        "RDMA_NOMSG call without position zero",
        words(&[0x701, 1, 8, RDMA_NOMSG, 0, 0, 1, 1, 0x55, 64, 0, 0x2000]),
    ));
    // ERR_CHUNK from the responder's geometry check: one Read chunk past the stream.
    let mut m = words(&[
        0x702, 1, 8, RDMA_MSG, 1, 4096, 0x1234, 16, 0, 0x1000, 0, 0, 0,
    ]);
    m.extend_from_slice(&rpc_call(0x702, 0, &[]));
    cases.push(("read chunk past the stream", m));
    // ERR_CHUNK after the Read: the Position Zero chunk holds another XID (handle `rkey`).
    let m = words(&[
        0x703,
        1,
        8,
        RDMA_NOMSG,
        1,
        0,
        rkey,
        body.len() as u32,
        (b.addr >> 32) as u32,
        b.addr as u32,
        0,
        0,
        0,
    ]);
    cases.push(("RDMA_NOMSG stream with another XID", m));
    for (name, msg) in cases {
        p.raw_send(Dir::Req, &msg, None);
        let got = p.raw_take_completions(Dir::Req);
        assert_eq!(got.len(), 1, "{name}: one answer");
        let (ans, wc) = &got[0];
        assert_eq!(be32(ans, 0), be32(&msg, 0), "{name}: rdma_xid copied");
        assert_eq!(be32(ans, 3), RDMA_ERROR, "{name}: an RDMA_ERROR");
        assert!(
            !wc.flags.contains(rpcrdma_engine::verbs::WcFlags::WITH_INV),
            "{name}: sent with invalidate of {:#x}",
            wc.invalidated_rkey
        );
    }
    assert_eq!(p.stats.sends_with_inv, 0);
    still_works(&mut p, 0x704);
}

#[test]
fn accepts_rdma_msgp_as_rdma_msg() {
    let mut p = raw_requester();
    let xid = 0x300;
    let mut m = words(&[
        xid,       // rdma_xid
        1,         // rdma_vers
        8,         // rdma_credit
        RDMA_MSGP, // rdma_proc (deprecated)
        64,        // rdma_align (ignored)
        4096,      // rdma_thresh (ignored)
        0,         // Read list: empty
        0,         // Write list: empty
        0,         // Reply chunk: absent
    ]);
    let call = rpc_call(xid, 3, &[1, 2, 3, 4]);
    m.extend_from_slice(&call);
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().expect("RDMA_MSGP delivered as RDMA_MSG");
    assert_eq!(p.resp.host.read(inc.stream), &call[..]);
}

#[test]
fn rejects_nomsg_stream_whose_xid_differs() {
    // RDMA_NOMSG whose Position Zero chunk holds an RPC message with another XID.
    let mut p = raw_requester();
    let body = rpc_call(0xbad, 0, &[]);
    let b = p
        .req
        .host
        .buf_with(&body, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let rkey = p
        .req
        .host
        .regions
        .iter()
        .find(|r| r.lkey == b.lkey)
        .unwrap()
        .rkey;
    let m = words(&[
        0x400,      // rdma_xid
        1,          // rdma_vers
        8,          // rdma_credit
        RDMA_NOMSG, // rdma_proc
        1,          // Read list: entry
        0,          //   position 0
        rkey,       //   handle
        body.len() as u32,
        (b.addr >> 32) as u32,
        b.addr as u32,
        0, // Read list: end
        0, // Write list: empty
        0, // Reply chunk: absent
    ]);
    assert_eq!(probe(&mut p, &m), Some(err_chunk(0x400)));
    assert!(p.next_call().is_none());
    still_works(&mut p, 0x401);
}

#[test]
fn rejects_stream_larger_than_any_data_buffer() {
    let mut p = raw_requester();
    let mut m = words(&[
        0x500,
        1,
        8,
        RDMA_MSG,
        1,       // Read list: entry
        40,      //   position: after the RPC header
        0x1234,  //   handle
        1 << 20, //   length: 1 MiB, data buffers hold 256 KiB
        0,
        0x1000, // offset
        0,
        0,
        0,
    ]);
    m.extend_from_slice(&rpc_call(0x500, 0, &[]));
    assert_eq!(probe(&mut p, &m), Some(err_chunk(0x500)));
    still_works(&mut p, 0x501);
}

#[test]
fn rejects_read_chunk_with_invalid_key_by_losing_the_connection() {
    // The responder's RDMA Read fails (the QP goes to the error state, as with any RDMA
    // failure): the connection is reported lost, nothing is delivered.
    let mut p = raw_requester();
    let mut m = words(&[
        0x600,
        1,
        8,
        RDMA_MSG,
        1,
        40,
        0xdead_beef,
        64,
        0,
        0x1000,
        0,
        0,
        0,
    ]);
    m.extend_from_slice(&rpc_call(0x600, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    assert!(p.next_call().is_none());
    let c = p.resp.conn.as_ref().unwrap();
    assert_eq!(c.state(), ConnState::Closed);
    assert!(p
        .resp
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectionLost)));
}

// ---------------------------------------------------------------------------------------------
// Requester side.

/// A real requester facing a raw responder.
fn raw_responder(cfg: Config) -> Pair {
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::for_config(Role::Requester, &cfg),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    p.raw_post_recvs(Dir::Resp, 64, 4096);
    p
}

/// Starts a call (with `recs` receptacles of 64 octets and a `reply_cap` reply buffer); returns
/// the call as the raw responder received it, and the reply buffer.
fn start(p: &mut Pair, xid: u32, recs: usize, reply_cap: u32) -> (Vec<u8>, LocalBuf) {
    let msg = p.req.host.buf_with(&rpc_call(xid, 1, &[]), LW);
    let receptacles: Vec<LocalBuf> = (0..recs).map(|_| p.req.host.alloc(64, EXPOSE)).collect();
    let reply = p.req.host.alloc(reply_cap, EXPOSE);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &receptacles,
        reply,
    });
    let mut got = p.raw_take(Dir::Resp);
    assert_eq!(got.len(), 1);
    (got.pop().unwrap(), reply)
}

fn outcome(p: &mut Pair) -> Option<Event> {
    p.pump();
    p.next_done()
}

#[test]
fn accepts_err_vers_and_err_chunk_replies_as_call_errors() {
    let mut p = raw_responder(Config::DEFAULT);
    let (_, _) = start(&mut p, 0x10, 1, 64);
    // ERR_VERS from a responder that speaks only Version Two.
    p.raw_send(
        Dir::Resp,
        &words(&[
            0x10,       // rdma_xid
            1,          // rdma_vers (copied from our call)
            8,          // rdma_credit
            RDMA_ERROR, // rdma_proc
            1,          // ERR_VERS
            2,          // low
            2,          // high
        ]),
        None,
    );
    assert!(matches!(
        outcome(&mut p),
        Some(Event::CallFailed {
            xid: 0x10,
            error: CallError::ErrVers { low: 2, high: 2 },
            ..
        })
    ));
    // ERR_VERS whose rdma_vers is the responder's own (2): still recognised.
    let (_, _) = start(&mut p, 0x11, 0, 64);
    p.raw_send(Dir::Resp, &words(&[0x11, 2, 8, RDMA_ERROR, 1, 2, 3]), None);
    assert!(matches!(
        outcome(&mut p),
        Some(Event::CallFailed {
            error: CallError::ErrVers { low: 2, high: 3 },
            ..
        })
    ));
    // ERR_CHUNK.
    let (_, _) = start(&mut p, 0x12, 1, 64);
    p.raw_send(Dir::Resp, &words(&[0x12, 1, 8, RDMA_ERROR, 2]), None);
    assert!(matches!(
        outcome(&mut p),
        Some(Event::CallFailed {
            error: CallError::ErrChunk,
            ..
        })
    ));
    // An unknown error code.
    let (_, _) = start(&mut p, 0x13, 0, 64);
    p.raw_send(Dir::Resp, &words(&[0x13, 1, 8, RDMA_ERROR, 9]), None);
    assert!(matches!(
        outcome(&mut p),
        Some(Event::CallFailed {
            error: CallError::RdmaError(9),
            ..
        })
    ));
    // Each failed call's windows were invalidated (the harness checked), none remain bound.
    assert_eq!(p.req.host.bound_windows(), 0);
}

#[test]
fn rejects_unusable_replies_by_failing_the_call() {
    let mut p = raw_responder(Config::DEFAULT);
    let bad = |e| Some(CallError::BadReply(e));
    let err_of = |ev: Option<Event>| match ev {
        Some(Event::CallFailed { error, .. }) => Some(error),
        other => panic!("{other:?}"),
    };

    // A reply carrying a Read list.
    let (_, _) = start(&mut p, 0x20, 0, 64);
    let mut m = words(&[0x20, 1, 8, RDMA_MSG, 1, 40, 0x1, 4, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x20, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(
        err_of(outcome(&mut p)),
        bad(BadReply::Header(HeaderErrorKind::ReadListInReply))
    );

    // RDMA_NOMSG when no Reply chunk was offered (it carries one the responder made up).
    let (_, _) = start(&mut p, 0x21, 0, 64);
    let m = words(&[0x21, 1, 8, RDMA_NOMSG, 0, 0, 1, 1, 0x5, 16, 0, 0]);
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(err_of(outcome(&mut p)), bad(BadReply::ReplyChunk));

    // More Write chunks returned than offered.
    let (_, _) = start(&mut p, 0x22, 1, 64);
    let mut m = words(&[
        0x22, 1, 8, RDMA_MSG, 0, 1, 1, 0x5, 4, 0, 0, 1, 1, 0x6, 4, 0, 0, 0, 0,
    ]);
    m.extend_from_slice(&rpc_reply(0x22, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(err_of(outcome(&mut p)), bad(BadReply::WriteList));

    // A written length above the offered one (64).
    let (call, _) = start(&mut p, 0x23, 1, 64);
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    let seg = h.chunks().unwrap().writes.get(0).unwrap().get(0).unwrap();
    let mut m = words(&[
        0x23,
        1,
        8,
        RDMA_MSG,
        0,
        1,
        1,
        seg.handle,
        65,
        (seg.offset >> 32) as u32,
        seg.offset as u32,
        0,
        0,
    ]);
    m.extend_from_slice(&rpc_reply(0x23, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(err_of(outcome(&mut p)), bad(BadReply::WriteList));

    // An inline reply longer than the reply buffer (64).
    let (_, _) = start(&mut p, 0x24, 0, 64);
    let mut m = words(&[0x24, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x24, &[0; 64]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(err_of(outcome(&mut p)), bad(BadReply::TooLong));

    // A reply whose XID matches but whose chunk lists are malformed.
    let (_, _) = start(&mut p, 0x25, 0, 64);
    p.raw_send(Dir::Resp, &words(&[0x25, 1, 8, RDMA_MSG, 7]), None);
    assert!(matches!(
        err_of(outcome(&mut p)),
        Some(CallError::BadReply(BadReply::Header(
            HeaderErrorKind::Chunk(_)
        )))
    ));
    assert_eq!(p.req.host.bound_windows(), 0);
    assert_eq!(p.req.conn.as_ref().unwrap().state(), ConnState::Connected);
}

#[test]
fn rejects_unknown_xid_and_garbage_replies_by_dropping_them() {
    let mut p = raw_responder(Config::DEFAULT);
    let (_, rbuf) = start(&mut p, 0x30, 0, 64);
    // Garbage, an unknown XID, RDMA_DONE: all dropped, the call stays pending.
    p.raw_send(Dir::Resp, &[1, 2, 3, 4, 5, 6, 7, 8], None);
    let mut m = words(&[0x31, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x31, &[]));
    p.raw_send(Dir::Resp, &m, None);
    p.raw_send(Dir::Resp, &words(&[0x30, 1, 8, RDMA_DONE]), None);
    assert!(outcome(&mut p).is_none());
    // The real reply completes it.
    let reply = rpc_reply(0x30, &[9, 9, 9, 9]);
    let mut m = words(&[0x30, 1, 8, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&reply);
    p.raw_send(Dir::Resp, &m, None);
    let Some(Event::ReplyReady(r)) = outcome(&mut p) else {
        panic!("no reply")
    };
    assert_eq!(p.req.host.read(rbuf.sub(0, r.len).unwrap()), &reply[..]);
    // Every receive consumed by the dropped messages was reposted.
    assert_eq!(
        p.req.conn.as_ref().unwrap().receives_posted(),
        Config::DEFAULT.credits
    );
}

#[test]
fn rejects_call_spec_errors_without_posting() {
    let mut p = Pair::default_pair();
    let msg = p.req.host.buf_with(&rpc_call(1, 0, &[0; 16]), LW);
    let item = p.req.host.buf_with(&[1, 2, 3], EXPOSE);
    let reply = p.req.host.alloc(64, LW);
    let before = p.stats;
    for ddp in [
        // Misaligned, position 0, past the end.
        [DdpItem { at: 6, buf: item }],
        [DdpItem { at: 0, buf: item }],
        [DdpItem {
            at: 4096,
            buf: item,
        }],
    ] {
        let r = p.try_call(&CallSpec {
            message: &[msg],
            ddp: &ddp,
            receptacles: &[],
            reply,
        });
        assert_eq!(r, Err(rpcrdma_engine::conn::StartError::BadSpec));
    }
    // A message shorter than an XID.
    let tiny = p.req.host.buf_with(&[1, 2], LW);
    assert_eq!(
        p.try_call(&CallSpec {
            message: &[tiny],
            ddp: &[],
            receptacles: &[],
            reply,
        }),
        Err(rpcrdma_engine::conn::StartError::BadSpec)
    );
    assert_eq!(p.stats.sends, before.sends);
    assert_eq!(p.stats.binds, before.binds);
    // The same XID twice while the first is outstanding (after a grant of 4 credits).
    let mut cfg = Config::DEFAULT;
    cfg.credits = 4;
    let mut p = raw_responder(cfg);
    start(&mut p, 0x76, 0, 64);
    let mut m = words(&[0x76, 1, 4, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x76, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(outcome(&mut p), Some(Event::ReplyReady(_))));
    start(&mut p, 0x77, 0, 64);
    let msg = p.req.host.buf_with(&rpc_call(0x77, 0, &[]), LW);
    let reply = p.req.host.alloc(64, LW);
    let r = p.try_call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply,
    });
    assert_eq!(r, Err(rpcrdma_engine::conn::StartError::DuplicateXid));
}

#[test]
fn rejects_impossible_completion_by_closing_and_failing_calls() {
    // A success completion the requester never asked for (an RDMA Read id): internal state can
    // no longer be trusted, so the connection closes and pending calls fail, once.
    let mut p = raw_responder(Config::DEFAULT);
    let (_, _) = start(&mut p, 0x90, 1, 64);
    let wc = rpcrdma_engine::verbs::Completion {
        wr_id: rpcrdma_engine::verbs::WrId::new(rpcrdma_engine::conn::wr_kind::READ, 0).raw(),
        ..Default::default()
    };
    let now = p.now;
    let Side { host, conn, .. } = &mut p.req;
    conn.as_mut().unwrap().handle_completion(now, &wc, host);
    p.pump();
    assert_eq!(p.req.conn.as_ref().unwrap().state(), ConnState::Closed);
    let lost = p
        .req
        .events
        .iter()
        .filter(|e| matches!(e, Event::ConnectionLost))
        .count();
    assert_eq!(lost, 1);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            xid: 0x90,
            error: CallError::ConnectionLost,
            ..
        })
    ));
}

#[test]
fn rejects_long_reply_whose_reply_chunk_holds_no_reply_to_the_call() {
    // RDMA_NOMSG: the RPC message is in the Reply chunk, written by the responder. It must be
    // the REPLY to this call (same XID, msg_type REPLY); anything else fails the call.
    let mut p = raw_responder(Config::DEFAULT);
    let bad = Some(CallError::BadReply(BadReply::NotAReply));
    let err_of = |ev: Option<Event>| match ev {
        Some(Event::CallFailed { error, .. }) => Some(error),
        other => panic!("{other:?}"),
    };
    type Content = fn(u32) -> Vec<u8>;
    let cases: [(&str, Content); 3] = [
        ("a CALL", |xid| rpc_call(xid, 1, &[0; 8])),
        ("another XID", |_| rpc_reply(0x99, &[0; 8])),
        ("only an XID", |xid| xid.to_be_bytes().to_vec()),
    ];
    for (i, (what, make)) in cases.into_iter().enumerate() {
        let xid = 0x40 + i as u32;
        let content = make(xid);
        let (call, reply) = start(&mut p, xid, 0, 2048);
        let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
        let seg = h
            .chunks()
            .unwrap()
            .reply
            .expect("Reply chunk offered")
            .get(0)
            .unwrap();
        // The "RDMA Write" into the Reply chunk, then the RDMA_NOMSG returning its length.
        p.req.host.write(reply.addr, &content);
        let m = words(&[
            xid,
            1,
            8,
            RDMA_NOMSG,
            0,
            0,
            1,
            1,
            seg.handle,
            content.len() as u32,
            (seg.offset >> 32) as u32,
            seg.offset as u32,
        ]);
        p.raw_send(Dir::Resp, &m, None);
        assert_eq!(err_of(outcome(&mut p)), bad, "{what}");
    }
    // The REPLY itself is accepted.
    let (call, reply) = start(&mut p, 0x50, 0, 2048);
    let h = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap();
    let seg = h.chunks().unwrap().reply.unwrap().get(0).unwrap();
    let content = rpc_reply(0x50, &[7; 8]);
    p.req.host.write(reply.addr, &content);
    let m = words(&[
        0x50,
        1,
        8,
        RDMA_NOMSG,
        0,
        0,
        1,
        1,
        seg.handle,
        content.len() as u32,
        (seg.offset >> 32) as u32,
        seg.offset as u32,
    ]);
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(outcome(&mut p), Some(Event::ReplyReady(r)) if r.xid == 0x50));
}
