//! RPC-over-RDMA Version Two header validation: one `rejects_*` test per rule of
//! draft-cel-nfsv4-rpcrdma-version-two-02, named after the response its "Transport Errors"
//! section requires.

mod v2_vectors;
use v2_vectors::*;

// ---------------------------------------------------------------------------------------------
// Validation rules, each with the response the draft requires.

fn bad_xdr(xid: u32) -> Response {
    Response::Error {
        xid,
        vers: 2,
        code: ErrCode::BadXdr,
    }
}

#[test]
fn rejects_short_header_with_drop() {
    let e = err_of(&MSG_CALL_INLINE[..12]);
    assert_eq!(e.kind, HeaderErrorKind::ShortHeader { len: 12 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_unknown_version_with_err_vers() {
    // A Version One header given to the Version Two decoder.
    let buf = [
        0x00, 0x00, 0x0a, 0xbc, // rdma_xid = 0xabc
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x00, // rdma_proc = 0
    ];
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::BadVersion { vers: 1 });
    let r = e.response();
    assert_eq!(
        r,
        Response::Error {
            xid: 0xabc,
            vers: 1,
            code: ErrCode::Vers
        }
    );
    let want = [
        0x00, 0x00, 0x0a, 0xbc, // rdma_xid (copied)
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1 (copied)
        0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
        0x00, 0x00, 0x00, 0x01, // rdma_err = RDMA2_ERR_VERS
        0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
        0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
    ];
    assert_eq!(response_bytes(r, 16), want);
}

#[test]
fn rejects_error_of_unknown_version_with_drop() {
    // A Version One ERR_CHUNK reaching the Version Two decoder: an error, so never answered.
    let buf = [
        0x00, 0x00, 0x0a, 0xbd, // rdma_xid = 0xabd
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x02, // rdma_err = ERR_CHUNK
    ];
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::ForeignError {
            vers: 1,
            vers_range: None
        }
    );
    assert_eq!(e.response(), Response::Drop);
    // A Version One ERR_VERS: its range is readable.
    let buf = [
        0x00, 0x00, 0x0a, 0xbe, // rdma_xid = 0xabe
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x01, // rdma_err = ERR_VERS
        0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
        0x00, 0x00, 0x00, 0x01, // rdma_vers_high = 1
    ];
    assert_eq!(
        err_of(&buf).kind,
        HeaderErrorKind::ForeignError {
            vers: 1,
            vers_range: Some((1, 1))
        }
    );
}

#[test]
fn rejects_unknown_proc_with_inval_proc() {
    for p in [2u8, 3, 6, 0xff] {
        let mut buf = MSG_CALL_INLINE.to_vec();
        buf[15] = p;
        let e = err_of(&buf);
        assert_eq!(e.kind, HeaderErrorKind::UnknownProc { value: p.into() });
        assert_eq!(
            e.response(),
            Response::Error {
                xid: 0xbeef_0001,
                vers: 2,
                code: ErrCode::InvalProc
            }
        );
    }
    let mut buf = MSG_CALL_INLINE.to_vec();
    buf[15] = 3;
    let want = [
        0xbe, 0xef, 0x00, 0x01, // rdma_xid (copied)
        0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
        0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
        0x00, 0x00, 0x00, 0x04, // rdma_err = RDMA2_ERR_INVAL_PROC
    ];
    assert_eq!(response_bytes(err_of(&buf).response(), 8), want);
}

#[test]
fn rejects_bad_direction_with_bad_xdr() {
    let mut buf = MSG_CALL_INLINE.to_vec();
    buf[19] = 2; // rdma_direction = 2
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::BadDirection { at: 16, value: 2 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0001));
    let want = [
        0xbe, 0xef, 0x00, 0x01, // rdma_xid (copied)
        0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
        0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
        0x00, 0x00, 0x00, 0x02, // rdma_err = RDMA2_ERR_BAD_XDR
    ];
    assert_eq!(response_bytes(e.response(), 8), want);
}

#[test]
fn rejects_truncated_body_with_bad_xdr() {
    let e = err_of(&MSG_CALL_INLINE[..16]);
    assert_eq!(e.kind, HeaderErrorKind::Truncated { at: 16, needed: 4 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0001));
    let e = err_of(&MSG_CALL_INLINE[..20]);
    assert_eq!(e.kind, HeaderErrorKind::Truncated { at: 20, needed: 4 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0001));
}

