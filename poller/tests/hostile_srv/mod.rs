//! Raw-server toolkit for the hostile-server tests against the real `Client`: a soft fabric
//! with a client device (10.0.0.1) carrying a poller [`Endpoint`] on two reactors, and a raw
//! server device (10.0.0.2) whose listeners accept the client's connections with chosen RFC 8797
//! private data ([`RawServer::accept`]). A [`RawConn`] receives the client's calls and decodes
//! them with the engine's codecs ([`RawConn::recv_call`]), answers with hand-built messages
//! ([`RawConn::send`], [`RawConn::send_inv`]) and performs RDMA Read / Write with any key
//! ([`RawConn::write`], [`RawConn::read`]), reporting the completion status verbs gave.
//!
//! Normal operation: everything is pumped by the test thread; every wait has a 10 s deadline.
//! Recovery: an RDMA operation or Send that fails puts the raw QP in the error state (verbs
//! semantics); the client then sees its connection drop and reconnects, and the test accepts
//! the new connection with [`RawServer::accept`] again.
#![allow(dead_code)]

pub mod flows;

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rpcrdma_engine::proto::chunks::{ChunkLimits, ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::private_data::PrivateData;
use rpcrdma_engine::proto::{v1, v2};
use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::soft::{
    SoftCq, SoftDevice, SoftFabric, SoftListener, SoftPd, SoftProvider, SoftQp,
};
use rpcrdma_engine::verbs::{
    Access, CompletionQueue, ConnRequest, Device, Listener, QpInit, QpOptions, QpState, QueuePair,
    RecvWr, SendFlags, SendOp, SendWr, WcFlags, WcStatus,
};
use rpcrdma_poller::{
    BackoffConfig, Client, ClientError, ClientOptions, Cores, EndpointConfig, PinPolicy,
    ReactorConfig, ReactorSet, Reply,
};

/// The provider.
pub type P = SoftProvider;
/// The client's endpoint type.
pub type Endpoint = rpcrdma_poller::Endpoint<P>;

/// The test program the raw server pretends to serve.
pub const PROG: u32 = 0x2000_0001;

static PORT: AtomicU16 = AtomicU16::new(36000);

/// Receive slots a raw connection keeps posted.
pub const RECVS: usize = 64;

/// The deadline of every wait.
pub const WAIT: Duration = Duration::from_secs(10);

/// A fabric with a client endpoint and a raw server device.
pub struct HWorld {
    /// The fabric.
    pub fabric: SoftFabric,
    /// The client's reactors.
    pub set: ReactorSet,
    /// The client endpoint (10.0.0.1).
    pub client_ep: Endpoint,
    /// The raw server device (10.0.0.2).
    pub sdev: SoftDevice,
}

impl HWorld {
    /// A new world.
    pub fn new() -> HWorld {
        HWorld::with_workers(0)
    }

    /// A new world whose client endpoint has `workers` worker threads (for
    /// `CallbackMode::Worker` clients).
    pub fn with_workers(workers: usize) -> HWorld {
        let fabric = SoftFabric::new();
        let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let mut c = ReactorConfig::new(Cores::Count(2));
        c.pin = PinPolicy::Off;
        c.backoff = BackoffConfig::shared_cores();
        c.drain_timeout = Duration::from_secs(5);
        let set = ReactorSet::start(&c).expect("reactors");
        let cfg = EndpointConfig {
            max_conns_per_reactor: 16,
            max_credits: 32,
            buffers: 256,
            reply_buffers: 128,
            buffer_size: 16 * 1024,
            reply_buffer_size: 0,
            workers,
            worker_ring: 64,
            hugepages: false,
            ..EndpointConfig::default()
        };
        let client_ep = Endpoint::new(&set, cdev, cfg).expect("client ep");
        HWorld {
            fabric,
            set,
            client_ep,
            sdev,
        }
    }

    /// A raw listener on a fresh port of the server device.
    pub fn listen(&self) -> RawServer {
        let port = PORT.fetch_add(1, Ordering::Relaxed);
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), port);
        let listener = self.sdev.listen(addr, 16).expect("listen");
        RawServer {
            listener,
            addr,
            pd: Arc::new(self.sdev.alloc_pd().expect("pd")),
            sdev: self.sdev.clone(),
        }
    }

    /// A client of `srv` with `opts`, connecting (not waited for: accept on the raw side).
    pub fn client(&self, srv: &RawServer, opts: ClientOptions) -> Client {
        Client::connect(&self.client_ep, srv.addr, opts).expect("client")
    }

    /// Stops the reactors.
    pub fn stop(mut self) {
        self.set.stop().expect("stop");
        self.client_ep.stop_workers();
    }
}

