//! RPC-over-RDMA Version Two codec: golden vectors written by hand from this revision of the
//! draft's XDR (`rpcrdma2_xprt_hdr`), one `rejects_*` test per validation rule (named after the
//! response the draft's "Transport Errors" section requires), and property tests.

use proptest::prelude::*;
use rpcrdma_engine::proto::chunks::{
    ChunkError, ChunkLimits, ChunkLists, ChunkListsRef, ReadSegment, Segment,
};
use rpcrdma_engine::proto::v2::{
    self, Body, ChunksRef, Direction, ErrCode, Header, HeaderErrorKind, Limits, Message,
    MessageBody, Optional, Proc, RdmaError, Response,
};
use rpcrdma_engine::proto::{peek, v1};

// ---------------------------------------------------------------------------------------------
// Golden vectors.

/// RDMA2_MSG call, no chunks, nothing to invalidate; then the start of the RPC call.
const MSG_CALL_INLINE: &[u8] = &[
    0xbe, 0xef, 0x00, 0x01, // rdma_xid = 0xbeef0001
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA2_MSG
    0x00, 0x00, 0x00, 0x00, // rdma_direction = CALL
    0x00, 0x00, 0x00, 0x00, // rdma_inv_handle = 0
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xbe, 0xef, 0x00, 0x01, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// RDMA2_MSG call with a Read chunk at position 108 and a Reply chunk, both under handle
/// 0x5001, which the requester offers for remote invalidation.
const MSG_CALL_READ: &[u8] = &[
    0xbe, 0xef, 0x00, 0x02, // rdma_xid = 0xbeef0002
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA2_MSG
    0x00, 0x00, 0x00, 0x00, // rdma_direction = CALL
    0x00, 0x00, 0x50, 0x01, // rdma_inv_handle = 0x5001
    0x00, 0x00, 0x00, 0x01, // rdma_reads: entry follows
    0x00, 0x00, 0x00, 0x6c, //   rdma_position = 108
    0x00, 0x00, 0x50, 0x01, //   rdma_handle = 0x5001
    0x00, 0x00, 0x20, 0x00, //   rdma_length = 8192
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x10, 0x00, 0x00, //   rdma_offset (low word) = 0x100000
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Read list
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_reply: present
    0x00, 0x00, 0x00, 0x01, //   rdma_target<>: 1 segment
    0x00, 0x00, 0x50, 0x01, //     rdma_handle = 0x5001
    0x00, 0x00, 0x04, 0x00, //     rdma_length = 1024
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x20, 0x00, 0x00, //     rdma_offset (low word) = 0x200000
    // RPC message
    0xbe, 0xef, 0x00, 0x02, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type = CALL
];

/// RDMA2_MSG reply returning a Write list of two chunks (two segments, then one).
const MSG_REPLY_WRITES: &[u8] = &[
    0xbe, 0xef, 0x00, 0x03, // rdma_xid = 0xbeef0003
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x40, // rdma_credit = 64
    0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA2_MSG
    0x00, 0x00, 0x00, 0x01, // rdma_direction = REPLY
    0x00, 0x00, 0x60, 0x01, // rdma_inv_handle = 0x6001 (copied from the call)
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_writes: entry follows
    0x00, 0x00, 0x00, 0x02, //   rdma_target<>: 2 segments
    0x00, 0x00, 0x60, 0x01, //     rdma_handle = 0x6001
    0x00, 0x00, 0x10, 0x00, //     rdma_length = 4096
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x04, 0x00, 0x00, //     rdma_offset (low word) = 0x40000
    0x00, 0x00, 0x60, 0x02, //     rdma_handle = 0x6002
    0x00, 0x00, 0x00, 0x18, //     rdma_length = 24
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x04, 0x10, 0x00, //     rdma_offset (low word) = 0x41000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x01, //   rdma_target<>: 1 segment
    0x00, 0x00, 0x60, 0x03, //     rdma_handle = 0x6003
    0x00, 0x00, 0x02, 0x00, //     rdma_length = 512
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x05, 0x00, 0x00, //     rdma_offset (low word) = 0x50000
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Write list
    0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
    // RPC message
    0xbe, 0xef, 0x00, 0x03, // xid
    0x00, 0x00, 0x00, 0x01, // msg_type = REPLY
];

/// RDMA2_NOMSG long call: Position Zero Read chunk of two segments, plus a Reply chunk.
const NOMSG_CALL_P0: &[u8] = &[
    0xbe, 0xef, 0x00, 0x04, // rdma_xid = 0xbeef0004
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
    0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA2_NOMSG
    0x00, 0x00, 0x00, 0x00, // rdma_direction = CALL
    0x00, 0x00, 0x00, 0x00, // rdma_inv_handle = 0
    0x00, 0x00, 0x00, 0x01, // rdma_reads: entry follows
    0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
    0x00, 0x00, 0x70, 0x01, //   rdma_handle = 0x7001
    0x00, 0x00, 0x0f, 0xe0, //   rdma_length = 4064
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x08, 0x00, 0x00, //   rdma_offset (low word) = 0x80000
    0x00, 0x00, 0x00, 0x01, // rdma_next: entry follows
    0x00, 0x00, 0x00, 0x00, //   rdma_position = 0
    0x00, 0x00, 0x70, 0x02, //   rdma_handle = 0x7002
    0x00, 0x00, 0x00, 0x40, //   rdma_length = 64
    0x00, 0x00, 0x00, 0x00, //   rdma_offset (high word)
    0x00, 0x09, 0x00, 0x00, //   rdma_offset (low word) = 0x90000
    0x00, 0x00, 0x00, 0x00, // rdma_next: end of Read list
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_reply: present
    0x00, 0x00, 0x00, 0x01, //   rdma_target<>: 1 segment
    0x00, 0x00, 0x70, 0x03, //     rdma_handle = 0x7003
    0x00, 0x00, 0x20, 0x00, //     rdma_length = 8192
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x0a, 0x00, 0x00, //     rdma_offset (low word) = 0xa0000
];

/// RDMA2_NOMSG long reply in a Reply chunk of two segments (the second unused).
const NOMSG_REPLY: &[u8] = &[
    0xbe, 0xef, 0x00, 0x05, // rdma_xid = 0xbeef0005
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
    0x00, 0x00, 0x00, 0x01, // rdma_proc = RDMA2_NOMSG
    0x00, 0x00, 0x00, 0x01, // rdma_direction = REPLY
    0x00, 0x00, 0x70, 0x03, // rdma_inv_handle = 0x7003
    0x00, 0x00, 0x00, 0x00, // rdma_reads: no entry
    0x00, 0x00, 0x00, 0x00, // rdma_writes: no entry
    0x00, 0x00, 0x00, 0x01, // rdma_reply: present
    0x00, 0x00, 0x00, 0x02, //   rdma_target<>: 2 segments
    0x00, 0x00, 0x70, 0x03, //     rdma_handle = 0x7003
    0x00, 0x00, 0x10, 0x00, //     rdma_length = 4096
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x0a, 0x00, 0x00, //     rdma_offset (low word) = 0xa0000
    0x00, 0x00, 0x70, 0x04, //     rdma_handle = 0x7004
    0x00, 0x00, 0x00, 0x00, //     rdma_length = 0 (unused)
    0x00, 0x00, 0x00, 0x00, //     rdma_offset (high word)
    0x00, 0x0b, 0x00, 0x00, //     rdma_offset (low word) = 0xb0000
];

/// RDMA2_ERROR / RDMA2_ERR_VERS reporting versions 1..=2.
const ERR_VERS: &[u8] = &[
    0xbe, 0xef, 0x00, 0x10, // rdma_xid = 0xbeef0010
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x01, // rdma_err = RDMA2_ERR_VERS
    0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
    0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
];

/// RDMA2_ERROR / RDMA2_ERR_BAD_XDR.
const ERR_BAD_XDR: &[u8] = &[
    0xbe, 0xef, 0x00, 0x11, // rdma_xid = 0xbeef0011
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x02, // rdma_err = RDMA2_ERR_BAD_XDR
];

/// RDMA2_ERROR / RDMA2_ERR_CANT_REPLY: found after processing, second segment needs 8192.
const ERR_CANT_REPLY: &[u8] = &[
    0xbe, 0xef, 0x00, 0x12, // rdma_xid = 0xbeef0012
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x03, // rdma_err = RDMA2_ERR_CANT_REPLY
    0x00, 0x00, 0x00, 0x01, // rdma_processed = TRUE
    0x00, 0x00, 0x00, 0x02, // rdma_segment_index = 2
    0x00, 0x00, 0x20, 0x00, // rdma_length_needed = 8192
];

/// RDMA2_ERROR / RDMA2_ERR_INVAL_PROC.
const ERR_INVAL_PROC: &[u8] = &[
    0xbe, 0xef, 0x00, 0x13, // rdma_xid = 0xbeef0013
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x04, // rdma_err = RDMA2_ERR_INVAL_PROC
];

/// RDMA2_ERROR / RDMA2_ERR_INVAL_OPTION.
const ERR_INVAL_OPTION: &[u8] = &[
    0xbe, 0xef, 0x00, 0x14, // rdma_xid = 0xbeef0014
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x05, // rdma_err = RDMA2_ERR_INVAL_OPTION
];

/// RDMA2_ERROR with an error code this revision does not define.
const ERR_UNKNOWN: &[u8] = &[
    0xbe, 0xef, 0x00, 0x15, // rdma_xid = 0xbeef0015
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x63, // rdma_err = 99
];

/// RDMA2_OPTIONAL call, type 0x101, five octets of optinfo, no payload.
const OPTIONAL_CALL: &[u8] = &[
    0xbe, 0xef, 0x00, 0x20, // rdma_xid = 0xbeef0020
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x05, // rdma_proc = RDMA2_OPTIONAL
    0x00, 0x00, 0x00, 0x00, // rdma_optdir = CALL
    0x00, 0x00, 0x01, 0x01, // rdma_opttype = 0x101
    0x00, 0x00, 0x00, 0x05, // rdma_optinfo: length 5
    0x68, 0x65, 0x6c, 0x6c, //   "hell"
    0x6f, 0x00, 0x00, 0x00, //   "o" + 3 pad octets
];

/// RDMA2_OPTIONAL reply, type 7, empty optinfo, followed by a partial RPC payload.
const OPTIONAL_REPLY: &[u8] = &[
    0xbe, 0xef, 0x00, 0x21, // rdma_xid = 0xbeef0021
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x05, // rdma_proc = RDMA2_OPTIONAL
    0x00, 0x00, 0x00, 0x01, // rdma_optdir = REPLY
    0x00, 0x00, 0x00, 0x07, // rdma_opttype = 7
    0x00, 0x00, 0x00, 0x00, // rdma_optinfo: length 0
    // payload
    0xbe, 0xef, 0x00, 0x21, // RPC xid
];

/// Every golden vector with its transport-header length.
const GOLDEN: &[(&str, &[u8], usize)] = &[
    ("MSG_CALL_INLINE", MSG_CALL_INLINE, 36),
    ("MSG_CALL_READ", MSG_CALL_READ, 80),
    ("MSG_REPLY_WRITES", MSG_REPLY_WRITES, 100),
    ("NOMSG_CALL_P0", NOMSG_CALL_P0, 104),
    ("NOMSG_REPLY", NOMSG_REPLY, 72),
    ("ERR_VERS", ERR_VERS, 28),
    ("ERR_BAD_XDR", ERR_BAD_XDR, 20),
    ("ERR_CANT_REPLY", ERR_CANT_REPLY, 32),
    ("ERR_INVAL_PROC", ERR_INVAL_PROC, 20),
    ("ERR_INVAL_OPTION", ERR_INVAL_OPTION, 20),
    ("ERR_UNKNOWN", ERR_UNKNOWN, 20),
    ("OPTIONAL_CALL", OPTIONAL_CALL, 36),
    ("OPTIONAL_REPLY", OPTIONAL_REPLY, 28),
];

// ---------------------------------------------------------------------------------------------
// Helpers.

fn dec(buf: &[u8]) -> Header<'_> {
    v2::decode(buf, &Limits::DEFAULT).expect("valid header")
}

