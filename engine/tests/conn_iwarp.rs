//! The connection engine end to end over the iWARP provider (RDMAP/DDP/MPA over loopback TCP),
//! in one process and with requester and responder in two (this test binary runs itself again
//! as the responder when `RPCRDMA_IWARP_ROLE=responder`): RFC 8797 private data in the MPA
//! Request/Reply, a NULL RPC with inline call and reply, and a call whose 4 KiB argument
//! travels in a Read chunk (the responder's RDMA Read of the requester's memory) and whose
//! 4 KiB result comes back in a Write chunk (the responder's RDMA Write), with persistent
//! STags; and, with memory windows and RFC 8797 remote invalidation, a reply sent with Send
//! with Invalidate that invalidates the requester's STag.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pattern, rpc_call, rpc_reply};
use rpcrdma_engine::conn::{
    CallSpec, CmInput, Config, Connection, DdpItem, Event, HostMemory, IncomingCall, LocalBuf,
    Pools, ReplySpec, Role, StagMode,
};
use rpcrdma_engine::post::post_work_requests;
use rpcrdma_engine::verbs::conformance::{self, Buf, PairOpts};
use rpcrdma_engine::verbs::iwarp::{IwarpCq, IwarpEnv, IwarpMw, IwarpPd, IwarpProvider, IwarpQp};
use rpcrdma_engine::verbs::{
    Access, CmEventKind, Completion, CompletionQueue, ConnRequest, Device, Listener, MemoryWindow,
    ProtectionDomain, Provider, QpInit, QpOptions, QueuePair, WcFlags,
};

type P = IwarpProvider;
const REGION: usize = 4 << 20;
const RW: Access = Access(
    Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::MW_BIND.0,
);

/// One side's registered memory, handed out in 64-octet-aligned pieces.
struct Host {
    base: u64,
    len: usize,
    next: u64,
    keys: (u32, u32),
}

impl Host {
    fn alloc(&mut self, len: u32) -> LocalBuf {
        let addr = self.base + self.next;
        self.next += (u64::from(len.max(1)) + 63) & !63;
        assert!(self.next <= self.len as u64, "host region exhausted");
        LocalBuf::new(addr, len, self.keys.0)
    }

    fn buf_with(&mut self, data: &[u8]) -> LocalBuf {
        let b = self.alloc(data.len() as u32);
        self.bytes_mut(b.addr, data.len())
            .expect("inside")
            .copy_from_slice(data);
        b
    }

    fn read(&self, b: LocalBuf) -> Vec<u8> {
        self.bytes(b.addr, b.len as usize).expect("inside").to_vec()
    }

    fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.base && addr - self.base + len as u64 <= self.len as u64
    }
}

impl HostMemory for Host {
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.contains(addr, len) {
            return None;
        }
        // SAFETY: inside the side's registered allocation, which outlives the view; the
        // provider writes it only while this thread polls, never during the view.
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
    }

    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.contains(addr, len) {
            return None;
        }
        // SAFETY: as above; `&mut self` keeps views from overlapping.
        Some(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
    }

    fn remote_key(&self, lkey: u32) -> Option<u32> {
        (lkey == self.keys.0).then_some(self.keys.1)
    }
}

/// A connection over an iWARP QP, with its CQ and memory.
struct Side {
    conn: Connection,
    host: Host,
    qp: IwarpQp,
    cq: IwarpCq,
    events: Vec<Event>,
    errors: Vec<Completion>,
    /// STags invalidated by Sends with Invalidate this side received.
    invalidated: Vec<u32>,
    mws: Vec<IwarpMw>,
    mem: Buf<P>,
    _pd: Arc<IwarpPd>,
}

/// A side's connection and memory before its QP exists.
struct Parts {
    conn: Connection,
    host: Host,
    mws: Vec<IwarpMw>,
    mem: Buf<P>,
    pd: Arc<IwarpPd>,
}

