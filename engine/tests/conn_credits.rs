//! Connection engine: credit flow control. The harness asserts on every Send that the
//! requester never has more calls outstanding than granted and that no Send meets an empty
//! receive queue (no RNR, ever).

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallError, CallSpec, Config, DdpItem, Event, IncomingCall, LocalBuf, ReplySpec, Role,
    StartError,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn accepts_one_call_until_the_first_reply() {
    let mut cfg = Config::DEFAULT;
    cfg.credits = 8;
    let mut p = Pair::new(cfg, Config::DEFAULT);
    let reply = p.req.host.alloc(64, LW);
    let mk = |p: &mut Pair, xid| p.req.host.buf_with(&rpc_call(xid, 0, &[]), LW);
    let m1 = mk(&mut p, 1);
    let m2 = mk(&mut p, 2);
    let spec = |m| CallSpec {
        message: std::slice::from_ref(m),
        ddp: &[],
        receptacles: &[],
        reply,
    };
    // Do not let the responder answer yet: take the call but hold it.
    p.call(&spec(&m1));
    assert_eq!(p.try_call(&spec(&m2)), Err(StartError::NoCredit));
    let inc = p.next_call().unwrap();
    let r = p.resp.host.buf_with(&rpc_reply(1, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[r],
            results: &[],
        },
    );
    p.next_reply();
    // The responder granted 64; the requester's own maximum (8) applies.
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 8);
    let reply_bufs: Vec<LocalBuf> = (0..9).map(|_| p.req.host.alloc(64, LW)).collect();
    for i in 0..8u32 {
        let m = mk(&mut p, 100 + i);
        p.call(&CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &[],
            reply: reply_bufs[i as usize],
        });
    }
    let m = mk(&mut p, 200);
    assert_eq!(
        p.try_call(&CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &[],
            reply: reply_bufs[8],
        }),
        Err(StartError::NoCredit)
    );
    assert_eq!(p.stats.max_outstanding, 8);
}

/// A real requester (max 8 credits) against a raw responder; the responder answers call `xid`
/// with `credits` on the wire.
#[test]
fn accepts_hostile_credit_values_zero_and_max() {
    let mut cfg = Config::DEFAULT;
    cfg.credits = 8;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::for_config(Role::Requester, &cfg),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Resp, 64, 4096);
    let reply = p.req.host.alloc(64, LW);
    let mut xid = 0x1000;
    let mut issue = |p: &mut Pair| -> Result<u32, StartError> {
        xid += 1;
        let m = p.req.host.buf_with(&rpc_call(xid, 0, &[]), LW);
        p.try_call(&CallSpec {
            message: &[m],
            ddp: &[],
            receptacles: &[],
            reply,
        })
        .map(|_| xid)
    };
    let answer = |p: &mut Pair, xid: u32, credits: u32| {
        let mut m = words(&[xid, 1, credits, 0, 0, 0, 0]);
        m.extend_from_slice(&rpc_reply(xid, &[]));
        p.raw_send(Dir::Resp, &m, None);
        assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    };
    // Grant 2^32 - 1: clamped to the local maximum, 8.
    let x = issue(&mut p).unwrap();
    answer(&mut p, x, u32::MAX);
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 8);
    let xs: Vec<u32> = (0..8).map(|_| issue(&mut p).unwrap()).collect();
    assert_eq!(issue(&mut p), Err(StartError::NoCredit));
    assert_eq!(p.raw_take(Dir::Resp).len(), 9);
    // Grant 0 counts as 1: after the answers, only one call at a time.
    for &x in &xs {
        answer(&mut p, x, 0);
    }
    assert_eq!(p.req.conn.as_ref().unwrap().credits(), 1);
    let x = issue(&mut p).unwrap();
    assert_eq!(issue(&mut p), Err(StartError::NoCredit));
    answer(&mut p, x, 0);
    assert!(issue(&mut p).is_ok());
    assert_eq!(p.req.conn.as_ref().unwrap().outstanding(), 1);
}

/// A call issued by [`Traffic`] and what its reply must hold.
struct Pending {
    xid: u32,
    reply: LocalBuf,
    rec: Option<LocalBuf>,
    arg: Vec<u8>,
    want_reply: Vec<u8>,
    want_result: Vec<u8>,
}

