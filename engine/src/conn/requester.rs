//! Requester (client) side of the connection.
//!
//! Normal operation: each call lives in a slot of a fixed array (as many as header slots) and
//! moves through [`ReqState`]: `Free` → `AwaitingReply` (binds and Send posted; holds a credit
//! and a posted receive) → `Finishing` (reply or error received: LocalInv posted for every STag
//! the peer did not invalidate; waiting for those and for the call's other send-queue work to
//! complete) → `Free`, at which point [`Event::ReplyReady`] or [`Event::CallFailed`] is
//! reported. Every send-queue work request of a call carries the call slot in its `wr_id`, so
//! the slot cannot be reused while any of them is outstanding.
//!
//! Recovery: a reply that does not decode, or breaks a reply rule, fails the call whose XID it
//! carries (RFC 8166 says such a reply is dropped; failing the call, as Linux does, keeps the
//! caller from waiting forever); one with an unknown XID is dropped. A timed-out call is failed
//! after its STags are invalidated and its credit is kept as an "orphan" until a reply with an
//! unknown XID arrives. A lost connection fails every call at once.

use super::stream::{build_pieces, copy_pieces, parts_len, Cut};
use super::{
    wr_kind, Access, BadReply, CallError, CallId, CallSpec, ConnState, Core, Event, HostMemory,
    LocalBuf, Reply, StagMode, StartError, WorkRequest, MAX_CALL_STAGS, MAX_PARTS,
    MAX_READ_SEGMENTS, MAX_SGE, MAX_WRITE_CHUNKS,
};
use crate::proto::chunks::{ChunkListsRef, ReadSegment, Segment, SEGMENT_LEN};
use crate::proto::v1::{self, Body, HeaderErrorKind, Message, MessageBody, RdmaError};
use crate::verbs::{inc_rkey, Completion, Sge, WcFlags, WrId};
use crate::xdr::pad4;

/// State of a requester call slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqState {
    /// Unused.
    Free,
    /// Binds and Send posted; waiting for the reply. Holds a credit.
    AwaitingReply,
    /// Answered (or failed): LocalInv of the remaining STags posted or to post; waiting for all
    /// of the call's send-queue work requests to complete before reporting.
    Finishing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Reply {
        len: u32,
        written: [u32; MAX_WRITE_CHUNKS],
        long: bool,
    },
    Failed(CallError),
}

#[derive(Debug, Clone, Copy)]
struct ReqCall {
    state: ReqState,
    generation: u32,
    xid: u32,
    /// Outstanding send-queue work requests (binds, Send, LocalInvs).
    outstanding: u32,
    /// Memory window slots used, in bind order.
    stags: [u16; MAX_CALL_STAGS],
    nstags: u8,
    /// Bit `i`: `stags[i]` was invalidated by the peer (Send With Invalidate).
    remote_inv: u32,
    /// Next entry of `stags` to consider for LocalInv.
    inv_next: u8,
    /// Write chunks offered (one segment each).
    writes: [Segment; MAX_WRITE_CHUNKS],
    nwrites: u8,
    /// Reply buffer and the Reply chunk offered over it.
    reply: LocalBuf,
    reply_offered: bool,
    deadline: u64,
    outcome: Outcome,
}

impl ReqCall {
    const FREE: ReqCall = ReqCall {
        state: ReqState::Free,
        generation: 0,
        xid: 0,
        outstanding: 0,
        stags: [0; MAX_CALL_STAGS],
        nstags: 0,
        remote_inv: 0,
        inv_next: 0,
        writes: [Segment {
            handle: 0,
            length: 0,
            offset: 0,
        }; MAX_WRITE_CHUNKS],
        nwrites: 0,
        reply: LocalBuf::EMPTY,
        reply_offered: false,
        deadline: u64::MAX,
        outcome: Outcome::Pending,
    };
}

pub(crate) struct Requester {
    calls: Vec<ReqCall>,
    free: super::ring::IndexStack,
    /// Local maximum of outstanding calls.
    max_credits: u32,
    /// Credits granted by the last reply (1 before the first).
    granted: u32,
    /// Calls in `AwaitingReply`.
    awaiting: u32,
    /// Timed-out calls whose reply may still come.
    orphans: u32,
    /// Calls in `Finishing` (to skip the progress scan when zero).
    finishing: u32,
}

