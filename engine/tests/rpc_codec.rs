//! ONC RPC (RFC 5531) message header: golden vectors, rules, and properties.

use proptest::prelude::*;
use rpcrdma_engine::rpc::{
    call_encoded_len, decode, decode_call, decode_reply, encode_call, encode_reply, msg_direction,
    peek_xid, reply_encoded_len, AcceptStat, AuthFlavor, AuthStat, AuthSys, AuthSysParams,
    CallHeader, MsgType, OpaqueAuth, RejectedReply, ReplyBody, ReplyHeader, RpcError, RpcMsg,
    MAX_AUTH_BYTES,
};
use rpcrdma_engine::xdr::XdrError;

/// NFSv3 NULL call with AUTH_NONE credential and verifier.
const NULL_CALL: [u8; 40] = [
    0x12, 0x34, 0x56, 0x78, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type CALL
    0x00, 0x00, 0x00, 0x02, // rpcvers 2
    0x00, 0x01, 0x86, 0xa3, // prog 100003 (NFS)
    0x00, 0x00, 0x00, 0x03, // vers 3
    0x00, 0x00, 0x00, 0x00, // proc 0 (NULL)
    0x00, 0x00, 0x00, 0x00, // cred flavor AUTH_NONE
    0x00, 0x00, 0x00, 0x00, // cred body length 0
    0x00, 0x00, 0x00, 0x00, // verf flavor AUTH_NONE
    0x00, 0x00, 0x00, 0x00, // verf body length 0
];

/// NFSv3 GETATTR call with an AUTH_SYS credential, followed by 8 octets of arguments.
const SYS_CALL: [u8; 84] = [
    0xde, 0xad, 0xbe, 0xef, // xid
    0x00, 0x00, 0x00, 0x00, // msg_type CALL
    0x00, 0x00, 0x00, 0x02, // rpcvers 2
    0x00, 0x01, 0x86, 0xa3, // prog 100003
    0x00, 0x00, 0x00, 0x03, // vers 3
    0x00, 0x00, 0x00, 0x01, // proc 1 (GETATTR)
    0x00, 0x00, 0x00, 0x01, // cred flavor AUTH_SYS
    0x00, 0x00, 0x00, 0x24, // cred body length 36
    0x5f, 0x5e, 0x10, 0x0f, //   stamp
    0x00, 0x00, 0x00, 0x06, //   machinename length 6
    b'c', b'l', b'i', b'e', //   "clie"
    b'n', b't', 0x00, 0x00, //   "nt" + 2 pad
    0x00, 0x00, 0x03, 0xe8, //   uid 1000
    0x00, 0x00, 0x00, 0x64, //   gid 100
    0x00, 0x00, 0x00, 0x02, //   gids count 2
    0x00, 0x00, 0x00, 0x0a, //   gid 10
    0x00, 0x00, 0x00, 0x14, //   gid 20
    0x00, 0x00, 0x00, 0x00, // verf flavor AUTH_NONE
    0x00, 0x00, 0x00, 0x00, // verf body length 0
    0xaa, 0xbb, 0xcc, 0xdd, // arguments start here (offset 76)
    0x11, 0x22, 0x33, 0x44, // arguments
];

/// Offset of the credential body inside SYS_CALL.
const SYS_CRED_BODY: core::ops::Range<usize> = 32..68;

/// MSG_ACCEPTED reply prefix: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier.
fn accepted_prefix(xid: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&xid.to_be_bytes()); // xid
    v.extend_from_slice(&[0x00, 0x00, 0x00, 0x01]); // msg_type REPLY
    v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00]); // reply_stat MSG_ACCEPTED
    v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00]); // verf flavor AUTH_NONE
    v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00]); // verf length 0
    v
}

fn none_call(xid: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog: 100_003,
        vers: 3,
        proc_num: 0,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
}

#[test]
fn accepts_null_call_auth_none_golden() {
    let (msg, off) = decode(&NULL_CALL).unwrap();
    assert_eq!(off, 40);
    assert_eq!(msg, RpcMsg::Call(none_call(0x1234_5678)));
    assert_eq!(msg.xid(), 0x1234_5678);
    assert_eq!(msg.msg_type(), MsgType::Call);
    let mut out = [0u8; 64];
    let n = encode_call(&mut out, &none_call(0x1234_5678)).unwrap();
    assert_eq!(n, 40);
    assert_eq!(call_encoded_len(&none_call(0)), 40);
    assert_eq!(out[..n], NULL_CALL);
}

