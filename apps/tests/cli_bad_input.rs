//! Every binary of rpcrdma-apps from the outside: `--help` (stdout, exit 0), `--version` (the
//! package version), and a table of bad inputs per tool, each refused before any work with exit
//! status 2 and a message of at most two lines on stderr that names the option (and the range
//! of a number), nothing on stdout and no file written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binaries of this package (the `rdma` ones only when built).
fn bins() -> Vec<(&'static str, &'static str)> {
    let v = vec![
        ("rpcrdma-perf", env!("CARGO_BIN_EXE_rpcrdma-perf")),
        ("rpcrdma-nfsd", env!("CARGO_BIN_EXE_rpcrdma-nfsd")),
        ("rpcrdma-ping", env!("CARGO_BIN_EXE_rpcrdma-ping")),
        ("rpcrdma-stat", env!("CARGO_BIN_EXE_rpcrdma-stat")),
        ("rpcrdma-dump", env!("CARGO_BIN_EXE_rpcrdma-dump")),
        ("rpcrdma-nfs-check", env!("CARGO_BIN_EXE_rpcrdma-nfs-check")),
        (
            "rpcrdma-pcap-sample",
            env!("CARGO_BIN_EXE_rpcrdma-pcap-sample"),
        ),
        (
            "rpcrdma-verbs-check",
            env!("CARGO_BIN_EXE_rpcrdma-verbs-check"),
        ),
    ];
    #[cfg(feature = "rdma")]
    let v = {
        let mut v = v;
        v.push((
            "rpcrdma-nfs3-compare",
            env!("CARGO_BIN_EXE_rpcrdma-nfs3-compare"),
        ));
        v
    };
    v
}

fn exe(name: &str) -> &'static str {
    bins()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no binary {name}"))
}

