//! The ibverbs + rdma_cm provider (cargo feature `rdma`, over the `rdma-sys` bindings; needs
//! libibverbs and librdmacm).
//!
//! Normal operation: a [`RdmaDevice`] is opened by local IP address (an rdma_cm id bound to
//! the address on its own non-blocking event channel gives the verbs context), protection
//! domains, completion queues, SRQs and memory windows are plain verbs objects on that context
//! (each CQ with its own completion channel, so an idle owner can sleep until a completion:
//! [`CompletionQueue::wait_fd`](super::CompletionQueue::wait_fd)), and every QP lives on its
//! own rdma_cm id, all ids on one process-wide non-blocking event channel (`cm.rs`), so
//! connection progress (address and route resolution, connect, accept, disconnect) is driven by
//! polling ([`QueuePair::poll_event`](super::QueuePair::poll_event),
//! [`Listener::poll`](super::Listener::poll)) and never blocks. Work requests are built into
//! per-QP arrays preallocated at QP creation (sized by the queue depths, SGEs and inline data
//! included) and posted as one chain by one `ibv_post_send` / `ibv_post_recv` (one doorbell);
//! completions are polled in bursts into a stack array of `ibv_wc`. Nothing on the data path
//! allocates.
//!
//! Recovery: every failing call becomes a [`VerbsError`] naming the call and carrying its errno
//! (`ENODEV` when the host has no RDMA devices at all); work-request errors arrive as
//! completions with a non-success status. A QP that saw an error completion, a `Disconnected`
//! event or [`QueuePair::disconnect`](super::QueuePair::disconnect) stops the send/receive
//! queue accounting and lets the device flush whatever is posted. A CQ overrun (the async
//! `IBV_EVENT_CQ_ERR`, read from the context's non-blocking async fd every
//! [`ASYNC_CHECK_INTERVAL`] empty polls) makes every later poll of that CQ fail with
//! `EOVERFLOW`. Objects are freed in `Drop` in dependency order (QP before its id before its
//! channel; MRs, MWs, QPs and SRQs before their PD; PD and CQs before the device's anchor id),
//! which every handle guarantees by holding `Arc`s to what it depends on.
//!
//! Queue accounting: the provider counts outstanding send and receive work requests per QP (and
//! per SRQ) against the depths the caller asked for, so a full queue is reported as `ENOMEM` by
//! `queue_send` / `queue_recv` *before* anything reaches the device, and a batch is never
//! half-posted because the device queue was full. Slots free when the CQ that receives the
//! completions is polled (a signaled send completion frees its WR and every unsignaled WR before
//! it; each receive completion frees one receive).
//!
//! See `docs/rdma-provider.md` for the call mapping and the behaviour differences observed
//! between this provider, the soft provider, rxe and siw.

mod channel;
mod cm;
mod cq;
mod mem;
mod netns;
mod owned;
mod qp;

#[cfg(test)]
mod tests;

use core::ffi::c_int;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::path::Path;
use std::sync::Arc;

use rdma_sys as sys;

use super::{
    errno, Device, DeviceCaps, Provider, QpInit, Transport, VerbsCall, VerbsError,
    PRIVATE_DATA_ACCEPT_MAX, PRIVATE_DATA_CONNECT_MAX, PRIVATE_DATA_REJECT_MAX,
};

pub use cm::{RdmaConnRequest, RdmaListener};
pub use cq::{RdmaCq, ASYNC_CHECK_INTERVAL, POLL_BURST};
pub use mem::{RdmaMr, RdmaMw, RdmaPd, RdmaReg, RdmaSrq};
pub use qp::RdmaQp;

/// Timeout of `rdma_resolve_addr` and `rdma_resolve_route`, in milliseconds.
pub const RESOLVE_TIMEOUT_MS: c_int = 2000;

/// The ibverbs + rdma_cm provider.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rdma;

