//! RPC-over-RDMA Version One codec: golden vectors written by hand from the XDR in Appendix A of
//! the implementation-experience draft (`rpcrdma1_msg`), one `rejects_*` test per validation
//! rule (named after the response the spec requires), and property tests.

use proptest::prelude::*;
use rpcrdma_engine::proto::chunks::{
    ChunkError, ChunkLimits, ChunkLists, ChunkListsRef, ReadSegment, Segment,
};
use rpcrdma_engine::proto::v1::{
    self, Body, Disposition, Header, HeaderErrorKind, Message, MessageBody, Proc, RdmaError,
    Response,
};
use rpcrdma_engine::xdr::XdrError;

// ---------------------------------------------------------------------------------------------
// Golden vectors.

/// Inline RDMA_MSG, all chunk lists empty, followed by the start of an RPC call.
const MSG_INLINE: &[u8] = &[
    0xca, 0xfe, 0x00, 0x01, // rdma_xid = 0xcafe0001
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x80, // rdma_credit = 128
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xca, 0xfe, 0x00, 0x01, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// RDMA_MSG with one Read chunk of two segments at position 120 (an NFS WRITE payload).
const MSG_READ_MID: &[u8] = &[
    0xca, 0xfe, 0x00, 0x02, // rdma_xid = 0xcafe0002
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG
    0x00, 0x00, 0x00, 0x01, // rdma_reads: entry follows
    0x00, 0x00, 0x00, 0x78, //   rdma_position = 120
    0x00, 0x00, 0x10, 0x01, //   rdma_handle = 0x1001
    0x00, 0x00, 0x10, 0x00, //   rdma_length = 4096
    0x00, 0x00, 0x7f, 0x00, //   rdma_offset (high word)
    0x00, 0x10, 0x00, 0x00, //   rdma_offset (low word) = 0x7f00_0010_0000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x78, //   rdma_position = 120
    0x00, 0x00, 0x10, 0x02, //   rdma_handle = 0x1002
    0x00, 0x00, 0x00, 0x0d, //   rdma_length = 13
    0x00, 0x00, 0x7f, 0x00, //   rdma_offset (high word)
    0x00, 0x20, 0x00, 0x00, //   rdma_offset (low word) = 0x7f00_0020_0000
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Read list
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xca, 0xfe, 0x00, 0x02, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// RDMA_NOMSG long call: a Position Zero Read chunk of three segments.
const NOMSG_P0: &[u8] = &[
    0xca, 0xfe, 0x00, 0x03, // rdma_xid = 0xcafe0003
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x40, // rdma_credit = 64
    0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA_NOMSG
    0x00, 0x00, 0x00, 0x01, // rdma_reads: entry follows
    0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
    0x00, 0x00, 0x20, 0x01, //   rdma_handle = 0x2001
    0x00, 0x00, 0x08, 0x00, //   rdma_length = 2048
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x01, 0x00, 0x00, //   rdma_offset (low word) = 0x10000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
    0x00, 0x00, 0x20, 0x02, //   rdma_handle = 0x2002
    0x00, 0x00, 0x08, 0x00, //   rdma_length = 2048
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x02, 0x00, 0x00, //   rdma_offset (low word) = 0x20000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
    0x00, 0x00, 0x20, 0x03, //   rdma_handle = 0x2003
    0x00, 0x00, 0x00, 0x1c, //   rdma_length = 28
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x03, 0x00, 0x00, //   rdma_offset (low word) = 0x30000
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Read list
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
];

/// RDMA_MSG with a Write list of two chunks (three segments, then two).
const MSG_WRITES: &[u8] = &[
    0xca, 0xfe, 0x00, 0x04, // rdma_xid = 0xcafe0004
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x80, // rdma_credit = 128
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
    0x00, 0x00, 0x00, 0x03, //   rdma_target<>: 3 segments
    0x00, 0x00, 0x30, 0x01, //     rdma_handle = 0x3001
    0x00, 0x00, 0x10, 0x00, //     rdma_length = 4096
    0x00, 0x00, 0x00, 0x01, //     rdma_offset (high word)
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (low word) = 0x1_0000_0000
    0x00, 0x00, 0x30, 0x02, //     rdma_handle = 0x3002
    0x00, 0x00, 0x10, 0x00, //     rdma_length = 4096
    0x00, 0x00, 0x00, 0x01, //     rdma_offset (high word)
    0x00, 0x00, 0x10, 0x00, //     rdma_offset (low word) = 0x1_0000_1000
    0x00, 0x00, 0x30, 0x03, //     rdma_handle = 0x3003
    0x00, 0x00, 0x00, 0x04, //     rdma_length = 4
    0x00, 0x00, 0x00, 0x01, //     rdma_offset (high word)
    0x00, 0x00, 0x20, 0x00, //     rdma_offset (low word) = 0x1_0000_2000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x02, //   rdma_target<>: 2 segments
    0x00, 0x00, 0x30, 0x04, //     rdma_handle = 0x3004
    0x00, 0x00, 0x02, 0x00, //     rdma_length = 512
    0x00, 0x00, 0x00, 0x02, //     rdma_offset (high word)
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (low word) = 0x2_0000_0000
    0x00, 0x00, 0x30, 0x05, //     rdma_handle = 0x3005
    0x00, 0x00, 0x02, 0x00, //     rdma_length = 512
    0x00, 0x00, 0x00, 0x02, //     rdma_offset (high word)
    0x00, 0x00, 0x02, 0x00, //     rdma_offset (low word) = 0x2_0000_0200
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Write list
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xca, 0xfe, 0x00, 0x04, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// RDMA_NOMSG long reply in a Reply chunk of three segments (the last one unused).
const NOMSG_REPLY_CHUNK: &[u8] = &[
    0xca, 0xfe, 0x00, 0x05, // rdma_xid = 0xcafe0005
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x40, // rdma_credit = 64
    0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA_NOMSG
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_reply: present
    0x00, 0x00, 0x00, 0x03, //   rdma_target<>: 3 segments
    0x00, 0x00, 0x40, 0x01, //     rdma_handle = 0x4001
    0x00, 0x00, 0x10, 0x00, //     rdma_length = 4096
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x00, 0xa0, 0x00, //     rdma_offset (low word) = 0xa000
    0x00, 0x00, 0x40, 0x02, //     rdma_handle = 0x4002
    0x00, 0x00, 0x02, 0x34, //     rdma_length = 564
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x00, 0xb0, 0x00, //     rdma_offset (low word) = 0xb000
    0x00, 0x00, 0x40, 0x03, //     rdma_handle = 0x4003
    0x00, 0x00, 0x00, 0x00, //     rdma_length = 0 (unused)
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x00, 0xc0, 0x00, //     rdma_offset (low word) = 0xc000
];

/// Deprecated RDMA_MSGP: alignment 4096, threshold 1024, no chunks, then the RPC message.
const MSGP: &[u8] = &[
    0xca, 0xfe, 0x00, 0x06, // rdma_xid = 0xcafe0006
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
    0x00, 0x00, 0x00, 0x02, // rdma_proc = RDMA_MSGP
    0x00, 0x00, 0x10, 0x00, // rdma_align = 4096
    0x00, 0x00, 0x04, 0x00, // rdma_thresh = 1024
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xca, 0xfe, 0x00, 0x06, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// Deprecated RDMA_DONE (void body).
const DONE: &[u8] = &[
    0xca, 0xfe, 0x00, 0x07, // rdma_xid = 0xcafe0007
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
    0x00, 0x00, 0x00, 0x03, // rdma_proc = RDMA_DONE
];

/// RDMA_ERROR / ERR_VERS reporting versions 1..=2.
const ERR_VERS: &[u8] = &[
    0xca, 0xfe, 0x00, 0x08, // rdma_xid = 0xcafe0008
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
    0x00, 0x00, 0x00, 0x01, // rdma_err = ERR_VERS
    0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
    0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
];

/// RDMA_ERROR / ERR_CHUNK.
const ERR_CHUNK: &[u8] = &[
    0xca, 0xfe, 0x00, 0x09, // rdma_xid = 0xcafe0009
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
    0x00, 0x00, 0x00, 0x02, // rdma_err = ERR_CHUNK
];

/// Every golden vector with its transport-header length.
const GOLDEN: &[(&str, &[u8], usize)] = &[
    ("MSG_INLINE", MSG_INLINE, 28),
    ("MSG_READ_MID", MSG_READ_MID, 76),
    ("NOMSG_P0", NOMSG_P0, 100),
    ("MSG_WRITES", MSG_WRITES, 124),
    ("NOMSG_REPLY_CHUNK", NOMSG_REPLY_CHUNK, 80),
    ("MSGP", MSGP, 36),
    ("DONE", DONE, 16),
    ("ERR_VERS", ERR_VERS, 28),
    ("ERR_CHUNK", ERR_CHUNK, 20),
];

// ---------------------------------------------------------------------------------------------
// Helpers (test-only; they may allocate).

fn dec(buf: &[u8]) -> Header<'_> {
    v1::decode(buf, &ChunkLimits::DEFAULT).expect("valid header")
}

fn err_of(buf: &[u8]) -> v1::HeaderError {
    err_with(buf, &ChunkLimits::DEFAULT)
}

fn err_with(buf: &[u8], limits: &ChunkLimits) -> v1::HeaderError {
    match v1::decode(buf, limits) {
        Ok(h) => panic!("accepted an invalid header: {h:?}"),
        Err(e) => e,
    }
}

fn reads_of(c: &ChunkLists<'_>) -> Vec<ReadSegment> {
    c.reads.iter().collect()
}

fn writes_of(c: &ChunkLists<'_>) -> Vec<Vec<Segment>> {
    c.writes.iter().map(|w| w.segments().collect()).collect()
}

fn reply_of(c: &ChunkLists<'_>) -> Option<Vec<Segment>> {
    c.reply.map(|r| r.segments().collect())
}

/// Re-encodes a decoded header from its views; `None` for RDMA_DONE (not encodable).
fn reencode(h: &Header<'_>) -> Option<Vec<u8>> {
    let mut out = vec![0u8; h.header_len + 64];
    let n = match h.body {
        Body::Done => return None,
        Body::Error(e) => v1::encode(
            &Message {
                xid: h.xid,
                credits: h.credits,
                body: MessageBody::Error(e),
            },
            &mut out,
        ),
        Body::Msg(c) | Body::Nomsg(c) | Body::Msgp { chunks: c, .. } => {
            let reads = reads_of(&c);
            let writes = writes_of(&c);
            let wrefs: Vec<&[Segment]> = writes.iter().map(|w| w.as_slice()).collect();
            let reply = reply_of(&c);
            let lists = ChunkListsRef {
                reads: &reads,
                writes: &wrefs,
                reply: reply.as_deref(),
            };
            match h.body {
                Body::Msg(_) => v1::encode(
                    &Message {
                        xid: h.xid,
                        credits: h.credits,
                        body: MessageBody::Msg(lists),
                    },
                    &mut out,
                ),
                Body::Nomsg(_) => v1::encode(
                    &Message {
                        xid: h.xid,
                        credits: h.credits,
                        body: MessageBody::Nomsg(lists),
                    },
                    &mut out,
                ),
                Body::Msgp { align, thresh, .. } => {
                    v1::encode_msgp_deprecated(h.xid, h.credits, align, thresh, &lists, &mut out)
                }
                _ => unreachable!(),
            }
        }
    }
    .expect("re-encode");
    out.truncate(n);
    Some(out)
}

fn encode_vec(msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; v1::encoded_len(msg)];
    let n = v1::encode(msg, &mut out).expect("encode");
    assert_eq!(n, out.len(), "encoded_len disagrees with encode");
    out
}

// ---------------------------------------------------------------------------------------------
// Golden vectors: decode, check fields, encode, compare.

#[test]
fn accepts_inline_msg() {
    let h = dec(MSG_INLINE);
    assert_eq!((h.xid, h.vers, h.credits), (0xcafe_0001, 1, 128));
    assert_eq!(h.proc(), Proc::Msg);
    assert_eq!(h.disposition(), Disposition::Deliver);
    let c = h.chunks().unwrap();
    assert!(c.is_empty());
    assert_eq!(h.header_len, 28);
    assert_eq!(h.payload, &MSG_INLINE[28..]);
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0001,
            credits: 128,
            body: MessageBody::Msg(ChunkListsRef::EMPTY),
        }),
        &MSG_INLINE[..28]
    );
}

