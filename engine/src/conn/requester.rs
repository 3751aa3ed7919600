//! Requester (client) side of the connection.
//!
//! Normal operation: each call lives in a slot of a fixed array (as many as header slots) and
//! moves through [`ReqState`]: `Free` → `AwaitingReply` (binds and Send posted; holds a credit
//! and a posted receive) → `Finishing` (reply or error received: LocalInv posted for every STag
//! the peer did not invalidate; waiting for those and for the call's other send-queue work to
//! complete) → `Free`, at which point [`Event::ReplyReady`] or [`Event::CallFailed`] is
//! reported. Every send-queue work request of a call carries the call slot in its `wr_id`, so
//! the slot cannot be reused while any of them is outstanding. Calls go in the connection's
//! version; in Version Two they name in `rdma_inv_handle` the one window the responder may
//! invalidate (the Reply chunk's, else the first Write chunk's, else the first Read segment's).
//! A call that may have to be sent again (the Version Two probe, or one with a CANT_REPLY
//! fallback) keeps a copy of its spec in a per-slot array; `Finishing` then ends by sending it
//! again in the same slot and generation instead of reporting it.
//!
//! Recovery: a reply that does not decode, or breaks a reply rule, fails the call whose XID it
//! carries (RFC 8166 says such a reply is dropped; failing the call, as Linux does, keeps the
//! caller from waiting forever); one with an unknown XID is dropped. A timed-out call is failed
//! after its STags are invalidated and its credit is kept as an "orphan" until the late reply
//! with its XID arrives (a stray reply naming any other XID frees nothing). A lost connection fails every call at once. ERR_VERS while probing with
//! Version Two switches the connection to Version One and sends the call again; RDMA2_ERR_
//! CANT_REPLY (in Version One: ERR_CHUNK) sends it again once with the fallback resources; other
//! errors fail the call ([`CallError::Rdma2`], [`CallError::ErrChunk`], ...).
//!
//! Credits: one until the first non-error reply, then the clamped `rdma_credit` of the latest
//! non-error reply (RDMA_MSG / RDMA_NOMSG / RDMA_MSGP). The `rdma_credit` of an RDMA_ERROR or
//! RDMA2_ERROR is never used, before or after the first reply, whatever XID it names: the v2
//! draft ("Protocol Version Negotiation") has a requester "assume the ability to exchange only a
//! single RPC-over-RDMA message at a time until it receives a non-error RPC-over-RDMA message
//! from the responder that reports the responder's actual credit limit" ("as with Version One"),
//! so an error does not report the limit (RFC 8166 §3.3.3, from memory, is the Version One
//! rule). RFC 8166 §4.2.3 (from memory) gives `rdma_credit` a meaning in an RPC Call (requested)
//! and an RPC Reply (granted) message only, and §4.5 forms an RDMA_ERROR from the XID, version,
//! procedure and error code; an error carries neither. Implementations use a fixed grant
//! (implementation experience §4.4), so ignoring an error's value loses nothing. (Linux
//! xprtrdma's `rpcrdma_reply_handler` takes the value of any message matching a pending XID,
//! errors included, even before the first reply; we do not.) RDMA_DONE changes nothing, whatever
//! XID it names: implementation experience §7.1.2 says a receiver "should ignore it", and as its
//! direction cannot be told, RFC 8167 §4.1 says "the receiver MUST NOT use the header's credit
//! value" (it is dropped by [`super::wire::route`] before it gets here; its receive is reposted).

