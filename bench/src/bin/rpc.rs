//! RPC benchmark (issue 7), side by side in one run, as ratios to the physical floor:
//!
//! 1. bare cross-core cache-line ping-pong round trip (the floor);
//! 2. bare soft-provider SEND round trip (verbs only, no RPC stack);
//! 3. NULL RPC round trip through the whole stack (client call → client reactor → soft QP →
//!    server reactor → NULL reply → callback), callbacks inline on the reactors;
//! 4. the same with callbacks and handlers on worker threads, on shared cores: two reactors and
//!    one worker per endpoint (four threads on two cores), all with the `shared_cores` back-off
//!    (spin, yield, then sleep on a doorbell);
//! 5. worker mode on dedicated cores: one busy-polling reactor (core 0) carries both endpoints,
//!    the server's handlers run on one busy-polling worker (the other core), client callbacks
//!    inline: two threads on two cores, like inline mode's two reactors, and the same two core
//!    crossings per round trip (reactor → worker → reactor);
//! 6. inline mode with RPC-over-RDMA Version Two;
//! 7. a 128-octet TCP loopback ping-pong (`TCP_NODELAY`, two threads), the kernel's round trip
//!    for comparison;
//! 8. NULL RPC throughput (32 calls in flight, 32 credits) in each RPC configuration.
//!
//! Every latency row is printed with its percentiles (p50 .. p99.99, max); each RPC latency
//! row and the TCP row also with the context switches per round trip of the threads that did
//! the work (from `/proc/self/task/*/status`), which is where shared cores lose their time.
//! `--svg FILE` writes a plot of the percentiles of inline mode, worker mode on shared and on
//! dedicated cores, and TCP loopback (`rpcrdma_bench::percentiles`). The load average is read
//! before and after the run and printed with the results.
//!
//! In the two-reactor configurations the client connection runs on reactor 1 and the server
//! connection on reactor 0, each reactor pinned to one of the first two cores. Rerun:
//! `cargo run --release -p rpcrdma-bench --bin rpc -- [--iters N] [--secs S] [--svg FILE]`;
//! `scripts/bench-compare.sh REV_A REV_B` runs two revisions side by side.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::percentiles::{percentile_plot, quantile, QUANTILES};
use rpcrdma_bench::soft_rtt::{load_average, soft_send_rtt};
use rpcrdma_bench::{cacheline_pingpong, histogram, report, Row};
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackoffMode, CallbackMode, Client, ClientOptions, Cores, Endpoint, EndpointConfig, PinPolicy,
    Program, ProtocolVersion, ReactorConfig, ReactorSet, Server, ServerOptions,
};

const PROG: u32 = 0x2000_00aa;

const USAGE: &str = "usage: rpc [--iters N] [--secs S] [--svg FILE]
  --iters N       round trips per latency row, 1..=100000000 [50000]
  --secs S        seconds per throughput row, 1..=3600 [2]
  --svg FILE      also plot the percentiles into FILE
  -h, --help      this text
  -V, --version   the program's version
";

/// Voluntary and involuntary context switches of one task, from its `status` file.
fn task_switches(status: &str) -> u64 {
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// Context switches (voluntary + involuntary) of every thread of this process except the
/// calling one (the waiting main thread, whose 200 µs naps say nothing about the RPC path).
fn other_threads_switches() -> u64 {
    let me = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_owned()));
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| Some(e.file_name()) != me)
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .map(|s| task_switches(&s))
        .sum()
}

/// Context switches of the calling thread so far.
fn own_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status").map_or(0, |s| task_switches(&s))
}

/// How a configuration places its threads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Two busy-polling reactors, callbacks and handlers inline.
    Inline,
    /// Two reactors and a worker per endpoint, all with the shared-cores back-off.
    WorkerShared,
    /// One busy-polling reactor with both endpoints; server handlers on one busy-polling worker.
    WorkerDedicated,
}

impl Shape {
    fn name(self, version: ProtocolVersion) -> String {
        let v = version_name(version);
        match self {
            Shape::Inline => format!("Inline mode, {v}"),
            Shape::WorkerShared => format!("Worker mode, {v}"),
            Shape::WorkerDedicated => format!("Worker mode, dedicated cores, {v}"),
        }
    }
}

struct Bench {
    set: ReactorSet,
    eps: [Endpoint<SoftProvider>; 2],
    client: Client,
}

