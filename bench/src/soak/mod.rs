//! The fault-injection soak (issue 13 §3): many clients on two reactors against two servers
//! through the public poller API on the software provider, with every kind of call, while the
//! soft provider drops connections, fails and delays completions, servers become unreachable
//! and a worker ring fills — then checks that every call was accounted for exactly once, that
//! nothing leaked and that memory stayed flat.
//!
//! Run: `cargo run --release -p rpcrdma-bench --bin soak -- [--seconds N] [--seed S]
//! [--clients N]` (defaults 120 s, seed 1, 12 clients). The binary prints one summary and
//! exits 1 when any invariant is violated. `bench/tests/soak_smoke.rs` runs [`run`] for a few
//! seconds under `cargo test`.
//!
//! # What runs
//! - [`world`]: two servers on their own endpoints and devices — server 0 with inline
//!   handlers, server 1 with handlers on one worker whose ring has two slots — and three
//!   client endpoints (inline callbacks, worker callbacks with a two-slot ring, inline).
//!   Client slot `k` connects to server `k % 2` from endpoint `k % 3` on reactor `k % 2`, with
//!   `call_timeout_ms` 8000 when `k % 3 == 0` (else none), `max_retransmits` 2 when `k` is even
//!   (else 30), `max_reconnects` 5 when `k % 4 == 1` (else 60), Version Two when `k % 4 == 3`
//!   (else Version One); every client serves the backchannel program.
//! - [`driver`]: up to 8 forward calls in flight per client, kinds drawn from the seed:
//!   inline, DDP Read chunk (argument pulled by RDMA Read), DDP Write chunk (result placed in
//!   a receptacle), long call (Position-Zero Read chunk), long reply (Reply chunk); up to 2
//!   backward calls (RFC 8167) in flight per bound session; a bind of the session after every
//!   reconnection; a client that gave up reconnecting is replaced.
//! - [`faults`]: a fault every 5–60 ms from the seeded schedule: connection drops, failed
//!   send work requests, held and poll-delayed completions, a server unreachable for up to
//!   1.2 s (its connections dropped), stalled worker handlers.
//! - [`wire`]: every argument and result is generated from the call id and carries its
//!   checksum; the handler checks the argument and echoes the checksum it computed, the
//!   caller checks the echo and regenerates the result octets.
//!
//! # Invariants (each violation is listed in the summary; any makes the run fail)
//! 1. Exactly once: every call accepted by the API completes once ([`ledger::Ledger::finish`]
//!    finds it in flight — a second completion is a duplicate), and none is left in flight
//!    after the drain ([`run`], "lost").
//! 2. Right bytes: a call that completed OK has the right results and the handler saw the
//!    right arguments ([`wire::verify_reply`], called by the driver's callbacks); handlers never
//!    saw a wrong argument ([`wire::HandlerCounters::bad_args`] is 0 on both sides).
//! 3. Only documented errors: a failed call failed with an error of
//!    [`ledger::documented`] for its kind.
//! 4. No leak: after teardown every pool buffer of every endpoint is free, each device's
//!    protection table holds what it held before the first connection (regions, windows,
//!    bound windows: `SoftDevice::key_usage`), no window was still bound when its QP was
//!    destroyed (`SoftFabric::windows_bound_at_qp_destroy`), and no node holds a connection;
//!    at the quiescent point after the drain (clients still connected) no memory window is
//!    bound ([`run`]), every payload buffer is free and reply buffers are held only as the
//!    clients' kept backchannel replies, at most [`HELD_BACK_REPLIES_PER_CLIENT`] per client
//!    (`check_quiescent`).
//! 5. Flat memory: the RSS at the quiescent point exceeds the RSS sampled after the warm-up
//!    (a quarter of the run, at most 10 s) by at most [`SoakConfig::rss_bound_kib`]
//!    (default 32 MiB).
//! 6. Liveness: no stretch of [`driver::STALL_LIMIT`] without a completion while calls are in
//!    flight, the drain finishes within [`SoakConfig::drain`], no thread panicked, and every
//!    call kind completed OK at least once (runs of 3 s or more).

