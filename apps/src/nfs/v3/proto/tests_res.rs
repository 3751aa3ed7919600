//! Tests of the NFSv3 result codec: golden vectors from RFC 1813's XDR, round trips
//! `encode_res` → `decode_res` for every procedure and both arms, truncation at every length,
//! and malformed results.
//!
//! Normal operation: part of `cargo test -p rpcrdma-apps --lib nfs::v3::proto`. Recovery: a
//! failure names the procedure or prefix length that misbehaved.

use super::tests::{encode_with, fattr, fattr_words, fh, words};
use super::*;
use crate::nfs::types::{FsStat, Nfsstat3, StableHow, Time3, WccAttr, WccData};
use rpcrdma_engine::xdr::XdrError;

fn enc_res(r: &Res3<'_>) -> Vec<u8> {
    encode_with(|w| encode_res(w, r))
}

fn wcc() -> WccData {
    WccData {
        before: Some(WccAttr {
            size: 10,
            mtime: Time3 {
                seconds: 1,
                nseconds: 2,
            },
            ctime: Time3 {
                seconds: 3,
                nseconds: 4,
            },
        }),
        after: Some(fattr()),
    }
}

/// (procedure, result) for every procedure, each arm, with and without optional parts.
fn sample_res() -> Vec<(u32, Res3<'static>)> {
    let a = Some(fattr());
    let f = fh(&[3; 32]);
    let e = Nfsstat3::NOENT;
    let none = WccData::default();
    let info = FsInfo {
        rtmax: 1 << 20,
        rtpref: 1 << 20,
        rtmult: 4096,
        wtmax: 1 << 20,
        wtpref: 1 << 20,
        wtmult: 4096,
        dtpref: 65536,
        maxfilesize: (1 << 63) - 1,
        time_delta: Time3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: fsf3::LINK | fsf3::SYMLINK | fsf3::HOMOGENEOUS | fsf3::CANSETTIME,
    };
    let pc = PathConf {
        linkmax: 32000,
        name_max: 255,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    };
    let st = FsStat {
        tbytes: 1 << 40,
        fbytes: 1 << 39,
        abytes: 1 << 38,
        tfiles: 1000,
        ffiles: 999,
        afiles: 998,
    };
    use proc3::*;
    vec![
        (NULL, Res3::Null),
        (GETATTR, Res3::Getattr(Ok(fattr()))),
        (GETATTR, Res3::Getattr(Err(Nfsstat3::STALE))),
        (SETATTR, Res3::Setattr(Nfsstat3::OK, wcc())),
        (SETATTR, Res3::Setattr(Nfsstat3::NOT_SYNC, none)),
        (LOOKUP, Res3::Lookup(Ok((f, a, a)))),
        (LOOKUP, Res3::Lookup(Ok((fh(&[]), None, None)))),
        (LOOKUP, Res3::Lookup(Err((e, a)))),
        (ACCESS, Res3::Access(Ok((a, 0x1f)))),
        (ACCESS, Res3::Access(Err((Nfsstat3::BADHANDLE, None)))),
        (READLINK, Res3::Readlink(Ok((a, b"/target/x")))),
        (READLINK, Res3::Readlink(Err((Nfsstat3::INVAL, a)))),
        (READ, Res3::Read(Ok((a, 5, true, b"hello")))),
        (READ, Res3::Read(Ok((None, 0, false, b"")))),
        (READ, Res3::Read(Err((Nfsstat3::ISDIR, None)))),
        (
            WRITE,
            Res3::Write(Ok((wcc(), 5, StableHow::FileSync, [9; 8]))),
        ),
        (WRITE, Res3::Write(Err((Nfsstat3::NOSPC, none)))),
        (CREATE, Res3::Create(Ok((Some(f), a, wcc())))),
        (MKDIR, Res3::Create(Ok((None, None, none)))),
        (SYMLINK, Res3::Create(Err((Nfsstat3::EXIST, wcc())))),
        (MKNOD, Res3::Create(Err((Nfsstat3::BADTYPE, none)))),
        (REMOVE, Res3::Remove(Nfsstat3::OK, wcc())),
        (RMDIR, Res3::Remove(Nfsstat3::NOTEMPTY, none)),
        (RENAME, Res3::Rename(Nfsstat3::OK, wcc(), none)),
        (RENAME, Res3::Rename(Nfsstat3::XDEV, none, wcc())),
        (LINK, Res3::Link(Nfsstat3::OK, a, wcc())),
        (LINK, Res3::Link(Nfsstat3::MLINK, None, none)),
        (READDIR, Res3::ReaddirFail(Nfsstat3::BAD_COOKIE, a)),
        (READDIRPLUS, Res3::ReaddirFail(Nfsstat3::TOOSMALL, None)),
        (FSSTAT, Res3::Fsstat(Ok((a, st, 0)))),
        (FSSTAT, Res3::Fsstat(Err((Nfsstat3::IO, None)))),
        (FSINFO, Res3::Fsinfo(Ok((None, info)))),
        (FSINFO, Res3::Fsinfo(Err((Nfsstat3::STALE, a)))),
        (PATHCONF, Res3::Pathconf(Ok((a, pc)))),
        (PATHCONF, Res3::Pathconf(Err((Nfsstat3::STALE, None)))),
        (COMMIT, Res3::Commit(Ok((wcc(), [1, 2, 3, 4, 5, 6, 7, 8])))),
        (COMMIT, Res3::Commit(Err((Nfsstat3::IO, wcc())))),
    ]
}

