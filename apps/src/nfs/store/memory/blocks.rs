//! File data of the memory store in fixed-size blocks, allocated lazily: a sparse file costs
//! only the blocks written, holes read as zeros, and no file needs contiguous memory.
//!
//! Normal operation: a block is one of two kinds. A small block is a `Vec<u8>` that grows to
//! the highest octet written inside it (a small file costs its size, not a whole block). A
//! block that grows to [`PROMOTE`] octets or more (at most the block size) moves into a
//! registered buffer from the endpoint's payload pool ([`Alloc`]) when the store has one: an
//! `Arc<PoolBuf>` of exactly `block_size` octets plus a high-water mark. A READ whose range
//! lies inside one registered block is answered from the block itself
//! ([`Blocks::read_registered`]): the reply's DDP item holds a clone of the `Arc` until its
//! Send completes, so the RDMA Write reads the stored octets and nothing is copied.
//!
//! Invariants: octets at or past a registered block's high-water mark are stale (left by the
//! buffer's earlier users) and never visible: reads stop at the mark and fill zeros, a write
//! that starts past it zeroes the gap first, and a shared range always ends below it. A
//! registered block whose `Arc` is shared (a READ reply in flight) is never written: a write
//! copies it into a new block (copy on write) and the reply keeps the old buffer, which goes
//! back to the pool when the reply's Send completes.
//!
//! Capacity: a block is charged [`charge::block`] of its length (a `Vec`'s length, a registered
//! block's high-water mark): its slot and allocation plus the buffer a `Vec` of that length
//! keeps (a `Vec` block grows to the next power of two and shrinks back on truncate, so its
//! real allocation never exceeds the charge). The charge is the same whichever kind holds the
//! block, so moving a block between kinds never changes it and never makes a write fail. The
//! registered buffers themselves are memory the pool reserved at start-up, so the process
//! holds at most the pool plus `capacity` octets for blocks.
//!
//! Recovery: the pool running dry (or down to its reserve for READs that cannot be served
//! from a block) is not an error: the block stays (or becomes) a `Vec`. Callers check capacity
//! with [`Blocks::growth`] before [`Blocks::write`], so a write that does not fit changes
//! nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rpcrdma_mempool::PoolBuf;
use rpcrdma_poller::BufPool;

use super::charge;

mod clone;
mod space;

/// A block whose length reaches this (or the block size, when smaller) moves into a
/// registered buffer.
pub(super) const PROMOTE: usize = 64 * 1024;

/// Where blocks come from: their size, and the registered pool when the store has one.
#[derive(Debug, Clone)]
pub(super) struct Alloc {
    /// Size of one block (the pool's buffer size when there is a pool).
    pub(super) bs: usize,
    pool: Option<BufPool>,
    /// Buffers left in the pool for READs that are not served from a block.
    reserve: usize,
}

impl Alloc {
    /// `Vec` blocks of `bs` octets only.
    pub(super) fn plain(bs: usize) -> Alloc {
        Alloc {
            bs: bs.max(1),
            pool: None,
            reserve: 0,
        }
    }

    /// Blocks of the pool's buffer size; large ones in the pool's buffers while it has more
    /// than a quarter of them free (the rest stays for READ results that are copied).
    pub(super) fn pooled(pool: BufPool) -> Alloc {
        Alloc {
            bs: pool.buf_size().max(1),
            reserve: pool.count() / 4,
            pool: Some(pool),
        }
    }

    /// The length from which a block is worth a registered buffer.
    fn threshold(&self) -> usize {
        PROMOTE.min(self.bs)
    }

    /// A registered buffer, unless there is no pool or it is down to its reserve.
    fn take(&self) -> Option<PoolBuf> {
        let pool = self.pool.as_ref()?;
        if pool.available() <= self.reserve {
            return None;
        }
        pool.get().filter(|b| b.len() >= self.bs)
    }
}

/// One block of file data.
#[derive(Debug)]
enum Block {
    /// Octets up to the highest written.
    Heap(Vec<u8>),
    /// A registered buffer of `bs` octets; `hwm` octets are data, the rest is stale.
    Reg { buf: Arc<PoolBuf>, hwm: usize },
}

/// Writes `src` at `within` of a `Vec` block of a file with blocks of `bs` octets; the `Vec`
/// grows to [`charge::block_buf`] and no further.
fn put_heap(v: &mut Vec<u8>, bs: usize, within: usize, src: &[u8]) {
    let end = within + src.len();
    if v.len() < end {
        if v.capacity() < end {
            v.reserve_exact(charge::block_buf(end, bs) - v.len());
        }
        v.resize(end, 0);
    }
    v[within..end].copy_from_slice(src);
}

