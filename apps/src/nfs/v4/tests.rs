//! Unit tests of the NFSv4.0 (RFC 7530) part of the codec: the test pattern, DDP WRITE
//! encoding, READ results placed directly or inline, READDIR / GETATTR results, and rejection
//! of results that do not match the operation sent.

use super::*;

#[test]
fn accepts_pattern_ranges_consistent_with_the_whole() {
    let mut whole = vec![0u8; 1000];
    pattern(7, 0, &mut whole);
    for (off, len) in [(0usize, 1usize), (3, 17), (8, 8), (13, 500), (999, 1)] {
        let mut part = vec![0u8; len];
        pattern(7, off as u64, &mut part);
        assert_eq!(part, whole[off..off + len], "range {off}+{len}");
    }
    let mut other = vec![0u8; 1000];
    pattern(8, 0, &mut other);
    assert_ne!(whole, other, "seeds differ");
}

#[test]
fn accepts_write_with_ddp_item_cut_after_length_word() {
    let e = encode_compound(
        "t",
        &[
            Op::PutFh(&[1, 2, 3]),
            Op::Write {
                offset: 5,
                stable: Stable::FileSync,
                data: WriteData::Ddp(4097),
            },
            Op::GetAttrTypeSize,
        ],
    );
    let at = e.ddp_at.expect("cut");
    assert_eq!(at % 4, 0);
    assert_eq!(&e.bytes[at - 4..at], &4097u32.to_be_bytes());
    // GETATTR follows right after the cut: no data, no pad.
    assert_eq!(&e.bytes[at..at + 4], &op::GETATTR.to_be_bytes());
    let inline = encode_compound(
        "t",
        &[Op::Write {
            offset: 5,
            stable: Stable::FileSync,
            data: WriteData::Inline(&[9; 5]),
        }],
    );
    assert!(inline.ddp_at.is_none());
    assert_eq!(inline.bytes.len() % 4, 0);
}

fn res_header(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    put_u32(&mut b, 0);
    put_opaque(&mut b, b"t");
    put_u32(&mut b, n);
    b
}

#[test]
fn accepts_read_result_placed_directly_or_inline() {
    let sent = [Op::Read {
        offset: 0,
        count: 4096,
    }];
    let mut direct = res_header(1);
    put_u32(&mut direct, op::READ);
    put_u32(&mut direct, 0);
    put_u32(&mut direct, 1); // eof
    put_u32(&mut direct, 4095); // length only
    let r = decode_compound(&direct, &sent, ReadPlacement::FirstDirect).unwrap();
    assert_eq!(
        r.ops[0].result,
        OpResult::Read {
            eof: true,
            len: 4095,
            data: vec![]
        }
    );
    let mut inline = res_header(1);
    put_u32(&mut inline, op::READ);
    put_u32(&mut inline, 0);
    put_u32(&mut inline, 0);
    put_opaque(&mut inline, &[1, 2, 3]);
    let r = decode_compound(&inline, &sent, ReadPlacement::Inline).unwrap();
    assert_eq!(
        r.ops[0].result,
        OpResult::Read {
            eof: false,
            len: 3,
            data: vec![1, 2, 3]
        }
    );
    // The same octets read as direct placement leave the data behind: refused.
    assert!(decode_compound(&inline, &sent, ReadPlacement::FirstDirect).is_err());
}

#[test]
fn rejects_result_of_another_operation() {
    let mut b = res_header(1);
    put_u32(&mut b, op::GETFH);
    put_u32(&mut b, 0);
    put_opaque(&mut b, &[0; 8]);
    let e = decode_compound(&b, &[Op::PutRootFh], ReadPlacement::Inline).unwrap_err();
    assert!(matches!(e, Nfs4Error::WrongOp { index: 0, .. }));
}

#[test]
fn accepts_readdir_and_attrs() {
    let mut b = res_header(2);
    put_u32(&mut b, op::GETATTR);
    put_u32(&mut b, 0);
    put_u32(&mut b, 1);
    put_u32(&mut b, (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE));
    let mut vals = Vec::new();
    put_u32(&mut vals, NF4DIR);
    put_u64(&mut vals, 4096);
    put_opaque(&mut b, &vals);
    put_u32(&mut b, op::READDIR);
    put_u32(&mut b, 0);
    b.extend_from_slice(&[7; 8]);
    for (c, n) in [(3u64, "a"), (4, "bcdef")] {
        put_u32(&mut b, 1);
        put_u64(&mut b, c);
        put_opaque(&mut b, n.as_bytes());
        put_u32(&mut b, 0); // empty bitmap
        put_u32(&mut b, 0); // no values
    }
    put_u32(&mut b, 0);
    put_u32(&mut b, 1);
    let sent = [
        Op::GetAttrTypeSize,
        Op::ReadDir {
            cookie: 0,
            verifier: [0; 8],
            dircount: 1000,
            maxcount: 2000,
        },
    ];
    let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
    assert_eq!(
        r.ops[0].result,
        OpResult::Attrs {
            ftype: Some(NF4DIR),
            size: Some(4096)
        }
    );
    match &r.ops[1].result {
        OpResult::ReadDir { entries, eof, .. } => {
            assert!(*eof);
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[1].name, "bcdef");
            assert_eq!(entries[1].cookie, 4);
        }
        other => panic!("{other:?}"),
    }
    // Truncated: an error, not a panic.
    for cut in 0..b.len() {
        let _ = decode_compound(&b[..cut], &sent, ReadPlacement::Inline);
    }
}
