//! RPC-over-RDMA Version One transport header (RFC 8166; XDR as revised in Appendix A of the
//! implementation-experience draft: `rpcrdma1_msg`).
//!
//! Normal operation: [`decode`] reads the fixed words (XID, version, credits) first, so the XID
//! is known for any answer, then the procedure and its body, validating the chunk lists in one
//! pass ([`super::chunks`]). The result borrows the receive buffer: the chunk lists are views and
//! [`Header::payload`] is the RPC message that follows the transport header. [`encode`] writes an
//! RDMA_MSG, RDMA_NOMSG or RDMA_ERROR header into a caller buffer; [`encoded_len`] gives its size
//! without encoding. Deprecated procedures are decoded but not normally encodable: RDMA_DONE is
//! never encodable, RDMA_MSGP only through [`encode_msgp_deprecated`].
//!
//! Recovery: every failure is a [`HeaderError`] whose kind names the rule, and
//! [`HeaderError::response`] says what a responder must do about it: answer ERR_VERS (unknown
//! version, RFC 8166 §4.4.1), answer ERR_CHUNK (a recognised version whose header cannot be
//! parsed, RFC 8166 §4.4.2), or drop (too short to carry the fixed header, or the message is an
//! RDMA_ERROR or a reply, which are never answered). A requester that cannot parse a reply drops
//! it (RFC 8166 §4.4.2); [`Header::check_reply`] holds the reply-only rules.

use super::be32;
use super::chunks::{parse_chunk_lists, ChunkError, ChunkLimits, ChunkLists, ChunkListsRef};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// The protocol version this module speaks.
pub const VERSION: u32 = 1;

/// Octets of the fixed part of every header: XID, version, credits, procedure.
pub const FIXED_LEN: usize = 16;

/// Octets of an RDMA_ERROR / ERR_VERS message.
pub const ERR_VERS_LEN: usize = 28;

/// Octets of an RDMA_ERROR / ERR_CHUNK message.
pub const ERR_CHUNK_LEN: usize = 20;

/// `rpcrdma1_proc`, open: unknown values are preserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proc {
    /// RDMA_MSG (0): the RPC message follows the header inline.
    Msg,
    /// RDMA_NOMSG (1): the RPC message is in a Position Zero Read chunk or the Reply chunk.
    Nomsg,
    /// RDMA_MSGP (2): deprecated (RFC 8166 §4.5.1).
    Msgp,
    /// RDMA_DONE (3): deprecated (RFC 8166 §4.5.2).
    Done,
    /// RDMA_ERROR (4).
    Error,
    /// Any other value.
    Unknown(u32),
}

impl Proc {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            Proc::Msg => 0,
            Proc::Nomsg => 1,
            Proc::Msgp => 2,
            Proc::Done => 3,
            Proc::Error => 4,
            Proc::Unknown(v) => v,
        }
    }
}

impl From<u32> for Proc {
    fn from(v: u32) -> Self {
        match v {
            0 => Proc::Msg,
            1 => Proc::Nomsg,
            2 => Proc::Msgp,
            3 => Proc::Done,
            4 => Proc::Error,
            v => Proc::Unknown(v),
        }
    }
}

/// `rpcrdma1_errcode`, open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrCode {
    /// ERR_VERS (1).
    Vers,
    /// ERR_CHUNK (2).
    Chunk,
    /// Any other value.
    Unknown(u32),
}

impl ErrCode {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            ErrCode::Vers => 1,
            ErrCode::Chunk => 2,
            ErrCode::Unknown(v) => v,
        }
    }
}

impl From<u32> for ErrCode {
    fn from(v: u32) -> Self {
        match v {
            1 => ErrCode::Vers,
            2 => ErrCode::Chunk,
            v => ErrCode::Unknown(v),
        }
    }
}

/// The body of an RDMA_ERROR (`rpcrdma1_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaError {
    /// ERR_VERS: the sender supports versions `low..=high`.
    Vers {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// ERR_CHUNK: the header could not be parsed.
    Chunk,
    /// An error code this implementation does not know; it carries no body.
    Unknown(u32),
}

impl RdmaError {
    /// The error code.
    pub const fn code(&self) -> ErrCode {
        match *self {
            RdmaError::Vers { .. } => ErrCode::Vers,
            RdmaError::Chunk => ErrCode::Chunk,
            RdmaError::Unknown(v) => ErrCode::Unknown(v),
        }
    }