/// Randomly shaped pipelined calls (inline, DDP reads, Write chunks, long calls, long
/// replies) and a responder application answering held calls in random order.
struct Traffic {
    rng: Rng,
    msgs: Vec<LocalBuf>,
    items: Vec<LocalBuf>,
    recs: Vec<LocalBuf>,
    replies: Vec<LocalBuf>,
    rmsgs: Vec<LocalBuf>,
    rdata: Vec<LocalBuf>,
    pending: Vec<Pending>,
    held: Vec<IncomingCall>,
    next_xid: u32,
    issued: usize,
    done: usize,
    total: usize,
}

impl Traffic {
    /// Per-slot buffers, reused round-robin.
    fn new(p: &mut Pair, total: usize) -> Self {
        let nbuf = 64;
        let req = |p: &mut Pair, len| (0..nbuf).map(|_| p.req.host.alloc(len, EXPOSE)).collect();
        let resp = |p: &mut Pair, len| (0..16).map(|_| p.resp.host.alloc(len, LW)).collect();
        Traffic {
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            msgs: req(p, 8192),
            items: req(p, 8192),
            recs: req(p, 8192),
            replies: req(p, 16384),
            rmsgs: resp(p, 16384),
            rdata: resp(p, 8192),
            pending: Vec::new(),
            held: Vec::new(),
            next_xid: 1,
            issued: 0,
            done: 0,
            total,
        }
    }

    /// Issues as many calls as the connection accepts.
    fn issue(&mut self, p: &mut Pair) {
        while self.issued < self.total {
            let k = self.issued % self.msgs.len();
            let xid = self.next_xid;
            let arg_len = match self.rng.below(4) {
                0 => 0,
                1 => 1 + self.rng.below(16) as usize,
                _ => 1 + self.rng.below(6000) as usize,
            };
            let inline_extra = if self.rng.below(5) == 0 { 5000 } else { 8 };
            let arg = pattern(arg_len, xid as u8);
            let mut call = rpc_call(xid, 1, &words(&[arg_len as u32]));
            let at = call.len() as u32;
            call.extend_from_slice(&pattern(inline_extra, 3));
            p.req.host.write(self.msgs[k].addr, &call);
            p.req.host.write(self.items[k].addr, &arg);
            let msg = self.msgs[k].sub(0, call.len() as u32).unwrap();
            let item = self.items[k].sub(0, arg_len as u32).unwrap();
            let use_rec = self.rng.below(2) == 0;
            let ddp = [DdpItem { at, buf: item }];
            let spec = CallSpec {
                message: &[msg],
                ddp: if arg_len > 0 { &ddp } else { &[] },
                receptacles: if use_rec {
                    std::slice::from_ref(&self.recs[k])
                } else {
                    &[]
                },
                reply: self.replies[k],
            };
            match p.try_call(&spec) {
                Ok(_) => {}
                Err(StartError::NoCredit) | Err(StartError::Busy) => break,
                Err(e) => panic!("{e:?}: {:?}", p.req.events),
            }
            let mut full = call[..at as usize].to_vec();
            full.extend_from_slice(&arg);
            full.resize((full.len() + 3) & !3, 0);
            full.extend_from_slice(&call[at as usize..]);
            self.pending.push(Pending {
                xid,
                reply: self.replies[k],
                rec: use_rec.then_some(self.recs[k]),
                arg: full,
                want_reply: Vec::new(),
                want_result: Vec::new(),
            });
            self.next_xid += 1;
            self.issued += 1;
        }
    }

    /// The responder application: collects calls and checks them; `false` when none is held.
    fn collect(&mut self, p: &mut Pair) -> bool {
        while let Some(inc) = p.next_call() {
            let pd = self.pending.iter().find(|q| q.xid == inc.xid).unwrap();
            assert_eq!(
                p.resp.host.read(inc.stream),
                &pd.arg[..],
                "call {}",
                inc.xid
            );
            self.held.push(inc);
        }
        !self.held.is_empty()
    }

