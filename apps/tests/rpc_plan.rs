//! What each `--chunks` mode puts on the wire for a size (the plan), the inline thresholds
//! derived by hand from the RFC 8166 header layouts, flag parsing of the RPC tests, and a short
//! library run whose completion count must be `-n`.

use rpcrdma_apps::perf::args::{parse_rpc, usage_rpc, ProviderKind};
use rpcrdma_apps::perf::rpc::{
    self, call_inline_max, reply_inline_max, Chunks, Plan, RpcConfig, RpcObserver, RpcSizeInfo,
    RpcTest,
};
use rpcrdma_apps::perf::{Outcome, SizeResult};
use rpcrdma_engine::verbs::soft::SoftFabric;
use rpcrdma_poller::{BackoffMode, ProtocolVersion};

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn accepts_inline_thresholds_from_the_header_layouts() {
    // Call: transport header (xid, vers, credits, proc + three empty lists = 7 words = 28),
    // RPC call header with AUTH_NONE (10 words = 40), reply_len and the opaque's length (8).
    assert_eq!(call_inline_max(4096), 4096 - 28 - 40 - 8);
    // Reply: transport header 28, accepted reply header (6 words = 24), opaque length 4.
    assert_eq!(reply_inline_max(4096), 4096 - 28 - 24 - 4);
    assert_eq!(call_inline_max(1024), 948);
    // Rounded down to whole XDR words.
    assert_eq!(call_inline_max(1026), 948);
    assert_eq!(call_inline_max(10), 0);
}

#[test]
fn accepts_auto_plans_switching_to_chunks_above_the_threshold() {
    let p = Plan::new(Chunks::Auto, false, 4020, 4096).unwrap();
    assert!(!p.call_ddp && !p.reply_ddp);
    assert_eq!((p.call_len, p.reply_len), (4020, 4020));
    // 4021 pads to 4024 > 4020: the call's payload goes in a Read chunk, the reply still fits.
    let p = Plan::new(Chunks::Auto, false, 4021, 4096).unwrap();
    assert!(p.call_ddp && !p.reply_ddp);
    let p = Plan::new(Chunks::Auto, false, 4041, 4096).unwrap();
    assert!(p.call_ddp && p.reply_ddp);
}

#[test]
fn accepts_one_direction_modes() {
    let r = Plan::new(Chunks::Read, false, 2, 4096).unwrap();
    assert_eq!(
        (r.call_len, r.call_ddp, r.reply_len, r.reply_ddp),
        (2, true, 0, false)
    );
    let w = Plan::new(Chunks::Write, false, 2, 4096).unwrap();
    assert_eq!(
        (w.call_len, w.call_ddp, w.reply_len, w.reply_ddp),
        (0, false, 2, true)
    );
    let l = Plan::new(Chunks::Reply, false, 65536, 4096).unwrap();
    assert_eq!(
        (l.call_len, l.call_ddp, l.reply_len, l.reply_ddp),
        (0, false, 65536, false)
    );
    // A long reply lands whole in one reply buffer.
    assert!(l.buffer_size() >= 24 + 4 + 65536);
    assert!(Plan::new(Chunks::Auto, true, 123, 4096).unwrap().null);
}

#[test]
fn rejects_inline_only_above_the_threshold() {
    assert!(Plan::new(Chunks::None, false, 4020, 4096).is_ok());
    let e = Plan::new(Chunks::None, false, 4021, 4096).unwrap_err();
    assert!(e.contains("inline threshold"), "{e}");
}

#[test]
fn accepts_inline_plans_without_a_reply_chunk_offer() {
    // The poller offers a Reply chunk when reply header (28) + reply buffer exceeds the inline
    // threshold; a plan that moves everything inline must size its buffers below that.
    for inline in [1024u32, 4096, 16384] {
        let most = call_inline_max(inline);
        for size in [1u64, 2, 100, most - 3, most - 1, most] {
            let p = Plan::new(Chunks::Auto, false, size, inline).unwrap();
            assert!(!p.call_ddp && !p.reply_ddp, "{inline} {size}");
            assert!(
                p.buffer_size() + 28 <= inline as usize,
                "inline {inline} size {size}: buffer {}",
                p.buffer_size()
            );
        }
    }
}

