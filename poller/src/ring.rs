//! A bounded single-producer / single-consumer ring of `T`, in the style of DPDK's `rte_ring`
//! (SP/SC mode), split into a [`Producer`] and a [`Consumer`] half.
//!
//! Normal operation: the ring is an array of `capacity` slots (a power of two) and two free-running
//! positions, each on its own cache line: `prod` (slots before it are written and published, only
//! the producer stores it) and `cons` (slots before it are read and released, only the consumer
//! stores it). Each half keeps a private copy of its own position and a cached copy of the other
//! side's; it reads the other side's cache line only when the cached copy says the ring is full
//! (producer) or empty (consumer), so in steady state the two cores exchange a cache line once per
//! batch rather than once per item. `enqueue_bulk` / `dequeue_bulk` move all or nothing,
//! `enqueue_burst` / `dequeue_burst` move as many as fit. Nothing allocates after [`channel`].
//!
//! Recovery: there is nothing to recover. A full ring hands the item back to the producer, an empty
//! ring hands out nothing; neither side ever blocks or spins. Items still in the ring when both
//! halves are gone are dropped with the ring. If a caller's iterator or sink panics in the middle of
//! a batch, the items already moved are published (or released) before the panic continues, so
//! nothing is dropped twice or leaked.
//!
//! Memory-model checks (docs/memory-model.md): the tests run under Miri's weak-memory emulation
//! (scripts/miri.sh), and poller/tests/loom_rings.rs model-checks this ring and the MPSC channel
//! with loom through the `sync` shim (scripts/loom.sh, `--cfg loom`).

use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::ptr;
use crossbeam_utils::CachePadded;
use sync::{Arc, AtomicUsize, Ordering, Tracks};

/// What the rings ([`ring`](crate::ring), [`mpsc`](crate::mpsc)) synchronise with: `core`'s
/// atomics in every normal build, loom's model-checked ones under `--cfg loom` (scripts/loom.sh),
/// so the code loom explores is the code that ships.
pub(crate) mod sync {
    #[cfg(not(loom))]
    pub(crate) use core::sync::atomic::{AtomicUsize, Ordering};
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
    #[cfg(loom)]
    pub(crate) use loom::sync::Arc;
    /// The handles' shared state: under loom its count is modelled too, so the final `Drop`
    /// (which reads the slots and positions without atomics) is checked to come after every
    /// handle's last access.
    #[cfg(not(loom))]
    pub(crate) use std::sync::Arc;

    /// The value of an atomic the caller holds exclusively (`Drop`).
    #[inline]
    pub(crate) fn get_mut(a: &mut AtomicUsize) -> usize {
        #[cfg(not(loom))]
        return *a.get_mut();
        #[cfg(loom)]
        return a.with_mut(|v| *v);
    }

    /// Access checks for slot storage the rings reach through raw pointers. Zero-sized and free in
    /// normal builds; under loom every slot has a `loom::cell::UnsafeCell<()>` that each slot
    /// write and read touches, so loom reports a write and a read (or a read and the next lap's
    /// write) that the head/tail protocol leaves unordered.
    pub(crate) struct Tracks {
        #[cfg(loom)]
        cells: Box<[loom::cell::UnsafeCell<()>]>,
    }

    impl Tracks {
        /// Checks for `n` slots.
        pub(crate) fn new(n: usize) -> Self {
            #[cfg(loom)]
            return Tracks {
                cells: (0..n).map(|_| loom::cell::UnsafeCell::new(())).collect(),
            };
            #[cfg(not(loom))]
            {
                let _ = n;
                Tracks {}
            }
        }

        /// Records a write of slot `i` (an index into the slot array).
        #[inline(always)]
        pub(crate) fn write(&self, i: usize) {
            #[cfg(loom)]
            self.cells[i].with_mut(|_| ());
            #[cfg(not(loom))]
            let _ = i;
        }

        /// Records a read of slot `i`.
        #[inline(always)]
        pub(crate) fn read(&self, i: usize) {
            #[cfg(loom)]
            self.cells[i].with(|_| ());
            #[cfg(not(loom))]
            let _ = i;
        }

