//! Holes and reserved space (NFSv4.2 ALLOCATE, DEALLOCATE, SEEK: `Store::fallocate`,
//! `Store::seek`), run against both stores: the directory store's are the host file system's
//! own (`fallocate`, `lseek` with `SEEK_DATA` / `SEEK_HOLE`), so the memory store must answer
//! each step as Linux's file systems do: allocated space reads as zeros and stays a hole until
//! written, the size grows to cover an allocation and stays over a punched hole, and the same
//! errors.
//!
//! Normal operation: each store works in its own directory of the export, with 4 KiB blocks
//! (the memory store's here, the file system's for the directory store). Recovery: the
//! directory store's temp directory is removed when its test ends.

use super::*;

const K4: u64 = 4096;

/// The whole part, in directory `d` of `s`.
pub(super) fn space(s: &dyn Store, d: &Fh) {
    let f = file(s, d, "f");
    write(s, &f, 0, b"abc");
    // ALLOCATE 64 KiB: the size covers it, what was written stays, the rest reads as zeros.
    s.fallocate(&R, &f, 0, 16 * K4, false).expect("allocate");
    assert_eq!(attr(s, &f).size, 16 * K4);
    // Allocated but not written: holes for SEEK. (Before any READ of them: on ext4 a page of
    // an allocated range that was read into the page cache counts as data; on tmpfs, as in
    // the memory store, it stays a hole.)
    assert_eq!(s.seek(&R, &f, 0, false), Ok((0, false)));
    assert_eq!(s.seek(&R, &f, 0, true), Ok((K4, false)));
    assert_eq!(s.seek(&R, &f, 2 * K4, false), Err(Nfsstat3::NXIO));
    let (got, _) = read(s, &f, 0, 8192);
    assert_eq!(&got[..3], b"abc");
    assert!(got[3..].iter().all(|&b| b == 0));
    // Written: data.
    write(s, &f, 40_000, b"x");
    assert_eq!(s.seek(&R, &f, 2 * K4, false), Ok((9 * K4, false)));
    assert_eq!(s.seek(&R, &f, 9 * K4, true), Ok((10 * K4, false)));
    // At or past the end: NXIO; the end itself is a hole.
    assert_eq!(s.seek(&R, &f, 16 * K4, true), Err(Nfsstat3::NXIO));
    assert_eq!(s.seek(&R, &f, 15 * K4, true), Ok((15 * K4, false)));
    // DEALLOCATE the written block: zeros, a hole, the size kept.
    changes(s, &f, true, || {
        s.fallocate(&R, &f, 9 * K4, K4, true).expect("punch");
    });
    assert_eq!(read(s, &f, 40_000, 1).0, [0]);
    assert_eq!(s.seek(&R, &f, 2 * K4, false), Err(Nfsstat3::NXIO));
    assert_eq!(attr(s, &f).size, 16 * K4);
    // ALLOCATE past the end grows the file.
    s.fallocate(&R, &f, 16 * K4, K4, false)
        .expect("allocate more");
    assert_eq!(attr(s, &f).size, 17 * K4);
    errors(s, d, &f);
    copies(s, d);
}

/// COPY within the store: what the source holds past the offset, written at the destination's
/// offset; short at the end of the source, nothing past it; the permissions READ and WRITE ask.
fn copies(s: &dyn Store, d: &Fh) {
    let src = file(s, d, "src");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    write(s, &src, 0, &data);
    let dst = file(s, d, "dst");
    assert_eq!(s.copy(&R, (&src, 100), (&dst, 7), 5_000), Ok(5_000));
    let (got, _) = read(s, &dst, 0, 6_000);
    assert_eq!(got.len(), 5_007);
    assert!(got[..7].iter().all(|&b| b == 0));
    assert_eq!(&got[7..], &data[100..5_100]);
    assert_eq!(
        s.copy(&R, (&src, 9_000), (&dst, 0), 5_000),
        Ok(1_000),
        "short at the end"
    );
    assert_eq!(
        s.copy(&R, (&src, 10_000), (&dst, 0), 5_000),
        Ok(0),
        "nothing past it"
    );
    // Another user may read the 0644 source, not write the 0644 destination.
    let other = Cred::new(4000, 400);
    assert_eq!(
        s.copy(&other, (&src, 0), (&dst, 0), 10),
        Err(Nfsstat3::ACCES)
    );
    // Into a file of its own it may.
    let mine = file(s, d, "mine");
    let ids = Sattr3 {
        uid: Some(4000),
        gid: Some(400),
        ..Sattr3::default()
    };
    s.setattr(&R, &mine, &ids, None).expect("chown");
    assert_eq!(s.copy(&other, (&src, 0), (&mine, 0), 10), Ok(10));
    assert_eq!(read(s, &mine, 0, 10).0, &data[..10]);
}

/// What both refuse: empty or unrepresentable ranges, anything but a regular file, callers
/// without permission.
fn errors(s: &dyn Store, d: &Fh, f: &Fh) {
    assert_eq!(s.fallocate(&R, f, 0, 0, false), Err(Nfsstat3::INVAL));
    assert_eq!(s.fallocate(&R, f, 1 << 63, 1, false), Err(Nfsstat3::INVAL));
    assert_eq!(s.fallocate(&R, f, 0, 1 << 63, true), Err(Nfsstat3::INVAL));
    assert_eq!(s.fallocate(&R, d, 0, 1, false), Err(Nfsstat3::INVAL));
    assert_eq!(s.seek(&R, d, 0, false), Err(Nfsstat3::ISDIR));
    assert_eq!(s.seek(&R, f, u64::MAX, false), Err(Nfsstat3::NXIO));
    // A file of root, mode 0644: another user may seek in it but not allocate.
    let other = Cred::new(4000, 400);
    assert!(s.seek(&other, f, 0, false).is_ok());
    assert_eq!(s.fallocate(&other, f, 0, 1, false), Err(Nfsstat3::ACCES));
    s.setattr(&R, f, &mode(0o600), None).expect("chmod");
    assert_eq!(s.seek(&other, f, 0, false), Err(Nfsstat3::ACCES));
}

#[test]
fn accepts_allocate_deallocate_and_seek_in_the_memory_store() {
    let s = memory();
    space(&s, &mkdir(&s, &s.root(), "space"));
}

#[test]
fn rejects_an_allocation_past_the_memory_stores_capacity_at_once() {
    // 2^62 octets: NOSPC before the range is walked block by block (2^50 blocks of 4 KiB),
    // nothing changed.
    let s = memory();
    let f = file(&s, &s.root(), "huge");
    assert_eq!(s.fallocate(&R, &f, 0, 1 << 62, false), Err(Nfsstat3::NOSPC));
    assert_eq!(attr(&s, &f).size, 0);
}

#[test]
fn accepts_allocate_deallocate_and_seek_in_the_dir_store_as_the_file_system_does() {
    let t = TempDir::new();
    let s = DirStore::open(&t.0).expect("open");
    space(&s, &mkdir(&s, &s.root(), "space"));
}
