//! Credits, in one place: what a requester may have outstanding, what a grant received means,
//! and what a responder sends — for the forward direction (the requester and responder roles)
//! and the backward one (RFC 8167, `super::backchannel`), which follow the same rules.
//!
//! Normal operation:
//! - A requester asks for its local maximum (`local_max`: the configured credits, at least 1,
//!   at most its call slots) in every call, and keeps at most the granted number of calls
//!   outstanding (`may_start`). The grant is `INITIAL_GRANT` (one) until the first
//!   non-error reply, then the `rdma_credit` of the latest non-error reply (RDMA_MSG /
//!   RDMA_NOMSG / RDMA_MSGP), clamped ([`clamp`]: 0 counts as 1, above the local maximum
//!   becomes the maximum). `reply_grant` is that rule: the `rdma_credit` of an RDMA_ERROR /
//!   RDMA2_ERROR, of RDMA_DONE, of an RDMA2_OPTIONAL message or of a message whose direction
//!   cannot be told (dropped before it gets here) is never used — the v2 draft ("Protocol
//!   Version Negotiation") has a requester "assume the ability to exchange only a single
//!   RPC-over-RDMA message at a time until it receives a non-error RPC-over-RDMA message from
//!   the responder that reports the responder's actual credit limit", and RFC 8167 §4.1 says a
//!   receiver that cannot tell a message's direction "MUST NOT use the header's credit value".
//!   A Version One reply that is not an error but cannot be used still reports the grant; a
//!   Version Two one does not (`unusable_reply_grants`).
//! - A responder grants its configured credits in every reply, and a grant is never sent as 0
//!   (`sent_grant`).
//! - Backward direction: the client grants the server `sent_grant` of its backward credits;
//!   while the backchannel is enabled it keeps back from its own forward calls the posted
//!   receives the server may still take (`backward_reserve`: backward credits not in use).
//!
//! Recovery: a call that timed out keeps its credit as an orphan (`Orphans`) until the late
//! reply with its XID arrives (the responder still holds it); a stray reply naming any other
//! XID frees nothing. A lost connection forgets every orphan.

use super::receive::AnyBody;
use crate::proto::v2;

/// The grant a requester assumes before the first non-error reply: one call at a time.
pub(crate) const INITIAL_GRANT: u32 = 1;

/// Clamps a credit value — from the wire, or configured by a user — into `1..=max`: 0 counts
/// as 1, values above `max` become `max` (a `max` of 0 counts as 1).
#[inline]
pub fn clamp(wire: u32, max: u32) -> u32 {
    wire.clamp(1, max.max(1))
}

/// A requester's local maximum of outstanding calls (the credits it asks for): `asked`, at
/// least 1, at most `slots` (each call takes a slot).
#[inline]
pub(crate) fn local_max(asked: u32, slots: usize) -> u32 {
    asked.clamp(1, slots.max(1).min(u32::MAX as usize) as u32)
}

/// The grant a received message of a requester's direction reports: the clamped `rdma_credit`
/// of a non-error reply, `None` for every other message (errors, RDMA_DONE, RDMA2_OPTIONAL).
#[inline]
pub(crate) fn reply_grant(body: &AnyBody<'_>, wire: u32, max: u32) -> Option<u32> {
    match body {
        AnyBody::Msg { .. } | AnyBody::Nomsg { .. } => Some(clamp(wire, max)),
        AnyBody::Done | AnyBody::Error(_) | AnyBody::Optional(_) => None,
    }
}

/// Whether a non-error reply of version `vers` that fails its call (bad chunks, too long,
/// wrong version) still reports its grant: in Version One (as before Version Two existed), not
/// in Version Two.
#[inline]
pub(crate) fn unusable_reply_grants(vers: u32) -> bool {
    vers != v2::VERSION
}

/// Whether a requester with `in_use` credits in use (calls awaiting a reply, orphans, calls
/// being sent again) may start another under `granted`.
#[inline]
pub(crate) fn may_start(in_use: u32, granted: u32) -> bool {
    in_use < granted
}

