//! State both roles of a connection share ([`Core`]): configuration, negotiated thresholds,
//! the output rings (work requests, events), send- and receive-queue accounting, the receive
//! slots, the header buffers and the memory-window slots.
//!
//! Normal operation: the roles queue work requests with [`Core::post_send`] (after checking
//! [`Core::sq_free`]) and events with [`Core::emit`]; receive slots move Idle → Posted → Held →
//! Idle, and [`Core::refill_recvs`] keeps `rq_target` of them posted. Recovery: a ring that
//! would overflow, or any role that finds the queue pair broken, calls [`Core::fail`]; the
//! [`super::Connection`] notices the closed state after the current input and reports it once.

use super::config::{Config, LocalBuf};
use super::ring::{IndexStack, Ring};
use super::types::{wr_kind, ConnState, Event, WorkRequest};
use crate::proto::chunks::ChunkLimits;
use crate::proto::private_data::Negotiated;
use crate::verbs::WrId;

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
    pub(crate) headers: Vec<LocalBuf>,
    pub(crate) zero: LocalBuf,
    pub(crate) mws: Vec<MwSlot>,
    pub(crate) mw_free: IndexStack,
    /// Draws the key byte of every window bind ([`Config::key_seed`]).
    pub(crate) keys: crate::verbs::KeyGen,
    pub(crate) max_sge: usize,
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

    /// Send queue entries free.
    #[inline]
    pub(crate) fn sq_free(&self) -> u32 {
        self.cfg.sq_depth.saturating_sub(self.sq_used)
    }

    /// Queues a send-queue work request (the caller checked [`Core::sq_free`]).
    pub(crate) fn post_send(&mut self, wr: WorkRequest) {
        if self.wrs.push(wr) {
            self.sq_used += 1;
            if matches!(wr, WorkRequest::RdmaRead { .. }) {
                self.reads_used += 1;
            }
        } else {
            self.fail();
        }
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

    /// Returns receive slot `i` to the pool and keeps the receive queue filled.
    pub(crate) fn release_recv(&mut self, i: u32) {
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
        if self.state == ConnState::Closed {
            return;
        }
        while self.rq_posted < self.rq_target {
            let Some(i) = self.recv_idle.pop() else {
                break;
            };
            let slot = &mut self.recvs[i as usize];
            slot.state = RecvState::Posted;
            let wr = WorkRequest::Recv {
                wr_id: WrId::new(wr_kind::RECV, u64::from(i)),
                sge: slot.buf.sge(),
            };
            if !self.wrs.push(wr) {
                self.state = ConnState::Closed;
                return;
            }
            self.rq_posted += 1;
        }
    }

    /// Enters the closed state. [`Connection`] notices it after the current input and does the
    /// rest once (reports the loss, fails the role's calls).
    pub(crate) fn fail(&mut self) {
        self.state = ConnState::Closed;
    }
}
