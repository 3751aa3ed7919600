//! Received-message plumbing shared by every part of the connection: a decoder over both
//! protocol versions, and routing of each message by direction (RFC 8167 §4.1, v2 draft
//! "Message Direction").
//!
//! Normal operation: [`decode`] reads the version from the fixed words and hands the buffer to the
//! Version One or Version Two codec (Version Two only when the connection speaks it), and returns
//! one borrowed [`Any`] view whatever the version. Every completed receive is decoded once, by the
//! connection, and classified by [`route`] before any role sees it: a call goes to the
//! connection's responder (the forward one of a server, the backward one of a client), a reply
//! to its requester (the forward one of a client, the backward one of a server), an
//! RDMA2_OPTIONAL message to the registered handlers, each with the decoded header (only a call
//! that waits in the responder's backlog is decoded again when it gets a slot). Version One
//! carries no direction in its header, so an RDMA_MSG is classified by the `msg_type` word of
//! the RPC message at its fixed offset ([`crate::rpc::msg_direction`]); RDMA_NOMSG and
//! RDMA_ERROR by context (what each role can receive). Version Two carries the direction in the
//! header (`rdma_direction`, `rdma_optdir`; RDMA2_ERROR is always a reply).
//!
//! Recovery: a message whose direction cannot be told (an RDMA_MSG whose RPC message is too
//! short or whose `msg_type` is neither CALL nor REPLY) is dropped, and none of its fields, the
//! credit value included, is used. A header that does not decode goes where its direction (if
//! the decoder got that far) says, else to the forward role, which answers or drops it as the
//! version's error rules say.

use super::Role;
use crate::proto::chunks::ChunkLists;
use crate::proto::v2::{self, Direction};
use crate::proto::{peek, v1};
use crate::rpc::{msg_direction, MsgType};

/// An RDMA_ERROR / RDMA2_ERROR body, whichever the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireErr {
    /// ERR_VERS / RDMA2_ERR_VERS (same layout in every version).
    Vers { low: u32, high: u32 },
    /// Version One ERR_CHUNK.
    Chunk,
    /// Any other Version Two error.
    V2(v2::RdmaError),
    /// Version One unknown error code.
    Unknown(u32),
}

/// A decoded body, whichever the version.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnyBody<'a> {
    /// RDMA_MSG (or RDMA_MSGP) / RDMA2_MSG.
    Msg {
        lists: ChunkLists<'a>,
        /// Version Two `rdma_inv_handle` (0 in Version One).
        inv_handle: u32,
    },
    /// RDMA_NOMSG / RDMA2_NOMSG.
    Nomsg {
        lists: ChunkLists<'a>,
        inv_handle: u32,
    },
    /// RDMA_DONE (ignored everywhere).
    Done,
    Error(WireErr),
    Optional(v2::Optional<'a>),
}

/// A decoded header of either version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Any<'a> {
    pub(crate) xid: u32,
    pub(crate) vers: u32,
    pub(crate) credits: u32,
    pub(crate) body: AnyBody<'a>,
    pub(crate) header_len: usize,
    pub(crate) payload: &'a [u8],
}

/// A header either codec rejected.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnyError {
    V1(v1::HeaderError),
    V2(v2::HeaderError),
}

/// Decodes a header of Version One, or of Version Two when `max_version` ≥ 2. Any other
/// version comes back as the Version One codec's error (ERR_VERS or a foreign RDMA_ERROR).
#[inline] // one caller (`Connection::on_recv`): the header is built in its `Option` there
pub(crate) fn decode<'a>(
    buf: &'a [u8],
    limits: &v2::Limits,
    max_version: u32,
) -> Result<Any<'a>, AnyError> {
    if max_version >= v2::VERSION && peek(buf).map(|(_, v)| v) == Some(v2::VERSION) {
        let h = v2::decode(buf, limits).map_err(AnyError::V2)?;
        let body = match h.body {
            v2::Body::Msg(c) => AnyBody::Msg {
                lists: c.lists,
                inv_handle: c.inv_handle,
            },
            v2::Body::Nomsg(c) => AnyBody::Nomsg {
                lists: c.lists,
                inv_handle: c.inv_handle,
            },
            v2::Body::Error(v2::RdmaError::Vers { low, high }) => {
                AnyBody::Error(WireErr::Vers { low, high })
            }
            v2::Body::Error(e) => AnyBody::Error(WireErr::V2(e)),
            v2::Body::Optional(o) => AnyBody::Optional(o),
        };
        return Ok(Any {
            xid: h.xid,
            vers: h.vers,
            credits: h.credits,
            body,
            header_len: h.header_len,
            payload: h.payload,
        });
    }
    let h = v1::decode(buf, &limits.chunks).map_err(AnyError::V1)?;
    let body = match h.body {
        v1::Body::Msg(lists) | v1::Body::Msgp { chunks: lists, .. } => AnyBody::Msg {
            lists,
            inv_handle: 0,
        },
        v1::Body::Nomsg(lists) => AnyBody::Nomsg {
            lists,
            inv_handle: 0,
        },
        v1::Body::Done => AnyBody::Done,
        v1::Body::Error(v1::RdmaError::Vers { low, high }) => {
            AnyBody::Error(WireErr::Vers { low, high })
        }
        v1::Body::Error(v1::RdmaError::Chunk) => AnyBody::Error(WireErr::Chunk),
        v1::Body::Error(v1::RdmaError::Unknown(c)) => AnyBody::Error(WireErr::Unknown(c)),
    };
    Ok(Any {
        xid: h.xid,
        vers: h.vers,
        credits: h.credits,
        body,
        header_len: h.header_len,
        payload: h.payload,
    })
}

