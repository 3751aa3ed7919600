//! Golden vectors derived by hand, word by word, from the RPC-over-RDMA Version One XDR (RFC 8166
//! section 4.3; `rpcrdma1_msg` in Appendix A of the implementation-experience draft) and from the
//! RFC 8797 private data layout. None of these octets came from this crate's encoders: each
//! vector is decoded and checked field by field, then the encoder must reproduce it exactly.
//!
//! Encoding key (implementation-experience §3.2, H L OO = handle, length, 64-bit offset):
//! - Read list: `1 P H L OO 1 P H L OO ... 0`
//! - Write list: `1 N H L OO ... (N times) 1 N ... 0`
//! - Reply chunk: `1 N H L OO ...` or `0`

use rpcrdma_engine::proto::chunks::{ChunkLimits, ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::private_data::{self, PrivateData};
use rpcrdma_engine::proto::v1::{self, Body, Message, MessageBody, Proc, RdmaError, Response};

/// Big-endian octets of 32-bit XDR words (a hyper is written as its two words, high first).
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn encode(msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 1024];
    let n = v1::encode(msg, &mut out).expect("encodes");
    assert_eq!(n, v1::encoded_len(msg), "encoded_len agrees with encode");
    out.truncate(n);
    out
}

/// RDMA_MSG call with three Read chunks at three positions: a two-segment chunk at 108 (40 + 24
/// octets), a five-octet chunk at 176 (its pad is not transferred: the next chunk starts at
/// 184), and an eight-octet chunk at 184. Offsets use both halves of the hyper.
#[test]
fn accepts_msg_with_read_chunks_at_three_positions() {
    #[rustfmt::skip]
    let v = words(&[
        0x0a0b_0c0d, // rdma_xid
        1, // rdma_vers
        32, // rdma_credit
        0, // RDMA_MSG
        1, 108, 0x11, 40, 0x0000_7f12, 0x3456_7000, // read segment: P H L OO
        1, 108, 0x12, 24, 0x0000_0000, 0x0000_1000, // same position: same chunk
        1, 176, 0x13, 5, 0x0000_0001, 0x0000_0000, // second chunk
        1, 184, 0x14, 8, 0xffff_ffff, 0xffff_fff0, // third chunk, offset near 2^64
        0, // end of Read list
        0, // Write list: empty
        0, // Reply chunk: absent
        0x0a0b_0c0d, 0, 2, // RPC call: xid, CALL, rpcvers
    ]);
    let h = v1::decode(&v, &ChunkLimits::DEFAULT).expect("valid");
    assert_eq!((h.xid, h.vers, h.credits), (0x0a0b_0c0d, 1, 32));
    assert_eq!(h.proc(), Proc::Msg);
    assert_eq!(h.header_len, 16 + 4 * 24 + 12);
    assert_eq!(h.payload, &v[h.header_len..]);
    let c = h.chunks().unwrap();
    assert_eq!(c.reads.len(), 4);
    assert_eq!(c.reads.chunk_count(), 3);
    let chunks: Vec<(u32, usize, u32)> = c
        .reads
        .chunks()
        .map(|k| (k.position, k.len(), k.length()))
        .collect();
    assert_eq!(chunks, [(108, 2, 64), (176, 1, 5), (184, 1, 8)]);
    assert!(!c.reads.has_position_zero());
    assert_eq!(
        c.reads.get(0).unwrap().target,
        Segment::new(0x11, 40, 0x0000_7f12_3456_7000)
    );
    assert_eq!(
        c.reads.get(3).unwrap().target,
        Segment::new(0x14, 8, 0xffff_ffff_ffff_fff0)
    );
    assert!(c.writes.is_empty() && c.reply.is_none());
    h.check_call().expect("a valid call");

    let reads = [
        ReadSegment::new(108, Segment::new(0x11, 40, 0x0000_7f12_3456_7000)),
        ReadSegment::new(108, Segment::new(0x12, 24, 0x1000)),
        ReadSegment::new(176, Segment::new(0x13, 5, 0x1_0000_0000)),
        ReadSegment::new(184, Segment::new(0x14, 8, 0xffff_ffff_ffff_fff0)),
    ];
    let msg = Message {
        xid: 0x0a0b_0c0d,
        credits: 32,
        body: MessageBody::Msg(ChunkListsRef {
            reads: &reads,
            ..ChunkListsRef::EMPTY
        }),
    };
    assert_eq!(encode(&msg), &v[..h.header_len]);
}

