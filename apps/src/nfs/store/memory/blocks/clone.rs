//! CLONE in the memory store (NFSv4.2, RFC 7862 §15.13): the destination's blocks become the
//! source's own, not copies of their octets.
//!
//! Normal operation: offsets on block boundaries, and a count that is whole blocks unless it
//! reaches the source's end, as Linux's `generic_remap_checks` asks of a file system's blocks.
//! Each whole block of the range gets the source's block: a registered block by its `Arc`
//! (shared: the first WRITE to either file copies it, the copy on write a READ reply in flight
//! already relies on), a `Vec` block copied, a hole left a hole, a reserved block still
//! reserved; the destination's blocks in the range go. A last block the range ends inside (at
//! the source's end) is shared when the destination holds no data past the range in it,
//! otherwise its octets are copied. The destination takes the size, mtime and ctime a WRITE
//! gives. Recovery: offsets or a count off the block boundaries are NFS4ERR_INVAL (the Linux
//! client then copies, a COPY of 1 MiB a call; nothing long runs under the store's lock); a
//! clone past the capacity (the shared blocks charged to both files) changes nothing (NOSPC).

use super::super::tree::{Body, Tree};
use super::{charge, Block, Blocks};
use crate::nfs::identity::{self, Cred, Want};
use crate::nfs::store::clone_span;
use crate::nfs::types::{NfsResult, Nfsstat3};

/// Whole blocks taken from a file: index relative to the first, the block, whether reserved.
type Taken = Vec<(u64, Block, bool)>;

impl Block {
    /// The block for another file: a registered buffer shared, a `Vec` copied.
    fn share(&self) -> Block {
        match self {
            Block::Heap(v) => Block::Heap(v.clone()),
            Block::Reg { buf, hwm } => Block::Reg {
                buf: std::sync::Arc::clone(buf),
                hwm: *hwm,
            },
        }
    }
}

impl Blocks {
    /// The blocks this file holds among `count` blocks from index `first`, for
    /// [`Blocks::put_whole`].
    fn take_whole(&self, first: u64, count: u64) -> Taken {
        let end = first.saturating_add(count);
        self.map
            .range(first..end)
            .map(|(&i, b)| (i - first, b.share(), self.reserved.contains(&i)))
            .collect()
    }

    /// Makes the `count` blocks from index `first` the `taken` ones (the rest holes).
    fn put_whole(&mut self, first: u64, count: u64, taken: Taken) {
        let end = first.saturating_add(count);
        let mut from = self.reserved.split_off(&first);
        self.reserved.append(&mut from.split_off(&end));
        let mut from = self.map.split_off(&first);
        self.map.append(&mut from.split_off(&end));
        for (k, block, reserved) in taken {
            self.map.insert(first + k, block);
            if reserved {
                self.reserved.insert(first + k);
            }
        }
    }

    /// The octets of data block `idx` holds (0 for a hole).
    fn held(&self, idx: u64) -> usize {
        self.map.get(&idx).map_or(0, |b| b.data().len())
    }

    /// Octets of charge the source's blocks `[first, first + count)` carry: what sharing them
    /// costs the destination at most.
    fn charge_of(&self, bs: usize, first: u64, count: u64) -> u64 {
        let end = first.saturating_add(count);
        self.map
            .range(first..end)
            .map(|(_, b)| charge::block(b.data().len(), bs))
            .sum()
    }
}

/// The data of regular file `id` (ISDIR, INVAL for other types).
fn file(tree: &Tree, id: u64) -> NfsResult<(u64, &Blocks)> {
    match &tree.node(id)?.body {
        Body::File { size, data } => Ok((*size, data)),
        Body::Dir(_) => Err(Nfsstat3::ISDIR),
        _ => Err(Nfsstat3::INVAL),
    }
}

/// The data and size of regular file `id`, to change.
fn file_mut(tree: &mut Tree, id: u64) -> NfsResult<(&mut u64, &mut Blocks)> {
    match &mut tree.node_mut(id)?.body {
        Body::File { size, data } => Ok((size, data)),
        _ => Err(Nfsstat3::INVAL),
    }
}

impl Tree {
    /// CLONE of `count` octets of file `src` at `src_offset` to file `dst` at `dst_offset`
    /// for `cx` ([`crate::nfs::store::Store::clone_range`]).
    pub(in crate::nfs::store::memory) fn clone_range(
        &mut self,
        cx: &Cred,
        (src, src_offset): (u64, u64),
        (dst, dst_offset): (u64, u64),
        count: u64,
    ) -> NfsResult<()> {
        let (src_size, src_blocks) = file(self, src)?;
        let (dst_size, dst_blocks) = file(self, dst)?;
        for (id, want) in [(src, Want::READ), (dst, Want::WRITE)] {
            let (a, acl) = self.subject(id)?;
            identity::may_io(cx, &a, acl, want)?;
        }
        let at = (src_offset, dst_offset);
        let n = clone_span(src_size, at, count, src == dst, self.max_file_size)?;
        if n == 0 {
            return Ok(());
        }
        // As Linux's `generic_remap_checks`, with the store's block as the file system's:
        // offsets on block boundaries, the count too unless it reaches the source's end.
        let bs = self.alloc.bs as u64;
        if src_offset % bs != 0
            || dst_offset % bs != 0
            || (n % bs != 0 && src_offset + n != src_size)
        {
            return Err(Nfsstat3::INVAL);
        }
        let (whole, tail) = (n / bs, (n % bs) as usize);
        let mut grow = src_blocks.charge_of(self.alloc.bs, src_offset / bs, whole);
        grow += dst_blocks.growth(self.alloc.bs, dst_offset + whole * bs, tail);
        self.fits(grow)?;
        let before = dst_blocks.used(self.alloc.bs);
        if whole > 0 {
            let taken = src_blocks.take_whole(src_offset / bs, whole);
            file_mut(self, dst)?
                .1
                .put_whole(dst_offset / bs, whole, taken);
        }
        if tail > 0 {
            let done = whole * bs;
            self.clone_tail((src, src_offset + done), (dst, dst_offset + done), tail)?;
        }
        let now = self.stamp();
        let bsz = self.alloc.bs;
        let (size, blocks) = file_mut(self, dst)?;
        blocks.charged = blocks.count(bsz);
        let after = blocks.charged;
        *size = dst_size.max(dst_offset + n);
        let i = self.node_mut(dst)?;
        i.mode = identity::mode_after_write(cx, i.mode);
        i.mtime = now;
        i.ctime = now;
        i.excl = None;
        self.used = (self.used + after).saturating_sub(before);
        Ok(())
    }

    /// The last block of a clone that ends inside it, at the source's end (`len` octets):
    /// the source's block shared when the destination's holds no data past the range (the
    /// source's holds none past its end), otherwise its octets copied.
    fn clone_tail(&mut self, src: (u64, u64), dst: (u64, u64), len: usize) -> NfsResult<()> {
        let alloc = self.alloc.clone();
        let bs = alloc.bs as u64;
        let (src_size, from) = file(self, src.0)?;
        let (_, to) = file(self, dst.0)?;
        if to.held(dst.1 / bs) <= len {
            let taken = from.take_whole(src.1 / bs, 1);
            file_mut(self, dst.0)?.1.put_whole(dst.1 / bs, 1, taken);
        } else {
            let mut buf = vec![0u8; len];
            let n = from.read(alloc.bs, src_size, src.1, &mut buf);
            file_mut(self, dst.0)?.1.write(&alloc, dst.1, &buf[..n]);
        }
        Ok(())
    }
}
