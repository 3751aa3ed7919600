//! RPC-over-RDMA Version Two codec: golden vectors written by hand from the XDR of
//! draft-cel-nfsv4-rpcrdma-version-two-02 (`rpcrdma2_xprt_hdr`), truncation, and property
//! tests (the validation rules are in `v2_codec_rules.rs`).

use proptest::prelude::*;

mod v2_vectors;
use v2_vectors::*;

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

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// RDMA2_MSG call with every list at once, word by word from `rpcrdma2_chunk_lists`: a Read
/// chunk of two segments at XDR position 120 and one of one segment at 248 (where the first
/// chunk's 128 octets end), two Write chunks, a Reply chunk; `rdma_inv_handle` names the
/// second Write chunk's handle.
#[test]
fn accepts_msg_call_with_every_list_from_hand_written_words() {
    let mut buf = words(&[
        0xbeef_0030, // rdma_xid
        2,           // rdma_vers
        4,           // rdma_credit
        0,           // rdma_proc = RDMA2_MSG
        0,           // rdma_direction = CALL
        0x8102,      // rdma_inv_handle
        1,           // rdma_reads: entry follows
        120,         //   rdma_position
        0x8001,      //   rdma_handle
        100,         //   rdma_length
        1,           //   rdma_offset (high word)
        0,           //   rdma_offset (low word) = 0x1_0000_0000
        1,           // rdma_next: entry follows
        120,         //   rdma_position (same chunk)
        0x8002,      //   rdma_handle
        28,          //   rdma_length
        0,           //   rdma_offset (high word)
        0x2000,      //   rdma_offset (low word)
        1,           // rdma_next: entry follows
        248,         //   rdma_position (next chunk)
        0x8003,      //   rdma_handle
        4,           //   rdma_length
        0,           //   rdma_offset (high word)
        0x3000,      //   rdma_offset (low word)
        0,           // rdma_next: end of Read list
        1,           // rdma_writes: entry follows
        1,           //   rdma_target<>: 1 segment
        0x8101,      //     rdma_handle
        8192,        //     rdma_length
        0,           //     rdma_offset (high word)
        0x4000,      //     rdma_offset (low word)
        1,           // rdma_next: entry follows
        1,           //   rdma_target<>: 1 segment
        0x8102,      //     rdma_handle
        512,         //     rdma_length
        0,           //     rdma_offset (high word)
        0x6000,      //     rdma_offset (low word)
        0,           // rdma_next: end of Write list
        1,           // rdma_reply: present
        1,           //   rdma_target<>: 1 segment
        0x8103,      //     rdma_handle
        1024,        //     rdma_length
        0,           //     rdma_offset (high word)
        0x7000,      //     rdma_offset (low word)
    ]);
    let header_len = buf.len();
    assert_eq!(header_len, 44 * 4);
    buf.extend_from_slice(&words(&[0xbeef_0030, 0])); // RPC xid, msg_type = CALL
    let h = dec(&buf);
    assert_eq!((h.xid, h.vers, h.credits), (0xbeef_0030, 2, 4));
    assert_eq!((h.header_len, h.payload), (header_len, &buf[header_len..]));
    let c = h.chunks().unwrap();
    assert_eq!((c.direction, c.inv_handle), (Direction::Call, 0x8102));
    let reads = [
        ReadSegment::new(120, Segment::new(0x8001, 100, 0x1_0000_0000)),
        ReadSegment::new(120, Segment::new(0x8002, 28, 0x2000)),
        ReadSegment::new(248, Segment::new(0x8003, 4, 0x3000)),
    ];
    assert_eq!(reads_of(&c.lists), reads);
    let w0 = [Segment::new(0x8101, 8192, 0x4000)];
    let w1 = [Segment::new(0x8102, 512, 0x6000)];
    assert_eq!(writes_of(&c.lists), vec![w0.to_vec(), w1.to_vec()]);
    let reply = [Segment::new(0x8103, 1024, 0x7000)];
    assert_eq!(reply_of(&c.lists), Some(reply.to_vec()));
    let writes: [&[Segment]; 2] = [&w0, &w1];
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0030,
            credits: 4,
            body: MessageBody::Msg(ChunksRef {
                direction: Direction::Call,
                inv_handle: 0x8102,
                lists: ChunkListsRef {
                    reads: &reads,
                    writes: &writes,
                    reply: Some(&reply),
                },
            }),
        }),
        &buf[..header_len]
    );
}

/// `rpcrdma2_err_reply` with `rdma_processed` FALSE (bool 0) and `rdma_segment_index` 0 ("not
/// possible to determine which segment was too small").
#[test]
fn accepts_cant_reply_not_processed_from_hand_written_words() {
    let buf = words(&[
        0xbeef_0031, // rdma_xid
        2,           // rdma_vers
        1,           // rdma_credit
        4,           // rdma_proc = RDMA2_ERROR
        3,           // rdma_err = RDMA2_ERR_CANT_REPLY
        0,           // rdma_processed = FALSE
        0,           // rdma_segment_index
        0x1234,      // rdma_length_needed
    ]);
    let want = RdmaError::CantReply {
        processed: false,
        segment_index: 0,
        length_needed: 0x1234,
    };
    let h = dec(&buf);
    assert_eq!((h.body, h.header_len), (Body::Error(want), 32));
    let mut out = [0u8; 32];
    let n = v2::encode_error(0xbeef_0031, 2, 1, &want, &mut out).unwrap();
    assert_eq!(&out[..n], &buf[..]);
}

/// RDMA2_OPTIONAL whose `rdma_optinfo` is a multiple of four octets (no pad), followed by the
/// start of the RPC Call it carries (`rdma_optdir` CALL, as its `msg_type`).
#[test]
fn accepts_optional_without_pad_carrying_a_call_from_hand_written_words() {
    let mut buf = words(&[
        0xbeef_0032, // rdma_xid
        2,           // rdma_vers
        1,           // rdma_credit
        5,           // rdma_proc = RDMA2_OPTIONAL
        0,           // rdma_optdir = CALL
        0xabc,       // rdma_opttype
        8,           // rdma_optinfo: length 8
        0x0102_0304, //   octets 1-4
        0x0506_0708, //   octets 5-8 (no pad)
    ]);
    buf.extend_from_slice(&words(&[0xbeef_0032, 0])); // RPC xid, msg_type = CALL
    let h = dec(&buf);
    let want = Optional {
        optdir: Direction::Call,
        opttype: 0xabc,
        optinfo: &[1, 2, 3, 4, 5, 6, 7, 8],
    };
    assert_eq!(h.body, Body::Optional(want));
    assert_eq!((h.header_len, h.payload), (36, &buf[36..]));
    assert_eq!(
        encode_vec(&Message {
            xid: 0xbeef_0032,
            credits: 1,
            body: MessageBody::Optional(want),
        }),
        &buf[..36]
    );
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