#[test]
fn accepts_getattr3res_ok_golden() {
    let want = words(&[[0].as_slice(), &fattr_words()].concat());
    assert_eq!(want.len(), 4 + 84);
    let r = Res3::Getattr(Ok(fattr()));
    assert_eq!(enc_res(&r), want);
    assert_eq!(decode_res(proc3::GETATTR, &want), Ok(r));
}

#[test]
fn accepts_lookup3res_fail_and_read3res_golden() {
    // LOOKUP3resfail: NOENT, dir_attributes FALSE.
    let r = Res3::Lookup(Err((Nfsstat3::NOENT, None)));
    assert_eq!(enc_res(&r), words(&[2, 0]));
    // READ3resok: attributes FALSE, count 3, eof TRUE, data<3> "abc" + 1 pad octet.
    let r = Res3::Read(Ok((None, 3, true, b"abc")));
    let want = words(&[0, 0, 3, 1, 3, u32::from_be_bytes(*b"abc\0")]);
    assert_eq!(enc_res(&r), want);
    assert_eq!(decode_res(proc3::READ, &want), Ok(r));
    // The DDP head is the same up to and including the data's length word.
    let head = encode_with(|w| encode_read_head(w, None, 3, true));
    assert_eq!(head, want[..20]);
}

#[test]
fn accepts_write3res_ok_golden() {
    // wcc_data: pre_op TRUE (size 10, mtime 1.2, ctime 3.4), post_op FALSE; count 5,
    // committed DATA_SYNC, verifier.
    let d = WccData {
        after: None,
        ..wcc()
    };
    let r = Res3::Write(Ok((d, 5, StableHow::DataSync, *b"verifier")));
    let want = words(&[
        0,
        1,
        0,
        10,
        1,
        2,
        3,
        4,
        0,
        5,
        1,
        u32::from_be_bytes(*b"veri"),
        u32::from_be_bytes(*b"fier"),
    ]);
    assert_eq!(enc_res(&r), want);
    assert_eq!(decode_res(proc3::WRITE, &want), Ok(r));
}

#[test]
fn accepts_every_result_round_trip() {
    let mut seen = [false; 22];
    for (p, r) in sample_res() {
        let b = enc_res(&r);
        assert_eq!(decode_res(p, &b), Ok(r), "{}", proc_name(p));
        seen[p as usize] = true;
    }
    assert!(seen.iter().all(|&s| s), "a procedure has no sample");
}

#[test]
fn rejects_truncated_results_at_every_length() {
    for (p, r) in sample_res() {
        let b = enc_res(&r);
        for n in 0..b.len() {
            assert!(
                decode_res(p, &b[..n]).is_err(),
                "{} decoded from {n} of {} octets",
                proc_name(p),
                b.len()
            );
        }
    }
}

#[test]
fn failure_arm_with_ok_status_goes_out_as_serverfault() {
    let b = enc_res(&Res3::Getattr(Err(Nfsstat3::OK)));
    assert_eq!(b, words(&[Nfsstat3::SERVERFAULT.0]));
    let b = enc_res(&Res3::Lookup(Err((Nfsstat3::OK, None))));
    assert_eq!(
        decode_res(proc3::LOOKUP, &b),
        Ok(Res3::Lookup(Err((Nfsstat3::SERVERFAULT, None))))
    );
}

