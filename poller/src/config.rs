//! Configuration of the RPC runtime: builders' option structs, also readable from a TOML or JSON
//! file.
//!
//! Normal operation: every struct has working defaults ([`Default`]) and public fields, so code
//! sets what it needs and leaves the rest; [`Config`] groups them for files (every section and
//! field optional, unknown fields rejected so typos do not pass silently). [`Config::from_file`]
//! picks the format from the extension (`.toml`, `.json`).
//!
//! Recovery: a malformed file is a [`ConfigError`] naming the problem (with the parser's line
//! and column); values out of range are clamped or refused when the runtime is built (see each
//! field), never trusted to size anything unchecked.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::backoff::BackoffConfig;
use crate::reactor::{Cores, PinPolicy, ReactorConfig};
use crate::sched::RealtimeWake;

/// Where application code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CallbackMode {
    /// On the reactor, inside its poll (must not block). The fastest.
    #[default]
    Inline,
    /// On the endpoint's worker threads, reached through SPSC rings.
    Worker,
}

/// RPC-over-RDMA protocol version: the one a client prefers ([`ClientOptions::version`]), the
/// highest a server answers in ([`ServerOptions::version`]), the one in use
/// ([`Negotiated::version`](crate::Negotiated::version)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolVersion {
    /// RPC-over-RDMA Version One (RFC 8166).
    #[default]
    V1,
    /// RPC-over-RDMA Version Two (the seed draft). A client preferring it sends its first call
    /// of a connection in Version Two (within 1024 octets, one credit); a Version Two reply
    /// confirms it (4096-octet thresholds both ways: the draft has senders assume 4096 without
    /// a Version Two discovery mechanism, whatever RFC 8797 private data said), an ERR_VERS
    /// answer makes it send the call again in Version One and use Version One from then on,
    /// for every later connection of the same [`Client`](crate::Client) too. Needs an inline
    /// receive size of at least 4096 octets.
    V2,
}

impl ProtocolVersion {
    /// The version number on the wire (`rdma_vers`).
    pub const fn number(self) -> u32 {
        match self {
            ProtocolVersion::V1 => 1,
            ProtocolVersion::V2 => 2,
        }
    }

    /// The version of wire number `n` (`None` for any other number).
    pub const fn from_number(n: u32) -> Option<ProtocolVersion> {
        match n {
            1 => Some(ProtocolVersion::V1),
            2 => Some(ProtocolVersion::V2),
            _ => None,
        }
    }
}

/// Idle back-off of reactors and workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackoffMode {
    /// Pure busy polling (dedicated cores).
    #[default]
    BusyPoll,
    /// Spin, yield, then sleep (cores shared with other work; tests).
    SharedCores,
    /// Spin, yield, then sleep in `poll(2)` until a descriptor says there is work (a
    /// submission, a completion channel, a connection event) or a timer is due
    /// ([`BackoffConfig::interrupt`]; SPDK's interrupt mode).
    Interrupt,
}

impl BackoffMode {
    /// The back-off settings.
    pub fn config(self) -> BackoffConfig {
        match self {
            BackoffMode::BusyPoll => BackoffConfig::busy_poll(),
            BackoffMode::SharedCores => BackoffConfig::shared_cores(),
            BackoffMode::Interrupt => BackoffConfig::interrupt(),
        }
    }

    /// The accepted spellings, for messages.
    pub const NAMES: &'static str = "busy_poll, shared_cores or interrupt";
}

impl core::str::FromStr for BackoffMode {
    type Err = String;

    /// `busy_poll` (`busy`), `shared_cores` (`shared`) or `interrupt` (the serde names and
    /// their short forms).
    fn from_str(s: &str) -> Result<BackoffMode, String> {
        match s {
            "busy_poll" | "busy" => Ok(BackoffMode::BusyPoll),
            "shared_cores" | "shared" => Ok(BackoffMode::SharedCores),
            "interrupt" => Ok(BackoffMode::Interrupt),
            _ => Err(format!("must be {}, got {s:?}", BackoffMode::NAMES)),
        }
    }
}

