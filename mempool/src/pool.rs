//! Fixed-size object pools carved from a registered region (DPDK `rte_mempool` style).
//!
//! Normal operation: [`Pool::new`] carves `count` objects of `obj_size` octets (each aligned to
//! `align`) out of a registered [`Region`] and builds a side table ([`ObjEntry`]: pool id, index,
//! address, length, lkey, rkey). Free object indices live in a lock-free bounded ring; each core
//! takes a [`PoolCache`] (not `Sync`) and gets/puts indices through it, in bulk where it can.
//! [`PoolBuf`] is the owned handle: it derefs to the object's bytes and returns the object when
//! dropped, on any thread.
//!
//! Recovery: an exhausted pool makes gets fail ([`Exhausted`]) or come back short, and counts
//! an empty event; nothing blocks. Puts of indices from another pool are rejected (debug
//! assertion; counted and dropped in release builds); double frees of raw indices panic in debug
//! builds and are impossible through [`PoolBuf`].

use crate::index_pool::{CacheState, Exhausted, PoolError, PoolStats, Shared};
use crate::reg::Keys;
use crate::region::Region;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::sync::Arc;

/// The index of one object of one pool: `(pool id << 32) | index`. Plain data (`Copy`); whoever
/// holds it is trusted by the raw API to own the object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct ObjIdx(u64);

impl ObjIdx {
    /// The entry's index within its pool (`0..count`).
    #[inline]
    pub const fn index(self) -> u32 {
        self.0 as u32
    }

    /// The id of the pool the entry belongs to.
    #[inline]
    pub const fn pool_id(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The raw 64-bit value (e.g. to store in a work request id).
    #[inline]
    pub const fn to_raw(self) -> u64 {
        self.0
    }

    /// Rebuilds an index from its raw value. Nothing is checked here; pools check on use.
    #[inline]
    pub const fn from_raw(raw: u64) -> ObjIdx {
        ObjIdx(raw)
    }
}

impl fmt::Debug for ObjIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjIdx({}:{})", self.pool_id(), self.index())
    }
}

/// The raw `u64` tokens the shared ring works on, viewed in place.
#[inline]
fn raw_mut(s: &mut [ObjIdx]) -> &mut [u64] {
    // SAFETY: `ObjIdx` is `repr(transparent)` over `u64`.
    unsafe { &mut *(s as *mut [ObjIdx] as *mut [u64]) }
}

/// The raw `u64` tokens of a slice of indices, viewed in place.
#[inline]
fn raw(s: &[ObjIdx]) -> &[u64] {
    // SAFETY: `ObjIdx` is `repr(transparent)` over `u64`.
    unsafe { &*(s as *const [ObjIdx] as *const [u64]) }
}

/// One row of a pool's side table: everything a work request needs about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjEntry {
    /// Virtual address of the object.
    pub addr: u64,
    /// Object size in octets.
    pub len: u32,
    /// Local key of the region the object lives in.
    pub lkey: u32,
    /// Remote key (persistent STag) of that region.
    pub rkey: u32,
    /// Id of the pool.
    pub pool_id: u32,
    /// Index of the object within the pool.
    pub index: u32,
}

/// How to build a [`Pool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolConfig {
    /// Number of objects (1..=2^30).
    pub count: usize,
    /// Object size in octets (1..=2^32 - 1).
    pub obj_size: usize,
    /// Object alignment (a power of two, e.g. 64 or 4096). Objects are spaced by `obj_size`
    /// rounded up to `align`.
    pub align: usize,
    /// Per-core cache size in objects (0 disables caching; at most 4096 and at most `count`).
    pub cache_size: usize,
    /// Most caches that may exist at once (at most 1024).
    pub max_caches: usize,
}

impl PoolConfig {
    /// A configuration with 64-octet alignment, a 256-object cache (clamped to `count`) and
    /// up to 64 caches.
    pub fn new(count: usize, obj_size: usize) -> Self {
        PoolConfig {
            count,
            obj_size,
            align: 64,
            cache_size: 256.min(count),
            max_caches: 64,
        }
    }

    /// Distance between the starts of consecutive objects, if the configuration is sane.
    pub fn stride(&self) -> Option<usize> {
        if self.align == 0 || !self.align.is_power_of_two() || self.obj_size == 0 {
            return None;
        }
        Some(self.obj_size.checked_add(self.align - 1)? & !(self.align - 1))
    }

