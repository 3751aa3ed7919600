//! `rpcrdma-nfsd`: an NFSv3 server over RPC-over-RDMA (RFC 8166 / RFC 8267) with MOUNT v3 over
//! TCP, for the Linux kernel NFS client (`mount -t nfs -o vers=3,proto=rdma`). docs/nfs-server.md.
//!
//! Normal operation: starts the daemon ([`rpcrdma_apps::nfs::daemon`]) on the RDMA device
//! that owns `--bind` (`--provider rdma`, the default) or on the user-space iWARP provider's
//! sockets (`--provider iwarp`: no RDMA device or kernel module), prints
//! `rpcrdma-nfsd: ready nfs=IP:PORT mount=IP:PORT backend=KIND nlm=IP:PORT`,
//! then waits: SIGUSR1 (or `--stats-interval`) prints the counters as `nfsd-stat NAME VALUE`
//! lines; SIGHUP reads the `--exports` file again and serves the new list without dropping a
//! connection (a file that does not parse is reported and the old list kept); SIGTERM or
//! SIGINT prints the counters, unregisters from rpcbind and exits 0.
//!
//! Recovery: a bad command line or a failure to start prints why and exits 2 or 1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rpcrdma_apps::cli;
use rpcrdma_apps::cli::{dispatch, AppProvider, Devices, ProviderJob, ProviderKind};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions, NFS_RDMA_PORT};
use rpcrdma_apps::nfs::exports::Exports;

static STOP: AtomicBool = AtomicBool::new(false);
static DUMP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

/// Where the handle key is kept unless `--handle-key` says otherwise.
const HANDLE_KEY: &str = "/var/lib/rpcrdma-nfsd/handle.key";
/// Where the NFSv4.1 client records are kept unless `--v4-state-dir` says otherwise.
const V4_STATE_DIR: &str = "/var/lib/rpcrdma-nfsd";

extern "C" fn on_hup(_: libc::c_int) {
    // Relaxed: as on_stop.
    RELOAD.store(true, Ordering::Relaxed);
}

extern "C" fn on_stop(_: libc::c_int) {
    // Relaxed: read by the main loop's polling load; only a flag crosses.
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_usr1(_: libc::c_int) {
    // Relaxed: as above.
    DUMP.store(true, Ordering::Relaxed);
}

fn install_signals() {
    let stop = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let usr1 = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let hup = on_hup as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handlers only store to atomics (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGTERM, stop);
        libc::signal(libc::SIGINT, stop);
        libc::signal(libc::SIGUSR1, usr1);
        libc::signal(libc::SIGHUP, hup);
    }
}

