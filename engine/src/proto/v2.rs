//! RPC-over-RDMA Version Two transport header, exactly as this revision of the draft's XDR
//! defines it (`rpcrdma2_xprt_hdr`, `rdma_vers` = 2).
//!
//! Normal operation: [`decode`] reads the fixed words (XID, version, credits) first, then the
//! procedure and its body. RDMA2_MSG / RDMA2_NOMSG carry `rdma_direction` and `rdma_inv_handle`
//! ahead of the chunk lists, which are validated in one pass ([`super::chunks`]) and handed out
//! as views; RDMA2_OPTIONAL's `rdma_optinfo` is a borrowed slice bounded by
//! [`Limits::max_optinfo`]. [`encode`] writes any of the four procedures into a caller buffer,
//! [`encoded_len`] gives the size without encoding.
//!
//! Recovery: every failure is a [`HeaderError`]; [`HeaderError::response`] maps it to what the
//! draft's "Transport Errors" section requires: RDMA2_ERR_VERS for an unknown version,
//! RDMA2_ERR_INVAL_PROC for an unknown procedure of a known version, RDMA2_ERR_BAD_XDR when a
//! known procedure's header cannot be parsed (before any Upper Layer processing), and no answer
//! for messages too short to carry the fixed header, for RDMA2_ERROR messages, and for messages
//! whose `rdma_direction`/`rdma_optdir` says REPLY (a requester drops replies it cannot parse).
//! RDMA2_ERR_CANT_REPLY and RDMA2_ERR_INVAL_OPTION are decided above this layer (reply resources,
//! supported options); [`encode_error`] encodes them.

use super::be32;
use super::chunks::{parse_chunk_lists, ChunkError, ChunkLimits, ChunkLists, ChunkListsRef};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// The protocol version this module speaks.
pub const VERSION: u32 = 2;

/// Octets of the fixed part of every header: XID, version, credits, procedure.
pub const FIXED_LEN: usize = 16;

/// `enum msg_type` (RFC 5531) as used for `rdma_direction` and `rdma_optdir`, open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// CALL (0): requester to responder.
    Call,
    /// REPLY (1): responder to requester.
    Reply,
    /// Any other value (rejected by the decoder).
    Unknown(u32),
}

impl Direction {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            Direction::Call => 0,
            Direction::Reply => 1,
            Direction::Unknown(v) => v,
        }
    }
}

impl From<u32> for Direction {
    fn from(v: u32) -> Self {
        match v {
            0 => Direction::Call,
            1 => Direction::Reply,
            v => Direction::Unknown(v),
        }
    }
}

/// `rpcrdma2_proc`, open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proc {
    /// RDMA2_MSG (0).
    Msg,
    /// RDMA2_NOMSG (1).
    Nomsg,
    /// RDMA2_ERROR (4).
    Error,
    /// RDMA2_OPTIONAL (5).
    Optional,
    /// Any other value (2 and 3 are not defined in Version Two).
    Unknown(u32),
}

impl Proc {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            Proc::Msg => 0,
            Proc::Nomsg => 1,
            Proc::Error => 4,
            Proc::Optional => 5,
            Proc::Unknown(v) => v,
        }
    }
}

impl From<u32> for Proc {
    fn from(v: u32) -> Self {
        match v {
            0 => Proc::Msg,
            1 => Proc::Nomsg,
            4 => Proc::Error,
            5 => Proc::Optional,
            v => Proc::Unknown(v),
        }
    }
}

/// `rpcrdma2_errcode`, open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrCode {
    /// RDMA2_ERR_VERS (1).
    Vers,
    /// RDMA2_ERR_BAD_XDR (2).
    BadXdr,
    /// RDMA2_ERR_CANT_REPLY (3).
    CantReply,
    /// RDMA2_ERR_INVAL_PROC (4).
    InvalProc,
    /// RDMA2_ERR_INVAL_OPTION (5).
    InvalOption,
    /// Any other value.
    Unknown(u32),
}

