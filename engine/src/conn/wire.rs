//! Routing of received messages by direction (RFC 8167 §4.1, v2 draft "Message Direction").
//!
//! Normal operation: every completed receive is looked at once, before either role sees it, to
//! tell a forward-direction message (a reply on the client, a call on the server) from a
//! backward-direction one (a call on the client, a reply on the server). RPC-over-RDMA Version
//! One carries no direction in its header, so an RDMA_MSG is classified by the `msg_type` word
//! of the RPC message at its fixed offset ([`crate::rpc::msg_direction`]); RDMA_NOMSG and
//! RDMA_ERROR are classified by context (what each role can receive). Version Two carries the
//! direction in the header (`rdma_direction`, `rdma_optdir`; RDMA2_ERROR is always a reply).
//!
//! Recovery: a message whose direction cannot be told (an RDMA_MSG whose RPC message is too
//! short or whose `msg_type` is neither CALL nor REPLY) is dropped, and none of its fields, the
//! credit value included, is used. A header that does not decode goes to the forward role,
//! which answers or drops it as the version's error rules say.

use super::Role;
use crate::proto::chunks::ChunkLimits;
use crate::proto::v1;
use crate::rpc::{msg_direction, MsgType};

/// Where a received message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// To the role of the connection (replies on a requester, calls on a responder).
    Forward,
    /// To the backchannel (calls on a requester, replies on a responder).
    Backward,
    /// Nowhere: direction unknown; the receive is reposted and nothing of it is used.
    Drop,
}

/// Classifies a received message for a connection of role `role`.
pub(crate) fn route(buf: &[u8], role: Role, limits: &ChunkLimits) -> Route {
    let Ok(h) = v1::decode(buf, limits) else {
        return Route::Forward;
    };
    let (call_here, reply_here) = match role {
        // What a requester normally receives is a reply; a call is backward.
        Role::Requester => (Route::Backward, Route::Forward),
        Role::Responder => (Route::Forward, Route::Backward),
    };
    match h.body {
        v1::Body::Msg(_) | v1::Body::Msgp { .. } => match msg_direction(h.payload) {
            Some(MsgType::Call) => call_here,
            Some(MsgType::Reply) => reply_here,
            _ => Route::Drop,
        },
        // A long message: a call carries its RPC message in a Position Zero Read chunk, a reply
        // in the Reply chunk. A requester never receives a forward message with a Read list.
        v1::Body::Nomsg(c) => match role {
            Role::Requester if !c.reads.is_empty() => Route::Backward,
            _ => Route::Forward,
        },
        v1::Body::Done => Route::Forward,
        // Errors answer calls: on a requester, its forward calls; on a responder, its backward
        // calls.
        v1::Body::Error(_) => reply_here,
    }
}
