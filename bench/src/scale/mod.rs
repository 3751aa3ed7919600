//! The scale and connection-storm benchmark (issue 16): many client connections to ONE server
//! reactor, each with calls in flight (inline and 4 KiB DDP through a Read chunk, checksummed),
//! then a storm of connects at once and a storm of disconnects at once while the established
//! connections keep calling.
//!
//! Normal operation: [`run`] builds a soft fabric with a one-reactor server endpoint, a
//! one-reactor client endpoint and a one-reactor endpoint for the storm's clients, connects [`ScaleConfig::conns`] clients (measuring the
//! process's resident set before and after, and the server node's connection gauge), runs four
//! phases of traffic — `steady`, `connect storm` ([`ScaleConfig::storm`] more clients connect
//! at once from a second client endpoint), `disconnect storm` (they all close at once) and
//! `after` — and records each established call's round trip in the phase it started in. Every
//! call goes through the soak's [`Ledger`]: it must complete exactly once, with the right
//! octets. The report gives per-phase p50 / p99 / max, how long the storms took, and the
//! resident memory per connection.
//!
//! Recovery: a storm client that the server refuses (its `max_conns_per_reactor`) counts as
//! rejected, not as a failure; anything else that breaks an invariant (a call lost, completed
//! twice or with wrong octets, a storm that never settles) makes [`ScaleReport::passed`] false.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::soft::{SoftConfig, SoftDevice, SoftFabric, SoftProvider};
use rpcrdma_poller::{
    BackoffConfig, Client, ClientError, ClientOptions, ClientState, Cores, Endpoint,
    EndpointConfig, PinPolicy, ReactorConfig, ReactorSet, RejectReason, Reply, Server,
    ServerOptions,
};

use crate::soak::ledger::Ledger;
use crate::soak::resources::{loadavg, rss_kib};
use crate::soak::wire::{
    build_args, server_program, verify_reply, Kind, ServerCtx, BUF_SIZE, PROG, P_CHECK,
};
use rpcrdma_poller::Proc;

/// Octets of a DDP argument.
pub const DDP_LEN: usize = 4096;
/// Octets of an inline argument and of every result.
const SMALL: usize = 32;
/// Room for the results' header in the reply-size hint.
const RESULT_HEADER: usize = 64;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// Established client connections.
    pub conns: usize,
    /// Clients that connect at once (and later disconnect at once) during the storms.
    pub storm: usize,
    /// Calls each established connection keeps in flight.
    pub in_flight: u32,
    /// Every n-th call carries a 4 KiB DDP argument (0: none).
    pub ddp_every: u32,
    /// How long the `steady` and `after` phases last at least (each phase also lasts until one
    /// of the calls started in it has completed, so a loaded machine lengthens a phase instead
    /// of leaving it empty).
    pub phase: Duration,
    /// How long a storm may take before the run fails (also the longest any phase waits for
    /// its first completed call).
    pub storm_limit: Duration,
    /// Credits each server connection grants.
    pub credits: u32,
    /// The server's `max_connections` (0: no limit): storm clients over it are refused with
    /// `RejectReason::ConnectionLimit`.
    pub max_connections: u32,
    /// The server's shared receive queue depth (`None`: receives per connection).
    pub srq: Option<u32>,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        ScaleConfig {
            conns: 1000,
            storm: 1000,
            in_flight: 2,
            ddp_every: 4,
            phase: Duration::from_secs(3),
            storm_limit: Duration::from_secs(120),
            credits: 8,
            max_connections: 0,
            srq: None,
        }
    }
}