impl Provider for Rdma {
    const NAME: &'static str = "rdma";
    type Device = RdmaDevice;
    type Pd = RdmaPd;
    type Mr = RdmaMr;
    type Mw = RdmaMw;
    type Cq = RdmaCq;
    type Srq = RdmaSrq;
    type Qp = RdmaQp;
    type Listener = RdmaListener;
    type ConnRequest = RdmaConnRequest;

    fn open(local: IpAddr) -> Result<RdmaDevice, VerbsError> {
        RdmaDevice::open(local)
    }
}

// ---------------------------------------------------------------------------------------------
// errno helpers
// ---------------------------------------------------------------------------------------------

/// The calling thread's errno (`EIO` when it is 0, so an error never reads as success).
fn last_errno() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(e) if e != 0 => e,
        _ => errno::EIO,
    }
}

/// A [`VerbsError`] for `call` with the calling thread's errno.
fn os_err(call: VerbsCall) -> VerbsError {
    VerbsError::new(call, last_errno())
}

/// A [`VerbsError`] for `call` from an ibverbs return value (a positive errno, or -1 / a
/// negative errno for providers that return those).
fn ret_err(call: VerbsCall, ret: c_int) -> VerbsError {
    let e = if ret == -1 {
        last_errno()
    } else if ret < 0 {
        ret.saturating_neg()
    } else {
        ret
    };
    VerbsError::new(call, e)
}

/// Clamps a device attribute (a C `int`) to `u32`.
fn attr_u32(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// sockaddr conversion
// ---------------------------------------------------------------------------------------------

/// `addr` as a `sockaddr_storage` (`sockaddr_in` or `sockaddr_in6`).
fn to_sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    ss
}

/// Reads a `sockaddr_in` / `sockaddr_in6` (`None` for other families or a null pointer).
///
/// # Safety
/// `sa` is null or points to a socket address of at least the size its family implies.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    match c_int::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*sa.cast::<libc::sockaddr_in>();
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            let sin6 = &*sa.cast::<libc::sockaddr_in6>();
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The source and destination addresses of an rdma_cm id's route.
///
/// # Safety
/// `id` points to a live `rdma_cm_id`.
unsafe fn id_addrs(id: *mut sys::rdma_cm_id) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let addr = &(*id).route.addr;
    let src = from_sockaddr(&addr.src_addr_union.src_addr);
    let dst = from_sockaddr(&addr.dst_addr_union.dst_addr);
    (src, dst)
}

// ---------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------

/// The device context and the anchor rdma_cm id that keeps librdmacm's reference to it.
pub(crate) struct DeviceInner {
    /// Anchor id, bound to the device's local address (port 0), on the event hub (not
    /// registered: nothing is expected on it).
    id: *mut sys::rdma_cm_id,
    /// The verbs context (`id->verbs`; owned by librdmacm).
    ctx: *mut sys::ibv_context,
    caps: DeviceCaps,
    local: IpAddr,
    name: String,
    iwarp: bool,
    /// The network namespace the device was opened in (ids for it are created there).
    netns: Option<netns::NetNs>,
    /// rxe (Linux 6.1 and others) reports a receive's Send With Invalidate with the kernel's
    /// `IB_WC_WITH_INVALIDATE` bit (1 << 2, which is `IBV_WC_IP_CSUM_OK` in ibverbs) instead of
    /// `IBV_WC_WITH_INV` (1 << 3): completions of this device get the bit translated.
    wc_inv_quirk: bool,
}

// SAFETY: ibverbs contexts and rdma_cm ids may be used from any thread; the anchor id is only
// touched at creation and in Drop.
unsafe impl Send for DeviceInner {}
// SAFETY: see Send; shared access only reads immutable fields or calls thread-safe verbs.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: the id was created by rdma_create_id and nothing else refers to it; every
        // event was acknowledged by the hub (none are expected).
        unsafe {
            sys::rdma_destroy_id(self.id);
        }
    }
}

