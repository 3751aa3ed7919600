//! The control channel's encoding: requests and replies between the process that runs the
//! conformance checks and the processes that own the devices, as length-prefixed frames of
//! little-endian integers, with each verbs value written field by field.
//!
//! Normal operation: [`Enc`] builds a frame, [`send`] writes it, [`recv`] reads the next one
//! and [`Dec`] takes it apart in the order it was built. Recovery: both ends are this test
//! binary; a frame that does not decode, or a channel that closed, means the other process
//! failed, and the caller reports that as a failed test.

use std::io::{Read, Write};
use std::net::SocketAddr;

use rpcrdma_engine::verbs::{
    Access, CmEvent, CmEventKind, Completion, DeviceCaps, Keys, PrivateData, QpOptions, Sge,
    Transport, VerbsCall, VerbsError, WcFlags, WcOpcode, WcStatus,
};

/// Every [`VerbsCall`], indexed by its code on the channel.
const CALLS: [VerbsCall; 23] = [
    VerbsCall::OpenDevice,
    VerbsCall::QueryDevice,
    VerbsCall::AllocPd,
    VerbsCall::RegMr,
    VerbsCall::DeregMr,
    VerbsCall::AllocMw,
    VerbsCall::DeallocMw,
    VerbsCall::CreateCq,
    VerbsCall::PollCq,
    VerbsCall::ReqNotifyCq,
    VerbsCall::CreateSrq,
    VerbsCall::PostSrqRecv,
    VerbsCall::CreateQp,
    VerbsCall::ModifyQp,
    VerbsCall::QueryQp,
    VerbsCall::PostSend,
    VerbsCall::PostRecv,
    VerbsCall::Listen,
    VerbsCall::Connect,
    VerbsCall::Accept,
    VerbsCall::Reject,
    VerbsCall::Disconnect,
    VerbsCall::GetCmEvent,
];

/// Every [`CmEventKind`], indexed by its code on the channel.
const KINDS: [CmEventKind; 8] = [
    CmEventKind::Established,
    CmEventKind::Rejected,
    CmEventKind::Unreachable,
    CmEventKind::AddrError,
    CmEventKind::RouteError,
    CmEventKind::ConnectError,
    CmEventKind::Disconnected,
    CmEventKind::DeviceRemoval,
];

/// Writes one frame (length, then the octets).
pub fn send(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(frame.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(frame)?;
    w.flush()
}

/// Reads the next frame.
pub fn recv(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let mut frame = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut frame)?;
    Ok(frame)
}

/// A frame being built.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// A frame starting with `op`.
    pub fn op(op: u8) -> Enc {
        Enc(vec![op])
    }

    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.0.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Enc {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }

    pub fn addr(&mut self, a: SocketAddr) -> &mut Enc {
        self.bytes(a.to_string().as_bytes())
    }

    pub fn keys(&mut self, k: Keys) -> &mut Enc {
        self.u32(k.lkey).u32(k.rkey)
    }

    pub fn err(&mut self, e: VerbsError) -> &mut Enc {
        let call = CALLS.iter().position(|c| *c == e.call).unwrap_or(0);
        self.u8(call as u8).u32(e.errno as u32)
    }

    pub fn sgl(&mut self, sgl: &[Sge]) -> &mut Enc {
        self.u32(sgl.len() as u32);
        for s in sgl {
            self.u64(s.addr).u32(s.len).u32(s.lkey);
        }
        self
    }

    pub fn opts(&mut self, o: &QpOptions) -> &mut Enc {
        self.u32(o.max_send_wr)
            .u32(o.max_recv_wr)
            .u32(o.max_send_sge)
            .u32(o.max_recv_sge)
            .u32(o.max_inline_data)
            .u8(o.rnr_retry_count)
            .u8(o.retry_count)
            .u8(o.initiator_depth)
            .u8(o.responder_resources)
    }

    pub fn wc(&mut self, c: &Completion) -> &mut Enc {
        self.u64(c.wr_id)
            .u32(c.status.0)
            .u32(c.opcode.0)
            .u32(c.byte_len)
            .u32(c.qp_num)
            .u32(c.src_qp)
            .u32(c.flags.0)
            .u32(c.invalidated_rkey)
            .u32(c.vendor_err)
    }

    pub fn event(&mut self, e: &CmEvent) -> &mut Enc {
        let kind = KINDS.iter().position(|k| *k == e.kind).unwrap_or(0);
        self.u8(kind as u8)
            .u32(e.status as u32)
            .bytes(e.private_data.as_slice())
    }

    pub fn caps(&mut self, c: &DeviceCaps) -> &mut Enc {
        for v in [
            c.max_qp,
            c.max_qp_wr,
            c.max_sge,
            c.max_sge_rd,
            c.max_inline_data,
            c.max_cq,
            c.max_cqe,
            c.max_mr,
            c.max_mw,
            c.max_pd,
            c.max_srq,
            c.max_srq_wr,
            c.max_qp_rd_atom,
            c.max_qp_init_rd_atom,
            c.max_private_data_connect,
            c.max_private_data_accept,
            c.max_private_data_reject,
            c.vendor_id,
            c.vendor_part_id,
        ] {
            self.u32(v);
        }
        self.u64(c.max_mr_size)
            .u8(u8::from(c.mw_type2))
            .u8(u8::from(c.send_with_invalidate))
            .u8(u8::from(c.transport == Transport::Iwarp))
    }
}

