//! The private data of a connection reject: why a server refused a connect request.
//!
//! This is **not an IETF format**. RFC 8797 defines RDMA-CM private data for the connect
//! request and the accept only (§5.1); it says nothing about `rdma_reject`, and Linux svcrdma
//! rejects without private data. This crate's servers put an 8-octet message of their own into
//! the reject (`rdma_reject(id, msg, 8)`), so that a client of this crate can tell "the server
//! is full" from "you hold too many connections" and report it; every other peer sees an
//! ordinary consumer reject (IB CM reason 28) with private data it does not understand.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Format Identifier 0x7270726a ("rprj")            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |    Reason     |       Reserved (zero)         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The identifier differs from RFC 8797's `0xf6ab0e18` (and from every value of IANA's
//! "RDMA-CM Private Data Identifiers" registry, which holds that one only), so neither decoder
//! mistakes one message for the other. Version is 1. Reason is one of [`RejectReason`]'s codes;
//! the reserved octets are sent as zero and ignored.
//!
//! Normal operation: the server encodes [`RejectReason::encode`] into its reject; the client
//! runs [`decode`] over whatever private data the `RDMA_CM_EVENT_REJECTED` event carried.
//!
//! Recovery: reject private data is untrusted and often padded (an InfiniBand / RoCE REJ always
//! carries 148 octets, zero-filled after what the sender gave; another layer may put its own
//! octets first), so [`decode`] looks for the identifier at any offset and reads only what is
//! there. No identifier, a truncated message, another version or reason code 0 all decode to
//! `None`: "no reason given", never a panic. An unknown non-zero code of version 1 decodes to
//! [`RejectReason::Other`], so newer servers' reasons still read as a reason.

/// The format identifier (network byte order): "rprj", not an IANA-registered value.
pub const FORMAT_ID: u32 = 0x7270_726a;

/// The format identifier as it appears on the wire.
pub const FORMAT_ID_BYTES: [u8; 4] = FORMAT_ID.to_be_bytes();

/// Length of a version 1 message in octets.
pub const MSG_LEN: usize = 8;

/// The only message version defined.
pub const VERSION_1: u8 = 1;

/// Why a server refused a connection. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Every connection slot is in use and no connection was idle long enough to be closed
    /// for the newcomer (code 1). Trying again later may succeed.
    ServerFull,
    /// The client's address already holds as many connections as the server allows one peer
    /// (code 2). Close a connection first.
    PeerLimit,
    /// The server is stopping and accepts no connections (code 3).
    ShuttingDown,
    /// Accepting failed on the server (memory or verbs resources, code 4).
    NoResources,
    /// The server holds as many connections as it is configured to serve in all (code 5).
    /// Trying again later may succeed.
    ConnectionLimit,
    /// A reason code this version does not know (a newer server's).
    Other(u8),
}

impl RejectReason {
    /// The reason's code on the wire.
    pub const fn code(self) -> u8 {
        match self {
            RejectReason::ServerFull => 1,
            RejectReason::PeerLimit => 2,
            RejectReason::ShuttingDown => 3,
            RejectReason::NoResources => 4,
            RejectReason::ConnectionLimit => 5,
            RejectReason::Other(c) => c,
        }
    }

    /// The reason of wire code `c` (`None` for 0, which means no reason).
    pub const fn from_code(c: u8) -> Option<RejectReason> {
        match c {
            0 => None,
            1 => Some(RejectReason::ServerFull),
            2 => Some(RejectReason::PeerLimit),
            3 => Some(RejectReason::ShuttingDown),
            4 => Some(RejectReason::NoResources),
            5 => Some(RejectReason::ConnectionLimit),
            c => Some(RejectReason::Other(c)),
        }
    }

    /// The eight octets to put into the reject.
    pub const fn encode(self) -> [u8; MSG_LEN] {
        let id = FORMAT_ID_BYTES;
        [id[0], id[1], id[2], id[3], VERSION_1, self.code(), 0, 0]
    }
}