        /// Records writes of the `n` slots from position `pos` (ring array of `mask + 1`).
        #[inline(always)]
        pub(crate) fn write_range(&self, pos: usize, n: usize, mask: usize) {
            #[cfg(loom)]
            for k in 0..n {
                self.write(pos.wrapping_add(k) & mask);
            }
            #[cfg(not(loom))]
            let _ = (pos, n, mask);
        }

        /// Records reads of the `n` slots from position `pos`.
        #[inline(always)]
        pub(crate) fn read_range(&self, pos: usize, n: usize, mask: usize) {
            #[cfg(loom)]
            for k in 0..n {
                self.read(pos.wrapping_add(k) & mask);
            }
            #[cfg(not(loom))]
            let _ = (pos, n, mask);
        }
    }
}

/// The largest capacity a ring (SPSC or MPSC) may be created with.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Errors of the rings ([`ring`](crate::ring) and [`mpsc`](crate::mpsc)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The capacity is zero, not a power of two, or above [`MAX_CAPACITY`].
    BadCapacity,
    /// Not enough free slots for an all-or-nothing enqueue.
    Full,
    /// Not enough items for an all-or-nothing dequeue.
    Empty,
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RingError::BadCapacity => "ring capacity must be a power of two in 1..=2^30",
            RingError::Full => "not enough free slots in the ring",
            RingError::Empty => "not enough items in the ring",
        })
    }
}

impl std::error::Error for RingError {}

/// Checks a ring capacity (power of two, `1..=MAX_CAPACITY`).
pub(crate) fn check_capacity(capacity: usize) -> Result<(), RingError> {
    if capacity == 0 || !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
        Err(RingError::BadCapacity)
    } else {
        Ok(())
    }
}

/// State shared by the two halves.
struct Shared<T> {
    /// Producer position: every slot before it is written and published. Stored only by the
    /// producer.
    prod: CachePadded<AtomicUsize>,
    /// Consumer position: every slot before it is read and released. Stored only by the consumer.
    cons: CachePadded<AtomicUsize>,
    /// `capacity - 1`.
    mask: usize,
    /// The slots. The slot of position `pos` holds an item exactly when `cons <= pos < prod`; the
    /// producer writes only outside that window, the consumer reads only inside it.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// Access checks of the slots (empty except under loom).
    tracks: Tracks,
}

// SAFETY: the position protocol hands every slot to exactly one side at a time (the producer
// writes only free slots, the consumer reads only published ones), and the Release/Acquire pairs
// on `prod` / `cons` order those accesses. Items cross threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Pointer to the first slot (all slots are contiguous: `UnsafeCell` and `MaybeUninit` are
    /// `repr(transparent)`).
    #[inline]
    fn base(&self) -> *mut T {
        UnsafeCell::raw_get(self.slots.as_ptr()).cast::<T>()
    }

    /// Pointer to the slot of position `pos`.
    #[inline]
    fn slot(&self, pos: usize) -> *mut T {
        // SAFETY: `pos & mask` < slots.len().
        unsafe { self.base().add(pos & self.mask) }
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.mask + 1
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        // Exclusive access: both halves are gone (Arc's last decrement synchronises with theirs).
        let mut pos = sync::get_mut(&mut self.cons);
        let end = sync::get_mut(&mut self.prod);
        while pos != end {
            self.tracks.write(pos & self.mask);
            // SAFETY: slots in cons..prod hold published, not yet consumed items.
            unsafe { ptr::drop_in_place(self.slot(pos)) };
            pos = pos.wrapping_add(1);
        }
    }
}

