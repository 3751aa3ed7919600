//! The shared base of the iWARP provider: the provider type, the device's STag table and the
//! checks every placement makes against it, the device capabilities, the process clock and the
//! endpoint settings of a queue pair. Queue pairs ([`super::qp`]), completion queues
//! ([`super::cq`]) and the boundary's objects ([`super::provider`]) build on it.
//!
//! Normal operation: a registration is an entry of the device's table, keyed by its STag (lkey =
//! rkey: a table index in the upper 24 bits, a random key byte below); a type-2 memory window
//! (`mw.rs`) is an entry keyed by its index, whose STag changes with every bind.
//! [`MrTable::check`] gives the address of a range under a region's STag (a local SGE, a Read
//! Response sink) after the protection domain, bounds and rights checks;
//! [`MrTable::check_remote`] does the same for an STag the peer names (RDMA Write, Read
//! Request), which may also be a window bound to the receiving QP.
//!
//! Recovery: a failed check is a [`Fault`], which placement turns into the RFC 5040 / RFC 5041
//! Terminate code it names; nothing here changes state on a failure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::handshake;
use super::mw::MwEntry;
use super::socket::EndpointConfig;
use crate::verbs::{
    validate, vendor, Access, DeviceCaps, KeyGen, Transport, PRIVATE_DATA_ACCEPT_MAX,
    PRIVATE_DATA_CONNECT_MAX, PRIVATE_DATA_REJECT_MAX,
};

/// The provider.
#[derive(Debug)]
pub struct IwarpProvider;

/// Scatter/gather entries per work request.
pub const MAX_SGE: usize = 8;
/// `vendor_id` this provider reports (ASCII "uiw"; not siw's, so the conformance suite applies
/// the generic iWARP profile rather than the kernel siw quirks).
pub const VENDOR_ID: u32 = 0x0075_6977;

const _: () = assert!(VENDOR_ID != vendor::SIW);

/// Nanoseconds on a process-wide monotonic clock (the handshake deadlines).
pub(crate) fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Locks `m`, taking the data of a poisoned lock (a panicking holder left it consistent: every
/// update is a plain field write).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// A device: its address, capabilities, STag table and counters.
pub(crate) struct DevInner {
    pub(crate) ip: IpAddr,
    pub(crate) caps: DeviceCaps,
    pub(crate) mrs: Mutex<MrTable>,
    pub(crate) next_pd: AtomicU32,
    pub(crate) next_index: AtomicU32,
    pub(crate) next_qpn: AtomicU32,
    pub(crate) keys: Mutex<KeyGen>,
}

impl DevInner {
    /// A new STag index for a region or a window (`None` once the 2^24 indices are used).
    pub(crate) fn alloc_index(&self) -> Option<u32> {
        // Relaxed: a unique-number counter.
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        (index < 1 << 24).then_some(index)
    }

    pub(crate) fn alloc_qpn(&self) -> u32 {
        // Relaxed: a unique-number counter.
        self.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff
    }
}

/// The device capabilities: what the provider implements (type-2 memory windows, Send With
/// Invalidate and Local Invalidate, SRQs; one RDMA Read sink SGE, as siw) and the rdma_cm
/// private data limits. Regions and windows share the 2^24 STag indices.
pub(crate) fn caps() -> DeviceCaps {
    DeviceCaps {
        max_qp: 1 << 16,
        max_qp_wr: 4096,
        max_sge: MAX_SGE as u32,
        max_sge_rd: 1,
        max_inline_data: 0,
        max_cq: 1 << 16,
        max_cqe: 1 << 20,
        max_mr: 1 << 20,
        max_mw: 1 << 20,
        max_pd: 1 << 16,
        max_mr_size: 1 << 40,
        max_srq: 1 << 12,
        max_srq_wr: 4096,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        mw_type2: true,
        send_with_invalidate: true,
        max_private_data_connect: PRIVATE_DATA_CONNECT_MAX as u32,
        max_private_data_accept: PRIVATE_DATA_ACCEPT_MAX as u32,
        max_private_data_reject: PRIVATE_DATA_REJECT_MAX as u32,
        transport: Transport::Iwarp,
        vendor_id: VENDOR_ID,
        vendor_part_id: 0,
    }
}

/// The endpoint settings of a QP with read depths `ird` / `ord`.
pub(crate) fn endpoint_config(ird: u8, ord: u8) -> EndpointConfig {
    EndpointConfig {
        handshake: handshake::Config {
            ird: u16::from(ird),
            ord: u16::from(ord),
            ..handshake::Config::default()
        },
        ..EndpointConfig::default()
    }
}