impl Parts {
    /// The connection of `role` with its memory registered in `pd`, told the peer's private
    /// data.
    fn new(role: Role, cfg: Config, pd: Arc<IwarpPd>, peer: &[u8]) -> Parts {
        let mem: Buf<P> = Buf::new(&*pd, REGION, RW).expect("register");
        let keys = mem.keys();
        let mut host = Host {
            base: mem.addr(),
            len: REGION,
            next: 0,
            keys: (keys.lkey, keys.rkey),
        };
        let c = cfg.credits as usize;
        let (nh, nr, nd) = match role {
            Role::Requester => (c, c, 0),
            Role::Responder => (2 * c, 3 * c, c),
        };
        let headers: Vec<LocalBuf> = (0..nh).map(|_| host.alloc(cfg.inline_send)).collect();
        let recv_size = rpcrdma_engine::proto::private_data::representable_size(cfg.inline_recv);
        let recvs: Vec<LocalBuf> = (0..nr).map(|_| host.alloc(recv_size)).collect();
        let data: Vec<LocalBuf> = (0..nd).map(|_| host.alloc(64 * 1024)).collect();
        let nmw = match (role, cfg.stag) {
            (Role::Requester, StagMode::MemoryWindows) => 8 * c,
            _ => 0,
        };
        let mws: Vec<IwarpMw> = (0..nmw).map(|_| pd.alloc_mw().expect("alloc_mw")).collect();
        let mw_keys: Vec<u32> = mws.iter().map(|m| m.rkey()).collect();
        let zero = host.alloc(64);
        let pools = Pools {
            headers: &headers,
            recvs: &recvs,
            data: &data,
            mws: &mw_keys,
            zero,
        };
        let mut conn = Connection::new(role, cfg, &pools).expect("config");
        conn.handle_cm(0, CmInput::Established { private_data: peer });
        Parts {
            conn,
            host,
            mws,
            mem,
            pd,
        }
    }

    /// Posts what the connection wants posted on `qp` (its first receives).
    fn post(&mut self, qp: &mut IwarpQp) {
        let mem = &self.mem;
        let (_, r) = post_work_requests::<P>(&mut self.conn, qp, &self.mws, |_| Some(mem.mr()));
        r.expect("post work requests");
    }

    fn attach(self, qp: IwarpQp, cq: IwarpCq) -> Side {
        Side {
            conn: self.conn,
            host: self.host,
            qp,
            cq,
            events: Vec::new(),
            errors: Vec::new(),
            invalidated: Vec::new(),
            mws: self.mws,
            mem: self.mem,
            _pd: self.pd,
        }
    }
}

impl Side {
    /// Posts what the connection wants posted, polls the CQ and feeds the completions back.
    fn drive(&mut self, now: u64) {
        let mem = &self.mem;
        let (_, r) =
            post_work_requests::<P>(&mut self.conn, &mut self.qp, &self.mws, |_| Some(mem.mr()));
        r.expect("post work requests");
        let mut wcs = [Completion::default(); 32];
        loop {
            let n = self.cq.poll(&mut wcs).expect("poll_cq");
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                if !wc.status.is_success() {
                    self.errors.push(*wc);
                }
                if wc.flags.contains(WcFlags::WITH_INV) {
                    self.invalidated.push(wc.invalidated_rkey);
                }
                self.conn.handle_completion(now, wc, &mut self.host);
            }
        }
        while let Some(ev) = self.conn.poll_event() {
            self.events.push(ev);
        }
    }

    /// The first event `pick` accepts, if one arrived.
    fn take<T>(&mut self, pick: impl Fn(&Event) -> bool, into: impl Fn(Event) -> T) -> Option<T> {
        let i = self.events.iter().position(pick)?;
        Some(into(self.events.remove(i)))
    }
}

fn cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.credits = 16;
    c.sq_depth = 256;
    c.rq_depth = 128;
    c.stag = StagMode::Persistent;
    c.remote_invalidate = false;
    c
}

fn pdata(c: &Config) -> Vec<u8> {
    let r = c.remote_invalidate;
    rpcrdma_engine::proto::private_data::PrivateData::v1(r, c.inline_send, c.inline_recv)
        .encode()
        .to_vec()
}

