//! `rpcrdma-ping`: rpcinfo / rping for RPC-over-RDMA. Sends NULL calls to a program and version
//! at an address (NFS, 100003 version 3, port 20049 by default) through the poller's public
//! Client API and reports what the connection negotiated and the round-trip statistics.
//!
//! Normal operation: a short probe connection (plain rdma_cm connect carrying our RFC 8797
//! private data) shows what the server answers in its accept private data (inline sizes, R
//! bit); it is closed at once. Then a [`Client`] connects and makes `-c` NULL calls one at a
//! time; each round trip is stamped from just before [`Client::call`] to the reply callback on
//! the reactor. The credits the server granted come from the client's connection counters;
//! with the soft provider the RPC-over-RDMA version and credit field of every reply, and the
//! message type and chunk lists of every call and reply, are also read off the wire (the
//! fabric's packet trace). `--arg-size` appends opaque octets to each NULL call (a call larger
//! than the inline threshold travels as a long call: RDMA_NOMSG with a Position-Zero Read
//! chunk); `--reply-chunk` sizes the reply buffers above the inline threshold, so the client
//! offers a Reply chunk with every call. The shapes the negotiated values imply are printed
//! before the calls. `--loopback` starts an in-process server that registers the program and
//! version first. `--provider` (soft, iwarp or rdma) is dispatched by [`cli::dispatch`].
//!
//! Recovery: no server (rejected, unreachable, no answer within `-t`) ends the run with a
//! message and exit status 1, as does any call that fails (PROG_UNAVAIL, PROG_MISMATCH, a
//! timeout, ...); usage errors exit with 2.
//!
//! This file holds the pings and what the wire shows; the command-line arguments are in
//! `rpcrdma-ping/args.rs`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_apps::cli::{self, AppProvider, Devices, ProviderJob};
use rpcrdma_engine::proto::chunks::{ChunkLimits, SEGMENT_LEN};
use rpcrdma_engine::proto::private_data::{self, Negotiated, PrivateData};
use rpcrdma_engine::proto::v1::{self, Body};
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::soft::{SoftFabric, TraceEvent, TraceOp};
use rpcrdma_engine::verbs::{
    CmEventKind, Device, Provider, QpInit, QpOptions, QueuePair, REJECT_NO_LISTENER,
};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallbackMode, Client, ClientError, ClientOptions, Cores, Endpoint, EndpointConfig,
    PersistentStags, PinPolicy, Program, ProtocolVersion, ReactorConfig, ReactorSet, Server,
    ServerOptions,
};

#[path = "rpcrdma-ping/args.rs"]
mod args;

use args::{pad4, parse, resolve, usage, Args, Parsed, ProviderKind};

/// Largest `--arg-size`.
const MAX_ARG_SIZE: u64 = 1 << 20;
/// Octets of an RPC call header with AUTH_NONE credential and verifier.
const CALL_HEADER: u32 = 40;
/// Octets of the largest inline reply header the client expects for a call without Write
/// chunks: the fixed words and three empty lists. A reply buffer larger than the negotiated
/// inline receive size minus this makes the client offer a Reply chunk.
const REPLY_TRANSPORT_HEADER: u32 = v1::FIXED_LEN as u32 + 12;
/// Octets a Reply chunk of one segment adds to a call's transport header (beyond the
/// "absent" word).
const REPLY_CHUNK_LEN: u32 = 4 + SEGMENT_LEN as u32;

/// Client / server addresses on the soft fabric.
const SOFT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SOFT_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// The shapes a call takes under the negotiated values (the rule the client's engine applies).
struct Shape {
    /// Octets of the RPC call message (header + arguments).
    call_len: u32,
    /// Octets of the call's transport header.
    header: u32,
    /// Sent as a long call (RDMA_NOMSG + Position-Zero Read chunk).
    long: bool,
    /// A Reply chunk is offered.
    reply_chunk: bool,
}

impl Shape {
    fn new(a: &Args, neg: &Negotiated) -> Shape {
        let v2_extra = if a.version == 2 { 8 } else { 0 };
        let buffer = a.buffer_size();
        let reply_chunk = buffer + REPLY_TRANSPORT_HEADER + v2_extra > neg.recv_inline;
        let header =
            REPLY_TRANSPORT_HEADER + v2_extra + if reply_chunk { REPLY_CHUNK_LEN } else { 0 };
        let call_len = CALL_HEADER + pad4(a.arg_size);
        Shape {
            call_len,
            header,
            long: header + call_len > neg.send_inline,
            reply_chunk,
        }
    }

