//! A bounded, lock-free multi-producer / single-consumer ring of `T` for control messages
//! ("open connection", "add poller", "stop"), with sequence-numbered slots (D. Vyukov's bounded
//! queue, reduced to one consumer).
//!
//! Normal operation: every slot carries a sequence number. Slot `i` starts at `i`; a producer that
//! finds the slot of position `pos` at sequence `pos` claims the position with a CAS on the shared
//! `tail`, writes its item and sets the sequence to `pos + 1` ("full"). The single consumer finds
//! the slot of its position `head` at `head + 1`, moves the item out and sets the sequence to
//! `head + capacity` ("free for the next lap"). Producers on different cores contend only on the
//! `tail` CAS; a producer preempted between its CAS and its publish delays the consumer at that
//! slot only (later slots are not handed out of order). The consumer takes items one at a time, in
//! bulk (all or nothing) or in bursts. Nothing allocates after [`channel`]. This type is kept
//! separate from the SPSC [`ring`](crate::ring) on purpose: the data path pays no CAS.
//!
//! Recovery: there is nothing to recover. A full ring hands the item back to the producer; an
//! empty one hands out nothing; nobody blocks. Items left when every handle is gone are dropped
//! with the ring; a consumer sink that panics has already taken (and released) the item it was
//! given.
//!
//! Memory-model checks (docs/memory-model.md): the tests run under Miri's weak-memory emulation
//! (scripts/miri.sh) and poller/tests/loom_rings.rs model-checks the sequence protocol with loom
//! through the ring's `sync` shim (scripts/loom.sh, `--cfg loom`).

use crate::ring::sync::{self, Arc, AtomicUsize, Ordering, Tracks};
use crate::ring::{check_capacity, RingError};
use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use crossbeam_utils::CachePadded;

/// One slot: a sequence number and the item storage.
struct Slot<T> {
    /// `pos` when free for the producer of position `pos`; `pos + 1` when holding its item.
    seq: AtomicUsize,
    val: UnsafeCell<MaybeUninit<T>>,
}

/// State shared by all handles.
struct Shared<T> {
    /// Next position producers claim (CAS).
    tail: CachePadded<AtomicUsize>,
    /// The consumer's position, stored by the consumer only (for counts and the final drop).
    head: CachePadded<AtomicUsize>,
    /// `capacity - 1`.
    mask: usize,
    slots: Box<[Slot<T>]>,
    /// Access checks of the slots' items (empty except under loom).
    tracks: Tracks,
}

// SAFETY: a slot's item is written only by the producer whose CAS claimed its position and read
// only by the single consumer after the Release/Acquire pair on the slot's sequence number; items
// cross threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    #[inline]
    fn slot(&self, pos: usize) -> &Slot<T> {
        // SAFETY: `pos & mask` < slots.len().
        unsafe { self.slots.get_unchecked(pos & self.mask) }
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Items claimed by producers and not yet consumed (approximate while others run).
    fn used(&self) -> usize {
        // Relaxed (both): a count only; no slot is accessed on the strength of these loads (they
        // pair with nothing).
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        (tail.wrapping_sub(head) as isize).clamp(0, self.capacity() as isize) as usize
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        // Exclusive access: every handle is gone (Arc's last decrement synchronises with theirs).
        let mut pos = sync::get_mut(&mut self.head);
        let end = sync::get_mut(&mut self.tail);
        while pos != end {
            let mask = self.mask;
            let slot = &mut self.slots[pos & mask];
            if sync::get_mut(&mut slot.seq) == pos.wrapping_add(1) {
                self.tracks.write(pos & mask);
                // SAFETY: the sequence says the slot holds the item of position `pos`.
                unsafe { slot.val.get_mut().assume_init_drop() };
            }
            pos = pos.wrapping_add(1);
        }
    }
}

