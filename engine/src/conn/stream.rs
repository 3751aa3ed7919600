//! XDR stream geometry shared by both roles: cutting a message given as parts into gatherable
//! pieces (with items inserted inline and their XDR pad), and mapping between the "base" stream
//! (what travels inline or in the Position Zero Read chunk) and the reassembled stream that has
//! the Read chunks inserted at their positions.
//!
//! Normal operation: positions are XDR stream offsets relative to the first octet of the RPC
//! message. A chunk of length `L` occupies `roundup4(L)` octets of the reassembled stream, but its
//! pad is never transferred: Read chunks carry no pad and inline content after a chunk resumes on
//! the next 4-octet boundary (implementation-experience §3.7).
//!
//! Recovery: every geometry error (an item out of order, a position that does not fit the base
//! stream, a sum that overflows 32 bits) is reported to the caller, which turns it into
//! `ERR_CHUNK` (responder) or a rejected call (requester).

use super::{LocalBuf, MAX_PIECES, MAX_READ_SEGMENTS};
use crate::xdr::pad4;

/// One gatherable piece of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Piece {
    /// Where the octets are. For pad pieces: the connection's zero source.
    pub(crate) buf: LocalBuf,
    /// True for XDR pad (zeros): copied as zeros, gathered from the zero source.
    pub(crate) zero: bool,
}

/// A message as a list of pieces, fixed capacity.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub(crate) items: [Piece; MAX_PIECES],
    pub(crate) n: usize,
    pub(crate) total: u32,
}

impl Pieces {
    pub(crate) const EMPTY: Pieces = Pieces {
        items: [Piece {
            buf: LocalBuf::EMPTY,
            zero: false,
        }; MAX_PIECES],
        n: 0,
        total: 0,
    };

    #[inline]
    pub(crate) fn as_slice(&self) -> &[Piece] {
        &self.items[..self.n]
    }

    /// The pieces a Send gathers after its header: all of them when `gather`, else none (they
    /// were copied after the header, or go through a chunk).
    #[inline]
    pub(crate) fn gathered(&self, gather: bool) -> &[Piece] {
        if gather {
            self.as_slice()
        } else {
            &[]
        }
    }

    fn emit(&mut self, p: Piece) -> Result<(), GeometryError> {
        if p.buf.len == 0 {
            return Ok(());
        }
        self.total = self
            .total
            .checked_add(p.buf.len)
            .ok_or(GeometryError::Overflow)?;
        if let Some(last) = self.items[..self.n].last_mut() {
            if !last.zero
                && !p.zero
                && last.buf.lkey == p.buf.lkey
                && last.buf.addr.checked_add(u64::from(last.buf.len)) == Some(p.buf.addr)
            {
                if let Some(l) = last.buf.len.checked_add(p.buf.len) {
                    last.buf.len = l;
                    return Ok(());
                }
            }
        }
        if self.n == MAX_PIECES {
            return Err(GeometryError::TooManyPieces);
        }
        self.items[self.n] = p;
        self.n += 1;
        Ok(())
    }
}

/// Why a stream could not be laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GeometryError {
    /// More pieces than [`MAX_PIECES`].
    TooManyPieces,
    /// An item position is not a multiple of four, goes backwards or lies past the end.
    BadPosition,
    /// A length sum does not fit 32 bits.
    Overflow,
}

/// An item cut out of a stream: inserted at offset `at` of the parts' concatenation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut {
    pub(crate) at: u32,
    pub(crate) buf: LocalBuf,
}

/// Total length of `parts`, checked.
pub(crate) fn parts_len(parts: &[LocalBuf]) -> Option<u32> {
    parts.iter().try_fold(0u32, |acc, p| acc.checked_add(p.len))
}

/// Lays out `parts` (concatenated) with `inline` items inserted at their offsets, each followed
/// by its XDR pad (gathered from `zero_src`, at least three octets of zeros). Items must be in
/// offset order, on 4-octet boundaries, within the parts. (The engine builds in place with
/// [`build_pieces_into`]; the tests build aside.)
#[cfg(test)]
pub(crate) fn build_pieces(
    parts: &[LocalBuf],
    inline: impl Iterator<Item = Cut>,
    zero_src: LocalBuf,
) -> Result<Pieces, GeometryError> {
    let mut out = Pieces::EMPTY;
    build_pieces_into(&mut out, parts, inline, zero_src)?;
    Ok(out)
}

