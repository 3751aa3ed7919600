//! Posting a connection's work requests to a verbs provider: the one translation from the
//! sans-IO engine's [`WorkRequest`]s to [`QueuePair::queue_recv`] / [`QueuePair::queue_send`]
//! calls, used by every caller that drives a [`Connection`] over a real provider (the poller's
//! per-connection driver, the engine's soft-provider test harness). It sits between [`conn`]
//! (which never calls a provider: it is sans-IO) and [`verbs`] (which knows nothing of
//! connections), so neither module imports the other for it.
//!
//! Normal operation: [`post_work_requests`] drains the connection's queued work requests
//! ([`Connection::drain_wrs`]: by reference, from the connection's ring); each
//! becomes one queued verbs work request ([`queue_work_request`]) whose `wr_id` is the engine's
//! [`WrId`](crate::verbs::WrId) (kind, slot) unchanged, every send-queue request signaled.
//! Memory-window slot indices name entries of the caller's `P::Mw` array, registration lkeys
//! are resolved to `P::Mr` by the caller. Then ONE receive doorbell and ONE send doorbell are
//! rung for the whole batch, receives first, so they are posted before any Send of the same
//! batch can draw a reply.
//!
//! Shared receives ([`crate::conn::srq`]): [`collect_released`] moves the buffers a connection
//! handed back into the node's [`SrqPool`], and [`post_srq_recvs`] posts every buffer waiting
//! in the pool to the SRQ with one doorbell; the node calls both before it posts a connection's
//! sends, so a buffer released by a reply is posted again before that reply can draw the
//! peer's next call.
//!
//! Recovery: the first verbs call that fails stops the batch and is returned with the counts
//! so far; the requests already queued and not flushed are left to the QP (the caller is
//! expected to disconnect it: a QP whose post failed cannot be trusted) and those not drained
//! stay in the connection. A BIND_MW naming a window slot or lkey the caller cannot resolve
//! fails as `ibv_post_send` would, with `EINVAL`.
//!
//! [`conn`]: crate::conn
//! [`verbs`]: crate::verbs

use crate::conn::srq::SrqPool;
use crate::conn::{Connection, WorkRequest};
use crate::verbs::{
    errno, MwBind, Provider, QueuePair, RecvWr, SendFlags, SendOp, SendWr, Sge, SharedReceiveQueue,
    VerbsCall, VerbsError,
};

/// Counts of one [`post_work_requests`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Posted {
    /// Work requests queued (including one whose queueing failed).
    pub wrs: u32,
    /// Doorbells rung (0..=2; a doorbell whose flush failed counts).
    pub doorbells: u32,
    /// Sends posted as Send With Invalidate (including one whose queueing failed).
    pub invalidates: u32,
    /// Memory-window binds posted (including one whose queueing failed).
    pub binds: u32,
    /// Local invalidates posted (including one whose queueing failed).
    pub local_invalidates: u32,
}

/// Which queue a [`queue_work_request`] went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// The receive queue.
    Recv,
    /// The send queue.
    Send,
}

/// Queues one work request on `qp` (no doorbell). `mws` are the connection's memory windows
/// by slot index; `mr_of` resolves a registration's lkey (only called for BIND_MW).
#[inline]
pub fn queue_work_request<'a, P: Provider>(
    qp: &mut P::Qp,
    wr: &WorkRequest,
    mws: &'a [P::Mw],
    mr_of: impl FnOnce(u32) -> Option<&'a P::Mr>,
) -> Result<Queued, VerbsError> {
    queue_counted::<P>(qp, wr, mws, mr_of, &mut Posted::default())
}

