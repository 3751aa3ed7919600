//! Hostile peers against the real [`Server`] (issue 13 §3): raw soft-provider QPs
//! (`hostile_raw`) send malformed RPC-over-RDMA headers of every kind (Version One and Two),
//! one per connection. Each case asserts the outcome the specs prescribe (RFC 8166 §§4–5 and 7,
//! the implementation-experience draft, RFC 8167, RFC 8797, the Version Two draft) — an
//! RDMA_ERROR with the offending XID and version, a silent drop, a reply, or the loss of that
//! connection alone — and then that an honest [`Client`] on another connection is still served,
//! every one of its calls completing exactly once with the right result.
//!
//! Credit overruns, duplicate XIDs, lying RFC 8797 data, backward replies, guessed keys and
//! Send With Invalidate are in `hostile_server_conn.rs`.
//!
//! Normal operation of the suite: one soft fabric per test, the server on 10.0.0.2, the honest
//! client on 10.0.0.1, the raw peers on 10.0.0.3; each hostile case runs on a connection of its
//! own. Recovery: a case that leaves its connection up closes it and waits until the server
//! has counted the loss, so the server's connection slots never run out.
//!
//! [`Server`]: rpcrdma_poller::Server
//! [`Client`]: rpcrdma_poller::Client

mod api_common;
mod hostile_raw;
mod hostile_rig;

use std::time::Duration;

use api_common::*;
use hostile_raw::*;
use hostile_rig::*;
use rpcrdma_engine::proto::chunks::{ChunkListsRef, Segment};
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::QpState;
use rpcrdma_poller::ServerOptions;

/// What the server must do with a hostile message.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Version One ERR_CHUNK with the message's XID (RFC 8166 §4.4.2, §5: `rdma_vers` copied).
    ErrChunk,
    /// ERR_VERS with the message's XID and version and the range 1..=2 (RFC 8166 §4.4.1; the
    /// layout is fixed for every version, §7).
    ErrVers,
    /// RDMA2_ERROR with this code (draft, "Transport Errors").
    V2Err(u32),
    /// No answer; the connection goes on (the next call's reply is the next message).
    Drop,
    /// Served: SUM(20, 22) answered with 42 in Version One.
    Served,
    /// An accepted RPC reply with this status (the RPC layer judged the message).
    Rpc(AcceptStat),
    /// An RPC MSG_DENIED reply (RPC_MISMATCH).
    Denied,
}

const W_MSG: u32 = 0;
const W_NOMSG: u32 = 1;

/// One hostile message per connection, then a valid call on the same connection (answered,
/// and after a dropped message it is the first thing that comes back).
fn run_cases(r: &Rig, cases: &[Case]) {
    for (k, (name, msg, xid, vers, want)) in cases.iter().enumerate() {
        let mut p = r.peer();
        p.send(msg);
        let follow = 0x7000_0000 + k as u32;
        match *want {
            Want::Drop => {}
            Want::ErrChunk | Want::ErrVers | Want::V2Err(_) => {
                let body = match want {
                    Want::ErrChunk => vec![2],
                    Want::ErrVers => vec![1, 1, 2],
                    Want::V2Err(c) => vec![*c],
                    _ => unreachable!(),
                };
                let got = decode(&p.recv_msg(name));
                assert_eq!(
                    got,
                    Answer::Error {
                        xid: *xid,
                        vers: *vers,
                        body
                    },
                    "{name}"
                );
            }
            Want::Served => assert_sum_reply(&p.recv_msg(name), *xid, 1, 42, name),
            Want::Rpc(stat) => match decode(&p.recv_msg(name)) {
                Answer::Reply {
                    xid: x,
                    stat: Some(s),
                    results,
                    ..
                } => {
                    assert_eq!((x, s), (*xid, stat), "{name}");
                    assert!(results.is_empty(), "{name}: no results with {s:?}");
                }
                other => panic!("{name}: expected an RPC {stat:?}, got {other:?}"),
            },
            Want::Denied => match decode(&p.recv_msg(name)) {
                Answer::Reply {
                    xid: x, stat: None, ..
                } => assert_eq!(x, *xid, "{name}"),
                other => panic!("{name}: expected MSG_DENIED, got {other:?}"),
            },
        }
        // The connection is still served; after a drop nothing else came first.
        p.send(&sum_v1(follow, 40, k as u32));
        assert_sum_reply(
            &p.recv_msg(name),
            follow,
            1,
            40 + k as u32,
            &format!("{name}: next call"),
        );
        assert_eq!(
            p.recv(Duration::from_millis(20)),
            Err(RecvEnd::Timeout),
            "{name}: nothing more"
        );
        assert_eq!(p.state(), QpState::Rts, "{name}");
        r.close(p, name);
    }
}