    /// Answers some held calls, in random order, with random reply shapes.
    fn answer_some(&mut self, p: &mut Pair) {
        let n = 1 + self.rng.below(self.held.len() as u64) as usize;
        for _ in 0..n {
            let i = self.rng.below(self.held.len() as u64) as usize;
            let inc = self.held.swap_remove(i);
            let slot = (inc.xid as usize) % 16;
            let result_len = if inc.write_chunks > 0 {
                self.rng.below(u64::from(inc.write_capacity[0]) + 1) as usize
            } else {
                0
            };
            let body_len = if self.rng.below(6) == 0 { 9000 } else { 40 };
            let mut reply = rpc_reply(inc.xid, &words(&[result_len as u32]));
            let at = reply.len() as u32;
            reply.extend_from_slice(&pattern(body_len, inc.xid as u8));
            let result = pattern(result_len, 0x5a ^ inc.xid as u8);
            p.resp.host.write(self.rmsgs[slot].addr, &reply);
            p.resp.host.write(self.rdata[slot].addr, &result);
            let rmsg = self.rmsgs[slot].sub(0, reply.len() as u32).unwrap();
            let rd = self.rdata[slot].sub(0, result_len as u32).unwrap();
            let results = [DdpItem { at, buf: rd }];
            let spec = ReplySpec {
                message: &[rmsg],
                results: if inc.write_chunks > 0 { &results } else { &[] },
            };
            p.reply(inc.call, &spec);
            let pd = self.pending.iter_mut().find(|q| q.xid == inc.xid).unwrap();
            pd.want_reply = reply;
            pd.want_result = result;
        }
    }

    /// Checks every completed call's reply and Write chunk result.
    fn check_done(&mut self, p: &mut Pair) {
        while let Some(ev) = p.next_done() {
            let Event::ReplyReady(r) = ev else {
                panic!("{ev:?}")
            };
            let i = self.pending.iter().position(|q| q.xid == r.xid).unwrap();
            let pd = self.pending.swap_remove(i);
            assert_eq!(
                p.req.host.read(pd.reply.sub(0, r.len).unwrap()),
                &pd.want_reply[..]
            );
            if let Some(rec) = pd.rec {
                assert_eq!(r.written(), &[pd.want_result.len() as u32]);
                assert_eq!(
                    &p.req.host.read(rec)[..pd.want_result.len()],
                    &pd.want_result[..]
                );
            }
            self.done += 1;
        }
    }
}

#[test]
fn accepts_sustained_pipelined_traffic_within_credits() {
    // Requester may have 32 outstanding, the responder grants 6. Every result is checked, and
    // the harness checks credits, RNR and STag invalidation on each call.
    let mut req_cfg = Config::DEFAULT;
    req_cfg.credits = 32;
    let mut resp_cfg = Config::DEFAULT;
    resp_cfg.credits = 6;
    let mut p = Pair::new(req_cfg, resp_cfg);
    let mut t = Traffic::new(&mut p, 600);
    while t.done < t.total {
        t.issue(&mut p);
        if !t.collect(&mut p) {
            p.pump();
            continue;
        }
        t.answer_some(&mut p);
        t.check_done(&mut p);
    }
    assert_eq!(p.stats.max_outstanding, 6);
    assert_eq!(p.stats.errors, 0);
    assert_eq!(p.req.host.bound_windows(), 0);
    let c = p.resp.conn.as_ref().unwrap();
    assert_eq!(
        c.receives_posted(),
        6,
        "reply credits = receives kept posted"
    );
}

// ---------------------------------------------------------------------------------------------
// Credit values the requester must not use (issue 13, part 1, items 1 and 2).

const RDMA_MSG: u32 = 0;
const RDMA_DONE: u32 = 3;
const RDMA_ERROR: u32 = 4;

/// A real Version One requester (local maximum 8 forward credits, optionally with its
/// backchannel enabled) against a raw responder with 64 receives posted.
fn raw_responder(backchannel: bool) -> Pair {
    let mut cfg = Config::DEFAULT;
    cfg.credits = 8;
    let sizing = if backchannel {
        Sizing::with_backchannel(Role::Requester, &cfg)
    } else {
        Sizing::for_config(Role::Requester, &cfg)
    };
    let req = make_side("requester", 0x1000_0000, 0x10, Role::Requester, cfg, sizing);
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    if backchannel {
        p.req.conn().enable_backchannel().unwrap();
    }
    p.raw_post_recvs(Dir::Resp, 64, 4096);
    p.pump();
    p
}

