//! CLONE (NFSv4.2, RFC 7862 §15.13: `Store::clone_range`), run against both stores: the
//! memory store shares its blocks; the directory store asks the host file system
//! (`FICLONERANGE`), which shares its extents on XFS and btrfs and refuses (NOTSUPP) on ext4
//! and tmpfs. Either way the destination must read as the source did, stay apart from it
//! after either is written, and grow to cover the range; offsets off the blocks' boundaries
//! are refused (INVAL), as XFS and btrfs refuse them.
//!
//! Normal operation: each store works in its own directory, with 4 KiB blocks (the memory
//! store's here, the file system's for the directory store); the directory store runs on the
//! directory `RPCRDMA_REFLINK_DIR` names (on a file system that clones: CI mounts an XFS image
//! with `reflink=1`; with `RPCRDMA_EXPECT_REFLINK=1` its absence fails the test) and on the
//! temp directory, where it must answer NOTSUPP. Recovery: the directories are removed when
//! their test ends.

use std::sync::Arc;

use super::*;

const K4: u64 = 4096;

/// `n` octets of a pattern that differs per `seed`.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
        .collect()
}

fn contents(s: &dyn Store, f: &Fh) -> Vec<u8> {
    let size = attr(s, f).size as usize;
    let (got, _) = read(s, f, 0, size + 1);
    assert_eq!(got.len(), size);
    got
}

/// The whole part, in directory `d` of `s` (a store that clones).
pub(super) fn clones(s: &dyn Store, d: &Fh) {
    let data = pattern(3 * K4 as usize + 100, 1);
    let src = file(s, d, "src");
    write(s, &src, 0, &data);
    // The whole source into an empty file: the same octets, the same size.
    let dst = file(s, d, "dst");
    changes(s, &dst, true, || {
        s.clone_range(&R, (&src, 0), (&dst, 0), data.len() as u64)
            .expect("clone");
    });
    assert_eq!(contents(s, &dst), data);
    // Apart after either is written.
    write(s, &src, 10, b"source");
    write(s, &dst, K4 + 10, b"destination");
    let (a, b) = (contents(s, &src), contents(s, &dst));
    assert_eq!(&a[10..16], b"source");
    assert_eq!(
        &b[10..16],
        &data[10..16],
        "the source's write stays in the source"
    );
    assert_eq!(&b[K4 as usize + 10..K4 as usize + 21], b"destination");
    assert_eq!(
        &a[K4 as usize + 10..K4 as usize + 21],
        &data[K4 as usize + 10..][..11]
    );
    // One block into the middle of another file: the rest of it kept, its size kept.
    let mid = file(s, d, "mid");
    let ys = vec![b'y'; 4 * K4 as usize];
    write(s, &mid, 0, &ys);
    s.clone_range(&R, (&src, K4), (&mid, 2 * K4), K4)
        .expect("clone one block");
    let got = contents(s, &mid);
    assert_eq!(got.len(), ys.len());
    assert_eq!(&got[..2 * K4 as usize], &ys[..2 * K4 as usize]);
    assert_eq!(
        &got[2 * K4 as usize..3 * K4 as usize],
        &data[K4 as usize..2 * K4 as usize]
    );
    assert_eq!(&got[3 * K4 as usize..], &ys[3 * K4 as usize..]);
    // Past the destination's end: it grows, with a hole before the range.
    let far = file(s, d, "far");
    s.clone_range(&R, (&src, 0), (&far, 2 * K4), 2 * K4)
        .expect("clone past the end");
    let got = contents(s, &far);
    assert_eq!(got.len(), 4 * K4 as usize);
    assert!(got[..2 * K4 as usize].iter().all(|&x| x == 0));
    assert_eq!(&got[2 * K4 as usize..], &a[..2 * K4 as usize]);
    // Within one file, ranges apart: fine.
    s.clone_range(&R, (&mid, 0), (&mid, 4 * K4), K4)
        .expect("clone within a file");
    assert_eq!(attr(s, &mid).size, 5 * K4);
    assert_eq!(&contents(s, &mid)[4 * K4 as usize..], &ys[..K4 as usize]);
    refusals(s, d, &src, &dst);
}

