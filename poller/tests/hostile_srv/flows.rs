//! Flows shared by the hostile-server tests of Version Two, the backchannel and RFC 8797 sizes
//! (`hostile_client_v2.rs`): numbered calls with an expected result, inline answers in the
//! call's version, outcome checks, a connected client with its first call answered, the check
//! that the server sees exactly the granted credits outstanding, and a client backchannel
//! program (CB_SUM / CB_PAIR) with a gate its handlers wait at.
//!
//! Normal operation: the test thread pumps the raw connection; every wait has the toolkit's
//! 10 s deadline. Recovery: none here — a failed expectation panics the test.
#![allow(dead_code)]

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use super::*;
use crate::api_common::Tally;
use rpcrdma_engine::conn::{BadReply, CallError};
use rpcrdma_engine::verbs::WcStatus;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackchannelService, Client, ClientError, ClientOptions, Program, ProtocolVersion, Reject,
    Reply, ReplyBuilder, Request,
};

pub const CB_PROG: u32 = 0x4000_0001;
/// Backward SUM of the u32 arguments.
pub const CB_SUM: u32 = 1;
/// Backward PAIR: exactly two words (a, b), returns a + b; GARBAGE_ARGS otherwise.
pub const CB_PAIR: u32 = 2;
pub const RDMA_MSG: u32 = 0;
pub const RDMA_ERROR: u32 = 4;
pub const ERR_CHUNK: u32 = 2;

pub type Tx = mpsc::Sender<Outcome>;
pub type Rx = mpsc::Receiver<Outcome>;

pub fn v2_opts() -> ClientOptions {
    ClientOptions {
        version: ProtocolVersion::V2,
        ..opts()
    }
}

/// Starts call `i`: one argument word `i`; result word `1000 + i` expected (`hint`: a reply
/// size hint, 0 for none).
pub fn start(c: &Client, i: usize, hint: usize, tally: &Arc<Tally>, tx: &Tx) {
    let mut a = c.args().expect("args");
    a.put_u32(i as u32).unwrap();
    if hint > 0 {
        a.expect_reply(hint);
    }
    let t = Arc::clone(tally);
    let f = to_chan(i, tx);
    let cb = move |r: Result<Reply, ClientError>| {
        t.record(i, &r, 1000 + i as u32);
        f(r)
    };
    if c.call(Proc::new(PROG, 2, 1), a, cb).is_err() {
        panic!("call {i} refused");
    }
}

/// The RPC reply to `call` (result `1000 + i`, `i` its argument), inline, in its version.
pub fn answer(conn: &mut RawConn, call: &Call, credits: u32) {
    let i = word(&call.rpc, 10);
    let rpc = rpc_reply(call.xid, &(1000 + i).to_be_bytes());
    let msg = if call.vers == 2 {
        v2_msg(call.xid, credits, &[], &rpc)
    } else {
        v1_msg(call.xid, credits, &[], &rpc)
    };
    assert_eq!(conn.send(&msg), WcStatus::SUCCESS);
}

/// Call `i` completes with `want` (`None`: success with its result).
pub fn outcome_is(rx: &Rx, i: usize, want: Option<ClientError>) {
    let (j, r) = next_outcome(rx);
    assert_eq!(j, i, "completion order");
    match (want, r) {
        (None, Ok(rep)) => assert_eq!(rep.results(), (1000 + i as u32).to_be_bytes()),
        (Some(e), Err(got)) => assert_eq!(got, e, "call {i}"),
        (w, r) => panic!("call {i}: want {w:?}, got {:?}", r.map(|x| x.xid())),
    }
}

/// Call `i` fails with a `BadReply` transport error.
pub fn bad_reply(rx: &Rx, i: usize) -> BadReply {
    match next_outcome(rx) {
        (j, Err(ClientError::Transport(CallError::BadReply(b)))) if j == i => b,
        (j, r) => panic!("call {j}: want BadReply, got {:?}", r.map(|x| x.xid())),
    }
}

