//! Chunk lists: the Read list, Write list and Reply chunk that RPC-over-RDMA Version One
//! (RFC 8166, XDR in Appendix A of the implementation-experience draft) and Version Two (the
//! seed draft) encode identically.
//!
//! Normal operation: [`parse_chunk_lists`] makes one pass over the XDR and checks every rule
//! before it hands out anything; the result, [`ChunkLists`], is a set of borrowed views
//! ([`ReadList`], [`WriteList`], [`ReplyChunk`]) that re-read the already validated octets, so
//! iterating them cannot fail, copies nothing and allocates nothing. Outgoing chunk lists are
//! described by [`ChunkListsRef`], plain slices the caller owns, with [`ChunkListsRef::encoded_len`]
//! available before encoding (the inline budget needs it).
//!
//! Recovery: every count is compared with [`ChunkLimits`] on the count word (or, for the Read
//! list, which has no count, on the discriminant that announces one more entry) before anything
//! is sized from it. Each violated rule is its own [`ChunkError`] variant with the offset of the
//! offending word; the version codecs turn them into the answer their spec requires
//! (ERR_CHUNK in Version One, RDMA2_ERR_BAD_XDR in Version Two).
//!
//! Rules checked (beyond XDR well-formedness: truncation, optional-data discriminants that are
//! not 0 or 1):
//! - Read positions are multiples of four (XDR alignment; implementation-experience §3.7.1).
//! - Read segments of one Read chunk are adjacent and Read chunks appear in XDR-stream order
//!   (positions never decrease), and two Read chunks at non-zero positions never overlap in the
//!   XDR stream (a later chunk starts at or after the end of the earlier one). The Position Zero
//!   chunk is exempt from the overlap rule: it carries the RPC message the other chunks are
//!   inserted into. This is this implementation's strict reading: neither RFC 8166 nor the drafts
//!   define how to reassemble an out-of-order or overlapping list, and every known sender emits
//!   ordered lists.
//! - `offset + length` of every segment fits in 64 bits.
//! - The sum of segment lengths of each chunk fits in 32 bits (XDR object lengths are 32-bit).
//!
//! This file holds the shared types, the rule checks, the parser and the encoder; the borrowed
//! views the parser returns are in `chunks/views.rs` (re-exported here).

use crate::xdr::{XdrError, XdrReader, XdrWriter};

mod views;

use views::sub;
pub use views::{
    ChunkLists, ReadChunk, ReadChunks, ReadList, ReadSegments, ReplyChunk, Segments, WriteChunk,
    WriteChunks, WriteList,
};

/// Octets of one encoded [`Segment`] (handle, length, 64-bit offset).
pub const SEGMENT_LEN: usize = 16;
/// Octets of one encoded [`ReadSegment`] (position + segment).
pub const READ_SEGMENT_LEN: usize = 20;
/// Octets of one Read list entry on the wire: optional-data discriminant + read segment.
const READ_ENTRY_LEN: usize = 4 + READ_SEGMENT_LEN;
/// Offset of the segment inside a Read list entry (after discriminant and position).
const READ_ENTRY_TARGET: usize = 8;

/// An RDMA segment (`rpcrdma1_segment` / `rpcrdma2_segment`): the coordinates of one contiguous
/// registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Segment {
    /// The handle (R_key / STag) of the registered region.
    pub handle: u32,
    /// Length of the region in octets.
    pub length: u32,
    /// Offset (virtual address) of the region.
    pub offset: u64,
}

impl Segment {
    /// A segment with the given handle, length and offset.
    #[inline]
    pub const fn new(handle: u32, length: u32, offset: u64) -> Self {
        Self {
            handle,
            length,
            offset,
        }
    }

    /// `offset + length`, or `None` when it overflows 64 bits (such a segment is rejected by
    /// the decoder).
    #[inline]
    pub const fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.length as u64)
    }
}

/// A read segment (`rpcrdma1_read_segment`): a segment plus the XDR position at which its data
/// is inserted into the RPC message. Read segments with the same position form one Read chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadSegment {
    /// XDR position, relative to the first octet of the RPC message (its XID).
    pub position: u32,
    /// Where the data lives on the sender.
    pub target: Segment,
}

