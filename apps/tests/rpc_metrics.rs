//! The apps' metrics ports (issue 16). `rpcrdma-perf rpc_bw --metrics ADDR`: the benchmark
//! server's port answers during the run with a valid exposition whose counters agree with what
//! the run reports (calls served never above the calls the client completed, the credits
//! granted equal to the run's), and `--metrics` parses. `rpcrdma-nfsd`'s daemon with
//! `DaemonOptions::metrics`: its port shows the NFS calls per procedure.

mod nfsd_common;
mod procs;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_apps::perf::args::parse_rpc;
use rpcrdma_apps::perf::rpc::{run_loopback, RpcConfig, RpcObserver, RpcSizeInfo, RpcTest};
use rpcrdma_apps::perf::SizeResult;
use rpcrdma_engine::verbs::soft::SoftFabric;
use rpcrdma_poller::metrics::parse::{parse, Family};
use rpcrdma_poller::BackoffMode;

/// A free loopback address for a metrics port ([`procs::free_port`]).
fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], procs::free_port()))
}

/// One GET of /metrics: the families, or `None` while nothing answers.
fn scrape(addr: SocketAddr) -> Option<Vec<Family>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Some(parse(body).unwrap_or_else(|e| panic!("exposition rejected: {e}")))
}

/// The sum of family `fam`'s samples carrying `label` (the family must be there).
fn sample(f: &[Family], fam: &str, label: (&str, &str)) -> f64 {
    f.iter()
        .find(|x| x.name == fam)
        .unwrap_or_else(|| panic!("no family {fam}"))
        .samples
        .iter()
        .filter(|s| s.label(label.0) == Some(label.1))
        .map(|s| s.value)
        .sum()
}

fn value(f: &[Family], name: &str) -> f64 {
    f.iter()
        .find(|x| x.name == name)
        .map_or(0.0, |x| x.samples.iter().map(|s| s.value).sum())
}

#[derive(Default)]
struct Info(Vec<RpcSizeInfo>);

impl RpcObserver for Info {
    fn result(&mut self, _r: &SizeResult, _h: &hdrhistogram::Histogram<u64>, i: &RpcSizeInfo) {
        self.0.push(*i);
    }
}

