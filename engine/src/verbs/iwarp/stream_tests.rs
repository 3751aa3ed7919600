//! Tests of FPDU reassembly, segmentation and the transmit buffer: golden vectors written from
//! RFC 5044 / RFC 5041 / RFC 5040, rejects, and a property test over random read boundaries.

use super::*;
use proptest::prelude::*;

/// An FPDU carrying a Send of "hi" (MSN 1, MO 0, L), CRCs off.
#[rustfmt::skip]
const SEND_HI: [u8; 28] = [
    // RFC 5044: ULPDU_Length = 20 (18-octet untagged DDP header + 2 payload octets).
    0x00, 0x14,
    // RFC 5041 untagged header: T=0, L=1, DV=1; RFC 5040 control: RV=1, opcode Send (3).
    0x41, 0x43,
    // Reserved for the ULP (0), QN 0, MSN 1, MO 0.
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00,
    // Payload "hi".
    0x68, 0x69,
    // RFC 5044 pad: (2 + 20) mod 4 = 2, so 2 zero octets; CRC field zero with CRCs off.
    0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
];

fn send(msn: u32, payload: &[u8]) -> Message<'_> {
    Message::Send {
        solicited: false,
        invalidate: None,
        last: true,
        msn,
        mo: 0,
        payload,
    }
}

/// Every ULPDU `rx` has ready, copied out.
fn drain(rx: &mut RxStream) -> Result<Vec<Vec<u8>>, StreamError> {
    let mut out = Vec::new();
    while let Some(u) = rx.next_ulpdu()? {
        out.push(u.to_vec());
    }
    Ok(out)
}

#[test]
fn accepts_the_golden_send_fpdu() {
    let mut out = [0u8; 64];
    let n = encode_message(&send(1, b"hi"), 1024, false, &mut out).unwrap();
    assert_eq!(&out[..n], &SEND_HI);
    let mut rx = RxStream::new(1024);
    assert_eq!(rx.feed(&SEND_HI), SEND_HI.len());
    let u = rx.next_ulpdu().unwrap().unwrap();
    assert_eq!(u, &SEND_HI[2..22]);
    assert_eq!(rdmap::decode(u).unwrap(), send(1, b"hi"));
    assert_eq!(rx.next_ulpdu(), Ok(None));
}

#[test]
fn accepts_a_header_split_across_reads() {
    let mut rx = RxStream::new(1024);
    rx.feed(&SEND_HI[..1]);
    assert_eq!(rx.next_ulpdu(), Ok(None));
    rx.feed(&SEND_HI[1..17]);
    assert_eq!(rx.next_ulpdu(), Ok(None));
    rx.feed(&SEND_HI[17..]);
    assert_eq!(rx.next_ulpdu().unwrap().unwrap(), &SEND_HI[2..22]);
}

#[test]
fn accepts_several_fpdus_in_one_read_with_crc() {
    let mut out = [0u8; 256];
    let mut n = 0;
    for msn in 1..=3 {
        n += encode_message(&send(msn, b"abcde"), 1024, true, &mut out[n..]).unwrap();
    }
    let mut rx = RxStream::new(1024);
    rx.set_crc(true);
    let spare = rx.spare();
    spare[..n].copy_from_slice(&out[..n]);
    rx.filled(n);
    let got = drain(&mut rx).unwrap();
    assert_eq!(got.len(), 3);
    for (i, u) in got.iter().enumerate() {
        assert_eq!(rdmap::decode(u).unwrap(), send(i as u32 + 1, b"abcde"));
    }
}

#[test]
fn rejects_a_crc_mismatch_for_good() {
    let mut out = [0u8; 64];
    let n = encode_message(&send(1, b"hi"), 1024, true, &mut out).unwrap();
    out[20] ^= 0x01;
    let mut rx = RxStream::new(1024);
    rx.set_crc(true);
    rx.feed(&out[..n]);
    let err = rx.next_ulpdu().unwrap_err();
    assert!(matches!(err, StreamError::Crc { .. }));
    assert_eq!(
        err.terminate_code(),
        TermCode::new(LAYER_LLP, mpa::TERM_ETYPE_MPA, mpa::TERM_ECODE_CRC)
    );
    // A good FPDU after it is never read: the error is terminal.
    rx.feed(&SEND_HI);
    assert_eq!(rx.next_ulpdu(), Err(err));
    assert_eq!(rx.error(), Some(err));
}

#[test]
fn rejects_a_ulpdu_length_over_the_limit() {
    let mut rx = RxStream::new(16);
    rx.feed(&SEND_HI);
    let err = rx.next_ulpdu().unwrap_err();
    assert_eq!(err, StreamError::UlpduTooLong(20));
    assert_eq!(err.terminate_code().ecode, mpa::TERM_ECODE_FPDU_START);
}