/// Starts a call with XID `xid`; `Err` when the requester refuses it.
fn issue(p: &mut Pair, xid: u32) -> Result<(), StartError> {
    let m = p.req.host.buf_with(&rpc_call(xid, 0, &[]), LW);
    let reply = p.req.host.alloc(256, LW);
    p.try_call(&CallSpec {
        message: &[m],
        ddp: &[],
        receptacles: &[],
        reply,
    })
    .map(|_| ())?;
    assert_eq!(p.raw_take(Dir::Resp).len(), 1, "call {xid:#x} on the wire");
    Ok(())
}

/// The raw responder answers `xid` with an inline RDMA_MSG reply granting `credits`.
fn answer(p: &mut Pair, xid: u32, credits: u32) {
    let mut m = words(&[xid, 1, credits, RDMA_MSG, 0, 0, 0]);
    m.extend_from_slice(&rpc_reply(xid, &[]));
    p.raw_send(Dir::Resp, &m, None);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(r)) if r.xid == xid));
}

fn credits(p: &Pair) -> u32 {
    p.req.conn.as_ref().unwrap().credits()
}

/// RDMA_ERROR bodies (after the four fixed words) with the error each one fails its call with.
fn v1_errors() -> [(Vec<u32>, CallError); 3] {
    [
        (vec![2], CallError::ErrChunk),                          // ERR_CHUNK
        (vec![1, 1, 1], CallError::ErrVers { low: 1, high: 1 }), // ERR_VERS, range 1..1
        (vec![7], CallError::RdmaError(7)),                      // an unknown error code
    ]
}

/// v2 draft, "Protocol Version Negotiation": "As with RPC-over-RDMA Version One, a requester
/// MUST assume the ability to exchange only a single RPC-over-RDMA message at a time until it
/// receives a non-error RPC-over-RDMA message from the responder that reports the responder's
/// actual credit limit." An RDMA_ERROR answering the first call (credits 64 on the wire) fails
/// that call and leaves the grant at one: the next call waits for its non-error reply.
#[test]
fn rejects_credits_of_an_error_before_the_first_reply() {
    for (i, (body, want)) in v1_errors().into_iter().enumerate() {
        let mut p = raw_responder(false);
        let xid = 0x100 * (i as u32 + 1);
        issue(&mut p, xid).unwrap();
        let mut e = words(&[xid, 1, 64, RDMA_ERROR]); // rdma_credit 64
        e.extend_from_slice(&words(&body));
        p.raw_send(Dir::Resp, &e, None);
        match p.next_done() {
            Some(Event::CallFailed { error, .. }) => assert_eq!(error, want, "{body:?}"),
            other => panic!("{body:?}: {other:?}"),
        }
        assert_eq!(credits(&p), 1, "{body:?}: grant of an error taken");
        // Still one call at a time.
        issue(&mut p, xid + 1).unwrap();
        assert_eq!(
            issue(&mut p, xid + 2),
            Err(StartError::NoCredit),
            "{body:?}"
        );
        // The first non-error reply reports the limit.
        answer(&mut p, xid + 1, 5);
        assert_eq!(credits(&p), 5);
        for x in 0..5 {
            issue(&mut p, xid + 0x10 + x).unwrap();
        }
        assert_eq!(issue(&mut p, xid + 0x20), Err(StartError::NoCredit));
    }
}