impl DeviceInner {
    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        self.ctx
    }
    pub(crate) fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    pub(crate) fn wc_inv_quirk(&self) -> bool {
        self.wc_inv_quirk
    }

    /// Creates an id on the event hub and binds it to `addr`, in the device's network
    /// namespace. Returns the hub and the id (guarded: destroyed on drop unless forgotten).
    pub(crate) fn bound_id(
        &self,
        addr: SocketAddr,
        call: VerbsCall,
    ) -> Result<(&'static cm::Hub, cm::IdGuard), VerbsError> {
        netns::run_in(self.netns.as_ref(), call, || bind_new_id(addr, call))
    }

    /// Runs `f` in the device's network namespace (calls that make sockets: siw creates its
    /// TCP socket in the caller's namespace on `rdma_listen` and `rdma_connect`).
    pub(crate) fn in_netns<T>(
        &self,
        call: VerbsCall,
        f: impl FnOnce() -> Result<T, VerbsError>,
    ) -> Result<T, VerbsError> {
        netns::run_in(self.netns.as_ref(), call, f)
    }
}

/// A new id on the event hub bound to `addr` (in the calling thread's namespace).
fn bind_new_id(
    addr: SocketAddr,
    call: VerbsCall,
) -> Result<(&'static cm::Hub, cm::IdGuard), VerbsError> {
    let hub = cm::hub(call)?;
    let guard = hub.create_id(call)?;
    let mut sa = to_sockaddr(addr);
    // SAFETY: the id is live; sa is a valid sockaddr for its family.
    let rc =
        unsafe { sys::rdma_bind_addr(guard.0, (&mut sa as *mut libc::sockaddr_storage).cast()) };
    if rc != 0 {
        let e = os_err(call);
        drop(guard);
        return Err(e);
    }
    Ok((hub, guard))
}

/// An opened device (see [`Device`]).
pub struct RdmaDevice {
    inner: Arc<DeviceInner>,
}

impl core::fmt::Debug for RdmaDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RdmaDevice")
            .field("name", &self.inner.name)
            .field("local", &self.inner.local)
            .field("iwarp", &self.inner.iwarp)
            .finish()
    }
}

impl RdmaDevice {
    /// Opens the device owning `local`: a non-blocking event channel, `rdma_create_id`,
    /// `rdma_bind_addr(local:0)`, then `ibv_query_device` on the id's context.
    ///
    /// Errors: `OpenDevice` with `ENODEV` when the host has no RDMA stack or no device, the
    /// errno of `rdma_bind_addr` (`EADDRNOTAVAIL`, `ENODEV`) when `local` is not an address of
    /// an RDMA device; `QueryDevice` when the device cannot be queried.
    pub fn open(local: IpAddr) -> Result<RdmaDevice, VerbsError> {
        RdmaDevice::open_ns(local, netns::NetNs::current())
    }

    /// Like [`RdmaDevice::open`], with the device's address living in the network namespace at
    /// `netns` (e.g. `/run/netns/peer`, as made by `ip netns add`). Listeners and connections of
    /// the device are then created in that namespace, whatever thread calls. Needs
    /// `CAP_SYS_ADMIN` when it is not the caller's namespace.
    pub fn open_in_netns(local: IpAddr, netns: &Path) -> Result<RdmaDevice, VerbsError> {
        let ns = netns::NetNs::open(netns, VerbsCall::OpenDevice)?;
        RdmaDevice::open_ns(local, Some(ns))
    }

