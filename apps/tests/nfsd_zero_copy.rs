//! Zero-copy READ through `rpcrdma-nfsd`'s memory backend on the software provider: file data
//! kept in the endpoint's registered buffers goes to the client's Write chunk from where it is
//! stored (`read.zero_copy`), stays correct while the file is overwritten (copy on write: a
//! READ answered before an overwrite has the old data, one after the new, and concurrent
//! READs never see a block half old, half new), and holes read as zeros.
//!
//! Normal operation: each test starts its own rig (memory backend, `max_io` 256 KiB, 32
//! payload buffers) and checks data and counter deltas. Recovery: nothing to recover.

mod nfsd_common;

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

use nfsd_common::{Rig, Rng};
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Sattr3, StableHow};

const PIECE: usize = 256 * 1024;

fn create(r: &Rig, name: &str) -> Fh {
    r.nfs
        .create(
            &r.root,
            name.as_bytes(),
            CreateHow::Guarded(Sattr3::default()),
        )
        .expect("create")
}

fn write_ddp(r: &Rig, f: &Fh, off: u64, data: &[u8]) {
    let (n, _, _) = r
        .nfs
        .write(f, off, data, StableHow::Unstable, true)
        .expect("write");
    assert_eq!(n as usize, data.len());
}

#[test]
fn a_written_file_is_read_back_from_registered_blocks() {
    let r = Rig::memory();
    let f = create(&r, "big");
    let data = Rng(0x5eed).bytes(4 * PIECE);
    for (i, piece) in data.chunks(PIECE).enumerate() {
        write_ddp(&r, &f, (i * PIECE) as u64, piece);
    }
    let (zc, ddp) = (r.counter("read.zero_copy"), r.counter("read.ddp"));
    let mut back = Vec::new();
    for i in 0..4 {
        let (d, eof) = r
            .nfs
            .read(&f, (i * PIECE) as u64, PIECE as u32, true)
            .expect("read");
        assert_eq!(eof, i == 3, "piece {i}");
        back.extend_from_slice(&d);
    }
    assert!(back == data, "data read back differs");
    assert_eq!(r.counter("read.zero_copy") - zc, 4);
    assert_eq!(
        r.counter("read.ddp") - ddp,
        4,
        "read.ddp counts every DDP READ"
    );
    // Unaligned ranges inside one block are zero copy too; one across two blocks is copied.
    let (d, _) = r.nfs.read(&f, 1000, 5000, true).expect("read");
    assert!(d == data[1000..6000]);
    let (d, _) = r.nfs.read(&f, PIECE as u64 - 8, 16, true).expect("read");
    assert!(d == data[PIECE - 8..PIECE + 8]);
    assert_eq!(r.counter("read.zero_copy") - zc, 5);
    assert_eq!(r.counter("read.ddp") - ddp, 6);
    // Inline READs are not zero copy.
    let (d, _) = r.nfs.read(&f, 0, 1000, false).expect("read");
    assert!(d == data[..1000]);
    assert_eq!(r.counter("read.zero_copy") - zc, 5);
    r.stop();
}

