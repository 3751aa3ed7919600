//! Transport-header codecs: RPC-over-RDMA Version One (RFC 8166), Version Two (the seed draft),
//! the chunk lists both share, RFC 8797 connection private data, and this crate's own
//! connection-reject private data ([`reject`], not an IETF format).
//!
//! Normal operation: a receiver calls [`peek`] on a receive buffer to learn the XID and version
//! from the first two words (their place is fixed for every version, RFC 8166 §7), then hands
//! the buffer to [`v1::decode`] or [`v2::decode`]. Decoding validates the whole transport header
//! in one pass and returns borrowed views; nothing is copied or allocated. Senders describe a
//! header with [`v1::Message`] / [`v2::Message`] over caller-owned slices, size it with
//! `encoded_len` (for the inline budget) and encode into a caller buffer.
//!
//! Recovery: a rejected header comes back as a small `Copy` error that names the rule broken and
//! carries the XID and version, and its `response()` says whether the spec requires an answer
//! (ERR_VERS / ERR_CHUNK in Version One; RDMA2_ERR_VERS / _INVAL_PROC / _BAD_XDR in Version Two)
//! or a silent drop. A version neither codec speaks is answered with an ERR_VERS whose layout is
//! the same in every version ([`v1::encode_err_vers`]) and the range [`VERS_LOW`]..=[`VERS_HIGH`];
//! an RDMA_ERROR of such a version is dropped, never answered (its ERR_VERS range is still
//! reported in the error).

pub mod chunks;
pub mod private_data;
pub mod reject;
pub mod v1;
pub mod v2;

pub use chunks::{
    parse_chunk_lists, ChunkError, ChunkLimits, ChunkLists, ChunkListsRef, ReadChunk, ReadChunks,
    ReadList, ReadSegment, ReadSegments, ReplyChunk, Segment, Segments, WriteChunk, WriteChunks,
    WriteList,
};

/// Lowest RPC-over-RDMA version this crate decodes.
pub const VERS_LOW: u32 = v1::VERSION;
/// Highest RPC-over-RDMA version this crate decodes.
pub const VERS_HIGH: u32 = v2::VERSION;

/// Octets of an inline message header (RDMA_MSG / RDMA2_MSG) of version `vers` with an empty
/// Read list, a Write list of `writes` chunks of one segment each, and no Reply chunk: the
/// fixed words (plus `rdma_direction` and `rdma_inv_handle` in Version Two) and the three lists.
///
/// With `writes` = 0 this is the smallest header any inline message carries; for a call that
/// offers `writes` Write chunks it is the largest header an inline reply to it carries (the
/// reply returns the call's Write list, RFC 8166 §3.4.6), so the receive buffer minus this is
/// the room such a reply has for its RPC message.
#[inline]
pub const fn inline_msg_header_len(vers: u32, writes: usize) -> usize {
    let fixed = if vers == v2::VERSION {
        v2::FIXED_LEN + 8
    } else {
        v1::FIXED_LEN
    };
    fixed + 4 + writes * (8 + chunks::SEGMENT_LEN) + 4 + 4
}

/// The XID and version of a transport header (its first two words), or `None` when fewer than
/// eight octets arrived. Lets a receiver route by version before decoding.
#[inline]
pub fn peek(buf: &[u8]) -> Option<(u32, u32)> {
    match buf.get(..8)? {
        &[a, b, c, d, e, f, g, h] => Some((
            u32::from_be_bytes([a, b, c, d]),
            u32::from_be_bytes([e, f, g, h]),
        )),
        _ => None,
    }
}

/// Word at `at` (big-endian), if present.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    match b.get(at..at.checked_add(4)?) {
        Some(&[w0, w1, w2, w3]) => Some(u32::from_be_bytes([w0, w1, w2, w3])),
        _ => None,
    }
}

/// For a header of any version whose procedure is RDMA_ERROR (4) with ERR_VERS (1): the
/// version range it reports. RFC 8166 §7 keeps the place of `rdma_proc`, the value of ERR_VERS
/// and the layout of its body fixed for every version, so this reads any version.
pub(crate) fn any_version_err_vers(buf: &[u8]) -> Option<(u32, u32)> {
    match (be32(buf, 12)?, be32(buf, 16)?) {
        (4, 1) => Some((be32(buf, 20)?, be32(buf, 24)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_peek_of_fixed_words() {
        let buf = [
            0x12, 0x34, 0x56, 0x78, // xid
            0x00, 0x00, 0x00, 0x02, // vers = 2
            0x00, 0x00, // (cut)
        ];
        assert_eq!(peek(&buf), Some((0x1234_5678, 2)));
        assert_eq!(peek(&buf[..7]), None);
        assert_eq!(peek(&[]), None);
    }

    /// RFC 8166 §4.1/§4.3: four fixed words, then each list's discriminators; a Write chunk of
    /// one segment is a present-discriminator, a segment count and a 16-octet segment. Version
    /// Two adds `rdma_direction` and `rdma_inv_handle` after the fixed words.
    #[test]
    fn accepts_inline_msg_header_len_by_hand() {
        assert_eq!(inline_msg_header_len(v1::VERSION, 0), 16 + 12);
        assert_eq!(inline_msg_header_len(v2::VERSION, 0), 16 + 8 + 12);
        assert_eq!(inline_msg_header_len(v1::VERSION, 2), 16 + 12 + 2 * 24);
        assert_eq!(inline_msg_header_len(v2::VERSION, 1), 16 + 8 + 12 + 24);
    }
}
