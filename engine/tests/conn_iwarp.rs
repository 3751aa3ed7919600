//! The connection engine end to end over the iWARP provider (RDMAP/DDP/MPA over loopback TCP),
//! in one process and with requester and responder in two (this test binary runs itself again
//! as the responder, `common::procs`). The same script both ways: RFC 8797 private data in the
//! MPA Request/Reply; a NULL RPC; an inline call and reply with arguments and results; calls
//! whose arguments travel in a Read chunk (the responder's RDMA Read of the requester's memory:
//! 4 KiB, and 1 001 octets XDR-padded in the call stream) and whose results come back in a
//! Write chunk (the responder's RDMA Write: 4 KiB, and 4 095 octets into a receptacle of 8 KiB
//! that must stay untouched past them); a long call (RDMA_NOMSG, three pieces through a
//! Position Zero Read chunk) answered with a long reply (Reply chunk); then 400 calls with the
//! credit window kept full, without an RNR or an error completion anywhere, with persistent
//! STags. In one process also, with memory windows and RFC 8797 remote invalidation, a reply
//! sent with Send with Invalidate that invalidates the requester's STag.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::iwarp::{cfg, connected_pair, connected_pair_with, pdata, qopt, Parts, Side, P};
use common::procs::{self, Peer};
use common::{pattern, rpc_call, rpc_reply};
use rpcrdma_engine::conn::{
    CallSpec, DdpItem, Event, LocalBuf, ReplyKind, ReplySpec, Role, StagMode,
};
use rpcrdma_engine::verbs::{
    CmEventKind, Completion, CompletionQueue, ConnRequest, Device, Listener, MemoryWindow,
    Provider, QpInit, QueuePair, SendFlags, SendOp, SendWr, WcStatus,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn is_call(e: &Event) -> bool {
    matches!(e, Event::CallReady(_))
}

fn is_done(e: &Event) -> bool {
    matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. })
}

/// A NULL RPC: inline call, inline reply.
const NULL: u32 = 0x71;
/// A call with an argument and a reply with a result, both inline.
const INLINE: u32 = 0x51;
/// A WRITE-like call whose 4 KiB argument travels in a Read chunk, answered READ-like with a
/// 4 KiB result in a Write chunk.
const DDP_4K: u32 = 0x72;
/// A READ-like call: inline call, a 4 KiB result in a Write chunk (the call's only STag).
const READ_4K: u32 = 0x73;
/// As [`DDP_4K`] with odd lengths: a 1 001-octet argument (XDR-padded in the call stream) and
/// a 4 095-octet result in a receptacle of 8 KiB, partly used.
const DDP_ODD: u32 = 0x52;
/// A long call (RDMA_NOMSG, three pieces read through a Position Zero Read chunk) answered
/// with a long reply (Reply chunk).
const LONG: u32 = 0x53;
/// The calls made one at a time, in this order.
const SEQUENCE: [u32; 5] = [NULL, INLINE, DDP_4K, DDP_ODD, LONG];
/// Then this many NULL-like calls (XIDs from [`PIPELINE_XID`]), the credit window kept full.
const PIPELINED: u32 = 400;
const PIPELINE_XID: u32 = 1000;
/// The reply buffer a long call offers (its Reply chunk).
const LONG_REPLY: u32 = 32 * 1024;

/// One call of these tests and its reply, known to both sides by XID.
struct Exchange {
    /// The call message, in the pieces the requester gathers it from.
    call: Vec<Vec<u8>>,
    /// The DDP argument (Read chunk) and its offset in the call stream.
    arg: Option<(usize, Vec<u8>)>,
    /// The reply buffer the requester offers.
    reply_cap: u32,
    reply: Vec<u8>,
    /// The DDP result (Write chunk) and the size of the requester's receptacle.
    result: Option<(Vec<u8>, u32)>,
}

fn plain(call: Vec<u8>, reply: Vec<u8>) -> Exchange {
    Exchange {
        call: vec![call],
        arg: None,
        reply_cap: 1024,
        reply,
        result: None,
    }
}

fn ddp(xid: u32, proc_: u32, arg_len: usize, res_len: usize) -> Exchange {
    let mut call = rpc_call(xid, proc_, &words(&[arg_len as u32]));
    let at = call.len();
    call.extend_from_slice(&words(&[0xfeed]));
    Exchange {
        call: vec![call],
        arg: Some((at, pattern(arg_len, 4))),
        reply_cap: 1024,
        reply: rpc_reply(xid, &words(&[res_len as u32])),
        result: Some((pattern(res_len, 9), 8192)),
    }
}

