//! Tests of the MPA connection setup state machine: golden frames written from RFC 5044 /
//! RFC 6581, both roles driven against each other octet by octet, and every error.

use super::*;

/// RFC 8797 private data: format identifier f6ab0e18, version 1, R, sizes 0 (1 KiB each).
const RPCRDMA_PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00];

/// The initiator's Request for IRD 16, ORD 8, CRCs wanted, carrying [`RPCRDMA_PD`].
#[rustfmt::skip]
const REQUEST: [u8; 32] = [
    // RFC 5044 connection setup: Key "MPA ID Req Frame".
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
    0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    // M=0, C=1 (0x40), R=0, enhanced (0x10); Rev 2 (RFC 6581); PD_Length 12.
    0x50, 0x02, 0x00, 0x0c,
    // RFC 6581 word: A=0, B=0, IRD=16 | C=0, D=0, ORD=8.
    0x00, 0x10, 0x00, 0x08,
    0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00,
];

fn cfg(want_crc: bool) -> Config {
    Config {
        ird: 16,
        ord: 8,
        want_crc,
        timeout_ns: 1_000,
    }
}

/// Everything `h` has to send.
fn output(h: &mut Handshake) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 7];
    loop {
        let n = h.poll_output(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Feeds `bytes` one octet at a time; returns the octets consumed.
fn feed_slowly(h: &mut Handshake, bytes: &[u8]) -> usize {
    bytes.iter().map(|b| h.handle_input(0, &[*b])).sum()
}

#[test]
fn accepts_the_golden_request() {
    let mut i = Handshake::initiator(0, cfg(true), &RPCRDMA_PD).unwrap();
    assert_eq!(output(&mut i), REQUEST);
    assert!(!i.has_output());
    assert_eq!(i.status(), Status::InProgress);
}

#[test]
fn accepts_a_full_exchange_octet_by_octet() {
    let mut i = Handshake::initiator(0, cfg(false), &RPCRDMA_PD).unwrap();
    let mut r = Handshake::responder(
        0,
        Config {
            ird: 4,
            ord: 2,
            ..cfg(true)
        },
    );
    let req = output(&mut i);
    assert_eq!(feed_slowly(&mut r, &req), req.len());
    assert_eq!(r.status(), Status::RequestReceived);
    assert_eq!(r.peer_private_data(), RPCRDMA_PD);
    assert!(!r.peer_wants_crc());
    let got = r.negotiated().unwrap();
    assert_eq!(got.peer_ird_ord.map(|w| (w.ird, w.ord)), Some((16, 8)));
    r.accept(b"server").unwrap();
    assert_eq!(r.status(), Status::Established);
    let rep = output(&mut r);
    // The Reply: key, C set (the responder asked: the decision), enhanced, revision 2.
    assert_eq!(&rep[..16], &mpa::KEY_REP);
    assert_eq!((rep[16], rep[17]), (0x50, 2));
    assert_eq!(feed_slowly(&mut i, &rep), rep.len());
    assert_eq!(i.status(), Status::Established);
    assert_eq!(i.peer_private_data(), b"server");
    let n = i.negotiated().unwrap();
    assert!(n.crc);
    assert_eq!(n.peer_ird_ord.map(|w| (w.ird, w.ord)), Some((4, 2)));
    assert_eq!(i.poll_timeout(), None);
}

#[test]
fn accepts_crc_when_either_side_asks() {
    for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut i = Handshake::initiator(0, cfg(a), &[]).unwrap();
        let mut r = Handshake::responder(0, cfg(b));
        let req = output(&mut i);
        r.handle_input(0, &req);
        r.accept(&[]).unwrap();
        let rep = output(&mut r);
        assert_eq!(rep[16] & mpa::FLAG_CRC != 0, a || b, "reply C for {a} {b}");
        i.handle_input(0, &rep);
        assert_eq!(i.negotiated().unwrap().crc, a || b);
        assert_eq!(r.negotiated().unwrap().crc, a || b);
    }
}

#[test]
fn accepts_fpdus_after_the_reply_in_the_same_read() {
    let mut i = Handshake::initiator(0, cfg(true), &[]).unwrap();
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &output(&mut i));
    r.accept(&RPCRDMA_PD).unwrap();
    let mut wire = output(&mut r);
    let reply_len = wire.len();
    wire.extend_from_slice(&[0x00, 0x02, 0xaa, 0xbb, 0, 0, 0, 0]);
    assert_eq!(i.handle_input(0, &wire), reply_len);
    assert_eq!(i.status(), Status::Established);
    // Later input is left alone too.
    assert_eq!(i.handle_input(0, &wire[reply_len..]), 0);
}