pub mod driver;
pub mod faults;
pub mod ledger;
pub mod resources;
pub mod wire;
pub mod world;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rpcrdma_poller::{ConnSnapshot, NodeSnapshot};

use driver::{Driver, DriverCounts, Shared};
use faults::{FaultCounts, Injector};
use ledger::KindCounts;
use resources::{loadavg, rss_kib, Resources};
use wire::{Kind, Rng};
use world::{World, SERVERS, WORKER_SERVER};

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Length of the traffic phase.
    pub duration: Duration,
    /// Seed of the traffic mix and the fault schedule.
    pub seed: u64,
    /// Client connections.
    pub clients: usize,
    /// Forward calls in flight per client at most.
    pub window: u32,
    /// Backward calls in flight per client session at most.
    pub back_window: u32,
    /// Allowed RSS growth from the warm-up sample to the end (KiB).
    pub rss_bound_kib: u64,
    /// How long the drain may take after the traffic stops.
    pub drain: Duration,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            duration: Duration::from_secs(120),
            seed: 1,
            clients: 12,
            window: 8,
            back_window: 2,
            rss_bound_kib: 32 * 1024,
            drain: Duration::from_secs(60),
        }
    }
}

/// What a soak found.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The configuration.
    pub config: SoakConfig,
    /// Traffic phase plus drain.
    pub elapsed: Duration,
    /// Calls per kind.
    pub counts: BTreeMap<Kind, KindCounts>,
    /// Failures by kind and error.
    pub errors: BTreeMap<(Kind, String), u64>,
    /// Faults injected.
    pub faults: FaultCounts,
    /// The driver's counters.
    pub driver: DriverCounts,
    /// Client counters summed over the final clients (reconnects, losses, retransmits, ...).
    pub clients: ConnSnapshot,
    /// Server counters summed over both servers.
    pub servers: ConnSnapshot,
    /// Node counters summed over every node of every endpoint.
    pub nodes: NodeSnapshot,
    /// Resources before the first connection, at the quiescent point, after teardown.
    pub res: [Resources; 3],
    /// RSS after the warm-up and at the quiescent point (KiB).
    pub rss: (Option<u64>, Option<u64>),
    /// `/proc/loadavg` at the start and at the end.
    pub load: (Option<String>, Option<String>),
    /// Handler counters: server 0, server 1, clients' backchannel
    /// `(handled, bad_args, pool_empty, stalled, binds)`.
    pub handlers: [(u64, u64, u64, u64, u64); 3],
    /// Violations (texts, the first [`ledger::MAX_KEPT`] of the ledger's plus the run's own).
    pub violations: Vec<String>,
    /// Violations counted.
    pub violation_count: u64,
}

impl SoakReport {
    /// True when no invariant was violated.
    pub fn passed(&self) -> bool {
        self.violation_count == 0
    }
}

static PANICS: AtomicU64 = AtomicU64::new(0);

/// Counts panics on any thread (the previous hook still runs).
fn count_panics() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info);
        }));
    });
}

fn handler_tuple(c: &wire::HandlerCounters) -> (u64, u64, u64, u64, u64) {
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    (
        g(&c.handled),
        g(&c.bad_args),
        g(&c.pool_empty),
        g(&c.stalled),
        g(&c.binds),
    )
}