#[test]
fn accepts_auth_sys_call_golden() {
    let (c, off) = decode_call(&SYS_CALL).unwrap();
    assert_eq!(off, 76);
    assert_eq!(
        SYS_CALL[off..],
        [0xaa, 0xbb, 0xcc, 0xdd, 0x11, 0x22, 0x33, 0x44]
    );
    assert_eq!(c.xid, 0xdead_beef);
    assert_eq!(c.prog, 100_003);
    assert_eq!(c.vers, 3);
    assert_eq!(c.proc_num, 1);
    assert_eq!(c.cred.flavor, AuthFlavor::Sys);
    assert_eq!(c.cred.body, &SYS_CALL[SYS_CRED_BODY]);
    assert_eq!(c.verf, OpaqueAuth::NONE);

    let sys = AuthSys::parse(c.cred.body).unwrap();
    assert_eq!(sys.stamp, 0x5f5e_100f);
    assert_eq!(sys.machinename, b"client");
    assert_eq!(sys.uid, 1000);
    assert_eq!(sys.gid, 100);
    assert_eq!(sys.gids.len(), 2);
    assert!(!sys.gids.is_empty());
    assert_eq!(sys.gids.get(0), Some(10));
    assert_eq!(sys.gids.get(1), Some(20));
    assert_eq!(sys.gids.get(2), None);
    assert_eq!(sys.gids.get(usize::MAX), None);
    assert!(sys.gids.iter().eq([10, 20]));

    // The encoder reproduces the credential body and the whole header.
    let params = AuthSysParams {
        stamp: 0x5f5e_100f,
        machinename: b"client",
        uid: 1000,
        gid: 100,
        gids: &[10, 20],
    };
    let mut body = [0u8; 64];
    let n = params.encode_into(&mut body).unwrap();
    assert_eq!(n, params.encoded_len());
    assert_eq!(body[..n], SYS_CALL[SYS_CRED_BODY]);
    let h = CallHeader {
        xid: 0xdead_beef,
        prog: 100_003,
        vers: 3,
        proc_num: 1,
        cred: OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body[..n],
        },
        verf: OpaqueAuth::NONE,
    };
    let mut out = [0u8; 128];
    let m = encode_call(&mut out, &h).unwrap();
    assert_eq!(m, 76);
    assert_eq!(out[..m], SYS_CALL[..76]);
}

#[test]
fn accepts_each_accepted_reply_stat() {
    // (stat word(s) after the verifier, expected stat)
    let cases: [(&[u8], AcceptStat); 7] = [
        (&[0, 0, 0, 0], AcceptStat::Success),     // SUCCESS
        (&[0, 0, 0, 1], AcceptStat::ProgUnavail), // PROG_UNAVAIL
        (
            &[
                0, 0, 0, 2, // PROG_MISMATCH
                0, 0, 0, 2, // low 2
                0, 0, 0, 4, // high 4
            ],
            AcceptStat::ProgMismatch { low: 2, high: 4 },
        ),
        (&[0, 0, 0, 3], AcceptStat::ProcUnavail), // PROC_UNAVAIL
        (&[0, 0, 0, 4], AcceptStat::GarbageArgs), // GARBAGE_ARGS
        (&[0, 0, 0, 5], AcceptStat::SystemErr),   // SYSTEM_ERR
        (&[0, 0, 0, 9], AcceptStat::Unknown(9)),  // unknown, preserved
    ];
    for (tail, stat) in cases {
        let mut wire = accepted_prefix(0x0102_0304);
        wire.extend_from_slice(tail);
        let header_len = wire.len();
        wire.extend_from_slice(&[0xfe, 0xed, 0xfa, 0xce]); // results (or junk) after the header
        let (r, off) = decode_reply(&wire).unwrap();
        assert_eq!(off, header_len, "{stat:?}");
        assert_eq!(r, ReplyHeader::accepted(0x0102_0304, stat));
        let mut out = [0u8; 64];
        let n = encode_reply(&mut out, &r).unwrap();
        assert_eq!(out[..n], wire[..header_len], "{stat:?}");
        assert_eq!(reply_encoded_len(&r), header_len);
    }
}

