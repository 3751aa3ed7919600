//! Object pools: layout, bulk/burst semantics, cache thresholds, counters, handles, threads.

mod common;

use common::{pool, region, LKEY, RKEY};
use rpcrdma_mempool::{Exhausted, ObjIdx, Pool, PoolBuf, PoolConfig, PoolError, RegionError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[test]
fn accepts_objects_in_bounds_aligned_disjoint() {
    for (count, size, align) in [
        (100, 100, 64),
        (17, 4096, 4096),
        (33, 1, 8),
        (5, 3000, 1024),
    ] {
        let p = pool(count, size, align, 0);
        let r = p.region();
        assert_eq!(p.entries().len(), count);
        assert_eq!(p.stride() % align, 0);
        assert!(p.stride() >= size);
        let mut prev_end = 0u64;
        for (i, e) in p.entries().iter().enumerate() {
            assert_eq!(e.index as usize, i);
            assert_eq!(e.pool_id, p.id());
            assert_eq!(e.len as usize, size);
            assert_eq!((e.lkey, e.rkey), (LKEY, RKEY));
            assert_eq!(e.addr % align as u64, 0, "object {i} misaligned");
            assert!(
                r.contains(e.addr as *const u8, size),
                "object {i} out of region"
            );
            assert!(e.addr >= prev_end, "object {i} overlaps its predecessor");
            prev_end = e.addr + size as u64;
            let idx = p.idx(i as u32).unwrap();
            assert_eq!(p.entry(idx), Some(e));
            assert_eq!(p.ptr(idx).unwrap().as_ptr() as u64, e.addr);
        }
        assert!(p.idx(count as u32).is_none());
    }
}

#[test]
fn accepts_two_pools_in_one_region_disjoint() {
    let r = region(64 * 1024);
    let a = Pool::new(&r, &PoolConfig::new(10, 1000)).unwrap();
    let b = Pool::new(&r, &PoolConfig::new(10, 1000)).unwrap();
    assert_ne!(a.id(), b.id());
    let a_end = a.entries().last().unwrap().addr + 1000;
    assert!(b.entries()[0].addr >= a_end);
    // A foreign index is not an entry of the other pool.
    let ia = a.get().unwrap();
    assert!(b.entry(ia).is_none());
    assert!(b.ptr(ia).is_none());
    a.put(ia);
}

#[test]
fn accepts_bulk_all_or_nothing() {
    for cache_size in [0, 16] {
        let p = pool(100, 64, 64, cache_size);
        let mut c = p.cache().unwrap();
        let mut a = [ObjIdx::default(); 60];
        let mut b = [ObjIdx::default(); 60];
        c.get_bulk(&mut a).unwrap();
        assert_eq!(p.available(), 40);
        assert_eq!(c.get_bulk(&mut b), Err(Exhausted));
        assert_eq!(p.available(), 40, "a failed bulk takes nothing");
        assert_eq!(b, [ObjIdx::default(); 60], "a failed bulk writes nothing");
        c.get_bulk(&mut b[..40]).unwrap();
        assert_eq!(p.available(), 0);
        assert!(c.get().is_none());
        let mut all: Vec<u32> = a.iter().chain(&b[..40]).map(|i| i.index()).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..100).collect::<Vec<_>>(),
            "every object exactly once"
        );
        c.put_bulk(&a);
        c.put_bulk(&b[..40]);
        assert_eq!(p.available(), 100);
        let s = p.stats();
        assert_eq!((s.gets, s.puts), (100, 100));
        assert_eq!(s.empty, 2, "failed bulk + failed single get");
    }
}

#[test]
fn accepts_burst_best_effort() {
    let p = pool(10, 64, 64, 4);
    let mut c = p.cache().unwrap();
    let mut out = [ObjIdx::default(); 16];
    assert_eq!(c.get_burst(&mut out), 10);
    assert_eq!(c.get_burst(&mut out[10..]), 0);
    assert_eq!(p.stats().empty, 2);
    c.put_bulk(&out[..3]);
    assert_eq!(c.get_burst(&mut out[10..]), 3);
    c.put_bulk(&out[3..13]);
    assert_eq!(p.available(), 10);
    // Shared-path burst too.
    let mut o2 = [ObjIdx::default(); 20];
    drop(c); // returns cached objects to the ring
    assert_eq!(p.get_burst(&mut o2), 10);
    p.put_bulk(&o2[..10]);
}

