//! Connection engine with shared receives (`conn::srq`): one server host whose responder
//! connections take their receives from one shared receive queue, each connection paired with
//! its own client through the two-endpoint harness (virtual time).
//!
//! The server's host and the SRQ (a queue of posted receives every client's Sends draw from)
//! are swapped into the pair being driven, so the harness's checks hold across all of them:
//! a Send that finds no posted receive panics ("RNR"), a client never has more calls
//! outstanding than its grant. The node's side is the engine's `SrqPool` (every buffer
//! posted, held or waiting; a double return is refused) and `SrqLedger` (grants backed by the
//! SRQ depth). RFC 8166 §3.3.1: "The requester MUST NOT send more than the number of credits
//! granted"; with the reservations of the ledger, a requester that obeys never finds the SRQ
//! empty.

mod common;

use common::*;
use rpcrdma_engine::conn::srq::{SharedRecvs, SrqGrant, SrqLedger, SrqPool};
use rpcrdma_engine::conn::{
    BackchannelPools, CallSpec, CmInput, Config, ConfigError, Connection, DdpItem, Event, LocalBuf,
    Pools, ReplyError, ReplySpec, Role, StartError,
};
use rpcrdma_engine::post::collect_released;
use rpcrdma_engine::verbs::{Access, Sge};
use std::collections::VecDeque;

const CREDITS: u32 = 4;
const DDP_LEN: usize = 8192;

/// A server node with one SRQ, and one pair per client.
struct Net {
    pairs: Vec<Pair>,
    grants: Vec<SrqGrant>,
    /// The server's host (swapped into the pair being driven).
    host: Host,
    /// The SRQ: posted receives (swapped in as the server side's receive queue).
    srq: VecDeque<(u64, Sge)>,
    pool: SrqPool,
    ledger: SrqLedger,
    shared: SharedRecvs,
    /// Buffers handed back that the pool refused (not held: a double return).
    refused: u32,
    /// Check that the reservations fit the SRQ (off to build an SRQ too small on purpose).
    check_grants: bool,
}

impl Net {
    /// A node with an SRQ of `depth` receives (`slack` of them kept out of the grants).
    fn new(depth: u32, slack: u32) -> Net {
        let mut host = Host::new("server", 0x9000_0000, 64 << 20, 0x20);
        let bufs: Vec<LocalBuf> = (0..depth).map(|_| host.alloc(4096, LW)).collect();
        let shared = SharedRecvs::new(bufs);
        let mut net = Net {
            pairs: Vec::new(),
            grants: Vec::new(),
            host,
            srq: VecDeque::new(),
            pool: SrqPool::new(shared.clone(), depth / 4),
            ledger: SrqLedger::new(depth, slack),
            shared,
            refused: 0,
            check_grants: true,
        };
        net.post();
        net
    }

    /// Posts every buffer waiting in the pool.
    fn post(&mut self) {
        while let Some((wr_id, sge)) = self.pool.next_to_post() {
            self.srq.push_back((wr_id.raw(), sge));
        }
    }

    /// Admits a client asking for `wanted` credits (server backchannel with `backward` send
    /// buffers when > 0); `None` when the ledger refuses it.
    fn add_client(&mut self, wanted: u32, backward: u32) -> Option<usize> {
        let g = self.ledger.admit(wanted, backward)?;
        let mut ccfg = Config::DEFAULT;
        ccfg.credits = wanted;
        let i = self.pairs.len();
        let sizing = if backward > 0 {
            Sizing::with_backchannel(Role::Requester, &ccfg)
        } else {
            Sizing::for_config(Role::Requester, &ccfg)
        };
        let client = make_side(
            "client",
            0x1000_0000,
            0x30 + i as u32,
            Role::Requester,
            ccfg,
            sizing,
        );
        let mut scfg = Config::DEFAULT;
        scfg.credits = g.credits;
        scfg.backchannel_credits = backward.max(1);
        let conn = self.server_conn(scfg, backward as usize);
        let mut server = make_raw_side("server", 0x9000_0000, 0x20);
        server.conn = Some(conn);
        server.cfg = scfg;
        let mut p = Pair::from_sides(client, server);
        p.credit_max = wanted;
        p.check_stags = true;
        p.record_procs = true;
        self.pairs.push(p);
        self.grants.push(g);
        self.with(i, |p| p.connect());
        Some(i)
    }

