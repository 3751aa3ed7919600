//! Hostile servers against the real `Client`, second part (issue 13 §3, client side): hostile
//! Version Two servers (wrong `rdma_direction`, foreign `rdma_inv_handle`, RDMA2_ERROR of every
//! code with bad bodies, RDMA2_OPTIONAL of unknown types, unknown procedures, a Version Two reply
//! to a call sent again in Version One, a probe dropped silently), hostile backchannel traffic
//! (RFC 8167: malformed backward calls, credit overruns, unknown programs, chunks, a client that
//! serves no backchannel, duplicate XIDs), and tiny, absent or garbage RFC 8797 private data.
//!
//! Each case asserts the outcome the specs (RFC 8166, RFC 8167, draft-cel-nfsv4-rpcrdma-version-two-02) and docs/conformance.md's
//! decisions prescribe, that every forward call completes exactly once (`Tally`), that the
//! connection survives where nothing kills it (`connection_losses`), and that the forward
//! credit grant is taken only from non-error replies (the server then sees exactly the grant
//! outstanding). Normal operation is the positive control after every hostile message.

mod api_common;
mod hostile_srv;

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use api_common::Tally;
use hostile_srv::flows::*;
use hostile_srv::*;
use rpcrdma_engine::conn::{BadReply, CallError};
use rpcrdma_engine::proto::chunks::{ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::v2::{self, Direction, RdmaError};
use rpcrdma_engine::rpc::{AcceptStat, AuthStat, RejectedReply};
use rpcrdma_engine::verbs::{QueuePair, WcStatus};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{CallbackMode, Client, ClientError, ClientOptions, ProtocolVersion};

// ---------------------------------------------------------------------------------------------
// Version Two.

/// Draft, "Message Direction": `rdma_direction` "MUST be the same" as the RPC `msg_type`.
/// An RDMA2_MSG that says CALL but carries the REPLY to an outstanding call is a backward
/// message on a client without a backchannel: dropped, nothing of it used (RFC 8167 §4.1),
/// the call still waits. One with an undefined direction (7) is dropped too. One that says
/// REPLY but carries an RPC CALL with the call's XID fails that call (`BadReply`, decision of
/// conformance V1-16 / V2: a reply that cannot be parsed fails its call); no credit value of
/// any of them is used (`rdma_credit` 1000; the grant stays 3) and the connection stays up.
#[test]
fn rejects_v2_messages_with_the_wrong_direction() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(3 + 5);
    let (tx, rx) = mpsc::channel();
    let (c, mut conn) = setup(&w, &mut srv, v2_opts(), None, 3, &tally, &tx, &rx);
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    let rpc = rpc_reply(call.xid, &1001u32.to_be_bytes());
    let e = ChunkListsRef::EMPTY;
    let call_dir = v2_full(call.xid, 1000, false, Direction::Call, 0, e, &rpc);
    let bad_dir = v2_full(call.xid, 1000, false, Direction::Unknown(7), 0, e, &rpc);
    assert_eq!(conn.send(&call_dir), WcStatus::SUCCESS);
    assert_eq!(conn.send(&bad_dir), WcStatus::SUCCESS);
    conn.expect_silence(Duration::from_millis(100));
    no_outcome(&rx, Duration::from_millis(10));
    answer(&mut conn, &call, 3);
    outcome_is(&rx, 1, None);
    start(&c, 2, 0, &tally, &tx);
    let call = conn.recv_call();
    let as_call = rpc_call(call.xid, PROG, 2, 1, &[]);
    let reply_dir = v2_full(call.xid, 1000, false, Direction::Reply, 0, e, &as_call);
    assert_eq!(conn.send(&reply_dir), WcStatus::SUCCESS);
    assert_eq!(
        bad_reply(&rx, 2),
        BadReply::HeaderV2(v2::HeaderErrorKind::DirectionMismatch { msg_type: 0 })
    );
    conn.expect_silence(Duration::from_millis(50));
    grant_is(&c, &mut conn, 3, 3, &tally, &tx, &rx);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.exactly_once();
    finish(c, conn, w, &rx);
}

