//! State both roles of a connection share ([`Core`]): configuration, negotiated thresholds,
//! the output rings (work requests, events), send- and receive-queue accounting, the receive
//! slots and the memory-window slots (each role owns its header buffers).
//!
//! Normal operation: the roles queue work requests with [`Core::post_send`] (after checking
//! [`Core::sq_free`]) and events with [`Core::emit`]; receive slots move Idle → Posted → Held →
//! Idle, and [`Core::refill_recvs`] keeps `rq_target` of them posted. With shared receives
//! ([`super::srq`]) the slots are holding slots: a completed shared buffer is adopted into one
//! (Idle → Posted → Held), released ones go back to the node (`srq.released`) and nothing is
//! posted here. Recovery: a ring that
//! would overflow, or any role that finds the queue pair broken, calls [`Core::fail`]; the
//! [`super::Connection`] notices the closed state after the current input and reports it once.

use super::config::*;
use super::fixed_capacity::{IndexStack, Ring};
use super::stream::Piece;
use super::types::{wr_kind, ConnState, Event, WorkRequest};
use crate::proto::chunks::ChunkLimits;
use crate::proto::private_data::{self, Negotiated, PrivateData};
use crate::verbs::{Sge, WrId};

// ---------------------------------------------------------------------------------------------
// Shared core.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecvState {
    /// Not posted and not in use.
    Idle,
    /// Posted to the receive queue.
    Posted,
    /// Completed and still referenced by a call.
    Held,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct RecvSlot {
    pub(super) buf: LocalBuf,
    pub(super) state: RecvState,
}

/// A memory window slot (requester).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MwSlot {
    /// Current key (after the last bind).
    pub(crate) rkey: u32,
    /// Call slot using it, when bound.
    pub(crate) owner: Option<u32>,
    /// Index in the owner's STag list.
    pub(crate) pos: u8,
}

/// State both roles share: configuration, output rings, queue accounting, pools.
pub(crate) struct Core {
    pub(crate) cfg: Config,
    pub(crate) limits: ChunkLimits,
    pub(crate) state: ConnState,
    /// Version One thresholds (RFC 8797).
    pub(crate) neg: Negotiated,
    /// Version Two thresholds (4096 octets both ways).
    pub(crate) neg_v2: Negotiated,
    /// Decoding limits for Version Two (chunk limits as `limits`).
    pub(crate) v2_limits: crate::proto::v2::Limits,
    /// Requester: the version it sends. Responder: the version of the last valid call (the
    /// version of its backward calls).
    pub(crate) version: u32,
    /// Requester: Version Two sent, not yet confirmed by a non-error reply.
    pub(crate) probing: bool,
    /// Requester: what the negotiation learnt about the peer.
    pub(crate) remembered: Option<u32>,
    pub(super) wrs: Ring<WorkRequest>,
    pub(super) events: Ring<Event>,
    pub(super) lost_reported: bool,
    pub(crate) sq_used: u32,
    pub(crate) reads_used: u32,
    pub(super) recvs: Vec<RecvSlot>,
    pub(crate) recv_idle: IndexStack,
    pub(crate) rq_posted: u32,
    pub(crate) rq_target: u32,
    /// Requester with an enabled backchannel: posted receives the server may still take for
    /// backward calls (backward credits not in use), kept back from forward calls.
    pub(crate) recv_reserve: u32,
    pub(crate) zero: LocalBuf,
    pub(crate) mws: Vec<MwSlot>,
    pub(crate) mw_free: IndexStack,
    /// Draws the key byte of every window bind ([`Config::key_seed`]).
    pub(crate) keys: crate::verbs::KeyGen,
    pub(crate) max_sge: usize,
    /// Shared-receive mode ([`super::srq`]): the node's buffers and what was handed back.
    pub(crate) srq: Option<super::srq::SrqRecvs>,
}