use super::stream::{build_pieces, copy_pieces, parts_len, Cut};
use super::wire::{self, AnyBody, AnyError, WireErr};
use super::{
    wr_kind, Access, BadReply, CallError, CallId, CallOptions, CallSpec, ConnState, Core, DdpItem,
    Event, HostMemory, LocalBuf, Reply, StagMode, StartError, WorkRequest, MAX_CALL_STAGS,
    MAX_PARTS, MAX_READ_SEGMENTS, MAX_SGE, MAX_WRITE_CHUNKS, V2_FIRST_MESSAGE,
};
use crate::proto::chunks::{ChunkListsRef, ReadSegment, Segment, SEGMENT_LEN};
use crate::proto::v1::{self, HeaderErrorKind, Message, MessageBody};
use crate::proto::v2;
use crate::u32map::U32Map;
use crate::verbs::{Completion, Sge, WcFlags, WrId};
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
    /// Send the call again once its STags are invalidated.
    Resend(Resend),
}

/// Why a call is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// ERR_VERS answered a Version Two call: again in Version One.
    Fallback,
    /// RDMA2_ERR_CANT_REPLY: again with the fallback reply resources.
    Larger,
}

/// A call spec kept for sending the call again (Version Two negotiation, CANT_REPLY retry).
/// Stored in a per-slot array, written only for calls that may need it.
#[derive(Debug, Clone, Copy)]
struct Saved {
    message: [LocalBuf; MAX_PARTS],
    nmsg: u8,
    ddp: [DdpItem; MAX_READ_SEGMENTS],
    nddp: u8,
    receptacles: [LocalBuf; MAX_WRITE_CHUNKS],
    nrec: u8,
    reply: LocalBuf,
    fallback_reply: Option<LocalBuf>,
    fallback_receptacles: [LocalBuf; MAX_WRITE_CHUNKS],
    nfallback_rec: u8,
    /// The CANT_REPLY retry was used.
    retried: bool,
}

impl Saved {
    const EMPTY: Saved = Saved {
        message: [LocalBuf::EMPTY; MAX_PARTS],
        nmsg: 0,
        ddp: [DdpItem {
            at: 0,
            buf: LocalBuf::EMPTY,
        }; MAX_READ_SEGMENTS],
        nddp: 0,
        receptacles: [LocalBuf::EMPTY; MAX_WRITE_CHUNKS],
        nrec: 0,
        reply: LocalBuf::EMPTY,
        fallback_reply: None,
        fallback_receptacles: [LocalBuf::EMPTY; MAX_WRITE_CHUNKS],
        nfallback_rec: 0,
        retried: false,
    };

    fn has_fallback(&self) -> bool {
        self.fallback_reply.is_some() || self.nfallback_rec > 0
    }
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
    /// The Version Two probe's own deadline ([`super::Config::probe_timeout_ns`]); `u64::MAX`
    /// for every other call.
    probe_deadline: u64,
    outcome: Outcome,
    /// RPC-over-RDMA version the call was sent in.
    vers: u32,
    /// The version of an earlier transmission whose reply is still taken: the Version Two
    /// probe sent again in Version One after its own timeout (decision D-4 in
    /// docs/conformance.md: a slow Version Two responder's late reply completes the call).
    /// 0: none.
    also_vers: u32,
    /// `Requester::saved[slot]` holds this call's spec.
    saved: bool,
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
        probe_deadline: u64::MAX,
        outcome: Outcome::Pending,
        vers: 1,
        also_vers: 0,
        saved: false,
    };
}

