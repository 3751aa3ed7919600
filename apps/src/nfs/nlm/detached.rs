//! One NLM call served outside any connection over the NFSv3 fuzz fixture's exports
//! ([`crate::nfs::v3::harness::Harness`]): how the `nlm` fuzz target and its seed test call
//! the service.
//!
//! Normal operation: [`call`] builds the call's context (a client at 10.0.0.1; AUTH_SYS root,
//! AUTH_SYS uid 1000 or AUTH_NONE), replaces the handle markers in the arguments and serves
//! the call on a fresh [`super::service()`] without a grant thread. Recovery: none needed; the
//! service's refusal comes back as its accept status.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthFlavor, AuthSysParams, OpaqueAuth};

use super::{proto, NlmConfig};
use crate::nfs::rpc_tcp::{CallCtx, CredCopy, Handled, XdrBuf};
use crate::nfs::v3::harness::Harness;

/// Serves procedure `first & 0x1f` modulo 24 as AUTH_SYS root, uid 1000 (gid 1000) or
/// AUTH_NONE (`(first >> 5) % 3`) with arguments `args` (handle markers replaced): the
/// procedure number, how the service answered and the results.
pub fn call(h: &Harness, first: u8, args: &[u8]) -> (u32, Handled, Vec<u8>) {
    let table = h.exports();
    let svc = super::service(Arc::new(move || Arc::clone(&table)), NlmConfig::default());
    let args = h.with_handles(args);
    let proc_num = u32::from(first & 0x1f) % 24;
    let mut body = [0u8; 64];
    let (uid, flavor) = match (first >> 5) % 3 {
        0 => (0, AuthFlavor::Sys),
        1 => (1000, AuthFlavor::Sys),
        _ => (0, AuthFlavor::None),
    };
    let params = AuthSysParams {
        stamp: 0,
        machinename: b"client",
        uid,
        gid: uid,
        gids: &[],
    };
    let cred = match (flavor, params.encode_into(&mut body)) {
        (AuthFlavor::Sys, Ok(n)) => OpaqueAuth {
            flavor,
            body: &body[..n],
        },
        _ => OpaqueAuth::NONE,
    };
    let ctx = CallCtx {
        peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 700),
        vers: proto::NLM_V4,
        flavor: cred.flavor,
        unix: (cred.flavor == AuthFlavor::Sys).then_some((uid, uid)),
        cred: CredCopy::of(&cred),
    };
    let mut out = XdrBuf::new();
    let st = svc.call(&ctx, proc_num, &args, &mut out);
    (proc_num, st, out.0)
}
