//! The soft device's key table (its "memory protection table"): memory regions and type-2
//! memory windows share one fixed-size, lock-free table indexed by `key >> 8`; the low key byte
//! is the generation, so a stale key never matches a reused slot (until 256 reuses, as on
//! hardware with 8-bit keys).
//!
//! Normal operation: registration / window allocation take a slot from a free list (control
//! path, a mutex). Work requests *pin* the slots they touch (an in-flight user count) after
//! checking key, PD, rights and bounds; copies run while pinned.
//!
//! Recovery: deregistration and invalidation flip the slot's state word first and then wait for
//! the pins to drain, so once they return no copy through the old key is in flight and none can
//! start (the SeqCst store/load pair on `state` and `users` is a Dekker-style handshake).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::DeviceInner;
use crate::verbs::region::{impl_registrar, Region, RegisterMr, Registered};
use crate::verbs::{
    errno, inc_rkey, validate, Access, DeviceCaps, Keys, MemoryRegion, MemoryWindow,
    ProtectionDomain, VerbsCall, VerbsError,
};

/// Maximum scatter/gather entries per work request in the soft provider.
pub(crate) const MAX_SGE: usize = 16;

const KEY_MASK: u64 = 0xffff_ffff;
const VALID: u64 = 1 << 32;
const BUSY: u64 = 1 << 33;
const KIND_SHIFT: u32 = 34;
const KIND_MASK: u64 = 3 << KIND_SHIFT;
const KIND_MR: u64 = 1 << KIND_SHIFT;
const KIND_MW: u64 = 2 << KIND_SHIFT;

/// One protection-table entry.
#[derive(Default)]
pub(crate) struct KeySlot {
    /// key (low 32 bits) | VALID | BUSY | kind.
    state: AtomicU64,
    /// Work requests currently copying through this entry.
    users: AtomicU32,
    pd: AtomicU32,
    access: AtomicU32,
    /// MW: the QP the window is bound to.
    qp_num: AtomicU32,
    /// MW: slot index of the region the window is bound over.
    parent: AtomicU32,
    /// MR: windows currently bound over the region.
    mw_bound: AtomicU32,
    addr: AtomicU64,
    len: AtomicU64,
}

/// A slot pinned by an in-flight work request; unpins on drop.
pub(crate) struct Pin<'a>(&'a KeySlot);

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        // Release: our copies happen-before the waiter (dereg / invalidate) that observes 0.
        self.0.users.fetch_sub(1, Ordering::Release);
    }
}

/// Why a bind failed (all map to `MW_BIND_ERR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindError;

/// Parameters of a type-2 bind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BindReq {
    pub mw_index: u32,
    /// The window's key when the bind was queued (must still be current).
    pub mw_key: u32,
    pub new_key: u32,
    pub mr_lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    pub pd: u32,
    pub qp_num: u32,
}

/// The device's key table.
pub(crate) struct KeyTable {
    slots: Box<[KeySlot]>,
    free: Mutex<Vec<u32>>,
}

#[inline]
fn wait_unpinned(slot: &KeySlot) {
    let backoff = crossbeam_utils::Backoff::new();
    // SeqCst: pairs with the SeqCst `users.fetch_add` + `state.load` of a pinner.
    while slot.users.load(Ordering::SeqCst) != 0 {
        backoff.snooze();
    }
}

impl KeyTable {
    /// A table with `entries` slots (slot 0 is never used, so key 0 is never valid).
    pub(crate) fn new(entries: u32) -> KeyTable {
        let n = entries.clamp(2, 1 << 24) as usize;
        let slots: Box<[KeySlot]> = (0..n)
            .map(|i| {
                let s = KeySlot::default();
                // Initial generation byte varies per slot, so keys of a fresh table differ
                // from their index<<8.
                let key = ((i as u64) << 8) | ((i as u64).wrapping_mul(0x9d) & 0xff);
                s.state.store(key, Ordering::Relaxed);
                s
            })
            .collect();
        let free: Vec<u32> = (1..n as u32).rev().collect();
        KeyTable {
            slots,
            free: Mutex::new(free),
        }
    }

    fn slot(&self, key: u32) -> Option<&KeySlot> {
        let idx = (key >> 8) as usize;
        if idx == 0 {
            return None;
        }
        self.slots.get(idx)
    }

    fn alloc(&self) -> Option<u32> {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn release(&self, idx: u32) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(idx);
    }

