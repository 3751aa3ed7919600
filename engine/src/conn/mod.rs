//! The sans-IO RPC-over-RDMA connection: Version One (RFC 8166 as clarified by the
//! implementation-experience draft) and, with [`Config::max_version`] 2, Version Two of the seed
//! draft; one [`Connection`] per queue pair, in the role of requester (client) or responder
//! (server), Read-Write transfer model (the responder drives every RDMA Read and Write; the
//! requester exposes memory, the responder never does).
//!
//! Normal operation: the environment (a poller, or the test harness) feeds inputs —
//! [`Connection::handle_completion`], [`Connection::handle_cm`], [`Connection::handle_timeout`] —
//! and drains outputs — [`Connection::poll_wr`] (provider-agnostic [`WorkRequest`]s to post),
//! [`Connection::poll_event`] ([`Event`]s for the application), [`Connection::poll_timeout`].
//! Time is a `u64` nanosecond count the caller supplies; the connection never reads a clock,
//! never blocks, never allocates after [`Connection::new`], and touches memory only through the
//! caller's [`HostMemory`]. Every `wr_id` is a [`WrId`] of a kind ([`wr_kind`]) and a slot index
//! into per-connection arrays sized at creation, so a completion leads straight to its state.
//!
//! - Requester: [`Connection::start_call`] turns an encoded RPC call (parts of a registered
//!   buffer, DDP argument items cut out, result receptacles, a reply buffer) into memory-window
//!   binds + one Send (RDMA_MSG inline, or RDMA_NOMSG with a Position Zero Read chunk when the
//!   call does not fit the inline threshold). The reply is matched by XID, copied (inline) or
//!   already placed (Reply chunk) in the reply buffer, every dynamic STag of the call is
//!   invalidated (locally, unless the peer invalidated it with Send With Invalidate), and only
//!   then [`Event::ReplyReady`] is reported. At most the granted number of calls are
//!   outstanding (one until the first non-error reply; a grant of 0 counts as 1, grants above
//!   the local maximum are clamped; the `rdma_credit` of an RDMA_ERROR / RDMA2_ERROR or an
//!   RDMA_DONE is never used), and a receive is always posted for every outstanding call.
//! - Responder: receives equal to the credits granted are kept posted. Each call header is
//!   validated with the codec, Read chunks are pulled with RDMA Read into a data buffer where the
//!   call's XDR stream is reassembled, and [`Event::CallReady`] hands out a view of the stream.
//!   [`Connection::send_reply`] RDMA-Writes result items into the Write chunks (never pad
//!   octets), returns the Write list with the lengths actually written, and sends the reply
//!   inline or, when it does not fit, through the Reply chunk as RDMA_NOMSG.
//! - Both directions (RFC 8167): a connection created with [`Connection::with_backchannel`]
//!   also carries backward calls once [`Connection::enable_backchannel`] is called: the server
//!   starts them with [`Connection::start_call`] and gets [`Event::ReplyReady`], the client gets
//!   [`Event::CallReady`] and answers with [`Connection::send_reply`]. Every received message
//!   is decoded once and routed by direction (the RPC `msg_type` of an RDMA_MSG; context for
//!   the other procedures). The backward direction runs through the same requester (server)
//!   and responder (client) code as the forward one, a second instance with the RFC 8167
//!   policy (no chunks, backward credits, one receive posted per backward call), so XIDs and
//!   credits of the two directions are kept apart.
//! - Version Two: a requester with [`Config::max_version`] 2 sends its first call in Version
//!   Two within 1024 octets (one credit); a Version Two reply confirms it and the thresholds
//!   become the Version Two ones (4096 both ways: the draft's senders assume 4096 without a
//!   Version Two discovery mechanism, RFC 8797 sizes describe Version One) without dropping the
//!   connection; ERR_VERS makes it send the same call again in Version One and stay there
//!   ([`Connection::remembered_version`] tells the layer above for the next connection). Calls
//!   carry `rdma_inv_handle` (one of their window handles when remote invalidation is on, else
//!   0); a responder answers each call in its version, Send-With-Invalidates exactly that
//!   handle, answers RDMA2_ERR_CANT_REPLY when the reply resources are too small (the requester
//!   retries once with the fallback of [`Connection::start_call_with`]), and RDMA2_OPTIONAL
//!   messages go to the handlers of [`Connection::register_optional`].
//! - Private data (RFC 8797): [`Connection::private_data_opt`] gives this side's message for
//!   the connect request or the accept, [`CmInput::Established`] takes the peer's; each
//!   direction's inline threshold is min(sender's advertised send size, receiver's advertised
//!   receive size), so both ends compute the same values.
//!
//! Recovery: malformed headers are answered as the codec's [`HeaderError::response`] says
//! (ERR_VERS with the range 1..=`max_version`, ERR_CHUNK, or a silent drop; in Version Two
//! RDMA2_ERR_BAD_XDR, RDMA2_ERR_INVAL_PROC, RDMA2_ERR_INVAL_OPTION); a reply the requester cannot
//! parse fails its call ([`CallError::BadReply`]). A message whose direction cannot be told is
//! dropped without using any of its fields (its credit value included), RDMA_DONE among them,
//! and so is a backward message while the backchannel is not enabled. Backward calls pending when the connection is
//! lost fail with [`CallError::ConnectionLost`] (with their XIDs) so the server's upper layer can
//! re-issue them on the connection the client establishes next. Any unsuccessful completion means the queue
//! pair is in the error state: the connection moves to [`ConnState::Closed`], reports
//! [`Event::ConnectionLost`] and fails every pending call with [`CallError::ConnectionLost`]
//! (the environment then tears the QP down, which also ends its memory windows). A call that
//! outlives [`Config::call_timeout_ns`] is failed with [`CallError::TimedOut`] after its STags
//! are invalidated; its credit stays in use until a reply with an unknown XID arrives.
//!
//! [`HeaderError::response`]: crate::proto::v1::HeaderError::response
//! [`WrId`]: crate::verbs::WrId

mod backchannel;
mod config;
mod connection;
mod core_state;
pub mod credits;
mod fixed_capacity;
mod receive;
mod requester;
mod responder;
pub mod srq;
mod stream;
mod types;

pub use config::*;
pub use connection::Connection;
pub use types::*;

pub(crate) use core_state::Core;
