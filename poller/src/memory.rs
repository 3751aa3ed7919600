//! Registered memory for the RPC runtime: per-connection slabs, the endpoint's buffer pool, and
//! the [`HostMemory`] view the connection engine reads and writes through.
//!
//! Normal operation: every connection gets one slab — a mempool [`Region`] registered once
//! with the endpoint's protection domain, without remote rights (`LOCAL_WRITE`, plus `MW_BIND`
//! for a client on a device with type-2 memory windows, see `pool_access`) — and carved into
//! the buffers
//! the engine's [`Pools`] name: send headers, receive buffers, reassembly buffers (server), the
//! zero source and one RPC-header buffer per call record (client). Payloads live in the
//! endpoint's [`BufPool`]: fixed-size [`PoolBuf`]s (arguments, replies, DDP items) that return
//! to their pool when dropped, on any thread. [`HostRegions`] lists the (at most
//! [`MAX_REGIONS`]) regions a connection may touch and implements [`HostMemory`] over them
//! with a bounds check per access.
//!
//! Remote rights: none of the above carries any. Only a client endpoint that opted in to
//! persistent STags ([`PersistentStags::EndpointWide`]) on a device without type-2 windows
//! gets [`Exposure`]s: second registrations with remote rights over its pools (payload: read
//! and write; replies: write) and over each connection's RPC-header buffers (read), whose
//! rkeys [`HostRegions::remote_key`] hands the engine. Local work requests keep using the
//! local-only registrations' lkeys. The reach is in docs/rdma-provider.md.
//!
//! Recovery: an address outside every listed region is refused (`None`), which the engine
//! reports as a bad spec or a failed connection; nothing here panics on such input.

use std::any::Any;
use std::sync::Arc;

use crate::config::PersistentStags;
use rpcrdma_engine::conn::{HostMemory, LocalBuf, Pools};
use rpcrdma_engine::verbs::DeviceCaps;
use rpcrdma_mempool::{
    Access, HugePagePolicy, Pool, PoolBuf, PoolConfig, Region, RegionOptions, Registrar,
};

/// Most regions one connection's memory view spans (its slab + the endpoint pool + spare).
pub const MAX_REGIONS: usize = 5;

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

/// Access rights of the local registration of the endpoint's pools and of client slabs:
/// `LOCAL_WRITE`, plus `MW_BIND` on a device with type-2 memory windows (a window bound per
/// chunk carries the remote right, for one call, on one connection). Never a remote right:
/// a serving endpoint's memory is never exposed (RFC 8166 §3.4, the Read-Write model), and a
/// client's is exposed only through an opted-in [`Exposure`].
pub(crate) fn pool_access(caps: &DeviceCaps) -> Access {
    if caps.mw_type2 {
        Access::LOCAL_WRITE | Access::MW_BIND
    } else {
        Access::LOCAL_WRITE
    }
}

/// Whether an endpoint on a device with `caps` configured with `mode` exposes its memory
/// through persistent STags ([`Exposure`]s): only without type-2 windows, and only opted in.
pub(crate) fn persistent_exposure(caps: &DeviceCaps, mode: PersistentStags) -> bool {
    !caps.mw_type2 && mode == PersistentStags::EndpointWide
}

/// Remote rights of the payload pool's exposure: arguments and DDP items are read (Read
/// chunks), receptacles written (Write chunks). Remote write needs local write (IBTA).
pub(crate) const PAYLOAD_REMOTE: Access =
    Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0);

/// Remote rights of the reply pool's exposure: reply buffers are only written (Reply chunks).
pub(crate) const REPLY_REMOTE: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);

/// Remote rights of a client connection's RPC-header buffers and zero octets: only read
/// (message parts of long calls, position-zero Read chunks).
pub(crate) const HEADER_REMOTE: Access = Access::REMOTE_READ;

/// Access rights for memory that never leaves this side (server slabs, backchannel buffers:
/// the Read-Write model exposes no responder memory, and backward messages carry no chunks).
pub(crate) const LOCAL_ACCESS: Access = Access::LOCAL_WRITE;