impl ErrCode {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            ErrCode::Vers => 1,
            ErrCode::BadXdr => 2,
            ErrCode::CantReply => 3,
            ErrCode::InvalProc => 4,
            ErrCode::InvalOption => 5,
            ErrCode::Unknown(v) => v,
        }
    }
}

impl From<u32> for ErrCode {
    fn from(v: u32) -> Self {
        match v {
            1 => ErrCode::Vers,
            2 => ErrCode::BadXdr,
            3 => ErrCode::CantReply,
            4 => ErrCode::InvalProc,
            5 => ErrCode::InvalOption,
            v => ErrCode::Unknown(v),
        }
    }
}

/// The body of an RDMA2_ERROR (`rpcrdma2_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaError {
    /// RDMA2_ERR_VERS: versions `low..=high` are supported.
    Vers {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// RDMA2_ERR_BAD_XDR: the header could not be parsed.
    BadXdr,
    /// RDMA2_ERR_CANT_REPLY: the requester's Write/Reply chunks are too small.
    CantReply {
        /// `rdma_processed`: the shortage was found after the ULP processed the call.
        processed: bool,
        /// `rdma_segment_index`: 1-based index of the first segment too short (counting the
        /// Write list's segments then the Reply chunk's), or 0 when unknown.
        segment_index: u32,
        /// `rdma_length_needed`: octets that segment needed.
        length_needed: u32,
    },
    /// RDMA2_ERR_INVAL_PROC: the procedure is not recognised.
    InvalProc,
    /// RDMA2_ERR_INVAL_OPTION: the RDMA2_OPTIONAL type is not recognised.
    InvalOption,
    /// An error code this implementation does not know; it carries no body.
    Unknown(u32),
}

impl RdmaError {
    /// The error code.
    pub const fn code(&self) -> ErrCode {
        match *self {
            RdmaError::Vers { .. } => ErrCode::Vers,
            RdmaError::BadXdr => ErrCode::BadXdr,
            RdmaError::CantReply { .. } => ErrCode::CantReply,
            RdmaError::InvalProc => ErrCode::InvalProc,
            RdmaError::InvalOption => ErrCode::InvalOption,
            RdmaError::Unknown(v) => ErrCode::Unknown(v),
        }
    }

    /// Octets of the error body on the wire (code included).
    pub const fn encoded_len(&self) -> usize {
        match self {
            RdmaError::Vers { .. } => 12,
            RdmaError::CantReply { .. } => 16,
            RdmaError::BadXdr
            | RdmaError::InvalProc
            | RdmaError::InvalOption
            | RdmaError::Unknown(_) => 4,
        }
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        w.put_u32(self.code().to_u32())?;
        match *self {
            RdmaError::Vers { low, high } => {
                w.put_u32(low)?;
                w.put_u32(high)
            }
            RdmaError::CantReply {
                processed,
                segment_index,
                length_needed,
            } => {
                w.put_bool(processed)?;
                w.put_u32(segment_index)?;
                w.put_u32(length_needed)
            }
            _ => Ok(()),
        }
    }
}

/// Decoded `rpcrdma2_chunk_lists`: direction, invalidation handle, and the validated lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks<'a> {
    /// `rdma_direction` (CALL or REPLY; anything else is rejected).
    pub direction: Direction,
    /// `rdma_inv_handle`: the handle the responder may invalidate remotely, 0 for none.
    pub inv_handle: u32,
    /// Read list, Write list, Reply chunk.
    pub lists: ChunkLists<'a>,
}

/// `rpcrdma2_optional`, borrowed (decoding) or caller-provided (encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Optional<'a> {
    /// `rdma_optdir`.
    pub optdir: Direction,
    /// `rdma_opttype`.
    pub opttype: u32,
    /// `rdma_optinfo`, without its length word and pad.
    pub optinfo: &'a [u8],
}

