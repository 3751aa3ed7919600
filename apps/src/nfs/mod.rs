//! The NFS appliance (`rpcrdma-nfsd`) and the NFS clients of the checking tools, on the
//! engine's public [`Server`](rpcrdma_poller::Server) API. The engine stays protocol-agnostic;
//! everything NFS lives here, both protocol versions beside each other over one set of stores.
//!
//! - [`store`]: the [`Store`](store::Store) trait both versions serve, its backends
//!   ([`store::memory`], [`store::dir`]) and their conformance suite; [`types`] are its values.
//! - [`exports`], [`admit`], [`identity`], [`handle_mac`]: which client may use which export,
//!   who a call acts as (AUTH_SYS squash rules), and the sealed file handles; the same rules
//!   for every version.
//! - [`drc`]: the NFSv3 duplicate request cache.
//! - [`nlm`]: the Network Lock Manager (NLM version 4 over TCP): NFSv3 clients' locks;
//!   [`cross_locks`] makes them and NFSv4.1's conflict.
//! - [`rpc_tcp`]: the RFC 5531 record-marking TCP server and client that [`mount`] (MOUNT v3)
//!   and [`rpcbind`] (registration with the local portmapper) use.
//! - [`v3`]: NFSv3 (RFC 1813): wire codec, procedure handlers, counters, and a client.
//! - [`v4`]: the NFSv4 COMPOUND codec (RFC 7530, RFC 8881) and the NFSv4.1 callback program
//!   served by a client on its RFC 8167 backchannel.
//! - [`daemon`]: `rpcrdma-nfsd` put together: stores, exports, the RDMA server, MOUNT,
//!   rpcbind, counters.
//!
//! Normal operation: the kernel's NFS client mounts an export through MOUNT over TCP, then
//! sends NFS calls over RPC-over-RDMA; each call is admitted against the export table, served
//! against the export's store and counted. Recovery: each version answers bad input with the
//! errors its RFC names (see the modules); nothing here panics on wire input.

pub mod acl;
pub mod admit;
pub mod cross_locks;
pub mod daemon;
pub mod drc;
pub mod exports;
pub mod handle_mac;
pub mod identity;
pub mod mount;
pub mod nlm;
pub mod rpc_tcp;
pub mod rpcbind;
pub mod store;
pub mod types;
pub mod v3;
pub mod v4;