#[test]
fn accepts_denied_rpc_mismatch() {
    let wire = [
        0x00, 0x00, 0x00, 0x07, // xid
        0x00, 0x00, 0x00, 0x01, // msg_type REPLY
        0x00, 0x00, 0x00, 0x01, // reply_stat MSG_DENIED
        0x00, 0x00, 0x00, 0x00, // reject_stat RPC_MISMATCH
        0x00, 0x00, 0x00, 0x02, // low 2
        0x00, 0x00, 0x00, 0x02, // high 2
    ];
    let (r, off) = decode_reply(&wire).unwrap();
    assert_eq!(off, 24);
    let want = ReplyHeader::denied(7, RejectedReply::RpcMismatch { low: 2, high: 2 });
    assert_eq!(r, want);
    let mut out = [0u8; 24];
    assert_eq!(encode_reply(&mut out, &want), Ok(24));
    assert_eq!(out, wire);
}

#[test]
fn accepts_denied_auth_errors() {
    for (code, stat) in [
        (1u8, AuthStat::BadCred),
        (3, AuthStat::BadVerf),
        (5, AuthStat::TooWeak),
        (13, AuthStat::RpcsecGssCredProblem),
        (99, AuthStat::Unknown(99)),
    ] {
        let wire = [
            0x00, 0x00, 0x00, 0x08, // xid
            0x00, 0x00, 0x00, 0x01, // msg_type REPLY
            0x00, 0x00, 0x00, 0x01, // reply_stat MSG_DENIED
            0x00, 0x00, 0x00, 0x01, // reject_stat AUTH_ERROR
            0x00, 0x00, 0x00, code, // auth_stat
        ];
        let (r, off) = decode_reply(&wire).unwrap();
        assert_eq!(off, 20);
        let want = ReplyHeader::denied(8, RejectedReply::AuthError(stat));
        assert_eq!(r, want);
        let mut out = [0u8; 20];
        assert_eq!(encode_reply(&mut out, &want), Ok(20));
        assert_eq!(out, wire);
    }
}

