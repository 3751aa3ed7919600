//! `rpcrdma-perf`: perftest-compatible verbs benchmarks over the rpcrdma verbs boundary.
//!
//! `rpcrdma-perf <test> [options] [server]` with `<test>` one of send_lat, write_lat, read_lat,
//! send_bw, write_bw, read_bw, or the RPC tests rpc_lat, rpc_bw (through the poller's
//! Client/Server API, see `rpcrdma_apps::perf::rpc` and `rpcrdma_apps::perf::rpc_cli`); a copy or link named `rpcrdma_<test>`
//! runs that test directly.
//! With the soft provider (default) the server and the client run in this process on two
//! pinned threads; with `--provider iwarp` (RDMAP/DDP/MPA over TCP, no RDMA hardware or kernel
//! module) or `--provider rdma` (feature `rdma`) the server is started without an address and
//! the client with the server's address, as with perftest. See `docs/apps.md`.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use rpcrdma_apps::cli::{self, AppProvider, Devices, ProviderJob, ProviderKind};
use rpcrdma_apps::pcap::Mtu;
use rpcrdma_apps::perf::args::{self, PerfArgs};
use rpcrdma_apps::perf::printer::{self, VerbsPrinter};
use rpcrdma_apps::perf::report::{self, BannerInfo, RESULT_LINE};
use rpcrdma_apps::perf::rpc::RpcTest;
use rpcrdma_apps::perf::rpc_cli;
use rpcrdma_apps::perf::verbs_loops;
use rpcrdma_apps::perf::{Config, PerfError, Test};
use rpcrdma_engine::verbs::{Device, Provider};

/// The tests, for messages.
const TESTS: &str = "send_lat write_lat read_lat send_bw write_bw read_bw rpc_lat rpc_bw";

/// Client and server addresses of a soft loopback run.
const SOFT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SOFT_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn pick_cores(want: &[usize]) -> (Option<core_affinity::CoreId>, Option<core_affinity::CoreId>) {
    // get_core_ids reads the calling thread's mask: call it before pinning anything.
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let find = |n: usize| ids.iter().copied().find(|c| c.id == n);
    match want {
        [] if ids.len() >= 2 => (Some(ids[0]), Some(ids[1])),
        [] => (None, None),
        [a] => (find(*a), None),
        [a, b, ..] => (find(*a), find(*b)),
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {host}"))
}

enum Role {
    Loopback { server: IpAddr, client: IpAddr },
    Server { bind: IpAddr },
    Client { server: SocketAddr },
}

impl Role {
    fn name(&self) -> &'static str {
        match self {
            Role::Loopback { .. } => "loopback",
            Role::Server { .. } => "server",
            Role::Client { .. } => "client",
        }
    }
}