fn err_with(buf: &[u8], limits: &Limits) -> v2::HeaderError {
    match v2::decode(buf, limits) {
        Ok(h) => panic!("accepted an invalid header: {h:?}"),
        Err(e) => e,
    }
}

fn err_of(buf: &[u8]) -> v2::HeaderError {
    err_with(buf, &Limits::DEFAULT)
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

fn encode_vec(msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; v2::encoded_len(msg)];
    let n = v2::encode(msg, &mut out).expect("encode");
    assert_eq!(n, out.len(), "encoded_len disagrees with encode");
    out
}

/// Re-encodes a decoded header from its views.
fn reencode(h: &Header<'_>) -> Vec<u8> {
    let body_of = |c: &v2::Chunks<'_>, nomsg: bool| -> Vec<u8> {
        let reads = reads_of(&c.lists);
        let writes = writes_of(&c.lists);
        let wrefs: Vec<&[Segment]> = writes.iter().map(|w| w.as_slice()).collect();
        let reply = reply_of(&c.lists);
        let r = ChunksRef {
            direction: c.direction,
            inv_handle: c.inv_handle,
            lists: ChunkListsRef {
                reads: &reads,
                writes: &wrefs,
                reply: reply.as_deref(),
            },
        };
        encode_vec(&Message {
            xid: h.xid,
            credits: h.credits,
            body: if nomsg {
                MessageBody::Nomsg(r)
            } else {
                MessageBody::Msg(r)
            },
        })
    };
    match &h.body {
        Body::Msg(c) => body_of(c, false),
        Body::Nomsg(c) => body_of(c, true),
        Body::Error(e) => encode_vec(&Message {
            xid: h.xid,
            credits: h.credits,
            body: MessageBody::Error(*e),
        }),
        Body::Optional(o) => encode_vec(&Message {
            xid: h.xid,
            credits: h.credits,
            body: MessageBody::Optional(*o),
        }),
    }
}

