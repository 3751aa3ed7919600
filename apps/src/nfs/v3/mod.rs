//! An NFSv3 server (RFC 1813) on the engine's public [`Server`](rpcrdma_poller::Server) API:
//! what `rpcrdma-nfsd` runs for NFS version 3.
//!
//! Normal operation: the kernel's NFS client mounts the export through MOUNT v3 over TCP
//! ([`mount`](crate::nfs::mount)), then sends NFSv3 calls over RPC-over-RDMA. Each call is decoded once
//! ([`proto`]), served against a [`Store`](crate::nfs::store::Store) (the in-memory store or a real directory) by
//! [`server`], answered from the duplicate request cache ([`drc`](crate::nfs::drc)) when it is a retransmission
//! of a non-idempotent call, and counted ([`stats`]).
//!
//! Recovery: bad arguments are GARBAGE_ARGS, unknown procedures PROC_UNAVAIL, other versions
//! PROG_MISMATCH (the poller's dispatch); everything a store refuses is the NFS3ERR_* RFC 1813
//! names. A client that loses its connection reconnects and retransmits; the duplicate request
//! cache answers what already ran.

pub mod cachecheck;
pub mod client;
mod deleg;
pub mod harness;
pub mod nfsacl;
mod ops;
pub mod proto;
pub mod server;
pub mod stats;