/// What both refuse: ranges past the source's end, overlapping ranges of one file, anything
/// but regular files, callers without permission.
fn refusals(s: &dyn Store, d: &Fh, src: &Fh, dst: &Fh) {
    let size = attr(s, src).size;
    let end = size.div_ceil(K4) * K4;
    assert_eq!(
        s.clone_range(&R, (src, end), (dst, 0), K4),
        Err(Nfsstat3::INVAL),
        "from past the source's end"
    );
    assert_eq!(
        s.clone_range(&R, (src, 0), (dst, 0), end + K4),
        Err(Nfsstat3::INVAL),
        "to past the source's end"
    );
    assert_eq!(
        s.clone_range(&R, (src, 0), (src, K4), 2 * K4),
        Err(Nfsstat3::INVAL),
        "overlapping within one file"
    );
    // Off the blocks' boundaries: offsets, or a count short of the source's end.
    for (at, count) in [((100, 0), K4), ((0, 100), K4), ((0, 0), 100)] {
        assert_eq!(
            s.clone_range(&R, (src, at.0), (dst, at.1), count),
            Err(Nfsstat3::INVAL),
            "{at:?} {count}"
        );
    }
    assert!(matches!(
        s.clone_range(&R, (src, 0), (d, 0), K4),
        Err(Nfsstat3::ISDIR | Nfsstat3::INVAL)
    ));
    // Another user may read the 0644 source but not write root's 0644 destination.
    let other = Cred::new(4000, 400);
    assert_eq!(
        s.clone_range(&other, (src, 0), (dst, 0), K4),
        Err(Nfsstat3::ACCES)
    );
    let mine = file(s, d, "mine");
    let ids = Sattr3 {
        uid: Some(4000),
        gid: Some(400),
        ..Sattr3::default()
    };
    s.setattr(&R, &mine, &ids, None).expect("chown");
    s.clone_range(&other, (src, 0), (&mine, 0), K4)
        .expect("into a file of its own");
    s.setattr(&R, src, &mode(0o600), None).expect("chmod");
    assert_eq!(
        s.clone_range(&other, (src, 0), (&mine, 0), K4),
        Err(Nfsstat3::ACCES),
        "from a source it may not read"
    );
}

#[test]
fn accepts_clones_in_the_memory_store() {
    let s = memory();
    clones(&s, &mkdir(&s, &s.root(), "clone"));
}

#[test]
fn accepts_clones_in_the_memory_store_sharing_registered_blocks_until_written() {
    // 64 KiB blocks in registered buffers: a clone takes none from the pool, the first write
    // to a shared block takes one (copy on write).
    let tp = crate::nfs::store::memory::test_pool::TestPool::new(32);
    let s = MemoryStore::with_pool(MemoryOptions::default(), tp.pool.clone());
    let d = s.root();
    let bs = tp.pool.buf_size();
    let data = pattern(2 * bs, 4);
    let src = file(&s, &d, "src");
    write(&s, &src, 0, &data);
    let free = tp.pool.available();
    let dst = file(&s, &d, "dst");
    s.clone_range(&R, (&src, 0), (&dst, 0), data.len() as u64)
        .expect("clone");
    assert_eq!(tp.pool.available(), free, "no buffer taken: blocks shared");
    let shared = |f: &Fh| match s.read_registered(&R, f, bs as u64, 100) {
        Some(Ok(r)) => r.buf,
        other => panic!("no registered block: {other:?}"),
    };
    assert!(Arc::ptr_eq(&shared(&src), &shared(&dst)), "one buffer");
    assert_eq!(contents(&s, &dst), data);
    write(&s, &dst, 5, b"!");
    assert_eq!(tp.pool.available(), free - 1, "copied on write");
    assert_eq!(contents(&s, &src), data);
}

