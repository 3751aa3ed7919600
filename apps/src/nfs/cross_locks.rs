//! Byte-range locks and delegations seen across protocols: an NFSv3 client's lock (NLM) and
//! an NFSv4.1 client's lock (LOCK) on one file conflict with each other, as they do on a Linux
//! server, where both are the file's POSIX locks; and an NFSv3 or NLM call that reads or
//! changes a file recalls the NFSv4.1 delegations it conflicts with, as it breaks the leases
//! behind them on a Linux server.
//!
//! Normal operation: each lock manager keeps its own table and registers a [`LockView`] of it
//! here; before it grants or tests a lock it asks the other's view for a conflicting lock
//! ([`CrossLocks::nlm_conflict`], [`CrossLocks::v4_conflict`]), and after its locks on a file
//! shrink it tells the other ([`CrossLocks::v4_released`]: waiting NLM requests may now be
//! granted). A file is named as both tables name it: the export's handle id and the store's
//! handle. Ranges are given with an inclusive end; a lock to the end of the file ends at
//! `u64::MAX` whatever the protocol's own spelling.
//!
//! Before an NFSv3 procedure or an NLM request touches a file it reports the access to the
//! NFSv4.1 side's [`DelegView`] ([`CrossLocks::foreign_access`]), which recalls the
//! delegations in the way and keeps new ones from being granted on that file for a while; the
//! caller answers "try again later" (NFS3ERR_JUKEBOX; NLM: no reply, as Linux lockd drops it)
//! while any is held.
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

/// The NFSv4.1 delegations, as NFSv3 and NLM calls meet them.
pub trait DelegView: Send + Sync {
    /// File (`export`, `fh`) is about to be accessed from outside NFSv4.1: its data read
    /// (`write` false) or its data, attributes or name changed (`write` true). Recalls the
    /// delegations that access conflicts with (any for a change, write delegations for a
    /// read) and keeps new ones off the file for a while; true while any of them is held,
    /// and the caller must not go on. `allowed` says whether the caller may make that
    /// access at all: asked only when a delegation may be in the way, and a caller refused
    /// anyway recalls nothing (Linux nfsd checks the permission before its open breaks a
    /// lease).
    fn foreign_access(
        &self,
        export: [u8; 4],
        fh: &[u8],
        write: bool,
        allowed: &dyn Fn() -> bool,
    ) -> bool;

    /// Whether any delegation is held now (a caller that must resolve a name to report an
    /// access skips that while none is).
    fn any_held(&self) -> bool;
}

/// The two lock managers of one server, and its NFSv4.1 delegations.
#[derive(Default)]
pub struct CrossLocks {
    order: Mutex<()>,
    nlm: OnceLock<Arc<dyn LockView>>,
    v4: OnceLock<Arc<dyn LockView>>,
    delegs: OnceLock<Arc<dyn DelegView>>,
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

    /// Registers the NFSv4.1 side's delegations (once; later calls are ignored).
    pub fn set_delegs(&self, v: Arc<dyn DelegView>) {
        let _ = self.delegs.set(v);
    }

    /// An NFSv3 or NLM access to file (`export`, `fh`), reading (`write` false) or changing
    /// it, by a caller `allowed` says may ([`DelegView::foreign_access`]): true while an
    /// NFSv4.1 delegation it recalled is held (the caller answers "try later"). False without
    /// a registered view. The caller holds no lock manager's mutex.
    pub fn foreign_access(
        &self,
        export: [u8; 4],
        fh: &[u8],
        write: bool,
        allowed: &dyn Fn() -> bool,
    ) -> bool {
        self.delegs
            .get()
            .is_some_and(|d| d.foreign_access(export, fh, write, allowed))
    }

    /// Whether an NFSv4.1 delegation of any file is held now.
    pub fn delegations_held(&self) -> bool {
        self.delegs.get().is_some_and(|d| d.any_held())
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
            .field("delegs", &self.delegs.get().is_some())
            .finish()
    }
}