/// [`queue_work_request`], counting the request in `p` by kind (before it is queued, so a
/// request whose queueing fails counts too) in the same match that translates it.
#[inline(always)]
fn queue_counted<'a, P: Provider>(
    qp: &mut P::Qp,
    wr: &WorkRequest,
    mws: &'a [P::Mw],
    mr_of: impl FnOnce(u32) -> Option<&'a P::Mr>,
    p: &mut Posted,
) -> Result<Queued, VerbsError> {
    p.wrs += 1;
    match *wr {
        WorkRequest::Recv { wr_id, sge } => {
            let sgl = [sge];
            qp.queue_recv(&RecvWr {
                wr_id: wr_id.raw(),
                sgl: &sgl,
            })?;
            Ok(Queued::Recv)
        }
        WorkRequest::Send {
            wr_id,
            ref sges,
            nsge,
            invalidate,
        } => {
            let op = match invalidate {
                Some(rkey) => {
                    p.invalidates += 1;
                    SendOp::SendWithInv { rkey }
                }
                None => SendOp::Send,
            };
            let n = usize::from(nsge).min(sges.len());
            signaled::<P>(qp, wr_id.raw(), op, &sges[..n]).map(|()| Queued::Send)
        }
        WorkRequest::RdmaWrite {
            wr_id,
            local,
            remote_addr,
            rkey,
        } => {
            let op = SendOp::RdmaWrite { remote_addr, rkey };
            signaled::<P>(qp, wr_id.raw(), op, &[local]).map(|()| Queued::Send)
        }
        WorkRequest::RdmaRead {
            wr_id,
            local,
            remote_addr,
            rkey,
        } => {
            let op = SendOp::RdmaRead { remote_addr, rkey };
            signaled::<P>(qp, wr_id.raw(), op, &[local]).map(|()| Queued::Send)
        }
        WorkRequest::BindMw {
            wr_id,
            mw,
            addr,
            len,
            lkey,
            access,
            new_rkey,
        } => {
            p.binds += 1;
            let (Some(mw), Some(mr)) = (mws.get(mw as usize), mr_of(lkey)) else {
                return Err(VerbsError::new(VerbsCall::PostSend, errno::EINVAL));
            };
            let op = SendOp::BindMw(MwBind {
                mw,
                mr,
                rkey: new_rkey,
                addr,
                len: u64::from(len),
                access,
            });
            signaled::<P>(qp, wr_id.raw(), op, &[]).map(|()| Queued::Send)
        }
        WorkRequest::LocalInv { wr_id, rkey } => {
            p.local_invalidates += 1;
            signaled::<P>(qp, wr_id.raw(), SendOp::LocalInv { rkey }, &[]).map(|()| Queued::Send)
        }
    }
}

/// Posts every work request `conn` has queued on `qp`: each queued with
/// [`queue_work_request`], then one `flush_recv` and one `flush_send` (each only when its queue
/// got a request). On the first verbs error the batch stops and the error is returned beside
/// the counts so far (see the module documentation for what the caller must do).
#[inline]
pub fn post_work_requests<'a, P: Provider>(
    conn: &mut Connection,
    qp: &mut P::Qp,
    mws: &'a [P::Mw],
    mut mr_of: impl FnMut(u32) -> Option<&'a P::Mr>,
) -> (Posted, Result<(), VerbsError>) {
    let mut p = Posted::default();
    if conn.pending_wrs() == 0 {
        return (p, Ok(()));
    }
    let (mut sends, mut recvs) = (0u32, 0u32);
    // Each request is posted from its slot of the connection's ring (by reference).
    let drained = conn.drain_wrs(|wr| {
        match queue_counted::<P>(qp, wr, mws, &mut mr_of, &mut p)? {
            Queued::Recv => recvs += 1,
            Queued::Send => sends += 1,
        }
        Ok(())
    });
    if let Err(e) = drained {
        return (p, Err(e));
    }
    if recvs > 0 {
        p.doorbells += 1;
        if let Err(e) = qp.flush_recv() {
            return (p, Err(e));
        }
    }
    if sends > 0 {
        p.doorbells += 1;
        if let Err(e) = qp.flush_send() {
            return (p, Err(e));
        }
    }
    (p, Ok(()))
}

#[inline]
fn signaled<P: Provider>(
    qp: &mut P::Qp,
    wr_id: u64,
    op: SendOp<'_, P>,
    sgl: &[Sge],
) -> Result<(), VerbsError> {
    qp.queue_send(&SendWr {
        wr_id,
        op,
        sgl,
        flags: SendFlags::SIGNALED,
    })
}

/// Moves every shared receive `conn` handed back into `pool`; (buffers taken, buffers refused
/// by the pool because they were not held — a double return, which the pool ignores).
#[inline]
pub fn collect_released(conn: &mut Connection, pool: &mut SrqPool) -> (u32, u32) {
    let (mut taken, mut refused) = (0u32, 0u32);
    while let Some(r) = conn.poll_released_recv() {
        if pool.returned(r) {
            taken += 1;
        } else {
            refused += 1;
        }
    }
    (taken, refused)
}

/// Posts every buffer waiting in `pool` to `srq` (one doorbell when any); how many. On a verbs
/// error the buffer being queued waits in the pool again and the error is returned (buffers
/// queued before it are left to the SRQ's next flush).
#[inline]
pub fn post_srq_recvs<S: SharedReceiveQueue>(
    pool: &mut SrqPool,
    srq: &mut S,
) -> (u32, Result<(), VerbsError>) {
    let mut n = 0u32;
    while let Some((wr_id, sge)) = pool.next_to_post() {
        let sgl = [sge];
        if let Err(e) = srq.queue_recv(&RecvWr {
            wr_id: wr_id.raw(),
            sgl: &sgl,
        }) {
            pool.unpost(wr_id);
            return (n, Err(e));
        }
        n += 1;
    }
    if n == 0 {
        return (0, Ok(()));
    }
    (n, srq.flush_recv())
}