/// Draft, "Remote Invalidation": the responder copies the requester's `rdma_inv_handle` into
/// the reply; a requester must not trust it. Replies naming another call's live Write-chunk
/// key, or a key never offered, invalidate nothing and are used normally: each call gets its
/// own data, the other call's window still works (written after A's reply), and the client
/// still invalidates A's window itself (a later write through it fails, `REM_ACCESS_ERR`; the
/// connection then drops and the next call completes on the new one).
#[test]
fn accepts_v2_reply_whose_inv_handle_names_a_key_not_offered() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(4);
    let (tx, rx) = mpsc::channel();
    let (c, mut conn) = setup(&w, &mut srv, v2_opts(), None, 4, &tally, &tx, &rx);
    for i in 1..3 {
        let mut a = c.args().expect("args");
        a.put_u32(i).unwrap();
        a.receptacle(c.buffer().expect("buf")).unwrap();
        let t = Arc::clone(&tally);
        let f = to_chan(i as usize, &tx);
        c.call(Proc::new(PROG, 2, 1), a, move |r| {
            t.record(i as usize, &r, 1000 + i);
            f(r)
        })
        .unwrap_or_else(|_| panic!("refused"));
    }
    let ca = conn.recv_call();
    let cb_ = conn.recv_call();
    let (wa, wb) = (ca.writes[0][0], cb_.writes[0][0]);
    let reply = |conn: &mut RawConn, call: &Call, s: Segment, inv: u32, fill: u8| {
        assert_eq!(
            conn.write(s.handle, s.offset, &[fill; 64]),
            WcStatus::SUCCESS
        );
        let seg = [Segment::new(s.handle, 64, s.offset)];
        let i = word(&call.rpc, 10);
        let rpc = rpc_reply(call.xid, &(1000 + i).to_be_bytes());
        let l = ChunkListsRef {
            reads: &[],
            writes: &[&seg],
            reply: None,
        };
        let m = v2_full(call.xid, 4, false, Direction::Reply, inv, l, &rpc);
        assert_eq!(conn.send(&m), WcStatus::SUCCESS);
    };
    reply(&mut conn, &ca, wa, wb.handle, 0xa1);
    let (j, r) = next_outcome(&rx);
    let ra = r.expect("A completes");
    assert_eq!((j, ra.receptacle(0)), (1, Some(&[0xa1; 64][..])));
    // B's window was not invalidated by A's reply.
    reply(&mut conn, &cb_, wb, 0xdead_beef, 0xb2);
    let (j, r) = next_outcome(&rx);
    let rb = r.expect("B completes");
    assert_eq!((j, rb.receptacle(0)), (2, Some(&[0xb2; 64][..])));
    let st = conn.write(wa.handle, wa.offset, &[0xee; 8]);
    assert_eq!(st, WcStatus::REM_ACCESS_ERR, "A's window after A's reply");
    assert_eq!(
        ra.receptacle(0),
        Some(&[0xa1; 64][..]),
        "A's data unchanged"
    );
    assert_eq!(
        rb.receptacle(0),
        Some(&[0xb2; 64][..]),
        "B's data unchanged"
    );
    drop((ra, rb));
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 3, 0, &tally, &tx);
    let call = conn.recv_call();
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 3, None);
    tally.all_ok_exactly_once(4, "inv handles");
    finish(c, conn, w, &rx);
}

/// Every RDMA2_ERROR code, well formed and with bad bodies, each answering one outstanding
/// call (draft, "Transport Errors"; errors are never answered): a well-formed one fails its
/// call with that error (ERR_VERS with an empty or inverted range included: no version in
/// common; CANT_REPLY with absurd index / length on a call without a size hint is reported as
/// is and sizes nothing); a malformed one (truncated body, a non-boolean `rdma_processed`, an
/// octet after the body) fails its call as an unusable reply. None changes the grant (v2
/// draft: credits come from non-error messages) and the connection stays up.
#[test]
fn rejects_v2_errors_of_every_code_with_bad_bodies() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let max = u32::MAX;
    let cases: Vec<(Vec<u32>, Option<ClientError>)> = vec![
        (
            vec![2],
            Some(ClientError::Transport(CallError::Rdma2(RdmaError::BadXdr))),
        ),
        (
            vec![4],
            Some(ClientError::Transport(CallError::Rdma2(
                RdmaError::InvalProc,
            ))),
        ),
        (
            vec![5],
            Some(ClientError::Transport(CallError::Rdma2(
                RdmaError::InvalOption,
            ))),
        ),
        (
            vec![99],
            Some(ClientError::Transport(CallError::Rdma2(
                RdmaError::Unknown(99),
            ))),
        ),
        (
            vec![1, 0, 0],
            Some(ClientError::Transport(CallError::ErrVers {
                low: 0,
                high: 0,
            })),
        ),
        (
            vec![1, 5, 3],
            Some(ClientError::Transport(CallError::ErrVers {
                low: 5,
                high: 3,
            })),
        ),
        (
            vec![1, max, 0],
            Some(ClientError::Transport(CallError::ErrVers {
                low: max,
                high: 0,
            })),
        ),
        (
            vec![3, 1, max, max],
            Some(ClientError::CantReply {
                segment: max,
                needed: max,
            }),
        ),
        (
            vec![3, 0, 0, 0],
            Some(ClientError::CantReply {
                segment: 0,
                needed: 0,
            }),
        ),
        // Malformed: truncated ERR_VERS / CANT_REPLY, bad bool, a word after the body.
        (vec![1, 1], None),
        (vec![3, 1], None),
        (vec![3, 2, 1, 1], None),
        (vec![2, 0], None),
        (vec![99, 7], None),
        (vec![], None),
    ];
    let n = cases.len();
    let tally = Tally::new(1 + n + 4);
    let (tx, rx) = mpsc::channel();
    let (c, mut conn) = setup(&w, &mut srv, v2_opts(), None, 2, &tally, &tx, &rx);
    for (k, (body, want)) in cases.into_iter().enumerate() {
        let i = 1 + k;
        start(&c, i, 0, &tally, &tx);
        let call = conn.recv_call();
        assert_eq!(call.vers, 2);
        assert_eq!(conn.send(&v2_err(call.xid, &body)), WcStatus::SUCCESS);
        match want {
            Some(e) => outcome_is(&rx, i, Some(e)),
            None => {
                let b = bad_reply(&rx, i);
                assert!(
                    matches!(
                        b,
                        BadReply::HeaderV2(
                            v2::HeaderErrorKind::ErrorBodyMalformed { .. }
                                | v2::HeaderErrorKind::PayloadAfterError { .. }
                        )
                    ),
                    "{body:?}: {b:?}"
                );
            }
        }
        // Errors are never answered.
        conn.expect_silence(Duration::from_millis(20));
    }
    // Errors for no outstanding call: dropped.
    for body in [&[2u32][..], &[1, 1, 2], &[3, 1, 9, 9]] {
        assert_eq!(conn.send(&v2_err(0x0bad_0001, body)), WcStatus::SUCCESS);
    }
    grant_is(&c, &mut conn, 1 + n, 2, &tally, &tx, &rx);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.exactly_once();
    finish(c, conn, w, &rx);
}

