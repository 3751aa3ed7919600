//! The status monitor's part in NLM (NSM, program 100024 version 1; X/Open XNFS): a client
//! that reboots sends SM_NOTIFY to the server's status monitor, which makes the server drop
//! the locks that client held; a server that restarts sends SM_NOTIFY to the clients that held
//! locks, which then reclaim them in its grace period.
//!
//! Normal operation: [`NsmService`] answers SM_NULL and SM_NOTIFY over UDP ([`UdpServer`]:
//! the Linux client's `sm-notify` sends datagrams) and TCP. SM_NOTIFY of `mon_name` from
//! address A frees every lock, waiting request and share of the hosts at A named `mon_name`
//! (or of every host at A when `mon_name` is A itself, written out), and grants what that
//! frees. [`notify`] tells the hosts of the run before a restart: each one's rpcbind is asked
//! where its status monitor listens over TCP, and SM_NOTIFY is sent there with this server's
//! name and its new state number (odd, larger than the last one,
//! [`super::records::next_state`]); a host that does not answer is tried again, five times in
//! all over about half a minute.
//!
//! Recovery: a notification names only hosts at the address it comes from, so a peer cannot
//! free another address's locks (short of forging its source address, which UDP does not
//! prevent, as for Linux's `rpc.statd`); arguments that do not decode are GARBAGE_ARGS, other
//! procedures (SM_STAT, SM_MON, SM_UNMON: the host's own monitor's business) PROC_UNAVAIL;
//! a datagram that is not a call is dropped.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::XdrReader;

use super::locks::{Grant, HostKey};
use super::service::Shared;
use crate::nfs::rpc_tcp::{handle_record, Answer, CallCtx, Handled, RpcClient, RpcService, XdrBuf};
use crate::nfs::rpcbind;

/// The status monitor's program number.
pub const SM_PROG: u32 = 100_024;
/// Its version.
pub const SM_VERS: u32 = 1;
/// SM_NULL.
pub const SM_NULL: u32 = 0;
/// SM_NOTIFY.
pub const SM_NOTIFY: u32 = 6;
/// Bound of `mon_name` (`SM_MAXSTRLEN`).
pub const SM_MAXSTRLEN: u32 = 1024;

/// Decodes `stat_chge` (SM_NOTIFY's arguments): the name and the new state.
pub fn decode_notify(b: &[u8]) -> Option<(&[u8], u32)> {
    let mut r = XdrReader::new(b);
    let name = r.get_opaque(SM_MAXSTRLEN).ok()?;
    let state = r.get_u32().ok()?;
    (r.remaining() == 0).then_some((name, state))
}

/// Encodes `stat_chge`.
pub fn encode_notify(name: &[u8], state: u32) -> Vec<u8> {
    let mut b = XdrBuf::new();
    b.put_opaque(name);
    b.put_u32(state);
    b.0
}

/// The status monitor's SM_NULL and SM_NOTIFY, for the locks of one NLM server.
pub struct NsmService {
    shared: Arc<Shared>,
    grants: Box<dyn Fn(Vec<Grant>) + Send + Sync>,
}

impl NsmService {
    pub(super) fn new(
        shared: Arc<Shared>,
        grants: Box<dyn Fn(Vec<Grant>) + Send + Sync>,
    ) -> NsmService {
        NsmService { shared, grants }
    }
}

impl RpcService for NsmService {
    fn program(&self) -> u32 {
        SM_PROG
    }

    fn versions(&self) -> (u32, u32) {
        (SM_VERS, SM_VERS)
    }

    fn call(&self, ctx: &CallCtx, proc_num: u32, args: &[u8], _: &mut XdrBuf) -> Handled {
        let st = match proc_num {
            SM_NULL => AcceptStat::Success,
            SM_NOTIFY => {
                let Some((name, _)) = decode_notify(args) else {
                    return AcceptStat::GarbageArgs.into();
                };
                let addr = ctx.peer.ip();
                let mut grants = Vec::new();
                let freed = {
                    let (_order, mut t) = self.shared.deciding();
                    t.free_peer(addr, name, &mut grants)
                };
                if freed > 0 {
                    tracing::info!(client = %addr, hosts = freed, "a client rebooted: its locks released");
                }
                if !grants.is_empty() {
                    (self.grants)(grants);
                }
                AcceptStat::Success
            }
            _ => AcceptStat::ProcUnavail,
        };
        st.into()
    }
}

/// One RPC service over UDP: each datagram one call, answered with one datagram.
pub struct UdpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UdpServer {
    /// Binds `bind` and serves `service` on a thread of its own.
    pub fn start(bind: SocketAddr, service: Arc<dyn RpcService>) -> io::Result<UdpServer> {
        let sock = UdpSocket::bind(bind)?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let addr = sock.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nsm-udp".into())
            .spawn(move || {
                let mut buf = vec![0u8; 8192];
                // Relaxed: a stop flag polled between datagrams; `stop` joins the thread.
                while !flag.load(Ordering::Relaxed) {
                    let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Answer::Reply(reply) = handle_record(&*service, peer, &buf[..n]) {
                        let _ = sock.send_to(&reply, peer);
                    }
                }
            })?;
        Ok(UdpServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        // Relaxed: see the loop; the join waits for the thread.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Attempts per host, and the wait before the first retry (doubled each time).
const ATTEMPTS: u32 = 5;
const FIRST_RETRY: Duration = Duration::from_secs(2);
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Sends SM_NOTIFY (`mon_name`, `state`) to the status monitor of each of `hosts` (found
/// through its rpcbind at `rpcbind_port`), on a thread of its own; returns at once.
pub fn notify(hosts: Vec<HostKey>, mon_name: String, state: u32, rpcbind_port: u16) {
    let run = move || {
        let mut pending = hosts;
        pending.dedup_by(|a, b| a.addr == b.addr);
        let mut wait = FIRST_RETRY;
        for attempt in 0..ATTEMPTS {
            pending.retain(|h| !notify_one(h, &mon_name, state, rpcbind_port));
            if pending.is_empty() {
                return;
            }
            if attempt + 1 < ATTEMPTS {
                std::thread::sleep(wait);
                wait *= 2;
            }
        }
        for h in &pending {
            tracing::warn!(client = %h.addr, "SM_NOTIFY not answered: the client was not told of the restart");
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("nsm-notify".into())
        .spawn(run)
    {
        tracing::warn!(error = %e, "no thread to send SM_NOTIFY: the clients were not told of the restart");
    }
}

/// One SM_NOTIFY to the status monitor of `h`'s address; true when it answered.
fn notify_one(h: &HostKey, mon_name: &str, state: u32, rpcbind_port: u16) -> bool {
    let rpcb = SocketAddr::new(h.addr, rpcbind_port);
    let Ok(Some(u)) = rpcbind::getaddr_at(rpcb, SM_PROG, SM_VERS, "tcp") else {
        return false;
    };
    let Some(at) = rpcbind::parse_universal_addr(&u) else {
        return false;
    };
    let at = SocketAddr::new(h.addr, at.port());
    let args = encode_notify(mon_name.as_bytes(), state);
    let sent = RpcClient::connect(at, CALL_TIMEOUT, CALL_TIMEOUT)
        .and_then(|mut c| c.call(SM_PROG, SM_VERS, SM_NOTIFY, &args));
    if sent.is_ok() {
        tracing::info!(client = %h.addr, state, "SM_NOTIFY sent: the client reclaims its locks");
    }
    sent.is_ok()
}
