//! Receive-side placement of the iWARP provider: each RDMAP segment the peer sent lands
//! straight in registered memory after its STag, bounds and access checks (RFC 5040 and RFC
//! 5041 tagged and untagged buffer models), and RDMA Read Requests are served from registered
//! memory. Also the gather of a local scatter/gather list into a segment being sent.
//!
//! Normal operation: an RDMA Write segment is copied to its tagged offset under an STag with
//! REMOTE_WRITE of the QP's protection domain (a region, or a memory window bound to this QP);
//! a Send segment to its message offset in the receive at the head of the receive queue (the
//! QP's own or its SRQ's), which completes on the last segment, after the invalidation a Send
//! with Invalidate asks for; a Read Response segment into the sink of the oldest outstanding
//! RDMA Read; a Read Request, checked for REMOTE_READ and bounds, queues its response, sent in
//! segments by [`send_read_response`] as the socket takes them. Every check holds the device's
//! STag table lock across the copy, so a registration cannot go away under a copy.
//!
//! Recovery: a segment that fails a check is not placed; it records the Terminate code RFC
//! 5040 / RFC 5041 name for the fault (invalid STag, base or bounds, access rights, STag not
//! associated, no receive buffer, message too long, invalid MO), and everything after it on
//! the stream is ignored: the QP sends the Terminate and goes to ERROR. A receive that failed
//! completes with `LOC_LEN_ERR` (too long), `LOC_PROT_ERR` (its own SGE was bad) or
//! `REM_INV_REQ_ERR` (the STag of a Send with Invalidate cannot be invalidated: Terminate
//! "STag cannot be invalidated").

use super::{QpCore, ReadResponse, SqState};
use crate::verbs::iwarp::ddp;
use crate::verbs::iwarp::device::lock;
use crate::verbs::iwarp::rdmap::{self, Message, ReadRequest};
use crate::verbs::iwarp::sgl::Sgl;
use crate::verbs::iwarp::socket::SendError;
use crate::verbs::iwarp::stag::{Fault, InvalidateError, MrTable};
use crate::verbs::iwarp::term::{TermCode, LAYER_DDP, LAYER_RDMAP};
use crate::verbs::{Access, QpState, WcFlags, WcStatus};

/// The Terminate code of a tagged-buffer fault on an RDMA Write or Read Response (RFC 5041
/// tagged buffer errors; missing rights are an RDMAP remote protection error, RFC 5040).
fn tagged_code(f: Fault) -> TermCode {
    let t = |ecode| TermCode::new(LAYER_DDP, ddp::ETYPE_TAGGED, ecode);
    match f {
        Fault::InvalidStag => t(ddp::ECODE_T_INVALID_STAG),
        Fault::Bounds => t(ddp::ECODE_T_BASE_BOUNDS),
        Fault::WrongPd => t(ddp::ECODE_T_STAG_NOT_ASSOC),
        Fault::Access => TermCode::new(
            LAYER_RDMAP,
            rdmap::ETYPE_REMOTE_PROTECTION,
            rdmap::ECODE_ACCESS_RIGHTS,
        ),
    }
}

/// The Terminate code of a Read Request whose source fails its check (RFC 5040 remote
/// protection errors).
fn read_code(f: Fault) -> TermCode {
    let ecode = match f {
        Fault::InvalidStag => rdmap::ECODE_INVALID_STAG,
        Fault::Bounds => rdmap::ECODE_BASE_BOUNDS,
        Fault::Access => rdmap::ECODE_ACCESS_RIGHTS,
        Fault::WrongPd => rdmap::ECODE_STAG_NOT_ASSOC,
    };
    TermCode::new(LAYER_RDMAP, rdmap::ETYPE_REMOTE_PROTECTION, ecode)
}

fn untagged(ecode: u8) -> TermCode {
    TermCode::new(LAYER_DDP, ddp::ETYPE_UNTAGGED, ecode)
}