fn qopt(c: &Config) -> QpOptions {
    QpOptions {
        max_send_wr: c.sq_depth,
        max_recv_wr: c.rq_depth,
        max_send_sge: c.max_send_sge.min(8),
        max_recv_sge: 1,
        ..QpOptions::default()
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Drives `sides` until `done` holds (20 s at most); no side may see an error completion.
fn run_until(
    sides: &mut [&mut Side],
    now: &mut u64,
    what: &str,
    done: impl Fn(&[&mut Side]) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(20);
    while !done(sides) {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        *now += 1000;
        for s in sides.iter_mut() {
            s.drive(*now);
            assert!(s.errors.is_empty(), "error completions: {:?}", s.errors);
        }
    }
}

fn is_call(e: &Event) -> bool {
    matches!(e, Event::CallReady(_))
}

fn is_done(e: &Event) -> bool {
    matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. })
}

fn call_of(e: Event) -> IncomingCall {
    match e {
        Event::CallReady(c) => c,
        e => panic!("{e:?}"),
    }
}

/// One call of this test and its reply.
struct Exchange {
    call: Vec<u8>,
    /// The DDP argument (Read chunk).
    arg: Option<Vec<u8>>,
    reply: Vec<u8>,
    /// The DDP result (Write chunk).
    result: Option<Vec<u8>>,
}

/// The calls of this test: 0x71 a NULL RPC, 0x73 a READ-like call (inline call, 4 KiB result
/// in a Write chunk: the call's only STag), any other XID the 4 KiB DDP READ/WRITE call.
fn call_parts(xid: u32) -> Exchange {
    match xid {
        0x71 => Exchange {
            call: rpc_call(0x71, 0, &[]),
            arg: None,
            reply: rpc_reply(0x71, &[]),
            result: None,
        },
        0x73 => Exchange {
            call: rpc_call(0x73, 6, &words(&[4096])),
            arg: None,
            reply: rpc_reply(0x73, &words(&[4096])),
            result: Some(pattern(4096, 9)),
        },
        _ => {
            let mut call = rpc_call(xid, 7, &words(&[4096]));
            call.extend_from_slice(&words(&[0xfeed]));
            Exchange {
                call,
                arg: Some(pattern(4096, 4)),
                reply: rpc_reply(xid, &words(&[4096])),
                result: Some(pattern(4096, 9)),
            }
        }
    }
}

/// Octets of the call header before the DDP argument.
const ARG_AT: usize = 44;

/// Requester: starts call `xid`; returns the receptacle (if any) and the reply buffer.
fn start(req: &mut Side, now: u64, xid: u32) -> (Option<LocalBuf>, LocalBuf) {
    let Exchange {
        call, arg, result, ..
    } = call_parts(xid);
    let msg = req.host.buf_with(&call);
    let item = arg.map(|a| DdpItem {
        at: ARG_AT as u32,
        buf: req.host.buf_with(&a),
    });
    let rec = result.map(|_| req.host.buf_with(&[0xee; 8192]));
    let reply = req.host.alloc(1024);
    let ddp: Vec<DdpItem> = item.into_iter().collect();
    let recs: Vec<LocalBuf> = rec.into_iter().collect();
    let spec = CallSpec {
        message: &[msg],
        ddp: &ddp,
        receptacles: &recs,
        reply,
    };
    req.conn
        .start_call(now, &spec, &mut req.host)
        .expect("start_call");
    (rec, reply)
}

/// Responder: checks the call (its DDP argument read over RDMA Read in place) and answers it
/// (its DDP result to be written over RDMA Write).
fn answer(resp: &mut Side, now: u64, inc: IncomingCall) {
    let stream = resp.host.read(inc.stream);
    let xid = u32::from_be_bytes(stream[..4].try_into().expect("xid"));
    let Exchange {
        call,
        arg,
        reply,
        result,
    } = call_parts(xid);
    let want = match &arg {
        None => call.clone(),
        Some(a) => [&call[..ARG_AT], a, &call[ARG_AT..]].concat(),
    };
    assert_eq!(stream, want, "call {xid:#x} (argument read over RDMA Read)");
    let rb = resp.host.buf_with(&reply);
    let results: Vec<DdpItem> = result
        .map(|r| DdpItem {
            at: reply.len() as u32,
            buf: resp.host.buf_with(&r),
        })
        .into_iter()
        .collect();
    let spec = ReplySpec {
        message: &[rb],
        results: &results,
    };
    resp.conn
        .send_reply(now, inc.call, &spec, &mut resp.host)
        .expect("send_reply");
}