    /// A shared-receive responder over fresh pools of the server host.
    fn server_conn(&mut self, cfg: Config, backward: usize) -> Connection {
        let h = &mut self.host;
        let headers: Vec<LocalBuf> = (0..2 * cfg.credits).map(|_| h.alloc(4096, LW)).collect();
        let data: Vec<LocalBuf> = (0..cfg.credits).map(|_| h.alloc(64 * 1024, LW)).collect();
        let bc_headers: Vec<LocalBuf> = (0..backward).map(|_| h.alloc(4096, LW)).collect();
        let zero = h.alloc(64, LW);
        let pools = Pools {
            headers: &headers,
            recvs: &[],
            data: &data,
            mws: &[],
            zero,
        };
        let bc = BackchannelPools {
            headers: &bc_headers,
            recvs: &[],
        };
        Connection::with_shared_receives(Role::Responder, cfg, &pools, &bc, self.shared.clone())
            .expect("shared-receive responder")
    }

    /// Runs `f` on pair `i` with the server host and the SRQ in place, then does what the
    /// node does: notes the receives consumed, takes back what the connection released, posts
    /// it again, and checks the accounting.
    fn with<R>(&mut self, i: usize, f: impl FnOnce(&mut Pair) -> R) -> R {
        let before: Vec<u64> = self.srq.iter().map(|(w, _)| *w).collect();
        let p = &mut self.pairs[i];
        std::mem::swap(&mut p.resp.host, &mut self.host);
        std::mem::swap(&mut p.resp.rq, &mut self.srq);
        let r = f(p);
        std::mem::swap(&mut p.resp.host, &mut self.host);
        std::mem::swap(&mut p.resp.rq, &mut self.srq);
        // Receives are consumed from the front; the server connection posts none.
        let consumed = before.len() - self.srq.len();
        for w in &before[..consumed] {
            assert!(self.pool.consumed(rpcrdma_engine::verbs::WrId(*w)));
        }
        let conn = self.pairs[i].resp.conn();
        let (_, refused) = collect_released(conn, &mut self.pool);
        self.refused += refused;
        self.post();
        self.check();
        r
    }

    /// Every buffer the pool counts held is held by exactly one connection, within its
    /// reservation; the reservations fit the SRQ.
    fn check(&mut self) {
        let mut held = 0;
        for (p, g) in self.pairs.iter_mut().zip(&self.grants) {
            let h = p.resp.conn().receives_held();
            assert!(
                h <= g.receives(),
                "a connection holds {h} > {}",
                g.receives()
            );
            held += h;
        }
        assert_eq!(self.pool.held(), held, "pool and connections disagree");
        assert_eq!(self.refused, 0, "a receive was handed back twice");
        let total: u32 = self.grants.iter().map(|g| g.receives()).sum();
        assert!(
            !self.check_grants || total <= self.shared.len() as u32,
            "grants exceed the SRQ"
        );
    }
}

/// A call from pair `i`'s client: inline (small arguments) or with an 8 KiB Read chunk.
struct Sent {
    xid: u32,
    reply: LocalBuf,
    ddp: bool,
}

fn start(p: &mut Pair, xid: u32, ddp: bool) -> Result<Sent, StartError> {
    let head = rpc_call(xid, 7, &(DDP_LEN as u32).to_be_bytes());
    let msg = p.req.host.buf_with(&head, LW);
    let item = p.req.host.buf_with(&pattern(DDP_LEN, xid as u8), EXPOSE);
    let reply = p.req.host.alloc(512, LW);
    let items = [DdpItem {
        at: head.len() as u32,
        buf: item,
    }];
    p.try_call(&CallSpec {
        message: &[msg],
        ddp: if ddp { &items } else { &[] },
        receptacles: &[],
        reply,
    })
    .map(|_| Sent { xid, reply, ddp })
}

/// Answers every call the server of `p` has ready, checking its arguments; how many.
fn serve_all(p: &mut Pair) -> u32 {
    let mut n = 0;
    while let Some(inc) = p.next_call() {
        let got = p.resp.host.read(inc.stream).to_vec();
        let head = rpc_call(inc.xid, 7, &(DDP_LEN as u32).to_be_bytes());
        assert_eq!(&got[..head.len()], &head[..], "call {:#x} header", inc.xid);
        if got.len() > head.len() {
            assert_eq!(&got[head.len()..], &pattern(DDP_LEN, inc.xid as u8)[..]);
        }
        let rmsg = p
            .resp
            .host
            .buf_with(&rpc_reply(inc.xid, &inc.xid.to_be_bytes()), LW);
        p.reply(
            inc.call,
            &ReplySpec {
                message: &[rmsg],
                results: &[],
            },
        );
        n += 1;
    }
    n
}