/// The calls of these tests by XID.
fn call_parts(xid: u32) -> Exchange {
    match xid {
        NULL => plain(rpc_call(xid, 0, &[]), rpc_reply(xid, &[])),
        INLINE => plain(
            rpc_call(xid, 0, &[0, 0, 0, 1]),
            rpc_reply(xid, &[0, 0, 0, 2]),
        ),
        DDP_4K => ddp(xid, 7, 4096, 4096),
        DDP_ODD => ddp(xid, 6, 1001, 4095),
        READ_4K => Exchange {
            call: vec![rpc_call(xid, 6, &words(&[4096]))],
            arg: None,
            reply_cap: 1024,
            reply: rpc_reply(xid, &words(&[4096])),
            result: Some((pattern(4096, 9), 8192)),
        },
        LONG => Exchange {
            call: vec![rpc_call(xid, 20, &[]), pattern(3000, 1), pattern(2500, 2)],
            arg: None,
            reply_cap: LONG_REPLY,
            reply: [rpc_reply(xid, &[]), pattern(12_345, 5)].concat(),
            result: None,
        },
        _ => plain(rpc_call(xid, 1, &[]), rpc_reply(xid, &[])),
    }
}

/// A call the requester started: where its result and its reply land.
struct Pending {
    xid: u32,
    receptacle: Option<LocalBuf>,
    reply: LocalBuf,
}

/// Requester: starts call `xid`; `None` (nothing kept) when the credit window is full.
fn try_start(req: &mut Side, now: u64, xid: u32) -> Option<Pending> {
    let x = call_parts(xid);
    let mark = req.host.next;
    let message: Vec<LocalBuf> = x.call.iter().map(|p| req.host.buf_with(p)).collect();
    let ddp: Vec<DdpItem> = x
        .arg
        .iter()
        .map(|(at, a)| DdpItem {
            at: *at as u32,
            buf: req.host.buf_with(a),
        })
        .collect();
    let receptacle = x
        .result
        .as_ref()
        .map(|(_, size)| req.host.buf_with(&vec![0xee; *size as usize]));
    let reply = req.host.alloc(x.reply_cap);
    let spec = CallSpec {
        message: &message,
        ddp: &ddp,
        receptacles: receptacle.as_slice(),
        reply,
    };
    if req.conn.start_call(now, &spec, &mut req.host).is_err() {
        req.host.next = mark;
        return None;
    }
    Some(Pending {
        xid,
        receptacle,
        reply,
    })
}

/// Responder: checks every call that arrived (DDP arguments read over RDMA Read in place,
/// long calls through the Position Zero Read chunk) and answers it (DDP results to be written
/// over RDMA Write, long replies into the Reply chunk). Returns how many it answered.
fn serve(resp: &mut Side, now: u64) -> u32 {
    let mut n = 0;
    while let Some(Event::CallReady(inc)) = resp.take(is_call, |e| e) {
        let x = call_parts(inc.xid);
        let mut want = x.call.concat();
        if let Some((at, a)) = &x.arg {
            let pad = vec![0; (4 - a.len() % 4) % 4];
            want.splice(*at..*at, [&a[..], &pad].concat());
        }
        let stream = resp.host.read(inc.stream);
        assert_eq!(stream, want, "call {:#x} as the responder sees it", inc.xid);
        if x.reply_cap > 4096 {
            assert_eq!(inc.reply_capacity, Some(x.reply_cap), "the Reply chunk");
        }
        let rb = resp.host.buf_with(&x.reply);
        let results: Vec<DdpItem> = x
            .result
            .iter()
            .map(|(r, _)| DdpItem {
                at: x.reply.len() as u32,
                buf: resp.host.buf_with(r),
            })
            .collect();
        let spec = ReplySpec {
            message: &[rb],
            results: &results,
        };
        let kind = resp
            .conn
            .send_reply(now, inc.call, &spec, &mut resp.host)
            .expect("send_reply");
        let long = x.reply.len() > 4096;
        let want = if long {
            ReplyKind::Long
        } else {
            ReplyKind::Inline
        };
        assert_eq!(kind, want, "reply to {:#x}", inc.xid);
        n += 1;
    }
    n
}

