//! The byte-stream side of MPA (RFC 5044, FPDU format, no markers):
//! receive-side reassembly of FPDUs from whatever a TCP `read` returned, transmit-side
//! segmentation of one RDMAP message (RFC 5040) into DDP segments (RFC 5041) that each fit one
//! FPDU, and a transmit buffer that survives partial writes.
//!
//! Normal operation: [`RxStream`] owns one fixed buffer, sized once from the largest ULPDU this
//! side accepts. The caller reads from the socket into [`RxStream::spare`] and reports the count
//! with [`RxStream::filled`] (or copies bytes in with [`RxStream::feed`]); a read may end inside
//! a header, hold several FPDUs, or be one slice of a long FPDU. [`RxStream::next_ulpdu`] then
//! yields each complete FPDU's ULPDU in order, borrowed from the buffer, its CRC checked when the
//! connection negotiated CRCs. Before the MPA Request/Reply exchange has finished, the same buffer
//! holds the handshake octets ([`RxStream::unparsed`], [`RxStream::consume`]); what the handshake
//! leaves are the first FPDUs. On transmit, [`encode_message`] writes a Send, RDMA Write or Read
//! Response as segments whose ULPDUs are no longer than the peer's maximum ULPDU (message offset
//! or tagged offset advancing, L on the last segment only), each sealed into an FPDU, into a
//! caller's buffer; [`TxBuffer`] keeps what a non-blocking `write` has not taken yet. No
//! allocation happens per frame: both buffers are allocated when the stream is made.
//!
//! Recovery: a CRC mismatch or an FPDU that cannot be delimited (ULPDU_Length over the limit) is
//! terminal: [`RxStream`] keeps returning the same [`StreamError`], which names the Terminate
//! code to send ([`StreamError::terminate_code`]: LLP layer, MPA type, CRC error or FPDU start
//! error) before the stream is closed. Octets after the bad FPDU are never interpreted.

use super::mpa::{self, MpaError};
use super::rdmap::{self, Message, RdmapError};
use super::term::{TermCode, LAYER_LLP};

/// A terminal receive error. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// The FPDU's CRC does not match (RFC 5044 "MPA CRC error").
    Crc {
        /// CRC carried in the FPDU.
        received: u32,
        /// CRC computed over header, ULPDU and pad.
        computed: u32,
    },
    /// A ULPDU_Length over this side's limit: the FPDU cannot be delimited.
    UlpduTooLong(u16),
}

impl StreamError {
    /// The RFC 5040 Terminate code to send for this error (LLP layer, MPA type).
    pub const fn terminate_code(&self) -> TermCode {
        let ecode = match self {
            StreamError::Crc { .. } => mpa::TERM_ECODE_CRC,
            StreamError::UlpduTooLong(_) => mpa::TERM_ECODE_FPDU_START,
        };
        TermCode::new(LAYER_LLP, mpa::TERM_ETYPE_MPA, ecode)
    }
}

impl core::fmt::Display for StreamError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            StreamError::Crc { received, computed } => write!(
                f,
                "MPA CRC error: received {received:#010x}, computed {computed:#010x}"
            ),
            StreamError::UlpduTooLong(l) => write!(f, "MPA ULPDU length {l} over the limit"),
        }
    }
}

impl std::error::Error for StreamError {}

/// Smallest receive buffer: one whole MPA Request/Reply with the largest private data RFC 5044
/// allows, so that the handshake fits too.
const MIN_RX_CAPACITY: usize = mpa::RR_HDR_LEN + mpa::MAX_PRIVATE_DATA;

/// Receive-side FPDU reassembly over one fixed buffer.
#[derive(Debug)]
pub struct RxStream {
    buf: Box<[u8]>,
    /// First octet not consumed.
    start: usize,
    /// One past the last octet received.
    end: usize,
    crc: bool,
    max_ulpdu: usize,
    failed: Option<StreamError>,
}

impl RxStream {
    /// A stream accepting ULPDUs of up to `max_ulpdu` octets (clamped to the 16-bit field),
    /// CRCs off until [`RxStream::set_crc`]. The buffer holds two largest FPDUs (and at least
    /// one largest MPA Request/Reply), so a `read` always has room once consumed octets are
    /// dropped.
    pub fn new(max_ulpdu: usize) -> Self {
        let max_ulpdu = max_ulpdu.min(mpa::MAX_ULPDU);
        let cap = (2 * mpa::fpdu_len(max_ulpdu)).max(MIN_RX_CAPACITY);
        RxStream {
            buf: vec![0; cap].into_boxed_slice(),
            start: 0,
            end: 0,
            crc: false,
            max_ulpdu,
            failed: None,
        }
    }