/// Walks the part `[offset, offset + len)` of `sgl`, checking each SGE touched (its whole
/// extent: lkey, protection domain `pd`, bounds, rights `need`) and handing `f` the address in
/// the SGE and the position in the range for each piece.
fn walk(
    mrs: &MrTable,
    pd: u32,
    sgl: &Sgl,
    offset: u64,
    len: usize,
    need: Access,
    mut f: impl FnMut(*mut u8, usize, usize),
) -> Result<(), Fault> {
    let mut skip = offset;
    let mut done = 0usize;
    for s in sgl.as_slice() {
        if done == len {
            break;
        }
        let slen = u64::from(s.len);
        if skip >= slen {
            skip -= slen;
            continue;
        }
        let base = mrs.check(s.lkey, pd, s.addr, slen, need)?;
        let n = ((slen - skip) as usize).min(len - done);
        // The offset stays inside the SGE just checked.
        f(base.wrapping_add(skip as usize), done, n);
        done += n;
        skip = 0;
    }
    if done < len {
        return Err(Fault::Bounds);
    }
    Ok(())
}

/// Copies `out.len()` octets of `sgl` from `offset` into `out` (the local gather of a Send or
/// Write segment).
pub(crate) fn gather(core: &QpCore, sgl: &Sgl, offset: u64, out: &mut [u8]) -> Result<(), Fault> {
    let mrs = lock(&core.dev.mrs);
    let len = out.len();
    walk(&mrs, core.pd, sgl, offset, len, Access::NONE, |p, at, n| {
        // SAFETY: `p..p + n` lies inside a registration checked under the table lock (held
        // until the copy is done); `out[at..at + n]` is in bounds (walk never exceeds len).
        unsafe { core::ptr::copy_nonoverlapping(p, out[at..at + n].as_mut_ptr(), n) };
    })
}

/// Copies `data` into the memory at `dst` (checked by the caller under the table lock).
///
/// # Safety
/// `dst..dst + data.len()` lies in a live registration and the table lock is held.
unsafe fn put(dst: *mut u8, data: &[u8]) {
    core::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
}

/// Places one segment the peer sent, or records the fault that ends the connection.
pub(crate) fn on_message(core: &mut QpCore, m: Message<'_>) {
    if core.fault.is_some() || core.state != QpState::Rts {
        return;
    }
    let r = match m {
        Message::Tagged {
            read_response: false,
            stag,
            to,
            payload,
            ..
        } => place_write(core, stag, to, payload),
        Message::Tagged {
            read_response: true,
            stag,
            to,
            payload,
            last,
        } => place_read_response(core, stag, to, payload, last),
        Message::ReadRequest(rq) => read_request(core, rq),
        Message::Send {
            last,
            msn,
            mo,
            payload,
            invalidate,
            ..
        } => place_send(core, (msn, mo, last), payload, invalidate),
        // The endpoint ends the stream on a Terminate before handing anything on.
        Message::Terminate(_) => Ok(()),
    };
    if let Err(code) = r {
        core.fault = Some(code);
    }
}

fn place_write(core: &mut QpCore, stag: u32, to: u64, payload: &[u8]) -> Result<(), TermCode> {
    let mrs = lock(&core.dev.mrs);
    let n = payload.len() as u64;
    let dst = mrs
        .check_remote(stag, (core.pd, core.qpn), to, n, Access::REMOTE_WRITE)
        .map_err(tagged_code)?;
    // SAFETY: checked just above, under the table lock still held.
    unsafe { put(dst, payload) };
    Ok(())
}

