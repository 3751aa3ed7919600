//! The sans-IO RPC-over-RDMA connection: Version One (RFC 8166 as clarified by the
//! implementation-experience draft) and, with [`Config::max_version`] 2, Version Two of the seed
//! draft; one [`Connection`] per queue pair, in the role of requester (client) or responder
//! (server), Read-Write transfer model (the responder drives every RDMA Read and Write; the
//! requester exposes memory, the responder never does).
//!
//! Normal operation: the environment (a poller, or the test harness) feeds inputs —
//! [`Connection::handle_completion`], [`Connection::handle_cm`], [`Connection::handle_timeout`] —
//! and drains outputs — [`Connection::poll_wr`] (provider-agnostic [`WorkRequest`]s to post),
//! [`Connection::poll_event`] ([`Event`]s for the application), [`Connection::poll_timeout`].
//! Time is a `u64` nanosecond count the caller supplies; the connection never reads a clock,
//! never blocks, never allocates after [`Connection::new`], and touches memory only through the
//! caller's [`HostMemory`]. Every `wr_id` is a [`WrId`] of a kind ([`wr_kind`]) and a slot index
//! into per-connection arrays sized at creation, so a completion leads straight to its state.
//!
//! - Requester: [`Connection::start_call`] turns an encoded RPC call (parts of a registered
//!   buffer, DDP argument items cut out, result receptacles, a reply buffer) into memory-window
//!   binds + one Send (RDMA_MSG inline, or RDMA_NOMSG with a Position Zero Read chunk when the
//!   call does not fit the inline threshold). The reply is matched by XID, copied (inline) or
//!   already placed (Reply chunk) in the reply buffer, every dynamic STag of the call is
//!   invalidated (locally, unless the peer invalidated it with Send With Invalidate), and only
//!   then [`Event::ReplyReady`] is reported. At most the granted number of calls are
//!   outstanding (one until the first non-error reply; a grant of 0 counts as 1, grants above
//!   the local maximum are clamped; the `rdma_credit` of an RDMA_ERROR / RDMA2_ERROR or an
//!   RDMA_DONE is never used), and a receive is always posted for every outstanding call.
//! - Responder: receives equal to the credits granted are kept posted. Each call header is
//!   validated with the codec, Read chunks are pulled with RDMA Read into a data buffer where the
//!   call's XDR stream is reassembled, and [`Event::CallReady`] hands out a view of the stream.
//!   [`Connection::send_reply`] RDMA-Writes result items into the Write chunks (never pad
//!   octets), returns the Write list with the lengths actually written, and sends the reply
//!   inline or, when it does not fit, through the Reply chunk as RDMA_NOMSG.
//! - Both directions (RFC 8167): a connection created with [`Connection::with_backchannel`]
//!   also carries backward calls once [`Connection::enable_backchannel`] is called: the server
//!   starts them with [`Connection::start_call`] and gets [`Event::ReplyReady`], the client gets
//!   [`Event::CallReady`] and answers with [`Connection::send_reply`]. Every received message
//!   is routed by direction first (the RPC `msg_type` of an RDMA_MSG; context for the other
//!   procedures); XIDs and credits of the two directions are kept apart.
//! - Version Two: a requester with [`Config::max_version`] 2 sends its first call in Version
//!   Two within 1024 octets (one credit); a Version Two reply confirms it and the thresholds
//!   become the Version Two ones (4096 both ways: the draft's senders assume 4096 without a
//!   Version Two discovery mechanism, RFC 8797 sizes describe Version One) without dropping the
//!   connection; ERR_VERS makes it send the same call again in Version One and stay there
//!   ([`Connection::remembered_version`] tells the layer above for the next connection). Calls
//!   carry `rdma_inv_handle` (one of their window handles when remote invalidation is on, else
//!   0); a responder answers each call in its version, Send-With-Invalidates exactly that
//!   handle, answers RDMA2_ERR_CANT_REPLY when the reply resources are too small (the requester
//!   retries once with the fallback of [`Connection::start_call_with`]), and RDMA2_OPTIONAL
//!   messages go to the handlers of [`Connection::register_optional`].
//! - Private data (RFC 8797): [`Connection::private_data_opt`] gives this side's message for
//!   the connect request or the accept, [`CmInput::Established`] takes the peer's; each
//!   direction's inline threshold is min(sender's advertised send size, receiver's advertised
//!   receive size), so both ends compute the same values.
//!
//! Recovery: malformed headers are answered as the codec's [`HeaderError::response`] says
//! (ERR_VERS with the range 1..=`max_version`, ERR_CHUNK, or a silent drop; in Version Two
//! RDMA2_ERR_BAD_XDR, RDMA2_ERR_INVAL_PROC, RDMA2_ERR_INVAL_OPTION); a reply the requester cannot
//! parse fails its call ([`CallError::BadReply`]). A message whose direction cannot be told is
//! dropped without using any of its fields (its credit value included), RDMA_DONE among them,
//! and so is a backward message while the backchannel is not enabled. Backward calls pending when the connection is
//! lost fail with [`CallError::ConnectionLost`] (with their XIDs) so the server's upper layer can
//! re-issue them on the connection the client establishes next. Any unsuccessful completion means the queue
//! pair is in the error state: the connection moves to [`ConnState::Closed`], reports
//! [`Event::ConnectionLost`] and fails every pending call with [`CallError::ConnectionLost`]
//! (the environment then tears the QP down, which also ends its memory windows). A call that
//! outlives [`Config::call_timeout_ns`] is failed with [`CallError::TimedOut`] after its STags
//! are invalidated; its credit stays in use until a reply with an unknown XID arrives.
//!
//! [`HeaderError::response`]: crate::proto::v1::HeaderError::response

mod backchannel;
mod requester;
mod responder;
mod ring;
mod stream;
mod wire;

use crate::proto::chunks::ChunkLimits;
use crate::proto::private_data::{self, Negotiated, PrivateData};
use crate::verbs::{Completion, Sge, WrId};
use backchannel::{BackRequester, BackResponder};
use requester::Requester;
use responder::Responder;
use ring::{IndexStack, Ring};

pub use crate::verbs::Access;

/// Most scatter/gather entries in one [`WorkRequest::Send`].
pub const MAX_SGE: usize = 8;
/// Most parts an RPC message may be given in ([`CallSpec::message`], [`ReplySpec::message`]).
pub const MAX_PARTS: usize = 8;
/// Most read segments in one call (all Read chunks together, Position Zero included). Also the
/// largest [`ChunkLimits::max_read_segments`] honoured.
pub const MAX_READ_SEGMENTS: usize = 16;
/// Most Write chunks in one call. Also the largest [`ChunkLimits::max_write_chunks`] honoured.
pub const MAX_WRITE_CHUNKS: usize = 4;
/// Most segments in one incoming Write chunk ([`ChunkLimits::max_write_segments`] cap).
pub const MAX_WRITE_SEGMENTS: usize = 16;
/// Most segments in an incoming Reply chunk ([`ChunkLimits::max_reply_segments`] cap).
pub const MAX_REPLY_SEGMENTS: usize = 16;
/// Most pieces a message is cut into for gathering (parts split around inline items and pads).
pub const MAX_PIECES: usize = 24;
/// Most dynamic STags (memory windows) one call uses.
pub const MAX_CALL_STAGS: usize = MAX_READ_SEGMENTS + MAX_WRITE_CHUNKS + 1;

/// RPC-over-RDMA Version One: what every connection speaks (ERR_VERS reports `1..=`
/// [`Config::max_version`]).
pub const VERSION: u32 = 1;
/// The highest RPC-over-RDMA version a connection can speak ([`Config::max_version`]): Version
/// Two of the draft.
pub const MAX_VERSION: u32 = 2;
/// The Version Two default inline threshold: every Version Two receiver takes 4096-octet
/// messages, and senders assume it of their peer (draft, "Default Values").
pub const V2_INLINE: u32 = 4096;
/// Version Two negotiation: a requester's first message is no larger than the Version One
/// default inline threshold, since the responder might speak only Version One.
pub const V2_FIRST_MESSAGE: u32 = 1024;
/// Most RDMA2_OPTIONAL handlers a connection holds ([`Connection::register_optional`]).
pub const MAX_OPTIONAL_HANDLERS: usize = 4;

// ---------------------------------------------------------------------------------------------
// Memory.

/// A piece of registered local memory: start address, length and the local key of the
/// registration containing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LocalBuf {
    /// Start address.
    pub addr: u64,
    /// Length in octets.
    pub len: u32,
    /// Local key of the registration.
    pub lkey: u32,
}