/// Client options of the hostile tests: short reconnect delays, no timeout unless asked.
pub fn opts() -> ClientOptions {
    ClientOptions {
        credits: 16,
        reconnect_min_ms: 1,
        reconnect_max_ms: 20,
        ..ClientOptions::default()
    }
}

/// RFC 8797 private data (R bit, send size, receive size).
pub fn pdata(r: bool, send: u32, recv: u32) -> [u8; 8] {
    PrivateData::v1(r, send, recv).encode()
}

/// A listener of the raw server.
pub struct RawServer {
    listener: SoftListener,
    /// Its address.
    pub addr: SocketAddr,
    /// The PD every raw connection of this server uses.
    pub pd: Arc<SoftPd>,
    sdev: SoftDevice,
}

/// What the client sent at connection set-up.
pub struct Accepted {
    /// The connection.
    pub conn: RawConn,
    /// The client's private data.
    pub client_pd: Vec<u8>,
}

impl RawServer {
    /// Waits for the next connect request and accepts it with `private_data`, posting
    /// [`RECVS`] receives of `recv_size` octets first.
    pub fn accept(&mut self, private_data: &[u8], recv_size: usize) -> RawConn {
        self.accept_full(private_data, recv_size).conn
    }

    /// As [`RawServer::accept`], also returning the client's private data.
    pub fn accept_full(&mut self, private_data: &[u8], recv_size: usize) -> Accepted {
        let end = Instant::now() + WAIT;
        let req = loop {
            if let Some(r) = self.listener.poll().expect("listener") {
                break r;
            }
            assert!(Instant::now() < end, "no connect request");
            std::thread::sleep(Duration::from_micros(200));
        };
        let client_pd = req.private_data().to_vec();
        let cq = self.sdev.create_cq(4096).expect("cq");
        let rbufs = Buf::<P>::new(&self.pd, recv_size * RECVS, Access::LOCAL_WRITE).expect("r");
        let init = QpInit {
            pd: &*self.pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions {
                max_send_wr: 256,
                max_recv_wr: RECVS as u32 + 8,
                ..QpOptions::default()
            },
        };
        let qp = req
            .accept_prepared(init, private_data, &mut |qp: &mut SoftQp| {
                for i in 0..RECVS {
                    let sge = [rbufs.sge(i * recv_size, recv_size)];
                    qp.queue_recv(&RecvWr {
                        wr_id: RECV_TAG | i as u64,
                        sgl: &sge,
                    })?;
                }
                qp.flush_recv()
            })
            .expect("accept");
        let sbuf = Buf::<P>::new(&self.pd, 64 * 1024, Access::LOCAL_WRITE).expect("s");
        let data = Buf::<P>::new(&self.pd, 1 << 20, Access::LOCAL_WRITE).expect("d");
        Accepted {
            conn: RawConn {
                qp,
                cq,
                rbufs,
                recv_size,
                sbuf,
                data,
                pd: Arc::clone(&self.pd),
                pending: VecDeque::new(),
                next_wr: 1,
            },
            client_pd,
        }
    }

    /// True when a connect request is waiting.
    pub fn request_waiting(&mut self, within: Duration) -> Option<Accepted> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Some(r) = self.listener.poll().expect("listener") {
                // Refuse it: the caller only wanted to know.
                let _ = r.reject(&[]);
                return None;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        None
    }
}

const RECV_TAG: u64 = 1 << 63;

/// A received message (a call or anything else the client sent).
#[derive(Debug, Clone)]
pub struct Msg {
    /// The bytes received.
    pub bytes: Vec<u8>,
    /// Receive completion status.
    pub status: WcStatus,
}

