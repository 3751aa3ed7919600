//! The `rpcrdma-perf` binary: subcommands, `rpcrdma_<test>` links, output files, exit codes.

use std::path::PathBuf;
use std::process::Command;

use rpcrdma_apps::perf::report::{BW_HEADER, LAT_HEADER, RESULT_LINE};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rpcrdma-perf"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-perf-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines_after_header(out: &str, header: &str) -> Vec<String> {
    let at = out.find(header).expect("header present") + header.len();
    out[at..]
        .lines()
        .take_while(|l| !l.starts_with("---"))
        .map(str::to_string)
        .collect()
}

#[test]
fn accepts_subcommand_with_perftest_output() {
    let out = Command::new(bin())
        .args(["write_lat", "-n", "20", "-s", "64"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("RDMA_Write Latency Test"));
    // The header line, the result line and the closing rule, as perftest prints them.
    let want = format!("{RESULT_LINE}{LAT_HEADER}");
    assert!(s.contains(&want), "{s}");
    let rows = lines_after_header(&s, &want);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].starts_with(" 64      20          "),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[0].split_whitespace().count(), 9);
    assert!(s.ends_with(RESULT_LINE));
}

#[test]
fn accepts_argv0_link_and_output_files() {
    let d = tmpdir("link");
    let link = d.join("rpcrdma_read_bw");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let json = d.join("r.json");
    let hlog = d.join("r.hlog");
    let out = Command::new(&link)
        .args(["-n", "40", "-s", "4096", "--out_json"])
        .arg(&json)
        .arg("--hist-log")
        .arg(&hlog)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("RDMA_Read BW Test"), "{s}");
    let rows = lines_after_header(&s, BW_HEADER);
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].starts_with(" 4096       40         "),
        "{:?}",
        rows[0]
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["test_info"]["test"], "RDMA_Read_BW_Test");
    assert_eq!(j["results"][0]["MsgSize"], 4096);
    assert_eq!(j["results"][0]["n_iterations"], 40);
    assert!(j["results"][0]["BW_average"].as_f64().unwrap() > 0.0);
    let h = std::fs::read_to_string(&hlog).unwrap();
    assert!(h.lines().any(|l| l.starts_with("Tag=size=4096,")), "{h}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn rejects_bad_invocations() {
    let run = |args: &[&str]| Command::new(bin()).args(args).output().unwrap();
    // Usage errors: 2.
    assert_eq!(run(&["nonsense"]).status.code(), Some(2));
    assert_eq!(run(&["send_bw", "-b"]).status.code(), Some(2));
    assert_eq!(run(&["send_lat", "-s", "0"]).status.code(), Some(2));
    // A server address over the in-process soft provider: refused before the run.
    let o = run(&["write_bw", "10.0.0.9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--loopback"));
    // Run errors: 1 (rdma not built in).
    assert_eq!(
        run(&["write_bw", "--provider", "rdma", "10.0.0.9"])
            .status
            .code(),
        Some(1)
    );
    // Help: 0.
    let o = run(&["read_lat", "--help"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("--hist-log"));
}