impl LocalBuf {
    /// The empty buffer.
    pub const EMPTY: LocalBuf = LocalBuf {
        addr: 0,
        len: 0,
        lkey: 0,
    };

    /// A buffer.
    #[inline]
    pub const fn new(addr: u64, len: u32, lkey: u32) -> Self {
        Self { addr, len, lkey }
    }

    /// The scatter/gather entry covering the buffer.
    #[inline]
    pub const fn sge(&self) -> Sge {
        Sge {
            addr: self.addr,
            len: self.len,
            lkey: self.lkey,
        }
    }

    /// `len` octets at `off`, or `None` when outside the buffer.
    #[inline]
    pub fn sub(&self, off: u32, len: u32) -> Option<LocalBuf> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        Some(LocalBuf {
            addr: self.addr.checked_add(u64::from(off))?,
            len,
            lkey: self.lkey,
        })
    }
}

/// The caller's memory, as the connection sees it. Implemented by the environment over its
/// registered regions (a poller over hugepage pools, the test harness over byte arrays).
pub trait HostMemory {
    /// The `len` octets at `addr`, or `None` when they are not all accessible.
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]>;
    /// The `len` octets at `addr` for writing, or `None`.
    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]>;
    /// Copies `len` octets from `src` to `dst` (ranges do not overlap); `false` when either is
    /// inaccessible. The default goes through a small stack buffer.
    fn copy(&mut self, dst: u64, src: u64, len: usize) -> bool {
        let mut tmp = [0u8; 256];
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(tmp.len());
            let Some(s) = self.bytes(src + done as u64, n) else {
                return false;
            };
            tmp[..n].copy_from_slice(s);
            let Some(d) = self.bytes_mut(dst + done as u64, n) else {
                return false;
            };
            d.copy_from_slice(&tmp[..n]);
            done += n;
        }
        true
    }
    /// The persistent STag (rkey of a registration with remote rights) of the registration
    /// whose local key is `lkey`, for [`StagMode::Persistent`]. Default: none.
    fn remote_key(&self, lkey: u32) -> Option<u32> {
        let _ = lkey;
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration.

/// Which end of the RPC exchange this connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The client: sends calls, receives replies.
    Requester,
    /// The server: receives calls, sends replies.
    Responder,
}

/// How the requester exposes chunk memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StagMode {
    /// A memory window bound per chunk with only the needed remote right, invalidated before the
    /// call completes (dynamic STags).
    MemoryWindows,
    /// The registration's own rkey ([`HostMemory::remote_key`]); nothing to bind or invalidate.
    /// Remote invalidation is then never advertised.
    Persistent,
}

/// Connection settings. `Copy`; validated by [`Connection::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Requester: the most calls it will have outstanding (and the credits it asks for).
    /// Responder: the credits it grants = receives it keeps posted.
    pub credits: u32,
    /// Largest message this side sends with one Send (advertised in the private data).
    pub inline_send: u32,
    /// Size of this side's receive buffers (advertised in the private data).
    pub inline_recv: u32,
    /// Send queue depth of the QP.
    pub sq_depth: u32,
    /// Receive queue depth of the QP.
    pub rq_depth: u32,
    /// Scatter/gather entries per send work request the QP allows (capped at [`MAX_SGE`]).
    pub max_send_sge: u32,
    /// RDMA Reads the responder keeps outstanding at once (the QP's initiator depth).
    pub max_rdma_reads: u32,
    /// Limits on incoming chunk lists (each capped at the `MAX_*` constants of this module).
    pub limits: ChunkLimits,
    /// Direct data placement: DDP items become Read / Write chunks. When off they travel inline
    /// (or in a long message) and no Write chunks are offered.
    pub ddp: bool,
    /// Requester: how chunk memory is exposed.
    pub stag: StagMode,
    /// Advertise the RFC 8797 R bit (remote invalidation). A requester advertises it only with
    /// [`StagMode::MemoryWindows`].
    pub remote_invalidate: bool,
    /// Requester: fail a call not answered within this many nanoseconds (0: never).
    pub call_timeout_ns: u64,
    /// Requester with [`Config::max_version`] 2: how long the first Version Two call (the
    /// probe) waits for an answer before the responder is taken for a Version One one that
    /// drops what it cannot read (draft, "Responder Does Not Support RPC-over-RDMA Version
    /// Two": "if the initial negotiation message is lost or dropped"). The call is then sent
    /// again in Version One, same XID, and the fallback remembered. Independent of
    /// [`Config::call_timeout_ns`]; 0: only the call timeout applies.
    pub probe_timeout_ns: u64,
    /// Send this side's RFC 8797 message at connection set-up ([`Connection::private_data_opt`]).
    /// When off, this side negotiates as a peer without private data: the Version One defaults
    /// (1024-octet thresholds both ways, no remote invalidation), which is what the other side
    /// assumes of it.
    pub send_private_data: bool,
    /// Backward direction (RFC 8167), used only by a connection created with
    /// [`Connection::with_backchannel`]. Requester (client): the backward credits it grants the
    /// server (backward calls it serves at once). Responder (server): the backward credits it
    /// asks for, and the most backward calls it keeps outstanding. Never sent as 0.
    pub backchannel_credits: u32,
    /// Highest RPC-over-RDMA version spoken: 1, or 2 (the draft's Version Two). A requester with
    /// 2 sends its first call in Version Two (at most 1024 octets) and falls back to Version One
    /// for the connection if the responder answers ERR_VERS; a responder with 2 answers each
    /// call in the version it came in. Version Two needs [`Config::inline_recv`] ≥ 4096.
    pub max_version: u32,
    /// Requester with [`StagMode::MemoryWindows`]: seed of the connection's key generator,
    /// which picks the consumer key byte (the low 8 bits) of every memory-window bind, never
    /// the window's previous byte. Keys are then not predictable from earlier ones as far as
    /// the seed is not: an embedder gives each connection a seed from the operating system's
    /// random source (the poller does); tests may fix it. The default, 0, is a valid but
    /// public seed.
    pub key_seed: u64,
}

impl Config {
    /// Linux-like defaults: 64 credits, 4096-octet inline thresholds, memory windows, DDP on,
    /// remote invalidation advertised, no call timeout, a 5 s Version Two probe timeout.
    pub const DEFAULT: Config = Config {
        credits: 64,
        inline_send: 4096,
        inline_recv: 4096,
        sq_depth: 1024,
        rq_depth: 256,
        max_send_sge: 4,
        max_rdma_reads: 16,
        limits: ChunkLimits::DEFAULT,
        ddp: true,
        stag: StagMode::MemoryWindows,
        remote_invalidate: true,
        call_timeout_ns: 0,
        probe_timeout_ns: 5_000_000_000,
        send_private_data: true,
        backchannel_credits: 16,
        max_version: 1,
        key_seed: 0,
    };
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The memory the environment hands in at creation. Slices are copied; the memory they describe
/// must stay registered for the life of the connection.
#[derive(Debug, Clone, Copy)]
pub struct Pools<'a> {
    /// Send buffers, one per call slot (the number of call slots). Each holds a transport header
    /// and, when an inline message has more pieces than SGEs, the message copied after it, so
    /// each must be at least [`Config::inline_send`] octets.
    pub headers: &'a [LocalBuf],
    /// Receive buffers, each at least the advertised [`Config::inline_recv`]. Requester: at least
    /// `credits`. Responder: at least `credits + headers.len()` (posted ones plus one held by each
    /// call in progress).
    pub recvs: &'a [LocalBuf],
    /// Responder: reassembly buffers for calls with Read chunks (their size bounds the largest
    /// such call). Requester: unused.
    pub data: &'a [LocalBuf],
    /// Requester with [`StagMode::MemoryWindows`]: the memory windows (type 2) allocated for this
    /// QP, given by their current rkeys. The slot index is what [`WorkRequest::BindMw`] names.
    pub mws: &'a [u32],
    /// At least 4 octets the connection may keep zeroed: the source of XDR pad octets. A
    /// requester may expose it read-only in a long call, so (like every buffer a requester
    /// exposes with [`StagMode::MemoryWindows`]) its registration needs `MW_BIND`.
    pub zero: LocalBuf,
}