#[test]
fn accepts_msg_with_mid_stream_read_chunk() {
    let h = dec(MSG_READ_MID);
    assert_eq!((h.xid, h.credits, h.header_len), (0xcafe_0002, 32, 76));
    let Body::Msg(c) = h.body else {
        panic!("not RDMA_MSG")
    };
    let reads = [
        ReadSegment::new(120, Segment::new(0x1001, 4096, 0x7f00_0010_0000)),
        ReadSegment::new(120, Segment::new(0x1002, 13, 0x7f00_0020_0000)),
    ];
    assert_eq!(reads_of(&c), reads);
    assert!(!c.reads.has_position_zero());
    assert!(c.reads.position_zero().is_none());
    assert_eq!(c.reads.chunk_count(), 1);
    let chunk = c.reads.chunks().next().unwrap();
    assert_eq!(
        (chunk.position, chunk.len(), chunk.length()),
        (120, 2, 4109)
    );
    assert!(c.writes.is_empty() && c.reply.is_none());
    assert_eq!(c.distinct_handles(), 2);
    assert_eq!(c.single_handle(), None);
    assert_eq!(h.check_call(), Ok(()));
    let lists = ChunkListsRef {
        reads: &reads,
        ..ChunkListsRef::EMPTY
    };
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0002,
            credits: 32,
            body: MessageBody::Msg(lists),
        }),
        &MSG_READ_MID[..76]
    );
}