/// Writes `src` at `within` of a registered buffer held alone, zeroing stale octets between
/// the high-water mark and `within` first.
fn put_reg(b: &mut [u8], hwm: &mut usize, within: usize, src: &[u8]) {
    let end = within + src.len();
    if within > *hwm {
        b[*hwm..within].fill(0);
    }
    b[within..end].copy_from_slice(src);
    *hwm = (*hwm).max(end);
}

/// A registered block in buffer `b` holding `old` (a block's data) with `src` written at
/// `within`; old octets the write covers entirely are not copied.
fn moved(mut b: PoolBuf, old: &[u8], within: usize, src: &[u8]) -> Block {
    let keep = if within == 0 && within + src.len() >= old.len() {
        0
    } else {
        old.len()
    };
    b[..keep].copy_from_slice(&old[..keep]);
    let mut hwm = keep;
    put_reg(&mut b, &mut hwm, within, src);
    Block::Reg {
        buf: Arc::new(b),
        hwm,
    }
}

impl Block {
    /// The block's data (never the stale octets of a registered buffer).
    fn data(&self) -> &[u8] {
        match self {
            Block::Heap(v) => v,
            Block::Reg { buf, hwm } => &buf[..*hwm],
        }
    }

    /// Writes `src` at `within` (`within + src.len()` is at most the block size).
    fn write(&mut self, alloc: &Alloc, within: usize, src: &[u8]) {
        let end = within + src.len();
        let next = match self {
            Block::Reg { buf, hwm } => match Arc::get_mut(buf) {
                Some(b) => return put_reg(b, hwm, within, src),
                // A READ reply still holds the buffer: copy on write.
                None => match alloc.take() {
                    Some(b) => moved(b, &buf[..*hwm], within, src),
                    None => {
                        let mut v = buf[..*hwm].to_vec();
                        put_heap(&mut v, alloc.bs, within, src);
                        Block::Heap(v)
                    }
                },
            },
            Block::Heap(v) => {
                let fresh = if v.len().max(end) >= alloc.threshold() {
                    alloc.take()
                } else {
                    None
                };
                match fresh {
                    Some(b) => moved(b, v, within, src),
                    None => return put_heap(v, alloc.bs, within, src),
                }
            }
        };
        *self = next;
    }

    /// Keeps the first `tail` octets; a registered block left shorter than the threshold
    /// goes back to a `Vec` (its buffer returns to the pool once no reply holds it).
    fn truncate(&mut self, alloc: &Alloc, tail: usize) {
        match self {
            Block::Heap(v) => {
                v.truncate(tail);
                v.shrink_to(charge::block_buf(tail, alloc.bs));
            }
            Block::Reg { buf, hwm } => {
                *hwm = (*hwm).min(tail);
                if *hwm < alloc.threshold() {
                    *self = Block::Heap(buf[..*hwm].to_vec());
                }
            }
        }
    }
}

/// A file's data: block index → the block (at most `block_size` octets of data).
#[derive(Debug, Default)]
pub(super) struct Blocks {
    map: BTreeMap<u64, Block>,
    /// The sum of the blocks' charges (kept as blocks change: attributes read it often).
    charged: u64,
    /// Blocks an ALLOCATE made that nothing has written since: zeros, charged, and a hole
    /// for SEEK (`space.rs`), as Linux file systems report space allocated but not written.
    reserved: BTreeSet<u64>,
}

/// A range inside one registered block: the buffer, the offset in it and the length.
pub(super) type Shared = (Arc<PoolBuf>, usize, usize);

impl Blocks {
    /// Octets the blocks are charged, with blocks of `bs` octets (see the file's doc).
    pub(super) fn used(&self, _bs: usize) -> u64 {
        self.charged
    }

    /// The sum of the blocks' charges, counted afresh.
    fn count(&self, bs: usize) -> u64 {
        self.map
            .values()
            .map(|b| charge::block(b.data().len(), bs))
            .sum()
    }

