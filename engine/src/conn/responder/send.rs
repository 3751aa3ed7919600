//! Sending a reply on the responder: placing the DDP results with RDMA Write into the Write
//! chunks (never pad octets), choosing inline (RDMA_MSG), long (RDMA_NOMSG through the Reply
//! chunk) or the version's "does not fit" error, encoding the transport header, and queueing
//! the Writes and the Send (with invalidate when allowed).
//!
//! Normal operation: [`Responder::send_reply`] plans the reply ([`plan_reply`]), checks send
//! queue room, encodes ([`encode_reply`]), gathers ([`gather_reply`]) and queues; nothing is
//! posted unless every step succeeded. Recovery: a reply that does not fit the chunks offered
//! is answered ERR_CHUNK (Version One) or RDMA2_ERR_CANT_REPLY with the first segment too short
//! and the length it needed (Version Two), always with a plain Send.

use super::*;

impl Responder {
    // -----------------------------------------------------------------------------------------
    // Replies.

    pub(crate) fn send_reply<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        id: CallId,
        spec: &ReplySpec<'_>,
        mem: &mut M,
    ) -> Result<ReplyKind, ReplyError> {
        if core.state == ConnState::Closed {
            return Err(ReplyError::Closed);
        }
        let slot = id.slot;
        // The call is read in place and the plan built in the responder's scratch: both hold
        // arrays of hundreds of octets that a copy per reply would move.
        let call = match self.calls.get(slot as usize) {
            Some(c) if c.generation == id.generation && c.state == RespState::Delivered => c,
            _ => return Err(ReplyError::NoSuchCall),
        };
        if spec.message.is_empty()
            || spec.message.len() > MAX_PARTS
            || spec.results.len() > MAX_READ_SEGMENTS
        {
            return Err(ReplyError::BadSpec);
        }
        if core.srq.is_some() && names_recv(core, call, spec) {
            return Err(ReplyError::BadSpec);
        }
        let plan = &mut *self.plan;
        plan_reply(core, call, spec, plan)?;
        if core.sq_free() < plan.work_requests(call, spec) {
            return Err(ReplyError::Busy);
        }
        let header = self.headers[slot as usize];
        let grant = self.policy.grant;
        let hdr_len = encode_reply(grant, call, plan, header, mem).ok_or(ReplyError::BadSpec)?;
        if plan.pieces.as_slice().iter().any(|p| p.zero) {
            if let Some(z) = mem.bytes_mut(core.zero.addr, 4) {
                z.fill(0);
            }
        }
        let first = gather_reply(core, plan, header, hdr_len, mem).ok_or(ReplyError::BadSpec)?;
        let send_id = WrId::new(self.policy.send_kind, u64::from(slot));
        let posted = queue_reply(core, send_id, call, spec, plan, first);
        let c = &mut self.calls[slot as usize];
        c.outstanding += posted;
        c.state = RespState::Sending;
        // Shared receives: the reply gathers nothing from the call's receive, which goes back
        // to the node now (before the Send can draw the peer's next call).
        if core.srq.is_some() {
            if let Some(r) = c.recv.take() {
                core.release_recv(r);
            }
        }
        let kind = plan.kind;
        self.answered_call(core);
        Ok(kind)
    }
}

/// Queues the RDMA Writes of the results, those of a long reply, then the Send (with
/// invalidate when allowed) of `first` and, when [`gather_reply`] said so, the message
/// pieces: the number of work requests posted.
fn queue_reply(
    core: &mut Core,
    send_id: WrId,
    call: &RespCall,
    spec: &ReplySpec<'_>,
    plan: &ReplyPlan,
    (first, gather): (Sge, bool),
) -> u32 {
    let (kind, failed) = (plan.kind, ReplyKind::failed(plan.is_v2));
    let write_id = WrId::new(wr_kind::WRITE, send_id.index());
    let mut posted = 0u32;
    if kind != failed {
        for_each_result_write(call, spec, plan.ndirect, |local, remote_addr, rkey| {
            core.post_send(WorkRequest::RdmaWrite {
                wr_id: write_id,
                local,
                remote_addr,
                rkey,
            });
            posted += 1;
        });
        if kind == ReplyKind::Long {
            for_each_piece_write(
                &plan.pieces,
                &call.reply[..call.nreply as usize],
                |local, remote_addr, rkey| {
                    core.post_send(WorkRequest::RdmaWrite {
                        wr_id: write_id,
                        local,
                        remote_addr,
                        rkey,
                    });
                    posted += 1;
                },
            );
        }
    }
    // Send With Invalidate conveys an RPC reply (RFC 8797 §4.1); an RDMA_ERROR is none, so
    // ERR_CHUNK / RDMA2_ERR_CANT_REPLY go with a plain Send (as Linux svcrdma's errors do)
    // and the requester invalidates the call's STags itself.
    let invalidate = if kind == failed {
        None
    } else if plan.is_v2 {
        // Version Two: exactly the handle the requester named, never another.
        (core.cfg.remote_invalidate && call.inv_handle != 0).then_some(call.inv_handle)
    } else if core.neg.remote_invalidate {
        call.single_handle
    } else {
        None
    };
    core.post_gather(send_id, first, plan.pieces.gathered(gather), invalidate);
    posted + 1
}

