//! Tests of the directory listing codec: READDIR / READDIRPLUS golden vectors from RFC 1813's
//! XDR, [`DirWriter`] limits (count, maxcount, dircount, the writer's own buffer) checked to
//! the octet, and [`decode_readdir_res`] on what the writer produced.
//!
//! Normal operation: part of `cargo test -p rpcrdma-apps --lib nfs::v3::proto`. Recovery: a
//! failure names the limit that was passed or left unused.

use super::tests::{fattr, fattr_words, fh, w4, words};
use super::*;
use crate::nfs::types::{DirEntry, Fh, Nfsstat3};
use rpcrdma_engine::xdr::{roundup4, XdrError, XdrWriter};

fn owned(e: &DirEntry<'_>, plus: bool) -> OwnedDirEntry {
    OwnedDirEntry {
        fileid: e.fileid,
        name: e.name.to_vec(),
        cookie: e.cookie,
        attr: e.plus.filter(|_| plus).map(|p| p.1),
        fh: e.plus.filter(|_| plus).map(|p| p.0),
    }
}

#[test]
fn accepts_readdirplus3resok_golden_two_entries() {
    let handle = fh(&[0xab; 6]);
    let e1 = DirEntry {
        fileid: 42,
        name: b"file",
        cookie: 1,
        plus: Some((handle, fattr())),
    };
    let e2 = DirEntry {
        fileid: 43,
        name: b"dir12",
        cookie: 2,
        plus: None,
    };
    let mut buf = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut buf);
    let mut d = DirWriter::begin(&mut w, true, None, *b"cookieVF", 1000, 1000).unwrap();
    assert!(d.push(&e1));
    assert!(d.push(&e2));
    assert_eq!(d.entries(), 2);
    d.finish(true).unwrap();
    let n = w.finish();

    let mut ws = vec![0, 0, w4(*b"cook"), w4(*b"ieVF")]; // status, dir attrs FALSE, verifier
    ws.extend([1, 0, 42, 4, w4(*b"file"), 0, 1, 1]); // entry, fileid, name, cookie, attrs TRUE
    ws.extend(fattr_words());
    ws.extend([1, 6, 0xabab_abab, 0xabab_0000]); // post_op_fh3 TRUE, fh<6> + 2 pad
    ws.extend([1, 0, 43, 5, w4(*b"dir1"), w4(*b"2\0\0\0"), 0, 2, 0, 0]); // no attrs, no fh
    ws.extend([0, 1]); // end of list, eof
    assert_eq!(&buf[..n], &words(&ws)[..]);

    let got = decode_readdir_res(&buf[..n], true).unwrap();
    assert_eq!(
        got,
        ReaddirRes {
            status: Nfsstat3::OK,
            dir_attr: None,
            verf: *b"cookieVF",
            entries: vec![owned(&e1, true), owned(&e2, true)],
            eof: true,
        }
    );
}

#[test]
fn accepts_readdir3resok_golden() {
    // A plain READDIR ignores the entry's handle and attributes.
    let e = DirEntry {
        fileid: 7,
        name: b"ab",
        cookie: 0x1_0000_0009,
        plus: Some((fh(&[1]), fattr())),
    };
    let mut buf = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut buf);
    let mut d = DirWriter::begin(&mut w, false, Some(&fattr()), [0; 8], 0, 4096).unwrap();
    assert!(d.push(&e));
    d.finish(false).unwrap();
    let n = w.finish();
    let mut ws = vec![0, 1];
    ws.extend(fattr_words());
    ws.extend([0, 0, 1, 0, 7, 2, w4(*b"ab\0\0"), 1, 9, 0, 0]);
    assert_eq!(&buf[..n], &words(&ws)[..]);
    let got = decode_readdir_res(&buf[..n], false).unwrap();
    assert_eq!(got.dir_attr, Some(fattr()));
    assert_eq!(got.entries, vec![owned(&e, false)]);
    assert!(!got.eof);
}

#[test]
fn accepts_readdir_failure() {
    let b = words(&[Nfsstat3::NOTDIR.0, 0]);
    let got = decode_readdir_res(&b, true).unwrap();
    assert_eq!(got.status, Nfsstat3::NOTDIR);
    assert!(got.entries.is_empty());
}

/// Entries with names of 1..=13 octets; every third one without handle and attributes.
fn entries<'a>(handle: &Fh, names: &'a [Vec<u8>]) -> Vec<DirEntry<'a>> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| DirEntry {
            fileid: 1000 + i as u64,
            name,
            cookie: i as u64 + 1,
            plus: (i % 3 != 2).then_some((*handle, fattr())),
        })
        .collect()
}

fn names() -> Vec<Vec<u8>> {
    (0..60)
        .map(|i| vec![b'a' + (i % 26) as u8; 1 + i % 13])
        .collect()
}

/// (whole entry, dircount share) octets, computed from RFC 1813's XDR independently of the
/// writer.
fn entry_sizes(e: &DirEntry<'_>, plus: bool) -> (usize, usize) {
    let dir = 8 + 4 + roundup4(e.name.len()) + 8;
    let extra = match (plus, &e.plus) {
        (false, _) => 0,
        (true, Some((h, _))) => 4 + 84 + 4 + 4 + roundup4(h.as_bytes().len()),
        (true, None) => 8,
    };
    (4 + dir + extra, dir)
}

