//! Golden vectors of the Version One codec tests, written by hand from the XDR of RFC 8166, and the
//! helpers that decode, re-encode and take them apart (test-only; they may allocate).

// Each test crate that includes this module uses a part of it.
#![allow(dead_code, unused_imports)]

pub use rpcrdma_engine::proto::chunks::{
    ChunkError, ChunkLimits, ChunkLists, ChunkListsRef, ReadSegment, Segment,
};
pub use rpcrdma_engine::proto::v1::{
    self, Body, Disposition, Header, HeaderErrorKind, Message, MessageBody, Proc, RdmaError,
    Response,
};
pub use rpcrdma_engine::xdr::XdrError;

// ---------------------------------------------------------------------------------------------
// Golden vectors.

/// Inline RDMA_MSG, all chunk lists empty, followed by the start of an RPC call.
pub const MSG_INLINE: &[u8] = &[
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
pub const MSG_READ_MID: &[u8] = &[
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
pub const NOMSG_P0: &[u8] = &[
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
pub const MSG_WRITES: &[u8] = &[
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
pub const NOMSG_REPLY_CHUNK: &[u8] = &[
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
pub const MSGP: &[u8] = &[
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
pub const DONE: &[u8] = &[
    0xca, 0xfe, 0x00, 0x07, // rdma_xid = 0xcafe0007
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x10, // rdma_credit = 16
    0x00, 0x00, 0x00, 0x03, // rdma_proc = RDMA_DONE
];

/// RDMA_ERROR / ERR_VERS reporting versions 1..=2.
pub const ERR_VERS: &[u8] = &[
    0xca, 0xfe, 0x00, 0x08, // rdma_xid = 0xcafe0008
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
    0x00, 0x00, 0x00, 0x01, // rdma_err = ERR_VERS
    0x00, 0x00, 0x00, 0x01, // rdma_vers_low = 1
    0x00, 0x00, 0x00, 0x02, // rdma_vers_high = 2
];

/// RDMA_ERROR / ERR_CHUNK.
pub const ERR_CHUNK: &[u8] = &[
    0xca, 0xfe, 0x00, 0x09, // rdma_xid = 0xcafe0009
    0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
    0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
    0x00, 0x00, 0x00, 0x04, // rdma_proc = RDMA_ERROR
    0x00, 0x00, 0x00, 0x02, // rdma_err = ERR_CHUNK
];

/// Every golden vector with its transport-header length.
pub const GOLDEN: &[(&str, &[u8], usize)] = &[
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

pub fn dec(buf: &[u8]) -> Header<'_> {
    v1::decode(buf, &ChunkLimits::DEFAULT).expect("valid header")
}

pub fn err_of(buf: &[u8]) -> v1::HeaderError {
    err_with(buf, &ChunkLimits::DEFAULT)
}

pub fn err_with(buf: &[u8], limits: &ChunkLimits) -> v1::HeaderError {
    match v1::decode(buf, limits) {
        Ok(h) => panic!("accepted an invalid header: {h:?}"),
        Err(e) => e,
    }
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

/// Re-encodes a decoded header from its views; `None` for RDMA_DONE (not encodable).
pub fn reencode(h: &Header<'_>) -> Option<Vec<u8>> {
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

pub fn encode_vec(msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; v1::encoded_len(msg)];
    let n = v1::encode(msg, &mut out).expect("encode");
    assert_eq!(n, out.len(), "encoded_len disagrees with encode");
    out
}
