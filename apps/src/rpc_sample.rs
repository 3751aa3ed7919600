//! A short RPC-over-RDMA Version One exchange over the soft provider, for pcap traces that
//! tshark's `rpcordma` dissector can be checked against (`scripts/check-pcap.sh`).
//!
//! Normal operation: on a soft fabric (normally one with a [`crate::pcap::PcapTrace`]
//! installed), a client sends
//! 1. a CALL in RDMA_MSG with a Read list (one segment at a non-zero position, the data the
//!    server pulls with RDMA READ), a Write list (one chunk, one segment) and a Reply chunk;
//!    the server decodes it with the engine's strict decoder, RDMA-READs the read chunk,
//!    RDMA-WRITEs result data into the Write chunk and the RPC reply into the Reply chunk, and
//!    answers with RDMA_NOMSG carrying the Write chunk and the Reply chunk with the lengths
//!    actually written;
//! 2. a CALL in RDMA_MSG with no chunks, answered inline by RDMA_MSG.
//!
//! Each side checks what arrived (decoded headers, chunk data) so the trace shows a correct
//! exchange. [`SampleMessage`] lists the four transport headers as sent, and
//! [`expected_tshark_fields`] renders them the way `tshark -T fields` prints the `rpcordma`
//! fields. Recovery: any mismatch or verbs failure is returned as a message.

use std::fmt::Write as _;

use rpcrdma_engine::proto::chunks::{ChunkLimits, ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::v1::{self, Body, Message, MessageBody};
use rpcrdma_engine::rpc::{self, AcceptStat, CallHeader, OpaqueAuth, ReplyHeader, RpcMsg};
use rpcrdma_engine::verbs::conformance::{self, Buf};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftFabric, SoftProvider};
use rpcrdma_engine::verbs::{Access, QueuePair, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode};

type P = SoftProvider;

/// XID of the first call (the second uses the next value).
pub const FIRST_XID: u32 = 0x5250_0001;
/// Credits both sides advertise.
pub const CREDITS: u32 = 32;
/// Octets of the read chunk (the call's bulk argument).
pub const READ_CHUNK_LEN: u32 = 300;
/// Octets the server writes into the Write chunk.
pub const WRITE_LEN: u32 = 200;
/// Octets offered in the Write chunk.
pub const WRITE_CHUNK_LEN: u32 = 512;
/// Octets offered in the Reply chunk.
pub const REPLY_CHUNK_LEN: u32 = 1024;
/// NFS program number (used as the sample's RPC program).
pub const PROG: u32 = 100_003;

/// One transport header of the exchange, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleMessage {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub version: u32,
    /// `rdma_credit`.
    pub credits: u32,
    /// `rdma_proc` (0 RDMA_MSG, 1 RDMA_NOMSG).
    pub msg_type: u32,
    /// Read list: (position, segment).
    pub reads: Vec<(u32, Segment)>,
    /// Write list: one Vec per chunk.
    pub writes: Vec<Vec<Segment>>,
    /// Reply chunk.
    pub reply: Option<Vec<Segment>>,
}

impl SampleMessage {
    /// Every segment in wire order (read targets, write segments, reply segments).
    pub fn segments(&self) -> Vec<Segment> {
        self.reads
            .iter()
            .map(|r| r.1)
            .chain(self.writes.iter().flatten().copied())
            .chain(self.reply.iter().flatten().copied())
            .collect()
    }
}

