//! No heap allocation after creation: a counting global allocator watches get/put (bulk and
//! single, cache and shared path) and owned-handle drop.
//!
//! Counting is per thread (the test harness allocates on its own threads).

mod common;

use rpcrdma_mempool::ObjIdx;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread local
// (its access does not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn accepts_no_allocation_after_creation() {
    // Sanity: the counter sees allocations at all.
    let before = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert!(allocs() > before, "counting allocator not active");

    // Creation (may allocate).
    let pool = common::pool(256, 128, 64, 32);
    let mut cache = pool.cache().unwrap();
    let mut bulk = [ObjIdx::default(); 40];

    let before = allocs();
    for round in 0..100 {
        // Cache path: bulk and single, hits, refills and flushes.
        cache.get_bulk(&mut bulk[..round % 40 + 1]).unwrap();
        let one = cache.get().unwrap();
        cache.put(one);
        cache.put_bulk(&bulk[..round % 40 + 1]);
        let n = cache.get_burst(&mut bulk);
        cache.put_bulk(&bulk[..n]);
        // Shared path.
        pool.get_bulk(&mut bulk[..7]).unwrap();
        pool.put_bulk(&bulk[..7]);
        let one = pool.get().unwrap();
        pool.put(one);
        // Owned handles: dropped (shared ring) and returned through the cache.
        let mut b = cache.get_buf().unwrap();
        b[0] = round as u8;
        drop(b);
        let b = pool.get_buf().unwrap();
        cache.put_buf(b);
        // Exhaustion is allocation-free too.
        let mut all = [ObjIdx::default(); 256];
        let got = cache.get_burst(&mut all);
        assert!(cache.get().is_none());
        cache.put_bulk(&all[..got]);
        // Counters.
        let _ = std::hint::black_box(pool.stats());
        let _ = std::hint::black_box(cache.stats());
        let _ = std::hint::black_box(pool.available());
    }
    cache.flush();
    let after = allocs();
    assert_eq!(
        after - before,
        0,
        "{} allocations on the hot path",
        after - before
    );
    assert_eq!(pool.available(), 256);
}
