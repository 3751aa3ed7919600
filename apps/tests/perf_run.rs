//! Short runs of every test over the soft provider (both sides in this process). The engine
//! checks the data itself (echoes and READ data against the peer's pattern, write_bw by
//! reading the server's buffer back), so a successful run is also an integrity check.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use rpcrdma_apps::pcap::{Mtu, PcapTrace};
use rpcrdma_apps::perf::verbs_loops::{self, ConnInfo, Hello, Observer, Reply, HELLO_LEN};
use rpcrdma_apps::perf::{Config, Outcome, PerfError, SizeResult, Test};
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

#[derive(Default)]
struct Collect {
    results: Vec<SizeResult>,
    samples: Vec<u64>,
    connected: Vec<ConnInfo>,
}

impl Observer for Collect {
    fn connected(&mut self, info: &ConnInfo) {
        self.connected.push(*info);
    }
    fn result(&mut self, r: &SizeResult, hist: &Histogram<u64>) {
        self.results.push(*r);
        self.samples.push(hist.len());
    }
}

fn run_on(fabric: &SoftFabric, cfg: &Config) -> Result<Collect, PerfError> {
    let c = fabric.open(CLIENT);
    let s = fabric.open(SERVER);
    let mut obs = Collect::default();
    verbs_loops::run_loopback::<SoftProvider>(
        cfg,
        &c,
        &s,
        SocketAddr::new(SERVER, 18515),
        (None, None),
        &mut obs,
    )?;
    Ok(obs)
}

fn run(cfg: &Config) -> Collect {
    match run_on(&SoftFabric::new(), cfg) {
        Ok(c) => c,
        Err(e) => panic!("{} failed: {e}", cfg.test),
    }
}

fn small(test: Test) -> Config {
    let mut c = Config::new(test);
    if test.is_latency() {
        // Inline (<= 220/236) and not inline, one and several pages.
        c.sizes = (1..=13).map(|s| 1u64 << s).collect();
        c.iters = 20;
    } else {
        c.sizes = vec![2048, 4096, 8192];
        c.iters = 40;
        c.tx_depth = 16;
        c.cq_mod = 4;
    }
    c
}

#[test]
fn accepts_every_test_over_soft_loopback() {
    for t in Test::ALL {
        let cfg = small(t);
        let got = run(&cfg);
        assert_eq!(got.results.len(), cfg.sizes.len(), "{t}");
        assert_eq!(got.connected.len(), 1, "{t}");
        for (r, &size) in got.results.iter().zip(&cfg.sizes) {
            assert_eq!(r.size, size, "{t}");
            assert_eq!(r.iters, cfg.iters, "{t}");
            match r.outcome {
                Outcome::Lat(s) => {
                    assert!(t.is_latency());
                    assert!(
                        s.min > 0.0 && s.min <= s.typical && s.typical <= s.max,
                        "{t} {s:?}"
                    );
                    assert!(
                        s.min <= s.avg && s.p99 <= s.p999 && s.p999 <= s.max,
                        "{t} {s:?}"
                    );
                }
                Outcome::Bw(s) => {
                    assert!(!t.is_latency());
                    assert!(s.avg > 0.0 && s.peak >= s.avg * 0.999, "{t} {s:?}");
                    assert!(s.msg_rate > 0.0);
                }
                Outcome::LatDuration { .. } => panic!("{t}: not a duration run"),
            }
        }
        // Latency: one sample per round trip; BW: one per signaled WR.
        let want = if t.is_latency() {
            cfg.iters - 1
        } else {
            cfg.iters / u64::from(cfg.cq_mod)
        };
        assert!(
            got.samples.iter().all(|&n| n == want),
            "{t}: {:?}",
            got.samples
        );
    }
}

#[test]
fn accepts_bw_with_two_qps_and_no_peak() {
    for t in [Test::SendBw, Test::WriteBw, Test::ReadBw] {
        let mut cfg = small(t);
        cfg.qps = 2;
        cfg.peak = false;
        cfg.sizes = vec![65536];
        let got = run(&cfg);
        assert_eq!(got.connected.len(), 2, "{t}");
        let r = got.results[0];
        assert_eq!(r.iters, 2 * cfg.iters, "perftest reports iterations x QPs");
        let Outcome::Bw(s) = r.outcome else {
            panic!("{t}: not BW")
        };
        assert_eq!(s.peak, 0.0);
        assert!(s.avg > 0.0);
    }
}

