//! `rpcrdma-perf rpc_lat` / `rpc_bw`: perftest's output layout, the completed-call count, the
//! `rpcrdma_rpc_<test>` link, output files, every `--chunks` mode, exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

use rpcrdma_apps::perf::report::{BW_HEADER, LAT_DUR_HEADER, LAT_HEADER, RESULT_LINE};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rpcrdma-perf"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-rpc-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs with idle back-off (the test machine's cores are shared by parallel tests) and a port
/// of its own.
fn run(port: u16, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .args(["--backoff", "shared_cores", "-p", &port.to_string()])
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn rows_after(out: &str, header: &str) -> Vec<String> {
    let at = out.find(header).expect("header present") + header.len();
    out[at..]
        .lines()
        .take_while(|l| !l.starts_with("---"))
        .map(str::to_string)
        .collect()
}

/// The client's completed-call counter printed after the table.
fn completed(out: &str) -> u64 {
    let l = out
        .lines()
        .find(|l| l.starts_with(" RPCs completed  : "))
        .expect("completion line");
    l[" RPCs completed  : ".len()..]
        .split(',')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn accepts_rpc_lat_with_perftest_layout() {
    let s = ok(&run(22000, &["rpc_lat", "-n", "20", "-s", "64"]));
    assert!(s.contains("RPC Latency Test (payload)"), "{s}");
    assert!(s.contains("full round trip per RPC"), "{s}");
    assert!(s.contains(" Each call       : call 64 B inline, reply 64 B inline"));
    let want = format!("{RESULT_LINE}{LAT_HEADER}");
    assert!(s.contains(&want), "{s}");
    let rows = rows_after(&s, &want);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].starts_with(" 64      20          "),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[0].split_whitespace().count(), 9);
    assert_eq!(completed(&s), 20);
    assert!(s.contains("errors 0, credits granted 32"), "{s}");
    assert!(s.contains("Using SRQ      : OFF"), "{s}");
}

/// `--srq N`: the server's connections share one receive queue; perftest's "Using SRQ" says
/// ON in the banner and the JSON, every call completes, and a queue too shallow for the
/// credits asked for grants fewer (what it can back) while the calls still complete.
#[test]
fn accepts_srq_on_the_server() {
    let d = tmpdir("srq");
    let json = d.join("srq.json");
    let jarg = json.to_str().unwrap();
    let args = [
        "rpc_bw",
        "-n",
        "40",
        "-s",
        "65536",
        "-t",
        "8",
        "--srq",
        "64",
        "--out_json",
        jarg,
    ];
    let s = ok(&run(22030, &args));
    assert!(s.contains("Using SRQ      : ON"), "{s}");
    assert!(s.contains("one shared receive queue of 64 receives"), "{s}");
    assert_eq!(completed(&s), 40);
    assert!(s.contains("errors 0, credits granted 32"), "{s}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["test_info"]["Using_SRQ"], "ON");
    assert_eq!(j["test_info"]["SRQ_depth"], 64);
    let s = ok(&run(
        22031,
        &["rpc_bw", "-n", "40", "-s", "64", "--srq", "12"],
    ));
    assert_eq!(completed(&s), 40);
    let granted: u32 = s
        .lines()
        .find_map(|l| l.split("credits granted ").nth(1))
        .expect("credits line")
        .trim()
        .parse()
        .unwrap();
    assert!((1..12).contains(&granted), "granted {granted}: {s}");
}

#[test]
fn accepts_rpc_bw_link_and_output_files() {
    let d = tmpdir("link");
    let link = d.join("rpcrdma_rpc_bw");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let json = d.join("r.json");
    let hlog = d.join("r.hlog");
    let out = Command::new(&link)
        .args([
            "-n",
            "40",
            "-s",
            "8192",
            "-t",
            "4",
            "--backoff",
            "shared_cores",
        ])
        .args(["-p", "22010", "--out_json"])
        .arg(&json)
        .arg("--hist-log")
        .arg(&hlog)
        .output()
        .unwrap();
    let s = ok(&out);
    assert!(s.contains("RPC BW Test (payload)"), "{s}");
    assert!(s.contains("call 8192 B in a Read chunk, reply 8192 B in a Write chunk"));
    let rows = rows_after(&s, BW_HEADER);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].starts_with(" 8192       40         "),
        "{:?}",
        rows[0]
    );
    assert_eq!(completed(&s), 40);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["test_info"]["test"], "RPC_BW_Test");
    assert_eq!(j["test_info"]["Chunks"], "auto");
    assert_eq!(j["test_info"]["TX_depth"], 4);
    assert_eq!(j["results"][0]["MsgSize"], 8192);
    assert_eq!(j["results"][0]["n_iterations"], 40);
    let h = std::fs::read_to_string(&hlog).unwrap();
    assert!(h.contains("full round trip"), "{h}");
    assert!(h.contains("Tag=size=8192,"), "{h}");
}

