//! `rpcrdma-nfs-check`: interoperability checks of our RPC-over-RDMA Version One client (the
//! poller's public [`Client`]) against the Linux kernel NFS server (svcrdma) on `rdma 20049`,
//! with NFSv4.0 COMPOUNDs (minor version 0: no sessions; READ and WRITE with the anonymous
//! stateid), then NFSv4.1 with a session whose backchannel (RFC 8167) the client serves. The
//! client runs on kernel verbs (`--provider rdma`, the default: rxe, siw, an RNIC) or on the
//! user-space iWARP provider (`--provider iwarp`: RDMAP/DDP/MPA over a TCP socket, so the
//! server's end is an iWARP device such as siw); the checks are the same code on both
//! ([`cli::dispatch`] picks the provider, [`Check`] runs them).
//!
//! Normal operation: `--setup DIR` creates the test tree on the server's exported file system
//! (a file of pseudo-random bytes from a fixed seed, an empty scratch file, a directory with
//! many entries). Then, against `SERVER`, four clients run their checks (`--parts`), each
//! printing `PASS name: ...` or `FAIL name: ...`:
//! - **big** (256 KiB buffers, so every call offers a Reply chunk): NULL; PUTROOTFH + LOOKUP +
//!   GETFH + GETATTR (type, size); READs of small sizes with the data inline, and of 4 KiB to
//!   256 KiB through a Write chunk (a receptacle: Linux RDMA-Writes the data into it), odd
//!   lengths and near EOF included, every byte compared, no pad octet written after the data;
//!   WRITEs whose data is a DDP item (a Read chunk Linux RDMA-Reads), odd lengths followed by
//!   a GETATTR in the same COMPOUND (the XDR stream after an unpadded chunk), read back and
//!   compared; a long call (inline WRITE data above the inline threshold: RDMA_NOMSG with a
//!   Position Zero Read chunk); READDIR of the many-entry directory (a reply far above the
//!   inline threshold, through the Reply chunk);
//! - **small** (4032-octet buffers: no Reply chunk is offered, replies come inline; inline
//!   send threshold 1024): GETATTR answered inline, READs of up to 4032 octets through a
//!   Write chunk and WRITEs through a Read chunk whose call carries that one STag only (Linux
//!   then answers with Send With Invalidate), a long call above the 1024-octet threshold, and
//!   a reply too large for the inline threshold with no Reply chunk offered;
//! - **nodr** (the small client without the RFC 8797 R bit): a single-STag call must be
//!   answered with a plain Send;
//! - **nfs41** (`Client::connect_serving`, handlers on a worker): EXCHANGE_ID,
//!   CREATE_SESSION with CONN_BACK_CHAN, SEQUENCE-prefixed COMPOUNDs; with `--local-tree`
//!   (the test tree's local path on the server) read delegations that local writers make nfsd
//!   recall with CB_COMPOUND {CB_SEQUENCE, CB_RECALL} on the client's connection, before and
//!   after a reconnection (BIND_CONN_TO_SESSION); DESTROY_SESSION, DESTROY_CLIENTID
//!   (`rpcrdma-nfs-check/nfs41.rs`).
//!
//! What each connection negotiated (`Client::negotiated`) and the per-connection counters
//! (Send With Invalidate receives, replies through the Reply chunk) are printed. The exit
//! status is 0 when every check passed, 1 otherwise, 2 on usage errors.
//!
//! Recovery: every call has a deadline (`--timeout`); a failed call, a refused connection or a
//! lost one fails the check at hand (and the run), never hangs it. NFS4ERR_GRACE (the
//! server's grace period after start) is waited out for up to `--grace-wait` seconds.
//!
//! This file holds the run (devices, connections, the parts in order); the arguments are in
//! `rpcrdma-nfs-check/args.rs`, the NFSv4.0 client and its byte-comparing checks in
//! `client.rs`, the big / small / nodr checks and the test tree in `v40.rs`, the NFSv4.1 part in
//! `nfs41.rs` (all under `rpcrdma-nfs-check/`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rpcrdma_apps::cli::{self, AppProvider, Devices, ProviderJob};
use rpcrdma_apps::nfs::v4 as nfs4;
use rpcrdma_engine::verbs::Device;
use rpcrdma_poller::{
    BackchannelService, BackoffMode, CallbackMode, Client, ClientError, ClientOptions,
    ConnSnapshot, Cores, Endpoint, EndpointConfig, PersistentStags, PinPolicy, Proc, ReactorConfig,
    ReactorSet,
};