impl ReadSegment {
    /// A read segment at `position`.
    #[inline]
    pub const fn new(position: u32, target: Segment) -> Self {
        Self { position, target }
    }
}

/// Bounds applied to incoming chunk lists. Each count is checked before it sizes anything.
///
/// The defaults follow what the Linux implementation sends and accepts: its client never puts
/// more than 16 segments in one transport header (`RPCRDMA_MAX_HDR_SEGS`), and its server
/// bounds segment counts by what fits in one receive buffer. A few Write chunks are allowed for
/// NFSv4 COMPOUNDs carrying several READs. The receive buffer size bounds everything anyway
/// (a 4096-octet buffer holds at most 170 read segments); these limits bound the work done per
/// header and the resources a single call can make the responder commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimits {
    /// Most read segments in the Read list (all Read chunks together). Default 16.
    pub max_read_segments: u32,
    /// Most Write chunks in the Write list. Default 4.
    pub max_write_chunks: u32,
    /// Most segments in one Write chunk. Default 16.
    pub max_write_segments: u32,
    /// Most segments in the Reply chunk. Default 16.
    pub max_reply_segments: u32,
}

impl ChunkLimits {
    /// The default limits (see the type documentation).
    pub const DEFAULT: Self = Self {
        max_read_segments: 16,
        max_write_chunks: 4,
        max_write_segments: 16,
        max_reply_segments: 16,
    };
}

impl Default for ChunkLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a chunk list was rejected. Offsets are from the start of the buffer being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// The input ended inside the chunk lists.
    Truncated {
        /// Offset of the item that did not fit.
        at: usize,
        /// Octets that item needed.
        needed: usize,
    },
    /// An optional-data discriminant that is neither 0 nor 1.
    BadDiscriminant {
        /// Offset of the discriminant.
        at: usize,
        /// The value found.
        value: u32,
    },
    /// The Read list announces more read segments than allowed.
    TooManyReadSegments {
        /// Offset of the discriminant announcing the extra segment.
        at: usize,
        /// The limit.
        max: u32,
    },
    /// The Write list announces more Write chunks than allowed.
    TooManyWriteChunks {
        /// Offset of the discriminant announcing the extra chunk.
        at: usize,
        /// The limit.
        max: u32,
    },
    /// A Write chunk's segment count is above the limit.
    TooManyWriteSegments {
        /// Offset of the count word.
        at: usize,
        /// The count on the wire.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// The Reply chunk's segment count is above the limit.
    TooManyReplySegments {
        /// Offset of the count word.
        at: usize,
        /// The count on the wire.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// A read position that is not a multiple of four.
    MisalignedPosition {
        /// Offset of the position word.
        at: usize,
        /// The position found.
        position: u32,
    },
    /// A read position lower than the one before it (Read chunks out of order, or the segments
    /// of one chunk not adjacent).
    PositionOutOfOrder {
        /// Offset of the position word.
        at: usize,
        /// The position found.
        position: u32,
        /// The position of the previous read segment.
        previous: u32,
    },
    /// A Read chunk that starts inside the previous (non-zero position) Read chunk.
    ReadChunkOverlap {
        /// Offset of the position word.
        at: usize,
        /// The position found.
        position: u32,
        /// End (position + length) of the previous Read chunk.
        previous_end: u64,
    },
    /// A segment whose `offset + length` overflows 64 bits.
    SegmentOverflow {
        /// Offset of the segment.
        at: usize,
    },
    /// The segment lengths of one chunk add up to more than 32 bits can hold.
    ChunkLengthOverflow {
        /// Offset of the segment whose length overflowed the sum.
        at: usize,
    },
}

impl ChunkError {
    /// Offset of the offending item.
    pub const fn at(&self) -> usize {
        match *self {
            ChunkError::Truncated { at, .. }
            | ChunkError::BadDiscriminant { at, .. }
            | ChunkError::TooManyReadSegments { at, .. }
            | ChunkError::TooManyWriteChunks { at, .. }
            | ChunkError::TooManyWriteSegments { at, .. }
            | ChunkError::TooManyReplySegments { at, .. }
            | ChunkError::MisalignedPosition { at, .. }
            | ChunkError::PositionOutOfOrder { at, .. }
            | ChunkError::ReadChunkOverlap { at, .. }
            | ChunkError::SegmentOverflow { at }
            | ChunkError::ChunkLengthOverflow { at } => at,
        }
    }

    /// True when the only problem is that the input ended early.
    pub const fn is_truncated(&self) -> bool {
        matches!(self, ChunkError::Truncated { .. })
    }
}

impl core::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ChunkError::Truncated { at, needed } => {
                write!(f, "chunk list truncated: {needed} octets needed at {at}")
            }
            ChunkError::BadDiscriminant { at, value } => {
                write!(f, "optional-data discriminant {value} at {at} is not 0 or 1")
            }
            ChunkError::TooManyReadSegments { at, max } => {
                write!(f, "more than {max} read segments (at {at})")
            }
            ChunkError::TooManyWriteChunks { at, max } => {
                write!(f, "more than {max} write chunks (at {at})")
            }
            ChunkError::TooManyWriteSegments { at, count, max } => {
                write!(f, "write chunk of {count} segments at {at}, limit {max}")
            }
            ChunkError::TooManyReplySegments { at, count, max } => {
                write!(f, "reply chunk of {count} segments at {at}, limit {max}")
            }
            ChunkError::MisalignedPosition { at, position } => {
                write!(f, "read position {position} at {at} is not a multiple of 4")
            }
            ChunkError::PositionOutOfOrder {
                at,
                position,
                previous,
            } => write!(
                f,
                "read position {position} at {at} follows position {previous}"
            ),
            ChunkError::ReadChunkOverlap {
                at,
                position,
                previous_end,
            } => write!(
                f,
                "read chunk at position {position} (at {at}) overlaps the previous chunk ending at {previous_end}"
            ),
            ChunkError::SegmentOverflow { at } => {
                write!(f, "segment at {at}: offset + length overflows 64 bits")
            }
            ChunkError::ChunkLengthOverflow { at } => {
                write!(f, "chunk length overflows 32 bits at segment {at}")
            }
        }
    }
}