#[test]
fn accepts_every_chunks_mode_and_null() {
    for (k, (mode, size, want)) in [
        (
            "auto",
            "6000",
            "call 6000 B in a Read chunk, reply 6000 B in a Write chunk",
        ),
        ("none", "3000", "call 3000 B inline, reply 3000 B inline"),
        ("read", "100", "call 100 B in a Read chunk, reply nothing"),
        ("write", "100", "call nothing, reply 100 B in a Write chunk"),
        (
            "reply",
            "9000",
            "call nothing, reply 9000 B as a long reply (Reply chunk)",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let s = ok(&run(
            22100 + 10 * k as u16,
            &["rpc_lat", "-n", "10", "-s", size, "--chunks", mode],
        ));
        assert!(s.contains(want), "{mode}: {s}");
        assert_eq!(completed(&s), 10, "{mode}");
    }
    let s = ok(&run(22200, &["rpc_bw", "--null", "-n", "50"]));
    assert!(s.contains("RPC BW Test (NULL)"), "{s}");
    let rows = rows_after(&s, BW_HEADER);
    assert!(
        rows[0].starts_with(" 0          50         "),
        "{:?}",
        rows[0]
    );
    assert_eq!(completed(&s), 50);
}

#[test]
fn accepts_duration_mode() {
    let s = ok(&run(22300, &["rpc_lat", "-D", "1", "--null"]));
    let rows = rows_after(&s, LAT_DUR_HEADER);
    assert_eq!(rows.len(), 1, "{s}");
    let f: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(f.len(), 4, "{f:?}");
    // Calls measured in the middle of the run, at most all of them.
    let measured: u64 = f[1].parse().unwrap();
    assert!(measured > 0 && measured <= completed(&s), "{s}");
}

#[test]
fn accepts_version_two_and_rejects_it_with_small_inline_size() {
    let s = ok(&run(
        22400,
        &["rpc_lat", "-n", "5", "--rpcrdma-version", "2"],
    ));
    assert!(s.contains("RPC-over-RDMA   : version 2"), "{s}");
    assert_eq!(completed(&s), 5, "{s}");
    let out = run(
        22401,
        &[
            "rpc_lat",
            "-n",
            "5",
            "--rpcrdma-version",
            "2",
            "--inline-size",
            "1024",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("needs an inline size of at least 4096"), "{e}");
}

#[test]
fn rejects_rdma_runs_without_a_device_with_status_1() {
    // Without the `rdma` feature the run says so; with it, this host has no RDMA device that
    // owns 127.0.0.1 (the VM stage runs the real thing, scripts/vm/guest-apps.sh).
    let out = run(
        22420,
        &[
            "rpc_lat",
            "-n",
            "5",
            "--provider",
            "rdma",
            "--bind",
            "127.0.0.1",
            "127.0.0.1",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("without the `rdma` feature")
            || e.contains("RDMA device")
            || e.contains("errno"),
        "{e}"
    );
}

#[test]
fn rejects_usage_errors_with_status_2() {
    for bad in [
        &["rpc_lat", "-I", "64"][..],
        &["rpc_lat", "-s", "8000", "--chunks", "none"],
        &["rpc_bw", "--chunks", "bogus"],
        &["rpc_lat", "-q", "2"],
        &["rpc_lat", "--provider", "rdma", "--srq", "64", "10.0.0.1"],
        &["rpc_lat", "--srq", "x"],
    ] {
        let out = Command::new(bin()).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(!out.stderr.is_empty());
    }
    let out = Command::new(bin())
        .args(["rpc_lat", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--chunks <how>"));
}
