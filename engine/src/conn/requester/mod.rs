//! The requester: sends the calls of one direction of a connection — the forward calls of a
//! client, and the backward calls (RFC 8167) of a server. One code for both; what differs is a
//! [`Policy`] value (chunks allowed or not, the credits asked for, the Send's work request kind,
//! the extra receive a backward call posts, timeouts); the backward values live in
//! [`super::backchannel`]. Each instance has its own slots, XIDs (by XID table) and credits, so
//! the same XID may be live in both directions at once.
//!
//! Normal operation: each call lives in a slot of a fixed array and moves through
//! [`ReqState`]: `Free` → `AwaitingReply` (binds and Send posted; holds a credit
//! and a posted receive) → `Finishing` (reply or error received: LocalInv posted for every STag
//! the peer did not invalidate; waiting for those and for the call's other send-queue work to
//! complete) → `Free`, at which point [`Event::ReplyReady`] or [`Event::CallFailed`] is
//! reported. Every send-queue work request of a call carries the call slot in its `wr_id`, so
//! the slot cannot be reused while any of them is outstanding. Who picks the slot: the engine
//! (one slot per send buffer), or, with [`super::Config::call_slots`], the caller, who names
//! the index of its own record of the call ([`super::Connection::start_call_in`]): a slot is
//! then only the transport state of the caller's record while the call is on this QP (its
//! STags, work requests, credit, reply resources), and a send buffer for the transport header
//! is taken from a free list for as long as the call is on the wire. Calls go in the connection's
//! version; in Version Two they name in `rdma_inv_handle` the one window the responder may
//! invalidate (the Reply chunk's, else the first Write chunk's, else the first Read segment's).
//! A call that may have to be sent again (the Version Two probe, or one with a CANT_REPLY
//! fallback) keeps a copy of its spec, by its send buffer; `Finishing` then ends by sending it
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
//! Credits (the rules live in [`super::credits`]): one until the first non-error reply, then the
//! clamped `rdma_credit` of the latest non-error reply (RDMA_MSG / RDMA_NOMSG / RDMA_MSGP). The
//! `rdma_credit` of an RDMA_ERROR or RDMA2_ERROR is never used, before or after the first reply,
//! whatever XID it names: the v2 draft ("Protocol Version Negotiation") has a requester "assume the
//! ability to exchange only a single RPC-over-RDMA message at a time until it receives a non-error
//! RPC-over-RDMA message from the responder that reports the responder's actual credit limit" ("as
//! with Version One"), so an error does not report the limit (RFC 8166 §3.3.3, from memory, is the
//! Version One rule). RFC 8166 §4.2.3 (from memory) gives `rdma_credit` a meaning in an RPC Call
//! (requested) and an RPC Reply (granted) message only, and §4.5 forms an RDMA_ERROR from the XID,
//! version, procedure and error code; an error carries neither. Implementations use a fixed grant
//! (implementation experience §4.4), so ignoring an error's value loses nothing. (Linux xprtrdma's
//! `rpcrdma_reply_handler` takes the value of any message matching a pending XID, errors included,
//! even before the first reply; we do not.) RDMA_DONE changes nothing, whatever XID it names:
//! implementation experience §7.1.2 says a receiver "should ignore it", and as its direction cannot
//! be told, RFC 8167 §4.1 says "the receiver MUST NOT use the header's credit value" (it is dropped
//! by [`super::receive::route`] before it gets here; its receive is reposted).

mod launch;
mod reply;

pub(crate) use launch::{Naming, Place};
pub(crate) use reply::Verdict;

use super::credits::{self, Orphans};
use super::receive::{self, AnyBody, AnyError, WireErr};
use super::stream::{build_pieces_into, copy_pieces, parts_len, Cut, Pieces};
use super::{
    wr_kind, Access, BadReply, CallError, CallId, CallOptions, CallSpec, ConnState, Core, DdpItem,
    Event, HostMemory, LocalBuf, Reply, StagMode, StartError, WorkRequest, MAX_CALL_STAGS,
    MAX_PARTS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS, V2_FIRST_MESSAGE,
};
use crate::proto::chunks::{ChunkLists, ChunkListsRef, ReadSegment, Segment};
use crate::proto::v1::{self, HeaderErrorKind, Message, MessageBody};
use crate::proto::v2;
use crate::u32map::U32Map;
use crate::verbs::{Completion, Sge, WcFlags, WrId};
use crate::xdr::pad4;
use core::cell::Cell;

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
pub(crate) enum Resend {
    /// ERR_VERS answered a Version Two call: again in Version One.
    Fallback,
    /// RDMA2_ERR_CANT_REPLY: again with the fallback reply resources.
    Larger,
}

/// A call spec kept for sending the call again (Version Two negotiation, CANT_REPLY retry).
/// Stored in an array indexed by the call's send buffer (a call holds one while it may be sent
/// again, and there are as many as calls on the wire at once, fewer than call slots when the
/// caller names them), written only for calls that may need it.
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
    /// The send buffer holding the call's transport header (an index into
    /// `Requester::headers`), held from launch to completion.
    header: u32,
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
    /// `Requester::saved[header]` holds this call's spec.
    saved: bool,
}

