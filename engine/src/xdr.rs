//! XDR (RFC 4506) primitives: a borrowing reader over `&[u8]` and an encoder into a caller-owned
//! `&mut [u8]`.
//!
//! Normal operation: every item is a multiple of four octets, big-endian. The reader never copies
//! and never allocates; variable-length items come back as sub-slices of the input. The writer
//! never grows its buffer: a write that does not fit returns [`XdrError::NoSpace`] and leaves the
//! position where it was, so the caller can pick a bigger slot (or a long message) and retry.
//!
//! The encoding rules live once, in the [`XdrSink`] trait over one primitive (`reserve`);
//! [`XdrWriter`] and the poller's `CallArgs` / `ReplyBuilder` implement that primitive.
//!
//! Recovery: every read is bounds-checked; a short buffer gives [`XdrError::Truncated`], a length
//! above the caller's bound gives [`XdrError::TooLong`] *before* anything is sized from it.

/// Rounds `n` up to the next multiple of four (the XDR unit). Saturates instead of overflowing.
#[inline]
pub const fn roundup4(n: usize) -> usize {
    match n.checked_add(3) {
        Some(v) => v & !3,
        None => usize::MAX & !3,
    }
}

/// Number of XDR pad octets that follow an item of `n` octets.
#[inline]
pub const fn pad4(n: usize) -> usize {
    (4 - (n & 3)) & 3
}

/// Errors of the XDR layer. Small and `Copy`, so they can be returned from hot paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdrError {
    /// The input ended before the item did.
    Truncated {
        /// Offset at which the item started.
        at: usize,
        /// Octets the item needed from `at`.
        needed: usize,
    },
    /// A boolean (or optional-data discriminant) that is neither 0 nor 1.
    BadBool {
        /// Offset of the offending word.
        at: usize,
        /// The value found.
        value: u32,
    },
    /// A length or count above the bound the caller allows.
    TooLong {
        /// Offset of the length word.
        at: usize,
        /// The value found on the wire.
        len: u32,
        /// The largest value accepted.
        max: u32,
    },
    /// The output buffer cannot hold the item.
    NoSpace {
        /// Octets the encoder needed in total (position + item).
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl core::fmt::Display for XdrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            XdrError::Truncated { at, needed } => {
                write!(
                    f,
                    "XDR input truncated: {needed} octets needed at offset {at}"
                )
            }
            XdrError::BadBool { at, value } => {
                write!(f, "XDR boolean at offset {at} is {value}, not 0 or 1")
            }
            XdrError::TooLong { at, len, max } => {
                write!(f, "XDR length {len} at offset {at} exceeds the limit {max}")
            }
            XdrError::NoSpace { needed, capacity } => {
                write!(
                    f,
                    "XDR output needs {needed} octets, buffer holds {capacity}"
                )
            }
        }
    }
}

impl std::error::Error for XdrError {}

/// A borrowing XDR decoder. Cheap to copy, so a caller can look ahead on a copy.
#[derive(Debug, Clone, Copy)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    /// A reader positioned at the start of `buf`.
    #[inline]
    pub const fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Offset of the next octet to be read.
    #[inline]
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Octets left to read.
    #[inline]
    pub const fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unread rest of the input.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The whole input the reader was built on.
    #[inline]
    pub const fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    /// Takes `n` raw octets (no padding rules applied).
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        if n > self.remaining() {
            return Err(XdrError::Truncated {
                at: self.pos,
                needed: n,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Skips `n` raw octets.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), XdrError> {
        self.take(n).map(|_| ())
    }

    /// Reads an unsigned 32-bit integer.
    #[inline]
    pub fn get_u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads an unsigned 64-bit integer (XDR unsigned hyper).
    #[inline]
    pub fn get_u64(&mut self) -> Result<u64, XdrError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Reads a boolean; any value other than 0 or 1 is rejected.
    #[inline]
    pub fn get_bool(&mut self) -> Result<bool, XdrError> {
        let at = self.pos;
        match self.get_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            value => {
                self.pos = at;
                Err(XdrError::BadBool { at, value })
            }
        }
    }

    /// Reads the discriminant of XDR optional-data (`*T`): `true` when an item follows. XDR lists
    /// (`struct list { T entry; list *next; }`) are read as a sequence of these.
    #[inline]
    pub fn get_optional(&mut self) -> Result<bool, XdrError> {
        self.get_bool()
    }

    /// Reads a counted-array length, rejecting values above `max` before anything is sized.
    #[inline]
    pub fn get_count(&mut self, max: u32) -> Result<u32, XdrError> {
        let at = self.pos;
        let len = self.get_u32()?;
        if len > max {
            self.pos = at;
            return Err(XdrError::TooLong { at, len, max });
        }
        Ok(len)
    }

    /// Reads fixed-length opaque data of `n` octets and its pad.
    #[inline]
    pub fn get_fixed_opaque(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let at = self.pos;
        let total = roundup4(n);
        if total > self.remaining() || total < n {
            return Err(XdrError::Truncated { at, needed: total });
        }
        let s = &self.buf[at..at + n];
        self.pos += total;
        Ok(s)
    }

    /// Reads variable-length opaque data (`opaque<max>`): length word, data, pad.
    #[inline]
    pub fn get_opaque(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        let at = self.pos;
        let len = self.get_count(max)?;
        match self.get_fixed_opaque(len as usize) {
            Ok(s) => Ok(s),
            Err(e) => {
                self.pos = at;
                Err(e)
            }
        }
    }
}

