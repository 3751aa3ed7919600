//! Protection domains, memory regions, type-2 memory windows and shared receive queues.
//!
//! Normal operation: `ibv_alloc_pd`, `ibv_reg_mr` (the [`Registrar`] of the PD),
//! `ibv_alloc_mw(IBV_MW_TYPE_2)` and `ibv_create_srq`; the SRQ batches receives into
//! preallocated arrays and posts them with one `ibv_post_srq_recv`.
//!
//! Recovery: failures return the call's errno; an SRQ post that fails part-way drops the rest
//! of the batch (only the WRs before the failing one were posted and are counted).

use core::ffi::c_int;
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rdma_sys as sys;

use super::cq::SrqAcct;
use super::owned::Owned;
use super::{os_err, ret_err, DeviceInner, Rdma};
use crate::verbs::region::{impl_registrar, Region, RegisterMr, Registered};
use crate::verbs::{
    errno, validate, Access, DeviceCaps, Keys, MemoryWindow, ProtectionDomain, RecvWr, Sge,
    SharedReceiveQueue, VerbsCall, VerbsError,
};

// ---------------------------------------------------------------------------------------------
// PD
// ---------------------------------------------------------------------------------------------

/// The verbs PD (deallocated when the last MR, MW, QP or SRQ of it, each holding an `Arc` to
/// it, is gone), and the device it lives on.
pub(crate) struct PdInner {
    pd: Owned<sys::ibv_pd>,
    dev: Arc<DeviceInner>,
}

impl PdInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_pd {
        self.pd.as_ptr()
    }
}

/// A protection domain (see [`ProtectionDomain`]).
pub struct RdmaPd {
    inner: Arc<PdInner>,
}

