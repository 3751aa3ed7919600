//! Unit tests of the NFSv4.1 (RFC 8881) part of the codec: session operations encoded word by
//! word, and SEQUENCE / EXCHANGE_ID / CREATE_SESSION / OPEN / BIND_CONN_TO_SESSION results
//! decoded from hand-built replies.

use super::*;

fn res_header(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    put_u32(&mut b, 0);
    put_opaque(&mut b, b"t");
    put_u32(&mut b, n);
    b
}

fn attrs(max_requests: u32) -> ChannelAttrs {
    ChannelAttrs {
        header_pad: 0,
        max_request: 4068,
        max_response: 4068,
        max_response_cached: 0,
        max_ops: 8,
        max_requests,
        rdma_ird: None,
    }
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

#[test]
fn accepts_session_operations_encoded_as_rfc_8881() {
    let e = encode_compound_minor(
        "",
        1,
        &[
            Op::Sequence {
                session: [1; 16],
                sequence: 7,
                slot: 1,
                highest_slot: 3,
                cache_this: true,
            },
            Op::CreateSession {
                clientid: 0x0102_0304_0506_0708,
                sequence: 9,
                flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                fore: attrs(4),
                back: ChannelAttrs {
                    rdma_ird: Some(2),
                    ..attrs(1)
                },
                cb_program: 0x4000_0000,
            },
        ],
    );
    let w = words(&e.bytes);
    // tag "", minor version 1, two operations.
    assert_eq!(&w[..3], &[0, 1, 2]);
    // SEQUENCE: session (4 words), sequence, slot, highest slot, cachethis.
    assert_eq!(w[3], op::SEQUENCE);
    assert_eq!(&w[4..8], &[0x0101_0101; 4]);
    assert_eq!(&w[8..12], &[7, 1, 3, 1]);
    // CREATE_SESSION: clientid, sequence, flags, fore (6 + empty ird), back (6 + one ird),
    // program, one AUTH_SYS security parameter (stamp 0, "rpcrdma", root, no groups).
    assert_eq!(w[12], op::CREATE_SESSION);
    assert_eq!(&w[13..16], &[0x0102_0304, 0x0506_0708, 9]);
    assert_eq!(w[16], CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    assert_eq!(&w[17..24], &[0, 4068, 4068, 0, 8, 4, 0]);
    assert_eq!(&w[24..32], &[0, 4068, 4068, 0, 8, 1, 1, 2]);
    assert_eq!(&w[32..35], &[0x4000_0000, 1, 1]);
    assert_eq!(&w[35..37], &[0, 7]);
    assert_eq!(&e.bytes[37 * 4..39 * 4], b"rpcrdma\0");
    assert_eq!(&w[39..], &[0, 0, 0]);
}

#[test]
fn accepts_open_close_and_delegreturn_encoding() {
    let e = encode_compound_minor(
        "",
        1,
        &[
            Op::Open {
                clientid: 5,
                owner: b"abcde",
                access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
                name: "f",
            },
            Op::DelegReturn([2; 16]),
            Op::Close([3; 16]),
            Op::DestroySession([4; 16]),
            Op::DestroyClientId(6),
            Op::ExchangeId {
                verifier: [9; 8],
                owner: b"me",
                flags: 0,
            },
            Op::BindConnToSession {
                session: [1; 16],
                dir: CDFC4_FORE_OR_BOTH,
            },
        ],
    );
    let w = words(&e.bytes);
    assert_eq!(&w[..3], &[0, 1, 7]);
    // OPEN: seqid, access, deny, owner (clientid, "abcde" padded), NOCREATE, CLAIM_NULL "f".
    assert_eq!(&w[3..8], &[op::OPEN, 0, 0x101, 0, 0]);
    assert_eq!(&w[8..10], &[5, 5]);
    assert_eq!(&w[12..16], &[0, 0, 1, u32::from_be_bytes([b'f', 0, 0, 0])]);
    assert_eq!(w[16], op::DELEGRETURN);
    assert_eq!(&w[21..23], &[op::CLOSE, 0]);
    assert_eq!(w[27], op::DESTROY_SESSION);
    assert_eq!(&w[32..35], &[op::DESTROY_CLIENTID, 0, 6]);
    // EXCHANGE_ID: verifier, owner, flags, SP4_NONE, no implementation id.
    assert_eq!(w[35], op::EXCHANGE_ID);
    assert_eq!(
        &w[38..43],
        &[2, u32::from_be_bytes([b'm', b'e', 0, 0]), 0, 0, 0]
    );
    // BIND_CONN_TO_SESSION: session, direction, not RDMA mode.
    assert_eq!(w[43], op::BIND_CONN_TO_SESSION);
    assert_eq!(&w[48..], &[CDFC4_FORE_OR_BOTH, 0]);
}

#[test]
fn accepts_bind_conn_to_session_result() {
    let mut b = res_header(1);
    put_u32(&mut b, op::BIND_CONN_TO_SESSION);
    put_u32(&mut b, 0);
    b.extend_from_slice(&[3; 16]);
    put_u32(&mut b, CDFS4_BOTH);
    put_u32(&mut b, 0);
    let sent = [Op::BindConnToSession {
        session: [3; 16],
        dir: CDFC4_FORE_OR_BOTH,
    }];
    let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
    assert_eq!(
        r.ops[0].result,
        OpResult::BindConn {
            session: [3; 16],
            dir: CDFS4_BOTH,
            rdma_mode: false
        }
    );
    // A bool other than 0 or 1 is refused.
    let n = b.len();
    b[n - 1] = 2;
    assert!(decode_compound(&b, &sent, ReadPlacement::Inline).is_err());
}

#[test]
fn accepts_session_results() {
    let mut b = res_header(4);
    // EXCHANGE_ID.
    put_u32(&mut b, op::EXCHANGE_ID);
    put_u32(&mut b, 0);
    put_u64(&mut b, 0xabcd);
    put_u32(&mut b, 1);
    put_u32(&mut b, 0x0001_0000);
    put_u32(&mut b, 0); // SP4_NONE
    put_u64(&mut b, 0);
    put_opaque(&mut b, b"major");
    put_opaque(&mut b, b"scope");
    put_u32(&mut b, 1);
    put_opaque(&mut b, b"kernel.org");
    put_opaque(&mut b, b"Linux");
    put_u64(&mut b, 0);
    put_u32(&mut b, 0);
    // CREATE_SESSION.
    put_u32(&mut b, op::CREATE_SESSION);
    put_u32(&mut b, 0);
    b.extend_from_slice(&[5; 16]);
    put_u32(&mut b, 1);
    put_u32(&mut b, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    put_channel_attrs(&mut b, &attrs(4));
    put_channel_attrs(
        &mut b,
        &ChannelAttrs {
            rdma_ird: Some(0),
            ..attrs(1)
        },
    );
    // SEQUENCE.
    put_u32(&mut b, op::SEQUENCE);
    put_u32(&mut b, 0);
    b.extend_from_slice(&[5; 16]);
    for v in [1, 0, 3, 3, SEQ4_STATUS_CB_PATH_DOWN] {
        put_u32(&mut b, v);
    }
    // RECLAIM_COMPLETE.
    put_u32(&mut b, op::RECLAIM_COMPLETE);
    put_u32(&mut b, 0);
    let sent = [
        Op::ExchangeId {
            verifier: [0; 8],
            owner: b"x",
            flags: 0,
        },
        Op::CreateSession {
            clientid: 0xabcd,
            sequence: 1,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore: attrs(4),
            back: attrs(1),
            cb_program: 1,
        },
        Op::Sequence {
            session: [5; 16],
            sequence: 1,
            slot: 0,
            highest_slot: 0,
            cache_this: false,
        },
        Op::ReclaimComplete,
    ];
    let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
    match &r.ops[0].result {
        OpResult::ExchangeId(x) => {
            assert_eq!((x.clientid, x.sequence, x.flags), (0xabcd, 1, 0x0001_0000));
            assert_eq!(x.server_scope, b"scope");
            assert_eq!(x.impl_id, Some(("kernel.org".into(), "Linux".into())));
        }
        other => panic!("{other:?}"),
    }
    match &r.ops[1].result {
        OpResult::CreateSession(c) => {
            assert_eq!(c.session, [5; 16]);
            assert_eq!(c.flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
            assert_eq!(c.fore.max_requests, 4);
            assert_eq!(c.back.max_requests, 1);
            assert_eq!(c.back.rdma_ird, Some(0));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.ops[2].result,
        OpResult::Sequence(SequenceRes {
            session: [5; 16],
            sequence: 1,
            slot: 0,
            highest_slot: 3,
            target_highest_slot: 3,
            status_flags: SEQ4_STATUS_CB_PATH_DOWN,
        })
    );
    assert_eq!(r.ops[3].result, OpResult::Done);
    for cut in 0..b.len() {
        assert!(decode_compound(&b[..cut], &sent, ReadPlacement::Inline).is_err());
    }
}

fn open_res(deleg: &[u32], extra: &[u8]) -> Vec<u8> {
    let mut b = res_header(1);
    put_u32(&mut b, op::OPEN);
    put_u32(&mut b, 0);
    b.extend_from_slice(&[1; 16]); // open stateid
    put_u32(&mut b, 1); // cinfo.atomic
    put_u64(&mut b, 10);
    put_u64(&mut b, 11);
    put_u32(&mut b, 4); // rflags
    put_u32(&mut b, 0); // attrset
    for &w in deleg {
        put_u32(&mut b, w);
    }
    b.extend_from_slice(extra);
    b
}

#[test]
fn accepts_open_with_each_delegation_type() {
    let sent = [Op::Open {
        clientid: 1,
        owner: b"o",
        access: 1,
        name: "f",
    }];
    let dec = |b: &[u8]| match decode_compound(b, &sent, ReadPlacement::Inline)
        .map(|r| r.ops[0].result.clone())
    {
        Ok(OpResult::Open(o)) => Ok(o),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    };
    // READ: stateid, recall, nfsace4 (type, flag, mask, who "").
    let mut ace = vec![2u8; 16];
    ace.extend_from_slice(&[0, 0, 0, 0]); // recall false
    ace.extend_from_slice(&[0; 12]);
    ace.extend_from_slice(&[0, 0, 0, 0]);
    let o = dec(&open_res(&[1], &ace)).unwrap();
    assert_eq!(o.stateid, [1; 16]);
    assert_eq!(o.rflags, 4);
    assert_eq!(
        o.delegation,
        Delegation::Read {
            stateid: [2; 16],
            recall: false
        }
    );
    assert_eq!(
        dec(&open_res(&[0], &[])).unwrap().delegation,
        Delegation::None
    );
    // NONE_EXT: WND4_CONTENTION carries a bool, WND4_NOT_WANTED nothing.
    assert_eq!(
        dec(&open_res(&[3, 1, 0], &[])).unwrap().delegation,
        Delegation::NoneExt { why: 1 }
    );
    assert_eq!(
        dec(&open_res(&[3, 0], &[])).unwrap().delegation,
        Delegation::NoneExt { why: 0 }
    );
    assert!(dec(&open_res(&[3, 1], &[])).is_err(), "missing bool");
    assert!(dec(&open_res(&[9], &[])).is_err(), "unknown type");
    let full = open_res(&[1], &ace);
    for cut in 0..full.len() {
        assert!(dec(&full[..cut]).is_err());
    }
}

#[test]
fn accepts_secinfo_operations_encoded_as_rfc_8881() {
    let e = encode_compound_minor(
        "",
        1,
        &[
            Op::SecInfo("export"),
            Op::SecInfoNoName(SECINFO_STYLE4_CURRENT_FH),
            Op::SecInfoNoName(SECINFO_STYLE4_PARENT),
        ],
    );
    // RFC 8881 §18.29.1: SECINFO4args { component4 name; }; §18.45.1: SECINFO_NO_NAME4args is
    // a secinfo_style4 (CURRENT_FH 0, PARENT 1).
    let want: [u8; 40] = [
        0, 0, 0, 0, // tag ""
        0, 0, 0, 1, // minor version 1
        0, 0, 0, 3, // three operations
        0, 0, 0, 33, // OP_SECINFO
        0, 0, 0, 6, b'e', b'x', b'p', b'o', b'r', b't', 0, 0, // "export" and its pad
        0, 0, 0, 52, 0, 0, 0, 0, // OP_SECINFO_NO_NAME, SECINFO_STYLE4_CURRENT_FH
        0, 0, 0, 52, // OP_SECINFO_NO_NAME
    ];
    assert_eq!(&e.bytes[..40], &want);
    assert_eq!(&e.bytes[40..], &[0, 0, 0, 1], "SECINFO_STYLE4_PARENT");
}

#[test]
fn accepts_secinfo_results_with_each_flavor_kind() {
    let sent = [Op::PutRootFh, Op::SecInfo("x"), Op::SecInfoNoName(0)];
    let mut b = res_header(3);
    b.extend_from_slice(&[0, 0, 0, 24, 0, 0, 0, 0]); // PUTROOTFH ok
                                                     // SECINFO4resok: secinfo4<3>: RPCSEC_GSS with rpcsec_gss_info (the Kerberos v5 oid, qop 0,
                                                     // RPC_GSS_SVC_NONE), AUTH_SYS, AUTH_NONE.
    #[rustfmt::skip]
    b.extend_from_slice(&[
        0, 0, 0, 33, 0, 0, 0, 0, 0, 0, 0, 3,
        0, 0, 0, 6,
        0, 0, 0, 9, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 1,
        0, 0, 0, 1,
        0, 0, 0, 0,
    ]);
    b.extend_from_slice(&[0, 0, 0, 52, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
    assert_eq!(r.ops[1].result, OpResult::SecInfo(vec![RPCSEC_GSS, 1, 0]));
    assert_eq!(r.ops[2].result, OpResult::SecInfo(vec![1]));
    // A short entry list is an error, not a panic.
    let cut = b.len() - 20;
    assert!(decode_compound(&b[..cut], &sent, ReadPlacement::Inline).is_err());
}

#[test]
fn accepts_verify_and_nverify_encoded_as_rfc_8881() {
    let size = 0x0102_0304_0506_0708u64.to_be_bytes();
    let e = encode_compound_minor(
        "",
        1,
        &[
            Op::Verify {
                mask: &[1 << FATTR4_SIZE],
                vals: &size,
            },
            Op::Nverify {
                mask: &[0, 1 << 1],
                vals: &[0, 0, 1, 0xa4],
            },
        ],
    );
    // RFC 8881 §18.31.1: VERIFY4args { fattr4 obj_attributes; }, §18.15.1 NVERIFY4args the
    // same; fattr4 is a bitmap4 then an attrlist4 (opaque<>).
    #[rustfmt::skip]
    let want: [u8; 60] = [
        0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, // tag "", minor version 1, two operations
        0, 0, 0, 37, // OP_VERIFY
        0, 0, 0, 1, 0, 0, 0, 0x10, // attrmask: one word, bit 4 (size)
        0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, // attr_vals: the size, 8 octets
        0, 0, 0, 17, // OP_NVERIFY
        0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, // attrmask: two words, bit 33 (mode)
        0, 0, 0, 4, 0, 0, 1, 0xa4, // attr_vals: mode 0644
    ];
    assert_eq!(&e.bytes[..], &want[..]);
}
