//! RPC-over-RDMA Version One header validation: one `rejects_*` test per rule of RFC 8166 and
//! the implementation-experience draft, named after the response the spec requires.

mod v1_vectors;
use v1_vectors::*;

// ---------------------------------------------------------------------------------------------
// Validation rules, each with the response the spec requires.

#[test]
fn rejects_short_header_with_drop() {
    let e = err_of(&DONE[..15]);
    assert_eq!(e.kind, HeaderErrorKind::ShortHeader { len: 15 });
    assert_eq!(e.xid, Some(0xcafe_0007));
    assert_eq!(e.response(), Response::Drop);
    assert_eq!(err_of(&[]).response(), Response::Drop);
    assert_eq!(err_of(&[]).xid, None);
}

#[test]
fn rejects_unknown_version_with_err_vers() {
    // Version 7 and a garbage procedure: the version is judged first, the XID is kept.
    let buf = [
        0x00, 0x00, 0x01, 0x23, // rdma_xid = 0x123
        0x00, 0x00, 0x00, 0x07, // rdma_vers = 7
        0x00, 0x00, 0x00, 0x05, // rdma_credit = 5
        0xff, 0xff, 0xff, 0xff, // rdma_proc = garbage
    ];
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::BadVersion { vers: 7 });
    let resp = e.response();
    assert_eq!(
        resp,
        Response::ErrVers {
            xid: 0x123,
            vers: 7
        }
    );
    let mut out = [0u8; 32];
    let n = resp.encode(64, 1, 2, &mut out).unwrap();
    let want = [
        0x00, 0x00, 0x01, 0x23, // rdma_xid = 0x123 (copied)
        0x00, 0x00, 0x00, 0x07, // rdma_vers = 7 (copied)
        0x00, 0x00, 0x00, 0x40, // rdma_credit = 64
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x01, // rdma_err = ERR_VERS
        0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
        0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
    ];
    assert_eq!(&out[..n], &want);
}

#[test]
fn rejects_error_of_unknown_version_with_drop() {
    // An ERR_VERS from a peer that writes its own version: recognised, never answered, and its
    // range is still readable (RFC 8166 §7 fixes that layout).
    let buf = [
        0x00, 0x00, 0x01, 0x24, // rdma_xid = 0x124
        0x00, 0x00, 0x00, 0x03, // rdma_vers = 3
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x01, // rdma_err = ERR_VERS
        0x00, 0x00, 0x00, 0x03, // rdma_vers_low = 3
        0x00, 0x00, 0x00, 0x04, // rdma_vers_high = 4
    ];
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::ForeignError {
            vers: 3,
            vers_range: Some((3, 4))
        }
    );
    assert_eq!(e.response(), Response::Drop);
    // Any other error of an unknown version, or a cut ERR_VERS: no range, still dropped.
    let e = err_of(&buf[..24]);
    assert_eq!(
        e.kind,
        HeaderErrorKind::ForeignError {
            vers: 3,
            vers_range: None
        }
    );
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_unknown_proc_with_err_chunk() {
    let mut buf = DONE.to_vec();
    buf[15] = 7; // rdma_proc = 7
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::UnknownProc { value: 7 });
    let resp = e.response();
    assert_eq!(
        resp,
        Response::ErrChunk {
            xid: 0xcafe_0007,
            vers: 1
        }
    );
    let mut out = [0u8; 20];
    let n = resp.encode(32, 1, 2, &mut out).unwrap();
    let want = [
        0xca, 0xfe, 0x00, 0x07, // rdma_xid (copied)
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x02, // rdma_err = ERR_CHUNK
    ];
    assert_eq!(&out[..n], &want);
}

fn assert_chunk_error(buf: &[u8], limits: &ChunkLimits, want: ChunkError) {
    let e = err_with(buf, limits);
    assert_eq!(e.kind, HeaderErrorKind::Chunk(want));
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_truncated_chunk_list_with_err_chunk() {
    // Cut inside the second read segment.
    assert_chunk_error(
        &MSG_READ_MID[..50],
        &ChunkLimits::DEFAULT,
        ChunkError::Truncated { at: 44, needed: 20 },
    );
}

#[test]
fn rejects_bad_discriminant_with_err_chunk() {
    let mut buf = MSG_INLINE.to_vec();
    buf[23] = 2; // rdma_writes discriminant = 2
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::BadDiscriminant { at: 20, value: 2 },
    );
}

#[test]
fn rejects_too_many_read_segments_with_err_chunk() {
    let limits = ChunkLimits {
        max_read_segments: 1,
        ..ChunkLimits::DEFAULT
    };
    // The second entry's discriminant (offset 40) is refused before the entry is read.
    assert_chunk_error(
        MSG_READ_MID,
        &limits,
        ChunkError::TooManyReadSegments { at: 40, max: 1 },
    );
}

