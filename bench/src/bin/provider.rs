//! Provider and mempool micro-benchmark (issue 3), side by side in one run, as ratios to the
//! physical floor:
//!
//! 1. bare cross-core cache-line ping-pong (the floor: nothing crossing cores can be faster);
//! 2. software-provider SEND round trip (client SEND → server receive → server SEND back);
//! 3. RDMA WRITE of `--size` octets + SEND, answered by a SEND (the DDP-write shape);
//! 4. mempool get+put per object through a per-core cache (single, and bulk of 32).
//!
//! Client and server run on the two cores, pinned. Rerun:
//! `cargo run --release -p rpcrdma-bench --bin provider -- [--iters N] [--size BYTES]`.

use std::sync::Arc;
use std::time::Instant;

use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::{cacheline_pingpong, histogram, pin, report, two_cores, Row};
use rpcrdma_engine::verbs::conformance::{self, Buf, Side};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftProvider};
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, Provider, QueuePair, RecvWr, SendFlags, SendOp, SendWr,
    WcOpcode,
};
use rpcrdma_mempool::{HugePagePolicy, ObjIdx, Pool, PoolConfig, Region, RegionOptions};

type P = SoftProvider;
const LW: Access = Access::LOCAL_WRITE;
const RING: usize = 32;

const USAGE: &str = "usage: provider [--iters N] [--size BYTES]
  --iters N       round trips per row, 1..=100000000 [100000]
  --size BYTES    RDMA WRITE size of the DDP row, 0..=61440 [4096]
  -h, --help      this text
  -V, --version   the program's version
";

fn poll_until_recv(cq: &mut <P as Provider>::Cq, wcs: &mut [Completion]) {
    loop {
        let n = cq.poll(wcs).expect("CQ poll");
        for wc in &wcs[..n] {
            assert!(wc.status.is_success(), "completion failed: {wc:?}");
            if wc.opcode == WcOpcode::RECV {
                return;
            }
        }
        core::hint::spin_loop();
    }
}

/// Runs `iters` round trips. With `write_len > 0` the client first RDMA-Writes that many octets
/// into the server's buffer, then SENDs; RC ordering makes the data visible before the receive.
fn send_rtt(iters: u64, write_len: usize) -> hdrhistogram::Histogram<u64> {
    let mut env = SoftEnv::new();
    let pair = conformance::connect(&mut env).expect("connect two soft QPs");
    let Side {
        pd: cpd,
        cq: mut ccq,
        qp: mut cqp,
    } = pair.c;
    let Side {
        pd: spd,
        cq: mut scq,
        qp: mut sqp,
    } = pair.s;
    let cbuf = Buf::<P>::new(&cpd, 64 * 1024 + 4096, LW).expect("client buffer");
    let sbuf =
        Buf::<P>::new(&spd, 64 * 1024 + 4096, LW | Access::REMOTE_WRITE).expect("server buffer");
    let srkey = sbuf.keys().rkey;
    let saddr = sbuf.addr();
    let cores = two_cores();
    // The client must not SEND before the server's receives are posted (RNR retry is 0).
    let ready = Arc::new(std::sync::Barrier::new(2));
    let server_ready = Arc::clone(&ready);
    let server = std::thread::spawn(move || {
        let _pd = spd;
        pin(cores.map(|c| c.1));
        let mut wcs = [Completion::default(); 16];
        for i in 0..RING {
            let sge = [sbuf.sge(64 * 1024 + (i % 4) * 1024, 1024)];
            sqp.queue_recv(&RecvWr {
                wr_id: i as u64,
                sgl: &sge,
            })
            .expect("post recv");
        }
        sqp.flush_recv().expect("flush recv");
        server_ready.wait();
        let reply = [sbuf.sge(0, 32)];
        let mut done = 0u64;
        while done < iters {
            let n = scq.poll(&mut wcs).expect("server CQ poll");
            for wc in &wcs[..n] {
                assert!(wc.status.is_success(), "server completion failed: {wc:?}");
                if wc.opcode != WcOpcode::RECV {
                    continue;
                }
                let sge = [sbuf.sge(64 * 1024 + (wc.wr_id as usize % 4) * 1024, 1024)];
                sqp.queue_recv(&RecvWr {
                    wr_id: wc.wr_id,
                    sgl: &sge,
                })
                .expect("repost");
                sqp.flush_recv().expect("flush recv");
                // Signal every 16th reply so the send queue slots are reclaimed.
                let flags = if done % 16 == 0 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags(0)
                };
                sqp.queue_send(&SendWr::send(1, &reply).with_flags(flags))
                    .expect("reply");
                sqp.flush_send().expect("flush send");
                done += 1;
            }
        }
        (sbuf, sqp, scq)
    });
    pin(cores.map(|c| c.0));
    ready.wait();
    let mut wcs = [Completion::default(); 16];
    let mut h = histogram();
    let msg = [cbuf.sge(0, 32)];
    let data = [cbuf.sge(4096, write_len.max(1))];
    for i in 0..iters {
        let rsge = [cbuf.sge(32 * 1024, 1024)];
        cqp.queue_recv(&RecvWr {
            wr_id: 9,
            sgl: &rsge,
        })
        .expect("client recv");
        cqp.flush_recv().expect("flush recv");
        let flags = if i % 16 == 0 {
            SendFlags::SIGNALED
        } else {
            SendFlags(0)
        };
        let t = Instant::now();
        if write_len > 0 {
            let w = SendWr {
                wr_id: 2,
                op: SendOp::RdmaWrite {
                    remote_addr: saddr + 4096,
                    rkey: srkey,
                },
                sgl: &data,
                flags: SendFlags(0),
            };
            cqp.queue_send(&w).expect("write");
        }
        cqp.queue_send(&SendWr::send(3, &msg).with_flags(flags))
            .expect("send");
        cqp.flush_send().expect("flush send");
        poll_until_recv(&mut ccq, &mut wcs);
        h.saturating_record(t.elapsed().as_nanos() as u64);
    }
    let _server_side = server.join().expect("server thread");
    drop((cqp, ccq, cbuf));
    h
}

