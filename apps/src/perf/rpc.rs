//! RPC benchmarks over the poller's public API: `rpc_lat` and `rpc_bw`.
//!
//! Normal operation: for every message size a fresh loopback "world" is built over the soft
//! provider: a [`ReactorSet`] of two reactors pinned to two cores (the server's connection on
//! reactor 0, the client's on reactor 1), one [`Endpoint`] per device, a [`Server`] serving the
//! benchmark program [`PROG`] and one [`Client`]. The endpoints' buffers are sized for that
//! message size, so small sizes never pay for the Reply chunk the poller offers whenever its
//! reply buffers exceed the inline threshold. Calls run as a closed loop driven from the
//! completion callbacks on the client's reactor: `rpc_lat` keeps one call in flight, `rpc_bw`
//! a window of `-t` calls (default: the credits). Each call is stamped just before
//! [`Client::call`] and its callback stamps the completion, so an `rpc_lat` sample is the full
//! round trip (call submitted → reply callback), not half of it as in `send_lat`. The
//! statistics and the output layout are perftest's ([`super::stats`], [`super::report`]).
//! On a real provider the two sides run as two processes: [`serve`] (one reactor, the
//! benchmark server sized for the largest size, until every connection it expects has come
//! and gone) and [`run_client`] (one reactor, one fresh world and connection per size).
//!
//! What a call carries ([`Chunks`]): procedure [`PROC_XFER`] takes `(reply_len, opaque data)`
//! and returns `opaque<reply_len>`. `auto` and `none` move `-s` octets each way; `auto` puts a
//! payload above the inline threshold into a Read chunk (call) / Write chunk (reply), `none`
//! refuses such sizes. `read` sends the payload in a Read chunk and gets an empty result;
//! `write` gets it back in a Write chunk; `reply` gets it back inline or, above the threshold,
//! as a long reply through the Reply chunk. `--null` calls procedure 0 instead.
//!
//! Data is checked, untimed, like perftest does: the server compares the first call of each
//! size with the pattern (GARBAGE_ARGS on a mismatch), the client the first reply. Every
//! registered pool buffer is filled with the same position-based pattern once, so DDP sources
//! need no per-call fill: only the few octets an argument buffer had written over are restored.
//!
//! Recovery: any failed call (an RPC error, a transport error, a data mismatch), a refused
//! submission, an exhausted pool, or no progress within the timeout ends the run with a
//! [`PerfError`]; the world is stopped (client closed, reactors drained) in every case.
//!
//! [`ReactorSet`]: rpcrdma_poller::ReactorSet
//! [`Server`]: rpcrdma_poller::Server
//! [`Client`]: rpcrdma_poller::Client
//! [`Client::call`]: rpcrdma_poller::Client::call

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use rpcrdma_engine::proto::private_data::{self, representable_size};
use rpcrdma_engine::proto::v1::FIXED_LEN;
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{BackoffMode, CoreId, Endpoint, NodeSnapshot, ProtocolVersion};

use super::stats::BwUnit;
use super::{PerfError, SizeResult, MAX_ITERS, MIN_ITERS};
use closed_loop::{pattern_of, run_sizes};
use world::{build_world, endpoint_config, prefill, reactors, start_server, Sides};

mod closed_loop;
mod world;

/// The benchmark's RPC program number (user-defined range, RFC 5531).
pub const PROG: u32 = 0x2000_5250;
/// Its version.
pub const VERS: u32 = 1;
/// Procedure: arguments `(unsigned reply_len, opaque data<>)`, result `opaque<reply_len>`.
pub const PROC_XFER: u32 = 1;
/// Largest `-s` of the RPC tests (and the last size of `-a`).
pub const MAX_RPC_SIZE: u64 = 1 << 20;
/// Seed of the payload pattern (both directions use it; see the module doc).
pub const SEED: u8 = 0x72;
/// Octets of an RPC call header with AUTH_NONE credential and verifier.
pub const CALL_HEADER: u32 = 40;
/// Octets of an accepted SUCCESS reply header with an AUTH_NONE verifier.
pub const REPLY_HEADER: u32 = 24;
/// Octets of a Version One transport header with three empty chunk lists.
pub const TRANSPORT_HEADER: u32 = FIXED_LEN as u32 + 12;
/// Argument words before the data: the reply length and the data's XDR length.
const ARG_WORDS: u32 = 8;
/// Default soft-provider addresses (as `rpcrdma-perf`).
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// How often the waiting thread wakes up (progress, stall check).
const WAKE: Duration = Duration::from_millis(200);

