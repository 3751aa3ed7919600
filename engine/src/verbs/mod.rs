//! The verbs provider boundary, shaped like ibverbs + rdma_cm, and its providers.
//!
//! A provider is chosen at compile time: everything above this module is generic over
//! `P: `[`Provider`] (SPDK `rdma_provider` style), so the data path has no dynamic dispatch.
//! Every trait method maps onto one ibverbs / rdma_cm call (or a fixed short sequence of them);
//! the mapping table is in `docs/verbs.md`.
//!
//! Objects and who owns them:
//! - [`Device`]: an opened device context (`ibv_open_device` / the context an rdma_cm id is bound
//!   to) with its [`DeviceCaps`].
//! - [`ProtectionDomain`]: `ibv_alloc_pd`. Implements [`Registrar`] (memory registration,
//!   `ibv_reg_mr`; dropping the registration is `ibv_dereg_mr`) and allocates type-2 memory
//!   windows (`ibv_alloc_mw(pd, IBV_MW_TYPE_2)`).
//! - [`CompletionQueue`]: `ibv_create_cq` with a depth, shared by several QPs of one owner, polled
//!   in bursts into a caller array (`ibv_poll_cq`). An owner that sleeps when idle is woken
//!   either through a file descriptor (the `rdma` provider: the CQ's completion channel,
//!   [`CompletionQueue::wait_fd`], armed by [`CompletionQueue::arm_notify`]) or in-process
//!   ([`CompletionQueue::set_notify`], the soft provider).
//! - [`QueuePair`]: an RC QP together with its rdma_cm id (`rdma_create_qp` on the id). Work
//!   requests are *queued* ([`QueuePair::queue_send`], [`QueuePair::queue_recv`]) and handed to
//!   the device in one batch by [`QueuePair::flush_send`] / [`QueuePair::flush_recv`]: one
//!   `ibv_post_send` / `ibv_post_recv` (one doorbell) per batch. Connection events for the QP are
//!   polled without blocking ([`QueuePair::poll_event`]).
//! - [`SharedReceiveQueue`]: `ibv_create_srq`, optional.
//! - [`Listener`] / [`ConnRequest`]: the passive side of rdma_cm (`rdma_listen`,
//!   `RDMA_CM_EVENT_CONNECT_REQUEST`, `rdma_accept`, `rdma_reject`).
//!
//! Handles are self-contained: a QP keeps its CQs, PD and device alive internally, a
//! registration keeps its PD alive, so drop order between handles never causes use-after-free.
//!
//! Normal operation: connect/accept through the CM calls, register memory, queue work requests
//! and ring one doorbell per batch, poll completions in bursts, poll connection events.
//!
//! Recovery: errors from calls are [`VerbsError`] (the failing call + an errno-like code);
//! errors of work requests arrive as [`Completion`]s with a non-success [`WcStatus`], exactly
//! like ibverbs. After an error completion the QP is in the error state: everything outstanding
//! completes with `WR_FLUSH_ERR`, the owner disconnects and drops the QP, and the peer sees
//! `Disconnected`.
//!
//! Providers: [`soft`] (in-process, the default, used by all tests), [`iwarp`] (iWARP over
//! TCP sockets, across processes and hosts). The conformance suite in
//! `conformance` (cargo feature `conformance`) is generic over the provider.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod iwarp;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod region;
pub mod soft;
pub mod validate;
mod wr;

use core::fmt;
use std::net::{IpAddr, SocketAddr};

pub use rpcrdma_mempool::{Access, Keys, Registrar};
pub use wr::{
    Completion, MwBind, RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WrId,
};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// errno values used by [`VerbsError::errno`] (Linux numbering, so an ibverbs provider can pass
/// `errno` through unchanged).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// I/O error (device fatal).
    pub const EIO: i32 = 5;
    /// Try again (nothing available now).
    pub const EAGAIN: i32 = 11;
    /// Out of memory / queue full (`ibv_post_send` on a full send queue).
    pub const ENOMEM: i32 = 12;
    /// Resource busy.
    pub const EBUSY: i32 = 16;
    /// No such device.
    pub const ENODEV: i32 = 19;
    /// Invalid argument (bad work request, QP in the wrong state, ...).
    pub const EINVAL: i32 = 22;
    /// No space left (a fixed-size table is full).
    pub const ENOSPC: i32 = 28;
    /// Value too large (completion queue overrun).
    pub const EOVERFLOW: i32 = 75;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Address already in use (listen).
    pub const EADDRINUSE: i32 = 98;
    /// Cannot assign requested address.
    pub const EADDRNOTAVAIL: i32 = 99;
    /// Not connected.
    pub const ENOTCONN: i32 = 107;
    /// Connection timed out.
    pub const ETIMEDOUT: i32 = 110;
    /// Connection reset by peer (an iWARP / MPA reject reports `-ECONNRESET`).
    pub const ECONNRESET: i32 = 104;
    /// Connection refused.
    pub const ECONNREFUSED: i32 = 111;
    /// Operation already in progress.
    pub const EALREADY: i32 = 114;
}