/// Creates an MPSC ring of `capacity` slots (a power of two, at most
/// [`MAX_CAPACITY`](crate::ring::MAX_CAPACITY)). This is the only allocation.
pub fn channel<T>(capacity: usize) -> Result<(MpscProducer<T>, MpscConsumer<T>), RingError> {
    check_capacity(capacity)?;
    let slots = (0..capacity)
        .map(|i| Slot {
            seq: AtomicUsize::new(i),
            val: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect();
    let shared = Arc::new(Shared {
        tail: CachePadded::new(AtomicUsize::new(0)),
        head: CachePadded::new(AtomicUsize::new(0)),
        mask: capacity - 1,
        slots,
        tracks: Tracks::new(capacity),
    });
    Ok((
        MpscProducer {
            shared: Arc::clone(&shared),
        },
        MpscConsumer { shared, head: 0 },
    ))
}

/// A producing handle. `Clone` + `Send` + `Sync` (when `T: Send`): hand one to every core.
pub struct MpscProducer<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for MpscProducer<T> {
    fn clone(&self) -> Self {
        MpscProducer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> MpscProducer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Items in the ring right now (approximate; counts claimed slots still being written).
    pub fn used_count(&self) -> usize {
        self.shared.used()
    }

    /// Enqueues one item, or hands it back if the ring is full. Lock-free: a failed CAS means
    /// another producer made progress.
    #[inline]
    pub fn enqueue(&self, item: T) -> Result<(), T> {
        self.enqueue_with(move || item).map_err(|make| make())
    }

    /// [`MpscProducer::enqueue`] of the item `make` builds, called only once a slot is claimed,
    /// so that the item is built straight in its slot (not built, then moved in); `make` is
    /// handed back, not called, when the ring is full. `make` must not panic: the slot it was
    /// to fill is claimed, and the consumer would wait at it for good.
    #[inline]
    pub fn enqueue_with<F: FnOnce() -> T>(&self, make: F) -> Result<(), F> {
        let s = &*self.shared;
        // Relaxed: only a first guess at the position; the CAS below validates it and the slot's
        // sequence (not `tail`) orders the item.
        let mut pos = s.tail.load(Ordering::Relaxed);
        loop {
            let slot = s.slot(pos);
            // Acquire: pairs with the consumer's Release store of `seq` (pos + capacity from the
            // previous lap) in `MpscConsumer::take`, so its read of the old item happens before
            // our write of the new one.
            let seq = slot.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as isize;
            if dif == 0 {
                // Relaxed (success and failure): the CAS only arbitrates between producers for
                // position `pos`; the item is published by the Release store of `seq` below.
                match s.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        s.tracks.write(pos & s.mask);
                        // SAFETY: our CAS claimed position `pos`; its slot is free (seq == pos)
                        // and no other producer can claim it in this lap.
                        unsafe { (*slot.val.get()).write(make()) };
                        // Release: pairs with the consumer's Acquire load of `seq` in
                        // `MpscConsumer::ready`, making the item write visible first.
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(cur) => pos = cur,
                }
            } else if dif < 0 {
                // The slot still holds the item of the previous lap: the ring is full.
                return Err(make);
            } else {
                // Another producer took this position; start again from the current tail.
                // Relaxed: a new guess, validated as above.
                pos = s.tail.load(Ordering::Relaxed);
            }
        }
    }
}

impl<T> fmt::Debug for MpscProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpscProducer")
            .field("capacity", &self.capacity())
            .field("used", &self.used_count())
            .finish()
    }
}

/// The single consuming handle. `Send` (when `T: Send`), not `Clone`.
pub struct MpscConsumer<T> {
    shared: Arc<Shared<T>>,
    /// Our position (mirrored in `shared.head`).
    head: usize,
}

