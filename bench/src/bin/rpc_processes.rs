//! NULL RPC round trip in one run, three ways, as ratios: RPC-over-RDMA (RFC 8166) on the
//! user-space iWARP provider with server and client in two processes over loopback TCP, the
//! same on the in-process soft provider, and plain ONC RPC over TCP (RFC 5531 record marking,
//! the apps' `write_record` / `read_record`) between the same two processes.
//!
//! Normal operation: the program starts itself again as the server process
//! (`RPCRDMA_BENCH_ROLE=server`), which serves the `rpcrdma-perf` benchmark program on the
//! iWARP provider (`perf::rpc::serve`, one busy-polling reactor) and answers NULL calls on a
//! blocking TCP socket, and says `ready` on stdout. The client process then runs, one call at a
//! time: the soft provider's loopback (`perf::rpc::run_loopback`, both reactors in this
//! process), the iWARP client (`perf::rpc::run_client`), and the TCP client. Each row is
//! perftest's statistics of the round trips (`LatStats::from_round_trips`); the load average is
//! printed before and after; the ratios are to the TCP row.
//!
//! Recovery: any failure (a server that does not start, a call that fails, a reply that does
//! not decode or answers another XID) ends the run with a message and exit status 1; the
//! server process is killed when the client ends.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rpcrdma_apps::nfs::rpc_tcp::{read_record, write_record};
use rpcrdma_apps::perf::rpc::{run_client, run_loopback, serve, RpcConfig, RpcTest, PROG, VERS};
use rpcrdma_apps::perf::stats::LatStats;
use rpcrdma_apps::perf::{Outcome, PerfError};
use rpcrdma_bench::cli::Flags;
use rpcrdma_engine::rpc::{
    decode_call, decode_reply, encode_call, encode_reply, AcceptStat, CallHeader, OpaqueAuth,
    ReplyBody, ReplyHeader,
};
use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::soft::SoftFabric;
use rpcrdma_engine::verbs::{Device, Provider};
use rpcrdma_poller::BackoffMode;

const ROLE: &str = "RPCRDMA_BENCH_ROLE";
const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Largest RPC record either side accepts.
const MAX_RECORD: usize = 64 * 1024;

/// The NULL-call configuration both processes use.
fn config(iters: u64, port: u16) -> RpcConfig {
    let mut cfg = RpcConfig::new(RpcTest::Lat);
    cfg.null = true;
    cfg.sizes = vec![0];
    cfg.iters = iters;
    cfg.port = port;
    cfg.backoff = BackoffMode::BusyPoll;
    cfg
}

/// The server process: the benchmark program on the iWARP provider at `iwarp_port`, NULL
/// calls over TCP at `tcp_port`.
fn server(iters: u64, iwarp_port: u16, tcp_port: u16) -> Result<(), String> {
    let tcp = TcpListener::bind((LO, tcp_port)).map_err(|e| format!("TCP listen: {e}"))?;
    let cfg = config(iters, iwarp_port);
    let dev = IwarpProvider::open(LO).map_err(|e| e.to_string())?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let rdma = s.spawn(|| {
            serve::<IwarpProvider>(
                &cfg,
                dev,
                SocketAddr::new(LO, iwarp_port),
                &stop,
                &mut |_| {
                    println!("ready");
                    let _ = std::io::stdout().flush();
                },
            )
        });
        let r = serve_tcp(&tcp);
        let sum = rdma
            .join()
            .map_err(|_| "the iWARP server panicked".to_string())?
            .map_err(|e| e.to_string())?;
        eprintln!("server: iWARP {} calls, {} errors", sum.calls, sum.errors);
        r
    })
}