#[test]
fn accepts_a_send_split_at_the_peer_maximum_ulpdu() {
    let payload: Vec<u8> = (0..100u8).collect();
    // 18-octet header + 32 payload octets per segment: 4 segments (32, 32, 32, 4).
    let msg = send(7, &payload);
    let len = message_wire_len(&msg, 50).unwrap();
    let mut out = vec![0u8; len];
    assert_eq!(encode_message(&msg, 50, true, &mut out), Ok(len));
    let mut rx = RxStream::new(50);
    rx.set_crc(true);
    rx.feed(&out);
    let got = drain(&mut rx).unwrap();
    assert_eq!(got.len(), 4);
    let mut joined = Vec::new();
    for (i, u) in got.iter().enumerate() {
        assert!(u.len() <= 50);
        let Message::Send {
            last,
            msn,
            mo,
            payload,
            ..
        } = rdmap::decode(u).unwrap()
        else {
            panic!("not a Send");
        };
        assert_eq!((last, msn, mo as usize), (i == 3, 7, joined.len()));
        joined.extend_from_slice(payload);
    }
    assert_eq!(joined, payload);
}

#[test]
fn accepts_a_tagged_message_split_with_advancing_offsets() {
    let payload = [0xaau8; 40];
    let msg = Message::Tagged {
        read_response: true,
        last: true,
        stag: 0x1234,
        to: 0x1000,
        payload: &payload,
    };
    let mut out = [0u8; 256];
    let n = encode_message(&msg, 14 + 16, false, &mut out).unwrap();
    let mut rx = RxStream::new(30);
    rx.feed(&out[..n]);
    let tos: Vec<(u64, bool)> = drain(&mut rx)
        .unwrap()
        .iter()
        .map(|u| match rdmap::decode(u).unwrap() {
            Message::Tagged { to, last, .. } => (to, last),
            _ => panic!("not tagged"),
        })
        .collect();
    assert_eq!(tos, [(0x1000, false), (0x1010, false), (0x1020, true)]);
}

#[test]
fn accepts_an_empty_send_as_one_segment() {
    let mut out = [0u8; 64];
    let n = encode_message(&send(2, b""), 64, false, &mut out).unwrap();
    assert_eq!(n, mpa::fpdu_len(18));
}

#[test]
fn rejects_a_peer_maximum_too_small_and_a_short_buffer() {
    let mut out = [0u8; 16];
    assert_eq!(
        encode_message(&send(1, b"x"), 18, false, &mut out),
        Err(SegmentError::MulpduTooSmall(18))
    );
    assert!(matches!(
        encode_message(&send(1, b"x"), 64, false, &mut out),
        Err(SegmentError::NoSpace { .. })
    ));
    let rr = Message::ReadRequest(rdmap::ReadRequest {
        msn: 1,
        sink_stag: 1,
        sink_to: 0,
        size: 8,
        src_stag: 2,
        src_to: 0,
    });
    assert_eq!(
        message_wire_len(&rr, 40),
        Err(SegmentError::TooLongForOneSegment)
    );
}

#[test]
fn accepts_partial_writes_in_order() {
    let mut tx = TxBuffer::new(16);
    assert!(tx.push(b"abcdef"));
    assert_eq!(tx.pending(), b"abcdef");
    tx.written(4);
    assert_eq!(tx.pending(), b"ef");
    assert!(tx.push(b"0123456789abcd"));
    assert!(!tx.push(b"x"));
    tx.written(16);
    assert!(tx.is_empty());
}

proptest! {
    /// Any split of a stream of FPDUs into reads yields the same ULPDUs.
    #[test]
    fn accepts_any_read_boundaries(
        sizes in proptest::collection::vec(0usize..300, 1..12),
        cuts in proptest::collection::vec(1usize..200, 1..40),
        crc in any::<bool>(),
    ) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..s).map(|k| (k * 7 + i) as u8).collect();
            let msg = send(i as u32, &payload);
            let n = message_wire_len(&msg, 128).unwrap();
            let mut buf = vec![0u8; n];
            encode_message(&msg, 128, crc, &mut buf).unwrap();
            let mut at = 0;
            while at < n {
                let len = usize::from(u16::from_be_bytes([buf[at], buf[at + 1]]));
                want.push(buf[at + 2..at + 2 + len].to_vec());
                at += mpa::fpdu_len(len);
            }
            wire.extend_from_slice(&buf);
        }
        let mut rx = RxStream::new(128);
        rx.set_crc(crc);
        let mut got = Vec::new();
        let (mut at, mut c) = (0, 0);
        while at < wire.len() {
            let step = cuts[c % cuts.len()].min(wire.len() - at);
            c += 1;
            let spare = rx.spare();
            let step = step.min(spare.len());
            spare[..step].copy_from_slice(&wire[at..at + step]);
            rx.filled(step);
            at += step;
            got.extend(drain(&mut rx).unwrap());
        }
        prop_assert_eq!(got, want);
    }
}