/// Lays out `parts` as `build_pieces` does, into `out` (reused scratch: only its count and total are reset, the items
/// past the count are stale and never read), so a hot path builds a message without copying
/// or clearing a whole [`Pieces`].
pub(crate) fn build_pieces_into(
    out: &mut Pieces,
    parts: &[LocalBuf],
    inline: impl Iterator<Item = Cut>,
    zero_src: LocalBuf,
) -> Result<(), GeometryError> {
    out.n = 0;
    out.total = 0;
    let total = parts_len(parts).ok_or(GeometryError::Overflow)?;
    let mut cur = PartCursor {
        parts,
        i: 0,
        off: 0,
        stream: 0,
    };
    let mut last_at = 0u32;
    for item in inline {
        if item.at % 4 != 0 || item.at < last_at || item.at > total {
            return Err(GeometryError::BadPosition);
        }
        last_at = item.at;
        cur.emit_until(item.at, out)?;
        out.emit(Piece {
            buf: item.buf,
            zero: false,
        })?;
        let pad = pad4(item.buf.len as usize) as u32;
        if pad != 0 {
            out.emit(Piece {
                buf: LocalBuf {
                    addr: zero_src.addr,
                    len: pad,
                    lkey: zero_src.lkey,
                },
                zero: true,
            })?;
        }
    }
    cur.emit_until(total, out)?;
    Ok(())
}

struct PartCursor<'a> {
    parts: &'a [LocalBuf],
    i: usize,
    off: u32,
    stream: u32,
}

impl PartCursor<'_> {
    fn emit_until(&mut self, target: u32, out: &mut Pieces) -> Result<(), GeometryError> {
        while self.stream < target {
            let Some(part) = self.parts.get(self.i) else {
                return Err(GeometryError::BadPosition);
            };
            let avail = part.len - self.off;
            if avail == 0 {
                self.i += 1;
                self.off = 0;
                continue;
            }
            let take = avail.min(target - self.stream);
            out.emit(Piece {
                buf: LocalBuf {
                    addr: part.addr + u64::from(self.off),
                    len: take,
                    lkey: part.lkey,
                },
                zero: false,
            })?;
            self.off += take;
            self.stream += take;
        }
        Ok(())
    }
}

/// Where the non-Position-Zero Read chunks go: for chunk `k`, the offset in the base stream
/// before which it is inserted and its length. Built in position order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Insertions {
    base_off: [u32; MAX_READ_SEGMENTS],
    len: [u32; MAX_READ_SEGMENTS],
    n: usize,
    /// Sum of `roundup4(len)` over all chunks.
    pub(crate) grow: u32,
}

impl Insertions {
    pub(crate) const EMPTY: Insertions = Insertions {
        base_off: [0; MAX_READ_SEGMENTS],
        len: [0; MAX_READ_SEGMENTS],
        n: 0,
        grow: 0,
    };

    /// Empties the list in place (the entries past the count are stale and never read).
    pub(crate) fn clear(&mut self) {
        self.n = 0;
        self.grow = 0;
    }

    /// Adds a chunk at stream `position` with `len` octets. Positions must not go backwards
    /// once the previous chunks (with their pad) are accounted for, and must land within the
    /// `base_len` octets of the base stream.
    pub(crate) fn push(
        &mut self,
        position: u32,
        len: u32,
        base_len: u32,
    ) -> Result<(), GeometryError> {
        if self.n == MAX_READ_SEGMENTS {
            return Err(GeometryError::TooManyPieces);
        }
        let base = position
            .checked_sub(self.grow)
            .ok_or(GeometryError::BadPosition)?;
        if base > base_len || (self.n > 0 && base < self.base_off[self.n - 1]) || base % 4 != 0 {
            return Err(GeometryError::BadPosition);
        }
        let padded = len
            .checked_add(pad4(len as usize) as u32)
            .ok_or(GeometryError::Overflow)?;
        self.grow = self
            .grow
            .checked_add(padded)
            .ok_or(GeometryError::Overflow)?;
        self.base_off[self.n] = base;
        self.len[self.n] = len;
        self.n += 1;
        Ok(())
    }

