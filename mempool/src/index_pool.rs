//! The index machinery of the object pools ([`crate::pool`]): a backing ring of free tokens,
//! per-core caches in front of it, counters, and ownership checks.
//!
//! Normal operation: a token is `(pool id << 32) | index`. All free tokens live either in the
//! shared [`Ring`] or in one per-core cache. A cache serves gets from its own array and refills
//! from the ring in bulk when it runs short; puts go to the array and, once it holds 1.5x its
//! size, everything above the size is flushed back to the ring in one bulk (DPDK's
//! `rte_mempool` cache).
//!
//! Recovery: a get that cannot be served leaves both cache and ring untouched and counts an
//! "empty" event. A put of a token that belongs to another pool (or is out of range) is a debug
//! assertion; in release builds it is dropped and counted (`rejected_puts`). In debug builds
//! every object's state is tracked, so a double free panics at the put.

use crate::ring::Ring;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// Largest per-core cache size.
pub const MAX_CACHE_SIZE: usize = 4096;
/// Largest number of objects or slots in one pool.
pub const MAX_COUNT: usize = 1 << 30;
/// Largest number of per-core caches of one pool.
pub const MAX_CACHES: usize = 1024;

/// Pool ids come from one counter, so a token names its pool.
static NEXT_POOL_ID: AtomicU32 = AtomicU32::new(1);

/// Whether per-object state is tracked (double-free detection).
const CHECK: bool = cfg!(debug_assertions);
const ST_FREE: u8 = 0;
const ST_OUT: u8 = 1;

/// Counters of a pool (sum over all its caches and the shared path) or of one cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PoolStats {
    /// Objects handed out.
    pub gets: u64,
    /// Objects returned.
    pub puts: u64,
    /// Cache get requests served from the cache alone.
    pub cache_hits: u64,
    /// Cache get requests that had to go to the backing ring.
    pub cache_misses: u64,
    /// Get requests that could not be served in full (bulk failed, burst came back short).
    pub empty: u64,
    /// Bulk moves from the ring into a cache.
    pub refills: u64,
    /// Bulk moves from a cache back to the ring.
    pub flushes: u64,
    /// Puts of foreign or out-of-range indices that were dropped (release builds only; debug
    /// builds assert).
    pub rejected_puts: u64,
}

impl PoolStats {
    fn add(&mut self, o: &PoolStats) {
        self.gets += o.gets;
        self.puts += o.puts;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
        self.empty += o.empty;
        self.refills += o.refills;
        self.flushes += o.flushes;
        self.rejected_puts += o.rejected_puts;
    }
}

/// Errors building a pool or one of its caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolError {
    /// A configuration value is out of range; the text names it.
    InvalidConfig(&'static str),
    /// The region could not hold the pool.
    Region(crate::region::RegionError),
    /// The region is not registered (objects carry its keys).
    NotRegistered,
    /// Every cache slot of the pool is taken.
    TooManyCaches {
        /// The pool's `max_caches`.
        max: usize,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidConfig(what) => write!(f, "invalid pool configuration: {what}"),
            PoolError::Region(e) => write!(f, "pool does not fit: {e}"),
            PoolError::NotRegistered => f.write_str("region must be registered before pools"),
            PoolError::TooManyCaches { max } => write!(f, "all {max} cache slots are in use"),
        }
    }
}

impl std::error::Error for PoolError {}

/// A get could not be served (the pool, or what is reachable of it, is exhausted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Exhausted;

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pool exhausted")
    }
}

impl std::error::Error for Exhausted {}

/// Counters of one writer (a cache) or of the shared path.
#[derive(Default)]
struct StatSlot {
    gets: AtomicU64,
    puts: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    empty: AtomicU64,
    refills: AtomicU64,
    flushes: AtomicU64,
    rejected: AtomicU64,
    /// Tokens currently held by the cache (gauge).
    cached: AtomicUsize,
}