/// Memory for the backward direction (RFC 8167), given to [`Connection::with_backchannel`].
/// Every buffer must stay registered for the life of the connection.
#[derive(Debug, Clone, Copy)]
pub struct BackchannelPools<'a> {
    /// Send buffers for backward messages, each at least [`Config::inline_send`] octets.
    /// Requester (client): one per backward call being served or whose reply Send has not
    /// completed yet, at least `2 × backchannel_credits`. Responder (server): one per backward
    /// call outstanding
    /// (at most `backchannel_credits` of them are used).
    pub headers: &'a [LocalBuf],
    /// Extra receive buffers, each at least the advertised [`Config::inline_recv`].
    /// Requester: at least `2 × backchannel_credits` (one per backward credit, plus one per
    /// backward call whose reply Send has not completed yet), all posted once the backchannel
    /// is enabled. Responder: at least `headers.len()` (one posted per backward call sent).
    pub recvs: &'a [LocalBuf],
}

impl BackchannelPools<'_> {
    /// No backchannel.
    pub const NONE: BackchannelPools<'static> = BackchannelPools {
        headers: &[],
        recvs: &[],
    };
}

/// Why [`Connection::enable_backchannel`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackchannelError {
    /// The connection was created without backchannel memory ([`Connection::with_backchannel`]).
    NoResources,
    /// The connection is closed.
    Closed,
}

impl core::fmt::Display for BackchannelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "backchannel not available: {self:?}")
    }
}

impl std::error::Error for BackchannelError {}

/// Why [`Connection::new`] refused a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `credits` is zero.
    NoCredits,
    /// No header slots.
    NoHeaderSlots,
    /// Fewer receive slots than the role needs.
    TooFewRecvSlots {
        /// Slots needed.
        needed: usize,
        /// Slots given.
        have: usize,
    },
    /// A receive slot is smaller than the advertised receive size.
    RecvSlotTooSmall {
        /// Size needed.
        needed: u32,
        /// Size given.
        have: u32,
    },
    /// A header slot is smaller than the inline send size.
    HeaderSlotTooSmall {
        /// Size needed.
        needed: u32,
        /// Size given.
        have: u32,
    },
    /// The receive queue cannot hold the receives the role keeps posted.
    RecvQueueTooShallow,
    /// The send queue cannot hold one call's work requests.
    SendQueueTooShallow,
    /// The zero source is shorter than 4 octets.
    NoZeroSource,
    /// Memory windows were asked for but none were given.
    NoMemoryWindows,
    /// More slots than a work request id can index.
    TooManySlots,
    /// Backchannel memory was given with [`Config::backchannel_credits`] of 0.
    NoBackchannelCredits,
    /// Fewer backchannel send buffers than the role needs.
    TooFewBackchannelHeaders {
        /// Buffers needed.
        needed: usize,
        /// Buffers given.
        have: usize,
    },
    /// [`Config::max_version`] is neither 1 nor 2.
    UnsupportedVersion(u32),
    /// Version Two is enabled but the receive size is below 4096 octets, the size every
    /// Version Two receiver must take.
    InlineRecvTooSmallForV2 {
        /// The advertised receive size.
        have: u32,
    },
    /// Fewer backchannel receive buffers than the role needs.
    TooFewBackchannelRecvs {
        /// Buffers needed.
        needed: usize,
        /// Buffers given.
        have: usize,
    },
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "connection configuration rejected: {self:?}")
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------------------------
// Work requests.

/// The `kind` byte of the [`WrId`]s this module builds.
pub mod wr_kind {
    /// A receive; index = receive slot.
    pub const RECV: u8 = 1;
    /// A Send; index = call slot.
    pub const SEND: u8 = 2;
    /// An RDMA Read; index = call slot.
    pub const READ: u8 = 3;
    /// An RDMA Write; index = call slot.
    pub const WRITE: u8 = 4;
    /// A memory window bind; index = call slot.
    pub const BIND: u8 = 5;
    /// A local invalidate; index = call slot.
    pub const INV: u8 = 6;
    /// A Send of the backward direction (RFC 8167); index = backward call slot.
    pub const BACK_SEND: u8 = 7;
}

/// A work request to post, provider-agnostic. Every send-queue request is signaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRequest {
    /// Post a receive of one buffer.
    Recv {
        /// Id.
        wr_id: WrId,
        /// The receive buffer.
        sge: Sge,
    },
    /// A Send (with invalidate when `invalidate` is set) gathering `sges[..nsge]`.
    Send {
        /// Id.
        wr_id: WrId,
        /// Gather list.
        sges: [Sge; MAX_SGE],
        /// Entries used.
        nsge: u8,
        /// Send With Invalidate of this peer rkey.
        invalidate: Option<u32>,
    },
    /// RDMA Write of `local` to the peer's `remote_addr` under `rkey`.
    RdmaWrite {
        /// Id.
        wr_id: WrId,
        /// Source.
        local: Sge,
        /// Peer address.
        remote_addr: u64,
        /// Peer key.
        rkey: u32,
    },
    /// RDMA Read from the peer's `remote_addr` under `rkey` into `local`.
    RdmaRead {
        /// Id.
        wr_id: WrId,
        /// Sink.
        local: Sge,
        /// Peer address.
        remote_addr: u64,
        /// Peer key.
        rkey: u32,
    },
    /// Bind memory window slot `mw` over `[addr, addr + len)` of the registration `lkey` with
    /// `access`, under `new_rkey` (the window's next key).
    BindMw {
        /// Id.
        wr_id: WrId,
        /// Memory window slot index ([`Pools::mws`]).
        mw: u32,
        /// Window start.
        addr: u64,
        /// Window length.
        len: u32,
        /// Local key of the registration the window covers.
        lkey: u32,
        /// Remote rights: only `REMOTE_READ` or only `REMOTE_WRITE`.
        access: Access,
        /// The key the window has after the bind.
        new_rkey: u32,
    },
    /// Invalidate a local memory window's key.
    LocalInv {
        /// Id.
        wr_id: WrId,
        /// The key.
        rkey: u32,
    },
}

impl WorkRequest {
    /// The request's id.
    pub const fn wr_id(&self) -> WrId {
        match *self {
            WorkRequest::Recv { wr_id, .. }
            | WorkRequest::Send { wr_id, .. }
            | WorkRequest::RdmaWrite { wr_id, .. }
            | WorkRequest::RdmaRead { wr_id, .. }
            | WorkRequest::BindMw { wr_id, .. }
            | WorkRequest::LocalInv { wr_id, .. } => wr_id,
        }
    }

    /// The Send's gather list (empty for other kinds).
    pub fn send_sges(&self) -> &[Sge] {
        match self {
            WorkRequest::Send { sges, nsge, .. } => &sges[..(*nsge as usize).min(MAX_SGE)],
            _ => &[],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs and outputs.

/// Connection manager inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmInput<'a> {
    /// The connection is established. `private_data` is what the peer sent (connect request on
    /// the responder, accept on the requester), scanned for an RFC 8797 message.
    Established {
        /// The peer's private data (may be empty).
        private_data: &'a [u8],
    },
    /// The connection is gone (disconnect, device removal, ...).
    Disconnected,
}

/// State of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Created; receives may be posted; waiting for [`CmInput::Established`].
    Connecting,
    /// Established: calls flow.
    Connected,
    /// Disconnected or failed; terminal.
    Closed,
}

/// Identifies a call on one connection (a slot and its generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallId {
    /// Call slot.
    pub slot: u32,
    /// Generation of the slot (stale ids are refused).
    pub generation: u32,
}

/// A DDP-eligible item cut out of a message: its octets are not in the message parts; they go
/// at offset `at` of the parts' concatenation (a multiple of four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpItem {
    /// Offset in the message (without DDP items) where the item belongs.
    pub at: u32,
    /// The item's octets (no XDR pad).
    pub buf: LocalBuf,
}

/// An RPC call to start (requester).
///
/// Every buffer the call may expose must be registered so the chosen [`StagMode`] can expose
/// it: with memory windows, a registration with `MW_BIND` (and `LOCAL_WRITE` for receptacles
/// and the reply buffer); with persistent STags, one whose [`HostMemory::remote_key`] exists.
/// That includes the message parts, which are exposed (read-only) when the call does not fit
/// the inline threshold and goes as a long message.
#[derive(Debug, Clone, Copy)]
pub struct CallSpec<'a> {
    /// The encoded RPC call (from its XID), without the DDP items, in up to [`MAX_PARTS`] parts.
    pub message: &'a [LocalBuf],
    /// DDP-eligible argument items (Read chunks), in offset order.
    pub ddp: &'a [DdpItem],
    /// Receptacles for DDP-eligible results (Write chunks), in result order.
    pub receptacles: &'a [LocalBuf],
    /// Where the reply (without DDP results) is placed; its length is the largest reply
    /// expected. A Reply chunk over it is offered when the reply might not fit inline.
    pub reply: LocalBuf,
}