impl ReqCall {
    /// When the call times out: its call deadline or, for the Version Two probe, its own
    /// deadline, whichever comes first (`u64::MAX`: never).
    fn due(&self) -> u64 {
        self.deadline.min(self.probe_deadline)
    }

    const FREE: ReqCall = ReqCall {
        state: ReqState::Free,
        generation: 0,
        xid: 0,
        header: 0,
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

    /// Makes a slot free for `generation` in place: every field as in [`ReqCall::FREE`]
    /// except the arrays, whose entries past their counts (`nstags`, `nwrites`) are never
    /// read. Cheaper than assigning [`ReqCall::FREE`], which writes the whole slot.
    fn reset(&mut self, generation: u32) {
        self.state = ReqState::Free;
        self.generation = generation;
        self.xid = 0;
        self.outstanding = 0;
        self.nstags = 0;
        self.remote_inv = 0;
        self.inv_next = 0;
        self.nwrites = 0;
        self.reply = LocalBuf::EMPTY;
        self.reply_offered = false;
        self.deadline = u64::MAX;
        self.probe_deadline = u64::MAX;
        self.outcome = Outcome::Pending;
        self.vers = 1;
        self.also_vers = 0;
        self.saved = false;
    }
}

/// What sets the requester of one direction apart from the other's (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Chunks may be offered (DDP items as Read chunks, receptacles as Write chunks, a Reply
    /// chunk, long calls through a Position Zero Read chunk). Without: DDP items go inline,
    /// receptacles are refused ([`StartError::BadSpec`]), and so is a call larger than the
    /// inline threshold ([`StartError::TooLarge`]); no memory is exposed.
    pub(crate) chunks: bool,
    /// The credits asked for in every call (the local maximum: at least 1, at most the slots).
    pub(crate) asked: u32,
    /// The work request kind of the calls' Sends ([`wr_kind`]; binds and invalidations are
    /// [`wr_kind::BIND`] / [`wr_kind::INV`]).
    pub(crate) send_kind: u8,
    /// Each call posts one receive, before its Send, for its reply, and gives it back once
    /// answered (RFC 8167 §4.2.2). Else a call needs a posted receive beyond those of the
    /// calls outstanding and the [`Core::recv_reserve`].
    pub(crate) extra_recv: bool,
    /// Calls time out after [`super::Config::call_timeout_ns`].
    pub(crate) timeouts: bool,
}

impl Policy {
    /// The forward requester of a client: chunks, the configured credits, timeouts.
    pub(crate) fn forward(core: &Core) -> Policy {
        Policy {
            chunks: true,
            asked: core.cfg.credits,
            send_kind: wr_kind::SEND,
            extra_recv: false,
            timeouts: true,
        }
    }
}

pub(crate) struct Requester {
    policy: Policy,
    calls: Vec<ReqCall>,
    /// The send buffers for the calls' transport headers.
    headers: Vec<LocalBuf>,
    /// Send buffers no call holds.
    free_headers: super::fixed_capacity::IndexStack,
    saved: Vec<Saved>,
    /// Free call slots when the engine picks them (empty when the caller names them).
    free: super::fixed_capacity::IndexStack,
    /// The caller names every call's slot ([`super::Config::call_slots`]).
    named: bool,
    /// Local maximum of outstanding calls.
    max_credits: u32,
    /// Credits granted by the last non-error reply (1 before the first).
    granted: u32,
    /// Calls in `AwaitingReply`.
    awaiting: u32,
    /// Timed-out calls whose reply may still come: each holds a credit until the late reply
    /// with its XID arrives ([`credits::Orphans`]).
    orphans: Orphans,
    /// Calls in `Finishing` (to skip the progress scan when zero).
    finishing: u32,
    /// Calls in `Finishing` that will be sent again: they keep their credit meanwhile.
    resending: u32,
    /// XID → slot of every call in `AwaitingReply` (sized for all slots, never grows).
    by_xid: U32Map,
    /// The earliest due time (`deadline` or `probe_deadline`) of the calls in `AwaitingReply`,
    /// `u64::MAX` when none has one; exact unless `due_stale`. A call that starts waiting can
    /// only make it earlier (`note_due`); the call holding it that stops waiting makes it stale
    /// (`forget_due`), and `next_deadline` then rescans once. With no call timeout nothing is
    /// ever scanned.
    next_due: Cell<u64>,
    /// `next_due` may be earlier than the earliest call still waiting: rescan before use.
    due_stale: Cell<bool>,
    /// Where [`Requester::launch`] plans and exposes a call (reused by every call).
    scratch: Box<launch::LaunchScratch>,
}

