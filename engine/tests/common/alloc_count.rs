//! A counting global allocator for the no-allocation-per-RPC test. Only allocations made by a
//! thread that switched counting on are counted, so the test harness of other threads (and the
//! test framework) does not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Wraps the system allocator and counts allocations of counting threads.
pub struct CountingAlloc;

/// Allocations (alloc + realloc) seen while counting.
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(|c| c.get()) {
        // Relaxed: a plain event counter read by the same thread after the measured section.
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }
}

/// Runs `f` with counting on and returns how many allocations it made on this thread.
pub fn count<R>(f: impl FnOnce() -> R) -> (u64, R) {
    // Relaxed: only this thread's own increments matter, read after it finished.
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (ALLOCS.load(Ordering::Relaxed) - before, r)
}
