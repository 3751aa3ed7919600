//! `rpcrdma-perf --provider iwarp` as perftest is used: a server process started without an
//! address and a client process given `127.0.0.1`, talking iWARP (RDMAP/DDP/MPA) over a
//! loopback TCP port. The client's perftest-format output must show the size and iteration
//! count asked for and one latency row whose columns are ordered as statistics must be; the
//! server must see the client's calls and exit on its own once the client is gone. And
//! `rpcrdma-ping --provider iwarp --loopback`: NULL calls to an in-process server over TCP.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PERF: &str = env!("CARGO_BIN_EXE_rpcrdma-perf");
const PING: &str = env!("CARGO_BIN_EXE_rpcrdma-ping");
/// Longest a process of these runs may take (the machine may be shared and slow).
const LIMIT: Duration = Duration::from_secs(120);

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// A server process, killed when dropped if it has not exited.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Server {
    /// Starts `rpcrdma-perf args` and waits until it says it listens.
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(PERF)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the rpcrdma-perf server");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let s = Server { child, lines };
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match s.lines.recv_timeout(left) {
                Ok(l) if l.contains("Waiting for client") => return s,
                Ok(_) => {}
                Err(e) => panic!("the server did not start listening: {e}"),
            }
        }
    }

    /// Waits for the server to exit on its own; its remaining output.
    fn finish(mut self) -> (bool, String) {
        let ok = wait(&mut self.child).success();
        let rest: Vec<String> = self.lines.try_iter().collect();
        (ok, rest.join("\n"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` at most [`LIMIT`], killing it after that.
fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rpcrdma-perf took longer than {LIMIT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the client `rpcrdma-perf args` to the end.
fn client(args: &[&str]) -> Output {
    run_to_end(PERF, args)
}

/// Runs `exe args` to the end (at most [`LIMIT`]).
fn run_to_end(exe: &str, args: &[&str]) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the rpcrdma-perf client");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let o = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = wait(&mut child);
    Output {
        status,
        stdout: o.join().expect("stdout reader"),
        stderr: e.join().expect("stderr reader"),
    }
}

/// The latency row under perftest's `#bytes #iterations t_min ...` header: size, iterations
/// and the seven statistics (t_min, t_max, t_typical, t_avg, t_stdev, 99%, 99.9%).
fn latency_row(stdout: &str) -> (u64, u64, Vec<f64>) {
    let mut lines = stdout.lines();
    let header = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .unwrap_or_else(|| panic!("no result header in:\n{stdout}"));
    assert!(
        header.contains("#iterations") && header.contains("t_typical[usec]"),
        "not perftest's latency header: {header}"
    );
    let row = lines.next().expect("a result row");
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(f.len(), 9, "size, iterations and 7 statistics: {row:?}");
    let n = |s: &str| {
        s.parse::<u64>()
            .unwrap_or_else(|_| panic!("{s:?} in {row:?}"))
    };
    let stats: Vec<f64> = f[2..]
        .iter()
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{s:?} in {row:?}")))
        .collect();
    let (min, max, typ, avg) = (stats[0], stats[1], stats[2], stats[3]);
    assert!(
        min > 0.0 && min <= typ && typ <= max,
        "min/typical/max: {row:?}"
    );
    assert!(
        min <= avg && avg <= max,
        "average outside min..max: {row:?}"
    );
    assert!(
        stats[5] <= stats[6] && stats[6] <= max,
        "percentiles: {row:?}"
    );
    (n(f[0]), n(f[1]), stats)
}

#[test]
fn accepts_send_lat_between_two_iwarp_processes() {
    let port = free_port().to_string();
    let common = [
        "send_lat",
        "--provider",
        "iwarp",
        "-p",
        &port,
        "-s",
        "64",
        "-n",
        "40",
    ];
    let server = Server::start(&[&common[..], &["--bind", "127.0.0.1"]].concat());
    let out = client(&[&common[..], &["127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Send Latency Test"), "{stdout}");
    assert!(
        stdout.contains(" Provider        : iwarp (client)"),
        "{stdout}"
    );
    let (size, iters, _) = latency_row(&stdout);
    assert_eq!((size, iters), (64, 40), "{stdout}");
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed once the client was done: {rest}");
}

#[test]
fn accepts_rpc_lat_between_two_iwarp_processes() {
    let port = free_port().to_string();
    // 6000 octets: above the 4096-octet inline threshold, so each call's argument travels in
    // a Read chunk (the server's RDMA Read) and the result in a Write chunk (RDMA Write).
    let common = [
        "rpc_lat",
        "--provider",
        "iwarp",
        "-p",
        &port,
        "-s",
        "6000",
        "-n",
        "30",
    ];
    let server = Server::start(&common);
    let out = client(&[&common[..], &["--persistent-stags", "127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(" Provider        : iwarp (client)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Read chunk") && stdout.contains("Write chunk"),
        "{stdout}"
    );
    let (size, iters, _) = latency_row(&stdout);
    assert_eq!((size, iters), (6000, 30), "{stdout}");
    assert!(
        stdout.contains(" RPCs completed  : 30, errors 0"),
        "every call answered: {stdout}"
    );
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed: {rest}");
    assert!(
        rest.contains("RPCs served     : 30 calls, 30 replies, errors 0, connections 1"),
        "server summary: {rest}"
    );
}

#[test]
fn accepts_an_iwarp_rpc_client_with_memory_windows() {
    // The device has type-2 memory windows (its DeviceCaps say so): without
    // --persistent-stags the client exposes each call's chunks through windows bound for that
    // call (dynamic STags), and the Read and Write chunks still move the data.
    let port = free_port().to_string();
    let common = [
        "rpc_lat",
        "--provider",
        "iwarp",
        "-p",
        &port,
        "-s",
        "6000",
        "-n",
        "10",
    ];
    let server = Server::start(&common);
    let out = client(&[&common[..], &["127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed: {stdout}\n{stderr}");
    assert!(!stderr.contains("--persistent-stags"), "{stderr}");
    assert!(
        stdout.contains(" RPCs completed  : 10, errors 0"),
        "every call answered: {stdout}"
    );
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed: {rest}");
}

#[test]
fn accepts_an_iwarp_loopback_ping_with_chunks() {
    // A call above the inline threshold (RDMA_NOMSG with a Position-Zero Read chunk) and a
    // Reply chunk offered with every call.
    let port = free_port().to_string();
    let args = [
        "--provider",
        "iwarp",
        "--loopback",
        "--persistent-stags",
        "-c",
        "4",
        "-p",
        &port,
        "--arg-size",
        "6000",
        "--reply-chunk",
    ];
    let out = run_to_end(PING, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("registered at 127.0.0.1:{port}")),
        "{stdout}"
    );
    assert!(stdout.contains(" 4 calls, 4 replies, 0 failed"), "{stdout}");
    // The device has memory windows and Send With Invalidate: both sides set the RFC 8797 R
    // bit and remote invalidation is on.
    assert!(stdout.contains("remote invalidation on"), "{stdout}");
}
