//! MPA, Marker PDU Aligned Framing for TCP (RFC 5044), with the enhanced connection setup of
//! RFC 6581: the MPA Request/Reply frames that open an iWARP stream, and the FPDU framing that
//! carries every DDP segment after them.
//!
//! Normal operation: the initiator sends an MPA Request ([`encode_rr`] with
//! [`FrameKind::Request`]), the responder answers with an MPA Reply (R clear to accept, set to
//! reject); both are decoded by [`decode_rr`], which borrows the private data from the receive
//! buffer. With revision 2 and the enhanced flag, the first four octets of the private data are the
//! RFC 6581 IRD/ORD word ([`IrdOrd`]); [`RrFrame::ulp_private_data`] is what follows it (where
//! RFC 8797 private data travels). [`negotiate_crc`] applies RFC 5044 connection setup: CRCs are used
//! when either side set C. After the handshake every ULPDU (one DDP segment) travels in an FPDU: a
//! 2-octet ULPDU_Length, the ULPDU, 0–3 zero pad octets to a 4-octet boundary, and a 4-octet CRC32c
//! over all of that (RFC 5044, FPDU format and CRC). [`seal_fpdu`] frames a ULPDU already written
//! in place, [`encode_fpdu`] copies one in, [`decode_fpdu`] finds one at the front of a receive
//! buffer. Markers are not provided: a peer that requires them (M set) is refused by
//! [`check_markers`]. Nothing here allocates.
//!
//! ```text
//!  MPA Request/Reply (RFC 5044, RFC 6581)      FPDU (RFC 5044, FPDU format)
//!  +--------------------------------+                 +-------------+--------------+
//!  | Key, 16 octets                 |                 | ULPDU_Length|  ULPDU ...   |
//!  +-+-+-+-+-------+-------+--------+                 +-------------+----+---------+
//!  |M|C|R|E|  Res  |  Rev  |PD_Length|                | ... ULPDU        |PAD (0-3)|
//!  +-+-+-+-+-------+-------+--------+                 +------------------+---------+
//!  | [A|B|IRD(14) | C|D|ORD(14)] (rev 2, E set)       |          CRC32c            |
//!  | private data (PD_Length ≤ 512 octets in all)     +----------------------------+
//! ```
//!
//! E (0x10, the first bit of RFC 5044's Res field) is the enhanced-connection flag: Linux siw
//! (`MPA_RR_FLAG_ENHANCED`) and cxgb4 set it with revision 2 when the private data opens with the
//! IRD/ORD word, and Wireshark decodes it as "Enhanced RDMA Connection". The other four Res bits
//! are sent as zero and not checked (RFC 5044 connection setup; siw uses 0x08 for its own GSO
//! hint).
//!
//! What Linux siw does (drivers/infiniband/sw/siw: `iwarp.h`, `siw_cm.c`, `siw_main.c`): its
//! requests use revision 2 with E set and the IRD/ORD word first in the private data (IRD and
//! ORD from the connect parameters, A/C/D only in its non-default peer-to-peer mode); it does not
//! set C by default (`mpa_crc_required` false) but honours a peer's C, since its reply echoes the
//! request's flags — so an initiator that sets C gets CRCs both ways; it refuses M (markers) with
//! an MPA Reply with R set; it accepts revisions 0, 1 and 2 (this module accepts 1 and 2 only:
//! revision 0 predates RFC 5044); it accepts PD_Length only up to 256 (`MPA_MAX_PRIVDATA` =
//! `RDMA_MAX_PRIVATE_DATA`), the IRD/ORD word included, and drops the connection on a longer
//! frame, so a peer of siw keeps its private data within 252 octets after the word; as initiator
//! after an enhanced request it requires a revision-2 reply with E set; its CRC field is
//! `put_unaligned_le32(~crc)` (`siw_crc_final`), zero with CRCs off.
//!
//! Recovery: every decoder checks bounds before reading and returns an [`MpaError`]; the caller
//! closes the TCP connection on any error of an MPA Request/Reply (RFC 5044 connection setup: bad
//! key, revision it cannot use, PD_Length over 512) and sends a Terminate (LLP layer, MPA error
//! type, [`TERM_ECODE_CRC`] for a CRC error, [`TERM_ECODE_FPDU_START`] for a bad length) and closes
//! after a bad FPDU. [`MpaError::Incomplete`] is not an error of the peer: more octets are needed.