fn response_bytes(r: Response, credits: u32) -> Vec<u8> {
    let mut out = [0u8; 64];
    let n = r.encode(credits, 1, 2, &mut out).unwrap();
    out[..n].to_vec()
}

// ---------------------------------------------------------------------------------------------
// Golden vectors: decode, check fields, encode, compare.

#[test]
fn accepts_inline_msg_call() {
    assert_eq!(peek(MSG_CALL_INLINE), Some((0xbeef_0001, 2)));
    let h = dec(MSG_CALL_INLINE);
    assert_eq!((h.xid, h.vers, h.credits), (0xbeef_0001, 2, 32));
    assert_eq!(h.proc(), Proc::Msg);
    assert_eq!(h.direction(), Direction::Call);
    let c = h.chunks().unwrap();
    assert_eq!(c.inv_handle, 0);
    assert!(c.lists.is_empty());
    assert_eq!((h.header_len, h.payload), (36, &MSG_CALL_INLINE[36..]));
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0001,
            credits: 32,
            body: MessageBody::Msg(ChunksRef {
                direction: Direction::Call,
                inv_handle: 0,
                lists: ChunkListsRef::EMPTY,
            }),
        }),
        &MSG_CALL_INLINE[..36]
    );
}

#[test]
fn accepts_msg_call_with_read_chunk_and_inv_handle() {
    let h = dec(MSG_CALL_READ);
    let Body::Msg(c) = h.body else {
        panic!("not RDMA2_MSG")
    };
    assert_eq!((c.direction, c.inv_handle), (Direction::Call, 0x5001));
    let reads = [ReadSegment::new(108, Segment::new(0x5001, 8192, 0x10_0000))];
    let reply = [Segment::new(0x5001, 1024, 0x20_0000)];
    assert_eq!(reads_of(&c.lists), reads);
    assert_eq!(reply_of(&c.lists), Some(reply.to_vec()));
    assert_eq!(c.lists.single_handle(), Some(0x5001));
    assert_eq!(h.header_len, 80);
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0002,
            credits: 32,
            body: MessageBody::Msg(ChunksRef {
                direction: Direction::Call,
                inv_handle: 0x5001,
                lists: ChunkListsRef {
                    reads: &reads,
                    writes: &[],
                    reply: Some(&reply),
                },
            }),
        }),
        &MSG_CALL_READ[..80]
    );
}

