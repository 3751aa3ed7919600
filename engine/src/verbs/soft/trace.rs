//! Packet-trace hook of the soft fabric: one small borrowed event per wire operation, enough for
//! an application to synthesise RoCEv2 frames (addresses, QP numbers, PSN, opcode, RETH/IETH
//! fields, payload) and write a pcap.
//!
//! The hook runs on the thread executing the operation, inside the soft NIC: it must be quick
//! and must not call back into verbs (that could deadlock on the QP's send-queue lock).

use std::net::SocketAddr;

use crate::verbs::WcStatus;

/// The wire operation of a [`TraceEvent`] (RC opcodes, messages not split into MTU packets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceOp {
    /// SEND (BTH opcode RC SEND ONLY and friends).
    Send,
    /// SEND with invalidate (IETH carries `inv_rkey`).
    SendWithInv,
    /// RDMA WRITE (RETH: `remote_addr`, `rkey`, `len`).
    RdmaWrite,
    /// RDMA READ request (RETH; no payload).
    RdmaReadRequest,
    /// RDMA READ response (payload flows from the responder back to the requester: `src` is
    /// the responder).
    RdmaReadResponse,
}

/// One traced operation.
#[derive(Debug, Clone, Copy)]
pub struct TraceEvent<'a> {
    /// Operation.
    pub op: TraceOp,
    /// Sender's address (IP + port of the connection).
    pub src: SocketAddr,
    /// Receiver's address.
    pub dst: SocketAddr,
    /// Sender's QP number.
    pub src_qpn: u32,
    /// Receiver's QP number (BTH destination QP).
    pub dst_qpn: u32,
    /// Packet sequence number of the (first packet of the) message.
    pub psn: u32,
    /// RETH virtual address (RDMA ops).
    pub remote_addr: u64,
    /// RETH rkey (RDMA ops).
    pub rkey: u32,
    /// Message length.
    pub len: u32,
    /// IETH rkey (Send With Invalidate).
    pub inv_rkey: u32,
    /// Payload, in gather order (SEND, RDMA WRITE, READ response); empty otherwise.
    pub payload: &'a [&'a [u8]],
    /// Outcome of the operation at the requester.
    pub status: WcStatus,
}

/// The hook type: any `Fn(&TraceEvent)` that is `Send + Sync`.
pub type TraceHook = Box<dyn Fn(&TraceEvent<'_>) + Send + Sync + 'static>;