impl std::error::Error for ChunkError {}

// ---------------------------------------------------------------------------------------------
// Rule checks shared by the parser and by `ChunkListsRef::validate`.

/// Incremental Read list ordering / overlap / length check.
#[derive(Debug, Default)]
struct ReadOrder {
    current: Option<u32>,
    current_len: u32,
    previous_end: u64,
}

impl ReadOrder {
    fn push(&mut self, at: usize, position: u32, seg: &Segment) -> Result<(), ChunkError> {
        if position % 4 != 0 {
            return Err(ChunkError::MisalignedPosition { at, position });
        }
        check_segment(at + 4, seg)?;
        match self.current {
            Some(p) if p == position => {
                self.current_len = self
                    .current_len
                    .checked_add(seg.length)
                    .ok_or(ChunkError::ChunkLengthOverflow { at: at + 4 })?;
            }
            Some(p) if position < p => {
                return Err(ChunkError::PositionOutOfOrder {
                    at,
                    position,
                    previous: p,
                });
            }
            Some(p) => {
                if p != 0 {
                    self.previous_end = u64::from(p) + u64::from(self.current_len);
                }
                if u64::from(position) < self.previous_end {
                    return Err(ChunkError::ReadChunkOverlap {
                        at,
                        position,
                        previous_end: self.previous_end,
                    });
                }
                self.current = Some(position);
                self.current_len = seg.length;
            }
            None => {
                self.current = Some(position);
                self.current_len = seg.length;
            }
        }
        Ok(())
    }
}

#[inline]
fn check_segment(at: usize, seg: &Segment) -> Result<(), ChunkError> {
    match seg.end() {
        Some(_) => Ok(()),
        None => Err(ChunkError::SegmentOverflow { at }),
    }
}