#[test]
fn accepts_msg_reply_with_write_list() {
    let h = dec(MSG_REPLY_WRITES);
    assert_eq!(h.direction(), Direction::Reply);
    let c = h.chunks().unwrap();
    let w0 = [
        Segment::new(0x6001, 4096, 0x4_0000),
        Segment::new(0x6002, 24, 0x4_1000),
    ];
    let w1 = [Segment::new(0x6003, 512, 0x5_0000)];
    assert_eq!(writes_of(&c.lists), vec![w0.to_vec(), w1.to_vec()]);
    assert_eq!(c.lists.writes.get(0).unwrap().total_length(), 4120);
    assert_eq!(c.lists.distinct_handles(), 3);
    assert_eq!(h.header_len, 100);
    let writes: [&[Segment]; 2] = [&w0, &w1];
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0003,
            credits: 64,
            body: MessageBody::Msg(ChunksRef {
                direction: Direction::Reply,
                inv_handle: 0x6001,
                lists: ChunkListsRef {
                    writes: &writes,
                    ..ChunkListsRef::EMPTY
                },
            }),
        }),
        &MSG_REPLY_WRITES[..100]
    );
}

#[test]
fn accepts_nomsg_call_with_position_zero_and_reply_chunk() {
    let h = dec(NOMSG_CALL_P0);
    assert_eq!(h.proc(), Proc::Nomsg);
    let c = h.chunks().unwrap();
    let p0 = c.lists.reads.position_zero().unwrap();
    let segs = [
        Segment::new(0x7001, 4064, 0x8_0000),
        Segment::new(0x7002, 64, 0x9_0000),
    ];
    assert_eq!(p0.segments().collect::<Vec<_>>(), segs);
    assert_eq!(p0.length(), 4128);
    let reply = [Segment::new(0x7003, 8192, 0xa_0000)];
    assert_eq!(reply_of(&c.lists), Some(reply.to_vec()));
    assert_eq!((h.header_len, h.payload.len()), (104, 0));
    let reads = [ReadSegment::new(0, segs[0]), ReadSegment::new(0, segs[1])];
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0004,
            credits: 16,
            body: MessageBody::Nomsg(ChunksRef {
                direction: Direction::Call,
                inv_handle: 0,
                lists: ChunkListsRef {
                    reads: &reads,
                    writes: &[],
                    reply: Some(&reply),
                },
            }),
        }),
        NOMSG_CALL_P0
    );
}

