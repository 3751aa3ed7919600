//! Hostile peers against the real [`Server`] (issue 13 §3): raw soft-provider QPs
//! (`hostile_raw`) send malformed RPC-over-RDMA headers of every kind (Version One and Two),
//! overrun their credits, repeat XIDs, lie in their RFC 8797 private data, and send stray
//! backward replies. Each case asserts the outcome the specs prescribe (RFC 8166 §§4–5 and 7,
//! the implementation-experience draft, RFC 8167, RFC 8797, the Version Two draft) — an
//! RDMA_ERROR with the offending XID and version, a silent drop, a reply, or the loss of that
//! connection alone — and then that an honest [`Client`] on another connection is still served,
//! every one of its calls completing exactly once with the right result.
//!
//! Guessed keys, Send With Invalidate and the server's memory exposure are in
//! `hostile_server_mem.rs`.
//!
//! Normal operation of the suite: one soft fabric per test, the server on 10.0.0.2, the honest
//! client on 10.0.0.1, the raw peers on 10.0.0.3; each hostile case runs on a connection of its
//! own. Recovery: a case that leaves its connection up closes it and waits until the server
//! has counted the loss, so the server's connection slots never run out.

mod api_common;
mod hostile_raw;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use api_common::*;
use hostile_raw::*;
use rpcrdma_engine::proto::chunks::{ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::soft::SoftDevice;
use rpcrdma_engine::verbs::{QpState, QueuePair, WcStatus};
use rpcrdma_poller::{
    Client, ClientOptions, Program, Reject, ReplyBuilder, Request, Server, ServerOptions,
};

/// Forward procedure KICK: sends one backward call (CB_PROG/CB_PROC, argument 7) on the
/// caller's backchannel; its outcome is recorded in the rig's `back` list. Replies 0.
const KICK: u32 = 30;
const CB_PROG: u32 = 0x4000_0077;
const CB_PROC: u32 = 1;

/// The outcomes of backward calls (Ok(result word) or the error text).
type BackLog = Arc<Mutex<Vec<Result<u32, String>>>>;

/// A server, an honest client on another connection, and a device for raw peers.
struct Rig {
    w: World,
    server: Server,
    honest: Client,
    raw: SoftDevice,
    back: BackLog,
}

fn rig(opts: ServerOptions) -> Rig {
    let w = World::new(0);
    let back: BackLog = Arc::new(Mutex::new(Vec::new()));
    let b2 = Arc::clone(&back);
    let prog: Program = program(w.server_ep.buffers().clone()).procedure(
        KICK,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let bc = req.backchannel().ok_or(Reject::SystemErr)?;
            bc.enable();
            let mut a = bc.args().ok_or(Reject::SystemErr)?;
            a.put_u32(7).map_err(|_| Reject::SystemErr)?;
            let log = Arc::clone(&b2);
            bc.call(CB_PROG, 1, CB_PROC, a, move |r| {
                let v = match r {
                    Ok(rep) => match rep.results().try_into() {
                        Ok(b) => Ok(u32::from_be_bytes(b)),
                        Err(_) => Err(format!("results {:?}", rep.results())),
                    },
                    Err(e) => Err(format!("{e:?}")),
                };
                log.lock().unwrap().push(v);
            })
            .map_err(|_| Reject::SystemErr)?;
            out.put_u32(0).map_err(|_| Reject::SystemErr)
        },
    );
    let server = Server::builder()
        .program(prog)
        .options(opts)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let honest = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(honest.wait_connected(Duration::from_secs(10)));
    let raw = w.fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
    Rig {
        w,
        server,
        honest,
        raw,
        back,
    }
}

impl Rig {
    /// A raw peer with RFC 8797 data advertising 4096 both ways.
    fn peer(&self) -> RawPeer {
        self.peer_with(&pd_v1(4096, 4096), RawOpts::default())
    }

    fn peer_with(&self, pd: &[u8], o: RawOpts) -> RawPeer {
        RawPeer::connect(&self.raw, self.w.addr, pd, o).expect("raw peer connects")
    }

    /// Waits until the server has counted every connection but the honest one as lost.
    fn wait_only_honest_left(&self, what: &str) {
        wait_until(what, || {
            let t = self.server.totals();
            self.server.accepted() == t.connection_losses + 1
        });
    }

    /// Closes `p` and waits until the server counted the loss.
    fn close(&self, mut p: RawPeer, what: &str) {
        let _ = p.qp.disconnect();
        drop(p);
        self.wait_only_honest_left(what);
    }