impl StatSlot {
    fn snapshot(&self) -> PoolStats {
        // Relaxed loads: statistics only; pair with the Relaxed updates below, values may be
        // slightly stale.
        PoolStats {
            gets: self.gets.load(Ordering::Relaxed),
            puts: self.puts.load(Ordering::Relaxed),
            cache_hits: self.hits.load(Ordering::Relaxed),
            cache_misses: self.misses.load(Ordering::Relaxed),
            empty: self.empty.load(Ordering::Relaxed),
            refills: self.refills.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            rejected_puts: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// Adds to a counter that only the calling cache writes: a plain load and store, no locked
/// instruction.
#[inline]
fn bump_own(c: &AtomicU64, n: u64) {
    // Relaxed: single writer (the owning cache; handover between owners is ordered by the
    // Acquire/Release on `Shared::slot_used`); readers only report.
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Adds to a counter of the shared path (many writers).
#[inline]
fn bump_shared(c: &AtomicU64, n: u64) {
    // Relaxed: statistics only, no data published.
    c.fetch_add(n, Ordering::Relaxed);
}

/// Ring + caches + counters of one pool.
pub(crate) struct Shared {
    id: u32,
    count: u32,
    cache_size: usize,
    ring: Ring,
    shared_stats: CachePadded<StatSlot>,
    slots: Box<[CachePadded<StatSlot>]>,
    slot_used: Box<[AtomicBool]>,
    /// Per-object state (debug builds only; empty otherwise).
    state: Box<[AtomicU8]>,
}

impl Shared {
    /// A pool of `count` tokens, all free, with up to `max_caches` caches of `cache_size`.
    pub(crate) fn new(
        count: usize,
        cache_size: usize,
        max_caches: usize,
    ) -> Result<Shared, PoolError> {
        if count == 0 || count > MAX_COUNT {
            return Err(PoolError::InvalidConfig("count must be 1..=2^30"));
        }
        if cache_size > MAX_CACHE_SIZE || cache_size > count {
            return Err(PoolError::InvalidConfig(
                "cache_size must be at most 4096 and at most count",
            ));
        }
        if max_caches > MAX_CACHES {
            return Err(PoolError::InvalidConfig("max_caches must be at most 1024"));
        }
        // Relaxed: unique-id counter only.
        let id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
        let s = Shared {
            id,
            count: count as u32,
            cache_size,
            ring: Ring::new(count),
            shared_stats: CachePadded::new(StatSlot::default()),
            slots: (0..max_caches)
                .map(|_| CachePadded::new(StatSlot::default()))
                .collect(),
            slot_used: (0..max_caches).map(|_| AtomicBool::new(false)).collect(),
            state: if CHECK {
                (0..count).map(|_| AtomicU8::new(ST_FREE)).collect()
            } else {
                Box::new([])
            },
        };
        let mut batch = [0u64; 256];
        let mut i = 0usize;
        while i < count {
            let k = (count - i).min(batch.len());
            for (j, t) in batch[..k].iter_mut().enumerate() {
                *t = s.token((i + j) as u32);
            }
            let ok = s.ring.enqueue_bulk(&batch[..k]);
            debug_assert!(ok, "fresh ring holds count tokens");
            i += k;
        }
        Ok(s)
    }

    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.count as usize
    }

    #[inline]
    pub(crate) fn cache_size(&self) -> usize {
        self.cache_size
    }

    #[inline]
    pub(crate) fn max_caches(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(crate) fn token(&self, index: u32) -> u64 {
        (u64::from(self.id) << 32) | u64::from(index)
    }

    /// The index a token names, if it belongs to this pool and is in range.
    #[inline]
    pub(crate) fn index_of(&self, tok: u64) -> Option<usize> {
        let idx = tok as u32;
        ((tok >> 32) as u32 == self.id && idx < self.count).then_some(idx as usize)
    }

    /// Free tokens (ring + caches); a snapshot.
    pub(crate) fn available(&self) -> usize {
        let cached: usize = self
            .slots
            .iter()
            // Relaxed: gauge written by each cache; reporting only.
            .map(|s| s.cached.load(Ordering::Relaxed))
            .sum();
        (self.ring.len() + cached).min(self.count())
    }

    /// Counters summed over the shared path and every cache (past and present).
    pub(crate) fn stats(&self) -> PoolStats {
        let mut t = self.shared_stats.snapshot();
        for s in self.slots.iter() {
            t.add(&s.snapshot());
        }
        t
    }

    /// Marks tokens handed out (debug builds: asserts each was free).
    #[inline]
    fn mark_out(&self, toks: &[u64]) {
        if CHECK {
            for &t in toks {
                let i = t as u32 as usize;
                // Relaxed: the token itself travelled through the ring (Acquire/Release), so
                // this thread already owns the object; the state is a debug cross-check.
                let prev = self.state[i].swap(ST_OUT, Ordering::Relaxed);
                assert_eq!(
                    prev, ST_FREE,
                    "object {i} of pool {} handed out twice (an earlier double free?)",
                    self.id
                );
            }
        }
    }

    /// Marks tokens returned (debug builds: asserts each was out — catches double frees).
    #[inline]
    fn mark_in(&self, toks: &[u64]) {
        if CHECK {
            for &t in toks {
                let i = t as u32 as usize;
                // Relaxed: debug cross-check by the owning thread (see `mark_out`).
                let prev = self.state[i].swap(ST_FREE, Ordering::Relaxed);
                assert_eq!(
                    prev, ST_OUT,
                    "double free of object {i} in pool {}",
                    self.id
                );
            }
        }
    }

    #[inline]
    fn all_valid(&self, toks: &[u64]) -> bool {
        toks.iter().all(|&t| self.index_of(t).is_some())
    }

    /// Slow path for a put that contains foreign or out-of-range tokens.
    #[cold]
    fn put_filtered(&self, toks: &[u64]) {
        for &t in toks {
            if self.index_of(t).is_some() {
                self.mark_in(core::slice::from_ref(&t));
                self.enqueue_or_count(core::slice::from_ref(&t));
                bump_shared(&self.shared_stats.puts, 1);
            } else {
                debug_assert!(
                    false,
                    "put of index {t:#x} that does not belong to pool {}",
                    self.id
                );
                bump_shared(&self.shared_stats.rejected, 1);
            }
        }
    }

    /// Enqueues; anything that does not fit (only possible after an undetected double free)
    /// is counted as rejected.
    #[inline]
    fn enqueue_or_count(&self, toks: &[u64]) {
        if !self.ring.enqueue_bulk(toks) {
            let k = self.ring.enqueue_burst(toks);
            bump_shared(&self.shared_stats.rejected, (toks.len() - k) as u64);
        }
    }

    /// Shared path: all of `out` or nothing.
    pub(crate) fn get_bulk(&self, out: &mut [u64]) -> bool {
        if out.is_empty() {
            return true;
        }
        if self.ring.dequeue_bulk(out) {
            self.mark_out(out);
            bump_shared(&self.shared_stats.gets, out.len() as u64);
            true
        } else {
            bump_shared(&self.shared_stats.empty, 1);
            false
        }
    }

    /// Shared path: as many as available, into the front of `out`.
    pub(crate) fn get_burst(&self, out: &mut [u64]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let k = self.ring.dequeue_burst(out);
        self.mark_out(&out[..k]);
        bump_shared(&self.shared_stats.gets, k as u64);
        if k < out.len() {
            bump_shared(&self.shared_stats.empty, 1);
        }
        k
    }

    /// Shared path: returns tokens to the ring.
    pub(crate) fn put_bulk(&self, toks: &[u64]) {
        if !self.all_valid(toks) {
            self.put_filtered(toks);
            return;
        }
        self.mark_in(toks);
        self.enqueue_or_count(toks);
        bump_shared(&self.shared_stats.puts, toks.len() as u64);
    }
}

/// The state of one per-core cache. Owned by a `PoolCache`, which passes the
/// `Shared` it belongs to into every call.
pub(crate) struct CacheState {
    objs: Box<[u64]>,
    len: usize,
    size: usize,
    thresh: usize,
    slot: usize,
}

impl CacheState {
    /// Claims a cache slot of `sh` and allocates the cache array (the only allocation).
    pub(crate) fn new(sh: &Shared) -> Result<CacheState, PoolError> {
        let slot = sh
            .slot_used
            .iter()
            .position(|u| {
                // Acquire: pairs with the Release store in `release`, so this cache sees the
                // counters the previous owner of the slot left (it keeps adding to them).
                u.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(PoolError::TooManyCaches {
                max: sh.max_caches(),
            })?;
        let size = sh.cache_size;
        let thresh = size + size / 2;
        Ok(CacheState {
            objs: vec![0u64; thresh + size].into_boxed_slice(),
            len: 0,
            size,
            thresh,
            slot,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    #[inline]
    pub(crate) fn flush_threshold(&self) -> usize {
        self.thresh
    }

    pub(crate) fn stats(&self, sh: &Shared) -> PoolStats {
        sh.slots[self.slot].snapshot()
    }

    #[inline]
    fn publish_len(&self, st: &StatSlot) {
        // Relaxed: gauge for `available()`; reporting only.
        st.cached.store(self.len, Ordering::Relaxed);
    }

    /// Serves `out` from the cache, refilling it from the ring first when it is short (so that
    /// it is back at `size` afterwards). Counts the hit or miss. False (nothing moved) when the
    /// ring cannot supply a full refill.
    #[inline]
    fn serve_cached(&mut self, sh: &Shared, out: &mut [u64]) -> bool {
        let n = out.len();
        let st = &sh.slots[self.slot];
        if n <= self.len {
            bump_own(&st.hits, 1);
        } else {
            bump_own(&st.misses, 1);
            let want = n - self.len + self.size;
            if self.len + want > self.objs.len()
                || !sh
                    .ring
                    .dequeue_bulk(&mut self.objs[self.len..self.len + want])
            {
                return false;
            }
            self.len += want;
            bump_own(&st.refills, 1);
        }
        out.copy_from_slice(&self.objs[self.len - n..self.len]);
        self.len -= n;
        true
    }

    /// Bookkeeping after `n` tokens were handed out into `out[..n]`.
    #[inline]
    fn handed_out(&self, sh: &Shared, out: &[u64]) {
        let st = &sh.slots[self.slot];
        sh.mark_out(out);
        bump_own(&st.gets, out.len() as u64);
        self.publish_len(st);
    }

    /// All of `out` or nothing.
    pub(crate) fn get_bulk(&mut self, sh: &Shared, out: &mut [u64]) -> bool {
        let n = out.len();
        if n == 0 {
            return true;
        }
        if !self.serve_cached(sh, out) {
            // No full refill possible: take exactly what is missing, or fail untouched.
            let need = n - self.len;
            if !sh.ring.dequeue_bulk(&mut out[..need]) {
                bump_own(&sh.slots[self.slot].empty, 1);
                return false;
            }
            out[need..].copy_from_slice(&self.objs[..self.len]);
            self.len = 0;
        }
        self.handed_out(sh, out);
        true
    }

    /// As many as possible, into the front of `out`; returns how many.
    pub(crate) fn get_burst(&mut self, sh: &Shared, out: &mut [u64]) -> usize {
        let n = out.len();
        if n == 0 {
            return 0;
        }
        if self.serve_cached(sh, out) {
            self.handed_out(sh, out);
            return n;
        }
        // Whatever the ring has, then the whole cache.
        let need = n - self.len;
        let got = sh.ring.dequeue_burst(&mut out[..need]);
        let total = got + self.len;
        out[got..total].copy_from_slice(&self.objs[..self.len]);
        self.len = 0;
        if total < n {
            bump_own(&sh.slots[self.slot].empty, 1);
        }
        self.handed_out(sh, &out[..total]);
        total
    }

    /// Returns tokens: into the cache, flushing down to `size` once it reaches 1.5x `size`;
    /// puts larger than the cache size go straight to the ring.
    pub(crate) fn put_bulk(&mut self, sh: &Shared, toks: &[u64]) {
        let n = toks.len();
        if n == 0 {
            return;
        }
        if !sh.all_valid(toks) {
            sh.put_filtered(toks);
            return;
        }
        sh.mark_in(toks);
        let st = &sh.slots[self.slot];
        bump_own(&st.puts, n as u64);
        if n > self.size {
            sh.enqueue_or_count(toks);
            return;
        }
        // `len <= max(thresh - 1, size)` and `n <= size` keep this within `thresh + size`.
        self.objs[self.len..self.len + n].copy_from_slice(toks);
        self.len += n;
        if self.len >= self.thresh && self.len > self.size {
            sh.enqueue_or_count(&self.objs[self.size..self.len]);
            self.len = self.size;
            bump_own(&st.flushes, 1);
        }
        self.publish_len(st);
    }

    /// Returns every cached token to the ring.
    pub(crate) fn flush(&mut self, sh: &Shared) {
        if self.len > 0 {
            sh.enqueue_or_count(&self.objs[..self.len]);
            self.len = 0;
            let st = &sh.slots[self.slot];
            bump_own(&st.flushes, 1);
            self.publish_len(st);
        }
    }

    /// Flushes and gives the slot back (the counters stay and keep counting in the pool total).
    pub(crate) fn release(&mut self, sh: &Shared) {
        self.flush(sh);
        // Release: pairs with the Acquire CAS in `new` (next owner sees our counter values).
        sh.slot_used[self.slot].store(false, Ordering::Release);
    }
}