#[test]
fn accepts_reply_with_non_none_verifier() {
    let wire = [
        0x00, 0x00, 0x00, 0x09, // xid
        0x00, 0x00, 0x00, 0x01, // REPLY
        0x00, 0x00, 0x00, 0x00, // MSG_ACCEPTED
        0x00, 0x00, 0x00, 0x06, // verf flavor RPCSEC_GSS
        0x00, 0x00, 0x00, 0x05, // verf length 5
        0x01, 0x02, 0x03, 0x04, // verf body
        0x05, 0x00, 0x00, 0x00, // verf body + 3 pad
        0x00, 0x00, 0x00, 0x00, // SUCCESS
    ];
    let (r, off) = decode_reply(&wire).unwrap();
    assert_eq!(off, 32);
    match r.body {
        ReplyBody::Accepted { verf, stat } => {
            assert_eq!(verf.flavor, AuthFlavor::RpcsecGss);
            assert_eq!(verf.body, &[1, 2, 3, 4, 5]);
            assert_eq!(stat, AcceptStat::Success);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepts_unknown_auth_flavor_preserved() {
    let mut wire = NULL_CALL;
    wire[27] = 0x2a; // cred flavor 42
    let (c, _) = decode_call(&wire).unwrap();
    assert_eq!(c.cred.flavor, AuthFlavor::Unknown(42));
    let mut out = [0u8; 40];
    encode_call(&mut out, &c).unwrap();
    assert_eq!(out, wire);
}

#[test]
fn accepts_auth_body_of_exactly_400() {
    let mut wire = NULL_CALL.to_vec();
    wire.truncate(28);
    wire.extend_from_slice(&[0x00, 0x00, 0x01, 0x90]); // cred length 400
    wire.extend_from_slice(&[0x77; 400]);
    wire.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // AUTH_NONE verifier
    let (c, off) = decode_call(&wire).unwrap();
    assert_eq!(c.cred.body.len(), 400);
    assert_eq!(off, wire.len());
}

#[test]
fn rejects_bad_rpc_version_with_xid() {
    let mut wire = NULL_CALL;
    wire[11] = 3; // rpcvers 3
    let e = decode(&wire).unwrap_err();
    assert_eq!(
        e,
        RpcError::BadRpcVersion {
            xid: 0x1234_5678,
            rpcvers: 3
        }
    );
    assert_eq!(e.xid(), Some(0x1234_5678));
    // Checked before anything after it: a truncated call with a bad version still says so.
    assert_eq!(
        decode(&wire[..12]),
        Err(RpcError::BadRpcVersion {
            xid: 0x1234_5678,
            rpcvers: 3
        })
    );
}

#[test]
fn rejects_bad_msg_type() {
    let mut wire = NULL_CALL;
    wire[7] = 2;
    assert_eq!(
        decode(&wire),
        Err(RpcError::BadMsgType {
            xid: 0x1234_5678,
            value: 2
        })
    );
}

#[test]
fn rejects_cred_over_400() {
    let mut wire = NULL_CALL.to_vec();
    wire.truncate(28);
    wire.extend_from_slice(&[0x00, 0x00, 0x01, 0x91]); // cred length 401
    wire.extend_from_slice(&[0u8; 412]);
    assert_eq!(
        decode(&wire),
        Err(RpcError::CredTooLong {
            xid: 0x1234_5678,
            len: 401
        })
    );
    // Huge lengths are rejected by value, not by running off the end.
    wire[28..32].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        decode(&wire),
        Err(RpcError::CredTooLong {
            xid: 0x1234_5678,
            len: u32::MAX
        })
    );
}

#[test]
fn rejects_verf_over_400() {
    let mut wire = NULL_CALL;
    wire[36..40].copy_from_slice(&[0x00, 0x00, 0x01, 0x91]); // verf length 401
    assert_eq!(
        decode(&wire),
        Err(RpcError::VerfTooLong {
            xid: 0x1234_5678,
            len: 401
        })
    );
    let mut reply = accepted_prefix(5);
    reply[16..20].copy_from_slice(&[0x00, 0x00, 0x02, 0x00]); // verf length 512
    assert_eq!(
        decode(&reply),
        Err(RpcError::VerfTooLong { xid: 5, len: 512 })
    );
}

#[test]
fn rejects_bad_reply_and_reject_stat() {
    let wire = [
        0x00, 0x00, 0x00, 0x01, // xid
        0x00, 0x00, 0x00, 0x01, // REPLY
        0x00, 0x00, 0x00, 0x02, // reply_stat 2: undefined
    ];
    assert_eq!(
        decode(&wire),
        Err(RpcError::BadReplyStat { xid: 1, value: 2 })
    );
    let wire = [
        0x00, 0x00, 0x00, 0x01, // xid
        0x00, 0x00, 0x00, 0x01, // REPLY
        0x00, 0x00, 0x00, 0x01, // MSG_DENIED
        0x00, 0x00, 0x00, 0x02, // reject_stat 2: undefined
    ];
    assert_eq!(
        decode(&wire),
        Err(RpcError::BadRejectStat { xid: 1, value: 2 })
    );
}

#[test]
fn rejects_every_truncation() {
    for n in 0..NULL_CALL.len() {
        assert!(
            matches!(decode(&NULL_CALL[..n]), Err(RpcError::Truncated { .. })),
            "call prefix {n}"
        );
    }
    for n in 0..76 {
        assert!(
            matches!(decode(&SYS_CALL[..n]), Err(RpcError::Truncated { .. })),
            "sys call prefix {n}"
        );
    }
    let mut mismatch = accepted_prefix(1);
    mismatch.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]);
    for n in 0..mismatch.len() {
        assert!(
            matches!(decode(&mismatch[..n]), Err(RpcError::Truncated { .. })),
            "reply prefix {n}"
        );
    }
}

#[test]
fn rejects_auth_body_missing_pad() {
    // cred length 1 with the octet present but no pad: XDR needs 4 octets.
    let mut wire = NULL_CALL.to_vec();
    wire.truncate(28);
    wire.extend_from_slice(&[0x00, 0x00, 0x00, 0x01, 0x7f]);
    assert!(matches!(
        decode(&wire),
        Err(RpcError::Truncated { at: 32, .. })
    ));
}