    const fn encoded_len(&self) -> usize {
        match self {
            RdmaError::Vers { .. } => 12,
            RdmaError::Chunk | RdmaError::Unknown(_) => 4,
        }
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        w.put_u32(self.code().to_u32())?;
        if let RdmaError::Vers { low, high } = *self {
            w.put_u32(low)?;
            w.put_u32(high)?;
        }
        Ok(())
    }
}

/// A decoded header body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// RDMA_MSG.
    Msg(ChunkLists<'a>),
    /// RDMA_NOMSG.
    Nomsg(ChunkLists<'a>),
    /// RDMA_MSGP. Receivers treat it as RDMA_MSG and ignore the alignment parameters
    /// (implementation-experience §7.1.3). RFC 8166 §4.5.1 says receivers SHOULD instead answer
    /// ERR_CHUNK; an endpoint that prefers that can answer [`Response::ErrChunk`] itself.
    Msgp {
        /// `rdma_align` (ignored).
        align: u32,
        /// `rdma_thresh` (ignored).
        thresh: u32,
        /// The chunk lists, validated exactly as for RDMA_MSG.
        chunks: ChunkLists<'a>,
    },
    /// RDMA_DONE: receivers silently discard it (RFC 8166 §4.5.2); see [`Disposition::Ignore`].
    Done,
    /// RDMA_ERROR.
    Error(RdmaError),
}

/// What the receiver does with a successfully decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// RDMA_MSG, RDMA_NOMSG or RDMA_MSGP: an RPC message to process.
    Deliver,
    /// RDMA_ERROR: terminate the call with this XID (never answered).
    Error,
    /// RDMA_DONE: silently discard (RFC 8166 §4.5.2).
    Ignore,
}

/// A decoded Version One header, borrowing the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers` (always [`VERSION`] in a decoded header).
    pub vers: u32,
    /// `rdma_credit`, as on the wire (clamping is the connection's job).
    pub credits: u32,
    /// The procedure and its body.
    pub body: Body<'a>,
    /// Octets of transport header; the RPC payload starts here.
    pub header_len: usize,
    /// Everything after the transport header (the RPC message for RDMA_MSG / RDMA_MSGP).
    pub payload: &'a [u8],
}

impl<'a> Header<'a> {
    /// The procedure.
    pub const fn proc(&self) -> Proc {
        match self.body {
            Body::Msg(_) => Proc::Msg,
            Body::Nomsg(_) => Proc::Nomsg,
            Body::Msgp { .. } => Proc::Msgp,
            Body::Done => Proc::Done,
            Body::Error(_) => Proc::Error,
        }
    }

    /// The chunk lists of RDMA_MSG, RDMA_NOMSG and RDMA_MSGP.
    pub const fn chunks(&self) -> Option<&ChunkLists<'a>> {
        match &self.body {
            Body::Msg(c) | Body::Nomsg(c) | Body::Msgp { chunks: c, .. } => Some(c),
            Body::Done | Body::Error(_) => None,
        }
    }

    /// What to do with the message.
    pub const fn disposition(&self) -> Disposition {
        match self.body {
            Body::Msg(_) | Body::Nomsg(_) | Body::Msgp { .. } => Disposition::Deliver,
            Body::Error(_) => Disposition::Error,
            Body::Done => Disposition::Ignore,
        }
    }

    /// Rules that hold only for calls (checked by a responder once it knows the message is a
    /// call): an RDMA_NOMSG call carries its RPC message in a Position Zero Read chunk (RFC 8166
    /// §3.5.3, Long Messages); without one the call cannot be parsed → ERR_CHUNK.
    pub fn check_call(&self) -> Result<(), HeaderError> {
        if let Body::Nomsg(c) = &self.body {
            if !c.reads.has_position_zero() {
                return Err(self.error(HeaderErrorKind::NomsgCallWithoutPositionZero));
            }
        }
        Ok(())
    }

    /// Rules that hold only for replies (checked by a requester): an RDMA_NOMSG reply carries
    /// its RPC message in the Reply chunk (RFC 8166 §3.5.3, Long Messages), and replies carry no
    /// Read list (the Read-Read transfer model is retired; implementation-experience §7.1.2).
    /// A requester drops replies it cannot parse.
    pub fn check_reply(&self) -> Result<(), HeaderError> {
        if let Some(c) = self.chunks() {
            if !c.reads.is_empty() {
                return Err(self.error(HeaderErrorKind::ReadListInReply));
            }
            if matches!(self.body, Body::Nomsg(_)) && c.reply.is_none() {
                return Err(self.error(HeaderErrorKind::NomsgReplyWithoutReplyChunk));
            }
        }
        Ok(())
    }

    const fn error(&self, kind: HeaderErrorKind) -> HeaderError {
        HeaderError {
            kind,
            xid: Some(self.xid),
            vers: Some(self.vers),
        }
    }
}

