//! The world of one size: the benchmark program (the server's handler of [`super::PROG`]),
//! the reactors, endpoints, server and client built for one message size, pinned to the chosen
//! cores, and the endpoint configuration that sizes their buffers for that size.
//!
//! Normal operation: a world is built before a size's calls and stopped after them (client
//! closed, reactors drained). Recovery: a failure while building stops what was built and
//! returns its [`PerfError`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::verbs::{Device, Provider};
use rpcrdma_poller::{
    BufPool, CallbackMode, Client, ClientError, ClientOptions, CoreId, Cores, Endpoint,
    EndpointConfig, PersistentStags, PinPolicy, Program, ReactorConfig, ReactorSet, Reject,
    ReplyBuilder, Request, Server, ServerOptions,
};

use super::super::PerfError;

use super::{pad4, Plan, RpcConfig, RpcConnInfo, ARG_WORDS, CALL_HEADER, PROC_XFER, PROG, VERS};

/// Fills every buffer of `pool` with `pat` (the pool is idle: all buffers are free).
pub(super) fn prefill(pool: &BufPool, pat: &[u8]) {
    let mut all = Vec::with_capacity(pool.count());
    while let Some(mut b) = pool.get() {
        let n = b.len().min(pat.len());
        b[..n].copy_from_slice(&pat[..n]);
        all.push(b);
    }
}

pub(super) fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The server's program: NULL, and [`PROC_XFER`] answering from `pool` (prefilled with the
/// pattern) or `pat`.
pub(super) fn program(pool: BufPool, pat: Arc<[u8]>, every: bool) -> Program {
    // Last (data_len, reply_len) whose data was checked; a hint shared by the handlers.
    let checked = Arc::new(AtomicU64::new(u64::MAX));
    Program::new(PROG, VERS..=VERS).procedure(
        PROC_XFER,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let reply_len = be32(req.args, 0).ok_or(Reject::GarbageArgs)? as usize;
            let data_len = be32(req.args, 4).ok_or(Reject::GarbageArgs)? as usize;
            let data = req
                .args
                .get(8..8usize.saturating_add(data_len))
                .ok_or(Reject::GarbageArgs)?;
            if reply_len > pat.len() {
                return Err(Reject::GarbageArgs);
            }
            let key = ((data_len as u64) << 32) | reply_len as u64;
            // Relaxed (load and store): a hint only; two handlers racing both check.
            if every || checked.load(Ordering::Relaxed) != key {
                if pat.get(..data_len) != Some(data) {
                    return Err(Reject::GarbageArgs);
                }
                checked.store(key, Ordering::Relaxed);
            }
            out.put_u32(reply_len as u32)
                .map_err(|_| Reject::SystemErr)?;
            let offered = req.write_chunks.first().copied().unwrap_or(0) as usize;
            if reply_len > 0 && offered >= reply_len {
                let b = pool.get().ok_or(Reject::SystemErr)?;
                if b.len() < reply_len {
                    return Err(Reject::SystemErr);
                }
                out.ddp(b, reply_len).map_err(|_| Reject::SystemErr)
            } else {
                out.put(&pat[..reply_len]).map_err(|_| Reject::SystemErr)?;
                out.put(&[0u8; 3][..(4 - reply_len % 4) % 4])
                    .map_err(|_| Reject::SystemErr)
            }
        },
    )
}

pub(super) struct World<P: Provider> {
    pub(super) set: ReactorSet,
    pub(super) eps: Vec<Endpoint<P>>,
    pub(super) client: Client,
    pub(super) info: RpcConnInfo,
}

impl<P: Provider> World<P> {
    pub(super) fn stop(mut self) {
        self.client.close();
        let _ = self.set.stop();
        for e in &self.eps {
            e.stop_workers();
        }
    }
}

fn pick_cores(cfg: &RpcConfig) -> Option<(CoreId, CoreId)> {
    if cfg.cores.is_some() {
        return cfg.cores;
    }
    // get_core_ids reads the calling thread's mask: nothing has been pinned yet.
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    (ids.len() >= 2).then(|| (ids[0], ids[1]))
}

/// Which sides a process's reactors run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Sides {
    /// Reactor 0 (server) on the server core, reactor 1 (client) on the client core.
    Both,
    /// One reactor on the client core.
    Client,
    /// One reactor on the server core (so a client process on the same machine keeps the
    /// other one).
    Server,
}

/// The reactors of `sides`, on the cores of `--cores a,b` (client a, server b) or the first
/// two cores.
pub(super) fn reactors(cfg: &RpcConfig, sides: Sides, name: &str) -> Result<ReactorSet, PerfError> {
    let mut rc = match (pick_cores(cfg), sides) {
        (Some((c, s)), _) => {
            let mut rc = ReactorConfig::new(Cores::Ids(match sides {
                Sides::Both => vec![s, c],
                Sides::Client => vec![c],
                Sides::Server => vec![s],
            }));
            rc.pin = PinPolicy::AllowUnpinned;
            rc
        }
        (None, _) => {
            let mut rc = ReactorConfig::new(Cores::Count(if sides == Sides::Both { 2 } else { 1 }));
            rc.pin = PinPolicy::Off;
            rc
        }
    };
    rc.backoff = cfg.backoff.config();
    rc.drain_timeout = Duration::from_secs(2);
    rc.name = name.into();
    ReactorSet::start(&rc).map_err(|e| PerfError::Config(format!("starting the reactors: {e}")))
}