#[test]
fn accepts_rpc_flags() {
    let a = parse_rpc(
        RpcTest::Bw,
        &args(&[
            "-s8192",
            "--chunks=write",
            "--rpcrdma-version",
            "1",
            "--inline-size",
            "8192",
            "--credits",
            "16",
            "-t",
            "8",
            "-N",
        ]),
    )
    .unwrap();
    assert_eq!(a.size, 8192);
    assert_eq!(a.chunks, Chunks::Write);
    assert_eq!((a.rpc_version, a.inline, a.credits), (1, 8192, 16));
    let c = a.config();
    assert_eq!((c.window, c.credits, c.peak), (8, 16, false));
    assert_eq!(c.version, ProtocolVersion::V1);
    // -a: 2 .. 2^20.
    let a = parse_rpc(RpcTest::Lat, &args(&["-a"])).unwrap();
    let s = a.sizes();
    assert_eq!((s.len(), s[0], s[19]), (20, 2, 1 << 20));
    // --version prints the program version (perftest's meaning, and every tool's here).
    assert!(
        parse_rpc(RpcTest::Lat, &args(&["--version"]))
            .unwrap()
            .print_version
    );
    let a = parse_rpc(RpcTest::Lat, &args(&["--rpcrdma-version=2"])).unwrap();
    assert_eq!(a.config().version, ProtocolVersion::V2);
    // The bandwidth window defaults to the credits.
    let a = parse_rpc(RpcTest::Bw, &args(&["--credits", "12"])).unwrap();
    assert_eq!(a.config().window, 12);
    // --provider rdma: no address starts the server, an address runs the client.
    let a = parse_rpc(
        RpcTest::Lat,
        &args(&["--provider", "rdma", "--bind", "10.0.2.15"]),
    )
    .unwrap();
    assert_eq!(
        (a.provider, a.server.as_deref(), a.bind.as_deref()),
        (ProviderKind::Rdma, None, Some("10.0.2.15"))
    );
    let a = parse_rpc(
        RpcTest::Bw,
        &args(&["--provider=rdma", "-n", "20", "10.0.3.2"]),
    )
    .unwrap();
    assert_eq!(
        (a.provider, a.server.as_deref(), a.iters),
        (ProviderKind::Rdma, Some("10.0.3.2"), 20)
    );
}

#[test]
fn rejects_bad_rpc_flags() {
    for bad in [
        &["-I", "64"][..],
        &["-q", "2"],
        &["--chunks", "sideways"],
        &["--rpcrdma-version", "3"],
        &["--inline-size", "512"],
        &["--credits", "0"],
        &["-s", "2097152"],
        &["-a", "-s", "64"],
        &["--null", "-s", "64"],
        &["-N"],
        &["-t", "4"],
        &["--provider", "bogus"],
        &["10.0.0.2"],
        &["--bind", "10.0.0.1"],
        &["--provider", "rdma", "--loopback"],
        &["--provider", "rdma", "--pcap", "x.pcap"],
        &["--provider", "rdma", "10.0.0.2", "10.0.0.3"],
        &["--provider", "rdma", "--bind", "nowhere"],
    ] {
        assert!(
            parse_rpc(RpcTest::Lat, &args(bad)).is_err(),
            "accepted {bad:?}"
        );
    }
}

#[derive(Default)]
struct Count {
    results: Vec<(SizeResult, RpcSizeInfo)>,
}

impl RpcObserver for Count {
    fn result(&mut self, r: &SizeResult, h: &hdrhistogram::Histogram<u64>, i: &RpcSizeInfo) {
        assert_eq!(h.len(), i.completed, "one histogram sample per call");
        self.results.push((*r, *i));
    }
}

#[test]
fn accepts_split_server_and_client_runs() {
    let sum = split_run(None, 21500);
    assert_eq!(sum.node.srq_depth, 0);
    // Per-connection receives: each closed connection flushes its own (one per credit).
    assert!(sum.node.flush_errors >= 2 * 32, "{:?}", sum.node);
}

/// The server of the split run on a shared receive queue (`rpcrdma-perf --srq`): the same
/// calls complete, the summary's node counters show the SRQ, and no receive is flushed at the
/// connections' close (the SRQ's receives outlive its QPs).
#[test]
fn accepts_split_runs_with_the_server_on_a_shared_receive_queue() {
    let sum = split_run(Some(48), 21520);
    assert_eq!(sum.node.srq_depth, 48);
    assert_eq!(sum.node.flush_errors, 0, "{:?}", sum.node);
}

