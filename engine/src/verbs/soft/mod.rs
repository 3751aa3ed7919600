//! The in-process software provider: real RDMA semantics without hardware.
//!
//! A [`SoftFabric`] is the "network": it maps listening addresses to listeners and carries the
//! optional packet-trace hook. Devices ([`SoftDevice`]) are opened on a fabric with an IP
//! address; [`SoftProvider::open`] uses the process-wide default fabric, tests use
//! [`SoftFabric::new`] for isolation.
//!
//! Normal operation: the posting thread acts as the NIC at each doorbell (`flush_send`): it
//! executes the queued work requests in order, copying between registered buffers with raw
//! pointers after checking keys, PDs, rights and bounds exactly where hardware does, and pushes
//! completions into lock-free CQ rings. Nothing allocates on post / flush / poll / bind /
//! invalidate: every queue is sized at creation.
//!
//! Recovery: errors complete with the status hardware gives, move the QP to ERROR, flush all
//! outstanding work with `WR_FLUSH_ERR` on both sides and report `Disconnected` to both.
//! Fault injection ([`SoftFaults`], [`SoftFabric::set_unreachable`]) provokes the same paths on
//! demand. See `docs/verbs.md` for the full rule list and the known differences from hardware.

mod cq;
mod mr;
mod qp;
mod sync;
mod trace;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_queue::ArrayQueue;

pub use cq::SoftCq;
pub use mr::{SoftMr, SoftMw, SoftPd, SoftReg};
pub use qp::{DelayMode, SoftFaults, SoftQp, SoftSrq};
pub use trace::{TraceEvent, TraceHook, TraceOp};

use mr::{KeyTable, MAX_SGE};
use qp::QpShared;

use super::{
    errno, vendor, CmEventKind, ConnRequest, Device, DeviceCaps, Listener, PrivateData, Provider,
    QpInit, Transport, VerbsCall, VerbsError, PRIVATE_DATA_ACCEPT_MAX, PRIVATE_DATA_CONNECT_MAX,
    PRIVATE_DATA_REJECT_MAX, REJECT_CONSUMER, REJECT_NO_LISTENER, RNR_RETRY_INFINITE,
};
use crate::verbs::validate;

/// The soft provider (type-level marker implementing [`Provider`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SoftProvider;

/// Configuration of a soft device.
#[derive(Debug, Clone, Copy)]
pub struct SoftConfig {
    /// Capabilities reported (and enforced).
    pub caps: DeviceCaps,
    /// Entries of the key table (regions + windows).
    pub key_table_entries: u32,
    /// Hand out the lowest QP number not in use on this device, as siw does (a number comes
    /// back as soon as its QP is destroyed), instead of a fabric-wide counter that never
    /// repeats (as rxe, whose numbers cycle through the whole space).
    pub reuse_qp_numbers: bool,
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            caps: DeviceCaps {
                max_qp: 1 << 16,
                max_qp_wr: 4096,
                max_sge: MAX_SGE as u32,
                max_sge_rd: MAX_SGE as u32,
                max_inline_data: 256,
                max_cq: 1 << 16,
                max_cqe: 1 << 20,
                max_mr: 4095,
                max_mw: 4095,
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
                transport: Transport::Ib,
                vendor_id: vendor::SOFT,
                vendor_part_id: 0,
            },
            key_table_entries: 4096,
            reuse_qp_numbers: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fabric
// ---------------------------------------------------------------------------------------------

pub(crate) struct FabricInner {
    listeners: Mutex<HashMap<SocketAddr, Arc<ListenerShared>>>,
    unreachable: Mutex<HashSet<SocketAddr>>,
    next_qpn: AtomicU32,
    next_port: AtomicU32,
    pub(crate) trace: OnceLock<TraceHook>,
    /// Type-2 windows that were still bound to a QP when it was destroyed (see
    /// [`SoftFabric::windows_bound_at_qp_destroy`]).
    pub(crate) windows_bound_at_destroy: AtomicU64,
}

/// The in-process "network" soft devices live on.
#[derive(Clone)]
pub struct SoftFabric {
    inner: Arc<FabricInner>,
}

impl core::fmt::Debug for SoftFabric {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SoftFabric")
    }
}

impl Default for SoftFabric {
    fn default() -> Self {
        SoftFabric::new()
    }
}

impl SoftFabric {
    /// A new, isolated fabric.
    pub fn new() -> SoftFabric {
        SoftFabric {
            inner: Arc::new(FabricInner {
                listeners: Mutex::new(HashMap::new()),
                unreachable: Mutex::new(HashSet::new()),
                next_qpn: AtomicU32::new(FIRST_QPN),
                next_port: AtomicU32::new(0),
                trace: OnceLock::new(),
                windows_bound_at_destroy: AtomicU64::new(0),
            }),
        }
    }

