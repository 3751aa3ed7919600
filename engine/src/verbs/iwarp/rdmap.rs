//! RDMAP, the Remote Direct Memory Access Protocol (RFC 5040): the messages carried in DDP
//! segments — RDMA Write, RDMA Read Request, RDMA Read Response, Send (with Invalidate, with
//! Solicited Event, with both) and Terminate.
//!
//! Normal operation: [`decode`] reads one ULPDU (DDP header, RDMAP control octet, RDMAP header)
//! into a [`Message`] that borrows its payload; [`encode`] writes a message into a caller's slice,
//! ready for [`super::mpa::seal_fpdu`]. The RDMAP control octet is the DDP header's first
//! upper-layer octet (RFC 5040, RDMAP control field): RV (2 bits, version 1), two reserved bits
//! (sent as zero, not checked) and the 4-bit opcode ([`Opcode`], an open set: values RFC 5040 does
//! not define decode as a value and are then rejected). Each opcode has a fixed DDP model and queue
//! (RFC 5040, RDMA message definitions): Write and Read Response are tagged; Sends use untagged
//! queue 0, Read Requests queue 1, Terminate queue 2. Send with Invalidate carries the STag to
//! invalidate in the 32 upper-layer bits of the untagged header (RFC 5040, Send header). A Read
//! Request is one segment whose payload is the 28-octet Read Request header. A Terminate holds the
//! Terminate control word (layer/etype/ecode and the M, D, R bits) and, when any bit is set, a
//! 2-octet DDP Segment Length followed by the offending segment's DDP header (D) and, for a Read
//! Request, its RDMAP header (R).
//!
//! Linux siw (iwarp.h: `iwarp_rdma_rreq`, `iwarp_send_inv`, `iwarp_terminate`; siw_qp.c:
//! `siw_send_terminate`) uses the same layouts: its Terminate is untagged, QN 2, MSN 1, MO 0,
//! L set; after the control word it appends the offending frame from its MPA length field on
//! (the field serving as DDP Segment Length), 16 or 20 octets for D (tagged or untagged header),
//! 48 for a Read Request with D and R; it sets M together with D.
//!
//! Recovery: every decoder is bounds-checked; an [`RdmapError`] names the Terminate the receiver
//! sends ([`RdmapError::terminate_code`], RFC 5040 Terminate codes) before it closes the stream. A
//! malformed Terminate is not answered with another one: the stream is closed.

use super::ddp::{self, Buffer, DdpError, Header};
pub use super::term::{TermCode, LAYER_DDP, LAYER_LLP, LAYER_RDMAP};

/// The RDMAP version of RFC 5040.
pub const RDMAP_VERSION: u8 = 1;
/// Mask of RV in the RDMAP control octet.
pub const VERSION_MASK: u8 = 0xc0;
/// Mask of the opcode in the RDMAP control octet.
pub const OPCODE_MASK: u8 = 0x0f;
/// Octets of the Read Request header (RFC 5040).
pub const READ_REQUEST_LEN: usize = 28;
/// Octets of the Terminate control word.
pub const TERM_CTRL_LEN: usize = 4;
/// Untagged queue of Sends.
pub const QN_SEND: u32 = 0;
/// Untagged queue of Read Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue of Terminates.
pub const QN_TERMINATE: u32 = 2;
/// RDMAP error type: local catastrophic.
pub const ETYPE_CATASTROPHIC: u8 = 0x0;
/// RDMAP error type: remote protection error.
pub const ETYPE_REMOTE_PROTECTION: u8 = 0x1;
/// RDMAP error type: remote operation error.
pub const ETYPE_REMOTE_OPERATION: u8 = 0x2;
/// RDMAP error code (protection): invalid STag.
pub const ECODE_INVALID_STAG: u8 = 0x00;
/// RDMAP error code (protection): base or bounds violation.
pub const ECODE_BASE_BOUNDS: u8 = 0x01;
/// RDMAP error code (protection): access rights violation.
pub const ECODE_ACCESS_RIGHTS: u8 = 0x02;
/// RDMAP error code (protection): STag not associated with the RDMAP stream.
pub const ECODE_STAG_NOT_ASSOC: u8 = 0x03;
/// RDMAP error code (protection): TO wrap.
pub const ECODE_TO_WRAP: u8 = 0x04;
/// RDMAP error code (operation): invalid RDMAP version.
pub const ECODE_VERSION: u8 = 0x05;
/// RDMAP error code (operation): unexpected opcode.
pub const ECODE_OPCODE: u8 = 0x06;
/// RDMAP error code (operation): catastrophic error localized to the RDMAP stream.
pub const ECODE_CATASTROPHIC_STREAM: u8 = 0x07;
/// RDMAP error code (operation): catastrophic error, global.
pub const ECODE_CATASTROPHIC_GLOBAL: u8 = 0x08;
/// RDMAP error code: STag cannot be invalidated.
pub const ECODE_CANNOT_INVALIDATE: u8 = 0x09;
/// RDMAP error code: unspecified error.
pub const ECODE_UNSPECIFIED: u8 = 0xff;