/// How reactor threads are pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PinMode {
    /// Every reactor must be pinned.
    Required,
    /// Pin where possible.
    #[default]
    AllowUnpinned,
    /// Do not pin.
    Off,
}

/// Whether a client endpoint may expose its memory through persistent STags: the only way to
/// offer chunks on a device without type-2 memory windows (siw, some RoCE NICs). The exact
/// reach is in docs/rdma-provider.md ("What a peer can reach"); on a device with windows the
/// option changes nothing (every chunk is a window bound for one call, on one connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PersistentStags {
    /// Refuse: on a device without type-2 windows [`Client::connect`](crate::Client::connect)
    /// fails with [`ClientError::PersistentStagsRefused`](crate::ClientError::PersistentStagsRefused),
    /// and no memory of the endpoint is registered with remote rights.
    #[default]
    Refuse,
    /// Expose endpoint-wide (opt-in): on a device without type-2 windows the endpoint's payload
    /// pool (remote read and write) and reply pool (remote write) get a second registration
    /// with remote rights whose rkey is advertised in every chunk, and each client
    /// connection's RPC-header buffers one with remote read. Every peer connected to the
    /// endpoint (every server its clients reach, every client of a server on it) that learns
    /// those keys can read and overwrite those pools — other connections' arguments,
    /// receptacles and reply buffers included — until the endpoint is dropped. Do not set it on
    /// an endpoint that serves.
    EndpointWide,
}

/// The reactors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Reactors to start (0: one per usable core).
    pub reactors: usize,
    /// Pinning.
    pub pin: PinMode,
    /// Idle back-off.
    pub backoff: BackoffMode,
    /// Timers per reactor.
    pub timer_capacity: usize,
    /// Timer wheel tick (microseconds).
    pub timer_tick_us: u64,
    /// How long a stopping reactor waits for connections to drain (milliseconds).
    pub drain_timeout_ms: u64,
    /// Thread name prefix.
    pub name: String,
    /// The reactor threads' nice value ([`ReactorConfig::nice`]; `None`: inherit).
    pub nice: Option<i32>,
    /// The reactors' real-time wake-ups ([`ReactorConfig::realtime`]; `None`: off).
    pub realtime: Option<RealtimeWake>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            reactors: 0,
            pin: PinMode::AllowUnpinned,
            backoff: BackoffMode::BusyPoll,
            timer_capacity: 8192,
            timer_tick_us: 100,
            drain_timeout_ms: 2000,
            name: "rpc".into(),
            nice: None,
            realtime: None,
        }
    }
}

impl RuntimeConfig {
    /// The reactor-set configuration.
    pub fn reactor_config(&self) -> ReactorConfig {
        let cores = if self.reactors == 0 {
            Cores::All
        } else {
            Cores::Count(self.reactors)
        };
        let mut c = ReactorConfig::new(cores);
        c.pin = match self.pin {
            PinMode::Required => PinPolicy::Required,
            PinMode::AllowUnpinned => PinPolicy::AllowUnpinned,
            PinMode::Off => PinPolicy::Off,
        };
        c.backoff = self.backoff.config();
        c.timer_capacity = self.timer_capacity.clamp(64, 1 << 20);
        c.timer_tick_ns = self.timer_tick_us.clamp(1, 1_000_000) * 1000;
        c.drain_timeout = Duration::from_millis(self.drain_timeout_ms.min(600_000));
        c.name = self.name.clone();
        c.nice = self.nice;
        c.realtime = self.realtime;
        c
    }
}