/// Waits up to `limit` for `f` to hold.
fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs a soak and checks its invariants (see the module doc).
pub fn run(cfg: &SoakConfig) -> SoakReport {
    count_panics();
    let panics0 = PANICS.load(Ordering::SeqCst);
    let load0 = loadavg();
    let started = Instant::now();
    let mut world = World::new();
    let mut own: Vec<String> = Vec::new();
    let res0 = Resources::take(&world.fabric, &world.eps, &world.devs);
    world.start_servers();
    let shared = Shared::new(cfg.clients);
    let slots: Vec<_> = (0..cfg.clients)
        .map(|k| world.connect(k, 0).expect("client"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let injector = Injector {
        registry: Arc::clone(&world.registry),
        fabric: world.fabric.clone(),
        servers: world.addrs.clone(),
        ctxs: world.ctxs.clone(),
        worker_servers: vec![WORKER_SERVER],
        rng: Rng::new(cfg.seed ^ 0xfa17),
    };
    let (dcounts, slots, faults, rss_end, res1) = std::thread::scope(|sc| {
        let st = Arc::clone(&stop);
        let fault_thread = sc.spawn(move || injector.run(&st));
        let mut d = Driver {
            world: &world,
            slots,
            shared: Arc::clone(&shared),
            rng: Rng::new(cfg.seed),
            window: cfg.window,
            back_window: cfg.back_window,
            counts: DriverCounts::default(),
        };
        let warm = started + (cfg.duration / 4).min(Duration::from_secs(10));
        d.run(started + cfg.duration, warm);
        stop.store(true, Ordering::Release);
        let faults = fault_thread.join().unwrap_or_default();
        // Drain: everything in flight completes (faults are undone, servers reachable).
        let mut done = 0;
        let mut progress = Instant::now();
        let drained = wait_until(cfg.drain, || {
            // Keep binding sessions so parked backward calls can go.
            for k in 0..d.slots.len() {
                d.maintain(k);
            }
            d.watch(&mut done, &mut progress, Instant::now());
            shared.ledger.in_flight() == 0
        });
        if !drained {
            own.push(format!(
                "lost: {} calls still in flight {:?} after the drain; client states {:?}",
                shared.ledger.in_flight(),
                shared.ledger.in_flight_sample(12),
                d.slots
                    .iter()
                    .map(|s| (s.client.state(), s.client.pending()))
                    .collect::<Vec<_>>()
            ));
        }
        // Quiescent point: no window bound once every call is complete.
        let quiet = wait_until(Duration::from_secs(10), || {
            Resources::take(&world.fabric, &world.eps, &world.devs)
                .keys_total()
                .windows_bound
                == 0
        });
        let res1 = Resources::take(&world.fabric, &world.eps, &world.devs);
        check_quiescent(&res1, d.slots.len(), &mut own);
        if !quiet {
            own.push(format!(
                "{} memory windows still bound with no call in flight",
                res1.keys_total().windows_bound
            ));
        }
        (d.counts, d.slots, faults, rss_kib(), res1)
    });
    let totals = |v: &mut ConnSnapshot, s: &ConnSnapshot| v.accumulate(s);
    let mut clients = ConnSnapshot::default();
    for s in &slots {
        totals(&mut clients, &s.client.stats().snapshot());
    }
    let mut servers = ConnSnapshot::default();
    for s in &world.servers {
        totals(&mut servers, &s.totals());
    }
    let mut nodes = NodeSnapshot::default();
    for ep in &world.eps {
        for i in 0..ep.nodes() {
            if let Some(n) = ep.node_stats(i) {
                nodes.accumulate(&n);
            }
        }
    }
    let handlers = [
        handler_tuple(&world.ctxs[0].counters),
        handler_tuple(&world.ctxs[SERVERS - 1].counters),
        handler_tuple(&world.client_counters),
    ];
    world.teardown(&slots);
    drop(slots);
    let res2 = wait_settled(&world, &res0);
    check_end(
        cfg, &res0, &res1, &res2, &dcounts, rss_end, &handlers, &mut own,
    );
    let panics = PANICS.load(Ordering::SeqCst) - panics0;
    if panics > 0 {
        own.push(format!("{panics} threads panicked"));
    }
    let counts = shared.ledger.counts();
    if cfg.duration >= Duration::from_secs(3) {
        for k in Kind::ALL {
            if counts.get(&k).map_or(0, |c| c.ok) == 0 {
                own.push(format!("no {} call completed OK", k.name()));
            }
        }
    }
    let mut violations = shared.ledger.kept();
    let violation_count = shared.ledger.breaches().0 + own.len() as u64;
    violations.extend(own);
    SoakReport {
        config: cfg.clone(),
        elapsed: started.elapsed(),
        counts,
        errors: shared.ledger.errors(),
        faults,
        driver: dcounts,
        clients,
        servers,
        nodes,
        res: [res0, res1, res2],
        rss: (dcounts.rss_warm_kib, rss_end),
        load: (load0, loadavg()),
        handlers,
        violations,
        violation_count,
    }
}

/// Reply buffers a client connection may hold with nothing in flight: its backchannel keeps
/// the last reply of each backward slot until the engine reuses the slot (the Send may still
/// read it; `poller/src/backchannel.rs`, `held`), and slots are fewer than twice the backward
/// credits the client grants (4 in the soak).
pub const HELD_BACK_REPLIES_PER_CLIENT: usize = 2 * 4;

/// Invariant 4 at the quiescent point: with no call in flight every payload buffer is free,
/// and reply buffers are held only as backchannel replies kept for their slot
/// ([`HELD_BACK_REPLIES_PER_CLIENT`] per client connection at most).
fn check_quiescent(r: &Resources, clients: usize, own: &mut Vec<String>) {
    let held_replies: usize = r.pools.iter().map(|p| p.replies - p.replies_free).sum();
    if r.pools.iter().any(|p| p.bufs_free != p.bufs)
        || held_replies > clients * HELD_BACK_REPLIES_PER_CLIENT
    {
        own.push(format!(
            "quiescent point: pools {:?} (at most {} reply buffers may be held)",
            r.pools,
            clients * HELD_BACK_REPLIES_PER_CLIENT
        ));
    }
}

/// Resources after teardown, once they stop changing (buffers return from other threads).
fn wait_settled(world: &World, start: &Resources) -> Resources {
    let mut r = Resources::take(&world.fabric, &world.eps, &world.devs);
    wait_until(Duration::from_secs(10), || {
        r = Resources::take(&world.fabric, &world.eps, &world.devs);
        r.free() == r.total() && r.keys == start.keys && r.connections == 0
    });
    r
}

/// Invariants 2 (handler side), 4 and 5.
#[allow(clippy::too_many_arguments)]
fn check_end(
    cfg: &SoakConfig,
    res0: &Resources,
    _res1: &Resources,
    res2: &Resources,
    d: &DriverCounts,
    rss_end: Option<u64>,
    handlers: &[(u64, u64, u64, u64, u64); 3],
    own: &mut Vec<String>,
) {
    for (i, h) in handlers.iter().enumerate() {
        if h.1 != 0 {
            own.push(format!("handlers {i} saw {} wrong arguments", h.1));
        }
    }
    for (i, (p0, p2)) in res0.pools.iter().zip(&res2.pools).enumerate() {
        if !p2.all_free() || p0 != p2 {
            own.push(format!("endpoint {i} pools: start {p0:?}, end {p2:?}"));
        }
    }
    for (i, (k0, k2)) in res0.keys.iter().zip(&res2.keys).enumerate() {
        if k0 != k2 {
            own.push(format!("device {i} keys: start {k0:?}, end {k2:?}"));
        }
    }
    if res2.bound_at_destroy != res0.bound_at_destroy {
        own.push(format!(
            "{} memory windows were still bound when their QP was destroyed",
            res2.bound_at_destroy - res0.bound_at_destroy
        ));
    }
    if res2.connections != 0 {
        own.push(format!(
            "{} connections left in the nodes",
            res2.connections
        ));
    }
    if let (Some(w), Some(e)) = (d.rss_warm_kib, rss_end) {
        if e > w + cfg.rss_bound_kib {
            own.push(format!(
                "RSS grew from {w} KiB to {e} KiB (bound {} KiB)",
                cfg.rss_bound_kib
            ));
        }
    }
}

impl std::fmt::Display for SoakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "soak: seed {} clients {} duration {:.0} s (elapsed {:.1} s with drain)",
            c.seed,
            c.clients,
            c.duration.as_secs_f64(),
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "{:<11} {:>10} {:>10} {:>8} {:>8}",
            "calls", "issued", "ok", "failed", "refused"
        )?;
        let mut t = KindCounts::default();
        for (k, n) in &self.counts {
            writeln!(
                f,
                "{:<11} {:>10} {:>10} {:>8} {:>8}",
                k.name(),
                n.issued,
                n.ok,
                n.failed,
                n.refused
            )?;
            t.issued += n.issued;
            t.ok += n.ok;
            t.failed += n.failed;
            t.refused += n.refused;
        }
        writeln!(
            f,
            "{:<11} {:>10} {:>10} {:>8} {:>8}",
            "total", t.issued, t.ok, t.failed, t.refused
        )?;
        let mut errs = String::new();
        for ((k, e), n) in &self.errors {
            let _ = write!(errs, " {}:{e}={n}", k.name());
        }
        writeln!(
            f,
            "failed by error:{}",
            if errs.is_empty() { " none" } else { &errs }
        )?;
        let x = &self.faults;
        writeln!(
            f,
            "faults: drop {} fail-send {} hold {} delay {} unreachable {} stall {} (idle ticks {})",
            x.drop, x.fail_send, x.hold, x.delay, x.unreachable, x.stall, x.idle
        )?;
        let s = &self.clients;
        writeln!(
            f,
            "clients: reconnects {} losses {} connect-failures {} retransmits {} replaced {} \
             remote-invalidations {} reply-chunk-replies {}",
            s.reconnects,
            s.connection_losses,
            s.connect_failures,
            s.retransmits,
            self.driver.replacements,
            s.remote_invalidations,
            s.reply_chunk_replies
        )?;
        let v = &self.servers;
        writeln!(
            f,
            "servers: calls {} replies {} read-chunk {} write-chunk {} reply-chunk {} long {} \
             back-calls {} back-retransmits {} sessions-expired {}",
            v.calls,
            v.replies,
            v.read_chunk_calls,
            v.write_chunk_calls,
            v.reply_chunk_calls,
            v.long_calls,
            v.back_calls,
            v.back_retransmits,
            v.sessions_expired
        )?;
        writeln!(
            f,
            "nodes: worker-ring-full {} verbs-errors {} stray-completions {}; handlers \
             (handled, bad, pool-empty, stalled, binds) {:?}; driver busy {} pool-empty {} \
             longest-stall {} ms",
            self.nodes.worker_ring_full,
            self.nodes.verbs_errors,
            self.nodes.stray_completions,
            self.handlers,
            self.driver.busy,
            self.driver.pool_empty,
            self.driver.longest_stall_ms
        )?;
        for (name, r) in ["start", "quiescent", "end"].iter().zip(&self.res) {
            let k = r.keys_total();
            writeln!(
                f,
                "resources {name:<9}: pool buffers free {}/{} keys regions {} windows {} \
                 bound {} bound-at-destroy {} connections {}",
                r.free(),
                r.total(),
                k.regions,
                k.windows,
                k.windows_bound,
                r.bound_at_destroy,
                r.connections
            )?;
        }
        let held: Vec<String> = self.res[1]
            .pools
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.all_free())
            .map(|(i, p)| {
                format!(
                    "ep{i} payload {}/{} reply {}/{}",
                    p.bufs_free, p.bufs, p.replies_free, p.replies
                )
            })
            .collect();
        if !held.is_empty() {
            writeln!(f, "quiescent pools not all free: {}", held.join(", "))?;
        }
        let kib = |v: Option<u64>| v.map_or("n/a".into(), |v| format!("{v} KiB"));
        writeln!(
            f,
            "rss: after warm-up {} end {} (bound +{} KiB)",
            kib(self.rss.0),
            kib(self.rss.1),
            c.rss_bound_kib
        )?;
        writeln!(
            f,
            "loadavg: start {} end {}",
            self.load.0.as_deref().unwrap_or("n/a"),
            self.load.1.as_deref().unwrap_or("n/a")
        )?;
        if self.passed() {
            writeln!(f, "result: PASS (every invariant held)")
        } else {
            writeln!(f, "result: FAIL ({} violations)", self.violation_count)?;
            for v in &self.violations {
                writeln!(f, "  violation: {v}")?;
            }
            Ok(())
        }
    }
}
