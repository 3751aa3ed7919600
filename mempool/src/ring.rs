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

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

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
        if spins < 128 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
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

    fn enqueue(&self, items: &[u64], mode: Mode) -> usize {
        let n = items.len();
        if n == 0 {
            return 0;
        }
        // Relaxed: the head is only a reservation counter; the CAS below decides.
        let mut head = self.prod.head.load(Ordering::Relaxed);
        let k = loop {
            // Acquire: pairs with the Release store of `cons.tail` in `dequeue`, so consumers'
            // reads of the slots we are about to overwrite happened before our writes.
            let cons_tail = self.cons.tail.load(Ordering::Acquire);
            // If `head` is stale, `free` may be garbage; the CAS then fails and we retry.
            let free = self.cap.wrapping_sub(head.wrapping_sub(cons_tail));
            let k = match mode {
                Mode::Bulk if n > free => return 0,
                Mode::Bulk => n,
                Mode::Burst => n.min(free),
            };
            if k == 0 {
                return 0;
            }
            // Relaxed success/failure: the CAS only arbitrates slot reservations between
            // producers; data visibility is carried by `prod.tail` (Release below) and
            // `cons.tail` (Acquire above).
            match self.prod.head.compare_exchange_weak(
                head,
                head.wrapping_add(k),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break k,
                Err(now) => head = now,
            }
        };
        for (i, &item) in items[..k].iter().enumerate() {
            // Relaxed: published by the Release store of `prod.tail` below.
            self.slots[head.wrapping_add(i) & self.mask].store(item, Ordering::Relaxed);
        }
        wait_for_tail(&self.prod.tail, head);
        // Release: pairs with the Acquire load of `prod.tail` in `dequeue` (and in the next
        // producer's `wait_for_tail`), publishing the slot writes above.
        self.prod
            .tail
            .store(head.wrapping_add(k), Ordering::Release);
        k
    }

    fn dequeue(&self, out: &mut [u64], mode: Mode) -> usize {
        let n = out.len();
        if n == 0 {
            return 0;
        }
        // Relaxed: reservation counter only; the CAS below decides.
        let mut head = self.cons.head.load(Ordering::Relaxed);
        let k = loop {
            // Acquire: pairs with the Release store of `prod.tail` in `enqueue`, so the slot
            // writes of every published producer are visible to our reads.
            let prod_tail = self.prod.tail.load(Ordering::Acquire);
            let avail = prod_tail.wrapping_sub(head);
            // A stale `head` can make `avail` look huge; clamp to capacity, the CAS then fails.
            let avail = avail.min(self.cap);
            let k = match mode {
                Mode::Bulk if n > avail => return 0,
                Mode::Bulk => n,
                Mode::Burst => n.min(avail),
            };
            if k == 0 {
                return 0;
            }
            // Relaxed: arbitrates reservations between consumers only (see `enqueue`).
            match self.cons.head.compare_exchange_weak(
                head,
                head.wrapping_add(k),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break k,
                Err(now) => head = now,
            }
        };
        for (i, slot) in out[..k].iter_mut().enumerate() {
            // Relaxed: made visible by the Acquire load of `prod.tail` above.
            *slot = self.slots[head.wrapping_add(i) & self.mask].load(Ordering::Relaxed);
        }
        wait_for_tail(&self.cons.tail, head);
        // Release: pairs with the Acquire load of `cons.tail` in `enqueue`: our slot reads
        // happen before any producer reuses these slots.
        self.cons
            .tail
            .store(head.wrapping_add(k), Ordering::Release);
        k
    }
}

#[cfg(test)]
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
        const N: usize = 256;
        let r = Arc::new(Ring::new(N));
        let all: Vec<u64> = (0..N as u64).collect();
        assert!(r.enqueue_bulk(&all));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    let mut held = [0u64; 32];
                    for i in 0..20_000usize {
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
