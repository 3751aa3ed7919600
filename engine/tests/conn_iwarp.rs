//! The connection engine end to end over the iWARP provider (RDMAP/DDP/MPA over loopback TCP):
//! RFC 8797 private data in the MPA Request/Reply, a NULL RPC with inline call and reply, and a
//! call whose 4 KiB argument travels in a Read chunk (the responder's RDMA Read of the
//! requester's memory) and whose 4 KiB result comes back in a Write chunk (the responder's
//! RDMA Write), with persistent STags (the provider has no memory windows).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pattern, rpc_call, rpc_reply};
use rpcrdma_engine::conn::{
    CallSpec, CmInput, Config, Connection, DdpItem, Event, HostMemory, IncomingCall, LocalBuf,
    Pools, ReplySpec, Role, StagMode,
};
use rpcrdma_engine::post::post_work_requests;
use rpcrdma_engine::verbs::conformance::{self, Buf, PairOpts};
use rpcrdma_engine::verbs::iwarp::{IwarpCq, IwarpEnv, IwarpPd, IwarpProvider, IwarpQp};
use rpcrdma_engine::verbs::{Access, Completion, CompletionQueue, QpOptions};

type P = IwarpProvider;
const REGION: usize = 4 << 20;
const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

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
    mem: Buf<P>,
    _pd: Arc<IwarpPd>,
}

impl Side {
    fn new(
        role: Role,
        cfg: Config,
        pd: Arc<IwarpPd>,
        qp: IwarpQp,
        cq: IwarpCq,
        peer: &[u8],
    ) -> Side {
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
        let zero = host.alloc(64);
        let pools = Pools {
            headers: &headers,
            recvs: &recvs,
            data: &data,
            mws: &[],
            zero,
        };
        let mut conn = Connection::new(role, cfg, &pools).expect("config");
        conn.handle_cm(0, CmInput::Established { private_data: peer });
        Side {
            conn,
            host,
            qp,
            cq,
            events: Vec::new(),
            errors: Vec::new(),
            mem,
            _pd: pd,
        }
    }

    /// Posts what the connection wants posted, polls the CQ and feeds the completions back.
    fn drive(&mut self, now: u64) {
        let mem = &self.mem;
        let (_, r) = post_work_requests::<P>(&mut self.conn, &mut self.qp, &[], |_| Some(mem.mr()));
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
                self.conn.handle_completion(now, wc, &mut self.host);
            }
        }
        while let Some(ev) = self.conn.poll_event() {
            self.events.push(ev);
        }
    }
}

struct Pair {
    req: Side,
    resp: Side,
    now: u64,
    _env: IwarpEnv,
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

impl Pair {
    fn new() -> Pair {
        let mut env = IwarpEnv::new();
        let (rc, sc) = (cfg(), cfg());
        let pdata = |c: &Config| {
            rpcrdma_engine::proto::private_data::PrivateData::v1(
                false,
                c.inline_send,
                c.inline_recv,
            )
            .encode()
        };
        let (c_pdata, s_pdata) = (pdata(&rc), pdata(&sc));
        let qopt = |c: &Config| QpOptions {
            max_send_wr: c.sq_depth,
            max_recv_wr: c.rq_depth,
            max_send_sge: c.max_send_sge.min(8),
            max_recv_sge: 1,
            ..QpOptions::default()
        };
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
        let request_pd = connected.request_private_data.clone();
        assert_eq!(
            request_pd, c_pdata,
            "RFC 8797 private data in the MPA Request"
        );
        assert_eq!(
            accept_pd.as_slice(),
            s_pdata,
            "RFC 8797 private data in the MPA Reply"
        );
        let p = connected.pair;
        let req = Side::new(
            Role::Requester,
            rc,
            p.c.pd,
            p.c.qp,
            p.c.cq,
            accept_pd.as_slice(),
        );
        let resp = Side::new(Role::Responder, sc, p.s.pd, p.s.qp, p.s.cq, &request_pd);
        let mut p = Pair {
            req,
            resp,
            now: 0,
            _env: env,
        };
        // Each side posts its receives before any call is made (a responder in a real
        // application posts them while accepting: `accept_prepared`).
        p.resp.drive(0);
        p.req.drive(0);
        p
    }

