//! RDMA-CM private data for RPC-over-RDMA Version One (RFC 8797).
//!
//! Normal operation: the active side (client) puts an 8-octet [`PrivateData`] message in the
//! private data of its connect request, the passive side (server) answers with its own in the
//! accept. Each side then calls [`negotiate`] with its own message and whatever [`find`] located in
//! the peer's private data, and gets a [`Negotiated`] value holding the inline thresholds per
//! direction and whether Send With Invalidate may be used. The message is not XDR: it is eight
//! raw octets, big-endian where multi-octet.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Format Identifier                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Bit numbering: the RFC figure numbers bits from the most significant bit of each word (IETF
//! convention), so R is bit 15 of the second word — the *last* bit of the flags octet, i.e. the
//! low-order bit `0x01` ([`FLAG_REMOTE_INVALIDATE`]). RFC 8797 §5.1 ("bit 15 of the Flags field")
//! refers to the same position, and Linux (the reference peer) sends flags `0x01` for R. The seven
//! reserved bits are sent as zero and ignored on receipt.
//!
//! Recovery: private data is optional and shared with other layers (for example the 4-octet MPA
//! v2 IRD/ORD word on iWARP precedes it), so the receiver scans the whole buffer for the format
//! identifier at any, possibly unaligned, offset. Anything that is not a complete version 1
//! message — no identifier, a truncated message, an unknown version — means "peer sent no RFC
//! 8797 data": the v1 defaults (1024-octet thresholds, no remote invalidation) apply. Unknown
//! versions are reported by [`search`] so they can be logged, never trusted.

/// The RFC 8797 format identifier (IANA "RDMA-CM Private Data Identifiers"), network byte order.
pub const FORMAT_ID: u32 = 0xf6ab_0e18;

/// The format identifier as it appears on the wire.
pub const FORMAT_ID_BYTES: [u8; 4] = FORMAT_ID.to_be_bytes();

/// Length in octets of a version 1 message.
pub const MSG_LEN: usize = 8;

/// The only message format version this module understands.
pub const VERSION_1: u8 = 1;

/// The R bit (remote invalidation supported) in the flags octet. See the module doc for why it is
/// the low-order bit.
pub const FLAG_REMOTE_INVALIDATE: u8 = 0x01;

/// Smallest inline threshold size that can be advertised (and the RFC 8166 v1 default).
pub const MIN_SIZE: u32 = 1024;

/// Largest inline threshold size that can be advertised (encoded value 255).
pub const MAX_SIZE: u32 = 262_144;

/// The inline threshold assumed when the peer sent no usable private data (RFC 8166 §3.3.3).
pub const DEFAULT_INLINE: u32 = 1024;

/// Errors of the private data layer. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdError {
    /// Fewer octets than a whole message.
    Truncated {
        /// Octets needed.
        needed: usize,
        /// Octets available.
        have: usize,
    },
    /// The first four octets are not [`FORMAT_ID`].
    BadIdentifier(u32),
    /// The identifier matched but the version is not one this module understands.
    UnknownVersion(u8),
    /// [`search`] found no identifier anywhere in the buffer.
    NotFound,
    /// The output buffer is too small.
    NoSpace {
        /// Octets needed.
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl core::fmt::Display for PdError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            PdError::Truncated { needed, have } => {
                write!(f, "private data truncated: {have} of {needed} octets")
            }
            PdError::BadIdentifier(v) => write!(f, "private data identifier {v:#010x}"),
            PdError::UnknownVersion(v) => write!(f, "private data version {v} not understood"),
            PdError::NotFound => write!(f, "no RPC-over-RDMA private data identifier found"),
            PdError::NoSpace { needed, capacity } => {
                write!(
                    f,
                    "private data needs {needed} octets, buffer holds {capacity}"
                )
            }
        }
    }
}

impl std::error::Error for PdError {}

/// Clamps an inline threshold into `MIN_SIZE..=MAX_SIZE`, the range a size octet can carry
/// (not rounded: [`representable_size`] also rounds down to a multiple of 1024). An endpoint
/// keeps its configured inline thresholds in this range.
#[inline]
pub const fn clamp_size(size: u32) -> u32 {
    if size < MIN_SIZE {
        MIN_SIZE
    } else if size > MAX_SIZE {
        MAX_SIZE
    } else {
        size
    }
}

