//! The iWARP provider's wire checks across two processes: this test binary runs itself again
//! as the server (`common::procs`), and the test is the client. Between them, over loopback
//! TCP, one connection per case, each named by the client's private data in the MPA Request:
//!
//! - `hello`: RFC 8797-style private data in the MPA Reply (the server's buffer addresses and
//!   STags), an RDMA Write the server proves it saw, Send / receive in both directions, an RDMA
//!   Read served from the server's registered memory, then a Write under a wrong STag that the
//!   server answers with a Terminate;
//! - one connection per remote access error the responder must refuse (RFC 5040 / RFC 5041):
//!   an RDMA Read under a wrong STag, a Write past the region's end, a Write into a region
//!   without REMOTE_WRITE, a Read of a region without REMOTE_READ, a Read past the region's end.
//!
//! Every refusal ends the same way on both sides: a Terminate, both QPs in ERROR with
//! `Disconnected`, the server's outstanding receives and the client's later Send flushed
//! (`WR_FLUSH_ERR`), a refused Read flushed too (as on siw) with its sink untouched, and the
//! server's memory untouched.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::procs::{self, Peer};
use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::iwarp::{IwarpProvider, IwarpQp};
use rpcrdma_engine::verbs::{
    Access, CmEventKind, Completion, CompletionQueue, ConnRequest, Device, Listener, Provider,
    QpInit, QpOptions, QpState, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcStatus,
};

type P = IwarpProvider;
const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
/// A region the peer may read but not write.
const RO: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0);
/// A region the peer may write but not read.
const WO: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);
const LW: Access = Access::LOCAL_WRITE;
const WAIT: Duration = Duration::from_secs(20);
const REGION: usize = 4096;

