//! Borrowed views over chunk lists that [`super::parse_chunk_lists`] has already validated:
//! [`ReadList`] / [`ReadChunk`], [`WriteList`] / [`WriteChunk`] (also the [`ReplyChunk`]),
//! [`ChunkLists`], and their iterators, plus the raw word accessors they read through.
//!
//! Normal operation: a view re-reads octets the parser checked, so iterating copies nothing,
//! allocates nothing and cannot fail. Recovery: there is nothing to recover from; the raw
//! accessors never panic (an index out of range, impossible after validation, reads as zero).

use super::{ReadSegment, Segment, READ_ENTRY_LEN, READ_ENTRY_TARGET, SEGMENT_LEN};

// ---------------------------------------------------------------------------------------------
// Raw accessors over validated octets. They never panic: an index out of range (impossible after
// validation) reads as zero.

#[inline]
fn word(b: &[u8], at: usize) -> u32 {
    match at.checked_add(4).and_then(|end| b.get(at..end)) {
        Some(&[w0, w1, w2, w3]) => u32::from_be_bytes([w0, w1, w2, w3]),
        _ => 0,
    }
}

#[inline]
fn segment_at(b: &[u8], at: usize) -> Segment {
    Segment {
        handle: word(b, at),
        length: word(b, at.saturating_add(4)),
        offset: (u64::from(word(b, at.saturating_add(8))) << 32)
            | u64::from(word(b, at.saturating_add(12))),
    }
}

#[inline]
pub(super) fn sub(b: &[u8], from: usize, to: usize) -> &[u8] {
    b.get(from..to).unwrap_or(&[])
}

// ---------------------------------------------------------------------------------------------
// Views.

/// Iterator over segments packed at a fixed stride (Write/Reply chunk arrays, or the targets of
/// Read list entries).
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    bytes: &'a [u8],
    stride: usize,
    skip: usize,
    next: u32,
    count: u32,
}

impl<'a> Segments<'a> {
    const fn empty() -> Self {
        Self {
            bytes: &[],
            stride: SEGMENT_LEN,
            skip: 0,
            next: 0,
            count: 0,
        }
    }
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        if self.next >= self.count {
            return None;
        }
        let at = (self.next as usize)
            .saturating_mul(self.stride)
            .saturating_add(self.skip);
        self.next += 1;
        Some(segment_at(self.bytes, at))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments<'_> {}

/// The Read list of a decoded header: read segments in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadList<'a> {
    /// Entries only (discriminant + read segment each), without the terminating discriminant.
    pub(super) entries: &'a [u8],
    pub(super) count: u32,
}

impl<'a> ReadList<'a> {
    /// Number of read segments (all chunks together).
    #[inline]
    pub const fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the list is empty.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    #[inline]
    fn position(&self, i: u32) -> u32 {
        word(
            self.entries,
            (i as usize).saturating_mul(READ_ENTRY_LEN) + 4,
        )
    }

    /// The `i`-th read segment.
    pub fn get(&self, i: usize) -> Option<ReadSegment> {
        if i >= self.len() {
            return None;
        }
        let at = i * READ_ENTRY_LEN;
        Some(ReadSegment {
            position: word(self.entries, at + 4),
            target: segment_at(self.entries, at + READ_ENTRY_TARGET),
        })
    }

    /// Iterates the read segments in wire order.
    #[inline]
    pub fn iter(&self) -> ReadSegments<'a> {
        ReadSegments {
            list: *self,
            next: 0,
        }
    }

    /// True when the list holds a Position Zero Read chunk (the whole RPC message, or in an
    /// RDMA_NOMSG call its XDR stream minus the other chunks).
    #[inline]
    pub fn has_position_zero(&self) -> bool {
        // Positions never decrease (checked), so Position Zero segments come first.
        self.count > 0 && self.position(0) == 0
    }

    /// The Position Zero Read chunk, if any.
    pub fn position_zero(&self) -> Option<ReadChunk<'a>> {
        self.chunks().next().filter(|c| c.position == 0)
    }

    /// Number of Read chunks, i.e. distinct positions (what an Upper Layer Binding limits;
    /// implementation-experience §3.2).
    pub fn chunk_count(&self) -> usize {
        self.chunks().count()
    }

    /// Iterates the Read chunks (runs of read segments that share a position).
    #[inline]
    pub fn chunks(&self) -> ReadChunks<'a> {
        ReadChunks {
            list: *self,
            next: 0,
        }
    }
}