impl Requester {
    /// A requester of `policy` with the send buffers `headers`: with `named_slots` 0, a call
    /// slot per send buffer, picked by the engine; else `named_slots` slots the caller names
    /// ([`super::Config::call_slots`]).
    pub(crate) fn new(policy: Policy, headers: &[LocalBuf], named_slots: u32) -> Self {
        let n = headers.len();
        let named = named_slots > 0;
        let slots = if named { named_slots as usize } else { n };
        Requester {
            policy,
            calls: vec![ReqCall::FREE; slots],
            headers: headers.to_vec(),
            free_headers: super::fixed_capacity::IndexStack::full(n),
            saved: vec![Saved::EMPTY; n],
            free: super::fixed_capacity::IndexStack::full(if named { 0 } else { n }),
            named,
            max_credits: credits::local_max(policy.asked, n),
            granted: credits::INITIAL_GRANT,
            awaiting: 0,
            orphans: Orphans::with_capacity(n),
            finishing: 0,
            resending: 0,
            by_xid: U32Map::new(n.min(slots)),
            next_due: Cell::new(u64::MAX),
            due_stale: Cell::new(false),
            scratch: Box::new(launch::LaunchScratch::EMPTY),
        }
    }

    pub(crate) fn granted(&self) -> u32 {
        self.granted
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.awaiting + self.orphans.count() + self.resending
    }

    /// The earliest time a waiting call times out (its call or probe deadline), if any.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        if self.due_stale.get() {
            let due = self
                .calls
                .iter()
                .filter(|c| c.state == ReqState::AwaitingReply)
                .map(ReqCall::due)
                .min()
                .unwrap_or(u64::MAX);
            self.next_due.set(due);
            self.due_stale.set(false);
        }
        let due = self.next_due.get();
        (due != u64::MAX).then_some(due)
    }

    /// The call in `slot` waits for its reply with its current deadlines: the earliest due
    /// time can only move earlier.
    fn note_due(&self, slot: u32) {
        let due = self.calls[slot as usize].due();
        if due < self.next_due.get() {
            self.next_due.set(due);
        }
    }

    /// A call due at `due` stops waiting: when it held the earliest due time, the next query
    /// rescans.
    fn forget_due(&self, due: u64) {
        if due != u64::MAX && due <= self.next_due.get() {
            self.due_stale.set(true);
        }
    }

    fn find(&self, xid: u32) -> Option<u32> {
        self.by_xid.get(xid).filter(|&slot| {
            let c = &self.calls[slot as usize];
            c.state == ReqState::AwaitingReply && c.xid == xid
        })
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
        let due = call.due();
        self.forget_due(due);
        self.by_xid.remove(xid);
        self.awaiting -= 1;
        self.finishing += 1;
        if self.policy.extra_recv {
            // The receive posted for this call is no longer needed.
            core.rq_target = core.rq_target.saturating_sub(1);
        }
    }

    /// The processing loop: posts pending LocalInvs as send-queue room allows and completes
    /// (or, with `mem`, sends again) calls whose work is all done.
    fn progress<M: HostMemory + ?Sized>(&mut self, core: &mut Core, mut mem: Option<&mut M>) {
        // Each call finishing now is visited once, in slot order; the scan ends at the last.
        let mut left = self.finishing;
        for slot in 0..self.calls.len() {
            if left == 0 {
                return;
            }
            if self.calls[slot].state != ReqState::Finishing {
                continue;
            }
            left -= 1;
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
        // Read in place: the slot is rewritten below, a copy of it would only be read.
        let call = &self.calls[slot as usize];
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
        let header = call.header;
        core.emit(ev);
        self.calls[slot as usize].reset(id.generation.wrapping_add(1));
        self.finishing -= 1;
        self.release_slot(slot, header);
    }

    /// Gives back a call's slot (when the engine picks slots) and its send buffer.
    fn release_slot(&mut self, slot: u32, header: u32) {
        if !self.named {
            let _ = self.free.push(slot);
        }
        let _ = self.free_headers.push(header);
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
                core.version = crate::conn::VERSION;
                core.probing = false;
                core.remembered = Some(crate::conn::VERSION);
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
                    core.version = crate::conn::VERSION;
                    core.probing = false;
                    core.remembered = Some(crate::conn::VERSION);
                }
                self.answered(core, slot as u32, Outcome::Failed(CallError::TimedOut));
                self.orphans.add(xid);
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
            core.remembered = Some(crate::conn::VERSION);
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
                    // Answered, but its STags could not all be invalidated: not a success. A
                    // call that exposed nothing has its reply in place (only its Send's
                    // completion was missing; it is flushed).
                    let exposed = c.nstags > 0;
                    if matches!(c.outcome, Outcome::Resend(_))
                        || (exposed && matches!(c.outcome, Outcome::Reply { .. }))
                    {
                        self.calls[slot].outcome = Outcome::Failed(CallError::ConnectionLost);
                    }
                }
            }
            self.calls[slot].state = ReqState::Finishing;
            self.complete(core, slot as u32);
        }
        self.by_xid.clear();
        self.orphans.clear();
        self.resending = 0;
        self.next_due.set(u64::MAX);
        self.due_stale.set(false);
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