/// Creates an SPSC ring of `capacity` slots (a power of two, at most [`MAX_CAPACITY`]).
///
/// This is the only allocation: no operation on the halves allocates.
pub fn channel<T>(capacity: usize) -> Result<(Producer<T>, Consumer<T>), RingError> {
    check_capacity(capacity)?;
    let slots = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        prod: CachePadded::new(AtomicUsize::new(0)),
        cons: CachePadded::new(AtomicUsize::new(0)),
        mask: capacity - 1,
        slots,
        tracks: Tracks::new(capacity),
    });
    Ok((
        Producer {
            shared: Arc::clone(&shared),
            tail: 0,
            cons_cache: 0,
        },
        Consumer {
            shared,
            head: 0,
            prod_cache: 0,
        },
    ))
}

/// The producing half of an SPSC ring. `Send` (when `T: Send`), not `Clone`.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Our position; equal to `shared.prod`, which only we store.
    tail: usize,
    /// The consumer position as last loaded (never ahead of the real one).
    cons_cache: usize,
}

impl<T> Producer<T> {
    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Free slots right now (the consumer may free more at any time).
    #[inline]
    pub fn free_count(&self) -> usize {
        // Relaxed: a count only; no slot is accessed on the strength of this load (pairs with
        // nothing; the consumer's Release store of `cons` may be seen late, which only undercounts).
        let cons = self.shared.cons.load(Ordering::Relaxed);
        self.capacity() - self.tail.wrapping_sub(cons)
    }

    /// Items in the ring right now (the consumer may take some at any time).
    #[inline]
    pub fn used_count(&self) -> usize {
        self.capacity() - self.free_count()
    }

    /// Whether the consumer half has been dropped.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }

    /// Free slots, refreshing the cached consumer position only if the cache shows fewer than
    /// `want`.
    #[inline]
    fn free_space(&mut self, want: usize) -> usize {
        let cap = self.capacity();
        let mut free = cap - self.tail.wrapping_sub(self.cons_cache);
        if free < want {
            // Acquire: pairs with the Release store of `cons` in `Consumer::release`, so the
            // consumer's reads of the slots we are about to overwrite happen before our writes.
            self.cons_cache = self.shared.cons.load(Ordering::Acquire);
            free = cap - self.tail.wrapping_sub(self.cons_cache);
        }
        free
    }

    /// Publishes `n` written slots.
    #[inline]
    fn publish(&mut self, n: usize) {
        self.tail = self.tail.wrapping_add(n);
        // Release: pairs with the Acquire load of `prod` in `Consumer::available`, so our slot
        // writes are visible before the consumer sees the new position.
        self.shared.prod.store(self.tail, Ordering::Release);
    }

    /// Enqueues one item, or hands it back if the ring is full.
    #[inline]
    pub fn enqueue(&mut self, item: T) -> Result<(), T> {
        if self.free_space(1) == 0 {
            return Err(item);
        }
        self.shared.tracks.write(self.tail & self.shared.mask);
        // SAFETY: the slot at `tail` is free (checked above) and only we write free slots.
        unsafe { self.shared.slot(self.tail).write(item) };
        self.publish(1);
        Ok(())
    }