fn role(a: &PerfArgs) -> Result<Role, String> {
    let bind = match &a.bind {
        Some(b) => b
            .parse::<IpAddr>()
            .map_err(|_| format!("--bind expects an IP address, got {b:?}"))?,
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    match a.provider {
        ProviderKind::Soft => {
            if a.server.is_some() && !a.loopback {
                return Err(
                    "the soft provider runs both sides in this process: drop the server \
                            address, or add --loopback to use it as the server's address"
                        .into(),
                );
            }
            let server = match &a.server {
                Some(h) => resolve(h, a.port)?.ip(),
                None => IpAddr::V4(SOFT_SERVER_IP),
            };
            let client = if server == IpAddr::V4(SOFT_CLIENT_IP) {
                IpAddr::V4(SOFT_SERVER_IP)
            } else {
                IpAddr::V4(SOFT_CLIENT_IP)
            };
            Ok(Role::Loopback { server, client })
        }
        ProviderKind::Iwarp | ProviderKind::Rdma => match (&a.server, a.loopback) {
            (Some(h), true) => {
                let ip = resolve(h, a.port)?.ip();
                Ok(Role::Loopback {
                    server: ip,
                    client: ip,
                })
            }
            // TCP on the loopback interface needs no device address.
            (None, true) if a.provider == ProviderKind::Iwarp => Ok(Role::Loopback {
                server: IpAddr::V4(Ipv4Addr::LOCALHOST),
                client: IpAddr::V4(Ipv4Addr::LOCALHOST),
            }),
            (None, true) => Err("--loopback with the rdma provider needs the device's IP \
                                 address as the server address"
                .into()),
            (Some(h), false) => Ok(Role::Client {
                server: resolve(h, a.port)?,
            }),
            (None, false) => Ok(Role::Server { bind }),
        },
    }
}

/// Runs the configured role on provider `P`, opening devices with `open`.
fn run_with<P: Provider>(
    cfg: &Config,
    a: &PerfArgs,
    role: &Role,
    open: &dyn Fn(IpAddr) -> Result<P::Device, PerfError>,
    printer: &mut VerbsPrinter,
) -> Result<(), PerfError> {
    match *role {
        Role::Loopback { server, client } => {
            let sdev = open(server)?;
            let cdev = open(client)?;
            verbs_loops::run_loopback::<P>(
                cfg,
                &cdev,
                &sdev,
                SocketAddr::new(server, a.port),
                pick_cores(&a.cores),
                printer,
            )?;
        }
        Role::Client { server } => {
            if let (Some(c), _) = pick_cores(&a.cores) {
                core_affinity::set_for_current(c);
            }
            let local = match &a.bind {
                Some(b) => b
                    .parse()
                    .map_err(|_| PerfError::Config(format!("--bind {b:?}")))?,
                None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            };
            let dev = open(local)?;
            verbs_loops::run_client::<P>(cfg, &dev, server, printer)?;
        }
        Role::Server { bind } => {
            // The server core (`--cores a,b`: b; the second core by default), so that a client
            // process on the same machine keeps the first one; `--cores a` alone: a.
            let (c, s) = pick_cores(&a.cores);
            if let Some(core) = if a.cores.len() == 1 { c } else { s.or(c) } {
                core_affinity::set_for_current(core);
            }
            let dev = open(bind)?;
            let stop = AtomicBool::new(false);
            // Listen on the opened device's address (an unspecified --bind picks a device).
            let listen = SocketAddr::new(
                if bind.is_unspecified() {
                    dev.local_ip()
                } else {
                    bind
                },
                a.port,
            );
            verbs_loops::run_server::<P>(
                cfg,
                &dev,
                listen,
                &stop,
                &mut |addr| {
                    println!(" Waiting for client rdma_cm QP to connect on {addr}");
                    println!(" Please run the same command with the IB/RoCE interface IP");
                },
                printer,
            )?;
        }
    }
    Ok(())
}

/// The run on the provider [`cli::dispatch`] picks.
struct VerbsRun<'a> {
    cfg: &'a Config,
    a: &'a PerfArgs,
    role: &'a Role,
    mtu: Mtu,
    printer: &'a mut VerbsPrinter,
}

impl ProviderJob for VerbsRun<'_> {
    type Output = Result<(), PerfError>;

    fn run<P: AppProvider>(self, d: &Devices<'_>) -> Result<(), PerfError> {
        let peer = match self.role {
            Role::Client { server } => Some(*server),
            _ => None,
        };
        let trace = match d.fabric() {
            Some(f) => printer::start_pcap(f, self.a.pcap.as_deref(), self.mtu)
                .map_err(PerfError::Config)?,
            None => None,
        };
        let open = |ip: IpAddr| d.open::<P>(ip, peer).map_err(PerfError::Config);
        let r = run_with::<P>(self.cfg, self.a, self.role, &open, self.printer);
        printer::finish_pcap(trace, self.a.pcap.as_deref());
        r
    }
}

