//! What a work request becomes inside the soft NIC: receive entries (as queued on a receive
//! queue or SRQ), send-queue entries (the opcode in the NIC's terms, the SGEs, inline length),
//! and the pinned segment lists a copy runs over.
//!
//! Normal operation: entries are plain values copied into preallocated rings; a `SegList`
//! holds the pins of the registrations it copies through, so they cannot be deregistered
//! while the copy runs. Recovery: dropping a `SegList` unpins (a failed check drops it early).

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
}

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

pub(super) const EMPTY_ENTRY: SqEntry = SqEntry {
    wr_id: 0,
    op: SqOp::Send,
    flags: SendFlags::NONE,
    num_sge: 0,
    sges: [Sge {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_SGE],
    inline_len: 0,
};

/// A contiguous piece of registered memory taking part in a copy.
#[derive(Clone, Copy)]
pub(super) struct Seg {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

pub(super) const NO_SEG: Seg = Seg {
    ptr: core::ptr::null_mut(),
    len: 0,
};

/// Segments of one side of a copy, each pinned in its key table while the list lives.
pub(super) struct SegList<'a> {
    pub(super) segs: [Seg; MAX_SGE],
    pub(super) pins: [Option<Pin<'a>>; MAX_SGE],
    pub(super) n: usize,
    pub(super) total: u64,
}

impl<'a> SegList<'a> {
    pub(super) fn new() -> SegList<'a> {
        SegList {
            segs: [NO_SEG; MAX_SGE],
            pins: [const { None }; MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    pub(super) fn push(&mut self, seg: Seg, pin: Option<Pin<'a>>) {
        // n < MAX_SGE: callers push at most one segment per SGE of a WR (<= MAX_SGE).
        if self.n < MAX_SGE {
            self.segs[self.n] = seg;
            self.pins[self.n] = pin;
            self.n += 1;
            self.total += seg.len as u64;
        }
    }

    pub(super) fn segs(&self) -> &[Seg] {
        &self.segs[..self.n]
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
