//! The STag table of an iWARP device (RFC 5040 STags): registered regions by STag and type-2
//! memory windows by index, and every check a placement or a bind makes against them.
//!
//! Normal operation: a region's entry is its range, rights and protection domain; a local
//! SGE or a tagged placement is checked against it ([`MrTable::check`],
//! [`MrTable::check_remote`]: PD, bounds, rights, each failure a [`Fault`] with its Terminate
//! code). A window's entry holds its current STag and, while bound, the range, rights and QP
//! it was bound to: a BIND_MW work request, executed in send-queue order ([`MrTable::bind`]),
//! checks the window (this PD, not bound, the key it had when the bind was posted) and the
//! region it covers ([`validate::mw_bind`]), then gives the window the new STag bound to the
//! posting QP: only that QP's peer reaches memory through it. LOCAL_INV and a received Send
//! with Invalidate ([`MrTable::invalidate`]) unbind it.
//!
//! Recovery: a refused bind changes nothing and completes `MW_BIND_ERR`; a refused invalidation
//! changes nothing and says why ([`InvalidateError`]: LOCAL_INV completes `LOC_QP_OP_ERR`, a
//! Send with Invalidate is answered with a Terminate, "STag cannot be invalidated"). Regions
//! are not invalidated (they are not fast-registration regions); deregistering one unbinds the
//! windows over it.

use std::collections::HashMap;

use crate::verbs::{validate, Access};

/// One registration in a device's STag table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MrEntry {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    pub(crate) pd: u32,
}

/// Why an STag check failed (each maps to its RFC 5040 / RFC 5041 Terminate code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No registration under the STag.
    InvalidStag,
    /// The range leaves the registration.
    Bounds,
    /// The registration lacks the right.
    Access,
    /// The STag is not associated with this stream: a registration of another protection
    /// domain, or a window bound to another QP.
    WrongPd,
}

/// The STag table of a device: regions by STag, type-2 windows by index (`mw.rs`).
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    pub(crate) map: HashMap<u32, MrEntry>,
    pub(crate) mws: HashMap<u32, MwEntry>,
}

/// Checks a range of `e` under the PD `pd` with the rights `need`.
fn check_entry(e: &MrEntry, pd: u32, addr: u64, len: u64, need: Access) -> Result<*mut u8, Fault> {
    if e.pd != pd {
        return Err(Fault::WrongPd);
    }
    if !validate::in_bounds(e.addr, e.len, addr, len) {
        return Err(Fault::Bounds);
    }
    if !e.access.contains(need) {
        return Err(Fault::Access);
    }
    Ok(addr as *mut u8)
}

impl MrTable {
    /// The address of `[addr, addr + len)` under the region `stag`, checked against the PD `pd`
    /// and the rights `need` (a window's STag is no lkey: [`Fault::InvalidStag`]).
    pub(crate) fn check(
        &self,
        stag: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, Fault> {
        let e = self.map.get(&stag).ok_or(Fault::InvalidStag)?;
        check_entry(e, pd, addr, len, need)
    }

    /// As [`MrTable::check`] for an STag the peer of QP `qpn` names: a region, or a window
    /// whose current STag it is, bound to that QP.
    pub(crate) fn check_remote(
        &self,
        stag: u32,
        (pd, qpn): (u32, u32),
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, Fault> {
        if let Some(e) = self.map.get(&stag) {
            return check_entry(e, pd, addr, len, need);
        }
        let w = self.window(stag).ok_or(Fault::InvalidStag)?;
        let b = w.bound.as_ref().ok_or(Fault::InvalidStag)?;
        if b.qpn != qpn {
            return Err(Fault::WrongPd);
        }
        check_entry(&b.range, pd, addr, len, need)
    }
}

/// A window's entry in the STag table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MwEntry {
    /// The current STag (index in the upper 24 bits).
    pub(crate) key: u32,
    pub(crate) pd: u32,
    pub(crate) bound: Option<Binding>,
}

/// What a bound window grants, and to which QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding {
    /// The window's range and remote rights, in the window's PD.
    pub(crate) range: MrEntry,
    /// The QP the window was bound through: only its peer may use it.
    pub(crate) qpn: u32,
    /// The STag of the region the window covers.
    pub(crate) region: u32,
}

/// A BIND_MW work request, as queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindReq {
    pub(crate) index: u32,
    /// The window's STag when the bind was posted (must still be its STag).
    pub(crate) old_key: u32,
    pub(crate) new_key: u32,
    pub(crate) region: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// Why an STag could not be invalidated (each maps to its RFC 5040 Terminate error type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidateError {
    /// No valid window under the STag (unknown, unbound, stale key, or a region's STag): a
    /// remote operation error.
    NotAWindow,
    /// A window of another protection domain or bound to another QP: a remote protection
    /// error.
    NotAssociated,
}

impl MrTable {
    /// The window whose current STag is `stag`.
    pub(crate) fn window(&self, stag: u32) -> Option<&MwEntry> {
        self.mws.get(&(stag >> 8)).filter(|w| w.key == stag)
    }

    /// Removes the region `stag`; the windows bound over it are unbound.
    pub(crate) fn remove_region(&mut self, stag: u32) {
        if self.map.remove(&stag).is_none() {
            return;
        }
        for w in self.mws.values_mut() {
            if w.bound.is_some_and(|b| b.region == stag) {
                w.bound = None;
            }
        }
    }

