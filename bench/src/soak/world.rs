//! The soak's world: one soft fabric, two reactors, two servers (one with inline handlers,
//! one with handlers on a worker whose ring has two slots) each on its own endpoint and
//! device, three client endpoints on three devices (inline callbacks, worker callbacks with a
//! two-slot worker ring, inline callbacks), and the client slots that connect to them.
//!
//! Normal operation: [`World::new`] builds everything before the first connection (so the
//! resource snapshot it allows is the baseline), [`World::start_servers`] starts the servers,
//! [`World::connect`] connects the client of one slot (once per slot at the start, and again,
//! with the next generation, when the driver replaces a slot's client that gave up
//! reconnecting), and [`World::teardown`] closes the clients and stops the reactors and
//! workers.
//!
//! Recovery: a client that cannot even be created is reported by `connect` as an error string
//! (the soak counts it as a violation); nothing here panics on a runtime failure except the
//! set-up itself (`expect` on reactors, endpoints and listeners, which must start).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::verbs::soft::{SoftDevice, SoftFabric, SoftProvider};
use rpcrdma_poller::{
    BackchannelService, BackoffConfig, CallbackMode, Client, ClientOptions, Cores, Endpoint,
    EndpointConfig, PinPolicy, ProtocolVersion, ReactorConfig, ReactorSet, Server, ServerOptions,
};

use super::faults::{QpRegistry, Side};
use super::wire::{client_program, server_program, HandlerCounters, ServerCtx, BUF_SIZE};

/// Servers in the world.
pub const SERVERS: usize = 2;
/// Index of the server whose handlers run on a worker.
pub const WORKER_SERVER: usize = 1;
/// Client endpoints.
pub const CLIENT_EPS: usize = 3;
/// Index (among client endpoints) of the one whose callbacks run on a worker.
pub const WORKER_CLIENT_EP: usize = 1;

static PORT: AtomicU16 = AtomicU16::new(41000);

fn endpoint_config(workers: usize) -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: 64,
        max_credits: 16,
        buffers: 512,
        reply_buffers: 256,
        buffer_size: BUF_SIZE,
        reply_buffer_size: 0,
        workers,
        // Small on purpose: the "stall" fault fills it.
        worker_ring: 2,
        hugepages: false,
        ..EndpointConfig::default()
    }
}

/// One client slot: the client connected now, its server and session.
pub struct Slot {
    /// The client (replaced when it gives up reconnecting).
    pub client: Client,
    /// Index of its server.
    pub server: usize,
    /// Its session at that server (changes with each replacement).
    pub session: u64,
    /// Replacements so far.
    pub generation: u32,
    /// Reconnection attempts of the current client when last looked at.
    pub seen_reconnects: u64,
    /// Its options.
    pub opts: ClientOptions,
    /// Its client endpoint.
    pub ep: usize,
    /// When the driver first saw the client `Failed` (it is replaced a while later).
    pub failed_at: Option<std::time::Instant>,
}

/// Everything the soak runs on.
pub struct World {
    /// The fabric.
    pub fabric: SoftFabric,
    /// The reactors.
    pub set: ReactorSet,
    /// Server endpoints, then client endpoints.
    pub eps: Vec<Endpoint<SoftProvider>>,
    /// The devices of `eps`, in the same order.
    pub devs: Vec<SoftDevice>,
    /// The servers' addresses.
    pub addrs: Vec<SocketAddr>,
    /// The servers' handler state.
    pub ctxs: Vec<Arc<ServerCtx>>,
    /// The clients' backchannel handler counters (all slots).
    pub client_counters: Arc<HandlerCounters>,
    /// The QPs of every endpoint.
    pub registry: Arc<QpRegistry>,
    /// The servers (after [`World::start_servers`]).
    pub servers: Vec<Server>,
}