#[test]
fn rejects_wrong_kind_in_typed_decoders() {
    assert_eq!(
        decode_reply(&NULL_CALL),
        Err(RpcError::UnexpectedMsgType {
            xid: 0x1234_5678,
            found: MsgType::Call
        })
    );
    let wire = accepted_prefix(3)
        .into_iter()
        .chain([0, 0, 0, 0])
        .collect::<Vec<_>>();
    assert_eq!(
        decode_call(&wire),
        Err(RpcError::UnexpectedMsgType {
            xid: 3,
            found: MsgType::Reply
        })
    );
}

#[test]
fn rejects_auth_sys_violations() {
    let body = &SYS_CALL[SYS_CRED_BODY];
    // Trailing octets after the gid list.
    let mut long = body.to_vec();
    long.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        AuthSys::parse(&long),
        Err(RpcError::TrailingBytes { at: 36 })
    );
    // Every truncation.
    for n in 0..body.len() {
        assert!(
            matches!(AuthSys::parse(&body[..n]), Err(RpcError::Truncated { .. })),
            "{n}"
        );
    }
    // 17 gids.
    let mut many = body.to_vec();
    many[24..28].copy_from_slice(&[0, 0, 0, 17]);
    many.extend_from_slice(&[0u8; 60]);
    assert_eq!(
        AuthSys::parse(&many),
        Err(RpcError::TooLong {
            at: 24,
            len: 17,
            max: 16
        })
    );
    // Machine name of 256.
    let mut name = vec![
        0, 0, 0, 0, // stamp
        0, 0, 1, 0, // machinename length 256
    ];
    name.extend_from_slice(&[b'a'; 256]);
    name.extend_from_slice(&[0u8; 12]); // uid, gid, gids count 0
    assert_eq!(
        AuthSys::parse(&name),
        Err(RpcError::TooLong {
            at: 4,
            len: 256,
            max: 255
        })
    );
}

#[test]
fn accepts_auth_sys_limits() {
    let gids = [7u32; 16];
    let name = [b'n'; 255];
    let p = AuthSysParams {
        stamp: 1,
        machinename: &name,
        uid: 0,
        gid: 0,
        gids: &gids,
    };
    let mut buf = [0u8; 400];
    let n = p.encode_into(&mut buf).unwrap();
    assert_eq!(n, 4 + 4 + 256 + 4 + 4 + 4 + 64);
    let s = AuthSys::parse(&buf[..n]).unwrap();
    assert_eq!(s.machinename, &name[..]);
    assert_eq!(s.gids.len(), 16);
    assert!(s.gids.iter().all(|g| g == 7));
    let none = AuthSys::parse(&[0u8; 20]).unwrap(); // everything zero, empty name, no gids
    assert!(none.gids.is_empty());
    assert_eq!(none.machinename, b"");
}

#[test]
fn rejects_auth_sys_encode_over_limits() {
    let mut buf = [0u8; 512];
    let name = [b'n'; 256];
    let p = AuthSysParams {
        stamp: 1,
        machinename: &name,
        uid: 0,
        gid: 0,
        gids: &[],
    };
    assert!(matches!(
        p.encode_into(&mut buf),
        Err(XdrError::TooLong { len: 256, .. })
    ));
    let gids = [0u32; 17];
    let p = AuthSysParams {
        machinename: b"x",
        gids: &gids,
        ..p
    };
    assert!(matches!(
        p.encode_into(&mut buf),
        Err(XdrError::TooLong { len: 17, .. })
    ));
    let p = AuthSysParams { gids: &[1], ..p };
    let mut small = [0u8; 27];
    assert_eq!(
        p.encode_into(&mut small),
        Err(XdrError::NoSpace {
            needed: 28,
            capacity: 27
        })
    );
}

#[test]
fn rejects_encode_without_space_leaving_buffer_untouched() {
    let mut out = [0xeeu8; 39];
    assert_eq!(
        encode_call(&mut out, &none_call(1)),
        Err(XdrError::NoSpace {
            needed: 40,
            capacity: 39
        })
    );
    assert_eq!(out, [0xee; 39]);
    let r = ReplyHeader::accepted(1, AcceptStat::ProgMismatch { low: 1, high: 2 });
    let mut out = [0xeeu8; 31];
    assert_eq!(
        encode_reply(&mut out, &r),
        Err(XdrError::NoSpace {
            needed: 32,
            capacity: 31
        })
    );
    assert_eq!(out, [0xee; 31]);
}