/// One endpoint (a device used by clients or servers on every reactor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointConfig {
    /// Connections each reactor can hold (sizes its CQ and route table).
    pub max_conns_per_reactor: usize,
    /// Largest credit count any connection of the endpoint may use (sizes the CQ).
    pub max_credits: u32,
    /// Payload buffers in the endpoint's pool (arguments, replies, DDP items).
    pub buffers: usize,
    /// Reply buffers (a separate pool of `buffer_size` buffers: one per call in progress).
    pub reply_buffers: usize,
    /// Size of each payload and reply buffer (the largest call arguments or reply).
    pub buffer_size: usize,
    /// Size of each reply buffer when it differs from `buffer_size` (0: `buffer_size`). A
    /// server whose DDP payloads are large (1 MiB READs) but whose replies are small keeps
    /// its reply pool small this way.
    pub reply_buffer_size: usize,
    /// Worker threads (0: worker mode unavailable).
    pub workers: usize,
    /// Slots of each node-to-worker ring (rounded up to a power of two).
    pub worker_ring: usize,
    /// Real-time wake-ups of the worker threads ([`crate::sched`]; `None`: off). Workers
    /// wait for jobs in `SCHED_FIFO` and return to the fair class after a busy stretch.
    pub worker_realtime: Option<RealtimeWake>,
    /// Back the endpoint's memory with hugepages when possible.
    pub hugepages: bool,
    /// On a device without type-2 memory windows: refuse client connections (default) or
    /// expose the endpoint's pools through persistent STags (see [`PersistentStags`]).
    pub persistent_stags: PersistentStags,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            max_conns_per_reactor: 64,
            max_credits: 128,
            buffers: 4096,
            reply_buffers: 4096,
            buffer_size: 16 * 1024,
            reply_buffer_size: 0,
            workers: 0,
            worker_ring: 256,
            worker_realtime: None,
            hugepages: true,
            persistent_stags: PersistentStags::Refuse,
        }
    }
}

/// A client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientOptions {
    /// Largest call sent inline (advertised in the RFC 8797 private data).
    pub inline_send: u32,
    /// Receive buffer size (advertised).
    pub inline_recv: u32,
    /// Calls outstanding at most (the credits asked for); more wait in the queue.
    pub credits: u32,
    /// Advertise remote invalidation (RFC 8797 R bit).
    pub remote_invalidate: bool,
    /// RNR retry count the client asks of its peer (`rdma_conn_param.rnr_retry_count`: how
    /// often the server retries a Send that finds no receive; 0..=7, 7 = forever). 0 by
    /// default, as Linux does: correct credit flow control never causes an RNR, so one is an
    /// error to see, not to hide. (The server posts its receives before it accepts.)
    pub rnr_retry: u8,
    /// Protocol version to prefer. [`ProtocolVersion::V2`] falls back to Version One when the
    /// server does not speak Version Two, and remembers that for the client's later
    /// connections; it needs `inline_recv` and `inline_send` ≥ 4096
    /// ([`Client::connect`](crate::Client::connect) refuses it otherwise with
    /// [`ClientError::Unsupported`](crate::ClientError::Unsupported)).
    pub version: ProtocolVersion,
    /// Direct data placement (DDP items become chunks).
    pub ddp: bool,
    /// Fail a call not answered in this many milliseconds after the reactor took it (0:
    /// never), wherever it is: on the wire, or waiting for a credit (a call that timed out
    /// keeps its credit until the server answers it) or for a connection.
    pub call_timeout_ms: u64,
    /// With [`ProtocolVersion::V2`]: how long the first Version Two call of a connection (the
    /// probe) waits for an answer before the server is taken for a Version One one that drops
    /// what it cannot read; the call is then sent again in Version One (same XID) and the
    /// fallback remembered. Independent of `call_timeout_ms`; 0: only the call timeout
    /// applies. 5000 by default.
    pub probe_timeout_ms: u64,
    /// Times a call is sent again on a new connection after the old one was lost.
    pub max_retransmits: u32,
    /// First reconnect delay (milliseconds); doubles per failed attempt.
    pub reconnect_min_ms: u64,
    /// Longest reconnect delay (milliseconds).
    pub reconnect_max_ms: u64,
    /// Reconnect attempts in a row before pending calls fail (0: never reconnect).
    pub max_reconnects: u32,
    /// Where completion callbacks run.
    pub mode: CallbackMode,
    /// Calls the submission ring holds (rounded up to a power of two).
    pub queue_depth: usize,
    /// Calls taken from the ring and held by the connection at once (queued + outstanding).
    pub max_pending: usize,
    /// Reactor to place the connection on (`None`: round robin).
    pub reactor: Option<usize>,
    /// Keep round-trip histograms per RPC procedure ([`Client::latency`](crate::Client::latency);
    /// docs/observability.md): about 11 KiB per histogram, 25 histograms twice (the reactor's
    /// and the readers' copy), allocated at connect; recording allocates nothing. Off by
    /// default.
    pub latency_histograms: bool,
    /// The credential every call carries (RFC 5531 section 8.2): `None` (default) is
    /// AUTH_NONE; `Some` is AUTH_SYS with these ids (machine name `rpcrdma`).
    pub credential: Option<AuthSysCred>,
}