    /// Copies the file's octets at `offset` into `out`, stopping at `size` (the file size);
    /// holes read as zeros. Returns the octets copied.
    pub(super) fn read(&self, bs: usize, size: u64, offset: u64, out: &mut [u8]) -> usize {
        if offset >= size {
            return 0;
        }
        let n = (size - offset).min(out.len() as u64) as usize;
        let bs64 = bs as u64;
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let within = (pos % bs64) as usize;
            let chunk = (bs - within).min(n - done);
            let dst = &mut out[done..done + chunk];
            let data = self.map.get(&(pos / bs64)).map_or(&[][..], Block::data);
            let have = data.len().saturating_sub(within).min(chunk);
            if have > 0 {
                dst[..have].copy_from_slice(&data[within..within + have]);
            }
            dst[have..].fill(0);
            done += chunk;
        }
        n
    }

    /// The file's octets `[offset, offset + len)` (already clamped to the file size, `len` >
    /// 0) as a range of one registered block, when they lie wholly inside one and below its
    /// high-water mark; `None` otherwise (a hole, a `Vec` block, two blocks).
    pub(super) fn read_registered(&self, bs: usize, offset: u64, len: usize) -> Option<Shared> {
        let bs64 = bs as u64;
        let within = (offset % bs64) as usize;
        if len == 0 || len > bs - within {
            return None;
        }
        match self.map.get(&(offset / bs64))? {
            Block::Reg { buf, hwm } if within + len <= *hwm => Some((Arc::clone(buf), within, len)),
            _ => None,
        }
    }

    /// Octets of charge a write of `len` octets at `offset` would add.
    pub(super) fn growth(&self, bs: usize, offset: u64, len: usize) -> u64 {
        let mut grow = 0u64;
        for_each_span(bs, offset, len, |idx, within, chunk, _| {
            grow += match self.map.get(&idx).map(|b| b.data().len()) {
                Some(have) if have >= within + chunk => 0,
                Some(have) => charge::block(within + chunk, bs) - charge::block(have, bs),
                None => charge::block(within + chunk, bs),
            };
        });
        grow
    }

    /// Writes `data` at `offset`, allocating blocks as needed (see the file's doc for which
    /// kind, and for copy on write).
    pub(super) fn write(&mut self, alloc: &Alloc, offset: u64, data: &[u8]) {
        self.charged += self.growth(alloc.bs, offset, data.len());
        let map = &mut self.map;
        let reserved = &mut self.reserved;
        for_each_span(alloc.bs, offset, data.len(), |idx, within, chunk, done| {
            if !reserved.is_empty() {
                reserved.remove(&idx);
            }
            map.entry(idx)
                .or_insert_with(|| Block::Heap(Vec::new()))
                .write(alloc, within, &data[done..done + chunk]);
        });
    }

    /// Drops the data at and past `size`; returns the octets of charge freed.
    pub(super) fn truncate(&mut self, alloc: &Alloc, size: u64) -> u64 {
        let before = self.used(alloc.bs);
        let bs64 = alloc.bs as u64;
        let first_gone = size.div_ceil(bs64);
        drop(self.map.split_off(&first_gone));
        drop(self.reserved.split_off(&first_gone));
        let tail = (size % bs64) as usize;
        if tail != 0 {
            if let Some(block) = self.map.get_mut(&(size / bs64)) {
                block.truncate(alloc, tail);
            }
        }
        self.charged = self.count(alloc.bs);
        before - self.charged
    }

    /// Octets of data the blocks hold (tests).
    #[cfg(test)]
    pub(super) fn octets(&self) -> u64 {
        self.map.values().map(|b| b.data().len() as u64).sum()
    }

    /// How many blocks are registered (tests).
    #[cfg(test)]
    pub(super) fn registered(&self) -> usize {
        self.map
            .values()
            .filter(|b| matches!(b, Block::Reg { .. }))
            .count()
    }
}

