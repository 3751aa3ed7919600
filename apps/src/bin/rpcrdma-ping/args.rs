//! Command-line arguments of `rpcrdma-ping`: [`Args`] (with the buffer size and private data
//! they imply), [`parse`], [`usage`] and name resolution ([`resolve`]).
//!
//! Normal operation: flags are parsed into [`Args`], or `--help` / `--version` is reported as
//! such. Recovery: an unknown flag, a missing value, a number out of range or a host that does
//! not resolve is an error message (exit status 2).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub(super) use rpcrdma_apps::cli::ProviderKind;
use rpcrdma_apps::cli::{early, num, ArgCursor, Early};

use rpcrdma_engine::proto::private_data::{self, PrivateData};
use rpcrdma_poller::BackoffMode;

use super::{MAX_ARG_SIZE, REPLY_TRANSPORT_HEADER};
pub(super) fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] <server>[:port]\n       {prog} --loopback [options] [address]\n\n\
         NULL calls over RPC-over-RDMA through the poller's Client API; prints the negotiated\n\
         transport values and round-trip statistics. Exit status: 0 every call answered,\n\
         1 no answer or a call failed, 2 usage error.\n\n\
         Options:\n\
         \x20 -P, --program <n>       RPC program (default 100003, NFS)\n\
         \x20 -v, --vers <n>          program version (default 3)\n\
         \x20 -p, --port <n>          port (default 20049)\n\
         \x20 -c, --count <n>         NULL calls (default 5)\n\
         \x20 -i, --interval <ms>     pause between calls (default 0)\n\
         \x20 -t, --timeout <ms>      connection and per-call limit (default 3000)\n\
         \x20     --rpcrdma-version 1|2  RPC-over-RDMA version (default 1)\n\
         \x20     --inline-size <n>   inline sizes we advertise (1024..262144, default 4096)\n\
         \x20     --credits <n>       credits asked for (default 32)\n\
         \x20     --no-remote-invalidate  do not advertise the RFC 8797 R bit\n\
         \x20     --loopback          start an in-process server registering the program\n\
         \x20                         (default address: soft 10.0.0.2, iwarp 127.0.0.1)\n\
         \x20     --provider soft|iwarp|rdma  verbs provider (default soft; iwarp: iWARP over\n\
         \x20                         TCP; rdma needs the `rdma` feature)\n\
         \x20     --bind <ip>         local address to use (iwarp, rdma)\n\
         \x20     --backoff busy_poll|shared_cores|interrupt  reactors' idle behaviour (default busy_poll)\n\
         \x20     --persistent-stags  on a device without type-2 memory windows (siw, iwarp): expose the\n\
         \x20                         client's pools to the server through endpoint-wide\n\
         \x20                         persistent STags (refused without; docs/rdma-provider.md)\n\
         \x20 -q, --quiet             summary only\n\
         \x20 -h, --help              this text\n\
         \x20 -V, --version           the program's version\n"
    )
}

/// The flags that take a value (the next argument is theirs).
const VALUE_FLAGS: [&str; 20] = [
    "-P",
    "--program",
    "-v",
    "--vers",
    "-p",
    "--port",
    "-c",
    "--count",
    "-i",
    "--interval",
    "-t",
    "--timeout",
    "--inline-size",
    "--credits",
    "--provider",
    "--bind",
    "--rpcrdma-version",
    "--inline-send",
    "--arg-size",
    "--backoff",
];

pub(super) enum Parsed {
    Run(Args),
    Help,
    Version,
}