/// Fills one listing under the given limits and checks it against the limits to the octet:
/// every pushed entry fits, the refused one would not, and the decoded list is the pushed one.
fn check_fill(plus: bool, dircount: u32, maxcount: u32, buf_len: usize) {
    let handle = fh(&[0x11; 20]);
    let names = names();
    let all = entries(&handle, &names);
    let mut buf = vec![0u8; buf_len];
    let mut w = XdrWriter::new(&mut buf);
    let limit = if plus {
        maxcount
    } else {
        dircount.max(maxcount)
    } as usize;
    let limit = limit.min(buf_len);
    let Ok(mut d) = DirWriter::begin(&mut w, plus, None, [5; 8], dircount, maxcount) else {
        assert!(limit < 24, "begin refused limit {limit}");
        assert_eq!(w.position(), 0, "refused begin wrote");
        return;
    };
    let (mut used, mut dir_used, mut pushed) = (16usize, 0usize, 0usize);
    for e in &all {
        let (size, dir) = entry_sizes(e, plus);
        let fits = used + size + 8 <= limit && (!plus || dir_used + dir <= dircount as usize);
        assert_eq!(
            d.push(e),
            fits,
            "entry {pushed} under limits {dircount}/{maxcount}"
        );
        if !fits {
            break;
        }
        used += size;
        dir_used += dir;
        pushed += 1;
    }
    assert_eq!(d.entries(), pushed);
    d.finish(pushed == all.len()).unwrap();
    let n = w.finish();
    assert_eq!(n, used + 8);
    assert!(n <= limit);
    let got = decode_readdir_res(&buf[..n], plus).unwrap();
    let want: Vec<_> = all[..pushed].iter().map(|e| owned(e, plus)).collect();
    assert_eq!(got.entries, want);
}

#[test]
fn dir_writer_respects_readdir_count_exactly() {
    for count in 0..1200 {
        check_fill(false, count, count, 1 << 16);
        check_fill(false, 0, count, 1 << 16);
        check_fill(false, count, 0, 1 << 16);
    }
}

#[test]
fn dir_writer_respects_readdirplus_maxcount_exactly() {
    for maxcount in 0..3000 {
        check_fill(true, u32::MAX, maxcount, 1 << 16);
    }
}

#[test]
fn dir_writer_respects_readdirplus_dircount_exactly() {
    for dircount in 0..1500 {
        check_fill(true, dircount, 1 << 20, 1 << 16);
    }
}

#[test]
fn dir_writer_clamps_limits_to_the_buffer() {
    for buf_len in 0..800 {
        check_fill(false, u32::MAX, u32::MAX, buf_len);
        check_fill(true, u32::MAX, u32::MAX, buf_len);
    }
}

#[test]
fn rejects_limits_below_the_empty_reply() {
    let mut buf = [0u8; 512];
    let mut w = XdrWriter::new(&mut buf);
    // With directory attributes the empty READDIR3resok takes 4 + 88 + 8 + 8 = 108 octets.
    assert!(matches!(
        DirWriter::begin(&mut w, false, Some(&fattr()), [0; 8], 107, 107),
        Err(XdrError::NoSpace { .. })
    ));
    assert_eq!(w.position(), 0);
    let d = DirWriter::begin(&mut w, false, Some(&fattr()), [0; 8], 108, 108).unwrap();
    d.finish(true).unwrap();
    assert_eq!(w.finish(), 108);
}

#[test]
fn rejects_truncated_listings_at_every_length() {
    let handle = fh(&[2; 9]);
    let names = names();
    let all = entries(&handle, &names[..7]);
    for plus in [false, true] {
        let mut buf = vec![0u8; 8192];
        let mut w = XdrWriter::new(&mut buf);
        let mut d = DirWriter::begin(&mut w, plus, Some(&fattr()), [3; 8], 8192, 8192).unwrap();
        for e in &all {
            assert!(d.push(e));
        }
        d.finish(true).unwrap();
        let n = w.finish();
        assert_eq!(
            decode_readdir_res(&buf[..n], plus).unwrap().entries.len(),
            7
        );
        for cut in 0..n {
            assert!(decode_readdir_res(&buf[..cut], plus).is_err(), "cut {cut}");
        }
    }
}

#[test]
fn rejects_malformed_listings() {
    // value_follows 2.
    let b = words(&[0, 0, 0, 0, 2]);
    assert!(matches!(
        decode_readdir_res(&b, false),
        Err(DecodeError::Xdr(XdrError::BadBool { value: 2, .. }))
    ));
    // A name longer than 4096 octets.
    let b = words(&[0, 0, 0, 0, 1, 0, 1, 5000]);
    assert!(matches!(
        decode_readdir_res(&b, false),
        Err(DecodeError::Xdr(XdrError::TooLong { len: 5000, .. }))
    ));
    // A 65-octet handle in an entry.
    let mut ws = vec![0, 0, 0, 0, 1, 0, 1, 1, w4(*b"x\0\0\0"), 0, 1, 0, 1, 65];
    ws.extend([0u32; 17]);
    ws.extend([0, 1]);
    assert!(decode_readdir_res(&words(&ws), true).is_err());
}
