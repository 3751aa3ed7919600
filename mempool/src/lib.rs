//! rpcrdma-mempool: hugepage regions and fixed-size object pools with per-core caches.
//!
//! This crate knows memory, not RDMA: no protocol, no threads.
//!
//! - [`Region`]: one anonymous mapping, hugepage-backed when possible ([`HugePagePolicy`]),
//!   locked, registered once through a [`Registrar`]; its rkey is the region's persistent STag.
//! - [`Pool`]: `count` fixed-size objects carved from a registered region, with a side table
//!   ([`ObjEntry`]), a lock-free shared ring of free indices and per-core caches
//!   ([`PoolCache`], DPDK `rte_mempool` style); [`PoolBuf`] is the owned handle.
//!
//! After creation (regions, pools, caches) no operation allocates.
#![warn(missing_docs)]

mod index_pool;
pub mod pool;
pub mod reg;
pub mod region;
mod ring;

pub use index_pool::{Exhausted, PoolError, PoolStats, MAX_CACHES, MAX_CACHE_SIZE, MAX_COUNT};
pub use pool::{ObjEntry, ObjIdx, Pool, PoolBuf, PoolCache, PoolConfig};
pub use reg::{Access, Keys, Registrar};
pub use region::{
    HugePagePolicy, HugePageShortfall, HugePageSize, PageKind, Region, RegionError, RegionOptions,
    RegisterError,
};