#[test]
fn accepts_metrics_scraped_during_rpc_bw_agreeing_with_the_run() {
    let port = free_port();
    let mut cfg = RpcConfig::new(RpcTest::Bw);
    cfg.sizes = vec![64];
    cfg.iters = 20_000;
    cfg.backoff = BackoffMode::SharedCores;
    cfg.port = 23000;
    cfg.metrics = Some(port);
    let running = Arc::new(AtomicBool::new(true));
    let run = {
        let r = Arc::clone(&running);
        std::thread::spawn(move || {
            let mut info = Info::default();
            let out = run_loopback(&cfg, &SoftFabric::new(), &mut info);
            // Release: pairs with the Acquire loads below.
            r.store(false, Ordering::Release);
            (out, info)
        })
    };
    let mut seen: Vec<(f64, f64, f64)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(60);
    // Acquire: pairs with the Release store above.
    while running.load(Ordering::Acquire) && Instant::now() < end {
        if let Some(f) = scrape(port) {
            seen.push((
                value(&f, "rpcrdma_server_calls_total"),
                value(&f, "rpcrdma_server_replies_total"),
                value(&f, "rpcrdma_conn_credits_granted"),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (out, info) = run.join().unwrap();
    out.expect("run");
    let i = info.0[0];
    assert_eq!(i.completed, 20_000);
    assert!(
        seen.iter().any(|s| s.0 > 0.0),
        "no scrape during the calls: {seen:?}"
    );
    for w in seen.windows(2) {
        assert!(w[1].0 >= w[0].0, "calls went back: {w:?}");
    }
    for &(calls, replies, credits) in &seen {
        assert!(
            replies <= calls && calls <= i.completed as f64,
            "{calls} {replies}"
        );
        if calls > 0.0 {
            assert_eq!(credits, i.credits_granted as f64);
        }
    }
    // The port closes with the run's server (its thread stops within 50 ms).
    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(port).is_ok() {
        assert!(Instant::now() < end, "port still open after the run");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn accepts_metrics_flag() {
    let args: Vec<String> = ["--metrics", "127.0.0.1:9100", "-n", "5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let a = parse_rpc(RpcTest::Bw, &args).expect("parse");
    assert_eq!(a.config().metrics, Some("127.0.0.1:9100".parse().unwrap()));
    let bad: Vec<String> = ["--metrics", "nowhere"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(parse_rpc(RpcTest::Bw, &bad).is_err());
}

#[test]
fn accepts_nfsd_metrics_port_with_nfs_procedures() {
    let mut o = nfsd_common::options(rpcrdma_apps::nfs::daemon::Backend::Memory);
    o.metrics = Some("127.0.0.1:0".parse().unwrap());
    let mut rig = nfsd_common::Rig::with(o, None);
    let port = rig.daemon.metrics_addr().expect("metrics port");
    for _ in 0..3 {
        rig.nfs.getattr(&rig.root).expect("GETATTR");
    }
    let name = rig.daemon.nfs_addr().to_string();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let f = scrape(port).expect("nfsd metrics port");
        // GETATTR is procedure 1 of NFS version 3 (RFC 1813).
        let getattr = f
            .iter()
            .find(|x| x.name == "rpcrdma_server_latency_seconds")
            .map_or(0.0, |x| {
                x.samples
                    .iter()
                    .filter(|s| {
                        s.name.ends_with("_count")
                            && s.label("name") == Some(&name)
                            && s.label("prog") == Some("100003")
                            && s.label("proc") == Some("1")
                    })
                    .map(|s| s.value)
                    .sum()
            });
        if getattr == 3.0 {
            break;
        }
        assert!(Instant::now() < end, "GETATTR count {getattr}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The NFS counters themselves: calls by procedure, statuses, the reply cache.
    let forged = rpcrdma_apps::nfs::types::Fh::new(&[0x5a; 32]).expect("handle");
    let stale = rig.nfs.getattr(&forged);
    assert!(stale.is_err(), "{stale:?}");
    let f = scrape(port).expect("nfsd metrics port");
    let sample = |fam: &str, label: (&str, &str)| sample(&f, fam, label);
    assert_eq!(sample("rpcrdma_nfsd_calls_total", ("proc", "GETATTR")), 4.0);
    let bad = sample("rpcrdma_nfsd_status_total", ("status", "NFS3ERR_BADHANDLE"))
        + sample("rpcrdma_nfsd_status_total", ("status", "NFS3ERR_STALE"));
    assert_eq!(bad, 1.0);
    assert_eq!(
        sample("rpcrdma_nfsd_reply_cache_total", ("event", "hit")),
        0.0
    );
    rig.daemon.stop();
}

#[test]
fn accepts_perf_saying_which_metrics_port_it_opened() {
    // Port 0: the kernel picks one; the tool must say which (on stderr: stdout is the report).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args(["rpc_lat", "-n", "20", "--metrics", "127.0.0.1:0"])
        .output()
        .expect("run rpcrdma-perf");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let port = err
        .lines()
        .find_map(|l| l.strip_prefix("rpcrdma-perf: metrics on http://127.0.0.1:"))
        .and_then(|r| r.strip_suffix("/metrics"))
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no port line on stderr: {err}"));
    assert_ne!(port, 0);
}

#[test]
fn accepts_nfsd_metrics_port_with_nfs4_state_tables() {
    use rpcrdma_apps::nfs::v4::{encode_compound_minor, Op};
    let mut o = nfsd_common::options(rpcrdma_apps::nfs::daemon::Backend::Memory);
    o.metrics = Some("127.0.0.1:0".parse().unwrap());
    o.nfs4 = true;
    let mut rig = nfsd_common::Rig::with(o, None);
    let port = rig.daemon.metrics_addr().expect("metrics port");
    // One EXCHANGE_ID: one (unconfirmed) client record.
    let ops = [Op::ExchangeId {
        verifier: [1; 8],
        owner: b"m",
        flags: 0,
    }];
    let e = encode_compound_minor("m", 1, &ops);
    let c = rig.nfs.rpc();
    let mut a = c.args().expect("call buffer");
    a.put(&e.bytes).expect("arguments fit");
    c.call_blocking(rpcrdma_poller::Proc::new(100_003, 4, 1), a)
        .expect("COMPOUND");
    let f = scrape(port).expect("nfsd metrics port");
    let sample = |fam: &str, label: (&str, &str)| sample(&f, fam, label);
    assert_eq!(sample("rpcrdma_nfsd_nfs4_state", ("table", "clients")), 1.0);
    assert_eq!(
        sample("rpcrdma_nfsd_nfs4_state", ("table", "sessions")),
        0.0
    );
    assert_eq!(
        sample("rpcrdma_nfsd_nfs4_events_total", ("event", "slot_replays")),
        0.0
    );
    // The delegation table, the delegation and READ placement events are there (and zero:
    // nothing was opened or read).
    let labelled = |fam: &str, label: (&str, &str)| {
        f.iter()
            .filter(|x| x.name == fam)
            .flat_map(|x| x.samples.iter())
            .filter(|s| s.label(label.0) == Some(label.1))
            .count()
    };
    assert_eq!(
        labelled("rpcrdma_nfsd_nfs4_state", ("table", "delegations")),
        1
    );
    for ev in [
        "recalls",
        "delegreturns",
        "revoked",
        "read_ddp",
        "read_zero_copy",
    ] {
        assert_eq!(
            labelled("rpcrdma_nfsd_nfs4_events_total", ("event", ev)),
            1,
            "{ev}"
        );
        assert_eq!(sample("rpcrdma_nfsd_nfs4_events_total", ("event", ev)), 0.0);
    }
    rig.daemon.stop();
}

/// The ports the tests give their servers lie outside the kernel's ephemeral range, so no
/// socket of another test (a connection's local port, a listener on port 0) can take one
/// between its choice and its server's bind; two choices in one process differ.
#[test]
fn accepts_free_ports_outside_the_ephemeral_range() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap_or_else(|_| "32768 60999".into());
    let mut w = range.split_whitespace().map(|x| x.parse::<u16>().unwrap());
    let (lo, hi) = (w.next().unwrap(), w.next().unwrap());
    let (a, b) = (procs::free_port(), procs::free_port());
    for p in [a, b] {
        assert!(
            !(lo..=hi).contains(&p),
            "port {p} is in the ephemeral range {lo}-{hi}"
        );
    }
    assert_ne!(a, b);
}

/// The daemon's lock manager end to end: a file made over NFS/RDMA, a LOCK of its handle over
/// NLM (TCP, the daemon's NLM port), and the lock seen in the daemon's counters and on the
/// metrics port; a second owner's LOCK denied; both gone after UNLOCK.
#[test]
fn accepts_nfsd_lock_manager_locks_in_counters_and_metrics() {
    use rpcrdma_apps::nfs::nlm::proto::{self, Lock, LockArgs, Stat, UnlockArgs};
    use rpcrdma_apps::nfs::rpc_tcp::RpcClient;
    use rpcrdma_apps::nfs::types::{CreateHow, Sattr3};
    let mut o = nfsd_common::options(rpcrdma_apps::nfs::daemon::Backend::Memory);
    o.metrics = Some("127.0.0.1:0".parse().unwrap());
    let rig = nfsd_common::Rig::with(o, None);
    let port = rig.daemon.metrics_addr().expect("metrics port");
    let fh = rig
        .nfs
        .create(
            &rig.root,
            b"locked",
            CreateHow::Unchecked(Sattr3::default()),
        )
        .expect("CREATE");
    let nlm = rig
        .daemon
        .nlm_addr()
        .expect("the lock manager runs by default");
    let at = SocketAddr::new("127.0.0.1".parse().unwrap(), nlm.port());
    let t = Duration::from_secs(5);
    let mut c = RpcClient::connect(at, t, t).expect("NLM connection");
    let l = |svid| Lock {
        caller: b"metrics-client",
        fh: fh.as_bytes(),
        oh: b"oh",
        svid,
        offset: 0,
        len: 0,
    };
    let mut lock = |svid| {
        let a = LockArgs {
            cookie: b"c",
            block: false,
            exclusive: true,
            lock: l(svid),
            reclaim: false,
            state: 1,
        };
        let r = c.call(proto::NLM_PROG, 4, proto::LOCK, &proto::encode_lock(&a));
        proto::decode_res(&r.expect("LOCK")).expect("nlm4_res").1
    };
    assert_eq!(lock(1), Stat::GRANTED);
    assert_eq!(lock(2), Stat::DENIED, "another process of the client");
    assert_eq!(rig.counter("nlm.locks"), 1);
    let f = scrape(port).expect("nfsd metrics port");
    let sample = |fam: &str, label: (&str, &str)| sample(&f, fam, label);
    assert_eq!(sample("rpcrdma_nfsd_nlm_locks", ("table", "locks")), 1.0);
    assert_eq!(sample("rpcrdma_nfsd_nlm_locks", ("table", "hosts")), 1.0);
    assert_eq!(
        sample("rpcrdma_nfsd_nlm_events_total", ("event", "granted")),
        1.0
    );
    assert_eq!(
        sample("rpcrdma_nfsd_nlm_events_total", ("event", "denied")),
        1.0
    );
    let u = UnlockArgs {
        cookie: b"u",
        lock: l(1),
    };
    let r = c.call(proto::NLM_PROG, 4, proto::UNLOCK, &proto::encode_unlock(&u));
    assert_eq!(
        proto::decode_res(&r.expect("UNLOCK")).expect("res").1,
        Stat::GRANTED
    );
    assert_eq!((rig.counter("nlm.locks"), rig.counter("nlm.hosts")), (0, 0));
    rig.stop();
}
