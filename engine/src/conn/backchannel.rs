//! The backward direction (RFC 8167): the server sends RPC calls to the client on the client's
//! connection, the client serves them. This file holds the RFC 8167 policy values of the two
//! roles and the little state the direction adds ([`Backward`]); the calls themselves go
//! through the same requester ([`super::requester`]) and responder ([`super::responder`]) code
//! as the forward ones: a connection has at most one of each, the requester of a server and the
//! responder of a client being the backward ones.
//!
//! Normal operation: backward messages are inline RDMA_MSG with empty chunk lists (neither side
//! exposes memory for them). The server's requester ([`requester_policy`]) asks for
//! [`super::Config::backchannel_credits`] in `rdma_credit`, keeps at most the granted number
//! outstanding (one until the first non-error backward reply, whose `rdma_credit` is the grant;
//! an error's is never used; never sending 0), and posts one extra receive per backward call it
//! sends, before the call. The client's responder ([`responder_policy`]) has `2 × credits`
//! extra receives posted once the upper layer enabled the backchannel ([`Backward::enable`]),
//! hands each call out as [`super::Event::CallReady`] and sends the reply with the granted
//! backward credits in `rdma_credit` (never 0). Each role has its own slots, XID table and
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

/// The server's backward requester: a [`Requester`] of [`requester_policy`] over the
/// backchannel send buffers.
pub(crate) fn requester(core: &Core, headers: &[LocalBuf]) -> Requester {
    Requester::new(requester_policy(core), headers, core.cfg.call_slots)
}

/// The client's backward responder: a [`Responder`] of [`responder_policy`] over the
/// backchannel send buffers (no data buffers: backward calls carry no chunks).
pub(crate) fn responder(core: &Core, headers: &[LocalBuf]) -> Responder {
    Responder::new(core, responder_policy(core), headers, &[])
}

/// The state the backward direction adds to a connection: whether it has one, whether the
/// upper layer enabled it, and the receives a client posts then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backward {
    /// Created with backchannel memory.
    pub(crate) present: bool,
    /// Enabled by the upper layer (RFC 8167 §6).
    pub(crate) enabled: bool,
    /// Client: receives added to the receive queue when enabled (a server posts one per
    /// backward call instead).
    nrecvs: u32,
}

impl Backward {
    /// No backward direction.
    pub(crate) const NONE: Backward = Backward {
        present: false,
        enabled: false,
        nrecvs: 0,
    };

    /// A backward direction, not enabled yet; a client adds `nrecvs` receives once it is.
    pub(crate) fn new(nrecvs: usize) -> Backward {
        Backward {
            present: true,
            enabled: false,
            nrecvs: nrecvs as u32,
        }
    }

    /// Enables it. A client (`responder`: its backward responder) posts its backchannel
    /// receives — one per backward credit, plus one per backward call whose reply Send has not
    /// completed yet, so the server may send its next call as soon as it has the reply — and
    /// from then on its forward requester keeps back the receives the server may still use. A
    /// server may send backward calls from now on.
    pub(crate) fn enable(&mut self, core: &mut Core, responder: Option<&Responder>) {
        if self.enabled {
            return;
        }
        self.enabled = true;
        if let Some(r) = responder {
            core.rq_target += self.nrecvs;
            r.update_reserve(core);
            core.refill_recvs();
        }
    }
}