#[test]
fn rejects_too_many_write_chunks_with_err_chunk() {
    let limits = ChunkLimits {
        max_write_chunks: 1,
        ..ChunkLimits::DEFAULT
    };
    assert_chunk_error(
        MSG_WRITES,
        &limits,
        ChunkError::TooManyWriteChunks { at: 76, max: 1 },
    );
}

#[test]
fn rejects_write_segment_count_over_limit_before_sizing() {
    // A count of 0xffffffff with nothing after it: refused on the count word, not as truncation.
    let buf = [
        0xca, 0xfe, 0x00, 0x0c, // rdma_xid
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG
        0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
        0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
        0xff, 0xff, 0xff, 0xff, //   rdma_target<>: 4294967295 segments
    ];
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::TooManyWriteSegments {
            at: 24,
            count: u32::MAX,
            max: 16,
        },
    );
}

#[test]
fn rejects_reply_segment_count_over_limit_with_err_chunk() {
    let limits = ChunkLimits {
        max_reply_segments: 2,
        ..ChunkLimits::DEFAULT
    };
    assert_chunk_error(
        NOMSG_REPLY_CHUNK,
        &limits,
        ChunkError::TooManyReplySegments {
            at: 28,
            count: 3,
            max: 2,
        },
    );
}

#[test]
fn rejects_misaligned_read_position_with_err_chunk() {
    let mut buf = MSG_READ_MID.to_vec();
    buf[23] = 0x7a; // first rdma_position = 122
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::MisalignedPosition {
            at: 20,
            position: 122,
        },
    );
}

#[test]
fn rejects_read_positions_out_of_order_with_err_chunk() {
    let mut buf = MSG_READ_MID.to_vec();
    buf[47] = 0x74; // second rdma_position = 116 < 120
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::PositionOutOfOrder {
            at: 44,
            position: 116,
            previous: 120,
        },
    );
}

#[test]
fn rejects_overlapping_read_chunks_with_err_chunk() {
    // Chunk at 120 of 4096 octets, then a chunk at 124: it starts inside the first.
    let mut buf = MSG_READ_MID.to_vec();
    buf[47] = 0x7c; // second rdma_position = 124
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::ReadChunkOverlap {
            at: 44,
            position: 124,
            previous_end: 120 + 4096,
        },
    );
}

#[test]
fn rejects_segment_offset_overflow_with_err_chunk() {
    let mut buf = MSG_WRITES.to_vec();
    // Third segment of the first Write chunk: offset 0xffff_ffff_ffff_fffd, length 4.
    buf[68..76].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd]);
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::SegmentOverflow { at: 60 },
    );
}

#[test]
fn rejects_chunk_length_sum_overflow_with_err_chunk() {
    let mut buf = MSG_WRITES.to_vec();
    // First two segments of the first Write chunk: lengths 0x8000_0000 each.
    buf[32..36].copy_from_slice(&[0x80, 0x00, 0x00, 0x00]);
    buf[48..52].copy_from_slice(&[0x80, 0x00, 0x00, 0x00]);
    assert_chunk_error(
        &buf,
        &ChunkLimits::DEFAULT,
        ChunkError::ChunkLengthOverflow { at: 44 },
    );
}