#[test]
fn accepts_cache_refill_and_flush_thresholds() {
    let p = pool(256, 64, 64, 32);
    let mut c = p.cache().unwrap();
    assert_eq!(c.size(), 32);
    assert_eq!(c.flush_threshold(), 48);

    // Miss on an empty cache: one bulk refill, the cache is left at its size.
    let one = c.get().unwrap();
    assert_eq!(c.len(), 32);
    let s = c.stats();
    assert_eq!((s.cache_misses, s.cache_hits, s.refills), (1, 0, 1));
    assert_eq!(p.available(), 255);

    // Served from the cache alone.
    let mut ten = [ObjIdx::default(); 10];
    c.get_bulk(&mut ten).unwrap();
    assert_eq!(c.len(), 22);
    assert_eq!(c.stats().cache_hits, 1);

    // Puts grow the cache up to 1.5x size, then flush down to size.
    c.put(one);
    c.put_bulk(&ten);
    assert_eq!(c.len(), 33);
    let mut more = [ObjIdx::default(); 14];
    assert_eq!(p.get_burst(&mut more), 14); // taken on the shared path
    c.put_bulk(&more[..14]); // 33 + 14 = 47 < 48
    assert_eq!(c.len(), 47);
    assert_eq!(c.stats().flushes, 0);
    let x = p.get().unwrap();
    c.put(x); // reaches 48: flush down to 32
    assert_eq!(c.len(), 32);
    assert_eq!(c.stats().flushes, 1);
    assert_eq!(p.available(), 256);

    // A put larger than the cache size bypasses the cache.
    let mut big = [ObjIdx::default(); 40];
    p.get_bulk(&mut big).unwrap();
    c.put_bulk(&big);
    assert_eq!(c.len(), 32);
    assert_eq!(c.stats().flushes, 1);

    // A get larger than the flush threshold bypasses the refill.
    let mut huge = [ObjIdx::default(); 100];
    c.get_bulk(&mut huge).unwrap();
    assert_eq!(
        c.len(),
        0,
        "cache contents used, rest straight from the ring"
    );
    c.put_bulk(&huge[..32]);
    c.put_bulk(&huge[32..]);
    c.flush();
    assert_eq!(c.len(), 0);
    assert_eq!(p.available(), 256);
}

#[test]
fn accepts_counters_readable_while_running() {
    let p = pool(64, 64, 64, 8);
    let mut c1 = p.cache().unwrap();
    let mut c2 = p.cache().unwrap();
    let a = c1.get().unwrap();
    let b = c2.get().unwrap();
    let s = p.stats();
    assert_eq!(s.gets, 2);
    assert_eq!(s.cache_misses, 2);
    assert_eq!(c1.stats().gets, 1);
    c1.put(a);
    c1.put(b); // returned through another cache: fine
    assert_eq!(p.stats().puts, 2);
    assert_eq!(c1.stats().puts, 2);
    assert_eq!(c2.stats().puts, 0);
    // Counters of a dropped cache stay in the pool total.
    drop(c1);
    assert_eq!(p.stats().puts, 2);
    assert_eq!(p.available(), 64);
}

#[test]
fn accepts_owned_handle_bytes_and_return() {
    let p = pool(4, 100, 64, 2);
    let mut c = p.cache().unwrap();
    let mut b = c.get_buf().unwrap();
    assert_eq!(b.len(), 100);
    b.fill(0x5a);
    b[99] = 1;
    assert_eq!(b.as_slice()[0], 0x5a);
    assert_eq!(b.entry().addr, b.as_ptr() as u64);
    assert_eq!(b.entry().lkey, LKEY);
    assert_eq!(p.available(), 3);
    c.put_buf(b);
    assert_eq!(p.available(), 4);
    assert_eq!(c.stats().puts, 1);

    let b = p.get_buf().unwrap();
    let idx = b.into_raw();
    assert_eq!(p.available(), 3, "into_raw does not return the object");
    // SAFETY: we own `idx`.
    let b = unsafe { PoolBuf::from_raw(&p, idx) }.unwrap();
    drop(b);
    assert_eq!(p.available(), 4);
}

