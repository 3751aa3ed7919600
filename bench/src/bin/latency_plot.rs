//! Latency vs message size, in one run, over the soft provider: `send_lat` and `write_lat`
//! (rpcrdma-apps' perftest verbs loops, verbs only) and `rpc_lat` (RPC calls through the poller's
//! Client/Server API, `--chunks auto`) for sizes 2 .. 64 KiB. Writes an SVG plot (t_typical
//! as a round trip vs size, log2 x axis) and prints a Markdown table with the machine's load
//! average.
//!
//! perftest reports half the round trip for SEND and WRITE, so their t_typical is doubled here
//! to put all three on the same footing: the full round trip. rpc_lat's t_typical already is
//! one.
//!
//! Rerun: `cargo run --release -p rpcrdma-bench --bin latency_plot -- [--iters N]
//! [--max-size BYTES] [--svg docs/latency.svg] [--md FILE]`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use rpcrdma_apps::perf::rpc::{self, NoRpcObserver, RpcConfig, RpcTest};
use rpcrdma_apps::perf::verbs_loops::{self, NoObserver};
use rpcrdma_apps::perf::{Config, Outcome, PerfError, SizeResult, Test};
use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::soft_rtt::load_average;
use rpcrdma_bench::svg::LinePlot;
use rpcrdma_bench::two_cores;
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};

struct Opts {
    iters: u64,
    max_size: u64,
    svg: String,
    md: Option<String>,
}

const USAGE: &str = "usage: latency_plot [--iters N] [--max-size BYTES] [--svg FILE] [--md FILE]
  --iters N          iterations per size, 5..=10000000 [10000]
  --max-size BYTES   largest size, a power of two in 2..=1048576 [65536]
  --svg FILE         where the plot goes [docs/latency.svg]
  --md FILE          also write the table as markdown
  -h, --help         this text
  -V, --version      the program's version
";

fn opts() -> Opts {
    let flags = Flags::new(USAGE, &["--iters", "--max-size", "--svg", "--md"]);
    let max_size = flags.number("--max-size", 2, 1 << 20).unwrap_or(65536);
    if !max_size.is_power_of_two() {
        flags.fail(&format!(
            "--max-size {max_size}: must be a power of two in 2..=1048576"
        ));
    }
    Opts {
        iters: flags.number("--iters", 5, 10_000_000).unwrap_or(10000),
        max_size,
        svg: flags
            .out_file("--svg")
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/latency.svg").into()),
        md: flags.out_file("--md"),
    }
}

fn typical(r: &SizeResult) -> f64 {
    match r.outcome {
        Outcome::Lat(s) => s.typical,
        _ => f64::NAN,
    }
}

/// Client and server cores, found once at the start.
type CorePair = Option<(core_affinity::CoreId, core_affinity::CoreId)>;

fn verbs(test: Test, sizes: &[u64], iters: u64, port: u16, cores: CorePair) -> Vec<SizeResult> {
    let fabric = SoftFabric::new();
    let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let mut cfg = Config::new(test);
    cfg.sizes = sizes.to_vec();
    cfg.iters = iters;
    let cores = cores.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    // On a thread of its own: the verbs loops pin the calling thread, and the main thread must keep
    // its full CPU mask for the next tests (the reactors plan their cores from it).
    std::thread::scope(|sc| {
        sc.spawn(|| {
            verbs_loops::run_loopback::<SoftProvider>(
                &cfg,
                &cdev,
                &sdev,
                SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), port),
                cores,
                &mut NoObserver,
            )
        })
        .join()
        .unwrap_or_else(|_| Err(PerfError::Protocol("panicked".into())))
    })
    .unwrap_or_else(|e| {
        eprintln!("latency_plot: {test}: {e}");
        std::process::exit(1)
    })
}

fn main() {
    let o = opts();
    let cores = two_cores();
    let sizes: Vec<u64> = (1..=o.max_size.trailing_zeros())
        .map(|e| 1u64 << e)
        .collect();
    let load0 = load_average();
    let t0 = Instant::now();
    eprintln!("send_lat ...");
    let send = verbs(Test::SendLat, &sizes, o.iters, 18600, cores);
    eprintln!("write_lat ...");
    let write = verbs(Test::WriteLat, &sizes, o.iters, 18700, cores);
    eprintln!("rpc_lat ...");
    let mut rc = RpcConfig::new(RpcTest::Lat);
    rc.sizes = sizes.clone();
    rc.iters = o.iters;
    rc.port = 18800;
    rc.cores = cores;
    let rpc = rpc::run_loopback(&rc, &SoftFabric::new(), &mut NoRpcObserver).unwrap_or_else(|e| {
        eprintln!("latency_plot: rpc_lat: {e}");
        std::process::exit(1)
    });
    let load1 = load_average();
    let secs = t0.elapsed().as_secs_f64();

    let la = |l: Option<(f64, f64, f64)>| {
        l.map_or("unknown".to_string(), |(a, b, c)| {
            format!("{a:.2} {b:.2} {c:.2}")
        })
    };
    let load = format!("{} before, {} after", la(load0), la(load1));
    let inline = rc.advertised_inline();
    let mut md = String::new();
    md.push_str(&format!(
        "Soft provider, release build, {} iterations per size, t_typical (median) as a round \
         trip in µs; send_lat / write_lat report RTT/2, doubled here. rpc_lat: payload each way, \
         --chunks auto (Read / Write chunks above {} / {} octets), inline threshold {inline}. \
         Load average (1/5/15 min): {load}. {secs:.0} s.\n\n",
        o.iters,
        rpc::call_inline_max(inline),
        rpc::reply_inline_max(inline)
    ));
    md.push_str("| size [B] | send_lat RTT [µs] | write_lat RTT [µs] | rpc_lat RTT [µs] | rpc_lat / send_lat |\n");
    md.push_str("|---:|---:|---:|---:|---:|\n");
    let mut pts = [Vec::new(), Vec::new(), Vec::new()];
    for (k, &s) in sizes.iter().enumerate() {
        let (a, b, c) = (
            2.0 * typical(&send[k]),
            2.0 * typical(&write[k]),
            typical(&rpc[k]),
        );
        md.push_str(&format!(
            "| {s} | {a:.2} | {b:.2} | {c:.2} | {:.1} |\n",
            c / a
        ));
        pts[0].push((s as f64, a));
        pts[1].push((s as f64, b));
        pts[2].push((s as f64, c));
    }
    let mut plot = LinePlot::new(
        "Round-trip latency vs message size (soft provider)",
        "message size [octets], log2 scale",
        "t_typical as round trip [µs]",
    );
    plot.subtitle = format!("{} iterations per size; load average {load}", o.iters);
    plot.x_log2 = true;
    let [p0, p1, p2] = pts;
    plot.add("send_lat (2 × t_typical)", p0);
    plot.add("write_lat (2 × t_typical)", p1);
    plot.add("rpc_lat (t_typical, full RPC round trip)", p2);
    if let Err(e) = std::fs::write(&o.svg, plot.to_svg()) {
        eprintln!("latency_plot: writing {}: {e}", o.svg);
        std::process::exit(1);
    }
    eprintln!("wrote {}", o.svg);
    if let Some(p) = &o.md {
        if let Err(e) = std::fs::write(p, &md) {
            eprintln!("latency_plot: writing {p}: {e}");
            std::process::exit(1);
        }
    }
    print!("{md}");
}