/// Once a non-error reply reported the limit, an RDMA_ERROR's `rdma_credit` is still not used:
/// neither raised (64) nor lowered (1), whether the error names a call or an unknown XID. An
/// error message does not report the responder's actual credit limit (v2 draft, "Protocol
/// Version Negotiation"), and Version Two errors are treated alike.
#[test]
fn rejects_credits_of_an_error_after_the_first_reply() {
    for (body, want) in v1_errors() {
        let mut p = raw_responder(false);
        issue(&mut p, 1).unwrap();
        answer(&mut p, 1, 4);
        assert_eq!(credits(&p), 4);
        for (x, wire) in [(2u32, 64u32), (3, 1)] {
            issue(&mut p, x).unwrap();
            let mut e = words(&[x, 1, wire, RDMA_ERROR]);
            e.extend_from_slice(&words(&body));
            p.raw_send(Dir::Resp, &e, None);
            assert!(
                matches!(p.next_done(), Some(Event::CallFailed { error, .. }) if error == want)
            );
            assert_eq!(credits(&p), 4, "{body:?} with rdma_credit {wire}");
        }
        // An error for an XID nobody sent.
        let mut e = words(&[0xdead, 1, 64, RDMA_ERROR]);
        e.extend_from_slice(&words(&body));
        p.raw_send(Dir::Resp, &e, None);
        assert!(p.next_done().is_none());
        assert_eq!(credits(&p), 4, "{body:?} for an unknown XID");
    }
}

/// Implementation experience §7.1.2: RDMA_DONE is never sent, and a receiver "should ignore
/// it"; RFC 8167 §4.1: when the direction of a message is not determined, "the receiver MUST
/// NOT use the header's credit value". An RDMA_DONE naming the outstanding call (credits 5, then
/// 0) or an unknown XID (credits 6) changes nothing: the call stays pending, the grant stays,
/// the receive is reposted.
fn done_changes_nothing(backchannel: bool) {
    let mut p = raw_responder(backchannel);
    let posted = p.req.conn.as_ref().unwrap().receives_posted();
    issue(&mut p, 0x40).unwrap();
    for (xid, wire) in [(0x40, 5), (0x41, 6), (0x40, 0)] {
        p.raw_send(Dir::Resp, &words(&[xid, 1, wire, RDMA_DONE]), None);
        assert!(p.next_done().is_none(), "RDMA_DONE completed a call");
        let c = p.req.conn.as_ref().unwrap();
        assert_eq!(c.credits(), 1, "RDMA_DONE {xid:#x} with rdma_credit {wire}");
        assert_eq!(c.outstanding(), 1);
        assert_eq!(c.receives_posted(), posted, "receive reposted");
        assert_eq!(issue(&mut p, 0x50), Err(StartError::NoCredit));
    }
    // After the real reply (credits 3) the same: RDMA_DONE moves the grant neither way.
    answer(&mut p, 0x40, 3);
    for (xid, wire) in [(0x42, 8), (0x43, 0)] {
        p.raw_send(Dir::Resp, &words(&[xid, 1, wire, RDMA_DONE]), None);
        assert_eq!(credits(&p), 3, "RDMA_DONE with rdma_credit {wire}");
    }
    issue(&mut p, 0x44).unwrap();
    p.raw_send(Dir::Resp, &words(&[0x44, 1, 8, RDMA_DONE]), None);
    assert!(p.next_done().is_none());
    assert_eq!(credits(&p), 3, "RDMA_DONE naming an outstanding call");
    answer(&mut p, 0x44, 3);
    assert_eq!(
        p.req.conn.as_ref().unwrap().receives_posted(),
        posted,
        "every receive reposted"
    );
}

/// RDMA_DONE on a requester (IE §7.1.2, RFC 8167 §4.1; see `done_changes_nothing`).
#[test]
fn rejects_credits_of_rdma_done() {
    done_changes_nothing(false);
}

/// RDMA_DONE on a client that serves backward calls: a message whose direction cannot be
/// determined (RFC 8167 §4.1), neither a forward reply nor a backward call.
#[test]
fn rejects_credits_of_rdma_done_on_a_client_with_a_backchannel() {
    done_changes_nothing(true);
}