/// RDMA2_ERR_CANT_REPLY with absurd values for a call with a reply size hint: the call is
/// sent again once, same XID, offering its whole reply buffer (nothing sized by the
/// error's `rdma_length_needed` of 2^32 - 1); a second CANT_REPLY fails it with the values
/// reported as received; a later hinted call is answered through its retry.
#[test]
fn accepts_cant_reply_with_absurd_values_retried_once() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(3);
    let (tx, rx) = mpsc::channel();
    let (c, mut conn) = setup(&w, &mut srv, v2_opts(), None, 4, &tally, &tx, &rx);
    let max = u32::MAX;
    for i in 1..3 {
        start(&c, i, 16, &tally, &tx);
        let first = conn.recv_call();
        assert_eq!(
            conn.send(&v2_err(first.xid, &[3, 1, max, max])),
            WcStatus::SUCCESS
        );
        let again = conn.recv_call();
        assert_eq!(again.xid, first.xid, "same XID");
        let (r0, r1) = (
            first.reply.as_ref().map(|r| r[0].length),
            again.reply.as_ref().map(|r| r[0].length),
        );
        assert!(
            r1.unwrap_or(0) > r0.unwrap_or(0),
            "larger reply resources: {r0:?} {r1:?}"
        );
        if i == 1 {
            assert_eq!(
                conn.send(&v2_err(again.xid, &[3, 1, max, max])),
                WcStatus::SUCCESS
            );
            outcome_is(
                &rx,
                1,
                Some(ClientError::CantReply {
                    segment: max,
                    needed: max,
                }),
            );
        } else {
            answer(&mut conn, &again, 4);
            outcome_is(&rx, 2, None);
        }
    }
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.exactly_once();
    finish(c, conn, w, &rx);
}