/// Where a received message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// A call (or what stands for one): to the connection's responder — the forward one of a
    /// server, the backward one of a client.
    Call,
    /// A reply (or an error answering a call): to the connection's requester — the forward
    /// one of a client, the backward one of a server.
    Reply,
    /// An RDMA2_OPTIONAL message: to the registered handlers.
    Optional,
    /// Nowhere: direction unknown; the receive is reposted and nothing of it is used.
    Drop,
}

/// What the forward role of a connection of `role` receives: replies on a requester, calls
/// on a responder.
pub(crate) fn forward(role: Role) -> Route {
    match role {
        Role::Requester => Route::Reply,
        Role::Responder => Route::Call,
    }
}

/// Classifies a received message, as [`decode`] read it, for a connection of role `role`.
pub(crate) fn route(decoded: &Result<Any<'_>, AnyError>, role: Role) -> Route {
    let by_dir = |d: Direction| match d {
        Direction::Call => Route::Call,
        Direction::Reply => Route::Reply,
        Direction::Unknown(_) => Route::Drop,
    };
    let h = match decoded {
        Ok(h) => h,
        // A Version Two header tells its direction before most of what can go wrong. One
        // that fails before (bad direction or procedure, cut short) is answered by a
        // responder (RDMA2_ERR_BAD_XDR / _INVAL_PROC) and dropped by a requester.
        Err(AnyError::V2(e)) => {
            return match (e.direction, role) {
                (Some(d), _) => by_dir(d),
                (None, Role::Responder) => Route::Call,
                (None, Role::Requester) => Route::Drop,
            }
        }
        Err(AnyError::V1(_)) => return forward(role),
    };
    let v2 = h.vers == v2::VERSION;
    match h.body {
        AnyBody::Optional(o) => {
            if matches!(o.optdir, Direction::Unknown(_)) {
                Route::Drop
            } else {
                Route::Optional
            }
        }
        // The v2 decoder checked that rdma_direction matches the RPC msg_type.
        AnyBody::Msg { .. } => match msg_direction(h.payload) {
            Some(MsgType::Call) => Route::Call,
            Some(MsgType::Reply) => Route::Reply,
            _ => Route::Drop,
        },
        AnyBody::Nomsg { lists, .. } => {
            if v2 {
                // The decoder required a Position Zero Read chunk of a CALL and a Reply chunk
                // of a REPLY; the direction field was checked against that.
                if lists.reads.has_position_zero() {
                    Route::Call
                } else {
                    Route::Reply
                }
            } else {
                // A long message: a call carries its RPC message in a Position Zero Read
                // chunk, a reply in the Reply chunk. A requester never receives a forward
                // message with a Read list.
                match role {
                    Role::Requester if !lists.reads.is_empty() => Route::Call,
                    _ => forward(role),
                }
            }
        }
        // RDMA_DONE is never sent (implementation experience §7.1.2: a receiver "should ignore
        // it"); its direction cannot be told, so "the receiver MUST NOT use the header's credit
        // value" (RFC 8167 §4.1). Nothing of it is used, on either role.
        AnyBody::Done => Route::Drop,
        // Errors answer calls: the requester's (forward on a client, backward on a server).
        AnyBody::Error(_) => Route::Reply,
    }
}