    fn open_ns(local: IpAddr, ns: Option<netns::NetNs>) -> Result<RdmaDevice, VerbsError> {
        let (_hub, guard) = netns::run_in(ns.as_ref(), VerbsCall::OpenDevice, || {
            bind_new_id(SocketAddr::new(local, 0), VerbsCall::OpenDevice)
        })?;
        let id = guard.0;
        // SAFETY: id is live; after a successful bind `verbs` is the device's context or null.
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(VerbsError::new(VerbsCall::OpenDevice, errno::ENODEV));
        }
        // SAFETY: ctx is a live context owned by librdmacm; device is non-null for it.
        let (name, iwarp) = unsafe {
            let dev = (*ctx).device;
            if dev.is_null() {
                (String::from("?"), false)
            } else {
                let name = CStr::from_ptr((*dev).name.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                (
                    name,
                    (*dev).transport_type == sys::ibv_transport_type::IBV_TRANSPORT_IWARP,
                )
            }
        };
        let (caps, vendor_id) = query_caps(ctx, iwarp)?;
        let wc_inv_quirk = vendor_id == RXE_VENDOR_ID;
        // The async fd is read without blocking (CQ overrun detection).
        // SAFETY: ctx is live; async_fd is its descriptor.
        unsafe {
            channel::set_nonblocking((*ctx).async_fd);
        }
        log_device(&name, local, iwarp, &caps);
        core::mem::forget(guard);
        Ok(RdmaDevice {
            inner: Arc::new(DeviceInner {
                id,
                ctx,
                caps,
                local,
                name,
                iwarp,
                netns: ns,
                wc_inv_quirk,
            }),
        })
    }

    /// The device name (`ibv_get_device_name`, e.g. `rxe0`, `siw0`, `mlx5_0`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// True for an iWARP device (`IBV_TRANSPORT_IWARP`).
    pub fn is_iwarp(&self) -> bool {
        self.inner.iwarp
    }
}

/// `vendor_id` of Soft-RoCE (rxe).
const RXE_VENDOR_ID: u32 = crate::verbs::vendor::RXE;

/// Logs what a device opened for `local` offers (`debug`), and at `warn` what it lacks that
/// the upper layers work around (type-2 memory windows, Send With Invalidate).
#[cold]
fn log_device(name: &str, local: IpAddr, iwarp: bool, caps: &DeviceCaps) {
    tracing::debug!(device = name, %local, iwarp, ?caps, "device opened");
    if !caps.mw_type2 || !caps.send_with_invalidate {
        tracing::warn!(
            device = name,
            %local,
            mw_type2 = caps.mw_type2,
            send_with_invalidate = caps.send_with_invalidate,
            "device lacks type-2 memory windows or Send With Invalidate; upper layers fall back"
        );
    }
}

/// `ibv_query_device` + the inline-data probe, as [`DeviceCaps`], and the vendor id.
fn query_caps(ctx: *mut sys::ibv_context, iwarp: bool) -> Result<(DeviceCaps, u32), VerbsError> {
    // SAFETY: ibv_device_attr is plain old data.
    let mut attr: sys::ibv_device_attr = unsafe { core::mem::zeroed() };
    // SAFETY: ctx is a live context; attr is writable.
    let rc = unsafe { sys::ibv_query_device(ctx, &mut attr) };
    if rc != 0 {
        return Err(ret_err(VerbsCall::QueryDevice, rc));
    }
    let flags = attr.device_cap_flags;
    let bit = |f: sys::ibv_device_cap_flags| flags & f.0 != 0;
    let mw_type2 = bit(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A)
        || bit(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B);
    let send_with_invalidate = bit(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_MGT_EXTENSIONS);
    let caps = DeviceCaps {
        max_qp: attr_u32(attr.max_qp),
        max_qp_wr: attr_u32(attr.max_qp_wr),
        max_sge: attr_u32(attr.max_sge),
        max_sge_rd: attr_u32(attr.max_sge_rd),
        max_inline_data: probe_inline(ctx),
        max_cq: attr_u32(attr.max_cq),
        max_cqe: attr_u32(attr.max_cqe),
        max_mr: attr_u32(attr.max_mr),
        max_mw: attr_u32(attr.max_mw),
        max_pd: attr_u32(attr.max_pd),
        max_mr_size: attr.max_mr_size,
        max_srq: attr_u32(attr.max_srq),
        max_srq_wr: attr_u32(attr.max_srq_wr),
        max_qp_rd_atom: attr_u32(attr.max_qp_rd_atom),
        max_qp_init_rd_atom: attr_u32(attr.max_qp_init_rd_atom),
        mw_type2,
        send_with_invalidate,
        max_private_data_connect: PRIVATE_DATA_CONNECT_MAX as u32,
        max_private_data_accept: PRIVATE_DATA_ACCEPT_MAX as u32,
        max_private_data_reject: PRIVATE_DATA_REJECT_MAX as u32,
        transport: if iwarp {
            Transport::Iwarp
        } else {
            Transport::Ib
        },
        vendor_id: attr.vendor_id,
        vendor_part_id: attr.vendor_part_id,
    };
    Ok((caps, attr.vendor_id))
}