/// RDMA2_OPTIONAL of unknown types and unknown Version Two procedures at a client, with and
/// without a backchannel. Decision D-1 (conformance V2-34): marked REPLY (even naming an
/// outstanding call's XID) it is dropped, not answered; marked CALL it is answered
/// RDMA2_ERR_INVAL_OPTION (plain Send, XID and version copied) by a client with a backchannel,
/// and dropped by one without (no backward receives were budgeted for it, nothing to answer
/// with). Decision D-2 (V2-35): an unknown `rdma_proc` (2, 3, 6, 2^32 - 1) is dropped without
/// an answer. An undefined `rdma_optdir` is dropped. None fails a call or changes the grant
/// (`rdma_credit` 1000 everywhere; the grant stays 2), and the connection stays up.
fn unknown_optional_and_procedures(serving: bool) {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2 + 4);
    let (tx, rx) = mpsc::channel();
    let svc = serving.then(|| bc_service(2, None));
    let (c, mut conn) = setup(&w, &mut srv, v2_opts(), svc, 2, &tally, &tx, &rx);
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    // An option of unknown type 0x7777 with four octets of `rdma_optinfo`, no payload.
    let opt = |xid: u32, dir: u32| words(&[xid, 2, 1000, 5, dir, 0x7777, 4, 0xabcd]);
    for m in [
        opt(call.xid, 1),
        opt(call.xid ^ 0x100, 9),
        words(&[call.xid, 2, 1000, 2, 1, 0, 0, 0, 0]),
        words(&[call.xid, 2, 1000, 3, 1, 0, 0, 0, 0]),
        words(&[call.xid, 2, 1000, 6]),
        words(&[call.xid, 2, 1000, u32::MAX, 0, 0]),
    ] {
        assert_eq!(conn.send(&m), WcStatus::SUCCESS);
    }
    conn.expect_silence(Duration::from_millis(100));
    let oxid = 0x0c0f_fee0;
    assert_eq!(conn.send(&opt(oxid, 0)), WcStatus::SUCCESS);
    if serving {
        let a = conn.recv_answer();
        assert_eq!(
            (a.xid, a.vers, a.proc_, a.bytes.len()),
            (oxid, 2, RDMA_ERROR, 20),
            "INVAL_OPTION: {:02x?}",
            a.bytes
        );
        assert_eq!(word(&a.bytes, 4), 5, "RDMA2_ERR_INVAL_OPTION");
    } else {
        conn.expect_silence(Duration::from_millis(100));
    }
    no_outcome(&rx, Duration::from_millis(10));
    answer(&mut conn, &call, 2);
    outcome_is(&rx, 1, None);
    grant_is(&c, &mut conn, 2, 2, &tally, &tx, &rx);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(6, "unknown options and procedures");
    finish(c, conn, w, &rx);
}

#[test]
fn accepts_unknown_optional_and_procedures_at_a_v2_client() {
    unknown_optional_and_procedures(false);
}

#[test]
fn accepts_unknown_optional_and_procedures_at_a_v2_client_with_backchannel() {
    unknown_optional_and_procedures(true);
}

/// Draft, "Protocol Version Negotiation": a probe answered ERR_VERS {1, 1} is sent again in
/// Version One with the same XID. A Version Two reply to that Version One transmission breaks
/// "A responder MUST send Replies with the same RPC-over-RDMA protocol version that the
/// requester uses to send its Calls" (the server said it speaks no Version Two, so the reply
/// cannot answer the probe either): the call fails once (`BadReply::Version`), no credit is
/// taken from it, the connection stays up in Version One and the next call completes.
#[test]
fn rejects_v2_reply_to_a_v1_call_after_fallback() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let c = w.client(&srv, v2_opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 0, 0, &tally, &tx);
    let probe = conn.recv_call();
    assert_eq!(probe.vers, 2);
    assert_eq!(conn.send(&v2_err(probe.xid, &[1, 1, 1])), WcStatus::SUCCESS);
    let again = conn.recv_call();
    assert_eq!(
        (again.vers, again.xid),
        (1, probe.xid),
        "fell back, same XID"
    );
    let rpc = rpc_reply(again.xid, &1000u32.to_be_bytes());
    assert_eq!(
        conn.send(&v2_msg(again.xid, 1000, &[], &rpc)),
        WcStatus::SUCCESS
    );
    assert_eq!(bad_reply(&rx, 0), BadReply::Version { call: 1, reply: 2 });
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    assert_eq!(call.vers, 1);
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    assert_eq!(
        c.negotiated().expect("connected").version,
        ProtocolVersion::V1
    );
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.exactly_once();
    finish(c, conn, w, &rx);
}

/// Decision D-4 (conformance V2-36): a probe a Version One server drops silently is sent
/// again in Version One, same XID, after `ClientOptions::probe_timeout_ms` (here 300 ms; no
/// call timeout), and completes once; Version One is used for the next calls and remembered
/// for the next connection (its first call is Version One, no probe).
#[test]
fn accepts_silently_dropped_probe_sent_again_in_v1() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(3);
    let (tx, rx) = mpsc::channel();
    let o = ClientOptions {
        probe_timeout_ms: 300,
        ..v2_opts()
    };
    let c = w.client(&srv, o);
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 0, 0, &tally, &tx);
    let probe = conn.recv_call();
    assert_eq!(probe.vers, 2);
    // Dropped: nothing comes back before the probe timeout.
    no_outcome(&rx, Duration::from_millis(100));
    let again = conn.recv_call();
    assert_eq!(
        (again.vers, again.xid),
        (1, probe.xid),
        "Version One, same XID"
    );
    answer(&mut conn, &again, 4);
    outcome_is(&rx, 0, None);
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    assert_eq!(call.vers, 1);
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    // The next connection starts in Version One.
    conn.qp.disconnect().ok();
    drop(conn);
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 2, 0, &tally, &tx);
    let call = conn.recv_call();
    assert_eq!(call.vers, 1, "Version One remembered");
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 2, None);
    tally.all_ok_exactly_once(3, "dropped probe");
    finish(c, conn, w, &rx);
}

