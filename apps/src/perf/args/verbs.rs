//! The flags of the verbs tests (`send_lat` … `read_bw`): perftest's where they apply, plus
//! rpcrdma-perf's own.
//!
//! Normal operation: [`parse`] reads perftest's spellings (the scanner of [`super`]), applies
//! perftest's defaults and dependencies (tx depth at most the iterations for BW, CQ
//! moderation at most the tx depth, no peak above 20000 iterations) and yields [`PerfArgs`].
//! Recovery: an unknown, unsupported or out-of-range flag is an error message naming the
//! flag (the short spelling for perftest's flags, `-s` for `--size`); nothing is silently
//! ignored except the flags perftest users pass by habit and that mean nothing here (`-F`,
//! `-R`).

use std::path::PathBuf;
use std::time::Duration;

use super::{
    check_sizes, connection, cores, mtu, preflight, provider, ranged, scan, Item, ProviderKind,
    Table, Takes,
};
use crate::perf::stats::BwUnit;
use crate::perf::verbs_loops::MAX_QPS;
use crate::perf::{
    all_sizes, Config, Test, DEFAULT_PORT, MAX_ITERS, MAX_SIZE, MIN_ITERS, PEAK_MAX_ITERS,
};

/// Everything the command line says.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfArgs {
    /// The test.
    pub test: Test,
    /// `-s`: message size.
    pub size: u64,
    /// `-a`: all sizes 2..2^23.
    pub all: bool,
    /// `-n`: iterations.
    pub iters: u64,
    /// `-d`: device name (shown; the provider picks the device from the address).
    pub device: Option<String>,
    /// `-i`: IB port (accepted, shown).
    pub ib_port: u8,
    /// `-x`: GID index (accepted, shown).
    pub gid_index: Option<i32>,
    /// `-p`: port.
    pub port: u16,
    /// `-D`: duration in seconds.
    pub duration: Option<u64>,
    /// `-q`: QPs.
    pub qps: u32,
    /// `-t`: tx depth.
    pub tx_depth: u32,
    /// `-r`: rx depth.
    pub rx_depth: u32,
    /// `-Q`: CQ moderation.
    pub cq_mod: u32,
    /// `-I`: inline size.
    pub inline: u32,
    /// `-m`: MTU (pcap packet size, banner).
    pub mtu: u32,
    /// `-N`: no peak.
    pub no_peak: bool,
    /// `--report_gbits`.
    pub report_gbits: bool,
    /// `--out_json FILE` / `--out_json_file=FILE`.
    pub out_json: Option<PathBuf>,
    /// `--provider`.
    pub provider: ProviderKind,
    /// `--cores A[,B]`: client core, server core.
    pub cores: Vec<usize>,
    /// `--hugepages`.
    pub hugepages: bool,
    /// `--pcap FILE`.
    pub pcap: Option<PathBuf>,
    /// `--hist-log FILE`.
    pub hist_log: Option<PathBuf>,
    /// `--loopback`.
    pub loopback: bool,
    /// `--bind IP`: local address whose RDMA device is used (rdma provider).
    pub bind: Option<String>,
    /// The server address (client mode).
    pub server: Option<String>,
    /// `-h`.
    pub help: bool,
    /// `-V`.
    pub version: bool,
}

impl PerfArgs {
    /// The arguments with nothing given.
    pub fn defaults(test: Test) -> PerfArgs {
        PerfArgs {
            test,
            size: test.default_size(),
            all: false,
            iters: test.default_iters(),
            device: None,
            ib_port: 1,
            gid_index: None,
            port: DEFAULT_PORT,
            duration: None,
            qps: 1,
            tx_depth: test.default_tx_depth(),
            rx_depth: 512,
            cq_mod: 100,
            inline: test.default_inline(),
            mtu: 4096,
            no_peak: false,
            report_gbits: false,
            out_json: None,
            provider: ProviderKind::Soft,
            cores: Vec::new(),
            hugepages: false,
            pcap: None,
            hist_log: None,
            loopback: false,
            bind: None,
            server: None,
            help: false,
            version: false,
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
            all_sizes().collect()
        } else {
            vec![self.size]
        }
    }