pub(crate) struct Requester {
    calls: Vec<ReqCall>,
    saved: Vec<Saved>,
    free: super::ring::IndexStack,
    /// Local maximum of outstanding calls.
    max_credits: u32,
    /// Credits granted by the last non-error reply (1 before the first).
    granted: u32,
    /// Calls in `AwaitingReply`.
    awaiting: u32,
    /// Timed-out calls whose reply may still come.
    orphans: u32,
    /// The XIDs of those calls (as many as `orphans`; capacity: every slot). Only the late
    /// reply of one of them returns a credit.
    orphan_xids: Vec<u32>,
    /// Calls in `Finishing` (to skip the progress scan when zero).
    finishing: u32,
    /// Calls in `Finishing` that will be sent again: they keep their credit meanwhile.
    resending: u32,
    /// XID → slot of every call in `AwaitingReply` (sized for all slots, never grows).
    by_xid: U32Map,
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
            saved: vec![Saved::EMPTY; n],
            free: super::ring::IndexStack::full(n),
            max_credits: core.cfg.credits.min(n as u32),
            granted: 1,
            awaiting: 0,
            orphans: 0,
            orphan_xids: Vec::with_capacity(n),
            finishing: 0,
            resending: 0,
            by_xid: U32Map::new(n),
        }
    }

    pub(crate) fn granted(&self) -> u32 {
        self.granted
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.awaiting + self.orphans + self.resending
    }

    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.calls
            .iter()
            .filter(|c| c.state == ReqState::AwaitingReply)
            .map(|c| c.deadline.min(c.probe_deadline))
            .filter(|&d| d != u64::MAX)
            .min()
    }

    // -----------------------------------------------------------------------------------------
    // Starting a call.

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
        call.also_vers = match reuse {
            Some(_) => self.calls[slot as usize].also_vers,
            None => 0,
        };
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
    fn resend<M: HostMemory + ?Sized>(
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
        self.progress(core, Some(mem));
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
        let h = match wire::decode(buf, &core.v2_limits, core.cfg.max_version) {
            Ok(h) => h,
            Err(AnyError::V1(e)) => {
                // An ERR_VERS from a responder that put its own version in rdma_vers (the
                // layout of ERR_VERS is the same in every version).
                if let HeaderErrorKind::ForeignError {
                    vers_range: Some((low, high)),
                    ..
                } = e.kind
                {
                    return match e.xid.and_then(|x| self.find(x)) {
                        Some(slot) => self.err_vers(core, slot, low, high),
                        None => Verdict::Unknown(e.xid),
                    };
                }
                // Too small to convey a complete RPC message: none of its fields is used,
                // its XID included (RFC 8167 §5.3).
                if matches!(
                    e.kind,
                    HeaderErrorKind::ShortHeader { .. } | HeaderErrorKind::MissingPayload { .. }
                ) {
                    return Verdict::Drop;
                }
                return match e.xid.and_then(|x| self.find(x)) {
                    Some(slot) => {
                        Verdict::Fail(slot, CallError::BadReply(BadReply::Header(e.kind)))
                    }
                    None => Verdict::Drop,
                };
            }
            Err(AnyError::V2(e)) => {
                if matches!(
                    e.kind,
                    v2::HeaderErrorKind::ShortHeader { .. }
                        | v2::HeaderErrorKind::MissingPayload { .. }
                ) {
                    return Verdict::Drop;
                }
                return match e.xid.and_then(|x| self.find(x)) {
                    Some(slot) => {
                        Verdict::Fail(slot, CallError::BadReply(BadReply::HeaderV2(e.kind)))
                    }
                    None => Verdict::Drop,
                };
            }
        };
        let is_v2 = h.vers == v2::VERSION;
        // The credit rule (module doc, "Credits"): only a non-error reply reports a grant.
        let granted = clamp_credits(h.credits, self.max_credits);
        let Some(slot) = self.find(h.xid) else {
            return match h.body {
                AnyBody::Done | AnyBody::Optional(_) => Verdict::Drop,
                AnyBody::Error(_) => Verdict::Unknown(Some(h.xid)),
                AnyBody::Msg { .. } | AnyBody::Nomsg { .. } => {
                    Verdict::UnknownWithCredits(granted, h.xid)
                }
            };
        };
        let call = &self.calls[slot as usize];
        // A Version One reply that is not an error but cannot be used still reports the grant
        // (as before; a Version Two one fails its call without changing credits).
        let with_credits = |e| {
            if is_v2 {
                Verdict::Fail(slot, e)
            } else {
                Verdict::FailWithCredits(slot, e, granted)
            }
        };
        let (lists, nomsg) = match h.body {
            // RDMA_DONE is ignored, whatever XID it names (module doc, "Credits").
            AnyBody::Done | AnyBody::Optional(_) => return Verdict::Drop,
            AnyBody::Error(WireErr::Vers { low, high }) => {
                return self.err_vers(core, slot, low, high)
            }
            AnyBody::Error(WireErr::Chunk) => {
                // Version One has no CANT_REPLY: a responder that cannot fit the reply into
                // what the call offered answers ERR_CHUNK. A call that offered less than its
                // whole reply buffer (a reply size hint) is sent again once, offering all of
                // it ("send the request again, this time with a Reply chunk", implementation
                // experience §4.3).
                let sv = &self.saved[slot as usize];
                if !is_v2 && call.saved && sv.has_fallback() && !sv.retried {
                    return Verdict::Resend(slot, Resend::Larger);
                }
                return Verdict::Fail(slot, CallError::ErrChunk);
            }
            AnyBody::Error(WireErr::Unknown(code)) => {
                return Verdict::Fail(slot, CallError::RdmaError(code))
            }
            AnyBody::Error(WireErr::V2(e)) => {
                if let v2::RdmaError::CantReply { .. } = e {
                    let sv = &self.saved[slot as usize];
                    if call.saved && sv.has_fallback() && !sv.retried {
                        return Verdict::Resend(slot, Resend::Larger);
                    }
                }
                return Verdict::Fail(slot, CallError::Rdma2(e));
            }
            AnyBody::Msg { lists, .. } => (lists, false),
            AnyBody::Nomsg { lists, .. } => (lists, true),
        };
        if h.vers != call.vers && h.vers != call.also_vers {
            // "A responder MUST send Replies with the same RPC-over-RDMA protocol version that
            // the requester uses to send its Calls." (A probe sent again after its timeout
            // went out in both versions: either reply answers it.)
            return with_credits(CallError::BadReply(BadReply::Version {
                call: call.vers,
                reply: h.vers,
            }));
        }
        // Reply-only rules (the Version Two decoder checked them already): no Read list; an
        // RDMA_NOMSG reply is in the Reply chunk.
        if !is_v2 {
            let kind = if !lists.reads.is_empty() {
                Some(HeaderErrorKind::ReadListInReply)
            } else if nomsg && lists.reply.is_none() {
                Some(HeaderErrorKind::NomsgReplyWithoutReplyChunk)
            } else {
                None
            };
            if let Some(k) = kind {
                return with_credits(CallError::BadReply(BadReply::Header(k)));
            }
        }
        // Write list: at most the chunks offered; each returned chunk has at most the offered
        // segment (or is an empty array); lengths never exceed what was offered.
        let mut written = [0u32; MAX_WRITE_CHUNKS];
        if lists.writes.len() > call.nwrites as usize {
            return with_credits(CallError::BadReply(BadReply::WriteList));
        }
        for (i, chunk) in lists.writes.iter().enumerate() {
            let got = chunk.total_length();
            if chunk.len() > 1 || got > call.writes[i].length {
                return with_credits(CallError::BadReply(BadReply::WriteList));
            }
            written[i] = got;
        }
        if nomsg {
            let ok = call.reply_offered
                && lists
                    .reply
                    .is_some_and(|r| r.len() <= 1 && r.total_length() <= call.reply.len);
            if !ok {
                return with_credits(CallError::BadReply(BadReply::ReplyChunk));
            }
            let len = lists.reply.map_or(0, |r| r.total_length());
            Verdict::Reply {
                slot,
                granted,
                len,
                written,
                copy_from: None,
            }
        } else {
            if h.payload.len() > call.reply.len as usize {
                return with_credits(CallError::BadReply(BadReply::TooLong));
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

    /// ERR_VERS for the call in `slot`: while a Version Two call probes the responder and
    /// Version One is in the range, fall back and send the call again; else fail it.
    fn err_vers(&self, core: &Core, slot: u32, low: u32, high: u32) -> Verdict {
        let call = &self.calls[slot as usize];
        if core.probing && call.vers == v2::VERSION && (low..=high).contains(&super::VERSION) {
            return Verdict::Resend(slot, Resend::Fallback);
        }
        Verdict::Fail(slot, CallError::ErrVers { low, high })
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
            Verdict::Unknown(xid) => self.unknown_reply(xid),
            Verdict::UnknownWithCredits(g, xid) => {
                self.granted = g;
                self.unknown_reply(Some(xid));
            }
            Verdict::Fail(slot, e) => self.answered(core, slot, Outcome::Failed(e)),
            Verdict::FailWithCredits(slot, e, g) => {
                self.granted = g;
                self.answered(core, slot, Outcome::Failed(e));
            }
            Verdict::Resend(slot, why) => {
                if why == Resend::Fallback {
                    // The responder speaks only Version One: use it for the rest of the
                    // connection, and remember it for the next one.
                    core.version = super::VERSION;
                    core.probing = false;
                    core.remembered = Some(super::VERSION);
                }
                self.answered(core, slot, Outcome::Resend(why));
                self.resending += 1;
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
                if core.probing && call.vers == v2::VERSION {
                    // A Version Two reply: Version Two it is, with its thresholds from now on.
                    core.probing = false;
                    core.remembered = Some(v2::VERSION);
                }
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
                } else {
                    // A long reply: the responder wrote the RPC message into the Reply chunk
                    // (its RDMA Writes completed before this Send, RC ordering). It must be
                    // the REPLY to this call; the transport header could not say so.
                    let head = if len >= 8 {
                        mem.bytes(call.reply.addr, 8)
                    } else {
                        None
                    };
                    let is_reply = head.is_some_and(|b| {
                        b[..4] == call.xid.to_be_bytes() && b[4..8] == 1u32.to_be_bytes()
                    });
                    if !is_reply {
                        self.answered(
                            core,
                            slot,
                            Outcome::Failed(CallError::BadReply(BadReply::NotAReply)),
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

    /// A reply (or error) whose XID names no call awaiting one: the late answer to a timed-out
    /// call returns that call's credit; any other XID returns nothing (a stray or duplicate
    /// reply must not free a credit the responder still holds).
    fn unknown_reply(&mut self, xid: Option<u32>) {
        let Some(xid) = xid else { return };
        if let Some(i) = self.orphan_xids.iter().position(|&x| x == xid) {
            self.orphan_xids.swap_remove(i);
            self.orphans = self.orphans.saturating_sub(1);
        }
    }

    fn find(&self, xid: u32) -> Option<u32> {
        self.by_xid.get(xid).filter(|&slot| {
            let c = &self.calls[slot as usize];
            c.state == ReqState::AwaitingReply && c.xid == xid
        })
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
        let xid = call.xid;
        self.by_xid.remove(xid);
        self.awaiting -= 1;
        self.finishing += 1;
        let _ = core;
    }

    /// The processing loop: posts pending LocalInvs as send-queue room allows and completes
    /// (or, with `mem`, sends again) calls whose work is all done.
    fn progress<M: HostMemory + ?Sized>(&mut self, core: &mut Core, mut mem: Option<&mut M>) {
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
                match (call.outcome, mem.as_deref_mut()) {
                    (Outcome::Resend(why), Some(m)) => self.resend(core, slot as u32, why, m),
                    // Sent again on the next completion (a resend needs the memory).
                    (Outcome::Resend(_), None) => {}
                    _ => self.complete(core, slot as u32),
                }
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
            Outcome::Pending | Outcome::Resend(_) => Event::CallFailed {
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

    pub(crate) fn on_timeout<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        now: u64,
        mem: &mut M,
    ) {
        if core.state == ConnState::Closed {
            return;
        }
        for slot in 0..self.calls.len() {
            let c = &self.calls[slot];
            if c.state != ReqState::AwaitingReply {
                continue;
            }
            if c.deadline > now && c.probe_deadline <= now && core.probing {
                // The probe went unanswered for its own timeout: a Version One responder that
                // drops what it cannot read. Version One for this connection and the next, and
                // the call goes again (same XID) once its STags are invalidated.
                core.version = super::VERSION;
                core.probing = false;
                core.remembered = Some(super::VERSION);
                // The probe may still be answered (a slow Version Two responder).
                self.calls[slot].also_vers = v2::VERSION;
                self.answered(core, slot as u32, Outcome::Resend(Resend::Fallback));
                self.resending += 1;
                continue;
            }
            if c.deadline <= now {
                let xid = c.xid;
                if core.probing && c.vers == v2::VERSION {
                    // The first Version Two call went unanswered: assume the responder does
                    // not speak Version Two (draft, "Responder Does Not Support ...").
                    core.version = super::VERSION;
                    core.probing = false;
                    core.remembered = Some(super::VERSION);
                }
                self.answered(core, slot as u32, Outcome::Failed(CallError::TimedOut));
                self.orphans += 1;
                // Never grows past its capacity: a call starts only while awaiting + orphans
                // is below the grant, which is at most the number of slots.
                self.orphan_xids.push(xid);
            }
        }
        self.progress(core, Some(mem));
    }

    /// The connection is gone: every call fails now (no invalidation is possible; the QP is in
    /// the error state and its windows die with it).
    pub(crate) fn on_closed(&mut self, core: &mut Core) {
        if core.probing
            && self
                .calls
                .iter()
                .any(|c| c.state == ReqState::AwaitingReply && c.vers == v2::VERSION)
        {
            // Lost while the first Version Two call was unanswered: the draft lets the next
            // connection assume Version One (no negotiation loop).
            core.remembered = Some(super::VERSION);
        }
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
                    if let Outcome::Reply { .. } | Outcome::Resend(_) = c.outcome {
                        // Answered, but its STags could not all be invalidated: not a success.
                        self.calls[slot].outcome = Outcome::Failed(CallError::ConnectionLost);
                    }
                }
            }
            self.calls[slot].state = ReqState::Finishing;
            self.complete(core, slot as u32);
        }
        self.by_xid.clear();
        self.orphans = 0;
        self.orphan_xids.clear();
        self.resending = 0;
    }
}

/// What a received reply means.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Ignore it (RDMA_DONE, RDMA2_OPTIONAL, a message too short to use).
    Drop,
    /// Unknown XID (when readable), nothing usable (an error, or a header that does not
    /// parse).
    Unknown(Option<u32>),
    /// Unknown XID, a non-error reply with a credit update.
    UnknownWithCredits(u32, u32),
    /// Fail the call (an error reply, or an unusable reply that carries no grant).
    Fail(u32, CallError),
    /// Fail the call and update credits (a non-error reply that cannot be used).
    FailWithCredits(u32, CallError, u32),
    /// Invalidate the call's STags, then send it again (an error reply: no credit update).
    Resend(u32, Resend),
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
            Verdict::Fail(s, _) | Verdict::FailWithCredits(s, _, _) | Verdict::Resend(s, _) => {
                Some(s)
            }
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

/// Frees the memory windows of `call` (their keys are invalid or about to die with the QP).
fn release_windows(core: &mut Core, call: &ReqCall) {
    for &m in &call.stags[..call.nstags as usize] {
        if let Some(mw) = core.mws.get_mut(m as usize) {
            mw.owner = None;
        }
        let _ = core.mw_free.push(u32::from(m));
    }
}

fn write_slices(writes: &[Segment; MAX_WRITE_CHUNKS], n: usize) -> [&[Segment]; MAX_WRITE_CHUNKS] {
    let mut out: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for (o, w) in out.iter_mut().zip(writes.iter()).take(n) {
        *o = core::slice::from_ref(w);
    }
    out
}