/// Decision D-4, the slow Version Two server: the probe times out and is sent again in Version
/// One; the server's late Version Two reply to the probe then arrives. D-4 says it completes
/// the call (the reply answers the probe, which was Version Two), and the Version One reply
/// that follows has an unknown XID and is dropped. The call completes exactly once.
#[test]
fn accepts_late_v2_reply_to_a_probe_sent_again_in_v1() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let o = ClientOptions {
        probe_timeout_ms: 200,
        ..v2_opts()
    };
    let c = w.client(&srv, o);
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 0, 0, &tally, &tx);
    let probe = conn.recv_call();
    let again = conn.recv_call();
    assert_eq!((again.vers, again.xid), (1, probe.xid));
    answer(&mut conn, &probe, 4);
    outcome_is(&rx, 0, None);
    answer(&mut conn, &again, 4);
    no_outcome(&rx, Duration::from_millis(100));
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(2, "late v2 reply");
    finish(c, conn, w, &rx);
}

// ---------------------------------------------------------------------------------------------
// Backchannel (RFC 8167).

/// Malformed backward calls, each answered as RFC 5531 says (the client dispatches like a
/// server): RPC version 3 → MSG_DENIED RPC_MISMATCH {2, 2}; a call header cut inside the
/// credential → GARBAGE_ARGS; a credential longer than 400 octets → AUTH_ERROR AUTH_BADCRED;
/// truncated arguments → GARBAGE_ARGS. An RPC message shorter than XID + `msg_type` cannot be
/// classified and is dropped unanswered (RFC 8167 §4.1). A good backward call and forward calls
/// work after each, and the connection stays up.
#[test]
fn rejects_malformed_backward_calls() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let svc = Some(bc_service(4, None));
    let (c, mut conn) = setup(&w, &mut srv, opts(), svc, 4, &tally, &tx, &rx);
    let mut bad_vers = rpc_call(0x100, CB_PROG, 1, CB_SUM, &[0, 0, 0, 1]);
    bad_vers[8..12].copy_from_slice(&3u32.to_be_bytes());
    let cut = rpc_call(0x101, CB_PROG, 1, CB_SUM, &[])[..28].to_vec();
    let mut long_cred = words(&[0x102, 0, 2, CB_PROG, 1, CB_SUM, 1, 404]);
    long_cred.extend_from_slice(&[0; 404 + 8]);
    let short_args = rpc_call(0x103, CB_PROG, 1, CB_PAIR, &[0, 0, 0, 1]);
    let cases: [(u32, Vec<u8>, Result<AcceptStat, RejectedReply>); 4] = [
        (
            0x100,
            bad_vers,
            Err(RejectedReply::RpcMismatch { low: 2, high: 2 }),
        ),
        (0x101, cut, Ok(AcceptStat::GarbageArgs)),
        (
            0x102,
            long_cred,
            Err(RejectedReply::AuthError(AuthStat::BadCred)),
        ),
        (0x103, short_args, Ok(AcceptStat::GarbageArgs)),
    ];
    for (xid, rpc, want) in cases {
        back_send(&mut conn, xid, &rpc);
        let a = back_reply(&mut conn, xid, 4);
        assert_eq!(a.rpc_outcome(), want, "backward call {xid:#x}");
    }
    back_send(&mut conn, 0x104, &words(&[0x104]));
    conn.expect_silence(Duration::from_millis(100));
    let good = rpc_call(0x105, CB_PROG, 2, CB_PAIR, &words(&[40, 2]));
    back_send(&mut conn, 0x105, &good);
    let a = back_reply(&mut conn, 0x105, 4);
    assert_eq!(
        (a.rpc_outcome(), a.results()),
        (Ok(AcceptStat::Success), &42u32.to_be_bytes()[..])
    );
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(2, "malformed backward calls");
    finish(c, conn, w, &rx);
}