fn setup(shape: Shape, version: ProtocolVersion, port: u16) -> Bench {
    let reactors = if shape == Shape::WorkerDedicated {
        1
    } else {
        2
    };
    let mut rc = ReactorConfig::new(Cores::Count(reactors));
    rc.pin = PinPolicy::AllowUnpinned;
    let backoff = if shape == Shape::WorkerShared {
        BackoffMode::SharedCores
    } else {
        BackoffMode::BusyPoll
    };
    rc.backoff = backoff.config();
    let (server_mode, client_mode) = match shape {
        Shape::Inline => (CallbackMode::Inline, CallbackMode::Inline),
        Shape::WorkerShared => (CallbackMode::Worker, CallbackMode::Worker),
        Shape::WorkerDedicated => (CallbackMode::Worker, CallbackMode::Inline),
    };
    let set = ReactorSet::start(&rc).expect("two reactors");
    let fabric = SoftFabric::new();
    let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)));
    let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)));
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 4,
        max_credits: 32,
        buffers: 1024,
        reply_buffers: 1024,
        buffer_size: 4096,
        reply_buffer_size: 0,
        workers: usize::from(server_mode == CallbackMode::Worker),
        worker_ring: 256,
        hugepages: true,
        ..EndpointConfig::default()
    };
    let cfg_c = EndpointConfig {
        workers: usize::from(client_mode == CallbackMode::Worker),
        ..ecfg.clone()
    };
    let sep = Endpoint::with_backoff(&set, sdev, ecfg, backoff).expect("server ep");
    let cep = Endpoint::with_backoff(&set, cdev, cfg_c, backoff).expect("client ep");
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)), port);
    Server::builder()
        .program(Program::new(PROG, 1..=1))
        .options(ServerOptions {
            mode: server_mode,
            credits: 32,
            listen_reactor: Some(0),
            ..ServerOptions::default()
        })
        .start(&sep, addr)
        .expect("server");
    // The listener hands the first connection to reactor 0; the client runs on the last one.
    let client = Client::connect(
        &cep,
        addr,
        ClientOptions {
            mode: client_mode,
            credits: 32,
            reactor: Some(reactors - 1),
            version,
            ..ClientOptions::default()
        },
    )
    .expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)), "connect");
    Bench {
        set,
        eps: [sep, cep],
        client,
    }
}

impl Bench {
    fn stop(mut self) {
        self.set.stop().expect("stop reactors");
        for e in &self.eps {
            e.stop_workers();
        }
    }
}

/// Closed-loop state: each completion records its latency and starts the next call.
struct Loop {
    client: Client,
    base: Instant,
    hist: Mutex<Histogram<u64>>,
    left: AtomicU64,
    done: AtomicU64,
    failed: AtomicBool,
}

fn issue(st: Arc<Loop>) {
    let Some(args) = st.client.args() else {
        st.failed.store(true, Ordering::Release);
        return;
    };
    let t0 = st.base.elapsed().as_nanos() as u64;
    let s2 = Arc::clone(&st);
    let r = st.client.call(Proc::new(PROG, 1, 0), args, move |r| {
        let dt = (s2.base.elapsed().as_nanos() as u64).saturating_sub(t0);
        if r.is_err() {
            s2.failed.store(true, Ordering::Release);
        }
        s2.hist
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .saturating_record(dt.max(1));
        // Release: pairs with the Acquire load of the waiting thread.
        s2.done.fetch_add(1, Ordering::Release);
        // AcqRel: each completion takes one of the calls still to start (the counter wraps
        // below zero once all are started; those values are far above any total).
        let prev = s2.left.fetch_sub(1, Ordering::AcqRel);
        if prev > 0 && prev < u64::MAX / 2 {
            issue(s2);
        }
    });
    if r.is_err() {
        st.failed.store(true, Ordering::Release);
    }
}

/// Runs `total` NULL calls with `window` in flight; returns latencies and the elapsed time.
fn closed_loop(client: &Client, total: u64, window: u64) -> (Histogram<u64>, Duration) {
    let st = Arc::new(Loop {
        client: client.clone(),
        base: Instant::now(),
        hist: Mutex::new(histogram()),
        left: AtomicU64::new(total - window.min(total)),
        done: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    });
    let t = Instant::now();
    for _ in 0..window.min(total) {
        issue(Arc::clone(&st));
    }
    // Acquire: pairs with the callbacks' Release increments.
    while st.done.load(Ordering::Acquire) < total {
        assert!(!st.failed.load(Ordering::Acquire), "a call failed");
        std::thread::sleep(Duration::from_micros(200));
    }
    let el = t.elapsed();
    let h = st.hist.lock().unwrap_or_else(|e| e.into_inner()).clone();
    (h, el)
}