    /// Executes a bind for QP `qpn` of PD `pd`; `false` (nothing changed) when refused.
    pub(crate) fn bind(&mut self, req: &BindReq, pd: u32, qpn: u32) -> bool {
        let Some(mr) = self.map.get(&req.region).copied() else {
            return false;
        };
        let Some(w) = self.mws.get_mut(&req.index) else {
            return false;
        };
        if w.key != req.old_key || w.pd != pd || w.bound.is_some() || mr.pd != pd {
            return false;
        }
        if !validate::mw_bind((mr.addr, mr.len, mr.access), req.addr, req.len, req.access) {
            return false;
        }
        w.key = (req.index << 8) | (req.new_key & 0xff);
        w.bound = Some(Binding {
            range: MrEntry {
                addr: req.addr,
                len: req.len,
                access: req.access,
                pd,
            },
            qpn,
            region: req.region,
        });
        true
    }

    /// Invalidates the window `stag` of PD `pd`: LOCAL_INV (`via` `None`), or a Send with
    /// Invalidate received on QP `via`, which must be the QP the window is bound to.
    pub(crate) fn invalidate(
        &mut self,
        stag: u32,
        pd: u32,
        via: Option<u32>,
    ) -> Result<(), InvalidateError> {
        let w = self
            .mws
            .get_mut(&(stag >> 8))
            .filter(|w| w.key == stag)
            .ok_or(InvalidateError::NotAWindow)?;
        let b = w.bound.ok_or(InvalidateError::NotAWindow)?;
        if w.pd != pd || via.is_some_and(|q| q != b.qpn) {
            return Err(InvalidateError::NotAssociated);
        }
        w.bound = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGION: u32 = 0x0000_0105;
    const RW: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

    /// A table with a region (index 1, PD 1, `MW_BIND`) and an unbound window (index 2, PD 1).
    fn table() -> MrTable {
        let mut t = MrTable::default();
        let access = Access::LOCAL_WRITE | Access::MW_BIND;
        let r = MrEntry {
            addr: 0x1000,
            len: 4096,
            access,
            pd: 1,
        };
        t.map.insert(REGION, r);
        let w = MwEntry {
            key: 0x0000_0207,
            pd: 1,
            bound: None,
        };
        t.mws.insert(2, w);
        t
    }

    fn req(old_key: u32, new_key: u32) -> BindReq {
        BindReq {
            index: 2,
            old_key,
            new_key,
            region: REGION,
            addr: 0x1800,
            len: 1024,
            access: RW,
        }
    }

    #[test]
    fn accepts_a_bind_granting_its_range_to_its_qp_only() {
        let mut t = table();
        assert!(t.bind(&req(0x207, 0x9a), 1, 7));
        let stag = 0x0000_029a;
        let qp7 = (1, 7);
        assert!(t.check_remote(stag, qp7, 0x1800, 1024, RW).is_ok());
        assert_eq!(
            t.check_remote(stag, qp7, 0x1700, 16, RW),
            Err(Fault::Bounds)
        );
        assert_eq!(
            t.check_remote(stag, (1, 8), 0x1800, 16, RW),
            Err(Fault::WrongPd)
        );
        assert_eq!(
            t.check_remote(0x207, qp7, 0x1800, 16, RW),
            Err(Fault::InvalidStag),
            "the key before the bind"
        );
        assert_eq!(
            t.check(stag, 1, 0x1800, 16, Access::NONE),
            Err(Fault::InvalidStag),
            "a window's STag is no lkey"
        );
        // Deregistering the region unbinds the window.
        t.remove_region(REGION);
        assert_eq!(
            t.check_remote(stag, qp7, 0x1800, 16, RW),
            Err(Fault::InvalidStag)
        );
    }

    #[test]
    fn rejects_binds_of_bound_or_stale_or_foreign_windows() {
        let mut t = table();
        assert!(!t.bind(&req(0x208, 0x9a), 1, 7), "a stale key");
        assert!(!t.bind(&req(0x207, 0x9a), 2, 7), "another PD");
        assert!(!t.bind(
            &BindReq {
                len: 0,
                ..req(0x207, 0x9a)
            },
            1,
            7
        ));
        let unknown = BindReq {
            region: 0x0000_0305,
            ..req(0x207, 0x9a)
        };
        assert!(!t.bind(&unknown, 1, 7), "an unknown region");
        let plain = MrEntry {
            access: Access::LOCAL_WRITE,
            ..t.map[&REGION]
        };
        t.map.insert(0x0000_0305, plain);
        assert!(!t.bind(&unknown, 1, 7), "a region without MW_BIND");
        assert!(t.bind(&req(0x207, 0x9a), 1, 7));
        assert!(!t.bind(&req(0x29a, 0x9b), 1, 7), "a bound window");
    }

    #[test]
    fn rejects_invalidations_of_what_is_no_window_of_this_stream() {
        let mut t = table();
        assert!(t.bind(&req(0x207, 0x9a), 1, 7));
        let stag = 0x0000_029a;
        let not = Err(InvalidateError::NotAWindow);
        let assoc = Err(InvalidateError::NotAssociated);
        assert_eq!(t.invalidate(REGION, 1, Some(7)), not, "a region");
        assert_eq!(t.invalidate(0x0000_0207, 1, Some(7)), not, "a stale key");
        assert_eq!(t.invalidate(stag, 2, None), assoc, "another PD");
        assert_eq!(t.invalidate(stag, 1, Some(8)), assoc, "another QP");
        assert_eq!(t.invalidate(stag, 1, Some(7)), Ok(()));
        assert_eq!(t.invalidate(stag, 1, None), not, "already invalid");
        assert_eq!(
            t.check_remote(stag, (1, 7), 0x1800, 16, RW),
            Err(Fault::InvalidStag)
        );
        // Rebound under a new key, invalidated locally.
        assert!(t.bind(&req(stag, 0x11), 1, 7));
        assert_eq!(t.invalidate(0x0000_0211, 1, None), Ok(()));
    }
}
