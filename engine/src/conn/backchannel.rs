//! The backward direction (RFC 8167): the server sends RPC calls to the client on the client's
//! connection, the client serves them.
//!
//! Normal operation: backward messages are inline RDMA_MSG with empty chunk lists (neither side
//! exposes memory for them). The server side ([`BackRequester`]) keeps its own slots, XIDs and
//! credits: it asks for [`super::Config::backchannel_credits`] in `rdma_credit`, keeps at most
//! the granted number outstanding (one until the first non-error backward reply, whose
//! `rdma_credit` is the grant; an error's is never used; never sending 0), and
//! posts one extra receive per backward call it sends, before the call. The client side is the
//! connection's [`Responder`] code with the backward policy ([`responder_policy`]): it keeps
//! `2 × credits` extra receives posted once the upper layer enabled the backchannel (one per
//! backward credit, plus one per backward call whose reply Send has not completed yet, so the
//! server may send its next call as soon as it has the reply), hands each call out as
//! [`Event::CallReady`] and sends the reply with the granted backward credits in `rdma_credit`
//! (never 0). Forward and backward XIDs are independent: the same XID may be live in both
//! directions at once, since each side matches replies only against its own direction's calls.
//!
//! Recovery: a backward call carrying chunks is answered with ERR_CHUNK (backward chunks are not
//! supported). A backward reply with an unknown XID is dropped. When the connection is lost,
//! every backward call still pending fails with [`CallError::ConnectionLost`]; the server's
//! upper layer re-issues it (same XID) on the connection the client establishes next.

use super::credits;
use super::fixed_capacity::IndexStack;
use super::receive::{self, AnyBody, WireErr};
use super::responder::{Policy, Responder};
use super::stream::{build_pieces, copy_pieces, Cut};
use super::{
    wr_kind, BadReply, CallError, CallId, CallSpec, ConnState, Core, Event, HostMemory, LocalBuf,
    Reply, StartError, MAX_PARTS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS,
};
use crate::proto::chunks::ChunkListsRef;
use crate::proto::v1::{self, Message, MessageBody};
use crate::proto::v2::{self, Direction};
use crate::verbs::{Completion, Sge, WrId};

/// Octets of an RDMA_MSG / RDMA2_MSG header with three empty chunk lists.
const fn msg_hdr_len(vers: u32) -> usize {
    crate::proto::inline_msg_header_len(vers, 0)
}

/// Encodes an inline message header with empty chunk lists in version `vers`.
fn encode_msg(
    vers: u32,
    xid: u32,
    credits: u32,
    direction: Direction,
    out: &mut [u8],
) -> Option<usize> {
    if vers == v2::VERSION {
        v2::encode(
            &v2::Message {
                xid,
                credits,
                body: v2::MessageBody::Msg(v2::ChunksRef {
                    direction,
                    // Nothing of either side is exposed for backward messages.
                    inv_handle: 0,
                    lists: ChunkListsRef::EMPTY,
                }),
            },
            out,
        )
        .ok()
    } else {
        v1::encode(
            &Message {
                xid,
                credits,
                body: MessageBody::Msg(ChunkListsRef::EMPTY),
            },
            out,
        )
        .ok()
    }
}

/// Posts a Send of `pieces` after a header of `hdr_len` octets in `header` (gathered, or copied
/// after the header past the SGE limit).
fn post_inline<M: HostMemory + ?Sized>(
    core: &mut Core,
    wr_id: WrId,
    header: LocalBuf,
    hdr_len: u32,
    pieces: &super::stream::Pieces,
    mem: &mut M,
) -> bool {
    let mut gather = false;
    let mut first_len = hdr_len;
    if pieces.n < core.max_sge {
        gather = true;
    } else if copy_pieces(mem, header, hdr_len, pieces) {
        first_len += pieces.total;
    } else {
        return false;
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
    core.post_gather(wr_id, first, pieces.gathered(gather), None);
    true
}

// ---------------------------------------------------------------------------------------------
// Server side: backward requester.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BState {
    Free,
    /// Sent; the reply (or error) has not arrived.
    Awaiting,
    /// Answered; waiting for the call's Send to complete before reporting.
    Answered,
}

#[derive(Debug, Clone, Copy)]
struct BCall {
    state: BState,
    generation: u32,
    xid: u32,
    reply: LocalBuf,
    send_done: bool,
    outcome: Result<u32, CallError>,
}

impl BCall {
    const FREE: BCall = BCall {
        state: BState::Free,
        generation: 0,
        xid: 0,
        reply: LocalBuf::EMPTY,
        send_done: false,
        outcome: Err(CallError::ConnectionLost),
    };
}

/// The server's backward requester.
pub(crate) struct BackRequester {
    calls: Vec<BCall>,
    free: IndexStack,
    headers: Vec<LocalBuf>,
    pub(crate) enabled: bool,
    /// Credits asked for and the local maximum of outstanding backward calls.
    max: u32,
    /// Backward credits granted by the client's last non-error backward reply (1 before the
    /// first).
    granted: u32,
    awaiting: u32,
}