/// Which rule a header broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderErrorKind {
    /// Fewer than [`FIXED_LEN`] octets: not even the fixed header. Drop.
    ShortHeader {
        /// Octets received.
        len: usize,
    },
    /// A version other than 1. Answer ERR_VERS (RFC 8166 §4.4.1).
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
    /// A procedure that is not defined. RFC 8166 §4.4.2 names "an invalid value in the
    /// rdma_proc field" as an XDR error, which a responder answers with ERR_CHUNK.
    UnknownProc {
        /// The value found.
        value: u32,
    },
    /// The body ended early outside the chunk lists (RDMA_MSGP alignment words). ERR_CHUNK.
    Truncated {
        /// Offset of the item.
        at: usize,
        /// Octets it needed.
        needed: usize,
    },
    /// The chunk lists broke a rule (see [`ChunkError`]). ERR_CHUNK (RFC 8166 §4.4.2).
    Chunk(ChunkError),
    /// An RDMA_MSG (or RDMA_MSGP) with a Position Zero Read chunk: the RPC header cannot both
    /// be inline and start in a chunk at position zero (implementation-experience §3.6).
    /// ERR_CHUNK.
    PositionZeroInMsg {
        /// Offset of the first Read list entry.
        at: usize,
    },
    /// An RDMA_NOMSG with neither a Position Zero Read chunk nor a Reply chunk: the RPC message
    /// is nowhere. RFC 8166 §4.4.2 names the case with all lists empty as an XDR error; a
    /// Write list or Read chunks at other positions cannot carry the message either. ERR_CHUNK.
    NomsgWithoutChunk,
    /// An RDMA_MSG (or RDMA_MSGP) whose inline payload is too short to hold an RPC XID and
    /// `msg_type`: too small to convey a complete RPC message, so dropped without using any of
    /// its fields, `rdma_credit` included (RFC 8167 §5.3). Drop.
    MissingPayload {
        /// Payload octets present.
        len: usize,
    },
    /// The XID of the inline RPC message differs from `rdma_xid`: an XDR error named in
    /// RFC 8166 §4.4.2. ERR_CHUNK.
    XidMismatch {
        /// The XID in the RPC message.
        rpc_xid: u32,
    },
    /// An RDMA_ERROR whose body is truncated. Drop: errors are never answered.
    ErrorBodyTruncated {
        /// Offset of the item.
        at: usize,
        /// Octets it needed.
        needed: usize,
    },
    /// ([`Header::check_call`]) An RDMA_NOMSG call without a Position Zero Read chunk.
    /// ERR_CHUNK.
    NomsgCallWithoutPositionZero,
    /// ([`Header::check_reply`]) An RDMA_NOMSG reply without a Reply chunk. Drop.
    NomsgReplyWithoutReplyChunk,
    /// ([`Header::check_reply`]) A reply with a Read list. Drop.
    ReadListInReply,
}

impl HeaderErrorKind {
    /// True when the message was cut short (more octets would have been needed to judge it).
    pub const fn is_truncated(&self) -> bool {
        match self {
            HeaderErrorKind::ShortHeader { .. }
            | HeaderErrorKind::Truncated { .. }
            | HeaderErrorKind::MissingPayload { .. }
            | HeaderErrorKind::ErrorBodyTruncated { .. } => true,
            HeaderErrorKind::Chunk(c) => c.is_truncated(),
            _ => false,
        }
    }
}

/// A rejected header: the rule, plus the fixed fields needed to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderError {
    /// The rule broken.
    pub kind: HeaderErrorKind,
    /// `rdma_xid`, when at least four octets arrived.
    pub xid: Option<u32>,
    /// `rdma_vers`, when at least eight octets arrived.
    pub vers: Option<u32>,
}

