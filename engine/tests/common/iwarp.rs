//! The connection engine over iWARP-provider QPs: a side's registered memory ([`Host`], handed
//! out in pieces), its connection with QP and CQ ([`Side`]: posts what the connection wants
//! posted with the engine's one translation, polls and feeds completions back), and both sides
//! connected in this process over loopback TCP ([`connected_pair`]). Single-threaded per side:
//! the provider places data while its process polls, never during a view of the memory.

use std::sync::Arc;

use rpcrdma_engine::conn::{
    CmInput, Config, Connection, Event, HostMemory, LocalBuf, Pools, Role, StagMode,
};
use rpcrdma_engine::post::post_work_requests;
use rpcrdma_engine::verbs::conformance::{self, Buf, PairOpts};
use rpcrdma_engine::verbs::iwarp::{IwarpCq, IwarpEnv, IwarpMw, IwarpPd, IwarpProvider, IwarpQp};
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, MemoryWindow, ProtectionDomain, QpOptions, WcFlags,
};

pub type P = IwarpProvider;
const REGION: usize = 4 << 20;
const RW: Access = Access(
    Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::MW_BIND.0,
);

/// One side's registered memory, handed out in 64-octet-aligned pieces.
pub struct Host {
    base: u64,
    len: usize,
    /// Where the next piece starts (the tests may rewind it).
    pub next: u64,
    keys: (u32, u32),
}

impl Host {
    pub fn alloc(&mut self, len: u32) -> LocalBuf {
        let addr = self.base + self.next;
        self.next += (u64::from(len.max(1)) + 63) & !63;
        assert!(self.next <= self.len as u64, "host region exhausted");
        LocalBuf::new(addr, len, self.keys.0)
    }

    pub fn buf_with(&mut self, data: &[u8]) -> LocalBuf {
        let b = self.alloc(data.len() as u32);
        self.bytes_mut(b.addr, data.len())
            .expect("inside")
            .copy_from_slice(data);
        b
    }

    pub fn read(&self, b: LocalBuf) -> Vec<u8> {
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
pub struct Side {
    pub conn: Connection,
    pub host: Host,
    pub qp: IwarpQp,
    pub cq: IwarpCq,
    pub events: Vec<Event>,
    pub errors: Vec<Completion>,
    /// STags invalidated by Sends with Invalidate this side received.
    pub invalidated: Vec<u32>,
    /// The requester's memory windows (`StagMode::MemoryWindows`).
    pub mws: Vec<IwarpMw>,
    /// The side's registered memory.
    pub mem: Buf<P>,
    _pd: Arc<IwarpPd>,
}

/// A side's connection and memory before its QP exists.
pub struct Parts {
    conn: Connection,
    host: Host,
    mws: Vec<IwarpMw>,
    mem: Buf<P>,
    pd: Arc<IwarpPd>,
}

impl Parts {
    /// The connection of `role` with its memory registered in `pd`, told the peer's private
    /// data.
    pub fn new(role: Role, cfg: Config, pd: Arc<IwarpPd>, peer: &[u8]) -> Parts {
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
    pub fn post(&mut self, qp: &mut IwarpQp) {
        let mem = &self.mem;
        let (_, r) = post_work_requests::<P>(&mut self.conn, qp, &self.mws, |_| Some(mem.mr()));
        r.expect("post work requests");
    }

    pub fn attach(self, qp: IwarpQp, cq: IwarpCq) -> Side {
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
    pub fn drive(&mut self, now: u64) {
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
    pub fn take<T>(
        &mut self,
        pick: impl Fn(&Event) -> bool,
        into: impl Fn(Event) -> T,
    ) -> Option<T> {
        let i = self.events.iter().position(pick)?;
        Some(into(self.events.remove(i)))
    }
}

/// The configuration of both sides: 16 credits, persistent STags, no remote invalidation (the
/// provider has neither memory windows nor Send With Invalidate).
pub fn cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.credits = 16;
    c.sq_depth = 256;
    c.rq_depth = 128;
    c.stag = StagMode::Persistent;
    c.remote_invalidate = false;
    c
}

/// The RFC 8797 private data of a side configured with `c`.
pub fn pdata(c: &Config) -> Vec<u8> {
    let r = c.remote_invalidate;
    rpcrdma_engine::proto::private_data::PrivateData::v1(r, c.inline_send, c.inline_recv)
        .encode()
        .to_vec()
}

/// The QP options of a side configured with `c`.
pub fn qopt(c: &Config) -> QpOptions {
    QpOptions {
        max_send_wr: c.sq_depth,
        max_recv_wr: c.rq_depth,
        max_send_sge: c.max_send_sge.min(8),
        max_recv_sge: 1,
        ..QpOptions::default()
    }
}

/// A requester and a responder connected in this process, both configured with [`cfg`].
pub fn connected_pair() -> (IwarpEnv, Side, Side) {
    connected_pair_with(cfg(), cfg())
}

/// A requester (`rc`) and a responder (`sc`) connected in this process (the responder's first
/// receives posted before any call), with the environment that must outlive them. Checks that
/// the RFC 8797 private data travelled in the MPA Request and Reply.
pub fn connected_pair_with(rc: Config, sc: Config) -> (IwarpEnv, Side, Side) {
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
    (env, req, resp)
}