use super::crc32c::Crc32c;

/// The MPA Request key, "MPA ID Req Frame" (RFC 5044 connection setup).
pub const KEY_REQ: [u8; 16] = *b"MPA ID Req Frame";
/// The MPA Reply key, "MPA ID Rep Frame" (RFC 5044 connection setup).
pub const KEY_REP: [u8; 16] = *b"MPA ID Rep Frame";
/// Octets of an MPA Request/Reply before the private data.
pub const RR_HDR_LEN: usize = 20;
/// Largest PD_Length a receiver accepts (RFC 5044 connection setup).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 IRD/ORD word at the start of enhanced private data.
pub const IRD_ORD_LEN: usize = 4;
/// Flag octet: M, markers required by the sender of the frame (RFC 5044 connection setup).
pub const FLAG_MARKERS: u8 = 0x80;
/// Flag octet: C, CRCs preferred by the sender (RFC 5044 connection setup).
pub const FLAG_CRC: u8 = 0x40;
/// Flag octet: R, connection rejected (MPA Reply only; RFC 5044 connection setup).
pub const FLAG_REJECT: u8 = 0x20;
/// Flag octet: enhanced connection, the private data opens with the IRD/ORD word (revision 2;
/// see the module doc).
pub const FLAG_ENHANCED: u8 = 0x10;
/// Revision 1 (RFC 5044).
pub const REV_1: u8 = 1;
/// Revision 2 (RFC 6581).
pub const REV_2: u8 = 2;
/// Largest IRD or ORD the 14-bit fields carry.
pub const IRD_ORD_MAX: u16 = 0x3fff;
/// Octets of the ULPDU_Length field.
pub const FPDU_HDR_LEN: usize = 2;
/// Octets of the CRC field.
pub const FPDU_CRC_LEN: usize = 4;
/// Largest ULPDU_Length (16 bits).
pub const MAX_ULPDU: usize = 0xffff;
/// Terminate error code, LLP layer, MPA type: "MPA CRC error" (RFC 5040 / RFC 5044).
pub const TERM_ECODE_CRC: u8 = 0x02;
/// Terminate error code, LLP layer, MPA type: marker / FPDU start error (an FPDU that cannot
/// be delimited, e.g. a ULPDU_Length over the limit).
pub const TERM_ECODE_FPDU_START: u8 = 0x03;
/// Terminate error code, LLP layer, MPA type: "invalid MPA Request/Reply".
pub const TERM_ECODE_INVALID_RR: u8 = 0x04;
/// Terminate error code, LLP layer, MPA type (RFC 6581): IRD too small for the peer's ORD.
pub const TERM_ECODE_INSUFFICIENT_IRD: u8 = 0x06;
/// Terminate error code, LLP layer, MPA type (RFC 6581): no matching RTR message type.
pub const TERM_ECODE_NO_MATCHING_RTR: u8 = 0x07;

/// Errors of the MPA layer. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpaError {
    /// More octets are needed before the frame can be decoded (not a peer error).
    Incomplete {
        /// Octets the whole frame needs (as far as known now).
        needed: usize,
    },
    /// The 16-octet key is neither the Request nor the Reply key, or not the one expected.
    BadKey,
    /// A revision this module does not speak (only 1 and 2).
    BadRevision(u8),
    /// PD_Length over [`MAX_PRIVATE_DATA`], or an enhanced frame whose private data cannot hold
    /// the IRD/ORD word, or private data too long to encode.
    BadPrivateDataLength(u16),
    /// The peer requires markers (M set), which this implementation does not send.
    MarkersRequired,
    /// An FPDU whose ULPDU_Length is over the receiver's limit.
    UlpduTooLong(u16),
    /// The received CRC does not match the one computed over the FPDU.
    CrcMismatch {
        /// CRC carried in the FPDU.
        received: u32,
        /// CRC computed over header, ULPDU and pad.
        computed: u32,
    },
    /// The output buffer is too small.
    NoSpace {
        /// Octets needed.
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl core::fmt::Display for MpaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            MpaError::Incomplete { needed } => write!(f, "MPA frame incomplete: {needed} octets"),
            MpaError::BadKey => write!(f, "MPA Request/Reply key not recognised"),
            MpaError::BadRevision(r) => write!(f, "MPA revision {r} not supported"),
            MpaError::BadPrivateDataLength(l) => write!(f, "MPA private data length {l}"),
            MpaError::MarkersRequired => write!(f, "peer requires MPA markers"),
            MpaError::UlpduTooLong(l) => write!(f, "MPA ULPDU length {l} over the limit"),
            MpaError::CrcMismatch { received, computed } => write!(
                f,
                "MPA CRC mismatch: received {received:#010x}, computed {computed:#010x}"
            ),
            MpaError::NoSpace { needed, capacity } => {
                write!(
                    f,
                    "MPA frame needs {needed} octets, buffer holds {capacity}"
                )
            }
        }
    }
}

