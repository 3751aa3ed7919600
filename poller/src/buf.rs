//! Registered memory for the RPC runtime: per-connection slabs, the endpoint's buffer pool, and
//! the [`HostMemory`] view the connection engine reads and writes through.
//!
//! Normal operation: every connection gets one slab — a mempool [`Region`] registered once
//! with the endpoint's protection domain (`LOCAL_WRITE | MW_BIND`; a client's on a device
//! without memory windows: `LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE`, see [`exposable_access`])
//! and carved into the buffers
//! the engine's [`Pools`] name: send headers, receive buffers, reassembly buffers (server), the
//! zero source and one RPC-header buffer per call record (client). Payloads live in the
//! endpoint's [`BufPool`]: fixed-size [`PoolBuf`]s (arguments, replies, DDP items) that return
//! to their pool when dropped, on any thread. [`HostRegions`] lists the (at most
//! [`MAX_REGIONS`]) regions a connection may touch and implements [`HostMemory`] over them
//! with a bounds check per access.
//!
//! Recovery: an address outside every listed region is refused (`None`), which the engine
//! reports as a bad spec or a failed connection; nothing here panics on such input.

use std::sync::Arc;

use rpcrdma_engine::conn::{HostMemory, LocalBuf, Pools};
use rpcrdma_engine::verbs::DeviceCaps;
use rpcrdma_mempool::{
    Access, HugePagePolicy, Pool, PoolBuf, PoolConfig, Region, RegionOptions, Registrar,
};

/// Most regions one connection's memory view spans (its slab + the endpoint pool + spare).
pub const MAX_REGIONS: usize = 4;

/// Alignment of every carved buffer.
const ALIGN: usize = 64;

/// Errors creating registered memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemError {
    /// Mapping the region failed (message from mempool).
    Region(String),
    /// Registering the region failed (message from the provider).
    Register(String),
    /// A pool could not be built.
    Pool(String),
    /// A size or count is zero or too large.
    BadSize(&'static str),
}

impl core::fmt::Display for MemError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MemError::Region(m) => write!(f, "region: {m}"),
            MemError::Register(m) => write!(f, "registration: {m}"),
            MemError::Pool(m) => write!(f, "pool: {m}"),
            MemError::BadSize(w) => write!(f, "bad size: {w}"),
        }
    }
}

impl std::error::Error for MemError {}

/// Access rights for memory a client may expose in chunks: memory windows are bound over it
/// per call (`MW_BIND`), or, on a device without type-2 memory windows, its persistent STag is
/// advertised, so the registration itself carries the remote rights (the whole region is then
/// reachable by the peer for as long as it is registered: see docs/rdma-provider.md).
pub(crate) fn exposable_access(caps: &DeviceCaps) -> Access {
    if caps.mw_type2 {
        Access::LOCAL_WRITE | Access::MW_BIND
    } else {
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
    }
}

/// Access rights for memory that never leaves this side (server slabs, backchannel buffers:
/// the Read-Write model exposes no responder memory).
pub(crate) const LOCAL_ACCESS: Access = Access::LOCAL_WRITE;

/// Maps and registers a region of at least `len` octets with `access`.
pub(crate) fn registered_region<R: Registrar>(
    reg: &R,
    len: usize,
    hugepages: HugePagePolicy,
    access: Access,
) -> Result<Arc<Region>, MemError> {
    let opts = RegionOptions {
        hugepages,
        ..RegionOptions::default()
    };
    let region = Region::new(len.max(4096), &opts).map_err(|e| MemError::Region(e.to_string()))?;
    region
        .register(reg, access)
        .map_err(|e| MemError::Register(e.to_string()))?;
    Ok(Arc::new(region))
}

/// The [`LocalBuf`] covering the first `len` octets of `buf` (clamped to its size).
#[inline]
pub fn local_buf(buf: &PoolBuf, len: usize) -> LocalBuf {
    let e = buf.entry();
    LocalBuf::new(e.addr, (len.min(e.len as usize)) as u32, e.lkey)
}

/// The endpoint's payload pool: fixed-size registered buffers for arguments, replies and DDP
/// items. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct BufPool {
    pool: Pool,
}

