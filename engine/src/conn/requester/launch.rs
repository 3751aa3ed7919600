//! Starting a requester call: checking the spec, planning the chunks (DDP items as Read
//! chunks, receptacles as Write chunks, a Reply chunk when the reply may not fit inline, a
//! Position Zero Read chunk when the call does not), exposing their memory (memory-window binds
//! or persistent keys), encoding the transport header and queueing the binds and the Send; and
//! sending a finished call again (Version Two fallback, CANT_REPLY / ERR_CHUNK retry).
//!
//! Normal operation: nothing is queued until every check passed, so a refused call leaves no
//! trace. Recovery: a failure after resources were taken (unreachable memory) gives them back
//! ([`rollback`]); a resend that cannot be built fails its call.

use super::*;
use crate::conn::fixed_capacity::IndexStack;

/// Which call slot a call is built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A free slot the engine picks.
    Any,
    /// The slot the caller names ([`crate::conn::Config::call_slots`]).
    At(u32),
    /// Again in the slot and generation of a call being sent again.
    Again { slot: u32, generation: u32 },
}

/// A call's slot and XID, as the caller gives them (`xid` `None`: read from the message).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Naming {
    pub(crate) place: Place,
    pub(crate) xid: Option<u32>,
}

impl Requester {
    pub(crate) fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        now: u64,
        naming: Naming,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        if core.state != ConnState::Connected {
            return Err(StartError::NotConnected);
        }
        if !credits::may_start(self.outstanding(), self.granted) {
            return Err(StartError::NoCredit);
        }
        // One posted receive per outstanding call (the reply must never meet an empty queue),
        // besides those the server may still take for backward calls; a call that posts its
        // own receive checks for an idle one in `launch`.
        if !self.policy.extra_recv && core.rq_posted <= self.outstanding() + core.recv_reserve {
            return Err(StartError::Busy);
        }
        if opts.fallback_receptacles.len() > MAX_WRITE_CHUNKS {
            return Err(StartError::BadSpec);
        }
        let deadline = match core.cfg.call_timeout_ns {
            t if t > 0 && self.policy.timeouts => now.saturating_add(t),
            _ => u64::MAX,
        };
        if matches!(naming.place, Place::Again { .. }) {
            return Err(StartError::BadSpec);
        }
        let id = self.launch(core, deadline, naming, spec, mem)?;
        let call = &mut self.calls[id.slot as usize];
        if core.probing && call.vers == v2::VERSION && core.cfg.probe_timeout_ns > 0 {
            call.probe_deadline = now.saturating_add(core.cfg.probe_timeout_ns);
            self.note_due(id.slot);
        }
        // Keep the spec when the call may have to be sent again.
        let keep =
            core.probing || opts.fallback_reply.is_some() || !opts.fallback_receptacles.is_empty();
        self.calls[id.slot as usize].saved = keep;
        if keep {
            // Written field by field: the arrays' entries past their counts are never read,
            // so the slot's earlier spec is not cleared first.
            let sv = &mut self.saved[self.calls[id.slot as usize].header as usize];
            sv.retried = false;
            // Element by element: most of these lists are empty or short, and a slice copy
            // calls `memcpy` even for none.
            sv.nmsg = spec.message.len() as u8;
            copy_short(&mut sv.message, spec.message);
            sv.nddp = spec.ddp.len() as u8;
            copy_short(&mut sv.ddp, spec.ddp);
            sv.nrec = spec.receptacles.len() as u8;
            copy_short(&mut sv.receptacles, spec.receptacles);
            sv.reply = spec.reply;
            sv.fallback_reply = opts.fallback_reply;
            sv.nfallback_rec = opts.fallback_receptacles.len() as u8;
            copy_short(&mut sv.fallback_receptacles, opts.fallback_receptacles);
        }
        Ok(id)
    }

    /// Builds and posts a call: in a new slot (picked here or named by the caller), or again
    /// in the slot and generation of a call being sent again (`naming.place`). Steps: plan
    /// the chunks, check resources, take a slot and a send buffer, bind STags, encode the
    /// header, queue the work requests. `naming.xid` is the call's XID when the caller
    /// assigned it (`None`: read from the message's first word).
    fn launch<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        deadline: u64,
        naming: Naming,
        spec: &CallSpec<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        // The plan and the exposed chunk lists are built in place in the requester's scratch
        // (they hold arrays of hundreds of octets; nothing past their counts is read).
        let xid = self.check_spec(core, naming.xid, spec, mem)?;
        let plan = &mut self.scratch.plan;
        plan_call(core, self.policy.chunks, spec, xid, plan)?;
        check_resources(core, plan, spec, mem)?;
        if self.policy.extra_recv && core.recv_idle.len() == 0 {
            return Err(StartError::Busy);
        }
        let reuse = match naming.place {
            Place::Again { slot, generation } => Some((slot, generation)),
            _ => None,
        };
        let (slot, hdr) = match naming.place {
            Place::Again { slot, .. } => (slot, self.calls[slot as usize].header),
            place => take_slot(
                place,
                self.named,
                &self.calls,
                &mut self.free,
                &mut self.free_headers,
            )?,
        };
        let header = self.headers[hdr as usize];

        // From here on nothing fails except unreachable memory (checked before posting).
        // A new call is built in its slot, which is free: `ReqCall::FREE` but for its
        // generation ([`Requester::complete`] and [`rollback`] leave it so). A call sent again
        // is built aside, so that its slot keeps the call it replaces should building fail.
        let mut aside = None;
        let call = match reuse {
            Some((_, generation)) => {
                let old = &self.calls[slot as usize];
                aside.insert(ReqCall {
                    generation,
                    saved: old.saved,
                    also_vers: old.also_vers,
                    ..ReqCall::FREE
                })
            }
            None => &mut self.calls[slot as usize],
        };
        call.xid = plan.xid;
        call.header = hdr;
        call.vers = plan.vers;
        call.reply = spec.reply;
        call.reply_offered = plan.reply_offered;
        call.nwrites = plan.nwrites as u8;

        let ex = &mut self.scratch.exposed;
        let new = reuse.is_none();
        let free = Free {
            slots: (!self.named).then_some(&mut self.free),
            headers: &mut self.free_headers,
        };
        if !bind_stags(core, plan, spec, slot, call, mem, ex) {
            // Counted above; unreachable. Give back what was taken.
            rollback(core, call, free, slot, new);
            return Err(StartError::Busy);
        }
        // Only the offered chunks are ever read.
        let nw = plan.nwrites;
        call.writes[..nw].copy_from_slice(&ex.writes[..nw]);
        let credits = self.max_credits;
        let Some((first, gather)) = encode_call(core, credits, plan, ex, spec, header, mem) else {
            rollback(core, call, free, slot, new);
            return Err(StartError::BadSpec);
        };
        call.outstanding = if plan.mw_mode { ex.nb as u32 + 1 } else { 1 };
        call.deadline = deadline;
        if self.policy.extra_recv {
            // The receive for the reply goes first (RFC 8167 §4.2.2), then the call.
            core.rq_target += 1;
            core.refill_recvs();
        }
        if ex.nb > 0 {
            post_binds(core, ex, slot);
        }
        let send_id = WrId::new(self.policy.send_kind, u64::from(slot));
        core.post_gather(send_id, first, plan.pieces.gathered(gather), None);
        if let Some(c) = aside {
            self.calls[slot as usize] = c;
        }
        Ok(self.queue_call(slot))
    }
}

