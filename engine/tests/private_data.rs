//! RFC 8797 private data: golden vectors, rules, and properties.

use proptest::prelude::*;
use rpcrdma_engine::proto::private_data::{
    clamp_size, decode, decode_size, encode_size, find, negotiate, negotiate_raw,
    representable_size, search, Negotiated, PdError, PrivateData, FORMAT_ID, MAX_SIZE, MIN_SIZE,
    MSG_LEN,
};

/// Linux client connect request (captured over siw): R set, 4096 / 4096.
const LINUX_CLIENT: [u8; 8] = [
    0xf6, 0xab, 0x0e, 0x18, // format identifier
    0x01, // version 1
    0x01, // flags: R (low-order bit)
    0x03, // send size: (3 + 1) * 1024 = 4096
    0x03, // receive size: 4096
];

/// Linux server accept: R clear, 4096 / 4096.
const LINUX_SERVER: [u8; 8] = [
    0xf6, 0xab, 0x0e, 0x18, // format identifier
    0x01, // version 1
    0x00, // flags: no R
    0x03, // send size 4096
    0x03, // receive size 4096
];

/// RFC 8797 §5.1: what a peer without private data is treated as having sent.
const RFC_DEFAULTS: [u8; 8] = [
    0xf6, 0xab, 0x0e, 0x18, // format identifier
    0x01, // version 1
    0x00, // flags: R (bit 15 of the word) zero
    0x00, // send size 0 -> 1024
    0x00, // receive size 0 -> 1024
];

/// RFC 8797 §4.2 upper end: 262144 octets both ways, R set.
const RFC_MAX: [u8; 8] = [
    0xf6, 0xab, 0x0e, 0x18, // format identifier
    0x01, // version 1
    0x01, // flags: R
    0xff, // send size (255 + 1) * 1024 = 262144
    0xff, // receive size 262144
];

/// A filler that can never form the identifier.
const FILL: u8 = 0x5a;

#[test]
fn accepts_linux_client_golden() {
    let pd = decode(&LINUX_CLIENT).unwrap();
    assert_eq!(pd, PrivateData::v1(true, 4096, 4096));
    assert_eq!(PrivateData::v1(true, 4096, 4096).encode(), LINUX_CLIENT);
}

#[test]
fn accepts_linux_server_golden() {
    let pd = decode(&LINUX_SERVER).unwrap();
    assert_eq!(pd, PrivateData::v1(false, 4096, 4096));
    assert_eq!(PrivateData::v1(false, 4096, 4096).encode(), LINUX_SERVER);
}

/// RFC 8797 §4.2: a size octet carries `(size / 1024) - 1`, so 1024..=262144 octets; a
/// configured threshold is kept in that range, not rounded.
#[test]
fn accepts_clamp_size_into_the_representable_range() {
    assert_eq!(clamp_size(0), 1024);
    assert_eq!(clamp_size(1023), 1024);
    assert_eq!(clamp_size(1500), 1500);
    assert_eq!(clamp_size(262_144), 262_144);
    assert_eq!(clamp_size(262_145), 262_144);
    assert_eq!(clamp_size(u32::MAX), 262_144);
}

#[test]
fn accepts_rfc_default_and_max_vectors() {
    assert_eq!(decode(&RFC_DEFAULTS).unwrap(), PrivateData::V1_DEFAULTS);
    assert_eq!(PrivateData::V1_DEFAULTS.encode(), RFC_DEFAULTS);
    assert_eq!(
        decode(&RFC_MAX).unwrap(),
        PrivateData::v1(true, 262_144, 262_144)
    );
    assert_eq!(PrivateData::v1(true, 262_144, 262_144).encode(), RFC_MAX);
}

#[test]
fn accepts_asymmetric_sizes_in_field_order() {
    // send 8192 (encoded 7), receive 2048 (encoded 1): the send octet comes first.
    let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x07, 0x01];
    let pd = decode(&bytes).unwrap();
    assert_eq!(pd.max_send_size, 8192);
    assert_eq!(pd.max_recv_size, 2048);
    assert_eq!(PrivateData::v1(false, 8192, 2048).encode(), bytes);
}

#[test]
fn accepts_r_only_in_low_order_bit() {
    // Reserved bits are ignored; only 0x01 is R.
    for (flags, r) in [
        (0x00, false),
        (0x01, true),
        (0x80, false),
        (0xfe, false),
        (0xff, true),
    ] {
        let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, flags, 0x00, 0x00];
        assert_eq!(
            decode(&bytes).unwrap().remote_invalidate,
            r,
            "flags {flags:#x}"
        );
    }
}