    /// The BW unit.
    pub fn unit(&self) -> BwUnit {
        if self.report_gbits {
            BwUnit::Gbit
        } else {
            BwUnit::MiB
        }
    }

    /// The engine configuration.
    pub fn config(&self) -> Config {
        let mut c = Config::new(self.test);
        c.sizes = self.sizes();
        c.iters = self.iters;
        c.duration = self.duration.map(Duration::from_secs);
        c.qps = self.qps;
        c.tx_depth = self.tx_depth;
        c.rx_depth = self.rx_depth;
        c.cq_mod = self.cq_mod;
        c.inline = self.inline;
        c.peak = !self.no_peak && self.duration.is_none() && self.iters <= PEAK_MAX_ITERS;
        c.unit = self.unit();
        c.hugepages = self.hugepages;
        c
    }
}

/// Short flags that take a value.
const SHORT_VALUE: &str = "sndixpDqtmIQr";
/// Short boolean flags.
const SHORT_BOOL: &str = "aFRNhV";
/// perftest flags this program does not implement.
const SHORT_UNSUPPORTED: &str = "bceglMoOSTuUCHwyzLPBEJjKkZv";

fn long_to_short(name: &str) -> Option<char> {
    Some(match name {
        "size" => 's',
        "iters" => 'n',
        "ib-dev" => 'd',
        "ib-port" => 'i',
        "gid-index" => 'x',
        "port" => 'p',
        "duration" => 'D',
        "qp" => 'q',
        "tx-depth" => 't',
        "mtu" => 'm',
        // perftest's spelling, and the hyphenated one every other tool here uses.
        "inline_size" | "inline-size" => 'I',
        "cq-mod" => 'Q',
        "rx-depth" => 'r',
        "all" => 'a',
        "CPU-freq" => 'F',
        "rdma_cm" => 'R',
        "noPeak" => 'N',
        "help" => 'h',
        "version" => 'V',
        _ => return None,
    })
}

/// Long flags of our own that take a value.
const LONG_VALUE: [&str; 8] = [
    "out_json",
    "out_json_file",
    "provider",
    "cores",
    "pcap",
    "hist-log",
    "bind",
    "connection",
];
/// Long boolean flags of our own.
const LONG_BOOL: [&str; 3] = ["report_gbits", "hugepages", "loopback"];

/// The verbs tests' flag table.
pub(super) struct Flags;

impl Table for Flags {
    fn long(&self, name: &str) -> Result<Takes, String> {
        if LONG_BOOL.contains(&name) {
            Ok(Takes::Nothing)
        } else if LONG_VALUE.contains(&name) {
            Ok(Takes::Value)
        } else if let Some(f) = long_to_short(name) {
            self.short(f)
        } else {
            Err(format!("unknown or unsupported flag --{name}"))
        }
    }

    fn short(&self, f: char) -> Result<Takes, String> {
        if SHORT_VALUE.contains(f) {
            Ok(Takes::Value)
        } else if SHORT_BOOL.contains(f) {
            Ok(Takes::Nothing)
        } else if SHORT_UNSUPPORTED.contains(f) {
            Err(format!(
                "perftest flag -{f} is not supported by rpcrdma-perf"
            ))
        } else {
            Err(format!("unknown flag -{f}"))
        }
    }
}

