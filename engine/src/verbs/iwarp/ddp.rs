//! DDP, Direct Data Placement over reliable transports (RFC 5041): the tagged and untagged
//! buffer model headers at the front of every ULPDU.
//!
//! Normal operation: [`decode`] reads the DDP header of one ULPDU (from
//! [`super::mpa::decode_fpdu`]) and borrows the rest as [`Segment::payload`]; [`encode_header`]
//! writes one into a caller's slice. The first octet is the DDP control field (RFC 5041 §4.1): T
//! (tagged), L (last segment of the message), four reserved bits (sent as zero, not checked) and
//! DV, the DDP version (1). The second octet (and, untagged, four more) belong to the upper layer
//! (RDMAP, RFC 5040), carried here uninterpreted as `ulp_ctrl` / `ulp_word`.
//!
//! ```text
//!  tagged (RFC 5041 §4.2), 14 octets        untagged (RFC 5041 §4.3), 18 octets
//!  +-+-+----+--+--------+----------------   +-+-+----+--+--------+--------------------------
//!  |T|L|Rsvd|DV|RsvdULP | STag (32)         |T|L|Rsvd|DV|RsvdULP (8) | RsvdULP (32)
//!  +-+-+----+--+--------+----------------   | QN (32) | MSN (32) | MO (32)
//!  | TO (64)                                +-----------------------------------------------
//! ```
//!
//! Linux siw lays these out as `struct iwarp_ctrl_tagged` / `iwarp_ctrl_untagged` (iwarp.h,
//! after the 2-octet MPA length) with the same masks: T 0x80, L 0x40, reserved 0x3c, DV 0x03.
//!
//! Recovery: a ULPDU shorter than its header is [`DdpError::Truncated`]; a DV other than 1 is
//! [`DdpError::BadVersion`], which RFC 5041's error semantics turn into a Terminate (DDP layer,
//! tagged or untagged buffer error, "invalid DDP version"; [`DdpError::terminate_code`]) and the
//! end of the stream. Sequence checks (MSN, MO, STag bounds) need connection state and belong to
//! the provider.

use super::term::{TermCode, LAYER_DDP};

/// T: tagged buffer model.
pub const FLAG_TAGGED: u8 = 0x80;
/// L: last segment of the DDP message.
pub const FLAG_LAST: u8 = 0x40;
/// Mask of DV, the DDP version.
pub const VERSION_MASK: u8 = 0x03;
/// The DDP version of RFC 5041.
pub const DDP_VERSION: u8 = 1;
/// Octets of a tagged DDP header.
pub const TAGGED_HDR_LEN: usize = 14;
/// Octets of an untagged DDP header.
pub const UNTAGGED_HDR_LEN: usize = 18;
/// Terminate error type: DDP catastrophic (RFC 5040 Terminate codes, DDP layer).
pub const ETYPE_CATASTROPHIC: u8 = 0x0;
/// Terminate error type: tagged buffer error.
pub const ETYPE_TAGGED: u8 = 0x1;
/// Terminate error type: untagged buffer error.
pub const ETYPE_UNTAGGED: u8 = 0x2;
/// Tagged buffer error: invalid STag.
pub const ECODE_T_INVALID_STAG: u8 = 0x00;
/// Tagged buffer error: base or bounds violation.
pub const ECODE_T_BASE_BOUNDS: u8 = 0x01;
/// Tagged buffer error: STag not associated with the stream.
pub const ECODE_T_STAG_NOT_ASSOC: u8 = 0x02;
/// Tagged buffer error: TO wrap.
pub const ECODE_T_TO_WRAP: u8 = 0x03;
/// Tagged buffer error: invalid DDP version.
pub const ECODE_T_VERSION: u8 = 0x04;
/// Untagged buffer error: invalid QN.
pub const ECODE_UT_INVALID_QN: u8 = 0x01;
/// Untagged buffer error: invalid MSN, no buffer available.
pub const ECODE_UT_MSN_NO_BUFFER: u8 = 0x02;
/// Untagged buffer error: invalid MSN, MSN range not valid.
pub const ECODE_UT_MSN_RANGE: u8 = 0x03;
/// Untagged buffer error: invalid MO.
pub const ECODE_UT_INVALID_MO: u8 = 0x04;
/// Untagged buffer error: DDP message too long for the available buffer.
pub const ECODE_UT_TOO_LONG: u8 = 0x05;
/// Untagged buffer error: invalid DDP version.
pub const ECODE_UT_VERSION: u8 = 0x06;

