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
//!   in bursts into a caller array (`ibv_poll_cq`). No completion channel, no interrupts.
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
//! Providers: [`soft`] (in-process, the default, used by all tests). The conformance suite in
//! `conformance` (cargo feature `conformance`) is generic over the provider.

#[cfg(feature = "conformance")]
pub mod conformance;
/// The ibverbs + rdma_cm provider (cargo feature `rdma`; needs libibverbs and librdmacm).
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod region;
pub mod soft;
pub mod validate;

use core::fmt;
use std::net::{IpAddr, SocketAddr};

pub use rpcrdma_mempool::{Access, Keys, Registrar};

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
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} failed: errno {}", self.call, self.errno)
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
// Keys, scatter/gather, work requests
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

/// A scatter/gather entry. Same layout as `struct ibv_sge` (`addr`, `length`, `lkey`), so an
/// ibverbs provider can pass slices of it through unchanged.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Start address (local virtual address inside a registered region).
    pub addr: u64,
    /// Length in octets.
    pub len: u32,
    /// Local key of the region containing `[addr, addr + len)`.
    pub lkey: u32,
}

/// A work request identifier helper: a small `kind` in the top 8 bits, a slot index in the low
/// 56 bits. The provider never interprets `wr_id`; the engine uses this encoding so a completion
/// leads straight to a per-QP slot array (no map lookups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WrId(pub u64);

impl WrId {
    /// Bit position of the kind.
    pub const KIND_SHIFT: u32 = 56;
    /// Mask of the index bits.
    pub const INDEX_MASK: u64 = (1u64 << Self::KIND_SHIFT) - 1;

    /// Encodes `kind` and `index` (index bits above 56 are dropped).
    #[inline]
    pub const fn new(kind: u8, index: u64) -> WrId {
        WrId(((kind as u64) << Self::KIND_SHIFT) | (index & Self::INDEX_MASK))
    }

    /// The kind.
    #[inline]
    pub const fn kind(self) -> u8 {
        (self.0 >> Self::KIND_SHIFT) as u8
    }

    /// The slot index.
    #[inline]
    pub const fn index(self) -> u64 {
        self.0 & Self::INDEX_MASK
    }

    /// The raw `wr_id`.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }
}

/// Send work request flags (`IBV_SEND_*` bit values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// No flags: unsignaled, unfenced.
    pub const NONE: SendFlags = SendFlags(0);
    /// Wait for earlier RDMA Reads to complete before this WR starts (`IBV_SEND_FENCE`).
    pub const FENCE: SendFlags = SendFlags(1);
    /// Generate a completion on success (`IBV_SEND_SIGNALED`). Errors always complete.
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// Solicited event (`IBV_SEND_SOLICITED`; carried, no effect without completion channels).
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// Copy the gathered data at post time; lkeys are not checked (`IBV_SEND_INLINE`).
    pub const INLINE: SendFlags = SendFlags(1 << 3);

    /// True when every flag in `other` is set.
    #[inline]
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    #[inline]
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// The operation of a send-queue work request (`ibv_wr_opcode` plus its per-opcode fields).
pub enum SendOp<'a, P: Provider> {
    /// `IBV_WR_SEND`: consumes one receive at the peer.
    Send,
    /// `IBV_WR_SEND_WITH_INV`: a SEND that also invalidates `rkey` (a memory window bound at the
    /// peer to this connection) before the peer's receive completes.
    SendWithInv {
        /// The peer's rkey to invalidate.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE`: gather locally, write to the peer's `remote_addr` under `rkey`.
    RdmaWrite {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer rkey (MR or memory window).
        rkey: u32,
    },
    /// `IBV_WR_RDMA_READ`: read from the peer's `remote_addr` under `rkey` into the local SGL
    /// (the local regions need `LOCAL_WRITE`).
    RdmaRead {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer rkey (MR or memory window).
        rkey: u32,
    },
    /// `IBV_WR_LOCAL_INV`: invalidate a local memory window's key.
    LocalInv {
        /// The key to invalidate.
        rkey: u32,
    },
    /// `IBV_WR_BIND_MW`: bind a type-2 window over `[addr, addr + len)` of `mr` with `access`,
    /// under the new key `rkey` (normally [`inc_rkey`] of [`MemoryWindow::rkey`]). On
    /// [`QueuePair::queue_send`] the window's current key becomes `rkey`. The window is then
    /// usable by the peer of *this* QP only.
    BindMw {
        /// The window (allocated from this QP's PD).
        mw: &'a P::Mw,
        /// The region the window covers (registered with [`Access::MW_BIND`]).
        mr: &'a P::Mr,
        /// The new rkey.
        rkey: u32,
        /// Window start.
        addr: u64,
        /// Window length.
        len: u64,
        /// Remote rights granted through the window (`REMOTE_READ` / `REMOTE_WRITE`).
        access: Access,
    },
}

