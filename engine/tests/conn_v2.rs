//! Connection engine: RPC-over-RDMA Version Two (the seed draft) between engines: the
//! requester and responder over the same engine, version negotiation (v2↔v2, v2 client ↔ v1-only
//! server with fallback and the result remembered across reconnects, v1 client ↔ v2 server),
//! inline thresholds changing without losing the connection, `rdma_inv_handle` chosen by the
//! requester and honoured by the responder, the CANT_REPLY retry with larger reply resources,
//! and the backward direction in Version Two. The harness checks STags, credits (both
//! directions) and receives on every post, as for Version One.

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallError, CallOptions, CallSpec, Config, DdpItem, Event, IncomingCall, LocalBuf, ReplyKind,
    ReplySpec, Role, StagMode,
};
use rpcrdma_engine::proto::v2;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const MSG: u32 = 0;
const NOMSG: u32 = 1;
const ERROR: u32 = 4;
const CALL: u32 = 0;
const REPLY: u32 = 1;

fn v2cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.max_version = 2;
    c
}

fn v1cfg() -> Config {
    Config::DEFAULT
}

/// Serves the next forward call with a reply of `reply_len` octets and the given results.
fn serve(p: &mut Pair, reply_len: usize, results: &[(u32, LocalBuf)]) -> (IncomingCall, ReplyKind) {
    let inc = p.next_call().expect("CallReady");
    let mut reply = rpc_reply(inc.xid, &[]);
    reply.resize(reply_len.max(24), 0x3c);
    let rb = p.resp.host.buf_with(&reply, LW);
    let items: Vec<DdpItem> = results
        .iter()
        .map(|&(at, buf)| DdpItem { at, buf })
        .collect();
    let k = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rb],
            results: &items,
        },
    );
    (inc, k)
}

fn simple_call(p: &mut Pair, xid: u32, call_len: usize, reply_cap: u32) -> LocalBuf {
    let mut call = rpc_call(xid, 1, &[]);
    call.resize(call_len.max(40), 0x5a);
    let m = p.req.host.buf_with(&call, EXPOSE);
    let r = p.req.host.alloc(reply_cap, EXPOSE);
    p.call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &[],
        reply: r,
    });
    r
}