/// 128-octet ping-pong over TCP loopback (`TCP_NODELAY`): the round trip an RPC over the
/// kernel's TCP stack could not beat on this machine. Threads unpinned (the kernel wakes them).
/// Also returns the context switches of the two threads during the ping-pong.
fn tcp_loopback_rtt(iters: u64) -> (Histogram<u64>, u64) {
    const SIZE: usize = 128;
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("tcp listen");
    let addr = listener.local_addr().expect("tcp addr");
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("tcp accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = [0u8; SIZE];
        let cs0 = own_switches();
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
        own_switches() - cs0
    });
    let mut s = TcpStream::connect(addr).expect("tcp connect");
    s.set_nodelay(true).expect("nodelay");
    let mut buf = [0u8; SIZE];
    let mut h = histogram();
    let cs0 = own_switches();
    for i in 0..iters {
        buf[0] = i as u8;
        let t = Instant::now();
        s.write_all(&buf).expect("tcp write");
        s.read_exact(&mut buf).expect("tcp read");
        h.saturating_record(t.elapsed().as_nanos() as u64);
    }
    let cs = own_switches() - cs0;
    drop(s);
    (h, cs + echo.join().expect("tcp echo"))
}

fn version_name(v: ProtocolVersion) -> &'static str {
    match v {
        ProtocolVersion::V1 => "v1",
        ProtocolVersion::V2 => "v2",
    }
}

/// What one RPC configuration measured.
struct RpcRun {
    /// Configuration name.
    name: String,
    /// Reactor threads it ran (1 or 2).
    reactors: usize,
    /// Round trips, one call in flight.
    hist: Histogram<u64>,
    /// Context switches per round trip of the reactors and workers, one call in flight.
    switches: f64,
    /// Credits the server granted when the throughput runs started.
    credits: u32,
    /// NULL calls per second, 32 in flight.
    rate: f64,
}

/// One configuration: warm-up, `iters` round trips one at a time, then throughput with 32
/// calls in flight for about `secs` seconds.
fn measure(shape: Shape, version: ProtocolVersion, port: u16, iters: u64, secs: u64) -> RpcRun {
    let b = setup(shape, version, port);
    let name = shape.name(version);
    let _ = closed_loop(&b.client, iters / 10 + 1, 1); // warm-up
    assert_eq!(
        b.client.negotiated().map(|n| n.version),
        Some(version),
        "negotiated version"
    );
    let cs0 = other_threads_switches();
    let (hist, _) = closed_loop(&b.client, iters, 1);
    let switches = (other_threads_switches() - cs0) as f64 / iters as f64;
    // Throughput: as many calls as fit in `secs` at the first estimate, 32 in flight.
    let (_, el) = closed_loop(&b.client, 20_000, 32);
    let credits = b.client.negotiated().map_or(0, |n| n.credits);
    let rate = 20_000.0 / el.as_secs_f64();
    let total = ((rate * secs as f64) as u64).max(1000);
    let (_, el) = closed_loop(&b.client, total, 32);
    let reactors = if shape == Shape::WorkerDedicated {
        1
    } else {
        2
    };
    b.stop();
    RpcRun {
        name,
        reactors,
        hist,
        switches,
        credits,
        rate: total as f64 / el.as_secs_f64(),
    }
}

/// Every row's percentiles in µs, and the context switches per round trip where counted.
fn print_percentiles(rows: &[Row], switches: &[(String, f64)]) {
    // Indented: scripts/bench-compare.sh reads the unindented rows of `report` by their names.
    print!("\n  {:<52}", "percentiles [µs]");
    for (_, l) in QUANTILES {
        print!(" {l:>9}");
    }
    println!(" {:>12}", "switches/RT");
    for r in rows {
        print!("  {:<52}", r.name);
        for (q, _) in QUANTILES {
            print!(" {:>9.2}", quantile(&r.hist, q) as f64 / 1000.0);
        }
        match switches.iter().find(|s| s.0 == r.name) {
            Some((_, c)) => println!(" {c:>12.3}"),
            None => println!(" {:>12}", "-"),
        }
    }
}

fn fmt_load(l: Option<(f64, f64, f64)>) -> String {
    l.map_or("unknown".into(), |l| {
        format!("{:.2} {:.2} {:.2}", l.0, l.1, l.2)
    })
}

/// The percentile plot of inline, worker (shared and dedicated cores) and TCP loopback.
fn write_svg(path: &str, rows: &[Row], iters: u64, load: &str) {
    let pick = [
        (
            "NULL RPC round trip, Inline mode, v1",
            "inline mode (2 reactors)",
        ),
        (
            "NULL RPC round trip, Worker mode, v1",
            "worker mode, shared cores (4 threads)",
        ),
        (
            "NULL RPC round trip, Worker mode, dedicated cores, v1",
            "worker mode, dedicated cores",
        ),
        ("TCP loopback round trip (128 B)", "TCP loopback (128 B)"),
    ];
    let lines: Vec<(&str, &Histogram<u64>)> = pick
        .iter()
        .filter_map(|(row, label)| Some((*label, &rows.iter().find(|r| r.name == *row)?.hist)))
        .collect();
    let plot = percentile_plot(
        "NULL RPC round-trip latency percentiles (soft provider, 2 cores)",
        &format!("{iters} round trips each, one in flight; load average {load}"),
        &lines,
    );
    match std::fs::write(path, plot.to_svg()) {
        Ok(()) => println!("\nwrote {path}"),
        Err(e) => {
            eprintln!("rpc: writing {path}: {e}");
            std::process::exit(1)
        }
    }
}