impl<P: Provider> Clone for SendOp<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Provider> Copy for SendOp<'_, P> {}

impl<P: Provider> fmt::Debug for SendOp<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendOp::Send => f.write_str("Send"),
            SendOp::SendWithInv { rkey } => write!(f, "SendWithInv({rkey:#x})"),
            SendOp::RdmaWrite { remote_addr, rkey } => {
                write!(f, "RdmaWrite({remote_addr:#x}, {rkey:#x})")
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                write!(f, "RdmaRead({remote_addr:#x}, {rkey:#x})")
            }
            SendOp::LocalInv { rkey } => write!(f, "LocalInv({rkey:#x})"),
            SendOp::BindMw {
                rkey,
                addr,
                len,
                access,
                ..
            } => write!(f, "BindMw({rkey:#x}, {addr:#x}+{len}, {access:?})"),
        }
    }
}

/// A send-queue work request (`struct ibv_send_wr`).
pub struct SendWr<'a, P: Provider> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp<'a, P>,
    /// Gather list (SEND, RDMA Write) or scatter list (RDMA Read); empty for LOCAL_INV/BIND_MW.
    pub sgl: &'a [Sge],
    /// Flags.
    pub flags: SendFlags,
}

impl<P: Provider> Clone for SendWr<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Provider> Copy for SendWr<'_, P> {}

impl<P: Provider> fmt::Debug for SendWr<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendWr")
            .field("wr_id", &self.wr_id)
            .field("op", &self.op)
            .field("sgl", &self.sgl)
            .field("flags", &self.flags)
            .finish()
    }
}

impl<'a, P: Provider> SendWr<'a, P> {
    /// A signaled SEND of `sgl`.
    #[inline]
    pub fn send(wr_id: u64, sgl: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            op: SendOp::Send,
            sgl,
            flags: SendFlags::SIGNALED,
        }
    }

    /// Replaces the flags.
    #[inline]
    pub fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (regions need `LOCAL_WRITE`).
    pub sgl: &'a [Sge],
}

// ---------------------------------------------------------------------------------------------
// Completions
// ---------------------------------------------------------------------------------------------