/// RFC 8167 §4.1 / RFC 8166 §3.3.1: backward credits bound what the server may have
/// outstanding; there is no requirement to signal an overrun, and "operation continues as
/// long as there are enough receive buffers". The client grants 2 and keeps 2 × 2 backward
/// slots (receives and send buffers): with its handlers held (worker mode), a server that sends
/// 6 backward calls at once gets the first 4 served and the other 2 dropped (no slot; the
/// server's retransmission rules apply), no answer for them; sent again once the replies
/// are out, they are served. Every reply grants 2. Forward calls are unaffected.
#[test]
fn rejects_backward_calls_beyond_the_granted_credits() {
    let w = HWorld::with_workers(1);
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let gate = Arc::new(Gate(Mutex::new(true), Condvar::new()));
    let o = ClientOptions {
        mode: CallbackMode::Worker,
        ..opts()
    };
    let svc = Some(bc_service(2, Some(Arc::clone(&gate))));
    let (c, mut conn) = setup(&w, &mut srv, o, svc, 4, &tally, &tx, &rx);
    // A forward call held by the server: its reply, sent after the six backward calls, is
    // processed after them (one receive queue, completions in order), so once the client
    // counts it the extra calls were seen.
    start(&c, 1, 0, &tally, &tx);
    let fwd = conn.recv_call();
    gate.set(false);
    for k in 0..6u32 {
        back_send(
            &mut conn,
            0x200 + k,
            &rpc_call(0x200 + k, CB_PROG, 1, CB_SUM, &words(&[k, 1])),
        );
    }
    answer(&mut conn, &fwd, 4);
    let end = std::time::Instant::now() + WAIT;
    while c.stats().snapshot().replies < 2 {
        assert!(
            std::time::Instant::now() < end,
            "forward reply not processed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.stats().snapshot().back_calls, 4, "two dropped");
    conn.expect_silence(Duration::from_millis(20));
    gate.set(true);
    let mut got: Vec<(u32, Vec<u8>)> = (0..4)
        .map(|_| {
            let a = conn.recv_answer();
            assert_eq!((a.vers, a.proc_, a.credits), (1, RDMA_MSG, 2), "grant 2");
            assert_eq!(a.rpc_outcome(), Ok(AcceptStat::Success));
            (a.xid, a.results().to_vec())
        })
        .collect();
    got.sort();
    let want: Vec<(u32, Vec<u8>)> = (0..4u32)
        .map(|k| (0x200 + k, (k + 1).to_be_bytes().to_vec()))
        .collect();
    assert_eq!(got, want, "the first four, each once");
    outcome_is(&rx, 1, None);
    conn.expect_silence(Duration::from_millis(100));
    assert_eq!(
        c.stats().snapshot().back_calls,
        4,
        "the two dropped were never served"
    );
    for k in 4..6u32 {
        back_send(
            &mut conn,
            0x200 + k,
            &rpc_call(0x200 + k, CB_PROG, 1, CB_SUM, &words(&[k, 1])),
        );
        let a = back_reply(&mut conn, 0x200 + k, 2);
        assert_eq!(a.results(), (k + 1).to_be_bytes());
    }
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(2, "backward credit overrun");
    finish(c, conn, w, &rx);
}

/// Backward calls to an unknown program, version or procedure are answered like a server's
/// (RFC 5531): PROG_UNAVAIL, PROG_MISMATCH {1, 2}, PROC_UNAVAIL; NULL (procedure 0) answers an
/// empty SUCCESS. Two concurrent backward calls with the same XID (RFC 8167: the server's XID
/// space; duplicates are the server's problem) are each served and answered once, with their
/// own results.
#[test]
fn rejects_backward_calls_to_unknown_programs_and_answers_duplicate_xids() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let svc = Some(bc_service(4, None));
    let (c, mut conn) = setup(&w, &mut srv, opts(), svc, 4, &tally, &tx, &rx);
    let cases = [
        (CB_PROG + 1, 1, CB_SUM, Ok(AcceptStat::ProgUnavail)),
        (
            CB_PROG,
            3,
            CB_SUM,
            Ok(AcceptStat::ProgMismatch { low: 1, high: 2 }),
        ),
        (CB_PROG, 1, 77, Ok(AcceptStat::ProcUnavail)),
        (CB_PROG, 1, 0, Ok(AcceptStat::Success)),
    ];
    for (k, (prog, vers, p, want)) in cases.into_iter().enumerate() {
        let xid = 0x300 + k as u32;
        back_send(
            &mut conn,
            xid,
            &rpc_call(xid, prog, vers, p, &words(&[1, 2])),
        );
        let a = back_reply(&mut conn, xid, 4);
        assert_eq!(a.rpc_outcome(), want, "{prog:#x} v{vers} p{p}");
        // PROG_MISMATCH carries its range (checked above); the others nothing.
        let body = if vers == 3 { 8 } else { 0 };
        assert_eq!(a.results().len(), body, "nothing after the header");
    }
    back_send(
        &mut conn,
        0x777,
        &rpc_call(0x777, CB_PROG, 1, CB_PAIR, &words(&[1, 2])),
    );
    back_send(
        &mut conn,
        0x777,
        &rpc_call(0x777, CB_PROG, 1, CB_PAIR, &words(&[10, 20])),
    );
    let mut got: Vec<u32> = (0..2)
        .map(|_| word(back_reply(&mut conn, 0x777, 4).results(), 0))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [3, 30], "each duplicate served once");
    conn.expect_silence(Duration::from_millis(50));
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(2, "unknown programs");
    finish(c, conn, w, &rx);
}