/// Terminate M bit: DDP Segment Length valid.
const TERM_M: u32 = 0x8000;
/// Terminate D bit: DDP header included.
const TERM_D: u32 = 0x4000;
/// Terminate R bit: RDMAP header included.
const TERM_R: u32 = 0x2000;

/// An RDMAP opcode (4 bits); an open set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    /// RDMA Write.
    pub const WRITE: Opcode = Opcode(0x0);
    /// RDMA Read Request.
    pub const READ_REQUEST: Opcode = Opcode(0x1);
    /// RDMA Read Response.
    pub const READ_RESPONSE: Opcode = Opcode(0x2);
    /// Send.
    pub const SEND: Opcode = Opcode(0x3);
    /// Send with Invalidate.
    pub const SEND_INVALIDATE: Opcode = Opcode(0x4);
    /// Send with Solicited Event.
    pub const SEND_SE: Opcode = Opcode(0x5);
    /// Send with Solicited Event and Invalidate.
    pub const SEND_SE_INVALIDATE: Opcode = Opcode(0x6);
    /// Terminate.
    pub const TERMINATE: Opcode = Opcode(0x7);

    /// Whether RFC 5040 defines this opcode.
    pub const fn is_known(self) -> bool {
        self.0 <= 0x7
    }

    /// Whether messages with this opcode use the tagged buffer model.
    pub const fn is_tagged(self) -> bool {
        self.0 == Self::WRITE.0 || self.0 == Self::READ_RESPONSE.0
    }

    /// The untagged queue of this opcode (tagged and unknown opcodes have none).
    pub const fn queue(self) -> Option<u32> {
        match self.0 {
            0x1 => Some(QN_READ_REQUEST),
            0x3..=0x6 => Some(QN_SEND),
            0x7 => Some(QN_TERMINATE),
            _ => None,
        }
    }
}

/// Errors of the RDMAP layer. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapError {
    /// The DDP layer refused the segment.
    Ddp(DdpError),
    /// RV is not 1.
    BadVersion(u8),
    /// An opcode RFC 5040 does not define.
    UnknownOpcode(Opcode),
    /// A known opcode in the wrong DDP buffer model.
    WrongModel(Opcode),
    /// An untagged opcode on the wrong queue.
    WrongQueue {
        /// The opcode.
        opcode: Opcode,
        /// The queue number received.
        qn: u32,
    },
    /// A Read Request that is not one whole 28-octet segment at message offset 0.
    BadReadRequest,
    /// A Terminate whose control word and included headers do not fit together.
    BadTerminate,
    /// A message that cannot be encoded (an inconsistent [`Terminate`]).
    Unencodable,
    /// The output buffer is too small.
    NoSpace {
        /// Octets needed.
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl RdmapError {
    /// The RFC 5040 Terminate code a receiver sends for this error.
    pub const fn terminate_code(&self) -> TermCode {
        match *self {
            RdmapError::Ddp(e) => e.terminate_code(),
            RdmapError::BadVersion(_) => {
                TermCode::new(LAYER_RDMAP, ETYPE_REMOTE_OPERATION, ECODE_VERSION)
            }
            RdmapError::UnknownOpcode(_) | RdmapError::WrongModel(_) => {
                TermCode::new(LAYER_RDMAP, ETYPE_REMOTE_OPERATION, ECODE_OPCODE)
            }
            RdmapError::WrongQueue { .. } => {
                TermCode::new(LAYER_DDP, ddp::ETYPE_UNTAGGED, ddp::ECODE_UT_INVALID_QN)
            }
            RdmapError::BadReadRequest
            | RdmapError::BadTerminate
            | RdmapError::Unencodable
            | RdmapError::NoSpace { .. } => {
                TermCode::new(LAYER_RDMAP, ETYPE_REMOTE_OPERATION, ECODE_UNSPECIFIED)
            }
        }
    }
}

impl From<DdpError> for RdmapError {
    fn from(e: DdpError) -> Self {
        RdmapError::Ddp(e)
    }
}

impl core::fmt::Display for RdmapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RdmapError::Ddp(e) => write!(f, "{e}"),
            RdmapError::BadVersion(v) => write!(f, "RDMAP version {v}"),
            RdmapError::UnknownOpcode(o) => write!(f, "RDMAP opcode {:#x} not defined", o.0),
            RdmapError::WrongModel(o) => write!(f, "RDMAP opcode {:#x} in the wrong model", o.0),
            RdmapError::WrongQueue { opcode, qn } => {
                write!(f, "RDMAP opcode {:#x} on queue {qn}", opcode.0)
            }
            RdmapError::BadReadRequest => write!(f, "malformed RDMA Read Request"),
            RdmapError::BadTerminate => write!(f, "malformed Terminate"),
            RdmapError::Unencodable => write!(f, "inconsistent RDMAP message"),
            RdmapError::NoSpace { needed, capacity } => {
                write!(
                    f,
                    "RDMAP message needs {needed} octets, buffer holds {capacity}"
                )
            }
        }
    }
}