/// The verbs / rdma_cm call that failed (named after the ibverbs / rdma_cm function).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerbsCall {
    /// `ibv_get_device_list` / `ibv_open_device` / `rdma_bind_addr`.
    OpenDevice,
    /// `ibv_query_device`.
    QueryDevice,
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_reg_mr`.
    RegMr,
    /// `ibv_dereg_mr`.
    DeregMr,
    /// `ibv_alloc_mw`.
    AllocMw,
    /// `ibv_dealloc_mw`.
    DeallocMw,
    /// `ibv_create_cq`.
    CreateCq,
    /// `ibv_poll_cq`.
    PollCq,
    /// `ibv_req_notify_cq` (arming a CQ's completion channel).
    ReqNotifyCq,
    /// `ibv_create_srq`.
    CreateSrq,
    /// `ibv_post_srq_recv`.
    PostSrqRecv,
    /// `rdma_create_qp` / `ibv_create_qp`.
    CreateQp,
    /// `ibv_modify_qp`.
    ModifyQp,
    /// `ibv_query_qp`.
    QueryQp,
    /// `ibv_post_send`.
    PostSend,
    /// `ibv_post_recv`.
    PostRecv,
    /// `rdma_create_id` + `rdma_bind_addr` + `rdma_listen`.
    Listen,
    /// `rdma_resolve_addr` / `rdma_resolve_route` / `rdma_connect`.
    Connect,
    /// `rdma_accept`.
    Accept,
    /// `rdma_reject`.
    Reject,
    /// `rdma_disconnect`.
    Disconnect,
    /// `rdma_get_cm_event` / `rdma_ack_cm_event`.
    GetCmEvent,
}

/// A failed verbs / rdma_cm call: which call and an errno-like code (see [`errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerbsError {
    /// The call that failed.
    pub call: VerbsCall,
    /// errno-like code (Linux numbering).
    pub errno: i32,
}

impl VerbsError {
    /// A new error.
    #[inline]
    pub const fn new(call: VerbsCall, errno: i32) -> VerbsError {
        VerbsError { call, errno }
    }

    /// What the errno means for this call, in words (the errno stays in the message for
    /// searching): a full send queue rather than "errno 12".
    pub fn cause(&self) -> &'static str {
        use errno::*;
        match (self.call, self.errno) {
            (VerbsCall::PostSend, ENOMEM) => "send queue full",
            (VerbsCall::PostRecv | VerbsCall::PostSrqRecv, ENOMEM) => "receive queue full",
            (VerbsCall::PostSend | VerbsCall::PostRecv, EINVAL) => {
                "work request refused (queue pair not ready, or bad SGE / opcode)"
            }
            (VerbsCall::RegMr, ENOMEM | EPERM) => {
                "memory registration refused (locked-memory limit, see `ulimit -l`)"
            }
            (VerbsCall::PollCq, EOVERFLOW) => "completion queue overrun",
            (_, ENOMEM) => "out of memory or resources",
            (_, EPERM) => "operation not permitted",
            (_, EIO) => "device I/O error",
            (_, EAGAIN) => "resource temporarily unavailable",
            (_, EBUSY) => "resource busy",
            (_, ENODEV) => "no RDMA device for this address",
            (_, EINVAL) => "invalid argument",
            (_, ENOSPC) => "table full",
            (_, EOPNOTSUPP) => "not supported by this device",
            (_, EADDRINUSE) => "address (port) already in use",
            (_, EADDRNOTAVAIL) => "address not on any RDMA device",
            (_, ENOTCONN) => "not connected",
            (_, ETIMEDOUT) => "timed out",
            (_, ECONNRESET) => "connection reset by the peer",
            (_, ECONNREFUSED) => "connection refused (no listener on that address and port)",
            (_, EALREADY) => "already in progress",
            _ => "failed",
        }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: {} (errno {})",
            self.call,
            self.cause(),
            self.errno
        )
    }
}

impl std::error::Error for VerbsError {}

// ---------------------------------------------------------------------------------------------
// Device capabilities
// ---------------------------------------------------------------------------------------------