    /// Enqueues every item of `items` or none: if the ring has fewer free slots than
    /// `items.len()`, the untouched iterator is handed back.
    ///
    /// The length is taken from [`ExactSizeIterator::len`]; an iterator that yields fewer items
    /// than it announced has only the yielded ones enqueued, and one that yields more has the
    /// extra ones left in it.
    pub fn enqueue_bulk<I>(&mut self, items: I) -> Result<(), I::IntoIter>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut it = items.into_iter();
        let n = it.len();
        if self.free_space(n) < n {
            return Err(it);
        }
        self.write_from(&mut it, n);
        Ok(())
    }

    /// Enqueues as many items from `items` as there are free slots; returns how many. Items that
    /// did not fit stay in the iterator (it is never advanced past the last enqueued item).
    pub fn enqueue_burst<I>(&mut self, items: &mut I) -> usize
    where
        I: Iterator<Item = T>,
    {
        let cap = self.capacity();
        let want = items.size_hint().1.unwrap_or(cap).clamp(1, cap);
        let free = self.free_space(want);
        self.write_from(items, free)
    }

    /// Copies all of `items` in, or nothing ([`RingError::Full`]).
    pub fn enqueue_bulk_slice(&mut self, items: &[T]) -> Result<(), RingError>
    where
        T: Copy,
    {
        if self.free_space(items.len()) < items.len() {
            return Err(RingError::Full);
        }
        self.copy_in(items);
        Ok(())
    }

    /// Copies in as many of `items` (from the front) as fit; returns how many.
    pub fn enqueue_burst_slice(&mut self, items: &[T]) -> usize
    where
        T: Copy,
    {
        let free = self.free_space(items.len().max(1));
        let n = free.min(items.len());
        self.copy_in(&items[..n]);
        n
    }

    /// Copies `items` (which fit) into the free slots at `tail` and publishes them.
    #[inline]
    fn copy_in(&mut self, items: &[T])
    where
        T: Copy,
    {
        let n = items.len();
        if n == 0 {
            return;
        }
        let start = self.tail & self.shared.mask;
        let first = n.min(self.capacity() - start);
        self.shared
            .tracks
            .write_range(self.tail, n, self.shared.mask);
        // SAFETY: the caller checked that `n` slots from `tail` are free; they are the
        // contiguous ranges start..start+first and 0..n-first of the slot array, which do not
        // overlap `items` (the ring owns its array).
        unsafe {
            let base = self.shared.base();
            ptr::copy_nonoverlapping(items.as_ptr(), base.add(start), first);
            ptr::copy_nonoverlapping(items.as_ptr().add(first), base, n - first);
        }
        self.publish(n);
    }

    /// Moves up to `max` items (which fit) from `it` into the ring; returns how many. Publishes
    /// what was written even if the iterator panics.
    #[inline]
    fn write_from<I: Iterator<Item = T>>(&mut self, it: &mut I, max: usize) -> usize {
        /// Publishes the written slots when dropped (also during unwinding).
        struct Guard<'a, T> {
            p: &'a mut Producer<T>,
            written: usize,
        }
        impl<T> Drop for Guard<'_, T> {
            fn drop(&mut self) {
                let n = self.written;
                if n > 0 {
                    self.p.publish(n);
                }
            }
        }
        let mut g = Guard {
            p: self,
            written: 0,
        };
        while g.written < max {
            match it.next() {
                Some(v) => {
                    let pos = g.p.tail.wrapping_add(g.written);
                    g.p.shared.tracks.write(pos & g.p.shared.mask);
                    // SAFETY: at least `max` slots from `tail` are free (checked by the caller).
                    unsafe { g.p.shared.slot(pos).write(v) };
                    g.written += 1;
                }
                None => break,
            }
        }
        g.written
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("free", &self.free_count())
            .finish()
    }
}

/// The consuming half of an SPSC ring. `Send` (when `T: Send`), not `Clone`.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Our position; equal to `shared.cons`, which only we store.
    head: usize,
    /// The producer position as last loaded (never ahead of the real one).
    prod_cache: usize,
}

impl<T> Consumer<T> {
    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Items in the ring right now (the producer may add more at any time).
    #[inline]
    pub fn used_count(&self) -> usize {
        // Relaxed: a count only; no slot is read on the strength of this load (pairs with nothing;
        // seeing the producer's Release store of `prod` late only undercounts).
        self.shared
            .prod
            .load(Ordering::Relaxed)
            .wrapping_sub(self.head)
    }

    /// Free slots right now (the producer may fill some at any time).
    #[inline]
    pub fn free_count(&self) -> usize {
        self.capacity() - self.used_count()
    }