/// A decoded header body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// RDMA2_MSG: an RPC message follows the header.
    Msg(Chunks<'a>),
    /// RDMA2_NOMSG: the RPC message is in a Position Zero Read chunk or the Reply chunk.
    Nomsg(Chunks<'a>),
    /// RDMA2_ERROR.
    Error(RdmaError),
    /// RDMA2_OPTIONAL (whether `opttype` is supported is the receiver's call; if not, it answers
    /// RDMA2_ERR_INVAL_OPTION).
    Optional(Optional<'a>),
}

/// A decoded Version Two header, borrowing the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers` (always [`VERSION`] in a decoded header).
    pub vers: u32,
    /// `rdma_credit`, as on the wire.
    pub credits: u32,
    /// Procedure and body.
    pub body: Body<'a>,
    /// Octets of transport header; the RPC payload starts here.
    pub header_len: usize,
    /// Everything after the transport header.
    pub payload: &'a [u8],
}

impl<'a> Header<'a> {
    /// The procedure.
    pub const fn proc(&self) -> Proc {
        match self.body {
            Body::Msg(_) => Proc::Msg,
            Body::Nomsg(_) => Proc::Nomsg,
            Body::Error(_) => Proc::Error,
            Body::Optional(_) => Proc::Optional,
        }
    }

    /// The chunks of RDMA2_MSG / RDMA2_NOMSG.
    pub const fn chunks(&self) -> Option<&Chunks<'a>> {
        match &self.body {
            Body::Msg(c) | Body::Nomsg(c) => Some(c),
            Body::Error(_) | Body::Optional(_) => None,
        }
    }

    /// The message direction: `rdma_direction`, `rdma_optdir`, or REPLY for RDMA2_ERROR
    /// (draft, "Message Direction").
    pub const fn direction(&self) -> Direction {
        match &self.body {
            Body::Msg(c) | Body::Nomsg(c) => c.direction,
            Body::Optional(o) => o.optdir,
            Body::Error(_) => Direction::Reply,
        }
    }
}

/// Decoding limits for Version Two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Chunk list limits.
    pub chunks: ChunkLimits,
    /// Largest `rdma_optinfo` accepted. Default 4096, the Version Two default inline threshold
    /// (no larger optinfo can arrive in a default-sized receive buffer).
    pub max_optinfo: u32,
}