/// Requester: checks the reply of call `p` (its DDP result written over RDMA Write, a long
/// reply through the Reply chunk).
fn check_reply(req: &Side, p: &Pending, done: Event) {
    let x = call_parts(p.xid);
    let Event::ReplyReady(rep) = done else {
        panic!("call {:#x} failed: {done:?}", p.xid)
    };
    let got = req.host.read(p.reply.sub(0, rep.len).expect("len"));
    assert_eq!(got, x.reply, "reply to {:#x}", p.xid);
    assert_eq!(rep.long, x.reply.len() > 4096, "long reply to {:#x}", p.xid);
    if let (Some(rec), Some((result, _))) = (p.receptacle, &x.result) {
        assert_eq!(rep.written(), &[result.len() as u32]);
        let got = req.host.read(rec);
        let n = result.len();
        assert_eq!(&got[..n], &result[..], "result written over RDMA Write");
        assert!(got[n..].iter().all(|&b| b == 0xee), "wrote past the result");
    }
}

/// Drives the requester (and, through `other`, a responder in this process) until `done`
/// holds (20 s at most); no error completion may appear.
fn pump_until(
    req: &mut Side,
    now: &mut u64,
    other: &mut dyn FnMut(u64),
    what: &str,
    done: impl Fn(&Side) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(20);
    while !done(req) {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        *now += 1000;
        req.drive(*now);
        assert!(req.errors.is_empty(), "error completions: {:?}", req.errors);
        other(*now);
    }
}

/// The requester's part: the calls of [`SEQUENCE`] one at a time, then [`PIPELINED`] calls
/// with the credit window kept full. `other` drives the responder when it is in this process.
fn requester_script(req: &mut Side, other: &mut dyn FnMut(u64)) {
    let mut now = 0;
    for xid in SEQUENCE {
        let p = try_start(req, now, xid).expect("a credit for one call");
        pump_until(req, &mut now, other, "the reply", |s| {
            s.events.iter().any(is_done)
        });
        let done = req.take(is_done, |e| e).expect("reply");
        check_reply(req, &p, done);
    }
    let (mut next, mut done, mut pending) = (PIPELINE_XID, 0, Vec::new());
    while done < PIPELINED {
        while next < PIPELINE_XID + PIPELINED {
            let Some(p) = try_start(req, now, next) else {
                break;
            };
            pending.push(p);
            next += 1;
        }
        assert!(!pending.is_empty(), "no credit with nothing outstanding");
        pump_until(req, &mut now, other, "replies", |s| {
            s.events.iter().any(is_done)
        });
        while let Some(ev) = req.take(is_done, |e| e) {
            let xid = match &ev {
                Event::ReplyReady(r) => r.xid,
                e => panic!("a pipelined call failed: {e:?}"),
            };
            let i = pending.iter().position(|p| p.xid == xid).expect("pending");
            let p = pending.swap_remove(i);
            check_reply(req, &p, ev);
            done += 1;
        }
    }
}

/// How many calls the responder answers in a whole script.
const ANSWERED: u32 = SEQUENCE.len() as u32 + PIPELINED;

/// Both sides in this process, over a pair connected through the conformance helpers.
#[test]
fn accepts_rpcs_over_iwarp_in_one_process() {
    if procs::is_child() {
        return;
    }
    let (_env, mut req, mut resp) = connected_pair();
    let mut answered = 0;
    requester_script(&mut req, &mut |now| {
        resp.drive(now);
        assert!(resp.errors.is_empty(), "responder: {:?}", resp.errors);
        answered += serve(&mut resp, now);
    });
    assert_eq!(answered, ANSWERED);
}