/// RDMA-CM private data limit on a connect request for RC (IB CM REQ 92 bytes minus 36 for the
/// rdma_cm header).
pub const PRIVATE_DATA_CONNECT_MAX: usize = 56;
/// RDMA-CM private data limit on an accept (IB CM REP 196 bytes).
pub const PRIVATE_DATA_ACCEPT_MAX: usize = 196;
/// RDMA-CM private data limit on a reject (IB CM REJ 148 bytes).
pub const PRIVATE_DATA_REJECT_MAX: usize = 148;

/// The transport a device speaks (`ibv_device.transport_type`). Upper layers need it where the
/// transports behave differently (`docs/rdma-provider.md` section 2):
///
/// - [`Transport::Ib`] (InfiniBand, RoCE): a SEND that finds no receive is retried (RNR NAK) up
///   to the count the *peer* asked for; a remote error (bad rkey, receive too small) completes
///   the WR that caused it with a `REM_*` status.
/// - [`Transport::Iwarp`]: there is no RNR (a SEND without a receive ends the connection at the
///   receiver); a SEND / RDMA Write completes `SUCCESS` once handed to the transport, and a
///   remote error reaches the requester only as the connection being terminated (later WRs
///   flush, both sides get `Disconnected`), never as a `REM_*` status of the WR that caused it.
///   Rejects report negative errnos, not IB CM reject reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// InfiniBand transport (InfiniBand, RoCE v1/v2, Soft-RoCE; the soft provider).
    Ib,
    /// iWARP (RDMAP/DDP/MPA over TCP: soft-iWARP, Chelsio, Intel iWARP mode).
    Iwarp,
}

/// `vendor_id` values (`ibv_device_attr.vendor_id`) the conformance suite knows.
pub mod vendor {
    /// The soft provider (not a PCI vendor id).
    pub const SOFT: u32 = 0;
    /// Soft-RoCE (`rdma_rxe`).
    pub const RXE: u32 = 0x00ff_ffff;
    /// Soft-iWARP (`siw`, ASCII "bmt").
    pub const SIW: u32 = 0x0062_6d74;
}

/// What a device supports (`ibv_query_device` + rdma_cm limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Maximum number of QPs (`max_qp`).
    pub max_qp: u32,
    /// Maximum work requests per send or receive queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per work request (`max_sge`).
    pub max_sge: u32,
    /// Maximum scatter entries of an RDMA Read's local sink (`max_sge_rd`; siw: 1). An RDMA
    /// Read with more SGEs is refused with `EINVAL` by [`QueuePair::queue_send`].
    pub max_sge_rd: u32,
    /// Maximum inline data per send work request (`max_inline_data` of `ibv_qp_cap`; 0 = none).
    pub max_inline_data: u32,
    /// Maximum number of CQs (`max_cq`).
    pub max_cq: u32,
    /// Maximum CQ depth (`max_cqe`).
    pub max_cqe: u32,
    /// Maximum number of memory regions (`max_mr`).
    pub max_mr: u32,
    /// Maximum number of memory windows (`max_mw`).
    pub max_mw: u32,
    /// Maximum number of protection domains (`max_pd`).
    pub max_pd: u32,
    /// Largest registrable region in octets (`max_mr_size`).
    pub max_mr_size: u64,
    /// Maximum number of SRQs (`max_srq`; 0 = SRQs unsupported).
    pub max_srq: u32,
    /// Maximum work requests per SRQ (`max_srq_wr`).
    pub max_srq_wr: u32,
    /// Maximum outstanding RDMA Reads a QP can serve as responder (`max_qp_rd_atom`).
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA Reads a QP can initiate (`max_qp_init_rd_atom`).
    pub max_qp_init_rd_atom: u32,
    /// Type-2 memory windows supported (`IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B`).
    pub mw_type2: bool,
    /// Send With Invalidate / Local Invalidate supported (`IBV_DEVICE_MEM_MGT_EXTENSIONS`).
    pub send_with_invalidate: bool,
    /// Private data limit on connect (see [`PRIVATE_DATA_CONNECT_MAX`]).
    pub max_private_data_connect: u32,
    /// Private data limit on accept (see [`PRIVATE_DATA_ACCEPT_MAX`]).
    pub max_private_data_accept: u32,
    /// Private data limit on reject (see [`PRIVATE_DATA_REJECT_MAX`]).
    pub max_private_data_reject: u32,
    /// The transport (see [`Transport`] for what differs).
    pub transport: Transport,
    /// `vendor_id` of `ibv_query_device` (see [`vendor`]; identifies a device's known quirks).
    pub vendor_id: u32,
    /// `vendor_part_id` of `ibv_query_device`.
    pub vendor_part_id: u32,
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// The next key of a memory window: the low "key" byte incremented, the index bits kept
/// (`ibv_inc_rkey`). Type-2 binds must use a new key each time.
#[inline]
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// A generator of memory-window keys whose consumer key byte is not predictable from earlier
/// keys: splitmix64 over a seed the caller supplies (e.g. from the operating system's random
/// source), so the sequence is as unpredictable as the seed and reproducible in tests.
///
/// [`inc_rkey`] (what `ibv_inc_rkey` does) makes a window's next key its last key + 1: a peer
/// that saw one STag of a window knows the window's next one. [`KeyGen::next_rkey`] keeps the
/// index bits and draws the key byte, never equal to the previous one (a type-2 bind must use a
/// new key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGen {
    state: u64,
}