impl Limits {
    /// The default limits.
    pub const DEFAULT: Self = Self {
        chunks: ChunkLimits::DEFAULT,
        max_optinfo: 4096,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which rule a header broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderErrorKind {
    /// Fewer than [`FIXED_LEN`] octets. Drop.
    ShortHeader {
        /// Octets received.
        len: usize,
    },
    /// A version other than 2. RDMA2_ERR_VERS.
    BadVersion {
        /// The version found.
        vers: u32,
    },
    /// An RDMA_ERROR of a version this decoder does not speak. The place of `rdma_proc` and
    /// the value of RDMA_ERROR are the same in every version (RFC 8166 §7), so it is recognised
    /// as an error and dropped rather than answered (answering could loop between two
    /// endpoints with no common version). When it is an ERR_VERS its range is carried here,
    /// since that body's layout is fixed too.
    ForeignError {
        /// The version found.
        vers: u32,
        /// `rdma_vers_low..=rdma_vers_high` when the error is a complete ERR_VERS.
        vers_range: Option<(u32, u32)>,
    },
    /// A procedure not defined in Version Two. RDMA2_ERR_INVAL_PROC (draft, Transport Errors).
    UnknownProc {
        /// The value found.
        value: u32,
    },
    /// The body ended early outside the chunk lists. RDMA2_ERR_BAD_XDR.
    Truncated {
        /// Offset of the item.
        at: usize,
        /// Octets it needed.
        needed: usize,
    },
    /// `rdma_direction` / `rdma_optdir` is neither CALL nor REPLY. RDMA2_ERR_BAD_XDR.
    BadDirection {
        /// Offset of the word.
        at: usize,
        /// The value found.
        value: u32,
    },
    /// The chunk lists broke a rule. RDMA2_ERR_BAD_XDR.
    Chunk(ChunkError),
    /// RDMA2_MSG with a Position Zero Read chunk (the RPC header is inline). RDMA2_ERR_BAD_XDR.
    PositionZeroInMsg {
        /// Offset of the first Read list entry.
        at: usize,
    },
    /// RDMA2_NOMSG call without a Position Zero Read chunk: the call is nowhere.
    /// RDMA2_ERR_BAD_XDR.
    NomsgCallWithoutPositionZero,
    /// RDMA2_NOMSG reply without a Reply chunk: the reply is nowhere. Drop (a reply).
    NomsgReplyWithoutReplyChunk,
    /// A reply carrying a Read list (the Read-Read model is retired). Drop (a reply).
    ReadListInReply,
    /// A call whose `rdma_inv_handle` is neither zero nor one of its chunk handles (the
    /// requester "MUST NOT set the value of the rdma_inv_handle field to any other value", draft "Remote Invalidation").
    /// RDMA2_ERR_BAD_XDR.
    InvHandleNotInChunks {
        /// The handle found.
        handle: u32,
    },
    /// RDMA2_MSG whose payload is too short for an RPC XID and message type ("an RPC Payload
    /// Stream MUST follow", draft "Presence Of Payload"): too small to convey a complete RPC
    /// message, so dropped without using any of its fields (RFC 8167 §5.3, which Version Two
    /// incorporates). Drop.
    MissingPayload {
        /// Payload octets present.
        len: usize,
    },
    /// RDMA2_MSG whose RPC XID differs from `rdma_xid`. RDMA2_ERR_BAD_XDR.
    XidMismatch {
        /// The XID in the RPC message.
        rpc_xid: u32,
    },
    /// RDMA2_MSG whose `rdma_direction` differs from the RPC message's `msg_type` (draft,
    /// "Message Direction": they MUST be the same). RDMA2_ERR_BAD_XDR.
    DirectionMismatch {
        /// The RPC message's `msg_type`.
        msg_type: u32,
    },
    /// `rdma_optinfo` longer than [`Limits::max_optinfo`]. RDMA2_ERR_BAD_XDR.
    OptInfoTooLong {
        /// Length on the wire.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// `rdma_optinfo` followed by pad octets that are not zero (XDR requires zero residual
    /// octets, RFC 4506 §4.9). RDMA2_ERR_BAD_XDR.
    NonZeroPad {
        /// Offset of the first pad octet.
        at: usize,
    },
    /// An RDMA2_ERROR whose body is truncated or malformed. Drop: errors are never answered.
    ErrorBodyMalformed {
        /// Offset of the item.
        at: usize,
    },
    /// Octets follow an RDMA2_ERROR ("an RPC Payload Stream MUST NOT follow", draft
    /// "Presence Of Payload"). Drop: errors are never answered.
    PayloadAfterError {
        /// Octets after the error body.
        len: usize,
    },
    /// RDMA2_OPTIONAL whose payload starts an RPC message (its first word is `rdma_xid`) with
    /// a `msg_type` other than `rdma_optdir` (draft, "Message Direction": they MUST be the
    /// same). RDMA2_ERR_BAD_XDR for a CALL, dropped for a REPLY.
    OptDirMismatch {
        /// The RPC message's `msg_type`.
        msg_type: u32,
    },
}

impl HeaderErrorKind {
    /// True when the message was cut short.
    pub const fn is_truncated(&self) -> bool {
        match self {
            HeaderErrorKind::ShortHeader { .. }
            | HeaderErrorKind::Truncated { .. }
            | HeaderErrorKind::MissingPayload { .. } => true,
            HeaderErrorKind::Chunk(c) => c.is_truncated(),
            _ => false,
        }
    }
}

/// A rejected header: the rule, plus what is needed to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderError {
    /// The rule broken.
    pub kind: HeaderErrorKind,
    /// `rdma_xid`, when at least four octets arrived.
    pub xid: Option<u32>,
    /// `rdma_vers`, when at least eight octets arrived.
    pub vers: Option<u32>,
    /// The message direction, when it was decoded before the failure.
    pub direction: Option<Direction>,
}

/// What the receiver must do about a rejected header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Discard without answering.
    Drop,
    /// Answer RDMA2_ERROR with this error, copying `xid` and `vers` from the offending message
    /// (draft, Transport Errors). For [`RdmaError::Vers`], fill in the supported range with
    /// [`Response::encode`].
    Error {
        /// XID to answer with.
        xid: u32,
        /// Version copied into the answer.
        vers: u32,
        /// The error code to send: [`ErrCode::Vers`], [`ErrCode::InvalProc`] or
        /// [`ErrCode::BadXdr`].
        code: ErrCode,
    },
}

impl Response {
    /// Encodes the answer into `out`: `Ok(0)` for [`Response::Drop`], else the octets written.
    /// `low..=high` is the version range this endpoint supports (for RDMA2_ERR_VERS).
    pub fn encode(
        &self,
        credits: u32,
        low: u32,
        high: u32,
        out: &mut [u8],
    ) -> Result<usize, XdrError> {
        match *self {
            Response::Drop => Ok(0),
            Response::Error { xid, vers, code } => {
                let e = match code {
                    ErrCode::Vers => RdmaError::Vers { low, high },
                    ErrCode::BadXdr => RdmaError::BadXdr,
                    ErrCode::InvalProc => RdmaError::InvalProc,
                    ErrCode::InvalOption => RdmaError::InvalOption,
                    ErrCode::CantReply => RdmaError::CantReply {
                        processed: false,
                        segment_index: 0,
                        length_needed: 0,
                    },
                    ErrCode::Unknown(v) => RdmaError::Unknown(v),
                };
                encode_error(xid, vers, credits, &e, out)
            }
        }
    }
}

impl HeaderError {
    /// The response the draft requires (see [`Response`]).
    pub const fn response(&self) -> Response {
        let (xid, vers) = match (self.xid, self.vers) {
            (Some(x), Some(v)) => (x, v),
            _ => return Response::Drop,
        };
        // A message that says it is a reply is never answered.
        if let Some(Direction::Reply) = self.direction {
            return Response::Drop;
        }
        let code = match self.kind {
            HeaderErrorKind::ShortHeader { .. }
            | HeaderErrorKind::ForeignError { .. }
            | HeaderErrorKind::ErrorBodyMalformed { .. }
            | HeaderErrorKind::PayloadAfterError { .. }
            | HeaderErrorKind::MissingPayload { .. }
            | HeaderErrorKind::NomsgReplyWithoutReplyChunk
            | HeaderErrorKind::ReadListInReply => return Response::Drop,
            HeaderErrorKind::BadVersion { .. } => ErrCode::Vers,
            HeaderErrorKind::UnknownProc { .. } => ErrCode::InvalProc,
            HeaderErrorKind::Truncated { .. }
            | HeaderErrorKind::BadDirection { .. }
            | HeaderErrorKind::Chunk(_)
            | HeaderErrorKind::PositionZeroInMsg { .. }
            | HeaderErrorKind::NomsgCallWithoutPositionZero
            | HeaderErrorKind::InvHandleNotInChunks { .. }
            | HeaderErrorKind::XidMismatch { .. }
            | HeaderErrorKind::DirectionMismatch { .. }
            | HeaderErrorKind::OptDirMismatch { .. }
            | HeaderErrorKind::OptInfoTooLong { .. }
            | HeaderErrorKind::NonZeroPad { .. } => ErrCode::BadXdr,
        };
        Response::Error { xid, vers, code }
    }
}

impl core::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RPC-over-RDMA v2 header rejected: {:?}", self.kind)
    }
}

