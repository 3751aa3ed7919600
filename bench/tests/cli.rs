//! The bench binaries from the outside: `--help` (stdout, exit 0), `--version`, and bad input
//! refused with exit status 2 and a message of at most two lines naming the flag and its range,
//! before anything runs.

use std::process::Command;

const BINS: [(&str, &str); 8] = [
    ("cost", env!("CARGO_BIN_EXE_cost")),
    ("latency_plot", env!("CARGO_BIN_EXE_latency_plot")),
    ("provider", env!("CARGO_BIN_EXE_provider")),
    ("rings", env!("CARGO_BIN_EXE_rings")),
    ("rpc", env!("CARGO_BIN_EXE_rpc")),
    ("rpc_processes", env!("CARGO_BIN_EXE_rpc_processes")),
    ("scale", env!("CARGO_BIN_EXE_scale")),
    ("soak", env!("CARGO_BIN_EXE_soak")),
];

fn exe(name: &str) -> &'static str {
    BINS.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .unwrap()
}

#[test]
fn accepts_help_and_version() {
    for (name, path) in BINS {
        let o = Command::new(path).arg("--help").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}");
        assert!(
            String::from_utf8_lossy(&o.stdout).starts_with("usage:"),
            "{name}"
        );
        let o = Command::new(path).arg("--version").output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn rejects_bad_input_in_two_lines() {
    let bad: [(&str, &[&str], &str); 11] = [
        ("cost", &[], "run or analyze"),
        (
            "cost",
            &["run", "--kind", "null", "--n", "0"],
            "--n 0: must be a number in 1..=",
        ),
        (
            "cost",
            &["run", "--kind", "null", "--bogus", "1"],
            "--bogus",
        ),
        ("latency_plot", &["--max-size", "1000"], "power of two"),
        (
            "latency_plot",
            &["--iters", "4"],
            "--iters 4: must be a number in 5..=",
        ),
        (
            "provider",
            &["--size", "70000"],
            "--size 70000: must be a number in 0..=61440",
        ),
        ("rings", &["--iters", "5"], "--iters"),
        (
            "rpc",
            &["--svg", "/nonexistent/p.svg"],
            "--svg /nonexistent/p.svg",
        ),
        (
            "rpc_processes",
            &["--iters", "5"],
            "--iters 5: must be a number in 100..=",
        ),
        (
            "scale",
            &["--conns", "0"],
            "--conns 0: must be a number in 1..=20000",
        ),
        (
            "soak",
            &["--clients", "65"],
            "--clients 65: must be a number in 1..=64",
        ),
    ];
    for (name, args, needle) in bad {
        let o = Command::new(exe(name)).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {err}");
        assert!(err.contains(needle), "{name} {args:?}: {err}");
        assert!(err.lines().count() <= 2, "{name} {args:?}: {err}");
        assert!(o.stdout.is_empty(), "{name} {args:?}");
    }
}