#[path = "rpcrdma-nfs-check/args.rs"]
mod args;
#[path = "rpcrdma-nfs-check/client.rs"]
mod client;
#[path = "rpcrdma-nfs-check/nfs41.rs"]
mod nfs41;
#[path = "rpcrdma-nfs-check/v40.rs"]
mod v40;

use args::{parse, usage, Args};
use client::{ok, How, Info, Link, Nfs, Tally};
use v40::{run_big, run_probe, run_small, setup};

/// Buffers of the big client: the largest READ / WRITE (and reply) it handles.
const BIG_BUF: usize = 256 * 1024;
/// Buffers of the small client: a reply buffer this small (with the header of an inline reply
/// carrying one Write chunk, under 4096) makes the client offer no Reply chunk.
const SMALL_BUF: usize = 4032;
/// Octets written into every receptacle before a call, to see what the server wrote.
const SENTINEL: u8 = 0xa5;
/// The parts of a run, in order.
const PARTS: [&str; 4] = ["big", "small", "nodr", "nfs41"];

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// A client configuration of the run.
struct Shape {
    name: &'static str,
    buffer: usize,
    inline_send: u32,
    remote_invalidate: bool,
}

impl Shape {
    const fn new(name: &'static str, buffer: usize, inline_send: u32, r: bool) -> Shape {
        Shape {
            name,
            buffer,
            inline_send,
            remote_invalidate: r,
        }
    }
}

/// Opens the device of `--bind` or, without it, of the source address towards `target` (the
/// iWARP provider binds its TCP socket to that address).
fn open_device<P: AppProvider>(
    d: &Devices<'_>,
    a: &Args,
    target: SocketAddr,
) -> Result<P::Device, String> {
    let local = match a.bind {
        Some(ip) => ip,
        None => {
            // The source address the kernel picks towards the target (nothing is sent).
            let s =
                std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
            s.connect(target).map_err(|e| e.to_string())?;
            s.local_addr().map_err(|e| e.to_string())?.ip()
        }
    };
    d.open::<P>(local, Some(target))
        .map_err(|e| format!("{} device of {local}: {e}", d.kind().name()))
}

fn connect<P: AppProvider>(
    set: &ReactorSet,
    d: &Devices<'_>,
    a: &Args,
    target: SocketAddr,
    shape: &Shape,
    service: Option<BackchannelService>,
) -> Result<(Endpoint<P>, Client, bool), String> {
    let dev = open_device::<P>(d, a, target)?;
    let caps = dev.caps();
    // Without type-2 memory windows the client exposes chunks through persistent STags and
    // never advertises the R bit.
    let r_bit = shape.remote_invalidate && caps.mw_type2;
    println!(
        "== client {}: device {} ({:?}), buffers {} octets, inline send {}, R bit {}{}",
        shape.name,
        P::device_label(&dev),
        caps.transport,
        shape.buffer,
        shape.inline_send,
        u8::from(r_bit),
        if caps.mw_type2 {
            " (memory windows)"
        } else {
            " (no memory windows: persistent STags)"
        }
    );
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 2,
        max_credits: 32,
        buffers: 24,
        reply_buffers: 16,
        buffer_size: shape.buffer,
        // A client serving a backchannel runs its handlers (and its completions) on a worker:
        // they may block (the CB_RECALL handler holds its reply, see `nfs41`).
        workers: usize::from(service.is_some()),
        hugepages: false,
        persistent_stags: if a.persistent_stags {
            PersistentStags::EndpointWide
        } else {
            PersistentStags::Refuse
        },
        ..EndpointConfig::default()
    };
    let ep = Endpoint::<P>::with_backoff(set, dev, ecfg, BackoffMode::SharedCores)
        .map_err(|e| format!("endpoint: {e}"))?;
    let opts = ClientOptions {
        inline_send: shape.inline_send,
        inline_recv: 4096,
        credits: 16,
        remote_invalidate: shape.remote_invalidate,
        call_timeout_ms: a.timeout.as_millis().min(u128::from(u32::MAX)) as u64,
        max_retransmits: 0,
        // The NFSv4.1 client reconnects (its reconnection round); the others must never lose
        // their connection.
        max_reconnects: if service.is_some() { 5 } else { 0 },
        max_pending: 16,
        reactor: Some(0),
        mode: if service.is_some() {
            CallbackMode::Worker
        } else {
            CallbackMode::Inline
        },
        ..ClientOptions::default()
    };
    let client = match service {
        Some(s) => Client::connect_serving(&ep, target, opts, s),
        None => Client::connect(&ep, target, opts),
    }
    .map_err(|e| match e {
        ClientError::PersistentStagsRefused => {
            format!("{e}; pass --persistent-stags to accept that exposure")
        }
        e => format!("connect: {e}"),
    })?;
    if !client.wait_connected(a.timeout) {
        return Err(format!(
            "no RPC-over-RDMA connection to {target} within {:?} (state {:?})",
            a.timeout,
            client.state()
        ));
    }
    Ok((ep, client, r_bit))
}

