//! File data of the memory store in fixed-size blocks, allocated lazily: a sparse file costs
//! only the blocks written, holes read as zeros, and no file needs contiguous memory.
//!
//! Normal operation: each block is a `Vec<u8>` of at most `block_size` octets that grows to
//! the highest octet written inside it (a small file costs its size, not a whole block).
//! Recovery: nothing to recover; callers check capacity with [`Blocks::growth`] before
//! [`Blocks::write`] so a write that does not fit changes nothing.
//!
//! Backing by registered memory (the engine's `PoolBuf`): the container is private to this
//! file on purpose. To serve READ and WRITE payloads straight from RDMA-registered memory,
//! replace `Vec<u8>` by a `PoolBuf` of exactly `block_size` octets taken from a pool whose
//! buffer size is `block_size`, keep a per-block high-water mark in place of `Vec::len`
//! (octets past it read as zeros, exactly as today), and charge `block_size` per block to the
//! capacity. Nothing outside this file changes: the store only calls `read`, `growth`,
//! `write`, `truncate` and `used`.

use std::collections::BTreeMap;

/// A file's data: block index → the block's octets (at most `block_size`).
#[derive(Debug, Default)]
pub(super) struct Blocks {
    map: BTreeMap<u64, Vec<u8>>,
}

impl Blocks {
    /// Octets of memory the blocks hold.
    pub(super) fn used(&self) -> u64 {
        self.map.values().map(|b| b.len() as u64).sum()
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
            match self.map.get(&(pos / bs64)) {
                Some(block) if within < block.len() => {
                    let have = (block.len() - within).min(chunk);
                    dst[..have].copy_from_slice(&block[within..within + have]);
                    dst[have..].fill(0);
                }
                _ => dst.fill(0),
            }
            done += chunk;
        }
        n
    }

    /// Octets of memory a write of `len` octets at `offset` would add.
    pub(super) fn growth(&self, bs: usize, offset: u64, len: usize) -> u64 {
        let mut grow = 0u64;
        self.for_each_span(bs, offset, len, |idx, within, chunk, _| {
            let have = self.map.get(&idx).map_or(0, |b| b.len());
            grow += (within + chunk).saturating_sub(have) as u64;
        });
        grow
    }

    /// Writes `data` at `offset`, allocating blocks as needed.
    pub(super) fn write(&mut self, bs: usize, offset: u64, data: &[u8]) {
        let mut spans = Vec::new();
        self.for_each_span(bs, offset, data.len(), |idx, within, chunk, done| {
            spans.push((idx, within, chunk, done));
        });
        for (idx, within, chunk, done) in spans {
            let block = self.map.entry(idx).or_default();
            if block.len() < within + chunk {
                block.resize(within + chunk, 0);
            }
            block[within..within + chunk].copy_from_slice(&data[done..done + chunk]);
        }
    }

    /// Drops the data at and past `size`; returns the octets of memory freed.
    pub(super) fn truncate(&mut self, bs: usize, size: u64) -> u64 {
        let before = self.used();
        let bs64 = bs as u64;
        let first_gone = size.div_ceil(bs64);
        drop(self.map.split_off(&first_gone));
        let tail = (size % bs64) as usize;
        if tail != 0 {
            if let Some(block) = self.map.get_mut(&(size / bs64)) {
                block.truncate(tail);
            }
        }
        before - self.used()
    }

    /// Calls `f(block index, offset in block, octets, octets before)` for each block a range
    /// touches.
    fn for_each_span(
        &self,
        bs: usize,
        offset: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, usize, usize),
    ) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_blocks_read_zeros_and_count_only_written_octets() {
        let mut b = Blocks::default();
        assert_eq!(b.growth(8, 20, 3), 7);
        b.write(8, 20, b"abc");
        assert_eq!(b.used(), 7);
        let mut out = [0xffu8; 30];
        assert_eq!(b.read(8, 23, 0, &mut out), 23);
        assert_eq!(&out[..20], &[0u8; 20]);
        assert_eq!(&out[20..23], b"abc");
        // A write across a block boundary.
        b.write(8, 6, b"xyzw");
        let mut out = [0u8; 6];
        assert_eq!(b.read(8, 23, 5, &mut out), 6);
        assert_eq!(&out, b"\0xyzw\0");
        assert_eq!(b.truncate(8, 7), 2 + 7 + 1);
        assert_eq!(b.used(), 7);
        let mut out = [1u8; 4];
        assert_eq!(b.read(8, 23, 6, &mut out), 4);
        assert_eq!(&out, b"x\0\0\0");
    }
}