/// What a responder must do about a rejected header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Discard the message without answering.
    Drop,
    /// Answer RDMA_ERROR / ERR_VERS with the versions supported ([`encode_err_vers`]).
    ErrVers {
        /// XID to answer with.
        xid: u32,
        /// The version of the offending message, copied into the answer's `rdma_vers` (as the
        /// Version Two draft's "Transport Errors" section and Linux do).
        vers: u32,
    },
    /// Answer RDMA_ERROR / ERR_CHUNK ([`encode_err_chunk`]).
    ErrChunk {
        /// XID to answer with.
        xid: u32,
        /// Version copied into the answer.
        vers: u32,
    },
}

impl Response {
    /// Encodes the answer into `out`: `Ok(0)` for [`Response::Drop`], else the octets written.
    /// `low..=high` is the version range this endpoint supports (for ERR_VERS).
    pub fn encode(
        &self,
        credits: u32,
        low: u32,
        high: u32,
        out: &mut [u8],
    ) -> Result<usize, XdrError> {
        match *self {
            Response::Drop => Ok(0),
            Response::ErrVers { xid, vers } => encode_err_vers(xid, vers, credits, low, high, out),
            Response::ErrChunk { xid, vers } => encode_err_chunk(xid, vers, credits, out),
        }
    }
}

impl HeaderError {
    /// The response the spec requires from a responder (see [`Response`]).
    pub const fn response(&self) -> Response {
        let (xid, vers) = match (self.xid, self.vers) {
            (Some(x), Some(v)) => (x, v),
            _ => return Response::Drop,
        };
        match self.kind {
            HeaderErrorKind::ShortHeader { .. }
            | HeaderErrorKind::ForeignError { .. }
            | HeaderErrorKind::ErrorBodyTruncated { .. }
            | HeaderErrorKind::NomsgReplyWithoutReplyChunk
            | HeaderErrorKind::MissingPayload { .. }
            | HeaderErrorKind::ReadListInReply => Response::Drop,
            HeaderErrorKind::BadVersion { .. } => Response::ErrVers { xid, vers },
            HeaderErrorKind::UnknownProc { .. }
            | HeaderErrorKind::Truncated { .. }
            | HeaderErrorKind::Chunk(_)
            | HeaderErrorKind::PositionZeroInMsg { .. }
            | HeaderErrorKind::NomsgWithoutChunk
            | HeaderErrorKind::XidMismatch { .. }
            | HeaderErrorKind::NomsgCallWithoutPositionZero => Response::ErrChunk { xid, vers },
        }
    }
}