#[test]
fn accepts_nomsg_with_multi_segment_position_zero() {
    let h = dec(NOMSG_P0);
    assert_eq!((h.xid, h.credits, h.header_len), (0xcafe_0003, 64, 100));
    assert!(h.payload.is_empty());
    let Body::Nomsg(c) = h.body else {
        panic!("not RDMA_NOMSG")
    };
    assert!(c.reads.has_position_zero());
    let p0 = c.reads.position_zero().unwrap();
    let segs = [
        Segment::new(0x2001, 2048, 0x1_0000),
        Segment::new(0x2002, 2048, 0x2_0000),
        Segment::new(0x2003, 28, 0x3_0000),
    ];
    assert_eq!(p0.segments().collect::<Vec<_>>(), segs);
    assert_eq!(p0.length(), 4124);
    assert_eq!(c.reads.chunk_count(), 1);
    assert_eq!(h.check_call(), Ok(()));
    let reads: Vec<ReadSegment> = segs.iter().map(|s| ReadSegment::new(0, *s)).collect();
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0003,
            credits: 64,
            body: MessageBody::Nomsg(ChunkListsRef {
                reads: &reads,
                ..ChunkListsRef::EMPTY
            }),
        }),
        NOMSG_P0
    );
}

#[test]
fn accepts_msg_with_write_list_of_several_chunks() {
    let h = dec(MSG_WRITES);
    assert_eq!((h.xid, h.header_len), (0xcafe_0004, 124));
    let c = *h.chunks().unwrap();
    let w0 = [
        Segment::new(0x3001, 4096, 0x1_0000_0000),
        Segment::new(0x3002, 4096, 0x1_0000_1000),
        Segment::new(0x3003, 4, 0x1_0000_2000),
    ];
    let w1 = [
        Segment::new(0x3004, 512, 0x2_0000_0000),
        Segment::new(0x3005, 512, 0x2_0000_0200),
    ];
    assert_eq!(c.writes.len(), 2);
    assert_eq!(writes_of(&c), vec![w0.to_vec(), w1.to_vec()]);
    assert_eq!(c.writes.get(0).unwrap().total_length(), 8196);
    assert_eq!(c.writes.get(1).unwrap().total_length(), 1024);
    assert!(c.writes.get(2).is_none());
    assert_eq!(c.distinct_handles(), 5);
    let writes: [&[Segment]; 2] = [&w0, &w1];
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0004,
            credits: 128,
            body: MessageBody::Msg(ChunkListsRef {
                writes: &writes,
                ..ChunkListsRef::EMPTY
            }),
        }),
        &MSG_WRITES[..124]
    );
}