/// Requester: checks the reply of call `xid` (its DDP result written over RDMA Write).
fn check_reply(req: &mut Side, xid: u32, done: Event, rec: Option<LocalBuf>, reply: LocalBuf) {
    let Exchange {
        reply: want,
        result,
        ..
    } = call_parts(xid);
    let Event::ReplyReady(rep) = done else {
        panic!("call {xid:#x} failed: {done:?}")
    };
    assert_eq!(req.host.read(reply.sub(0, rep.len).expect("len")), want);
    if let (Some(rec), Some(result)) = (rec, result) {
        assert_eq!(rep.written(), &[4096]);
        let got = req.host.read(rec);
        assert_eq!(&got[..4096], &result[..], "result written over RDMA Write");
        assert!(
            got[4096..].iter().all(|&b| b == 0xee),
            "wrote past the result"
        );
    }
}

/// Both sides in this process, over a pair connected through the conformance helpers.
fn in_process(xid: u32) {
    let (mut req, mut resp, _env) = pair_in_process(cfg(), cfg());
    call_and_reply(&mut req, &mut resp, xid);
}

/// A requester (`rc`) and a responder (`sc`) in this process, connected over loopback, the
/// responder's receives posted; with the environment that holds their devices.
fn pair_in_process(rc: Config, sc: Config) -> (Side, Side, IwarpEnv) {
    let mut env = IwarpEnv::new();
    let (c_pdata, s_pdata) = (pdata(&rc), pdata(&sc));
    let o = PairOpts {
        c: qopt(&rc),
        s: qopt(&sc),
        c_cq: 2048,
        s_cq: 2048,
        c_pdata: &c_pdata,
        s_pdata: &s_pdata,
    };
    let connected = conformance::connect_with(&mut env, o, None, None).expect("connect");
    let accept_pd = connected.established.private_data;
    assert_eq!(
        connected.request_private_data, c_pdata,
        "RFC 8797 data in the MPA Request"
    );
    assert_eq!(
        accept_pd.as_slice(),
        s_pdata,
        "RFC 8797 data in the MPA Reply"
    );
    let p = connected.pair;
    let mut resp = Parts::new(Role::Responder, sc, p.s.pd, &c_pdata).attach(p.s.qp, p.s.cq);
    // The responder's receives are posted before any call is made (across processes:
    // `accept_prepared`).
    resp.drive(0);
    let req = Parts::new(Role::Requester, rc, p.c.pd, accept_pd.as_slice()).attach(p.c.qp, p.c.cq);
    (req, resp, env)
}

/// Call `xid` from `req`, answered by `resp`, the reply checked; returns the receptacle of its
/// result (if any).
fn call_and_reply(req: &mut Side, resp: &mut Side, xid: u32) -> Option<LocalBuf> {
    let mut now = 0;
    let (rec, reply) = start(req, now, xid);
    run_until(&mut [&mut *req, &mut *resp], &mut now, "the call", |s| {
        s[1].events.iter().any(is_call)
    });
    let inc = resp.take(is_call, call_of).expect("call");
    answer(resp, now, inc);
    run_until(&mut [&mut *req, &mut *resp], &mut now, "the reply", |s| {
        s[0].events.iter().any(is_done)
    });
    let done = req.take(is_done, |e| e).expect("reply");
    check_reply(req, xid, done, rec, reply);
    rec
}

/// A NULL RPC: inline call, inline reply.
#[test]
fn accepts_null_rpc_over_iwarp() {
    if std::env::var(ROLE).is_err() {
        in_process(0x71);
    }
}