/// A decoded call (Version One or Two).
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub vers: u32,
    /// `rdma_credit` (requested).
    pub credits: u32,
    /// RDMA_NOMSG.
    pub nomsg: bool,
    /// The Read list.
    pub reads: Vec<ReadSegment>,
    /// The Write list.
    pub writes: Vec<Vec<Segment>>,
    /// The Reply chunk.
    pub reply: Option<Vec<Segment>>,
    /// Version Two `rdma_inv_handle`.
    pub inv_handle: u32,
    /// The RPC message carried inline.
    pub rpc: Vec<u8>,
}

impl Call {
    /// The RPC procedure (word 5 of the RPC call header), when inline.
    pub fn proc_num(&self) -> u32 {
        word(&self.rpc, 5)
    }

    /// Every STag the call offered: (handle, offset, length, kind) with kind 'r' (Read chunk),
    /// 'w' (Write chunk) or 'p' (Reply chunk).
    pub fn stags(&self) -> Vec<(u32, u64, u32, char)> {
        let mut v: Vec<(u32, u64, u32, char)> = self
            .reads
            .iter()
            .map(|r| (r.target.handle, r.target.offset, r.target.length, 'r'))
            .collect();
        for w in &self.writes {
            v.extend(w.iter().map(|s| (s.handle, s.offset, s.length, 'w')));
        }
        if let Some(r) = &self.reply {
            v.extend(r.iter().map(|s| (s.handle, s.offset, s.length, 'p')));
        }
        v
    }
}

