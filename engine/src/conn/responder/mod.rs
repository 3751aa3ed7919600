//! The responder: serves the calls of one direction of a connection — the forward calls on a
//! server, and the backward calls (RFC 8167) on a client. One code for both; what differs is a
//! [`Policy`] value (chunks allowed or not, the grant, the Send's work request kind, what
//! happens to a call that finds no free slot, the receives a client keeps back for backward
//! calls); the backward values live in [`super::backchannel`].
//!
//! Normal operation: `credits` receives are kept posted (that number is the grant sent in every
//! reply; a backward responder's receives are added once the backchannel is enabled). A
//! completed receive is decoded once and its header validated into a call record: a free call
//! slot, or, when none is free, an entry of the backlog (the owned, `Copy` form of what the
//! decoder borrowed from the receive buffer), taken into a slot from there without decoding
//! again. The call then moves through [`RespState`]: a call with Read chunks (or an
//! RDMA_NOMSG call) waits for a data buffer (`WaitBuffer`), has its inline part copied into
//! place and its chunks pulled with RDMA Read straight to their stream offsets (`Reading`);
//! then [`Event::CallReady`] is reported (`Delivered`). [`super::Connection::send_reply`] posts
//! the RDMA Writes of the results and the reply Send (`Sending`); when they have all completed
//! the slot, its receive buffer and its data buffer are free again. No memory of the responder
//! is ever exposed: it posts no binds and sends no rkeys.
//!
//! Calls of either version are taken (Version Two when [`super::Config::max_version`] is 2) and
//! answered in their own version; a Version Two reply copies `rdma_inv_handle` and is sent with
//! Send With Invalidate of exactly that handle when it is not 0.
//!
//! Without chunks (the backward direction), a call carrying any chunk is answered ERR_CHUNK
//! (Version Two: RDMA2_ERR_BAD_XDR) and every result goes inline; a reply too large for the
//! inline threshold is answered ERR_CHUNK (RDMA2_ERR_CANT_REPLY).
//!
//! Recovery: a header the codec rejects is answered as [`HeaderError::response`] says — ERR_VERS
//! (range 1..=`max_version`), ERR_CHUNK, RDMA2_ERR_BAD_XDR or RDMA2_ERR_INVAL_PROC through a
//! call slot in `ErrorPending` — or dropped. A reply that does not fit the chunks offered is
//! answered ERR_CHUNK (v1) or RDMA2_ERR_CANT_REPLY with the first segment too short and the
//! length it needed (v2; index 0 when the chunk that overflows has no segment at all). No
//! RDMA_ERROR is ever sent with Send With Invalidate (RFC 8797 §4.1: that conveys a reply).
//! RDMA_DONE is
//! ignored, RDMA_MSGP is treated as RDMA_MSG, an RDMA_ERROR from the requester is dropped.
//! Geometry the codec cannot judge (a Read chunk position outside the stream, a stream larger
//! than any data buffer, an RDMA_NOMSG stream whose XID differs from the header's or that is not
//! a CALL) is answered with ERR_CHUNK (v1) or RDMA2_ERR_BAD_XDR (v2).
//!
//! [`HeaderError::response`]: crate::proto::v1::HeaderError::response

use super::credits;
mod answer;
mod send;

pub(crate) use answer::ErrAnswer;

use super::fixed_capacity::{IndexStack, Ring};
use super::receive::{self, AnyBody, AnyError};
use super::stream::{build_pieces_into, copy_pieces as copy_pieces_into, Cut, Insertions, Pieces};
use super::{
    wr_kind, CallId, ConnState, Core, Event, HostMemory, IncomingCall, LocalBuf, ReplyError,
    ReplyKind, ReplySpec, SentAnswer, WorkRequest, MAX_PARTS, MAX_READ_SEGMENTS,
    MAX_REPLY_SEGMENTS, MAX_WRITE_CHUNKS, MAX_WRITE_SEGMENTS,
};
use crate::proto::chunks::{ChunkLists, ChunkListsRef, ReadSegment, Segment};
use crate::proto::v1::{self, Message, MessageBody};
use crate::proto::v2;
use crate::verbs::{Completion, Sge, WrId};
use crate::xdr::pad4;

const MAX_W: usize = MAX_WRITE_CHUNKS * MAX_WRITE_SEGMENTS;