/// RDMA_MSG call offering a Write list of three chunks (two, three and one segments) and a
/// Reply chunk of two segments.
#[test]
fn accepts_msg_with_three_write_chunks_and_reply_chunk() {
    #[rustfmt::skip]
    let v = words(&[
        0x0000_0042, 1, 128, 0, // xid, vers, credit, RDMA_MSG
        0, // Read list: empty
        1, 2, // Write chunk 1: two segments
        0x21, 4096, 0, 0x10_0000, //
        0x22, 4096, 0, 0x20_0000, //
        1, 3, // Write chunk 2: three segments
        0x23, 512, 0x1, 0x0, //
        0x24, 512, 0x1, 0x200, //
        0x25, 3, 0x1, 0x400, //
        1, 1, // Write chunk 3: one segment
        0x26, 65536, 0x2, 0x0, //
        0, // end of Write list
        1, 2, // Reply chunk: two segments
        0x27, 1024, 0x3, 0x0, //
        0x28, 1024, 0x3, 0x400, //
        0x42, 0, // RPC: xid, CALL
    ]);
    let h = v1::decode(&v, &ChunkLimits::DEFAULT).expect("valid");
    assert_eq!((h.xid, h.credits, h.header_len), (0x42, 128, v.len() - 8));
    let c = h.chunks().unwrap();
    assert!(c.reads.is_empty());
    assert_eq!(c.writes.len(), 3);
    let shape: Vec<(usize, u32)> = c
        .writes
        .iter()
        .map(|w| (w.len(), w.total_length()))
        .collect();
    assert_eq!(shape, [(2, 8192), (3, 1027), (1, 65536)]);
    assert_eq!(
        c.writes.get(1).unwrap().get(2),
        Some(Segment::new(0x25, 3, 0x1_0000_0400))
    );
    let reply = c.reply.unwrap();
    assert_eq!((reply.len(), reply.total_length()), (2, 2048));
    assert_eq!(reply.get(1), Some(Segment::new(0x28, 1024, 0x3_0000_0400)));
    assert_eq!(c.distinct_handles(), 8);

    let w1 = [
        Segment::new(0x21, 4096, 0x10_0000),
        Segment::new(0x22, 4096, 0x20_0000),
    ];
    let w2 = [
        Segment::new(0x23, 512, 0x1_0000_0000),
        Segment::new(0x24, 512, 0x1_0000_0200),
        Segment::new(0x25, 3, 0x1_0000_0400),
    ];
    let w3 = [Segment::new(0x26, 65536, 0x2_0000_0000)];
    let writes: [&[Segment]; 3] = [&w1, &w2, &w3];
    let rc = [
        Segment::new(0x27, 1024, 0x3_0000_0000),
        Segment::new(0x28, 1024, 0x3_0000_0400),
    ];
    let msg = Message {
        xid: 0x42,
        credits: 128,
        body: MessageBody::Msg(ChunkListsRef {
            reads: &[],
            writes: &writes,
            reply: Some(&rc),
        }),
    };
    assert_eq!(encode(&msg), &v[..h.header_len]);
}