impl std::error::Error for HeaderError {}

fn get_direction(r: &mut XdrReader<'_>) -> Result<Direction, HeaderErrorKind> {
    let at = r.position();
    let v = r
        .get_u32()
        .map_err(|_| HeaderErrorKind::Truncated { at, needed: 4 })?;
    match Direction::from(v) {
        Direction::Unknown(value) => Err(HeaderErrorKind::BadDirection { at, value }),
        d => Ok(d),
    }
}

/// Checks the rules that depend on procedure and direction.
fn check_chunks(
    p: Proc,
    xid: u32,
    c: &Chunks<'_>,
    lists_at: usize,
    payload: &[u8],
) -> Result<(), HeaderErrorKind> {
    let l = &c.lists;
    if c.direction == Direction::Reply && !l.reads.is_empty() {
        return Err(HeaderErrorKind::ReadListInReply);
    }
    if p == Proc::Msg {
        if l.reads.has_position_zero() {
            return Err(HeaderErrorKind::PositionZeroInMsg { at: lists_at });
        }
        let (Some(rpc_xid), Some(msg_type)) = (be32(payload, 0), be32(payload, 4)) else {
            return Err(HeaderErrorKind::MissingPayload { len: payload.len() });
        };
        if rpc_xid != xid {
            return Err(HeaderErrorKind::XidMismatch { rpc_xid });
        }
        if msg_type != c.direction.to_u32() {
            return Err(HeaderErrorKind::DirectionMismatch { msg_type });
        }
    } else {
        match c.direction {
            Direction::Call if !l.reads.has_position_zero() => {
                return Err(HeaderErrorKind::NomsgCallWithoutPositionZero)
            }
            Direction::Reply if l.reply.is_none() => {
                return Err(HeaderErrorKind::NomsgReplyWithoutReplyChunk)
            }
            _ => {}
        }
    }
    if c.direction == Direction::Call
        && c.inv_handle != 0
        && !l.segments().any(|s| s.handle == c.inv_handle)
    {
        return Err(HeaderErrorKind::InvHandleNotInChunks {
            handle: c.inv_handle,
        });
    }
    Ok(())
}

