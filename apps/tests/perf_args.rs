//! Flag parsing: perftest's defaults and spellings.

use rpcrdma_apps::perf::args::{parse, PerfArgs, ProviderKind};
use rpcrdma_apps::perf::{all_sizes, Test, DEFAULT_PORT};

fn p(test: Test, args: &[&str]) -> Result<PerfArgs, String> {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse(test, &v)
}

#[test]
fn accepts_perftest_defaults() {
    for t in [Test::SendLat, Test::WriteLat, Test::ReadLat] {
        let a = p(t, &[]).unwrap();
        assert_eq!(a.size, 2, "{t}");
        assert_eq!(a.iters, 1000, "{t}");
        assert_eq!(a.tx_depth, 1, "{t}");
        assert_eq!(a.port, 18515);
        assert_eq!(a.sizes(), vec![2]);
        assert!(a.server.is_none() && !a.all);
    }
    assert_eq!(DEFAULT_PORT, 18515);
    // perftest: DEF_ITERS_WB (5000) for write_bw only, DEF_ITERS (1000) for the other BW tests.
    for (t, n) in [
        (Test::SendBw, 1000),
        (Test::WriteBw, 5000),
        (Test::ReadBw, 1000),
    ] {
        let a = p(t, &[]).unwrap();
        assert_eq!(a.size, 65536, "{t}");
        assert_eq!(a.iters, n, "{t}");
        assert_eq!(a.tx_depth, 128, "{t}");
        assert_eq!(a.cq_mod, 100, "{t}");
        assert_eq!(a.port, 18515);
    }
    assert_eq!(p(Test::SendLat, &[]).unwrap().inline, 236);
    assert_eq!(p(Test::WriteLat, &[]).unwrap().inline, 220);
    assert_eq!(p(Test::ReadLat, &[]).unwrap().inline, 0);
    assert_eq!(p(Test::WriteBw, &[]).unwrap().provider, ProviderKind::Soft);
}

#[test]
fn accepts_all_sizes_2_to_2_pow_23() {
    let a = p(Test::WriteBw, &["-a"]).unwrap();
    let s = a.sizes();
    assert_eq!(s.len(), 23);
    assert_eq!(s.first(), Some(&2));
    assert_eq!(s.last(), Some(&8_388_608));
    assert!(s.windows(2).all(|w| w[1] == 2 * w[0]));
    assert_eq!(s, all_sizes().collect::<Vec<_>>());
    assert_eq!(a.config().sizes, s);
}

#[test]
fn accepts_perftest_spellings() {
    let forms: [&[&str]; 4] = [
        &["-s", "4096", "-n", "77"],
        &["-s4096", "-n77"],
        &["--size", "4096", "--iters", "77"],
        &["--size=4096", "--iters=0x4d"],
    ];
    for f in forms {
        let a = p(Test::ReadLat, f).unwrap();
        assert_eq!((a.size, a.iters), (4096, 77), "{f:?}");
    }
    let a = p(
        Test::SendBw,
        &[
            "-aFR",
            "-d",
            "mlx5_0",
            "-i",
            "2",
            "-x",
            "3",
            "-p",
            "9999",
            "-q",
            "4",
            "-t",
            "64",
            "-Q",
            "16",
            "-m",
            "1024",
            "-I",
            "0",
            "-r",
            "256",
            "-N",
            "--report_gbits",
            "--out_json",
            "o.json",
            "--cores",
            "0,1",
            "--hugepages",
            "--pcap",
            "x.pcap",
            "--hist-log",
            "h.log",
            "--provider=rdma",
            "10.1.2.3",
        ],
    )
    .unwrap();
    assert!(a.all && a.no_peak && a.report_gbits && a.hugepages);
    assert_eq!(a.device.as_deref(), Some("mlx5_0"));
    assert_eq!((a.ib_port, a.gid_index, a.port), (2, Some(3), 9999));
    assert_eq!(
        (a.qps, a.tx_depth, a.cq_mod, a.mtu, a.inline),
        (4, 64, 16, 1024, 0)
    );
    assert_eq!(a.rx_depth, 256);
    assert_eq!(a.cores, vec![0, 1]);
    assert_eq!(a.provider, ProviderKind::Rdma);
    assert_eq!(a.server.as_deref(), Some("10.1.2.3"));
    assert_eq!(a.out_json.as_deref(), Some(std::path::Path::new("o.json")));
    assert_eq!(a.pcap.as_deref(), Some(std::path::Path::new("x.pcap")));
    assert_eq!(a.hist_log.as_deref(), Some(std::path::Path::new("h.log")));
    let a = p(Test::WriteBw, &["--out_json_file=r.json", "-D", "3"]).unwrap();
    assert_eq!(a.out_json.as_deref(), Some(std::path::Path::new("r.json")));
    assert_eq!(a.duration, Some(3));
    assert!(!a.config().peak, "duration mode has no peak");
}

#[test]
fn accepts_perftest_dependencies() {
    // tx depth at most the iterations, CQ moderation at most the tx depth.
    let a = p(Test::WriteBw, &["-n", "50"]).unwrap();
    assert_eq!((a.tx_depth, a.cq_mod), (50, 50));
    let a = p(Test::WriteBw, &["-t", "8"]).unwrap();
    assert_eq!(a.cq_mod, 8);
    // No peak above 20000 iterations.
    assert!(p(Test::WriteBw, &["-n", "20000"]).unwrap().config().peak);
    assert!(!p(Test::WriteBw, &["-n", "20001"]).unwrap().config().peak);
    assert!(!p(Test::WriteBw, &["-N"]).unwrap().config().peak);
}

#[test]
fn rejects_bad_flags() {
    for bad in [
        &["-s", "0"][..],
        &["-s", "8388609"],
        &["-n", "4"],
        &["-n"],
        &["-p", "70000"],
        &["-m", "1000"],
        &["-q", "0"],
        &["-t", "0"],
        &["--size=abc"],
        &["-b"],
        &["-c", "UD"],
        &["--frobnicate"],
        &["-a", "-s", "64"],
        &["-a", "-D", "2"],
        &["--provider", "ucx"],
        &["--cores", "1,2,3"],
        &["10.0.0.1", "10.0.0.2"],
        &["--report_gbits=1"],
    ] {
        assert!(p(Test::WriteBw, bad).is_err(), "{bad:?} was accepted");
    }
    // BW-only flags on latency tests.
    assert!(p(Test::SendLat, &["-q", "2"]).is_err());
    assert!(p(Test::ReadLat, &["-N"]).is_err());
}

#[test]
fn accepts_argv0_dispatch() {
    assert_eq!(Test::from_argv0("rpcrdma_send_lat"), Some(Test::SendLat));
    assert_eq!(
        Test::from_argv0("/usr/local/bin/rpcrdma_write_bw"),
        Some(Test::WriteBw)
    );
    assert_eq!(Test::from_argv0("rpcrdma-read_lat"), Some(Test::ReadLat));
    assert_eq!(Test::from_argv0("rpcrdma-perf"), None);
    assert_eq!(Test::from_argv0("ib_send_lat"), None);
    for t in Test::ALL {
        assert_eq!(Test::from_name(t.name()), Some(t));
    }
}