/// Errors of the DDP layer. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpError {
    /// The ULPDU is shorter than the DDP header its T bit announces.
    Truncated {
        /// Octets needed.
        needed: usize,
        /// Octets available.
        have: usize,
    },
    /// DV is not 1.
    BadVersion {
        /// T bit of the offending segment.
        tagged: bool,
        /// The version received.
        version: u8,
    },
    /// The output buffer is too small.
    NoSpace {
        /// Octets needed.
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl DdpError {
    /// The RFC 5040 Terminate code a receiver sends for this error.
    pub const fn terminate_code(&self) -> TermCode {
        match *self {
            DdpError::BadVersion { tagged: true, .. } => {
                TermCode::new(LAYER_DDP, ETYPE_TAGGED, ECODE_T_VERSION)
            }
            DdpError::BadVersion { tagged: false, .. } => {
                TermCode::new(LAYER_DDP, ETYPE_UNTAGGED, ECODE_UT_VERSION)
            }
            DdpError::Truncated { .. } | DdpError::NoSpace { .. } => {
                TermCode::new(LAYER_DDP, ETYPE_CATASTROPHIC, 0)
            }
        }
    }
}

impl core::fmt::Display for DdpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DdpError::Truncated { needed, have } => {
                write!(f, "DDP segment truncated: {have} of {needed} octets")
            }
            DdpError::BadVersion { tagged, version } => {
                write!(f, "DDP version {version} (tagged {tagged})")
            }
            DdpError::NoSpace { needed, capacity } => {
                write!(
                    f,
                    "DDP header needs {needed} octets, buffer holds {capacity}"
                )
            }
        }
    }
}

impl std::error::Error for DdpError {}

/// The buffer model of a segment and its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// Tagged: data placed at `to` in the buffer named by `stag`.
    Tagged {
        /// Steering tag of the data sink buffer.
        stag: u32,
        /// Tagged offset within it.
        to: u64,
    },
    /// Untagged: data placed into the next buffer of queue `qn`.
    Untagged {
        /// The 32 upper-layer octets after `ulp_ctrl` (RDMAP: Invalidate STag or reserved).
        ulp_word: u32,
        /// Queue number (RDMAP: 0 Send, 1 Read Request, 2 Terminate).
        qn: u32,
        /// Message sequence number (first message on a queue is 1).
        msn: u32,
        /// Message offset of this segment's payload.
        mo: u32,
    },
}

/// A DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// L: last segment of the message.
    pub last: bool,
    /// The upper-layer octet after the control octet (RDMAP's control field).
    pub ulp_ctrl: u8,
    /// Buffer model and its fields.
    pub buffer: Buffer,
}

impl Header {
    /// Octets of this header on the wire.
    pub const fn wire_len(&self) -> usize {
        match self.buffer {
            Buffer::Tagged { .. } => TAGGED_HDR_LEN,
            Buffer::Untagged { .. } => UNTAGGED_HDR_LEN,
        }
    }

    /// Whether this is the tagged model.
    pub const fn is_tagged(&self) -> bool {
        matches!(self.buffer, Buffer::Tagged { .. })
    }
}

/// One DDP segment: its header and the payload borrowed from the ULPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// The header.
    pub header: Header,
    /// Everything after the header.
    pub payload: &'a [u8],
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// Header length announced by a DDP control octet.
pub const fn header_len(ctrl: u8) -> usize {
    if ctrl & FLAG_TAGGED != 0 {
        TAGGED_HDR_LEN
    } else {
        UNTAGGED_HDR_LEN
    }
}

/// Decodes the DDP header at the front of `ulpdu`.
pub fn decode(ulpdu: &[u8]) -> Result<Segment<'_>, DdpError> {
    let ctrl = *ulpdu.first().ok_or(DdpError::Truncated {
        needed: UNTAGGED_HDR_LEN.min(TAGGED_HDR_LEN),
        have: 0,
    })?;
    let tagged = ctrl & FLAG_TAGGED != 0;
    let needed = header_len(ctrl);
    if ulpdu.len() < needed {
        return Err(DdpError::Truncated {
            needed,
            have: ulpdu.len(),
        });
    }
    let version = ctrl & VERSION_MASK;
    if version != DDP_VERSION {
        return Err(DdpError::BadVersion { tagged, version });
    }
    let buffer = if tagged {
        Buffer::Tagged {
            stag: be32(ulpdu, 2),
            to: be64(ulpdu, 6),
        }
    } else {
        Buffer::Untagged {
            ulp_word: be32(ulpdu, 2),
            qn: be32(ulpdu, 6),
            msn: be32(ulpdu, 10),
            mo: be32(ulpdu, 14),
        }
    };
    Ok(Segment {
        header: Header {
            last: ctrl & FLAG_LAST != 0,
            ulp_ctrl: ulpdu[1],
            buffer,
        },
        payload: &ulpdu[needed..],
    })
}

