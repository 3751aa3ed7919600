//! Dynamic STag slots: a fixed-capacity pool of opaque provider handles (memory windows).
//!
//! Normal operation: a provider creates its memory windows once and hands them to
//! [`StagPool::new`]; the engine takes slots per RPC (through a per-core [`StagCache`], in
//! bulk), binds each window over the buffer it advertises, and puts the slot back once the STag
//! is invalidated. mempool never looks inside `T`.
//!
//! Recovery: an exhausted pool makes gets fail or come back short (counted as empty events);
//! foreign indices are rejected and raw double frees are caught in debug builds, as in
//! [`crate::pool`].

use crate::index_pool::{CacheState, Exhausted, PoolError, PoolStats, Shared};
use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use std::sync::Arc;

crate::index_pool::pool_index! {
    /// The index of one STag slot: `(pool id << 32) | index`.
    StagIdx
}

/// Cache settings of a [`StagPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StagConfig {
    /// Per-core cache size in slots (0 disables caching; at most 4096 and at most the slot
    /// count).
    pub cache_size: usize,
    /// Most caches that may exist at once (at most 1024).
    pub max_caches: usize,
}

impl Default for StagConfig {
    fn default() -> Self {
        StagConfig {
            cache_size: 32,
            max_caches: 64,
        }
    }
}

struct StagInner<T> {
    sh: Shared,
    items: Box<[UnsafeCell<T>]>,
}

// SAFETY: a slot's `T` is reached mutably only by the holder of its index (owned handle, or the
// caller of the unsafe `slot_mut`), so sharing the pool across threads moves `T`s between
// threads but never shares one mutably: `T: Send` suffices. Shared `&T` access requires
// `T: Sync` (see `StagPool::slot`).
unsafe impl<T: Send> Sync for StagInner<T> {}

/// A fixed-capacity pool of dynamic STag slots holding provider handles `T`. Cheap to clone.
pub struct StagPool<T> {
    inner: Arc<StagInner<T>>,
}

impl<T> Clone for StagPool<T> {
    fn clone(&self) -> Self {
        StagPool {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for StagPool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagPool")
            .field("id", &self.inner.sh.id())
            .field("capacity", &self.inner.sh.count())
            .field("available", &self.inner.sh.available())
            .finish()
    }
}

impl<T: Send> StagPool<T> {
    /// A pool holding `items` (one slot each), all free.
    pub fn new(items: Vec<T>, cfg: &StagConfig) -> Result<StagPool<T>, PoolError> {
        let sh = Shared::new(items.len(), cfg.cache_size, cfg.max_caches)?;
        Ok(StagPool {
            inner: Arc::new(StagInner {
                sh,
                items: items.into_iter().map(UnsafeCell::new).collect(),
            }),
        })
    }

    /// The pool's id.
    #[inline]
    pub fn id(&self) -> u32 {
        self.inner.sh.id()
    }

    /// Number of slots (fixed).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.inner.sh.count()
    }

    /// Free slots (ring plus caches); a snapshot.
    #[inline]
    pub fn available(&self) -> usize {
        self.inner.sh.available()
    }

    /// Counters over the shared path and every cache.
    #[inline]
    pub fn stats(&self) -> PoolStats {
        self.inner.sh.stats()
    }

    #[inline]
    fn cell(&self, idx: StagIdx) -> Option<&UnsafeCell<T>> {
        let i = self.inner.sh.index_of(idx.0)?;
        self.inner.items.get(i)
    }

    /// Shared access to the handle in slot `idx` (`None` for a foreign index).
    ///
    /// # Safety
    /// Nobody may hold mutable access to the same slot meanwhile (the holder of `idx` decides).
    #[inline]
    pub unsafe fn slot(&self, idx: StagIdx) -> Option<&T>
    where
        T: Sync,
    {
        // SAFETY: no concurrent `&mut` per the caller's promise.
        self.cell(idx).map(|c| unsafe { &*c.get() })
    }