impl RdmaPd {
    pub(crate) fn alloc(dev: &Arc<DeviceInner>) -> Result<RdmaPd, VerbsError> {
        // SAFETY: the context is live; the PD is ours.
        let pd = unsafe { Owned::new(sys::ibv_alloc_pd(dev.ctx())) };
        let pd = pd.ok_or_else(|| os_err(VerbsCall::AllocPd))?;
        Ok(RdmaPd {
            inner: Arc::new(PdInner {
                pd,
                dev: Arc::clone(dev),
            }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<PdInner> {
        &self.inner
    }
}

impl RegisterMr for RdmaPd {
    type Handle = RdmaReg;

    fn caps(&self) -> &DeviceCaps {
        self.inner.dev.caps()
    }

    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Registered<RdmaReg> {
        let einval = VerbsError::new(VerbsCall::RegMr, errno::EINVAL);
        if addr.is_null() {
            return Err(einval);
        }
        let access_c = core::ffi::c_int::try_from(access.0).map_err(|_| einval)?;
        // The caller guarantees the memory stays valid while the registration lives.
        let mr = Owned::new(sys::ibv_reg_mr(
            self.inner.raw(),
            addr.cast(),
            len,
            access_c,
        ))
        .ok_or_else(|| os_err(VerbsCall::RegMr))?;
        let keys = Keys {
            lkey: (*mr.as_ptr()).lkey,
            rkey: (*mr.as_ptr()).rkey,
        };
        let handle = RdmaReg {
            mr,
            _pd: Arc::clone(&self.inner),
        };
        Ok((handle, keys))
    }
}

impl_registrar!(RdmaPd => RdmaReg);

impl ProtectionDomain<Rdma> for RdmaPd {
    fn alloc_mw(&self) -> Result<RdmaMw, VerbsError> {
        // SAFETY: the PD is live. rdma-sys returns None when the provider has no alloc_mw op.
        let mw = unsafe { sys::ibv_alloc_mw(self.inner.raw(), sys::ibv_mw_type::IBV_MW_TYPE_2) };
        let Some(mw) = mw else {
            return Err(VerbsError::new(VerbsCall::AllocMw, errno::EOPNOTSUPP));
        };
        // SAFETY: null or a new window of ours.
        let mw = unsafe { Owned::new(mw) }.ok_or_else(|| os_err(VerbsCall::AllocMw))?;
        // SAFETY: mw is live.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        Ok(RdmaMw {
            mw,
            rkey: AtomicU32::new(rkey),
            _pd: Arc::clone(&self.inner),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// MR / MW
// ---------------------------------------------------------------------------------------------

/// A memory registration (see [`MemoryRegion`](crate::verbs::MemoryRegion)); dropping it calls
/// `ibv_dereg_mr`.
pub type RdmaMr = Region<RdmaReg>;

/// The rdma provider's handle of a registration (the `ibv_mr`); dropping it calls
/// `ibv_dereg_mr`.
pub struct RdmaReg {
    /// Immutable after registration; deregistered before the PD is released.
    mr: Owned<sys::ibv_mr>,
    _pd: Arc<PdInner>,
}

impl RdmaMr {
    pub(crate) fn raw(&self) -> *mut sys::ibv_mr {
        self.handle().mr.as_ptr()
    }
}

/// A type-2 memory window (see [`MemoryWindow`]); dropping it calls `ibv_dealloc_mw`.
pub struct RdmaMw {
    /// Only its pointer is read after allocation; deallocated before the PD is released.
    mw: Owned<sys::ibv_mw>,
    /// The key of the last queued bind (ibverbs does not update `mw->rkey` for type-2 binds
    /// posted as work requests).
    rkey: AtomicU32,
    _pd: Arc<PdInner>,
}

impl RdmaMw {
    pub(crate) fn raw(&self) -> *mut sys::ibv_mw {
        self.mw.as_ptr()
    }

    pub(crate) fn set_rkey(&self, rkey: u32) {
        // Release: pairs with the Acquire load in `rkey`.
        self.rkey.store(rkey, Ordering::Release);
    }
}

impl MemoryWindow for RdmaMw {
    fn rkey(&self) -> u32 {
        // Acquire: pairs with the Release store in `set_rkey`.
        self.rkey.load(Ordering::Acquire)
    }
}

// ---------------------------------------------------------------------------------------------
// SRQ
// ---------------------------------------------------------------------------------------------

/// Preallocated receive work requests and their SGEs (one batch).
pub(crate) struct RecvBatch {
    wrs: Box<[sys::ibv_recv_wr]>,
    sges: Box<[sys::ibv_sge]>,
    stride: usize,
    max_sge: u32,
    len: usize,
}

impl RecvBatch {
    pub(crate) fn new(depth: u32, max_sge: u32) -> RecvBatch {
        let stride = (max_sge as usize).max(1);
        let n = depth as usize;
        RecvBatch {
            wrs: zeroed(n),
            sges: zeroed(n * stride),
            stride,
            max_sge,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.wrs.len()
    }

    /// Appends `wr` (the caller checked the capacity and depth).
    pub(crate) fn push(&mut self, wr: &RecvWr<'_>, call: VerbsCall) -> Result<(), VerbsError> {
        validate::recv_wr(wr, self.max_sge, call)?;
        if self.len >= self.wrs.len() {
            return Err(VerbsError::new(call, errno::ENOMEM));
        }
        let i = self.len;
        let base = i * self.stride;
        fill_sges(&mut self.sges[base..base + wr.sgl.len()], wr.sgl);
        let sg_list = if wr.sgl.is_empty() {
            core::ptr::null_mut()
        } else {
            &mut self.sges[base] as *mut sys::ibv_sge
        };
        let w = &mut self.wrs[i];
        w.wr_id = wr.wr_id;
        w.sg_list = sg_list;
        w.num_sge = wr.sgl.len() as i32;
        w.next = core::ptr::null_mut();
        self.len += 1;
        Ok(())
    }

    /// Posts the batch as one chain with `post` (`call`: `ibv_post_recv` or
    /// `ibv_post_srq_recv` of the chain's head, setting the bad-WR pointer), adds the WRs
    /// posted to `posted` (those before the bad one when the call failed) and clears the batch.
    /// `None` when the batch is empty (nothing posted, no doorbell); otherwise the call's
    /// outcome.
    pub(crate) fn post(
        &mut self,
        call: VerbsCall,
        posted: &mut u64,
        post: impl FnOnce(*mut sys::ibv_recv_wr, &mut *mut sys::ibv_recv_wr) -> c_int,
    ) -> Option<Result<(), VerbsError>> {
        let head = self.link();
        if head.is_null() {
            return None;
        }
        let mut bad: *mut sys::ibv_recv_wr = core::ptr::null_mut();
        let rc = post(head, &mut bad);
        *posted += self.finish(rc == 0, bad) as u64;
        Some(if rc == 0 {
            Ok(())
        } else {
            Err(ret_err(call, rc))
        })
    }

    /// Links the batch and returns its head (null when empty).
    pub(crate) fn link(&mut self) -> *mut sys::ibv_recv_wr {
        link(&mut self.wrs, self.len)
    }

    /// How many WRs of the batch before `bad` were posted (all if `bad` is null), and clears
    /// the batch.
    pub(crate) fn finish(&mut self, ok: bool, bad: *mut sys::ibv_recv_wr) -> usize {
        let n = self.len;
        self.len = 0;
        if ok {
            return n;
        }
        index_of(self.wrs.as_ptr(), bad, n)
    }
}

/// A C struct of integers, raw pointers and unions of those, for which all zeroes is a valid
/// value (a work request or an SGE before it is filled in).
///
/// # Safety
/// All zeroes must be a valid value of the type.
pub(crate) unsafe trait Zeroable {}

// SAFETY: plain old data (integers, raw pointers and unions of those).
unsafe impl Zeroable for sys::ibv_send_wr {}
// SAFETY: as above.
unsafe impl Zeroable for sys::ibv_recv_wr {}
// SAFETY: as above.
unsafe impl Zeroable for sys::ibv_sge {}

/// `n` zeroed values (the preallocated arrays of a batch; control path).
pub(crate) fn zeroed<T: Zeroable>(n: usize) -> Box<[T]> {
    // SAFETY: all zeroes is a valid T (`Zeroable`).
    (0..n).map(|_| unsafe { core::mem::zeroed() }).collect()
}

/// Copies a work request's scatter/gather list into its slots of a batch's `ibv_sge` array
/// (`dst` has one slot per entry of `sgl`).
#[inline]
pub(crate) fn fill_sges(dst: &mut [sys::ibv_sge], sgl: &[Sge]) {
    for (d, s) in dst.iter_mut().zip(sgl) {
        d.addr = s.addr;
        d.length = s.len;
        d.lkey = s.lkey;
    }
}

/// A work request `ibv_post_send` / `ibv_post_recv` walks by its `next` pointer.
pub(crate) trait Chained: Sized {
    /// Sets the pointer to the next WR of the chain (null: the last).
    fn set_next(&mut self, next: *mut Self);
}

impl Chained for sys::ibv_send_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl Chained for sys::ibv_recv_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Links the first `n` WRs of `wrs` (`n <= wrs.len()`) into one chain; returns its head (null
/// when `n` is 0).
pub(crate) fn link<T: Chained>(wrs: &mut [T], n: usize) -> *mut T {
    debug_assert!(n <= wrs.len());
    if n == 0 {
        return core::ptr::null_mut();
    }
    let base = wrs.as_mut_ptr();
    for i in 0..n {
        let next = if i + 1 < n {
            // SAFETY: i + 1 < n <= wrs.len(); the pointer stays inside the slice.
            unsafe { base.add(i + 1) }
        } else {
            core::ptr::null_mut()
        };
        // SAFETY: i < n <= wrs.len(); `base` is the slice's only pointer in use here.
        unsafe { (*base.add(i)).set_next(next) };
    }
    base
}

/// Index of `bad` in the array at `base` (clamped to `n`; `n` is not returned for null, 0 is).
pub(crate) fn index_of<T>(base: *const T, bad: *const T, n: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    let off = (bad as usize).wrapping_sub(base as usize) / core::mem::size_of::<T>().max(1);
    off.min(n)
}

/// The verbs SRQ, kept alive by the SRQ handle and by every QP attached to it.
/// Destroyed when the handle and every QP attached to it (each holding an `Arc`) are gone;
/// posting is serialized by `&mut RdmaSrq`.
pub(crate) struct SrqInner {
    srq: Owned<sys::ibv_srq>,
    acct: Arc<SrqAcct>,
    _pd: Arc<PdInner>,
}

impl SrqInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_srq {
        self.srq.as_ptr()
    }

    pub(crate) fn acct(&self) -> &Arc<SrqAcct> {
        &self.acct
    }
}

/// A shared receive queue (see [`SharedReceiveQueue`]).
pub struct RdmaSrq {
    inner: Arc<SrqInner>,
    batch: RecvBatch,
    max_wr: u32,
    posted: u64,
    doorbells: u64,
}

// SAFETY: the SRQ is posted to through &mut self only; the raw pointers in `batch` point into
// its own boxes.
unsafe impl Send for RdmaSrq {}

impl RdmaSrq {
    pub(crate) fn create(
        dev: &Arc<DeviceInner>,
        pd: &RdmaPd,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<RdmaSrq, VerbsError> {
        let caps = dev.caps();
        if caps.max_srq == 0 {
            return Err(VerbsError::new(VerbsCall::CreateSrq, errno::EOPNOTSUPP));
        }
        validate::srq(max_wr, max_sge, caps)?;
        // SAFETY: plain old data.
        let mut attr: sys::ibv_srq_init_attr = unsafe { core::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge.max(1);
        // SAFETY: the PD is live; attr is initialized.
        let srq = unsafe { Owned::new(sys::ibv_create_srq(pd.inner().raw(), &mut attr)) };
        let srq = srq.ok_or_else(|| os_err(VerbsCall::CreateSrq))?;
        Ok(RdmaSrq {
            inner: Arc::new(SrqInner {
                srq,
                acct: Arc::new(SrqAcct::default()),
                _pd: Arc::clone(pd.inner()),
            }),
            batch: RecvBatch::new(max_wr, max_sge),
            max_wr,
            posted: 0,
            doorbells: 0,
        })
    }

    pub(crate) fn inner(&self) -> &Arc<SrqInner> {
        &self.inner
    }
}

impl SharedReceiveQueue for RdmaSrq {
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        // Acquire: pairs with the Release fetch_add in QpAcct::on_recv_completion.
        let done = self.inner.acct.completed.load(Ordering::Acquire);
        let outstanding = self.posted.saturating_sub(done);
        if outstanding + self.batch.len() as u64 + 1 > u64::from(self.max_wr) {
            return Err(VerbsError::new(VerbsCall::PostSrqRecv, errno::ENOMEM));
        }
        self.batch.push(wr, VerbsCall::PostSrqRecv)
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        let srq = self.inner.raw();
        // SAFETY: the SRQ is live; the chain lives in self.batch until the call returns.
        let post = |head, bad: &mut _| unsafe { sys::ibv_post_srq_recv(srq, head, bad) };
        let res = self
            .batch
            .post(VerbsCall::PostSrqRecv, &mut self.posted, post);
        self.doorbells += u64::from(res.is_some());
        res.unwrap_or(Ok(()))
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }
}