/// Writes `h` at the front of `out` (DV 1, reserved bits zero); returns the octets written.
pub fn encode_header(h: &Header, out: &mut [u8]) -> Result<usize, DdpError> {
    let n = h.wire_len();
    if out.len() < n {
        return Err(DdpError::NoSpace {
            needed: n,
            capacity: out.len(),
        });
    }
    out[0] = DDP_VERSION
        | if h.last { FLAG_LAST } else { 0 }
        | if h.is_tagged() { FLAG_TAGGED } else { 0 };
    out[1] = h.ulp_ctrl;
    match h.buffer {
        Buffer::Tagged { stag, to } => {
            out[2..6].copy_from_slice(&stag.to_be_bytes());
            out[6..14].copy_from_slice(&to.to_be_bytes());
        }
        Buffer::Untagged {
            ulp_word,
            qn,
            msn,
            mo,
        } => {
            out[2..6].copy_from_slice(&ulp_word.to_be_bytes());
            out[6..10].copy_from_slice(&qn.to_be_bytes());
            out[10..14].copy_from_slice(&msn.to_be_bytes());
            out[14..18].copy_from_slice(&mo.to_be_bytes());
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tagged header (RFC 5041 §4.2): T=1, L=1, DV=1; RsvdULP 0x40 (an RDMAP RDMA Write);
    /// STag 0x01020304; TO 0x1122334455667788; then two payload octets.
    #[rustfmt::skip]
    const TAGGED: [u8; 16] = [
        0xc1, 0x40,
        0x01, 0x02, 0x03, 0x04,
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
        0xaa, 0xbb,
    ];

    /// Untagged header (RFC 5041 §4.3): T=0, L=0, DV=1; RsvdULP 0x43 + 0x00000000; QN 0;
    /// MSN 7; MO 4096.
    #[rustfmt::skip]
    const UNTAGGED: [u8; 18] = [
        0x01, 0x43,
        0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x07,
        0x00, 0x00, 0x10, 0x00,
    ];

    #[test]
    fn accepts_golden_tagged() {
        let s = decode(&TAGGED).unwrap();
        assert_eq!(
            s.header,
            Header {
                last: true,
                ulp_ctrl: 0x40,
                buffer: Buffer::Tagged {
                    stag: 0x0102_0304,
                    to: 0x1122_3344_5566_7788
                }
            }
        );
        assert_eq!(s.payload, [0xaa, 0xbb]);
        let mut out = [0u8; 14];
        assert_eq!(encode_header(&s.header, &mut out), Ok(14));
        assert_eq!(out, TAGGED[..14]);
    }

    #[test]
    fn accepts_golden_untagged() {
        let s = decode(&UNTAGGED).unwrap();
        assert_eq!(
            s.header,
            Header {
                last: false,
                ulp_ctrl: 0x43,
                buffer: Buffer::Untagged {
                    ulp_word: 0,
                    qn: 0,
                    msn: 7,
                    mo: 4096
                }
            }
        );
        assert!(s.payload.is_empty());
        let mut out = [0u8; 18];
        assert_eq!(encode_header(&s.header, &mut out), Ok(18));
        assert_eq!(out, UNTAGGED);
    }

    #[test]
    fn accepts_reserved_bits_ignored() {
        let mut b = TAGGED;
        b[0] |= 0x3c;
        assert_eq!(decode(&b).unwrap().header, decode(&TAGGED).unwrap().header);
    }

    #[test]
    fn rejects_bad_versions() {
        for v in [0u8, 2, 3] {
            let mut b = UNTAGGED;
            b[0] = (b[0] & !VERSION_MASK) | v;
            let e = decode(&b).unwrap_err();
            assert_eq!(
                e,
                DdpError::BadVersion {
                    tagged: false,
                    version: v
                }
            );
            assert_eq!(e.terminate_code(), TermCode::new(1, 2, 0x06));
            let mut b = TAGGED;
            b[0] = (b[0] & !VERSION_MASK) | v;
            assert_eq!(
                decode(&b).unwrap_err().terminate_code(),
                TermCode::new(1, 1, 0x04)
            );
        }
    }

    #[test]
    fn rejects_truncated_headers() {
        assert_eq!(
            decode(&TAGGED[..13]),
            Err(DdpError::Truncated {
                needed: 14,
                have: 13
            })
        );
        assert_eq!(
            decode(&UNTAGGED[..17]),
            Err(DdpError::Truncated {
                needed: 18,
                have: 17
            })
        );
        assert!(matches!(
            decode(&[]),
            Err(DdpError::Truncated { have: 0, .. })
        ));
        let h = decode(&UNTAGGED).unwrap().header;
        assert_eq!(
            encode_header(&h, &mut [0u8; 17]),
            Err(DdpError::NoSpace {
                needed: 18,
                capacity: 17
            })
        );
    }
}
