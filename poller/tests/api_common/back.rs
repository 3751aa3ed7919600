//! The backward-direction (RFC 8167) world of the backchannel API tests: the program the
//! clients serve, the server program whose handlers send backward calls, sessions, and the
//! helpers that fire and wait for calls.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackCallOptions, BackchannelService, CallbackMode, Client, ClientError, Program, Reject, Reply,
    ReplyBuilder, Request, Server, ServerOptions,
};

/// The program clients serve on the backchannel (versions 1..=2).
pub const CB_PROG: u32 = 0x4000_0001;
/// Sum of the u32 arguments (counted, logged, gated).
pub const CB_SUM: u32 = 1;
/// Always GARBAGE_ARGS.
pub const CB_GARBAGE: u32 = 2;

/// Forward: (session hi, session lo, flags) — bit 0: the client serves the backchannel. The
/// handler enables the backchannel when told so and binds the connection to the session.
pub const SESSION: u32 = 20;
/// Forward: (i, v) — sends backward CB_SUM(i, v) with the forward call's XID (not waiting),
/// replies i + v.
pub const BOUNCE: u32 = 21;
/// Forward (worker mode): as BOUNCE, but waits for the backward reply and returns its result.
pub const BOUNCE_WAIT: u32 = 22;
/// Forward: a blocking backward call from an inline handler (must be refused), then one
/// before the backchannel is enabled; replies 1 when the first was refused with WouldBlock.
pub const TRY_BACK: u32 = 23;

