//! Connection engine, Version Two errors: every RDMA2_ERROR code produced by a crafted input
//! (hand-written headers from the draft's XDR, one comment per word) and handled by the peer,
//! and RDMA2_OPTIONAL messages routed to registered handlers or answered with
//! RDMA2_ERR_INVAL_OPTION.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use rpcrdma_engine::conn::{
    BadReply, CallError, CallSpec, Config, ConnState, Event, LocalBuf, OptionalError, ReplyKind,
    ReplySpec, Role,
};
use rpcrdma_engine::proto::v2::{self, Direction, HeaderErrorKind, RdmaError};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const MSG: u32 = 0;
const NOMSG: u32 = 1;
const ERROR: u32 = 4;
const OPTIONAL: u32 = 5;
const CALL: u32 = 0;
const REPLY: u32 = 1;

fn v2cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.max_version = 2;
    c
}

/// A raw requester facing a Version Two responder.
fn raw_client() -> Pair {
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        v2cfg(),
        Sizing::for_config(Role::Responder, &v2cfg()),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Req, 64, 8192);
    p
}

fn probe(p: &mut Pair, msg: &[u8]) -> Option<Vec<u8>> {
    p.raw_send(Dir::Req, msg, None);
    let mut got = p.raw_take(Dir::Req);
    assert!(got.len() <= 1, "more than one answer");
    got.pop()
}