/// Decodes and validates a Version Two transport header at the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Header<'a>, HeaderError> {
    let xid0 = be32(buf, 0);
    let vers0 = be32(buf, 4);
    let (Some(xid), Some(vers), Some(credits), Some(proc_raw)) =
        (xid0, vers0, be32(buf, 8), be32(buf, 12))
    else {
        return Err(HeaderError {
            kind: HeaderErrorKind::ShortHeader { len: buf.len() },
            xid: xid0,
            vers: vers0,
            direction: None,
        });
    };
    let err = |kind, direction| HeaderError {
        kind,
        xid: Some(xid),
        vers: Some(vers),
        direction,
    };
    if vers != VERSION {
        let kind = if proc_raw == Proc::Error.to_u32() {
            HeaderErrorKind::ForeignError {
                vers,
                vers_range: super::any_version_err_vers(buf),
            }
        } else {
            HeaderErrorKind::BadVersion { vers }
        };
        return Err(err(kind, None));
    }
    let mut r = XdrReader::new(buf);
    // The fixed words were read above; skip them (cannot fail).
    let _ = r.skip(FIXED_LEN);
    let body = match Proc::from(proc_raw) {
        p @ (Proc::Msg | Proc::Nomsg) => {
            let d = get_direction(&mut r).map_err(|k| err(k, None))?;
            let direction = Some(d);
            let at = r.position();
            let inv_handle = r
                .get_u32()
                .map_err(|_| err(HeaderErrorKind::Truncated { at, needed: 4 }, direction))?;
            let lists_at = r.position();
            let lists = parse_chunk_lists(&mut r, &limits.chunks)
                .map_err(|e| err(HeaderErrorKind::Chunk(e), direction))?;
            let c = Chunks {
                direction: d,
                inv_handle,
                lists,
            };
            check_chunks(p, xid, &c, lists_at, r.rest()).map_err(|k| err(k, direction))?;
            if p == Proc::Msg {
                Body::Msg(c)
            } else {
                Body::Nomsg(c)
            }
        }
        Proc::Error => {
            // RDMA2_ERROR always travels responder to requester.
            let malformed = |at| {
                err(
                    HeaderErrorKind::ErrorBodyMalformed { at },
                    Some(Direction::Reply),
                )
            };
            let at = r.position();
            let code = r.get_u32().map_err(|_| malformed(at))?;
            let at = r.position();
            let e = match ErrCode::from(code) {
                ErrCode::Vers => match (r.get_u32(), r.get_u32()) {
                    (Ok(low), Ok(high)) => RdmaError::Vers { low, high },
                    _ => return Err(malformed(at)),
                },
                ErrCode::BadXdr => RdmaError::BadXdr,
                ErrCode::CantReply => match (r.get_bool(), r.get_u32(), r.get_u32()) {
                    (Ok(processed), Ok(segment_index), Ok(length_needed)) => RdmaError::CantReply {
                        processed,
                        segment_index,
                        length_needed,
                    },
                    _ => return Err(malformed(at)),
                },
                ErrCode::InvalProc => RdmaError::InvalProc,
                ErrCode::InvalOption => RdmaError::InvalOption,
                ErrCode::Unknown(v) => RdmaError::Unknown(v),
            };
            if !r.rest().is_empty() {
                return Err(err(
                    HeaderErrorKind::PayloadAfterError {
                        len: r.rest().len(),
                    },
                    Some(Direction::Reply),
                ));
            }
            Body::Error(e)
        }
        Proc::Optional => {
            let optdir = get_direction(&mut r).map_err(|k| err(k, None))?;
            let direction = Some(optdir);
            let at = r.position();
            let opttype = r
                .get_u32()
                .map_err(|_| err(HeaderErrorKind::Truncated { at, needed: 4 }, direction))?;
            let at = r.position();
            let optinfo = r.get_opaque(limits.max_optinfo).map_err(|e| {
                let k = match e {
                    XdrError::TooLong { len, max, .. } => {
                        HeaderErrorKind::OptInfoTooLong { len, max }
                    }
                    XdrError::Truncated { at, needed } => HeaderErrorKind::Truncated { at, needed },
                    _ => HeaderErrorKind::Truncated { at, needed: 4 },
                };
                err(k, direction)
            })?;
            let pad_at = at + 4 + optinfo.len();
            if buf
                .get(pad_at..r.position())
                .is_some_and(|p| p.iter().any(|&b| b != 0))
            {
                return Err(err(HeaderErrorKind::NonZeroPad { at: pad_at }, direction));
            }
            // A payload that starts an RPC message (identified by its XID; a part that does
            // not start one cannot be checked) must travel in the message's own direction.
            let payload = r.rest();
            if let (Some(rpc_xid), Some(msg_type)) = (be32(payload, 0), be32(payload, 4)) {
                if rpc_xid == xid && msg_type != optdir.to_u32() {
                    return Err(err(HeaderErrorKind::OptDirMismatch { msg_type }, direction));
                }
            }
            Body::Optional(Optional {
                optdir,
                opttype,
                optinfo,
            })
        }
        Proc::Unknown(value) => return Err(err(HeaderErrorKind::UnknownProc { value }, None)),
    };
    Ok(Header {
        xid,
        vers,
        credits,
        body,
        header_len: r.position(),
        payload: r.rest(),
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// Outgoing `rpcrdma2_chunk_lists`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunksRef<'a> {
    /// `rdma_direction`.
    pub direction: Direction,
    /// `rdma_inv_handle` (0: none may be invalidated remotely).
    pub inv_handle: u32,
    /// The chunk lists.
    pub lists: ChunkListsRef<'a>,
}

impl ChunksRef<'_> {
    fn encoded_len(&self) -> usize {
        8usize.saturating_add(self.lists.encoded_len())
    }
}

