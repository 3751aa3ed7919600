//! The provider conformance suite on the iWARP provider (RDMAP/DDP/MPA over loopback TCP), one
//! `#[test]` per check, with the generic iWARP profile: remote errors terminate the connection
//! (Terminate message, both sides `Disconnected`, later WRs flushed). The checks of RNR retry,
//! which iWARP does not have (a Send that finds no receive is answered with a Terminate, checked
//! by `rnr_retry_zero`), are reported as skipped with the reason and must be exactly those.

use rpcrdma_engine::verbs::conformance::{self as c, Env};
use rpcrdma_engine::verbs::iwarp::IwarpEnv;

fn run(name: &str) {
    let mut env = IwarpEnv::new();
    run_named(&mut env, name);
    let _ = env.listen_addr();
}

include!("common/iwarp_checks.rs");

/// A zero-length RDMA Read (no sink SGE) waits for its empty Read Response and completes
/// `SUCCESS` with 0 octets; the connection stays up and a Read after it moves data.
#[test]
fn accepts_zero_length_read() {
    use rpcrdma_engine::verbs::conformance::{connect, wait_wc, Buf};
    use rpcrdma_engine::verbs::iwarp::IwarpProvider as P;
    use rpcrdma_engine::verbs::{Access, QpState, QueuePair, SendFlags, SendOp, SendWr, WcStatus};
    let mut env = IwarpEnv::new();
    let mut p = connect(&mut env).expect("connect");
    let src = Buf::<P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    src.fill(3);
    let sink = Buf::<P>::new(&p.c.pd, 4096, Access::LOCAL_WRITE).unwrap();
    let read = |wr_id, sgl| SendWr::<P> {
        wr_id,
        op: SendOp::RdmaRead {
            remote_addr: src.addr(),
            rkey: src.keys().rkey,
        },
        sgl,
        flags: SendFlags::SIGNALED,
    };
    p.c.qp.queue_send(&read(1, &[])).unwrap();
    let sgl = [sink.sge(0, 64)];
    p.c.qp.queue_send(&read(2, &sgl)).unwrap();
    p.c.qp.flush_send().unwrap();
    for (id, len) in [(1, 0), (2, 64)] {
        let wc = wait_wc(&mut env, &mut p.c.cq).unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (id, WcStatus::SUCCESS, len)
        );
    }
    assert_eq!(sink.read(0, 64), src.read(0, 64));
    assert_eq!(p.c.qp.state(), QpState::Rts);
}

/// Transfers larger than the transmit buffer (128 KiB) and than one segment: a 1 MiB RDMA
/// Write, a 1 MiB RDMA Read and a 60 000-octet Send over three SGEs all arrive intact, in
/// order, while the socket takes them piece by piece.
#[test]
fn accepts_transfers_larger_than_the_transmit_buffer() {
    use rpcrdma_engine::verbs::conformance::{connect, wait_wcs, Buf};
    use rpcrdma_engine::verbs::iwarp::IwarpProvider as P;
    use rpcrdma_engine::verbs::{
        Access, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
    };
    const MIB: usize = 1 << 20;
    let mut env = IwarpEnv::new();
    let mut p = connect(&mut env).expect("connect");
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let c_src = Buf::<P>::new(&p.c.pd, MIB, Access::LOCAL_WRITE).unwrap();
    let c_sink = Buf::<P>::new(&p.c.pd, MIB, Access::LOCAL_WRITE).unwrap();
    let s_target = Buf::<P>::new(&p.s.pd, MIB, rw).unwrap();
    let s_source = Buf::<P>::new(&p.s.pd, MIB, rw).unwrap();
    let s_recv = Buf::<P>::new(&p.s.pd, 65536, Access::LOCAL_WRITE).unwrap();
    c_src.fill(5);
    s_source.fill(11);
    let rsgl = [s_recv.sge(0, 65536)];
    p.s.qp
        .queue_recv(&RecvWr {
            wr_id: 50,
            sgl: &rsgl,
        })
        .unwrap();
    p.s.qp.flush_recv().unwrap();
    let wsgl = [c_src.sge(0, MIB)];
    let rdsgl = [c_sink.sge(0, MIB)];
    let ssgl = [
        c_src.sge(0, 10_000),
        c_src.sge(200_000, 20_000),
        c_src.sge(500_000, 30_000),
    ];
    let wrs = [
        SendWr::<P> {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote_addr: s_target.addr(),
                rkey: s_target.keys().rkey,
            },
            sgl: &wsgl,
            flags: SendFlags::SIGNALED,
        },
        SendWr::<P> {
            wr_id: 2,
            op: SendOp::RdmaRead {
                remote_addr: s_source.addr(),
                rkey: s_source.keys().rkey,
            },
            sgl: &rdsgl,
            flags: SendFlags::SIGNALED,
        },
        SendWr::<P>::send(3, &ssgl),
    ];
    for wr in &wrs {
        p.c.qp.queue_send(wr).unwrap();
    }
    p.c.qp.flush_send().unwrap();
    let wcs = wait_wcs(&mut env, &mut p.c.cq, 3).unwrap();
    let got: Vec<(u64, WcStatus, WcOpcode)> =
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
            (2, WcStatus::SUCCESS, WcOpcode::RDMA_READ),
            (3, WcStatus::SUCCESS, WcOpcode::SEND),
        ]
    );
    assert_eq!(wcs[1].byte_len, MIB as u32);
    let rc = wait_wcs(&mut env, &mut p.s.cq, 1).unwrap();
    assert_eq!(
        (rc[0].wr_id, rc[0].status, rc[0].byte_len),
        (50, WcStatus::SUCCESS, 60_000)
    );
    assert!(
        s_target.read(0, MIB) == c_src.read(0, MIB),
        "written data differs"
    );
    assert!(
        c_sink.read(0, MIB) == s_source.read(0, MIB),
        "read data differs"
    );
    let mut sent = c_src.read(0, 10_000);
    sent.extend(c_src.read(200_000, 20_000));
    sent.extend(c_src.read(500_000, 30_000));
    assert!(s_recv.read(0, 60_000) == sent, "sent data differs");
}
