//! What a work request becomes inside the soft NIC: receive entries (as queued on a receive
//! queue or SRQ), send-queue entries (the opcode in the NIC's terms, the SGEs, inline length),
//! and the pinned segment lists a copy runs over.
//!
//! Normal operation: entries are plain values built in place in preallocated rings (a QP's
//! receive entries in its receive ring's slots) or copied into them (SRQ, send queue); a `SegList`
//! holds the pins of the registrations it copies through, so they cannot be deregistered
//! while the copy runs. Recovery: dropping a `SegList` unpins (a failed check drops it early).

use core::mem::MaybeUninit;

use super::super::mr::{BindReq, Pin, MAX_SGE};
use crate::verbs::{RecvWr, SendFlags, Sge, WcOpcode};

#[derive(Clone, Copy)]
pub(crate) struct RecvEntry {
    pub(super) wr_id: u64,
    pub(super) num_sge: u8,
    pub(super) sges: [Sge; MAX_SGE],
}

impl RecvEntry {
    pub(super) fn from_wr(wr: &RecvWr<'_>) -> RecvEntry {
        let mut e = RecvEntry {
            wr_id: wr.wr_id,
            num_sge: wr.sgl.len() as u8,
            sges: [Sge::default(); MAX_SGE],
        };
        e.sges[..wr.sgl.len()].copy_from_slice(wr.sgl);
        e
    }

    /// Overwrites this (staged, reused) entry with `wr`, writing only the SGEs it uses: the
    /// entries past `num_sge` are stale and never read.
    pub(super) fn set_from_wr(&mut self, wr: &RecvWr<'_>) {
        self.wr_id = wr.wr_id;
        self.num_sge = wr.sgl.len() as u8;
        self.sges[..wr.sgl.len()].copy_from_slice(wr.sgl);
    }
}

/// The SGE array of an unused entry.
const NO_SGES: [Sge; MAX_SGE] = [Sge {
    addr: 0,
    len: 0,
    lkey: 0,
}; MAX_SGE];

/// An unused receive entry (the filler of preallocated staging).
pub(super) const EMPTY_RECV: RecvEntry = RecvEntry {
    wr_id: 0,
    num_sge: 0,
    sges: NO_SGES,
};

#[derive(Clone, Copy)]
pub(super) enum SqOp {
    Send,
    SendInv(u32),
    Write { raddr: u64, rkey: u32 },
    Read { raddr: u64, rkey: u32 },
    LocalInv(u32),
    Bind(BindReq),
}

impl SqOp {
    pub(super) fn opcode(&self) -> WcOpcode {
        match self {
            SqOp::Send | SqOp::SendInv(_) => WcOpcode::SEND,
            SqOp::Write { .. } => WcOpcode::RDMA_WRITE,
            SqOp::Read { .. } => WcOpcode::RDMA_READ,
            SqOp::LocalInv(_) => WcOpcode::LOCAL_INV,
            SqOp::Bind(_) => WcOpcode::BIND_MW,
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct SqEntry {
    pub(super) wr_id: u64,
    pub(super) op: SqOp,
    pub(super) flags: SendFlags,
    pub(super) num_sge: u8,
    pub(super) sges: [Sge; MAX_SGE],
    /// With `INLINE`: the data was copied into the entry's inline area.
    pub(super) inline_len: u32,
}

impl SqEntry {
    /// The SGEs in use (the rest of `sges` is stale: entries are reused without clearing).
    #[inline]
    pub(super) fn used_sges(&self) -> &[Sge] {
        &self.sges[..(self.num_sge as usize).min(MAX_SGE)]
    }

    /// Copies `src` into this entry, writing only the SGEs `src` uses (the rest stay stale
    /// and are never read), so moving an entry costs its used part, not its capacity.
    #[inline]
    pub(super) fn copy_used_from(&mut self, src: &SqEntry) {
        self.wr_id = src.wr_id;
        self.op = src.op;
        self.flags = src.flags;
        self.num_sge = src.num_sge;
        self.inline_len = src.inline_len;
        let used = src.used_sges();
        for (d, s) in self.sges.iter_mut().zip(used) {
            *d = *s;
        }
    }
}

pub(super) const EMPTY_ENTRY: SqEntry = SqEntry {
    wr_id: 0,
    op: SqOp::Send,
    flags: SendFlags::NONE,
    num_sge: 0,
    sges: NO_SGES,
    inline_len: 0,
};

/// A contiguous piece of registered memory taking part in a copy.
#[derive(Clone, Copy)]
pub(super) struct Seg {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

/// Segments of one side of a copy, each pinned in its key table while the list lives.
///
/// Only the first `n` entries of `segs` and `pins` are initialized: a list is built on every
/// SEND, RDMA Write and RDMA Read, and leaving the unused capacity unwritten spares clearing
/// `MAX_SGE` entries of each each time.
pub(super) struct SegList<'a> {
    segs: [MaybeUninit<Seg>; MAX_SGE],
    pins: [MaybeUninit<Option<Pin<'a>>>; MAX_SGE],
    pub(super) n: usize,
    pub(super) total: u64,
}

impl<'a> SegList<'a> {
    pub(super) fn new() -> SegList<'a> {
        SegList {
            segs: [const { MaybeUninit::uninit() }; MAX_SGE],
            pins: [const { MaybeUninit::uninit() }; MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    pub(super) fn push(&mut self, seg: Seg, pin: Option<Pin<'a>>) {
        // n < MAX_SGE: callers push at most one segment per SGE of a WR (<= MAX_SGE).
        if self.n < MAX_SGE {
            self.segs[self.n].write(seg);
            self.pins[self.n].write(pin);
            self.n += 1;
            self.total += seg.len as u64;
        }
    }

    pub(super) fn segs(&self) -> &[Seg] {
        // SAFETY: the first `n` entries were written by `push` (n <= MAX_SGE), and
        // `MaybeUninit<Seg>` has the layout of `Seg`.
        unsafe { core::slice::from_raw_parts(self.segs.as_ptr().cast::<Seg>(), self.n) }
    }
}

impl Drop for SegList<'_> {
    fn drop(&mut self) {
        for p in &mut self.pins[..self.n] {
            // SAFETY: the first `n` pins were written by `push` and are dropped once, here.
            unsafe { p.assume_init_drop() };
        }
    }
}

/// Copies `total` octets from the `src` segments to the `dst` segments, in order.
///
/// # Safety
/// Every segment must lie inside memory that is registered and pinned (its registration cannot
/// end while the pin lives), or inside an engine-owned inline buffer; `total` must not exceed
/// either side's length. Overlap between source and destination is allowed (memmove), since
/// loopback RDMA may copy within one region. Concurrent access by the application is part of
/// the registration contract (`Registrar::register` is unsafe).
pub(super) unsafe fn copy_segs(src: &[Seg], dst: &[Seg], mut total: usize) {
    let (mut i, mut j, mut so, mut dof) = (0usize, 0usize, 0usize, 0usize);
    while total > 0 && i < src.len() && j < dst.len() {
        let n = (src[i].len - so).min(dst[j].len - dof).min(total);
        // SAFETY: per the function contract both ranges are inside live, pinned memory.
        unsafe { core::ptr::copy(src[i].ptr.add(so), dst[j].ptr.add(dof), n) };
        total -= n;
        so += n;
        dof += n;
        if so == src[i].len {
            i += 1;
            so = 0;
        }
        if dof == dst[j].len {
            j += 1;
            dof = 0;
        }
    }
}
