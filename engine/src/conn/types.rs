//! Public inputs and outputs of a connection: the work requests it asks the environment to
//! post ([`WorkRequest`], [`wr_kind`]), connection-manager inputs ([`CmInput`]), call and
//! reply specs ([`CallSpec`], [`CallOptions`], [`ReplySpec`]), the events it reports
//! ([`Event`], [`Reply`], [`IncomingCall`]), RDMA2_OPTIONAL messages, and every error a call
//! or a reply can end with.
//!
//! Normal operation: plain data exchanged with [`super::Connection`]. Recovery: the error types
//! say what failed ([`CallError`], [`BadReply`], [`StartError`], [`ReplyError`]); nothing here
//! acts.

use super::config::{LocalBuf, MAX_SGE, MAX_WRITE_CHUNKS};
use crate::proto::private_data::Negotiated;
use crate::verbs::{Sge, WrId};

pub use crate::verbs::Access;

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
    /// A receive posted by the node to its shared receive queue ([`conn::srq`]); index =
    /// shared buffer id.
    ///
    /// [`conn::srq`]: crate::conn::srq
    pub const SRQ_RECV: u8 = 8;
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
        /// Memory window slot index ([`Pools::mws`](super::Pools::mws)).
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
///
/// [`StagMode`]: super::StagMode
/// [`HostMemory::remote_key`]: super::HostMemory::remote_key
#[derive(Debug, Clone, Copy)]
pub struct CallSpec<'a> {
    /// The encoded RPC call (from its XID), without the DDP items, in up to [`MAX_PARTS`] parts.
    ///
    /// [`MAX_PARTS`]: super::MAX_PARTS
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
///
/// [`Connection::start_call_with`]: super::Connection::start_call_with
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
    ///
    /// [`MAX_PARTS`]: super::MAX_PARTS
    pub message: &'a [LocalBuf],
    /// DDP-eligible result items, in result order; the first goes to the first Write chunk, and
    /// so on. Items beyond the Write list go inline at their offsets.
    pub results: &'a [DdpItem],
}

/// Why [`Connection::start_call`] did not start a call. Nothing was posted.
///
/// [`Connection::start_call`]: super::Connection::start_call
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
    /// [`StagMode::Persistent`](super::StagMode::Persistent) and a buffer has no remote key.
    NoRemoteKey,
    /// Responder: a backward call, but the backchannel is not enabled
    /// ([`Connection::enable_backchannel`]: the peer's upper layer has not said it takes
    /// backward calls) or the connection has no backchannel memory. Nothing was sent.
    ///
    /// [`Connection::enable_backchannel`]: super::Connection::enable_backchannel
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
    /// No reply within [`Config::call_timeout_ns`](super::Config::call_timeout_ns).
    TimedOut,
    /// A Version Two RDMA2_ERROR other than RDMA2_ERR_VERS (reported as [`CallError::ErrVers`]):
    /// RDMA2_ERR_BAD_XDR, RDMA2_ERR_CANT_REPLY (when no fallback was given or the retry failed
    /// too), RDMA2_ERR_INVAL_PROC, RDMA2_ERR_INVAL_OPTION, or an unknown code.
    Rdma2(crate::proto::v2::RdmaError),
    /// The call had to be sent again (Version Two fallback to Version One after ERR_VERS, or a
    /// CANT_REPLY retry) and could not be.
    Resend(StartError),
}

/// Why [`Connection::send_reply`](super::Connection::send_reply) refused. Nothing was posted.
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

/// How [`Connection::send_reply`](super::Connection::send_reply) answered.
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

/// The Send of an answer finished (responder, [`Connection::poll_sent`]): the reply or
/// RDMA_ERROR of `call` went out (`ok`), or its Send completed in error or was flushed. The
/// call's slot is free again once the report is made (success) or the connection is gone.
///
/// [`Connection::poll_sent`]: super::Connection::poll_sent
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentAnswer {
    /// The call answered ([`Event::CallReady`]'s call).
    pub call: CallId,
    /// The Send completed successfully.
    pub ok: bool,
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
    /// The call (pass it to [`Connection::send_reply`](super::Connection::send_reply)).
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
///
/// [`Connection::register_optional`]: super::Connection::register_optional
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

/// Why [`Connection::register_optional`](super::Connection::register_optional) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionalError {
    /// [`MAX_OPTIONAL_HANDLERS`](super::MAX_OPTIONAL_HANDLERS) types are registered already.
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