/// Calls `f(block index, offset in block, octets, octets before)` for each block a range
/// touches.
fn for_each_span(bs: usize, offset: u64, len: usize, mut f: impl FnMut(u64, usize, usize, usize)) {
    let bs64 = bs as u64;
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let within = (pos % bs64) as usize;
        let chunk = (bs - within).min(len - done);
        f(pos / bs64, within, chunk, done);
        done += chunk;
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_pool::TestPool;
    use super::*;

    fn read_all(b: &Blocks, bs: usize, size: u64, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0xA5u8; len];
        let n = b.read(bs, size, offset, &mut out);
        out.truncate(n);
        out
    }

    #[test]
    fn sparse_blocks_read_zeros_and_count_only_written_octets() {
        let a = Alloc::plain(8);
        let mut b = Blocks::default();
        assert_eq!(b.growth(8, 20, 3), charge::BLOCK + 8);
        b.write(&a, 20, b"abc");
        assert_eq!(b.octets(), 7);
        assert_eq!(b.used(8), charge::BLOCK + 8);
        let mut out = [0xffu8; 30];
        assert_eq!(b.read(8, 23, 0, &mut out), 23);
        assert_eq!(&out[..20], &[0u8; 20]);
        assert_eq!(&out[20..23], b"abc");
        // A write across a block boundary.
        b.write(&a, 6, b"xyzw");
        let mut out = [0u8; 6];
        assert_eq!(b.read(8, 23, 5, &mut out), 6);
        assert_eq!(&out, b"\0xyzw\0");
        assert_eq!(b.truncate(&a, 7), 2 * (charge::BLOCK + 8));
        assert_eq!(b.octets(), 7);
        let mut out = [1u8; 4];
        assert_eq!(b.read(8, 23, 6, &mut out), 4);
        assert_eq!(&out, b"x\0\0\0");
        assert_eq!(b.registered(), 0);
        assert!(b.read_registered(8, 0, 4).is_none());
    }

    #[test]
    fn large_blocks_move_into_registered_buffers_and_small_ones_stay_vecs() {
        let tp = TestPool::new(8);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        b.write(&a, 0, &[1u8; 4096]);
        assert_eq!(b.registered(), 0, "4 KiB stays a Vec");
        b.write(&a, 4096, &vec![2u8; PROMOTE - 4096]);
        assert_eq!(b.registered(), 1, "a block grown to 64 KiB is registered");
        assert_eq!(b.octets(), PROMOTE as u64);
        let got = read_all(&b, bs, PROMOTE as u64, 0, PROMOTE);
        assert_eq!(&got[..4096], &[1u8; 4096][..]);
        assert!(got[4096..].iter().all(|&x| x == 2));
        // A write covering 64 KiB of a fresh block is registered at once.
        b.write(&a, bs as u64, &vec![3u8; PROMOTE]);
        assert_eq!(b.registered(), 2);
        let (buf, off, len) = b.read_registered(bs, 5000, 200).expect("registered");
        assert_eq!((off, len), (5000, 200));
        assert_eq!(&buf[off..off + len], &[2u8; 200][..]);
    }

    #[test]
    fn stale_octets_of_a_pool_buffer_are_never_visible() {
        let tp = TestPool::new(4);
        // Dirty every buffer of the pool, then give them back.
        let mut held: Vec<PoolBuf> = std::iter::from_fn(|| tp.pool.get()).collect();
        assert_eq!(held.len(), 4);
        for h in &mut held {
            h.fill(0xEE);
        }
        drop(held);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        // A write that starts past the (zero) high-water mark: the gap reads as zeros.
        b.write(&a, 1000, &vec![7u8; 2 * PROMOTE]);
        assert_eq!(b.registered(), 1);
        let size = (1000 + 2 * PROMOTE) as u64;
        let got = read_all(&b, bs, size, 0, size as usize);
        assert!(
            got[..1000].iter().all(|&x| x == 0),
            "gap exposed stale octets"
        );
        assert!(got[1000..].iter().all(|&x| x == 7));
        // Past the mark, up to a larger file size (after SETATTR size), zeros too.
        let got = read_all(&b, bs, bs as u64, 0, bs);
        assert!(got[2 * PROMOTE + 1000..].iter().all(|&x| x == 0));
        // Truncate (the block stays registered), then write past the new mark: the old data
        // between reads as zeros.
        let mark = 2000 + PROMOTE;
        b.truncate(&a, mark as u64);
        assert_eq!(b.registered(), 1);
        b.write(&a, (mark + 500) as u64, b"z");
        let got = read_all(&b, bs, bs as u64, 0, bs);
        assert!(
            got[mark..mark + 500].iter().all(|&x| x == 0),
            "{:?}",
            &got[mark..mark + 8]
        );
        assert_eq!(got[mark + 500], b'z');
        assert!(got[mark + 501..].iter().all(|&x| x == 0));
        // A shared range never reaches past the mark.
        assert!(b.read_registered(bs, 0, mark + 501).is_some());
        assert!(b.read_registered(bs, 0, mark + 502).is_none());
    }

    #[test]
    fn writes_copy_a_registered_block_a_reply_still_holds() {
        let tp = TestPool::new(8);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        b.write(&a, 0, &vec![1u8; PROMOTE]);
        let (held, off, len) = b.read_registered(bs, 0, PROMOTE).expect("registered");
        assert_eq!((off, len), (0, PROMOTE));
        let free = tp.pool.available();
        // A partial overwrite while the reply holds the buffer: the store moves to a copy.
        b.write(&a, 10, b"new");
        assert_eq!(tp.pool.available(), free - 1, "a new buffer was taken");
        assert!(
            held[..PROMOTE].iter().all(|&x| x == 1),
            "the reply's octets changed"
        );
        let got = read_all(&b, bs, PROMOTE as u64, 0, PROMOTE);
        assert_eq!(&got[10..13], b"new");
        assert!(got[..10].iter().chain(&got[13..]).all(|&x| x == 1));
        let (now, _, _) = b.read_registered(bs, 0, PROMOTE).expect("registered");
        assert!(!Arc::ptr_eq(&now, &held));
        drop(now);
        // The reply completes: its buffer goes back to the pool.
        drop(held);
        assert_eq!(tp.pool.available(), free);
        // Unshared: written in place, no buffer taken.
        b.write(&a, 0, b"in place");
        assert_eq!(tp.pool.available(), free);
        assert_eq!(&read_all(&b, bs, PROMOTE as u64, 0, 8), b"in place");
    }

    #[test]
    fn a_dry_pool_falls_back_to_vec_blocks() {
        let tp = TestPool::new(8);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        // Eight buffers, a reserve of two: six blocks registered, the rest are Vecs.
        for i in 0..8u64 {
            b.write(&a, i * bs as u64, &vec![i as u8 + 1; PROMOTE]);
        }
        assert_eq!(b.registered(), 6);
        assert_eq!(tp.pool.available(), 2);
        assert_eq!(b.octets(), 8 * PROMOTE as u64);
        for i in 0..8u64 {
            let got = read_all(&b, bs, 8 * bs as u64, i * bs as u64, PROMOTE);
            assert!(got.iter().all(|&x| x == i as u8 + 1));
        }
        // Copy on write with the pool at its reserve: the copy is a Vec.
        let (held, _, _) = b.read_registered(bs, 0, 16).expect("registered");
        b.write(&a, 0, b"cow");
        assert_eq!(b.registered(), 5);
        assert_eq!(&held[..3], &[1u8; 3]);
        assert_eq!(&read_all(&b, bs, 8 * bs as u64, 0, 4), b"cow\x01");
    }

    #[test]
    fn truncate_handles_both_kinds_and_returns_small_registered_blocks() {
        let tp = TestPool::new(8);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        b.write(&a, 0, &vec![9u8; bs]);
        b.write(&a, bs as u64, b"small");
        assert_eq!(b.registered(), 1);
        let free = tp.pool.available();
        // Cut the Vec block, then the registered one but above the threshold.
        let cut = |b: &mut Blocks, size: u64| {
            let o = b.octets();
            b.truncate(&a, size);
            o - b.octets()
        };
        assert_eq!(cut(&mut b, bs as u64 + 2), 3);
        assert_eq!(
            cut(&mut b, PROMOTE as u64 + 10),
            (bs - PROMOTE - 10 + 2) as u64
        );
        assert_eq!(b.registered(), 1);
        assert!(b.read_registered(bs, PROMOTE as u64, 10).is_some());
        assert!(b.read_registered(bs, PROMOTE as u64, 11).is_none());
        // Below the threshold: back to a Vec, the buffer back to the pool.
        assert_eq!(cut(&mut b, 100), (PROMOTE - 90) as u64);
        assert_eq!(b.registered(), 0);
        assert_eq!(tp.pool.available(), free + 1);
        assert_eq!(read_all(&b, bs, 200, 0, 200)[..100], [9u8; 100][..]);
        assert!(read_all(&b, bs, 200, 0, 200)[100..].iter().all(|&x| x == 0));
        assert_eq!(b.octets(), 100);
    }

    #[test]
    fn read_registered_answers_only_ranges_inside_one_registered_block() {
        let tp = TestPool::new(8);
        let a = Alloc::pooled(tp.pool.clone());
        let bs = a.bs;
        let mut b = Blocks::default();
        b.write(&a, 0, &vec![1u8; bs]);
        b.write(&a, bs as u64, &vec![2u8; bs]);
        b.write(&a, 3 * bs as u64, b"tiny");
        assert!(b.read_registered(bs, 0, bs).is_some(), "a whole block");
        assert!(
            b.read_registered(bs, bs as u64 - 1, 2).is_none(),
            "two blocks"
        );
        assert!(b.read_registered(bs, 5, 0).is_none(), "nothing");
        assert!(b.read_registered(bs, 2 * bs as u64, 10).is_none(), "a hole");
        assert!(
            b.read_registered(bs, 3 * bs as u64, 4).is_none(),
            "a Vec block"
        );
        let (buf, off, len) = b.read_registered(bs, bs as u64 + 7, 9).expect("second");
        assert_eq!((off, len), (7, 9));
        assert_eq!(&buf[7..16], &[2u8; 9]);
    }
}