impl KeyGen {
    /// A generator seeded with `seed` (any value, 0 included).
    #[inline]
    pub const fn new(seed: u64) -> KeyGen {
        KeyGen { state: seed }
    }

    /// The next 64 random bits (splitmix64).
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The key for the next bind of a window whose current key is `rkey`: the index bits kept,
    /// a random key byte other than `rkey`'s.
    #[inline]
    pub fn next_rkey(&mut self, rkey: u32) -> u32 {
        let old = rkey & 0xff;
        loop {
            // Each 64-bit draw offers eight candidate bytes; at most one of 256 values is
            // refused, so this loops again with probability 2^-64.
            let mut bits = self.next_u64();
            for _ in 0..8 {
                let b = (bits & 0xff) as u32;
                if b != old {
                    return (rkey & 0xffff_ff00) | b;
                }
                bits >>= 8;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// QP state and options
// ---------------------------------------------------------------------------------------------

/// QP state (`enum ibv_qp_state`, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset = 0,
    /// `IBV_QPS_INIT`: receives may be posted.
    Init = 1,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr = 2,
    /// `IBV_QPS_RTS`: ready to send.
    Rts = 3,
    /// `IBV_QPS_SQD`.
    Sqd = 4,
    /// `IBV_QPS_SQE`.
    Sqe = 5,
    /// `IBV_QPS_ERR`: everything outstanding and newly posted completes with `WR_FLUSH_ERR`.
    Error = 6,
    /// `IBV_QPS_UNKNOWN`.
    Unknown = 7,
}

impl QpState {
    /// From the ibverbs numeric value (unknown values → `Unknown`).
    #[inline]
    pub const fn from_u8(v: u8) -> QpState {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Error,
            _ => QpState::Unknown,
        }
    }
}

/// RNR retry count meaning "retry forever".
pub const RNR_RETRY_INFINITE: u8 = 7;

/// QP creation and connection parameters (`ibv_qp_init_attr.cap` + `rdma_conn_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpOptions {
    /// Send queue depth (`cap.max_send_wr`).
    pub max_send_wr: u32,
    /// Receive queue depth (`cap.max_recv_wr`; ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send WR (`cap.max_send_sge`).
    pub max_send_sge: u32,
    /// SGEs per receive WR (`cap.max_recv_sge`).
    pub max_recv_sge: u32,
    /// Inline data per send WR (`cap.max_inline_data`).
    pub max_inline_data: u32,
    /// RNR retries **the peer** makes when its SENDs to this QP find no receive posted
    /// (`rdma_conn_param.rnr_retry_count`, 0..=7, 7 = infinite). As with rdma_cm over the IB
    /// CM, the value travels to the peer (the active side's in the REQ, the passive side's in
    /// the REP) and becomes the RNR retry count of the *peer's* QP; this QP's own sends use the
    /// count the peer gave. Default 0: a SEND to this QP without a receive is an error at the
    /// sender. Meaningless on iWARP (no RNR). [`QueuePair::options`] reports the value this side
    /// asked for.
    pub rnr_retry_count: u8,
    /// Transport retries (`retry_count`, 0..=7).
    pub retry_count: u8,
    /// Outstanding RDMA Reads this side may issue (`initiator_depth`).
    pub initiator_depth: u8,
    /// Outstanding RDMA Reads this side serves (`responder_resources`).
    pub responder_resources: u8,
}

impl Default for QpOptions {
    fn default() -> Self {
        QpOptions {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 0,
            rnr_retry_count: 0,
            retry_count: 7,
            initiator_depth: 16,
            responder_resources: 16,
        }
    }
}

/// What a new QP is attached to (`ibv_qp_init_attr` minus the caps, which are in
/// [`QpOptions`]).
pub struct QpInit<'a, P: Provider> {
    /// Protection domain of the QP.
    pub pd: &'a P::Pd,
    /// CQ receiving send-queue completions.
    pub send_cq: &'a P::Cq,
    /// CQ receiving receive completions (may be the same CQ).
    pub recv_cq: &'a P::Cq,
    /// Shared receive queue, if any (then the QP has no receive queue of its own).
    pub srq: Option<&'a P::Srq>,
    /// Depths and connection parameters.
    pub opts: QpOptions,
}

