//! Counters an operator can scrape: a registry of endpoints, servers and clients
//! ([`Metrics`]), rendered in the Prometheus text format ([`prometheus`]) and served on a local
//! HTTP port by a thread of its own ([`MetricsServer`]); latency histograms per RPC procedure
//! ([`latency`]). What each metric means: docs/observability.md.
//!
//! Normal operation: the registry holds readers only — node counter blocks, [`Server`](crate::Server) and
//! [`Client`] handles — and renders on demand. Counters are read with relaxed loads (single
//! writer each, see [`crate::api_stats`]); histograms are copied out of the reactors through
//! the hand-off of [`latency`], which never makes a reactor wait. Nothing here runs on a
//! reactor. A server whose `ServerOptions::metrics_addr` is set starts its own registry and
//! port ([`Server::metrics_addr`](crate::Server::metrics_addr)), which lives as long as the server.
//!
//! Recovery: a reactor that does not answer a histogram request within [`HISTOGRAM_WAIT`]
//! (all requests are raised first, so the waits overlap) is rendered with the last copy it
//! served; a closed client is rendered without histograms. Rendering never fails.

pub mod http;
pub mod latency;
pub mod parse;
pub mod prometheus;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::Provider;

use crate::api_stats::{ConnSnapshot, ConnStats, NodeSnapshot, NodeStats};
use crate::client::{Client, ClientState};
use crate::runtime::Endpoint;
pub use http::MetricsServer;
pub use latency::{CopyRequest, LatencyReader, ProcKey, ProcLatency, MAX_PROCS};
pub use prometheus::{Exposition, Kind};

/// How long rendering waits for one reactor's histogram copy.
pub const HISTOGRAM_WAIT: Duration = Duration::from_millis(500);