/// What sets the responder of one direction apart from the other's (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Calls may carry chunks (Read chunks pulled, Write and Reply chunks used). Without, a
    /// call carrying any chunk is answered ERR_CHUNK (RDMA2_ERR_BAD_XDR) and results go
    /// inline.
    pub(crate) chunks: bool,
    /// The credits granted in every answer (never 0).
    pub(crate) grant: u32,
    /// The work request kind of the answers' Sends ([`wr_kind`]).
    pub(crate) send_kind: u8,
    /// A call that finds no free slot waits in the backlog; else it is dropped (the peer
    /// exceeded its credits; its retransmission rules apply).
    pub(crate) backlog: bool,
    /// Keeps [`Core::recv_reserve`] at the grant not taken by unanswered calls: the posted
    /// receives the peer may still use for calls, kept back from this side's own calls.
    pub(crate) reserve: bool,
    /// A valid call sets the connection's version ([`Core::version`]: the version of the
    /// server's backward calls).
    pub(crate) sets_version: bool,
}

impl Policy {
    /// The forward responder of a server: chunks, the configured credits, backlog.
    pub(crate) fn forward(core: &Core) -> Policy {
        Policy {
            chunks: true,
            grant: credits::sent_grant(core.cfg.credits),
            send_kind: wr_kind::SEND,
            backlog: true,
            reserve: false,
            sets_version: true,
        }
    }

    /// [`Policy::reserve`]: keeps the posted receives of the grant not taken by `unanswered`
    /// calls back from this side's own calls.
    #[inline]
    fn set_reserve(&self, core: &mut Core, unanswered: u32) {
        if self.reserve {
            core.recv_reserve = credits::backward_reserve(self.grant, unanswered);
        }
    }
}

/// State of a responder call slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RespState {
    /// Unused.
    Free,
    /// Valid call with chunks; waiting for a free data buffer to reassemble into.
    WaitBuffer,
    /// Pulling the Read chunks with RDMA Read.
    Reading,
    /// [`Event::CallReady`] reported; waiting for `send_reply`.
    Delivered,
    /// An RDMA_ERROR answer waits for send-queue room.
    ErrorPending(ErrAnswer),
    /// The answer's Writes and Send are posted; waiting for their completions.
    Sending,
}

#[derive(Debug, Clone, Copy)]
struct RespCall {
    state: RespState,
    generation: u32,
    xid: u32,
    /// `rdma_vers` of the call, copied into an RDMA_ERROR answer; the reply's version.
    vers: u32,
    /// Version Two `rdma_inv_handle` of the call (0: none may be invalidated remotely).
    inv_handle: u32,
    /// Receive slot still referenced (inline stream, or inline part not yet copied).
    recv: Option<u32>,
    /// Data buffer the stream is reassembled in.
    data: Option<u32>,
    nomsg: bool,
    /// Offset of the inline RPC message in the receive buffer (RDMA_MSG).
    inline_off: u32,
    /// Length of the base stream: inline payload (RDMA_MSG) or Position Zero chunk (RDMA_NOMSG).
    base_len: u32,
    stream_len: u32,
    reads: [ReadSegment; MAX_READ_SEGMENTS],
    nreads: u8,
    ins: Insertions,
    writes: [Segment; MAX_W],
    wstart: [u8; MAX_WRITE_CHUNKS],
    wcount: [u8; MAX_WRITE_CHUNKS],
    nwrites: u8,
    reply: [Segment; MAX_REPLY_SEGMENTS],
    nreply: u8,
    has_reply: bool,
    /// The single distinct handle of the call's chunks (Send With Invalidate candidate).
    single_handle: Option<u32>,
    /// Stream offset where each non-Position-Zero read segment's data starts.
    seg_out: [u32; MAX_READ_SEGMENTS],
    // Read progress: current segment, octets of it requested, base offset reached in the
    // Position Zero chunk.
    rd_seg: u8,
    rd_off: u32,
    pz_base: u32,
    reads_inflight: u32,
    /// Outstanding send-queue work requests.
    outstanding: u32,
}

impl RespCall {
    const FREE: RespCall = RespCall {
        state: RespState::Free,
        generation: 0,
        xid: 0,
        vers: 0,
        inv_handle: 0,
        recv: None,
        data: None,
        nomsg: false,
        inline_off: 0,
        base_len: 0,
        stream_len: 0,
        reads: [ReadSegment {
            position: 0,
            target: Segment {
                handle: 0,
                length: 0,
                offset: 0,
            },
        }; MAX_READ_SEGMENTS],
        nreads: 0,
        ins: Insertions::EMPTY,
        writes: [Segment {
            handle: 0,
            length: 0,
            offset: 0,
        }; MAX_W],
        wstart: [0; MAX_WRITE_CHUNKS],
        wcount: [0; MAX_WRITE_CHUNKS],
        nwrites: 0,
        reply: [Segment {
            handle: 0,
            length: 0,
            offset: 0,
        }; MAX_REPLY_SEGMENTS],
        nreply: 0,
        has_reply: false,
        single_handle: None,
        seg_out: [0; MAX_READ_SEGMENTS],
        rd_seg: 0,
        rd_off: 0,
        pz_base: 0,
        reads_inflight: 0,
        outstanding: 0,
    };