impl<P: Provider> Clone for QpInit<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Provider> Copy for QpInit<'_, P> {}

// ---------------------------------------------------------------------------------------------
// Connection manager events
// ---------------------------------------------------------------------------------------------

/// Private data carried by CM messages, stored inline (no allocation). Holds up to
/// [`PRIVATE_DATA_ACCEPT_MAX`] octets.
#[derive(Clone, Copy)]
pub struct PrivateData {
    len: u8,
    buf: [u8; PRIVATE_DATA_ACCEPT_MAX],
}

impl PrivateData {
    /// Empty private data.
    pub const EMPTY: PrivateData = PrivateData {
        len: 0,
        buf: [0; PRIVATE_DATA_ACCEPT_MAX],
    };

    /// Copies `data`; `None` when longer than [`PRIVATE_DATA_ACCEPT_MAX`].
    pub fn new(data: &[u8]) -> Option<PrivateData> {
        if data.len() > PRIVATE_DATA_ACCEPT_MAX {
            return None;
        }
        let mut p = PrivateData::EMPTY;
        p.buf[..data.len()].copy_from_slice(data);
        p.len = data.len() as u8;
        Some(p)
    }

    /// The octets.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData::EMPTY
    }
}

impl PartialEq for PrivateData {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for PrivateData {}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData({:02x?})", self.as_slice())
    }
}

/// rdma_cm event kinds a connected (or connecting) QP reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ESTABLISHED` (active side: carries the accept's private data).
    Established,
    /// `RDMA_CM_EVENT_REJECTED` (carries the reject's private data; `status` is the IB CM
    /// reject reason, 28 = consumer reject, 8 = no listener).
    Rejected,
    /// `RDMA_CM_EVENT_UNREACHABLE`: the peer did not answer.
    Unreachable,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_DISCONNECTED`: the connection is down; the QP is in the error state.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
}

/// IB CM reject reason: consumer reject (`rdma_reject`).
pub const REJECT_CONSUMER: i32 = 28;
/// IB CM reject reason: invalid service id (nobody listens on the address).
pub const REJECT_NO_LISTENER: i32 = 8;

/// One connection event (`struct rdma_cm_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmEvent {
    /// Kind.
    pub kind: CmEventKind,
    /// `event->status` (reject reason for `Rejected`, errno-like otherwise, 0 if none).
    pub status: i32,
    /// The peer's private data (`Established` on the active side, `Rejected`).
    pub private_data: PrivateData,
}

// ---------------------------------------------------------------------------------------------
// Traits
// ---------------------------------------------------------------------------------------------

/// A verbs provider: the set of object types that implement the boundary.
pub trait Provider: Sized + Send + Sync + 'static {
    /// Short name ("soft", "rdma", ...).
    const NAME: &'static str;
    /// An opened device context.
    type Device: Device<Self>;
    /// A protection domain.
    type Pd: ProtectionDomain<Self>;
    /// A memory registration (dropping it deregisters: `ibv_dereg_mr`).
    type Mr: MemoryRegion;
    /// A type-2 memory window (dropping it: `ibv_dealloc_mw`).
    type Mw: MemoryWindow;
    /// A completion queue.
    type Cq: CompletionQueue;
    /// A shared receive queue.
    type Srq: SharedReceiveQueue;
    /// An RC queue pair with its connection (rdma_cm id).
    type Qp: QueuePair<Self>;
    /// A listening rdma_cm id.
    type Listener: Listener<Self>;
    /// A pending connect request (the new rdma_cm id of `RDMA_CM_EVENT_CONNECT_REQUEST`).
    type ConnRequest: ConnRequest<Self>;

    /// Opens the device that owns local address `local` (`rdma_bind_addr` on an id +
    /// `ibv_query_device` on its context). The soft provider opens a device on the global
    /// fabric.
    fn open(local: IpAddr) -> Result<Self::Device, VerbsError>;
}

