//! rpcrdma applications: the NFS appliance `rpcrdma-nfsd` and the NFS checking tools
//! ([`nfs`]), perftest-compatible verbs benchmarks ([`perf`]), an RPC-over-RDMA sample
//! service ([`rpc_sample`]), pcap export of RDMA traffic as RoCEv2 frames ([`pcap`]), and the
//! command-line and logging plumbing every binary shares ([`cli`], [`logging`]).
//!
//! Normal operation: the binaries (`rpcrdma-nfsd`, `rpcrdma-perf`, `rpcrdma-ping`,
//! `rpcrdma-pcap-sample`, ...) are thin wrappers over these modules, which are also what the
//! integration tests drive. Recovery: every failure is returned as an error value to the
//! binary, which prints it and exits non-zero.
#![warn(missing_docs)]

pub mod cli;
pub mod logging;
pub mod nfs;
pub mod pcap;
pub mod perf;
pub mod rpc_sample;
