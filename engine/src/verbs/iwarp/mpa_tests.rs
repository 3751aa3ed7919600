//! Tests of the MPA layer: golden vectors written from RFC 5044 / RFC 6581, rejects, and
//! encode→decode round trips.

use super::*;
use proptest::prelude::*;

/// An MPA Request, revision 2, enhanced, C set, carrying RFC 8797 private data.
#[rustfmt::skip]
const REQ_REV2: [u8; 32] = [
    // RFC 5044 connection setup: Key "MPA ID Req Frame".
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
    0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    // Flags: M=0, C=1 (0x40), R=0, enhanced (0x10) => 0x50; Rev = 2 (RFC 6581).
    0x50, 0x02,
    // PD_Length = 12: the 4-octet IRD/ORD word + 8 octets of RFC 8797 private data.
    0x00, 0x0c,
    // RFC 6581 IRD/ORD word: A=1, B=0, IRD=16 | C=1, D=0, ORD=8.
    0x80, 0x10, 0x80, 0x08,
    // RFC 8797: format identifier f6ab0e18, version 1, R flag, sizes 0 (1 KiB each).
    0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00,
];

/// An MPA Reply, revision 1, R set (rejected), no private data.
#[rustfmt::skip]
const REP_REJECT_REV1: [u8; 20] = [
    // RFC 5044 connection setup: Key "MPA ID Rep Frame".
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
    0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    // Flags: R (0x20); Rev = 1; PD_Length = 0.
    0x20, 0x01, 0x00, 0x00,
];

/// An FPDU carrying the 3-octet ULPDU "abc" with CRC (RFC 5044, FPDU format).
#[rustfmt::skip]
const FPDU_ABC: [u8; 12] = [
    // ULPDU_Length = 3.
    0x00, 0x03,
    // ULPDU.
    0x61, 0x62, 0x63,
    // PAD: (2 + 3) mod 4 = 1, so 3 zero octets.
    0x00, 0x00, 0x00,
    // CRC32c over the 8 octets above, transmitted least significant octet first (RFC 3720
    // Appendix B.4 order), computed bit by bit independently of this module.
    0x59, 0x23, 0x97, 0x12,
];

#[test]
fn accepts_golden_request_rev2_enhanced() {
    assert_eq!(rr_len(&REQ_REV2), Ok(32));
    let f = decode_rr(&REQ_REV2).unwrap();
    assert_eq!(f.kind, FrameKind::Request);
    assert!(f.crc && !f.markers && !f.reject);
    assert_eq!(f.revision, 2);
    assert_eq!(
        f.ird_ord,
        Some(IrdOrd {
            ird: 16,
            ord: 8,
            peer_to_peer: true,
            rtr_send: false,
            rtr_write: true,
            rtr_read: false,
        })
    );
    assert_eq!(f.ulp_private_data(), &REQ_REV2[24..]);
    let pd = crate::proto::private_data::decode(f.ulp_private_data()).unwrap();
    assert!(pd.remote_invalidate);
    let mut out = [0u8; 64];
    assert_eq!(encode_rr(&f, &mut out), Ok(32));
    assert_eq!(out[..32], REQ_REV2);
}

#[test]
fn accepts_golden_reply_reject_rev1() {
    let f = decode_rr(&REP_REJECT_REV1).unwrap();
    assert_eq!(f.kind, FrameKind::Reply);
    assert!(f.reject && !f.crc && !f.markers);
    assert_eq!((f.revision, f.ird_ord), (1, None));
    assert!(f.ulp_private_data().is_empty());
    let mut out = [0u8; 20];
    assert_eq!(encode_rr(&f, &mut out), Ok(20));
    assert_eq!(out, REP_REJECT_REV1);
}

#[test]
fn accepts_rev2_without_enhanced_flag_as_plain_private_data() {
    let mut b = REQ_REV2;
    b[16] = FLAG_CRC;
    let f = decode_rr(&b).unwrap();
    assert_eq!(f.ird_ord, None);
    assert_eq!(f.ulp_private_data().len(), 12);
}

#[test]
fn accepts_reserved_bits_ignored() {
    let mut b = REP_REJECT_REV1;
    b[16] |= 0x0f;
    let f = decode_rr(&b).unwrap();
    assert!(f.reject && f.ird_ord.is_none());
}

#[test]
fn accepts_trailing_octets_left_alone() {
    let mut b = [0u8; 40];
    b[..20].copy_from_slice(&REP_REJECT_REV1);
    b[20] = 0xee;
    assert_eq!(rr_len(&b), Ok(20));
    assert!(decode_rr(&b).unwrap().ulp_private_data().is_empty());
}