/// Node counters that are gauges (the others are counters).
const NODE_GAUGES: &[&str] = &[
    "connections",
    "worker_ring_used",
    "worker_overflow",
    "srq_depth",
    "srq_posted",
    "srq_held",
    "srq_held_max",
    "srq_bytes",
];
/// Connection counters that are gauges.
const CONN_GAUGES: &[&str] = &[
    "credits_in_use",
    "credits_granted",
    "queued",
    "rdma_version",
    "back_in_flight",
    "back_queued",
    "recv_posted",
];
/// Histogram bucket bounds: (`le` label, nanoseconds).
const BUCKETS: &[(&str, u64)] = &[
    ("0.000001", 1_000),
    ("0.0000025", 2_500),
    ("0.000005", 5_000),
    ("0.00001", 10_000),
    ("0.000025", 25_000),
    ("0.00005", 50_000),
    ("0.0001", 100_000),
    ("0.00025", 250_000),
    ("0.0005", 500_000),
    ("0.001", 1_000_000),
    ("0.0025", 2_500_000),
    ("0.005", 5_000_000),
    ("0.01", 10_000_000),
    ("0.025", 25_000_000),
    ("0.05", 50_000_000),
    ("0.1", 100_000_000),
    ("0.25", 250_000_000),
    ("0.5", 500_000_000),
    ("1", 1_000_000_000),
    ("2.5", 2_500_000_000),
    ("5", 5_000_000_000),
    ("10", 10_000_000_000),
];
/// Quantiles of the summaries.
const QUANTILES: &[(&str, f64)] = &[("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99), ("0.999", 0.999)];

/// A server as the registry sees it: the registry holds these trait objects and knows
/// nothing else of servers (`crate::server` implements it for a server handle, and for a
/// reference that does not keep the server alive).
pub(crate) trait ServerSource: Send + Sync {
    /// What the registry renders of the server now; `None` when the server is gone.
    fn sample(&self) -> Option<ServerSample>;
}

/// One server's counters and histogram readers, read for one rendering.
pub(crate) struct ServerSample {
    /// Its live connections.
    pub conns: Vec<ConnStats>,
    /// Sums over every connection it accepted.
    pub totals: ConnSnapshot,
    /// Connections accepted.
    pub accepted: u64,
    /// Connect requests rejected.
    pub rejected: u64,
    /// Per node: its latency histograms (when the server keeps them).
    pub latency: Vec<(usize, LatencyReader)>,
}

/// Families an application adds to a registry ([`Metrics::add_collector`]): called on every
/// scrape, after the engine's own families, on the metrics port's thread (never on a reactor).
///
/// Each family is written with [`Exposition::family`] and its samples with
/// [`Exposition::sample`]. Names follow the Prometheus conventions (`snake_case`, base units,
/// counters ending in `_total`, octets in `_bytes`) and must not start with `rpcrdma_conn_`,
/// `rpcrdma_node_`, `rpcrdma_server_` or `rpcrdma_client_`, the engine's own prefixes; an
/// application's own prefix (e.g. `rpcrdma_nfsd_`) keeps its families apart.
pub trait Collector: Send + Sync {
    /// Writes this collector's families into `e`.
    fn collect(&self, e: &mut Exposition);
}

#[derive(Default)]
struct Sources {
    endpoints: Vec<(String, Vec<NodeStats>)>,
    servers: Vec<(String, Box<dyn ServerSource>)>,
    clients: Vec<(String, Client)>,
    collectors: Vec<Arc<dyn Collector>>,
}

/// A registry of what to expose (cheap to clone; shared). See the module documentation.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Sources>>,
}

impl core::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// One connection's rendered identity and counters.
struct ConnRow {
    role: &'static str,
    name: String,
    id: String,
    peer: String,
    snap: ConnSnapshot,
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, Sources> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Exposes the node counters of `ep` under the label `endpoint="name"`.
    pub fn add_endpoint<P: Provider>(&self, name: &str, ep: &Endpoint<P>) {
        let nodes = (0..ep.nodes())
            .filter_map(|i| ep.node_stats_reader(i))
            .collect();
        self.sources().endpoints.push((name.into(), nodes));
    }

    /// Exposes a server (`crate::server` adds its handles through this).
    pub(crate) fn add_server_source(&self, name: &str, server: Box<dyn ServerSource>) {
        self.sources().servers.push((name.into(), server));
    }

    /// Exposes `client`: its connection counters and, when it keeps them, its round-trip
    /// histograms.
    pub fn add_client(&self, name: &str, client: &Client) {
        self.sources().clients.push((name.into(), client.clone()));
    }

    /// Adds an application's families (see [`Collector`]); they appear on every scrape from
    /// now on, after the engine's.
    pub fn add_collector(&self, collector: Arc<dyn Collector>) {
        self.sources().collectors.push(collector);
    }

    /// Serves this registry on `addr` (see [`MetricsServer`]).
    pub fn serve(&self, addr: SocketAddr) -> std::io::Result<MetricsServer> {
        MetricsServer::start(addr, self.clone())
    }

    /// The Prometheus text exposition (format 0.0.4) of everything registered now.
    pub fn render(&self) -> String {
        let src = self.sources();
        let servers: Vec<(String, ServerSample)> = src
            .servers
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.sample()?)))
            .collect();
        let mut e = Exposition::new();
        render_nodes(&mut e, &src.endpoints);
        let mut rows = Vec::new();
        for (name, s) in &servers {
            rows.extend(s.conns.iter().map(|c| row("server", name, c)));
        }
        for (name, c) in &src.clients {
            rows.push(row("client", name, &c.stats()));
        }
        render_conns(&mut e, &rows);
        render_servers(&mut e, &servers);
        // Ask every reactor first, then collect: the waits overlap.
        let deadline = Instant::now() + HISTOGRAM_WAIT;
        let mut asked = Vec::new();
        for (name, c) in &src.clients {
            if let (Some(r), false) = (c.latency(), c.state() == ClientState::Closed) {
                let id = c.stats().id().to_string();
                asked.push((0, name.clone(), id, r.request(), r));
            }
        }
        for (name, s) in &servers {
            for (node, r) in &s.latency {
                asked.push((1, name.clone(), node.to_string(), r.request(), r.clone()));
            }
        }
        let (mut client, mut server) = (Vec::new(), Vec::new());
        for (side, name, key, req, r) in asked {
            let row = (name, key, r.collect(req, deadline));
            if side == 0 {
                client.push(row);
            } else {
                server.push(row);
            }
        }
        let help = "Round trip of each call per RPC procedure: call on the wire to reply \
                    received (last transmission), on the client reactor's poll clock.";
        render_latency(&mut e, "rpcrdma_client_rtt", ("conn", help), &client);
        let help = "Time each call spent in the server per RPC procedure: call taken up to \
                    its reply's Send completed, on the node reactor's poll clock.";
        render_latency(&mut e, "rpcrdma_server_latency", ("node", help), &server);
        for c in &src.collectors {
            c.collect(&mut e);
        }
        e.finish()
    }
}