impl Core {
    /// The thresholds of protocol version `vers`.
    #[inline]
    pub(crate) fn neg_of(&self, vers: u32) -> &Negotiated {
        if vers == crate::proto::v2::VERSION {
            &self.neg_v2
        } else {
            &self.neg
        }
    }

    /// Octets of RPC reply an inline reply to a call of version `vers` offering `writes` Write
    /// chunks can carry: the threshold of what the peer sends us inline, less the largest
    /// inline reply header (fixed words, empty Read list, the Write list returned, no Reply
    /// chunk). A reply buffer longer than this gets a Reply chunk.
    pub(crate) fn inline_reply_room(&self, vers: u32, writes: usize) -> usize {
        let hdr = crate::proto::inline_msg_header_len(vers, writes);
        (self.neg_of(vers).recv_inline as usize).saturating_sub(hdr)
    }

    /// Send queue entries free.
    #[inline]
    pub(crate) fn sq_free(&self) -> u32 {
        self.cfg.sq_depth.saturating_sub(self.sq_used)
    }

    /// Queues a send-queue work request (the caller checked [`Core::sq_free`]). Inlined, so
    /// that the request is written straight into its ring slot.
    #[inline(always)]
    pub(crate) fn post_send(&mut self, wr: WorkRequest) {
        let read = matches!(wr, WorkRequest::RdmaRead { .. });
        match self.wrs.push_slot() {
            Some(slot) => {
                *slot = wr;
                self.sq_used += 1;
                self.reads_used += u32::from(read);
            }
            None => self.fail(),
        }
    }

    /// Queues a Send (the caller checked [`Core::sq_free`]) gathering `first` and then the
    /// buffers of `rest` (at most [`MAX_SGE`] entries in all; more are cut), written straight
    /// into its slot of the work-request ring: the 150-octet request is not built aside and
    /// moved in. Entries past the count are zero, as in a request built whole.
    #[inline]
    pub(crate) fn post_gather(
        &mut self,
        wr_id: WrId,
        first: Sge,
        rest: &[Piece],
        invalidate: Option<u32>,
    ) {
        let Some(slot) = self.wrs.push_slot() else {
            self.fail();
            return;
        };
        *slot = WorkRequest::Send {
            wr_id,
            sges: [Sge::default(); MAX_SGE],
            nsge: 1,
            invalidate,
        };
        if let WorkRequest::Send { sges, nsge, .. } = slot {
            sges[0] = first;
            let mut n = 1usize;
            for (d, p) in sges[1..].iter_mut().zip(rest) {
                *d = p.buf.sge();
                n += 1;
            }
            *nsge = n as u8;
        }
        self.sq_used += 1;
    }

    /// Queues an event (rings are sized so this cannot overflow; if it ever did, the connection
    /// fails rather than losing a completion silently).
    pub(crate) fn emit(&mut self, ev: Event) {
        if !self.events.push(ev) {
            self.fail();
        }
    }

    /// The buffer of receive slot `i`.
    pub(crate) fn recv_buf(&self, i: u32) -> Option<LocalBuf> {
        self.recvs.get(i as usize).map(|r| r.buf)
    }

    /// Marks receive slot `i` held by a call.
    pub(crate) fn hold_recv(&mut self, i: u32) {
        if let Some(r) = self.recvs.get_mut(i as usize) {
            r.state = RecvState::Held;
        }
    }

    /// Returns receive slot `i` to the pool and keeps the receive queue filled. Shared
    /// receives: hands its buffer back to the node, or, once the connection is closed, keeps it
    /// held until [`Core::release_held`].
    pub(crate) fn release_recv(&mut self, i: u32) {
        if let Some(srq) = self.srq.as_mut() {
            if self.state == ConnState::Closed {
                return;
            }
            if let Some(r) = self.recvs.get_mut(i as usize) {
                if r.state == RecvState::Held {
                    r.state = RecvState::Idle;
                    let _ = self.recv_idle.push(i);
                    srq.hand_back(srq.shared_of[i as usize]);
                }
            }
            return;
        }
        if let Some(r) = self.recvs.get_mut(i as usize) {
            if r.state != RecvState::Idle {
                r.state = RecvState::Idle;
                let _ = self.recv_idle.push(i);
            }
        }
        self.refill_recvs();
    }

