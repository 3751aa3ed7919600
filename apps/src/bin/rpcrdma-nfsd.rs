//! `rpcrdma-nfsd`: an NFSv3 server over RPC-over-RDMA (RFC 8166 / RFC 8267) with MOUNT v3 over
//! TCP, for the Linux kernel NFS client (`mount -t nfs -o vers=3,proto=rdma`). docs/nfs-server.md.
//!
//! Normal operation: starts the daemon ([`rpcrdma_apps::nfs3::daemon`]) on the RDMA device
//! that owns `--bind`, prints `rpcrdma-nfsd: ready nfs=IP:PORT mount=IP:PORT backend=KIND`,
//! then waits: SIGUSR1 (or `--stats-interval`) prints the counters as `nfsd-stat NAME VALUE`
//! lines; SIGHUP reads the `--exports` file again and serves the new list without dropping a
//! connection (a file that does not parse is reported and the old list kept); SIGTERM or
//! SIGINT prints the counters, unregisters from rpcbind and exits 0.
//!
//! Recovery: a bad command line or a failure to start prints why and exits 2 or 1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs3::daemon::{Backend, DaemonOptions, NFS_RDMA_PORT};
use rpcrdma_apps::nfs3::exports::Exports;

static STOP: AtomicBool = AtomicBool::new(false);
static DUMP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

/// Where the handle key is kept unless `--handle-key` says otherwise.
const HANDLE_KEY: &str = "/var/lib/rpcrdma-nfsd/handle.key";

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
  --provider rdma         verbs provider (rdma: kernel verbs; needs --features rdma)
  --bind IP               address whose RDMA device serves (and MOUNT listens on) [0.0.0.0]
  --port P                NFS/RDMA port [20049]
  --mount-port P          MOUNT v3 TCP port [20048]; 0: any
  --no-mount              no MOUNT service
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
  --reactors N            reactor threads [1]
  --workers N             worker threads of the dir backend [2]
  --pin                   pin reactors to cores
  --idle MODE             idle reactors: interrupt (sleep until a completion, a connection
                          event or a timer), shared_cores (sleep on a timer) or busy_poll
                          (spin) [interrupt]
  --credits N             credits granted per connection [64]
  --srq N                 one shared receive queue of N receives per reactor for all
                          connections (grants shrink to what it backs) [0: per-connection
                          receives]
  --max-io BYTES          rtmax / wtmax [1048576]
  --buffers N             registered buffers of max-io octets: READ DDP buffers and the
                          memory backend's registered blocks [256]
  --memory-capacity BYTES memory backend capacity per export: file data, names, inodes
                          [1073741824]
  --memory-files N        memory backend files per export at most [1048576]
  --dir-cache N           dir backends: descriptors each export keeps open (the open-file
                          limit is raised toward what this needs) [8192]
  --drop-every N          drop the connection instead of answering every Nth
                          non-idempotent call (fault injection) [0: never]
  --no-rpcbind            do not register with rpcbind
  --no-hugepages          do not back pools with hugepages
  --stats-interval S      print the counters every S seconds [0: on SIGUSR1 and at exit]
  --metrics ADDR:PORT     serve Prometheus metrics on this TCP address (GET /metrics;
                          read them with rpcrdma-stat) [off]";

struct Cli {
    provider: String,
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

fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse().map_err(|_| {
        format!(
            "{flag} {v:?}: not a number of the range this option takes ({})",
            std::any::type_name::<T>()
        )
    })
}