/// The lines `tshark -r FILE -T fields -e rpcordma.xid -e rpcordma.version -e
/// rpcordma.flow_control -e rpcordma.msg_type -e rpcordma.reads_count -e rpcordma.writes_count
/// -e rpcordma.reply_count -e rpcordma.rdma_handle -e rpcordma.rdma_length -e
/// rpcordma.rdma_offset -Y rpcordma` prints for `msgs`: tab-separated, hex XIDs, handles and
/// offsets as `0x%08x` / `0x%016x`, several segments comma-separated, absent fields empty.
pub fn expected_tshark_fields(msgs: &[SampleMessage]) -> String {
    let mut out = String::new();
    for m in msgs {
        let segs = m.segments();
        let join =
            |f: &dyn Fn(&Segment) -> String| segs.iter().map(f).collect::<Vec<_>>().join(",");
        let _ = writeln!(
            out,
            "0x{:08x}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            m.xid,
            m.version,
            m.credits,
            m.msg_type,
            m.reads.len(),
            m.writes.len(),
            u32::from(m.reply.is_some()),
            join(&|s| format!("0x{:08x}", s.handle)),
            join(&|s| s.length.to_string()),
            join(&|s| format!("0x{:016x}", s.offset)),
        );
    }
    out
}

fn e2s<E: core::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

/// Encodes `msg` followed by `rpc` into `buf`; returns the length.
fn encode_msg(msg: &Message<'_>, rpc: &[u8], buf: &mut [u8]) -> Result<usize, String> {
    let n = v1::encode(msg, buf).map_err(e2s)?;
    buf.get_mut(n..n + rpc.len())
        .ok_or("message too long")?
        .copy_from_slice(rpc);
    Ok(n + rpc.len())
}

fn describe(msg: &Message<'_>) -> SampleMessage {
    let (msg_type, c) = match msg.body {
        MessageBody::Msg(c) => (0, c),
        MessageBody::Nomsg(c) => (1, c),
        MessageBody::Error(_) => (4, ChunkListsRef::EMPTY),
    };
    SampleMessage {
        xid: msg.xid,
        version: v1::VERSION,
        credits: msg.credits,
        msg_type,
        reads: c.reads.iter().map(|r| (r.position, r.target)).collect(),
        writes: c.writes.iter().map(|w| w.to_vec()).collect(),
        reply: c.reply.map(|r| r.to_vec()),
    }
}

/// The two endpoints of the exchange, their registered buffers, and the headers sent so far.
struct Exchange {
    env: SoftEnv,
    c: conformance::Side<P>,
    s: conformance::Side<P>,
    /// Client: send buffer, receive buffer (two 2 KiB slots), read chunk, write chunk, reply chunk.
    csend: Buf<P>,
    crecv: Buf<P>,
    cread: Buf<P>,
    cwrite: Buf<P>,
    creply: Buf<P>,
    /// Server: receive buffer (two 2 KiB slots), send buffer, bulk data.
    srecv: Buf<P>,
    ssend: Buf<P>,
    sdata: Buf<P>,
    limits: ChunkLimits,
    sent: Vec<SampleMessage>,
}

/// What the server learns from call 1: the chunks it must serve.
struct Call1Chunks {
    read: ReadSegment,
    wchunk: Segment,
    reply: Segment,
}

impl Exchange {
    /// Connects the two sides, registers their buffers and posts two receives on each side.
    fn new(fabric: &SoftFabric) -> Result<Self, String> {
        let mut env = SoftEnv::on(fabric.clone());
        let pair = conformance::connect(&mut env)?;
        let (c, s) = (pair.c, pair.s);
        let lw = Access::LOCAL_WRITE;
        let buf = |pd, len: u32, extra| Buf::<P>::new(pd, len as usize, lw | extra);
        let mut x = Exchange {
            csend: buf(&c.pd, 2048, Access::NONE)?,
            crecv: buf(&c.pd, 4096, Access::NONE)?,
            cread: buf(&c.pd, READ_CHUNK_LEN, Access::REMOTE_READ)?,
            cwrite: buf(&c.pd, WRITE_CHUNK_LEN, Access::REMOTE_WRITE)?,
            creply: buf(&c.pd, REPLY_CHUNK_LEN, Access::REMOTE_WRITE)?,
            srecv: buf(&s.pd, 4096, Access::NONE)?,
            ssend: buf(&s.pd, 2048, Access::NONE)?,
            sdata: buf(&s.pd, 4096, Access::NONE)?,
            env,
            c,
            s,
            limits: ChunkLimits::default(),
            sent: Vec::new(),
        };
        x.cread.fill(0x41);
        x.sdata.fill(0x77);
        for i in 0..2 {
            let at = i as usize * 2048;
            x.s.qp
                .queue_recv(&RecvWr {
                    wr_id: i,
                    sgl: &[x.srecv.sge(at, 2048)],
                })
                .map_err(e2s)?;
            x.c.qp
                .queue_recv(&RecvWr {
                    wr_id: i,
                    sgl: &[x.crecv.sge(at, 2048)],
                })
                .map_err(e2s)?;
        }
        x.s.qp.flush_recv().map_err(e2s)?;
        x.c.qp.flush_recv().map_err(e2s)?;
        Ok(x)
    }

