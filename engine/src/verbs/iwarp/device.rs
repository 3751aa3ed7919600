//! The shared base of the iWARP provider: the provider type, the device's STag table and the
//! checks every placement makes against it, the device capabilities, the process clock and the
//! endpoint settings of a queue pair. Queue pairs ([`super::qp`]), completion queues
//! ([`super::cq`]) and the boundary's objects ([`super::provider`]) build on it.
//!
//! Normal operation: a registration is an entry of the device's table, keyed by its STag (lkey =
//! rkey: a table index in the upper 24 bits, a random key byte below); [`MrTable::check`] gives
//! the address of a range under an STag after the protection domain, bounds and rights checks.
//!
//! Recovery: a failed check is a [`Fault`], which placement turns into the RFC 5040 / RFC 5041
//! Terminate code it names; nothing here changes state on a failure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::handshake;
use super::socket::EndpointConfig;
use crate::verbs::{
    vendor, Access, DeviceCaps, KeyGen, Transport, PRIVATE_DATA_ACCEPT_MAX,
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
    /// The registration belongs to another protection domain.
    WrongPd,
}

/// The STag table of a device.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    pub(crate) map: HashMap<u32, MrEntry>,
}

impl MrTable {
    /// The address of `[addr, addr + len)` under `stag`, checked against the PD `pd` and the
    /// rights `need`.
    pub(crate) fn check(
        &self,
        stag: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, Fault> {
        let e = self.map.get(&stag).ok_or(Fault::InvalidStag)?;
        if e.pd != pd {
            return Err(Fault::WrongPd);
        }
        let end = addr.checked_add(len).ok_or(Fault::Bounds)?;
        if addr < e.addr || end > e.addr + e.len {
            return Err(Fault::Bounds);
        }
        if !e.access.contains(need) {
            return Err(Fault::Access);
        }
        Ok(addr as *mut u8)
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
    pub(crate) fn alloc_qpn(&self) -> u32 {
        // Relaxed: a unique-number counter.
        self.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff
    }
}

/// The device capabilities: what the provider implements (no memory windows, no Send With
/// Invalidate, no SRQ; one RDMA Read sink SGE, as siw) and the rdma_cm private data limits.
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
        max_mw: 0,
        max_pd: 1 << 16,
        max_mr_size: 1 << 40,
        max_srq: 0,
        max_srq_wr: 0,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        mw_type2: false,
        send_with_invalidate: false,
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