/// An XDR encoder writing into a caller-owned buffer. It never allocates.
#[derive(Debug)]
pub struct XdrWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> XdrWriter<'a> {
    /// A writer positioned at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Octets written so far.
    #[inline]
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Octets still free.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Ends encoding and returns the number of octets written.
    #[inline]
    pub fn finish(self) -> usize {
        self.pos
    }

    /// Writes raw octets (no padding).
    #[inline]
    pub fn put_raw(&mut self, b: &[u8]) -> Result<(), XdrError> {
        XdrSink::put_raw(self, b)
    }

    /// Writes an unsigned 32-bit integer.
    #[inline]
    pub fn put_u32(&mut self, v: u32) -> Result<(), XdrError> {
        XdrSink::put_u32(self, v)
    }

    /// Writes an unsigned 64-bit integer.
    #[inline]
    pub fn put_u64(&mut self, v: u64) -> Result<(), XdrError> {
        XdrSink::put_u64(self, v)
    }

    /// Writes a boolean (also the optional-data discriminant).
    #[inline]
    pub fn put_bool(&mut self, v: bool) -> Result<(), XdrError> {
        XdrSink::put_bool(self, v)
    }

    /// Writes fixed-length opaque data followed by zero pad octets.
    #[inline]
    pub fn put_fixed_opaque(&mut self, b: &[u8]) -> Result<(), XdrError> {
        XdrSink::put_fixed_opaque(self, b)
    }

    /// Writes variable-length opaque data: length word, data, zero pad.
    #[inline]
    pub fn put_opaque(&mut self, b: &[u8]) -> Result<(), XdrError> {
        XdrSink::put_opaque(self, b)
    }
}