/// The grant a responder sends for `configured` credits: never 0.
#[inline]
pub(crate) fn sent_grant(configured: u32) -> u32 {
    configured.max(1)
}

/// Client with an enabled backchannel: the posted receives kept back from forward calls for
/// the server's backward calls — the backward credits `granted` not taken by the `unanswered`
/// backward calls.
#[inline]
pub(crate) fn backward_reserve(granted: u32, unanswered: u32) -> u32 {
    granted.saturating_sub(unanswered)
}

/// Timed-out calls whose credit the responder may still hold, by XID. Capacity: every call
/// slot (a call starts only while the credits in use are below the grant, which is at most the
/// number of slots), so it never grows.
pub(crate) struct Orphans {
    xids: Vec<u32>,
}

impl Orphans {
    /// Room for `slots` orphans (allocated once, at creation).
    pub(crate) fn with_capacity(slots: usize) -> Self {
        Orphans {
            xids: Vec::with_capacity(slots),
        }
    }

    /// Credits held by orphans.
    #[inline]
    pub(crate) fn count(&self) -> u32 {
        self.xids.len() as u32
    }

    /// The call `xid` timed out: its credit stays in use.
    pub(crate) fn add(&mut self, xid: u32) {
        self.xids.push(xid);
    }

    /// A reply naming no waiting call arrived: when it is the late reply of an orphan, that
    /// orphan's credit returns (`true`).
    pub(crate) fn reclaim(&mut self, xid: u32) -> bool {
        match self.xids.iter().position(|&x| x == xid) {
            Some(i) => {
                self.xids.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The connection is gone: no credit is held any more.
    pub(crate) fn clear(&mut self) {
        self.xids.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_zero_as_one_and_clamps_above_the_maximum() {
        assert_eq!(clamp(0, 8), 1);
        assert_eq!(clamp(5, 8), 5);
        assert_eq!(clamp(9, 8), 8);
        assert_eq!(clamp(0, 0), 1, "a maximum of 0 counts as 1 too");
        assert_eq!(local_max(0, 4), 1);
        assert_eq!(local_max(64, 4), 4);
        assert_eq!(sent_grant(0), 1);
    }

    /// A Version One header (xid 1, `credits`, `proc`, empty chunk lists) with an RPC REPLY
    /// after it, decoded.
    fn body_of(buf: &mut Vec<u8>, credits: u32, proc_: u32) -> AnyBody<'_> {
        for w in [1u32, 1, credits, proc_, 0, 0, 0, 1, 1, 0, 0, 0, 0] {
            buf.extend_from_slice(&w.to_be_bytes());
        }
        let limits = crate::proto::v2::Limits::DEFAULT;
        super::super::receive::decode(buf, &limits, 1)
            .expect("decodes")
            .body
    }

    #[test]
    fn rejects_grants_from_errors_and_done() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert_eq!(
            reply_grant(&body_of(&mut a, 0, 0), 0, 8),
            Some(1),
            "0 counts as 1"
        );
        assert_eq!(
            reply_grant(&body_of(&mut b, 100, 0), 100, 8),
            Some(8),
            "clamped"
        );
        assert_eq!(reply_grant(&AnyBody::Done, 5, 8), None);
        let mut e = Vec::new();
        for w in [1u32, 1, 5, 4, 2] {
            e.extend_from_slice(&w.to_be_bytes());
        }
        let limits = crate::proto::v2::Limits::DEFAULT;
        let err = super::super::receive::decode(&e, &limits, 1)
            .expect("ERR_CHUNK")
            .body;
        assert!(matches!(err, AnyBody::Error(_)));
        assert_eq!(reply_grant(&err, 5, 8), None, "RDMA_ERROR");
    }

    #[test]
    fn accepts_only_the_late_reply_of_an_orphan() {
        let mut o = Orphans::with_capacity(2);
        o.add(7);
        assert!(!o.reclaim(8), "a stray XID frees nothing");
        assert_eq!(o.count(), 1);
        assert!(o.reclaim(7));
        assert_eq!(o.count(), 0);
    }
}
