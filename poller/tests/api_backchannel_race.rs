//! Backward calls (RFC 8167) of a session whose newly bound connection is lost before its
//! reactor turned the backchannel on in the engine: the calls must stay with the session and
//! reach the client on the connection it binds next, not fail with `NotServed` (the upper layer
//! enabled the backchannel; nothing says the client cannot serve the calls).
//!
//! The interleaving is forced, not timed: one reactor runs every connection (client and server
//! sides); a forward handler of another client holds that reactor while the test thread
//! enables and binds the new connection, submits backward calls to the session (and, in the
//! second test, lets a lost connection's parked calls move to it) and drops the connection
//! (`SoftFaults::drop_connection`). When the reactor resumes, the new connection's next round
//! finds the loss, the enable request and the calls at once. Normal operation then: the client
//! reconnects and binds again, and every call completes exactly once with its reply.
//! Recovery checked: the lost connection keeps the calls for its session.

mod api_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::verbs::soft::SoftFaults;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackCallOptions, BackChannel, BackchannelService, CallbackMode, Client, ClientError,
    ClientOptions, Program, Reject, Reply, ReplyBuilder, Request, Server, ServerOptions,
};

/// The program the client serves on its backchannel.
const CB_PROG: u32 = 0x4000_0002;
/// Sum of the u32 arguments.
const CB_SUM: u32 = 1;

/// Forward: (session hi, session lo) — enables the backchannel and binds the connection.
const SESSION: u32 = 20;
/// Forward: keeps the connection's `BackChannel` for the test thread (no enable, no bind).
const STASH: u32 = 21;
/// Forward: holds the (only) reactor at the gate.
const BLOCK: u32 = 22;