/// Rounds in which every client fills its grant before the server answers any (inline calls,
/// or inline and DDP calls alternating with `mixed`); every call completes exactly once with
/// its own reply. (A DDP call's receive goes back once its inline part is copied into the
/// reassembly buffer; an inline call's only when it is answered.)
fn run_rounds(net: &mut Net, rounds: u32) -> u32 {
    rounds_of(net, rounds, true)
}

fn rounds_of(net: &mut Net, rounds: u32, mixed: bool) -> u32 {
    let mut done = 0u32;
    let mut next_xid = 0x1000u32;
    for _ in 0..rounds {
        let mut sent: Vec<Vec<Sent>> = (0..net.pairs.len()).map(|_| Vec::new()).collect();
        for (i, s) in sent.iter_mut().enumerate() {
            loop {
                let xid = next_xid;
                match net.with(i, |p| start(p, xid, mixed && xid % 2 == 0)) {
                    Ok(c) => s.push(c),
                    Err(StartError::NoCredit) => break,
                    Err(e) => panic!("start_call: {e:?}"),
                }
                next_xid += 1;
            }
        }
        let held: u32 = (0..net.pairs.len())
            .map(|i| net.pairs[i].resp.conn().receives_held())
            .sum();
        assert!(held <= net.shared.len() as u32);
        for (i, s) in sent.iter().enumerate() {
            let served = net.with(i, serve_all);
            assert_eq!(
                served as usize,
                s.len(),
                "client {i}: every call reached the server"
            );
            for c in s {
                let r = net.with(i, |p| p.next_reply());
                assert_eq!(r.xid, c.xid, "replies in order, each once");
                let body = net.pairs[i].req.host.read_at(c.reply.addr, r.len as usize);
                assert_eq!(&body[24..28], &c.xid.to_be_bytes(), "its own reply");
                let _ = c.ddp;
                done += 1;
            }
            assert!(
                net.with(i, |p| p.next_done()).is_none(),
                "no extra completion"
            );
        }
    }
    done
}

#[test]
fn srq_server_serves_several_clients_inline_and_ddp() {
    // Six clients of 4 credits on an SRQ of exactly 24 receives: with every grant full at
    // once, the SRQ is empty, and no Send ever finds it so (the harness panics on RNR).
    let mut net = Net::new(6 * CREDITS, 0);
    for _ in 0..6 {
        net.add_client(CREDITS, 0).expect("admitted");
    }
    let done = rounds_of(&mut net, 3, false) + run_rounds(&mut net, 3);
    assert!(done >= 6 * CREDITS * 5, "{done} calls");
    for p in &net.pairs {
        assert_eq!(p.stats.max_outstanding, CREDITS, "grants were used in full");
    }
    // Quiescent: every buffer posted again, none held.
    assert_eq!(net.pool.held(), 0);
    assert_eq!(net.pool.posted(), 6 * CREDITS);
    assert!(
        net.pool.low_water_events() > 0,
        "the SRQ was drained below low water"
    );
}

#[test]
#[should_panic(expected = "RNR")]
fn rejects_an_srq_one_receive_short_of_the_grants() {
    // The reservation is what makes it safe: the same load on an SRQ one receive smaller than
    // the grants meets RNR (the ledger is bypassed to build it).
    let mut net = Net::new(6 * CREDITS - 1, 0);
    net.ledger = SrqLedger::new(6 * CREDITS, 0);
    net.check_grants = false;
    for _ in 0..6 {
        net.add_client(CREDITS, 0).expect("admitted");
    }
    rounds_of(&mut net, 3, false);
}

#[test]
fn srq_grants_shrink_at_the_limit_and_the_wire_says_so() {
    let mut net = Net::new(10, 0);
    assert!(net.add_client(CREDITS, 0).is_some());
    assert!(net.add_client(CREDITS, 0).is_some());
    let small = net
        .add_client(CREDITS, 0)
        .expect("admitted with what is left");
    assert_eq!(net.grants[small].credits, 2);
    assert!(
        net.add_client(CREDITS, 0).is_none(),
        "nothing left: refused"
    );
    run_rounds(&mut net, 4);
    let p = &net.pairs[small];
    assert_eq!(
        p.stats.max_outstanding, 2,
        "the client kept to the smaller grant"
    );
    assert!(p
        .sent_procs
        .iter()
        .filter(|(d, ..)| *d == Dir::Resp)
        .all(|&(_, _, _, credits, _)| credits == 2));
    assert_eq!(net.pairs[0].stats.max_outstanding, CREDITS);
}