impl std::error::Error for RdmapError {}

/// The RDMA Read Request header (RFC 5040).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// MSN on queue 1.
    pub msn: u32,
    /// Data Sink STag (the requester's buffer, where the Read Response goes).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag (the responder's buffer).
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

/// A Terminate message (RFC 5040), borrowing the included headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminate<'a> {
    /// MSN on queue 2 (siw sends 1).
    pub msn: u32,
    /// Layer, error type, error code.
    pub code: TermCode,
    /// DDP Segment Length of the offending segment (M bit).
    pub ddp_segment_len: Option<u16>,
    /// The offending segment's DDP header, 14 or 18 octets (D bit).
    pub ddp_header: Option<&'a [u8]>,
    /// The offending segment's RDMAP header (R bit; needs D): the 28-octet Read Request header
    /// when the DDP header is a Read Request's, empty otherwise.
    pub rdmap_header: Option<&'a [u8]>,
}

/// An RDMAP message (one DDP segment of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// RDMA Write or RDMA Read Response segment (tagged).
    Tagged {
        /// [`Opcode::WRITE`] or [`Opcode::READ_RESPONSE`].
        read_response: bool,
        /// L: last segment.
        last: bool,
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset of this segment.
        to: u64,
        /// Data.
        payload: &'a [u8],
    },
    /// RDMA Read Request.
    ReadRequest(ReadRequest),
    /// Send, Send with Invalidate, with Solicited Event, or with both (one segment).
    Send {
        /// Solicited Event.
        solicited: bool,
        /// The STag to invalidate (Send with Invalidate).
        invalidate: Option<u32>,
        /// L: last segment.
        last: bool,
        /// MSN on queue 0.
        msn: u32,
        /// Message offset of this segment.
        mo: u32,
        /// Data.
        payload: &'a [u8],
    },
    /// Terminate.
    Terminate(Terminate<'a>),
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// Decodes one ULPDU (a DDP segment carrying RDMAP).
pub fn decode(ulpdu: &[u8]) -> Result<Message<'_>, RdmapError> {
    let seg = ddp::decode(ulpdu)?;
    let h = seg.header;
    let version = h.ulp_ctrl >> 6;
    if version != RDMAP_VERSION {
        return Err(RdmapError::BadVersion(version));
    }
    let op = Opcode(h.ulp_ctrl & OPCODE_MASK);
    if !op.is_known() {
        return Err(RdmapError::UnknownOpcode(op));
    }
    match h.buffer {
        Buffer::Tagged { stag, to } => {
            if !op.is_tagged() {
                return Err(RdmapError::WrongModel(op));
            }
            Ok(Message::Tagged {
                read_response: op == Opcode::READ_RESPONSE,
                last: h.last,
                stag,
                to,
                payload: seg.payload,
            })
        }
        Buffer::Untagged {
            ulp_word,
            qn,
            msn,
            mo,
        } => {
            let Some(want) = op.queue() else {
                return Err(RdmapError::WrongModel(op));
            };
            if qn != want {
                return Err(RdmapError::WrongQueue { opcode: op, qn });
            }
            decode_untagged(op, h.last, ulp_word, msn, mo, seg.payload)
        }
    }
}