/// Extra instructions for a call ([`Connection::start_call_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions<'a> {
    /// When the responder answers RDMA2_ERR_CANT_REPLY (Version Two) or ERR_CHUNK (Version
    /// One) — the reply resources were too small — the call is sent again once, with the same
    /// XID, with this reply buffer (when not empty) in place of [`CallSpec::reply`]. Must stay
    /// untouched until the call completes, like the rest of the spec.
    pub fallback_reply: Option<LocalBuf>,
    /// With `fallback_reply` (or alone): receptacles replacing [`CallSpec::receptacles`] in the
    /// retry (same count or fewer).
    pub fallback_receptacles: &'a [LocalBuf],
}

impl CallOptions<'_> {
    /// No options.
    pub const NONE: CallOptions<'static> = CallOptions {
        fallback_reply: None,
        fallback_receptacles: &[],
    };
}

/// An RPC reply to send (responder).
#[derive(Debug, Clone, Copy)]
pub struct ReplySpec<'a> {
    /// The encoded RPC reply (from its XID), without the DDP results, in up to [`MAX_PARTS`]
    /// parts.
    pub message: &'a [LocalBuf],
    /// DDP-eligible result items, in result order; the first goes to the first Write chunk, and
    /// so on. Items beyond the Write list go inline at their offsets.
    pub results: &'a [DdpItem],
}

/// Why [`Connection::start_call`] did not start a call. Nothing was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartError {
    /// The connection is not established (or closed).
    NotConnected,
    /// This connection is a responder.
    WrongRole,
    /// No credit: the granted number of calls is outstanding. Retry after a reply.
    NoCredit,
    /// No free call slot, memory window or send queue room. Retry after completions.
    Busy,
    /// The spec is malformed (too many parts/items/receptacles, misplaced item, message shorter
    /// than an XID, unreachable memory).
    BadSpec,
    /// An outstanding call already uses this XID.
    DuplicateXid,
    /// The call cannot be expressed within the inline threshold and chunk limits even as a long
    /// message.
    TooLarge,
    /// [`StagMode::Persistent`] and a buffer has no remote key.
    NoRemoteKey,
    /// Responder: a backward call, but the backchannel is not enabled
    /// ([`Connection::enable_backchannel`]: the peer's upper layer has not said it takes
    /// backward calls) or the connection has no backchannel memory. Nothing was sent.
    BackchannelDisabled,
}

/// What a bad reply was wrong with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadReply {
    /// The transport header did not decode or broke a reply rule.
    Header(crate::proto::v1::HeaderErrorKind),
    /// The Write list returned more chunks or segments, or longer segments, than offered.
    WriteList,
    /// RDMA_NOMSG without a Reply chunk offered, or a returned Reply chunk longer than offered.
    ReplyChunk,
    /// The inline reply is larger than the reply buffer.
    TooLong,
    /// The message the responder wrote into the Reply chunk (RDMA_NOMSG / RDMA2_NOMSG) is not
    /// an RPC REPLY to this call: shorter than an XID and `msg_type`, another XID, or not a
    /// REPLY (v2 draft, "Message Direction": the direction MUST match the RPC message).
    NotAReply,
    /// Version Two: the transport header did not decode or broke a reply rule.
    HeaderV2(crate::proto::v2::HeaderErrorKind),
    /// The reply came in another RPC-over-RDMA version than the call.
    Version {
        /// Version of the call.
        call: u32,
        /// Version of the reply.
        reply: u32,
    },
}

/// Why a call failed ([`Event::CallFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// RDMA_ERROR / ERR_VERS: the responder speaks versions `low..=high`.
    ErrVers {
        /// Lowest version the responder supports.
        low: u32,
        /// Highest version the responder supports.
        high: u32,
    },
    /// RDMA_ERROR / ERR_CHUNK: the responder could not use the call's chunks (or needed more
    /// chunk space than offered).
    ErrChunk,
    /// RDMA_ERROR with an unknown code.
    RdmaError(u32),
    /// The reply could not be used.
    BadReply(BadReply),
    /// The connection was lost before the reply.
    ConnectionLost,
    /// No reply within [`Config::call_timeout_ns`].
    TimedOut,
    /// A Version Two RDMA2_ERROR other than RDMA2_ERR_VERS (reported as [`CallError::ErrVers`]):
    /// RDMA2_ERR_BAD_XDR, RDMA2_ERR_CANT_REPLY (when no fallback was given or the retry failed
    /// too), RDMA2_ERR_INVAL_PROC, RDMA2_ERR_INVAL_OPTION, or an unknown code.
    Rdma2(crate::proto::v2::RdmaError),
    /// The call had to be sent again (Version Two fallback to Version One after ERR_VERS, or a
    /// CANT_REPLY retry) and could not be.
    Resend(StartError),
}

/// Why [`Connection::send_reply`] refused. Nothing was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyError {
    /// This connection is a requester.
    WrongRole,
    /// The call id is stale or the call is not waiting for a reply.
    NoSuchCall,
    /// Not enough send queue room now. Retry after completions.
    Busy,
    /// The spec is malformed (too many parts/results, misplaced result, unreachable memory).
    BadSpec,
    /// The connection is closed.
    Closed,
}

/// How [`Connection::send_reply`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// RDMA_MSG: the reply went inline.
    Inline,
    /// RDMA_NOMSG: the reply went through the Reply chunk.
    Long,
    /// The reply did not fit the chunks offered: ERR_CHUNK was sent instead.
    ErrChunk,
    /// Version Two: the reply did not fit the chunks offered: RDMA2_ERR_CANT_REPLY was sent
    /// instead (with the first segment too short and the length it needed).
    CantReply,
}

impl ReplyKind {
    /// The answer sent when a reply does not fit the chunks offered, by version.
    pub(crate) const fn failed(v2: bool) -> ReplyKind {
        if v2 {
            ReplyKind::CantReply
        } else {
            ReplyKind::ErrChunk
        }
    }
}

/// A completed call (requester).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The call.
    pub call: CallId,
    /// Its XID.
    pub xid: u32,
    /// Octets of reply placed at the start of [`CallSpec::reply`].
    pub len: u32,
    /// Octets the responder wrote into each receptacle ([`CallSpec::receptacles`] order), as it
    /// returned them.
    pub written: [u32; MAX_WRITE_CHUNKS],
    /// Receptacles offered (entries of `written` that are meaningful).
    pub nwritten: u8,
    /// The reply came through the Reply chunk (RDMA_NOMSG).
    pub long: bool,
}

impl Reply {
    /// The written lengths of the offered receptacles.
    pub fn written(&self) -> &[u32] {
        &self.written[..(self.nwritten as usize).min(MAX_WRITE_CHUNKS)]
    }
}

/// A call ready for the application (responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingCall {
    /// The call (pass it to [`Connection::send_reply`]).
    pub call: CallId,
    /// Its XID.
    pub xid: u32,
    /// The reassembled XDR stream of the call; valid until the reply's Send completes.
    pub stream: LocalBuf,
    /// Write chunks offered.
    pub write_chunks: u8,
    /// Capacity of each offered Write chunk.
    pub write_capacity: [u32; MAX_WRITE_CHUNKS],
    /// Capacity of the Reply chunk, if one was offered.
    pub reply_capacity: Option<u32>,
    /// Read segments the call carried (its Read chunks, Position Zero included).
    pub read_segments: u8,
    /// The call came as RDMA_NOMSG through a Position-Zero Read chunk (a long call).
    pub position_zero: bool,
}

/// What the connection reports to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The connection is established with these settings.
    Connected(Negotiated),
    /// Requester: a call completed; every STag of it is invalid.
    ReplyReady(Reply),
    /// Requester: a call failed; every STag of it is invalid (unless the connection was lost,
    /// in which case the QP is in the error state).
    CallFailed {
        /// The call.
        call: CallId,
        /// Its XID.
        xid: u32,
        /// Why.
        error: CallError,
    },
    /// Responder: a call is ready.
    CallReady(IncomingCall),
    /// The connection was lost (reported once).
    ConnectionLost,
}