#[test]
fn accepts_v2_between_v2_endpoints() {
    let mut p = Pair::new(v2cfg(), v2cfg());
    p.record = true;
    assert_eq!(p.req.conn.as_ref().unwrap().version(), 2);
    assert_eq!(p.req.conn.as_ref().unwrap().remembered_version(), None);
    // The first call: Version Two, RDMA2_MSG, direction CALL, nothing to invalidate.
    simple_call(&mut p, 0x10, 64, 256);
    let mut want = words(&[
        0x10, // rdma_xid
        2,    // rdma_vers
        64,   // rdma_credit
        MSG,  // rdma_proc: RDMA2_MSG
        CALL, // rdma_direction
        0,    // rdma_inv_handle: none
        0,    // Read list: empty
        0,    // Write list: empty
        0,    // Reply chunk: absent
    ]);
    let mut call = rpc_call(0x10, 1, &[]);
    call.resize(64, 0x5a);
    want.extend_from_slice(&call);
    assert_eq!(p.last_sent(Dir::Req), &want[..]);
    let (inc, k) = serve(&mut p, 40, &[]);
    assert_eq!((inc.xid, k), (0x10, ReplyKind::Inline));
    assert_eq!(
        &p.last_sent(Dir::Resp)[..24],
        &words(&[
            0x10,  // rdma_xid
            2,     // rdma_vers: the call's
            64,    // rdma_credit: the grant
            MSG,   // rdma_proc
            REPLY, // rdma_direction
            0,     // rdma_inv_handle copied
        ])[..]
    );
    let r = p.next_reply();
    assert_eq!(r.xid, 0x10);
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.version(), c.remembered_version()), (2, Some(2)));
    assert_eq!(p.resp.conn.as_ref().unwrap().version(), 2);
    // Everything Version One can do, in Version Two: long call, DDP Read and Write chunks,
    // long reply through the Reply chunk.
    let head = rpc_call(0x11, 7, &words(&[100]));
    let m = p.req.host.buf_with(&head, EXPOSE);
    let arg = p.req.host.buf_with(&pattern(100, 1), EXPOSE);
    let pad = p.req.host.buf_with(&pattern(6000, 2), EXPOSE);
    let rec = p.req.host.alloc(256, EXPOSE);
    let rbuf = p.req.host.alloc(16_384, EXPOSE);
    p.call(&CallSpec {
        message: &[m, pad],
        ddp: &[DdpItem {
            at: head.len() as u32,
            buf: arg,
        }],
        receptacles: &[rec],
        reply: rbuf,
    });
    assert_eq!(
        be32(p.last_sent(Dir::Req), 3),
        NOMSG,
        "6000 octets: a long call"
    );
    let res = p.resp.host.buf_with(&pattern(77, 3), LW);
    let (inc, k) = serve(&mut p, 9000, &[(24, res)]);
    assert_eq!(inc.write_chunks, 1);
    let mut want_stream = head.clone();
    want_stream.extend_from_slice(&pattern(100, 1));
    want_stream.extend_from_slice(&pattern(6000, 2));
    assert_eq!(p.resp.host.read(inc.stream), &want_stream[..]);
    assert_eq!(k, ReplyKind::Long);
    let r = p.next_reply();
    assert!(r.long);
    assert_eq!((r.len, r.written()), (9000, &[77][..]));
    assert_eq!(
        p.req.host.read(rec.sub(0, 77).unwrap()),
        &pattern(77, 3)[..]
    );
    assert_eq!(p.wire.unknown, 0);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_first_v2_message_within_1024_then_v2_thresholds() {
    // No private data: Version One would be 1024 both ways, Version Two is 4096.
    let mut c = v2cfg();
    c.send_private_data = false;
    let mut p = Pair::new(c, c);
    p.record = true;
    assert_eq!(p.req.conn.as_ref().unwrap().negotiated().send_inline, 1024);
    assert!(
        matches!(p.req.events[0], Event::Connected(n) if n.send_inline == 1024 && n.recv_inline == 4096)
    );
    // While probing, a 2000-octet call does not fit the 1024-octet first message: long.
    simple_call(&mut p, 1, 2000, 256);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), NOMSG);
    assert!(p.sent.last().unwrap().1.len() <= 1024);
    serve(&mut p, 40, &[]);
    p.next_reply();
    // Confirmed: the same call now goes inline (4096), on the same connection.
    let n = p.req.conn.as_ref().unwrap().negotiated();
    assert_eq!((n.send_inline, n.recv_inline), (4096, 4096));
    assert_eq!(p.resp.conn.as_ref().unwrap().negotiated().send_inline, 4096);
    simple_call(&mut p, 2, 2000, 256);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), MSG);
    serve(&mut p, 40, &[]);
    p.next_reply();
    // Exactly at the Version Two threshold (36-octet header): inline; one word more: long.
    simple_call(&mut p, 3, 4096 - 36, 256);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), MSG);
    serve(&mut p, 40, &[]);
    p.next_reply();
    simple_call(&mut p, 4, 4096 - 32, 256);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), NOMSG);
    serve(&mut p, 40, &[]);
    p.next_reply();
}