/// Answers NULL calls on one TCP connection until the client closes it.
fn serve_tcp(l: &TcpListener) -> Result<(), String> {
    let (mut s, _) = l.accept().map_err(|e| format!("TCP accept: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut out = [0u8; 64];
    while let Some(call) = read_record(&mut s, MAX_RECORD).map_err(|e| e.to_string())? {
        let (h, _) = decode_call(&call).map_err(|e| format!("call: {e:?}"))?;
        let stat = if (h.prog, h.vers, h.proc_num) == (PROG, VERS, 0) {
            AcceptStat::Success
        } else {
            AcceptStat::ProcUnavail
        };
        let reply = ReplyHeader {
            xid: h.xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                stat,
            },
        };
        let n = encode_reply(&mut out, &reply).map_err(|e| format!("{e:?}"))?;
        write_record(&mut s, &out[..n]).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `iters` NULL calls over TCP, one at a time; the round trips in ns.
fn tcp_round_trips(port: u16, iters: u64) -> Result<Vec<u64>, String> {
    let mut s = TcpStream::connect((LO, port)).map_err(|e| format!("TCP connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut call = [0u8; 64];
    let mut rtts = Vec::with_capacity(iters as usize);
    for xid in 1..=iters as u32 {
        let h = CallHeader {
            xid,
            prog: PROG,
            vers: VERS,
            proc_num: 0,
            cred: OpaqueAuth::NONE,
            verf: OpaqueAuth::NONE,
        };
        let n = encode_call(&mut call, &h).map_err(|e| format!("{e:?}"))?;
        let t = Instant::now();
        write_record(&mut s, &call[..n]).map_err(|e| e.to_string())?;
        let reply = read_record(&mut s, MAX_RECORD)
            .map_err(|e| e.to_string())?
            .ok_or("the TCP server closed the connection")?;
        rtts.push(t.elapsed().as_nanos() as u64);
        let (r, _) = decode_reply(&reply).map_err(|e| format!("reply: {e:?}"))?;
        let ok = matches!(
            r.body,
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            }
        );
        if r.xid != xid || !ok {
            return Err(format!("TCP call {xid}: unexpected reply {r:?}"));
        }
    }
    Ok(rtts)
}

/// The latency statistics of the only size of a run.
fn lat(r: Result<Vec<rpcrdma_apps::perf::SizeResult>, PerfError>) -> Result<LatStats, String> {
    match r.map_err(|e| e.to_string())?.first().map(|r| r.outcome) {
        Some(Outcome::Lat(s)) => Ok(s),
        other => Err(format!("no latency result: {other:?}")),
    }
}

/// A loopback port free now.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((LO, 0)).map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Starts the server process and waits for its `ready`.
fn start_server(iters: u64, iwarp: u16, tcp: u16) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(ROLE, "server")
        .args([iters.to_string(), iwarp.to_string(), tcp.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the server process: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        let _ = child.kill();
        return Err(format!("the server process did not start: {line:?}"));
    }
    Ok(child)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn client(iters: u64) -> Result<(), String> {
    let (iwarp_port, tcp_port, soft_port) = (free_port()?, free_port()?, free_port()?);
    println!("load average before: {}", load());
    let mut srv = start_server(iters, iwarp_port, tcp_port)?;
    let rows = (|| -> Result<[(&str, LatStats); 3], String> {
        let soft = lat(run_loopback(
            &config(iters, soft_port),
            &SoftFabric::new(),
            &mut rpcrdma_apps::perf::rpc::NoRpcObserver,
        ))?;
        let mut cfg = config(iters, iwarp_port);
        // Without type-2 memory windows the client must expose its pools through persistent
        // STags (NULL calls carry no chunks, but the endpoint is the same).
        let dev = IwarpProvider::open(LO).map_err(|e| e.to_string())?;
        cfg.persistent_stags = !dev.caps().mw_type2;
        let open = || IwarpProvider::open(LO).map_err(PerfError::Verbs);
        let iwarp = lat(run_client::<IwarpProvider>(
            &cfg,
            SocketAddr::new(LO, iwarp_port),
            &open,
            &mut rpcrdma_apps::perf::rpc::NoRpcObserver,
        ))?;
        let mut rtts = tcp_round_trips(tcp_port, iters)?;
        let tcp = LatStats::from_round_trips(&mut rtts, 1).ok_or("too few TCP calls")?;
        Ok([
            ("RPC-over-RDMA, soft provider, one process", soft),
            ("RPC-over-RDMA, iWARP provider, two processes", iwarp),
            ("ONC RPC over TCP (record marking), two processes", tcp),
        ])
    })();
    let status = srv.wait().map_err(|e| e.to_string());
    let rows = rows?;
    if !status?.success() {
        return Err("the server process failed".into());
    }
    println!("load average after:  {}", load());
    println!(
        "{iters} NULL calls each, one in flight; round trip in usec; ratio = t_typical / TCP's"
    );
    println!("| transport | t_typical | t_avg | 99% | ratio to TCP |");
    println!("|---|---:|---:|---:|---:|");
    let base = rows[2].1.typical;
    for (name, s) in &rows {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
            s.typical,
            s.avg,
            s.p99,
            s.typical / base
        );
    }
    Ok(())
}

const USAGE: &str = "usage: rpc_processes [--iters N]
  NULL RPC round trip: RPC-over-RDMA on the iWARP provider across two processes, on the soft
  provider in one process, and ONC RPC over TCP (record marking), as ratios in one run.
  --iters N   NULL calls per row (100..=10000000, default 20000)
";

fn main() -> ExitCode {
    let r = if std::env::var(ROLE).as_deref() == Ok("server") {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let num = |i: usize| args.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        server(num(0), num(1) as u16, num(2) as u16)
    } else {
        let f = Flags::new(USAGE, &["--iters"]);
        client(f.number("--iters", 100, 10_000_000).unwrap_or(20_000))
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc_processes: {e}");
            ExitCode::FAILURE
        }
    }
}
