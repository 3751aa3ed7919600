//! The ring of a soft CQ: bounded, many producers (QPs completing work on any thread), one
//! consumer (the CQ's owner handle, `SoftCq::poll` through `&mut`), exactly `capacity` entries.
//!
//! Normal operation: a producer claims a position with a compare-exchange on `tail`, writes the
//! slot and publishes it through the slot's stamp (Vyukov's bounded queue, with positions encoded
//! as lap + index as in crossbeam's `ArrayQueue`, so any capacity is exact). The single consumer
//! reads published slots straight into the caller's array and frees each with a plain store: no
//! read-modify-write and no compare-exchange on the consumer side (where `ArrayQueue` pays one
//! per entry). A poll that finds its next position claimed but not yet written waits for the
//! producer (a few instructions away), as `ArrayQueue::pop` does. Recovery: a push into a full
//! ring fails and hands the value back (the CQ overruns).

use crossbeam_utils::CachePadded;

use super::super::sync::{spin, AtomicUsize, Ordering, UnsafeCell};

struct Slot<T> {
    /// The position this slot is ready for: `pos` when free for the producer of `pos`,
    /// `pos + 1` once that producer has written it.
    stamp: AtomicUsize,
    value: UnsafeCell<T>,
}

/// A bounded MPSC ring of `T` (see the module head).
pub(crate) struct CqRing<T> {
    slots: Box<[Slot<T>]>,
    cap: usize,
    /// Position step of one lap: the smallest power of two above `cap`; a position is
    /// `lap * one_lap + index`.
    one_lap: usize,
    /// Next position to consume. Stored only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// Next position to claim (compare-exchanged by producers).
    tail: CachePadded<AtomicUsize>,
}

// SAFETY: a slot's value is written only by the producer that claimed its position (the tail
// compare-exchange hands each position to one producer) before the Release store of its stamp,
// and read only by the consumer after the Acquire load of that stamp; the consumer's Release
// store of the next stamp orders its read before the next producer's write (Acquire load).
unsafe impl<T: Send> Sync for CqRing<T> {}