/// An AUTH_SYS identity for [`ClientOptions::credential`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSysCred {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups: the first `ngids` of `gids` (at most 16, RFC 5531).
    pub gids: [u32; 16],
    /// How many of `gids` are used.
    pub ngids: u8,
}

impl AuthSysCred {
    /// uid, gid and up to 16 supplementary groups (more are dropped).
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> AuthSysCred {
        let mut gids = [0u32; 16];
        let n = groups.len().min(16);
        gids[..n].copy_from_slice(&groups[..n]);
        AuthSysCred {
            uid,
            gid,
            gids,
            ngids: n as u8,
        }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            inline_send: 4096,
            inline_recv: 4096,
            credits: 32,
            remote_invalidate: true,
            rnr_retry: 0,
            version: ProtocolVersion::V1,
            ddp: true,
            call_timeout_ms: 0,
            probe_timeout_ms: 5000,
            max_retransmits: 3,
            reconnect_min_ms: 1,
            reconnect_max_ms: 500,
            max_reconnects: 10,
            mode: CallbackMode::Inline,
            queue_depth: 1024,
            max_pending: 128,
            reactor: None,
            latency_histograms: false,
            credential: None,
        }
    }
}

/// A server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerOptions {
    /// Largest reply sent inline (advertised).
    pub inline_send: u32,
    /// Receive buffer size (advertised).
    pub inline_recv: u32,
    /// Credits granted to each client (receives kept posted).
    pub credits: u32,
    /// Use Send With Invalidate when the client allows it.
    pub remote_invalidate: bool,
    /// Largest call with Read chunks (size of each reassembly buffer).
    pub max_call: u32,
    /// Reassembly buffers per connection (0: a quarter of the credits, at least 2).
    pub data_buffers: u32,
    /// Where handlers run.
    pub mode: CallbackMode,
    /// Pending connection requests the listener queues.
    pub backlog: u32,
    /// RNR retry count the server asks of its clients in the accept (`rdma_conn_param`;
    /// 0..=7, 7 = forever). 0 by default: receives are posted before the accept goes out.
    /// Connections on a shared receive queue (`shared_receive_queue`) always ask 7: a client
    /// that exceeds its grant can empty the SRQ before it is cut off, and an honest client's
    /// Send then waits for the repost instead of failing.
    pub rnr_retry: u8,
    /// Reactor running the listener (`None`: reactor 0). Connections are spread over all.
    pub listen_reactor: Option<usize>,
    /// Highest RPC-over-RDMA version served. [`ProtocolVersion::V2`] (the default) answers
    /// each call in the version it came in: Version Two clients in Version Two, Version One
    /// clients in Version One. [`ProtocolVersion::V1`] serves Version One only and answers a
    /// Version Two call with ERR_VERS (a Version Two client then falls back). Version Two
    /// needs `inline_recv` and `inline_send` ≥ 4096: with a smaller size the server serves
    /// Version One only.
    pub version: ProtocolVersion,
    /// Backward calls (RFC 8167) each connection keeps outstanding at most, and the backward
    /// credits it asks its client for (the client's grant limits it further). 0: connections
    /// carry no backchannel and handlers get no [`BackChannel`](crate::BackChannel). At most
    /// the endpoint's `max_credits`.
    pub backchannel_credits: u32,
    /// Backward calls one connection holds at once (queued, parked or on the wire); more wait
    /// in its submission ring, which has as many slots (rounded up to a power of two).
    pub backchannel_queue: usize,
    /// The credential of the server's backward calls (RFC 5531 `opaque_auth`): AUTH_SYS with
    /// this identity, or AUTH_NONE for `None`. An NFSv4.1 client names the flavors it accepts
    /// in `csa_sec_parms` (RFC 8881 §18.36.3); the Linux client offers AUTH_SYS and refuses a
    /// CB_COMPOUND carrying AUTH_NONE with AUTH_ERROR / AUTH_BADCRED (only CB_NULL may).
    pub backchannel_credential: Option<AuthSysCred>,
    /// Fail a backward call not answered within this many milliseconds (0: never). Per call:
    /// [`BackCallOptions::timeout_ms`](crate::BackCallOptions::timeout_ms).
    pub backchannel_timeout_ms: u64,
    /// How long a session whose connection was lost waits for its client to bind a new
    /// connection to it, in milliseconds (like an NFSv4 lease). The grace starts when the
    /// connection is lost; a bind before it ends cancels it. When it ends, the session closes
    /// as with [`Server::close_session`](crate::Server::close_session): its backward calls
    /// fail with [`ClientError::SessionClosed`](crate::ClientError::SessionClosed), the lost
    /// connection's reactor slot and memory are released, the expiry is counted
    /// (`ConnSnapshot::sessions_expired`), and a later bind of the same session id starts a
    /// fresh session. 0: keep the session until `close_session` or the reactor stops.
    pub session_grace_ms: u64,
    /// Close a connection that has been idle this long, in milliseconds (0: never). Idle means
    /// no call being served (received, in a handler, or waiting for a reply buffer), no reply
    /// whose Send has not completed, no backward call on the wire, and no completion at all for
    /// that long. Like Linux nfsd, which closes temporary transports idle for 6 to 12 minutes
    /// (`svc_age_temp_xprts`, run every 6 minutes), the default is 6 minutes. The client is
    /// told by the disconnect and connects again when it has calls; counted in
    /// `ConnSnapshot::idle_closes` and `NodeSnapshot::idle_closes`.
    pub idle_timeout_ms: u64,
    /// A connect request that finds no room — its reactor's connection slots full,
    /// `max_connections` reached, or the reactor's shared receive queue unable to back
    /// another grant — closes a server connection of that reactor and takes its room (Linux's
    /// `svc_check_conn_limits` closes the oldest temporary transport when a service has too
    /// many). The victim is chosen fairly: a connection of the address holding the most
    /// connections server-wide, then the idlest; never one of an address that would then hold
    /// fewer than the requester's; while some address holds more than the fair share
    /// (connections over addresses), only such an address's connections; a connection idle
    /// at least `evict_idle_ms`, or any connection not busy at that moment of an address that
    /// holds more than the requester's. `false`: refuse the connect instead, with
    /// [`RejectReason::ServerFull`](crate::RejectReason::ServerFull),
    /// [`RejectReason::ConnectionLimit`](crate::RejectReason::ConnectionLimit) or
    /// [`RejectReason::NoResources`](crate::RejectReason::NoResources). See
    /// docs/reliability.md for what this can and cannot stop.
    pub evict_idle: bool,
    /// How long a connection must have been idle (see `idle_timeout_ms`) before a newcomer may
    /// evict it, in milliseconds: a grace that keeps a connection storm from closing
    /// connections that were just accepted and have not sent their first call yet. 2 seconds
    /// by default. Counted in `ConnSnapshot::evictions` and `NodeSnapshot::evictions`.
    pub evict_idle_ms: u64,
    /// Connections one peer IP address may hold on this server at once (0: no limit). The
    /// next connect from that address is rejected with
    /// [`RejectReason::PeerLimit`](crate::RejectReason::PeerLimit) (it never evicts). 32 by
    /// default: twice the 16 connections a Linux NFS client opens to one server with the
    /// largest `nconnect`.
    pub max_conns_per_peer: u32,
    /// Connections this server holds at once over all its reactors (0: no limit besides the
    /// reactors' slots, `EndpointConfig::max_conns_per_reactor`). The next connect evicts a
    /// connection of the reactor that takes it (`evict_idle`; the total is exceeded by the
    /// evictions in flight until their connections are gone) or is rejected with
    /// [`RejectReason::ConnectionLimit`](crate::RejectReason::ConnectionLimit). Counted in
    /// `NodeSnapshot::rejects_conn_limit`. No limit by default.
    pub max_connections: u32,
    /// Serve the Prometheus metrics of this server and its endpoint on this local TCP address
    /// (`GET /metrics`, a thread of its own, never a reactor; port 0 picks one:
    /// [`Server::metrics_addr`](crate::Server::metrics_addr)). Off (`None`) by default. See
    /// docs/observability.md.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Keep latency histograms per RPC procedure (call received → reply Send completed;
    /// [`Server::latency`](crate::Server::latency)), per node: 25 histograms of about 11 KiB
    /// twice per node, allocated at start; recording allocates nothing. On by itself when
    /// `metrics_addr` is set. Off by default.
    pub latency_histograms: bool,
    /// Shared receive queue depth (`None`: each connection posts its own receives, as
    /// before). With `Some(depth)` every reactor's server connections take their receives from
    /// one SRQ of `depth` buffers of `inline_recv` octets: receive memory is bounded by the
    /// depth, not by the number of connections. Each connection is granted at most `credits`,
    /// fewer when the SRQ cannot back more (the sum of grants plus backward receives stays
    /// within the depth, so a client within its grant never meets RNR), and a connect is
    /// rejected when not even one credit can be backed. A client that holds more receives
    /// than its grant backs is cut off at once (`NodeSnapshot::srq_violations`); see
    /// `rnr_retry` for what honest clients meanwhile see. See docs/architecture.md and
    /// docs/reliability.md.
    pub shared_receive_queue: Option<u32>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            inline_send: 4096,
            inline_recv: 4096,
            credits: 32,
            remote_invalidate: true,
            max_call: 256 * 1024,
            data_buffers: 0,
            mode: CallbackMode::Inline,
            backlog: 128,
            rnr_retry: 0,
            listen_reactor: None,
            version: ProtocolVersion::V2,
            backchannel_credits: 4,
            backchannel_queue: 64,
            backchannel_credential: None,
            backchannel_timeout_ms: 30_000,
            session_grace_ms: 90_000,
            idle_timeout_ms: 360_000,
            evict_idle: true,
            evict_idle_ms: 2_000,
            max_conns_per_peer: 32,
            max_connections: 0,
            metrics_addr: None,
            latency_histograms: false,
            shared_receive_queue: None,
        }
    }
}

