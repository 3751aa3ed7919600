//! Tests of the RDMAP layer: golden vectors written from RFC 5040 / RFC 5041 / RFC 5044, rejects,
//! and an encode→decode round trip through MPA framing.

use super::super::mpa;
use super::*;
use proptest::prelude::*;

/// A complete FPDU carrying a Send of "hi!!" with CRC.
#[rustfmt::skip]
const FPDU_SEND: [u8; 28] = [
    // RFC 5044 FPDU format: ULPDU_Length = 22 (18-octet untagged DDP header + 4 payload octets);
    // (2 + 22) mod 4 = 0, so no pad.
    0x00, 0x16,
    // RFC 5041 §4.1: T=0, L=1, DV=1 => 0x41.
    // RFC 5040 RDMAP control field: RV=1, opcode 3 (Send) => 0x43.
    0x41, 0x43,
    // RFC 5040 Send header: the 32 RsvdULP bits are reserved for a plain Send (zero).
    0x00, 0x00, 0x00, 0x00,
    // RFC 5041 §4.3: QN 0 (RFC 5040: the Send queue), MSN 1, MO 0.
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00,
    // Payload "hi!!".
    0x68, 0x69, 0x21, 0x21,
    // CRC32c over the 24 octets above, least significant octet first, computed bit by bit
    // independently of this code.
    0xd3, 0xac, 0xeb, 0xc7,
];

/// RDMA Write, one segment (ULPDU only).
#[rustfmt::skip]
const WRITE: [u8; 17] = [
    // RFC 5041 §4.1: T=1, L=1, DV=1 => 0xc1. RFC 5040 RDMAP control field: RV=1, opcode 0 => 0x40.
    0xc1, 0x40,
    // RFC 5041 §4.2: STag 0xdeadbeef, TO 0x0000000100000020.
    0xde, 0xad, 0xbe, 0xef,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x20,
    // Payload.
    0x01, 0x02, 0x03,
];

/// RDMA Read Request (ULPDU only).
#[rustfmt::skip]
const READ_REQUEST: [u8; 46] = [
    // T=0, L=1, DV=1; RV=1, opcode 1 (Read Request).
    0x41, 0x41,
    // Reserved.
    0x00, 0x00, 0x00, 0x00,
    // RFC 5040 message definitions: QN 1; MSN 5; MO 0.
    0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x00,
    // RFC 5040 Read Request header: Data Sink STag 0x00000100, Data Sink TO 0x1000,
    0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,
    // RDMA Read Message Size 65536,
    0x00, 0x01, 0x00, 0x00,
    // Data Source STag 0x00000200, Data Source TO 0xffffffff00000000.
    0x00, 0x00, 0x02, 0x00,
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
];

/// Send with Solicited Event and Invalidate, not last (ULPDU only).
#[rustfmt::skip]
const SEND_SE_INV: [u8; 19] = [
    // T=0, L=0, DV=1 => 0x01; RV=1, opcode 6 => 0x46.
    0x01, 0x46,
    // RFC 5040 Send header: Invalidate STag 0xcafe0001.
    0xca, 0xfe, 0x00, 0x01,
    // QN 0, MSN 9, MO 8192.
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x09,
    0x00, 0x00, 0x20, 0x00,
    // Payload.
    0x7a,
];

/// Terminate for a base/bounds violation of the RDMA Write above (ULPDU only).
#[rustfmt::skip]
const TERMINATE: [u8; 38] = [
    // T=0, L=1, DV=1; RV=1, opcode 7 (Terminate).
    0x41, 0x47,
    // Reserved; QN 2 (RFC 5040, RDMA message definitions); MSN 1; MO 0.
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00,
    // RFC 5040 Terminate header, Terminate Control: Layer 1 (DDP), EType 1 (tagged buffer), Error
    // Code 0x01 (base or bounds violation), M=1, D=1, R=0, reserved 0.
    0x11, 0x01, 0xc0, 0x00,
    // DDP Segment Length of the offending segment: 17.
    0x00, 0x11,
    // Terminated DDP header: the 14-octet tagged header of WRITE.
    0xc1, 0x40, 0xde, 0xad, 0xbe, 0xef,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x20,
];

