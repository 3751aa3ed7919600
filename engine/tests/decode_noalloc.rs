//! Decoding and encoding every wire format performs no heap allocation: a counting global
//! allocator wraps the system allocator and the test asserts the count does not move while the
//! codecs run (on valid input, on every rejected input class, and on encode).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rpcrdma_engine::proto::chunks::{ChunkLimits, ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::{private_data, v1, v2};
use rpcrdma_engine::rpc;

struct Counting;

thread_local! {
    /// Allocations made by this thread: the test harness's other threads (its main thread,
    /// output capture) allocate whenever they like and must not count against the codecs.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        bump();
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        bump();
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn count<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = ALLOCS.with(Cell::get);
    let r = f();
    (ALLOCS.with(Cell::get) - before, r)
}

#[test]
fn accepts_codecs_without_heap_allocation() {
    let seg = Segment::new;
    let reads = [
        ReadSegment::new(0, seg(1, 4096, 0x1000)),
        ReadSegment::new(0, seg(2, 13, 0x9000)),
    ];
    let w0 = [seg(3, 8192, 0x10000), seg(4, 4096, 0x20000)];
    let w1 = [seg(5, 4096, 0x30000)];
    let writes: [&[Segment]; 2] = [&w0, &w1];
    let reply = [seg(6, 4096, 0x40000)];
    let call = rpc::CallHeader {
        xid: 7,
        prog: 100_003,
        vers: 4,
        proc_num: 1,
        cred: rpc::OpaqueAuth::NONE,
        verf: rpc::OpaqueAuth::NONE,
    };
    let mut buf = [0u8; 2048];
    let mut rbuf = [0u8; 128];
    let limits = ChunkLimits::DEFAULT;

    let (allocs, (walked, ok)) = count(|| {
        let mut walked = 0usize;
        let mut ok = [false; 8];
        // v1: long call with Reply chunk, then RDMA_MSG with a Write list and an RPC payload.
        let m = v1::Message {
            xid: 7,
            credits: 32,
            body: v1::MessageBody::Nomsg(ChunkListsRef {
                reads: &reads,
                writes: &[],
                reply: Some(&reply),
            }),
        };
        let n = v1::encode(&m, &mut buf).unwrap();
        let h = v1::decode(&buf[..n], &limits).unwrap();
        walked += h.chunks().unwrap().segments().count();
        let m = v1::Message {
            xid: 7,
            credits: 32,
            body: v1::MessageBody::Msg(ChunkListsRef {
                reads: &[],
                writes: &writes,
                reply: None,
            }),
        };
        let n = v1::encode(&m, &mut buf).unwrap();
        let r = rpc::encode_call(&mut buf[n..], &call).unwrap();
        let h = v1::decode(&buf[..n + r], &limits).unwrap();
        for w in h.chunks().unwrap().writes.iter() {
            walked += w.segments().count();
        }
        let (msg, _) = rpc::decode(h.payload).unwrap();
        walked += matches!(msg, rpc::RpcMsg::Call(_)) as usize;
        // Rejections: bad version, truncated, garbage.
        let mut bad = buf;
        bad[4..8].copy_from_slice(&9u32.to_be_bytes());
        ok[2] = v1::decode(&bad[..n], &limits).is_err();
        ok[3] = v1::decode(&buf[..n - 3], &limits).is_err();
        ok[4] = v1::decode(&[0xff; 64], &limits).is_err();
        // v2.
        let m2 = v2::Message {
            xid: 8,
            credits: 16,
            body: v2::MessageBody::Msg(v2::ChunksRef {
                direction: v2::Direction::Call,
                inv_handle: 3,
                lists: ChunkListsRef {
                    reads: &[],
                    writes: &writes,
                    reply: None,
                },
            }),
        };
        let n = v2::encode(&m2, &mut buf).unwrap();
        let r = rpc::encode_call(&mut buf[n..], &rpc::CallHeader { xid: 8, ..call }).unwrap();
        let h2 = v2::decode(&buf[..n + r], &v2::Limits::DEFAULT).unwrap();
        ok[0] = h2.xid == 8;
        ok[5] = v2::decode(&[0u8; 40], &v2::Limits::DEFAULT).is_err();
        // RPC reply encode/decode.
        let n = rpc::encode_call(&mut rbuf, &call).unwrap();
        ok[6] = rpc::decode_call(&rbuf[..n]).is_ok();
        // Private data.
        let pd = private_data::PrivateData::v1(true, 4096, 4096).encode();
        let mut foreign = [0u8; 64];
        foreign[13..21].copy_from_slice(&pd);
        let peer = private_data::find(&foreign);
        ok[7] = peer.is_some();
        let neg = private_data::negotiate(&private_data::PrivateData::V1_DEFAULTS, peer.as_ref());
        ok[1] = neg.send_inline == 1024;
        (walked, ok)
    });
    assert_eq!(allocs, 0, "the codecs allocated {allocs} times");
    // 3 read+reply segments, 3 write segments and the RPC call walked; every check held.
    assert_eq!(walked, 3 + 3 + 1);
    assert_eq!(ok, [true; 8], "a codec check failed");
}

