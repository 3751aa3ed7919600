//! perftest-compatible verbs benchmarks: `send_lat`, `write_lat`, `read_lat`, `send_bw`,
//! `write_bw`, `read_bw`, generic over the verbs provider.
//!
//! Normal operation: a server side (passive, rdma_cm listen/accept) and a client side (active)
//! exchange their buffer coordinates in the CM private data, then the client drives the test
//! the way perftest's `run_iter_*` loops do (ping-pong for latency, a `tx_depth` window with CQ
//! moderation for bandwidth) and the statistics are computed as perftest computes them
//! ([`stats`]) and printed in its layout ([`report`]). With the soft provider both sides run in
//! one process on two pinned threads ([`verbs_loops::run_loopback`]); on real providers they can run
//! as two processes ([`verbs_loops::run_server`], [`verbs_loops::run_client`]).
//!
//! Recovery: any verbs error, error completion, unexpected disconnect, timeout or data
//! mismatch ends the run with a [`PerfError`]; the client disconnects, which ends the server
//! side too. Nothing is retried.

pub mod args;
pub mod printer;
#[cfg(feature = "rdma")]
pub mod rdma_dev;
pub mod report;
pub mod rpc;
pub mod rpc_cli;
pub mod stats;
pub mod verbs_loops;

use core::fmt;
use std::time::Duration;

use rpcrdma_engine::verbs::{VerbsError, WcOpcode, WcStatus};

use stats::{BwStats, BwUnit, LatStats};

/// perftest's largest message (`MAX_SIZE`, 2^23).
pub const MAX_SIZE: u64 = 1 << 23;
/// perftest's default port (`DEF_PORT`).
pub const DEFAULT_PORT: u16 = 18515;
/// perftest's fewest iterations (`MIN_ITER`).
pub const MIN_ITERS: u64 = 5;
/// perftest's most iterations (`MAX_ITER`).
pub const MAX_ITERS: u64 = 100_000_000;
/// Above this many messages perftest stops computing the peak (O(n^2) search).
pub const PEAK_MAX_ITERS: u64 = 20_000;

/// The six benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    /// `ib_send_lat`: SEND ping-pong.
    SendLat,
    /// `ib_write_lat`: RDMA WRITE ping-pong, the receiver polls the last octet.
    WriteLat,
    /// `ib_read_lat`: one RDMA READ at a time.
    ReadLat,
    /// `ib_send_bw`: SEND stream.
    SendBw,
    /// `ib_write_bw`: RDMA WRITE stream.
    WriteBw,
    /// `ib_read_bw`: RDMA READ stream.
    ReadBw,
}

impl Test {
    /// Every test, in the order above.
    pub const ALL: [Test; 6] = [
        Test::SendLat,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendBw,
        Test::WriteBw,
        Test::ReadBw,
    ];