/// The endpoint configuration: `buffers` payload and `replies` reply buffers of `size` octets.
pub(super) fn endpoint_config(
    cfg: &RpcConfig,
    size: usize,
    buffers: usize,
    replies: usize,
) -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: 4,
        max_credits: cfg.credits.max(1),
        buffers,
        reply_buffers: replies,
        buffer_size: size,
        reply_buffer_size: 0,
        workers: 0,
        worker_ring: 64,
        hugepages: cfg.hugepages,
        ..EndpointConfig::default()
    }
}

/// Starts the benchmark server on `sep` at `addr`, for calls of up to `call_len` octets of data.
pub(super) fn start_server<P: Provider>(
    cfg: &RpcConfig,
    sep: &Endpoint<P>,
    addr: SocketAddr,
    call_len: u64,
    reactor: usize,
    pat: &Arc<[u8]>,
) -> Result<Server, PerfError> {
    let inline = cfg.advertised_inline();
    let max_call = u64::from(CALL_HEADER + ARG_WORDS) + pad4(call_len) + u64::from(inline) + 64;
    Server::builder()
        .program(program(
            sep.buffers().clone(),
            Arc::clone(pat),
            cfg.check_every_call,
        ))
        .options(ServerOptions {
            inline_send: inline,
            inline_recv: inline,
            credits: cfg.credits,
            max_call: max_call.min(u64::from(u32::MAX)) as u32,
            mode: CallbackMode::Inline,
            listen_reactor: Some(reactor),
            metrics_addr: cfg.metrics,
            shared_receive_queue: cfg.srq,
            ..ServerOptions::default()
        })
        .start(sep, addr)
        .map_err(|e| PerfError::Config(format!("server: {e}")))
        .inspect(|s| {
            if let Some(m) = s.metrics_addr() {
                // stderr: stdout carries the perftest-format report that scripts parse.
                eprintln!("rpcrdma-perf: metrics on http://{m}/metrics");
            }
        })
}

/// Builds the world of one size: with `sdev`, a server on it at `addr` (reactor 0) and the
/// client on reactor 1; without, only the client (reactor 0), for a server in another process.
pub(super) fn build_world<P: Provider>(
    cfg: &RpcConfig,
    plan: &Plan,
    addr: SocketAddr,
    cdev: P::Device,
    sdev: Option<P::Device>,
    pat: &Arc<[u8]>,
) -> Result<World<P>, PerfError> {
    let serve = sdev.is_some();
    let set = reactors(
        cfg,
        if serve { Sides::Both } else { Sides::Client },
        "rpcperf",
    )?;
    let window = cfg.effective_window() as usize;
    let credits = cfg.credits as usize;
    let inline = cfg.advertised_inline();
    let size = plan.buffer_size();
    let client_ip = cdev.local_ip();
    let mk = |dev, c: EndpointConfig| {
        Endpoint::<P>::with_backoff(&set, dev, c, cfg.backoff)
            .map_err(|e| PerfError::Memory(format!("endpoint: {e}")))
    };
    let mut eps = Vec::with_capacity(2);
    if let Some(sdev) = sdev {
        // Server: one DDP result buffer and one reply buffer per call being served.
        let sep = mk(sdev, endpoint_config(cfg, size, credits + 8, credits + 8))?;
        prefill(sep.buffers(), pat);
        start_server(cfg, &sep, addr, plan.call_len, 0, pat)?;
        eps.push(sep);
    }
    // Client: arguments, a DDP source and a receptacle per call; one reply buffer per call.
    let cep = mk(
        cdev,
        EndpointConfig {
            persistent_stags: if cfg.persistent_stags {
                PersistentStags::EndpointWide
            } else {
                PersistentStags::Refuse
            },
            ..endpoint_config(
                cfg,
                size,
                window.max(credits) * 3 + 8,
                window.max(credits) + 8,
            )
        },
    )?;
    prefill(cep.buffers(), pat);
    let client_reactor = usize::from(serve);
    let opts = ClientOptions {
        inline_send: inline,
        inline_recv: inline,
        credits: cfg.credits,
        version: cfg.version,
        call_timeout_ms: cfg.timeout.as_millis().min(u128::from(u32::MAX)) as u64,
        max_reconnects: 2,
        mode: CallbackMode::Inline,
        queue_depth: (window * 2).max(64),
        max_pending: window.max(credits),
        reactor: Some(client_reactor),
        ..ClientOptions::default()
    };
    let client = match Client::connect(&cep, addr, opts) {
        Ok(c) => c,
        Err(ClientError::Unsupported) => {
            return Err(PerfError::Config(format!(
                "RPC-over-RDMA {:?} needs an inline size of at least 4096 (--inline-size)",
                cfg.version
            )))
        }
        Err(e @ ClientError::PersistentStagsRefused) => {
            return Err(PerfError::Config(format!(
                "{e}; pass --persistent-stags to accept that exposure"
            )))
        }
        Err(e) => return Err(PerfError::Protocol(format!("connect: {e}"))),
    };
    eps.push(cep);
    if !client.wait_connected(cfg.timeout) {
        return Err(PerfError::Timeout("the RPC connection"));
    }
    let core = |i: usize| {
        set.handle(i)
            .filter(|h| h.is_pinned())
            .and_then(|h| h.core())
            .map(|c| c.id)
    };
    let info = RpcConnInfo {
        client: client_ip,
        server: addr,
        client_reactor,
        client_core: core(client_reactor),
        server_core: if serve { core(0) } else { None },
        server_in_process: serve,
    };
    Ok(World {
        set,
        eps,
        client,
        info,
    })
}