    /// `n` SUM calls on the honest client: every one completes once with the right result.
    fn honest_round(&self, n: usize, what: &str) {
        let t = Tally::new(n);
        for i in 0..n {
            let mut a = loop {
                match self.honest.args() {
                    Some(a) => break a,
                    None => std::thread::sleep(Duration::from_micros(100)),
                }
            };
            a.put_u32(i as u32).unwrap();
            a.put_u32(1).unwrap();
            let t2 = Arc::clone(&t);
            let mut args = a;
            loop {
                let t3 = Arc::clone(&t2);
                match self.honest.call(PROG, 2, SUM, args, move |r| {
                    t3.record(i, &r, i as u32 + 1)
                }) {
                    Ok(()) => break,
                    Err(r) => {
                        args = r.args;
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
        t.wait(n as u64, 20, what);
        t.all_ok_exactly_once(n, what);
    }

    fn stop(self) {
        self.w.stop();
    }
}

/// Honest traffic running in the background for the whole test: SUM calls, four at a time.
struct Liveness {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
    tally: Arc<Tally>,
}

const LIVE_CAP: usize = 200_000;

fn liveness(c: &Client) -> Liveness {
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Tally::new(LIVE_CAP);
    let (s2, t2, c2) = (Arc::clone(&stop), Arc::clone(&tally), c.clone());
    let thread = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s2.load(Ordering::SeqCst) && (i as usize) < LIVE_CAP {
            if i - t2.done() >= 4 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let Some(mut a) = c2.args() else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            a.put_u32(i as u32).unwrap();
            a.put_u32(1).unwrap();
            let t3 = Arc::clone(&t2);
            let k = i as usize;
            match c2.call(PROG, 2, SUM, a, move |r| t3.record(k, &r, k as u32 + 1)) {
                Ok(()) => i += 1,
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        i
    });
    Liveness {
        stop,
        thread,
        tally,
    }
}

impl Liveness {
    /// Stops issuing, waits for the calls issued, and checks each completed once, correctly.
    fn finish(self, what: &str) {
        self.stop.store(true, Ordering::SeqCst);
        let issued = self.thread.join().expect("liveness thread");
        assert!(issued > 0, "{what}: no honest call was made");
        self.tally.wait(issued, 20, what);
        let seen = self.tally.seen.lock().unwrap();
        assert!(
            seen[..issued as usize].iter().all(|&c| c == 1),
            "{what}: honest calls not completed exactly once"
        );
        assert!(seen[issued as usize..].iter().all(|&c| c == 0));
        assert_eq!(self.tally.bad.load(Ordering::SeqCst), 0, "{what}: wrong");
        assert_eq!(
            self.tally.ok.load(Ordering::SeqCst),
            issued,
            "{what}: honest errors {:?}",
            self.tally.errors.lock().unwrap()
        );
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A valid SUM(a, b) call in Version One.
fn sum_v1(xid: u32, a: u32, b: u32) -> Vec<u8> {
    v1_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(xid, PROG, 2, SUM, &words(&[a, b])),
    )
}

/// A valid SUM(a, b) call in Version Two.
fn sum_v2(xid: u32, a: u32, b: u32) -> Vec<u8> {
    v2_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(xid, PROG, 2, SUM, &words(&[a, b])),
    )
}

/// Asserts that `msg` is the successful reply to `xid` in version `vers` with result `sum`.
fn assert_sum_reply(msg: &[u8], xid: u32, vers: u32, sum: u32, what: &str) {
    match decode(msg) {
        Answer::Reply {
            xid: x,
            vers: v,
            stat: Some(AcceptStat::Success),
            results,
            ..
        } => {
            assert_eq!((x, v), (xid, vers), "{what}: reply XID / version");
            assert_eq!(results, sum.to_be_bytes(), "{what}: result");
        }
        other => panic!("{what}: expected the reply to {xid:#x}, got {other:?}"),
    }
}

/// What the server must do with a hostile message.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Version One ERR_CHUNK with the message's XID (RFC 8166 §4.4.2, §5: `rdma_vers` copied).
    ErrChunk,
    /// ERR_VERS with the message's XID and version and the range 1..=2 (RFC 8166 §4.4.1; the
    /// layout is fixed for every version, §7).
    ErrVers,
    /// RDMA2_ERROR with this code (draft, "Transport Errors").
    V2Err(u32),
    /// No answer; the connection goes on (the next call's reply is the next message).
    Drop,
    /// Served: SUM(20, 22) answered with 42 in Version One.
    Served,
    /// An accepted RPC reply with this status (the RPC layer judged the message).
    Rpc(AcceptStat),
    /// An RPC MSG_DENIED reply (RPC_MISMATCH).
    Denied,
}

const W_MSG: u32 = 0;
const W_NOMSG: u32 = 1;

/// One hostile message per connection, then a valid call on the same connection (answered,
/// and after a dropped message it is the first thing that comes back).
fn run_cases(r: &Rig, cases: &[(&str, Vec<u8>, u32, u32, Want)]) {
    for (k, (name, msg, xid, vers, want)) in cases.iter().enumerate() {
        let mut p = r.peer();
        p.send(msg);
        let follow = 0x7000_0000 + k as u32;
        match *want {
            Want::Drop => {}
            Want::ErrChunk | Want::ErrVers | Want::V2Err(_) => {
                let body = match want {
                    Want::ErrChunk => vec![2],
                    Want::ErrVers => vec![1, 1, 2],
                    Want::V2Err(c) => vec![*c],
                    _ => unreachable!(),
                };
                let got = decode(&p.recv_msg(name));
                assert_eq!(
                    got,
                    Answer::Error {
                        xid: *xid,
                        vers: *vers,
                        body
                    },
                    "{name}"
                );
            }
            Want::Served => assert_sum_reply(&p.recv_msg(name), *xid, 1, 42, name),
            Want::Rpc(stat) => match decode(&p.recv_msg(name)) {
                Answer::Reply {
                    xid: x,
                    stat: Some(s),
                    results,
                    ..
                } => {
                    assert_eq!((x, s), (*xid, stat), "{name}");
                    assert!(results.is_empty(), "{name}: no results with {s:?}");
                }
                other => panic!("{name}: expected an RPC {stat:?}, got {other:?}"),
            },
            Want::Denied => match decode(&p.recv_msg(name)) {
                Answer::Reply {
                    xid: x, stat: None, ..
                } => assert_eq!(x, *xid, "{name}"),
                other => panic!("{name}: expected MSG_DENIED, got {other:?}"),
            },
        }
        // The connection is still served; after a drop nothing else came first.
        p.send(&sum_v1(follow, 40, k as u32));
        assert_sum_reply(
            &p.recv_msg(name),
            follow,
            1,
            40 + k as u32,
            &format!("{name}: next call"),
        );
        assert_eq!(
            p.recv(Duration::from_millis(20)),
            Err(RecvEnd::Timeout),
            "{name}: nothing more"
        );
        assert_eq!(p.state(), QpState::Rts, "{name}");
        r.close(p, name);
    }
}

/// The fixed words of a Version One header.
fn fixed(xid: u32, proc_: u32) -> Vec<u32> {
    vec![xid, 1, 1, proc_]
}

fn cat(a: &[u32], b: &[u8]) -> Vec<u8> {
    let mut v = words(a);
    v.extend_from_slice(b);
    v
}

/// Every malformed Version One header, one per connection (RFC 8166 §4.4, §4.5, §5; IE §3.6,
/// §7.1; RFC 8167 §5.3): short messages and RDMA_MSG without a payload are dropped (the 8–15
/// octet case with readable XID and version included: docs/conformance.md V1-02, BI-12), a
/// bad version is answered ERR_VERS, unknown procedures and every chunk-list violation
/// ERR_CHUNK, RDMA_MSGP is served like RDMA_MSG (IE §7.1.3, V1-18), RDMA_DONE and RDMA_ERROR
/// are never answered, an RPC message that is not a CALL is dropped, and garbage in the RPC
/// header is answered by the RPC layer.
#[test]
fn rejects_malformed_v1_headers_each_as_rfc_8166_prescribes() {
    let r = rig(ServerOptions::default());
    let live = liveness(&r.honest);
    let call = |x: u32| rpc_call(x, PROG, 2, SUM, &words(&[20, 22]));
    let seg = |h: u32| [h, 64, 0, 0x1000];
    let mut cases: Vec<(&str, Vec<u8>, u32, u32, Want)> = vec![
        ("empty Send", vec![], 0, 0, Want::Drop),
        ("4 octets", words(&[0x11]), 0x11, 0, Want::Drop),
        ("7 octets", vec![0, 0, 0, 0x12, 0, 0, 0], 0x12, 0, Want::Drop),
        ("8 octets", words(&[0x13, 1]), 0x13, 1, Want::Drop),
        ("12 octets", words(&[0x14, 1, 1]), 0x14, 1, Want::Drop),
        (
            "15 octets",
            words(&[0x15, 1, 1, 0])[..15].to_vec(),
            0x15,
            1,
            Want::Drop,
        ),
    ];
    for (x, v) in [(0x21, 0u32), (0x22, 3), (0x23, 0xffff_ffff)] {
        let mut m = sum_v1(x, 20, 22);
        m[4..8].copy_from_slice(&v.to_be_bytes());
        cases.push(("bad version", m, x, v, Want::ErrVers));
    }
    for (x, p) in [(0x31, 5u32), (0x32, 0xdead)] {
        cases.push((
            "unknown procedure",
            cat(&fixed(x, p), &[0; 12]),
            x,
            1,
            Want::ErrChunk,
        ));
    }
    let x = 0x41;
    cases.push((
        "read list discriminator 2",
        cat(&[x, 1, 1, W_MSG, 2, 0, 0], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x42;
    cases.push((
        "write list discriminator 7",
        cat(&[x, 1, 1, W_MSG, 0, 7, 0], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x43;
    cases.push((
        "reply chunk discriminator 0xffffffff",
        cat(&[x, 1, 1, W_MSG, 0, 0, 0xffff_ffff], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x44;
    cases.push((
        "truncated read segment",
        words(&[x, 1, 1, W_MSG, 1, 0, 0x1234]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x45;
    cases.push((
        "truncated write segment",
        words(&[x, 1, 1, W_MSG, 0, 1, 2, 0x1234, 64, 0, 0x1000, 0x99]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x46;
    cases.push((
        "write chunk of 0xffffffff segments",
        cat(&[x, 1, 1, W_MSG, 0, 1, 0xffff_ffff], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x47;
    cases.push((
        "reply chunk of 0x40000000 segments",
        cat(&[x, 1, 1, W_MSG, 0, 0, 1, 0x4000_0000], &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x48;
    let mut five = vec![x, 1, 1, W_MSG, 0];
    for i in 0..5 {
        five.extend([1, 1]);
        five.extend(seg(0x500 + i));
    }
    five.extend([0, 0]);
    cases.push((
        "five write chunks",
        cat(&five, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x49;
    let mut pz = vec![x, 1, 1, W_MSG, 1, 0];
    pz.extend(seg(0x600));
    pz.extend([0, 0, 0]);
    cases.push((
        "Position Zero Read chunk in RDMA_MSG with the call inline",
        cat(&pz, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4a;
    let mut mis = vec![x, 1, 1, W_MSG, 1, 64];
    mis.extend(seg(0x601));
    mis.extend([1, 32]);
    mis.extend(seg(0x602));
    mis.extend([0, 0, 0]);
    cases.push((
        "read positions out of order",
        cat(&mis, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4b;
    let mut ov = vec![x, 1, 1, W_MSG, 1, 32];
    ov.extend(seg(0x603)); // 32..96
    ov.extend([1, 48]);
    ov.extend(seg(0x604)); // starts inside it
    ov.extend([0, 0, 0]);
    cases.push((
        "overlapping read chunks",
        cat(&ov, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4c;
    let mut ma = vec![x, 1, 1, W_MSG, 1, 33];
    ma.extend(seg(0x605));
    ma.extend([0, 0, 0]);
    cases.push((
        "misaligned read position",
        cat(&ma, &call(x)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x4d;
    cases.push((
        "segment whose offset + length overflows",
        cat(
            &[
                x,
                1,
                1,
                W_MSG,
                0,
                1,
                1,
                0x700,
                0x100,
                0xffff_ffff,
                0xffff_fff0,
                0,
                0,
            ],
            &call(x),
        ),
        x,
        1,
        Want::ErrChunk,
    ));
    // Write list and Reply chunk together, with handles that reach nothing: legal in the
    // header, and a reply that fits inline uses neither (RFC 8166 §3.5.2): served.
    let x = 0x4e;
    let ws = [Segment::new(0xdead_0001, 64, 0x1000)];
    let wl: [&[Segment]; 1] = [&ws];
    let rs = [Segment::new(0xdead_0002, 1024, 0x2000)];
    cases.push((
        "write list and reply chunk with dead handles",
        v1_msg(
            x,
            1,
            ChunkListsRef {
                reads: &[],
                writes: &wl,
                reply: Some(&rs),
            },
            &call(x),
        ),
        x,
        1,
        Want::Served,
    ));
    let x = 0x51;
    cases.push((
        "RDMA_MSG without payload",
        words(&[x, 1, 1, W_MSG, 0, 0, 0]),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x52;
    cases.push((
        "RDMA_MSG with a 4-octet payload",
        words(&[x, 1, 1, W_MSG, 0, 0, 0, x]),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x53;
    cases.push((
        "RDMA_NOMSG without chunks",
        words(&[x, 1, 1, W_NOMSG, 0, 0, 0]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x54;
    let mut nw = vec![x, 1, 1, W_NOMSG, 0, 1, 1];
    nw.extend(seg(0x606));
    nw.extend([0, 0]);
    cases.push((
        "RDMA_NOMSG with only a Write list",
        words(&nw),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x55;
    let mut nr = vec![x, 1, 1, W_NOMSG, 0, 0, 1, 1];
    nr.extend(seg(0x607));
    cases.push((
        "RDMA_NOMSG call with only a Reply chunk",
        words(&nr),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x56;
    cases.push((
        "RDMA_MSGP",
        cat(&[x, 1, 1, 2, 64, 4096, 0, 0, 0], &call(x)),
        x,
        1,
        Want::Served,
    ));
    let x = 0x57;
    cases.push((
        "RDMA_MSGP cut before its alignment words",
        words(&[x, 1, 1, 2, 64]),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x58;
    cases.push((
        "RDMA_DONE",
        words(&[x, 1, 1, 3]),
        x,
        1,
        Want::Drop,
    ));
    for (x, body) in [
        (0x59, vec![2]),
        (0x5a, vec![1, 1, 1]),
        (0x5b, vec![1]),
        (0x5c, vec![77]),
    ] {
        cases.push((
            "RDMA_ERROR sent to a server",
            cat(&fixed(x, 4), &words(&body)),
            x,
            1,
            Want::Drop,
        ));
    }
    let x = 0x61;
    cases.push((
        "RPC XID differs from the transport XID",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &call(x + 1)),
        x,
        1,
        Want::ErrChunk,
    ));
    let x = 0x62;
    cases.push((
        "RPC message that is a REPLY (no backchannel)",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &rpc_reply(x, &[0; 4])),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x63;
    cases.push((
        "RPC msg_type 9",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &words(&[x, 9, 2, PROG, 2, SUM])),
        x,
        1,
        Want::Drop,
    ));
    let x = 0x64;
    cases.push((
        "garbage after the header: rpcvers 7",
        v1_msg(
            x,
            1,
            ChunkListsRef::EMPTY,
            &words(&[x, 0, 7, PROG, 2, SUM, 0, 0, 0, 0]),
        ),
        x,
        1,
        Want::Denied,
    ));
    let x = 0x65;
    cases.push((
        "garbage after the header: RPC call header cut short",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &words(&[x, 0, 2, PROG, 2])),
        x,
        1,
        Want::Rpc(AcceptStat::GarbageArgs),
    ));
    let x = 0x66;
    let mut junk = call(x);
    junk.extend_from_slice(&[0xa5; 3]);
    cases.push((
        "garbage after the header: ragged arguments",
        v1_msg(x, 1, ChunkListsRef::EMPTY, &junk),
        x,
        1,
        Want::Rpc(AcceptStat::GarbageArgs),
    ));
    run_cases(&r, &cases);
    r.honest_round(32, "after the malformed v1 headers");
    live.finish("malformed v1 headers");
    let t = r.server.totals();
    assert_eq!(t.connection_losses, r.server.accepted() - 1);
    r.stop();
}

/// Version Two fixed words and the chunk-list preamble: XID, version 2, credits, procedure.
fn fixed2(xid: u32, proc_: u32) -> Vec<u32> {
    vec![xid, 2, 1, proc_]
}

/// Every malformed Version Two header, one per connection (draft, "Transport Errors",
/// "Message Direction", "Presence Of Payload", "Optional Features"): an unknown procedure is
/// answered RDMA2_ERR_INVAL_PROC, an unparsable header (bad direction, truncation, chunk-list
/// violations, an `rdma_inv_handle` not among the chunks, a direction that differs from the
/// RPC `msg_type`, a malformed `rdma_optinfo`) RDMA2_ERR_BAD_XDR, an RDMA2_OPTIONAL CALL of an
/// unknown type RDMA2_ERR_INVAL_OPTION; an RDMA2_MSG without payload, an RDMA2_ERROR sent to a
/// server and an RDMA2_OPTIONAL REPLY of an unknown type are dropped (the last is issue 13
/// §1.7's open decision: the draft's MUST names no direction; docs/conformance.md V2 rows).
#[test]
fn rejects_malformed_v2_headers_each_as_the_draft_prescribes() {
    let r = rig(ServerOptions::default());
    let live = liveness(&r.honest);
    let call = |x: u32| rpc_call(x, PROG, 2, SUM, &words(&[20, 22]));
    const BAD_XDR: u32 = 2;
    const INVAL_PROC: u32 = 4;
    const INVAL_OPTION: u32 = 5;
    const OPT: u32 = 5;
    let mut cases: Vec<(&str, Vec<u8>, u32, u32, Want)> = Vec::new();
    for (x, p) in [(0x101, 2u32), (0x102, 3), (0x103, 0x7777)] {
        cases.push((
            "v2 unknown procedure",
            cat(&fixed2(x, p), &[0; 16]),
            x,
            2,
            Want::V2Err(INVAL_PROC),
        ));
    }
    let x = 0x111;
    let mut m = fixed2(x, W_MSG);
    m.extend([5, 0, 0, 0, 0]);
    cases.push((
        "v2 rdma_direction 5",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x112;
    let mut m = fixed2(x, W_MSG);
    m.push(0);
    cases.push((
        "v2 cut after rdma_direction",
        words(&m),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x113;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0, 3, 0, 0]);
    cases.push((
        "v2 read list discriminator 3",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x114;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0, 1, 0, 0x800, 64, 0, 0x1000, 0, 0, 0]);
    cases.push((
        "v2 Position Zero Read chunk in RDMA2_MSG",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x115;
    let mut m = fixed2(x, W_NOMSG);
    m.extend([0, 0, 0, 0, 0]);
    cases.push((
        "v2 RDMA2_NOMSG call without Position Zero",
        words(&m),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x116;
    let mut m = fixed2(x, W_MSG);
    m.extend([0, 0xdead_beef, 0, 0, 0]);
    cases.push((
        "v2 rdma_inv_handle not among the chunks",
        cat(&m, &call(x)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x117;
    cases.push((
        "v2 direction CALL with an RPC REPLY",
        v2_msg(x, 1, ChunkListsRef::EMPTY, &rpc_reply(x, &[0; 4])),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x118;
    cases.push((
        "v2 RDMA2_MSG without payload",
        words(&[x, 2, 1, W_MSG, 0, 0, 0, 0, 0]),
        x,
        2,
        Want::Drop,
    ));
    let x = 0x119;
    cases.push((
        "v2 XID mismatch",
        v2_msg(x, 1, ChunkListsRef::EMPTY, &call(x ^ 1)),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    for (x, body) in [(0x121, vec![2]), (0x122, vec![3, 1, 1, 64]), (0x123, vec![9])] {
        cases.push((
            "v2 RDMA2_ERROR sent to a server",
            cat(&fixed2(x, 4), &words(&body)),
            x,
            2,
            Want::Drop,
        ));
    }
    let x = 0x131;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL of an unknown type",
        words(&[x, 2, 1, OPT, 0, 0x5151, 4, 0xabcd]),
        x,
        2,
        Want::V2Err(INVAL_OPTION),
    ));
    let x = 0x132;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL of an unknown type with an RPC call",
        cat(&[x, 2, 1, OPT, 0, 0x5152, 0], &call(x)),
        x,
        2,
        Want::V2Err(INVAL_OPTION),
    ));
    let x = 0x133;
    cases.push((
        "v2 RDMA2_OPTIONAL REPLY of an unknown type",
        words(&[x, 2, 1, OPT, 1, 0x5153, 0]),
        x,
        2,
        Want::Drop,
    ));
    let x = 0x134;
    cases.push((
        "v2 RDMA2_OPTIONAL rdma_optdir 9",
        words(&[x, 2, 1, OPT, 9, 0x5154, 0]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x135;
    cases.push((
        "v2 rdma_optinfo longer than the message",
        words(&[x, 2, 1, OPT, 0, 0x5155, 64, 1, 2]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x136;
    cases.push((
        "v2 rdma_optinfo of 0xfffffff0 octets",
        words(&[x, 2, 1, OPT, 0, 0x5156, 0xffff_fff0, 1, 2]),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x137;
    let mut m = words(&[x, 2, 1, OPT, 0, 0x5157, 3]);
    m.extend_from_slice(&[1, 2, 3, 0xff]);
    cases.push((
        "v2 rdma_optinfo with a non-zero pad",
        m,
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x138;
    cases.push((
        "v2 rdma_optinfo cut inside its length word",
        words(&[x, 2, 1, OPT, 0, 0x5158])
            .into_iter()
            .chain([0, 0])
            .collect(),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    let x = 0x139;
    cases.push((
        "v2 RDMA2_OPTIONAL CALL carrying an RPC REPLY",
        cat(&[x, 2, 1, OPT, 0, 0x5159, 0], &rpc_reply(x, &[0; 4])),
        x,
        2,
        Want::V2Err(BAD_XDR),
    ));
    run_cases(&r, &cases);
    // A valid Version Two call after all that, on a fresh connection.
    let mut p = r.peer();
    p.send(&sum_v2(0x1ff, 1, 2));
    assert_sum_reply(&p.recv_msg("v2 call"), 0x1ff, 2, 3, "v2 call");
    r.close(p, "v2 call");
    r.honest_round(32, "after the malformed v2 headers");
    live.finish("malformed v2 headers");
    r.stop();
}

/// Server credits in the credit tests.
const CREDITS: u32 = 4;

fn small_credits() -> ServerOptions {
    ServerOptions {
        credits: CREDITS,
        ..ServerOptions::default()
    }
}

/// A requester that overruns its credits and never takes its replies (RFC 8166 §3.3.1: "the
/// responder MAY terminate the connection"; a requester "MUST NOT" send more than granted):
/// the server keeps its granted receives and no more, so once the receives it owns are all
/// held by the violator's calls the next Send finds none and fails with RNR_RETRY_EXC_ERR
/// (the server asks RNR retry 0 in its accept): the violator alone is cut off, with at most
/// `3 × credits` calls taken in (every receive buffer of the connection). Calls posted after
/// the cut are flushed and never reach the server. Honest traffic goes on throughout.
fn overrun_and_stall(r: &Rig, v2: bool) {
    let what = if v2 { "v2 overrun" } else { "v1 overrun" };
    let mut p = r.peer_with(
        &pd_v1(4096, 4096),
        RawOpts {
            recvs: 1,
            recv_size: 4096,
            // The server's replies to this peer wait for receives forever.
            rnr_retry: 7,
        },
    );
    let n = 4 * CREDITS + 16;
    let ids: Vec<u64> = (0..n)
        .map(|i| {
            let x = 0x9000 + i;
            p.send(&if v2 { sum_v2(x, i, 1) } else { sum_v1(x, i, 1) })
        })
        .collect();
    let wcs: Vec<WcStatus> = ids.iter().map(|&w| p.wait_send(w).status).collect();
    let ok = wcs.iter().take_while(|s| **s == WcStatus::SUCCESS).count();
    assert!(ok >= CREDITS as usize, "{what}: the granted calls went in");
    assert!(
        ok <= 3 * CREDITS as usize,
        "{what}: {ok} calls taken in: more than the connection's receive buffers"
    );
    assert_eq!(wcs[ok], WcStatus::RNR_RETRY_EXC_ERR, "{what}: {wcs:?}");
    assert!(
        wcs[ok + 1..].iter().all(|s| *s == WcStatus::WR_FLUSH_ERR),
        "{what}: {wcs:?}"
    );
    assert!(p.wait_down(), "{what}: cut off");
    assert_eq!(p.state(), QpState::Error);
    r.wait_only_honest_left(what);
    // The violator's connection (the last accepted) took in no more than its receives.
    let mine = || r.server.connection_stats().last().copied().expect("stats");
    let calls = mine().calls;
    assert!(calls <= 3 * u64::from(CREDITS), "{what}: {calls} calls taken in");
    assert_eq!(mine().connection_losses, 1);
    // Calls after the cut: flushed, never delivered.
    let late = p.send(&sum_v1(0x9fff, 1, 1));
    assert_eq!(p.wait_send(late).status, WcStatus::WR_FLUSH_ERR);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(mine().calls, calls, "{what}: nothing after the cut");
    r.honest_round(16, what);
}

/// Credit overruns in both versions (RFC 8166 §3.3.1; v2 draft, "Flow Control" keeps the
/// rule): the violator alone is cut off, other connections keep being served.
#[test]
fn rejects_credit_overruns_by_cutting_off_the_violator_alone() {
    let r = rig(small_credits());
    let live = liveness(&r.honest);
    overrun_and_stall(&r, false);
    overrun_and_stall(&r, true);
    // A burst far beyond the grant from a peer that does take its replies: the server may
    // serve it (each call answered once, correctly) or cut it off (RNR at the requester);
    // either way nothing else is disturbed.
    let mut p = r.peer_with(
        &pd_v1(4096, 4096),
        RawOpts {
            recvs: 256,
            recv_size: 4096,
            rnr_retry: 7,
        },
    );
    let n = 200u32;
    let ids: Vec<u64> = (0..n).map(|i| p.send(&sum_v1(0xa000 + i, i, 2))).collect();
    let wcs: Vec<WcStatus> = ids.iter().map(|&w| p.wait_send(w).status).collect();
    let ok = wcs.iter().take_while(|s| **s == WcStatus::SUCCESS).count();
    if ok < n as usize {
        assert_eq!(wcs[ok], WcStatus::RNR_RETRY_EXC_ERR, "burst: {wcs:?}");
        assert!(p.wait_down());
    }
    let mut seen = vec![0u32; n as usize];
    while let Ok(m) = p.recv(Duration::from_millis(if ok == n as usize {
        10_000
    } else {
        50
    })) {
        match decode(&m) {
            Answer::Reply {
                xid,
                stat: Some(AcceptStat::Success),
                results,
                credits,
                ..
            } if (0xa000..0xa000 + n).contains(&xid) => {
                let i = xid - 0xa000;
                assert_eq!(results, (i + 2).to_be_bytes(), "burst reply {i}");
                assert_eq!(credits, CREDITS, "the grant stays the configured one");
                seen[i as usize] += 1;
            }
            other => panic!("burst: unexpected {other:?}"),
        }
        if seen.iter().take(ok).all(|&c| c == 1) && ok == n as usize {
            break;
        }
    }
    assert!(seen.iter().all(|&c| c <= 1), "a call answered twice");
    if ok == n as usize {
        assert!(seen.iter().all(|&c| c == 1), "served: every call answered");
        r.close(p, "burst");
    } else {
        r.wait_only_honest_left("burst cut off");
    }
    r.honest_round(16, "after the overruns");
    live.finish("credit overruns");
    r.stop();
}

/// Duplicate XIDs in flight (RFC 8166 §4.2.1: the XID only matches a reply to its call;
/// detecting retransmissions is the upper layer's business): two calls with one XID are two
/// calls, each answered once with its own result, in order; hostile `rdma_credit` requests (0,
/// 0xffffffff) never change the grant the server sends (RFC 8166 §3.3.1: the responder
/// decides; the value of a Version Two call likewise).
#[test]
fn accepts_duplicate_xids_and_hostile_credit_requests_without_disturbance() {
    let r = rig(small_credits());
    let live = liveness(&r.honest);
    for v2 in [false, true] {
        let vers = if v2 { 2 } else { 1 };
        let mk = |x, a, b| if v2 { sum_v2(x, a, b) } else { sum_v1(x, a, b) };
        let mut p = r.peer();
        let x = 0x4242;
        p.send(&mk(x, 1, 2));
        p.send(&mk(x, 3, 4));
        p.send(&mk(x, 5, 6));
        for (k, want) in [3u32, 7, 11].into_iter().enumerate() {
            assert_sum_reply(&p.recv_msg("dup"), x, vers, want, &format!("dup {k}"));
        }
        for (k, asked) in [0u32, 0xffff_ffff, 1000].into_iter().enumerate() {
            let x = 0x4300 + k as u32;
            let mut m = mk(x, k as u32, 1);
            m[8..12].copy_from_slice(&asked.to_be_bytes());
            p.send(&m);
            let got = p.recv_msg("credit request");
            assert_sum_reply(&got, x, vers, k as u32 + 1, "credit request");
            assert_eq!(word(&got, 2), Some(CREDITS), "grant after asking {asked}");
        }
        assert_eq!(p.recv(Duration::from_millis(20)), Err(RecvEnd::Timeout));
        r.close(p, "dup");
    }
    r.honest_round(16, "after duplicate XIDs");
    live.finish("duplicate XIDs");
    r.stop();
}