#[test]
fn accepts_nomsg_reply_in_reply_chunk() {
    let h = dec(NOMSG_REPLY);
    let c = h.chunks().unwrap();
    assert_eq!((c.direction, c.inv_handle), (Direction::Reply, 0x7003));
    let reply = [
        Segment::new(0x7003, 4096, 0xa_0000),
        Segment::new(0x7004, 0, 0xb_0000),
    ];
    assert_eq!(reply_of(&c.lists), Some(reply.to_vec()));
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0005,
            credits: 16,
            body: MessageBody::Nomsg(ChunksRef {
                direction: Direction::Reply,
                inv_handle: 0x7003,
                lists: ChunkListsRef {
                    reply: Some(&reply),
                    ..ChunkListsRef::EMPTY
                },
            }),
        }),
        NOMSG_REPLY
    );
}

#[test]
fn accepts_every_error_body() {
    let cases: [(&[u8], RdmaError); 6] = [
        (ERR_VERS, RdmaError::Vers { low: 1, high: 2 }),
        (ERR_BAD_XDR, RdmaError::BadXdr),
        (
            ERR_CANT_REPLY,
            RdmaError::CantReply {
                processed: true,
                segment_index: 2,
                length_needed: 8192,
            },
        ),
        (ERR_INVAL_PROC, RdmaError::InvalProc),
        (ERR_INVAL_OPTION, RdmaError::InvalOption),
        (ERR_UNKNOWN, RdmaError::Unknown(99)),
    ];
    for (buf, want) in cases {
        let h = dec(buf);
        assert_eq!(h.body, Body::Error(want));
        assert_eq!(h.direction(), Direction::Reply);
        assert_eq!(h.header_len, buf.len());
        assert_eq!(
            encode_vec(&Message {
                xid: h.xid,
                credits: 8,
                body: MessageBody::Error(want),
            }),
            buf
        );
        let mut out = [0u8; 32];
        let n = v2::encode_error(h.xid, 2, 8, &want, &mut out).unwrap();
        assert_eq!(&out[..n], buf);
    }
    assert_eq!(RdmaError::InvalOption.code(), ErrCode::InvalOption);
}

