//! The iWARP provider across two processes: this test binary runs itself again as the server
//! (the environment variable `RPCRDMA_IWARP_ROLE=server` selects the role in
//! `server_process`, which does nothing otherwise), and the test is the client. Between them,
//! over loopback TCP: RFC 8797-style private data in the MPA Reply (the server's buffer address
//! and STag), an RDMA Write the server proves it saw, Send / receive in both directions, an RDMA
//! Read served from the server's registered memory, and a Write under a wrong STag that the
//! server answers with a Terminate (both sides `Disconnected`, both QPs in ERROR, the server's
//! outstanding receive and the client's later Send flushed).

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::iwarp::{IwarpProvider, IwarpQp};
use rpcrdma_engine::verbs::{
    Access, CmEventKind, Completion, CompletionQueue, ConnRequest, Device, Listener, Provider,
    QpInit, QpOptions, QpState, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcStatus,
};

type P = IwarpProvider;
const ROLE: &str = "RPCRDMA_IWARP_ROLE";
const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const LW: Access = Access::LOCAL_WRITE;
const WAIT: Duration = Duration::from_secs(20);

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

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

/// The server role: accepts one connection, publishes its buffer in the accept's private data,
/// echoes what the client wrote once the client's Send arrives, then expects the connection
/// to be terminated by its own refusal of a bad Write.
#[test]
#[ignore = "the other process of a two-process test: run by it with RPCRDMA_IWARP_ROLE=server"]
fn server_process() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("server"),
        "run only as the child of a two-process test"
    );
    let dev = P::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 4).expect("listen");
    println!("LISTEN {}", l.local_addr().port());
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let target = Buf::<P>::new(&pd, 4096, RW).expect("target");
    target.fill(9);
    let rb = Buf::<P>::new(&pd, 4096, LW).expect("recv buffer");
    let sb = Buf::<P>::new(&pd, 4096, LW).expect("send buffer");
    let req = until("a connect request", || l.poll().expect("listener"));
    assert_eq!(req.private_data(), b"client hello");
    let mut pdata = target.addr().to_be_bytes().to_vec();
    pdata.extend(target.keys().rkey.to_be_bytes());
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = req
        .accept_prepared(init, &pdata, &mut |qp| {
            recv(qp, 1, &rb, 4096);
            recv(qp, 2, &rb, 4096);
            Ok(())
        })
        .expect("accept");
    // The client wrote 64 octets at the target's start, then sent 100 octets.
    let wc = next_wc(&mut cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::SUCCESS, 100)
    );
    assert_eq!(rb.read(0, 100), pattern(3, 0, 100), "the client's Send");
    sb.write(0, &target.read(0, 64));
    post(&mut qp, SendWr::send(10, &[sb.sge(0, 64)]));
    let wc = next_wc(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (10, WcStatus::SUCCESS));
    // The client's Write under a bad STag: this side terminates; receive 2 flushes.
    event(&mut qp, CmEventKind::Disconnected);
    assert_eq!(qp.state(), QpState::Error);
    let wc = next_wc(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WR_FLUSH_ERR));
    assert_eq!(
        target.read(3000, 16),
        pattern(9, 3000, 16),
        "bad Write placed"
    );
    println!("SERVER OK");
}

/// Starts the server process; returns it and the port it listens on.
fn spawn_server() -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    u16,
) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "server_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "server")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let port = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "server ended early"
        );
        // The harness may have printed the test's name on the same line.
        if let Some(at) = line.find("LISTEN ") {
            break line[at + 7..].trim().parse::<u16>().expect("port");
        }
    };
    (child, out, port)
}

/// Client and server in separate processes: Send / receive, RDMA Write, RDMA Read and an
/// access error, each checked on both sides.
#[test]
fn accepts_rdma_between_two_processes() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let (mut child, mut out, port) = spawn_server();
    let dev = P::open(lo()).expect("open");
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let sb = Buf::<P>::new(&pd, 4096, LW).expect("send buffer");
    let rb = Buf::<P>::new(&pd, 4096, LW).expect("recv buffer");
    sb.fill(3);
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let addr = SocketAddr::new(lo(), port);
    let mut qp = dev.connect(addr, init, b"client hello").expect("connect");
    let ev = until("Established", || qp.poll_event().expect("event"));
    assert_eq!(ev.kind, CmEventKind::Established);
    let pdata = ev.private_data.as_slice();
    assert_eq!(pdata.len(), 12, "server's private data {pdata:02x?}");
    let taddr = u64::from_be_bytes(pdata[..8].try_into().expect("8 octets"));
    let trkey = u32::from_be_bytes(pdata[8..12].try_into().expect("4 octets"));

    // RDMA Write of 64 octets (pattern 7) at the server's target.
    let wb = Buf::<P>::new(&pd, 4096, LW).expect("write source");
    wb.fill(7);
    let write: SendOp<'_, P> = SendOp::RdmaWrite {
        remote_addr: taddr,
        rkey: trkey,
    };
    let sgl = [wb.sge(0, 64)];
    post(
        &mut qp,
        SendWr {
            wr_id: 1,
            op: write,
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    );
    let wc = next_wc(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
    // Send 100 octets; the server answers with what it found at its target.
    recv(&mut qp, 5, &rb, 4096);
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
    let db = Buf::<P>::new(&pd, 4096, LW).expect("read sink");
    let read: SendOp<'_, P> = SendOp::RdmaRead {
        remote_addr: taddr + 2048,
        rkey: trkey,
    };
    let sgl = [db.sge(0, 1000)];
    post(
        &mut qp,
        SendWr {
            wr_id: 3,
            op: read,
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    );
    let wc = next_wc(&mut cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (3, WcStatus::SUCCESS, 1000)
    );
    assert_eq!(db.read(0, 1000), pattern(9, 2048, 1000), "read data");

    // A Write under a wrong STag: the server terminates the connection.
    let bad: SendOp<'_, P> = SendOp::RdmaWrite {
        remote_addr: taddr + 3000,
        rkey: trkey ^ 0x100,
    };
    let sgl = [wb.sge(0, 16)];
    post(
        &mut qp,
        SendWr {
            wr_id: 4,
            op: bad,
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    );
    let wc = next_wc(&mut cq);
    assert_eq!(wc.wr_id, 4);
    assert!(
        [WcStatus::SUCCESS, WcStatus::WR_FLUSH_ERR].contains(&wc.status),
        "bad Write completed {}",
        wc.status.name()
    );
    event(&mut qp, CmEventKind::Disconnected);
    assert_eq!(qp.state(), QpState::Error);
    post(&mut qp, SendWr::send(6, &[sb.sge(0, 8)]));
    let wc = next_wc(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::WR_FLUSH_ERR));

    let status = child.wait().expect("server exit");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    assert!(status.success(), "server failed: {rest}");
    assert!(rest.contains("SERVER OK"), "server output: {rest}");
}