/// Two engines, the harness watching the wire: the responder's first answer is an ERR_CHUNK
/// (the reply does not fit the 256 octets offered) carrying its grant, 64. The requester keeps
/// to one call until the next, non-error reply (v2 draft, "Protocol Version Negotiation"); the
/// harness (which takes grants from non-error replies only) would fail the third call's Send
/// if the requester had taken the error's 64.
#[test]
fn accepts_one_call_until_the_first_non_error_reply() {
    let mut p = Pair::default_pair();
    p.record = true;
    let mk = |p: &mut Pair, xid| p.req.host.buf_with(&rpc_call(xid, 0, &[]), LW);
    fn spec(m: &LocalBuf, reply: LocalBuf) -> CallSpec<'_> {
        CallSpec {
            message: std::slice::from_ref(m),
            ddp: &[],
            receptacles: &[],
            reply,
        }
    }
    let r1 = p.req.host.alloc(256, LW);
    let m1 = mk(&mut p, 1);
    p.call(&spec(&m1, r1));
    let inc = p.next_call().unwrap();
    let mut big = rpc_reply(1, &[]);
    big.extend_from_slice(&pattern(8000, 1));
    let rb = p.resp.host.buf_with(&big, LW);
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rb],
            results: &[],
        },
    );
    assert_eq!(kind, rpcrdma_engine::conn::ReplyKind::ErrChunk);
    assert_eq!(be32(p.last_sent(Dir::Resp), 2), 64, "the error carries 64");
    assert!(matches!(
        p.next_done(),
        Some(Event::CallFailed {
            error: CallError::ErrChunk,
            ..
        })
    ));
    let r2 = p.req.host.alloc(256, LW);
    let m2 = mk(&mut p, 2);
    p.call(&spec(&m2, r2));
    let m3 = mk(&mut p, 3);
    assert_eq!(p.try_call(&spec(&m3, r2)), Err(StartError::NoCredit));
    assert_eq!(credits(&p), 1);
    let inc = p.next_call().unwrap();
    let rb = p.resp.host.buf_with(&rpc_reply(2, &[]), LW);
    p.reply(
        inc.call,
        &ReplySpec {
            message: &[rb],
            results: &[],
        },
    );
    assert_eq!(p.next_reply().xid, 2);
    assert_eq!(credits(&p), 64);
    assert_eq!(p.stats.max_outstanding, 1);
}

#[test]
fn accepts_backlogged_call_as_it_arrived() {
    // A call that finds no free slot waits in the backlog, its header decoded and validated
    // when it arrived: what is taken into the slot later is that call, whatever its receive
    // buffer holds by then (here its XID word is overwritten while it waits).
    let cfg = Config::DEFAULT;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::for_config(Role::Requester, &cfg),
    );
    let one_slot = Sizing {
        headers: 1,
        ..Sizing::for_config(Role::Responder, &cfg)
    };
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        one_slot,
    );
    let mut p = Pair::from_sides(req, resp);
    p.credit_max = cfg.credits;
    p.connect();
    let reply_of = |p: &mut Pair, inc: IncomingCall| {
        let reply = rpc_reply(inc.xid, &[0, 0, 0, 0]);
        let rmsg = p.resp.host.buf_with(&reply, LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        p.reply(inc.call, &spec);
    };
    let start = |p: &mut Pair, xid: u32| {
        let call = rpc_call(xid, 1, &[]);
        let msg = p.req.host.buf_with(&call, LW);
        let reply = p.req.host.alloc(512, LW);
        p.call(&CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[],
            reply,
        })
    };
    // The first reply grants the configured credits.
    start(&mut p, 1);
    let inc = p.next_call().expect("CallReady 1");
    reply_of(&mut p, inc);
    assert!(matches!(p.next_done(), Some(Event::ReplyReady(_))));
    // Call 2 takes the only slot; call 3 waits in the backlog.
    start(&mut p, 2);
    let second = p.next_call().expect("CallReady 2");
    let (_, sge) = *p.resp.rq.front().expect("a posted receive");
    start(&mut p, 3);
    assert!(p.next_call().is_none(), "no slot: call 3 waits");
    p.resp.host.write(sge.addr, &0xdead_beef_u32.to_be_bytes());
    reply_of(&mut p, second);
    let third = p.next_call().expect("CallReady 3 once the slot is free");
    assert_eq!(third.xid, 3, "the call as it arrived");
    reply_of(&mut p, third);
    let done: Vec<_> = std::iter::from_fn(|| p.next_done()).collect();
    assert_eq!(done.len(), 2, "{done:?}");
}