pub(super) fn parse(argv: &[String]) -> Result<Parsed, String> {
    match early(argv, &|t| VALUE_FLAGS.contains(&t))? {
        Some(Early::Help) => return Ok(Parsed::Help),
        Some(Early::Version) => return Ok(Parsed::Version),
        None => {}
    }
    let mut a = Args::default();
    let mut args = ArgCursor::new(argv);
    while let Some(name) = args.next_name() {
        let tok = args.token();
        match name {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "-P" | "--program" => a.prog = args.num(name, 0, u64::from(u32::MAX))? as u32,
            "-v" | "--vers" => a.vers = args.num(name, 0, u64::from(u32::MAX))? as u32,
            "-p" | "--port" => a.port = args.num(name, 1, 65535)? as u16,
            "-c" | "--count" => a.count = args.num(name, 1, 1_000_000)?,
            "-i" | "--interval" => {
                a.interval = Duration::from_millis(args.num(name, 0, 3_600_000)?)
            }
            "-t" | "--timeout" => a.timeout = Duration::from_millis(args.num(name, 1, 3_600_000)?),
            "--rpcrdma-version" => a.version = args.num(name, 1, 2)? as u32,
            "--inline-size" => {
                a.inline = args.num(
                    name,
                    u64::from(private_data::MIN_SIZE),
                    u64::from(private_data::MAX_SIZE),
                )? as u32
            }
            "--inline-send" => {
                a.inline_send = Some(args.num(
                    name,
                    u64::from(private_data::MIN_SIZE),
                    u64::from(private_data::MAX_SIZE),
                )? as u32)
            }
            "--credits" => a.credits = args.num(name, 1, 1024)? as u32,
            "--no-remote-invalidate" => a.remote_invalidate = false,
            "--arg-size" => a.arg_size = args.num(name, 0, MAX_ARG_SIZE)? as u32,
            "--reply-chunk" => a.reply_chunk = true,
            "--loopback" => a.loopback = true,
            "--persistent-stags" => a.persistent_stags = true,
            "-q" | "--quiet" => a.quiet = true,
            "--provider" => a.provider = ProviderKind::parse(name, &args.value(name)?)?,
            "--bind" => a.bind = Some(args.ip(name)?),
            "--backoff" => {
                a.backoff = args
                    .value(name)?
                    .parse::<BackoffMode>()
                    .map_err(|e| format!("--backoff {e}"))?
            }
            _ if tok.starts_with('-') && tok.len() > 1 => {
                return Err(format!("unknown flag {tok}"))
            }
            _ => {
                if a.host.is_some() {
                    return Err(format!("unexpected argument {tok:?}"));
                }
                a.host = Some(tok.to_string());
            }
        }
    }
    if a.host.is_none() && !a.loopback {
        return Err("give the server's address, or --loopback".into());
    }
    Ok(Parsed::Run(a))
}

/// `host`, `host:port`, `[v6]:port` or a name.
pub(super) fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(sa) = host.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let (h, p) = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => {
            (h, num("port", p, 1, 65535)? as u16)
        }
        _ => (host, port),
    };
    (h, p)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {h}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {h}"))
}

#[derive(Debug, Clone)]
pub(super) struct Args {
    pub(super) host: Option<String>,
    pub(super) prog: u32,
    pub(super) vers: u32,
    pub(super) port: u16,
    pub(super) count: u64,
    pub(super) interval: Duration,
    pub(super) timeout: Duration,
    pub(super) version: u32,
    pub(super) inline: u32,
    /// `--inline-send`: the send size we advertise, when it differs from `inline`.
    pub(super) inline_send: Option<u32>,
    pub(super) credits: u32,
    pub(super) remote_invalidate: bool,
    /// `--arg-size`: opaque octets appended to each NULL call's (empty) arguments.
    pub(super) arg_size: u32,
    /// `--reply-chunk`: reply buffers larger than the inline threshold (a Reply chunk is offered).
    pub(super) reply_chunk: bool,
    pub(super) loopback: bool,
    pub(super) provider: ProviderKind,
    pub(super) bind: Option<IpAddr>,
    pub(super) backoff: BackoffMode,
    pub(super) quiet: bool,
    /// `--persistent-stags`: on a device without type-2 memory windows (siw), the client's
    /// endpoint exposes its pools through endpoint-wide persistent STags (refused otherwise).
    pub(super) persistent_stags: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            host: None,
            prog: 100_003,
            vers: 3,
            port: 20049,
            count: 5,
            interval: Duration::ZERO,
            timeout: Duration::from_secs(3),
            version: 1,
            inline: 4096,
            inline_send: None,
            credits: 32,
            remote_invalidate: true,
            arg_size: 0,
            reply_chunk: false,
            loopback: false,
            provider: ProviderKind::Soft,
            bind: None,
            backoff: BackoffMode::BusyPoll,
            quiet: false,
            persistent_stags: false,
        }
    }
}

pub(super) const fn pad4(n: u32) -> u32 {
    (n + 3) & !3
}

impl Args {
    /// The private data we send (RFC 8797 sizes, R bit).
    pub(super) fn ours(&self) -> PrivateData {
        let clamp = |n: u32| n.clamp(private_data::MIN_SIZE, private_data::MAX_SIZE);
        PrivateData::v1(
            self.remote_invalidate,
            clamp(self.inline_send.unwrap_or(self.inline)),
            clamp(self.inline),
        )
    }

    /// Size of every endpoint buffer (arguments and replies): room for `--arg-size` octets,
    /// and either just small enough that no Reply chunk is offered (a reply of that size fits
    /// the inline receive size we advertise), or with `--reply-chunk` just large enough that
    /// one is.
    pub(super) fn buffer_size(&self) -> u32 {
        let recv = self.ours().advertised_recv_size();
        let reply = if self.reply_chunk {
            recv
        } else {
            recv - REPLY_TRANSPORT_HEADER
        };
        reply.max(pad4(self.arg_size)).max(256)
    }
}