fn run(prog: &str, a: &PerfArgs) -> Result<(), String> {
    let mut cfg = a.config();
    cfg.progress = true;
    let role = role(a)?;
    let mtu = Mtu::from_bytes(a.mtu).ok_or("bad MTU")?;
    if a.pcap.is_some() && a.provider != ProviderKind::Soft {
        return Err("--pcap needs the soft provider (it exports the soft fabric's trace)".into());
    }
    a.provider.available(prog)?;
    let provider_name = a.provider.name();
    let memory = if a.hugepages {
        "mempool region, 2 MiB hugepages (fallback: normal pages, with a warning)"
    } else {
        "mempool region, normal pages"
    };
    let banner = BannerInfo {
        test: a.test,
        device: a.device.as_deref().unwrap_or(provider_name),
        provider: provider_name,
        transport: a.provider.transport(),
        role: role.name(),
        qps: cfg.qps,
        tx_depth: cfg.tx_depth,
        rx_depth: cfg.rx_depth,
        cq_mod: cfg.cq_mod,
        mtu: a.mtu,
        gid_index: a.gid_index,
        inline: cfg.inline,
        out_reads: 16,
        memory,
    };
    print!("{}", report::banner(&banner));
    let _ = io::stdout().flush();
    let mut printer = VerbsPrinter::new(cfg.unit, a.hist_log.is_some());
    let job = VerbsRun {
        cfg: &cfg,
        a,
        role: &role,
        mtu,
        printer: &mut printer,
    };
    if let Err(e) = cli::dispatch(a.provider, a.device.as_deref(), prog, job)? {
        return Err(format!("{e}"));
    }
    print!("{RESULT_LINE}");
    let _ = io::stdout().flush();
    if let Some(p) = &a.out_json {
        let doc = report::json_report(&banner, &printer.results, cfg.unit);
        printer::write_json(p, &doc)?;
    }
    if let Some(p) = &a.hist_log {
        printer.write_hist_log(p, a.test)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().collect();
    let argv0 = argv.first().map(String::as_str).unwrap_or("rpcrdma-perf");
    let prog = cli::prog_name(Some(argv0), "rpcrdma-perf");
    // The RPC tests (rpc_lat, rpc_bw) have their own flags and runner.
    if let Some(t) = RpcTest::from_argv0(argv0) {
        return ExitCode::from(rpc_cli::main(&prog, t, &argv[1..]));
    }
    if let Some(t) = argv.get(1).and_then(|n| RpcTest::from_name(n)) {
        return ExitCode::from(rpc_cli::main(&prog, t, &argv[2..]));
    }
    let (test, rest) = match Test::from_argv0(argv0) {
        Some(t) => (t, &argv[1..]),
        None => match argv.get(1).map(String::as_str) {
            Some("-h") | Some("--help") => return cli::print_help(&args::usage(&prog, None)),
            Some("-V") | Some("--version") => return cli::print_version("rpcrdma-perf"),
            None => return cli::usage_error(&prog, &format!("which test? ({TESTS})")),
            Some(name) => match Test::from_name(name) {
                Some(t) => (t, &argv[2..]),
                None => {
                    return cli::usage_error(&prog, &format!("unknown test {name:?} ({TESTS})"))
                }
            },
        },
    };
    let usage = |e: &str| {
        eprintln!("{prog} {test}: {}", e.trim());
        eprintln!("Try `{prog} {test} --help`.");
        ExitCode::from(cli::USAGE_EXIT)
    };
    match cli::early(rest, &args::verbs_takes_value) {
        Ok(Some(cli::Early::Help)) => return cli::print_help(&args::usage(&prog, Some(test))),
        Ok(Some(cli::Early::Version)) => return cli::print_version("rpcrdma-perf"),
        Ok(None) => {}
        Err(e) => return usage(&e),
    }
    let checked = args::parse(test, rest).and_then(|a| {
        a.preflight()?;
        role(&a)?;
        Ok(a)
    });
    let a = match checked {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    match run(&prog, &a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(" {prog} {test}: {e}");
            ExitCode::FAILURE
        }
    }
}