/// Clamps a credit value from the wire: 0 counts as 1, values above `max` become `max`.
#[inline]
pub(crate) fn clamp_credits(wire: u32, max: u32) -> u32 {
    wire.clamp(1, max.max(1))
}

impl Requester {
    pub(crate) fn new(core: &Core) -> Self {
        let n = core.headers.len();
        Requester {
            calls: vec![ReqCall::FREE; n],
            free: super::ring::IndexStack::full(n),
            max_credits: core.cfg.credits.min(n as u32),
            granted: 1,
            awaiting: 0,
            orphans: 0,
            finishing: 0,
        }
    }

    pub(crate) fn granted(&self) -> u32 {
        self.granted
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.awaiting + self.orphans
    }

    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.calls
            .iter()
            .filter(|c| c.state == ReqState::AwaitingReply && c.deadline != u64::MAX)
            .map(|c| c.deadline)
            .min()
    }

    // -----------------------------------------------------------------------------------------
    // Starting a call.

    pub(crate) fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        now: u64,
        spec: &CallSpec<'_>,
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
        if self
            .calls
            .iter()
            .any(|c| c.state == ReqState::AwaitingReply && c.xid == xid)
        {
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
        let reply_hdr = v1::FIXED_LEN + 4 + nwrites * (8 + SEGMENT_LEN) + 4 + 4;
        let reply_offered = spec.reply.len > 0
            && reply_hdr as u64 + u64::from(spec.reply.len) > u64::from(core.neg.recv_inline);
        let reply_seg = [Segment::new(0, spec.reply.len, spec.reply.addr)];

        // Inline (RDMA_MSG) or long (RDMA_NOMSG + Position Zero Read chunk)?
        let write_refs = write_slices(&writes, nwrites);
        let msg_lists = ChunkListsRef {
            reads: &ddp_reads[..nddp],
            writes: &write_refs[..nwrites],
            reply: reply_offered.then_some(&reply_seg[..]),
        };
        let msg_hdr = v1::FIXED_LEN + msg_lists.encoded_len();
        let send_inline = core.neg.send_inline as usize;
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
        let Some(slot) = self.free.pop() else {
            return Err(StartError::Busy);
        };
        let header = core.headers[slot as usize];

        // From here on nothing fails except unreachable memory (checked before posting).
        let mut call = ReqCall::FREE;
        call.generation = self.calls[slot as usize].generation;
        call.xid = xid;
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
                    self.rollback(core, &call, slot);
                    return Err(StartError::Busy);
                };
                let mw = &mut core.mws[m as usize];
                let new_rkey = inc_rkey(mw.rkey);
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
        let msg = Message {
            xid,
            credits: self.max_credits,
            body: if long {
                MessageBody::Nomsg(lists)
            } else {
                MessageBody::Msg(lists)
            },
        };

        // Encode the header; gather (or, past the SGE limit, copy) the inline message after it.
        let encoded = mem
            .bytes_mut(header.addr, header.len as usize)
            .and_then(|out| v1::encode(&msg, out).ok());
        let Some(hdr_len) = encoded else {
            self.rollback(core, &call, slot);
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
                self.rollback(core, &call, slot);
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
        call.deadline = match core.cfg.call_timeout_ns {
            0 => u64::MAX,
            t => now.saturating_add(t),
        };
        self.calls[slot as usize] = call;
        self.awaiting += 1;
        Ok(CallId {
            slot,
            generation: call.generation,
        })
    }

    /// Undoes a partly built call (no work request was posted yet).
    fn rollback(&mut self, core: &mut Core, call: &ReqCall, slot: u32) {
        for &m in &call.stags[..call.nstags as usize] {
            if let Some(mw) = core.mws.get_mut(m as usize) {
                mw.owner = None;
            }
            let _ = core.mw_free.push(u32::from(m));
        }
        let _ = self.free.push(slot);
    }

    // -----------------------------------------------------------------------------------------
    // Completions.

    pub(crate) fn on_completion<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        _now: u64,
        kind: u8,
        index: u32,
        wc: &Completion,
        mem: &mut M,
    ) {
        match kind {
            wr_kind::RECV => self.on_recv(core, index, wc, mem),
            wr_kind::SEND | wr_kind::BIND | wr_kind::INV => {
                let Some(call) = self.calls.get_mut(index as usize) else {
                    core.state = ConnState::Closed;
                    return;
                };
                if call.state == ReqState::Free || call.outstanding == 0 {
                    core.state = ConnState::Closed;
                    return;
                }
                call.outstanding -= 1;
            }
            _ => {
                // Requesters never post RDMA Reads or Writes.
                core.state = ConnState::Closed;
                return;
            }
        }
        self.progress(core);
    }

    fn on_recv<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        index: u32,
        wc: &Completion,
        mem: &mut M,
    ) {
        let Some(rbuf) = core.recv_buf(index) else {
            core.state = ConnState::Closed;
            return;
        };
        let len = wc.byte_len.min(rbuf.len);
        let inv = wc
            .flags
            .contains(WcFlags::WITH_INV)
            .then_some(wc.invalidated_rkey);
        core.hold_recv(index);
        let verdict = match mem.bytes(rbuf.addr, len as usize) {
            Some(buf) => self.judge_reply(core, buf),
            None => Verdict::Drop,
        };
        // The peer invalidated a window before this receive completed: note it before the
        // answered call posts its LocalInvs.
        if let Some(rkey) = inv {
            self.mark_remote_inv(core, rkey, verdict.slot());
        }
        self.apply_verdict(core, verdict, rbuf.addr, mem);
        core.release_recv(index);
    }

    /// Decodes a reply and decides what it means, without touching memory other than `buf`.
    fn judge_reply(&self, core: &Core, buf: &[u8]) -> Verdict {
        let h = match v1::decode(buf, &core.limits) {
            Ok(h) => h,
            Err(e) => {
                // An ERR_VERS from a responder that put its own version in rdma_vers (the
                // layout of ERR_VERS is the same in every version).
                if let HeaderErrorKind::ForeignError {
                    vers_range: Some((low, high)),
                    ..
                } = e.kind
                {
                    return match e.xid.and_then(|x| self.find(x)) {
                        Some(slot) => Verdict::Fail(slot, CallError::ErrVers { low, high }),
                        None => Verdict::Unknown,
                    };
                }
                return match e.xid.and_then(|x| self.find(x)) {
                    Some(slot) => {
                        Verdict::Fail(slot, CallError::BadReply(BadReply::Header(e.kind)))
                    }
                    None => Verdict::Drop,
                };
            }
        };
        let granted = clamp_credits(h.credits, self.max_credits);
        let Some(slot) = self.find(h.xid) else {
            return match h.body {
                Body::Done => Verdict::Credits(granted),
                _ => Verdict::UnknownWithCredits(granted),
            };
        };
        let err = match h.body {
            Body::Done => return Verdict::Credits(granted),
            Body::Error(RdmaError::Vers { low, high }) => Some(CallError::ErrVers { low, high }),
            Body::Error(RdmaError::Chunk) => Some(CallError::ErrChunk),
            Body::Error(RdmaError::Unknown(code)) => Some(CallError::RdmaError(code)),
            _ => None,
        };
        if let Some(e) = err {
            return Verdict::FailWithCredits(slot, e, granted);
        }
        if let Err(e) = h.check_reply() {
            return Verdict::FailWithCredits(
                slot,
                CallError::BadReply(BadReply::Header(e.kind)),
                granted,
            );
        }
        let call = &self.calls[slot as usize];
        let Some(lists) = h.chunks() else {
            return Verdict::Drop;
        };
        // Write list: at most the chunks offered; each returned chunk has at most the offered
        // segment (or is an empty array); lengths never exceed what was offered.
        let mut written = [0u32; MAX_WRITE_CHUNKS];
        if lists.writes.len() > call.nwrites as usize {
            return Verdict::FailWithCredits(
                slot,
                CallError::BadReply(BadReply::WriteList),
                granted,
            );
        }
        for (i, chunk) in lists.writes.iter().enumerate() {
            if chunk.len() > 1 {
                return Verdict::FailWithCredits(
                    slot,
                    CallError::BadReply(BadReply::WriteList),
                    granted,
                );
            }
            let got = chunk.total_length();
            if got > call.writes[i].length {
                return Verdict::FailWithCredits(
                    slot,
                    CallError::BadReply(BadReply::WriteList),
                    granted,
                );
            }
            written[i] = got;
        }
        match h.body {
            Body::Nomsg(_) => {
                let ok = call.reply_offered
                    && lists
                        .reply
                        .is_some_and(|r| r.len() <= 1 && r.total_length() <= call.reply.len);
                if !ok {
                    return Verdict::FailWithCredits(
                        slot,
                        CallError::BadReply(BadReply::ReplyChunk),
                        granted,
                    );
                }
                let len = lists.reply.map_or(0, |r| r.total_length());
                Verdict::Reply {
                    slot,
                    granted,
                    len,
                    written,
                    copy_from: None,
                }
            }
            _ => {
                if h.payload.len() > call.reply.len as usize {
                    return Verdict::FailWithCredits(
                        slot,
                        CallError::BadReply(BadReply::TooLong),
                        granted,
                    );
                }
                Verdict::Reply {
                    slot,
                    granted,
                    len: h.payload.len() as u32,
                    written,
                    copy_from: Some(h.header_len as u32),
                }
            }
        }
    }

    fn apply_verdict<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        v: Verdict,
        recv_addr: u64,
        mem: &mut M,
    ) {
        match v {
            Verdict::Drop => {}
            Verdict::Unknown => self.unknown_reply(),
            Verdict::Credits(g) => self.granted = g,
            Verdict::UnknownWithCredits(g) => {
                self.granted = g;
                self.unknown_reply();
            }
            Verdict::Fail(slot, e) => self.answered(core, slot, Outcome::Failed(e)),
            Verdict::FailWithCredits(slot, e, g) => {
                self.granted = g;
                self.answered(core, slot, Outcome::Failed(e));
            }
            Verdict::Reply {
                slot,
                granted,
                len,
                written,
                copy_from,
            } => {
                self.granted = granted;
                let call = self.calls[slot as usize];
                if let Some(off) = copy_from {
                    if len > 0
                        && !mem.copy(call.reply.addr, recv_addr + u64::from(off), len as usize)
                    {
                        self.answered(
                            core,
                            slot,
                            Outcome::Failed(CallError::BadReply(BadReply::TooLong)),
                        );
                        return;
                    }
                }
                self.answered(
                    core,
                    slot,
                    Outcome::Reply {
                        len,
                        written,
                        long: copy_from.is_none(),
                    },
                );
            }
        }
    }

    fn unknown_reply(&mut self) {
        // A late answer to a timed-out call returns its credit.
        self.orphans = self.orphans.saturating_sub(1);
    }

    fn find(&self, xid: u32) -> Option<u32> {
        self.calls
            .iter()
            .position(|c| c.state == ReqState::AwaitingReply && c.xid == xid)
            .map(|i| i as u32)
    }

    /// Notes that the peer invalidated `rkey` (Send With Invalidate). Normally it is one of the
    /// answered call's windows (`hint`); otherwise every window in use is searched.
    fn mark_remote_inv(&mut self, core: &mut Core, rkey: u32, hint: Option<u32>) {
        if let Some(call) = hint.and_then(|s| self.calls.get_mut(s as usize)) {
            for i in 0..call.nstags as usize {
                if core.mws[call.stags[i] as usize].rkey == rkey {
                    call.remote_inv |= 1 << i;
                    return;
                }
            }
        }
        for mw in core.mws.iter() {
            if mw.rkey != rkey {
                continue;
            }
            if let Some(owner) = mw.owner {
                if let Some(call) = self.calls.get_mut(owner as usize) {
                    if (mw.pos as usize) < call.nstags as usize {
                        call.remote_inv |= 1 << mw.pos;
                    }
                }
            }
        }
    }

    /// The call got its answer (or failed): release its credit, start invalidating.
    fn answered(&mut self, core: &mut Core, slot: u32, outcome: Outcome) {
        let call = &mut self.calls[slot as usize];
        if call.state != ReqState::AwaitingReply {
            return;
        }
        call.state = ReqState::Finishing;
        call.outcome = outcome;
        call.inv_next = 0;
        self.awaiting -= 1;
        self.finishing += 1;
        let _ = core;
    }

    /// The processing loop: posts pending LocalInvs as send-queue room allows and completes
    /// calls whose work is all done.
    fn progress(&mut self, core: &mut Core) {
        if self.finishing == 0 {
            return;
        }
        for slot in 0..self.calls.len() {
            if self.calls[slot].state != ReqState::Finishing {
                continue;
            }
            let call = &mut self.calls[slot];
            while (call.inv_next as usize) < call.nstags as usize {
                let i = call.inv_next as usize;
                if call.remote_inv & (1 << i) != 0 {
                    call.inv_next += 1;
                    continue;
                }
                if core.sq_free() == 0 {
                    break;
                }
                let rkey = core.mws[call.stags[i] as usize].rkey;
                core.post_send(WorkRequest::LocalInv {
                    wr_id: WrId::new(wr_kind::INV, slot as u64),
                    rkey,
                });
                call.outstanding += 1;
                call.inv_next += 1;
            }
            if call.inv_next as usize == call.nstags as usize && call.outstanding == 0 {
                self.complete(core, slot as u32);
            }
        }
    }

    /// Reports a finished call and frees its slot and windows.
    fn complete(&mut self, core: &mut Core, slot: u32) {
        let call = self.calls[slot as usize];
        for &m in &call.stags[..call.nstags as usize] {
            if let Some(mw) = core.mws.get_mut(m as usize) {
                mw.owner = None;
            }
            let _ = core.mw_free.push(u32::from(m));
        }
        let id = CallId {
            slot,
            generation: call.generation,
        };
        let ev = match call.outcome {
            Outcome::Reply { len, written, long } => Event::ReplyReady(Reply {
                call: id,
                xid: call.xid,
                len,
                written,
                nwritten: call.nwrites,
                long,
            }),
            Outcome::Failed(error) => Event::CallFailed {
                call: id,
                xid: call.xid,
                error,
            },
            Outcome::Pending => Event::CallFailed {
                call: id,
                xid: call.xid,
                error: CallError::ConnectionLost,
            },
        };
        core.emit(ev);
        let c = &mut self.calls[slot as usize];
        *c = ReqCall {
            generation: call.generation.wrapping_add(1),
            ..ReqCall::FREE
        };
        self.finishing -= 1;
        let _ = self.free.push(slot);
    }

    // -----------------------------------------------------------------------------------------
    // Timers and failures.

    pub(crate) fn on_timeout(&mut self, core: &mut Core, now: u64) {
        if core.state == ConnState::Closed {
            return;
        }
        for slot in 0..self.calls.len() {
            let c = &self.calls[slot];
            if c.state == ReqState::AwaitingReply && c.deadline <= now {
                self.answered(core, slot as u32, Outcome::Failed(CallError::TimedOut));
                self.orphans += 1;
            }
        }
        self.progress(core);
    }

    /// The connection is gone: every call fails now (no invalidation is possible; the QP is in
    /// the error state and its windows die with it).
    pub(crate) fn on_closed(&mut self, core: &mut Core) {
        for slot in 0..self.calls.len() {
            let c = self.calls[slot];
            match c.state {
                ReqState::Free => continue,
                ReqState::AwaitingReply => {
                    self.awaiting -= 1;
                    self.finishing += 1;
                    self.calls[slot].outcome = Outcome::Failed(CallError::ConnectionLost);
                }
                ReqState::Finishing => {
                    if let Outcome::Reply { .. } = c.outcome {
                        // Answered, but its STags could not all be invalidated: not a success.
                        self.calls[slot].outcome = Outcome::Failed(CallError::ConnectionLost);
                    }
                }
            }
            self.calls[slot].state = ReqState::Finishing;
            self.complete(core, slot as u32);
        }
        self.orphans = 0;
    }
}

/// What a received reply means.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Ignore it.
    Drop,
    /// Unknown XID, no usable header.
    Unknown,
    /// Only a credit update (RDMA_DONE).
    Credits(u32),
    /// Unknown XID with a credit update.
    UnknownWithCredits(u32),
    /// Fail the call.
    Fail(u32, CallError),
    /// Fail the call and update credits.
    FailWithCredits(u32, CallError, u32),
    /// A usable reply.
    Reply {
        slot: u32,
        granted: u32,
        len: u32,
        written: [u32; MAX_WRITE_CHUNKS],
        /// Offset of the inline reply in the receive buffer (RDMA_MSG); `None` for RDMA_NOMSG.
        copy_from: Option<u32>,
    },
}

impl Verdict {
    /// The call the reply answers, if it names one.
    fn slot(&self) -> Option<u32> {
        match *self {
            Verdict::Fail(s, _) | Verdict::FailWithCredits(s, _, _) => Some(s),
            Verdict::Reply { slot, .. } => Some(slot),
            _ => None,
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