fn be32(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// A gate a handler waits at while it is closed.
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    waiting: AtomicU64,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate {
            open: Mutex::new(true),
            cv: Condvar::new(),
            waiting: AtomicU64::new(0),
        })
    }
    fn set(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.cv.notify_all();
    }
    fn pass(&self) {
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

/// The server's program: SESSION, STASH, BLOCK.
fn server_program(stash: Arc<Mutex<Option<BackChannel>>>, gate: Arc<Gate>) -> Program {
    Program::new(PROG, 2..=2)
        .procedure(
            SESSION,
            |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let hi = be32(req.args, 0).ok_or(Reject::GarbageArgs)?;
                let lo = be32(req.args, 4).ok_or(Reject::GarbageArgs)?;
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                bc.enable();
                bc.bind((u64::from(hi) << 32) | u64::from(lo))
                    .map_err(|_| Reject::SystemErr)?;
                out.put_u32(0).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            STASH,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                *stash.lock().unwrap() = Some(bc.clone());
                out.put_u32(0).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            BLOCK,
            move |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                gate.pass();
                out.put_u32(0).map_err(|_| Reject::SystemErr)
            },
        )
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn forward(c: &Client, proc_num: u32, words: &[u32]) -> Result<Reply, ClientError> {
    let mut a = c.args().expect("buffer");
    for &w in words {
        a.put_u32(w).unwrap();
    }
    c.call_blocking(Proc::new(PROG, 2, proc_num), a)
}

fn bind(c: &Client, session: u64) {
    forward(c, SESSION, &[(session >> 32) as u32, session as u32]).expect("bind");
}

/// Everything one test needs: a single reactor, a server in inline mode, a serving client
/// bound to nothing yet, and a plain client whose BLOCK call holds the reactor.
struct Rig {
    w: World,
    server: Server,
    client: Client,
    blocker: Client,
    faults: Arc<Mutex<Vec<SoftFaults>>>,
    stash: Arc<Mutex<Option<BackChannel>>>,
    gate: Arc<Gate>,
}

impl Rig {
    fn new() -> Rig {
        // One reactor: while a handler waits at the gate, no connection is serviced.
        let w = World::with_reactors(1, &reactor_config(1));
        let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
        let f2 = Arc::clone(&faults);
        assert!(w
            .client_ep
            .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
        let stash = Arc::new(Mutex::new(None));
        let gate = Gate::new();
        let server = Server::builder()
            .program(server_program(Arc::clone(&stash), Arc::clone(&gate)))
            .options(ServerOptions {
                credits: 8,
                mode: CallbackMode::Inline,
                backchannel_credits: 4,
                ..ServerOptions::default()
            })
            .start(&w.server_ep, w.addr)
            .expect("server");
        let blocker =
            Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("blocker");
        assert!(blocker.wait_connected(Duration::from_secs(5)));
        let cb = Program::new(CB_PROG, 1..=1).procedure(CB_SUM, sum);
        let client = Client::connect_serving(
            &w.client_ep,
            w.addr,
            ClientOptions::default(),
            BackchannelService::new().program(cb).credits(4),
        )
        .expect("client");
        assert!(client.wait_connected(Duration::from_secs(5)));
        Rig {
            w,
            server,
            client,
            blocker,
            faults,
            stash,
            gate,
        }
    }

    /// The faults of the client's QP made last.
    fn last_faults(&self) -> SoftFaults {
        self.faults.lock().unwrap().last().cloned().expect("a QP")
    }

    /// The server-side handle of the client's current connection (neither enabled nor bound).
    fn stash(&self) -> BackChannel {
        *self.stash.lock().unwrap() = None;
        forward(&self.client, STASH, &[]).expect("stash");
        self.stash.lock().unwrap().clone().expect("stashed")
    }

    /// Runs `f` on the test thread while a forward handler holds the only reactor.
    fn with_reactor_held(&self, f: impl FnOnce()) {
        self.gate.set(false);
        self.blocker
            .call(
                Proc::new(PROG, 2, BLOCK),
                self.blocker.args().expect("buffer"),
                |_| {},
            )
            .expect("block");
        wait_for("the reactor to be held", 10, || {
            self.gate.waiting.load(Ordering::SeqCst) > 0
        });
        f();
        self.gate.set(true);
    }

    /// Sends backward CB_SUM(i, 3) to `session` for every `i` of `range` (no deadline).
    fn back_fire(&self, session: u64, range: std::ops::Range<usize>, tally: &Arc<Tally>) {
        let never = BackCallOptions {
            timeout_ms: Some(0),
            ..BackCallOptions::default()
        };
        for i in range {
            let mut a = self.server.back_args().expect("buffer");
            a.put_u32(i as u32).unwrap();
            a.put_u32(3).unwrap();
            let t = Arc::clone(tally);
            self.server
                .back_call_with(session, Proc::new(CB_PROG, 1, CB_SUM), a, never, move |r| {
                    t.record(i, &r, i as u32 + 3)
                })
                .expect("back_call");
        }
    }

    /// Waits for the client's reconnection after `before` reconnects, binds it to `session`
    /// and waits for the `n` calls of `tally`, each answered exactly once.
    fn rebind_and_check(&self, before: u64, session: u64, tally: &Tally, n: usize) {
        wait_for("the reconnection", 10, || {
            self.client.stats().snapshot().reconnects > before
        });
        assert!(self.client.wait_connected(Duration::from_secs(10)));
        // Early failures show before the rebind.
        assert_eq!(
            tally.errors.lock().unwrap().as_slice(),
            &[] as &[ClientError],
            "backward calls failed while the session was between connections"
        );
        bind(&self.client, session);
        tally.wait(n as u64, 20, "backward");
        tally.all_ok_exactly_once(n, "backward");
    }
}

/// Calls submitted to a session right after its bind moved it to a new connection, which is
/// lost before its reactor ran once: they are kept for the session (the upper layer enabled
/// the connection, so `NotServed` would be a lie) and answered after the client binds again.
/// RFC 8167 §6 (draft text: draft-ietf-nfsv4-rpcrdma-bidirection, "An NFSv4.1
/// server does not send backchannel messages to an NFSv4.1 client before the NFSv4.1 client
/// has sent a CREATE_SESSION or a BIND_CONN_TO_SESSION operation"): once it has, the calls
/// are the session's, whatever happens to one connection.
#[test]
fn accepts_session_calls_when_the_new_connection_drops_before_its_first_round() {
    let rig = Rig::new();
    let session = 0x5e55_0001;
    let n = 3;
    let tally = Tally::new(n);
    let bc = rig.stash();
    let f = rig.last_faults();
    let reconnects = rig.client.stats().snapshot().reconnects;
    let losses = rig.server.totals().connection_losses;
    rig.with_reactor_held(|| {
        bc.enable();
        bc.bind(session).expect("bind");
        rig.back_fire(session, 0..n, &tally);
        f.drop_connection();
    });
    wait_for("the server to lose the connection", 10, || {
        rig.server.totals().connection_losses > losses
    });
    rig.rebind_and_check(reconnects, session, &tally, n);
    let t = rig.server.totals();
    assert_eq!(t.back_errors, 0, "{t:?}");
    rig.w.stop();
}

/// The soak's case: calls parked by a lost connection move to the connection bound next,
/// which is lost before its reactor ran once. They stay with the session and are answered on
/// the connection bound after it, with their XIDs. (The old connection's reactor slot comes
/// before the new one's, so it hands the calls over in the round before the new connection
/// handles its loss: the soak's order.)
#[test]
fn accepts_parked_calls_moved_to_a_connection_that_drops_before_its_first_round() {
    let rig = Rig::new();
    let session = 0x5e55_0002;
    let n = 3;
    let tally = Tally::new(n);
    // First connection: bound, then lost; the calls park there.
    bind(&rig.client, session);
    let reconnects = rig.client.stats().snapshot().reconnects;
    let losses = rig.server.totals().connection_losses;
    rig.last_faults().drop_connection();
    wait_for("the server to lose the connection", 10, || {
        rig.server.totals().connection_losses > losses
    });
    rig.back_fire(session, 0..n, &tally);
    wait_for("the reconnection", 10, || {
        rig.client.stats().snapshot().reconnects > reconnects
    });
    assert!(rig.client.wait_connected(Duration::from_secs(10)));
    // Second connection: bound (the parked calls move to it) and lost in one reactor pause.
    let bc = rig.stash();
    let f = rig.last_faults();
    let reconnects = rig.client.stats().snapshot().reconnects;
    let losses = rig.server.totals().connection_losses;
    rig.with_reactor_held(|| {
        bc.enable();
        bc.bind(session).expect("bind");
        f.drop_connection();
    });
    wait_for("the server to lose the connection", 10, || {
        rig.server.totals().connection_losses > losses
    });
    // Third connection: the calls are answered.
    rig.rebind_and_check(reconnects, session, &tally, n);
    rig.w.stop();
}