#[test]
fn rejects_encode_of_auth_over_400() {
    let big = [0u8; 401];
    let mut h = none_call(1);
    h.cred.body = &big;
    let mut out = [0u8; 1024];
    assert!(matches!(
        encode_call(&mut out, &h),
        Err(XdrError::TooLong {
            len: 401,
            max: 400,
            ..
        })
    ));
    let mut h = none_call(1);
    h.verf.body = &big;
    assert!(matches!(
        encode_call(&mut out, &h),
        Err(XdrError::TooLong { len: 401, .. })
    ));
    let r = ReplyHeader {
        xid: 1,
        body: ReplyBody::Accepted {
            verf: OpaqueAuth {
                flavor: AuthFlavor::None,
                body: &big,
            },
            stat: AcceptStat::Success,
        },
    };
    assert!(matches!(
        encode_reply(&mut out, &r),
        Err(XdrError::TooLong { len: 401, .. })
    ));
}

#[test]
fn accepts_direction_and_xid_peek() {
    assert_eq!(msg_direction(&NULL_CALL), Some(MsgType::Call));
    assert_eq!(msg_direction(&accepted_prefix(1)), Some(MsgType::Reply));
    assert_eq!(msg_direction(&NULL_CALL[..8]), Some(MsgType::Call));
    assert_eq!(peek_xid(&NULL_CALL), Some(0x1234_5678));
    assert_eq!(peek_xid(&NULL_CALL[..4]), Some(0x1234_5678));
}

#[test]
fn rejects_direction_of_short_or_unknown() {
    assert_eq!(msg_direction(&NULL_CALL[..7]), None);
    assert_eq!(msg_direction(&[]), None);
    let mut wire = NULL_CALL;
    wire[7] = 2;
    assert_eq!(msg_direction(&wire), None);
    wire[4] = 0x80;
    wire[7] = 0;
    assert_eq!(msg_direction(&wire), None); // 0x80000000
    assert_eq!(peek_xid(&NULL_CALL[..3]), None);
}

#[test]
fn accepts_unknown_accept_stat_in_named_range_encoded_as_named() {
    let r = ReplyHeader::accepted(1, AcceptStat::Unknown(2));
    let mut out = [0u8; 64];
    let n = encode_reply(&mut out, &r).unwrap();
    assert_eq!(n, reply_encoded_len(&r));
    let (d, _) = decode_reply(&out[..n]).unwrap();
    assert_eq!(
        d,
        ReplyHeader::accepted(1, AcceptStat::ProgMismatch { low: 0, high: 0 })
    );
}

#[test]
fn accepts_open_enum_wire_values() {
    for v in 0..20u32 {
        assert_eq!(AuthFlavor::from_u32(v).to_u32(), v);
        assert_eq!(AuthStat::from_u32(v).to_u32(), v);
        assert_eq!(MsgType::from_u32(v).to_u32(), v);
    }
    assert_eq!(AuthFlavor::from_u32(1), AuthFlavor::Sys);
    assert_eq!(AuthFlavor::from_u32(6), AuthFlavor::RpcsecGss);
    assert_eq!(AuthFlavor::from_u32(4), AuthFlavor::Unknown(4));
    assert_eq!(MsgType::from_u32(1), MsgType::Reply);
}

fn arb_auth() -> impl Strategy<Value = (u32, Vec<u8>)> {
    (
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES as usize),
    )
}