/// Everything, as read from a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Reactors.
    pub runtime: RuntimeConfig,
    /// Endpoint.
    pub endpoint: EndpointConfig,
    /// Client connections.
    pub client: ClientOptions,
    /// Server.
    pub server: ServerOptions,
}

/// A configuration file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Reading the file failed.
    Io(String),
    /// The TOML did not parse or did not match (message includes the location).
    Toml(String),
    /// The JSON did not parse or did not match (message includes line and column).
    Json(String),
    /// The extension is neither `.toml` nor `.json`.
    UnknownFormat,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::Io(m) => write!(f, "reading configuration: {m}"),
            ConfigError::Toml(m) => write!(f, "TOML configuration: {m}"),
            ConfigError::Json(m) => write!(f, "JSON configuration: {m}"),
            ConfigError::UnknownFormat => {
                write!(f, "configuration file must end in .toml or .json")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses TOML.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        toml::from_str(s).map_err(|e| ConfigError::Toml(e.to_string()))
    }

    /// Parses JSON.
    pub fn from_json_str(s: &str) -> Result<Config, ConfigError> {
        serde_json::from_str(s).map_err(|e| ConfigError::Json(e.to_string()))
    }

    /// Reads a `.toml` or `.json` file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Io(e.to_string()))?;
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Config::from_toml_str(&text),
            Some("json") => Config::from_json_str(&text),
            _ => Err(ConfigError::UnknownFormat),
        }
    }

    /// The configuration as TOML.
    pub fn to_toml_string(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}
