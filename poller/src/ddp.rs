//! DDP items and the buffer-writing error shared by the two builders that fill registered
//! memory: a call's [`CallArgs`](crate::CallArgs) and a reply's
//! [`ReplyBuilder`](crate::ReplyBuilder).
//!
//! Normal operation: a builder pushes each DDP-eligible item (its offset in the XDR stream, its
//! length and the buffer holding it, owned or shared) into [`DdpItems`]; the connection hands
//! them to the engine as chunk payloads and keeps the buffers until the Send that carries them
//! completes. Recovery: an item beyond [`MAX_DDP`] or at an offset that is not a multiple of
//! four is refused ([`BuildError::TooManyItems`]) and its buffer handed back; nothing else
//! fails here. The builders' write methods (`len`, `advance`, `put*`: written once, the
//! `xdr_writes` macro) encode through `Tail`, the engine's one XDR writer ([`XdrSink`]) over
//! the free part of their buffer, which also moves their clean mark.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use rpcrdma_engine::xdr::{XdrError, XdrSink};
use rpcrdma_mempool::PoolBuf;

/// Most DDP items one call's arguments or one reply's results may carry.
pub const MAX_DDP: usize = 4;

/// DDP result items of one reply: where each goes in the reply stream and the buffer that
/// holds it (kept until the reply's Send completes).
///
/// Only the first entries are ever `Some` (an item is pushed at the first `None`;
/// [`DdpItems::clear`] empties them all), so their number is not stored: without it the
/// items take 128 octets, moved (from a handler's outcome to the reply held for its Send)
/// with a few loads and stores rather than a `memcpy` call. Dropping them stops at the first
/// `None`: a call or reply without DDP items (most of them) pays one test.
#[derive(Debug, Default)]
pub struct DdpItems {
    pub(crate) items: ManuallyDrop<[Option<(u32, u32, DdpBuf)>; MAX_DDP]>,
}

impl Drop for DdpItems {
    fn drop(&mut self) {
        // The entries after the first `None` are `None` (see the type's documentation).
        for i in self.items.iter_mut() {
            if i.is_none() {
                break;
            }
            *i = None;
        }
    }
}

const _: () = assert!(core::mem::size_of::<DdpItems>() <= 128);

/// Where a DDP item's octets are: a buffer the item owns, or a range of a buffer shared with
/// its owner (a store that keeps file data in registered memory), kept alive until the Send
/// that carries the item completes.
#[derive(Debug)]
pub(crate) enum DdpBuf {
    /// The item owns the buffer.
    Owned(PoolBuf),
    /// The item holds a reference; its octets start at this offset.
    Shared(Arc<PoolBuf>, u32),
}

impl DdpBuf {
    /// The registered memory of the first `len` octets of the item.
    pub(crate) fn local(&self, len: u32) -> rpcrdma_engine::conn::LocalBuf {
        match self {
            DdpBuf::Owned(b) => crate::memory::local_buf(b, len as usize),
            DdpBuf::Shared(b, off) => {
                let e = b.entry();
                let off = (*off).min(e.len);
                rpcrdma_engine::conn::LocalBuf::new(
                    e.addr + u64::from(off),
                    len.min(e.len - off),
                    e.lkey,
                )
            }
        }
    }
}

