//! Shared receive queues of the iWARP provider (`ibv_create_srq`, as Linux siw offers them):
//! one queue of receives that the Sends arriving on every QP attached to it take from, in
//! arrival order.
//!
//! Normal operation: `queue_recv` stages a receive owner-locally, `flush_recv` (the doorbell)
//! appends the staged ones to the shared queue; a QP placing the first segment of a Send takes
//! the receive at the head (`qp/place.rs`) and checks its SGEs against the SRQ's protection
//! domain.
//!
//! Recovery: a full queue refuses the receive with `ENOMEM` (nothing queued). A QP's error does
//! not flush the SRQ (other QPs may still use it): only the receive that QP had taken flushes.
//! A Send that finds the SRQ empty is an error of the sender (iWARP has no RNR retry): the
//! receiving QP terminates the connection ("invalid MSN - no buffer available").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::device::{lock, DevInner};
use super::sgl::{RqEntry, Sgl};
use crate::verbs::{errno, validate, RecvWr, SharedReceiveQueue, VerbsCall, VerbsError};

/// The part of an SRQ its QPs share.
pub(crate) struct SrqInner {
    pub(crate) dev: Arc<DevInner>,
    /// The protection domain the receives' SGEs are checked in.
    pub(crate) pd: u32,
    pub(crate) q: Mutex<VecDeque<RqEntry>>,
}

impl SrqInner {
    /// The receive at the head, taken by a QP for an arriving Send.
    pub(crate) fn take(&self) -> Option<RqEntry> {
        lock(&self.q).pop_front()
    }
}

/// A shared receive queue.
pub struct IwarpSrq {
    pub(crate) inner: Arc<SrqInner>,
    staged: Vec<RqEntry>,
    max_wr: u32,
    max_sge: u32,
    doorbells: u64,
}

impl core::fmt::Debug for IwarpSrq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IwarpSrq(max_wr {})", self.max_wr)
    }
}

impl IwarpSrq {
    /// An SRQ of `max_wr` receives of up to `max_sge` SGEs in PD `pd` (limits checked by the
    /// caller).
    pub(crate) fn new(dev: &Arc<DevInner>, pd: u32, max_wr: u32, max_sge: u32) -> IwarpSrq {
        IwarpSrq {
            inner: Arc::new(SrqInner {
                dev: dev.clone(),
                pd,
                q: Mutex::new(VecDeque::with_capacity(max_wr as usize)),
            }),
            staged: Vec::with_capacity(max_wr as usize),
            max_wr,
            max_sge,
            doorbells: 0,
        }
    }
}

impl SharedReceiveQueue for IwarpSrq {
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        validate::recv_wr(wr, self.max_sge, VerbsCall::PostSrqRecv)?;
        if lock(&self.inner.q).len() + self.staged.len() >= self.max_wr as usize {
            return Err(VerbsError::new(VerbsCall::PostSrqRecv, errno::ENOMEM));
        }
        self.staged.push(RqEntry {
            wr_id: wr.wr_id,
            sgl: Sgl::new(wr.sgl),
        });
        Ok(())
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        lock(&self.inner.q).extend(self.staged.drain(..));
        self.doorbells += 1;
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }
}