/// Applies perftest's flag `-f` (also when spelled long: errors name `-f`).
fn apply_short(
    a: &mut PerfArgs,
    f: char,
    v: Option<&str>,
    given: &mut Given,
) -> Result<(), String> {
    let flag = format!("-{f}");
    let v = || v.ok_or_else(|| format!("{flag} needs a value"));
    match f {
        's' => {
            a.size = ranged(&flag, v()?, 1, MAX_SIZE)?;
            given.size = true;
        }
        'n' => a.iters = ranged(&flag, v()?, MIN_ITERS, MAX_ITERS)?,
        'd' => a.device = Some(v()?.to_string()),
        'i' => a.ib_port = ranged(&flag, v()?, 1, 3)? as u8,
        'x' => a.gid_index = Some(ranged(&flag, v()?, 0, 64)? as i32),
        'p' => a.port = ranged(&flag, v()?, 1, 65535)? as u16,
        'D' => a.duration = Some(ranged(&flag, v()?, 1, 3600 * 24)?),
        'q' => a.qps = ranged(&flag, v()?, 1, u64::from(MAX_QPS))? as u32,
        't' => a.tx_depth = ranged(&flag, v()?, 1, 15000)? as u32,
        'm' => a.mtu = mtu(&flag, v()?)?,
        'I' => a.inline = ranged(&flag, v()?, 0, 912)? as u32,
        'Q' => {
            a.cq_mod = ranged(&flag, v()?, 1, 1024)? as u32;
            given.cq_mod = true;
        }
        'r' => a.rx_depth = ranged(&flag, v()?, 1, 16384)? as u32,
        'a' => a.all = true,
        'F' | 'R' => {}
        'N' => a.no_peak = true,
        'h' => a.help = true,
        'V' => a.version = true,
        _ => return Err(format!("unknown flag -{f}")),
    }
    Ok(())
}

/// Which flags were given (for the dependencies).
#[derive(Default)]
struct Given {
    size: bool,
    cq_mod: bool,
}

/// Applies one of rpcrdma-perf's own long flags, `--name` (a boolean one when `v` is none).
fn apply_long(a: &mut PerfArgs, name: &str, v: Option<&str>) -> Result<(), String> {
    let Some(v) = v else {
        match name {
            "report_gbits" => a.report_gbits = true,
            "hugepages" => a.hugepages = true,
            _ => a.loopback = true,
        }
        return Ok(());
    };
    match name {
        "out_json" | "out_json_file" => a.out_json = Some(PathBuf::from(v)),
        "provider" => a.provider = provider(v)?,
        "cores" => a.cores = cores(v)?,
        "pcap" => a.pcap = Some(PathBuf::from(v)),
        "hist-log" => a.hist_log = Some(PathBuf::from(v)),
        "bind" => a.bind = Some(v.to_string()),
        "connection" => connection(v)?,
        _ => return Err(format!("unknown flag --{name}")),
    }
    Ok(())
}

/// Applies one item of the command line.
fn apply(a: &mut PerfArgs, item: Item<'_>, given: &mut Given) -> Result<(), String> {
    let (flag, v) = match item {
        Item::Operand(tok) => {
            if a.server.is_some() {
                return Err(format!("unexpected argument {tok:?}"));
            }
            a.server = Some(tok.to_string());
            return Ok(());
        }
        Item::Flag(flag, v) => (flag, v),
    };
    if let Some(name) = flag.strip_prefix("--") {
        if let Some(f) = long_to_short(name) {
            return apply_short(a, f, v, given);
        }
        return apply_long(a, name, v);
    }
    let f = flag.chars().nth(1).unwrap_or('-');
    apply_short(a, f, v, given)
}

/// Parses the arguments after the subcommand (or after `argv[0]` for a `rpcrdma_<test>` link).
pub fn parse(test: Test, args: &[String]) -> Result<PerfArgs, String> {
    let mut a = PerfArgs::defaults(test);
    let mut given = Given::default();
    scan(args, &Flags, &mut |item| apply(&mut a, item, &mut given))?;
    // perftest's dependencies.
    check_sizes(a.all, given.size, a.duration.is_some())?;
    if test.is_latency() && a.qps > 1 {
        return Err(" Multiple QPs only available on bw tests".into());
    }
    if test.is_latency() && a.no_peak {
        return Err(" NoPeak only valid for BW tests".into());
    }
    if !test.is_latency() && a.duration.is_none() && u64::from(a.tx_depth) > a.iters {
        a.tx_depth = a.iters as u32;
    }
    if test.is_send() && u64::from(a.rx_depth) > a.iters && a.duration.is_none() {
        a.rx_depth = a.iters as u32;
    }
    if a.cq_mod > a.tx_depth {
        if given.cq_mod {
            eprintln!(
                " CQ moderation can't be greater than tx depth.\n Changing CQ moderation to tx depth = {}.",
                a.tx_depth
            );
        }
        a.cq_mod = a.tx_depth;
    }
    Ok(a)
}