fn row(role: &'static str, name: &str, c: &ConnStats) -> ConnRow {
    ConnRow {
        role,
        name: name.into(),
        id: c.id().to_string(),
        peer: c.peer().map(|a| a.to_string()).unwrap_or_default(),
        snap: c.snapshot(),
    }
}

/// Counter block fields whose exposition name differs from the field's, to end in the unit as
/// the Prometheus naming conventions ask (`_bytes_total`).
const RENAMED: &[(&str, &str)] = &[("bytes_in", "received_bytes"), ("bytes_out", "sent_bytes")];

/// A family name for a counter block field.
fn metric(prefix: &str, field: &str, gauges: &[&str]) -> (String, Kind) {
    let named = RENAMED.iter().find(|(f, _)| *f == field).map(|(_, n)| *n);
    let field = named.unwrap_or(field);
    if gauges.contains(&field) {
        (format!("{prefix}_{field}"), Kind::Gauge)
    } else {
        (format!("{prefix}_{field}_total"), Kind::Counter)
    }
}

fn render_nodes(e: &mut Exposition, eps: &[(String, Vec<NodeStats>)]) {
    let snaps: Vec<(&str, String, Vec<u64>)> = eps
        .iter()
        .flat_map(|(n, nodes)| {
            nodes
                .iter()
                .enumerate()
                .map(move |(i, s)| (n.as_str(), i.to_string(), s.snapshot().values()))
        })
        .collect();
    for (k, (field, doc)) in NodeSnapshot::FIELDS.iter().enumerate() {
        let (name, kind) = metric("rpcrdma_node", field, NODE_GAUGES);
        e.family(&name, doc, kind);
        for (ep, node, v) in &snaps {
            e.sample(&name, &[("endpoint", ep), ("node", node)], v[k]);
        }
    }
}

fn render_conns(e: &mut Exposition, rows: &[ConnRow]) {
    let values: Vec<Vec<u64>> = rows.iter().map(|r| r.snap.values()).collect();
    for (k, (field, doc)) in ConnSnapshot::FIELDS.iter().enumerate() {
        let (name, kind) = metric("rpcrdma_conn", field, CONN_GAUGES);
        e.family(&name, doc, kind);
        for (r, v) in rows.iter().zip(&values) {
            let labels = [
                ("role", r.role),
                ("name", r.name.as_str()),
                ("conn", r.id.as_str()),
                ("peer", r.peer.as_str()),
            ];
            e.sample(&name, &labels, v[k]);
        }
    }
}

/// A per-server count: family name, help, reader.
type ServerCount = (&'static str, &'static str, fn(&ServerSample) -> u64);

