//! A bounded multi-producer / multi-consumer ring of `u64` tokens with bulk and burst
//! operations, in the style of DPDK's `rte_ring` (MP/MC mode).
//!
//! Normal operation: a producer reserves `k` slots by moving `prod_head` forward with a CAS,
//! writes its tokens, waits until every earlier producer has published (`prod_tail` reaches its
//! reservation) and then publishes by storing `prod_tail`. Consumers do the same on the
//! `cons_head` / `cons_tail` pair. One CAS moves a whole bulk.
//!
//! Recovery: there is nothing to recover; a full ring refuses tokens (the caller keeps them) and an
//! empty ring hands out none. The publish step waits for earlier reservations; a thread that is
//! preempted between reserving and publishing delays the others (as in DPDK), so the wait spins
//! briefly and then yields the CPU.
//!
//! Memory-model checks (docs/memory-model.md): the tests below run under Miri's weak-memory
//! emulation (scripts/miri.sh), and `loom_tests` model-checks the head/tail protocol with every
//! atomic swapped for loom's through the [`sync`] shim (scripts/loom.sh, `--cfg loom`).

use crossbeam_utils::CachePadded;
use sync::{AtomicU64, AtomicUsize, Ordering};

/// The atomics the ring uses: `core`'s in every normal build, loom's model-checked ones under
/// `--cfg loom` (scripts/loom.sh), so the same code is what loom explores.
mod sync {
    #[cfg(not(loom))]
    pub(crate) use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// One round of waiting for another thread. Under loom a wait must yield to the model's
    /// scheduler (a spinning thread would otherwise be explored forever).
    #[inline]
    pub(crate) fn wait(spins: u32) {
        #[cfg(loom)]
        {
            let _ = spins;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        if spins < 128 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Head and tail of one side (producers or consumers).
struct Side {
    /// Next position to reserve.
    head: AtomicUsize,
    /// Everything before this position is published to the other side.
    tail: AtomicUsize,
}

impl Side {
    fn new() -> Self {
        Side {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }
}

/// How many tokens an operation moves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// All of them or none.
    Bulk,
    /// As many as possible.
    Burst,
}

/// The ring. Capacity is exact (`cap` tokens); the slot array is the next power of two.
pub(crate) struct Ring {
    prod: CachePadded<Side>,
    cons: CachePadded<Side>,
    mask: usize,
    cap: usize,
    /// Token storage. Slots are atomics so that the data itself never races; their order is
    /// given by the head/tail protocol, so they are accessed with `Relaxed`.
    slots: Box<[AtomicU64]>,
}

/// Waits until `tail` equals `expected` (earlier reservations published).
#[inline]
fn wait_for_tail(tail: &AtomicUsize, expected: usize) {
    let mut spins = 0u32;
    // Acquire: pairs with the Release store of `tail` by the thread that held the previous
    // reservation, so its slot writes (producer side) or reads (consumer side) happen before our
    // own publish, which the other side then acquires.
    while tail.load(Ordering::Acquire) != expected {
        spins = spins.wrapping_add(1);
        sync::wait(spins);
    }
}

impl Ring {
    /// A ring that holds up to `cap` tokens (`cap` ≥ 1, ≤ 2^31).
    pub(crate) fn new(cap: usize) -> Self {
        let size = cap.max(1).next_power_of_two();
        let slots = (0..size).map(|_| AtomicU64::new(0)).collect();
        Ring {
            prod: CachePadded::new(Side::new()),
            cons: CachePadded::new(Side::new()),
            mask: size - 1,
            cap,
            slots,
        }
    }

    /// Number of tokens in the ring (a snapshot; exact when nobody is moving tokens).
    pub(crate) fn len(&self) -> usize {
        // Acquire on both: pairs with the Release stores of the tails; only used for reporting.
        let prod_tail = self.prod.tail.load(Ordering::Acquire);
        let cons_tail = self.cons.tail.load(Ordering::Acquire);
        prod_tail.wrapping_sub(cons_tail).min(self.cap)
    }

    /// Capacity in tokens.
    #[allow(dead_code)]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Enqueues all of `items` or none; true on success.
    #[inline]
    pub(crate) fn enqueue_bulk(&self, items: &[u64]) -> bool {
        items.is_empty() || self.enqueue(items, Mode::Bulk) == items.len()
    }

    /// Enqueues as many of `items` as fit (from the front); returns how many.
    #[inline]
    #[allow(dead_code)]
    pub(crate) fn enqueue_burst(&self, items: &[u64]) -> usize {
        self.enqueue(items, Mode::Burst)
    }

    /// Dequeues exactly `out.len()` tokens or none; true on success.
    #[inline]
    pub(crate) fn dequeue_bulk(&self, out: &mut [u64]) -> bool {
        out.is_empty() || self.dequeue(out, Mode::Bulk) == out.len()
    }

    /// Dequeues up to `out.len()` tokens into the front of `out`; returns how many.
    #[inline]
    pub(crate) fn dequeue_burst(&self, out: &mut [u64]) -> usize {
        self.dequeue(out, Mode::Burst)
    }

    /// Reserves up to `n` slots on `side` (producers or consumers) and returns the first reserved
    /// position and how many were reserved (0: none). `room(head, opposite_tail)` says how many
    /// slots the other side has made available at `head`. This is DPDK's
    /// `__rte_ring_headtail_move_head` with its C11 orderings.
    ///
    /// Why the head needs acquire/release: the thread that moved the head to `head` computed its
    /// room from an opposite tail `t`. If our load of the opposite tail could return a value older
    /// than `t` (nothing orders two loads of different locations otherwise), we would compute room
    /// from a tail behind the head: a consumer would reserve slots past the published producer tail
    /// (one token handed out twice), a producer would see a spuriously full ring. Miri's
    /// weak-memory emulation shows both; x86 hides them, ARMv8 and POWER do not.
    #[inline]
    fn move_head(
        side: &Side,
        opposite_tail: &AtomicUsize,
        n: usize,
        mode: Mode,
        room: impl Fn(usize, usize) -> usize,
    ) -> (usize, usize) {
        // Acquire: pairs with the Release half of the successful head CAS below (by the thread
        // that moved the head to this value), so the opposite-tail value that thread read
        // happens-before our opposite-tail load, which therefore cannot return an older one.
        let mut head = side.head.load(Ordering::Acquire);
        loop {
            // Acquire: pairs with the Release store of the opposite side's tail in `publish`, so
            // the other side's slot accesses below that tail happen-before our own slot accesses
            // (producers: the consumers' reads before our overwrites; consumers: the producers'
            // writes before our reads).
            let tail = opposite_tail.load(Ordering::Acquire);
            let room = room(head, tail);
            let k = match mode {
                Mode::Bulk if n > room => return (head, 0),
                Mode::Bulk => n,
                Mode::Burst => n.min(room),
            };
            if k == 0 {
                return (head, 0);
            }
            // Success AcqRel: Release publishes the opposite-tail load above to the next thread
            // that acquires this head (its Acquire head load or its failed CAS); Acquire pairs
            // with the Release of the CAS that wrote the value we replace.
            // Failure Acquire: pairs with the Release of the CAS that wrote `now`, for the same
            // reason as the initial head load.
            match side.head.compare_exchange_weak(
                head,
                head.wrapping_add(k),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (head, k),
                Err(now) => head = now,
            }
        }
    }

    /// Publishes the reservation `[head, head + k)` of `side` once every earlier reservation is
    /// published.
    #[inline]
    fn publish(side: &Side, head: usize, k: usize) {
        wait_for_tail(&side.tail, head);
        // Release: pairs with the Acquire load of this tail in the opposite side's `move_head`
        // (and with the next reservation's `wait_for_tail` on this side), publishing our slot
        // accesses: the producers' slot writes, or the consumers' slot reads.
        side.tail.store(head.wrapping_add(k), Ordering::Release);
    }

    fn enqueue(&self, items: &[u64], mode: Mode) -> usize {
        if items.is_empty() {
            return 0;
        }
        let cap = self.cap;
        // Free slots: capacity minus what the consumers have not released yet. With a stale
        // `head` this can exceed `cap`; the CAS in `move_head` then fails and we retry.
        let free = |head: usize, cons_tail: usize| cap.wrapping_sub(head.wrapping_sub(cons_tail));
        let (head, k) = Self::move_head(&self.prod, &self.cons.tail, items.len(), mode, free);
        for (i, &item) in items[..k].iter().enumerate() {
            // Relaxed: ordered after the consumers' reads of this slot by the Acquire load of
            // `cons.tail` in `move_head`, and published by the Release store of `prod.tail` in
            // `publish`.
            self.slots[head.wrapping_add(i) & self.mask].store(item, Ordering::Relaxed);
        }
        if k > 0 {
            Self::publish(&self.prod, head, k);
        }
        k
    }

    fn dequeue(&self, out: &mut [u64], mode: Mode) -> usize {
        if out.is_empty() {
            return 0;
        }
        let cap = self.cap;
        // Published tokens. A stale `head` can make this look huge; clamp to capacity, the CAS
        // in `move_head` then fails and we retry.
        let avail = |head: usize, prod_tail: usize| prod_tail.wrapping_sub(head).min(cap);
        let (head, k) = Self::move_head(&self.cons, &self.prod.tail, out.len(), mode, avail);
        for (i, slot) in out[..k].iter_mut().enumerate() {
            // Relaxed: made visible by the Acquire load of `prod.tail` in `move_head`; our read
            // is published to the producers by the Release store of `cons.tail` in `publish`.
            *slot = self.slots[head.wrapping_add(i) & self.mask].load(Ordering::Relaxed);
        }
        if k > 0 {
            Self::publish(&self.cons, head, k);
        }
        k
    }
}

// The std-thread tests (also run under Miri). Not under loom: loom's atomics work only inside
// `loom::model`.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn accepts_bulk_up_to_capacity_exactly() {
        let r = Ring::new(5);
        assert!(r.enqueue_bulk(&[1, 2, 3]));
        assert!(!r.enqueue_bulk(&[4, 5, 6]), "only 2 free");
        assert_eq!(r.len(), 3);
        assert!(r.enqueue_bulk(&[4, 5]));
        assert_eq!(r.len(), 5);
        assert_eq!(r.enqueue_burst(&[9]), 0);
        let mut out = [0u64; 6];
        assert!(!r.dequeue_bulk(&mut out));
        assert_eq!(r.dequeue_burst(&mut out), 5);
        assert_eq!(&out[..5], &[1, 2, 3, 4, 5]);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn accepts_burst_partial() {
        let r = Ring::new(4);
        assert_eq!(r.enqueue_burst(&[1, 2, 3, 4, 5, 6]), 4);
        let mut out = [0u64; 3];
        assert!(r.dequeue_bulk(&mut out));
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(r.dequeue_burst(&mut out), 1);
        assert_eq!(out[0], 4);
        assert_eq!(r.dequeue_burst(&mut out), 0);
    }

    #[test]
    fn accepts_wraparound_many_times() {
        let r = Ring::new(3);
        let mut next = 0u64;
        let mut expect = 0u64;
        for _ in 0..1000 {
            assert!(r.enqueue_bulk(&[next, next + 1]));
            next += 2;
            let mut out = [0u64; 2];
            assert!(r.dequeue_bulk(&mut out));
            assert_eq!(out, [expect, expect + 1]);
            expect += 2;
        }
    }

    #[test]
    fn accepts_concurrent_tokens_conserved() {
        // Two threads move a fixed population of distinct tokens between the ring and their
        // hands; at the end every token is present exactly once.
        // Shrunk under Miri (weak-memory emulation is slow); run it there with many seeds.
        const N: usize = if cfg!(miri) { 64 } else { 256 };
        let iters: usize = if cfg!(miri) { 400 } else { 20_000 };
        let r = Arc::new(Ring::new(N));
        let all: Vec<u64> = (0..N as u64).collect();
        assert!(r.enqueue_bulk(&all));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    let mut held = [0u64; 32];
                    for i in 0..iters {
                        let want = 1 + (i * 7 + t) % 32;
                        let got = if i % 2 == 0 {
                            if r.dequeue_bulk(&mut held[..want]) {
                                want
                            } else {
                                0
                            }
                        } else {
                            r.dequeue_burst(&mut held[..want])
                        };
                        if i % 3 == 0 {
                            assert_eq!(r.enqueue_burst(&held[..got]), got);
                        } else {
                            assert!(r.enqueue_bulk(&held[..got]));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut out = vec![0u64; N + 1];
        assert_eq!(r.dequeue_burst(&mut out), N);
        out.truncate(N);
        out.sort_unstable();
        assert_eq!(out, all);
    }
}

/// Model-checked head/tail protocol (scripts/loom.sh: `RUSTFLAGS="--cfg loom"`). loom runs each
/// closure under every interleaving up to the preemption bound (`LOOM_MAX_PREEMPTIONS`, default 3
/// here) and lets loads return older stores the memory model allows, so a missing
/// acquire/release shows up as a lost, duplicated or spuriously refused token. The slots are
/// atomics too, so a slot read that is not ordered after the slot's write can read a stale token.
///
/// Every role runs on a spawned thread and the model's main thread only joins, and nothing
/// yields: with loom 0.7.3 a main thread doing work was never preempted before it (so nothing
/// crossed concurrently), and a thread that yields is never again shown a store it saw before
/// the yield (so the stale reads above disappear). Both were seen with counting models.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// `loom::model` with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        if b.preemption_bound.is_none() {
            b.preemption_bound = Some(3);
        }
        b.check(f);
    }

    /// Drains the ring (after every thread joined) and returns the tokens sorted.
    fn drain(r: &Ring) -> Vec<u64> {
        let mut out = [0u64; 4];
        let n = r.dequeue_burst(&mut out);
        assert_eq!(
            r.dequeue_burst(&mut out[n..]),
            0,
            "ring not empty after drain"
        );
        let mut v = out[..n].to_vec();
        v.sort_unstable();
        v
    }

    /// Two threads take tokens out of a full ring (capacity 2, both tokens in it) and put them
    /// back, twice each. The population fits the ring exactly, so a put-back must never be
    /// refused (a refusal is issue 13 §2.1's "spuriously full" ring, whose tokens the pool would
    /// drop) and at the end each token is in the ring exactly once (no double handout).
    #[test]
    fn loom_mpmc_population_conserved() {
        model(|| {
            let r = Arc::new(Ring::new(2));
            assert!(r.enqueue_bulk(&[10, 11]));
            let worker = |want: usize| {
                let r = Arc::clone(&r);
                thread::spawn(move || {
                    for _ in 0..2 {
                        let mut held = [0u64; 2];
                        let got = r.dequeue_burst(&mut held[..want]);
                        assert!(r.enqueue_bulk(&held[..got]), "refused a put-back");
                    }
                })
            };
            let a = worker(1);
            let b = worker(2);
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(drain(&r), [10, 11]);
        });
    }

    /// Two producers and one consumer through a ring of capacity 2, three tokens (so the slots
    /// wrap). Nobody spins: each producer tries each token once (a refused token stays with it),
    /// the consumer makes two attempts, and the rest is drained after the joins. Token 1 can
    /// never be refused (at most one other token is in the ring then); every accepted token
    /// comes out exactly once, and each producer's tokens in the order it enqueued them.
    #[test]
    fn loom_mpmc_two_producers_one_consumer() {
        model(|| {
            let r = Arc::new(Ring::new(2));
            let producer = |tokens: &'static [u64]| {
                let r = Arc::clone(&r);
                thread::spawn(move || {
                    let mut refused = Vec::new();
                    for t in tokens {
                        if !r.enqueue_bulk(core::slice::from_ref(t)) {
                            refused.push(*t);
                        }
                    }
                    refused
                })
            };
            let p1 = producer(&[1, 3]);
            let p2 = producer(&[2]);
            let consumer = {
                let r = Arc::clone(&r);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        let mut out = [0u64; 2];
                        let n = r.dequeue_burst(&mut out);
                        got.extend_from_slice(&out[..n]);
                    }
                    got
                })
            };
            let mut got = consumer.join().unwrap();
            let mut refused = p1.join().unwrap();
            refused.extend(p2.join().unwrap());
            assert!(!refused.contains(&1), "spuriously full: {refused:?}");
            let mut out = [0u64; 4];
            let n = r.dequeue_burst(&mut out);
            got.extend_from_slice(&out[..n]);
            if let (Some(a), Some(b)) = (
                got.iter().position(|&g| g == 1),
                got.iter().position(|&g| g == 3),
            ) {
                assert!(a < b, "producer order lost: {got:?}");
            }
            got.extend_from_slice(&refused);
            got.sort_unstable();
            assert_eq!(got, [1, 2, 3]);
        });
    }

    /// Bulk moves of two against a ring of capacity 2: a producer offers two bulks of two (once
    /// each) while a consumer makes two bulk attempts of two. The first bulk is never refused
    /// (the ring is empty then), nothing moves half a bulk, and order holds.
    #[test]
    fn loom_mpmc_bulk_all_or_nothing() {
        model(|| {
            let r = Arc::new(Ring::new(2));
            let p = {
                let r = Arc::clone(&r);
                thread::spawn(move || {
                    assert!(r.enqueue_bulk(&[1, 2]), "empty ring refused a bulk");
                    r.enqueue_bulk(&[3, 4])
                })
            };
            let c = {
                let r = Arc::clone(&r);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        let mut out = [0u64; 2];
                        if r.dequeue_bulk(&mut out) {
                            got.extend_from_slice(&out);
                        }
                    }
                    got
                })
            };
            let mut got = c.join().unwrap();
            let second = p.join().unwrap();
            let mut out = [0u64; 2];
            if r.dequeue_bulk(&mut out) {
                got.extend_from_slice(&out);
            }
            assert_eq!(r.len(), 0);
            let want: &[u64] = if second { &[1, 2, 3, 4] } else { &[1, 2] };
            assert_eq!(got, want);
        });
    }
}
