//! Ownership of the plain ibverbs objects this provider creates (PD, MR, MW, SRQ, CQ): an
//! [`Owned`] pointer destroys its object exactly once, when dropped, with the object's own
//! destroy call, and carries the thread-safety argument all of them share.
//!
//! Normal operation: a constructor checks the pointer the create call returned
//! ([`Owned::new`]: `None` for null, which the caller turns into the call's errno); the owner
//! reads the pointer with [`Owned::as_ptr`] (no cost beyond the field load).
//!
//! Recovery: nothing to recover; a destroy call's failure cannot be acted on in `Drop` and is
//! ignored, as every ibverbs user does. Dependencies (the PD of an MR, the device of a PD) are
//! kept alive by the owning struct's later fields (`Arc`s), which Rust drops after this one.

use rdma_sys as sys;

/// An ibverbs object type and the call that destroys it.
///
/// # Safety
/// `destroy` must be the object's destroy call (`ibv_dealloc_pd` for `ibv_pd`, ...).
pub(crate) unsafe trait Destroy {
    /// Destroys the object at `p`.
    ///
    /// # Safety
    /// `p` is a live object made by the matching create call, destroyed once, with no object
    /// that depends on it left.
    unsafe fn destroy(p: *mut Self);
}

/// An ibverbs object owned by this process: destroyed once, on drop.
pub(crate) struct Owned<T: Destroy>(*mut T);

// SAFETY: ibverbs objects may be used from any thread (libibverbs' calls are thread-safe); an
// `Owned` only hands out the pointer, and destroys it once, from the thread that drops it.
unsafe impl<T: Destroy> Send for Owned<T> {}
// SAFETY: see Send; shared access only reads the pointer.
unsafe impl<T: Destroy> Sync for Owned<T> {}

impl<T: Destroy> Owned<T> {
    /// Takes ownership of `p` as returned by the object's create call (`None` when null).
    ///
    /// # Safety
    /// `p` is null or a live object of the create call that nobody else destroys.
    pub(crate) unsafe fn new(p: *mut T) -> Option<Owned<T>> {
        if p.is_null() {
            None
        } else {
            Some(Owned(p))
        }
    }

    /// The object.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0
    }
}

impl<T: Destroy> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: made by the create call, destroyed only here; the objects that depend on it
        // hold `Arc`s to its owner, so none is left (see each owner's fields).
        unsafe { T::destroy(self.0) };
    }
}

macro_rules! destroy_with {
    ($($t:ty => $f:ident),* $(,)?) => {$(
        // SAFETY: the object's own destroy call.
        unsafe impl Destroy for $t {
            unsafe fn destroy(p: *mut Self) {
                sys::$f(p);
            }
        }
    )*};
}

destroy_with! {
    sys::ibv_pd => ibv_dealloc_pd,
    sys::ibv_mr => ibv_dereg_mr,
    sys::ibv_mw => ibv_dealloc_mw,
    sys::ibv_srq => ibv_destroy_srq,
    sys::ibv_cq => ibv_destroy_cq,
}