    /// Whether the producer half has been dropped (items it published are still readable).
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }

    /// Published items, refreshing the cached producer position only if the cache shows fewer
    /// than `want`.
    #[inline]
    fn available(&mut self, want: usize) -> usize {
        let mut used = self.prod_cache.wrapping_sub(self.head);
        if used < want {
            // Acquire: pairs with the Release store of `prod` in `Producer::publish`, so the
            // producer's slot writes are visible before we read the slots.
            self.prod_cache = self.shared.prod.load(Ordering::Acquire);
            used = self.prod_cache.wrapping_sub(self.head);
        }
        used
    }

    /// Releases `n` read slots to the producer.
    #[inline]
    fn release(&mut self, n: usize) {
        self.head = self.head.wrapping_add(n);
        // Release: pairs with the Acquire load of `cons` in `Producer::free_space`, so our reads
        // of the slots happen before the producer overwrites them.
        self.shared.cons.store(self.head, Ordering::Release);
    }

    /// Dequeues one item, if any.
    #[inline]
    pub fn dequeue(&mut self) -> Option<T> {
        if self.available(1) == 0 {
            return None;
        }
        self.shared.tracks.read(self.head & self.shared.mask);
        // SAFETY: the slot at `head` is published (checked above); moving out leaves it free.
        let v = unsafe { self.shared.slot(self.head).read() };
        self.release(1);
        Some(v)
    }

    /// Fills all of `out` or nothing (`None` when fewer than `out.len()` items are in the ring).
    ///
    /// The returned slice is `out`, initialised. The items are *moved* into `out`: since
    /// `MaybeUninit` never drops its contents, a caller holding items that need `Drop` must move
    /// them out of the returned slice (e.g. with [`core::mem::take`] or `ptr::read`) or they leak.
    pub fn dequeue_bulk<'a>(&mut self, out: &'a mut [MaybeUninit<T>]) -> Option<&'a mut [T]> {
        if self.available(out.len()) < out.len() {
            return None;
        }
        Some(self.copy_out(out))
    }

    /// Moves up to `out.len()` items into the front of `out`; returns that initialised prefix
    /// (empty when the ring is empty). The same ownership note as [`Consumer::dequeue_bulk`].
    pub fn dequeue_burst<'a>(&mut self, out: &'a mut [MaybeUninit<T>]) -> &'a mut [T] {
        let avail = self.available(out.len().max(1));
        let n = avail.min(out.len());
        self.copy_out(&mut out[..n])
    }

    /// Passes exactly `n` items to `sink`, in order, or none ([`RingError::Empty`]).
    pub fn dequeue_bulk_with<F: FnMut(T)>(&mut self, n: usize, sink: F) -> Result<(), RingError> {
        if self.available(n) < n {
            return Err(RingError::Empty);
        }
        self.read_into(n, sink);
        Ok(())
    }

    /// Passes up to `max` items to `sink`, in order; returns how many.
    pub fn dequeue_burst_with<F: FnMut(T)>(&mut self, max: usize, sink: F) -> usize {
        let avail = self.available(max.clamp(1, self.capacity()));
        self.read_into(avail.min(max), sink)
    }

    /// Moves `out.len()` published items into `out` and releases their slots.
    #[inline]
    fn copy_out<'a>(&mut self, out: &'a mut [MaybeUninit<T>]) -> &'a mut [T] {
        let n = out.len();
        if n > 0 {
            let start = self.head & self.shared.mask;
            let first = n.min(self.capacity() - start);
            self.shared
                .tracks
                .read_range(self.head, n, self.shared.mask);
            // SAFETY: the caller checked that `n` slots from `head` are published; they are the
            // contiguous ranges start..start+first and 0..n-first of the slot array. Moving them
            // bitwise into `out` transfers ownership; the slots become free on release.
            unsafe {
                let base = self.shared.base();
                let dst = out.as_mut_ptr().cast::<T>();
                ptr::copy_nonoverlapping(base.add(start), dst, first);
                ptr::copy_nonoverlapping(base, dst.add(first), n - first);
            }
            self.release(n);
        }
        // SAFETY: all `n` elements were initialised above.
        unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) }
    }

    /// Moves `n` published items into `sink`; releases what was taken even if `sink` panics.
    #[inline]
    fn read_into<F: FnMut(T)>(&mut self, n: usize, mut sink: F) -> usize {
        /// Releases the taken slots when dropped (also during unwinding).
        struct Guard<'a, T> {
            c: &'a mut Consumer<T>,
            taken: usize,
        }
        impl<T> Drop for Guard<'_, T> {
            fn drop(&mut self) {
                let n = self.taken;
                if n > 0 {
                    self.c.release(n);
                }
            }
        }
        let mut g = Guard { c: self, taken: 0 };
        while g.taken < n {
            let pos = g.c.head.wrapping_add(g.taken);
            g.c.shared.tracks.read(pos & g.c.shared.mask);
            // SAFETY: at least `n` slots from `head` are published (checked by the caller).
            let v = unsafe { g.c.shared.slot(pos).read() };
            g.taken += 1;
            sink(v);
        }
        n
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("used", &self.used_count())
            .finish()
    }
}