impl BufPool {
    pub(crate) fn new<R: Registrar>(
        reg: &R,
        count: usize,
        size: usize,
        hugepages: HugePagePolicy,
        access: Access,
    ) -> Result<BufPool, MemError> {
        if count == 0 || size == 0 || size > u32::MAX as usize {
            return Err(MemError::BadSize("buffer pool count/size"));
        }
        let mut cfg = PoolConfig::new(count, size);
        cfg.cache_size = 64.min(count);
        cfg.max_caches = 256;
        let len = cfg
            .region_len()
            .ok_or(MemError::BadSize("buffer pool too large"))?;
        let region = registered_region(reg, len, hugepages, access)?;
        let pool = Pool::new(&region, &cfg).map_err(|e| MemError::Pool(e.to_string()))?;
        Ok(BufPool { pool })
    }

    /// A buffer from the shared ring (any thread), or `None` when all are in use.
    #[inline]
    pub fn get(&self) -> Option<PoolBuf> {
        self.pool.get_buf()
    }

    /// Size of every buffer.
    #[inline]
    pub fn buf_size(&self) -> usize {
        self.pool.obj_size()
    }

    /// Buffers free now.
    pub fn available(&self) -> usize {
        self.pool.available()
    }

    /// Buffers in the pool.
    pub fn count(&self) -> usize {
        self.pool.count()
    }

    /// The underlying mempool pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn region(&self) -> &Arc<Region> {
        self.pool.region()
    }
}

/// How a connection's slab is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlabLayout {
    /// Send header slots (= call slots) and their size.
    pub headers: usize,
    pub header_size: u32,
    /// Receive buffers and their size.
    pub recvs: usize,
    pub recv_size: u32,
    /// Reassembly buffers (server) and their size.
    pub data: usize,
    pub data_size: u32,
    /// RPC header buffers (client call records) and their size.
    pub rpc_headers: usize,
    pub rpc_header_size: u32,
}

impl SlabLayout {
    fn total(&self) -> Option<usize> {
        let round = |n: usize| n.checked_add(ALIGN - 1).map(|v| v & !(ALIGN - 1));
        let part = |n: usize, s: u32| round(s as usize).and_then(|s| s.checked_mul(n));
        part(self.headers, self.header_size)?
            .checked_add(part(self.recvs, self.recv_size)?)?
            .checked_add(part(self.data, self.data_size)?)?
            .checked_add(part(self.rpc_headers, self.rpc_header_size)?)?
            .checked_add(ALIGN * 2)
    }
}

/// One connection's registered memory, carved per [`SlabLayout`].
pub(crate) struct Slab {
    pub region: Arc<Region>,
    pub headers: Vec<LocalBuf>,
    pub recvs: Vec<LocalBuf>,
    pub data: Vec<LocalBuf>,
    pub rpc_headers: Vec<LocalBuf>,
    pub zero: LocalBuf,
}

impl Slab {
    pub(crate) fn new<R: Registrar>(
        reg: &R,
        l: &SlabLayout,
        hugepages: HugePagePolicy,
        access: Access,
    ) -> Result<Slab, MemError> {
        let total = l.total().ok_or(MemError::BadSize("slab too large"))?;
        let region = registered_region(reg, total, hugepages, access)?;
        let lkey = region.keys().map(|k| k.lkey).unwrap_or(0);
        let base = region.as_ptr() as u64;
        let carve = |n: usize, size: u32| -> Result<Vec<LocalBuf>, MemError> {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let off = region
                    .carve(size.max(1) as usize, ALIGN)
                    .map_err(|e| MemError::Region(e.to_string()))?;
                v.push(LocalBuf::new(base + off as u64, size, lkey));
            }
            Ok(v)
        };
        let headers = carve(l.headers, l.header_size)?;
        let recvs = carve(l.recvs, l.recv_size)?;
        let data = carve(l.data, l.data_size)?;
        let rpc_headers = carve(l.rpc_headers, l.rpc_header_size)?;
        let zero = carve(1, 64)?[0];
        Ok(Slab {
            region,
            headers,
            recvs,
            data,
            rpc_headers,
            zero,
        })
    }

    /// The engine's view of the slab (memory windows given separately).
    pub(crate) fn pools<'a>(&'a self, mws: &'a [u32]) -> Pools<'a> {
        Pools {
            headers: &self.headers,
            recvs: &self.recvs,
            data: &self.data,
            mws,
            zero: self.zero,
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Span {
    base: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

/// The registered regions one connection may touch, as the engine's [`HostMemory`].
///
/// Accesses are checked against the spans (first match wins; at most [`MAX_REGIONS`]). The
/// slices handed out alias memory the NIC (or the soft provider's posting thread) writes only
/// while the engine owns no reference to it: receive buffers between post and completion, and
/// reply/receptacle buffers between the call's start and its completion.
pub struct HostRegions {
    spans: [Span; MAX_REGIONS],
    n: usize,
    keep: Vec<Arc<Region>>,
}

impl core::fmt::Debug for HostRegions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostRegions").field("n", &self.n).finish()
    }
}

impl HostRegions {
    /// A view over `regions` (registered; at most [`MAX_REGIONS`], the rest ignored).
    pub fn new(regions: &[Arc<Region>]) -> HostRegions {
        let mut spans = [Span::default(); MAX_REGIONS];
        let mut n = 0;
        let mut keep = Vec::with_capacity(MAX_REGIONS);
        for r in regions.iter().take(MAX_REGIONS) {
            let keys = r
                .keys()
                .unwrap_or(rpcrdma_mempool::Keys { lkey: 0, rkey: 0 });
            spans[n] = Span {
                base: r.as_ptr() as u64,
                len: r.len() as u64,
                lkey: keys.lkey,
                rkey: keys.rkey,
            };
            keep.push(Arc::clone(r));
            n += 1;
        }
        HostRegions { spans, n, keep }
    }

    #[inline]
    fn find(&self, addr: u64, len: usize) -> bool {
        self.spans[..self.n].iter().any(|s| {
            addr >= s.base
                && (addr - s.base)
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= s.len)
        })
    }

    /// The region whose local key is `lkey`.
    pub fn region_by_lkey(&self, lkey: u32) -> Option<&Arc<Region>> {
        let i = self.spans[..self.n].iter().position(|s| s.lkey == lkey)?;
        self.keep.get(i)
    }
}