#[test]
fn accepts_duration_mode() {
    for t in [Test::WriteLat, Test::SendLat, Test::SendBw, Test::ReadBw] {
        let mut cfg = small(t);
        cfg.sizes = vec![64];
        // The sampled window is the middle half (perftest's margin, at most a quarter of the
        // duration at each end): 400 ms, so a loaded 2-core machine still samples something.
        cfg.duration = Some(Duration::from_millis(800));
        let got = run(&cfg);
        let r = got.results[0];
        assert!(r.iters > 0, "{t}: nothing sampled");
        match r.outcome {
            Outcome::LatDuration { avg, tps } => {
                assert!(t.is_latency() && avg > 0.0 && tps > 0.0, "{t}")
            }
            Outcome::Bw(s) => assert!(!t.is_latency() && s.avg > 0.0 && s.peak == 0.0, "{t}"),
            Outcome::Lat(_) => panic!("{t}: duration run reported iterations stats"),
        }
    }
}

#[test]
fn rejects_client_server_test_mismatch() {
    let fabric = SoftFabric::new();
    let sdev = fabric.open(SERVER);
    let cdev = fabric.open(CLIENT);
    let stop = AtomicBool::new(false);
    let addr = SocketAddr::new(SERVER, 18515);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (sdev, stop) = (&sdev, &stop);
        let srv = s.spawn(move || {
            let scfg = small(Test::WriteLat);
            verbs_loops::run_server::<SoftProvider>(
                &scfg,
                sdev,
                addr,
                stop,
                &mut |a| {
                    let _ = tx.send(a);
                },
                &mut Collect::default(),
            )
        });
        let a = rx.recv().expect("server listening");
        let r = verbs_loops::run_client::<SoftProvider>(
            &small(Test::ReadLat),
            &cdev,
            a,
            &mut Collect::default(),
        );
        match r {
            Err(PerfError::Protocol(m)) => assert!(m.contains("read_lat"), "{m}"),
            other => panic!("client: {other:?}"),
        }
        match srv.join().expect("server thread") {
            Err(PerfError::Protocol(m)) => assert!(m.contains("write_lat"), "{m}"),
            other => panic!("server: {other:?}"),
        }
    });
}

#[test]
fn rejects_bad_configurations() {
    let mut c = small(Test::WriteBw);
    c.sizes = vec![64, 256];
    assert!(matches!(
        verbs_loops::validate(&c),
        Err(PerfError::Config(_))
    ));
    let mut c = small(Test::SendLat);
    c.qps = 2;
    assert!(verbs_loops::validate(&c).is_err());
    let mut c = small(Test::SendBw);
    c.cq_mod = c.tx_depth + 1;
    assert!(verbs_loops::validate(&c).is_err());
    let mut c = small(Test::ReadLat);
    c.iters = 4;
    assert!(verbs_loops::validate(&c).is_err());
    let mut c = small(Test::ReadLat);
    c.duration = Some(Duration::from_secs(1));
    assert!(
        verbs_loops::validate(&c).is_err(),
        "duration with several sizes"
    );
    let mut c = small(Test::ReadLat);
    c.sizes = vec![(1 << 23) + 1];
    assert!(verbs_loops::validate(&c).is_err());
}

#[test]
fn accepts_private_data_round_trip() {
    let h = Hello {
        test: Test::SendBw,
        duration_ms: None,
        qp_index: 1,
        qps: 2,
        inline: 0,
        first_size: 2,
        last_size: 8_388_608,
        iters: 5000,
        addr: 0x7f00_1234_5000,
        rkey: 0xabcd,
        area: 8_388_608,
    };
    let b = h.encode();
    assert_eq!(b.len(), HELLO_LEN);
    assert!(b.len() <= rpcrdma_engine::verbs::PRIVATE_DATA_CONNECT_MAX);
    assert_eq!(&b[..4], b"RPF1");
    let d = Hello::decode(&b).unwrap();
    assert_eq!(d, h);
    assert_eq!(d.sizes().len(), 23);
    let r = Reply {
        addr: 0x1000,
        rkey: 7,
        area: 4096,
    };
    assert_eq!(Reply::decode(&r.encode(), 4096).unwrap(), r);
    assert!(Reply::decode(&r.encode(), 8192).is_err());
}