impl DdpItems {
    /// No items.
    pub fn new() -> DdpItems {
        DdpItems::default()
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.iter().take_while(|i| i.is_some()).count()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    /// Drops every item (their buffers go back to their pools).
    pub fn clear(&mut self) {
        for i in self.items.iter_mut() {
            *i = None;
        }
    }

    /// The item at `i`: offset in the stream, length, its registered memory.
    pub(crate) fn get(&self, i: usize) -> Option<(u32, u32, rpcrdma_engine::conn::LocalBuf)> {
        self.items
            .get(i)?
            .as_ref()
            .map(|(at, len, b)| (*at, *len, b.local(*len)))
    }

    /// The items as the engine takes them, each offset moved by `base` (the octets that
    /// precede the stream the offsets count from), with their total length.
    pub(crate) fn engine_items(
        &self,
        base: u32,
    ) -> ([rpcrdma_engine::conn::DdpItem; MAX_DDP], usize, u64) {
        let mut items = [rpcrdma_engine::conn::DdpItem {
            at: 0,
            buf: rpcrdma_engine::conn::LocalBuf::EMPTY,
        }; MAX_DDP];
        let mut n = 0;
        let mut bytes = 0u64;
        if self.is_empty() {
            // Most calls and replies carry no DDP item.
            return (items, 0, 0);
        }
        for (at, len, buf) in (0..self.len()).filter_map(|k| self.get(k)) {
            items[n] = rpcrdma_engine::conn::DdpItem { at: base + at, buf };
            bytes += u64::from(len);
            n += 1;
        }
        (items, n, bytes)
    }

    pub(crate) fn push(&mut self, at: u32, len: u32, buf: PoolBuf) -> Result<(), PoolBuf> {
        let n = self.len();
        if n >= MAX_DDP || at % 4 != 0 {
            return Err(buf);
        }
        self.items[n] = Some((at, len, DdpBuf::Owned(buf)));
        Ok(())
    }

    pub(crate) fn push_shared(
        &mut self,
        at: u32,
        len: u32,
        buf: Arc<PoolBuf>,
        off: u32,
    ) -> Result<(), Arc<PoolBuf>> {
        let n = self.len();
        if n >= MAX_DDP || at % 4 != 0 {
            return Err(buf);
        }
        self.items[n] = Some((at, len, DdpBuf::Shared(buf, off)));
        Ok(())
    }
}

/// Why writing into a [`ReplyBuilder`](crate::ReplyBuilder) (or [`CallArgs`](crate::CallArgs))
/// failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildError {
    /// Not enough room in the buffer.
    Full,
    /// Too many DDP items, or an item at an offset that is not a multiple of four.
    TooManyItems,
}

impl core::fmt::Display for BuildError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BuildError::Full => write!(f, "buffer full"),
            BuildError::TooManyItems => write!(f, "too many DDP items or misaligned item"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Zeroes `buf[*clean..upto]` when `upto` is past the clean mark, and moves the mark there: the
/// builders' guard against sending octets an earlier user of a pool buffer left behind.
#[inline]
pub(crate) fn zero_above(buf: &mut [u8], clean: &mut usize, upto: usize) {
    let upto = upto.min(buf.len());
    if upto > *clean {
        buf[*clean..upto].fill(0);
        *clean = upto;
    }
}

/// The free part of a builder's buffer as an XDR sink: octets from `*len` on, counted into
/// `*len` as they are reserved and raising the clean mark (see [`zero_above`]) over them. The
/// builders' `put*` methods are the engine's [`XdrSink`] methods over this, with every
/// [`XdrError`] reported as [`BuildError::Full`].
pub(crate) struct Tail<'b> {
    pub(crate) buf: &'b mut [u8],
    pub(crate) len: &'b mut usize,
    pub(crate) clean: &'b mut usize,
}

impl XdrSink for Tail<'_> {
    #[inline]
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], XdrError> {
        let at = *self.len;
        let capacity = self.buf.len();
        let end = match at.checked_add(n) {
            Some(end) if end <= capacity => end,
            _ => {
                return Err(XdrError::NoSpace {
                    needed: at.saturating_add(n),
                    capacity,
                })
            }
        };
        *self.len = end;
        *self.clean = (*self.clean).max(end);
        Ok(&mut self.buf[at..end])
    }
}

/// The builders' error for a write that does not fit.
#[inline]
pub(crate) fn full(_: XdrError) -> BuildError {
    BuildError::Full
}