#[test]
fn accepts_cross_thread_drop_returns_to_pool() {
    let p = pool(8, 64, 64, 4);
    let mut c = p.cache().unwrap();
    let mut bufs: Vec<PoolBuf> = (0..8).map(|_| c.get_buf().unwrap()).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        b[0] = i as u8;
    }
    assert!(c.get().is_none());
    assert_eq!(p.available(), 0);
    let t = std::thread::spawn(move || {
        for (i, b) in bufs.into_iter().enumerate() {
            assert_eq!(b[0], i as u8);
            drop(b);
        }
    });
    t.join().unwrap();
    assert_eq!(p.available(), 8);
    // The cache gets them back from the ring.
    let mut all = [ObjIdx::default(); 8];
    c.get_bulk(&mut all).unwrap();
    c.put_bulk(&all);
    let s = p.stats();
    assert_eq!((s.gets, s.puts), (16, 16));
}

#[test]
fn accepts_handle_keeps_pool_and_region_alive() {
    let p = pool(2, 64, 64, 0);
    let mut b = p.get_buf().unwrap();
    drop(p);
    b.fill(7); // region still mapped
    assert_eq!(b[63], 7);
    let p2 = b.pool().clone();
    drop(b);
    assert_eq!(p2.available(), 2);
}

#[test]
fn accepts_exhaustion_and_recovery() {
    let p = pool(50, 64, 64, 16);
    let mut c = p.cache().unwrap();
    let mut held = Vec::new();
    while let Some(i) = c.get() {
        held.push(i);
    }
    assert_eq!(held.len(), 50);
    assert!(p.get().is_none());
    assert!(p.get_buf().is_none());
    let mut two = [ObjIdx::default(); 2];
    assert_eq!(p.get_bulk(&mut two), Err(Exhausted));
    assert!(p.stats().empty >= 3);
    p.put(held.pop().unwrap());
    assert!(c.get().is_some());
    c.put_bulk(&held);
}

#[test]
fn rejects_unregistered_region() {
    let opts = rpcrdma_mempool::RegionOptions::with_policy(rpcrdma_mempool::HugePagePolicy::Never);
    let opts = rpcrdma_mempool::RegionOptions {
        lock: false,
        ..opts
    };
    let r = Arc::new(rpcrdma_mempool::Region::new(4096, &opts).unwrap());
    assert_eq!(
        Pool::new(&r, &PoolConfig::new(4, 64)).unwrap_err(),
        PoolError::NotRegistered
    );
}

#[test]
fn rejects_bad_configs() {
    let r = region(1 << 20);
    let base = PoolConfig::new(16, 64);
    let bad = [
        PoolConfig { align: 3, ..base },
        PoolConfig { align: 0, ..base },
        PoolConfig {
            obj_size: 0,
            ..base
        },
        PoolConfig { count: 0, ..base },
        PoolConfig {
            cache_size: 17,
            ..base
        },
        PoolConfig {
            max_caches: 100_000,
            ..base
        },
        PoolConfig {
            count: usize::MAX / 2,
            ..base
        },
    ];
    for cfg in bad {
        assert!(
            matches!(Pool::new(&r, &cfg), Err(PoolError::InvalidConfig(_))),
            "{cfg:?}"
        );
    }
    assert_eq!(r.remaining(), r.len(), "rejected configs carve nothing");
}

#[test]
fn rejects_pool_larger_than_region() {
    let r = region(8192);
    let e = Pool::new(&r, &PoolConfig::new(3, 4096)).unwrap_err();
    assert!(
        matches!(e, PoolError::Region(RegionError::Full { .. })),
        "{e:?}"
    );
}

#[test]
fn rejects_cache_beyond_max_caches() {
    let cfg = PoolConfig {
        max_caches: 2,
        ..PoolConfig::new(16, 64)
    };
    let r = region(cfg.region_len().unwrap());
    let p = Pool::new(&r, &cfg).unwrap();
    let c1 = p.cache().unwrap();
    let _c2 = p.cache().unwrap();
    assert_eq!(p.cache().unwrap_err(), PoolError::TooManyCaches { max: 2 });
    drop(c1);
    let _c3 = p.cache().expect("slot released by drop");
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "does not belong to pool")]
fn rejects_foreign_index_put() {
    let a = pool(4, 64, 64, 2);
    let b = pool(4, 64, 64, 2);
    let i = a.get().unwrap();
    let mut c = b.cache().unwrap();
    c.put(i);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "does not belong to pool")]
fn rejects_out_of_range_index_put() {
    let a = pool(4, 64, 64, 2);
    let i = a.get().unwrap();
    a.put(ObjIdx::from_raw(i.to_raw() + 100));
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "double free")]
fn rejects_double_free_raw() {
    let p = pool(4, 64, 64, 2);
    let mut c = p.cache().unwrap();
    let i = c.get().unwrap();
    c.put(i);
    c.put(i);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "double free")]
