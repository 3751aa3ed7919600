//! The memory store's real heap use stays within its capacity under the cheapest attacks on
//! it: one-octet writes into separate blocks, symbolic links with the longest targets, hard
//! links and empty files with the longest names. Each attack runs until the store answers
//! NOSPC; the bytes the test thread holds allocated are measured with a counting allocator.
//!
//! Normal operation: the allocator counts, per thread, bytes allocated minus bytes freed; the
//! store runs on the test's own thread, so what it holds is what that thread's count grew by.
//! Recovery: an attack that passes twice the capacity without NOSPC stops and fails.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rpcrdma_apps::nfs::identity::Cred;
use rpcrdma_apps::nfs::store::memory::{MemoryOptions, MemoryStore};
use rpcrdma_apps::nfs::store::Store;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Nfsstat3, Sattr3, StableHow};

/// The system allocator, counting live bytes per thread.
struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

fn count(d: i64) {
    // A thread being torn down has no counter any more; nothing to count then.
    let _ = LIVE.try_with(|l| l.set(l.get() + d));
}

// SAFETY: every call forwards to `System` with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as i64));
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as i64 - l.size() as i64);
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn live() -> i64 {
    LIVE.with(|l| l.get())
}

const CAP: u64 = 4 << 20;
const USER: Cred = Cred::new(1000, 100);

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// Runs `attack(i)` for i = 0, 1, ... on a fresh store (a 0777 directory `d` in it) until
/// NOSPC; returns the bytes the store then holds beyond an empty one, and the calls that fit.
fn attack(mut step: impl FnMut(&MemoryStore, &Fh, u64) -> Result<(), Nfsstat3>) -> (i64, u64) {
    let base = live();
    let s = MemoryStore::new(MemoryOptions {
        capacity: CAP,
        block_size: 4096,
        ..MemoryOptions::default()
    });
    let d = s.mkdir(&Cred::ROOT, &s.root(), b"d", &mode(0o777));
    let d = d.expect("mkdir");
    let mut i = 0;
    loop {
        match step(&s, &d, i) {
            Ok(()) => i += 1,
            Err(Nfsstat3::NOSPC) => break,
            Err(e) => panic!("call {i}: {e:?}"),
        }
        assert!(
            live() - base < 2 * CAP as i64,
            "{i} calls hold {} bytes",
            live() - base
        );
    }
    let held = live() - base;
    drop(s);
    (held, i)
}

fn name(i: u64) -> Vec<u8> {
    let mut n = format!("{i:0>255}").into_bytes();
    n.truncate(255);
    n
}

fn check(what: &str, (held, calls): (i64, u64)) {
    println!("{what}: {calls} calls, {held} bytes held for {CAP} of capacity");
    assert!(
        held <= CAP as i64,
        "{what}: {held} bytes for a capacity of {CAP}"
    );
    assert!(
        held > CAP as i64 / 8,
        "{what}: the attack reached the capacity ({held})"
    );
}

#[test]
fn rejects_one_octet_writes_into_separate_blocks_past_the_capacity() {
    check(
        "sparse writes",
        attack(|s, d, i| {
            if i == 0 {
                let how = CreateHow::Guarded(mode(0o644));
                s.create(&USER, d, b"f", &how)?;
            }
            let f = s.lookup(&USER, d, b"f")?;
            s.write(&USER, &f, i * 4096, b"x", StableHow::Unstable)
                .map(|_| ())
        }),
    );
}

#[test]
fn rejects_symbolic_links_past_the_capacity() {
    let target = vec![b'x'; 4096];
    check(
        "symlinks",
        attack(|s, d, i| {
            let n = format!("s{i}");
            s.symlink(&USER, d, n.as_bytes(), &target, &Sattr3::default())
                .map(|_| ())
        }),
    );
}

#[test]
fn rejects_hard_links_and_long_names_past_the_capacity() {
    check(
        "hard links",
        attack(|s, d, i| {
            if i == 0 {
                s.create(&USER, d, b"f", &CreateHow::Guarded(mode(0o644)))?;
            }
            let f = s.lookup(&USER, d, b"f")?;
            s.link(&USER, &f, d, &name(i))
        }),
    );
    check(
        "empty files",
        attack(|s, d, i| {
            let how = CreateHow::Guarded(mode(0o644));
            s.create(&USER, d, &name(i), &how).map(|_| ())
        }),
    );
}
