//! A minimal driver running `conn::Connection`s over real soft-provider QPs: it posts the
//! connection's work requests with the engine's one translation
//! ([`rpcrdma_engine::post::post_work_requests`]: one receive then one send doorbell per
//! batch), polls the CQ and feeds the completions back. Single-threaded: the soft provider executes work at the
//! doorbell on the posting thread, so nothing touches the memory concurrently.

use std::sync::Arc;

use rpcrdma_engine::conn::{
    BackchannelPools, CmInput, Config, Connection, Event, HostMemory, LocalBuf, Pools, Role,
};
use rpcrdma_engine::post::post_work_requests;
use rpcrdma_engine::verbs::conformance::{self, Buf, PairOpts};
use rpcrdma_engine::verbs::soft::{SoftCq, SoftEnv, SoftMw, SoftPd, SoftProvider, SoftQp};
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, MemoryWindow, ProtectionDomain, QpOptions,
};

/// The registered memory of one side, seen by the connection through raw pointers.
pub struct SoftHost {
    base: u64,
    len: usize,
    next: u64,
    lkey: u32,
}

impl SoftHost {
    fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.base && addr - self.base + len as u64 <= self.len as u64
    }

    /// Carves `len` octets (64-aligned) out of the region.
    pub fn alloc(&mut self, len: u32) -> LocalBuf {
        let addr = self.base + self.next;
        self.next += (u64::from(len.max(1)) + 63) & !63;
        assert!(self.next <= self.len as u64, "soft host region exhausted");
        LocalBuf::new(addr, len, self.lkey)
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) {
        self.bytes_mut(addr, data.len())
            .expect("inside the region")
            .copy_from_slice(data);
    }

    pub fn read(&self, b: LocalBuf) -> Vec<u8> {
        self.bytes(b.addr, b.len as usize).expect("inside").to_vec()
    }

    pub fn buf_with(&mut self, data: &[u8]) -> LocalBuf {
        let b = self.alloc(data.len() as u32);
        self.write(b.addr, data);
        b
    }
}

impl HostMemory for SoftHost {
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.contains(addr, len) {
            return None;
        }
        // SAFETY: inside the registered allocation owned by the side's `Buf`, which outlives
        // this view; the soft device only writes it during doorbells on this same thread.
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
    }

    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.contains(addr, len) {
            return None;
        }
        // SAFETY: as above; `&mut self` keeps views from overlapping within the driver.
        Some(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
    }
}

/// One endpoint over a soft QP.
pub struct SoftSide {
    pub conn: Connection,
    pub host: SoftHost,
    pub qp: SoftQp,
    pub cq: SoftCq,
    pub events: Vec<Event>,
    pub errors: Vec<Completion>,
    mws: Vec<SoftMw>,
    mem: Buf<SoftProvider>,
    _pd: Arc<SoftPd>,
}

impl SoftSide {
    /// Posts everything the connection wants posted, then polls and feeds completions.
    /// Returns whether anything happened.
    pub fn drive(&mut self, now: u64) -> bool {
        let host_lkey = self.host.lkey;
        let mem = &self.mem;
        let (posted, r) =
            post_work_requests::<SoftProvider>(&mut self.conn, &mut self.qp, &self.mws, |lkey| {
                assert_eq!(lkey, host_lkey);
                Some(mem.mr())
            });
        r.expect("post work requests");
        let mut any = posted.wrs > 0;
        let mut wcs = [Completion::default(); 32];
        loop {
            let n = self.cq.poll(&mut wcs).expect("poll_cq");
            if n == 0 {
                break;
            }
            any = true;
            for wc in &wcs[..n] {
                if !wc.status.is_success() {
                    self.errors.push(*wc);
                }
                self.conn.handle_completion(now, wc, &mut self.host);
            }
        }
        while let Some(ev) = self.conn.poll_event() {
            any = true;
            self.events.push(ev);
        }
        any
    }
}

/// Two connections over a connected soft QP pair (client = requester).
pub struct SoftPair {
    pub env: SoftEnv,
    pub req: SoftSide,
    pub resp: SoftSide,
    pub now: u64,
}

const REGION: usize = 8 << 20;