    /// Octets of region a pool with this configuration needs (including worst-case alignment
    /// padding), if representable.
    pub fn region_len(&self) -> Option<usize> {
        self.stride()?
            .checked_mul(self.count)?
            .checked_add(self.align - 1)
    }
}

struct PoolInner {
    sh: Shared,
    /// Keeps the memory (and its registration) alive while any handle or cache exists.
    region: Arc<Region>,
    base: NonNull<u8>,
    stride: usize,
    obj_size: usize,
    keys: Keys,
    entries: Box<[ObjEntry]>,
}

// SAFETY: `base` points into `region`, which is Send + Sync; access to the bytes of an object is
// exclusive to the holder of its index (safe API) or the caller's responsibility (unsafe API).
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

/// A pool of fixed-size objects. Cheap to clone (shared handle); `Send + Sync`.
///
/// The methods on `Pool` itself work on the shared ring directly (any thread, no cache); hot
/// paths use a per-core [`PoolCache`].
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.id())
            .field("count", &self.count())
            .field("obj_size", &self.inner.obj_size)
            .field("stride", &self.inner.stride)
            .field("available", &self.available())
            .finish()
    }
}

impl Pool {
    /// Carves a pool out of `region`, which must already be registered (objects carry its keys).
    pub fn new(region: &Arc<Region>, cfg: &PoolConfig) -> Result<Pool, PoolError> {
        let stride = cfg.stride().ok_or(PoolError::InvalidConfig(
            "align must be a power of two, obj_size >= 1",
        ))?;
        if cfg.obj_size > u32::MAX as usize {
            return Err(PoolError::InvalidConfig("obj_size must fit in 32 bits"));
        }
        let keys = region.keys().ok_or(PoolError::NotRegistered)?;
        let total = stride
            .checked_mul(cfg.count)
            .ok_or(PoolError::InvalidConfig("count * stride overflows"))?;
        // Validates count, cache size, cache count before touching the region.
        let sh = Shared::new(cfg.count, cfg.cache_size, cfg.max_caches)?;
        let off = region.carve(total, cfg.align).map_err(PoolError::Region)?;
        // SAFETY: `carve` returned an in-bounds offset.
        let base = unsafe { region.as_ptr().add(off) };
        let base = NonNull::new(base).ok_or(PoolError::InvalidConfig("null region"))?;
        let entries = (0..cfg.count)
            .map(|i| ObjEntry {
                addr: base.as_ptr() as u64 + (i * stride) as u64,
                len: cfg.obj_size as u32,
                lkey: keys.lkey,
                rkey: keys.rkey,
                pool_id: sh.id(),
                index: i as u32,
            })
            .collect();
        Ok(Pool {
            inner: Arc::new(PoolInner {
                sh,
                region: Arc::clone(region),
                base,
                stride,
                obj_size: cfg.obj_size,
                keys,
                entries,
            }),
        })
    }

    /// The pool's id (also found in every [`ObjIdx`] and [`ObjEntry`]).
    #[inline]
    pub fn id(&self) -> u32 {
        self.inner.sh.id()
    }

    /// Number of objects.
    #[inline]
    pub fn count(&self) -> usize {
        self.inner.sh.count()
    }

    /// Object size in octets.
    #[inline]
    pub fn obj_size(&self) -> usize {
        self.inner.obj_size
    }

    /// Distance between consecutive objects.
    #[inline]
    pub fn stride(&self) -> usize {
        self.inner.stride
    }

    /// Per-core cache size.
    #[inline]
    pub fn cache_size(&self) -> usize {
        self.inner.sh.cache_size()
    }

    /// The region the pool lives in.
    #[inline]
    pub fn region(&self) -> &Arc<Region> {
        &self.inner.region
    }

    /// The region's keys (the same in every entry).
    #[inline]
    pub fn keys(&self) -> Keys {
        self.inner.keys
    }

    /// Free objects (ring plus all caches); a snapshot.
    #[inline]
    pub fn available(&self) -> usize {
        self.inner.sh.available()
    }

    /// Counters summed over the shared path and every cache, readable at any time.
    #[inline]
    pub fn stats(&self) -> PoolStats {
        self.inner.sh.stats()
    }

    /// The side-table entry of `idx`, or `None` when `idx` is not from this pool.
    #[inline]
    pub fn entry(&self, idx: ObjIdx) -> Option<&ObjEntry> {
        let i = self.inner.sh.index_of(idx.0)?;
        self.inner.entries.get(i)
    }

    /// The whole side table, by index.
    #[inline]
    pub fn entries(&self) -> &[ObjEntry] {
        &self.inner.entries
    }

