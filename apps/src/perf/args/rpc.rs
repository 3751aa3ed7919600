//! The flags of the RPC tests (`rpc_lat`, `rpc_bw`): perftest's that apply to RPC calls, plus
//! the RPC-over-RDMA ones (`--chunks`, `--rpcrdma-version 1|2`, `--inline-size`, `--credits`,
//! ...).
//!
//! Normal operation: [`parse_rpc`] reads perftest's spellings (the scanner of [`super`]) and
//! yields [`RpcArgs`]; `--version` prints the program version (as in every tool here), the
//! RPC-over-RDMA version is `--rpcrdma-version`. Recovery: an unknown, unsupported or out-of-range flag, a
//! perftest flag that does not apply to RPC calls (`-I`, `-q`), or flags that contradict each
//! other or the provider (a server address or `--bind` over the soft provider, `--loopback` or
//! `--pcap` with rdma, `--null` with a payload) are an error message naming the flag.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use rpcrdma_engine::proto::private_data;
use rpcrdma_poller::{BackoffMode, ProtocolVersion};

use super::{
    check_sizes, connection, cores, mtu, preflight, provider, ranged, scan, Item, ProviderKind,
    Table, Takes,
};
use crate::perf::rpc::{Chunks, RpcConfig, RpcTest, MAX_RPC_SIZE};
use crate::perf::stats::BwUnit;
use crate::perf::{DEFAULT_PORT, MAX_ITERS, MIN_ITERS, PEAK_MAX_ITERS};

/// Everything the command line of an RPC test says.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcArgs {
    /// The test.
    pub test: RpcTest,
    /// `-s`.
    pub size: u64,
    /// `-a`: sizes 2..=[`MAX_RPC_SIZE`].
    pub all: bool,
    /// `-n`.
    pub iters: u64,
    /// `-D` (seconds).
    pub duration: Option<u64>,
    /// `-p`.
    pub port: u16,
    /// `-m` (pcap packet size, banner).
    pub mtu: u32,
    /// `-t` (rpc_bw: calls in flight; default the credits).
    pub window: Option<u32>,
    /// `-N`.
    pub no_peak: bool,
    /// `--report_gbits`.
    pub report_gbits: bool,
    /// `--out_json`.
    pub out_json: Option<PathBuf>,
    /// `--pcap`.
    pub pcap: Option<PathBuf>,
    /// `--hist-log`.
    pub hist_log: Option<PathBuf>,
    /// `--metrics ADDR:PORT`: the server's Prometheus metrics port.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--srq N`: the server's shared receive queue depth (0: each connection posts its own
    /// receives).
    pub srq: u32,
    /// `--cores a,b`: client core, server core.
    pub cores: Vec<usize>,
    /// `--hugepages`.
    pub hugepages: bool,
    /// `--persistent-stags`: the client may expose its pools through endpoint-wide persistent
    /// STags on a device without type-2 memory windows (siw).
    pub persistent_stags: bool,
    /// `--chunks`.
    pub chunks: Chunks,
    /// `-d`: the RDMA device (checked; with rdma the device owning the address must have it).
    pub device: Option<String>,
    /// `--rpcrdma-version 1|2`: RPC-over-RDMA version.
    pub rpc_version: u32,
    /// `--inline-size`.
    pub inline: u32,
    /// `--credits`.
    pub credits: u32,
    /// `--null`.
    pub null: bool,
    /// `--backoff`.
    pub backoff: BackoffMode,
    /// `--provider`: soft (both sides in this process) or rdma (server and client processes).
    pub provider: ProviderKind,
    /// `--loopback` (what the soft provider always does; refused with rdma).
    pub loopback: bool,
    /// The server's address (rdma client); none: soft loopback, or the rdma server.
    pub server: Option<String>,
    /// `--bind`: local address whose RDMA device to use (rdma server: also the listen address).
    pub bind: Option<String>,
    /// `-h`.
    pub help: bool,
    /// `-V` / `--version`.
    pub print_version: bool,
}

impl RpcArgs {
    /// Nothing given.
    pub fn defaults(test: RpcTest) -> RpcArgs {
        RpcArgs {
            test,
            size: test.default_size(),
            all: false,
            iters: 1000,
            duration: None,
            port: DEFAULT_PORT,
            mtu: 4096,
            window: None,
            no_peak: false,
            report_gbits: false,
            out_json: None,
            pcap: None,
            hist_log: None,
            metrics: None,
            srq: 0,
            cores: Vec::new(),
            hugepages: false,
            persistent_stags: false,
            chunks: Chunks::Auto,
            device: None,
            rpc_version: 1,
            inline: 4096,
            credits: 32,
            null: false,
            backoff: BackoffMode::BusyPoll,
            provider: ProviderKind::Soft,
            loopback: false,
            server: None,
            bind: None,
            help: false,
            print_version: false,
        }
    }

