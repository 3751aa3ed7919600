//! NLMPROC4_GRANTED calls: telling a client that a lock it waited for is now its own.
//!
//! Normal operation: the lock table gives a blocked request its lock and reports a
//! [`Grant`]; one dispatcher thread queues it and starts a short-lived thread per call, at
//! most one per client host and [`MAX_IN_FLIGHT`] in all, so a client that answers slowly
//! delays no other client's grants. A call asks the client's rpcbind (port 111 at the address
//! the request came from) where its NLM version 4 listens over TCP, then calls GRANTED with
//! the request as the client sent it (cookie, `caller_name`, handle, owner, range), which is
//! how the Linux client's lockd finds the process waiting (`nlmclnt_grant`).
//!
//! Recovery: no answer (rpcbind or lockd unreachable, a timeout) or NLM4_DENIED_GRACE_PERIOD
//! is tried again after [`RETRY_AFTER`], at most [`MAX_ATTEMPTS`] times; meanwhile the lock
//! stays with the client, whose lockd also asks again on its own (the Linux client repeats a
//! blocked request every 30 s and is then answered NLM4_GRANTED). Any other answer means the
//! client no longer wants the lock (its CANCEL was lost): the lock is released, as Linux
//! lockd's `nlmsvc_grant_reply` releases it, and whatever that frees is granted in turn.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::locks::{Grant, Want};
use super::proto::{self, Lock, Stat, TestArgs};
use super::service::{NlmStats, Shared};
use crate::nfs::rpc_tcp::{lock, RpcClient};
use crate::nfs::rpcbind;

/// GRANTED calls in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// Wait before a GRANTED call that got no answer is made again.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);
/// GRANTED calls made for one grant before the server stops calling (the lock stays).
pub const MAX_ATTEMPTS: u32 = 30;
/// Connection and reply timeouts of one GRANTED call (and of its rpcbind question).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

enum Msg {
    Grants(Vec<Grant>),
    Done(Grant, u32, Outcome),
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Accepted,
    Refused,
    Retry,
}

/// The dispatcher thread; stops when dropped.
pub(super) struct Granter {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Granter {
    /// Starts the dispatcher; `rpcbind_port` is where clients' rpcbind listens (111).
    pub(super) fn start(shared: Arc<Shared>, rpcbind_port: u16) -> std::io::Result<Granter> {
        let (tx, rx) = mpsc::channel();
        let me = tx.clone();
        let thread = std::thread::Builder::new()
            .name("nlm-granted".into())
            .spawn(move || dispatch(shared, rx, me, rpcbind_port))?;
        Ok(Granter {
            tx,
            thread: Some(thread),
        })
    }