fn side(
    role: Role,
    cfg: Config,
    pd: Arc<SoftPd>,
    qp: SoftQp,
    cq: SoftCq,
    peer_private_data: &[u8],
    bidir: bool,
) -> SoftSide {
    let mem: Buf<SoftProvider> =
        Buf::new(&*pd, REGION, Access::LOCAL_WRITE | Access::MW_BIND).expect("register");
    let mut host = SoftHost {
        base: mem.addr(),
        len: REGION,
        next: 0,
        lkey: mem.keys().lkey,
    };
    let c = cfg.credits as usize;
    let (nh, nr, nd, nmw) = match role {
        Role::Requester => (c, c, 0, 8 * c),
        Role::Responder => (2 * c, 3 * c, c, 0),
    };
    let headers: Vec<LocalBuf> = (0..nh).map(|_| host.alloc(cfg.inline_send)).collect();
    let recv_size = rpcrdma_engine::proto::private_data::representable_size(cfg.inline_recv);
    let recvs: Vec<LocalBuf> = (0..nr).map(|_| host.alloc(recv_size)).collect();
    let data: Vec<LocalBuf> = (0..nd).map(|_| host.alloc(128 * 1024)).collect();
    let mws: Vec<SoftMw> = (0..nmw).map(|_| pd.alloc_mw().expect("alloc_mw")).collect();
    let mw_keys: Vec<u32> = mws.iter().map(|m| m.rkey()).collect();
    let zero = host.alloc(64);
    let b = if bidir {
        cfg.backchannel_credits as usize
    } else {
        0
    };
    let (nbh, nbr) = match role {
        Role::Requester => (2 * b, 2 * b),
        Role::Responder => (b, b),
    };
    let bc_headers: Vec<LocalBuf> = (0..nbh).map(|_| host.alloc(cfg.inline_send)).collect();
    let bc_recvs: Vec<LocalBuf> = (0..nbr).map(|_| host.alloc(recv_size)).collect();
    let mut conn = Connection::with_backchannel(
        role,
        cfg,
        &Pools {
            headers: &headers,
            recvs: &recvs,
            data: &data,
            mws: &mw_keys,
            zero,
        },
        &BackchannelPools {
            headers: &bc_headers,
            recvs: &bc_recvs,
        },
    )
    .expect("config");
    conn.handle_cm(
        0,
        CmInput::Established {
            private_data: peer_private_data,
        },
    );
    SoftSide {
        conn,
        host,
        qp,
        cq,
        events: Vec::new(),
        errors: Vec::new(),
        mws,
        mem,
        _pd: pd,
    }
}

impl SoftPair {
    /// Connects a requester (`req_cfg`) to a responder (`resp_cfg`) over the soft provider,
    /// exchanging RFC 8797 private data through rdma_cm. Both QPs use rnr_retry 0.
    pub fn new(req_cfg: Config, resp_cfg: Config) -> SoftPair {
        Self::build(req_cfg, resp_cfg, false)
    }

    /// As [`SoftPair::new`], with backchannel memory on both sides (not yet enabled).
    pub fn new_bidir(req_cfg: Config, resp_cfg: Config) -> SoftPair {
        Self::build(req_cfg, resp_cfg, true)
    }

    fn build(req_cfg: Config, resp_cfg: Config, bidir: bool) -> SoftPair {
        let mut env = SoftEnv::new();
        let pd_of = |cfg: &Config, r: bool| {
            rpcrdma_engine::proto::private_data::PrivateData::v1(
                r,
                cfg.inline_send,
                cfg.inline_recv,
            )
            .encode()
        };
        let c_pdata = pd_of(&req_cfg, req_cfg.remote_invalidate);
        let s_pdata = pd_of(&resp_cfg, resp_cfg.remote_invalidate);
        let qopt = |cfg: &Config| QpOptions {
            max_send_wr: cfg.sq_depth,
            max_recv_wr: cfg.rq_depth,
            max_send_sge: cfg.max_send_sge,
            max_recv_sge: 1,
            rnr_retry_count: 0,
            ..QpOptions::default()
        };
        let connected = conformance::connect_with(
            &mut env,
            PairOpts {
                c: qopt(&req_cfg),
                s: qopt(&resp_cfg),
                c_cq: 2048,
                s_cq: 2048,
                c_pdata: &c_pdata,
                s_pdata: &s_pdata,
            },
            None,
            None,
        )
        .expect("connect");
        let accept_pd = connected.established.private_data;
        let request_pd = connected.request_private_data.clone();
        let pair = connected.pair;
        let req = side(
            Role::Requester,
            req_cfg,
            pair.c.pd,
            pair.c.qp,
            pair.c.cq,
            accept_pd.as_slice(),
            bidir,
        );
        assert_eq!(req.conn.private_data(), c_pdata);
        let resp = side(
            Role::Responder,
            resp_cfg,
            pair.s.pd,
            pair.s.qp,
            pair.s.cq,
            &request_pd,
            bidir,
        );
        assert_eq!(resp.conn.private_data(), s_pdata);
        let mut p = SoftPair {
            env,
            req,
            resp,
            now: 0,
        };
        p.run();
        p
    }

    /// Drives both sides until neither moves.
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            self.now += 1000;
            let a = self.req.drive(self.now);
            let b = self.resp.drive(self.now);
            if !a && !b {
                return;
            }
        }
        panic!("soft pair did not settle");
    }
}