#[test]
fn accepts_nomsg_reply_with_multi_segment_reply_chunk() {
    let h = dec(NOMSG_REPLY_CHUNK);
    assert_eq!((h.xid, h.header_len), (0xcafe_0005, 80));
    let c = *h.chunks().unwrap();
    let reply = [
        Segment::new(0x4001, 4096, 0xa000),
        Segment::new(0x4002, 564, 0xb000),
        Segment::new(0x4003, 0, 0xc000),
    ];
    assert_eq!(reply_of(&c), Some(reply.to_vec()));
    assert_eq!(c.reply.unwrap().total_length(), 4660);
    assert_eq!(h.check_reply(), Ok(()));
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0005,
            credits: 64,
            body: MessageBody::Nomsg(ChunkListsRef {
                reply: Some(&reply),
                ..ChunkListsRef::EMPTY
            }),
        }),
        NOMSG_REPLY_CHUNK
    );
}

#[test]
fn accepts_msgp_as_msg() {
    let h = dec(MSGP);
    assert_eq!(h.proc(), Proc::Msgp);
    assert_eq!(h.disposition(), Disposition::Deliver);
    let Body::Msgp {
        align,
        thresh,
        chunks,
    } = h.body
    else {
        panic!("not RDMA_MSGP")
    };
    assert_eq!((align, thresh), (4096, 1024));
    assert!(chunks.is_empty());
    assert_eq!(h.header_len, 36);
    assert_eq!(h.payload, &MSGP[36..]);
    let mut out = [0u8; 64];
    let n =
        v1::encode_msgp_deprecated(0xcafe_0006, 16, 4096, 1024, &ChunkListsRef::EMPTY, &mut out)
            .unwrap();
    assert_eq!(&out[..n], &MSGP[..36]);
}