    /// Number of chunks.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Stream offset and length of chunk `k`.
    pub(crate) fn chunk(&self, k: usize) -> (u32, u32) {
        let shift: u32 = self.len[..k]
            .iter()
            .map(|&l| l + pad4(l as usize) as u32)
            .sum();
        (self.base_off[k] + shift, self.len[k])
    }

    /// For base offset `b`: the reassembled-stream offset it maps to and how many base octets
    /// from `b` map contiguously (`None`: up to the end).
    pub(crate) fn locate(&self, b: u32) -> (u32, Option<u32>) {
        let mut shift = 0u32;
        for k in 0..self.n {
            if self.base_off[k] <= b {
                shift += self.len[k] + pad4(self.len[k] as usize) as u32;
            } else {
                return (b + shift, Some(self.base_off[k] - b));
            }
        }
        (b + shift, None)
    }
}

/// Copies `pieces` into `header` after `at` octets (pads as zeros).
pub(crate) fn copy_pieces<M: super::HostMemory + ?Sized>(
    mem: &mut M,
    header: LocalBuf,
    at: u32,
    pieces: &Pieces,
) -> bool {
    if u64::from(at) + u64::from(pieces.total) > u64::from(header.len) {
        return false;
    }
    let mut off = u64::from(at);
    for p in pieces.as_slice() {
        let dst = header.addr + off;
        if p.zero {
            match mem.bytes_mut(dst, p.buf.len as usize) {
                Some(d) => d.fill(0),
                None => return false,
            }
        } else if !mem.copy(dst, p.buf.addr, p.buf.len as usize) {
            return false;
        }
        off += u64::from(p.buf.len);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(addr: u64, len: u32) -> LocalBuf {
        LocalBuf { addr, len, lkey: 7 }
    }

    #[test]
    fn accepts_inline_item_with_pad_and_merges_contiguous_parts() {
        let parts = [lb(100, 8), lb(108, 8)];
        let zero = lb(900, 4);
        let p = build_pieces(
            &parts,
            [Cut {
                at: 8,
                buf: lb(500, 5),
            }]
            .into_iter(),
            zero,
        )
        .unwrap();
        let s = p.as_slice();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].buf, lb(100, 8));
        assert_eq!(s[1].buf, lb(500, 5));
        assert!(s[2].zero);
        assert_eq!(s[2].buf.len, 3);
        assert_eq!(s[3].buf, lb(108, 8));
        assert_eq!(p.total, 24);
        let merged = build_pieces(&parts, core::iter::empty(), zero).unwrap();
        assert_eq!(
            merged.as_slice(),
            &[Piece {
                buf: lb(100, 16),
                zero: false
            }]
        );
    }

    #[test]
    fn rejects_misplaced_items() {
        let parts = [lb(100, 8)];
        let zero = lb(900, 4);
        let cut = |at| Cut {
            at,
            buf: lb(500, 4),
        };
        assert_eq!(
            build_pieces(&parts, [cut(2)].into_iter(), zero).unwrap_err(),
            GeometryError::BadPosition
        );
        assert_eq!(
            build_pieces(&parts, [cut(12)].into_iter(), zero).unwrap_err(),
            GeometryError::BadPosition
        );
        assert_eq!(
            build_pieces(&parts, [cut(8), cut(4)].into_iter(), zero).unwrap_err(),
            GeometryError::BadPosition
        );
    }

    #[test]
    fn accepts_insertion_mapping_with_pad() {
        let mut ins = Insertions::EMPTY;
        // 16 base octets; a 5-octet chunk at 8, then a 4-octet chunk right after it (8 + 8).
        ins.push(8, 5, 16).unwrap();
        ins.push(16, 4, 16).unwrap();
        assert_eq!(ins.grow, 12);
        assert_eq!(ins.chunk(0), (8, 5));
        assert_eq!(ins.chunk(1), (16, 4));
        assert_eq!(ins.locate(0), (0, Some(8)));
        assert_eq!(ins.locate(8), (20, None));
        assert_eq!(ins.locate(12), (24, None));
        // A third chunk whose position ignores the first chunk's pad is out of place.
        let mut bad = Insertions::EMPTY;
        bad.push(8, 5, 16).unwrap();
        assert_eq!(bad.push(12, 4, 16), Err(GeometryError::BadPosition));
        assert_eq!(
            Insertions::EMPTY.clone().push(20, 4, 16),
            Err(GeometryError::BadPosition)
        );
    }
}