/// Whether a part or result of `spec` lies in (overlaps) the receive buffer `call` holds.
fn names_recv(core: &Core, call: &RespCall, spec: &ReplySpec<'_>) -> bool {
    let Some(rbuf) = call.recv.and_then(|r| core.recv_buf(r)) else {
        return false;
    };
    let (lo, hi) = (rbuf.addr, rbuf.addr + u64::from(rbuf.len));
    let overlaps = |b: &LocalBuf| b.addr < hi && b.addr.saturating_add(u64::from(b.len)) > lo;
    spec.message.iter().any(overlaps) || spec.results.iter().any(|i| overlaps(&i.buf))
}

/// Calls `f(local, remote_addr, rkey)` for each RDMA Write placing result `k < ndirect` into
/// Write chunk `k`: exactly the item's octets, never a pad.
fn for_each_result_write(
    call: &RespCall,
    spec: &ReplySpec<'_>,
    ndirect: usize,
    mut f: impl FnMut(Sge, u64, u32),
) {
    for (k, item) in spec.results.iter().take(ndirect).enumerate() {
        let mut off = 0u32;
        for seg in call.write_chunk(k) {
            let left = item.buf.len - off;
            if left == 0 {
                break;
            }
            let take = left.min(seg.length);
            if take == 0 {
                continue;
            }
            f(
                Sge {
                    addr: item.buf.addr + u64::from(off),
                    len: take,
                    lkey: item.buf.lkey,
                },
                seg.offset,
                seg.handle,
            );
            off += take;
        }
    }
}

/// Calls `f(local, remote_addr, rkey)` for each RDMA Write placing the pieces of a long reply
/// into the Reply chunk's segments, in order.
fn for_each_piece_write(pieces: &Pieces, segs: &[Segment], mut f: impl FnMut(Sge, u64, u32)) {
    let mut si = 0usize;
    let mut soff = 0u32;
    for p in pieces.as_slice() {
        let mut poff = 0u32;
        while poff < p.buf.len {
            let Some(seg) = segs.get(si) else {
                return;
            };
            let room = seg.length - soff;
            if room == 0 {
                si += 1;
                soff = 0;
                continue;
            }
            let take = room.min(p.buf.len - poff);
            let src_addr = if p.zero {
                p.buf.addr
            } else {
                p.buf.addr + u64::from(poff)
            };
            f(
                Sge {
                    addr: src_addr,
                    len: take,
                    lkey: p.buf.lkey,
                },
                seg.offset + u64::from(soff),
                seg.handle,
            );
            poff += take;
            soff += take;
        }
    }
}

/// How a reply goes, decided before anything is posted ([`plan_reply`]). The responder keeps
/// one as scratch, reused by every reply: only the entries under the call's counts are
/// meaningful.
#[derive(Clone)]
pub(super) struct ReplyPlan {
    kind: ReplyKind,
    is_v2: bool,
    /// Results placed by RDMA Write (the first `ndirect`, one per Write chunk).
    ndirect: usize,
    /// The Write list to return: the call's segments with the lengths actually written.
    ret: [Segment; MAX_W],
    /// The Reply chunk to return (RDMA_NOMSG): its segments with the lengths written.
    rret: [Segment; MAX_REPLY_SEGMENTS],
    /// Version Two RDMA2_ERR_CANT_REPLY: the first segment too short (1-based over the Write
    /// list's segments, then the Reply chunk's; 0: unknown) and the length it needed.
    short: (u32, u32),
    /// The reply message (results beyond the Write list inline at their offsets).
    pieces: Pieces,
}

impl ReplyPlan {
    pub(super) const EMPTY: ReplyPlan = ReplyPlan {
        kind: ReplyKind::Inline,
        is_v2: false,
        ndirect: 0,
        ret: [Segment::new(0, 0, 0); MAX_W],
        rret: [Segment::new(0, 0, 0); MAX_REPLY_SEGMENTS],
        short: (0, 0),
        pieces: Pieces::EMPTY,
    };