#[test]
fn accepts_err_vers_layout_shared_with_v1() {
    // RFC 8166 §7 fixes the ERR_VERS layout for every version.
    let mut out = [0u8; 28];
    let n = v1::encode_err_vers(0xbeef_0010, 2, 8, 1, 2, &mut out).unwrap();
    assert_eq!(&out[..n], ERR_VERS);
}

#[test]
fn accepts_optional_call_and_reply() {
    let h = dec(OPTIONAL_CALL);
    let want = Optional {
        optdir: Direction::Call,
        opttype: 0x101,
        optinfo: b"hello",
    };
    assert_eq!(h.body, Body::Optional(want));
    assert_eq!(h.direction(), Direction::Call);
    assert_eq!(h.header_len, 36);
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0020,
            credits: 8,
            body: MessageBody::Optional(want),
        }),
        OPTIONAL_CALL
    );

    let h = dec(OPTIONAL_REPLY);
    let want = Optional {
        optdir: Direction::Reply,
        opttype: 7,
        optinfo: &[],
    };
    assert_eq!(h.body, Body::Optional(want));
    assert_eq!((h.header_len, h.payload), (28, &OPTIONAL_REPLY[28..]));
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0021,
            credits: 8,
            body: MessageBody::Optional(want),
        }),
        &OPTIONAL_REPLY[..28]
    );
}

#[test]
fn accepts_reply_inv_handle_not_in_its_own_chunks() {
    // A reply copies the call's rdma_inv_handle; its own chunks need not contain it.
    let mut buf = MSG_REPLY_WRITES.to_vec();
    buf[20..24].copy_from_slice(&[0x00, 0x00, 0x99, 0x99]);
    assert_eq!(dec(&buf).chunks().unwrap().inv_handle, 0x9999);
}