#[test]
fn rejects_bad_key() {
    let mut b = REP_REJECT_REV1;
    b[9] = b'x';
    assert_eq!(decode_rr(&b), Err(MpaError::BadKey));
}

#[test]
fn rejects_bad_revisions() {
    for rev in [0u8, 3, 0xff] {
        let mut b = REP_REJECT_REV1;
        b[17] = rev;
        assert_eq!(decode_rr(&b), Err(MpaError::BadRevision(rev)));
    }
}

#[test]
fn rejects_private_data_over_512() {
    let mut b = [0u8; 20 + 600];
    b[..20].copy_from_slice(&REP_REJECT_REV1);
    b[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert_eq!(rr_len(&b), Err(MpaError::BadPrivateDataLength(513)));
    assert_eq!(decode_rr(&b), Err(MpaError::BadPrivateDataLength(513)));
    b[18..20].copy_from_slice(&512u16.to_be_bytes());
    assert_eq!(decode_rr(&b).unwrap().ulp_private_data().len(), 512);
}

#[test]
fn rejects_enhanced_frame_too_short_for_ird_ord() {
    let mut b = [0u8; 22];
    b[..20].copy_from_slice(&REQ_REV2[..20]);
    b[18..20].copy_from_slice(&2u16.to_be_bytes());
    assert_eq!(decode_rr(&b), Err(MpaError::BadPrivateDataLength(2)));
}

#[test]
fn rejects_truncated_frames_as_incomplete() {
    assert_eq!(
        decode_rr(&REQ_REV2[..19]),
        Err(MpaError::Incomplete { needed: 20 })
    );
    assert_eq!(
        decode_rr(&REQ_REV2[..31]),
        Err(MpaError::Incomplete { needed: 32 })
    );
}

#[test]
fn rejects_markers_required() {
    let mut b = REP_REJECT_REV1;
    b[16] = FLAG_MARKERS;
    let f = decode_rr(&b).unwrap();
    assert_eq!(check_markers(&f), Err(MpaError::MarkersRequired));
    assert_eq!(check_markers(&decode_rr(&REQ_REV2).unwrap()), Ok(()));
}

#[test]
fn rejects_encode_of_ird_ord_with_rev1_and_oversized_private_data() {
    let mut f = decode_rr(&REQ_REV2).unwrap();
    f.revision = 1;
    assert_eq!(encode_rr(&f, &mut [0u8; 64]), Err(MpaError::BadRevision(1)));
    let big = [0u8; 509];
    let f = RrFrame {
        ulp_private_data: &big,
        ..decode_rr(&REQ_REV2).unwrap()
    };
    assert_eq!(
        encode_rr(&f, &mut [0u8; 600]),
        Err(MpaError::BadPrivateDataLength(513))
    );
    let f = RrFrame {
        ulp_private_data: &big[..508],
        ..f
    };
    assert_eq!(encode_rr(&f, &mut [0u8; 600]), Ok(532));
    assert_eq!(
        encode_rr(&f, &mut [0u8; 100]),
        Err(MpaError::NoSpace {
            needed: 532,
            capacity: 100
        })
    );
}

#[test]
fn accepts_crc_negotiation_either_side() {
    assert!(!negotiate_crc(false, false));
    assert!(negotiate_crc(true, false));
    assert!(negotiate_crc(false, true));
    assert!(negotiate_crc(true, true));
}

#[test]
fn accepts_golden_fpdu_with_crc() {
    let f = decode_fpdu(&FPDU_ABC, true, 1024).unwrap();
    assert_eq!((f.ulpdu, f.len), (&b"abc"[..], 12));
    let mut out = [0xffu8; 16];
    assert_eq!(encode_fpdu(b"abc", true, &mut out), Ok(12));
    assert_eq!(out[..12], FPDU_ABC);
}

#[test]
fn accepts_fpdu_without_crc_zero_field_unchecked() {
    let mut out = [0xffu8; 12];
    assert_eq!(encode_fpdu(b"abc", false, &mut out), Ok(12));
    assert_eq!(out[8..], [0, 0, 0, 0]);
    let mut b = FPDU_ABC;
    b[9] ^= 0xff;
    assert_eq!(decode_fpdu(&b, false, 1024).unwrap().ulpdu, b"abc");
}

#[test]
fn accepts_pad_lengths() {
    assert_eq!(
        (pad_len(2), pad_len(3), pad_len(4), pad_len(5)),
        (0, 3, 2, 1)
    );
    for n in 0..64 {
        assert_eq!(fpdu_len(n) % 4, 0);
        assert!(fpdu_len(n) - n - 6 < 4);
    }
}

#[test]
fn rejects_crc_mismatch_with_distinct_error() {
    for at in 0..FPDU_ABC.len() {
        let mut b = FPDU_ABC;
        b[at] ^= 0x01;
        match decode_fpdu(&b, true, 1024) {
            Err(MpaError::CrcMismatch { received, computed }) => assert_ne!(received, computed),
            // Flipping the length's low bit changes the frame's extent.
            Err(MpaError::Incomplete { .. }) | Ok(_) if at < 2 => {}
            other => panic!("flip at {at}: {other:?}"),
        }
    }
}

#[test]
fn rejects_ulpdu_over_limit_before_sizing() {
    let b = [0xff, 0xff, 0, 0];
    assert_eq!(
        decode_fpdu(&b, true, 4096),
        Err(MpaError::UlpduTooLong(0xffff))
    );
    assert_eq!(
        decode_fpdu(&FPDU_ABC, true, 2),
        Err(MpaError::UlpduTooLong(3))
    );
}

#[test]
fn rejects_seal_of_oversized_ulpdu() {
    let mut buf = vec![0u8; fpdu_len(MAX_ULPDU + 1)];
    assert_eq!(
        seal_fpdu(&mut buf, MAX_ULPDU + 1, true),
        Err(MpaError::UlpduTooLong(0xffff))
    );
    assert_eq!(
        seal_fpdu(&mut buf, MAX_ULPDU, true),
        Ok(fpdu_len(MAX_ULPDU))
    );
}

#[test]
fn accepts_ird_ord_clamped_to_14_bits() {
    let w = IrdOrd {
        ird: 0xffff,
        ord: 0x4000,
        ..IrdOrd::default()
    };
    assert_eq!(w.to_bytes(), [0x3f, 0xff, 0x3f, 0xff]);
    assert_eq!(IrdOrd::from_bytes(&w.to_bytes()).ird, IRD_ORD_MAX);
}

#[test]
fn rejects_truncated_fpdu_as_incomplete() {
    assert_eq!(
        decode_fpdu(&FPDU_ABC[..1], true, 64),
        Err(MpaError::Incomplete { needed: 2 })
    );
    assert_eq!(
        decode_fpdu(&FPDU_ABC[..11], true, 64),
        Err(MpaError::Incomplete { needed: 12 })
    );
    assert_eq!(
        encode_fpdu(b"abc", true, &mut [0u8; 11]),
        Err(MpaError::NoSpace {
            needed: 12,
            capacity: 11
        })
    );
}

proptest! {
    #[test]
    fn accepts_rr_round_trip(
        reply in any::<bool>(), m in any::<bool>(), c in any::<bool>(), r in any::<bool>(),
        enhanced in any::<bool>(), ird in 0u16..=0x3fff, ord in 0u16..=0x3fff,
        a in any::<bool>(), bb in any::<bool>(), cc in any::<bool>(), d in any::<bool>(),
        pd in proptest::collection::vec(any::<u8>(), 0..=508),
    ) {
        let f = RrFrame {
            kind: if reply { FrameKind::Reply } else { FrameKind::Request },
            markers: m, crc: c, reject: r,
            revision: if enhanced { REV_2 } else { REV_1 },
            ird_ord: enhanced.then_some(IrdOrd {
                ird, ord, peer_to_peer: a, rtr_send: bb, rtr_write: cc, rtr_read: d,
            }),
            ulp_private_data: &pd,
        };
        let mut out = [0u8; RR_HDR_LEN + MAX_PRIVATE_DATA];
        let n = encode_rr(&f, &mut out).unwrap();
        prop_assert_eq!(rr_len(&out[..n]), Ok(n));
        prop_assert_eq!(decode_rr(&out[..n]), Ok(f));
    }

    #[test]
    fn accepts_fpdu_round_trip(
        ulpdu in proptest::collection::vec(any::<u8>(), 0..600), crc in any::<bool>(),
    ) {
        let mut out = vec![0u8; fpdu_len(ulpdu.len()) + 3];
        let n = encode_fpdu(&ulpdu, crc, &mut out).unwrap();
        prop_assert_eq!(n, fpdu_len(ulpdu.len()));
        let f = decode_fpdu(&out, crc, MAX_ULPDU).unwrap();
        prop_assert_eq!(f.ulpdu, &ulpdu[..]);
        prop_assert_eq!(f.len, n);
    }
}