#[test]
fn srq_held_receives_return_exactly_once_after_close() {
    let mut net = Net::new(2 * CREDITS, 0);
    net.add_client(CREDITS, 0).unwrap();
    net.add_client(CREDITS, 0).unwrap();
    run_rounds(&mut net, 1);
    // Client 0 fills its grant; the server has the calls delivered (holding their receives).
    for x in 0..CREDITS {
        net.with(0, |p| start(p, 0x9000 + x, false)).expect("call");
    }
    assert_eq!(net.pairs[0].resp.conn().receives_held(), CREDITS);
    let calls: Vec<_> = std::iter::from_fn(|| net.pairs[0].next_call()).collect();
    assert_eq!(calls.len() as u32, CREDITS);
    net.with(0, disconnect);
    // Closed, but the application may still read the arguments: nothing comes back yet.
    assert_eq!(net.pairs[0].resp.conn().receives_held(), CREDITS);
    assert_eq!(net.pool.held(), CREDITS);
    let r = net.with(0, |p| {
        let conn = p.resp.conn.as_mut().expect("server");
        let none = ReplySpec {
            message: &[],
            results: &[],
        };
        let e = conn.send_reply(0, calls[0].call, &none, &mut p.resp.host);
        assert_eq!(e, Err(ReplyError::Closed));
        conn.release_held_recvs()
    });
    assert_eq!(r, CREDITS);
    assert_eq!(net.pool.held(), 0);
    assert_eq!(
        net.with(0, |p| p.resp.conn().release_held_recvs()),
        0,
        "once"
    );
    assert_eq!(net.refused, 0);
    assert_eq!(net.pool.posted(), 2 * CREDITS);
    // The other client is not disturbed.
    net.pairs.swap(0, 1);
    net.grants.swap(0, 1);
    net.pairs.truncate(1);
    net.grants.truncate(1);
    assert!(run_rounds(&mut net, 2) >= CREDITS);
}

#[test]
fn rejects_a_reply_that_names_its_own_receive() {
    let mut net = Net::new(CREDITS, 0);
    net.add_client(CREDITS, 0).unwrap();
    net.with(0, |p| start(p, 0x77, false)).expect("call");
    let inc = net.pairs[0].next_call().expect("CallReady");
    let e = net.with(0, |p| {
        let conn = p.resp.conn.as_mut().expect("server");
        conn.send_reply(
            0,
            inc.call,
            &ReplySpec {
                message: &[inc.stream],
                results: &[],
            },
            &mut p.resp.host,
        )
    });
    assert_eq!(
        e,
        Err(ReplyError::BadSpec),
        "the Send would gather from a reposted buffer"
    );
    assert_eq!(net.pool.held(), 1, "still held: the call is not answered");
    net.with(0, |p| {
        let rmsg = p.resp.host.buf_with(&rpc_reply(0x77, &[0; 4]), LW);
        let spec = ReplySpec {
            message: &[rmsg],
            results: &[],
        };
        p.reply(inc.call, &spec);
        assert_eq!(p.next_reply().xid, 0x77);
    });
    assert_eq!(net.pool.held(), 0);
    assert_eq!(net.pool.posted(), CREDITS);
}

#[test]
fn srq_peer_beyond_its_grant_is_disconnected_and_others_are_not_starved() {
    // A raw client sends one call more than its grant; the SRQ's slack takes it, the server
    // hands it back and closes that connection.
    let mut net = Net::new(2 * CREDITS + 1, 1);
    net.add_client(CREDITS, 0).unwrap();
    let g = net.ledger.admit(CREDITS, 0).unwrap();
    let mut scfg = Config::DEFAULT;
    scfg.credits = g.credits;
    let conn = net.server_conn(scfg, 0);
    let mut server = make_raw_side("server", 0x9000_0000, 0x20);
    server.conn = Some(conn);
    server.cfg = scfg;
    let raw = make_raw_side("raw", 0x1000_0000, 0x50);
    let mut p = Pair::from_sides(raw, server);
    p.check_credits = false;
    net.pairs.push(p);
    net.grants.push(g);
    net.with(1, |p| p.connect());
    for x in 0..=CREDITS {
        assert!(
            !net.pairs[1].resp.conn().exceeded_shared_grant(),
            "within the grant after {x} calls"
        );
        let call = rpc_call(0x500 + x, 1, &[0; 8]);
        let mut msg = Vec::new();
        for w in [0x500 + x, 1, CREDITS, 0, 0, 0, 0] {
            msg.extend_from_slice(&w.to_be_bytes());
        }
        msg.extend_from_slice(&call);
        net.with(1, |p| p.raw_send(Dir::Req, &msg, None));
    }
    let lost = net.pairs[1]
        .resp
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectionLost));
    assert!(lost, "the connection that exceeded its grant is closed");
    assert!(
        net.pairs[1].resp.conn().exceeded_shared_grant(),
        "the node is told to cut the violator off"
    );
    assert!(!net.pairs[0].resp.conn().exceeded_shared_grant());
    assert_eq!(net.pairs[1].resp.conn().receives_held(), CREDITS);
    // The polite client still has its reservation posted.
    net_without(&mut net, 1);
    assert_eq!(net.pool.held(), 0);
    assert!(run_rounds(&mut net, 2) >= CREDITS);
}