fn pool_rows(iters: u64) -> (hdrhistogram::Histogram<u64>, hdrhistogram::Histogram<u64>) {
    let region = Arc::new(
        Region::new(
            8 << 20,
            &RegionOptions {
                hugepages: HugePagePolicy::Prefer,
                ..RegionOptions::default()
            },
        )
        .expect("region"),
    );
    let env = SoftEnv::new();
    let pd = env.client_pd();
    region.register(&pd, LW).expect("register the region");
    let pool = Pool::new(&region, &PoolConfig::new(4096, 1024)).expect("pool");
    let mut cache = pool.cache().expect("cache");
    let (mut single, mut bulk) = (histogram(), histogram());
    let batch = 1024u64;
    let mut objs = [ObjIdx::from_raw(0); 32];
    for _ in 0..(iters / batch).max(1) {
        let t = Instant::now();
        for _ in 0..batch {
            let o = cache.get().expect("object");
            cache.put(core::hint::black_box(o));
        }
        single.saturating_record((t.elapsed().as_nanos() as u64 / batch).max(1));
        let t = Instant::now();
        for _ in 0..batch / 32 {
            cache.get_bulk(&mut objs).expect("bulk");
            cache.put_bulk(core::hint::black_box(&objs));
        }
        bulk.saturating_record((t.elapsed().as_nanos() as u64 / batch).max(1));
    }
    (single, bulk)
}

fn main() {
    let flags = Flags::new(USAGE, &["--iters", "--size"]);
    let iters = flags.number("--iters", 1, 100_000_000).unwrap_or(100_000);
    let size = flags.number("--size", 0, 60 * 1024).unwrap_or(4096) as usize;
    // Read the process's core mask before anything pins the main thread.
    if two_cores().is_none() {
        eprintln!("provider: fewer than two cores available; threads run unpinned");
    }
    let floor = cacheline_pingpong(iters);
    let send = send_rtt(iters, 0);
    let write = send_rtt(iters, size);
    let (single, bulk) = pool_rows(iters * 10);
    report(
        &format!("provider micro-benchmark ({iters} iterations; ratio = p50 / floor p50)"),
        &[
            Row::new("cache-line ping-pong RTT (floor)", floor),
            Row::new("soft SEND round trip (32 B each way)", send),
            Row::new(format!("soft RDMA WRITE {size} B + SEND, SEND back"), write),
            Row::new("mempool get+put per object (cache)", single),
            Row::new("mempool get+put per object (bulk 32)", bulk),
        ],
    );
}