#[test]
fn rejects_malformed_results() {
    // post_op_attr discriminant 2.
    assert!(matches!(
        decode_res(proc3::ACCESS, &words(&[0, 2, 0])),
        Err(DecodeError::Xdr(XdrError::BadBool { value: 2, .. }))
    ));
    // fattr3 with ftype 9.
    let mut ws = [0].to_vec();
    ws.extend(fattr_words());
    ws[1] = 9;
    assert_eq!(
        decode_res(proc3::GETATTR, &words(&ws)),
        Err(DecodeError::BadValue {
            what: "ftype3",
            value: 9
        })
    );
    // WRITE3resok with committed = 3.
    let b = words(&[0, 0, 0, 5, 3, 0, 0]);
    assert_eq!(
        decode_res(proc3::WRITE, &b),
        Err(DecodeError::BadValue {
            what: "stable_how",
            value: 3
        })
    );
    // PATHCONF booleans.
    let b = words(&[0, 0, 1, 2, 1, 5, 1, 1]);
    assert!(decode_res(proc3::PATHCONF, &b).is_err());
    // A READ whose data length runs past the input.
    let b = words(&[0, 0, 8, 1, 8, 0]);
    assert!(decode_res(proc3::READ, &b).is_err());
    // A 65-octet handle in LOOKUP3resok.
    let b = encode_with(|w| {
        w.put_u32(0)?;
        w.put_opaque(&[1; 65])?;
        w.put_u64(0)
    });
    assert!(decode_res(proc3::LOOKUP, &b).is_err());
}

#[test]
fn readdir_ok_is_left_to_the_directory_decoder() {
    assert_eq!(
        decode_res(proc3::READDIR, &words(&[0, 0, 0, 0, 0, 1])),
        Err(DecodeError::UnknownProc(proc3::READDIR))
    );
    assert_eq!(decode_res(22, &[]), Err(DecodeError::UnknownProc(22)));
}

#[test]
fn rejects_encoding_past_the_buffer() {
    let mut buf = [0u8; 40];
    let mut w = rpcrdma_engine::xdr::XdrWriter::new(&mut buf);
    assert!(matches!(
        encode_res(&mut w, &Res3::Getattr(Ok(fattr()))),
        Err(XdrError::NoSpace { .. })
    ));
    let mut buf = [0u8; 88];
    let mut w = rpcrdma_engine::xdr::XdrWriter::new(&mut buf);
    assert_eq!(encode_res(&mut w, &Res3::Getattr(Ok(fattr()))), Ok(()));
    assert_eq!(w.finish(), 88);
}

#[test]
fn decoders_survive_mutated_valid_results() {
    let mut rng = super::tests::Rng(0x2545_f491_4f6c_dd1d);
    for (_, r) in sample_res() {
        let base = enc_res(&r);
        if base.is_empty() {
            continue;
        }
        for _ in 0..100 {
            let mut b = base.clone();
            let i = (rng.next() % b.len() as u64) as usize;
            b[i] ^= 1 << (rng.next() % 8);
            let cut = (rng.next() % (b.len() as u64 + 1)) as usize;
            super::tests::decode_everything(&b);
            super::tests::decode_everything(&b[..cut]);
        }
    }
}

#[test]
fn decoded_results_re_encode_to_themselves() {
    let mut rng = super::tests::Rng(0x0fed_cba9_8765_4321);
    for (p, r) in sample_res() {
        let base = enc_res(&r);
        super::tests::check_reencode(p, &base);
        for _ in 0..100 {
            let mut b = base.clone();
            if let Some(i) = (!b.is_empty()).then(|| (rng.next() % b.len() as u64) as usize) {
                b[i] ^= 1 << (rng.next() % 8);
            }
            super::tests::check_reencode(p, &b);
        }
    }
}

#[test]
fn accepts_times_outside_nfstime3_as_their_low_32_bits() {
    // nfstime3 has unsigned 32-bit seconds; a store time past it (2^32 + 7 s, or before
    // 1970) goes out as its low 32 bits, as Linux nfsd's encoder sends it.
    for (seconds, wire) in [((1i64 << 32) + 7, 7u32), (-1, u32::MAX)] {
        let t = Time3 {
            seconds,
            nseconds: 9,
        };
        let b = encode_with(|w| put_time3(w, &t));
        assert_eq!(b, words(&[wire, 9]), "{seconds}");
        let back = get_time3(&mut XdrReader::new(&b)).expect("decode");
        assert_eq!(back.seconds, i64::from(wire), "decoded as unsigned");
    }
}