/// A second registration, with remote rights, over part of a registered [`Region`]: its rkey
/// is the persistent STag advertised for buffers of that part, while local work requests keep
/// the region's own (local-only) lkey. Deregistered when dropped, before the region can be
/// unmapped (it holds the region).
pub struct Exposure {
    // Field order matters: the registration drops before the region it covers.
    _handle: Box<dyn Any + Send + Sync>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    access: Access,
    _region: Arc<Region>,
}

impl core::fmt::Debug for Exposure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exposure")
            .field("addr", &self.addr)
            .field("len", &self.len)
            .field("rkey", &self.rkey)
            .field("access", &self.access)
            .finish()
    }
}

impl Exposure {
    /// Registers `[off, off + len)` of `region` (registered) with `access`.
    pub(crate) fn new<R: Registrar>(
        reg: &R,
        region: &Arc<Region>,
        off: usize,
        len: usize,
        access: Access,
    ) -> Result<Arc<Exposure>, MemError> {
        let lkey = region
            .keys()
            .ok_or(MemError::Register("region not registered".into()))?
            .lkey;
        if len == 0 || !matches!(off.checked_add(len), Some(e) if e <= region.len()) {
            return Err(MemError::BadSize("exposure outside its region"));
        }
        // SAFETY: `[off, off + len)` lies inside the mapping (checked above), which `_region`
        // keeps mapped for as long as the registration (dropped first) lives; peers with the
        // rkey may read and write it concurrently, which is what the opt-in accepts.
        let (handle, keys) = unsafe { reg.register(region.as_ptr().add(off), len, access) }
            .map_err(|e| MemError::Register(e.to_string()))?;
        Ok(Arc::new(Exposure {
            _handle: Box::new(handle),
            lkey,
            rkey: keys.rkey,
            addr: region.as_ptr() as u64 + off as u64,
            len: len as u64,
            access,
            _region: Arc::clone(region),
        }))
    }

    /// The persistent STag (rkey) peers use.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The exposed range: (start address, length).
    pub fn range(&self) -> (u64, u64) {
        (self.addr, self.len)
    }

    /// The remote rights granted.
    pub fn access(&self) -> Access {
        self.access
    }
}

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
    exposure: Option<Arc<Exposure>>,
}

impl BufPool {
    /// A pool registered with `access` (local rights); when `remote` is given, also exposed
    /// whole with those remote rights ([`Exposure`]).
    pub(crate) fn new<R: Registrar>(
        reg: &R,
        count: usize,
        size: usize,
        hugepages: HugePagePolicy,
        access: Access,
        remote: Option<Access>,
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
        let exposure = match remote {
            Some(a) => Some(Exposure::new(reg, &region, 0, region.len(), a)?),
            None => None,
        };
        let pool = Pool::new(&region, &cfg).map_err(|e| MemError::Pool(e.to_string()))?;
        Ok(BufPool { pool, exposure })
    }

    /// The registration with remote rights over the whole pool, when the endpoint exposes it
    /// (persistent STags, opted in; see [`Exposure`]).
    pub fn exposure(&self) -> Option<&Arc<Exposure>> {
        self.exposure.as_ref()
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
    /// Where the RPC-header buffers start (they and the zero octets are carved last).
    tail: usize,
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
        let tail = region.len() - region.remaining();
        let rpc_headers = carve(l.rpc_headers, l.rpc_header_size)?;
        let zero = carve(1, 64)?[0];
        Ok(Slab {
            region,
            headers,
            recvs,
            data,
            rpc_headers,
            zero,
            tail,
        })
    }