    /// The process-wide default fabric ([`SoftProvider::open`] uses it).
    pub fn global() -> SoftFabric {
        static GLOBAL: OnceLock<SoftFabric> = OnceLock::new();
        GLOBAL.get_or_init(SoftFabric::new).clone()
    }

    /// Opens a device with address `ip` and the default configuration.
    pub fn open(&self, ip: IpAddr) -> SoftDevice {
        self.open_with(ip, SoftConfig::default())
    }

    /// Opens a device with address `ip` and `config`.
    pub fn open_with(&self, ip: IpAddr, config: SoftConfig) -> SoftDevice {
        let mut caps = config.caps;
        caps.max_sge = caps.max_sge.min(MAX_SGE as u32);
        SoftDevice {
            inner: Arc::new(DeviceInner {
                fabric: self.inner.clone(),
                ip,
                caps,
                keys: KeyTable::new(config.key_table_entries),
                next_pd: AtomicU32::new(1),
                qpns_in_use: config.reuse_qp_numbers.then(Default::default),
            }),
        }
    }

    /// Installs the packet-trace hook (once per fabric; later calls return false). The hook
    /// runs inside the soft NIC and must not call verbs.
    pub fn set_trace(&self, hook: TraceHook) -> bool {
        self.inner.trace.set(hook).is_ok()
    }

    /// Type-2 memory windows that were still bound to their QP when the QP was destroyed, over
    /// the fabric's life (a diagnostic: 0 for a well-behaved user). A bound type-2 window holds
    /// a reference to its QP; kernel Soft-RoCE (rxe, Linux 6.1) then warns at the QP's destroy
    /// (`__rxe_cleanup` times out waiting for the reference) and frees the QP under the
    /// window. Invalidate or deallocate windows before destroying their QP.
    pub fn windows_bound_at_qp_destroy(&self) -> u64 {
        // Relaxed: a statistic; the destroying thread's increment is ordered for the reader by
        // however it learnt that the QP was dropped (a join, a channel).
        self.inner.windows_bound_at_destroy.load(Ordering::Relaxed)
    }

    /// Makes connects to `addr` report `Unreachable` (true) or behave normally (false).
    pub fn set_unreachable(&self, addr: SocketAddr, unreachable: bool) {
        let mut set = self
            .inner
            .unreachable
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if unreachable {
            set.insert(addr);
        } else {
            set.remove(&addr);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------

pub(crate) struct DeviceInner {
    pub(crate) fabric: Arc<FabricInner>,
    ip: IpAddr,
    pub(crate) caps: DeviceCaps,
    pub(crate) keys: KeyTable,
    next_pd: AtomicU32,
    /// QP numbers in use, when they are reused ([`SoftConfig::reuse_qp_numbers`]).
    qpns_in_use: Option<Mutex<std::collections::BTreeSet<u32>>>,
}

impl DeviceInner {
    /// A number for a new QP: the fabric's next one, or the lowest free one of this device.
    fn alloc_qpn(&self) -> u32 {
        let Some(used) = &self.qpns_in_use else {
            // Relaxed: a unique-number counter.
            return self.fabric.next_qpn.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
        };
        let mut used = used.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = FIRST_QPN;
        for &u in used.range(FIRST_QPN..) {
            if u != n {
                break;
            }
            n += 1;
        }
        used.insert(n);
        n
    }

    /// The QP numbered `qpn` is destroyed: with reuse, its number is free again.
    pub(crate) fn free_qpn(&self, qpn: u32) {
        if let Some(used) = &self.qpns_in_use {
            used.lock().unwrap_or_else(|p| p.into_inner()).remove(&qpn);
        }
    }
}

/// The first QP number handed out (0 and 1 are the special QPs of InfiniBand).
const FIRST_QPN: u32 = 0x11;

/// An opened soft device.
#[derive(Clone)]
pub struct SoftDevice {
    inner: Arc<DeviceInner>,
}

impl core::fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftDevice({})", self.inner.ip)
    }
}

/// How many entries of a soft device's protection table are in use (see
/// [`SoftDevice::key_usage`]): a leak check for long runs (`bench/src/bin/soak.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyUsage {
    /// Registered memory regions.
    pub regions: u64,
    /// Allocated type-2 memory windows, bound or not.
    pub windows: u64,
    /// Memory windows currently bound (their rkey is valid).
    pub windows_bound: u64,
}