impl std::error::Error for MpaError {}

/// Which of the two connection setup frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// MPA Request (initiator).
    Request,
    /// MPA Reply (responder).
    Reply,
}

impl FrameKind {
    /// The key of this frame kind.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => &KEY_REQ,
            FrameKind::Reply => &KEY_REP,
        }
    }
}

/// The RFC 6581 IRD/ORD word: `|A|B| IRD (14) |C|D| ORD (14)|`, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// A: peer-to-peer mode, an RTR message follows the handshake.
    pub peer_to_peer: bool,
    /// B: a zero-length Send may serve as the RTR message.
    pub rtr_send: bool,
    /// C: a zero-length RDMA Write may serve as the RTR message.
    pub rtr_write: bool,
    /// D: a zero-length RDMA Read may serve as the RTR message.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Decodes the four octets.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        let ird = u16::from_be_bytes([b[0], b[1]]);
        let ord = u16::from_be_bytes([b[2], b[3]]);
        IrdOrd {
            ird: ird & IRD_ORD_MAX,
            ord: ord & IRD_ORD_MAX,
            peer_to_peer: ird & 0x8000 != 0,
            rtr_send: ird & 0x4000 != 0,
            rtr_write: ord & 0x8000 != 0,
            rtr_read: ord & 0x4000 != 0,
        }
    }

    /// The four octets; IRD and ORD above [`IRD_ORD_MAX`] are clamped to it.
    pub fn to_bytes(&self) -> [u8; 4] {
        let ird = self.ird.min(IRD_ORD_MAX)
            | if self.peer_to_peer { 0x8000 } else { 0 }
            | if self.rtr_send { 0x4000 } else { 0 };
        let ord = self.ord.min(IRD_ORD_MAX)
            | if self.rtr_write { 0x8000 } else { 0 }
            | if self.rtr_read { 0x4000 } else { 0 };
        let (i, o) = (ird.to_be_bytes(), ord.to_be_bytes());
        [i[0], i[1], o[0], o[1]]
    }
}

/// A decoded MPA Request or Reply, borrowing its private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RrFrame<'a> {
    /// Request or Reply (from the key).
    pub kind: FrameKind,
    /// M: the sender requires markers in the FPDUs sent to it.
    pub markers: bool,
    /// C: the sender wants CRCs.
    pub crc: bool,
    /// R: connection rejected (Reply); not checked in a Request (RFC 5044 connection setup).
    pub reject: bool,
    /// Revision (1 or 2).
    pub revision: u8,
    /// The RFC 6581 IRD/ORD word, when revision 2 and the enhanced flag announce it.
    pub ird_ord: Option<IrdOrd>,
    /// The private data after the IRD/ORD word (all of it when there is none).
    pub ulp_private_data: &'a [u8],
}

impl<'a> RrFrame<'a> {
    /// The private data for the upper layer (RFC 8797 private data travels here).
    pub const fn ulp_private_data(&self) -> &'a [u8] {
        self.ulp_private_data
    }

    /// Octets [`encode_rr`] writes for this frame.
    pub const fn encoded_len(&self) -> usize {
        RR_HDR_LEN
            + self.ulp_private_data.len()
            + if self.ird_ord.is_some() {
                IRD_ORD_LEN
            } else {
                0
            }
    }
}