/// Plans a call into `plan` without taking anything: checks the spec, turns DDP items into
/// Read chunks (or inline pieces), receptacles into Write chunks, decides on a Reply chunk and
/// on a long (Position Zero) message, and checks the result against the limits. `xid` is the
/// spec's XID, checked by [`Requester::check_spec`]. Without `chunks` ([`Policy::chunks`]) the
/// whole call goes inline or not at all.
fn plan_call(
    core: &Core,
    chunks: bool,
    spec: &CallSpec<'_>,
    xid: u32,
    plan: &mut CallPlan,
) -> Result<(), StartError> {
    let vers = core.version;
    let is_v2 = vers == v2::VERSION;
    // Version Two adds rdma_direction and rdma_inv_handle to the header.
    let v2_extra = if is_v2 { 8 } else { 0 };
    let ddp = chunks && core.cfg.ddp;
    let inline_len = parts_len(spec.message).ok_or(StartError::BadSpec)?;
    plan.nddp = if ddp {
        ddp_read_chunks(spec.ddp, inline_len, &mut plan.ddp_reads)?
    } else {
        0
    };
    let inline_cuts = spec.ddp.iter().filter(|_| !ddp).map(|i| Cut {
        at: i.at,
        buf: i.buf,
    });
    build_pieces_into(&mut plan.pieces, spec.message, inline_cuts, core.zero)
        .map_err(|_| StartError::BadSpec)?;
    let (pieces, nddp) = (&plan.pieces, plan.nddp);

    // Write chunks (one segment per receptacle) and the Reply chunk decision.
    let nwrites = if ddp { spec.receptacles.len() } else { 0 };
    for (w, r) in plan
        .writes
        .iter_mut()
        .zip(spec.receptacles.iter())
        .take(nwrites)
    {
        *w = Segment::new(0, r.len, r.addr);
    }
    let reply_offered = chunks
        && spec.reply.len > 0
        && spec.reply.len as usize > core.inline_reply_room(vers, nwrites);
    let reply_seg = [Segment::new(0, spec.reply.len, spec.reply.addr)];

    // Inline (RDMA_MSG) or long (RDMA_NOMSG + Position Zero Read chunk)?
    let write_refs = write_slices(&plan.writes, nwrites);
    let msg_lists = ChunkListsRef {
        reads: &plan.ddp_reads[..nddp],
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
    if long && !chunks {
        return Err(StartError::TooLarge);
    }
    let npz = if long { pieces.n } else { 0 };
    let nreads = npz + nddp;
    if nreads > core.limits.max_read_segments as usize {
        return Err(StartError::TooLarge);
    }
    if long && msg_hdr + npz * (4 + 20) > send_inline {
        return Err(StartError::TooLarge);
    }
    plan.xid = xid;
    plan.vers = vers;
    plan.is_v2 = is_v2;
    plan.mw_mode = core.cfg.stag == StagMode::MemoryWindows;
    plan.nwrites = nwrites;
    plan.reply_offered = reply_offered;
    plan.long = long;
    plan.npz = npz;
    plan.nreads = nreads;
    plan.nstags = nreads + nwrites + usize::from(reply_offered);
    Ok(())
}

impl Requester {
    /// Checks the spec's shape against the fixed limits and returns its XID (`xid`, the one
    /// the caller assigned, else read from the message), which no outstanding call may use.
    fn check_spec<M: HostMemory + ?Sized>(
        &self,
        core: &Core,
        xid: Option<u32>,
        spec: &CallSpec<'_>,
        mem: &M,
    ) -> Result<u32, StartError> {
        // Without chunks, results cannot be placed directly: no receptacles.
        if spec.message.is_empty()
            || spec.message.len() > MAX_PARTS
            || spec.ddp.len() > MAX_READ_SEGMENTS
            || spec.receptacles.len() > MAX_WRITE_CHUNKS
            || (!self.policy.chunks && !spec.receptacles.is_empty())
        {
            return Err(StartError::BadSpec);
        }
        if core.cfg.ddp && spec.receptacles.len() > core.limits.max_write_chunks as usize {
            return Err(StartError::BadSpec);
        }
        if spec.message[0].len < 4 {
            return Err(StartError::BadSpec);
        }
        // The caller's XID (it encoded the message), else the message's first word.
        let xid = match (xid, mem.bytes(spec.message[0].addr, 4)) {
            (Some(xid), _) => xid,
            (None, Some(&[a, b, c, d])) => u32::from_be_bytes([a, b, c, d]),
            (None, _) => return Err(StartError::BadSpec),
        };
        match self.find(xid) {
            Some(_) => Err(StartError::DuplicateXid),
            None => Ok(xid),
        }
    }

    /// Makes the call built in `slot`, whose binds and Send are queued, await its reply.
    fn queue_call(&mut self, slot: u32) -> CallId {
        let call = &mut self.calls[slot as usize];
        call.state = ReqState::AwaitingReply;
        let (xid, generation) = (call.xid, call.generation);
        self.note_due(slot);
        self.awaiting += 1;
        // Cannot fail: the table holds every slot, and the XID is not live (checked above).
        let added = self.by_xid.insert(xid, slot);
        debug_assert!(added);
        CallId { slot, generation }
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
        let sv = self.saved[c.header as usize];
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
            self.saved[c.header as usize].retried = true;
        }
        let naming = Naming {
            place: Place::Again {
                slot,
                generation: c.generation,
            },
            xid: Some(c.xid),
        };
        match self.launch(core, c.deadline, naming, &spec, mem) {
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

/// Copies `from` to the front of `to` (checked by the caller to fit), one element at a time.
fn copy_short<T: Copy>(to: &mut [T], from: &[T]) {
    for (t, f) in to.iter_mut().zip(from) {
        *t = *f;
    }
}

/// Takes a slot for a new call at `place` and a send buffer for its header: the slot the
/// caller names (`named`; it must be free) or one from `free`. `Busy` when none is free (the
/// named slot still finishing an earlier call, or every send buffer held); `BadSpec` when the
/// place does not fit how slots are picked.
fn take_slot(
    place: Place,
    named: bool,
    calls: &[ReqCall],
    free: &mut IndexStack,
    free_headers: &mut IndexStack,
) -> Result<(u32, u32), StartError> {
    if free_headers.len() == 0 {
        return Err(StartError::Busy);
    }
    let slot = match (place, named) {
        (Place::Any, false) => free.pop().ok_or(StartError::Busy)?,
        (Place::At(s), true) => match calls.get(s as usize) {
            Some(c) if c.state == ReqState::Free => s,
            Some(_) => return Err(StartError::Busy),
            None => return Err(StartError::BadSpec),
        },
        _ => return Err(StartError::BadSpec),
    };
    // Cannot fail: checked above.
    let hdr = free_headers.pop().unwrap_or(0);
    Ok((slot, hdr))
}

/// Where a new call's slot and send buffer go back to ([`rollback`]); `slots` is `None` when
/// the caller names slots.
struct Free<'a> {
    slots: Option<&'a mut IndexStack>,
    headers: &'a mut IndexStack,
}

/// Undoes a partly built call `call` (no work request was posted yet). `new_slot`: the call
/// was being built in its slot, taken for it with its send buffer, which go back to `free`
/// (the slot as `ReqCall::FREE` of the same generation); otherwise it was built aside and its
/// slot is untouched.
fn rollback(core: &mut Core, call: &mut ReqCall, free: Free<'_>, slot: u32, new_slot: bool) {
    release_windows(core, call);
    if new_slot {
        let header = call.header;
        *call = ReqCall {
            generation: call.generation,
            ..ReqCall::FREE
        };
        if let Some(f) = free.slots {
            let _ = f.push(slot);
        }
        let _ = free.headers.push(header);
    }
}

/// Encodes the call's transport header into `header` and, past the SGE limit, copies the
/// inline message after it: the Send's first entry (header, and the copy) and whether the
/// Send gathers the message's pieces after it; `None` when memory is unreachable.
fn encode_call<M: HostMemory + ?Sized>(
    core: &Core,
    credits: u32,
    plan: &CallPlan,
    exposed: &Exposed,
    spec: &CallSpec<'_>,
    header: LocalBuf,
    mem: &mut M,
) -> Option<(Sge, bool)> {
    let (nreads, nwrites, long) = (plan.nreads, plan.nwrites, plan.long);
    let reply_seg = [Segment::new(
        exposed.reply_handle,
        spec.reply.len,
        spec.reply.addr,
    )];
    let write_refs = write_slices(&exposed.writes, nwrites);
    let lists = ChunkListsRef {
        reads: &exposed.reads[..nreads],
        writes: &write_refs[..nwrites],
        reply: plan.reply_offered.then_some(&reply_seg[..]),
    };
    let xid = plan.xid;
    let inv_handle = inv_handle(core, plan, exposed);
    let hdr_len = mem
        .bytes_mut(header.addr, header.len as usize)
        .and_then(|out| {
            if plan.is_v2 {
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
        })?;
    let pieces = &plan.pieces;
    let mut gather = false;
    let mut first_len = hdr_len as u32;
    if !long {
        if pieces.n < core.max_sge {
            gather = true;
        } else if !copy_pieces(mem, header, hdr_len as u32, pieces) {
            return None;
        } else {
            first_len += pieces.total;
        }
    }
    if pieces.as_slice().iter().any(|p| p.zero) {
        if let Some(z) = mem.bytes_mut(core.zero.addr, 4) {
            z.fill(0);
        }
    }
    let first = Sge {
        addr: header.addr,
        len: first_len,
        lkey: header.lkey,
    };
    Some((first, gather))
}

/// Queues the memory-window binds [`bind_stags`] recorded in `ex` (none with persistent keys).
fn post_binds(core: &mut Core, ex: &Exposed, slot: u32) {
    for (b, m) in ex.binds[..ex.nb].iter().zip(&ex.mws[..ex.nb]) {
        let Some((mw, new_rkey)) = *m else { continue };
        core.post_send(WorkRequest::BindMw {
            wr_id: WrId::new(wr_kind::BIND, u64::from(slot)),
            mw,
            addr: b.buf.addr,
            len: b.buf.len,
            lkey: b.buf.lkey,
            access: b.access,
            new_rkey,
        });
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

/// The requester's reused scratch for building a call ([`Requester::launch`]): the plan and the
/// exposed chunk lists, filled in place on every call (only the entries under their counts are
/// meaningful), so starting a call neither zeroes nor moves them.
#[derive(Clone)]
pub(super) struct LaunchScratch {
    plan: CallPlan,
    exposed: Exposed,
}

impl LaunchScratch {
    pub(super) const EMPTY: LaunchScratch = LaunchScratch {
        plan: CallPlan {
            xid: 0,
            vers: 0,
            is_v2: false,
            mw_mode: false,
            ddp_reads: [ReadSegment::new(0, Segment::new(0, 0, 0)); MAX_READ_SEGMENTS],
            nddp: 0,
            pieces: Pieces::EMPTY,
            writes: [Segment::new(0, 0, 0); MAX_WRITE_CHUNKS],
            nwrites: 0,
            reply_offered: false,
            long: false,
            npz: 0,
            nreads: 0,
            nstags: 0,
        },
        exposed: Exposed {
            reads: [ReadSegment::new(0, Segment::new(0, 0, 0)); MAX_READ_SEGMENTS],
            writes: [Segment::new(0, 0, 0); MAX_WRITE_CHUNKS],
            reply_handle: 0,
            binds: [BindPlan::NONE; MAX_CALL_STAGS],
            mws: [None; MAX_CALL_STAGS],
            nb: 0,
        },
    };
}

/// What a call will look like on the wire, decided before anything is taken ([`plan_call`]).
#[derive(Clone)]
struct CallPlan {
    xid: u32,
    /// Version the call goes in, and whether that is Version Two.
    vers: u32,
    is_v2: bool,
    /// [`StagMode::MemoryWindows`]: chunk memory is exposed through bound windows.
    mw_mode: bool,
    /// The DDP items as Read segments (positions in the full stream, handles not yet known).
    ddp_reads: [ReadSegment; MAX_READ_SEGMENTS],
    nddp: usize,
    /// The message as pieces (DDP items inline when DDP is off).
    pieces: Pieces,
    /// Write chunks, one segment per receptacle (handles not yet known).
    writes: [Segment; MAX_WRITE_CHUNKS],
    nwrites: usize,
    /// A Reply chunk over the reply buffer is offered.
    reply_offered: bool,
    /// RDMA_NOMSG with a Position Zero Read chunk (one segment per piece).
    long: bool,
    npz: usize,
    /// Read segments in all (Position Zero first, then the DDP items).
    nreads: usize,
    /// STags the call exposes.
    nstags: usize,
}

/// The chunk lists of a call with their handles, once its memory is exposed
/// ([`bind_stags`]), and the binds to post ([`post_binds`]).
#[derive(Clone)]
struct Exposed {
    reads: [ReadSegment; MAX_READ_SEGMENTS],
    writes: [Segment; MAX_WRITE_CHUNKS],
    reply_handle: u32,
    /// The buffers exposed, in order (`[..nb]`).
    binds: [BindPlan; MAX_CALL_STAGS],
    /// Memory windows mode: the window slot bound over each and its new key (`[..nb]`).
    mws: [Option<(u32, u32)>; MAX_CALL_STAGS],
    nb: usize,
}

/// DDP argument items → Read chunks (positions in the full XDR stream; no pad sent). Items
/// must be in offset order, on 4-octet boundaries, inside the message of `inline_len` octets.
fn ddp_read_chunks(
    items: &[DdpItem],
    inline_len: u32,
    reads: &mut [ReadSegment; MAX_READ_SEGMENTS],
) -> Result<usize, StartError> {
    let mut n = 0usize;
    let mut shift = 0u32;
    let mut last = 0u32;
    for item in items {
        if item.at == 0 || item.at % 4 != 0 || item.at < last || item.at > inline_len {
            return Err(StartError::BadSpec);
        }
        last = item.at;
        let position = item.at.checked_add(shift).ok_or(StartError::TooLarge)?;
        reads[n] = ReadSegment::new(position, Segment::new(0, item.buf.len, item.buf.addr));
        n += 1;
        let padded = item
            .buf
            .len
            .checked_add(pad4(item.buf.len as usize) as u32)
            .ok_or(StartError::TooLarge)?;
        shift = shift.checked_add(padded).ok_or(StartError::TooLarge)?;
    }
    Ok(n)
}

/// Whether the planned call can go now: enough free windows (or a remote key for every
/// exposed buffer) and send queue room for its binds and Send.
fn check_resources<M: HostMemory + ?Sized>(
    core: &Core,
    plan: &CallPlan,
    spec: &CallSpec<'_>,
    mem: &M,
) -> Result<(), StartError> {
    let (nstags, npz, nddp, nwrites) = (plan.nstags, plan.npz, plan.nddp, plan.nwrites);
    if plan.mw_mode {
        if nstags > MAX_CALL_STAGS || core.mw_free.len() < nstags {
            return Err(StartError::Busy);
        }
    } else {
        let keyed = |b: &LocalBuf| mem.remote_key(b.lkey).is_some();
        let pz_ok = plan.pieces.as_slice()[..npz].iter().all(|p| keyed(&p.buf));
        let ddp_ok = spec.ddp.iter().take(nddp).all(|i| keyed(&i.buf));
        let w_ok = spec.receptacles.iter().take(nwrites).all(keyed);
        let r_ok = !plan.reply_offered || keyed(&spec.reply);
        if !(pz_ok && ddp_ok && w_ok && r_ok) {
            return Err(StartError::NoRemoteKey);
        }
    }
    let sq_needed = if plan.mw_mode { nstags as u32 + 1 } else { 1 };
    if core.sq_free() < sq_needed {
        return Err(StartError::Busy);
    }
    Ok(())
}

/// Exposes the call's chunk memory: binds a memory window over each buffer (recording it in
/// `call`) or looks up its persistent key, and fills the handles into the chunk lists, all
/// into `ex` (reused scratch). `false` when a window counted free is missing (the caller rolls
/// back).
fn bind_stags<M: HostMemory + ?Sized>(
    core: &mut Core,
    plan: &CallPlan,
    spec: &CallSpec<'_>,
    slot: u32,
    call: &mut ReqCall,
    mem: &M,
    ex: &mut Exposed,
) -> bool {
    let (npz, nddp, nreads, nwrites) = (plan.npz, plan.nddp, plan.nreads, plan.nwrites);
    ex.writes[..nwrites].copy_from_slice(&plan.writes[..nwrites]);
    ex.reply_handle = 0;
    // Collect the targets first, then bind (or look up keys).
    for (i, p) in plan.pieces.as_slice()[..npz].iter().enumerate() {
        ex.reads[i] = ReadSegment::new(0, Segment::new(0, p.buf.len, p.buf.addr));
    }
    ex.reads[npz..nreads].copy_from_slice(&plan.ddp_reads[..nddp]);
    let binds = &mut ex.binds;
    let mut nb = 0usize;
    for (i, p) in plan.pieces.as_slice()[..npz].iter().enumerate() {
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
    if plan.reply_offered {
        binds[nb] = BindPlan::write(spec.reply, Target::Reply);
        nb += 1;
    }
    ex.nb = nb;
    for n in 0..nb {
        let b = ex.binds[n];
        let handle = if plan.mw_mode {
            let Some(m) = core.mw_free.pop() else {
                return false;
            };
            let mw = &mut core.mws[m as usize];
            // Not `inc_rkey`: the next key must not follow from the last one.
            let new_rkey = core.keys.next_rkey(mw.rkey);
            mw.rkey = new_rkey;
            mw.owner = Some(slot);
            mw.pos = n as u8;
            call.stags[n] = m as u16;
            call.nstags = n as u8 + 1;
            ex.mws[n] = Some((m, new_rkey));
            new_rkey
        } else {
            ex.mws[n] = None;
            mem.remote_key(b.buf.lkey).unwrap_or(0)
        };
        match b.target {
            Target::Read(i) => ex.reads[i].target.handle = handle,
            Target::Write(k) => ex.writes[k].handle = handle,
            Target::Reply => ex.reply_handle = handle,
            Target::None => {}
        }
    }
    true
}

/// Version Two: the one handle the responder may invalidate remotely (draft, "Remote
/// Invalidation") — the Reply chunk's, else the first Write chunk's, else the first Read
/// segment's; 0 when none may be (persistent keys, or remote invalidation off).
fn inv_handle(core: &Core, plan: &CallPlan, ex: &Exposed) -> u32 {
    if !(core.cfg.remote_invalidate && plan.mw_mode && ex.nb > 0) {
        0
    } else if plan.reply_offered {
        ex.reply_handle
    } else if plan.nwrites > 0 {
        ex.writes[0].handle
    } else {
        ex.reads[0].target.handle
    }
}