    /// Makes a slot a fresh call of `generation` in place: every field reset except the
    /// arrays, whose entries past their counts (`nreads`, `wstart`/`wcount` under `nwrites`,
    /// `nreply`) are never read. Cheaper than assigning [`RespCall::FREE`], which moves the
    /// whole slot (about 1.8 KiB) on every call.
    fn reset(&mut self, generation: u32) {
        self.state = RespState::Free;
        self.generation = generation;
        self.xid = 0;
        self.vers = 0;
        self.inv_handle = 0;
        self.recv = None;
        self.data = None;
        self.nomsg = false;
        self.inline_off = 0;
        self.base_len = 0;
        self.stream_len = 0;
        self.nreads = 0;
        self.ins.clear();
        self.wstart = [0; MAX_WRITE_CHUNKS];
        self.wcount = [0; MAX_WRITE_CHUNKS];
        self.nwrites = 0;
        self.nreply = 0;
        self.has_reply = false;
        self.single_handle = None;
        self.rd_seg = 0;
        self.rd_off = 0;
        self.pz_base = 0;
        self.reads_inflight = 0;
        self.outstanding = 0;
    }

    /// Copies the chunk lists of a call (the codec bounded them by our limits, which are capped
    /// at the array sizes; any excess is an ERR_CHUNK, never a panic): `false` when they do not
    /// fit.
    fn copy_lists(&mut self, lists: &ChunkLists<'_>) -> bool {
        if !(lists.reads.len() <= MAX_READ_SEGMENTS
            && lists.writes.len() <= MAX_WRITE_CHUNKS
            && lists.reply.map_or(0, |r| r.len()) <= MAX_REPLY_SEGMENTS)
        {
            return false;
        }
        for (i, r) in lists.reads.iter().enumerate() {
            self.reads[i] = r;
        }
        self.nreads = lists.reads.len() as u8;
        let mut ok = true;
        let mut w = 0usize;
        for (k, chunk) in lists.writes.iter().enumerate() {
            if w + chunk.len() > MAX_W || chunk.len() > MAX_WRITE_SEGMENTS {
                ok = false;
                break;
            }
            self.wstart[k] = w as u8;
            self.wcount[k] = chunk.len() as u8;
            for s in chunk.segments() {
                self.writes[w] = s;
                w += 1;
            }
        }
        self.nwrites = lists.writes.len() as u8;
        if let Some(r) = lists.reply {
            self.has_reply = true;
            for (i, s) in r.segments().enumerate() {
                self.reply[i] = s;
            }
            self.nreply = r.len() as u8;
        }
        ok
    }

    /// Lays out the call's XDR stream: the base (inline payload of `h`, or the Position Zero
    /// chunk), the Read chunks inserted at their positions, and where each of their segments
    /// lands. `false` when the positions or lengths cannot make a stream.
    fn lay_out_stream(&mut self, lists: &ChunkLists<'_>, h: &receive::Any<'_>) -> bool {
        let mut ok = true;
        if self.nomsg {
            self.base_len = lists.reads.position_zero().map_or(0, |c| c.length());
        } else {
            self.base_len = h.payload.len() as u32;
            self.inline_off = h.header_len as u32;
        }
        for chunk in lists.reads.chunks().filter(|c| c.position != 0) {
            if self
                .ins
                .push(chunk.position, chunk.length(), self.base_len)
                .is_err()
            {
                ok = false;
                break;
            }
        }
        match self.base_len.checked_add(self.ins.grow) {
            Some(l) => self.stream_len = l,
            None => ok = false,
        }
        // Where each non-zero-position segment lands: its chunk's offset plus the lengths of the
        // chunk's earlier segments.
        let mut k = 0usize;
        let mut prev: Option<u32> = None;
        let mut off = 0u32;
        for i in 0..self.nreads as usize {
            let rs = self.reads[i];
            if rs.position == 0 {
                continue;
            }
            if prev.is_some_and(|p| p != rs.position) {
                k += 1;
                off = 0;
            }
            prev = Some(rs.position);
            self.seg_out[i] = if k < self.ins.len() {
                self.ins.chunk(k).0 + off
            } else {
                0
            };
            off = off.saturating_add(rs.target.length);
        }
        ok
    }