impl World {
    /// Builds the fabric, reactors, endpoints and devices; no connection yet.
    pub fn new() -> World {
        let fabric = SoftFabric::new();
        let mut rc = ReactorConfig::new(Cores::Count(2));
        rc.pin = PinPolicy::Off;
        rc.backoff = BackoffConfig::shared_cores();
        rc.drain_timeout = Duration::from_secs(5);
        rc.name = "soak".into();
        let set = ReactorSet::start(&rc).expect("reactors");
        let registry = QpRegistry::new();
        let port = PORT.fetch_add(1, Ordering::Relaxed);
        let mut eps = Vec::new();
        let mut devs = Vec::new();
        let mut addrs = Vec::new();
        for s in 0..SERVERS {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 9, 1, 1 + s as u8));
            let dev = fabric.open(ip);
            let workers = usize::from(s == WORKER_SERVER);
            let ep = Endpoint::new(&set, dev.clone(), endpoint_config(workers)).expect("ep");
            assert!(ep.set_qp_hook(registry.hook(Side::Server(s))));
            eps.push(ep);
            devs.push(dev);
            addrs.push(SocketAddr::new(ip, port));
        }
        for c in 0..CLIENT_EPS {
            let dev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 9, 2, 1 + c as u8)));
            let workers = usize::from(c == WORKER_CLIENT_EP);
            let ep = Endpoint::new(&set, dev.clone(), endpoint_config(workers)).expect("ep");
            assert!(ep.set_qp_hook(registry.hook(Side::Client)));
            eps.push(ep);
            devs.push(dev);
        }
        World {
            fabric,
            set,
            eps,
            devs,
            addrs,
            ctxs: (0..SERVERS)
                .map(|_| Arc::new(ServerCtx::default()))
                .collect(),
            client_counters: Arc::new(HandlerCounters::default()),
            registry,
            servers: Vec::new(),
        }
    }

    /// Starts the servers.
    pub fn start_servers(&mut self) {
        for s in 0..SERVERS {
            let mode = if s == WORKER_SERVER {
                CallbackMode::Worker
            } else {
                CallbackMode::Inline
            };
            let opts = ServerOptions {
                credits: 8,
                mode,
                backchannel_credits: 4,
                backchannel_timeout_ms: 4000,
                session_grace_ms: 2000,
                ..ServerOptions::default()
            };
            let ep = &self.eps[s];
            let server = Server::builder()
                .program(server_program(
                    Arc::clone(&self.ctxs[s]),
                    ep.buffers().clone(),
                ))
                .options(opts)
                .start(ep, self.addrs[s])
                .expect("server");
            self.servers.push(server);
        }
    }

    /// The options of slot `k`: a mix of callback modes, versions, timeouts, retransmit and
    /// reconnect limits (documented in the module doc of `soak`).
    pub fn slot_options(k: usize) -> (usize, ClientOptions) {
        let ep = k % CLIENT_EPS;
        let opts = ClientOptions {
            credits: 8,
            max_pending: 16,
            queue_depth: 64,
            reconnect_min_ms: 1,
            reconnect_max_ms: 100,
            call_timeout_ms: if k % 3 == 0 { 8000 } else { 0 },
            max_retransmits: if k % 2 == 0 { 2 } else { 30 },
            max_reconnects: if k % 4 == 1 { 10 } else { 60 },
            version: if k % 4 == 3 {
                ProtocolVersion::V2
            } else {
                ProtocolVersion::V1
            },
            mode: if ep == WORKER_CLIENT_EP {
                CallbackMode::Worker
            } else {
                CallbackMode::Inline
            },
            reactor: Some(k % 2),
            ..ClientOptions::default()
        };
        (ep, opts)
    }

    /// Connects a client for slot `k`, generation `generation`.
    pub fn connect(&self, k: usize, generation: u32) -> Result<Slot, String> {
        let (ep, opts) = World::slot_options(k);
        let server = k % SERVERS;
        let back = BackchannelService::new()
            .program(client_program(Arc::clone(&self.client_counters)))
            .credits(4);
        let client =
            Client::connect_serving(&self.eps[SERVERS + ep], self.addrs[server], opts, back)
                .map_err(|e| format!("slot {k}: connect: {e:?}"))?;
        Ok(Slot {
            client,
            server,
            session: ((k as u64 + 1) << 32) | u64::from(generation),
            generation,
            seen_reconnects: 0,
            opts,
            ep,
            failed_at: None,
        })
    }

    /// Closes the clients, stops the reactors (graceful) and then the workers.
    pub fn teardown(&mut self, slots: &[Slot]) {
        for s in slots {
            s.client.close();
        }
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while slots.iter().any(|s| s.client.pending() > 0) && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Err(e) = self.set.stop() {
            eprintln!("soak: reactor stop: {e:?}");
        }
        for ep in &self.eps {
            ep.stop_workers();
        }
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}