const USAGE: &str = "usage: rpcrdma-nfsd [options]
  --config FILE           read options from a TOML file: the long options' names as keys
                          (credits = 64, export = [\"/a:rw\"], no-mount = true); options
                          on the command line override the file's
  --provider rdma|iwarp   verbs provider (rdma: kernel verbs, needs --features rdma;
                          iwarp: iWARP over TCP, no RDMA device or kernel module) [rdma]
  --bind IP               address whose RDMA device serves (and MOUNT listens on) [0.0.0.0]
  --port P                NFS/RDMA port, 1..=65535 [20049]
  --mount-port P          MOUNT v3 TCP port, 0..=65535 [20048]; 0: any
  --no-mount              no MOUNT service
  --nlm-port P            lock manager (NLM v4) TCP port, 0..=65535, registered with
                          rpcbind: NFSv3 clients find it there [0: any]
  --no-nlm                no lock manager (clients mount with nolock)
  --nlm-grace S           lock manager: seconds after a restart in which only the locks
                          the clients held are taken again (their hosts kept in
                          --v4-state-dir and told with SM_NOTIFY), 1..=3600 [50]
  --exports FILE          export list in the /etc/exports syntax: PATH CLIENT(OPTIONS) ...
                          (clients: address, prefix a.b.c.d/n or *; options rw/ro,
                          root_squash/no_root_squash/all_squash, anonuid=, anongid=,
                          sec=sys:none); SIGHUP reloads it
  --export PATH[:OPTIONS] one export (repeatable): OPTIONS are options for * (rw,no_root_squash)
                          or a client list ('10.0.0.0/24(rw) *(ro)'); no OPTIONS: exports(5)
                          defaults (ro,root_squash,sec=sys)
                          [neither: /export:*(rw,root_squash,sec=sys)]
  --handle-key FILE       file keeping the key that authenticates file handles (created
                          mode 0600 when missing; 'none': a new key each start)
                          [/var/lib/rpcrdma-nfsd/handle.key]
  --backend memory|dir|dir:PATH  store: memory; dir: each export path is a host directory;
                          dir:PATH: PATH serves the one export [memory]
  --reactors N            reactor threads, 1..=256 [1]
  --workers N             worker threads of the dir backend, 1..=1024 [2]
  --pin                   pin reactors to cores
  --idle MODE             idle reactors: interrupt (sleep until a completion, a connection
                          event or a timer), shared_cores (sleep on a timer) or busy_poll
                          (spin) [interrupt]
  --idle-spins N          idle iterations a reactor spins before it yields, 0..=1000000
                          [the --idle mode's: 100]
  --idle-yields N         idle iterations a reactor yields before it sleeps, 0..=1000000
                          [the --idle mode's: 10]
  --reactor-nice N        nice value of the reactor threads, -20..=19, or 'inherit' (needs
                          CAP_SYS_NICE to raise; warns and keeps the process's otherwise)
                          [-10]
  --realtime-wakeups N    reactors and dir workers wait for work in SCHED_FIFO at priority
                          N (a completion preempts the core's other work at once) and
                          return to the fair class after 2 ms busy: for kernels that preempt
                          lazily (CONFIG_PREEMPT_LAZY); 1..=99 or 'off' (needs CAP_SYS_NICE;
                          warns and stays in the fair class otherwise) [off]
  --credits N             credits granted per connection, 1..=1024 [64]
  --srq N                 one shared receive queue of N receives per reactor for all
                          connections (grants shrink to what it backs), 0..=1048576
                          [0: per-connection receives]
  --max-io BYTES          rtmax / wtmax, a multiple of 4096 in 4096..=16777216 [1048576]
  --buffers N             registered buffers of max-io octets: READ DDP buffers and the
                          memory backend's registered blocks, 4..=1048576 [256]
  --memory-capacity BYTES memory backend capacity per export: file data, names, inodes,
                          at least 1048576 [1073741824]
  --memory-files N        memory backend files per export at most [1048576]
  --dir-cache N           dir backends: descriptors each export keeps open (the open-file
                          limit is raised toward what this needs), 16..=16777216 [8192]
  --drop-every N          drop the connection instead of answering every Nth
                          non-idempotent call (NFSv4.1: every Nth COMPOUND whose reply
                          a session slot caches) (fault injection) [0: never]
  --getattr-in-worker     dir backends: GETATTR always goes to a worker thread [off:
                          a GETATTR whose descriptor is open is answered on the reactor]
  --dir-calls WHERE       dir backends: reactor (a call whose caller has the daemon's own
                          identity, which needs no identity switch, is served on the
                          reactor; other callers' calls, and COMMIT and stable WRITEs
                          but on tmpfs, go to a worker) or workers (every call but such a
                          GETATTR) [reactor]
  --no-rpcbind            do not register with rpcbind
  --nfs4                  also serve NFSv4.1 and NFSv4.2 (program 100003 version 4) on
                          the same port [off]
  --v4-state-dir DIR      NFSv4.1: directory keeping the clients that may reclaim their
                          state after a restart (grace period, RFC 8881 section 8.4.2),
                          and the lock manager's hosts (told with SM_NOTIFY after a
                          restart); created mode 0700 when missing; 'none': no records,
                          no grace period [/var/lib/rpcrdma-nfsd]
  --v4-write-delegations  NFSv4.1: grant write delegations to a write OPEN of a file no
                          other client has open (recalled on another client's OPEN, or
                          its GETATTR of the size or change attribute) [off]
  --v4-no-delegations     NFSv4.1: grant no delegation at all, for exports that other
                          servers change: their changes recall none, so a client would
                          keep serving its cached data (this host's processes recall them
                          on a dir: export, through fanotify) [off]
  --no-hugepages          do not back pools with hugepages
  --stats-interval S      print the counters every S seconds, 0..=86400
                          [0: on SIGUSR1 and at exit]
  --metrics ADDR:PORT     serve Prometheus metrics on this TCP address (GET /metrics;
                          read them with rpcrdma-stat) [off]
  -h, --help              this text
  -V, --version           the program's version
";

/// The options that take a value (also the config file's keys with a string or number).
const VALUE_OPTIONS: [&str; 28] = [
    "provider",
    "bind",
    "port",
    "mount-port",
    "nlm-port",
    "nlm-grace",
    "export",
    "exports",
    "handle-key",
    "backend",
    "reactors",
    "workers",
    "idle",
    "idle-spins",
    "idle-yields",
    "reactor-nice",
    "realtime-wakeups",
    "credits",
    "srq",
    "max-io",
    "buffers",
    "memory-capacity",
    "memory-files",
    "dir-cache",
    "dir-calls",
    "drop-every",
    "stats-interval",
    "v4-state-dir",
];

/// The options that take no value (the config file's keys with `true` / `false`).
const FLAG_OPTIONS: [&str; 9] = [
    "no-mount",
    "no-nlm",
    "pin",
    "no-rpcbind",
    "no-hugepages",
    "nfs4",
    "getattr-in-worker",
    "v4-write-delegations",
    "v4-no-delegations",
];

struct Cli {
    provider: ProviderKind,
    opts: DaemonOptions,
    stats_interval: u64,
    /// The `--exports` file, read again on SIGHUP.
    exports_file: Option<PathBuf>,
}

/// The export list in `path`.
fn read_exports(path: &std::path::Path) -> Result<Exports, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Exports::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A number in `lo..=hi` (the message names the option and the range).
fn num<T: TryFrom<u64>>(flag: &str, v: &str, lo: u64, hi: u64) -> Result<T, String> {
    let n = cli::num(flag, v, lo, hi)?;
    T::try_from(n).map_err(|_| format!("{flag} {v}: must be a number in {lo}..={hi}"))
}

/// `None` for `word`, else a number in `range`; an error names the option, the range and the
/// word.
fn word_or_in<T>(
    flag: &str,
    v: &str,
    word: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<Option<T>, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    if v == word {
        return Ok(None);
    }
    match v.trim().parse::<T>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{flag} {v}: {}..={} or {word}",
            range.start(),
            range.end()
        )),
    }
}

/// The arguments a config file stands for, as `--key value` / `--flag` tokens; unknown keys,
/// and values of the wrong kind, are refused.
fn config_args(path: &std::path::Path) -> Result<Vec<(String, Vec<String>)>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {shown}: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("--config {shown}: {}", e.message()))?;
    let mut out = Vec::new();
    for (k, v) in table {
        let bad = |what: &str| format!("--config {shown}: key {k}: {what}");
        let flag = format!("--{k}");
        let tokens = if FLAG_OPTIONS.contains(&k.as_str()) {
            match v {
                toml::Value::Boolean(true) => vec![flag],
                toml::Value::Boolean(false) => vec![],
                _ => return Err(bad("must be true or false")),
            }
        } else if VALUE_OPTIONS.contains(&k.as_str()) {
            let one = |v: &toml::Value| match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(n) => Ok(n.to_string()),
                _ => Err(bad("must be a string or a number")),
            };
            match (&v, k.as_str()) {
                (toml::Value::Array(list), "export") => {
                    let mut t = Vec::new();
                    for e in list {
                        t.push(flag.clone());
                        t.push(one(e)?);
                    }
                    t
                }
                _ => vec![flag, one(&v)?],
            }
        } else {
            return Err(bad("unknown (the keys are the long options' names)"));
        };
        out.push((k, tokens));
    }
    Ok(out)
}