fn round_trip(bytes: &[u8]) {
    let m = decode(bytes).unwrap();
    let mut out = [0u8; 128];
    let n = encode(&m, &mut out).unwrap();
    assert_eq!(&out[..n], bytes);
}

#[test]
fn accepts_golden_send_in_fpdu() {
    let f = mpa::decode_fpdu(&FPDU_SEND, true, 1024).unwrap();
    assert_eq!(f.len, 28);
    let m = decode(f.ulpdu).unwrap();
    assert_eq!(
        m,
        Message::Send {
            solicited: false,
            invalidate: None,
            last: true,
            msn: 1,
            mo: 0,
            payload: b"hi!!"
        }
    );
    let mut out = [0u8; 64];
    let n = encode(&m, &mut out[2..]).unwrap();
    assert_eq!(mpa::seal_fpdu(&mut out, n, true), Ok(28));
    assert_eq!(out[..28], FPDU_SEND);
}

#[test]
fn accepts_golden_write() {
    let m = decode(&WRITE).unwrap();
    assert_eq!(
        m,
        Message::Tagged {
            read_response: false,
            last: true,
            stag: 0xdead_beef,
            to: 0x1_0000_0020,
            payload: &[1, 2, 3]
        }
    );
    round_trip(&WRITE);
}

#[test]
fn accepts_golden_read_response() {
    let mut b = WRITE;
    b[1] = 0x42;
    b[0] = 0x81; // not last
    assert!(matches!(
        decode(&b),
        Ok(Message::Tagged {
            read_response: true,
            last: false,
            ..
        })
    ));
    round_trip(&b);
}

#[test]
fn accepts_golden_read_request() {
    assert_eq!(
        decode(&READ_REQUEST),
        Ok(Message::ReadRequest(ReadRequest {
            msn: 5,
            sink_stag: 0x100,
            sink_to: 0x1000,
            size: 65536,
            src_stag: 0x200,
            src_to: 0xffff_ffff_0000_0000,
        }))
    );
    round_trip(&READ_REQUEST);
}

#[test]
fn accepts_golden_send_variants() {
    assert_eq!(
        decode(&SEND_SE_INV),
        Ok(Message::Send {
            solicited: true,
            invalidate: Some(0xcafe_0001),
            last: false,
            msn: 9,
            mo: 8192,
            payload: &[0x7a]
        })
    );
    round_trip(&SEND_SE_INV);
    // Opcode 4 (Send with Invalidate) and 5 (Send with Solicited Event).
    let mut b = SEND_SE_INV;
    b[1] = 0x44;
    assert!(matches!(
        decode(&b),
        Ok(Message::Send {
            solicited: false,
            invalidate: Some(0xcafe_0001),
            ..
        })
    ));
    round_trip(&b);
    b[1] = 0x45;
    b[2..6].fill(0);
    assert!(matches!(
        decode(&b),
        Ok(Message::Send {
            solicited: true,
            invalidate: None,
            ..
        })
    ));
    round_trip(&b);
}

#[test]
fn accepts_golden_terminate() {
    let Ok(Message::Terminate(t)) = decode(&TERMINATE) else {
        panic!("not a Terminate");
    };
    assert_eq!(
        t.code,
        TermCode::new(LAYER_DDP, ddp::ETYPE_TAGGED, ddp::ECODE_T_BASE_BOUNDS)
    );
    assert_eq!((t.msn, t.ddp_segment_len), (1, Some(17)));
    assert_eq!(t.ddp_header, Some(&WRITE[..14]));
    assert_eq!(t.rdmap_header, None);
    assert!(ddp::decode(t.ddp_header.unwrap())
        .unwrap()
        .header
        .is_tagged());
    round_trip(&TERMINATE);
}