/// An RDMA2_OPTIONAL message handed to a handler ([`Connection::register_optional`]). It
/// borrows the receive buffer, which is reposted when the handler returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalMessage<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`, as on the wire (not used by the connection).
    pub credits: u32,
    /// `rdma_optdir`.
    pub direction: crate::proto::v2::Direction,
    /// `rdma_opttype`.
    pub opttype: u32,
    /// `rdma_optinfo`.
    pub info: &'a [u8],
    /// Whatever follows the transport header (all, part or none of an RPC message).
    pub payload: &'a [u8],
}

/// A handler of RDMA2_OPTIONAL messages of one `rdma_opttype`.
pub type OptionalHandler = Box<dyn FnMut(&OptionalMessage<'_>) + Send>;

/// Why [`Connection::register_optional`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionalError {
    /// [`MAX_OPTIONAL_HANDLERS`] types are registered already.
    TableFull,
    /// A handler for this type is registered already.
    AlreadyRegistered,
}

impl core::fmt::Display for OptionalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "optional handler not registered: {self:?}")
    }
}

impl std::error::Error for OptionalError {}

// ---------------------------------------------------------------------------------------------
// Shared core.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecvState {
    /// Not posted and not in use.
    Idle,
    /// Posted to the receive queue.
    Posted,
    /// Completed and still referenced by a call.
    Held,
}

#[derive(Debug, Clone, Copy)]
struct RecvSlot {
    buf: LocalBuf,
    state: RecvState,
}

/// A memory window slot (requester).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MwSlot {
    /// Current key (after the last bind).
    pub(crate) rkey: u32,
    /// Call slot using it, when bound.
    pub(crate) owner: Option<u32>,
    /// Index in the owner's STag list.
    pub(crate) pos: u8,
}

/// State both roles share: configuration, output rings, queue accounting, pools.
pub(crate) struct Core {
    pub(crate) cfg: Config,
    pub(crate) limits: ChunkLimits,
    pub(crate) state: ConnState,
    /// Version One thresholds (RFC 8797).
    pub(crate) neg: Negotiated,
    /// Version Two thresholds (4096 octets both ways).
    pub(crate) neg_v2: Negotiated,
    /// Decoding limits for Version Two (chunk limits as `limits`).
    pub(crate) v2_limits: crate::proto::v2::Limits,
    /// Requester: the version it sends. Responder: the version of the last valid call (the
    /// version of its backward calls).
    pub(crate) version: u32,
    /// Requester: Version Two sent, not yet confirmed by a non-error reply.
    pub(crate) probing: bool,
    /// Requester: what the negotiation learnt about the peer.
    pub(crate) remembered: Option<u32>,
    wrs: Ring<WorkRequest>,
    events: Ring<Event>,
    lost_reported: bool,
    pub(crate) sq_used: u32,
    pub(crate) reads_used: u32,
    recvs: Vec<RecvSlot>,
    pub(crate) recv_idle: IndexStack,
    pub(crate) rq_posted: u32,
    pub(crate) rq_target: u32,
    /// Requester with an enabled backchannel: posted receives the server may still take for
    /// backward calls (backward credits not in use), kept back from forward calls.
    pub(crate) recv_reserve: u32,
    pub(crate) headers: Vec<LocalBuf>,
    pub(crate) zero: LocalBuf,
    pub(crate) mws: Vec<MwSlot>,
    pub(crate) mw_free: IndexStack,
    /// Draws the key byte of every window bind ([`Config::key_seed`]).
    pub(crate) keys: crate::verbs::KeyGen,
    pub(crate) max_sge: usize,
}

impl Core {
    /// The thresholds of protocol version `vers`.
    #[inline]
    pub(crate) fn neg_of(&self, vers: u32) -> &Negotiated {
        if vers == crate::proto::v2::VERSION {
            &self.neg_v2
        } else {
            &self.neg
        }
    }

    /// Send queue entries free.
    #[inline]
    pub(crate) fn sq_free(&self) -> u32 {
        self.cfg.sq_depth.saturating_sub(self.sq_used)
    }

    /// Queues a send-queue work request (the caller checked [`Core::sq_free`]).
    pub(crate) fn post_send(&mut self, wr: WorkRequest) {
        if self.wrs.push(wr) {
            self.sq_used += 1;
            if matches!(wr, WorkRequest::RdmaRead { .. }) {
                self.reads_used += 1;
            }
        } else {
            self.fail();
        }
    }

    /// Queues an event (rings are sized so this cannot overflow; if it ever did, the connection
    /// fails rather than losing a completion silently).
    pub(crate) fn emit(&mut self, ev: Event) {
        if !self.events.push(ev) {
            self.fail();
        }
    }

    /// The buffer of receive slot `i`.
    pub(crate) fn recv_buf(&self, i: u32) -> Option<LocalBuf> {
        self.recvs.get(i as usize).map(|r| r.buf)
    }

    /// Marks receive slot `i` held by a call.
    pub(crate) fn hold_recv(&mut self, i: u32) {
        if let Some(r) = self.recvs.get_mut(i as usize) {
            r.state = RecvState::Held;
        }
    }

    /// Returns receive slot `i` to the pool and keeps the receive queue filled.
    pub(crate) fn release_recv(&mut self, i: u32) {
        if let Some(r) = self.recvs.get_mut(i as usize) {
            if r.state != RecvState::Idle {
                r.state = RecvState::Idle;
                let _ = self.recv_idle.push(i);
            }
        }
        self.refill_recvs();
    }

    /// Posts idle receive slots until `rq_target` are posted.
    pub(crate) fn refill_recvs(&mut self) {
        if self.state == ConnState::Closed {
            return;
        }
        while self.rq_posted < self.rq_target {
            let Some(i) = self.recv_idle.pop() else {
                break;
            };
            let slot = &mut self.recvs[i as usize];
            slot.state = RecvState::Posted;
            let wr = WorkRequest::Recv {
                wr_id: WrId::new(wr_kind::RECV, u64::from(i)),
                sge: slot.buf.sge(),
            };
            if !self.wrs.push(wr) {
                self.state = ConnState::Closed;
                return;
            }
            self.rq_posted += 1;
        }
    }

    /// Enters the closed state. [`Connection`] notices it after the current input and does the
    /// rest once (reports the loss, fails the role's calls).
    pub(crate) fn fail(&mut self) {
        self.state = ConnState::Closed;
    }
}

enum RoleState {
    Requester(Requester),
    Responder(Responder),
}

/// The backward direction of a connection.
enum Back {
    /// Created without backchannel memory.
    None,
    /// Responder (server): sends backward calls.
    Server(BackRequester),
    /// Requester (client): serves backward calls.
    Client(BackResponder),
}

struct OptionalEntry {
    opttype: u32,
    handler: OptionalHandler,
}

/// One RPC-over-RDMA connection (one QP). See the module documentation.
pub struct Connection {
    core: Core,
    role: RoleState,
    back: Back,
    optional: [Option<OptionalEntry>; MAX_OPTIONAL_HANDLERS],
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role())
            .field("state", &self.core.state)
            .field("sq_used", &self.core.sq_used)
            .field("rq_posted", &self.core.rq_posted)
            .finish()
    }
}

/// Version Two thresholds: 4096 octets both ways, whatever RFC 8797 private data said (its sizes
/// describe Version One), and a send threshold never above what this side's send buffers hold.
/// Draft, "Default Values": "Inline threshold values are not advertised to peers via the base
/// RPC-over-RDMA Version Two protocol ... In the absense of such a mechanism, senders MUST
/// assume a receiver's inline threshold is 4096 bytes"; "Protocol Version Negotiation": after a
/// Version Two reply "both peers use the default inline threshold value for RPC-over-RDMA
/// Version Two connections (4096 bytes)". `peer_recognised`: the peer sent an RFC 8797 message.
fn v2_thresholds(cfg: &Config, peer_recognised: bool) -> Negotiated {
    Negotiated {
        send_inline: cfg.inline_send.clamp(1, V2_INLINE),
        // The peer assumes our threshold is 4096 and sends nothing larger inline (our receive
        // buffers, at least 4096 for Version Two, take more should a peer do so anyway).
        recv_inline: V2_INLINE,
        recv_buffer: private_data::representable_size(cfg.inline_recv),
        // Version Two: the requester names the handle per call (rdma_inv_handle); this says
        // whether this side may use remote invalidation at all.
        remote_invalidate: cfg.remote_invalidate,
        peer_recognised,
    }
}

fn cap_limits(l: ChunkLimits) -> ChunkLimits {
    ChunkLimits {
        max_read_segments: l.max_read_segments.min(MAX_READ_SEGMENTS as u32),
        max_write_chunks: l.max_write_chunks.min(MAX_WRITE_CHUNKS as u32),
        max_write_segments: l.max_write_segments.min(MAX_WRITE_SEGMENTS as u32),
        max_reply_segments: l.max_reply_segments.min(MAX_REPLY_SEGMENTS as u32),
    }
}