    /// Registers a region; returns its key (lkey == rkey).
    pub(crate) fn register(&self, pd: u32, addr: u64, len: u64, access: Access) -> Option<u32> {
        let idx = self.alloc()?;
        let s = &self.slots[idx as usize];
        let old = s.state.load(Ordering::Relaxed);
        let key = inc_rkey((old & KEY_MASK) as u32);
        s.pd.store(pd, Ordering::Relaxed);
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        s.addr.store(addr, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.access.store(access.0, Ordering::Relaxed);
        s.mw_bound.store(0, Ordering::Relaxed);
        // SeqCst publish: pairs with a pinner's SeqCst load; the field stores above are visible
        // to anyone who sees VALID.
        s.state
            .store(key as u64 | VALID | KIND_MR, Ordering::SeqCst);
        Some(key)
    }

    /// Deregisters a region: invalidates its key, waits for in-flight copies, invalidates the
    /// windows still bound over it, frees the slot.
    pub(crate) fn deregister(&self, key: u32) {
        let Some(s) = self.slot(key) else { return };
        let idx = key >> 8;
        // SeqCst: the Dekker half paired with pinners (see module doc).
        s.state.store(key as u64 | KIND_MR, Ordering::SeqCst);
        wait_unpinned(s);
        // Acquire: pairs with the AcqRel increment by a bind that pinned this region.
        if s.mw_bound.load(Ordering::Acquire) != 0 {
            for w in self.slots.iter() {
                let st = w.state.load(Ordering::Acquire);
                if st & KIND_MASK == KIND_MW
                    && st & VALID != 0
                    && w.parent.load(Ordering::Relaxed) == idx
                {
                    self.invalidate_slot(w, st);
                }
            }
        }
        self.release(idx);
    }

    /// Allocates an unbound type-2 window in `pd`; returns its initial key.
    pub(crate) fn alloc_mw(&self, pd: u32) -> Option<u32> {
        let idx = self.alloc()?;
        let s = &self.slots[idx as usize];
        let old = s.state.load(Ordering::Relaxed);
        let key = inc_rkey((old & KEY_MASK) as u32);
        s.pd.store(pd, Ordering::Relaxed);
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        s.access.store(0, Ordering::Relaxed);
        s.addr.store(0, Ordering::Relaxed);
        s.len.store(0, Ordering::Relaxed);
        // Release: the fields above are in place before a bind can claim the slot.
        s.state.store(key as u64 | KIND_MW, Ordering::Release);
        Some(key)
    }

    /// Frees a window (invalidating it if bound).
    /// Type-2 windows currently bound (valid) to QP `qp_num` (control path: scans the table).
    pub(crate) fn windows_bound_to(&self, qp_num: u32) -> u64 {
        self.slots
            .iter()
            .filter(|s| {
                // Acquire: pairs with the bind's SeqCst publish, so `qp_num` is current.
                let st = s.state.load(Ordering::Acquire);
                // Relaxed: slot fields are ordered by the `state` word (see module doc).
                st & KIND_MASK == KIND_MW
                    && st & VALID != 0
                    && s.qp_num.load(Ordering::Relaxed) == qp_num
            })
            .count() as u64
    }

    /// What the table holds now (control path: scans every slot; a snapshot, not atomic
    /// across slots).
    pub(crate) fn usage(&self) -> super::KeyUsage {
        let mut u = super::KeyUsage::default();
        for s in self.slots.iter() {
            // Acquire: pairs with the publishing stores of register / alloc_mw / bind.
            let st = s.state.load(Ordering::Acquire);
            match st & KIND_MASK {
                KIND_MR if st & VALID != 0 => u.regions += 1,
                KIND_MW => {
                    u.windows += 1;
                    if st & VALID != 0 {
                        u.windows_bound += 1;
                    }
                }
                _ => {}
            }
        }
        u
    }

    pub(crate) fn dealloc_mw(&self, index: u32) {
        let Some(s) = self.slots.get(index as usize) else {
            return;
        };
        loop {
            let st = s.state.load(Ordering::Acquire);
            if st & VALID != 0 {
                self.invalidate_slot(s, st);
                continue;
            }
            if st & BUSY != 0 {
                // A bind is completing on another thread; let it finish.
                std::hint::spin_loop();
                continue;
            }
            // SeqCst: the kind is cleared so no pinner or binder matches the slot any more.
            if s.state
                .compare_exchange(st, st & KEY_MASK, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
        }
        wait_unpinned(s);
        self.release(index);
    }

    /// Invalidates a bound window whose state word was `st`; false if someone else changed it.
    fn invalidate_slot(&self, s: &KeySlot, st: u64) -> bool {
        // SeqCst: Dekker half paired with pinners; only one invalidator wins the exchange.
        if s.state
            .compare_exchange(st, st & !VALID, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        wait_unpinned(s);
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        let parent = s.parent.load(Ordering::Relaxed);
        if let Some(p) = self.slots.get(parent as usize) {
            // AcqRel: pairs with the dereg's Acquire load of the bound count.
            p.mw_bound.fetch_sub(1, Ordering::AcqRel);
        }
        true
    }

    /// Invalidates the window `key` (LOCAL_INV, or Send With Invalidate when `via_qp` names the
    /// receiving QP, which must be the one the window is bound to). Regions cannot be
    /// invalidated (they are not fast-registration MRs).
    pub(crate) fn invalidate(&self, key: u32, pd: u32, via_qp: Option<u32>) -> bool {
        let Some(s) = self.slot(key) else {
            return false;
        };
        // Acquire: pairs with the bind's SeqCst publish, so the fields below are current.
        let st = s.state.load(Ordering::Acquire);
        if st & KIND_MASK != KIND_MW || st & VALID == 0 || (st & KEY_MASK) as u32 != key {
            return false;
        }
        if s.pd.load(Ordering::Relaxed) != pd {
            return false;
        }
        if let Some(q) = via_qp {
            // Relaxed: slot fields are ordered by the `state` word (see module doc).
            if s.qp_num.load(Ordering::Relaxed) != q {
                return false;
            }
        }
        self.invalidate_slot(s, st)
    }

    /// Executes a type-2 bind (IBA C10-72..75, o10-37.2.30/40).
    pub(crate) fn bind(&self, req: &BindReq) -> Result<(), BindError> {
        let s = self.slots.get(req.mw_index as usize).ok_or(BindError)?;
        let st = s.state.load(Ordering::Acquire);
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        if st & KIND_MASK != KIND_MW
            || st & (VALID | BUSY) != 0
            || (st & KEY_MASK) as u32 != req.mw_key
            || s.pd.load(Ordering::Relaxed) != req.pd
            || req.len == 0
        {
            return Err(BindError);
        }
        // Pin the region while the window is attached to it (dereg waits for us).
        let mr = self
            .pin_local(req.mr_lkey, req.addr, req.len, false, req.pd)
            .ok_or(BindError)?;
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        let region = (
            mr.0.addr.load(Ordering::Relaxed),
            mr.0.len.load(Ordering::Relaxed),
            Access(mr.0.access.load(Ordering::Relaxed)),
        );
        if !validate::mw_bind(region, req.addr, req.len, req.access) {
            return Err(BindError);
        }
        // Claim the window. SeqCst so the claim orders with concurrent binders/deallocators.
        if s.state
            .compare_exchange(st, st | BUSY, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return Err(BindError);
        }
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        s.addr.store(req.addr, Ordering::Relaxed);
        s.len.store(req.len, Ordering::Relaxed);
        s.access.store(req.access.0, Ordering::Relaxed);
        s.qp_num.store(req.qp_num, Ordering::Relaxed);
        s.parent.store(req.mr_lkey >> 8, Ordering::Relaxed);
        // AcqRel: pairs with the dereg's Acquire load (it runs after our unpin).
        mr.0.mw_bound.fetch_add(1, Ordering::AcqRel);
        let new_key = (req.mw_index << 8) | (req.new_key & 0xff);
        // SeqCst publish: pinners that see VALID see the fields above.
        s.state
            .store(new_key as u64 | VALID | KIND_MW, Ordering::SeqCst);
        drop(mr);
        Ok(())
    }

    fn pin(&self, key: u32) -> Option<(Pin<'_>, u64)> {
        let s = self.slot(key)?;
        // SeqCst: Dekker half paired with the SeqCst state change + users load of a waiter.
        s.users.fetch_add(1, Ordering::SeqCst);
        let pin = Pin(s);
        let st = s.state.load(Ordering::SeqCst);
        if st & VALID == 0 || (st & KEY_MASK) as u32 != key {
            return None; // `pin` drops and unpins
        }
        Some((pin, st))
    }

    fn in_bounds(s: &KeySlot, addr: u64, len: u64) -> bool {
        let base = s.addr.load(Ordering::Relaxed);
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        let size = s.len.load(Ordering::Relaxed);
        validate::in_bounds(base, size, addr, len)
    }

    /// Pins `key` for `[addr, addr + len)`: a valid key of an entry in `pd` holding the rights
    /// `need`, whose kind (and, for a window, binding) `kind_ok` accepts, within its bounds.
    #[inline]
    fn pin_checked(
        &self,
        key: u32,
        (addr, len): (u64, u64),
        need: Access,
        pd: u32,
        kind_ok: impl FnOnce(u64, &KeySlot) -> bool,
    ) -> Option<Pin<'_>> {
        let (pin, st) = self.pin(key)?;
        let s = pin.0;
        // Relaxed: slot fields are ordered by the `state` word (see module doc).
        if s.pd.load(Ordering::Relaxed) != pd
            || (need.0 != 0 && !Access(s.access.load(Ordering::Relaxed)).contains(need))
            || !kind_ok(st & KIND_MASK, s)
            || !Self::in_bounds(s, addr, len)
        {
            return None;
        }
        Some(pin)
    }

    /// Pins a local region for an SGE: lkey of a region (not a window) in `pd`, bounds, and
    /// `LOCAL_WRITE` when the device writes into it.
    pub(crate) fn pin_local(
        &self,
        lkey: u32,
        addr: u64,
        len: u64,
        write: bool,
        pd: u32,
    ) -> Option<Pin<'_>> {
        let need = if write {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        self.pin_checked(lkey, (addr, len), need, pd, |kind, _| kind == KIND_MR)
    }

    /// Pins a remote target: rkey of a region or window in `pd` with `need` rights; windows
    /// only through the QP they are bound to; bounds.
    pub(crate) fn pin_remote(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
        pd: u32,
        qp_num: u32,
    ) -> Option<Pin<'_>> {
        self.pin_checked(rkey, (addr, len), need, pd, |kind, s| match kind {
            KIND_MR => true,
            // Relaxed: slot fields are ordered by the `state` word (see module doc).
            KIND_MW => s.qp_num.load(Ordering::Relaxed) == qp_num,
            _ => false,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// PD / MR / MW handles
// ---------------------------------------------------------------------------------------------

/// A soft protection domain.
pub struct SoftPd {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) id: u32,
}

impl core::fmt::Debug for SoftPd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftPd({})", self.id)
    }
}

/// A soft memory registration; dropping it deregisters.
pub type SoftMr = Region<SoftReg>;

/// The soft provider's handle of a registration (its key in the device's table); dropping it
/// deregisters.
pub struct SoftReg {
    dev: Arc<DeviceInner>,
    key: u32,
}

impl core::fmt::Debug for SoftMr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "SoftMr(key {:#x}, {:#x}+{}, {:?})",
            self.handle().key,
            self.addr(),
            self.len(),
            self.access()
        )
    }
}

