//! A small raw-peer toolkit for the hostile-peer suites: a soft-provider QP driven by hand,
//! with no engine behind it. It connects with chosen RFC 8797 private data (or none, or
//! garbage), posts raw SENDs of hand-built or codec-built RPC-over-RDMA messages (Send With
//! Invalidate too), receives and decodes what comes back, issues RDMA Read / Write with chosen
//! keys and addresses, and reports completions and the QP state.
//!
//! Normal operation: [`RawPeer::connect`] waits for the connection to be established (10 s at
//! most) with its receives already posted ([`RawPeer::start_connect`] and
//! [`RawPeer::established`] are its two halves); [`RawPeer::send`] copies the message into a
//! registered staging slot and rings one doorbell; [`RawPeer::recv`] returns the next received
//! message and reposts its receive at once.
//!
//! Recovery: nothing is retried. Every verbs outcome is handed to the test as it happened (a
//! failed work request as its [`WcStatus`], a flushed receive as [`RecvEnd::Flushed`]), since
//! the exact outcome is what the tests assert.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpcrdma_engine::proto::chunks::ChunkListsRef;
use rpcrdma_engine::proto::{private_data, v1, v2};
use rpcrdma_engine::rpc::{self, CallHeader, OpaqueAuth, ReplyBody, ReplyHeader};
use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::soft::{SoftCq, SoftDevice, SoftPd, SoftProvider, SoftQp};
use rpcrdma_engine::verbs::{
    Access, CmEventKind, Completion, CompletionQueue, Device, QpInit, QpOptions, QpState,
    QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcStatus,
};

/// The provider of every raw peer.
pub type P = SoftProvider;

/// Size of one send staging slot (the largest message a raw peer sends).
pub const SEND_SLOT: usize = 16 * 1024;
/// Send staging slots (used round robin).
const SEND_SLOTS: usize = 16;

/// How a raw peer sets up its QP.
#[derive(Debug, Clone, Copy)]
pub struct RawOpts {
    /// Receives posted (and reposted) for incoming messages.
    pub recvs: usize,
    /// Octets of each receive.
    pub recv_size: usize,
    /// RNR retries the server's sends to this peer make (`rdma_conn_param.rnr_retry_count`).
    pub rnr_retry: u8,
}

impl Default for RawOpts {
    fn default() -> Self {
        RawOpts {
            recvs: 32,
            recv_size: 4096,
            rnr_retry: 0,
        }
    }
}

/// RFC 8797 private data with R clear and the given sizes (encoded by the engine's codec).
pub fn pd_v1(send: u32, recv: u32) -> Vec<u8> {
    private_data::PrivateData::v1(false, send, recv)
        .encode()
        .to_vec()
}

/// Why [`RawPeer::recv`] returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvEnd {
    /// Nothing arrived in time.
    Timeout,
    /// A receive completed with this (error) status: the QP is in the error state.
    Flushed(WcStatus),
}

/// One raw QP connected to a server.
pub struct RawPeer {
    /// The QP (public for state queries and direct posting).
    pub qp: SoftQp,
    scq: SoftCq,
    rcq: SoftCq,
    /// The peer's protection domain.
    pub pd: SoftPd,
    sbuf: Buf<P>,
    rbuf: Buf<P>,
    /// Scratch memory for RDMA Read sinks and Write sources.
    pub scratch: Buf<P>,
    opts: RawOpts,
    next_slot: usize,
    next_wr: u64,
    /// Send-queue completions polled but not yet asked for.
    send_wcs: Vec<Completion>,
    /// The server's accept private data.
    pub accept_pd: Vec<u8>,
}

/// Size of the scratch buffer.
pub const SCRATCH: usize = 64 * 1024;
const RECV_TAG: u64 = 1 << 40;

impl RawPeer {
    /// Connects to `addr` from `dev` with `pd` as connect private data and waits for the
    /// outcome: `Ok` once established, `Err` with the CM event kind otherwise.
    pub fn connect(
        dev: &SoftDevice,
        addr: SocketAddr,
        pd: &[u8],
        opts: RawOpts,
    ) -> Result<RawPeer, CmEventKind> {
        RawPeer::start_connect(dev, addr, pd, opts).established()
    }