    /// Turns CRC checking on or off (the outcome of the MPA Request/Reply exchange).
    pub fn set_crc(&mut self, crc: bool) {
        self.crc = crc;
    }

    /// The largest ULPDU this stream accepts.
    pub const fn max_ulpdu(&self) -> usize {
        self.max_ulpdu
    }

    /// Octets of the buffer.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The free tail of the buffer to `read` into (unconsumed octets are moved to the front
    /// first). Empty only when the buffer is full of unconsumed octets.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` octets were written into [`RxStream::spare`].
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Copies as much of `bytes` as fits; returns the octets taken.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let spare = self.spare();
        let n = bytes.len().min(spare.len());
        spare[..n].copy_from_slice(&bytes[..n]);
        self.filled(n);
        n
    }

    /// Octets received and not consumed (the handshake reads its frames from here).
    pub fn unparsed(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Drops the first `n` unparsed octets.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// The terminal error, once one was found.
    pub const fn error(&self) -> Option<StreamError> {
        self.failed
    }

    /// The ULPDU of the next complete FPDU, consumed from the stream and borrowed from the
    /// buffer; `Ok(None)` when more octets are needed. Errors are terminal and repeat.
    pub fn next_ulpdu(&mut self) -> Result<Option<&[u8]>, StreamError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let at = self.start;
        let found = mpa::decode_fpdu(&self.buf[at..self.end], self.crc, self.max_ulpdu);
        let err = match found {
            Ok(f) => {
                let (ulpdu_len, len) = (f.ulpdu.len(), f.len);
                self.start += len;
                let from = at + mpa::FPDU_HDR_LEN;
                return Ok(Some(&self.buf[from..from + ulpdu_len]));
            }
            Err(MpaError::Incomplete { .. }) => return Ok(None),
            Err(MpaError::CrcMismatch { received, computed }) => {
                StreamError::Crc { received, computed }
            }
            Err(MpaError::UlpduTooLong(l)) => StreamError::UlpduTooLong(l),
            // decode_fpdu returns no other error; a delimiting failure is the safe reading.
            Err(_) => StreamError::UlpduTooLong(u16::MAX),
        };
        self.failed = Some(err);
        Err(err)
    }
}

/// Errors of transmit-side segmentation. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentError {
    /// The peer's maximum ULPDU cannot hold the DDP header and one payload octet.
    MulpduTooSmall(usize),
    /// Read Requests and Terminates are one segment; this one does not fit the peer's maximum.
    TooLongForOneSegment,
    /// The message cannot be encoded.
    Rdmap(RdmapError),
    /// The output buffer is too small.
    NoSpace {
        /// Octets needed.
        needed: usize,
        /// Size of the output buffer.
        capacity: usize,
    },
}

impl core::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            SegmentError::MulpduTooSmall(m) => write!(f, "peer maximum ULPDU {m} too small"),
            SegmentError::TooLongForOneSegment => write!(f, "message must fit one segment"),
            SegmentError::Rdmap(e) => write!(f, "{e}"),
            SegmentError::NoSpace { needed, capacity } => {
                write!(f, "segments need {needed} octets, buffer holds {capacity}")
            }
        }
    }
}

impl std::error::Error for SegmentError {}

/// The payload and header length of a message that may span segments; `None` for one-segment
/// messages.
fn split_parts<'a>(msg: &Message<'a>) -> Option<(&'a [u8], usize)> {
    match *msg {
        Message::Send { payload, .. } => Some((payload, super::ddp::UNTAGGED_HDR_LEN)),
        Message::Tagged { payload, .. } => Some((payload, super::ddp::TAGGED_HDR_LEN)),
        Message::ReadRequest(_) | Message::Terminate(_) => None,
    }
}

