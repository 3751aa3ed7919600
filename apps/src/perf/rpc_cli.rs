//! The `rpc_lat` / `rpc_bw` subcommand of `rpcrdma-perf`: runs what
//! [`super::args::parse_rpc`] read with the runners of [`super::rpc`] and prints perftest's
//! layout (banner, one row per size, the RPC counters), the `--out_json` document and the
//! `--hist-log` interval log.
//!
//! Normal operation: over the soft provider both sides run in this process
//! ([`super::rpc::run_loopback`], optionally traced to `--pcap`); with `--provider iwarp` or
//! `rdma` (chosen through [`crate::cli::dispatch`]) a process without an address serves
//! ([`super::rpc::serve`]) and one with the server's address runs the client
//! ([`super::rpc::run_client`]). Recovery: a usage error exits 2 with the
//! message, a failed run exits 1 with the error; nothing is retried.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use std::sync::atomic::AtomicBool;

use rpcrdma_engine::verbs::Device;
use rpcrdma_poller::{BackoffMode, CoreId, ProtocolVersion};

use super::args::{parse_rpc, usage_rpc, RpcArgs};
use super::printer::{self, RpcPrinter};
use super::report::RESULT_LINE;
use super::rpc::ServeSummary;
use super::rpc::{
    call_inline_max, reply_inline_max, run_client, run_loopback, serve, Plan, RpcConfig, RpcTest,
    PROC_XFER, PROG, VERS,
};
use super::stats::BwUnit;
use super::{Outcome, PerfError, SizeResult};
use crate::cli::{self, AppProvider, Devices, ProviderJob, ProviderKind};
use crate::pcap::Mtu;

/// perftest's "Using SRQ" value: ON when the server's connections share a receive queue.
fn srq_on(cfg: &RpcConfig) -> &'static str {
    if cfg.srq.is_some() {
        "ON"
    } else {
        "OFF"
    }
}

/// The banner, in the shape of perftest's, with the RPC settings.
pub fn banner(cfg: &RpcConfig, mtu: u32) -> String {
    banner_for(cfg, mtu, "soft", "soft (loopback)", ProviderKind::Soft)
}

/// [`banner`] naming the device and the provider with the process's role (`rdma (client)`),
/// and the transport of provider `kind`.
pub fn banner_for(
    cfg: &RpcConfig,
    mtu: u32,
    device: &str,
    provider: &str,
    kind: ProviderKind,
) -> String {
    use std::fmt::Write as _;
    let inline = cfg.advertised_inline();
    let mut s = String::new();
    s.push_str(RESULT_LINE);
    let calls = if cfg.null { "NULL" } else { "payload" };
    let _ = writeln!(s, "                    {} ({calls})", cfg.test.title());
    let _ = writeln!(s, " Dual-port       : OFF\t\tDevice         : {device}");
    let _ = writeln!(
        s,
        " Number of qps   : 1\t\tTransport type : {}",
        kind.transport()
    );
    let _ = writeln!(
        s,
        " Connection type : RC\t\tUsing SRQ      : {}",
        srq_on(cfg)
    );
    let _ = writeln!(s, " TX depth        : {}", cfg.effective_window());
    let _ = writeln!(s, " Mtu             : {mtu}[B]");
    let _ = writeln!(s, " Link type       : Ethernet");
    let _ = writeln!(s, " rdma_cm QPs\t : ON");
    let _ = writeln!(s, " Data ex. method : rdma_cm");
    let _ = writeln!(s, " Provider        : {provider}");
    let _ = writeln!(
        s,
        " RPC program     : {PROG:#010x} version {VERS}, procedure {}",
        if cfg.null { "0 (NULL)" } else { "1 (XFER)" }
    );
    let _ = writeln!(
        s,
        " RPC-over-RDMA   : version {}, inline threshold {inline}[B], credits {}",
        match cfg.version {
            ProtocolVersion::V1 => 1,
            ProtocolVersion::V2 => 2,
        },
        cfg.credits
    );
    if let Some(d) = cfg.srq {
        let _ = writeln!(
            s,
            " Receive queue   : server: one shared receive queue of {d} receives"
        );
    }
    if !cfg.null {
        let _ = writeln!(
            s,
            " Chunks          : {} (inline up to {} B call data, {} B reply data)",
            cfg.chunks.name(),
            call_inline_max(inline),
            reply_inline_max(inline)
        );
        if let [one] = cfg.sizes.as_slice() {
            if let Ok(p) = Plan::new(cfg.chunks, cfg.null, *one, inline) {
                let _ = writeln!(s, " Each call       : {}", p.describe(inline));
            }
        }
    }
    let _ = writeln!(
        s,
        " Callbacks       : inline on the reactors ({})",
        match cfg.backoff {
            BackoffMode::BusyPoll => "busy polling",
            BackoffMode::SharedCores => "idle back-off",
            BackoffMode::Interrupt => "idle back-off, interrupt mode",
        }
    );
    let _ = writeln!(
        s,
        " Memory          : poller endpoint pools, {}",
        if cfg.hugepages {
            "2 MiB hugepages (fallback: normal pages)"
        } else {
            "normal pages"
        }
    );
    if cfg.test.is_latency() {
        let _ = writeln!(
            s,
            " Latency         : full round trip per RPC (call -> reply callback), not RTT/2"
        );
    } else {
        let _ = writeln!(
            s,
            " Bandwidth       : -s octets per RPC (one direction), calls per second as MsgRate"
        );
    }
    s.push_str(RESULT_LINE);
    s
}