/// The command line with `--config FILE` replaced by the file's options, which come first so
/// that the command line's own options override them (an option given on the command line
/// drops the file's; `--export` and `--exports` count as one).
fn with_config(argv: &[String]) -> Result<Vec<String>, String> {
    let mut rest = Vec::new();
    let mut file = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            file = Some(it.next().ok_or("--config needs a file")?.clone());
        } else if let Some(f) = a.strip_prefix("--config=") {
            file = Some(f.to_string());
        } else {
            rest.push(a.clone());
        }
    }
    let Some(file) = file else {
        return Ok(rest);
    };
    let given = |k: &str| {
        rest.iter().any(|a| {
            let name = a.split('=').next().unwrap_or(a);
            name.strip_prefix("--")
                .is_some_and(|n| n == k || (k.starts_with("export") && n.starts_with("export")))
        })
    };
    let mut out = Vec::new();
    for (k, tokens) in config_args(std::path::Path::new(&file))? {
        if !given(&k) {
            out.extend(tokens);
        }
    }
    out.extend(rest);
    Ok(out)
}

fn parse(argv: &[String]) -> Result<Cli, String> {
    let mut o = DaemonOptions::default();
    let mut provider = ProviderKind::Rdma;
    let mut bind = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let (mut port, mut mport, mut mount) = (NFS_RDMA_PORT, 20048u16, true);
    let (mut nlm_port, mut nlm) = (0u16, true);
    let mut stats_interval = 0;
    let (mut specs, mut exports_file) = (Exports::default(), None);
    let mut handle_key = Some(PathBuf::from(HANDLE_KEY));
    let mut v4_state_dir = Some(PathBuf::from(V4_STATE_DIR));
    let mut c = cli::ArgCursor::new(argv);
    while let Some(a) = c.next_name() {
        match a {
            "--provider" => provider = ProviderKind::parse(a, &c.value(a)?)?,
            "--bind" => bind = c.ip(a)?,
            "--port" => port = cli::port(a, &c.value(a)?)?,
            "--mount-port" => mport = num(a, &c.value(a)?, 0, 65535)?,
            "--no-mount" => mount = false,
            "--nlm-port" => nlm_port = num(a, &c.value(a)?, 0, 65535)?,
            "--no-nlm" => nlm = false,
            "--nlm-grace" => o.nlm_grace = Duration::from_secs(num(a, &c.value(a)?, 1, 3600)?),
            "--export" => {
                let v = c.value(a)?;
                specs
                    .add_spec(&v)
                    .map_err(|e| format!("--export {v:?}: {e}"))?;
            }
            "--exports" => {
                let f = PathBuf::from(c.value(a)?);
                cli::check_in_file(a, &f)?;
                exports_file = Some(f);
            }
            "--handle-key" => {
                let v = c.value(a)?;
                handle_key = (v != "none").then(|| PathBuf::from(v));
            }
            "--backend" => o.backend = c.value(a)?.parse()?,
            "--reactors" => o.reactors = num(a, &c.value(a)?, 1, 256)?,
            "--workers" => o.workers = num(a, &c.value(a)?, 1, 1024)?,
            "--pin" => o.pin = true,
            "--idle" => o.idle = c.value(a)?.parse().map_err(|e| format!("--idle {e}"))?,
            "--idle-spins" => o.idle_spins = Some(num(a, &c.value(a)?, 0, 1_000_000)?),
            "--idle-yields" => o.idle_yields = Some(num(a, &c.value(a)?, 0, 1_000_000)?),
            "--reactor-nice" => {
                o.reactor_nice = word_or_in(a, &c.value(a)?, "inherit", -20..=19)?;
            }
            "--realtime-wakeups" => {
                o.realtime_wakeups = word_or_in(a, &c.value(a)?, "off", 1..=99)?;
            }
            "--credits" => o.credits = num(a, &c.value(a)?, 1, 1024)?,
            "--srq" => {
                let n: u32 = num(a, &c.value(a)?, 0, 1 << 20)?;
                o.srq = (n > 0).then_some(n);
            }
            "--max-io" => o.max_io = num(a, &c.value(a)?, 4096, 1 << 24)?,
            "--buffers" => o.buffers = num(a, &c.value(a)?, 4, 1 << 20)?,
            "--memory-capacity" => o.memory_capacity = num(a, &c.value(a)?, 1 << 20, u64::MAX)?,
            "--memory-files" => o.memory_files = num(a, &c.value(a)?, 1, u64::MAX)?,
            "--dir-cache" => o.dir_cache = num(a, &c.value(a)?, 16, 1 << 24)?,
            "--drop-every" => o.drop_every = num(a, &c.value(a)?, 0, u64::MAX)?,
            "--no-rpcbind" => o.rpcbind = false,
            "--getattr-in-worker" => o.getattr_on_reactor = false,
            "--dir-calls" => {
                o.dir_calls_on_reactor = match c.value(a)?.as_str() {
                    "reactor" => true,
                    "workers" => false,
                    v => return Err(format!("--dir-calls {v}: reactor or workers")),
                }
            }
            "--no-hugepages" => o.hugepages = false,
            "--nfs4" => o.nfs4 = true,
            "--v4-write-delegations" => o.v4_write_delegations = true,
            "--v4-no-delegations" => o.v4_no_delegations = true,
            "--v4-state-dir" => {
                let v = c.value(a)?;
                v4_state_dir = (v != "none").then(|| PathBuf::from(v));
            }
            "--stats-interval" => stats_interval = num(a, &c.value(a)?, 0, 86_400)?,
            "--metrics" => {
                let v = c.value(a)?;
                let m = v
                    .parse()
                    .map_err(|_| format!("--metrics {v:?}: must be ADDRESS:PORT"))?;
                o.metrics = Some(m);
            }
            _ => return Err(format!("unknown argument {:?}", c.token())),
        }
    }
    if provider.in_process() {
        return Err(format!(
            "--provider {}: the server needs a provider that reaches other processes (rdma, \
             iwarp); the software provider serves only in-process (apps/tests/nfsd_smoke.rs)",
            provider.name()
        ));
    }
    o.exports = match (&exports_file, specs.is_empty()) {
        (Some(_), false) => return Err("--exports and --export exclude each other".into()),
        (Some(f), true) => read_exports(f)?,
        (None, false) => specs,
        (None, true) => o.exports,
    };
    o.handle_key = handle_key;
    o.v4_state_dir = v4_state_dir;
    if let Some(why) = o.check() {
        return Err(why);
    }
    o.nfs = SocketAddr::new(bind, port);
    o.mount = mount.then_some(SocketAddr::new(bind, mport));
    o.nlm = nlm.then_some(SocketAddr::new(bind, nlm_port));
    Ok(Cli {
        provider,
        opts: o,
        stats_interval,
        exports_file,
    })
}