impl core::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RPC-over-RDMA v1 header rejected: ")?;
        match self.kind {
            HeaderErrorKind::ShortHeader { len } => write!(f, "only {len} octets"),
            HeaderErrorKind::BadVersion { vers } => write!(f, "version {vers}"),
            HeaderErrorKind::ForeignError { vers, .. } => {
                write!(f, "RDMA_ERROR of version {vers}")
            }
            HeaderErrorKind::UnknownProc { value } => write!(f, "unknown procedure {value}"),
            HeaderErrorKind::Truncated { at, needed } => {
                write!(f, "truncated: {needed} octets needed at {at}")
            }
            HeaderErrorKind::Chunk(c) => write!(f, "{c}"),
            HeaderErrorKind::PositionZeroInMsg { at } => {
                write!(f, "RDMA_MSG with a Position Zero Read chunk at {at}")
            }
            HeaderErrorKind::NomsgWithoutChunk => {
                write!(
                    f,
                    "RDMA_NOMSG without Position Zero Read chunk or Reply chunk"
                )
            }
            HeaderErrorKind::MissingPayload { len } => {
                write!(f, "RDMA_MSG with {len} payload octets")
            }
            HeaderErrorKind::XidMismatch { rpc_xid } => {
                write!(f, "RPC XID {rpc_xid:#x} differs from the transport XID")
            }
            HeaderErrorKind::ErrorBodyTruncated { at, needed } => {
                write!(f, "RDMA_ERROR truncated: {needed} octets needed at {at}")
            }
            HeaderErrorKind::NomsgCallWithoutPositionZero => {
                write!(f, "RDMA_NOMSG call without a Position Zero Read chunk")
            }
            HeaderErrorKind::NomsgReplyWithoutReplyChunk => {
                write!(f, "RDMA_NOMSG reply without a Reply chunk")
            }
            HeaderErrorKind::ReadListInReply => write!(f, "reply with a Read list"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Decodes and validates a Version One transport header at the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &ChunkLimits) -> Result<Header<'a>, HeaderError> {
    let xid = be32(buf, 0);
    let vers = be32(buf, 4);
    if buf.len() < FIXED_LEN {
        return Err(HeaderError {
            kind: HeaderErrorKind::ShortHeader { len: buf.len() },
            xid,
            vers,
        });
    }
    let mut r = XdrReader::new(buf);
    let fixed = (r.get_u32(), r.get_u32(), r.get_u32(), r.get_u32());
    let (Ok(xid), Ok(vers), Ok(credits), Ok(proc_raw)) = fixed else {
        // Unreachable: the length was checked above.
        return Err(HeaderError {
            kind: HeaderErrorKind::ShortHeader { len: buf.len() },
            xid,
            vers,
        });
    };
    let err = |kind| HeaderError {
        kind,
        xid: Some(xid),
        vers: Some(vers),
    };
    if vers != VERSION {
        return Err(err(if proc_raw == Proc::Error.to_u32() {
            HeaderErrorKind::ForeignError {
                vers,
                vers_range: super::any_version_err_vers(buf),
            }
        } else {
            HeaderErrorKind::BadVersion { vers }
        }));
    }
    let body = match Proc::from(proc_raw) {
        p @ (Proc::Msg | Proc::Nomsg | Proc::Msgp) => {
            let mut align_thresh = (0, 0);
            if p == Proc::Msgp {
                let at = r.position();
                match (r.get_u32(), r.get_u32()) {
                    (Ok(a), Ok(t)) => align_thresh = (a, t),
                    _ => return Err(err(HeaderErrorKind::Truncated { at, needed: 8 })),
                }
            }
            let lists_at = r.position();
            let chunks =
                parse_chunk_lists(&mut r, limits).map_err(|e| err(HeaderErrorKind::Chunk(e)))?;
            match p {
                Proc::Nomsg => {
                    if !chunks.reads.has_position_zero() && chunks.reply.is_none() {
                        return Err(err(HeaderErrorKind::NomsgWithoutChunk));
                    }
                    Body::Nomsg(chunks)
                }
                _ => {
                    if chunks.reads.has_position_zero() {
                        return Err(err(HeaderErrorKind::PositionZeroInMsg { at: lists_at }));
                    }
                    let payload = r.rest();
                    // The RPC message must at least hold its XID and msg_type (RFC 8167
                    // §5.3: a message too small for that is dropped).
                    match (be32(payload, 0), be32(payload, 4)) {
                        (Some(rpc_xid), Some(_)) if rpc_xid != xid => {
                            return Err(err(HeaderErrorKind::XidMismatch { rpc_xid }))
                        }
                        (Some(_), Some(_)) => {}
                        _ => {
                            return Err(err(HeaderErrorKind::MissingPayload { len: payload.len() }))
                        }
                    }
                    if p == Proc::Msgp {
                        Body::Msgp {
                            align: align_thresh.0,
                            thresh: align_thresh.1,
                            chunks,
                        }
                    } else {
                        Body::Msg(chunks)
                    }
                }
            }
        }
        Proc::Done => Body::Done,
        Proc::Error => {
            let at = r.position();
            let code = r
                .get_u32()
                .map_err(|_| err(HeaderErrorKind::ErrorBodyTruncated { at, needed: 4 }))?;
            Body::Error(match ErrCode::from(code) {
                ErrCode::Vers => {
                    let at = r.position();
                    match (r.get_u32(), r.get_u32()) {
                        (Ok(low), Ok(high)) => RdmaError::Vers { low, high },
                        _ => {
                            return Err(err(HeaderErrorKind::ErrorBodyTruncated { at, needed: 8 }))
                        }
                    }
                }
                ErrCode::Chunk => RdmaError::Chunk,
                ErrCode::Unknown(v) => RdmaError::Unknown(v),
            })
        }
        Proc::Unknown(value) => return Err(err(HeaderErrorKind::UnknownProc { value })),
    };
    let header_len = r.position();
    Ok(Header {
        xid,
        vers,
        credits,
        body,
        header_len,
        payload: r.rest(),
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// The body of an outgoing header. RDMA_MSGP and RDMA_DONE are deliberately absent: senders
/// MUST NOT send them (RFC 8166 §4.5.1, §4.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageBody<'a> {
    /// RDMA_MSG with these chunk lists; the caller appends the RPC message.
    Msg(ChunkListsRef<'a>),
    /// RDMA_NOMSG with these chunk lists.
    Nomsg(ChunkListsRef<'a>),
    /// RDMA_ERROR (with `rdma_vers` = 1; use [`encode_err_vers`] to copy another version).
    Error(RdmaError),
}

/// An outgoing Version One header.
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
    FIXED_LEN
        + match &msg.body {
            MessageBody::Msg(c) | MessageBody::Nomsg(c) => c.encoded_len(),
            MessageBody::Error(e) => e.encoded_len(),
        }
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
    let (proc_, vers) = match msg.body {
        MessageBody::Msg(_) => (Proc::Msg, VERSION),
        MessageBody::Nomsg(_) => (Proc::Nomsg, VERSION),
        MessageBody::Error(_) => (Proc::Error, VERSION),
    };
    w.put_u32(msg.xid)?;
    w.put_u32(vers)?;
    w.put_u32(msg.credits)?;
    w.put_u32(proc_.to_u32())?;
    match &msg.body {
        MessageBody::Msg(c) | MessageBody::Nomsg(c) => c.encode(w),
        MessageBody::Error(e) => e.encode(w),
    }
}

/// Encodes `msg` at the start of `out`; returns the octets written.
pub fn encode(msg: &Message<'_>, out: &mut [u8]) -> Result<usize, XdrError> {
    // An RDMA_MSG without chunks (every inline call and reply without DDP): seven fixed
    // words, written at once; the same octets as the general encoder.
    if let MessageBody::Msg(c) = &msg.body {
        let empty = c.reads.is_empty() && c.writes.is_empty() && c.reply.is_none();
        if let (true, Some(dst)) = (empty, out.get_mut(..FIXED_LEN + 12)) {
            let words = [msg.xid, VERSION, msg.credits, Proc::Msg.to_u32(), 0, 0, 0];
            for (d, w) in dst.chunks_exact_mut(4).zip(words) {
                d.copy_from_slice(&w.to_be_bytes());
            }
            return Ok(FIXED_LEN + 12);
        }
    }
    let mut w = XdrWriter::new(out);
    encode_into(msg, &mut w)?;
    Ok(w.finish())
}

fn encode_error(
    xid: u32,
    vers: u32,
    credits: u32,
    e: RdmaError,
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

/// Encodes RDMA_ERROR / ERR_VERS answering a message with `xid` and version `vers` (copied into
/// `rdma_vers`), reporting `low..=high` as supported. 28 octets. The layout of this message is
/// the same in every version (RFC 8166 §7), so it is also the Version Two RDMA2_ERR_VERS.
pub fn encode_err_vers(
    xid: u32,
    vers: u32,
    credits: u32,
    low: u32,
    high: u32,
    out: &mut [u8],
) -> Result<usize, XdrError> {
    encode_error(xid, vers, credits, RdmaError::Vers { low, high }, out)
}

/// Encodes RDMA_ERROR / ERR_CHUNK answering a message with `xid` and version `vers`. 20 octets.
pub fn encode_err_chunk(
    xid: u32,
    vers: u32,
    credits: u32,
    out: &mut [u8],
) -> Result<usize, XdrError> {
    encode_error(xid, vers, credits, RdmaError::Chunk, out)
}

/// Encodes a deprecated RDMA_MSGP header (`24 + chunks.encoded_len()` octets).
///
/// Opt-in only: RFC 8166 §4.5.1 says senders MUST NOT send RDMA_MSGP, and [`Message`] cannot
/// express it. This exists to probe how peers handle it and to test receivers.
pub fn encode_msgp_deprecated(
    xid: u32,
    credits: u32,
    align: u32,
    thresh: u32,
    chunks: &ChunkListsRef<'_>,
    out: &mut [u8],
) -> Result<usize, XdrError> {
    let need = FIXED_LEN + 8 + chunks.encoded_len();
    if need > out.len() {
        return Err(XdrError::NoSpace {
            needed: need,
            capacity: out.len(),
        });
    }
    let mut w = XdrWriter::new(out);
    w.put_u32(xid)?;
    w.put_u32(VERSION)?;
    w.put_u32(credits)?;
    w.put_u32(Proc::Msgp.to_u32())?;
    w.put_u32(align)?;
    w.put_u32(thresh)?;
    chunks.encode(&mut w)?;
    Ok(w.finish())
}