impl<T: Copy> CqRing<T> {
    /// A ring of exactly `capacity` (at least 1) entries, every slot set to `fill`.
    pub(crate) fn new(capacity: usize, fill: T) -> CqRing<T> {
        let cap = capacity.max(1);
        CqRing {
            slots: (0..cap)
                .map(|i| Slot {
                    stamp: AtomicUsize::new(i),
                    value: UnsafeCell::new(fill),
                })
                .collect(),
            cap,
            one_lap: (cap + 1).next_power_of_two(),
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// The position after `pos`.
    #[inline]
    fn next(&self, pos: usize) -> usize {
        let index = pos & (self.one_lap - 1);
        if index + 1 < self.cap {
            pos.wrapping_add(1)
        } else {
            (pos & !(self.one_lap - 1)).wrapping_add(self.one_lap)
        }
    }

    /// Pushes `v`; `Err(v)` when the ring holds `capacity` entries. Any thread.
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        // Relaxed: a hint; the compare-exchange below decides.
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[tail & (self.one_lap - 1)];
            // Acquire: pairs with the consumer's Release store of the stamp in `pop_into`, so
            // its read of the slot happens before our write.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                // Relaxed: the compare-exchange only hands out the position; the value is
                // published through the stamp.
                match self.tail.compare_exchange_weak(
                    tail,
                    self.next(tail),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: we own position `tail` (the exchange succeeded) and the slot is
                        // free for it (stamp == tail): nobody else reads or writes it now.
                        slot.value.with_mut(|p| unsafe { *p = v });
                        // Release: pairs with the consumer's Acquire load of the stamp.
                        slot.stamp.store(tail.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(t) => tail = t,
                }
            } else if stamp.wrapping_add(self.one_lap) == tail.wrapping_add(1) {
                // The slot still holds the entry of the previous lap: `capacity` entries are
                // queued (at the moment of the stamp load).
                return Err(v);
            } else {
                // Another producer took this position: retry at the current tail.
                spin();
                // Relaxed: as above.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Consumer: moves published entries, oldest first, into `out`; returns how many.
    ///
    /// # Safety
    /// Only the ring's single consumer calls this (for a CQ, its owner handle through `&mut`).
    pub(crate) unsafe fn pop_into(&self, out: &mut [T]) -> usize {
        // Relaxed: `head` is stored only by this consumer.
        let mut head = self.head.load(Ordering::Relaxed);
        let mut n = 0;
        while n < out.len() {
            let slot = &self.slots[head & (self.one_lap - 1)];
            let ready = loop {
                // Acquire: pairs with the producer's Release store of the stamp after its write.
                if slot.stamp.load(Ordering::Acquire) == head.wrapping_add(1) {
                    break true;
                }
                // Relaxed: only whether a producer has claimed `head`; the value is read through
                // the stamp.
                if self.tail.load(Ordering::Relaxed) == head {
                    break false; // empty
                }
                // Claimed but not yet written: wait for it, as `ArrayQueue::pop` does, so a poll
                // never misses a push that took its position before the poll looked.
                spin();
            };
            if !ready {
                break;
            }
            // SAFETY: the slot is published for `head` and only the consumer reads it until the
            // stamp store below frees it.
            out[n] = slot.value.with(|p| unsafe { *p });
            // Release: pairs with the producer's Acquire load of the stamp: our read happens
            // before its write of the next lap.
            slot.stamp
                .store(head.wrapping_add(self.one_lap), Ordering::Release);
            head = self.next(head);
            n += 1;
        }
        if n > 0 {
            // Release: pairs with the Acquire load in `len` (a diagnostic snapshot).
            self.head.store(head, Ordering::Release);
        }
        n
    }

    /// Entries queued (a snapshot; claimed but unwritten positions count).
    pub(crate) fn len(&self) -> usize {
        loop {
            // SeqCst: a consistent pair (tail re-read below), as `ArrayQueue::len`.
            let tail = self.tail.load(Ordering::SeqCst);
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) == tail {
                let hix = head & (self.one_lap - 1);
                let tix = tail & (self.one_lap - 1);
                return if hix < tix {
                    tix - hix
                } else if hix > tix {
                    self.cap - hix + tix
                } else if tail == head {
                    0
                } else {
                    self.cap
                };
            }
        }
    }

    /// True when nothing is queued (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// Run under Miri too (scripts/miri.sh: the data-race detector and weak-memory emulation check the
// stamp pairs above).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cq_ring_holds_exactly_its_capacity_in_order() {
        for cap in [1usize, 3, 4] {
            let r = CqRing::new(cap, 0u32);
            let mut out = [0u32; 8];
            for lap in 0..5u32 {
                for i in 0..cap as u32 {
                    assert_eq!(r.push(lap * 100 + i), Ok(()));
                }
                assert_eq!(r.push(999), Err(999), "cap {cap}: full at exactly cap");
                assert_eq!(r.len(), cap);
                // SAFETY: the only consumer.
                let n = unsafe { r.pop_into(&mut out[..2]) };
                assert_eq!(n, cap.min(2));
                // SAFETY: the only consumer.
                let m = unsafe { r.pop_into(&mut out[n..]) };
                assert_eq!(n + m, cap);
                let want: Vec<u32> = (0..cap as u32).map(|i| lap * 100 + i).collect();
                assert_eq!(&out[..cap], &want[..]);
                assert!(r.is_empty());
            }
        }
    }

    /// Two producer threads and the consumer: every entry arrives once, each producer's in
    /// order, with the contents written before publishing (Miri reports a data race if a
    /// slot's write and read are not ordered). A refused push is retried.
    #[test]
    fn cq_ring_two_producers_one_consumer() {
        let per: u64 = if cfg!(miri) { 20 } else { 10_000 };
        let r = Arc::new(CqRing::new(3, [0u64; 2]));
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        while r.push([p, i]).is_err() {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 2];
        let mut out = [[0u64; 2]; 4];
        while next != [per, per] {
            // SAFETY: the only consumer.
            let n = unsafe { r.pop_into(&mut out) };
            for e in &out[..n] {
                assert_eq!(e[1], next[e[0] as usize], "producer {} out of order", e[0]);
                next[e[0] as usize] += 1;
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(r.is_empty());
    }
}

/// Model-checked stamp protocol (scripts/loom.sh: `RUSTFLAGS="--cfg loom"`).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::super::super::sync::model;
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two producers, one consumer, capacity 2: both entries arrive once, intact.
    #[test]
    fn loom_cq_ring_two_producers() {
        model(|| {
            let r = Arc::new(CqRing::new(2, [0u64; 2]));
            let ps: Vec<_> = (1..=2u64)
                .map(|p| {
                    let r = r.clone();
                    thread::spawn(move || assert!(r.push([p, p * 10]).is_ok()))
                })
                .collect();
            let mut got = 0u64;
            let mut out = [[0u64; 2]; 2];
            while got != 0b110 {
                // SAFETY: the only consumer.
                let n = unsafe { r.pop_into(&mut out) };
                for e in &out[..n] {
                    assert_eq!(e[1], e[0] * 10);
                    assert_eq!(got & (1 << e[0]), 0, "entry {} twice", e[0]);
                    got |= 1 << e[0];
                }
                if n == 0 {
                    thread::yield_now();
                }
            }
            for p in ps {
                p.join().unwrap();
            }
        });
    }

    /// Capacity 1 across a lap: a producer pushing while the consumer frees the slot gets in
    /// (then or after the retry) and the consumer reads what it wrote, never the old entry.
    #[test]
    fn loom_cq_ring_reuse_across_laps() {
        model(|| {
            let r = Arc::new(CqRing::new(1, [0u64; 2]));
            assert!(r.push([1, 10]).is_ok());
            let p = {
                let r = r.clone();
                thread::spawn(move || {
                    while r.push([2, 20]).is_err() {
                        thread::yield_now();
                    }
                })
            };
            let mut out = [[0u64; 2]; 1];
            let mut seen = 0;
            while seen < 2 {
                // SAFETY: the only consumer.
                if unsafe { r.pop_into(&mut out) } == 1 {
                    seen += 1;
                    assert_eq!(out[0], [seen, seen * 10]);
                } else {
                    thread::yield_now();
                }
            }
            p.join().unwrap();
        });
    }
}