impl<'a> IntoIterator for ReadList<'a> {
    type Item = ReadSegment;
    type IntoIter = ReadSegments<'a>;
    fn into_iter(self) -> ReadSegments<'a> {
        self.iter()
    }
}

/// Iterator over the read segments of a [`ReadList`].
#[derive(Debug, Clone)]
pub struct ReadSegments<'a> {
    list: ReadList<'a>,
    next: u32,
}

impl Iterator for ReadSegments<'_> {
    type Item = ReadSegment;

    #[inline]
    fn next(&mut self) -> Option<ReadSegment> {
        let s = self.list.get(self.next as usize)?;
        self.next += 1;
        Some(s)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.list.count - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for ReadSegments<'_> {}

/// One Read chunk: the read segments at one XDR position, in list order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadChunk<'a> {
    /// XDR position of the chunk.
    pub position: u32,
    entries: &'a [u8],
    count: u32,
}

impl<'a> ReadChunk<'a> {
    /// Number of segments in the chunk (at least one).
    #[inline]
    pub const fn len(&self) -> usize {
        self.count as usize
    }

    /// Always false: a Read chunk has at least one segment. Present for API symmetry.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The chunk's segments, in the order their data is concatenated.
    #[inline]
    pub fn segments(&self) -> Segments<'a> {
        Segments {
            bytes: self.entries,
            stride: READ_ENTRY_LEN,
            skip: READ_ENTRY_TARGET,
            next: 0,
            count: self.count,
        }
    }

    /// Sum of the segment lengths (checked to fit 32 bits when decoded).
    pub fn length(&self) -> u32 {
        self.segments()
            .fold(0u32, |acc, s| acc.saturating_add(s.length))
    }
}

/// Iterator over the Read chunks of a [`ReadList`].
#[derive(Debug, Clone)]
pub struct ReadChunks<'a> {
    list: ReadList<'a>,
    next: u32,
}

impl<'a> Iterator for ReadChunks<'a> {
    type Item = ReadChunk<'a>;

    fn next(&mut self) -> Option<ReadChunk<'a>> {
        let first = self.next;
        if first >= self.list.count {
            return None;
        }
        let position = self.list.position(first);
        let mut end = first + 1;
        while end < self.list.count && self.list.position(end) == position {
            end += 1;
        }
        self.next = end;
        Some(ReadChunk {
            position,
            entries: sub(
                self.list.entries,
                first as usize * READ_ENTRY_LEN,
                end as usize * READ_ENTRY_LEN,
            ),
            count: end - first,
        })
    }
}

/// One Write chunk (or the Reply chunk): a counted array of segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteChunk<'a> {
    /// The packed segments, without the count word.
    pub(super) segs: &'a [u8],
    pub(super) count: u32,
}

/// The Reply chunk has the same shape as a Write chunk (`rpcrdma1_write_chunk`).
pub type ReplyChunk<'a> = WriteChunk<'a>;

impl<'a> WriteChunk<'a> {
    /// Number of segments (may be zero: responders return empty arrays for unused chunks).
    #[inline]
    pub const fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the chunk has no segments.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `i`-th segment.
    pub fn get(&self, i: usize) -> Option<Segment> {
        if i >= self.len() {
            return None;
        }
        Some(segment_at(self.segs, i * SEGMENT_LEN))
    }