/// Both ends see the connection go (the harness's own `disconnect` would empty the SRQ, which
/// outlives connections).
fn disconnect(p: &mut Pair) {
    assert!(p.resp.cq.is_empty(), "no receive completion left to feed");
    let now = p.now;
    p.req.conn().handle_cm(now, CmInput::Disconnected);
    p.resp.conn().handle_cm(now, CmInput::Disconnected);
    p.req.rq.clear();
    p.req.cq.clear();
    p.pump();
}

/// `net` with pair `i` removed (its held receives released and collected first).
fn net_without(net: &mut Net, i: usize) {
    net.with(i, |p| p.resp.conn().release_held_recvs());
    net.pairs.remove(i);
    let g = net.grants.remove(i);
    net.ledger.release(g);
}

#[test]
fn srq_backward_replies_come_from_the_same_srq() {
    // RFC 8167: the server's backward calls draw replies that land in SRQ receives; the
    // reservation has one per backchannel send buffer.
    let mut net = Net::new(2 * (CREDITS + 2), 0);
    for _ in 0..2 {
        net.add_client(CREDITS, 2).expect("admitted");
    }
    assert_eq!(net.grants[0].receives(), CREDITS + 2);
    for i in 0..2 {
        net.with(i, |p| {
            p.req
                .conn()
                .enable_backchannel()
                .expect("client backchannel");
            p.bc_reserve = p.req.cfg.backchannel_credits;
            p.pump();
            p.resp
                .conn()
                .enable_backchannel()
                .expect("server backchannel");
        });
    }
    for round in 0..3u32 {
        for i in 0..2 {
            net.with(i, |p| {
                let xid = 0x7000 + round * 16 + i as u32;
                let msg = p.resp.host.buf_with(&rpc_call(xid, 1, &[1; 16]), LW);
                let reply = p.resp.host.alloc(512, LW);
                p.back_call(&CallSpec {
                    message: &[msg],
                    ddp: &[],
                    receptacles: &[],
                    reply,
                });
                let inc = p.next_back_call().expect("backward call at the client");
                let rmsg = p.req.host.buf_with(&rpc_reply(inc.xid, &[2; 8]), LW);
                p.back_reply(
                    inc.call,
                    &ReplySpec {
                        message: &[rmsg],
                        results: &[],
                    },
                );
                match p.next_back_done() {
                    Some(Event::ReplyReady(r)) => assert_eq!(r.xid, xid),
                    other => panic!("expected the backward reply, got {other:?}"),
                }
            });
        }
        run_rounds(&mut net, 1);
    }
    assert!(net.pairs.iter().all(|p| p.wire.back_replies == 3));
    assert_eq!(net.pool.held(), 0);
}

#[test]
fn rejects_shared_receives_for_a_requester() {
    let mut host = Host::new("h", 0x1000_0000, 1 << 20, 0x10);
    let headers = [host.alloc(4096, LW)];
    let zero = host.alloc(64, LW | Access::MW_BIND);
    let shared = SharedRecvs::new(vec![host.alloc(4096, LW)]);
    let pools = Pools {
        headers: &headers,
        recvs: &[],
        data: &[],
        mws: &[],
        zero,
    };
    let e = Connection::with_shared_receives(
        Role::Requester,
        Config::DEFAULT,
        &pools,
        &BackchannelPools::NONE,
        shared,
    )
    .unwrap_err();
    assert_eq!(e, ConfigError::SharedReceivesUnsupported);
    let small = SharedRecvs::new(vec![host.alloc(1024, LW)]);
    let e = Connection::with_shared_receives(
        Role::Responder,
        Config::DEFAULT,
        &pools,
        &BackchannelPools::NONE,
        small,
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::RecvSlotTooSmall { .. }));
}