/// A connected client and its raw connection, the first call answered with grant `g` (for a
/// Version Two client: the probe, answered in Version Two).
#[allow(clippy::too_many_arguments)]
pub fn setup(
    w: &HWorld,
    srv: &mut RawServer,
    o: ClientOptions,
    svc: Option<BackchannelService>,
    g: u32,
    tally: &Arc<Tally>,
    tx: &Tx,
    rx: &Rx,
) -> (Client, RawConn) {
    let c = match svc {
        Some(s) => Client::connect_serving(&w.client_ep, srv.addr, o, s).expect("client"),
        None => w.client(srv, o),
    };
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    start(&c, 0, 0, tally, tx);
    let call = conn.recv_call();
    assert_eq!(call.vers, o.version.number(), "first call's version");
    answer(&mut conn, &call, g);
    outcome_is(rx, 0, None);
    (c, conn)
}

/// Credits come only from non-error replies: with the last grant `g`, starting `g + 2` calls
/// (indices from `from`) shows the server exactly `g` outstanding; all then complete.
pub fn grant_is(
    c: &Client,
    conn: &mut RawConn,
    from: usize,
    g: usize,
    t: &Arc<Tally>,
    tx: &Tx,
    rx: &Rx,
) {
    for i in from..from + g + 2 {
        start(c, i, 0, t, tx);
    }
    let held: Vec<Call> = (0..g).map(|_| conn.recv_call()).collect();
    conn.expect_silence(Duration::from_millis(150));
    for call in &held {
        answer(conn, call, g as u32);
    }
    for _ in 0..2 {
        let call = conn.recv_call();
        answer(conn, &call, g as u32);
    }
    let mut got: Vec<usize> = (0..g + 2)
        .map(|_| {
            let (j, r) = next_outcome(rx);
            r.expect("grant check call");
            j
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, (from..from + g + 2).collect::<Vec<_>>());
}

pub fn finish(c: Client, conn: RawConn, w: HWorld, rx: &Rx) {
    no_outcome(rx, Duration::from_millis(30));
    drop(conn);
    c.close();
    w.stop();
}

/// Raw RDMA2_ERROR for `xid` with `body` words after the procedure (`rdma_credit` 1000).
pub fn v2_err(xid: u32, body: &[u32]) -> Vec<u8> {
    let mut w = vec![xid, 2, 1000, RDMA_ERROR];
    w.extend_from_slice(body);
    words(&w)
}

/// A gate backward handlers wait at while it is closed.
pub struct Gate(pub Mutex<bool>, pub Condvar);

impl Gate {
    pub fn set(&self, open: bool) {
        *self.0.lock().unwrap() = open;
        self.1.notify_all();
    }
    pub fn pass(&self) {
        let mut g = self.0.lock().unwrap();
        while !*g {
            g = self.1.wait(g).unwrap();
        }
    }
}

/// CB_PROG versions 1..=2 (CB_SUM, CB_PAIR) with `credits` backward credits; handlers pass
/// `gate` first when given.
pub fn bc_service(credits: u32, gate: Option<Arc<Gate>>) -> BackchannelService {
    let p = Program::new(CB_PROG, 1..=2)
        .procedure(
            CB_SUM,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                if let Some(g) = &gate {
                    g.pass();
                }
                crate::api_common::sum(req, out)
            },
        )
        .procedure(CB_PAIR, |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            if req.args.len() != 8 {
                return Err(Reject::GarbageArgs);
            }
            out.put_u32(word(req.args, 0).wrapping_add(word(req.args, 1)))
                .map_err(|_| Reject::SystemErr)
        });
    BackchannelService::new().program(p).credits(credits)
}

/// A Version One backward call (RDMA_MSG, `rdma_credit` 4) carrying `rpc`.
pub fn back_send(conn: &mut RawConn, xid: u32, rpc: &[u8]) {
    assert_eq!(conn.send(&v1_msg(xid, 4, &[], rpc)), WcStatus::SUCCESS);
}

/// The next backward reply: a Version One RDMA_MSG for `xid` granting `credits`.
pub fn back_reply(conn: &mut RawConn, xid: u32, credits: u32) -> Answer {
    let a = conn.recv_answer();
    assert_eq!(
        (a.xid, a.vers, a.proc_, a.credits),
        (xid, 1, RDMA_MSG, credits),
        "backward reply {:02x?}",
        a.bytes
    );
    a
}