    /// Exposes the RPC-header buffers and the zero octets (the only slab memory a long call
    /// names in its chunks) with `access`; the send headers and receive buffers before them
    /// stay local.
    pub(crate) fn expose_tail<R: Registrar>(
        &self,
        reg: &R,
        access: Access,
    ) -> Result<Arc<Exposure>, MemError> {
        let end = (self.zero.addr - self.region.as_ptr() as u64) as usize + self.zero.len as usize;
        Exposure::new(reg, &self.region, self.tail, end - self.tail, access)
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
    /// The persistent STag of the span's buffers, when they are exposed.
    rkey: Option<u32>,
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
    exposures: Vec<Arc<Exposure>>,
}

impl core::fmt::Debug for HostRegions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostRegions").field("n", &self.n).finish()
    }
}

impl HostRegions {
    /// A view over `regions` (registered; at most [`MAX_REGIONS`], the rest ignored). A
    /// region has a remote key ([`HostMemory::remote_key`]) only when its own registration
    /// carries remote rights, or once an [`Exposure`] of it is added ([`HostRegions::expose`]).
    pub fn new(regions: &[Arc<Region>]) -> HostRegions {
        let mut spans = [Span::default(); MAX_REGIONS];
        let mut n = 0;
        let mut keep = Vec::with_capacity(MAX_REGIONS);
        for r in regions.iter().take(MAX_REGIONS) {
            let keys = r
                .keys()
                .unwrap_or(rpcrdma_mempool::Keys { lkey: 0, rkey: 0 });
            let remote = r.access().is_some_and(|a| a.is_remote());
            spans[n] = Span {
                base: r.as_ptr() as u64,
                len: r.len() as u64,
                lkey: keys.lkey,
                rkey: remote.then_some(keys.rkey),
            };
            keep.push(Arc::clone(r));
            n += 1;
        }
        HostRegions {
            spans,
            n,
            keep,
            exposures: Vec::new(),
        }
    }

    /// Advertises `e`'s rkey for the buffers of the region it covers (matched by lkey; `false`
    /// when no listed region has it). Keeps the exposure registered while the view lives.
    pub fn expose(&mut self, e: &Arc<Exposure>) -> bool {
        let Some(s) = self.spans[..self.n].iter_mut().find(|s| s.lkey == e.lkey) else {
            return false;
        };
        s.rkey = Some(e.rkey);
        self.exposures.push(Arc::clone(e));
        true
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
            .and_then(|s| s.rkey)
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
        // Registered without remote rights: nothing to advertise.
        assert_eq!(m.remote_key(lkey), None);
        assert!(m.remote_key(lkey ^ 0xff).is_none());
        assert!(m.region_by_lkey(lkey).is_some());
    }

    #[test]
    fn accepts_exposure_rkey_only_for_its_region_and_rejects_ranges_outside() {
        let env = SoftEnv::new();
        let pd = env.client_pd();
        let r = registered_region(&pd, 8192, HugePagePolicy::Never, LOCAL_ACCESS).expect("r");
        let other =
            registered_region(&pd, 8192, HugePagePolicy::Never, LOCAL_ACCESS).expect("other");
        let len = r.len();
        assert!(Exposure::new(&pd, &r, 0, 0, HEADER_REMOTE).is_err());
        assert!(Exposure::new(&pd, &r, 1, len, HEADER_REMOTE).is_err());
        assert!(Exposure::new(&pd, &r, usize::MAX, 2, HEADER_REMOTE).is_err());
        let e = Exposure::new(&pd, &r, 4096, len - 4096, HEADER_REMOTE).expect("exposure");
        assert_eq!(e.range(), (r.as_ptr() as u64 + 4096, (len - 4096) as u64));
        let lkey = r.keys().unwrap().lkey;
        assert_ne!(e.rkey(), lkey, "a second registration, a key of its own");
        let mut m = HostRegions::new(&[Arc::clone(&r), Arc::clone(&other)]);
        assert_eq!(m.remote_key(lkey), None);
        assert!(m.expose(&e));
        assert_eq!(m.remote_key(lkey), Some(e.rkey()));
        assert_eq!(m.remote_key(other.keys().unwrap().lkey), None);
        let mut alone = HostRegions::new(&[Arc::clone(&other)]);
        assert!(!alone.expose(&e), "no listed region has its lkey");
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