/// The help text for `test` (`prog` is how the program was called).
pub fn usage(prog: &str, test: Option<Test>) -> String {
    let t = test.map_or("<test>".to_string(), |t| t.name().to_string());
    let lat = test.is_some_and(|t| t.is_latency());
    let bw = test.is_some_and(|t| !t.is_latency());
    let mut s = format!(
        "Usage:\n  {prog} {t} [options]             loopback (soft provider), or start a server (iwarp, rdma)\n  {prog} {t} [options] <server>    connect to the server (iwarp, rdma provider)\n\n"
    );
    if test.is_none() {
        s.push_str("Tests: send_lat write_lat read_lat send_bw write_bw read_bw rpc_lat rpc_bw\n");
        s.push_str("(a link named rpcrdma_<test> runs that test directly)\n\n");
    }
    s.push_str("perftest options:\n");
    s.push_str("  -a, --all                 Run sizes from 2 till 2^23\n");
    s.push_str(
        "  -s, --size=<size>         Size of message to exchange (default 2 latency, 65536 bw)\n",
    );
    s.push_str("  -n, --iters=<iters>       Number of exchanges (at least 5, default 1000; write_bw 5000)\n");
    s.push_str("  -D, --duration=<sec>      Run for this many seconds instead of -n (one size)\n");
    s.push_str("  -d, --ib-dev=<dev>        Device name (checked: soft, or an RDMA device owning the address)\n");
    s.push_str("  -i, --ib-port=<port>      IB port (accepted, shown)\n");
    s.push_str(
        "  -x, --gid-index=<index>   GID index (accepted, shown; rdma_cm resolves the GID)\n",
    );
    s.push_str("  -p, --port=<port>         Listen on / connect to port (default 18515)\n");
    s.push_str("  -m, --mtu=<mtu>           MTU 256..4096 (pcap packet size; default 4096)\n");
    s.push_str("  -I, --inline-size=<size>  Max size sent inline (default 236 send_lat, 220 write_lat, else 0)\n");
    if !lat {
        s.push_str("  -q, --qp=<num>            Number of QPs (bw tests, default 1)\n");
        s.push_str(
            "  -t, --tx-depth=<dep>      Outstanding sends per QP (default 128, at most -n)\n",
        );
        s.push_str(
            "  -Q, --cq-mod=<n>          One signaled send per n (default 100, at most -t)\n",
        );
        s.push_str("  -N, --noPeak              Do not compute the peak (automatic above 20000 iterations)\n");
        s.push_str("      --report_gbits        Report Gb/sec instead of MiB/sec\n");
    }
    if !bw || test.is_some_and(|t| t.is_send()) || test.is_none() {
        s.push_str(
            "  -r, --rx-depth=<dep>      Receives posted per QP (SEND tests, default 512)\n",
        );
    }
    s.push_str("  -F, --CPU-freq            Accepted and ignored (no cycle counter is used)\n");
    s.push_str(
        "  -R, --rdma_cm             Accepted and ignored (connections always use rdma_cm)\n",
    );
    s.push_str("      --out_json <file>     Also write the results as JSON (also --out_json_file=<file>)\n");
    s.push_str("  -h, --help                This text\n");
    s.push_str("  -V, --version             Version\n\n");
    s.push_str("rpcrdma-perf options:\n");
    s.push_str(
        "      --provider soft|iwarp|rdma  Verbs provider (default soft; iwarp: iWARP over TCP,\n",
    );
    s.push_str("                            two processes; rdma needs the `rdma` feature)\n");
    s.push_str(
        "      --loopback            Run server and client in this process (default with soft)\n",
    );
    s.push_str("      --bind <ip>           Local address to use (iwarp: any; rdma: its device's, default: found)\n");
    s.push_str("      --cores <a>[,<b>]     Pin the client to core a and the server to core b\n");
    s.push_str(
        "      --hugepages           Back buffers with 2 MiB hugepages (fallback with a warning)\n",
    );
    s.push_str(
        "      --pcap <file>         Write the soft provider's packets as RoCEv2 frames (pcap)\n",
    );
    s.push_str("      --hist-log <file>     Write an hdrhistogram V2 interval log (one interval per size)\n");
    s
}