/// The two RPC benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcTest {
    /// `rpc_lat`: one call at a time, full round trip per call.
    Lat,
    /// `rpc_bw`: a window of calls in flight.
    Bw,
}

impl RpcTest {
    /// Both tests.
    pub const ALL: [RpcTest; 2] = [RpcTest::Lat, RpcTest::Bw];

    /// Subcommand name.
    pub const fn name(self) -> &'static str {
        match self {
            RpcTest::Lat => "rpc_lat",
            RpcTest::Bw => "rpc_bw",
        }
    }

    /// The test named `name`.
    pub fn from_name(name: &str) -> Option<RpcTest> {
        RpcTest::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The test a binary called `argv0` runs (`rpcrdma_rpc_lat` → `rpc_lat`).
    pub fn from_argv0(argv0: &str) -> Option<RpcTest> {
        let base = argv0.rsplit('/').next().unwrap_or(argv0);
        let rest = base
            .strip_prefix("rpcrdma_")
            .or_else(|| base.strip_prefix("rpcrdma-"))?;
        RpcTest::from_name(rest)
    }

    /// Latency test?
    pub const fn is_latency(self) -> bool {
        matches!(self, RpcTest::Lat)
    }

    /// Banner title.
    pub const fn title(self) -> &'static str {
        match self {
            RpcTest::Lat => "RPC Latency Test",
            RpcTest::Bw => "RPC BW Test",
        }
    }

    /// `--out_json` test name.
    pub const fn json_name(self) -> &'static str {
        match self {
            RpcTest::Lat => "RPC_Latency_Test",
            RpcTest::Bw => "RPC_BW_Test",
        }
    }

    /// Default `-s` (perftest's: 2 for latency, 65536 for bandwidth).
    pub const fn default_size(self) -> u64 {
        match self {
            RpcTest::Lat => 2,
            RpcTest::Bw => 65536,
        }
    }
}

