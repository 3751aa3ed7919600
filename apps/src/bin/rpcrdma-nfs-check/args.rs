//! Command-line arguments of `rpcrdma-nfs-check` ([`Args`], [`parse`], [`usage`]).
//!
//! Normal operation: flags are parsed into [`Args`]; `--help` yields `None`. Recovery: an
//! unknown flag, a missing value or a number out of range is an error message (exit status 2).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use rpcrdma_apps::cli::{ArgCursor, ProviderKind};

use super::{BIG_BUF, PARTS};

#[derive(Debug, Clone)]
pub(super) struct Args {
    pub(super) server: Option<String>,
    pub(super) port: u16,
    pub(super) dir: String,
    pub(super) size: u64,
    pub(super) seed: u64,
    pub(super) entries: u32,
    pub(super) bind: Option<IpAddr>,
    pub(super) timeout: Duration,
    pub(super) grace_wait: Duration,
    pub(super) setup: Option<PathBuf>,
    pub(super) probe: bool,
    /// The test tree as seen locally on the server (for the delegation recall).
    pub(super) local_tree: Option<PathBuf>,
    /// The parts to run (big, small, nodr, nfs41).
    pub(super) parts: Vec<String>,
    /// `--persistent-stags`: on a device without type-2 memory windows (siw), the client's
    /// endpoints expose their pools through endpoint-wide persistent STags (refused otherwise).
    pub(super) persistent_stags: bool,
    /// `--provider rdma|iwarp`: kernel verbs (rxe, siw, hardware) or the user-space iWARP
    /// provider (RDMAP/DDP/MPA over a TCP socket, wire-compatible with siw).
    pub(super) provider: ProviderKind,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            server: None,
            port: 20049,
            dir: "nfsinterop".into(),
            size: 1 << 20,
            seed: 0x5250_4344_4d41_4e46,
            entries: 300,
            bind: None,
            timeout: Duration::from_secs(30),
            grace_wait: Duration::from_secs(120),
            setup: None,
            probe: false,
            local_tree: None,
            parts: PARTS.iter().map(|p| p.to_string()).collect(),
            persistent_stags: false,
            provider: ProviderKind::Rdma,
        }
    }
}

pub(super) fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] SERVER[:port]     run the checks against nfsd over RDMA\n       \
         {prog} --setup DIR [options]            create the test tree in DIR (server side)\n\n\
         NFSv4.0 COMPOUNDs over RPC-over-RDMA Version One through the poller's Client (kernel\n\
         verbs, or the user-space iWARP provider with --provider iwarp): NULL, LOOKUP/GETATTR,\n\
         READ through Write chunks, WRITE through Read chunks, long calls, Reply chunks, Send\n\
         With Invalidate; then NFSv4.1 with a session whose backchannel (RFC 8167) the client\n\
         serves: CB_COMPOUND with CB_SEQUENCE and CB_RECALL.\n\
         Prints PASS/FAIL per check; exit status 0 all passed, 1 a check failed, 2 usage error.\n\n\
         Options:\n\
         \x20 -p, --port <n>        port (default 20049)\n\
         \x20     --dir <path>      test tree, relative to the export root (default nfsinterop)\n\
         \x20     --size <n>        size of data.bin (default 1048576)\n\
         \x20     --seed <n>        pattern seed (default 0x525043444d414e46)\n\
         \x20     --entries <n>     entries of many/ (default 300)\n\
         \x20     --provider <p>    rdma (kernel verbs: rxe, siw, an RNIC; the default) or iwarp\n\
         \x20                       (RDMAP/DDP/MPA over a TCP socket, no RDMA device: the\n\
         \x20                       server must speak iWARP, e.g. nfsd over siw)\n\
         \x20     --bind <ip>       local address whose RDMA device (iwarp: TCP source) to use\n\
         \x20 -t, --timeout <ms>    per-call and connect limit (default 30000)\n\
         \x20     --grace-wait <s>  how long to wait out NFS4ERR_GRACE (default 120)\n\
         \x20     --probe-reply-chunk-limit  also probe how large a Reply chunk Linux needs next\n\
         \x20                       to a Write chunk (its last READ drops the connection)\n\
         \x20     --local-tree <dir>  the test tree as the server sees it locally: the NFSv4.1\n\
         \x20                       part creates files there, gets read delegations on them and\n\
         \x20                       writes them locally so that the server recalls them\n\
         \x20     --parts <list>    parts to run (default big,small,nodr,nfs41)\n\
         \x20     --persistent-stags  on a device without type-2 memory windows (siw): expose the\n\
         \x20                       client's pools to the server through endpoint-wide\n\
         \x20                       persistent STags (refused without; docs/rdma-provider.md)\n\
         \x20 -h, --help            this text\n\
         \x20 -V, --version         the program's version\n"
    )
}

/// The flags that take a value.
pub(super) const VALUE_FLAGS: [&str; 14] = [
    "-p",
    "--port",
    "--dir",
    "--size",
    "--seed",
    "--entries",
    "--bind",
    "-t",
    "--timeout",
    "--grace-wait",
    "--setup",
    "--local-tree",
    "--parts",
    "--provider",
];

pub(super) fn parse(argv: &[String]) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut args = ArgCursor::new(argv);
    while let Some(name) = args.next_name() {
        let tok = args.token();
        match name {
            "-h" | "--help" => return Ok(None),
            "-p" | "--port" => a.port = args.num(name, 1, 65535)? as u16,
            "--dir" => {
                let d = args.value(name)?;
                if d.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                    return Err(format!("--dir wants plain components, got {d:?}"));
                }
                a.dir = d;
            }
            "--size" => a.size = args.num(name, 8 * BIG_BUF as u64, 1 << 32)?,
            "--seed" => a.seed = args.num(name, 0, u64::MAX)?,
            "--entries" => a.entries = args.num(name, 1, 100_000)? as u32,
            "--bind" => a.bind = Some(args.ip(name)?),
            "--provider" => {
                a.provider = ProviderKind::parse(name, &args.value(name)?)?;
                if a.provider.in_process() {
                    return Err("--provider soft: the software provider reaches no server \
                                outside this process; use rdma or iwarp"
                        .into());
                }
            }
            "-t" | "--timeout" => {
                a.timeout = Duration::from_millis(args.num(name, 100, 3_600_000)?)
            }
            "--grace-wait" => a.grace_wait = Duration::from_secs(args.num(name, 0, 3600)?),
            "--setup" => a.setup = Some(PathBuf::from(args.value(name)?)),
            "--probe-reply-chunk-limit" => a.probe = true,
            "--persistent-stags" => a.persistent_stags = true,
            "--local-tree" => {
                let d = PathBuf::from(args.value(name)?);
                if !d.is_dir() {
                    return Err(format!("--local-tree {}: not a directory", d.display()));
                }
                a.local_tree = Some(d);
            }
            "--parts" => {
                let v = args.value(name)?;
                let parts: Vec<String> = v.split(',').map(|p| p.trim().to_string()).collect();
                if let Some(bad) = parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
                    return Err(format!(
                        "--parts: unknown part {bad:?} (big, small, nodr, nfs41)"
                    ));
                }
                a.parts = parts;
            }
            _ if tok.starts_with('-') && tok.len() > 1 => {
                return Err(format!("unknown flag {tok}"))
            }
            _ => {
                if a.server.is_some() {
                    return Err(format!("unexpected argument {tok:?}"));
                }
                a.server = Some(tok.to_string());
            }
        }
    }
    if a.server.is_none() && a.setup.is_none() {
        return Err("give the server's address (or --setup DIR)".into());
    }
    Ok(Some(a))
}