fn arb_accept_stat() -> impl Strategy<Value = AcceptStat> {
    prop_oneof![
        Just(AcceptStat::Success),
        Just(AcceptStat::ProgUnavail),
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| AcceptStat::ProgMismatch { low, high }),
        Just(AcceptStat::ProcUnavail),
        Just(AcceptStat::GarbageArgs),
        Just(AcceptStat::SystemErr),
        (6u32..).prop_map(AcceptStat::Unknown),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn prop_call_encode_decode_identity(
        xid in any::<u32>(), prog in any::<u32>(), vers in any::<u32>(), proc_num in any::<u32>(),
        cred in arb_auth(), verf in arb_auth(), args in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let h = CallHeader {
            xid, prog, vers, proc_num,
            cred: OpaqueAuth { flavor: AuthFlavor::from_u32(cred.0), body: &cred.1 },
            verf: OpaqueAuth { flavor: AuthFlavor::from_u32(verf.0), body: &verf.1 },
        };
        let mut out = vec![0u8; call_encoded_len(&h) + args.len()];
        let n = encode_call(&mut out, &h).unwrap();
        prop_assert_eq!(n, call_encoded_len(&h));
        out[n..].copy_from_slice(&args);
        let (d, off) = decode_call(&out).unwrap();
        prop_assert_eq!(d, h);
        prop_assert_eq!(off, n);
        prop_assert_eq!(msg_direction(&out), Some(MsgType::Call));
        prop_assert_eq!(peek_xid(&out), Some(xid));
        // One octet short is NoSpace.
        let mut short = vec![0u8; n - 1];
        let short_err = matches!(encode_call(&mut short, &h), Err(XdrError::NoSpace { .. }));
        prop_assert!(short_err);
    }

    #[test]
    fn prop_reply_encode_decode_identity(
        xid in any::<u32>(), kind in 0u8..3, verf in arb_auth(), stat in arb_accept_stat(),
        low in any::<u32>(), high in any::<u32>(), auth in any::<u32>(),
    ) {
        let h = match kind {
            0 => ReplyHeader {
                xid,
                body: ReplyBody::Accepted {
                    verf: OpaqueAuth { flavor: AuthFlavor::from_u32(verf.0), body: &verf.1 },
                    stat,
                },
            },
            1 => ReplyHeader::denied(xid, RejectedReply::RpcMismatch { low, high }),
            _ => ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat::from_u32(auth))),
        };
        let mut out = vec![0u8; reply_encoded_len(&h)];
        let n = encode_reply(&mut out, &h).unwrap();
        prop_assert_eq!(n, out.len());
        let (d, off) = decode_reply(&out).unwrap();
        prop_assert_eq!(d, h);
        prop_assert_eq!(off, n);
        prop_assert_eq!(msg_direction(&out), Some(MsgType::Reply));
    }

    #[test]
    fn prop_auth_sys_encode_parse_identity(
        stamp in any::<u32>(), uid in any::<u32>(), gid in any::<u32>(),
        name in proptest::collection::vec(any::<u8>(), 0..=255),
        gids in proptest::collection::vec(any::<u32>(), 0..=16),
    ) {
        let p = AuthSysParams { stamp, machinename: &name, uid, gid, gids: &gids };
        let mut buf = [0u8; 400];
        let n = p.encode_into(&mut buf).unwrap();
        prop_assert_eq!(n, p.encoded_len());
        let s = AuthSys::parse(&buf[..n]).unwrap();
        prop_assert_eq!(s.stamp, stamp);
        prop_assert_eq!(s.machinename, &name[..]);
        prop_assert_eq!(s.uid, uid);
        prop_assert_eq!(s.gid, gid);
        prop_assert!(s.gids.iter().eq(gids.iter().copied()));
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..128)) {
        match decode(&buf) {
            Ok((msg, off)) => {
                prop_assert!(off <= buf.len());
                prop_assert_eq!(Some(msg.msg_type()), msg_direction(&buf));
                prop_assert_eq!(Some(msg.xid()), peek_xid(&buf));
            }
            Err(e) => { let _ = e.xid(); let _ = e.to_string(); }
        }
        let _ = AuthSys::parse(&buf);
        let _ = msg_direction(&buf);
        let _ = peek_xid(&buf);
    }

    #[test]
    fn prop_mutated_call_never_panics(i in 0usize..84, b in any::<u8>(), cut in 0usize..=84) {
        // Mutations of a valid message reach deeper states than random bytes do.
        let mut wire = SYS_CALL;
        wire[i] = b;
        if let Ok((RpcMsg::Call(c), off)) = decode(&wire[..cut]) {
            prop_assert!(off <= cut);
            if c.cred.flavor == AuthFlavor::Sys {
                let _ = AuthSys::parse(c.cred.body);
            }
        }
    }
}
