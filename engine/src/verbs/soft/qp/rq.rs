//! The receive queue of a soft QP: a fixed single-producer / single-consumer ring whose entries
//! are written in place by the poster and read in place by the NIC side that delivers a SEND,
//! so a receive WR is never moved through a queue (an entry is hundreds of octets).
//!
//! Normal operation: the owner handle (`SoftQp`, reached only through `&mut`, so one producer at
//! a time) builds entries in the free slots after the published tail (`stage`) while it queues
//! receives, and publishes them all at its doorbell (`publish`). The consumer — whoever holds the
//! QP's receive token (`rq_token`: one delivery or one flush at a time) — reads the oldest entry
//! in place and releases its slot (`take`). Recovery: nothing to recover; a flush is a consumer
//! that takes every entry, and staged entries that were never published are simply overwritten.
//!
//! Positions are free-running counters (`head` consumed, `tail` published); a slot is
//! `position & mask`, with the slot count the capacity rounded up to a power of two. The
//! producer never has more than `capacity` entries published or staged (it checks `len`), so it
//! never writes a slot the consumer may still read.

use crossbeam_utils::CachePadded;

use super::super::sync::{AtomicUsize, Ordering, UnsafeCell};

/// A fixed SPSC ring of `T`, written and read in place (see the module head for who may call
/// the producer and the consumer halves).
pub(crate) struct RecvRing<T> {
    slots: Box<[UnsafeCell<T>]>,
    mask: usize,
    /// Entries consumed so far (free-running). Stored only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// Entries published so far (free-running). Stored only by the producer.
    tail: CachePadded<AtomicUsize>,
}

// SAFETY: a slot is accessed by the producer only while it is unpublished (position >= tail)
// and free (position - head < slot count), and by the consumer only while published and not
// yet released (head <= position < tail); the Release/Acquire pairs on `tail` and `head` order
// the two. `T: Send` because entries move between the producer's and the consumer's threads.
unsafe impl<T: Send> Sync for RecvRing<T> {}