/// Encodes a size in octets as the RFC 8797 size octet: `(size / 1024) - 1`.
///
/// Sizes that are not representable are first clamped into `MIN_SIZE..=MAX_SIZE` and then rounded
/// DOWN to a multiple of 1024, so a receiver is never promised more than it has. Sizes below 1024
/// are raised to 1024: that is the RFC 8166 minimum every v1 receiver must accept anyway, and what
/// the peer assumes when no private data arrives at all.
#[inline]
pub const fn encode_size(size: u32) -> u8 {
    let s = clamp_size(size);
    // s / 1024 is in 1..=256, so the result is in 0..=255.
    ((s / 1024) - 1) as u8
}

/// Decodes a size octet: `(v + 1) * 1024`. Every octet value is valid (1024..=262144).
#[inline]
pub const fn decode_size(v: u8) -> u32 {
    (v as u32 + 1) * 1024
}

/// The size that will actually be advertised for `size`: what `decode_size(encode_size(size))`
/// gives.
#[inline]
pub const fn representable_size(size: u32) -> u32 {
    decode_size(encode_size(size))
}

/// An RFC 8797 private data message.
///
/// Values built with [`PrivateData::v1`] hold the caller's real sizes; [`encode`](Self::encode)
/// clamps and rounds them (see [`encode_size`]). Values from [`decode`] always hold representable
/// sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    /// Message format version (1 is the only one defined).
    pub version: u8,
    /// R: the sender supports remote invalidation (RFC 8797 §4.1).
    pub remote_invalidate: bool,
    /// Largest message, in octets, the sender will transmit with one RDMA Send.
    pub max_send_size: u32,
    /// Largest message, in octets, the sender can receive with one RDMA Receive.
    pub max_recv_size: u32,
}

impl PrivateData {
    /// What a peer that sent no private data is assumed to have sent (RFC 8797 §5.1): R clear,
    /// both sizes 1024.
    pub const V1_DEFAULTS: PrivateData = PrivateData {
        version: VERSION_1,
        remote_invalidate: false,
        max_send_size: DEFAULT_INLINE,
        max_recv_size: DEFAULT_INLINE,
    };

    /// A version 1 message for the local side's real capabilities.
    #[inline]
    pub const fn v1(remote_invalidate: bool, max_send_size: u32, max_recv_size: u32) -> Self {
        Self {
            version: VERSION_1,
            remote_invalidate,
            max_send_size,
            max_recv_size,
        }
    }

    /// The send size this message advertises once encoded.
    #[inline]
    pub const fn advertised_send_size(&self) -> u32 {
        representable_size(self.max_send_size)
    }

    /// The receive size this message advertises once encoded.
    #[inline]
    pub const fn advertised_recv_size(&self) -> u32 {
        representable_size(self.max_recv_size)
    }

    /// Encodes the eight octets. Reserved bits are zero; sizes go through [`encode_size`]. The
    /// version octet is written as held (use [`PrivateData::v1`] to build a message).
    pub const fn encode(&self) -> [u8; MSG_LEN] {
        let id = FORMAT_ID_BYTES;
        [
            id[0],
            id[1],
            id[2],
            id[3],
            self.version,
            if self.remote_invalidate {
                FLAG_REMOTE_INVALIDATE
            } else {
                0
            },
            encode_size(self.max_send_size),
            encode_size(self.max_recv_size),
        ]
    }

    /// Encodes into the start of `out` (e.g. after a transport's own private data) and returns the
    /// number of octets written ([`MSG_LEN`]). `out` is untouched on error.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, PdError> {
        match out.get_mut(..MSG_LEN) {
            Some(dst) => {
                dst.copy_from_slice(&self.encode());
                Ok(MSG_LEN)
            }
            None => Err(PdError::NoSpace {
                needed: MSG_LEN,
                capacity: out.len(),
            }),
        }
    }
}

/// Decodes a message that starts at offset 0 of `buf`. Octets after the first eight are ignored
/// (version 1 defines exactly eight). Unknown versions are rejected with
/// [`PdError::UnknownVersion`]; reserved flag bits are ignored.
pub fn decode(buf: &[u8]) -> Result<PrivateData, PdError> {
    if buf.len() < 4 {
        return Err(PdError::Truncated {
            needed: MSG_LEN,
            have: buf.len(),
        });
    }
    let id = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if id != FORMAT_ID {
        return Err(PdError::BadIdentifier(id));
    }
    // A version octet can be reported even when the rest is missing.
    if let Some(&v) = buf.get(4) {
        if v != VERSION_1 {
            return Err(PdError::UnknownVersion(v));
        }
    }
    let Some(m) = buf.get(..MSG_LEN) else {
        return Err(PdError::Truncated {
            needed: MSG_LEN,
            have: buf.len(),
        });
    };
    Ok(PrivateData {
        version: VERSION_1,
        remote_invalidate: m[5] & FLAG_REMOTE_INVALIDATE != 0,
        max_send_size: decode_size(m[6]),
        max_recv_size: decode_size(m[7]),
    })
}

