//! Tests of the memory store with a registered pool: zero-copy READ ranges
//! ([`Store::read_registered`]) against what [`Store::read`] answers, copy on write while a
//! reply holds a block, and capacity that does not depend on where blocks live.
//!
//! Normal operation: each test builds a store on a [`TestPool`] of 256 KiB buffers. Recovery:
//! none; the pool's endpoint stops when the test ends.

use super::charge;
use super::test_pool::{TestPool, TEST_BUF};
use super::{MemoryOptions, MemoryStore};
use crate::nfs::identity::Cred;
use crate::nfs::store::Store;
use crate::nfs::types::{CreateHow, Fh, Nfsstat3, Sattr3, StableHow};

/// The identity the tests act as.
const R: Cred = Cred::ROOT;

fn store(tp: &TestPool, capacity: u64) -> MemoryStore {
    MemoryStore::with_pool(
        MemoryOptions {
            capacity,
            ..MemoryOptions::default()
        },
        tp.pool.clone(),
    )
}

fn file(s: &MemoryStore, name: &str) -> Fh {
    let how = CreateHow::Guarded(Sattr3::default());
    s.create(&R, &s.root(), name.as_bytes(), &how)
        .expect("create")
}

fn write(s: &MemoryStore, fh: &Fh, off: u64, data: &[u8]) {
    s.write(&R, fh, off, data, StableHow::Unstable)
        .expect("write");
}