/// The access errors, one connection each: (name, is a Read, region, offset, length, STag
/// changed). Regions: 0 the read-write target, 1 the read-only one, 2 the write-only one.
const REFUSALS: [(&str, bool, usize, u64, usize, bool); 5] = [
    ("read under a wrong STag", true, 0, 2048, 100, true),
    ("write past the end", false, 0, 4090, 16, false),
    ("write without REMOTE_WRITE", false, 1, 0, 16, false),
    ("read without REMOTE_READ", true, 2, 0, 16, false),
    ("read past the end", true, 0, 4000, 200, false),
];

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// What `Buf::fill(seed)` writes at `off..off + len`.
fn pattern(seed: u8, off: usize, len: usize) -> Vec<u8> {
    (off..off + len)
        .map(|i| {
            seed.wrapping_add((i as u8).wrapping_mul(7))
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn next_wc(cq: &mut <P as Provider>::Cq) -> Completion {
    let mut wc = [Completion::default(); 1];
    until("a completion", || {
        (cq.poll(&mut wc).expect("poll") == 1).then_some(wc[0])
    })
}

fn event(qp: &mut IwarpQp, kind: CmEventKind) {
    until("a connection event", || {
        qp.poll_event().expect("event").filter(|e| e.kind == kind)
    });
}

fn post(qp: &mut IwarpQp, wr: SendWr<'_, P>) {
    qp.queue_send(&wr).expect("queue_send");
    qp.flush_send().expect("flush_send");
}

fn recv(qp: &mut IwarpQp, wr_id: u64, b: &Buf<P>, len: usize) {
    let sgl = [b.sge(0, len)];
    qp.queue_recv(&RecvWr { wr_id, sgl: &sgl })
        .expect("queue_recv");
    qp.flush_recv().expect("flush_recv");
}

/// The server's three regions, filled with patterns 9, 5 and 6.
struct Regions([Buf<P>; 3]);

impl Regions {
    /// Address and STag of each region, 12 octets apiece: the accept's private data.
    fn private_data(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for b in &self.0 {
            v.extend(b.addr().to_be_bytes());
            v.extend(b.keys().rkey.to_be_bytes());
        }
        v
    }

    /// Fails unless every region holds its pattern (the target's first 64 octets excepted:
    /// the `hello` case writes them).
    fn untouched(&self, case: &str) {
        let [t, r, w] = &self.0;
        assert_eq!(
            t.read(64, REGION - 64),
            pattern(9, 64, REGION - 64),
            "{case}"
        );
        assert_eq!(r.read(0, REGION), pattern(5, 0, REGION), "{case}");
        assert_eq!(w.read(0, REGION), pattern(6, 0, REGION), "{case}");
    }
}

/// The server role: accepts one connection per case, in the client's order.
#[test]
#[ignore = "the other process of a two-process test: run by accepts_rdma_between_two_processes"]
fn server_process() {
    procs::expect_role("server_process");
    let dev = P::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 4).expect("listen");
    procs::announce(l.local_addr().port());
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let buf = |access, seed| {
        let b = Buf::<P>::new(&pd, REGION, access).expect("region");
        b.fill(seed);
        b
    };
    let regions = Regions([buf(RW, 9), buf(RO, 5), buf(WO, 6)]);
    let rb = Buf::<P>::new(&pd, REGION, LW).expect("recv buffer");
    let sb = Buf::<P>::new(&pd, REGION, LW).expect("send buffer");
    for case in 0..=REFUSALS.len() {
        let req = until("a connect request", || l.poll().expect("listener"));
        let name = String::from_utf8_lossy(req.private_data()).into_owned();
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions::default(),
        };
        let mut qp = req
            .accept_prepared(init, &regions.private_data(), &mut |qp| {
                recv(qp, 1, &rb, REGION);
                recv(qp, 2, &rb, REGION);
                Ok(())
            })
            .expect("accept");
        if case == 0 {
            assert_eq!(name, "hello");
            // The client wrote 64 octets at the target's start, then sent 100 octets.
            let wc = next_wc(&mut cq);
            assert_eq!(
                (wc.wr_id, wc.status, wc.byte_len),
                (1, WcStatus::SUCCESS, 100)
            );
            assert_eq!(rb.read(0, 100), pattern(3, 0, 100), "the client's Send");
            sb.write(0, &regions.0[0].read(0, 64));
            post(&mut qp, SendWr::send(10, &[sb.sge(0, 64)]));
            let wc = next_wc(&mut cq);
            assert_eq!((wc.wr_id, wc.status), (10, WcStatus::SUCCESS));
        } else {
            assert_eq!(name, REFUSALS[case - 1].0);
        }
        // The client's bad access: this side terminates; the receives still posted flush.
        event(&mut qp, CmEventKind::Disconnected);
        assert_eq!(qp.state(), QpState::Error, "{name}");
        let mut flushed: Vec<u64> = Vec::new();
        for _ in 0..if case == 0 { 1 } else { 2 } {
            let wc = next_wc(&mut cq);
            assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR, "{name}: {wc:?}");
            flushed.push(wc.wr_id);
        }
        assert!(flushed.contains(&2), "{name}: flushed {flushed:?}");
        regions.untouched(&name);
    }
    println!("SERVER OK");
}

/// The client's side of one connection: connects with `name` as private data; the server's
/// regions' addresses and STags.
fn connect(
    dev: &<P as Provider>::Device,
    pd: &<P as Provider>::Pd,
    cq: &<P as Provider>::Cq,
    port: u16,
    name: &str,
) -> (IwarpQp, [(u64, u32); 3]) {
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let addr = SocketAddr::new(lo(), port);
    let mut qp = dev.connect(addr, init, name.as_bytes()).expect("connect");
    let ev = until("Established", || qp.poll_event().expect("event"));
    assert_eq!(ev.kind, CmEventKind::Established, "{name}");
    let p = ev.private_data.as_slice();
    assert_eq!(p.len(), 36, "server's private data {p:02x?}");
    let region = |i: usize| {
        let at = 12 * i;
        let addr = u64::from_be_bytes(p[at..at + 8].try_into().expect("8 octets"));
        let rkey = u32::from_be_bytes(p[at + 8..at + 12].try_into().expect("4 octets"));
        (addr, rkey)
    };
    (qp, [region(0), region(1), region(2)])
}

/// Posts a signaled RDMA Write or Read of `b[..len]` at `remote_addr` under `rkey`.
fn rdma(qp: &mut IwarpQp, wr_id: u64, read: bool, b: &Buf<P>, len: usize, at: (u64, u32)) {
    let (remote_addr, rkey) = at;
    let op: SendOp<'_, P> = if read {
        SendOp::RdmaRead { remote_addr, rkey }
    } else {
        SendOp::RdmaWrite { remote_addr, rkey }
    };
    let sgl = [b.sge(0, len)];
    post(
        qp,
        SendWr {
            wr_id,
            op,
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    );
}