/// The responder still serves a good Version Two call and keeps its receives.
fn still_works(p: &mut Pair, xid: u32) {
    let c = p.resp.conn.as_ref().unwrap();
    assert_eq!(c.state(), ConnState::Connected);
    assert_eq!(c.receives_posted(), 64);
    let mut m = words(&[xid, 2, 8, MSG, CALL, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(xid, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().expect("good call delivered");
    let r = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    let got = p.raw_take(Dir::Req);
    assert_eq!(&got[0][..24], &words(&[xid, 2, 64, MSG, REPLY, 0])[..]);
}

fn v2_error(xid: u32, vers: u32, body: &[u32]) -> Vec<u8> {
    let mut v = words(&[xid, vers, 64, ERROR]);
    v.extend_from_slice(&words(body));
    v
}

#[test]
fn rejects_unknown_version_with_err_vers_1_to_2() {
    let mut p = raw_client();
    let mut m = words(&[
        0xa1, // rdma_xid
        3,    // rdma_vers = 3
        8,    // rdma_credit
        MSG,  // rdma_proc
        CALL, 0, 0, 0, 0,
    ]);
    m.extend_from_slice(&rpc_call(0xa1, 0, &[]));
    assert_eq!(
        probe(&mut p, &m),
        Some(v2_error(
            0xa1,
            3, // rdma_xid and rdma_vers copied
            &[
                1, // RDMA2_ERR_VERS
                1, // rdma_vers_low
                2, // rdma_vers_high
            ]
        ))
    );
    still_works(&mut p, 0xa2);
}

#[test]
fn rejects_unknown_procedure_with_inval_proc() {
    let mut p = raw_client();
    let m = words(&[
        0xb1, // rdma_xid
        2,    // rdma_vers
        8,    // rdma_credit
        7,    // rdma_proc: not defined in Version Two
        0, 0, 0,
    ]);
    assert_eq!(
        probe(&mut p, &m),
        Some(v2_error(0xb1, 2, &[4 /* RDMA2_ERR_INVAL_PROC */]))
    );
    still_works(&mut p, 0xb2);
}

#[test]
fn rejects_unparsable_headers_with_bad_xdr() {
    let mut p = raw_client();
    let bad_xdr = |xid| Some(v2_error(xid, 2, &[2 /* RDMA2_ERR_BAD_XDR */]));
    // Read list cut short.
    let m = words(&[0xc1, 2, 8, MSG, CALL, 0, 1, 32, 0x99]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xc1));
    // rdma_direction neither CALL nor REPLY.
    let mut m = words(&[0xc2, 2, 8, MSG, 7, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(0xc2, 0, &[]));
    assert_eq!(probe(&mut p, &m), bad_xdr(0xc2));
    // rdma_inv_handle that is none of the call's handles.
    let mut m = words(&[
        0xc3, 2, 8, MSG, CALL,   //
        0x7777, // rdma_inv_handle
        0,      // Read list: empty
        1, 1, 0x1234, 64, 0, 0x1000, // Write chunk: handle 0x1234
        0,      // end of Write list
        0,      // no Reply chunk
    ]);
    m.extend_from_slice(&rpc_call(0xc3, 0, &[]));
    assert_eq!(probe(&mut p, &m), bad_xdr(0xc3));
    // rdma_direction CALL but the RPC message is a REPLY.
    let mut m = words(&[0xc4, 2, 8, MSG, CALL, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0xc4, &[]));
    assert_eq!(probe(&mut p, &m), bad_xdr(0xc4));
    // RDMA2_NOMSG call without a Position Zero Read chunk.
    let m = words(&[0xc5, 2, 8, NOMSG, CALL, 0, 0, 0, 1, 1, 0x55, 512, 0, 0x2000]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xc5));
    // A message saying it is a REPLY is never answered (and is no call).
    let m = words(&[0xc6, 2, 8, MSG, REPLY, 0, 1, 32, 0x99]);
    assert_eq!(probe(&mut p, &m), None);
    assert!(p.next_call().is_none());
    still_works(&mut p, 0xc7);
}

#[test]
fn rejects_nomsg_call_whose_stream_is_not_a_call_with_bad_xdr() {
    // RDMA2_NOMSG with rdma_direction CALL whose Position Zero chunk holds an RPC REPLY: the
    // direction must match the msg_type of the message in the chunk.
    let mut p = raw_client();
    let reply = rpc_reply(0xd1, &[]);
    let src = p
        .req
        .host
        .buf_with(&reply, LW | rpcrdma_engine::verbs::Access::REMOTE_READ);
    let rkey = p.req.host.regions.last().unwrap().rkey;
    let mut m = words(&[
        0xd1,
        2,
        8,
        NOMSG,
        CALL,
        0, // header
        1,
        0,
        rkey,
        reply.len() as u32, // Read segment at position 0: handle, length
    ]);
    m.extend_from_slice(&src.addr.to_be_bytes()); // offset
    m.extend_from_slice(&words(&[0, 0, 0])); // end of Read list, no writes, no Reply chunk
    assert_eq!(
        probe(&mut p, &m),
        Some(v2_error(0xd1, 2, &[2 /* RDMA2_ERR_BAD_XDR */]))
    );
    assert!(p.next_call().is_none());
    still_works(&mut p, 0xd2);
}

#[test]
fn rejects_reply_too_big_for_offered_resources_with_cant_reply() {
    let mut p = raw_client();
    // Two Write chunk segments (8 octets each), a Reply chunk of 100 octets; the reply is 5000.
    let mut m = words(&[
        0xe1, 2, 8, MSG, CALL, 0, // header, no invalidation
        0, // Read list: empty
        1, 2, 0x51, 8, 0, 0x1000, 0x52, 8, 0, 0x2000, // one Write chunk of two segments
        0,      // end of Write list
        1, 1, 0x53, 100, 0, 0x3000, // Reply chunk: one segment of 100
    ]);
    m.extend_from_slice(&rpc_call(0xe1, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().unwrap();
    assert_eq!(inc.reply_capacity, Some(100));
    let mut reply = rpc_reply(0xe1, &[]);
    reply.resize(5000, 1);
    let r = p.resp.host.buf_with(&reply, LW);
    assert_eq!(
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            }
        ),
        ReplyKind::CantReply
    );
    let got = p.raw_take(Dir::Req);
    assert_eq!(
        got,
        vec![v2_error(
            0xe1,
            2,
            &[
                3,    // RDMA2_ERR_CANT_REPLY
                1,    // rdma_processed: TRUE (found after the upper layer ran)
                3,    // rdma_segment_index: 2 Write segments, then the Reply chunk's first
                5000, // rdma_length_needed: 100 + 4900 missing
            ]
        )]
    );
    // A result larger than its Write chunk (16 octets over two segments): the chunk's last
    // segment is the one too short.
    let mut m = words(&[
        0xe2, 2, 8, MSG, CALL, 0, 0, //
        1, 2, 0x51, 8, 0, 0x1000, 0x52, 8, 0, 0x2000, 0, 0,
    ]);
    m.extend_from_slice(&rpc_call(0xe2, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(0xe2, &[]), LW);
    let d = p.resp.host.buf_with(&[1; 20], LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[rpcrdma_engine::conn::DdpItem { at: 24, buf: d }],
        },
    );
    assert_eq!(
        p.raw_take(Dir::Req),
        vec![v2_error(
            0xe2,
            2,
            &[3, 1, 2 /* second segment */, 12 /* 8 + 4 */]
        )]
    );
    still_works(&mut p, 0xe3);
}

/// Draft, "Transport Errors", RDMA2_ERR_CANT_REPLY: "The responder MUST set the
/// rdma_segment_index field to point to the first segment in the transport header that is too
/// short, or to zero to indicate that it was not possible to determine which segment was too
/// small." A Write chunk or Reply chunk with no segments has no segment that is too short: the
/// index is zero (never the previous chunk's last segment, which was large enough), and the
/// length needed is what did not fit.
#[test]
fn rejects_overflow_of_a_chunk_without_segments_with_cant_reply_index_zero() {
    let mut p = raw_client();
    // Write list: a chunk of two 8-octet segments, then a chunk with no segments.
    let mut m = words(&[
        0xe5, 2, 8, MSG, CALL, 0, // header, no invalidation
        0, // Read list: empty
        1, 2, 0x51, 8, 0, 0x1000, 0x52, 8, 0, 0x2000, // Write chunk 1: two segments
        1, 0, // Write chunk 2: zero segments
        0, // end of Write list
        0, // no Reply chunk
    ]);
    m.extend_from_slice(&rpc_call(0xe5, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p
        .next_call()
        .expect("call with an empty Write chunk delivered");
    assert_eq!(inc.write_chunks, 2);
    let r = p.resp.host.buf_with(&rpc_reply(0xe5, &[]), LW);
    let d1 = p.resp.host.buf_with(&[1; 4], LW); // fits chunk 1
    let d2 = p.resp.host.buf_with(&[2; 20], LW); // chunk 2 has no room at all
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[
                rpcrdma_engine::conn::DdpItem { at: 24, buf: d1 },
                rpcrdma_engine::conn::DdpItem { at: 24, buf: d2 },
            ],
        },
    );
    assert_eq!(kind, ReplyKind::CantReply);
    assert_eq!(
        p.raw_take(Dir::Req),
        vec![v2_error(
            0xe5,
            2,
            &[
                3,  // RDMA2_ERR_CANT_REPLY
                1,  // rdma_processed: TRUE
                0,  // rdma_segment_index: undeterminable (not 2, chunk 1's last segment)
                20, // rdma_length_needed: the result that did not fit
            ]
        )]
    );
    // A Reply chunk with no segments after a Write chunk of two: a 5000-octet reply.
    let mut m = words(&[
        0xe6, 2, 8, MSG, CALL, 0, 0, //
        1, 2, 0x51, 8, 0, 0x1000, 0x52, 8, 0, 0x2000, 0, // Write list: one chunk of two
        1, 0, // Reply chunk: present, zero segments
    ]);
    m.extend_from_slice(&rpc_call(0xe6, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p
        .next_call()
        .expect("call with an empty Reply chunk delivered");
    assert_eq!(inc.reply_capacity, Some(0));
    let mut reply = rpc_reply(0xe6, &[]);
    reply.resize(5000, 1);
    let r = p.resp.host.buf_with(&reply, LW);
    assert_eq!(
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            }
        ),
        ReplyKind::CantReply
    );
    assert_eq!(
        p.raw_take(Dir::Req),
        vec![v2_error(
            0xe6,
            2,
            &[
                3,    // RDMA2_ERR_CANT_REPLY
                1,    // rdma_processed: TRUE
                0,    // rdma_segment_index: undeterminable (not 2, the Write chunk's last)
                5000, // rdma_length_needed: the whole reply
            ]
        )]
    );
    still_works(&mut p, 0xe7);
}

/// What a handler saw: (xid, optinfo).
type XidInfo = (u32, Vec<u8>);

/// What a handler saw: (xid, opttype, optinfo, optdir).
type Seen = (u32, u32, Vec<u8>, Direction);

#[test]
fn accepts_registered_optional_types_and_rejects_others_with_inval_option() {
    let mut p = raw_client();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s2 = seen.clone();
    let conn = p.resp.conn();
    conn.register_optional(
        0x77,
        Box::new(move |m| {
            s2.lock()
                .unwrap()
                .push((m.xid, m.opttype, m.info.to_vec(), m.direction))
        }),
    )
    .unwrap();
    assert_eq!(
        conn.register_optional(0x77, Box::new(|_| {})),
        Err(OptionalError::AlreadyRegistered)
    );
    for t in 1..4 {
        conn.register_optional(t, Box::new(|_| {})).unwrap();
    }
    assert_eq!(
        conn.register_optional(9, Box::new(|_| {})),
        Err(OptionalError::TableFull)
    );
    assert!(conn.unregister_optional(3));
    assert!(!conn.unregister_optional(3));
    // A registered type: to the handler, no answer.
    let m = words(&[
        0xf1,     // rdma_xid
        2,        // rdma_vers
        8,        // rdma_credit
        OPTIONAL, // rdma_proc
        CALL,     // rdma_optdir
        0x77,     // rdma_opttype
        5,        // rdma_optinfo length
        0x0102_0304,
        0x0500_0000, // 5 octets + 3 of pad
    ]);
    assert_eq!(probe(&mut p, &m), None);
    assert_eq!(
        *seen.lock().unwrap(),
        [(0xf1, 0x77, vec![1, 2, 3, 4, 5], Direction::Call)]
    );
    // An unknown type, call direction: RDMA2_ERR_INVAL_OPTION with the XID copied.
    let m = words(&[0xf2, 2, 8, OPTIONAL, CALL, 0x99, 0]);
    assert_eq!(
        probe(&mut p, &m),
        Some(v2_error(0xf2, 2, &[5 /* RDMA2_ERR_INVAL_OPTION */]))
    );
    // An unknown type, reply direction: never answered.
    let m = words(&[0xf3, 2, 8, OPTIONAL, REPLY, 0x99, 0]);
    assert_eq!(probe(&mut p, &m), None);
    assert_eq!(seen.lock().unwrap().len(), 1);
    still_works(&mut p, 0xf4);
}

/// Draft, "Transport Errors": "If a receiver recognizes the value in the rdma_proc field but
/// the incoming RPC-over-RDMA transport header cannot be parsed, it MUST send
/// RDMA2_ERR_BAD_XDR". An RDMA2_OPTIONAL marked CALL whose body does not parse (optinfo cut
/// short, non-zero pad, direction neither CALL nor REPLY) is answered RDMA2_ERR_BAD_XDR with
/// the XID and version copied — even for a registered type, whose handler never sees it.
#[test]
fn rejects_malformed_optional_calls_with_bad_xdr() {
    let mut p = raw_client();
    let seen = Arc::new(Mutex::new(0u32));
    let s2 = seen.clone();
    p.resp
        .conn()
        .register_optional(0x77, Box::new(move |_| *s2.lock().unwrap() += 1))
        .unwrap();
    let bad_xdr = |xid| Some(v2_error(xid, 2, &[2 /* RDMA2_ERR_BAD_XDR */]));
    // rdma_optinfo claims 8 octets, 4 arrive.
    let m = words(&[0xe1, 2, 8, OPTIONAL, CALL, 0x77, 8, 0x0102_0304]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xe1));
    // 5 octets of rdma_optinfo, a pad octet that is not zero.
    let m = words(&[
        0xe2,
        2,
        8,
        OPTIONAL,
        CALL,
        0x77,
        5,
        0x0102_0304,
        0x0500_0001,
    ]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xe2));
    // rdma_opttype missing.
    let m = words(&[0xe3, 2, 8, OPTIONAL, CALL]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xe3));
    // rdma_optdir = 2.
    let m = words(&[0xe4, 2, 8, OPTIONAL, 2, 0x77, 0]);
    assert_eq!(probe(&mut p, &m), bad_xdr(0xe4));
    assert_eq!(*seen.lock().unwrap(), 0);
    // Marked REPLY: never answered.
    let m = words(&[0xe5, 2, 8, OPTIONAL, REPLY, 0x77, 8, 0x0102_0304]);
    assert_eq!(probe(&mut p, &m), None);
    assert_eq!(*seen.lock().unwrap(), 0);
    still_works(&mut p, 0xe6);
}