fn decode_untagged(
    op: Opcode,
    last: bool,
    ulp_word: u32,
    msn: u32,
    mo: u32,
    payload: &[u8],
) -> Result<Message<'_>, RdmapError> {
    match op {
        Opcode::READ_REQUEST => {
            if !last || mo != 0 || payload.len() != READ_REQUEST_LEN {
                return Err(RdmapError::BadReadRequest);
            }
            Ok(Message::ReadRequest(ReadRequest {
                msn,
                sink_stag: be32(payload, 0),
                sink_to: be64(payload, 4),
                size: be32(payload, 12),
                src_stag: be32(payload, 16),
                src_to: be64(payload, 20),
            }))
        }
        Opcode::TERMINATE => decode_terminate(msn, payload).map(Message::Terminate),
        _ => Ok(Message::Send {
            solicited: op == Opcode::SEND_SE || op == Opcode::SEND_SE_INVALIDATE,
            invalidate: (op == Opcode::SEND_INVALIDATE || op == Opcode::SEND_SE_INVALIDATE)
                .then_some(ulp_word),
            last,
            msn,
            mo,
            payload,
        }),
    }
}

/// Length of the RDMAP header that follows an included DDP header `ddp_hdr` under the R bit.
fn terminated_rdmap_len(ddp_hdr: &[u8]) -> usize {
    let read_request = ddp_hdr[0] & ddp::FLAG_TAGGED == 0
        && Opcode(ddp_hdr[1] & OPCODE_MASK) == Opcode::READ_REQUEST;
    if read_request {
        READ_REQUEST_LEN
    } else {
        0
    }
}

fn decode_terminate(msn: u32, p: &[u8]) -> Result<Terminate<'_>, RdmapError> {
    if p.len() < TERM_CTRL_LEN {
        return Err(RdmapError::BadTerminate);
    }
    let w = be32(p, 0);
    let code = TermCode::new((w >> 28) as u8, ((w >> 24) & 0xf) as u8, (w >> 16) as u8);
    let (m, d, r) = (w & TERM_M != 0, w & TERM_D != 0, w & TERM_R != 0);
    let mut t = Terminate {
        msn,
        code,
        ddp_segment_len: None,
        ddp_header: None,
        rdmap_header: None,
    };
    if !(m || d || r) {
        return Ok(t);
    }
    if r && !d {
        return Err(RdmapError::BadTerminate);
    }
    let len_field = p.get(4..6).ok_or(RdmapError::BadTerminate)?;
    t.ddp_segment_len = m.then(|| u16::from_be_bytes([len_field[0], len_field[1]]));
    let mut at = 6;
    if d {
        let ctrl = *p.get(at).ok_or(RdmapError::BadTerminate)?;
        let n = ddp::header_len(ctrl);
        let hdr = p.get(at..at + n).ok_or(RdmapError::BadTerminate)?;
        t.ddp_header = Some(hdr);
        at += n;
        if r {
            let n = terminated_rdmap_len(hdr);
            t.rdmap_header = Some(p.get(at..at + n).ok_or(RdmapError::BadTerminate)?);
        }
    }
    Ok(t)
}

/// The DDP header of `msg`.
fn ddp_header(msg: &Message<'_>) -> Header {
    let ctrl = |op: Opcode| (RDMAP_VERSION << 6) | op.0;
    match *msg {
        Message::Tagged {
            read_response,
            last,
            stag,
            to,
            ..
        } => Header {
            last,
            ulp_ctrl: ctrl(if read_response {
                Opcode::READ_RESPONSE
            } else {
                Opcode::WRITE
            }),
            buffer: Buffer::Tagged { stag, to },
        },
        Message::ReadRequest(rr) => Header {
            last: true,
            ulp_ctrl: ctrl(Opcode::READ_REQUEST),
            buffer: Buffer::Untagged {
                ulp_word: 0,
                qn: QN_READ_REQUEST,
                msn: rr.msn,
                mo: 0,
            },
        },
        Message::Send {
            solicited,
            invalidate,
            last,
            msn,
            mo,
            ..
        } => {
            let op = match (solicited, invalidate.is_some()) {
                (false, false) => Opcode::SEND,
                (false, true) => Opcode::SEND_INVALIDATE,
                (true, false) => Opcode::SEND_SE,
                (true, true) => Opcode::SEND_SE_INVALIDATE,
            };
            Header {
                last,
                ulp_ctrl: ctrl(op),
                buffer: Buffer::Untagged {
                    ulp_word: invalidate.unwrap_or(0),
                    qn: QN_SEND,
                    msn,
                    mo,
                },
            }
        }
        Message::Terminate(t) => Header {
            last: true,
            ulp_ctrl: ctrl(Opcode::TERMINATE),
            buffer: Buffer::Untagged {
                ulp_word: 0,
                qn: QN_TERMINATE,
                msn: t.msn,
                mo: 0,
            },
        },
    }
}