    /// Sends the connect request (it waits in the listener's queue when this returns), with
    /// the receives posted; [`RawPeer::established`] waits for the outcome.
    pub fn start_connect(dev: &SoftDevice, addr: SocketAddr, pd: &[u8], opts: RawOpts) -> RawPeer {
        let ppd = dev.alloc_pd().expect("pd");
        let scq = dev.create_cq(1024).expect("cq");
        let rcq = dev.create_cq(1024).expect("cq");
        let rbuf = Buf::<P>::new(&ppd, opts.recvs * opts.recv_size, Access::LOCAL_WRITE)
            .expect("recv buffer");
        let sbuf = Buf::<P>::new(&ppd, SEND_SLOTS * SEND_SLOT, Access::LOCAL_WRITE).expect("sbuf");
        let scratch = Buf::<P>::new(&ppd, SCRATCH, Access::LOCAL_WRITE).expect("scratch");
        let init = QpInit {
            pd: &ppd,
            send_cq: &scq,
            recv_cq: &rcq,
            srq: None,
            opts: QpOptions {
                max_send_wr: 512,
                max_recv_wr: (opts.recvs as u32).max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                rnr_retry_count: opts.rnr_retry,
                ..QpOptions::default()
            },
        };
        let qp = dev.connect(addr, init, pd).expect("connect call");
        let mut peer = RawPeer {
            qp,
            scq,
            rcq,
            pd: ppd,
            sbuf,
            rbuf,
            scratch,
            opts,
            next_slot: 0,
            next_wr: 1,
            send_wcs: Vec::new(),
            accept_pd: Vec::new(),
        };
        for i in 0..opts.recvs {
            peer.post_recv(i);
        }
        peer
    }