#[test]
fn rejects_position_zero_read_chunk_in_msg_with_err_chunk() {
    let mut buf = NOMSG_P0.to_vec();
    buf[15] = 0; // rdma_proc = RDMA_MSG
    buf.extend_from_slice(&[0xca, 0xfe, 0x00, 0x03]); // RPC xid
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::PositionZeroInMsg { at: 16 });
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_nomsg_without_any_chunk_with_err_chunk() {
    let mut buf = MSG_INLINE[..28].to_vec();
    buf[15] = 1; // rdma_proc = RDMA_NOMSG, all lists empty (RFC 8166 §4.4.2 example)
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::NomsgWithoutChunk);
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_nomsg_with_only_write_list_with_err_chunk() {
    let mut buf = MSG_WRITES[..124].to_vec();
    buf[15] = 1; // rdma_proc = RDMA_NOMSG: the RPC message is nowhere
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::NomsgWithoutChunk);
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_msg_without_payload_with_drop() {
    // RFC 8167 §5.3: a message too small to convey a complete RPC message is discarded
    // silently, none of its fields used.
    let e = err_of(&MSG_INLINE[..30]);
    assert_eq!(e.kind, HeaderErrorKind::MissingPayload { len: 2 });
    assert_eq!(e.response(), Response::Drop);
    // An XID without a msg_type is too small as well.
    let e = err_of(&MSG_INLINE[..32]);
    assert_eq!(e.kind, HeaderErrorKind::MissingPayload { len: 4 });
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_xid_mismatch_with_err_chunk() {
    let mut buf = MSG_INLINE.to_vec();
    buf[31] = 0x02; // RPC xid = 0xcafe0002
    let e = err_of(&buf);
    assert_eq!(
        e.kind,
        HeaderErrorKind::XidMismatch {
            rpc_xid: 0xcafe_0002
        }
    );
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_truncated_msgp_with_err_chunk() {
    let e = err_of(&MSGP[..20]);
    assert_eq!(e.kind, HeaderErrorKind::Truncated { at: 16, needed: 8 });
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_msgp_chunk_rules_like_msg() {
    // RDMA_MSGP is validated as RDMA_MSG: a Position Zero Read chunk is refused.
    let buf = [
        0xca, 0xfe, 0x00, 0x0d, // rdma_xid
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x02, // rdma_proc = RDMA_MSGP
        0x00, 0x00, 0x10, 0x00, // rdma_align = 4096
        0x00, 0x00, 0x04, 0x00, // rdma_thresh = 1024
        0x00, 0x00, 0x00, 0x01, // rdma_reads: entry follows
        0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
        0x00, 0x00, 0x00, 0x01, //   rdma_handle = 1
        0x00, 0x00, 0x00, 0x08, //   rdma_length = 8
        0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
        0x00, 0x00, 0x00, 0x00, //   rdma_offset (low word)
        0x00, 0x00, 0x00, 0x00, // rdma_next: end
        0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
        0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
        0xca, 0xfe, 0x00, 0x0d, // RPC xid
    ];
    let e = err_of(&buf);
    assert_eq!(e.kind, HeaderErrorKind::PositionZeroInMsg { at: 24 });
    assert!(matches!(e.response(), Response::ErrChunk { .. }));
}

#[test]
fn rejects_truncated_error_body_with_drop() {
    let e = err_of(&ERR_VERS[..24]);
    assert_eq!(
        e.kind,
        HeaderErrorKind::ErrorBodyTruncated { at: 20, needed: 8 }
    );
    assert_eq!(e.response(), Response::Drop);
    let e = err_of(&ERR_CHUNK[..16]);
    assert_eq!(
        e.kind,
        HeaderErrorKind::ErrorBodyTruncated { at: 16, needed: 4 }
    );
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_nomsg_call_without_position_zero_with_err_chunk() {
    // Valid as a reply, not as a call.
    let h = dec(NOMSG_REPLY_CHUNK);
    let e = h.check_call().unwrap_err();
    assert_eq!(e.kind, HeaderErrorKind::NomsgCallWithoutPositionZero);
    assert_eq!(
        e.response(),
        Response::ErrChunk {
            xid: 0xcafe_0005,
            vers: 1
        }
    );
}

#[test]
fn rejects_nomsg_reply_without_reply_chunk_with_drop() {
    let e = dec(NOMSG_P0).check_reply().unwrap_err();
    // NOMSG_P0 also carries a Read list, which a reply never does: that rule fires first.
    assert_eq!(e.kind, HeaderErrorKind::ReadListInReply);
    assert_eq!(e.response(), Response::Drop);

    let buf = [
        0xca, 0xfe, 0x00, 0x0e, // rdma_xid
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA_NOMSG
        0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
        0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
        0x00, 0x00, 0x00, 0x00, //   rdma_target<>: 0 segments
        0x00, 0x00, 0x00, 0x00, // rdma_next: end
        0x00, 0x00, 0x00, 0x01, // rdma_reply: present
        0x00, 0x00, 0x00, 0x00, //   rdma_target<>: 0 segments
    ];
    // Accepted by decode (a Reply chunk is present) and as a reply.
    assert_eq!(dec(&buf).check_reply(), Ok(()));
    // Without the Reply chunk decode itself refuses it (no place for the message).
    let mut no_reply = buf[..36].to_vec();
    no_reply[35] = 0;
    assert_eq!(err_of(&no_reply).kind, HeaderErrorKind::NomsgWithoutChunk);
}

#[test]
fn rejects_read_list_in_reply_with_drop() {
    let e = dec(MSG_READ_MID).check_reply().unwrap_err();
    assert_eq!(e.kind, HeaderErrorKind::ReadListInReply);
    assert_eq!(e.response(), Response::Drop);
}

#[test]
fn rejects_encode_into_small_buffer_without_writing() {
    let mut out = [0xaau8; 27];
    let msg = Message {
        xid: 1,
        credits: 1,
        body: MessageBody::Msg(ChunkListsRef::EMPTY),
    };
    assert_eq!(v1::encoded_len(&msg), 28);
    assert_eq!(
        v1::encode(&msg, &mut out),
        Err(XdrError::NoSpace {
            needed: 28,
            capacity: 27
        })
    );
    assert!(out.iter().all(|&b| b == 0xaa));
    let mut out = [0u8; 27];
    assert!(v1::encode_err_vers(1, 1, 1, 1, 1, &mut out).is_err());
}