/// Draft, "Default Values": "RPC-over-RDMA Version Two receiver implementations MUST support
/// an inline threshold of 4096 bytes ... A mechanism for discovering a peer's preferred inline
/// threshold value (not defined in this document) may be used ... In the absense of such a
/// mechanism, senders MUST assume a receiver's inline threshold is 4096 bytes." RFC 8797's
/// sizes describe Version One ("Protocol Version Negotiation": after a Version Two reply "both
/// peers use the default inline threshold value for RPC-over-RDMA Version Two connections
/// (4096 bytes)"). Both ends advertise 16384 in their RFC 8797 private data; once Version Two
/// is confirmed:
/// - the requester sends a 6000-octet call as a Long Call (RDMA2_NOMSG), never inline;
/// - it offers a Reply chunk for a reply that may exceed 4096 octets;
/// - the responder sends a 6000-octet reply through that Reply chunk, never inline;
/// - 4096 octets exactly still go inline both ways.
#[test]
fn rejects_inline_v2_messages_above_4096_whatever_rfc_8797_advertised() {
    let mut c = v2cfg();
    c.inline_send = 16384;
    c.inline_recv = 16384;
    let mut p = Pair::new(c, c);
    p.record = true;
    simple_call(&mut p, 1, 64, 256);
    serve(&mut p, 40, &[]);
    p.next_reply();
    assert_eq!(p.req.conn.as_ref().unwrap().version(), 2);
    // RFC 8797 data were exchanged (Version One would use 16384 both ways) ...
    let pd = p.req.conn.as_ref().unwrap().private_data();
    assert_eq!(
        rpcrdma_engine::proto::private_data::decode(&pd)
            .unwrap()
            .max_recv_size,
        16384
    );
    // ... but Version Two thresholds are 4096 in every direction.
    for side in [&p.req, &p.resp] {
        let n = side.conn.as_ref().unwrap().negotiated();
        assert_eq!(
            (n.send_inline, n.recv_inline),
            (4096, 4096),
            "{}",
            side.host.name
        );
    }
    // A 6000-octet call: Long Call.
    simple_call(&mut p, 2, 6000, 256);
    assert_eq!(
        be32(p.last_sent(Dir::Req), 3),
        NOMSG,
        "6000-octet call inline"
    );
    serve(&mut p, 40, &[]);
    p.next_reply();
    // A reply buffer of 8192: the reply may exceed 4096, so a Reply chunk is offered; the
    // responder sends a 6000-octet reply through it.
    let rbuf = simple_call(&mut p, 3, 64, 8192);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), MSG);
    let (inc, k) = serve(&mut p, 6000, &[]);
    assert_eq!(inc.reply_capacity, Some(8192), "no Reply chunk offered");
    assert_eq!(k, ReplyKind::Long, "6000-octet reply inline");
    assert_eq!(be32(p.last_sent(Dir::Resp), 3), NOMSG);
    let r = p.next_reply();
    assert!(r.long);
    assert_eq!(r.len, 6000);
    assert_eq!(be32(p.req.host.read(rbuf), 0), 3);
    // The boundary: a call of exactly 4096 octets with its header goes inline.
    // A reply buffer of 4096 - 36 octets: the largest reply fits inline, no Reply chunk.
    simple_call(&mut p, 4, 4096 - 36, 4096 - 36);
    assert_eq!(be32(p.last_sent(Dir::Req), 3), MSG);
    assert_eq!(p.last_sent(Dir::Req).len(), 4096);
    let (inc, k) = serve(&mut p, 4096 - 36, &[]);
    assert_eq!((inc.reply_capacity, k), (None, ReplyKind::Inline));
    assert_eq!(p.last_sent(Dir::Resp).len(), 4096);
    p.next_reply();
    assert!(p.sent.iter().all(|(_, m)| m.len() <= 4096));
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_v2_thresholds_independent_of_rounded_advertised_sizes() {
    // 9000 and 5000 are not representable in RFC 8797 (advertised as 8192 and 4096); Version
    // Two does not use the RFC 8797 sizes at all (draft, "Default Values"): both ends agree
    // on 4096 every way, at most what a side's send buffers hold.
    let mut cc = v2cfg();
    cc.inline_send = 9000;
    cc.inline_recv = 16384;
    let mut sc = v2cfg();
    sc.inline_send = 5000;
    sc.inline_recv = 16384;
    let mut p = Pair::new(cc, sc);
    simple_call(&mut p, 1, 64, 64);
    serve(&mut p, 40, &[]);
    p.next_reply();
    let a = p.req.conn.as_ref().unwrap().negotiated();
    let b = p.resp.conn.as_ref().unwrap().negotiated();
    assert_eq!(a.send_inline, b.recv_inline, "client → server");
    assert_eq!(b.send_inline, a.recv_inline, "server → client");
    assert_eq!((a.send_inline, b.send_inline), (4096, 4096));
}

/// Draft, "Responder Does Support RPC-over-RDMA Version Two": after the first Version Two reply
/// "both peers use the default inline threshold value for RPC-over-RDMA Version Two connections
/// (4096 bytes)". A requester offers no Reply chunk for a reply that fits 4096 octets, so a
/// side whose Sends hold fewer than 4096 octets could not send such a reply inline and would
/// answer RDMA2_ERR_CANT_REPLY: Version Two is refused at set-up for it, as for a receive size
/// below 4096. Version One keeps any size.
#[test]
fn rejects_v2_config_with_a_send_size_below_4096() {
    use rpcrdma_engine::conn::{ConfigError, Connection, Pools};
    let buf = |i: u64, len: u32| LocalBuf {
        addr: 0x1000_0000 + i * 0x1_0000,
        len,
        lkey: 1,
    };
    let headers: Vec<LocalBuf> = (0..4).map(|i| buf(i, 4096)).collect();
    let recvs: Vec<LocalBuf> = (4..40).map(|i| buf(i, 4096)).collect();
    let mws: Vec<u32> = (0..32).map(|i| 0x100 + i).collect();
    let pools = Pools {
        headers: &headers,
        recvs: &recvs,
        data: &[],
        mws: &mws,
        zero: buf(60, 64),
    };
    for role in [Role::Requester, Role::Responder] {
        let make = |max_version: u32, inline_send: u32| {
            let mut c = Config::DEFAULT;
            c.credits = 4;
            c.max_version = max_version;
            c.inline_send = inline_send;
            Connection::new(role, c, &pools).map(|_| ())
        };
        assert_eq!(
            make(2, 2048),
            Err(ConfigError::InlineSendTooSmallForV2 { have: 2048 }),
            "{role:?}"
        );
        assert_eq!(
            make(2, 4095),
            Err(ConfigError::InlineSendTooSmallForV2 { have: 4095 }),
            "{role:?}"
        );
        assert_eq!(make(2, 4096), Ok(()), "{role:?}");
        assert_eq!(make(1, 2048), Ok(()), "{role:?}");
    }
}

