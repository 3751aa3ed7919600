//! Memory-store-only tests of identity and resources: MKNOD (device nodes only for root, the
//! device numbers kept, no data I/O), the owner and group a CREATE names, and the charges
//! of names, links and symbolic links against the capacity (FSSTAT telling the truth).
//!
//! Normal operation: each test builds a fresh store and acts as the identities it names.
//! Recovery: none needed; everything is in memory.

use super::{charge, MemoryOptions, MemoryStore};
use crate::nfs::identity::Cred;
use crate::nfs::store::{Special, Store};
use crate::nfs::types::{CreateHow, Fh, Ftype3, Nfsstat3, Sattr3, StableHow};

const R: Cred = Cred::ROOT;
const USER: Cred = Cred::new(1000, 100);

fn store(capacity: u64) -> MemoryStore {
    MemoryStore::new(MemoryOptions {
        capacity,
        block_size: 4096,
        ..MemoryOptions::default()
    })
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// A directory everyone may write in.
fn open_dir(s: &MemoryStore, name: &str) -> Fh {
    let d = s.mkdir(&R, &s.root(), name.as_bytes(), &mode(0o777));
    d.expect("mkdir")
}

#[test]
fn accepts_fifos_and_sockets_from_anyone_and_devices_from_root_only() {
    let s = store(1 << 20);
    let d = open_dir(&s, "d");
    let m = mode(0o660);
    for dev in [Special::Chr(1, 3), Special::Blk(8, 0)] {
        assert_eq!(s.mknod(&USER, &d, b"dev", dev, &m), Err(Nfsstat3::PERM));
    }
    let chr = s.mknod(&R, &d, b"null", Special::Chr(1, 3), &m);
    let a = s.getattr(&chr.expect("mknod")).expect("attr");
    assert_eq!(
        (a.ftype, a.rdev, a.mode, a.size),
        (Ftype3::Chr, (1, 3), 0o660, 0)
    );
    let blk = s.mknod(&R, &d, b"sda", Special::Blk(8, 0), &m);
    let a = s.getattr(&blk.expect("mknod")).expect("attr");
    assert_eq!((a.ftype, a.rdev), (Ftype3::Blk, (8, 0)));
    let fifo = s
        .mknod(&USER, &d, b"fifo", Special::Fifo, &m)
        .expect("fifo");
    let a = s.getattr(&fifo).expect("attr");
    assert_eq!(
        (a.ftype, a.uid, a.gid, a.rdev),
        (Ftype3::Fifo, 1000, 100, (0, 0))
    );
    let sock = s
        .mknod(&USER, &d, b"sock", Special::Sock, &m)
        .expect("sock");
    assert_eq!(s.getattr(&sock).expect("attr").ftype, Ftype3::Sock);
    assert_eq!(s.lookup(&USER, &d, b"fifo"), Ok(fifo));
    // The server never opens them: no data I/O, no size.
    assert_eq!(s.read(&USER, &fifo, 0, &mut [0; 4]), Err(Nfsstat3::INVAL));
    let w = s.write(&USER, &fifo, 0, b"x", StableHow::FileSync);
    assert_eq!(w, Err(Nfsstat3::INVAL));
    assert_eq!(
        s.read_registered(&USER, &sock, 0, 4).map(|r| r.err()),
        Some(Some(Nfsstat3::INVAL))
    );
    assert_eq!(s.commit(&USER, &fifo), Err(Nfsstat3::INVAL));
    let size = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(s.setattr(&USER, &fifo, &size, None), Err(Nfsstat3::INVAL));
    // The usual creation rules: the name taken, the directory not writable.
    let again = s.mknod(&USER, &d, b"fifo", Special::Fifo, &m);
    assert_eq!(again, Err(Nfsstat3::EXIST));
    let root = s.root();
    let ro = s.mknod(&USER, &root, b"f", Special::Fifo, &m);
    assert_eq!(ro, Err(Nfsstat3::ACCES));
    s.remove(&USER, &d, b"fifo").expect("remove");
    s.rename(&R, &d, b"null", &d, b"null2").expect("rename");
    assert_eq!(s.getattr(&fifo), Err(Nfsstat3::STALE));
}

#[test]
fn rejects_owner_and_group_in_create_attributes_a_chown_would_refuse() {
    let s = store(1 << 20);
    let d = open_dir(&s, "d");
    let ids = |uid: Option<u32>, gid: Option<u32>| {
        CreateHow::Guarded(Sattr3 {
            uid,
            gid,
            mode: Some(0o4755),
            ..Sattr3::default()
        })
    };
    let ug = |fh: Fh| {
        let a = s.getattr(&fh).expect("attr");
        (a.uid, a.gid, a.mode)
    };
    let f = s
        .create(&USER, &d, b"a", &ids(Some(0), Some(0)))
        .expect("create");
    assert_eq!(ug(f), (1000, 100, 0o4755), "not root: foreign ids dropped");
    let sup = Cred::with_groups(1000, 100, &[300]);
    let f = s
        .create(&sup, &d, b"b", &ids(None, Some(300)))
        .expect("create");
    assert_eq!(
        ug(f),
        (1000, 300, 0o755),
        "a group of its own, as chgrp: drops set-user-ID"
    );
    let f = s
        .create(&USER, &d, b"c", &ids(Some(1000), Some(100)))
        .expect("create");
    assert_eq!(
        ug(f),
        (1000, 100, 0o4755),
        "its own ids: no change of owner"
    );
    let f = s
        .create(&R, &d, b"d", &ids(Some(7), Some(8)))
        .expect("create");
    assert_eq!(ug(f), (7, 8, 0o755), "root gives a file away");
    let m = s.mkdir(
        &USER,
        &d,
        b"m",
        &Sattr3 {
            uid: Some(0),
            ..mode(0o755)
        },
    );
    assert_eq!(s.getattr(&m.expect("mkdir")).expect("attr").uid, 1000);
}

/// Creates entries with `make(i)` until NOSPC (or `limit` of them); returns how many fit.
fn fill(limit: u64, mut make: impl FnMut(u64) -> Result<(), Nfsstat3>) -> u64 {
    for i in 0..limit {
        match make(i) {
            Ok(()) => {}
            Err(Nfsstat3::NOSPC) => return i,
            Err(e) => panic!("entry {i}: {e:?}"),
        }
    }
    limit
}

/// A name of 255 octets ending in `i`.
fn long_name(i: u64) -> Vec<u8> {
    let mut n = format!("{i:0>255}").into_bytes();
    n.truncate(255);
    n
}

#[test]
fn rejects_links_and_symlinks_past_the_capacity() {
    let cap = 1 << 20;
    // Hard links: no inode each, but a name each.
    let s = store(cap);
    let d = open_dir(&s, "d");
    let f = s.create(&USER, &d, b"f", &CreateHow::Guarded(mode(0o644)));
    let f = f.expect("create");
    let n = fill(100_000, |i| s.link(&USER, &f, &d, &long_name(i)));
    assert!(
        n < cap / 510,
        "{n} links of 255-octet names in {cap} octets"
    );
    let st = s.fsstat(&d).expect("fsstat");
    assert!(st.fbytes < charge::entry(255), "{st:?}");
    // Unlinking gives the charge back.
    for i in 0..n {
        s.remove(&USER, &d, &long_name(i)).expect("remove");
    }
    assert!(s.fsstat(&d).expect("fsstat").fbytes > cap - 4096);
    // Symbolic links of the longest target: the target counts.
    let s = store(cap);
    let d = open_dir(&s, "d");
    let target = vec![b'x'; 4096];
    let attr = Sattr3::default();
    let n = fill(100_000, |i| {
        let name = format!("s{i}");
        s.symlink(&USER, &d, name.as_bytes(), &target, &attr)
            .map(|_| ())
    });
    assert!(
        n < cap / 4096,
        "{n} symbolic links of 4 KiB targets in {cap} octets"
    );
    let st = s.fsstat(&d).expect("fsstat");
    assert!(
        st.ffiles <= 2,
        "FSSTAT's free files fit in the free octets: {st:?}"
    );
}

#[test]
fn rejects_sparse_one_octet_writes_past_the_capacity() {
    let cap = 1 << 20;
    let s = store(cap);
    let d = open_dir(&s, "d");
    let f = s.create(&USER, &d, b"f", &CreateHow::Guarded(mode(0o644)));
    let f = f.expect("create");
    let n = fill(1_000_000, |i| {
        s.write(&USER, &f, i * 4096, b"x", StableHow::Unstable)
            .map(|_| ())
    });
    assert!(
        n < cap / charge::BLOCK,
        "{n} one-octet blocks in {cap} octets"
    );
    let a = s.getattr(&f).expect("attr");
    assert!(a.used >= n * charge::BLOCK, "used shows the charge: {a:?}");
    let st = s.fsstat(&d).expect("fsstat");
    assert!(st.fbytes < charge::block(1, 4096), "{st:?}");
}