impl BackRequester {
    pub(crate) fn new(core: &Core, headers: &[LocalBuf]) -> Self {
        let n = headers.len();
        BackRequester {
            calls: vec![BCall::FREE; n],
            free: IndexStack::full(n),
            headers: headers.to_vec(),
            enabled: false,
            max: credits::local_max(core.cfg.backchannel_credits, n),
            granted: credits::INITIAL_GRANT,
            awaiting: 0,
        }
    }

    pub(crate) fn granted(&self) -> u32 {
        self.granted
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.awaiting
    }

    pub(crate) fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        spec: &CallSpec<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        if !self.enabled {
            return Err(StartError::BackchannelDisabled);
        }
        if core.state != ConnState::Connected {
            return Err(StartError::NotConnected);
        }
        if !credits::may_start(self.awaiting, self.granted) {
            return Err(StartError::NoCredit);
        }
        if spec.message.is_empty()
            || spec.message.len() > MAX_PARTS
            || spec.ddp.len() > MAX_READ_SEGMENTS
            || !spec.receptacles.is_empty()
        {
            // No chunks in the backward direction: results cannot be placed directly.
            return Err(StartError::BadSpec);
        }
        let xid = match mem.bytes(spec.message[0].addr, 4) {
            Some(&[a, b, c, d]) if spec.message[0].len >= 4 => u32::from_be_bytes([a, b, c, d]),
            _ => return Err(StartError::BadSpec),
        };
        if self
            .calls
            .iter()
            .any(|c| c.state == BState::Awaiting && c.xid == xid)
        {
            return Err(StartError::DuplicateXid);
        }
        // DDP-eligible arguments travel inline with their pad.
        let cuts = spec.ddp.iter().map(|i| Cut {
            at: i.at,
            buf: i.buf,
        });
        let pieces =
            build_pieces(spec.message, cuts, core.zero).map_err(|_| StartError::BadSpec)?;
        // Backward calls use the version of the forward calls (RFC 8167 §5.1).
        let vers = core.version;
        if msg_hdr_len(vers) + pieces.total as usize > core.neg_of(vers).send_inline as usize {
            return Err(StartError::TooLarge);
        }
        if core.sq_free() == 0 || core.recv_idle.len() == 0 {
            return Err(StartError::Busy);
        }
        let Some(slot) = self.free.pop() else {
            return Err(StartError::Busy);
        };
        let header = self.headers[slot as usize];
        let credits = self.max;
        let encoded = mem
            .bytes_mut(header.addr, header.len as usize)
            .and_then(|out| encode_msg(vers, xid, credits, Direction::Call, out));
        let Some(hdr_len) = encoded else {
            let _ = self.free.push(slot);
            return Err(StartError::BadSpec);
        };
        // The receive for the reply goes first (RFC 8167 §4.2.2), then the call.
        core.rq_target += 1;
        core.refill_recvs();
        let wr_id = WrId::new(wr_kind::BACK_SEND, u64::from(slot));
        if !post_inline(core, wr_id, header, hdr_len as u32, &pieces, mem) {
            core.rq_target -= 1;
            let _ = self.free.push(slot);
            return Err(StartError::BadSpec);
        }
        let c = &mut self.calls[slot as usize];
        *c = BCall {
            state: BState::Awaiting,
            generation: c.generation,
            xid,
            reply: spec.reply,
            send_done: false,
            outcome: Err(CallError::ConnectionLost),
        };
        self.awaiting += 1;
        Ok(CallId {
            slot,
            generation: c.generation,
        })
    }

    /// A backward reply (or an error answering a backward call) arrived in receive `index`.
    pub(crate) fn on_recv<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        index: u32,
        wc: &Completion,
        mem: &mut M,
    ) {
        core.hold_recv(index);
        let Some(rbuf) = core.recv_buf(index) else {
            core.fail();
            return;
        };
        let len = wc.byte_len.min(rbuf.len) as usize;
        // (slot, outcome, granted (None: unchanged), payload offset)
        let verdict = mem.bytes(rbuf.addr, len).and_then(|buf| {
            let h = receive::decode(buf, &core.v2_limits, core.cfg.max_version).ok()?;
            let slot = self
                .calls
                .iter()
                .position(|c| c.state == BState::Awaiting && c.xid == h.xid)?;
            // Backward credits work as forward ones (RFC 8167 §4.1): only a non-error reply
            // reports the client's grant; an RDMA_ERROR / RDMA2_ERROR's `rdma_credit` is never
            // used (the v2 draft's "non-error RPC-over-RDMA message ... that reports the
            // responder's actual credit limit"; see the requester's module doc, "Credits").
            let granted = credits::reply_grant(&h.body, h.credits, self.max);
            let call = &self.calls[slot];
            let outcome = match h.body {
                AnyBody::Msg { lists, .. } => {
                    if !lists.is_empty() {
                        Err(CallError::BadReply(BadReply::WriteList))
                    } else if h.payload.len() > call.reply.len as usize {
                        Err(CallError::BadReply(BadReply::TooLong))
                    } else {
                        Ok(h.payload.len() as u32)
                    }
                }
                AnyBody::Error(WireErr::Vers { low, high }) => {
                    Err(CallError::ErrVers { low, high })
                }
                AnyBody::Error(WireErr::Chunk) => Err(CallError::ErrChunk),
                AnyBody::Error(WireErr::V2(e)) => Err(CallError::Rdma2(e)),
                AnyBody::Error(WireErr::Unknown(c)) => Err(CallError::RdmaError(c)),
                AnyBody::Nomsg { .. } => Err(CallError::BadReply(BadReply::ReplyChunk)),
                AnyBody::Done | AnyBody::Optional(_) => return None,
            };
            Some((slot as u32, outcome, granted, h.header_len as u64))
        });
        if let Some((slot, mut outcome, granted, off)) = verdict {
            if let Some(g) = granted {
                self.granted = g;
            }
            let call = self.calls[slot as usize];
            if let Ok(n) = outcome {
                if n > 0 && !mem.copy(call.reply.addr, rbuf.addr + off, n as usize) {
                    outcome = Err(CallError::BadReply(BadReply::TooLong));
                }
            }
            let c = &mut self.calls[slot as usize];
            c.state = BState::Answered;
            c.outcome = outcome;
            self.awaiting -= 1;
            // The receive posted for this call is no longer needed.
            core.rq_target = core.rq_target.saturating_sub(1);
            if c.send_done {
                self.complete(core, slot);
            }
        }
        core.release_recv(index);
    }

    pub(crate) fn on_send_complete(&mut self, core: &mut Core, index: u32) {
        let Some(c) = self.calls.get_mut(index as usize) else {
            core.fail();
            return;
        };
        if c.state == BState::Free || c.send_done {
            core.fail();
            return;
        }
        c.send_done = true;
        if c.state == BState::Answered {
            self.complete(core, index);
        }
    }

    fn complete(&mut self, core: &mut Core, slot: u32) {
        let c = self.calls[slot as usize];
        let call = CallId {
            slot,
            generation: c.generation,
        };
        core.emit(match c.outcome {
            Ok(len) => Event::ReplyReady(Reply {
                call,
                xid: c.xid,
                len,
                written: [0; MAX_WRITE_CHUNKS],
                nwritten: 0,
                long: false,
            }),
            Err(error) => Event::CallFailed {
                call,
                xid: c.xid,
                error,
            },
        });
        self.calls[slot as usize] = BCall {
            generation: c.generation.wrapping_add(1),
            ..BCall::FREE
        };
        let _ = self.free.push(slot);
    }

    /// The connection is gone: every backward call still pending is reported so the upper
    /// layer can re-issue it after the client reconnects.
    pub(crate) fn on_closed(&mut self, core: &mut Core) {
        for slot in 0..self.calls.len() as u32 {
            let c = &mut self.calls[slot as usize];
            match c.state {
                BState::Free => continue,
                // The reply is in; only the Send's completion was missing (it is flushed).
                BState::Answered => {}
                BState::Awaiting => c.outcome = Err(CallError::ConnectionLost),
            }
            self.complete(core, slot);
        }
        self.awaiting = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Client side: the responder with the backward policy.

/// The responder policy of the backward direction (client side): no chunks (a backward call
/// carrying any is answered ERR_CHUNK, RFC 8167 §5.3), the backward credits granted in every
/// reply (never 0), Sends of kind [`wr_kind::BACK_SEND`], a call beyond the credits dropped,
/// and the receives of the unused backward credits kept back from forward calls.
pub(crate) fn responder_policy(core: &Core) -> Policy {
    Policy {
        chunks: false,
        grant: credits::sent_grant(core.cfg.backchannel_credits),
        send_kind: wr_kind::BACK_SEND,
        backlog: false,
        reserve: true,
        sets_version: false,
    }
}

/// The client's backward direction: a [`Responder`] of [`responder_policy`] over the
/// backchannel send buffers, and the receives it adds once enabled.
pub(crate) struct BackResponder {
    pub(crate) resp: Responder,
    /// Receives added to the receive queue when enabled.
    nrecvs: u32,
    pub(crate) enabled: bool,
}

impl BackResponder {
    pub(crate) fn new(core: &Core, headers: &[LocalBuf], nrecvs: usize) -> Self {
        BackResponder {
            resp: Responder::new(core, responder_policy(core), headers, &[]),
            nrecvs: nrecvs as u32,
            enabled: false,
        }
    }

    /// Posts the backchannel receives: one per backward credit, plus one per backward call
    /// whose reply Send has not completed yet (so the server may send its next call as soon
    /// as it has the reply). From now on the forward requester keeps back the receives the
    /// server may still use for backward calls.
    pub(crate) fn enable(&mut self, core: &mut Core) {
        if self.enabled {
            return;
        }
        self.enabled = true;
        core.rq_target += self.nrecvs;
        self.resp.update_reserve(core);
        core.refill_recvs();
    }
}