    /// A sender the service hands its grants to.
    pub(super) fn sink(&self) -> Box<dyn Fn(Vec<Grant>) + Send + Sync> {
        let tx = std::sync::Mutex::new(self.tx.clone());
        Box::new(move |g| {
            let _ = lock(&tx).send(Msg::Grants(g));
        })
    }
}

impl Drop for Granter {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Pending {
    grant: Grant,
    attempts: u32,
    due: Instant,
}

fn dispatch(shared: Arc<Shared>, rx: Receiver<Msg>, me: Sender<Msg>, port: u16) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut busy: HashSet<IpAddr> = HashSet::new();
    loop {
        let now = Instant::now();
        let wait = queue
            .iter()
            .filter(|p| !busy.contains(&p.grant.host.addr))
            .map(|p| p.due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        let msg = match rx.recv_timeout(wait) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        match msg {
            Some(Msg::Stop) => return,
            Some(Msg::Grants(gs)) => queue.extend(gs.into_iter().map(|grant| Pending {
                grant,
                attempts: 0,
                due: Instant::now(),
            })),
            Some(Msg::Done(grant, attempts, outcome)) => {
                busy.remove(&grant.host.addr);
                settle(&shared, &mut queue, grant, attempts, outcome);
            }
            None => {}
        }
        start_due(&mut queue, &mut busy, &me, port);
    }
}

/// Acts on the answer to one GRANTED call.
fn settle(
    shared: &Shared,
    queue: &mut VecDeque<Pending>,
    grant: Grant,
    attempts: u32,
    outcome: Outcome,
) {
    let s = &shared.stats;
    match outcome {
        Outcome::Accepted => NlmStats::bump(&s.grants_sent),
        Outcome::Retry => {
            NlmStats::bump(&s.grants_failed);
            if attempts < MAX_ATTEMPTS {
                queue.push_back(Pending {
                    grant,
                    attempts,
                    due: Instant::now() + RETRY_AFTER,
                });
            }
        }
        Outcome::Refused => {
            NlmStats::bump(&s.grants_refused);
            let a = &grant.args;
            let Ok(w) = Want::of(a.svid, a.offset, a.len, a.exclusive) else {
                return;
            };
            let mut more = Vec::new();
            shared
                .deciding()
                .1
                .unlock(&grant.host, &grant.file, &w, &mut more);
            queue.extend(more.into_iter().map(|grant| Pending {
                grant,
                attempts: 0,
                due: Instant::now(),
            }));
        }
    }
}

/// Starts a call for every due grant whose host has none in flight, within the bound.
fn start_due(
    queue: &mut VecDeque<Pending>,
    busy: &mut HashSet<IpAddr>,
    me: &Sender<Msg>,
    port: u16,
) {
    let now = Instant::now();
    let mut i = 0;
    while i < queue.len() && busy.len() < MAX_IN_FLIGHT {
        let p = &queue[i];
        if p.due > now || busy.contains(&p.grant.host.addr) {
            i += 1;
            continue;
        }
        let Some(p) = queue.remove(i) else { break };
        busy.insert(p.grant.host.addr);
        let tx = me.clone();
        let attempts = p.attempts + 1;
        let spawned = std::thread::Builder::new()
            .name("nlm-granted-call".into())
            .spawn(move || {
                let outcome = call_granted(&p.grant, port);
                let _ = tx.send(Msg::Done(p.grant, attempts, outcome));
            });
        if spawned.is_err() {
            // No thread now: the next message or timeout tries again.
            break;
        }
    }
}

/// One GRANTED call to the client of `g`.
fn call_granted(g: &Grant, rpcbind_port: u16) -> Outcome {
    let rpcb = SocketAddr::new(g.host.addr, rpcbind_port);
    let at = match rpcbind::getaddr_at(rpcb, proto::NLM_PROG, proto::NLM_V4, "tcp") {
        Ok(Some(u)) => match rpcbind::parse_universal_addr(&u) {
            // The client may register a wildcard address: call the one it called from.
            Some(a) => SocketAddr::new(g.host.addr, a.port()),
            None => return Outcome::Retry,
        },
        _ => return Outcome::Retry,
    };
    let a = &g.args;
    let args = proto::encode_test(&TestArgs {
        cookie: &a.cookie,
        exclusive: a.exclusive,
        lock: Lock {
            caller: &a.caller,
            fh: &a.fh,
            oh: &a.oh,
            svid: a.svid,
            offset: a.offset,
            len: a.len,
        },
    });
    let Ok(mut c) = RpcClient::connect(at, CALL_TIMEOUT, CALL_TIMEOUT) else {
        return Outcome::Retry;
    };
    match c.call(proto::NLM_PROG, proto::NLM_V4, proto::GRANTED, &args) {
        Ok(res) => match proto::decode_res(&res) {
            Ok((_, Stat::GRANTED)) => Outcome::Accepted,
            Ok((_, Stat::DENIED_GRACE_PERIOD)) | Err(_) => Outcome::Retry,
            Ok(_) => Outcome::Refused,
        },
        Err(_) => Outcome::Retry,
    }
}