/// Checks the segments of one Write/Reply chunk; `at` is the offset of the first segment.
fn check_array(at: usize, segs: impl Iterator<Item = Segment>) -> Result<(), ChunkError> {
    let mut total = 0u32;
    for (i, s) in segs.enumerate() {
        let sat = at + i * SEGMENT_LEN;
        check_segment(sat, &s)?;
        total = total
            .checked_add(s.length)
            .ok_or(ChunkError::ChunkLengthOverflow { at: sat })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Parser.

fn xdr_err(e: XdrError) -> ChunkError {
    match e {
        XdrError::Truncated { at, needed } => ChunkError::Truncated { at, needed },
        XdrError::BadBool { at, value } => ChunkError::BadDiscriminant { at, value },
        // The parser never asks the reader for bounded counts or writes; map defensively.
        XdrError::TooLong { at, .. } => ChunkError::Truncated { at, needed: 4 },
        XdrError::NoSpace { needed, .. } => ChunkError::Truncated { at: 0, needed },
    }
}

fn get_segment(r: &mut XdrReader<'_>) -> Result<Segment, ChunkError> {
    let at = r.position();
    if r.remaining() < SEGMENT_LEN {
        return Err(ChunkError::Truncated {
            at,
            needed: SEGMENT_LEN,
        });
    }
    let handle = r.get_u32().map_err(xdr_err)?;
    let length = r.get_u32().map_err(xdr_err)?;
    let offset = r.get_u64().map_err(xdr_err)?;
    Ok(Segment {
        handle,
        length,
        offset,
    })
}

/// Parses a counted segment array after its count has been checked against `max`.
fn parse_array<'a>(
    r: &mut XdrReader<'a>,
    max: u32,
    reply: bool,
) -> Result<WriteChunk<'a>, ChunkError> {
    let at = r.position();
    let count = r.get_u32().map_err(xdr_err)?;
    if count > max {
        return Err(if reply {
            ChunkError::TooManyReplySegments { at, count, max }
        } else {
            ChunkError::TooManyWriteSegments { at, count, max }
        });
    }
    let first = r.position();
    // `count <= max` (a u32), so this cannot overflow usize on 64-bit; saturate anyway.
    let bytes = (count as usize).saturating_mul(SEGMENT_LEN);
    let segs = r.take(bytes).map_err(xdr_err)?;
    let chunk = WriteChunk { segs, count };
    check_array(first, chunk.segments())?;
    Ok(chunk)
}

/// Octets of three empty chunk lists (three FALSE discriminants).
const EMPTY_LISTS_LEN: usize = 12;

/// Parses and validates `rpcrdma1_chunks` (the Read list, Write list and Reply chunk) at the
/// reader's position, leaving the reader just after them. Nothing is returned unless every rule
/// holds.
pub fn parse_chunk_lists<'a>(
    r: &mut XdrReader<'a>,
    limits: &ChunkLimits,
) -> Result<ChunkLists<'a>, ChunkError> {
    let buf = r.buffer();
    let start = r.position();

    // Three empty lists (every message without chunks, the common case): three FALSE
    // discriminants, read at once; the same result as the walk below.
    if r.rest().get(..EMPTY_LISTS_LEN) == Some(&[0u8; EMPTY_LISTS_LEN][..]) {
        r.skip(EMPTY_LISTS_LEN).map_err(xdr_err)?;
        return Ok(ChunkLists {
            reads: ReadList {
                entries: sub(buf, start, start),
                count: 0,
            },
            writes: WriteList {
                entries: sub(buf, start + 4, start + 4),
                count: 0,
            },
            reply: None,
            raw: sub(buf, start, start + EMPTY_LISTS_LEN),
        });
    }

    // Read list: optional-data linked list of read segments.
    let mut order = ReadOrder::default();
    let mut nreads = 0u32;
    loop {
        let at = r.position();
        if !r.get_optional().map_err(xdr_err)? {
            break;
        }
        if nreads >= limits.max_read_segments {
            return Err(ChunkError::TooManyReadSegments {
                at,
                max: limits.max_read_segments,
            });
        }
        let pat = r.position();
        if r.remaining() < READ_SEGMENT_LEN {
            return Err(ChunkError::Truncated {
                at: pat,
                needed: READ_SEGMENT_LEN,
            });
        }
        let position = r.get_u32().map_err(xdr_err)?;
        let seg = get_segment(r)?;
        order.push(pat, position, &seg)?;
        nreads += 1;
    }
    let reads = ReadList {
        entries: sub(buf, start, start + nreads as usize * READ_ENTRY_LEN),
        count: nreads,
    };

    // Write list: optional-data linked list of counted segment arrays.
    let wstart = r.position();
    let mut nwrites = 0u32;
    let mut wend = wstart;
    loop {
        let at = r.position();
        if !r.get_optional().map_err(xdr_err)? {
            break;
        }
        if nwrites >= limits.max_write_chunks {
            return Err(ChunkError::TooManyWriteChunks {
                at,
                max: limits.max_write_chunks,
            });
        }
        parse_array(r, limits.max_write_segments, false)?;
        nwrites += 1;
        wend = r.position();
    }
    let writes = WriteList {
        entries: sub(buf, wstart, wend),
        count: nwrites,
    };

    // Reply chunk: optional counted segment array.
    let reply = if r.get_optional().map_err(xdr_err)? {
        Some(parse_array(r, limits.max_reply_segments, true)?)
    } else {
        None
    };

    Ok(ChunkLists {
        reads,
        writes,
        reply,
        raw: sub(buf, start, r.position()),
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// Outgoing chunk lists as plain slices owned by the caller (fixed arrays, no allocation).
///
/// `reads` must list read segments in XDR-stream order (the segments of one chunk adjacent),
/// `writes` holds one slice per Write chunk. The encoder writes what it is given;
/// [`ChunkListsRef::validate`] checks the same rules the decoder enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkListsRef<'a> {
    /// The Read list.
    pub reads: &'a [ReadSegment],
    /// The Write list: one slice of segments per Write chunk.
    pub writes: &'a [&'a [Segment]],
    /// The Reply chunk.
    pub reply: Option<&'a [Segment]>,
}