    /// Send-queue entries the reply takes: its RDMA Writes and the Send.
    fn work_requests(&self, call: &RespCall, spec: &ReplySpec<'_>) -> u32 {
        if self.kind == ReplyKind::failed(self.is_v2) {
            return 1;
        }
        let mut n = 1u32;
        for_each_result_write(call, spec, self.ndirect, |_, _, _| n += 1);
        if self.kind == ReplyKind::Long {
            for_each_piece_write(
                &self.pieces,
                &call.reply[..call.nreply as usize],
                |_, _, _| n += 1,
            );
        }
        n
    }
}

/// The Write chunks of `call` as slices of `ret` (its returned Write list).
fn write_refs<'a>(call: &RespCall, ret: &'a [Segment; MAX_W]) -> [&'a [Segment]; MAX_WRITE_CHUNKS] {
    let mut wrefs: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for (k, w) in wrefs.iter_mut().enumerate().take(call.nwrites as usize) {
        let s = call.wstart[k] as usize;
        *w = &ret[s..s + call.wcount[k] as usize];
    }
    wrefs
}

/// Results → Write chunks, in order: the Write list to return into `ret` (lengths per
/// segment; unused chunks keep their segment count with zero lengths; only the call's
/// segments are written), and, when a result does not fit its chunk, the first segment too
/// short and the length it needed.
fn result_write_lengths(
    call: &RespCall,
    spec: &ReplySpec<'_>,
    ndirect: usize,
    ret: &mut [Segment; MAX_W],
) -> Option<(u32, u32)> {
    for k in 0..call.nwrites as usize {
        let s0 = call.wstart[k] as usize;
        let end = s0 + call.wcount[k] as usize;
        for (r, w) in ret[s0..end].iter_mut().zip(&call.writes[s0..end]) {
            *r = Segment { length: 0, ..*w };
        }
    }
    let mut short = None;
    for (k, item) in spec.results.iter().take(ndirect).enumerate() {
        let mut left = item.buf.len;
        let s0 = call.wstart[k] as usize;
        let chunk = call.write_chunk(k);
        for (i, seg) in chunk.iter().enumerate() {
            let take = left.min(seg.length);
            ret[s0 + i].length = take;
            left -= take;
        }
        if left > 0 && short.is_none() {
            short = Some(match chunk.last() {
                // The chunk's last segment (1-based index) is the first one too short.
                Some(last) => ((s0 + chunk.len()) as u32, last.length.saturating_add(left)),
                // A chunk without segments has no segment too short: index 0 ("not
                // possible to determine"), and what did not fit.
                None => (0, left),
            });
        }
    }
    short
}

/// The first segment too short and the length needed when a reply of `total` octets fits
/// neither inline nor in the Reply chunk offered.
fn reply_chunk_short(call: &RespCall, total: u32) -> (u32, u32) {
    if call.has_reply && call.nreply > 0 {
        let n = u64::from(call.nreply);
        let last = call.reply[..call.nreply as usize]
            .last()
            .map_or(0, |s| u64::from(s.length));
        let need = last + u64::from(total) - call.reply_capacity().min(u64::from(total));
        let nw = call.nwrites as usize;
        let wsegs: u64 = call.wcount[..nw].iter().map(|&c| u64::from(c)).sum();
        (
            (wsegs + n).min(u64::from(u32::MAX)) as u32,
            need.min(u64::from(u32::MAX)) as u32,
        )
    } else {
        // No Reply chunk, or one without segments: no segment is too short, so the index is 0
        // (draft: "not possible to determine"); the reply's length.
        (0, total)
    }
}