impl Connection {
    /// Creates a connection. Allocates its slot arrays once; the receives to post first are
    /// available from [`Connection::poll_wr`] at once (they may be posted while the QP is in
    /// INIT, before the connection is established).
    pub fn new(role: Role, cfg: Config, pools: &Pools<'_>) -> Result<Connection, ConfigError> {
        Self::with_backchannel(role, cfg, pools, &BackchannelPools::NONE)
    }

    /// Creates a connection that can also carry the backward direction (RFC 8167) once
    /// [`Connection::enable_backchannel`] is called: a requester (client) then serves backward
    /// calls ([`Event::CallReady`], answered with [`Connection::send_reply`]), a responder
    /// (server) sends them ([`Connection::start_call`], answered by [`Event::ReplyReady`] /
    /// [`Event::CallFailed`]). `bc` sizes: see [`BackchannelPools`]; empty pools mean no
    /// backchannel (as [`Connection::new`]).
    pub fn with_backchannel(
        role: Role,
        cfg: Config,
        pools: &Pools<'_>,
        bc: &BackchannelPools<'_>,
    ) -> Result<Connection, ConfigError> {
        if cfg.credits == 0 {
            return Err(ConfigError::NoCredits);
        }
        if !(VERSION..=MAX_VERSION).contains(&cfg.max_version) {
            return Err(ConfigError::UnsupportedVersion(cfg.max_version));
        }
        if cfg.max_version >= 2 && private_data::representable_size(cfg.inline_recv) < V2_INLINE {
            return Err(ConfigError::InlineRecvTooSmallForV2 {
                have: private_data::representable_size(cfg.inline_recv),
            });
        }
        let nslots = pools.headers.len();
        if nslots == 0 {
            return Err(ConfigError::NoHeaderSlots);
        }
        if nslots > u16::MAX as usize
            || pools.recvs.len() + bc.recvs.len() > u16::MAX as usize
            || bc.headers.len() > u16::MAX as usize
            || pools.mws.len() > u16::MAX as usize
            || pools.data.len() > u16::MAX as usize
        {
            return Err(ConfigError::TooManySlots);
        }
        if pools.zero.len < 4 {
            return Err(ConfigError::NoZeroSource);
        }
        let recv_size = private_data::representable_size(cfg.inline_recv);
        if let Some(r) = pools.recvs.iter().find(|r| r.len < recv_size) {
            return Err(ConfigError::RecvSlotTooSmall {
                needed: recv_size,
                have: r.len,
            });
        }
        if let Some(h) = pools
            .headers
            .iter()
            .chain(bc.headers)
            .find(|h| h.len < cfg.inline_send)
        {
            return Err(ConfigError::HeaderSlotTooSmall {
                needed: cfg.inline_send,
                have: h.len,
            });
        }
        if let Some(r) = bc.recvs.iter().find(|r| r.len < recv_size) {
            return Err(ConfigError::RecvSlotTooSmall {
                needed: recv_size,
                have: r.len,
            });
        }
        let with_bc = !bc.headers.is_empty() || !bc.recvs.is_empty();
        if with_bc {
            let c = cfg.backchannel_credits as usize;
            if c == 0 {
                return Err(ConfigError::NoBackchannelCredits);
            }
            let (need_h, need_r) = match role {
                // Requester: a send buffer per backward credit, plus one per backward call
                // whose reply Send has not completed yet (the server may send its next call
                // as soon as it has the reply), like the receives.
                Role::Requester => (2 * c, 2 * c),
                Role::Responder => (1, bc.headers.len().max(1)),
            };
            if bc.headers.len() < need_h {
                return Err(ConfigError::TooFewBackchannelHeaders {
                    needed: need_h,
                    have: bc.headers.len(),
                });
            }
            if bc.recvs.len() < need_r {
                return Err(ConfigError::TooFewBackchannelRecvs {
                    needed: need_r,
                    have: bc.recvs.len(),
                });
            }
        }
        let (rq_target, needed_recvs) = match role {
            Role::Requester => {
                let c = cfg.credits.min(nslots as u32) as usize;
                (pools.recvs.len().min(u32::MAX as usize) as u32, c)
            }
            Role::Responder => (cfg.credits, cfg.credits as usize + nslots),
        };
        if pools.recvs.len() < needed_recvs {
            return Err(ConfigError::TooFewRecvSlots {
                needed: needed_recvs,
                have: pools.recvs.len(),
            });
        }
        // The receive queue also holds the backchannel receives: all of them on a client, one
        // per backward call outstanding on a server.
        if (cfg.rq_depth as usize) < rq_target as usize + bc.recvs.len() {
            return Err(ConfigError::RecvQueueTooShallow);
        }
        if cfg.sq_depth < 2 {
            return Err(ConfigError::SendQueueTooShallow);
        }
        if role == Role::Requester && cfg.stag == StagMode::MemoryWindows && pools.mws.is_empty() {
            return Err(ConfigError::NoMemoryWindows);
        }
        let mut recvs = Vec::with_capacity(pools.recvs.len() + bc.recvs.len());
        for r in pools.recvs.iter().chain(bc.recvs) {
            recvs.push(RecvSlot {
                buf: *r,
                state: RecvState::Idle,
            });
        }
        let mut mws = Vec::with_capacity(pools.mws.len());
        for &rkey in pools.mws {
            mws.push(MwSlot {
                rkey,
                owner: None,
                pos: 0,
            });
        }
        let wr_cap = cfg.sq_depth as usize + cfg.rq_depth as usize + 1;
        let ev_cap = nslots + pools.recvs.len() + bc.headers.len() + bc.recvs.len() + 4;
        let filler = WorkRequest::LocalInv {
            wr_id: WrId(0),
            rkey: 0,
        };
        let mut core = Core {
            cfg,
            limits: cap_limits(cfg.limits),
            state: ConnState::Connecting,
            neg: private_data::negotiate(&PrivateData::V1_DEFAULTS, None),
            neg_v2: v2_thresholds(&cfg, false),
            v2_limits: crate::proto::v2::Limits {
                chunks: cap_limits(cfg.limits),
                // rdma_optinfo is bounded only by the message, which the receive buffer
                // bounds: follow the receive size, never below the codec's default.
                max_optinfo: recv_size.max(crate::proto::v2::Limits::DEFAULT.max_optinfo),
            },
            version: match role {
                Role::Requester => cfg.max_version,
                Role::Responder => VERSION,
            },
            probing: role == Role::Requester && cfg.max_version >= 2,
            remembered: None,
            wrs: Ring::new(wr_cap, filler),
            events: Ring::new(ev_cap, Event::ConnectionLost),
            lost_reported: false,
            sq_used: 0,
            reads_used: 0,
            recv_idle: IndexStack::full(recvs.len()),
            recvs,
            rq_posted: 0,
            rq_target,
            recv_reserve: 0,
            headers: pools.headers.to_vec(),
            zero: pools.zero,
            mw_free: IndexStack::full(mws.len()),
            mws,
            keys: crate::verbs::KeyGen::new(cfg.key_seed),
            max_sge: (cfg.max_send_sge as usize).clamp(1, MAX_SGE),
        };
        let role_state = match role {
            Role::Requester => RoleState::Requester(Requester::new(&core)),
            Role::Responder => RoleState::Responder(Responder::new(&core, pools.data)),
        };
        let back = match (with_bc, role) {
            (false, _) => Back::None,
            (true, Role::Requester) => {
                Back::Client(BackResponder::new(&core, bc.headers, bc.recvs.len()))
            }
            (true, Role::Responder) => Back::Server(BackRequester::new(&core, bc.headers)),
        };
        core.refill_recvs();
        Ok(Connection {
            core,
            role: role_state,
            back,
            optional: [None, None, None, None],
        })
    }

    /// The RPC-over-RDMA version in use. Requester: the version its calls are sent in (2 while
    /// probing a Version Two peer, 1 after falling back). Responder: the version of the last
    /// valid call (also the version of its backward calls).
    pub fn version(&self) -> u32 {
        self.core.version
    }