fn rejects_double_free_shared_path() {
    let p = pool(4, 64, 64, 0);
    let i = p.get().unwrap();
    p.put(i);
    p.put(i);
}

#[cfg(not(debug_assertions))]
#[test]
fn rejects_foreign_index_put_counted() {
    let a = pool(4, 64, 64, 2);
    let b = pool(4, 64, 64, 2);
    let i = a.get().unwrap();
    let mut c = b.cache().unwrap();
    c.put(i);
    assert_eq!(b.stats().rejected_puts, 1);
    assert_eq!(b.available(), 4);
    a.put(i);
}

/// Two threads, each with its own cache, hammer one pool. Every object carries an owner tag
/// (side array, compare-and-swap on get and put) and the owner's id written into its bytes: an
/// object handed out twice would fail the CAS or show a foreign id.
#[test]
fn accepts_two_thread_stress_no_double_handout() {
    // Shrunk under Miri (weak-memory emulation is slow); run it there with many seeds.
    const N: usize = if cfg!(miri) { 128 } else { 384 };
    let iters = if cfg!(miri) { 300 } else { 20_000 };
    let p = pool(N, 64, 64, 32);
    let owner: Arc<Vec<AtomicU32>> = Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
    let threads: Vec<_> = (1..=2u32)
        .map(|tid| {
            let p = p.clone();
            let owner = Arc::clone(&owner);
            std::thread::spawn(move || {
                let mut c = p.cache().unwrap();
                let mut held: Vec<ObjIdx> = Vec::with_capacity(N);
                let mut buf = [ObjIdx::default(); 64];
                let mut seed = 0x9e37_79b9u32.wrapping_mul(tid);
                let mut rnd = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed
                };
                let claim = |i: ObjIdx| {
                    let k = i.index() as usize;
                    owner[k]
                        .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
                        .unwrap_or_else(|o| panic!("object {k} already owned by {o}"));
                    // SAFETY: we own `i` (the CAS above proves nobody else does).
                    let b = unsafe { p.bytes_mut(i) }.unwrap();
                    b[..4].copy_from_slice(&tid.to_le_bytes());
                };
                let release = |i: ObjIdx| {
                    let k = i.index() as usize;
                    // SAFETY: we own `i`.
                    let b = unsafe { p.bytes(i) }.unwrap();
                    assert_eq!(b[..4], tid.to_le_bytes(), "object {k} overwritten");
                    owner[k]
                        .compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire)
                        .expect("owner tag changed while held");
                };
                for _ in 0..iters {
                    let r = rnd();
                    let n = 1 + (r as usize >> 8) % 64;
                    match r % 4 {
                        0 if held.len() + n <= N => {
                            if c.get_bulk(&mut buf[..n]).is_ok() {
                                for &i in &buf[..n] {
                                    claim(i);
                                    held.push(i);
                                }
                            }
                        }
                        1 => {
                            let n = n.min(N - held.len());
                            let got = c.get_burst(&mut buf[..n]);
                            for &i in &buf[..got] {
                                claim(i);
                                held.push(i);
                            }
                        }
                        _ => {
                            let n = n.min(held.len());
                            let at = held.len() - n;
                            for &i in &held[at..] {
                                release(i);
                            }
                            if r % 8 == 2 {
                                p.put_bulk(&held[at..]); // shared path now and then
                            } else {
                                c.put_bulk(&held[at..]);
                            }
                            held.truncate(at);
                        }
                    }
                }
                for &i in &held {
                    release(i);
                }
                c.put_bulk(&held);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(p.available(), N);
    let s = p.stats();
    assert_eq!(s.gets, s.puts);
    assert!(
        s.gets > 0 && s.cache_hits > 0 && s.refills > 0 && s.flushes > 0,
        "{s:?}"
    );
    // Everything is back: one bulk of all N objects, each exactly once.
    let mut all = vec![ObjIdx::default(); N];
    p.get_bulk(&mut all).unwrap();
    let mut ix: Vec<u32> = all.iter().map(|i| i.index()).collect();
    ix.sort_unstable();
    assert_eq!(ix, (0..N as u32).collect::<Vec<_>>());
    p.put_bulk(&all);
}

#[test]
fn accepts_side_table_entry_two_per_cache_line() {
    assert_eq!(std::mem::size_of::<rpcrdma_mempool::ObjEntry>(), 32);
    assert_eq!(std::mem::size_of::<ObjIdx>(), 8);
}