/// A WRITE-like call whose 4 KiB argument the responder RDMA-Reads from the requester (Read
/// chunk), answered READ-like with a 4 KiB result the responder RDMA-Writes into the
/// requester's receptacle (Write chunk).
#[test]
fn accepts_4k_ddp_read_and_write_over_iwarp() {
    if std::env::var(ROLE).is_err() {
        in_process(0x72);
    }
}

/// With memory windows and RFC 8797 remote invalidation on both sides, a call whose only STag
/// is its Write chunk is answered with a Send with Invalidate naming that STag (RFC 8797
/// section 4.1): the requester's receive reports the invalidation of one of its windows'
/// STags, and a Write under that STag afterwards is refused: the requester terminates the
/// connection and the result in the receptacle stays as the reply left it.
#[test]
fn accepts_reply_with_invalidate_over_iwarp() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let mut rc = cfg();
    rc.stag = StagMode::MemoryWindows;
    rc.remote_invalidate = true;
    let mut sc = cfg();
    sc.remote_invalidate = true;
    let (mut req, mut resp, _env) = pair_in_process(rc, sc);
    let rec = call_and_reply(&mut req, &mut resp, 0x73).expect("receptacle");
    assert_eq!(req.invalidated.len(), 1, "one Send with Invalidate");
    let stag = req.invalidated[0];
    assert!(
        req.mws.iter().any(|m| m.rkey() == stag),
        "{stag:#x} is a window's STag"
    );
    let sgl = [resp.mem.sge(0, 16)];
    let write = rpcrdma_engine::verbs::SendWr::<P> {
        wr_id: 0x5a,
        op: rpcrdma_engine::verbs::SendOp::RdmaWrite {
            remote_addr: rec.addr,
            rkey: stag,
        },
        sgl: &sgl,
        flags: rpcrdma_engine::verbs::SendFlags::SIGNALED,
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

const ROLE: &str = "RPCRDMA_IWARP_ROLE";

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// The responder process: accepts one connection (posting its receives before the MPA Reply
/// leaves), answers two calls, then waits for the requester to disconnect.
#[test]
#[ignore = "the other process of a two-process test: run by it with RPCRDMA_IWARP_ROLE=responder"]
fn responder_process() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("responder"),
        "run only as the child of a two-process test"
    );
    let dev = P::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 4).expect("listen");
    println!("LISTEN {}", l.local_addr().port());
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
    let mut now = 0;
    for _ in 0..2 {
        run_until(&mut [&mut resp], &mut now, "a call", |s| {
            s[0].events.iter().any(is_call)
        });
        let inc = resp.take(is_call, call_of).expect("call");
        answer(&mut resp, now, inc);
    }
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        resp.drive(now);
        let ev = resp.qp.poll_event().expect("event");
        if ev.is_some_and(|e| e.kind == CmEventKind::Disconnected) {
            break;
        }
        assert!(Instant::now() < end, "no disconnect");
        std::thread::sleep(Duration::from_micros(100));
    }
    println!("RESPONDER OK");
}

/// Requester and responder in two processes: a NULL RPC, then the 4 KiB DDP READ/WRITE call.
#[test]
fn accepts_rpc_between_two_processes() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "responder_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "responder")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn responder");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let port = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "responder ended early"
        );
        // The harness may have printed the test's name on the same line.
        if let Some(at) = line.find("LISTEN ") {
            break line[at + 7..].trim().parse::<u16>().expect("port");
        }
    };
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
    let addr = SocketAddr::new(lo(), port);
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
    let mut now = 0;
    for xid in [0x71, 0x72] {
        let (rec, reply) = start(&mut req, now, xid);
        run_until(&mut [&mut req], &mut now, "the reply", |s| {
            s[0].events.iter().any(is_done)
        });
        let done = req.take(is_done, |e| e).expect("reply");
        check_reply(&mut req, xid, done, rec, reply);
    }
    req.qp.disconnect().expect("disconnect");
    let status = child.wait().expect("responder exit");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    assert!(status.success(), "responder failed: {rest}");
    assert!(rest.contains("RESPONDER OK"), "responder output: {rest}");
}
