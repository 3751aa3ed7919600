//! Soft shared receive queues: one ring of receive entries any attached QP's incoming SENDs
//! take from.
//!
//! Normal operation: `queue_recv` stages an entry owner-locally, `flush_recv` (the doorbell)
//! pushes the staged entries to the lock-free ring. The ring stays an MPMC `ArrayQueue` (not the
//! in-place SPSC ring of a QP's own receive queue): its consumers are the delivering engines of
//! every attached QP, each serialized only by its own QP's receive token, so several may take at
//! once. Recovery: an SRQ is not flushed by a QP's
//! error (other QPs may still use it); its receives stay until taken or the SRQ is dropped.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::super::DeviceInner;
use super::RecvEntry;
use crate::verbs::{errno, validate, RecvWr, SharedReceiveQueue, VerbsCall, VerbsError};

pub(crate) struct SrqShared {
    pub(crate) dev: Arc<DeviceInner>,
    pub(super) pd: u32,
    pub(super) ring: ArrayQueue<RecvEntry>,
}

/// A soft shared receive queue.
pub struct SoftSrq {
    pub(crate) shared: Arc<SrqShared>,
    staged: Vec<RecvEntry>,
    max_wr: u32,
    max_sge: u32,
    doorbells: u64,
}

impl core::fmt::Debug for SoftSrq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftSrq(max_wr {})", self.max_wr)
    }
}

impl SoftSrq {
    pub(crate) fn new(dev: Arc<DeviceInner>, pd: u32, max_wr: u32, max_sge: u32) -> SoftSrq {
        SoftSrq {
            shared: Arc::new(SrqShared {
                dev,
                pd,
                ring: ArrayQueue::new(max_wr.max(1) as usize),
            }),
            staged: Vec::with_capacity(max_wr as usize),
            max_wr,
            max_sge,
            doorbells: 0,
        }
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let err = |e| Err(VerbsError::new(VerbsCall::PostSrqRecv, e));
        validate::recv_wr(wr, self.max_sge, VerbsCall::PostSrqRecv)?;
        if self.shared.ring.len() + self.staged.len() >= self.max_wr as usize {
            return err(errno::ENOMEM);
        }
        self.staged.push(RecvEntry::from_wr(wr));
        Ok(())
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        for e in self.staged.drain(..) {
            // Cannot fail: occupancy was checked against the ring's capacity when queued and
            // only consumers run concurrently.
            let _ = self.shared.ring.push(e);
        }
        self.doorbells += 1;
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }
}
