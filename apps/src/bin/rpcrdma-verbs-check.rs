//! rpcrdma-verbs-check: runs the verbs provider conformance suite
//! (`rpcrdma_engine::verbs::conformance`) against a chosen provider and prints one line per
//! check (`PASS name` / `FAIL name: reason` / `SKIP name (why)`: the devices lack what the check
//! needs), then `summary: N passed, N failed, N skipped`; exits 1 if any check failed, 2 on a
//! usage or setup error. The checks expect per-device behaviour where devices legitimately
//! differ (the profile printed at the start; see `docs/rdma-provider.md` section 2).
//!
//! ```text
//! rpcrdma-verbs-check [--provider soft|rdma] [--only a,b] [--skip a,b] [--timeout SECS]
//!                     [--repeat N] [--list]
//! ```
//!
//! `--provider soft` (the default) runs on the in-process software provider. `--provider rdma`
//! (built with the `rdma` feature) runs on real verbs devices, configured by the environment:
//!
//! - `RPCRDMA_SERVER_ADDR` / `RPCRDMA_CLIENT_ADDR`: local IP addresses of the passive and active
//!   side's devices (both default to the other one; one of them is required).
//! - `RPCRDMA_DEVICE` / `RPCRDMA_PEER_DEVICE`: expected device names of the client and server
//!   side (checked after opening by address; a mismatch is a setup error).
//! - `RPCRDMA_SERVER_NETNS`: network namespace of the server address (a name under
//!   `/run/netns`, or a path). Unset: when the server address cannot be opened here, every
//!   namespace under `/run/netns` is tried. Every check drives both ends of its connections from
//!   this one process; the provider creates the server's rdma_cm ids inside that namespace.
//! - `RPCRDMA_PORT_BASE`: first rdma_cm port to listen on (default 24000 + pid % 4096, below
//!   Linux's ephemeral range 32768-60999 that the active side's ids draw from; a port found
//!   taken anyway is skipped).
//! - `RPCRDMA_ROLE`: only `both` (the default). The suite's checks look at both ends of each
//!   connection, so they cannot be split over two processes; use the namespace support instead.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rpcrdma_apps::cli;
use rpcrdma_engine::verbs::conformance::{all_checks, run_check, Check, Env, Outcome, Profile};
use rpcrdma_engine::verbs::soft::SoftProvider;
use rpcrdma_engine::verbs::{Device, DeviceCaps, Provider};

/// Command line.
struct Args {
    provider: String,
    only: Vec<String>,
    skip: Vec<String>,
    timeout: Option<Duration>,
    repeat: u32,
    list: bool,
}

const USAGE: &str = "usage: rpcrdma-verbs-check [--provider soft|rdma] [--only a,b] [--skip a,b]
                           [--timeout SECS] [--repeat N] [--list]
  --provider soft|rdma  the provider under test [soft]; rdma is configured by the
                        environment (RPCRDMA_SERVER_ADDR, RPCRDMA_CLIENT_ADDR, ...)
  --only a,b            run only these checks (names as --list prints them)
  --skip a,b            do not run these checks
  --timeout SECS        per check, 1..=86400 [none]
  --repeat N            run the selection N times, 1..=1000 [1]
  --list                print the checks' names
  -h, --help            this text
  -V, --version         the program's version
";

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        provider: String::from("soft"),
        only: Vec::new(),
        skip: Vec::new(),
        timeout: None,
        repeat: 1,
        list: false,
    };
    // Wrappers that quote an empty argument list (`printf %q` of nothing) pass "".
    let argv: Vec<String> = argv.iter().filter(|a| !a.is_empty()).cloned().collect();
    let mut c = cli::ArgCursor::new(&argv);
    while let Some(arg) = c.next_name() {
        match arg {
            "--provider" => {
                a.provider = c.value(arg)?;
                if !matches!(a.provider.as_str(), "soft" | "rdma") {
                    return Err(format!("--provider {}: must be soft or rdma", a.provider));
                }
            }
            "--only" => a.only.extend(check_names(arg, &c.value(arg)?)?),
            "--skip" => a.skip.extend(check_names(arg, &c.value(arg)?)?),
            "--timeout" => a.timeout = Some(Duration::from_secs(c.num(arg, 1, 86_400)?)),
            "--repeat" => a.repeat = c.num(arg, 1, 1000)? as u32,
            "--list" => a.list = true,
            _ => return Err(format!("unknown argument {:?}", c.token())),
        }
    }
    Ok(a)
}