/// RFC 8167 §5.3: a client that does not support backward chunks answers a backward call
/// carrying chunks "with an RDMA_ERROR message with rdma_err field set to ERR_CHUNK" (Version
/// Two: RDMA2_ERR_BAD_XDR, its equivalent here). Covered: a Write list, a Read chunk, a
/// Reply chunk, a long call (RDMA_NOMSG with a Position Zero Read chunk). The client never
/// touches the server's memory (the keys are the server's lkey: any access would break the
/// connection), answers with XID and version copied, and keeps serving.
fn backward_chunks(version: ProtocolVersion) {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let o = ClientOptions { version, ..opts() };
    let svc = Some(bc_service(4, None));
    let (c, mut conn) = setup(&w, &mut srv, o, svc, 4, &tally, &tx, &rx);
    let v = version.number();
    let seg = [Segment::new(conn.own_lkey(), 64, 0x1000)];
    let rd = [ReadSegment::new(44, seg[0])];
    let pz = [ReadSegment::new(0, seg[0])];
    let lists = [
        (
            false,
            ChunkListsRef {
                reads: &[],
                writes: &[&seg[..]],
                reply: None,
            },
        ),
        (
            false,
            ChunkListsRef {
                reads: &rd,
                writes: &[],
                reply: None,
            },
        ),
        (
            false,
            ChunkListsRef {
                reads: &[],
                writes: &[],
                reply: Some(&seg[..]),
            },
        ),
        (
            true,
            ChunkListsRef {
                reads: &pz,
                writes: &[],
                reply: None,
            },
        ),
    ];
    for (k, (nomsg, l)) in lists.into_iter().enumerate() {
        let xid = 0x400 + k as u32;
        let rpc = if nomsg {
            Vec::new()
        } else {
            rpc_call(xid, CB_PROG, 1, CB_SUM, &words(&[1]))
        };
        let m = if v == 2 {
            v2_full(xid, 4, nomsg, Direction::Call, 0, l, &rpc)
        } else {
            v1_full(xid, 4, nomsg, l, &rpc)
        };
        assert_eq!(conn.send(&m), WcStatus::SUCCESS);
        let a = conn.recv_answer();
        assert_eq!(
            (a.xid, a.vers, a.proc_),
            (xid, v, RDMA_ERROR),
            "case {k}: {:02x?}",
            a.bytes
        );
        let code = if v == 2 { 2 } else { ERR_CHUNK };
        assert_eq!((word(&a.bytes, 4), a.bytes.len()), (code, 20), "case {k}");
    }
    let good = rpc_call(0x4ff, CB_PROG, 1, CB_PAIR, &words(&[1, 1]));
    let m = if v == 2 {
        v2_msg_dir(0x4ff, 4, Direction::Call, &[], &good)
    } else {
        v1_msg(0x4ff, 4, &[], &good)
    };
    assert_eq!(conn.send(&m), WcStatus::SUCCESS);
    let a = conn.recv_answer();
    assert_eq!(
        (a.xid, a.vers, a.proc_, a.results()),
        (0x4ff, v, RDMA_MSG, &2u32.to_be_bytes()[..])
    );
    start(&c, 1, 0, &tally, &tx);
    let call = conn.recv_call();
    answer(&mut conn, &call, 4);
    outcome_is(&rx, 1, None);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    tally.all_ok_exactly_once(2, "backward chunks");
    finish(c, conn, w, &rx);
}

#[test]
fn rejects_backward_calls_with_chunks_v1() {
    backward_chunks(ProtocolVersion::V1);
}

#[test]
fn rejects_backward_calls_with_chunks_v2() {
    backward_chunks(ProtocolVersion::V2);
}