/// After a refused access: the connection is gone on this side too, and a later Send flushes.
fn expect_terminated(qp: &mut IwarpQp, cq: &mut <P as Provider>::Cq, sb: &Buf<P>, name: &str) {
    event(qp, CmEventKind::Disconnected);
    assert_eq!(qp.state(), QpState::Error, "{name}");
    post(qp, SendWr::send(6, &[sb.sge(0, 8)]));
    let wc = next_wc(cq);
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::WR_FLUSH_ERR), "{name}");
}

/// Client and server in separate processes: Send / receive, RDMA Write, RDMA Read and every
/// remote access error, each checked on both sides.
#[test]
fn accepts_rdma_between_two_processes() {
    if procs::is_child() {
        return;
    }
    let peer = Peer::spawn("server_process");
    let dev = P::open(lo()).expect("open");
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let sb = Buf::<P>::new(&pd, REGION, LW).expect("send buffer");
    let rb = Buf::<P>::new(&pd, REGION, LW).expect("recv buffer");
    let wb = Buf::<P>::new(&pd, REGION, LW).expect("write source / read sink");
    sb.fill(3);
    wb.fill(7);
    let (mut qp, r) = connect(&dev, &pd, &cq, peer.port(), "hello");
    let (taddr, trkey) = r[0];

    // RDMA Write of 64 octets (pattern 7) at the server's target.
    rdma(&mut qp, 1, false, &wb, 64, (taddr, trkey));
    let wc = next_wc(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
    // Send 100 octets; the server answers with what it found at its target.
    recv(&mut qp, 5, &rb, REGION);
    post(&mut qp, SendWr::send(2, &[sb.sge(0, 100)]));
    let mut got = [next_wc(&mut cq), next_wc(&mut cq)];
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (2, WcStatus::SUCCESS));
    assert_eq!(
        (got[1].wr_id, got[1].status, got[1].byte_len),
        (5, WcStatus::SUCCESS, 64)
    );
    assert_eq!(
        rb.read(0, 64),
        pattern(7, 0, 64),
        "the server saw the Write"
    );

    // RDMA Read of 1 000 octets of the server's memory.
    let db = Buf::<P>::new(&pd, REGION, LW).expect("read sink");
    rdma(&mut qp, 3, true, &db, 1000, (taddr + 2048, trkey));
    let wc = next_wc(&mut cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (3, WcStatus::SUCCESS, 1000)
    );
    assert_eq!(db.read(0, 1000), pattern(9, 2048, 1000), "read data");

    // A Write under a wrong STag: the server terminates the connection.
    rdma(&mut qp, 4, false, &wb, 16, (taddr + 3000, trkey ^ 0x100));
    let wc = next_wc(&mut cq);
    assert_eq!(wc.wr_id, 4);
    assert!(
        [WcStatus::SUCCESS, WcStatus::WR_FLUSH_ERR].contains(&wc.status),
        "bad Write completed {}",
        wc.status.name()
    );
    expect_terminated(&mut qp, &mut cq, &sb, "write under a wrong STag");

    for (name, read, region, off, len, bad_stag) in REFUSALS {
        let (mut qp, r) = connect(&dev, &pd, &cq, peer.port(), name);
        let (addr, rkey) = r[region];
        let rkey = if bad_stag { rkey ^ 0x100 } else { rkey };
        db.fill(1);
        rdma(
            &mut qp,
            7,
            read,
            if read { &db } else { &wb },
            len,
            (addr + off, rkey),
        );
        let wc = next_wc(&mut cq);
        assert_eq!(wc.wr_id, 7, "{name}");
        if read {
            // As on siw: the Read the responder refused is flushed with the connection.
            assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR, "{name}: a refused Read");
            assert_eq!(
                db.read(0, REGION),
                pattern(1, 0, REGION),
                "{name}: sink written"
            );
        } else {
            assert!(
                [WcStatus::SUCCESS, WcStatus::WR_FLUSH_ERR].contains(&wc.status),
                "{name}: completed {}",
                wc.status.name()
            );
        }
        expect_terminated(&mut qp, &mut cq, &sb, name);
    }
    peer.finish("SERVER OK");
}