/// The write methods of a builder (`CallArgs`, `ReplyBuilder`) whose buffer is the field
/// `$buf` and whose `len` and `clean` fields are its write position and clean mark, written
/// once for both builders: `len`, `is_empty`, `advance` (after writing into the builder's own
/// `space`) and `put*` (the engine's [`XdrSink`] methods over [`Tail`]).
macro_rules! xdr_writes {
    ($buf:ident) => {
        /// Octets written so far (DDP items excluded).
        pub fn len(&self) -> usize {
            self.len
        }

        /// True when nothing was written.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// Marks `n` more octets of [`Self::space`] as written. Octets not written into it are
        /// sent as zeros, never as what the pool buffer held before.
        pub fn advance(&mut self, n: usize) -> Result<(), $crate::ddp::BuildError> {
            if n > self.$buf.len() - self.len {
                return Err($crate::ddp::BuildError::Full);
            }
            self.len += n;
            $crate::ddp::zero_above(&mut self.$buf[..], &mut self.clean, self.len);
            Ok(())
        }

        /// Appends raw octets.
        #[inline]
        pub fn put(&mut self, data: &[u8]) -> Result<(), $crate::ddp::BuildError> {
            use rpcrdma_engine::xdr::XdrSink;
            self.tail().put_raw(data).map_err($crate::ddp::full)
        }

        /// Appends an XDR unsigned int.
        #[inline]
        pub fn put_u32(&mut self, v: u32) -> Result<(), $crate::ddp::BuildError> {
            use rpcrdma_engine::xdr::XdrSink;
            self.tail().put_u32(v).map_err($crate::ddp::full)
        }

        /// Appends XDR variable-length opaque data (length, octets, pad).
        #[inline]
        pub fn put_opaque(&mut self, data: &[u8]) -> Result<(), $crate::ddp::BuildError> {
            use rpcrdma_engine::xdr::XdrSink;
            self.tail().put_opaque(data).map_err($crate::ddp::full)
        }

        /// The free part of the buffer as the engine's XDR writer (moves `len` and the clean
        /// mark).
        #[inline]
        fn tail(&mut self) -> $crate::ddp::Tail<'_> {
            $crate::ddp::Tail {
                buf: &mut self.$buf,
                len: &mut self.len,
                clean: &mut self.clean,
            }
        }
    };
}
pub(crate) use xdr_writes;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rpcrdma_engine::verbs::soft::SoftEnv;
    use rpcrdma_mempool::{HugePagePolicy, Pool, PoolConfig};

    use super::DdpItems;
    use crate::memory::{registered_region, LOCAL_ACCESS};

    /// Dropping the items (up to the first empty entry) hands every item's buffer
    /// back: owned ones to their pool, shared ones to their owner; `clear` does the same.
    #[test]
    fn accepts_items_dropped_and_cleared_returning_their_buffers() {
        let env = SoftEnv::new();
        let pd = env.client_pd();
        let r = registered_region(&pd, 64 * 1024, HugePagePolicy::Never, LOCAL_ACCESS).expect("r");
        let pool = Pool::new(&r, &PoolConfig::new(8, 256)).expect("pool");
        let all = pool.available();
        let shared = Arc::new(pool.get_buf().expect("buf"));
        let mut d = DdpItems::new();
        assert!(d.push(4, 16, pool.get_buf().expect("buf")).is_ok());
        assert!(d.push_shared(8, 16, Arc::clone(&shared), 0).is_ok());
        assert!(d.push(12, 16, pool.get_buf().expect("buf")).is_ok());
        assert_eq!(pool.available(), all - 3);
        assert_eq!(Arc::strong_count(&shared), 2);
        drop(d);
        assert_eq!(pool.available(), all - 1);
        assert_eq!(Arc::strong_count(&shared), 1);
        let mut d = DdpItems::new();
        assert!(d.push(4, 16, pool.get_buf().expect("buf")).is_ok());
        d.clear();
        assert!(d.is_empty());
        assert_eq!(pool.available(), all - 1);
        drop(shared);
        assert_eq!(pool.available(), all);
    }
}