impl<T: Copy> RecvRing<T> {
    /// A ring for at least `capacity` entries, every slot set to `fill`.
    pub(crate) fn new(capacity: usize, fill: T) -> RecvRing<T> {
        let n = capacity.max(1).next_power_of_two();
        RecvRing {
            slots: (0..n).map(|_| UnsafeCell::new(fill)).collect(),
            mask: n - 1,
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Slots in the ring (at least the capacity asked for).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Published entries not yet taken. Exact for the producer and the consumer; a snapshot
    /// for anyone else.
    pub(crate) fn len(&self) -> usize {
        // Acquire (head): pairs with the consumer's Release store in `take`, so a producer that
        // sees a slot released also sees the consumer's reads of it done. SeqCst (tail): pairs
        // with the SeqCst store in `publish` (see there).
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::SeqCst).wrapping_sub(head)
    }

    /// Producer: published entries not yet taken, at least as many as there are, from
    /// `head_seen` (the producer's last look at `head`, which only grows); `head` itself is read
    /// again only when that count reaches `limit`. While the ring has room, posting leaves the
    /// consumer's `head` line where it is, instead of pulling it across on every receive.
    ///
    /// # Safety
    /// Only the ring's single producer calls this, always with its own `head_seen` (starting
    /// at 0).
    pub(crate) unsafe fn producer_used(&self, head_seen: &mut usize, limit: usize) -> usize {
        // Relaxed: `tail` is stored only by this producer.
        let tail = self.tail.load(Ordering::Relaxed);
        let used = tail.wrapping_sub(*head_seen);
        if used < limit {
            return used;
        }
        // Acquire: as in `len`: the consumer's reads of every slot before this head are done.
        *head_seen = self.head.load(Ordering::Acquire);
        tail.wrapping_sub(*head_seen)
    }

    /// True when no published entry is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Producer: runs `f` on the `k`-th unpublished slot (after the published tail).
    ///
    /// # Safety
    /// Only the ring's single producer calls this (no other `stage`/`publish` concurrently),
    /// and `len() + k` (or `producer_used(..) + k`) is below `slots()` (the slot is neither
    /// published nor being read).
    pub(crate) unsafe fn stage<R>(&self, k: usize, f: impl FnOnce(&mut T) -> R) -> R {
        // Relaxed: `tail` is stored only by this producer.
        let pos = self.tail.load(Ordering::Relaxed).wrapping_add(k);
        let slot = &self.slots[pos & self.mask];
        // SAFETY: per the contract the slot is free (the consumer released it: the Acquire load
        // of `head` behind the caller's `len`/`producer_used` check orders its reads before
        // this write) and not yet published, so nobody else accesses it.
        slot.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// Producer: publishes the `n` staged entries after the tail to the consumer.
    ///
    /// # Safety
    /// Only the ring's single producer calls this, after staging those `n` entries.
    pub(crate) unsafe fn publish(&self, n: usize) {
        // Relaxed: `tail` is stored only by this producer.
        let tail = self.tail.load(Ordering::Relaxed);
        // SeqCst (a Release at least): pairs with the consumer's Acquire load in `take`, which
        // then sees the staged writes. SeqCst because the QP's flush-on-error is a Dekker pair:
        // the poster publishes then loads the QP state, `go_error` changes the state then loads
        // `tail` (`len`); one of them sees the other, so no published entry is left unflushed.
        self.tail.store(tail.wrapping_add(n), Ordering::SeqCst);
    }

    /// Consumer: runs `f` on the oldest published entry, in place, then releases its slot.
    /// `None` when the ring is empty.
    ///
    /// # Safety
    /// Only the ring's single consumer calls this: the caller holds the token that serializes
    /// consumers (for a QP's receive queue, `rq_token`, whose SeqCst swap/store hand the `head`
    /// value from one holder to the next).
    pub(crate) unsafe fn take<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        // Relaxed: `head` is stored only by consumers, serialized by the caller's token.
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the SeqCst (Release) store in `publish`: the entry's writes are
        // visible.
        if self.tail.load(Ordering::Acquire) == head {
            return None;
        }
        let slot = &self.slots[head & self.mask];
        // SAFETY: the slot is published (head < tail) and not yet released; the producer does
        // not write it until `head` passes it.
        let r = slot.with(|p| f(unsafe { &*p }));
        // Release: pairs with the producer's Acquire load of `head` in `len`: our reads of the
        // slot happen before its next write.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        Some(r)
    }
}

// Run under Miri too (scripts/miri.sh: the data-race detector and weak-memory emulation check the
// Release/Acquire pairs above).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn ring_keeps_fifo_order_through_wraparound() {
        let r = RecvRing::new(3, 0u64);
        assert_eq!(r.slots(), 4);
        let mut next = 0u64;
        let mut want = 0u64;
        for round in 0..10 {
            let n = 1 + round % 4;
            for k in 0..n {
                // SAFETY: single-threaded test: the only producer; len + k < 4.
                unsafe { r.stage(k, |s| *s = next + k as u64) };
            }
            assert_eq!(r.len(), 0, "staged entries are not visible before publish");
            // SAFETY: the only producer.
            unsafe { r.publish(n) };
            next += n as u64;
            assert_eq!(r.len(), n);
            // SAFETY: the only consumer.
            while let Some(v) = unsafe { r.take(|s| *s) } {
                assert_eq!(v, want);
                want += 1;
            }
            assert!(r.is_empty());
        }
        assert_eq!(want, next);
    }

    /// One producer thread and one consumer thread (the consumer side serialized trivially):
    /// every entry arrives once, in order, with the contents the producer wrote before
    /// publishing (Miri reports a data race if a slot's write and read are not ordered).
    #[test]
    fn ring_hands_entries_across_threads_in_order() {
        let total: u64 = if cfg!(miri) { 40 } else { 20_000 };
        let r = Arc::new(RecvRing::new(4, [0u64; 4]));
        let prod = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = 0u64;
                let mut seen = 0;
                while v < total {
                    // SAFETY: the only producer, with its own `seen`.
                    let free = r.slots() - unsafe { r.producer_used(&mut seen, r.slots()) };
                    let n = (free as u64).min(total - v).min(3) as usize;
                    for k in 0..n {
                        let x = v + k as u64;
                        // SAFETY: the only producer; len + k < slots (n <= free).
                        unsafe { r.stage(k, |s| *s = [x, x + 1, x + 2, x + 3]) };
                    }
                    // SAFETY: the only producer, after staging n entries.
                    unsafe { r.publish(n) };
                    v += n as u64;
                    std::thread::yield_now();
                }
            })
        };
        let mut want = 0u64;
        while want < total {
            // SAFETY: the only consumer.
            match unsafe { r.take(|s| *s) } {
                Some(e) => {
                    assert_eq!(e, [want, want + 1, want + 2, want + 3]);
                    want += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        prod.join().unwrap();
        assert!(r.is_empty());
    }
}

/// Model-checked head/tail protocol (scripts/loom.sh: `RUSTFLAGS="--cfg loom"`): loom runs each
/// closure under every interleaving up to the preemption bound and lets loads return any older
/// store the memory model allows; its `UnsafeCell` reports a slot written and read without a
/// happens-before edge (a missing Release/Acquire on `tail` or `head`).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::super::super::sync::model;
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Capacity 2, three entries (one wraparound): the consumer gets each once, in order, with
    /// both words the producer wrote before publishing; the producer never overwrites a slot
    /// the consumer is reading.
    #[test]
    fn loom_recv_ring_spsc_in_order() {
        model(|| {
            let r = Arc::new(RecvRing::new(2, [0u64; 2]));
            let p = {
                let r = r.clone();
                thread::spawn(move || {
                    let mut seen = 0;
                    for v in 1..=3u64 {
                        // SAFETY: the only producer, with its own `seen`.
                        while unsafe { r.producer_used(&mut seen, r.slots()) } >= r.slots() {
                            thread::yield_now();
                        }
                        // SAFETY: the only producer; len < 2 = slots.
                        unsafe { r.stage(0, |s| *s = [v, v * 10]) };
                        // SAFETY: the only producer, one entry staged.
                        unsafe { r.publish(1) };
                    }
                })
            };
            let mut want = 1u64;
            while want <= 3 {
                // SAFETY: the only consumer.
                match unsafe { r.take(|s| *s) } {
                    Some(e) => {
                        assert_eq!(e, [want, want * 10]);
                        want += 1;
                    }
                    None => thread::yield_now(),
                }
            }
            p.join().unwrap();
            assert!(r.is_empty());
        });
    }
}