impl<'a> ChunkListsRef<'a> {
    /// No chunks at all (an inline message).
    pub const EMPTY: ChunkListsRef<'static> = ChunkListsRef {
        reads: &[],
        writes: &[],
        reply: None,
    };

    /// Octets the lists take on the wire, computed without encoding (saturating).
    pub fn encoded_len(&self) -> usize {
        let reads = self.reads.len().saturating_mul(READ_ENTRY_LEN);
        let writes = self.writes.iter().fold(0usize, |acc, c| {
            acc.saturating_add(8usize.saturating_add(c.len().saturating_mul(SEGMENT_LEN)))
        });
        let reply = match self.reply {
            Some(c) => 8usize.saturating_add(c.len().saturating_mul(SEGMENT_LEN)),
            None => 4,
        };
        // Two list terminators (Read, Write) plus the Reply chunk.
        reads
            .saturating_add(4)
            .saturating_add(writes)
            .saturating_add(4)
            .saturating_add(reply)
    }

    /// Encodes the lists. Writes nothing unless all of them fit.
    pub fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        let need = self.encoded_len();
        if need > w.remaining() {
            return Err(XdrError::NoSpace {
                needed: w.position().saturating_add(need),
                capacity: w.position().saturating_add(w.remaining()),
            });
        }
        for rs in self.reads {
            w.put_bool(true)?;
            w.put_u32(rs.position)?;
            put_segment(w, &rs.target)?;
        }
        w.put_bool(false)?;
        for chunk in self.writes {
            w.put_bool(true)?;
            put_array(w, chunk)?;
        }
        w.put_bool(false)?;
        match self.reply {
            Some(c) => {
                w.put_bool(true)?;
                put_array(w, c)?;
            }
            None => w.put_bool(false)?,
        }
        Ok(())
    }

    /// Checks the rules the decoder enforces (limits, position alignment and order, overflow).
    /// Offsets in the error are relative to the start of the encoded lists.
    pub fn validate(&self, limits: &ChunkLimits) -> Result<(), ChunkError> {
        let mut at = 0usize;
        let mut order = ReadOrder::default();
        for (i, rs) in self.reads.iter().enumerate() {
            if i as u64 >= u64::from(limits.max_read_segments) {
                return Err(ChunkError::TooManyReadSegments {
                    at,
                    max: limits.max_read_segments,
                });
            }
            order.push(at + 4, rs.position, &rs.target)?;
            at += READ_ENTRY_LEN;
        }
        at += 4;
        for (i, chunk) in self.writes.iter().enumerate() {
            if i as u64 >= u64::from(limits.max_write_chunks) {
                return Err(ChunkError::TooManyWriteChunks {
                    at,
                    max: limits.max_write_chunks,
                });
            }
            let count = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            if count > limits.max_write_segments {
                return Err(ChunkError::TooManyWriteSegments {
                    at: at + 4,
                    count,
                    max: limits.max_write_segments,
                });
            }
            check_array(at + 8, chunk.iter().copied())?;
            at += 8 + chunk.len() * SEGMENT_LEN;
        }
        at += 4;
        if let Some(c) = self.reply {
            let count = u32::try_from(c.len()).unwrap_or(u32::MAX);
            if count > limits.max_reply_segments {
                return Err(ChunkError::TooManyReplySegments {
                    at: at + 4,
                    count,
                    max: limits.max_reply_segments,
                });
            }
            check_array(at + 8, c.iter().copied())?;
        }
        Ok(())
    }
}