/// The check names of `--only` / `--skip`, each one of the suite's.
fn check_names(flag: &str, list: &str) -> Result<Vec<String>, String> {
    let names = split_list(list);
    let known: Vec<&str> = all_checks::<CheckEnv<SoftProvider>>()
        .iter()
        .map(|c| c.name)
        .collect();
    if names.is_empty() {
        return Err(format!("{flag} needs check names (see --list)"));
    }
    if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(format!(
            "{flag} {bad}: no such check; the checks are: {}",
            known.join(",")
        ));
    }
    Ok(names)
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// The suite's environment over any provider: two opened devices and a port counter.
struct CheckEnv<P: Provider> {
    client: P::Device,
    server: P::Device,
    server_ip: IpAddr,
    next_port: u16,
    port_base: u16,
    idle: Option<Duration>,
    timeout: Duration,
    settle: u32,
    /// Notes of the running check (printed after its result line).
    notes: Vec<String>,
}

impl<P: Provider> Env for CheckEnv<P> {
    type P = P;

    fn client(&self) -> &P::Device {
        &self.client
    }

    fn server(&self) -> &P::Device {
        &self.server
    }

    fn listen_addr(&mut self) -> SocketAddr {
        let port = self.next_port;
        self.next_port = if self.next_port >= 65000 {
            self.port_base
        } else {
            self.next_port + 1
        };
        SocketAddr::new(self.server_ip, port)
    }

    fn idle(&mut self) {
        match self.idle {
            Some(d) => std::thread::sleep(d),
            None => std::thread::yield_now(),
        }
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn settle_iterations(&self) -> u32 {
        self.settle
    }

    fn note(&mut self, what: &str) {
        self.notes.push(what.to_string());
    }
}

fn print_caps(side: &str, name: &str, ip: IpAddr, c: &DeviceCaps) {
    println!(
        "{side}: {name} {ip}: {:?} vendor {:#x}/{:#x} max_qp_wr {} max_sge {}/{} max_inline {} \
         max_cqe {} max_srq_wr {} rd_atom {}/{} mw_type2 {} send_with_inv {}",
        c.transport,
        c.vendor_id,
        c.vendor_part_id,
        c.max_qp_wr,
        c.max_sge,
        c.max_sge_rd,
        c.max_inline_data,
        c.max_cqe,
        c.max_srq_wr,
        c.max_qp_rd_atom,
        c.max_qp_init_rd_atom,
        c.mw_type2,
        c.send_with_invalidate
    );
}

/// Runs the selected checks (each `--repeat` times); returns (passed, failed) runs.
fn run_checks<P: Provider>(env: &mut CheckEnv<P>, args: &Args) -> (usize, usize) {
    let checks: Vec<Check<CheckEnv<P>>> = all_checks::<CheckEnv<P>>();
    let prof = Profile::of::<P>(env.client.caps(), env.server.caps());
    println!("profile: {prof:?} (expectations per docs/rdma-provider.md section 2)");
    let (mut pass, mut fail, mut skipped, mut unselected) = (0usize, 0usize, 0usize, 0usize);
    for c in &checks {
        let selected = args.only.is_empty() || args.only.iter().any(|n| n == c.name);
        if !selected || args.skip.iter().any(|n| n == c.name) {
            unselected += 1;
            continue;
        }
        for round in 1..=args.repeat {
            let tag = if args.repeat > 1 {
                format!(" [{round}/{}]", args.repeat)
            } else {
                String::new()
            };
            let t0 = Instant::now();
            let r = catch_unwind(AssertUnwindSafe(|| run_check(env, c)));
            let ms = t0.elapsed().as_millis();
            match r {
                Ok(Outcome::Pass) => {
                    pass += 1;
                    println!("PASS {}{tag} ({ms} ms)", c.name);
                }
                Ok(Outcome::Fail(e)) => {
                    fail += 1;
                    println!("FAIL {}{tag}: {e} ({ms} ms)", c.name);
                }
                Ok(Outcome::Skip(why)) => {
                    skipped += 1;
                    println!("SKIP {} ({why})", c.name);
                    break;
                }
                Err(p) => {
                    fail += 1;
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    println!("FAIL {}{tag}: panicked: {msg} ({ms} ms)", c.name);
                }
            }
            for n in env.notes.drain(..) {
                println!("    note: {n}");
            }
        }
    }
    let not_run = if unselected > 0 {
        format!(", {unselected} not selected")
    } else {
        String::new()
    };
    println!("summary: {pass} passed, {fail} failed, {skipped} skipped{not_run}");
    (pass, fail)
}

fn env_ip(name: &str) -> Result<Option<IpAddr>, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not an IP address")),
        _ => Ok(None),
    }
}

fn port_base() -> Result<u16, String> {
    match std::env::var("RPCRDMA_PORT_BASE") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| (1024..65000).contains(p))
            .ok_or_else(|| format!("RPCRDMA_PORT_BASE={v:?} is not a port in 1024..65000")),
        _ => Ok(24000 + (std::process::id() % 4096) as u16),
    }
}