#[test]
fn rejects_chunk_errors_in_calls_with_bad_xdr() {
    let mut buf = MSG_CALL_READ.to_vec();
    buf[31] = 0x6e; // rdma_position = 110
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::Chunk(ChunkError::MisalignedPosition {
            at: 28,
            position: 110
        })
    );
    assert_eq!(e.response(), bad_xdr(0xbeef_0002));

    let limits = Limits {
        chunks: ChunkLimits {
            max_reply_segments: 0,
            ..ChunkLimits::DEFAULT
        },
        ..Limits::DEFAULT
    };
    let e = err_with(MSG_CALL_READ, &limits);
    assert_eq!(
        e.kind,
        HeaderErrorKind::Chunk(ChunkError::TooManyReplySegments {
            at: 60,
            count: 1,
            max: 0
        })
    );
    assert_eq!(e.response(), bad_xdr(0xbeef_0002));
}

#[test]
fn rejects_chunk_errors_in_replies_with_drop() {
    let limits = Limits {
        chunks: ChunkLimits {
            max_write_segments: 1,
            ..ChunkLimits::DEFAULT
        },
        ..Limits::DEFAULT
    };
    let e = err_with(MSG_REPLY_WRITES, &limits);
    assert_eq!(
        e.kind,
        HeaderErrorKind::Chunk(ChunkError::TooManyWriteSegments {
            at: 32,
            count: 2,
            max: 1
        })
    );
    assert_eq!(e.direction, Some(Direction::Reply));
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_position_zero_in_msg_with_bad_xdr() {
    let mut buf = NOMSG_CALL_P0.to_vec();
    buf[15] = 0; // rdma_proc = RDMA2_MSG
    buf.extend_from_slice(&[0xbe, 0xef, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00]);
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::PositionZeroInMsg { at: 24 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0004));
}

#[test]
fn rejects_nomsg_call_without_position_zero_with_bad_xdr() {
    let mut buf = NOMSG_REPLY.to_vec();
    buf[19] = 0; // rdma_direction = CALL (Reply chunk only)
    buf[20..24].copy_from_slice(&[0, 0, 0, 0]); // rdma_inv_handle = 0
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::NomsgCallWithoutPositionZero);
    assert_eq!(e.response(), bad_xdr(0xbeef_0005));
}

#[test]
fn rejects_nomsg_reply_without_reply_chunk_with_drop() {
    let buf = [
        0xbe, 0xef, 0x00, 0x06, // rdma_xid
        0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA2_NOMSG
        0x00, 0x00, 0x00, 0x01, // rdma_direction = REPLY
        0x00, 0x00, 0x00, 0x00, // rdma_inv_handle = 0
        0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
        0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
        0x00, 0x00, 0x00, 0x00, //   rdma_target<>: 0 segments
        0x00, 0x00, 0x00, 0x00, // rdma_next: end
        0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    ];
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::NomsgReplyWithoutReplyChunk);
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_read_list_in_reply_with_drop() {
    let mut buf = NOMSG_CALL_P0.to_vec();
    buf[19] = 1; // rdma_direction = REPLY
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::ReadListInReply);
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_inv_handle_outside_call_chunks_with_bad_xdr() {
    let mut buf = MSG_CALL_READ.to_vec();
    buf[20..24].copy_from_slice(&[0x00, 0x00, 0x50, 0x02]); // rdma_inv_handle = 0x5002
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::InvHandleNotInChunks { handle: 0x5002 }
    );
    assert_eq!(e.response(), bad_xdr(0xbeef_0002));
    // Same with no chunks at all.
    let mut buf = MSG_CALL_INLINE.to_vec();
    buf[23] = 1;
    assert_eq!(
        err_of(&buf).kind,
        HeaderErrorKind::InvHandleNotInChunks { handle: 1 }
    );
}

#[test]
fn rejects_msg_without_payload_with_drop() {
    // RFC 8167 §5.3: a message too small to convey a complete RPC message is discarded
    // silently, none of its fields used.
    let e = err_of(&MSG_CALL_INLINE[..40]);
    assert_eq!(e.kind, HeaderErrorKind::MissingPayload { len: 4 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_xid_mismatch_with_bad_xdr() {
    let mut buf = MSG_CALL_INLINE.to_vec();
    buf[36] = 0; // RPC xid = 0x00ef0001
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::XidMismatch {
            rpc_xid: 0x00ef_0001
        }
    );
    assert_eq!(e.response(), bad_xdr(0xbeef_0001));
}

#[test]
fn rejects_direction_mismatch_with_bad_xdr() {
    let mut buf = MSG_CALL_INLINE.to_vec();
    buf[43] = 1; // RPC msg_type = REPLY, rdma_direction = CALL
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::DirectionMismatch { msg_type: 1 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0001));
}

#[test]
fn rejects_optinfo_over_limit_with_bad_xdr() {
    let limits = Limits {
        max_optinfo: 4,
        ..Limits::DEFAULT
    };
    let e = err_with(OPTIONAL_CALL, &limits);
    assert_eq!(e.kind, HeaderErrorKind::OptInfoTooLong { len: 5, max: 4 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0020));
    // A huge length word is refused on the word, before any sizing.
    let mut buf = OPTIONAL_CALL[..28].to_vec();
    buf[24..28].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        err_of(&buf).kind,
        HeaderErrorKind::OptInfoTooLong {
            len: u32::MAX,
            max: 4096
        }
    );
}