#[test]
fn accepts_a_revision_1_request_with_a_revision_1_reply() {
    let mut req = [0u8; 20];
    let frame = RrFrame {
        kind: FrameKind::Request,
        markers: false,
        crc: false,
        reject: false,
        revision: mpa::REV_1,
        ird_ord: None,
        ulp_private_data: &[],
    };
    mpa::encode_rr(&frame, &mut req).unwrap();
    let mut r = Handshake::responder(0, cfg(false));
    r.handle_input(0, &req);
    r.accept(&[]).unwrap();
    let rep = output(&mut r);
    assert_eq!((rep[16], rep[17], rep.len()), (0x00, 1, 20));
}

#[test]
fn rejects_with_private_data() {
    let mut i = Handshake::initiator(0, cfg(true), &RPCRDMA_PD).unwrap();
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &output(&mut i));
    r.reject(b"no").unwrap();
    assert_eq!(r.status(), Status::Rejected);
    let rep = output(&mut r);
    assert_ne!(rep[16] & mpa::FLAG_REJECT, 0);
    i.handle_input(0, &rep);
    assert_eq!(i.status(), Status::Rejected);
    assert_eq!(i.peer_private_data(), b"no");
    assert_eq!(i.negotiated(), None);
    assert_eq!(r.accept(&[]), Err(HandshakeError::NotAwaitingDecision));
}

#[test]
fn rejects_markers_with_a_rejecting_reply() {
    let mut req = REQUEST;
    req[16] |= mpa::FLAG_MARKERS;
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &req);
    assert_eq!(r.status(), Status::Failed(HandshakeError::MarkersRequired));
    let rep = output(&mut r);
    assert_eq!(&rep[..16], &mpa::KEY_REP);
    assert_ne!(rep[16] & mpa::FLAG_REJECT, 0);
    // An initiator given a Reply with M closes.
    let mut i = Handshake::initiator(0, cfg(true), &[]).unwrap();
    let mut rep = rep;
    rep[16] = mpa::FLAG_MARKERS | mpa::FLAG_ENHANCED;
    i.handle_input(0, &rep);
    assert_eq!(i.status(), Status::Failed(HandshakeError::MarkersRequired));
}

#[test]
fn rejects_the_wrong_key() {
    let mut i = Handshake::initiator(0, cfg(true), &[]).unwrap();
    i.handle_input(0, &REQUEST);
    assert_eq!(i.status(), Status::Failed(HandshakeError::WrongKey));
    let mut bad = REQUEST;
    bad[3] = b'X';
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &bad);
    assert_eq!(
        r.status(),
        Status::Failed(HandshakeError::Mpa(MpaError::BadKey))
    );
    assert!(!r.has_output());
}

#[test]
fn rejects_an_over_long_frame_after_its_header() {
    let mut req = REQUEST;
    req[18..20].copy_from_slice(&513u16.to_be_bytes());
    let mut r = Handshake::responder(0, cfg(true));
    assert_eq!(r.handle_input(0, &req), 20);
    assert_eq!(
        r.status(),
        Status::Failed(HandshakeError::Mpa(MpaError::BadPrivateDataLength(513)))
    );
}

#[test]
fn rejects_revision_2_without_the_ird_ord_word_and_revision_3() {
    let mut req = REQUEST;
    req[16] &= !mpa::FLAG_ENHANCED;
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &req);
    assert_eq!(r.status(), Status::Failed(HandshakeError::MissingIrdOrd));
    req[17] = 3;
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &req);
    assert_eq!(
        r.status(),
        Status::Failed(HandshakeError::Mpa(MpaError::BadRevision(3)))
    );
}

#[test]
fn rejects_private_data_over_252_octets() {
    let pd = [0u8; 253];
    assert_eq!(
        Handshake::initiator(0, cfg(true), &pd).unwrap_err(),
        HandshakeError::PrivateDataTooLong(253)
    );
    assert!(Handshake::initiator(0, cfg(true), &pd[..252]).is_ok());
    let mut r = Handshake::responder(0, cfg(true));
    r.handle_input(0, &REQUEST);
    assert_eq!(r.accept(&pd), Err(HandshakeError::PrivateDataTooLong(253)));
    assert_eq!(r.status(), Status::RequestReceived);
}

#[test]
fn rejects_data_before_the_reply() {
    let mut wire = REQUEST.to_vec();
    wire.extend_from_slice(&[0, 2, 1, 2, 0, 0, 0, 0]);
    let mut r = Handshake::responder(0, cfg(true));
    let n = r.handle_input(0, &wire);
    assert_eq!(n, REQUEST.len());
    r.handle_input(0, &wire[n..]);
    assert_eq!(r.status(), Status::Failed(HandshakeError::UnexpectedData));
}