fn parse(args: impl Iterator<Item = String>) -> Result<Cli, String> {
    let mut o = DaemonOptions::default();
    let mut provider = "rdma".to_string();
    let mut bind = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let (mut port, mut mport, mut mount) = (NFS_RDMA_PORT, 20048u16, true);
    let mut stats_interval = 0;
    let (mut specs, mut exports_file) = (Exports::default(), None);
    let mut handle_key = Some(PathBuf::from(HANDLE_KEY));
    let mut it = args;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--provider" => provider = it.next().ok_or("--provider needs a value")?,
            "--bind" => {
                let v = it.next().ok_or("--bind needs an address")?;
                bind = v
                    .parse()
                    .map_err(|_| format!("--bind: bad address {v:?}"))?;
            }
            "--port" => port = num(&a, it.next())?,
            "--mount-port" => mport = num(&a, it.next())?,
            "--no-mount" => mount = false,
            "--export" => {
                let v = it.next().ok_or("--export needs PATH[:OPTIONS]")?;
                specs
                    .add_spec(&v)
                    .map_err(|e| format!("--export {v:?}: {e}"))?;
            }
            "--exports" => {
                exports_file = Some(PathBuf::from(it.next().ok_or("--exports needs a file")?))
            }
            "--handle-key" => {
                let v = it.next().ok_or("--handle-key needs a file or 'none'")?;
                handle_key = (v != "none").then(|| PathBuf::from(v));
            }
            "--backend" => o.backend = it.next().ok_or("--backend needs a value")?.parse()?,
            "--reactors" => o.reactors = num(&a, it.next())?,
            "--workers" => o.workers = num(&a, it.next())?,
            "--pin" => o.pin = true,
            "--idle" => {
                let v = it.next().ok_or("--idle needs a mode")?;
                o.idle = v.parse().map_err(|e| format!("--idle {e}"))?;
            }
            "--credits" => o.credits = num(&a, it.next())?,
            "--srq" => {
                let n: u32 = num(&a, it.next())?;
                o.srq = (n > 0).then_some(n);
            }
            "--max-io" => o.max_io = num(&a, it.next())?,
            "--buffers" => o.buffers = num(&a, it.next())?,
            "--memory-capacity" => o.memory_capacity = num(&a, it.next())?,
            "--memory-files" => o.memory_files = num(&a, it.next())?,
            "--dir-cache" => o.dir_cache = num(&a, it.next())?,
            "--drop-every" => o.drop_every = num(&a, it.next())?,
            "--no-rpcbind" => o.rpcbind = false,
            "--no-hugepages" => o.hugepages = false,
            "--stats-interval" => stats_interval = num(&a, it.next())?,
            "--metrics" => {
                let v = it.next().ok_or("--metrics needs an address")?;
                let m = v
                    .parse()
                    .map_err(|_| format!("--metrics: bad address {v:?}"))?;
                o.metrics = Some(m);
            }
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    o.exports = match (&exports_file, specs.is_empty()) {
        (Some(_), false) => return Err("--exports and --export exclude each other".into()),
        (Some(f), true) => read_exports(f)?,
        (None, false) => specs,
        (None, true) => o.exports,
    };
    o.handle_key = handle_key;
    if let Some(why) = o.check() {
        return Err(why);
    }
    o.nfs = SocketAddr::new(bind, port);
    o.mount = mount.then_some(SocketAddr::new(bind, mport));
    Ok(Cli {
        provider,
        opts: o,
        stats_interval,
        exports_file,
    })
}

fn main() {
    rpcrdma_apps::logging::init("info");
    let cli = match parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rpcrdma-nfsd: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    install_signals();
    let r = match cli.provider.as_str() {
        "rdma" => run_rdma(&cli),
        p => Err(format!(
            "--provider {p}: the server needs real RDMA (rdma); the software provider is \
             in-process only (cargo test -p rpcrdma-apps --test nfsd)"
        )),
    };
    if let Err(e) = r {
        eprintln!("rpcrdma-nfsd: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "rdma")]
fn run_rdma(cli: &Cli) -> Result<(), String> {
    use rpcrdma_engine::verbs::rdma::Rdma;
    let dev = rpcrdma_apps::perf::rdma_dev::open(cli.opts.nfs.ip(), None, None)
        .map_err(|e| format!("opening the RDMA device of {}: {e}", cli.opts.nfs.ip()))?;
    let mut d = rpcrdma_apps::nfs3::daemon::Daemon::<Rdma>::start(dev, &cli.opts)?;
    serve(cli, &mut d)
}

#[cfg(not(feature = "rdma"))]
fn run_rdma(_: &Cli) -> Result<(), String> {
    Err(
        "built without the rdma provider: cargo build --release -p rpcrdma-apps --features \
         rdma --bin rpcrdma-nfsd"
            .into(),
    )
}

/// SIGHUP: the `--exports` file again.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
fn reload<P: rpcrdma_engine::verbs::Provider>(
    cli: &Cli,
    d: &rpcrdma_apps::nfs3::daemon::Daemon<P>,
) {
    let Some(f) = &cli.exports_file else {
        println!("rpcrdma-nfsd: SIGHUP: no --exports file to reload");
        return;
    };
    match read_exports(f).and_then(|e| d.reload(&e).map(|()| e.list().len())) {
        Ok(n) => println!("rpcrdma-nfsd: reloaded {} ({n} exports)", f.display()),
        Err(e) => eprintln!("rpcrdma-nfsd: reload refused, old export list kept: {e}"),
    }
}

#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
fn serve<P: rpcrdma_engine::verbs::Provider>(
    cli: &Cli,
    d: &mut rpcrdma_apps::nfs3::daemon::Daemon<P>,
) -> Result<(), String> {
    let mount = d
        .mount_addr()
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
        "rpcrdma-nfsd: ready nfs={} mount={mount} backend={kind}",
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
        parse(a.split_whitespace().map(String::from))
    }

    #[test]
    fn accepts_the_defaults_and_one_line_exports() {
        let c = args("").expect("defaults");
        assert_eq!(c.opts.exports.list()[0].path, "/export");
        let c = args("--export /a:rw --export /b:10.0.0.0/8(ro) --handle-key none").expect("two");
        assert_eq!(c.opts.exports.list().len(), 2);
        assert!(c.opts.handle_key.is_none());
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
            ("--port 70000", "--port \"70000\""),
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
}