/// Plans a reply into `plan`: places the results in the Write chunks, cuts the message into
/// pieces, and chooses inline, long (Reply chunk) or the version's "does not fit" error.
fn plan_reply(
    core: &Core,
    call: &RespCall,
    spec: &ReplySpec<'_>,
    plan: &mut ReplyPlan,
) -> Result<(), ReplyError> {
    let nw = call.nwrites as usize;
    let ndirect = nw.min(spec.results.len());
    let too_big = result_write_lengths(call, spec, ndirect, &mut plan.ret);
    let inline_cuts = spec.results[ndirect..].iter().map(|i| Cut {
        at: i.at,
        buf: i.buf,
    });
    build_pieces_into(&mut plan.pieces, spec.message, inline_cuts, core.zero)
        .map_err(|_| ReplyError::BadSpec)?;
    let pieces = &plan.pieces;
    let wrefs = write_refs(call, &plan.ret);
    let msg_lists = ChunkListsRef {
        reads: &[],
        writes: &wrefs[..nw],
        reply: None,
    };
    let is_v2 = call.vers == v2::VERSION;
    // Version Two adds rdma_direction and rdma_inv_handle.
    let hdr_extra = if is_v2 { 8 } else { 0 };
    let send_inline = core.neg_of(call.vers).send_inline as usize;
    let fits_inline =
        v1::FIXED_LEN + hdr_extra + msg_lists.encoded_len() + pieces.total as usize <= send_inline;
    let long_ok = call.has_reply && call.reply_capacity() >= u64::from(pieces.total);
    let failed = ReplyKind::failed(is_v2);
    let (kind, short) = match too_big {
        Some(short) => (failed, short),
        None if fits_inline => (ReplyKind::Inline, (0, 0)),
        None if long_ok => (ReplyKind::Long, (0, 0)),
        None => (failed, reply_chunk_short(call, pieces.total)),
    };
    // Reply chunk lengths returned (RDMA_NOMSG; only read for a long reply).
    if kind == ReplyKind::Long {
        let mut left = pieces.total;
        let n = call.nreply as usize;
        for (r, s) in plan.rret[..n].iter_mut().zip(&call.reply[..n]) {
            let take = left.min(s.length);
            *r = Segment { length: take, ..*s };
            left -= take;
        }
    }
    plan.kind = kind;
    plan.is_v2 = is_v2;
    plan.ndirect = ndirect;
    plan.short = short;
    Ok(())
}

/// Encodes the reply's transport header (or its RDMA_ERROR) into `header`; its length, or
/// `None` when the buffer is unreachable or too small.
fn encode_reply<M: HostMemory + ?Sized>(
    credits: u32,
    call: &RespCall,
    plan: &ReplyPlan,
    header: LocalBuf,
    mem: &mut M,
) -> Option<usize> {
    let nw = call.nwrites as usize;
    let wrefs = write_refs(call, &plan.ret);
    let lists = ChunkListsRef {
        reads: &[],
        writes: &wrefs[..nw],
        reply: (plan.kind == ReplyKind::Long).then_some(&plan.rret[..call.nreply as usize]),
    };
    let xid = call.xid;
    let out = mem.bytes_mut(header.addr, header.len as usize)?;
    let chunks = |direction| v2::ChunksRef {
        direction,
        inv_handle: call.inv_handle,
        lists,
    };
    match plan.kind {
        ReplyKind::ErrChunk => v1::encode_err_chunk(xid, call.vers, credits, out).ok(),
        ReplyKind::CantReply => v2::encode_error(
            xid,
            call.vers,
            credits,
            &v2::RdmaError::CantReply {
                // Found after the upper layer processed the call.
                processed: true,
                segment_index: plan.short.0,
                length_needed: plan.short.1,
            },
            out,
        )
        .ok(),
        ReplyKind::Inline if plan.is_v2 => {
            let body = v2::MessageBody::Msg(chunks(v2::Direction::Reply));
            v2::encode(&v2::Message { xid, credits, body }, out).ok()
        }
        ReplyKind::Long if plan.is_v2 => {
            let body = v2::MessageBody::Nomsg(chunks(v2::Direction::Reply));
            v2::encode(&v2::Message { xid, credits, body }, out).ok()
        }
        ReplyKind::Inline => {
            let body = MessageBody::Msg(lists);
            v1::encode(&Message { xid, credits, body }, out).ok()
        }
        ReplyKind::Long => {
            let body = MessageBody::Nomsg(lists);
            v1::encode(&Message { xid, credits, body }, out).ok()
        }
    }
}

/// The reply Send's gather list: its first entry, the header of `hdr_len` octets (inline
/// replies past the SGE limit: with the message pieces copied after it), and whether the
/// Send gathers the pieces after it (inline replies within the limit).
fn gather_reply<M: HostMemory + ?Sized>(
    core: &Core,
    plan: &ReplyPlan,
    header: LocalBuf,
    hdr_len: usize,
    mem: &mut M,
) -> Option<(Sge, bool)> {
    let pieces = &plan.pieces;
    let mut gather = false;
    let mut first_len = hdr_len as u32;
    if plan.kind == ReplyKind::Inline {
        if pieces.n < core.max_sge {
            gather = true;
        } else if copy_pieces_into(mem, header, hdr_len as u32, pieces) {
            first_len += pieces.total;
        } else {
            return None;
        }
    }
    let first = Sge {
        addr: header.addr,
        len: first_len,
        lkey: header.lkey,
    };
    Some((first, gather))
}
