//! The bare software-provider SEND round trip, as a reusable baseline: two pinned threads, one
//! connected soft QP pair, 32-octet SENDs echoed back. Nothing of the RPC stack is involved, so
//! it is the floor an RPC round trip over the soft provider is compared with.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::conformance::{self, Buf};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftProvider};
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, QueuePair, RecvWr, SendWr, WcOpcode,
};

use crate::{histogram, pin, two_cores};

/// Receives each side keeps posted.
pub(crate) const DEPTH: usize = 16;
/// Octets each way.
pub(crate) const MSG: usize = 32;

/// Polls `cq` until a receive completion arrives, at most `max_polls` times; returns its
/// `wr_id` (send completions are skipped), or `None` when none came.
pub(crate) fn poll_recv(
    cq: &mut <SoftProvider as rpcrdma_engine::verbs::Provider>::Cq,
    max_polls: u64,
) -> Option<u64> {
    let mut wcs = [Completion::default(); 8];
    for _ in 0..max_polls {
        let n = cq.poll(&mut wcs).expect("CQ poll");
        let mut got = None;
        for wc in &wcs[..n] {
            assert!(wc.status.is_success(), "completion failed: {wc:?}");
            if wc.opcode == WcOpcode::RECV {
                got = Some(wc.wr_id);
            }
        }
        if got.is_some() {
            return got;
        }
        core::hint::spin_loop();
    }
    None
}

/// Waits for one receive completion on `cq`, returning its `wr_id`.
fn next_recv(cq: &mut <SoftProvider as rpcrdma_engine::verbs::Provider>::Cq) -> u64 {
    poll_recv(cq, u64::MAX).expect("an endless wait returns a completion")
}

/// `iters` round trips: the client SENDs, the server's receive completes and it SENDs back,
/// the client's receive completes. Client and server threads are pinned to the first two
/// usable cores. Every WR is signaled; receives are reposted one per message.
pub fn soft_send_rtt(iters: u64) -> Histogram<u64> {
    let mut env = SoftEnv::new();
    let pair = conformance::connect(&mut env).expect("connect a soft QP pair");
    let (c, s) = (pair.c, pair.s);
    let lw = Access::LOCAL_WRITE;
    let cbuf = Buf::<SoftProvider>::new(&c.pd, 64 * 1024, lw).expect("client buffer");
    let sbuf = Buf::<SoftProvider>::new(&s.pd, 64 * 1024, lw).expect("server buffer");
    let cores = two_cores();
    let ready = Arc::new(Barrier::new(2));
    let r2 = Arc::clone(&ready);
    let (mut sqp, mut scq, spd) = (s.qp, s.cq, s.pd);
    let server = std::thread::spawn(move || {
        let _keep = spd;
        pin(cores.map(|c| c.1));
        let post = |qp: &mut <SoftProvider as rpcrdma_engine::verbs::Provider>::Qp, i: u64| {
            let sge = [sbuf.sge(1024 * (1 + i as usize % DEPTH), 1024)];
            qp.queue_recv(&RecvWr {
                wr_id: i,
                sgl: &sge,
            })
            .expect("post receive");
            qp.flush_recv().expect("receive doorbell");
        };
        for i in 0..DEPTH as u64 {
            post(&mut sqp, i);
        }
        r2.wait();
        let echo = [sbuf.sge(0, MSG)];
        for _ in 0..iters {
            let id = next_recv(&mut scq);
            post(&mut sqp, id);
            sqp.queue_send(&SendWr::send(id, &echo)).expect("echo");
            sqp.flush_send().expect("send doorbell");
        }
        (sqp, scq, sbuf)
    });
    pin(cores.map(|c| c.0));
    let (mut cqp, mut ccq, _cpd) = (c.qp, c.cq, c.pd);
    for i in 0..DEPTH as u64 {
        let sge = [cbuf.sge(1024 * (1 + i as usize), 1024)];
        cqp.queue_recv(&RecvWr {
            wr_id: i,
            sgl: &sge,
        })
        .expect("post receive");
    }
    cqp.flush_recv().expect("receive doorbell");
    ready.wait();
    let msg = [cbuf.sge(0, MSG)];
    let mut h = histogram();
    for _ in 0..iters {
        let t = Instant::now();
        cqp.queue_send(&SendWr::send(u64::MAX, &msg)).expect("send");
        cqp.flush_send().expect("send doorbell");
        let id = next_recv(&mut ccq);
        h.saturating_record(t.elapsed().as_nanos() as u64);
        let sge = [cbuf.sge(1024 * (1 + id as usize % DEPTH), 1024)];
        cqp.queue_recv(&RecvWr {
            wr_id: id,
            sgl: &sge,
        })
        .expect("repost");
        cqp.flush_recv().expect("receive doorbell");
    }
    let _server_side = server.join().expect("server thread");
    h
}

/// The system load averages (1, 5, 15 minutes) from `/proc/loadavg`, for recording next to
/// numbers taken on a shared machine.
pub fn load_average() -> Option<(f64, f64, f64)> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}