fn place_read_response(
    core: &mut QpCore,
    stag: u32,
    to: u64,
    payload: &[u8],
    last: bool,
) -> Result<(), TermCode> {
    let invalid = tagged_code(Fault::InvalidStag);
    let i = core
        .sq
        .iter()
        .position(|e| e.state == SqState::Reading)
        .ok_or(invalid)?;
    let e = core.sq[i];
    // A zero-length Read has no sink SGE: its Request named STag 0, offset 0, 0 octets.
    let sink = e.sgl.as_slice().first().copied().unwrap_or_default();
    let end = to.checked_add(payload.len() as u64);
    let sink_end = sink.addr + u64::from(sink.len);
    if stag != sink.lkey || to < sink.addr || !matches!(end, Some(x) if x <= sink_end) {
        return Err(tagged_code(Fault::Bounds));
    }
    // An empty segment (a zero-length Read) places nothing and names no memory.
    if !payload.is_empty() {
        let mrs = lock(&core.dev.mrs);
        let n = payload.len() as u64;
        let dst = mrs
            .check(stag, core.pd, to, n, Access::LOCAL_WRITE)
            .map_err(tagged_code)?;
        // SAFETY: checked just above, under the table lock still held.
        unsafe { put(dst, payload) };
    }
    core.sq[i].done_len += payload.len() as u64;
    if last {
        core.sq[i].state = SqState::Done(WcStatus::SUCCESS);
        core.reads_out = core.reads_out.saturating_sub(1);
    }
    Ok(())
}

fn read_request(core: &mut QpCore, rq: ReadRequest) -> Result<(), TermCode> {
    let ird = usize::from(core.opts.responder_resources.max(1));
    if core.read_resps.len() >= ird {
        return Err(untagged(ddp::ECODE_UT_MSN_NO_BUFFER));
    }
    let len = u64::from(rq.size);
    let stream = (core.pd, core.qpn);
    lock(&core.dev.mrs)
        .check_remote(rq.src_stag, stream, rq.src_to, len, Access::REMOTE_READ)
        .map_err(read_code)?;
    core.read_resps.push_back(ReadResponse { req: rq, sent: 0 });
    Ok(())
}

/// Places a Send segment at its message offset in the receive at the head of the queue (the
/// QP's own or its SRQ's). The message's MSN must be the next one on queue 0 (RFC 5041:
/// starting at 1, one per message). On the last segment of a Send with Invalidate the STag is
/// invalidated before the receive completes ([`finish_send`]).
fn place_send(
    core: &mut QpCore,
    (msn, mo, last): (u32, u32, bool),
    payload: &[u8],
    invalidate: Option<u32>,
) -> Result<(), TermCode> {
    if msn != core.recv_msn {
        return Err(untagged(ddp::ECODE_UT_MSN_RANGE));
    }
    if mo == 0 && core.rx_cur.is_none() {
        let taken = match &core.srq {
            Some(srq) => srq.take(),
            None => core.rq.pop_front(),
        };
        let r = taken.ok_or(untagged(ddp::ECODE_UT_MSN_NO_BUFFER))?;
        core.rx_cur = Some((r, 0));
    }
    let Some((r, placed)) = core.rx_cur else {
        return Err(untagged(ddp::ECODE_UT_INVALID_MO));
    };
    if u64::from(mo) != placed {
        return Err(untagged(ddp::ECODE_UT_INVALID_MO));
    }
    let end = placed + payload.len() as u64;
    // The receive's SGEs are checked in the PD they were posted in (an SRQ's own).
    let pd = core.srq.as_ref().map_or(core.pd, |s| s.pd);
    let status = if end > r.sgl.total() {
        Err((WcStatus::LOC_LEN_ERR, untagged(ddp::ECODE_UT_TOO_LONG)))
    } else {
        let mrs = lock(&core.dev.mrs);
        walk(
            &mrs,
            pd,
            &r.sgl,
            placed,
            payload.len(),
            Access::LOCAL_WRITE,
            |p, at, n| {
                // SAFETY: `p..p + n` lies inside a registration checked under the table lock,
                // held until the copy is done.
                unsafe { put(p, &payload[at..at + n]) }
            },
        )
        .map_err(|_| {
            let code = TermCode::new(LAYER_DDP, ddp::ETYPE_CATASTROPHIC, 0);
            (WcStatus::LOC_PROT_ERR, code)
        })
    };
    match status {
        Ok(()) => {
            core.rx_cur = Some((r, end));
            if last {
                finish_send(core, r.wr_id, end, invalidate)
            } else {
                Ok(())
            }
        }
        Err((st, code)) => {
            core.rx_cur = None;
            let c = core.recv_completion(r.wr_id, st, 0);
            core.complete(true, c);
            Err(code)
        }
    }
}