fn render_servers(e: &mut Exposition, servers: &[(String, ServerSample)]) {
    let totals: Vec<Vec<u64>> = servers.iter().map(|(_, s)| s.totals.values()).collect();
    for (k, (field, doc)) in ConnSnapshot::FIELDS.iter().enumerate() {
        if *field == "rdma_version" {
            continue;
        }
        let (name, kind) = metric("rpcrdma_server", field, CONN_GAUGES);
        let help = format!("Sum over every connection the server accepted: {doc}");
        e.family(&name, &help, kind);
        for ((n, _), v) in servers.iter().zip(&totals) {
            e.sample(&name, &[("name", n)], v[k]);
        }
    }
    let counts: [ServerCount; 2] = [
        (
            "rpcrdma_server_accepted_total",
            "Connections the server accepted.",
            |s| s.accepted,
        ),
        (
            "rpcrdma_server_rejected_total",
            "Connect requests the server rejected, whatever the reason.",
            |s| s.rejected,
        ),
    ];
    for (name, help, count) in counts {
        e.family(name, help, Kind::Counter);
        for (n, s) in servers {
            e.sample(name, &[("name", n)], count(s));
        }
    }
}

/// Latency rows: (name label, second label's value, histograms).
type LatRows = [(String, String, Vec<ProcLatency>)];

/// Histogram and summary families `{base}_seconds`, `{base}_quantile_seconds`; `second` is the
/// second label's name (`conn` or `node`) and the help text.
fn render_latency(e: &mut Exposition, base: &str, second: (&str, &str), lat: &LatRows) {
    let (key, help) = second;
    // (histogram, label values: name, conn or node, prog, vers, proc)
    let rows: Vec<(&ProcLatency, [String; 5])> = lat
        .iter()
        .flat_map(|(n, id, ps)| {
            ps.iter().map(move |p| {
                let (prog, vers, proc_num) = proc_labels(p);
                (p, [n.clone(), id.clone(), prog, vers, proc_num])
            })
        })
        .collect();
    let labels = |v: &'_ [String; 5]| -> [(&str, String); 5] {
        let names = ["name", key, "prog", "vers", "proc"];
        core::array::from_fn(|i| (names[i], v[i].clone()))
    };
    let hname = format!("{base}_seconds");
    e.family(&hname, help, Kind::Histogram);
    for (p, v) in &rows {
        let l = labels(v);
        let l = l.each_ref().map(|(k, v)| (*k, v.as_str()));
        let bucket = format!("{hname}_bucket");
        for (le, ns) in BUCKETS {
            let c = p.hist.count_between(0, *ns);
            e.sample(&bucket, &with(&l, ("le", le)), c);
        }
        e.sample(&bucket, &with(&l, ("le", "+Inf")), p.hist.len());
        e.sample(&format!("{hname}_sum"), &l, seconds(p.sum_ns));
        e.sample(&format!("{hname}_count"), &l, p.hist.len());
    }
    let qname = format!("{base}_quantile_seconds");
    let help = format!("Quantiles of {hname} (hdrhistogram, two significant digits).");
    e.family(&qname, &help, Kind::Summary);
    for (p, v) in &rows {
        let l = labels(v);
        let l = l.each_ref().map(|(k, v)| (*k, v.as_str()));
        for (qs, q) in QUANTILES {
            let v = seconds(p.hist.value_at_quantile(*q));
            e.sample(&qname, &with(&l, ("quantile", qs)), v);
        }
        e.sample(&format!("{qname}_sum"), &l, seconds(p.sum_ns));
        e.sample(&format!("{qname}_count"), &l, p.hist.len());
    }
}

fn proc_labels(p: &ProcLatency) -> (String, String, String) {
    match p.key {
        Some(k) => (
            k.prog.to_string(),
            k.vers.to_string(),
            k.proc_num.to_string(),
        ),
        None => ("other".into(), "other".into(), "other".into()),
    }
}

fn with<'a>(l: &[(&'a str, &'a str); 5], extra: (&'a str, &'a str)) -> [(&'a str, &'a str); 6] {
    [l[0], l[1], l[2], l[3], l[4], extra]
}

/// Nanoseconds as seconds, as the exposition writes them.
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}
