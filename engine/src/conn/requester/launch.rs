//! Starting a requester call: checking the spec, planning the chunks (DDP items as Read
//! chunks, receptacles as Write chunks, a Reply chunk when the reply may not fit inline, a
//! Position Zero Read chunk when the call does not), exposing their memory (memory-window binds
//! or persistent keys), encoding the transport header and queueing the binds and the Send; and
//! sending a finished call again (Version Two fallback, CANT_REPLY / ERR_CHUNK retry).
//!
//! Normal operation: nothing is queued until every check passed, so a refused call leaves no
//! trace. Recovery: a failure after resources were taken (unreachable memory) gives them back
//! ([`Requester::rollback`]); a resend that cannot be built fails its call.

use super::*;

impl Requester {
    pub(crate) fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        now: u64,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        if core.state != ConnState::Connected {
            return Err(StartError::NotConnected);
        }
        if self.outstanding() >= self.granted {
            return Err(StartError::NoCredit);
        }
        // One posted receive per outstanding call (the reply must never meet an empty queue),
        // besides those the server may still take for backward calls.
        if core.rq_posted <= self.outstanding() + core.recv_reserve {
            return Err(StartError::Busy);
        }
        if opts.fallback_receptacles.len() > MAX_WRITE_CHUNKS {
            return Err(StartError::BadSpec);
        }
        let deadline = match core.cfg.call_timeout_ns {
            0 => u64::MAX,
            t => now.saturating_add(t),
        };
        let id = self.launch(core, deadline, spec, None, mem)?;
        let call = &mut self.calls[id.slot as usize];
        if core.probing && call.vers == v2::VERSION && core.cfg.probe_timeout_ns > 0 {
            call.probe_deadline = now.saturating_add(core.cfg.probe_timeout_ns);
        }
        // Keep the spec when the call may have to be sent again.
        let keep =
            core.probing || opts.fallback_reply.is_some() || !opts.fallback_receptacles.is_empty();
        self.calls[id.slot as usize].saved = keep;
        if keep {
            let sv = &mut self.saved[id.slot as usize];
            *sv = Saved::EMPTY;
            sv.nmsg = spec.message.len() as u8;
            sv.message[..spec.message.len()].copy_from_slice(spec.message);
            sv.nddp = spec.ddp.len() as u8;
            sv.ddp[..spec.ddp.len()].copy_from_slice(spec.ddp);
            sv.nrec = spec.receptacles.len() as u8;
            sv.receptacles[..spec.receptacles.len()].copy_from_slice(spec.receptacles);
            sv.reply = spec.reply;
            sv.fallback_reply = opts.fallback_reply;
            sv.nfallback_rec = opts.fallback_receptacles.len() as u8;
            sv.fallback_receptacles[..opts.fallback_receptacles.len()]
                .copy_from_slice(opts.fallback_receptacles);
        }
        Ok(id)
    }

    /// Builds and posts a call: in a new slot, or (`reuse`) again in the slot and generation
    /// of a call being sent again.
    fn launch<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        deadline: u64,
        spec: &CallSpec<'_>,
        reuse: Option<(u32, u32)>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        let vers = core.version;
        let is_v2 = vers == v2::VERSION;
        // Version Two adds rdma_direction and rdma_inv_handle to the header.
        let v2_extra = if is_v2 { 8 } else { 0 };
        if spec.message.is_empty()
            || spec.message.len() > MAX_PARTS
            || spec.ddp.len() > MAX_READ_SEGMENTS
            || spec.receptacles.len() > MAX_WRITE_CHUNKS
        {
            return Err(StartError::BadSpec);
        }
        let ddp = core.cfg.ddp;
        if ddp && spec.receptacles.len() > core.limits.max_write_chunks as usize {
            return Err(StartError::BadSpec);
        }
        let xid = match mem.bytes(spec.message[0].addr, 4) {
            Some(&[a, b, c, d]) if spec.message[0].len >= 4 => u32::from_be_bytes([a, b, c, d]),
            _ => return Err(StartError::BadSpec),
        };
        if self.find(xid).is_some() {
            return Err(StartError::DuplicateXid);
        }
        let inline_len = parts_len(spec.message).ok_or(StartError::BadSpec)?;

        // DDP argument items → Read chunks (positions in the full XDR stream; no pad sent).
        let mut ddp_reads = [ReadSegment::default(); MAX_READ_SEGMENTS];
        let mut nddp = 0usize;
        if ddp {
            let mut shift = 0u32;
            let mut last = 0u32;
            for item in spec.ddp {
                if item.at == 0 || item.at % 4 != 0 || item.at < last || item.at > inline_len {
                    return Err(StartError::BadSpec);
                }
                last = item.at;
                let position = item.at.checked_add(shift).ok_or(StartError::TooLarge)?;
                ddp_reads[nddp] =
                    ReadSegment::new(position, Segment::new(0, item.buf.len, item.buf.addr));
                nddp += 1;
                let padded = item
                    .buf
                    .len
                    .checked_add(pad4(item.buf.len as usize) as u32)
                    .ok_or(StartError::TooLarge)?;
                shift = shift.checked_add(padded).ok_or(StartError::TooLarge)?;
            }
        }
        let inline_cuts = spec.ddp.iter().filter(|_| !ddp).map(|i| Cut {
            at: i.at,
            buf: i.buf,
        });
        let pieces =
            build_pieces(spec.message, inline_cuts, core.zero).map_err(|_| StartError::BadSpec)?;
        let _ = inline_len;

        // Write chunks (one segment per receptacle) and the Reply chunk decision.
        let nwrites = if ddp { spec.receptacles.len() } else { 0 };
        let mut writes = [Segment::default(); MAX_WRITE_CHUNKS];
        for (w, r) in writes.iter_mut().zip(spec.receptacles.iter()).take(nwrites) {
            *w = Segment::new(0, r.len, r.addr);
        }
        // The largest inline reply header: fixed words, empty Read list, our Write list, no
        // Reply chunk.
        let reply_hdr = v1::FIXED_LEN + v2_extra + 4 + nwrites * (8 + SEGMENT_LEN) + 4 + 4;
        let reply_offered = spec.reply.len > 0
            && reply_hdr as u64 + u64::from(spec.reply.len)
                > u64::from(core.neg_of(vers).recv_inline);
        let reply_seg = [Segment::new(0, spec.reply.len, spec.reply.addr)];

        // Inline (RDMA_MSG) or long (RDMA_NOMSG + Position Zero Read chunk)?
        let write_refs = write_slices(&writes, nwrites);
        let msg_lists = ChunkListsRef {
            reads: &ddp_reads[..nddp],
            writes: &write_refs[..nwrites],
            reply: reply_offered.then_some(&reply_seg[..]),
        };
        let msg_hdr = v1::FIXED_LEN + v2_extra + msg_lists.encoded_len();
        let mut send_inline = core.neg_of(vers).send_inline as usize;
        if is_v2 && core.probing {
            // The responder may speak only Version One (draft, "Protocol Version
            // Negotiation").
            send_inline = send_inline.min(V2_FIRST_MESSAGE as usize);
        }
        let long = msg_hdr + pieces.total as usize > send_inline;
        let npz = if long { pieces.n } else { 0 };
        let nreads = npz + nddp;
        if nreads > core.limits.max_read_segments as usize {
            return Err(StartError::TooLarge);
        }
        if long && msg_hdr + npz * (4 + 20) > send_inline {
            return Err(StartError::TooLarge);
        }
        let nstags = nreads + nwrites + usize::from(reply_offered);
        let mw_mode = core.cfg.stag == StagMode::MemoryWindows;
        if mw_mode {
            if nstags > MAX_CALL_STAGS || core.mw_free.len() < nstags {
                return Err(StartError::Busy);
            }
        } else {
            let keyed = |b: &LocalBuf| mem.remote_key(b.lkey).is_some();
            let pz_ok = pieces.as_slice()[..npz].iter().all(|p| keyed(&p.buf));
            let ddp_ok = spec.ddp.iter().take(nddp).all(|i| keyed(&i.buf));
            let w_ok = spec.receptacles.iter().take(nwrites).all(keyed);
            let r_ok = !reply_offered || keyed(&spec.reply);
            if !(pz_ok && ddp_ok && w_ok && r_ok) {
                return Err(StartError::NoRemoteKey);
            }
        }
        let sq_needed = if mw_mode { nstags as u32 + 1 } else { 1 };
        if core.sq_free() < sq_needed {
            return Err(StartError::Busy);
        }
        let slot = match reuse {
            Some((slot, _)) => slot,
            None => self.free.pop().ok_or(StartError::Busy)?,
        };
        let header = core.headers[slot as usize];

        // From here on nothing fails except unreachable memory (checked before posting).
        let mut call = ReqCall::FREE;
        call.generation = match reuse {
            Some((_, g)) => g,
            None => self.calls[slot as usize].generation,
        };
        call.xid = xid;
        call.vers = vers;
        call.saved = self.calls[slot as usize].saved && reuse.is_some();
        call.reply = spec.reply;
        call.reply_offered = reply_offered;
        call.nwrites = nwrites as u8;

        // Expose chunk memory: collect the targets first, then bind (or look up keys).
        let mut reads = [ReadSegment::default(); MAX_READ_SEGMENTS];
        for (i, p) in pieces.as_slice()[..npz].iter().enumerate() {
            reads[i] = ReadSegment::new(0, Segment::new(0, p.buf.len, p.buf.addr));
        }
        reads[npz..nreads].copy_from_slice(&ddp_reads[..nddp]);
        let mut binds = [BindPlan::NONE; MAX_CALL_STAGS];
        let mut nb = 0usize;
        for (i, p) in pieces.as_slice()[..npz].iter().enumerate() {
            binds[nb] = BindPlan::read(p.buf, Target::Read(i));
            nb += 1;
        }
        for (k, item) in spec.ddp.iter().take(nddp).enumerate() {
            binds[nb] = BindPlan::read(item.buf, Target::Read(npz + k));
            nb += 1;
        }
        for (k, r) in spec.receptacles.iter().take(nwrites).enumerate() {
            binds[nb] = BindPlan::write(*r, Target::Write(k));
            nb += 1;
        }
        let mut reply_handle = 0u32;
        if reply_offered {
            binds[nb] = BindPlan::write(spec.reply, Target::Reply);
            nb += 1;
        }
        let mut bind_wrs = [None; MAX_CALL_STAGS];
        for (n, b) in binds[..nb].iter().enumerate() {
            let handle = if mw_mode {
                let Some(m) = core.mw_free.pop() else {
                    // Counted above; unreachable. Give back what was taken.
                    self.rollback(core, &call, slot, reuse.is_none());
                    return Err(StartError::Busy);
                };
                let mw = &mut core.mws[m as usize];
                // Not `inc_rkey`: the next key must not follow from the last one.
                let new_rkey = core.keys.next_rkey(mw.rkey);
                mw.rkey = new_rkey;
                mw.owner = Some(slot);
                mw.pos = n as u8;
                call.stags[n] = m as u16;
                call.nstags = n as u8 + 1;
                bind_wrs[n] = Some(WorkRequest::BindMw {
                    wr_id: WrId::new(wr_kind::BIND, u64::from(slot)),
                    mw: m,
                    addr: b.buf.addr,
                    len: b.buf.len,
                    lkey: b.buf.lkey,
                    access: b.access,
                    new_rkey,
                });
                new_rkey
            } else {
                mem.remote_key(b.buf.lkey).unwrap_or(0)
            };
            match b.target {
                Target::Read(i) => reads[i].target.handle = handle,
                Target::Write(k) => writes[k].handle = handle,
                Target::Reply => reply_handle = handle,
                Target::None => {}
            }
        }
        call.writes = writes;
        let reply_seg = [Segment::new(reply_handle, spec.reply.len, spec.reply.addr)];
        let write_refs = write_slices(&writes, nwrites);
        let lists = ChunkListsRef {
            reads: &reads[..nreads],
            writes: &write_refs[..nwrites],
            reply: reply_offered.then_some(&reply_seg[..]),
        };
        // Version Two: the one handle the responder may invalidate remotely (draft, "Remote
        // Invalidation"); 0 when none may be (persistent keys, or remote invalidation off).
        let inv_handle = if core.cfg.remote_invalidate && mw_mode && nb > 0 {
            if reply_offered {
                reply_handle
            } else if nwrites > 0 {
                writes[0].handle
            } else {
                reads[0].target.handle
            }
        } else {
            0
        };
        let credits = self.max_credits;

        // Encode the header; gather (or, past the SGE limit, copy) the inline message after it.
        let encoded = mem
            .bytes_mut(header.addr, header.len as usize)
            .and_then(|out| {
                if is_v2 {
                    let c = v2::ChunksRef {
                        direction: v2::Direction::Call,
                        inv_handle,
                        lists,
                    };
                    let body = if long {
                        v2::MessageBody::Nomsg(c)
                    } else {
                        v2::MessageBody::Msg(c)
                    };
                    v2::encode(&v2::Message { xid, credits, body }, out).ok()
                } else {
                    let body = if long {
                        MessageBody::Nomsg(lists)
                    } else {
                        MessageBody::Msg(lists)
                    };
                    v1::encode(&Message { xid, credits, body }, out).ok()
                }
            });
        let Some(hdr_len) = encoded else {
            self.rollback(core, &call, slot, reuse.is_none());
            return Err(StartError::BadSpec);
        };
        let mut sges = [Sge::default(); MAX_SGE];
        let mut nsge = 1usize;
        let mut first_len = hdr_len as u32;
        if !long {
            if pieces.n < core.max_sge {
                for p in pieces.as_slice() {
                    sges[nsge] = p.buf.sge();
                    nsge += 1;
                }
            } else if !copy_pieces(mem, header, hdr_len as u32, &pieces) {
                self.rollback(core, &call, slot, reuse.is_none());
                return Err(StartError::BadSpec);
            } else {
                first_len += pieces.total;
            }
        }
        if pieces.as_slice().iter().any(|p| p.zero) {
            if let Some(z) = mem.bytes_mut(core.zero.addr, 4) {
                z.fill(0);
            }
        }
        sges[0] = Sge {
            addr: header.addr,
            len: first_len,
            lkey: header.lkey,
        };

        for wr in bind_wrs[..nb].iter().flatten() {
            core.post_send(*wr);
        }
        core.post_send(WorkRequest::Send {
            wr_id: WrId::new(wr_kind::SEND, u64::from(slot)),
            sges,
            nsge: nsge as u8,
            invalidate: None,
        });
        call.outstanding = if mw_mode { nb as u32 + 1 } else { 1 };
        call.state = ReqState::AwaitingReply;
        call.deadline = deadline;
        self.calls[slot as usize] = call;
        self.awaiting += 1;
        // Cannot fail: the table holds every slot, and the XID is not live (checked above).
        let added = self.by_xid.insert(call.xid, slot);
        debug_assert!(added);
        Ok(CallId {
            slot,
            generation: call.generation,
        })
    }

    /// Undoes a partly built call (no work request was posted yet); `free_slot` when the slot
    /// was taken for it.
    fn rollback(&mut self, core: &mut Core, call: &ReqCall, slot: u32, free_slot: bool) {
        release_windows(core, call);
        if free_slot {
            let _ = self.free.push(slot);
        }
    }

    /// Sends a finished call again (its STags are all invalidated): in Version One after a
    /// fallback, or with the fallback reply resources after CANT_REPLY. Busy resources leave
    /// it waiting for the next round; any other failure fails the call.
    pub(super) fn resend<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        slot: u32,
        why: Resend,
        mem: &mut M,
    ) {
        let c = self.calls[slot as usize];
        release_windows(core, &c);
        {
            let call = &mut self.calls[slot as usize];
            call.nstags = 0;
            call.inv_next = 0;
            call.remote_inv = 0;
        }
        let sv = self.saved[slot as usize];
        if !c.saved {
            self.resending -= 1;
            self.calls[slot as usize].outcome =
                Outcome::Failed(CallError::Resend(StartError::BadSpec));
            self.complete(core, slot);
            return;
        }
        let larger = why == Resend::Larger;
        let receptacles: &[LocalBuf] = if larger && sv.nfallback_rec > 0 {
            &sv.fallback_receptacles[..sv.nfallback_rec as usize]
        } else {
            &sv.receptacles[..sv.nrec as usize]
        };
        let spec = CallSpec {
            message: &sv.message[..sv.nmsg as usize],
            ddp: &sv.ddp[..sv.nddp as usize],
            receptacles,
            reply: match (larger, sv.fallback_reply) {
                (true, Some(r)) => r,
                _ => sv.reply,
            },
        };
        if larger {
            self.saved[slot as usize].retried = true;
        }
        match self.launch(core, c.deadline, &spec, Some((slot, c.generation)), mem) {
            Ok(_) => {
                self.finishing -= 1;
                self.resending -= 1;
            }
            Err(StartError::Busy) => {}
            Err(e) => {
                self.resending -= 1;
                self.calls[slot as usize].outcome = Outcome::Failed(CallError::Resend(e));
                self.complete(core, slot);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Target {
    None,
    Read(usize),
    Write(usize),
    Reply,
}

#[derive(Debug, Clone, Copy)]
struct BindPlan {
    buf: LocalBuf,
    access: Access,
    target: Target,
}

impl BindPlan {
    const NONE: BindPlan = BindPlan {
        buf: LocalBuf::EMPTY,
        access: Access::NONE,
        target: Target::None,
    };
    fn read(buf: LocalBuf, target: Target) -> Self {
        BindPlan {
            buf,
            access: Access::REMOTE_READ,
            target,
        }
    }
    fn write(buf: LocalBuf, target: Target) -> Self {
        BindPlan {
            buf,
            access: Access::REMOTE_WRITE,
            target,
        }
    }
}

fn write_slices(writes: &[Segment; MAX_WRITE_CHUNKS], n: usize) -> [&[Segment]; MAX_WRITE_CHUNKS] {
    let mut out: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for (o, w) in out.iter_mut().zip(writes.iter()).take(n) {
        *o = core::slice::from_ref(w);
    }
    out
}