fn print_negotiated(client: &Client) {
    match client.negotiated() {
        Some(n) => {
            println!(
                "   negotiated: version {:?}, inline calls {} / replies {}, credits granted {}, \
                 remote invalidation (both R bits) {}",
                n.version, n.send_inline, n.recv_inline, n.credits, n.remote_invalidate
            );
            match n.peer_private_data {
                Some(p) => println!(
                    "   server private data (RFC 8797): {:02x?} = version {}, R={}, send {}, \
                     receive {}",
                    p.raw,
                    p.version,
                    u8::from(p.remote_invalidate),
                    p.max_send_size,
                    p.max_recv_size
                ),
                None => println!("   server private data: none (Version One defaults)"),
            }
        }
        None => println!("   negotiated: (nothing published)"),
    }
}

fn delta(b: &ConnSnapshot, a: &ConnSnapshot) -> (u64, u64) {
    (
        a.remote_invalidations - b.remote_invalidations,
        a.reply_chunk_replies - b.reply_chunk_replies,
    )
}

/// Runs NULL.
fn null_check(nfs: &Nfs<'_>) -> Result<String, String> {
    let args = nfs.client.args().ok_or("argument buffer pool exhausted")?;
    let rep = nfs.call(
        Proc::new(nfs4::PROGRAM, nfs4::VERSION, nfs4::PROC_NULL),
        args,
    )?;
    if rep.results().is_empty() {
        Ok("NULL (program 100003 version 4) answered, empty results".into())
    } else {
        Err(format!("NULL returned {} octets", rep.results().len()))
    }
}

/// A check that also verifies how the reply came (`reply_chunk`, `swi`: see [`Info::expect`]).
fn wire(r: Result<(String, Info), String>, reply_chunk: bool, swi: bool) -> Result<String, String> {
    let (s, info) = r?;
    if info.phantom > 0 {
        return Err(format!(
            "{s}; but the Reply chunk's length claimed {} octets more than the results",
            info.phantom
        ));
    }
    info.expect(reply_chunk, swi)
        .map(|how| format!("{s}; {how}"))
        .map_err(|e| format!("{s}; {e}"))
}

/// `SERVER[:port]` of the command line.
fn target(a: &Args) -> Result<SocketAddr, String> {
    let server = a.server.as_deref().unwrap_or_default();
    match server.parse::<SocketAddr>() {
        Ok(sa) => Ok(sa),
        Err(_) => Ok(SocketAddr::new(
            server
                .parse::<IpAddr>()
                .map_err(|_| format!("{server}: not an IP address"))?,
            a.port,
        )),
    }
}

/// The checks on the provider [`cli::dispatch`] picks.
struct Check<'a> {
    a: &'a Args,
    target: SocketAddr,
}

impl ProviderJob for Check<'_> {
    type Output = Result<Tally, String>;

    fn run<P: AppProvider>(self, d: &Devices<'_>) -> Result<Tally, String> {
        run::<P>(d, self.a, self.target)
    }
}