#[test]
fn overwrites_never_change_data_a_read_already_answered() {
    let r = Rig::memory();
    let f = create(&r, "cow");
    let old = vec![0x11u8; PIECE];
    write_ddp(&r, &f, 0, &old);
    let (before, _) = r.nfs.read(&f, 0, PIECE as u32, true).expect("read");
    // Overwrite the middle, by DDP and inline.
    write_ddp(&r, &f, 4096, &[0x22u8; 8192]);
    r.nfs
        .write(&f, 100_000, b"inline", StableHow::FileSync, false)
        .expect("write");
    let (after, _) = r.nfs.read(&f, 0, PIECE as u32, true).expect("read");
    assert!(before == old, "a READ before the overwrite changed");
    let mut want = old.clone();
    want[4096..4096 + 8192].fill(0x22);
    want[100_000..100_006].copy_from_slice(b"inline");
    assert!(after == want, "a READ after the overwrite has old data");
    // Truncate and extend: the cut octets read as zeros, not as the old data.
    let cut = Sattr3 {
        size: Some(70_000),
        ..Sattr3::default()
    };
    r.nfs.setattr(&f, &cut, None).expect("truncate");
    r.nfs
        .write(&f, 200_000, b"end", StableHow::FileSync, false)
        .expect("write");
    let (d, eof) = r.nfs.read(&f, 0, PIECE as u32, true).expect("read");
    assert!(eof);
    assert_eq!(d.len(), 200_003);
    assert!(d[..70_000] == want[..70_000]);
    assert!(
        d[70_000..200_000].iter().all(|&x| x == 0),
        "cut data came back"
    );
    assert_eq!(&d[200_000..], b"end");
    r.stop();
}

#[test]
fn concurrent_reads_see_whole_blocks_while_they_are_overwritten() {
    let r = Rig::memory();
    let f = create(&r, "race");
    write_ddp(&r, &f, 0, &[0u8; PIECE]);
    let (_ep, other) = r.second_client(Ipv4Addr::new(10, 0, 0, 3));
    let zc = r.counter("read.zero_copy");
    let stop = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let (d, _) = other.read(&f, 0, PIECE as u32, true).expect("read");
                assert_eq!(d.len(), PIECE);
                assert!(
                    d.iter().all(|&x| x == d[0]),
                    "a READ saw a block half overwritten (first {}, others differ)",
                    d[0]
                );
                n += 1;
            }
            n
        });
        for i in 1..=200u32 {
            write_ddp(&r, &f, 0, &[i as u8; PIECE]);
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().expect("reader")
    });
    assert!(reads > 0);
    assert!(r.counter("read.zero_copy") - zc >= u64::from(reads));
    let (d, _) = r.nfs.read(&f, 0, PIECE as u32, true).expect("read");
    assert!(d.iter().all(|&x| x == 200));
    r.stop();
}

#[test]
fn holes_of_a_sparse_file_read_as_zeros() {
    let r = Rig::memory();
    let f = create(&r, "sparse");
    let data = Rng(7).bytes(PIECE);
    write_ddp(&r, &f, 3 * PIECE as u64, &data);
    let zc = r.counter("read.zero_copy");
    for i in 0..3 {
        let (d, eof) = r
            .nfs
            .read(&f, (i * PIECE) as u64, PIECE as u32, true)
            .expect("read");
        assert!(!eof);
        assert_eq!(d.len(), PIECE);
        assert!(d.iter().all(|&x| x == 0), "hole {i}");
    }
    assert_eq!(
        r.counter("read.zero_copy"),
        zc,
        "holes are not registered blocks"
    );
    let (d, eof) = r
        .nfs
        .read(&f, 3 * PIECE as u64, PIECE as u32, true)
        .expect("read");
    assert!(eof && d == data);
    assert_eq!(r.counter("read.zero_copy") - zc, 1);
    // Dirty every free pool buffer: READs across two blocks are copied into one (the ring
    // hands them out in turn).
    for _ in 0..40 {
        let (d, _) = r
            .nfs
            .read(&f, 3 * PIECE as u64 - 8, 200_008, true)
            .expect("read");
        assert!(d[8..] == data[..200_000]);
    }
    // A write far into a fresh block: the octets before it in the block read as zeros even
    // though the block is a reused (dirty) pool buffer.
    write_ddp(&r, &f, 5 * PIECE as u64 + 1000, &data[..100_000]);
    let (d, _) = r
        .nfs
        .read(&f, 5 * PIECE as u64, PIECE as u32, true)
        .expect("read");
    assert_eq!(d.len(), 101_000);
    assert!(d[..1000].iter().all(|&x| x == 0));
    assert!(d[1000..] == data[..100_000]);
    r.stop();
}