    /// Posts idle receive slots until `rq_target` are posted.
    pub(crate) fn refill_recvs(&mut self) {
        if self.state == ConnState::Closed || self.srq.is_some() {
            return;
        }
        while self.rq_posted < self.rq_target {
            let Some(i) = self.recv_idle.pop() else {
                break;
            };
            let slot = &mut self.recvs[i as usize];
            slot.state = RecvState::Posted;
            let sge = slot.buf.sge();
            // Written in its ring slot: only the receive's fields, not a whole request.
            let Some(wr) = self.wrs.push_slot() else {
                self.state = ConnState::Closed;
                return;
            };
            *wr = WorkRequest::Recv {
                wr_id: WrId::new(wr_kind::RECV, u64::from(i)),
                sge,
            };
            self.rq_posted += 1;
        }
    }

    /// Shared receives: a receive completion named shared buffer `id`. Adopts it into an idle
    /// holding slot (returned; the caller handles it as a completed receive of that slot), or
    /// hands it straight back when it carries nothing to use (`usable` false: an unsuccessful
    /// completion, or the connection is closed) or when no slot is free (the peer exceeded
    /// its grant: the connection fails). An id naming no buffer, or a shared receive in the
    /// per-connection mode, fails the connection.
    pub(crate) fn adopt_shared(&mut self, id: u32, usable: bool) -> Option<u32> {
        let Some(srq) = self.srq.as_mut() else {
            // A shared receive on a connection that has none.
            self.state = ConnState::Closed;
            return None;
        };
        let Some(buf) = srq.table.get(id) else {
            self.state = ConnState::Closed;
            return None;
        };
        if !usable {
            srq.hand_back(id);
            return None;
        }
        let Some(i) = self.recv_idle.pop() else {
            srq.hand_back(id);
            srq.exceeded = true;
            self.state = ConnState::Closed;
            return None;
        };
        srq.shared_of[i as usize] = id;
        let slot = &mut self.recvs[i as usize];
        slot.buf = buf;
        slot.state = RecvState::Posted;
        Some(i)
    }

    /// Shared receives of a closed connection: hands every receive still held back to the
    /// node; how many.
    pub(crate) fn release_held(&mut self) -> u32 {
        let Some(srq) = self.srq.as_mut() else {
            return 0;
        };
        if self.state != ConnState::Closed {
            return 0;
        }
        let mut n = 0;
        for (i, r) in self.recvs.iter_mut().enumerate() {
            if r.state != RecvState::Idle {
                r.state = RecvState::Idle;
                let _ = self.recv_idle.push(i as u32);
                srq.hand_back(srq.shared_of[i]);
                n += 1;
            }
        }
        n
    }

    /// Enters the closed state. [`Connection`] notices it after the current input and does the
    /// rest once (reports the loss, fails the role's calls).
    pub(crate) fn fail(&mut self) {
        self.state = ConnState::Closed;
    }
}