#[test]
fn accepts_fallback_to_v1_with_a_v1_only_server_and_remembers_it() {
    let mut sc = v1cfg();
    sc.inline_recv = 2048;
    let mut p = Pair::new(v2cfg(), sc);
    assert_eq!(
        p.req.conn.as_ref().unwrap().negotiated().send_inline,
        1024,
        "probing"
    );
    p.record = true;
    p.record_procs = true;
    // A call with chunks: its STags of the Version Two attempt are invalidated before it is
    // sent again in Version One (H-STAG checks both sets when the call finishes).
    let m = p.req.host.buf_with(&rpc_call(0x21, 1, &[]), EXPOSE);
    let rec = p.req.host.alloc(64, EXPOSE);
    let rbuf = p.req.host.alloc(256, EXPOSE);
    let id = p.call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &[rec],
        reply: rbuf,
    });
    // v2 call, ERR_VERS (1..=1, rdma_vers copied), the same call in v1: one CallReady.
    let procs: Vec<(Dir, u32, u32, u32)> = p
        .sent_procs
        .iter()
        .map(|&(d, x, v, _, pr)| (d, x, v, pr))
        .collect();
    assert_eq!(
        procs,
        [
            (Dir::Req, 0x21, 2, MSG),
            (Dir::Resp, 0x21, 2, ERROR),
            (Dir::Req, 0x21, 1, MSG)
        ]
    );
    let err = p
        .sent
        .iter()
        .find(|(d, _)| *d == Dir::Resp)
        .unwrap()
        .1
        .clone();
    assert_eq!(
        err,
        words(&[
            0x21,  // rdma_xid
            2,     // rdma_vers copied from the call
            64,    // rdma_credit
            ERROR, // rdma_proc
            1,     // ERR_VERS
            1,     // low
            1,     // high
        ])
    );
    let res = p.resp.host.buf_with(&[5; 8], LW);
    serve(&mut p, 40, &[(24, res)]);
    let r = p.next_reply();
    assert_eq!((r.call, r.xid, r.written()), (id, 0x21, &[8][..]));
    assert!(
        p.next_call().is_none(),
        "the v2 attempt was never delivered"
    );
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.version(), c.remembered_version()), (1, Some(1)));
    // Version One thresholds from now on: the server's RFC 8797 receive size (2048), where
    // Version Two would have used 4096.
    assert_eq!(c.negotiated().send_inline, 2048);
    // Later calls go straight in Version One.
    simple_call(&mut p, 0x22, 64, 256);
    assert_eq!(be32(p.last_sent(Dir::Req), 1), 1);
    serve(&mut p, 40, &[]);
    p.next_reply();
    assert_eq!(p.stats.errors, 0);
    // The layer above keeps the result: the next connection to this server starts in v1.
    let remembered = c_remembered(&p);
    let mut cc = v2cfg();
    cc.max_version = remembered;
    let mut p = Pair::new(cc, sc);
    p.record_procs = true;
    simple_call(&mut p, 0x23, 64, 256);
    serve(&mut p, 40, &[]);
    p.next_reply();
    assert!(
        p.sent_procs.iter().all(|e| e.2 == 1 && e.4 == MSG),
        "no probe"
    );
}

fn c_remembered(p: &Pair) -> u32 {
    p.req.conn.as_ref().unwrap().remembered_version().unwrap()
}

#[test]
fn accepts_v1_client_with_a_v2_server_answered_in_v1() {
    let mut p = Pair::new(v1cfg(), v2cfg());
    p.record_procs = true;
    for xid in 1..=3 {
        simple_call(&mut p, xid, 64, 8192);
        let res = p.resp.host.buf_with(&[1; 4], LW);
        let _ = res;
        serve(&mut p, if xid == 3 { 6000 } else { 40 }, &[]);
        assert_eq!(p.next_reply().xid, xid);
    }
    assert!(p.sent_procs.iter().all(|e| e.2 == 1), "all Version One");
    assert_eq!(p.resp.conn.as_ref().unwrap().version(), 1);
    assert_eq!(p.req.conn.as_ref().unwrap().remembered_version(), None);
}