    /// What the run will touch, checked before it starts: `--out_json`, `--pcap`,
    /// `--hist-log` writable, `--cores` present, the `-d` device present.
    pub fn preflight(&self) -> Result<(), String> {
        preflight(
            &[
                ("--out_json", self.out_json.as_deref()),
                ("--pcap", self.pcap.as_deref()),
                ("--hist-log", self.hist_log.as_deref()),
            ],
            &self.cores,
            self.device.as_deref(),
            self.provider,
        )
    }

    /// The sizes to run.
    pub fn sizes(&self) -> Vec<u64> {
        if self.all {
            (1..=MAX_RPC_SIZE.trailing_zeros())
                .map(|s| 1u64 << s)
                .collect()
        } else {
            vec![self.size]
        }
    }

    /// The run configuration.
    pub fn config(&self) -> RpcConfig {
        let mut c = RpcConfig::new(self.test);
        c.sizes = self.sizes();
        c.iters = self.iters;
        c.duration = self.duration.map(Duration::from_secs);
        c.null = self.null;
        c.chunks = self.chunks;
        c.version = if self.rpc_version == 2 {
            ProtocolVersion::V2
        } else {
            ProtocolVersion::V1
        };
        c.inline = self.inline;
        c.credits = self.credits;
        c.window = self.window.unwrap_or(self.credits);
        c.peak = !self.no_peak && self.duration.is_none() && self.iters <= PEAK_MAX_ITERS;
        c.unit = if self.report_gbits {
            BwUnit::Gbit
        } else {
            BwUnit::MiB
        };
        c.hugepages = self.hugepages;
        c.persistent_stags = self.persistent_stags;
        c.metrics = self.metrics;
        c.srq = (self.srq > 0).then_some(self.srq);
        c.backoff = self.backoff;
        c.port = self.port;
        c
    }
}

/// Applies a flag that takes a value (errors name the flag as spelled).
fn apply(a: &mut RpcArgs, name: &str, v: &str, given_size: &mut bool) -> Result<(), String> {
    match name {
        "-s" | "--size" => {
            a.size = ranged(name, v, 1, MAX_RPC_SIZE)?;
            *given_size = true;
        }
        "-n" | "--iters" => a.iters = ranged(name, v, MIN_ITERS, MAX_ITERS)?,
        "-D" | "--duration" => a.duration = Some(ranged(name, v, 1, 3600 * 24)?),
        "-p" | "--port" => a.port = ranged(name, v, 1, 65535)? as u16,
        "-d" | "--ib-dev" => a.device = Some(v.to_string()),
        "-m" | "--mtu" => a.mtu = mtu(name, v)?,
        "-t" | "--tx-depth" => a.window = Some(ranged(name, v, 1, 1024)? as u32),
        "--out_json" | "--out_json_file" => a.out_json = Some(PathBuf::from(v)),
        "--pcap" => a.pcap = Some(PathBuf::from(v)),
        "--hist-log" => a.hist_log = Some(PathBuf::from(v)),
        "--metrics" => {
            a.metrics = Some(
                v.parse()
                    .map_err(|_| format!("--metrics: bad address {v:?}"))?,
            )
        }
        "--srq" => a.srq = ranged(name, v, 0, 1 << 20)? as u32,
        "--cores" => a.cores = cores(v)?,
        "--provider" => a.provider = provider(v)?,
        "--bind" => {
            v.parse::<IpAddr>()
                .map_err(|_| format!("--bind expects an IP address, got {v:?}"))?;
            a.bind = Some(v.to_string());
        }
        "--chunks" => {
            a.chunks = Chunks::from_name(v).ok_or_else(|| {
                format!("--chunks must be auto, none, read, write or reply, got {v:?}")
            })?
        }
        "--rpcrdma-version" => {
            a.rpc_version = match v {
                "1" => 1,
                "2" => 2,
                _ => return Err(format!("{name} must be 1 or 2, got {v:?}")),
            }
        }
        "--inline-size" => {
            a.inline = ranged(
                name,
                v,
                u64::from(private_data::MIN_SIZE),
                u64::from(private_data::MAX_SIZE),
            )? as u32
        }
        "--credits" => a.credits = ranged(name, v, 1, 1024)? as u32,
        "--backoff" => {
            a.backoff = v
                .parse::<BackoffMode>()
                .map_err(|e| format!("--backoff {e}"))?
        }
        "--connection" => connection(v)?,
        _ => return Err(format!("unknown flag {name}")),
    }
    Ok(())
}