/// RDMA_NOMSG long call: a Position Zero Read chunk of two segments, a DDP Read chunk at
/// position 140, no Write list, and a one-segment Reply chunk. Nothing follows the header.
#[test]
fn accepts_nomsg_with_position_zero_ddp_chunk_and_reply_chunk() {
    #[rustfmt::skip]
    let v = words(&[
        7, 1, 16, 1, // xid, vers, credit, RDMA_NOMSG
        1, 0, 0x31, 100, 0, 0x8000, // Position Zero, segment 1
        1, 0, 0x32, 44, 0, 0x9000, // Position Zero, segment 2
        1, 140, 0x33, 8192, 0, 0xa000, // DDP chunk at 140
        0, // end of Read list
        0, // Write list: empty
        1, 1, 0x34, 4096, 0, 0xc000, // Reply chunk: one segment
    ]);
    let h = v1::decode(&v, &ChunkLimits::DEFAULT).expect("valid");
    assert_eq!(h.proc(), Proc::Nomsg);
    assert_eq!((h.xid, h.credits, h.header_len), (7, 16, v.len()));
    assert!(h.payload.is_empty());
    h.check_call().expect("RDMA_NOMSG call with Position Zero");
    let c = h.chunks().unwrap();
    let p0 = c.reads.position_zero().unwrap();
    assert_eq!((p0.len(), p0.length()), (2, 144));
    let rest: Vec<(u32, u32)> = c
        .reads
        .chunks()
        .skip(1)
        .map(|k| (k.position, k.length()))
        .collect();
    assert_eq!(rest, [(140, 8192)]);
    assert_eq!(
        c.reply.unwrap().get(0),
        Some(Segment::new(0x34, 4096, 0xc000))
    );

    let reads = [
        ReadSegment::new(0, Segment::new(0x31, 100, 0x8000)),
        ReadSegment::new(0, Segment::new(0x32, 44, 0x9000)),
        ReadSegment::new(140, Segment::new(0x33, 8192, 0xa000)),
    ];
    let rc = [Segment::new(0x34, 4096, 0xc000)];
    let msg = Message {
        xid: 7,
        credits: 16,
        body: MessageBody::Nomsg(ChunkListsRef {
            reads: &reads,
            writes: &[],
            reply: Some(&rc),
        }),
    };
    assert_eq!(encode(&msg), v);
}

/// RDMA_NOMSG long reply: the Write list returned with the length written (28 of 4096 octets)
/// and the Reply chunk returned with three segments, the last unused (length 0).
#[test]
fn accepts_nomsg_reply_with_write_list_and_reply_chunk() {
    #[rustfmt::skip]
    let v = words(&[
        9, 1, 64, 1, // xid, vers, credit (granted), RDMA_NOMSG
        0, // Read list: empty
        1, 1, 0x41, 28, 0, 0x1000, // Write chunk: length written
        0, // end of Write list
        1, 3, // Reply chunk: three segments
        0x42, 4096, 0, 0x2000, //
        0x43, 1200, 0, 0x3000, //
        0x44, 0, 0, 0x4000, // unused segment
    ]);
    let h = v1::decode(&v, &ChunkLimits::DEFAULT).expect("valid");
    h.check_reply().expect("a valid long reply");
    let c = h.chunks().unwrap();
    assert_eq!(c.writes.get(0).unwrap().total_length(), 28);
    let reply = c.reply.unwrap();
    assert_eq!((reply.len(), reply.total_length()), (3, 5296));
    assert_eq!(reply.get(2), Some(Segment::new(0x44, 0, 0x4000)));

    let w = [Segment::new(0x41, 28, 0x1000)];
    let writes: [&[Segment]; 1] = [&w];
    let rc = [
        Segment::new(0x42, 4096, 0x2000),
        Segment::new(0x43, 1200, 0x3000),
        Segment::new(0x44, 0, 0x4000),
    ];
    let msg = Message {
        xid: 9,
        credits: 64,
        body: MessageBody::Nomsg(ChunkListsRef {
            reads: &[],
            writes: &writes,
            reply: Some(&rc),
        }),
    };
    assert_eq!(encode(&msg), v);
}

