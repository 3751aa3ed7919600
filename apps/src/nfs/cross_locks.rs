//! Byte-range locks seen across protocols: an NFSv3 client's lock (NLM) and an NFSv4.1
//! client's lock (LOCK) on one file conflict with each other, as they do on a Linux server,
//! where both are the file's POSIX locks.
//!
//! Normal operation: each lock manager keeps its own table and registers a [`LockView`] of it
//! here; before it grants or tests a lock it asks the other's view for a conflicting lock
//! ([`CrossLocks::nlm_conflict`], [`CrossLocks::v4_conflict`]), and after its locks on a file
//! shrink it tells the other ([`CrossLocks::v4_released`]: waiting NLM requests may now be
//! granted). A file is named as both tables name it: the export's handle id and the store's
//! handle. Ranges are given with an inclusive end; a lock to the end of the file ends at
//! `u64::MAX` whatever the protocol's own spelling.
//!
//! Recovery: each side decides under its own mutex and asks the other's view, which takes the
//! other's mutex, so two decisions in opposite directions could wait on each other: every
//! decision that asks across holds [`CrossLocks::order`] first, which makes them take turns. A
//! release is reported after the side's own mutex is let go. Without a registered view the
//! other side holds no locks.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// A lock of the other protocol in the way of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreign {
    /// First octet.
    pub start: u64,
    /// Last octet (inclusive; `u64::MAX`: to the end of the file).
    pub end: u64,
    /// A write lock.
    pub exclusive: bool,
}

/// One protocol's locks, as the other asks about them.
pub trait LockView: Send + Sync {
    /// The first lock on the file (`export`, `fh`) in the way of a request of the other
    /// protocol for octets `start..=end` (`u64::MAX`: to the end), exclusive or not. No lock
    /// of one protocol has the owner of a request of the other.
    fn conflict(
        &self,
        export: [u8; 4],
        fh: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Foreign>;

    /// The other protocol's locks on the file shrank.
    fn released(&self, export: [u8; 4], fh: &[u8]);
}

/// The two lock managers of one server.
#[derive(Default)]
pub struct CrossLocks {
    order: Mutex<()>,
    nlm: OnceLock<Arc<dyn LockView>>,
    v4: OnceLock<Arc<dyn LockView>>,
}

impl CrossLocks {
    /// A registry with no view yet.
    pub fn new() -> Arc<CrossLocks> {
        Arc::new(CrossLocks::default())
    }

    /// Registers the NLM side's view (once; later calls are ignored).
    pub fn set_nlm(&self, v: Arc<dyn LockView>) {
        let _ = self.nlm.set(v);
    }

    /// Registers the NFSv4.1 side's view (once; later calls are ignored).
    pub fn set_v4(&self, v: Arc<dyn LockView>) {
        let _ = self.v4.set(v);
    }

    /// Held by every decision that asks the other side, before the side's own mutex.
    pub fn order(&self) -> MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An NFSv4.1 lock in the way of an NLM request (the caller holds [`CrossLocks::order`]).
    pub fn v4_conflict(
        &self,
        export: [u8; 4],
        fh: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Foreign> {
        self.v4.get()?.conflict(export, fh, start, end, exclusive)
    }

    /// An NLM lock in the way of an NFSv4.1 request (the caller holds [`CrossLocks::order`]).
    pub fn nlm_conflict(
        &self,
        export: [u8; 4],
        fh: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Foreign> {
        self.nlm.get()?.conflict(export, fh, start, end, exclusive)
    }

    /// NFSv4.1 locks on the file shrank (the caller holds no lock manager's mutex).
    pub fn v4_released(&self, export: [u8; 4], fh: &[u8]) {
        if let Some(n) = self.nlm.get() {
            n.released(export, fh);
        }
    }
}

impl std::fmt::Debug for CrossLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossLocks")
            .field("nlm", &self.nlm.get().is_some())
            .field("v4", &self.v4.get().is_some())
            .finish()
    }
}