#[test]
fn accepts_terminate_with_read_request_headers() {
    // Remote protection error (RDMAP layer 0, etype 1, invalid STag), M, D and R set: the
    // offending Read Request's 18-octet DDP header and 28-octet RDMAP header follow.
    let mut b = [0u8; 18 + 4 + 2 + 46];
    b[..18].copy_from_slice(&TERMINATE[..18]);
    b[18..22].copy_from_slice(&[0x01, 0x00, 0xe0, 0x00]);
    b[22..24].copy_from_slice(&28u16.to_be_bytes());
    b[24..].copy_from_slice(&READ_REQUEST);
    let Ok(Message::Terminate(t)) = decode(&b) else {
        panic!("not a Terminate");
    };
    assert_eq!(t.code, TermCode::new(0, 1, 0));
    assert_eq!(t.ddp_header, Some(&READ_REQUEST[..18]));
    assert_eq!(t.rdmap_header, Some(&READ_REQUEST[18..]));
    round_trip(&b);
}

#[test]
fn accepts_terminate_catastrophic_without_headers() {
    let mut b = [0u8; 22];
    b[..18].copy_from_slice(&TERMINATE[..18]);
    b[18..22].copy_from_slice(&[0x00, 0xff, 0x00, 0x00]);
    let Ok(Message::Terminate(t)) = decode(&b) else {
        panic!("not a Terminate");
    };
    assert_eq!(
        (t.ddp_segment_len, t.ddp_header, t.rdmap_header),
        (None, None, None)
    );
    round_trip(&b);
}

#[test]
fn rejects_bad_rdmap_version() {
    for rv in [0u8, 2, 3] {
        let mut b = WRITE;
        b[1] = rv << 6; // opcode 0, RDMA Write
        let e = decode(&b).unwrap_err();
        assert_eq!(e, RdmapError::BadVersion(rv));
        assert_eq!(e.terminate_code(), TermCode::new(0, 2, 0x05));
    }
}

#[test]
fn rejects_unknown_opcodes_after_decoding_them() {
    for op in 8u8..16 {
        let mut b = SEND_SE_INV;
        b[1] = 0x40 | op;
        let e = decode(&b).unwrap_err();
        assert_eq!(e, RdmapError::UnknownOpcode(Opcode(op)));
        assert_eq!(e.terminate_code(), TermCode::new(0, 2, 0x06));
    }
}

#[test]
fn rejects_opcode_in_wrong_model() {
    let mut b = WRITE;
    b[1] = 0x43; // Send, tagged
    assert_eq!(decode(&b), Err(RdmapError::WrongModel(Opcode::SEND)));
    let mut b = SEND_SE_INV;
    b[1] = 0x40; // Write, untagged
    assert_eq!(decode(&b), Err(RdmapError::WrongModel(Opcode::WRITE)));
}

#[test]
fn rejects_wrong_queue() {
    let mut b = SEND_SE_INV;
    b[9] = 1;
    let e = decode(&b).unwrap_err();
    assert_eq!(
        e,
        RdmapError::WrongQueue {
            opcode: Opcode::SEND_SE_INVALIDATE,
            qn: 1
        }
    );
    assert_eq!(e.terminate_code(), TermCode::new(1, 2, 0x01));
}

#[test]
fn rejects_malformed_read_requests() {
    assert_eq!(decode(&READ_REQUEST[..45]), Err(RdmapError::BadReadRequest));
    let mut b = READ_REQUEST;
    b[0] = 0x01; // not last
    assert_eq!(decode(&b), Err(RdmapError::BadReadRequest));
    let mut b = READ_REQUEST;
    b[17] = 4; // MO 4
    assert_eq!(decode(&b), Err(RdmapError::BadReadRequest));
}

#[test]
fn rejects_malformed_terminates() {
    // Control word cut short.
    assert_eq!(decode(&TERMINATE[..21]), Err(RdmapError::BadTerminate));
    // Included DDP header cut short.
    assert_eq!(decode(&TERMINATE[..37]), Err(RdmapError::BadTerminate));
    // R without D.
    let mut b = TERMINATE;
    b[20] = 0xa0;
    assert_eq!(decode(&b), Err(RdmapError::BadTerminate));
    // R with a Read Request DDP header but no RDMAP header.
    let mut b = [0u8; 18 + 4 + 2 + 18];
    b[..18].copy_from_slice(&TERMINATE[..18]);
    b[18..22].copy_from_slice(&[0x01, 0x00, 0xe0, 0x00]);
    b[24..].copy_from_slice(&READ_REQUEST[..18]);
    assert_eq!(decode(&b), Err(RdmapError::BadTerminate));
}