/// Round trips of the calls that started in one phase.
#[derive(Debug, Clone)]
pub struct PhaseStats {
    /// The phase.
    pub name: &'static str,
    /// How long it lasted.
    pub elapsed: Duration,
    /// Calls that completed OK.
    pub calls: u64,
    /// Median round trip (µs).
    pub p50_us: u64,
    /// 99th percentile (µs).
    pub p99_us: u64,
    /// Longest (µs).
    pub max_us: u64,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct ScaleReport {
    /// The configuration.
    pub cfg: ScaleConfig,
    /// `/proc/loadavg` at the start and at the end.
    pub load: (Option<String>, Option<String>),
    /// Resident set with the endpoints built but no connection, and with every established
    /// connection up (KiB).
    pub rss: (Option<u64>, Option<u64>),
    /// The server node's connection gauge with the established connections up, during the
    /// connect storm's peak, and after the disconnect storm.
    pub server_conns: (u64, u64, u64),
    /// Octets of receive buffers the server posted with the established connections up and
    /// at the connect storm's peak (its SRQ's, or the connections' own).
    pub recv_bytes: (u64, u64),
    /// Per phase.
    pub phases: Vec<PhaseStats>,
    /// Storm clients connected.
    pub storm_connected: usize,
    /// Storm clients the server refused (`ConnectionLimit`).
    pub storm_refused: usize,
    /// How long the connect storm and the disconnect storm took to settle.
    pub storm_times: (Duration, Duration),
    /// Calls issued / OK / failed.
    pub calls: (u64, u64, u64),
    /// Invariant breaches (lost, duplicated, wrong octets, undocumented errors, storms that
    /// did not settle), as text.
    pub violations: Vec<String>,
}

impl ScaleReport {
    /// True when every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Resident memory per established connection (KiB), when measured.
    pub fn rss_per_conn_kib(&self) -> Option<f64> {
        let (Some(a), Some(b)) = self.rss else {
            return None;
        };
        Some(b.saturating_sub(a) as f64 / self.cfg.conns.max(1) as f64)
    }
}

static PORT: AtomicU16 = AtomicU16::new(43000);

/// A soft device whose protection table holds the regions and memory windows of thousands of
/// connections (the default's 4 095 of each is about 128 client connections; hardware RNICs
/// offer millions).
fn device(fabric: &SoftFabric, ip: IpAddr) -> SoftDevice {
    let mut cfg = SoftConfig::default();
    cfg.caps.max_mr = 1 << 18;
    cfg.caps.max_mw = 1 << 18;
    cfg.key_table_entries = 1 << 19;
    fabric.open_with(ip, cfg)
}

fn reactors(name: &str) -> ReactorSet {
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    rc.backoff = BackoffConfig::shared_cores();
    rc.drain_timeout = Duration::from_secs(5);
    rc.name = name.into();
    ReactorSet::start(&rc).expect("reactors")
}

fn endpoint_config(conns: usize, buffers: usize) -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: conns,
        max_credits: 8,
        buffers,
        reply_buffers: 1024,
        buffer_size: BUF_SIZE,
        reply_buffer_size: 0,
        hugepages: false,
        ..EndpointConfig::default()
    }
}

/// The fabric, reactors, endpoints and server of a run.
struct World {
    _fabric: SoftFabric,
    sets: Vec<ReactorSet>,
    server_ep: Endpoint<SoftProvider>,
    client_ep: Endpoint<SoftProvider>,
    storm_ep: Endpoint<SoftProvider>,
    server: Server,
    addr: SocketAddr,
    /// The server's receive buffer size (`ServerOptions::inline_recv`).
    recv_size: u32,
}