impl core::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RejectReason::ServerFull => f.write_str("server full"),
            RejectReason::PeerLimit => f.write_str("too many connections from this address"),
            RejectReason::ShuttingDown => f.write_str("server shutting down"),
            RejectReason::NoResources => f.write_str("server out of resources"),
            RejectReason::ConnectionLimit => f.write_str("server at its connection limit"),
            RejectReason::Other(c) => write!(f, "reject reason {c}"),
        }
    }
}

/// The reason in a reject's private data, or `None` when it carries none this format defines
/// (see the module documentation). Never panics, whatever `buf` holds.
pub fn decode(buf: &[u8]) -> Option<RejectReason> {
    let at = buf.windows(4).position(|w| w == FORMAT_ID_BYTES)?;
    let msg = buf.get(at..at + MSG_LEN)?;
    if msg.get(4).copied()? != VERSION_1 {
        return None;
    }
    RejectReason::from_code(msg.get(5).copied()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::private_data;

    /// Golden vectors from the layout in the module documentation.
    #[test]
    fn accepts_golden_vectors() {
        assert_eq!(
            RejectReason::ServerFull.encode(),
            [0x72, 0x70, 0x72, 0x6a, 0x01, 0x01, 0x00, 0x00]
        );
        assert_eq!(
            RejectReason::PeerLimit.encode(),
            [0x72, 0x70, 0x72, 0x6a, 0x01, 0x02, 0x00, 0x00]
        );
        assert_eq!(
            decode(&[0x72, 0x70, 0x72, 0x6a, 0x01, 0x03, 0xff, 0xff]),
            Some(RejectReason::ShuttingDown)
        );
        assert_eq!(
            RejectReason::ConnectionLimit.encode(),
            [0x72, 0x70, 0x72, 0x6a, 0x01, 0x05, 0x00, 0x00]
        );
        assert_eq!(
            decode(&[0x72, 0x70, 0x72, 0x6a, 0x01, 0x04, 0, 0]),
            Some(RejectReason::NoResources)
        );
    }

    #[test]
    fn accepts_every_reason_round_trip() {
        for c in 1..=255u8 {
            let r = RejectReason::from_code(c).expect("non-zero code");
            assert_eq!(r.code(), c);
            assert_eq!(decode(&r.encode()), Some(r));
        }
        assert_eq!(
            decode(&[0x72, 0x70, 0x72, 0x6a, 1, 9, 0, 0]),
            Some(RejectReason::Other(9))
        );
    }

    /// An InfiniBand REJ carries 148 octets, zero-filled after the sender's; another layer may
    /// put octets first.
    #[test]
    fn accepts_padded_and_offset_messages() {
        let mut rej = [0u8; 148];
        rej[..MSG_LEN].copy_from_slice(&RejectReason::PeerLimit.encode());
        assert_eq!(decode(&rej), Some(RejectReason::PeerLimit));
        let mut shifted = [0u8; 148];
        shifted[5..5 + MSG_LEN].copy_from_slice(&RejectReason::ServerFull.encode());
        assert_eq!(decode(&shifted), Some(RejectReason::ServerFull));
    }

    #[test]
    fn rejects_absent_bad_and_foreign_data_as_no_reason() {
        let full = RejectReason::ServerFull.encode();
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0u8; 148]), None);
        for n in 0..MSG_LEN {
            assert_eq!(decode(&full[..n]), None, "truncated to {n}");
        }
        // Another version, or code 0.
        assert_eq!(decode(&[0x72, 0x70, 0x72, 0x6a, 2, 1, 0, 0]), None);
        assert_eq!(decode(&[0x72, 0x70, 0x72, 0x6a, 1, 0, 0, 0]), None);
        // RFC 8797 private data is not a reject reason, and a reject is not RFC 8797 data.
        let rfc = private_data::PrivateData::v1(true, 4096, 4096).encode();
        assert_eq!(decode(&rfc), None);
        assert_eq!(private_data::find(&full), None);
        // Every prefix of every byte pattern around the identifier decodes without panicking.
        let mut buf = [0u8; 16];
        for b in 0..=255u8 {
            buf[..4].copy_from_slice(&FORMAT_ID_BYTES);
            buf[4..].fill(b);
            for n in 0..=buf.len() {
                let _ = decode(&buf[..n]);
            }
        }
    }
}