fn put_segment(w: &mut XdrWriter<'_>, s: &Segment) -> Result<(), XdrError> {
    w.put_u32(s.handle)?;
    w.put_u32(s.length)?;
    w.put_u64(s.offset)
}

fn put_array(w: &mut XdrWriter<'_>, segs: &[Segment]) -> Result<(), XdrError> {
    let n = u32::try_from(segs.len()).map_err(|_| XdrError::NoSpace {
        needed: usize::MAX,
        capacity: w.position().saturating_add(w.remaining()),
    })?;
    w.put_u32(n)?;
    for s in segs {
        put_segment(w, s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<ChunkLists<'_>, ChunkError> {
        let mut r = XdrReader::new(buf);
        parse_chunk_lists(&mut r, &ChunkLimits::DEFAULT)
    }

    #[test]
    fn accepts_empty_lists() {
        let buf = [0u8; 12];
        let c = parse(&buf).unwrap();
        assert!(c.is_empty());
        assert_eq!(c.as_bytes().len(), 12);
        assert_eq!(c.distinct_handles(), 0);
        assert_eq!(c.single_handle(), None);
        assert_eq!(ChunkListsRef::EMPTY.encoded_len(), 12);
    }

    #[test]
    fn accepts_encoded_lists_and_counts_handles() {
        let reads = [
            ReadSegment::new(0, Segment::new(7, 100, 0x1000)),
            ReadSegment::new(0, Segment::new(7, 28, 0x2000)),
            ReadSegment::new(128, Segment::new(9, 5, 0x3000)),
            ReadSegment::new(136, Segment::new(9, 1, 0x4000)),
        ];
        let w0 = [Segment::new(9, 4096, 0), Segment::new(11, 4096, 4096)];
        let writes: [&[Segment]; 1] = [&w0];
        let reply = [Segment::new(7, 1024, 8)];
        let lists = ChunkListsRef {
            reads: &reads,
            writes: &writes,
            reply: Some(&reply),
        };
        lists.validate(&ChunkLimits::DEFAULT).unwrap();
        let mut buf = [0u8; 256];
        let mut w = XdrWriter::new(&mut buf);
        lists.encode(&mut w).unwrap();
        let n = w.finish();
        assert_eq!(n, lists.encoded_len());
        let c = parse(&buf[..n]).unwrap();
        assert_eq!(c.reads.chunk_count(), 3);
        assert_eq!(c.reads.position_zero().unwrap().length(), 128);
        assert_eq!(c.writes.get(0).unwrap().total_length(), 8192);
        assert_eq!(c.distinct_handles(), 3);
        assert_eq!(c.single_handle(), None);
        assert_eq!(c.segments().count(), 7);
    }

    #[test]
    fn rejects_overlapping_read_chunks() {
        let reads = [
            ReadSegment::new(16, Segment::new(1, 8, 0)),
            ReadSegment::new(20, Segment::new(1, 8, 0)),
        ];
        let lists = ChunkListsRef {
            reads: &reads,
            ..ChunkListsRef::EMPTY
        };
        assert!(matches!(
            lists.validate(&ChunkLimits::DEFAULT),
            Err(ChunkError::ReadChunkOverlap { position: 20, .. })
        ));
    }

    #[test]
    fn rejects_encode_without_space() {
        let mut buf = [0u8; 11];
        let mut w = XdrWriter::new(&mut buf);
        assert!(ChunkListsRef::EMPTY.encode(&mut w).is_err());
        assert_eq!(w.position(), 0);
    }
}