impl World {
    fn new(cfg: &ScaleConfig) -> World {
        let fabric = SoftFabric::new();
        // The storm's clients have a reactor of their own, so what the established calls wait
        // for during a storm is the server's accept and teardown work, not the storm clients'.
        let sets = vec![
            reactors("scale-srv"),
            reactors("scale-cli"),
            reactors("scale-storm"),
        ];
        let port = PORT.fetch_add(1, Ordering::Relaxed);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 16, 0, 1));
        let addr = SocketAddr::new(ip, port);
        // Room for the established connections and the whole storm.
        let server_slots = cfg.conns + cfg.storm;
        let server_ep = Endpoint::new(
            &sets[0],
            device(&fabric, ip),
            endpoint_config(server_slots, 1024),
        )
        .expect("server endpoint");
        // Arguments and DDP items of every call in flight.
        let ddp_bufs = (cfg.conns * cfg.in_flight as usize * 2 + 64).min(16_384);
        let client_ep = Endpoint::new(
            &sets[1],
            device(&fabric, IpAddr::V4(Ipv4Addr::new(10, 16, 1, 1))),
            endpoint_config(cfg.conns, ddp_bufs),
        )
        .expect("client endpoint");
        let storm_ep = Endpoint::new(
            &sets[2],
            device(&fabric, IpAddr::V4(Ipv4Addr::new(10, 16, 2, 1))),
            endpoint_config(cfg.storm.max(1), 64),
        )
        .expect("storm endpoint");
        let opts = ServerOptions {
            credits: cfg.credits,
            max_conns_per_peer: 0,
            max_connections: cfg.max_connections,
            shared_receive_queue: cfg.srq,
            // A storm's connects arrive at once: the listener queues them all (the soft
            // listener's limit), as an appliance sized for thousands of clients would.
            backlog: 4096,
            // No backward calls here: one backward credit, so a connection reserves its grant
            // plus one receive in a shared receive queue.
            backchannel_credits: 1,
            ..ServerOptions::default()
        };
        let recv_size = opts.inline_recv;
        let server = Server::builder()
            .program(server_program(
                Arc::new(ServerCtx::default()),
                server_ep.buffers().clone(),
            ))
            .options(opts)
            .start(&server_ep, addr)
            .expect("server");
        World {
            _fabric: fabric,
            sets,
            server_ep,
            client_ep,
            storm_ep,
            server,
            addr,
            recv_size,
        }
    }

    fn server_conns(&self) -> u64 {
        self.server_ep.node_stats(0).map_or(0, |s| s.connections)
    }

    /// Octets of receive buffers the server has posted: its SRQ's, or every live
    /// connection's own receives (`inline_recv` octets each).
    fn recv_bytes(&self) -> u64 {
        let node = self.server_ep.node_stats(0).unwrap_or_default();
        if node.srq_depth > 0 {
            return node.srq_bytes;
        }
        let size = u64::from(self.recv_size);
        self.server
            .live_connections()
            .iter()
            .map(|c| c.snapshot().recv_posted * size)
            .sum()
    }

    fn client_options() -> ClientOptions {
        ClientOptions {
            credits: 8,
            max_reconnects: 0,
            call_timeout_ms: 60_000,
            ..ClientOptions::default()
        }
    }

    fn stop(mut self, clients: &[Client]) {
        for c in clients {
            c.close();
        }
        for s in &mut self.sets {
            if let Err(e) = s.stop() {
                eprintln!("scale: reactor stop: {e:?}");
            }
        }
    }
}

/// State shared with the callbacks.
struct Shared {
    ledger: Ledger,
    /// Calls in flight per established connection.
    out: Vec<AtomicU32>,
    /// The phase calls start in now (index into `hists`).
    phase: AtomicUsize,
    hists: Mutex<Vec<Histogram<u64>>>,
    /// Calls completed correctly, per phase they started in: a phase lasts until at least one
    /// has (progress, not time, ends a phase on a loaded machine).
    completed: [AtomicU64; 4],
}

/// Whether a call that started in `phase` has completed correctly.
fn progressed(sh: &Shared, phase: usize) -> bool {
    // Relaxed: a progress flag read by the driver; the ledger carries the results.
    sh.completed[phase].load(Ordering::Relaxed) > 0
}

const PHASES: [&str; 4] = ["steady", "connect storm", "disconnect storm", "after"];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Issues one checked call on established connection `k`; false when it was not accepted.
fn issue(sh: &Arc<Shared>, client: &Client, k: usize, seq: u64, ddp_every: u32) -> bool {
    let ddp = ddp_every != 0 && seq % u64::from(ddp_every) == 0;
    let kind = if ddp { Kind::ReadDdp } else { Kind::Inline };
    let (Some(mut args), buf) = (client.args(), ddp.then(|| client.buffer()).flatten()) else {
        return false;
    };
    if ddp && buf.is_none() {
        return false;
    }
    let arg_len = if ddp { DDP_LEN } else { SMALL };
    let id = sh.ledger.begin(kind, k as u32);
    let Some(arg_ck) = build_args(&mut args, kind, id, arg_len, SMALL, buf) else {
        sh.ledger.refused(id);
        return false;
    };
    args.expect_reply(RESULT_HEADER + SMALL);
    let phase = sh.phase.load(Ordering::Relaxed);
    let started = Instant::now();
    let sh2 = Arc::clone(sh);
    // AcqRel (both): the driver's increment and the callback's decrement of one counter.
    sh.out[k].fetch_add(1, Ordering::AcqRel);
    let cb = move |r: Result<Reply, ClientError>| {
        let us = started.elapsed().as_micros() as u64;
        let ok = r.map(|rep| verify_reply(rep.results(), None, id, arg_ck, SMALL));
        if matches!(ok, Ok(Ok(()))) {
            let _ = lock(&sh2.hists)[phase].record(us.max(1));
            sh2.completed[phase].fetch_add(1, Ordering::Relaxed);
        }
        sh2.ledger.finish(id, ok);
        sh2.out[k].fetch_sub(1, Ordering::AcqRel);
    };
    match client.call(Proc::new(PROG, 1, P_CHECK), args, cb) {
        Ok(()) => true,
        Err(_) => {
            sh.out[k].fetch_sub(1, Ordering::AcqRel);
            sh.ledger.refused(id);
            false
        }
    }
}