/// The last segment of a Send of `len` octets is placed: the receive `wr_id` completes, after
/// the invalidation a Send with Invalidate asks for (a window of this QP's PD bound to this
/// QP, as LOCAL_INV would). An STag that cannot be invalidated fails the receive
/// (`REM_INV_REQ_ERR`) and is answered with a Terminate (RFC 5040, "STag cannot be
/// invalidated": a remote protection error for a window this stream may not use, a remote
/// operation error otherwise; the codes Linux siw sends).
fn finish_send(
    core: &mut QpCore,
    wr_id: u64,
    len: u64,
    invalidate: Option<u32>,
) -> Result<(), TermCode> {
    core.rx_cur = None;
    core.recv_msn = core.recv_msn.wrapping_add(1);
    let mut c = core.recv_completion(wr_id, WcStatus::SUCCESS, len);
    let mut r = Ok(());
    if let Some(stag) = invalidate {
        match lock(&core.dev.mrs).invalidate(stag, core.pd, Some(core.qpn)) {
            Ok(()) => {
                c.flags = WcFlags::WITH_INV;
                c.invalidated_rkey = stag;
            }
            Err(e) => {
                let etype = match e {
                    InvalidateError::NotAssociated => rdmap::ETYPE_REMOTE_PROTECTION,
                    InvalidateError::NotAWindow => rdmap::ETYPE_REMOTE_OPERATION,
                };
                c.status = WcStatus::REM_INV_REQ_ERR;
                c.byte_len = 0;
                r = Err(TermCode::new(
                    LAYER_RDMAP,
                    etype,
                    rdmap::ECODE_CANNOT_INVALIDATE,
                ));
            }
        }
    }
    core.complete(true, c);
    r
}

/// Sends the next segments of the oldest Read Response: `Ok(true)` once its last segment is
/// handed to TCP, `Ok(false)` when the socket takes no more now, `Err` when the source no
/// longer passes its check (deregistered since the Request).
pub(crate) fn send_read_response(core: &mut QpCore, rr: ReadResponse) -> Result<bool, TermCode> {
    let room = core.ep().mulpdu() - ddp::TAGGED_HDR_LEN;
    let req = rr.req;
    let mut sent = rr.sent;
    let mut buf = std::mem::take(&mut core.scratch);
    let r = loop {
        let n = ((req.size - sent) as usize).min(room);
        if buf.len() < n {
            buf.resize(n, 0);
        }
        let src = req.src_to.wrapping_add(u64::from(sent));
        let copied = {
            let mrs = lock(&core.dev.mrs);
            let stream = (core.pd, core.qpn);
            mrs.check_remote(req.src_stag, stream, src, n as u64, Access::REMOTE_READ)
                .map(|p| {
                    // SAFETY: checked just above, under the table lock still held.
                    unsafe { core::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) }
                })
        };
        if let Err(f) = copied {
            break Err(read_code(f));
        }
        let last = sent + n as u32 == req.size;
        let msg = Message::Tagged {
            read_response: true,
            last,
            stag: req.sink_stag,
            to: req.sink_to.wrapping_add(u64::from(sent)),
            payload: &buf[..n],
        };
        match core.ep().queue_message(&msg) {
            Ok(()) => sent += n as u32,
            Err(SendError::Full) => break Ok(false),
            Err(_) => break Err(TermCode::new(LAYER_RDMAP, rdmap::ETYPE_CATASTROPHIC, 0)),
        }
        if let Some(f) = core.read_resps.front_mut() {
            f.sent = sent;
        }
        if last {
            break Ok(true);
        }
    };
    core.scratch = buf;
    r
}