/// The `--out_json` document: perftest's keys plus the RPC settings.
pub fn json_report(cfg: &RpcConfig, mtu: u32, results: &[SizeResult]) -> serde_json::Value {
    json_report_for(cfg, mtu, results, ProviderKind::Soft, "loopback")
}

/// [`json_report`] naming the provider and the process's role (`client`).
pub fn json_report_for(
    cfg: &RpcConfig,
    mtu: u32,
    results: &[SizeResult],
    kind: ProviderKind,
    role: &str,
) -> serde_json::Value {
    let provider = kind.name();
    use serde_json::{json, Map, Value};
    let mut info = Map::new();
    info.insert("test".into(), json!(cfg.test.json_name()));
    info.insert("Dual_port".into(), json!("OFF"));
    info.insert("Device".into(), json!(provider));
    info.insert("Provider".into(), json!(provider));
    info.insert("Role".into(), json!(role));
    info.insert("Number_of_qps".into(), json!(1));
    info.insert("Transport_type".into(), json!(kind.transport()));
    info.insert("Connection_type".into(), json!("RC"));
    info.insert("Using_SRQ".into(), json!(srq_on(cfg)));
    if let Some(d) = cfg.srq {
        info.insert("SRQ_depth".into(), json!(d));
    }
    info.insert("TX_depth".into(), json!(cfg.effective_window()));
    info.insert("Mtu".into(), json!(mtu));
    info.insert("Link_type".into(), json!("Ethernet"));
    info.insert("rdma_cm_QPs".into(), json!("ON"));
    info.insert("Data_ex_method".into(), json!("rdma_cm"));
    info.insert("RPC_program".into(), json!(PROG));
    info.insert(
        "RPC_procedure".into(),
        json!(if cfg.null { 0 } else { PROC_XFER }),
    );
    info.insert(
        "RPC_over_RDMA_version".into(),
        json!(match cfg.version {
            ProtocolVersion::V1 => 1,
            ProtocolVersion::V2 => 2,
        }),
    );
    info.insert("Inline_threshold".into(), json!(cfg.advertised_inline()));
    info.insert("Credits".into(), json!(cfg.credits));
    info.insert("Chunks".into(), json!(cfg.chunks.name()));
    info.insert(
        "Latency".into(),
        json!(if cfg.test.is_latency() {
            "round_trip"
        } else {
            "n/a"
        }),
    );
    let unit = match cfg.unit {
        BwUnit::MiB => "MiB/sec",
        BwUnit::Gbit => "Gb/sec",
    };
    let rows: Vec<Value> = results
        .iter()
        .map(|r| match &r.outcome {
            Outcome::Lat(s) => json!({
                "MsgSize": r.size, "n_iterations": r.iters, "t_min": s.min, "t_max": s.max,
                "t_typical": s.typical, "t_avg": s.avg, "t_stdev": s.stdev,
                "percentile_99": s.p99, "percentile_99.9": s.p999,
            }),
            Outcome::LatDuration { avg, tps } => json!({
                "MsgSize": r.size, "n_iterations": r.iters, "t_avg": avg, "tps_average": tps,
            }),
            Outcome::Bw(s) => json!({
                "MsgSize": r.size, "n_iterations": r.iters, "BW_peak": s.peak,
                "BW_average": s.avg, "MsgRate": s.msg_rate, "unit": unit,
            }),
        })
        .collect();
    json!({ "test_info": Value::Object(info), "results": rows })
}