    /// Encodes `msg` + `rpc` at `at` of `buf` and SENDs it from `qp` (records the header).
    fn send(
        &mut self,
        client: bool,
        wr_id: u64,
        at: usize,
        msg: &Message<'_>,
        rpc: &[u8],
    ) -> Result<(), String> {
        let mut wire = [0u8; 2048];
        let len = encode_msg(msg, rpc, &mut wire)?;
        let (buf, qp) = if client {
            (&self.csend, &mut self.c.qp)
        } else {
            (&self.ssend, &mut self.s.qp)
        };
        buf.write(at, &wire[..len]);
        qp.queue_send(&SendWr::send(wr_id, &[buf.sge(at, len)]))
            .map_err(e2s)?;
        qp.flush_send().map_err(e2s)?;
        self.sent.push(describe(msg));
        Ok(())
    }

    /// Waits for the next completion on the client's (`client`) or the server's CQ; a
    /// receive's payload (read from receive slot `slot`) is returned with it.
    fn wait(&mut self, client: bool, slot: usize, what: &str) -> Result<Vec<u8>, String> {
        let (cq, recv) = if client {
            (&mut self.c.cq, &self.crecv)
        } else {
            (&mut self.s.cq, &self.srecv)
        };
        let wc = conformance::wait_wc(&mut self.env, cq)?;
        if !wc.status.is_success() {
            return Err(format!("{what} failed: {wc:?}"));
        }
        Ok(match wc.opcode {
            WcOpcode::RECV => recv.read(slot * 2048, wc.byte_len as usize),
            _ => Vec::new(),
        })
    }

    /// Call 1 from the client: RDMA_MSG with a Read list (at the position after the
    /// arguments), a Write list of one chunk and a Reply chunk. Returns the read position.
    fn client_call1(&mut self) -> Result<u32, String> {
        let mut rpc_call = [0u8; 256];
        let mut n = rpc::encode_call(&mut rpc_call, &call_header(FIRST_XID, 7)).map_err(e2s)?;
        // Arguments before the chunk's position: a file handle-ish opaque and an offset.
        for w in [8u32, 0x0102_0304, 0x0506_0708, 0, 4096, READ_CHUNK_LEN] {
            rpc_call[n..n + 4].copy_from_slice(&w.to_be_bytes());
            n += 4;
        }
        let position = n as u32;
        let reads = [ReadSegment::new(
            position,
            chunk_of(&self.cread, READ_CHUNK_LEN),
        )];
        let wseg = [chunk_of(&self.cwrite, WRITE_CHUNK_LEN)];
        let writes: [&[Segment]; 1] = [&wseg];
        let rseg = [chunk_of(&self.creply, REPLY_CHUNK_LEN)];
        let lists = ChunkListsRef {
            reads: &reads,
            writes: &writes,
            reply: Some(&rseg),
        };
        lists.validate(&self.limits).map_err(e2s)?;
        let msg = Message {
            xid: FIRST_XID,
            credits: CREDITS,
            body: MessageBody::Msg(lists),
        };
        self.send(true, 10, 0, &msg, &rpc_call[..n])?;
        self.wait(true, 0, "call 1 send")?;
        Ok(position)
    }