/// Keeps every established connection at `in_flight` calls until `done()` says stop.
fn drive(
    sh: &Arc<Shared>,
    clients: &[Client],
    cfg: &ScaleConfig,
    seq: &mut u64,
    mut done: impl FnMut() -> bool,
) {
    while !done() {
        let mut issued = false;
        for (k, c) in clients.iter().enumerate() {
            // Acquire: pairs with the callbacks' AcqRel decrement.
            while sh.out[k].load(Ordering::Acquire) < cfg.in_flight {
                *seq += 1;
                if !issue(sh, c, k, *seq, cfg.ddp_every) {
                    break;
                }
                issued = true;
            }
        }
        if !issued {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while !f() {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn phase_stats(h: &Histogram<u64>, name: &'static str, elapsed: Duration) -> PhaseStats {
    PhaseStats {
        name,
        elapsed,
        calls: h.len(),
        p50_us: h.value_at_quantile(0.50),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    }
}

/// Connects `n` clients on `ep`; they are established (or refused) when
/// [`settled`] says so.
fn connect_many(ep: &Endpoint<SoftProvider>, addr: SocketAddr, n: usize) -> Vec<Client> {
    (0..n)
        .filter_map(|_| Client::connect(ep, addr, World::client_options()).ok())
        .collect()
}

/// Whether every client is connected or has given up (refused).
fn settled(clients: &[Client]) -> bool {
    clients
        .iter()
        .all(|c| matches!(c.state(), ClientState::Connected | ClientState::Failed))
}

/// The established connections all came up (a violation for each way they did not).
fn check_established(clients: &[Client], cfg: &ScaleConfig, violations: &mut Vec<String>) {
    if clients.len() != cfg.conns || !wait_until(cfg.storm_limit, || settled(clients)) {
        violations.push("the established connections did not all come up".to_string());
    }
    if let Some(c) = clients.iter().find(|c| c.state() != ClientState::Connected) {
        violations.push(format!(
            "{} established connections did not come up (first: {:?}, reject reason {:?})",
            clients
                .iter()
                .filter(|c| c.state() != ClientState::Connected)
                .count(),
            c.state(),
            c.reject_reason()
        ));
    }
}

/// How the connect storm ended: (connected, refused with a reason); a violation for a client
/// that did neither, and (without an SRQ, under `max_connections`) for a refusal for another
/// reason than the connection limit.
fn storm_outcome(
    storm_clients: &[Client],
    cfg: &ScaleConfig,
    violations: &mut Vec<String>,
) -> (usize, usize) {
    let storm_connected = storm_clients
        .iter()
        .filter(|c| c.state() == ClientState::Connected)
        .count();
    // Refused with a reason: over `max_connections`, or (with an SRQ) when the queue cannot
    // back one more credit.
    let storm_refused = storm_clients
        .iter()
        .filter(|c| c.state() != ClientState::Connected && c.reject_reason().is_some())
        .count();
    if storm_connected + storm_refused != storm_clients.len() {
        violations.push(format!(
            "{} storm clients neither connected nor refused with a reason",
            storm_clients.len() - storm_connected - storm_refused
        ));
    }
    if cfg.max_connections > 0 && cfg.srq.is_none() {
        let limit = storm_clients
            .iter()
            .filter(|c| c.reject_reason() == Some(RejectReason::ConnectionLimit))
            .count();
        if limit != storm_refused {
            violations.push(format!(
                "{} of {storm_refused} refusals were not ConnectionLimit",
                storm_refused - limit
            ));
        }
    }
    (storm_connected, storm_refused)
}

/// Waits for every call to complete and checks the ledger (exactly once, correct results);
/// returns (issued, succeeded, failed).
fn drain_and_count(sh: &Shared, violations: &mut Vec<String>) -> (u64, u64, u64) {
    // Drain.
    if !wait_until(Duration::from_secs(60), || sh.ledger.in_flight() == 0) {
        violations.push(format!(
            "lost: {} calls still in flight after the drain",
            sh.ledger.in_flight()
        ));
    }
    let (v, dup, bad, undoc) = sh.ledger.breaches();
    if v + dup + bad + undoc > 0 {
        violations.extend(sh.ledger.kept());
    }
    let counts = sh.ledger.counts();
    let (mut issued, mut ok, mut failed) = (0, 0, 0);
    for c in counts.values() {
        issued += c.issued;
        ok += c.ok;
        failed += c.failed;
    }
    if failed > 0 {
        violations.push(format!("{failed} calls failed: {:?}", sh.ledger.errors()));
    }
    (issued, ok, failed)
}

/// Runs the benchmark.
pub fn run(cfg: &ScaleConfig) -> ScaleReport {
    let load0 = loadavg();
    let world = World::new(cfg);
    let rss0 = rss_kib();
    let mut violations = Vec::new();
    let clients = connect_many(&world.client_ep, world.addr, cfg.conns);
    check_established(&clients, cfg, &mut violations);
    let rss1 = rss_kib();
    // A client sees its connection established before the server's node counts it: wait
    // until the server counts every established one, or the disconnect storm's "back to the
    // established count" could never hold.
    let up = clients
        .iter()
        .filter(|c| c.state() == ClientState::Connected)
        .count() as u64;
    if !wait_until(cfg.storm_limit, || world.server_conns() >= up) {
        violations.push(format!(
            "the server counts {} connections, {up} clients are connected",
            world.server_conns()
        ));
    }
    let base_conns = world.server_conns();
    let recv0 = world.recv_bytes();
    let sh = Arc::new(Shared {
        ledger: Ledger::new(),
        out: (0..clients.len()).map(|_| AtomicU32::new(0)).collect(),
        phase: AtomicUsize::new(0),
        completed: Default::default(),
        hists: Mutex::new(
            PHASES
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram"))
                .collect(),
        ),
    });
    let mut seq = 0u64;
    let mut elapsed = [Duration::ZERO; 4];
    // Every phase also waits (up to `storm_limit`) until one of its calls has completed.
    let limit = cfg.storm_limit;
    // Phase 0: steady.
    let t = Instant::now();
    drive(&sh, &clients, cfg, &mut seq, || {
        (t.elapsed() >= cfg.phase && progressed(&sh, 0)) || t.elapsed() >= limit
    });
    elapsed[0] = t.elapsed();
    // Phase 1: connect storm.
    sh.phase.store(1, Ordering::Relaxed);
    let t = Instant::now();
    let storm = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let v = connect_many(&world.storm_ep, world.addr, cfg.storm);
            let ok = wait_until(cfg.storm_limit, || settled(&v));
            (v, ok, t.elapsed())
        });
        drive(&sh, &clients, cfg, &mut seq, || {
            h.is_finished() && (progressed(&sh, 1) || t.elapsed() >= limit)
        });
        h.join().expect("storm thread")
    });
    let (storm_clients, storm_ok, connect_time) = storm;
    elapsed[1] = t.elapsed();
    if !storm_ok {
        violations.push("the connect storm did not settle".to_string());
    }
    let peak = world.server_conns();
    let recv1 = world.recv_bytes();
    let (storm_connected, storm_refused) = storm_outcome(&storm_clients, cfg, &mut violations);
    // Phase 2: disconnect storm.
    sh.phase.store(2, Ordering::Relaxed);
    let t = Instant::now();
    for c in &storm_clients {
        c.close();
    }
    let mut gone_at = None;
    drive(&sh, &clients, cfg, &mut seq, || {
        if gone_at.is_none() && world.server_conns() <= base_conns {
            gone_at = Some(t.elapsed());
        }
        (gone_at.is_some() && progressed(&sh, 2)) || t.elapsed() >= limit
    });
    let disconnect_time = gone_at.unwrap_or_else(|| t.elapsed());
    elapsed[2] = t.elapsed();
    if gone_at.is_none() {
        violations.push("the disconnect storm did not settle".to_string());
    }
    let after_conns = world.server_conns();
    // Phase 3: after.
    sh.phase.store(3, Ordering::Relaxed);
    let t = Instant::now();
    drive(&sh, &clients, cfg, &mut seq, || {
        (t.elapsed() >= cfg.phase && progressed(&sh, 3)) || t.elapsed() >= limit
    });
    elapsed[3] = t.elapsed();
    let (issued, ok, failed) = drain_and_count(&sh, &mut violations);
    let phases = {
        let h = lock(&sh.hists);
        (0..PHASES.len())
            .map(|i| phase_stats(&h[i], PHASES[i], elapsed[i]))
            .collect()
    };
    // The server saw each call once (a retransmission would count again).
    let served = world.server.totals().calls;
    if served != issued {
        violations.push(format!(
            "the server counted {served} calls, {issued} were issued"
        ));
    }
    let mut all = clients;
    all.extend(storm_clients.iter().cloned());
    world.stop(&all);
    ScaleReport {
        cfg: cfg.clone(),
        load: (load0, loadavg()),
        rss: (rss0, rss1),
        server_conns: (base_conns, peak, after_conns),
        recv_bytes: (recv0, recv1),
        phases,
        storm_connected,
        storm_refused,
        storm_times: (connect_time, disconnect_time),
        calls: (issued, ok, failed),
        violations,
    }
}