    fn write_chunk(&self, k: usize) -> &[Segment] {
        let s = self.wstart[k] as usize;
        &self.writes[s..s + self.wcount[k] as usize]
    }

    fn reply_capacity(&self) -> u64 {
        self.reply[..self.nreply as usize]
            .iter()
            .map(|s| u64::from(s.length))
            .sum()
    }
}

/// A call that waited for a slot: its receive and its header, validated into `call` when it
/// arrived (the backlog holds one per receive, allocated with the responder).
#[derive(Debug, Clone, Copy)]
struct Pending {
    recv: u32,
    verdict: Verdict,
    call: RespCall,
}

/// What to do with a validated call header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing to answer; the receive goes back (RDMA_DONE, a requester's RDMA_ERROR, an
    /// unreadable buffer, a header the decoder rejected without an answer).
    Drop,
    /// Answer with this RDMA_ERROR; `sets_version`: the call's version counts as the
    /// connection's ([`Policy::sets_version`]) first.
    Error { kind: ErrAnswer, sets_version: bool },
    /// A valid call.
    Admit,
}

pub(crate) struct Responder {
    policy: Policy,
    calls: Vec<RespCall>,
    free: IndexStack,
    /// One send buffer per call slot, for the answer's transport header.
    headers: Vec<LocalBuf>,
    data: Vec<LocalBuf>,
    data_busy: Vec<bool>,
    largest_data: u32,
    /// Receives completed while no call slot was free (or before the connection was up).
    backlog: Ring<Pending>,
    /// Slots in `WaitBuffer`, `Reading` or `ErrorPending` (to skip the progress scan).
    active: u32,
    /// Calls taken and not answered yet (their answer's Send not posted).
    unanswered: u32,
    /// Where [`Responder::send_reply`] plans a reply (reused by every reply).
    plan: Box<send::ReplyPlan>,
    /// The answer whose Send finished last, for [`Responder::poll_sent`] (one completion
    /// finishes one Send: an owner that drains after every completion misses none).
    sent: Option<SentAnswer>,
}

impl Responder {
    /// A responder of `policy` with a call slot per header buffer in `headers`, reassembling
    /// calls with chunks in the buffers of `data` (none without chunks).
    pub(crate) fn new(
        core: &Core,
        policy: Policy,
        headers: &[LocalBuf],
        data: &[LocalBuf],
    ) -> Self {
        let n = headers.len();
        let backlog = if policy.backlog { core.recvs.len() } else { 1 };
        Responder {
            policy,
            calls: vec![RespCall::FREE; n],
            free: IndexStack::full(n),
            headers: headers.to_vec(),
            data: data.to_vec(),
            data_busy: vec![false; data.len()],
            largest_data: data.iter().map(|d| d.len).max().unwrap_or(0),
            backlog: Ring::new(
                backlog,
                Pending {
                    recv: 0,
                    verdict: Verdict::Drop,
                    call: RespCall::FREE,
                },
            ),
            active: 0,
            unanswered: 0,
            plan: Box::new(send::ReplyPlan::EMPTY),
            sent: None,
        }
    }

    /// The answer whose Send finished since the last call, if one did.
    #[inline]
    pub(crate) fn poll_sent(&mut self) -> Option<SentAnswer> {
        self.sent.take()
    }

    /// The answer's Send of call slot `slot` finished (`ok`: successfully); replaces a report
    /// nobody took.
    #[inline]
    pub(crate) fn note_sent(&mut self, slot: u32, ok: bool) {
        if let Some(c) = self.calls.get(slot as usize) {
            let generation = c.generation;
            let call = CallId { slot, generation };
            self.sent = Some(SentAnswer { call, ok });
        }
    }

    /// The credits granted in every answer.
    pub(crate) fn grant(&self) -> u32 {
        self.policy.grant
    }

    /// Calls taken and not answered yet.
    pub(crate) fn unanswered(&self) -> u32 {
        self.unanswered
    }

    /// Posted receives the peer may still use for calls ([`Policy::reserve`]).
    pub(crate) fn update_reserve(&self, core: &mut Core) {
        self.policy.set_reserve(core, self.unanswered);
    }

    /// A call's answer was posted.
    fn answered_call(&mut self, core: &mut Core) {
        self.unanswered = self.unanswered.saturating_sub(1);
        self.update_reserve(core);
    }