impl SoftDevice {
    /// The device's protection-table entries in use now: registered regions, allocated
    /// memory windows and bound ones. Control path (scans the whole table); a snapshot that
    /// is exact only while nothing registers, binds or invalidates concurrently. Added for
    /// leak checks (issue 13 §3, fault-injection soak): after a run, the counts must be back
    /// at their start values.
    pub fn key_usage(&self) -> KeyUsage {
        self.inner.keys.usage()
    }
}

fn check_opts(
    dev: &DeviceInner,
    init: &QpInit<'_, SoftProvider>,
    call: VerbsCall,
) -> Result<(), VerbsError> {
    let o = &init.opts;
    // Depths, SGE counts, inline size against the device (shared with the rdma provider).
    validate::qp_opts(o, init.srq.is_some(), &dev.caps, call)?;
    // The soft provider also refuses a QP without receives and out-of-range retry counts (the
    // rdma provider clamps those).
    let bad = (init.srq.is_none() && o.max_recv_wr == 0)
        || o.rnr_retry_count > RNR_RETRY_INFINITE
        || o.retry_count > 7;
    let foreign = !core::ptr::eq(&*init.pd.dev, dev)
        || !core::ptr::eq(&*init.send_cq.shared.dev, dev)
        || !core::ptr::eq(&*init.recv_cq.shared.dev, dev)
        || init
            .srq
            .is_some_and(|s| !core::ptr::eq(&*s.shared.dev, dev));
    if bad || foreign {
        return Err(VerbsError::new(call, errno::EINVAL));
    }
    Ok(())
}

fn new_qp(
    dev: &Arc<DeviceInner>,
    init: &QpInit<'_, SoftProvider>,
    local: SocketAddr,
    peer: SocketAddr,
) -> Arc<QpShared> {
    let opts = validate::qp_opts_in_force(init.opts, init.srq.is_some(), &dev.caps);
    let qpn = dev.alloc_qpn();
    QpShared::new(
        dev.clone(),
        qpn,
        init.pd.id,
        init.send_cq.shared.clone(),
        init.recv_cq.shared.clone(),
        init.srq.map(|s| s.shared.clone()),
        opts,
        local,
        peer,
    )
}

impl Device<SoftProvider> for SoftDevice {
    fn caps(&self) -> &DeviceCaps {
        &self.inner.caps
    }

    fn local_ip(&self) -> IpAddr {
        self.inner.ip
    }

    fn alloc_pd(&self) -> Result<SoftPd, VerbsError> {
        // Relaxed: a unique-number counter.
        let id = self.inner.next_pd.fetch_add(1, Ordering::Relaxed);
        Ok(SoftPd {
            dev: self.inner.clone(),
            id,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<SoftCq, VerbsError> {
        validate::cq_depth(depth, &self.inner.caps)?;
        Ok(SoftCq::new(self.inner.clone(), depth))
    }

    fn create_srq(&self, pd: &SoftPd, max_wr: u32, max_sge: u32) -> Result<SoftSrq, VerbsError> {
        validate::srq(max_wr, max_sge, &self.inner.caps)?;
        if !core::ptr::eq(&*pd.dev, &*self.inner) {
            return Err(VerbsError::new(VerbsCall::CreateSrq, errno::EINVAL));
        }
        Ok(SoftSrq::new(self.inner.clone(), pd.id, max_wr, max_sge))
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<SoftListener, VerbsError> {
        if !addr.ip().is_unspecified() && addr.ip() != self.inner.ip {
            return Err(VerbsError::new(VerbsCall::Listen, errno::EADDRNOTAVAIL));
        }
        let shared = Arc::new(ListenerShared {
            requests: ArrayQueue::new(backlog.clamp(1, 4096) as usize),
        });
        let mut map = self
            .inner
            .fabric
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&addr) {
            return Err(VerbsError::new(VerbsCall::Listen, errno::EADDRINUSE));
        }
        map.insert(addr, shared.clone());
        drop(map);
        let local = if addr.ip().is_unspecified() {
            SocketAddr::new(self.inner.ip, addr.port())
        } else {
            addr
        };
        Ok(SoftListener {
            dev: self.inner.clone(),
            addr,
            local,
            shared,
        })
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit<'_, SoftProvider>,
        private_data: &[u8],
    ) -> Result<SoftQp, VerbsError> {
        validate::private_data(private_data, &self.inner.caps, VerbsCall::Connect)?;
        check_opts(&self.inner, &init, VerbsCall::Connect)?;
        let fabric = &self.inner.fabric;
        // Relaxed: a unique-number counter.
        let port = 40000 + (fabric.next_port.fetch_add(1, Ordering::Relaxed) % 20000) as u16;
        let local = SocketAddr::new(self.inner.ip, port);
        let qp = new_qp(&self.inner, &init, local, addr);
        let unreachable = fabric
            .unreachable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&addr);
        if unreachable {
            qp.fail_connect(CmEventKind::Unreachable, -errno::ETIMEDOUT, &[]);
            return Ok(SoftQp::new(qp));
        }
        let listener = {
            let map = fabric.listeners.lock().unwrap_or_else(|e| e.into_inner());
            map.get(&addr)
                .or_else(|| {
                    let any = match addr {
                        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                        SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                    };
                    map.get(&SocketAddr::new(any, addr.port()))
                })
                .cloned()
        };
        let Some(listener) = listener else {
            qp.fail_connect(CmEventKind::Rejected, REJECT_NO_LISTENER, &[]);
            return Ok(SoftQp::new(qp));
        };
        let req = PendingConn {
            client: qp.clone(),
            private_data: PrivateData::new(private_data).unwrap_or(PrivateData::EMPTY),
        };
        if listener.requests.push(req).is_err() {
            // Backlog full: the request is dropped and the CM times out.
            qp.fail_connect(CmEventKind::Unreachable, -errno::ETIMEDOUT, &[]);
        }
        Ok(SoftQp::new(qp))
    }
}

// ---------------------------------------------------------------------------------------------
// Connection management
// ---------------------------------------------------------------------------------------------

struct PendingConn {
    client: Arc<QpShared>,
    private_data: PrivateData,
}

struct ListenerShared {
    requests: ArrayQueue<PendingConn>,
}

/// A soft listening id.
pub struct SoftListener {
    dev: Arc<DeviceInner>,
    addr: SocketAddr,
    local: SocketAddr,
    shared: Arc<ListenerShared>,
}

impl core::fmt::Debug for SoftListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftListener({})", self.local)
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        self.dev
            .fabric
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.addr);
        while let Some(p) = self.shared.requests.pop() {
            p.client
                .fail_connect(CmEventKind::Rejected, REJECT_NO_LISTENER, &[]);
        }
    }
}