    /// The server receives call 1 and decodes it with the strict decoder.
    fn server_take_call1(&mut self, position: u32) -> Result<Call1Chunks, String> {
        let got = self.wait(false, 0, "server receive")?;
        let h = v1::decode(&got, &self.limits).map_err(e2s)?;
        h.check_call().map_err(e2s)?;
        let Body::Msg(chunks) = h.body else {
            return Err("call 1 is not RDMA_MSG".into());
        };
        let (read, wchunk, reply) = match (
            chunks.reads.get(0),
            chunks.writes.get(0).and_then(|w| w.get(0)),
            chunks.reply.and_then(|r| r.segments().next()),
        ) {
            (Some(r), Some(w), Some(p)) => (r, w, p),
            _ => return Err("call 1 lost a chunk".into()),
        };
        let (call_hdr, _) = rpc::decode_call(h.payload).map_err(e2s)?;
        if call_hdr.xid != FIRST_XID || read.position != position {
            return Err("call 1 decoded wrongly".into());
        }
        Ok(Call1Chunks {
            read,
            wchunk,
            reply,
        })
    }

    /// The server serves call 1: pulls the Read chunk, writes the result into the Write chunk
    /// and the RPC reply into the Reply chunk, then answers RDMA_NOMSG with the lengths used.
    fn server_reply1(&mut self, ch: &Call1Chunks) -> Result<(), String> {
        let t = ch.read.target;
        let pull = SendOp::RdmaRead {
            remote_addr: t.offset,
            rkey: t.handle,
        };
        self.rdma(
            20,
            pull,
            self.sdata.sge(0, t.length as usize),
            SendFlags::SIGNALED,
        )?;
        self.wait(false, 0, "read chunk pull")?;
        if self.sdata.read(0, READ_CHUNK_LEN as usize)
            != self.cread.read(0, READ_CHUNK_LEN as usize)
        {
            return Err("read chunk pull returned other data".into());
        }
        let w = ch.wchunk;
        let push = SendOp::RdmaWrite {
            remote_addr: w.offset,
            rkey: w.handle,
        };
        self.rdma(
            21,
            push,
            self.sdata.sge(1024, WRITE_LEN as usize),
            SendFlags::NONE,
        )?;
        let mut rpc_reply = [0u8; 128];
        let accepted = ReplyHeader::accepted(FIRST_XID, AcceptStat::Success);
        let mut rn = rpc::encode_reply(&mut rpc_reply, &accepted).map_err(e2s)?;
        for w in [0u32, WRITE_LEN, 1, 0xcafe_f00d] {
            rpc_reply[rn..rn + 4].copy_from_slice(&w.to_be_bytes());
            rn += 4;
        }
        self.ssend.write(1024, &rpc_reply[..rn]);
        let r = ch.reply;
        let push = SendOp::RdmaWrite {
            remote_addr: r.offset,
            rkey: r.handle,
        };
        self.rdma(22, push, self.ssend.sge(1024, rn), SendFlags::NONE)?;
        let wdone = [Segment::new(w.handle, WRITE_LEN, w.offset)];
        let wlist: [&[Segment]; 1] = [&wdone];
        let rdone = [Segment::new(r.handle, rn as u32, r.offset)];
        let lists = ChunkListsRef {
            reads: &[],
            writes: &wlist,
            reply: Some(&rdone),
        };
        let msg = Message {
            xid: FIRST_XID,
            credits: CREDITS,
            body: MessageBody::Nomsg(lists),
        };
        self.send(false, 23, 0, &msg, &[])?;
        self.wait(false, 0, "reply 1 send")?;
        Ok(())
    }