    /// Calls may arrive (and be delivered) before the responder sees the connection
    /// established; replies sent before then use the v1 defaults (1024-octet thresholds, no
    /// remote invalidation), which are never larger than the negotiated values.
    pub(crate) fn on_established(&mut self, _core: &mut Core) {}

    // -----------------------------------------------------------------------------------------
    // Completions.

    pub(crate) fn on_completion<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        _now: u64,
        kind: u8,
        index: u32,
        _wc: &Completion,
        mem: &mut M,
    ) {
        match kind {
            wr_kind::READ | wr_kind::WRITE | wr_kind::SEND | wr_kind::BACK_SEND => {
                let Some(call) = self.calls.get_mut(index as usize) else {
                    core.state = ConnState::Closed;
                    return;
                };
                if call.state == RespState::Free || call.outstanding == 0 {
                    core.state = ConnState::Closed;
                    return;
                }
                call.outstanding -= 1;
                if kind == wr_kind::READ {
                    call.reads_inflight = call.reads_inflight.saturating_sub(1);
                }
                let done = call.state == RespState::Sending && call.outstanding == 0;
                if kind == self.policy.send_kind {
                    self.note_sent(index, true);
                }
                if done {
                    self.free_slot(core, index);
                }
            }
            _ => {
                // Responders never bind or invalidate (and receives come decoded).
                core.state = ConnState::Closed;
                return;
            }
        }
        self.progress(core, mem);
    }

    /// A call arrived in receive `index`, decoded by the connection (`None`: its buffer is not
    /// readable): holds the receive, keeps the receive queue filled, and validates the call
    /// into a free slot, or into the backlog (taken from there when a slot frees up, without
    /// decoding again). `false` when the connection must close (the caller then skips the
    /// processing loop).
    pub(crate) fn take_recv(
        &mut self,
        core: &mut Core,
        index: u32,
        decoded: Option<&Result<receive::Any<'_>, AnyError>>,
    ) -> bool {
        let Some(rbuf) = core.recv_buf(index) else {
            core.state = ConnState::Closed;
            return false;
        };
        core.hold_recv(index);
        core.refill_recvs();
        let policy = self.policy;
        if self.backlog.is_empty() {
            if let Some(slot) = self.free.pop() {
                // Built in place in the (free) slot: a slot is too large to build aside.
                let call = &mut self.calls[slot as usize];
                call.reset(call.generation);
                let verdict = validate(policy, call, decoded);
                self.take(core, slot, index, rbuf, verdict);
                return true;
            }
        }
        if !policy.backlog {
            // Unreachable with a peer that keeps to its credits: there is a slot per credit
            // plus one per answer still being sent. The call is dropped (its receive
            // reposted); the peer's retransmission rules apply.
            core.release_recv(index);
            return true;
        }
        let Some(p) = self.backlog.push_slot() else {
            core.state = ConnState::Closed;
            return false;
        };
        p.recv = index;
        p.call.reset(0);
        p.verdict = validate(policy, &mut p.call, decoded);
        true
    }

    /// Takes backlogged calls while slots are free. Out of line: a peer within its credits
    /// rarely fills every slot.
    #[cold]
    #[inline(never)]
    fn drain_backlog(&mut self, core: &mut Core) {
        while !self.backlog.is_empty() {
            let Some(slot) = self.free.pop() else {
                return;
            };
            let Some(p) = self.backlog.pop() else {
                let _ = self.free.push(slot);
                return;
            };
            let Some(rbuf) = core.recv_buf(p.recv) else {
                let _ = self.free.push(slot);
                return;
            };
            let call = &mut self.calls[slot as usize];
            *call = RespCall {
                generation: call.generation,
                ..p.call
            };
            self.take(core, slot, p.recv, rbuf, p.verdict);
        }
    }

    /// Acts on the `verdict` on the call validated into slot `slot` (receive `recv`, buffer
    /// `rbuf`).
    fn take(&mut self, core: &mut Core, slot: u32, recv: u32, rbuf: LocalBuf, verdict: Verdict) {
        let sets_version = match verdict {
            Verdict::Drop => {
                let _ = self.free.push(slot);
                core.release_recv(recv);
                return;
            }
            Verdict::Error { sets_version, .. } => sets_version,
            Verdict::Admit => true,
        };
        self.unanswered += 1;
        self.policy.set_reserve(core, self.unanswered);
        if sets_version && self.policy.sets_version {
            core.version = self.calls[slot as usize].vers;
        }
        match verdict {
            Verdict::Error { kind, .. } => {
                self.answer_error(slot, kind);
                core.release_recv(recv);
            }
            _ => self.admit(core, slot, recv, rbuf),
        }
    }

    /// A valid call in `slot`: a pure inline one is delivered from its receive buffer at once;
    /// one with Read chunks (or a long one) waits for a data buffer to be reassembled in.
    fn admit(&mut self, core: &mut Core, slot: u32, recv: u32, rbuf: LocalBuf) {
        let call = &mut self.calls[slot as usize];
        if !call.nomsg && call.nreads == 0 {
            // Pure inline call: hand out the receive buffer itself.
            call.recv = Some(recv);
            call.state = RespState::Delivered;
            let stream = LocalBuf {
                addr: rbuf.addr + u64::from(call.inline_off),
                len: call.base_len,
                lkey: rbuf.lkey,
            };
            self.deliver(core, slot, stream);
            return;
        }
        if call.stream_len > self.largest_data {
            let vers = call.vers;
            self.answer_error(slot, ErrAnswer::unusable(vers));
            core.release_recv(recv);
            return;
        }
        if call.nomsg {
            core.release_recv(recv);
        } else {
            call.recv = Some(recv);
        }
        call.state = RespState::WaitBuffer;
        self.active += 1;
    }

    /// Answers (`xid`, `vers`) with a Version Two error outside any call (an RDMA2_OPTIONAL
    /// message of an unknown type). Dropped when no slot is free.
    pub(crate) fn answer_v2_error<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        xid: u32,
        vers: u32,
        e: v2::RdmaError,
        mem: &mut M,
    ) {
        let Some(slot) = self.free.pop() else {
            return;
        };
        let call = &mut self.calls[slot as usize];
        call.reset(call.generation);
        call.xid = xid;
        call.vers = vers;
        self.unanswered += 1;
        self.update_reserve(core);
        self.answer_error(slot, ErrAnswer::V2(e));
        self.progress(core, mem);
    }

    /// Turns the call built in `slot` into a pending RDMA_ERROR answer of `kind` (logged at
    /// `debug`). Out of line: only error paths come here.
    #[cold]
    #[inline(never)]
    fn answer_error(&mut self, slot: u32, kind: ErrAnswer) {
        let call = &mut self.calls[slot as usize];
        tracing::debug!(xid = call.xid, answer = ?kind, "RDMA_ERROR sent");
        call.state = RespState::ErrorPending(kind);
        call.recv = None;
        call.data = None;
        self.active += 1;
    }

    fn deliver(&mut self, core: &mut Core, slot: u32, stream: LocalBuf) {
        let c = &self.calls[slot as usize];
        let mut cap = [0u32; MAX_WRITE_CHUNKS];
        for (k, cp) in cap.iter_mut().enumerate().take(c.nwrites as usize) {
            *cp = c
                .write_chunk(k)
                .iter()
                .fold(0u32, |a, s| a.saturating_add(s.length));
        }
        core.emit(Event::CallReady(IncomingCall {
            call: CallId {
                slot,
                generation: c.generation,
            },
            xid: c.xid,
            stream,
            write_chunks: c.nwrites,
            write_capacity: cap,
            reply_capacity: c
                .has_reply
                .then(|| c.reply_capacity().min(u64::from(u32::MAX)) as u32),
            read_segments: c.nreads,
            position_zero: c.nomsg,
        }));
    }

    /// The processing loop: error answers waiting for room, calls waiting for a data buffer,
    /// Read chunks to pull, finished reads to deliver, then backlogged receives.
    pub(crate) fn progress<M: HostMemory + ?Sized>(&mut self, core: &mut Core, mem: &mut M) {
        if core.state == ConnState::Closed {
            return;
        }
        if !self.backlog.is_empty() {
            self.drain_backlog(core);
        }
        // Each slot active now is visited once, in slot order; none becomes active past the
        // one being handled, so the scan ends at the last of them.
        let mut left = self.active;
        let mut slot = 0u32;
        while left > 0 && (slot as usize) < self.calls.len() {
            match self.calls[slot as usize].state {
                RespState::ErrorPending(kind) => self.try_send_error(core, slot, kind, mem),
                RespState::WaitBuffer => self.try_start_reading(core, slot, mem),
                RespState::Reading => self.pump_reads(core, slot, mem),
                _ => {
                    slot += 1;
                    continue;
                }
            }
            left -= 1;
            slot += 1;
        }
    }

    fn try_send_error<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        slot: u32,
        kind: ErrAnswer,
        mem: &mut M,
    ) {
        if core.sq_free() == 0 {
            return;
        }
        let header = self.headers[slot as usize];
        let call = &mut self.calls[slot as usize];
        let credits = self.policy.grant;
        let max_version = core.cfg.max_version;
        let n = mem
            .bytes_mut(header.addr, header.len as usize)
            .and_then(|out| kind.encode(call.xid, call.vers, credits, max_version, out));
        let Some(n) = n else {
            core.state = ConnState::Closed;
            return;
        };
        let first = Sge {
            addr: header.addr,
            len: n as u32,
            lkey: header.lkey,
        };
        let send_id = WrId::new(self.policy.send_kind, u64::from(slot));
        core.post_gather(send_id, first, &[], None);
        call.outstanding += 1;
        call.state = RespState::Sending;
        self.active -= 1;
        self.answered_call(core);
    }

    fn try_start_reading<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        slot: u32,
        mem: &mut M,
    ) {
        // The first free buffer large enough.
        let need = self.calls[slot as usize].stream_len;
        let found = (0..self.data.len()).find(|&i| !self.data_busy[i] && self.data[i].len >= need);
        let Some(d) = found else {
            return;
        };
        self.data_busy[d] = true;
        let d = d as u32;
        let dbuf = self.data[d as usize];
        let call = &mut self.calls[slot as usize];
        call.data = Some(d);
        // Pads of the inserted chunks are zeros in the stream (never transferred).
        for k in 0..call.ins.len() {
            let (pos, len) = call.ins.chunk(k);
            let pad = pad4(len as usize);
            if pad != 0 {
                if let Some(z) = mem.bytes_mut(dbuf.addr + u64::from(pos) + u64::from(len), pad) {
                    z.fill(0);
                }
            }
        }
        // RDMA_MSG: copy the inline parts into place and release the receive buffer.
        if let Some(r) = call.recv.take() {
            let ok = match core.recv_buf(r) {
                Some(rbuf) => {
                    let src0 = rbuf.addr + u64::from(call.inline_off);
                    let mut b = 0u32;
                    let mut ok = true;
                    while b < call.base_len {
                        let (out, run) = call.ins.locate(b);
                        let n = run.unwrap_or(u32::MAX).min(call.base_len - b);
                        if !mem.copy(dbuf.addr + u64::from(out), src0 + u64::from(b), n as usize) {
                            ok = false;
                            break;
                        }
                        b += n;
                    }
                    ok
                }
                None => false,
            };
            core.release_recv(r);
            if !ok {
                core.state = ConnState::Closed;
                return;
            }
        }
        call.state = RespState::Reading;
        self.pump_reads(core, slot, mem);
    }

    fn pump_reads<M: HostMemory + ?Sized>(&mut self, core: &mut Core, slot: u32, mem: &mut M) {
        let Some(d) = self.calls[slot as usize].data else {
            return;
        };
        let dbuf = self.data[d as usize];
        let call = &mut self.calls[slot as usize];
        while (call.rd_seg as usize) < call.nreads as usize {
            let rs = call.reads[call.rd_seg as usize];
            let seg = rs.target;
            let remaining = seg.length - call.rd_off;
            if remaining == 0 {
                call.rd_seg += 1;
                call.rd_off = 0;
                continue;
            }
            if core.sq_free() == 0 || core.reads_used >= core.cfg.max_rdma_reads.max(1) {
                return;
            }
            let (out, n) = if rs.position == 0 {
                let (out, run) = call.ins.locate(call.pz_base);
                (out, remaining.min(run.unwrap_or(u32::MAX)))
            } else {
                (call.seg_out[call.rd_seg as usize] + call.rd_off, remaining)
            };
            core.post_send(WorkRequest::RdmaRead {
                wr_id: WrId::new(wr_kind::READ, u64::from(slot)),
                local: Sge {
                    addr: dbuf.addr + u64::from(out),
                    len: n,
                    lkey: dbuf.lkey,
                },
                remote_addr: seg.offset + u64::from(call.rd_off),
                rkey: seg.handle,
            });
            call.outstanding += 1;
            call.reads_inflight += 1;
            call.rd_off += n;
            if rs.position == 0 {
                call.pz_base += n;
            }
            if call.rd_off == seg.length {
                call.rd_seg += 1;
                call.rd_off = 0;
            }
        }
        if call.reads_inflight > 0 {
            return;
        }
        // All chunks are in place.
        let stream = LocalBuf {
            addr: dbuf.addr,
            len: call.stream_len,
            lkey: dbuf.lkey,
        };
        self.active -= 1;
        if call.nomsg {
            // The RPC message in the Position Zero chunk starts with the header's XID and is a
            // CALL (v2 draft, "Message Direction": rdma_direction matches its msg_type).
            let mut head = [0u32; 2];
            if let Some(b) = mem.bytes(stream.addr, 8.min(call.stream_len as usize)) {
                for (i, w) in b.chunks_exact(4).enumerate() {
                    head[i] = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                }
            }
            if call.stream_len < 8 || head != [call.xid, 0] {
                let kind = ErrAnswer::unusable(call.vers);
                self.release_data(slot);
                self.answer_error(slot, kind);
                self.try_send_error(core, slot, kind, mem);
                return;
            }
        }
        call.state = RespState::Delivered;
        self.deliver(core, slot, stream);
    }

    fn release_data(&mut self, slot: u32) {
        if let Some(d) = self.calls[slot as usize].data.take() {
            if let Some(b) = self.data_busy.get_mut(d as usize) {
                *b = false;
            }
        }
    }

    fn free_slot(&mut self, core: &mut Core, slot: u32) {
        if let Some(r) = self.calls[slot as usize].recv {
            core.release_recv(r);
        }
        self.release_data(slot);
        let c = &mut self.calls[slot as usize];
        c.reset(c.generation.wrapping_add(1));
        let _ = self.free.push(slot);
    }

    // -----------------------------------------------------------------------------------------
    // Failures.

    pub(crate) fn on_closed(&mut self, core: &mut Core) {
        for slot in 0..self.calls.len() as u32 {
            if self.calls[slot as usize].state != RespState::Free {
                self.free_slot(core, slot);
            }
        }
        self.active = 0;
        self.unanswered = 0;
        while self.backlog.pop().is_some() {}
    }
}