/// An opened device context.
pub trait Device<P: Provider>: Send + Sync {
    /// Capabilities (`ibv_query_device`, queried at open).
    fn caps(&self) -> &DeviceCaps;
    /// The local address the device was opened for.
    fn local_ip(&self) -> IpAddr;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<P::Pd, VerbsError>;
    /// `ibv_create_cq` with `depth` entries (with a completion channel where the provider
    /// wakes sleepers through the kernel: see [`CompletionQueue::wait_fd`]).
    fn create_cq(&self, depth: u32) -> Result<P::Cq, VerbsError>;
    /// A descriptor that becomes readable when a connection event (connect request,
    /// established, disconnected, ...) of this device's rdma_cm ids is pending, for an owner
    /// that sleeps in `poll(2)` when idle; `None` when the provider has none (the soft provider).
    /// Level-triggered and shared by every id of the process: whichever thread polls events
    /// next ([`Listener::poll`], [`QueuePair::poll_event`], [`Device::poll_cm_events`]) takes
    /// them all and queues each for its connection or listener, whose notice
    /// ([`QueuePair::set_event_notify`], [`Listener::set_notify`]) then wakes its owner.
    fn cm_wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Takes the pending connection events off [`Device::cm_wait_fd`] without blocking and
    /// queues each for its connection or listener (an owner about to sleep on the descriptor
    /// calls this first, so it never sleeps on a descriptor left readable by events it would
    /// not take itself). A no-op where there is no such descriptor.
    fn poll_cm_events(&self) -> Result<(), VerbsError> {
        Ok(())
    }
    /// `ibv_create_srq` on `pd` with `max_wr` entries of up to `max_sge` SGEs.
    fn create_srq(&self, pd: &P::Pd, max_wr: u32, max_sge: u32) -> Result<P::Srq, VerbsError>;
    /// `rdma_create_id` + `rdma_bind_addr(addr)` + `rdma_listen(backlog)`.
    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<P::Listener, VerbsError>;
    /// Active connect, non-blocking: `rdma_create_id`, `rdma_resolve_addr`,
    /// `rdma_resolve_route`, `rdma_create_qp(init)`, `rdma_connect(private_data, opts)`. The
    /// QP starts in INIT (receives may be posted at once); its outcome arrives through
    /// [`QueuePair::poll_event`]: `Established` (then RTS), `Rejected`, `Unreachable`, ...
    /// `private_data` is at most [`DeviceCaps::max_private_data_connect`] octets.
    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit<'_, P>,
        private_data: &[u8],
    ) -> Result<P::Qp, VerbsError>;
}

/// A protection domain: registers memory ([`Registrar`]) and allocates memory windows.
pub trait ProtectionDomain<P: Provider>:
    Registrar<Registration = P::Mr, Error = VerbsError> + Send + Sync
{
    /// `ibv_alloc_mw(pd, IBV_MW_TYPE_2)`: an unbound type-2 window.
    fn alloc_mw(&self) -> Result<P::Mw, VerbsError>;
}

/// A memory registration (`struct ibv_mr`). Dropping it deregisters (`ibv_dereg_mr`).
pub trait MemoryRegion: Send + Sync + 'static {
    /// lkey / rkey.
    fn keys(&self) -> Keys;
    /// Registered start address.
    fn addr(&self) -> u64;
    /// Registered length.
    fn len(&self) -> u64;
    /// True when the length is 0.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Rights given at registration.
    fn access(&self) -> Access;
}

/// A type-2 memory window (`struct ibv_mw`). Dropping it deallocates (`ibv_dealloc_mw`).
pub trait MemoryWindow: Send + Sync {
    /// The window's current key (`mw->rkey`): its initial key, then the key of the last
    /// BIND_MW queued on it.
    fn rkey(&self) -> u32;
    /// The key the next bind should use (`ibv_inc_rkey(mw->rkey)`).
    fn next_rkey(&self) -> u32 {
        inc_rkey(self.rkey())
    }
}

/// A completion queue.
pub trait CompletionQueue: Send {
    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, returns how many. Empty is
    /// `Ok(0)`. After a CQ overrun every call fails with `EOVERFLOW` (the async CQ error event).
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, VerbsError>;
    /// The depth the CQ was created with.
    fn depth(&self) -> u32;
    /// A completion channel for a polling owner that sleeps when idle (the role of
    /// `ibv_req_notify_cq` and a completion channel): `notify` runs on the producing thread
    /// after every completion the CQ queues, so it must be quick and must not block (a doorbell
    /// that wakes the owner only if it is about to sleep). Set once; returns `false` when the CQ
    /// cannot notify (the default) or already has a channel; the owner then keeps its sleeps
    /// short.
    fn set_notify(&mut self, _notify: CqNotify) -> bool {
        false
    }
    /// The CQ's completion channel descriptor (`ibv_comp_channel.fd`, non-blocking,
    /// close-on-exec), readable once a completion arrives after [`CompletionQueue::arm_notify`];
    /// `None` when the CQ wakes its owner in-process instead ([`CompletionQueue::set_notify`]).
    /// The owner sleeping in `poll(2)` follows the classic order: [`CompletionQueue::arm_notify`],
    /// poll the CQ once more (completions that arrived before the arm are seen there, later ones
    /// make the descriptor readable), then sleep.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Asks for one wake-up at the next completion: takes and acknowledges the channel events
    /// already delivered ([`CompletionQueue::consume_events`]), then `ibv_req_notify_cq(cq, 0)`.
    /// `Ok(false)`: the CQ has no completion channel (nothing was armed).
    fn arm_notify(&mut self) -> Result<bool, VerbsError> {
        Ok(false)
    }
    /// Takes the channel events delivered so far without blocking (`ibv_get_cq_event` until
    /// `EAGAIN`) and acknowledges them (`ibv_ack_cq_events`); returns how many. Every event is
    /// acknowledged before the CQ is destroyed.
    fn consume_events(&mut self) -> usize {
        0
    }
}