    /// Requester: what version negotiation learnt about the peer, for the layer above to keep
    /// across reconnections (pass it as [`Config::max_version`] of the next connection to the
    /// same peer, so a Version One peer is not probed again): `Some(2)` once a Version Two reply
    /// arrived, `Some(1)` after ERR_VERS (or when the connection was lost while the first
    /// Version Two call was unanswered, which the draft allows to read the same way), `None`
    /// while unknown or when only Version One was ever spoken.
    pub fn remembered_version(&self) -> Option<u32> {
        self.core.remembered
    }

    /// Registers `handler` for RDMA2_OPTIONAL messages of type `opttype` (Version Two). A
    /// received optional message of a registered type is handed to its handler (on the thread
    /// driving [`Connection::handle_completion`]); one of any other type is answered with
    /// RDMA2_ERR_INVAL_OPTION when it is a call-direction message this side can answer, and
    /// dropped otherwise.
    pub fn register_optional(
        &mut self,
        opttype: u32,
        handler: OptionalHandler,
    ) -> Result<(), OptionalError> {
        if self.optional.iter().flatten().any(|e| e.opttype == opttype) {
            return Err(OptionalError::AlreadyRegistered);
        }
        let Some(free) = self.optional.iter_mut().find(|e| e.is_none()) else {
            return Err(OptionalError::TableFull);
        };
        *free = Some(OptionalEntry { opttype, handler });
        Ok(())
    }

    /// Removes the handler of `opttype`; `false` when none was registered.
    pub fn unregister_optional(&mut self, opttype: u32) -> bool {
        for e in self.optional.iter_mut() {
            if e.as_ref().is_some_and(|h| h.opttype == opttype) {
                *e = None;
                return true;
            }
        }
        false
    }

    /// Enables the backward direction (RFC 8167 §6: only once the upper layers agreed, e.g.
    /// an NFSv4.1 CREATE_SESSION with a backchannel). Requester (client): posts the
    /// backchannel receives (call it before telling the server). Responder (server): allows
    /// [`Connection::start_call`] to send backward calls. May be called before the connection
    /// is established.
    pub fn enable_backchannel(&mut self) -> Result<(), BackchannelError> {
        if self.core.state == ConnState::Closed {
            return Err(BackchannelError::Closed);
        }
        match &mut self.back {
            Back::None => Err(BackchannelError::NoResources),
            Back::Server(b) => {
                b.enabled = true;
                Ok(())
            }
            Back::Client(b) => {
                b.enable(&mut self.core);
                Ok(())
            }
        }
    }

    /// Whether the backward direction is enabled.
    pub fn backchannel_enabled(&self) -> bool {
        match &self.back {
            Back::None => false,
            Back::Server(b) => b.enabled,
            Back::Client(b) => b.enabled,
        }
    }

    /// Backward credits. Requester (client): the credits it grants in backward replies.
    /// Responder (server): the credits the client granted in its last backward reply (1
    /// before the first). 0 without a backchannel.
    pub fn backward_credits(&self) -> u32 {
        match &self.back {
            Back::None => 0,
            Back::Server(b) => b.granted(),
            Back::Client(b) => b.credits(),
        }
    }

    /// Backward calls in progress: sent and not answered (server), received and not answered
    /// (client).
    pub fn backward_outstanding(&self) -> u32 {
        match &self.back {
            Back::None => 0,
            Back::Server(b) => b.outstanding(),
            Back::Client(b) => b.outstanding(),
        }
    }

    /// The role.
    pub fn role(&self) -> Role {
        match self.role {
            RoleState::Requester(_) => Role::Requester,
            RoleState::Responder(_) => Role::Responder,
        }
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        self.core.state
    }

    /// The thresholds in use (v1 defaults until established): those of [`Connection::version`]
    /// — RFC 8797 values for Version One, the Version Two values (4096 both ways, whatever the
    /// private data said) for Version Two, with a send threshold of at most 1024 while a requester's
    /// first Version Two call probes the responder. They change, without losing the connection,
    /// when version negotiation ends.
    pub fn negotiated(&self) -> Negotiated {
        let mut n = *self.core.neg_of(self.core.version);
        if self.core.probing {
            n.send_inline = n.send_inline.min(V2_FIRST_MESSAGE);
        }
        n
    }

    /// This side's RFC 8797 message, for the connect request (requester) or the accept
    /// (responder). The sizes are the advertised (representable, rounded-down) values.
    pub fn private_data(&self) -> [u8; private_data::MSG_LEN] {
        self.advertised().encode()
    }

    /// The private data to send at connection set-up: this side's RFC 8797 message, or `None`
    /// when [`Config::send_private_data`] is off (send no private data, or only the transport's
    /// own).
    pub fn private_data_opt(&self) -> Option<[u8; private_data::MSG_LEN]> {
        self.core.cfg.send_private_data.then(|| self.private_data())
    }

    /// The message this side advertises, with the sizes as the peer will decode them.
    fn advertised(&self) -> PrivateData {
        let cfg = &self.core.cfg;
        let r = cfg.remote_invalidate
            && (self.role() == Role::Responder || cfg.stag == StagMode::MemoryWindows);
        PrivateData::v1(
            r,
            private_data::representable_size(cfg.inline_send),
            private_data::representable_size(cfg.inline_recv),
        )
    }

    /// What this side negotiates with: its advertised message, or the Version One defaults
    /// when it sends none (the peer assumes exactly that of it).
    fn ours(&self) -> PrivateData {
        if self.core.cfg.send_private_data {
            self.advertised()
        } else {
            PrivateData::V1_DEFAULTS
        }
    }

    /// RFC 8797 §4.2 with both ends using the advertised values: each direction's threshold is
    /// min(sender's advertised send size, receiver's advertised receive size). Our send
    /// threshold is further capped by what our send buffers really hold (an inline send size
    /// below 1024 is advertised as 1024, the smallest representable value).
    fn negotiate_with(&self, peer: Option<&PrivateData>) -> Negotiated {
        let mut n = private_data::negotiate(&self.ours(), peer);
        n.send_inline = n.send_inline.min(self.core.cfg.inline_send.max(1));
        n
    }

    /// Requester: the credits currently granted by the responder (1 until the first non-error
    /// reply; errors never change it).
    /// Responder: the credits granted.
    pub fn credits(&self) -> u32 {
        match &self.role {
            RoleState::Requester(r) => r.granted(),
            RoleState::Responder(_) => self.core.cfg.credits,
        }
    }

    /// Requester: calls outstanding (sent and not answered, timed-out ones included).
    pub fn outstanding(&self) -> u32 {
        match &self.role {
            RoleState::Requester(r) => r.outstanding(),
            RoleState::Responder(_) => 0,
        }
    }

    /// Receives currently posted.
    pub fn receives_posted(&self) -> u32 {
        self.core.rq_posted
    }

    /// Connection manager input.
    pub fn handle_cm(&mut self, now: u64, input: CmInput<'_>) {
        let _ = now;
        match input {
            CmInput::Established { private_data } => {
                if self.core.state != ConnState::Connecting {
                    return;
                }
                let peer = private_data::find(private_data);
                self.core.neg = self.negotiate_with(peer.as_ref());
                self.core.neg_v2 = v2_thresholds(&self.core.cfg, peer.is_some());
                self.core.state = ConnState::Connected;
                self.core.emit(Event::Connected(self.negotiated()));
                if let RoleState::Responder(r) = &mut self.role {
                    r.on_established(&mut self.core);
                }
            }
            CmInput::Disconnected => self.fail(),
        }
    }

    /// Closes the connection (once): reports the loss and fails what the role has pending.
    fn fail(&mut self) {
        self.core.state = ConnState::Closed;
        if self.core.lost_reported {
            return;
        }
        self.core.lost_reported = true;
        // The event ring keeps room for this (sized slots + receives + 4).
        let _ = self.core.events.push(Event::ConnectionLost);
        match &mut self.role {
            RoleState::Requester(r) => r.on_closed(&mut self.core),
            RoleState::Responder(r) => r.on_closed(&mut self.core),
        }
        match &mut self.back {
            Back::None => {}
            Back::Server(b) => b.on_closed(&mut self.core),
            Back::Client(b) => b.on_closed(&mut self.core),
        }
    }

