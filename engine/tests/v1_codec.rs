//! RPC-over-RDMA Version One codec: golden vectors written by hand from the XDR in Appendix A of
//! the implementation-experience draft (`rpcrdma1_msg`), truncation, and property tests (the
//! validation rules are in `v1_codec_rules.rs`).

use proptest::prelude::*;

mod v1_vectors;
use v1_vectors::*;

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