#[test]
fn accepts_inv_handle_chosen_by_requester_and_honoured_by_responder() {
    // (client R, server R, call shape) → Send With Invalidate expected?
    for (client_r, server_r) in [(true, true), (true, false), (false, true)] {
        let mut cc = v2cfg();
        cc.remote_invalidate = client_r;
        let mut sc = v2cfg();
        sc.remote_invalidate = server_r;
        let mut p = Pair::new(cc, sc);
        p.record = true;
        for shape in 0..3 {
            p.inv_log.clear();
            let xid = 0x40 + shape;
            let head = rpc_call(xid, 1, &words(&[8]));
            let m = p.req.host.buf_with(&head, EXPOSE);
            let arg = p.req.host.buf_with(&pattern(8, 1), EXPOSE);
            let recs = [p.req.host.alloc(64, EXPOSE), p.req.host.alloc(64, EXPOSE)];
            let small = p.req.host.alloc(256, EXPOSE);
            let large = p.req.host.alloc(16_384, EXPOSE);
            let ddp = [DdpItem {
                at: head.len() as u32,
                buf: arg,
            }];
            // 0: one Write chunk; 1: Read chunk + 2 Write chunks + Reply chunk; 2: Read only.
            let spec = match shape {
                0 => CallSpec {
                    message: &[m],
                    ddp: &[],
                    receptacles: &recs[..1],
                    reply: small,
                },
                1 => CallSpec {
                    message: &[m],
                    ddp: &ddp,
                    receptacles: &recs,
                    reply: large,
                },
                _ => CallSpec {
                    message: &[m],
                    ddp: &ddp,
                    receptacles: &[],
                    reply: small,
                },
            };
            p.call(&spec);
            let sent = p.last_sent(Dir::Req).to_vec();
            let h = v2::decode(&sent, &v2::Limits::DEFAULT).unwrap();
            let c = *h.chunks().unwrap();
            let handles: Vec<u32> = c.lists.segments().map(|s| s.handle).collect();
            let want_inv = match (client_r, shape) {
                (false, _) => 0,
                (true, 0) => c.lists.writes.get(0).unwrap().get(0).unwrap().handle,
                (true, 1) => c.lists.reply.unwrap().get(0).unwrap().handle,
                (true, _) => c.lists.reads.get(0).unwrap().target.handle,
            };
            assert_eq!(c.inv_handle, want_inv, "shape {shape}");
            let res = p.resp.host.buf_with(&[9; 5], LW);
            let results: &[(u32, LocalBuf)] = if shape == 2 { &[] } else { &[(24, res)] };
            serve(&mut p, 40, results);
            // The reply copies rdma_inv_handle.
            assert_eq!(be32(p.last_sent(Dir::Resp), 5), want_inv);
            p.next_reply();
            let remote: Vec<u32> = p.inv_log.iter().filter(|e| e.2).map(|e| e.1).collect();
            let mut local: Vec<u32> = p.inv_log.iter().filter(|e| !e.2).map(|e| e.1).collect();
            let swi = want_inv != 0 && server_r;
            if swi {
                assert_eq!(remote, [want_inv], "exactly that handle, never another");
            } else {
                assert!(remote.is_empty());
            }
            let mut others: Vec<u32> = handles
                .iter()
                .copied()
                .filter(|&h| !swi || h != want_inv)
                .collect();
            local.sort();
            others.sort();
            assert_eq!(local, others, "the others invalidated locally");
            for h in handles {
                assert!(!p.req.host.rkey_live(h));
            }
        }
        assert_eq!(p.stats.errors, 0);
    }
    // Persistent STags: nothing may be invalidated remotely: rdma_inv_handle 0.
    let mut cc = v2cfg();
    cc.stag = StagMode::Persistent;
    let mut p = Pair::new(cc, v2cfg());
    p.record = true;
    let m = p.req.host.buf_with(&rpc_call(0x50, 1, &[]), LW);
    let rw =
        rpcrdma_engine::verbs::Access::LOCAL_WRITE | rpcrdma_engine::verbs::Access::REMOTE_WRITE;
    let rec = p.req.host.alloc(64, rw);
    let reply = p.req.host.alloc(256, LW);
    p.call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    assert_eq!(be32(p.last_sent(Dir::Req), 5), 0);
    serve(&mut p, 40, &[]);
    p.next_reply();
    assert_eq!(p.stats.sends_with_inv, 0);
}

