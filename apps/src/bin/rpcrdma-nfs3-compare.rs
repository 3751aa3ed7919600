//! `rpcrdma-nfs3-compare`: sends one sequence of NFSv3 calls to two servers over RPC-over-RDMA
//! (a reference, the Linux kernel nfsd, and a subject, rpcrdma-nfsd) and compares what their
//! replies carry (`rpcrdma_apps::nfs::v3::cachecheck`): the optional parts present, the weak cache
//! consistency data, times, file ids, fsid, link counts, handles, the READDIRPLUS entries.
//!
//! Normal operation: each server's export root comes from its MOUNT service (TCP); the calls
//! go as AUTH_SYS uid 0 (the exports must not squash root) into a fresh directory of each
//! export, removed at the end. Printed: one line per fact with both values, `DIFF` lines for the
//! facts the servers disagree on (`must` when the fact must match), and a last line
//! `compare: N facts, N differ, N must match`. Exit status 0 when every fact that must match
//! does, 1 otherwise, 2 on usage errors, 3 when a server could not be reached or a call of the
//! sequence failed.
//!
//! Recovery: every call has a deadline (`--timeout`); a failure ends the run with its reason.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use rpcrdma_apps::cli::{self, ArgCursor};
use rpcrdma_apps::nfs::mount;
use rpcrdma_apps::nfs::v3::cachecheck::{self, Fact};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_engine::verbs::rdma::{Rdma, RdmaDevice};
use rpcrdma_poller::{
    AuthSysCred, BackoffMode, Client, ClientOptions, Cores, Endpoint, EndpointConfig, PinPolicy,
    ReactorConfig, ReactorSet,
};

/// One server: its RPC-over-RDMA address, MOUNT address and export path.
#[derive(Debug, Clone)]
struct Server {
    nfs: Option<SocketAddr>,
    mount: Option<SocketAddr>,
    export: String,
}

#[derive(Debug, Clone)]
struct Args {
    bind: Option<IpAddr>,
    reference: Server,
    subject: Server,
    label: String,
    timeout: Duration,
}

const USAGE: &str = "usage: rpcrdma-nfs3-compare --bind IP --reference IP:PORT \
--reference-mount IP:PORT --reference-export PATH --subject IP:PORT --subject-mount IP:PORT \
--subject-export PATH [--label NAME] [--timeout SECONDS]
  --bind IP                  local address whose RDMA device calls both servers
  --reference IP:PORT        the reference server (RPC-over-RDMA), its MOUNT service
  --reference-mount IP:PORT  (TCP) and the export path
  --reference-export PATH
  --subject IP:PORT          the server compared with it, likewise
  --subject-mount IP:PORT
  --subject-export PATH
  --label NAME               the subject's name in the report [subject]
  --timeout SECONDS          per call, 1..=600 [20]
  -h, --help                 this text
  -V, --version              the program's version
";

/// The flags that take a value.
const VALUE_FLAGS: [&str; 9] = [
    "--bind",
    "--reference",
    "--reference-mount",
    "--reference-export",
    "--subject",
    "--subject-mount",
    "--subject-export",
    "--label",
    "--timeout",
];

fn parse(argv: &[String]) -> Result<Args, String> {
    let blank = Server {
        nfs: None,
        mount: None,
        export: String::new(),
    };
    let mut a = Args {
        bind: None,
        reference: blank.clone(),
        subject: blank,
        label: "subject".into(),
        timeout: Duration::from_secs(20),
    };
    let mut c = ArgCursor::new(argv);
    let addr = |c: &mut ArgCursor<'_>, n: &str| -> Result<Option<SocketAddr>, String> {
        let v = c.value(n)?;
        match v.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => Ok(Some(a)),
            Ok(_) => Err(format!("{n} {v}: the port must be in 1..=65535")),
            Err(_) => Err(format!("{n} {v}: must be IP:PORT")),
        }
    };
    while let Some(n) = c.next_name() {
        match n {
            "--bind" => a.bind = Some(c.ip(n)?),
            "--reference" => a.reference.nfs = addr(&mut c, n)?,
            "--reference-mount" => a.reference.mount = addr(&mut c, n)?,
            "--reference-export" => a.reference.export = c.value(n)?,
            "--subject" => a.subject.nfs = addr(&mut c, n)?,
            "--subject-mount" => a.subject.mount = addr(&mut c, n)?,
            "--subject-export" => a.subject.export = c.value(n)?,
            "--label" => a.label = c.value(n)?,
            "--timeout" => a.timeout = Duration::from_secs(c.num(n, 1, 600)?),
            _ => return Err(format!("unknown argument {}", c.token())),
        }
    }
    for s in [&a.reference, &a.subject] {
        if s.nfs.is_none() || s.mount.is_none() || s.export.is_empty() {
            return Err("both servers need an address, a MOUNT address and an export".into());
        }
    }
    Ok(a)
}