    /// The segments in order.
    #[inline]
    pub fn segments(&self) -> Segments<'a> {
        Segments {
            bytes: self.segs,
            stride: SEGMENT_LEN,
            skip: 0,
            next: 0,
            count: self.count,
        }
    }

    /// Sum of the segment lengths (checked to fit 32 bits when decoded).
    pub fn total_length(&self) -> u32 {
        self.segments()
            .fold(0u32, |acc, s| acc.saturating_add(s.length))
    }
}

impl<'a> IntoIterator for WriteChunk<'a> {
    type Item = Segment;
    type IntoIter = Segments<'a>;
    fn into_iter(self) -> Segments<'a> {
        self.segments()
    }
}

/// The Write list of a decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteList<'a> {
    /// Entries (discriminant, count, segments) without the terminating discriminant.
    pub(super) entries: &'a [u8],
    pub(super) count: u32,
}

impl<'a> WriteList<'a> {
    /// Number of Write chunks.
    #[inline]
    pub const fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the list is empty.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Iterates the Write chunks in order.
    #[inline]
    pub fn iter(&self) -> WriteChunks<'a> {
        WriteChunks {
            rest: self.entries,
            remaining: self.count,
        }
    }

    /// The `i`-th Write chunk.
    pub fn get(&self, i: usize) -> Option<WriteChunk<'a>> {
        self.iter().nth(i)
    }
}

impl<'a> IntoIterator for WriteList<'a> {
    type Item = WriteChunk<'a>;
    type IntoIter = WriteChunks<'a>;
    fn into_iter(self) -> WriteChunks<'a> {
        self.iter()
    }
}

/// Iterator over the chunks of a [`WriteList`].
#[derive(Debug, Clone)]
pub struct WriteChunks<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Iterator for WriteChunks<'a> {
    type Item = WriteChunk<'a>;

    fn next(&mut self) -> Option<WriteChunk<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // Layout: discriminant (1), count, segments.
        let count = word(self.rest, 4);
        let end = (count as usize)
            .saturating_mul(SEGMENT_LEN)
            .saturating_add(8);
        let chunk = WriteChunk {
            segs: sub(self.rest, 8, end),
            count,
        };
        self.rest = self.rest.get(end..).unwrap_or(&[]);
        Some(chunk)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for WriteChunks<'_> {}

/// The three chunk lists of a decoded header, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLists<'a> {
    /// The Read list.
    pub reads: ReadList<'a>,
    /// The Write list.
    pub writes: WriteList<'a>,
    /// The Reply chunk, when present.
    pub reply: Option<ReplyChunk<'a>>,
    pub(super) raw: &'a [u8],
}

impl<'a> ChunkLists<'a> {
    /// The encoded chunk lists exactly as received.
    #[inline]
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// True when all three lists are empty/absent.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// Every segment of the three lists in wire order (read targets, Write chunk segments, Reply
    /// chunk segments).
    pub fn segments(&self) -> impl Iterator<Item = Segment> + 'a {
        let reply = match self.reply {
            Some(c) => c.segments(),
            None => Segments::empty(),
        };
        self.reads
            .iter()
            .map(|r| r.target)
            .chain(self.writes.iter().flat_map(|c| c.segments()))
            .chain(reply)
    }

    /// Number of distinct handles among all segments. O(n²) over at most the limits' worth of
    /// segments; no allocation.
    pub fn distinct_handles(&self) -> usize {
        self.segments()
            .enumerate()
            .filter(|&(i, s)| !self.segments().take(i).any(|t| t.handle == s.handle))
            .count()
    }

    /// The handle when every segment carries the same one (exactly one distinct handle), else
    /// `None`. This is the condition under which a responder may use Send With Invalidate in
    /// Version One (the Linux server's rule).
    pub fn single_handle(&self) -> Option<u32> {
        let mut it = self.segments();
        let h = it.next()?.handle;
        if it.all(|s| s.handle == h) {
            Some(h)
        } else {
            None
        }
    }
}
