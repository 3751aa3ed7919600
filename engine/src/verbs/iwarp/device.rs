//! The shared base of the iWARP provider: the provider type, the device (its address,
//! capabilities, STag table (`stag.rs`) and counters), the process clock and the endpoint
//! settings of a queue pair. Queue pairs ([`super::qp`]), completion queues ([`super::cq`]) and
//! the boundary's objects ([`super::provider`]) build on it.
//!
//! Normal operation: a registration or a memory window takes an STag index from the device
//! (lkey = rkey: a table index in the upper 24 bits, a random key byte below) and enters the
//! device's table; every placement is checked there.
//!
//! Recovery: nothing here changes state on a failure; a failed STag check is a fault that
//! placement turns into the RFC 5040 / RFC 5041 Terminate code it names.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::handshake;
use super::socket::EndpointConfig;
use super::stag::MrTable;
use crate::verbs::{
    vendor, DeviceCaps, KeyGen, Transport, PRIVATE_DATA_ACCEPT_MAX, PRIVATE_DATA_CONNECT_MAX,
    PRIVATE_DATA_REJECT_MAX,
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