/// The body of an outgoing Version Two header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageBody<'a> {
    /// RDMA2_MSG; the caller appends the RPC message.
    Msg(ChunksRef<'a>),
    /// RDMA2_NOMSG.
    Nomsg(ChunksRef<'a>),
    /// RDMA2_ERROR (with `rdma_vers` = 2; see [`encode_error`] to copy another version).
    Error(RdmaError),
    /// RDMA2_OPTIONAL.
    Optional(Optional<'a>),
}

/// An outgoing Version Two header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`.
    pub credits: u32,
    /// Procedure and body.
    pub body: MessageBody<'a>,
}

/// Octets `msg` takes on the wire, computed without encoding.
pub fn encoded_len(msg: &Message<'_>) -> usize {
    FIXED_LEN.saturating_add(match &msg.body {
        MessageBody::Msg(c) | MessageBody::Nomsg(c) => c.encoded_len(),
        MessageBody::Error(e) => e.encoded_len(),
        MessageBody::Optional(o) => 12usize.saturating_add(crate::xdr::roundup4(o.optinfo.len())),
    })
}

/// Encodes `msg` at the writer's position. Writes nothing unless all of it fits.
pub fn encode_into(msg: &Message<'_>, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
    let need = encoded_len(msg);
    if need > w.remaining() {
        return Err(XdrError::NoSpace {
            needed: w.position().saturating_add(need),
            capacity: w.position().saturating_add(w.remaining()),
        });
    }
    let proc_ = match msg.body {
        MessageBody::Msg(_) => Proc::Msg,
        MessageBody::Nomsg(_) => Proc::Nomsg,
        MessageBody::Error(_) => Proc::Error,
        MessageBody::Optional(_) => Proc::Optional,
    };
    w.put_u32(msg.xid)?;
    w.put_u32(VERSION)?;
    w.put_u32(msg.credits)?;
    w.put_u32(proc_.to_u32())?;
    match &msg.body {
        MessageBody::Msg(c) | MessageBody::Nomsg(c) => {
            w.put_u32(c.direction.to_u32())?;
            w.put_u32(c.inv_handle)?;
            c.lists.encode(w)
        }
        MessageBody::Error(e) => e.encode(w),
        MessageBody::Optional(o) => {
            w.put_u32(o.optdir.to_u32())?;
            w.put_u32(o.opttype)?;
            w.put_opaque(o.optinfo)
        }
    }
}

/// Encodes `msg` at the start of `out`; returns the octets written.
pub fn encode(msg: &Message<'_>, out: &mut [u8]) -> Result<usize, XdrError> {
    let mut w = XdrWriter::new(out);
    encode_into(msg, &mut w)?;
    Ok(w.finish())
}

/// Encodes an RDMA2_ERROR answering a message with `xid` and version `vers` (both copied from
/// the offending message, draft "Transport Errors").
pub fn encode_error(
    xid: u32,
    vers: u32,
    credits: u32,
    e: &RdmaError,
    out: &mut [u8],
) -> Result<usize, XdrError> {
    let need = FIXED_LEN + e.encoded_len();
    if need > out.len() {
        return Err(XdrError::NoSpace {
            needed: need,
            capacity: out.len(),
        });
    }
    let mut w = XdrWriter::new(out);
    w.put_u32(xid)?;
    w.put_u32(vers)?;
    w.put_u32(credits)?;
    w.put_u32(Proc::Error.to_u32())?;
    e.encode(&mut w)?;
    Ok(w.finish())
}