/// RDMA_ERROR forms: ERR_VERS carries `rdma_vers_low` then `rdma_vers_high`; ERR_CHUNK carries
/// nothing; the answer copies the XID and version of the message it answers.
#[test]
fn accepts_rdma_error_forms_by_hand() {
    let vers = words(&[0xdead_beef, 1, 5, 4, 1, 1, 2]);
    let h = v1::decode(&vers, &ChunkLimits::DEFAULT).expect("ERR_VERS");
    assert_eq!(h.body, Body::Error(RdmaError::Vers { low: 1, high: 2 }));
    assert_eq!(h.header_len, 28);
    let chunk = words(&[0xdead_beef, 1, 5, 4, 2]);
    let h = v1::decode(&chunk, &ChunkLimits::DEFAULT).expect("ERR_CHUNK");
    assert_eq!(h.body, Body::Error(RdmaError::Chunk));
    assert_eq!(h.header_len, 20);

    let mut out = [0u8; 32];
    let n = v1::encode_err_vers(0xdead_beef, 1, 5, 1, 2, &mut out).unwrap();
    assert_eq!(&out[..n], vers);
    let n = v1::encode_err_chunk(0xdead_beef, 1, 5, &mut out).unwrap();
    assert_eq!(&out[..n], chunk);
    assert_eq!(
        encode(&Message {
            xid: 0xdead_beef,
            credits: 5,
            body: MessageBody::Error(RdmaError::Vers { low: 1, high: 2 }),
        }),
        vers
    );

    // A call of version 3: answered ERR_VERS, XID and version copied.
    let call = words(&[0x0102_0304, 3, 8, 0, 0, 0, 0, 0x0102_0304, 0]);
    let e = v1::decode(&call, &ChunkLimits::DEFAULT).unwrap_err();
    assert_eq!(
        e.response(),
        Response::ErrVers {
            xid: 0x0102_0304,
            vers: 3
        }
    );
    let n = e.response().encode(1, 1, 1, &mut out).unwrap();
    assert_eq!(&out[..n], words(&[0x0102_0304, 3, 1, 4, 1, 1, 1]));
}

/// RFC 8797 §4 and §4.2: identifier, version 1, flags (R is the low-order bit), then send and
/// receive sizes, each `(size / 1024) - 1`, sizes not a multiple of 1024 rounded down.
#[test]
fn accepts_private_data_sizes_by_hand() {
    let cases: [(bool, u32, u32, [u8; 8]); 6] = [
        (
            false,
            1024,
            1024,
            [0xf6, 0xab, 0x0e, 0x18, 1, 0, 0x00, 0x00],
        ),
        (true, 4096, 4096, [0xf6, 0xab, 0x0e, 0x18, 1, 1, 0x03, 0x03]),
        (
            true,
            262_144,
            262_144,
            [0xf6, 0xab, 0x0e, 0x18, 1, 1, 0xff, 0xff],
        ),
        (
            false,
            65_536,
            8192,
            [0xf6, 0xab, 0x0e, 0x18, 1, 0, 0x3f, 0x07],
        ),
        // 1500 → 1024 (encoded 0); 9000 → 8192 (encoded 7).
        (
            false,
            1500,
            9000,
            [0xf6, 0xab, 0x0e, 0x18, 1, 0, 0x00, 0x07],
        ),
        // 4095 → 3072 (encoded 2); 131_073 → 131_072 (encoded 127).
        (
            true,
            4095,
            131_073,
            [0xf6, 0xab, 0x0e, 0x18, 1, 1, 0x02, 0x7f],
        ),
    ];
    for (r, send, recv, wire) in cases {
        let pd = PrivateData::v1(r, send, recv);
        assert_eq!(pd.encode(), wire, "encode {send}/{recv}");
        let back = private_data::decode(&wire).unwrap();
        assert_eq!(back.remote_invalidate, r);
        assert_eq!(back.max_send_size, (send / 1024) * 1024);
        assert_eq!(back.max_recv_size, (recv / 1024) * 1024);
    }
}