#[test]
fn accepts_done_as_ignore() {
    let h = dec(DONE);
    assert_eq!(h.proc(), Proc::Done);
    assert_eq!(h.body, Body::Done);
    assert_eq!(h.disposition(), Disposition::Ignore);
    assert_eq!((h.xid, h.header_len), (0xcafe_0007, 16));
    assert!(h.chunks().is_none());
}

#[test]
fn accepts_err_vers() {
    let h = dec(ERR_VERS);
    assert_eq!(h.body, Body::Error(RdmaError::Vers { low: 1, high: 2 }));
    assert_eq!(h.disposition(), Disposition::Error);
    assert_eq!((h.xid, h.credits, h.header_len), (0xcafe_0008, 32, 28));
    let mut out = [0u8; 28];
    assert_eq!(
        v1::encode_err_vers(0xcafe_0008, 1, 32, 1, 2, &mut out),
        Ok(28)
    );
    assert_eq!(&out[..], ERR_VERS);
    assert_eq!(
        encode_vec(&Message {
            xid: 0xcafe_0008,
            credits: 32,
            body: MessageBody::Error(RdmaError::Vers { low: 1, high: 2 }),
        }),
        ERR_VERS
    );
}

#[test]
fn accepts_err_chunk() {
    let h = dec(ERR_CHUNK);
    assert_eq!(h.body, Body::Error(RdmaError::Chunk));
    assert_eq!((h.xid, h.header_len), (0xcafe_0009, 20));
    let mut out = [0u8; 20];
    assert_eq!(v1::encode_err_chunk(0xcafe_0009, 1, 32, &mut out), Ok(20));
    assert_eq!(&out[..], ERR_CHUNK);
}

#[test]
fn accepts_error_with_unknown_code() {
    let buf = [
        0xca, 0xfe, 0x00, 0x0a, // rdma_xid
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x01, // rdma_credit = 1
        0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x09, // rdma_err = 9 (unknown)
    ];
    let h = dec(&buf);
    assert_eq!(h.body, Body::Error(RdmaError::Unknown(9)));
    assert_eq!(h.header_len, 20);
}

#[test]
fn accepts_write_chunk_with_zero_segments() {
    // A responder returning an unused Write chunk as an empty array.
    let buf = [
        0xca, 0xfe, 0x00, 0x0b, // rdma_xid
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x40, // rdma_credit = 64
        0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG
        0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
        0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
        0x00, 0x00, 0x00, 0x00, //   rdma_target<>: 0 segments
        0x00, 0x00, 0x00, 0x00, // rdma_next: end
        0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
        0xca, 0xfe, 0x00, 0x0b, // RPC xid
        0x00, 0x00, 0x00, 0x01, // msg_type = REPLY
    ];
    let h = dec(&buf);
    let c = h.chunks().unwrap();
    assert_eq!(c.writes.len(), 1);
    assert!(c.writes.get(0).unwrap().is_empty());
    assert_eq!(h.check_reply(), Ok(()));
}

