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
use rpcrdma_engine::verbs::{Access, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcOpcode};

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

/// Runs the exchange on `fabric` and returns the four transport headers in wire order.
pub fn run(fabric: &SoftFabric) -> Result<Vec<SampleMessage>, String> {
    let mut env = SoftEnv::on(fabric.clone());
    let pair = conformance::connect(&mut env)?;
    let (mut c, mut s) = (pair.c, pair.s);
    let lw = Access::LOCAL_WRITE;
    // Client memory.
    let csend = Buf::<P>::new(&c.pd, 2048, lw)?;
    let crecv = Buf::<P>::new(&c.pd, 4096, lw)?;
    let cread = Buf::<P>::new(&c.pd, READ_CHUNK_LEN as usize, lw | Access::REMOTE_READ)?;
    let cwrite = Buf::<P>::new(&c.pd, WRITE_CHUNK_LEN as usize, lw | Access::REMOTE_WRITE)?;
    let creply = Buf::<P>::new(&c.pd, REPLY_CHUNK_LEN as usize, lw | Access::REMOTE_WRITE)?;
    cread.fill(0x41);
    // Server memory.
    let srecv = Buf::<P>::new(&s.pd, 4096, lw)?;
    let ssend = Buf::<P>::new(&s.pd, 2048, lw)?;
    let sdata = Buf::<P>::new(&s.pd, 4096, lw)?;
    sdata.fill(0x77);
    for i in 0..2 {
        s.qp.queue_recv(&RecvWr {
            wr_id: i,
            sgl: &[srecv.sge(i as usize * 2048, 2048)],
        })
        .map_err(e2s)?;
        c.qp.queue_recv(&RecvWr {
            wr_id: i,
            sgl: &[crecv.sge(i as usize * 2048, 2048)],
        })
        .map_err(e2s)?;
    }
    s.qp.flush_recv().map_err(e2s)?;
    c.qp.flush_recv().map_err(e2s)?;

    let mut sent = Vec::new();
    let mut buf = [0u8; 2048];
    let limits = ChunkLimits::default();

    // ---- Call 1: Read list + Write list + Reply chunk. ----
    let xid = FIRST_XID;
    let mut rpc_call = [0u8; 256];
    let call = CallHeader {
        xid,
        prog: PROG,
        vers: 3,
        proc_num: 7,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    };
    let mut n = rpc::encode_call(&mut rpc_call, &call).map_err(e2s)?;
    // Arguments before the chunk's position: a file handle-ish opaque and an offset.
    for w in [8u32, 0x0102_0304, 0x0506_0708, 0, 4096, READ_CHUNK_LEN] {
        rpc_call[n..n + 4].copy_from_slice(&w.to_be_bytes());
        n += 4;
    }
    let position = n as u32;
    let reads = [ReadSegment::new(
        position,
        Segment::new(cread.keys().rkey, READ_CHUNK_LEN, cread.addr()),
    )];
    let wseg = [Segment::new(
        cwrite.keys().rkey,
        WRITE_CHUNK_LEN,
        cwrite.addr(),
    )];
    let writes: [&[Segment]; 1] = [&wseg];
    let rseg = [Segment::new(
        creply.keys().rkey,
        REPLY_CHUNK_LEN,
        creply.addr(),
    )];
    let lists = ChunkListsRef {
        reads: &reads,
        writes: &writes,
        reply: Some(&rseg),
    };
    lists.validate(&limits).map_err(e2s)?;
    let msg = Message {
        xid,
        credits: CREDITS,
        body: MessageBody::Msg(lists),
    };
    let len = encode_msg(&msg, &rpc_call[..n], &mut buf)?;
    csend.write(0, &buf[..len]);
    c.qp.queue_send(&SendWr::send(10, &[csend.sge(0, len)]))
        .map_err(e2s)?;
    c.qp.flush_send().map_err(e2s)?;
    sent.push(describe(&msg));
    let wc = conformance::wait_wc(&mut env, &mut c.cq)?;
    if !wc.status.is_success() {
        return Err(format!("call 1 send failed: {wc:?}"));
    }

    // Server: decode, pull the read chunk, push the write chunk and the reply chunk.
    let wc = conformance::wait_wc(&mut env, &mut s.cq)?;
    if wc.opcode != WcOpcode::RECV || !wc.status.is_success() {
        return Err(format!("server receive failed: {wc:?}"));
    }
    let got = srecv.read(0, wc.byte_len as usize);
    let h = v1::decode(&got, &limits).map_err(e2s)?;
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
    if call_hdr.xid != xid || read.position != position {
        return Err("call 1 decoded wrongly".into());
    }
    s.qp.queue_send(&SendWr {
        wr_id: 20,
        op: SendOp::RdmaRead {
            remote_addr: read.target.offset,
            rkey: read.target.handle,
        },
        sgl: &[sdata.sge(0, read.target.length as usize)],
        flags: SendFlags::SIGNALED,
    })
    .map_err(e2s)?;
    s.qp.flush_send().map_err(e2s)?;
    let wc = conformance::wait_wc(&mut env, &mut s.cq)?;
    if !wc.status.is_success()
        || sdata.read(0, READ_CHUNK_LEN as usize) != cread.read(0, READ_CHUNK_LEN as usize)
    {
        return Err(format!("read chunk pull failed: {wc:?}"));
    }
    // Result data into the Write chunk.
    s.qp.queue_send(&SendWr {
        wr_id: 21,
        op: SendOp::RdmaWrite {
            remote_addr: wchunk.offset,
            rkey: wchunk.handle,
        },
        sgl: &[sdata.sge(1024, WRITE_LEN as usize)],
        flags: SendFlags::NONE,
    })
    .map_err(e2s)?;
    // The RPC reply into the Reply chunk.
    let mut rpc_reply = [0u8; 128];
    let mut rn = rpc::encode_reply(
        &mut rpc_reply,
        &ReplyHeader::accepted(xid, AcceptStat::Success),
    )
    .map_err(e2s)?;
    for w in [0u32, WRITE_LEN, 1, 0xcafe_f00d] {
        rpc_reply[rn..rn + 4].copy_from_slice(&w.to_be_bytes());
        rn += 4;
    }
    ssend.write(1024, &rpc_reply[..rn]);
    s.qp.queue_send(&SendWr {
        wr_id: 22,
        op: SendOp::RdmaWrite {
            remote_addr: reply.offset,
            rkey: reply.handle,
        },
        sgl: &[ssend.sge(1024, rn)],
        flags: SendFlags::NONE,
    })
    .map_err(e2s)?;
    // RDMA_NOMSG with the lengths actually used.
    let wdone = [Segment::new(wchunk.handle, WRITE_LEN, wchunk.offset)];
    let wlist: [&[Segment]; 1] = [&wdone];
    let rdone = [Segment::new(reply.handle, rn as u32, reply.offset)];
    let rmsg = Message {
        xid,
        credits: CREDITS,
        body: MessageBody::Nomsg(ChunkListsRef {
            reads: &[],
            writes: &wlist,
            reply: Some(&rdone),
        }),
    };
    let len = encode_msg(&rmsg, &[], &mut buf)?;
    ssend.write(0, &buf[..len]);
    s.qp.queue_send(&SendWr::send(23, &[ssend.sge(0, len)]))
        .map_err(e2s)?;
    s.qp.flush_send().map_err(e2s)?;
    sent.push(describe(&rmsg));
    let wc = conformance::wait_wc(&mut env, &mut s.cq)?;
    if !wc.status.is_success() {
        return Err(format!("reply 1 send failed: {wc:?}"));
    }

    // Client: the reply and the data in the chunks.
    let wc = conformance::wait_wc(&mut env, &mut c.cq)?;
    if wc.opcode != WcOpcode::RECV || !wc.status.is_success() {
        return Err(format!("client receive failed: {wc:?}"));
    }
    let got = crecv.read(0, wc.byte_len as usize);
    let h = v1::decode(&got, &limits).map_err(e2s)?;
    h.check_reply().map_err(e2s)?;
    let Body::Nomsg(rc) = h.body else {
        return Err("reply 1 is not RDMA_NOMSG".into());
    };
    let used = rc
        .reply
        .and_then(|r| r.segments().next())
        .map_or(0, |s| s.length);
    let in_chunk = creply.read(0, used as usize);
    let (msg_in_chunk, _) = rpc::decode(&in_chunk).map_err(e2s)?;
    if !matches!(msg_in_chunk, RpcMsg::Reply(r) if r.xid == xid)
        || cwrite.read(0, WRITE_LEN as usize) != sdata.read(1024, WRITE_LEN as usize)
    {
        return Err("reply 1 chunk data wrong".into());
    }

    // ---- Call 2: no chunks, answered inline. ----
    let xid2 = xid + 1;
    let call2 = CallHeader {
        xid: xid2,
        prog: PROG,
        vers: 3,
        proc_num: 0,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    };
    let n = rpc::encode_call(&mut rpc_call, &call2).map_err(e2s)?;
    let msg2 = Message {
        xid: xid2,
        credits: CREDITS,
        body: MessageBody::Msg(ChunkListsRef::EMPTY),
    };
    let len = encode_msg(&msg2, &rpc_call[..n], &mut buf)?;
    csend.write(1024, &buf[..len]);
    c.qp.queue_send(&SendWr::send(11, &[csend.sge(1024, len)]))
        .map_err(e2s)?;
    c.qp.flush_send().map_err(e2s)?;
    sent.push(describe(&msg2));
    conformance::wait_wc(&mut env, &mut c.cq)?;
    let wc = conformance::wait_wc(&mut env, &mut s.cq)?;
    let got = srecv.read(2048, wc.byte_len as usize);
    let h = v1::decode(&got, &limits).map_err(e2s)?;
    if h.xid != xid2 || !h.chunks().is_some_and(|c| c.is_empty()) {
        return Err("call 2 decoded wrongly".into());
    }
    let rn = rpc::encode_reply(
        &mut rpc_reply,
        &ReplyHeader::accepted(xid2, AcceptStat::Success),
    )
    .map_err(e2s)?;
    let rmsg2 = Message {
        xid: xid2,
        credits: CREDITS,
        body: MessageBody::Msg(ChunkListsRef::EMPTY),
    };
    let len = encode_msg(&rmsg2, &rpc_reply[..rn], &mut buf)?;
    ssend.write(0, &buf[..len]);
    s.qp.queue_send(&SendWr::send(24, &[ssend.sge(0, len)]))
        .map_err(e2s)?;
    s.qp.flush_send().map_err(e2s)?;
    sent.push(describe(&rmsg2));
    conformance::wait_wc(&mut env, &mut s.cq)?;
    let wc = conformance::wait_wc(&mut env, &mut c.cq)?;
    let got = crecv.read(2048, wc.byte_len as usize);
    let h = v1::decode(&got, &limits).map_err(e2s)?;
    let (m, _) = rpc::decode(h.payload).map_err(e2s)?;
    if !matches!(m, RpcMsg::Reply(r) if r.xid == xid2) {
        return Err("reply 2 decoded wrongly".into());
    }
    Ok(sent)
}