#[test]
fn accepts_iwarp_wire_layer_without_heap_allocation() {
    use rpcrdma_engine::verbs::iwarp::{mpa, rdmap};
    let pd = [0x5au8; 200];
    let payload = [0xa5u8; 300];
    let mut frame = [0u8; 1024];
    let mut out = [0u8; 1024];
    let (allocs, seen) = count(|| {
        let mut seen = 0usize;
        // MPA Request (revision 2, IRD/ORD word) encode + decode, then the rejected classes.
        let rr = mpa::RrFrame {
            kind: mpa::FrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            revision: mpa::REV_2,
            ird_ord: Some(mpa::IrdOrd {
                ird: 16,
                ord: 16,
                ..mpa::IrdOrd::default()
            }),
            ulp_private_data: &pd,
        };
        let n = mpa::encode_rr(&rr, &mut frame).unwrap();
        seen += usize::from(mpa::decode_rr(&frame[..n]) == Ok(rr));
        frame[0] ^= 1;
        seen += usize::from(mpa::decode_rr(&frame[..n]) == Err(mpa::MpaError::BadKey));
        // Every RDMAP message kind, framed with CRC, decoded back; then a CRC mismatch.
        let msgs = [
            rdmap::Message::Send {
                solicited: true,
                invalidate: Some(9),
                last: true,
                msn: 1,
                mo: 0,
                payload: &payload,
            },
            rdmap::Message::Tagged {
                read_response: false,
                last: true,
                stag: 3,
                to: 0x1000,
                payload: &payload,
            },
            rdmap::Message::ReadRequest(rdmap::ReadRequest {
                msn: 1,
                sink_stag: 1,
                sink_to: 2,
                size: 3,
                src_stag: 4,
                src_to: 5,
            }),
            rdmap::Message::Terminate(rdmap::Terminate {
                msn: 1,
                code: rdmap::TermCode::new(1, 1, 1),
                ddp_segment_len: Some(17),
                ddp_header: Some(&[0xc1, 0x40, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x10, 0]),
                rdmap_header: None,
            }),
        ];
        for m in &msgs {
            let n = rdmap::encode(m, &mut out[mpa::FPDU_HDR_LEN..]).unwrap();
            let total = mpa::seal_fpdu(&mut out, n, true).unwrap();
            let f = mpa::decode_fpdu(&out[..total], true, 1024).unwrap();
            seen += usize::from(rdmap::decode(f.ulpdu).as_ref() == Ok(m));
            out[total - 1] ^= 1;
            seen += usize::from(matches!(
                mpa::decode_fpdu(&out[..total], true, 1024),
                Err(mpa::MpaError::CrcMismatch { .. })
            ));
        }
        seen
    });
    assert_eq!(seen, 2 + 2 * 4);
    assert_eq!(allocs, 0);
}