    /// A work completion of this QP.
    pub fn handle_completion<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        wc: &Completion,
        mem: &mut M,
    ) {
        let id = WrId(wc.wr_id);
        let kind = id.kind();
        if kind == wr_kind::RECV {
            self.core.rq_posted = self.core.rq_posted.saturating_sub(1);
        } else {
            self.core.sq_used = self.core.sq_used.saturating_sub(1);
            if kind == wr_kind::READ {
                self.core.reads_used = self.core.reads_used.saturating_sub(1);
            }
        }
        let Ok(index) = u32::try_from(id.index()) else {
            self.fail();
            return;
        };
        if !wc.status.is_success() {
            if kind == wr_kind::RECV {
                if let Some(r) = self.core.recvs.get_mut(index as usize) {
                    if r.state == RecvState::Posted {
                        r.state = RecvState::Idle;
                        let _ = self.core.recv_idle.push(index);
                    }
                }
            }
            // The QP is in the error state: everything outstanding completes flushed.
            self.fail();
            return;
        }
        if self.core.state == ConnState::Closed {
            return;
        }
        let route = if kind == wr_kind::RECV {
            self.route(index, wc, mem)
        } else {
            wire::Route::Forward
        };
        if route == wire::Route::Optional {
            self.on_optional(index, wc, mem);
            self.check_closed();
            return;
        }
        match (kind, route, &mut self.back) {
            (wr_kind::BACK_SEND, _, Back::Server(b)) => b.on_send_complete(&mut self.core, index),
            (wr_kind::BACK_SEND, _, Back::Client(b)) => {
                b.on_send_complete(&mut self.core, index, mem)
            }
            (wr_kind::BACK_SEND, _, Back::None) => self.core.fail(),
            (_, wire::Route::Backward, Back::Server(b)) => {
                b.on_recv(&mut self.core, index, wc, mem)
            }
            (_, wire::Route::Backward, Back::Client(b)) => {
                b.on_recv(&mut self.core, index, wc, mem)
            }
            // (Optional messages were handled above.)
            (_, wire::Route::Drop | wire::Route::Backward | wire::Route::Optional, _) => {
                // Direction unknown, or a backward message while the backchannel is off:
                // repost the receive, use nothing of the message.
                self.core.hold_recv(index);
                self.core.release_recv(index);
            }
            (_, wire::Route::Forward, _) => match &mut self.role {
                RoleState::Requester(r) => {
                    r.on_completion(&mut self.core, now, kind, index, wc, mem)
                }
                RoleState::Responder(r) => {
                    r.on_completion(&mut self.core, now, kind, index, wc, mem)
                }
            },
        }
        self.check_closed();
    }

    /// An RDMA2_OPTIONAL message arrived in receive `index`: its handler, or
    /// RDMA2_ERR_INVAL_OPTION for a call-direction message of an unknown type (draft, "Optional
    /// Features"), sent by whichever side of this connection acts as responder for calls in
    /// that direction. Reply-direction messages are never answered.
    fn on_optional<M: HostMemory + ?Sized>(&mut self, index: u32, wc: &Completion, mem: &mut M) {
        self.core.hold_recv(index);
        let Some(rbuf) = self.core.recv_buf(index) else {
            self.core.fail();
            return;
        };
        let len = wc.byte_len.min(rbuf.len) as usize;
        let mut answer = None;
        if let Some(buf) = mem.bytes(rbuf.addr, len) {
            if let Ok(h) = crate::proto::v2::decode(buf, &self.core.v2_limits) {
                if let crate::proto::v2::Body::Optional(o) = h.body {
                    let msg = OptionalMessage {
                        xid: h.xid,
                        credits: h.credits,
                        direction: o.optdir,
                        opttype: o.opttype,
                        info: o.optinfo,
                        payload: h.payload,
                    };
                    match self
                        .optional
                        .iter_mut()
                        .flatten()
                        .find(|e| e.opttype == o.opttype)
                    {
                        Some(e) => (e.handler)(&msg),
                        None if o.optdir == crate::proto::v2::Direction::Call => {
                            answer = Some((h.xid, h.vers))
                        }
                        None => {}
                    }
                }
            }
        }
        self.core.release_recv(index);
        let Some((xid, vers)) = answer else {
            return;
        };
        let err = crate::proto::v2::RdmaError::InvalOption;
        match (&mut self.role, &mut self.back) {
            (RoleState::Responder(r), _) => r.answer_v2_error(&mut self.core, xid, vers, err, mem),
            (RoleState::Requester(_), Back::Client(b)) if b.enabled => {
                b.answer_v2_error(&mut self.core, xid, vers, err, mem)
            }
            // A client without a backchannel has no way to answer a call.
            _ => {}
        }
    }

    /// Which direction the message in receive `index` belongs to. Backward messages while the
    /// backchannel is off come back as [`wire::Route::Backward`] and are dropped by the caller.
    fn route<M: HostMemory + ?Sized>(
        &self,
        index: u32,
        wc: &Completion,
        mem: &mut M,
    ) -> wire::Route {
        let Some(rbuf) = self.core.recv_buf(index) else {
            return wire::Route::Forward;
        };
        let len = wc.byte_len.min(rbuf.len) as usize;
        let Some(buf) = mem.bytes(rbuf.addr, len) else {
            return wire::Route::Forward;
        };
        let r = wire::route(
            buf,
            self.role(),
            &self.core.v2_limits,
            self.core.cfg.max_version,
        );
        if r == wire::Route::Backward && !self.backchannel_enabled() {
            return wire::Route::Drop;
        }
        r
    }

    /// An input found the connection broken: finish closing it.
    fn check_closed(&mut self) {
        if self.core.state == ConnState::Closed && !self.core.lost_reported {
            self.fail();
        }
    }

    /// The time given by [`Connection::poll_timeout`] has come. `mem` is the host memory, as
    /// for completions: a Version Two probe that timed out is sent again from here.
    pub fn handle_timeout<M: HostMemory + ?Sized>(&mut self, now: u64, mem: &mut M) {
        if let RoleState::Requester(r) = &mut self.role {
            r.on_timeout(&mut self.core, now, mem);
        }
        self.check_closed();
    }

    /// The next work request to post.
    pub fn poll_wr(&mut self) -> Option<WorkRequest> {
        self.core.wrs.pop()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop()
    }

    /// When [`Connection::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        match &self.role {
            RoleState::Requester(r) => r.next_deadline(),
            RoleState::Responder(_) => None,
        }
    }

    /// Work requests waiting in [`Connection::poll_wr`].
    pub fn pending_wrs(&self) -> usize {
        self.core.wrs.len()
    }

    /// Requester: starts a call. On success the binds and the Send are queued for
    /// [`Connection::poll_wr`]; the outcome arrives as [`Event::ReplyReady`] or
    /// [`Event::CallFailed`]. The message parts, DDP items, receptacles and reply buffer must
    /// stay untouched until then.
    ///
    /// Responder (server) with an enabled backchannel: starts a backward-direction call
    /// (RFC 8167). It goes inline as RDMA_MSG with empty chunk lists (DDP items are sent
    /// inline, receptacles are refused); its XID is from the backward space (it may equal the
    /// XID of a forward call in progress). Without an enabled backchannel:
    /// [`StartError::BackchannelDisabled`].
    pub fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        spec: &CallSpec<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        self.start_call_with(now, spec, &CallOptions::NONE, mem)
    }

    /// [`Connection::start_call`] with options: a fallback reply buffer (and receptacles) for
    /// a retry after RDMA2_ERR_CANT_REPLY (Version Two) or ERR_CHUNK (Version One). The options are ignored for backward calls.
    pub fn start_call_with<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        let r = match (&mut self.role, &mut self.back) {
            (RoleState::Requester(r), _) => r.start_call(&mut self.core, now, spec, opts, mem),
            (RoleState::Responder(_), Back::Server(b)) => b.start_call(&mut self.core, spec, mem),
            (RoleState::Responder(_), _) => Err(StartError::BackchannelDisabled),
        };
        self.check_closed();
        r
    }

    /// Responder: answers `call`. The message parts and result items must stay untouched until
    /// the slot is reused (after the reply's Send completes).
    ///
    /// Requester (client) with an enabled backchannel: answers a backward call reported by
    /// [`Event::CallReady`], inline (results go inline; a reply too large for the inline
    /// threshold is answered with ERR_CHUNK, [`ReplyKind::ErrChunk`]).
    pub fn send_reply<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        call: CallId,
        spec: &ReplySpec<'_>,
        mem: &mut M,
    ) -> Result<ReplyKind, ReplyError> {
        let _ = now;
        let r = match (&mut self.role, &mut self.back) {
            (RoleState::Responder(r), _) => r.send_reply(&mut self.core, call, spec, mem),
            (RoleState::Requester(_), Back::Client(b)) => {
                b.send_reply(&mut self.core, call, spec, mem)
            }
            (RoleState::Requester(_), _) => Err(ReplyError::WrongRole),
        };
        self.check_closed();
        r
    }
}