impl Core {
    /// The state of a new connection of `role` (a configuration [`super::config::validate`]
    /// accepted): every receive slot idle, every window free, nothing queued yet.
    pub(super) fn new(
        role: Role,
        cfg: Config,
        pools: &Pools<'_>,
        bc: &BackchannelPools<'_>,
        rq_target: u32,
    ) -> Core {
        let nslots = pools.headers.len();
        let recv_size = private_data::representable_size(cfg.inline_recv);
        let mut recvs = Vec::with_capacity(pools.recvs.len() + bc.recvs.len());
        for r in pools.recvs.iter().chain(bc.recvs) {
            recvs.push(RecvSlot {
                buf: *r,
                state: RecvState::Idle,
            });
        }
        let mut mws = Vec::with_capacity(pools.mws.len());
        for &rkey in pools.mws {
            mws.push(MwSlot {
                rkey,
                owner: None,
                pos: 0,
            });
        }
        let wr_cap = cfg.sq_depth as usize + cfg.rq_depth as usize + 1;
        let ev_cap = nslots + pools.recvs.len() + bc.headers.len() + bc.recvs.len() + 4;
        let filler = WorkRequest::LocalInv {
            wr_id: WrId(0),
            rkey: 0,
        };
        Core {
            cfg,
            limits: cap_limits(cfg.limits),
            state: ConnState::Connecting,
            neg: private_data::negotiate(&PrivateData::V1_DEFAULTS, None),
            neg_v2: v2_thresholds(&cfg, false),
            v2_limits: crate::proto::v2::Limits {
                chunks: cap_limits(cfg.limits),
                // rdma_optinfo is bounded only by the message, which the receive buffer
                // bounds: follow the receive size, never below the codec's default.
                max_optinfo: recv_size.max(crate::proto::v2::Limits::DEFAULT.max_optinfo),
            },
            version: match role {
                Role::Requester => cfg.max_version,
                Role::Responder => VERSION,
            },
            probing: role == Role::Requester && cfg.max_version >= 2,
            remembered: None,
            wrs: Ring::new(wr_cap, filler),
            events: Ring::new(ev_cap, Event::ConnectionLost),
            lost_reported: false,
            sq_used: 0,
            reads_used: 0,
            recv_idle: IndexStack::full(recvs.len()),
            recvs,
            rq_posted: 0,
            rq_target,
            recv_reserve: 0,
            zero: pools.zero,
            mw_free: IndexStack::full(mws.len()),
            mws,
            keys: crate::verbs::KeyGen::new(cfg.key_seed),
            max_sge: (cfg.max_send_sge as usize).clamp(1, MAX_SGE),
            srq: None,
        }
    }
}

/// Version Two thresholds: 4096 octets both ways, whatever RFC 8797 private data said (its sizes
/// describe Version One), and a send threshold never above what this side's send buffers hold.
/// Draft, "Default Values": "Inline threshold values are not advertised to peers via the base
/// RPC-over-RDMA Version Two protocol ... In the absense of such a mechanism, senders MUST
/// assume a receiver's inline threshold is 4096 bytes"; "Protocol Version Negotiation": after a
/// Version Two reply "both peers use the default inline threshold value for RPC-over-RDMA
/// Version Two connections (4096 bytes)". `peer_recognised`: the peer sent an RFC 8797 message.
pub(super) fn v2_thresholds(cfg: &Config, peer_recognised: bool) -> Negotiated {
    Negotiated {
        send_inline: cfg.inline_send.clamp(1, V2_INLINE),
        // The peer assumes our threshold is 4096 and sends nothing larger inline (our receive
        // buffers, at least 4096 for Version Two, take more should a peer do so anyway).
        recv_inline: V2_INLINE,
        recv_buffer: private_data::representable_size(cfg.inline_recv),
        // Version Two: the requester names the handle per call (rdma_inv_handle); this says
        // whether this side may use remote invalidation at all.
        remote_invalidate: cfg.remote_invalidate,
        peer_recognised,
    }
}

fn cap_limits(l: ChunkLimits) -> ChunkLimits {
    ChunkLimits {
        max_read_segments: l.max_read_segments.min(MAX_READ_SEGMENTS as u32),
        max_write_chunks: l.max_write_chunks.min(MAX_WRITE_CHUNKS as u32),
        max_write_segments: l.max_write_segments.min(MAX_WRITE_SEGMENTS as u32),
        max_reply_segments: l.max_reply_segments.min(MAX_REPLY_SEGMENTS as u32),
    }
}