impl HostMemory for HostRegions {
    #[inline]
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.find(addr, len) {
            return None;
        }
        // SAFETY: inside a mapped region kept alive by `keep`; the engine only reads memory it
        // owns at that moment (see the type's documentation).
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
    }

    #[inline]
    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.find(addr, len) {
            return None;
        }
        // SAFETY: as in `bytes`; `&mut self` keeps the engine's own views from overlapping.
        Some(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
    }

    fn remote_key(&self, lkey: u32) -> Option<u32> {
        self.spans[..self.n]
            .iter()
            .find(|s| s.lkey == lkey)
            .map(|s| s.rkey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_engine::verbs::soft::SoftEnv;

    #[test]
    fn rejects_access_outside_registered_regions() {
        let env = SoftEnv::new();
        let pd = env.client_pd();
        let r = registered_region(
            &pd,
            8192,
            HugePagePolicy::Never,
            LOCAL_ACCESS | Access::MW_BIND,
        )
        .expect("region");
        let base = r.as_ptr() as u64;
        let len = r.len();
        let mut m = HostRegions::new(&[Arc::clone(&r)]);
        assert!(m.bytes(base, len).is_some());
        assert!(m.bytes(base + len as u64 - 4, 4).is_some());
        assert!(m.bytes(base + len as u64 - 4, 5).is_none());
        assert!(m.bytes(base - 1, 1).is_none());
        assert!(m.bytes_mut(u64::MAX - 2, 8).is_none());
        m.bytes_mut(base, 4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(m.bytes(base, 4).unwrap(), &[1, 2, 3, 4]);
        let lkey = r.keys().unwrap().lkey;
        assert_eq!(m.remote_key(lkey), r.persistent_stag());
        assert!(m.remote_key(lkey ^ 0xff).is_none());
        assert!(m.region_by_lkey(lkey).is_some());
    }

    #[test]
    fn accepts_slab_layout_inside_its_region() {
        let env = SoftEnv::new();
        let pd = env.client_pd();
        let l = SlabLayout {
            headers: 4,
            header_size: 1024,
            recvs: 6,
            recv_size: 1024,
            data: 2,
            data_size: 5000,
            rpc_headers: 3,
            rpc_header_size: 128,
        };
        let s = Slab::new(&pd, &l, HugePagePolicy::Never, LOCAL_ACCESS).expect("slab");
        let m = HostRegions::new(&[Arc::clone(&s.region)]);
        let all = s
            .headers
            .iter()
            .chain(&s.recvs)
            .chain(&s.data)
            .chain(&s.rpc_headers)
            .chain(core::iter::once(&s.zero));
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for b in all {
            assert!(m.bytes(b.addr, b.len as usize).is_some(), "{b:?} outside");
            assert_eq!(b.addr % 64, 0);
            spans.push((b.addr, b.addr + u64::from(b.len)));
        }
        spans.sort();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "buffers overlap"
        );
        assert_eq!(
            s.headers.len() + s.recvs.len() + s.data.len() + s.rpc_headers.len(),
            15
        );
    }
}