fn run_soft(args: &Args) -> Result<(usize, usize), String> {
    let client_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let client = SoftProvider::open(client_ip).map_err(|e| format!("open soft client: {e}"))?;
    let server = SoftProvider::open(server_ip).map_err(|e| format!("open soft server: {e}"))?;
    print_caps("client", "soft", client_ip, client.caps());
    print_caps("server", "soft", server_ip, server.caps());
    let base = port_base()?;
    let mut env = CheckEnv::<SoftProvider> {
        client,
        server,
        server_ip,
        next_port: base,
        port_base: base,
        idle: None,
        timeout: args.timeout.unwrap_or(Duration::from_secs(5)),
        settle: 20,
        notes: Vec::new(),
    };
    Ok(run_checks(&mut env, args))
}

#[cfg(feature = "rdma")]
fn run_rdma(args: &Args) -> Result<(usize, usize), String> {
    use rpcrdma_engine::verbs::rdma::{Rdma, RdmaDevice};
    use std::path::PathBuf;

    let server_env = env_ip("RPCRDMA_SERVER_ADDR")?;
    let client_env = env_ip("RPCRDMA_CLIENT_ADDR")?;
    let (server_ip, client_ip) = match (server_env, client_env) {
        (Some(s), Some(c)) => (s, c),
        (Some(s), None) => (s, s),
        (None, Some(c)) => (c, c),
        (None, None) => {
            return Err(String::from(
                "--provider rdma needs RPCRDMA_SERVER_ADDR and/or RPCRDMA_CLIENT_ADDR",
            ))
        }
    };
    let client =
        Rdma::open(client_ip).map_err(|e| format!("open client device {client_ip}: {e}"))?;

    let explicit_ns = std::env::var("RPCRDMA_SERVER_NETNS")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            if v.contains('/') {
                PathBuf::from(v)
            } else {
                PathBuf::from("/run/netns").join(v)
            }
        });
    let server = match explicit_ns {
        Some(ns) => RdmaDevice::open_in_netns(server_ip, &ns)
            .map_err(|e| format!("open server device {server_ip} in {}: {e}", ns.display()))?,
        None => match Rdma::open(server_ip) {
            Ok(d) => d,
            Err(first) => {
                let mut found = None;
                if let Ok(dir) = std::fs::read_dir("/run/netns") {
                    for ent in dir.flatten() {
                        if let Ok(d) = RdmaDevice::open_in_netns(server_ip, &ent.path()) {
                            println!(
                                "server address {server_ip} found in netns {}",
                                ent.path().display()
                            );
                            found = Some(d);
                            break;
                        }
                    }
                }
                found.ok_or_else(|| format!("open server device {server_ip}: {first}"))?
            }
        },
    };
    for (var, dev) in [
        ("RPCRDMA_DEVICE", &client),
        ("RPCRDMA_PEER_DEVICE", &server),
    ] {
        if let Ok(want) = std::env::var(var) {
            if !want.is_empty() && want != dev.name() {
                return Err(format!(
                    "{var}={want} but the address opened {}",
                    dev.name()
                ));
            }
        }
    }
    print_caps("client", client.name(), client_ip, client.caps());
    print_caps("server", server.name(), server_ip, server.caps());
    let base = port_base()?;
    let mut env = CheckEnv::<Rdma> {
        client,
        server,
        server_ip,
        next_port: base,
        port_base: base,
        idle: Some(Duration::from_micros(50)),
        timeout: args.timeout.unwrap_or(Duration::from_secs(20)),
        settle: 2000,
        notes: Vec::new(),
    };
    Ok(run_checks(&mut env, args))
}

#[cfg(not(feature = "rdma"))]
fn run_rdma(_args: &Args) -> Result<(usize, usize), String> {
    let _ = env_ip;
    Err(String::from(
        "this binary was built without the rdma provider (build with --features rdma)",
    ))
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let prog = "rpcrdma-verbs-check";
    let takes = |t: &str| {
        matches!(
            t,
            "--provider" | "--only" | "--skip" | "--timeout" | "--repeat"
        )
    };
    if let Some(code) = cli::start(prog, &argv, &takes, USAGE) {
        return code;
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => return cli::usage_error(prog, &e),
    };
    if args.list {
        for c in all_checks::<CheckEnv<SoftProvider>>() {
            println!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    match std::env::var("RPCRDMA_ROLE").as_deref() {
        Ok("") | Ok("both") | Err(_) => {}
        Ok(role) => {
            eprintln!(
                "rpcrdma-verbs-check: RPCRDMA_ROLE={role} is not supported: every check drives \
                 and inspects both ends of its connections in one process. For siw, run one \
                 process in the root namespace; the server side's rdma_cm ids are created in \
                 RPCRDMA_SERVER_NETNS (or the namespace found under /run/netns)."
            );
            return ExitCode::from(2);
        }
    }
    println!("rpcrdma-verbs-check: provider {}", args.provider);
    let r = match args.provider.as_str() {
        "soft" => run_soft(&args),
        "rdma" => run_rdma(&args),
        other => Err(format!("unknown provider {other:?} (soft, rdma)")),
    };
    match r {
        Ok((_, 0)) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rpcrdma-verbs-check: {e}");
            ExitCode::from(2)
        }
    }
}