/// The process's role under a provider with server and client in two processes.
enum RemoteRole {
    /// No address: serve the benchmark program for one client run.
    Server { bind: IpAddr },
    /// The server's address: run the client.
    Client { server: SocketAddr, bind: IpAddr },
}

fn remote_role(a: &RpcArgs) -> Result<RemoteRole, String> {
    let bind = match &a.bind {
        Some(b) => b
            .parse::<IpAddr>()
            .map_err(|_| format!("--bind expects an IP address, got {b:?}"))?,
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    Ok(match &a.server {
        None => RemoteRole::Server { bind },
        Some(h) => {
            let server = if let Ok(ip) = h.parse::<IpAddr>() {
                SocketAddr::new(ip, a.port)
            } else {
                use std::net::ToSocketAddrs;
                (h.as_str(), a.port)
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve {h}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("cannot resolve {h}"))?
            };
            RemoteRole::Client { server, bind }
        }
    })
}

/// The line a client given `--persistent-stags` prints (stderr) before it connects.
pub const PERSISTENT_STAGS_NOTICE: &str = "rpcrdma-perf: --persistent-stags: on a device without \
type-2 memory windows (siw) this client's payload pool (read+write) and reply pool (write) are \
reachable by the server it connects to for the whole run (docs/rdma-provider.md)";

/// The run on the provider [`cli::dispatch`] picks: `Some((results, role))` when this process
/// measured, `None` for a server.
struct RpcRun<'a> {
    cfg: &'a RpcConfig,
    a: &'a RpcArgs,
    mtu: Mtu,
    printer: &'a mut RpcPrinter,
}

type RunOutput = Result<Option<(Vec<SizeResult>, &'static str)>, String>;

impl ProviderJob for RpcRun<'_> {
    type Output = RunOutput;

    fn run<P: AppProvider>(self, d: &Devices<'_>) -> RunOutput {
        let (cfg, a) = (self.cfg, self.a);
        if let Some(fabric) = d.fabric() {
            print!("{}", banner(cfg, a.mtu));
            let _ = io::stdout().flush();
            let trace = printer::start_pcap(fabric, a.pcap.as_deref(), self.mtu)?;
            let r = run_loopback(cfg, fabric, self.printer);
            printer::finish_pcap(trace, a.pcap.as_deref());
            return Ok(Some((r.map_err(|e| e.to_string())?, "loopback")));
        }
        let role = remote_role(a)?;
        if matches!(role, RemoteRole::Server { .. }) && a.persistent_stags {
            return Err(
                "--persistent-stags applies to the client (a server exposes nothing)".into(),
            );
        }
        if a.persistent_stags {
            eprintln!("{PERSISTENT_STAGS_NOTICE}");
        }
        if matches!(role, RemoteRole::Server { .. })
            && (a.out_json.is_some() || a.hist_log.is_some())
        {
            return Err(format!(
                "the {} server measures nothing: give --out_json / --hist-log to the client",
                d.kind().name()
            ));
        }
        Ok(run_remote::<P>(cfg, a, &role, d, self.printer)?.map(|r| (r, "client")))
    }
}

fn run_cli(prog: &str, a: &RpcArgs) -> Result<(), String> {
    let mut cfg = a.config();
    cfg.progress = true;
    if let [c] = a.cores.as_slice() {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        let other = ids.iter().copied().find(|i| i.id != *c);
        cfg.cores = other.map(|o| (CoreId { id: *c }, o));
    } else if let [c, s] = a.cores.as_slice() {
        cfg.cores = Some((CoreId { id: *c }, CoreId { id: *s }));
    }
    cfg.plans().map_err(|e| e.to_string())?;
    let mtu = Mtu::from_bytes(a.mtu).ok_or("bad MTU")?;
    let mut printer = RpcPrinter::new(cfg.unit, a.hist_log.is_some());
    let job = RpcRun {
        cfg: &cfg,
        a,
        mtu,
        printer: &mut printer,
    };
    let Some((results, role)) = cli::dispatch(a.provider, a.device.as_deref(), prog, job)?? else {
        return Ok(());
    };
    print!("{RESULT_LINE}");
    let completed: u64 = printer.results.iter().map(|(_, i)| i.completed).sum();
    let errors: u64 = printer.results.iter().map(|(_, i)| i.errors).sum();
    let credits = printer.results.last().map_or(0, |(_, i)| i.credits_granted);
    println!(" RPCs completed  : {completed}, errors {errors}, credits granted {credits}");
    let _ = io::stdout().flush();
    if let Some(p) = &a.out_json {
        printer::write_json(p, &json_report_for(&cfg, a.mtu, &results, a.provider, role))?;
    }
    if let Some(p) = &a.hist_log {
        printer.write_hist_log(p, a.test)?;
    }
    Ok(())
}