/// With memory windows and RFC 8797 remote invalidation on both sides, a call whose only STag
/// is its Write chunk is answered with a Send with Invalidate naming that STag (RFC 8797
/// section 4.1): the requester's receive reports the invalidation of one of its windows'
/// STags, and a Write under that STag afterwards is refused: the requester terminates the
/// connection and the result in the receptacle stays as the reply left it.
#[test]
fn accepts_reply_with_invalidate_over_iwarp() {
    if procs::is_child() {
        return;
    }
    let mut rc = cfg();
    rc.stag = StagMode::MemoryWindows;
    rc.remote_invalidate = true;
    let mut sc = cfg();
    sc.remote_invalidate = true;
    let (_env, mut req, mut resp) = connected_pair_with(rc, sc);
    let p = try_start(&mut req, 0, READ_4K).expect("a credit");
    let mut now = 0;
    pump_until(
        &mut req,
        &mut now,
        &mut |now| {
            resp.drive(now);
            serve(&mut resp, now);
        },
        "the reply",
        |s| s.events.iter().any(is_done),
    );
    let done = req.take(is_done, |e| e).expect("reply");
    check_reply(&req, &p, done);
    let rec = p.receptacle.expect("receptacle");
    assert_eq!(req.invalidated.len(), 1, "one Send with Invalidate");
    let stag = req.invalidated[0];
    assert!(
        req.mws.iter().any(|m| m.rkey() == stag),
        "{stag:#x} is a window's STag"
    );
    let sgl = [resp.mem.sge(0, 16)];
    let write = SendWr::<P> {
        wr_id: 0x5a,
        op: SendOp::RdmaWrite {
            remote_addr: rec.addr,
            rkey: stag,
        },
        sgl: &sgl,
        flags: SendFlags::SIGNALED,
    };
    resp.qp.queue_send(&write).expect("queue write");
    resp.qp.flush_send().expect("flush");
    let end = Instant::now() + Duration::from_secs(20);
    let mut wcs = [Completion::default(); 32];
    loop {
        let _ = resp.cq.poll(&mut wcs);
        let _ = req.cq.poll(&mut wcs);
        let ev = req.qp.poll_event().expect("event");
        if ev.is_some_and(|e| e.kind == CmEventKind::Disconnected) {
            break;
        }
        assert!(
            Instant::now() < end,
            "the Write under the invalidated STag was not refused"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(
        req.host.read(rec)[..4096],
        pattern(4096, 9)[..],
        "the receptacle was written after the invalidation"
    );
}

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// The responder process: accepts one connection (posting its receives before the MPA Reply
/// leaves), answers every call until the requester disconnects.
#[test]
#[ignore = "the other process of a two-process test: run by accepts_rpcs_between_two_processes"]
fn responder_process() {
    procs::expect_role("responder_process");
    let dev = P::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 4).expect("listen");
    procs::announce(l.local_addr().port());
    let sc = cfg();
    let pd = Arc::new(dev.alloc_pd().expect("pd"));
    let cq = dev.create_cq(2048).expect("cq");
    let end = Instant::now() + Duration::from_secs(20);
    let req = loop {
        if let Some(r) = l.poll().expect("listener") {
            break r;
        }
        assert!(Instant::now() < end, "no connect request");
        std::thread::sleep(Duration::from_micros(100));
    };
    let mut parts = Parts::new(Role::Responder, sc, pd.clone(), req.private_data());
    let init = QpInit {
        pd: &*pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: qopt(&sc),
    };
    let qp = req
        .accept_prepared(init, &pdata(&sc), &mut |qp| {
            parts.post(qp);
            Ok(())
        })
        .expect("accept");
    let mut resp = parts.attach(qp, cq);
    let (mut now, mut answered) = (0, 0);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        now += 1000;
        resp.drive(now);
        answered += serve(&mut resp, now);
        let ev = resp.qp.poll_event().expect("event");
        if ev.is_some_and(|e| e.kind == CmEventKind::Disconnected) {
            // The receives still posted flush; nothing else may have failed.
            let flushed = |w: &Completion| w.status == WcStatus::WR_FLUSH_ERR;
            assert!(resp.errors.iter().all(flushed), "{:?}", resp.errors);
            break;
        }
        assert!(
            resp.errors.is_empty(),
            "error completions: {:?}",
            resp.errors
        );
        assert!(Instant::now() < end, "no disconnect");
    }
    assert_eq!(answered, ANSWERED, "calls answered");
    println!("RESPONDER OK");
}

/// Requester and responder in two processes: every call of the script.
#[test]
fn accepts_rpcs_between_two_processes() {
    if procs::is_child() {
        return;
    }
    let peer = Peer::spawn("responder_process");
    let dev = P::open(lo()).expect("open");
    let rc = cfg();
    let pd = Arc::new(dev.alloc_pd().expect("pd"));
    let cq = dev.create_cq(2048).expect("cq");
    let init = QpInit {
        pd: &*pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: qopt(&rc),
    };
    let addr = SocketAddr::new(lo(), peer.port());
    let mut qp = dev.connect(addr, init, &pdata(&rc)).expect("connect");
    let end = Instant::now() + Duration::from_secs(20);
    let ev = loop {
        if let Some(ev) = qp.poll_event().expect("event") {
            break ev;
        }
        assert!(Instant::now() < end, "not established");
        std::thread::sleep(Duration::from_micros(100));
    };
    assert_eq!(ev.kind, CmEventKind::Established);
    assert_eq!(
        ev.private_data.as_slice(),
        pdata(&cfg()),
        "RFC 8797 data in the MPA Reply"
    );
    let mut req = Parts::new(Role::Requester, rc, pd, ev.private_data.as_slice()).attach(qp, cq);
    requester_script(&mut req, &mut |_| {});
    req.qp.disconnect().expect("disconnect");
    peer.finish("RESPONDER OK");
}
