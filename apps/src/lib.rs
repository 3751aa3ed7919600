//! rpcrdma applications: perftest-compatible verbs benchmarks ([`perf`]) and pcap export of
//! RDMA traffic as RoCEv2 frames ([`pcap`]).
//!
//! Normal operation: the binaries (`rpcrdma-perf`, `rpcrdma-pcap-sample`) are thin wrappers
//! over these modules, which are also what the integration tests drive. Recovery: every
//! failure is returned as an error value to the binary, which prints it and exits non-zero.
#![warn(missing_docs)]

pub mod cli;
pub mod logging;
pub mod nfs3;
pub mod nfs4;
pub mod nfs4cb;
pub mod pcap;
pub mod perf;
pub mod rpc_sample;