/// Applies a boolean flag.
fn apply_bool(a: &mut RpcArgs, name: &str) -> Result<(), String> {
    match name {
        "-a" | "--all" => a.all = true,
        "-N" | "--noPeak" => a.no_peak = true,
        "-h" | "--help" => a.help = true,
        "-V" | "--version" => a.print_version = true,
        "-F" | "--CPU-freq" | "-R" | "--rdma_cm" => {}
        "--loopback" => a.loopback = true,
        "--report_gbits" => a.report_gbits = true,
        "--hugepages" => a.hugepages = true,
        "--persistent-stags" => a.persistent_stags = true,
        "--null" => a.null = true,
        _ => return Err(format!("unknown flag {name}")),
    }
    Ok(())
}

const SHORT_VALUE: &str = "snDpmtd";
const SHORT_BOOL: &str = "aNhVFR";
const LONG_VALUE: [&str; 22] = [
    "size",
    "ib-dev",
    "iters",
    "duration",
    "port",
    "mtu",
    "tx-depth",
    "out_json",
    "out_json_file",
    "pcap",
    "hist-log",
    "metrics",
    "srq",
    "cores",
    "provider",
    "bind",
    "chunks",
    "rpcrdma-version",
    "inline-size",
    "credits",
    "backoff",
    "connection",
];
const LONG_BOOL: [&str; 11] = [
    "all",
    "version",
    "noPeak",
    "help",
    "CPU-freq",
    "rdma_cm",
    "loopback",
    "report_gbits",
    "hugepages",
    "persistent-stags",
    "null",
];

/// The RPC tests' flag table.
pub(super) struct Flags;

impl Table for Flags {
    fn long(&self, name: &str) -> Result<Takes, String> {
        if LONG_VALUE.contains(&name) {
            Ok(Takes::Value)
        } else if LONG_BOOL.contains(&name) {
            Ok(Takes::Nothing)
        } else if name == "inline_size" {
            Err(
                "--inline_size (perftest's WQE inline data) does not apply to the \
                        RPC tests; use --inline-size (the RPC-over-RDMA inline threshold)"
                    .into(),
            )
        } else {
            Err(format!("unknown or unsupported flag --{name}"))
        }
    }

    fn short(&self, f: char) -> Result<Takes, String> {
        if SHORT_VALUE.contains(f) {
            Ok(Takes::Value)
        } else if SHORT_BOOL.contains(f) {
            Ok(Takes::Nothing)
        } else if f == 'I' {
            Err("-I (perftest's WQE inline data) does not apply to the RPC \
                        tests; use --inline-size (the RPC-over-RDMA inline threshold)"
                .into())
        } else if f == 'q' {
            Err("-q: the RPC tests use one connection".into())
        } else {
            Err(format!("flag -{f} is not supported by the RPC tests"))
        }
    }
}

/// Parses the arguments of `rpc_lat` / `rpc_bw` (after the subcommand).
pub fn parse_rpc(test: RpcTest, args: &[String]) -> Result<RpcArgs, String> {
    let mut a = RpcArgs::defaults(test);
    let mut given_size = false;
    scan(args, &Flags, &mut |item| match item {
        Item::Flag(flag, Some(v)) => apply(&mut a, flag, v, &mut given_size),
        Item::Flag(flag, None) => apply_bool(&mut a, flag),
        Item::Operand(tok) if a.server.is_none() => {
            a.server = Some(tok.to_string());
            Ok(())
        }
        Item::Operand(tok) => Err(format!("unexpected argument {tok:?}")),
    })?;
    check(&a, test, given_size)?;
    Ok(a)
}

/// The dependencies between the flags, and between the flags and the provider.
fn check(a: &RpcArgs, test: RpcTest, given_size: bool) -> Result<(), String> {
    if a.provider.in_process() && a.server.is_some() {
        return Err(format!(
            "unexpected argument {:?} (over the soft provider the RPC tests run server and \
             client in this process; a server address needs --provider iwarp or rdma)",
            a.server.as_deref().unwrap_or_default()
        ));
    }
    if a.provider.in_process() && a.bind.is_some() {
        return Err("--bind applies to --provider iwarp and rdma".into());
    }
    if !a.provider.in_process() && a.loopback {
        return Err(format!(
            "--loopback: with --provider {} the RPC tests run as a server process (no \
             address) and a client process (the server's address)",
            a.provider.name()
        ));
    }
    if !a.provider.in_process() && a.server.is_some() && a.srq > 0 {
        return Err(
            "--srq applies to the server (its shared receive queue): give it to the process \
             without an address"
                .into(),
        );
    }
    if !a.provider.in_process() && a.pcap.is_some() {
        return Err("--pcap needs the soft provider (it exports the soft fabric's trace)".into());
    }
    check_sizes(a.all, given_size, a.duration.is_some())?;
    if test.is_latency() && a.no_peak {
        return Err(" NoPeak only valid for BW tests".into());
    }
    if test.is_latency() && a.window.is_some() {
        return Err("-t applies to rpc_bw (rpc_lat keeps one call in flight)".into());
    }
    if a.null && (given_size || a.all) {
        return Err("--null calls procedure 0 (no payload): drop -s / -a".into());
    }
    if a.null && a.chunks != Chunks::Auto {
        return Err("--null carries no payload: drop --chunks".into());
    }
    Ok(())
}