fn run<P: AppProvider>(d: &Devices<'_>, a: &Args, target: SocketAddr) -> Result<Tally, String> {
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    rc.backoff = BackoffMode::SharedCores.config();
    rc.drain_timeout = Duration::from_secs(1);
    rc.name = "nfscheck".into();
    let mut set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
    println!(
        "rpcrdma-nfs-check: server {target}, provider {}, test tree /{}, data.bin {} octets",
        a.provider.name(),
        a.dir,
        a.size
    );
    let mut t = Tally::default();
    let mut shapes: Vec<Shape> = [
        Shape::new("big", BIG_BUF, 4096, true),
        Shape::new("small", SMALL_BUF, 1024, true),
        Shape::new("nodr", SMALL_BUF, 1024, false),
        Shape::new("nfs41", nfs41::BUF, 4096, true),
    ]
    .into_iter()
    .filter(|s| a.parts.iter().any(|p| p == s.name))
    .collect();
    if a.probe {
        shapes.push(Shape::new("probe", BIG_BUF, 4096, true));
    }
    let mut eps = Vec::new();
    for shape in &shapes {
        let cb = (shape.name == "nfs41").then(nfs41::Callbacks::new);
        let service = cb.as_ref().map(nfs41::Callbacks::service);
        let (ep, client, r_bit) = match connect::<P>(&set, d, a, target, shape, service) {
            Ok(x) => x,
            Err(e) => {
                t.check(&format!("{}/connect", shape.name), Err(e));
                continue;
            }
        };
        let nfs = Nfs {
            client: &client,
            a,
            tag: "rpcrdma-nfs-check",
            r_bit,
            minor: u32::from(cb.is_some()),
            link: Link::default(),
        };
        match (shape.name, &cb) {
            ("big", _) => run_big(&nfs, &mut t, a.size, a.seed),
            ("probe", _) => run_probe(&nfs, &mut t, a.size, a.seed),
            (_, Some(cb)) => nfs41::run(&nfs, cb, &mut t),
            (name, None) => run_small(&nfs, &mut t, a.size, a.seed, name),
        }
        let s = client.stats().snapshot();
        println!(
            "   counters {}: calls {}, replies {} ({} through the Reply chunk), errors {}, Send \
             With Invalidate {}, connection losses {}, credits granted {}, backward calls {} \
             (replies {}, errors {})",
            shape.name,
            s.calls,
            s.replies,
            s.reply_chunk_replies,
            s.errors,
            s.remote_invalidations,
            s.connection_losses,
            s.credits_granted,
            s.back_calls,
            s.back_replies,
            s.back_errors
        );
        if shape.name != "probe" {
            // The NFSv4.1 part drops one connection on purpose (its reconnection round).
            let caused = cb.as_ref().map_or(0, |c| c.losses_caused());
            t.check(
                &format!("{}/connection-kept", shape.name),
                match s.connection_losses {
                    0 => Ok("no connection loss".into()),
                    n if n == caused => Ok(format!(
                        "{n} connection loss, the one caused on purpose; no other"
                    )),
                    n => Err(format!(
                        "{n} connection losses ({caused} caused on purpose)"
                    )),
                },
            );
        }
        client.close();
        let end = Instant::now() + Duration::from_secs(5);
        while client.state() != rpcrdma_poller::ClientState::Closed && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        eps.push(ep);
    }
    let _ = set.stop();
    for e in &eps {
        e.stop_workers();
    }
    Ok(t)
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().collect();
    let argv0 = argv
        .first()
        .map(String::as_str)
        .unwrap_or("rpcrdma-nfs-check");
    let prog = argv0.rsplit('/').next().unwrap_or(argv0);
    let rest = argv.get(1..).unwrap_or(&[]);
    if let Some(code) = rpcrdma_apps::cli::start(
        prog,
        rest,
        &|t| args::VALUE_FLAGS.contains(&t),
        &usage(prog),
    ) {
        return code;
    }
    let a = match parse(rest) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{}", usage(prog));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{prog}: {e}\nTry `{prog} --help`.");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &a.setup {
        return match setup(&a, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{prog}: setup: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if a.persistent_stags {
        eprintln!(
            "{prog}: --persistent-stags: on a device without type-2 memory windows (siw) each \
             client's payload pool (read+write) and reply pool (write) are reachable by the NFS \
             server until that client ends (docs/rdma-provider.md)"
        );
    }
    let job = target(&a).map(|target| Check { a: &a, target });
    match job.and_then(|job| cli::dispatch(a.provider, None, prog, job)?) {
        Ok(t) => {
            println!(
                "nfs-check: {} passed, {} failed{}",
                t.pass,
                t.fail,
                if t.failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", t.failed.join(", "))
                }
            );
            if t.fail == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            println!("nfs-check: 0 passed, 1 failed (setup)");
            ExitCode::FAILURE
        }
    }
}