/// Draft, XDR of `rpcrdma2_optional`: `opaque rdma_optinfo<>` has no bound of its own; the
/// only limit is the message, which the receive buffer bounds. A responder whose receive buffers
/// (and RFC 8797 advertised receive size) are 16384 octets takes a well-formed RDMA2_OPTIONAL
/// with 6000 octets of `rdma_optinfo` to its handler — no RDMA2_ERR_BAD_XDR — and still
/// rejects one that claims more than its receive buffer could hold.
#[test]
fn accepts_optinfo_as_large_as_the_receive_buffer_allows() {
    let mut cfg = v2cfg();
    cfg.inline_recv = 16384;
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        Sizing::for_config(Role::Responder, &cfg),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Req, 64, 8192);
    let seen: Arc<Mutex<Vec<XidInfo>>> = Arc::default();
    let s2 = seen.clone();
    p.resp
        .conn()
        .register_optional(
            0x77,
            Box::new(move |m| s2.lock().unwrap().push((m.xid, m.info.to_vec()))),
        )
        .unwrap();
    let info = pattern(6000, 9);
    let mut m = words(&[
        0xf8,     // rdma_xid
        2,        // rdma_vers
        8,        // rdma_credit
        OPTIONAL, // rdma_proc
        CALL,     // rdma_optdir
        0x77,     // rdma_opttype
        6000,     // rdma_optinfo length (a multiple of four: no pad)
    ]);
    m.extend_from_slice(&info);
    assert_eq!(probe(&mut p, &m), None, "no RDMA2_ERR_BAD_XDR");
    assert_eq!(*seen.lock().unwrap(), [(0xf8, info)]);
    // A length beyond anything the 16384-octet receive buffer could hold: BAD_XDR.
    let mut m = words(&[0xf9, 2, 8, OPTIONAL, CALL, 0x77, 20_000]);
    m.extend_from_slice(&[0; 64]);
    assert_eq!(
        probe(&mut p, &m),
        Some(v2_error(0xf9, 2, &[2 /* RDMA2_ERR_BAD_XDR */]))
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    let c = p.resp.conn.as_ref().unwrap();
    assert_eq!(c.state(), ConnState::Connected);
}

