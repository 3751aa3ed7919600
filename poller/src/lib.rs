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
//! - [`backoff`]: optional idle back-off (spin, yield, sleep); off by default.
//! - [`stats`]: per-reactor counters written by the owner, readable from anywhere.
//! - [`reactor`]: [`ReactorSet`] of pinned reactor threads running [`Poller`]s, with a control
//!   ring, a timer wheel and counters each; graceful stop.
//!
//! Nothing on the data path allocates after creation: ring operations, timer arm/cancel/expire
//! and the reactor loop (see `tests/noalloc.rs`).
#![warn(missing_docs)]

pub mod api_stats;
pub mod backoff;
pub mod buf;
pub mod client;
pub mod config;
pub mod driver;
pub mod mpsc;
pub mod program;
pub mod reactor;
pub mod ring;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod timer;
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
pub use buf::{BufPool, HostRegions};
pub use client::{CallArgs, Callback, Client, ClientError, ClientState, Refused, Reply};
pub use config::{
    BackoffMode, CallbackMode, ClientOptions, Config, ConfigError, EndpointConfig, PinMode,
    ProtocolVersion, RuntimeConfig, ServerOptions,
};
pub use program::{BuildError, Handler, Program, Programs, Reject, ReplyBuilder, Request};
pub use runtime::{Endpoint, EndpointError, QpHook};
pub use server::{Server, ServerBuilder, ServerError};
