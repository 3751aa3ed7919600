//! The lock manager's and the status monitor's registrations with the local rpcbind.
//!
//! Normal operation: NLM version 4 over "tcp", and the status monitor (program 100024,
//! version 1) over "udp" and "tcp", each pointing at this server's listeners, so that the
//! Linux client's lockd finds the lock manager and its `sm-notify` the status monitor (no
//! mount option names their ports).
//!
//! Recovery: a program another live process already serves is left to it, with a warning:
//! the kernel's lockd (kernel nfsd or this host's own NFS mounts with locking) keeps NLM, a
//! running `rpc.statd` keeps the status monitor (a client that reboots then tells it, not this
//! server). A registration left by a process that is gone is replaced. Without an rpcbind
//! nothing is registered and the daemon warns.

use std::net::SocketAddr;
use std::time::Duration;

use super::nsm::{SM_PROG, SM_VERS};
use super::proto::{NLM_PROG, NLM_V4};
use super::NlmServer;
use crate::nfs::rpc_tcp::RpcClient;
use crate::nfs::rpcbind::{self, Registration, RpcbEntry};

/// True when rpcbind maps (`prog`, `vers`) to a port other than `ours` where something
/// answers NULL.
fn served_elsewhere(prog: u32, vers: u32, ours: u16) -> Option<String> {
    let u = rpcbind::getaddr(prog, vers, "tcp").ok()??;
    let at = rpcbind::parse_universal_addr(&u)?;
    if at.port() == ours {
        return None;
    }
    let at = SocketAddr::new(rpcbind::local_rpcbind().ip(), at.port());
    let t = Duration::from_secs(1);
    let live = RpcClient::connect(at, t, t)
        .and_then(|mut c| c.call(prog, vers, 0, &[]))
        .is_ok();
    live.then_some(u)
}

/// Registers `n`'s lock manager and status monitor where no other process serves them.
pub fn register(n: &NlmServer) -> Option<Registration> {
    let mut entries = Vec::new();
    let nlm = n.local_addr();
    match served_elsewhere(NLM_PROG, NLM_V4, nlm.port()) {
        Some(other) => tracing::warn!(
            %other,
            "another lock manager (NLM) is registered with rpcbind; NFSv3 clients lock there, \
             not here: mount with nolock, or run in a network namespace of its own"
        ),
        None => entries.push(RpcbEntry {
            prog: NLM_PROG,
            vers: NLM_V4,
            netid: "tcp".into(),
            addr: nlm,
        }),
    }
    if let Some((udp, tcp)) = n.nsm_addrs() {
        match served_elsewhere(SM_PROG, SM_VERS, tcp.port()) {
            Some(other) => tracing::warn!(
                %other,
                "a status monitor (rpc.statd) is registered with rpcbind; NFSv3 clients that \
                 reboot tell it, not this server, and keep their locks here until FREE_ALL"
            ),
            None => {
                for (netid, addr) in [("udp", udp), ("tcp", tcp)] {
                    entries.push(RpcbEntry {
                        prog: SM_PROG,
                        vers: SM_VERS,
                        netid: netid.into(),
                        addr,
                    });
                }
            }
        }
    }
    if entries.is_empty() {
        return None;
    }
    match rpcbind::register(&entries) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %e, "lock manager not registered with rpcbind; mount with nolock");
            None
        }
    }
}