    /// Queues one RDMA Read or Write on the server's QP and rings its doorbell.
    fn rdma(
        &mut self,
        wr_id: u64,
        op: SendOp<'_, P>,
        sge: Sge,
        flags: SendFlags,
    ) -> Result<(), String> {
        let wr = SendWr {
            wr_id,
            op,
            sgl: &[sge],
            flags,
        };
        self.s.qp.queue_send(&wr).map_err(e2s)?;
        self.s.qp.flush_send().map_err(e2s)
    }

    /// The client receives reply 1 and checks the data in the Reply and Write chunks.
    fn client_check_reply1(&mut self) -> Result<(), String> {
        let got = self.wait(true, 0, "client receive")?;
        let h = v1::decode(&got, &self.limits).map_err(e2s)?;
        h.check_reply().map_err(e2s)?;
        let Body::Nomsg(rc) = h.body else {
            return Err("reply 1 is not RDMA_NOMSG".into());
        };
        let used = rc
            .reply
            .and_then(|r| r.segments().next())
            .map_or(0, |s| s.length);
        let in_chunk = self.creply.read(0, used as usize);
        let (msg_in_chunk, _) = rpc::decode(&in_chunk).map_err(e2s)?;
        if !matches!(msg_in_chunk, RpcMsg::Reply(r) if r.xid == FIRST_XID)
            || self.cwrite.read(0, WRITE_LEN as usize) != self.sdata.read(1024, WRITE_LEN as usize)
        {
            return Err("reply 1 chunk data wrong".into());
        }
        Ok(())
    }

    /// Call 2: no chunks, answered inline by RDMA_MSG.
    fn inline_call2(&mut self) -> Result<(), String> {
        let xid2 = FIRST_XID + 1;
        let mut rpc_call = [0u8; 256];
        let n = rpc::encode_call(&mut rpc_call, &call_header(xid2, 0)).map_err(e2s)?;
        let msg2 = Message {
            xid: xid2,
            credits: CREDITS,
            body: MessageBody::Msg(ChunkListsRef::EMPTY),
        };
        self.send(true, 11, 1024, &msg2, &rpc_call[..n])?;
        self.wait(true, 0, "call 2 send")?;
        let got = self.wait(false, 1, "server receive 2")?;
        let h = v1::decode(&got, &self.limits).map_err(e2s)?;
        if h.xid != xid2 || !h.chunks().is_some_and(|c| c.is_empty()) {
            return Err("call 2 decoded wrongly".into());
        }
        let mut rpc_reply = [0u8; 128];
        let accepted = ReplyHeader::accepted(xid2, AcceptStat::Success);
        let rn = rpc::encode_reply(&mut rpc_reply, &accepted).map_err(e2s)?;
        self.send(false, 24, 0, &msg2, &rpc_reply[..rn])?;
        self.wait(false, 0, "reply 2 send")?;
        let got = self.wait(true, 1, "client receive 2")?;
        let h = v1::decode(&got, &self.limits).map_err(e2s)?;
        let (m, _) = rpc::decode(h.payload).map_err(e2s)?;
        if !matches!(m, RpcMsg::Reply(r) if r.xid == xid2) {
            return Err("reply 2 decoded wrongly".into());
        }
        Ok(())
    }
}

/// The sample's RPC call header for `xid` and procedure `proc_num`, AUTH_NONE.
fn call_header(xid: u32, proc_num: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog: PROG,
        vers: 3,
        proc_num,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
}

/// A segment covering the first `len` octets of `buf`, with its remote key.
fn chunk_of(buf: &Buf<P>, len: u32) -> Segment {
    Segment::new(buf.keys().rkey, len, buf.addr())
}

/// Runs the exchange on `fabric` and returns the four transport headers in wire order.
pub fn run(fabric: &SoftFabric) -> Result<Vec<SampleMessage>, String> {
    let mut x = Exchange::new(fabric)?;
    let position = x.client_call1()?;
    let chunks = x.server_take_call1(position)?;
    x.server_reply1(&chunks)?;
    x.client_check_reply1()?;
    x.inline_call2()?;
    Ok(x.sent)
}