// ---------------------------------------------------------------------------------------------
// Errors handled by the requester.

/// A Version Two requester facing a raw responder; the first call (probe) is confirmed.
fn raw_server(bidir: bool) -> Pair {
    let cfg = v2cfg();
    let sizing = if bidir {
        Sizing::with_backchannel(Role::Requester, &cfg)
    } else {
        Sizing::for_config(Role::Requester, &cfg)
    };
    let req = make_side("requester", 0x1000_0000, 0x10, Role::Requester, cfg, sizing);
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    if bidir {
        p.req.conn().enable_backchannel().unwrap();
    }
    p.raw_post_recvs(Dir::Resp, 64, 8192);
    start(&mut p, 1, 0);
    let mut m = words(&[1, 2, 4, MSG, REPLY, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(1, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 4);
    p
}

/// Starts a call with `recs` receptacles; returns what the raw responder got.
fn start(p: &mut Pair, xid: u32, recs: usize) -> Vec<u8> {
    let m = p.req.host.buf_with(&rpc_call(xid, 1, &[]), EXPOSE);
    let receptacles: Vec<LocalBuf> = (0..recs).map(|_| p.req.host.alloc(64, EXPOSE)).collect();
    let reply = p.req.host.alloc(256, EXPOSE);
    p.call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &receptacles,
        reply,
    });
    let mut got = p.raw_take(Dir::Resp);
    assert_eq!(got.len(), 1);
    got.pop().unwrap()
}