#[test]
fn accepts_single_handle_for_send_with_invalidate() {
    // Read chunk and Reply chunk under the same handle: exactly one distinct handle.
    let reads = [ReadSegment::new(40, Segment::new(0x77, 8, 0))];
    let reply = [Segment::new(0x77, 64, 4096)];
    let mut out = [0u8; 128];
    let n = v1::encode(
        &Message {
            xid: 5,
            credits: 1,
            body: MessageBody::Msg(ChunkListsRef {
                reads: &reads,
                writes: &[],
                reply: Some(&reply),
            }),
        },
        &mut out,
    )
    .unwrap();
    out[n..n + 4].copy_from_slice(&5u32.to_be_bytes());
    let h = dec(&out[..n + 8]);
    let c = h.chunks().unwrap();
    assert_eq!(c.distinct_handles(), 1);
    assert_eq!(c.single_handle(), Some(0x77));
}

#[test]
fn accepts_golden_reencoding_byte_for_byte() {
    for &(name, buf, len) in GOLDEN {
        let h = dec(buf);
        assert_eq!(h.header_len, len, "{name}");
        if let Some(bytes) = reencode(&h) {
            assert_eq!(bytes, &buf[..len], "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation: decode never reads past `buf`.

#[test]
fn rejects_every_prefix_as_truncated() {
    for &(name, buf, len) in GOLDEN {
        for cut in 0..len {
            let e = err_of(&buf[..cut]);
            assert!(
                e.kind.is_truncated(),
                "{name} cut at {cut}: {:?} is not a truncation",
                e.kind
            );
        }
        // RDMA_MSG / RDMA_MSGP also need the RPC XID and msg_type after the header.
        let min = match dec(buf).proc() {
            Proc::Msg | Proc::Msgp => len + 8,
            _ => len,
        };
        for cut in len..min {
            assert!(matches!(
                err_of(&buf[..cut]).kind,
                HeaderErrorKind::MissingPayload { .. }
            ));
        }
        for cut in min..=buf.len() {
            assert!(v1::decode(&buf[..cut], &ChunkLimits::DEFAULT).is_ok());
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Property tests.

fn arb_segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), 0u32..=0x0fff_ffff, any::<u64>())
        .prop_map(|(h, l, o)| Segment::new(h, l, o.min(u64::MAX - u64::from(l))))
}

/// A valid Read list: an optional Position Zero chunk, then ordered non-overlapping chunks.
fn arb_reads(p0: bool) -> impl Strategy<Value = Vec<ReadSegment>> {
    let p0_range = if p0 { 1..4usize } else { 0..1usize };
    (
        prop::collection::vec(arb_segment(), p0_range),
        prop::collection::vec((0u32..64, prop::collection::vec(arb_segment(), 1..4)), 0..3),
    )
        .prop_map(|(p0segs, chunks)| {
            let mut out: Vec<ReadSegment> =
                p0segs.into_iter().map(|s| ReadSegment::new(0, s)).collect();
            let mut cursor: u64 = 0;
            for (gap, segs) in chunks {
                let pos = ((cursor + 3) & !3) + 4 * (u64::from(gap) + 1);
                let len: u64 = segs.iter().map(|s| u64::from(s.length)).sum();
                for s in segs {
                    out.push(ReadSegment::new(pos as u32, s));
                }
                cursor = pos + len;
            }
            out
        })
}

#[derive(Debug, Clone)]
struct OwnedLists {
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
}

fn arb_lists(p0: bool) -> impl Strategy<Value = OwnedLists> {
    (
        arb_reads(p0),
        prop::collection::vec(prop::collection::vec(arb_segment(), 0..4), 0..4),
        prop::option::of(prop::collection::vec(arb_segment(), 0..4)),
    )
        .prop_map(|(reads, writes, reply)| OwnedLists {
            reads,
            writes,
            reply,
        })
}

#[derive(Debug, Clone)]
enum OwnedBody {
    Msg(OwnedLists),
    Nomsg(OwnedLists),
    Error(RdmaError),
}

fn arb_error() -> impl Strategy<Value = RdmaError> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| RdmaError::Vers { low, high }),
        Just(RdmaError::Chunk),
        any::<u32>()
            .prop_filter("known code", |v| *v != 1 && *v != 2)
            .prop_map(RdmaError::Unknown),
    ]
}

fn arb_body() -> impl Strategy<Value = OwnedBody> {
    prop_oneof![
        arb_lists(false).prop_map(OwnedBody::Msg),
        (any::<bool>(), arb_lists(true), arb_lists(false)).prop_map(|(p0, with, mut without)| {
            if p0 {
                OwnedBody::Nomsg(with)
            } else {
                // No Position Zero chunk: a Reply chunk must carry the message.
                without.reply.get_or_insert_with(Vec::new);
                OwnedBody::Nomsg(without)
            }
        }),
        arb_error().prop_map(OwnedBody::Error),
    ]
}

/// Encodes the generated header (plus an RPC XID and message type after RDMA_MSG).
fn encode_owned(xid: u32, credits: u32, body: &OwnedBody) -> (Vec<u8>, usize) {
    let empty = OwnedLists {
        reads: vec![],
        writes: vec![],
        reply: None,
    };
    let l = match body {
        OwnedBody::Msg(l) | OwnedBody::Nomsg(l) => l,
        OwnedBody::Error(_) => &empty,
    };
    let wrefs: Vec<&[Segment]> = l.writes.iter().map(|w| w.as_slice()).collect();
    let lists = ChunkListsRef {
        reads: &l.reads,
        writes: &wrefs,
        reply: l.reply.as_deref(),
    };
    lists.validate(&ChunkLimits::DEFAULT).expect("generator");
    let msg = Message {
        xid,
        credits,
        body: match body {
            OwnedBody::Msg(_) => MessageBody::Msg(lists),
            OwnedBody::Nomsg(_) => MessageBody::Nomsg(lists),
            OwnedBody::Error(e) => MessageBody::Error(*e),
        },
    };
    let mut out = encode_vec(&msg);
    let header_len = out.len();
    if let OwnedBody::Msg(_) = body {
        out.extend_from_slice(&xid.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
    }
    (out, header_len)
}

/// Words biased towards the values that drive the parser (discriminants, small counts).
fn arb_word() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => Just(0u32),
        3 => Just(1u32),
        2 => 0u32..32,
        1 => any::<u32>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn accepts_encode_decode_identity(xid in any::<u32>(), credits in any::<u32>(), body in arb_body()) {
        let (buf, header_len) = encode_owned(xid, credits, &body);
        let h = v1::decode(&buf, &ChunkLimits::DEFAULT).expect("decode of encoded header");
        prop_assert_eq!(h.xid, xid);
        prop_assert_eq!(h.vers, 1);
        prop_assert_eq!(h.credits, credits);
        prop_assert_eq!(h.header_len, header_len);
        match (&body, h.body) {
            (OwnedBody::Msg(l), Body::Msg(c)) | (OwnedBody::Nomsg(l), Body::Nomsg(c)) => {
                prop_assert_eq!(&reads_of(&c), &l.reads);
                prop_assert_eq!(&writes_of(&c), &l.writes);
                prop_assert_eq!(&reply_of(&c), &l.reply);
                prop_assert_eq!(c.as_bytes().len(), header_len - 16);
            }
            (OwnedBody::Error(e), Body::Error(d)) => prop_assert_eq!(*e, d),
            (want, got) => prop_assert!(false, "body {:?} decoded as {:?}", want, got),
        }
    }

    #[test]
    fn accepts_arbitrary_bytes_without_panic(buf in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = v1::decode(&buf, &ChunkLimits::DEFAULT);
    }

    #[test]
    fn accepts_structured_garbage_without_panic(
        xid in any::<u32>(),
        proc_ in 0u32..6,
        words in prop::collection::vec(arb_word(), 0..64),
    ) {
        let mut buf = Vec::new();
        for w in [xid, 1, 8, proc_].into_iter().chain(words) {
            buf.extend_from_slice(&w.to_be_bytes());
        }
        if let Ok(h) = v1::decode(&buf, &ChunkLimits::DEFAULT) {
            if let Some(bytes) = reencode(&h) {
                prop_assert_eq!(&bytes[..], &buf[..h.header_len]);
            }
        }
    }

    #[test]
    fn accepts_mutated_headers_only_canonically(
        xid in any::<u32>(),
        body in arb_body(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let (mut buf, _) = encode_owned(xid, 32, &body);
        for (i, v) in edits {
            let i = i.index(buf.len());
            buf[i] = v;
        }
        let cut = cut.index(buf.len() + 1);
        for b in [&buf[..], &buf[..cut]] {
            match v1::decode(b, &ChunkLimits::DEFAULT) {
                // Whatever is accepted re-encodes to the same octets.
                Ok(h) => {
                    if let Some(bytes) = reencode(&h) {
                        prop_assert_eq!(&bytes[..], &b[..h.header_len]);
                    }
                }
                Err(e) => {
                    let _ = e.response();
                }
            }
        }
    }
}