/// A fresh empty directory to run in (anything written there shows).
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_in(dir: &Path, name: &str, args: &[&str]) -> Output {
    Command::new(exe(name))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn accepts_help_on_stdout_and_version_everywhere() {
    let dir = scratch("help");
    for (name, _) in bins() {
        for h in ["--help", "-h"] {
            let o = run_in(&dir, name, &[h]);
            assert_eq!(o.status.code(), Some(0), "{name} {h}: {}", text(&o.stderr));
            assert!(o.stdout.len() > 40, "{name} {h}: help on stdout");
            assert!(o.stderr.is_empty(), "{name} {h}: {}", text(&o.stderr));
        }
        for v in ["--version", "-V"] {
            let o = run_in(&dir, name, &[v]);
            assert_eq!(o.status.code(), Some(0), "{name} {v}");
            assert_eq!(
                text(&o.stdout),
                format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
            );
        }
    }
    // perftest's spellings after a test name too.
    for t in ["send_lat", "write_bw", "rpc_lat", "rpc_bw"] {
        let o = run_in(&dir, "rpcrdma-perf", &[t, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{t}");
        assert!(text(&o.stdout).contains("--report_gbits") || t.ends_with("lat"));
        let o = run_in(&dir, "rpcrdma-perf", &[t, "--version"]);
        assert_eq!(
            text(&o.stdout),
            format!("rpcrdma-perf {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "help wrote files: {left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// (binary, arguments, what the message must say).
const BAD: &[(&str, &[&str], &str)] = &[
    // rpcrdma-perf: verbs tests.
    ("rpcrdma-perf", &[], "which test"),
    ("rpcrdma-perf", &["sendlat"], "unknown test"),
    (
        "rpcrdma-perf",
        &["send_lat", "-p", "70000"],
        "-p 70000: must be a number in 1..=65535",
    ),
    ("rpcrdma-perf", &["send_lat", "--port=0"], "1..=65535"),
    (
        "rpcrdma-perf",
        &["send_lat", "-n", "4"],
        "-n 4: must be a number in 5..=",
    ),
    (
        "rpcrdma-perf",
        &["send_lat", "-s", "0"],
        "-s 0: must be a number in 1..=",
    ),
    ("rpcrdma-perf", &["send_bw", "-q", "0"], "-q 0"),
    (
        "rpcrdma-perf",
        &["send_lat", "-m", "1000"],
        "-m 1000: must be 256, 512",
    ),
    (
        "rpcrdma-perf",
        &["send_lat", "-x", "x"],
        "-x x: must be a number",
    ),
    (
        "rpcrdma-perf",
        &["send_lat", "--cores", "99,100"],
        "--cores 99: no such core",
    ),
    (
        "rpcrdma-perf",
        &["send_lat", "--out_json", "/nonexistent/r.json"],
        "--out_json",
    ),
    (
        "rpcrdma-perf",
        &["send_lat", "--hist-log", "/nonexistent/h"],
        "--hist-log",
    ),
    ("rpcrdma-perf", &["send_lat", "--pcap", "/"], "--pcap"),
    ("rpcrdma-perf", &["send_lat", "-d", "mlx5_0"], "-d mlx5_0"),
    (
        "rpcrdma-perf",
        &["send_lat", "--provider", "verbs"],
        "--provider",
    ),
    ("rpcrdma-perf", &["send_lat", "--bogus"], "--bogus"),
    ("rpcrdma-perf", &["send_lat", "-a", "-s", "64"], "-a and -s"),
    ("rpcrdma-perf", &["send_lat", "10.0.0.9"], "soft provider"),
    // rpcrdma-perf: RPC tests.
    (
        "rpcrdma-perf",
        &["rpc_lat", "--version", "2"],
        "--rpcrdma-version 2",
    ),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--rpcrdma-version", "3"],
        "--rpcrdma-version",
    ),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--credits", "0"],
        "--credits 0: must be a number in 1..=1024",
    ),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--inline-size", "512"],
        "--inline-size 512",
    ),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--inline_size", "4096"],
        "--inline-size",
    ),
    (
        "rpcrdma-perf",
        &["rpc_bw", "-t", "0"],
        "-t 0: must be a number in 1..=1024",
    ),
    ("rpcrdma-perf", &["rpc_lat", "-p", "70000"], "1..=65535"),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--cores", "99,100"],
        "--cores 99",
    ),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--out_json", "/nonexistent/r.json"],
        "--out_json",
    ),
    ("rpcrdma-perf", &["rpc_lat", "-d", "mlx5_0"], "-d mlx5_0"),
    (
        "rpcrdma-perf",
        &["rpc_lat", "--metrics", "nowhere"],
        "--metrics",
    ),
    ("rpcrdma-perf", &["rpc_lat", "--srq", "-1"], "--srq"),
    // rpcrdma-nfsd: refused before any device is opened.
    (
        "rpcrdma-nfsd",
        &["--credits", "0"],
        "--credits 0: must be a number in 1..=1024",
    ),
    (
        "rpcrdma-nfsd",
        &["--max-io", "7"],
        "--max-io 7: must be a number in 4096..=",
    ),
    ("rpcrdma-nfsd", &["--max-io", "5000"], "multiple of 4096"),
    (
        "rpcrdma-nfsd",
        &["--buffers", "0"],
        "--buffers 0: must be a number in 4..=",
    ),
    (
        "rpcrdma-nfsd",
        &["--port", "70000"],
        "--port 70000: must be a number in 1..=65535",
    ),
    ("rpcrdma-nfsd", &["--mount-port", "70000"], "0..=65535"),
    ("rpcrdma-nfsd", &["--reactors", "0"], "--reactors 0"),
    (
        "rpcrdma-nfsd",
        &["--stats-interval", "x"],
        "--stats-interval x",
    ),
    (
        "rpcrdma-nfsd",
        &["--backend", "dir:/nonexistent/dir"],
        "not a directory",
    ),
    ("rpcrdma-nfsd", &["--backend", "tape"], "tape"),
    (
        "rpcrdma-nfsd",
        &["--exports", "/nonexistent/exports"],
        "--exports /nonexistent",
    ),
    ("rpcrdma-nfsd", &["--export", "relative"], "absolute"),
    ("rpcrdma-nfsd", &["--bind", "nowhere"], "--bind"),
    ("rpcrdma-nfsd", &["--metrics", "nowhere"], "--metrics"),
    ("rpcrdma-nfsd", &["--idle", "sometimes"], "--idle"),
    ("rpcrdma-nfsd", &["--provider", "soft"], "nfsd_smoke"),
    (
        "rpcrdma-nfsd",
        &["--config", "/nonexistent/nfsd.toml"],
        "--config /nonexistent",
    ),
    ("rpcrdma-nfsd", &["--bogus"], "--bogus"),
    // rpcrdma-ping.
    ("rpcrdma-ping", &[], "--loopback"),
    ("rpcrdma-ping", &["--loopback", "-p", "70000"], "1..=65535"),
    (
        "rpcrdma-ping",
        &["--loopback", "-c", "0"],
        "-c 0: must be a number in 1..=",
    ),
    (
        "rpcrdma-ping",
        &["--loopback", "--version", "2"],
        "--rpcrdma-version 2",
    ),
    (
        "rpcrdma-ping",
        &["--loopback", "--rpcrdma-version", "3"],
        "1..=2",
    ),
    (
        "rpcrdma-ping",
        &["--loopback", "--credits", "0"],
        "--credits 0",
    ),
    ("rpcrdma-ping", &["--loopback", "--bind", "x"], "--bind"),
    ("rpcrdma-ping", &["--bogus"], "--bogus"),
    // rpcrdma-stat.
    ("rpcrdma-stat", &[], "no metrics port"),
    ("rpcrdma-stat", &["-c", "3", "h:9100"], "give -i"),
    (
        "rpcrdma-stat",
        &["-i", "0", "h:9100"],
        "-i 0: must be a number in 1..=86400",
    ),
    ("rpcrdma-stat", &["h:70000"], "1..=65535"),
    ("rpcrdma-stat", &["https://h:1"], "https"),
    (
        "rpcrdma-stat",
        &["--file", "/nonexistent/m.txt"],
        "--file /nonexistent",
    ),
    ("rpcrdma-stat", &["--bogus"], "--bogus"),
    // rpcrdma-dump.
    ("rpcrdma-dump", &["--bogus"], "--bogus"),
    (
        "rpcrdma-dump",
        &["/nonexistent/header.bin"],
        "/nonexistent/header.bin",
    ),
    // rpcrdma-pcap-sample.
    ("rpcrdma-pcap-sample", &[], "FILE.pcap"),
    (
        "rpcrdma-pcap-sample",
        &["x.pcap", "--mtu", "1000"],
        "--mtu 1000",
    ),
    (
        "rpcrdma-pcap-sample",
        &["/nonexistent/x.pcap"],
        "/nonexistent",
    ),
    (
        "rpcrdma-pcap-sample",
        &["x.pcap", "y.tsv", "z"],
        "unexpected",
    ),
    ("rpcrdma-pcap-sample", &["--bogus", "x.pcap"], "--bogus"),
    // rpcrdma-verbs-check.
    (
        "rpcrdma-verbs-check",
        &["--only", "send_recv_basik"],
        "send_recv_basic",
    ),
    (
        "rpcrdma-verbs-check",
        &["--skip", "nope"],
        "--skip nope: no such check",
    ),
    (
        "rpcrdma-verbs-check",
        &["--repeat", "0"],
        "--repeat 0: must be a number in 1..=1000",
    ),
    ("rpcrdma-verbs-check", &["--timeout", "x"], "--timeout x"),
    (
        "rpcrdma-verbs-check",
        &["--provider", "verbs"],
        "--provider verbs",
    ),
    ("rpcrdma-verbs-check", &["--bogus"], "--bogus"),
    ("rpcrdma-nfs-check", &["-p", "70000", "h"], "1..=65535"),
    ("rpcrdma-nfs-check", &["--timeout", "0", "h"], "--timeout 0"),
    (
        "rpcrdma-nfs-check",
        &["--local-tree", "/nonexistent", "h"],
        "--local-tree",
    ),
    ("rpcrdma-nfs-check", &["--parts", "huge", "h"], "--parts"),
    (
        "rpcrdma-nfs-check",
        &["--provider", "verbs", "h"],
        "--provider must be soft, iwarp or rdma",
    ),
    (
        "rpcrdma-nfs-check",
        &["--provider", "soft", "h"],
        "--provider soft: the software provider reaches no server",
    ),
    ("rpcrdma-nfs-check", &["--bogus"], "--bogus"),
];

#[cfg(feature = "rdma")]
const BAD_RDMA: &[(&str, &[&str], &str)] = &[
    (
        "rpcrdma-nfs3-compare",
        &["--reference", "1.2.3.4:0"],
        "1..=65535",
    ),
    (
        "rpcrdma-nfs3-compare",
        &["--timeout", "0"],
        "--timeout 0: must be a number in 1..=600",
    ),
    ("rpcrdma-nfs3-compare", &[], "both servers"),
    ("rpcrdma-nfs3-compare", &["--bogus"], "--bogus"),
];

#[cfg(not(feature = "rdma"))]
const BAD_RDMA: &[(&str, &[&str], &str)] = &[];

#[test]
fn rejects_bad_input_in_two_lines_before_any_work() {
    let dir = scratch("bad");
    let mut failures = Vec::new();
    for (name, args, needle) in BAD.iter().chain(BAD_RDMA) {
        let o = run_in(&dir, name, args);
        let err = text(&o.stderr);
        let lines = err.lines().count();
        if o.status.code() != Some(2) || !err.contains(needle) || lines > 2 || lines == 0 {
            failures.push(format!(
                "{name} {args:?}: status {:?}, {lines} lines: {err}",
                o.status.code()
            ));
        }
        if !o.stdout.is_empty() {
            failures.push(format!("{name} {args:?}: stdout {}", text(&o.stdout)));
        }
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        if !left.is_empty() {
            failures.push(format!("{name} {args:?}: wrote {left:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rejects_a_config_file_with_zero_credits_or_an_unknown_key() {
    let dir = scratch("config");
    for (body, needle) in [
        ("credits = 0\n", "--credits 0: must be a number in 1..=1024"),
        ("credit = 4\n", "key credit: unknown"),
        ("max-io = 7\n", "--max-io 7"),
    ] {
        let f = std::env::temp_dir().join(format!("rpcrdma-cli-{}.toml", std::process::id()));
        std::fs::write(&f, body).unwrap();
        let o = run_in(&dir, "rpcrdma-nfsd", &["--config", f.to_str().unwrap()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{body}: {err}");
        assert!(
            err.contains(needle) && err.lines().count() <= 2,
            "{body}: {err}"
        );
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rejects_a_handle_key_file_that_would_not_load_before_the_device() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("key");
    let key = std::env::temp_dir().join(format!("rpcrdma-cli-{}.key", std::process::id()));
    for (mode, body, needle) in [
        (0o644, &[7u8; 16][..], "group or others"),
        (0o600, &[7u8; 3][..], "--handle-key"),
    ] {
        std::fs::write(&key, body).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = run_in(
            &dir,
            "rpcrdma-nfsd",
            &["--handle-key", key.to_str().unwrap()],
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(needle) && err.lines().count() <= 2, "{err}");
    }
    let _ = std::fs::remove_file(key);
    let _ = std::fs::remove_dir_all(dir);
}

/// The fix of `-a` with perftest's smallest `-n` end to end: every size reported.
#[test]
fn accepts_latency_tests_with_all_sizes_and_five_iterations() {
    let dir = scratch("all");
    for t in ["send_lat", "write_lat"] {
        let o = run_in(&dir, "rpcrdma-perf", &[t, "-a", "-n", "5"]);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{t}: {}", text(&o.stderr));
        assert!(out.contains("\n 8388608 "), "{t}: {out}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