    /// The index of object `index` (for building indices from a side-table row).
    #[inline]
    pub fn idx(&self, index: u32) -> Option<ObjIdx> {
        let t = self.inner.sh.token(index);
        self.inner.sh.index_of(t).map(|_| ObjIdx(t))
    }

    /// Start of the object `idx`, or `None` when `idx` is not from this pool.
    #[inline]
    pub fn ptr(&self, idx: ObjIdx) -> Option<NonNull<u8>> {
        let i = self.inner.sh.index_of(idx.0)?;
        // SAFETY: `i < count`, so the object lies inside the carved range.
        Some(unsafe { self.inner.base.add(i * self.inner.stride) })
    }

    /// The bytes of object `idx`.
    ///
    /// # Safety
    /// The caller must own `idx` (got it from this pool and not yet put it back) and nobody may
    /// write the object while the slice lives.
    #[inline]
    pub unsafe fn bytes(&self, idx: ObjIdx) -> Option<&[u8]> {
        let p = self.ptr(idx)?;
        // SAFETY: in bounds (see `ptr`); exclusivity is the caller's promise.
        Some(unsafe { core::slice::from_raw_parts(p.as_ptr(), self.inner.obj_size) })
    }

    /// The bytes of object `idx`, writable.
    ///
    /// # Safety
    /// The caller must own `idx` exclusively and not create another reference to the object
    /// while this one lives.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, idx: ObjIdx) -> Option<&mut [u8]> {
        let p = self.ptr(idx)?;
        // SAFETY: in bounds (see `ptr`); exclusivity is the caller's promise.
        Some(unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), self.inner.obj_size) })
    }

    /// Takes `out.len()` objects from the shared ring, all or none.
    #[inline]
    pub fn get_bulk(&self, out: &mut [ObjIdx]) -> Result<(), Exhausted> {
        if self.inner.sh.get_bulk(raw_mut(out)) {
            Ok(())
        } else {
            Err(Exhausted)
        }
    }

    /// Takes up to `out.len()` objects from the shared ring into the front of `out`.
    #[inline]
    pub fn get_burst(&self, out: &mut [ObjIdx]) -> usize {
        self.inner.sh.get_burst(raw_mut(out))
    }

    /// Takes one object from the shared ring.
    #[inline]
    pub fn get(&self) -> Option<ObjIdx> {
        let mut one = [ObjIdx(0)];
        (self.get_burst(&mut one) == 1).then_some(one[0])
    }

    /// Returns objects to the shared ring.
    #[inline]
    pub fn put_bulk(&self, objs: &[ObjIdx]) {
        self.inner.sh.put_bulk(raw(objs))
    }

    /// Returns one object to the shared ring.
    #[inline]
    pub fn put(&self, obj: ObjIdx) {
        self.put_bulk(core::slice::from_ref(&obj))
    }

    /// Takes one object from the shared ring as an owned handle.
    #[inline]
    pub fn get_buf(&self) -> Option<PoolBuf> {
        self.get().map(|idx| PoolBuf {
            pool: self.clone(),
            idx,
        })
    }

    /// A per-core cache in front of this pool (claims one of `max_caches` slots; allocates its
    /// array here, never afterwards).
    pub fn cache(&self) -> Result<PoolCache, PoolError> {
        Ok(PoolCache {
            st: CacheState::new(&self.inner.sh)?,
            pool: self.clone(),
            _not_sync: PhantomData,
        })
    }

    #[inline]
    fn same(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A per-core cache of free objects. `Send` (create it anywhere, move it to its core) but not
/// `Sync`: exactly one thread uses it. Dropping it returns its objects to the ring.
pub struct PoolCache {
    st: CacheState,
    pool: Pool,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

impl fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache")
            .field("pool", &self.pool.id())
            .field("len", &self.st.len())
            .field("size", &self.st.size())
            .finish()
    }
}

impl PoolCache {
    /// The pool behind this cache.
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Objects currently in the cache.
    #[inline]
    pub fn len(&self) -> usize {
        self.st.len()
    }