#[test]
fn accepts_trailing_octets_after_message() {
    let mut buf = [0u8; 12];
    buf[..8].copy_from_slice(&LINUX_CLIENT);
    buf[8..].copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(decode(&buf).unwrap(), PrivateData::v1(true, 4096, 4096));
}

#[test]
fn rejects_unknown_versions() {
    for v in [0u8, 2, 3, 0x7f, 0xff] {
        let mut bytes = LINUX_CLIENT;
        bytes[4] = v;
        assert_eq!(decode(&bytes), Err(PdError::UnknownVersion(v)));
        assert_eq!(find(&bytes), None);
        assert_eq!(search(&bytes), Err(PdError::UnknownVersion(v)));
    }
}

#[test]
fn rejects_bad_identifier() {
    let mut bytes = LINUX_CLIENT;
    bytes[3] = 0x19;
    assert_eq!(decode(&bytes), Err(PdError::BadIdentifier(0xf6ab_0e19)));
    assert_eq!(find(&bytes), None);
    assert_eq!(search(&bytes), Err(PdError::NotFound));
}

#[test]
fn rejects_truncated_message() {
    for n in 0..MSG_LEN {
        let r = decode(&LINUX_CLIENT[..n]);
        assert!(
            matches!(r, Err(PdError::Truncated { needed: 8, have }) if have == n),
            "{n}: {r:?}"
        );
        assert_eq!(find(&LINUX_CLIENT[..n]), None);
    }
    assert_eq!(
        search(&LINUX_CLIENT[..7]),
        Err(PdError::Truncated { needed: 8, have: 7 })
    );
    assert_eq!(search(&LINUX_CLIENT[..3]), Err(PdError::NotFound));
}

#[test]
fn accepts_after_mpa_ird_ord_word() {
    // MPA v2 enhanced connection setup (RFC 6581) puts a 4-octet IRD/ORD word first.
    let buf = [
        0x80, 0x00, 0x80, 0x10, // IRD/ORD word (control bits + IRD, ORD)
        0xf6, 0xab, 0x0e, 0x18, // format identifier
        0x01, 0x01, 0x03, 0x03, // v1, R, 4096, 4096
    ];
    assert_eq!(search(&buf), Ok((4, PrivateData::v1(true, 4096, 4096))));
    assert_eq!(find(&buf), Some(PrivateData::v1(true, 4096, 4096)));
}

#[test]
fn accepts_identifier_at_each_offset_0_to_7_in_64_bytes() {
    for off in 0..=7 {
        let mut buf = [FILL; 64];
        buf[off..off + 8].copy_from_slice(&LINUX_SERVER);
        assert_eq!(
            search(&buf),
            Ok((off, PrivateData::v1(false, 4096, 4096))),
            "offset {off}"
        );
    }
}

#[test]
fn accepts_odd_offset_inside_foreign_data() {
    let mut buf = [0u8; 96];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8; // foreign data: a counting pattern, never f6 ab 0e 18
    }
    buf[37..45].copy_from_slice(&RFC_MAX);
    assert_eq!(
        search(&buf),
        Ok((37, PrivateData::v1(true, MAX_SIZE, MAX_SIZE)))
    );
}

#[test]
fn accepts_valid_message_after_unknown_version_one() {
    let mut buf = [FILL; 32];
    buf[1..9].copy_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x0f, 0x0f]);
    buf[13..21].copy_from_slice(&LINUX_CLIENT);
    assert_eq!(search(&buf), Ok((13, PrivateData::v1(true, 4096, 4096))));
}

#[test]
fn rejects_identifier_truncated_at_end_of_buffer() {
    let mut buf = [FILL; 20];
    buf[14..20].copy_from_slice(&LINUX_CLIENT[..6]);
    assert_eq!(find(&buf), None);
    assert_eq!(search(&buf), Err(PdError::Truncated { needed: 8, have: 6 }));
}

#[test]
fn rejects_empty_buffer() {
    assert_eq!(find(&[]), None);
    assert_eq!(search(&[]), Err(PdError::NotFound));
    assert!(matches!(decode(&[]), Err(PdError::Truncated { .. })));
}

