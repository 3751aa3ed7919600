//! rpcrdma-poller: the per-core run-to-completion runtime (SPDK/DPDK style).
//!
//! Each reactor is one thread pinned to one core that polls its work to completion and never
//! blocks; cores talk to each other only through rings. This crate holds the generic pieces; the
//! protocol engine plugs connections in as [`Poller`]s.
//!
//! - [`ring`]: bounded SPSC ring of `T` (DPDK `rte_ring` SP/SC calls: `enqueue`, `enqueue_bulk`,
//!   `enqueue_burst`, `dequeue`, `dequeue_bulk`, `dequeue_burst`), the data path between cores.
//! - [`mpsc`]: bounded lock-free MPSC ring for control messages from many cores to one reactor.
//! - [`timer`]: hashed timer wheel, fixed capacity, caller-supplied time, O(1) arm/cancel.
//! - [`backoff`]: optional idle back-off (spin, yield, sleep), or interrupt mode (sleep in
//!   `poll(2)` on wake-up descriptors: [`wait`], [`doorbell`]); off by default.
//! - [`stats`]: per-reactor counters written by the owner, readable from anywhere.
//! - [`sched`]: real-time wake-ups for reactors and workers that sleep when idle, the fair
//!   class under a steady load.
//! - [`reactor`]: [`ReactorSet`] of pinned reactor threads running [`Poller`]s, with a control
//!   ring, a timer wheel and counters each; graceful stop.
//!
//!
//! The RPC runtime users embed (see `docs/embedding.md` and `examples/embed.rs`):
//!
//! - [`runtime`]: [`Endpoint`] binds a verbs device to a [`ReactorSet`]: one node poller per
//!   reactor with ONE completion queue for all its QPs, completions routed by QP number.
//! - [`driver`]: the per-connection driver (QP + sans-IO connection, one doorbell per batch,
//!   memory windows, CM events, deadlines on the timer wheel) and the QP-number router.
//! - [`server`] / [`program`]: [`Server::builder`], RPC programs and handlers, RFC 5531
//!   dispatch (NULL, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS).
//! - [`client`]: [`Client::connect`], [`Client::call`] with a completion callback (stored
//!   without allocation), [`Client::call_blocking`], DDP items, queueing beyond the credits,
//!   reconnection with back-off and same-XID retransmission, RPC-over-RDMA Version One or Two
//!   (with fallback), [`Client::negotiated`] ([`negotiated`]).
//!   reconnection with back-off and same-XID retransmission.
//! - [`backchannel`]: backward-direction RPC (RFC 8167): clients serve programs on their
//!   backchannel ([`Client::connect_serving`]); server handlers get a [`BackChannel`] to enable
//!   it, bind the connection to a session and send backward calls ([`Server::back_call`]),
//!   which are kept and sent again with the same XID when the session's client reconnects.
//! - [`memory`]: registered memory (per-connection slabs, payload and reply pools) and the
//!   engine's memory view.
//! - [`config`]: option structs, also from TOML / JSON; [`api_stats`]: run-time counters;
//!   [`metrics`]: Prometheus exposition on a local HTTP port, latency histograms; [`log`]:
//!   events for operators through `tracing` (connections, refusals, evictions, losses,
//!   violations), rate-limited where a peer can cause them.
//! - Worker mode (callbacks and handlers on worker threads through SPSC rings, with
//!   back-pressure) is internal to the runtime.
//!
//! Nothing on the data path allocates after creation: ring operations, timer arm/cancel/expire
//! and the reactor loop (see `tests/noalloc.rs`), and a whole RPC in inline mode, client call to
//! server handler to reply callback (`tests/api_noalloc.rs`).
#![warn(missing_docs)]

mod accept;
mod admission;
pub mod api_stats;
pub mod backchannel;
pub mod backoff;
mod call;
mod call_table;
pub mod client;
mod client_conn;
pub mod config;
mod conn_table;
mod cred;
mod ddp;
mod dispatch;
pub mod doorbell;
pub mod driver;
pub mod log;
pub mod memory;
pub mod metrics;
pub mod mpsc;
pub mod negotiated;
mod node;
pub mod program;
pub mod reactor;
pub mod ring;
pub mod runtime;
pub mod sched;
pub mod server;
mod server_back;
mod server_conn;
mod session;
mod srq;
pub mod stats;
pub mod timer;
pub mod wait;
mod worker;

pub use backoff::{Backoff, BackoffConfig, IdleAction};
pub use mpsc::{MpscConsumer, MpscProducer};
pub use reactor::{
    current_cpu, Clock, CoreId, Cores, PinPolicy, Placement, Poller, PollerCtx, PollerId,
    ReactorConfig, ReactorCtx, ReactorError, ReactorHandle, ReactorSet,
};
pub use ring::{Consumer, Producer, RingError};
pub use stats::{StatsReader, StatsSnapshot, StatsWriter};
pub use timer::{TimerError, TimerHandle, TimerWheel};

pub use api_stats::{ConnSnapshot, ConnStats, NodeSnapshot, NodeStats};
pub use backchannel::BackchannelService;
pub use call::{CallArgs, Callback, ClientError, OnReply, Proc, Refused, Reply};
pub use client::{Client, ClientState};
pub use config::{
    AuthSysCred, BackoffMode, CallbackMode, ClientOptions, Config, ConfigError, EndpointConfig,
    PersistentStags, PinMode, ProtocolVersion, RuntimeConfig, ServerOptions,
};
pub use conn_table::CLOSED_KEPT;
pub use cred::{CredBody, CRED_MAX};
pub use memory::{BufPool, HostRegions};
pub use metrics::{Metrics, MetricsServer};
pub use negotiated::{Negotiated, PeerPrivateData};
pub use program::{
    BuildError, CallTransport, Handler, Program, Programs, Reject, ReplyBuilder, Request,
};
/// Why a server rejected a connect (this crate's reject private data, not an IETF format).
pub use rpcrdma_engine::proto::reject::RejectReason;
pub use runtime::{Endpoint, EndpointError, QpHook};
pub use server::{Server, ServerBuilder, ServerError};
pub use session::{BackCallOptions, BackChannel, BindError};
