//! What every provider's memory registration holds: the keys the device assigned, the
//! registered range and its access rights (what [`MemoryRegion`] reports), next to the
//! provider's own handle, whose drop deregisters. The soft provider's [`SoftMr`] and the rdma
//! provider's `RdmaMr` are [`Region`]s with their handle type.
//!
//! Normal operation: a provider's `Registrar::register` builds the region once; the fields are
//! read-only afterwards (no lock, no atomic).
//!
//! Recovery: nothing to recover; dropping the region drops the handle, which deregisters (the
//! provider's rules for in-flight work apply, see its `Drop`).
//!
//! [`SoftMr`]: super::soft::SoftMr

use super::{Access, Keys, MemoryRegion};

/// A memory registration of a provider: its handle `H` (the provider's deregistration on
/// drop) and the keys, range and rights every provider reports.
pub struct Region<H> {
    handle: H,
    keys: Keys,
    addr: u64,
    len: u64,
    access: Access,
}

impl<H> Region<H> {
    /// A region registered by `handle` with `keys` over `[addr, addr + len)` with `access`.
    pub(crate) fn new(handle: H, keys: Keys, addr: u64, len: u64, access: Access) -> Region<H> {
        Region {
            handle,
            keys,
            addr,
            len,
            access,
        }
    }

    /// The provider's handle.
    pub(crate) fn handle(&self) -> &H {
        &self.handle
    }
}

impl<H: Send + Sync + 'static> MemoryRegion for Region<H> {
    fn keys(&self) -> Keys {
        self.keys
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn access(&self) -> Access {
        self.access
    }
}