/// A client that serves no backchannel (plain `Client::connect`): backward calls (RFC 8167 §6:
/// the server must not send them; it did) are dropped unanswered, whatever `rdma_credit` they
/// carry (1000: the forward grant stays 3); their receives are reposted, so a burst of 40
/// (more than the 16 receives, sent in batches) does not break the connection, and forward
/// calls keep completing exactly once.
#[test]
fn rejects_backward_calls_to_a_client_without_a_backchannel() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let tally = Tally::new(1 + 5);
    let (tx, rx) = mpsc::channel();
    let (c, mut conn) = setup(&w, &mut srv, opts(), None, 3, &tally, &tx, &rx);
    for batch in 0..5u32 {
        for k in 0..8u32 {
            let xid = 0x500 + batch * 8 + k;
            let rpc = rpc_call(xid, CB_PROG, 1, CB_SUM, &words(&[k]));
            assert_eq!(conn.send(&v1_msg(xid, 1000, &[], &rpc)), WcStatus::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    conn.expect_silence(Duration::from_millis(100));
    grant_is(&c, &mut conn, 1, 3, &tally, &tx, &rx);
    assert_eq!(c.stats().snapshot().connection_losses, 0);
    assert_eq!(c.stats().snapshot().back_calls, 0);
    tally.all_ok_exactly_once(6, "no backchannel");
    finish(c, conn, w, &rx);
}

// ---------------------------------------------------------------------------------------------
// RFC 8797 sizes.

/// Serves one call of `extra` argument octets, inline or long (RDMA_NOMSG with a Position Zero
/// Read chunk, read by the server); returns whether it was long.
fn serve_sized(
    conn: &mut RawConn,
    c: &Client,
    i: usize,
    extra: usize,
    t: &Arc<Tally>,
    tx: &Tx,
    rx: &Rx,
) -> bool {
    let mut a = c.args().expect("args");
    a.put_u32(i as u32).unwrap();
    a.put(&vec![0x5c; extra]).unwrap();
    let t2 = Arc::clone(t);
    let f = to_chan(i, tx);
    c.call(Proc::new(PROG, 2, 1), a, move |r| {
        t2.record(i, &r, 1000 + i as u32);
        f(r)
    })
    .unwrap_or_else(|_| panic!("refused"));
    let call = conn.recv_call();
    let long = call.nomsg;
    let rpc = if long {
        let mut d = Vec::new();
        for r in call.reads.iter().filter(|r| r.position == 0) {
            let (st, part) = conn.read(r.target.handle, r.target.offset, r.target.length as usize);
            assert_eq!(st, WcStatus::SUCCESS);
            d.extend(part);
        }
        d
    } else {
        call.rpc.clone()
    };
    assert_eq!(
        (word(&rpc, 10), rpc.len()),
        (i as u32, 44 + extra),
        "the whole call"
    );
    assert!(rpc[44..].iter().all(|&b| b == 0x5c));
    let reply = rpc_reply(call.xid, &(1000 + i as u32).to_be_bytes());
    assert_eq!(
        conn.send(&v1_msg(call.xid, 4, &[], &reply)),
        WcStatus::SUCCESS
    );
    outcome_is(rx, i, None);
    long
}

/// RFC 8797 §5.1 / PD-10: what a server advertises below 1024 octets is unrepresentable (the
/// size octet encodes (size / 1024) - 1, so 0..1023 encode as 1024); absent, garbage (no
/// identifier), truncated or other-version private data means the Version One defaults: 1024
/// octets both ways and no remote invalidation. Against each such server (posting 1024-octet
/// receives), the client sends a 900-octet call inline and a 2000-octet one as a long call,
/// and never overruns the server's receives.
#[test]
fn accepts_tiny_absent_and_garbage_private_data_as_1024() {
    assert_eq!(
        pdata(true, 100, 1),
        pdata(true, 1024, 1024),
        "unrepresentable sizes"
    );
    let w = HWorld::new();
    let mut srv = w.listen();
    let mut other_version = pdata(true, 8192, 8192).to_vec();
    other_version[4] = 2;
    let cases: Vec<(Vec<u8>, bool)> = vec![
        (pdata(true, 100, 0).to_vec(), true),
        (Vec::new(), false),
        (vec![0x5a; 24], false),
        (pdata(true, 8192, 8192)[..6].to_vec(), false),
        (other_version, false),
    ];
    let n = cases.len();
    let tally = Tally::new(2 * n);
    let (tx, rx) = mpsc::channel();
    let c = w.client(&srv, opts());
    for (k, (pd, r)) in cases.into_iter().enumerate() {
        let mut conn = srv.accept(&pd, 1024);
        assert!(c.wait_connected(WAIT));
        let neg = c.negotiated().expect("negotiated");
        assert_eq!(
            (neg.send_inline, neg.recv_inline),
            (1024, 1024),
            "case {k}: {neg:?}"
        );
        assert_eq!(neg.remote_invalidate, r, "case {k}");
        assert_eq!(neg.peer_private_data.is_some(), r, "case {k}");
        assert!(
            !serve_sized(&mut conn, &c, 2 * k, 900, &tally, &tx, &rx),
            "inline"
        );
        assert!(
            serve_sized(&mut conn, &c, 2 * k + 1, 2000, &tally, &tx, &rx),
            "long"
        );
        assert_eq!(c.stats().snapshot().connection_losses, k as u64);
        conn.qp.disconnect().ok();
        drop(conn);
    }
    tally.all_ok_exactly_once(2 * n, "tiny sizes");
    c.close();
    w.stop();
}