fn main() {
    let flags = Flags::new(USAGE, &["--iters", "--secs", "--svg"]);
    let iters = flags.number("--iters", 1, 100_000_000).unwrap_or(50_000);
    let secs = flags.number("--secs", 1, 3600).unwrap_or(2);
    let svg = flags.out_file("--svg");
    let load_before = load_average();
    println!("load average before: {}", fmt_load(load_before));
    // Each measurement that pins its calling thread runs on a fresh thread, so the main
    // thread keeps the whole CPU mask (the reactors read it to choose their cores).
    let floor = std::thread::spawn(move || cacheline_pingpong(iters))
        .join()
        .expect("floor");
    let send = std::thread::spawn(move || soft_send_rtt(iters))
        .join()
        .expect("soft SEND round trip");
    let mut rows = vec![
        Row::new("cache-line ping-pong RTT (floor)", floor),
        Row::new("bare soft SEND round trip (32 B)", send),
    ];
    let configs = [
        (Shape::Inline, ProtocolVersion::V1),
        (Shape::WorkerShared, ProtocolVersion::V1),
        (Shape::WorkerDedicated, ProtocolVersion::V1),
        (Shape::Inline, ProtocolVersion::V2),
    ];
    let mut runs = Vec::new();
    let mut switches = Vec::new();
    for (i, (shape, version)) in configs.into_iter().enumerate() {
        let r = measure(shape, version, 7000 + i as u16, iters, secs);
        let row = format!("NULL RPC round trip, {}", r.name);
        switches.push((row.clone(), r.switches));
        rows.push(Row::new(row, r.hist.clone()));
        runs.push(r);
    }
    let (tcp, tcp_switches) = tcp_loopback_rtt(iters);
    let tcp_name = "TCP loopback round trip (128 B)";
    switches.push((tcp_name.to_string(), tcp_switches as f64 / iters as f64));
    rows.push(Row::new(tcp_name, tcp));
    let load_after = load_average();
    report(
        &format!(
            "RPC round trip over the soft provider ({iters} iterations; ratio = p50 / floor p50)"
        ),
        &rows,
    );
    print_percentiles(&rows, &switches);
    summary(&rows, &runs, secs);
    let load = format!(
        "{} before, {} after",
        fmt_load(load_before),
        fmt_load(load_after)
    );
    println!(
        "\nload average before: {}; after: {}",
        fmt_load(load_before),
        fmt_load(load_after)
    );
    if let Some(path) = svg {
        write_svg(&path, &rows, iters, &load);
    }
}

/// The ratios to the bare SEND, the throughputs and the issue 15 ratios.
fn summary(rows: &[Row], runs: &[RpcRun], secs: u64) {
    let send_p50 = rows[1].hist.value_at_quantile(0.5).max(1) as f64;
    println!();
    for r in rows[2..].iter().filter(|r| r.name.starts_with("NULL")) {
        println!(
            "{:<52} p50 / bare SEND p50 = {:.2}",
            r.name,
            r.hist.value_at_quantile(0.5) as f64 / send_p50
        );
    }
    println!("\nNULL RPC throughput (32 calls in flight, about {secs} s each)");
    // One line per configuration in the format scripts/bench-compare.sh reads (name, rate,
    // "calls/s"), then the shape of each run.
    for r in runs {
        println!("{:<44} {:>12.0} calls/s", r.name, r.rate);
    }
    for r in runs {
        println!(
            "  ({}: {} reactor(s), 32 calls in flight, {} credits granted)",
            r.name, r.reactors, r.credits
        );
    }
    let p50 = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map_or(f64::NAN, |r| r.hist.value_at_quantile(0.5).max(1) as f64)
    };
    let inline = p50("NULL RPC round trip, Inline mode, v1");
    println!(
        "\nbare soft SEND / floor p50 = {:.2}",
        send_p50 / p50("cache-line ping-pong RTT (floor)")
    );
    println!("inline / bare soft SEND p50 = {:.2}", inline / send_p50);
    println!(
        "worker (dedicated cores) / inline p50 = {:.2}",
        p50("NULL RPC round trip, Worker mode, dedicated cores, v1") / inline
    );
    println!(
        "worker (shared cores) / TCP loopback p50 = {:.2}",
        p50("NULL RPC round trip, Worker mode, v1") / p50("TCP loopback round trip (128 B)")
    );
    if let (Some(i), Some(w)) = (runs.first(), runs.get(1)) {
        println!("worker / inline throughput = {:.2}", w.rate / i.rate);
    }
}