/// `--config` expanded and parsed, or the exit status of help, version or a usage error.
fn command_line() -> Result<Cli, ExitCode> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let takes = |t: &str| {
        t == "--config"
            || t.strip_prefix("--")
                .is_some_and(|n| VALUE_OPTIONS.contains(&n) || n == "metrics")
    };
    let prog = "rpcrdma-nfsd";
    if let Some(code) = cli::start(prog, &argv, &takes, USAGE) {
        return Err(code);
    }
    with_config(&argv)
        .and_then(|a| parse(&a))
        .and_then(|c| check_handle_key(c.opts.handle_key.as_deref()).map(|()| c))
        .map_err(|e| cli::usage_error(prog, &e))
}

/// The handle key file, before the device is opened: one that exists must load (mode 0600, 16
/// octets); a missing one must be creatable (its nearest existing directory writable). Nothing
/// is created here.
fn check_handle_key(path: Option<&std::path::Path>) -> Result<(), String> {
    let Some(p) = path else {
        return Ok(());
    };
    if p.exists() {
        return rpcrdma_apps::nfs::handle_mac::HandleKey::load_or_create(p)
            .map(|_| ())
            .map_err(|e| format!("--handle-key {}: {e}", p.display()));
    }
    let mut dir = p.parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        dir = d.parent();
    }
    let probe = dir
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .join("handle.key");
    cli::check_out_file("--handle-key", &probe)
        .map_err(|_| format!("--handle-key {}: cannot be created", p.display()))
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("info");
    let cli = match command_line() {
        Ok(c) => c,
        Err(code) => return code,
    };
    if cli.provider == ProviderKind::Rdma && !cfg!(feature = "rdma") {
        eprintln!(
            "rpcrdma-nfsd: built without the rdma provider: cargo build --release -p \
             rpcrdma-apps --features rdma --bin rpcrdma-nfsd (or serve with --provider iwarp)"
        );
        return ExitCode::FAILURE;
    }
    install_signals();
    let run = dispatch(cli.provider, None, "rpcrdma-nfsd", Serve(&cli)).and_then(|r| r);
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma-nfsd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon on the provider `--provider` chose, until SIGTERM or SIGINT.
struct Serve<'a>(&'a Cli);

