//! rpcrdma-engine: everything about the wire and the verbs.
//!
//! - [`xdr`]: XDR primitives (borrowing reader, encoder into caller buffers).
//! - [`proto`]: RPC-over-RDMA v1 / v2 transport headers, chunk lists, RFC 8797 private data.
//! - [`rpc`]: the ONC RPC (RFC 5531) message header.
//! - [`verbs`]: the provider boundary shaped like ibverbs + rdma_cm, and its providers.
//! - [`conn`]: the sans-IO RPC-over-RDMA Version One connection (requester and responder).
//! - [`post`]: a connection's work requests posted to a verbs provider (the one translation).
#![warn(missing_docs)]

pub mod conn;
pub mod post;
pub mod proto;
pub mod rpc;
pub mod u32map;
pub mod verbs;
pub mod xdr;