#[test]
fn rejects_bad_private_data() {
    let good = Hello {
        test: Test::WriteLat,
        duration_ms: None,
        qp_index: 0,
        qps: 1,
        inline: 220,
        first_size: 64,
        last_size: 64,
        iters: 1000,
        addr: 0x1000,
        rkey: 1,
        area: 4096,
    };
    let mutate = |f: &dyn Fn(&mut Hello)| {
        let mut h = good;
        f(&mut h);
        h.encode()
    };
    let bad: Vec<[u8; HELLO_LEN]> = vec![
        mutate(&|h| h.qps = 0),
        mutate(&|h| h.qp_index = 1),
        mutate(&|h| h.first_size = 0),
        mutate(&|h| h.last_size = 96),
        mutate(&|h| h.last_size = 1 << 24),
        mutate(&|h| h.area = 8192),
        mutate(&|h| h.iters = 4),
        mutate(&|h| h.duration_ms = Some(0)),
        mutate(&|h| {
            h.duration_ms = Some(10);
            h.last_size = 128;
            h.area = 4096;
        }),
    ];
    for b in &bad {
        assert!(Hello::decode(b).is_err(), "{:?}", Hello::decode(b));
    }
    let mut b = good.encode();
    b[0] ^= 1;
    assert!(Hello::decode(&b).is_err(), "magic");
    let mut b = good.encode();
    b[5] = 99;
    assert!(Hello::decode(&b).is_err(), "test code");
    assert!(
        Hello::decode(&good.encode()[..HELLO_LEN - 1]).is_err(),
        "short"
    );
    assert!(Hello::decode(&[]).is_err());
}

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

/// BTH opcodes of every frame of a pcap (Ethernet + IPv4 + UDP: the BTH starts at 42).
fn opcodes(pcap: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let incl = u32::from_le_bytes([pcap[at + 8], pcap[at + 9], pcap[at + 10], pcap[at + 11]]);
        v.push(pcap[at + 16 + 42]);
        at += 16 + incl as usize;
    }
    v
}

#[test]
fn accepts_pcap_of_a_perf_run() {
    let fabric = SoftFabric::new();
    let buf = SharedBuf::default();
    let trace = PcapTrace::install(&fabric, Box::new(buf.clone()), Mtu::M1024).unwrap();
    let mut cfg = Config::new(Test::WriteLat);
    cfg.iters = 5;
    cfg.sizes = vec![3000];
    run_on(&fabric, &cfg).unwrap();
    // Each round trip: client WRITE (First, Middle, Last at 1024) + ACK, server the same.
    assert_eq!(trace.finish().unwrap(), 5 * 2 * 4);
    let bytes = buf.0.lock().unwrap().clone();
    let ops = opcodes(&bytes);
    assert_eq!(ops.len(), 40);
    for quad in ops.chunks(4) {
        assert_eq!(quad, [0x06, 0x07, 0x08, 0x11], "{ops:x?}");
    }
}

/// perftest's smallest `-n` (5) with many sizes (`-a`): each size of fewer iterations than
/// the latency loops' signal interval must still retire its unsignaled WRs, or the send queue
/// fills after a few sizes (the run failed at 8192 octets with "PostSend failed: errno 12").
#[test]
fn accepts_latency_tests_with_minimum_iterations_over_many_sizes() {
    for test in [Test::SendLat, Test::WriteLat, Test::ReadLat] {
        for iters in [5, 10] {
            let mut c = Config::new(test);
            // More sizes than the send queue holds sizes of `iters` unsignaled WRs.
            c.sizes = (1..=16).map(|s| 1u64 << s).collect();
            c.iters = iters;
            let r = run(&c);
            assert_eq!(r.results.len(), c.sizes.len(), "{test} -n {iters}");
        }
    }
}

/// User-facing verbs errors name the cause; the errno follows only for searching.
#[test]
fn accepts_verbs_errors_named_by_cause() {
    use rpcrdma_engine::verbs::{errno, VerbsCall, VerbsError};
    let full = VerbsError::new(VerbsCall::PostSend, errno::ENOMEM).to_string();
    assert_eq!(full, "PostSend: send queue full (errno 12)");
    let e = PerfError::QueueFull {
        queue: "send",
        depth: 64,
    };
    assert_eq!(e.to_string(), "send queue full (depth 64)");
    let refused = VerbsError::new(VerbsCall::Connect, errno::ECONNREFUSED).to_string();
    assert!(refused.contains("connection refused"), "{refused}");
}
