//! The directory backend's descriptor cache through the whole path: a walk over a tree that
//! fits the cache (`DaemonOptions::dir_cache`) reopens nothing the second time, and the
//! counters (`dir.fd_cache.*`) say so; a cache smaller than the tree misses and evicts.
//!
//! Normal operation: files are created over NFS, then every one is looked up and its
//! attributes read twice. Recovery: none needed; the counters are the point.

mod nfsd_common;

use nfsd_common::{options, scratch_dir, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3};

const FILES: usize = 600;

/// Creates [`FILES`] files, then walks them twice (LOOKUP + GETATTR): the misses and
/// evictions of the second walk.
fn walk_twice(cache: usize) -> (u64, u64, Rig) {
    let dir = scratch_dir("dircache");
    let o = DaemonOptions {
        dir_cache: cache,
        ..options(Backend::Dir(dir.clone()))
    };
    let r = Rig::with(o, Some(dir));
    let d = r.nfs.mkdir(&r.root, b"tree", Sattr3::default()).unwrap();
    for i in 0..FILES {
        let how = CreateHow::Guarded(Sattr3::default());
        r.nfs.create(&d, format!("f{i}").as_bytes(), how).unwrap();
    }
    let walk = |r: &Rig| {
        for i in 0..FILES {
            let f = r.nfs.lookup(&d, format!("f{i}").as_bytes()).unwrap();
            r.nfs.getattr(&f).unwrap();
        }
    };
    walk(&r);
    let (m0, e0) = (
        r.counter("dir.fd_cache.misses"),
        r.counter("dir.fd_cache.evictions"),
    );
    walk(&r);
    let misses = r.counter("dir.fd_cache.misses") - m0;
    let evictions = r.counter("dir.fd_cache.evictions") - e0;
    (misses, evictions, r)
}

#[test]
fn accepts_a_tree_walk_within_the_cache_reopening_nothing() {
    let (misses, evictions, r) = walk_twice(2 * FILES);
    assert_eq!((misses, evictions), (0, 0));
    assert!(r.counter("dir.fd_cache.hits") >= 2 * FILES as u64);
    assert_eq!(r.counter("dir.fd_cache.capacity"), 2 * FILES as u64);
    r.stop();
}

#[test]
fn accepts_a_small_cache_missing_and_evicting_within_its_bound() {
    let (misses, evictions, r) = walk_twice(64);
    assert!(misses >= FILES as u64, "{misses}");
    assert!(evictions > 0);
    assert!(r.counter("dir.fd_cache.held") <= 64);
    r.stop();
}
