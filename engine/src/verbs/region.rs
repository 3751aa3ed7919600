//! What every provider's memory registration holds: the keys the device assigned, the
//! registered range and its access rights (what [`MemoryRegion`] reports), next to the
//! provider's own handle, whose drop deregisters. The soft provider's [`SoftMr`] and the rdma
//! provider's `RdmaMr` are [`Region`]s with their handle type. Also the registration steps
//! both providers share (`ibv_reg_mr`: the argument checks of [`validate::reg_mr`], the
//! provider's own call, the region): a PD implements `RegisterMr` (its own part) and
//! `impl_registrar!` writes its [`Registrar`] impl around `register`.
//!
//! Normal operation: a provider's `Registrar::register` builds the region once; the fields are
//! read-only afterwards (no lock, no atomic).
//!
//! Recovery: nothing to recover; dropping the region drops the handle, which deregisters (the
//! provider's rules for in-flight work apply, see its `Drop`).
//!
//! [`SoftMr`]: super::soft::SoftMr

use super::{validate, Access, DeviceCaps, Keys, MemoryRegion, VerbsError};
#[cfg(doc)]
use rpcrdma_mempool::Registrar;

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

/// What a provider's own registration call returns: its handle and the keys assigned.
pub(crate) type Registered<H> = Result<(H, Keys), VerbsError>;

/// A provider's own part of a memory registration (`ibv_reg_mr`); the shared part is
/// [`register`].
pub(crate) trait RegisterMr {
    /// The provider's registration handle (dropping it deregisters).
    type Handle;
    /// The capabilities of the PD's device (the limits [`validate::reg_mr`] checks).
    fn caps(&self) -> &DeviceCaps;
    /// The provider's own checks and its device call for `len` octets at `addr` with `access`
    /// (already checked by [`validate::reg_mr`]): the handle and the keys assigned.
    ///
    /// # Safety
    /// As [`Registrar::register`]: the memory stays valid while the registration lives.
    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Registered<Self::Handle>;
}

/// `Registrar::register` of every provider's PD: [`validate::reg_mr`], then the provider's
/// [`RegisterMr::reg_mr`], then the [`Region`] and its keys.
///
/// # Safety
/// As [`Registrar::register`].
pub(crate) unsafe fn register<R: RegisterMr>(
    pd: &R,
    addr: *mut u8,
    len: usize,
    access: Access,
) -> Result<(Region<R::Handle>, Keys), VerbsError> {
    validate::reg_mr(len as u64, access, pd.caps())?;
    let (handle, keys) = pd.reg_mr(addr, len, access)?;
    Ok((
        Region::new(handle, keys, addr as u64, len as u64, access),
        keys,
    ))
}

/// Implements `Registrar` for a provider's PD type `$pd` (which implements [`RegisterMr`] with
/// `Handle = $h`): its registrations are [`Region`]s of its handle, built by [`register`].
macro_rules! impl_registrar {
    ($pd:ty => $h:ty) => {
        impl $crate::verbs::Registrar for $pd {
            type Registration = $crate::verbs::region::Region<$h>;
            type Error = $crate::verbs::VerbsError;

            unsafe fn register(
                &self,
                addr: *mut u8,
                len: usize,
                access: $crate::verbs::Access,
            ) -> Result<(Self::Registration, $crate::verbs::Keys), Self::Error> {
                $crate::verbs::region::register(self, addr, len, access)
            }
        }
    };
}
pub(crate) use impl_registrar;