impl core::fmt::Display for RpcTest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the payload travels (`--chunks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Chunks {
    /// `-s` octets each way; above the inline threshold the call's payload goes in a Read
    /// chunk and the reply's in a Write chunk.
    #[default]
    Auto,
    /// `-s` octets each way, inline only (larger sizes are refused).
    None,
    /// `-s` octets in the call, always in a Read chunk; empty result.
    Read,
    /// `-s` octets in the reply, always in a Write chunk; no call payload.
    Write,
    /// `-s` octets in the reply, not DDP: inline, or a long reply through the Reply chunk
    /// above the inline threshold; no call payload.
    Reply,
}

impl Chunks {
    /// Flag value.
    pub const fn name(self) -> &'static str {
        match self {
            Chunks::Auto => "auto",
            Chunks::None => "none",
            Chunks::Read => "read",
            Chunks::Write => "write",
            Chunks::Reply => "reply",
        }
    }

    /// Parses a flag value.
    pub fn from_name(s: &str) -> Option<Chunks> {
        [
            Chunks::Auto,
            Chunks::None,
            Chunks::Read,
            Chunks::Write,
            Chunks::Reply,
        ]
        .into_iter()
        .find(|c| c.name() == s)
    }
}

#[inline]
const fn pad4(n: u64) -> u64 {
    (n + 3) & !3
}

/// Largest call data (octets, XDR-padded) that travels inline under `inline`.
pub const fn call_inline_max(inline: u32) -> u64 {
    let fixed = TRANSPORT_HEADER + CALL_HEADER + ARG_WORDS;
    if inline <= fixed {
        0
    } else {
        ((inline - fixed) & !3) as u64
    }
}

/// Largest reply data (octets, XDR-padded) that travels inline under `inline`.
pub const fn reply_inline_max(inline: u32) -> u64 {
    let fixed = TRANSPORT_HEADER + REPLY_HEADER + 4;
    if inline <= fixed {
        0
    } else {
        ((inline - fixed) & !3) as u64
    }
}

/// What one call of one size carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// NULL procedure (nothing else applies).
    pub null: bool,
    /// Octets of call data.
    pub call_len: u64,
    /// The call data goes as a DDP item (Read chunk).
    pub call_ddp: bool,
    /// Octets of reply data.
    pub reply_len: u64,
    /// The client offers a receptacle (Write chunk) for the reply data.
    pub reply_ddp: bool,
}

impl Plan {
    /// The plan for `size` octets under `chunks` and inline threshold `inline` (as advertised).
    pub fn new(chunks: Chunks, null: bool, size: u64, inline: u32) -> Result<Plan, String> {
        if null {
            return Ok(Plan {
                null: true,
                call_len: 0,
                call_ddp: false,
                reply_len: 0,
                reply_ddp: false,
            });
        }
        let (cmax, rmax) = (call_inline_max(inline), reply_inline_max(inline));
        let p = |call_len, call_ddp, reply_len, reply_ddp| Plan {
            null: false,
            call_len,
            call_ddp,
            reply_len,
            reply_ddp,
        };
        Ok(match chunks {
            Chunks::Auto => p(size, pad4(size) > cmax, size, pad4(size) > rmax),
            Chunks::None => {
                let most = cmax.min(rmax);
                if pad4(size) > most {
                    return Err(format!(
                        "-s {size} does not fit the {inline}-octet inline threshold with \
                         --chunks none (largest: {most}); use --chunks auto or a larger \
                         --inline-size"
                    ));
                }
                p(size, false, size, false)
            }
            Chunks::Read => p(size, true, 0, false),
            Chunks::Write => p(0, false, size, true),
            Chunks::Reply => p(0, false, size, false),
        })
    }

    /// What the plan moves, in words (banner).
    pub fn describe(&self, inline: u32) -> String {
        if self.null {
            return "NULL procedure: no arguments, no results".into();
        }
        let dir = |len: u64, ddp: bool, chunk: &str, long: &str, max: u64| -> String {
            if len == 0 {
                "nothing".into()
            } else if ddp {
                format!("{len} B in a {chunk} chunk")
            } else if pad4(len) > max {
                format!("{len} B {long}")
            } else {
                format!("{len} B inline")
            }
        };
        format!(
            "call {}, reply {}",
            dir(
                self.call_len,
                self.call_ddp,
                "Read",
                "(long call)",
                call_inline_max(inline)
            ),
            dir(
                self.reply_len,
                self.reply_ddp,
                "Write",
                "as a long reply (Reply chunk)",
                reply_inline_max(inline)
            )
        )
    }

    /// Size of every endpoint buffer for this plan: argument buffers, DDP sources and
    /// receptacles, reply buffers (a long reply lands whole in one).
    pub fn buffer_size(&self) -> usize {
        let args = u64::from(ARG_WORDS)
            + if self.call_ddp {
                0
            } else {
                pad4(self.call_len)
            };
        let ddp = if self.call_ddp { self.call_len } else { 0 }.max(if self.reply_ddp {
            self.reply_len
        } else {
            0
        });
        let reply = u64::from(REPLY_HEADER)
            + 4
            + if self.reply_ddp {
                0
            } else {
                pad4(self.reply_len)
            };
        // Rounded to 4 only: an inline plan's buffers must stay within the inline threshold
        // minus the transport header, or the poller offers a Reply chunk with every call.
        let n = args.max(ddp).max(reply).max(256);
        pad4(n) as usize
    }

    /// Octets at the start of an argument buffer the arguments overwrite (restored before the
    /// buffer serves as a DDP source).
    fn dirty(&self) -> usize {
        (u64::from(ARG_WORDS)
            + if self.call_ddp {
                0
            } else {
                pad4(self.call_len)
            }) as usize
    }
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct RpcConfig {
    /// The test.
    pub test: RpcTest,
    /// Sizes, each on a fresh world.
    pub sizes: Vec<u64>,
    /// Calls per size (ignored with `duration`).
    pub iters: u64,
    /// Duration mode: run each size this long; the middle is measured.
    pub duration: Option<Duration>,
    /// NULL calls instead of the payload procedure.
    pub null: bool,
    /// How the payload travels.
    pub chunks: Chunks,
    /// RPC-over-RDMA version asked for.
    pub version: ProtocolVersion,
    /// Inline threshold both sides advertise (1024..=262144; rounded down to what RFC 8797
    /// can express).
    pub inline: u32,
    /// Credits the client asks for and the server grants.
    pub credits: u32,
    /// Calls in flight (`rpc_bw`; `rpc_lat` always 1).
    pub window: u32,
    /// Compute the BW peak.
    pub peak: bool,
    /// BW unit.
    pub unit: BwUnit,
    /// Back the endpoints' buffers with hugepages.
    pub hugepages: bool,
    /// The client's endpoint accepts persistent STags on a device without type-2 memory
    /// windows (siw): [`PersistentStags::EndpointWide`]; otherwise such a client is refused.
    ///
    /// [`PersistentStags::EndpointWide`]: rpcrdma_poller::PersistentStags::EndpointWide
    pub persistent_stags: bool,
    /// Idle behaviour of the reactors.
    pub backoff: BackoffMode,
    /// Cores for (client reactor, server reactor); `None`: the first two cores the calling
    /// thread may run on (threads inherit their creator's mask: find the cores before pinning
    /// anything).
    pub cores: Option<(CoreId, CoreId)>,
    /// Server port of the first size (each further size uses the next port).
    pub port: u16,
    /// Progress indicator on stderr (when a terminal).
    pub progress: bool,
    /// Connection set-up limit, and the longest time without a completed call.
    pub timeout: Duration,
    /// Check the data of every call and reply, not only the first of each size (slower;
    /// for tests).
    pub check_every_call: bool,
    /// The server's metrics port (`ServerOptions::metrics_addr`; each size's server in turn).
    pub metrics: Option<SocketAddr>,
    /// The server's shared receive queue depth (`ServerOptions::shared_receive_queue`;
    /// `None`: per-connection receives).
    pub srq: Option<u32>,
}

impl RpcConfig {
    /// Defaults for `test`: one size (2 or 65536), 1000 calls, auto chunks, Version One,
    /// 4096-octet inline threshold, 32 credits, busy polling.
    pub fn new(test: RpcTest) -> RpcConfig {
        RpcConfig {
            test,
            sizes: vec![test.default_size()],
            iters: 1000,
            duration: None,
            null: false,
            chunks: Chunks::Auto,
            version: ProtocolVersion::V1,
            inline: 4096,
            credits: 32,
            window: 32,
            peak: true,
            unit: BwUnit::MiB,
            hugepages: false,
            persistent_stags: false,
            backoff: BackoffMode::BusyPoll,
            cores: None,
            port: super::DEFAULT_PORT,
            progress: false,
            timeout: Duration::from_secs(10),
            check_every_call: false,
            metrics: None,
            srq: None,
        }
    }

    /// The inline threshold as advertised (RFC 8797 rounding).
    pub fn advertised_inline(&self) -> u32 {
        representable_size(
            self.inline
                .clamp(private_data::MIN_SIZE, private_data::MAX_SIZE),
        )
    }

    /// Calls in flight.
    pub fn effective_window(&self) -> u64 {
        if self.test.is_latency() {
            1
        } else {
            u64::from(self.window.max(1))
        }
    }

    /// Checks the configuration; returns each size's plan.
    pub fn plans(&self) -> Result<Vec<Plan>, PerfError> {
        if self.sizes.is_empty() {
            return Err(PerfError::Config("no message size".into()));
        }
        if self.duration.is_none() && !(MIN_ITERS..=MAX_ITERS).contains(&self.iters) {
            return Err(PerfError::Config(format!(
                " -n should be between {MIN_ITERS} and {MAX_ITERS}"
            )));
        }
        if !(1..=1024).contains(&self.credits) {
            return Err(PerfError::Config("--credits must be 1..=1024".into()));
        }
        let inline = self.advertised_inline();
        self.sizes
            .iter()
            .map(|&s| {
                if s == 0 && !self.null || s > MAX_RPC_SIZE {
                    return Err(PerfError::Config(format!(
                        " -s should be between 1 and {MAX_RPC_SIZE} for the RPC tests"
                    )));
                }
                Plan::new(self.chunks, self.null, s, inline).map_err(PerfError::Config)
            })
            .collect()
    }
}

/// The connection of a run (reported once, for the first size).
#[derive(Debug, Clone, Copy)]
pub struct RpcConnInfo {
    /// Client device address.
    pub client: IpAddr,
    /// Server address.
    pub server: SocketAddr,
    /// The client's reactor (1 next to an in-process server, else 0).
    pub client_reactor: usize,
    /// Client reactor's core, when pinned.
    pub client_core: Option<usize>,
    /// Server reactor's core, when pinned (and the server runs in this process).
    pub server_core: Option<usize>,
    /// The server runs in this process (on reactor 0); else it is another process.
    pub server_in_process: bool,
}

/// Counters of one size, beyond perftest's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcSizeInfo {
    /// The plan.
    pub plan: Plan,
    /// Calls the client completed (its own counter), measured or not.
    pub completed: u64,
    /// Calls that failed (client connection counter).
    pub errors: u64,
    /// Credits the server granted (last value seen).
    pub credits_granted: u64,
}

/// Receives what a run produces.
pub trait RpcObserver {
    /// The first size's connection is up.
    fn connected(&mut self, _info: &RpcConnInfo) {}
    /// Measurements start (print the header now).
    fn running(&mut self, _cfg: &RpcConfig) {}
    /// A size finished; `hist` holds every call's round trip (ns).
    fn result(&mut self, _r: &SizeResult, _hist: &Histogram<u64>, _info: &RpcSizeInfo) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRpcObserver;

impl RpcObserver for NoRpcObserver {}

/// Runs `cfg` over the soft provider, on `fabric` (install a pcap trace on it first if
/// wanted). Returns one result per size (size 0 for NULL calls).
pub fn run_loopback(
    cfg: &RpcConfig,
    fabric: &SoftFabric,
    obs: &mut dyn RpcObserver,
) -> Result<Vec<SizeResult>, PerfError> {
    run_sizes::<SoftProvider>(cfg, obs, &mut |k, plan, pat| {
        // Each size on its own port: a fresh server per world.
        let port = match cfg.port.checked_add(k as u16) {
            Some(p) => p,
            None => 1024 + k as u16,
        };
        let addr = SocketAddr::new(IpAddr::V4(SERVER_IP), port);
        let sdev = fabric.open(IpAddr::V4(SERVER_IP));
        let cdev = fabric.open(IpAddr::V4(CLIENT_IP));
        build_world::<SoftProvider>(cfg, plan, addr, cdev, Some(sdev), pat)
    })
}

/// The client side against a server in another process ([`serve`]) at `server`: one
/// connection per size, each through a fresh world on a device `open` returns (called once
/// per size). Returns one result per size.
pub fn run_client<P: Provider>(
    cfg: &RpcConfig,
    server: SocketAddr,
    open: &dyn Fn() -> Result<P::Device, PerfError>,
    obs: &mut dyn RpcObserver,
) -> Result<Vec<SizeResult>, PerfError> {
    run_sizes::<P>(cfg, obs, &mut |_, plan, pat| {
        build_world::<P>(cfg, plan, server, open()?, None, pat)
    })
}

/// What a [`serve`] run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeSummary {
    /// Connections accepted (one per size of the client's run).
    pub connections: u64,
    /// Calls received, all connections.
    pub calls: u64,
    /// Replies sent.
    pub replies: u64,
    /// Calls answered with an RPC error (a data mismatch is GARBAGE_ARGS).
    pub errors: u64,
    /// The server node's counters at the end (completions, doorbells, errors; its shared
    /// receive queue's gauges: `srq_depth` 0 without one).
    pub node: NodeSnapshot,
}

/// The server side for a client in another process ([`run_client`]): serves the benchmark
/// program on `dev` at `listen`, with buffers for the largest size of `cfg` (give it the
/// client's sizes, chunks, inline threshold and credits), calls `ready` once listening, and
/// returns once `cfg.sizes.len()` connections were accepted and all of them closed (or `stop`
/// is set).
pub fn serve<P: Provider>(
    cfg: &RpcConfig,
    dev: P::Device,
    listen: SocketAddr,
    stop: &AtomicBool,
    ready: &mut dyn FnMut(SocketAddr),
) -> Result<ServeSummary, PerfError> {
    let plans = cfg.plans()?;
    let size = plans.iter().map(Plan::buffer_size).max().unwrap_or(256);
    let call_len = plans.iter().map(|p| p.call_len).max().unwrap_or(0);
    let pat = pattern_of(size);
    let mut set = reactors(cfg, Sides::Server, "rpcserve")?;
    let credits = cfg.credits as usize;
    let sep = Endpoint::<P>::with_backoff(
        &set,
        dev,
        endpoint_config(cfg, size, credits + 8, credits + 8),
        cfg.backoff,
    )
    .map_err(|e| PerfError::Memory(format!("endpoint: {e}")))?;
    prefill(sep.buffers(), &pat);
    let server = start_server(cfg, &sep, listen, call_len, 0, &pat)?;
    ready(server.local_addr());
    let want = cfg.sizes.len() as u64;
    // Relaxed: a stop request only; nothing else is published through it.
    while !stop.load(Ordering::Relaxed) {
        let t = server.totals();
        if server.accepted() >= want && t.connection_losses >= server.accepted() {
            break;
        }
        std::thread::sleep(WAKE / 4);
    }
    server.stop_listening();
    let t = server.totals();
    let node = sep.node_stats(0).unwrap_or_default();
    let summary = ServeSummary {
        connections: server.accepted(),
        calls: t.calls,
        replies: t.replies,
        errors: t.errors,
        node,
    };
    let _ = set.stop();
    sep.stop_workers();
    Ok(summary)
}