impl Listener<SoftProvider> for SoftListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(&mut self) -> Result<Option<SoftConnRequest>, VerbsError> {
        Ok(self.shared.requests.pop().map(|p| SoftConnRequest {
            dev: self.dev.clone(),
            local: self.local,
            pending: Some(p),
        }))
    }
}

/// A soft connect request.
pub struct SoftConnRequest {
    dev: Arc<DeviceInner>,
    local: SocketAddr,
    pending: Option<PendingConn>,
}

impl core::fmt::Debug for SoftConnRequest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftConnRequest(from {})", self.peer_addr())
    }
}

impl Drop for SoftConnRequest {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.client
                .fail_connect(CmEventKind::Rejected, REJECT_CONSUMER, &[]);
        }
    }
}

impl ConnRequest<SoftProvider> for SoftConnRequest {
    fn private_data(&self) -> &[u8] {
        self.pending
            .as_ref()
            .map_or(&[][..], |p| p.private_data.as_slice())
    }

    fn peer_addr(&self) -> SocketAddr {
        self.pending
            .as_ref()
            .map_or(self.local, |p| p.client.local_addr)
    }

    fn initiator_depth(&self) -> u8 {
        self.pending
            .as_ref()
            .map_or(0, |p| p.client.opts.initiator_depth)
    }

    fn responder_resources(&self) -> u8 {
        self.pending
            .as_ref()
            .map_or(0, |p| p.client.opts.responder_resources)
    }

