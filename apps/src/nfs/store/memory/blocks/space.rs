//! Holes and reserved space in the memory store's files (NFSv4.2 SEEK, ALLOCATE and
//! DEALLOCATE, RFC 7862 §15.1, §15.4, §15.11): a block present in a file's map is data (its
//! unwritten octets read as zeros), a missing one is a hole, and the end of the file is a
//! hole too, as Linux's `SEEK_HOLE` reports it.
//!
//! Normal operation: ALLOCATE gives every block of the range its full length (zeros where
//! nothing was written; written octets are never touched), so the range is charged against
//! the capacity now and a later WRITE there cannot fail for room; the size grows to cover the
//! range. DEALLOCATE drops the blocks the range covers whole and zeroes the written octets of
//! the ones it covers in part (a registered block a READ reply holds is copied, as for a
//! WRITE); the size stays. Recovery: a range past the capacity changes nothing (NOSPC); a
//! punch past the end of the file does nothing there (no block lies past the end).

use super::super::tree::{Body, Tree};
use super::{Alloc, Blocks};
use crate::nfs::identity::{self, Cred, Want};
use crate::nfs::types::{NfsResult, Nfsstat3};

/// A buffer of zeros to write from, at most one block long.
fn zeros(alloc: &Alloc, len: usize) -> Vec<u8> {
    vec![0u8; len.min(alloc.bs)]
}

impl Blocks {
    /// The first offset at or after `offset` (below `size`) that is data, or with `hole` that
    /// is in a hole (the end of the file counts as one); `None` when there is none (`offset`
    /// at or past the end, or no data after it): NXIO.
    pub(in crate::nfs::store::memory) fn seek(
        &self,
        bs: usize,
        size: u64,
        offset: u64,
        hole: bool,
    ) -> Option<u64> {
        if offset >= size {
            return None;
        }
        let bs64 = bs as u64;
        let first = offset / bs64;
        let data = |i: &u64| !self.reserved.contains(i);
        if !hole {
            let idx = self.map.range(first..).map(|(i, _)| *i).find(data)?;
            let at = (idx * bs64).max(offset);
            return (at < size).then_some(at);
        }
        // The first block at or after `first` that is missing or only reserved.
        let mut idx = first;
        for (&i, _) in self.map.range(first..) {
            if i != idx || !data(&i) {
                break;
            }
            idx += 1;
        }
        Some((idx * bs64).max(offset).min(size))
    }

    /// Octets of charge reserving `[offset, offset + len)` would add: what writing every
    /// octet of it that no block holds yet would.
    pub(in crate::nfs::store::memory) fn reserve_growth(
        &self,
        bs: usize,
        offset: u64,
        len: u64,
    ) -> u64 {
        let mut grow = 0u64;
        self.for_each_missing(bs, offset, len, |at, n| {
            grow += self.growth(bs, at, n);
        });
        grow
    }

    /// Reserves `[offset, offset + len)`: zeros written where no block holds data yet.
    pub(in crate::nfs::store::memory) fn reserve(&mut self, alloc: &Alloc, offset: u64, len: u64) {
        let mut spans = Vec::new();
        self.for_each_missing(alloc.bs, offset, len, |at, n| spans.push((at, n)));
        let z = zeros(alloc, alloc.bs);
        let bs64 = alloc.bs as u64;
        for (at, n) in spans {
            let idx = at / bs64;
            // A block that was missing stays a hole for SEEK until something writes it.
            let fresh = !self.map.contains_key(&idx) || self.reserved.contains(&idx);
            self.write(alloc, at, &z[..n]);
            if fresh {
                self.reserved.insert(idx);
            }
        }
    }