/// The largest inline size the device grants an RC QP: `ibv_device_attr` has no such field, so
/// a throw-away QP is created asking for decreasing sizes and the granted `cap.max_inline_data`
/// is taken (0 when no attempt succeeds).
fn probe_inline(ctx: *mut sys::ibv_context) -> u32 {
    const TRY: [u32; 6] = [1024, 512, 256, 128, 64, 32];
    // SAFETY: ctx is a live context; every object created here is destroyed before returning,
    // QP before CQ and PD.
    unsafe {
        let pd = sys::ibv_alloc_pd(ctx);
        if pd.is_null() {
            return 0;
        }
        let cq = sys::ibv_create_cq(ctx, 2, core::ptr::null_mut(), core::ptr::null_mut(), 0);
        let mut best = 0;
        if !cq.is_null() {
            for want in TRY {
                let mut init: sys::ibv_qp_init_attr = core::mem::zeroed();
                init.send_cq = cq;
                init.recv_cq = cq;
                init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
                init.cap.max_send_wr = 1;
                init.cap.max_recv_wr = 1;
                init.cap.max_send_sge = 1;
                init.cap.max_recv_sge = 1;
                init.cap.max_inline_data = want;
                let qp = sys::ibv_create_qp(pd, &mut init);
                if !qp.is_null() {
                    best = init.cap.max_inline_data.max(want);
                    sys::ibv_destroy_qp(qp);
                    break;
                }
            }
            sys::ibv_destroy_cq(cq);
        }
        sys::ibv_dealloc_pd(pd);
        best
    }
}

impl Device<Rdma> for RdmaDevice {
    fn caps(&self) -> &DeviceCaps {
        &self.inner.caps
    }

    fn local_ip(&self) -> IpAddr {
        self.inner.local
    }

    fn alloc_pd(&self) -> Result<RdmaPd, VerbsError> {
        RdmaPd::alloc(&self.inner)
    }

    fn create_cq(&self, depth: u32) -> Result<RdmaCq, VerbsError> {
        RdmaCq::create(&self.inner, depth)
    }

    fn cm_wait_fd(&self) -> Option<std::os::fd::RawFd> {
        cm::hub(VerbsCall::OpenDevice).ok().map(cm::Hub::fd)
    }

    fn poll_cm_events(&self) -> Result<(), VerbsError> {
        cm::hub(VerbsCall::GetCmEvent)?.poll()
    }

    fn create_srq(&self, pd: &RdmaPd, max_wr: u32, max_sge: u32) -> Result<RdmaSrq, VerbsError> {
        RdmaSrq::create(&self.inner, pd, max_wr, max_sge)
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<RdmaListener, VerbsError> {
        RdmaListener::listen(&self.inner, addr, backlog)
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit<'_, Rdma>,
        private_data: &[u8],
    ) -> Result<RdmaQp, VerbsError> {
        RdmaQp::connect(&self.inner, addr, init, private_data)
    }
}