/// What a CQ calls after queueing a completion ([`CompletionQueue::set_notify`]).
pub type CqNotify = std::sync::Arc<dyn Fn() + Send + Sync>;

/// A shared receive queue.
pub trait SharedReceiveQueue: Send {
    /// Adds a receive to the current batch (checks SGE count and depth).
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError>;
    /// `ibv_post_srq_recv` of the batch (one doorbell; nothing if the batch is empty).
    fn flush_recv(&mut self) -> Result<(), VerbsError>;
    /// Doorbells rung so far.
    fn doorbells(&self) -> u64;
}

/// An RC queue pair and its connection.
pub trait QueuePair<P: Provider>: Send {
    /// QP number (`qp->qp_num`).
    fn qp_num(&self) -> u32;
    /// Current state (`ibv_query_qp(IBV_QP_STATE)`).
    fn state(&self) -> QpState;
    /// The options in force (after negotiation of read depths at connect/accept).
    fn options(&self) -> QpOptions;
    /// Local address of the connection.
    fn local_addr(&self) -> SocketAddr;
    /// Peer address of the connection.
    fn peer_addr(&self) -> SocketAddr;

    /// Adds a send WR to the current batch. Immediate errors, as `ibv_post_send` gives them:
    /// `EINVAL` (too many SGEs, an RDMA Read with more than [`DeviceCaps::max_sge_rd`] SGEs,
    /// inline data too long, QP not yet RTS/never connected, bad
    /// window key), `ENOMEM` (send queue full: outstanding + batched WRs would exceed
    /// `max_send_wr`; a send-queue slot frees when a later signaled completion or an error
    /// completion of the QP is generated). In the error state WRs are accepted and complete
    /// with `WR_FLUSH_ERR`.
    fn queue_send(&mut self, wr: &SendWr<'_, P>) -> Result<(), VerbsError>;
    /// `ibv_post_send` of the batch: one doorbell (nothing if the batch is empty).
    fn flush_send(&mut self) -> Result<(), VerbsError>;
    /// Adds a receive WR to the current batch (`EINVAL`: too many SGEs, QP has an SRQ, QP in
    /// RESET; `ENOMEM`: receive queue full).
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError>;
    /// `ibv_post_recv` of the batch: one doorbell (nothing if the batch is empty).
    fn flush_recv(&mut self) -> Result<(), VerbsError>;
    /// Doorbells rung by this QP so far (send + receive).
    fn doorbells(&self) -> u64;

    /// Next connection event, without blocking (`rdma_get_cm_event` on the id's own
    /// non-blocking channel + `rdma_ack_cm_event`). `Ok(None)`: nothing pending.
    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError>;
    /// Sets what runs (on whichever thread took it off the channel) after a connection event
    /// of this QP was queued for [`QueuePair::poll_event`], for an owner that sleeps when idle;
    /// quick and non-blocking, like [`CompletionQueue::set_notify`]. Returns `false` when the
    /// provider cannot notify (the default).
    fn set_event_notify(&self, _notify: CqNotify) -> bool {
        false
    }
    /// `rdma_disconnect`: both QPs go to the error state (outstanding WRs flush) and both
    /// sides get `Disconnected`.
    fn disconnect(&mut self) -> Result<(), VerbsError>;
}

/// A listening rdma_cm id.
pub trait Listener<P: Provider>: Send {
    /// The address listened on.
    fn local_addr(&self) -> SocketAddr;
    /// Next `RDMA_CM_EVENT_CONNECT_REQUEST`, without blocking. `Ok(None)`: nothing pending.
    fn poll(&mut self) -> Result<Option<P::ConnRequest>, VerbsError>;
    /// Sets what runs after a connect request was queued for [`Listener::poll`] (see
    /// [`QueuePair::set_event_notify`]). Returns `false` when the provider cannot notify.
    fn set_notify(&mut self, _notify: CqNotify) -> bool {
        false
    }
}

/// A connect request waiting for accept or reject. Dropping it rejects it (no private data).
pub trait ConnRequest<P: Provider>: Send {
    /// The requester's private data.
    fn private_data(&self) -> &[u8];
    /// The requester's address.
    fn peer_addr(&self) -> SocketAddr;
    /// The requester's `initiator_depth` (reads it will issue).
    fn initiator_depth(&self) -> u8;
    /// The requester's `responder_resources` (reads it will serve).
    fn responder_resources(&self) -> u8;
    /// `rdma_create_qp(init)` on the request's id + `rdma_accept(private_data)`: the QP is
    /// connected (RTS) and reports `Established`. The read depths are negotiated:
    /// ours = min(ours, the peer's opposite number). `private_data` is at most
    /// [`DeviceCaps::max_private_data_accept`] octets.
    fn accept(self, init: QpInit<'_, P>, private_data: &[u8]) -> Result<P::Qp, VerbsError>
    where
        Self: Sized,
    {
        self.accept_prepared(init, private_data, &mut |_| Ok(()))
    }
    /// `rdma_create_qp(init)`, then `prepare(&mut qp)` on the new QP before anything reaches
    /// the requester, then `rdma_accept(private_data)`: the order a responder needs to post its
    /// first receives before the requester can send (so a correct peer never meets an empty
    /// receive queue, and RNR retry can stay 0). An error from `prepare` aborts the accept (the
    /// requester sees the connection refused) and is returned.
    fn accept_prepared(
        self,
        init: QpInit<'_, P>,
        private_data: &[u8],
        prepare: &mut dyn FnMut(&mut P::Qp) -> Result<(), VerbsError>,
    ) -> Result<P::Qp, VerbsError>;
    /// `rdma_reject(private_data)` (at most [`DeviceCaps::max_private_data_reject`] octets).
    fn reject(self, private_data: &[u8]) -> Result<(), VerbsError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_wr_id_round_trip() {
        let w = WrId::new(0xa5, 0x00ab_cdef_0123_4567);
        assert_eq!(w.kind(), 0xa5);
        assert_eq!(w.index(), 0x00ab_cdef_0123_4567);
        assert_eq!(w.raw(), 0xa5ab_cdef_0123_4567);
        // Index bits above 56 are dropped, never leak into the kind.
        let w = WrId::new(1, u64::MAX);
        assert_eq!(w.kind(), 1);
        assert_eq!(w.index(), WrId::INDEX_MASK);
    }

    #[test]
    fn accepts_inc_rkey_like_ibverbs() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }

    #[test]
    fn accepts_keygen_keeping_the_index_and_changing_the_byte() {
        let mut g = KeyGen::new(7);
        let mut k = 0x1234_5600;
        let mut seen = [false; 256];
        for _ in 0..4096 {
            let n = g.next_rkey(k);
            assert_eq!(n >> 8, 0x12_3456, "index bits kept");
            assert_ne!(n, k, "a new key every bind");
            seen[(n & 0xff) as usize] = true;
            k = n;
        }
        assert!(seen.iter().all(|&s| s), "every key byte is drawn");
        // The seed is an input: the same seed gives the same keys.
        assert_eq!(KeyGen::new(9).next_rkey(5), KeyGen::new(9).next_rkey(5));
    }

    #[test]
    fn rejects_private_data_over_accept_limit() {
        assert!(PrivateData::new(&[7; PRIVATE_DATA_ACCEPT_MAX]).is_some());
        assert!(PrivateData::new(&[7; PRIVATE_DATA_ACCEPT_MAX + 1]).is_none());
        let p = PrivateData::new(b"abc").unwrap_or_default();
        assert_eq!(p.as_slice(), b"abc");
        assert_eq!(PrivateData::EMPTY.as_slice(), b"");
    }

    #[test]
    fn accepts_ibverbs_numeric_values() {
        assert_eq!(QpState::from_u8(6), QpState::Error);
        assert_eq!(QpState::from_u8(200), QpState::Unknown);
        assert_eq!(WcStatus::RNR_RETRY_EXC_ERR.0, 13);
        assert_eq!(WcStatus(99).name(), "UNKNOWN");
        assert_eq!(WcOpcode::RECV.0, 128);
        assert!(WcOpcode::RECV.is_recv() && !WcOpcode::LOCAL_INV.is_recv());
        assert_eq!(WcFlags::WITH_INV.0, 8);
        assert_eq!(SendFlags::INLINE.0, 8);
        assert_eq!(core::mem::size_of::<Sge>(), 16);
    }
}