/// Scans `buf` for the format identifier at every offset (no alignment assumed) and returns the
/// offset and contents of the first well-formed version 1 message.
///
/// When none is found the error says why, for logging: [`PdError::UnknownVersion`] if some
/// identifier carried a version other than 1, else [`PdError::Truncated`] if an identifier ran off
/// the end of the buffer, else [`PdError::NotFound`]. In every error case the peer is to be treated
/// as having sent no private data.
pub fn search(buf: &[u8]) -> Result<(usize, PrivateData), PdError> {
    let mut why = PdError::NotFound;
    for (at, w) in buf.windows(FORMAT_ID_BYTES.len()).enumerate() {
        if w != FORMAT_ID_BYTES {
            continue;
        }
        match decode(&buf[at..]) {
            Ok(pd) => return Ok((at, pd)),
            Err(e @ PdError::UnknownVersion(_)) => why = e,
            Err(e @ PdError::Truncated { .. }) if why == PdError::NotFound => why = e,
            Err(_) => {}
        }
    }
    Err(why)
}

/// Finds a well-formed version 1 message anywhere in `buf` (see [`search`]). `None` means the
/// peer is to be treated as having sent no private data.
#[inline]
pub fn find(buf: &[u8]) -> Option<PrivateData> {
    search(buf).ok().map(|(_, pd)| pd)
}

/// The connection's effective settings after the private data exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Largest RPC-over-RDMA message we may transmit with one Send: min(our max send, the peer's
    /// receive size). Larger messages need chunks.
    pub send_inline: u32,
    /// Largest message the peer will transmit to us with one Send: min(what we advertised as
    /// receive size, the peer's send size). A requester uses it to decide whether a reply can
    /// come back inline or needs a Reply chunk.
    pub recv_inline: u32,
    /// Size every posted Receive buffer must keep: what we advertised (the peer may send up to
    /// that much whatever it told us about its own send size).
    pub recv_buffer: u32,
    /// Both sides set R: a responder MAY use Send With Invalidate for replies (RFC 8797 §4.1).
    ///
    /// Note for requesters: a Linux server never sets R itself yet uses Send With Invalidate when
    /// the client set R, so a requester that advertised R must always handle invalidated keys,
    /// whatever this flag says.
    pub remote_invalidate: bool,
    /// The peer sent a recognised version 1 message (otherwise v1 defaults were assumed).
    pub peer_recognised: bool,
}

/// Combines our message with the peer's (`None` when [`find`] found nothing; a message whose
/// version is not 1 is treated the same way).
///
/// Both of our limits are taken as advertised (rounded down to a representable size), so the
/// two ends compute the same threshold for each direction: the peer only knows what we sent.
pub fn negotiate(ours: &PrivateData, peer: Option<&PrivateData>) -> Negotiated {
    let (peer, peer_recognised) = match peer {
        Some(p) if p.version == VERSION_1 => (*p, true),
        _ => (PrivateData::V1_DEFAULTS, false),
    };
    // A peer value built by hand (not from `decode`) may be unrepresentable: normalise it the same
    // way the wire would have.
    let peer_send = peer.advertised_send_size();
    let peer_recv = peer.advertised_recv_size();
    let recv_buffer = ours.advertised_recv_size();
    Negotiated {
        send_inline: ours.advertised_send_size().min(peer_recv),
        recv_inline: recv_buffer.min(peer_send),
        recv_buffer,
        remote_invalidate: ours.remote_invalidate && peer.remote_invalidate,
        peer_recognised,
    }
}

/// [`negotiate`] from our local sizes and R flag, with the peer's raw private data buffer.
#[inline]
pub fn negotiate_raw(
    remote_invalidate: bool,
    max_send_size: u32,
    max_recv_size: u32,
    peer_private_data: &[u8],
) -> Negotiated {
    let ours = PrivateData::v1(remote_invalidate, max_send_size, max_recv_size);
    negotiate(&ours, find(peer_private_data).as_ref())
}