pub fn be32(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// A gate handlers pass (or wait at while it is closed).
pub struct Gate {
    pub open: Mutex<bool>,
    pub cv: Condvar,
    pub waiting: AtomicU64,
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            open: Mutex::new(true),
            cv: Condvar::new(),
            waiting: AtomicU64::new(0),
        }
    }
    pub fn set(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.cv.notify_all();
    }
    pub fn pass(&self) {
        let mut g = self.open.lock().unwrap();
        if !*g {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while !*g {
                g = self.cv.wait(g).unwrap();
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// What the clients' backchannel handlers saw.
pub struct ClientLog {
    /// XIDs of the CB_SUM calls run.
    pub xids: Mutex<Vec<u32>>,
    /// CB_SUM calls entered, and the most backward calls seen outstanding at an entry
    /// (entered minus completions reported by the server's callbacks).
    pub entered: AtomicU64,
    pub server_done: AtomicU64,
    pub max_outstanding: AtomicU64,
    pub gate: Gate,
}

impl ClientLog {
    pub fn new() -> Arc<ClientLog> {
        Arc::new(ClientLog {
            xids: Mutex::new(Vec::new()),
            entered: AtomicU64::new(0),
            server_done: AtomicU64::new(0),
            max_outstanding: AtomicU64::new(0),
            gate: Gate::new(),
        })
    }
}

/// The backchannel program of the clients.
pub fn cb_program(log: Arc<ClientLog>) -> Program {
    Program::new(CB_PROG, 1..=2)
        .procedure(
            CB_SUM,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let e = log.entered.fetch_add(1, Ordering::SeqCst) + 1;
                let out_now = e.saturating_sub(log.server_done.load(Ordering::SeqCst));
                log.max_outstanding.fetch_max(out_now, Ordering::SeqCst);
                log.xids.lock().unwrap().push(req.xid);
                log.gate.pass();
                sum(req, out)
            },
        )
        .procedure(CB_GARBAGE, |_: &Request<'_>, _: &mut ReplyBuilder<'_>| {
            Err(Reject::GarbageArgs)
        })
}

pub fn service(log: &Arc<ClientLog>, credits: u32) -> BackchannelService {
    BackchannelService::new()
        .program(cb_program(Arc::clone(log)))
        .credits(credits)
}

/// The server's program: SUM, SESSION, BOUNCE, BOUNCE_WAIT, TRY_BACK. Backward calls BOUNCE
/// sends are recorded in `back` at index `i`; TRY_BACK's second call in `refused`.
pub fn server_program(back: Arc<Tally>, refused: Arc<Mutex<Vec<ClientError>>>) -> Program {
    let b2 = Arc::clone(&back);
    Program::new(PROG, 2..=3)
        .procedure(SUM, sum)
        .procedure(
            SESSION,
            |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let hi = be32(req.args, 0).ok_or(Reject::GarbageArgs)?;
                let lo = be32(req.args, 4).ok_or(Reject::GarbageArgs)?;
                let flags = be32(req.args, 8).ok_or(Reject::GarbageArgs)?;
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                if flags & 1 != 0 {
                    bc.enable();
                }
                bc.bind((u64::from(hi) << 32) | u64::from(lo))
                    .map_err(|_| Reject::SystemErr)?;
                out.put_u32(0).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            BOUNCE,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let i = be32(req.args, 0).ok_or(Reject::GarbageArgs)?;
                let v = be32(req.args, 4).ok_or(Reject::GarbageArgs)?;
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                let mut a = bc.args().ok_or(Reject::SystemErr)?;
                a.put_u32(i).map_err(|_| Reject::SystemErr)?;
                a.put_u32(v).map_err(|_| Reject::SystemErr)?;
                let t = Arc::clone(&back);
                let opts = BackCallOptions {
                    xid: Some(req.xid),
                    ..BackCallOptions::default()
                };
                bc.call_with(Proc::new(CB_PROG, 1, CB_SUM), a, opts, move |r| {
                    t.record(i as usize, &r, i + v)
                })
                .map_err(|_| Reject::SystemErr)?;
                out.put_u32(i + v).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            BOUNCE_WAIT,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let i = be32(req.args, 0).ok_or(Reject::GarbageArgs)?;
                let v = be32(req.args, 4).ok_or(Reject::GarbageArgs)?;
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                let mut a = bc.args().ok_or(Reject::SystemErr)?;
                a.put_u32(i).map_err(|_| Reject::SystemErr)?;
                a.put_u32(v).map_err(|_| Reject::SystemErr)?;
                // The forward call (this XID) is in flight while the backward call with the
                // same XID is.
                let opts = BackCallOptions {
                    xid: Some(req.xid),
                    ..BackCallOptions::default()
                };
                let r = bc.call_blocking_with(Proc::new(CB_PROG, 1, CB_SUM), a, opts);
                b2.record(i as usize, &r, i + v);
                let rep = r.map_err(|_| Reject::SystemErr)?;
                out.put(rep.results()).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            TRY_BACK,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                let a = bc.args().ok_or(Reject::SystemErr)?;
                let would_block = matches!(
                    bc.call_blocking(Proc::new(CB_PROG, 1, 0), a),
                    Err(ClientError::WouldBlock)
                );
                let a = bc.args().ok_or(Reject::SystemErr)?;
                let r2 = Arc::clone(&refused);
                bc.call(Proc::new(CB_PROG, 1, 0), a, move |r| {
                    r2.lock()
                        .unwrap()
                        .push(r.err().unwrap_or(ClientError::Dropped))
                })
                .map_err(|_| Reject::SystemErr)?;
                out.put_u32(u32::from(would_block))
                    .map_err(|_| Reject::SystemErr)
            },
        )
}

pub fn server_opts(mode: CallbackMode, back_credits: u32) -> ServerOptions {
    ServerOptions {
        credits: 8,
        mode,
        backchannel_credits: back_credits,
        ..ServerOptions::default()
    }
}

pub fn bind(c: &Client, session: u64, serves: bool) -> Result<Reply, ClientError> {
    let mut a = c.args().unwrap();
    a.put_u32((session >> 32) as u32).unwrap();
    a.put_u32(session as u32).unwrap();
    a.put_u32(u32::from(serves)).unwrap();
    c.call_blocking(Proc::new(PROG, 2, SESSION), a)
}

pub fn sum_args(
    args: Option<rpcrdma_poller::CallArgs>,
    i: u32,
    v: u32,
) -> rpcrdma_poller::CallArgs {
    let mut a = args.expect("buffer");
    a.put_u32(i).unwrap();
    a.put_u32(v).unwrap();
    a
}

/// Sends backward CB_SUM(i, 3) to `session` for every `i` of `range`, recorded in `tally`.
pub fn back_fire(server: &Server, session: u64, range: std::ops::Range<usize>, tally: &Arc<Tally>) {
    for i in range {
        let mut args = loop {
            match server.back_args() {
                Some(a) => break sum_args(Some(a), i as u32, 3),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        };
        loop {
            let t = Arc::clone(tally);
            match server.back_call(session, Proc::new(CB_PROG, 1, CB_SUM), args, move |r| {
                t.record(i, &r, i as u32 + 3)
            }) {
                Ok(()) => break,
                Err(r) => {
                    assert_eq!(r.error, ClientError::Busy, "back_call refused");
                    args = r.args;
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}

/// Fires forward `proc_of(j)` (i, 5) calls, `per` per client; call `i` is recorded at `i`.
pub fn forward_fire(
    clients: &[Client],
    per: usize,
    tally: &Arc<Tally>,
    proc_of: impl Fn(usize) -> u32,
) {
    for (k, c) in clients.iter().enumerate() {
        for j in 0..per {
            let i = k * per + j;
            let mut args = loop {
                match c.args() {
                    Some(a) => break sum_args(Some(a), i as u32, 5),
                    None => std::thread::sleep(Duration::from_micros(100)),
                }
            };
            loop {
                let t = Arc::clone(tally);
                match c.call(Proc::new(PROG, 2, proc_of(j)), args, move |r| {
                    t.record(i, &r, i as u32 + 5)
                }) {
                    Ok(()) => break,
                    Err(r) => {
                        assert_eq!(r.error, ClientError::Busy);
                        args = r.args;
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
    }
}

/// Clients of `ep` that serve the backchannel program (their calls seen in `log`), each
/// connected to `addr` and bound to session `first_session + k` with SESSION.
pub fn bound_clients<P: rpcrdma_engine::verbs::Provider>(
    ep: &rpcrdma_poller::Endpoint<P>,
    addr: std::net::SocketAddr,
    opts: rpcrdma_poller::ClientOptions,
    log: &Arc<ClientLog>,
    n: usize,
    first_session: u64,
) -> Vec<Client> {
    let clients: Vec<Client> = (0..n)
        .map(|_| Client::connect_serving(ep, addr, opts, service(log, 3)).expect("client"))
        .collect();
    for (k, c) in clients.iter().enumerate() {
        assert!(c.wait_connected(Duration::from_secs(10)), "connect");
        bind(c, first_session + k as u64, true).expect("bind");
    }
    clients
}

/// The forward procedure of call `j`: BOUNCE, and in worker mode BOUNCE_WAIT for every other
/// call (a handler waiting for its backward call's reply).
pub fn bounce_proc(mode: CallbackMode) -> impl Fn(usize) -> u32 {
    move |j| {
        if mode == CallbackMode::Worker && j % 2 == 1 {
            BOUNCE_WAIT
        } else {
            BOUNCE
        }
    }
}

/// The clients' side of forward calls that sent backward calls with their XIDs: every one of
/// the `nfwd` forward calls answered once with its sum, and every forward XID also the XID
/// of a backward call the clients ran.
pub fn check_forward_xids_used_backward(fwd: &Tally, log: &ClientLog, nfwd: usize) {
    fwd.all_ok_exactly_once(nfwd, "forward");
    let seen: std::collections::HashSet<u32> = log.xids.lock().unwrap().iter().copied().collect();
    let fwd_xids = fwd.xids.lock().unwrap();
    assert_eq!(fwd_xids.len(), nfwd);
    let missing = fwd_xids.iter().filter(|x| !seen.contains(x)).count();
    assert_eq!(missing, 0, "{missing} forward XIDs never used backward");
}

/// The server's counters after `nback` backward calls: each sent once and answered once, none
/// failed or sent again.
pub fn check_back_totals(server: &Server, nback: u64) {
    let t = server.totals();
    assert_eq!(t.back_calls, nback, "{t:?}");
    assert_eq!(t.back_replies, nback, "{t:?}");
    assert_eq!(t.back_errors, 0, "{t:?}");
    assert_eq!(t.back_retransmits, 0, "{t:?}");
}

pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