#[test]
fn accepts_cant_reply_retry_with_larger_reply_resources() {
    let mut p = Pair::new(v2cfg(), v2cfg());
    p.record_procs = true;
    // Confirm v2 first.
    simple_call(&mut p, 1, 64, 256);
    serve(&mut p, 40, &[]);
    p.next_reply();
    // A 256-octet reply buffer (inline, no Reply chunk), a 16 KiB fallback.
    let m = p.req.host.buf_with(&rpc_call(0x60, 3, &[]), EXPOSE);
    let small = p.req.host.alloc(256, EXPOSE);
    let big = p.req.host.alloc(16_384, EXPOSE);
    let now = p.now;
    let id = {
        let side = &mut p.req;
        side.conn
            .as_mut()
            .unwrap()
            .start_call_with(
                now,
                &CallSpec {
                    message: &[m],
                    ddp: &[],
                    receptacles: &[],
                    reply: small,
                },
                &CallOptions {
                    fallback_reply: Some(big),
                    fallback_receptacles: &[],
                },
                &mut side.host,
            )
            .unwrap()
    };
    p.pump();
    // The reply is 6000 octets: it fits neither inline nor any chunk → CANT_REPLY.
    let (_, k) = serve(&mut p, 6000, &[]);
    assert_eq!(k, ReplyKind::CantReply);
    // The call comes again, same XID, now with a Reply chunk over the fallback buffer.
    let (inc, k) = serve(&mut p, 6000, &[]);
    assert_eq!(inc.xid, 0x60);
    assert_eq!(inc.reply_capacity, Some(16_384));
    assert_eq!(k, ReplyKind::Long);
    let r = p.next_reply();
    assert_eq!((r.call, r.xid, r.len, r.long), (id, 0x60, 6000, true));
    let mut want = rpc_reply(0x60, &[]);
    want.resize(6000, 0x3c);
    assert_eq!(p.req.host.read(big.sub(0, 6000).unwrap()), &want[..]);
    let x60: Vec<u32> = p
        .sent_procs
        .iter()
        .filter(|e| e.1 == 0x60)
        .map(|e| e.4)
        .collect();
    assert_eq!(x60, [MSG, ERROR, MSG, NOMSG]);

    // Write chunk too small: segment 1 needs 100; the fallback receptacle holds it.
    let m = p.req.host.buf_with(&rpc_call(0x61, 3, &[]), EXPOSE);
    let rec_small = p.req.host.alloc(8, EXPOSE);
    let rec_big = p.req.host.alloc(128, EXPOSE);
    let rbuf = p.req.host.alloc(256, EXPOSE);
    let now = p.now;
    {
        let side = &mut p.req;
        side.conn
            .as_mut()
            .unwrap()
            .start_call_with(
                now,
                &CallSpec {
                    message: &[m],
                    ddp: &[],
                    receptacles: &[rec_small],
                    reply: rbuf,
                },
                &CallOptions {
                    fallback_reply: None,
                    fallback_receptacles: &[rec_big],
                },
                &mut side.host,
            )
            .unwrap();
    }
    p.pump();
    p.record = true;
    let res = p.resp.host.buf_with(&pattern(100, 4), LW);
    let (_, k) = serve(&mut p, 40, &[(24, res)]);
    assert_eq!(k, ReplyKind::CantReply);
    assert_eq!(
        p.last_sent(Dir::Resp),
        &words(&[
            0x61,  // rdma_xid
            2,     // rdma_vers
            64,    // rdma_credit
            ERROR, // rdma_proc
            3,     // RDMA2_ERR_CANT_REPLY
            1,     // rdma_processed: TRUE
            1,     // rdma_segment_index: the Write chunk's segment
            100,   // rdma_length_needed
        ])[..]
    );
    let (inc, k) = serve(&mut p, 40, &[(24, res)]);
    assert_eq!(
        (inc.xid, inc.write_capacity[0], k),
        (0x61, 128, ReplyKind::Inline)
    );
    let r = p.next_reply();
    assert_eq!(r.written(), &[100]);
    assert_eq!(
        p.req.host.read(rec_big.sub(0, 100).unwrap()),
        &pattern(100, 4)[..]
    );

    // Without a fallback (or when the retry is short too) the call fails with CANT_REPLY.
    simple_call(&mut p, 0x62, 64, 256);
    let (_, k) = serve(&mut p, 6000, &[]);
    assert_eq!(k, ReplyKind::CantReply);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            xid: 0x62,
            error: CallError::Rdma2(v2::RdmaError::CantReply {
                processed: true,
                segment_index: 0,
                length_needed: 6000
            }),
            ..
        })
    ));
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_probe_loss_remembered_as_v1() {
    // The connection drops while the first v2 call is unanswered: the draft lets the next
    // connection assume Version One.
    let mut p = Pair::new(v2cfg(), v2cfg());
    simple_call(&mut p, 1, 64, 256);
    p.disconnect();
    assert_eq!(p.req.conn.as_ref().unwrap().remembered_version(), Some(1));
    // A probe that times out: this connection falls back too.
    let mut cc = v2cfg();
    cc.call_timeout_ns = 1_000_000;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cc,
        Sizing::for_config(Role::Requester, &cc),
    );
    let resp = make_raw_side("raw", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
    simple_call(&mut p, 2, 64, 256);
    assert_eq!(p.raw_take(Dir::Resp).len(), 1, "dropped by the peer");
    p.advance(2_000_000);
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            error: CallError::TimedOut,
            ..
        })
    ));
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.version(), c.remembered_version()), (1, Some(1)));
}