fn read(s: &MemoryStore, fh: &Fh, off: u64, len: usize) -> (Vec<u8>, bool) {
    let mut out = vec![0xAAu8; len];
    let (n, eof) = s.read(&R, fh, off, &mut out).expect("read");
    out.truncate(n);
    (out, eof)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn zero_copy_ranges_match_what_read_copies() {
    let tp = TestPool::new(16);
    let s = store(&tp, 1 << 30);
    let f = file(&s, "f");
    let size = 3 * TEST_BUF + 70_000;
    let data = pattern(size, 7);
    write(&s, &f, 0, &data);
    for (off, count) in [
        (0u64, TEST_BUF),
        (5, 4096),
        (TEST_BUF as u64, TEST_BUF),
        (3 * TEST_BUF as u64, 4096),
        (3 * TEST_BUF as u64 + 69_999, 1),
    ] {
        let r = s
            .read_registered(&R, &f, off, count)
            .expect("registered")
            .expect("ok");
        let (want, eof) = read(&s, &f, off, count);
        assert_eq!(&r.buf[r.off..r.off + r.len], &want[..], "at {off}");
        assert_eq!(r.eof, eof, "eof at {off}");
    }
    // The last block, clamped to the file size: eof.
    let r = s
        .read_registered(&R, &f, 3 * TEST_BUF as u64, TEST_BUF)
        .expect("some")
        .expect("ok");
    assert_eq!((r.off, r.len, r.eof), (0, 70_000, true));
    // A small file stays in a Vec: no zero copy.
    let g = file(&s, "g");
    write(&s, &g, 0, &data[..1000]);
    assert!(s.read_registered(&R, &g, 0, 1000).is_none());
}

#[test]
fn read_registered_is_none_where_read_must_answer() {
    let tp = TestPool::new(16);
    let s = store(&tp, 1 << 30);
    let f = file(&s, "f");
    write(&s, &f, 0, &pattern(TEST_BUF, 1));
    write(&s, &f, 2 * TEST_BUF as u64 + 10, b"small tail");
    assert!(s.read_registered(&R, &f, 0, 0).is_none(), "zero count");
    assert!(
        s.read_registered(&R, &f, 1 << 40, 10).is_none(),
        "past the end"
    );
    assert!(
        s.read_registered(&R, &f, TEST_BUF as u64 - 4, 8).is_none(),
        "two blocks"
    );
    assert!(
        s.read_registered(&R, &f, TEST_BUF as u64 + 4, 8).is_none(),
        "a hole"
    );
    assert!(
        s.read_registered(&R, &f, 2 * TEST_BUF as u64, 20).is_none(),
        "a Vec block"
    );
    let dir = s
        .mkdir(&R, &s.root(), b"d", &Sattr3::default())
        .expect("mkdir");
    assert_eq!(
        s.read_registered(&R, &dir, 0, 8).map(|r| r.err()),
        Some(Some(Nfsstat3::ISDIR))
    );
    s.remove(&R, &s.root(), b"f").expect("remove");
    assert_eq!(
        s.read_registered(&R, &f, 0, 8).map(|r| r.err()),
        Some(Some(Nfsstat3::STALE))
    );
    let plain = MemoryStore::new(MemoryOptions::default());
    let g = file(&plain, "g");
    plain
        .write(&R, &g, 0, &pattern(TEST_BUF, 2), StableHow::Unstable)
        .expect("write");
    assert!(
        plain.read_registered(&R, &g, 0, 8).is_none(),
        "no pool, no zero copy"
    );
}

#[test]
fn a_held_read_keeps_old_data_while_the_file_changes() {
    let tp = TestPool::new(16);
    let s = store(&tp, 1 << 30);
    let f = file(&s, "f");
    let old = pattern(TEST_BUF, 3);
    write(&s, &f, 0, &old);
    let held = s
        .read_registered(&R, &f, 0, TEST_BUF)
        .expect("some")
        .expect("ok");
    write(&s, &f, 100, b"changed");
    let trunc = Sattr3 {
        size: Some(10),
        ..Sattr3::default()
    };
    assert_eq!(
        &held.buf[..TEST_BUF],
        &old[..],
        "the reply's octets changed"
    );
    let (now, _) = read(&s, &f, 0, 200);
    assert_eq!(&now[100..107], b"changed");
    s.setattr(&R, &f, &trunc, None).expect("truncate");
    assert_eq!(&held.buf[..TEST_BUF], &old[..]);
    assert_eq!(read(&s, &f, 0, 200), (old[..10].to_vec(), true));
}

#[test]
fn capacity_is_the_same_whichever_kind_holds_a_block() {
    // Four buffers (one kept in reserve): three blocks registered, the rest Vecs.
    let tp = TestPool::new(4);
    let bs = TEST_BUF;
    let cap = 2 * charge::INODE + charge::entry(1) + 6 * charge::block(bs, bs);
    let s = store(&tp, cap);
    let p = MemoryStore::new(MemoryOptions {
        capacity: cap,
        block_size: TEST_BUF,
        ..MemoryOptions::default()
    });
    let (f, g) = (file(&s, "f"), file(&p, "f"));
    for i in 0..6u64 {
        let chunk = pattern(TEST_BUF - 8, i as u8);
        write(&s, &f, i * TEST_BUF as u64, &chunk);
        write(&p, &g, i * TEST_BUF as u64, &chunk);
    }
    assert_eq!(tp.pool.available(), 1, "the reserve stays free");
    let (fs, fp) = (s.fsstat(&f).expect("fsstat"), p.fsstat(&g).expect("fsstat"));
    assert_eq!(fs, fp);
    assert_eq!(
        s.getattr(&f).expect("attr").used,
        p.getattr(&g).expect("attr").used
    );
    // The blocks are charged whole: the last octets of each fit, a new block does not:
    // NOSPC from capacity, never from the pool.
    assert_eq!(s.fsstat(&f).expect("fsstat").fbytes, 0);
    write(&s, &f, 5 * TEST_BUF as u64 + 100, &[1]);
    write(&s, &f, 6 * TEST_BUF as u64 - 8, &[9u8; 8]);
    assert_eq!(s.fsstat(&f).expect("fsstat").fbytes, 0);
    assert_eq!(
        s.write(&R, &f, 7 * TEST_BUF as u64, &[1], StableHow::Unstable),
        Err(Nfsstat3::NOSPC)
    );
    for i in 0..6u64 {
        let (got, _) = read(&s, &f, i * TEST_BUF as u64, TEST_BUF - 8);
        let mut want = pattern(TEST_BUF - 8, i as u8);
        if i == 5 {
            want[100] = 1;
        }
        assert_eq!(got, want, "block {i}");
    }
}
