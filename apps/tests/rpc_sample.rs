//! The RPC-over-RDMA sample exchange behind `scripts/check-pcap.sh`: the trace carries the
//! headers that were sent, and the expected tshark lines have tshark's format.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use rpcrdma_apps::pcap::{opcode, Mtu, PcapTrace};
use rpcrdma_apps::rpc_sample::{self, expected_tshark_fields, SampleMessage};
use rpcrdma_engine::proto::chunks::{ChunkLimits, Segment};
use rpcrdma_engine::proto::v1::{self, Body};
use rpcrdma_engine::verbs::soft::SoftFabric;

#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn accepts_sample_exchange_and_its_trace() {
    let fabric = SoftFabric::new();
    let buf = SharedBuf::default();
    let trace = PcapTrace::install(&fabric, Box::new(buf.clone()), Mtu::M1024).unwrap();
    let msgs = rpc_sample::run(&fabric).unwrap();
    let n = trace.finish().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        msgs.iter()
            .map(|m| (
                m.xid,
                m.msg_type,
                m.reads.len(),
                m.writes.len(),
                m.reply.is_some()
            ))
            .collect::<Vec<_>>(),
        [
            (rpc_sample::FIRST_XID, 0, 1, 1, true),
            (rpc_sample::FIRST_XID, 1, 0, 1, true),
            (rpc_sample::FIRST_XID + 1, 0, 0, 0, false),
            (rpc_sample::FIRST_XID + 1, 0, 0, 0, false),
        ]
    );
    assert_eq!(msgs[1].writes[0][0].length, rpc_sample::WRITE_LEN);
    // 4 SENDs + 4 ACKs, 1 READ request + 1 response, 2 WRITEs + 2 ACKs.
    assert_eq!(n, 14);
    // Every SEND Only in the capture decodes to the header that was sent, in order.
    let bytes = buf.0.lock().unwrap().clone();
    let mut at = 24;
    let mut seen = 0;
    while at + 16 <= bytes.len() {
        let incl =
            u32::from_le_bytes([bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11]])
                as usize;
        let frame = &bytes[at + 16..at + 16 + incl];
        at += 16 + incl;
        if frame[42] != opcode::SEND_ONLY {
            continue;
        }
        let pad = usize::from((frame[43] >> 4) & 3);
        let payload = &frame[54..frame.len() - 4 - pad];
        let h = v1::decode(payload, &ChunkLimits::default()).unwrap();
        let m = &msgs[seen];
        assert_eq!((h.xid, h.vers, h.credits), (m.xid, m.version, m.credits));
        let c = match h.body {
            Body::Msg(c) => {
                assert_eq!(m.msg_type, 0);
                c
            }
            Body::Nomsg(c) => {
                assert_eq!(m.msg_type, 1);
                c
            }
            other => panic!("unexpected body {other:?}"),
        };
        assert_eq!(c.segments().collect::<Vec<_>>(), m.segments());
        seen += 1;
    }
    assert_eq!(seen, 4);
}

#[test]
fn accepts_tshark_field_format() {
    let m = SampleMessage {
        xid: 0x0102_0304,
        version: 1,
        credits: 32,
        msg_type: 0,
        reads: vec![(112, Segment::new(0x19e, 300, 0x7f00_0000_1000))],
        writes: vec![vec![Segment::new(0x2a, 512, 0x2000)]],
        reply: Some(vec![Segment::new(0xabc, 1024, 0x3000)]),
    };
    let empty = SampleMessage {
        xid: 5,
        version: 1,
        credits: 1,
        msg_type: 0,
        reads: vec![],
        writes: vec![],
        reply: None,
    };
    let want = concat!(
        "0x01020304\t1\t32\t0\t1\t1\t1\t",
        "0x0000019e,0x0000002a,0x00000abc\t300,512,1024\t",
        "0x00007f0000001000,0x0000000000002000,0x0000000000003000\n",
        "0x00000005\t1\t1\t0\t0\t0\t0\t\t\t\n",
    );
    assert_eq!(expected_tshark_fields(&[m, empty]), want);
}