#[test]
fn accepts_every_representable_size_round_trip() {
    let mut count = 0;
    for size in (1024..=262_144u32).step_by(1024) {
        let enc = encode_size(size);
        assert_eq!(u32::from(enc), size / 1024 - 1);
        assert_eq!(decode_size(enc), size);
        let pd = PrivateData::v1(false, size, size);
        assert_eq!(decode(&pd.encode()).unwrap(), pd);
        count += 1;
    }
    assert_eq!(count, 256);
}

#[test]
fn accepts_unrepresentable_sizes_rounded_down_and_clamped() {
    assert_eq!(encode_size(0), 0x00); // below the minimum: 1024
    assert_eq!(encode_size(1), 0x00);
    assert_eq!(encode_size(1023), 0x00);
    assert_eq!(encode_size(1025), 0x00); // rounded down to 1024
    assert_eq!(encode_size(2047), 0x00);
    assert_eq!(encode_size(2048), 0x01);
    assert_eq!(encode_size(4095), 0x02); // 3072, never 4096
    assert_eq!(encode_size(262_143), 0xfe); // 261120
    assert_eq!(encode_size(262_145), 0xff); // clamped to 262144
    assert_eq!(encode_size(1 << 20), 0xff);
    assert_eq!(encode_size(u32::MAX), 0xff);
    assert_eq!(representable_size(4095), 3072);
    assert_eq!(representable_size(0), MIN_SIZE);
    assert_eq!(representable_size(u32::MAX), MAX_SIZE);
    let pd = PrivateData::v1(false, 5000, 9999);
    assert_eq!(pd.encode()[6..], [0x03, 0x08]); // 4096, 9216
}

#[test]
fn accepts_encode_into_and_rejects_short_buffer() {
    let mut out = [0xeeu8; 7];
    assert_eq!(
        PrivateData::v1(true, 4096, 4096).encode_into(&mut out),
        Err(PdError::NoSpace {
            needed: 8,
            capacity: 7
        })
    );
    assert_eq!(out, [0xee; 7]);
    let mut out = [0xeeu8; 12];
    assert_eq!(
        PrivateData::v1(true, 4096, 4096).encode_into(&mut out),
        Ok(8)
    );
    assert_eq!(out[..8], LINUX_CLIENT);
    assert_eq!(out[8..], [0xee; 4]);
    assert_eq!(FORMAT_ID, 0xf6ab_0e18);
}

#[test]
fn accepts_negotiation_with_linux_client() {
    // We are a server: 8192 / 8192, R. The Linux client sent R, 4096 / 4096.
    let ours = PrivateData::v1(true, 8192, 8192);
    let n = negotiate(&ours, decode(&LINUX_CLIENT).ok().as_ref());
    assert_eq!(
        n,
        Negotiated {
            send_inline: 4096,
            recv_inline: 4096,
            recv_buffer: 8192,
            remote_invalidate: true,
            peer_recognised: true,
        }
    );
}

#[test]
fn accepts_negotiation_min_per_direction() {
    // Our send 16384 vs peer recv 2048; our recv 4096 vs peer send 65536.
    let ours = PrivateData::v1(false, 16384, 4096);
    let peer = PrivateData::v1(true, 65536, 2048);
    let n = negotiate(&ours, Some(&peer));
    assert_eq!(n.send_inline, 2048);
    assert_eq!(n.recv_inline, 4096);
    assert_eq!(n.recv_buffer, 4096);
    assert!(!n.remote_invalidate, "R needs both sides");
}

#[test]
fn accepts_negotiation_recv_buffer_is_advertised_value() {
    // A 5000-octet buffer is advertised as 4096, in both directions: the peer computes its
    // receive threshold from the 4096 we advertised, so our send threshold must be 4096 too.
    let ours = PrivateData::v1(true, 5000, 5000);
    let peer = PrivateData::v1(true, 262_144, 262_144);
    let n = negotiate(&ours, Some(&peer));
    assert_eq!(n.recv_buffer, 4096);
    assert_eq!(n.recv_inline, 4096);
    assert_eq!(n.send_inline, 4096);
    let theirs = negotiate(&peer, Some(&ours));
    assert_eq!(
        theirs.recv_inline, n.send_inline,
        "both ends agree on our send threshold"
    );
    assert_eq!(
        theirs.send_inline, n.recv_inline,
        "both ends agree on their send threshold"
    );
    assert!(n.remote_invalidate);
}

#[test]
fn accepts_absent_peer_as_v1_defaults() {
    let ours = PrivateData::v1(true, 4096, 4096);
    let n = negotiate(&ours, None);
    assert_eq!(
        n,
        Negotiated {
            send_inline: 1024,
            recv_inline: 1024,
            recv_buffer: 4096,
            remote_invalidate: false,
            peer_recognised: false,
        }
    );
}