#[test]
fn accepts_clones_in_the_memory_store_keeping_reserved_blocks_holes() {
    // Blocks 0 and 1 allocated but not written (holes for SEEK), block 2 written: the clone's
    // blocks are the same, and so is what SEEK finds.
    let s = memory();
    let d = s.root();
    let src = file(&s, &d, "src");
    s.fallocate(&R, &src, 0, 2 * K4, false).expect("allocate");
    write(&s, &src, 2 * K4, b"data");
    let dst = file(&s, &d, "dst");
    write(&s, &dst, 0, &pattern(3 * K4 as usize, 7));
    s.clone_range(&R, (&src, 0), (&dst, 0), 2 * K4 + 4)
        .expect("clone");
    assert_eq!(s.seek(&R, &dst, 0, false), Ok((2 * K4, false)));
    assert_eq!(s.seek(&R, &dst, 0, true), Ok((0, false)));
    // The last block held more than the range: its first octets copied, the rest kept.
    let mut want = contents(&s, &src);
    want.extend_from_slice(&pattern(3 * K4 as usize, 7)[want.len()..]);
    assert_eq!(contents(&s, &dst), want);
}

#[test]
fn accepts_a_clone_of_a_huge_sparse_file_in_the_memory_store_at_once() {
    // A 2^62-octet source holding one block: the clone shares that block and the holes
    // (2^50 blocks of 4 KiB are not walked); the destination is as long and charged a block.
    let s = memory();
    let d = s.root();
    let src = file(&s, &d, "huge");
    let size = Sattr3 {
        size: Some(1 << 62),
        ..Sattr3::default()
    };
    s.setattr(&R, &src, &size, None).expect("truncate up");
    write(&s, &src, 1 << 40, b"middle");
    let dst = file(&s, &d, "dst");
    let free = s.fsstat(&d).expect("fsstat").fbytes;
    s.clone_range(&R, (&src, 0), (&dst, 0), 1 << 62)
        .expect("holes shared");
    assert_eq!(attr(&s, &dst).size, 1 << 62);
    assert_eq!(read(&s, &dst, 1 << 40, 6).0, b"middle");
    assert!(free - s.fsstat(&d).expect("fsstat").fbytes <= K4 * 2);
}

#[test]
fn rejects_clones_in_the_dir_store_where_the_file_system_cannot_clone() {
    // The temp directory: ext4 or tmpfs here, neither of which shares extents.
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    let d = s.root();
    let src = file(&s, &d, "src");
    write(&s, &src, 0, &pattern(2 * K4 as usize, 5));
    let dst = file(&s, &d, "dst");
    let r = s.clone_range(&R, (&src, 0), (&dst, 0), K4);
    if r.is_ok() {
        eprintln!("note: the temp directory's file system clones; nothing to refuse");
        return;
    }
    assert_eq!(r, Err(Nfsstat3::NOTSUPP));
    assert_eq!(attr(&s, &dst).size, 0, "nothing changed");
}

#[test]
fn accepts_clones_in_the_dir_store_sharing_the_file_systems_extents() {
    let Some(base) = std::env::var_os("RPCRDMA_REFLINK_DIR") else {
        assert!(
            std::env::var_os("RPCRDMA_EXPECT_REFLINK").is_none(),
            "RPCRDMA_EXPECT_REFLINK is set but RPCRDMA_REFLINK_DIR is not"
        );
        eprintln!("skipped: RPCRDMA_REFLINK_DIR names no directory on XFS or btrfs");
        return;
    };
    let p = std::path::Path::new(&base).join(format!("rpcrdma-clone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("directory on the reflink file system");
    let t = TempDir(p);
    let s = DirStore::open(&t.0).expect("open");
    let d = mkdir(&s, &s.root(), "clone");
    clones(&s, &d);
    // Shared, not copied: cloning 16 MiB takes far less than 16 MiB of free space.
    let big = file(&s, &d, "big");
    let chunk = pattern(1 << 20, 6);
    for i in 0..16u64 {
        write(&s, &big, i << 20, &chunk);
    }
    let copy = file(&s, &d, "copy");
    let free = s.fsstat(&d).expect("fsstat").fbytes;
    s.clone_range(&R, (&big, 0), (&copy, 0), 16 << 20)
        .expect("clone 16 MiB");
    let used = free.saturating_sub(s.fsstat(&d).expect("fsstat").fbytes);
    assert!(used < 4 << 20, "{used} octets used by a clone of 16 MiB");
    assert_eq!(read(&s, &copy, 15 << 20, 1 << 20).0, chunk);
}
