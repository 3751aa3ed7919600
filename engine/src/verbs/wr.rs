//! The verbs boundary's work requests and completions: scatter/gather entries, send
//! operations and flags, send and receive work requests, and what a completion reports (status,
//! opcode, flags), all with ibverbs' layouts and numeric values so a provider over ibverbs
//! passes them through unchanged. Re-exported from [`crate::verbs`].
//!
//! Normal operation: plain `Copy` values built by the caller for each post and filled by the
//! provider for each completion (no allocation). Recovery: nothing to recover; a request a
//! provider refuses is reported by the provider's `queue_*` call (see [`super::validate`]).

use core::fmt;

use super::{Access, Provider};

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
    ///
    /// [`inc_rkey`]: super::inc_rkey
    /// [`MemoryWindow::rkey`]: super::MemoryWindow::rkey
    /// [`QueuePair::queue_send`]: super::QueuePair::queue_send
    BindMw(MwBind<'a, P>),
}

/// What a memory-window bind names (`ibv_mw_bind` with its `ibv_mw_bind_info`): the window,
/// the region it covers, the new key, the range and the remote rights.
pub struct MwBind<'a, P: Provider> {
    /// The window (allocated from this QP's PD).
    pub mw: &'a P::Mw,
    /// The region the window covers (registered with [`Access::MW_BIND`]).
    pub mr: &'a P::Mr,
    /// The new rkey.
    pub rkey: u32,
    /// Window start.
    pub addr: u64,
    /// Window length.
    pub len: u64,
    /// Remote rights granted through the window (`REMOTE_READ` / `REMOTE_WRITE`).
    pub access: Access,
}

impl<P: Provider> Clone for MwBind<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Provider> Copy for MwBind<'_, P> {}

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
            SendOp::BindMw(MwBind {
                rkey,
                addr,
                len,
                access,
                ..
            }) => write!(f, "BindMw({rkey:#x}, {addr:#x}+{len}, {access:?})"),
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