#[test]
fn accepts_backward_direction_in_v2() {
    let mut p = Pair::new_bidir(v2cfg(), v2cfg());
    p.enable_backchannel();
    p.record = true;
    // A forward call first: the server learns the version its backward calls use.
    simple_call(&mut p, 7, 64, 256);
    serve(&mut p, 40, &[]);
    p.next_reply();
    // Colliding XIDs, both directions, Version Two.
    simple_call(&mut p, 8, 64, 256);
    let bm = p.resp.host.buf_with(&rpc_call(8, 1, &[]), LW);
    let br = p.resp.host.alloc(256, LW);
    p.back_call(&CallSpec {
        message: &[bm],
        ddp: &[],
        receptacles: &[],
        reply: br,
    });
    assert_eq!(
        &p.last_sent(Dir::Resp)[..36],
        &words(&[
            8,    // rdma_xid (backward space)
            2,    // rdma_vers: as the forward calls
            16,   // rdma_credit: backward credits asked
            MSG,  // rdma_proc
            CALL, // rdma_direction
            0,    // rdma_inv_handle
            0, 0, 0, // empty chunk lists
        ])[..]
    );
    let binc = p.next_back_call().unwrap();
    assert_eq!(binc.xid, 8);
    let rb = p.req.host.buf_with(&rpc_reply(8, &words(&[0xb])), LW);
    p.back_reply(
        binc.call,
        &ReplySpec {
            message: &[rb],
            results: &[],
        },
    );
    assert_eq!(
        &p.last_sent(Dir::Req)[..24],
        &words(&[8, 2, 16, MSG, REPLY, 0])[..]
    );
    assert!(matches!(p.next_back_done(), Some(Event::ReplyReady(r)) if r.xid == 8));
    serve(&mut p, 40, &[]);
    assert_eq!(p.next_reply().xid, 8);
    assert_eq!(p.wire.back_calls, 1);
    assert_eq!(p.stats.errors, 0);
}