    /// Mutable access to the handle in slot `idx` (`None` for a foreign index).
    ///
    /// # Safety
    /// The caller must own `idx` exclusively and create no other reference to the slot while
    /// this one lives.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_mut(&self, idx: StagIdx) -> Option<&mut T> {
        // SAFETY: exclusive ownership per the caller's promise.
        self.cell(idx).map(|c| unsafe { &mut *c.get() })
    }

    /// Takes `out.len()` slots from the shared ring, all or none.
    #[inline]
    pub fn get_bulk(&self, out: &mut [StagIdx]) -> Result<(), Exhausted> {
        if self.inner.sh.get_bulk(raw_mut(out)) {
            Ok(())
        } else {
            Err(Exhausted)
        }
    }

    /// Takes up to `out.len()` slots from the shared ring; returns how many.
    #[inline]
    pub fn get_burst(&self, out: &mut [StagIdx]) -> usize {
        self.inner.sh.get_burst(raw_mut(out))
    }

    /// Takes one slot from the shared ring.
    #[inline]
    pub fn get(&self) -> Option<StagIdx> {
        let mut one = [StagIdx(0)];
        (self.get_burst(&mut one) == 1).then_some(one[0])
    }

    /// Returns slots to the shared ring.
    #[inline]
    pub fn put_bulk(&self, slots: &[StagIdx]) {
        self.inner.sh.put_bulk(raw(slots))
    }

    /// Returns one slot to the shared ring.
    #[inline]
    pub fn put(&self, slot: StagIdx) {
        self.put_bulk(core::slice::from_ref(&slot))
    }

    /// Takes one slot as an owned handle that derefs to `T` and returns the slot when dropped.
    #[inline]
    pub fn get_owned(&self) -> Option<StagSlot<T>> {
        self.get().map(|idx| StagSlot {
            pool: self.clone(),
            idx,
            _t: PhantomData,
        })
    }

    /// A per-core cache in front of this pool.
    pub fn cache(&self) -> Result<StagCache<T>, PoolError> {
        Ok(StagCache {
            st: CacheState::new(&self.inner.sh)?,
            pool: self.clone(),
            _not_sync: PhantomData,
        })
    }
}

/// A per-core cache of free STag slots (`Send`, not `Sync`). Dropping it returns its slots.
pub struct StagCache<T: Send> {
    st: CacheState,
    pool: StagPool<T>,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

impl<T: Send> fmt::Debug for StagCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagCache")
            .field("pool", &self.pool.id())
            .field("len", &self.st.len())
            .finish()
    }
}

impl<T: Send> StagCache<T> {
    /// The pool behind this cache.
    #[inline]
    pub fn pool(&self) -> &StagPool<T> {
        &self.pool
    }

    /// Slots currently in the cache.
    #[inline]
    pub fn len(&self) -> usize {
        self.st.len()
    }

    /// True when the cache holds no slots.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.st.len() == 0
    }

    /// This cache's counters.
    #[inline]
    pub fn stats(&self) -> PoolStats {
        self.st.stats(&self.pool.inner.sh)
    }

    /// Gets `out.len()` slots, all or none.
    #[inline]
    pub fn get_bulk(&mut self, out: &mut [StagIdx]) -> Result<(), Exhausted> {
        if self.st.get_bulk(&self.pool.inner.sh, raw_mut(out)) {
            Ok(())
        } else {
            Err(Exhausted)
        }
    }

    /// Gets up to `out.len()` slots; returns how many.
    #[inline]
    pub fn get_burst(&mut self, out: &mut [StagIdx]) -> usize {
        self.st.get_burst(&self.pool.inner.sh, raw_mut(out))
    }

    /// Gets one slot.
    #[inline]
    pub fn get(&mut self) -> Option<StagIdx> {
        let mut one = [StagIdx(0)];
        (self.get_burst(&mut one) == 1).then_some(one[0])
    }

    /// Returns slots.
    #[inline]
    pub fn put_bulk(&mut self, slots: &[StagIdx]) {
        self.st.put_bulk(&self.pool.inner.sh, raw(slots))
    }

    /// Returns one slot.
    #[inline]
    pub fn put(&mut self, slot: StagIdx) {
        self.put_bulk(core::slice::from_ref(&slot))
    }

    /// Returns every cached slot to the ring.
    pub fn flush(&mut self) {
        self.st.flush(&self.pool.inner.sh)
    }
}

impl<T: Send> Drop for StagCache<T> {
    fn drop(&mut self) {
        self.st.release(&self.pool.inner.sh)
    }
}

/// An owned STag slot: derefs to the provider handle and returns the slot when dropped.
pub struct StagSlot<T: Send> {
    pool: StagPool<T>,
    idx: StagIdx,
    /// `Sync` only when `T: Sync` (a shared handle gives `&T`).
    _t: PhantomData<T>,
}

impl<T: Send> fmt::Debug for StagSlot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagSlot").field("idx", &self.idx).finish()
    }
}

impl<T: Send> StagSlot<T> {
    /// The slot's index.
    #[inline]
    pub fn idx(&self) -> StagIdx {
        self.idx
    }

    /// Gives up the handle without returning the slot; the caller now owns the index.
    #[inline]
    pub fn into_raw(self) -> StagIdx {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the pool handle is moved out once.
        drop(unsafe { core::ptr::read(&me.pool) });
        me.idx
    }
}

impl<T: Send> core::ops::Deref for StagSlot<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        let c = &self.pool.inner.items[self.idx.index() as usize];
        // SAFETY: this handle owns the slot; `&self` excludes `&mut` through it.
        unsafe { &*c.get() }
    }
}

impl<T: Send> core::ops::DerefMut for StagSlot<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        let c = &self.pool.inner.items[self.idx.index() as usize];
        // SAFETY: this handle owns the slot exclusively.
        unsafe { &mut *c.get() }
    }
}

impl<T: Send> Drop for StagSlot<T> {
    #[inline]
    fn drop(&mut self) {
        self.pool.put(self.idx)
    }
}