#[test]
fn rejects_unknown_peer_version_in_negotiation() {
    let mut peer = PrivateData::v1(true, 65536, 65536);
    peer.version = 2;
    let n = negotiate(&PrivateData::v1(true, 4096, 4096), Some(&peer));
    assert_eq!(n.send_inline, 1024);
    assert_eq!(n.recv_inline, 1024);
    assert!(!n.remote_invalidate);
    assert!(!n.peer_recognised);
}

#[test]
fn accepts_negotiate_raw_from_mpa_buffer() {
    let buf = [
        0x80, 0x00, 0x80, 0x10, // IRD/ORD word
        0xf6, 0xab, 0x0e, 0x18, // format identifier
        0x01, 0x00, 0x03, 0x03, // Linux server: v1, no R, 4096, 4096
    ];
    let n = negotiate_raw(true, 4096, 4096, &buf);
    assert_eq!(n.send_inline, 4096);
    assert_eq!(n.recv_inline, 4096);
    assert!(!n.remote_invalidate);
    assert!(n.peer_recognised);
    let n = negotiate_raw(true, 4096, 4096, &buf[..11]);
    assert!(!n.peer_recognised);
    assert_eq!(n.send_inline, 1024);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = decode(&buf);
        let found = find(&buf);
        match search(&buf) {
            Ok((at, pd)) => {
                prop_assert_eq!(found, Some(pd));
                prop_assert_eq!(decode(&buf[at..]), Ok(pd));
                prop_assert!(at + MSG_LEN <= buf.len());
            }
            Err(_) => prop_assert_eq!(found, None),
        }
        let _ = negotiate_raw(true, 4096, 4096, &buf);
    }

    #[test]
    fn prop_encode_decode_identity(r in any::<bool>(), s in 0u8..=255, v in 0u8..=255) {
        let pd = PrivateData::v1(r, decode_size(s), decode_size(v));
        let bytes = pd.encode();
        prop_assert_eq!(decode(&bytes), Ok(pd));
        prop_assert_eq!(bytes[6], s);
        prop_assert_eq!(bytes[7], v);
    }

    #[test]
    fn prop_encode_never_advertises_more(send in any::<u32>(), recv in any::<u32>()) {
        let pd = decode(&PrivateData::v1(false, send, recv).encode()).unwrap();
        prop_assert!(pd.max_recv_size <= recv.max(MIN_SIZE));
        prop_assert!(pd.max_send_size <= send.max(MIN_SIZE));
        prop_assert_eq!(pd.max_recv_size % 1024, 0);
        prop_assert!((MIN_SIZE..=MAX_SIZE).contains(&pd.max_recv_size));
    }

    #[test]
    fn prop_found_at_any_offset(off in 0usize..56, r in any::<bool>(), s in any::<u8>(), v in any::<u8>()) {
        let pd = PrivateData::v1(r, decode_size(s), decode_size(v));
        let mut buf = [FILL; 64];
        buf[off..off + 8].copy_from_slice(&pd.encode());
        prop_assert_eq!(search(&buf), Ok((off, pd)));
    }

    #[test]
    fn prop_spliced_identifier_in_random_bytes(
        pre in proptest::collection::vec(any::<u8>(), 0..40),
        tail in proptest::collection::vec(any::<u8>(), 0..6),
        version in prop_oneof![Just(1u8), any::<u8>()],
        rest in any::<[u8; 3]>(),
    ) {
        let mut buf = pre.clone();
        buf.extend_from_slice(&FORMAT_ID.to_be_bytes());
        buf.push(version);
        buf.extend_from_slice(&rest);
        buf.extend_from_slice(&tail);
        let pos = pre.len();
        match search(&buf) {
            Ok((at, pd)) => {
                prop_assert!(at <= pos);
                prop_assert_eq!(pd.version, 1);
                if at == pos {
                    prop_assert_eq!(pd.remote_invalidate, rest[0] & 1 == 1);
                    prop_assert_eq!(pd.max_send_size, decode_size(rest[1]));
                    prop_assert_eq!(pd.max_recv_size, decode_size(rest[2]));
                }
            }
            // No message at `pos` is only possible when its version is not 1.
            Err(e) => {
                prop_assert_ne!(version, 1);
                prop_assert_eq!(find(&buf), None);
                prop_assert!(matches!(e, PdError::UnknownVersion(_)));
            }
        }
    }
}