#[test]
fn accepts_v2_end_to_end_over_soft_provider() {
    use common::soft::SoftPair;
    let mut cfg = v2cfg();
    cfg.credits = 16;
    cfg.sq_depth = 256;
    cfg.rq_depth = 128;
    let mut p = SoftPair::new(cfg, cfg);
    let take = |evs: &mut Vec<Event>| -> Vec<Event> { std::mem::take(evs) };
    for (i, (call_len, reply_len)) in [(64usize, 40usize), (3000, 40), (64, 9000), (8000, 6000)]
        .into_iter()
        .enumerate()
    {
        let xid = 0x700 + i as u32;
        let mut call = rpc_call(xid, 1, &[]);
        call.resize(call_len, 0x11);
        let m = p.req.host.buf_with(&call);
        let rec = p.req.host.alloc(64);
        let rbuf = p.req.host.alloc(16_384);
        let now = p.now;
        p.req
            .conn
            .start_call(
                now,
                &CallSpec {
                    message: &[m],
                    ddp: &[],
                    receptacles: &[rec],
                    reply: rbuf,
                },
                &mut p.req.host,
            )
            .unwrap();
        p.run();
        let evs = take(&mut p.resp.events);
        let inc = evs
            .iter()
            .find_map(|e| match e {
                Event::CallReady(c) => Some(*c),
                _ => None,
            })
            .unwrap();
        assert_eq!(p.resp.host.read(inc.stream), call);
        let mut reply = rpc_reply(xid, &[]);
        reply.resize(reply_len, 0x22);
        let rb = p.resp.host.buf_with(&reply);
        let res = p.resp.host.buf_with(&[4; 7]);
        let now = p.now;
        p.resp
            .conn
            .send_reply(
                now,
                inc.call,
                &ReplySpec {
                    message: &[rb],
                    results: &[DdpItem { at: 24, buf: res }],
                },
                &mut p.resp.host,
            )
            .unwrap();
        p.run();
        let done = take(&mut p.req.events);
        let r = done
            .iter()
            .find_map(|e| match e {
                Event::ReplyReady(r) => Some(*r),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{done:?}"));
        assert_eq!(r.written(), &[7]);
        assert_eq!(p.req.host.read(rbuf.sub(0, r.len).unwrap()), reply);
        assert_eq!(p.req.host.read(rec.sub(0, 7).unwrap()), [4; 7]);
    }
    assert_eq!(p.req.conn.version(), 2);
    assert!(p.req.errors.is_empty(), "requester: {:?}", p.req.errors);
    assert!(p.resp.errors.is_empty(), "responder: {:?}", p.resp.errors);
}

/// A Version Two probe that a Version One responder drops silently, on a requester with no call
/// timeout: the draft ("Responder Does Not Support RPC-over-RDMA Version Two") lets the requester
/// "assume the same situation (no responder support for RPC-over-RDMA Version Two) if the initial
/// negotiation message is lost or dropped". The probe has its own timeout
/// ([`Config::probe_timeout_ns`]), whatever the call timeout says: when it expires the call is
/// sent again in Version One, same XID, and completes; the fallback is remembered.
#[test]
fn accepts_silently_dropped_probe_sent_again_in_v1_after_the_probe_timeout() {
    let mut cc = v2cfg();
    cc.call_timeout_ns = 0; // never
    cc.probe_timeout_ns = 3_000_000;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cc,
        Sizing::for_config(Role::Requester, &cc),
    );
    let resp = make_raw_side("raw-v1-server", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
    let t0 = p.now;
    let reply = simple_call(&mut p, 0x51, 64, 256);
    let probe = p.raw_take(Dir::Resp);
    assert_eq!(probe.len(), 1);
    assert_eq!(
        &probe[0][..8],
        &words(&[0x51, 2])[..],
        "the probe is Version Two"
    );
    let d = p
        .req
        .conn
        .as_ref()
        .unwrap()
        .poll_timeout()
        .expect("a deadline");
    assert!(
        (t0 + 3_000_000..=p.now + 3_000_000).contains(&d),
        "the probe's own deadline"
    );
    // Dropped by the peer: nothing comes back. Before the probe timeout nothing happens.
    p.advance(2_000_000);
    assert!(p.next_done().is_none());
    assert!(p.raw_take(Dir::Resp).is_empty());
    p.advance(1_500_000);
    assert!(p.next_done().is_none(), "the call is not failed");
    let again = p.raw_take(Dir::Resp);
    assert_eq!(again.len(), 1, "sent again");
    assert_eq!(
        &again[0][..16],
        &words(&[0x51, 1, 64, MSG])[..],
        "the same XID, in Version One (RDMA_MSG)"
    );
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.version(), c.remembered_version()), (1, Some(1)));
    assert_eq!(c.poll_timeout(), None, "no deadline left: no call timeout");
    let mut m = words(&[0x51, 1, 8, MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(0x51, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    let _ = reply;
}

/// A call timeout shorter than the probe timeout still fails the probe call first (and the
/// connection still falls back); a probe answered in time leaves no deadline behind.
#[test]
fn accepts_probe_answered_before_its_timeout_without_fallback() {
    let mut cc = v2cfg();
    cc.probe_timeout_ns = 3_000_000;
    let mut p = Pair::new(cc, v2cfg());
    let t0 = p.now;
    simple_call(&mut p, 0x61, 64, 256);
    let d = p
        .req
        .conn
        .as_ref()
        .unwrap()
        .poll_timeout()
        .expect("the probe's deadline");
    assert!((t0 + 3_000_000..=p.now + 3_000_000).contains(&d));
    serve(&mut p, 40, &[]);
    p.next_reply();
    let c = p.req.conn.as_ref().unwrap();
    assert_eq!((c.version(), c.remembered_version()), (2, Some(2)));
    assert_eq!(c.poll_timeout(), None);
    p.advance(10_000_000);
    assert_eq!(p.req.conn.as_ref().unwrap().version(), 2);
}

/// `poll_timeout` follows the earliest call still waiting as calls start and are answered
/// (Version One, call timeout only): the first call's deadline, then, once it is answered,
/// the deadline of the call started after it, then none.
#[test]
fn accepts_poll_timeout_following_the_earliest_waiting_call() {
    let mut cc = v1cfg();
    cc.call_timeout_ns = 1_000_000;
    let mut p = Pair::new(cc, v1cfg());
    let timeout = |p: &Pair| p.req.conn.as_ref().unwrap().poll_timeout();
    // The first reply grants the credits for two calls at once.
    simple_call(&mut p, 0x71, 64, 256);
    serve(&mut p, 40, &[]);
    p.next_reply();
    assert_eq!(timeout(&p), None, "nothing waiting");
    let t1 = p.now;
    simple_call(&mut p, 0x72, 64, 256);
    p.advance(100_000);
    let t2 = p.now;
    simple_call(&mut p, 0x73, 64, 256);
    assert!(t2 > t1);
    assert_eq!(
        timeout(&p),
        Some(t1 + 1_000_000),
        "the first call's deadline"
    );
    let (first, _) = serve(&mut p, 40, &[]);
    assert_eq!(first.xid, 0x72);
    assert_eq!(p.next_reply().xid, 0x72);
    assert_eq!(
        timeout(&p),
        Some(t2 + 1_000_000),
        "the second call's deadline"
    );
    serve(&mut p, 40, &[]);
    assert_eq!(p.next_reply().xid, 0x73);
    assert_eq!(timeout(&p), None, "nothing waiting");
}