    /// Calls `f(offset, octets)` for the part of each block of `[offset, offset + len)` past
    /// the data the block holds (all of it for a missing block).
    fn for_each_missing(&self, bs: usize, offset: u64, len: u64, mut f: impl FnMut(u64, usize)) {
        let bs64 = bs as u64;
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let idx = pos / bs64;
            let within = (pos % bs64) as usize;
            let chunk = (bs - within).min((end - pos).min(bs64) as usize);
            let have = self.map.get(&idx).map_or(0, |b| b.data().len());
            let from = have.max(within);
            if from < within + chunk {
                f(idx * bs64 + from as u64, within + chunk - from);
            }
            pos += chunk as u64;
        }
    }

    /// Punches `[offset, offset + len)`: blocks it covers whole dropped, the written octets of
    /// the others zeroed. Returns the octets of charge freed.
    pub(in crate::nfs::store::memory) fn punch(
        &mut self,
        alloc: &Alloc,
        offset: u64,
        len: u64,
    ) -> u64 {
        let before = self.used(alloc.bs);
        let bs64 = alloc.bs as u64;
        let end = offset.saturating_add(len);
        let whole_from = offset.div_ceil(bs64);
        let whole_to = end / bs64;
        if whole_from < whole_to {
            let gone: Vec<u64> = self
                .map
                .range(whole_from..whole_to)
                .map(|(&i, _)| i)
                .collect();
            for i in gone {
                self.map.remove(&i);
                self.reserved.remove(&i);
            }
        }
        let z = zeros(alloc, alloc.bs);
        // The partly covered blocks at each end: zero what they hold of the range.
        for idx in [offset / bs64, end.saturating_sub(1) / bs64] {
            let start = (idx * bs64).max(offset);
            let stop = ((idx + 1) * bs64).min(end);
            let Some(have) = self.map.get(&idx).map(|b| b.data().len() as u64) else {
                continue;
            };
            let stop = stop.min(idx * bs64 + have);
            if start < stop && !(start == idx * bs64 && stop == (idx + 1) * bs64) {
                let within = (start - idx * bs64) as usize;
                let n = (stop - start) as usize;
                if let Some(b) = self.map.get_mut(&idx) {
                    b.write(alloc, within, &z[..n]);
                }
            }
        }
        self.charged = self.count(alloc.bs);
        before - self.charged
    }
}