/// Octets [`encode_message`] writes for `msg` with a peer maximum ULPDU of `mulpdu`.
pub fn message_wire_len(msg: &Message<'_>, mulpdu: usize) -> Result<usize, SegmentError> {
    let Some((payload, hdr)) = split_parts(msg) else {
        let n = rdmap::encoded_len(msg);
        if n > mulpdu.min(mpa::MAX_ULPDU) {
            return Err(SegmentError::TooLongForOneSegment);
        }
        return Ok(mpa::fpdu_len(n));
    };
    let room = mulpdu.min(mpa::MAX_ULPDU).saturating_sub(hdr);
    if room == 0 {
        return Err(SegmentError::MulpduTooSmall(mulpdu));
    }
    let full = payload.len() / room;
    let rest = payload.len() % room;
    let mut total = full * mpa::fpdu_len(hdr + room);
    if rest > 0 || payload.is_empty() {
        total += mpa::fpdu_len(hdr + rest);
    }
    Ok(total)
}

/// The `i`-th segment of `msg`, carrying `part` of its payload starting at `offset`; L set when
/// `last` (and the message's own L allows it).
fn segment_of<'a>(msg: &Message<'a>, part: &'a [u8], offset: usize, last: bool) -> Message<'a> {
    match *msg {
        Message::Send {
            solicited,
            invalidate,
            last: msg_last,
            msn,
            mo,
            ..
        } => Message::Send {
            solicited,
            invalidate,
            last: last && msg_last,
            msn,
            mo: mo.wrapping_add(offset as u32),
            payload: part,
        },
        Message::Tagged {
            read_response,
            last: msg_last,
            stag,
            to,
            ..
        } => Message::Tagged {
            read_response,
            last: last && msg_last,
            stag,
            to: to.wrapping_add(offset as u64),
            payload: part,
        },
        other => other,
    }
}

/// Writes `msg` into `out` as FPDUs whose ULPDUs are at most `mulpdu` octets (the peer's
/// maximum): a Send or tagged message is split into segments (MO or TO advancing, L on the last
/// segment only when `msg` has it), a Read Request or Terminate is one segment. Returns the
/// octets written.
pub fn encode_message(
    msg: &Message<'_>,
    mulpdu: usize,
    crc: bool,
    out: &mut [u8],
) -> Result<usize, SegmentError> {
    let total = message_wire_len(msg, mulpdu)?;
    if out.len() < total {
        return Err(SegmentError::NoSpace {
            needed: total,
            capacity: out.len(),
        });
    }
    let Some((payload, hdr)) = split_parts(msg) else {
        return seal_one(msg, crc, out);
    };
    let room = mulpdu.min(mpa::MAX_ULPDU) - hdr;
    let mut at = 0;
    let mut offset = 0;
    loop {
        let n = (payload.len() - offset).min(room);
        let last = offset + n == payload.len();
        let seg = segment_of(msg, &payload[offset..offset + n], offset, last);
        at += seal_one(&seg, crc, &mut out[at..])?;
        offset += n;
        if last {
            return Ok(at);
        }
    }
}

/// Encodes one segment into an FPDU at the front of `out`.
fn seal_one(seg: &Message<'_>, crc: bool, out: &mut [u8]) -> Result<usize, SegmentError> {
    let body = out.get_mut(mpa::FPDU_HDR_LEN..).unwrap_or(&mut []);
    let n = rdmap::encode(seg, body).map_err(SegmentError::Rdmap)?;
    mpa::seal_fpdu(out, n, crc).map_err(|e| match e {
        MpaError::NoSpace { needed, capacity } => SegmentError::NoSpace { needed, capacity },
        _ => SegmentError::TooLongForOneSegment,
    })
}

/// Octets waiting for a non-blocking `write`, in one fixed buffer.
#[derive(Debug)]
pub struct TxBuffer {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl TxBuffer {
    /// A buffer of `capacity` octets.
    pub fn new(capacity: usize) -> Self {
        TxBuffer {
            buf: vec![0; capacity].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Octets not written yet, oldest first: hand them to `write`.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Octets of the buffer: the most one message's FPDUs may take.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Whether everything was written.
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Records that `write` took `n` octets of [`TxBuffer::pending`].
    pub fn written(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// The free tail to encode into (pending octets are moved to the front first).
    pub fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` octets were encoded into [`TxBuffer::space`].
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Queues a copy of `bytes`; `false` (nothing queued) when they do not fit.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        let space = self.space();
        if space.len() < bytes.len() {
            return false;
        }
        space[..bytes.len()].copy_from_slice(bytes);
        self.commit(bytes.len());
        true
    }

    /// The pending octets, writable: lets a test corrupt what goes on the wire.
    #[cfg(test)]
    pub(crate) fn pending_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