impl<T> MpscConsumer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Items in the ring right now (approximate; counts claimed slots still being written).
    pub fn used_count(&self) -> usize {
        self.shared.used()
    }

    /// Whether every producer handle has been dropped (items already enqueued stay readable).
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }

    /// Whether the item at position `head + ahead` is published.
    #[inline]
    fn ready(&self, ahead: usize) -> bool {
        let pos = self.head.wrapping_add(ahead);
        // Acquire: pairs with the producer's Release store of `seq` in `MpscProducer::enqueue`,
        // so its item write is visible before we read the slot.
        self.shared.slot(pos).seq.load(Ordering::Acquire) == pos.wrapping_add(1)
    }

    /// Moves the item at `head` out (it must be ready) and frees its slot.
    #[inline]
    fn take(&mut self) -> T {
        let pos = self.head;
        let cap = self.shared.capacity();
        let slot = self.shared.slot(pos);
        self.shared.tracks.read(pos & self.shared.mask);
        // SAFETY: `ready(0)` was checked: the slot holds the item of position `pos`, and only
        // the consumer reads slots.
        let v = unsafe { (*slot.val.get()).assume_init_read() };
        // Release: pairs with the producers' Acquire load of `seq` in `MpscProducer::enqueue`,
        // so our read of the item happens before the next lap's write.
        slot.seq.store(pos.wrapping_add(cap), Ordering::Release);
        self.head = pos.wrapping_add(1);
        // Relaxed: read only for counts (pairs with nothing) and by the final drop, which
        // synchronises through the Arc.
        self.shared.head.store(self.head, Ordering::Relaxed);
        v
    }

    /// Dequeues one item and hands it to `f` before its slot is freed, so that `f` can move
    /// it straight to where it goes: the item is copied out of the slot once, not into a
    /// local, then out of an `Option`, then on. `None` (and `f` not called) when nothing is
    /// published at the head. Should `f` panic, the slot stays taken (producers stop at it
    /// on the next lap); the item, moved into `f`, is never read again.
    #[inline(always)]
    pub fn dequeue_with<R>(&mut self, f: impl FnOnce(T) -> R) -> Option<R> {
        if !self.ready(0) {
            return None;
        }
        let pos = self.head;
        let cap = self.shared.capacity();
        let slot = self.shared.slot(pos);
        self.shared.tracks.read(pos & self.shared.mask);
        // Moved past first, so that no later call reads this slot again whatever `f` does.
        self.head = pos.wrapping_add(1);
        // Relaxed: as in `take`.
        self.shared.head.store(self.head, Ordering::Relaxed);
        // SAFETY: `ready(0)` was checked: the slot holds the item of position `pos`, only the
        // consumer reads slots, and `head` has moved past it (it is read exactly once).
        let r = f(unsafe { (*slot.val.get()).assume_init_read() });
        // Release: pairs with the producers' Acquire load of `seq` in `MpscProducer::enqueue`,
        // so our read of the item (inside `f`) happens before the next lap's write.
        slot.seq.store(pos.wrapping_add(cap), Ordering::Release);
        Some(r)
    }

    /// Dequeues one item, if one is published at the head.
    #[inline]
    pub fn dequeue(&mut self) -> Option<T> {
        if self.ready(0) {
            Some(self.take())
        } else {
            None
        }
    }

    /// Passes exactly `n` items to `sink`, in ring order, or none ([`RingError::Empty`]) when
    /// fewer than `n` consecutive items are published at the head.
    pub fn dequeue_bulk_with<F: FnMut(T)>(
        &mut self,
        n: usize,
        mut sink: F,
    ) -> Result<(), RingError> {
        if n > self.capacity() || !(0..n).all(|i| self.ready(i)) {
            return Err(RingError::Empty);
        }
        for _ in 0..n {
            let v = self.take();
            sink(v);
        }
        Ok(())
    }

    /// Passes up to `max` published items to `sink`, in ring order; returns how many.
    pub fn dequeue_burst_with<F: FnMut(T)>(&mut self, max: usize, mut sink: F) -> usize {
        let mut n = 0;
        while n < max && self.ready(0) {
            let v = self.take();
            n += 1;
            sink(v);
        }
        n
    }

    /// Fills all of `out` or nothing (`None`). Items are moved into `out`; see
    /// [`Consumer::dequeue_bulk`](crate::ring::Consumer::dequeue_bulk) on items that need `Drop`.
    pub fn dequeue_bulk<'a>(&mut self, out: &'a mut [MaybeUninit<T>]) -> Option<&'a mut [T]> {
        let n = out.len();
        if n > self.capacity() || !(0..n).all(|i| self.ready(i)) {
            return None;
        }
        for o in out.iter_mut() {
            o.write(self.take());
        }
        // SAFETY: every element of `out` was written above.
        Some(unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) })
    }

    /// Moves up to `out.len()` items into the front of `out`; returns that initialised prefix.
    pub fn dequeue_burst<'a>(&mut self, out: &'a mut [MaybeUninit<T>]) -> &'a mut [T] {
        let mut n = 0;
        while n < out.len() && self.ready(0) {
            out[n].write(self.take());
            n += 1;
        }
        // SAFETY: the first `n` elements of `out` were written above.
        unsafe { &mut *(&mut out[..n] as *mut [MaybeUninit<T>] as *mut [T]) }
    }
}

impl<T> fmt::Debug for MpscConsumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpscConsumer")
            .field("capacity", &self.capacity())
            .field("used", &self.used_count())
            .finish()
    }
}