impl SoftMr {
    pub(crate) fn device(&self) -> &Arc<DeviceInner> {
        &self.handle().dev
    }
}

impl Drop for SoftReg {
    fn drop(&mut self) {
        self.dev.keys.deregister(self.key);
    }
}

/// A soft type-2 memory window; dropping it deallocates (and invalidates) it.
pub struct SoftMw {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) index: u32,
    /// Current key (updated when a bind is queued). Relaxed: only the owner writes it.
    pub(crate) rkey: AtomicU32,
}

impl core::fmt::Debug for SoftMw {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftMw({:#x})", self.rkey())
    }
}

impl Drop for SoftMw {
    fn drop(&mut self) {
        self.dev.keys.dealloc_mw(self.index);
    }
}

impl MemoryWindow for SoftMw {
    fn rkey(&self) -> u32 {
        // Relaxed: a plain value owned by the window's user.
        self.rkey.load(Ordering::Relaxed)
    }
}

impl RegisterMr for SoftPd {
    type Handle = SoftReg;

    fn caps(&self) -> &DeviceCaps {
        &self.dev.caps
    }

    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Registered<SoftReg> {
        let err = |e| VerbsError::new(VerbsCall::RegMr, e);
        let len64 = len as u64;
        // The soft provider reads and writes through the region's addresses: besides the
        // shared checks it refuses rights it does not know, a range that wraps and a null
        // address.
        let known = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        if access.0 & !(known | Access::MW_BIND).0 != 0 {
            return Err(err(errno::EINVAL));
        }
        if (addr as u64).checked_add(len64).is_none() {
            return Err(err(errno::EINVAL));
        }
        if addr.is_null() && len != 0 {
            return Err(err(errno::EINVAL));
        }
        let key = self
            .dev
            .keys
            .register(self.id, addr as u64, len64, access)
            .ok_or(err(errno::ENOMEM))?;
        let handle = SoftReg {
            dev: self.dev.clone(),
            key,
        };
        Ok((
            handle,
            Keys {
                lkey: key,
                rkey: key,
            },
        ))
    }
}

impl_registrar!(SoftPd => SoftReg);

impl ProtectionDomain<super::SoftProvider> for SoftPd {
    fn alloc_mw(&self) -> Result<SoftMw, VerbsError> {
        if !self.dev.caps.mw_type2 {
            return Err(VerbsError::new(VerbsCall::AllocMw, errno::EOPNOTSUPP));
        }
        let key = self
            .dev
            .keys
            .alloc_mw(self.id)
            .ok_or(VerbsError::new(VerbsCall::AllocMw, errno::ENOMEM))?;
        Ok(SoftMw {
            dev: self.dev.clone(),
            index: key >> 8,
            rkey: AtomicU32::new(key),
        })
    }
}