    /// Drives both sides until `done` holds (20 s at most).
    fn run_until(&mut self, what: &str, done: impl Fn(&Pair) -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            self.now += 1000;
            self.req.drive(self.now);
            self.resp.drive(self.now);
            assert!(
                self.req.errors.is_empty(),
                "requester: {:?}",
                self.req.errors
            );
            assert!(
                self.resp.errors.is_empty(),
                "responder: {:?}",
                self.resp.errors
            );
        }
    }

    fn incoming(&mut self) -> IncomingCall {
        self.run_until("the call", |p| {
            p.resp
                .events
                .iter()
                .any(|e| matches!(e, Event::CallReady(_)))
        });
        let i = self
            .resp
            .events
            .iter()
            .position(|e| matches!(e, Event::CallReady(_)))
            .expect("CallReady");
        match self.resp.events.remove(i) {
            Event::CallReady(c) => c,
            e => panic!("{e:?}"),
        }
    }

    fn finished(&mut self) -> Event {
        self.run_until("the reply", |p| {
            p.req
                .events
                .iter()
                .any(|e| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. }))
        });
        let i = self
            .req
            .events
            .iter()
            .position(|e| matches!(e, Event::ReplyReady(_) | Event::CallFailed { .. }))
            .expect("finished");
        self.req.events.remove(i)
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A NULL RPC: inline call, inline reply.
#[test]
fn accepts_null_rpc_over_iwarp() {
    let mut p = Pair::new();
    let call = rpc_call(0x71, 0, &[]);
    let msg = p.req.host.buf_with(&call);
    let reply = p.req.host.alloc(1024);
    let spec = CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply,
    };
    p.req
        .conn
        .start_call(p.now, &spec, &mut p.req.host)
        .expect("start_call");
    let inc = p.incoming();
    assert_eq!(p.resp.host.read(inc.stream), call);
    let r = rpc_reply(0x71, &[]);
    let rb = p.resp.host.buf_with(&r);
    let spec = ReplySpec {
        message: &[rb],
        results: &[],
    };
    p.resp
        .conn
        .send_reply(p.now, inc.call, &spec, &mut p.resp.host)
        .expect("send_reply");
    let Event::ReplyReady(rep) = p.finished() else {
        panic!("call failed")
    };
    assert_eq!(p.req.host.read(reply.sub(0, rep.len).expect("len")), r);
}

/// A WRITE-like call whose 4 KiB argument the responder RDMA-Reads from the requester (Read
/// chunk), answered READ-like with a 4 KiB result the responder RDMA-Writes into the
/// requester's receptacle (Write chunk).
#[test]
fn accepts_4k_ddp_read_and_write_over_iwarp() {
    let mut p = Pair::new();
    let arg = pattern(4096, 4);
    let mut call = rpc_call(0x72, 7, &words(&[4096]));
    let at = call.len() as u32;
    call.extend_from_slice(&words(&[0xfeed]));
    let msg = p.req.host.buf_with(&call);
    let item = p.req.host.buf_with(&arg);
    let rec = p.req.host.buf_with(&[0xee; 8192]);
    let reply = p.req.host.alloc(1024);
    let spec = CallSpec {
        message: &[msg],
        ddp: &[DdpItem { at, buf: item }],
        receptacles: &[rec],
        reply,
    };
    p.req
        .conn
        .start_call(p.now, &spec, &mut p.req.host)
        .expect("start_call");
    let inc = p.incoming();
    let mut want = call[..at as usize].to_vec();
    want.extend_from_slice(&arg);
    want.extend_from_slice(&call[at as usize..]);
    assert_eq!(
        p.resp.host.read(inc.stream),
        want,
        "argument read over RDMA Read"
    );
    let result = pattern(4096, 9);
    let r = rpc_reply(0x72, &words(&[4096]));
    let rb = p.resp.host.buf_with(&r);
    let db = p.resp.host.buf_with(&result);
    let spec = ReplySpec {
        message: &[rb],
        results: &[DdpItem {
            at: r.len() as u32,
            buf: db,
        }],
    };
    p.resp
        .conn
        .send_reply(p.now, inc.call, &spec, &mut p.resp.host)
        .expect("send_reply");
    let Event::ReplyReady(rep) = p.finished() else {
        panic!("call failed")
    };
    assert_eq!(rep.written(), &[4096]);
    let got = p.req.host.read(rec);
    assert_eq!(&got[..4096], &result[..], "result written over RDMA Write");
    assert!(
        got[4096..].iter().all(|&b| b == 0xee),
        "wrote past the result"
    );
}
