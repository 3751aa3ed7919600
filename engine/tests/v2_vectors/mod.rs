//! Golden vectors of the Version Two codec tests, written by hand from the XDR of the draft, and the
//! helpers that decode, re-encode and take them apart (test-only; they may allocate).

// Each test crate that includes this module uses a part of it.
#![allow(dead_code, unused_imports)]

pub use rpcrdma_engine::proto::chunks::{
    ChunkError, ChunkLimits, ChunkLists, ChunkListsRef, ReadSegment, Segment,
};
pub use rpcrdma_engine::proto::v2::{
    self, Body, ChunksRef, Direction, ErrCode, Header, HeaderErrorKind, Limits, Message,
    MessageBody, Optional, Proc, RdmaError, Response,
};
pub use rpcrdma_engine::proto::{peek, v1};

// ---------------------------------------------------------------------------------------------
// Golden vectors.

/// RDMA2_MSG call, no chunks, nothing to invalidate; then the start of the RPC call.
pub const MSG_CALL_INLINE: &[u8] = &[
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
pub const MSG_CALL_READ: &[u8] = &[
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
pub const MSG_REPLY_WRITES: &[u8] = &[
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
pub const NOMSG_CALL_P0: &[u8] = &[
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
pub const NOMSG_REPLY: &[u8] = &[
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
pub const ERR_VERS: &[u8] = &[
    0xbe, 0xef, 0x00, 0x10, // rdma_xid = 0xbeef0010
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x01, // rdma_err = RDMA2_ERR_VERS
    0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
    0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
];

/// RDMA2_ERROR / RDMA2_ERR_BAD_XDR.
pub const ERR_BAD_XDR: &[u8] = &[
    0xbe, 0xef, 0x00, 0x11, // rdma_xid = 0xbeef0011
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x02, // rdma_err = RDMA2_ERR_BAD_XDR
];

/// RDMA2_ERROR / RDMA2_ERR_CANT_REPLY: found after processing, second segment needs 8192.
pub const ERR_CANT_REPLY: &[u8] = &[
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
pub const ERR_INVAL_PROC: &[u8] = &[
    0xbe, 0xef, 0x00, 0x13, // rdma_xid = 0xbeef0013
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x04, // rdma_err = RDMA2_ERR_INVAL_PROC
];

/// RDMA2_ERROR / RDMA2_ERR_INVAL_OPTION.
pub const ERR_INVAL_OPTION: &[u8] = &[
    0xbe, 0xef, 0x00, 0x14, // rdma_xid = 0xbeef0014
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x05, // rdma_err = RDMA2_ERR_INVAL_OPTION
];

/// RDMA2_ERROR with an error code this revision does not define.
pub const ERR_UNKNOWN: &[u8] = &[
    0xbe, 0xef, 0x00, 0x15, // rdma_xid = 0xbeef0015
    0x00, 0x00, 0x00, 0x02, // rdma_vers = 2
    0x00, 0x00, 0x00, 0x08, // rdma_credit = 8
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA2_ERROR
    0x00, 0x00, 0x00, 0x63, // rdma_err = 99
];

/// RDMA2_OPTIONAL call, type 0x101, five octets of optinfo, no payload.
pub const OPTIONAL_CALL: &[u8] = &[
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
pub const OPTIONAL_REPLY: &[u8] = &[
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
pub const GOLDEN: &[(&str, &[u8], usize)] = &[
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

pub fn dec(buf: &[u8]) -> Header<'_> {
    v2::decode(buf, &Limits::DEFAULT).expect("valid header")
}

pub fn err_with(buf: &[u8], limits: &Limits) -> v2::HeaderError {
    match v2::decode(buf, limits) {
        Ok(h) => panic!("accepted an invalid header: {h:?}"),
        Err(e) => e,
    }
}

pub fn err_of(buf: &[u8]) -> v2::HeaderError {
    err_with(buf, &Limits::DEFAULT)
}

pub fn reads_of(c: &ChunkLists<'_>) -> Vec<ReadSegment> {
    c.reads.iter().collect()
}

pub fn writes_of(c: &ChunkLists<'_>) -> Vec<Vec<Segment>> {
    c.writes.iter().map(|w| w.segments().collect()).collect()
}

pub fn reply_of(c: &ChunkLists<'_>) -> Option<Vec<Segment>> {
    c.reply.map(|r| r.segments().collect())
}

pub fn encode_vec(msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; v2::encoded_len(msg)];
    let n = v2::encode(msg, &mut out).expect("encode");
    assert_eq!(n, out.len(), "encoded_len disagrees with encode");
    out
}

/// Re-encodes a decoded header from its views.
pub fn reencode(h: &Header<'_>) -> Vec<u8> {
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

pub fn response_bytes(r: Response, credits: u32) -> Vec<u8> {
    let mut out = [0u8; 64];
    let n = r.encode(credits, 1, 2, &mut out).unwrap();
    out[..n].to_vec()
}