    fn accept_prepared(
        mut self,
        init: QpInit<'_, SoftProvider>,
        private_data: &[u8],
        prepare: &mut dyn FnMut(&mut SoftQp) -> Result<(), VerbsError>,
    ) -> Result<SoftQp, VerbsError> {
        validate::private_data(private_data, &self.dev.caps, VerbsCall::Accept)?;
        check_opts(&self.dev, &init, VerbsCall::Accept)?;
        let Some(p) = self.pending.take() else {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        };
        let client = p.client;
        if client.state() != crate::verbs::QpState::Init {
            // The requester gave up (destroyed, disconnected) meanwhile.
            return Err(VerbsError::new(VerbsCall::Accept, errno::ENOTCONN));
        }
        let mut qp = SoftQp::new(new_qp(&self.dev, &init, self.local, client.local_addr));
        // The QP is in INIT: receives posted here are in place before the requester can send.
        if let Err(e) = prepare(&mut qp) {
            client.fail_connect(CmEventKind::Rejected, REJECT_CONSUMER, &[]);
            return Err(e);
        }
        let server = Arc::clone(&qp.shared);
        // Read depths: each side issues at most what the other serves.
        let c_init = client
            .opts
            .initiator_depth
            .min(server.opts.responder_resources);
        let s_init = server
            .opts
            .initiator_depth
            .min(client.opts.responder_resources);
        // Relaxed: published to the owners by the Established events / state changes below.
        client.initiator_depth.store(c_init, Ordering::Relaxed);
        server.responder_resources.store(c_init, Ordering::Relaxed);
        server.initiator_depth.store(s_init, Ordering::Relaxed);
        client.responder_resources.store(s_init, Ordering::Relaxed);
        // Receiver side first: the client must be able to receive before the server can send.
        client.establish(&server);
        server.establish(&client);
        client.push_event(CmEventKind::Established, 0, private_data);
        server.push_event(CmEventKind::Established, 0, &[]);
        Ok(qp)
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        validate::private_data(private_data, &self.dev.caps, VerbsCall::Reject)?;
        if let Some(p) = self.pending.take() {
            p.client
                .fail_connect(CmEventKind::Rejected, REJECT_CONSUMER, private_data);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------------------------

impl Provider for SoftProvider {
    const NAME: &'static str = "soft";
    type Device = SoftDevice;
    type Pd = SoftPd;
    type Mr = SoftMr;
    type Mw = SoftMw;
    type Cq = SoftCq;
    type Srq = SoftSrq;
    type Qp = SoftQp;
    type Listener = SoftListener;
    type ConnRequest = SoftConnRequest;

    fn open(local: IpAddr) -> Result<SoftDevice, VerbsError> {
        Ok(SoftFabric::global().open(local))
    }
}

// ---------------------------------------------------------------------------------------------
// Conformance environment
// ---------------------------------------------------------------------------------------------

/// The conformance-suite environment for the soft provider: an isolated fabric with a client
/// device (10.0.0.1) and a server device (10.0.0.2). (The suite's `Env` is implemented with
/// the cargo feature `conformance`; the fabric and devices are usable without it.)
pub struct SoftEnv {
    fabric: SoftFabric,
    client: SoftDevice,
    server: SoftDevice,
    /// Last listening port handed out (read only by the suite's `Env::listen_addr`).
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    next_port: u16,
}

impl core::fmt::Debug for SoftEnv {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SoftEnv")
    }
}

impl Default for SoftEnv {
    fn default() -> Self {
        SoftEnv::new()
    }
}

impl SoftEnv {
    /// A fresh environment on its own fabric.
    pub fn new() -> SoftEnv {
        SoftEnv::on(SoftFabric::new())
    }

    /// A fresh environment on `fabric` (e.g. one with a trace hook).
    pub fn on(fabric: SoftFabric) -> SoftEnv {
        SoftEnv::on_with(fabric, SoftConfig::default())
    }

    /// A fresh environment on its own fabric whose two devices use `config` (e.g. without
    /// memory windows, to see the suite skip what they cannot run).
    pub fn with_config(config: SoftConfig) -> SoftEnv {
        SoftEnv::on_with(SoftFabric::new(), config)
    }

    fn on_with(fabric: SoftFabric, config: SoftConfig) -> SoftEnv {
        let client = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), config);
        let server = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), config);
        SoftEnv {
            fabric,
            client,
            server,
            next_port: 20049,
        }
    }

    /// The environment's fabric.
    pub fn fabric(&self) -> &SoftFabric {
        &self.fabric
    }

    /// The client device.
    pub fn client_dev(&self) -> &SoftDevice {
        &self.client
    }

    /// The server device.
    pub fn server_dev(&self) -> &SoftDevice {
        &self.server
    }

    /// A new PD on the client device.
    pub fn client_pd(&self) -> SoftPd {
        SoftPd {
            dev: self.client.inner.clone(),
            id: self.client.inner.next_pd.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A new PD on the server device.
    pub fn server_pd(&self) -> SoftPd {
        SoftPd {
            dev: self.server.inner.clone(),
            id: self.server.inner.next_pd.fetch_add(1, Ordering::Relaxed),
        }
    }
}

#[cfg(feature = "conformance")]
impl super::conformance::Env for SoftEnv {
    type P = SoftProvider;

    fn client(&self) -> &SoftDevice {
        &self.client
    }

    fn server(&self) -> &SoftDevice {
        &self.server
    }

    fn listen_addr(&mut self) -> SocketAddr {
        self.next_port = self.next_port.wrapping_add(1).max(1024);
        SocketAddr::new(self.server.inner.ip, self.next_port)
    }

    fn settle_iterations(&self) -> u32 {
        20
    }
}