/// Completion status (`enum ibv_wc_status`, same numeric values). Open: unknown values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: WcStatus = WcStatus(0);
    /// `IBV_WC_LOC_LEN_ERR`: receive buffer too small / gather length beyond limits.
    pub const LOC_LEN_ERR: WcStatus = WcStatus(1);
    /// `IBV_WC_LOC_QP_OP_ERR`: malformed WR or local invalidate of an invalid key.
    pub const LOC_QP_OP_ERR: WcStatus = WcStatus(2);
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    pub const LOC_EEC_OP_ERR: WcStatus = WcStatus(3);
    /// `IBV_WC_LOC_PROT_ERR`: a local SGE failed the lkey / bounds / rights check.
    pub const LOC_PROT_ERR: WcStatus = WcStatus(4);
    /// `IBV_WC_WR_FLUSH_ERR`: the QP was in (or went to) the error state.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(5);
    /// `IBV_WC_MW_BIND_ERR`: memory window bind failed.
    pub const MW_BIND_ERR: WcStatus = WcStatus(6);
    /// `IBV_WC_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: WcStatus = WcStatus(7);
    /// `IBV_WC_LOC_ACCESS_ERR`: a local protection error on a responder-side access.
    pub const LOC_ACCESS_ERR: WcStatus = WcStatus(8);
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder rejected the request (e.g. receive too small,
    /// invalid Send With Invalidate key).
    pub const REM_INV_REQ_ERR: WcStatus = WcStatus(9);
    /// `IBV_WC_REM_ACCESS_ERR`: rkey invalid, out of bounds, wrong rights or wrong PD/QP.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(10);
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation (e.g. its receive
    /// buffer's lkey was bad).
    pub const REM_OP_ERR: WcStatus = WcStatus(11);
    /// `IBV_WC_RETRY_EXC_ERR`: transport retries exhausted (peer gone).
    pub const RETRY_EXC_ERR: WcStatus = WcStatus(12);
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exhausted.
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(13);
    /// `IBV_WC_REM_ABORT_ERR`.
    pub const REM_ABORT_ERR: WcStatus = WcStatus(16);
    /// `IBV_WC_FATAL_ERR`.
    pub const FATAL_ERR: WcStatus = WcStatus(19);
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    pub const RESP_TIMEOUT_ERR: WcStatus = WcStatus(20);
    /// `IBV_WC_GENERAL_ERR`.
    pub const GENERAL_ERR: WcStatus = WcStatus(21);

    /// True for `SUCCESS`.
    #[inline]
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// The ibverbs name (`ibv_wc_status_str` style) or "UNKNOWN".
    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "SUCCESS",
            1 => "LOC_LEN_ERR",
            2 => "LOC_QP_OP_ERR",
            3 => "LOC_EEC_OP_ERR",
            4 => "LOC_PROT_ERR",
            5 => "WR_FLUSH_ERR",
            6 => "MW_BIND_ERR",
            7 => "BAD_RESP_ERR",
            8 => "LOC_ACCESS_ERR",
            9 => "REM_INV_REQ_ERR",
            10 => "REM_ACCESS_ERR",
            11 => "REM_OP_ERR",
            12 => "RETRY_EXC_ERR",
            13 => "RNR_RETRY_EXC_ERR",
            16 => "REM_ABORT_ERR",
            19 => "FATAL_ERR",
            20 => "RESP_TIMEOUT_ERR",
            21 => "GENERAL_ERR",
            _ => "UNKNOWN",
        }
    }
}

/// Completion opcode (`enum ibv_wc_opcode`, same numeric values). Open: unknown values are kept.
/// Not defined by ibverbs for error completions (the soft provider reports the WR's opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    /// `IBV_WC_SEND` (also for SEND_WITH_INV).
    pub const SEND: WcOpcode = WcOpcode(0);
    /// `IBV_WC_RDMA_WRITE`.
    pub const RDMA_WRITE: WcOpcode = WcOpcode(1);
    /// `IBV_WC_RDMA_READ`.
    pub const RDMA_READ: WcOpcode = WcOpcode(2);
    /// `IBV_WC_BIND_MW`.
    pub const BIND_MW: WcOpcode = WcOpcode(5);
    /// `IBV_WC_LOCAL_INV`.
    pub const LOCAL_INV: WcOpcode = WcOpcode(6);
    /// `IBV_WC_RECV`.
    pub const RECV: WcOpcode = WcOpcode(1 << 7);

    /// True for receive-queue completions.
    #[inline]
    pub const fn is_recv(self) -> bool {
        self.0 & (1 << 7) != 0
    }
}

/// Completion flags (`IBV_WC_*` flag bit values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// No flags.
    pub const NONE: WcFlags = WcFlags(0);
    /// `IBV_WC_WITH_IMM`.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// `IBV_WC_WITH_INV`: the receive carried a Send With Invalidate; see
    /// [`Completion::invalidated_rkey`].
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);

    /// True when every flag in `other` is set.
    #[inline]
    pub const fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One work completion (`struct ibv_wc`, the fields this project uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode.
    pub opcode: WcOpcode,
    /// Octets received (receives) or read (RDMA Read); the soft provider also fills it for
    /// SEND / RDMA Write.
    pub byte_len: u32,
    /// Local QP number the work request belonged to.
    pub qp_num: u32,
    /// Remote QP number (receives).
    pub src_qp: u32,
    /// Flags.
    pub flags: WcFlags,
    /// On receives with [`WcFlags::WITH_INV`]: the rkey the peer invalidated.
    pub invalidated_rkey: u32,
    /// Vendor error (0 in the soft provider).
    pub vendor_err: u32,
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
    /// `ibv_create_cq` with `depth` entries (no completion channel).
    fn create_cq(&self, depth: u32) -> Result<P::Cq, VerbsError>;
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
}

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