#[test]
fn rejects_truncated_optinfo_with_bad_xdr() {
    let e = err_of(&OPTIONAL_CALL[..32]);
    assert_eq!(e.kind, HeaderErrorKind::Truncated { at: 28, needed: 8 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0020));
}

#[test]
fn rejects_nonzero_optinfo_pad_with_bad_xdr() {
    let mut buf = OPTIONAL_CALL.to_vec();
    buf[34] = 0x01; // second pad octet after "o"
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::NonZeroPad { at: 33 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0020));
}

#[test]
fn rejects_bad_optdir_with_bad_xdr() {
    let mut buf = OPTIONAL_CALL.to_vec();
    buf[19] = 9;
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::BadDirection { at: 16, value: 9 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0020));
}

#[test]
fn rejects_malformed_optional_reply_with_drop() {
    let limits = Limits {
        max_optinfo: 0,
        ..Limits::DEFAULT
    };
    let mut buf = OPTIONAL_CALL.to_vec();
    buf[19] = 1; // rdma_optdir = REPLY
    let e = err_with(&buf, &limits);
    assert_eq!(e.kind, HeaderErrorKind::OptInfoTooLong { len: 5, max: 0 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_malformed_error_body_with_drop() {
    let mut buf = ERR_CANT_REPLY.to_vec();
    buf[23] = 2; // rdma_processed = 2, not a bool
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::ErrorBodyMalformed { at: 20 });
    assert_eq!(e.response(), Response::Drop);
    let e = err_of(&ERR_VERS[..24]);
    assert_eq!(e.kind, HeaderErrorKind::ErrorBodyMalformed { at: 20 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_payload_after_error_with_drop() {
    // "When the rdma_proc field has the value RDMA2_ERROR, an RPC Payload Stream MUST NOT
    // follow the Transport Header Stream" (Presence Of Payload).
    for golden in [
        ERR_VERS,
        ERR_BAD_XDR,
        ERR_CANT_REPLY,
        ERR_INVAL_PROC,
        ERR_INVAL_OPTION,
    ] {
        let mut buf = golden.to_vec();
        buf.extend_from_slice(&[0, 0, 0, 0]);
        let e = err_of(&buf);
        assert_eq!(e.kind, HeaderErrorKind::PayloadAfterError { len: 4 });
        assert_eq!(e.response(), Response::Drop);
        assert!(v2::decode(golden, &Limits::DEFAULT).is_ok());
    }
}

#[test]
fn rejects_optional_call_carrying_a_reply_with_bad_xdr() {
    // rdma_optdir = CALL, but the payload is the start of an RPC REPLY with the same XID.
    let mut buf = OPTIONAL_CALL.to_vec();
    buf.extend_from_slice(&[0xbe, 0xef, 0x00, 0x20, 0, 0, 0, 1]);
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::OptDirMismatch { msg_type: 1 });
    assert_eq!(e.response(), bad_xdr(0xbeef_0020));
    // The same payload marked REPLY is accepted.
    let last = buf.len() - 1;
    buf[last] = 0;
    assert!(v2::decode(&buf, &Limits::DEFAULT).is_ok());
}

#[test]
fn rejects_optional_reply_carrying_a_call_with_drop() {
    let mut buf = OPTIONAL_REPLY.to_vec();
    buf.extend_from_slice(&[0, 0, 0, 0]); // msg_type CALL after the RPC xid
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::OptDirMismatch { msg_type: 0 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn accepts_optional_payload_that_does_not_start_an_rpc_message() {
    // A part of a payload that is not the start of an RPC message (its first word is not the
    // XID) cannot be checked against rdma_optdir and is accepted.
    let mut buf = OPTIONAL_CALL.to_vec();
    buf.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1]);
    assert!(v2::decode(&buf, &Limits::DEFAULT).is_ok());
}