impl fmt::Display for ScaleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.cfg;
        writeln!(
            f,
            "scale: {} connections to one server reactor, {} in flight each, DDP every {}; \
             storm of {}; max_connections {}; SRQ {}",
            c.conns,
            c.in_flight,
            c.ddp_every,
            c.storm,
            c.max_connections,
            c.srq.map_or("off".to_string(), |d| format!("depth {d}"))
        )?;
        writeln!(f, "load average: {:?} -> {:?}", self.load.0, self.load.1)?;
        if let (Some(a), Some(b)) = self.rss {
            writeln!(
                f,
                "resident set: {a} KiB -> {b} KiB with the connections up ({:.1} KiB per \
                 connection, both sides)",
                self.rss_per_conn_kib().unwrap_or(0.0)
            )?;
        }
        let (b, p, a) = self.server_conns;
        writeln!(
            f,
            "server connections: {b} established, {p} at the storm's peak, {a} after"
        )?;
        writeln!(
            f,
            "server receive buffers: {:.1} MiB with the established connections, {:.1} MiB at \
             the storm's peak",
            self.recv_bytes.0 as f64 / 1048576.0,
            self.recv_bytes.1 as f64 / 1048576.0
        )?;
        writeln!(
            f,
            "connect storm: {} connected, {} refused, settled in {:.1} ms; disconnect storm \
             settled in {:.1} ms",
            self.storm_connected,
            self.storm_refused,
            self.storm_times.0.as_secs_f64() * 1e3,
            self.storm_times.1.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "| phase | duration (ms) | calls | p50 (µs) | p99 (µs) | max (µs) |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|")?;
        for p in &self.phases {
            writeln!(
                f,
                "| {} | {:.0} | {} | {} | {} | {} |",
                p.name,
                p.elapsed.as_secs_f64() * 1e3,
                p.calls,
                p.p50_us,
                p.p99_us,
                p.max_us
            )?;
        }
        let (i, o, fl) = self.calls;
        writeln!(f, "calls: {i} issued, {o} OK, {fl} failed")?;
        for v in &self.violations {
            writeln!(f, "VIOLATION: {v}")?;
        }
        writeln!(f, "{}", if self.passed() { "PASS" } else { "FAIL" })
    }
}
