//! A global allocator for the allocation tests: the system allocator, counting allocations
//! and octets per thread and allocations in all threads.
//!
//! Normal operation: a test binary that declares `mod counting;` allocates through
//! [`Counting`]; [`allocs`] reads the calling thread's counts, [`all_allocs`] every thread's.
//! Recovery: a thread being torn down has no counter any more; what it allocates then counts
//! in [`all_allocs`] only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations and octets allocated per thread.
pub struct Counting;

thread_local! {
    static ALLOCS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Allocations in all threads.
static ALL: AtomicU64 = AtomicU64::new(0);

fn count(octets: usize) {
    // Relaxed: read after the measured calls, which the RPC replies order.
    ALL.fetch_add(1, Ordering::Relaxed);
    let _ = ALLOCS.try_with(|a| {
        let (n, b) = a.get();
        a.set((n + 1, b + octets as u64));
    });
}

// SAFETY: every call forwards to `System` with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new.saturating_sub(l.size()));
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations and octets allocated by this thread so far.
pub fn allocs() -> (u64, u64) {
    ALLOCS.with(|a| a.get())
}

/// Allocations in all threads so far.
pub fn all_allocs() -> u64 {
    ALL.load(Ordering::SeqCst)
}