/// Runs the side of a two-process provider: `Some(results)` for the client, `None` for the
/// server (which prints its own summary).
fn run_remote<P: AppProvider>(
    cfg: &RpcConfig,
    a: &RpcArgs,
    role: &RemoteRole,
    d: &Devices<'_>,
    printer: &mut RpcPrinter,
) -> Result<Option<Vec<SizeResult>>, String> {
    let name = d.kind().name();
    let device = a.device.as_deref().unwrap_or(name);
    match *role {
        RemoteRole::Server { bind } => {
            print!(
                "{}",
                banner_for(cfg, a.mtu, device, &format!("{name} (server)"), d.kind())
            );
            let _ = io::stdout().flush();
            let dev = d.open::<P>(bind, None)?;
            if cfg.srq.is_some() && dev.caps().max_srq == 0 {
                return Err(format!(
                    "--srq: the {name} device has no shared receive queues (max_srq 0)"
                ));
            }
            let ip = if bind.is_unspecified() {
                dev.local_ip()
            } else {
                bind
            };
            let stop = AtomicBool::new(false);
            let sum = serve::<P>(cfg, dev, SocketAddr::new(ip, a.port), &stop, &mut |at| {
                println!(" Waiting for client rdma_cm QP to connect on {at}");
                println!(" Please run the same command with the server's IP address");
                let _ = io::stdout().flush();
            })
            .map_err(|e| e.to_string())?;
            print_serve_summary(&sum);
            Ok(None)
        }
        RemoteRole::Client { server, bind } => {
            print!(
                "{}",
                banner_for(cfg, a.mtu, device, &format!("{name} (client)"), d.kind())
            );
            let _ = io::stdout().flush();
            let open = || d.open::<P>(bind, Some(server)).map_err(PerfError::Config);
            run_client::<P>(cfg, server, &open, printer)
                .map(Some)
                .map_err(|e| e.to_string())
        }
    }
}

/// What a server prints when its client has gone.
fn print_serve_summary(sum: &ServeSummary) {
    print!("{RESULT_LINE}");
    println!(
        " RPCs served     : {} calls, {} replies, errors {}, connections {}",
        sum.calls, sum.replies, sum.errors, sum.connections
    );
    let n = &sum.node;
    println!(
        " Server node     : completions {}, doorbells {}, work requests {}, verbs \
         errors {}, completion errors {}",
        n.completions,
        n.doorbells,
        n.work_requests,
        n.verbs_errors,
        n.rnr_errors + n.flush_errors + n.wc_errors
    );
    if n.srq_depth > 0 {
        println!(
            " SRQ             : depth {}, posted {}, held at most {}, low-water events \
             {}, {} octets",
            n.srq_depth, n.srq_posted, n.srq_held_max, n.srq_low_water, n.srq_bytes
        );
    }
    let _ = io::stdout().flush();
}

/// The `rpc_lat` / `rpc_bw` subcommand: parses `args`, runs, prints. Returns the exit status:
/// 0 success, 1 run failure, 2 usage error (and `--help` / `--version`: 0).
pub fn main(prog: &str, test: RpcTest, args: &[String]) -> u8 {
    let usage = |e: &str| {
        eprintln!("{prog} {test}: {}", e.trim());
        eprintln!("Try `{prog} {test} --help`.");
        cli::USAGE_EXIT
    };
    match cli::early(args, &super::args::rpc_takes_value) {
        Ok(Some(cli::Early::Help)) => {
            print!("{}", usage_rpc(prog, test));
            return 0;
        }
        Ok(Some(cli::Early::Version)) => {
            println!("rpcrdma-perf {}", cli::VERSION);
            return 0;
        }
        Ok(None) => {}
        Err(e) => return usage(&e),
    }
    let a = match parse_rpc(test, args) {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    if let Err(e) = a
        .config()
        .plans()
        .map_err(|e| e.to_string())
        .and(a.preflight())
    {
        return usage(&e);
    }
    match run_cli(prog, &a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(" {prog} {test}: {e}");
            1
        }
    }
}