/// Validates a decoded call header (`None`: its buffer was not readable) into `call`, a free
/// record: copies what the call needs out of the receive buffer (the chunk lists, where its
/// stream lies) and says what to do with it.
fn validate(
    policy: Policy,
    call: &mut RespCall,
    decoded: Option<&Result<receive::Any<'_>, AnyError>>,
) -> Verdict {
    let h = match decoded {
        None => return Verdict::Drop,
        Some(Ok(h)) => h,
        Some(Err(e)) => return reject_header(call, e),
    };
    call.xid = h.xid;
    call.vers = h.vers;
    let (lists, nomsg, inv_handle) = match h.body {
        AnyBody::Msg { lists, inv_handle } => (lists, false, inv_handle),
        AnyBody::Nomsg { lists, inv_handle } => (lists, true, inv_handle),
        // RDMA_DONE is ignored; an RDMA_ERROR from a requester is never answered; optional
        // messages never get here.
        _ => return Verdict::Drop,
    };
    // RFC 8166 §3.5.3: an RDMA_NOMSG call carries its RPC message in a Position Zero Read
    // chunk (the Version Two decoder checked this already). Without chunk support (RFC 8167
    // §5.3, backward calls) any chunk makes the call unusable: ERR_CHUNK (Version Two: its
    // equivalent, RDMA2_ERR_BAD_XDR).
    let kind = ErrAnswer::unusable(h.vers);
    let chunks_refused = !policy.chunks && (nomsg || !lists.is_empty());
    if (nomsg && !lists.reads.has_position_zero()) || chunks_refused {
        let sets_version = false;
        return Verdict::Error { kind, sets_version };
    }
    call.nomsg = nomsg;
    // Nothing of this side may be invalidated for a call that offered no chunk.
    call.inv_handle = if policy.chunks { inv_handle } else { 0 };
    call.single_handle = lists.single_handle();
    if !(call.copy_lists(&lists) && call.lay_out_stream(&lists, h)) {
        let sets_version = true;
        return Verdict::Error { kind, sets_version };
    }
    Verdict::Admit
}

/// A call header the decoder rejected: the RDMA_ERROR the error calls for (its XID and
/// version into `call`), or nothing; logged at `debug` (a peer can send one per receive). Out
/// of line, as every error path of the call path.
#[cold]
#[inline(never)]
fn reject_header(call: &mut RespCall, e: &AnyError) -> Verdict {
    tracing::debug!(error = ?e, "call header rejected");
    match ErrAnswer::for_error(e) {
        None => Verdict::Drop,
        Some((xid, vers, kind)) => {
            call.xid = xid;
            call.vers = vers;
            let sets_version = false;
            Verdict::Error { kind, sets_version }
        }
    }
}