    fn print(&self, a: &Args, neg: &Negotiated) {
        if self.long {
            println!(
                " call            : {} octets of RPC message ({} of arguments): long call, \
                 RDMA_NOMSG + Position-Zero Read chunk ({}-octet header + message > inline \
                 send size {})",
                self.call_len, a.arg_size, self.header, neg.send_inline
            );
        } else {
            println!(
                " call            : {} octets of RPC message ({} of arguments): inline, RDMA_MSG",
                self.call_len, a.arg_size
            );
        }
        if self.reply_chunk {
            println!(
                " reply chunk     : offered ({} octets: the reply buffers exceed the inline \
                 receive size {} less the transport header)",
                a.buffer_size(),
                neg.recv_inline
            );
        } else {
            println!(
                " reply chunk     : not offered (replies up to {} octets fit the inline receive \
                 size {})",
                a.buffer_size(),
                neg.recv_inline
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the wire shows (soft provider)
// ---------------------------------------------------------------------------------------------

/// Transport headers of the calls and replies, read from the soft fabric's trace.
#[derive(Default)]
struct Seen {
    replies: AtomicU64,
    vers: AtomicU32,
    credits: AtomicU32,
    /// Replies by procedure: RDMA_MSG, RDMA_NOMSG.
    reply_msg: AtomicU64,
    reply_nomsg: AtomicU64,
    /// Calls by procedure: RDMA_MSG, RDMA_NOMSG with a Position-Zero Read chunk.
    call_msg: AtomicU64,
    call_long: AtomicU64,
    /// Calls offering a Reply chunk.
    call_reply_chunk: AtomicU64,
    /// Octets of the last long call's Position-Zero Read chunk.
    pz_len: AtomicU32,
}

/// Octets of a transport header the trace hook reassembles (every header of a ping fits).
const SEEN_HEAD: usize = 256;

impl Seen {
    fn record(&self, server: IpAddr, ev: &TraceEvent<'_>) {
        if !matches!(ev.op, TraceOp::Send | TraceOp::SendWithInv) {
            return;
        }
        // The transport header: the first octets of the message, across the gather list.
        let mut head = [0u8; SEEN_HEAD];
        let mut n = 0;
        for part in ev.payload {
            let k = part.len().min(head.len() - n);
            head[n..n + k].copy_from_slice(&part[..k]);
            n += k;
            if n == head.len() {
                break;
            }
        }
        let Ok(h) = v1::decode(&head[..n], &ChunkLimits::DEFAULT) else {
            return;
        };
        // Relaxed (every counter here): read after the reactors stopped (their join orders
        // them).
        if ev.src.ip() == server {
            self.vers.store(h.vers, Ordering::Relaxed);
            self.credits.store(h.credits, Ordering::Relaxed);
            self.replies.fetch_add(1, Ordering::Relaxed);
            match h.body {
                Body::Msg(_) => self.reply_msg.fetch_add(1, Ordering::Relaxed),
                Body::Nomsg(_) => self.reply_nomsg.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
            return;
        }
        let Some(c) = h.chunks() else { return };
        if c.reply.is_some() {
            self.call_reply_chunk.fetch_add(1, Ordering::Relaxed);
        }
        match h.body {
            Body::Nomsg(_) if c.reads.has_position_zero() => {
                let pz: u32 = c
                    .reads
                    .iter()
                    .filter(|r| r.position == 0)
                    .map(|r| r.target.length)
                    .sum();
                self.pz_len.store(pz, Ordering::Relaxed);
                self.call_long.fetch_add(1, Ordering::Relaxed);
            }
            Body::Msg(_) => {
                self.call_msg.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    fn print(&self) {
        // Relaxed (all): see `record`.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let n = get(&self.replies);
        if n == 0 {
            return;
        }
        println!(
            " on the wire     : {n} replies, rdma_vers {}, rdma_credit {} (last reply)",
            self.vers.load(Ordering::Relaxed),
            self.credits.load(Ordering::Relaxed)
        );
        println!(
            " on the wire     : calls {} RDMA_MSG, {} RDMA_NOMSG + Position-Zero Read chunk \
             (last {} octets), {} offering a Reply chunk; replies {} RDMA_MSG, {} RDMA_NOMSG",
            get(&self.call_msg),
            get(&self.call_long),
            self.pz_len.load(Ordering::Relaxed),
            get(&self.call_reply_chunk),
            get(&self.reply_msg),
            get(&self.reply_nomsg)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The probe connection
// ---------------------------------------------------------------------------------------------

struct Probe {
    setup: Duration,
    peer: Vec<u8>,
}

/// Connects with `ours` as private data, returns what the server accepted with, disconnects.
fn probe<P: Provider>(
    dev: &P::Device,
    addr: SocketAddr,
    ours: &[u8],
    timeout: Duration,
) -> Result<Probe, String> {
    let pd = dev.alloc_pd().map_err(|e| format!("probe: {e}"))?;
    let cq = dev.create_cq(16).map_err(|e| format!("probe: {e}"))?;
    let init = QpInit::<P> {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpOptions::default()
        },
    };
    let t0 = Instant::now();
    let mut qp = dev
        .connect(addr, init, ours)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let ev = loop {
        match qp.poll_event() {
            Ok(Some(ev)) => break ev,
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_micros(50)),
            Ok(None) => return Err(format!("no answer from {addr} within {timeout:?}")),
            Err(e) => return Err(format!("connect to {addr}: {e}")),
        }
    };
    let setup = t0.elapsed();
    let r = match ev.kind {
        CmEventKind::Established => Ok(Probe {
            setup,
            peer: ev.private_data.as_slice().to_vec(),
        }),
        CmEventKind::Rejected if ev.status == REJECT_NO_LISTENER => {
            Err(format!("no answer from {addr}: nobody listens there"))
        }
        CmEventKind::Rejected => Err(format!(
            "{addr} rejected the connection (reason {})",
            ev.status
        )),
        k => Err(format!("no answer from {addr} ({k:?})")),
    };
    let _ = qp.disconnect();
    r
}

fn describe_pd(p: &PrivateData) -> String {
    format!(
        "RFC 8797 v{}: max send {}, max receive {}, R={}",
        p.version,
        p.max_send_size,
        p.max_recv_size,
        u8::from(p.remote_invalidate)
    )
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

type Outcome = Option<(u64, Result<u32, ClientError>)>;

/// One NULL call; returns the round trip (ns, stamped in the callback) and the reply's XID.
/// `fill` (`--arg-size` octets, XDR-padded) is appended to the call's empty arguments.
fn null_call(
    client: &Client,
    a: &Args,
    fill: &[u8],
    clock: Instant,
) -> (Option<u64>, Result<u32, ClientError>) {
    let Some(mut args) = client.args() else {
        return (None, Err(ClientError::Setup));
    };
    if args.put(fill).is_err() {
        return (None, Err(ClientError::Setup));
    }
    let slot = Arc::new((
        Mutex::new(None::<(u64, Result<u32, ClientError>)>),
        Condvar::new(),
    ));
    let s2 = Arc::clone(&slot);
    let t0 = clock.elapsed().as_nanos() as u64;
    let r = client.call(Proc::new(a.prog, a.vers, 0), args, move |r| {
        let t1 = clock.elapsed().as_nanos() as u64;
        let (m, c) = &*s2;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = Some((t1, r.map(|rep| rep.xid())));
        c.notify_one();
    });
    if let Err(r) = r {
        return (None, Err(r.error));
    }
    let (m, c) = &*slot;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    // The client's own call timeout fails the call; this is a last resort.
    let end = Instant::now() + a.timeout + Duration::from_secs(2);
    loop {
        let got: Outcome = g.take();
        if let Some((t1, r)) = got {
            return (Some(t1.saturating_sub(t0)), r);
        }
        let now = Instant::now();
        if now >= end {
            return (None, Err(ClientError::TimedOut));
        }
        g = c
            .wait_timeout(g, end - now)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

fn explain(e: &ClientError, a: &Args) -> String {
    match e {
        ClientError::Rpc(AcceptStat::ProgUnavail) => {
            format!("PROG_UNAVAIL: program {} is not served there", a.prog)
        }
        ClientError::Rpc(AcceptStat::ProgMismatch { low, high }) => format!(
            "PROG_MISMATCH: version {} of program {} not served (versions {low}..={high} are)",
            a.vers, a.prog
        ),
        ClientError::TimedOut => format!("no reply within {:?}", a.timeout),
        other => format!("{other:?}"),
    }
}

/// Nearest-rank percentile of sorted `v`.
fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let r = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[r - 1]
}

fn run<P: Provider>(
    a: &Args,
    target: SocketAddr,
    cdev: P::Device,
    sdev: Option<P::Device>,
    seen: Option<&Seen>,
) -> Result<bool, String> {
    let loopback = sdev.is_some();
    let nreact = if loopback { 2 } else { 1 };
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let mut rc = if ids.len() >= nreact {
        let mut rc = ReactorConfig::new(Cores::Ids(ids[..nreact].iter().rev().copied().collect()));
        rc.pin = PinPolicy::AllowUnpinned;
        rc
    } else {
        let mut rc = ReactorConfig::new(Cores::Count(nreact));
        rc.pin = PinPolicy::Off;
        rc
    };
    rc.backoff = a.backoff.config();
    rc.drain_timeout = Duration::from_secs(1);
    rc.name = "ping".into();
    let mut set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 4,
        max_credits: a.credits.max(32),
        buffers: 64,
        reply_buffers: 64,
        buffer_size: a.buffer_size() as usize,
        workers: 0,
        hugepages: false,
        ..EndpointConfig::default()
    };
    let mut eps = Vec::new();
    if let Some(sdev) = sdev {
        let sep = Endpoint::<P>::with_backoff(&set, sdev, ecfg.clone(), a.backoff)
            .map_err(|e| format!("server endpoint: {e}"))?;
        Server::builder()
            .program(Program::new(a.prog, a.vers..=a.vers))
            .options(ServerOptions {
                inline_send: a.inline,
                inline_recv: a.inline,
                credits: a.credits,
                max_call: CALL_HEADER + pad4(a.arg_size) + a.inline + 64,
                listen_reactor: Some(0),
                mode: CallbackMode::Inline,
                ..ServerOptions::default()
            })
            .start(&sep, target)
            .map_err(|e| format!("loopback server: {e}"))?;
        eps.push(sep);
        if !a.quiet {
            println!(
                " loopback server: program {} version {} registered at {target}",
                a.prog, a.vers
            );
        }
    }
    let cecfg = EndpointConfig {
        persistent_stags: if a.persistent_stags {
            PersistentStags::EndpointWide
        } else {
            PersistentStags::Refuse
        },
        ..ecfg
    };
    let cep = Endpoint::<P>::with_backoff(&set, cdev, cecfg, a.backoff)
        .map_err(|e| format!("client endpoint: {e}"))?;
    let opts = ClientOptions {
        inline_send: a.inline_send.unwrap_or(a.inline),
        inline_recv: a.inline,
        credits: a.credits,
        remote_invalidate: a.remote_invalidate,
        version: if a.version == 2 {
            ProtocolVersion::V2
        } else {
            ProtocolVersion::V1
        },
        call_timeout_ms: a.timeout.as_millis().min(u128::from(u32::MAX)) as u64,
        max_retransmits: 0,
        max_reconnects: 1,
        reconnect_min_ms: 1,
        reconnect_max_ms: 10,
        reactor: Some(nreact - 1),
        ..ClientOptions::default()
    };
    let outcome = (|| -> Result<Stats, String> {
        let client = match Client::connect(&cep, target, opts) {
            Ok(c) => c,
            Err(ClientError::Unsupported) => {
                return Err(format!(
                "RPC-over-RDMA version {} needs an inline size of at least 4096 (--inline-size)",
                a.version
            ))
            }
            Err(e @ ClientError::PersistentStagsRefused) => {
                return Err(format!(
                    "{e}; pass --persistent-stags to accept that exposure"
                ))
            }
            Err(e) => return Err(format!("connect: {e}")),
        };
        let r = ping::<P>(a, target, &client, cep.device());
        client.close();
        r
    })();
    let _ = set.stop();
    for e in eps.iter().chain(std::iter::once(&cep)) {
        e.stop_workers();
    }
    if let (Ok(_), Some(s)) = (&outcome, seen) {
        // The reactors (and with them the trace hook's writes) were joined above.
        if !a.quiet {
            s.print();
        }
    }
    outcome.map(|st| st.print(target))
}

fn ping<P: Provider>(
    a: &Args,
    target: SocketAddr,
    client: &Client,
    dev: &P::Device,
) -> Result<Stats, String> {
    let ours = a.ours();
    let pr = probe::<P>(dev, target, &ours.encode(), a.timeout)?;
    if !client.wait_connected(a.timeout) {
        return Err(format!("no answer from {target} (RPC connection)"));
    }
    let peer = private_data::search(&pr.peer);
    let neg = private_data::negotiate(&ours, peer.as_ref().ok().map(|(_, p)| p));
    println!(
        "RPCRDMA-PING {target}: program {} version {}, {} NULL call{}",
        a.prog,
        a.vers,
        a.count,
        if a.count == 1 { "" } else { "s" }
    );
    println!(
        " connection      : established in {:.3} ms (probe connection)",
        pr.setup.as_secs_f64() * 1e3
    );
    println!(
        " private data    : sent   {}",
        describe_pd(&PrivateData {
            max_send_size: ours.advertised_send_size(),
            max_recv_size: ours.advertised_recv_size(),
            ..ours
        })
    );
    match &peer {
        Ok((at, p)) => println!(
            " private data    : server {}{}",
            describe_pd(p),
            if *at > 0 {
                format!(" (at offset {at})")
            } else {
                String::new()
            }
        ),
        Err(e) => println!(
            " private data    : server sent none ({e:?}; {} octets): Version One defaults apply",
            pr.peer.len()
        ),
    }
    println!(
        " negotiated      : RPC-over-RDMA version {}, inline calls {} / replies {}, remote \
         invalidation {}",
        a.version,
        neg.send_inline,
        neg.recv_inline,
        if neg.remote_invalidate { "on" } else { "off" }
    );
    Shape::new(a, &neg).print(a, &neg);
    let fill: Vec<u8> = (0..pad4(a.arg_size))
        .map(|i| if i < a.arg_size { (i % 251) as u8 } else { 0 })
        .collect();
    let clock = Instant::now();
    let mut rtts = Vec::with_capacity(a.count as usize);
    let mut failed = 0u64;
    for i in 0..a.count {
        if i > 0 && !a.interval.is_zero() {
            std::thread::sleep(a.interval);
        }
        match null_call(client, a, &fill, clock) {
            (Some(ns), Ok(xid)) => {
                let us = ns as f64 / 1e3;
                rtts.push(us);
                if !a.quiet {
                    println!(
                        " NULL reply from {target}: seq {} xid {xid:#010x} time {us:.1} us",
                        i + 1
                    );
                }
            }
            (_, Err(e)) => {
                failed += 1;
                println!(" NULL call seq {}: {}", i + 1, explain(&e, a));
            }
            (None, Ok(_)) => failed += 1,
        }
    }
    let snap = client.stats().snapshot();
    // What the client's connection really uses (after the replies: a Version Two client that
    // met a Version One server has fallen back by now).
    if let Some(n) = client.negotiated() {
        let v = n.version.number();
        println!(
            " in use          : RPC-over-RDMA version {v}{}, inline calls {} / replies {}, \
             remote invalidation {}",
            if v == a.version {
                String::new()
            } else {
                format!(" (asked {}: fell back)", a.version)
            },
            n.send_inline,
            n.recv_inline,
            if n.remote_invalidate { "on" } else { "off" }
        );
    }
    println!(
        " credits         : asked {}, granted {}",
        a.credits, snap.credits_granted
    );
    Ok(Stats {
        count: a.count,
        rtts,
        failed,
    })
}

/// Round trips of a run.
struct Stats {
    count: u64,
    rtts: Vec<f64>,
    failed: u64,
}

impl Stats {
    fn print(mut self, target: SocketAddr) -> bool {
        println!("--- {target} rpcrdma-ping statistics ---");
        let n = self.count;
        println!(
            " {n} calls, {} replies, {} failed, {:.0}% lost",
            self.rtts.len(),
            self.failed,
            (n - self.rtts.len() as u64) as f64 * 100.0 / n as f64
        );
        let r = &mut self.rtts;
        if !r.is_empty() {
            r.sort_by(|x, y| x.total_cmp(y));
            let avg = r.iter().sum::<f64>() / r.len() as f64;
            println!(
                " rtt min/avg/max/p50/p99 = {:.1}/{avg:.1}/{:.1}/{:.1}/{:.1} us",
                r[0],
                r[r.len() - 1],
                pct(r, 0.5),
                pct(r, 0.99)
            );
        }
        self.failed == 0 && self.rtts.len() as u64 == n
    }
}

// ---------------------------------------------------------------------------------------------
// Providers
// ---------------------------------------------------------------------------------------------

/// The ping on the provider [`cli::dispatch`] picks.
struct Ping<'a> {
    a: &'a Args,
    target: SocketAddr,
}

impl ProviderJob for Ping<'_> {
    type Output = Result<bool, String>;

    fn run<P: AppProvider>(self, d: &Devices<'_>) -> Result<bool, String> {
        let (a, target) = (self.a, self.target);
        if let Some(fabric) = d.fabric() {
            return run_soft::<P>(a, target, d, fabric);
        }
        // Unspecified: the device of the source address towards the target (rdma), any
        // address (iwarp).
        let local = match a.bind {
            Some(ip) => ip,
            None if a.loopback => target.ip(),
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        let cdev = d.open::<P>(local, Some(target))?;
        let sdev = if a.loopback {
            Some(d.open::<P>(target.ip(), None)?)
        } else {
            None
        };
        run::<P>(a, target, cdev, sdev, None)
    }
}

/// The soft provider's ping: both sides on `fabric`, whose trace shows the wire.
fn run_soft<P: AppProvider>(
    a: &Args,
    target: SocketAddr,
    d: &Devices<'_>,
    fabric: &SoftFabric,
) -> Result<bool, String> {
    let seen = Arc::new(Seen::default());
    let s2 = Arc::clone(&seen);
    let server_ip = target.ip();
    fabric.set_trace(Box::new(move |ev| s2.record(server_ip, ev)));
    let client_ip = if target.ip() == IpAddr::V4(SOFT_CLIENT_IP) {
        IpAddr::V4(SOFT_SERVER_IP)
    } else {
        IpAddr::V4(SOFT_CLIENT_IP)
    };
    let cdev = d.open::<P>(client_ip, None)?;
    let sdev = if a.loopback {
        Some(d.open::<P>(target.ip(), None)?)
    } else {
        None
    };
    run::<P>(a, target, cdev, sdev, Some(&seen))
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().collect();
    let argv0 = argv.first().map(String::as_str).unwrap_or("rpcrdma-ping");
    let prog = argv0.rsplit('/').next().unwrap_or(argv0);
    let a = match parse(argv.get(1..).unwrap_or(&[])) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            print!("{}", usage(prog));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("rpcrdma-ping {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            eprintln!("Try `{prog} --help`.");
            return ExitCode::from(2);
        }
    };
    let default_host = match (a.provider, a.loopback) {
        (ProviderKind::Soft, true) => SOFT_SERVER_IP.to_string(),
        (ProviderKind::Iwarp, true) => Ipv4Addr::LOCALHOST.to_string(),
        _ => String::new(),
    };
    let host = a.host.clone().unwrap_or(default_host);
    let target = match resolve(&host, a.port) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{prog}: {e}");
            return ExitCode::from(2);
        }
    };
    if a.loopback && a.provider == ProviderKind::Rdma && a.host.is_none() {
        eprintln!("{prog}: --loopback with the rdma provider needs the device's address");
        return ExitCode::from(2);
    }
    if a.persistent_stags {
        eprintln!(
            "{prog}: --persistent-stags: on a device without type-2 memory windows (siw, iwarp) the \
             client's payload pool (read+write) and reply pool (write) are reachable by the \
             server it calls until it exits (docs/rdma-provider.md)"
        );
    }
    let job = Ping { a: &a, target };
    match cli::dispatch(a.provider, None, prog, job).and_then(|r| r) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::FAILURE
        }
    }
}