#[test]
fn rejects_inconsistent_terminate_on_encode() {
    let t = Terminate {
        msn: 1,
        code: TermCode::new(0, 1, 0),
        ddp_segment_len: None,
        ddp_header: None,
        rdmap_header: Some(&[]),
    };
    assert_eq!(
        encode(&Message::Terminate(t), &mut [0u8; 64]),
        Err(RdmapError::Unencodable)
    );
    let t = Terminate {
        ddp_header: Some(&WRITE[..13]),
        rdmap_header: None,
        ..t
    };
    assert_eq!(
        encode(&Message::Terminate(t), &mut [0u8; 64]),
        Err(RdmapError::Unencodable)
    );
    let t = Terminate {
        code: TermCode::new(0x10, 0, 0),
        ddp_header: None,
        ..t
    };
    assert_eq!(
        encode(&Message::Terminate(t), &mut [0u8; 64]),
        Err(RdmapError::Unencodable)
    );
}

#[test]
fn rejects_ddp_errors_and_small_output() {
    assert_eq!(
        decode(&WRITE[..10]),
        Err(RdmapError::Ddp(DdpError::Truncated {
            needed: 14,
            have: 10
        }))
    );
    let m = decode(&WRITE).unwrap();
    assert_eq!(
        encode(&m, &mut [0u8; 16]),
        Err(RdmapError::NoSpace {
            needed: 17,
            capacity: 16
        })
    );
}

fn arb_terminate() -> impl Strategy<Value = (u32, TermCode, Option<u16>, u8, Vec<u8>)> {
    (
        any::<u32>(),
        (0u8..16, 0u8..16, any::<u8>()).prop_map(|(l, e, c)| TermCode::new(l, e, c)),
        proptest::option::of(any::<u16>()),
        0u8..4, // 0: no headers, 1: tagged D, 2: untagged D, 3: Read Request D + R
        proptest::collection::vec(any::<u8>(), 46),
    )
}

fn arb_message() -> impl Strategy<Value = (u8, bool, bool, u32, u64, u32, u32, Vec<u8>)> {
    (
        0u8..4,
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #[test]
    fn accepts_round_trip_through_mpa(
        (kind, a, b, x, y, z, w, payload) in arb_message(),
        (tmsn, code, seg_len, hdrs, raw) in arb_terminate(),
        crc in any::<bool>(),
    ) {
        let mut hdr = raw.clone();
        let msg = match kind {
            0 => Message::Tagged { read_response: a, last: b, stag: x, to: y, payload: &payload },
            1 => Message::ReadRequest(ReadRequest {
                msn: x, sink_stag: z, sink_to: y, size: w, src_stag: z ^ w, src_to: !y,
            }),
            2 => Message::Send {
                solicited: a, invalidate: b.then_some(z), last: a ^ b, msn: x, mo: w,
                payload: &payload,
            },
            _ => {
                let (d, r): (Option<&[u8]>, Option<&[u8]>) = match hdrs {
                    0 => (None, None),
                    1 => { hdr[0] = 0xc1; (Some(&hdr[..14]), None) }
                    2 => { hdr[0] = 0x41; hdr[1] = 0x43; (Some(&hdr[..18]), Some(&hdr[18..18])) }
                    _ => { hdr[0] = 0x41; hdr[1] = 0x41; (Some(&hdr[..18]), Some(&hdr[18..46])) }
                };
                Message::Terminate(Terminate {
                    msn: tmsn, code, ddp_segment_len: seg_len, ddp_header: d, rdmap_header: r,
                })
            }
        };
        let mut out = vec![0u8; mpa::fpdu_len(encoded_len(&msg))];
        let n = encode(&msg, &mut out[mpa::FPDU_HDR_LEN..]).unwrap();
        prop_assert_eq!(n, encoded_len(&msg));
        let total = mpa::seal_fpdu(&mut out, n, crc).unwrap();
        prop_assert_eq!(total, out.len());
        let f = mpa::decode_fpdu(&out, crc, mpa::MAX_ULPDU).unwrap();
        prop_assert_eq!(decode(f.ulpdu), Ok(msg));
    }
}
