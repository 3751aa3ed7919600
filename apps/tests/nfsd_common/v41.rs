//! NFSv4.1 helpers of the in-process tests: a COMPOUND sent over an NFS client's RPC client,
//! channel attributes, a session made.

use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, op, ChannelAttrs, CompoundReply, Op, OpResult,
    ReadPlacement,
};
use rpcrdma_poller::Proc;

/// Sends `ops` as one minor-version-1 COMPOUND tagged `tag` and decodes the reply (inline data).
pub fn compound(c: &NfsClient, tag: &str, ops: &[Op<'_>]) -> CompoundReply {
    compound_minor(c, tag, 1, ops)
}

/// [`compound`] in minor version `minor`.
pub fn compound_minor(c: &NfsClient, tag: &str, minor: u32, ops: &[Op<'_>]) -> CompoundReply {
    let e = encode_compound_minor(tag, minor, ops);
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

/// Channel attributes of 1 MiB requests and replies (64 KiB cached), 16 operations, 8 slots.
pub fn channel_attrs_mib() -> ChannelAttrs {
    ChannelAttrs {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 64 << 10,
        ..channel_attrs(8)
    }
}

/// EXCHANGE_ID of `owner` and CREATE_SESSION with `flags` (both channels
/// [`channel_attrs_mib`]) through `send`, which sends a COMPOUND of the minor version it
/// chooses: the session id and the client id.
pub fn session(
    send: impl Fn(&[Op<'_>]) -> CompoundReply,
    owner: &[u8],
    flags: u32,
) -> ([u8; 16], u64) {
    let r = send(&[Op::ExchangeId {
        verifier: [1; 8],
        owner,
        flags: 0,
    }]);
    let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("EXCHANGE_ID: {r:?}");
    };
    let r = send(&[Op::CreateSession {
        clientid: x.clientid,
        sequence: x.sequence,
        flags,
        fore: channel_attrs_mib(),
        back: channel_attrs_mib(),
        cb_program: 0x4000_0000,
    }]);
    let Some(OpResult::CreateSession(cs)) = r.find(op::CREATE_SESSION).map(|o| o.result.clone())
    else {
        panic!("CREATE_SESSION: {r:?}");
    };
    (cs.session, x.clientid)
}