/// The two-process shape of `--provider rdma` (rpc::serve + rpc::run_client), here on two
/// threads over the soft provider: one connection per size to the same server, which
/// returns once every connection it accepted has closed. Server on an SRQ of depth `srq`.
fn split_run(srq: Option<u32>, port: u16) -> rpc::ServeSummary {
    use rpcrdma_engine::verbs::soft::SoftProvider;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    let mut cfg = RpcConfig::new(RpcTest::Bw);
    cfg.sizes = vec![64, 16384];
    cfg.iters = 20;
    cfg.backoff = BackoffMode::SharedCores;
    cfg.check_every_call = true;
    cfg.srq = srq;
    let fabric = SoftFabric::new();
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let listen = SocketAddr::new(server_ip, port);
    let sdev = fabric.open(server_ip);
    let scfg = cfg.clone();
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let stop = AtomicBool::new(false);
        rpc::serve::<SoftProvider>(&scfg, sdev, listen, &stop, &mut |at| tx.send(at).unwrap())
    });
    let at = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("listening");
    assert_eq!(at, listen);
    let mut obs = Count::default();
    let open = || Ok(fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    let r = rpc::run_client::<SoftProvider>(&cfg, listen, &open, &mut obs).expect("client");
    assert_eq!(r.len(), 2);
    for (res, info) in &obs.results {
        assert_eq!((res.iters, info.completed, info.errors), (20, 20, 0));
    }
    let sum = server.join().unwrap().expect("server");
    assert_eq!(sum.connections, 2);
    assert_eq!((sum.calls, sum.replies, sum.errors), (40, 40, 0));
    sum
}

#[test]
fn accepts_library_runs_completing_exactly_n_calls() {
    let mut cfg = RpcConfig::new(RpcTest::Lat);
    cfg.sizes = vec![2, 8192];
    cfg.iters = 25;
    cfg.backoff = BackoffMode::SharedCores;
    cfg.port = 21000;
    let mut obs = Count::default();
    let r = rpc::run_loopback(&cfg, &SoftFabric::new(), &mut obs).expect("run");
    assert_eq!(r.len(), 2);
    for (res, info) in &obs.results {
        assert_eq!(res.iters, 25);
        assert_eq!(info.completed, 25);
        assert_eq!(info.errors, 0);
        assert_eq!(info.credits_granted, 32);
        match res.outcome {
            Outcome::Lat(s) => assert!(s.min > 0.0 && s.min <= s.typical && s.typical <= s.max),
            o => panic!("{o:?}"),
        }
    }
    assert!(obs.results[1].1.plan.call_ddp && obs.results[1].1.plan.reply_ddp);

    let mut cfg = RpcConfig::new(RpcTest::Bw);
    cfg.sizes = vec![4096];
    cfg.iters = 60;
    cfg.window = 8;
    cfg.chunks = Chunks::Write;
    cfg.backoff = BackoffMode::SharedCores;
    cfg.port = 21010;
    let mut obs = Count::default();
    rpc::run_loopback(&cfg, &SoftFabric::new(), &mut obs).expect("bw run");
    let (res, info) = &obs.results[0];
    assert_eq!((res.iters, info.completed), (60, 60));
    assert!(matches!(res.outcome, Outcome::Bw(b) if b.avg > 0.0 && b.msg_rate > 0.0));
}

#[test]
fn accepts_every_call_checked_with_buffers_changing_roles() {
    // Five credits: client pools of 23 buffers, so a buffer serves as arguments, DDP source and
    // receptacle in turn; the pattern must survive (only the argument words are restored).
    for (k, chunks) in [Chunks::Auto, Chunks::Read, Chunks::Write, Chunks::Reply]
        .into_iter()
        .enumerate()
    {
        let mut cfg = RpcConfig::new(RpcTest::Bw);
        cfg.sizes = vec![6000];
        cfg.iters = 200;
        cfg.credits = 5;
        cfg.window = 5;
        cfg.chunks = chunks;
        cfg.check_every_call = true;
        cfg.backoff = BackoffMode::SharedCores;
        cfg.port = 21100 + k as u16;
        let mut obs = Count::default();
        rpc::run_loopback(&cfg, &SoftFabric::new(), &mut obs)
            .unwrap_or_else(|e| panic!("{chunks:?}: {e}"));
        assert_eq!(obs.results[0].1.completed, 200);
    }
}

/// `--persistent-stags` (issue 13 §2.3): off by default; given, the client's endpoint opts in to
/// endpoint-wide persistent STags on a device without memory windows; it takes no value.
#[test]
fn accepts_persistent_stags_flag_off_by_default() {
    let a = parse_rpc(RpcTest::Lat, &args(&[])).unwrap();
    assert!(!a.persistent_stags && !a.config().persistent_stags);
    let a = parse_rpc(
        RpcTest::Lat,
        &args(&["--provider", "rdma", "--persistent-stags", "10.0.3.2"]),
    )
    .unwrap();
    assert!(a.persistent_stags && a.config().persistent_stags);
    assert!(parse_rpc(RpcTest::Lat, &args(&["--persistent-stags=yes"])).is_err());
    assert!(usage_rpc("rpcrdma-perf", RpcTest::Lat).contains("--persistent-stags"));
}
