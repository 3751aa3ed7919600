//! Pieces shared by the connection fuzz targets: one flat registered region as the engine's
//! host memory, buffers carved out of it, and completions.
use rpcrdma_engine::conn::{HostMemory, LocalBuf};
use rpcrdma_engine::verbs::{Completion, WcFlags, WcOpcode, WcStatus, WrId};

/// Start address of the region.
pub const BASE: u64 = 0x10_0000;
/// Local key of the region.
pub const LKEY: u32 = 0x77;

/// One flat registered region.
pub struct Flat(pub Vec<u8>);

impl HostMemory for Flat {
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(BASE)?).ok()?;
        self.0.get(off..off.checked_add(len)?)
    }
    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let off = usize::try_from(addr.checked_sub(BASE)?).ok()?;
        self.0.get_mut(off..off.checked_add(len)?)
    }
}

/// Carves consecutive buffers out of the region.
pub struct Carver(pub u64);

impl Carver {
    /// The next `len` octets.
    pub fn take(&mut self, len: u32) -> LocalBuf {
        let b = LocalBuf {
            addr: self.0,
            len,
            lkey: LKEY,
        };
        self.0 += u64::from(len);
        b
    }

    /// The region the buffers carved so far need.
    pub fn region(&self) -> Flat {
        Flat(vec![0u8; (self.0 - BASE) as usize])
    }
}

/// A completion of `wr_id`.
pub fn wc(wr_id: WrId, status: WcStatus, opcode: WcOpcode, len: u32) -> Completion {
    Completion {
        wr_id: wr_id.raw(),
        status,
        opcode,
        byte_len: len,
        qp_num: 1,
        src_qp: 2,
        flags: WcFlags::NONE,
        invalidated_rkey: 0,
        vendor_err: 0,
    }
}