impl Tree {
    /// ALLOCATE (`punch` false) or DEALLOCATE of `[offset, offset + len)` of file `id` for
    /// `cx` ([`crate::nfs::store::Store::fallocate`]): a grown size moves mtime and ctime, a
    /// punch always does.
    pub(in crate::nfs::store::memory) fn fallocate(
        &mut self,
        cx: &Cred,
        id: u64,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> NfsResult<()> {
        let blocks = match &self.node(id)?.body {
            Body::File { data, .. } => data,
            _ => return Err(Nfsstat3::INVAL),
        };
        let (a, acl) = self.subject(id)?;
        identity::may_io(cx, &a, acl, Want::WRITE)?;
        if len == 0 || len > i64::MAX as u64 || offset > i64::MAX as u64 {
            return Err(Nfsstat3::INVAL);
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.max_file_size)
            .ok_or(Nfsstat3::FBIG)?;
        let bs = self.alloc.bs;
        // Each octet of the range not yet held costs at least an octet of charge, so a range
        // longer than the room left plus all the file holds cannot fit: NOSPC at once, before
        // anything walks the range block by block (a client may ask for 2^63 octets).
        let room = self.opts.capacity.saturating_sub(self.used);
        if !punch && len > room.saturating_add(blocks.used(bs)) {
            return Err(Nfsstat3::NOSPC);
        }
        let grow = if punch {
            0
        } else {
            blocks.reserve_growth(bs, offset, len)
        };
        self.fits(grow)?;
        let now = self.stamp();
        let alloc = &self.alloc;
        let i = self.inodes.get_mut(&id).ok_or(Nfsstat3::STALE)?;
        let Body::File { size, data } = &mut i.body else {
            return Err(Nfsstat3::INVAL);
        };
        let mut freed = 0;
        let moved = if punch {
            freed = data.punch(alloc, offset, len.min(size.saturating_sub(offset)));
            true
        } else {
            data.reserve(alloc, offset, len);
            let grew = end > *size;
            *size = (*size).max(end);
            grew
        };
        if moved {
            i.mtime = now;
            i.ctime = now;
            i.excl = None;
        }
        self.used = self.used + grow - freed;
        Ok(())
    }

    /// SEEK in file `id` for `cx` ([`crate::nfs::store::Store::seek`]).
    pub(in crate::nfs::store::memory) fn seek(
        &self,
        cx: &Cred,
        id: u64,
        offset: u64,
        hole: bool,
    ) -> NfsResult<(u64, bool)> {
        let (size, blocks) = super::super::readable(self, cx, id)?;
        let at = blocks
            .seek(self.alloc.bs, size, offset, hole)
            .ok_or(Nfsstat3::NXIO)?;
        Ok((at, at >= size))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Alloc, Blocks};

    const BS: usize = 16;

    fn file(blocks: &[u64]) -> Blocks {
        let alloc = Alloc::plain(BS);
        let mut b = Blocks::default();
        for &i in blocks {
            b.write(&alloc, i * BS as u64, &[7u8; BS]);
        }
        b
    }

    #[test]
    fn accepts_seek_of_data_and_holes_as_linux_reports_them() {
        // Blocks 1, 2 and 4 hold data; the file is 6 blocks long.
        let b = file(&[1, 2, 4]);
        let size = 6 * BS as u64;
        assert_eq!(b.seek(BS, size, 0, false), Some(16));
        assert_eq!(b.seek(BS, size, 20, false), Some(20));
        assert_eq!(b.seek(BS, size, 48, false), Some(64));
        assert_eq!(b.seek(BS, size, 80, false), None, "no data after: NXIO");
        assert_eq!(b.seek(BS, size, 0, true), Some(0));
        assert_eq!(b.seek(BS, size, 17, true), Some(48));
        assert_eq!(b.seek(BS, size, 70, true), Some(80));
        assert_eq!(b.seek(BS, size, 90, true), Some(90));
        assert_eq!(b.seek(BS, size, size, true), None, "at the end: NXIO");
        // A file whose data runs to its end: the hole is the end.
        let full = file(&[0, 1]);
        assert_eq!(full.seek(BS, 30, 3, true), Some(30));
    }

    #[test]
    fn accepts_reserve_keeping_data_and_punch_zeroing_it() {
        let alloc = Alloc::plain(BS);
        let mut b = Blocks::default();
        b.write(&alloc, 20, b"abc");
        let grow = b.reserve_growth(BS, 0, 40);
        b.reserve(&alloc, 0, 40);
        // Block 1 held 7 octets (16..23) before.
        assert_eq!(
            b.used(BS),
            grow + crate::nfs::store::memory::charge::block(7, BS)
        );
        let mut out = [9u8; 48];
        assert_eq!(b.read(BS, 48, 0, &mut out), 48);
        assert_eq!(&out[20..23], b"abc", "reserving keeps what was written");
        assert!(out[..20].iter().chain(&out[23..]).all(|&x| x == 0));
        // Blocks 0 and 2 were missing: reserved, they stay holes; block 1 held data.
        assert_eq!(b.seek(BS, 48, 0, true), Some(0));
        assert_eq!(b.seek(BS, 48, 0, false), Some(16));
        assert_eq!(b.seek(BS, 48, 16, true), Some(32));
        b.write(&alloc, 0, b"z");
        assert_eq!(b.seek(BS, 48, 0, false), Some(0), "written: data");
        b.write(&alloc, 0, &[0]);
        // Punch 10..40: block 1 (16..32) goes, blocks 0 and 2 are zeroed in part.
        let freed = b.punch(&alloc, 10, 30);
        assert!(freed > 0);
        assert_eq!(b.seek(BS, 48, 0, true), Some(16));
        assert_eq!(
            b.seek(BS, 48, 16, false),
            None,
            "block 2 is still only reserved"
        );
        let mut out = [9u8; 48];
        b.read(BS, 48, 0, &mut out);
        assert!(out.iter().all(|&x| x == 0));
    }
}