// Not under loom: loom's atomics work only inside `loom::model` (poller/tests/loom_rings.rs).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_capacity() {
        assert_eq!(channel::<u8>(6).unwrap_err(), RingError::BadCapacity);
        assert_eq!(channel::<u8>(0).unwrap_err(), RingError::BadCapacity);
    }

    #[test]
    fn accepts_full_empty_and_wraparound() {
        let (p, mut c) = channel::<u32>(4).unwrap();
        for lap in 0..5u32 {
            for i in 0..4 {
                p.enqueue(lap * 10 + i).unwrap();
            }
            assert_eq!(p.enqueue(99), Err(99));
            assert_eq!(p.used_count(), 4);
            let mut out = [MaybeUninit::uninit(); 3];
            assert!(c.dequeue_bulk(&mut [MaybeUninit::uninit(); 5]).is_none());
            assert_eq!(
                c.dequeue_bulk(&mut out).unwrap(),
                &[lap * 10, lap * 10 + 1, lap * 10 + 2]
            );
            assert_eq!(c.dequeue(), Some(lap * 10 + 3));
            assert_eq!(c.dequeue(), None);
        }
    }

    #[test]
    fn accepts_leftovers_dropped_with_the_ring() {
        let item = Arc::new(());
        let (p, mut c) = channel::<Arc<()>>(8).unwrap();
        for _ in 0..5 {
            p.enqueue(Arc::clone(&item)).unwrap();
        }
        drop(c.dequeue());
        assert_eq!(Arc::strong_count(&item), 5);
        drop(p);
        assert!(c.is_abandoned());
        drop(c);
        assert_eq!(Arc::strong_count(&item), 1);
    }

    /// `dequeue_with` takes items in order across the wrap, frees each slot for the next lap,
    /// calls nothing on an empty ring, and every item is dropped exactly once.
    #[test]
    fn accepts_dequeue_with_in_order_across_the_wrap() {
        let item = Arc::new(());
        let (p, mut c) = channel::<(u32, Arc<()>)>(4).unwrap();
        assert_eq!(c.dequeue_with(|_| unreachable!("empty ring")), None::<()>);
        let mut next = 0u32;
        for round in 0..3u32 {
            for k in 0..4 {
                p.enqueue((round * 4 + k, Arc::clone(&item))).unwrap();
            }
            assert!(p.enqueue((99, Arc::clone(&item))).is_err());
            for _ in 0..4 {
                assert_eq!(c.dequeue_with(|(v, _)| v), Some(next));
                next += 1;
            }
            assert_eq!(c.dequeue_with(|(v, _)| v), None);
        }
        assert_eq!(Arc::strong_count(&item), 1);
    }

    /// `enqueue_with` builds the item only once a slot is claimed; on a full ring it hands the
    /// builder back uncalled, and calling it gives the item back whole.
    #[test]
    fn accepts_enqueue_with_building_only_into_a_claimed_slot() {
        let item = Arc::new(());
        let (p, mut c) = channel::<Arc<()>>(2).unwrap();
        for _ in 0..2 {
            assert!(p.enqueue_with(|| Arc::clone(&item)).is_ok());
        }
        assert_eq!(Arc::strong_count(&item), 3);
        let held = Arc::clone(&item);
        let Err(make) = p.enqueue_with(move || held) else {
            panic!("a full ring took an item");
        };
        assert_eq!(
            Arc::strong_count(&item),
            4,
            "the builder holds its capture, uncalled"
        );
        assert!(Arc::ptr_eq(&make(), &item));
        assert_eq!(Arc::strong_count(&item), 3);
        while c.dequeue().is_some() {}
        assert_eq!(Arc::strong_count(&item), 1);
    }

    #[test]
    fn accepts_three_producers() {
        let per: u32 = if cfg!(miri) { 50 } else { 5_000 };
        let (p, mut c) = channel::<(u32, u32)>(8).unwrap();
        let threads: Vec<_> = (0..3)
            .map(|id| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        let mut v = (id, i);
                        while let Err(back) = p.enqueue(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        drop(p);
        let mut next = [0u32; 3];
        let mut total = 0;
        while total < 3 * per as usize {
            let got = c.dequeue_burst_with(4, |(id, i)| {
                assert_eq!(next[id as usize], i);
                next[id as usize] += 1;
            });
            total += got;
            if got == 0 {
                std::thread::yield_now();
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(next, [per; 3]);
        assert!(c.dequeue().is_none());
    }
}