/// Total length of the MPA Request/Reply at the front of `buf`, once its header is there.
pub fn rr_len(buf: &[u8]) -> Result<usize, MpaError> {
    let hdr: &[u8; RR_HDR_LEN] = buf
        .get(..RR_HDR_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(MpaError::Incomplete { needed: RR_HDR_LEN })?;
    let pd_len = u16::from_be_bytes([hdr[18], hdr[19]]);
    if usize::from(pd_len) > MAX_PRIVATE_DATA {
        return Err(MpaError::BadPrivateDataLength(pd_len));
    }
    Ok(RR_HDR_LEN + usize::from(pd_len))
}

/// Decodes the MPA Request or Reply at the front of `buf` (octets after it are left alone: the
/// caller knows from [`rr_len`] where the frame ends).
pub fn decode_rr(buf: &[u8]) -> Result<RrFrame<'_>, MpaError> {
    let total = rr_len(buf)?;
    let frame = buf
        .get(..total)
        .ok_or(MpaError::Incomplete { needed: total })?;
    let kind = if frame[..16] == KEY_REQ {
        FrameKind::Request
    } else if frame[..16] == KEY_REP {
        FrameKind::Reply
    } else {
        return Err(MpaError::BadKey);
    };
    let flags = frame[16];
    let revision = frame[17];
    if revision != REV_1 && revision != REV_2 {
        return Err(MpaError::BadRevision(revision));
    }
    let pd = &frame[RR_HDR_LEN..];
    let (ird_ord, ulp) = if revision == REV_2 && flags & FLAG_ENHANCED != 0 {
        let word: &[u8; 4] = pd
            .get(..IRD_ORD_LEN)
            .and_then(|w| w.try_into().ok())
            .ok_or(MpaError::BadPrivateDataLength(pd.len() as u16))?;
        (Some(IrdOrd::from_bytes(word)), &pd[IRD_ORD_LEN..])
    } else {
        (None, pd)
    };
    Ok(RrFrame {
        kind,
        markers: flags & FLAG_MARKERS != 0,
        crc: flags & FLAG_CRC != 0,
        reject: flags & FLAG_REJECT != 0,
        revision,
        ird_ord,
        ulp_private_data: ulp,
    })
}

/// Encodes `frame` into `out`; returns the octets written. The enhanced flag is set exactly when
/// `frame.ird_ord` is present, which needs revision 2; the other Res bits are zero.
pub fn encode_rr(frame: &RrFrame<'_>, out: &mut [u8]) -> Result<usize, MpaError> {
    if frame.revision != REV_1 && frame.revision != REV_2 {
        return Err(MpaError::BadRevision(frame.revision));
    }
    if frame.ird_ord.is_some() && frame.revision != REV_2 {
        return Err(MpaError::BadRevision(frame.revision));
    }
    let total = frame.encoded_len();
    let pd_len = total - RR_HDR_LEN;
    if pd_len > MAX_PRIVATE_DATA {
        return Err(MpaError::BadPrivateDataLength(
            pd_len.min(usize::from(u16::MAX)) as u16,
        ));
    }
    let capacity = out.len();
    let out = out.get_mut(..total).ok_or(MpaError::NoSpace {
        needed: total,
        capacity,
    })?;
    out[..16].copy_from_slice(frame.kind.key());
    out[16] = if frame.markers { FLAG_MARKERS } else { 0 }
        | if frame.crc { FLAG_CRC } else { 0 }
        | if frame.reject { FLAG_REJECT } else { 0 }
        | if frame.ird_ord.is_some() {
            FLAG_ENHANCED
        } else {
            0
        };
    out[17] = frame.revision;
    out[18..20].copy_from_slice(&(pd_len as u16).to_be_bytes());
    let mut at = RR_HDR_LEN;
    if let Some(w) = frame.ird_ord {
        out[at..at + IRD_ORD_LEN].copy_from_slice(&w.to_bytes());
        at += IRD_ORD_LEN;
    }
    out[at..].copy_from_slice(frame.ulp_private_data);
    Ok(total)
}

/// Refuses a peer frame with M set. RFC 5044 lets each side require markers in the FPDUs sent to
/// it; like Linux siw, this implementation never inserts them. A Responder answers such a
/// Request with a Reply with R set (what siw does); an Initiator closes the connection.
pub fn check_markers(peer: &RrFrame<'_>) -> Result<(), MpaError> {
    if peer.markers {
        Err(MpaError::MarkersRequired)
    } else {
        Ok(())
    }
}

