//! NFSv4.1 helpers of the in-process tests: a COMPOUND sent over an NFS client's RPC client,
//! and channel attributes.

use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, ChannelAttrs, CompoundReply, Op, ReadPlacement,
};
use rpcrdma_poller::Proc;

/// Sends `ops` as one minor-version-1 COMPOUND tagged `tag` and decodes the reply (inline data).
pub fn compound(c: &NfsClient, tag: &str, ops: &[Op<'_>]) -> CompoundReply {
    let e = encode_compound_minor(tag, 1, ops);
    let rpc = c.rpc();
    let mut a = rpc.args().expect("a call buffer");
    a.put(&e.bytes).expect("fits");
    let r = rpc
        .call_blocking(Proc::new(100_003, 4, 1), a)
        .expect("COMPOUND answered");
    decode_compound(r.results(), ops, ReadPlacement::Inline).expect("reply decodes")
}

/// Channel attributes of 16 KiB requests and replies (8 KiB cached), 16 operations, `slots`
/// slots.
pub fn channel_attrs(slots: u32) -> ChannelAttrs {
    ChannelAttrs {
        header_pad: 0,
        max_request: 16 << 10,
        max_response: 16 << 10,
        max_response_cached: 8 << 10,
        max_ops: 16,
        max_requests: slots,
        rdma_ird: None,
    }
}