// Not under loom: loom's atomics work only inside `loom::model` (poller/tests/loom_rings.rs).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as Counter;

    struct Tracked<'a>(u32, &'a Counter);
    impl Drop for Tracked<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn rejects_bad_capacity() {
        assert_eq!(channel::<u8>(0).unwrap_err(), RingError::BadCapacity);
        assert_eq!(channel::<u8>(3).unwrap_err(), RingError::BadCapacity);
        assert_eq!(
            channel::<u8>(MAX_CAPACITY * 2).unwrap_err(),
            RingError::BadCapacity
        );
        assert!(channel::<u8>(1).is_ok());
    }

    #[test]
    fn accepts_single_items_with_wraparound() {
        let (mut p, mut c) = channel::<u64>(4).unwrap();
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..25 {
            let k = round % 5;
            for _ in 0..k {
                if p.enqueue(next_in).is_ok() {
                    next_in += 1;
                }
            }
            while let Some(v) = c.dequeue() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
        }
        assert_eq!(next_in, next_out);
        assert!(next_in > 20);
    }

    #[test]
    fn accepts_slice_bulk_and_burst_across_the_end() {
        let (mut p, mut c) = channel::<u32>(8).unwrap();
        p.enqueue_bulk_slice(&[0, 1, 2, 3, 4, 5]).unwrap();
        let mut out = [MaybeUninit::uninit(); 5];
        assert_eq!(c.dequeue_bulk(&mut out).unwrap(), &[0, 1, 2, 3, 4]);
        // tail at 6: this bulk wraps.
        p.enqueue_bulk_slice(&[6, 7, 8, 9, 10]).unwrap();
        assert_eq!(p.enqueue_burst_slice(&[11, 12, 13, 14]), 2);
        let mut out = [MaybeUninit::uninit(); 16];
        assert_eq!(c.dequeue_burst(&mut out), &[5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(c.dequeue_burst(&mut out).is_empty());
    }

    #[test]
    fn accepts_drop_of_leftovers_and_moved_items() {
        let drops = Counter::new(0);
        {
            let (mut p, mut c) = channel::<Tracked<'_>>(8).unwrap();
            p.enqueue_bulk((0..6).map(|i| Tracked(i, &drops)))
                .map_err(|_| ())
                .unwrap();
            let first = c.dequeue().unwrap();
            assert_eq!(first.0, 0);
            drop(first);
            let mut got = Vec::new();
            c.dequeue_bulk_with(2, |t| got.push(t.0)).unwrap();
            assert_eq!(got, [1, 2]);
            assert_eq!(drops.load(Ordering::Relaxed), 3);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn accepts_two_threads_in_order() {
        let n: u64 = if cfg!(miri) { 200 } else { 20_000 };
        let (mut p, mut c) = channel::<u64>(16).unwrap();
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                let before = i;
                if i % 3 == 0 {
                    let batch = [i, i + 1, i + 2];
                    let k = p.enqueue_burst_slice(&batch[..(n - i).min(3) as usize]);
                    i += k as u64;
                } else if p.enqueue(i).is_ok() {
                    i += 1;
                }
                if i == before {
                    std::thread::yield_now();
                }
            }
        });
        let mut expect = 0;
        let mut buf = [MaybeUninit::uninit(); 5];
        while expect < n {
            let before = expect;
            for &v in c.dequeue_burst(&mut buf).iter() {
                assert_eq!(v, expect);
                expect += 1;
            }
            if expect == before {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert!(c.dequeue().is_none());
    }
}