#[test]
fn accepts_golden_reencoding_byte_for_byte() {
    for &(name, buf, len) in GOLDEN {
        let h = dec(buf);
        assert_eq!(h.header_len, len, "{name}");
        assert_eq!(reencode(&h), &buf[..len], "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation: decode never reads past `buf`.

#[test]
fn rejects_every_prefix_as_truncated() {
    for &(name, buf, len) in GOLDEN {
        let error_msg = dec(buf).proc() == Proc::Error;
        for cut in 0..len {
            let e = err_of(&buf[..cut]);
            let ok = if error_msg && cut >= 16 {
                matches!(e.kind, HeaderErrorKind::ErrorBodyMalformed { .. })
            } else {
                e.kind.is_truncated()
            };
            assert!(ok, "{name} cut at {cut}: {:?}", e.kind);
        }
        // RDMA2_MSG also needs the RPC XID and message type after the header.
        let min = if dec(buf).proc() == Proc::Msg {
            len + 8
        } else {
            len
        };
        for cut in len..min {
            assert!(matches!(
                err_of(&buf[..cut]).kind,
                HeaderErrorKind::MissingPayload { .. }
            ));
        }
        for cut in min..=buf.len() {
            assert!(v2::decode(&buf[..cut], &Limits::DEFAULT).is_ok());
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Property tests.

fn arb_segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), 0u32..=0x0fff_ffff, any::<u64>())
        .prop_map(|(h, l, o)| Segment::new(h, l, o.min(u64::MAX - u64::from(l))))
}

fn arb_reads(p0: bool, others: bool) -> impl Strategy<Value = Vec<ReadSegment>> {
    let p0_range = if p0 { 1..4usize } else { 0..1usize };
    let other_range = if others { 0..3usize } else { 0..1usize };
    (
        prop::collection::vec(arb_segment(), p0_range),
        prop::collection::vec(
            (0u32..64, prop::collection::vec(arb_segment(), 1..4)),
            other_range,
        ),
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
struct OwnedChunks {
    nomsg: bool,
    direction: Direction,
    inv_handle: u32,
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
}

#[derive(Debug, Clone)]
enum OwnedBody {
    Chunks(OwnedChunks),
    Error(RdmaError),
    Optional(Direction, u32, Vec<u8>),
}

fn arb_direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::Call), Just(Direction::Reply)]
}

/// Valid chunk-carrying bodies: rules on Position Zero, Reply chunk and inv_handle respected.
fn arb_chunks() -> impl Strategy<Value = OwnedChunks> {
    (
        any::<bool>(),
        arb_direction(),
        arb_reads(true, true),
        arb_reads(false, true),
        prop::collection::vec(prop::collection::vec(arb_segment(), 0..4), 0..4),
        prop::option::of(prop::collection::vec(arb_segment(), 0..4)),
        any::<prop::sample::Index>(),
        any::<u32>(),
    )
        .prop_map(
            |(nomsg, direction, with_p0, without_p0, writes, mut reply, pick, any_handle)| {
                let reads = match (direction, nomsg) {
                    (Direction::Reply, _) => vec![],
                    (_, true) => with_p0,
                    (_, false) => without_p0,
                };
                if nomsg && direction == Direction::Reply {
                    reply.get_or_insert_with(Vec::new);
                }
                let mut c = OwnedChunks {
                    nomsg,
                    direction,
                    inv_handle: 0,
                    reads,
                    writes,
                    reply,
                };
                let handles: Vec<u32> = c
                    .reads
                    .iter()
                    .map(|r| r.target.handle)
                    .chain(c.writes.iter().flatten().map(|s| s.handle))
                    .chain(c.reply.iter().flatten().map(|s| s.handle))
                    .collect();
                c.inv_handle = match direction {
                    Direction::Reply => any_handle,
                    _ if handles.is_empty() || pick.index(3) == 0 => 0,
                    _ => handles[pick.index(handles.len())],
                };
                c
            },
        )
}

fn arb_error() -> impl Strategy<Value = RdmaError> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| RdmaError::Vers { low, high }),
        Just(RdmaError::BadXdr),
        (any::<bool>(), any::<u32>(), any::<u32>()).prop_map(|(p, i, l)| {
            RdmaError::CantReply {
                processed: p,
                segment_index: i,
                length_needed: l,
            }
        }),
        Just(RdmaError::InvalProc),
        Just(RdmaError::InvalOption),
        (6u32..).prop_map(RdmaError::Unknown),
    ]
}