#[test]
fn rejects_a_handshake_past_its_deadline() {
    let mut i = Handshake::initiator(500, cfg(true), &[]).unwrap();
    assert_eq!(i.poll_timeout(), Some(1_500));
    i.handle_timeout(1_499);
    assert_eq!(i.status(), Status::InProgress);
    i.handle_timeout(1_500);
    assert_eq!(i.status(), Status::Failed(HandshakeError::Timeout));
    // Input after the deadline is not taken.
    let mut r = Handshake::responder(0, cfg(true));
    assert_eq!(r.handle_input(2_000, &REQUEST), 0);
    assert_eq!(r.status(), Status::Failed(HandshakeError::Timeout));
}

/// Linux siw's MPA Request as `siw_connect` (drivers/infiniband/sw/siw/siw_cm.c) writes it with
/// its defaults (`mpa_version` 2, `mpa_crc_required`, `try_gso` and `peer_to_peer` off): the
/// flags octet holds only the enhanced bit, the word carries rdma_cm's responder_resources and
/// initiator_depth (here 16 and 8), then the caller's private data.
#[rustfmt::skip]
const SIW_REQUEST: [u8; 32] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
    0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    // MPA_RR_FLAG_ENHANCED only (C clear), revision 2, PD_Length 4 + 8.
    0x10, 0x02, 0x00, 0x0c,
    // struct mpa_v2_data: htons(ird), htons(ord).
    0x00, 0x10, 0x00, 0x08,
    0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00,
];

#[test]
fn accepts_linux_siws_request_with_the_reply_siw_requires() {
    let mut r = Handshake::responder(0, cfg(true));
    assert_eq!(feed_slowly(&mut r, &SIW_REQUEST), SIW_REQUEST.len());
    assert_eq!(r.status(), Status::RequestReceived);
    assert!(!r.peer_wants_crc());
    assert_eq!(r.peer_private_data(), RPCRDMA_PD);
    let got = r.negotiated().unwrap();
    assert_eq!((got.peer_revision, got.crc), (2, true));
    assert_eq!(got.peer_ird_ord.map(|w| (w.ird, w.ord)), Some((16, 8)));
    r.set_ird_ord(8, 16);
    r.accept(b"ok").unwrap();
    // siw_proc_mpareply() refuses a Reply to its enhanced Request unless it is revision 2 with
    // MPA_RR_FLAG_ENHANCED; it takes C (CRCs both ways) unless `mpa_crc_strict` is set.
    #[rustfmt::skip]
    let want: [u8; 26] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
        0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
        0x50, 0x02, 0x00, 0x06,
        0x00, 0x08, 0x00, 0x10,
        b'o', b'k',
    ];
    assert_eq!(output(&mut r), want);
}

#[test]
fn accepts_linux_siws_reply_echoing_the_request_flags() {
    let mut i = Handshake::initiator(0, cfg(true), &RPCRDMA_PD).unwrap();
    assert_eq!(output(&mut i), REQUEST);
    // siw_proc_mpareq() turns the Request into its Reply: the key replaced, the flags and the
    // revision kept (C stays set), the word holding siw_accept()'s IRD and ORD (the ORD no
    // more than our IRD), then the accept's private data.
    #[rustfmt::skip]
    let reply: [u8; 28] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
        0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
        0x50, 0x02, 0x00, 0x08,
        0x00, 0x04, 0x00, 0x08,
        0x52, 0x50, 0x46, 0x31,
    ];
    assert_eq!(feed_slowly(&mut i, &reply), reply.len());
    assert_eq!(i.status(), Status::Established);
    assert_eq!(i.peer_private_data(), b"RPF1");
    let n = i.negotiated().unwrap();
    assert_eq!((n.crc, n.peer_revision), (true, 2));
    assert_eq!(n.peer_ird_ord.map(|w| (w.ird, w.ord)), Some((4, 8)));
}

#[test]
fn rejects_on_linux_siws_refusing_reply() {
    let mut i = Handshake::initiator(0, cfg(true), &RPCRDMA_PD).unwrap();
    output(&mut i);
    // siw's reject_conn path: the Request's flags with R added, M cleared, and (its Request
    // was enhanced) a word of zeros as the only private data.
    let mut reply = [0u8; 24];
    reply[..16].copy_from_slice(&mpa::KEY_REP);
    reply[16..20].copy_from_slice(&[0x70, 0x02, 0x00, 0x04]);
    i.handle_input(0, &reply);
    assert_eq!(i.status(), Status::Rejected);
    assert_eq!(i.negotiated(), None);
}