/// A connected NFSv3 client to `s` and the export's root handle.
fn connect(
    set: &ReactorSet,
    a: &Args,
    s: &Server,
) -> Result<(Endpoint<Rdma>, NfsClient, rpcrdma_apps::nfs::types::Fh), String> {
    let (Some(nfs), Some(m)) = (s.nfs, s.mount) else {
        return Err("no address".into());
    };
    let local = a.bind.unwrap_or(nfs.ip());
    let dev = RdmaDevice::open(local).map_err(|e| format!("no RDMA device owns {local}: {e}"))?;
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 2,
        max_credits: 16,
        buffers: 16,
        reply_buffers: 16,
        buffer_size: 64 * 1024,
        hugepages: false,
        ..EndpointConfig::default()
    };
    let ep = Endpoint::<Rdma>::with_backoff(set, dev, ecfg, BackoffMode::SharedCores)
        .map_err(|e| format!("endpoint: {e}"))?;
    let opts = ClientOptions {
        credits: 8,
        call_timeout_ms: a.timeout.as_millis().min(u128::from(u32::MAX)) as u64,
        max_retransmits: 0,
        max_reconnects: 0,
        reactor: Some(0),
        credential: Some(AuthSysCred::new(0, 0, &[])),
        ..ClientOptions::default()
    };
    let client = Client::connect(&ep, nfs, opts).map_err(|e| format!("connect {nfs}: {e}"))?;
    if !client.wait_connected(a.timeout) {
        return Err(format!("no connection to {nfs} within {:?}", a.timeout));
    }
    let root = match mount::mnt(m, &s.export) {
        Ok(Ok((fh, _))) => fh,
        Ok(Err(st)) => return Err(format!("MNT {} at {m}: status {st}", s.export)),
        Err(e) => return Err(format!("MNT {} at {m}: {e}", s.export)),
    };
    Ok((ep, NfsClient::new(client), root))
}

fn facts_of(set: &ReactorSet, a: &Args, s: &Server, what: &str) -> Result<Vec<Fact>, String> {
    let (_ep, c, root) = connect(set, a, s).map_err(|e| format!("{what}: {e}"))?;
    let r = cachecheck::run(&c, &root, &cachecheck::scratch_name());
    c.rpc().close();
    r.map_err(|e| format!("{what}: {e}"))
}

fn run(a: &Args) -> Result<bool, String> {
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    rc.name = "nfs3-compare".into();
    let mut set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
    let r = facts_of(&set, a, &a.reference, "reference")
        .and_then(|k| Ok((k, facts_of(&set, a, &a.subject, &a.label)?)));
    let _ = set.stop();
    let (k, o) = r?;
    for f in &k {
        let ov = o
            .iter()
            .find(|g| g.key == f.key)
            .map_or("-", |g| g.value.as_str());
        let m = if f.must_match { "must" } else { "may " };
        println!(
            "fact {m} {:<48} reference={:<8} {}={}",
            f.key, f.value, a.label, ov
        );
    }
    let diffs = cachecheck::differences(&k, &o);
    let must = diffs.iter().filter(|d| d.must_match).count();
    for d in &diffs {
        println!(
            "DIFF {} {}: reference={} {}={}",
            if d.must_match { "must" } else { "may " },
            d.key,
            d.reference,
            a.label,
            d.subject
        );
    }
    println!(
        "compare: {} facts, {} differ, {} must match ({})",
        k.len(),
        diffs.len(),
        must,
        a.label
    );
    Ok(must == 0)
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let prog = "rpcrdma-nfs3-compare";
    if let Some(code) = cli::start(prog, &argv, &|t| VALUE_FLAGS.contains(&t), USAGE) {
        return code;
    }
    let a = match parse(&argv) {
        Ok(a) => a,
        Err(e) => return cli::usage_error(prog, &e),
    };
    match run(&a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            println!("compare: failed: {e}");
            ExitCode::from(3)
        }
    }
}