    /// Waits (10 s at most) for the outcome of the connect request: `Ok` once established,
    /// `Err` with the CM event kind otherwise.
    pub fn established(mut self) -> Result<RawPeer, CmEventKind> {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(ev) = self.qp.poll_event().expect("cm") {
                return match ev.kind {
                    CmEventKind::Established => {
                        self.accept_pd = ev.private_data.as_slice().to_vec();
                        Ok(self)
                    }
                    k => Err(k),
                };
            }
            assert!(Instant::now() < end, "connect: no CM event within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn post_recv(&mut self, i: usize) {
        let sge = [self.rbuf.sge(i * self.opts.recv_size, self.opts.recv_size)];
        self.qp
            .queue_recv(&RecvWr {
                wr_id: RECV_TAG | i as u64,
                sgl: &sge,
            })
            .expect("queue recv");
        self.qp.flush_recv().expect("flush recv");
    }

    /// Posts a SEND of `msg` (signaled); returns its `wr_id`.
    pub fn send(&mut self, msg: &[u8]) -> u64 {
        self.send_op(msg, SendOp::Send)
    }

    /// Posts a Send With Invalidate of `msg` naming `rkey`; returns its `wr_id`.
    pub fn send_with_inv(&mut self, msg: &[u8], rkey: u32) -> u64 {
        self.send_op(msg, SendOp::SendWithInv { rkey })
    }

    fn send_op(&mut self, msg: &[u8], op: SendOp<'_, P>) -> u64 {
        assert!(msg.len() <= SEND_SLOT, "message larger than a send slot");
        let off = self.next_slot * SEND_SLOT;
        self.next_slot = (self.next_slot + 1) % SEND_SLOTS;
        self.sbuf.write(off, msg);
        let sge = [self.sbuf.sge(off, msg.len())];
        let wr_id = self.take_wr();
        let wr = SendWr {
            wr_id,
            op,
            sgl: if msg.is_empty() { &[] } else { &sge },
            flags: SendFlags::SIGNALED,
        };
        self.qp.queue_send(&wr).expect("queue send");
        self.qp.flush_send().expect("flush send");
        wr_id
    }

    fn take_wr(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }

    /// Waits (10 s at most) for the completion of send-queue work request `wr_id`.
    pub fn wait_send(&mut self, wr_id: u64) -> Completion {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = self.send_wcs.iter().position(|c| c.wr_id == wr_id) {
                return self.send_wcs.remove(i);
            }
            let mut wcs = [Completion::default(); 32];
            let n = self.scq.poll(&mut wcs).expect("poll send cq");
            self.send_wcs.extend_from_slice(&wcs[..n]);
            if n == 0 {
                assert!(
                    Instant::now() < end,
                    "no completion of send wr {wr_id} in 10 s"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// The next received message (its receive is reposted), waiting up to `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Vec<u8>, RecvEnd> {
        let end = Instant::now() + timeout;
        loop {
            let mut wc = [Completion::default(); 1];
            let n = self.rcq.poll(&mut wc).expect("poll recv cq");
            if n == 1 {
                let c = wc[0];
                if !c.status.is_success() {
                    return Err(RecvEnd::Flushed(c.status));
                }
                let i = (c.wr_id & !RECV_TAG) as usize;
                let msg = self.rbuf.read(i * self.opts.recv_size, c.byte_len as usize);
                self.post_recv(i);
                return Ok(msg);
            }
            if Instant::now() >= end {
                return Err(RecvEnd::Timeout);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The next received message; the test fails if none arrives within 10 s.
    pub fn recv_msg(&mut self, what: &str) -> Vec<u8> {
        match self.recv(Duration::from_secs(10)) {
            Ok(m) => m,
            Err(e) => panic!("{what}: no message ({e:?})"),
        }
    }

    /// RDMA Read of `len` octets at the server's `raddr` under `rkey` into the scratch buffer:
    /// the completion and the octets landed (the whole scratch prefix, to show nothing came).
    pub fn read(&mut self, raddr: u64, rkey: u32, len: usize) -> (Completion, Vec<u8>) {
        let sge = [self.scratch.sge(0, len)];
        let wr_id = self.take_wr();
        let wr = SendWr::<P> {
            wr_id,
            op: SendOp::RdmaRead {
                remote_addr: raddr,
                rkey,
            },
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        };
        self.qp.queue_send(&wr).expect("queue read");
        self.qp.flush_send().expect("flush read");
        let c = self.wait_send(wr_id);
        (c, self.scratch.read(0, len))
    }

    /// RDMA Write of `data` to the server's `raddr` under `rkey`: its completion.
    pub fn write(&mut self, raddr: u64, rkey: u32, data: &[u8]) -> Completion {
        self.scratch.write(0, data);
        let sge = [self.scratch.sge(0, data.len())];
        let wr_id = self.take_wr();
        let wr = SendWr::<P> {
            wr_id,
            op: SendOp::RdmaWrite {
                remote_addr: raddr,
                rkey,
            },
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        };
        self.qp.queue_send(&wr).expect("queue write");
        self.qp.flush_send().expect("flush write");
        self.wait_send(wr_id)
    }

    /// Keys of the peer's own registrations (receive buffer, send buffer, scratch).
    pub fn own_keys(&self) -> [rpcrdma_engine::verbs::Keys; 3] {
        [self.rbuf.keys(), self.sbuf.keys(), self.scratch.keys()]
    }

    /// The QP state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }

    /// Waits (10 s at most) until the connection is down: a `Disconnected` event or the QP in
    /// the error state. True when it went down.
    pub fn wait_down(&mut self) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(ev)) = self.qp.poll_event() {
                if ev.kind == CmEventKind::Disconnected {
                    return true;
                }
            }
            if self.qp.state() == QpState::Error {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Message builders and decoders.

/// An ONC RPC CALL (AUTH_NONE) of `prog`/`vers`/`proc_num` with `args`.
pub fn rpc_call(xid: u32, prog: u32, vers: u32, proc_num: u32, args: &[u8]) -> Vec<u8> {
    let h = CallHeader {
        xid,
        prog,
        vers,
        proc_num,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    };
    let mut out = vec![0u8; h.encoded_len() + args.len()];
    let n = rpc::encode_call(&mut out, &h).expect("rpc call");
    out[n..].copy_from_slice(args);
    out
}

/// An ONC RPC REPLY (accepted, SUCCESS) with `results`.
pub fn rpc_reply(xid: u32, results: &[u8]) -> Vec<u8> {
    let h = ReplyHeader::accepted(xid, rpc::AcceptStat::Success);
    let mut out = vec![0u8; h.encoded_len() + results.len()];
    let n = rpc::encode_reply(&mut out, &h).expect("rpc reply");
    out[n..].copy_from_slice(results);
    out
}

/// A Version One RDMA_MSG header with `lists`, followed by `payload`.
pub fn v1_msg(xid: u32, credits: u32, lists: ChunkListsRef<'_>, payload: &[u8]) -> Vec<u8> {
    let m = v1::Message {
        xid,
        credits,
        body: v1::MessageBody::Msg(lists),
    };
    let mut out = vec![0u8; v1::encoded_len(&m) + payload.len()];
    let n = v1::encode(&m, &mut out).expect("v1 header");
    out[n..].copy_from_slice(payload);
    out
}

/// A Version Two RDMA2_MSG CALL header with `lists`, followed by `payload`.
pub fn v2_msg(xid: u32, credits: u32, lists: ChunkListsRef<'_>, payload: &[u8]) -> Vec<u8> {
    let m = v2::Message {
        xid,
        credits,
        body: v2::MessageBody::Msg(v2::ChunksRef {
            direction: v2::Direction::Call,
            inv_handle: 0,
            lists,
        }),
    };
    let mut out = vec![0u8; v2::encoded_len(&m) + payload.len()];
    let n = v2::encode(&m, &mut out).expect("v2 header");
    out[n..].copy_from_slice(payload);
    out
}

/// Big-endian words.
pub fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// Word `i` of `b` (big-endian), if present.
pub fn word(b: &[u8], i: usize) -> Option<u32> {
    b.get(4 * i..4 * i + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// A received message, decoded as far as the tests need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A reply (RDMA_MSG / RDMA2_MSG with an RPC REPLY): XID, version, credits, accept status
    /// (`None` when denied) and the results.
    Reply {
        /// `rdma_xid`.
        xid: u32,
        /// `rdma_vers`.
        vers: u32,
        /// `rdma_credit`.
        credits: u32,
        /// The RPC accept status (`None`: MSG_DENIED).
        stat: Option<rpc::AcceptStat>,
        /// The results following the RPC reply header.
        results: Vec<u8>,
    },
    /// A backward-direction CALL (RDMA_MSG with an RPC CALL): XID, version, procedure.
    Call {
        /// `rdma_xid`.
        xid: u32,
        /// `rdma_vers`.
        vers: u32,
        /// The RPC program.
        prog: u32,
        /// The RPC procedure.
        proc_num: u32,
    },
    /// RDMA_ERROR / RDMA2_ERROR: XID, version, and the error words after `rdma_proc`.
    Error {
        /// `rdma_xid`.
        xid: u32,
        /// `rdma_vers`.
        vers: u32,
        /// `rdma_err` and its body.
        body: Vec<u32>,
    },
    /// Anything else (raw octets).
    Other(Vec<u8>),
}

/// Decodes a message a server sent.
pub fn decode(msg: &[u8]) -> Answer {
    let (Some(xid), Some(vers), Some(credits), Some(proc_)) =
        (word(msg, 0), word(msg, 1), word(msg, 2), word(msg, 3))
    else {
        return Answer::Other(msg.to_vec());
    };
    if proc_ == 4 {
        let body = (4..msg.len() / 4).filter_map(|i| word(msg, i)).collect();
        return Answer::Error { xid, vers, body };
    }
    let payload = match vers {
        1 => match v1::decode(msg, &Default::default()) {
            Ok(h) if h.proc() == v1::Proc::Msg => h.payload,
            _ => return Answer::Other(msg.to_vec()),
        },
        2 => match v2::decode(msg, &Default::default()) {
            Ok(h) if h.proc() == v2::Proc::Msg => h.payload,
            _ => return Answer::Other(msg.to_vec()),
        },
        _ => return Answer::Other(msg.to_vec()),
    };
    match rpc::decode(payload) {
        Ok((rpc::RpcMsg::Reply(r), off)) => Answer::Reply {
            xid,
            vers,
            credits,
            stat: match r.body {
                ReplyBody::Accepted { stat, .. } => Some(stat),
                ReplyBody::Denied(_) => None,
            },
            results: payload[off..].to_vec(),
        },
        Ok((rpc::RpcMsg::Call(c), _)) => Answer::Call {
            xid,
            vers,
            prog: c.prog,
            proc_num: c.proc_num,
        },
        Err(_) => Answer::Other(msg.to_vec()),
    }
}
