//! The backward direction (RFC 8167): the server sends RPC calls to the client on the client's
//! connection, the client serves them. This file holds the RFC 8167 policy values of the two
//! roles and the little state each adds; the calls themselves go through the same requester
//! ([`super::requester`]) and responder ([`super::responder`]) code as the forward ones.
//!
//! Normal operation: backward messages are inline RDMA_MSG with empty chunk lists (neither side
//! exposes memory for them). The server side ([`BackRequester`]: a [`Requester`] of
//! [`requester_policy`] over the backchannel send buffers) asks for
//! [`super::Config::backchannel_credits`] in `rdma_credit`, keeps at most the granted number
//! outstanding (one until the first non-error backward reply, whose `rdma_credit` is the grant;
//! an error's is never used; never sending 0), and posts one extra receive per backward call it
//! sends, before the call. The client side ([`BackResponder`]: a [`Responder`] of
//! [`responder_policy`]) keeps `2 × credits` extra receives posted once the upper layer enabled
//! the backchannel (one per backward credit, plus one per backward call whose reply Send has
//! not completed yet, so the server may send its next call as soon as it has the reply), hands
//! each call out as [`super::Event::CallReady`] and sends the reply with the granted backward
//! credits in `rdma_credit` (never 0). Each role instance has its own slots, XID table and
//! credits: the same XID may be live in both directions at once, since each side matches
//! replies only against its own direction's calls.
//!
//! Recovery: a backward call carrying chunks is answered with ERR_CHUNK (backward chunks are not
//! supported; Version Two: RDMA2_ERR_BAD_XDR). A backward reply with an unknown XID is dropped.
//! When the connection is lost, every backward call still pending fails with
//! [`super::CallError::ConnectionLost`]; the server's upper layer re-issues it (same XID) on the
//! connection the client establishes next.

use super::credits;
use super::requester::{self, Requester};
use super::responder::{self, Responder};
use super::{wr_kind, Core, LocalBuf};

/// The requester policy of the backward direction (server side): no chunks (DDP items inline,
/// no receptacles, nothing larger than the inline threshold), the backward credits asked for,
/// Sends of kind [`wr_kind::BACK_SEND`], one receive posted per call before it (RFC 8167
/// §4.2.2), no timeout (the upper layer's session rules govern backward calls).
pub(crate) fn requester_policy(core: &Core) -> requester::Policy {
    requester::Policy {
        chunks: false,
        asked: core.cfg.backchannel_credits,
        send_kind: wr_kind::BACK_SEND,
        extra_recv: true,
        timeouts: false,
    }
}

/// The responder policy of the backward direction (client side): no chunks (a backward call
/// carrying any is answered ERR_CHUNK, RFC 8167 §5.3), the backward credits granted in every
/// reply (never 0), Sends of kind [`wr_kind::BACK_SEND`], a call beyond the credits dropped,
/// and the receives of the unused backward credits kept back from forward calls.
pub(crate) fn responder_policy(core: &Core) -> responder::Policy {
    responder::Policy {
        chunks: false,
        grant: credits::sent_grant(core.cfg.backchannel_credits),
        send_kind: wr_kind::BACK_SEND,
        backlog: false,
        reserve: true,
        sets_version: false,
    }
}

/// The server's backward direction: a [`Requester`] of [`requester_policy`] over the
/// backchannel send buffers, usable once enabled.
pub(crate) struct BackRequester {
    pub(crate) req: Requester,
    pub(crate) enabled: bool,
}

impl BackRequester {
    pub(crate) fn new(core: &Core, headers: &[LocalBuf]) -> Self {
        BackRequester {
            req: Requester::new(requester_policy(core), headers),
            enabled: false,
        }
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

    /// Posts the backchannel receives; from now on the forward requester keeps back the
    /// receives the server may still use for backward calls.
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