impl XdrSink for XdrWriter<'_> {
    #[inline]
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], XdrError> {
        if n > self.remaining() {
            return Err(XdrError::NoSpace {
                needed: self.pos.saturating_add(n),
                capacity: self.buf.len(),
            });
        }
        let s = &mut self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

/// The XDR encoding rules, written once over one primitive: every encoder of the workspace
/// ([`XdrWriter`], the poller's call-argument and reply builders, through them the NFS codecs)
/// implements [`XdrSink::reserve`] and gets the `put_*` methods from here.
pub trait XdrSink {
    /// Hands out the next `n` octets of the output and counts them as written; the caller
    /// fills all of them. When they do not fit: an error, and nothing is counted.
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], XdrError>;

    /// Writes raw octets (no padding).
    #[inline]
    fn put_raw(&mut self, b: &[u8]) -> Result<(), XdrError> {
        self.reserve(b.len())?.copy_from_slice(b);
        Ok(())
    }

    /// Writes an unsigned 32-bit integer.
    #[inline]
    fn put_u32(&mut self, v: u32) -> Result<(), XdrError> {
        self.put_raw(&v.to_be_bytes())
    }

    /// Writes an unsigned 64-bit integer (XDR unsigned hyper).
    #[inline]
    fn put_u64(&mut self, v: u64) -> Result<(), XdrError> {
        self.put_raw(&v.to_be_bytes())
    }

    /// Writes a boolean (also the optional-data discriminant).
    #[inline]
    fn put_bool(&mut self, v: bool) -> Result<(), XdrError> {
        self.put_u32(v as u32)
    }

    /// Writes fixed-length opaque data followed by zero pad octets.
    #[inline]
    fn put_fixed_opaque(&mut self, b: &[u8]) -> Result<(), XdrError> {
        let out = self.reserve(roundup4(b.len()))?;
        let (data, pad) = out.split_at_mut(b.len());
        data.copy_from_slice(b);
        pad.fill(0);
        Ok(())
    }

    /// Writes variable-length opaque data: length word, data, zero pad — all of it or, when
    /// it does not fit (or its length exceeds an XDR length word), nothing.
    #[inline]
    fn put_opaque(&mut self, b: &[u8]) -> Result<(), XdrError> {
        let Ok(len) = u32::try_from(b.len()) else {
            // No buffer holds this: the sink reports NoSpace { needed: usize::MAX, .. }.
            return self.reserve(usize::MAX).map(|_| ());
        };
        let out = self.reserve(roundup4(b.len()).saturating_add(4))?;
        let (word, rest) = out.split_at_mut(4);
        word.copy_from_slice(&len.to_be_bytes());
        let (data, pad) = rest.split_at_mut(b.len());
        data.copy_from_slice(b);
        pad.fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_primitives_round_trip() {
        let mut buf = [0u8; 64];
        let mut w = XdrWriter::new(&mut buf);
        w.put_u32(0xdead_beef).unwrap();
        w.put_u64(0x0102_0304_0506_0708).unwrap();
        w.put_bool(true).unwrap();
        w.put_opaque(b"abcde").unwrap();
        w.put_fixed_opaque(b"xy").unwrap();
        let n = w.finish();
        assert_eq!(n, 4 + 8 + 4 + 4 + 8 + 4);
        assert_eq!(
            &buf[16..28],
            &[0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]
        );
        let mut r = XdrReader::new(&buf[..n]);
        assert_eq!(r.get_u32().unwrap(), 0xdead_beef);
        assert_eq!(r.get_u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(r.get_bool().unwrap());
        assert_eq!(r.get_opaque(16).unwrap(), b"abcde");
        assert_eq!(r.get_fixed_opaque(2).unwrap(), b"xy");
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn rejects_truncated_and_bad_values() {
        let mut r = XdrReader::new(&[0, 0, 0]);
        assert_eq!(r.get_u32(), Err(XdrError::Truncated { at: 0, needed: 4 }));
        let mut r = XdrReader::new(&[0, 0, 0, 2]);
        assert_eq!(r.get_bool(), Err(XdrError::BadBool { at: 0, value: 2 }));
        assert_eq!(r.position(), 0);
        let mut r = XdrReader::new(&[0, 0, 0, 9, 1, 2, 3, 4]);
        assert_eq!(
            r.get_opaque(8),
            Err(XdrError::TooLong {
                at: 0,
                len: 9,
                max: 8
            })
        );
        let mut r = XdrReader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            r.get_opaque(u32::MAX),
            Err(XdrError::Truncated { .. })
        ));
    }

    #[test]
    fn rejects_write_past_capacity() {
        let mut buf = [0u8; 6];
        let mut w = XdrWriter::new(&mut buf);
        w.put_u32(1).unwrap();
        assert_eq!(
            w.put_u32(2),
            Err(XdrError::NoSpace {
                needed: 8,
                capacity: 6
            })
        );
        assert_eq!(w.position(), 4);
        assert!(w.put_opaque(b"a").is_err());
        assert_eq!(w.finish(), 4);
    }

    #[test]
    fn accepts_roundup_rules() {
        assert_eq!(roundup4(0), 0);
        assert_eq!(roundup4(1), 4);
        assert_eq!(roundup4(4), 4);
        assert_eq!(pad4(5), 3);
        assert_eq!(pad4(8), 0);
        assert_eq!(roundup4(usize::MAX), usize::MAX & !3);
    }
}
