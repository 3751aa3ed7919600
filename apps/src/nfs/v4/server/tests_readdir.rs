//! Unit tests of NFSv4.1 READDIR (RFC 8881 §18.23): listings in pages of at most `maxcount`
//! octets that together name every entry once, NFS4ERR_TOOSMALL only when not one entry fits,
//! and an entry the store lists without attributes (a mount point inside an export of the
//! `dir:` store) given `rdattr_error`, as the Linux client asks for it.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_readdir`.
//! Recovery: a failure names the entry or the page.

use rpcrdma_engine::xdr::XdrReader;

use super::attrs::fa;
use super::tests::{A, H};
use super::tests_view::View;
use super::xdr::st;
use crate::nfs::identity::Cred;
use crate::nfs::store::memory::MemoryStore;
use crate::nfs::store::Store;
use crate::nfs::types::{CreateHow, Sattr3};
use crate::nfs::v4::op;

/// Files `f0`.. `f{n-1}` and directory `m` in the root of `s`.
fn files(s: &MemoryStore, n: usize) {
    let root = s.root();
    for i in 0..n {
        let name = format!("f{i}");
        s.create(
            &Cred::ROOT,
            &root,
            name.as_bytes(),
            &CreateHow::Unchecked(Sattr3::default()),
        )
        .expect("create");
    }
    s.mkdir(&Cred::ROOT, &root, b"m", &Sattr3::default())
        .expect("mkdir");
}

/// READDIR of the root from `cookie` (verifier `verf`) within `maxcount`, asking for
/// `words`.
fn readdir(
    h: &mut H,
    cookie: u64,
    verf: &[u8],
    maxcount: u32,
    words: [u32; 2],
) -> super::tests::Raw {
    let root = h.root();
    h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::READDIR)
            .u64(cookie)
            .fixed(verf)
            .u32(maxcount)
            .u32(maxcount)
            .u32(2)
            .u32(words[0])
            .u32(words[1]),
    ])
}

/// One listed entry: cookie, name, bitmap words, attribute values.
type Entry = (u64, String, Vec<u32>, Vec<u8>);

/// The verifier, entries and `eof` of READDIR4resok `b`.
fn entries(b: &[u8]) -> ([u8; 8], Vec<Entry>, bool) {
    let mut x = XdrReader::new(b);
    let verf = x
        .get_fixed_opaque(8)
        .expect("verifier")
        .try_into()
        .expect("8");
    let mut list = Vec::new();
    while x.get_u32().expect("value follows") == 1 {
        let cookie = x.get_u64().expect("cookie");
        let name = String::from_utf8(x.get_opaque(255).expect("name").to_vec()).expect("utf-8");
        let n = x.get_u32().expect("bitmap length");
        let words = (0..n).map(|_| x.get_u32().expect("word")).collect();
        let vals = x.get_opaque(4096).expect("attr_vals").to_vec();
        list.push((cookie, name, words, vals));
    }
    let eof = x.get_u32().expect("eof") == 1;
    (verf, list, eof)
}

const TYPE_FILEID: u32 = (1 << fa::TYPE) | (1 << fa::FILEID);
const RDATTR_ERROR: u32 = 1 << fa::RDATTR_ERROR;
const MOUNTED_ON: u32 = 1 << (fa::MOUNTED_ON_FILEID - 32);

#[test]
fn accepts_listings_in_pages_within_maxcount_that_name_every_entry_once() {
    let mut h = View::listed_bare(b"none").serve_after(|s| files(s, 40));
    let (mut cookie, mut verf, mut seen, mut pages) = (0, [0u8; 8], Vec::new(), 0);
    loop {
        let r = readdir(&mut h, cookie, &verf, 400, [TYPE_FILEID, 0]);
        assert_eq!(r.status, st::OK, "page {pages}");
        // The result: status, then READDIR4resok.
        assert!(r.last.len() <= 400, "page {pages}: {} octets", r.last.len());
        let (v, list, eof) = entries(&r.last);
        assert!(!list.is_empty(), "page {pages} lists nothing");
        for (c, name, words, vals) in &list {
            assert_eq!(
                (words.as_slice(), vals.len()),
                (&[TYPE_FILEID][..], 12),
                "{name}"
            );
            seen.push(name.clone());
            cookie = *c;
        }
        (verf, pages) = (v, pages + 1);
        if eof {
            break;
        }
        assert!(pages < 41, "no end");
    }
    assert!(pages > 1, "the listing needed more than one page");
    seen.sort();
    let mut want: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
    want.push("m".into());
    want.sort();
    assert_eq!(seen, want);
}

#[test]
fn rejects_a_maxcount_below_one_entry_with_toosmall_but_not_for_an_empty_directory() {
    let mut h = View::listed_bare(b"none").serve_after(|s| files(s, 1));
    let r = readdir(&mut h, 0, &[0; 8], 24, [TYPE_FILEID, 0]);
    assert_eq!(r.status, st::TOOSMALL);
    let mut h = View::listed_bare(b"none").serve();
    let r = readdir(&mut h, 0, &[0; 8], 24, [TYPE_FILEID, 0]);
    assert_eq!(r.status, st::OK, "an empty directory fits");
    assert_eq!(entries(&r.last).1.len(), 0);
    assert!(entries(&r.last).2, "eof");
}

#[test]
fn accepts_an_entry_listed_without_attributes_with_rdattr_error() {
    let mut h = View::listed_bare(b"m").serve_after(|s| files(s, 2));
    let r = readdir(
        &mut h,
        0,
        &[0; 8],
        8192,
        [RDATTR_ERROR | TYPE_FILEID, MOUNTED_ON],
    );
    assert_eq!(r.status, st::OK);
    let (_, list, eof) = entries(&r.last);
    assert!(eof);
    assert_eq!(list.len(), 3, "{list:?}");
    for (_, name, words, vals) in &list {
        if name == "m" {
            // rdattr_error NFS4ERR_ACCESS, then the file id as mounted_on_fileid.
            assert_eq!(words, &[RDATTR_ERROR, MOUNTED_ON], "{name}");
            assert_eq!(vals.len(), 12);
            assert_eq!(
                u32::from_be_bytes(vals[..4].try_into().unwrap()),
                st::ACCESS
            );
            assert_ne!(
                u64::from_be_bytes(vals[4..].try_into().unwrap()),
                0,
                "file id"
            );
        } else {
            // Success carries no rdattr_error: the asked-for attributes only.
            assert_eq!(words, &[TYPE_FILEID, MOUNTED_ON], "{name}");
            assert_eq!(vals.len(), 4 + 8 + 8, "{name}");
        }
    }
}

#[test]
fn rejects_a_listing_with_an_entry_without_attributes_when_rdattr_error_is_not_asked() {
    let mut h = View::listed_bare(b"m").serve_after(|s| files(s, 2));
    let r = readdir(&mut h, 0, &[0; 8], 8192, [TYPE_FILEID, 0]);
    assert_eq!(r.status, st::ACCESS);
}