fn failed(p: &mut Pair) -> CallError {
    p.pump();
    match p.next_done() {
        Some(Event::CallFailed { error, .. }) => error,
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepts_every_v2_error_reply_as_a_call_error() {
    let mut p = raw_server(false);
    let cases: [(&[u32], CallError); 6] = [
        (&[2], CallError::Rdma2(RdmaError::BadXdr)),
        (&[4], CallError::Rdma2(RdmaError::InvalProc)),
        (&[5], CallError::Rdma2(RdmaError::InvalOption)),
        (
            &[3, 0, 1, 4096],
            CallError::Rdma2(RdmaError::CantReply {
                processed: false,
                segment_index: 1,
                length_needed: 4096,
            }),
        ),
        // A range without Version One: no fallback, the call fails.
        (&[1, 3, 4], CallError::ErrVers { low: 3, high: 4 }),
        (&[9], CallError::Rdma2(RdmaError::Unknown(9))),
    ];
    for (i, (body, want)) in cases.into_iter().enumerate() {
        let xid = 0x100 + i as u32;
        start(&mut p, xid, 1);
        // An error for another XID first: dropped.
        p.raw_send(Dir::Resp, &v2_error(xid + 0x1000, 2, body), None);
        // Credits 60 in an error: not used.
        let mut e = words(&[xid, 2, 60, ERROR]);
        e.extend_from_slice(&words(body));
        p.raw_send(Dir::Resp, &e, None);
        assert_eq!(failed(&mut p), want, "body {body:?}");
        assert_eq!(
            p.req.conn.as_ref().unwrap().credits(),
            4,
            "credits unchanged"
        );
        assert_eq!(p.req.host.bound_windows(), 0);
    }
    assert_eq!(p.req.conn.as_ref().unwrap().version(), 2);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn rejects_unusable_v2_replies_by_failing_the_call() {
    let mut p = raw_server(false);
    // A reply whose chunk lists do not parse.
    start(&mut p, 0x200, 0);
    p.raw_send(
        Dir::Resp,
        &words(&[0x200, 2, 4, MSG, REPLY, 0, 1, 32]),
        None,
    );
    assert!(matches!(
        failed(&mut p),
        CallError::BadReply(BadReply::HeaderV2(HeaderErrorKind::Chunk(_)))
    ));
    // A Version One reply to a Version Two call.
    start(&mut p, 0x201, 0);
    let mut m = words(&[0x201, 1, 4, MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x201, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(
        failed(&mut p),
        CallError::BadReply(BadReply::Version { call: 2, reply: 1 })
    );
    // A message with a bad direction value: nobody can tell what it is; dropped.
    start(&mut p, 0x202, 0);
    p.raw_send(Dir::Resp, &words(&[0x202, 2, 4, MSG, 9, 0, 0, 0, 0]), None);
    p.pump();
    assert!(p.next_done().is_none());
    let mut m = words(&[0x202, 2, 4, MSG, REPLY, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x202, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
}

#[test]
fn accepts_optional_messages_on_the_client() {
    let mut p = raw_server(true);
    let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
    let s2 = seen.clone();
    p.req
        .conn()
        .register_optional(0x42, Box::new(move |m| s2.lock().unwrap().push(m.xid)))
        .unwrap();
    // Reply direction, registered: to the handler.
    p.raw_send(
        Dir::Resp,
        &words(&[0x301, 2, 4, OPTIONAL, REPLY, 0x42, 0]),
        None,
    );
    // Reply direction, unknown: dropped, no answer.
    p.raw_send(
        Dir::Resp,
        &words(&[0x302, 2, 4, OPTIONAL, REPLY, 0x43, 0]),
        None,
    );
    assert!(p.raw_take(Dir::Resp).is_empty());
    // Call direction, unknown: the client's backchannel answers RDMA2_ERR_INVAL_OPTION.
    p.raw_send(
        Dir::Resp,
        &words(&[0x303, 2, 4, OPTIONAL, CALL, 0x43, 0]),
        None,
    );
    assert_eq!(
        p.raw_take(Dir::Resp),
        vec![words(&[
            0x303, // rdma_xid copied
            2,     // rdma_vers copied
            16,    // rdma_credit: backward credits
            ERROR, // rdma_proc
            5,     // RDMA2_ERR_INVAL_OPTION
        ])]
    );
    assert_eq!(*seen.lock().unwrap(), [0x301]);
    // Backward call with chunks in Version Two: RDMA2_ERR_BAD_XDR.
    let mut m = words(&[
        0x304, 2, 2, MSG, CALL, 0, 0, //
        1, 1, 0xabc, 64, 0, 0x1000, 0, 0, // a Write chunk
    ]);
    m.extend_from_slice(&rpc_call(0x304, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert_eq!(
        p.raw_take(Dir::Resp),
        vec![words(&[0x304, 2, 16, ERROR, 2 /* RDMA2_ERR_BAD_XDR */])]
    );
    assert!(p.next_back_call().is_none());
    assert_eq!(p.req.conn.as_ref().unwrap().state(), ConnState::Connected);
    // A v2 backward call without chunks is served, and answered in v2.
    let mut m = words(&[0x305, 2, 2, MSG, CALL, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(0x305, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    let inc = p.next_back_call().unwrap();
    let r = p.req.host.buf_with(&rpc_reply(0x305, &[]), LW);
    p.back_reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    let got = p.raw_take(Dir::Resp);
    assert_eq!(&got[0][..24], &words(&[0x305, 2, 16, MSG, REPLY, 0])[..]);
    // Decoded by the codec too.
    assert!(v2::decode(&got[0], &v2::Limits::DEFAULT).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Errors answering the server's backward calls.

/// RFC 8167 §4.1 (backward credits work as forward ones) and the v2 draft, "Protocol Version
/// Negotiation": a requester assumes a single message at a time "until it receives a non-error
/// RPC-over-RDMA message from the responder that reports the responder's actual credit limit".
/// A Version Two server with its backchannel enabled, a raw client: an RDMA2_ERROR answering
/// the first backward call with `rdma_credit` 16 leaves the backward grant at one; after a
/// backward reply reported 3, RDMA2_ERRORs carrying 16 or 1 change nothing either.
#[test]
fn rejects_backward_credits_of_a_v2_error() {
    let cfg = v2cfg();
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        Sizing::with_backchannel(Role::Responder, &cfg),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.resp.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Req, 16, 8192);
    // A Version Two forward call first: backward calls use the forward calls' version.
    still_works_backchannel(&mut p, 0x10);
    let credits = |p: &Pair| p.resp.conn.as_ref().unwrap().backward_credits();
    let back_call = |p: &mut Pair, xid: u32| {
        let m = p.resp.host.buf_with(&rpc_call(xid, 1, &[]), LW);
        let rb = p.resp.host.alloc(256, LW);
        let r = p.try_back_call(&CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &[],
            reply: rb,
        });
        if r.is_ok() {
            let got = p.raw_take(Dir::Req);
            assert_eq!(&got[0][..20], &words(&[xid, 2, 16, MSG, CALL])[..]);
        }
        r.map(|_| ())
    };
    let error = |p: &mut Pair, xid: u32, wire: u32| {
        // rdma_xid, rdma_vers copied; rdma_credit; RDMA2_ERROR; RDMA2_ERR_BAD_XDR
        p.raw_send(Dir::Req, &words(&[xid, 2, wire, ERROR, 2]), None);
        match p.next_back_done() {
            Some(Event::CallFailed { error, .. }) => {
                assert_eq!(error, CallError::Rdma2(RdmaError::BadXdr))
            }
            other => panic!("{other:?}"),
        }
    };
    back_call(&mut p, 0x80).unwrap();
    error(&mut p, 0x80, 16);
    assert_eq!(credits(&p), 1, "backward grant of an RDMA2_ERROR taken");
    back_call(&mut p, 0x81).unwrap();
    assert_eq!(
        back_call(&mut p, 0x82),
        Err(rpcrdma_engine::conn::StartError::NoCredit)
    );
    let mut m = words(&[0x81, 2, 3, MSG, REPLY, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x81, &[]));
    p.raw_send(Dir::Req, &m, None);
    assert!(matches!(p.next_back_done(), Some(Event::ReplyReady(r)) if r.xid == 0x81));
    assert_eq!(credits(&p), 3);
    for (x, wire) in [(0x90, 16), (0x91, 1)] {
        back_call(&mut p, x).unwrap();
        error(&mut p, x, wire);
        assert_eq!(credits(&p), 3, "RDMA2_ERROR with rdma_credit {wire}");
    }
}

/// The raw client sends a good Version Two forward call `xid`; the server answers it.
fn still_works_backchannel(p: &mut Pair, xid: u32) {
    let mut m = words(&[xid, 2, 8, MSG, CALL, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(xid, 0, &[]));
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().expect("good call delivered");
    let r = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    let got = p.raw_take(Dir::Req);
    assert_eq!(&got[0][..24], &words(&[xid, 2, 64, MSG, REPLY, 0])[..]);
}

/// v2 draft, "Protocol Version Negotiation": a requester "MUST assume the ability to exchange
/// only a single RPC-over-RDMA message at a time until it receives a non-error RPC-over-RDMA
/// message from the responder that reports the responder's actual credit limit". The first
/// Version Two call (the probe) is answered RDMA2_ERR_BAD_XDR with `rdma_credit` 60: the call
/// fails and the grant stays one until the next call's RDMA2_MSG reply reports 4.
#[test]
fn rejects_credits_of_a_v2_error_before_the_first_reply() {
    let cfg = v2cfg();
    let sizing = Sizing::for_config(Role::Requester, &cfg);
    let req = make_side("requester", 0x1000_0000, 0x10, Role::Requester, cfg, sizing);
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Resp, 64, 8192);
    let credits = |p: &Pair| p.req.conn.as_ref().unwrap().credits();
    let got = start(&mut p, 1, 0);
    assert_eq!(be32(&got, 1), 2, "a Version Two call");
    p.raw_send(Dir::Resp, &words(&[1, 2, 60, ERROR, 2]), None);
    assert_eq!(failed(&mut p), CallError::Rdma2(RdmaError::BadXdr));
    assert_eq!(credits(&p), 1, "grant of an RDMA2_ERROR taken");
    start(&mut p, 2, 0);
    let m = p.req.host.buf_with(&rpc_call(3, 1, &[]), EXPOSE);
    let reply = p.req.host.alloc(256, EXPOSE);
    let r = p.try_call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &[],
        reply,
    });
    assert_eq!(r.err(), Some(rpcrdma_engine::conn::StartError::NoCredit));
    let mut m = words(&[2, 2, 4, MSG, REPLY, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(2, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    assert_eq!(credits(&p), 4);
}

/// Decision (docs/conformance.md, V2-31): a client receiving a Version Two header with an
/// unknown `rdma_proc` drops it and answers nothing, with or without a backchannel. The draft's
/// "MUST send RDMA2_ERR_INVAL_PROC" is met by responders; a requester cannot tell the message's
/// direction (the procedure defines the body that would say it), so an answer would be an
/// RDMA2_ERROR the server never budgeted a receive for, naming an XID that may belong to one of
/// the server's own backward calls (RFC 8167 §4.1: a receiver that cannot tell the direction
/// "MUST NOT use the header's credit value").
#[test]
fn rejects_unknown_procedure_on_the_client_silently() {
    for bidir in [false, true] {
        let mut p = raw_server(bidir);
        p.raw_send(
            Dir::Resp,
            &words(&[
                0xc1, // rdma_xid
                2,    // rdma_vers
                60,   // rdma_credit (never used)
                7,    // rdma_proc: not defined in Version Two
                0, 0, 0,
            ]),
            None,
        );
        assert!(
            p.raw_take(Dir::Resp).is_empty(),
            "no answer (bidir {bidir})"
        );
        let c = p.req.conn.as_ref().unwrap();
        assert_eq!(c.state(), ConnState::Connected);
        assert_eq!(c.credits(), 4, "its credit value is not used");
        assert!(p.next_done().is_none());
        // The connection still works: a call and its reply.
        start(&mut p, 0xc2, 0);
        let mut m = words(&[0xc2, 2, 4, MSG, REPLY, 0, 0, 0, 0]);
        m.extend_from_slice(&rpc_reply(0xc2, &[]));
        p.raw_send(Dir::Resp, &m, None);
        assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    }
}

/// Decision (docs/conformance.md, V2-34): an RDMA2_OPTIONAL marked REPLY whose `rdma_opttype`
/// is unknown is dropped without RDMA2_ERR_INVAL_OPTION, on a server as on a client
/// (`accepts_optional_messages_on_the_client`). The draft's MUST ("A receiver MUST send
/// RDMA2_ERR_INVAL_OPTION when an RDMA2_OPTIONAL message is received and the receiver does not
/// recognize the value in the rdma_opttype field") names no direction, but an RDMA2_ERROR is
/// itself a reply: answering a reply-direction message sends the peer a message no call of its
/// own budgeted a receive for (RFC 8166 credits), naming an XID the peer may be using for a call
/// of its own. Marked CALL, it is answered (`accepts_registered_optional_types_and_rejects_
/// others_with_inval_option`).
#[test]
fn rejects_unknown_optional_reply_on_the_server_silently() {
    let mut p = raw_client();
    assert_eq!(
        probe(&mut p, &words(&[0xd1, 2, 8, OPTIONAL, REPLY, 0x43, 0])),
        None
    );
    still_works(&mut p, 0xd2);
}