/// Checks that a Terminate's parts agree with each other (what [`decode`] would accept back).
fn check_terminate(t: &Terminate<'_>) -> Result<(), RdmapError> {
    if t.code.layer > 0xf || t.code.etype > 0xf {
        return Err(RdmapError::Unencodable);
    }
    if let Some(h) = t.ddp_header {
        if h.is_empty() || h.len() != ddp::header_len(h[0]) {
            return Err(RdmapError::Unencodable);
        }
    }
    match (t.ddp_header, t.rdmap_header) {
        (None, Some(_)) => Err(RdmapError::Unencodable),
        (Some(h), Some(r)) if r.len() != terminated_rdmap_len(h) => Err(RdmapError::Unencodable),
        _ => Ok(()),
    }
}

/// Octets of `msg` after its DDP header.
fn body_len(msg: &Message<'_>) -> usize {
    match *msg {
        Message::Tagged { payload, .. } | Message::Send { payload, .. } => payload.len(),
        Message::ReadRequest(_) => READ_REQUEST_LEN,
        Message::Terminate(t) => {
            let any = t.ddp_segment_len.is_some() || t.ddp_header.is_some();
            TERM_CTRL_LEN
                + if any { 2 } else { 0 }
                + t.ddp_header.map_or(0, <[u8]>::len)
                + t.rdmap_header.map_or(0, <[u8]>::len)
        }
    }
}

/// Octets [`encode`] writes for `msg`.
pub fn encoded_len(msg: &Message<'_>) -> usize {
    ddp_header(msg).wire_len() + body_len(msg)
}

fn encode_terminate(t: &Terminate<'_>, out: &mut [u8]) {
    let mut w = (u32::from(t.code.layer) << 28)
        | (u32::from(t.code.etype) << 24)
        | (u32::from(t.code.ecode) << 16);
    if t.ddp_segment_len.is_some() {
        w |= TERM_M;
    }
    if t.ddp_header.is_some() {
        w |= TERM_D;
    }
    if t.rdmap_header.is_some() {
        w |= TERM_R;
    }
    out[..4].copy_from_slice(&w.to_be_bytes());
    if w & (TERM_M | TERM_D) == 0 {
        return;
    }
    out[4..6].copy_from_slice(&t.ddp_segment_len.unwrap_or(0).to_be_bytes());
    let mut at = 6;
    for part in [t.ddp_header, t.rdmap_header].into_iter().flatten() {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
}

/// Encodes `msg` (DDP header, RDMAP header, payload) into `out`; returns the octets written.
pub fn encode(msg: &Message<'_>, out: &mut [u8]) -> Result<usize, RdmapError> {
    if let Message::Terminate(t) = msg {
        check_terminate(t)?;
    }
    let total = encoded_len(msg);
    if out.len() < total {
        return Err(RdmapError::NoSpace {
            needed: total,
            capacity: out.len(),
        });
    }
    let hdr = ddp_header(msg);
    let at = ddp::encode_header(&hdr, out)?;
    let rest = &mut out[at..total];
    match *msg {
        Message::Tagged { payload, .. } | Message::Send { payload, .. } => {
            rest.copy_from_slice(payload)
        }
        Message::ReadRequest(rr) => {
            rest[0..4].copy_from_slice(&rr.sink_stag.to_be_bytes());
            rest[4..12].copy_from_slice(&rr.sink_to.to_be_bytes());
            rest[12..16].copy_from_slice(&rr.size.to_be_bytes());
            rest[16..20].copy_from_slice(&rr.src_stag.to_be_bytes());
            rest[20..28].copy_from_slice(&rr.src_to.to_be_bytes());
        }
        Message::Terminate(t) => encode_terminate(&t, rest),
    }
    Ok(total)
}

#[cfg(test)]
#[path = "rdmap_tests.rs"]
mod tests;