/// The fixed words of a Version One header.
fn fixed(xid: u32, proc_: u32) -> Vec<u32> {
    vec![xid, 1, 1, proc_]
}

fn cat(a: &[u32], b: &[u8]) -> Vec<u8> {
    let mut v = words(a);
    v.extend_from_slice(b);
    v
}

/// One malformed-message case: name, the Send, the XID and version an answer carries, and
/// what the server must do.
type Case = (&'static str, Vec<u8>, u32, u32, Want);

/// A valid SUM call with XID `x`.
fn sum_call(x: u32) -> Vec<u8> {
    rpc_call(x, PROG, 2, SUM, &words(&[20, 22]))
}

/// The words of one RDMA segment with handle `h`.
fn seg_words(h: u32) -> [u32; 4] {
    [h, 64, 0, 0x1000]
}

/// Version One cases: short messages, bad versions, unknown procedures.
fn v1_short_version_and_procedure_cases(cases: &mut Vec<Case>) {
    cases.extend([
        ("empty Send", vec![], 0, 0, Want::Drop),
        ("4 octets", words(&[0x11]), 0x11, 0, Want::Drop),
        (
            "7 octets",
            vec![0, 0, 0, 0x12, 0, 0, 0],
            0x12,
            0,
            Want::Drop,
        ),
        ("8 octets", words(&[0x13, 1]), 0x13, 1, Want::Drop),
        ("12 octets", words(&[0x14, 1, 1]), 0x14, 1, Want::Drop),
        (
            "15 octets",
            words(&[0x15, 1, 1, 0])[..15].to_vec(),
            0x15,
            1,
            Want::Drop,
        ),
    ]);
    for (x, v) in [(0x21, 0u32), (0x22, 3), (0x23, 0xffff_ffff)] {
        let mut m = sum_v1(x, 20, 22);
        m[4..8].copy_from_slice(&v.to_be_bytes());
        cases.push(("bad version", m, x, v, Want::ErrVers));
    }
    for (x, p) in [(0x31, 5u32), (0x32, 0xdead)] {
        cases.push((
            "unknown procedure",
            cat(&fixed(x, p), &[0; 12]),
            x,
            1,
            Want::ErrChunk,
        ));
    }
}

/// Version One cases: malformed chunk lists, Write list and Reply chunk limits.
fn v1_chunk_list_cases(cases: &mut Vec<Case>) {
    let (call, seg) = (sum_call, seg_words);
    let x = 0x41;
    cases.push((
        "read list discriminator 2",
        cat(&[x, 1, 1, W_MSG, 2, 0, 0], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x42;
    cases.push((
        "write list discriminator 7",
        cat(&[x, 1, 1, W_MSG, 0, 7, 0], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x43;
    cases.push((
        "reply chunk discriminator 0xffffffff",
        cat(&[x, 1, 1, W_MSG, 0, 0, 0xffff_ffff], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x44;
    cases.push((
        "truncated read segment",
        words(&[x, 1, 1, W_MSG, 1, 0, 0x1234]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x45;
    cases.push((
        "truncated write segment",
        words(&[x, 1, 1, W_MSG, 0, 1, 2, 0x1234, 64, 0, 0x1000, 0x99]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x46;
    cases.push((
        "write chunk of 0xffffffff segments",
        cat(&[x, 1, 1, W_MSG, 0, 1, 0xffff_ffff], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x47;
    cases.push((
        "reply chunk of 0x40000000 segments",
        cat(&[x, 1, 1, W_MSG, 0, 0, 1, 0x4000_0000], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x48;
    let mut five = vec![x, 1, 1, W_MSG, 0];
    for i in 0..5 {
        five.extend([1, 1]);
        five.extend(seg(0x500 + i));
    }
    five.extend([0, 0]);
    cases.push((
        "five write chunks",
        cat(&five, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
}

/// Version One cases: Read chunk rules, segment overflow, and legal chunk lists a reply does
/// not use.
fn v1_read_chunk_cases(cases: &mut Vec<Case>) {
    let (call, seg) = (sum_call, seg_words);
    let x = 0x49;
    let mut pz = vec![x, 1, 1, W_MSG, 1, 0];
    pz.extend(seg(0x600));
    pz.extend([0, 0, 0]);
    cases.push((
        "Position Zero Read chunk in RDMA_MSG with the call inline",
        cat(&pz, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4a;
    let mut mis = vec![x, 1, 1, W_MSG, 1, 64];
    mis.extend(seg(0x601));
    mis.extend([1, 32]);
    mis.extend(seg(0x602));
    mis.extend([0, 0, 0]);
    cases.push((
        "read positions out of order",
        cat(&mis, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4b;
    let mut ov = vec![x, 1, 1, W_MSG, 1, 32];
    ov.extend(seg(0x603)); // 32..96
    ov.extend([1, 48]);
    ov.extend(seg(0x604)); // starts inside it
    ov.extend([0, 0, 0]);
    cases.push((
        "overlapping read chunks",
        cat(&ov, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4c;
    let mut ma = vec![x, 1, 1, W_MSG, 1, 33];
    ma.extend(seg(0x605));
    ma.extend([0, 0, 0]);
    cases.push((
        "misaligned read position",
        cat(&ma, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4d;
    cases.push((
        "segment whose offset + length overflows",
        cat(
            &[
                x,
                1,
                1,
                W_MSG,
                0,
                1,
                1,
                0x700,
                0x100,
                0xffff_ffff,
                0xffff_fff0,
                0,
                0,
            ],
            &call(x),
        ),
        x,
        1,
        Want::ErrChunk,
    ));
    // Write list and Reply chunk together, with handles that reach nothing: legal in the
    // header, and a reply that fits inline uses neither (RFC 8166 §3.5.2): served.
    let x = 0x4e;
    let ws = [Segment::new(0xdead_0001, 64, 0x1000)];
    let wl: [&[Segment]; 1] = [&ws];
    let rs = [Segment::new(0xdead_0002, 1024, 0x2000)];
    cases.push((
        "write list and reply chunk with dead handles",
        v1_msg(
            x,
            1,
            ChunkListsRef {
                reads: &[],
                writes: &wl,
                reply: Some(&rs),
            },
            &call(x),
        ),
        x,
        1,
        Want::Served,
    ));
}

/// Version One cases: payload rules, RDMA_MSGP, RDMA_DONE, RDMA_ERROR and the RPC header.
fn v1_payload_and_rpc_cases(cases: &mut Vec<Case>) {
    let (call, seg) = (sum_call, seg_words);
    let x = 0x51;
    cases.push((
        "RDMA_MSG without payload",
        words(&[x, 1, 1, W_MSG, 0, 0, 0]),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x52;
    cases.push((
        "RDMA_MSG with a 4-octet payload",
        words(&[x, 1, 1, W_MSG, 0, 0, 0, x]),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x53;
    cases.push((
        "RDMA_NOMSG without chunks",
        words(&[x, 1, 1, W_NOMSG, 0, 0, 0]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x54;
    let mut nw = vec![x, 1, 1, W_NOMSG, 0, 1, 1];
    nw.extend(seg(0x606));
    nw.extend([0, 0]);
    cases.push((
        "RDMA_NOMSG with only a Write list",
        words(&nw),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x55;
    let mut nr = vec![x, 1, 1, W_NOMSG, 0, 0, 1, 1];
    nr.extend(seg(0x607));
    cases.push((
        "RDMA_NOMSG call with only a Reply chunk",
        words(&nr),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x56;
    cases.push((
        "RDMA_MSGP",
        cat(&[x, 1, 1, 2, 64, 4096, 0, 0, 0], &call(x)),
        x,
        1,
        Want::Served,
    ));
    let x = 0x57;
    cases.push((
        "RDMA_MSGP cut before its alignment words",
        words(&[x, 1, 1, 2, 64]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x58;
    cases.push(("RDMA_DONE", words(&[x, 1, 1, 3]), x, 1, Want::Drop));
    for (x, body) in [
        (0x59, vec![2]),
        (0x5a, vec![1, 1, 1]),
        (0x5b, vec![1]),
        (0x5c, vec![77]),
    ] {
        cases.push((
            "RDMA_ERROR sent to a server",
            cat(&fixed(x, 4), &words(&body)),
            x,
            1,
            Want::Drop,
        ));
    }
    let x = 0x61;
    cases.push((
        "RPC XID differs from the transport XID",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &call(x + 1)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x62;
    cases.push((
        "RPC REPLY with an unknown XID (a stray backward reply)",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &rpc_reply(x, &[0; 4])),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x63;
    cases.push((
        "RPC msg_type 9",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &words(&[x, 9, 2, PROG, 2, SUM])),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x64;
    cases.push((
        "garbage after the header: rpcvers 7",
        v1_msg(
            x,
            1,
            ChunkListsRef::EMPTY,
            &words(&[x, 0, 7, PROG, 2, SUM, 0, 0, 0, 0]),
        ),
        x,
        1,
        Want::Denied,
    ));
    let x = 0x65;
    cases.push((
        "garbage after the header: RPC call header cut short",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &words(&[x, 0, 2, PROG, 2])),
        x,
        1,
        Want::Rpc(AcceptStat::GarbageArgs),
    ));
    let x = 0x66;
    let mut junk = call(x);
    junk.extend_from_slice(&[0xa5; 3]);
    cases.push((
        "garbage after the header: ragged arguments",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &junk),
        x,
        1,
        Want::Rpc(AcceptStat::GarbageArgs),
    ));
}

/// Every malformed Version One header, one per connection (RFC 8166 §4.4, §4.5, §5; IE §3.6,
/// §7.1; RFC 8167 §5.3): short messages and RDMA_MSG without a payload are dropped (the 8–15
/// octet case with readable XID and version included: docs/conformance.md V1-02, BI-12), a
/// bad version is answered ERR_VERS, unknown procedures and every chunk-list violation
/// ERR_CHUNK, RDMA_MSGP is served like RDMA_MSG (IE §7.1.3, V1-18), RDMA_DONE and RDMA_ERROR
/// are never answered, an RPC message that is not a CALL is dropped, and garbage in the RPC
/// header is answered by the RPC layer.
fn rejects_malformed_v1_headers_each_as_rfc_8166_prescribes(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    let mut cases = Vec::new();
    v1_short_version_and_procedure_cases(&mut cases);
    v1_chunk_list_cases(&mut cases);
    v1_read_chunk_cases(&mut cases);
    v1_payload_and_rpc_cases(&mut cases);
    run_cases(&r, &cases);
    r.honest_round(32, "after the malformed v1 headers");
    live.finish("malformed v1 headers");
    let t = r.server.totals();
    assert_eq!(t.connection_losses, r.server.accepted() - 1);
    r.stop();
}

/// Version Two fixed words and the chunk-list preamble: XID, version 2, credits, procedure.
fn fixed2(xid: u32, proc_: u32) -> Vec<u32> {
    vec![xid, 2, 1, proc_]
}

/// RDMA2_ERROR codes and the RDMA2_OPTIONAL procedure number (draft, "Transport Errors").
const BAD_XDR: u32 = 2;
const INVAL_PROC: u32 = 4;
const INVAL_OPTION: u32 = 5;
const OPT: u32 = 5;

/// Version Two cases: procedures, directions, truncation, chunk lists, payload, errors.
fn v2_header_cases(cases: &mut Vec<Case>) {
    let call = sum_call;
    for (x, p) in [(0x101, 2u32), (0x102, 3), (0x103, 0x7777)] {
        cases.push((
            "v2 unknown procedure",
            cat(&fixed2(x, p), &[0; 16]),
            x,
            2,
            Want::V2Err(INVAL_PROC),
        ));
    }
    let x = 0x111;
    let mut m = fixed2(x, W_MSG);
    m.extend([5, 0, 0, 0, 0]);
    cases.push((
        "v2 rdma_direction 5",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x112;
    let mut m = fixed2(x, W_MSG);
    m.push(0);
    cases.push((
        "v2 cut after rdma_direction",
        words(&m),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x113;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0, 3, 0, 0]);
    cases.push((
        "v2 read list discriminator 3",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x114;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0, 1, 0, 0x800, 64, 0, 0x1000, 0, 0, 0]);
    cases.push((
        "v2 Position Zero Read chunk in RDMA2_MSG",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x115;
    let mut m = fixed2(x, W_NOMSG);
    m.extend([0, 0, 0, 0, 0]);
    cases.push((
        "v2 RDMA2_NOMSG call without Position Zero",
        words(&m),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x116;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0xdead_beef, 0, 0, 0]);
    cases.push((
        "v2 rdma_inv_handle not among the chunks",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x117;
    cases.push((
        "v2 direction CALL with an RPC REPLY",
        v2_msg(x, 1, ChunkListsRef::EMPTY, &rpc_reply(x, &[0; 4])),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x118;
    cases.push((
        "v2 RDMA2_MSG without payload",
        words(&[x, 2, 1, W_MSG, 0, 0, 0, 0, 0]),
        x,
        2,
        Want::Drop,
    ));
    let x = 0x119;
    cases.push((
        "v2 XID mismatch",
        v2_msg(x, 1, ChunkListsRef::EMPTY, &call(x ^ 1)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    for (x, body) in [
        (0x121, vec![2]),
        (0x122, vec![3, 1, 1, 64]),
        (0x123, vec![9]),
    ] {
        cases.push((
            "v2 RDMA2_ERROR sent to a server",
            cat(&fixed2(x, 4), &words(&body)),
            x,
            2,
            Want::Drop,
        ));
    }
}

/// Version Two cases: RDMA2_OPTIONAL messages and the RPC header.
fn v2_optional_and_rpc_cases(cases: &mut Vec<Case>) {
    let call = sum_call;
    let x = 0x131;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL of an unknown type",
        words(&[x, 2, 1, OPT, 0, 0x5151, 4, 0xabcd]),
        x,
        2,
        Want::V2Err(INVAL_OPTION),
    ));
    let x = 0x132;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL of an unknown type with an RPC call",
        cat(&[x, 2, 1, OPT, 0, 0x5152, 0], &call(x)),
        x,
        2,
        Want::V2Err(INVAL_OPTION),
    ));
    let x = 0x133;
    cases.push((
        "v2 RDMA2_OPTIONAL REPLY of an unknown type",
        words(&[x, 2, 1, OPT, 1, 0x5153, 0]),
        x,
        2,
        Want::Drop,
    ));
    let x = 0x134;
    cases.push((
        "v2 RDMA2_OPTIONAL rdma_optdir 9",
        words(&[x, 2, 1, OPT, 9, 0x5154, 0]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x135;
    cases.push((
        "v2 rdma_optinfo longer than the message",
        words(&[x, 2, 1, OPT, 0, 0x5155, 64, 1, 2]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x136;
    cases.push((
        "v2 rdma_optinfo of 0xfffffff0 octets",
        words(&[x, 2, 1, OPT, 0, 0x5156, 0xffff_fff0, 1, 2]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x137;
    let mut m = words(&[x, 2, 1, OPT, 0, 0x5157, 3]);
    m.extend_from_slice(&[1, 2, 3, 0xff]);
    cases.push((
        "v2 rdma_optinfo with a non-zero pad",
        m,
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x138;
    cases.push((
        "v2 rdma_optinfo cut inside its length word",
        words(&[x, 2, 1, OPT, 0, 0x5158])
            .into_iter()
            .chain([0, 0])
            .collect(),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x139;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL carrying an RPC REPLY",
        cat(&[x, 2, 1, OPT, 0, 0x5159, 0], &rpc_reply(x, &[0; 4])),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
}

/// Every malformed Version Two header, one per connection (draft, "Transport Errors",
/// "Message Direction", "Presence Of Payload", "Optional Features"): an unknown procedure is
/// answered RDMA2_ERR_INVAL_PROC, an unparsable header (bad direction, truncation, chunk-list
/// violations, an `rdma_inv_handle` not among the chunks, a direction that differs from the
/// RPC `msg_type`, a malformed `rdma_optinfo`) RDMA2_ERR_BAD_XDR, an RDMA2_OPTIONAL CALL of an
/// unknown type RDMA2_ERR_INVAL_OPTION; an RDMA2_MSG without payload, an RDMA2_ERROR sent to a
/// server and an RDMA2_OPTIONAL REPLY of an unknown type are dropped (the last is issue 13
/// §1.7's open decision: the draft's MUST names no direction; docs/conformance.md V2 rows).
fn rejects_malformed_v2_headers_each_as_the_draft_prescribes(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    let mut cases = Vec::new();
    v2_header_cases(&mut cases);
    v2_optional_and_rpc_cases(&mut cases);
    run_cases(&r, &cases);
    // A valid Version Two call after all that, on a fresh connection.
    let mut p = r.peer();
    p.send(&sum_v2(0x1ff, 1, 2));
    assert_sum_reply(&p.recv_msg("v2 call"), 0x1ff, 2, 3, "v2 call");
    r.close(p, "v2 call");
    r.honest_round(32, "after the malformed v2 headers");
    live.finish("malformed v2 headers");
    r.stop();
}

in_both_receive_modes!(
    rejects_malformed_v1_headers_each_as_rfc_8166_prescribes,
    rejects_malformed_v2_headers_each_as_the_draft_prescribes,
);
