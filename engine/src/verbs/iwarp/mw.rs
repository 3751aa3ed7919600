//! Type-2 memory windows of the iWARP provider (`ibv_alloc_mw`): the handle a consumer holds.
//! The window's state (its STag, and while bound its range and QP) is an entry of the device's
//! STag table (`stag.rs`), where binds and invalidations are checked.
//!
//! Normal operation: [`IwarpMw::alloc`] takes an STag index (shared with regions) and a random
//! key byte and enters the unbound window in the table; [`IwarpMw::set_key`] records the key of
//! each bind the consumer queues.
//!
//! Recovery: dropping a window removes it from the table; its STag is invalid from then on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::device::{lock, DevInner};
use super::stag::MwEntry;
use crate::verbs::{errno, MemoryWindow, VerbsCall, VerbsError};

/// A type-2 memory window (`ibv_alloc_mw`); dropping it removes it from the STag table.
pub struct IwarpMw {
    pub(crate) dev: Arc<DevInner>,
    pub(crate) index: u32,
    /// The key of the last bind queued (or the initial key). Relaxed: only the owner writes it.
    pub(crate) rkey: AtomicU32,
}

impl core::fmt::Debug for IwarpMw {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IwarpMw({:#x})", self.rkey())
    }
}

impl IwarpMw {
    /// An unbound window in PD `pd` of `dev`.
    pub(crate) fn alloc(dev: &Arc<DevInner>, pd: u32) -> Result<IwarpMw, VerbsError> {
        let Some(index) = dev.alloc_index() else {
            return Err(VerbsError::new(VerbsCall::AllocMw, errno::ENOMEM));
        };
        let key = lock(&dev.keys).next_rkey(index << 8);
        let entry = MwEntry {
            key,
            pd,
            bound: None,
        };
        lock(&dev.mrs).mws.insert(index, entry);
        Ok(IwarpMw {
            dev: dev.clone(),
            index,
            rkey: AtomicU32::new(key),
        })
    }

    /// Records the key of a bind just queued; returns the window's key before it.
    pub(crate) fn set_key(&self, byte: u32) -> (u32, u32) {
        // Relaxed: owner data (see the field).
        let old = self.rkey.load(Ordering::Relaxed);
        let new = (old & !0xff) | (byte & 0xff);
        self.rkey.store(new, Ordering::Relaxed);
        (old, new)
    }
}

impl Drop for IwarpMw {
    fn drop(&mut self) {
        lock(&self.dev.mrs).mws.remove(&self.index);
    }
}

impl MemoryWindow for IwarpMw {
    fn rkey(&self) -> u32 {
        // Relaxed: owner data (see the field).
        self.rkey.load(Ordering::Relaxed)
    }
}