    /// Subcommand name (`send_lat`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send_lat",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendBw => "send_bw",
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
        }
    }

    /// The test named `name` (`send_lat`, ...).
    pub fn from_name(name: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The test a binary called `argv0` runs: its basename with a `rpcrdma_` / `rpcrdma-`
    /// prefix removed (`/usr/bin/rpcrdma_send_lat` → `send_lat`).
    pub fn from_argv0(argv0: &str) -> Option<Test> {
        let base = argv0.rsplit('/').next().unwrap_or(argv0);
        let rest = base
            .strip_prefix("rpcrdma_")
            .or_else(|| base.strip_prefix("rpcrdma-"))?;
        Test::from_name(rest)
    }

    /// Latency test?
    pub const fn is_latency(self) -> bool {
        matches!(self, Test::SendLat | Test::WriteLat | Test::ReadLat)
    }

    /// SEND test?
    pub const fn is_send(self) -> bool {
        matches!(self, Test::SendLat | Test::SendBw)
    }

    /// RDMA WRITE test?
    pub const fn is_write(self) -> bool {
        matches!(self, Test::WriteLat | Test::WriteBw)
    }

    /// RDMA READ test?
    pub const fn is_read(self) -> bool {
        matches!(self, Test::ReadLat | Test::ReadBw)
    }

    /// perftest's banner title.
    pub const fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
        }
    }

    /// perftest's `--out_json` test name.
    pub const fn json_name(self) -> &'static str {
        match self {
            Test::SendLat => "Send_Latency_Test",
            Test::WriteLat => "RDMA_Write_Latency_Test",
            Test::ReadLat => "RDMA_Read_Latency_Test",
            Test::SendBw => "Send_BW_Test",
            Test::WriteBw => "RDMA_Write_BW_Test",
            Test::ReadBw => "RDMA_Read_BW_Test",
        }
    }

    /// Divisor from round trip to reported latency: 2 (half the round trip) for SEND and
    /// WRITE, 1 for READ.
    pub const fn rtt_factor(self) -> u32 {
        if self.is_read() {
            1
        } else {
            2
        }
    }

    /// perftest's default `-s` (`DEF_SIZE_LAT` 2, `DEF_SIZE_BW` 65536).
    pub const fn default_size(self) -> u64 {
        if self.is_latency() {
            2
        } else {
            65536
        }
    }

    /// perftest's default `-n`: `DEF_ITERS_WB` (5000) for write_bw, `DEF_ITERS` (1000) for the
    /// others (perftest's `init_perftest_params`).
    pub const fn default_iters(self) -> u64 {
        match self {
            Test::WriteBw => 5000,
            _ => 1000,
        }
    }

    /// perftest's default `-t` (`DEF_TX_BW` 128, `DEF_TX_LAT` 1).
    pub const fn default_tx_depth(self) -> u32 {
        if self.is_latency() {
            1
        } else {
            128
        }
    }

    /// perftest's default inline size: 220 for write_lat (`DEF_INLINE_WRITE`), 236 for
    /// send_lat (`DEF_INLINE_SEND_RC_UC`), 0 otherwise.
    pub const fn default_inline(self) -> u32 {
        match self {
            Test::WriteLat => 220,
            Test::SendLat => 236,
            _ => 0,
        }
    }

    /// Wire code in the CM private data.
    pub(crate) const fn code(self) -> u8 {
        match self {
            Test::SendLat => 1,
            Test::WriteLat => 2,
            Test::ReadLat => 3,
            Test::SendBw => 4,
            Test::WriteBw => 5,
            Test::ReadBw => 6,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.code() == c)
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// perftest's `-a`: 2, 4, ..., 2^23.
pub fn all_sizes() -> impl Iterator<Item = u64> {
    (1..=23).map(|s| 1u64 << s)
}

/// What the verbs loops run (validated by [`args`]).
#[derive(Debug, Clone)]
pub struct Config {
    /// The test.
    pub test: Test,
    /// Message sizes, run in order on one connection.
    pub sizes: Vec<u64>,
    /// Iterations per size (ignored in duration mode).
    pub iters: u64,
    /// Duration mode (`-D`): run each size this long instead of `iters` times.
    pub duration: Option<Duration>,
    /// QPs (`-q`, BW tests).
    pub qps: u32,
    /// Outstanding sends per QP (`-t`, BW tests).
    pub tx_depth: u32,
    /// Receives posted per QP (`-r`, SEND tests).
    pub rx_depth: u32,
    /// CQ moderation (`-Q`): one signaled WR per this many (BW tests).
    pub cq_mod: u32,
    /// Messages up to this size go inline (`-I`).
    pub inline: u32,
    /// Compute the BW peak.
    pub peak: bool,
    /// BW unit.
    pub unit: BwUnit,
    /// Back buffers with hugepages (fallback with a warning).
    pub hugepages: bool,
    /// Show the progress indicator (when stderr is a terminal).
    pub progress: bool,
    /// How long connection setup may take.
    pub connect_timeout: Duration,
}

impl Config {
    /// A configuration with perftest's defaults for `test`.
    pub fn new(test: Test) -> Config {
        Config {
            test,
            sizes: vec![test.default_size()],
            iters: test.default_iters(),
            duration: None,
            qps: 1,
            tx_depth: test.default_tx_depth(),
            rx_depth: 512,
            cq_mod: 100.min(test.default_tx_depth()),
            inline: test.default_inline(),
            peak: true,
            unit: BwUnit::MiB,
            hugepages: false,
            progress: false,
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// The largest size run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }
}

/// The numbers of one size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Latency (iterations mode).
    Lat(LatStats),
    /// Latency in duration mode: average and transactions per second.
    LatDuration {
        /// t_avg in usec.
        avg: f64,
        /// tps average.
        tps: f64,
    },
    /// Bandwidth.
    Bw(BwStats),
}

/// The result of one message size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeResult {
    /// Message size.
    pub size: u64,
    /// Iterations reported (messages for BW: iterations times QPs, as perftest).
    pub iters: u64,
    /// The numbers.
    pub outcome: Outcome,
    /// When the size started, from the start of the run.
    pub start: Duration,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Why a run failed.
#[derive(Debug)]
pub enum PerfError {
    /// A verbs / rdma_cm call failed.
    Verbs(VerbsError),
    /// A work request completed with an error.
    Completion {
        /// Status.
        status: WcStatus,
        /// Opcode.
        opcode: WcOpcode,
        /// `wr_id`.
        wr_id: u64,
    },
    /// A work queue had no free slot (its depth as created).
    QueueFull {
        /// "send" or "receive".
        queue: &'static str,
        /// The queue's depth.
        depth: u32,
    },
    /// The peer disconnected before the end.
    Disconnected,
    /// Something did not happen in time.
    Timeout(&'static str),
    /// The peer sent private data this program does not understand, or rejected us.
    Protocol(String),
    /// Received data differs from what the peer sent.
    Verify(String),
    /// Memory could not be mapped or registered.
    Memory(String),
    /// Invalid configuration.
    Config(String),
    /// The other side of a loopback run failed.
    Peer(Box<PerfError>),
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::Verbs(e) => write!(f, "{e}"),
            PerfError::Completion {
                status,
                opcode,
                wr_id,
            } => write!(
                f,
                "completion with error: status {} ({}), opcode {}, wr_id {wr_id:#x}",
                status.name(),
                status.0,
                opcode.0
            ),
            PerfError::QueueFull { queue, depth } => {
                write!(f, "{queue} queue full (depth {depth})")
            }
            PerfError::Disconnected => f.write_str("the peer disconnected"),
            PerfError::Timeout(what) => write!(f, "timed out waiting for {what}"),
            PerfError::Protocol(s) => write!(f, "protocol: {s}"),
            PerfError::Verify(s) => write!(f, "data check failed: {s}"),
            PerfError::Memory(s) => write!(f, "memory: {s}"),
            PerfError::Config(s) => write!(f, "{s}"),
            PerfError::Peer(e) => write!(f, "server side: {e}"),
        }
    }
}

impl std::error::Error for PerfError {}

impl From<VerbsError> for PerfError {
    fn from(e: VerbsError) -> Self {
        PerfError::Verbs(e)
    }
}