impl ProviderJob for Serve<'_> {
    type Output = Result<(), String>;

    fn run<P: AppProvider>(self, devices: &Devices<'_>) -> Self::Output {
        let ip = self.0.opts.nfs.ip();
        let dev = devices
            .open::<P>(ip, None)
            .map_err(|e| format!("opening the {} device of {ip}: {e}", P::NAME))?;
        let mut d = rpcrdma_apps::nfs::daemon::Daemon::<P>::start(dev, &self.0.opts)?;
        serve(self.0, &mut d)
    }
}

/// SIGHUP: the `--exports` file again.
fn reload<P: rpcrdma_engine::verbs::Provider>(cli: &Cli, d: &rpcrdma_apps::nfs::daemon::Daemon<P>) {
    let Some(f) = &cli.exports_file else {
        println!("rpcrdma-nfsd: SIGHUP: no --exports file to reload");
        return;
    };
    match read_exports(f).and_then(|e| d.reload(&e).map(|()| e.list().len())) {
        Ok(n) => println!("rpcrdma-nfsd: reloaded {} ({n} exports)", f.display()),
        Err(e) => eprintln!("rpcrdma-nfsd: reload refused, old export list kept: {e}"),
    }
}

fn serve<P: rpcrdma_engine::verbs::Provider>(
    cli: &Cli,
    d: &mut rpcrdma_apps::nfs::daemon::Daemon<P>,
) -> Result<(), String> {
    let mount = d
        .mount_addr()
        .map_or_else(|| "none".to_string(), |a| a.to_string());
    let nlm = d
        .nlm_addr()
        .map_or_else(|| "none".to_string(), |a| a.to_string());
    let kind = match &cli.opts.backend {
        Backend::Memory => "memory".to_string(),
        Backend::Dir(p) => format!("dir:{}", p.display()),
        Backend::Dirs => "dir".to_string(),
    };
    for e in cli.opts.exports.list() {
        println!(
            "rpcrdma-nfsd: export {} {}",
            e.path,
            e.group_names().join(" ")
        );
    }
    if let Some(m) = d.metrics_addr() {
        println!("rpcrdma-nfsd: metrics on http://{m}/metrics");
    }
    println!(
        "rpcrdma-nfsd: ready nfs={} mount={mount} backend={kind} nlm={nlm}",
        d.nfs_addr()
    );
    let mut last = Instant::now();
    // Relaxed: flags set by the signal handlers (see there).
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        let due =
            cli.stats_interval > 0 && last.elapsed() >= Duration::from_secs(cli.stats_interval);
        if RELOAD.swap(false, Ordering::Relaxed) {
            reload(cli, d);
        }
        if DUMP.swap(false, Ordering::Relaxed) || due {
            last = Instant::now();
            print!("{}", d.counters_text());
        }
    }
    print!("{}", d.counters_text());
    d.stop();
    println!("rpcrdma-nfsd: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_poller::BackoffMode;

    fn args(a: &str) -> Result<Cli, String> {
        let v: Vec<String> = a.split_whitespace().map(String::from).collect();
        with_config(&v).and_then(|v| parse(&v))
    }

    #[test]
    fn accepts_the_defaults_and_one_line_exports() {
        let c = args("").expect("defaults");
        assert_eq!(c.opts.exports.list()[0].path, "/export");
        assert_eq!(c.provider, ProviderKind::Rdma);
        let c = args("--provider iwarp").expect("iwarp");
        assert_eq!(c.provider, ProviderKind::Iwarp);
        let c = args("--export /a:rw --export /b:10.0.0.0/8(ro) --handle-key none").expect("two");
        assert_eq!(c.opts.exports.list().len(), 2);
        assert!(c.opts.handle_key.is_none());
        let d = args("").expect("defaults").opts;
        assert_eq!(d.v4_state_dir, Some(PathBuf::from(V4_STATE_DIR)));
        assert!(!d.v4_write_delegations);
        let v = args("--nfs4 --v4-state-dir none --v4-write-delegations").expect("v4");
        assert!(v.opts.v4_state_dir.is_none() && v.opts.v4_write_delegations);
        assert!(!d.v4_no_delegations);
        assert!(
            args("--v4-no-delegations")
                .expect("none")
                .opts
                .v4_no_delegations
        );
        let v = args("--v4-state-dir /srv/state").expect("a state dir");
        assert_eq!(v.opts.v4_state_dir, Some(PathBuf::from("/srv/state")));
        assert_eq!(
            c.opts.idle,
            BackoffMode::Interrupt,
            "idle reactors sleep on descriptors"
        );
        for (v, m) in [
            ("busy", BackoffMode::BusyPoll),
            ("shared_cores", BackoffMode::SharedCores),
            ("interrupt", BackoffMode::Interrupt),
        ] {
            assert_eq!(args(&format!("--idle {v}")).expect(v).opts.idle, m);
        }
        assert_eq!(d.reactor_nice, Some(-10), "reactors raised by default");
        assert_eq!(d.realtime_wakeups, None, "the fair class by default");
        let v = args("--realtime-wakeups 1").expect("1").opts;
        assert_eq!(v.realtime_wakeups, Some(1));
        let v = args("--realtime-wakeups off").expect("off").opts;
        assert_eq!(v.realtime_wakeups, None);
        let v = args("--realtime-wakeups 50").expect("50").opts;
        assert_eq!(v.realtime_wakeups, Some(50));
        assert_eq!(
            (d.idle_spins, d.idle_yields),
            (None, None),
            "the mode's own idle phases by default"
        );
        let v = args("--reactor-nice inherit --idle-yields 0")
            .expect("inherit")
            .opts;
        assert_eq!(
            (v.reactor_nice, v.idle_spins, v.idle_yields),
            (None, None, Some(0))
        );
        let v = args("--reactor-nice -5 --idle-spins 7 --idle-yields 3").expect("phases");
        assert_eq!(
            (v.opts.reactor_nice, v.opts.idle_spins, v.opts.idle_yields),
            (Some(-5), Some(7), Some(3))
        );
    }

    #[test]
    fn rejects_values_that_cannot_serve_naming_the_option() {
        for (a, needle) in [
            ("--credits 0", "--credits 0"),
            ("--credits 5000", "--credits 5000"),
            ("--max-io 7", "--max-io 7"),
            ("--max-io 5000", "multiple of 4096"),
            ("--buffers 0", "--buffers 0"),
            ("--workers 0", "--workers 0"),
            ("--idle sometimes", "--idle must be"),
            ("--idle", "--idle needs"),
            ("--reactor-nice -21", "-20..=19 or inherit"),
            ("--reactor-nice 20", "-20..=19 or inherit"),
            ("--reactor-nice high", "-20..=19 or inherit"),
            ("--realtime-wakeups 0", "1..=99 or off"),
            ("--realtime-wakeups 100", "1..=99 or off"),
            ("--realtime-wakeups on", "1..=99 or off"),
            ("--idle-spins -1", "--idle-spins -1"),
            ("--idle-yields 2000000", "0..=1000000"),
            (
                "--port 70000",
                "--port 70000: must be a number in 1..=65535",
            ),
            ("--credits 0", "1..=1024"),
            ("--provider soft", "nfsd_smoke"),
            ("--provider bogus", "soft, iwarp or rdma"),
            ("--export relative", "absolute"),
            ("--export /a:*(bogus)", "unknown export option"),
            ("--exports /nonexistent/exports", "/nonexistent/exports"),
            ("--backend dir:/nonexistent/dir", "not a directory"),
            (
                "--backend dir:/tmp --export /a:rw --export /b:rw",
                "one export",
            ),
        ] {
            let e = args(a).err().unwrap_or_else(|| panic!("{a} accepted"));
            assert!(e.contains(needle), "{a}: {e}");
        }
        let f = std::env::temp_dir().join(format!("rpcrdma-nfsd-args-{}", std::process::id()));
        std::fs::write(&f, "/x *(rw)").unwrap();
        let both = format!("--exports {} --export /y:rw", f.display());
        assert!(args(&both).err().unwrap_or_default().contains("exclude"));
        let _ = std::fs::remove_file(f);
    }

    fn config(name: &str, text: &str) -> PathBuf {
        let f =
            std::env::temp_dir().join(format!("rpcrdma-nfsd-{name}-{}.toml", std::process::id()));
        std::fs::write(&f, text).unwrap();
        f
    }

    #[test]
    fn accepts_a_config_file_that_the_command_line_overrides() {
        let f = config(
            "ok",
            "credits = 16\nport = 20050\nexport = [\"/a:rw\", \"/b:ro\"]\nno-mount = true\n\
             pin = false\nidle = \"busy_poll\"\n",
        );
        let c = args(&format!("--config {}", f.display())).expect("config");
        assert_eq!(c.opts.credits, 16);
        assert_eq!(c.opts.nfs.port(), 20050);
        assert_eq!(c.opts.exports.list().len(), 2);
        assert!(c.opts.mount.is_none() && !c.opts.pin);
        assert_eq!(c.opts.idle, BackoffMode::BusyPoll);
        let c = args(&format!(
            "--credits 8 --config {} --export /c:rw",
            f.display()
        ))
        .unwrap();
        assert_eq!(c.opts.credits, 8, "the command line overrides the file");
        assert_eq!(
            c.opts.exports.list().len(),
            1,
            "--export replaces the file's list"
        );
        let _ = std::fs::remove_file(f);
    }

    #[test]
    fn accepts_the_example_config_file() {
        let f = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/systemd/rpcrdma-nfsd.toml"
        );
        let keys = config_args(std::path::Path::new(f)).expect("the example parses");
        assert!(keys.iter().any(|(k, _)| k == "export"));
        // Its values are the options' own (the export directory need not exist here).
        let c = args(&format!("--config {f} --backend memory")).expect("example");
        assert_eq!(c.opts.credits, 64);
        assert_eq!(c.opts.exports.list()[0].path, "/srv/nfs");
    }

    #[test]
    fn rejects_bad_config_files() {
        for (name, text, needle) in [
            (
                "zero",
                "credits = 0\n",
                "--credits 0: must be a number in 1..=1024",
            ),
            ("unknown", "credit = 4\n", "key credit: unknown"),
            ("kind", "pin = 1\n", "key pin: must be true or false"),
            (
                "value",
                "credits = true\n",
                "key credits: must be a string or a number",
            ),
            ("syntax", "credits = \n", "--config"),
            ("nested", "config = \"x\"\n", "key config: unknown"),
        ] {
            let f = config(name, text);
            let e = args(&format!("--config {}", f.display()))
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(e.contains(needle), "{name}: {e}");
            let _ = std::fs::remove_file(f);
        }
        let e = args("--config /nonexistent/nfsd.toml").err().unwrap();
        assert!(e.contains("/nonexistent/nfsd.toml"), "{e}");
    }

    #[test]
    fn accepts_every_option_name_as_a_config_key() {
        // The key lists and the parser agree: no listed key is an unknown argument.
        for k in VALUE_OPTIONS {
            let e = parse(&[format!("--{k}"), "x".into()])
                .err()
                .unwrap_or_default();
            assert!(!e.contains("unknown argument"), "{k}: {e}");
        }
        for k in FLAG_OPTIONS {
            let e = parse(&[format!("--{k}")]).err().unwrap_or_default();
            assert!(!e.contains("unknown argument"), "{k}: {e}");
        }
    }
}