/// Whether FPDUs carry CRCs after the exchange: yes when either frame set C (RFC 5044 connection
/// setup).
pub const fn negotiate_crc(request_crc: bool, reply_crc: bool) -> bool {
    request_crc || reply_crc
}

/// Pad octets after a ULPDU of `ulpdu_len` octets, so that header + ULPDU + pad is a multiple of
/// four (RFC 5044, FPDU format).
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (FPDU_HDR_LEN + ulpdu_len) % 4) % 4
}

/// Total FPDU length for a ULPDU of `ulpdu_len` octets (no markers).
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    FPDU_HDR_LEN + ulpdu_len + pad_len(ulpdu_len) + FPDU_CRC_LEN
}

/// Frames a ULPDU already written at `buf[2..2 + ulpdu_len]`: writes ULPDU_Length, zero pad and
/// the CRC (zero when `crc` is off, as Linux siw sends). Returns the FPDU length.
pub fn seal_fpdu(buf: &mut [u8], ulpdu_len: usize, crc: bool) -> Result<usize, MpaError> {
    if ulpdu_len > MAX_ULPDU {
        return Err(MpaError::UlpduTooLong(u16::MAX));
    }
    let total = fpdu_len(ulpdu_len);
    let capacity = buf.len();
    let buf = buf.get_mut(..total).ok_or(MpaError::NoSpace {
        needed: total,
        capacity,
    })?;
    buf[..FPDU_HDR_LEN].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
    let crc_at = total - FPDU_CRC_LEN;
    buf[FPDU_HDR_LEN + ulpdu_len..crc_at].fill(0);
    let value = if crc {
        let mut c = Crc32c::new();
        c.update(&buf[..crc_at]);
        c.value()
    } else {
        0
    };
    buf[crc_at..].copy_from_slice(&value.to_le_bytes());
    Ok(total)
}

/// Copies `ulpdu` into `out` and frames it ([`seal_fpdu`]).
pub fn encode_fpdu(ulpdu: &[u8], crc: bool, out: &mut [u8]) -> Result<usize, MpaError> {
    let total = fpdu_len(ulpdu.len());
    if out.len() < total {
        return Err(MpaError::NoSpace {
            needed: total,
            capacity: out.len(),
        });
    }
    out[FPDU_HDR_LEN..FPDU_HDR_LEN + ulpdu.len()].copy_from_slice(ulpdu);
    seal_fpdu(out, ulpdu.len(), crc)
}

/// An FPDU found at the front of a receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fpdu<'a> {
    /// The ULPDU (one DDP segment), borrowed from the buffer.
    pub ulpdu: &'a [u8],
    /// Octets the whole FPDU occupies (consume this many).
    pub len: usize,
}

/// Decodes the FPDU at the front of `buf`. `max_ulpdu` is the receiver's limit on ULPDU_Length
/// (checked before anything is sized by it); with `crc` on, the CRC is verified.
pub fn decode_fpdu(buf: &[u8], crc: bool, max_ulpdu: usize) -> Result<Fpdu<'_>, MpaError> {
    let hdr = buf.get(..FPDU_HDR_LEN).ok_or(MpaError::Incomplete {
        needed: FPDU_HDR_LEN,
    })?;
    let raw = u16::from_be_bytes([hdr[0], hdr[1]]);
    let ulpdu_len = usize::from(raw);
    if ulpdu_len > max_ulpdu {
        return Err(MpaError::UlpduTooLong(raw));
    }
    let total = fpdu_len(ulpdu_len);
    let frame = buf
        .get(..total)
        .ok_or(MpaError::Incomplete { needed: total })?;
    let crc_at = total - FPDU_CRC_LEN;
    if crc {
        let received = u32::from_le_bytes([
            frame[crc_at],
            frame[crc_at + 1],
            frame[crc_at + 2],
            frame[crc_at + 3],
        ]);
        let mut c = Crc32c::new();
        c.update(&frame[..crc_at]);
        let computed = c.value();
        if received != computed {
            return Err(MpaError::CrcMismatch { received, computed });
        }
    }
    Ok(Fpdu {
        ulpdu: &frame[FPDU_HDR_LEN..FPDU_HDR_LEN + ulpdu_len],
        len: total,
    })
}

#[cfg(test)]
#[path = "mpa_tests.rs"]
mod tests;