fn arb_body() -> impl Strategy<Value = OwnedBody> {
    prop_oneof![
        arb_chunks().prop_map(OwnedBody::Chunks),
        arb_error().prop_map(OwnedBody::Error),
        (
            arb_direction(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(d, t, i)| OwnedBody::Optional(d, t, i)),
    ]
}

fn encode_owned(xid: u32, credits: u32, body: &OwnedBody) -> (Vec<u8>, usize) {
    let (mut out, trailer) = match body {
        OwnedBody::Chunks(c) => {
            let wrefs: Vec<&[Segment]> = c.writes.iter().map(|w| w.as_slice()).collect();
            let lists = ChunkListsRef {
                reads: &c.reads,
                writes: &wrefs,
                reply: c.reply.as_deref(),
            };
            lists.validate(&ChunkLimits::DEFAULT).expect("generator");
            let r = ChunksRef {
                direction: c.direction,
                inv_handle: c.inv_handle,
                lists,
            };
            let msg = Message {
                xid,
                credits,
                body: if c.nomsg {
                    MessageBody::Nomsg(r)
                } else {
                    MessageBody::Msg(r)
                },
            };
            (encode_vec(&msg), !c.nomsg)
        }
        OwnedBody::Error(e) => (
            encode_vec(&Message {
                xid,
                credits,
                body: MessageBody::Error(*e),
            }),
            false,
        ),
        OwnedBody::Optional(d, t, info) => (
            encode_vec(&Message {
                xid,
                credits,
                body: MessageBody::Optional(Optional {
                    optdir: *d,
                    opttype: *t,
                    optinfo: info,
                }),
            }),
            false,
        ),
    };
    let header_len = out.len();
    if let (true, OwnedBody::Chunks(c)) = (trailer, body) {
        out.extend_from_slice(&xid.to_be_bytes());
        out.extend_from_slice(&c.direction.to_u32().to_be_bytes());
    }
    (out, header_len)
}

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
        let h = v2::decode(&buf, &Limits::DEFAULT).expect("decode of encoded header");
        prop_assert_eq!((h.xid, h.vers, h.credits), (xid, 2, credits));
        prop_assert_eq!(h.header_len, header_len);
        match (&body, h.body) {
            (OwnedBody::Chunks(o), Body::Msg(c) | Body::Nomsg(c)) => {
                prop_assert_eq!(o.nomsg, h.proc() == Proc::Nomsg);
                prop_assert_eq!(c.direction, o.direction);
                prop_assert_eq!(c.inv_handle, o.inv_handle);
                prop_assert_eq!(&reads_of(&c.lists), &o.reads);
                prop_assert_eq!(&writes_of(&c.lists), &o.writes);
                prop_assert_eq!(&reply_of(&c.lists), &o.reply);
            }
            (OwnedBody::Error(e), Body::Error(d)) => prop_assert_eq!(*e, d),
            (OwnedBody::Optional(d, t, i), Body::Optional(o)) => {
                prop_assert_eq!((*d, *t, &i[..]), (o.optdir, o.opttype, o.optinfo));
            }
            (want, got) => prop_assert!(false, "body {:?} decoded as {:?}", want, got),
        }
    }

    #[test]
    fn accepts_arbitrary_bytes_without_panic(buf in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = v2::decode(&buf, &Limits::DEFAULT);
    }

    #[test]
    fn accepts_structured_garbage_without_panic(
        xid in any::<u32>(),
        proc_ in 0u32..7,
        words in prop::collection::vec(arb_word(), 0..64),
    ) {
        let mut buf = Vec::new();
        for w in [xid, 2, 8, proc_].into_iter().chain(words) {
            buf.extend_from_slice(&w.to_be_bytes());
        }
        if let Ok(h) = v2::decode(&buf, &Limits::DEFAULT) {
            prop_assert_eq!(&reencode(&h)[..], &buf[..h.header_len]);
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
            match v2::decode(b, &Limits::DEFAULT) {
                Ok(h) => prop_assert_eq!(&reencode(&h)[..], &b[..h.header_len]),
                Err(e) => {
                    let _ = e.response();
                }
            }
        }
    }
}