    /// True when the cache holds no objects.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.st.len() == 0
    }

    /// The cache size (level after a refill or a flush).
    #[inline]
    pub fn size(&self) -> usize {
        self.st.size()
    }

    /// The level at which a put flushes the cache down to [`PoolCache::size`] (1.5x size).
    #[inline]
    pub fn flush_threshold(&self) -> usize {
        self.st.flush_threshold()
    }

    /// This cache's counters.
    #[inline]
    pub fn stats(&self) -> PoolStats {
        self.st.stats(&self.pool.inner.sh)
    }

    /// Gets `out.len()` objects, all or none.
    #[inline]
    pub fn get_bulk(&mut self, out: &mut [ObjIdx]) -> Result<(), Exhausted> {
        if self.st.get_bulk(&self.pool.inner.sh, raw_mut(out)) {
            Ok(())
        } else {
            Err(Exhausted)
        }
    }

    /// Gets up to `out.len()` objects into the front of `out`; returns how many.
    #[inline]
    pub fn get_burst(&mut self, out: &mut [ObjIdx]) -> usize {
        self.st.get_burst(&self.pool.inner.sh, raw_mut(out))
    }

    /// Gets one object.
    #[inline]
    pub fn get(&mut self) -> Option<ObjIdx> {
        let mut one = [ObjIdx(0)];
        (self.get_burst(&mut one) == 1).then_some(one[0])
    }

    /// Returns objects.
    #[inline]
    pub fn put_bulk(&mut self, objs: &[ObjIdx]) {
        self.st.put_bulk(&self.pool.inner.sh, raw(objs))
    }

    /// Returns one object.
    #[inline]
    pub fn put(&mut self, obj: ObjIdx) {
        self.put_bulk(core::slice::from_ref(&obj))
    }

    /// Gets one object as an owned handle.
    #[inline]
    pub fn get_buf(&mut self) -> Option<PoolBuf> {
        self.get().map(|idx| PoolBuf {
            pool: self.pool.clone(),
            idx,
        })
    }

    /// Returns an owned handle through this cache (cheaper than dropping it, which goes to the
    /// shared ring). A handle of another pool is simply dropped.
    #[inline]
    pub fn put_buf(&mut self, buf: PoolBuf) {
        if buf.pool.same(&self.pool) {
            let idx = buf.into_raw();
            self.put(idx);
        }
    }

    /// Returns every cached object to the ring.
    pub fn flush(&mut self) {
        self.st.flush(&self.pool.inner.sh)
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        self.st.release(&self.pool.inner.sh)
    }
}

/// An owned object: derefs to its bytes and returns the object to its pool when dropped (to the
/// shared ring, from any thread; [`PoolCache::put_buf`] returns it through a cache instead).
///
/// Holding one keeps the pool and its region alive. Creating and dropping one touches the
/// pool's reference count; hot paths that do their own accounting use raw [`ObjIdx`]es.
pub struct PoolBuf {
    pool: Pool,
    idx: ObjIdx,
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf").field("idx", &self.idx).finish()
    }
}

impl PoolBuf {
    /// The object's index.
    #[inline]
    pub fn idx(&self) -> ObjIdx {
        self.idx
    }

    /// The object's side-table entry.
    #[inline]
    pub fn entry(&self) -> &ObjEntry {
        &self.pool.inner.entries[self.idx.index() as usize]
    }

    /// The pool the object belongs to.
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The object's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let p = self.pool.inner.base.as_ptr();
        // SAFETY: the index is from this pool (so in bounds) and owned by this handle.
        unsafe {
            core::slice::from_raw_parts(
                p.add(self.idx.index() as usize * self.pool.inner.stride),
                self.pool.inner.obj_size,
            )
        }
    }

    /// The object's bytes, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let p = self.pool.inner.base.as_ptr();
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow exclusive.
        unsafe {
            core::slice::from_raw_parts_mut(
                p.add(self.idx.index() as usize * self.pool.inner.stride),
                self.pool.inner.obj_size,
            )
        }
    }

    /// Gives up the handle without returning the object; the caller now owns the index.
    #[inline]
    pub fn into_raw(self) -> ObjIdx {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the pool handle is moved out once.
        drop(unsafe { core::ptr::read(&me.pool) });
        me.idx
    }

    /// Wraps an owned raw index of `pool` into a handle; `None` when `idx` is not from `pool`.
    ///
    /// # Safety
    /// The caller must own `idx` (got from `pool`, not put back, not wrapped twice).
    #[inline]
    pub unsafe fn from_raw(pool: &Pool, idx: ObjIdx) -> Option<PoolBuf> {
        pool.entry(idx)?;
        Some(PoolBuf {
            pool: pool.clone(),
            idx,
        })
    }
}

impl core::ops::Deref for PoolBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl core::ops::DerefMut for PoolBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for PoolBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Drop for PoolBuf {
    #[inline]
    fn drop(&mut self) {
        self.pool.put(self.idx)
    }
}