/// A frame being taken apart. Both ends are this binary: a short frame is the other process's
/// failure, reported by a panic of the test.
pub struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, at: 0 }
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = self
            .b
            .get(self.at..self.at + n)
            .expect("a short control frame");
        self.at += n;
        s
    }

    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 octets"))
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 octets"))
    }

    pub fn bytes(&mut self) -> &'a [u8] {
        let n = self.u32() as usize;
        self.take(n)
    }

    pub fn addr(&mut self) -> SocketAddr {
        let s = std::str::from_utf8(self.bytes()).expect("address text");
        s.parse().expect("address")
    }

    pub fn keys(&mut self) -> Keys {
        Keys {
            lkey: self.u32(),
            rkey: self.u32(),
        }
    }

    pub fn access(&mut self) -> Access {
        Access(self.u32())
    }

    pub fn err(&mut self) -> VerbsError {
        let call = CALLS[usize::from(self.u8()).min(CALLS.len() - 1)];
        VerbsError::new(call, self.u32() as i32)
    }

    pub fn sgl(&mut self) -> Vec<Sge> {
        let n = self.u32() as usize;
        (0..n)
            .map(|_| Sge {
                addr: self.u64(),
                len: self.u32(),
                lkey: self.u32(),
            })
            .collect()
    }

    pub fn opts(&mut self) -> QpOptions {
        QpOptions {
            max_send_wr: self.u32(),
            max_recv_wr: self.u32(),
            max_send_sge: self.u32(),
            max_recv_sge: self.u32(),
            max_inline_data: self.u32(),
            rnr_retry_count: self.u8(),
            retry_count: self.u8(),
            initiator_depth: self.u8(),
            responder_resources: self.u8(),
        }
    }

    pub fn wc(&mut self) -> Completion {
        Completion {
            wr_id: self.u64(),
            status: WcStatus(self.u32()),
            opcode: WcOpcode(self.u32()),
            byte_len: self.u32(),
            qp_num: self.u32(),
            src_qp: self.u32(),
            flags: WcFlags(self.u32()),
            invalidated_rkey: self.u32(),
            vendor_err: self.u32(),
        }
    }

    pub fn event(&mut self) -> CmEvent {
        let kind = KINDS[usize::from(self.u8()).min(KINDS.len() - 1)];
        let status = self.u32() as i32;
        let private_data = PrivateData::new(self.bytes()).expect("private data");
        CmEvent {
            kind,
            status,
            private_data,
        }
    }

    pub fn caps(&mut self) -> DeviceCaps {
        let mut v = [0u32; 19];
        for x in &mut v {
            *x = self.u32();
        }
        DeviceCaps {
            max_qp: v[0],
            max_qp_wr: v[1],
            max_sge: v[2],
            max_sge_rd: v[3],
            max_inline_data: v[4],
            max_cq: v[5],
            max_cqe: v[6],
            max_mr: v[7],
            max_mw: v[8],
            max_pd: v[9],
            max_srq: v[10],
            max_srq_wr: v[11],
            max_qp_rd_atom: v[12],
            max_qp_init_rd_atom: v[13],
            max_private_data_connect: v[14],
            max_private_data_accept: v[15],
            max_private_data_reject: v[16],
            vendor_id: v[17],
            vendor_part_id: v[18],
            max_mr_size: self.u64(),
            mw_type2: self.u8() != 0,
            send_with_invalidate: self.u8() != 0,
            transport: if self.u8() != 0 {
                Transport::Iwarp
            } else {
                Transport::Ib
            },
        }
    }
}

/// Request codes (the first octet of a request; the handle of the object follows).
pub mod op {
    pub const CAPS: u8 = 1;
    pub const ALLOC_PD: u8 = 2;
    pub const CREATE_CQ: u8 = 3;
    pub const CREATE_SRQ: u8 = 4;
    pub const LISTEN: u8 = 5;
    pub const CONNECT: u8 = 6;
    pub const REGISTER: u8 = 10;
    pub const ALLOC_MW: u8 = 11;
    pub const MW_RKEY: u8 = 12;
    pub const CQ_POLL: u8 = 20;
    pub const CQ_SET_NOTIFY: u8 = 21;
    pub const SRQ_RECV: u8 = 30;
    pub const SRQ_FLUSH: u8 = 31;
    pub const SRQ_DOORBELLS: u8 = 32;
    pub const QP_NUM: u8 = 40;
    pub const QP_STATE: u8 = 41;
    pub const QP_OPTIONS: u8 = 42;
    pub const QP_LOCAL_ADDR: u8 = 43;
    pub const QP_PEER_ADDR: u8 = 44;
    pub const QP_SEND: u8 = 45;
    pub const QP_FLUSH_SEND: u8 = 46;
    pub const QP_RECV: u8 = 47;
    pub const QP_FLUSH_RECV: u8 = 48;
    pub const QP_DOORBELLS: u8 = 49;
    pub const QP_EVENT: u8 = 50;
    pub const QP_DISCONNECT: u8 = 51;
    pub const LISTENER_POLL: u8 = 60;
    pub const ACCEPT: u8 = 70;
    pub const REJECT: u8 = 71;
    /// Ends the `prepare` step of an accept (its result follows: 0, or 1 and an error).
    pub const PREPARED: u8 = 72;
    pub const FREE: u8 = 99;
}

/// Reply codes (the first octet of a reply).
pub mod reply {
    /// Success; the results follow.
    pub const OK: u8 = 0;
    /// Failure; the [`super::VerbsError`] follows.
    pub const ERR: u8 = 1;
    /// An accept's QP exists and waits for its `prepare` step (its handle follows).
    pub const PREPARE: u8 = 2;
}

/// Send operations' codes.
pub mod send_op {
    pub const SEND: u8 = 0;
    pub const SEND_WITH_INV: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const READ: u8 = 3;
    pub const LOCAL_INV: u8 = 4;
    pub const BIND_MW: u8 = 5;
}