/// Big-endian word `i` of `b` (0 when out of range).
pub fn word(b: &[u8], i: usize) -> u32 {
    b.get(i * 4..i * 4 + 4)
        .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Decodes a call header (Version One or Two).
pub fn decode_call(b: &[u8]) -> Option<Call> {
    match word(b, 1) {
        1 => {
            let h = v1::decode(b, &ChunkLimits::DEFAULT).ok()?;
            let c = h.chunks()?;
            Some(Call {
                xid: h.xid,
                vers: 1,
                credits: h.credits,
                nomsg: h.proc() == v1::Proc::Nomsg,
                reads: c.reads.iter().collect(),
                writes: c.writes.iter().map(|w| w.segments().collect()).collect(),
                reply: c.reply.map(|r| r.segments().collect()),
                inv_handle: 0,
                rpc: h.payload.to_vec(),
            })
        }
        2 => {
            let h = v2::decode(b, &v2::Limits::DEFAULT).ok()?;
            let c = h.chunks()?;
            Some(Call {
                xid: h.xid,
                vers: 2,
                credits: h.credits,
                nomsg: h.proc() == v2::Proc::Nomsg,
                reads: c.lists.reads.iter().collect(),
                writes: c
                    .lists
                    .writes
                    .iter()
                    .map(|w| w.segments().collect())
                    .collect(),
                reply: c.lists.reply.map(|r| r.segments().collect()),
                inv_handle: c.inv_handle,
                rpc: h.payload.to_vec(),
            })
        }
        _ => None,
    }
}

/// An accepted RPC reply message: XID, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS, then
/// `results`.
pub fn rpc_reply(xid: u32, results: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [xid, 1, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(results);
    v
}

/// An RPC call message from the server (a backward call): XID, CALL, RPC version 2, program,
/// version, procedure, AUTH_NONE credential and verifier, then `args`.
pub fn rpc_call(xid: u32, prog: u32, vers: u32, proc_num: u32, args: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [xid, 0, 2, prog, vers, proc_num, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(args);
    v
}

/// A Version One RDMA_MSG header with `writes` (the Write list as echoed in a reply) and
/// `reply` chunk, followed by `rpc`.
pub fn v1_msg(xid: u32, credits: u32, writes: &[&[Segment]], rpc: &[u8]) -> Vec<u8> {
    let lists = ChunkListsRef {
        reads: &[],
        writes,
        reply: None,
    };
    let mut out = vec![0u8; 16 + lists.encoded_len()];
    let n = v1::encode(
        &v1::Message {
            xid,
            credits,
            body: v1::MessageBody::Msg(lists),
        },
        &mut out,
    )
    .expect("encode");
    out.truncate(n);
    out.extend_from_slice(rpc);
    out
}

/// A Version One RDMA_NOMSG reply whose RPC reply went into the Reply chunk `reply`
/// (`len` octets written).
pub fn v1_nomsg_reply(xid: u32, credits: u32, reply: &[Segment]) -> Vec<u8> {
    let lists = ChunkListsRef {
        reads: &[],
        writes: &[],
        reply: Some(reply),
    };
    let mut out = vec![0u8; 16 + lists.encoded_len()];
    let n = v1::encode(
        &v1::Message {
            xid,
            credits,
            body: v1::MessageBody::Nomsg(lists),
        },
        &mut out,
    )
    .expect("encode");
    out.truncate(n);
    out
}

/// A Version One RDMA_ERROR / ERR_CHUNK for `xid`.
pub fn v1_err_chunk(xid: u32, credits: u32) -> Vec<u8> {
    let mut out = vec![0u8; v1::ERR_CHUNK_LEN];
    v1::encode_err_chunk(xid, 1, credits, &mut out).expect("encode");
    out
}

/// A Version Two RDMA2_MSG reply with `writes`, followed by `rpc`.
pub fn v2_msg(xid: u32, credits: u32, writes: &[&[Segment]], rpc: &[u8]) -> Vec<u8> {
    v2_msg_dir(xid, credits, v2::Direction::Reply, writes, rpc)
}

/// A Version Two RDMA2_MSG in `direction`.
pub fn v2_msg_dir(
    xid: u32,
    credits: u32,
    direction: v2::Direction,
    writes: &[&[Segment]],
    rpc: &[u8],
) -> Vec<u8> {
    let lists = ChunkListsRef {
        reads: &[],
        writes,
        reply: None,
    };
    let m = v2::Message {
        xid,
        credits,
        body: v2::MessageBody::Msg(v2::ChunksRef {
            direction,
            inv_handle: 0,
            lists,
        }),
    };
    let mut out = vec![0u8; v2::encoded_len(&m)];
    let n = v2::encode(&m, &mut out).expect("encode");
    out.truncate(n);
    out.extend_from_slice(rpc);
    out
}

/// One raw server connection.
pub struct RawConn {
    /// The QP.
    pub qp: SoftQp,
    cq: SoftCq,
    rbufs: Buf<P>,
    recv_size: usize,
    sbuf: Buf<P>,
    /// A 1 MiB local buffer RDMA Reads land in and RDMA Writes are taken from.
    pub data: Buf<P>,
    pd: Arc<SoftPd>,
    pending: VecDeque<Msg>,
    next_wr: u64,
}

impl RawConn {
    /// The local key of the raw server's data buffer (as a hostile "rkey").
    pub fn own_lkey(&self) -> u32 {
        self.data.keys().lkey
    }

    /// Polls the CQ once: receives are decoded and queued (and reposted); a send-queue
    /// completion is returned.
    fn poll_once(&mut self) -> Option<(u64, WcStatus, u32)> {
        let mut wcs = [Default::default(); 16];
        let n = self.cq.poll(&mut wcs).unwrap_or(0);
        let mut out = None;
        for wc in &wcs[..n] {
            let wc: &rpcrdma_engine::verbs::Completion = wc;
            if wc.wr_id & RECV_TAG != 0 {
                let i = (wc.wr_id & !RECV_TAG) as usize;
                let len = (wc.byte_len as usize).min(self.recv_size);
                let bytes = if wc.status.is_success() {
                    self.rbufs.read(i * self.recv_size, len)
                } else {
                    Vec::new()
                };
                self.pending.push_back(Msg {
                    bytes,
                    status: wc.status,
                });
                if wc.status.is_success() {
                    let sge = [self.rbufs.sge(i * self.recv_size, self.recv_size)];
                    let _ = self.qp.queue_recv(&RecvWr {
                        wr_id: wc.wr_id,
                        sgl: &sge,
                    });
                    let _ = self.qp.flush_recv();
                }
            } else {
                let flags_inv = wc.flags.contains(WcFlags::WITH_INV);
                let _ = flags_inv;
                out = Some((wc.wr_id, wc.status, wc.byte_len));
            }
        }
        out
    }

    /// The next message the client sent (status included), waiting up to `within`.
    pub fn recv_within(&mut self, within: Duration) -> Option<Msg> {
        let end = Instant::now() + within;
        loop {
            if let Some(m) = self.pending.pop_front() {
                return Some(m);
            }
            let _ = self.poll_once();
            if self.pending.is_empty() {
                if Instant::now() >= end {
                    return None;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// The next call (panics after the deadline or on a message that does not decode).
    pub fn recv_call(&mut self) -> Call {
        let m = self.recv_within(WAIT).expect("no call from the client");
        assert!(m.status.is_success(), "receive failed: {}", m.status.name());
        decode_call(&m.bytes).unwrap_or_else(|| panic!("undecodable call {:02x?}", m.bytes))
    }

    /// No message arrives within `within`.
    pub fn expect_silence(&mut self, within: Duration) {
        if let Some(m) = self.recv_within(within) {
            panic!("unexpected message {:?}", decode_call(&m.bytes));
        }
    }

    fn post(&mut self, op: SendOp<'_, P>, sgl: &[rpcrdma_engine::verbs::Sge]) -> WcStatus {
        let id = self.next_wr;
        self.next_wr += 1;
        let wr = SendWr {
            wr_id: id,
            op,
            sgl,
            flags: SendFlags::SIGNALED,
        };
        if self.qp.queue_send(&wr).is_err() || self.qp.flush_send().is_err() {
            return WcStatus::WR_FLUSH_ERR;
        }
        let end = Instant::now() + WAIT;
        loop {
            if let Some((wr_id, st, _)) = self.poll_once() {
                if wr_id == id {
                    return st;
                }
            }
            assert!(Instant::now() < end, "no completion for wr {id}");
            std::thread::yield_now();
        }
    }

    /// Sends `msg` (plain Send); returns the completion status.
    pub fn send(&mut self, msg: &[u8]) -> WcStatus {
        self.sbuf.write(0, msg);
        let sge = [self.sbuf.sge(0, msg.len())];
        self.post(SendOp::Send, &sge)
    }

    /// Sends `msg` with Send With Invalidate of `rkey`.
    pub fn send_inv(&mut self, msg: &[u8], rkey: u32) -> WcStatus {
        self.sbuf.write(0, msg);
        let sge = [self.sbuf.sge(0, msg.len())];
        self.post(SendOp::SendWithInv { rkey }, &sge)
    }

    /// RDMA Write of `data` to `addr` under `rkey`.
    pub fn write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> WcStatus {
        self.data.write(0, data);
        let sge = [self.data.sge(0, data.len())];
        self.post(
            SendOp::RdmaWrite {
                remote_addr: addr,
                rkey,
            },
            &sge,
        )
    }

    /// RDMA Read of `len` octets at `addr` under `rkey`: the status and what arrived.
    pub fn read(&mut self, rkey: u32, addr: u64, len: usize) -> (WcStatus, Vec<u8>) {
        let off = 512 * 1024;
        self.data.write(off, &vec![0xa5; len]);
        let sge = [self.data.sge(off, len)];
        let st = self.post(
            SendOp::RdmaRead {
                remote_addr: addr,
                rkey,
            },
            &sge,
        );
        (st, self.data.read(off, len))
    }

    /// The QP state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }
}

/// The outcome of one client call, delivered to the test thread.
pub type Outcome = (usize, Result<Reply, ClientError>);

/// A completion callback for call `i`: sends the outcome to `tx` (the test keeps the reply,
/// and with it the client's buffers).
pub fn to_chan(
    i: usize,
    tx: &mpsc::Sender<Outcome>,
) -> impl FnOnce(Result<Reply, ClientError>) + Send + 'static {
    let tx = tx.clone();
    move |r| {
        let _ = tx.send((i, r));
    }
}

/// Waits for the next outcome.
pub fn next_outcome(rx: &mpsc::Receiver<Outcome>) -> Outcome {
    rx.recv_timeout(WAIT).expect("no completion")
}

/// Outcomes must not arrive within `within`.
pub fn no_outcome(rx: &mpsc::Receiver<Outcome>, within: Duration) {
    if let Ok((i, r)) = rx.recv_timeout(within) {
        panic!("call {i} completed unexpectedly: {:?}", r.map(|x| x.xid()));
    }
}

/// Big-endian words.
pub fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// A Version One RDMA_MSG (or RDMA_NOMSG when `nomsg`) with any chunk lists, followed by `rpc`.
pub fn v1_full(
    xid: u32,
    credits: u32,
    nomsg: bool,
    lists: ChunkListsRef<'_>,
    rpc: &[u8],
) -> Vec<u8> {
    let mut out = vec![0u8; 16 + lists.encoded_len()];
    let body = if nomsg {
        v1::MessageBody::Nomsg(lists)
    } else {
        v1::MessageBody::Msg(lists)
    };
    let n = v1::encode(&v1::Message { xid, credits, body }, &mut out).expect("encode");
    out.truncate(n);
    out.extend_from_slice(rpc);
    out
}

/// A Version Two RDMA2_MSG (or RDMA2_NOMSG when `nomsg`) with any direction, invalidation
/// handle and chunk lists, followed by `rpc`.
pub fn v2_full(
    xid: u32,
    credits: u32,
    nomsg: bool,
    direction: v2::Direction,
    inv_handle: u32,
    lists: ChunkListsRef<'_>,
    rpc: &[u8],
) -> Vec<u8> {
    let c = v2::ChunksRef {
        direction,
        inv_handle,
        lists,
    };
    let body = if nomsg {
        v2::MessageBody::Nomsg(c)
    } else {
        v2::MessageBody::Msg(c)
    };
    let m = v2::Message { xid, credits, body };
    let mut out = vec![0u8; v2::encoded_len(&m)];
    let n = v2::encode(&m, &mut out).expect("encode");
    out.truncate(n);
    out.extend_from_slice(rpc);
    out
}

/// A message the client sent that is not a forward call: a backward reply or an error.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub vers: u32,
    /// `rdma_credit`.
    pub credits: u32,
    /// `rdma_proc`.
    pub proc_: u32,
    /// The RPC message of an RDMA_MSG / RDMA2_MSG (empty otherwise).
    pub rpc: Vec<u8>,
    /// The whole message.
    pub bytes: Vec<u8>,
}

impl Answer {
    /// The RPC reply: `Ok(accept_stat)` (results after it in `rpc`) or `Err(rejection)`.
    pub fn rpc_outcome(
        &self,
    ) -> Result<rpcrdma_engine::rpc::AcceptStat, rpcrdma_engine::rpc::RejectedReply> {
        let (h, _) = rpcrdma_engine::rpc::decode_reply(&self.rpc)
            .unwrap_or_else(|e| panic!("not an RPC reply ({e:?}): {:02x?}", self.rpc));
        assert_eq!(h.xid, self.xid, "RPC XID = rdma_xid");
        match h.body {
            rpcrdma_engine::rpc::ReplyBody::Accepted { stat, .. } => Ok(stat),
            rpcrdma_engine::rpc::ReplyBody::Denied(r) => Err(r),
        }
    }

    /// The results of an accepted reply (after the 24-octet header with AUTH_NONE).
    pub fn results(&self) -> &[u8] {
        self.rpc.get(24..).unwrap_or(&[])
    }
}

/// Decodes what the client sent back (header fields and, for a message, its RPC part).
pub fn decode_answer(b: &[u8]) -> Answer {
    let rpc = match word(b, 1) {
        1 => v1::decode(b, &ChunkLimits::DEFAULT)
            .ok()
            .filter(|h| h.proc() == v1::Proc::Msg)
            .map(|h| h.payload.to_vec()),
        2 => v2::decode(b, &v2::Limits::DEFAULT)
            .ok()
            .filter(|h| h.proc() == v2::Proc::Msg)
            .map(|h| h.payload.to_vec()),
        _ => None,
    };
    Answer {
        xid: word(b, 0),
        vers: word(b, 1),
        credits: word(b, 2),
        proc_: word(b, 3),
        rpc: rpc.unwrap_or_default(),
        bytes: b.to_vec(),
    }
}

impl RawConn {
    /// The next message from the client, decoded as an [`Answer`] (panics after the deadline
    /// or on a failed receive).
    pub fn recv_answer(&mut self) -> Answer {
        let m = self.recv_within(WAIT).expect("no message from the client");
        assert!(m.status.is_success(), "receive failed: {}", m.status.name());
        decode_answer(&m.bytes)
    }
}