/// The help text of `rpc_lat` / `rpc_bw` (`prog` is how the program was called).
pub fn usage_rpc(prog: &str, test: RpcTest) -> String {
    let t = test.name();
    let mut s = format!(
        "Usage:\n  {prog} {t} [options]     RPC calls through the poller's Client/Server API,\n\
         \x20                                 server and client in this process (soft provider)\n\
         \x20 {prog} {t} --provider iwarp|rdma [options]           start a server\n\
         \x20 {prog} {t} --provider iwarp|rdma [options] <server>  run the client against it\n\n"
    );
    s.push_str("perftest options:\n");
    s.push_str("  -s, --size=<size>         Payload octets per call (default 2 lat, 65536 bw; at most 1048576)\n");
    s.push_str("  -a, --all                 Run sizes from 2 till 2^20\n");
    s.push_str("  -n, --iters=<iters>       Calls per size (at least 5, default 1000)\n");
    s.push_str("  -D, --duration=<sec>      Run for this many seconds instead of -n (one size)\n");
    s.push_str("  -p, --port=<port>         Server port of the first size (default 18515)\n");
    s.push_str("  -d, --ib-dev=<dev>        Device name (checked: soft, or the RDMA device of the address)\n");
    s.push_str("  -m, --mtu=<mtu>           Packet size of --pcap traces (default 4096)\n");
    if !test.is_latency() {
        s.push_str("  -t, --tx-depth=<n>        Calls in flight (default: the credits)\n");
        s.push_str("  -N, --noPeak              Do not compute the peak\n");
        s.push_str("      --report_gbits        Report Gb/sec instead of MiB/sec\n");
    }
    s.push_str("      --out_json <file>     Also write the results as JSON\n");
    s.push_str("  -h, --help                This text\n");
    s.push_str("  -V, --version             Version\n\n");
    s.push_str("RPC options:\n");
    s.push_str("      --null                NULL calls (procedure 0, no payload)\n");
    s.push_str(
        "      --chunks <how>        auto (default): inline, or Read/Write chunks above the\n",
    );
    s.push_str(
        "                            inline threshold; none: inline only; read: payload in a\n",
    );
    s.push_str(
        "                            Read chunk; write: payload back in a Write chunk; reply:\n",
    );
    s.push_str(
        "                            payload back inline or as a long reply (Reply chunk)\n",
    );
    s.push_str("      --rpcrdma-version 1|2 RPC-over-RDMA version (default 1)\n");
    s.push_str(
        "      --inline-size <n>     Inline threshold both sides advertise (1024..262144,\n",
    );
    s.push_str("                            default 4096; rounded down as RFC 8797 encodes it)\n");
    s.push_str("      --credits <n>         Credits asked for and granted (default 32)\n");
    s.push_str(
        "      --backoff busy_poll|shared_cores|interrupt  Reactors' idle behaviour (default busy_poll)\n",
    );
    s.push_str(
        "      --provider soft|iwarp|rdma  Verbs provider (default soft; iwarp: iWARP over TCP,\n",
    );
    s.push_str(
        "                            rdma: RDMA devices; both: two processes, give both the\n",
    );
    s.push_str("                            same size, chunk, inline and credit options)\n");
    s.push_str(
        "      --bind <ip>           iwarp, rdma: local address to use (server: listen there)\n",
    );
    s.push_str(
        "      --srq <n>             Server: one shared receive queue of n receives for its\n",
    );
    s.push_str(
        "                            connections (perftest's \"Using SRQ\"; 0: per-connection\n",
    );
    s.push_str("                            receives, the default)\n");
    s.push_str("      --cores <a>[,<b>]     Client reactor on core a, server reactor on core b\n");
    s.push_str("      --hugepages           Back the endpoints' buffers with 2 MiB hugepages\n");
    s.push_str(
        "      --persistent-stags    Client on a device without type-2 memory windows (siw, iwarp):\n",
    );
    s.push_str(
        "                            expose its pools to the server through endpoint-wide\n",
    );
    s.push_str(
        "                            persistent STags (refused without; docs/rdma-provider.md)\n",
    );
    s.push_str("      --pcap <file>         Write the run's packets as RoCEv2 frames (pcap)\n");
    s.push_str("      --hist-log <file>     hdrhistogram interval log, one interval per size\n");
    s.push_str(
        "      --metrics <addr:port> Serve the server's Prometheus metrics there (rpcrdma-stat)\n",
    );
    s
}
